//! The one hook engine every coding CLI's vocabulary maps onto (SPEC §14
//! "Hooks"): an agent per session and per subagent, its lease renewed by
//! every event, a reservation from before a built-in write to after it, the
//! pre-image snapshotted and the post-image recorded, read marks of what the
//! tool returned to the model, and a decision on every write under a served
//! root — any error there is a deny with its sentence (fail closed).
//!
//! Each event is a fresh process, so what must outlive it lives elsewhere:
//! actors, reservations and history on the server; which agent is which,
//! its read marks and its open reservations in a state file per session in
//! the user's state folder (`<state>/hooks/<session>.json`, 0600), read and
//! written under a lock beside it, because a CLI runs the hooks of parallel
//! subagents at once.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// How the hook finds its server, shared by every vocabulary.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The workspace whose server to use, instead of walking up from the file.
    pub root: Option<PathBuf>,
    /// The server's URL instead of the discovery file.
    pub url: Option<String>,
    /// The token for `url`.
    pub token: Option<String>,
    /// Where the discovery file is (default: ROOT/.writ).
    pub state_dir: Option<PathBuf>,
    /// A reservation whose after-event never came is released after this.
    pub hook_ttl: Duration,
}

/// Who acts: a client session, and within it a subagent (none for the
/// main conversation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// The client's session id.
    pub session: String,
    /// The subagent's id, when a subagent acts.
    pub agent: Option<String>,
}

/// One file a write changes.
#[derive(Debug, Clone)]
pub struct Change {
    pub path: PathBuf,
    pub kind: Kind,
}

/// How a write changes a file, which says what the agent must have seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Replaces the whole content: needs a mark over a whole view (SPEC §6).
    Whole,
    /// Replaces text it names: needs a mark of any view.
    Edit,
    /// Replaces text the tool itself finds by its context, and fails when
    /// that text is gone (a Codex patch hunk, a delete): the client shows
    /// the hook no reads, so no mark is asked for.
    Anchored,
    /// Makes a file that must not exist yet (a patch's `Add File`, a
    /// move's destination): over an existing file it would replace unseen
    /// work whole.
    Create,
}

/// What a read tool returned to the model.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Lines `start..start+count` (1-based) of a file of `total` lines;
    /// `cut` when the tool stopped short of what was asked.
    Lines {
        content: String,
        start: u64,
        count: u64,
        total: u64,
        cut: bool,
    },
    /// Text whose place in the file is not said.
    Text(String),
    /// Nothing the hook can compare (an image, a notebook, an old client):
    /// the file on disk stands for what was read.
    Disk,
    /// Part of the file on disk, as the client describes it.
    DiskPart(String),
}

/// One event, in the engine's words.
#[derive(Debug, Clone)]
pub enum Step {
    /// A user prompt: the session's next turn.
    Prompt,
    /// Anything else the client reports (a task notification, a read
    /// about to run): it renews the agent's lease and changes nothing.
    Renew,
    /// A read tool returned what it saw of each file (one, or several
    /// for a tool that reads many at once).
    AfterRead { reads: Vec<(PathBuf, Seen)> },
    /// A write tool is about to change these files (all or none).
    BeforeWrite { call: String, changes: Vec<Change> },
    /// The write tool `call` ran (or failed) on these files.
    AfterWrite { call: String, paths: Vec<PathBuf> },
    /// A subagent ended: its reservations and its actor go, and so does
    /// `mcp_agent`, the agent its calls of writ's MCP tools acted as
    /// (named by the hook, so no MCP session ends with the subagent).
    AgentStop { mcp_agent: Option<String> },
}

impl Step {
    fn paths(&self) -> Vec<&Path> {
        match self {
            Step::AfterRead { reads } => reads.iter().map(|(p, _)| p.as_path()).collect(),
            Step::BeforeWrite { changes, .. } => changes.iter().map(|c| c.path.as_path()).collect(),
            Step::AfterWrite { paths, .. } => paths.iter().map(PathBuf::as_path).collect(),
            _ => Vec::new(),
        }
    }
}

/// The engine's answer; each vocabulary prints it its client's way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to say: the tool runs.
    Pass,
    /// The tool must not run; the sentence tells the model why.
    Deny(String),
}

/// One event for one vocabulary: `prefix` names its actors
/// (`claude-code-<session>`), `cwd` resolves relative paths and finds the
/// root of events that name no file.
pub struct Event {
    pub prefix: &'static str,
    pub who: Who,
    pub step: Step,
    pub cwd: Option<PathBuf>,
}

/// The name an agent goes by, in the spelling writ uses for a child named
/// agent (`PARENT/CHILD`): `prefix-<session8>` for the main conversation,
/// `prefix-<session8>/<agent8>` for a subagent.
pub fn agent_name(prefix: &str, who: &Who) -> String {
    let session = eight(&who.session);
    match &who.agent {
        None => format!("{prefix}-{session}"),
        Some(agent) => format!("{prefix}-{session}/{}", eight(agent)),
    }
}

/// Eight characters that tell an id apart: its first eight, except for a
/// UUIDv7 (Codex CLI's session ids), which begins with its creation time,
/// so that sessions started together share their first eight; its last
/// eight are random.
fn eight(id: &str) -> String {
    let id = short(id);
    let bytes = id.as_bytes();
    let v7 =
        id.len() == 36 && [8, 13, 18, 23].iter().all(|&i| bytes[i] == b'-') && bytes[14] == b'7';
    if v7 {
        id[28..].to_string()
    } else {
        id.chars().take(8).collect()
    }
}

/// Handles one event. A write under a served root always gets a decision:
/// an error on its way is a deny that says what went wrong.
pub fn decide(settings: &Settings, event: &Event) -> Decision {
    let write = matches!(event.step, Step::BeforeWrite { .. });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return failed(write, &e.to_string()),
    };
    match runtime.block_on(handle(settings, event)) {
        Ok(decision) => decision,
        Err(e) => failed(write, &e),
    }
}

/// An error: a deny before a write, a note on stderr otherwise.
fn failed(write: bool, why: &str) -> Decision {
    if write {
        Decision::Deny(format!(
            "writ could not judge this write ({why}); it is denied so that no other agent's work is overwritten. Retry the call; if this repeats, check `writ serve` for this folder."
        ))
    } else {
        eprintln!("writ hook: {why}");
        Decision::Pass
    }
}

/// What one client session keeps between events.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    /// User prompts seen: the number of the session's current turn.
    prompts: u64,
    /// The main conversation (key "") and each live subagent (its id).
    agents: BTreeMap<String, Agent>,
}

/// One agent of a session.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Agent {
    /// Its actor on the server and that actor's own token.
    actor: Option<(String, String)>,
    /// The turn (prompt number) its actor was last set to.
    turn: Option<u64>,
    /// Absolute path → what this agent last saw of it.
    marks: BTreeMap<PathBuf, Mark>,
    /// Open reservations by tool call.
    holds: BTreeMap<String, Held>,
}

/// What an agent saw of a file: the sha256 of the whole file as it was
/// (or, when what the tool returned is not the file now, of what it
/// returned, which matches no current content) and how much of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mark {
    sha256: String,
    /// `None` for a whole view; else what was seen ("lines 1-40 of 300").
    partial: Option<String>,
}

/// A reservation from before a write to after it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Held {
    hold: String,
    paths: Vec<PathBuf>,
    at_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The sha256 of a file now; `None` when it does not exist. An existing
/// file that cannot be read is an error: the hook cannot judge it.
fn sha256_of(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(hex(&bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// A name fit for a file and an actor: the id's safe characters.
fn short(id: &str) -> String {
    let safe: String = id
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

/// Where a client's shell tool call sits in its hook event: the event
/// and tool names that carry it, the key of its input, and the keys that
/// may name its working folder (relative to the event's `cwd`).
pub struct ShellCall {
    pub event: &'static str,
    pub tool_key: &'static str,
    pub tool: &'static str,
    pub input_key: &'static str,
    pub dir_keys: &'static [&'static str],
}

impl ShellCall {
    /// The call's input and the folder its command runs in, for
    /// [`wrap_shell`]; `None` when `event` is not this call.
    pub fn of(&self, event: &Value) -> Option<(Value, Option<PathBuf>)> {
        let text = |key: &str| event.get(key).and_then(Value::as_str);
        if text("hook_event_name")? != self.event || text(self.tool_key)? != self.tool {
            return None;
        }
        let input = event.get(self.input_key)?.clone();
        let cwd = text("cwd").map(PathBuf::from);
        let dir = self
            .dir_keys
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str))
            .map(|d| absolute(d, cwd.as_deref()))
            .or(cwd);
        Some((input, dir))
    }
}

/// The agent name of the hook's actor of a client whose events name the
/// session only (`PREFIX-<session8>`).
pub fn session_agent(prefix: &str, event: &Value) -> Option<String> {
    let session = event.get("session_id")?.as_str()?;
    Some(agent_name(
        prefix,
        &Who {
            session: session.to_string(),
            agent: None,
        },
    ))
}

/// `input` with its `command` sent through `writ run` as `agent` (SPEC
/// §17), for a shell tool whose command runs in `dir`; `None` where it
/// cannot be: no served root at or above `dir` (not writ's business), no
/// command, a command already wrapped, or no path to this binary. The
/// wrapped line names this binary by the path it runs from, so the command
/// reaches the same writ the client's hooks call.
pub fn wrap_shell(dir: Option<&Path>, agent: &str, mut input: Value) -> Option<Value> {
    let dir = dir?;
    served_root(&dir.join("-"))?;
    let command = input.get("command")?.as_str()?.trim();
    if command.is_empty() {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let writ = exe.to_str()?;
    let line = writ::run::wrapped_command_line(writ, agent, command);
    // The part before the command: a line that starts with it already runs
    // through writ (a hook that fires twice, or a model that wrapped it).
    let head = writ::run::wrapped_command_line(writ, agent, "");
    let head = head.strip_suffix("''").unwrap_or(&head);
    if command.starts_with(head) {
        return None;
    }
    input["command"] = Value::String(line);
    Some(input)
}

/// The files a patch in the `apply_patch` format (`*** Begin Patch`, as
/// Codex CLI and opencode write them) changes, in the order it names them.
pub fn patch_changes(patch: &str, cwd: Option<&Path>) -> Result<Vec<Change>, String> {
    let mut out: Vec<Change> = Vec::new();
    for line in patch.lines() {
        let line = line.trim_end();
        let (kind, path) = if let Some(p) = line.strip_prefix("*** Add File: ") {
            (Kind::Create, p)
        } else if let Some(p) = line.strip_prefix("*** Update File: ") {
            (Kind::Anchored, p)
        } else if let Some(p) = line.strip_prefix("*** Delete File: ") {
            (Kind::Anchored, p)
        } else if let Some(p) = line.strip_prefix("*** Move to: ") {
            (Kind::Create, p)
        } else {
            continue;
        };
        let path = absolute(path.trim(), cwd);
        if !out.iter().any(|c| c.path == path) {
            out.push(Change { path, kind });
        }
    }
    if out.is_empty() {
        return Err("the patch names no file".into());
    }
    Ok(out)
}

/// Whether a path lies in a `.writ` folder (where the session token is).
fn in_writ_folder(path: &Path) -> bool {
    path.components().any(|c| {
        c.as_os_str()
            .to_string_lossy()
            .eq_ignore_ascii_case(".writ")
    })
}

/// A session with the first of `urls` that answers (a socket that does not
/// answer falls back to the next), or the last one's error.
async fn connect(urls: &[String], token: &str) -> Result<writ::remote::Session, writ::Error> {
    let mut last = writ::Error::Unavailable {
        reason: "no server address".into(),
    };
    for url in urls {
        match writ::remote::Session::connect(url, token).await {
            Ok(session) => return Ok(session),
            Err(e @ writ::Error::Unavailable { .. }) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Whether an error means the actor (or its token) is gone: its lease
/// lapsed, it was dropped, or the server restarted.
fn lapsed(e: &writ::Error) -> bool {
    matches!(
        e,
        writ::Error::UnknownActor { .. }
            | writ::Error::UnknownLease { .. }
            | writ::Error::UnknownHold { .. }
            | writ::Error::Forbidden { .. }
            | writ::Error::Protocol {
                kind: writ::ProtocolError::Unauthorized,
                ..
            }
    )
}

/// The state file of one session, locked for as long as this value lives
/// (an exclusive `flock` on a lock file beside it, waited for at most
/// `LOCK_WAIT`), so parallel hook processes of one session read and write
/// it one at a time.
struct Locked {
    store: PathBuf,
    _lock: File,
}

const LOCK_WAIT: Duration = Duration::from_secs(20);

impl Locked {
    fn open(root: &Path, session: &str) -> Result<Locked, String> {
        let dir = writ::server::state_dir(root)
            .map_err(|e| e.to_string())?
            .join("hooks");
        // The folder is made private by writing a file into it once; the
        // lock file itself is never replaced, as a lock on a replaced file
        // would exclude nobody.
        if std::fs::symlink_metadata(&dir).is_err() {
            writ::server::write_private(&dir.join("private"), b"").map_err(|e| e.to_string())?;
        }
        let lock_path = dir.join(format!("{}.lock", short(session)));
        let lock = {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&lock_path)
                .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?
        };
        let start = Instant::now();
        loop {
            use rustix::fs::{FlockOperation, flock};
            match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(format!(
                        "another hook of this session held its state for {} s",
                        LOCK_WAIT.as_secs()
                    ));
                }
                Err(e) => {
                    return Err(format!("cannot lock {}: {e}", lock_path.display()));
                }
            }
        }
        Ok(Locked {
            store: dir.join(format!("{}.json", short(session))),
            _lock: lock,
        })
    }

    fn load(&self) -> State {
        match writ::server::read_private(&self.store) {
            Ok(text) => text
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default(),
            Err(e) => {
                eprintln!("writ hook: starting afresh: {e}");
                State::default()
            }
        }
    }

    fn save(&self, state: &State) -> Result<(), String> {
        let text = serde_json::to_string(state).map_err(|e| e.to_string())?;
        writ::server::write_private(&self.store, text.as_bytes()).map_err(|e| e.to_string())
    }
}

/// Resolves a tool's path against the event's folder.
pub fn absolute(path: &str, cwd: Option<&Path>) -> PathBuf {
    let path = PathBuf::from(path);
    match (cwd, path.is_absolute()) {
        (Some(cwd), false) => cwd.join(path),
        _ => path,
    }
}

async fn handle(settings: &Settings, event: &Event) -> Result<Decision, String> {
    let write = matches!(event.step, Step::BeforeWrite { .. });
    let paths = event.step.paths();
    if let Some(path) = paths.iter().find(|p| write && in_writ_folder(p)) {
        return Ok(Decision::Deny(format!(
            "{} is in writ's own folder (.writ/, where the session token is); no agent writes there.",
            path.display()
        )));
    }
    let cwd = event.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
    let root = match (&settings.root, paths.first()) {
        (Some(root), _) => root.clone(),
        (None, Some(path)) => match served_root(path) {
            Some(root) => root,
            None if settings.url.is_some() => cwd.clone(),
            // Not under any served root: not writ's business.
            None => return Ok(Decision::Pass),
        },
        // An event about no file belongs to the folder the client runs in.
        // (`served_root` looks above a file: a name inside the folder.)
        (None, None) => match served_root(&cwd.join("-")) {
            Some(root) => root,
            None if settings.url.is_some() => cwd.clone(),
            None => return Ok(Decision::Pass),
        },
    };
    if let Some(other) = paths.iter().find(|p| !p.starts_with(&root)) {
        if write && settings.root.is_none() && served_root(other) != Some(root.clone()) {
            return Ok(Decision::Deny(format!(
                "{} lies in another served folder than {}; change the files of one folder per call.",
                other.display(),
                root.display()
            )));
        }
    }
    let root = root.canonicalize().unwrap_or(root);
    let unreachable = |why: String| {
        if write {
            Ok(Decision::Deny(format!(
                "writ serve for {} cannot be reached ({why}); the write is denied so no other agent's work is overwritten. Start `writ serve` there and retry.",
                root.display()
            )))
        } else {
            Err(why)
        }
    };
    let discovery = settings
        .state_dir
        .clone()
        .unwrap_or_else(|| root.join(".writ"))
        .join("serve.json");
    // Where to reach the server, best first: a discovery file's socket
    // before its URL, as the client libraries do.
    let (urls, token) = match &settings.url {
        Some(url) => (
            vec![url.clone()],
            settings
                .token
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
    let admin = match connect(&urls, &token).await {
        Ok(session) => session,
        Err(e) => return unreachable(e.to_string()),
    };
    let locked = Locked::open(&root, &event.who.session)?;
    let mut state = locked.load();
    let mut run = Run {
        urls,
        admin,
        sessions: BTreeMap::new(),
        root: root.clone(),
        prefix: event.prefix,
        session: event.who.session.clone(),
    };
    run.release_expired(&mut state, settings.hook_ttl).await;
    let key = event.who.agent.clone().unwrap_or_default();
    let decision = match &event.step {
        Step::Prompt => {
            state.prompts += 1;
            run.set_turns(&mut state).await;
            Decision::Pass
        }
        Step::Renew => {
            run.renew(&mut state, &key).await;
            Decision::Pass
        }
        Step::AfterRead { reads } => {
            run.renew(&mut state, &key).await;
            let agent = state.agents.entry(key).or_default();
            for (path, seen) in reads {
                match mark_of(path, seen)? {
                    Some(mark) => agent.marks.insert(path.clone(), mark),
                    None => agent.marks.remove(path),
                };
            }
            Decision::Pass
        }
        Step::BeforeWrite { call, changes } => {
            run.before_write(&mut state, &key, call, changes).await?
        }
        Step::AfterWrite { call, paths } => {
            run.after_write(&mut state, &key, call, paths).await?;
            Decision::Pass
        }
        Step::AgentStop { mcp_agent } => {
            if !key.is_empty() {
                run.stop(&mut state, &key).await;
            }
            if let Some(name) = mcp_agent {
                // What it reserved through writ's tools would otherwise
                // stay for `--mcp-idle` after the subagent's end.
                let _ = run.admin.call("agent.release", json!({"name": name})).await;
            }
            Decision::Pass
        }
    };
    locked.save(&state)?;
    Ok(decision)
}

/// The mark of what a read tool returned: the file's hash when what it
/// returned is what the file holds now (whole or in part), else a hash of
/// what it returned, which no current content matches, so the agent's next
/// write is told the file changed since.
fn mark_of(path: &Path, seen: &Seen) -> Result<Option<Mark>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let disk = hex(&bytes);
    let text = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
    let lines: Vec<&str> = text.lines().collect();
    // A tool may shorten very long lines; what it shows must begin each.
    let same = |shown: &[&str], file: &[&str]| {
        shown.len() == file.len() && shown.iter().zip(file).all(|(s, f)| f.starts_with(s))
    };
    // The same, when each shown line carries its number as the model saw
    // it (`cat -n`'s "     1\t", or "1→").
    let numbered = |shown: &[&str], file: &[&str], start: u64| {
        let bare: Option<Vec<&str>> = shown
            .iter()
            .zip(start..)
            .map(|(line, n)| {
                let rest = line.trim_start().strip_prefix(&n.to_string())?;
                rest.strip_prefix('\t').or_else(|| rest.strip_prefix('→'))
            })
            .collect();
        bare.is_some_and(|bare| same(&bare, file))
    };
    let other = |shown: &str| hex(format!("seen:{shown}").as_bytes());
    Ok(Some(match seen {
        Seen::Disk => Mark {
            sha256: disk,
            partial: None,
        },
        Seen::DiskPart(seen) => Mark {
            sha256: disk,
            partial: Some(seen.clone()),
        },
        Seen::Lines {
            content,
            start,
            count,
            total,
            cut,
        } => {
            let content = content.replace("\r\n", "\n");
            let shown: Vec<&str> = content.lines().collect();
            let first = usize::try_from(start.saturating_sub(1)).unwrap_or(usize::MAX);
            let end = first.saturating_add(shown.len()).min(lines.len());
            let file = lines.get(first.min(end)..end).unwrap_or_default();
            // Counted with or without a last empty line after the final newline.
            let total_now = *total as usize == lines.len() || *total as usize == lines.len() + 1;
            let whole = first == 0 && !cut && shown.len() >= lines.len();
            Mark {
                sha256: if total_now && (same(&shown, file) || numbered(&shown, file, *start)) {
                    disk
                } else {
                    other(&content)
                },
                partial: (!whole).then(|| {
                    format!(
                        "lines {}-{} of {}",
                        start,
                        start
                            + count
                                .saturating_sub(1)
                                .max(shown.len().saturating_sub(1) as u64),
                        total
                    )
                }),
            }
        }
        Seen::Text(shown) => {
            let shown = shown.replace("\r\n", "\n");
            if shown.trim_end_matches('\n') == text.trim_end_matches('\n') {
                Mark {
                    sha256: disk,
                    partial: None,
                }
            } else if !shown.is_empty() && text.contains(shown.as_str()) {
                Mark {
                    sha256: disk,
                    partial: Some(format!("{} of its {} bytes", shown.len(), text.len())),
                }
            } else {
                Mark {
                    sha256: other(&shown),
                    partial: None,
                }
            }
        }
    }))
}

/// The connections of one event: the session token's (used only to make
/// actors) and each agent's own.
struct Run {
    urls: Vec<String>,
    admin: writ::remote::Session,
    sessions: BTreeMap<String, writ::remote::Session>,
    root: PathBuf,
    prefix: &'static str,
    session: String,
}

impl Run {
    /// A connection acting with `token`; opening it renews its lease.
    async fn with(&mut self, token: &str) -> Result<writ::remote::Session, writ::Error> {
        if let Some(session) = self.sessions.get(token) {
            return Ok(session.clone());
        }
        let session = connect(&self.urls, token).await?;
        self.sessions.insert(token.to_string(), session.clone());
        Ok(session)
    }

    /// Every actor of a session shares its main actor's lease: when one is
    /// gone, all are, and each is made again when next needed.
    fn forget_actors(state: &mut State) {
        for agent in state.agents.values_mut() {
            agent.actor = None;
            agent.turn = None;
            agent.holds.clear();
        }
    }

    /// Renews the lease of `key`'s actor (any request with its token
    /// does); a lapsed one is forgotten, to be made again by the next write.
    async fn renew(&mut self, state: &mut State, key: &str) {
        let token = state
            .agents
            .get(key)
            .and_then(|a| a.actor.as_ref())
            .map(|(_, t)| t.clone());
        if let Some(token) = token {
            if let Err(e) = self.with(&token).await {
                if lapsed(&e) {
                    Self::forget_actors(state);
                }
            }
        }
    }

    /// The actor of `key` (the main conversation's for "", else a child
    /// of it), made on first use and again after its lease lapsed, in the
    /// session's current turn.
    async fn actor(&mut self, state: &mut State, key: &str) -> Result<(String, String), String> {
        if !key.is_empty() {
            let has = state.agents.get(key).and_then(|a| a.actor.clone());
            if let Some(actor) = has {
                return self.in_turn(state, key, actor).await;
            }
        }
        let main = match state.agents.get("").and_then(|a| a.actor.clone()) {
            Some(actor) => actor,
            None => {
                let who = Who {
                    session: self.session.clone(),
                    agent: None,
                };
                let made = self.create(&agent_name(self.prefix, &who), None).await?;
                let agent = state.agents.entry(String::new()).or_default();
                agent.actor = Some(made.clone());
                agent.turn = None;
                made
            }
        };
        if key.is_empty() {
            return self.in_turn(state, key, main).await;
        }
        let who = Who {
            session: self.session.clone(),
            agent: Some(key.to_string()),
        };
        let made = self
            .create(&agent_name(self.prefix, &who), Some(&main.0))
            .await?;
        let agent = state.agents.entry(key.to_string()).or_default();
        agent.actor = Some(made.clone());
        agent.turn = None;
        self.in_turn(state, key, made).await
    }

    async fn create(
        &mut self,
        name: &str,
        parent: Option<&str>,
    ) -> Result<(String, String), String> {
        let made = self
            .admin
            .call(
                "actor.create",
                json!({"name": name, "parent": parent,
                       "grant": {"workspace": true, "root": self.root}}),
            )
            .await
            .map_err(|e| e.to_string())?;
        match (made["actor"].as_str(), made["token"].as_str()) {
            (Some(actor), Some(token)) => Ok((actor.to_string(), token.to_string())),
            _ => Err(format!("actor.create answered no actor and token: {made}")),
        }
    }

    /// Puts `key`'s actor in the session's current turn, if it is not.
    async fn in_turn(
        &mut self,
        state: &mut State,
        key: &str,
        actor: (String, String),
    ) -> Result<(String, String), String> {
        let turn = state.prompts;
        if state.agents.get(key).and_then(|a| a.turn) != Some(turn) {
            let session = self.with(&actor.1).await.map_err(|e| e.to_string())?;
            session
                .call(
                    "turn.set",
                    json!({"actor": actor.0, "turn": self.turn_name(turn)}),
                )
                .await
                .map_err(|e| e.to_string())?;
            state.agents.entry(key.to_string()).or_default().turn = Some(turn);
        }
        Ok(actor)
    }

    /// The history turn of the session's `n`th prompt.
    fn turn_name(&self, n: u64) -> String {
        format!("{}-{}-{n}", self.prefix, short(&self.session))
    }

    /// A new prompt: every live actor of the session moves to its turn.
    async fn set_turns(&mut self, state: &mut State) {
        let keys: Vec<String> = state.agents.keys().cloned().collect();
        for key in keys {
            let Some(actor) = state.agents.get(&key).and_then(|a| a.actor.clone()) else {
                continue;
            };
            if let Err(e) = self.in_turn(state, &key, actor).await {
                eprintln!("writ hook: the next write starts the turn: {e}");
                Self::forget_actors(state);
                return;
            }
        }
    }

    /// Reserves every changed file for `key`'s actor, then judges it
    /// against what the agent saw, then snapshots it: all or none.
    async fn before_write(
        &mut self,
        state: &mut State,
        key: &str,
        call: &str,
        changes: &[Change],
    ) -> Result<Decision, String> {
        let targets: Vec<&Path> = changes.iter().map(|c| c.path.as_path()).collect();
        let label = format!("{} write", self.prefix);
        let mut tries = 0;
        let (actor, session, hold) = loop {
            tries += 1;
            let actor = self.actor(state, key).await?;
            let session = match self.with(&actor.1).await {
                Ok(session) => session,
                Err(e) if lapsed(&e) && tries == 1 => {
                    Self::forget_actors(state);
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            };
            let admitted = session
                .call(
                    "admit",
                    json!({"actor": actor.0, "targets": targets, "wait": false, "label": label}),
                )
                .await;
            match admitted {
                Ok(hold) => match hold["hold"].as_str() {
                    Some(hold) => break (actor, session, hold.to_string()),
                    None => return Err(format!("admit answered no hold: {hold}")),
                },
                // The lease lapsed between events (or the server restarted):
                // a new actor judges the call, once.
                Err(e) if lapsed(&e) && tries == 1 => Self::forget_actors(state),
                Err(e) => return Ok(Decision::Deny(e.to_string())),
            }
        };
        let release = |session: writ::remote::Session, hold: String| async move {
            let _ = session.call("release", json!({"hold": hold})).await;
        };
        let agent = state.agents.entry(key.to_string()).or_default();
        for change in changes {
            // Judged inside the reservation: nothing writes between the
            // check and the tool.
            let verdict = match sha256_of(&change.path) {
                Ok(now) => judge(agent.marks.get(&change.path), now.as_deref(), change),
                Err(e) => Some((e, false)),
            };
            if let Some((reason, stale)) = verdict {
                // A stale write leaves the agent a claim on the files it
                // reserved (SPEC §6): its redo is not raced again.
                let released = json!({"hold": hold, "claim": stale});
                let _ = session.call("release", released).await;
                return Ok(Decision::Deny(reason));
            }
        }
        for change in changes {
            // The pre-image goes into history before the tool may run: a
            // write that could not be rewound is refused, as writ's are.
            let snap = session
                .call(
                    "history.snapshot",
                    json!({"actor": actor.0, "path": change.path}),
                )
                .await;
            if let Err(e) = snap {
                release(session, hold).await;
                return Ok(Decision::Deny(e.to_string()));
            }
        }
        agent.holds.insert(
            call.to_string(),
            Held {
                hold,
                paths: changes.iter().map(|c| c.path.clone()).collect(),
                at_ms: now_ms(),
            },
        );
        Ok(Decision::Pass)
    }

    /// Records the tool's write in history while the reservation still
    /// stands, releases it, and marks the agent's own write as seen.
    async fn after_write(
        &mut self,
        state: &mut State,
        key: &str,
        call: &str,
        paths: &[PathBuf],
    ) -> Result<(), String> {
        let (actor, held) = match state.agents.get_mut(key) {
            Some(agent) => (agent.actor.clone(), agent.holds.remove(call)),
            None => (None, None),
        };
        if let (Some((actor, token)), Some(held)) = (actor, held) {
            match self.with(&token).await {
                Ok(session) => {
                    for path in &held.paths {
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
                    let _ = session.call("release", json!({"hold": held.hold})).await;
                }
                Err(e) if lapsed(&e) => Self::forget_actors(state),
                Err(e) => eprintln!("writ hook: cannot release the reservation: {e}"),
            }
        }
        // The agent's own write is what it now knows of the file.
        let agent = state.agents.entry(key.to_string()).or_default();
        for path in paths {
            match sha256_of(path)? {
                Some(sha256) => agent.marks.insert(
                    path.clone(),
                    Mark {
                        sha256,
                        partial: None,
                    },
                ),
                None => agent.marks.remove(path),
            };
        }
        Ok(())
    }

    /// A subagent ended: its reservations are released and its actor
    /// dropped, with its own token.
    async fn stop(&mut self, state: &mut State, key: &str) {
        let Some(agent) = state.agents.remove(key) else {
            return;
        };
        let Some((actor, token)) = agent.actor else {
            return;
        };
        if let Ok(session) = self.with(&token).await {
            for held in agent.holds.values() {
                let _ = session.call("release", json!({"hold": held.hold})).await;
            }
            let _ = session.call("actor.drop", json!({"actor": actor})).await;
        }
    }

    /// Releases reservations whose after-event never came, each with its
    /// agent's own token (a hold of another actor named in the state is
    /// refused by the server).
    async fn release_expired(&mut self, state: &mut State, ttl: Duration) {
        let cutoff = now_ms().saturating_sub(ttl.as_millis() as u64);
        for agent in state.agents.values_mut() {
            let expired: Vec<String> = agent
                .holds
                .iter()
                .filter(|(_, h)| h.at_ms < cutoff)
                .map(|(k, _)| k.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            let session = match &agent.actor {
                Some((_, token)) => self.with(token).await.ok(),
                None => None,
            };
            for key in expired {
                if let (Some(held), Some(session)) = (agent.holds.remove(&key), &session) {
                    let _ = session.call("release", json!({"hold": held.hold})).await;
                }
            }
        }
    }
}

/// Whether an agent may change a file, given what it saw of it (SPEC §6):
/// `None` when it may, else the sentence why not and whether the refusal
/// is `Stale` (the file changed since the agent's read), which leaves the
/// agent a claim on it. A file that does not exist may be created; an
/// existing one needs a mark of its current content, over a whole view
/// when the change replaces it whole.
fn judge(mark: Option<&Mark>, now: Option<&str>, change: &Change) -> Option<(String, bool)> {
    let path = change.path.display();
    let now = now?;
    match change.kind {
        Kind::Anchored => return None,
        Kind::Create => {
            return Some((
                format!(
                    "{path} already exists; adding it would replace its content unseen. Change it with an update of the lines you mean, or pick another name."
                ),
                false,
            ));
        }
        Kind::Whole | Kind::Edit => {}
    }
    let Some(mark) = mark else {
        return Some((
            format!(
                "{path} has not been read by this agent (or writ lost track of the read); read it first, then redo your change."
            ),
            false,
        ));
    };
    if mark.sha256 != now {
        return Some((
            format!(
                "{path} changed since you last read it (another agent or a person wrote it); read it again and redo your edit on the current content."
            ),
            true,
        ));
    }
    match &mark.partial {
        Some(seen) if change.kind == Kind::Whole => Some((
            format!(
                "you have seen only {seen} of {path}, and this write replaces the whole file; read all of it first (no offset or limit), or change the part you saw with an edit."
            ),
            false,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_each_file_it_names() {
        let patch = "*** Begin Patch\n*** Add File: new.txt\n+hi\n*** Update File: src/a.rs\n*** Move to: src/b.rs\n@@\n-x\n+y\n*** Delete File: old.txt\n*** End Patch\n";
        let found = patch_changes(patch, Some(Path::new("/w"))).unwrap_or_default();
        let seen: Vec<(String, Kind)> = found
            .iter()
            .map(|c| (c.path.display().to_string(), c.kind))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("/w/new.txt".into(), Kind::Create),
                ("/w/src/a.rs".into(), Kind::Anchored),
                ("/w/src/b.rs".into(), Kind::Create),
                ("/w/old.txt".into(), Kind::Anchored),
            ]
        );
        assert!(patch_changes("*** Begin Patch\n*** End Patch\n", None).is_err());
    }

    fn change(path: &Path, whole: bool) -> Change {
        Change {
            path: path.to_path_buf(),
            kind: if whole { Kind::Whole } else { Kind::Edit },
        }
    }

    #[test]
    fn a_partial_view_allows_edits_and_refuses_whole_writes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap_or_else(|e| panic!("{e}"));
        let seen = Seen::Lines {
            content: "two\n".into(),
            start: 2,
            count: 1,
            total: 3,
            cut: false,
        };
        let mark = mark_of(&path, &seen).ok().flatten();
        let now = sha256_of(&path).ok().flatten();
        assert!(judge(mark.as_ref(), now.as_deref(), &change(&path, false)).is_none());
        let refused = judge(mark.as_ref(), now.as_deref(), &change(&path, true));
        assert!(
            refused
                .as_ref()
                .map(|(why, _)| why.as_str())
                .is_some_and(|r| r.contains("lines 2-2 of 3")),
            "{refused:?}"
        );
        let whole = Seen::Lines {
            content: "one\ntwo\nthree".into(),
            start: 1,
            count: 3,
            total: 3,
            cut: false,
        };
        let mark = mark_of(&path, &whole).ok().flatten();
        assert!(judge(mark.as_ref(), now.as_deref(), &change(&path, true)).is_none());
    }

    #[test]
    fn numbered_lines_are_the_lines_they_number() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "one\ntwo\n").unwrap_or_else(|e| panic!("{e}"));
        let now = sha256_of(&path).ok().flatten();
        for content in ["     1\tone\n     2\ttwo", "1→one\n2→two"] {
            let seen = Seen::Lines {
                content: content.into(),
                start: 1,
                count: 2,
                total: 2,
                cut: false,
            };
            let mark = mark_of(&path, &seen).ok().flatten();
            assert!(judge(mark.as_ref(), now.as_deref(), &change(&path, true)).is_none());
        }
    }

    #[test]
    fn what_the_tool_returned_counts_not_the_file_after() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "theirs\n").unwrap_or_else(|e| panic!("{e}"));
        let seen = Seen::Lines {
            content: "mine".into(),
            start: 1,
            count: 1,
            total: 1,
            cut: false,
        };
        let mark = mark_of(&path, &seen).ok().flatten();
        let now = sha256_of(&path).ok().flatten();
        let refused = judge(mark.as_ref(), now.as_deref(), &change(&path, false));
        assert!(
            refused
                .as_ref()
                .map(|(why, _)| why.as_str())
                .is_some_and(|r| r.contains("changed since")),
            "{refused:?}"
        );
    }

    #[test]
    fn agent_names_spell_parent_and_child() {
        let main = Who {
            session: "5def7bb7-aaaa-bbbb".into(),
            agent: None,
        };
        assert_eq!(agent_name("claude", &main), "claude-5def7bb7");
        let sub = Who {
            agent: Some("a1b2c3d4e5f6".into()),
            ..main
        };
        assert_eq!(agent_name("claude", &sub), "claude-5def7bb7/a1b2c3d4");
    }

    #[test]
    fn time_ordered_session_ids_are_told_apart_by_their_random_part() {
        let at = |session: &str| {
            agent_name(
                "codex",
                &Who {
                    session: session.into(),
                    agent: None,
                },
            )
        };
        // Two Codex sessions started in the same millisecond.
        let one = at("01a24864-be1f-7211-b05c-cef7ba1876ed");
        let two = at("01a24864-be1f-7cc2-9d01-5a0e33f1c2b9");
        assert_eq!(one, "codex-ba1876ed");
        assert_ne!(one, two);
    }
}
