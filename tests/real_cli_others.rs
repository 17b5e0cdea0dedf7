//! The real coding CLIs beside Claude Code, driven by scripted models
//! (SPEC §15): Gemini CLI and Codex CLI from npm (tests/cli's lockfile) run
//! headless against loopback stand-ins for the Gemini API and the OpenAI
//! Responses API whose per-agent scripts decide each step from the tool
//! results the CLI sent back. Several
//! sessions at once add their own line to a shared file with the CLI's own
//! tools; an oracle independent of writ (the lines each agent was told had
//! landed, against the file as it ends) counts lost updates, with and
//! without writ's hooks, and every refusal must reach the model as text.

#![allow(dead_code)]

#[path = "common/cli_install.rs"]
mod cli_install;
#[path = "common/cli_script.rs"]
mod cli_script;
#[path = "common/cli_session.rs"]
#[allow(dead_code)]
mod cli_session;
#[path = "common/edit_script.rs"]
mod edit_script;
#[path = "common/other_clis.rs"]
mod other_clis;
#[path = "common/provider_chat.rs"]
mod provider_chat;
#[path = "common/provider_gemini.rs"]
mod provider_gemini;
#[path = "common/provider_openai.rs"]
mod provider_openai;
#[path = "common/scripted_model.rs"]
mod scripted_model;
#[path = "common/serve_process.rs"]
mod serve_process;
#[path = "common/shell_script.rs"]
mod shell_script;

use std::path::PathBuf;

use serve_process::Serve;
use std::time::Duration;

use cli_install::cli_bin;
use cli_script::{Adder, Dialect, write_succeeded};
use edit_script::{Rendezvous, Report, Tally, numbered_lines, tally};
use other_clis::{Ended, Session, configure_gemini, configure_opencode};
use scripted_model::{Script, ScriptedModel, Step, ToolResult};
use serde_json::json;
use shell_script::{Play, Steps, call, wait_for_file};

/// A session's deadline: far above a run's few seconds, so only a hung
/// CLI reaches it.
const DEADLINE: Duration = Duration::from_secs(240);

/// The shared file every agent adds its line to.
const SHARED: &str = "shared.txt";

/// How many sessions run at once.
const SESSIONS: usize = 4;

/// One scenario's world: a workspace with a shared file, a state folder,
/// homes for the sessions, a scripted model, and (when asked) `writ serve`.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    base: PathBuf,
    model: ScriptedModel,
    serve: Option<Serve>,
    agents: Vec<(String, Report)>,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let base = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let root = base.join("repo");
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join(SHARED), "base line\n").unwrap_or_else(|e| panic!("{e}"));
        let model = ScriptedModel::start();
        model.serve(provider_gemini::GEMINI);
        model.serve(provider_openai::RESPONSES);
        model.serve(provider_chat::CHAT);
        World {
            _dir: dir,
            root,
            base,
            model,
            serve: None,
            agents: Vec::new(),
        }
    }

    fn state(&self) -> PathBuf {
        self.base.join("state")
    }

    fn file(&self) -> PathBuf {
        self.root.join(SHARED)
    }

    /// Starts `writ serve` on the workspace (history on: the hook
    /// snapshots what a write overwrites).
    fn serve(&mut self) {
        self.serve = Some(Serve::start_with_history(&self.root, &self.state(), &[]));
    }

    /// Registers an adder named `name` and returns the prompt that starts it.
    fn adder(&mut self, name: &str, script: Adder) -> String {
        self.agents.push((line_of(name), script.report()));
        self.model.add(name, script);
        format!("{} Add your line to {SHARED}.", ScriptedModel::marker(name))
    }

    fn tally(&self) -> Tally {
        tally(&self.file(), &self.agents)
    }

    /// What went on, for a failing assertion's message.
    fn story(&self, ended: &[Ended]) -> String {
        let mut story = format!(
            "final {SHARED}:\n{}\n",
            std::fs::read_to_string(self.file()).unwrap_or_default()
        );
        for (line, report) in &self.agents {
            let name = line.trim_start_matches("line of ");
            let transcript = self.model.transcript(name);
            story.push_str(&format!(
                "--- {name}: {:?}, {} requests\n",
                report.lock().unwrap_or_else(|e| e.into_inner()),
                transcript.requests
            ));
            for r in &transcript.results {
                story.push_str(&format!(
                    "  {} {:.200} error={} {:.400}\n",
                    r.name,
                    r.input.to_string(),
                    r.is_error,
                    r.text
                ));
            }
        }
        for (i, e) in ended.iter().enumerate() {
            story.push_str(&format!(
                "--- session {i}: {:?}\n  stderr: {}\n  stdout tail: {}\n",
                e.status,
                tail(&e.stderr, 1500),
                tail(&e.stdout, 1500)
            ));
        }
        story.push_str(&format!(
            "--- model log:\n{}\n",
            self.model.log().join("\n")
        ));
        if let Some(serve) = &self.serve {
            story.push_str(&format!("--- serve log:\n{}\n", serve.log_tail(3000)));
        }
        story
    }

    /// Runs `SESSIONS` Gemini CLI sessions at once, each adding its line
    /// with `dialect`, all reading before any writes.
    fn gemini_sessions(&mut self, prefix: &str, dialect: Dialect) -> Vec<Ended> {
        self.sessions(prefix, dialect, false)
    }

    /// Runs `SESSIONS` sessions of the CLI `dialect` belongs to at once,
    /// each adding its line with `dialect`, all reading before any writes;
    /// `codex_hooks` puts writ's hooks in Codex's configuration (Gemini
    /// CLI's are in the workspace, see [`configure_gemini`]).
    fn sessions(&mut self, prefix: &str, dialect: Dialect, codex_hooks: bool) -> Vec<Ended> {
        let codex = matches!(
            dialect,
            Dialect::CodexAddFile
                | Dialect::CodexUpdate
                | Dialect::CodexMcp
                | Dialect::CodexMcpSearch
        );
        let opencode = matches!(
            dialect,
            Dialect::OpencodeWrite | Dialect::OpencodeEdit | Dialect::OpencodeMcp
        );
        let bin = if codex {
            cli_bin("codex", "@openai/codex")
        } else if opencode {
            cli_bin("opencode", "opencode-ai")
        } else {
            cli_bin("gemini", "@google/gemini-cli")
        };
        let meet = Rendezvous::new(SESSIONS, Duration::from_secs(60));
        // Codex's shell and patches take paths in its working folder, and
        // writ's tools in the workspace.
        let path = if codex || dialect.mcp() {
            SHARED.to_string()
        } else {
            self.file().display().to_string()
        };
        let prompts: Vec<(String, String)> = (0..SESSIONS)
            .map(|i| {
                let name = format!("{prefix}{i}");
                let script = Adder::new(dialect, &path, &line_of(&name))
                    .meeting(meet.clone())
                    .thinking(Duration::from_millis(200));
                let prompt = self.adder(&name, script);
                (name, prompt)
            })
            .collect();
        let started: Vec<Session> = prompts
            .iter()
            .map(|(name, prompt)| {
                let home = self.base.join("home").join(name);
                let (root, state, url) = (&self.root, self.state(), &self.model.url);
                if codex {
                    let model = if dialect == Dialect::CodexMcp {
                        other_clis::CODEX_PLAIN_MODEL
                    } else {
                        other_clis::CODEX_MODEL
                    };
                    let setup = other_clis::CodexSetup {
                        hooks: codex_hooks,
                        model,
                    };
                    Session::codex(&bin, root, &home, &state, url, prompt, setup)
                } else if opencode {
                    Session::opencode(&bin, root, &home, &state, url, prompt)
                } else {
                    Session::gemini(&bin, root, &home, &state, url, prompt)
                }
            })
            .collect();
        started.into_iter().map(|s| s.finish(DEADLINE)).collect()
    }

    /// Every write result an agent was sent that was a refusal.
    fn refusals(&self) -> Vec<ToolResult> {
        self.agents
            .iter()
            .flat_map(|(line, _)| {
                self.model
                    .transcript(line.trim_start_matches("line of "))
                    .results
            })
            .filter(|r| {
                !(r.name.ends_with("read_file")
                    || ["exec_command", "read"].contains(&r.name.as_str()))
            })
            .filter(|r| !write_succeeded(r))
            .collect()
    }
}

fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn line_of(name: &str) -> String {
    format!("line of {name}")
}

/// Without writ, Gemini CLI's `write_file` replaces the file with what each
/// session read: sessions that all read before any wrote lose all but one
/// line, each told its write succeeded.
#[test]
fn gemini_without_writ_whole_file_writes_lose_lines() {
    let mut world = World::new();
    let ended = world.gemini_sessions("gw", Dialect::GeminiWrite);
    let tally = world.tally();
    let story = world.story(&ended);
    assert_eq!(tally.landed, SESSIONS, "every write landed:\n{story}");
    cli_install::figure(format!(
        "real-cli: Gemini CLI without writ, {SESSIONS} sessions, write_file: {} of {} lines lost",
        tally.lost.len(),
        tally.landed
    ));
    assert_eq!(
        tally.lost.len(),
        SESSIONS - 1,
        "all read before any wrote, so all but the last write are lost:\n{story}"
    );
}

/// With `writ hook gemini` installed, the same sessions lose nothing: every
/// stale whole-file write is denied, the model reads the denial as text and
/// redoes its change on a fresh read.
#[test]
fn gemini_with_writ_hooks_whole_file_writes_lose_nothing() {
    let mut world = World::new();
    configure_gemini(&world.root);
    world.serve();
    let ended = world.gemini_sessions("gh", Dialect::GeminiWrite);
    let tally = world.tally();
    let story = world.story(&ended);
    assert!(tally.lost.is_empty(), "lost {:?}:\n{story}", tally.lost);
    assert_eq!(
        tally.landed, SESSIONS,
        "every agent landed its line:\n{story}"
    );
    let refusals = world.refusals();
    assert!(
        !refusals.is_empty(),
        "all read before any wrote, so writ refused some writes:\n{story}"
    );
    for r in &refusals {
        // Gemini CLI prefixes a hook's reason with its own words; the
        // reason itself is writ's sentence, naming the file.
        let reason = r.text.trim_start_matches("Tool execution blocked: ");
        assert!(
            reason.contains(SHARED) && !reason.trim_start().starts_with('{'),
            "a refusal reached the model without writ's sentence: {:?}\n{story}",
            r.text
        );
        assert!(
            !r.text.contains("\\\""),
            "a refusal reached the model as escaped JSON: {:?}",
            r.text
        );
    }
    cli_install::figure(format!(
        "real-cli: Gemini CLI with writ hooks, {SESSIONS} sessions, write_file: 0 lost, {} refusals, e.g. {:?}",
        refusals.len(),
        refusals.first().map(|r| &r.text)
    ));
}

/// Gemini CLI's `replace` changes only the text it names, but it reads
/// and writes the file in two steps: without writ, edits landing at the
/// same moment can still lose one. Its count is reported, not asserted:
/// what plain Gemini CLI loses depends on timing writ does not control.
#[test]
fn gemini_without_writ_replace_reports_its_losses() {
    let mut world = World::new();
    let ended = world.gemini_sessions("gr", Dialect::GeminiReplace);
    let tally = world.tally();
    let story = world.story(&ended);
    assert!(
        tally.landed + tally.lost.len() > 0,
        "no session reported a landed line:\n{story}"
    );
    cli_install::figure(format!(
        "real-cli: Gemini CLI without writ, {SESSIONS} sessions, replace: {} lost, {} landed, {} unfinished",
        tally.lost.len(),
        tally.landed,
        tally.unfinished.len()
    ));
}

/// Without writ, Codex CLI's `apply_patch` with `*** Add File` over an
/// existing file replaces it with what each session read: all but one
/// line are lost, each session told its patch applied.
#[test]
fn codex_without_writ_add_file_over_a_file_loses_lines() {
    let mut world = World::new();
    let ended = world.sessions("ca", Dialect::CodexAddFile, false);
    let tally = world.tally();
    let story = world.story(&ended);
    assert_eq!(tally.landed, SESSIONS, "every patch applied:\n{story}");
    cli_install::figure(format!(
        "real-cli: Codex CLI without writ, {SESSIONS} sessions, apply_patch Add File: {} of {} lines lost",
        tally.lost.len(),
        tally.landed
    ));
    assert_eq!(
        tally.lost.len(),
        SESSIONS - 1,
        "all read before any wrote, so all but the last patch are lost:\n{story}"
    );
}

/// With `writ hook codex`, an `*** Add File` over an existing file is
/// denied with a sentence the model reads; it redoes its change as an
/// `*** Update File` hunk and nothing is lost.
#[test]
fn codex_with_writ_hooks_add_file_over_a_file_loses_nothing() {
    let mut world = World::new();
    world.serve();
    let ended = world.sessions("ch", Dialect::CodexAddFile, true);
    let tally = world.tally();
    let story = world.story(&ended);
    assert!(tally.lost.is_empty(), "lost {:?}:\n{story}", tally.lost);
    assert_eq!(
        tally.landed, SESSIONS,
        "every agent landed its line:\n{story}"
    );
    let refusals = world.refusals();
    assert!(
        refusals.len() >= SESSIONS,
        "every Add File over the file was refused:\n{story}"
    );
    for r in &refusals {
        assert!(
            r.text.contains(SHARED) && !r.text.contains("\\\""),
            "a refusal reached the model without writ's sentence: {:?}\n{story}",
            r.text
        );
    }
    cli_install::figure(format!(
        "real-cli: Codex CLI with writ hooks, {SESSIONS} sessions, apply_patch Add File: 0 lost, {} refusals, e.g. {:?}",
        refusals.len(),
        refusals.first().map(|r| &r.text)
    ));
}

/// Codex CLI's `*** Update File` hunks apply only where their context is,
/// but read and write the file in two steps: patches landing at the same
/// moment can still lose one. Its count is reported, not asserted: what
/// plain Codex loses depends on timing writ does not control.
#[test]
fn codex_without_writ_update_file_reports_its_losses() {
    let mut world = World::new();
    let ended = world.sessions("cu", Dialect::CodexUpdate, false);
    let tally = world.tally();
    let story = world.story(&ended);
    assert!(
        tally.landed + tally.lost.len() > 0,
        "no session reported a landed line:\n{story}"
    );
    cli_install::figure(format!(
        "real-cli: Codex CLI without writ, {SESSIONS} sessions, apply_patch Update File: {} lost, {} landed, {} unfinished",
        tally.lost.len(),
        tally.landed,
        tally.unfinished.len()
    ));
}

/// Without writ, opencode's `write` replaces the file with what each
/// session read: all but one line are lost, each told it wrote.
#[test]
fn opencode_without_writ_whole_file_writes_lose_lines() {
    let mut world = World::new();
    let ended = world.sessions("ow", Dialect::OpencodeWrite, false);
    let tally = world.tally();
    let story = world.story(&ended);
    assert_eq!(tally.landed, SESSIONS, "every write landed:\n{story}");
    cli_install::figure(format!(
        "real-cli: opencode without writ, {SESSIONS} sessions, write: {} of {} lines lost",
        tally.lost.len(),
        tally.landed
    ));
    assert_eq!(
        tally.lost.len(),
        SESSIONS - 1,
        "all read before any wrote, so all but the last write are lost:\n{story}"
    );
}

/// opencode's `edit` replaces the text it names, but reads and writes the
/// file in two steps: edits at the same moment can each land on the same
/// old content. The run reports what it lost (a race: the count varies).
#[test]
fn opencode_without_writ_simultaneous_edits_report_their_losses() {
    let mut world = World::new();
    let ended = world.sessions("oe", Dialect::OpencodeEdit, false);
    let tally = world.tally();
    let story = world.story(&ended);
    assert_eq!(
        tally.landed, SESSIONS,
        "every edit said it applied:\n{story}"
    );
    cli_install::figure(format!(
        "real-cli: opencode without writ, {SESSIONS} sessions, simultaneous edits: {} of {} lines lost",
        tally.lost.len(),
        tally.landed
    ));
}

/// With writ's plugin calling `writ hook opencode`, the same sessions lose
/// nothing through `write` or `edit`; every refusal reaches the model as
/// writ's sentence.
#[test]

fn opencode_with_writ_plugin_loses_nothing() {
    for (prefix, dialect) in [
        ("ohw", Dialect::OpencodeWrite),
        ("ohe", Dialect::OpencodeEdit),
    ] {
        let mut world = World::new();
        configure_opencode(&world.root);
        world.serve();
        let ended = world.sessions(prefix, dialect, false);
        let tally = world.tally();
        let story = world.story(&ended);
        assert!(
            tally.lost.is_empty(),
            "{dialect:?}: lost {:?}:\n{story}",
            tally.lost
        );
        assert_eq!(
            tally.landed, SESSIONS,
            "{dialect:?}: every agent landed:\n{story}"
        );
        let refusals = world.refusals();
        for r in &refusals {
            assert!(
                r.text.contains(SHARED) && !r.text.contains("\\\""),
                "a refusal reached the model without writ's sentence: {:?}\n{story}",
                r.text
            );
        }
        cli_install::figure(format!(
            "real-cli: opencode with writ's plugin, {SESSIONS} sessions, {dialect:?}: 0 lost, {} refusals, e.g. {:?}",
            refusals.len(),
            refusals.first().map(|r| &r.text)
        ));
    }
}

/// writ's MCP tools as `writ config CLI --write` sets them up, through
/// the real CLI: sessions that all read before any wrote each write the
/// whole file; writ refuses the stale writes with a result whose text
/// carries the sentence and the file as it is now, the model redoes its
/// change on that content without reading again, and nothing is lost.
fn writ_mcp_tools_lose_nothing(prefix: &str, dialect: Dialect, cli: &str) {
    let mut world = World::new();
    match dialect {
        Dialect::GeminiMcp => configure_gemini(&world.root),
        Dialect::OpencodeMcp => configure_opencode(&world.root),
        // Codex's configuration is each session's own.
        Dialect::CodexMcp | Dialect::CodexMcpSearch => {}
        other => panic!("{other:?} is not writ's MCP tools"),
    }
    world.serve();
    let codex = matches!(dialect, Dialect::CodexMcp | Dialect::CodexMcpSearch);
    let ended = world.sessions(prefix, dialect, codex);
    let tally = world.tally();
    let story = world.story(&ended);
    assert!(tally.lost.is_empty(), "lost {:?}:\n{story}", tally.lost);
    assert_eq!(
        tally.landed, SESSIONS,
        "every agent landed its line:\n{story}"
    );
    if dialect == Dialect::CodexMcpSearch {
        // Each model found writ's tools with Codex's tool search first.
        for (line, _) in &world.agents {
            let name = line.trim_start_matches("line of ");
            assert!(
                world.model.transcript(name).results.iter().any(|r| {
                    r.name == "tool_search" && r.text.contains("mcp__writ__write_file")
                }),
                "{name} did not load writ's tools through tool_search:\n{story}"
            );
        }
    }
    let refusals = world.refusals();
    assert!(
        !refusals.is_empty(),
        "all read before any wrote, so writ refused some writes:\n{story}"
    );
    // What the model reads of each refusal: the text, or (Codex) the
    // `text` of the JSON it is shown.
    let shown: Vec<String> = refusals
        .iter()
        .map(|r| dialect.shown_text(r).unwrap_or_else(|| r.text.clone()))
        .collect();
    for text in &shown {
        assert!(
            text.contains(SHARED) && !text.contains("\\\"") && !text.contains("\\n"),
            "a refusal reached the model without writ's sentence as text: {text:?}\n{story}"
        );
    }
    // A stale write's refusal carries the content as lines the model
    // reads, and the agent redid its change on them.
    let carried = shown
        .iter()
        .filter(|t| t.contains("nothing was written") && numbered_lines(t).is_some())
        .count();
    assert!(
        carried > 0,
        "no refusal carried the file's content as text:\n{story}"
    );
    cli_install::figure(format!(
        "real-cli: {cli} with writ's MCP tools (writ config {} --write), {SESSIONS} sessions, write_file: 0 lost, {} refusals ({carried} carrying the content), e.g. {:?}",
        cli.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_lowercase(),
        refusals.len(),
        shown.first()
    ));
}

#[test]
fn gemini_with_writ_mcp_tools_loses_nothing() {
    writ_mcp_tools_lose_nothing("gm", Dialect::GeminiMcp, "Gemini CLI");
}

#[test]
fn opencode_with_writ_mcp_tools_loses_nothing() {
    writ_mcp_tools_lose_nothing("om", Dialect::OpencodeMcp, "opencode");
}

/// A coding CLI of this suite.
#[derive(Clone, Copy, Debug)]
enum Cli {
    Gemini,
    Codex,
    Opencode,
}

impl World {
    /// Starts one session of `cli`, configured by `writ config` (done by
    /// the caller for Gemini CLI and opencode, whose configuration is the
    /// workspace's; per session for Codex, whose is its home's), playing
    /// `script`.
    fn start(&mut self, cli: Cli, name: &str, script: impl Script + 'static) -> Session {
        self.model.add(name, script);
        let prompt = format!("{} Do your part.", ScriptedModel::marker(name));
        let home = self.base.join("home").join(name);
        let (root, state, url) = (&self.root, self.state(), &self.model.url);
        match cli {
            Cli::Gemini => {
                let bin = cli_bin("gemini", "@google/gemini-cli");
                Session::gemini(&bin, root, &home, &state, url, &prompt)
            }
            Cli::Codex => {
                let bin = cli_bin("codex", "@openai/codex");
                let setup = other_clis::CodexSetup {
                    hooks: true,
                    model: other_clis::CODEX_MODEL,
                };
                Session::codex(&bin, root, &home, &state, url, &prompt, setup)
            }
            Cli::Opencode => {
                let bin = cli_bin("opencode", "opencode-ai");
                Session::opencode(&bin, root, &home, &state, url, &prompt)
            }
        }
    }

    /// Every result `name`'s model was sent.
    fn results(&self, name: &str) -> Vec<ToolResult> {
        self.model.transcript(name).results
    }
}

/// The file both shell-scenario sessions change.
const NOTES: &str = "notes.txt";

impl Cli {
    /// The CLI's shell tool called with `command`, as its model calls it.
    fn shell(self, command: &str) -> Step {
        match self {
            Cli::Gemini => call(
                "run_shell_command",
                json!({"command": command, "description": "run a command"}),
            ),
            Cli::Codex => call("exec_command", json!({"cmd": command})),
            Cli::Opencode => call(
                "bash",
                json!({"command": command, "description": "run a command"}),
            ),
        }
    }

    fn shell_tool(self) -> &'static str {
        match self {
            Cli::Gemini => "run_shell_command",
            Cli::Codex => "exec_command",
            Cli::Opencode => "bash",
        }
    }

    /// A read of `NOTES` with the CLI's own tool.
    fn read(self, root: &std::path::Path) -> Step {
        let file = root.join(NOTES).display().to_string();
        match self {
            Cli::Gemini => call("read_file", json!({"file_path": file})),
            Cli::Codex => call("exec_command", json!({"cmd": format!("cat {NOTES}")})),
            Cli::Opencode => call("read", json!({"filePath": file})),
        }
    }

    /// `old` replaced by `new` in `NOTES` with the CLI's own edit tool.
    fn edit(self, root: &std::path::Path, old: &str, new: &str) -> Step {
        let file = root.join(NOTES).display().to_string();
        match self {
            Cli::Gemini => call(
                "replace",
                json!({"file_path": file, "old_string": old, "new_string": new,
                       "instruction": "change the line"}),
            ),
            Cli::Codex => call(
                "apply_patch",
                json!({"input": format!(
                    "*** Begin Patch\n*** Update File: {NOTES}\n@@\n-{old}\n+{new}\n*** End Patch\n"
                )}),
            ),
            Cli::Opencode => call(
                "edit",
                json!({"filePath": file, "oldString": old, "newString": new}),
            ),
        }
    }
}

/// A `sed -i` run by one session's shell tool, with what `writ config X
/// --write` installs, while another session edits another line of the
/// same file with the CLI's own edit tool: the hook sends the command
/// through `writ run`, so it runs in its own layer and its commit merges
/// the two changes (and says so). Both kept; 0 lost.
fn shell_command_runs_through_writ_run(cli: Cli) {
    let mut world = World::new();
    std::fs::write(world.root.join(NOTES), "one\ntwo\nthree\nfour\n")
        .unwrap_or_else(|e| panic!("{e}"));
    match cli {
        Cli::Gemini => configure_gemini(&world.root),
        Cli::Opencode => configure_opencode(&world.root),
        Cli::Codex => {}
    }
    world.serve();
    // The command says when sed has run (outside the workspace, so not
    // part of its write set) and ends once the other session's edit
    // landed: the edit falls inside the run.
    let sed_ran = world.base.join("sed-ran");
    let edited = world.base.join("edited");
    let command = "sed -i 's/^one$/one (shell)/' notes.txt && touch ../sed-ran && \
         for i in $(seq 1200); do [ -e ../edited ] && break; sleep 0.05; done && echo sed-done";
    let shell_steps: Vec<Play> = vec![Box::new(move |_| cli.shell(command))];
    let shell = world.start(cli, "shell", Steps::new(shell_steps));
    let root = world.root.clone();
    let edited_mark = edited.clone();
    let waited = sed_ran.clone();
    let editor_steps: Vec<Play> = vec![
        Box::new(move |_| cli.read(&root)),
        Box::new({
            let root = world.root.clone();
            move |_| {
                wait_for_file(&waited, Duration::from_secs(90));
                cli.edit(&root, "four", "four (editor)")
            }
        }),
        Box::new(move |_| {
            let _ = std::fs::write(&edited_mark, "");
            Step::End("edited".into())
        }),
    ];
    let editor = world.start(cli, "editor", Steps::new(editor_steps));
    let ended = vec![shell.finish(DEADLINE), editor.finish(DEADLINE)];
    let notes = std::fs::read_to_string(world.root.join(NOTES)).unwrap_or_default();
    let mut story = format!("{cli:?}: final {NOTES}:\n{notes}\n");
    for name in ["shell", "editor"] {
        for r in world.results(name) {
            story.push_str(&format!(
                "--- {name}: {} error={} {:.600}\n",
                r.name, r.is_error, r.text
            ));
        }
    }
    for e in &ended {
        story.push_str(&format!(
            "--- {:?}\n  stderr: {}\n",
            e.status,
            tail(&e.stderr, 1500)
        ));
    }
    assert!(
        sed_ran.exists() && edited.exists(),
        "the two sessions did not overlap:\n{story}"
    );
    let result = world
        .results("shell")
        .into_iter()
        .find(|r| r.name == cli.shell_tool())
        .unwrap_or_else(|| panic!("no shell result:\n{story}"));
    assert!(
        result.text.contains("sed-done"),
        "the shell session's command failed:\n{story}"
    );
    assert!(
        result.text.contains("merged"),
        "the command ran through writ run, whose commit merged the two changes and said so:\n{story}"
    );
    assert_eq!(
        notes, "one (shell)\ntwo\nthree\nfour (editor)\n",
        "both changes are kept:\n{story}"
    );
    cli_install::figure(format!(
        "real-cli: {cli:?} shell `sed -i` through writ run beside another session's edit: 2 landed, 0 lost"
    ));
}

#[test]
fn gemini_shell_command_runs_through_writ_run() {
    shell_command_runs_through_writ_run(Cli::Gemini);
}

#[test]
fn codex_shell_command_runs_through_writ_run() {
    shell_command_runs_through_writ_run(Cli::Codex);
}

#[test]
fn opencode_shell_command_runs_through_writ_run() {
    shell_command_runs_through_writ_run(Cli::Opencode);
}

/// Codex with a model it knows keeps MCP tools behind `tool_search`: the
/// model loads writ's first.
#[test]
fn codex_with_writ_mcp_tools_loses_nothing() {
    writ_mcp_tools_lose_nothing("xm", Dialect::CodexMcpSearch, "Codex CLI");
}

/// Codex with a model it has no catalog entry for offers MCP tools
/// directly.
#[test]
fn codex_with_writ_mcp_tools_offered_directly_loses_nothing() {
    writ_mcp_tools_lose_nothing("xd", Dialect::CodexMcp, "Codex CLI");
}
