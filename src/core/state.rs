//! The scheduler's state and its rules, without the lock.
//!
//! `State` is plain data: the resource table, the wait queue, the live actors,
//! slot counts and counters. Every method takes `&mut self` (the caller holds
//! the scheduler's mutex) and returns the wakers to wake *after* unlocking.
//! See `docs/DESIGN.md` for the numbered grant and wake-up rules.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use serde::Serialize;

use crate::core::deadlock::{Move, Who};
use crate::core::judge::{self, Seats, Slots, View};
use crate::core::key::{Key, Mode};
use crate::core::queue::{Need, Pos, Queue, WaitCause, Waiter, WaiterId, WaiterState};
use crate::core::table::{
    ActorId, Blocking, ChildRecord, Claim, Hold, HoldId, HoldKind, Table, conflict, covers,
};
use crate::error::SlotLimit;

/// Admission counters since the scheduler was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Requests granted (at once or after waiting).
    pub admitted: u64,
    /// Try-only requests refused with `Busy` or `NoSlot`.
    pub refused: u64,
    /// Requests that had to wait.
    pub waited: u64,
    /// Waits that ended in `Timeout`.
    pub timed_out: u64,
    /// Waits refused with `Deadlock`.
    pub deadlocks: u64,
}

/// The dump's counters line, one wording wherever the table lives.
///
/// ```
/// let c = writ::Counters::default();
/// assert_eq!(c.to_string(), "admitted 0, refused 0, waited 0, timed out 0, deadlocks 0");
/// ```
impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "admitted {}, refused {}, waited {}, timed out {}, deadlocks {}",
            self.admitted, self.refused, self.waited, self.timed_out, self.deadlocks
        )
    }
}

/// What stands in a request's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocker {
    Slots,
    Writers,
    Hold(Blocking),
    Waiter { waiter: WaiterId, key: usize },
}

impl From<judge::Blocker<HoldId, WaiterId>> for Blocker {
    fn from(blocker: judge::Blocker<HoldId, WaiterId>) -> Self {
        match blocker {
            judge::Blocker::Slot(SlotLimit::MaxActors) => Blocker::Slots,
            judge::Blocker::Slot(SlotLimit::MaxWriters) => Blocker::Writers,
            judge::Blocker::Hold(hold, key) => Blocker::Hold(Blocking { hold, key }),
            judge::Blocker::Waiter(waiter, key) => Blocker::Waiter { waiter, key },
        }
    }
}

/// The seats a request takes: a new child's, none for a hold.
fn seats(need: &Need) -> Option<Seats> {
    match need {
        Need::Child(child) => Some(Seats {
            actor: child.counts_actor,
            writer: child.counts_writer,
        }),
        Need::Hold => None,
    }
}

/// The in-process state as [`judge`] sees it: the table's and the queue's
/// indexes answer the visits.
pub(crate) struct LiveView<'a> {
    state: &'a State,
    except: Option<HoldId>,
}

impl View for LiveView<'_> {
    type Hold = HoldId;
    type Waiter = WaiterId;
    type Place = Pos;

    fn visit_holds<B>(
        &self,
        claim: &Claim,
        each: impl FnMut(HoldId, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        self.state.table.scan(claim, self.except, each)
    }

    fn visit_waiters<B>(
        &self,
        claim: &Claim,
        at: Pos,
        mut each: impl FnMut(Pos, WaiterId, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        self.state
            .queue
            .scan(claim, at, &|_| false, |pos, waiter, key| {
                each(pos, waiter.id, &waiter.claim, key)
            })
    }

    fn visit_children<B>(
        &self,
        at: Pos,
        mut each: impl FnMut(Pos, &Claim, Seats) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        for (pos, waiter) in self.state.queue.children_ahead(at) {
            if let Some(seats) = seats(&waiter.need) {
                each(pos, &waiter.claim, seats)?;
            }
        }
        ControlFlow::Continue(())
    }

    fn requester(&self, waiter: WaiterId) -> ActorId {
        self.state
            .queue
            .get(waiter)
            .map_or(ActorId(u64::MAX), |w| w.requester)
    }

    fn slots(&self) -> Slots {
        Slots {
            children: self.state.live_children,
            writers: self.state.live_writers,
            max_actors: self.state.max_actors,
            max_writers: self.state.max_writers,
        }
    }
}

/// A copy of whatever blocks a request, for messages.
#[derive(Debug, Clone)]
pub(crate) struct BlockerInfo {
    pub(crate) requested: PathBuf,
    pub(crate) holder: String,
    pub(crate) kind: HoldKind,
    pub(crate) mode: Mode,
    pub(crate) label: Option<String>,
    pub(crate) since: Instant,
    pub(crate) queued: bool,
}

/// The session-wide state behind the scheduler's mutex.
///
/// Invariants (checked by [`State::assert_invariants`]):
/// - no two holds in `table` conflict;
/// - `queue` is in priority-then-arrival order;
/// - `claims` has a deadline for exactly the holds of kind `Claim`;
/// - `live_children` = records with `counts_actor`, `live_writers` = records
///   with `counts_writer` (both only over live actors);
/// - no waiting entry is grantable under the wake-up rule (no lost wakeup).
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) table: Table,
    pub(crate) queue: Queue,
    pub(crate) actors: BTreeMap<ActorId, (ChildRecord, Instant)>,
    pub(crate) live_children: usize,
    pub(crate) live_writers: usize,
    pub(crate) max_actors: Option<usize>,
    pub(crate) max_writers: Option<usize>,
    pub(crate) counters: Counters,
    /// Waiting requests refused after they started waiting, with the cycle
    /// each closed, until their futures pick the refusal up.
    pub(crate) refused: BTreeMap<WaiterId, Vec<ActorId>>,
    /// The live claims (SPEC §6) and when each ends unless its holder
    /// writes first.
    pub(crate) claims: BTreeMap<HoldId, Instant>,
    /// Tests set this to make every wake-up a full scan, the reference the
    /// narrow scan is compared with.
    #[cfg(test)]
    pub(crate) full_scan: bool,
}

fn counts_actor(w: &Waiter) -> bool {
    matches!(&w.need, Need::Child(c) if c.counts_actor)
}

fn counts_writer(w: &Waiter) -> bool {
    matches!(&w.need, Need::Child(c) if c.counts_writer)
}

impl State {
    pub(crate) fn new(max_actors: Option<usize>, max_writers: Option<usize>) -> Self {
        State {
            max_actors,
            max_writers,
            ..State::default()
        }
    }

    /// The state as the judgement sees it, `except` (a hold being widened)
    /// left out of the table.
    ///
    /// Only a call hold is left out: a fence never conflicts with a claim of
    /// its owner (it covers it), and a fence being widened still lets its
    /// owner pass the waiters it blocks (the precedence asks every fence).
    pub(crate) fn view(&self, except: Option<HoldId>) -> LiveView<'_> {
        let except = except.filter(|id| {
            self.table
                .get(*id)
                .is_some_and(|h| h.claim.kind == HoldKind::Call)
        });
        LiveView {
            state: self,
            except,
        }
    }

    /// Grant rule 1–3 for a request not yet queued: slots, then live holds
    /// (except `except`, the request's own hold when it grows), then every
    /// waiting request ahead of `priority` ([`judge::judge`]).
    pub(crate) fn blocker(
        &self,
        claim: &Claim,
        need: &Need,
        priority: i32,
        except: Option<HoldId>,
    ) -> Option<Blocker> {
        self.blocker_at(claim, need, Pos::end_of(priority), except)
    }

    /// [`State::blocker`] for a request that would queue at `at`
    /// ([`Pos::end_of_tier`]: its priority and refusals).
    pub(crate) fn blocker_at(
        &self,
        claim: &Claim,
        need: &Need,
        at: Pos,
        except: Option<HoldId>,
    ) -> Option<Blocker> {
        judge::judge(&self.view(except), claim, seats(need), at).map(Blocker::from)
    }

    /// Precedence of a fence's owner (§4, [`judge::passing_fence`]).
    pub(crate) fn passes(&self, earlier: &Claim, claim: &Claim) -> bool {
        judge::passing_fence(&self.view(None), earlier, claim).is_some()
    }

    /// The slot limit a `child_wait` at `pos` waits on, if it waits for a
    /// slot: only once its paths are free (§11).
    pub(crate) fn slot_wait(&self, claim: &Claim, need: &Need, pos: Pos) -> Option<Blocker> {
        let seats = seats(need)?;
        judge::slot_wait(&self.view(None), claim, seats, pos)
            .map(|limit| Blocker::from(judge::Blocker::Slot(limit)))
    }

    /// Inserts the hold a request becomes (if it has keys) and registers a
    /// new child. The caller has checked [`State::blocker`].
    pub(crate) fn grant(
        &mut self,
        claim: Claim,
        need: Need,
        actor_name: Arc<str>,
        label: Option<Arc<str>>,
        now: Instant,
    ) -> Option<HoldId> {
        if let Need::Child(child) = need {
            self.register(child, now);
        }
        self.counters.admitted += 1;
        if claim.keys.is_empty() {
            return None;
        }
        Some(self.table.insert(Hold {
            claim,
            actor_name,
            label,
            since: now,
        }))
    }

    /// Grants a request [`State::blocker`] found free and wakes whoever the
    /// new hold unblocks ([`State::wake_after_grant`]).
    pub(crate) fn admit(
        &mut self,
        claim: Claim,
        need: Need,
        actor_name: Arc<str>,
        label: Option<Arc<str>>,
        now: Instant,
    ) -> (Option<HoldId>, Vec<Waker>) {
        let kind = claim.kind;
        let hold = self.grant(claim, need, actor_name, label, now);
        let wakers = match hold {
            Some(_) => self.wake_after_grant(kind, now),
            None => Vec::new(),
        };
        (hold, wakers)
    }

    /// The wake-up scan after a hold of `kind` was granted or widened. A
    /// new hold blocks, yet it can unblock two kinds of waiter: under the
    /// precedence rule (§4) a fence makes the owner's line pass the waiters
    /// it blocks ([`State::wake_after_fence`]); and a `child_wait` reserves
    /// its slots only while its paths are free (§11), so a hold that blocks
    /// such a waiter hands its reservation to the slot waits behind it.
    pub(crate) fn wake_after_grant(&mut self, kind: HoldKind, now: Instant) -> Vec<Waker> {
        match kind {
            HoldKind::Fence | HoldKind::Claim => self.wake_after_fence(now),
            HoldKind::Call => self.wake_slot_waits(now),
        }
    }

    /// Judges the queued slot waits again after something may have taken a
    /// reservation away from a `child_wait` ahead of them (see
    /// [`judge::reserved_ahead`]). Free when no slot wait is queued.
    fn wake_slot_waits(&mut self, now: Instant) -> Vec<Waker> {
        let limited = self.max_actors.is_some() || self.max_writers.is_some();
        if !limited || !self.queue.has_slot_waiters() {
            return Vec::new();
        }
        self.wake_after(now, &[], true)
    }

    /// Registers a live actor and takes its slots.
    pub(crate) fn register(&mut self, child: ChildRecord, now: Instant) {
        self.live_children += usize::from(child.counts_actor);
        self.live_writers += usize::from(child.counts_writer);
        self.actors.insert(child.id, (child, now));
    }

    /// Queues a request; returns its id and the wakers of slot waits it
    /// unblocked: a waiter queued ahead of a `child_wait` whose paths it
    /// blocks takes that `child_wait`'s slot reservation away (§11).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue(
        &mut self,
        requester: ActorId,
        requester_name: Arc<str>,
        claim: Claim,
        need: Need,
        (priority, refusals): (i32, u32),
        label: Option<Arc<str>>,
        now: Instant,
        waker: Waker,
    ) -> (WaiterId, Vec<Waker>) {
        let id = self.queue.next_id();
        self.queue.insert(Waiter {
            id,
            requester,
            requester_name,
            claim,
            need,
            priority,
            refusals,
            label,
            since: now,
            waker: Some(waker),
            state: WaiterState::Waiting,
        });
        self.counters.waited += 1;
        (id, self.wake_slot_waits(now))
    }

    /// The wake-up scan (rule 4) over the whole queue: walks it in order and
    /// grants every waiting request that conflicts with no live hold and no
    /// request still waiting ahead of it. Returns the wakers of those
    /// granted.
    ///
    /// Every caller knows what changed and uses the narrowed scan behind
    /// [`State::release`], [`State::narrow`], [`State::cancel`] and
    /// [`State::drop_actor`]; this full scan is the reference the tests
    /// compare it with.
    #[cfg(test)]
    pub(crate) fn wake_locked(&mut self, now: Instant) -> Vec<Waker> {
        if !self.queue.has_waiting() {
            return Vec::new();
        }
        let candidates: Vec<(Pos, u32)> = self.queue.waiting().collect();
        self.wake_candidates(candidates, now)
    }

    /// The wake-up scan after `released` keys stopped being held (or
    /// waited for), and, when `slots` is set, after an actor slot or a
    /// slot reservation was given back.
    ///
    /// Only waiting requests that overlap a released key, plus (when
    /// `slots`) those that need an actor slot, are examined. That grants
    /// exactly what the full scan ([`State::wake_locked`]) would:
    ///
    /// 1. Before the change no waiting request was grantable (the
    ///    no-lost-wakeup invariant). Whether a request is grantable depends
    ///    on three things only: the live holds it conflicts with, the
    ///    waiting requests ahead of it it conflicts with, and — for a child —
    ///    the slot counts and the slots reserved by children queued ahead.
    /// 2. A hold or waiting request that goes away can only unblock a
    ///    request that conflicted with it, and a conflict needs overlapping
    ///    keys; a slot given back can only unblock a request that needs a
    ///    slot. So a request outside the candidates is exactly as blocked
    ///    as before the change.
    /// 3. Granting a call unblocks no request by its paths: for requests
    ///    behind it, it turns from a waiting request ahead into a live hold
    ///    with the same claim (so it conflicts with the same requests), and
    ///    the slot it takes was already counted as reserved; for requests
    ///    ahead of it, it adds a hold and takes a slot. It can unblock a
    ///    *slot* wait: a `child_wait` whose paths the new hold blocks stops
    ///    reserving its slot (§11), so after a grant the slot waits are
    ///    judged again ([`State::wake_after_grant`]). Granting a *fence* can
    ///    also unblock by paths, through the precedence rule (a waiter it
    ///    now blocks stops blocking the owner's line), so a scan that grants
    ///    a fence judges every waiting request again
    ///    ([`State::wake_after_fence`]). Releasing or narrowing a fence
    ///    unblocks nothing by paths outside its keys, but it changes whom
    ///    its owner's line passes: a `child_wait` of that line that passed
    ///    an earlier waiter may now queue behind it, its paths blocked, and
    ///    so stop reserving its slot — which can unblock a slot wait that
    ///    overlaps nothing released. So a fence released or narrowed judges
    ///    the slot waits too. So no request outside the candidates stays
    ///    grantable after the scan.
    /// 4. The candidates are judged in queue order against the current
    ///    state, as the full scan judges them, so each is granted iff the
    ///    full scan would grant it. A fence granted during the pass widens
    ///    the rest of it to every waiter behind (its precedence may have
    ///    unblocked one that was no candidate), so the grants come in the
    ///    full scan's order too, not only the same grants.
    ///
    /// Cancelling a waiting request is a change of this kind too (it may
    /// have been soft-blocking those behind it), so `cancel` comes here with
    /// the cancelled request's keys, as PostgreSQL's lock manager re-runs
    /// its wake-up scan when a waiter leaves.
    fn wake_after(&mut self, now: Instant, released: &[(Key, Mode)], slots: bool) -> Vec<Waker> {
        if !self.queue.has_waiting() {
            return Vec::new();
        }
        #[cfg(test)]
        if self.full_scan {
            return self.wake_locked(now);
        }
        let mut candidates = Vec::new();
        self.queue.overlapping(released, &mut candidates);
        if slots {
            self.queue.slot_waiters(&mut candidates);
        }
        self.wake_candidates(candidates, now)
    }

    /// The wake-up scan after a fence was granted or widened: under the
    /// precedence rule (§4) a new fence can *unblock* a waiter — one of the
    /// owner's line queued behind an earlier waiter that the fence now
    /// blocks — and that waiter need not overlap the fence's keys. Fences
    /// are granted far less often than calls, so this judges every waiting
    /// request rather than narrowing.
    pub(crate) fn wake_after_fence(&mut self, now: Instant) -> Vec<Waker> {
        if !self.queue.has_waiting() {
            return Vec::new();
        }
        let candidates: Vec<(Pos, u32)> = self.queue.waiting_slots().collect();
        let mut wakers = self.wake_candidates(candidates, now);
        wakers.extend(self.refuse_cycles(now));
        wakers
    }

    /// Judges `candidates` in queue order by the wake-up rule and grants
    /// those that pass. A grant here can unblock a waiter that was no
    /// candidate ([`State::wake_after_grant`]), so then those are judged
    /// again, until a pass grants nothing.
    fn wake_candidates(&mut self, candidates: Vec<(Pos, u32)>, now: Instant) -> Vec<Waker> {
        let (mut wakers, granted) = self.wake_pass(candidates, now);
        if let Some(kind) = granted {
            wakers.extend(self.wake_after_grant(kind, now));
        }
        wakers
    }

    /// Removes every cycle of the wait-for graph. A new wait is checked
    /// before it queues, but a fence granted or released changes whom the
    /// fence owner's precedence (§4) passes: a released fence no longer
    /// blocks the waiter its line passed, so that line queues behind it
    /// again, and a granted one draws hard edges and passes of its own.
    /// Either can close a cycle no new wait closed. When the reordering
    /// search finds moves that leave no cycle, the queue is reordered and
    /// judged again (a waiter moved ahead may now be grantable); otherwise
    /// the newest waiting request on a cycle is refused with `Deadlock`, as
    /// if it had just asked — left in place the cycle would hang every
    /// request on it.
    fn refuse_cycles(&mut self, now: Instant) -> Vec<Waker> {
        let mut wakers = Vec::new();
        while let Some(closed) = crate::core::deadlock::closed_cycle(self) {
            if let Some(moves) = &closed.moves {
                if self.reorder(moves, None) {
                    let candidates: Vec<(Pos, u32)> = self.queue.waiting_slots().collect();
                    wakers.extend(self.wake_candidates(candidates, now));
                    continue;
                }
            }
            let id = closed.newest;
            let slots = self
                .queue
                .get(id)
                .is_some_and(|w| counts_actor(w) || counts_writer(w));
            let Some((keys, waker)) = self.queue.refuse(id) else {
                break;
            };
            self.counters.deadlocks += 1;
            self.refused.insert(id, closed.cycle);
            wakers.extend(waker);
            // It may have been soft-blocking requests behind it.
            wakers.extend(self.wake_after(now, &keys, slots));
        }
        wakers
    }

    /// Applies the moves of a reordering ([`crate::core::deadlock::Move`]),
    /// `new` standing for [`Who::New`]. The caller runs the wake-up scan
    /// over every waiter afterwards (or grants a fence, which does): a
    /// waiter moved ahead may have become grantable. Returns false if a
    /// move could not be made (the queue changed under the plan); the
    /// moves made before it stay.
    pub(crate) fn reorder(&mut self, moves: &[Move], new: Option<WaiterId>) -> bool {
        let id = |who: Who| match who {
            Who::Queued(id) => Some(id),
            Who::New => new,
        };
        moves.iter().all(|m| match (id(m.waiter), id(m.of)) {
            (Some(waiter), Some(of)) => self.queue.place_ahead(waiter, of),
            _ => false,
        })
    }

    /// The wake-up scan over every waiting request, after a reordering
    /// that came with a new wait.
    pub(crate) fn wake_after_reorder(&mut self, now: Instant) -> Vec<Waker> {
        self.wake_after_fence(now)
    }

    /// Picks up a refusal of a request that was waiting: removes its queue
    /// entry and returns the cycle it closed.
    pub(crate) fn take_refused(&mut self, id: WaiterId) -> Option<Vec<ActorId>> {
        let cycle = self.refused.remove(&id)?;
        self.queue.remove(id);
        Some(cycle)
    }

    /// One pass of the wake-up rule over `candidates`; returns the wakers of
    /// those granted and the strongest kind of hold granted (a fence, else a
    /// call), if any.
    fn wake_pass(
        &mut self,
        mut candidates: Vec<(Pos, u32)>,
        now: Instant,
    ) -> (Vec<Waker>, Option<HoldKind>) {
        candidates.sort_unstable();
        candidates.dedup();
        let mut widened = false;
        let mut granted: Option<HoldKind> = None;
        let mut wakers = Vec::new();
        let mut next = 0;
        while let Some(&(pos, slot)) = candidates.get(next) {
            next += 1;
            let Some(waiter) = self.queue.waiting_at(slot) else {
                continue;
            };
            let grantable =
                judge::judge(&self.view(None), &waiter.claim, seats(&waiter.need), pos).is_none();
            if !grantable {
                continue;
            }
            let Some(g) = self.queue.begin_grant(slot) else {
                continue;
            };
            let kind = g.claim.kind;
            let hold = self.grant(g.claim, g.need, g.name, g.label, now);
            if hold.is_some() && kind == HoldKind::Fence && !widened {
                // A fence lets its owner's line pass the waiters it now
                // blocks (§4), which may unblock a waiter behind it that
                // was no candidate: the rest of the pass judges every
                // waiter behind, in queue order, as the full scan does.
                let mut rest = candidates.split_off(next);
                rest.extend(self.queue.waiting_slots().filter(|&(p, _)| p > pos));
                rest.sort_unstable();
                rest.dedup();
                (candidates, next, widened) = (rest, 0, true);
            }
            if hold.is_some() {
                granted = match (granted, kind) {
                    (Some(HoldKind::Fence), _) | (_, HoldKind::Fence) => Some(HoldKind::Fence),
                    _ => Some(HoldKind::Call),
                };
            }
            wakers.extend(self.queue.finish_grant(slot, hold));
        }
        (wakers, granted)
    }

    /// Picks up a granted request: removes its queue entry and returns what
    /// it was granted, or `None` while it still waits.
    pub(crate) fn take_granted(&mut self, id: WaiterId) -> Option<Option<HoldId>> {
        match self.queue.get(id)?.state {
            WaiterState::Granted(hold) => {
                self.queue.remove(id);
                Some(hold)
            }
            WaiterState::Waiting | WaiterState::Refused => None,
        }
    }

    /// Replaces a waiting request's waker.
    pub(crate) fn set_waker(&mut self, id: WaiterId, waker: &Waker) {
        self.queue.set_waker(id, waker);
    }

    /// Withdraws a request: a waiting one leaves the queue; a granted one
    /// that was never picked up hands its hold (and child slot) back. Either
    /// way the wake-up scan runs again.
    pub(crate) fn cancel(&mut self, id: WaiterId, now: Instant) -> Vec<Waker> {
        let Some(waiter) = self.queue.remove(id) else {
            return Vec::new();
        };
        match waiter.state {
            WaiterState::Granted(hold) => {
                let released = hold.and_then(|hold| self.table.remove(hold));
                let slots = match &waiter.need {
                    Need::Child(child) => self.unregister(child.id),
                    Need::Hold => false,
                };
                let fence = released
                    .as_ref()
                    .is_some_and(|h| h.claim.kind.outlives_call());
                let keys = released.map(|h| h.claim.keys).unwrap_or_default();
                let mut wakers = self.wake_after(now, &keys, slots);
                if fence {
                    wakers.extend(self.refuse_cycles(now));
                }
                wakers
            }
            WaiterState::Refused => {
                // Its keys left the index when it was refused.
                self.refused.remove(&id);
                Vec::new()
            }
            WaiterState::Waiting => {
                // It may have been soft-blocking requests behind it, or
                // reserving a slot ahead of them.
                let slots = counts_actor(&waiter) || counts_writer(&waiter);
                self.wake_after(now, &waiter.claim.keys, slots)
            }
        }
    }

    /// Narrows a hold to `kept` (a subset the caller checked) and wakes
    /// whoever the released part was blocking: only waiters overlapping the
    /// old keys are candidates, as for a release.
    pub(crate) fn narrow(
        &mut self,
        hold: HoldId,
        kept: Vec<(Key, Mode)>,
        now: Instant,
    ) -> Vec<Waker> {
        let Some(old) = self.table.get(hold).map(|h| h.claim.keys.clone()) else {
            return Vec::new();
        };
        let fence = self
            .table
            .get(hold)
            .is_some_and(|h| h.claim.kind.outlives_call());
        self.table.set_keys(hold, kept);
        // A fence narrowed can stop a child_wait's slot reservation (see
        // `wake_after`, 3): the slot waits are judged again.
        let mut wakers = self.wake_after(now, &old, fence);
        if fence {
            wakers.extend(self.refuse_cycles(now));
        }
        wakers
    }

    /// Releases a hold and wakes whoever can now proceed. A call that
    /// wrote a file its actor claimed ends that claim too (SPEC §6: a claim
    /// ends at its holder's next write, applied or refused); a claim given
    /// during the call (the write refused again) is newer and stays.
    pub(crate) fn release(&mut self, id: HoldId, now: Instant) -> Vec<Waker> {
        let Some(hold) = self.table.remove(id) else {
            return Vec::new();
        };
        self.claims.remove(&id);
        let mut ended = Vec::new();
        if hold.claim.kind == HoldKind::Call && !self.claims.is_empty() {
            for (key, mode) in &hold.claim.keys {
                let claim = (*mode == Mode::Exclusive)
                    .then(|| self.table.claim_of(hold.claim.owner, key))
                    .flatten();
                ended.extend(claim.filter(|&c| c < id));
            }
        }
        // A fence released can stop a child_wait's slot reservation (see
        // `wake_after`, 3): the slot waits are judged again.
        let fence = hold.claim.kind.outlives_call();
        let mut wakers = self.wake_after(now, &hold.claim.keys, fence);
        if fence {
            wakers.extend(self.refuse_cycles(now));
        }
        for claim in ended {
            wakers.extend(self.release(claim, now));
        }
        wakers
    }

    /// Gives `owner` a claim on `key` until `until` (SPEC §6), replacing the
    /// claim it held there. The file tools give it inside the refused
    /// write's own exclusive call, so no other actor holds anything it
    /// conflicts with; should one (a claim is never waited for), none is
    /// given. Returns the claim and the wakers of waiters it unblocked
    /// (through the precedence of its owner's line, as a fence does).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn grant_claim(
        &mut self,
        owner: ActorId,
        lineage: crate::core::table::Lineage,
        actor_name: Arc<str>,
        key: Key,
        label: Option<Arc<str>>,
        now: Instant,
        until: Instant,
    ) -> (Option<HoldId>, Vec<Waker>) {
        let mut wakers = Vec::new();
        if let Some(old) = self.table.claim_of(owner, &key) {
            wakers.extend(self.release(old, now));
        }
        let claim = Claim {
            owner,
            lineage,
            kind: HoldKind::Claim,
            keys: vec![(key, Mode::Exclusive)],
        };
        if judge::first_hold(&self.view(None), &claim).is_some() {
            return (None, wakers);
        }
        let id = self.table.insert(Hold {
            claim,
            actor_name,
            label,
            since: now,
        });
        self.claims.insert(id, until);
        wakers.extend(self.wake_after_grant(HoldKind::Claim, now));
        (Some(id), wakers)
    }

    /// Ends every claim whose time is up at `now`.
    pub(crate) fn expire_claims(&mut self, now: Instant) -> Vec<Waker> {
        let due: Vec<HoldId> = self
            .claims
            .iter()
            .filter(|&(_, &until)| until <= now)
            .map(|(&id, _)| id)
            .collect();
        let mut wakers = Vec::new();
        for id in due {
            wakers.extend(self.release(id, now));
        }
        wakers
    }

    /// When the next claim ends by its time, if any is live.
    pub(crate) fn next_claim_end(&self) -> Option<Instant> {
        self.claims.values().min().copied()
    }

    /// Forgets a live actor; true when it gave back a counted slot.
    fn unregister(&mut self, id: ActorId) -> bool {
        match self.actors.remove(&id) {
            Some((child, _)) => {
                self.live_children -= usize::from(child.counts_actor);
                self.live_writers -= usize::from(child.counts_writer);
                child.counts_actor || child.counts_writer
            }
            None => false,
        }
    }

    /// An actor is dropped: its record, slots and fences go; its calls stay.
    pub(crate) fn drop_actor(&mut self, id: ActorId, now: Instant) -> Vec<Waker> {
        let slots = self.unregister(id);
        let mut released = Vec::new();
        for fence in self.table.fences_of(id) {
            self.claims.remove(&fence);
            if let Some(hold) = self.table.remove(fence) {
                released.extend(hold.claim.keys);
            }
        }
        let mut wakers = self.wake_after(now, &released, slots || !released.is_empty());
        if !released.is_empty() {
            wakers.extend(self.refuse_cycles(now));
        }
        wakers
    }

    /// Whether an actor is still live.
    pub(crate) fn is_live(&self, id: ActorId) -> bool {
        self.actors.contains_key(&id)
    }

    /// The name of an actor, live or not (falls back to its id).
    pub(crate) fn actor_name(&self, id: ActorId) -> String {
        match self.actors.get(&id) {
            Some((child, _)) => child.name.to_string(),
            None => self
                .table
                .iter()
                .find(|(_, h)| h.claim.owner == id)
                .map(|(_, h)| h.actor_name.to_string())
                .unwrap_or_else(|| format!("actor#{}", id.0)),
        }
    }

    /// What a blocker is, copied out for messages.
    pub(crate) fn blocker_info(&self, claim: &Claim, blocker: Blocker) -> Option<BlockerInfo> {
        let (key, blocker_claim, holder, label, since, queued) = match blocker {
            Blocker::Slots | Blocker::Writers => return None,
            Blocker::Hold(Blocking { hold, key }) => {
                let hold = self.table.get(hold)?;
                (
                    key,
                    &hold.claim,
                    hold.actor_name.to_string(),
                    hold.label.clone(),
                    hold.since,
                    false,
                )
            }
            Blocker::Waiter { waiter, key } => {
                let waiter = self.queue.get(waiter)?;
                let holder = match &waiter.need {
                    Need::Child(child) => child.name.to_string(),
                    Need::Hold => waiter.requester_name.to_string(),
                };
                (
                    key,
                    &waiter.claim,
                    holder,
                    waiter.label.clone(),
                    waiter.since,
                    true,
                )
            }
        };
        let (requested, mode) = judge::contested(claim, key, blocker_claim)?;
        Some(BlockerInfo {
            requested: requested.path.clone(),
            holder,
            kind: blocker_claim.kind,
            mode,
            label: label.map(|l| l.to_string()),
            since,
            queued,
        })
    }

    /// The wait cause a blocker amounts to.
    pub(crate) fn cause(&self, claim: &Claim, blocker: Blocker) -> WaitCause {
        match blocker {
            Blocker::Slots => WaitCause::Slots,
            Blocker::Writers => WaitCause::Writers,
            other => match self.blocker_info(claim, other) {
                Some(info) => WaitCause::Path {
                    path: info.requested,
                    holder: info.holder,
                },
                None => WaitCause::Slots,
            },
        }
    }

    /// What blocks a queued request now, judged as the wake-up scan would
    /// ([`judge::explain`]).
    pub(crate) fn blockers_of(
        &self,
        id: WaiterId,
    ) -> (Vec<HoldId>, Vec<WaiterId>, Option<WaitCause>) {
        let (Some(waiter), Some(pos)) = (self.queue.get(id), self.queue.pos_of(id)) else {
            return (Vec::new(), Vec::new(), None);
        };
        let found = judge::explain(&self.view(None), &waiter.claim, seats(&waiter.need), pos);
        let cause = found
            .first
            .map(|b| self.cause(&waiter.claim, Blocker::from(b)));
        (
            found.holds.into_iter().map(|(hold, _)| hold).collect(),
            found.waiters.into_iter().map(|(w, _)| w).collect(),
            cause,
        )
    }

    /// Panics when an invariant is broken (tests and models call this).
    ///
    /// The no-lost-wakeup check is judged by brute force (every hold and
    /// every waiter ahead, with [`conflict`]), independently of the indexes
    /// the scheduler answers with.
    pub(crate) fn assert_invariants(&self) {
        self.table.assert_invariants();
        self.queue.assert_invariants();
        let claims: Vec<HoldId> = self
            .table
            .iter()
            .filter(|(_, h)| h.claim.kind == HoldKind::Claim)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            claims,
            self.claims.keys().copied().collect::<Vec<_>>(),
            "claim deadlines drifted from the claims held"
        );
        let children = self.actors.values().filter(|(c, _)| c.counts_actor).count();
        let writers = self
            .actors
            .values()
            .filter(|(c, _)| c.counts_writer)
            .count();
        assert_eq!(children, self.live_children, "live_children drifted");
        assert_eq!(writers, self.live_writers, "live_writers drifted");
        // No lost wakeup: a scan over the current state grants nothing new.
        let holds: Vec<&Hold> = self.table.iter().map(|(_, h)| h).collect();
        let mut still_waiting: Vec<&Waiter> = Vec::new();
        let (mut ra, mut rw) = (0, 0);
        // The precedence rule, by brute force: `earlier` is blocked by a
        // live fence that covers `claim`.
        let passes = |earlier: &Claim, claim: &Claim| {
            holds
                .iter()
                .any(|h| conflict(earlier, &h.claim).is_some() && covers(&h.claim, claim))
        };
        for waiter in self.queue.entries().filter(|w| w.is_waiting()) {
            let slot_free = match &waiter.need {
                Need::Child(_) => seats(&waiter.need).is_none_or(|seats| {
                    judge::slot_limit(self.view(None).slots(), seats, (ra, rw)).is_none()
                }),
                Need::Hold => true,
            };
            let paths_free = holds
                .iter()
                .all(|h| conflict(&waiter.claim, &h.claim).is_none())
                && still_waiting.iter().all(|w| {
                    conflict(&waiter.claim, &w.claim).is_none() || passes(&w.claim, &waiter.claim)
                });
            assert!(
                !(slot_free && paths_free),
                "waiter {:?} is grantable but still waits (lost wakeup)",
                waiter.id
            );
            // Only a child_wait whose paths are free reserves its slots.
            if paths_free {
                ra += usize::from(counts_actor(waiter));
                rw += usize::from(counts_writer(waiter));
            }
            still_waiting.push(waiter);
        }
    }
}

/// The narrow wake-up scan against the full one, on random operations.
#[cfg(test)]
pub(crate) mod model {
    use std::task::Waker;

    use proptest::prelude::*;

    use super::*;
    use crate::core::deadlock::Verdict;
    use crate::core::table::strategies::{claim, keys, lineage_of};
    use crate::core::table::{Lineage, ScopeKind};

    #[derive(Debug, Clone)]
    pub(crate) enum Op {
        /// A call or fence request; waits unless `try_only`.
        Request {
            claim: Claim,
            priority: i32,
            try_only: bool,
            /// Its actor's refusals on its paths (its queue tier, SPEC §6).
            refusals: u32,
        },
        /// A stale refusal inside the `n`th live call: its owner claims
        /// the call's first exclusive file (SPEC §6).
        Claim(usize),
        /// Every claim's time is up.
        Expire,
        /// A `child_wait` of actor `parent`: a slot, then a grant fence
        /// (possibly empty); writable or not.
        Child {
            parent: u64,
            fence: Option<Vec<(Key, Mode)>>,
            writer: bool,
        },
        Release(usize),
        Cancel(usize),
        Pick(usize),
        DropActor(usize),
    }

    pub(crate) fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (claim(), -1i32..=1, any::<bool>(), 0u32..=2)
                .prop_map(|(claim, priority, try_only, refusals)| Op::Request { claim, priority, try_only, refusals }),
            2 => any::<usize>().prop_map(Op::Claim),
            1 => Just(Op::Expire),
            2 => (1u64..=5, proptest::option::of(keys()), any::<bool>())
                .prop_map(|(parent, fence, writer)| Op::Child { parent, fence, writer }),
            4 => any::<usize>().prop_map(Op::Release),
            2 => any::<usize>().prop_map(Op::Cancel),
            3 => any::<usize>().prop_map(Op::Pick),
            1 => any::<usize>().prop_map(Op::DropActor),
        ]
    }

    /// What the outside world sees of a state: holds, queue, slots, counters.
    fn seen(state: &State) -> String {
        let holds: Vec<_> = state
            .table
            .iter()
            .map(|(id, h)| (id, h.claim.owner, h.claim.kind, h.claim.keys.clone()))
            .collect();
        let queue: Vec<_> = state
            .queue
            .entries()
            .map(|w| (w.id, w.state, w.is_waiting().then(|| w.claim.keys.clone())))
            .collect();
        let actors: Vec<_> = state.actors.keys().collect();
        format!(
            "{holds:?}\n{queue:?}\n{actors:?} {} {}\n{:?}",
            state.live_children, state.live_writers, state.counters
        )
    }

    /// Applies one operation; `next_actor` numbers new children.
    pub(crate) fn apply(state: &mut State, op: &Op, next_actor: u64) -> usize {
        let now = Instant::now();
        let woken = |w: Vec<Waker>| w.len();
        match op {
            Op::Request {
                claim,
                priority,
                try_only,
                refusals,
            } => match state.blocker_at(
                claim,
                &Need::Hold,
                Pos::end_of_tier(*priority, *refusals),
                None,
            ) {
                None => woken(
                    state
                        .admit(claim.clone(), Need::Hold, "r".into(), None, now)
                        .1,
                ),
                Some(_) if *try_only => 0,
                Some(_) => {
                    let verdict = crate::core::deadlock::cycle_if_waiting(
                        state,
                        claim.owner,
                        claim,
                        &Need::Hold,
                        (*priority, *refusals),
                    );
                    let moves = match verdict {
                        Verdict::Deadlock(_) => return 0,
                        Verdict::Free => None,
                        Verdict::Reorder(moves) => Some(moves),
                    };
                    let w = Waker::noop().clone();
                    let (id, mut wakers) = state.enqueue(
                        claim.owner,
                        "r".into(),
                        claim.clone(),
                        Need::Hold,
                        (*priority, *refusals),
                        None,
                        now,
                        w,
                    );
                    if let Some(moves) = moves {
                        assert!(state.reorder(&moves, Some(id)));
                        wakers.extend(state.wake_after_reorder(now));
                    }
                    woken(wakers)
                }
            },
            Op::Child {
                parent,
                fence,
                writer,
            } => {
                let id = ActorId(next_actor);
                let mut lineage = lineage_of(*parent);
                lineage.push(id);
                let claim = Claim {
                    owner: id,
                    lineage: lineage.into(),
                    kind: HoldKind::Fence,
                    keys: fence.clone().unwrap_or_default(),
                };
                let need = Need::Child(ChildRecord {
                    id,
                    name: "kid".into(),
                    parent: Some(ActorId(*parent)),
                    root: PathBuf::from("/ws"),
                    scope: ScopeKind::Fenced,
                    counts_actor: true,
                    counts_writer: *writer,
                });
                match state.blocker(&claim, &need, 0, None) {
                    None => woken(state.admit(claim, need, "kid".into(), None, now).1),
                    Some(_) => {
                        let w = Waker::noop().clone();
                        let parent = ActorId(*parent);
                        woken(
                            state
                                .enqueue(parent, "p".into(), claim, need, (0, 0), None, now, w)
                                .1,
                        )
                    }
                }
            }
            Op::Release(i) => {
                let ids: Vec<HoldId> = state.table.iter().map(|(id, _)| id).collect();
                match ids.get(i % ids.len().max(1)) {
                    Some(&id) => woken(state.release(id, now)),
                    None => 0,
                }
            }
            Op::Cancel(i) => {
                let ids: Vec<WaiterId> = state.queue.entries().map(|w| w.id).collect();
                match ids.get(i % ids.len().max(1)) {
                    Some(&id) => woken(state.cancel(id, now)),
                    None => 0,
                }
            }
            Op::Pick(i) => {
                let ids: Vec<WaiterId> = state
                    .queue
                    .entries()
                    .filter(|w| !w.is_waiting())
                    .map(|w| w.id)
                    .collect();
                if let Some(&id) = ids.get(i % ids.len().max(1)) {
                    state.take_granted(id);
                }
                0
            }
            Op::Claim(i) => {
                let calls: Vec<(ActorId, Lineage, Key)> = state
                    .table
                    .iter()
                    .filter(|(_, h)| h.claim.kind == HoldKind::Call)
                    .filter_map(|(_, h)| {
                        let key = crate::core::key::written_files(&h.claim.keys).next()?;
                        Some((h.claim.owner, h.claim.lineage.clone(), key.clone()))
                    })
                    .collect();
                match calls.get(i % calls.len().max(1)) {
                    Some((owner, lineage, key)) => {
                        let until = now + std::time::Duration::from_secs(3600);
                        let (claim, wakers) = state.grant_claim(
                            *owner,
                            lineage.clone(),
                            "c".into(),
                            key.clone(),
                            None,
                            now,
                            until,
                        );
                        assert!(
                            claim.is_some(),
                            "a claim inside its owner's call is always given"
                        );
                        woken(wakers)
                    }
                    None => 0,
                }
            }
            Op::Expire => woken(state.expire_claims(now + std::time::Duration::from_secs(7200))),
            Op::DropActor(i) => {
                let mut ids: Vec<ActorId> = state.actors.keys().copied().collect();
                ids.extend((1..=5).map(ActorId));
                let id = ids[i % ids.len()];
                woken(state.drop_actor(id, now))
            }
        }
    }

    /// The wait-for graph by brute force: every waiting request against
    /// every hold and every waiting request ahead of it.
    fn naive_edges(state: &State) -> Vec<crate::core::deadlock::WaitEdge> {
        use crate::core::deadlock::WaitEdge;
        let waiting: Vec<&Waiter> = state.queue.entries().filter(|w| w.is_waiting()).collect();
        let mut edges = Vec::new();
        for (i, w) in waiting.iter().enumerate() {
            for (_, h) in state.table.iter() {
                if h.claim.kind.outlives_call() && conflict(&w.claim, &h.claim).is_some() {
                    edges.push(WaitEdge {
                        from: w.requester,
                        to: h.claim.owner,
                        hard: true,
                    });
                }
            }
            // The precedence rule (§4), and a claim's leaving alone what it
            // does not block (§6), by brute force.
            let passes = |earlier: &Claim| {
                state.table.iter().any(|(_, h)| {
                    let clear_of_claim =
                        h.claim.kind == HoldKind::Claim && conflict(&h.claim, &w.claim).is_none();
                    conflict(earlier, &h.claim).is_some()
                        && (covers(&h.claim, &w.claim) || clear_of_claim)
                })
            };
            for ahead in &waiting[..i] {
                if conflict(&w.claim, &ahead.claim).is_some() && !passes(&ahead.claim) {
                    // A fence (or child grant) request is folded onto the
                    // owner it will have.
                    let to = match ahead.need {
                        Need::Child(_) => ahead.claim.owner,
                        Need::Hold => ahead.requester,
                    };
                    edges.push(WaitEdge {
                        from: w.requester,
                        to,
                        hard: false,
                    });
                }
            }
        }
        edges.retain(|e| e.from != e.to);
        edges.sort_by_key(|e| (e.from, e.to, !e.hard));
        edges.dedup_by_key(|e| (e.from, e.to));
        edges
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn narrow_wakeup_grants_what_the_full_scan_grants(
            ops in prop::collection::vec(op(), 1..50),
            max_actors in proptest::option::of(1usize..=3),
            max_writers in proptest::option::of(0usize..=2),
        ) {
            let mut narrow = State::new(max_actors, max_writers);
            let mut full = State::new(max_actors, max_writers);
            full.full_scan = true;
            for (n, op) in ops.iter().enumerate() {
                let next_actor = 100 + n as u64;
                let a = apply(&mut narrow, op, next_actor);
                let b = apply(&mut full, op, next_actor);
                prop_assert_eq!(a, b, "woken after {:?}", op);
                prop_assert_eq!(seen(&narrow), seen(&full), "after {:?}", op);
                narrow.assert_invariants();
                prop_assert_eq!(
                    crate::core::deadlock::wait_for_edges(&narrow),
                    naive_edges(&narrow),
                    "edges after {:?}",
                    op
                );
            }
        }
    }
}
