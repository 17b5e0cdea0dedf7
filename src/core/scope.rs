//! What an actor's grant lets it hold (SPEC §3), and how a live hold may
//! change (§11): the rules on keys, asked by the in-process scheduler and by
//! the etcd table alike, so that one rule is written once.
//!
//! Everything here is decided on keys the caller already resolved (symlinks
//! followed, folded as the session folds case): resolving touches the file
//! system, deciding does not.
//!
//! One relation underlies every rule: a key at a mode lies *within* a set
//! of keys when one of them contains it (equal counts) at a mode at least
//! as strong. A fenced actor's writes and fences lie within its grant
//! fence; a writable child's fence within its fenced parent's; a narrowed
//! fence within the old one; and widening a hold adds only the keys not
//! within it already.

use std::path::{Path, PathBuf};

use crate::core::key::{self, Area, Key};
use crate::core::table::ScopeKind;
use crate::error::{Error, Result};
use crate::kinds::{HoldKind, Mode};

/// An actor's scope: what its grant lets it write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Anything under its root.
    Workspace,
    /// Only inside its grant fence's keys, each at most at its mode.
    Fenced(Vec<(Key, Mode)>),
    /// Nothing: shared holds only.
    ReadOnly,
}

/// One target of a request, resolved by the caller.
#[derive(Debug, Clone)]
pub(crate) enum Wanted {
    /// `Target::workspace()`: the actor's writable scope.
    Workspace(Mode),
    /// A resolved key and the area of the grant it lies in.
    Key(Key, Mode, Area),
}

/// `key` at `mode` lies within `area`: inside one of its keys held at a
/// mode at least as strong.
pub(crate) fn within(key: &Key, mode: Mode, area: &[(Key, Mode)]) -> bool {
    area.iter().any(|(k, m)| key::inside(key, k) && *m >= mode)
}

/// The keys of `wanted` not within `held`: what widening a hold by
/// `wanted` adds. Only these are judged: a waiter on the part already held
/// is blocked by this very hold, and asking again for it takes nothing
/// from anyone.
pub(crate) fn uncovered(held: &[(Key, Mode)], wanted: Vec<(Key, Mode)>) -> Vec<(Key, Mode)> {
    wanted
        .into_iter()
        .filter(|(k, m)| !within(k, *m, held))
        .collect()
}

/// Narrowing a fence: every kept key must lie within the fence as it is
/// (a mode may only weaken), else `OutsideFence` naming the first that
/// does not.
pub(crate) fn check_narrow(actor: &str, held: &[(Key, Mode)], kept: &[(Key, Mode)]) -> Result<()> {
    match kept.iter().find(|(k, m)| !within(k, *m, held)) {
        Some((key, _)) => Err(outside_fence(actor, key, held)),
        None => Ok(()),
    }
}

fn outside_fence(actor: &str, key: &Key, fence: &[(Key, Mode)]) -> Error {
    Error::OutsideFence {
        path: key.path.clone(),
        actor: actor.to_string(),
        fence: fence.iter().map(|(k, _)| k.path.clone()).collect(),
    }
}

fn path_of(wanted: &Wanted, root: &Key) -> PathBuf {
    match wanted {
        Wanted::Workspace(_) => root.path.clone(),
        Wanted::Key(key, ..) => key.path.clone(),
    }
}

impl Scope {
    /// Its kind, as the dump shows it.
    pub(crate) fn kind(&self) -> ScopeKind {
        match self {
            Scope::Workspace => ScopeKind::Workspace,
            Scope::Fenced(_) => ScopeKind::Fenced,
            Scope::ReadOnly => ScopeKind::ReadOnly,
        }
    }

    /// A read-only actor takes shared holds only. Asked again for each
    /// target before its path is looked up, so that the refusal names the
    /// path as it was asked for.
    pub(crate) fn check_mode(&self, actor: &str, mode: Mode, path: &Path) -> Result<()> {
        if mode == Mode::Exclusive && *self == Scope::ReadOnly {
            return Err(Error::ReadOnly {
                actor: actor.to_string(),
                path: path.to_path_buf(),
            });
        }
        Ok(())
    }

    /// The keys a request of `kind` by the actor `actor` (rooted at the
    /// tree `root`) takes for `wanted`, merged; or why it may not.
    ///
    /// A read-only actor takes shared holds only; a key under a read-only
    /// root is shared only; `workspace()` is the writable scope (a fenced
    /// actor's grant fence, each key at the weaker of the two modes); a
    /// fenced actor's exclusive keys, and every key of its fences, lie
    /// within its grant fence. A shared call reads anywhere.
    pub(crate) fn claim_keys(
        &self,
        actor: &str,
        root: &Key,
        kind: HoldKind,
        wanted: Vec<Wanted>,
    ) -> Result<Vec<(Key, Mode)>> {
        if wanted.is_empty() {
            return Err(Error::invalid("", "no targets were given"));
        }
        let mut keys = Vec::with_capacity(wanted.len());
        for want in wanted {
            let mode = match &want {
                Wanted::Workspace(mode) | Wanted::Key(_, mode, _) => *mode,
            };
            self.check_mode(actor, mode, &path_of(&want, root))?;
            match (want, self) {
                (Wanted::Workspace(mode), Scope::Fenced(fence)) => {
                    keys.extend(fence.iter().map(|(k, m)| (k.clone(), (*m).min(mode))))
                }
                (Wanted::Workspace(mode), _) => keys.push((root.clone(), mode)),
                (Wanted::Key(key, mode, area), scope) => {
                    if area == Area::ReadOnly && mode == Mode::Exclusive {
                        return Err(Error::Policy {
                            path: key.path,
                            reason: "it lies under a read-only root".into(),
                        });
                    }
                    if let Scope::Fenced(fence) = scope {
                        let must_be_within = mode == Mode::Exclusive || kind == HoldKind::Fence;
                        if must_be_within && !within(&key, mode, fence) {
                            return Err(outside_fence(actor, &key, fence));
                        }
                    }
                    keys.push((key, mode));
                }
            }
        }
        Ok(key::merge(keys))
    }

    /// Whether an actor of this scope, `parent`, may make a child of scope
    /// `child` rooted at the tree `child_root`: a read-only actor's
    /// children are read-only; a writable child of a fenced actor is
    /// fenced within its parent's fence (a workspace child would reach its
    /// whole root). A read-only child needs no fence.
    pub(crate) fn check_child(&self, parent: &str, child: &Scope, child_root: &Key) -> Result<()> {
        match (self, child) {
            (_, Scope::ReadOnly) | (Scope::Workspace, _) => Ok(()),
            (Scope::ReadOnly, _) => Err(Error::ReadOnly {
                actor: parent.to_string(),
                path: child_root.path.clone(),
            }),
            (Scope::Fenced(fence), Scope::Workspace) => {
                Err(outside_fence(parent, child_root, fence))
            }
            (Scope::Fenced(fence), Scope::Fenced(keys)) => check_narrow(parent, fence, keys),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str, tree: bool) -> Key {
        Key {
            path: path.into(),
            norm: path.into(),
            tree,
        }
    }

    fn at(path: &str, mode: Mode) -> Wanted {
        let tree = path.ends_with('/');
        Wanted::Key(key(path.trim_end_matches('/'), tree), mode, Area::Writable)
    }

    fn fenced(keys: &[(&str, Mode)]) -> Scope {
        Scope::Fenced(keys.iter().map(|(p, m)| (key(p, true), *m)).collect())
    }

    fn refusal(result: Result<Vec<(Key, Mode)>>) -> &'static str {
        result.err().map(|e| e.kind()).unwrap_or("granted")
    }

    #[test]
    fn a_fence_of_a_fenced_actor_lies_within_its_grant_fence_whatever_its_mode() {
        let scope = fenced(&[("/r/src", Mode::Exclusive)]);
        let root = key("/r", true);
        let ask = |kind, want| refusal(scope.claim_keys("a", &root, kind, vec![want]));
        assert_eq!(
            ask(HoldKind::Call, at("/r/README.md", Mode::Shared)),
            "granted"
        );
        assert_eq!(
            ask(HoldKind::Fence, at("/r/README.md", Mode::Shared)),
            "outside_fence"
        );
        assert_eq!(
            ask(HoldKind::Call, at("/r/README.md", Mode::Exclusive)),
            "outside_fence"
        );
        assert_eq!(
            ask(HoldKind::Fence, at("/r/src/a/", Mode::Exclusive)),
            "granted"
        );
    }

    #[test]
    fn a_shared_grant_fence_admits_reads_only() {
        let scope = fenced(&[("/r/src", Mode::Shared)]);
        let root = key("/r", true);
        let ask = |kind, want| refusal(scope.claim_keys("a", &root, kind, vec![want]));
        assert_eq!(
            ask(HoldKind::Call, at("/r/src/x.rs", Mode::Exclusive)),
            "outside_fence"
        );
        assert_eq!(
            ask(HoldKind::Fence, at("/r/src/a/", Mode::Shared)),
            "granted"
        );
        let all = scope
            .claim_keys(
                "a",
                &root,
                HoldKind::Call,
                vec![Wanted::Workspace(Mode::Exclusive)],
            )
            .unwrap();
        assert_eq!(all, [(key("/r/src", true), Mode::Shared)]);
    }

    #[test]
    fn a_read_only_scope_takes_shared_holds_and_read_only_roots_are_shared() {
        let root = key("/r", true);
        assert_eq!(
            refusal(Scope::ReadOnly.claim_keys(
                "a",
                &root,
                HoldKind::Call,
                vec![at("/r/x", Mode::Exclusive)]
            )),
            "read_only"
        );
        let under_read_root = Wanted::Key(key("/lib/x", false), Mode::Exclusive, Area::ReadOnly);
        assert_eq!(
            refusal(Scope::Workspace.claim_keys("a", &root, HoldKind::Call, vec![under_read_root])),
            "policy"
        );
    }

    #[test]
    fn widening_adds_only_what_is_not_held_at_a_mode_as_strong() {
        let held = [(key("/r/src", true), Mode::Shared)];
        let wanted = vec![
            (key("/r/src/a.rs", false), Mode::Shared),
            (key("/r/src/b.rs", false), Mode::Exclusive),
            (key("/r/docs", true), Mode::Shared),
        ];
        let added = uncovered(&held, wanted);
        assert_eq!(
            added,
            [
                (key("/r/src/b.rs", false), Mode::Exclusive),
                (key("/r/docs", true), Mode::Shared)
            ]
        );
    }

    #[test]
    fn children_of_fenced_parents_stay_within_at_modes_no_stronger() {
        let parent = fenced(&[("/r/src", Mode::Shared)]);
        let root = key("/r/src", true);
        let kid = |scope: Scope| {
            parent
                .check_child("p", &scope, &root)
                .err()
                .map(|e| e.kind())
        };
        assert_eq!(kid(Scope::ReadOnly), None);
        assert_eq!(kid(fenced(&[("/r/src/a", Mode::Shared)])), None);
        assert_eq!(
            kid(fenced(&[("/r/src/a", Mode::Exclusive)])),
            Some("outside_fence")
        );
        assert_eq!(kid(Scope::Workspace), Some("outside_fence"));
        assert_eq!(
            Scope::ReadOnly
                .check_child("p", &Scope::Workspace, &root)
                .err()
                .map(|e| e.kind()),
            Some("read_only")
        );
    }
}
