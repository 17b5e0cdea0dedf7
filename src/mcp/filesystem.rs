//! The tool set of the reference filesystem server
//! (`@modelcontextprotocol/server-filesystem`), served on writ's `Files`.
//!
//! Names, parameters, schemas and output texts are the reference server's,
//! so a client written for it works unchanged; what differs is what writ is
//! for: every write is admitted, passes the read-before-write gate and the
//! path policy, and lands atomically with history. Where the reference
//! server would silently overwrite (a file this agent has not read, or that
//! changed since), the call is refused with the error's sentence.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::{Value, json};

use super::ToolServer;
use super::args::Args;
use super::tools::{
    Access, Call, Failure, Show, finished, no_such_tool, read_viewed, read_whole,
    refused_with_current, repeat_note, with_wait, write_args, write_whole,
};
use crate::files::folders::MAX_DEPTH;
use crate::{Actor, EntryKind, Error, Target, View};

/// The tools of the `filesystem` [`ToolSet`](super::ToolSet), in the order
/// `tools/list` gives them (the reference server's order).
pub const FILESYSTEM_TOOL_NAMES: [&str; 14] = [
    "read_file",
    "read_text_file",
    "read_media_file",
    "read_multiple_files",
    "write_file",
    "edit_file",
    "create_directory",
    "list_directory",
    "list_directory_with_sizes",
    "directory_tree",
    "move_file",
    "search_files",
    "get_file_info",
    "list_allowed_directories",
];

pub(super) const INSTRUCTIONS: &str = "These file tools are shared with other agents working in \
the same folder at the same time; they keep you from overwriting each other's work. Read a file \
(read_text_file) before you change an existing one with write_file, edit_file or move_file, and \
read it again after each change. When a tool refuses, its message says why (another agent is \
writing there, the file changed since you read it, a protected file) and what to do next. A \
refusal because the file changed or was not read shows its current content and counts as \
reading it: redo your change on top of that content at once. Otherwise wait and retry, or work \
on another file. Every tool takes an optional `agent`: when a result gives you a handle \
(structuredContent.agent, or a sentence asking you to pass it), pass it as \"agent\" on all your \
later calls, so that what you read carries over from call to call.";

/// The reference server's tool definitions (its `tools/list`), with the
/// write tools' descriptions telling the read-before-write rule.
const DEFINITIONS: &str = include_str!("filesystem.json");

const GATED: &str = " An existing file must have been read (read_text_file) since it last \
changed: otherwise nothing is written and the tool says why, showing the file's current content \
(as read_text_file does) — that counts as reading it, so redo the change on top of what is there \
now without reading it again.";

/// The tool definitions `tools/list` returns.
pub(super) fn definitions() -> Vec<Tool> {
    let mut tools: Vec<Tool> = serde_json::from_str(DEFINITIONS).unwrap_or_default();
    for tool in &mut tools {
        let extra = match tool.name.as_ref() {
            "write_file" => Some(
                "Create a new file or completely overwrite an existing file with new content. \
                 Handles text content with proper encoding. Only works within allowed directories."
                    .to_string()
                    + GATED,
            ),
            "edit_file" => tool
                .description
                .as_deref()
                .map(|d| format!("{d}{GATED} {}", super::tools::ANCHORED)),
            "move_file" => tool.description.as_deref().map(|d| format!("{d}{GATED}")),
            _ => None,
        };
        if let Some(description) = extra {
            tool.description = Some(description.into());
        }
        if tool.name == "read_media_file" {
            media_or_text(tool);
        }
    }
    tools
}

/// `read_media_file`'s output schema, widened so that every result of it
/// validates (SPEC §14 results): a refusal's `content` is its sentence, and
/// a media answer may list a text after the media (the handle sentence).
fn media_or_text(tool: &mut Tool) {
    let Some(schema) = &tool.output_schema else {
        return;
    };
    let mut schema = (**schema).clone();
    if let Some(content) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("content"))
    {
        if let Some(Value::Array(kinds)) = content.pointer_mut("/items/anyOf") {
            kinds.push(json!({
                "type": "object",
                "properties": {"type": {"type": "string", "const": "text"}, "text": {"type": "string"}},
                "required": ["type", "text"]
            }));
        }
        *content = json!({"anyOf": [{"type": "string"}, content.clone()]});
    }
    tool.output_schema = Some(Arc::new(schema));
}

type Outcome = Result<CallToolResult, Failure>;

/// A text result with the `{content}` structured copy the reference
/// server's output schema promises.
fn text(text: String) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    result.structured_content = Some(json!({ "content": text }));
    result
}

fn bad(text: impl Into<String>) -> Failure {
    Failure::Bad(text.into())
}

/// Runs one tool call; every failure is a tool result with `isError: true`.
pub(super) async fn call(name: &str, call: Call<'_>) -> (&'static str, CallToolResult) {
    let outcome = match name {
        "read_file" | "read_text_file" => read_text_file(name, call).await,
        "read_media_file" => read_media_file(call).await,
        "read_multiple_files" => read_multiple_files(call).await,
        "write_file" => write_file(call).await,
        "edit_file" => edit_file(call).await,
        "create_directory" => create_directory(call).await,
        "list_directory" => list_directory(call, false).await,
        "list_directory_with_sizes" => list_directory(call, true).await,
        "directory_tree" => directory_tree(call).await,
        "move_file" => move_file(call).await,
        "search_files" => search_files(call).await,
        "get_file_info" => get_file_info(call).await,
        "list_allowed_directories" => Args::new(name, call.arguments, &[]).map_err(bad).map(|_| {
            text(format!(
                "Allowed directories:\n{}",
                call.actor.root().display()
            ))
        }),
        other => Err(no_such_tool(other, &FILESYSTEM_TOOL_NAMES)),
    };
    finished(outcome)
}

/// The absolute path `path` names (checked against the grant: inside the
/// root, no escape through a symlink).
fn resolve(actor: &Actor, path: &str) -> Result<PathBuf, Failure> {
    if path.is_empty() {
        return Err(bad(
            "The path is empty; give an absolute path inside the allowed directory.",
        ));
    }
    let resolved = actor.resolve([Target::file(path).shared()])?;
    resolved
        .targets()
        .first()
        .map(|t| t.path().to_path_buf())
        .ok_or_else(|| bad(format!("Cannot resolve {path}.")))
}

/// Runs blocking file-system work off the async threads.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    super::off_async_threads(work)
        .await
        .map_err(|e| bad(format!("the tool failed: {e}")))?
}

/// Reads a whole file through `Files` (a shared call hold, the path policy,
/// and a read mark: what the agent reads it may then change).
async fn read_bytes(
    server: &ToolServer,
    actor: &Arc<Actor>,
    path: &str,
) -> Result<Vec<u8>, Failure> {
    Ok(read_whole(server, actor, path).await?.0)
}

fn normalize_line_endings(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// The last `n` lines, as the reference server's `tailFile` gives them.
fn tail(text: &str, n: usize) -> String {
    let text = normalize_line_endings(text);
    let lines: Vec<&str> = text.split('\n').collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The first `n` lines, as the reference server's `headFile` gives them
/// (a final newline ends the last line rather than starting an empty one).
fn head(text: &str, n: usize) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines.truncate(n);
    lines.join("\n")
}

async fn read_text_file(name: &str, call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new(name, arguments, &["path", "head", "tail"])?;
    let path = args.path("path")?;
    // 0 counts as not given, as in the reference server.
    let head_n = args.opt_count("head", 0)?.filter(|n| *n > 0);
    let tail_n = args.opt_count("tail", 0)?.filter(|n| *n > 0);
    if head_n.is_some() && tail_n.is_some() {
        return Err(bad(
            "Cannot specify both head and tail parameters simultaneously",
        ));
    }
    // `head` or `tail` shows part of the file: its mark says which lines
    // (SPEC §6), so a whole-file write needs a read of all of it.
    let look = move |bytes: &[u8]| {
        let total = String::from_utf8_lossy(bytes).lines().count() as u64;
        match (head_n, tail_n) {
            (_, Some(n)) => View::lines(total.saturating_sub(n) + 1, total, total, 0),
            (Some(n), _) => View::lines(1, n.min(total), total, 0),
            _ => View::Whole,
        }
    };
    let (bytes, _) = read_viewed(server, actor, &path, look).await?;
    let content = String::from_utf8_lossy(&bytes);
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let content = match (head_n, tail_n) {
        (_, Some(n)) => tail(&content, count(n)),
        (Some(n), _) => head(&content, count(n)),
        _ => content.into_owned(),
    };
    Ok(text(content))
}

/// The MIME type the reference server gives an extension.
fn mime_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" => "image/bmp",
        "svg" => "image/svg+xml",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "ogg" => "audio/ogg",
        "flac" => "audio/flac",
        _ => "application/octet-stream",
    }
}

/// A `file://` URL for an absolute path, percent-encoding what a URL path
/// may not carry as it is.
fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for b in path.as_os_str().as_encoded_bytes() {
        let c = *b as char;
        if c.is_ascii_alphanumeric() || "/-._~!$&'()*+,;=:@".contains(c) {
            url.push(c);
        } else {
            let _ = write!(url, "%{b:02X}");
        }
    }
    url
}

async fn read_media_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("read_media_file", arguments, &["path"])?;
    let path = args.path("path")?;
    let resolved = resolve(actor, &path)?;
    let bytes = read_bytes(server, actor, &path).await?;
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let mime = mime_type(&resolved);
    let block = if mime.starts_with("image/") {
        ContentBlock::image(data, mime)
    } else if mime.starts_with("audio/") {
        ContentBlock::audio(data, mime)
    } else {
        ContentBlock::resource(ResourceContents::BlobResourceContents {
            uri: file_url(&resolved),
            mime_type: Some(mime.to_string()),
            blob: data,
            meta: None,
        })
    };
    let structured = serde_json::to_value(&block).unwrap_or(Value::Null);
    let mut result = CallToolResult::success(vec![block]);
    result.structured_content = Some(json!({ "content": [structured] }));
    Ok(result)
}

async fn read_multiple_files(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("read_multiple_files", arguments, &["paths"])?;
    let paths = args.paths("paths")?;
    let mut parts = Vec::with_capacity(paths.len());
    for path in &paths {
        parts.push(match read_bytes(server, actor, path).await {
            Ok(bytes) => format!("{path}:\n{}\n", String::from_utf8_lossy(&bytes)),
            Err(Failure::Bad(e) | Failure::Current(_, e)) => format!("{path}: Error - {e}"),
            // A missing file reads as Node says it, as clients of the
            // reference server see it; writ's refusals keep their sentence.
            Err(Failure::Refused(Error::NotFound { path: missing })) => format!(
                "{path}: Error - ENOENT: no such file or directory, open '{}'",
                missing.display()
            ),
            Err(Failure::Refused(e)) => format!("{path}: Error - {e}"),
        });
    }
    Ok(text(parts.join("\n---\n")))
}

async fn write_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let (path, content) = write_args(arguments)?;
    match write_whole(server, actor, &path, content).await {
        Ok(_) => Ok(text(format!("Successfully wrote to {path}"))),
        Err(e) => {
            Err(refused_with_current(server, actor, &path, e, Show::Plain, "write_file").await)
        }
    }
}

/// One `{oldText, newText}` of `edit_file`.
#[derive(Debug, Clone)]
struct Edit {
    old: String,
    new: String,
}

fn edits_of(args: &Args<'_>) -> Result<Vec<Edit>, Failure> {
    let wrong = || {
        bad(
            "edit_file: `edits` must be an array of {oldText, newText} objects of strings. \
             Nothing was done.",
        )
    };
    let Some(Value::Array(items)) = args.value("edits") else {
        return Err(wrong());
    };
    items
        .iter()
        .map(|item| match (item.get("oldText"), item.get("newText")) {
            (Some(Value::String(old)), Some(Value::String(new))) => Ok(Edit {
                old: old.clone(),
                new: new.clone(),
            }),
            _ => Err(wrong()),
        })
        .collect()
}

/// The leading whitespace of a line.
fn indent(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Applies the edits in order, as the reference server does: an exact
/// match replaces its first occurrence; otherwise a run of lines equal up to
/// surrounding whitespace is replaced, keeping its indentation. The error is
/// the reference server's message for the first edit that matches nothing.
fn apply_edits(content: &str, edits: &[Edit]) -> Result<String, String> {
    let mut modified = content.to_string();
    for edit in edits {
        let old = normalize_line_endings(&edit.old);
        let new = normalize_line_endings(&edit.new);
        if modified.contains(&old) {
            modified = modified.replacen(&old, &new, 1);
            continue;
        }
        let old_lines: Vec<&str> = old.split('\n').collect();
        let mut lines: Vec<String> = modified.split('\n').map(str::to_string).collect();
        let found = (0..(lines.len() + 1).saturating_sub(old_lines.len())).find(|&i| {
            old_lines
                .iter()
                .enumerate()
                .all(|(j, o)| o.trim() == lines[i + j].trim())
        });
        let Some(i) = found else {
            return Err(format!(
                "Could not find exact match for edit:\n{}",
                edit.old
            ));
        };
        let original_indent = indent(&lines[i]).to_string();
        let replacement: Vec<String> = new
            .split('\n')
            .enumerate()
            .map(|(j, line)| {
                if j == 0 {
                    return format!("{original_indent}{}", line.trim_start());
                }
                let old_indent = old_lines.get(j).map_or("", |l| indent(l));
                let new_indent = indent(line);
                if !old_indent.is_empty() && !new_indent.is_empty() {
                    let extra = utf16_len(new_indent).saturating_sub(utf16_len(old_indent));
                    format!(
                        "{original_indent}{}{}",
                        " ".repeat(extra),
                        line.trim_start()
                    )
                } else {
                    line.to_string()
                }
            })
            .collect();
        lines.splice(i..i + old_lines.len(), replacement);
        modified = lines.join("\n");
    }
    Ok(modified)
}

/// One run of a line diff: unchanged, removed or added lines (each with its
/// newline, when it has one).
struct Run<'a> {
    change: Option<bool>,
    lines: Vec<&'a str>,
}

/// Lines with their terminators, as jsdiff's line tokenizer makes them.
fn line_tokens(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// A unified diff in the exact format of jsdiff's `createTwoFilesPatch`
/// (`Index:` line, `original`/`modified` headers, 4 lines of context), which
/// the reference server returns.
fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let (a, b) = (line_tokens(old), line_tokens(new));
    let ops = similar::capture_diff_slices(similar::Algorithm::Myers, &a, &b);
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut removed = Vec::new();
    let mut added = Vec::new();
    fn flush<'a>(runs: &mut Vec<Run<'a>>, removed: &mut Vec<&'a str>, added: &mut Vec<&'a str>) {
        if !removed.is_empty() {
            runs.push(Run {
                change: Some(false),
                lines: std::mem::take(removed),
            });
        }
        if !added.is_empty() {
            runs.push(Run {
                change: Some(true),
                lines: std::mem::take(added),
            });
        }
    }
    for op in &ops {
        let (tag, old_range, new_range) = op.as_tag_tuple();
        match tag {
            similar::DiffTag::Equal => {
                flush(&mut runs, &mut removed, &mut added);
                runs.push(Run {
                    change: None,
                    lines: a[old_range].to_vec(),
                });
            }
            similar::DiffTag::Delete => removed.extend_from_slice(&a[old_range]),
            similar::DiffTag::Insert => added.extend_from_slice(&b[new_range]),
            similar::DiffTag::Replace => {
                removed.extend_from_slice(&a[old_range]);
                added.extend_from_slice(&b[new_range]);
            }
        }
    }
    flush(&mut runs, &mut removed, &mut added);
    runs.push(Run {
        change: None,
        lines: Vec::new(),
    });

    const CONTEXT: usize = 4;
    struct Hunk {
        old_start: usize,
        old_lines: usize,
        new_start: usize,
        new_lines: usize,
        lines: Vec<String>,
    }
    let context = |lines: &[&str]| lines.iter().map(|l| format!(" {l}")).collect::<Vec<_>>();
    let mut hunks = Vec::new();
    let (mut old_range_start, mut new_range_start) = (0usize, 0usize);
    let mut cur: Vec<String> = Vec::new();
    let (mut old_line, mut new_line) = (1usize, 1usize);
    for i in 0..runs.len() {
        let run = &runs[i];
        if let Some(is_added) = run.change {
            if old_range_start == 0 {
                old_range_start = old_line;
                new_range_start = new_line;
                if i > 0 {
                    let prev = &runs[i - 1].lines;
                    cur = context(&prev[prev.len().saturating_sub(CONTEXT)..]);
                    old_range_start -= cur.len();
                    new_range_start -= cur.len();
                }
            }
            let sign = if is_added { '+' } else { '-' };
            cur.extend(run.lines.iter().map(|l| format!("{sign}{l}")));
            if is_added {
                new_line += run.lines.len();
            } else {
                old_line += run.lines.len();
            }
        } else {
            if old_range_start != 0 {
                if run.lines.len() <= CONTEXT * 2 && i + 2 < runs.len() {
                    cur.extend(context(&run.lines));
                } else {
                    let size = run.lines.len().min(CONTEXT);
                    cur.extend(context(&run.lines[..size]));
                    hunks.push(Hunk {
                        old_start: old_range_start,
                        old_lines: old_line - old_range_start + size,
                        new_start: new_range_start,
                        new_lines: new_line - new_range_start + size,
                        lines: std::mem::take(&mut cur),
                    });
                    old_range_start = 0;
                    new_range_start = 0;
                }
            }
            old_line += run.lines.len();
            new_line += run.lines.len();
        }
    }
    let mut out = format!(
        "Index: {path}\n===================================================================\n\
         --- {path}\toriginal\n+++ {path}\tmodified\n"
    );
    for hunk in hunks {
        let old_start = if hunk.old_lines == 0 {
            hunk.old_start - 1
        } else {
            hunk.old_start
        };
        let new_start = if hunk.new_lines == 0 {
            hunk.new_start - 1
        } else {
            hunk.new_start
        };
        let _ = writeln!(
            out,
            "@@ -{old_start},{} +{new_start},{} @@",
            hunk.old_lines, hunk.new_lines
        );
        for line in hunk.lines {
            match line.strip_suffix('\n') {
                Some(line) => {
                    out.push_str(line);
                    out.push('\n');
                }
                None => {
                    out.push_str(&line);
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

/// The diff in a fence of enough backticks, as the reference server wraps it.
fn fenced_diff(diff: &str) -> String {
    let mut ticks = 3;
    while diff.contains(&"`".repeat(ticks)) {
        ticks += 1;
    }
    let fence = "`".repeat(ticks);
    format!("{fence}diff\n{diff}{fence}\n\n")
}

/// The edited text and its fenced diff, or the reference server's message.
fn edited(path: &str, bytes: &[u8], edits: &[Edit]) -> Result<(String, String), String> {
    let content = normalize_line_endings(&String::from_utf8_lossy(bytes));
    let modified = apply_edits(&content, edits)?;
    let diff = fenced_diff(&unified_diff(path, &content, &modified));
    Ok((modified, diff))
}

async fn edit_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("edit_file", arguments, &["path", "edits", "dryRun"])?;
    let path = args.path("path")?;
    let edits = edits_of(&args)?;
    let dry_run = args.opt_bool("dryRun")?.unwrap_or(false);
    let shown_path = resolve(actor, &path)?.display().to_string();
    if dry_run {
        // A preview shows the current content around each edit: it reads,
        // and its mark says it showed only that (SPEC §6).
        let look = |bytes: &[u8]| View::Excerpts {
            total: String::from_utf8_lossy(bytes).lines().count() as u64,
        };
        let (bytes, _) = read_viewed(server, actor, &path, look).await?;
        return edited(&shown_path, &bytes, &edits)
            .map(|(_, diff)| text(diff))
            .map_err(bad);
    }
    let outcome: Arc<parking_lot::Mutex<Option<Result<String, String>>>> = Arc::default();
    let (p, o) = (path.clone(), outcome.clone());
    let written = with_wait(server, actor, &[&path], Access::Write, move |files| {
        // All anchored or none (SPEC §6), and only as exact replacements.
        let pairs: Vec<(&str, &str)> = edits.iter().map(|e| (&*e.old, &*e.new)).collect();
        files.rewrite_anchored(&p, &pairs, |bytes| {
            let result = edited(&shown_path, bytes, &edits);
            let new = result
                .as_ref()
                .ok()
                .map(|(new, _)| new.clone().into_bytes());
            *o.lock() = Some(result.map(|(_, diff)| diff));
            new.ok_or_else(|| Error::NoMatch {
                path: p.clone().into(),
            })
        })
    })
    .await;
    let computed = outcome.lock().take();
    match (written, computed) {
        (Ok(receipt), Some(Ok(diff))) => Ok(text(diff + &super::anchored::note(&receipt))),
        // A resent call writes nothing and makes no diff: its first
        // answer stands; an insertion placed among others' lines made no
        // diff of its own either (the note shows the others').
        (Ok(receipt), None) if receipt.repeat || receipt.anchored.is_some() => Ok(text(format!(
            "Edited {path}.{}{}",
            super::anchored::note(&receipt),
            repeat_note(&receipt)
        ))),
        (Err(Error::NoMatch { .. }), Some(Err(message))) => Err(bad(message)),
        (Err(e), _) => {
            Err(refused_with_current(server, actor, &path, e, Show::Plain, "edit_file").await)
        }
        (Ok(_), _) => Err(bad(
            "edit_file: the edit was written but its diff was lost.",
        )),
    }
}

async fn create_directory(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("create_directory", arguments, &["path"])?;
    let path = args.path("path")?;
    // `Files::create_dir` makes it through folder handles, under an
    // exclusive call hold (fences, read-only grants, the policy).
    let p = path.clone();
    with_wait(server, actor, &[&path], Access::Write, move |files| {
        files.create_dir(&p)
    })
    .await?;
    Ok(text(format!("Successfully created directory {path}")))
}

/// One directory entry as the reference server sees it: `isDirectory` is
/// the entry's own type (a symlink to a folder is not a folder).
struct Entry {
    name: String,
    is_dir: bool,
    /// For a symlink, the size of what it points to inside the root (0
    /// when it points out); the reference server follows it.
    size: u64,
}

/// A folder's entries through `Files::list_dir` (folder handles, never a
/// symlink, `.writ/` left out), in the order Node's `readdir` gives them
/// (sorted by byte value).
fn entries(actor: &Actor, dir: &Path) -> Result<Vec<Entry>, Failure> {
    let files = actor.files();
    let mut out = Vec::new();
    for entry in files.list_dir(dir)? {
        let size = match entry.kind {
            EntryKind::Symlink => files
                .metadata(dir.join(&entry.name))
                .map(|m| m.len())
                .unwrap_or(0),
            _ => entry.size,
        };
        out.push(Entry {
            is_dir: entry.kind == EntryKind::Folder,
            name: entry.name,
            size,
        });
    }
    Ok(out)
}

/// `formatSize` of the reference server.
fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if bytes == 0 {
        return "0 B".to_string();
    }
    let x = bytes as f64;
    let i = (x.ln() / 1024f64.ln()).floor() as usize;
    if i == 0 {
        return format!("{bytes} B");
    }
    let unit = i.min(UNITS.len() - 1);
    let value = x / 1024f64.powi(unit as i32);
    // `toFixed(2)` rounds a tie up, where Rust's formatting rounds it to even.
    let scaled = value * 100.0;
    let fixed = if scaled.fract() == 0.5 {
        format!("{:.2}", scaled.ceil() / 100.0)
    } else {
        format!("{value:.2}")
    };
    format!("{fixed} {}", UNITS[unit])
}

/// `padEnd` / `padStart` count UTF-16 units.
fn pad_end(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(utf16_len(s))))
}

fn pad_start(s: &str, width: usize) -> String {
    format!("{}{s}", " ".repeat(width.saturating_sub(utf16_len(s))))
}

/// A sort key approximating `localeCompare` in the root collation for the
/// names files usually have: whitespace, then punctuation and symbols in
/// their collation order, digits, then letters without regard to case;
/// other characters after those, by code point.
fn collation_weight(c: char) -> (u32, u32) {
    const ORDER: &str = "\t\n\u{b}\u{c}\r _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789";
    if let Some(at) = ORDER.find(c) {
        return (at as u32, 0);
    }
    if c.is_ascii_alphabetic() {
        let base = ORDER.len() as u32;
        return (base + (c.to_ascii_lowercase() as u32 - 'a' as u32), 0);
    }
    (0x1000 + c as u32, 0)
}

fn locale_compare(a: &str, b: &str) -> std::cmp::Ordering {
    let primary = |s: &str| s.chars().map(|c| collation_weight(c).0).collect::<Vec<_>>();
    primary(a).cmp(&primary(b)).then_with(|| {
        // Lower case before upper case, at the first difference.
        let tertiary = |s: &str| {
            s.chars()
                .map(|c| u8::from(c.is_uppercase()))
                .collect::<Vec<_>>()
        };
        tertiary(a).cmp(&tertiary(b))
    })
}

/// The resolved folder `path` names, for the listing tools.
fn folder(actor: &Actor, path: &str) -> Result<PathBuf, Failure> {
    resolve(actor, path)
}

async fn list_directory(call: Call<'_>, sizes: bool) -> Outcome {
    let (_, actor, arguments) = call.parts();
    let tool = if sizes {
        "list_directory_with_sizes"
    } else {
        "list_directory"
    };
    let known: &[&str] = if sizes {
        &["path", "sortBy"]
    } else {
        &["path"]
    };
    let args = Args::new(tool, arguments, known)?;
    let path = args.path("path")?;
    let by_size = match args.opt_string("sortBy")?.as_deref() {
        None | Some("name") => false,
        Some("size") => true,
        Some(other) => {
            return Err(bad(format!(
                "{tool}: `sortBy` must be \"name\" or \"size\", got \"{other}\". Nothing was done."
            )));
        }
    };
    let dir = folder(actor, &path)?;
    let a = actor.clone();
    off_thread(move || {
        let list = entries(&a, &dir)?;
        let tag = |e: &Entry| if e.is_dir { "[DIR]" } else { "[FILE]" };
        if !sizes {
            let lines: Vec<String> = list
                .iter()
                .map(|e| format!("{} {}", tag(e), e.name))
                .collect();
            return Ok(text(lines.join("\n")));
        }
        let sized: Vec<(&Entry, u64)> = list.iter().map(|e| (e, e.size)).collect();
        let mut sorted = sized.clone();
        if by_size {
            sorted.sort_by_key(|e| std::cmp::Reverse(e.1));
        } else {
            sorted.sort_by(|a, b| locale_compare(&a.0.name, &b.0.name));
        }
        let mut lines: Vec<String> = sorted
            .iter()
            .map(|(e, size)| {
                let size = if e.is_dir {
                    String::new()
                } else {
                    pad_start(&format_size(*size), 10)
                };
                format!("{} {} {size}", tag(e), pad_end(&e.name, 30))
            })
            .collect();
        let files = sized.iter().filter(|(e, _)| !e.is_dir).count();
        let total: u64 = sized
            .iter()
            .filter(|(e, _)| !e.is_dir)
            .map(|(_, s)| s)
            .sum();
        lines.push(String::new());
        lines.push(format!(
            "Total: {files} files, {} directories",
            sized.len() - files
        ));
        lines.push(format!("Combined size: {}", format_size(total)));
        Ok(text(lines.join("\n")))
    })
    .await
}

/// A glob as `minimatch` with `{dot: true}` matches it against a relative
/// path: `*`, `?`, `[...]`, `{a,b}`, `\` escapes, and `**` for any number
/// of folders (at the end, at least one).
fn glob_match(pattern: &str, path: &str) -> bool {
    if path.is_empty() {
        return false;
    }
    let names: Vec<&str> = path.split('/').collect();
    expand_braces(pattern).iter().any(|p| {
        let parts: Vec<&str> = p.split('/').collect();
        match_parts(&parts, &names)
    })
}

/// At most this many patterns come out of one pattern's braces (a pattern
/// of many `{a,b}` groups would otherwise double with each).
const MAX_EXPANSIONS: usize = 256;

fn expand_braces(pattern: &str) -> Vec<String> {
    let bytes = pattern.as_bytes();
    let Some(open) = pattern.find('{') else {
        return vec![pattern.to_string()];
    };
    let mut depth = 0;
    let mut commas = Vec::new();
    let mut close = None;
    for (i, b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            b',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let Some(close) = close.filter(|_| !commas.is_empty()) else {
        return vec![pattern.to_string()];
    };
    let (pre, post) = (&pattern[..open], &pattern[close + 1..]);
    let mut bounds = vec![open];
    bounds.extend(commas);
    bounds.push(close);
    bounds
        .windows(2)
        .flat_map(|w| expand_braces(&format!("{pre}{}{post}", &pattern[w[0] + 1..w[1]])))
        .take(MAX_EXPANSIONS)
        .collect()
}

/// Memo of suffix matches: a pattern of many `*` or `**` is checked in
/// time bounded by the product of the lengths, never exponential.
type Memo = std::collections::HashMap<(usize, usize), bool>;

fn match_parts(parts: &[&str], names: &[&str]) -> bool {
    fn go(parts: &[&str], names: &[&str], memo: &mut Memo) -> bool {
        let key = (parts.len(), names.len());
        if let Some(known) = memo.get(&key) {
            return *known;
        }
        let result = match parts.split_first() {
            None => names.is_empty(),
            Some((&"**", [])) => !names.is_empty(),
            Some((&"**", rest)) => (0..=names.len()).any(|skip| go(rest, &names[skip..], memo)),
            Some((part, rest)) => match names.split_first() {
                Some((name, more)) => match_name(part, name) && go(rest, more, memo),
                None => false,
            },
        };
        memo.insert(key, result);
        result
    }
    go(parts, names, &mut Memo::new())
}

/// One path component against one pattern component.
fn match_name(pattern: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_chars(&p, &n, &mut Memo::new())
}

fn match_chars(p: &[char], n: &[char], memo: &mut Memo) -> bool {
    let key = (p.len(), n.len());
    if let Some(known) = memo.get(&key) {
        return *known;
    }
    let result = match p.first() {
        None => n.is_empty(),
        Some('*') => (0..=n.len()).any(|skip| match_chars(&p[1..], &n[skip..], memo)),
        Some('?') => !n.is_empty() && match_chars(&p[1..], &n[1..], memo),
        Some('[') => match class(&p[1..], n.first().copied()) {
            Some((true, used)) => match_chars(&p[1 + used..], &n[1..], memo),
            Some((false, _)) => false,
            None => n.first() == Some(&'[') && match_chars(&p[1..], &n[1..], memo),
        },
        Some('\\') if p.len() > 1 => {
            n.first() == Some(&p[1]) && match_chars(&p[2..], &n[1..], memo)
        }
        Some(c) => n.first() == Some(c) && match_chars(&p[1..], &n[1..], memo),
    };
    memo.insert(key, result);
    result
}

/// A `[...]` class after its `[`: whether `c` is in it and how many pattern
/// characters it took (with the `]`); `None` when it never closes.
fn class(p: &[char], c: Option<char>) -> Option<(bool, usize)> {
    let c = c?;
    let mut i = 0;
    let negate = matches!(p.first(), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            hit |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    None
}

#[derive(serde::Serialize)]
struct TreeEntry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<Vec<TreeEntry>>,
}

fn excluded_from_tree(rel: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|pattern| {
        if pattern.contains('*') {
            glob_match(pattern, rel)
        } else {
            glob_match(pattern, rel)
                || glob_match(&format!("**/{pattern}"), rel)
                || glob_match(&format!("**/{pattern}/**"), rel)
        }
    })
}

fn tree(
    actor: &Actor,
    dir: &Path,
    rel: &str,
    exclude: &[String],
    depth: usize,
) -> Result<Vec<TreeEntry>, Failure> {
    let mut out = Vec::new();
    let listed = match entries(actor, dir) {
        Ok(listed) => listed,
        // A folder below the one asked for that cannot be listed (swapped
        // for a symlink meanwhile, or named past PATH_MAX by a shell) is
        // shown empty rather than failing the whole tree.
        Err(_) if depth > 0 => Vec::new(),
        Err(e) => return Err(e),
    };
    for entry in listed {
        let rel = if rel.is_empty() {
            entry.name.clone()
        } else {
            format!("{rel}/{}", entry.name)
        };
        if excluded_from_tree(&rel, exclude) {
            continue;
        }
        // Past `MAX_DEPTH` a folder is shown empty: a tree made deep to
        // break the listing cannot.
        let children = if entry.is_dir && depth < MAX_DEPTH {
            Some(tree(
                actor,
                &dir.join(&entry.name),
                &rel,
                exclude,
                depth + 1,
            )?)
        } else if entry.is_dir {
            Some(Vec::new())
        } else {
            None
        };
        out.push(TreeEntry {
            name: entry.name,
            kind: if entry.is_dir { "directory" } else { "file" },
            children,
        });
    }
    Ok(out)
}

async fn directory_tree(call: Call<'_>) -> Outcome {
    let (_, actor, arguments) = call.parts();
    let args = Args::new("directory_tree", arguments, &["path", "excludePatterns"])?;
    let path = args.path("path")?;
    let exclude = args.opt_paths("excludePatterns")?.unwrap_or_default();
    let dir = folder(actor, &path)?;
    let a = actor.clone();
    off_thread(move || {
        let entries = tree(&a, &dir, "", &exclude, 0)?;
        let json = serde_json::to_string_pretty(&entries).map_err(|e| bad(e.to_string()))?;
        Ok(text(json))
    })
    .await
}

async fn move_file(call: Call<'_>) -> Outcome {
    let (server, actor, arguments) = call.parts();
    let args = Args::new("move_file", arguments, &["source", "destination"])?;
    let source = args.path("source")?;
    let destination = args.path("destination")?;
    let to = resolve(actor, &destination)?;
    if std::fs::symlink_metadata(&to).is_ok() {
        return Err(bad(format!("Destination already exists: {}", to.display())));
    }
    // Which operation runs is decided by what the source is now; each then
    // acts through folder handles and fails if the source changed kind.
    let is_dir = actor
        .files()
        .metadata(&source)
        .is_ok_and(|m| m.file_type().is_dir());
    let (s, d) = (source.clone(), destination.clone());
    with_wait(
        server,
        actor,
        &[&source, &destination],
        Access::Write,
        move |files| {
            if is_dir {
                // Under exclusive holds on both trees, judged by the policy
                // on both ends and on everything the folder holds.
                files.move_dir(&s, &d)
            } else {
                files.rename(&s, &d).map(|_| ())
            }
        },
    )
    .await?;
    Ok(text(format!(
        "Successfully moved {source} to {destination}"
    )))
}

/// Whether a symlink found in a walk points inside the grant (one pointing
/// out is skipped, as the reference server skips it). Only looked at, never
/// acted through.
fn inside(actor: &Actor, path: &Path) -> bool {
    actor.files().metadata(path).is_ok()
}

fn search(
    actor: &Actor,
    root: &Path,
    pattern: &str,
    exclude: &[String],
) -> Result<Vec<String>, Failure> {
    let mut found = Vec::new();
    actor.files().walk(root, &mut |rel, entry| {
        let rel_text = rel.to_string_lossy();
        if exclude.iter().any(|x| glob_match(x, &rel_text)) {
            return false;
        }
        let path = root.join(rel);
        if entry.kind == EntryKind::Symlink && !inside(actor, &path) {
            return false;
        }
        if glob_match(pattern, &rel_text) {
            found.push(path.display().to_string());
        }
        true
    })?;
    Ok(found)
}

async fn search_files(call: Call<'_>) -> Outcome {
    let (_, actor, arguments) = call.parts();
    let args = Args::new(
        "search_files",
        arguments,
        &["path", "pattern", "excludePatterns"],
    )?;
    let path = args.path("path")?;
    let pattern = args.string("pattern")?;
    let exclude = args.opt_paths("excludePatterns")?.unwrap_or_default();
    let root = folder(actor, &path)?;
    let a = actor.clone();
    off_thread(move || {
        let found = search(&a, &root, &pattern, &exclude)?;
        Ok(text(if found.is_empty() {
            "No matches found".to_string()
        } else {
            found.join("\n")
        }))
    })
    .await
}

/// A time as JavaScript's `Date.prototype.toString` writes it, in UTC
/// (`Tue Dec 01 2026 08:25:32 GMT+0000 (Coordinated Universal Time)`).
fn js_date(time: SystemTime) -> String {
    let secs = match time.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {day:02} {year:04} {:02}:{:02}:{:02} GMT+0000 (Coordinated Universal Time)",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

async fn get_file_info(call: Call<'_>) -> Outcome {
    let (_, actor, arguments) = call.parts();
    let args = Args::new("get_file_info", arguments, &["path"])?;
    let path = args.path("path")?;
    let a = actor.clone();
    off_thread(move || {
        use std::os::unix::fs::MetadataExt;
        // Through folder handles: a symlink swapped in cannot point the
        // look outside the root.
        let meta = a.files().metadata(&path)?;
        let time = |t: std::io::Result<SystemTime>| js_date(t.unwrap_or(UNIX_EPOCH));
        let mode = format!("{:o}", meta.mode());
        Ok(text(format!(
            "size: {}\ncreated: {}\nmodified: {}\naccessed: {}\nisDirectory: {}\nisFile: {}\npermissions: {}",
            meta.len(),
            time(meta.created()),
            time(meta.modified()),
            time(meta.accessed()),
            meta.is_dir(),
            meta.is_file(),
            &mode[mode.len().saturating_sub(3)..]
        )))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_definitions_parse_and_keep_their_order() {
        let defs = definitions();
        let names: Vec<&str> = defs.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, FILESYSTEM_TOOL_NAMES);
        for t in &defs {
            assert!(t.output_schema.is_some(), "{}", t.name);
        }
        let write = defs
            .iter()
            .find(|t| t.name == "write_file")
            .map(|t| t.description.clone());
        let write = write.flatten().unwrap_or_default();
        assert!(write.contains("must have been read"), "{write}");
        assert!(!write.contains("without warning"), "{write}");
    }

    #[test]
    fn head_and_tail_cut_lines_as_the_reference_does() {
        assert_eq!(head("a\nb\nc\n", 2), "a\nb");
        assert_eq!(head("a\nb\nc\n", 9), "a\nb\nc");
        assert_eq!(tail("a\nb\nc\n", 2), "c\n");
        assert_eq!(tail("a\r\nb\r\nc", 2), "b\nc");
        assert_eq!(tail("", 3), "");
    }

    #[test]
    fn edits_match_exactly_first_then_by_trimmed_lines() {
        let edits = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(o, n)| Edit {
                    old: o.to_string(),
                    new: n.to_string(),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            apply_edits("x = 1\nx = 1\n", &edits(&[("x = 1", "y")])),
            Ok("y\nx = 1\n".into())
        );
        let loose = apply_edits(
            "fn a() {\n    b();\n}\n",
            &edits(&[("b();", "c();\n    d();")]),
        );
        assert_eq!(loose, Ok("fn a() {\n    c();\n    d();\n}\n".into()));
        let indented = apply_edits(
            "  if x:\n      go()\n",
            &edits(&[("if x:\n    go()", "if y:\n    stop()")]),
        );
        assert_eq!(indented, Ok("  if y:\n  stop()\n".into()));
        let missing = apply_edits("a\n", &edits(&[("zzz", "y")]));
        assert_eq!(
            missing,
            Err("Could not find exact match for edit:\nzzz".into())
        );
    }

    #[test]
    fn the_diff_has_jsdiff_headers_context_and_eof_notes() {
        let diff = unified_diff(
            "/w/f.txt",
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n",
            "1\n2\n3\n4\n5\nsix\n7\n8\n9\n10\n",
        );
        assert_eq!(
            diff,
            "Index: /w/f.txt\n===================================================================\n\
             --- /w/f.txt\toriginal\n+++ /w/f.txt\tmodified\n@@ -2,9 +2,9 @@\n 2\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n 10\n"
        );
        let eof = unified_diff("f", "a", "b");
        assert!(eof.ends_with("@@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"), "{eof}");
        assert_eq!(fenced_diff("x\n"), "```diff\nx\n```\n\n");
        assert_eq!(fenced_diff("```\n"), "````diff\n```\n````\n\n");
    }

    #[test]
    fn globs_match_as_minimatch_does() {
        assert!(glob_match("*.txt", "x.txt"));
        assert!(!glob_match("*.txt", "d/x.txt"));
        assert!(glob_match("**/*.txt", "d/x.txt"));
        assert!(glob_match("**/c", "c"));
        assert!(!glob_match("a/**", "a"));
        assert!(glob_match("a/**", "a/b"));
        assert!(glob_match("*", ".h"));
        assert!(glob_match("*.{rs,py}", "a.py"));
        assert!(glob_match("[abc]", "b"));
        assert!(!glob_match("[!abc]", "b"));
        assert!(!glob_match("*.txt", "A.TXT"));
        // Pathological patterns finish (memoized, expansions capped).
        let long = "a".repeat(200);
        assert!(!glob_match(&format!("{}b", "*a".repeat(40)), &long));
        let deep = vec!["d"; 60].join("/");
        assert!(!glob_match(&"**/".repeat(30), &deep));
        assert!(!glob_match(&"{a,b}".repeat(30), "c"));
    }

    #[test]
    fn sizes_names_and_dates_are_written_as_node_writes_them() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1024), "1.00 KB");
        assert_eq!(format_size(1536), "1.50 KB");
        assert_eq!(format_size(1024 * 1024 * 3), "3.00 MB");
        let mut names = vec![
            "b", "C", "_x", ".h", "10", "9", "Zeta", "a", "alpha-1", "alpha_1",
        ];
        names.sort_by(|a, b| locale_compare(a, b));
        assert_eq!(
            names,
            [
                "_x", ".h", "10", "9", "a", "alpha_1", "alpha-1", "b", "C", "Zeta"
            ]
        );
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_796_113_532);
        assert_eq!(
            js_date(t),
            "Tue Dec 01 2026 08:25:32 GMT+0000 (Coordinated Universal Time)"
        );
        assert_eq!(
            js_date(UNIX_EPOCH),
            "Thu Jan 01 1970 00:00:00 GMT+0000 (Coordinated Universal Time)"
        );
    }
}
