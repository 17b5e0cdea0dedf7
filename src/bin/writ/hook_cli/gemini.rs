//! Gemini CLI's vocabulary for the hook engine (`hooks.BeforeTool` /
//! `hooks.AfterTool` / `hooks.BeforeAgent` in `.gemini/settings.json`).
//! Tools: `write_file {file_path, content}` replaces a whole file,
//! `replace {file_path, old_string, new_string}` changes text it names,
//! `read_file {file_path, offset?, limit?}` returns `tool_response
//! {llmContent, returnDisplay}`, `llmContent` being what the model reads;
//! `read_many_files` shows several files at once, each after a separator.
//! A decision is `{"decision": "deny", "reason": …}`. Its events name the
//! session only: every subagent of a Gemini session is that session's agent.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::engine::{self, Change, Decision, Event, Kind, Seen, Step, Who};

/// The prefix of the names of Gemini CLI's hook actors and turns.
const PREFIX: &str = "gemini";

/// Reads one event; `Err` says why it is not a Gemini CLI hook event.
pub fn parse(event: &Value) -> Result<Event, String> {
    let text = |key: &str| event.get(key).and_then(Value::as_str);
    let session = text("session_id").ok_or("the event has no session_id")?;
    let name = text("hook_event_name").ok_or("the event has no hook_event_name")?;
    let cwd = text("cwd").map(PathBuf::from);
    let tool = text("tool_name").unwrap_or_default();
    let input = &event["tool_input"];
    let path = ["file_path", "absolute_path"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(|p| engine::absolute(p, cwd.as_deref()));
    let kind = match tool {
        "write_file" => Some(Kind::Whole),
        "replace" => Some(Kind::Edit),
        _ => None,
    };
    // Gemini CLI's events carry no call id; one agent's calls on one file
    // do not overlap, so the path pairs the before with the after.
    let step = match (name, kind, path) {
        ("BeforeAgent", _, _) => Step::Prompt,
        ("BeforeTool", Some(kind), Some(path)) => Step::BeforeWrite {
            call: path.display().to_string(),
            changes: vec![Change { path, kind }],
        },
        ("AfterTool", Some(_), Some(path)) => Step::AfterWrite {
            call: path.display().to_string(),
            paths: vec![path],
        },
        ("AfterTool", None, Some(path)) if tool == "read_file" => {
            let ranged = input.get("offset").is_some() || input.get("limit").is_some();
            let shown = event["tool_response"]["llmContent"].as_str();
            let seen = match shown {
                // A range, or a read Gemini CLI cut short (it then says so
                // above the content): part of the file as it is.
                Some(s) if ranged || s.contains("truncated") => {
                    Seen::DiskPart("part of the file (a range, or a read cut short)".into())
                }
                Some(s) => Seen::Text(s.to_string()),
                None => Seen::Disk,
            };
            Step::AfterRead {
                reads: vec![(path, seen)],
            }
        }
        ("AfterTool", _, _) if tool == "read_many_files" => Step::AfterRead {
            reads: many_files(&event["tool_response"]["llmContent"]),
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

/// What `read_many_files` showed of each file: its answer's parts are
/// `--- /absolute/path ---\n\n<content>\n\n` per text file (a warning
/// line first where the file was cut short), then `--- End of content ---`
/// (one string, or those parts as a list). A file the hook cannot find in
/// it is not marked: the agent has not read it.
fn many_files(shown: &Value) -> Vec<(PathBuf, Seen)> {
    let text = match shown {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(Value::as_str).collect(),
        _ => return Vec::new(),
    };
    let mut reads = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("--- /") {
        let after = &rest[start + 4..];
        let Some((path, body)) = after.split_once(" ---\n\n") else {
            break;
        };
        if path.contains('\n') {
            rest = after;
            continue;
        }
        // The content runs to the next file's separator, or the end's.
        let end = body
            .find("\n\n--- /")
            .or_else(|| body.find("\n\n--- End of content ---"))
            .unwrap_or(body.len());
        let content = &body[..end];
        let seen = if content.starts_with("[WARNING: This file was truncated") {
            Seen::DiskPart("part of the file (read_many_files cut it short)".into())
        } else {
            Seen::Text(content.to_string())
        };
        reads.push((PathBuf::from(path), seen));
        rest = &body[end..];
    }
    reads
}

/// For an `AfterTool` of writ's own MCP tools whose result is an error (a
/// refusal): the text writ answered. Gemini CLI 0.61.0 shows the model such
/// a result as its own sentence around the call and the response as
/// escaped JSON (`MCP tool 'write_file' reported tool error for function
/// call: {…} with response: […]`), in which the model cannot read writ's
/// sentence and the content it carries; the hook hands it back as the
/// result's text.
pub fn mcp_refusal(event: &Value) -> Option<String> {
    if event.get("hook_event_name")?.as_str()? != "AfterTool"
        || event["mcp_context"]["server_name"].as_str()? != "writ"
    {
        return None;
    }
    let response = event.get("tool_response")?;
    if response.get("error").is_none_or(Value::is_null) {
        return None;
    }
    let shown = response.get("llmContent")?.as_str()?;
    // The call's JSON, then the response's: each read as one JSON value,
    // so that text inside either cannot be mistaken for the separator.
    let (_, call) = shown.split_once("for function call: ")?;
    let mut values = serde_json::Deserializer::from_str(call).into_iter::<Value>();
    values.next()?.ok()?;
    let rest = call[values.byte_offset()..].strip_prefix(" with response: ")?;
    let parts: Value = serde_json::from_str(rest).ok()?;
    let result = &parts.get(0)?["functionResponse"]["response"];
    result["structuredContent"]["text"]
        .as_str()
        .or_else(|| result["content"].get(0)?["text"].as_str())
        .map(str::to_string)
}

/// Gemini CLI's `run_shell_command {command, dir_path?}` (`directory` in
/// older versions), for `writ run`.
pub const SHELL: engine::ShellCall = engine::ShellCall {
    event: "BeforeTool",
    tool_key: "tool_name",
    tool: "run_shell_command",
    input_key: "tool_input",
    dir_keys: &["dir_path", "directory"],
};

/// The agent name the hook's actor goes by in a Gemini session.
pub fn agent(event: &Value) -> Option<String> {
    engine::session_agent(PREFIX, event)
}

/// The answer to a `BeforeTool` whose shell command was wrapped: Gemini CLI
/// merges `hookSpecificOutput.tool_input` over the model's arguments.
pub fn shell_output(input: Value) -> Value {
    json!({"hookSpecificOutput": {"tool_input": input}})
}

/// What Gemini CLI reads from the hook's stdout for `decision`.
pub fn output(decision: &Decision) -> Option<Value> {
    match decision {
        Decision::Pass => None,
        Decision::Deny(reason) => Some(json!({"decision": "deny", "reason": reason})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_refusal_is_read_out_of_gemini_clis_escaped_json() {
        let sentence = "shared.txt changed since you read it; nothing was written. with response: \"x\"\n\n     1\tbase line\n";
        let call = json!({"name": "write_file", "args": {"path": "shared.txt", "content": "a with response: [1]"}});
        let parts = json!([{"functionResponse": {"name": "write_file", "response": {
            "content": [{"type": "text", "text": sentence}],
            "structuredContent": {"text": sentence, "agent": "a"}, "isError": true}}}]);
        let shown = format!(
            "MCP tool 'write_file' reported tool error for function call: {call} with response: {parts}"
        );
        let event = json!({"hook_event_name": "AfterTool", "session_id": "s", "tool_name": "mcp_writ_write_file",
            "mcp_context": {"server_name": "writ", "tool_name": "write_file"},
            "tool_response": {"llmContent": shown, "returnDisplay": "Error", "error": {"type": "mcp_tool_error"}}});
        assert_eq!(mcp_refusal(&event).as_deref(), Some(sentence));
        // A result that is not an error, or another server's, is left alone.
        let mut fine = event.clone();
        fine["tool_response"]["error"] = Value::Null;
        assert_eq!(mcp_refusal(&fine), None);
        let mut other = event;
        other["mcp_context"]["server_name"] = json!("github");
        assert_eq!(mcp_refusal(&other), None);
    }

    #[test]
    fn read_many_files_marks_each_file_it_showed() {
        let parts = json!([
            "--- /w/a.txt ---\n\none\ntwo\n\n",
            "--- /w/b.txt ---\n\n[WARNING: This file was truncated. To view the full content, use the 'read_file' tool on this specific file.]\n\nx\n\n",
            "--- End of content ---"
        ]);
        let event = json!({"session_id": "s", "hook_event_name": "AfterTool", "cwd": "/w",
            "tool_name": "read_many_files", "tool_input": {"include": ["*.txt"]},
            "tool_response": {"llmContent": parts, "returnDisplay": ""}});
        let Step::AfterRead { reads } = parse(&event).unwrap_or_else(|e| panic!("{e}")).step else {
            panic!("not a read")
        };
        assert_eq!(reads.len(), 2, "{reads:?}");
        assert_eq!(reads[0].0, PathBuf::from("/w/a.txt"));
        assert!(
            matches!(&reads[0].1, Seen::Text(t) if t == "one\ntwo"),
            "{reads:?}"
        );
        assert!(matches!(reads[1].1, Seen::DiskPart(_)), "{reads:?}");
        // The same answer as one string.
        let joined: String = parts
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(many_files(&Value::String(joined)).len(), 2);
    }
}
