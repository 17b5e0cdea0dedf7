//! The scripts the real-CLI suite's agents follow, in provider-neutral
//! steps (tests/common/scripted_model.rs): each agent adds its own line to a
//! shared file the way a model would — read it, think, edit what it read —
//! and acts on every refusal by what the refusal says.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::scripted_model::{Script, Seen, Step, ToolCall, ToolResult, think};

/// Which tools an agent edits with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tools {
    /// The CLI's own `Read` and `Edit` (old text → old text + own line).
    BuiltinEdit,
    /// The CLI's own `Read` and `Write` (the whole content read + own line).
    BuiltinWrite,
    /// writ's MCP tools `read_file` and `edit_file`.
    WritEdit,
    /// writ's MCP tools `read_file` and `write_file`.
    WritWrite,
}

impl Tools {
    fn writ(self) -> bool {
        matches!(self, Tools::WritEdit | Tools::WritWrite)
    }
    fn read_tool(self) -> &'static str {
        if self.writ() {
            "mcp__writ__read_file"
        } else {
            "Read"
        }
    }
    fn write_tool(self) -> &'static str {
        match self {
            Tools::BuiltinEdit => "Edit",
            Tools::BuiltinWrite => "Write",
            Tools::WritEdit => "mcp__writ__edit_file",
            Tools::WritWrite => "mcp__writ__write_file",
        }
    }
}

/// How an agent's work ended, as it reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Outcome {
    /// Still working (or its CLI never asked for the next step).
    #[default]
    Unfinished,
    /// The CLI said the write that carries its line succeeded.
    Landed,
    /// It stopped after this many refused or failed writes.
    GaveUp(usize),
}

/// Where an agent reports how its work ended; read by the test's oracle.
pub type Report = Arc<Mutex<Outcome>>;

/// A meeting point: every agent that reaches it waits until `parties` have,
/// so that all of them write on what they read before anyone wrote (the
/// contended case). Bounded: a party that never comes releases the others
/// after `patience`, so a broken run fails instead of hanging.
pub struct Rendezvous {
    arrived: Mutex<usize>,
    all_here: Condvar,
    parties: usize,
    patience: Duration,
}

impl Rendezvous {
    /// A meeting point for `parties` agents.
    pub fn new(parties: usize, patience: Duration) -> Arc<Rendezvous> {
        Arc::new(Rendezvous {
            arrived: Mutex::new(0),
            all_here: Condvar::new(),
            parties,
            patience,
        })
    }

    /// Whether every party came (so all of them read before any wrote).
    pub fn all_met(&self) -> bool {
        *self.arrived.lock().unwrap_or_else(|e| e.into_inner()) >= self.parties
    }

    /// Waits for the others (at most `patience`).
    pub fn meet(&self) {
        let mut arrived = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        *arrived += 1;
        self.all_here.notify_all();
        let _ = self
            .all_here
            .wait_timeout_while(arrived, self.patience, |n| *n < self.parties);
    }
}

/// A one-shot signal between agents ("my write landed").
#[derive(Default)]
pub struct Signal {
    set: Mutex<bool>,
    changed: Condvar,
}

impl Signal {
    /// A new, unset signal.
    pub fn new() -> Arc<Signal> {
        Arc::new(Signal::default())
    }
    /// Sets it, waking every waiter.
    pub fn set(&self) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }
    /// Waits until it is set (at most `patience`).
    pub fn wait(&self, patience: Duration) {
        let set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.changed.wait_timeout_while(set, patience, |set| !*set);
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Start,
    Loading,
    Reading,
    Reserving,
    Writing,
    Done,
}

/// One agent adding its line to a shared file.
pub struct Appender {
    tools: Tools,
    /// The path as the tools take it: absolute for the CLI's own tools,
    /// relative to the workspace for writ's.
    path: String,
    line: String,
    /// The pause between reading and writing the first time.
    think: Duration,
    max_writes: usize,
    before_write: Option<Arc<Rendezvous>>,
    wait_for: Option<Arc<Signal>>,
    on_landed: Option<Arc<Signal>>,
    on_first_write_result: Option<Arc<Signal>>,
    on_read: Option<Arc<Signal>>,
    start_after: Option<Arc<Signal>>,
    reserve: Option<(Arc<Signal>, Arc<Signal>)>,
    phase: Phase,
    reads: usize,
    writes: usize,
    content: Vec<String>,
    report: Report,
}

impl Appender {
    /// An agent adding `line` to `file` (under `root`) with `tools`.
    pub fn new(tools: Tools, root: &Path, file: &str, line: &str) -> Appender {
        let path = if tools.writ() {
            file.to_string()
        } else {
            root.join(file).display().to_string()
        };
        Appender {
            tools,
            path,
            line: line.to_string(),
            think: Duration::ZERO,
            max_writes: 8,
            before_write: None,
            wait_for: None,
            on_landed: None,
            on_first_write_result: None,
            on_read: None,
            start_after: None,
            reserve: None,
            phase: Phase::Start,
            reads: 0,
            writes: 0,
            content: Vec::new(),
            report: Report::default(),
        }
    }

    /// Thinks this long between its first read and its first write.
    pub fn thinking(mut self, pause: Duration) -> Appender {
        self.think = pause;
        self
    }

    /// Meets the other agents at `rendezvous` before its first write.
    pub fn meeting(mut self, rendezvous: Arc<Rendezvous>) -> Appender {
        self.before_write = Some(rendezvous);
        self
    }

    /// Waits for `signal` before its first write (after reading).
    pub fn after(mut self, signal: Arc<Signal>) -> Appender {
        self.wait_for = Some(signal);
        self
    }

    /// Sets `signal` once its write landed.
    pub fn signalling(mut self, signal: Arc<Signal>) -> Appender {
        self.on_landed = Some(signal);
        self
    }

    /// Waits for `signal` before its first step.
    pub fn waiting_to_start(mut self, signal: Arc<Signal>) -> Appender {
        self.start_after = Some(signal);
        self
    }

    /// Sets `signal` once its first read's result came (before it waits
    /// or thinks).
    pub fn signalling_read(mut self, signal: Arc<Signal>) -> Appender {
        self.on_read = Some(signal);
        self
    }

    /// Sets `signal` when its first write's result came (landed or not).
    pub fn signalling_first_result(mut self, signal: Arc<Signal>) -> Appender {
        self.on_first_write_result = Some(signal);
        self
    }

    /// With writ's tools: after its first read, reserves the file with
    /// `reserve`, sets `reserved`, and waits for `go` before writing.
    pub fn reserving(mut self, reserved: Arc<Signal>, go: Arc<Signal>) -> Appender {
        self.reserve = Some((reserved, go));
        self
    }

    /// Where it reports how its work ended.
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    fn set(&self, outcome: Outcome) {
        *self.report.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
    }

    fn read(&mut self) -> Step {
        self.reads += 1;
        self.phase = Phase::Reading;
        let key = if self.tools.writ() {
            "path"
        } else {
            "file_path"
        };
        call(self.tools.read_tool(), json!({ key: self.path }))
    }

    fn write(&mut self) -> Step {
        self.writes += 1;
        self.phase = Phase::Writing;
        let last = self
            .content
            .iter()
            .rev()
            .find(|l| !l.is_empty())
            .cloned()
            .unwrap_or_default();
        let mut kept = self.content.clone();
        while kept.last().is_some_and(|l| l.is_empty()) {
            kept.pop();
        }
        let mut whole = kept.join("\n");
        whole.push('\n');
        whole.push_str(&self.line);
        whole.push('\n');
        let edited = format!("{last}\n{}", self.line);
        let input = match self.tools {
            Tools::BuiltinEdit => {
                json!({"file_path": self.path, "old_string": last, "new_string": edited})
            }
            Tools::BuiltinWrite => json!({"file_path": self.path, "content": whole}),
            Tools::WritEdit => json!({"path": self.path, "old_string": last, "new_string": edited}),
            Tools::WritWrite => json!({"path": self.path, "content": whole}),
        };
        call(self.tools.write_tool(), input)
    }

    fn give_up(&mut self, why: &str) -> Step {
        self.phase = Phase::Done;
        // Whoever waits on this agent waits no more: the test then fails on
        // what went wrong here, not on a timeout.
        for signal in [&self.on_landed, &self.on_first_write_result, &self.on_read]
            .into_iter()
            .flatten()
        {
            signal.set();
        }
        if let Some((reserved, _)) = &self.reserve {
            reserved.set();
        }
        self.set(Outcome::GaveUp(self.writes));
        Step::End(format!(
            "gave up on {} after {} writes: {why}",
            self.line, self.writes
        ))
    }
}

fn call(name: &str, input: Value) -> Step {
    Step::Call(vec![ToolCall {
        name: name.to_string(),
        input,
    }])
}

/// The file's lines in a read's result (`     N\tline`, as both Claude
/// Code's `Read` and writ's `read_file` number them), or None when the
/// result shows no numbered content.
pub fn numbered_lines(text: &str) -> Option<Vec<String>> {
    let mut lines = Vec::new();
    for row in text.lines() {
        let trimmed = row.trim_start();
        let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            continue;
        }
        let rest = &trimmed[digits..];
        let body = rest.strip_prefix('\t').or_else(|| rest.strip_prefix('→'));
        if let Some(body) = body {
            lines.push(body.to_string());
        }
    }
    (!lines.is_empty()).then_some(lines)
}

/// Whether a write's result says it was done. A CLI marks most refusals
/// as errors; a result that says nothing was written counts as one too.
pub fn write_succeeded(result: &ToolResult) -> bool {
    !result.is_error
        && !result.text.contains("nothing was written")
        && !result.text.contains("Nothing was done")
        && !result.text.contains("denied")
        && !result.text.contains("has been modified since")
        && !result.text.contains("unexpectedly modified")
}

impl Script for Appender {
    fn next(&mut self, seen: &Seen) -> Step {
        let result = seen.results.last();
        match self.phase {
            Phase::Start | Phase::Loading => {
                if let Some(signal) = self.start_after.take() {
                    signal.wait(Duration::from_secs(60));
                }
                let mut wanted = vec![self.tools.read_tool(), self.tools.write_tool()];
                if self.reserve.is_some() {
                    wanted.push("mcp__writ__reserve");
                }
                let missing: Vec<&str> = wanted
                    .into_iter()
                    .filter(|t| !seen.tools.iter().any(|s| s == t))
                    .collect();
                // A CLI that defers tools lists them by name only; a model
                // loads them with the CLI's tool search before calling them.
                if self.phase == Phase::Start
                    && !missing.is_empty()
                    && seen.tools.iter().any(|t| t == "ToolSearch")
                {
                    self.phase = Phase::Loading;
                    return call(
                        "ToolSearch",
                        json!({"query": format!("select:{}", missing.join(","))}),
                    );
                }
                self.read()
            }
            Phase::Reading => {
                let shown = result.and_then(|r| numbered_lines(&r.text));
                match shown {
                    Some(lines) if !result.is_some_and(|r| r.is_error) => {
                        self.content = lines;
                        if self.writes == 0 {
                            if let Some(signal) = &self.on_read {
                                signal.set();
                            }
                            if let Some(rendezvous) = &self.before_write {
                                rendezvous.meet();
                            }
                            if let Some(signal) = &self.wait_for {
                                signal.wait(Duration::from_secs(60));
                            }
                            think(self.think);
                            if self.reserve.is_some() {
                                self.phase = Phase::Reserving;
                                return call(
                                    "mcp__writ__reserve",
                                    json!({"paths": [self.path], "note": "adding my line"}),
                                );
                            }
                        }
                        self.write()
                    }
                    _ if self.reads >= self.max_writes => {
                        let said = result.map(|r| r.text.clone()).unwrap_or_default();
                        self.give_up(&format!("no content in the read's result: {said}"))
                    }
                    _ => self.read(),
                }
            }
            Phase::Reserving => {
                if let Some((reserved, go)) = &self.reserve {
                    reserved.set();
                    go.wait(Duration::from_secs(60));
                }
                self.write()
            }
            Phase::Writing => {
                let Some(result) = result else {
                    return self.give_up("no result for the write");
                };
                if self.writes == 1 {
                    if let Some(signal) = &self.on_first_write_result {
                        signal.set();
                    }
                }
                if write_succeeded(result) {
                    self.phase = Phase::Done;
                    self.set(Outcome::Landed);
                    if let Some(signal) = &self.on_landed {
                        signal.set();
                    }
                    return Step::End(format!("landed: {}", self.line));
                }
                if self.writes >= self.max_writes {
                    return self.give_up(&result.text.clone());
                }
                // A refusal that shows the current content counts as reading
                // it: redo the change on that content; otherwise read again.
                match numbered_lines(&result.text) {
                    Some(lines) if self.tools.writ() => {
                        self.content = lines;
                        self.write()
                    }
                    _ if self.reads >= self.max_writes => self.give_up(&result.text.clone()),
                    _ => self.read(),
                }
            }
            Phase::Done => Step::End(format!("done: {:?}", self.report())),
        }
    }
}

/// A session's main agent that starts one subagent per prompt, all in one
/// assistant message, waits for their results and ends.
pub struct Spawner {
    prompts: Vec<String>,
    started: bool,
    /// The subagent tool's results, once they came.
    pub results: Arc<Mutex<Vec<ToolResult>>>,
}

impl Spawner {
    /// A main agent that will start a subagent for each of `prompts`.
    pub fn new(prompts: Vec<String>) -> Spawner {
        Spawner {
            prompts,
            started: false,
            results: Arc::default(),
        }
    }
}

impl Script for Spawner {
    fn next(&mut self, seen: &Seen) -> Step {
        if self.started {
            self.results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(seen.results.iter().cloned());
            return Step::End("the subagents are done".to_string());
        }
        self.started = true;
        // Claude Code names its subagent tool `Agent` (formerly `Task`).
        let tool = ["Agent", "Task"]
            .into_iter()
            .find(|t| seen.tools.iter().any(|s| s == t))
            .unwrap_or("Agent");
        Step::Call(
            self.prompts
                .iter()
                .enumerate()
                .map(|(i, prompt)| ToolCall {
                    name: tool.to_string(),
                    input: json!({
                        "description": format!("add line {i}"),
                        "prompt": prompt,
                        "run_in_background": false,
                    }),
                })
                .collect(),
        )
    }
}

/// The lost-update oracle: the lines whose agents were told their write
/// landed, checked against the file as it ends.
pub struct Tally {
    /// Agents whose write landed.
    pub landed: usize,
    /// Landed lines missing from the final file.
    pub lost: Vec<String>,
    /// Agents that gave up or never finished.
    pub unfinished: Vec<String>,
}

/// Counts, for `agents` (line, report), what the final `file` kept.
pub fn tally(file: &PathBuf, agents: &[(String, Report)]) -> Tally {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let kept: Vec<&str> = text.lines().collect();
    let mut tally = Tally {
        landed: 0,
        lost: Vec::new(),
        unfinished: Vec::new(),
    };
    for (line, report) in agents {
        let outcome = report.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match outcome {
            Outcome::Landed => {
                tally.landed += 1;
                if !kept.contains(&line.as_str()) {
                    tally.lost.push(line.clone());
                }
            }
            other => tally.unfinished.push(format!("{line}: {other:?}")),
        }
    }
    tally
}
