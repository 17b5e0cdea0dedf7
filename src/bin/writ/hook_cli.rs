//! `writ hook claude-code`: Claude Code's PreToolUse / PostToolUse hook for
//! its built-in file tools, so that edits that bypass MCP are still admitted
//! through the running `writ serve`.
//!
//! Each event is a fresh process, so what must outlive it lives elsewhere:
//! the actor of a Claude Code session and its call reservations live on the
//! server (under the actor's lease, renewed by every event), and so does
//! the history of its writes: PreToolUse snapshots the file's pre-image
//! (`history.snapshot`), PostToolUse journals the post-image as the
//! actor's write (`history.record`) in the session's current turn — one
//! turn per user prompt (`UserPromptSubmit`), named
//! `claude-code-<session>-<n>` — so `history.rewind` of that turn puts
//! back what the built-in tool overwrote. The session's
//! read marks (sha256 of each file as its hooked `Read` saw it, or as its own
//! write left it) and the handles of its open reservations live in a state
//! file beside the discovery file (`<state dir>/hooks/<session>.json`, mode
//! 0600).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Hooks for coding agents' built-in tools.
#[derive(Debug, Args)]
pub struct HookCmd {
    #[command(subcommand)]
    agent: HookAgent,
}

#[derive(Debug, Subcommand)]
enum HookAgent {
    /// Claude Code: PreToolUse/PostToolUse for Write|Edit|MultiEdit|NotebookEdit, and Read.
    ClaudeCode(ClaudeCode),
}

#[derive(Debug, Args)]
struct ClaudeCode {
    /// The workspace whose server to use (default: the nearest folder above
    /// the file with `.writ/serve.json`).
    root: Option<PathBuf>,
    /// The server's URL instead of the discovery file.
    #[arg(long)]
    url: Option<String>,
    /// The token for --url (default: $WRIT_TOKEN).
    #[arg(long, requires = "url")]
    token: Option<String>,
    /// Where the discovery file is (default: ROOT/.writ).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Seconds after which a reservation whose PostToolUse never came is
    /// released.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    hook_ttl: f64,
}

/// The fields of a hook event writ uses (Claude Code's documented shape).
#[derive(Debug, Deserialize)]
struct Event {
    session_id: String,
    hook_event_name: String,
    /// Absent on events that are not about a tool (UserPromptSubmit).
    #[serde(default)]
    tool_name: String,
    #[serde(default)]
    tool_input: Value,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
}

/// What one Claude Code session keeps between events.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    actor: Option<String>,
    token: Option<String>,
    /// Absolute path → sha256 of the content this session last saw.
    marks: BTreeMap<PathBuf, String>,
    /// Open reservations by tool use: (hold handle, path, taken at, in ms).
    holds: BTreeMap<String, (String, PathBuf, u64)>,
    /// User prompts seen: the number of the current turn.
    #[serde(default)]
    prompts: u64,
}

impl State {
    /// The turn this session's writes belong to now.
    fn turn(&self, event: &Event) -> String {
        format!("claude-code-{}-{}", short(&event.session_id), self.prompts)
    }
}

const WRITES: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

pub fn run(cmd: HookCmd) -> ExitCode {
    let HookAgent::ClaudeCode(args) = cmd.agent;
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("writ hook: cannot read the event: {e}");
        return ExitCode::SUCCESS;
    }
    let event: Event = match serde_json::from_str(&input) {
        Ok(e) => e,
        Err(e) => {
            // Not an event writ understands: stay out of the way.
            eprintln!("writ hook: not a Claude Code hook event ({e}); allowing");
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("writ hook: {e}");
            return ExitCode::SUCCESS;
        }
    };
    match runtime.block_on(handle(&args, &event)) {
        Ok(Some(reason)) => {
            tracing::info!(
                tool = %event.tool_name,
                path = event.tool_input["file_path"].as_str().unwrap_or_default(),
                claude_session = %event.session_id,
                %reason,
                "hook denied"
            );
            let out = json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }});
            println!("{out}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            // writ being unreachable must not stop the agent's work; say why.
            eprintln!("writ hook: {e}");
            ExitCode::SUCCESS
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn file_of(event: &Event) -> Option<PathBuf> {
    let input = &event.tool_input;
    let path = input
        .get("file_path")
        .or_else(|| input.get("notebook_path"))
        .and_then(Value::as_str)?;
    let path = PathBuf::from(path);
    Some(match (&event.cwd, path.is_absolute()) {
        (Some(cwd), false) => cwd.join(path),
        _ => path,
    })
}

fn sha256_of(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// A session with the first of `urls` that answers (a socket that does not
/// answer falls back to the next), or the last one's error.
async fn connect(urls: &[String], token: &str) -> Result<writ::remote::Session, String> {
    let mut last = "no server address".to_string();
    for url in urls {
        match writ::remote::Session::connect(url, token).await {
            Ok(session) => return Ok(session),
            Err(writ::Error::Unavailable { reason }) => last = reason,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(last)
}

/// A name fit for a file and an actor: the session id's safe characters.
fn short(session: &str) -> String {
    let safe: String = session
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(36)
        .collect();
    if safe.is_empty() {
        "session".into()
    } else {
        safe
    }
}

/// The served root a file lies under: the nearest folder above it that
/// has a discovery file.
fn served_root(file: &Path) -> Option<PathBuf> {
    file.ancestors()
        .skip(1)
        .find(|dir| std::fs::symlink_metadata(dir.join(".writ").join("serve.json")).is_ok())
        .map(Path::to_path_buf)
}

/// Whether a path lies in a `.writ` folder (where the session token is).
fn in_writ_folder(path: &Path) -> bool {
    path.components().any(|c| {
        c.as_os_str()
            .to_string_lossy()
            .eq_ignore_ascii_case(".writ")
    })
}

/// Handles one event; `Some(reason)` denies the tool call.
async fn handle(args: &ClaudeCode, event: &Event) -> Result<Option<String>, String> {
    let is_write = WRITES.contains(&event.tool_name.as_str());
    let prompt = event.hook_event_name == "UserPromptSubmit";
    if !prompt && !is_write && event.tool_name != "Read" {
        return Ok(None);
    }
    let path = file_of(event);
    if path.is_none() && !prompt {
        return Ok(None);
    }
    let before_write = is_write && event.hook_event_name == "PreToolUse";
    if let Some(path) = path.as_deref().filter(|p| is_write && in_writ_folder(p)) {
        return Ok(before_write.then(|| {
            format!(
                "{} is in writ's own folder (.writ/, where the session token is); no agent writes there.",
                path.display()
            )
        }));
    }
    let root = match (&args.root, &path) {
        (Some(root), _) => root.clone(),
        (None, Some(path)) => match served_root(path) {
            Some(root) => root,
            None if args.url.is_some() => event.cwd.clone().unwrap_or_else(|| PathBuf::from(".")),
            // Not under any served root: not writ's business.
            None => return Ok(None),
        },
        (None, None) => event.cwd.clone().unwrap_or_else(|| PathBuf::from(".")),
    };
    let root = root.canonicalize().unwrap_or(root);
    // A write under a served root is denied while its server cannot be
    // reached: allowing it would let it overwrite another agent's work.
    let unreachable = |why: String| {
        if before_write {
            Ok(Some(format!(
                "writ serve for {} cannot be reached ({why}); the write is denied so no other agent's work is overwritten. Start `writ serve` there and retry.",
                root.display()
            )))
        } else {
            Err(why)
        }
    };
    let discovery = args
        .state_dir
        .clone()
        .unwrap_or_else(|| root.join(".writ"))
        .join("serve.json");
    // Where to reach the server, best first: a discovery file's socket
    // before its URL, as the client libraries do.
    let (urls, token) = match &args.url {
        Some(url) => (
            vec![url.clone()],
            args.token
                .clone()
                .or_else(|| std::env::var("WRIT_TOKEN").ok())
                .unwrap_or_default(),
        ),
        None => match writ::server::read_discovery(&discovery) {
            Ok(found) => {
                let socket = found.socket.map(|s| format!("unix:{}", s.display()));
                (socket.into_iter().chain([found.url]).collect(), found.token)
            }
            Err(e) => return unreachable(e.to_string()),
        },
    };
    let store = writ::server::state_dir(&root)
        .map_err(|e| e.to_string())?
        .join("hooks")
        .join(format!("{}.json", short(&event.session_id)));
    let mut state: State = match writ::server::read_private(&store) {
        Ok(text) => text
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default(),
        Err(e) => {
            eprintln!("writ hook: starting afresh: {e}");
            State::default()
        }
    };
    let admin = match connect(&urls, &token).await {
        Ok(session) => session,
        Err(e) => return unreachable(e),
    };
    let mut own = Own::new(urls, admin);
    let ttl = Duration::try_from_secs_f64(args.hook_ttl).unwrap_or(Duration::from_secs(60));
    release_expired(&mut own, &mut state, ttl).await;
    let decision = match (event.hook_event_name.as_str(), is_write, path) {
        ("UserPromptSubmit", _, _) => {
            next_turn(&mut own, &mut state, event).await;
            None
        }
        ("PreToolUse", true, Some(path)) => {
            pre_write(&mut own, &mut state, event, &path, &root).await?
        }
        ("PostToolUse", true, Some(path)) => {
            post_write(&mut own, &mut state, event, &path).await;
            None
        }
        ("PostToolUse", false, Some(path)) => {
            match sha256_of(&path) {
                Some(hash) => state.marks.insert(path, hash),
                None => state.marks.remove(&path),
            };
            None
        }
        _ => None,
    };
    save(&store, &state)?;
    Ok(decision)
}

fn save(store: &Path, state: &State) -> Result<(), String> {
    let text = serde_json::to_string(state).map_err(|e| e.to_string())?;
    writ::server::write_private(store, text.as_bytes()).map_err(|e| e.to_string())
}

/// The sessions of one event: the session token's, used only to make the
/// Claude Code session's actor, and the actor's own, used for everything
/// else.
struct Own {
    urls: Vec<String>,
    admin: writ::remote::Session,
    session: Option<(String, writ::remote::Session)>,
}

impl Own {
    fn new(urls: Vec<String>, admin: writ::remote::Session) -> Self {
        Own {
            urls,
            admin,
            session: None,
        }
    }

    /// A session that acts as the state's actor, with its own token.
    async fn of(&mut self, state: &State) -> Result<&writ::remote::Session, String> {
        let token = state
            .token
            .clone()
            .ok_or_else(|| "the session's actor has no token".to_string())?;
        if self.session.as_ref().is_none_or(|(t, _)| *t != token) {
            let session = connect(&self.urls, &token).await?;
            self.session = Some((token, session));
        }
        match &self.session {
            Some((_, session)) => Ok(session),
            None => Err("no session".into()),
        }
    }
}

/// The session's actor on the server, made on first use (or again after
/// its lease lapsed) with the session token.
async fn actor(own: &Own, state: &mut State, event: &Event, root: &Path) -> Result<String, String> {
    // A stored actor may have lapsed; the caller finds out from its next
    // call (`unknown_actor`) and asks again with `state.actor` cleared.
    if let (Some(actor), Some(_)) = (&state.actor, &state.token) {
        return Ok(actor.clone());
    }
    let made = own
        .admin
        .call(
            "actor.create",
            json!({"name": name_of(event), "grant": {"workspace": true, "root": root}}),
        )
        .await
        .map_err(|e| e.to_string())?;
    let handle = made["actor"].as_str().unwrap_or_default().to_string();
    state.actor = Some(handle.clone());
    state.token = made["token"].as_str().map(str::to_string);
    state.holds.clear();
    own.admin
        .call(
            "turn.set",
            json!({"actor": handle, "turn": state.turn(event)}),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(handle)
}

/// A user prompt starts the session's next turn; an actor made later
/// starts in it.
async fn next_turn(own: &mut Own, state: &mut State, event: &Event) {
    state.prompts += 1;
    if let Some(actor) = state.actor.clone() {
        let turn = state.turn(event);
        let set = match own.of(state).await {
            Ok(session) => session
                .call("turn.set", json!({"actor": actor, "turn": turn}))
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if set.is_err() {
            // The actor lapsed: the next write makes a new one in this turn.
            state.actor = None;
        }
    }
}

fn name_of(event: &Event) -> String {
    format!(
        "claude-code-{}",
        short(&event.session_id).chars().take(8).collect::<String>()
    )
}

async fn pre_write(
    own: &mut Own,
    state: &mut State,
    event: &Event,
    path: &Path,
    root: &Path,
) -> Result<Option<String>, String> {
    if let (Some(mark), Some(now)) = (state.marks.get(path), sha256_of(path)) {
        if *mark != now {
            return Ok(Some(format!(
                "{} changed since you last read it (another agent or a person wrote it); read it again and redo your edit on the current content.",
                path.display()
            )));
        }
    }
    let label = format!("claude-code {}", event.tool_name);
    let admit = |actor: String, session: &writ::remote::Session| {
        let params = json!({"actor": actor, "targets": [path], "wait": false, "label": label});
        let session = session.clone();
        async move { session.call("admit", params).await }
    };
    let mut actor = actor(own, state, event, root).await?;
    let mut hold = admit(actor.clone(), own.of(state).await?).await;
    if matches!(
        hold,
        Err(writ::Error::UnknownActor { .. } | writ::Error::UnknownLease { .. })
    ) {
        // The lease lapsed between events: start over once.
        state.actor = None;
        state.token = None;
        actor = self::actor(own, state, event, root).await?;
        hold = admit(actor.clone(), own.of(state).await?).await;
    }
    let hold = match hold {
        Ok(hold) => hold["hold"].as_str().unwrap_or_default().to_string(),
        Err(e) => return Ok(Some(e.to_string())),
    };
    let session = own.of(state).await?;
    // The pre-image goes into history before the tool may run: a write
    // that could not be rewound is refused, as writ's own writes are.
    let snapshot = session
        .call("history.snapshot", json!({"actor": actor, "path": path}))
        .await;
    if let Err(e) = snapshot {
        let _ = session.call("release", json!({"hold": hold})).await;
        return Ok(Some(e.to_string()));
    }
    let key = event
        .tool_use_id
        .clone()
        .unwrap_or_else(|| path.display().to_string());
    state
        .holds
        .insert(key, (hold, path.to_path_buf(), now_ms()));
    Ok(None)
}

async fn post_write(own: &mut Own, state: &mut State, event: &Event, path: &Path) {
    let key = event
        .tool_use_id
        .clone()
        .unwrap_or_else(|| path.display().to_string());
    if let Some((hold, _, _)) = state.holds.remove(&key) {
        match own.of(state).await {
            Ok(session) => {
                // Journaled while the reservation still stands, so nothing
                // else wrote the file between the tool and the record.
                if let Some(actor) = &state.actor {
                    let recorded = session
                        .call("history.record", json!({"actor": actor, "path": path}))
                        .await;
                    if let Err(e) = recorded {
                        eprintln!(
                            "writ hook: the write to {} was not recorded in history: {e}",
                            path.display()
                        );
                    }
                }
                let _ = session.call("release", json!({"hold": hold})).await;
            }
            Err(e) => eprintln!("writ hook: cannot release the reservation: {e}"),
        }
    }
    // The session's own write is what it now knows of the file.
    match sha256_of(path) {
        Some(hash) => state.marks.insert(path.to_path_buf(), hash),
        None => state.marks.remove(path),
    };
}

/// Releases reservations whose PostToolUse never came, with the actor's
/// own token (a hold of another actor named in the state is refused).
async fn release_expired(own: &mut Own, state: &mut State, ttl: Duration) {
    let cutoff = now_ms().saturating_sub(ttl.as_millis() as u64);
    let expired: Vec<String> = state
        .holds
        .iter()
        .filter(|(_, (_, _, at))| *at < cutoff)
        .map(|(k, _)| k.clone())
        .collect();
    if expired.is_empty() {
        return;
    }
    let Ok(session) = own.of(state).await else {
        state.holds.clear();
        return;
    };
    let session = session.clone();
    for key in expired {
        if let Some((hold, _, _)) = state.holds.remove(&key) {
            let _ = session.call("release", json!({"hold": hold})).await;
        }
    }
}
