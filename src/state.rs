//! The scheduler's state and its rules, without the lock.
//!
//! `State` is plain data: the resource table, the wait queue, the live actors,
//! slot counts and counters. Every method takes `&mut self` (the caller holds
//! the scheduler's mutex) and returns the wakers to wake *after* unlocking.
//! See `docs/DESIGN.md` for the numbered grant and wake-up rules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use serde::Serialize;

use crate::key::Mode;
use crate::queue::{Need, Queue, WaitCause, Waiter, WaiterId, WaiterState};
use crate::table::{ActorId, Blocking, Claim, Hold, HoldId, HoldKind, Table, conflict};

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

/// What stands in a request's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocker {
    Slots,
    Writers,
    Hold(Blocking),
    Waiter { waiter: WaiterId, key: usize },
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

    /// Would a child find a slot, with `reserved_*` slots promised to
    /// children queued ahead of it?
    fn slot_blocker(
        &self,
        child: &ChildRecord,
        reserved_actors: usize,
        reserved_writers: usize,
    ) -> Option<Blocker> {
        if child.counts_actor
            && self
                .max_actors
                .is_some_and(|max| self.live_children + reserved_actors >= max)
        {
            return Some(Blocker::Slots);
        }
        if child.counts_writer
            && self
                .max_writers
                .is_some_and(|max| self.live_writers + reserved_writers >= max)
        {
            return Some(Blocker::Writers);
        }
        None
    }

    /// Grant rule 1–3 for a request not yet queued: slots, then live holds
    /// (except `except`, the request's own hold when it grows), then every
    /// waiting request ahead of `priority`.
    pub(crate) fn blocker(
        &self,
        claim: &Claim,
        need: &Need,
        priority: i32,
        except: Option<HoldId>,
    ) -> Option<Blocker> {
        let ahead = self.queue.ahead_of(priority);
        if let Need::Child(child) = need {
            let waiting = ahead.iter().filter(|w| w.is_waiting());
            let reserved_actors = waiting.clone().filter(|w| counts_actor(w)).count();
            let reserved_writers = waiting.filter(|w| counts_writer(w)).count();
            if let Some(blocker) = self.slot_blocker(child, reserved_actors, reserved_writers) {
                return Some(blocker);
            }
        }
        if let Some(blocking) = self.table.first_conflict(claim, except) {
            return Some(Blocker::Hold(blocking));
        }
        ahead.iter().filter(|w| w.is_waiting()).find_map(|w| {
            conflict(claim, &w.claim).map(|key| Blocker::Waiter { waiter: w.id, key })
        })
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

    /// Registers a live actor and takes its slots.
    pub(crate) fn register(&mut self, child: ChildRecord, now: Instant) {
        self.live_children += usize::from(child.counts_actor);
        self.live_writers += usize::from(child.counts_writer);
        self.actors.insert(child.id, (child, now));
    }

    /// Queues a request; returns its id.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue(
        &mut self,
        requester: ActorId,
        requester_name: Arc<str>,
        claim: Claim,
        need: Need,
        priority: i32,
        label: Option<Arc<str>>,
        now: Instant,
        waker: Waker,
    ) -> WaiterId {
        let (id, seq) = self.queue.next_id();
        self.queue.insert(Waiter {
            id,
            requester,
            requester_name,
            claim,
            need,
            priority,
            seq,
            label,
            since: now,
            waker: Some(waker),
            state: WaiterState::Waiting,
        });
        self.counters.waited += 1;
        id
    }

    /// The wake-up scan (rule 4): walks the queue in order and grants every
    /// waiting request that conflicts with no live hold and no request still
    /// waiting ahead of it. Returns the wakers of those granted.
    ///
    /// It must run after every release, cancellation and slot change: a
    /// cancelled waiter may have been soft-blocking those behind it.
    pub(crate) fn wake_locked(&mut self, now: Instant) -> Vec<Waker> {
        let mut wakers = Vec::new();
        let mut still_waiting: Vec<usize> = Vec::new();
        let (mut reserved_actors, mut reserved_writers) = (0usize, 0usize);
        for i in 0..self.queue.len() {
            let waiter = &self.queue.entries()[i];
            if !waiter.is_waiting() {
                continue;
            }
            let slot_free = match &waiter.need {
                Need::Child(child) => self
                    .slot_blocker(child, reserved_actors, reserved_writers)
                    .is_none(),
                Need::Hold => true,
            };
            let grantable = slot_free
                && self.table.first_conflict(&waiter.claim, None).is_none()
                && still_waiting
                    .iter()
                    .all(|&j| conflict(&waiter.claim, &self.queue.entries()[j].claim).is_none());
            if !grantable {
                reserved_actors += usize::from(counts_actor(waiter));
                reserved_writers += usize::from(counts_writer(waiter));
                still_waiting.push(i);
                continue;
            }
            let (claim, need, name, label) = (
                waiter.claim.clone(),
                waiter.need.clone(),
                waiter.requester_name.clone(),
                waiter.label.clone(),
            );
            let name = match &need {
                Need::Child(child) => child.name.clone(),
                Need::Hold => name,
            };
            let hold = self.grant(claim, need, name, label, now);
            let waiter = &mut self.queue.entries_mut()[i];
            waiter.state = WaiterState::Granted(hold);
            wakers.extend(waiter.waker.take());
        }
        wakers
    }

    /// Picks up a granted request: removes its queue entry and returns what
    /// it was granted, or `None` while it still waits.
    pub(crate) fn take_granted(&mut self, id: WaiterId) -> Option<Option<HoldId>> {
        match self.queue.get(id)?.state {
            WaiterState::Granted(hold) => {
                self.queue.remove(id);
                Some(hold)
            }
            WaiterState::Waiting => None,
        }
    }

    /// Replaces a waiting request's waker.
    pub(crate) fn set_waker(&mut self, id: WaiterId, waker: &Waker) {
        if let Some(waiter) = self.queue.get_mut(id) {
            match &waiter.waker {
                Some(old) if old.will_wake(waker) => {}
                _ => waiter.waker = Some(waker.clone()),
            }
        }
    }

    /// Withdraws a request: a waiting one leaves the queue; a granted one
    /// that was never picked up hands its hold (and child slot) back. Either
    /// way the wake-up scan runs again.
    pub(crate) fn cancel(&mut self, id: WaiterId, now: Instant) -> Vec<Waker> {
        let Some(waiter) = self.queue.remove(id) else {
            return Vec::new();
        };
        if let WaiterState::Granted(hold) = waiter.state {
            if let Some(hold) = hold {
                self.table.remove(hold);
            }
            if let Need::Child(child) = &waiter.need {
                self.unregister(child.id);
            }
        }
        self.wake_locked(now)
    }

    /// Releases a hold and wakes whoever can now proceed.
    pub(crate) fn release(&mut self, hold: HoldId, now: Instant) -> Vec<Waker> {
        if self.table.remove(hold).is_none() {
            return Vec::new();
        }
        self.wake_locked(now)
    }

    fn unregister(&mut self, id: ActorId) {
        if let Some((child, _)) = self.actors.remove(&id) {
            self.live_children -= usize::from(child.counts_actor);
            self.live_writers -= usize::from(child.counts_writer);
        }
    }

    /// An actor is dropped: its record, slots and fences go; its calls stay.
    pub(crate) fn drop_actor(&mut self, id: ActorId, now: Instant) -> Vec<Waker> {
        self.unregister(id);
        for fence in self.table.fences_of(id) {
            self.table.remove(fence);
        }
        self.wake_locked(now)
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
        let (requested, _) = &claim.keys[key];
        let (_, mode) = blocker_claim
            .keys
            .iter()
            .find(|(k, _)| crate::key::overlaps(k, requested))
            .or(blocker_claim.keys.first())?;
        Some(BlockerInfo {
            requested: requested.path.clone(),
            holder,
            kind: blocker_claim.kind,
            mode: *mode,
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

    /// What blocks a queued request now, judged as the wake-up scan would.
    pub(crate) fn blockers_of(
        &self,
        id: WaiterId,
    ) -> (Vec<HoldId>, Vec<WaiterId>, Option<WaitCause>) {
        let Some(at) = self.queue.entries().iter().position(|w| w.id == id) else {
            return (Vec::new(), Vec::new(), None);
        };
        let waiter = &self.queue.entries()[at];
        let holds: Vec<HoldId> = self
            .table
            .conflicts(&waiter.claim, None)
            .map(|b| b.hold)
            .collect();
        let waiters: Vec<WaiterId> = self.queue.entries()[..at]
            .iter()
            .filter(|w| w.is_waiting() && conflict(&waiter.claim, &w.claim).is_some())
            .map(|w| w.id)
            .collect();
        let ahead = &self.queue.entries()[..at];
        let cause = match &waiter.need {
            Need::Child(child) => {
                let waiting = ahead.iter().filter(|w| w.is_waiting());
                let ra = waiting.clone().filter(|w| counts_actor(w)).count();
                let rw = waiting.filter(|w| counts_writer(w)).count();
                self.slot_blocker(child, ra, rw)
            }
            Need::Hold => None,
        }
        .or_else(|| {
            self.table
                .first_conflict(&waiter.claim, None)
                .map(Blocker::Hold)
        })
        .or_else(|| {
            ahead.iter().filter(|w| w.is_waiting()).find_map(|w| {
                conflict(&waiter.claim, &w.claim).map(|key| Blocker::Waiter { waiter: w.id, key })
            })
        })
        .map(|b| self.cause(&waiter.claim, b));
        (holds, waiters, cause)
    }

    /// Panics when an invariant is broken (tests and models call this).
    pub(crate) fn assert_invariants(&self) {
        self.table.assert_invariants();
        self.queue.assert_invariants();
        let children = self.actors.values().filter(|(c, _)| c.counts_actor).count();
        let writers = self
            .actors
            .values()
            .filter(|(c, _)| c.counts_writer)
            .count();
        assert_eq!(children, self.live_children, "live_children drifted");
        assert_eq!(writers, self.live_writers, "live_writers drifted");
        // No lost wakeup: a scan over the current state grants nothing new.
        let mut still_waiting: Vec<&Waiter> = Vec::new();
        let (mut ra, mut rw) = (0, 0);
        for waiter in self.queue.entries().iter().filter(|w| w.is_waiting()) {
            let slot_free = match &waiter.need {
                Need::Child(child) => self.slot_blocker(child, ra, rw).is_none(),
                Need::Hold => true,
            };
            let grantable = slot_free
                && self.table.first_conflict(&waiter.claim, None).is_none()
                && still_waiting
                    .iter()
                    .all(|w| conflict(&waiter.claim, &w.claim).is_none());
            assert!(
                !grantable,
                "waiter {:?} is grantable but still waits (lost wakeup)",
                waiter.id
            );
            ra += usize::from(counts_actor(waiter));
            rw += usize::from(counts_writer(waiter));
            still_waiting.push(waiter);
        }
    }
}
