//! `writ mcp`: writ's file tools for one agent over MCP on stdio, bridged to
//! a running `writ serve` or on a scheduler of its own.

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
    /// the workspace). Embedded mode only.
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
    /// Never bridge: serve on a scheduler of this process even when a
    /// server runs for ROOT.
    #[arg(long)]
    embedded: bool,
    /// Refuse every write whose read is stale, even a replace or an append
    /// that cannot overwrite unseen work (anchored edits off). Embedded
    /// mode only: bridged, the server's `--strict-gate` decides.
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

/// The server to bridge to: `--url`, else a live server named by the
/// discovery file of `root`.
#[cfg(feature = "remote")]
fn server_for(
    cmd: &McpCmd,
    root: &Path,
    runtime: &tokio::runtime::Runtime,
) -> Option<(String, String)> {
    if let Some(url) = &cmd.url {
        let token = cmd
            .token
            .clone()
            .or_else(|| std::env::var("WRIT_TOKEN").ok())
            .unwrap_or_default();
        return Some((url.clone(), token));
    }
    if cmd.embedded {
        return None;
    }
    let found = writ::server::read_discovery(&writ::server::discovery_path(root, None)).ok()?;
    runtime
        .block_on(crate::mcp_bridge::alive(&found.url))
        .then_some((found.url, found.token))
}

fn serve(cmd: McpCmd) -> Result<(), String> {
    let call_wait = seconds(cmd.call_wait, "--call-wait")?;
    let root = cmd.root.clone().unwrap_or_else(|| PathBuf::from("."));
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot use {} as the workspace: {e}", root.display()))?;
    let runtime = runtime()?;
    #[cfg(feature = "remote")]
    if let Some((url, token)) = server_for(&cmd, &root, &runtime) {
        if cmd.strict_gate {
            return Err(format!(
                "--strict-gate applies to an embedded session; this one bridges to {url}, whose \
                 own `writ serve --strict-gate` decides (or pass --embedded)"
            ));
        }
        let tools = (cmd.tools == ToolSet::Filesystem).then_some("filesystem");
        // After a restart the server is found again the same way: by the
        // discovery file, or at the same --url.
        let discover: crate::mcp_bridge::Discover = match &cmd.url {
            Some(_) => {
                let (url, token) = (url.clone(), token.clone());
                Box::new(move || Some((url.clone(), token.clone())))
            }
            None => {
                let path = writ::server::discovery_path(&root, None);
                Box::new(move || {
                    writ::server::read_discovery(&path)
                        .ok()
                        .map(|found| (found.url, found.token))
                })
            }
        };
        let bridge = crate::mcp_bridge::Bridge {
            tools,
            agent: cmd.agent.as_deref(),
            discover,
        };
        return runtime.block_on(crate::mcp_bridge::run(&url, &token, bridge));
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
        ToolOptions::default().call_wait(call_wait).tools(cmd.tools),
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
