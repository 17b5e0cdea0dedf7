//! Claude Code's vocabulary for the hook engine: its event and tool names,
//! its fields, and the output it reads a decision from (Claude Code
//! 2.1.3xx; docs/AGENTS.md lists the hooks to install).
//!
//! Identity: `session_id`, and `agent_id` on every event of a subagent (the
//! main conversation's events carry none). Tools: `Write` replaces a whole
//! file; `Edit`, `NotebookEdit` (and `MultiEdit`, gone from current
//! versions, still accepted) change part of one; `Read`'s `tool_response`
//! is what the model was shown. `PreToolUse` on `mcp__writ__*` fills the
//! tool's `agent` argument so writ's MCP tools act as the same agent;
//! `PreToolUse` on `Bash` sends its command through `writ run` as the
//! agent (SPEC §17).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::engine::{self, Change, Decision, Event, Kind, Seen, Step, Who};

/// The prefix of the names of Claude Code's hook actors and turns.
const PREFIX: &str = "claude-code";

/// The prefix of the agent names the MCP tools are given.
const MCP_PREFIX: &str = "claude";

/// What the vocabulary made of one event.
pub enum Parsed {
    /// An event for the engine.
    Engine(Event),
    /// A call of writ's own MCP tools: answered at once with its input
    /// rewritten to name the agent.
    Mcp(Value),
    /// A `Bash` call: the event renews the agent's lease, and the command
    /// is sent through `writ run` as `agent`.
    Shell {
        /// The lease renewal.
        event: Event,
        /// The tool input (`command`, `timeout`, `description`, …).
        input: Value,
        /// The agent the command's writes are made as.
        agent: String,
    },
}

/// Reads one event; `Err` says why it is not a Claude Code hook event.
pub fn parse(event: &Value) -> Result<Parsed, String> {
    let text = |key: &str| event.get(key).and_then(Value::as_str);
    let session = text("session_id").ok_or("the event has no session_id")?;
    let name = text("hook_event_name").ok_or("the event has no hook_event_name")?;
    let who = Who {
        session: session.to_string(),
        agent: text("agent_id")
            .filter(|a| !a.is_empty())
            .map(str::to_string),
    };
    let cwd = text("cwd").map(PathBuf::from);
    let tool = text("tool_name").unwrap_or_default();
    let input = event.get("tool_input").cloned().unwrap_or(Value::Null);
    let call = text("tool_use_id").map(str::to_string);
    let path = ["file_path", "notebook_path"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(|p| engine::absolute(p, cwd.as_deref()));
    // Without a tool call id, the path pairs a PreToolUse with its PostToolUse.
    let call_of = |path: &Path| call.clone().unwrap_or_else(|| path.display().to_string());
    let step = match (name, write_kind(tool), path) {
        ("UserPromptSubmit", _, _) => {
            if is_notification(text("prompt").unwrap_or_default()) {
                Step::Renew
            } else {
                Step::Prompt
            }
        }
        ("PreToolUse", _, _) if tool.starts_with("mcp__writ__") => {
            return Ok(Parsed::Mcp(with_agent(input, &who)));
        }
        ("PreToolUse", _, _) if tool == "Bash" => {
            // The hook engine's own actor name: the run's writes are this
            // agent's, and its own earlier edits are not another's work.
            let agent = engine::agent_name(PREFIX, &who);
            return Ok(Parsed::Shell {
                event: Event {
                    prefix: PREFIX,
                    who,
                    step: Step::Renew,
                    cwd,
                },
                input,
                agent,
            });
        }
        ("PreToolUse", Some(kind), Some(path)) => Step::BeforeWrite {
            call: call_of(&path),
            changes: vec![Change { path, kind }],
        },
        ("PostToolUse" | "PostToolUseFailure", Some(_), Some(path)) => Step::AfterWrite {
            call: call_of(&path),
            paths: vec![path],
        },
        ("PostToolUse", None, Some(path)) if tool == "Read" => Step::AfterRead {
            reads: vec![(path, seen(event.get("tool_response")))],
        },
        ("SubagentStop", _, _) if who.agent.is_some() => Step::AgentStop {
            mcp_agent: Some(engine::agent_name(MCP_PREFIX, &who)),
        },
        _ => Step::Renew,
    };
    Ok(Parsed::Engine(Event {
        prefix: PREFIX,
        who,
        step,
        cwd,
    }))
}

/// For a tool that writes files: how it changes one.
fn write_kind(tool: &str) -> Option<Kind> {
    match tool {
        "Write" => Some(Kind::Whole),
        "Edit" | "MultiEdit" | "NotebookEdit" => Some(Kind::Edit),
        _ => None,
    }
}

/// A background subagent's completion notice arrives as a user prompt;
/// it is the CLI talking, not the user, so it starts no turn.
fn is_notification(prompt: &str) -> bool {
    let prompt = prompt.trim_start();
    prompt.starts_with("<task-notification")
        || (prompt.starts_with("<system-reminder>") && prompt.contains("<task-notification"))
}

/// What `Read` showed the model, from its `tool_response`: a text read is
/// `{type: "text", file: {content, startLine, numLines, totalLines,
/// truncatedByTokenCap?}}`; a bare string is taken as the text shown.
fn seen(response: Option<&Value>) -> Seen {
    let Some(response) = response else {
        return Seen::Disk;
    };
    if let Some(text) = response.as_str() {
        return Seen::Text(text.to_string());
    }
    let file = &response["file"];
    let number = |key: &str| file.get(key).and_then(Value::as_u64);
    match (
        response["type"].as_str(),
        file.get("content").and_then(Value::as_str),
    ) {
        (Some("text") | None, Some(content)) => {
            let count = number("numLines").unwrap_or_else(|| content.lines().count() as u64);
            Seen::Lines {
                content: content.to_string(),
                start: number("startLine").unwrap_or(1),
                count,
                total: number("totalLines").unwrap_or(count),
                cut: file["truncatedByTokenCap"].as_bool().unwrap_or(false),
            }
        }
        _ => Seen::Disk,
    }
}

/// The tool input with `agent` naming a subagent's agent, whatever the
/// model put there: the hook knows who calls, the model may not (and a
/// model told to may name another agent). The main conversation names
/// none: its calls act as its own bridge's agent, one per Claude Code
/// process, whose reservations end with the session (a named agent's
/// would outlive it by `--mcp-idle`).
fn with_agent(input: Value, who: &Who) -> Value {
    let mut input = match input {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    match &who.agent {
        Some(_) => {
            input.insert("agent".into(), json!(engine::agent_name(MCP_PREFIX, who)));
        }
        None => {
            input.remove("agent");
        }
    }
    Value::Object(input)
}

/// What Claude Code reads from the hook's stdout for `decision`.
pub fn output(decision: &Decision) -> Option<Value> {
    match decision {
        Decision::Pass => None,
        Decision::Deny(reason) => Some(json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }})),
    }
}

/// The answer to a `PreToolUse` of writ's MCP tools, and of a `Bash` call
/// whose command was wrapped: allowed, with the rewritten input (Claude Code
/// applies `updatedInput` only together with a decision).
pub fn mcp_output(input: Value) -> Value {
    json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "updatedInput": input,
    }})
}
