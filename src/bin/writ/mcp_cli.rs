//! `writ mcp`: writ's file tools for one agent over MCP on stdio, bridged to
//! the folder's `writ serve` — started here, detached, when none runs — or,
//! with `--private` only, on a scheduler of its own that coordinates nobody
//! else.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rmcp::ServiceExt;
use writ::mcp::{Identity, ToolOptions, ToolServer, ToolSet};
use writ::{Config, Grant, Scheduler};

/// Serve writ's file tools over MCP on stdin/stdout.
#[derive(Debug, Args)]
pub struct McpCmd {
    /// The workspace the agent works in (default: the current folder).
    root: Option<PathBuf>,
    /// The tool set: writ (writ's own) or filesystem (the tools of the
    /// reference filesystem server, gated).
    #[arg(long, default_value = "writ", value_name = "SET")]
    tools: ToolSet,
    /// Seconds a write to a contested path waits before it is refused.
    #[arg(long, default_value_t = 3.0, value_name = "SECS")]
    call_wait: f64,
    /// The agent's name: every session with the same name (and token)
    /// shares one actor, its reads and its reservations. Without it, the
    /// client's own name (clientInfo) names a fresh actor.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Where file history goes (default: the user's state folder, outside
    /// the workspace). With --private only.
    #[arg(long, value_name = "DIR")]
    history_dir: Option<PathBuf>,
    /// Bridge to the `writ serve` at this URL instead of reading
    /// ROOT/.writ/serve.json.
    #[cfg(feature = "remote")]
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// The token for --url (an actor token acts as that actor; default:
    /// $WRIT_TOKEN).
    #[cfg(feature = "remote")]
    #[arg(long, requires = "url", value_name = "TOKEN")]
    token: Option<String>,
    /// Never bridge: serve on a scheduler of this process alone, even when
    /// a server runs for ROOT. Nothing is shared with any other agent; the
    /// tools' instructions and `writ_status` say so.
    #[arg(long, alias = "embedded", conflicts_with = "url")]
    private: bool,
    /// When no server runs for ROOT, the one this starts stops by itself
    /// after this many seconds without a client.
    #[arg(long, default_value_t = 600.0, value_name = "SECS")]
    idle_exit: f64,
    /// Refuse every write whose read is stale, even a replace or an append
    /// that cannot overwrite unseen work (anchored edits off). With
    /// --private only: bridged, the server's `--strict-gate` decides.
    #[arg(long)]
    strict_gate: bool,
}

/// A duration from seconds given on the command line.
fn seconds(value: f64, flag: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("{flag} must be a number of seconds of 0 or more, got {value}"))
}

/// Where `writ serve` keeps the history of `root`, so that `writ history`
/// finds both.
#[cfg(feature = "server")]
fn default_history_dir(root: &Path) -> Option<PathBuf> {
    writ::server::default_history_dir(root).ok()
}

/// `$XDG_STATE_HOME/writ/<hash of root>/history`, else under
/// `~/.local/state`: per workspace, outside it.
#[cfg(not(feature = "server"))]
fn default_history_dir(root: &Path) -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Some(state.join("writ").join(hash).join("history"))
}

pub fn run(cmd: McpCmd) -> ExitCode {
    match serve(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writ mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// The server to bridge to: `--url`, else the folder's server — started
/// now if none runs ([`ensure_server`]). None only with
/// `--private`.
#[cfg(feature = "remote")]
fn server_for(cmd: &McpCmd, root: &Path) -> Result<Option<(String, String)>, String> {
    if let Some(url) = &cmd.url {
        let token = cmd
            .token
            .clone()
            .or_else(|| std::env::var("WRIT_TOKEN").ok())
            .unwrap_or_default();
        return Ok(Some((url.clone(), token)));
    }
    if cmd.private {
        return Ok(None);
    }
    let idle_exit = seconds(cmd.idle_exit, "--idle-exit")?;
    ensure_server(root, idle_exit).map(Some)
}

fn serve(cmd: McpCmd) -> Result<(), String> {
    let call_wait = seconds(cmd.call_wait, "--call-wait")?;
    let root = cmd.root.clone().unwrap_or_else(|| PathBuf::from("."));
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot use {} as the workspace: {e}", root.display()))?;
    if cmd.strict_gate && !cmd.private {
        return Err(
            "--strict-gate applies to a --private session; a bridged one follows its server's \
             own `writ serve --strict-gate`"
                .into(),
        );
    }
    let runtime = runtime()?;
    #[cfg(feature = "remote")]
    if let Some((url, token)) = server_for(&cmd, &root)? {
        let tools = (cmd.tools == ToolSet::Filesystem).then_some("filesystem");
        // After a restart the server is found again the same way: by the
        // discovery file, or at the same --url.
        let discover: crate::mcp_bridge::Discover = match &cmd.url {
            Some(_) => {
                let (url, token) = (url.clone(), token.clone());
                Box::new(move || Some((url.clone(), token.clone())))
            }
            // Found again, or started again, as at first: a bridge never
            // falls back to coordinating only itself.
            None => {
                let root = root.clone();
                let idle_exit = seconds(cmd.idle_exit, "--idle-exit")?;
                Box::new(move || ensure_server(&root, idle_exit).ok())
            }
        };
        let bridge = crate::mcp_bridge::Bridge {
            tools,
            agent: cmd.agent.as_deref(),
            discover,
        };
        let bridged = runtime.block_on(crate::mcp_bridge::run(&url, &token, bridge));
        // Stopped by a signal, the bridge leaves a read of stdin blocked on
        // its own thread, which no one can cancel: waiting for it would
        // keep the process alive until the client wrote another line.
        runtime.shutdown_background();
        return bridged;
    }
    let mut config = Config::default().anchored_edits(!cmd.strict_gate);
    if let Some(dir) = cmd.history_dir.or_else(|| default_history_dir(&root)) {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create the history folder {}: {e}", dir.display()))?;
        config = config.history_dir(dir);
    }
    let sched = Scheduler::new(config);
    let lead = sched
        .actor("mcp", Grant::workspace(&root))
        .map_err(|e| e.to_string())?;
    let lead = Arc::new(lead);
    let identity = match &cmd.agent {
        Some(name) => {
            let actor = lead
                .child(name.clone(), Grant::workspace(&root))
                .map_err(|e| e.to_string())?;
            Identity::agent(&writ::mcp::Agent::new(Arc::new(actor)))
        }
        None => Identity::children_of(lead.clone()),
    };
    let server = ToolServer::new(
        identity,
        ToolOptions::default()
            .call_wait(call_wait)
            .tools(cmd.tools)
            .private(true),
    );
    runtime.block_on(async move {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| format!("the MCP session did not start: {e}"))?;
        running
            .waiting()
            .await
            .map(drop)
            .map_err(|e| format!("the MCP session failed: {e}"))
    })
}

/// The URL and token of the server named by `discovery`, if it answers
/// with that token (a stale or planted file does not count).
#[cfg(feature = "remote")]
fn live_server(discovery: &Path) -> Option<(String, String)> {
    let found = writ::server::read_discovery(discovery).ok()?;
    crate::serve_cli::answers_with_token(&found.url, &found.token)
        .then_some((found.url, found.token))
}

/// The folder's server: the one running, else one started now — the same
/// `writ serve ROOT` a person would start, with `--idle-exit`, detached
/// (its own process group, so it outlives this bridge and its client's
/// signals), its output in `serve.log` in the user's state folder for ROOT.
///
/// Two bridges starting at once start one server: whoever holds the lock
/// (`serve.lock` beside the log, `flock`ed) starts it and waits until it
/// answers; the other then finds it.
#[cfg(feature = "remote")]
fn ensure_server(root: &Path, idle_exit: Duration) -> Result<(String, String), String> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    use std::os::unix::process::CommandExt as _;
    use std::time::Instant;
    let discovery = writ::server::discovery_path(root, None);
    if let Some(found) = live_server(&discovery) {
        return Ok(found);
    }
    let state = writ::server::state_dir(root).map_err(|e| e.to_string())?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state)
        .map_err(|e| format!("cannot create {}: {e}", state.display()))?;
    let private_file = |name: &str, append: bool| {
        let path = state.join(name);
        std::fs::OpenOptions::new()
            .read(!append)
            .write(!append)
            .append(append)
            .create(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))
    };
    let lock = private_file("serve.lock", false)?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("cannot lock {}: {e}", state.join("serve.lock").display()))?;
    // Whoever held the lock before may have started it.
    if let Some(found) = live_server(&discovery) {
        return Ok(found);
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this program to start `writ serve`: {e}"))?;
    let log_path = state.join("serve.log");
    let mut log = private_file("serve.log", true)?;
    let _ = writeln!(
        log,
        "writ mcp (pid {}): no server ran for {}; starting `writ serve --idle-exit {}`",
        std::process::id(),
        root.display(),
        idle_exit.as_secs_f64()
    );
    let err = log
        .try_clone()
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let mut child = std::process::Command::new(exe)
        .arg("serve")
        .arg(root)
        .arg("--idle-exit")
        .arg(idle_exit.as_secs_f64().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start `writ serve`: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        if let Some(found) = live_server(&discovery) {
            break found;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "`writ serve {}` ended ({status}) before it answered; see {}",
                root.display(),
                log_path.display()
            ));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "`writ serve {}` did not answer within 20 s; see {}",
                root.display(),
                log_path.display()
            ));
        }
        // Polling a file another process writes: nothing to wait on.
        std::thread::sleep(Duration::from_millis(20));
    };
    // Reaped when it ends, so it never lingers as a zombie of this bridge.
    std::thread::spawn(move || child.wait());
    Ok(found)
}
