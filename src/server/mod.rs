//! `writ serve`: one [`Scheduler`] for every process of a
//! session, over loopback HTTP and optionally a Unix socket (feature
//! `server`).
//!
//! The server adds no semantics of its own: every JSON-RPC method parses its
//! parameters into the types the in-process API takes and calls that API.
//! What it adds is bookkeeping for things a process boundary needs:
//!
//! - **Leases**: every actor made over the wire belongs to a lease
//!   with a TTL; any request touching the lease, an open long-poll, or
//!   `lease.keepalive` renews it. When it lapses (or on `lease.revoke`), its
//!   actors and every guard they made are dropped exactly as in process. One
//!   reaper task sleeps until the earliest deadline.
//! - **Tokens**: the session token may do everything; an actor
//!   token acts only for its actor and its descendants.
//! - **Handles**: actors, holds and leases are named on the wire by strings
//!   that carry the server instance (`a-<instance>-<n>`), so a handle from a
//!   previous run of the server is never mistaken for a live one: it is
//!   `unknown_lease`.
//! - **The socket** ([`Options::socket`]): the same routes and auth on a
//!   Unix socket, mode 0600, whose peers of another uid are closed unread.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), writ::Error> {
//! let server = writ::server::Server::start(writ::server::Options::new("/path/to/repo")).await?;
//! println!("listening on {} (token {})", server.url(), server.token());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The protocol is documented in docs/PROTOCOL.md.

mod activity;
pub(crate) mod auth;
mod conns;
mod discovery;
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
mod events;
pub(crate) mod lease;
mod listen;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "mcp")]
mod mcp_cap;
mod observe;
mod rpc;
mod socket;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use discovery::{
    Discovery, default_history_dir, discovery_path, read_discovery, read_private, state_dir,
    write_private,
};

use crate::{Config, Error, Result, Scheduler};

/// How a server is set up: [`Options::new`] gives the defaults of
/// `writ serve` except history, which the binary turns on.
#[derive(Debug, Clone)]
pub struct Options {
    root: PathBuf,
    listen: SocketAddr,
    socket: Option<PathBuf>,
    lease_ttl: Duration,
    call_wait: Duration,
    mcp_idle: Duration,
    max_body: usize,
    limits: Limits,
    config: Config,
    read_roots: Vec<PathBuf>,
    discovery: Option<PathBuf>,
    stop_on_signal: bool,
    token: Option<String>,
    token_file: Option<PathBuf>,
    idle_exit: Option<Duration>,
    #[cfg(feature = "mcp")]
    mcp_tools: crate::mcp::ToolSet,
    #[cfg(feature = "etcd")]
    etcd: Option<rpc::EtcdOptions>,
}

/// Raises the soft limit on open files toward the hard one, so that
/// `max_connections` on each listener (TCP and a socket), plus the files
/// the tools open, fit: the usual soft limit of 1,024 would be reached
/// before the cap. Returns the cap that fits: `max_connections`, or
/// fewer when the limit cannot be raised that far. A cap past the
/// descriptors would never be reached: accepts would fail first, and the
/// idle connections the cap closes (half-sent requests among them) would
/// keep every descriptor while new clients wait.
fn raise_open_file_limit(max_connections: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    const RESERVED: u64 = 256;
    let wanted = (max_connections as u64)
        .saturating_mul(2)
        .saturating_add(RESERVED);
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= wanted {
        return max_connections;
    }
    let raised = limit.maximum.map_or(wanted, |hard| hard.min(wanted));
    let set = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(raised),
            maximum: limit.maximum,
        },
    );
    let have = if set.is_ok() { raised } else { soft };
    if have >= wanted {
        return max_connections;
    }
    // Two listeners at most, and room for the files the tools open: a
    // quarter of a small limit, else the usual reserve.
    let reserve = RESERVED.min(have / 4);
    let fits = usize::try_from(have.saturating_sub(reserve) / 2)
        .unwrap_or(max_connections)
        .clamp(1, max_connections);
    tracing::warn!(
        soft = have,
        wanted,
        max_connections = fits,
        "cannot raise the open-file limit to fit --max-connections; serving at most this many per listener"
    );
    fits
}

/// The bounds that keep one client from exhausting the server (SPEC §13).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_targets: usize,
    pub(crate) max_mcp_sessions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
            max_targets: 4096,
            max_mcp_sessions: 256,
        }
    }
}

/// The `--config FILE` of `writ serve`: the [`Config`] knobs as JSON.
///
/// ```
/// let file: writ::server::ConfigFile = serde_json::from_str(
///     r#"{"max_actors": 6, "max_writers": 3, "case": "insensitive",
///         "sensitive_names": ["*.secret"], "read_roots": ["/usr/share/doc"],
///         "events_ring": 65536}"#,
/// ).unwrap();
/// let options = writ::server::Options::new(".").config_file(file);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `Config::max_actors`.
    pub max_actors: Option<usize>,
    /// `Config::max_writers`.
    pub max_writers: Option<usize>,
    /// `Config::case`: `"sensitive"`, `"insensitive"` or `"detect"`.
    pub case: Option<CaseName>,
    /// `Config::portable_names`.
    pub portable_names: Option<bool>,
    /// `Config::sensitive_names`: added to the built-in patterns, never a
    /// replacement for them (`.writ/` stays refused whatever this says).
    pub sensitive_names: Option<Vec<String>>,
    /// Read-only roots added to every actor's grant.
    #[serde(default)]
    pub read_roots: Vec<PathBuf>,
    /// `Config::file_op_wait`, in milliseconds.
    pub file_op_wait_ms: Option<u64>,
    /// `Config::session`.
    pub session: Option<String>,
    /// `Config::events_ring`: how many events `/events` keeps for readers
    /// that lag or reconnect.
    pub events_ring: Option<usize>,
}

/// A case mode as the config file spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseName {
    /// `CaseMode::Sensitive`.
    Sensitive,
    /// `CaseMode::Insensitive`.
    Insensitive,
    /// `CaseMode::Detect`.
    Detect,
}

impl Options {
    /// A server for `root`: `127.0.0.1:0`, a 15 s lease TTL, a 3 s call wait,
    /// an 8 MiB body limit, the default [`Config`], no discovery file and a
    /// fresh random session token.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Options {
            root: root.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            socket: None,
            lease_ttl: Duration::from_secs(15),
            call_wait: Duration::from_secs(3),
            mcp_idle: Duration::from_secs(30 * 60),
            max_body: 8 * 1024 * 1024,
            limits: Limits::default(),
            config: Config::default(),
            read_roots: Vec::new(),
            discovery: None,
            stop_on_signal: false,
            token: None,
            token_file: None,
            idle_exit: None,
            #[cfg(feature = "mcp")]
            mcp_tools: crate::mcp::ToolSet::Writ,
            #[cfg(feature = "etcd")]
            etcd: None,
        }
    }

    /// Serve session `session` of the table in etcd at `endpoints` (SPEC
    /// §16, feature `etcd`) instead of an in-process table: any number of
    /// servers, on any machines, serve one session, and a client may talk
    /// to any of them. Every server of a session needs the same session
    /// token ([`Options::token`] or [`Options::token_file`]): the first
    /// stores its hash in etcd, the others are refused unless theirs
    /// matches. What the etcd table cannot serve yet is refused with
    /// `Error::Unsupported` (docs/DISTRIBUTED.md lists it).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// use writ::etcd::TableOptions;
    /// use writ::server::{Options, Server};
    /// let options = Options::new("/path/to/repo")
    ///     .token("0123456789abcdef0123456789abcdef")
    ///     .etcd(["http://127.0.0.1:2379"], "repo", TableOptions::default());
    /// let server = Server::start(options).await?;
    /// # server.shutdown().await; Ok(()) }
    /// ```
    #[cfg(feature = "etcd")]
    pub fn etcd<E: Into<String>>(
        mut self,
        endpoints: impl IntoIterator<Item = E>,
        session: impl Into<String>,
        table: crate::etcd::TableOptions,
    ) -> Self {
        self.etcd = Some(rpc::EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            session: session.into(),
            table,
        });
        self
    }

    /// Applies a `--config` file's knobs to the configuration.
    pub fn config_file(mut self, file: ConfigFile) -> Self {
        let mut c = self.config;
        if let Some(n) = file.max_actors {
            c = c.max_actors(n);
        }
        if let Some(n) = file.max_writers {
            c = c.max_writers(n);
        }
        if let Some(case) = file.case {
            c = c.case(match case {
                CaseName::Sensitive => crate::CaseMode::Sensitive,
                CaseName::Insensitive => crate::CaseMode::Insensitive,
                CaseName::Detect => crate::CaseMode::Detect,
            });
        }
        if let Some(on) = file.portable_names {
            c = c.portable_names(on);
        }
        if let Some(names) = file.sensitive_names {
            c = c.sensitive_names(names);
        }
        if let Some(ms) = file.file_op_wait_ms {
            c = c.file_op_wait(Duration::from_millis(ms));
        }
        if let Some(session) = file.session {
            c = c.session(session);
        }
        if let Some(events) = file.events_ring {
            c = c.events_ring(events);
        }
        self.config = c;
        self.read_roots.extend(file.read_roots);
        self
    }

    /// Keep the session token in this file (mode 0600): read it when the
    /// file exists, else make one and write it. A server restarted with the
    /// same file keeps its clients' token.
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token_file = Some(path.into());
        self
    }

    /// The address to listen on (loopback only is the point; default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Listen on a Unix socket at `path` too, serving the same routes with
    /// the same auth. The file is created with mode 0600, peers of another
    /// uid are closed before anything they send is read, and it is removed
    /// on shutdown. A stale socket left at `path` by a server that died is
    /// replaced; anything else there (a live server's socket, a file) makes
    /// [`Server::start`] fail and is left alone. Clients reach it as
    /// `unix:PATH` (`writ::remote::Session::connect`, feature `remote`).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// use writ::server::{Options, Server};
    /// let server = Server::start(Options::new("/path/to/repo").socket("/run/user/1000/writ.sock")).await?;
    /// assert_eq!(server.socket(), Some(std::path::Path::new("/run/user/1000/writ.sock")));
    /// # server.shutdown().await; Ok(()) }
    /// ```
    pub fn socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.socket = Some(path.into());
        self
    }

    /// How long a lease lives without being renewed.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How long a tool call may wait for a contested path (used by MCP;
    /// default 3 s, below the shortest common client timeout, so the model
    /// gets writ's sentence rather than its client's time-out).
    pub fn call_wait(mut self, wait: Duration) -> Self {
        self.call_wait = wait;
        self
    }

    /// How long an MCP session with no open stream lives after its last
    /// request, and a named agent after its last session (default 30 min):
    /// a model thinks for minutes between tool calls.
    pub fn mcp_idle(mut self, idle: Duration) -> Self {
        self.mcp_idle = idle;
        self
    }

    /// The tools `/mcp` serves to a session that does not ask for a set
    /// (`/mcp?tools=filesystem` does); default writ's own.
    #[cfg(feature = "mcp")]
    pub fn mcp_tools(mut self, tools: crate::mcp::ToolSet) -> Self {
        self.mcp_tools = tools;
        self
    }

    /// The largest request body accepted, in bytes.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// How long a request's headers may take to arrive (default 10 s): a
    /// client that sends them slower is dropped, answered by nobody.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.limits.header_timeout = timeout;
        self
    }

    /// The most connections open at once on each listener (default 512);
    /// more wait to be accepted. The process's open-file limit is raised
    /// at start to fit them.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.limits.max_connections = connections.max(1);
        self
    }

    /// The most targets one request may name (default 4,096); a larger
    /// request is `invalid_params`, with nothing admitted.
    pub fn max_targets(mut self, targets: usize) -> Self {
        self.limits.max_targets = targets.max(1);
        self
    }

    /// The most MCP sessions one token may have open at once (default 256):
    /// one more is refused with a sentence naming the cap, so no client
    /// grows the server by opening sessions it never closes.
    pub fn max_mcp_sessions(mut self, sessions: usize) -> Self {
        self.limits.max_mcp_sessions = sessions.max(1);
        self
    }

    /// The scheduler's configuration (slots, case, sensitive names, history).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// A read-only root added to every actor's grant.
    pub fn read_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.read_roots.push(root.into());
        self
    }

    /// Write the discovery file here (mode 0600) and remove it on shutdown.
    pub fn discovery_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.discovery = Some(path.into());
        self
    }

    /// Listen for SIGINT and SIGTERM from the start: [`Server::start`]
    /// installs the listeners before it writes the discovery file, so a
    /// process that stops the server as soon as the file appears is heard
    /// (else a signal that came before [`Server::wait`] began to listen
    /// would end the process by the default action, leaving the socket
    /// and the discovery file behind). A process that does not call
    /// `wait` should not ask for this: it would no longer stop on those
    /// signals.
    ///
    /// ```
    /// let options = writ::server::Options::new(".").stop_on_signal();
    /// # drop(options);
    /// ```
    pub fn stop_on_signal(mut self) -> Self {
        self.stop_on_signal = true;
        self
    }

    /// Stop by itself once no client has been connected for `idle`: no
    /// request in flight (an MCP stream, a `/events` reader or a long-poll
    /// held open counts as one) and none ended within `idle`. Off by
    /// default: a server a person starts runs until stopped; the one a
    /// `writ mcp` bridge starts for its folder passes it (`--idle-exit`).
    ///
    /// ```
    /// let options = writ::server::Options::new(".").idle_exit(std::time::Duration::from_secs(600));
    /// # drop(options);
    /// ```
    pub fn idle_exit(mut self, idle: Duration) -> Self {
        self.idle_exit = Some(idle);
        self
    }

    /// Use this session token instead of a random one (a restarted server
    /// keeps its clients' token, so they learn of the restart from
    /// `unknown_lease`, not from a 401).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
}

/// A running server. Dropping it does not stop it; call
/// [`Server::shutdown`] (or let [`Server::wait`] return on a signal or a
/// `session.stop`).
#[derive(Debug)]
pub struct Server {
    url: String,
    token: String,
    addr: SocketAddr,
    socket: Option<PathBuf>,
    app: Arc<rpc::App>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// SIGINT and SIGTERM, listened to since `start` (`Options::stop_on_signal`).
    signals: Option<listen::Signals>,
}

impl Server {
    /// Binds, writes the discovery file (if asked) and starts serving on the
    /// current tokio runtime.
    pub async fn start(options: Options) -> Result<Server> {
        let root = discovery::canonical_dir(&options.root)?;
        let token = match (options.token.clone(), &options.token_file) {
            (Some(t), _) => {
                auth::check_token_shape(&t)?;
                t
            }
            (None, Some(file)) => discovery::token_from_file(file)?,
            (None, None) => crate::random::hex(32)?,
        };
        let mut options = options;
        options.limits.max_connections = raise_open_file_limit(options.limits.max_connections);
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|e| Error::io("listen on", options.listen.to_string(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("listen on", options.listen.to_string(), e))?;
        let url = format!("http://{addr}");
        let socket = match &options.socket {
            Some(path) => Some(socket::bind(path, rustix::process::geteuid().as_raw())?),
            None => None,
        };
        let socket_path = socket.as_ref().map(|(_, file)| file.path().to_path_buf());
        let (stop, stop_rx) = watch::channel(false);
        #[allow(unused_mut)]
        let mut app = rpc::App::new(
            &options,
            root.clone(),
            token.clone(),
            stop.clone(),
            stop_rx.clone(),
        )?;
        #[cfg(feature = "etcd")]
        if let Some(etcd) = &options.etcd {
            let backend = rpc::EtcdBackend::connect(etcd, &options.config, &root, &token).await?;
            app = app.with_etcd(backend);
        }
        app.url = url.clone();
        let app = Arc::new(app);
        let signals = options
            .stop_on_signal
            .then(listen::Signals::listen)
            .flatten();
        if let Some(path) = &options.discovery {
            discovery::write(
                path,
                &Discovery {
                    url: url.clone(),
                    socket: socket_path.clone(),
                    pid: std::process::id(),
                    token: token.clone(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    protocol: crate::wire::PROTOCOL_VERSION.to_string(),
                    root: root.clone(),
                },
            )?;
        }
        // Subscribed before `start` returns, not in the spawned task: what
        // the caller does next (even before that task first runs) is in the
        // log, the metrics and the ring a late viewer reads.
        let observed = app.sched.subscribe();
        #[cfg(feature = "etcd")]
        app.follow_etcd_events().await?;
        if let Some(idle) = options.idle_exit {
            tokio::spawn(activity::exit_when_idle(
                app.activity.clone(),
                idle,
                stop.clone(),
                stop_rx.clone(),
            ));
        }
        let task = tokio::spawn(listen::serve(
            listener,
            socket,
            app.clone(),
            observed,
            stop_rx,
            options.discovery.clone(),
        ));
        tracing::info!(
            %url,
            socket = socket_path.as_deref().map(|p| tracing::field::display(p.display())),
            root = %root.display(),
            "writ serve listening"
        );
        Ok(Server {
            url,
            token,
            addr,
            socket: socket_path,
            app,
            stop,
            task,
            signals,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The Unix socket's path (absolute), if it listens on one.
    pub fn socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// The session token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.app.root
    }

    /// The server's scheduler (the same table every client sees). A
    /// server whose table is in etcd (`Options::etcd`, feature `etcd`)
    /// leaves it empty.
    pub fn scheduler(&self) -> &Scheduler {
        &self.app.sched
    }

    /// Asks the server to stop: waiters fail with `unavailable`, every lease
    /// is dropped, the discovery file and the socket are removed. Returns
    /// when that is done.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Serves until SIGINT, SIGTERM or a `session.stop` request, then shuts
    /// down as [`Server::shutdown`] does.
    pub async fn wait(mut self) {
        let mut stopped = self.stop.subscribe();
        let signals = self.signals.take().or_else(listen::Signals::listen);
        let signalled = async move {
            match signals {
                Some(mut signals) => signals.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signalled => {}
            _ = stopped.wait_for(|s| *s) => {}
        }
        self.shutdown().await;
    }
}
