//! The event stream: what happened to the table, in order, for anyone who
//! watches (`writ serve`'s `/events`, `writ top`, the page at `/`).
//!
//! # Implementation details
//!
//! A bounded ring of [`Event`]s with a sequence number each. The scheduler
//! records into it only while someone subscribes: one relaxed atomic load is
//! all an admission pays when nobody listens. Events of the table (admit,
//! refuse, wait, wake, release, ...) are recorded while the state lock is
//! held, so their sequence numbers follow the order in which the state
//! changed; the ring's own mutex is a leaf taken for one push. Subscribers
//! are woken after the state lock is released ([`Events::publish`]).
//!
//! A subscriber is a cursor into the ring, never a queue of its own: a
//! subscriber that reads slowly never slows the scheduler down, it only
//! falls behind; when the ring has overwritten what it had not read yet, it
//! receives one [`EventKind::Gap`] naming what it lost.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::core::key::{Key, Mode};
use crate::core::queue::{WaitCause, WaiterId};
use crate::core::state::State;
use crate::core::table::{ActorId, ChildRecord, HoldId, HoldKind, ScopeKind};
use crate::error::Error;
use crate::sched::dump::PathEntry;
use crate::sched::scheduler::Scheduler;

/// How many events the ring keeps for late readers and reconnects, unless
/// [`Config::events_ring`](crate::Config::events_ring) says otherwise.
pub const EVENT_RING: usize = 4096;

/// Every [`EventKind`]'s wire name, as docs/PROTOCOL.md lists them.
///
/// ```
/// assert!(writ::EVENT_KINDS.contains(&"admitted"));
/// ```
pub const EVENT_KINDS: &[&str] = &[
    "admitted",
    "refused",
    "waiting",
    "woken",
    "timed_out",
    "cancelled",
    "deadlock",
    "released",
    "changed",
    "actor_created",
    "actor_dropped",
    "lease_expired",
    "file_written",
    "rewound",
    "gap",
];

/// One thing that happened, with its place in the stream.
///
/// Serialized flat: `{"seq": 7, "at_ms": ..., "kind": "admitted", ...}`.
/// The kinds and their fields are documented in docs/PROTOCOL.md (`/events`).
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let mut events = sched.subscribe();
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// drop(lead.try_admit(["a.rs"])?);
/// let kinds: Vec<&str> = std::iter::from_fn(|| events.try_next())
///     .map(|e| e.kind.name())
///     .collect();
/// assert_eq!(kinds, ["actor_created", "admitted", "released"]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Event {
    /// Its sequence number, per scheduler: consecutive while anyone
    /// subscribes; one number is skipped each time recording starts again
    /// after nobody subscribed (the events that went unrecorded).
    pub seq: u64,
    /// When it was recorded, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What an [`Event`] reports. Actor names are given beside their ids
/// because an actor may be gone by the time a reader looks it up.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A hold was granted (at once, or to a waiter that woke).
    Admitted {
        /// The new hold.
        hold: HoldId,
        /// Its actor.
        actor: ActorId,
        /// Its actor's name.
        actor_name: Arc<str>,
        /// Fence or call.
        hold_kind: HoldKind,
        /// Its paths.
        paths: Vec<PathEntry>,
        /// Its label.
        label: Option<Arc<str>>,
        /// How long it waited (0 when granted at once).
        waited_ms: u64,
    },
    /// A request was refused without waiting, or the version gate refused
    /// a write (`stale`, `not_read`).
    Refused {
        /// The requesting actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
        /// The error's wire kind (`busy`, `no_slot`, `stale`, ...).
        error: String,
        /// The refusal's sentence, as the error displays it.
        message: String,
        /// The contested path, when the refusal names one.
        path: Option<PathBuf>,
        /// Who stands in the way: the holder of a busy path, the last
        /// writer of a stale file, when known.
        holder: Option<String>,
    },
    /// A request started waiting.
    Waiting {
        /// The waiter, as the dump names it.
        waiter: WaiterId,
        /// The requesting actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
        /// The kind of hold it asks for.
        hold_kind: HoldKind,
        /// Its paths.
        paths: Vec<PathEntry>,
        /// Its priority.
        priority: i32,
        /// Why it waits.
        cause: WaitCause,
    },
    /// A waiter was granted and picked its grant up; `admitted` follows
    /// when the grant is a hold.
    Woken {
        /// The waiter.
        waiter: WaiterId,
        /// The requesting actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
        /// How long it waited.
        waited_ms: u64,
    },
    /// A waiter gave up at its timeout.
    TimedOut {
        /// The waiter.
        waiter: WaiterId,
        /// The requesting actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
        /// How long it waited.
        waited_ms: u64,
        /// What it was still waiting for when it gave up.
        cause: Option<WaitCause>,
    },
    /// A waiter was withdrawn by its caller (dropped future, disconnect).
    Cancelled {
        /// The waiter.
        waiter: WaiterId,
        /// The requesting actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
    },
    /// A request was refused because waiting would close a wait-for cycle.
    Deadlock {
        /// The refused actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
        /// The waiter, when it was refused after it had started waiting.
        waiter: Option<WaiterId>,
        /// The cycle, by actor name.
        cycle: Vec<String>,
        /// The refusal's sentence.
        message: String,
    },
    /// A hold was released (its guard dropped, or its actor's fences
    /// released with the actor).
    Released {
        /// The hold.
        hold: HoldId,
        /// Its actor.
        actor: ActorId,
        /// Its actor's name.
        actor_name: Arc<str>,
    },
    /// A fence's paths changed (extend or narrow).
    Changed {
        /// The fence.
        hold: HoldId,
        /// Its actor.
        actor: ActorId,
        /// Its actor's name.
        actor_name: Arc<str>,
        /// Its paths now.
        paths: Vec<PathEntry>,
    },
    /// An actor was created (its grant fence, if any, is `admitted` next).
    ActorCreated {
        /// The new actor.
        actor: ActorId,
        /// Its name.
        name: Arc<str>,
        /// Its parent.
        parent: Option<ActorId>,
        /// Its canonical grant root.
        root: PathBuf,
        /// How it may act.
        scope: ScopeKind,
    },
    /// An actor was dropped; its fences are `released` before this.
    ActorDropped {
        /// The actor.
        actor: ActorId,
        /// Its name.
        name: Arc<str>,
    },
    /// A `writ serve` lease lapsed and its actors were dropped.
    LeaseExpired {
        /// The lease handle.
        lease: String,
        /// How many actors it dropped.
        actors: usize,
        /// How many holds it released.
        holds: usize,
    },
    /// A file tool changed a file.
    FileWritten {
        /// The actor.
        actor: ActorId,
        /// Its name.
        actor_name: Arc<str>,
        /// The operation (`write`, `append`, `replace`, `delete`, `rename`).
        op: String,
        /// The file (for a rename, the destination).
        path: PathBuf,
        /// The turn it was recorded under, if any.
        turn: Option<String>,
    },
    /// A turn was rewound (or redone) on disk.
    Rewound {
        /// The turn.
        turn: String,
        /// True for a redo.
        redo: bool,
        /// The files it restored.
        paths: Vec<PathBuf>,
    },
    /// Events this reader will never see: the ring overwrote them before
    /// it read them, or they happened while nobody subscribed. Only
    /// readers receive it; it has the sequence number `next - 1`.
    Gap {
        /// The last event the reader had.
        after: u64,
        /// The first event it gets next.
        next: u64,
    },
}

impl EventKind {
    /// The kind's wire name (`"admitted"`, `"gap"`, ...).
    ///
    /// ```
    /// let gap = writ::EventKind::Gap { after: 3, next: 9 };
    /// assert_eq!(gap.name(), "gap");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Admitted { .. } => "admitted",
            EventKind::Refused { .. } => "refused",
            EventKind::Waiting { .. } => "waiting",
            EventKind::Woken { .. } => "woken",
            EventKind::TimedOut { .. } => "timed_out",
            EventKind::Cancelled { .. } => "cancelled",
            EventKind::Deadlock { .. } => "deadlock",
            EventKind::Released { .. } => "released",
            EventKind::Changed { .. } => "changed",
            EventKind::ActorCreated { .. } => "actor_created",
            EventKind::ActorDropped { .. } => "actor_dropped",
            EventKind::LeaseExpired { .. } => "lease_expired",
            EventKind::FileWritten { .. } => "file_written",
            EventKind::Rewound { .. } => "rewound",
            EventKind::Gap { .. } => "gap",
        }
    }
}

pub(crate) fn paths_of(keys: &[(Key, Mode)]) -> Vec<PathEntry> {
    keys.iter()
        .map(|(k, m)| PathEntry {
            path: k.path.clone(),
            tree: k.tree,
            mode: *m,
        })
        .collect()
}

/// `refused` for a refusal `err` of the actor `actor` named `actor_name`.
pub(crate) fn refused(actor: ActorId, actor_name: Arc<str>, err: &Error) -> EventKind {
    let (path, holder) = match err {
        Error::Busy(busy) => (Some(busy.path.clone()), Some(busy.holder.clone())),
        Error::Stale { path, writer, .. } => (Some(path.clone()), writer.clone()),
        Error::NotRead { path }
        | Error::Policy { path, .. }
        | Error::OutsideGrant { path, .. }
        | Error::OutsideFence { path, .. }
        | Error::ReadOnly { path, .. }
        | Error::NotApproved { path, .. } => (Some(path.clone()), None),
        _ => (None, None),
    };
    EventKind::Refused {
        actor,
        actor_name,
        error: err.kind().to_string(),
        message: err.to_string(),
        path,
        holder,
    }
}

/// `admitted` for a hold in the table (under the state lock).
pub(crate) fn admitted(state: &State, hold: HoldId, waited: Duration) -> Option<EventKind> {
    let h = state.table.get(hold)?;
    Some(EventKind::Admitted {
        hold,
        actor: h.claim.owner,
        actor_name: h.actor_name.clone(),
        hold_kind: h.claim.kind,
        paths: paths_of(&h.claim.keys),
        label: h.label.clone(),
        waited_ms: millis(waited),
    })
}

/// `released` for a hold about to leave the table, if it is still there.
pub(crate) fn released(state: &State, hold: HoldId) -> Option<EventKind> {
    let h = state.table.get(hold)?;
    Some(EventKind::Released {
        hold,
        actor: h.claim.owner,
        actor_name: h.actor_name.clone(),
    })
}

/// `changed` for a fence whose keys were just extended or narrowed.
pub(crate) fn changed(state: &State, hold: HoldId) -> Option<EventKind> {
    let h = state.table.get(hold)?;
    Some(EventKind::Changed {
        hold,
        actor: h.claim.owner,
        actor_name: h.actor_name.clone(),
        paths: paths_of(&h.claim.keys),
    })
}

/// `actor_created` for a registered (or about to be registered) actor.
pub(crate) fn created(record: &ChildRecord) -> EventKind {
    EventKind::ActorCreated {
        actor: record.id,
        name: record.name.clone(),
        parent: record.parent,
        root: record.root.clone(),
        scope: record.scope,
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

struct Ring {
    buf: VecDeque<Arc<Event>>,
    /// The sequence number the next event gets.
    next: u64,
    /// Every event from this number on was recorded (earlier ones may have
    /// happened while nobody listened).
    continuous_from: u64,
    /// Readers that found nothing new and wait to be woken.
    parked: usize,
}

/// The per-scheduler event source (see the module docs).
pub(crate) struct Events {
    listeners: AtomicUsize,
    ring: parking_lot::Mutex<Ring>,
    notify: tokio::sync::Notify,
    /// Set by a push that found parked readers; taken by `publish`, so
    /// readers that are busy reading cost the recorder no wake-up.
    wake: std::sync::atomic::AtomicBool,
    capacity: usize,
}

impl Events {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Events {
            listeners: AtomicUsize::new(0),
            ring: parking_lot::Mutex::new(Ring {
                buf: VecDeque::with_capacity(capacity.min(1024)),
                next: 1,
                continuous_from: 1,
                parked: 0,
            }),
            notify: tokio::sync::Notify::new(),
            wake: std::sync::atomic::AtomicBool::new(false),
            capacity: capacity.max(1),
        }
    }

    /// Whether anyone subscribes: the only cost an event has when nobody does.
    #[inline]
    pub(crate) fn listening(&self) -> bool {
        // Relaxed: a subscriber that arrives concurrently with an event may
        // miss it either way; its first read starts after `subscribe`.
        self.listeners.load(Ordering::Relaxed) > 0
    }

    /// Records an event if anyone listens; `make` runs only then. Callers
    /// that hold the state lock call [`Events::publish`] after releasing it.
    #[inline]
    pub(crate) fn record<E: Into<Option<EventKind>>>(&self, make: impl FnOnce() -> E) {
        if self.listening()
            && let Some(kind) = make().into()
        {
            self.push(kind);
        }
    }

    fn push(&self, kind: EventKind) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis);
        let mut ring = self.ring.lock();
        let seq = ring.next;
        ring.next += 1;
        if ring.buf.len() >= self.capacity {
            ring.buf.pop_front();
        }
        ring.buf.push_back(Arc::new(Event { seq, at_ms, kind }));
        if ring.parked > 0 {
            ring.parked = 0;
            self.wake.store(true, Ordering::Relaxed);
        }
    }

    /// Wakes the subscribers waiting for new events (never under the state lock).
    #[inline]
    pub(crate) fn publish(&self) {
        // Relaxed: the flag was set under the ring's lock, which a parked
        // reader takes again before it reads.
        if self.listening()
            && self.wake.load(Ordering::Relaxed)
            && self.wake.swap(false, Ordering::Relaxed)
        {
            self.notify.notify_waiters();
        }
    }

    /// Records and publishes at once: for layers that do not hold the state lock.
    pub(crate) fn emit(&self, make: impl FnOnce() -> EventKind) {
        if self.listening() {
            self.push(make());
            self.publish();
        }
    }

    fn subscribe(&self) -> u64 {
        let mut ring = self.ring.lock();
        if self.listeners.fetch_add(1, Ordering::Relaxed) == 0 {
            // Whatever happened since the last subscriber left went
            // unrecorded: one sequence number stands for all of it, so a
            // reader resuming from before it is told of a gap.
            ring.next += 1;
            ring.continuous_from = ring.next;
        }
        ring.next
    }
}

/// A reader of a scheduler's event stream: a cursor into a bounded ring.
/// Made by [`Scheduler::subscribe`]; events are recorded only while at
/// least one `Subscription` exists.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let mut events = sched.subscribe();
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let first = events.next().await;
/// assert_eq!(first.kind.name(), "actor_created");
/// // A reader that reconnects names the last event it had.
/// let mut again = sched.subscribe_after(first.seq);
/// assert!(again.try_next().is_none()); // nothing missed
/// # drop(lead); Ok(()) }
/// ```
pub struct Subscription {
    sched: Scheduler,
    /// The sequence number of the next event this reader wants.
    cursor: u64,
}

impl Scheduler {
    /// Starts reading the event stream from now on.
    pub fn subscribe(&self) -> Subscription {
        let cursor = self.shared.events.subscribe();
        Subscription {
            sched: self.clone(),
            cursor,
        }
    }

    /// Reads the event stream from the event after `last` (an SSE
    /// `Last-Event-ID`): what the ring still holds is read again; what it
    /// no longer holds, or never recorded, comes as one [`EventKind::Gap`].
    pub fn subscribe_after(&self, last: u64) -> Subscription {
        let now = self.shared.events.subscribe();
        Subscription {
            sched: self.clone(),
            // A number from the future (another server's stream) resumes
            // nowhere: the reader gets a gap up to now.
            cursor: if last >= now {
                0
            } else {
                last.saturating_add(1)
            },
        }
    }

    /// Reads the stream from the last `recent` events the ring still holds
    /// (fewer when it holds fewer, or when recording started since), then
    /// on: a viewer who connects late sees the recent past, without a gap.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let _recording = sched.subscribe();
    /// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
    /// drop(lead.try_admit(["a.rs"])?);
    /// let mut late = sched.subscribe_recent(2);
    /// let kinds: Vec<&str> = std::iter::from_fn(|| late.try_next())
    ///     .map(|e| e.kind.name())
    ///     .collect();
    /// assert_eq!(kinds, ["admitted", "released"]);
    /// # Ok(()) }
    /// ```
    pub fn subscribe_recent(&self, recent: usize) -> Subscription {
        let events = &self.shared.events;
        let now = events.subscribe();
        let ring = events.ring.lock();
        let oldest = ring
            .buf
            .front()
            .map_or(ring.next, |e| e.seq)
            .max(ring.continuous_from);
        let wanted = now.saturating_sub(u64::try_from(recent).unwrap_or(u64::MAX));
        Subscription {
            sched: self.clone(),
            cursor: wanted.max(oldest),
        }
    }

    /// Records an event that a layer above the scheduler observed (a file
    /// write, a rewind, a lapsed lease), if anyone listens.
    pub(crate) fn emit(&self, make: impl FnOnce() -> EventKind) {
        self.shared.events.emit(make);
    }
}

impl Subscription {
    /// The next event if one is there, without waiting.
    pub fn try_next(&mut self) -> Option<Arc<Event>> {
        self.read(false)
    }

    /// The next event, or `None` after registering as a parked reader
    /// (when `park`), in the same critical section: an event pushed after
    /// it looked finds it parked and wakes it.
    fn read(&mut self, park: bool) -> Option<Arc<Event>> {
        let mut ring = self.sched.shared.events.ring.lock();
        let oldest = ring
            .buf
            .front()
            .map_or(ring.next, |e| e.seq)
            .max(ring.continuous_from);
        if self.cursor < oldest {
            let after = self.cursor.saturating_sub(1);
            self.cursor = oldest;
            let at_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, millis);
            return Some(Arc::new(Event {
                seq: oldest - 1,
                at_ms,
                kind: EventKind::Gap {
                    after,
                    next: oldest,
                },
            }));
        }
        // Sequence numbers in the ring may skip one (an unrecorded stretch).
        let at = ring.buf.partition_point(|e| e.seq < self.cursor);
        let Some(event) = ring.buf.get(at).cloned() else {
            if park {
                ring.parked += 1;
            }
            return None;
        };
        self.cursor = event.seq + 1;
        Some(event)
    }

    /// Waits for the next event.
    pub async fn next(&mut self) -> Arc<Event> {
        let shared = self.sched.shared.clone();
        loop {
            let notified = shared.events.notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so an event recorded in between
            // still wakes this reader.
            notified.as_mut().enable();
            if let Some(event) = self.read(true) {
                return event;
            }
            notified.await;
        }
    }

    /// The sequence number of the next event this reader will get.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.sched
            .shared
            .events
            .listeners
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("cursor", &self.cursor)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(n: usize) -> EventKind {
        EventKind::LeaseExpired {
            lease: format!("l{n}"),
            actors: n,
            holds: 0,
        }
    }

    #[test]
    fn the_wire_kind_is_the_name_and_listed() {
        for kind in [note(1), EventKind::Gap { after: 1, next: 3 }] {
            let json = serde_json::to_value(&kind).unwrap();
            assert_eq!(json["kind"], kind.name());
            assert!(EVENT_KINDS.contains(&kind.name()));
        }
    }

    #[test]
    fn nothing_is_recorded_while_nobody_listens() {
        let events = Events::with_capacity(8);
        events.emit(|| unreachable!("no listener, no event"));
        assert!(events.ring.lock().buf.is_empty());
    }

    #[test]
    fn a_reader_that_falls_behind_the_ring_gets_one_gap_then_the_rest() {
        let sched = Scheduler::new(crate::sched::config::Config::default());
        let mut reader = sched.subscribe();
        let start = reader.cursor();
        for n in 0..EVENT_RING + 10 {
            sched.emit(|| note(n));
        }
        let gap = reader.try_next().unwrap();
        match gap.kind {
            EventKind::Gap { after, next } => {
                assert_eq!(after, start - 1);
                assert_eq!(next, start + 10);
                assert_eq!(gap.seq, next - 1);
            }
            ref other => panic!("expected a gap, got {other:?}"),
        }
        let mut seen = 0;
        while let Some(e) = reader.try_next() {
            assert_eq!(e.seq, start + 10 + seen);
            seen += 1;
        }
        assert_eq!(seen as usize, EVENT_RING);
    }

    #[test]
    fn resuming_reads_what_was_missed_and_a_gap_for_the_unrecorded() {
        let sched = Scheduler::new(crate::sched::config::Config::default());
        let first = sched.subscribe();
        sched.emit(|| note(1));
        sched.emit(|| note(2));
        let mut again = sched.subscribe_after(first.cursor());
        assert_eq!(again.try_next().unwrap().seq, first.cursor() + 1);
        assert!(again.try_next().is_none());
        let last = again.cursor() - 1;
        drop((first, again));
        sched.emit(|| unreachable!("nobody listens"));
        let mut late = sched.subscribe_after(last);
        assert_eq!(late.try_next().unwrap().kind.name(), "gap");
        assert!(late.try_next().is_none());
        // An id from another stream (ahead of this one) is a gap too.
        let mut foreign = sched.subscribe_after(1_000_000);
        assert_eq!(foreign.try_next().unwrap().kind.name(), "gap");
    }
}
