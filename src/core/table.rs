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
//!
//! [`Table`] answers conflict queries through a path index ([`crate::core::index`])
//! whose cost does not grow with the number of unrelated live holds;
//! [`naive::Table`] is the linear scan it must agree with.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::core::index::{Class, FastMap, Index, NodeId, NodeList};
use crate::core::key::{Key, Mode, overlaps};
pub use crate::kinds::HoldKind;

/// An actor's identity. Ids are never reused within a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ActorId(pub u64);

/// A hold's identity. Ids are never reused within a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct HoldId(pub u64);

/// How an actor may act, as the dump shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// `Grant::workspace`: optimistic, anywhere under its root.
    Workspace,
    /// `Grant::fenced`: only inside its grant fence.
    Fenced,
    /// `Grant::read_only`: shared holds only.
    ReadOnly,
    /// The session itself (rewinds).
    Session,
}

/// A live actor as the state knows it.
#[derive(Debug, Clone)]
pub(crate) struct ChildRecord {
    pub(crate) id: ActorId,
    pub(crate) name: Arc<str>,
    pub(crate) parent: Option<ActorId>,
    pub(crate) root: PathBuf,
    pub(crate) scope: ScopeKind,
    /// Counts against `max_actors` (every child, not a root actor).
    pub(crate) counts_actor: bool,
    /// Counts against `max_writers` (a child that may write).
    pub(crate) counts_writer: bool,
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
    // A claim excludes what an exclusive fence excludes: writes and fences,
    // never reads (SPEC §6).
    let as_fence = |(kind, mode): (HoldKind, Mode)| match kind {
        Claim => (Fence, Exclusive),
        _ => (kind, mode),
    };
    match (as_fence(a), as_fence(b)) {
        ((Call, Exclusive), _) | (_, (Call, Exclusive)) => true,
        ((Call, Shared), _) | (_, (Call, Shared)) => false,
        ((Fence, Shared), (Fence, Shared)) => false,
        ((Fence, _), (Fence, _)) => true,
        ((Claim, _), _) | (_, (Claim, _)) => unreachable!("claims are judged as fences"),
    }
}

/// `fence` covers `other` when it is a fence (or a claim) owned by
/// `other`'s owner or by one of its ancestors.
pub(crate) fn covers(fence: &Claim, other: &Claim) -> bool {
    fence.kind.outlives_call() && other.lineage.contains(&fence.owner)
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

/// Hold ids to slots.
///
/// Ids are handed out in increasing order and most holds are short calls,
/// so most look-ups are for recent ids: those are found in `window`, by
/// subtraction, in memory that the last grants already touched. Ids that
/// outlive the window (long-lived fences) move to `old`. A hash map alone
/// would put every new id in a cold bucket once there are many holds.
///
/// Invariants (checked by [`IdMap::assert_invariants`]):
/// - `window[i]` is the slot of id `base + i`, or `NONE` when that id is
///   not live; the window does not start with `NONE`;
/// - `in_window` = number of entries of `window` that are not `NONE`;
/// - `old` holds exactly the live ids below `base`;
/// - `window.len() <= 2 * in_window + SLACK`.
#[derive(Debug, Default)]
struct IdMap {
    base: u64,
    window: VecDeque<u32>,
    in_window: usize,
    old: FastMap<u64, u32>,
}

impl IdMap {
    const NONE: u32 = u32::MAX;
    /// Small in tests, so that the property tests move ids to `old`.
    const SLACK: usize = if cfg!(test) { 2 } else { 64 };

    /// Records `id` (greater than every id recorded before) in `slot`.
    fn insert(&mut self, id: HoldId, slot: u32) {
        if self.window.is_empty() {
            self.base = id.0;
        }
        let at = (id.0 - self.base) as usize;
        while self.window.len() < at {
            self.window.push_back(Self::NONE);
        }
        self.window.push_back(slot);
        self.in_window += 1;
        self.compact();
    }

    /// While the window is too sparse, its oldest ids move to the map.
    fn compact(&mut self) {
        while self.window.len() > 2 * self.in_window + Self::SLACK {
            if let Some(slot) = self.window.pop_front() {
                if slot != Self::NONE {
                    self.old.insert(self.base, slot);
                    self.in_window -= 1;
                }
                self.base += 1;
            }
        }
        self.trim();
    }

    fn position(&self, id: HoldId) -> Option<usize> {
        let at = id.0.checked_sub(self.base)?;
        usize::try_from(at)
            .ok()
            .filter(|&at| at < self.window.len())
    }

    fn get(&self, id: HoldId) -> Option<u32> {
        match self.position(id) {
            Some(at) => Some(self.window[at]).filter(|&s| s != Self::NONE),
            None => self.old.get(&id.0).copied(),
        }
    }

    fn remove(&mut self, id: HoldId) -> Option<u32> {
        let Some(at) = self.position(id) else {
            return self.old.remove(&id.0);
        };
        let slot = std::mem::replace(&mut self.window[at], Self::NONE);
        if slot == Self::NONE {
            return None;
        }
        self.in_window -= 1;
        self.trim();
        self.compact();
        Some(slot)
    }

    /// Drops `NONE`s from the front. (Not from the back: the next id must
    /// land right after the last one, or the gap would have to be padded.)
    fn trim(&mut self) {
        while self.window.front() == Some(&Self::NONE) {
            self.window.pop_front();
            self.base += 1;
        }
    }

    fn len(&self) -> usize {
        self.in_window + self.old.len()
    }

    fn assert_invariants(&self) {
        let live = self.window.iter().filter(|&&s| s != Self::NONE).count();
        assert_eq!(live, self.in_window, "in_window");
        assert_ne!(
            self.window.front(),
            Some(&Self::NONE),
            "window starts with NONE"
        );
        assert!(
            self.old.keys().all(|&id| id < self.base),
            "old id in the window"
        );
        assert!(
            self.window.len() <= 2 * self.in_window + Self::SLACK,
            "window too sparse"
        );
    }
}

/// A live hold in its slot, with the index nodes of its keys.
#[derive(Debug)]
struct Live {
    id: HoldId,
    hold: Hold,
    /// `nodes[i]` is the index node of `hold.claim.keys[i]`.
    nodes: NodeList,
}

/// The live holds, indexed by path.
///
/// # Implementation details
///
/// Holds live in `slots` (reused last-in first-out, so a release followed
/// by a grant touches memory that is already in cache); `ids` maps a hold's
/// public id to its slot, and `index` (a trie over key components, see
/// [`crate::core::index`]) maps paths to the slots whose keys lie there, with
/// per-class counts of what lies beneath each path. A conflict check walks
/// each request key's path once and looks only at holds whose key overlaps
/// it with a clashing class; it never scans unrelated holds. Of those, the
/// *covers* rule is decided per hold from its lineage.
///
/// Invariants (checked by [`Table::assert_invariants`]):
/// - `ids.len()` = number of `Some` slots = `len()`; `ids[h.id]` = the slot of `h`;
/// - `free` lists exactly the `None` slots;
/// - index entries = Σ over live holds of `keys.len()`, and `nodes[i]` of a
///   hold is the node of its `i`-th key, holding the entry `(slot, class)`;
/// - `fences[a]` = the ids of the live fences owned by `a`, for every `a`
///   that owns one (and no other key);
/// - no two live holds conflict (the conflict rule above).
#[derive(Debug, Default)]
pub(crate) struct Table {
    slots: Vec<Option<Live>>,
    /// Free positions in `slots`.
    free: Vec<u32>,
    ids: IdMap,
    index: Index<u32>,
    /// Fence holds per owner, so dropping an actor does not scan every hold.
    fences: FastMap<ActorId, Vec<HoldId>>,
    next_id: u64,
}

/// A free slot of a slab: a recycled one, or a new empty one at the end.
/// More than `u32::MAX` live entries is a broken invariant, not an input.
pub(crate) fn free_slot<T>(free: &mut Vec<u32>, slots: &mut Vec<Option<T>>, what: &str) -> u32 {
    match free.pop() {
        Some(slot) => slot,
        None => {
            let slot = u32::try_from(slots.len())
                .unwrap_or_else(|_| panic!("more than {} {what}", u32::MAX));
            slots.push(None);
            slot
        }
    }
}

impl Table {
    /// Inserts a hold without checking it; callers check first.
    pub(crate) fn insert(&mut self, hold: Hold) -> HoldId {
        self.next_id += 1;
        let id = HoldId(self.next_id);
        let slot = free_slot(&mut self.free, &mut self.slots, "live holds");
        let kind = hold.claim.kind;
        let nodes = hold
            .claim
            .keys
            .iter()
            .map(|(key, mode)| self.index.insert(key, Class::of(kind, *mode), slot))
            .collect();
        if kind.outlives_call() {
            self.fences.entry(hold.claim.owner).or_default().push(id);
        }
        self.slots[slot as usize] = Some(Live { id, hold, nodes });
        self.ids.insert(id, slot);
        id
    }

    /// Removes a hold's keys from the index.
    fn unindex(
        index: &mut Index<u32>,
        slot: u32,
        kind: HoldKind,
        keys: &[(Key, Mode)],
        nodes: &[NodeId],
    ) {
        for ((key, mode), &node) in keys.iter().zip(nodes) {
            let removed = index.remove(node, Class::of(kind, *mode), key.tree, slot);
            debug_assert!(removed, "a live key was missing from the index");
        }
    }

    pub(crate) fn remove(&mut self, id: HoldId) -> Option<Hold> {
        let slot = self.ids.remove(id)?;
        let live = self.slots.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        let claim = &live.hold.claim;
        Self::unindex(
            &mut self.index,
            slot,
            claim.kind,
            &claim.keys,
            live.nodes.as_slice(),
        );
        if claim.kind.outlives_call() {
            if let Some(owned) = self.fences.get_mut(&claim.owner) {
                owned.retain(|&f| f != id);
                if owned.is_empty() {
                    self.fences.remove(&claim.owner);
                }
            }
        }
        Some(live.hold)
    }

    fn live(&self, id: HoldId) -> Option<&Live> {
        let slot = self.ids.get(id)?;
        self.slots.get(slot as usize)?.as_ref()
    }

    pub(crate) fn get(&self, id: HoldId) -> Option<&Hold> {
        self.live(id).map(|live| &live.hold)
    }

    /// Replaces a hold's keys (fence widen/narrow, reservation extend).
    pub(crate) fn set_keys(&mut self, id: HoldId, keys: Vec<(Key, Mode)>) -> bool {
        let Some(slot) = self.ids.get(id) else {
            return false;
        };
        let Some(live) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return false;
        };
        let kind = live.hold.claim.kind;
        Self::unindex(
            &mut self.index,
            slot,
            kind,
            &live.hold.claim.keys,
            live.nodes.as_slice(),
        );
        live.nodes = keys
            .iter()
            .map(|(key, mode)| self.index.insert(key, Class::of(kind, *mode), slot))
            .collect();
        live.hold.claim.keys = keys;
        true
    }

    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every live hold, in grant (id) order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (HoldId, &Hold)> {
        let mut live: Vec<&Live> = self.slots.iter().flatten().collect();
        live.sort_unstable_by_key(|l| l.id);
        live.into_iter().map(|l| (l.id, &l.hold))
    }

    /// Calls `f(hold, its claim, i)` for every live hold (but `except`)
    /// that conflicts with `claim` through `claim.keys[i]`; a hold may be
    /// reported more than once, in no particular order. Stops when `f`
    /// breaks.
    pub(crate) fn scan<B>(
        &self,
        claim: &Claim,
        except: Option<HoldId>,
        mut f: impl FnMut(HoldId, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if self.index.is_empty() {
            return ControlFlow::Continue(());
        }
        for (i, (key, mode)) in claim.keys.iter().enumerate() {
            let mask = Class::of(claim.kind, *mode).clashes();
            // The index reports exactly the holds with a key overlapping
            // `key` and a clashing kind/mode; what is left of the conflict
            // rule is covers, which depends on the holds, not the keys.
            self.index.visit(key, mask, |slot| {
                let Some(live) = self.slots.get(slot as usize).and_then(Option::as_ref) else {
                    return ControlFlow::Continue(());
                };
                if Some(live.id) == except
                    || covers(claim, &live.hold.claim)
                    || covers(&live.hold.claim, claim)
                {
                    return ControlFlow::Continue(());
                }
                f(live.id, &live.hold.claim, i)
            })?;
        }
        ControlFlow::Continue(())
    }

    /// Whether any live hold (but `except`) conflicts with `claim`; stops at
    /// the first one found.
    #[cfg(test)]
    pub(crate) fn any_conflict(&self, claim: &Claim, except: Option<HoldId>) -> bool {
        self.scan(claim, except, |_, _, _| ControlFlow::Break(()))
            .is_break()
    }

    /// The first live hold (in grant order) `claim` conflicts with, skipping
    /// `except`, and the first key of `claim` in the way — what a scan of
    /// the holds in grant order would find.
    pub(crate) fn first_conflict(&self, claim: &Claim, except: Option<HoldId>) -> Option<Blocking> {
        let mut first: Option<(HoldId, usize)> = None;
        let _ = self.scan(claim, except, |hold, _, key| {
            if first.is_none_or(|best| (hold, key) < best) {
                first = Some((hold, key));
            }
            ControlFlow::<()>::Continue(())
        });
        first.map(|(hold, key)| Blocking { hold, key })
    }

    /// Every live hold `claim` conflicts with, skipping `except`, in grant
    /// order, each with the first key of `claim` in its way.
    #[cfg(test)]
    pub(crate) fn conflicts<'a>(
        &'a self,
        claim: &'a Claim,
        except: Option<HoldId>,
    ) -> impl Iterator<Item = Blocking> + 'a {
        let mut found: Vec<(HoldId, usize)> = Vec::new();
        let _ = self.scan(claim, except, |hold, _, key| {
            found.push((hold, key));
            ControlFlow::<()>::Continue(())
        });
        found.sort_unstable();
        found.dedup_by_key(|(hold, _)| *hold);
        found.into_iter().map(|(hold, key)| Blocking { hold, key })
    }

    /// Ids of the fences and claims an actor owns, in grant order.
    pub(crate) fn fences_of(&self, owner: ActorId) -> Vec<HoldId> {
        let mut ids = self.fences.get(&owner).cloned().unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// The claim (SPEC §6) `owner` holds on exactly `key`, if any.
    pub(crate) fn claim_of(&self, owner: ActorId, key: &Key) -> Option<HoldId> {
        self.fences.get(&owner)?.iter().copied().find(|&id| {
            self.get(id).is_some_and(|h| {
                h.claim.kind == HoldKind::Claim
                    && h.claim
                        .keys
                        .iter()
                        .any(|(k, _)| k.norm == key.norm && k.tree == key.tree)
            })
        })
    }

    /// Panics when the index disagrees with the holds (see the type's
    /// invariants); conflicting holds are allowed here.
    pub(crate) fn assert_index(&self) {
        let live: Vec<(u32, &Live)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, l)| Some((slot as u32, l.as_ref()?)))
            .collect();
        assert_eq!(live.len(), self.ids.len(), "ids and slots disagree");
        self.ids.assert_invariants();
        let mut free = self.free.clone();
        free.sort_unstable();
        let empty: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&s| self.slots[s as usize].is_none())
            .collect();
        assert_eq!(free, empty, "the free list is not the empty slots");
        let mut keys = 0usize;
        let mut fences: std::collections::BTreeMap<ActorId, Vec<HoldId>> = Default::default();
        for (slot, l) in &live {
            assert_eq!(self.ids.get(l.id), Some(*slot), "ids[{:?}]", l.id);
            let claim = &l.hold.claim;
            assert_eq!(
                claim.keys.len(),
                l.nodes.as_slice().len(),
                "nodes of {:?}",
                l.id
            );
            for ((key, mode), &node) in claim.keys.iter().zip(l.nodes.as_slice()) {
                assert!(
                    self.index
                        .holds_entry(node, key, Class::of(claim.kind, *mode), *slot),
                    "key {key:?} of {:?} is not at its node",
                    l.id
                );
            }
            keys += claim.keys.len();
            if claim.kind.outlives_call() {
                fences.entry(claim.owner).or_default().push(l.id);
            }
        }
        assert_eq!(self.index.assert_consistent(), keys, "index entries");
        assert_eq!(fences.len(), self.fences.len(), "fence owners");
        for (owner, mut ids) in fences {
            ids.sort_unstable();
            assert_eq!(self.fences_of(owner), ids, "fences of {owner:?}");
        }
    }

    /// Panics when the index is inconsistent or two live holds conflict.
    pub(crate) fn assert_invariants(&self) {
        self.assert_index();
        let holds: Vec<_> = self.iter().collect();
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

/// The reference implementation: every query scans every hold with
/// [`conflict`], one path comparison per pair of keys. It is what the
/// indexed [`Table`] must agree with (a property test drives both), what
/// [`crate::core::state::State::assert_invariants`] judges by, and the "linear
/// scan" baseline of the benchmarks.
pub(crate) mod naive {
    use std::collections::BTreeMap;

    use super::{ActorId, Blocking, Claim, Hold, HoldId, conflict};

    /// Live holds in a `BTreeMap`, scanned in grant order.
    #[derive(Debug, Default)]
    pub(crate) struct Table {
        holds: BTreeMap<HoldId, Hold>,
        next_id: u64,
    }

    #[allow(dead_code)] // tests and benchmarks use all of it; the crate only part
    impl Table {
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

        pub(crate) fn set_keys(
            &mut self,
            id: HoldId,
            keys: Vec<(crate::core::key::Key, crate::core::key::Mode)>,
        ) -> bool {
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

        pub(crate) fn first_conflict(
            &self,
            claim: &Claim,
            except: Option<HoldId>,
        ) -> Option<Blocking> {
            self.conflicts(claim, except).next()
        }

        pub(crate) fn fences_of(&self, owner: ActorId) -> Vec<HoldId> {
            self.holds
                .iter()
                .filter(|(_, h)| h.claim.owner == owner && h.claim.kind.outlives_call())
                .map(|(id, _)| *id)
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HoldKind::{Call, Fence};
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
            // A claim (SPEC §6) holds back writes and fences, never reads.
            ((HoldKind::Claim, Exclusive), (Call, Exclusive), true),
            ((HoldKind::Claim, Exclusive), (Call, Shared), false),
            ((HoldKind::Claim, Exclusive), (Fence, Exclusive), true),
            ((HoldKind::Claim, Exclusive), (Fence, Shared), true),
            (
                (HoldKind::Claim, Exclusive),
                (HoldKind::Claim, Exclusive),
                true,
            ),
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
    fn short_holds_after_long_ones_keep_the_id_window_small() {
        let mut ids = IdMap::default();
        for i in 1..=100 {
            ids.insert(HoldId(i), i as u32);
        }
        for i in 101..10_000 {
            ids.insert(HoldId(i), 7);
            assert_eq!(ids.remove(HoldId(i)), Some(7));
            ids.assert_invariants();
        }
        // The long-lived ids moved out of the way; the window is empty.
        assert!(ids.window.is_empty(), "{}", ids.window.len());
        assert_eq!(ids.len(), 100);
        assert_eq!(ids.get(HoldId(42)), Some(42));
        assert_eq!(ids.remove(HoldId(42)), Some(42));
        assert_eq!(ids.get(HoldId(42)), None);
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

/// Random keys and claims for the property tests of the table and the state.
#[cfg(test)]
pub(crate) mod strategies {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::{ActorId, Claim, HoldKind};
    use crate::core::key::{Key, Mode};

    /// Spellings that compare alike or not under `Path`'s component rules:
    /// the root, a relative path, `.` and repeated separators.
    const PREFIXES: [&str; 6] = ["/ws", "/ws", "/", "", "/ws/./", "/ws//"];
    const NAMES: [&str; 3] = ["a", "b", "c"];

    /// A key under a small namespace, so that overlaps are frequent. Its
    /// spelling (`path`) may differ from `norm`, as under `Insensitive`.
    pub(crate) fn key() -> impl Strategy<Value = Key> {
        (
            prop::sample::select(&PREFIXES[..]),
            prop::collection::vec(prop::sample::select(&NAMES[..]), 0..=3),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(prefix, names, tree, shout)| {
                let mut s = prefix.to_string();
                for name in names {
                    if !s.is_empty() && !s.ends_with('/') {
                        s.push('/');
                    }
                    s.push_str(name);
                }
                let norm = PathBuf::from(&s);
                let path = if shout {
                    PathBuf::from(s.to_uppercase())
                } else {
                    norm.clone()
                };
                Key { path, norm, tree }
            })
    }

    pub(crate) fn mode() -> impl Strategy<Value = Mode> {
        prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
    }

    pub(crate) fn kind() -> impl Strategy<Value = HoldKind> {
        prop_oneof![Just(HoldKind::Fence), Just(HoldKind::Call)]
    }

    /// Lineages of a small family: 1 → 2 → 3, and 4 → 5.
    pub(crate) fn lineage_of(actor: u64) -> Vec<ActorId> {
        let chain: &[u64] = match actor {
            1 => &[1],
            2 => &[1, 2],
            3 => &[1, 2, 3],
            4 => &[4],
            _ => &[4, 5],
        };
        chain.iter().map(|&a| ActorId(a)).collect()
    }

    pub(crate) fn keys() -> impl Strategy<Value = Vec<(Key, Mode)>> {
        prop::collection::vec((key(), mode()), 1..=5)
    }

    pub(crate) fn claim() -> impl Strategy<Value = Claim> {
        (1u64..=5, kind(), keys()).prop_map(|(owner, kind, keys)| Claim {
            owner: ActorId(owner),
            lineage: lineage_of(owner).into(),
            kind,
            keys,
        })
    }
}

/// The indexed table against the naive scan, on random operations.
#[cfg(test)]
mod model {
    use proptest::prelude::*;

    use super::strategies::{claim, keys};
    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Claim),
        Remove(usize),
        SetKeys(usize, Vec<(Key, Mode)>),
        Query(Claim, Option<usize>),
    }

    /// A claim (SPEC §6) as the table holds one: of one owner, exclusive.
    fn hot() -> impl Strategy<Value = Claim> {
        claim().prop_map(|c| Claim {
            kind: HoldKind::Claim,
            keys: c
                .keys
                .into_iter()
                .map(|(k, _)| (k, Mode::Exclusive))
                .collect(),
            ..c
        })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => claim().prop_map(Op::Insert),
            1 => hot().prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Remove),
            1 => (any::<usize>(), keys()).prop_map(|(i, k)| Op::SetKeys(i, k)),
            4 => (claim(), any::<Option<usize>>()).prop_map(|(c, e)| Op::Query(c, e)),
        ]
    }

    fn hold(claim: Claim) -> Hold {
        Hold {
            claim,
            actor_name: "a".into(),
            label: None,
            since: Instant::now(),
        }
    }

    /// The `i`-th live id, or (one time in five) an id that is not live.
    fn pick(ids: &[HoldId], i: usize) -> HoldId {
        if ids.is_empty() || i % 5 == 0 {
            HoldId(u64::MAX - (i as u64 % 3))
        } else {
            ids[i % ids.len()]
        }
    }

    fn same(indexed: &Table, naive: &naive::Table, probe: &Claim, except: Option<HoldId>) {
        let a = indexed.first_conflict(probe, except);
        assert_eq!(a, naive.first_conflict(probe, except), "first_conflict");
        assert_eq!(
            indexed.any_conflict(probe, except),
            a.is_some(),
            "any_conflict"
        );
        let all: Vec<Blocking> = indexed.conflicts(probe, except).collect();
        let expected: Vec<Blocking> = naive.conflicts(probe, except).collect();
        assert_eq!(all, expected, "conflicts");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn indexed_table_answers_like_the_scan(ops in prop::collection::vec(op(), 1..60)) {
            let mut indexed = Table::default();
            let mut naive = naive::Table::default();
            for op in ops {
                let ids: Vec<HoldId> = naive.iter().map(|(id, _)| id).collect();
                match op {
                    Op::Insert(claim) => {
                        let a = indexed.insert(hold(claim.clone()));
                        let b = naive.insert(hold(claim));
                        prop_assert_eq!(a, b);
                    }
                    Op::Remove(i) => {
                        let id = pick(&ids, i);
                        let a = indexed.remove(id).map(|h| h.claim.keys);
                        let b = naive.remove(id).map(|h| h.claim.keys);
                        prop_assert_eq!(a, b);
                    }
                    Op::SetKeys(i, keys) => {
                        let id = pick(&ids, i);
                        prop_assert_eq!(
                            indexed.set_keys(id, keys.clone()),
                            naive.set_keys(id, keys)
                        );
                    }
                    Op::Query(probe, except) => {
                        let except = except.map(|i| pick(&ids, i));
                        same(&indexed, &naive, &probe, except);
                        // Every live hold, asked about itself, agrees too.
                        for (id, h) in naive.iter() {
                            same(&indexed, &naive, &h.claim, Some(id));
                            same(&indexed, &naive, &h.claim, None);
                        }
                    }
                }
                indexed.assert_index();
                prop_assert_eq!(indexed.len(), naive.len());
                let a: Vec<(HoldId, Vec<(Key, Mode)>)> =
                    indexed.iter().map(|(id, h)| (id, h.claim.keys.clone())).collect();
                let b: Vec<(HoldId, Vec<(Key, Mode)>)> =
                    naive.iter().map(|(id, h)| (id, h.claim.keys.clone())).collect();
                prop_assert_eq!(a, b);
                for owner in 1..=5 {
                    prop_assert_eq!(
                        indexed.fences_of(ActorId(owner)),
                        naive.fences_of(ActorId(owner))
                    );
                }
                for id in &ids {
                    prop_assert_eq!(
                        indexed.get(*id).map(|h| &h.claim.keys),
                        naive.get(*id).map(|h| &h.claim.keys)
                    );
                }
            }
        }
    }
}
