//! The wait queue: requests that could not be granted yet.
//!
//! Pure data, kept in queue order: higher priority first, then arrival
//! (unless a soft cycle moved a waiter ahead, see [`Queue::place_ahead`]),
//! and indexed by path like the table. The wake-up rule that walks it lives in
//! [`crate::core::state`], beside the table it consults. Wakers are plain `std::task::Waker`s, stored and taken only
//! while the scheduler's mutex is held, and woken after it is released.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use serde::Serialize;

use crate::core::index::{Class, FastMap, Index, Mask, NodeList};
use crate::core::key::{Key, Mode};
use crate::core::table::ChildRecord;
use crate::core::table::{ActorId, Claim, HoldId, covers};

/// A waiting request's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct WaiterId(pub u64);

/// What a waiting request needs besides its keys.
#[derive(Debug, Clone)]
pub(crate) enum Need {
    /// Only its keys (a call or a fence).
    Hold,
    /// A new child actor: a slot, then its grant fence (possibly empty).
    Child(ChildRecord),
}

/// What refusing a waiting request hands back: the keys it no longer
/// waits for, and its waker.
pub(crate) type Refusal = (Vec<(Key, Mode)>, Option<Waker>);

/// Where a waiting request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaiterState {
    /// Not granted yet.
    Waiting,
    /// Granted by a wake-up scan; the hold (if it has keys) is already in the
    /// table and waits for the future to pick it up, or to hand it back if
    /// the future is dropped first.
    Granted(Option<HoldId>),
    /// Refused after it started waiting: an event other than a new wait
    /// (a fence granted or released, which changes whom the fence owner's
    /// precedence passes) closed a cycle through it. The entry waits for
    /// the future to pick up the `Deadlock`.
    Refused,
}

/// A request in the queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) id: WaiterId,
    /// The actor that asked (for a child, its parent).
    pub(crate) requester: ActorId,
    pub(crate) requester_name: Arc<str>,
    /// The hold the request will become.
    pub(crate) claim: Claim,
    pub(crate) need: Need,
    pub(crate) priority: i32,
    /// How often its actor's writes to these paths were refused (`Stale`,
    /// or `Busy` after a tool call's wait) since one landed (SPEC §6):
    /// within a priority, the most refused queue first, so the next claim
    /// of a hot file goes to them.
    pub(crate) refusals: u32,
    pub(crate) label: Option<Arc<str>>,
    pub(crate) since: Instant,
    pub(crate) waker: Option<Waker>,
    pub(crate) state: WaiterState,
}

impl Waiter {
    pub(crate) fn is_waiting(&self) -> bool {
        self.state == WaiterState::Waiting
    }
}

/// What a granted entry hands over to become a hold.
pub(crate) struct Granting {
    pub(crate) claim: Claim,
    pub(crate) need: Need,
    /// The hold's actor name (for a child, the child's).
    pub(crate) name: Arc<str>,
    pub(crate) label: Option<Arc<str>>,
}

/// A request's place in queue order: higher priority first, then more
/// refusals (`tier`, SPEC §6), then `place`.
///
/// Arrivals take places [`GAP`] apart, in arrival order, so that a waiter
/// can be moved just ahead of another of the same priority by taking a
/// place between that waiter and the one before it
/// ([`Queue::place_ahead`]); when no place is left between two neighbours,
/// the places are numbered again in queue order. A move never changes a
/// waiter's priority, so it never crosses into another priority's part of
/// the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    rank: Reverse<i32>,
    tier: Reverse<u32>,
    place: u64,
}

/// The distance between the places of two successive arrivals: room for
/// about twenty moves into one gap before the queue is numbered again.
const GAP: u64 = 1 << 20;

impl Pos {
    /// The place of a request of `priority` that is not queued yet: behind
    /// every entry of equal or higher priority (places are below `u64::MAX`).
    pub(crate) fn end_of(priority: i32) -> Pos {
        Pos::end_of_tier(priority, 0)
    }

    /// The place of a request of `priority` whose actor was refused
    /// `refusals` times, not queued yet: behind every entry of higher
    /// priority, of equal priority and as many refusals or more.
    pub(crate) fn end_of_tier(priority: i32, refusals: u32) -> Pos {
        Pos {
            rank: Reverse(priority),
            tier: Reverse(refusals),
            place: u64::MAX,
        }
    }
}

#[derive(Debug)]
struct Slot {
    waiter: Waiter,
    pos: Pos,
    /// `nodes[i]` is the index node of `waiter.claim.keys[i]` while the
    /// entry waits; empty once it is granted.
    nodes: NodeList,
}

/// The queue.
///
/// # Implementation details
///
/// Entries live in `slots`; `order` lists them in queue order, `ids` finds
/// one by id. Waiting entries (not those granted and not yet picked up)
/// are also in `index`, a path index over their keys (see
/// [`crate::core::index`]), and, when they need an actor slot, in `children`. So
/// "which waiting entries conflict with this claim" and "which overlap these
/// released keys" cost what the table's queries cost, not a scan of the
/// queue, and inserting or removing an entry costs O(log n).
///
/// Invariants (checked by [`Queue::assert_invariants`]):
/// - `order` = {(slot.pos, s) | slots[s] is Some}; each entry's pos has its
///   priority's rank, and places are below `next_place` and `u64::MAX`;
/// - `ids[w.id]` = the slot of `w`, for every entry and no other id;
/// - `free` lists exactly the `None` slots;
/// - `waiting` = number of entries in state `Waiting`;
/// - index entries = Σ over waiting entries of `claim.keys.len()`, and
///   granted entries have none;
/// - `children` = {(pos, s) | slots[s] waits and needs a child slot}.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    order: BTreeMap<Pos, u32>,
    ids: FastMap<WaiterId, u32>,
    index: Index<u32>,
    children: BTreeMap<Pos, u32>,
    waiting: usize,
    /// The place of the last arrival.
    next_place: u64,
    next_id: u64,
}

fn class_of(claim: &Claim, mode: crate::core::key::Mode) -> Class {
    Class::of(claim.kind, mode)
}

impl Queue {
    /// Allocates an id; the caller builds the waiter and calls [`Queue::insert`].
    pub(crate) fn next_id(&mut self) -> WaiterId {
        self.next_id += 1;
        WaiterId(self.next_id)
    }

    /// Queues `waiter` behind every entry of its priority or higher.
    pub(crate) fn insert(&mut self, waiter: Waiter) {
        let place = match self.next_place.checked_add(GAP) {
            Some(place) if place < u64::MAX => place,
            _ => {
                self.renumber();
                self.next_place + GAP
            }
        };
        self.next_place = place;
        let pos = Pos {
            rank: Reverse(waiter.priority),
            tier: Reverse(waiter.refusals),
            place,
        };
        let slot = crate::core::table::free_slot(&mut self.free, &mut self.slots, "waiters");
        let mut nodes = NodeList::default();
        if waiter.is_waiting() {
            self.waiting += 1;
            nodes = waiter
                .claim
                .keys
                .iter()
                .map(|(key, mode)| self.index.insert(key, class_of(&waiter.claim, *mode), slot))
                .collect();
            if matches!(waiter.need, Need::Child(_)) {
                self.children.insert(pos, slot);
            }
        }
        self.order.insert(pos, slot);
        self.ids.insert(waiter.id, slot);
        self.slots[slot as usize] = Some(Slot { waiter, pos, nodes });
    }

    /// Moves the waiting entry `id` to just ahead of `of`, an entry of the
    /// same priority queued ahead of it; the entries between keep their
    /// order. This is how a soft cycle is resolved (see
    /// [`crate::core::deadlock`]). Index entries name slots, not places, so
    /// only `order` and `children` change. Returns false, changing nothing,
    /// if the move is not one of that kind.
    pub(crate) fn place_ahead(&mut self, id: WaiterId, of: WaiterId) -> bool {
        let (Some(&slot), Some(target)) = (self.ids.get(&id), self.pos_of(of)) else {
            return false;
        };
        let Some(from) = self.slot(slot).map(|s| s.pos) else {
            return false;
        };
        if from.rank != target.rank || from <= target {
            return false;
        }
        let before = |queue: &Queue, target: Pos| {
            queue
                .order
                .range(..target)
                .next_back()
                .filter(|(pos, _)| (pos.rank, pos.tier) == (target.rank, target.tier))
                .map_or(0, |(pos, _)| pos.place)
        };
        self.order.remove(&from);
        let child = self.children.remove(&from).is_some();
        let mut target = target;
        let mut low = before(self, target);
        if target.place - low < 2 {
            self.renumber();
            target = self.pos_of(of).unwrap_or(target);
            low = before(self, target);
        }
        // A waiter moved ahead takes the refusal tier of the one it
        // passes: the move is what the queue order is for.
        let pos = Pos {
            rank: target.rank,
            tier: target.tier,
            place: low + (target.place - low) / 2,
        };
        self.order.insert(pos, slot);
        if child {
            self.children.insert(pos, slot);
        }
        if let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            s.pos = pos;
        }
        true
    }

    /// Numbers every place again, [`GAP`] apart in queue order, when two
    /// neighbours have no place left between them (or arrivals ran out of
    /// places).
    fn renumber(&mut self) {
        let order = std::mem::take(&mut self.order);
        self.children.clear();
        let mut place = 0;
        for (old, slot) in order {
            place += GAP;
            let pos = Pos {
                rank: old.rank,
                tier: old.tier,
                place,
            };
            self.order.insert(pos, slot);
            if let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
                s.pos = pos;
                if s.waiter.is_waiting() && matches!(s.waiter.need, Need::Child(_)) {
                    self.children.insert(pos, slot);
                }
            }
        }
        self.next_place = place;
    }

    /// Takes a waiting entry out of the index and the slot list.
    fn unindex(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        if !s.waiter.is_waiting() {
            return;
        }
        self.waiting -= 1;
        let claim = &s.waiter.claim;
        for ((key, mode), &node) in claim.keys.iter().zip(s.nodes.as_slice()) {
            let removed = self
                .index
                .remove(node, class_of(claim, *mode), key.tree, slot);
            debug_assert!(removed, "a waiting key was missing from the index");
        }
        s.nodes.clear();
        self.children.remove(&s.pos);
    }

    pub(crate) fn remove(&mut self, id: WaiterId) -> Option<Waiter> {
        let slot = *self.ids.get(&id)?;
        self.unindex(slot);
        let s = self.slots.get_mut(slot as usize)?.take()?;
        self.ids.remove(&id);
        self.order.remove(&s.pos);
        self.free.push(slot);
        Some(s.waiter)
    }

    fn slot(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub(crate) fn get(&self, id: WaiterId) -> Option<&Waiter> {
        Some(&self.slot(*self.ids.get(&id)?)?.waiter)
    }

    /// Where an entry stands in queue order.
    pub(crate) fn pos_of(&self, id: WaiterId) -> Option<Pos> {
        Some(self.slot(*self.ids.get(&id)?)?.pos)
    }

    /// The entry in `slot` if it is still waiting.
    pub(crate) fn waiting_at(&self, slot: u32) -> Option<&Waiter> {
        self.slot(slot)
            .map(|s| &s.waiter)
            .filter(|w| w.is_waiting())
    }

    /// Replaces a waiting request's waker (unless it would wake the same task).
    pub(crate) fn set_waker(&mut self, id: WaiterId, waker: &Waker) {
        let Some(&slot) = self.ids.get(&id) else {
            return;
        };
        if let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            match &s.waiter.waker {
                Some(old) if old.will_wake(waker) => {}
                _ => s.waiter.waker = Some(waker.clone()),
            }
        }
    }

    /// Starts granting the waiting entry in `slot`: it leaves the index and
    /// hands over its claim (its keys move out; the entry keeps the rest
    /// for the dump's "granted, not picked up" state and for cancellation).
    /// [`Queue::finish_grant`] records the hold.
    pub(crate) fn begin_grant(&mut self, slot: u32) -> Option<Granting> {
        self.unindex(slot);
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        let w = &mut s.waiter;
        w.state = WaiterState::Granted(None);
        let claim = Claim {
            owner: w.claim.owner,
            lineage: w.claim.lineage.clone(),
            kind: w.claim.kind,
            keys: std::mem::take(&mut w.claim.keys),
        };
        let name = match &w.need {
            Need::Child(child) => child.name.clone(),
            Need::Hold => w.requester_name.clone(),
        };
        Some(Granting {
            claim,
            need: w.need.clone(),
            name,
            label: w.label.clone(),
        })
    }

    /// Refuses the waiting entry `id`: it leaves the index (it blocks no
    /// one any more) and stays only for its future to pick up the refusal.
    /// Returns its keys and waker.
    pub(crate) fn refuse(&mut self, id: WaiterId) -> Option<Refusal> {
        let slot = *self.ids.get(&id)?;
        self.unindex(slot);
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        s.waiter.state = WaiterState::Refused;
        Some((
            std::mem::take(&mut s.waiter.claim.keys),
            s.waiter.waker.take(),
        ))
    }

    /// Records the hold a granted entry became; returns its waker.
    pub(crate) fn finish_grant(&mut self, slot: u32, hold: Option<HoldId>) -> Option<Waker> {
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        s.waiter.state = WaiterState::Granted(hold);
        s.waiter.waker.take()
    }

    /// Every entry, in queue order.
    pub(crate) fn entries(&self) -> impl DoubleEndedIterator<Item = &Waiter> + Clone {
        self.order
            .values()
            .filter_map(|&slot| Some(&self.slot(slot)?.waiter))
    }

    /// Waiting entries in queue order, with their places and slots.
    pub(crate) fn waiting_slots(&self) -> impl Iterator<Item = (Pos, u32)> + '_ {
        self.order
            .iter()
            .filter(|(_, slot)| self.waiting_at(**slot).is_some())
            .map(|(pos, slot)| (*pos, *slot))
    }

    /// Waiting entries in queue order, with their places and slots.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> impl Iterator<Item = (Pos, u32)> + '_ {
        self.order
            .iter()
            .filter(|(_, slot)| self.waiting_at(**slot).is_some())
            .map(|(pos, slot)| (*pos, *slot))
    }

    /// Whether any entry is still waiting.
    pub(crate) fn has_waiting(&self) -> bool {
        self.waiting > 0
    }

    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Adds to `out` every waiting entry with a key that overlaps one of
    /// `keys` (whatever the modes).
    pub(crate) fn overlapping(
        &self,
        keys: &[(crate::core::key::Key, crate::core::key::Mode)],
        out: &mut Vec<(Pos, u32)>,
    ) {
        for (key, _) in keys {
            let _ = self.index.visit(key, Mask::ALL, |slot| {
                if let Some(s) = self.slot(slot) {
                    out.push((s.pos, slot));
                }
                ControlFlow::<()>::Continue(())
            });
        }
    }

    /// Whether any waiting entry needs an actor slot.
    pub(crate) fn has_slot_waiters(&self) -> bool {
        !self.children.is_empty()
    }

    /// Adds to `out` every waiting entry that needs an actor slot.
    pub(crate) fn slot_waiters(&self, out: &mut Vec<(Pos, u32)>) {
        out.extend(self.children.iter().map(|(pos, slot)| (*pos, *slot)));
    }

    /// The waiting entries before `limit` that need an actor slot, in
    /// queue order.
    pub(crate) fn children_ahead(&self, limit: Pos) -> impl Iterator<Item = (Pos, &Waiter)> {
        self.children
            .range(..limit)
            .filter_map(|(pos, &slot)| Some((*pos, &self.slot(slot)?.waiter)))
    }

    /// Calls `f(pos, waiter, i)` for every waiting entry before `limit`
    /// that conflicts with `claim` through `claim.keys[i]` (possibly more
    /// than once, in no particular order), except those `claim` passes:
    /// `passes(waiter's claim)` is the precedence rule, asked only of
    /// entries that conflict. Stops when `f` breaks.
    pub(crate) fn scan<B>(
        &self,
        claim: &Claim,
        limit: Pos,
        passes: &dyn Fn(&Claim) -> bool,
        mut f: impl FnMut(Pos, &Waiter, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if self.waiting == 0 {
            return ControlFlow::Continue(());
        }
        for (i, (key, mode)) in claim.keys.iter().enumerate() {
            let mask = class_of(claim, *mode).clashes();
            self.index.visit(key, mask, |slot| {
                let Some(s) = self.slot(slot) else {
                    return ControlFlow::Continue(());
                };
                if s.pos >= limit
                    || covers(claim, &s.waiter.claim)
                    || covers(&s.waiter.claim, claim)
                    || passes(&s.waiter.claim)
                {
                    return ControlFlow::Continue(());
                }
                f(s.pos, &s.waiter, i)
            })?;
        }
        ControlFlow::Continue(())
    }

    /// Panics when an invariant of the type docs is broken.
    pub(crate) fn assert_invariants(&self) {
        let live: Vec<(u32, &Slot)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as u32, s.as_ref()?)))
            .collect();
        let order: Vec<(Pos, u32)> = self.order.iter().map(|(p, s)| (*p, *s)).collect();
        let mut expected: Vec<(Pos, u32)> = live.iter().map(|(i, s)| (s.pos, *i)).collect();
        expected.sort_unstable();
        assert_eq!(order, expected, "queue order disagrees with the slots");
        for (slot, s) in &live {
            let w = &s.waiter;
            assert_eq!(self.ids.get(&w.id), Some(slot), "ids[{:?}]", w.id);
            assert_eq!(s.pos.rank, Reverse(w.priority), "rank of {:?}", w.id);
            assert!(
                s.pos.place <= self.next_place && s.pos.place < u64::MAX,
                "place of {:?}",
                w.id
            );
        }
        assert_eq!(self.ids.len(), live.len(), "ids and slots disagree");
        let mut free = self.free.clone();
        free.sort_unstable();
        let empty: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&s| self.slots[s as usize].is_none())
            .collect();
        assert_eq!(free, empty, "the free list is not the empty slots");
        let waiting: Vec<&(u32, &Slot)> =
            live.iter().filter(|(_, s)| s.waiter.is_waiting()).collect();
        assert_eq!(waiting.len(), self.waiting, "waiting count");
        let mut keys = 0;
        for (slot, s) in &live {
            let claim = &s.waiter.claim;
            if !s.waiter.is_waiting() {
                assert!(
                    s.nodes.as_slice().is_empty(),
                    "granted {:?} is still indexed",
                    s.waiter.id
                );
                continue;
            }
            assert_eq!(
                s.nodes.as_slice().len(),
                claim.keys.len(),
                "nodes of {:?}",
                s.waiter.id
            );
            for ((key, mode), &node) in claim.keys.iter().zip(s.nodes.as_slice()) {
                assert!(
                    self.index
                        .holds_entry(node, key, class_of(claim, *mode), *slot),
                    "key {key:?} of {:?} is not at its node",
                    s.waiter.id
                );
            }
            keys += claim.keys.len();
        }
        assert_eq!(self.index.assert_consistent(), keys, "index entries");
        let children: Vec<(Pos, u32)> = self.children.iter().map(|(p, s)| (*p, *s)).collect();
        let mut expected: Vec<(Pos, u32)> = waiting
            .iter()
            .filter(|(_, s)| matches!(s.waiter.need, Need::Child(_)))
            .map(|(slot, s)| (s.pos, *slot))
            .collect();
        expected.sort_unstable();
        assert_eq!(
            children, expected,
            "children disagree with the waiting entries"
        );
    }
}

/// Why a request is waiting, checked in this order.
///
/// ```
/// let cause = writ::WaitCause::Path { path: "src/lex.rs".into(), holder: "parser".into() };
/// assert_eq!(cause.to_string(), "waiting for 'parser' to release src/lex.rs");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "cause")]
pub enum WaitCause {
    /// `Config::max_actors` is reached.
    Slots,
    /// `Config::max_writers` is reached.
    Writers,
    /// A path is held, or queued for, by someone else.
    Path {
        /// The contested path (the requester's key).
        path: std::path::PathBuf,
        /// The name of the actor holding or queued for it.
        holder: String,
    },
}

impl std::fmt::Display for WaitCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitCause::Slots => f.write_str("waiting for a free actor slot (max_actors)"),
            WaitCause::Writers => f.write_str("waiting for a free writer slot (max_writers)"),
            WaitCause::Path { path, holder } => {
                write!(f, "waiting for '{holder}' to release {}", path.display())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::table::HoldKind;
    use crate::core::table::strategies::lineage_of;

    fn waiter(queue: &mut Queue, priority: i32) -> WaiterId {
        let id = queue.next_id();
        queue.insert(Waiter {
            id,
            requester: ActorId(1),
            requester_name: "a".into(),
            claim: Claim {
                owner: ActorId(1),
                lineage: lineage_of(1).into(),
                kind: HoldKind::Call,
                keys: Vec::new(),
            },
            need: Need::Hold,
            priority,
            refusals: 0,
            label: None,
            since: Instant::now(),
            waker: None,
            state: WaiterState::Waiting,
        });
        id
    }

    fn ids(queue: &Queue) -> Vec<u64> {
        queue.entries().map(|w| w.id.0).collect()
    }

    /// Moves keep every other entry's order, never cross priorities or go
    /// backwards, and survive running out of places between two
    /// neighbours (the queue is numbered again).
    #[test]
    fn a_waiter_moves_just_ahead_of_another_of_its_priority() {
        let mut queue = Queue::default();
        let high = waiter(&mut queue, 1);
        let first = waiter(&mut queue, 0);
        let second = waiter(&mut queue, 0);
        assert_eq!(ids(&queue), [high.0, first.0, second.0]);
        assert!(!queue.place_ahead(second, high), "across priorities");
        assert!(!queue.place_ahead(first, second), "backwards");
        assert_eq!(ids(&queue), [high.0, first.0, second.0]);
        // Each new arrival goes just ahead of `second`: the gap between
        // the entry before it and `second` halves every time.
        let mut expected = vec![high.0, first.0];
        for _ in 0..3 * 64 {
            let new = waiter(&mut queue, 0);
            assert!(queue.place_ahead(new, second));
            expected.push(new.0);
            let mut want = expected.clone();
            want.push(second.0);
            assert_eq!(ids(&queue), want);
            queue.assert_invariants();
        }
        // And to the front of its priority, over and over.
        for _ in 0..64 {
            let new = waiter(&mut queue, 0);
            assert!(queue.place_ahead(new, WaiterId(expected[1])));
            expected.insert(1, new.0);
            let mut want = expected.clone();
            want.push(second.0);
            assert_eq!(ids(&queue), want);
            queue.assert_invariants();
        }
    }
}
