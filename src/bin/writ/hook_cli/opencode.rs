//! opencode's vocabulary for the hook engine. opencode has no command
//! hooks; writ's plugin (`opencode_plugin.js`, printed by `writ hook
//! opencode --print-plugin`) sends each tool call's `tool.execute.before`
//! and `tool.execute.after` as `{hook_event_name, session_id, call_id,
//! tool, args, output?, cwd}`, and `chat.message` for a user prompt. Tools:
//! `write {filePath, content}` replaces a whole file, `edit {filePath,
//! oldString, newString}` changes text it names, `apply_patch {patchText}`
//! the files its patch names (as Codex's), `read {filePath, offset?,
//! limit?}` shows numbered lines (`N: line`) between `<content>` and an
//! end note. A decision is `{"decision": "deny", "reason": …}`; the plugin
//! throws the reason, which opencode gives the model as the tool's error.
//! `bash {command, workdir?}`'s command is sent through `writ run` as the
//! session's agent (SPEC §17): the answer `{"args": …}` is put over the
//! call's arguments, which opencode then runs.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::engine::{self, Change, Decision, Event, Kind, Seen, Step, Who};

/// The prefix of the names of opencode's hook actors and turns.
const PREFIX: &str = "opencode";

/// The plugin opencode loads from `.opencode/plugin/`, running `writ` from
/// PATH.
pub const PLUGIN: &str = include_str!("opencode_plugin.js");

/// The line of [`PLUGIN`] that says how writ is run.
const WRIT_LINE: &str = "const WRIT = [\"writ\"];";

/// The plugin running writ as `argv` (a JavaScript array of strings, e.g.
/// `["npx", "-y", "writ-sched"]`).
pub fn plugin(argv: &str) -> String {
    PLUGIN.replacen(WRIT_LINE, &format!("const WRIT = {argv};"), 1)
}

/// Reads one event; `Err` says why it is not an event of writ's plugin.
pub fn parse(event: &Value) -> Result<Event, String> {
    let text = |key: &str| event.get(key).and_then(Value::as_str);
    let session = text("session_id").ok_or("the event has no session_id")?;
    let name = text("hook_event_name").ok_or("the event has no hook_event_name")?;
    let cwd = text("cwd").map(PathBuf::from);
    let tool = text("tool").unwrap_or_default();
    let call = text("call_id").unwrap_or_default().to_string();
    let path = event["args"]
        .get("filePath")
        .and_then(Value::as_str)
        .map(|p| engine::absolute(p, cwd.as_deref()));
    let kind = match tool {
        "write" => Some(Kind::Whole),
        "edit" => Some(Kind::Edit),
        _ => None,
    };
    // `apply_patch {patchText}` (offered to some models) changes every
    // file its patch names, all admitted or none, as Codex's does.
    let patch = || {
        event["args"]["patchText"]
            .as_str()
            .ok_or_else(|| "apply_patch carries no patch (args.patchText)".to_string())
            .and_then(|p| engine::patch_changes(p, cwd.as_deref()))
    };
    let patching = matches!(tool, "apply_patch" | "patch");
    let step = match (name, kind, path) {
        ("chat.message", _, _) => Step::Prompt,
        ("tool.execute.before", _, _) if patching => Step::BeforeWrite {
            call,
            changes: patch()?,
        },
        ("tool.execute.after", _, _) if patching => Step::AfterWrite {
            call,
            paths: patch()?.into_iter().map(|c| c.path).collect(),
        },
        ("tool.execute.before", Some(kind), Some(path)) => Step::BeforeWrite {
            call,
            changes: vec![Change { path, kind }],
        },
        ("tool.execute.after", Some(_), Some(path)) => Step::AfterWrite {
            call,
            paths: vec![path],
        },
        ("tool.execute.after", None, Some(path)) if tool == "read" => Step::AfterRead {
            reads: vec![(path, event["output"].as_str().map_or(Seen::Disk, seen))],
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

/// opencode's `bash {command, workdir?, …}`, for `writ run`.
pub const SHELL: engine::ShellCall = engine::ShellCall {
    event: "tool.execute.before",
    tool_key: "tool",
    tool: "bash",
    input_key: "args",
    dir_keys: &["workdir"],
};

/// The agent name the hook's actor goes by in an opencode session.
pub fn agent(event: &Value) -> Option<String> {
    engine::session_agent(PREFIX, event)
}

/// The answer to a `bash` call whose command was wrapped: the plugin puts
/// `args` over the call's arguments (opencode runs the tool with them).
pub fn shell_output(args: Value) -> Value {
    json!({"args": args})
}

/// What `read` showed: its numbered lines, where they start, and the
/// file's length when the read reached its end.
fn seen(output: &str) -> Seen {
    let Some((_, body)) = output.split_once("<content>\n") else {
        return Seen::Disk;
    };
    let mut numbers = Vec::new();
    let mut lines = Vec::new();
    for row in body.lines() {
        let Some((n, text)) = row.split_once(": ") else {
            break;
        };
        let Ok(n) = n.trim().parse::<u64>() else {
            break;
        };
        numbers.push(n);
        lines.push(text);
    }
    let Some(&start) = numbers.first() else {
        return Seen::Disk;
    };
    let count = lines.len() as u64;
    // "(End of file - total N lines)" when the read reached the end.
    let total = body
        .split_once("(End of file - total ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok());
    Seen::Lines {
        content: lines.join("\n"),
        start,
        count,
        total: total.unwrap_or(start + count),
        cut: total.is_none(),
    }
}

/// What the plugin reads from the hook's stdout for `decision`.
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
    fn the_plugin_runs_writ_the_way_it_is_given() {
        assert!(PLUGIN.contains(WRIT_LINE));
        let text = plugin(r#"["npx", "-y", "writ-sched"]"#);
        assert!(text.contains(r#"const WRIT = ["npx", "-y", "writ-sched"];"#));
        assert!(!text.contains(WRIT_LINE));
    }

    #[test]
    fn a_whole_read_marks_its_lines_and_a_write_is_whole() {
        let read = json!({"hook_event_name": "tool.execute.after", "session_id": "ses_1",
            "call_id": "c1", "tool": "read", "cwd": "/repo",
            "args": {"filePath": "/repo/a.txt"},
            "output": "<path>/repo/a.txt</path>\n<type>file</type>\n<content>\n1: one\n2: two\n\n(End of file - total 2 lines)\n</content>"});
        let event = parse(&read).unwrap_or_else(|e| panic!("{e}"));
        let Step::AfterRead { mut reads } = event.step else {
            panic!("not a read: {:?}", event.step)
        };
        match reads.pop().map(|(_, seen)| seen) {
            Some(Seen::Lines {
                content,
                start: 1,
                total: 2,
                cut: false,
                ..
            }) => assert_eq!(content, "one\ntwo"),
            other => panic!("{other:?}"),
        }
        let write = json!({"hook_event_name": "tool.execute.before", "session_id": "ses_1",
            "call_id": "c2", "tool": "write", "cwd": "/repo",
            "args": {"filePath": "a.txt", "content": "x"}});
        let event = parse(&write).unwrap_or_else(|e| panic!("{e}"));
        match event.step {
            Step::BeforeWrite { changes, .. } => {
                assert_eq!(changes[0].path, PathBuf::from("/repo/a.txt"));
                assert!(matches!(changes[0].kind, Kind::Whole));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bash_before_it_runs_is_its_arguments_and_its_folder() {
        let event = json!({"hook_event_name": "tool.execute.before", "session_id": "ses_1",
            "call_id": "c", "tool": "bash", "cwd": "/repo",
            "args": {"command": "make", "description": "build"}});
        let (args, dir) = SHELL
            .of(&event)
            .unwrap_or_else(|| panic!("not a shell call"));
        assert_eq!(args["command"], "make");
        assert_eq!(dir, Some(PathBuf::from("/repo")));
        assert_eq!(shell_output(args.clone()), json!({"args": args}));
        let mut write = event;
        write["tool"] = json!("write");
        assert!(SHELL.of(&write).is_none());
    }

    #[test]
    fn a_read_cut_short_is_part_of_the_file() {
        let out = "<content>\n5: five\n6: six\n\n(Showing lines 5-6 of 9. Use offset=7 to continue.)\n</content>";
        assert!(matches!(
            seen(out),
            Seen::Lines {
                start: 5,
                cut: true,
                ..
            }
        ));
    }

    #[test]
    fn apply_patch_is_each_file_its_patch_names() {
        let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n*** Add File: b.txt\n+b\n*** End Patch";
        let before = json!({"hook_event_name": "tool.execute.before", "session_id": "ses_1",
            "call_id": "c2", "tool": "apply_patch", "cwd": "/repo",
            "args": {"patchText": patch}});
        let event = parse(&before).unwrap_or_else(|e| panic!("{e}"));
        let Step::BeforeWrite { changes, .. } = event.step else {
            panic!("not a write: {:?}", event.step)
        };
        let paths: Vec<String> = changes
            .iter()
            .map(|c| c.path.display().to_string())
            .collect();
        assert_eq!(paths, ["/repo/a.txt", "/repo/b.txt"]);
        let mut after = before.clone();
        after["hook_event_name"] = json!("tool.execute.after");
        let event = parse(&after).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(&event.step, Step::AfterWrite { paths, .. } if paths.len() == 2),
            "{:?}",
            event.step
        );
    }
}
