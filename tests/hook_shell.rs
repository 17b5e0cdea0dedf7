//! The hooks' shell tools sent through `writ run` (SPEC §17 "Hooks send
//! shell commands through it"): `writ hook claude-code` fed Claude Code's
//! `PreToolUse` of `Bash`, and `writ hook gemini` Gemini CLI's
//! `BeforeTool` of `run_shell_command`, as separate processes.

#![cfg(all(feature = "mcp", feature = "server", feature = "remote"))]

#[path = "common/scratch.rs"]
mod scratch;

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use scratch::{runtime, workspace};
use serde_json::{Value, json};
use writ::server::{Options, Server};

const S: &str = "5def7bb7-0000-4000-8000-000000000001";

/// The writ binary by the path the hook process sees itself at.
fn writ_exe() -> String {
    let exe = fs::canonicalize(env!("CARGO_BIN_EXE_writ")).unwrap_or_else(|e| panic!("{e}"));
    exe.to_string_lossy().into_owned()
}

/// Runs `writ hook CLIENT` on one event and returns what it printed.
fn hook(client: &str, state: &Path, event: &Value) -> String {
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

/// A `PreToolUse` of `Bash` of Claude Code's documented shape.
fn bash(cwd: &Path, agent: Option<&str>, command: &str) -> Value {
    let mut e = json!({
        "session_id": S, "transcript_path": "/dev/null", "cwd": cwd,
        "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_use_id": "b1",
        "tool_input": {"command": command, "description": "edit", "timeout": 120000},
    });
    if let Some(agent) = agent {
        e["agent_id"] = json!(agent);
        e["agent_type"] = json!("general-purpose");
    }
    e
}

/// A folder with a discovery file, as a running `writ serve` leaves it
/// (the wrap needs no answer from the server, only the served folder).
fn served_folder() -> (tempfile::TempDir, PathBuf) {
    let (dir, root) = workspace();
    fs::create_dir_all(root.join(".writ")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join(".writ/serve.json"), "{}").unwrap_or_else(|e| panic!("{e}"));
    (dir, root)
}

fn updated_input(out: &str) -> Value {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let o = &v["hookSpecificOutput"];
    assert_eq!(o["hookEventName"], "PreToolUse", "{out}");
    assert_eq!(o["permissionDecision"], "allow", "{out}");
    o["updatedInput"].clone()
}

#[test]
fn a_bash_command_is_wrapped_in_writ_run_as_its_session_or_subagent() {
    let (_d, root) = served_folder();
    let (_s, state) = workspace();
    let line = "sed -i 's/a/b/' x.txt && echo \"done\"";
    for (agent, name) in [
        (None, "claude-code-5def7bb7"),
        (Some("a1b2c3d4e5f6"), "claude-code-5def7bb7/a1b2c3d4"),
    ] {
        let out = hook("claude-code", &state, &bash(&root, agent, line));
        let input = updated_input(&out);
        assert_eq!(
            input,
            json!({
                "command": writ::run::wrapped_command_line(&writ_exe(), name, line),
                "description": "edit",
                "timeout": 120000,
            })
        );
        // A second pass over the wrapped line leaves it as it is.
        let again = input["command"].as_str().unwrap_or_default();
        let out = hook("claude-code", &state, &bash(&root, agent, again));
        assert_eq!(out.trim(), "", "a wrapped line is not wrapped twice");
    }
}

#[test]
fn a_bash_command_outside_a_served_folder_passes_unchanged() {
    let (_d, root) = workspace();
    let (_s, state) = workspace();
    let out = hook("claude-code", &state, &bash(&root, None, "rm -f x.txt"));
    assert_eq!(out.trim(), "", "{out}");
}

#[test]
fn a_gemini_shell_command_is_wrapped_in_its_tool_input() {
    let (_d, root) = served_folder();
    let (_s, state) = workspace();
    let event = |cwd: &Path, input: Value| {
        json!({
            "session_id": "gem-0001-aaaa", "transcript_path": "/dev/null", "cwd": cwd,
            "hook_event_name": "BeforeTool", "timestamp": "2026-12-05T22:00:00Z",
            "tool_name": "run_shell_command", "tool_input": input,
        })
    };
    let out = hook(
        "gemini",
        &state,
        &event(
            &root,
            json!({"command": "git checkout -- .", "description": "reset"}),
        ),
    );
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        v["hookSpecificOutput"]["tool_input"],
        json!({
            "command": writ::run::wrapped_command_line(&writ_exe(), "gemini-gem-0001", "git checkout -- ."),
            "description": "reset",
        })
    );
    // `dir_path` outside any served folder: not writ's business.
    let (_o, other) = workspace();
    let out = hook(
        "gemini",
        &state,
        &event(&root, json!({"command": "true", "dir_path": other})),
    );
    assert_eq!(out.trim(), "", "{out}");
}

/// The wrapped line, run by a shell as the client runs it, commits the
/// command's writes through the folder's server as the session's agent, and
/// a run that would overwrite another agent's unseen work exits 75 with the
/// refusal and applies nothing.
#[test]
fn the_wrapped_line_runs_through_the_server_and_its_refusal_reaches_the_model() {
    let (_d, root) = workspace();
    let (_s, state) = workspace();
    let (_h, history) = workspace();
    let rt = runtime();
    let server = rt.block_on(async {
        Server::start(
            Options::new(&root)
                .config(
                    writ::Config::default()
                        .durability(writ::Durability::Process)
                        .history_dir(&history),
                )
                .discovery_file(root.join(".writ/serve.json")),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"))
    });
    fs::write(root.join("x.txt"), "a1\na2\na3\n").unwrap_or_else(|e| panic!("{e}"));
    let shell = |line: &str| {
        let out = hook("claude-code", &state, &bash(&root, None, line));
        let wrapped = updated_input(&out)["command"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Command::new("/bin/sh")
            .args(["-c", &wrapped])
            .current_dir(&root)
            .output()
            .unwrap_or_else(|e| panic!("sh: {e}"))
    };
    let out = shell("sed -i 's/a1/b1/' x.txt && echo edited");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "edited\n");
    assert_eq!(
        fs::read_to_string(root.join("x.txt")).unwrap_or_default(),
        "b1\na2\na3\n"
    );
    // Another agent changes the file through writ; this session never read it.
    let other = server
        .scheduler()
        .actor("other", writ::Grant::workspace(&root))
        .unwrap_or_else(|e| panic!("{e}"));
    other
        .files()
        .read("x.txt")
        .unwrap_or_else(|e| panic!("{e}"));
    other
        .files()
        .write("x.txt", "b1\na2\nTHEIRS\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = shell("printf 'mine\\n' > x.txt");
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused, nothing was applied"), "{err}");
    assert!(err.contains("other"), "the refusal names who: {err}");
    assert_eq!(
        fs::read_to_string(root.join("x.txt")).unwrap_or_default(),
        "b1\na2\nTHEIRS\n",
        "the other agent's work stays"
    );
    rt.block_on(server.shutdown());
}
