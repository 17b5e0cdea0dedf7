//! Scripts for the coding CLIs other than Claude Code, in the scripted
//! model's provider-neutral steps: an agent adds its own line to a shared
//! file with its CLI's own tools — reads it, thinks, writes what it read
//! plus its line — and after a refusal reads again and redoes its change.
//! Each CLI's tools are a [`Dialect`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::edit_script::{Outcome, Rendezvous, Report, numbered_lines};
use super::scripted_model::{Script, Seen, Step, ToolCall, ToolResult, think};

/// A CLI's own tools, as one agent uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Gemini CLI: `read_file {file_path}`, then `write_file {file_path,
    /// content}` with the whole content.
    GeminiWrite,
    /// Gemini CLI: `read_file`, then `replace {file_path, old_string,
    /// new_string, instruction}` on the last line.
    GeminiReplace,
    /// Codex CLI: `exec_command {cmd: "cat PATH"}`, then `apply_patch`
    /// with `*** Add File` over the file (the whole content); after a
    /// refusal, an `*** Update File` hunk, as the refusal says.
    CodexAddFile,
    /// Codex CLI: `exec_command`, then `apply_patch` with `*** Update
    /// File` adding a line after the last line.
    CodexUpdate,
    /// opencode: `read {filePath}`, then `write {filePath, content}` with
    /// the whole content.
    OpencodeWrite,
    /// opencode: `read`, then `edit {filePath, oldString, newString}` on
    /// the last line.
    OpencodeEdit,
    /// writ's MCP tools through Gemini CLI: `read_file {path}`, then
    /// `write_file {path, content}` with the whole content; after a refusal
    /// that carries the file's content, the write again on that content,
    /// as the refusal says (no read).
    GeminiMcp,
    /// writ's MCP tools through opencode, as [`Dialect::GeminiMcp`].
    OpencodeMcp,
    /// writ's MCP tools through Codex CLI, as [`Dialect::GeminiMcp`], offered
    /// directly (a model Codex has no catalog entry for); Codex shows the
    /// model a result's `structuredContent` as JSON, whose `text` is writ's
    /// answer.
    CodexMcp,
    /// [`Dialect::CodexMcp`] with a model Codex knows, which finds writ's
    /// tools through Codex's `tool_search` first.
    CodexMcpSearch,
}

impl Dialect {
    /// Whether the agent edits with writ's MCP tools.
    pub fn mcp(self) -> bool {
        matches!(
            self,
            Dialect::GeminiMcp | Dialect::OpencodeMcp | Dialect::CodexMcp | Dialect::CodexMcpSearch
        )
    }

    /// The text a model reads in a result of writ's tools: the text as it
    /// came, or for Codex (`Wall time: …\nOutput:\n{structuredContent}`)
    /// the `text` of the JSON it shows.
    pub fn shown_text(self, result: &ToolResult) -> Option<String> {
        match self {
            Dialect::CodexMcp | Dialect::CodexMcpSearch => {
                let (_, output) = result.text.split_once("Output:\n")?;
                let value: serde_json::Value = serde_json::from_str(output.trim()).ok()?;
                value["text"].as_str().map(str::to_string)
            }
            _ => Some(result.text.clone()),
        }
    }

    fn read(self, path: &str) -> ToolCall {
        match self {
            Dialect::GeminiMcp
            | Dialect::OpencodeMcp
            | Dialect::CodexMcp
            | Dialect::CodexMcpSearch => ToolCall {
                name: "read_file".into(),
                input: json!({"path": path}),
            },
            Dialect::GeminiWrite | Dialect::GeminiReplace => ToolCall {
                name: "read_file".into(),
                input: json!({"file_path": path}),
            },
            Dialect::OpencodeWrite | Dialect::OpencodeEdit => ToolCall {
                name: "read".into(),
                input: json!({"filePath": path}),
            },
            Dialect::CodexAddFile | Dialect::CodexUpdate => ToolCall {
                name: "exec_command".into(),
                input: json!({"cmd": format!("cat {path}")}),
            },
        }
    }

    /// The file's lines in a read's result, or None when it shows none.
    fn content(self, result: &ToolResult) -> Option<Vec<String>> {
        if result.is_error || result.text.is_empty() {
            return None;
        }
        match self {
            // writ's read_file numbers the lines (`     N\tline`).
            Dialect::GeminiMcp
            | Dialect::OpencodeMcp
            | Dialect::CodexMcp
            | Dialect::CodexMcpSearch => numbered_lines(&self.shown_text(result)?),
            // Gemini CLI's read_file gives the model the file as it is.
            Dialect::GeminiWrite | Dialect::GeminiReplace => {
                Some(result.text.lines().map(str::to_string).collect())
            }
            // opencode numbers the lines (`N: line`) between `<content>`
            // and its end-of-file note.
            Dialect::OpencodeWrite | Dialect::OpencodeEdit => {
                let (_, body) = result.text.split_once("<content>\n")?;
                let body = body.split("\n\n(End of file").next()?;
                body.lines()
                    .map(|l| l.split_once(": ").map(|(_, text)| text.to_string()))
                    .collect()
            }
            // Codex's shell result: a header, then `Output:` and the output.
            Dialect::CodexAddFile | Dialect::CodexUpdate => {
                let (head, output) = result.text.split_once("Output:\n")?;
                head.contains("exited with code 0")
                    .then(|| output.lines().map(str::to_string).collect())
            }
        }
    }

    fn write(self, path: &str, lines: &[String], line: &str, refused: bool) -> ToolCall {
        let mut kept = lines.to_vec();
        while kept.last().is_some_and(|l| l.is_empty()) {
            kept.pop();
        }
        let last = kept.last().cloned().unwrap_or_default();
        let whole = format!("{}\n{line}\n", kept.join("\n"));
        match self {
            Dialect::GeminiMcp
            | Dialect::OpencodeMcp
            | Dialect::CodexMcp
            | Dialect::CodexMcpSearch => ToolCall {
                name: "write_file".into(),
                input: json!({"path": path, "content": whole}),
            },
            Dialect::GeminiWrite => ToolCall {
                name: "write_file".into(),
                input: json!({"file_path": path, "content": whole}),
            },
            Dialect::GeminiReplace => ToolCall {
                name: "replace".into(),
                input: json!({"file_path": path, "old_string": last,
                              "new_string": format!("{last}\n{line}"),
                              "instruction": "add my line after the last line"}),
            },
            Dialect::OpencodeWrite => ToolCall {
                name: "write".into(),
                input: json!({"filePath": path, "content": whole}),
            },
            Dialect::OpencodeEdit => ToolCall {
                name: "edit".into(),
                input: json!({"filePath": path, "oldString": last,
                              "newString": format!("{last}\n{line}")}),
            },
            Dialect::CodexAddFile if !refused => {
                let plus: String = whole.lines().map(|l| format!("+{l}\n")).collect();
                apply_patch(format!("*** Add File: {path}\n{plus}"))
            }
            Dialect::CodexAddFile | Dialect::CodexUpdate => {
                apply_patch(format!("*** Update File: {path}\n@@\n {last}\n+{line}\n"))
            }
        }
    }
}

fn apply_patch(body: String) -> ToolCall {
    ToolCall {
        name: "apply_patch".into(),
        input: json!({"input": format!("*** Begin Patch\n{body}*** End Patch\n")}),
    }
}

/// Whether a write's result says it was done: an error, or a text that
/// says it was refused, is not.
pub fn write_succeeded(result: &ToolResult) -> bool {
    let text = result.text.to_lowercase();
    !result.is_error
        && ![
            "denied",
            "blocked",
            "refused",
            "nothing was written",
            "failed",
        ]
        .iter()
        .any(|w| text.contains(w))
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Reading,
    Writing,
    Done,
}

/// One agent adding its line to a shared file with its CLI's own tools.
pub struct Adder {
    dialect: Dialect,
    path: String,
    line: String,
    think: Duration,
    before_write: Option<Arc<Rendezvous>>,
    max_writes: usize,
    phase: Phase,
    reads: usize,
    writes: usize,
    refused: bool,
    content: Vec<String>,
    report: Report,
    /// writ's tools as the CLI names them to the model (`read_file`,
    /// `write_file`), found in the first request that offers tools.
    mcp_names: Option<(String, String)>,
    /// The handle writ told the model to pass as `agent`, once told.
    handle: Option<String>,
    /// Whether it searched for writ's tools (Codex's `tool_search`).
    searched: bool,
}

impl Adder {
    /// An agent adding `line` to the file at `path` (as its tools take it).
    pub fn new(dialect: Dialect, path: &str, line: &str) -> Adder {
        Adder {
            dialect,
            path: path.to_string(),
            line: line.to_string(),
            think: Duration::ZERO,
            before_write: None,
            max_writes: 8,
            phase: Phase::Reading,
            reads: 0,
            writes: 0,
            refused: false,
            content: Vec::new(),
            report: Report::default(),
            mcp_names: None,
            handle: None,
            searched: false,
        }
    }

    /// Thinks this long between its first read and its first write.
    pub fn thinking(mut self, pause: Duration) -> Adder {
        self.think = pause;
        self
    }

    /// Meets the other agents at `rendezvous` before its first write, so
    /// that every one writes on what it read before anyone wrote.
    pub fn meeting(mut self, rendezvous: Arc<Rendezvous>) -> Adder {
        self.before_write = Some(rendezvous);
        self
    }

    /// Where it reports how its work ended.
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    fn read(&mut self) -> Step {
        self.reads += 1;
        self.phase = Phase::Reading;
        let mut call = self.dialect.read(&self.path);
        if let Some((read, _)) = &self.mcp_names {
            call.name = read.clone();
        }
        if let Some(handle) = &self.handle {
            call.input["agent"] = json!(handle);
        }
        Step::Call(vec![call])
    }

    fn write(&mut self) -> Step {
        self.writes += 1;
        self.phase = Phase::Writing;
        let mut call = self
            .dialect
            .write(&self.path, &self.content, &self.line, self.refused);
        if let Some((_, write)) = &self.mcp_names {
            call.name = write.clone();
        }
        if let Some(handle) = &self.handle {
            call.input["agent"] = json!(handle);
        }
        Step::Call(vec![call])
    }

    /// The file's lines a refusal of writ's tools carries, if any.
    fn refusal_content(&self, result: &ToolResult) -> Option<Vec<String>> {
        numbered_lines(&self.dialect.shown_text(result)?)
    }

    fn end(&mut self, outcome: Outcome, why: String) -> Step {
        self.phase = Phase::Done;
        // Whoever waits on this agent waits no more.
        if let Some(r) = &self.before_write {
            if self.writes == 0 && !r.all_met() {
                r.meet();
            }
        }
        *self.report.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
        Step::End(why)
    }
}

impl Script for Adder {
    fn next(&mut self, seen: &Seen) -> Step {
        if self.dialect.mcp() && self.mcp_names.is_none() {
            // The CLI names them its own way (`writ_read_file`,
            // `writ__read_file`, ...): never its own built-in tool's name.
            let find = |tool: &str| {
                seen.tools
                    .iter()
                    .find(|n| n.as_str() != tool && n.contains("writ") && n.ends_with(tool))
                    .cloned()
            };
            match (find("read_file"), find("write_file")) {
                (Some(read), Some(write)) => self.mcp_names = Some((read, write)),
                // Codex keeps MCP tools behind its tool search for models
                // that have one: load writ's first, as a model does.
                _ if !self.searched && seen.tools.iter().any(|t| t == "tool_search") => {
                    self.searched = true;
                    return Step::Call(vec![ToolCall {
                        name: "tool_search".into(),
                        input: json!({"query": "writ read_file write_file", "limit": 8}),
                    }]);
                }
                _ => {
                    let why = format!("writ's MCP tools are not offered: {:?}", seen.tools);
                    return self.end(Outcome::GaveUp(0), why);
                }
            }
        }
        let result = seen.results.last();
        // As a model does: a result that says which `agent` to pass is
        // followed on every later call.
        let told = result
            .filter(|_| self.dialect.mcp())
            .and_then(|r| self.dialect.shown_text(r));
        if let Some((_, rest)) = told.as_deref().and_then(|t| t.split_once("\"agent\": \"")) {
            if let Some((handle, _)) = rest.split_once('"') {
                self.handle = Some(handle.to_string());
            }
        }
        match self.phase {
            Phase::Reading if self.reads == 0 => self.read(),
            Phase::Reading => match result.and_then(|r| self.dialect.content(r)) {
                Some(lines) => {
                    self.content = lines;
                    if self.writes == 0 {
                        if let Some(r) = &self.before_write {
                            r.meet();
                        }
                        think(self.think);
                    }
                    self.write()
                }
                None if self.reads >= self.max_writes => {
                    let said = result.map(|r| r.text.clone()).unwrap_or_default();
                    self.end(Outcome::GaveUp(self.writes), format!("no content: {said}"))
                }
                None => self.read(),
            },
            Phase::Writing => match result {
                Some(r) if write_succeeded(r) => {
                    self.end(Outcome::Landed, format!("landed: {}", self.line))
                }
                Some(r) if self.writes >= self.max_writes => {
                    let said = r.text.clone();
                    self.end(Outcome::GaveUp(self.writes), said)
                }
                // writ's refusal of a stale write carries the file as it is
                // now and counts as reading it: redo the change on it.
                Some(r) if self.dialect.mcp() && self.refusal_content(r).is_some() => {
                    self.refused = true;
                    self.content = self.refusal_content(r).unwrap_or_default();
                    self.write()
                }
                Some(_) => {
                    self.refused = true;
                    self.read()
                }
                None => self.end(Outcome::GaveUp(self.writes), "no result".into()),
            },
            Phase::Done => Step::End("done".into()),
        }
    }
}
