//! The scheduler: one per session, shared by every actor.
//!
//! # Implementation details
//!
//! `Shared` holds the whole session state behind one mutex (from the `sync`
//! shim, so loom can model it). Every operation takes the lock once, applies a
//! rule of [`State`], collects the wakers of requests it granted, releases the
//! lock and only then wakes them: no waker, callback or log call runs under
//! the lock. Lock order: the state mutex is the only lock the scheduler takes
//! (but the claim reaper's flag, taken before it, see `Shared::reaper`);
//! an actor's mark and turn mutexes, and the gate's maps, are leaves: never
//! held while taking it.

use std::fmt;
use std::task::Waker;
use std::time::Instant;

use std::path::{Path, PathBuf};
use std::sync::Arc as StdArc;

use crate::core::key::{CaseMode, Target};
use crate::core::scope::Scope;
use crate::core::state::State;
use crate::core::table::ActorId;
use crate::error::{Error, Result};
use crate::sched::actor::{Actor, ActorMeta, Grant};
use crate::sched::config::Config;
use crate::sched::dump::Dump;
use crate::sched::events::Events;
use crate::sched::extensions::Extensions;
use crate::sched::guard::Reservation;
use crate::sched::request::Request;
use crate::sched::resolve::Resolver;
use crate::sched::sync::{Arc, AtomicU64, Mutex, MutexGuard, Ordering};

/// What every handle of one scheduler shares.
pub(crate) struct Shared {
    /// The session's holds, queue, actors and counters; only touched while locked.
    pub(crate) state: Mutex<State>,
    pub(crate) config: Config,
    /// The event stream; recorded into only while someone subscribes.
    pub(crate) events: Events,
    /// What the layers above keep per session (the gate's last-writer
    /// record and hash cache, the history store). Leaf locks, never taken
    /// while `state` is locked, so file operations do not lengthen the
    /// admission critical section.
    pub(crate) extensions: Extensions,
    /// Every grant root an actor of this session was created with: the only
    /// roots a rewind writes under. A leaf lock.
    grant_roots: parking_lot::Mutex<std::collections::BTreeSet<PathBuf>>,
    /// Folders every root inside of which counts as a grant root: a
    /// session whose actors are made elsewhere (on etcd, by any server of
    /// the session) has all its grant roots inside the server's root.
    grant_trees: parking_lot::Mutex<Vec<PathBuf>>,
    /// Actor ids are allocated outside the lock (ids only need uniqueness).
    next_actor: AtomicU64,
    /// The session's own identity, for holds no actor owns (rewinds).
    session: std::sync::OnceLock<StdArc<ActorMeta>>,
    /// The one case rule every key of this scheduler is folded by (§2):
    /// `Config::case`, with `Detect` probed once, at the first actor's root.
    case: std::sync::OnceLock<CaseMode>,
    /// Whether a thread ends claims at their time (SPEC §6). Never taken
    /// while the state lock is held; the reaper takes the state lock under
    /// it (to see whether a claim is left as it stops), so that order is
    /// the only one.
    reaper: parking_lot::Mutex<bool>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Ends the claims whose time is up, each told to the event stream as
    /// a release (the live page redraws on it).
    pub(crate) fn expire_claims(&self) {
        let events = &self.events;
        self.with_state(|state, now| {
            if events.listening() {
                let due: Vec<_> = state
                    .claims
                    .iter()
                    .filter(|&(_, &until)| until <= now)
                    .map(|(&id, _)| id)
                    .collect();
                for id in due {
                    events.record(|| crate::sched::events::released(state, id));
                }
            }
            ((), state.expire_claims(now))
        });
    }

    pub(crate) fn next_actor_id(&self) -> ActorId {
        // Relaxed: ids need to be unique, not ordered with anything else.
        ActorId(self.next_actor.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Runs `f` under the lock, then wakes the wakers it returned.
    pub(crate) fn with_state<R>(
        &self,
        f: impl FnOnce(&mut State, Instant) -> (R, Vec<Waker>),
    ) -> R {
        let now = Instant::now();
        let (result, wakers) = {
            let mut state = self.lock();
            f(&mut state, now)
        };
        wake_all(wakers);
        self.events.publish();
        result
    }
}

/// The claim reaper's loop: ends the claims whose time is up, then sleeps
/// until the next one's (every claim lives as long, so no later claim ends
/// earlier); stops when none is left or the scheduler is gone.
#[cfg(not(writ_loom))]
fn reap(weak: &std::sync::Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        shared.expire_claims();
        let next = {
            let mut running = shared.reaper.lock();
            let next = shared.lock().next_claim_end();
            if next.is_none() {
                *running = false;
            }
            next
        };
        drop(shared);
        match next {
            Some(at) => std::thread::sleep(at.saturating_duration_since(Instant::now())),
            None => return,
        }
    }
}

/// Wakes after the lock is released, so a woken task never contends with
/// the thread that woke it.
pub(crate) fn wake_all(wakers: Vec<Waker>) {
    if !wakers.is_empty() {
        tracing::debug!(count = wakers.len(), "wake");
    }
    for waker in wakers {
        waker.wake();
    }
}

/// A session's write scheduler. Cheap to clone; every clone is the same
/// scheduler.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let root = dir.path();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(root))?;
/// let kid = lead.child("parser", writ::Grant::fenced(root, ["src/parser/"]))?;
/// let call = kid.try_admit(["src/parser/lex.rs"])?;
/// assert!(lead.try_admit(["src/parser/lex.rs"]).is_err()); // the child's fence
/// drop(call);
/// assert_eq!(sched.dump().holds.len(), 1); // the fence remains
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Scheduler {
    pub(crate) shared: Arc<Shared>,
}

impl Scheduler {
    /// A new scheduler for one session.
    pub fn new(config: Config) -> Self {
        let state = State::new(config.max_actors, config.max_writers);
        let events = Events::with_capacity(config.events_ring);
        Scheduler {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                config,
                events,
                extensions: Extensions::default(),
                grant_roots: parking_lot::Mutex::new(std::collections::BTreeSet::new()),
                grant_trees: parking_lot::Mutex::new(Vec::new()),
                next_actor: AtomicU64::new(0),
                session: std::sync::OnceLock::new(),
                case: std::sync::OnceLock::new(),
                reaper: parking_lot::Mutex::new(false),
            }),
        }
    }

    /// A root actor (the lead agent). It counts against no slot limit. A
    /// fenced grant takes its fence try-only: `Err(Busy)` when contested.
    pub fn actor(&self, name: impl Into<String>, grant: Grant) -> Result<Actor> {
        Actor::create(self, None, name.into(), grant)
    }

    /// The session's own actor: id 0, named "session", rooted at the file
    /// system root, in no actor's lineage — so every live hold on a path,
    /// fences included, refuses it. Not registered as a live actor.
    pub(crate) fn session_meta(&self) -> StdArc<ActorMeta> {
        self.shared
            .session
            .get_or_init(|| {
                // Before any actor there is no grant root to probe: the file
                // system root stands in (and then holds for every actor).
                let case = self.case_mode(std::path::Path::new("/"));
                StdArc::new(ActorMeta {
                    id: ActorId(0),
                    name: StdArc::from("session"),
                    parent: None,
                    lineage: [ActorId(0)].into_iter().collect(),
                    resolver: Resolver::new(PathBuf::from("/"), Vec::new(), case, false),
                    scope: Scope::Workspace,
                    extensions: Extensions::default(),
                    turn: parking_lot::Mutex::new(None),
                    refusals: parking_lot::Mutex::default(),
                })
            })
            .clone()
    }

    /// The case rule of this scheduler: `Config::case`, or for `Detect` the
    /// answer of one probe — at `root` if nothing was probed yet, which is
    /// the first actor's root. Two actors folding one file differently
    /// would be two keys for one file (§2).
    pub(crate) fn case_mode(&self, root: &std::path::Path) -> CaseMode {
        *self
            .shared
            .case
            .get_or_init(|| match self.shared.config.case {
                CaseMode::Detect => crate::sched::resolve::detect_case(root),
                other => other,
            })
    }

    /// Reserves absolute, already-resolved paths exclusively for the session
    /// itself: try-only, or waiting up to `Config::file_op_wait`.
    pub(crate) fn session_admit(&self, paths: &[PathBuf], label: &str) -> Result<Reservation> {
        let targets = paths.iter().map(Target::file).collect();
        let request = Request::for_meta(self.clone(), self.session_meta(), targets).label(label);
        match self.shared.config.file_op_wait {
            Some(wait) => request.admit_blocking_timeout(wait),
            None => request.try_admit(),
        }
    }

    /// Admits `root` (canonical) as a grant root of this session: refused
    /// when the history directory lies inside it, where an agent's file
    /// tools could reach — and forge — the journal.
    pub(crate) fn admit_grant_root(&self, root: &Path) -> Result<()> {
        if let Some(dir) = &self.shared.config.history_dir {
            let dir = if dir.is_absolute() {
                dir.clone()
            } else {
                std::env::current_dir().unwrap_or_default().join(dir)
            };
            let resolved = crate::sched::resolve::resolve(&dir).unwrap_or(dir);
            if resolved.starts_with(root) {
                return Err(Error::InvalidPath {
                    path: root.to_path_buf(),
                    reason: format!(
                        "the history directory {} lies inside this grant root, where file tools could \
                         rewrite the journal; put Config::history_dir outside every workspace",
                        resolved.display()
                    ),
                });
            }
        }
        self.shared.grant_roots.lock().insert(root.to_path_buf());
        Ok(())
    }

    /// Admits every folder inside `tree` (canonical) as a grant root of
    /// this session, under the same check as [`Scheduler::admit_grant_root`]:
    /// for a session whose actors are made on other servers too.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn admit_grant_tree(&self, tree: &Path) -> Result<()> {
        self.admit_grant_root(tree)?;
        self.shared.grant_trees.lock().push(tree.to_path_buf());
        Ok(())
    }

    /// Whether `root` is a grant root of this session.
    pub(crate) fn is_grant_root(&self, root: &Path) -> bool {
        self.shared.grant_roots.lock().contains(root)
            || self
                .shared
                .grant_trees
                .lock()
                .iter()
                .any(|tree| root.starts_with(tree))
    }

    /// The value of type `T` that a layer above keeps for this session,
    /// made from the configuration on first use.
    pub(crate) fn extension<T: std::any::Any + Send + Sync>(
        &self,
        init: impl FnOnce(&Config) -> T,
    ) -> StdArc<T> {
        self.shared
            .extensions
            .get_or_init(|| init(&self.shared.config))
    }

    /// Gives `meta`'s actor a claim on `key` for `ttl` (SPEC §6; see
    /// [`Reservation::claim`]); `None` when claims are off (`ttl` zero) or
    /// something of another actor is in the way. Makes sure a thread ends
    /// it at its time.
    pub(crate) fn grant_claim(
        &self,
        meta: &ActorMeta,
        key: crate::core::key::Key,
        ttl: std::time::Duration,
    ) -> Option<crate::core::table::HoldId> {
        if ttl.is_zero() {
            return None;
        }
        let events = &self.shared.events;
        let label = StdArc::<str>::from("redoing a refused write");
        let claim = self.shared.with_state(|state, now| {
            let (claim, wakers) = state.grant_claim(
                meta.id,
                meta.lineage.clone(),
                meta.name.clone(),
                key,
                Some(label),
                now,
                now + ttl,
            );
            if let Some(id) = claim {
                events.record(|| {
                    crate::sched::events::admitted(state, id, std::time::Duration::ZERO)
                });
            }
            (claim, wakers)
        });
        if claim.is_some() {
            self.start_reaper();
        }
        claim
    }

    /// Ends every claim whose time is up, and wakes whoever it held back.
    /// A thread of the scheduler does this at each claim's time; a model
    /// that drives time itself calls it.
    #[doc(hidden)]
    pub fn expire_claims(&self) {
        self.shared.expire_claims();
    }

    /// Starts the thread that ends claims at their time, unless it runs.
    /// It holds the scheduler weakly and stops when no claim is left; the
    /// flag is checked against the state under its own lock, so a claim
    /// given as it stops starts a new one.
    #[cfg(not(writ_loom))]
    fn start_reaper(&self) {
        let mut running = self.shared.reaper.lock();
        if *running {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("writ-claims".into())
            .spawn(move || reap(&weak));
        // Without the thread claims still end at their holder's write, on
        // release and with the actor; a later claim tries again.
        *running = spawned.is_ok();
    }

    /// Under loom no thread is spawned: models end claims themselves.
    #[cfg(writ_loom)]
    fn start_reaper(&self) {}

    /// One consistent snapshot of everything live (one lock acquisition).
    pub fn dump(&self) -> Dump {
        let state = self.shared.lock();
        Dump::capture(&state, &self.shared.config, Instant::now())
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Panics when an internal invariant is broken: no two live holds
    /// conflict, the queue is ordered, slot counts match, and no waiting
    /// request is grantable (no lost wakeup). For tests and models.
    #[doc(hidden)]
    pub fn assert_invariants(&self) {
        self.shared.lock().assert_invariants();
    }
}

impl fmt::Debug for Scheduler {
    /// Never blocks: a busy lock prints a placeholder.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Scheduler");
        s.field("session", &self.shared.config.session);
        match self.shared.state.try_lock() {
            Some(state) => s
                .field("holds", &state.table.len())
                .field("waiters", &state.queue.len())
                .field("actors", &state.actors.len()),
            None => s.field("state", &"<locked>"),
        };
        s.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_refused_by_any_fence_and_refuses_everyone() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let sched = Scheduler::new(Config::default());
        let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
        let fence = lead.fence(["src/"]).unwrap();
        assert!(matches!(
            sched.session_admit(&[root.join("src/a.rs")], "rewind"),
            Err(crate::error::Error::Busy(_))
        ));
        drop(fence);
        let held = sched
            .session_admit(&[root.join("src/a.rs")], "rewind")
            .unwrap();
        let busy = match lead.try_admit(["src/a.rs"]) {
            Err(crate::error::Error::Busy(busy)) => busy,
            other => panic!("expected Busy, got {other:?}"),
        };
        assert_eq!(busy.holder, "session");
        assert_eq!(sched.dump().holds[0].label.as_deref(), Some("rewind"));
        drop(held);
        assert!(sched.dump().is_idle());
    }
}
