//! `writ hook claude-code` fed real-shaped Claude Code events, as separate
//! processes against a running server (SPEC §14 "Hooks", "Hooks fail
//! closed", "Subagents of one client process"; §6 "What the agent saw").

#![cfg(all(feature = "mcp", feature = "server", feature = "remote"))]

#[path = "common/mcp_http_client.rs"]
mod http_client;
#[path = "common/scratch.rs"]
mod scratch;

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use scratch::{runtime, workspace};
use serde_json::{Value, json};
use writ::server::{Options, Server};

/// A workspace with its server and the hook's own state folder.
struct Setup {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    root: PathBuf,
    state: PathBuf,
}

fn setup() -> Setup {
    let (dir, root) = workspace();
    let (state_dir, state) = workspace();
    Setup {
        _dirs: (dir, state_dir),
        root,
        state,
    }
}

async fn serve(root: &Path, lease_ttl: Duration, history: Option<&Path>) -> Server {
    let mut config = writ::Config::default().durability(writ::Durability::Process);
    if let Some(history) = history {
        config = config.history_dir(history);
    }
    Server::start(
        Options::new(root)
            .config(config)
            .lease_ttl(lease_ttl)
            .discovery_file(root.join(".writ/serve.json")),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

/// Runs `writ hook claude-code` on one event and returns what it printed.
fn hook(state: &Path, event: &Value) -> String {
    hook_of("claude-code", state, event)
}

/// Runs `writ hook CLIENT` on one event and returns what it printed.
fn hook_of(client: &str, state: &Path, event: &Value) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["hook", client])
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(event.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("stdin: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(out.status.success(), "the hook must never fail the call");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs events one after the other, off the server's runtime.
async fn run(state: &Path, events: Vec<Value>) -> Vec<String> {
    let state = state.to_path_buf();
    tokio::task::spawn_blocking(move || events.iter().map(|e| hook(&state, e)).collect())
        .await
        .unwrap_or_else(|e| panic!("hook thread: {e}"))
}

/// Runs events all at once, each its own process.
async fn run_parallel(state: &Path, events: Vec<Value>) -> Vec<String> {
    let tasks: Vec<_> = events
        .into_iter()
        .map(|e| {
            let state = state.to_path_buf();
            tokio::task::spawn_blocking(move || hook(&state, &e))
        })
        .collect();
    let mut outs = Vec::new();
    for task in tasks {
        outs.push(task.await.unwrap_or_else(|e| panic!("hook thread: {e}")));
    }
    outs
}

/// A tool event of Claude Code's documented shape; `agent` makes it a
/// subagent's.
fn tool(
    root: &Path,
    who: (&str, Option<&str>),
    when: &str,
    tool: &str,
    id: &str,
    file: &str,
) -> Value {
    let mut event = json!({
        "session_id": who.0, "transcript_path": "/dev/null", "cwd": root,
        "permission_mode": "default", "hook_event_name": when, "tool_name": tool,
        "tool_input": {"file_path": root.join(file), "old_string": "a", "new_string": "b"},
        "tool_use_id": id,
    });
    if let Some(agent) = who.1 {
        event["agent_id"] = json!(agent);
        event["agent_type"] = json!("general-purpose");
    }
    event
}

/// A `PostToolUse` of `Read` that showed the model `content`, lines
/// `start..` of `total`.
fn read(
    root: &Path,
    who: (&str, Option<&str>),
    id: &str,
    file: &str,
    shown: (&str, u64, u64),
) -> Value {
    let (content, start, total) = shown;
    let mut event = tool(root, who, "PostToolUse", "Read", id, file);
    event["tool_input"] = json!({"file_path": root.join(file)});
    event["tool_response"] = json!({"type": "text", "file": {
        "filePath": root.join(file), "content": content,
        "numLines": content.lines().count(), "startLine": start, "totalLines": total,
    }});
    event
}

/// A `Read` of the whole file as it is now.
fn read_all(root: &Path, who: (&str, Option<&str>), id: &str, file: &str) -> Value {
    let content = fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{e}"));
    let total = content.lines().count() as u64;
    read(root, who, id, file, (&content, 1, total))
}

fn prompt(root: &Path, session: &str, text: &str) -> Value {
    json!({
        "session_id": session, "transcript_path": "/dev/null", "cwd": root,
        "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": text,
    })
}

fn denied(out: &str) -> Option<String> {
    let v: Value = serde_json::from_str(out).ok()?;
    let out = &v["hookSpecificOutput"];
    (out["permissionDecision"] == "deny").then(|| {
        out["permissionDecisionReason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
}

fn call_holds(server: &Server) -> Vec<String> {
    let dump = server.scheduler().dump();
    dump.holds
        .iter()
        .filter(|h| h.kind == writ::HoldKind::Call)
        .map(|h| h.actor.clone())
        .collect()
}

const S: &str = "5def7bb7-0000-4000-8000-000000000001";

#[test]
fn a_lapsed_lease_still_denies_unread_or_stale_writes_and_allows_them_after_a_read() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("b.rs"), "two\n").unwrap_or_else(|e| panic!("{e}"));
    let ttl = Duration::from_millis(600);
    runtime().block_on(async {
        let server = serve(root, ttl, None).await;
        let main = (S, None);
        let outs = run(
            &t.state,
            vec![
                read_all(root, main, "r1", "a.rs"),
                tool(root, main, "PreToolUse", "Edit", "e1", "a.rs"),
            ],
        )
        .await;
        assert_eq!(outs[1], "", "a read file is written: {outs:?}");
        fs::write(root.join("a.rs"), "one, by claude\n").unwrap_or_else(|e| panic!("{e}"));
        run(
            &t.state,
            vec![tool(root, main, "PostToolUse", "Edit", "e1", "a.rs")],
        )
        .await;
        // A person changes a.rs; the model thinks longer than the lease.
        fs::write(root.join("a.rs"), "one, by a person\n").unwrap_or_else(|e| panic!("{e}"));
        tokio::time::sleep(ttl * 4).await;
        assert!(
            server.scheduler().dump().actors.is_empty(),
            "the pause must outlast the hook actor's lease"
        );
        let outs = run(
            &t.state,
            vec![
                tool(root, main, "PreToolUse", "Edit", "e2", "a.rs"),
                tool(root, main, "PreToolUse", "Write", "w1", "b.rs"),
            ],
        )
        .await;
        let stale = denied(&outs[0]).unwrap_or_else(|| panic!("a stale edit passed: {outs:?}"));
        assert!(stale.contains("changed since you last read it"), "{stale}");
        let unread = denied(&outs[1]).unwrap_or_else(|| panic!("an unread write passed: {outs:?}"));
        assert!(unread.contains("has not been read"), "{unread}");
        assert!(
            call_holds(&server).is_empty(),
            "a denied call holds nothing"
        );
        // After a read, the same calls pass, reserved by a new actor.
        let outs = run(
            &t.state,
            vec![
                read_all(root, main, "r2", "a.rs"),
                tool(root, main, "PreToolUse", "Edit", "e3", "a.rs"),
            ],
        )
        .await;
        assert_eq!(outs[1], "", "{outs:?}");
        assert_eq!(
            call_holds(&server),
            vec!["claude-code-5def7bb7".to_string()]
        );
        run(
            &t.state,
            vec![tool(root, main, "PostToolUse", "Edit", "e3", "a.rs")],
        )
        .await;
        assert!(call_holds(&server).is_empty());
        server.shutdown().await;
    });
}

#[test]
fn a_write_under_a_served_root_whose_server_stopped_is_denied() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let main = (S, None);
        run(&t.state, vec![read_all(root, main, "r1", "a.rs")]).await;
        // A server that died (killed, crashed) leaves its discovery file.
        let discovery = root.join(".writ/serve.json");
        let left = fs::read(&discovery).unwrap_or_else(|e| panic!("{e}"));
        server.shutdown().await;
        fs::write(&discovery, left).unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&discovery, fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        let outs = run(
            &t.state,
            vec![tool(root, main, "PreToolUse", "Edit", "e1", "a.rs")],
        )
        .await;
        assert!(
            denied(&outs[0]).is_some(),
            "allowed with the server down: {outs:?}"
        );
    });
}

#[test]
fn a_read_marks_what_the_tool_returned_not_the_file_after() {
    let t = setup();
    let root = &t.root;
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let main = (S, None);
        // The model was shown "old"; another session's edit landed before
        // the PostToolUse ran.
        fs::write(root.join("a.rs"), "new, by another session\n").unwrap_or_else(|e| panic!("{e}"));
        let outs = run(
            &t.state,
            vec![
                read(root, main, "r1", "a.rs", ("old\n", 1, 1)),
                tool(root, main, "PreToolUse", "Edit", "e1", "a.rs"),
            ],
        )
        .await;
        let reason = denied(&outs[1]).unwrap_or_else(|| panic!("allowed: {outs:?}"));
        assert!(
            reason.contains("changed since you last read it"),
            "{reason}"
        );
        server.shutdown().await;
    });
}

#[test]
fn a_partial_read_allows_an_edit_but_not_a_whole_write() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "1\n2\n3\n4\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let main = (S, None);
        let outs = run(
            &t.state,
            vec![
                read(root, main, "r1", "a.rs", ("2\n3\n", 2, 4)),
                tool(root, main, "PreToolUse", "Write", "w1", "a.rs"),
                tool(root, main, "PreToolUse", "Edit", "e1", "a.rs"),
            ],
        )
        .await;
        let reason = denied(&outs[1]).unwrap_or_else(|| panic!("a whole write passed: {outs:?}"));
        assert!(reason.contains("lines 2-3 of 4"), "{reason}");
        assert_eq!(outs[2], "", "an edit needs any view: {outs:?}");
        run(
            &t.state,
            vec![tool(root, main, "PostToolUse", "Edit", "e1", "a.rs")],
        )
        .await;
        server.shutdown().await;
    });
}

#[test]
fn subagents_of_one_session_are_separate_agents() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("shared.py"), "v1\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let (one, two) = ((S, Some("a1b2c3d4e5f6")), (S, Some("f6e5d4c3b2a1")));
        let outs = run(
            &t.state,
            vec![
                read_all(root, one, "r1", "shared.py"),
                read_all(root, two, "r2", "shared.py"),
                tool(root, one, "PreToolUse", "Edit", "e1", "shared.py"),
                tool(root, two, "PreToolUse", "Edit", "e2", "shared.py"),
            ],
        )
        .await;
        assert_eq!(outs[2], "", "{outs:?}");
        let busy = denied(&outs[3]).unwrap_or_else(|| panic!("both held it: {outs:?}"));
        assert!(busy.contains("claude-code-5def7bb7/a1b2c3d4"), "{busy}");
        fs::write(root.join("shared.py"), "v2 by one\n").unwrap_or_else(|e| panic!("{e}"));
        // One's read of its own write is no read of its sibling's.
        let outs = run(
            &t.state,
            vec![
                tool(root, one, "PostToolUse", "Edit", "e1", "shared.py"),
                read_all(root, one, "r3", "shared.py"),
                tool(root, two, "PreToolUse", "Edit", "e3", "shared.py"),
            ],
        )
        .await;
        let stale = denied(&outs[2]).unwrap_or_else(|| panic!("a stale edit passed: {outs:?}"));
        assert!(stale.contains("changed since you last read it"), "{stale}");
        let dump = server.scheduler().dump();
        let main = dump
            .actors
            .iter()
            .find(|a| a.name == "claude-code-5def7bb7");
        let child = dump
            .actors
            .iter()
            .find(|a| a.name == "claude-code-5def7bb7/a1b2c3d4");
        assert!(
            matches!((main, child), (Some(m), Some(c)) if c.parent == Some(m.id)),
            "a subagent is a child of its session's actor:\n{dump}"
        );
        server.shutdown().await;
    });
}

#[test]
fn parallel_hooks_of_one_session_lose_no_hold() {
    let t = setup();
    let root = &t.root;
    let n = 8;
    for i in 0..n {
        fs::write(root.join(format!("f{i}.rs")), "x\n").unwrap_or_else(|e| panic!("{e}"));
    }
    fs::write(root.join("shared.rs"), "x\n").unwrap_or_else(|e| panic!("{e}"));
    let agents: Vec<String> = (0..n).map(|i| format!("{i}a2b3c4d5e6f")).collect();
    let who = |i: usize| (S, Some(agents[i].as_str()));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let reads = (0..n)
            .flat_map(|i| {
                [
                    read_all(root, who(i), &format!("r{i}"), &format!("f{i}.rs")),
                    read_all(root, who(i), &format!("s{i}"), "shared.rs"),
                ]
            })
            .collect();
        run(&t.state, reads).await;
        // Each subagent edits its own file and the shared one, all at once.
        let pres = (0..n)
            .flat_map(|i| {
                [
                    tool(
                        root,
                        who(i),
                        "PreToolUse",
                        "Edit",
                        &format!("e{i}"),
                        &format!("f{i}.rs"),
                    ),
                    tool(
                        root,
                        who(i),
                        "PreToolUse",
                        "Edit",
                        &format!("x{i}"),
                        "shared.rs",
                    ),
                ]
            })
            .collect();
        let outs = run_parallel(&t.state, pres).await;
        let own: Vec<&String> = outs.iter().step_by(2).collect();
        assert!(own.iter().all(|o| o.is_empty()), "own files: {own:?}");
        let shared_allowed: Vec<usize> = (0..n).filter(|i| outs[2 * i + 1].is_empty()).collect();
        assert_eq!(
            shared_allowed.len(),
            1,
            "one holds the shared file: {outs:?}"
        );
        assert_eq!(call_holds(&server).len(), n + 1);
        let posts = (0..n)
            .flat_map(|i| {
                [
                    tool(
                        root,
                        who(i),
                        "PostToolUse",
                        "Edit",
                        &format!("e{i}"),
                        &format!("f{i}.rs"),
                    ),
                    tool(
                        root,
                        who(i),
                        "PostToolUse",
                        "Edit",
                        &format!("x{i}"),
                        "shared.rs",
                    ),
                ]
            })
            .collect();
        run_parallel(&t.state, posts).await;
        let left = call_holds(&server);
        assert!(left.is_empty(), "leaked holds: {left:?}");
        server.shutdown().await;
    });
}

#[test]
fn subagent_stop_releases_its_holds_and_its_actor() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let sub = (S, Some("a1b2c3d4e5f6"));
        let outs = run(
            &t.state,
            vec![
                read_all(root, sub, "r1", "a.rs"),
                tool(root, sub, "PreToolUse", "Edit", "e1", "a.rs"),
            ],
        )
        .await;
        assert_eq!(outs[1], "");
        assert_eq!(call_holds(&server).len(), 1);
        let mut stop = prompt(root, S, "");
        stop["hook_event_name"] = json!("SubagentStop");
        stop["agent_id"] = json!("a1b2c3d4e5f6");
        stop["agent_type"] = json!("general-purpose");
        run(&t.state, vec![stop]).await;
        let dump = server.scheduler().dump();
        assert!(call_holds(&server).is_empty(), "{dump}");
        assert!(
            !dump.actors.iter().any(|a| a.name.contains("/a1b2c3d4")),
            "{dump}"
        );
        server.shutdown().await;
    });
}

/// A subagent's calls of writ's MCP tools act as the agent its hook names
/// (`claude-<session>/<agent>`), which no MCP session ends: its stop
/// releases that agent's reservations too, at once.
#[test]
fn subagent_stop_releases_what_its_mcp_agent_reserved() {
    let t = setup();
    let root = &t.root;
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let url = format!("{}/mcp", server.url());
        let mut bridge = http_client::McpHttp::modern(&url, server.token());
        let (error, text) = bridge
            .call(
                "reserve",
                json!({"paths": ["src/"], "agent": "claude-5def7bb7/a1b2c3d4"}),
            )
            .await;
        assert!(!error, "{text}");
        let held = |server: &Server| server.scheduler().dump().holds.len();
        assert_eq!(held(&server), 1);
        let mut stop = prompt(root, S, "");
        stop["hook_event_name"] = json!("SubagentStop");
        stop["agent_id"] = json!("a1b2c3d4e5f6");
        stop["agent_type"] = json!("general-purpose");
        run(&t.state, vec![stop]).await;
        assert_eq!(
            held(&server),
            0,
            "the stopped subagent's MCP reservation stayed: {}",
            server.scheduler().dump()
        );
        server.shutdown().await;
    });
}

/// A hooked write refused because the file changed since the agent's read
/// leaves that agent a claim on the file (SPEC §6): another session's
/// write is refused naming the claimer until the claimer's redo lands.
#[test]
fn a_stale_hooked_write_claims_the_file_until_its_redo() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let (alice, bob) = ((S, None), ("0b0b0b0b-0000-4000-8000-000000000002", None));
        run(&t.state, vec![read_all(root, alice, "r1", "a.rs")]).await;
        fs::write(root.join("a.rs"), "one\ntwo\n").unwrap_or_else(|e| panic!("{e}"));
        let outs = run(
            &t.state,
            vec![tool(root, alice, "PreToolUse", "Edit", "e1", "a.rs")],
        )
        .await;
        assert!(outs[0].contains("changed since"), "{outs:?}");
        let claims = |server: &Server| {
            let dump = server.scheduler().dump();
            dump.holds
                .iter()
                .filter(|h| h.kind == writ::HoldKind::Claim)
                .map(|h| h.actor.clone())
                .collect::<Vec<_>>()
        };
        let held = claims(&server);
        assert!(
            held.len() == 1 && held[0].starts_with("claude-code-5def7bb7"),
            "alice's stale write left her no claim: {held:?}"
        );
        // Bob, with a fresh read, is held back while alice redoes.
        let outs = run(
            &t.state,
            vec![
                read_all(root, bob, "r2", "a.rs"),
                tool(root, bob, "PreToolUse", "Edit", "e2", "a.rs"),
            ],
        )
        .await;
        assert!(outs[1].contains("claimed by"), "{outs:?}");
        // Alice reads again and redoes: her write passes and ends the claim.
        let outs = run(
            &t.state,
            vec![
                read_all(root, alice, "r3", "a.rs"),
                tool(root, alice, "PreToolUse", "Edit", "e3", "a.rs"),
                tool(root, alice, "PostToolUse", "Edit", "e3", "a.rs"),
            ],
        )
        .await;
        assert_eq!(outs[1], "", "{outs:?}");
        assert!(claims(&server).is_empty(), "the redo did not end the claim");
        server.shutdown().await;
    });
}

#[test]
fn a_task_notification_starts_no_turn() {
    let t = setup();
    let root = &t.root;
    let history = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("a.rs"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), Some(history.path())).await;
        let main = (S, None);
        run(
            &t.state,
            vec![
                prompt(root, S, "fix a.rs"),
                prompt(
                    root,
                    S,
                    "<task-notification>\n<task-id>b1</task-id>\n<status>completed</status>\n</task-notification>",
                ),
                read_all(root, main, "r1", "a.rs"),
                tool(root, main, "PreToolUse", "Edit", "e1", "a.rs"),
            ],
        )
        .await;
        fs::write(root.join("a.rs"), "two\n").unwrap_or_else(|e| panic!("{e}"));
        run(&t.state, vec![tool(root, main, "PostToolUse", "Edit", "e1", "a.rs")]).await;
        let session = writ::remote::Session::connect(server.url(), server.token())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let turn = format!("claude-code-{S}-1");
        session
            .rewind_turn(&turn)
            .await
            .unwrap_or_else(|e| panic!("the write is in the prompt's turn: {e}"));
        assert_eq!(fs::read_to_string(root.join("a.rs")).unwrap_or_default(), "one\n");
        session.close().await.unwrap_or_else(|e| panic!("{e}"));
        server.shutdown().await;
    });
}

#[test]
fn a_call_of_writs_mcp_tools_names_its_agent() {
    let t = setup();
    let event = |agent: Option<&str>| {
        let mut e = json!({
            "session_id": S, "transcript_path": "/dev/null", "cwd": t.root,
            "permission_mode": "default", "hook_event_name": "PreToolUse",
            "tool_name": "mcp__writ__write_file", "tool_use_id": "m1",
            "tool_input": {"path": "a.rs", "content": "x\n", "agent": "made-up"},
        });
        if let Some(agent) = agent {
            e["agent_id"] = json!(agent);
        }
        e
    };
    // A subagent is named; the main conversation names no agent (its own
    // bridge's agent acts, whose reservations end with the session), and
    // an agent the model made up is never passed on.
    for (agent, input) in [
        (None, json!({"path": "a.rs", "content": "x\n"})),
        (
            Some("a1b2c3d4e5f6"),
            json!({"path": "a.rs", "content": "x\n", "agent": "claude-5def7bb7/a1b2c3d4"}),
        ),
    ] {
        let out = hook(&t.state, &event(agent));
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let o = &v["hookSpecificOutput"];
        assert_eq!(o["hookEventName"], "PreToolUse");
        assert_eq!(o["permissionDecision"], "allow");
        assert_eq!(o["updatedInput"], input);
    }
}

#[test]
fn every_hooked_event_renews_the_lease_reads_included() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    let ttl = Duration::from_millis(1500);
    runtime().block_on(async {
        let server = serve(root, ttl, None).await;
        let main = (S, None);
        let outs = run(
            &t.state,
            vec![
                read_all(root, main, "r0", "a.rs"),
                tool(root, main, "PreToolUse", "Edit", "e0", "a.rs"),
                tool(root, main, "PostToolUse", "Edit", "e0", "a.rs"),
            ],
        )
        .await;
        assert_eq!(outs[1], "");
        let actor = |server: &Server| {
            let dump = server.scheduler().dump();
            dump.actors.iter().map(|a| a.id).collect::<Vec<_>>()
        };
        let first = actor(&server);
        assert_eq!(first.len(), 1);
        // Only reads, each within the lease's TTL of the last, for twice the TTL.
        for i in 0..6 {
            tokio::time::sleep(ttl / 3).await;
            run(
                &t.state,
                vec![read_all(root, main, &format!("r{}", i + 1), "a.rs")],
            )
            .await;
        }
        assert_eq!(actor(&server), first, "the hook's actor outlived the gaps");
        server.shutdown().await;
    });
}

/// A Codex CLI `apply_patch` event of the shape Codex sends.
fn codex(root: &Path, session: &str, when: &str, id: &str, patch: &str) -> Value {
    json!({
        "session_id": session, "turn_id": "t-1", "cwd": root, "model": "gpt-5-codex",
        "permission_mode": "bypassPermissions", "transcript_path": null,
        "hook_event_name": when, "tool_name": "apply_patch", "tool_use_id": id,
        "tool_input": {"command": patch},
    })
}

#[test]
fn a_codex_patch_is_admitted_all_or_none_and_never_adds_over_a_file() {
    let t = setup();
    let root = &t.root;
    fs::write(root.join("a.rs"), "a\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("c.rs"), "c\n").unwrap_or_else(|e| panic!("{e}"));
    let state = t.state.clone();
    let codex_hook = move |e: Value| {
        let state = state.clone();
        async move {
            tokio::task::spawn_blocking(move || hook_of("codex", &state, &e))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let update_a = "*** Begin Patch\n*** Update File: a.rs\n@@\n-a\n+a2\n*** Add File: new.txt\n+n\n*** End Patch\n";
        let out = codex_hook(codex(root, "codex-1", "PreToolUse", "p1", update_a)).await;
        assert_eq!(out, "", "an update and an add of a new file pass");
        let dump = server.scheduler().dump();
        assert_eq!(dump.holds.len(), 1, "{dump}");
        assert_eq!(dump.holds[0].paths.len(), 2, "{dump}");
        assert_eq!(dump.holds[0].actor, "codex-codex-1");
        // Another session's patch touching a.rs and c.rs: refused whole.
        let both = "*** Begin Patch\n*** Update File: c.rs\n@@\n-c\n+c2\n*** Update File: a.rs\n@@\n-a\n+a3\n*** End Patch\n";
        let out = codex_hook(codex(root, "codex-2", "PreToolUse", "p2", both)).await;
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny", "{v}");
        assert_eq!(server.scheduler().dump().holds.len(), 1, "c.rs stays free");
        fs::write(root.join("a.rs"), "a2\n").unwrap_or_else(|e| panic!("{e}"));
        fs::write(root.join("new.txt"), "n\n").unwrap_or_else(|e| panic!("{e}"));
        codex_hook(codex(root, "codex-1", "PostToolUse", "p1", update_a)).await;
        assert!(server.scheduler().dump().holds.is_empty());
        // An Add File over an existing file would replace it unseen.
        let add = "*** Begin Patch\n*** Add File: a.rs\n+mine\n*** End Patch\n";
        let out = codex_hook(codex(root, "codex-2", "PreToolUse", "p3", add)).await;
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let reason = v["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap_or_default();
        assert!(reason.contains("already exists"), "{v}");
        server.shutdown().await;
    });
}

/// A Gemini CLI tool event of the shape Gemini CLI sends.
fn gemini(root: &Path, when: &str, tool: &str, input: Value, response: Option<&str>) -> Value {
    let mut e = json!({
        "session_id": "gem-0001", "transcript_path": "/dev/null", "cwd": root,
        "hook_event_name": when, "timestamp": "2026-12-05T22:00:00Z",
        "tool_name": tool, "tool_input": input,
    });
    if let Some(text) = response {
        e["tool_response"] = json!({"llmContent": text, "returnDisplay": ""});
    }
    e
}

#[test]
fn gemini_cli_writes_need_what_read_file_showed_and_are_denied_its_way() {
    let t = setup();
    let root = &t.root;
    let file = root.join("a.py");
    fs::write(&file, "theirs\n").unwrap_or_else(|e| panic!("{e}"));
    let state = t.state.clone();
    let gem = move |e: Value| {
        let state = state.clone();
        async move {
            tokio::task::spawn_blocking(move || hook_of("gemini", &state, &e))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    runtime().block_on(async {
        let server = serve(root, Duration::from_secs(15), None).await;
        let write = json!({"file_path": file, "content": "mine\n"});
        // read_file showed "mine-old"; the file changed before AfterTool.
        gem(gemini(
            root,
            "AfterTool",
            "read_file",
            json!({"file_path": file}),
            Some("old\n"),
        ))
        .await;
        let out = gem(gemini(
            root,
            "BeforeTool",
            "write_file",
            write.clone(),
            None,
        ))
        .await;
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(v["decision"], "deny", "{v}");
        assert!(
            v["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("changed since"),
            "{v}"
        );
        // A ranged read allows a replace, not a whole write.
        let ranged = json!({"file_path": file, "offset": 0, "limit": 1});
        gem(gemini(
            root,
            "AfterTool",
            "read_file",
            ranged,
            Some("theirs\n"),
        ))
        .await;
        let out = gem(gemini(
            root,
            "BeforeTool",
            "write_file",
            write.clone(),
            None,
        ))
        .await;
        assert!(out.contains("\"deny\""), "{out}");
        let replace = json!({"file_path": file, "old_string": "theirs", "new_string": "ours"});
        let out = gem(gemini(root, "BeforeTool", "replace", replace.clone(), None)).await;
        assert_eq!(out, "");
        fs::write(&file, "ours\n").unwrap_or_else(|e| panic!("{e}"));
        gem(gemini(root, "AfterTool", "replace", replace, Some("ok"))).await;
        assert!(server.scheduler().dump().holds.is_empty());
        // A whole read, as the tool returned it, allows the whole write.
        gem(gemini(
            root,
            "AfterTool",
            "read_file",
            json!({"file_path": file}),
            Some("ours\n"),
        ))
        .await;
        let out = gem(gemini(
            root,
            "BeforeTool",
            "write_file",
            write.clone(),
            None,
        ))
        .await;
        assert_eq!(out, "");
        gem(gemini(root, "AfterTool", "write_file", write, Some("ok"))).await;
        assert!(server.scheduler().dump().holds.is_empty());
        server.shutdown().await;
    });
}
