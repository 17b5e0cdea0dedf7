//! `run_command {command, cwd?, timeout_s?}`: a shell command as a
//! transaction (SPEC §17), in writ's tool set.

use std::time::Duration;

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::tools::{Call, Failure, Outcome};
use crate::run::{Command, RunReport};

/// The longest time limit a model may ask for: one hour.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The tool's definition.
pub(super) fn definition() -> Tool {
    let mut input = rmcp::model::JsonObject::new();
    input.insert("type".into(), json!("object"));
    input.insert(
        "properties".into(),
        json!({
            "command": {"type": "string", "description": "A shell command line, run with /bin/sh -c in the workspace."},
            "cwd": {"type": "string", "description": "The folder to run it in, relative to the workspace root (default: the root)."},
            "timeout_s": {"type": "number", "description": "Seconds before the command and everything it started are stopped (default 600)."}
        }),
    );
    input.insert("required".into(), json!(["command"]));
    input.insert("additionalProperties".into(), json!(false));
    let mut annotations = rmcp::model::ToolAnnotations::new();
    annotations.read_only_hint = Some(false);
    annotations.destructive_hint = Some(true);
    annotations.open_world_hint = Some(true);
    let mut tool = Tool::new(
        "run_command",
        "Runs a shell command (a formatter, sed, a code generator, git, a build, tests) in the \
         workspace. It sees the files as they are, but its changes to them are kept apart while \
         it runs and applied together when it ends, merged with what other agents changed \
         meanwhile. If its changes overlap another agent's changes, or would overwrite another \
         agent's work you have not read, nothing is applied: the result says which files and \
         shows both sides' changes; read those files and run it again. Build outputs and \
         ignored files (target/, node_modules/) and git's own data are written directly. The \
         result has the exit code, the output (its end, if long) and the files changed.",
        std::sync::Arc::new(input),
    )
    .annotate(annotations);
    // Every tool declares its output (SPEC §14 results): the one text.
    tool.output_schema = Some(super::tools::output_schema("run_command"));
    tool
}

/// The call.
pub(super) async fn run_command(call: Call<'_>) -> Outcome {
    let (_, actor, arguments) = call.parts();
    let args = arguments.unwrap_or_default();
    let bad = |m: &str| Failure::Bad(m.to_string());
    let Some(line) = args.get("command").and_then(Value::as_str) else {
        return Err(bad(
            "`command` (a shell command line, a string) is required.",
        ));
    };
    if line.trim().is_empty() {
        return Err(bad("`command` is empty."));
    }
    let mut cmd = Command::shell(line);
    match args.get("cwd") {
        None | Some(Value::Null) => {}
        Some(Value::String(dir)) => cmd = cmd.cwd(dir),
        Some(_) => return Err(bad("`cwd` must be a string (a folder in the workspace).")),
    }
    match args.get("timeout_s") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_f64().and_then(|s| Duration::try_from_secs_f64(s).ok()) {
            Some(t) if !t.is_zero() => cmd = cmd.timeout(t.min(MAX_TIMEOUT)),
            _ => return Err(bad("`timeout_s` must be a positive number of seconds.")),
        },
    }
    let report = actor.run(cmd).await?;
    Ok(text(&report).into())
}

/// The result as the model reads it.
fn text(report: &RunReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let how = match (report.exit_code, report.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "no exit status".into(),
    };
    let _ = writeln!(out, "Command {} ({how}).", report.status);
    if !report.output.is_empty() {
        let _ = writeln!(out, "Output:\n{}", report.output.trim_end());
    }
    if report.committed {
        if report.artifacts.is_empty() {
            let _ = writeln!(out, "It changed no files in the workspace.");
        } else {
            let _ = writeln!(out, "Files changed:");
            for a in &report.artifacts {
                let what = match (&a.change, a.merged) {
                    (crate::delegate::Change::Created, _) => "created",
                    (crate::delegate::Change::Deleted, _) => "deleted",
                    (_, true) => "modified (merged with another agent's changes)",
                    _ => "modified",
                };
                let _ = writeln!(out, "- {} {what}", a.path.display());
            }
        }
    } else {
        let _ = writeln!(
            out,
            "Its file changes were NOT applied (nothing was): they conflict with other changes."
        );
        for c in &report.conflicts {
            let _ = writeln!(out, "- {}: {}", c.path.display(), c.reason);
            if !c.writers.is_empty() {
                let _ = writeln!(out, "  changed by: {}", c.writers.join(", "));
            }
            if !c.run_diff.is_empty() {
                let _ = writeln!(out, "  the command's change:\n{}", c.run_diff.trim_end());
            }
            if !c.live_diff.is_empty() {
                let _ = writeln!(out, "  the other change:\n{}", c.live_diff.trim_end());
            }
        }
        let _ = writeln!(
            out,
            "Read the files named above, then run the command again."
        );
    }
    out
}
