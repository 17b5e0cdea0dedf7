//! The JSON-RPC methods: each parses its parameters into the types the
//! in-process API takes and calls that API. The server adds no semantics.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use super::Options;
use super::auth::{self, Caller};
use super::lease::{ActorSlot, Guard, HoldSlot, Registry, Ticket};
use crate::wire::{self, PROTOCOL_VERSION};
use crate::{Actor, Error, Grant, ProtocolError, Result, Scheduler, Target};

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
pub(crate) use etcd::{EtcdBackend, EtcdOptions};

/// The server's state, shared by every request.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) sched: Scheduler,
    /// The canonical workspace root; every grant root lies inside it.
    pub(crate) root: PathBuf,
    /// Read-only roots added to every grant (from `--config`).
    read_roots: Vec<PathBuf>,
    /// The session token.
    token: String,
    /// Random per run: wire handles carry it, so a handle from an earlier
    /// run of the server is recognized as such.
    instance: String,
    pub(crate) ttl: Duration,
    pub(crate) call_wait: Duration,
    /// `--mcp-idle`: how long an MCP session without a stream, or a named
    /// agent without a session, outlives its last request.
    pub(crate) mcp_idle: Duration,
    pub(crate) max_body: usize,
    /// `--max-targets`: the most targets one request may name.
    pub(crate) max_targets: usize,
    /// The header timeout and connection cap of the listeners.
    pub(crate) limits: super::Limits,
    /// The tools `/mcp` serves unless a session asks for a set.
    #[cfg(feature = "mcp")]
    pub(crate) mcp_tools: crate::mcp::ToolSet,
    history_dir: Option<PathBuf>,
    /// Only held for map lookups and inserts, never across an await or a
    /// scheduler wait; objects leaving it are dropped after it is released.
    reg: Mutex<Registry>,
    /// Pokes the reaper when a lease appears or a long-poll ends.
    poke: Arc<Notify>,
    /// The counts `/metrics` shows beside the table's own.
    pub(crate) metrics: super::observe::Metrics,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
    /// The session's table in etcd (`writ serve --etcd`): every method that
    /// touches the table goes there, and `sched` stays empty.
    #[cfg(feature = "etcd")]
    etcd: Option<EtcdBackend>,
}

/// How many lines of a file a refused `files.append` with `current: true`
/// carries.
pub(crate) const TAIL_LINES: usize = 20;

/// The last [`TAIL_LINES`] lines of a `files.read` result, with `lines`
/// saying where they start; the result as it is when it cannot be cut.
fn tail(mut read: Value) -> Option<Value> {
    let bytes = read.get("content").map(wire::content_from_wire)?.ok()?;
    // Where each line starts; a final newline opens no further line.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            memchr::memchr_iter(b'\n', &bytes)
                .filter(|&i| i + 1 < bytes.len())
                .map(|i| i + 1),
        )
        .collect();
    let first = starts.len().saturating_sub(TAIL_LINES);
    let from = starts.get(first).copied().unwrap_or(0);
    if let Value::Object(map) = &mut read {
        map.insert("content".into(), wire::content_to_wire(&bytes[from..]));
        map.insert("lines".into(), json!([first, null]));
    }
    Some(read)
}

fn invalid(detail: impl Into<String>) -> Error {
    Error::Protocol {
        kind: ProtocolError::InvalidParams,
        detail: detail.into(),
    }
}

fn unauthorized(detail: &str) -> Error {
    Error::Protocol {
        kind: ProtocolError::Unauthorized,
        detail: detail.to_string(),
    }
}

fn unknown_token() -> Error {
    unauthorized("unknown token")
}

/// What a bearer token claims to be ([`App::claim`]).
pub(crate) enum TokenClaim<'t> {
    /// The session token, and it is the right one.
    Session,
    /// An actor's token: its wire number and the secret to check.
    Actor { n: u64, secret: &'t str },
}

fn params<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| invalid(format!("invalid params: {e}")))
}

/// A ticket is a client's name for one request: this long at most.
pub(crate) const MAX_TICKET_LEN: usize = 128;

/// Tickets one actor may have live at once (waiting, granted or given up).
pub(crate) const MAX_TICKETS_PER_ACTOR: usize = 64;

/// Requests naming more targets than this are admitted off the async
/// workers: their cost grows with the request.
const HEAVY_TARGETS: usize = 64;

/// The targets of a request, at most `max` of them (`--max-targets`).
fn targets(value: &Value, max: usize) -> Result<Vec<Target>> {
    if let Value::Array(list) = value {
        if list.len() > max {
            return Err(invalid(format!(
                "the request names {} targets, more than the limit of {max} (--max-targets); \
                 nothing was admitted: reserve a folder as a tree instead of its files",
                list.len()
            )));
        }
    }
    wire::targets_from_wire(value).map_err(invalid)
}

/// A ticket claimed for one request: while it lives the ticket is
/// `Waiting`; dropped before the grant (an error, a timeout, a client that
/// went away) it frees the ticket.
struct TicketClaim {
    app: Arc<App>,
    key: (u64, String),
    granted: bool,
}

impl Drop for TicketClaim {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut reg = self.app.reg.lock();
        if matches!(
            reg.tickets.get(&self.key),
            Some((Ticket::Waiting | Ticket::Abandoned, _))
        ) {
            reg.tickets.remove(&self.key);
        }
    }
}

/// An actor's file tools, inside `call` when a file method waited for one.
fn within<'a>(actor: &'a Actor, call: Option<&'a mut crate::Reservation>) -> crate::Files<'a> {
    match call {
        Some(call) => actor.files().within(call),
        None => actor.files(),
    }
}

fn timeout(ms: Option<u64>) -> Option<Duration> {
    ms.map(Duration::from_millis)
}

/// Keeps a lease from lapsing while a long-poll is open; its end renews it.
struct OpenPoll {
    app: Arc<App>,
    lease: u64,
}

impl Drop for OpenPoll {
    fn drop(&mut self) {
        {
            let mut reg = self.app.reg.lock();
            if let Some(lease) = reg.leases.get_mut(&self.lease) {
                lease.polls = lease.polls.saturating_sub(1);
                lease.deadline = Instant::now() + self.app.ttl;
            }
        }
        self.app.poke.notify_one();
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateParams {
    name: String,
    parent: Option<String>,
    grant: Value,
    lease: Option<String>,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActorParams {
    actor: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmitParams {
    actor: String,
    targets: Value,
    wait: Option<bool>,
    timeout_ms: Option<u64>,
    #[serde(default)]
    priority: i32,
    label: Option<String>,
    ticket: Option<String>,
    /// Ask again for the request `ticket` named (see PROTOCOL.md, Tickets).
    #[serde(default)]
    resume: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldParams {
    hold: Option<String>,
    actor: Option<String>,
    ticket: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldTargetsParams {
    hold: String,
    targets: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseParams {
    lease: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DumpParams {
    format: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadParams {
    actor: String,
    path: String,
    lines: Option<(usize, Option<usize>)>,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteParams {
    actor: String,
    path: String,
    content: Value,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceParams {
    actor: String,
    path: String,
    old: String,
    new: String,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathParams {
    actor: String,
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameParams {
    actor: String,
    from: String,
    to: String,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteParams {
    actor: String,
    path: String,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnParams {
    actor: String,
    turn: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RewindParams {
    turn: String,
    #[serde(default)]
    merge: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanTask {
    name: String,
    writes: Value,
    #[serde(default)]
    depends_on: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanParams {
    tasks: Vec<PlanTask>,
}

impl App {
    pub(crate) fn new(
        options: &Options,
        root: PathBuf,
        token: String,
        stop_tx: watch::Sender<bool>,
        stop_rx: watch::Receiver<bool>,
    ) -> Result<App> {
        let history_dir = options.config.history_dir.clone();
        if let Some(dir) = &history_dir {
            let resolved = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            if resolved.starts_with(&root) {
                return Err(Error::History {
                    reason: format!(
                        "the history folder {} lies inside the workspace {}; choose one outside it (--history-dir)",
                        dir.display(),
                        root.display()
                    ),
                });
            }
        }
        let read_roots = options
            .read_roots
            .iter()
            .map(|r| super::discovery::canonical_dir(r))
            .collect::<Result<Vec<_>>>()?;
        Ok(App {
            sched: Scheduler::new(options.config.clone()),
            root,
            read_roots,
            token,
            instance: auth::random_hex(4)?,
            ttl: options.lease_ttl,
            call_wait: options.call_wait,
            mcp_idle: options.mcp_idle,
            max_body: options.max_body,
            max_targets: options.limits.max_targets,
            limits: options.limits,
            #[cfg(feature = "mcp")]
            mcp_tools: options.mcp_tools,
            history_dir,
            reg: Mutex::new(Registry::default()),
            poke: Arc::new(Notify::new()),
            metrics: super::observe::Metrics::default(),
            stop_tx,
            stop_rx,
            #[cfg(feature = "etcd")]
            etcd: None,
        })
    }

    /// Serves the session's table in etcd instead of the in-process one.
    /// Handles then name the table's ids, valid on every server of the
    /// session.
    #[cfg(feature = "etcd")]
    pub(crate) fn with_etcd(mut self, backend: EtcdBackend) -> App {
        self.instance = "etcd".into();
        self.etcd = Some(backend);
        self
    }

    /// Whether the table is in etcd (routes the etcd table cannot serve,
    /// `/mcp` and `/events`, are refused).
    pub(crate) fn in_etcd(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.etcd.is_some();
        #[cfg(not(feature = "etcd"))]
        false
    }

    /// Who is calling, as [`App::authenticate`]; with the table in etcd,
    /// actor tokens are looked up there.
    pub(crate) async fn authenticate_any(&self, token: Option<&str>) -> Result<Caller> {
        #[cfg(feature = "etcd")]
        if let Some(backend) = &self.etcd {
            return self.etcd_authenticate(backend, token).await;
        }
        self.authenticate(token)
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        self.reg.lock()
    }

    /// What `/metrics` reads from the session's table now: on etcd, the
    /// session's counters and live records (every server's work), read in
    /// one etcd revision.
    pub(crate) async fn table_reading(&self) -> Result<super::observe::TableReading> {
        #[cfg(feature = "etcd")]
        if let Some(backend) = &self.etcd {
            return backend.table_reading().await;
        }
        Ok(super::observe::TableReading::of(&self.sched.dump()))
    }

    pub(crate) fn poke(&self) -> Arc<Notify> {
        self.poke.clone()
    }

    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop_rx.clone()
    }

    pub(crate) fn handle(&self, prefix: char, n: u64) -> String {
        format!("{prefix}-{}-{n}", self.instance)
    }

    /// A wire handle's number. A handle of another run of the server means
    /// that run's leases are gone: `unknown_lease`.
    fn parse(&self, prefix: char, what: &str, handle: &str) -> Result<u64> {
        let mut parts = handle.splitn(3, '-');
        let (Some(p), Some(instance), Some(n)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(invalid(format!("'{handle}' is not {what} handle")));
        };
        let n: u64 = match (p.len() == 1 && p.starts_with(prefix), n.parse()) {
            (true, Ok(n)) => n,
            _ => return Err(invalid(format!("'{handle}' is not {what} handle"))),
        };
        if instance != self.instance {
            return Err(Error::UnknownLease {
                lease: handle.to_string(),
            });
        }
        Ok(n)
    }

    /// Who is calling, from the `Authorization` header. An actor token
    /// renews its actor's lease.
    pub(crate) fn authenticate(&self, token: Option<&str>) -> Result<Caller> {
        let (n, secret) = match self.claim(token)? {
            TokenClaim::Session => return Ok(Caller::Session),
            TokenClaim::Actor { n, secret } => (n, secret),
        };
        let mut reg = self.reg.lock();
        let slot = reg.actors.get(&n).ok_or_else(unknown_token)?;
        if !auth::same_secret(secret, &slot.secret) {
            return Err(unknown_token());
        }
        let lease = slot.lease;
        reg.renew(lease, self.ttl);
        Ok(Caller::Actor(n))
    }

    /// What a bearer token claims to be, before anyone looks it up: the
    /// session token (checked here), or `<actor handle>.<secret>`. One
    /// reading of the token for every backend.
    pub(crate) fn claim<'t>(&self, token: Option<&'t str>) -> Result<TokenClaim<'t>> {
        let Some(token) = token else {
            return Err(unauthorized(
                "no token: send `Authorization: Bearer <token>` (the session token is in the discovery file)",
            ));
        };
        if auth::same_secret(token, &self.token) {
            return Ok(TokenClaim::Session);
        }
        let (handle, secret) = token.split_once('.').ok_or_else(unknown_token)?;
        let n = self
            .parse('a', "an actor", handle)
            .map_err(|_| unknown_token())?;
        Ok(TokenClaim::Actor { n, secret })
    }

    fn may(&self, caller: &Caller, lineage: &[u64], what: &str) -> Result<()> {
        match caller {
            Caller::Session => Ok(()),
            Caller::Actor(n) if lineage.contains(n) => Ok(()),
            Caller::Actor(n) => Err(Error::Forbidden {
                reason: format!(
                    "the token of {} acts only for that actor and its descendants, not for {what}",
                    self.handle('a', *n)
                ),
            }),
        }
    }

    fn session_only(&self, caller: &Caller, what: &str) -> Result<()> {
        match caller {
            Caller::Session => Ok(()),
            Caller::Actor(_) => Err(Error::Forbidden {
                reason: format!("{what} needs the session token"),
            }),
        }
    }

    /// The actor a request acts for, after the caller's rights are checked;
    /// renews its lease.
    fn actor_for(&self, caller: &Caller, handle: &str) -> Result<(Arc<Actor>, u64, Arc<[u64]>)> {
        let n = self.parse('a', "an actor", handle)?;
        let mut reg = self.reg.lock();
        let slot = reg.actors.get(&n).ok_or_else(|| Error::UnknownActor {
            actor: handle.to_string(),
        })?;
        self.may(caller, &slot.lineage, handle)?;
        let found = (slot.actor.clone(), slot.lease, slot.lineage.clone());
        reg.renew(found.1, self.ttl);
        Ok(found)
    }

    fn lease_of(&self, caller: &Caller, handle: &str) -> Result<u64> {
        let lease = self.parse('l', "a lease", handle)?;
        let reg = self.reg.lock();
        if !reg.leases.contains_key(&lease) {
            return Err(Error::UnknownLease {
                lease: handle.to_string(),
            });
        }
        if let Caller::Actor(n) = caller {
            if reg.actors.get(n).map(|a| a.lease) != Some(lease) {
                return Err(Error::Forbidden {
                    reason: format!("this token's actor does not belong to lease {handle}"),
                });
            }
        }
        Ok(lease)
    }

    /// Drops a lease exactly as dropping its actors and guards in process.
    pub(crate) fn drop_lease(&self, lease: u64) -> Option<(usize, usize)> {
        let dropped = self.reg.lock().remove_lease(lease)?;
        Some(dropped.release())
    }

    /// Drops everything (shutdown).
    pub(crate) fn drop_all(&self) -> (usize, usize) {
        let dropped = self.reg.lock().clear();
        dropped.release()
    }

    /// Runs a wait on behalf of a lease: the lease cannot lapse while it
    /// runs, and the wait ends (with nothing left behind: the future is
    /// dropped) when the lease ends or the server stops.
    async fn long_poll<T>(
        self: &Arc<Self>,
        lease: u64,
        wait: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut revoked = {
            let mut reg = self.reg.lock();
            let Some(entry) = reg.leases.get_mut(&lease) else {
                return Err(Error::UnknownLease {
                    lease: self.handle('l', lease),
                });
            };
            entry.polls += 1;
            entry.revoked.subscribe()
        };
        let _open = OpenPoll {
            app: self.clone(),
            lease,
        };
        let mut stop = self.stop_rx.clone();
        tokio::select! {
            result = wait => result,
            _ = revoked.wait_for(|r| *r) => Err(Error::UnknownLease { lease: self.handle('l', lease) }),
            _ = stop.wait_for(|s| *s) => Err(Error::Unavailable {
                reason: "the server is shutting down; every waiter was failed and every hold released".into(),
            }),
        }
    }

    /// Files a granted guard under its lease; a lease that ended meanwhile
    /// gets the guard dropped (released), never leaked.
    fn keep_hold(
        &self,
        guard: Guard,
        lineage: Arc<[u64]>,
        lease: u64,
        claim: Option<TicketClaim>,
    ) -> Result<Value> {
        let ticket = claim.as_ref().map(|c| c.key.clone());
        let (id, kind) = match &guard {
            Guard::Reservation(r) => (r.id().0, "call"),
            Guard::Fence(f) => (f.id().0, "fence"),
        };
        let paths = guard.paths();
        let mut reg = self.reg.lock();
        if !reg.leases.contains_key(&lease) {
            drop(reg);
            drop(guard);
            return Err(Error::UnknownLease {
                lease: self.handle('l', lease),
            });
        }
        if let Some(key) = &ticket {
            if let Some((Ticket::Abandoned, _)) = reg.tickets.get(key) {
                // The client gave up before this grant: hand it back.
                reg.tickets.remove(key);
                drop(reg);
                drop(guard);
                drop(claim);
                return Err(Error::UnknownHold {
                    hold: self.handle('h', id),
                });
            }
            reg.tickets
                .insert(key.clone(), (Ticket::Granted(id), lease));
        }
        if let Some(mut claim) = claim {
            claim.granted = true;
        }
        reg.holds.insert(
            id,
            HoldSlot {
                guard,
                ticket,
                lineage,
                lease,
            },
        );
        reg.renew(lease, self.ttl);
        drop(reg);
        Ok(json!({"hold": self.handle('h', id), "kind": kind, "paths": paths}))
    }

    /// Claims `ticket` for one request of actor `n`: refused when it is
    /// already live (a second request must never overwrite the first's
    /// answer), too long, or one too many for the actor.
    fn claim_ticket(self: &Arc<Self>, n: u64, ticket: String, lease: u64) -> Result<TicketClaim> {
        if ticket.is_empty() || ticket.len() > MAX_TICKET_LEN {
            return Err(invalid(format!(
                "a ticket is 1 to {MAX_TICKET_LEN} bytes long; this one is {}",
                ticket.len()
            )));
        }
        let mut reg = self.reg.lock();
        let key = (n, ticket);
        if reg.tickets.contains_key(&key) {
            return Err(invalid(format!(
                "ticket '{}' is already live (a request with it is waiting or holds, or it was given up); \
                 name each request with a new ticket",
                key.1
            )));
        }
        let live = reg.tickets.keys().filter(|(owner, _)| *owner == n).count();
        if live >= MAX_TICKETS_PER_ACTOR {
            return Err(invalid(format!(
                "the actor has {live} live tickets, the limit; release holds or give tickets up first"
            )));
        }
        reg.tickets.insert(key.clone(), (Ticket::Waiting, lease));
        Ok(TicketClaim {
            app: self.clone(),
            key,
            granted: false,
        })
    }

    /// A resumed request (`resume` with its `ticket`) of actor `n`: the
    /// answer its grant had, if it was granted; `None` to ask for it now.
    /// A wait this server serves ends with its connection, so there is no
    /// wait to take over here: only a grant is found.
    fn resumed(&self, n: u64, ticket: Option<&str>) -> Result<Option<Value>> {
        let ticket = ticket.ok_or_else(|| {
            invalid("resume names the request by its ticket: give the ticket it was asked with")
        })?;
        let reg = self.reg.lock();
        match reg.tickets.get(&(n, ticket.to_string())) {
            Some((Ticket::Granted(hold), _)) => {
                let slot = reg.holds.get(hold).ok_or_else(|| Error::UnknownHold {
                    hold: self.handle('h', *hold),
                })?;
                let kind = match &slot.guard {
                    Guard::Reservation(_) => "call",
                    Guard::Fence(_) => "fence",
                };
                Ok(Some(json!({
                    "hold": self.handle('h', *hold),
                    "kind": kind,
                    "paths": slot.guard.paths(),
                })))
            }
            Some((Ticket::Abandoned, _)) => Err(Error::Unavailable {
                reason: "the caller gave this request up".into(),
            }),
            // Its first request is still being served (its connection's
            // end not noticed yet): asked again, it will have an answer.
            Some((Ticket::Waiting, _)) => Err(Error::Unavailable {
                reason: "the ticket's first request is still being answered; resume again".into(),
            }),
            None => Ok(None),
        }
    }

    /// The hold a ticket was granted as, or `None` after marking the ticket
    /// abandoned, so that a grant still on its way is released on arrival.
    fn release_ticket(&self, caller: &Caller, actor: &str, ticket: &str) -> Result<Option<u64>> {
        let n = self.parse('a', "an actor", actor)?;
        let mut reg = self.reg.lock();
        let slot = reg.actors.get(&n).ok_or_else(|| Error::UnknownActor {
            actor: actor.to_string(),
        })?;
        self.may(caller, &slot.lineage, actor)?;
        let lease = slot.lease;
        let key = (n, ticket.to_string());
        match reg.tickets.get(&key) {
            Some((Ticket::Granted(hold), _)) => Ok(Some(*hold)),
            Some(_) => {
                reg.tickets.insert(key, (Ticket::Abandoned, lease));
                Ok(None)
            }
            None => {
                // Never seen: marked so a request still on its way is
                // refused, within the actor's ticket limit.
                let live = reg.tickets.keys().filter(|(owner, _)| *owner == n).count();
                if live < MAX_TICKETS_PER_ACTOR {
                    reg.tickets.insert(key, (Ticket::Abandoned, lease));
                }
                Ok(None)
            }
        }
    }

    /// Files a new actor; its token's secret is made here.
    fn keep_actor(
        &self,
        actor: Actor,
        lease: Option<u64>,
        parent_lineage: Option<&[u64]>,
    ) -> Result<Value> {
        let n = actor.id().0;
        let secret = auth::random_hex(32)?;
        let lineage: Arc<[u64]> = parent_lineage
            .unwrap_or_default()
            .iter()
            .copied()
            .chain([n])
            .collect();
        let root = actor.root().to_path_buf();
        let name = actor.name().to_string();
        let mut reg = self.reg.lock();
        let lease = match lease {
            Some(l) if reg.leases.contains_key(&l) => l,
            Some(l) => {
                drop(reg);
                drop(actor);
                return Err(Error::UnknownLease {
                    lease: self.handle('l', l),
                });
            }
            None => {
                let l = reg.new_lease(self.ttl);
                self.poke.notify_one();
                tracing::info!(lease = %self.handle('l', l), actor = %name, "lease created");
                l
            }
        };
        reg.actors.insert(
            n,
            ActorSlot {
                actor: Arc::new(actor),
                lease,
                lineage,
                secret: secret.clone(),
            },
        );
        reg.renew(lease, self.ttl);
        drop(reg);
        let handle = self.handle('a', n);
        Ok(json!({
            "actor": handle,
            "token": format!("{handle}.{secret}"),
            "lease": self.handle('l', lease),
            "name": name,
            "root": root,
        }))
    }

    /// A grant from its wire spelling; its root (default: the server's
    /// root) must lie inside the server's root.
    fn grant(&self, caller: &Caller, value: &Value) -> Result<Grant> {
        let Value::Object(map) = value else {
            return Err(invalid(
                "'grant' is {\"workspace\": true}, {\"fenced\": [targets]} or {\"read_only\": true}",
            ));
        };
        let root = match map.get("root") {
            None | Some(Value::Null) => self.root.clone(),
            Some(Value::String(r)) => self.inside_root(Path::new(r))?,
            Some(_) => return Err(invalid("grant 'root' must be a string")),
        };
        let flag = |k: &str| matches!(map.get(k), Some(Value::Bool(true)));
        let mut grant = match (flag("workspace"), map.get("fenced"), flag("read_only")) {
            (true, None, false) => Grant::workspace(root),
            (false, Some(t), false) => Grant::fenced(root, targets(t, self.max_targets)?),
            (false, None, true) => Grant::read_only(root),
            _ => {
                return Err(invalid(
                    "'grant' is exactly one of {\"workspace\": true}, {\"fenced\": [targets]}, {\"read_only\": true}",
                ));
            }
        };
        for k in map.keys() {
            if !matches!(
                k.as_str(),
                "root" | "workspace" | "fenced" | "read_only" | "read_roots"
            ) {
                return Err(invalid(format!("unknown grant field '{k}'")));
            }
        }
        if let Some(extra) = map.get("read_roots") {
            let Some(extra) = extra.as_array() else {
                return Err(invalid("grant 'read_roots' must be a list of folders"));
            };
            if !extra.is_empty() {
                // A read root may lie anywhere: only the session may add one.
                self.session_only(caller, "adding read roots")?;
            }
            for r in extra {
                let Some(r) = r.as_str() else {
                    return Err(invalid("grant 'read_roots' must be a list of folders"));
                };
                grant = grant.read_root(r);
            }
        }
        for r in &self.read_roots {
            grant = grant.read_root(r);
        }
        Ok(grant)
    }

    /// A path inside the server's root, relative paths taken from it.
    fn inside_root(&self, path: &Path) -> Result<PathBuf> {
        let joined = self.root.join(path);
        let resolved = std::fs::canonicalize(&joined).map_err(|e| {
            Error::invalid(&joined, format!("the grant root cannot be resolved ({e})"))
        })?;
        if !resolved.starts_with(&self.root) {
            return Err(Error::OutsideGrant {
                path: resolved,
                root: self.root.clone(),
            });
        }
        Ok(resolved)
    }

    /// A file method's `timeout_ms`: a call reservation on its paths,
    /// waited for that long (shared for a read), as MCP's tools wait
    /// (`Actor::wait_call`); the lease cannot lapse meanwhile. `None` when
    /// no timeout was asked for (the operation is then try-only) or when
    /// the paths came free as the wait ended.
    async fn file_wait(
        self: &Arc<Self>,
        actor: &Arc<Actor>,
        lease: u64,
        paths: &[&str],
        shared: bool,
        timeout_ms: Option<u64>,
        verb: &str,
    ) -> Result<Option<crate::Reservation>> {
        let Some(ms) = timeout_ms else {
            return Ok(None);
        };
        let targets = paths
            .iter()
            .map(|p| {
                let target = Target::file(*p);
                if shared { target.shared() } else { target }
            })
            .collect();
        let label = format!("{verb} {}", paths.join(", "));
        let wait = actor.wait_call(targets, label, Duration::from_millis(ms));
        self.long_poll(lease, wait).await
    }

    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| Error::Protocol {
                kind: ProtocolError::Internal,
                detail: format!("a file operation failed to run: {e}"),
            })?
    }

    /// Runs one method as [`App::call`] does. A `files.write`,
    /// `files.append` or `files.replace` asked with `current: true` and
    /// refused `stale` or `not_read` then reads the file for its actor, as
    /// `files.read` would (recording the actor's mark: SPEC §6, the refusal
    /// is also the re-read), and returns what it read beside the error:
    /// `{content, mark}`, for an append only the last [`TAIL_LINES`] lines
    /// with `lines: [first, null]` (0-based) saying where they start.
    /// Nothing beside the error when the read fails too.
    pub(crate) async fn answer(
        self: &Arc<Self>,
        caller: &Caller,
        method: &str,
        mut params: Value,
    ) -> std::result::Result<Value, (Error, Option<Value>)> {
        let wants = match method {
            "files.write" | "files.append" | "files.replace" => {
                match params.as_object_mut().and_then(|p| p.remove("current")) {
                    None | Some(Value::Bool(false)) => false,
                    Some(Value::Bool(true)) => true,
                    Some(_) => return Err((invalid("'current' is true or false"), None)),
                }
            }
            _ => false,
        };
        let read = wants.then(|| json!({"actor": params.get("actor"), "path": params.get("path")}));
        match (self.call(caller, method, params).await, read) {
            (Err(e @ (Error::Stale { .. } | Error::NotRead { .. })), Some(read)) => {
                let current = self.call(caller, "files.read", read).await.ok();
                let current = match current {
                    Some(whole) if method == "files.append" => tail(whole),
                    other => other,
                };
                Err((e, current))
            }
            (outcome, _) => outcome.map_err(|e| (e, None)),
        }
    }

    /// Runs one method.
    pub(crate) async fn call(
        self: &Arc<Self>,
        caller: &Caller,
        method: &str,
        params_value: Value,
    ) -> Result<Value> {
        let p = params_value;
        #[cfg(feature = "etcd")]
        let p = match &self.etcd {
            Some(backend) => match self.etcd_call(backend, caller, method, p.clone()).await {
                Some(answer) => return answer,
                None => p,
            },
            None => p,
        };
        match method {
            "session.info" => Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "version": env!("CARGO_PKG_VERSION"),
                "root": self.root,
                "session": self.sched.config().session_id(),
                "instance": self.instance,
                "lease_ttl_ms": self.ttl.as_millis() as u64,
                "call_wait_ms": self.call_wait.as_millis() as u64,
                "max_body": self.max_body,
                "history_dir": self.history_dir,
                "caller": match caller {
                    Caller::Session => "session".to_string(),
                    Caller::Actor(n) => self.handle('a', *n),
                },
            })),
            "session.stop" => {
                self.session_only(caller, "stopping the server")?;
                let _ = self.stop_tx.send(true);
                Ok(json!({"stopping": true}))
            }
            "actor.create" | "actor.child_wait" => {
                let p: CreateParams = params(p)?;
                let wait = method == "actor.child_wait";
                let grant = self.grant(caller, &p.grant)?;
                match (&p.parent, p.lease) {
                    (Some(_), Some(_)) => Err(invalid(
                        "a child belongs to its parent's lease; do not pass 'lease'",
                    )),
                    (None, _) if wait => Err(invalid("actor.child_wait needs a 'parent'")),
                    (None, lease) => {
                        self.session_only(caller, "creating a root actor")?;
                        let lease = match lease {
                            Some(l) => Some(self.lease_of(caller, &l)?),
                            None => None,
                        };
                        let actor = self.sched.actor(p.name, grant)?;
                        self.keep_actor(actor, lease, None)
                    }
                    (Some(parent), None) => {
                        let (parent, lease, lineage) = self.actor_for(caller, parent)?;
                        let child = if wait {
                            // The in-process timeout, so that a wait given up
                            // counts as timed out, not as cancelled.
                            let waiting = match timeout(p.timeout_ms) {
                                Some(d) => parent.child_wait_timeout(p.name, grant, d),
                                None => parent.child_wait(p.name, grant),
                            };
                            self.long_poll(lease, waiting).await?
                        } else {
                            parent.child(p.name, grant)?
                        };
                        self.keep_actor(child, Some(lease), Some(&lineage))
                    }
                }
            }
            "actor.drop" => {
                let p: ActorParams = params(p)?;
                let n = self.parse('a', "an actor", &p.actor)?;
                let slot = {
                    let mut reg = self.reg.lock();
                    let slot = reg.actors.get(&n).ok_or_else(|| Error::UnknownActor {
                        actor: p.actor.clone(),
                    })?;
                    self.may(caller, &slot.lineage, &p.actor)?;
                    let lease = slot.lease;
                    reg.renew(lease, self.ttl);
                    reg.actors.remove(&n)
                };
                drop(slot);
                Ok(json!({"dropped": p.actor}))
            }
            "admit" | "fence" => {
                let p: AdmitParams = params(p)?;
                let targets = targets(&p.targets, self.max_targets)?;
                let (actor, lease, lineage) = self.actor_for(caller, &p.actor)?;
                if p.resume {
                    if let Some(granted) = self.resumed(actor.id().0, p.ticket.as_deref())? {
                        return Ok(granted);
                    }
                }
                let claim = match p.ticket {
                    Some(ticket) => Some(self.claim_ticket(actor.id().0, ticket, lease)?),
                    None => None,
                };
                let heavy = targets.len() > HEAVY_TARGETS;
                let targets = if heavy {
                    // Resolving many paths touches the file system for each:
                    // off the async workers, so others' answers never wait.
                    let a = actor.clone();
                    Self::blocking(move || a.resolve(targets).map(|r| r.targets().to_vec())).await?
                } else {
                    targets
                };
                let mut request = actor.request(targets).priority(p.priority);
                if let Some(label) = p.label {
                    request = request.label(label);
                }
                let limit = timeout(p.timeout_ms);
                let guard = if method == "admit" {
                    if p.wait.unwrap_or(true) {
                        let waiting = match limit {
                            Some(d) => request.admit_timeout(d),
                            None => request.admit(),
                        };
                        Guard::Reservation(self.long_poll(lease, waiting).await?)
                    } else if heavy {
                        // So is checking them against the table.
                        Guard::Reservation(Self::blocking(move || request.try_admit()).await?)
                    } else {
                        Guard::Reservation(request.try_admit()?)
                    }
                } else if p.wait.unwrap_or(false) {
                    let waiting = match limit {
                        Some(d) => request.fence_wait_timeout(d),
                        None => request.fence_wait(),
                    };
                    Guard::Fence(self.long_poll(lease, waiting).await?)
                } else if heavy {
                    Guard::Fence(Self::blocking(move || request.fence()).await?)
                } else {
                    Guard::Fence(request.fence()?)
                };
                self.keep_hold(guard, lineage, lease, claim)
            }
            "fence.extend" | "fence.narrow" => {
                let p: HoldTargetsParams = params(p)?;
                let targets = targets(&p.targets, self.max_targets)?;
                let n = self.parse('h', "a hold", &p.hold)?;
                let mut reg = self.reg.lock();
                let slot = reg.holds.get_mut(&n).ok_or_else(|| Error::UnknownHold {
                    hold: p.hold.clone(),
                })?;
                self.may(caller, &slot.lineage, &p.hold)?;
                match (&mut slot.guard, method) {
                    (Guard::Fence(f), "fence.extend") => f.extend(targets)?,
                    (Guard::Fence(f), _) => f.narrow(targets)?,
                    (Guard::Reservation(r), "fence.extend") => r.extend(targets)?,
                    (Guard::Reservation(_), _) => {
                        return Err(invalid(format!(
                            "{} is a call reservation; only a fence can be narrowed",
                            p.hold
                        )));
                    }
                }
                let paths = slot.guard.paths();
                let lease = slot.lease;
                reg.renew(lease, self.ttl);
                Ok(json!({"hold": p.hold, "paths": paths}))
            }
            "release" => {
                let p: HoldParams = params(p)?;
                let (n, named) = match (&p.hold, &p.actor, &p.ticket) {
                    (Some(hold), None, None) => (self.parse('h', "a hold", hold)?, hold.clone()),
                    (None, Some(actor), Some(ticket)) => {
                        match self.release_ticket(caller, actor, ticket)? {
                            Some(hold) => (hold, self.handle('h', hold)),
                            None => return Ok(json!({"released": null, "ticket": ticket})),
                        }
                    }
                    _ => {
                        return Err(invalid("release takes {hold} or {actor, ticket}"));
                    }
                };
                let slot = {
                    let mut reg = self.reg.lock();
                    let slot = reg.holds.get(&n).ok_or_else(|| Error::UnknownHold {
                        hold: named.clone(),
                    })?;
                    self.may(caller, &slot.lineage, &named)?;
                    let lease = slot.lease;
                    reg.renew(lease, self.ttl);
                    reg.remove_hold(n)
                };
                drop(slot);
                Ok(json!({"released": named}))
            }
            "dump" => {
                let p: DumpParams = params(p)?;
                let dump = self.sched.dump();
                match p.format.as_deref() {
                    None | Some("json") => {
                        serde_json::to_value(&dump).map_err(|e| Error::Protocol {
                            kind: ProtocolError::Internal,
                            detail: format!("the dump did not encode: {e}"),
                        })
                    }
                    Some("table") => Ok(json!({"table": dump.to_string()})),
                    Some(other) => Err(invalid(format!(
                        "unknown dump format '{other}' (json or table)"
                    ))),
                }
            }
            "lease.keepalive" => {
                let p: LeaseParams = params(p)?;
                let lease = self.lease_of(caller, &p.lease)?;
                if !self.reg.lock().renew(lease, self.ttl) {
                    return Err(Error::UnknownLease { lease: p.lease });
                }
                Ok(json!({"lease": p.lease, "ttl_ms": self.ttl.as_millis() as u64}))
            }
            "lease.revoke" => {
                let p: LeaseParams = params(p)?;
                self.session_only(caller, "revoking a lease")?;
                let lease = self.lease_of(caller, &p.lease)?;
                let (actors, holds) =
                    self.drop_lease(lease).ok_or_else(|| Error::UnknownLease {
                        lease: p.lease.clone(),
                    })?;
                tracing::info!(lease = %p.lease, actors, holds, "lease revoked");
                Ok(json!({"lease": p.lease, "actors": actors, "holds": holds}))
            }
            "files.read" => {
                let p: ReadParams = params(p)?;
                let (actor, lease, _) = self.actor_for(caller, &p.actor)?;
                let call = self
                    .file_wait(&actor, lease, &[&p.path], true, p.timeout_ms, "read")
                    .await?;
                let (bytes, mark) = Self::blocking(move || {
                    let mut call = call;
                    let files = within(&actor, call.as_mut());
                    match p.lines {
                        None => files.read(&p.path),
                        Some((start, None)) => files.read_range(&p.path, start..),
                        Some((start, Some(end))) => files.read_range(&p.path, start..end),
                    }
                })
                .await?;
                Ok(json!({"content": wire::content_to_wire(&bytes), "mark": mark}))
            }
            "files.write" | "files.append" => {
                let p: WriteParams = params(p)?;
                let content = wire::content_from_wire(&p.content).map_err(invalid)?;
                let (actor, lease, _) = self.actor_for(caller, &p.actor)?;
                let append = method == "files.append";
                let verb = if append { "append" } else { "write" };
                let call = self
                    .file_wait(&actor, lease, &[&p.path], false, p.timeout_ms, verb)
                    .await?;
                let receipt = Self::blocking(move || {
                    let mut call = call;
                    let files = within(&actor, call.as_mut());
                    if append {
                        files.append(&p.path, content)
                    } else {
                        files.write(&p.path, content)
                    }
                })
                .await?;
                Ok(json!(receipt))
            }
            "files.replace" => {
                let p: ReplaceParams = params(p)?;
                let (actor, lease, _) = self.actor_for(caller, &p.actor)?;
                let call = self
                    .file_wait(&actor, lease, &[&p.path], false, p.timeout_ms, "replace")
                    .await?;
                let receipt = Self::blocking(move || {
                    let mut call = call;
                    within(&actor, call.as_mut()).replace(&p.path, &p.old, &p.new)
                })
                .await?;
                Ok(json!(receipt))
            }
            "files.delete" => {
                let p: DeleteParams = params(p)?;
                let (actor, lease, _) = self.actor_for(caller, &p.actor)?;
                let call = self
                    .file_wait(&actor, lease, &[&p.path], false, p.timeout_ms, "delete")
                    .await?;
                let receipt = Self::blocking(move || {
                    let mut call = call;
                    within(&actor, call.as_mut()).delete(&p.path)
                })
                .await?;
                Ok(json!(receipt))
            }
            "files.rename" => {
                let p: RenameParams = params(p)?;
                let (actor, lease, _) = self.actor_for(caller, &p.actor)?;
                let call = self
                    .file_wait(
                        &actor,
                        lease,
                        &[&p.from, &p.to],
                        false,
                        p.timeout_ms,
                        "rename",
                    )
                    .await?;
                let receipt = Self::blocking(move || {
                    let mut call = call;
                    within(&actor, call.as_mut()).rename(&p.from, &p.to)
                })
                .await?;
                Ok(json!(receipt))
            }
            "turn.set" => {
                let p: TurnParams = params(p)?;
                let (actor, _, _) = self.actor_for(caller, &p.actor)?;
                actor.set_turn(p.turn.clone());
                Ok(json!({"actor": p.actor, "turn": p.turn}))
            }
            "history.snapshot" => {
                let p: PathParams = params(p)?;
                let (actor, _, _) = self.actor_for(caller, &p.actor)?;
                let path = p.path.clone();
                let taken = Self::blocking(move || actor.before_outside_write(&p.path)).await?;
                Ok(json!({"path": path, "snapshot": taken}))
            }
            "history.record" => {
                let p: PathParams = params(p)?;
                let (actor, _, _) = self.actor_for(caller, &p.actor)?;
                let receipt = Self::blocking(move || actor.after_outside_write(&p.path)).await?;
                Ok(json!(receipt))
            }
            "history.rewind" | "history.redo" => {
                let p: RewindParams = params(p)?;
                self.session_only(caller, "rewinding a turn")?;
                let sched = self.sched.clone();
                let redo = method == "history.redo";
                let report = Self::blocking(move || {
                    if redo {
                        sched.redo_turn(&p.turn)
                    } else if p.merge {
                        sched.rewind_turn_with(&p.turn, crate::history::RewindMode::Merge)
                    } else {
                        sched.rewind_turn(&p.turn)
                    }
                })
                .await?;
                Ok(json!(report))
            }
            "plan.validate" => {
                let p: PlanParams = params(p)?;
                let mut plan =
                    crate::plan::Plan::new(&self.root).case(self.sched.case_mode(&self.root));
                for task in &p.tasks {
                    plan = plan.task(
                        task.name.clone(),
                        targets(&task.writes, self.max_targets)?,
                        task.depends_on.iter().map(String::as_str),
                    );
                }
                let waves = plan.validate()?;
                Ok(json!({ "waves": waves }))
            }
            other => Err(Error::Protocol {
                kind: ProtocolError::UnknownMethod,
                detail: format!("unknown method '{other}'; see docs/PROTOCOL.md"),
            }),
        }
    }
}
