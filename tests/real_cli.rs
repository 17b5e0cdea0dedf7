//! The real coding CLIs, driven by scripted models (SPEC §15): Claude Code
//! from npm (tests/cli's lockfile) runs headless against a loopback
//! stand-in for the Anthropic Messages API whose per-agent scripts decide
//! each step from the tool results the CLI sent back. Several sessions at
//! once, and several subagents of one session, add their own line to a
//! shared file; an oracle independent of writ (the lines each agent was
//! told had landed, against the file as it ends) counts lost updates, with
//! and without writ, and every refusal must reach the model with writ's
//! sentence.

#[path = "common/claude_code.rs"]
mod claude_code;
#[path = "common/cli_install.rs"]
mod cli_install;
#[path = "common/cli_session.rs"]
#[allow(dead_code)]
mod cli_session;
#[path = "common/edit_script.rs"]
mod edit_script;
#[path = "common/scripted_model.rs"]
mod scripted_model;
#[path = "common/serve_process.rs"]
mod serve_process;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serve_process::Serve;
use std::time::Duration;

use claude_code::{Ended, Session, claude_bin, configure_writ};
use edit_script::{Appender, Rendezvous, Report, Signal, Spawner, Tally, Tools, tally};
use scripted_model::{ScriptedModel, ToolResult};

/// A session's deadline: far above a run's few seconds, so only a hung
/// CLI reaches it.
const DEADLINE: Duration = Duration::from_secs(180);

/// The shared file every agent adds its line to.
const SHARED: &str = "shared.txt";

/// One scenario's world: a workspace with a shared file, a state folder,
/// homes for the sessions, a scripted model, and (when asked) `writ serve`.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    base: PathBuf,
    model: ScriptedModel,
    claude: PathBuf,
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
        World {
            _dir: dir,
            root,
            base,
            model: ScriptedModel::start(),
            claude: claude_bin(),
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
    /// snapshots what a write overwrites), with `args`.
    fn serve(&mut self, args: &[&str]) {
        self.serve = Some(Serve::start_with_history(&self.root, &self.state(), args));
    }

    fn configure(&self) {
        configure_writ(&self.root, &self.state());
    }

    /// Registers an appender named `name` and returns the prompt that
    /// starts it.
    fn appender(&mut self, name: &str, script: Appender) -> String {
        self.agents.push((line_of(name), script.report()));
        self.model.add(name, script);
        format!("{} Add your line to {SHARED}.", ScriptedModel::marker(name))
    }

    fn start(&self, name: &str, prompt: &str) -> Session {
        Session::start(
            &self.claude,
            &self.root,
            &self.base.join("home").join(name),
            &self.state(),
            &self.model.url,
            prompt,
        )
    }

    /// Runs one session per (name, prompt) at once and waits for all.
    fn run_all(&self, sessions: &[(String, String)]) -> Vec<Ended> {
        let started: Vec<Session> = sessions
            .iter()
            .map(|(name, prompt)| self.start(name, prompt))
            .collect();
        started.into_iter().map(|s| s.finish(DEADLINE)).collect()
    }

    fn tally(&self) -> Tally {
        tally(&self.file(), &self.agents)
    }

    /// What went on, for a failing assertion's message.
    /// Asserts that no landed line is missing from the file and every
    /// agent finished, telling the run's story where not.
    fn assert_none_lost(&self, tally: &Tally, ended: &[Ended]) {
        assert!(
            tally.lost.is_empty(),
            "lost {:?}: {}",
            tally.lost,
            self.story(ended)
        );
        assert!(
            tally.unfinished.is_empty(),
            "unfinished {:?}: {}",
            tally.unfinished,
            self.story(ended)
        );
    }

    /// The result of `agent`'s first call of `tool`, if it made one.
    fn first_result(&self, agent: &str, tool: &str) -> Option<ToolResult> {
        self.model
            .transcript(agent)
            .results
            .into_iter()
            .find(|r| r.name == tool)
    }

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
                "--- session {i}: {:?}\n  stderr: {:.800}\n  stdout tail: {}\n",
                e.status,
                e.stderr,
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
}

impl Drop for World {
    fn drop(&mut self) {
        if self.serve.is_none() {
            // A server the first `writ mcp` started for the sessions lives
            // `--idle-exit` after its last client: stop it with the test.
            let _ = Command::new(env!("CARGO_BIN_EXE_writ"))
                .args(["serve", "--stop"])
                .arg(&self.root)
                .env("XDG_STATE_HOME", self.state())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
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

/// The write tools' results the model was sent that were refusals.
fn refusals(results: &[ToolResult]) -> Vec<&ToolResult> {
    results
        .iter()
        .filter(|r| {
            !matches!(
                r.name.as_str(),
                "Read" | "mcp__writ__read_file" | "ToolSearch"
            )
        })
        .filter(|r| !edit_script::write_succeeded(r))
        .collect()
}

/// How many sessions (or subagents) contend in the N-agent scenarios:
/// enough to collide, few enough for a 2-core CI machine.
const N: usize = 4;

/// Writ's sentences a refusal of a write carries (src/error.rs, the hook's
/// deny): a refusal that reached the model says one of these.
const WRIT_SAYS: &[&str] = &[
    "changed since you read it",
    "changed since you last read it",
    "you have not read it",
    "is being written by",
    "reserved by",
    "read it first",
    "is fenced",
    "retry later",
    "cannot be reached",
];

/// Claude Code's own refusal of a write on a file modified since its Read.
fn claude_code_refused(result: &ToolResult) -> bool {
    result.text.contains("modified since read") || result.text.contains("unexpectedly modified")
}

/// Asserts that every refusal an agent was sent is Claude Code's own or
/// says writ's sentence, and (with `content`) shows the file's content.
fn assert_refusals_reached_the_model(
    world: &World,
    names: &[String],
    content: bool,
    ended: &[Ended],
) -> usize {
    let mut seen = 0;
    for name in names {
        let transcript = world.model.transcript(name);
        for refusal in refusals(&transcript.results) {
            if claude_code_refused(refusal) {
                continue;
            }
            seen += 1;
            assert!(
                WRIT_SAYS.iter().any(|s| refusal.text.contains(s)),
                "{name} was sent a refusal without writ's sentence: {:?}\n{}",
                refusal.text,
                world.story(ended)
            );
            if content && refusal.text.contains("counts as reading") {
                assert!(
                    edit_script::numbered_lines(&refusal.text).is_some(),
                    "{name}'s refusal says it shows the content but the model got none: {:?}",
                    refusal.text
                );
            }
        }
    }
    seen
}

/// N agents of their own session each, all reading before any writes
/// (they meet after their read), with `tools` alternating between the two
/// given kinds.
fn contended(world: &mut World, prefix: &str, kinds: [Tools; 2]) -> Vec<(String, String)> {
    let meet = Rendezvous::new(N, Duration::from_secs(90));
    (0..N)
        .map(|i| {
            let name = format!("{prefix}{i}");
            let script = Appender::new(kinds[i % 2], &world.root, SHARED, &line_of(&name))
                .meeting(meet.clone());
            let prompt = world.appender(&name, script);
            (name, prompt)
        })
        .collect()
}

/// Asserts that `name`'s `reserve` call went through, so what follows
/// tests a reservation.
fn assert_reserved(world: &World, name: &str, ended: &[Ended]) {
    let reserved = world
        .model
        .transcript(name)
        .results
        .into_iter()
        .any(|r| r.name == "mcp__writ__reserve" && !r.is_error);
    assert!(
        reserved,
        "{name} never got its reservation, so nothing else here was tested: {}",
        world.story(ended)
    );
}

fn names(sessions: &[(String, String)]) -> Vec<String> {
    sessions.iter().map(|(n, _)| n.clone()).collect()
}

/// (a) Without writ: N sessions at once, each reading the shared file and
/// then adding its line with the built-in Edit or Write at the same moment.
/// What plain Claude Code loses is printed (it varies from run to run: its
/// own check refuses a write on a file modified since the Read, but two
/// writes in the same instant both pass it); the run must finish.
#[test]
fn a_without_writ_sessions_at_once_report_their_losses() {
    let mut world = World::new();
    let sessions = contended(
        &mut world,
        "plain",
        [Tools::BuiltinEdit, Tools::BuiltinWrite],
    );
    let ended = world.run_all(&sessions);
    let tally = world.tally();
    cli_install::figure(format!(
        "real-cli: claude-code without writ, {N} sessions at once: landed {}, lost {} {:?}, unfinished {:?}",
        tally.landed,
        tally.lost.len(),
        tally.lost,
        tally.unfinished
    ));
    assert!(
        ended.iter().all(|e| e.status.is_some()),
        "a session hung: {}",
        world.story(&ended)
    );
    assert!(tally.landed > 0, "no write landed: {}", world.story(&ended));
}

/// (a, forced) Without writ: a session reads, another session's Edit lands,
/// then the first writes its stale whole-file Write. Shows what Claude
/// Code alone does with the sequential case.
#[test]
fn a_without_writ_a_stale_write_after_another_sessions_edit() {
    let mut world = World::new();
    let landed = Signal::new();
    let meet = Rendezvous::new(2, Duration::from_secs(90));
    let first = Appender::new(Tools::BuiltinEdit, &world.root, SHARED, &line_of("first"))
        .meeting(meet.clone())
        .signalling(landed.clone());
    let second = Appender::new(Tools::BuiltinWrite, &world.root, SHARED, &line_of("second"))
        .meeting(meet)
        .after(landed);
    let p1 = world.appender("first", first);
    let p2 = world.appender("second", second);
    let ended = world.run_all(&[("first".into(), p1), ("second".into(), p2)]);
    let tally = world.tally();
    let stale = world.model.transcript("second");
    let refused_by_claude_code = stale.results.iter().any(claude_code_refused);
    cli_install::figure(format!(
        "real-cli: claude-code without writ, stale Write after another session's Edit: landed {}, lost {:?}, refused by Claude Code itself: {refused_by_claude_code}",
        tally.landed, tally.lost
    ));
    // Either Claude Code refused the stale Write itself, or the first
    // session's line was lost: the harness observes which.
    assert!(
        refused_by_claude_code || !tally.lost.is_empty(),
        "the stale Write neither was refused nor lost anything: {}",
        world.story(&ended)
    );
}

/// (b) With writ: `writ serve` running and the hooks `writ config claude
/// --write` installs; N sessions at once with the built-in Edit and Write.
/// 0 lost, every agent lands, and every refusal reached the model with
/// writ's sentence.
#[test]
fn b_with_writ_hooks_sessions_at_once_lose_nothing() {
    let mut world = World::new();
    world.serve(&[]);
    world.configure();
    let sessions = contended(
        &mut world,
        "hooked",
        [Tools::BuiltinEdit, Tools::BuiltinWrite],
    );
    let ended = world.run_all(&sessions);
    let tally = world.tally();
    let refused = assert_refusals_reached_the_model(&world, &names(&sessions), false, &ended);
    cli_install::figure(format!(
        "real-cli: claude-code with writ's hooks, {N} sessions at once: landed {}, lost {}, refusals by writ {refused}",
        tally.landed,
        tally.lost.len()
    ));
    world.assert_none_lost(&tally, &ended);
}

/// (c) With writ: one session whose model starts 3 subagents in one
/// message (Claude Code's `Agent` tool), each adding its line to the shared
/// file with the built-in tools at the same moment. Subagents are separate
/// agents to writ: 0 lost, all land, and no subagent is refused as if
/// another's reservation were its own session's.
#[test]
fn c_with_writ_hooks_subagents_of_one_session_lose_nothing() {
    let mut world = World::new();
    world.serve(&[]);
    world.configure();
    let subagents = 3;
    let meet = Rendezvous::new(subagents, Duration::from_secs(90));
    let mut prompts = Vec::new();
    let mut subs = Vec::new();
    for i in 0..subagents {
        let name = format!("sub{i}");
        let kind = [Tools::BuiltinEdit, Tools::BuiltinWrite][i % 2];
        let script =
            Appender::new(kind, &world.root, SHARED, &line_of(&name)).meeting(meet.clone());
        prompts.push(world.appender(&name, script));
        subs.push(name);
    }
    world.model.add("main", Spawner::new(prompts));
    let spawned = meet.clone();
    let ended = world.run_all(&[(
        "main".into(),
        format!(
            "{} Have three subagents add their lines.",
            ScriptedModel::marker("main")
        ),
    )]);
    assert!(
        spawned.all_met(),
        "the 3 subagents did not all run at once (each read before any wrote): {}",
        world.story(&ended)
    );
    let tally = world.tally();
    let refused = assert_refusals_reached_the_model(&world, &subs, false, &ended);
    cli_install::figure(format!(
        "real-cli: claude-code with writ's hooks, {subagents} subagents of one session: landed {}, lost {}, refusals by writ {refused}",
        tally.landed,
        tally.lost.len()
    ));
    world.assert_none_lost(&tally, &ended);
    // The main agent never writes here: a subagent refused because the
    // session's own actor holds the file was refused as the wrong agent
    // (the hook names a session's actor `claude-code-` + the first 8
    // characters of its session id).
    let session = ended
        .first()
        .and_then(Ended::session_id)
        .unwrap_or_else(|| panic!("no session id in the stream: {}", world.story(&ended)));
    let itself = format!("by 'claude-code-{}'", &session[..session.len().min(8)]);
    for name in &subs {
        for refusal in refusals(&world.model.transcript(name).results) {
            assert!(
                !refusal.text.contains(&itself),
                "{name} was refused naming its own session, not a sibling subagent: {:?}\n{}",
                refusal.text,
                world.story(&ended)
            );
        }
    }
}

/// (c, MCP) Subagents of one session editing through writ's MCP tools
/// (set up by `writ config claude --write` alone) are separate agents: one
/// subagent's read must not count for a sibling. sub0 reads; sub1 reads and
/// writes; sub2 reads the result (and writes only later); then sub0 writes its whole-file
/// `write_file` on its old read. Were the three one agent, sub2's read
/// would make sub0's stale write pass and sub1's line would be lost; as
/// separate agents sub0 is refused with the current content and redoes.
#[test]
fn c_writ_mcp_subagents_are_separate_agents() {
    let mut world = World::new();
    world.configure();
    let landed = Signal::new();
    let sub2_read = Signal::new();
    let sub0 = Appender::new(Tools::WritWrite, &world.root, SHARED, &line_of("msub0"))
        .after(sub2_read.clone());
    let sub1 = Appender::new(Tools::WritWrite, &world.root, SHARED, &line_of("msub1"))
        .signalling(landed.clone());
    let sub2 = Appender::new(Tools::WritWrite, &world.root, SHARED, &line_of("msub2"))
        .signalling_read(sub2_read);
    // sub1 and sub2 start only once sub0 has read, sub2 reads once sub1
    // landed: a start order the scripts keep by waiting, not by sleeping.
    let sub0_read = Signal::new();
    let sub0_tried = Signal::new();
    let sub0 = sub0
        .signalling_read(sub0_read.clone())
        .signalling_first_result(sub0_tried.clone());
    let sub1 = sub1.waiting_to_start(sub0_read);
    // sub2 writes only after sub0's stale write was judged.
    let sub2 = sub2.waiting_to_start(landed).after(sub0_tried);
    let prompts = vec![
        world.appender("msub0", sub0),
        world.appender("msub1", sub1),
        world.appender("msub2", sub2),
    ];
    world.model.add("mmain", Spawner::new(prompts));
    let ended = world.run_all(&[(
        "mmain".into(),
        format!(
            "{} Have three subagents add their lines.",
            ScriptedModel::marker("mmain")
        ),
    )]);
    let tally = world.tally();
    let subs: Vec<String> = ["msub0", "msub1", "msub2"].map(String::from).to_vec();
    let refused = assert_refusals_reached_the_model(&world, &subs, true, &ended);
    cli_install::figure(format!(
        "real-cli: claude-code with writ's MCP tools, 3 subagents of one session, a stale write after a sibling's read: landed {}, lost {:?}, refusals by writ {refused}",
        tally.landed, tally.lost
    ));
    world.assert_none_lost(&tally, &ended);
}

/// (d) writ's MCP tools only, set up by `writ config claude --write` alone
/// (no server started by hand): N sessions at once with `read_file` and
/// `edit_file`/`write_file`. The model sees the real text of every result
/// (the file's lines, each refusal's sentence and content), 0 lost.
#[test]
fn d_writ_mcp_tools_alone_show_the_model_every_result() {
    let mut world = World::new();
    world.configure();
    let sessions = contended(&mut world, "mcp", [Tools::WritEdit, Tools::WritWrite]);
    let ended = world.run_all(&sessions);
    let tally = world.tally();
    for name in names(&sessions) {
        for result in world.model.transcript(&name).results {
            if result.name == "mcp__writ__read_file" {
                assert!(
                    edit_script::numbered_lines(&result.text).is_some(),
                    "{name}'s model was sent a read without the file's lines: {:?}\n{}",
                    result.text,
                    world.story(&ended)
                );
            }
        }
    }
    let refused = assert_refusals_reached_the_model(&world, &names(&sessions), true, &ended);
    cli_install::figure(format!(
        "real-cli: claude-code with writ's MCP tools, {N} sessions at once: landed {}, lost {}, refusals by writ {refused}",
        tally.landed,
        tally.lost.len()
    ));
    world.assert_none_lost(&tally, &ended);
}

/// (e) A model that thinks longer than every lease and TTL: the server runs
/// with a 1 s lease; one session reads, another session's
/// write lands, and the first thinks 3 s before its stale Edit. The Edit
/// gets a decision — refused with writ's sentence — never an undecided
/// pass; after redoing on a fresh read both lines are there.
#[test]
fn e_a_model_thinking_past_every_ttl_is_still_denied() {
    let mut world = World::new();
    world.serve(&["--lease-ttl", "1"]);
    world.configure();
    let meet = Rendezvous::new(2, Duration::from_secs(90));
    let landed = Signal::new();
    let quick = Appender::new(Tools::BuiltinEdit, &world.root, SHARED, &line_of("quick"))
        .meeting(meet.clone())
        .signalling(landed.clone());
    let slow = Appender::new(Tools::BuiltinEdit, &world.root, SHARED, &line_of("slow"))
        .meeting(meet)
        .after(landed)
        .thinking(Duration::from_secs(3));
    let p1 = world.appender("quick", quick);
    let p2 = world.appender("slow", slow);
    let ended = world.run_all(&[("quick".into(), p1), ("slow".into(), p2)]);
    let tally = world.tally();
    let first_write = world.first_result("slow", "Edit");
    cli_install::figure(format!(
        "real-cli: claude-code with writ's hooks, a 3 s think past a 1 s lease: first write after it {:?}, lost {}",
        first_write.as_ref().map(|r| r.text.clone()),
        tally.lost.len()
    ));
    let Some(first_write) = first_write else {
        panic!("the slow session never wrote: {}", world.story(&ended));
    };
    assert!(
        !edit_script::write_succeeded(&first_write)
            && WRIT_SAYS.iter().any(|s| first_write.text.contains(s)),
        "the stale Edit after a long think was not denied by writ: {:?}\n{}",
        first_write.text,
        world.story(&ended)
    );
    world.assert_none_lost(&tally, &ended);
}

/// (e, reserved) The case a lapsed hook actor let through: while one
/// session's model thinks 3 s past its 1 s lease, another agent reserves
/// the file through writ's MCP `reserve`; the thinker's Edit then (its read
/// not stale) must be refused naming the reservation, not land through
/// it undecided.
#[test]
fn e_a_model_thinking_past_every_ttl_is_refused_by_a_reservation() {
    let mut world = World::new();
    world.serve(&["--lease-ttl", "1"]);
    world.configure();
    let reserved = Signal::new();
    let tried = Signal::new();
    let holder = Appender::new(Tools::WritEdit, &world.root, SHARED, &line_of("holder"))
        .reserving(reserved.clone(), tried.clone());
    let slow = Appender::new(Tools::BuiltinEdit, &world.root, SHARED, &line_of("thinker"))
        .after(reserved)
        .thinking(Duration::from_secs(3))
        .signalling_first_result(tried);
    let p1 = world.appender("holder", holder);
    let p2 = world.appender("thinker", slow);
    let ended = world.run_all(&[("holder".into(), p1), ("thinker".into(), p2)]);
    assert_reserved(&world, "holder", &ended);
    let tally = world.tally();
    let first_write = world.first_result("thinker", "Edit");
    cli_install::figure(format!(
        "real-cli: claude-code with writ's hooks, a 3 s think past a 1 s lease into another agent's reservation: first write got {:?}; lost {}",
        first_write.as_ref().map(|r| r.text.clone()),
        tally.lost.len()
    ));
    let Some(first_write) = first_write else {
        panic!("the thinker never wrote: {}", world.story(&ended));
    };
    assert!(
        !edit_script::write_succeeded(&first_write)
            && WRIT_SAYS.iter().any(|s| first_write.text.contains(s)),
        "the Edit after a long think landed through another agent's reservation: {:?}\n{}",
        first_write.text,
        world.story(&ended)
    );
    world.assert_none_lost(&tally, &ended);
}

/// (f) Two sessions whose `writ mcp` bridges find no server share one
/// scheduler: one reserves the shared file through writ's `reserve`, and
/// the other's `write_file` meanwhile is refused naming the reservation;
/// afterwards both land.
#[test]
fn f_two_bridges_without_a_server_share_one_scheduler() {
    let mut world = World::new();
    world.configure();
    let reserved = Signal::new();
    let tried = Signal::new();
    let holder = Appender::new(Tools::WritEdit, &world.root, SHARED, &line_of("holder"))
        .reserving(reserved.clone(), tried.clone());
    let other = Appender::new(Tools::WritEdit, &world.root, SHARED, &line_of("other"))
        .after(reserved)
        .signalling_first_result(tried);
    let p1 = world.appender("holder", holder);
    let p2 = world.appender("other", other);
    let ended = world.run_all(&[("holder".into(), p1), ("other".into(), p2)]);
    assert_reserved(&world, "holder", &ended);
    let tally = world.tally();
    let first_write = world.first_result("other", "mcp__writ__edit_file");
    cli_install::figure(format!(
        "real-cli: claude-code, two writ mcp bridges and no server: the write during the other's reservation got {:?}; lost {}",
        first_write.as_ref().map(|r| r.text.clone()),
        tally.lost.len()
    ));
    let Some(first_write) = first_write else {
        panic!("the second session never wrote: {}", world.story(&ended));
    };
    assert!(
        !edit_script::write_succeeded(&first_write),
        "a write landed through another session's reservation: {:?}\n{}",
        first_write.text,
        world.story(&ended)
    );
    world.assert_none_lost(&tally, &ended);
}
