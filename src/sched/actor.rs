//! Actors and their grants.
//!
//! An [`Actor`] is one agent of the session: a root actor made by
//! [`Scheduler::actor`], or a child made by [`Actor::child`]. Its [`Grant`]
//! fixes where it may act; its lineage (chain of ancestors) is fixed at
//! creation and decides which fences cover its holds.

use std::path::{Path, PathBuf};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use crate::core::key::{Area, Key, Mode, Resolved, Target, written_files};
use crate::core::queue::Need;
use crate::core::scope::{Scope, Wanted};
use crate::core::state::{Blocker, State};
use crate::core::table::ChildRecord;
use crate::core::table::{ActorId, Claim, HoldKind, Lineage};
use crate::error::{Error, Result, SlotLimit};
use crate::sched::events::{self, EventKind};
use crate::sched::extensions::Extensions;
use crate::sched::guard::{Fence, Reservation};
use crate::sched::request::{Acquire, Request};
use crate::sched::resolve::{self, Resolver};
use crate::sched::scheduler::Scheduler;

#[derive(Debug, Clone)]
enum GrantScope {
    Workspace,
    Fenced(Vec<Target>),
    ReadOnly,
}

/// Where an actor may act.
///
/// ```
/// use writ::Grant;
/// # let root = std::env::temp_dir();
/// let optimistic = Grant::workspace(&root);           // anywhere under root, per call
/// let fenced = Grant::fenced(&root, ["src/parser/"]); // only inside this fence
/// let reader = Grant::read_only(&root).read_root("/usr/share/doc");
/// # let _ = (optimistic, fenced, reader);
/// ```
#[derive(Debug, Clone)]
pub struct Grant {
    root: PathBuf,
    scope: GrantScope,
    read_roots: Vec<PathBuf>,
}

impl Grant {
    /// Optimistic: the actor may write anywhere under `root`; each call
    /// reserves its named targets when it runs.
    pub fn workspace(root: impl Into<PathBuf>) -> Self {
        Grant {
            root: root.into(),
            scope: GrantScope::Workspace,
            read_roots: Vec::new(),
        }
    }

    /// An explicit fence, acquired all-or-nothing when the actor is created
    /// and held for its life. Its exclusive targets must lie inside it.
    pub fn fenced<I>(root: impl Into<PathBuf>, targets: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        Grant {
            root: root.into(),
            scope: GrantScope::Fenced(targets.into_iter().map(Into::into).collect()),
            read_roots: Vec::new(),
        }
    }

    /// A reader: shared holds only; an exclusive target is `Error::ReadOnly`.
    pub fn read_only(root: impl Into<PathBuf>) -> Self {
        Grant {
            root: root.into(),
            scope: GrantScope::ReadOnly,
            read_roots: Vec::new(),
        }
    }

    /// Adds a read-only root, which may lie outside the grant root: targets
    /// under it may only be held shared.
    pub fn read_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.read_roots.push(root.into());
        self
    }

    /// The root as given.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True for a read-only grant.
    pub fn is_read_only(&self) -> bool {
        matches!(self.scope, GrantScope::ReadOnly)
    }

    /// A fenced grant's targets (`None` for the other kinds), for the wire.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn fenced_targets(&self) -> Option<&[Target]> {
        match &self.scope {
            GrantScope::Fenced(targets) => Some(targets),
            _ => None,
        }
    }

    /// The read-only roots added with [`Grant::read_root`].
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn read_roots(&self) -> &[PathBuf] {
        &self.read_roots
    }
}

/// What never changes about an actor; shared by its guards.
#[derive(Debug)]
pub(crate) struct ActorMeta {
    pub(crate) id: ActorId,
    pub(crate) name: StdArc<str>,
    pub(crate) parent: Option<ActorId>,
    pub(crate) lineage: Lineage,
    pub(crate) resolver: Resolver,
    pub(crate) scope: Scope,
    /// What the layers above keep per actor (the gate's read marks); not
    /// part of the scheduler's state.
    pub(crate) extensions: Extensions,
    /// The user turn this actor's writes are recorded under.
    pub(crate) turn: parking_lot::Mutex<Option<StdArc<str>>>,
    /// How often this actor's writes to a file (by folded path) were
    /// refused since one landed there (`Stale`, or `Busy` at the end of a
    /// tool call's wait): its place in the queue for the file's next claim
    /// (SPEC §6). A leaf lock.
    pub(crate) refusals: parking_lot::Mutex<std::collections::HashMap<PathBuf, u32>>,
}

impl ActorMeta {
    /// The most refusals of this actor's writes on any file `keys` hold
    /// exclusively (0 when none was refused).
    pub(crate) fn refusals_on(&self, keys: &[(Key, Mode)]) -> u32 {
        let counts = self.refusals.lock();
        if counts.is_empty() {
            return 0;
        }
        written_files(keys)
            .filter_map(|key| counts.get(&key.norm).copied())
            .max()
            .unwrap_or(0)
    }

    /// Counts one more refusal of a write to `norm`.
    pub(crate) fn note_refusal(&self, norm: &Path) {
        let mut counts = self.refusals.lock();
        let n = counts.entry(norm.to_path_buf()).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// A write to `norm` landed: its refusals are forgotten.
    pub(crate) fn landed(&self, norm: &Path) {
        let mut counts = self.refusals.lock();
        if !counts.is_empty() {
            counts.remove(norm);
        }
    }

    /// The fence keys a fenced actor must stay inside.
    pub(crate) fn grant_fence(&self) -> Option<&[(Key, Mode)]> {
        match &self.scope {
            Scope::Fenced(keys) => Some(keys),
            _ => None,
        }
    }

    /// Resolves a request's targets and asks the core's scope rules
    /// ([`Scope::claim_keys`]) for the claim of `kind`.
    pub(crate) fn claim(&self, targets: Vec<Target>, kind: HoldKind) -> Result<Claim> {
        Ok(Claim {
            owner: self.id,
            lineage: self.lineage.clone(),
            kind,
            keys: scoped_keys(&self.scope, &self.name, &self.resolver, &targets, kind)?,
        })
    }
}

/// The keys `targets` take for a hold of `kind` by the actor `name` with
/// `scope`: resolved as the OS resolves them (`resolver`), then judged by
/// the core's scope rules ([`Scope::claim_keys`]). Both tables take an
/// actor's targets through here: the in-process actor and the server on
/// etcd.
pub(crate) fn scoped_keys(
    scope: &Scope,
    name: &str,
    resolver: &Resolver,
    targets: &[Target],
    kind: HoldKind,
) -> Result<Vec<(Key, Mode)>> {
    let mut wanted = Vec::with_capacity(targets.len());
    for target in targets {
        scope.check_mode(name, target.mode(), target.path())?;
        wanted.push(if target.is_workspace() {
            Wanted::Workspace(target.mode())
        } else {
            let (key, area) = resolver.resolve(target)?;
            Wanted::Key(key, target.mode(), area)
        });
    }
    let root = resolver.key_for(resolver.root.clone(), true);
    scope.claim_keys(name, &root, kind, wanted)
}

/// A child's root lies in its parent's writable area (SPEC §3: a child's
/// write scope never exceeds its parent's; a read-only root is not the
/// parent's to hand on): `parent` is the parent's resolver.
pub(crate) fn check_child_root(parent: &Resolver, root: &Path) -> Result<()> {
    let root_key = parent.key_for(root.to_path_buf(), true);
    if parent.area(&root_key) == Some(Area::Writable) {
        return Ok(());
    }
    Err(Error::OutsideGrant {
        path: root.to_path_buf(),
        root: parent.root.clone(),
    })
}

/// One agent of the session. Not `Clone`: dropping it releases its fences
/// (its live call reservations stay until their guards drop; its children
/// stay).
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let fence = lead.fence([writ::Target::tree("vendor")])?;
/// let reader = lead.child("reviewer", writ::Grant::read_only(dir.path()))?;
/// let read = reader.try_admit([writ::Target::file("vendor/lib.rs").shared()])?; // reads pass fences
/// assert!(reader.try_admit(["vendor/lib.rs"]).is_err()); // read-only
/// # drop((fence, read)); Ok(()) }
/// ```
pub struct Actor {
    pub(crate) sched: Scheduler,
    pub(crate) meta: StdArc<ActorMeta>,
}

impl std::fmt::Debug for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actor")
            .field("id", &self.meta.id)
            .field("name", &self.meta.name)
            .field("root", &self.meta.resolver.root)
            .field("scope", &self.meta.scope.kind())
            .finish()
    }
}

/// A prepared actor: its meta, grant fence claim and slot record.
pub(crate) struct Prepared {
    pub(crate) meta: StdArc<ActorMeta>,
    pub(crate) claim: Claim,
    pub(crate) record: ChildRecord,
}

fn collect<I>(targets: I) -> Vec<Target>
where
    I: IntoIterator,
    I::Item: Into<Target>,
{
    targets.into_iter().map(Into::into).collect()
}

impl Actor {
    /// Validates a grant against the parent (if any) and builds the actor's
    /// meta and grant-fence claim. No lock is taken.
    pub(crate) fn prepare(
        sched: &Scheduler,
        parent: Option<&ActorMeta>,
        name: String,
        grant: Grant,
    ) -> Result<Prepared> {
        let config = &sched.shared.config;
        let root = resolve::canonical_root(&grant.root)?;
        let read_roots = grant
            .read_roots
            .iter()
            .map(|r| resolve::canonical_root(r))
            .collect::<Result<Vec<_>>>()?;
        sched.admit_grant_root(&root)?;
        let case = sched.case_mode(&root);
        let resolver = Resolver::new(root.clone(), read_roots, case, config.portable_names);
        let read_only = matches!(grant.scope, GrantScope::ReadOnly);
        if let Some(parent) = parent {
            check_child_root(&parent.resolver, &root)?;
        }
        let id = sched.shared.next_actor_id();
        let lineage: Lineage = match parent {
            Some(p) => p.lineage.iter().copied().chain([id]).collect(),
            None => [id].into_iter().collect(),
        };
        let mut meta = ActorMeta {
            id,
            name: name.into(),
            parent: parent.map(|p| p.id),
            lineage: lineage.clone(),
            resolver,
            scope: match grant.scope {
                GrantScope::ReadOnly => Scope::ReadOnly,
                _ => Scope::Workspace,
            },
            extensions: Extensions::default(),
            turn: parking_lot::Mutex::new(parent.and_then(|p| p.turn.lock().clone())),
            refusals: parking_lot::Mutex::default(),
        };
        let claim = match grant.scope {
            GrantScope::Fenced(targets) => {
                let claim = meta.claim(targets, HoldKind::Fence)?;
                meta.scope = Scope::Fenced(claim.keys.clone());
                claim
            }
            _ => Claim {
                owner: id,
                lineage,
                kind: HoldKind::Fence,
                keys: Vec::new(),
            },
        };
        if let Some(parent) = parent {
            let root_key = meta.resolver.key_for(root.clone(), true);
            parent
                .scope
                .check_child(&parent.name, &meta.scope, &root_key)?;
        }
        let record = ChildRecord {
            id,
            name: meta.name.clone(),
            parent: meta.parent,
            root,
            scope: meta.scope.kind(),
            counts_actor: parent.is_some(),
            counts_writer: parent.is_some() && !read_only,
        };
        Ok(Prepared {
            meta: StdArc::new(meta),
            claim,
            record,
        })
    }

    pub(crate) fn create(
        sched: &Scheduler,
        parent: Option<&ActorMeta>,
        name: String,
        grant: Grant,
    ) -> Result<Actor> {
        let prepared = Actor::prepare(sched, parent, name, grant)?;
        let Prepared {
            meta,
            claim,
            record,
        } = prepared;
        let events = &sched.shared.events;
        let created = sched.shared.with_state(|state, now| {
            let need = Need::Child(record);
            match state.blocker(&claim, &need, 0, None) {
                None => {
                    if let Need::Child(record) = &need {
                        events.record(|| events::created(record));
                    }
                    let label = Some("grant fence".into());
                    let (hold, wakers) = state.admit(claim, need, meta.name.clone(), label, now);
                    if let Some(hold) = hold {
                        events.record(|| events::admitted(state, hold, Duration::ZERO));
                    }
                    (Ok(()), wakers)
                }
                Some(blocker) => {
                    state.counters.refused += 1;
                    let err = refusal(state, &meta.resolver, &claim, blocker);
                    events.record(|| events::refused(meta.id, meta.name.clone(), &err));
                    (Err(err), Vec::new())
                }
            }
        });
        match &created {
            Ok(()) => tracing::debug!(actor = %meta.name, "actor created"),
            Err(e) => tracing::debug!(actor = %meta.name, error = %e, "actor refused"),
        }
        created?;
        Ok(Actor {
            sched: sched.clone(),
            meta,
        })
    }

    /// This actor's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// This actor's id (unique within the scheduler).
    pub fn id(&self) -> ActorId {
        self.meta.id
    }

    /// The canonical grant root.
    pub fn root(&self) -> &Path {
        &self.meta.resolver.root
    }

    /// Tags this actor's writes from now on with a user turn, for
    /// [`Scheduler::rewind_turn`]. Children created afterwards start in the
    /// same turn; writes made before any `set_turn` belong to no turn.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
    /// lead.set_turn("turn-7");
    /// let kid = lead.child("parser", writ::Grant::workspace(dir.path()))?;
    /// assert_eq!(kid.turn().as_deref(), Some("turn-7"));
    /// # Ok(()) }
    /// ```
    pub fn set_turn(&self, turn: impl Into<String>) {
        *self.meta.turn.lock() = Some(StdArc::from(turn.into()));
    }

    /// The turn this actor's writes are recorded under, if any.
    pub fn turn(&self) -> Option<String> {
        self.meta.turn.lock().as_deref().map(str::to_string)
    }

    /// The scheduler it belongs to.
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// A child actor, try-only: `Err(NoSlot)` past a slot limit (or while a
    /// `child_wait` is queued on it), `Err(Busy)` when its fence is contested.
    pub fn child(&self, name: impl Into<String>, grant: Grant) -> Result<Actor> {
        Actor::create(&self.sched, Some(&self.meta), name.into(), grant)
    }

    /// A child actor, waiting (fairly, cancel-safely) for a slot and its fence.
    pub fn child_wait(&self, name: impl Into<String>, grant: Grant) -> Acquire<Actor> {
        let prepared = Actor::prepare(&self.sched, Some(&self.meta), name.into(), grant);
        Acquire::child(self, prepared, None)
    }

    /// [`Actor::child_wait`], giving up with `Error::Timeout` after
    /// `timeout` (whether it waited for its fence or for a slot).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::create_dir(dir.path().join("a")).unwrap();
    /// # std::fs::create_dir(dir.path().join("b")).unwrap();
    /// use std::time::Duration;
    /// let sched = writ::Scheduler::new(writ::Config::default().max_actors(1));
    /// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
    /// let first = lead.child("first", writ::Grant::workspace(dir.path().join("a")))?;
    /// let late = lead
    ///     .child_wait_timeout("late", writ::Grant::workspace(dir.path().join("b")), Duration::from_millis(20))
    ///     .await;
    /// assert!(matches!(late, Err(writ::Error::Timeout { .. })));
    /// # drop(first);
    /// # Ok(()) }
    /// ```
    pub fn child_wait_timeout(
        &self,
        name: impl Into<String>,
        grant: Grant,
        timeout: Duration,
    ) -> Acquire<Actor> {
        let prepared = Actor::prepare(&self.sched, Some(&self.meta), name.into(), grant);
        Acquire::child(self, prepared, Some(timeout))
    }

    /// Resolves targets once, so that they can be admitted many times
    /// without resolving them again (see [`Resolved`](crate::Resolved) for
    /// what a resolved key is: a snapshot). Fails as admission would on a
    /// path that is invalid or outside the grant; the fence and read-only
    /// rules are checked when the result is admitted.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
    /// let lex = lead.resolve(["src/lex.rs"])?;
    /// let call = lead.try_admit(&lex)?;
    /// assert!(lead.try_admit(&lex).is_err()); // the same key, still held
    /// drop(call);
    /// assert!(matches!(lead.resolve(["../outside"]), Err(writ::Error::OutsideGrant { .. })));
    /// # Ok(()) }
    /// ```
    pub fn resolve<I>(&self, targets: I) -> Result<Resolved>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        let targets = collect(targets);
        if targets.is_empty() {
            return Err(Error::invalid("", "no targets were given"));
        }
        targets
            .iter()
            .map(|t| self.meta.resolver.resolve_target(t))
            .collect::<Result<Vec<_>>>()
            .map(Resolved::new)
    }

    /// A request builder: priority, label, `on_queued`, then try or wait.
    pub fn request<I>(&self, targets: I) -> Request
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        Request::new(self, collect(targets))
    }

    /// Reserves every target at once, or returns `Err(Busy)` immediately.
    pub fn try_admit<I>(&self, targets: I) -> Result<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).try_admit()
    }

    /// Waits until every target can be reserved at once.
    ///
    /// # Cancel safety
    /// Dropping the future at any point leaves no hold and no waiter, and
    /// wakes whoever it was blocking.
    pub fn admit<I>(&self, targets: I) -> Acquire<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).admit()
    }

    /// [`Actor::admit`], giving up with `Error::Timeout` after `timeout`.
    /// Needs a tokio runtime with the time driver.
    pub fn admit_timeout<I>(&self, targets: I, timeout: Duration) -> Acquire<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).admit_timeout(timeout)
    }

    /// [`Actor::admit`] for threads outside an async runtime. Never call it
    /// on a runtime's worker thread.
    pub fn admit_blocking<I>(&self, targets: I) -> Result<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).admit_blocking()
    }

    /// [`Actor::admit_blocking`] with a timeout.
    pub fn admit_blocking_timeout<I>(&self, targets: I, timeout: Duration) -> Result<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).admit_blocking_timeout(timeout)
    }

    /// An additional fence, try-only (`Err(Busy)` when contested).
    pub fn fence<I>(&self, targets: I) -> Result<Fence>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).fence()
    }

    /// An additional fence, waiting until it can be taken. Waiting while
    /// holding fences can deadlock; the request that would close a cycle
    /// fails with `Error::Deadlock`.
    pub fn fence_wait<I>(&self, targets: I) -> Acquire<Fence>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).fence_wait()
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        let id = self.meta.id;
        let events = &self.sched.shared.events;
        self.sched.shared.with_state(|state, now| {
            if events.listening() {
                for fence in state.table.fences_of(id) {
                    events.record(|| events::released(state, fence));
                }
                events.record(|| EventKind::ActorDropped {
                    actor: id,
                    name: self.meta.name.clone(),
                });
            }
            ((), state.drop_actor(id, now))
        });
        tracing::debug!(actor = %self.meta.name, "actor dropped");
    }
}

/// Turns a blocker into the error a try-only request returns. It runs under
/// the state lock, so it logs nothing: callers log after unlocking.
pub(crate) fn refusal(
    state: &State,
    resolver: &Resolver,
    claim: &Claim,
    blocker: Blocker,
) -> Error {
    match blocker {
        Blocker::Slots => Error::NoSlot {
            limit: SlotLimit::MaxActors,
            max: state.max_actors.unwrap_or(0),
        },
        Blocker::Writers => Error::NoSlot {
            limit: SlotLimit::MaxWriters,
            max: state.max_writers.unwrap_or(0),
        },
        other => match state.blocker_info(claim, other) {
            Some(info) => Error::Busy(crate::error::Busy {
                relative: resolver.relative(&info.requested),
                path: info.requested,
                holder: info.holder,
                kind: info.kind,
                mode: info.mode,
                label: info.label,
                age: Instant::now().saturating_duration_since(info.since),
                queued: info.queued,
            }),
            None => Error::invalid("", "the blocking hold vanished"),
        },
    }
}
