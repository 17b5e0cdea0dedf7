//! The JSON-RPC methods (SPEC §13). A call is read once into a typed
//! [`Request`] (`request`), then applied to the session's table through the
//! [`Backend`] traits, one file per method family (`session`, `actors`,
//! `holds`, `leases`, `dump`, `files`, `history`), each with the in-process
//! implementation (`local` keeps its registry) and the etcd one (`etcd`)
//! side by side. The server adds no semantics: each method calls the
//! table's own API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use super::Options;
use super::auth::{self, Caller};
use super::lease::Registry;
use crate::history::RewindMode;
use crate::wire;
use crate::{Error, Grant, ProtocolError, Result, Scheduler, Target};

mod actors;
mod dump;
#[cfg(feature = "etcd")]
mod etcd;
mod files;
mod history;
mod holds;
mod leases;
mod local;
mod request;
mod session;

#[cfg(feature = "etcd")]
pub(crate) use etcd::{EtcdBackend, EtcdOptions};
pub(crate) use local::{AbsentAgent, ActorsGone, NamedAgents, SeatFuture};
use request::{FileOp, FileRequest, Request};

/// The answer of a task of the server's own; one that panicked or was
/// cancelled (the runtime stopping) is an internal error naming `what`.
async fn joined<T>(task: tokio::task::JoinHandle<Result<T>>, what: &str) -> Result<T> {
    task.await.map_err(|e| Error::Protocol {
        kind: ProtocolError::Internal,
        detail: format!("{what} failed to run: {e}"),
    })?
}

/// Who an MCP session on a server whose table is in etcd acts as (the MCP
/// identity table says which actor to make).
#[cfg(feature = "mcp")]
pub(crate) use crate::mcp::identity::seats::McpSeat;

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
    /// This server's URL, once it listens: on etcd, the agent handles it
    /// mints name it, so another server can say where they belong.
    pub(crate) url: String,
    pub(crate) max_body: usize,
    /// `--max-targets`: the most targets one request may name.
    pub(crate) max_targets: usize,
    /// The header timeout and connection cap of the listeners.
    pub(crate) limits: super::Limits,
    /// What `/mcp` does when actors made over the wire are dropped.
    pub(crate) on_actors_gone: std::sync::OnceLock<local::ActorsGone>,
    /// `/mcp`'s named agents, for the page and `agent.release`.
    pub(crate) named_agents: std::sync::OnceLock<std::sync::Weak<dyn local::NamedAgents>>,
    /// `--max-mcp-sessions`: the open MCP sessions of each token.
    #[cfg(feature = "mcp")]
    pub(crate) mcp_sessions: super::mcp_cap::SessionCap,
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
    /// Requests in flight and the last one's end, for `--idle-exit`.
    pub(crate) activity: Arc<super::activity::Activity>,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
    /// The session's table in etcd (`writ serve --etcd`): every method that
    /// touches the table goes there, and `sched` stays empty.
    #[cfg(feature = "etcd")]
    etcd: Option<EtcdBackend>,
}

/// The last [`crate::files::TAIL_LINES`] lines of a `files.read` result, with `lines`
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
    let first = crate::files::tail_first_line(starts.len() as u64) as usize - 1;
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

fn timeout(ms: Option<u64>) -> Option<Duration> {
    ms.map(Duration::from_millis)
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
            instance: crate::random::hex(4)?,
            ttl: options.lease_ttl,
            call_wait: options.call_wait,
            mcp_idle: options.mcp_idle,
            url: String::new(),
            max_body: options.max_body,
            max_targets: options.limits.max_targets,
            limits: options.limits,
            on_actors_gone: std::sync::OnceLock::new(),
            named_agents: std::sync::OnceLock::new(),
            #[cfg(feature = "mcp")]
            mcp_sessions: super::mcp_cap::SessionCap::new(options.limits.max_mcp_sessions),
            #[cfg(feature = "mcp")]
            mcp_tools: options.mcp_tools,
            history_dir,
            reg: Mutex::new(Registry::default()),
            poke: Arc::new(Notify::new()),
            metrics: super::observe::Metrics::default(),
            activity: Arc::default(),
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

    /// Whether the session's table is in etcd.
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

    /// On a server whose table is in etcd, the actor an MCP session acts
    /// as — its local mirror and the table its holds are taken in; `None`
    /// in process, where the session acts through the scheduler itself.
    #[cfg(feature = "mcp")]
    pub(crate) async fn mcp_seat(
        &self,
        seat: McpSeat<'_>,
    ) -> Option<Result<(Arc<crate::Actor>, Arc<dyn crate::mcp::table::SessionTable>)>> {
        #[cfg(feature = "etcd")]
        if let Some(backend) = &self.etcd {
            return Some(backend.mcp_seat(self, seat).await);
        }
        let _ = seat;
        None
    }

    /// On a server whose table is in etcd, registers this server as one
    /// of the session's whose MCP agent handles another server may name
    /// (SPEC §14); in process, nothing to do.
    #[cfg(feature = "mcp")]
    pub(crate) async fn mcp_register(&self) -> Result<()> {
        #[cfg(feature = "etcd")]
        if let Some(backend) = &self.etcd {
            return backend.mcp_register(self).await;
        }
        Ok(())
    }

    /// Whether a server of the session at `authority` (`host:port`)
    /// registered itself ([`App::mcp_register`]); never in process.
    #[cfg(feature = "mcp")]
    pub(crate) async fn mcp_registered(&self, authority: &str) -> Result<bool> {
        #[cfg(feature = "etcd")]
        if let Some(backend) = &self.etcd {
            return backend.mcp_registered(authority).await;
        }
        let _ = authority;
        Ok(false)
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

    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        joined(tokio::task::spawn_blocking(f), "a file operation").await
    }

    /// Runs one method as [`App::call`] does. A `files.write`,
    /// `files.append` or `files.replace` asked with `current: true` and
    /// refused `stale` or `not_read` then reads the file for its actor, as
    /// `files.read` would (recording the actor's mark: SPEC §6, the refusal
    /// is also the re-read), and returns what it read beside the error:
    /// `{content, mark}`, for an append only the last [`crate::files::TAIL_LINES`] lines
    /// with `lines: [first, null]` (0-based) saying where they start.
    /// Nothing beside the error when the read fails too.
    pub(crate) async fn answer(
        self: &Arc<Self>,
        caller: &Caller,
        method: &str,
        params: Value,
    ) -> std::result::Result<Value, (Error, Option<Value>)> {
        let request = Request::parse(method, params).map_err(|e| (e, None))?;
        // The read a refusal carries: the same actor, the op's file.
        let read = match &request {
            Request::File(FileRequest {
                actor,
                op: op @ (FileOp::Write { .. } | FileOp::Replace { .. }),
                current: true,
                ..
            }) => op.paths().first().map(|path| {
                let append = matches!(op, FileOp::Write { append: true, .. });
                let read = FileRequest {
                    actor: actor.clone(),
                    timeout_ms: None,
                    op: FileOp::Read {
                        path: (*path).to_string(),
                        lines: None,
                        tail_only: append,
                    },
                    current: false,
                };
                (read, append)
            }),
            _ => None,
        };
        match (self.run(caller, request).await, read) {
            (Err(e), Some((read, append))) if crate::files::refusal_shows_current(&e) => {
                let current = self.run(caller, Request::File(read)).await.ok();
                let current = match current {
                    Some(whole) if append => tail(whole),
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
        params: Value,
    ) -> Result<Value> {
        self.run(caller, Request::parse(method, params)?).await
    }

    /// Runs one request against the session's table: the one place that
    /// chooses the table.
    async fn run(self: &Arc<Self>, caller: &Caller, request: Request) -> Result<Value> {
        #[cfg(feature = "etcd")]
        if let Some(backend) = &self.etcd {
            return request
                .apply(self, caller, backend)
                .await
                .map_err(|e| self.etcd_named(e));
        }
        request.apply(self, caller, &InProcess).await
    }
}

/// A table the methods run against: the server's own scheduler
/// ([`InProcess`]) or the session's table in etcd (`EtcdBackend`). Each
/// family of methods is a trait of its own, in its own file, with both
/// implementations side by side.
trait Backend:
    session::Session
    + actors::Actors
    + holds::Holds
    + leases::Leases
    + dump::Dumps
    + files::FileOps
    + history::History
{
}

impl Backend for InProcess {}

#[cfg(feature = "etcd")]
impl Backend for EtcdBackend {}

/// The in-process table: the server's [`Scheduler`] and the registry of
/// what was made over the wire (`local`).
struct InProcess;

impl Request {
    async fn apply<B: Backend>(self, app: &Arc<App>, caller: &Caller, table: &B) -> Result<Value> {
        match self {
            Request::Info => Ok(table.info(app, caller)),
            Request::Stop => session::stop(app, caller),
            Request::ReleaseAgent(p) => session::release_agent(app, caller, p),
            Request::Plan(p) => session::validate_plan(app, p),
            Request::Create(p, creation) => table.create(app, caller, p, creation).await,
            Request::DropActor(p) => table.drop_actor(app, caller, p).await,
            Request::Admit(p, kind) => table.admit(app, caller, p, kind).await,
            Request::Change(p, change) => table.change(app, caller, p, change).await,
            Request::Release(release) => table.release(app, caller, release).await,
            Request::Dump(format) => table.dump(app, format).await,
            Request::KeepAlive(p) => table.keep_alive(app, caller, p).await,
            Request::Revoke(p) => table.revoke(app, caller, p).await,
            Request::File(request) => table.file(app, caller, request).await,
            Request::Run(p) => table.run_command(app, caller, p).await,
            Request::SetTurn(p) => table.set_turn(app, caller, p).await,
            Request::Snapshot(p) => table.snapshot(app, caller, p).await,
            Request::Record(p) => table.record(app, caller, p).await,
            Request::Rewind(p) => {
                let mode = if p.merge {
                    RewindMode::Merge
                } else {
                    RewindMode::Strict
                };
                table.rewind(app, caller, p, Some(mode)).await
            }
            Request::Redo(p) => table.rewind(app, caller, p, None).await,
        }
    }
}
