//! Guards: a granted call ([`Reservation`]) or fence ([`Fence`]).
//!
//! Dropping a guard removes its hold under the lock and wakes, after
//! unlocking, every waiter that can now proceed. Drop runs during a panic's
//! unwinding too, and the lock never poisons, so a panicking tool call
//! releases like any other.

use std::path::PathBuf;
use std::sync::Arc as StdArc;

use crate::core::key::{self, Key, Mode, Target, written_files};
use crate::core::queue::Need;
use crate::core::scope;
use crate::core::table::{Claim, HoldId, HoldKind};
use crate::error::{Error, Result};
use crate::sched::actor::{ActorMeta, refusal};
use crate::sched::events;
use crate::sched::scheduler::Scheduler;

fn paths_of(sched: &Scheduler, hold: HoldId) -> Vec<PathBuf> {
    let state = sched.shared.lock();
    state
        .table
        .get(hold)
        .map(|h| h.claim.keys.iter().map(|(k, _)| k.path.clone()).collect())
        .unwrap_or_default()
}

/// Adds `extra` to `hold`'s keys if what it adds conflicts with nothing (no
/// live hold but the hold itself, no earlier waiter): all-or-nothing,
/// try-only.
///
/// Only the keys the hold does not already cover are judged. Judging the
/// grown claim as a whole would refuse every growth while anyone waits for
/// the part already held — that waiter is blocked by this very hold, and the
/// new keys take nothing from it.
fn grow(
    sched: &Scheduler,
    meta: &ActorMeta,
    hold: HoldId,
    extra: Claim,
    priority: i32,
    what: &'static str,
) -> Result<()> {
    let events = &sched.shared.events;
    let result = sched.shared.with_state(|state, now| {
        let Some(current) = state.table.get(hold) else {
            return (
                Err(Error::Released {
                    what,
                    actor: meta.name.to_string(),
                }),
                Vec::new(),
            );
        };
        let added = scope::uncovered(&current.claim.keys, extra.keys);
        if added.is_empty() {
            return (Ok(()), Vec::new());
        }
        let mut keys = current.claim.keys.clone();
        keys.extend(added.iter().cloned());
        let added = Claim {
            keys: added,
            ..current.claim.clone()
        };
        match state.blocker(&added, &Need::Hold, priority, Some(hold)) {
            Some(blocker) => {
                state.counters.refused += 1;
                let err = refusal(state, &meta.resolver, &added, blocker);
                events.record(|| events::refused(meta.id, meta.name.clone(), &err));
                (Err(err), Vec::new())
            }
            None => {
                let verdict = crate::core::deadlock::cycle_if_granted(state, &added);
                if let crate::core::deadlock::Verdict::Reorder(moves) = &verdict {
                    // The wake-up scan after the widening judges every
                    // waiter, the moved ones too.
                    state.reorder(moves, None);
                }
                if let crate::core::deadlock::Verdict::Deadlock(cycle) = verdict {
                    state.counters.deadlocks += 1;
                    let cycle: Vec<String> =
                        cycle.into_iter().map(|a| state.actor_name(a)).collect();
                    let err = Error::Deadlock { cycle };
                    events.record(|| events::EventKind::Deadlock {
                        actor: meta.id,
                        actor_name: meta.name.clone(),
                        waiter: None,
                        cycle: match &err {
                            Error::Deadlock { cycle } => cycle.clone(),
                            _ => Vec::new(),
                        },
                        message: err.to_string(),
                    });
                    return (Err(err), Vec::new());
                }
                state.table.set_keys(hold, key::merge(keys));
                events.record(|| events::changed(state, hold));
                (Ok(()), state.wake_after_grant(added.kind, now))
            }
        }
    });
    if let Err(e) = &result {
        tracing::debug!(actor = %meta.name, error = %e, "extend refused");
    }
    result
}

/// One admitted tool call: an all-or-nothing hold on its paths, released
/// when dropped.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let a = sched.actor("a", writ::Grant::workspace(dir.path()))?;
/// let mut call = a.try_admit(["x.rs"])?;
/// call.extend(["y.rs"])?;        // try-only, all-or-nothing
/// assert_eq!(call.paths().len(), 2);
/// drop(call);                    // released; waiters woken
/// assert!(sched.dump().holds.is_empty());
/// # Ok(()) }
/// ```
#[must_use = "dropping a Reservation releases it at once"]
pub struct Reservation {
    sched: Scheduler,
    meta: StdArc<ActorMeta>,
    hold: HoldId,
    /// The request's priority: a widening is judged at it (§11).
    priority: i32,
}

impl Reservation {
    pub(crate) fn new(
        sched: Scheduler,
        meta: StdArc<ActorMeta>,
        hold: HoldId,
        priority: i32,
    ) -> Self {
        Reservation {
            sched,
            meta,
            hold,
            priority,
        }
    }

    /// The hold's id, as the dump shows it.
    pub fn id(&self) -> HoldId {
        self.hold
    }

    /// The reserved keys (absolute, resolved).
    pub fn paths(&self) -> Vec<PathBuf> {
        paths_of(&self.sched, self.hold)
    }

    /// Adds targets without waiting: all-or-nothing, `Err(Busy)` with nothing
    /// added when any is contested. A call must never wait while it holds a
    /// reservation (that is the shape of a deadlock); release and ask again
    /// for the whole set instead.
    pub fn extend<I>(&mut self, targets: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        let targets: Vec<Target> = targets.into_iter().map(Into::into).collect();
        let extra = self.meta.claim(targets, HoldKind::Call)?;
        grow(
            &self.sched,
            &self.meta,
            self.hold,
            extra,
            self.priority,
            "reservation",
        )
    }

    /// The name of the actor it belongs to.
    pub fn actor(&self) -> &str {
        &self.meta.name
    }

    /// Gives this call's actor a claim (SPEC §6) on each file it holds
    /// exclusively, for `ttl`: until then, or until the actor's next write
    /// to the file (the release of its next exclusive call there), a
    /// release or the actor's end, other actors' writes and fences there
    /// wait; reads never do. The file tools give one when they refuse a
    /// write `Stale`; given inside the call, it takes nothing from anyone.
    /// A claim the actor already held there is replaced. Returns the
    /// claims given.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let a = sched.actor("a", writ::Grant::workspace(dir.path()))?;
    /// let b = sched.actor("b", writ::Grant::workspace(dir.path()))?;
    /// let call = a.try_admit(["hot.rs"])?;
    /// call.claim(std::time::Duration::from_secs(10));
    /// drop(call);
    /// assert!(b.try_admit(["hot.rs"]).is_err());          // b's write waits for a
    /// let read = writ::Target::file("hot.rs").shared();
    /// assert!(b.request([read]).try_admit().is_ok());      // reads never do
    /// drop(a.try_admit(["hot.rs"])?);                     // a writes: the claim ends
    /// assert!(b.try_admit(["hot.rs"]).is_ok());
    /// # Ok(()) }
    /// ```
    pub fn claim(&self, ttl: std::time::Duration) -> Vec<HoldId> {
        let keys: Vec<Key> = {
            let state = self.sched.shared.lock();
            state
                .table
                .get(self.hold)
                .map(|h| written_files(&h.claim.keys).cloned().collect())
                .unwrap_or_default()
        };
        keys.into_iter()
            .filter_map(|key| self.claim_key(key, ttl))
            .collect()
    }

    /// [`Reservation::claim`] on one key this call holds exclusively, for
    /// a write to it refused `Stale`: counted as a refusal too.
    pub(crate) fn claim_key(&self, key: Key, ttl: std::time::Duration) -> Option<HoldId> {
        self.meta.note_refusal(&key.norm);
        self.sched.grant_claim(&self.meta, key, ttl)
    }

    #[allow(dead_code)] // used by the file tools
    pub(crate) fn meta(&self) -> &StdArc<ActorMeta> {
        &self.meta
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let hold = self.hold;
        let events = &self.sched.shared.events;
        self.sched.shared.with_state(|state, now| {
            events.record(|| events::released(state, hold));
            ((), state.release(hold, now))
        });
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("id", &self.hold)
            .field("actor", &self.meta.name)
            .finish()
    }
}

/// An explicit fence: the right to write an area, for as long as it lives.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let other = sched.actor("other", writ::Grant::workspace(dir.path()))?;
/// let mut fence = lead.fence(["src/"])?;
/// fence.extend(["docs/"])?;               // all-or-nothing
/// fence.narrow(["src/lex.rs"])?;          // keep only this; the rest is released
/// assert!(other.try_admit(["docs/a.md"]).is_ok());
/// assert!(other.try_admit(["src/lex.rs"]).is_err());
/// # Ok(()) }
/// ```
#[must_use = "dropping a Fence releases it at once"]
pub struct Fence {
    sched: Scheduler,
    meta: StdArc<ActorMeta>,
    hold: HoldId,
    /// What the actor declared: paths inside need no approval to widen to.
    declared: Vec<Key>,
    /// The approval hook's answers, asked once per path (a key: its folded
    /// spelling and whether it is a tree) for the fence's life.
    answers: Vec<(Key, bool)>,
    /// The request's priority: a widening is judged at it (§11).
    priority: i32,
}

impl Fence {
    pub(crate) fn new(
        sched: Scheduler,
        meta: StdArc<ActorMeta>,
        hold: HoldId,
        _targets: Vec<Target>,
        priority: i32,
    ) -> Self {
        let declared = match meta.grant_fence() {
            Some(fence) => fence.iter().map(|(k, _)| k.clone()).collect(),
            None => {
                let state = sched.shared.lock();
                state
                    .table
                    .get(hold)
                    .map(|h| h.claim.keys.iter().map(|(k, _)| k.clone()).collect())
                    .unwrap_or_default()
            }
        };
        Fence {
            sched,
            meta,
            hold,
            declared,
            answers: Vec::new(),
            priority,
        }
    }

    /// The hold's id, as the dump shows it.
    pub fn id(&self) -> HoldId {
        self.hold
    }

    /// The fenced keys (absolute, resolved).
    pub fn paths(&self) -> Vec<PathBuf> {
        paths_of(&self.sched, self.hold)
    }

    /// Widens the fence: all-or-nothing, `Err(Busy)` with nothing added when
    /// contested (by a hold, or by an earlier waiting request for a path the
    /// fence does not cover yet). For a fenced actor, a target outside its
    /// grant fence is `OutsideFence`. Paths outside what the actor declared
    /// (its grant fence, or this fence's initial targets) are put to
    /// `Config::approval` first, outside the scheduler's lock; each path is
    /// asked once for the fence's life, and an approved tree covers the paths
    /// beneath it. A refusal is `NotApproved`, with nothing added.
    pub fn extend<I>(&mut self, targets: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        let targets: Vec<Target> = targets.into_iter().map(Into::into).collect();
        let extra = self.meta.claim(targets, HoldKind::Fence)?;
        if let Some(hook) = self.sched.shared.config.approval.clone() {
            for (key, _) in &extra.keys {
                if self.declared.iter().any(|d| key::inside(key, d)) {
                    continue;
                }
                // An approved tree already covers everything beneath it.
                let known = self
                    .answers
                    .iter()
                    .find(|(k, _)| k.norm == key.norm && k.tree == key.tree)
                    .map(|(_, answer)| *answer)
                    .or_else(|| {
                        self.answers
                            .iter()
                            .any(|(k, approved)| *approved && key::inside(key, k))
                            .then_some(true)
                    });
                let approved = match known {
                    Some(answer) => answer,
                    None => {
                        let answer = hook.approve(&self.meta.name, &key.path);
                        self.answers.push((key.clone(), answer));
                        answer
                    }
                };
                if !approved {
                    return Err(Error::NotApproved {
                        actor: self.meta.name.to_string(),
                        path: key.path.clone(),
                    });
                }
            }
        }
        grow(
            &self.sched,
            &self.meta,
            self.hold,
            extra,
            self.priority,
            "fence",
        )
    }

    /// Narrows the fence to `targets`, each of which must lie inside it (a
    /// mode may only weaken), else `OutsideFence` and nothing changes. The
    /// rest is released at once and waiters woken.
    pub fn narrow<I>(&mut self, targets: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        let targets: Vec<Target> = targets.into_iter().map(Into::into).collect();
        let kept = self.meta.claim(targets, HoldKind::Fence)?;
        let meta = self.meta.clone();
        let hold = self.hold;
        let events = &self.sched.shared.events;
        self.sched.shared.with_state(|state, now| {
            let Some(current) = state.table.get(hold) else {
                return (
                    Err(Error::Released {
                        what: "fence",
                        actor: meta.name.to_string(),
                    }),
                    Vec::new(),
                );
            };
            if let Err(err) = scope::check_narrow(&meta.name, &current.claim.keys, &kept.keys) {
                return (Err(err), Vec::new());
            }
            let wakers = state.narrow(hold, kept.keys, now);
            events.record(|| events::changed(state, hold));
            (Ok(()), wakers)
        })
    }

    /// The modes of the fenced keys.
    pub fn modes(&self) -> Vec<(PathBuf, Mode)> {
        let state = self.sched.shared.lock();
        state
            .table
            .get(self.hold)
            .map(|h| {
                h.claim
                    .keys
                    .iter()
                    .map(|(k, m)| (k.path.clone(), *m))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        let hold = self.hold;
        let events = &self.sched.shared.events;
        self.sched.shared.with_state(|state, now| {
            events.record(|| events::released(state, hold));
            ((), state.release(hold, now))
        });
    }
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("id", &self.hold)
            .field("actor", &self.meta.name)
            .finish()
    }
}
