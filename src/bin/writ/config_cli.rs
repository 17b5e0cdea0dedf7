//! `writ config CLIENT [--write]`: the MCP client's configuration for writ,
//! printed or merged into the client's own file.
//!
//! The snippet is always the stdio bridge (`writ mcp ROOT --agent CLIENT`):
//! it needs no port and no token, bridges to the `writ serve` running for
//! ROOT when there is one, and keeps working when that server restarts on
//! another port. A merge only ever adds writ's entry: what the file has is
//! kept byte for byte, and a file writ cannot edit safely (comments, a
//! different `writ` entry) is left as it is, with the snippet to add by hand.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::Value;

/// The MCP clients `writ config` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Code: the project's `.mcp.json`.
    Claude,
    /// Codex: `$CODEX_HOME/config.toml` (default `~/.codex/config.toml`).
    Codex,
    /// Gemini CLI: the project's `.gemini/settings.json`.
    Gemini,
    /// opencode: the project's `opencode.json`.
    Opencode,
    /// Cursor: the project's `.cursor/mcp.json`.
    Cursor,
    /// VS Code: the project's `.vscode/mcp.json`.
    Vscode,
}

/// `writ config`.
#[derive(Debug, Args)]
pub struct ConfigCmd {
    /// The client to configure.
    #[arg(value_enum)]
    client: Client,
    /// The workspace the agent works in (default: the current folder).
    root: Option<PathBuf>,
    /// Merge the snippet into the client's config file (adding writ's entry
    /// only; nothing already there is changed) instead of printing it.
    #[arg(long)]
    write: bool,
    /// The config file to merge into, instead of the client's usual one.
    #[arg(long, value_name = "FILE", requires = "write")]
    file: Option<PathBuf>,
}

impl Client {
    /// The name the agent gets (`--agent`), and the client's name in messages.
    fn name(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Codex => "codex",
            Client::Gemini => "gemini",
            Client::Opencode => "opencode",
            Client::Cursor => "cursor",
            Client::Vscode => "vscode",
        }
    }

    /// The top-level key of the client's JSON file that holds its servers
    /// (None: Codex, whose file is TOML).
    fn section(self) -> Option<&'static str> {
        match self {
            Client::Claude | Client::Gemini | Client::Cursor => Some("mcpServers"),
            Client::Opencode => Some("mcp"),
            Client::Vscode => Some("servers"),
            Client::Codex => None,
        }
    }

    /// The file the client reads its MCP servers from.
    fn default_file(self, root: &Path) -> Result<PathBuf, String> {
        Ok(match self {
            Client::Claude => root.join(".mcp.json"),
            Client::Gemini => root.join(".gemini").join("settings.json"),
            Client::Opencode => root.join("opencode.json"),
            Client::Cursor => root.join(".cursor").join("mcp.json"),
            Client::Vscode => root.join(".vscode").join("mcp.json"),
            Client::Codex => match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
                Some(home) => PathBuf::from(home).join("config.toml"),
                None => std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".codex").join("config.toml"))
                    .ok_or(
                        "no $HOME (or $CODEX_HOME) to find Codex's config.toml in; give --file",
                    )?,
            },
        })
    }

    /// `writ mcp`'s arguments for this client.
    fn args(self, root: &Path) -> Vec<String> {
        // VS Code starts servers outside the workspace folder and names it
        // with a variable of its own, so its file stays valid if moved.
        let root = match self {
            Client::Vscode => "${workspaceFolder}".to_string(),
            _ => root.to_string_lossy().into_owned(),
        };
        vec!["mcp".into(), root, "--agent".into(), self.name().into()]
    }

    /// writ's entry in the client's JSON servers object, as text: its keys
    /// in the order the client's documentation shows them, on one line.
    fn entry_text(self, root: &Path) -> String {
        let list = |items: &[String]| -> String {
            let quoted: Vec<String> = items.iter().map(|a| json_string(a)).collect();
            format!("[{}]", quoted.join(", "))
        };
        let args = self.args(root);
        match self {
            Client::Opencode => {
                let mut command = vec!["writ".to_string()];
                command.extend(args);
                format!(r#"{{"type": "local", "command": {}}}"#, list(&command))
            }
            Client::Vscode => format!(
                r#"{{"type": "stdio", "command": "writ", "args": {}}}"#,
                list(&args)
            ),
            _ => format!(r#"{{"command": "writ", "args": {}}}"#, list(&args)),
        }
    }

    /// The snippet as the client's file has it.
    fn snippet(self, root: &Path) -> String {
        match self.section() {
            Some(section) => format!(
                "{{\n  {}: {{\n    \"writ\": {}\n  }}\n}}\n",
                json_string(section),
                self.entry_text(root)
            ),
            None => codex_table(&self.args(root)),
        }
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    // A string always serializes.
    serde_json::to_string(text).unwrap_or_default()
}

/// Codex's `[mcp_servers.writ]` table. A JSON string literal is a valid
/// TOML basic string (the same escapes), so paths are written with it.
fn codex_table(args: &[String]) -> String {
    let quoted: Vec<String> = args.iter().map(|a| json_string(a)).collect();
    format!(
        "[mcp_servers.writ]\ncommand = \"writ\"\nargs = [{}]\n",
        quoted.join(", ")
    )
}

/// Runs `writ config`.
pub fn run(cmd: ConfigCmd) -> ExitCode {
    match run_inner(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writ config: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(cmd: ConfigCmd) -> Result<(), String> {
    let root = match cmd.root {
        Some(r) => r,
        None => std::env::current_dir().map_err(|e| format!("no current folder: {e}"))?,
    };
    let root = std::fs::canonicalize(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let client = cmd.client;
    let file = match cmd.file {
        Some(file) => file,
        None => client.default_file(&root)?,
    };
    let snippet = client.snippet(&root);
    if !cmd.write {
        print!("{snippet}");
        eprintln!(
            "writ config: this goes in {} (`writ config {} --write` merges it there)",
            file.display(),
            client.name()
        );
        return Ok(());
    }
    let existing = match std::fs::read_to_string(&file) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let merged = match client.section() {
        Some(section) => merge_json(
            existing.as_deref(),
            section,
            &client.entry_text(&root),
            &snippet,
        ),
        None => merge_codex(existing.as_deref(), &snippet),
    };
    match merged {
        Ok(Some(text)) => {
            write_atomically(&file, &text)?;
            println!("writ config: added writ to {}", file.display());
        }
        Ok(None) => println!("writ config: {} already has writ", file.display()),
        Err(why) => {
            return Err(format!(
                "{}: {why}; left unchanged. Add this by hand:\n{snippet}",
                file.display()
            ));
        }
    }
    if !on_path("writ") {
        eprintln!(
            "writ config: the client runs `writ`, which is not on PATH here; \
             install it with `pipx install writ-sched` or `npm install -g writ-sched`"
        );
    }
    Ok(())
}

/// The file's new text with `"writ": entry` added under `section`, None
/// when it is there already, or why it cannot be added safely.
///
/// The entry is inserted into the original text, so that everything else
/// (key order, spacing) stays as it was; the result is parsed again and
/// must equal the original with the entry added.
fn merge_json(
    existing: Option<&str>,
    section: &str,
    entry_text: &str,
    snippet: &str,
) -> Result<Option<String>, String> {
    let text = match existing {
        Some(text) if !text.trim().is_empty() => text,
        _ => return Ok(Some(snippet.to_string())),
    };
    let entry: &Value = &serde_json::from_str(entry_text)
        .map_err(|e| format!("writ's own entry is not JSON ({e})"))?;
    let original: Value = serde_json::from_str(text)
        .map_err(|e| format!("not plain JSON ({e}), so writ will not rewrite it"))?;
    let Value::Object(top) = &original else {
        return Err("its top level is not a JSON object".into());
    };
    let insert_at;
    let addition;
    match top.get(section) {
        Some(Value::Object(servers)) => {
            if let Some(found) = servers.get("writ") {
                return if found == entry {
                    Ok(None)
                } else {
                    Err(format!(
                        "it has another server named \"writ\" under \"{section}\""
                    ))
                };
            }
            let open = member_value_offset(text, section)
                .ok_or("writ could not find where the servers start")?;
            insert_at = open + 1;
            addition = member_text(text, insert_at, "writ", entry_text);
        }
        Some(_) => return Err(format!("\"{section}\" is not a JSON object")),
        None => {
            let open = text.find('{').ok_or("its top level is not a JSON object")?;
            insert_at = open + 1;
            addition = member_text(
                text,
                insert_at,
                section,
                &format!("{{\"writ\": {entry_text}}}"),
            );
        }
    }
    let mut merged = String::with_capacity(text.len() + addition.len());
    merged.push_str(&text[..insert_at]);
    merged.push_str(&addition);
    merged.push_str(&text[insert_at..]);
    // The proof that nothing else changed: take the entry out again.
    let mut check: Value =
        serde_json::from_str(&merged).map_err(|e| format!("writ's edit would not parse ({e})"))?;
    let added = check
        .get_mut(section)
        .and_then(Value::as_object_mut)
        .and_then(|servers| servers.remove("writ"));
    if added.as_ref() != Some(entry) {
        return Err("writ's edit did not land where expected".into());
    }
    if top.get(section).is_none() {
        if let Some(object) = check.as_object_mut() {
            object.remove(section);
        }
    }
    if check != original {
        return Err("writ's edit would change other entries".into());
    }
    Ok(Some(merged))
}

/// `"key": value,` to insert at `at` (just after an object's `{`),
/// indented like the member that follows it; no comma when the object is
/// empty.
fn member_text(text: &str, at: usize, key: &str, value: &str) -> String {
    let rest = &text[at..];
    let gap_len = rest.len() - rest.trim_start().len();
    let gap = &rest[..gap_len];
    let empty = rest.trim_start().starts_with('}');
    let mut out = String::new();
    match gap.rfind('\n') {
        // The next member is on its own line: put ours on a line before it.
        Some(newline) if !empty => {
            out.push('\n');
            out.push_str(&gap[newline + 1..]);
        }
        _ => {}
    }
    let _ = write!(out, "{}: {value}", json_string(key));
    if !empty {
        out.push(',');
        if !gap.contains('\n') {
            out.push(' ');
        }
    }
    out
}

/// The offset of the `{` that opens the value of the top-level member
/// `key` in `text`, which is valid JSON with an object at its top.
fn member_value_offset(text: &str, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = skip_space(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_space(bytes, i);
        match bytes.get(i)? {
            b'}' => return None,
            b',' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let key_end = skip_string(bytes, i)?;
        let name: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_space(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(bytes, i + 1);
        if name == key {
            return (bytes.get(i) == Some(&b'{')).then_some(i);
        }
        i = skip_value(bytes, i)?;
    }
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The offset just past the string literal starting at `i`.
fn skip_string(bytes: &[u8], mut i: usize) -> Option<usize> {
    if bytes.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    loop {
        match bytes.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The offset just past the JSON value starting at `i`.
fn skip_value(bytes: &[u8], mut i: usize) -> Option<usize> {
    match bytes.get(i)? {
        b'"' => skip_string(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = skip_string(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            while !matches!(bytes.get(i), None | Some(b',' | b'}' | b']'))
                && !bytes.get(i).is_some_and(u8::is_ascii_whitespace)
            {
                i += 1;
            }
            Some(i)
        }
    }
}

/// Codex's file with `table` appended, None when the same table is there
/// already, or why it cannot be appended safely. Appending a table never
/// changes what the file says, as long as the file does not define
/// `mcp_servers.writ` (or `mcp_servers` inline) already.
fn merge_codex(existing: Option<&str>, table: &str) -> Result<Option<String>, String> {
    let text = existing.unwrap_or("");
    if text.contains(table) {
        return Ok(None);
    }
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            let name = header.split(']').next().unwrap_or("");
            current = toml_key(name);
            if current == "mcp_servers.writ" || current.starts_with("mcp_servers.writ.") {
                return Err("it has another [mcp_servers.writ] table".into());
            }
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = toml_key(key);
        let full = if current.is_empty() {
            key
        } else {
            format!("{current}.{key}")
        };
        if full == "mcp_servers"
            || full == "mcp_servers.writ"
            || full.starts_with("mcp_servers.writ.")
        {
            return Err("it defines mcp_servers or mcp_servers.writ inline".into());
        }
    }
    let mut merged = text.to_string();
    if !merged.is_empty() && !merged.ends_with('\n') {
        merged.push('\n');
    }
    if !merged.is_empty() {
        merged.push('\n');
    }
    merged.push_str(table);
    Ok(Some(merged))
}

/// A TOML key (`a . "b"`) as `a.b`: whitespace and quotes dropped.
fn toml_key(key: &str) -> String {
    key.chars()
        .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
        .collect()
}

/// Replaces `file` with `text` by a temporary file and a rename, keeping
/// the old file's permissions: a crash leaves the old file or the new one.
fn write_atomically(file: &Path, text: &str) -> Result<(), String> {
    let shown = |e: std::io::Error| format!("{}: {e}", file.display());
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut temp = tempfile::NamedTempFile::new_in(&dir).map_err(shown)?;
    std::io::Write::write_all(&mut temp, text.as_bytes()).map_err(shown)?;
    if let Ok(meta) = std::fs::metadata(file) {
        temp.as_file()
            .set_permissions(meta.permissions())
            .map_err(shown)?;
    }
    temp.as_file().sync_all().map_err(shown)?;
    temp.persist(file).map_err(|e| shown(e.error))?;
    Ok(())
}

/// Whether `command` is an executable file in a folder of `PATH`.
fn on_path(command: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        let candidate = dir.join(command);
        candidate.is_file() || candidate.with_extension("exe").is_file()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = r#"{"command": "writ", "args": ["mcp", "/r", "--agent", "claude"]}"#;

    fn entry() -> Value {
        serde_json::from_str(ENTRY).unwrap()
    }

    fn merge(text: &str) -> Result<Option<String>, String> {
        merge_json(Some(text), "mcpServers", ENTRY, "unused")
    }

    #[test]
    fn an_entry_goes_in_before_the_first_server_keeping_the_rest() {
        let text =
            "{\n  \"other\": 1,\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n  }\n}\n";
        let merged = merge(text).unwrap().unwrap();
        assert_eq!(
            merged,
            format!(
                "{{\n  \"other\": 1,\n  \"mcpServers\": {{\n    \"writ\": {ENTRY},\n    \"a\": {{\"command\": \"x\"}}\n  }}\n}}\n"
            )
        );
        assert_eq!(merge(&merged), Ok(None));
    }

    #[test]
    fn a_missing_section_is_added_to_a_compact_or_empty_object() {
        for text in ["{\"x\":{\"mcpServers\":2}}", "{}", "  { } "] {
            let merged = merge(text).unwrap().unwrap();
            let value: Value = serde_json::from_str(&merged).unwrap();
            assert_eq!(value["mcpServers"]["writ"], entry(), "{text} -> {merged}");
        }
        let merged = merge("{\"x\":{\"mcpServers\":2}}");
        let value: Value = serde_json::from_str(&merged.unwrap().unwrap()).unwrap();
        assert_eq!(value["x"]["mcpServers"], 2);
    }

    #[test]
    fn keys_with_escapes_and_nested_strings_do_not_confuse_the_scan() {
        let text =
            r#"{"a\"mcpServers": {"}": "{"}, "list": [1, "]", {"b": []}], "mcpServers": {}}"#;
        let merged = merge(text).unwrap().unwrap();
        let value: Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(value["mcpServers"]["writ"], entry());
        assert_eq!(value["a\"mcpServers"]["}"], "{");
    }

    #[test]
    fn codex_refuses_a_table_it_cannot_see_whole() {
        let table = codex_table(&["mcp".into()]);
        for text in [
            "[mcp_servers.writ]\ncommand = \"other\"\n",
            "[mcp_servers . \"writ\"]\n",
            "[mcp_servers]\nwrit = { command = \"x\" }\n",
            "mcp_servers = { writ = { command = \"x\" } }\n",
            "mcp_servers.writ.command = \"x\"\n",
        ] {
            assert!(merge_codex(Some(text), &table).is_err(), "{text}");
        }
        let merged = merge_codex(
            Some("model = \"m\"\n[mcp_servers.other]\ncommand = \"o\""),
            &table,
        )
        .unwrap()
        .unwrap();
        assert!(merged.starts_with(
            "model = \"m\"\n[mcp_servers.other]\ncommand = \"o\"\n\n[mcp_servers.writ]"
        ));
        assert_eq!(merge_codex(Some(&merged), &table), Ok(None));
    }
}
