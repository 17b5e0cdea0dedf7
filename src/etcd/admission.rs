//! Admission: a request's keys, the read–decide–commit round, queuing, the
//! deadlock check before a wait, and tickets.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp, TxnResponse};
use tokio::sync::oneshot;

use crate::Target;
use crate::core::judge;
use crate::core::key::{Key, check_spelling, merge, normalize_lexically};
use crate::core::table::{ActorId, Claim, HoldId};
use crate::error::{Busy, Error, Result};
use crate::kinds::{HoldKind, Mode};

use super::actors::ActorRef;
use super::counters::Counter;
use super::deadlock::Edges;
use super::decide::{self, Blocked, ClaimRecord, Meta, Moved, Other, Place, Snapshot};
use super::graph::{moved_places, others};
use super::holds::{entry_puts, key_records};
use super::layout::{self, Layout, Owner};
pub(super) use super::pipeline::Wait;
use super::pipeline::{Need, Round, Standing};
use super::queue::Mine;
use super::reorder::{Deciding, Reordered};
use super::store::{
    LeaseId, Table, empty, etcd_error, now_ms, prefix_get, ranges_of, revision_of, still, to_json,
    unavailable, unchanged_since, with_lease,
};
use super::tokens;

/// The answer key's value of a request given up before its grant.
pub(super) const ABANDONED: &str = "abandoned";

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
    pub(super) targets: Vec<Target>,
    pub(super) kind: HoldKind,
    pub(super) priority: i32,
    pub(super) label: Option<String>,
    pub(super) wait: Wait,
    pub(super) file_op: bool,
    pub(super) ticket: Option<String>,
    pub(super) resume: bool,
    pub(super) after_timeout: bool,
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
            resume: false,
            after_timeout: false,
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

    /// Asks again for the request its [`ticket`](Self::ticket) named,
    /// through this table, after the answer was lost (the table that
    /// served it went away, or the connection to it broke): a grant it
    /// had is answered as it was; a wait still queued goes on here, in its
    /// place in the queue; a request etcd never saw is asked now. The
    /// targets must be the ones first asked for.
    ///
    /// ```
    /// let again = writ::etcd::AdmitRequest::call(["/ws/a.rs"]).wait().ticket("c1-7").resume();
    /// # let _ = again;
    /// ```
    #[must_use]
    pub fn resume(mut self) -> Self {
        self.resume = true;
        self
    }
}

/// A granted hold.
///
/// Plain data: dropping it releases nothing; [`Table::release`] does, and
/// so does the end of the owner's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub(super) hold: HoldId,
    pub(super) revision: i64,
    pub(super) kind: HoldKind,
    pub(super) paths: Vec<PathBuf>,
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

/// A request's keys, checked, folded if the session folds case, and merged.
pub(super) fn keys_of(
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

/// The `Busy` of a request (`claim`, by an actor rooted at `root`) blocked
/// by `other` (a waiter ahead when `queued`) through its key `key`.
pub(super) fn busy(claim: &Claim, root: &Path, other: &Other, key: usize, queued: bool) -> Error {
    let Some((requested, mode)) = judge::contested(claim, key, &other.claim) else {
        return Error::Unavailable {
            reason: "what blocked this request vanished while it was judged; ask again".into(),
        };
    };
    let relative = requested
        .path
        .strip_prefix(root)
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

/// One request on its way through the table.
pub(super) struct Admission {
    pub(super) actor: ActorRef,
    pub(super) kind: HoldKind,
    pub(super) keys: Vec<(Key, Mode)>,
    pub(super) claim: Claim,
    pub(super) ranges: Vec<Vec<u8>>,
    pub(super) priority: i32,
    pub(super) label: Option<String>,
    pub(super) wait: Wait,
    pub(super) hold: u64,
    pub(super) since_ms: u64,
    /// For a widening of a live hold (`Table::extend`): that hold's record
    /// as read, which the commit replaces.
    pub(super) replaces: Option<Replace>,
    /// A file op's own hold (`AdmitRequest::file_op`).
    pub(super) file_op: bool,
    /// A file op's write: its actor's refusals on the files (SPEC §6),
    /// read when it queues (only a queued request has a place to give).
    pub(super) refusals: AtomicU32,
    /// A try right after a timed-out wait (`Table::wait_call`).
    pub(super) after_timeout: bool,
    /// The hash of the request's ticket ([`AdmitRequest::ticket`]); for
    /// a widening, the widened hold's (kept in its record, not asked for
    /// again).
    pub(super) ticket: Option<String>,
}

/// The hold a widening replaces: its record's mod revision (compared at
/// the commit) and its keys (whose entries not kept are deleted).
pub(super) struct Replace {
    pub(super) revision: i64,
    pub(super) old: Vec<(Key, Mode)>,
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
            refusals: self.refusals.load(Ordering::Relaxed),
        }
    }

    /// The grant a commit at `revision` made.
    pub(super) fn granted(&self, revision: i64) -> Grant {
        Grant {
            hold: HoldId(self.hold),
            revision,
            kind: self.kind,
            paths: self.keys.iter().map(|(k, _)| k.path.clone()).collect(),
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
            taken_over: None,
            until_ms: None,
        }
    }

    /// The index entries of the request's keys, for a hold (on the actor's
    /// lease) or a waiter (on the waiter lease of the table serving it).
    fn entry_puts(&self, layout: &Layout, owner: Owner, lease: LeaseId) -> Result<Vec<TxnOp>> {
        entry_puts(layout, &self.meta(), &self.keys, owner, lease)
    }

    /// The most operations any transaction of this request needs: the
    /// read (a get per range, and the actor), the commit's compares (one
    /// per range, the actor, the own waiter, each fence relied on — at most
    /// one per ancestor) and its writes (the record, an entry per key, the
    /// fence index, the counter's put, and deleting the own waiter, its
    /// entries and edges).
    pub(super) fn ops_needed(&self) -> usize {
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

impl Admission {
    /// What a waiting request watches: its conflicting ranges, its actor's
    /// record (when its lease ends or it is dropped, the request goes at
    /// once, not one check period later), and the moved places (a
    /// reordering may move it, or the requests ahead of it).
    fn watched(&self, layout: &Layout) -> Vec<Vec<u8>> {
        let mut watched = self.ranges.clone();
        watched.push(layout.actor(self.actor.id.0));
        watched.push(layout.all_moved());
        watched
    }
}

/// A hold asked for: the pipeline's `Need::Hold`.
impl Need for Admission {
    type Granted = Grant;
    const REWRITES_EDGES: bool = false;

    fn keys(&self) -> &[(Key, Mode)] {
        &self.keys
    }

    fn claim(&self) -> &Claim {
        &self.claim
    }

    fn asker(&self) -> (u64, &str) {
        (self.actor.id.0, self.actor.name())
    }

    fn counts_refusal(&self) -> bool {
        !self.after_timeout
    }

    fn wait(&self) -> Wait {
        self.wait
    }

    fn first_place(&self) -> Place {
        Place::new(self.priority)
    }

    fn queued_place(&self, waiter: u64, revision: i64, to: Option<Moved>) -> Place {
        match to {
            Some(to) => Place::moved(self.priority, waiter, to),
            None => Place::queued(self.priority, waiter, revision),
        }
        .refused(self.refusals.load(Ordering::Relaxed))
    }

    fn deciding(&self) -> Deciding<'_> {
        Deciding {
            requester: self.actor.id.0,
            claim: &self.claim,
            priority: self.priority,
            movable: true,
        }
    }

    async fn round(&self, table: &Table, at: Standing) -> Result<Round<Grant>> {
        table.step(self, at).await
    }

    async fn enqueue(
        &self,
        table: &Table,
        edges: &Edges,
        moved: Option<Moved>,
    ) -> Result<(u64, i64)> {
        let limit = table.inner.options.max_txn_ops;
        // A file op's write queues by its actor's refusals there (SPEC §6):
        // read now, so an uncontested write never pays for it.
        if self.file_op && self.replaces.is_none() {
            let refusals = table.refusals_on(&self.actor, &self.keys).await?;
            self.refusals.store(refusals, Ordering::Relaxed);
        }
        table
            .enqueue(self, Some(edges), moved, self.ops_needed(), limit)
            .await
    }

    async fn lost(&self, table: &Table) {
        // A grant asked for with a ticket is the ticket's: its caller
        // resumes it (through any table) or gives it up. A widening's
        // hold was the caller's before. Otherwise a commit whose answer
        // was lost may still have landed: its hold, which nobody was told
        // of, would stay as long as its owner's lease.
        if self.replaces.is_some() || self.ticket_to_answer(table.layout()).is_some() {
            return;
        }
        let hold = HoldId(self.hold);
        table
            .until_done(move |table| async move {
                match table.release(hold).await {
                    Err(Error::UnknownHold { .. }) => Ok(()),
                    other => other,
                }
            })
            .await;
    }

    async fn unclaimed(&self, table: &Table, granted: Grant) {
        // A ticketed grant waits for its caller's resume or give-up:
        // released here, it could be taken from under a caller a resume
        // handed it to.
        if self.ticket_to_answer(table.layout()).is_none() {
            let _ = table.release(granted.hold).await;
        }
    }
}

impl Table {
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
    /// that committed after the future was dropped — unless the request
    /// has a [ticket](AdmitRequest::ticket): that grant is the ticket's,
    /// found again by [`resume`](AdmitRequest::resume) or released by
    /// [`Table::give_up`], so that a resume through another table can
    /// never be handed a hold this one then releases.
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
            refusals: AtomicU32::new(0),
            after_timeout: request.after_timeout,
            ticket: request.ticket.as_deref().map(tokens::token_hash),
        };
        if let Some(ticket) = &request.ticket {
            crate::tickets::check_len(ticket)?;
        }
        if request.resume {
            return self.resume(admission).await;
        }
        let Some(ticket) = &request.ticket else {
            return self.spawn_admission(admission).await;
        };
        // The actor's tickets are counted once the admission has committed
        // (its answer key with it): admissions racing on other servers
        // have committed theirs by then or count this one, so a grant past
        // the bound is handed back by at least one side and the stored
        // tickets settle within the bound (a give-up, which stores a mark
        // and nothing else, compares on the count in its transaction).
        let granted = self.spawn_admission(admission).await;
        let room = self.ticket_room(actor, ticket).await;
        match (room, granted) {
            (Ok(_), granted) => granted,
            (Err(e), Ok(grant)) => {
                self.release(grant.hold()).await?;
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
        }
    }

    /// A ticket of `actor` within the bounds every table keeps (SPEC §13):
    /// its length, and the actor's other live tickets, counted (keys only)
    /// so that one more stays within the bound. Returns the revision the
    /// count was made at, for a transaction that stores a ticket to compare
    /// on ([`Table::tickets_unchanged`]).
    async fn ticket_room(&self, actor: &ActorRef, ticket: &str) -> Result<i64> {
        crate::tickets::check_len(ticket)?;
        let layout = self.layout();
        let counted = self
            .read(vec![
                TxnOp::get(
                    layout.ticket(actor.id.0, &tokens::token_hash(ticket)),
                    Some(GetOptions::new().with_count_only()),
                ),
                TxnOp::get(
                    layout.tickets_of(actor.id.0),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                ),
            ])
            .await
            .map_err(unavailable)?;
        let counts: Vec<i64> = counted
            .op_responses()
            .into_iter()
            .map(|op| match op {
                etcd_client::TxnOpResponse::Get(get) => get.count(),
                _ => 0,
            })
            .collect();
        let others = match counts.as_slice() {
            [own, live] => live.saturating_sub(*own),
            _ => 0,
        };
        crate::tickets::check_room(usize::try_from(others).unwrap_or(usize::MAX))?;
        Ok(revision_of(&counted))
    }

    /// The compare that keeps a count of `actor`'s tickets made at
    /// `counted` true in the transaction that stores one more: no ticket
    /// of the actor was stored or changed since. Tickets stored by other
    /// servers between the count and the store fail it, and the count is
    /// made again, so the bound holds however many servers store at once.
    fn tickets_unchanged(&self, actor: &ActorRef, counted: i64) -> Compare {
        Compare::mod_revision(
            self.layout().tickets_of(actor.id.0),
            CompareOp::Less,
            counted.saturating_add(1),
        )
        .with_prefix()
    }

    /// A tool call's wait (SPEC §14; `Actor::wait_call` in process):
    /// `request` waits at most `limit`, then is asked once more, try-only,
    /// so the answer is who holds a path then (`Busy`), or the grant if
    /// the paths came free as the wait ended. That try's refusal is the
    /// wait's, already counted as timed out: it is not counted again.
    pub(crate) async fn wait_call(
        &self,
        actor: &ActorRef,
        request: AdmitRequest,
        limit: Duration,
    ) -> Result<Grant> {
        match self.admit(actor, request.clone().wait_timeout(limit)).await {
            Err(Error::Timeout { .. }) => {
                let mut look = request;
                look.wait = Wait::Never;
                look.after_timeout = true;
                self.admit(actor, look).await
            }
            answered => answered,
        }
    }

    /// Runs an admission in a task of its own and waits for its answer.
    pub(super) async fn spawn_admission(&self, admission: Admission) -> Result<Grant> {
        self.answered_by(admission, |table, admission, answer| async move {
            table.drive(admission, None, answer).await;
        })
        .await
    }

    /// Runs `task` for `admission` in a task of its own and waits for the
    /// answer it sends. Whatever the task writes to etcd is its own to
    /// clean up: the caller dropping this future only closes the answer.
    pub(super) async fn answered_by<F, Fut>(&self, admission: Admission, task: F) -> Result<Grant>
    where
        F: FnOnce(Table, Admission, oneshot::Sender<Result<Grant>>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (ops, limit) = (admission.ops_needed(), self.inner.options.max_txn_ops);
        if ops > limit {
            return Err(Error::TxnTooLarge { ops, limit });
        }
        let (answer, answered) = oneshot::channel();
        tokio::spawn(task(self.clone(), admission, answer));
        answered.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                reason: "the admission task ended without an answer".into(),
            })
        })
    }

    /// One round: read at a revision, decide, and commit if free.
    async fn step(&self, admission: &Admission, at: Standing) -> Result<Round<Grant>> {
        let (place, queued) = (at.place, at.queued);
        let ops = admission.ops_needed();
        let limit = self.inner.options.max_txn_ops;
        let waiter = queued.map(|(id, _)| id);
        let layout = self.layout();
        let actor_key = layout.actor(admission.actor.id.0);
        let mut reads: Vec<TxnOp> = admission.ranges.iter().map(|r| prefix_get(r)).collect();
        // Where reorderings moved waiters: rarely anything at all.
        reads.push(prefix_get(&layout.all_moved()));
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
            reads.push(TxnOp::get(key.clone(), None));
        }
        // A new request whose ranges hold nothing at all conflicts with
        // nothing and is behind nobody: it commits in the same round trip
        // that would read them. If any range holds anything, the failed
        // branch is that read, and the request is decided from it.
        let uncontested = waiter.is_none() && admission.replaces.is_none();
        let sent = if uncontested {
            let (mut compares, writes) = self.commit_parts(admission, None, &[])?;
            compares.extend(admission.ranges.iter().map(|r| empty(r)));
            let txn = Txn::new().when(compares).and_then(writes).or_else(reads);
            // It may write: not sent again once it reached a member (a
            // round that ends unclear finds its own commit next round).
            self.admission_txn(txn, Some(admission.actor.lease), ops, limit)
                .await
        } else {
            self.read(reads)
                .await
                .map_err(|e| etcd_error(e, Some(admission.actor.lease), ops, limit))
        };
        let read = match sent {
            Err(e @ Error::Unavailable { .. }) => return Ok(Round::Unclear(e)),
            other => other?,
        };
        let revision = revision_of(&read);
        if uncontested && read.succeeded() {
            self.remember(HoldId(admission.hold), admission.record(), revision);
            return Ok(Round::Granted(admission.granted(revision)));
        }
        let mut ranges = ranges_of(&read);
        if let Some(at) = self.own_grant(admission, &ranges) {
            // An earlier round committed, and its answer was lost.
            self.remember(HoldId(admission.hold), admission.record(), at);
            return Ok(Round::Granted(admission.granted(at)));
        }
        // The extra reads, last first.
        let answered = ticket
            .is_some()
            .then(|| ranges.pop())
            .flatten()
            .and_then(|kvs| kvs.into_iter().next());
        let replaced = admission.replaces.is_some().then(|| ranges.pop()).flatten();
        let own_record = waiter.is_some().then(|| ranges.pop()).flatten();
        // Its own waiter record first: a wait taken over is another
        // task's, with everything about it, the ticket's mark included.
        if waiter.is_some() {
            let Some(record) = own_record.as_ref().and_then(|kvs| kvs.first()) else {
                // The waiter lease lapsed under a waiting request: its
                // place is gone, and committing against it would never
                // succeed.
                return Err(Error::Unavailable {
                    reason: "this request's place in the queue was lost (etcd was unreachable for longer than the queue lease); ask again".into(),
                });
            };
            if queued.is_some_and(|(_, written)| record.mod_revision() != written) {
                return Ok(Round::TakenOver);
            }
        }
        if let (Some(key), Some(answer)) = (ticket, answered) {
            if answer.value() != ABANDONED.as_bytes() {
                // Another request with this ticket was granted: the same
                // one, resumed through another table (`Table::resume`).
                // Its answer is that grant's; this request only ends.
                return Err(Error::Unavailable {
                    reason: "this request was answered through another server".into(),
                });
            }
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
            match replaced.and_then(|kvs| kvs.first().map(KeyValue::mod_revision)) {
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
        let actor_alive = ranges.pop().is_some_and(|kvs| !kvs.is_empty());
        if !actor_alive {
            return Err(Error::UnknownActor {
                actor: admission.actor.id.0.to_string(),
            });
        }
        let moved = moved_places(&ranges.pop().unwrap_or_default());
        let (mut holds, mut waiters) = decide::group(
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
        decide::apply_moves(&mut waiters, &moved);
        // A queued request stands where the read found it: a reordering
        // may have moved it since it last looked.
        let place = match waiter {
            Some(id) => waiters
                .iter()
                .find(|w| w.owner == Owner::Waiter(id))
                .and_then(Other::place)
                .unwrap_or(place),
            None => place,
        };
        let waiting = admission.wait != Wait::Never;
        let mut snapshot = Snapshot::new(holds, waiters);
        let in_the_way = snapshot.waiters_in_the_way(&admission.claim, place);
        // The fence owner's precedence needs the waiters in the way whole,
        // and the fences of the requester's lineage; a try-only request
        // blocked by a hold needs neither (a waiting one needs every edge
        // for the deadlock check).
        if !in_the_way.is_empty() && (waiting || !snapshot.hold_in_the_way(&admission.claim)) {
            let mut whole = HashMap::new();
            for id in in_the_way {
                // Gone since the read: it blocks nobody any more.
                if let Some(claim) = self.waiter_claim(id).await? {
                    whole.insert(id, claim);
                }
            }
            let fences = self.lineage_fences(&admission.actor).await?;
            snapshot = snapshot.with_whole(whole).with_fences(fences);
        }
        let verdict = snapshot.explain(&admission.claim, None, place);
        if let Some(Blocked::Path(other, key, queued)) = verdict.first {
            let mut edges = Edges {
                actor: admission.actor.id.0,
                name: admission.actor.name.clone(),
                queued: i64::MAX,
                ..Edges::default()
            };
            snapshot.wait_edges(admission.actor.id.0, &admission.claim, place, &mut edges);
            return Ok(Round::Blocked {
                refusal: busy(&admission.claim, &admission.actor.root, other, key, queued),
                revision,
                edges,
                watch: admission.watched(layout),
            });
        }
        let relied = verdict.relied;
        let waiters = snapshot.waiters();
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
                if let Some(cycle) = self
                    .cycle_by_granting(
                        (admission.actor.id.0, admission.actor.name.clone()),
                        &passed,
                    )
                    .await?
                {
                    // As in process: a reordering that leaves no cycle
                    // with the grant's edges, then the request looks again.
                    let owner = admission.actor.id.0;
                    let extra: Vec<(u64, u64)> = passed.iter().map(|&w| (w, owner)).collect();
                    return match self.reorder(None, &extra).await? {
                        Reordered::Moved { .. } | Reordered::Raced => Ok(Round::Raced),
                        Reordered::NoCycle | Reordered::Stuck => Err(Error::Deadlock { cycle }),
                    };
                }
            }
        }
        self.commit(admission, revision, waiter, &relied, ops, limit)
            .await
    }

    /// The live fences of `actor`'s lineage (each with its id and commit
    /// revision): the only fences that can let it pass a waiter.
    pub(super) async fn lineage_fences(&self, actor: &ActorRef) -> Result<Vec<Other>> {
        let reads: Vec<TxnOp> = actor
            .lineage
            .iter()
            .map(|&a| prefix_get(&self.layout().fences_of(a)))
            .collect();
        let read = self.read(reads).await.map_err(unavailable)?;
        let fences: Vec<KeyValue> = ranges_of(&read).into_iter().flatten().collect();
        Ok(others(&fences, Owner::Hold, KeyValue::create_revision)
            .into_iter()
            .map(|(_, fence)| fence)
            .collect())
    }

    pub(super) async fn waiter_claim(&self, id: u64) -> Result<Option<Claim>> {
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

    /// The revision a new request's own hold was committed at, if one of
    /// its earlier rounds committed (its index entries are in the ranges
    /// read; a hold id is used by one request only).
    fn own_grant(&self, admission: &Admission, ranges: &[Vec<KeyValue>]) -> Option<i64> {
        if admission.replaces.is_some() {
            return None;
        }
        let mine = Owner::Hold(admission.hold);
        ranges
            .iter()
            .flatten()
            .find(|kv| {
                self.layout()
                    .parse_entry(kv.key())
                    .is_some_and(|(_, _, owner)| owner == mine)
            })
            .map(KeyValue::create_revision)
    }

    /// The commit: compares on every range read (nothing new since
    /// `revision`), then [`Table::commit_parts`].
    pub(super) async fn commit(
        &self,
        admission: &Admission,
        revision: i64,
        waiter: Option<u64>,
        relied: &[(u64, i64)],
        ops: usize,
        limit: usize,
    ) -> Result<Round<Grant>> {
        let (mut compares, writes) = self.commit_parts(admission, waiter, relied)?;
        compares.extend(
            admission
                .ranges
                .iter()
                .map(|r| unchanged_since(r, revision)),
        );
        // The queue order judged: no waiter moved since.
        compares.push(unchanged_since(&self.layout().all_moved(), revision));
        let txn = Txn::new().when(compares).and_then(writes);
        let done = match self
            .admission_txn(txn, Some(admission.actor.lease), ops, limit)
            .await
        {
            Err(e @ Error::Unavailable { .. }) => return Ok(Round::Unclear(e)),
            other => other?,
        };
        if !done.succeeded() {
            return Ok(Round::Raced);
        }
        let revision = revision_of(&done);
        self.remember(HoldId(admission.hold), admission.record(), revision);
        Ok(Round::Granted(admission.granted(revision)))
    }

    /// What every commit of a grant compares and writes besides its
    /// ranges: compares on the actor, on each fence relied on, on the
    /// widened hold and on the ticket not given up; then the hold's record,
    /// its index entries and (for a fence) its owner index, the ticket's
    /// answer, the count, and the own waiter's keys deleted.
    fn commit_parts(
        &self,
        admission: &Admission,
        waiter: Option<u64>,
        relied: &[(u64, i64)],
    ) -> Result<(Vec<Compare>, Vec<TxnOp>)> {
        let layout = self.layout();
        let actor = &admission.actor;
        let mut compares = vec![still(layout.actor(actor.id.0), actor.revision)];
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
            writes.push(TxnOp::delete(layout.moved(id), None));
            for (key, _) in &admission.keys {
                writes.push(TxnOp::delete(layout.entry(key, Owner::Waiter(id)), None));
            }
        }
        Ok((compares, writes))
    }

    /// Queues the request: its waiter record and index entries, on this
    /// table's waiter lease, while the actor lives. Returns the waiter's id
    /// and its revision (its place among equal priorities).
    pub(super) async fn enqueue(
        &self,
        admission: &Admission,
        edges: Option<&Edges>,
        moved_to: Option<Moved>,
        ops: usize,
        limit: usize,
    ) -> Result<(u64, i64)> {
        let layout = self.layout();
        let actor = &admission.actor;
        let id = self.next_id()?;
        let waiter_lease = self.waiter_lease().await?;
        let lease = with_lease(waiter_lease);
        let record = to_json(&admission.record())?;
        let mut writes = vec![TxnOp::put(layout.waiter(id), record.clone(), lease.clone())];
        writes.extend(admission.entry_puts(layout, Owner::Waiter(id), waiter_lease)?);
        if let Some(edges) = edges {
            writes.push(TxnOp::put(layout.edges(id), to_json(edges)?, lease.clone()));
        }
        if let Some(to) = moved_to {
            writes.push(TxnOp::put(layout.moved(id), to_json(&to)?, lease.clone()));
        }
        writes.push(self.count(Counter::Waited));
        let txn = Txn::new()
            .when([still(layout.actor(actor.id.0), actor.revision)])
            .and_then(writes);
        let done = self
            .queue_txn(
                txn,
                waiter_lease,
                (id, record),
                &admission.keys,
                (ops, limit),
            )
            .await?;
        if !done.succeeded() {
            return Err(Error::UnknownActor {
                actor: actor.id.0.to_string(),
            });
        }
        Ok((id, revision_of(&done)))
    }

    /// Runs a transaction that puts waiter `id`'s keys (`keys`) on this
    /// table's `waiter_lease`, its record as `value`. A lapsed lease is
    /// this table's, not the client's. An answer lost may hide a write
    /// that landed: its keys, on a lease this table renews, would block
    /// their paths while it lives, so a removal that compares on that
    /// value and lease follows (harmless if nothing landed, or if the wait
    /// was taken over since: every write of a record is its own value).
    pub(super) async fn queue_txn(
        &self,
        txn: Txn,
        waiter_lease: LeaseId,
        (id, value): (u64, Vec<u8>),
        keys: &[(Key, Mode)],
        (ops, limit): (usize, usize),
    ) -> Result<TxnResponse> {
        match self
            .admission_txn(txn, Some(waiter_lease), ops, limit)
            .await
        {
            Err(Error::UnknownLease { .. }) => {
                let mut slot = self.inner.waiter_lease.lock().await;
                if *slot == Some(waiter_lease) {
                    *slot = None;
                }
                Err(Error::Unavailable {
                    reason: "this server's queue lease in etcd lapsed; ask again".into(),
                })
            }
            Err(e @ Error::Unavailable { .. }) => {
                let keys = keys.to_vec();
                self.until_done(move |table| {
                    let (keys, mine) = (keys.clone(), Mine::Value(value.clone()));
                    async move { table.dequeue(id, mine, &keys, None).await }
                })
                .await;
                Err(e)
            }
            other => other,
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
        // The mark is stored only while the count it was allowed by still
        // holds; another ticket stored meanwhile (through any server) has
        // it counted again. Each round that fails does so because another
        // ticket was stored, so the rounds are bounded by the bound.
        let mut rounds = 0usize;
        let done = loop {
            let counted = self.ticket_room(actor, ticket).await?;
            let txn = Txn::new()
                .when([
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                    self.tickets_unchanged(actor, counted),
                ])
                .and_then([TxnOp::put(key.clone(), ABANDONED, with_lease(actor.lease))])
                .or_else([TxnOp::get(key.clone(), None)]);
            let done = self
                .txn(txn)
                .await
                .map_err(|e| etcd_error(e, Some(actor.lease), 0, 0))?;
            let present = ranges_of(&done).into_iter().flatten().next().is_some();
            if done.succeeded() || present {
                break done;
            }
            rounds += 1;
            if rounds > 4 * crate::tickets::MAX_TICKETS_PER_ACTOR {
                return Err(Error::Unavailable {
                    reason: "the actor's tickets kept changing while one was given up; try again"
                        .into(),
                });
            }
        };
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
}

impl Table {
    /// Whether `actor` holds an exclusive call on `target` (a resolved
    /// file): the reservation a write made outside writ must be made under
    /// (SPEC §8, `history.snapshot` and `history.record`). One read of the
    /// target's conflict ranges.
    pub(crate) async fn holds_exclusive_call(
        &self,
        actor: &ActorRef,
        target: Target,
    ) -> Result<bool> {
        let keys = keys_of(actor, &[target], self.case())?;
        let layout = self.layout();
        let ranges = layout.conflict_ranges(keys.iter().map(|(k, _)| k));
        let read = self
            .read(ranges.iter().map(|r| prefix_get(r)).collect())
            .await
            .map_err(unavailable)?;
        let (holds, _) = decide::group(
            layout,
            ranges_of(&read)
                .iter()
                .flatten()
                .map(|kv| (kv.key(), kv.value(), kv.create_revision())),
        );
        Ok(holds.iter().any(|hold| {
            hold.meta.owner == actor.id.0
                && hold.claim.kind == HoldKind::Call
                && hold.claim.keys.iter().any(|(held, mode)| {
                    *mode == Mode::Exclusive
                        && keys
                            .iter()
                            .any(|(key, _)| crate::core::key::overlaps(held, key))
                })
        }))
    }
}
