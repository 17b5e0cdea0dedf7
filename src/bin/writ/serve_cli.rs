//! `writ serve`, `writ dump` and `writ status`.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use writ::server::{self, ConfigFile, Options, Server};

/// A duration in seconds on the command line (decimals allowed).
fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'{text}' is not a duration"))
}

fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{text}' is not a whole number of at least 1")),
    }
}

/// `writ serve`.
#[derive(Debug, Args)]
pub struct ServeCmd {
    /// The workspace (default: the current folder).
    root: Option<PathBuf>,
    /// Address to listen on (loopback).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// A Unix socket to listen on too, with the same routes and token.
    ///
    /// The socket is created with mode 0600 and removed on shutdown, and a
    /// connection from another user is closed unread. A stale socket left at
    /// PATH by a killed server is replaced; anything else there (a running
    /// server's socket, a file) is refused. Clients reach it as unix:PATH,
    /// and the discovery file names it.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Where the discovery file goes (default: ROOT/.writ).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Seconds a lease lives without a renewal.
    #[arg(long, default_value = "15", value_parser = seconds)]
    lease_ttl: Duration,
    /// Seconds a tool call may wait for a contested path (below the
    /// shortest common client time-out, so the model reads writ's answer).
    #[arg(long, default_value = "3", value_parser = seconds)]
    call_wait: Duration,
    /// Seconds an MCP session with no open stream lives after its last
    /// request, and a named agent after its last session.
    #[arg(long, default_value = "1800", value_parser = seconds)]
    mcp_idle: Duration,
    /// The tools /mcp serves: writ (writ's own) or filesystem (the tools of
    /// the reference filesystem server, gated).
    #[arg(long, default_value = "writ", value_name = "SET")]
    mcp_tools: writ::mcp::ToolSet,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    max_body: usize,
    /// Seconds a request's headers may take to arrive, and an answer may
    /// wait unwritten (a client that never reads); a slower client is
    /// dropped.
    #[arg(long, default_value = "10", value_parser = seconds)]
    header_timeout: Duration,
    /// The most connections open at once on each listener; more wait to
    /// be accepted (the open-file limit is raised to fit, or the cap
    /// lowered to what it allows).
    #[arg(long, default_value = "512", value_parser = at_least_one)]
    max_connections: usize,
    /// The most targets one request may name; a larger request is refused
    /// with nothing admitted.
    #[arg(long, default_value = "4096", value_parser = at_least_one)]
    max_targets: usize,
    /// The most MCP sessions one token may have open at once; one more is
    /// refused.
    #[arg(long, default_value = "256", value_parser = at_least_one)]
    max_mcp_sessions: usize,
    /// Where file history is kept (default: the user's state folder).
    #[arg(long)]
    history_dir: Option<PathBuf>,
    /// Keep no file history.
    #[arg(long, conflicts_with = "history_dir")]
    no_history: bool,
    /// Refuse every write whose read is stale, even a replace or an append
    /// that cannot overwrite unseen work (anchored edits off).
    #[arg(long)]
    strict_gate: bool,
    /// Seconds a hot file stays claimed for the agent a write to it was
    /// refused `Stale` (other writers wait for its retry, reads never do);
    /// 0 turns claims off.
    #[arg(long, default_value = "10", value_parser = seconds)]
    claim_ttl: Duration,
    /// A JSON file of Config knobs: max_actors, max_writers, case,
    /// portable_names, sensitive_names, read_roots, file_op_wait_ms, session,
    /// events_ring.
    #[arg(long)]
    config: Option<PathBuf>,
    /// How many events /events keeps for readers that lag or reconnect
    /// (default 4096; overrides the config file's events_ring).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    events_ring: Option<usize>,
    /// Skip fsync (for tests and demos).
    #[arg(long, hide = true)]
    no_fsync: bool,
    /// Keep the session's table in etcd at these endpoints (comma
    /// separated, e.g. http://10.0.0.5:2379,http://10.0.0.6:2379), so that
    /// several servers, on several machines, serve one session (needs a writ
    /// built with `--features etcd`, and --session).
    #[arg(
        long,
        value_name = "ENDPOINTS",
        value_delimiter = ',',
        requires = "session"
    )]
    etcd: Vec<String>,
    /// The session's name in etcd: every server given the same name (and
    /// the same session token) serves the same table.
    #[arg(long, value_name = "NAME", requires = "etcd")]
    session: Option<String>,
    /// With --etcd: seconds within which a deadlock between servers is
    /// refused (and the longest a missed wake-up can go unnoticed).
    #[arg(long, default_value = "1", value_parser = seconds, requires = "etcd")]
    deadlock_check: Duration,
    /// With --etcd: the most operations etcd accepts in one transaction
    /// (etcd's own --max-txn-ops); a request that needs more is refused.
    #[arg(long, default_value = "128", value_parser = at_least_one, requires = "etcd")]
    max_txn_ops: usize,
    /// The file the session token is kept in (made mode 0600 with a fresh
    /// token if missing; it may be made group-readable, e.g. for a
    /// Prometheus scrape). Servers of one etcd session need the same token:
    /// give them one file (default: the user's state folder for ROOT).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Stop by itself once no client has been connected for this many
    /// seconds (no request in flight, an MCP stream or event stream held
    /// open counting as one, and none within the window). Without it the
    /// server runs until stopped; the server a `writ mcp` starts for its
    /// folder is given 600.
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    idle_exit: Option<Duration>,
    /// Stop the server running for ROOT instead.
    #[arg(long)]
    stop: bool,
}

/// Where a command finds a running server.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The workspace whose server to ask (default: the current folder).
    root: Option<PathBuf>,
    /// The server's URL (http://HOST:PORT or unix:PATH) instead of the
    /// discovery file.
    #[arg(long, conflicts_with = "root")]
    url: Option<String>,
    /// The token to use with --url (default: $WRIT_TOKEN).
    #[arg(long, requires = "url")]
    token: Option<String>,
    /// Where the discovery file is (default: ROOT/.writ).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

fn root_or_cwd(root: Option<PathBuf>) -> Result<PathBuf, String> {
    let root = match root {
        Some(r) => r,
        None => std::env::current_dir().map_err(|e| format!("no current folder: {e}"))?,
    };
    std::fs::canonicalize(&root).map_err(|e| format!("{}: {e}", root.display()))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Runs `writ serve`.
pub fn serve(cmd: ServeCmd) -> ExitCode {
    match serve_inner(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writ serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_inner(cmd: ServeCmd) -> Result<(), String> {
    let root = root_or_cwd(cmd.root.clone())?;
    let discovery = server::discovery_path(&root, cmd.state_dir.as_deref());
    if cmd.stop {
        return stop(&discovery);
    }
    // A discovery file found here stops this start only if it names a live
    // writ server: one that answers with that file's token. A stale file,
    // or one planted with any live pid, does not.
    if let Ok(found) = server::read_discovery(&discovery) {
        if found.pid != std::process::id() && answers_with_token(&found.url, &found.token) {
            return Err(format!(
                "a server already runs for {} at {} (pid {}); stop it with `writ serve --stop`",
                root.display(),
                found.url,
                found.pid
            ));
        }
    }
    refuse_nested(&root)?;
    let mut config = writ::Config::default()
        .anchored_edits(!cmd.strict_gate)
        .claim_ttl(cmd.claim_ttl);
    if cmd.no_fsync {
        config = config.durability(writ::Durability::Process);
    }
    let state = server::state_dir(&root).map_err(|e| e.to_string())?;
    if !cmd.no_history {
        let history = match cmd.history_dir.clone() {
            Some(dir) => dir,
            None => state.join("history"),
        };
        std::fs::create_dir_all(&history).map_err(|e| format!("{}: {e}", history.display()))?;
        config = config.history_dir(history);
    }
    let mut options = Options::new(&root)
        .listen(cmd.listen)
        .lease_ttl(cmd.lease_ttl)
        .call_wait(cmd.call_wait)
        .mcp_idle(cmd.mcp_idle)
        .max_body(cmd.max_body)
        .header_timeout(cmd.header_timeout)
        .max_connections(cmd.max_connections)
        .max_targets(cmd.max_targets)
        .max_mcp_sessions(cmd.max_mcp_sessions)
        .mcp_tools(cmd.mcp_tools)
        .config(config)
        .discovery_file(&discovery)
        .stop_on_signal()
        .token_file(
            cmd.token_file
                .clone()
                .unwrap_or_else(|| state.join("session-token")),
        );
    if let Some(idle) = cmd.idle_exit {
        options = options.idle_exit(idle);
    }
    if let Some(session) = &cmd.session {
        options = with_etcd(options, &cmd, session)?;
    }
    if let Some(socket) = &cmd.socket {
        options = options.socket(socket);
    }
    let mut knobs = match &cmd.config {
        Some(file) => {
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
            serde_json::from_str::<ConfigFile>(&text)
                .map_err(|e| format!("{}: {e}", file.display()))?
        }
        None => ConfigFile::default(),
    };
    if cmd.events_ring.is_some() {
        knobs.events_ring = cmd.events_ring;
    }
    options = options.config_file(knobs);
    runtime()?.block_on(async move {
        let server = Server::start(options).await.map_err(|e| e.to_string())?;
        println!("writ serve: {} for {}", server.url(), root.display());
        println!(
            "{}",
            live_page_line(&server, &discovery, std::io::stdout().is_terminal())
        );
        if let Some(session) = &cmd.session {
            println!("table: etcd session '{session}' at {}", cmd.etcd.join(","));
        }
        if let Some(socket) = server.socket() {
            println!("socket: {}", socket.display());
        }
        println!("discovery file: {}", discovery.display());
        server.wait().await;
        println!("writ serve: stopped; every hold released");
        Ok(())
    })
}

/// The live page's line. The page reads the token from the fragment,
/// which the browser never sends; a terminal is the session owner's, but
/// standard output sent to a file or a pipe (a journal, `> serve.log`) is
/// read by others, so there the link goes without the token, with where
/// to find it (SPEC §13).
fn live_page_line(server: &Server, discovery: &Path, terminal: bool) -> String {
    if terminal {
        format!("live page: {}/#token={}", server.url(), server.token())
    } else {
        format!(
            "live page: {}/ (add #token=TOKEN with the token of {}; not printed, as this output is not a terminal)",
            server.url(),
            discovery.display()
        )
    }
}

#[cfg(feature = "etcd")]
fn with_etcd(options: Options, cmd: &ServeCmd, session: &str) -> Result<Options, String> {
    let table = writ::etcd::TableOptions::default()
        .deadlock_check(cmd.deadlock_check)
        .max_txn_ops(cmd.max_txn_ops);
    Ok(options.etcd(cmd.etcd.iter().cloned(), session, table))
}

#[cfg(not(feature = "etcd"))]
fn with_etcd(_: Options, _: &ServeCmd, _: &str) -> Result<Options, String> {
    Err("this writ was built without etcd; build it with `cargo install writ-sched --features etcd` (needs protoc)".into())
}

fn stop(discovery: &Path) -> Result<(), String> {
    let found = server::read_discovery(discovery).map_err(|_| {
        format!(
            "no server is running here (no {}); nothing to stop",
            discovery.display()
        )
    })?;
    runtime()?.block_on(async {
        let session = writ::remote::Session::connect(&endpoint(&found), &found.token)
            .await
            .map_err(|e| e.to_string())?;
        session
            .call("session.stop", serde_json::json!({}))
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(())
    })?;
    // Gone only once the process has exited: the discovery file goes
    // first, the process after it has released everything and flushed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while discovery.exists() || process_alive(found.pid) {
        if Instant::now() > deadline {
            return Err(format!(
                "the server (pid {}) did not stop within 10 s",
                found.pid
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("writ serve: stopped the server at {}", found.url);
    Ok(())
}

/// Whether process `pid` still runs: it exists and is not a zombie
/// waiting for its parent to reap it (it has exited by then).
fn process_alive(pid: u32) -> bool {
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        return !matches!(state, Some("Z" | "X"));
    }
    if std::path::Path::new("/proc/self/stat").exists() {
        return false;
    }
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

/// Refuses to serve `root` when a live server already serves a folder
/// holding it: two tables over one file would let agents of each write
/// what the other holds. The outer server is named, to be used instead.
fn refuse_nested(root: &Path) -> Result<(), String> {
    for outer in root.ancestors().skip(1) {
        let Ok(found) = server::read_discovery(&server::discovery_path(outer, None)) else {
            continue;
        };
        if found.pid != std::process::id() && answers_with_token(&found.url, &found.token) {
            return Err(format!(
                "{} is inside {}, which a server already serves at {} (pid {}); \
                 point this session's clients at that server, or stop it with \
                 `writ serve --stop {}` first",
                root.display(),
                outer.display(),
                found.url,
                found.pid,
                outer.display()
            ));
        }
    }
    Ok(())
}

/// Whether a writ server at `url` (loopback, as the discovery rules
/// require) answers `session.info` with `token`, within two seconds.
pub(crate) fn answers_with_token(url: &str, token: &str) -> bool {
    use std::io::{Read as _, Write as _};
    let Some(authority) = url.strip_prefix("http://").map(|r| r.trim_end_matches('/')) else {
        return false;
    };
    let Ok(mut addrs) = std::net::ToSocketAddrs::to_socket_addrs(authority) else {
        return false;
    };
    let Some(addr) = addrs.next() else {
        return false;
    };
    let limit = Duration::from_secs(2);
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, limit) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(limit));
    let _ = stream.set_write_timeout(Some(limit));
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"session.info"}"#;
    let request = format!(
        "POST /rpc HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.starts_with("HTTP/1.1 200") && answer.contains("\"result\"")
}

/// Where to reach a server found in a discovery file: its socket when it
/// has one (no TCP, and only its user can connect), else its URL.
fn endpoint(found: &server::Discovery) -> String {
    match found.socket.as_deref().and_then(Path::to_str) {
        Some(socket) => format!("unix:{socket}"),
        None => found.url.clone(),
    }
}

pub(crate) fn locate(target: TargetArgs) -> Result<(String, String), String> {
    lookup(target, endpoint)
}

/// Like `locate`, but always the server's loopback URL: for readers that
/// stream over TCP (`writ top`), which a `unix:` endpoint would not reach.
pub(crate) fn locate_http(target: TargetArgs) -> Result<(String, String), String> {
    lookup(target, |found| found.url.clone())
}

fn lookup(
    target: TargetArgs,
    pick: fn(&server::Discovery) -> String,
) -> Result<(String, String), String> {
    if let Some(url) = target.url {
        let token = match target.token.or_else(|| std::env::var("WRIT_TOKEN").ok()) {
            Some(t) => t,
            None => return Err("--url needs --token or $WRIT_TOKEN".into()),
        };
        return Ok((url, token));
    }
    let root = root_or_cwd(target.root)?;
    let path = server::discovery_path(&root, target.state_dir.as_deref());
    let found = server::read_discovery(&path).map_err(|_| {
        format!(
            "no server is running for {} (no {})",
            root.display(),
            path.display()
        )
    })?;
    Ok((pick(&found), found.token))
}

/// Runs `writ dump`.
pub fn dump(target: TargetArgs, json: bool) -> ExitCode {
    let result = locate(target).and_then(|(url, token)| {
        runtime()?.block_on(async move {
            let session = writ::remote::Session::connect(&url, &token)
                .await
                .map_err(|e| e.to_string())?;
            if json {
                let dump = session.dump().await.map_err(|e| e.to_string())?;
                serde_json::to_string_pretty(&dump).map_err(|e| e.to_string())
            } else {
                session.dump_table().await.map_err(|e| e.to_string())
            }
        })
    });
    match result {
        Ok(text) => {
            println!("{}", text.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("writ dump: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `writ release --agent NAME`: `agent.release` on the server.
pub fn release_agent(target: TargetArgs, name: &str) -> ExitCode {
    let result = locate(target).and_then(|(url, token)| {
        runtime()?.block_on(async move {
            let session = writ::remote::Session::connect(&url, &token)
                .await
                .map_err(|e| e.to_string())?;
            session
                .call("agent.release", serde_json::json!({ "name": name }))
                .await
                .map_err(|e| e.to_string())
        })
    });
    match result {
        Ok(answer) if answer["released"].as_u64().unwrap_or(0) > 0 => {
            println!(
                "writ release: agent '{}' released, with every reservation it held",
                writ::text::escape(name)
            );
            ExitCode::SUCCESS
        }
        Ok(_) => {
            eprintln!(
                "writ release: no agent named '{}' on this server (gone already, or never named so)",
                writ::text::escape(name)
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("writ release: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `writ status`: exit 0 and the URL when a server answers, else 1.
pub fn status(target: TargetArgs) -> ExitCode {
    let result = locate(target).and_then(|(url, token)| {
        runtime()?.block_on(async move {
            let session = writ::remote::Session::connect(&url, &token)
                .await
                .map_err(|e| e.to_string())?;
            let info = session.info().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((url, info))
        })
    });
    match result {
        Ok((url, info)) => {
            println!(
                "running at {url} (root {}, protocol {}, version {})",
                info["root"].as_str().unwrap_or("?"),
                info["protocol"].as_str().unwrap_or("?"),
                info["version"].as_str().unwrap_or("?"),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("not running: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `writ __hold URL TOKEN TARGET`: fences TARGET, says "held", then keeps
/// its lease alive until the process is killed. The reliability tests kill
/// it with SIGKILL and expect the server to free the fence within the TTL.
pub fn hold(url: &str, token: &str, target: &str) -> ExitCode {
    let result = runtime().and_then(|rt| {
        rt.block_on(async {
            let session = writ::remote::Session::connect(url, token)
                .await
                .map_err(|e| e.to_string())?;
            let info = session.info().await.map_err(|e| e.to_string())?;
            let root = PathBuf::from(info["root"].as_str().unwrap_or("."));
            let actor = session
                .actor("held", writ::Grant::workspace(root))
                .await
                .map_err(|e| e.to_string())?;
            let fence = actor.fence([target]).await.map_err(|e| e.to_string())?;
            println!("held {}", fence.id());
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            std::future::pending::<()>().await;
            drop((fence, actor));
            Ok::<_, String>(())
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writ __hold: {e}");
            ExitCode::FAILURE
        }
    }
}
