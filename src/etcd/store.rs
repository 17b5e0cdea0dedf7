//! The lowest layer: the connection to etcd, the calls every other part makes
//! through it (bounded, sent again when they reached no member), and the
//! small helpers that read and write records and build compares.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use serde::Serialize;

use crate::error::{Error, Result};

use super::decide::ClaimRecord;
use super::layout::{Layout, prefix_end};
use super::options::TableOptions;

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

/// One process's handle on a session's table in etcd.
///
/// Cheap to clone (one gRPC channel per etcd member, shared).
#[derive(Clone)]
pub struct Table {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("session", &self.inner.session)
            .field("instance", &self.inner.instance)
            .finish_non_exhaustive()
    }
}

/// One client per etcd member, and the member calls go to now.
///
/// etcd's own client balances each call over every endpoint, so a member
/// that is paused or cut off (its connections still open, nothing answered)
/// keeps getting its share of the calls, each lost for a whole call bound.
/// Here every call goes to one member until a call to it fails the way an
/// unreachable member fails ([`read_again`]); then calls move on to the
/// next, and come back to it only after every other member has failed too.
pub(super) struct Members {
    clients: Vec<Client>,
    current: AtomicUsize,
}

impl Members {
    async fn connect<E: AsRef<str>>(endpoints: &[E], options: ConnectOptions) -> Result<Members> {
        if endpoints.is_empty() {
            return Err(Error::Protocol {
                kind: crate::ProtocolError::InvalidParams,
                detail: "no etcd endpoint given".into(),
            });
        }
        let mut clients = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            // Connecting is lazy: a member that is down now costs nothing
            // until a call is sent to it.
            let client = Client::connect([endpoint.as_ref()], Some(options.clone()))
                .await
                .map_err(unavailable)?;
            clients.push(client);
        }
        Ok(Members {
            clients,
            current: AtomicUsize::new(0),
        })
    }

    /// The member to call now, and its client.
    fn pick(&self) -> (usize, Client) {
        // Relaxed: which member is asked orders nothing else; a stale pick
        // costs one failed call, after which the caller moves on.
        let member = self.current.load(Ordering::Relaxed) % self.clients.len();
        (member, self.clients[member].clone())
    }

    /// A call to `member` failed as an unreachable member's do: the calls
    /// after it go to the next member. Only the first of several calls
    /// that failed on one member moves the choice on, so a burst of them
    /// does not skip the members that answer.
    fn shun(&self, member: usize) {
        let next = (member + 1) % self.clients.len();
        // Relaxed: as in `pick`.
        let _ = self
            .current
            .compare_exchange(member, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Sends `call` to the member of the moment, moving on from it if the
    /// call failed as an unreachable member's do.
    pub(super) async fn call<T, Fut>(&self, call: impl FnOnce(Client) -> Fut) -> EtcdResult<T>
    where
        Fut: std::future::Future<Output = EtcdResult<T>>,
    {
        let (member, client) = self.pick();
        let answer = call(client).await;
        if let Err(e) = &answer
            && read_again(e)
        {
            self.shun(member);
        }
        answer
    }
}

pub(super) struct Inner {
    pub(super) members: Members,
    pub(super) layout: Layout,
    pub(super) session: String,
    pub(super) options: TableOptions,
    /// This table's number in the session (from the `i` counter): the high
    /// half of every id it makes, so ids from different tables never meet
    /// and making one needs no shared counter.
    pub(super) instance: u64,
    pub(super) next: AtomicU64,
    /// Calls sent again by [`Table::resend_if`] (for `/metrics`).
    pub(super) resends: AtomicU64,
    /// Calls made to etcd, each try counted ([`Table::calls`]).
    pub(super) calls: AtomicU64,
    /// The lease of this table's waiting requests (granted when the first
    /// one queues, renewed in the background while the table lives).
    pub(super) waiter_lease: tokio::sync::Mutex<Option<LeaseId>>,
    /// The holds this table granted and has not released: each one's
    /// record and the revision it was last written at, so that releasing
    /// it needs no read first (`holds.rs`).
    pub(super) granted: parking_lot::Mutex<HashMap<u64, (ClaimRecord, i64)>>,
}

/// An etcd failure as writ's error: a lease etcd does not know is
/// `UnknownLease`, a transaction over etcd's limit is `TxnTooLarge`,
/// anything else `Unavailable`.
pub(super) fn etcd_error(
    e: etcd_client::Error,
    lease: Option<LeaseId>,
    ops: usize,
    limit: usize,
) -> Error {
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

pub(super) type EtcdResult<T> = std::result::Result<T, etcd_client::Error>;

/// Whether a failed call never reached etcd (no connection to its member).
pub(super) fn unsent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable && status.message().contains("connect")
        }
        _ => false,
    }
}

/// Whether a call failed on its timeout (`TableOptions::call_timeout`).
pub(super) fn timed_out(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("Timeout expired"),
        _ => false,
    }
}

/// Whether a read that failed may be sent again: it changes nothing, so
/// whatever became of it (no connection, its timeout, a connection found
/// dead by its keep-alive or closed under it, a leader change, etcd's own
/// "request timed out" while it had no leader), asking another member is
/// safe. A connection that broke under the call (its member died) comes
/// as code `Unknown` with the HTTP/2 error; etcd's own refusals have codes
/// of their own.
pub(super) fn read_again(e: &etcd_client::Error) -> bool {
    unsent(e)
        || timed_out(e)
        || matches!(e, etcd_client::Error::GRpcStatus(status)
        if matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Unknown
        ))
}

pub(super) fn unavailable(e: etcd_client::Error) -> Error {
    etcd_error(e, None, 0, 0)
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The session name becomes part of every key: one path component of
/// printable ASCII.
pub(super) fn check_session(session: &str) -> Result<()> {
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
pub(super) fn ranges_of(response: &TxnResponse) -> Vec<Vec<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .map(|op| match op {
            TxnOpResponse::Get(mut get) => get.take_kvs(),
            _ => Vec::new(),
        })
        .collect()
}

pub(super) fn revision_of(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

/// The id at the end of a record's key (`…/<16 hex digits>`).
pub(super) fn id_in(key: &[u8]) -> Option<u64> {
    let hex = key.rsplit(|&b| b == b'/').next()?;
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

pub(super) fn prefix_get(prefix: &[u8]) -> TxnOp {
    TxnOp::get(prefix.to_vec(), Some(GetOptions::new().with_prefix()))
}

/// Nothing in `prefix` was created or changed after `revision`.
pub(super) fn unchanged_since(prefix: &[u8], revision: i64) -> Compare {
    Compare::mod_revision(prefix.to_vec(), CompareOp::Less, revision + 1)
        .with_range(prefix_end(prefix))
}

/// Nothing at all is in `prefix` (etcd compares an empty range as one
/// key that does not exist, whose create revision is 0).
pub(super) fn empty(prefix: &[u8]) -> Compare {
    Compare::create_revision(prefix.to_vec(), CompareOp::Equal, 0).with_range(prefix_end(prefix))
}

/// The key still exists as it was created at `revision`.
pub(super) fn still(key: Vec<u8>, revision: i64) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, revision)
}

pub(super) fn with_lease(lease: LeaseId) -> Option<PutOptions> {
    Some(PutOptions::new().with_lease(lease.0))
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Unavailable {
        reason: format!("could not encode a record: {e}"),
    })
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
        let members = Members::connect(endpoints, connect).await?;
        let layout = Layout::new(session);
        let instance = Self::claim_instance(&members, &layout).await?;
        let table = Table {
            inner: Arc::new(Inner {
                members,
                layout,
                session: session.to_string(),
                options,
                instance,
                next: AtomicU64::new(1),
                resends: AtomicU64::new(0),
                calls: AtomicU64::new(0),
                waiter_lease: tokio::sync::Mutex::new(None),
                granted: parking_lot::Mutex::new(HashMap::new()),
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
    pub(super) fn case(&self) -> crate::CaseMode {
        if self.inner.options.fold_case {
            crate::CaseMode::Insensitive
        } else {
            crate::CaseMode::Sensitive
        }
    }

    /// The next number of the session's instance counter (compare-and-set).
    ///
    /// A round that fails on its way (no member reached, or its call
    /// timeout) is asked again, eight rounds at most: a claim that landed
    /// unseen only leaves its number unused, since the next round claims
    /// the one after it.
    pub(super) async fn claim_instance(members: &Members, layout: &Layout) -> Result<u64> {
        let key = layout.instances();
        let key = key.as_slice();
        let mut failed = 0;
        loop {
            match members
                .call(|mut client| async move { Self::claim_instance_once(&mut client, key).await })
                .await
            {
                Err(e) if failed < 7 && (unsent(&e) || timed_out(&e)) => failed += 1,
                Err(e) => return Err(unavailable(e)),
                Ok(Some(next)) if next >= 1 << 31 => {
                    return Err(Error::Unavailable {
                        reason: "the session has used up its instance numbers".into(),
                    });
                }
                Ok(Some(next)) => return Ok(next),
                Ok(None) => {}
            }
        }
    }

    /// One round of [`Table::claim_instance`]: the number claimed, or
    /// `None` if another table claimed one meanwhile.
    async fn claim_instance_once(client: &mut Client, key: &[u8]) -> EtcdResult<Option<u64>> {
        let got = client.get(key.to_vec(), None).await?;
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
            // Ids would overlap: claim nothing; the caller refuses it.
            return Ok(Some(next));
        }
        let txn = Txn::new()
            .when([Compare::version(key.to_vec(), CompareOp::Equal, version)])
            .and_then([TxnOp::put(key.to_vec(), next.to_string(), None)]);
        let claimed = client.txn(txn).await?.succeeded();
        Ok(claimed.then_some(next))
    }

    /// etcd's answer to a call. A call that could not reach its member
    /// sent nothing, so it is sent again, to the next member ([`Members`]),
    /// up to eight times in all (a refused connection fails at once). A
    /// call that reached a member and failed is not: it may have committed.
    pub(super) async fn resend<T, Fut>(&self, call: impl Fn(Client) -> Fut) -> EtcdResult<T>
    where
        Fut: std::future::Future<Output = EtcdResult<T>>,
    {
        self.resend_if(unsent, call).await
    }

    pub(super) async fn resend_if<T, Fut>(
        &self,
        again: fn(&etcd_client::Error) -> bool,
        call: impl Fn(Client) -> Fut,
    ) -> EtcdResult<T>
    where
        Fut: std::future::Future<Output = EtcdResult<T>>,
    {
        let mut tries = 1;
        let begun = tokio::time::Instant::now();
        loop {
            let started = tokio::time::Instant::now();
            match self.call_once(&call).await {
                // Eight tries; while members answer (an election on a
                // loaded machine can outlast eight quick failures), as many
                // as fit in three call bounds. With etcd down, no longer.
                Err(e)
                    if again(&e)
                        && (tries < 8
                            || (!unsent(&e)
                                && begun.elapsed() < self.inner.options.call_timeout * 3)) =>
                {
                    // A failure at once (a refused connection, no leader
                    // while the members elect one) is asked again after a
                    // pause that doubles, so the eight tries span an
                    // election (about 3 s in all) instead of a few ms.
                    if started.elapsed() < Duration::from_millis(50) {
                        let pause = Duration::from_millis(50 << (tries - 1).min(4));
                        tokio::time::sleep(pause).await;
                    }
                    tries += 1;
                    // Relaxed: a count for the metrics, ordering nothing.
                    self.inner.resends.fetch_add(1, Ordering::Relaxed);
                }
                answer => return answer,
            }
        }
    }

    /// One call, to the member of the moment ([`Members::call`]), counted.
    pub(super) async fn call_once<T, Fut>(&self, call: impl FnOnce(Client) -> Fut) -> EtcdResult<T>
    where
        Fut: std::future::Future<Output = EtcdResult<T>>,
    {
        // Relaxed: a count for the metrics, ordering nothing.
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.members.call(call).await
    }

    /// How many calls this table has made to etcd since it connected,
    /// each try of a call sent again counted: its round trips. An
    /// uncontested admission is one, its release one more.
    ///
    /// ```no_run
    /// # async fn demo(table: writ::etcd::Table, actor: writ::etcd::ActorRef) -> Result<(), writ::Error> {
    /// let before = table.calls();
    /// let grant = table.admit(&actor, writ::etcd::AdmitRequest::call(["/ws/a.rs"])).await?;
    /// println!("granted in {} round trips", table.calls() - before);
    /// # table.release(grant.hold()).await }
    /// ```
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
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

    /// A transaction whose second run, after a first that landed unseen,
    /// answers as the first would have (reads only, or a put-if-absent of
    /// one value that reads the value back): sent again as a read is
    /// ([`read_again`]), most likely to another member.
    pub(crate) async fn idempotent_txn(&self, txn: Txn) -> EtcdResult<TxnResponse> {
        self.resend_if(read_again, |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
    }

    /// A transaction of reads only (so at one revision).
    pub(crate) async fn read(&self, reads: Vec<TxnOp>) -> EtcdResult<TxnResponse> {
        self.idempotent_txn(Txn::new().and_then(reads)).await
    }

    /// A get, sent again while it reached no member, timed out or found
    /// its connection dead ([`read_again`]: a read changes nothing, so
    /// asking another member is always safe; a paused member answers
    /// nothing).
    pub(crate) async fn get(
        &self,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> EtcdResult<etcd_client::GetResponse> {
        self.resend_if(read_again, |mut client| {
            let (key, options) = (key.clone(), options.clone());
            async move { client.get(key, options).await }
        })
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

    pub(super) fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// Runs one transaction of an admission of `ops` operations: etcd's
    /// refusal of a lapsed `lease` or of more than `limit` operations
    /// becomes writ's error for it.
    pub(super) async fn admission_txn(
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
    pub(super) fn next_id(&self) -> Result<u64> {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        if n >= 1 << 32 {
            return Err(Error::Unavailable {
                reason: "this table has used up its ids; connect again".into(),
            });
        }
        Ok(self.inner.instance << 32 | n)
    }

    /// The session's name.
    pub fn session(&self) -> &str {
        &self.inner.session
    }

    /// Reads one record and its create revision; a missing or unreadable
    /// record is `unknown()` (a key under the session's prefix that does not
    /// decode was not written by a table).
    pub(super) async fn record<T: serde::de::DeserializeOwned>(
        &self,
        key: Vec<u8>,
        unknown: impl Fn() -> Error,
    ) -> Result<(T, i64)> {
        let got = self.get(key, None).await.map_err(unavailable)?;
        let kv = got.kvs().first().ok_or_else(&unknown)?;
        let record = serde_json::from_slice(kv.value()).map_err(|_| unknown())?;
        Ok((record, kv.create_revision()))
    }

    /// Reads whole prefixes in one transaction, so at one revision.
    pub(super) async fn read_prefixes<const N: usize>(
        &self,
        prefixes: [Vec<u8>; N],
    ) -> Result<(i64, [Vec<KeyValue>; N])> {
        let reads: Vec<TxnOp> = prefixes.iter().map(|p| prefix_get(p)).collect();
        let read = self.read(reads).await.map_err(unavailable)?;
        let mut ranges = ranges_of(&read).into_iter();
        let found = std::array::from_fn(|_| ranges.next().unwrap_or_default());
        Ok((revision_of(&read), found))
    }

    /// Runs a clean-up that must happen: once now, and if etcd did not
    /// answer, again in a task of its own, backing off, until it does (or
    /// this process ends, and with it the lease of what it would remove).
    pub(super) async fn until_done<F, Fut>(&self, op: F)
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
}
