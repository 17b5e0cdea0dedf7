//! The tools: their schemas and descriptions (written for a model), and what
//! each call does with the session's actor.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::args::{Args, Bad};
use super::table::{AnyResult, ErasedOp, SessionTable};
use super::{Held, Reserved, ToolServer, tool_error, tool_ok};
use crate::files::tail_first_line;
use crate::{Actor, Error, Files, HoldKind, ProtocolError, Receipt, Reservation, Target, View};

/// The tools of [`ToolServer`](super::ToolServer), in the order `tools/list`
/// gives them.
pub const TOOL_NAMES: [&str; 11] = [
    "read_file",
    "write_file",
    "edit_file",
    "append_file",
    "delete_file",
    "move_file",
    "list_dir",
    "reserve",
    "release",
    "writ_status",
    "run_command",
];

const PATH: &str =
    "A file path relative to the workspace root (an absolute path inside the root also works).";

pub(super) const ANCHORED: &str = "If the file changed since you read it but your change cannot overwrite \
anything you have not seen (the text you replace is unchanged, or you append), it is applied on \
top of the other changes, and the result says so and shows what changed since your read.";

const REFUSALS: &str = "If the tool refuses, nothing was changed; its message says why and what to do: \
'being written by <agent>' means another agent is working on the file — retry in a moment or work on \
another file; 'you had not read it' or 'changed since you read it' comes with the file's current \
content, numbered as read_file shows it (for append_file, its last lines): that counts as reading \
it, so check it (another agent may have changed it) and redo your change on top of it right away, \
without calling read_file (only when the message carries no content, call read_file first); a \
protected or outside-the-workspace path cannot be used at all.";

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let mut object = JsonObject::new();
    object.insert("type".into(), json!("object"));
    object.insert("properties".into(), properties);
    object.insert("required".into(), json!(required));
    object.insert("additionalProperties".into(), json!(false));
    Arc::new(object)
}

fn tool(
    name: &'static str,
    description: String,
    input: Arc<JsonObject>,
    read_only: bool,
    destructive: bool,
) -> Tool {
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = Some(read_only);
    annotations.destructive_hint = Some(destructive);
    annotations.open_world_hint = Some(false);
    let mut tool = Tool::new(name, description, input).annotate(annotations);
    tool.output_schema = Some(output_schema(name));
    tool
}

/// The output schema of one of writ's tools (SPEC §14 results): its text,
/// agent and refusal (`mcp/result`), and its own typed fields.
pub(super) fn output_schema(name: &str) -> Arc<JsonObject> {
    let path =
        json!({"type": "string", "description": "The file, relative to the workspace root."});
    let typed = match name {
        "read_file" => json!({
            "path": path,
            "total_lines": {"type": "integer", "description": "How many lines the whole file has."}
        }),
        "write_file" | "edit_file" | "append_file" | "delete_file" | "move_file" => json!({
            "path": path,
            "op": {"type": "string", "description": "What was done: write, replace, append, delete or rename."},
            "bytes": {"type": "integer", "description": "The file's size after the change."},
            "anchored": {"type": "boolean", "description": "Applied on top of changes made since your read."},
            "repeat": {"type": "boolean", "description": "The same call as one already applied since your read: answered again, nothing written."},
            "from": {"type": "string", "description": "Where a moved file came from."}
        }),
        "list_dir" => json!({
            "path": {"type": "string", "description": "The folder listed."},
            "entries": {"type": "integer", "description": "How many entries it has."}
        }),
        "reserve" => json!({"reserved": {"type": "array", "items": {"type": "string"}}}),
        "release" => json!({"released": {"type": "array", "items": {"type": "string"}}}),
        "writ_status" => json!({"actor": {"type": "string", "description": "Your actor's name."}}),
        _ => json!({}),
    };
    super::result::writ_schema(typed)
}

/// The tool definitions `tools/list` returns.
pub(super) fn definitions() -> Vec<Tool> {
    vec![
        tool(
            "read_file",
            "Reads a text file and returns its lines numbered from 1, as `     N\\tline`. \
             Reading a file (even part of it) is what allows you to change it afterwards with \
             write_file, edit_file, append_file, delete_file or move_file; read it again after \
             each change, and whenever a tool says it changed since you read it. Long files \
             come in pieces: pass `offset` (the first line number to show) and `limit` (how \
             many lines); the result ends with a note telling you how to read on. Binary files \
             and protected files (secrets such as .env or keys) are refused."
                .to_string(),
            schema(
                json!({
                    "path": {"type": "string", "description": PATH},
                    "offset": {"type": "integer", "minimum": 1, "description": "The first line to show, counting from 1 (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show (default 2000)."}
                }),
                &["path"],
            ),
            true,
            false,
        ),
        tool(
            "write_file",
            format!(
                "Writes a file's whole content, creating the file (and missing folders) when it \
                 does not exist. Overwriting an existing file requires that you read it first \
                 with read_file and that nobody changed it since. {REFUSALS}"
            ),
            schema(
                json!({
                    "path": {"type": "string", "description": PATH},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                }),
                &["path", "content"],
            ),
            false,
            true,
        ),
        tool(
            "edit_file",
            format!(
                "Replaces `old_string` with `new_string` in a file. `old_string` must match the \
                 file exactly (including indentation) and occur exactly once, unless \
                 `replace_all` is true; include enough surrounding lines to make it unique. You \
                 must have read the file with read_file. {ANCHORED} {REFUSALS}"
            ),
            schema(
                json!({
                    "path": {"type": "string", "description": PATH},
                    "old_string": {"type": "string", "description": "The exact text to replace."},
                    "new_string": {"type": "string", "description": "The text to put in its place."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of exactly one (default false)."}
                }),
                &["path", "old_string", "new_string"],
            ),
            false,
            true,
        ),
        tool(
            "append_file",
            format!(
                "Appends text to the end of a file, creating it when it does not exist. For an \
                 existing file, read it first (reading just its last lines with read_file's \
                 `offset` is enough). {ANCHORED} {REFUSALS}"
            ),
            schema(
                json!({
                    "path": {"type": "string", "description": PATH},
                    "content": {"type": "string", "description": "The text to add at the end (include a trailing newline if you want one)."}
                }),
                &["path", "content"],
            ),
            false,
            false,
        ),
        tool(
            "delete_file",
            format!(
                "Deletes a file (not a folder). Read it first with read_file, so you know what \
                 you delete. {REFUSALS}"
            ),
            schema(
                json!({"path": {"type": "string", "description": PATH}}),
                &["path"],
            ),
            false,
            true,
        ),
        tool(
            "move_file",
            format!(
                "Moves or renames a file from `from` to `to` (missing folders are created). Read \
                 `from` first with read_file; if `to` already exists it is replaced, so read it \
                 first too. {REFUSALS}"
            ),
            schema(
                json!({
                    "from": {"type": "string", "description": "The file to move. ".to_string() + PATH},
                    "to": {"type": "string", "description": "Where to put it. ".to_string() + PATH}
                }),
                &["from", "to"],
            ),
            false,
            true,
        ),
        tool(
            "list_dir",
            "Lists a folder of the workspace: one entry per line, folders ending in `/`, files \
             with their size in bytes. Without `path`, lists the workspace root."
                .to_string(),
            schema(
                json!({"path": {"type": "string", "description": "A folder relative to the workspace root (default: the root)."}}),
                &[],
            ),
            true,
            false,
        ),
        tool(
            "reserve",
            "Reserves files or folders (a path ending in `/` is a whole folder) for you alone \
             until you call release: other agents' writes there are refused while you work, \
             though they can still read. Use it before multi-step work that must not be \
             interleaved (a refactor across several files). All or nothing: if another agent is \
             writing or has reserved any of the paths, the tool waits a few seconds and then \
             refuses, naming that agent; reserve fewer paths, work elsewhere, or retry later. \
             Reserving does not replace reading: you still read a file before changing it."
                .to_string(),
            schema(
                json!({
                    "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Files, or folders ending in `/`, relative to the workspace root."},
                    "note": {"type": "string", "description": "What you are doing, shown to other agents (e.g. 'renaming the parser API')."}
                }),
                &["paths"],
            ),
            false,
            false,
        ),
        tool(
            "release",
            "Releases your reservations made with reserve: those covering the given paths, or \
             all of them when `paths` is empty or missing. Release as soon as your multi-step \
             work is done, so other agents can continue."
                .to_string(),
            schema(
                json!({"paths": {"type": "array", "items": {"type": "string"}, "description": "Paths you reserved; empty or missing releases everything."}}),
                &[],
            ),
            false,
            false,
        ),
        tool(
            "writ_status",
            "Shows your reservations, what you are waiting for, and which other agents are \
             writing or have reserved which paths right now. Use it when a tool said a file is \
             busy, to decide what to work on instead."
                .to_string(),
            schema(json!({}), &[]),
            true,
            false,
        ),
        super::run::definition(),
    ]
}

/// One tool call of either set: the server of the session it came on,
/// the actor it acts as, and its arguments (the `agent` handle already
/// taken out: see `mcp/identity/handle`).
pub(super) struct Call<'a> {
    pub(super) server: &'a ToolServer,
    pub(super) actor: &'a Arc<Actor>,
    pub(super) arguments: Option<JsonObject>,
}

impl<'a> Call<'a> {
    /// The server, the actor and the arguments.
    pub(super) fn parts(self) -> (&'a ToolServer, &'a Arc<Actor>, Option<JsonObject>) {
        (self.server, self.actor, self.arguments)
    }
}

/// Runs one tool call; every failure is a tool result with `isError: true`.
/// Returned with its outcome: `ok`, `bad_arguments`, or the refusal's kind.
pub(super) async fn call(name: &str, call: Call<'_>) -> (&'static str, CallToolResult) {
    let outcome = match name {
        "read_file" => read_file(call).await,
        "write_file" => write_file(call).await,
        "edit_file" => edit_file(call).await,
        "append_file" => append_file(call).await,
        "delete_file" => delete_file(call).await,
        "move_file" => move_file(call).await,
        "list_dir" => list_dir(call).await,
        "reserve" => reserve(call).await,
        "release" => release(call).await,
        "writ_status" => writ_status(call).await,
        "run_command" => super::run::run_command(call).await,
        other => Err(no_such_tool(other, &TOOL_NAMES)),
    };
    finished(outcome.map(Reply::into_result))
}

/// A call of a tool the set does not have.
pub(super) fn no_such_tool(name: &str, tools: &[&str]) -> Failure {
    Failure::Bad(format!(
        "There is no tool named '{}'; the tools are {}.",
        name.chars().take(100).collect::<String>(),
        tools.join(", ")
    ))
}

/// A call's result as the model gets it, and its outcome as it is counted:
/// `ok`, `error` (a result the tool itself marked so), `bad_arguments`, or
/// the refusal's kind. The one place a refusal becomes a tool result, for
/// both tool sets.
pub(super) fn finished(outcome: Result<CallToolResult, Failure>) -> (&'static str, CallToolResult) {
    match outcome {
        Ok(result) if result.is_error == Some(true) => ("error", result),
        Ok(result) => ("ok", result),
        Err(Failure::Bad(text)) => (
            "bad_arguments",
            refusal(text, json!({"kind": "bad_arguments"})),
        ),
        Err(Failure::Current(e, text)) => (e.kind(), refusal(text, e.data())),
        Err(Failure::Refused(e)) => (e.kind(), refusal(e.to_string(), e.data())),
    }
}

/// A refusal as a tool result: its sentence, and its kind and data as the
/// typed field `error` (SPEC §14 results).
fn refusal(text: String, data: Value) -> CallToolResult {
    let mut result = tool_error(text);
    result.structured_content = Some(super::result::refusal_fields(data));
    result
}

/// Why a call did nothing.
pub(super) enum Failure {
    /// Bad arguments.
    Bad(Bad),
    /// writ refused (busy, stale, policy, …): the error's own sentence.
    Refused(Error),
    /// A write refused for want of a current read (`Stale` or
    /// `NotRead`), with the file's current content, which the agent has
    /// now read ([`refused_with_current`]).
    Current(Box<Error>, String),
}

impl From<Bad> for Failure {
    fn from(b: Bad) -> Self {
        Failure::Bad(b)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Refused(e)
    }
}

pub(super) type Outcome = Result<Reply, Failure>;

/// What a tool of writ's set answers: the text the model reads, and the
/// typed fields of its structured result (SPEC §14 results; the text and
/// the agent are added by `mcp/result`).
pub(super) struct Reply {
    text: String,
    fields: JsonObject,
}

impl Reply {
    /// The reply with one more typed field.
    fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(name.into(), value.into());
        self
    }

    fn into_result(self) -> CallToolResult {
        let mut result = tool_ok(self.text);
        result.structured_content = Some(Value::Object(self.fields));
        result
    }
}

impl From<String> for Reply {
    fn from(text: String) -> Self {
        Reply {
            text,
            fields: JsonObject::new(),
        }
    }
}

/// A path for messages: relative to the actor's root when inside it.
pub(super) fn shown(actor: &Actor, path: &Path) -> String {
    match path.strip_prefix(actor.root()) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// Runs a file operation off the async threads (`off_async_threads`),
/// inside `call` when it waited for one; `call` goes with it and is
/// released when the operation is done.
async fn blocking<T: Send + 'static>(
    actor: &Arc<Actor>,
    op: impl FnOnce(Files<'_>) -> crate::Result<T> + Send + 'static,
    call: Option<Reservation>,
) -> crate::Result<T> {
    let actor = actor.clone();
    let run = move || {
        let mut call = call;
        match call.as_mut() {
            // The agent tools: a stale refusal claims the file (SPEC §6).
            Some(call) => op(actor.files().within(call).claiming()),
            None => op(actor.files().claiming()),
        }
    };
    match super::off_async_threads(run).await {
        Ok(result) => result,
        Err(e) => Err(Error::io(
            "run the tool",
            Path::new(""),
            std::io::Error::other(e.to_string()),
        )),
    }
}

/// Whether an operation changes its paths or only reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// A read: it waits only for writes in progress.
    Read,
    /// A write: it waits for everything on its paths.
    Write,
}

/// Runs a file operation, waiting up to the call wait for its paths.
///
/// The wait is for a call reservation on the paths (exclusive for a write,
/// shared for a read), in the queue with every other request: fair, part of
/// deadlock detection, cancelled with the tool call. An uncontested path is
/// granted at once. The operation runs inside the reservation, so nobody
/// can slip in between the wait and the operation, and a write waits out
/// reads in progress as well as writes and other agents' reservations.
///
/// The reservation is asked for first, not after a refused try: a contested
/// call is then one wait, reported once (`waiting`, then `admitted` or
/// `timed_out`), never a refusal, a wait and a second refusal. When the
/// wait runs out, the model is told who holds the path then (`Busy`),
/// read without asking again.
///
/// A session with a table of its own (a server on etcd) waits there
/// instead, on exactly the paths the operation resolves, as the same
/// admission: the operation asks its table for its hold.
pub(super) async fn with_wait<T: Send + 'static>(
    server: &ToolServer,
    actor: &Arc<Actor>,
    paths: &[&str],
    access: Access,
    op: impl FnOnce(Files<'_>) -> crate::Result<T> + Send + 'static,
) -> crate::Result<T> {
    // What a result shows of an anchored edit's changes is bounded as a
    // read is (SPEC §14), not by the whole-read limit.
    let bound = server.session.opts.read_bytes;
    let op = move |files: Files<'_>| op(files.diff_bound(bound));
    if let Some(table) = session_table(server)? {
        let erased: ErasedOp =
            Box::new(move |files| op(files).map(|done| Box::new(done) as AnyResult));
        let wait = server.session.opts.call_wait;
        let done = table.file_op(actor.clone(), wait, erased).await?;
        return done
            .downcast::<T>()
            .map(|done| *done)
            .map_err(|_| Error::Protocol {
                kind: ProtocolError::Internal,
                detail: "a file operation answered with another type".into(),
            });
    }
    let targets = paths
        .iter()
        .map(|p| match access {
            Access::Read => Target::file(*p).shared(),
            Access::Write => Target::file(*p),
        })
        .collect();
    let verb = match access {
        Access::Read => "read",
        Access::Write => "write",
    };
    let label = format!("{verb} {}", paths.join(", "));
    let call = actor
        .wait_call(targets, label, server.session.opts.call_wait)
        .await?;
    blocking(actor, op, call).await
}

/// The table the session's holds are taken in (`None`: its actor's own
/// scheduler).
fn session_table(server: &ToolServer) -> crate::Result<Option<Arc<dyn SessionTable>>> {
    server
        .table()
        .map_err(|reason| Error::Unavailable { reason })
}

/// What a model needs to know after a write, and the receipt's typed
/// fields.
fn done(actor: &Actor, receipt: &Receipt) -> Reply {
    let path = shown(actor, &receipt.path);
    let what = match (&receipt.from, receipt.op) {
        (Some(from), _) => format!("Moved {} to {path}.", shown(actor, from)),
        (None, crate::FileOp::Delete) => format!("Deleted {path}."),
        (None, crate::FileOp::Append) => {
            format!("Appended to {path} (now {} bytes).", receipt.size)
        }
        (None, crate::FileOp::Replace) => format!("Edited {path} (now {} bytes).", receipt.size),
        (None, _) if receipt.before.is_none() => {
            format!("Created {path} ({} bytes).", receipt.size)
        }
        (None, _) => format!("Wrote {path} ({} bytes).", receipt.size),
    };
    let mut text = what;
    if receipt.op != crate::FileOp::Delete {
        text.push_str(" Read it again before changing it further.");
    }
    match &receipt.history {
        crate::HistoryStatus::Incomplete { reason } => {
            let _ = write!(text, " (Written, but history is incomplete: {reason}.)");
        }
        crate::HistoryStatus::Unprotected => text.push_str(" (Written without a snapshot.)"),
        _ => {}
    }
    text.push_str(&super::anchored::note(receipt));
    text.push_str(repeat_note(receipt));
    let mut reply = Reply::from(text)
        .with("path", path)
        .with("op", format!("{:?}", receipt.op).to_lowercase())
        .with("bytes", receipt.size)
        .with("anchored", receipt.anchored.is_some())
        .with("repeat", receipt.repeat);
    if let Some(from) = &receipt.from {
        reply = reply.with("from", shown(actor, from));
    }
    reply
}

/// What a result says of a call resent after its answer was lost (SPEC §6).
pub(super) fn repeat_note(receipt: &Receipt) -> &'static str {
    if receipt.repeat {
        "\n\nThis call is the same as one you already made since your last read of the file, \
         which was applied: this is its result again, and nothing was written this time. To \
         make the same change once more on purpose, read the file first."
    } else {
        ""
    }
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0) || std::str::from_utf8(bytes).is_err()
}

async fn read_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("read_file", arguments, &["path", "offset", "limit"])?;
    let path = args.path("path")?;
    let offset = args.opt_count("offset", 1)?.unwrap_or(1);
    let opts = &server.session.opts;
    let limit = args
        .opt_count("limit", 1)?
        .unwrap_or(opts.read_lines as u64);
    let look_opts = opts.clone();
    let (bytes, mark) = read_text(server, actor, &path, move |bytes| {
        numbered_seen(
            "",
            &String::from_utf8_lossy(bytes),
            offset,
            limit,
            &look_opts,
        )
        .1
    })
    .await?;
    let shown_path = shown(actor, &mark.path);
    if is_binary(&bytes) {
        return Err(Failure::Bad(format!(
            "{shown_path} is a binary file ({} bytes); read_file shows text only, and these tools \
             cannot change it.",
            bytes.len()
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    let total = text.lines().count();
    Ok(
        Reply::from(numbered(&shown_path, &text, offset, limit, opts))
            .with("path", shown_path)
            .with("total_lines", total),
    )
}

/// `cat -n`-style lines `offset..offset+limit` (1-based) of `text`, bounded
/// in bytes, with a note on what was left out.
fn numbered(path: &str, text: &str, offset: u64, limit: u64, opts: &super::ToolOptions) -> String {
    numbered_seen(path, text, offset, limit, opts).0
}

/// [`numbered`], and the view of the file it gives (SPEC §6): the lines
/// shown, and how many of them were cut short.
fn numbered_seen(
    path: &str,
    text: &str,
    offset: u64,
    limit: u64,
    opts: &super::ToolOptions,
) -> (String, View) {
    if text.is_empty() {
        return (format!("{path} is empty (0 bytes)."), View::Whole);
    }
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len() as u64;
    if offset > total {
        return (
            format!("{path} has {total} lines; offset {offset} is past the end. Nothing to show."),
            View::lines(offset, offset - 1, total, 0),
        );
    }
    let mut out = String::new();
    let first = offset;
    let mut last = first - 1;
    let mut cut_lines = 0;
    for (i, line) in lines
        .iter()
        .enumerate()
        .skip((offset - 1) as usize)
        .take(limit.min(usize::MAX as u64) as usize)
    {
        let mut shown_line: String = line.chars().take(opts.line_chars).collect();
        let extra = line.chars().count().saturating_sub(opts.line_chars);
        if extra > 0 {
            cut_lines += 1;
            let _ = write!(shown_line, "… [{extra} more characters]");
        }
        let row = format!("{:>6}\t{}\n", i + 1, shown_line.trim_end_matches('\r'));
        if !out.is_empty() && out.len() + row.len() > opts.read_bytes {
            break;
        }
        out.push_str(&row);
        last = i as u64 + 1;
    }
    if cut_lines > 0 {
        let _ = writeln!(
            out,
            "[{cut_lines} line(s) longer than {} characters were cut short.]",
            opts.line_chars
        );
    }
    if last < total {
        let _ = writeln!(
            out,
            "[Showing lines {first}-{last} of {total}. To read on, call read_file with offset={}.]",
            last + 1
        );
    } else if first > 1 {
        let _ = writeln!(out, "[Showing lines {first}-{last} of {total}.]");
    }
    (out, View::lines(first, last, total, cut_lines))
}

async fn write_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let (path, content) = write_args(arguments)?;
    match write_whole(server, actor, &path, content).await {
        Ok(receipt) => Ok(done(actor, &receipt)),
        Err(e) => {
            Err(refused_with_current(server, actor, &path, e, Show::Numbered, "write_file").await)
        }
    }
}

/// `write_file {path, content}`: the same parameters in both tool sets.
pub(super) fn write_args(arguments: Option<JsonObject>) -> Result<(String, String), Failure> {
    let args = Args::new("write_file", arguments, &["path", "content"])?;
    Ok((args.path("path")?, args.string("content")?))
}

/// A file's whole new content, waiting for a contested path.
pub(super) async fn write_whole(
    server: &ToolServer,
    actor: &Arc<Actor>,
    path: &str,
    content: String,
) -> crate::Result<Receipt> {
    let p = path.to_string();
    with_wait(server, actor, &[path], Access::Write, move |files| {
        files.write(&p, content.as_bytes())
    })
    .await
}

/// A whole file and its read mark, waiting for a write in progress.
pub(super) async fn read_whole(
    server: &ToolServer,
    actor: &Arc<Actor>,
    path: &str,
) -> crate::Result<(Vec<u8>, crate::ReadMark)> {
    read_viewed(server, actor, path, |_| View::Whole).await
}

/// A whole file and its read mark, of the view `look` says its reader is
/// shown, waiting for a write in progress.
pub(super) async fn read_viewed(
    server: &ToolServer,
    actor: &Arc<Actor>,
    path: &str,
    look: impl FnOnce(&[u8]) -> View + Send + 'static,
) -> crate::Result<(Vec<u8>, crate::ReadMark)> {
    let p = path.to_string();
    with_wait(server, actor, &[path], Access::Read, move |files| {
        files.read_seen(Path::new(&p), look)
    })
    .await
}

/// A whole file read to be shown as text, its mark of the view `look`
/// says the model is shown (SPEC §6: a write of the whole file needs a
/// whole view). A binary one is shown nothing, so the read leaves no mark:
/// the model cannot overwrite what it never saw. The mark goes inside the
/// operation, before the session's table keeps what it read.
async fn read_text(
    server: &ToolServer,
    actor: &Arc<Actor>,
    path: &str,
    look: impl FnOnce(&[u8]) -> View + Send + 'static,
) -> crate::Result<(Vec<u8>, crate::ReadMark)> {
    let (p, reader) = (path.to_string(), actor.clone());
    with_wait(server, actor, &[path], Access::Read, move |files| {
        let (bytes, mark) = files.read_seen(Path::new(&p), look)?;
        if is_binary(&bytes) {
            reader.forget_mark(&mark.path);
        }
        Ok((bytes, mark))
    })
    .await
}

/// How a refusal for want of a current read shows the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Show {
    /// Numbered, as `read_file` shows it without `offset` or `limit`.
    Numbered,
    /// The last [`TAIL_LINES`] lines, numbered: all an append needs.
    Tail,
    /// As the filesystem tool set's `read_text_file` shows it, cut at the
    /// read bound.
    Plain,
}

/// How many lines of a file a refused append shows: what an append needs.
const TAIL_LINES: u64 = crate::files::TAIL_LINES as u64;

/// Reads `path` for a write that was refused `Stale` or `NotRead` and turns
/// the refusal into one that carries what was read (SPEC §6): the read
/// records the agent's mark, exactly as `read_file` would, so the agent
/// has seen the current version and may redo its change in its next call
/// instead of spending one on a read. The gate is untouched: the write was
/// refused, and the next one is judged against this mark.
///
/// Any other error, and a file that cannot be shown (gone since, binary,
/// above the read limit), is returned as it came: the sentence then tells
/// the agent to read it.
pub(super) async fn refused_with_current(
    server: &ToolServer,
    actor: &Arc<Actor>,
    path: &str,
    error: Error,
    show: Show,
    tool: &str,
) -> Failure {
    if !crate::files::refusal_shows_current(&error) {
        return Failure::Refused(error);
    }
    let lead = match &error {
        Error::Stale { path, writer, ago } => {
            let who = match (writer, ago) {
                (Some(w), Some(ago)) => format!(" ('{w}' wrote it {ago:.1?} ago)"),
                (Some(w), None) => format!(" ('{w}' wrote it)"),
                _ => " (changed outside writ)".to_string(),
            };
            format!("{} changed since you read it{who}", shown(actor, path))
        }
        Error::NotRead { path } => {
            format!("{} exists and you have not read it", shown(actor, path))
        }
        _ => return Failure::Refused(error),
    };
    let opts = server.session.opts.clone();
    let look = move |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        match show {
            Show::Numbered => numbered_seen("", &text, 1, opts.read_lines as u64, &opts).1,
            Show::Tail => {
                let total = text.lines().count() as u64;
                View::Tail {
                    first: tail_first_line(total),
                    total,
                }
            }
            Show::Plain => plain_seen(&text, opts.read_bytes).1,
        }
    };
    let (bytes, mark) = match read_text(server, actor, path, look).await {
        Ok(read) => read,
        Err(_) => return Failure::Refused(error),
    };
    if is_binary(&bytes) {
        return Failure::Refused(error);
    }
    let text = String::from_utf8_lossy(&bytes);
    let opts = &server.session.opts;
    let name = shown(actor, &mark.path);
    let (what, body) = match show {
        Show::Numbered => (
            "Its current content is below, as read_file shows it",
            numbered(&name, &text, 1, opts.read_lines as u64, opts),
        ),
        Show::Tail => {
            let total = text.lines().count() as u64;
            let first = tail_first_line(total);
            (
                "Its last lines are below, as read_file shows them (for an append that is enough)",
                numbered(&name, &text, first, TAIL_LINES, opts),
            )
        }
        Show::Plain => (
            "Its current content is below",
            plain(&text, opts.read_bytes),
        ),
    };
    let reader = match show {
        Show::Plain => "read_text_file",
        Show::Numbered | Show::Tail => "read_file",
    };
    Failure::Current(
        Box::new(error),
        format!(
            "{lead}; nothing was written. {what}; this counts as reading it, so redo your change on \
         this content and call {tool} again now, without calling {reader} first.\n\n{body}"
        ),
    )
}

/// `text` as it is, cut at a line end within `bound` bytes with a note.
fn plain(text: &str, bound: usize) -> String {
    plain_seen(text, bound).0
}

/// [`plain`], and the view of the file it gives.
fn plain_seen(text: &str, bound: usize) -> (String, View) {
    if text.len() <= bound {
        return (text.to_string(), View::Whole);
    }
    let mut end = bound;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text[..end].rfind('\n').map_or(0, |i| i + 1);
    (
        format!(
            "{}[Cut short: {} of {} bytes shown; read_text_file shows the rest.]",
            &text[..cut],
            cut,
            text.len()
        ),
        View::Bytes {
            shown: cut as u64,
            total: text.len() as u64,
        },
    )
}

async fn edit_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new(
        "edit_file",
        arguments,
        &["path", "old_string", "new_string", "replace_all"],
    )?;
    let path = args.path("path")?;
    let old = args.string("old_string")?;
    let new = args.string("new_string")?;
    let all = args.opt_bool("replace_all")?.unwrap_or(false);
    if old.is_empty() {
        return Err(Failure::Bad(
            "edit_file: `old_string` is empty; give the exact text to replace (to write a whole \
             file use write_file, to add at the end use append_file). Nothing was done."
                .to_string(),
        ));
    }
    if old == new {
        return Err(Failure::Bad(
            "edit_file: `old_string` and `new_string` are the same; nothing would change. Nothing was done."
                .to_string(),
        ));
    }
    let p = path.clone();
    let written = with_wait(server, actor, &[&path], Access::Write, move |files| {
        if all {
            files.replace_all(&p, &old, &new)
        } else {
            files.replace(&p, &old, &new)
        }
    })
    .await;
    match written {
        Ok(receipt) => Ok(done(actor, &receipt)),
        Err(e) => {
            Err(refused_with_current(server, actor, &path, e, Show::Numbered, "edit_file").await)
        }
    }
}

async fn append_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("append_file", arguments, &["path", "content"])?;
    let path = args.path("path")?;
    let content = args.string("content")?;
    let p = path.clone();
    let written = with_wait(server, actor, &[&path], Access::Write, move |files| {
        files.append(&p, content.as_bytes())
    })
    .await;
    match written {
        Ok(receipt) => Ok(done(actor, &receipt)),
        Err(e) => {
            Err(refused_with_current(server, actor, &path, e, Show::Tail, "append_file").await)
        }
    }
}

async fn delete_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("delete_file", arguments, &["path"])?;
    let path = args.path("path")?;
    let p = path.clone();
    let receipt = with_wait(server, actor, &[&path], Access::Write, move |files| {
        files.delete(&p)
    })
    .await?;
    Ok(done(actor, &receipt))
}

async fn move_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("move_file", arguments, &["from", "to"])?;
    let from = args.path("from")?;
    let to = args.path("to")?;
    let (f, t) = (from.clone(), to.clone());
    let receipt = with_wait(server, actor, &[&from, &to], Access::Write, move |files| {
        files.rename(&f, &t)
    })
    .await?;
    Ok(done(actor, &receipt))
}

async fn list_dir(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("list_dir", arguments, &["path"])?;
    let path = args.opt_string("path")?.filter(|p| !p.is_empty());
    let path = path.unwrap_or_else(|| ".".to_string());
    let resolved = actor.resolve([Target::file(path.as_str()).shared()])?;
    let dir: PathBuf = match resolved.targets().first() {
        Some(target) => target.path().to_path_buf(),
        None => return Err(Failure::Bad(format!("list_dir: cannot resolve {path}."))),
    };
    let limit = server.session.opts.list_entries;
    let shown_dir = shown(actor, &dir);
    let (a, listed) = (actor.clone(), dir.clone());
    // Through folder handles (a folder swapped for a symlink is refused,
    // never followed out) and without `.writ/`.
    let listing = super::off_async_threads(move || a.files().list_dir(&listed))
        .await
        .map_err(|e| Failure::Bad(format!("list_dir failed: {e}")))?;
    match listing {
        Ok(entries) => {
            let mut lines: Vec<String> = entries.iter().map(entry_line).collect();
            lines.sort_unstable();
            let more = lines.len().saturating_sub(limit);
            lines.truncate(limit);
            let mut out = String::new();
            if lines.is_empty() {
                let _ = writeln!(out, "{shown_dir} is an empty folder.");
            }
            for line in &lines {
                out.push_str(line);
                out.push('\n');
            }
            if more > 0 {
                let _ = writeln!(
                    out,
                    "[{more} more entries not shown; list a subfolder to narrow it down.]"
                );
            }
            Ok(Reply::from(out)
                .with("path", shown_dir)
                .with("entries", entries.len()))
        }
        Err(Error::NotFound { .. }) => Err(Failure::Bad(format!(
            "{shown_dir} does not exist; call list_dir without a path to see the workspace root."
        ))),
        Err(Error::InvalidPath { .. })
            if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_file()) =>
        {
            Err(Failure::Bad(format!(
                "{shown_dir} is a file, not a folder; use read_file to read it."
            )))
        }
        Err(e) => Err(Failure::Refused(e)),
    }
}

/// One line of `list_dir`.
fn entry_line(entry: &crate::FolderEntry) -> String {
    let name = &entry.name;
    match entry.kind {
        crate::EntryKind::Folder => format!("{name}/"),
        crate::EntryKind::Symlink => format!("{name} (symlink)"),
        crate::EntryKind::File => format!("{name}  {} bytes", entry.size),
        crate::EntryKind::Other => format!("{name} (special file)"),
    }
}

async fn reserve(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("reserve", arguments, &["paths", "note"])?;
    let paths = args.paths("paths")?;
    let note = args.opt_string("note")?.filter(|n| !n.trim().is_empty());
    if let Some(note) = &note {
        crate::text::check_name("reserve: `note`", note).map_err(Failure::Bad)?;
    }
    let label = match &note {
        Some(note) => format!("reserve: {}", note.chars().take(200).collect::<String>()),
        None => "reserve".to_string(),
    };
    let targets = actor.resolve(paths.iter().map(String::as_str))?;
    let request = || {
        actor
            .request(paths.iter().map(String::as_str))
            .label(label.clone())
    };
    let wait = server.session.opts.call_wait;
    // Asked for once, waiting: a contested reservation is one wait,
    // reported once, as a contested write is (see `with_wait`).
    let fence = match session_table(server)? {
        Some(table) => Reserved::Table(
            table
                .reserve(targets.targets().to_vec(), label.clone(), wait)
                .await?,
        ),
        None => Reserved::Here(match request().fence_wait_timeout(wait).await {
            Ok(fence) => fence,
            Err(Error::Timeout { .. }) => match request().probe(HoldKind::Fence) {
                Err(busy) => return Err(busy.into()),
                Ok(()) => request().fence()?,
            },
            Err(e) => return Err(e.into()),
        }),
    };
    let names: Vec<String> = targets
        .targets()
        .iter()
        .map(|t| target_name(actor, t))
        .collect();
    server.reservations().lock().push(Held {
        fence,
        targets: targets.targets().to_vec(),
    });
    // Only an agent's reservations outlive the session (or call) that made
    // them; the sentence must say which.
    let until = if server.reservations_are_the_agents() {
        "until you call release"
    } else {
        "until you call release or this MCP session ends"
    };
    let text = format!(
        "Reserved {} for you: other agents' writes there are refused {until}. \
         Read files before changing them, as always.",
        names.join(", ")
    );
    Ok(Reply::from(text).with("reserved", names))
}

fn target_name(actor: &Actor, target: &Target) -> String {
    let mut name = shown(actor, target.path());
    if target.is_tree() && !name.ends_with('/') {
        name.push('/');
    }
    name
}

async fn release(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("release", arguments, &["paths"])?;
    let paths = args.opt_paths("paths")?.unwrap_or_default();
    let reservations = server.reservations().clone();
    if paths.is_empty() {
        let gone = std::mem::take(&mut *reservations.lock());
        let count = gone.len();
        let names: Vec<String> = gone
            .iter()
            .flat_map(|h| h.targets.iter().map(|t| target_name(actor, t)))
            .collect();
        // Each fence is released as it drops.
        drop(gone);
        let text = match count {
            0 => "You had no reservations.".to_string(),
            1 => "Released your reservation.".to_string(),
            n => format!("Released your {n} reservations."),
        };
        return Ok(Reply::from(text).with("released", names));
    }
    let wanted = actor.resolve(paths.iter().map(String::as_str))?;
    let wanted: Vec<&Path> = wanted.targets().iter().map(Target::path).collect();
    // Taken out while the fences narrow (a table's narrowing is a round
    // trip), then put back ahead of any made meanwhile.
    let taken = {
        let mut held = reservations.lock();
        let unknown: Vec<&Path> = wanted
            .iter()
            .copied()
            .filter(|w| {
                !held
                    .iter()
                    .any(|h| h.targets.iter().any(|t| t.path() == *w))
            })
            .collect();
        if !unknown.is_empty() {
            let names: Vec<String> = unknown.iter().map(|p| shown(actor, p)).collect();
            let mine: Vec<String> = held
                .iter()
                .flat_map(|h| h.targets.iter().map(|t| target_name(actor, t)))
                .collect();
            return Err(Failure::Bad(format!(
                "You have no reservation on {}; your reservations: {}. Nothing was released.",
                names.join(", "),
                if mine.is_empty() {
                    "none".to_string()
                } else {
                    mine.join(", ")
                }
            )));
        }
        std::mem::take(&mut *held)
    };
    let mut released = Vec::new();
    let mut kept = Vec::with_capacity(taken.len());
    for mut h in taken {
        let (gone, rest): (Vec<Target>, Vec<Target>) = h
            .targets
            .iter()
            .cloned()
            .partition(|t| wanted.contains(&t.path()));
        released.extend(gone.iter().map(|t| target_name(actor, t)));
        if gone.is_empty() {
            kept.push(h);
        } else if !rest.is_empty() && h.fence.narrow(rest.clone()).await.is_ok() {
            h.targets = rest;
            kept.push(h);
        }
        // Otherwise the whole fence drops here.
    }
    let mut held = reservations.lock();
    let made_meanwhile = std::mem::replace(&mut *held, kept);
    held.extend(made_meanwhile);
    Ok(Reply::from(format!("Released {}.", released.join(", "))).with("released", released))
}

async fn writ_status(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    Args::new("writ_status", arguments, &[])?;
    let (dump, me) = match session_table(server)? {
        Some(table) => table.dump().await?,
        None => (actor.scheduler().dump(), actor.id()),
    };
    let paths = |entries: &[crate::PathEntry]| -> String {
        entries
            .iter()
            .map(|p| {
                let mut name = shown(actor, &p.path);
                if p.tree && !name.ends_with('/') {
                    name.push('/');
                }
                if p.mode == crate::Mode::Shared {
                    name.push_str(" (reading)");
                }
                name
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let kind = |k: HoldKind| match k {
        HoldKind::Fence => "reserved",
        HoldKind::Call => "writing now",
        HoldKind::Claim => "claimed",
    };
    let mut out = format!(
        "You are '{}' in {}.\n",
        actor.name(),
        actor.root().display()
    );
    if server.session.opts.private {
        let _ = writeln!(out, "{}", super::PRIVATE);
    }
    let mine: Vec<_> = dump.holds.iter().filter(|h| h.actor_id == me).collect();
    let _ = writeln!(
        out,
        "Your holds:{}",
        if mine.is_empty() { " none" } else { "" }
    );
    for h in &mine {
        let label = h
            .label
            .as_deref()
            .map(|l| format!(" — {l}"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {} {}{label}", kind(h.kind), paths(&h.paths));
    }
    let waits: Vec<_> = dump.waiters.iter().filter(|w| w.actor_id == me).collect();
    if !waits.is_empty() {
        let _ = writeln!(out, "You are waiting for:");
        for w in waits {
            let cause = match &w.cause {
                Some(crate::WaitCause::Path { holder, .. }) => format!(" (held by '{holder}')"),
                _ => String::new(),
            };
            let _ = writeln!(out, "  {}{cause}", paths(&w.paths));
        }
    }
    let others: Vec<_> = dump.holds.iter().filter(|h| h.actor_id != me).collect();
    let _ = writeln!(
        out,
        "Other agents:{}",
        if others.is_empty() {
            " nobody holds anything"
        } else {
            ""
        }
    );
    for h in others {
        let label = h
            .label
            .as_deref()
            .map(|l| format!(" — {l}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  '{}' {} {}{label}",
            h.actor,
            kind(h.kind),
            paths(&h.paths)
        );
    }
    let queued: Vec<_> = dump.waiters.iter().filter(|w| w.actor_id != me).collect();
    for w in queued {
        let _ = writeln!(out, "  '{}' waits for {}", w.actor, paths(&w.paths));
    }
    Ok(Reply::from(out).with("actor", actor.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_lines_are_one_based_and_bounded() {
        let opts = super::super::ToolOptions::default();
        let text = "a\nb\nc\nd\n";
        let all = numbered("f", text, 1, 2000, &opts);
        assert!(all.starts_with("     1\ta\n     2\tb\n"), "{all}");
        assert!(!all.contains("Showing"), "{all}");
        let part = numbered("f", text, 2, 2, &opts);
        assert!(part.starts_with("     2\tb\n     3\tc\n"), "{part}");
        assert!(part.contains("offset=4"), "{part}");
        assert!(numbered("f", text, 9, 1, &opts).contains("past the end"));
        assert!(numbered("f", "", 1, 1, &opts).contains("empty"));
    }

    #[test]
    fn long_lines_and_big_outputs_are_cut_with_a_note() {
        let opts = super::super::ToolOptions {
            line_chars: 4,
            read_bytes: 30,
            ..Default::default()
        };
        let out = numbered("f", "abcdefgh\nx\ny\nz\nw\n", 1, 100, &opts);
        assert!(out.contains("abcd… [4 more characters]"), "{out}");
        assert!(out.contains("cut short"), "{out}");
        assert!(out.contains("To read on"), "{out}");
    }

    #[test]
    fn every_tool_has_a_schema_and_a_description() {
        let defs = definitions();
        let names: Vec<&str> = defs.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, TOOL_NAMES);
        for t in defs {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
            assert!(
                t.description.as_deref().is_some_and(|d| d.len() > 80),
                "{}",
                t.name
            );
        }
    }
}
