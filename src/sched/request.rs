//! Requests: the builder, and the future that waits for a grant.
//!
//! # Implementation details
//!
//! An [`Acquire`] goes through three phases. `Start` holds the prepared
//! claim; its first poll takes the lock once and either grants (rules 1–3 of
//! `docs/DESIGN.md`), refuses (try-only, or `Deadlock`), or queues itself with
//! the task's waker. `Waiting` polls look for the grant that a wake-up scan
//! left in the queue entry. `Drop` in the `Waiting` phase withdraws the entry
//! under the lock (handing back a grant that was never picked up) and re-runs
//! the wake-up scan, because the withdrawn request may have been blocking
//! others.

use std::future::Future;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::core::deadlock;
use crate::core::key::Target;
use crate::core::queue::{Need, Pos, WaitCause, WaiterId};
use crate::core::state::State;
use crate::core::table::{Claim, HoldId, HoldKind};
use crate::error::{Error, Result};
use crate::sched::actor::{Actor, ActorMeta, Prepared, refusal};
use crate::sched::events::{self, EventKind, Events};
use crate::sched::guard::{Fence, Reservation};
use crate::sched::scheduler::{Scheduler, wake_all};
use crate::sched::sync::MutexGuard;

type OnQueued = Box<dyn FnOnce(&WaitCause) + Send + 'static>;

/// A request being built: targets plus priority, label and `on_queued`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let r = lead
///     .request(["src/a.rs"])
///     .priority(5)
///     .label("write_file src/a.rs")
///     .on_queued(|cause: &writ::WaitCause| eprintln!("{cause}"))
///     .admit()
///     .await?;
/// assert_eq!(sched.dump().holds[0].label.as_deref(), Some("write_file src/a.rs"));
/// # drop(r); Ok(()) }
/// ```
#[must_use = "a request does nothing until it is admitted"]
pub struct Request {
    sched: Scheduler,
    meta: StdArc<ActorMeta>,
    targets: Vec<Target>,
    priority: i32,
    refusals: u32,
    label: Option<StdArc<str>>,
    on_queued: Option<OnQueued>,
}

impl Request {
    pub(crate) fn new(actor: &Actor, targets: Vec<Target>) -> Self {
        Request::for_meta(actor.sched.clone(), actor.meta.clone(), targets)
    }

    /// A request on behalf of an actor known only by its meta (the session).
    pub(crate) fn for_meta(
        sched: Scheduler,
        meta: StdArc<ActorMeta>,
        targets: Vec<Target>,
    ) -> Self {
        Request {
            sched,
            meta,
            targets,
            priority: 0,
            refusals: 0,
            label: None,
            on_queued: None,
        }
    }

    /// Higher goes first among conflicting waiters (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// How often this actor's writes to these paths were refused `Stale`
    /// since one of them landed (default 0; the file tools count it).
    /// Among conflicting waiters of one priority, the most refused go
    /// first, so the next claim of a hot file (SPEC §6) goes to them.
    pub fn refusals(mut self, refusals: u32) -> Self {
        self.refusals = refusals;
        self
    }

    /// A label shown in the dump and in `Busy` messages (e.g. the tool call).
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(StdArc::from(label.into()));
        self
    }

    /// Called once, outside the scheduler's lock, when the request starts
    /// waiting, with the reason it waits.
    pub fn on_queued(mut self, callback: impl FnOnce(&WaitCause) + Send + 'static) -> Self {
        self.on_queued = Some(Box::new(callback));
        self
    }

    fn acquire<T>(
        self,
        kind: HoldKind,
        try_only: bool,
        timeout: Option<Duration>,
        make: Make,
    ) -> Acquire<T> {
        let meta = &self.meta;
        let ask = meta.claim(self.targets, kind).map(|claim| Ask {
            refusals: self.refusals.max(meta.refusals_on(&claim.keys)),
            claim,
            need: Need::Hold,
            priority: self.priority,
            label: self.label,
            try_only,
        });
        Acquire::new(self.sched, self.meta, ask, make, timeout, self.on_queued)
    }

    /// Reserves every target at once, or `Err(Busy)` immediately.
    pub fn try_admit(self) -> Result<Reservation> {
        let make = Make::Reservation(self.meta.clone());
        poll_once(self.acquire(HoldKind::Call, true, None, make))
    }

    /// Waits until every target can be reserved at once (cancel-safe).
    pub fn admit(self) -> Acquire<Reservation> {
        let make = Make::Reservation(self.meta.clone());
        self.acquire(HoldKind::Call, false, None, make)
    }

    /// [`Request::admit`] with a timeout (`Error::Timeout`); needs tokio's time driver.
    pub fn admit_timeout(self, timeout: Duration) -> Acquire<Reservation> {
        let make = Make::Reservation(self.meta.clone());
        self.acquire(HoldKind::Call, false, Some(timeout), make)
    }

    /// Blocks the thread until admitted. Never call it on an async runtime thread.
    pub fn admit_blocking(self) -> Result<Reservation> {
        block_on(self.admit(), None)
    }

    /// Blocks the thread until admitted or `timeout` passes.
    pub fn admit_blocking_timeout(self, timeout: Duration) -> Result<Reservation> {
        block_on(self.admit(), Some(Instant::now() + timeout))
    }

    /// What [`Request::try_admit`] (a `Call`) or [`Request::fence`] (a
    /// `Fence`) would answer now, without asking: `Ok`
    /// when nothing stands in the way, else the refusal (`Busy`, naming the
    /// holder). Nothing is admitted, counted or recorded, so a caller that
    /// already reported a wait (a timeout) can say who blocked it without
    /// a second refusal in the counters and the event stream.
    #[cfg_attr(not(any(feature = "server", feature = "mcp")), allow(dead_code))]
    pub(crate) fn probe(self, kind: HoldKind) -> Result<()> {
        let claim = self.meta.claim(self.targets, kind)?;
        let refusals = self.refusals.max(self.meta.refusals_on(&claim.keys));
        let state = self.sched.shared.lock();
        let at = Pos::end_of_tier(self.priority, refusals);
        match state.blocker_at(&claim, &Need::Hold, at, None) {
            None => Ok(()),
            Some(blocker) => Err(refusal(&state, &self.meta.resolver, &claim, blocker)),
        }
    }

    /// A fence on the targets, try-only.
    pub fn fence(self) -> Result<Fence> {
        let make = Make::Fence(self.meta.clone(), self.targets.clone());
        poll_once(self.acquire(HoldKind::Fence, true, None, make))
    }

    /// A fence on the targets, waiting (cancel-safe; `Deadlock` if waiting would close a cycle).
    pub fn fence_wait(self) -> Acquire<Fence> {
        let make = Make::Fence(self.meta.clone(), self.targets.clone());
        self.acquire(HoldKind::Fence, false, None, make)
    }

    /// A fence on the targets, waiting at most `timeout`.
    pub fn fence_wait_timeout(self, timeout: Duration) -> Acquire<Fence> {
        let make = Make::Fence(self.meta.clone(), self.targets.clone());
        self.acquire(HoldKind::Fence, false, Some(timeout), make)
    }
}

impl Actor {
    /// A tool call's wait: a call reservation on `targets`, waited for at
    /// most `timeout` (granted at once when nothing is in the way).
    ///
    /// When the wait runs out, the answer is who holds a path then (`Busy`,
    /// read without asking again: the wait was reported once, as a
    /// timeout), or `Ok(None)` when the paths came free in between and the
    /// caller may go on without a reservation. The MCP tools and `/rpc`'s
    /// file methods with `timeout_ms` wait this way, so a contested call
    /// is one wait, never a refusal, a wait and another refusal.
    ///
    /// A write told `Busy` so counts as refused on the files it would have
    /// written (with claims on, SPEC §6): writers queue for a hot file by
    /// how often they were refused, and one that only ever waited out the
    /// claims ahead of it would otherwise stay behind every writer refused
    /// `Stale` once, each of which goes first and claims the file again.
    #[cfg_attr(not(any(feature = "server", feature = "mcp")), allow(dead_code))]
    pub(crate) async fn wait_call(
        &self,
        targets: Vec<Target>,
        label: String,
        timeout: Duration,
    ) -> Result<Option<Reservation>> {
        match self
            .request(targets.clone())
            .label(label)
            .admit_timeout(timeout)
            .await
        {
            Ok(call) => Ok(Some(call)),
            Err(Error::Timeout { .. }) => {
                let probed = self.request(targets.clone()).probe(HoldKind::Call);
                if matches!(probed, Err(Error::Busy(_))) {
                    self.busy_writes(targets);
                }
                probed.map(|()| None)
            }
            Err(e) => Err(e),
        }
    }

    /// Counts a `Busy` answer to a call on `targets` as a refusal of its
    /// writes: one on each file it would have held exclusively.
    fn busy_writes(&self, targets: Vec<Target>) {
        if self.sched.shared.config.claim_ttl.is_zero() {
            return;
        }
        let Ok(claim) = self.meta.claim(targets, HoldKind::Call) else {
            return;
        };
        for key in crate::core::key::written_files(&claim.keys) {
            self.meta.note_refusal(&key.norm);
        }
    }
}

/// What a request asks the state for.
pub(crate) struct Ask {
    pub(crate) claim: Claim,
    pub(crate) need: Need,
    pub(crate) priority: i32,
    pub(crate) refusals: u32,
    pub(crate) label: Option<StdArc<str>>,
    pub(crate) try_only: bool,
}

/// How to build the guard once granted.
pub(crate) enum Make {
    Reservation(StdArc<ActorMeta>),
    Fence(StdArc<ActorMeta>, Vec<Target>),
    Child(StdArc<ActorMeta>),
}

enum Phase {
    Start(Result<Ask>),
    Waiting { id: WaiterId, since: Instant },
    Done,
}

/// A pending admission: resolves to a [`Reservation`], a [`Fence`] or a child
/// [`Actor`].
///
/// It is `Send + 'static` and does not borrow the actor.
///
/// # Cancel safety
/// Dropping it at any point leaves no hold and no waiter behind, and wakes
/// the requests it was blocking.
#[must_use = "futures do nothing unless awaited"]
pub struct Acquire<T> {
    sched: Scheduler,
    requester: StdArc<ActorMeta>,
    phase: Phase,
    make: Option<Make>,
    timeout: Option<Duration>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    on_queued: Option<OnQueued>,
    paths: Vec<PathBuf>,
    /// The request's priority, which its guard keeps for `extend` (§11).
    priority: i32,
    _output: PhantomData<fn() -> T>,
}

impl<T> Acquire<T> {
    fn new(
        sched: Scheduler,
        requester: StdArc<ActorMeta>,
        ask: Result<Ask>,
        make: Make,
        timeout: Option<Duration>,
        on_queued: Option<OnQueued>,
    ) -> Self {
        let paths = match &ask {
            Ok(ask) => ask.claim.keys.iter().map(|(k, _)| k.path.clone()).collect(),
            Err(_) => Vec::new(),
        };
        let priority = ask.as_ref().map_or(0, |ask| ask.priority);
        Acquire {
            sched,
            requester,
            phase: Phase::Start(ask),
            make: Some(make),
            timeout,
            sleep: None,
            on_queued,
            paths,
            priority,
            _output: PhantomData,
        }
    }

    /// The first poll: grant, refuse, or queue.
    fn start(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<HoldId>>> {
        let Phase::Start(ask) = std::mem::replace(&mut self.phase, Phase::Done) else {
            unreachable!("start is only called in the Start phase");
        };
        let ask = match ask {
            Ok(ask) => ask,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let name = match &ask.need {
            Need::Child(child) => child.name.clone(),
            Need::Hold => self.requester.name.clone(),
        };
        let now = Instant::now();
        let events = &self.sched.shared.events;
        let mut state = self.sched.shared.lock();
        let at = Pos::end_of_tier(ask.priority, ask.refusals);
        let Some(blocker) = state.blocker_at(&ask.claim, &ask.need, at, None) else {
            // A fence granted past lower-priority waiters gives them hard
            // edges to its owner, which may close a cycle.
            let verdict = deadlock::cycle_if_granted(&state, &ask.claim);
            if let deadlock::Verdict::Reorder(moves) = &verdict {
                // The waiters the fence passes are moved first; granting
                // the fence then runs the wake-up scan over every waiter.
                state.reorder(moves, None);
            }
            if let deadlock::Verdict::Deadlock(cycle) = verdict {
                return Poll::Ready(Err(refuse_deadlock(&self.requester, events, state, cycle)));
            }
            if let Need::Child(record) = &ask.need {
                events.record(|| events::created(record));
            }
            let (hold, wakers) = state.admit(ask.claim, ask.need, name, ask.label, now);
            if let Some(hold) = hold {
                events.record(|| events::admitted(&state, hold, Duration::ZERO));
            }
            drop(state);
            crate::sched::scheduler::wake_all(wakers);
            events.publish();
            tracing::debug!(actor = %self.requester.name, "admit");
            return Poll::Ready(Ok(hold));
        };
        if ask.try_only {
            state.counters.refused += 1;
            let err = refusal(&state, &self.requester.resolver, &ask.claim, blocker);
            events.record(|| events::refused(self.requester.id, self.requester.name.clone(), &err));
            drop(state);
            events.publish();
            tracing::debug!(actor = %self.requester.name, error = %err, "refused");
            return Poll::Ready(Err(err));
        }
        let verdict = deadlock::cycle_if_waiting(
            &state,
            self.requester.id,
            &ask.claim,
            &ask.need,
            (ask.priority, ask.refusals),
        );
        let moves = match verdict {
            deadlock::Verdict::Free => None,
            deadlock::Verdict::Reorder(moves) => Some(moves),
            deadlock::Verdict::Deadlock(cycle) => {
                return Poll::Ready(Err(refuse_deadlock(&self.requester, events, state, cycle)));
            }
        };
        let cause = state.cause(&ask.claim, blocker);
        let waiting = events.listening().then(|| {
            (
                events::paths_of(&ask.claim.keys),
                ask.claim.kind,
                ask.priority,
            )
        });
        let (id, mut wakers) = state.enqueue(
            self.requester.id,
            self.requester.name.clone(),
            ask.claim,
            ask.need,
            (ask.priority, ask.refusals),
            ask.label,
            now,
            cx.waker().clone(),
        );
        if let Some((paths, hold_kind, priority)) = waiting {
            events.record(|| EventKind::Waiting {
                waiter: id,
                actor: self.requester.id,
                actor_name: self.requester.name.clone(),
                hold_kind,
                paths,
                priority,
                cause: cause.clone(),
            });
        }
        if let Some(moves) = moves {
            // A soft cycle: the queue is reordered instead (§4), and a
            // waiter moved ahead (this one, say) may be grantable now.
            state.reorder(&moves, Some(id));
            wakers.extend(state.wake_after_reorder(now));
            tracing::debug!(actor = %self.requester.name, ?moves, "queue reordered");
        }
        drop(state);
        crate::sched::scheduler::wake_all(wakers);
        events.publish();
        self.phase = Phase::Waiting { id, since: now };
        tracing::debug!(actor = %self.requester.name, %cause, "wait");
        if let Some(callback) = self.on_queued.take() {
            callback(&cause);
        }
        self.poll_deadline(cx)
    }

    fn poll_grant(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<HoldId>>> {
        match self.phase {
            Phase::Start(_) => self.start(cx),
            Phase::Waiting { id, since } => {
                let events = &self.sched.shared.events;
                let mut state = self.sched.shared.lock();
                if let Some(hold) = state.take_granted(id) {
                    self.record_pickup(&state, id, since, hold);
                    drop(state);
                    events.publish();
                    self.phase = Phase::Done;
                    return Poll::Ready(Ok(hold));
                }
                if let Some(cycle) = state.take_refused(id) {
                    let cycle: Vec<String> =
                        cycle.into_iter().map(|a| state.actor_name(a)).collect();
                    events.record(|| deadlock_event(&self.requester, Some(id), &cycle));
                    drop(state);
                    events.publish();
                    self.phase = Phase::Done;
                    tracing::debug!(actor = %self.requester.name, ?cycle, "deadlock refused while waiting");
                    return Poll::Ready(Err(Error::Deadlock { cycle }));
                }
                state.set_waker(id, cx.waker());
                drop(state);
                self.poll_deadline(cx)
            }
            Phase::Done => panic!("writ::Acquire polled after completion"),
        }
    }

    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<HoldId>>> {
        let Some(timeout) = self.timeout else {
            return Poll::Pending;
        };
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(self.give_up()),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Stops waiting: a grant that already arrived wins; otherwise the entry
    /// is withdrawn and the request fails with `Timeout`.
    fn give_up(&mut self) -> Result<Option<HoldId>> {
        let Phase::Waiting { id, since } = self.phase else {
            return Err(Error::Timeout {
                paths: self.paths.clone(),
                waited: Duration::ZERO,
            });
        };
        self.phase = Phase::Done;
        let events = &self.sched.shared.events;
        let granted = self.sched.shared.with_state(|state, now| {
            if let Some(hold) = state.take_granted(id) {
                self.record_pickup(state, id, since, hold);
                return (Some(Ok(hold)), Vec::new());
            }
            if let Some(cycle) = state.take_refused(id) {
                let cycle: Vec<String> = cycle.into_iter().map(|a| state.actor_name(a)).collect();
                events.record(|| deadlock_event(&self.requester, Some(id), &cycle));
                return (Some(Err(Error::Deadlock { cycle })), Vec::new());
            }
            state.counters.timed_out += 1;
            events.record(|| EventKind::TimedOut {
                waiter: id,
                actor: self.requester.id,
                actor_name: self.requester.name.clone(),
                waited_ms: events::millis(now.saturating_duration_since(since)),
                cause: state.blockers_of(id).2,
            });
            (None, state.cancel(id, now))
        });
        match granted {
            Some(outcome) => outcome,
            None => {
                tracing::debug!(actor = %self.requester.name, "timeout");
                Err(Error::Timeout {
                    paths: self.paths.clone(),
                    waited: since.elapsed(),
                })
            }
        }
    }

    /// Records the pick-up of a grant a wake-up scan left: `woken`, then the
    /// child actor it created and the hold it granted (under the lock).
    fn record_pickup(&self, state: &State, id: WaiterId, since: Instant, hold: Option<HoldId>) {
        let events = &self.sched.shared.events;
        if !events.listening() {
            return;
        }
        let waited = since.elapsed();
        events.record(|| EventKind::Woken {
            waiter: id,
            actor: self.requester.id,
            actor_name: self.requester.name.clone(),
            waited_ms: events::millis(waited),
        });
        if let Some(Make::Child(meta)) = &self.make {
            events.record(|| state.actors.get(&meta.id).map(|(r, _)| events::created(r)));
        }
        if let Some(hold) = hold {
            events.record(|| events::admitted(state, hold, waited));
        }
    }

    fn finish(&mut self, hold: Option<HoldId>) -> Result<Made> {
        let make = self.make.take().expect("an Acquire finishes once");
        let sched = self.sched.clone();
        Ok(match make {
            Make::Reservation(meta) => Made::Reservation(Reservation::new(
                sched,
                meta,
                hold.expect("a call always has keys"),
                self.priority,
            )),
            Make::Fence(meta, targets) => {
                let hold = hold.expect("a fence always has keys");
                let fence = Fence::new(sched, meta, hold, targets, self.priority);
                // A fence granted after its actor was dropped would outlive
                // the rule that an actor's drop releases its fences.
                if !self.sched.shared.lock().is_live(self.requester.id) {
                    let actor = self.requester.name.to_string();
                    drop(fence);
                    return Err(Error::Released {
                        what: "fence",
                        actor,
                    });
                }
                Made::Fence(fence)
            }
            Make::Child(meta) => Made::Child(Actor { sched, meta }),
        })
    }
}

impl Acquire<Actor> {
    pub(crate) fn child(
        parent: &Actor,
        prepared: Result<Prepared>,
        timeout: Option<Duration>,
    ) -> Self {
        let (ask, make) = match prepared {
            Ok(Prepared {
                meta,
                claim,
                record,
            }) => (
                Ok(Ask {
                    claim,
                    need: Need::Child(record),
                    priority: 0,
                    refusals: 0,
                    label: Some(StdArc::from("grant fence")),
                    try_only: false,
                }),
                Make::Child(meta),
            ),
            Err(e) => (Err(e), Make::Child(parent.meta.clone())),
        };
        Acquire::new(
            parent.sched.clone(),
            parent.meta.clone(),
            ask,
            make,
            timeout,
            None,
        )
    }
}

/// A new request refused because it would close `cycle`: counted,
/// recorded and published (after the table's lock is let go), as the
/// error its caller gets.
fn refuse_deadlock(
    requester: &ActorMeta,
    events: &Events,
    mut state: MutexGuard<'_, State>,
    cycle: Vec<crate::core::table::ActorId>,
) -> Error {
    state.counters.deadlocks += 1;
    let cycle: Vec<String> = cycle.into_iter().map(|a| state.actor_name(a)).collect();
    events.record(|| deadlock_event(requester, None, &cycle));
    drop(state);
    events.publish();
    tracing::debug!(actor = %requester.name, ?cycle, "deadlock refused");
    Error::Deadlock { cycle }
}

fn deadlock_event(meta: &ActorMeta, waiter: Option<WaiterId>, cycle: &[String]) -> EventKind {
    EventKind::Deadlock {
        actor: meta.id,
        actor_name: meta.name.clone(),
        waiter,
        cycle: cycle.to_vec(),
        message: Error::Deadlock {
            cycle: cycle.to_vec(),
        }
        .to_string(),
    }
}

use seal::Made;

mod seal {
    /// What a finished acquisition built.
    pub enum Made {
        Reservation(super::Reservation),
        Fence(super::Fence),
        Child(super::Actor),
    }

    /// The guards an [`Acquire`](super::Acquire) can produce.
    pub trait Granted: Sized {
        #[doc(hidden)]
        fn from_made(made: Made) -> Self;
    }
}

impl seal::Granted for Reservation {
    fn from_made(made: Made) -> Self {
        match made {
            Made::Reservation(r) => r,
            _ => unreachable!("an Acquire<Reservation> makes reservations"),
        }
    }
}
impl seal::Granted for Fence {
    fn from_made(made: Made) -> Self {
        match made {
            Made::Fence(f) => f,
            _ => unreachable!("an Acquire<Fence> makes fences"),
        }
    }
}
impl seal::Granted for Actor {
    fn from_made(made: Made) -> Self {
        match made {
            Made::Child(a) => a,
            _ => unreachable!("an Acquire<Actor> makes actors"),
        }
    }
}

impl<T: seal::Granted> Future for Acquire<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.poll_grant(cx) {
            Poll::Ready(Ok(hold)) => Poll::Ready(this.finish(hold).map(T::from_made)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for Acquire<T> {
    fn drop(&mut self) {
        if let Phase::Waiting { id, .. } = self.phase {
            self.phase = Phase::Done;
            let events = &self.sched.shared.events;
            let wakers = {
                let mut state = self.sched.shared.lock();
                events.record(|| EventKind::Cancelled {
                    waiter: id,
                    actor: self.requester.id,
                    actor_name: self.requester.name.clone(),
                });
                state.cancel(id, Instant::now())
            };
            wake_all(wakers);
            events.publish();
            tracing::debug!(actor = %self.requester.name, "cancelled");
        }
    }
}

impl<T> std::fmt::Debug for Acquire<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let phase = match self.phase {
            Phase::Start(_) => "start",
            Phase::Waiting { .. } => "waiting",
            Phase::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("actor", &self.requester.name)
            .field("phase", &phase)
            .finish()
    }
}

/// Polls a try-only acquisition once; it never returns `Pending`.
fn poll_once<T: seal::Granted>(mut acquire: Acquire<T>) -> Result<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut acquire).poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("a try-only request never waits"),
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: StdArc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &StdArc<Self>) {
        self.0.unpark();
    }
}

/// Drives an acquisition on the current thread, parking between polls.
fn block_on<T: seal::Granted>(mut acquire: Acquire<T>, deadline: Option<Instant>) -> Result<T> {
    let waker = Waker::from(StdArc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(result) = Pin::new(&mut acquire).poll(&mut cx) {
            return result;
        }
        match deadline {
            None => std::thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    let hold = acquire.give_up()?;
                    return acquire.finish(hold).map(T::from_made);
                }
                std::thread::park_timeout(deadline - now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::actor::Grant;
    use crate::sched::config::Config;

    /// A write told `Busy` behind a hot file's claim queues next time
    /// ahead of a writer never refused there, as one refused `Stale` does
    /// (SPEC §6); a read told `Busy` counts for nothing, nor does a write
    /// with claims off.
    #[test]
    fn a_write_told_busy_queues_as_refused() {
        for (ttl, counted) in [(Duration::from_secs(600), true), (Duration::ZERO, false)] {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
            let sched = Scheduler::new(Config::default().claim_ttl(ttl));
            let actor = |name: &str| {
                sched
                    .actor(name, Grant::workspace(&root))
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            let (a, b, c) = (actor("a"), actor("b"), actor("c"));
            // a holds the file (a claim, or a long write with claims off).
            let held = a.try_admit(["hot.rs"]).unwrap_or_else(|e| panic!("{e}"));
            let claim = if ttl.is_zero() {
                Some(held)
            } else {
                held.claim(ttl);
                drop(held);
                None
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            let wait = |actor: &Actor, target: Target| {
                rt.block_on(actor.wait_call(vec![target], "hot".into(), Duration::from_millis(1)))
            };
            assert!(matches!(
                wait(&b, Target::file("hot.rs")),
                Err(Error::Busy(_))
            ));
            assert!(matches!(
                wait(&c, Target::file("hot.rs").shared()),
                Err(Error::Busy(_)) | Ok(Some(_))
            ));
            // c (never refused a write) queues first, b after it.
            let mut c_waits = Box::pin(c.request(["hot.rs"]).admit());
            let mut b_waits = Box::pin(b.request(["hot.rs"]).admit());
            let noop = &mut Context::from_waker(Waker::noop());
            assert!(c_waits.as_mut().poll(noop).is_pending());
            assert!(b_waits.as_mut().poll(noop).is_pending());
            let order: Vec<(String, u32)> = sched
                .dump()
                .waiters
                .iter()
                .map(|w| (w.actor.clone(), w.refusals))
                .collect();
            let expected = if counted {
                [("b".to_string(), 1), ("c".to_string(), 0)]
            } else {
                [("c".to_string(), 0), ("b".to_string(), 0)]
            };
            assert_eq!(order, expected, "claim TTL {ttl:?}");
            drop(claim);
        }
    }
}
