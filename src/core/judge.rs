//! The grant rule's judgement, written once for both tables.
//!
//! A table shows itself through [`View`]: the live holds a claim conflicts
//! with, the requests queued ahead of a place that it conflicts with, the
//! `child_wait`s queued ahead, and the slot counts. The in-process state
//! answers from its indexes; the table in etcd answers from what one
//! admission read at one revision. Every decision about a request's paths
//! and slots is a function here over a `View`, so the two tables cannot
//! judge differently:
//!
//! - [`judge`]: grant rules 1–3 (slots, live holds, waiting requests ahead
//!   that the fence owner's precedence does not pass), the first blocker;
//! - [`explain`]: every blocker, for `blocked_by`, wait causes and the
//!   wait-for edges, with the fences whose precedence let it pass;
//! - [`reserved_ahead`] and [`slot_wait`]: a `child_wait` whose paths are
//!   free reserves its slot ahead of later children (SPEC §11);
//! - [`passing_fence`]: the fence owner's precedence (SPEC §4), and a
//!   claim's leaving reads alone (SPEC §6).
//!
//! Nothing here reads or writes: what a table does with a judgement (queue,
//! grant, commit with compares on what was read) stays with the table.

use std::ops::ControlFlow;

use crate::core::key::{Key, Mode, overlaps};
use crate::core::table::{ActorId, Claim, HoldKind, conflict, covers};
use crate::error::SlotLimit;

/// The slots of SPEC §11 a new child takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seats {
    /// It counts against `max_actors`.
    pub(crate) actor: bool,
    /// It counts against `max_writers` (it may write).
    pub(crate) writer: bool,
}

/// The slots taken and their limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Slots {
    pub(crate) children: usize,
    pub(crate) writers: usize,
    pub(crate) max_actors: Option<usize>,
    pub(crate) max_writers: Option<usize>,
}

/// A table as the rules need to see it.
///
/// The visits call `each` for every match, in any order and possibly more
/// than once, and stop as soon as `each` breaks; the functions of this
/// module pick the first in grant or queue order themselves.
pub(crate) trait View {
    /// A live hold, ordered by grant.
    type Hold: Copy + Ord;
    /// A waiting request.
    type Waiter: Copy + Eq;
    /// A place in the queue, ordered front to back.
    type Place: Copy + Ord;

    /// Visits every live hold that `claim` conflicts with: the hold, its
    /// claim, and the index of the first key of `claim` in its way.
    fn visit_holds<B>(
        &self,
        claim: &Claim,
        each: impl FnMut(Self::Hold, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B>;

    /// Visits every request queued ahead of `at` that `claim` conflicts
    /// with: its place, the request, its whole claim, and the index of the
    /// key of `claim` in its way.
    fn visit_waiters<B>(
        &self,
        claim: &Claim,
        at: Self::Place,
        each: impl FnMut(Self::Place, Self::Waiter, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B>;

    /// Visits every `child_wait` queued ahead of `at`: its place, its claim
    /// and the seats it would take.
    fn visit_children<B>(
        &self,
        at: Self::Place,
        each: impl FnMut(Self::Place, &Claim, Seats) -> ControlFlow<B>,
    ) -> ControlFlow<B>;

    /// The live children, the live writers and the limits.
    fn slots(&self) -> Slots;

    /// The actor that asked for a waiting request (for a `child_wait`, the
    /// parent, not the child its claim is for).
    fn requester(&self, waiter: Self::Waiter) -> ActorId;
}

/// What stands in a request's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocker<H, W> {
    /// A slot limit (only for a `child_wait`).
    Slot(SlotLimit),
    /// A live hold, and the index of the key of the request in its way.
    Hold(H, usize),
    /// A request queued ahead, and the index of the key in its way.
    Waiter(W, usize),
}

/// The fence owner's precedence (SPEC §4): a request `claim` passes the
/// earlier waiting request `earlier` when a live fence that blocks
/// `earlier` covers `claim`, since `earlier` cannot be granted before that
/// fence goes anyway. Returns the fence.
///
/// A claim (SPEC §6) holds back writes, never reads: a request that a live
/// claim blocking `earlier` does not conflict with (a read) passes
/// `earlier` as well, for the same reason. Without it a read would queue
/// behind the writers waiting for a hot file's claim, and so wait for the
/// claim after all.
pub(crate) fn passing_fence<V: View>(view: &V, earlier: &Claim, claim: &Claim) -> Option<V::Hold> {
    match view.visit_holds(earlier, |hold, fence, _| {
        let clear_of_claim = fence.kind == HoldKind::Claim && conflict(fence, claim).is_none();
        if covers(fence, claim) || clear_of_claim {
            ControlFlow::Break(hold)
        } else {
            ControlFlow::Continue(())
        }
    }) {
        ControlFlow::Break(fence) => Some(fence),
        ControlFlow::Continue(()) => None,
    }
}

/// The first live hold (in grant order) in `claim`'s way, and its key.
pub(crate) fn first_hold<V: View>(view: &V, claim: &Claim) -> Option<(V::Hold, usize)> {
    let mut first: Option<(V::Hold, usize)> = None;
    let _ = view.visit_holds(claim, |hold, _, key| {
        if first.is_none_or(|best| (hold, key) < best) {
            first = Some((hold, key));
        }
        ControlFlow::<()>::Continue(())
    });
    first
}

/// The first request queued ahead of `at` (in queue order) in `claim`'s
/// way that it does not pass, and its key.
fn first_waiter<V: View>(view: &V, claim: &Claim, at: V::Place) -> Option<(V::Waiter, usize)> {
    let mut first: Option<(V::Place, usize, V::Waiter)> = None;
    let _ = view.visit_waiters(claim, at, |place, waiter, earlier, key| {
        if first.is_none_or(|(p, k, _)| (place, key) < (p, k))
            && passing_fence(view, earlier, claim).is_none()
        {
            first = Some((place, key, waiter));
        }
        ControlFlow::<()>::Continue(())
    });
    first.map(|(_, key, waiter)| (waiter, key))
}

/// Whether nothing is in the way of `claim`'s paths at `at`: no live hold,
/// and no request queued ahead that it does not pass.
pub(crate) fn paths_free<V: View>(view: &V, claim: &Claim, at: V::Place) -> bool {
    view.visit_holds(claim, |_, _, _| ControlFlow::Break(()))
        .is_continue()
        && view
            .visit_waiters(claim, at, |_, _, earlier, _| {
                if passing_fence(view, earlier, claim).is_some() {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })
            .is_continue()
}

/// The actor and writer slots that the `child_wait`s queued ahead of `at`
/// reserve: only those whose paths are free wait for a slot (SPEC §11); one
/// still waiting for a path reserves nothing.
pub(crate) fn reserved_ahead<V: View>(view: &V, at: V::Place) -> (usize, usize) {
    let (mut actors, mut writers) = (0, 0);
    let _ = view.visit_children(at, |place, claim, seats| {
        if paths_free(view, claim, place) {
            actors += usize::from(seats.actor);
            writers += usize::from(seats.writer);
        }
        ControlFlow::<()>::Continue(())
    });
    (actors, writers)
}

/// The limit that leaves a child taking `seats` without a slot, with
/// `reserved` slots promised to `child_wait`s ahead: actors first.
pub(crate) fn slot_limit(
    slots: Slots,
    seats: Seats,
    reserved: (usize, usize),
) -> Option<SlotLimit> {
    if seats.actor
        && slots
            .max_actors
            .is_some_and(|max| slots.children + reserved.0 >= max)
    {
        return Some(SlotLimit::MaxActors);
    }
    if seats.writer
        && slots
            .max_writers
            .is_some_and(|max| slots.writers + reserved.1 >= max)
    {
        return Some(SlotLimit::MaxWriters);
    }
    None
}

/// The slot limit a `child_wait` at `at` waits on, if it waits for a slot:
/// only once its paths are free (SPEC §11).
pub(crate) fn slot_wait<V: View>(
    view: &V,
    claim: &Claim,
    seats: Seats,
    at: V::Place,
) -> Option<SlotLimit> {
    if !paths_free(view, claim, at) {
        return None;
    }
    slot_limit(view.slots(), seats, reserved_ahead(view, at))
}

/// Grant rules 1–3 for a request at `at` (a new child's `seats` given):
/// slots, then live holds, then requests queued ahead that it does not
/// pass. `None`: it may be granted now.
pub(crate) fn judge<V: View>(
    view: &V,
    claim: &Claim,
    seats: Option<Seats>,
    at: V::Place,
) -> Option<Blocker<V::Hold, V::Waiter>> {
    if let Some(seats) = seats {
        if let Some(limit) = slot_limit(view.slots(), seats, reserved_ahead(view, at)) {
            return Some(Blocker::Slot(limit));
        }
    }
    if let Some((hold, key)) = first_hold(view, claim) {
        return Some(Blocker::Hold(hold, key));
    }
    first_waiter(view, claim, at).map(|(waiter, key)| Blocker::Waiter(waiter, key))
}

/// Everything in a request's way, as [`explain`] found it.
pub(crate) struct Explained<V: View> {
    /// The live holds in its way, in grant order, each with its key.
    pub(crate) holds: Vec<(V::Hold, usize)>,
    /// The requests queued ahead in its way that it does not pass, in
    /// queue order, each with its key.
    pub(crate) waiters: Vec<(V::Waiter, usize)>,
    /// The fences whose owner's precedence let it pass a request ahead.
    /// The in-process state needs none of them (its mutex keeps them);
    /// the table in etcd commits on their being unchanged.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) relied: Vec<V::Hold>,
    /// What it waits for: the first blocker, as [`judge`] finds it.
    pub(crate) first: Option<Blocker<V::Hold, V::Waiter>>,
}

/// Every blocker of a request at `at` (a new child's `seats` given), judged
/// as [`judge`] judges: the answer of `blocked_by`, the wait cause, and the
/// request's wait-for edges.
pub(crate) fn explain<V: View>(
    view: &V,
    claim: &Claim,
    seats: Option<Seats>,
    at: V::Place,
) -> Explained<V> {
    let mut holds: Vec<(V::Hold, usize)> = Vec::new();
    let _ = view.visit_holds(claim, |hold, _, key| {
        holds.push((hold, key));
        ControlFlow::<()>::Continue(())
    });
    holds.sort_unstable();
    holds.dedup_by_key(|(hold, _)| *hold);
    let mut waiters: Vec<(V::Place, usize, V::Waiter)> = Vec::new();
    let mut relied = Vec::new();
    let _ = view.visit_waiters(claim, at, |place, waiter, earlier, key| {
        match passing_fence(view, earlier, claim) {
            Some(fence) => relied.push(fence),
            None => waiters.push((place, key, waiter)),
        }
        ControlFlow::<()>::Continue(())
    });
    waiters.sort_unstable_by_key(|&(place, key, _)| (place, key));
    waiters.dedup_by(|a, b| a.0 == b.0 && a.2 == b.2);
    relied.sort_unstable();
    relied.dedup();
    let slot = seats.and_then(|seats| slot_limit(view.slots(), seats, reserved_ahead(view, at)));
    let first = match (slot, holds.first(), waiters.first()) {
        (Some(limit), _, _) => Some(Blocker::Slot(limit)),
        (None, Some(&(hold, key)), _) => Some(Blocker::Hold(hold, key)),
        (None, None, Some(&(_, key, waiter))) => Some(Blocker::Waiter(waiter, key)),
        (None, None, None) => None,
    };
    Explained {
        holds,
        waiters: waiters.into_iter().map(|(_, k, w)| (w, k)).collect(),
        relied,
        first,
    }
}

/// The owner of the fence a request asks for, if it asks for one: a fence
/// request's actor, or a `child_wait`'s child (its grant fence).
pub(crate) fn fence_owner(claim: &Claim) -> Option<ActorId> {
    (claim.kind == HoldKind::Fence).then_some(claim.owner)
}

/// A waiting request's edges in the wait-for graph (SPEC §4's
/// refinement), judged as [`explain`] judges. Call holds draw none: a call
/// is admitted once for its whole set and never holds while it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitEdges<W> {
    /// Hard: owners of the live fences and claims in its way.
    pub(crate) fences: Vec<ActorId>,
    /// Soft: the requests queued ahead in its way that it does not pass,
    /// in queue order.
    pub(crate) earlier: Vec<W>,
    /// Owners of the fences those earlier requests ask for: once granted,
    /// such a fence is held until its owner's waits are over, so the
    /// request waits on the owner too.
    pub(crate) asked: Vec<ActorId>,
    /// The requests queued ahead that it passes by the fence owner's
    /// precedence, when it asks for a fence: once granted, that fence is in
    /// their way, so each of them waits on [`fence_owner`] of the request.
    pub(crate) passed: Vec<W>,
}

/// A request's hard edges: the owners of the live fences and claims in the
/// way of `claim` (but `requester` itself), each once. A claim is held
/// until its owner writes, so a wait on it is a wait on that owner (SPEC
/// §6).
pub(crate) fn fence_owners_in_the_way<V: View>(
    view: &V,
    requester: ActorId,
    claim: &Claim,
) -> Vec<ActorId> {
    let mut owners = Vec::new();
    let _ = view.visit_holds(claim, |_, hold, _| {
        if hold.kind.outlives_call() && hold.owner != requester {
            owners.push(hold.owner);
        }
        ControlFlow::<()>::Continue(())
    });
    owners.sort_unstable();
    owners.dedup();
    owners
}

/// The wait-for edges of a request by `requester` for `claim`, queued at
/// `at`. Edges back to the requester itself are left out (its own fences
/// never block it; its own requests are no wait on itself).
pub(crate) fn wait_edges<V: View>(
    view: &V,
    requester: ActorId,
    claim: &Claim,
    at: V::Place,
) -> WaitEdges<V::Waiter> {
    let owner = fence_owner(claim);
    let mut earlier: Vec<(V::Place, V::Waiter)> = Vec::new();
    let mut passed: Vec<(V::Place, V::Waiter)> = Vec::new();
    let mut asked = Vec::new();
    let _ = view.visit_waiters(claim, at, |place, waiter, ahead, _| {
        if passing_fence(view, ahead, claim).is_none() {
            earlier.push((place, waiter));
            if let Some(o) = fence_owner(ahead).filter(|&o| o != requester) {
                asked.push(o);
            }
        } else if owner.is_some_and(|o| view.requester(waiter) != o) {
            passed.push((place, waiter));
        }
        ControlFlow::<()>::Continue(())
    });
    let in_order = |mut found: Vec<(V::Place, V::Waiter)>| {
        found.sort_by_key(|&(place, _)| place);
        found.dedup_by(|a, b| a.0 == b.0);
        found.into_iter().map(|(_, w)| w).collect()
    };
    asked.sort_unstable();
    asked.dedup();
    WaitEdges {
        fences: fence_owners_in_the_way(view, requester, claim),
        earlier: in_order(earlier),
        asked,
        passed: in_order(passed),
    }
}

/// What a `Busy` names of a request `claim` blocked through its key `key`
/// by `blocker` (a hold, or a request queued ahead): that key, and the mode
/// the blocker holds or asks for on it.
pub(crate) fn contested<'a>(
    claim: &'a Claim,
    key: usize,
    blocker: &Claim,
) -> Option<(&'a Key, Mode)> {
    let (requested, _) = claim.keys.get(key)?;
    let (_, mode) = blocker
        .keys
        .iter()
        .find(|(k, _)| overlaps(k, requested))
        .or(blocker.keys.first())?;
    Some((requested, *mode))
}
