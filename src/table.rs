//! The resource table: live holds and the conflict rule.
//!
//! Pure data: no locks, no I/O, no clocks beyond the timestamps callers hand
//! in. The scheduler owns one `Table` behind its mutex; tests and models drive
//! it directly.
//!
//! # The conflict rule
//!
//! Two claims conflict iff some pair of their keys overlaps, the pair's
//! kind/mode combination clashes (the matrix in [`clash`]), and neither claim
//! *covers* the other. A fence covers every claim whose owner is the fence's
//! owner or one of its descendants.
//!
//! Invariant (checked by [`Table::assert_invariants`]): no two live holds
//! conflict.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::key::{Key, Mode, overlaps};

/// An actor's identity. Ids are never reused within a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ActorId(pub u64);

/// A hold's identity. Ids are never reused within a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct HoldId(pub u64);

/// What a hold is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// Long-lived: the right to write an area, held until its guard or actor drops.
    Fence,
    /// One tool call, held until its `Reservation` drops.
    Call,
}

/// An actor's chain of ancestors, root first, ending with the actor itself.
/// Fixed at creation; it survives the drop of a middle actor.
pub(crate) type Lineage = Arc<[ActorId]>;

/// What a hold (or a waiting request, treated as the hold it will become)
/// claims.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) owner: ActorId,
    pub(crate) lineage: Lineage,
    pub(crate) kind: HoldKind,
    pub(crate) keys: Vec<(Key, Mode)>,
}

/// The kind/mode matrix of SPEC §3, applied to one pair of overlapping keys.
///
/// ```text
///              Fence-X  Fence-S  Call-X  Call-S
///   Fence-X    clash    clash    clash   -
///   Fence-S    clash    -        clash   -
///   Call-X     clash    clash    clash   clash
///   Call-S     -        -        clash   -
/// ```
pub(crate) fn clash(a: (HoldKind, Mode), b: (HoldKind, Mode)) -> bool {
    use HoldKind::*;
    use Mode::*;
    match (a, b) {
        ((Call, Exclusive), _) | (_, (Call, Exclusive)) => true,
        ((Call, Shared), _) | (_, (Call, Shared)) => false,
        ((Fence, Shared), (Fence, Shared)) => false,
        ((Fence, _), (Fence, _)) => true,
    }
}

/// `fence` covers `other` when it is a fence owned by `other`'s owner or by
/// one of its ancestors.
pub(crate) fn covers(fence: &Claim, other: &Claim) -> bool {
    fence.kind == HoldKind::Fence && other.lineage.contains(&fence.owner)
}

/// The index (into `a.keys`) of the first key of `a` that conflicts with `b`,
/// or `None` when the claims do not conflict.
pub(crate) fn conflict(a: &Claim, b: &Claim) -> Option<usize> {
    if covers(a, b) || covers(b, a) {
        return None;
    }
    a.keys.iter().position(|(ka, ma)| {
        b.keys
            .iter()
            .any(|(kb, mb)| overlaps(ka, kb) && clash((a.kind, *ma), (b.kind, *mb)))
    })
}

/// A live hold.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub(crate) claim: Claim,
    pub(crate) actor_name: Arc<str>,
    pub(crate) label: Option<Arc<str>>,
    pub(crate) since: Instant,
}

/// A conflict found in the table: which hold, and which key of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocking {
    pub(crate) hold: HoldId,
    pub(crate) key: usize,
}

/// The live holds.
///
/// This first version scans every hold; its interface is what an indexed
/// version keeps, so that swapping the index changes no caller.
#[derive(Debug, Default)]
pub(crate) struct Table {
    holds: BTreeMap<HoldId, Hold>,
    next_id: u64,
}

impl Table {
    /// Inserts a hold without checking it; callers check first.
    pub(crate) fn insert(&mut self, hold: Hold) -> HoldId {
        self.next_id += 1;
        let id = HoldId(self.next_id);
        self.holds.insert(id, hold);
        id
    }

    pub(crate) fn remove(&mut self, id: HoldId) -> Option<Hold> {
        self.holds.remove(&id)
    }

    pub(crate) fn get(&self, id: HoldId) -> Option<&Hold> {
        self.holds.get(&id)
    }

    /// Replaces a hold's keys (fence widen/narrow, reservation extend).
    pub(crate) fn set_keys(&mut self, id: HoldId, keys: Vec<(Key, Mode)>) -> bool {
        match self.holds.get_mut(&id) {
            Some(hold) => {
                hold.claim.keys = keys;
                true
            }
            None => false,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.holds.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (HoldId, &Hold)> {
        self.holds.iter().map(|(id, h)| (*id, h))
    }

    /// The first live hold `claim` conflicts with, skipping `except`.
    pub(crate) fn first_conflict(&self, claim: &Claim, except: Option<HoldId>) -> Option<Blocking> {
        self.conflicts(claim, except).next()
    }

    /// Every live hold `claim` conflicts with, skipping `except`.
    pub(crate) fn conflicts<'a>(
        &'a self,
        claim: &'a Claim,
        except: Option<HoldId>,
    ) -> impl Iterator<Item = Blocking> + 'a {
        self.holds.iter().filter_map(move |(id, hold)| {
            if Some(*id) == except {
                return None;
            }
            conflict(claim, &hold.claim).map(|key| Blocking { hold: *id, key })
        })
    }

    /// Ids of the fences an actor owns.
    pub(crate) fn fences_of(&self, owner: ActorId) -> Vec<HoldId> {
        self.holds
            .iter()
            .filter(|(_, h)| h.claim.owner == owner && h.claim.kind == HoldKind::Fence)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Panics when two live holds conflict.
    pub(crate) fn assert_invariants(&self) {
        let holds: Vec<_> = self.holds.iter().collect();
        for (i, (ia, a)) in holds.iter().enumerate() {
            for (ib, b) in &holds[i + 1..] {
                assert!(
                    conflict(&a.claim, &b.claim).is_none(),
                    "holds {ia:?} and {ib:?} conflict: {a:?} / {b:?}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HoldKind::*;
    use Mode::*;

    fn claim(owner: u64, lineage: &[u64], kind: HoldKind, keys: &[(&str, Mode)]) -> Claim {
        Claim {
            owner: ActorId(owner),
            lineage: lineage.iter().map(|&a| ActorId(a)).collect(),
            kind,
            keys: keys
                .iter()
                .map(|(p, m)| (Key::exact(p.trim_end_matches('/'), p.ends_with('/')), *m))
                .collect(),
        }
    }

    #[test]
    fn matrix_between_unrelated_actors() {
        let cases = [
            ((Fence, Exclusive), (Fence, Exclusive), true),
            ((Fence, Exclusive), (Fence, Shared), true),
            ((Fence, Exclusive), (Call, Exclusive), true),
            ((Fence, Exclusive), (Call, Shared), false),
            ((Fence, Shared), (Fence, Shared), false),
            ((Fence, Shared), (Call, Exclusive), true),
            ((Fence, Shared), (Call, Shared), false),
            ((Call, Exclusive), (Call, Exclusive), true),
            ((Call, Exclusive), (Call, Shared), true),
            ((Call, Shared), (Call, Shared), false),
        ];
        for ((ka, ma), (kb, mb), expected) in cases {
            let a = claim(1, &[1], ka, &[("/ws/a", ma)]);
            let b = claim(2, &[2], kb, &[("/ws/a", mb)]);
            assert_eq!(
                conflict(&a, &b).is_some(),
                expected,
                "{ka:?}-{ma:?} vs {kb:?}-{mb:?}"
            );
            assert_eq!(conflict(&b, &a).is_some(), expected, "symmetric");
            assert_eq!(clash((ka, ma), (kb, mb)), clash((kb, mb), (ka, ma)));
        }
    }

    #[test]
    fn fences_cover_their_line_but_not_upwards() {
        let parent_fence = claim(1, &[1], Fence, &[("/ws/src/", Exclusive)]);
        let child_call = claim(2, &[1, 2], Call, &[("/ws/src/a.rs", Exclusive)]);
        let grandchild_fence = claim(3, &[1, 2, 3], Fence, &[("/ws/src/p/", Exclusive)]);
        let sibling_call = claim(4, &[4], Call, &[("/ws/src/a.rs", Exclusive)]);
        let parent_call = claim(1, &[1], Call, &[("/ws/src/p/x.rs", Exclusive)]);
        assert_eq!(conflict(&parent_fence, &child_call), None);
        assert_eq!(conflict(&parent_fence, &grandchild_fence), None);
        assert_eq!(conflict(&sibling_call, &parent_fence), Some(0));
        // Ownership moves down: the grandchild's fence refuses the parent's call.
        assert_eq!(conflict(&parent_call, &grandchild_fence), Some(0));
        // Two calls in one line still exclude each other.
        let child_call_2 = claim(2, &[1, 2], Call, &[("/ws/src/a.rs", Exclusive)]);
        assert_eq!(conflict(&child_call, &child_call_2), Some(0));
    }

    #[test]
    fn table_finds_conflicts_and_skips_except() {
        let mut table = Table::default();
        let id = table.insert(Hold {
            claim: claim(1, &[1], Call, &[("/ws/a", Exclusive)]),
            actor_name: "a".into(),
            label: None,
            since: Instant::now(),
        });
        let probe = claim(2, &[2], Call, &[("/ws/b", Shared), ("/ws/", Shared)]);
        assert_eq!(
            table.first_conflict(&probe, None),
            Some(Blocking { hold: id, key: 1 })
        );
        assert_eq!(table.first_conflict(&probe, Some(id)), None);
        table.assert_invariants();
        assert!(table.remove(id).is_some());
        assert_eq!(table.len(), 0);
    }
}
