//! The session's table in etcd (feature `etcd`; SPEC §16).
//!
//! A [`Table`] is one process's handle on a session whose holds, waiters
//! and actors are etcd keys under `/writ/<session>/`. Any number of tables
//! — in one process or on many machines — may serve one session: etcd's
//! transactions, not a lock in any of them, decide who gets what, by the
//! rules of SPEC §3–§4, judged with the same code the in-process scheduler
//! uses (the crate's pure core).
//!
//! - An admission is one etcd transaction: read what can conflict (the
//!   ancestors of each key and the range beneath a tree key), decide, and
//!   commit with a compare on every range read, so nothing changed in
//!   between; a lost race reads again. All-or-nothing: a request is granted
//!   whole or leaves nothing.
//! - Every grant carries a fencing token, [`Grant::revision`]: the etcd
//!   revision of its commit, strictly increasing for any one path.
//! - A client's lease is an etcd lease ([`LeaseId`]): every key its actors
//!   create is attached to it, so a client that stops renewing it frees
//!   everything within its TTL, and any table can renew it.
//!
//! Paths handed to a table are keys already: absolute, resolved (symlinks
//! followed) by whoever serves the actor, compared byte-exactly. docs/DISTRIBUTED.md
//! has the key layout, the transaction, the guarantees and the costs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), writ::Error> {
//! use std::time::Duration;
//! use writ::etcd::{AdmitRequest, Table, TableOptions};
//!
//! let table = Table::connect(&["http://127.0.0.1:2379"], "demo", TableOptions::default()).await?;
//! let lease = table.grant_lease(Duration::from_secs(15)).await?;
//! let lead = table.create_actor(lease, "lead", "/ws".as_ref(), None).await?;
//! let call = table.admit(&lead, AdmitRequest::call(["/ws/src/lib.rs"])).await?;
//! println!("granted with fencing token {}", call.revision());
//! table.release(call.hold()).await?;
//! table.revoke(lease).await?;
//! # Ok(()) }
//! ```
//!
//! # Implementation details
//!
//! Each admission runs in a task of its own (spawned on the caller's tokio
//! runtime); the future [`Table::admit`] returns only waits for its answer.
//! So a caller that drops the future never leaves a commit half-observed:
//! the task notices the dropped receiver, deletes its waiter keys, and
//! releases a grant that landed after the caller left.

mod change;
mod deadlock;
mod decide;
mod files;
mod layout;
mod slots;
pub(crate) mod tokens;

pub(crate) use slots::ChildAsk;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::Target;
use crate::core::key::{Key, check_spelling, merge, normalize_lexically, overlaps};
use crate::core::table::{ActorId, Claim, HoldId};
use crate::error::{Busy, Error, Result};
use crate::kinds::{HoldKind, Mode};

pub(crate) use files::GateRecords;

use deadlock::Edges;
use decide::{ClaimRecord, EntryValue, KeyRecord, Meta, ModeRecord, Other, Place};
use layout::{Layout, Owner, prefix_end};

/// How a table talks to etcd.
#[derive(Debug, Clone)]
pub struct TableOptions {
    max_txn_ops: usize,
    deadlock_check: Duration,
    connect_timeout: Duration,
    call_timeout: Duration,
    waiter_ttl: Duration,
    fold_case: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            max_txn_ops: 128,
            deadlock_check: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(2),
            waiter_ttl: Duration::from_secs(3),
            fold_case: false,
        }
    }
}

impl TableOptions {
    /// The most operations etcd accepts in one transaction (etcd's
    /// `--max-txn-ops`, 128 unless the cluster says otherwise). A request
    /// that would need more is refused with [`Error::TxnTooLarge`], never
    /// split.
    ///
    /// ```
    /// let options = writ::etcd::TableOptions::default().max_txn_ops(256);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn max_txn_ops(mut self, ops: usize) -> Self {
        self.max_txn_ops = ops;
        self
    }

    /// How often a waiting request reads its ranges again even when no
    /// watch event arrived (the bound on a missed wake-up).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = writ::etcd::TableOptions::default().deadlock_check(Duration::from_millis(500));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn deadlock_check(mut self, every: Duration) -> Self {
        self.deadlock_check = every;
        self
    }

    /// How long one call to etcd may take before it fails (default 2 s),
    /// and how long a connection's HTTP/2 ping (every 5 s while a watch or
    /// lease stream is open) may go unanswered before the connection is
    /// dropped. Without it one
    /// stopped member of a cluster whose quorum still answers stalls every
    /// call routed to it. A waiting request's watch is not a call: its
    /// wait is bounded by its own deadline.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = writ::etcd::TableOptions::default().call_timeout(Duration::from_secs(1));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn call_timeout(mut self, limit: Duration) -> Self {
        self.call_timeout = limit;
        self
    }

    /// The TTL of the lease this table puts its waiting requests on
    /// (default 3 s): a request waits in the table that serves it, so when
    /// that process dies its queue places go within this time, and the
    /// client, asking again through another server, is not queued behind
    /// its own dead request. The table renews the lease while it lives.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = writ::etcd::TableOptions::default().waiter_ttl(Duration::from_secs(5));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn waiter_ttl(mut self, ttl: Duration) -> Self {
        self.waiter_ttl = ttl;
        self
    }

    /// Whether keys compare case-folded (`CaseMode::Insensitive`, SPEC §2):
    /// a key's index entries are under its folded path, and its record
    /// keeps the caller's spelling for the dump. A session has one answer:
    /// its first table stores it, and a table with the other one does not
    /// connect (`forbidden`).
    ///
    /// ```
    /// let options = writ::etcd::TableOptions::default().fold_case(true);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn fold_case(mut self, fold: bool) -> Self {
        self.fold_case = fold;
        self
    }
}

/// An etcd lease: a client's lease (SPEC §13) is one.
///
/// ```
/// let lease = writ::etcd::LeaseId(7);
/// assert_eq!(lease.to_string(), "7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct LeaseId(pub i64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An actor of the session, as any table of it knows it.
///
/// Plain data: holding it keeps nothing alive (the lease does). Obtain one
/// from [`Table::create_actor`] or, for an actor made elsewhere,
/// [`Table::actor`].
///
/// ```no_run
/// # async fn demo(table: writ::etcd::Table, id: writ::ActorId) -> Result<(), writ::Error> {
/// let actor = table.actor(id).await?;
/// println!("{} ({}), lease {}", actor.name(), actor.id().0, actor.lease());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorRef {
    id: ActorId,
    name: String,
    lineage: Arc<[u64]>,
    lease: LeaseId,
    root: PathBuf,
    /// The revision its record was created at: compared on every commit,
    /// so that nothing is granted to an actor whose lease ended.
    revision: i64,
    /// Made with a read-only grant (SPEC §3): whoever serves it refuses
    /// its exclusive targets.
    read_only: bool,
    /// Its grant fence (resolved targets, with their modes), for an actor
    /// made with a fenced grant: whoever serves it keeps its writes and
    /// fences within them.
    fence: Option<Arc<[Target]>>,
    /// Its read-only roots (canonical): whoever serves it lets it take
    /// shared holds there and nothing else.
    read_roots: Arc<[PathBuf]>,
}

impl ActorRef {
    /// The actor's id, unique in the session.
    pub fn id(&self) -> ActorId {
        self.id
    }

    /// The actor's name (for people; need not be unique).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease every key of the actor is attached to.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// The actor's root: the folder `Target::workspace()` names.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its ancestors' ids and its own, root first.
    pub fn lineage(&self) -> Vec<ActorId> {
        self.lineage.iter().map(|&a| ActorId(a)).collect()
    }

    /// Whether it was made read-only (by a server, for a `read_only`
    /// grant): it may take shared holds only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Its grant fence (resolved targets, with their modes), for an actor
    /// made (by a server) with a fenced grant.
    pub fn grant_fence(&self) -> Option<&[Target]> {
        self.fence.as_deref()
    }

    /// Its read-only roots (canonical folders), for an actor made (by a
    /// server) with a grant that has some (SPEC §3): shared holds only.
    pub fn read_roots(&self) -> &[PathBuf] {
        &self.read_roots
    }
}

/// What a server records of an actor's grant besides its root (SPEC §3),
/// so that every server of the session enforces it.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrantRecord {
    pub(crate) read_only: bool,
    pub(crate) fence: Option<Vec<Target>>,
    pub(crate) read_roots: Vec<PathBuf>,
}

/// One key of a grant fence as an actor's record spells it.
#[derive(Debug, Serialize, Deserialize)]
struct FenceKeyRecord {
    path: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tree: bool,
    mode: ModeRecord,
}

impl FenceKeyRecord {
    fn of(target: &Target) -> Result<Self> {
        let path = target.path();
        Ok(FenceKeyRecord {
            path: path
                .to_str()
                .ok_or_else(|| Error::invalid(path, "the etcd table stores paths as UTF-8"))?
                .to_string(),
            tree: target.is_tree(),
            mode: target.mode().into(),
        })
    }

    fn target(&self) -> Target {
        let target = if self.tree {
            Target::tree(&self.path)
        } else {
            Target::file(&self.path)
        };
        match Mode::from(self.mode) {
            Mode::Shared => target.shared().resolved(),
            Mode::Exclusive => target.resolved(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ActorRecord {
    name: String,
    lineage: Vec<u64>,
    root: String,
    lease: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    read_only: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fence: Option<Vec<FenceKeyRecord>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    read_roots: Vec<String>,
    /// Wall-clock milliseconds since the epoch (for its age in the dump).
    #[serde(default)]
    since_ms: u64,
}

/// The answer key's value of a request given up before its grant.
const ABANDONED: &str = "abandoned";

/// An actor's record and lineage (its ancestors' ids and its own, root
/// first), as every table reads it back.
fn actor_record(
    id: u64,
    lease: LeaseId,
    name: &str,
    root: &Path,
    parent: Option<&ActorRef>,
    grant: &GrantRecord,
) -> Result<(ActorRecord, Vec<u64>)> {
    let Some(root_text) = root.to_str().filter(|_| root.is_absolute()) else {
        return Err(Error::invalid(
            root,
            "an actor's root must be an absolute UTF-8 path",
        ));
    };
    let mut lineage = parent.map(|p| p.lineage.to_vec()).unwrap_or_default();
    lineage.push(id);
    let record = ActorRecord {
        name: name.to_string(),
        lineage: lineage.clone(),
        root: root_text.to_string(),
        lease: lease.0,
        read_only: grant.read_only,
        fence: grant
            .fence
            .as_ref()
            .map(|keys| {
                keys.iter()
                    .map(FenceKeyRecord::of)
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?,
        read_roots: grant
            .read_roots
            .iter()
            .map(|r| {
                r.to_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::invalid(r, "the etcd table stores paths as UTF-8"))
            })
            .collect::<Result<Vec<_>>>()?,
        since_ms: now_ms(),
    };
    Ok((record, lineage))
}

/// How long a request may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Never,
    Forever,
    For(Duration),
}

/// What an actor asks the table for: a call or a fence on some targets.
///
/// ```
/// use writ::etcd::AdmitRequest;
/// use writ::Target;
/// let read = AdmitRequest::call([Target::file("/ws/README.md").shared()]);
/// let fence = AdmitRequest::fence(["/ws/src/"]).wait().priority(5).label("refactor");
/// # let _ = (read, fence);
/// ```
#[derive(Debug, Clone)]
pub struct AdmitRequest {
    targets: Vec<Target>,
    kind: HoldKind,
    priority: i32,
    label: Option<String>,
    wait: Wait,
    file_op: bool,
    ticket: Option<String>,
}

impl AdmitRequest {
    /// One tool call's reservation (a `Call` hold), try-only unless
    /// [`wait`](Self::wait) is asked for.
    pub fn call<T: Into<Target>>(targets: impl IntoIterator<Item = T>) -> Self {
        Self::new(targets, HoldKind::Call)
    }

    /// A fence (a `Fence` hold), try-only unless [`wait`](Self::wait) is
    /// asked for.
    pub fn fence<T: Into<Target>>(targets: impl IntoIterator<Item = T>) -> Self {
        Self::new(targets, HoldKind::Fence)
    }

    fn new<T: Into<Target>>(targets: impl IntoIterator<Item = T>, kind: HoldKind) -> Self {
        AdmitRequest {
            targets: targets.into_iter().map(Into::into).collect(),
            kind,
            priority: 0,
            label: None,
            wait: Wait::Never,
            file_op: false,
            ticket: None,
        }
    }

    /// Marks the request as a file op's own call hold (see
    /// `decide::Meta::file_op`).
    pub(crate) fn file_op(mut self) -> Self {
        self.file_op = true;
        self
    }

    /// Wait until the whole set is free (SPEC §4), however long.
    #[must_use]
    pub fn wait(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// Wait at most `limit`, then give up with [`Error::Timeout`].
    #[must_use]
    pub fn wait_timeout(mut self, limit: Duration) -> Self {
        self.wait = Wait::For(limit);
        self
    }

    /// The request's priority (SPEC §11; default 0).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// A label shown in the dump and in `Busy` messages.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Names this request (SPEC §13's tickets: unique per wait), so that a
    /// caller who stops waiting — through any table of the session — can
    /// give it up with [`Table::give_up`]: a grant that commits afterwards
    /// cannot, and one that committed first is released.
    ///
    /// ```
    /// let asked = writ::etcd::AdmitRequest::call(["/ws/a.rs"]).wait().ticket("c1-7");
    /// # let _ = asked;
    /// ```
    #[must_use]
    pub fn ticket(mut self, ticket: impl Into<String>) -> Self {
        self.ticket = Some(ticket.into());
        self
    }
}

/// A granted hold.
///
/// Plain data: dropping it releases nothing; [`Table::release`] does, and
/// so does the end of the owner's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    hold: HoldId,
    revision: i64,
    kind: HoldKind,
    paths: Vec<PathBuf>,
}

impl Grant {
    /// The hold's id, unique in the session.
    pub fn hold(&self) -> HoldId {
        self.hold
    }

    /// The fencing token: the etcd revision at which the grant was
    /// committed. Every later grant of an overlapping path has a greater
    /// one, so a store that remembers the greatest token it accepted per
    /// path can refuse a writer whose lease ran out (docs/DISTRIBUTED.md).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Fence or call.
    pub fn kind(&self) -> HoldKind {
        self.kind
    }

    /// The held keys (after merging).
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

/// A copy of the session's table at one etcd revision.
#[derive(Debug, Clone, Serialize)]
pub struct TableDump {
    /// The etcd revision the copy was read at.
    pub revision: i64,
    /// Live actors.
    pub actors: Vec<DumpActor>,
    /// Live holds, in grant order.
    pub holds: Vec<DumpHold>,
    /// Waiting requests, in queue order.
    pub waiters: Vec<DumpWaiter>,
    /// The wait-for graph folded onto actors (SPEC §5): the edges true at
    /// the dump's revision, without self-edges.
    pub edges: Vec<crate::WaitEdge>,
    /// The session's admission counters, summed over every table at the
    /// dump's revision, counted as the in-process table counts them.
    pub counters: crate::Counters,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// An actor in a [`TableDump`].
#[derive(Debug, Clone, Serialize)]
pub struct DumpActor {
    /// Its id.
    pub id: ActorId,
    /// Its name.
    pub name: String,
    /// Its parent's id.
    pub parent: Option<ActorId>,
    /// Its lease.
    pub lease: LeaseId,
    /// Its root.
    pub root: PathBuf,
    /// Whether it was made read-only (it takes no writer slot).
    pub read_only: bool,
    /// Whether it was made with a grant fence.
    pub fenced: bool,
    /// How long it has lived (by the wall clocks of the table that made it
    /// and the one dumping).
    #[serde(serialize_with = "secs")]
    pub age: Duration,
}

/// One held or requested key in a [`TableDump`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DumpPath {
    /// The key.
    pub path: PathBuf,
    /// Whether it covers everything beneath it.
    pub tree: bool,
    /// How it is held.
    pub mode: Mode,
}

/// A hold in a [`TableDump`].
#[derive(Debug, Clone, Serialize)]
pub struct DumpHold {
    /// Its id.
    pub id: HoldId,
    /// Its owner.
    pub actor: ActorId,
    /// The owner's name.
    pub actor_name: String,
    /// Fence or call.
    pub kind: HoldKind,
    /// Its keys.
    pub paths: Vec<DumpPath>,
    /// Its label.
    pub label: Option<String>,
    /// Its fencing token (the revision of its commit).
    pub revision: i64,
    /// How long it has been held (by the wall clocks of the table that
    /// granted it and the one dumping).
    #[serde(serialize_with = "secs")]
    pub age: Duration,
}

/// A waiting request in a [`TableDump`].
#[derive(Debug, Clone, Serialize)]
pub struct DumpWaiter {
    /// Its id (unique in the session).
    pub id: u64,
    /// Its label.
    pub label: Option<String>,
    /// How long it has waited (wall clocks, as a hold's age).
    #[serde(serialize_with = "secs")]
    pub waited: Duration,
    /// The requester.
    pub actor: ActorId,
    /// The requester's name.
    pub actor_name: String,
    /// The kind it asks for.
    pub kind: HoldKind,
    /// The keys it asks for.
    pub paths: Vec<DumpPath>,
    /// Its priority.
    pub priority: i32,
    /// The revision it was queued at (its place among equal priorities).
    pub revision: i64,
    /// For a `child_wait` (SPEC §11), the child's name; `actor` is then
    /// the parent that asks.
    pub child: Option<String>,
    /// What it waits for (SPEC §11), judged at the dump's revision; `None`
    /// when nothing is in its way any more (its table grants it next).
    pub cause: Option<crate::WaitCause>,
    /// The holds and the waiters ahead of it in its way (SPEC §5), at the
    /// dump's revision.
    pub blocked_by: DumpBlockedBy,
}

/// What blocks a waiter in a [`TableDump`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct DumpBlockedBy {
    /// The live holds it conflicts with, in grant order.
    pub holds: Vec<HoldId>,
    /// The waiters ahead of it it conflicts with (and may not pass), in
    /// queue order.
    pub waiters: Vec<u64>,
}

/// One process's handle on a session's table in etcd.
///
/// Cheap to clone (one gRPC channel, shared).
#[derive(Clone)]
pub struct Table {
    inner: Arc<Inner>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("session", &self.inner.session)
            .field("instance", &self.inner.instance)
            .finish_non_exhaustive()
    }
}

struct Inner {
    client: Client,
    layout: Layout,
    session: String,
    options: TableOptions,
    /// This table's number in the session (from the `i` counter): the high
    /// half of every id it makes, so ids from different tables never meet
    /// and making one needs no shared counter.
    instance: u64,
    next: AtomicU64,
    /// Calls sent again by [`Table::resend_if`] (for `/metrics`).
    resends: AtomicU64,
    /// The lease of this table's waiting requests (granted when the first
    /// one queues, renewed in the background while the table lives).
    waiter_lease: tokio::sync::Mutex<Option<LeaseId>>,
}

/// An etcd failure as writ's error: a lease etcd does not know is
/// `UnknownLease`, a transaction over etcd's limit is `TxnTooLarge`,
/// anything else `Unavailable`.
fn etcd_error(e: etcd_client::Error, lease: Option<LeaseId>, ops: usize, limit: usize) -> Error {
    let text = e.to_string();
    if text.contains("lease not found") {
        return Error::UnknownLease {
            lease: lease.map_or_else(|| "?".to_string(), |l| l.to_string()),
        };
    }
    if text.contains("too many operations in txn request") {
        return Error::TxnTooLarge { ops, limit };
    }
    Error::Unavailable {
        reason: format!("etcd: {text}"),
    }
}

type EtcdResult<T> = std::result::Result<T, etcd_client::Error>;

/// Whether a failed call never reached etcd (no connection to its member).
fn unsent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable && status.message().contains("connect")
        }
        _ => false,
    }
}

/// Whether a call failed on its timeout (`TableOptions::call_timeout`).
fn timed_out(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("Timeout expired"),
        _ => false,
    }
}

fn unavailable(e: etcd_client::Error) -> Error {
    etcd_error(e, None, 0, 0)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The session name becomes part of every key: one path component of
/// printable ASCII.
fn check_session(session: &str) -> Result<()> {
    let fine = !session.is_empty()
        && session.len() <= 128
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if fine {
        Ok(())
    } else {
        Err(Error::Protocol {
            kind: crate::ProtocolError::InvalidParams,
            detail: format!(
                "the session name '{session}' must be 1 to 128 letters, digits, '.', '_' or '-'"
            ),
        })
    }
}

/// The entries of every range read of one transaction response, with their
/// create revisions.
fn ranges_of(response: &TxnResponse) -> Vec<Vec<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .map(|op| match op {
            TxnOpResponse::Get(mut get) => get.take_kvs(),
            _ => Vec::new(),
        })
        .collect()
}

fn revision_of(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

/// The id at the end of a record's key (`…/<16 hex digits>`).
fn id_in(key: &[u8]) -> Option<u64> {
    let hex = key.rsplit(|&b| b == b'/').next()?;
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

fn prefix_get(prefix: &[u8]) -> TxnOp {
    TxnOp::get(prefix.to_vec(), Some(GetOptions::new().with_prefix()))
}

/// Nothing in `prefix` was created or changed after `revision`.
fn unchanged_since(prefix: &[u8], revision: i64) -> Compare {
    Compare::mod_revision(prefix.to_vec(), CompareOp::Less, revision + 1)
        .with_range(prefix_end(prefix))
}

/// The key still exists as it was created at `revision`.
fn still(key: Vec<u8>, revision: i64) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, revision)
}

fn with_lease(lease: LeaseId) -> Option<PutOptions> {
    Some(PutOptions::new().with_lease(lease.0))
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Unavailable {
        reason: format!("could not encode a record: {e}"),
    })
}

fn dump_paths(record: &ClaimRecord) -> Vec<DumpPath> {
    record
        .keys
        .iter()
        .map(|k| DumpPath {
            // As the caller spelled it, as in process (SPEC §5).
            path: PathBuf::from(k.spelled.as_ref().unwrap_or(&k.path)),
            tree: k.tree,
            mode: k.mode.into(),
        })
        .collect()
}

/// A request's keys, checked, folded if the session folds case, and merged.
fn keys_of(
    actor: &ActorRef,
    targets: &[Target],
    case: crate::CaseMode,
) -> Result<Vec<(Key, Mode)>> {
    if targets.is_empty() {
        return Err(Error::invalid("", "the request names no targets"));
    }
    let mut keys = Vec::with_capacity(targets.len());
    for target in targets {
        let path = if target.is_workspace() {
            actor.root.clone()
        } else {
            target.path().to_path_buf()
        };
        check_spelling(&path, false)?;
        if !path.is_absolute() {
            return Err(Error::invalid(
                &path,
                "the etcd table takes absolute, resolved paths (keys)",
            ));
        }
        let path = normalize_lexically(&path);
        if path.to_str().is_none() {
            return Err(Error::invalid(
                &path,
                "the etcd table stores paths as UTF-8",
            ));
        }
        let tree = target.is_tree() || path == Path::new("/");
        let norm = crate::core::key::fold(&path, case);
        keys.push((Key { path, norm, tree }, target.mode()));
    }
    Ok(merge(keys))
}

fn key_records(keys: &[(Key, Mode)]) -> Vec<KeyRecord> {
    keys.iter()
        .map(|(k, m)| KeyRecord {
            path: k.norm.to_string_lossy().into_owned(),
            spelled: (k.path != k.norm).then(|| k.path.to_string_lossy().into_owned()),
            tree: k.tree,
            mode: (*m).into(),
        })
        .collect()
}

/// The index entries of `keys` of one hold or waiter (`owner`), each
/// repeating its `meta` so that one read of the index decides, on `lease`.
fn entry_puts(
    layout: &Layout,
    meta: &Meta,
    keys: &[(Key, Mode)],
    owner: Owner,
    lease: LeaseId,
) -> Result<Vec<TxnOp>> {
    keys.iter()
        .map(|(key, mode)| {
            let value = EntryValue {
                meta: meta.clone(),
                mode: (*mode).into(),
            };
            Ok(TxnOp::put(
                layout.entry(key, owner),
                to_json(&value)?,
                with_lease(lease),
            ))
        })
        .collect()
}

/// What blocks a request, as read at one revision.
enum Blocker<'a> {
    Hold(&'a Other, usize),
    Waiter(&'a Other, usize),
}

/// One request on its way through the table.
struct Admission {
    actor: ActorRef,
    kind: HoldKind,
    keys: Vec<(Key, Mode)>,
    claim: Claim,
    ranges: Vec<Vec<u8>>,
    priority: i32,
    label: Option<String>,
    wait: Wait,
    hold: u64,
    since_ms: u64,
    /// For a widening of a live hold (`Table::extend`): that hold's record
    /// as read, which the commit replaces.
    replaces: Option<Replace>,
    /// A file op's own hold (`AdmitRequest::file_op`).
    file_op: bool,
    /// The hash of the request's ticket ([`AdmitRequest::ticket`]); for
    /// a widening, the widened hold's (kept in its record, not asked for
    /// again).
    ticket: Option<String>,
}

/// The hold a widening replaces: its record's mod revision (compared at
/// the commit) and its keys (whose entries not kept are deleted).
struct Replace {
    revision: i64,
    old: Vec<(Key, Mode)>,
}

impl Admission {
    fn meta(&self) -> Meta {
        Meta {
            owner: self.actor.id.0,
            lineage: self.actor.lineage.to_vec(),
            kind: self.kind.into(),
            name: self.actor.name.clone(),
            label: self.label.clone(),
            since_ms: self.since_ms,
            priority: self.priority,
            file_op: self.file_op,
        }
    }

    /// The ticket the commit must answer: a new grant's, not a widening's.
    fn ticket_to_answer(&self, layout: &Layout) -> Option<Vec<u8>> {
        let hash = self.ticket.as_ref().filter(|_| self.replaces.is_none())?;
        Some(layout.ticket(self.actor.id.0, hash))
    }

    fn record(&self) -> ClaimRecord {
        ClaimRecord {
            meta: self.meta(),
            keys: key_records(&self.keys),
            ticket: self.ticket.clone(),
            child_of: None,
        }
    }

    /// The index entries of the request's keys, for a hold (on the actor's
    /// lease) or a waiter (on the waiter lease of the table serving it).
    fn entry_puts(&self, layout: &Layout, owner: Owner, lease: LeaseId) -> Result<Vec<TxnOp>> {
        entry_puts(layout, &self.meta(), &self.keys, owner, lease)
    }

    fn busy(&self, blocker: &Blocker<'_>) -> Error {
        let (other, key, queued) = match *blocker {
            Blocker::Hold(o, k) => (o, k, false),
            Blocker::Waiter(o, k) => (o, k, true),
        };
        let requested = &self.claim.keys[key].0;
        let mode = other
            .claim
            .keys
            .iter()
            .find(|(k, _)| overlaps(k, requested))
            .map_or(Mode::Exclusive, |(_, m)| *m);
        let relative = requested
            .path
            .strip_prefix(&self.actor.root)
            .map_or_else(|_| requested.path.clone(), Path::to_path_buf);
        Error::Busy(Busy {
            path: requested.path.clone(),
            holder: other.meta.name.clone(),
            kind: other.meta.kind.into(),
            mode,
            label: other.meta.label.clone(),
            age: Duration::from_millis(now_ms().saturating_sub(other.meta.since_ms)),
            queued,
            relative: if relative.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                relative
            },
        })
    }

    /// The most operations any transaction of this request needs: the
    /// read (a get per range, and the actor), the commit's compares (one
    /// per range, the actor, the own waiter, each fence relied on — at most
    /// one per ancestor) and its writes (the record, an entry per key, the
    /// fence index, the counter's put, and deleting the own waiter, its
    /// entries and edges).
    fn ops_needed(&self) -> usize {
        let keys = self.keys.len();
        let compares = self.ranges.len() + 2 + self.actor.lineage.len();
        let waiting = if self.wait == Wait::Never {
            0
        } else {
            2 + keys
        };
        let replacing = self.replaces.as_ref().map_or(0, |r| r.old.len() + 1);
        // A ticket's answer: a compare and a put.
        let ticket = usize::from(self.ticket.is_some() && self.replaces.is_none());
        // The count of the grant (or of the wait, when it queues).
        let writes = 3 + keys + waiting + replacing + ticket;
        (compares + usize::from(self.replaces.is_some()) + ticket).max(writes)
    }
}

/// One of the session's admission counters (SPEC §5, as
/// `core::state::Counters` counts them in process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    Admitted,
    Refused,
    Waited,
    TimedOut,
    Deadlocks,
}

impl Counter {
    const ALL: [Counter; 5] = [
        Counter::Admitted,
        Counter::Refused,
        Counter::Waited,
        Counter::TimedOut,
        Counter::Deadlocks,
    ];

    fn name(self) -> &'static str {
        match self {
            Counter::Admitted => "admitted",
            Counter::Refused => "refused",
            Counter::Waited => "waited",
            Counter::TimedOut => "timed_out",
            Counter::Deadlocks => "deadlocks",
        }
    }

    /// The counter an admission that ended in `outcome` counts, if any.
    fn of_refusal(outcome: &Error) -> Option<Counter> {
        match outcome {
            Error::Busy(_) | Error::NoSlot { .. } => Some(Counter::Refused),
            Error::Timeout { .. } => Some(Counter::TimedOut),
            Error::Deadlock { .. } => Some(Counter::Deadlocks),
            _ => None,
        }
    }
}

/// Why a wait ended.
enum Woken {
    Changed,
    Cancelled,
    TimedOut,
}

impl Table {
    /// Connects to etcd at `endpoints` (e.g. `http://127.0.0.1:2379`) and
    /// joins `session`, taking an instance number for the ids this table
    /// makes.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), writ::Error> {
    /// let table = writ::etcd::Table::connect(&["http://127.0.0.1:2379"], "s1", Default::default()).await?;
    /// # let _ = table; Ok(()) }
    /// ```
    pub async fn connect<E: AsRef<str>>(
        endpoints: &[E],
        session: &str,
        options: TableOptions,
    ) -> Result<Table> {
        check_session(session)?;
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.call_timeout)
            // etcd answers pings more often than every 5 s, or pings on a
            // connection with no stream open, with GOAWAY (its
            // `--grpc-keepalive-min-time` and enforcement policy).
            .with_keep_alive(Duration::from_secs(5), options.call_timeout);
        let mut client = Client::connect(endpoints, Some(connect))
            .await
            .map_err(unavailable)?;
        let layout = Layout::new(session);
        let instance = Self::claim_instance(&mut client, &layout).await?;
        let table = Table {
            inner: Arc::new(Inner {
                client,
                layout,
                session: session.to_string(),
                options,
                instance,
                next: AtomicU64::new(1),
                resends: AtomicU64::new(0),
                waiter_lease: tokio::sync::Mutex::new(None),
            }),
        };
        let case = if table.inner.options.fold_case {
            "insensitive"
        } else {
            "sensitive"
        };
        if !table
            .claim_session_value(table.layout().case(), case)
            .await?
        {
            return Err(Error::Forbidden {
                reason: format!(
                    "session '{session}' in etcd compares keys with another case mode than this {case} one; give every server of a session the same case mode"
                ),
            });
        }
        Ok(table)
    }

    /// How this session compares keys.
    fn case(&self) -> crate::CaseMode {
        if self.inner.options.fold_case {
            crate::CaseMode::Insensitive
        } else {
            crate::CaseMode::Sensitive
        }
    }

    /// The next number of the session's instance counter (compare-and-set).
    async fn claim_instance(client: &mut Client, layout: &Layout) -> Result<u64> {
        let key = layout.instances();
        loop {
            let got = client.get(key.clone(), None).await.map_err(unavailable)?;
            let (current, version) = match got.kvs().first() {
                Some(kv) => (
                    std::str::from_utf8(kv.value())
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0),
                    kv.version(),
                ),
                None => (0, 0),
            };
            let next = current + 1;
            if next >= 1 << 31 {
                return Err(Error::Unavailable {
                    reason: "the session has used up its instance numbers".into(),
                });
            }
            let txn = Txn::new()
                .when([Compare::version(key.clone(), CompareOp::Equal, version)])
                .and_then([TxnOp::put(key.clone(), next.to_string(), None)]);
            if client.txn(txn).await.map_err(unavailable)?.succeeded() {
                return Ok(next);
            }
        }
    }

    fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// etcd's answer to a call. The client balances over every endpoint,
    /// a member that is down among them: a call that could not reach its
    /// member sent nothing, so it is sent again (the next pick is most
    /// likely a member that answers), up to eight times in all (a refused
    /// connection fails at once). A call
    /// that reached a member and failed is not: it may have committed.
    async fn resend<T, Fut>(&self, call: impl Fn(Client) -> Fut) -> EtcdResult<T>
    where
        Fut: std::future::Future<Output = EtcdResult<T>>,
    {
        self.resend_if(unsent, call).await
    }

    async fn resend_if<T, Fut>(
        &self,
        again: fn(&etcd_client::Error) -> bool,
        call: impl Fn(Client) -> Fut,
    ) -> EtcdResult<T>
    where
        Fut: std::future::Future<Output = EtcdResult<T>>,
    {
        let mut tries = 1;
        loop {
            match call(self.client()).await {
                Err(e) if tries < 8 && again(&e) => {
                    tries += 1;
                    // Relaxed: a count for the metrics, ordering nothing.
                    self.inner.resends.fetch_add(1, Ordering::Relaxed);
                }
                answer => return answer,
            }
        }
    }

    /// How many calls this table sent again since it connected (they
    /// reached no member, or a read timed out).
    ///
    /// ```no_run
    /// # fn demo(table: writ::etcd::Table) {
    /// println!("{} calls sent again", table.resends());
    /// # }
    /// ```
    pub fn resends(&self) -> u64 {
        self.inner.resends.load(Ordering::Relaxed)
    }

    /// A transaction, sent again while it reached no member.
    pub(crate) async fn txn(&self, txn: Txn) -> EtcdResult<TxnResponse> {
        self.resend(|mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
    }

    /// A get, sent again while it reached no member or timed out (a
    /// read changes nothing, so asking another member is always safe; a
    /// paused member answers nothing).
    pub(crate) async fn get(
        &self,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> EtcdResult<etcd_client::GetResponse> {
        self.resend_if(
            |e| unsent(e) || timed_out(e),
            |mut client| {
                let (key, options) = (key.clone(), options.clone());
                async move { client.get(key, options).await }
            },
        )
        .await
    }

    /// A delete, sent again while it reached no member.
    pub(crate) async fn delete(&self, key: Vec<u8>) -> EtcdResult<()> {
        self.resend(|mut client| {
            let key = key.clone();
            async move { client.delete(key, None).await.map(drop) }
        })
        .await
    }

    fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// Runs one transaction of an admission of `ops` operations: etcd's
    /// refusal of a lapsed `lease` or of more than `limit` operations
    /// becomes writ's error for it.
    async fn admission_txn(
        &self,
        txn: Txn,
        lease: Option<LeaseId>,
        ops: usize,
        limit: usize,
    ) -> Result<TxnResponse> {
        self.txn(txn)
            .await
            .map_err(|e| etcd_error(e, lease, ops, limit))
    }

    /// A fresh id: this table's instance number, then its own counter.
    fn next_id(&self) -> Result<u64> {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        if n >= 1 << 32 {
            return Err(Error::Unavailable {
                reason: "this table has used up its ids; connect again".into(),
            });
        }
        Ok(self.inner.instance << 32 | n)
    }

    /// The write that counts one `counter` event: a put of this table's
    /// key for it, whose etcd version is the count. It goes into the
    /// transaction that makes the event, so the event and its count land
    /// together (one more operation, no round trip, and no compare: two
    /// admissions counting at once never make each other retry).
    pub(crate) fn count(&self, counter: Counter) -> TxnOp {
        TxnOp::put(
            self.layout().counter(self.inner.instance, counter.name()),
            "",
            None,
        )
    }

    /// Counts an event that commits nothing else (a refusal, a deadlock
    /// found before queuing), before the caller hears of it, so a dump
    /// read after the answer shows it. If etcd cannot be reached the count
    /// is lost, and the refusal still stands.
    pub(crate) async fn bump(&self, counter: Counter) {
        let _ = self.txn(Txn::new().and_then([self.count(counter)])).await;
    }

    /// The session's name.
    pub fn session(&self) -> &str {
        &self.inner.session
    }

    /// Grants a lease of `ttl` (rounded up to whole seconds, at least 1;
    /// etcd may raise it to its own minimum).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
        let granted = self
            .resend(|mut client| async move { client.lease_grant(secs, None).await })
            .await
            .map_err(unavailable)?;
        Ok(LeaseId(granted.id()))
    }

    /// Renews `lease` once. Any table of the session may renew any lease.
    pub async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        let gone = || Error::UnknownLease {
            lease: lease.to_string(),
        };
        let (mut keeper, mut stream) = self
            .resend(|mut client| async move { client.lease_keep_alive(lease.0).await })
            .await
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))?;
        keeper
            .keep_alive()
            .await
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))?;
        // The answer comes on a stream, which no call timeout bounds.
        let answer = tokio::time::timeout(self.inner.options.call_timeout, stream.message()).await;
        match answer {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => Ok(()),
            Ok(Ok(_)) => Err(gone()),
            Ok(Err(e)) => Err(etcd_error(e, Some(lease), 0, 0)),
            Err(_) => Err(Error::Unavailable {
                reason: format!(
                    "etcd did not renew lease {lease} within {:?}",
                    self.inner.options.call_timeout
                ),
            }),
        }
    }

    /// Revokes `lease`: every key attached to it — its actors, their holds
    /// and waiters — is deleted in one step.
    pub async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.resend(|mut client| async move { client.lease_revoke(lease.0).await })
            .await
            .map(drop)
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))
    }

    /// Creates an actor on `lease`, as a child of `parent` if given (the
    /// parent must still be live). `root` is the folder
    /// `Target::workspace()` names for it.
    pub async fn create_actor(
        &self,
        lease: LeaseId,
        name: &str,
        root: &Path,
        parent: Option<&ActorRef>,
    ) -> Result<ActorRef> {
        let id = self.next_id()?;
        self.put_actor(
            id,
            lease,
            name,
            root,
            parent,
            GrantRecord::default(),
            Vec::new(),
            Vec::new(),
        )
        .await
    }

    /// Writes an actor's record (and `extra`, on the same lease, in the same
    /// transaction), guarded by its parent's record being the one it knew.
    #[allow(clippy::too_many_arguments)]
    async fn put_actor(
        &self,
        id: u64,
        lease: LeaseId,
        name: &str,
        root: &Path,
        parent: Option<&ActorRef>,
        grant: GrantRecord,
        extra: Vec<TxnOp>,
        extra_compares: Vec<Compare>,
    ) -> Result<ActorRef> {
        let (record, lineage) = actor_record(id, lease, name, root, parent, &grant)?;
        let mut compares: Vec<Compare> = parent
            .map(|p| still(self.layout().actor(p.id.0), p.revision))
            .into_iter()
            .collect();
        compares.extend(extra_compares);
        let mut puts = vec![TxnOp::put(
            self.layout().actor(id),
            to_json(&record)?,
            with_lease(lease),
        )];
        puts.extend(extra);
        // An actor is one admission in process, with its grant fence if it
        // has one: a fenced actor is counted by its fence's grant (or
        // refusal) instead.
        if grant.fence.is_none() {
            puts.push(self.count(Counter::Admitted));
        }
        let txn = Txn::new().when(compares).and_then(puts);
        let done = self
            .txn(txn)
            .await
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))?;
        if !done.succeeded() {
            return Err(Error::UnknownActor {
                actor: parent.map_or_else(String::new, |p| p.id.0.to_string()),
            });
        }
        Ok(ActorRef {
            id: ActorId(id),
            name: name.to_string(),
            lineage: lineage.into(),
            lease,
            root: root.to_path_buf(),
            revision: revision_of(&done),
            read_only: grant.read_only,
            fence: grant.fence.map(Into::into),
            read_roots: grant.read_roots.into(),
        })
    }

    /// Looks up a live actor, wherever it was created.
    pub async fn actor(&self, id: ActorId) -> Result<ActorRef> {
        let unknown = || Error::UnknownActor {
            actor: id.0.to_string(),
        };
        let (record, created): (ActorRecord, i64) =
            self.record(self.layout().actor(id.0), unknown).await?;
        Ok(ActorRef {
            id,
            name: record.name,
            lineage: record.lineage.into(),
            lease: LeaseId(record.lease),
            root: PathBuf::from(record.root),
            revision: created,
            read_only: record.read_only,
            fence: record
                .fence
                .map(|keys| keys.iter().map(FenceKeyRecord::target).collect()),
            read_roots: record.read_roots.iter().map(PathBuf::from).collect(),
        })
    }

    /// Reads one record and its create revision; a missing or unreadable
    /// record is `unknown()` (a key under the session's prefix that does not
    /// decode was not written by a table).
    async fn record<T: serde::de::DeserializeOwned>(
        &self,
        key: Vec<u8>,
        unknown: impl Fn() -> Error,
    ) -> Result<(T, i64)> {
        let got = self.get(key, None).await.map_err(unavailable)?;
        let kv = got.kvs().first().ok_or_else(&unknown)?;
        let record = serde_json::from_slice(kv.value()).map_err(|_| unknown())?;
        Ok((record, kv.create_revision()))
    }

    /// Drops an actor: releases its fences (each atomically) and deletes
    /// its record. Its calls stay until released, its children stay (SPEC
    /// §3).
    pub async fn drop_actor(&self, actor: &ActorRef) -> Result<()> {
        let fences = self
            .get(
                self.layout().fences_of(actor.id.0),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(unavailable)?;
        for kv in fences.kvs() {
            let id = id_in(kv.key());
            if let Some(id) = id {
                match self.release(HoldId(id)).await {
                    Ok(()) | Err(Error::UnknownHold { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        // Its read marks go with it (SPEC §6: marks are the actor's), in
        // the same step as its record, so no file op can store one after.
        let gone = Txn::new().and_then([
            TxnOp::delete(self.layout().actor(actor.id.0), None),
            TxnOp::delete(
                self.layout().marks_of(actor.id.0),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            ),
        ]);
        self.txn(gone).await.map(drop).map_err(unavailable)
    }

    /// Admits `request` for `actor`: grants the whole set or nothing.
    ///
    /// Try-only requests return `Err(Busy)` when a live hold, or an earlier
    /// waiting request they do not pass, is in the way (SPEC §4); waiting
    /// ones queue and watch the ranges that block them.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing behind: the request runs in a
    /// task of its own, which deletes its waiter keys, and releases a grant
    /// that committed after the future was dropped.
    pub async fn admit(&self, actor: &ActorRef, request: AdmitRequest) -> Result<Grant> {
        let keys = keys_of(actor, &request.targets, self.case())?;
        let claim = Claim {
            owner: actor.id,
            lineage: actor.lineage.iter().map(|&a| ActorId(a)).collect(),
            kind: request.kind,
            keys: keys.clone(),
        };
        let ranges = self.layout().conflict_ranges(keys.iter().map(|(k, _)| k));
        let admission = Admission {
            actor: actor.clone(),
            kind: request.kind,
            keys,
            claim,
            ranges,
            priority: request.priority,
            label: request.label,
            wait: request.wait,
            hold: self.next_id()?,
            since_ms: now_ms(),
            replaces: None,
            file_op: request.file_op,
            ticket: request.ticket.as_deref().map(tokens::token_hash),
        };
        self.spawn_admission(admission).await
    }

    /// Runs an admission in a task of its own and waits for its answer.
    async fn spawn_admission(&self, admission: Admission) -> Result<Grant> {
        let (ops, limit) = (admission.ops_needed(), self.inner.options.max_txn_ops);
        if ops > limit {
            return Err(Error::TxnTooLarge { ops, limit });
        }
        let (answer, answered) = oneshot::channel();
        let table = self.clone();
        tokio::spawn(async move { table.run(admission, answer).await });
        answered.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                reason: "the admission task ended without an answer".into(),
            })
        })
    }

    /// The admission task: read, decide, commit or wait, until an answer.
    async fn run(self, admission: Admission, answer: oneshot::Sender<Result<Grant>>) {
        let limit = self.inner.options.max_txn_ops;
        let ops = admission.ops_needed();
        let mut place = Place::New {
            priority: admission.priority,
        };
        let mut waiter: Option<u64> = None;
        let deadline = match admission.wait {
            Wait::For(d) => Some(tokio::time::Instant::now() + d),
            _ => None,
        };
        let started = tokio::time::Instant::now();
        let mut answer = answer;
        let mut last_edges: Option<Edges> = None;
        // The conflicting ranges, and the actor's own record: when its
        // lease ends (or it is dropped) its waiting request goes at once,
        // not one check period later.
        let mut watched = admission.ranges.clone();
        watched.push(self.layout().actor(admission.actor.id.0));
        let outcome: Result<Grant> = loop {
            if answer.is_closed() {
                break Err(Error::Unavailable {
                    reason: "cancelled".into(),
                });
            }
            let step = self.step(&admission, place, waiter, ops, limit).await;
            let revision = match step {
                Ok(Step::Granted(grant)) => break Ok(grant),
                Ok(Step::Raced) => continue,
                Ok(Step::Blocked(busy, revision, edges)) => {
                    if admission.wait == Wait::Never {
                        break Err(busy);
                    }
                    let me = waiter.unwrap_or(u64::MAX);
                    match self.refused_cycle(me, &edges, &admission.claim).await {
                        Ok(Some(cycle)) => break Err(Error::Deadlock { cycle }),
                        Ok(None) => {}
                        Err(e) => break Err(e),
                    }
                    if let Some(id) = waiter {
                        if last_edges.as_ref() != Some(&edges) {
                            if let Err(e) = self.put_edges(id, &edges).await {
                                break Err(e);
                            }
                            last_edges = Some(edges);
                        }
                    } else {
                        last_edges = Some(edges);
                    }
                    revision
                }
                Err(e) => break Err(e),
            };
            if waiter.is_none() {
                let edges = last_edges.as_ref();
                match self.enqueue(&admission, edges, ops, limit).await {
                    Ok((id, at)) => {
                        waiter = Some(id);
                        place = Place::Queued {
                            priority: admission.priority,
                            waiter: id,
                            revision: at,
                        };
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            }
            let woken = self
                .wait_for_change(&watched, revision, deadline, &mut answer)
                .await;
            if let Some(end) = woken.ended(&admission.keys, started) {
                break Err(end);
            }
        };
        // A refusal, a timeout or a deadlock is counted before the caller
        // hears of it; a queued request's count goes with its dequeue.
        let counted = outcome.as_ref().err().and_then(Counter::of_refusal);
        match (&outcome, waiter) {
            (Err(_), Some(id)) => {
                // The waiter's keys are on this server's lease, which
                // outlives an etcd restart: a record left behind would
                // block its paths for as long as this server runs.
                let keys = admission.keys.clone();
                self.until_done(move |table| {
                    let keys = keys.clone();
                    async move { table.dequeue(id, &keys, counted).await }
                })
                .await;
            }
            (Err(_), None) => {
                if let Some(counter) = counted {
                    self.bump(counter).await;
                }
            }
            (Ok(_), _) => {}
        }
        if matches!(outcome, Err(Error::Unavailable { .. })) && admission.replaces.is_none() {
            // A commit whose answer was lost may still have landed: its
            // hold, which nobody was told of, would otherwise stay as long
            // as its owner's lease.
            let hold = HoldId(admission.hold);
            self.until_done(move |table| async move {
                match table.release(hold).await {
                    Err(Error::UnknownHold { .. }) => Ok(()),
                    other => other,
                }
            })
            .await;
        }
        if let Err(Ok(grant)) = answer.send(outcome) {
            let _ = self.release(grant.hold).await;
        }
    }

    /// One round: read at a revision, decide, and commit if free.
    async fn step(
        &self,
        admission: &Admission,
        place: Place,
        waiter: Option<u64>,
        ops: usize,
        limit: usize,
    ) -> Result<Step> {
        let layout = self.layout();
        let actor_key = layout.actor(admission.actor.id.0);
        let mut reads: Vec<TxnOp> = admission.ranges.iter().map(|r| prefix_get(r)).collect();
        reads.push(TxnOp::get(actor_key.clone(), None));
        if let Some(id) = waiter {
            reads.push(TxnOp::get(
                layout.waiter(id),
                Some(GetOptions::new().with_keys_only()),
            ));
        }
        if admission.replaces.is_some() {
            reads.push(TxnOp::get(
                layout.hold(admission.hold),
                Some(GetOptions::new().with_keys_only()),
            ));
        }
        let ticket = admission.ticket_to_answer(layout);
        if let Some(key) = &ticket {
            reads.push(TxnOp::get(
                key.clone(),
                Some(GetOptions::new().with_keys_only()),
            ));
        }
        let read = self
            .admission_txn(Txn::new().and_then(reads), None, ops, limit)
            .await?;
        let revision = revision_of(&read);
        let mut ranges = ranges_of(&read);
        if let Some(key) = ticket.filter(|_| ranges.pop().is_some_and(|kvs| !kvs.is_empty())) {
            // Before its grant the answer key exists only as the mark of a
            // caller who gave the request up. This request ends here, so
            // the mark has done its work (best effort: the lease takes it
            // otherwise).
            let _ = self.delete(key).await;
            return Err(Error::Unavailable {
                reason: "the caller gave this request up".into(),
            });
        }
        if let Some(replace) = &admission.replaces {
            match ranges
                .pop()
                .and_then(|kvs| kvs.first().map(KeyValue::mod_revision))
            {
                None => {
                    return Err(Error::UnknownHold {
                        hold: admission.hold.to_string(),
                    });
                }
                Some(at) if at != replace.revision => {
                    return Err(Error::Unavailable {
                        reason: "the hold changed while it was being widened; ask again".into(),
                    });
                }
                Some(_) => {}
            }
        }
        if waiter.is_some() && ranges.pop().is_none_or(|kvs| kvs.is_empty()) {
            // The waiter lease lapsed under a waiting request: its place
            // is gone, and committing against it would never succeed.
            return Err(Error::Unavailable {
                reason: "this request's place in the queue was lost (etcd was unreachable for longer than the queue lease); ask again".into(),
            });
        }
        let actor_alive = ranges.pop().is_some_and(|kvs| !kvs.is_empty());
        if !actor_alive {
            return Err(Error::UnknownActor {
                actor: admission.actor.id.0.to_string(),
            });
        }
        let (mut holds, waiters) = decide::group(
            layout,
            ranges
                .iter()
                .flatten()
                .map(|kv| (kv.key(), kv.value(), kv.create_revision())),
        );
        if admission.replaces.is_some() {
            // A widened hold does not conflict with itself.
            holds.retain(|h| h.owner != Owner::Hold(admission.hold));
        }
        let waiting = admission.wait != Wait::Never;
        let hold_in_the_way = decide::blocking_hold(&admission.claim, &holds);
        let mut waiter_in_the_way = None;
        let mut soft = Vec::new();
        let mut relied: Vec<(u64, i64)> = Vec::new();
        let in_the_way = decide::waiters_in_the_way(&admission.claim, place, &waiters);
        // A try-only request blocked by a hold needs nothing more; a
        // waiting one needs every edge for the deadlock check.
        if !in_the_way.is_empty() && (hold_in_the_way.is_none() || waiting) {
            let fences = self.lineage_fences(&admission.actor).await?;
            for (earlier, key) in in_the_way {
                let Owner::Waiter(id) = earlier.owner else {
                    continue;
                };
                let whole = match self.waiter_claim(id).await? {
                    Some(claim) => claim,
                    // Gone since the read: it blocks nobody any more.
                    None => continue,
                };
                match decide::passing_fence(&whole, &admission.claim, &fences) {
                    Some((fence, at, _)) => relied.push((*fence, *at)),
                    None => {
                        soft.push(id);
                        waiter_in_the_way.get_or_insert((earlier, key));
                        if !waiting {
                            break;
                        }
                    }
                }
            }
        }
        let blocker = match (hold_in_the_way, waiter_in_the_way) {
            (Some((hold, key)), _) => Some(Blocker::Hold(hold, key)),
            (None, Some((earlier, key))) => Some(Blocker::Waiter(earlier, key)),
            (None, None) => None,
        };
        if let Some(blocker) = blocker {
            let mut hard: Vec<(u64, String)> = decide::fences_in_the_way(&admission.claim, &holds)
                .map(|h| (h.meta.owner, h.meta.name.clone()))
                .collect();
            hard.sort();
            hard.dedup();
            let edges = Edges {
                actor: admission.actor.id.0,
                name: admission.actor.name.clone(),
                queued: i64::MAX,
                hard,
                soft,
                slot: None,
            };
            return Ok(Step::Blocked(admission.busy(&blocker), revision, edges));
        }
        if admission.kind == HoldKind::Fence {
            // The waiters this fence passes (by priority or by its owner's
            // precedence) will wait on it: refuse it if that closes a cycle.
            let mut passed: Vec<u64> = waiters
                .iter()
                .filter(|w| crate::core::table::conflict(&admission.claim, &w.claim).is_some())
                .filter_map(|w| match w.owner {
                    Owner::Waiter(id) if Some(id) != waiter => Some(id),
                    _ => None,
                })
                .collect();
            passed.sort_unstable();
            passed.dedup();
            if !passed.is_empty() {
                if let Some(cycle) = self.cycle_by_granting(admission, &passed).await? {
                    return Err(Error::Deadlock { cycle });
                }
            }
        }
        self.commit(admission, revision, waiter, &relied, ops, limit)
            .await
    }

    /// The live fences of `actor`'s lineage (each with its id and commit
    /// revision): the only fences that can let it pass a waiter.
    async fn lineage_fences(&self, actor: &ActorRef) -> Result<Vec<(u64, i64, Claim)>> {
        let reads: Vec<TxnOp> = actor
            .lineage
            .iter()
            .map(|&a| prefix_get(&self.layout().fences_of(a)))
            .collect();
        let read = self
            .txn(Txn::new().and_then(reads))
            .await
            .map_err(unavailable)?;
        let mut out = Vec::new();
        for kv in ranges_of(&read).iter().flatten() {
            let id = id_in(kv.key());
            if let (Some(id), Ok(record)) = (id, serde_json::from_slice::<ClaimRecord>(kv.value()))
            {
                out.push((id, kv.create_revision(), record.claim()));
            }
        }
        Ok(out)
    }

    async fn waiter_claim(&self, id: u64) -> Result<Option<Claim>> {
        let got = self
            .get(self.layout().waiter(id), None)
            .await
            .map_err(unavailable)?;
        Ok(got
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice::<ClaimRecord>(kv.value()).ok())
            .map(|record| record.claim()))
    }

    /// The commit: compares on every range read (nothing new since
    /// `revision`), on the actor, on the own waiter and on each fence
    /// relied on; then the hold's record, its index entries and (for a
    /// fence) its owner index, and the own waiter's keys deleted.
    async fn commit(
        &self,
        admission: &Admission,
        revision: i64,
        waiter: Option<u64>,
        relied: &[(u64, i64)],
        ops: usize,
        limit: usize,
    ) -> Result<Step> {
        let layout = self.layout();
        let actor = &admission.actor;
        let mut compares: Vec<Compare> = admission
            .ranges
            .iter()
            .map(|r| unchanged_since(r, revision))
            .collect();
        compares.push(still(layout.actor(actor.id.0), actor.revision));
        compares.extend(relied.iter().map(|&(id, at)| still(layout.hold(id), at)));
        let hold = admission.hold;
        let mut stale = Vec::new();
        if let Some(replace) = &admission.replaces {
            compares.push(Compare::mod_revision(
                layout.hold(hold),
                CompareOp::Equal,
                replace.revision,
            ));
            for (key, _) in &replace.old {
                if !admission
                    .keys
                    .iter()
                    .any(|(k, _)| k.norm == key.norm && k.tree == key.tree)
                {
                    stale.push(TxnOp::delete(layout.entry(key, Owner::Hold(hold)), None));
                }
            }
        }
        let record = to_json(&admission.record())?;
        let lease = with_lease(actor.lease);
        let mut writes = vec![TxnOp::put(layout.hold(hold), record.clone(), lease.clone())];
        if admission.kind == HoldKind::Fence {
            writes.push(TxnOp::put(
                layout.fence(actor.id.0, hold),
                record,
                lease.clone(),
            ));
        }
        writes.extend(admission.entry_puts(layout, Owner::Hold(hold), admission.actor.lease)?);
        writes.extend(stale);
        if let Some(key) = admission.ticket_to_answer(layout) {
            // Granted only if its caller has not given it up, and the
            // answer lands with the grant for whichever table is asked.
            compares.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
            writes.push(TxnOp::put(key, layout::hex(hold), lease.clone()));
        }
        // A widening is not counted as an admission, as in process.
        if admission.replaces.is_none() {
            writes.push(self.count(Counter::Admitted));
        }
        if let Some(id) = waiter {
            writes.push(TxnOp::delete(layout.waiter(id), None));
            writes.push(TxnOp::delete(layout.edges(id), None));
            for (key, _) in &admission.keys {
                writes.push(TxnOp::delete(layout.entry(key, Owner::Waiter(id)), None));
            }
        }
        let txn = Txn::new().when(compares).and_then(writes);
        let done = self
            .admission_txn(txn, Some(actor.lease), ops, limit)
            .await?;
        if !done.succeeded() {
            return Ok(Step::Raced);
        }
        Ok(Step::Granted(Grant {
            hold: HoldId(hold),
            revision: revision_of(&done),
            kind: admission.kind,
            paths: admission.keys.iter().map(|(k, _)| k.path.clone()).collect(),
        }))
    }

    /// The lease of this table's waiting requests: granted on first use
    /// and renewed every third of its TTL by a task that ends with the
    /// table (then etcd ends the lease, and the queue places with it).
    async fn waiter_lease(&self) -> Result<LeaseId> {
        let mut slot = self.inner.waiter_lease.lock().await;
        if let Some(lease) = *slot {
            return Ok(lease);
        }
        let ttl = self.inner.options.waiter_ttl;
        let lease = self.grant_lease(ttl).await?;
        *slot = Some(lease);
        let table = Arc::downgrade(&self.inner);
        let period = (ttl / 3).max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = table.upgrade() else { return };
                let table = Table { inner };
                if let Err(Error::UnknownLease { .. }) = table.keep_alive(lease).await {
                    // Lapsed (etcd was out for longer than the TTL): the
                    // next request to queue gets a new one.
                    let mut slot = table.inner.waiter_lease.lock().await;
                    if *slot == Some(lease) {
                        *slot = None;
                    }
                    return;
                }
            }
        });
        Ok(lease)
    }

    /// Queues the request: its waiter record and index entries, on this
    /// table's waiter lease, while the actor lives. Returns the waiter's id
    /// and its revision (its place among equal priorities).
    async fn enqueue(
        &self,
        admission: &Admission,
        edges: Option<&Edges>,
        ops: usize,
        limit: usize,
    ) -> Result<(u64, i64)> {
        let layout = self.layout();
        let actor = &admission.actor;
        let id = self.next_id()?;
        let waiter_lease = self.waiter_lease().await?;
        let lease = with_lease(waiter_lease);
        let mut writes = vec![TxnOp::put(
            layout.waiter(id),
            to_json(&admission.record())?,
            lease.clone(),
        )];
        writes.extend(admission.entry_puts(layout, Owner::Waiter(id), waiter_lease)?);
        if let Some(edges) = edges {
            writes.push(TxnOp::put(layout.edges(id), to_json(edges)?, lease.clone()));
        }
        writes.push(self.count(Counter::Waited));
        let txn = Txn::new()
            .when([still(layout.actor(actor.id.0), actor.revision)])
            .and_then(writes);
        let done = match self
            .admission_txn(txn, Some(waiter_lease), ops, limit)
            .await
        {
            Err(Error::UnknownLease { .. }) => {
                *self.inner.waiter_lease.lock().await = None;
                return Err(Error::Unavailable {
                    reason: "this server's queue lease in etcd lapsed; ask again".into(),
                });
            }
            other => other?,
        };
        if !done.succeeded() {
            return Err(Error::UnknownActor {
                actor: actor.id.0.to_string(),
            });
        }
        Ok((id, revision_of(&done)))
    }

    /// The deadlock check (SPEC §4, across tables): reads every waiting
    /// request's edges and refuses `me` if it is the newest request of a
    /// cycle through it. `me` is `u64::MAX` for a request about to queue.
    ///
    /// Edge records are written by their waiters when they look, so one may
    /// be stale (its blocker released a moment ago). The check therefore
    /// reads the edges, the waiting requests and the live fences in one
    /// transaction — one revision — and keeps only the edges true at it: a
    /// hard edge while its owner holds a fence that conflicts with the
    /// request, a soft edge while the earlier request still waits. A cycle
    /// found is then a cycle at that revision.
    async fn refused_cycle(
        &self,
        me: u64,
        mine: &Edges,
        my_claim: &Claim,
    ) -> Result<Option<Vec<String>>> {
        let (others, fences_of) = self.graph_and_fences().await?;
        let mut mine = mine.clone();
        mine.queued = others.get(&me).map_or(i64::MAX, |e| e.queued);
        true_edges(&fences_of, None, my_claim, &mut mine);
        if let Some(cycle) = deadlock::refused_cycle(me, &mine, &others) {
            return Ok(Some(cycle));
        }
        // Slot waits (SPEC §11) are "any of" waits, judged apart.
        self.slot_cycle(me, &mine, &others).await
    }

    /// Every waiting request's edges that are true at one revision.
    async fn wait_for_graph(&self) -> Result<std::collections::BTreeMap<u64, Edges>> {
        Ok(self.graph_and_fences().await?.0)
    }

    /// The edges true at one revision (a hard edge while its owner holds a
    /// fence that conflicts with the request, a soft one while the earlier
    /// request still waits), and the live fences by owner.
    #[allow(clippy::type_complexity)]
    async fn graph_and_fences(
        &self,
    ) -> Result<(
        std::collections::BTreeMap<u64, Edges>,
        std::collections::HashMap<u64, Vec<Claim>>,
    )> {
        let layout = self.layout();
        let (_, [edges, waiters, fences]) = self
            .read_prefixes([layout.all_edges(), layout.waiters(), layout.all_fences()])
            .await?;
        let claims: std::collections::HashMap<u64, Claim> = waiters
            .iter()
            .filter_map(|kv| {
                let record = serde_json::from_slice::<ClaimRecord>(kv.value()).ok()?;
                Some((id_in(kv.key())?, record.claim()))
            })
            .collect();
        let mut fences_of: std::collections::HashMap<u64, Vec<Claim>> = Default::default();
        for kv in &fences {
            if let Ok(record) = serde_json::from_slice::<ClaimRecord>(kv.value()) {
                fences_of
                    .entry(record.meta.owner)
                    .or_default()
                    .push(record.claim());
            }
        }
        let mut others = std::collections::BTreeMap::new();
        for kv in &edges {
            let Some(id) = id_in(kv.key()) else { continue };
            let (Some(claim), Ok(mut found)) =
                (claims.get(&id), serde_json::from_slice::<Edges>(kv.value()))
            else {
                continue;
            };
            // The queue position is the record's creation (with the waiter).
            found.queued = kv.create_revision();
            true_edges(&fences_of, Some(&claims), claim, &mut found);
            others.insert(id, found);
        }
        Ok((others, fences_of))
    }

    /// The cycle that granting `admission` (a fence) would close: each
    /// waiter in `passed` gains a hard edge to the fence's owner.
    async fn cycle_by_granting(
        &self,
        admission: &Admission,
        passed: &[u64],
    ) -> Result<Option<Vec<String>>> {
        let owner = (admission.actor.id.0, admission.actor.name.clone());
        let others = self.wait_for_graph().await?;
        for &w in passed {
            let Some(mut edges) = others.get(&w).cloned() else {
                continue;
            };
            edges.hard.push(owner.clone());
            if let Some(mut cycle) = deadlock::cycle_through(w, &edges, &others) {
                // Named from the requester, as a refused wait is.
                if let Some(at) = cycle.iter().position(|n| *n == owner.1) {
                    cycle.rotate_left(at);
                }
                return Ok(Some(cycle));
            }
        }
        Ok(None)
    }

    async fn put_edges(&self, waiter: u64, edges: &Edges) -> Result<()> {
        let lease = self.waiter_lease().await?;
        let (key, value) = (self.layout().edges(waiter), to_json(edges)?);
        self.resend(|mut client| {
            let (key, value) = (key.clone(), value.clone());
            async move { client.put(key, value, with_lease(lease)).await }
        })
        .await
        .map(drop)
        .map_err(|e| etcd_error(e, Some(lease), 0, 0))
    }

    /// Runs a clean-up that must happen: once now, and if etcd did not
    /// answer, again in a task of its own, backing off, until it does (or
    /// this process ends, and with it the lease of what it would remove).
    async fn until_done<F, Fut>(&self, op: F)
    where
        F: Fn(Table) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send,
    {
        if op(self.clone()).await.is_ok() {
            return;
        }
        let table = self.clone();
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            loop {
                tokio::time::sleep(pause).await;
                match op(table.clone()).await {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(error = %e, "etcd clean-up failed; trying again"),
                }
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        });
    }

    /// Deletes a waiter's record, entries and edges in one transaction,
    /// with the count of why it left the queue. Idempotent: a waiter
    /// already gone is not counted again.
    async fn dequeue(&self, id: u64, keys: &[(Key, Mode)], counted: Option<Counter>) -> Result<()> {
        let layout = self.layout();
        let mut deletes = vec![
            TxnOp::delete(layout.waiter(id), None),
            TxnOp::delete(layout.edges(id), None),
            // A `child_wait`'s mark, if it is one (nothing otherwise).
            TxnOp::delete(layout.slot_waiter(id), None),
        ];
        deletes.extend(counted.map(|c| self.count(c)));
        deletes.extend(
            keys.iter()
                .map(|(key, _)| TxnOp::delete(layout.entry(key, Owner::Waiter(id)), None)),
        );
        let present = Compare::version(layout.waiter(id), CompareOp::Greater, 0);
        self.txn(Txn::new().when([present]).and_then(deletes))
            .await
            .map(drop)
            .map_err(unavailable)
    }

    /// Waits until something changes in `ranges` after `revision`, the
    /// deadline passes, the caller goes away, or a `deadlock_check` period
    /// ends (a re-read then catches whatever no event announced).
    async fn wait_for_change<T>(
        &self,
        ranges: &[Vec<u8>],
        revision: i64,
        deadline: Option<tokio::time::Instant>,
        answer: &mut oneshot::Sender<Result<T>>,
    ) -> Result<Woken> {
        let options = || {
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision + 1),
            )
        };
        let Some((first, rest)) = ranges.split_first() else {
            return Ok(Woken::Changed);
        };
        let mut stream = self
            .resend(|mut client| {
                let (first, options) = (first.clone(), options());
                async move { client.watch(first, options).await }
            })
            .await
            .map_err(unavailable)?;
        for range in rest {
            stream
                .watch(range.clone(), options())
                .await
                .map_err(unavailable)?;
        }
        let period = tokio::time::sleep(self.inner.options.deadlock_check);
        tokio::pin!(period);
        let until = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until);
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(m)) if m.canceled() || !m.events().is_empty() => return Ok(Woken::Changed),
                    Ok(Some(_)) => continue,
                    Ok(None) => return Ok(Woken::Changed),
                    Err(e) => return Err(unavailable(e)),
                },
                () = &mut period => return Ok(Woken::Changed),
                () = &mut until => return Ok(Woken::TimedOut),
                () = answer.closed() => return Ok(Woken::Cancelled),
            }
        }
    }

    /// Gives up the request `actor` asked with `ticket`
    /// ([`AdmitRequest::ticket`]), through any table of the session: if it
    /// was granted, the hold is released and returned; if not, it never
    /// will be (its commit compares on the mark this leaves, on the
    /// actor's lease). Giving a ticket up twice is harmless.
    ///
    /// ```no_run
    /// # async fn demo(table: writ::etcd::Table, actor: writ::etcd::ActorRef) -> Result<(), writ::Error> {
    /// if let Some(hold) = table.give_up(&actor, "c1-7").await? {
    ///     println!("{hold:?} was granted just before the caller left; released");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn give_up(&self, actor: &ActorRef, ticket: &str) -> Result<Option<HoldId>> {
        let key = self
            .layout()
            .ticket(actor.id.0, &tokens::token_hash(ticket));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), ABANDONED, with_lease(actor.lease))])
            .or_else([TxnOp::get(key.clone(), None)]);
        let done = self
            .txn(txn)
            .await
            .map_err(|e| etcd_error(e, Some(actor.lease), 0, 0))?;
        if done.succeeded() {
            return Ok(None);
        }
        let answer = ranges_of(&done)
            .into_iter()
            .flatten()
            .next()
            .map(|kv| kv.value().to_vec())
            .unwrap_or_default();
        let Some(hold) = std::str::from_utf8(&answer)
            .ok()
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        else {
            // Given up before: the mark stays for a commit still to come.
            return Ok(None);
        };
        match self.release(HoldId(hold)).await {
            // Its release took the answer key with it.
            Ok(()) => Ok(Some(HoldId(hold))),
            // Released by its holder already; the answer key is stale.
            Err(Error::UnknownHold { .. }) => {
                self.delete(key).await.map_err(unavailable)?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// A live hold's record key, its record, and the revision it was
    /// created at (what a release compares on). `UnknownHold` if it is gone.
    pub(crate) async fn held(&self, hold: HoldId) -> Result<(Vec<u8>, ClaimRecord, i64)> {
        let key = self.layout().hold(hold.0);
        let unknown = || Error::UnknownHold {
            hold: hold.0.to_string(),
        };
        let (record, created) = self.record(key.clone(), unknown).await?;
        Ok((key, record, created))
    }

    /// Releases a hold: its record, index entries and owner index go in
    /// one transaction. `UnknownHold` if it is already gone.
    pub async fn release(&self, hold: HoldId) -> Result<()> {
        let (key, record, created) = self.held(hold).await?;
        let unknown = || Error::UnknownHold {
            hold: hold.0.to_string(),
        };
        let deletes = self.release_ops(hold, &record);
        let txn = Txn::new().when([still(key, created)]).and_then(deletes);
        let done = self.txn(txn).await.map_err(unavailable)?;
        if done.succeeded() {
            Ok(())
        } else {
            Err(unknown())
        }
    }

    /// The deletions that release `hold`, whose record is `record`: the
    /// record, its owner index (a fence's) and one entry per key.
    fn release_ops(&self, hold: HoldId, record: &ClaimRecord) -> Vec<TxnOp> {
        let layout = self.layout();
        let mut deletes = vec![TxnOp::delete(layout.hold(hold.0), None)];
        if HoldKind::from(record.meta.kind) == HoldKind::Fence {
            deletes.push(TxnOp::delete(layout.fence(record.meta.owner, hold.0), None));
        }
        for (k, _) in record.keys() {
            deletes.push(TxnOp::delete(layout.entry(&k, Owner::Hold(hold.0)), None));
        }
        if let Some(hash) = &record.ticket {
            deletes.push(TxnOp::delete(layout.ticket(record.meta.owner, hash), None));
        }
        deletes
    }

    /// Reads whole prefixes in one transaction, so at one revision.
    async fn read_prefixes<const N: usize>(
        &self,
        prefixes: [Vec<u8>; N],
    ) -> Result<(i64, [Vec<KeyValue>; N])> {
        let reads: Vec<TxnOp> = prefixes.iter().map(|p| prefix_get(p)).collect();
        let read = self
            .txn(Txn::new().and_then(reads))
            .await
            .map_err(unavailable)?;
        let mut ranges = ranges_of(&read).into_iter();
        let found = std::array::from_fn(|_| ranges.next().unwrap_or_default());
        Ok((revision_of(&read), found))
    }

    /// A copy of the whole session's table, read in one transaction at one
    /// revision.
    pub async fn dump(&self) -> Result<TableDump> {
        let layout = self.layout();
        let (revision, [actor_kvs, holds, waiter_kvs, edges, fences, counts]) = self
            .read_prefixes([
                layout.actors(),
                layout.holds(),
                layout.waiters(),
                layout.all_edges(),
                layout.all_fences(),
                layout.counters(),
            ])
            .await?;
        let counters = sum_counters(&counts);
        let now = now_ms();
        let age = |since: u64| Duration::from_millis(now.saturating_sub(since));
        let edges = dump_edges(&waiter_kvs, &edges, &fences);
        let mut actors: Vec<(i64, DumpActor)> = actor_kvs
            .iter()
            .filter_map(|kv| {
                let record: ActorRecord = serde_json::from_slice(kv.value()).ok()?;
                let parent = record.lineage.iter().rev().nth(1).map(|&p| ActorId(p));
                let actor = DumpActor {
                    id: ActorId(id_in(kv.key())?),
                    name: record.name,
                    parent,
                    lease: LeaseId(record.lease),
                    root: PathBuf::from(record.root),
                    read_only: record.read_only,
                    fenced: record.fence.is_some(),
                    age: age(record.since_ms),
                };
                Some((kv.create_revision(), actor))
            })
            .collect();
        // Creation order: ids are unique, not ordered across tables.
        actors.sort_by_key(|(made, actor)| (*made, actor.id));
        let actors = actors.into_iter().map(|(_, actor)| actor).collect();
        let records = |kvs: &[KeyValue],
                       owner: fn(u64) -> Owner,
                       revision: fn(&KeyValue) -> i64|
         -> Vec<(ClaimRecord, Other)> {
            kvs.iter()
                .filter_map(|kv| {
                    let record: ClaimRecord = serde_json::from_slice(kv.value()).ok()?;
                    let other = Other {
                        owner: owner(id_in(kv.key())?),
                        meta: record.meta.clone(),
                        claim: record.claim(),
                        revision: revision(kv),
                    };
                    Some((record, other))
                })
                .collect()
        };
        // A hold's token is the revision its record last changed at: a
        // widened fence's new part was granted then, and a token must be
        // at least the revision that granted each of its paths (the
        // answer to `fence.extend` and `fence.narrow` says the same).
        let mut holds = records(&holds, Owner::Hold, KeyValue::mod_revision);
        holds.sort_by_key(|(_, h)| (h.revision, h.owner));
        // A waiter's place is the revision it queued at.
        let mut waiters = records(&waiter_kvs, Owner::Waiter, KeyValue::create_revision);
        waiters.sort_by_key(|(_, w)| (std::cmp::Reverse(w.meta.priority), w.revision, w.owner));
        let held: Vec<Other> = holds.iter().map(|(_, h)| h.clone()).collect();
        let queued: Vec<Other> = waiters.iter().map(|(_, w)| w.clone()).collect();
        let id_of = |o: &Other| match o.owner {
            Owner::Hold(id) | Owner::Waiter(id) => id,
        };
        let mut waiters: Vec<DumpWaiter> = waiters
            .iter()
            .map(|(record, w)| {
                let place = Place::Queued {
                    priority: w.meta.priority,
                    waiter: id_of(w),
                    revision: w.revision,
                };
                let blockers = decide::blockers(&w.claim, place, &held, &queued);
                let cause = blockers.first.map(|(other, key)| crate::WaitCause::Path {
                    path: w
                        .claim
                        .keys
                        .get(key)
                        .map(|(k, _)| k.path.clone())
                        .unwrap_or_default(),
                    holder: other.meta.name.clone(),
                });
                DumpWaiter {
                    id: id_of(w),
                    label: record.meta.label.clone(),
                    waited: age(record.meta.since_ms),
                    actor: ActorId(record.meta.owner),
                    paths: dump_paths(record),
                    actor_name: record.meta.name.clone(),
                    kind: record.meta.kind.into(),
                    priority: record.meta.priority,
                    revision: w.revision,
                    child: None,
                    cause,
                    blocked_by: DumpBlockedBy {
                        holds: blockers.holds.iter().map(|h| HoldId(id_of(h))).collect(),
                        waiters: blockers.waiters.iter().map(|q| id_of(q)).collect(),
                    },
                }
            })
            .collect();
        // A child_wait's cause also counts the slots (SPEC §11).
        self.dump_child_waits(revision, &actor_kvs, &waiter_kvs, &fences, &mut waiters)
            .await?;
        let holds = holds
            .into_iter()
            .map(|(record, h)| DumpHold {
                id: HoldId(id_of(&h)),
                actor: ActorId(record.meta.owner),
                paths: dump_paths(&record),
                actor_name: record.meta.name,
                kind: record.meta.kind.into(),
                label: record.meta.label,
                revision: h.revision,
                age: age(record.meta.since_ms),
            })
            .collect();
        Ok(TableDump {
            revision,
            actors,
            holds,
            waiters,
            edges,
            counters,
        })
    }
}

/// The session's counters: each table's counter keys at one revision,
/// each key's version being its count, summed by counter.
fn sum_counters(counts: &[KeyValue]) -> crate::Counters {
    let mut sum = crate::Counters::default();
    for kv in counts {
        let name = kv.key().rsplit(|&b| b == b'/').next().unwrap_or_default();
        let n = u64::try_from(kv.version()).unwrap_or(0);
        let slot = match Counter::ALL.iter().find(|c| c.name().as_bytes() == name) {
            Some(Counter::Admitted) => &mut sum.admitted,
            Some(Counter::Refused) => &mut sum.refused,
            Some(Counter::Waited) => &mut sum.waited,
            Some(Counter::TimedOut) => &mut sum.timed_out,
            Some(Counter::Deadlocks) => &mut sum.deadlocks,
            None => continue,
        };
        *slot += n;
    }
    sum
}

/// The wait-for edges between actors that are true at one read: each
/// waiting request's recorded edges, kept while they hold (its fence
/// owners still hold a fence in its way, its earlier requests still wait),
/// folded onto actors, without self-edges, each once.
fn dump_edges(
    waiters: &[KeyValue],
    edges: &[KeyValue],
    fences: &[KeyValue],
) -> Vec<crate::WaitEdge> {
    let claims: std::collections::HashMap<u64, Claim> = waiters
        .iter()
        .filter_map(|kv| {
            let record = serde_json::from_slice::<ClaimRecord>(kv.value()).ok()?;
            Some((id_in(kv.key())?, record.claim()))
        })
        .collect();
    let mut fences_of: std::collections::HashMap<u64, Vec<Claim>> = Default::default();
    for kv in fences {
        if let Ok(record) = serde_json::from_slice::<ClaimRecord>(kv.value()) {
            fences_of
                .entry(record.meta.owner)
                .or_default()
                .push(record.claim());
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for kv in edges {
        let Some(id) = id_in(kv.key()) else { continue };
        let (Some(claim), Ok(mut found)) =
            (claims.get(&id), serde_json::from_slice::<Edges>(kv.value()))
        else {
            continue;
        };
        true_edges(&fences_of, Some(&claims), claim, &mut found);
        for (owner, _) in &found.hard {
            out.insert((found.actor, *owner, true));
        }
        for earlier in &found.soft {
            if let Some(other) = claims.get(earlier) {
                out.insert((found.actor, other.owner.0, false));
            }
        }
    }
    out.into_iter()
        .filter(|(from, to, _)| from != to)
        .map(|(from, to, hard)| crate::WaitEdge {
            from: ActorId(from),
            to: ActorId(to),
            hard,
        })
        .collect()
}

/// Keeps the edges of a request (whole claim `claim`) that are true: a
/// hard edge while its owner holds a fence in the way, a soft one while the
/// earlier request still waits (`waiting`; `None` keeps every soft edge).
fn true_edges(
    fences_of: &std::collections::HashMap<u64, Vec<Claim>>,
    waiting: Option<&std::collections::HashMap<u64, Claim>>,
    claim: &Claim,
    edges: &mut Edges,
) {
    edges.hard.retain(|(owner, _)| {
        fences_of.get(owner).is_some_and(|fs| {
            fs.iter()
                .any(|f| crate::core::table::conflict(claim, f).is_some())
        })
    });
    if let Some(waiting) = waiting {
        edges.soft.retain(|v| waiting.contains_key(v));
    }
}

/// How a wait for a change ended.
trait WaitEnded {
    /// The error that ends the request (`None`: read again): cancelled,
    /// timed out on `keys` after waiting since `started`, or etcd's.
    fn ended(self, keys: &[(Key, Mode)], started: tokio::time::Instant) -> Option<Error>;
}

impl WaitEnded for Result<Woken> {
    fn ended(self, keys: &[(Key, Mode)], started: tokio::time::Instant) -> Option<Error> {
        match self {
            Ok(Woken::Changed) => None,
            Ok(Woken::Cancelled) => Some(Error::Unavailable {
                reason: "cancelled".into(),
            }),
            Ok(Woken::TimedOut) => Some(Error::Timeout {
                paths: keys.iter().map(|(k, _)| k.path.clone()).collect(),
                waited: started.elapsed(),
            }),
            Err(e) => Some(e),
        }
    }
}

/// What one round of an admission came to.
enum Step {
    Granted(Grant),
    /// Something changed in the ranges since the read: read again.
    Raced,
    /// Blocked (the `Busy` a try-only request returns), as read at this
    /// revision.
    Blocked(Error, i64, Edges),
}
