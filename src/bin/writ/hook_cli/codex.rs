//! Codex CLI's vocabulary for the hook engine (`[[hooks.PreToolUse]]` /
//! `[[hooks.PostToolUse]]` in `config.toml`). Its edit tool is
//! `apply_patch`, whose input is `{"command": "<the whole patch>"}` naming
//! no path field: the patch is parsed into its per-file changes, admitted
//! all or none. An `Update File` hunk and a `Delete File` are anchored by
//! the patch itself (Codex applies a hunk only where its context lines
//! are), and Codex reads through its shell, which the hook does not see, so
//! no read mark is asked for them; an `Add File` (or a move's destination)
//! over an existing file would replace it unseen and is denied. It answers
//! a decision as Claude Code's hooks do (`hookSpecificOutput`), and takes
//! a rewritten input (`updatedInput`) with an allow: its shell's commands
//! are sent through `writ run` as the session's agent (SPEC §17).

use std::path::PathBuf;

use serde_json::Value;

use super::engine::{self, Event, Step, Who};

/// The prefix of the names of Codex's hook actors and turns.
const PREFIX: &str = "codex";

/// Reads one event; `Err` says why it is not a Codex hook event.
pub fn parse(event: &Value) -> Result<Event, String> {
    let text = |key: &str| event.get(key).and_then(Value::as_str);
    let session = text("session_id").ok_or("the event has no session_id")?;
    let name = text("hook_event_name").ok_or("the event has no hook_event_name")?;
    let cwd = text("cwd").map(PathBuf::from);
    let tool = text("tool_name").unwrap_or_default();
    let call = text("tool_use_id").unwrap_or("patch").to_string();
    let patch = || {
        event["tool_input"]["command"]
            .as_str()
            .ok_or_else(|| "apply_patch carries no patch (tool_input.command)".to_string())
            .and_then(|p| engine::patch_changes(p, cwd.as_deref()))
    };
    let step = match (name, tool == "apply_patch") {
        ("UserPromptSubmit", _) => Step::Prompt,
        ("PreToolUse", true) => Step::BeforeWrite {
            call,
            changes: patch()?,
        },
        ("PostToolUse", true) => Step::AfterWrite {
            call,
            paths: patch()?.into_iter().map(|c| c.path).collect(),
        },
        _ => Step::Renew,
    };
    Ok(Event {
        prefix: PREFIX,
        who: Who {
            session: session.to_string(),
            agent: None,
        },
        step,
        cwd,
    })
}

/// Codex's shell, `Bash {command, workdir?}` to hooks, for `writ run`.
pub const SHELL: engine::ShellCall = engine::ShellCall {
    event: "PreToolUse",
    tool_key: "tool_name",
    tool: "Bash",
    input_key: "tool_input",
    dir_keys: &["workdir"],
};

/// The agent name the hook's actor goes by in a Codex session.
pub fn agent(event: &Value) -> Option<String> {
    engine::session_agent(PREFIX, event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_shell_is_bash_before_it_runs_in_its_workdir() {
        let event = serde_json::json!({"hook_event_name": "PreToolUse", "session_id": "s",
            "cwd": "/w", "tool_name": "Bash", "tool_input": {"command": "ls", "workdir": "sub"}});
        let (input, dir) = SHELL
            .of(&event)
            .unwrap_or_else(|| panic!("not a shell call"));
        assert_eq!(input["command"], "ls");
        assert_eq!(dir, Some(PathBuf::from("/w/sub")));
        let mut after = event.clone();
        after["hook_event_name"] = "PostToolUse".into();
        assert!(SHELL.of(&after).is_none());
        let mut patch = event;
        patch["tool_name"] = "apply_patch".into();
        assert!(SHELL.of(&patch).is_none());
    }
}
