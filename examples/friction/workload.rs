//! The friction benchmark's workload: scripted agents that each do `tasks`
//! tasks in one shared folder, and what became of their changes.
//!
//! One task of agent `a` (its `t`-th) is what a coding agent does for a
//! small feature: read a module, think, edit one function of it; read the
//! shared `registry.py` and add a line to it; read `CHANGELOG.md` and
//! append an entry; read `version.py` and bump the patch number. Eight
//! tool calls at the least. Before every call the "model" takes a turn
//! (`turn` seconds), and before the function edit it thinks (`think`
//! seconds); both drawn from a seeded generator per agent.
//!
//! The same agents run in five ways ([`Mode`]): through `writ serve`'s
//! `/mcp` (with anchored edits, as `writ serve` runs by default; with
//! `--strict-gate`, using the current content a refusal carries; or
//! reading again after every refusal as a model told "read it again"
//! does), with a blind whole-file overwrite, and each in its own git
//! worktree merged at the end. The servers keep file history, as `writ
//! serve` does: an anchored edit finds the version its agent read there. An oracle independent of the tools then checks every change
//! each tool accepted against the final files.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_http_client::McpHttp;

/// How the agents share the folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// `writ serve` over MCP with anchored edits (its default): a stale
    /// replace or append that cannot overwrite unseen work is applied;
    /// after a refusal, which carries the current content, the agent
    /// redoes its change on it at once.
    Writ,
    /// As [`Mode::Writ`], with agents on the current MCP revision
    /// (2026-07-28): no `initialize`, no session; each agent's first call
    /// names no agent and is given a handle, which it passes on every later
    /// call, as a model told so does (the handle must cost no call).
    WritModern,
    /// As [`Mode::Writ`] with claims off (`writ serve --claim-ttl 0`): a
    /// stale refusal holds the file for no one, so other agents may write
    /// it again during the refused agent's retry (SPEC §6, "hot files").
    WritNoClaims,
    /// `writ serve --strict-gate` over MCP: every stale write is refused;
    /// the agent redoes its change on the content the refusal carries.
    WritStrict,
    /// `writ serve --strict-gate` over MCP; after every refusal the agent
    /// calls `read_file` before it redoes its change (what agents did
    /// before refusals carried the content).
    WritReread,
    /// Each agent reads a file and writes back the whole file it made of
    /// what it read; nothing checks what happened in between.
    Blind,
    /// Each agent works alone in its own git worktree; at the end the
    /// branches are merged one by one, a conflicted file keeping what was
    /// merged before it.
    Worktree,
}

impl Mode {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Writ => "writ",
            Mode::WritModern => "writ-modern",
            Mode::WritNoClaims => "writ-noclaims",
            Mode::WritStrict => "writ-strict",
            Mode::WritReread => "writ-reread",
            Mode::Blind => "blind",
            Mode::Worktree => "worktree",
        }
    }

    /// Every mode, in the report's order.
    pub const ALL: [Mode; 7] = [
        Mode::Writ,
        Mode::WritModern,
        Mode::WritNoClaims,
        Mode::WritStrict,
        Mode::WritReread,
        Mode::Blind,
        Mode::Worktree,
    ];

    /// Whether the agents go through writ.
    pub fn is_writ(self) -> bool {
        matches!(
            self,
            Mode::Writ
                | Mode::WritModern
                | Mode::WritNoClaims
                | Mode::WritStrict
                | Mode::WritReread
        )
    }

    /// The mode of a command-line name.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// How an agent adds its line to `registry.py`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RegistryEdit {
    /// The list ends in a marker comment, and the agent inserts its line
    /// before it: `old` is the marker line, `new` its line and the marker.
    Marker,
    /// The list has no marker, and the agent writes the edit a model
    /// writes: `old` is the last entry and the closing bracket, `new` the
    /// last entry, its own line and the bracket. Two agents that read the
    /// same last entry insert at one point (SPEC §6, "insertions at one
    /// point are kept both").
    Natural,
}

impl RegistryEdit {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            RegistryEdit::Marker => "marker",
            RegistryEdit::Natural => "natural",
        }
    }

    /// The style of a command-line name.
    pub fn parse(name: &str) -> Option<RegistryEdit> {
        [RegistryEdit::Marker, RegistryEdit::Natural]
            .into_iter()
            .find(|r| r.name() == name)
    }
}

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Params {
    /// Agents working at once.
    pub agents: usize,
    /// Tasks per agent.
    pub tasks: usize,
    /// Seeds the think and turn times.
    pub seed: u64,
    /// Multiplies every think and turn time (1.0: as given below).
    pub time_scale: f64,
    /// Seconds a model thinks before it edits the function (uniform).
    pub think: (f64, f64),
    /// Seconds a model takes before each tool call (uniform).
    pub turn: (f64, f64),
    /// How the agents add their registry line.
    pub registry: RegistryEdit,
    /// Whether the server's call-wait and claim TTL are scaled with the
    /// times (see [`Params::waits`]).
    pub scale_waits: bool,
    /// The server's call-wait at full times (`writ serve`'s default, 3 s).
    pub call_wait: Duration,
}

impl Params {
    /// The hot-file workload: think 0.2–7 s, a turn of 0.2–1.5 s.
    pub fn new(agents: usize, tasks: usize, seed: u64, time_scale: f64) -> Self {
        Params {
            agents,
            tasks,
            seed,
            time_scale,
            think: (0.2, 7.0),
            turn: (0.2, 1.5),
            registry: RegistryEdit::Marker,
            scale_waits: false,
            call_wait: Duration::from_secs(3),
        }
    }

    /// The same, with the registry line added as `registry` says.
    pub fn registry(mut self, registry: RegistryEdit) -> Self {
        self.registry = registry;
        self
    }

    /// The same, with the server's call-wait and claim TTL scaled.
    pub fn scale_waits(mut self, scale: bool) -> Self {
        self.scale_waits = scale;
        self
    }

    /// The same, with the server's call-wait at full times `wait`: clients
    /// whose tool-call timeout is longer than the Agents SDK's 5 s can be
    /// served with a longer one (`writ serve --call-wait`).
    pub fn call_wait(mut self, wait: Duration) -> Self {
        self.call_wait = wait;
        self
    }

    /// The server's call-wait and claim TTL: [`Params::call_wait`] (default
    /// 3 s, `writ serve`'s) and `writ serve`'s claim TTL (10 s), or, with
    /// [`Params::scale_waits`] and a time scale below 1, those times
    /// scaled as the think and turn times are, so that a
    /// writer waits behind as many model turns before it is told `Busy`
    /// as at full times (floors of 0.25 s and 0.5 s: a scaled run's own
    /// scheduling jitter is not a turn).
    pub fn waits(&self) -> (Duration, Duration) {
        let (wait, ttl) = (self.call_wait, writ::DEFAULT_CLAIM_TTL);
        // Also for a scale that is not a number (the times are then
        // refused where they are drawn, not here).
        if !self.scale_waits || self.time_scale.partial_cmp(&1.0) != Some(std::cmp::Ordering::Less)
        {
            return (wait, ttl);
        }
        (
            wait.mul_f64(self.time_scale)
                .max(Duration::from_millis(250)),
            ttl.mul_f64(self.time_scale).max(Duration::from_millis(500)),
        )
    }
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// How the agents shared the folder.
    pub mode: Mode,
    /// The run's shape.
    pub agents: usize,
    /// The seed.
    pub seed: u64,
    /// How the agents added their registry line.
    pub registry: RegistryEdit,
    /// Changes the agents set out to make (four a task).
    pub intended: usize,
    /// Changes a tool accepted.
    pub accepted: usize,
    /// Tasks all four of whose changes were accepted.
    pub landed_tasks: usize,
    /// Accepted changes missing from the final files.
    pub lost: usize,
    /// Changes in the final files that no tool accepted, or twice.
    pub extra: usize,
    /// Tool calls, all agents.
    pub calls: usize,
    /// Refusals by kind and file.
    pub refusals: BTreeMap<(String, String), usize>,
    /// Attempts at a change after a refusal of it.
    pub retries: usize,
    /// Of those, the ones refused again.
    pub retries_refused: usize,
    /// How many changes were refused `n` times in a row before they landed
    /// (or the agent gave up), by `n` (0 is left out).
    pub streaks: BTreeMap<usize, usize>,
    /// Why agents gave up a task (the file and the refusal's first line).
    pub gave_up: Vec<String>,
    /// The longest of those runs, with the file and the refusals' kinds
    /// in order (`version.py: stale, busy`).
    pub longest: (usize, String),
    /// Changes applied on top of others' changes since the agent's read
    /// (anchored edits).
    pub anchored: usize,
    /// Files a merge found in conflict (worktree mode).
    pub conflicts: usize,
    /// From the first call to the last agent's end.
    pub wall: Duration,
    /// The worktree merge after that.
    pub merge: Duration,
}

impl Report {
    /// Tool calls per task whose changes all landed.
    pub fn calls_per_task(&self) -> f64 {
        self.calls as f64 / self.landed_tasks.max(1) as f64
    }
}

/// The least number of tool calls a task takes: a read and a write for
/// each of its four files.
pub const MIN_CALLS: usize = 8;

/// Attempts at one change before the agent gives up on its task.
const MAX_ATTEMPTS: usize = 40;

const REGISTRY: &str = "registry.py";
const CHANGELOG: &str = "CHANGELOG.md";
const VERSION: &str = "version.py";
const REGISTRY_END: &str = "    # end of registry\n";
const REGISTRY_CLOSE: &str = "]\n";

/// splitmix64: a small, seeded, portable generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, agent: usize) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (agent as u64).wrapping_add(1) << 32)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, (low, high): (f64, f64)) -> f64 {
        low + (high - low) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The module task `(a, t)` edits.
fn module_of(agents: usize, a: usize, t: usize) -> String {
    format!("pkg/mod_{}.py", (a + t) % agents)
}

fn function(a: usize, t: usize) -> String {
    format!("def task_{a}_{t}():\n    \"\"\"Task {a}/{t}.\"\"\"\n")
}

fn returned(a: usize, t: usize) -> String {
    format!("    return {}  # a{a}-t{t}\n", 1000 * a + t + 1)
}

fn registry_line(a: usize, t: usize) -> String {
    format!("    \"a{a}-t{t}\",\n")
}

fn changelog_line(a: usize, t: usize) -> String {
    format!("- a{a}-t{t}: task_{a}_{t} returns {}\n", 1000 * a + t + 1)
}

/// Writes the starting tree into `root`; the registry ends in its marker
/// line only for [`RegistryEdit::Marker`].
pub fn seed_tree(
    root: &Path,
    agents: usize,
    tasks: usize,
    registry: RegistryEdit,
) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join("pkg"))?;
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for a in 0..agents {
        for t in 0..tasks {
            let text = modules
                .entry(module_of(agents, a, t))
                .or_insert_with(|| "\"\"\"A module the agents share.\"\"\"\n".to_string());
            text.push_str(&format!("\n\n{}    return 0\n", function(a, t)));
        }
    }
    for (path, text) in modules {
        std::fs::write(root.join(path), text)?;
    }
    let marker = match registry {
        RegistryEdit::Marker => REGISTRY_END,
        RegistryEdit::Natural => "",
    };
    std::fs::write(
        root.join(REGISTRY),
        format!("REGISTRY = [\n{marker}{REGISTRY_CLOSE}"),
    )?;
    std::fs::write(root.join(CHANGELOG), "# Changelog\n\n")?;
    std::fs::write(root.join(VERSION), "__version__ = \"1.0.0\"\n")?;
    Ok(())
}

/// One change of a task, as the agent makes it from what it has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Function,
    Registry,
    Changelog,
    Version,
}

const STEPS: [Step; 4] = [
    Step::Function,
    Step::Registry,
    Step::Changelog,
    Step::Version,
];

/// What a change is: a replacement in, or an addition to, the file.
enum Change {
    Replace { old: String, new: String },
    Append(String),
}

impl Step {
    fn file(self, agents: usize, a: usize, t: usize) -> String {
        match self {
            Step::Function => module_of(agents, a, t),
            Step::Registry => REGISTRY.to_string(),
            Step::Changelog => CHANGELOG.to_string(),
            Step::Version => VERSION.to_string(),
        }
    }

    /// The change, made from `seen` (the file as the agent last saw it).
    fn change(self, a: usize, t: usize, seen: &str, registry: RegistryEdit) -> Option<Change> {
        match self {
            Step::Function => {
                let head = function(a, t);
                let old = format!("{head}    return 0\n");
                seen.contains(&old).then(|| Change::Replace {
                    new: format!("{head}{}", returned(a, t)),
                    old,
                })
            }
            Step::Registry if registry == RegistryEdit::Natural => {
                // The last line before the closing bracket (an entry, or
                // the list's opening line), with the bracket.
                let close = seen.rfind(&format!("\n{REGISTRY_CLOSE}"))? + 1;
                let last = seen[..close - 1].rfind('\n').map_or(0, |i| i + 1);
                Some(Change::Replace {
                    old: seen[last..close + REGISTRY_CLOSE.len()].to_string(),
                    new: format!(
                        "{}{}{REGISTRY_CLOSE}",
                        &seen[last..close],
                        registry_line(a, t)
                    ),
                })
            }
            Step::Registry => seen.contains(REGISTRY_END).then(|| Change::Replace {
                old: REGISTRY_END.to_string(),
                new: format!("{}{REGISTRY_END}", registry_line(a, t)),
            }),
            Step::Changelog => Some(Change::Append(changelog_line(a, t))),
            Step::Version => {
                let patch = version_patch(seen)?;
                Some(Change::Replace {
                    old: format!("__version__ = \"1.0.{patch}\""),
                    new: format!("__version__ = \"1.0.{}\"", patch + 1),
                })
            }
        }
    }
}

fn version_patch(text: &str) -> Option<u64> {
    let rest = text.split("__version__ = \"1.0.").nth(1)?;
    rest.split('"').next()?.parse().ok()
}

/// The text of a `read_file` result (or of the content a refusal carries,
/// after its first blank line): the numbered lines, unnumbered.
fn unnumbered(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut any = false;
    for line in text.lines() {
        let Some((number, rest)) = line.split_once('\t') else {
            continue;
        };
        if !number.trim().is_empty() && number.trim().chars().all(|c| c.is_ascii_digit()) {
            out.push_str(rest);
            out.push('\n');
            any = true;
        }
    }
    any.then_some(out)
}

/// The refusal kind a tool's sentence names.
fn refusal_kind(text: &str) -> &'static str {
    if text.contains("changed since you read it") {
        "stale"
    } else if text.contains("you have not read it") {
        "not_read"
    } else if text.contains("being written by")
        || text.contains("being read by")
        || text.contains("queued to be")
        || text.contains("fenced")
        || text.contains("reserved")
        || text.contains("claimed by")
    {
        "busy"
    } else {
        "other"
    }
}

/// A tool for the agents: writ over MCP, or the plain file system.
enum Tools {
    Mcp {
        client: Box<McpHttp>,
        use_content: bool,
    },
    Disk {
        root: PathBuf,
    },
}

/// One scripted agent.
struct Agent {
    tools: Tools,
    rng: Rng,
    params: Params,
    /// Each file as the agent last saw it.
    seen: HashMap<String, String>,
    calls: usize,
    refusals: BTreeMap<(String, String), usize>,
    retries: usize,
    retries_refused: usize,
    /// Changes by how many times in a row they were refused.
    streaks: BTreeMap<usize, usize>,
    longest: (usize, String),
    /// The kinds of the refusals of the change being made, in order.
    kinds: Vec<&'static str>,
    /// Why it gave up a task, each time it did.
    gave_up: Vec<String>,
    anchored: usize,
    /// Which changes a tool accepted.
    accepted: Vec<(usize, Step)>,
}

impl Agent {
    async fn pause(&mut self, range: (f64, f64)) {
        let secs = self.rng.uniform(range) * self.params.time_scale;
        // The model's turn: what the agent waits for, not synchronization.
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    }

    /// Reads `file` (after a turn; told the file is busy, again after
    /// another, as a model does); false when the read failed.
    async fn read(&mut self, file: &str) -> bool {
        for _ in 0..MAX_ATTEMPTS {
            match self.read_once(file).await {
                Some(true) => return true,
                Some(false) => return false,
                None => {}
            }
        }
        self.gave_up
            .push(format!("{file}: read busy {MAX_ATTEMPTS} times"));
        false
    }

    /// One read; `None` when it was refused `Busy` (counted as a refusal).
    async fn read_once(&mut self, file: &str) -> Option<bool> {
        self.pause(self.params.turn).await;
        self.calls += 1;
        let text = match &mut self.tools {
            Tools::Mcp { client, .. } => {
                let (error, text) = client.call("read_file", json!({ "path": file })).await;
                let shown = if error { None } else { unnumbered(&text) };
                match shown {
                    Some(text) => text,
                    None if error && refusal_kind(&text) == "busy" => {
                        *self
                            .refusals
                            .entry(("busy read".to_string(), file.to_string()))
                            .or_default() += 1;
                        return None;
                    }
                    None => {
                        let first = text.lines().next().unwrap_or_default();
                        self.gave_up.push(format!("{file}: read: {first}"));
                        return Some(false);
                    }
                }
            }
            Tools::Disk { root } => match std::fs::read_to_string(root.join(file)) {
                Ok(text) => text,
                Err(_) => return Some(false),
            },
        };
        self.seen.insert(file.to_string(), text);
        Some(true)
    }

    /// Makes one change (after a turn), retrying as a model would after a
    /// refusal; true when a tool accepted it. Counts its run of refusals.
    async fn change(&mut self, t: usize, step: Step, file: &str, a: usize) -> bool {
        let before = self.refusals.values().sum::<usize>();
        let landed = self.attempt(t, step, file, a).await;
        let streak = self.refusals.values().sum::<usize>() - before;
        if streak > 0 {
            *self.streaks.entry(streak).or_default() += 1;
        }
        let kinds = std::mem::take(&mut self.kinds);
        if streak > self.longest.0 {
            self.longest = (streak, format!("{file}: {}", kinds.join(", ")));
        }
        landed
    }

    async fn attempt(&mut self, t: usize, step: Step, file: &str, a: usize) -> bool {
        for attempt in 0..MAX_ATTEMPTS {
            let retry = attempt > 0;
            self.pause(self.params.turn).await;
            let seen = self.seen.get(file).cloned().unwrap_or_default();
            let Some(change) = step.change(a, t, &seen, self.params.registry) else {
                self.gave_up
                    .push(format!("{file}: no change to make on what was seen"));
                return false;
            };
            self.calls += 1;
            self.retries += usize::from(retry);
            match &mut self.tools {
                Tools::Disk { root } => {
                    let new = match change {
                        Change::Replace { old, new } => seen.replacen(&old, &new, 1),
                        Change::Append(line) => seen + &line,
                    };
                    // Whole and at once (a rename), so that the only
                    // damage is the overwrite itself, never a torn read.
                    static TEMP: AtomicU64 = AtomicU64::new(0);
                    let n = TEMP.fetch_add(1, Ordering::Relaxed);
                    let temp = root.join(format!(".friction-{n}.tmp"));
                    return std::fs::write(&temp, new).is_ok()
                        && std::fs::rename(&temp, root.join(file)).is_ok();
                }
                Tools::Mcp {
                    client,
                    use_content,
                } => {
                    let (tool, args) = match change {
                        Change::Replace { old, new } => (
                            "edit_file",
                            json!({"path": file, "old_string": old, "new_string": new}),
                        ),
                        Change::Append(line) => {
                            ("append_file", json!({"path": file, "content": line}))
                        }
                    };
                    let (error, text) = client.call(tool, args).await;
                    if !error {
                        self.anchored += usize::from(text.contains("applied on top of them"));
                        return true;
                    }
                    self.retries_refused += usize::from(retry);
                    let kind = refusal_kind(&text);
                    self.kinds.push(kind);
                    *self
                        .refusals
                        .entry((kind.to_string(), file.to_string()))
                        .or_default() += 1;
                    let shown = match text.split_once("\n\n") {
                        Some((_, body)) if *use_content => unnumbered(body),
                        _ => None,
                    };
                    match (kind, shown) {
                        ("stale" | "not_read", Some(current)) => {
                            // An append is shown the tail only; it needs no more.
                            if step != Step::Changelog {
                                self.seen.insert(file.to_string(), current);
                            }
                        }
                        ("stale" | "not_read", None) => {
                            if !self.read(file).await {
                                return false;
                            }
                        }
                        ("busy", _) => {}
                        _ => {
                            let first = text.lines().next().unwrap_or_default();
                            self.gave_up.push(format!("{file}: {first}"));
                            return false;
                        }
                    }
                }
            }
        }
        self.gave_up
            .push(format!("{file}: refused {MAX_ATTEMPTS} times"));
        false
    }

    async fn run(mut self, a: usize) -> Agent {
        let agents = self.params.agents;
        for t in 0..self.params.tasks {
            for step in STEPS {
                let file = step.file(agents, a, t);
                if !self.read(&file).await {
                    break;
                }
                if step == Step::Function {
                    self.pause(self.params.think).await;
                }
                if !self.change(t, step, &file, a).await {
                    break;
                }
                self.accepted.push((t, step));
            }
        }
        self
    }
}

/// Runs `git` in `dir`; its success.
fn git(dir: &Path, args: &[&str]) -> std::io::Result<bool> {
    Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=friction",
            "-c",
            "user.email=friction@localhost",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .map(|out| out.status.success())
}

fn git_out(dir: &Path, args: &[&str]) -> std::io::Result<String> {
    Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn must(ok: std::io::Result<bool>, what: &str) -> Result<(), String> {
    match ok {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("git {what} failed")),
        Err(e) => Err(format!("git {what}: {e}")),
    }
}

/// Runs one mode in a fresh folder under `base` and checks the result.
pub async fn run(mode: Mode, params: &Params, base: &Path) -> Result<Report, String> {
    let root = base.join(format!(
        "{}-{}-{}-{}",
        mode.name(),
        params.registry.name(),
        params.agents,
        params.seed
    ));
    let main = root.join("main");
    seed_tree(&main, params.agents, params.tasks, params.registry)
        .map_err(|e| format!("seed: {e}"))?;
    let mut server = None;
    let mut folders: Vec<PathBuf> = vec![main.clone(); params.agents];
    if mode == Mode::Worktree {
        must(git(&main, &["init", "-q", "-b", "main"]), "init")?;
        must(git(&main, &["add", "-A"]), "add")?;
        must(git(&main, &["commit", "-q", "-m", "start"]), "commit")?;
        for (a, folder) in folders.iter_mut().enumerate() {
            *folder = root.join(format!("agent-{a}"));
            let path = folder.display().to_string();
            let branch = format!("agent-{a}");
            must(
                git(&main, &["worktree", "add", "-q", "-b", &branch, &path]),
                "worktree add",
            )?;
        }
    }
    if mode.is_writ() {
        let history = root.join("history");
        std::fs::create_dir_all(&history).map_err(|e| format!("history: {e}"))?;
        let (call_wait, claim_ttl) = params.waits();
        let config = writ::Config::default()
            .history_dir(history)
            .anchored_edits(matches!(
                mode,
                Mode::Writ | Mode::WritModern | Mode::WritNoClaims
            ))
            .claim_ttl(if mode == Mode::WritNoClaims {
                Duration::ZERO
            } else {
                claim_ttl
            });
        let options = writ::server::Options::new(&main)
            .config(config)
            .call_wait(call_wait)
            .lease_ttl(Duration::from_secs(60));
        server = Some(
            writ::server::Server::start(options)
                .await
                .map_err(|e| format!("writ serve: {e}"))?,
        );
    }
    let mut agents = Vec::new();
    for (a, folder) in folders.iter().enumerate() {
        let tools = match &server {
            Some(server) if mode == Mode::WritModern => Tools::Mcp {
                client: Box::new(McpHttp::modern(
                    &format!("{}/mcp", server.url()),
                    server.token(),
                )),
                use_content: true,
            },
            Some(server) => {
                let mut client = McpHttp::new(&format!("{}/mcp", server.url()), server.token())
                    .with_header("Writ-Agent", &format!("agent-{a}"));
                let reply = client.initialize(&format!("agent-{a}")).await;
                if reply.status != 200 {
                    return Err(format!("initialize: {} {}", reply.status, reply.body));
                }
                Tools::Mcp {
                    client: Box::new(client),
                    use_content: mode != Mode::WritReread,
                }
            }
            None => Tools::Disk {
                root: folder.clone(),
            },
        };
        agents.push(Agent {
            tools,
            rng: Rng::new(params.seed, a),
            params: params.clone(),
            seen: HashMap::new(),
            calls: 0,
            refusals: BTreeMap::new(),
            retries: 0,
            retries_refused: 0,
            streaks: BTreeMap::new(),
            longest: (0, String::new()),
            kinds: Vec::new(),
            gave_up: Vec::new(),
            anchored: 0,
            accepted: Vec::new(),
        });
    }
    let start = Instant::now();
    let handles: Vec<_> = agents
        .into_iter()
        .enumerate()
        .map(|(a, agent)| tokio::spawn(agent.run(a)))
        .collect();
    let mut done = Vec::new();
    for handle in handles {
        done.push(handle.await.map_err(|e| format!("agent: {e}"))?);
    }
    let wall = start.elapsed();
    let mut conflicts = 0;
    if mode == Mode::Worktree {
        for (a, folder) in folders.iter().enumerate() {
            must(git(folder, &["add", "-A"]), "add")?;
            must(
                git(folder, &["commit", "-q", "-m", &format!("agent {a}")]),
                "commit",
            )?;
        }
        for a in 0..params.agents {
            let branch = format!("agent-{a}");
            if git(&main, &["merge", "-q", "--no-edit", &branch]).map_err(|e| e.to_string())? {
                continue;
            }
            let conflicted = git_out(&main, &["diff", "--name-only", "--diff-filter=U"])
                .map_err(|e| e.to_string())?;
            for file in conflicted.lines().filter(|l| !l.is_empty()) {
                conflicts += 1;
                must(git(&main, &["checkout", "--ours", "--", file]), "checkout")?;
            }
            must(git(&main, &["add", "-A"]), "add")?;
            must(git(&main, &["commit", "-q", "--no-edit"]), "commit")?;
        }
    }
    let merge = start.elapsed() - wall;
    if let Some(server) = server {
        server.shutdown().await;
    }
    let accepted: Vec<Vec<(usize, Step)>> = done.iter().map(|a| a.accepted.clone()).collect();
    let mut report = check(mode, params, &main, &accepted);
    report.calls = done.iter().map(|a| a.calls).sum();
    report.retries = done.iter().map(|a| a.retries).sum();
    report.retries_refused = done.iter().map(|a| a.retries_refused).sum();
    report.anchored = done.iter().map(|a| a.anchored).sum();
    for agent in &done {
        for (n, count) in &agent.streaks {
            *report.streaks.entry(*n).or_default() += count;
        }
        report.gave_up.extend(agent.gave_up.iter().cloned());
        if agent.longest.0 > report.longest.0 {
            report.longest = agent.longest.clone();
        }
    }
    for agent in &done {
        for (key, n) in &agent.refusals {
            *report.refusals.entry(key.clone()).or_default() += n;
        }
    }
    report.conflicts = conflicts;
    report.wall = wall;
    report.merge = merge;
    Ok(report)
}

/// The oracle: every accepted change must be in the final files once, and
/// nothing else.
fn check(mode: Mode, params: &Params, main: &Path, agents: &[Vec<(usize, Step)>]) -> Report {
    let read = |file: &str| std::fs::read_to_string(main.join(file)).unwrap_or_default();
    let registry = read(REGISTRY);
    let changelog = read(CHANGELOG);
    let mut modules: HashMap<String, String> = HashMap::new();
    let (mut lost, mut extra, mut bumps, mut accepted, mut landed_tasks) = (0, 0, 0u64, 0, 0);
    for (a, agent) in agents.iter().enumerate() {
        for t in 0..params.tasks {
            let mut all = true;
            for step in STEPS {
                let took = agent.contains(&(t, step));
                all &= took;
                accepted += usize::from(took);
                let (text, needle) = match step {
                    Step::Function => {
                        let file = step.file(params.agents, a, t);
                        let text = modules.entry(file.clone()).or_insert_with(|| read(&file));
                        (
                            text.as_str(),
                            format!("{}{}", function(a, t), returned(a, t)),
                        )
                    }
                    Step::Registry => (registry.as_str(), registry_line(a, t)),
                    Step::Changelog => (changelog.as_str(), changelog_line(a, t)),
                    Step::Version => {
                        bumps += u64::from(took);
                        continue;
                    }
                };
                let found = text.matches(&needle).count();
                match (took, found) {
                    (true, 0) => lost += 1,
                    (true, n) => extra += n - 1,
                    (false, n) => extra += n,
                }
            }
            landed_tasks += usize::from(all);
        }
    }
    let version = version_patch(&read(VERSION)).unwrap_or(0);
    lost += bumps.saturating_sub(version) as usize;
    extra += version.saturating_sub(bumps) as usize;
    Report {
        mode,
        agents: params.agents,
        seed: params.seed,
        registry: params.registry,
        intended: params.agents * params.tasks * STEPS.len(),
        accepted,
        landed_tasks,
        lost,
        extra,
        calls: 0,
        refusals: BTreeMap::new(),
        retries: 0,
        retries_refused: 0,
        streaks: BTreeMap::new(),
        longest: (0, String::new()),
        gave_up: Vec::new(),
        anchored: 0,
        conflicts: 0,
        wall: Duration::ZERO,
        merge: Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The oracle sees a change missing, one nobody made, and a version
    /// bump lost, each in the final files alone.
    #[test]
    fn the_oracle_counts_lost_and_extra_changes_from_the_files() {
        for registry in [RegistryEdit::Marker, RegistryEdit::Natural] {
            the_oracle_counts(registry);
        }
    }

    fn the_oracle_counts(registry: RegistryEdit) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        seed_tree(root, 2, 2, registry).unwrap_or_else(|e| panic!("{e}"));
        let params = Params::new(2, 2, 1, 0.0).registry(registry);
        let mut accepted = vec![Vec::new(), Vec::new()];
        // Agent 0 made its whole task 0 (as a tool would have written it).
        for step in STEPS {
            let file = root.join(step.file(2, 0, 0));
            let seen = std::fs::read_to_string(&file).unwrap_or_default();
            let new = match step.change(0, 0, &seen, registry) {
                Some(Change::Replace { old, new }) => seen.replacen(&old, &new, 1),
                Some(Change::Append(line)) => seen + &line,
                None => panic!("{step:?} could not be made"),
            };
            std::fs::write(&file, new).unwrap_or_else(|e| panic!("{e}"));
            accepted[0].push((0, step));
        }
        let report = check(Mode::Blind, &params, root, &accepted);
        assert_eq!((report.lost, report.extra, report.landed_tasks), (0, 0, 1));
        assert_eq!((report.accepted, report.intended), (4, 16));
        // Agent 1 "made" its registry line and version bump, but the files
        // do not show them: two lost.
        accepted[1].push((0, Step::Registry));
        accepted[1].push((0, Step::Version));
        let report = check(Mode::Blind, &params, root, &accepted);
        assert_eq!((report.lost, report.extra), (2, 0));
        // A line no tool accepted is extra.
        let changelog = root.join(CHANGELOG);
        let mut text = std::fs::read_to_string(&changelog).unwrap_or_default();
        text.push_str(&changelog_line(1, 1));
        std::fs::write(&changelog, text).unwrap_or_else(|e| panic!("{e}"));
        let report = check(Mode::Blind, &params, root, &accepted);
        assert_eq!((report.lost, report.extra), (2, 1));
    }

    /// The natural registry edit: the last line before the bracket (the
    /// list's opening line while it is empty), then the bracket; the new
    /// text is that line, the agent's own and the bracket.
    #[test]
    fn the_natural_registry_edit_spans_the_last_entry_and_the_bracket() {
        let empty = "REGISTRY = [\n]\n";
        let Some(Change::Replace { old, new }) =
            Step::Registry.change(1, 2, empty, RegistryEdit::Natural)
        else {
            panic!("no registry edit");
        };
        assert_eq!(old, empty);
        assert_eq!(new, "REGISTRY = [\n    \"a1-t2\",\n]\n");
        let one = "REGISTRY = [\n    \"a0-t0\",\n]\n";
        let Some(Change::Replace { old, new }) =
            Step::Registry.change(1, 2, one, RegistryEdit::Natural)
        else {
            panic!("no registry edit");
        };
        assert_eq!(old, "    \"a0-t0\",\n]\n");
        assert_eq!(new, "    \"a0-t0\",\n    \"a1-t2\",\n]\n");
        assert!(
            Step::Registry
                .change(1, 2, "x\n", RegistryEdit::Natural)
                .is_none()
        );
    }
}
