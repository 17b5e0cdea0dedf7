//! `writ config CLIENT [--write]`: the MCP client's configuration for writ,
//! printed or merged into the client's own files, with what the user must
//! still do.
//!
//! The entry is the stdio bridge, `writ mcp ROOT`: it needs no port and no
//! token, and finds (or starts) the `writ serve` running for ROOT. It never
//! names an agent (`--agent`): every session of the client would be one
//! agent, sharing each other's reads. The command is the way this writ was
//! run when a launcher says so in `WRIT_LAUNCHER` (`uvx writ-sched`, `npx
//! -y writ-sched`, `pipx run writ-sched`), else `writ` when it is on PATH,
//! else this binary's absolute path. Files meant to be
//! committed and shared name the workspace relatively (`.`, or the client's
//! own variable), never this machine's path.
//!
//! A merge only ever adds: what a file has is kept byte for byte, and the
//! result is parsed again and must equal the original plus writ's entries.
//! A file writ cannot edit safely (comments, invalid, a different `writ`
//! entry) is left as it is, with the snippet to add by hand. A config file
//! that is a symlink, or not a regular file (a FIFO), is refused unread.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::Value;

/// The MCP clients `writ config` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Code: the project's `.mcp.json`, and its hooks and approval
    /// in `.claude/settings.json`.
    Claude,
    /// Codex: `$CODEX_HOME/config.toml` (default `~/.codex/config.toml`),
    /// its MCP server and its hooks.
    Codex,
    /// Gemini CLI: the project's `.gemini/settings.json`, its MCP server
    /// and its hooks.
    Gemini,
    /// opencode: the project's `opencode.json`, and writ's plugin in
    /// `.opencode/plugin/writ.js`.
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
    /// Merge into the client's files (adding writ's entries only; nothing
    /// already there is changed) instead of printing, and say what the
    /// user must still do.
    #[arg(long)]
    write: bool,
    /// The MCP config file to merge into, instead of the client's usual one.
    #[arg(long, value_name = "FILE", requires = "write")]
    file: Option<PathBuf>,
}

/// How the client runs writ: a program and the arguments before writ's own.
#[derive(Debug, Clone)]
struct Launch {
    program: String,
    prefix: Vec<String>,
}

impl Launch {
    /// The launcher this writ was run by (`WRIT_LAUNCHER`, set by
    /// `writ-sched` under `uvx`, `pipx run` or `npx`) — first, since those
    /// put their temporary `writ` on PATH only while they run it; else
    /// `writ` when one is on PATH; else this binary's absolute path.
    fn detect() -> Launch {
        let plain = |program: &str, prefix: &[&str]| Launch {
            program: program.to_string(),
            prefix: prefix.iter().map(|a| a.to_string()).collect(),
        };
        match std::env::var("WRIT_LAUNCHER").as_deref() {
            Ok("uvx") => return plain("uvx", &["writ-sched"]),
            Ok("npx") => return plain("npx", &["-y", "writ-sched"]),
            Ok("pipx") => return plain("pipx", &["run", "writ-sched"]),
            _ => {}
        }
        if on_path("writ") {
            return plain("writ", &[]);
        }
        match std::env::current_exe() {
            Ok(me) => plain(&me.to_string_lossy(), &[]),
            Err(_) => plain("writ", &[]),
        }
    }

    /// The program's arguments for `writ ARGS`.
    fn args(&self, args: &[String]) -> Vec<String> {
        self.prefix.iter().chain(args).cloned().collect()
    }

    /// `writ ARGS` as one shell command line (a hook's `command`).
    fn shell(&self, args: &[&str]) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.prefix.iter().map(String::as_str))
            .chain(args.iter().copied())
            .map(shell_word)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `word` as the shell reads it back: bare when it has nothing special.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@+,%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A JSON value built by writ, its keys in the order the client's
/// documentation shows them.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

fn s(text: &str) -> Json {
    Json::Str(text.to_string())
}

fn obj(members: &[(&str, Json)]) -> Json {
    Json::Obj(
        members
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

impl Json {
    fn value(&self) -> Value {
        match self {
            Json::Str(t) => Value::String(t.clone()),
            Json::Arr(items) => Value::Array(items.iter().map(Json::value).collect()),
            Json::Obj(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value()))
                    .collect(),
            ),
        }
    }

    /// On one line: `{"a": "b", "c": ["d"]}`.
    fn compact(&self) -> String {
        match self {
            Json::Str(t) => json_string(t),
            Json::Arr(items) => {
                let inner: Vec<String> = items.iter().map(Json::compact).collect();
                format!("[{}]", inner.join(", "))
            }
            Json::Obj(members) => {
                let inner: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("{}: {}", json_string(k), v.compact()))
                    .collect();
                format!("{{{}}}", inner.join(", "))
            }
        }
    }

    /// Over several lines, each indented by `indent` plus a level's `unit`;
    /// short values stay on one line.
    fn pretty(&self, indent: &str, unit: &str) -> String {
        let compact = self.compact();
        if indent.len() + compact.len() <= 100 {
            return compact;
        }
        let inner = format!("{indent}{unit}");
        let (open, close, parts): (char, char, Vec<String>) = match self {
            Json::Str(_) => return compact,
            Json::Arr(items) => (
                '[',
                ']',
                items.iter().map(|v| v.pretty(&inner, unit)).collect(),
            ),
            Json::Obj(members) => (
                '{',
                '}',
                members
                    .iter()
                    .map(|(k, v)| format!("{}: {}", json_string(k), v.pretty(&inner, unit)))
                    .collect(),
            ),
        };
        let mut out = String::new();
        out.push(open);
        for (i, part) in parts.iter().enumerate() {
            out.push_str(if i == 0 { "\n" } else { ",\n" });
            out.push_str(&inner);
            out.push_str(part);
        }
        let _ = write!(out, "\n{indent}{close}");
        out
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    // A string always serializes.
    serde_json::to_string(text).unwrap_or_default()
}

impl Client {
    /// The client's name in messages.
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

    /// The workspace as `writ mcp` is given it. A project file is shared
    /// (committed, used on other machines), so it names the workspace as
    /// the client resolves it there: Claude Code, Gemini CLI and opencode
    /// start a stdio server in the folder they were started in, the
    /// project's; VS Code and Cursor start it elsewhere and name the
    /// workspace with `${workspaceFolder}`. Codex's file is the user's
    /// own, for every project, so it keeps this machine's path.
    fn root_arg(self, root: &Path) -> String {
        match self {
            Client::Vscode | Client::Cursor => "${workspaceFolder}".to_string(),
            Client::Claude | Client::Gemini | Client::Opencode => ".".to_string(),
            Client::Codex => root.to_string_lossy().into_owned(),
        }
    }

    /// writ's entry in the client's JSON servers object.
    fn entry(self, launch: &Launch, root: &Path) -> Json {
        let args = launch.args(&["mcp".to_string(), self.root_arg(root)]);
        let list = |items: &[String]| Json::Arr(items.iter().map(|a| s(a)).collect());
        match self {
            Client::Opencode => {
                let mut command = vec![launch.program.clone()];
                command.extend(args);
                obj(&[("type", s("local")), ("command", list(&command))])
            }
            Client::Vscode => obj(&[
                ("type", s("stdio")),
                ("command", s(&launch.program)),
                ("args", list(&args)),
            ]),
            _ => obj(&[("command", s(&launch.program)), ("args", list(&args))]),
        }
    }

    /// The MCP snippet as the client's file has it.
    fn snippet(self, launch: &Launch, root: &Path) -> String {
        match self.section() {
            Some(section) => format!(
                "{{\n  {}: {{\n    \"writ\": {}\n  }}\n}}\n",
                json_string(section),
                self.entry(launch, root).compact()
            ),
            None => codex_table(launch, &self.root_arg(root)),
        }
    }

    /// The hooks the client gets beside its MCP entry (in `mcp_file`, the
    /// file the entry goes in), and where. Cursor and VS Code have no hooks
    /// writ speaks.
    fn hooks(self, launch: &Launch, root: &Path, mcp_file: &Path) -> Option<Hooks> {
        match self {
            Client::Claude => Some(Hooks::Settings {
                file: root.join(".claude").join("settings.json"),
                hook: "claude-code",
                settings: claude_settings(launch),
                what: "writ's hooks and its approval",
            }),
            // Gemini CLI reads its hooks from the file its servers are in.
            Client::Gemini => Some(Hooks::Settings {
                file: mcp_file.to_path_buf(),
                hook: "gemini",
                settings: gemini_settings(launch),
                what: "writ's hooks",
            }),
            Client::Codex => Some(Hooks::Codex {
                file: mcp_file.to_path_buf(),
                groups: codex_hooks(launch),
            }),
            Client::Opencode => Some(Hooks::Plugin {
                file: root.join(".opencode").join("plugin").join("writ.js"),
                text: opencode_plugin(launch),
            }),
            Client::Cursor | Client::Vscode => None,
        }
    }

    /// What the user must still do once the files are written (`hooks`:
    /// whether hooks were installed).
    fn still_to_do(self, root: &Path, hooks: bool) -> Vec<String> {
        let start = |program: &str| {
            format!(
                "start {program} in {} (the entry names the folder it starts in); a session \
                 already running picks writ up when restarted",
                root.display()
            )
        };
        match self {
            Client::Claude => vec![start("`claude`")],
            Client::Gemini => vec![
                start("`gemini`"),
                "Gemini CLI ignores a project's .gemini/settings.json (writ's server and \
                 hooks) until you trust the folder: answer \"Trust folder\" when it asks, or \
                 run /permissions in it; a headless `gemini -p` run needs \
                 GEMINI_CLI_TRUST_WORKSPACE=true in its environment"
                    .into(),
            ],
            Client::Opencode => vec![start("`opencode`")],
            Client::Codex => {
                let mut steps =
                    vec!["restart Codex: it reads config.toml when it starts".to_string()];
                if hooks {
                    steps.push(
                        "Codex runs a new hook only once you trust it: approve writ's hooks \
                         when Codex asks (a headless `codex exec` needs \
                         --dangerously-bypass-hook-trust)"
                            .into(),
                    );
                }
                steps
            }
            Client::Cursor => vec![
                "open the folder in Cursor and enable the \"writ\" server in its MCP settings \
                 when it asks"
                    .into(),
            ],
            Client::Vscode => vec![
                "open the folder in VS Code and start the \"writ\" server when it asks \
                 (MCP: List Servers)"
                    .into(),
            ],
        }
    }
}

/// Codex's `[mcp_servers.writ]` table. A JSON string literal is a valid
/// TOML basic string (the same escapes), so paths are written with it.
fn codex_table(launch: &Launch, root: &str) -> String {
    let args = launch.args(&["mcp".to_string(), root.to_string()]);
    let quoted: Vec<String> = args.iter().map(|a| json_string(a)).collect();
    format!(
        "[mcp_servers.writ]\ncommand = {}\nargs = [{}]\n",
        json_string(&launch.program),
        quoted.join(", ")
    )
}

/// The hooks a client gets, where, and in what form.
enum Hooks {
    /// A JSON settings file whose `hooks` (and, for Claude Code,
    /// `enabledMcpjsonServers`) writ's are merged into; `hook` is the
    /// `writ hook` client its commands run, `what` how messages name them.
    Settings {
        file: PathBuf,
        hook: &'static str,
        settings: Json,
        what: &'static str,
    },
    /// Codex's `config.toml`: one `[[hooks.EVENT]]` group per event.
    Codex {
        file: PathBuf,
        groups: Vec<CodexHook>,
    },
    /// opencode's plugin file, which calls `writ hook opencode`.
    Plugin { file: PathBuf, text: String },
}

impl Hooks {
    fn file(&self) -> &Path {
        match self {
            Hooks::Settings { file, .. }
            | Hooks::Codex { file, .. }
            | Hooks::Plugin { file, .. } => file,
        }
    }

    /// What goes in the file, as `writ config` without `--write` shows it.
    fn shown(&self) -> String {
        match self {
            Hooks::Settings { settings, .. } => settings.pretty("", "  "),
            Hooks::Codex { groups, .. } => groups
                .iter()
                .map(|g| g.table.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            Hooks::Plugin { .. } => {
                "writ's plugin, as `writ hook opencode --print-plugin` prints it".into()
            }
        }
    }
}

/// One of Codex's hook groups for writ: the event and its TOML tables.
struct CodexHook {
    event: &'static str,
    table: String,
}

/// The tools whose calls `writ hook codex` judges before they run:
/// `apply_patch`, Codex's one file-editing tool, and its shell (`Bash` to
/// hooks), whose command it sends through `writ run` (SPEC §17).
const CODEX_BEFORE: &str = "apply_patch|Bash";
/// The tools whose results the hook records: `apply_patch` (release and
/// history).
const CODEX_AFTER: &str = "apply_patch";

/// Codex's `PreToolUse`, `PostToolUse` and `UserPromptSubmit` hooks
/// (`writ hook codex`). A JSON string literal is a valid TOML basic string.
fn codex_hooks(launch: &Launch) -> Vec<CodexHook> {
    let command = json_string(&launch.shell(&["hook", "codex"]));
    let group = |event: &'static str, matcher: Option<&str>| {
        let matcher = matcher
            .map(|m| format!("matcher = {}\n", json_string(m)))
            .unwrap_or_default();
        CodexHook {
            event,
            table: format!(
                "[[hooks.{event}]]\n{matcher}[[hooks.{event}.hooks]]\ntype = \"command\"\ncommand = {command}\n"
            ),
        }
    };
    vec![
        group("PreToolUse", Some(CODEX_BEFORE)),
        group("PostToolUse", Some(CODEX_AFTER)),
        group("UserPromptSubmit", None),
    ]
}

/// The tools whose calls `writ hook gemini` judges before they run: the
/// writes, and `run_shell_command`, whose command it sends through `writ
/// run` (SPEC §17).
const GEMINI_BEFORE: &str = "write_file|replace|run_shell_command";
/// The tools whose results the hook records: the writes (release and
/// history) and `read_file` (what the model was shown is its read mark);
/// and writ's own MCP tools (`mcp_writ_*`), whose refusals it hands the
/// model as text.
const GEMINI_AFTER: &str = "write_file|replace|read_file|read_many_files|mcp_writ_.*";

/// Gemini CLI's `BeforeTool`, `AfterTool` and `BeforeAgent` hooks (`writ
/// hook gemini`).
fn gemini_settings(launch: &Launch) -> Json {
    let group = hook_group(launch, "gemini");
    obj(&[(
        "hooks",
        obj(&[
            ("BeforeTool", group(Some(GEMINI_BEFORE))),
            ("AfterTool", group(Some(GEMINI_AFTER))),
            ("BeforeAgent", group(None)),
        ]),
    )])
}

/// One group of a JSON settings file's hooks (Claude Code's and Gemini
/// CLI's share the shape): `[{"matcher"?, "hooks": [{"type": "command",
/// "command": "writ hook CLIENT"}]}]`, for a matcher or none.
fn hook_group(launch: &Launch, client: &str) -> impl Fn(Option<&str>) -> Json {
    let command = obj(&[
        ("type", s("command")),
        ("command", s(&launch.shell(&["hook", client]))),
    ]);
    move |matcher| {
        let mut members = Vec::new();
        if let Some(m) = matcher {
            members.push(("matcher".to_string(), s(m)));
        }
        members.push(("hooks".to_string(), Json::Arr(vec![command.clone()])));
        Json::Arr(vec![Json::Obj(members)])
    }
}

/// The first line of writ's opencode plugin: a file that starts with it is
/// writ's own, which a newer writ may replace.
const PLUGIN_HEADER: &str = "// writ's plugin for opencode";

/// writ's opencode plugin, running writ the way this one was run.
fn opencode_plugin(launch: &Launch) -> String {
    let argv: Vec<String> = std::iter::once(launch.program.as_str())
        .chain(launch.prefix.iter().map(String::as_str))
        .map(json_string)
        .collect();
    crate::hook_cli::opencode_plugin(&format!("[{}]", argv.join(", ")))
}

/// The tools whose calls `writ hook claude-code` judges before they run:
/// the built-in writes (`MultiEdit` for versions that still have it),
/// `Bash`, whose command it sends through `writ run` (SPEC §17), and writ's
/// own MCP tools, whose `agent` the hook fills per session and subagent.
const CLAUDE_BEFORE: &str = "Write|Edit|MultiEdit|NotebookEdit|Bash|mcp__writ__.*";
/// The tools whose results the hook records: the writes (release and
/// history) and `Read` (what the model was shown is its read mark).
const CLAUDE_AFTER: &str = "Write|Edit|MultiEdit|NotebookEdit|Read";
/// The writes whose failure must release the reservation taken before them.
const CLAUDE_FAILED: &str = "Write|Edit|MultiEdit|NotebookEdit";

/// Claude Code's `PreToolUse`, `PostToolUse`, `PostToolUseFailure`, `UserPromptSubmit` and
/// `SubagentStop` hooks (`writ hook claude-code`), and the project's MCP
/// server marked approved (`enabledMcpjsonServers`), so Claude Code starts
/// it without asking each user.
fn claude_settings(launch: &Launch) -> Json {
    let group = hook_group(launch, "claude-code");
    obj(&[
        (
            "hooks",
            obj(&[
                ("PreToolUse", group(Some(CLAUDE_BEFORE))),
                ("PostToolUse", group(Some(CLAUDE_AFTER))),
                ("PostToolUseFailure", group(Some(CLAUDE_FAILED))),
                ("UserPromptSubmit", group(None)),
                ("SubagentStop", group(None)),
            ]),
        ),
        ("enabledMcpjsonServers", Json::Arr(vec![s("writ")])),
    ])
}

/// What to add to a JSON file, and notes on what was left as it is.
#[derive(Debug, Default)]
struct Plan {
    edits: Vec<Edit>,
    notes: Vec<String>,
}

/// One addition to a JSON file; `at` names the container by its keys from
/// the top.
#[derive(Debug, Clone)]
enum Edit {
    /// `key: value` added to the object at `at`.
    Member {
        at: Vec<String>,
        key: String,
        value: Json,
    },
    /// `value` added first in the array at `at`.
    Element { at: Vec<String>, value: Json },
}

/// The object at `at` in `value`, or why it is not one.
fn object_at<'v>(value: &'v Value, at: &[&str]) -> Option<&'v Value> {
    at.iter().try_fold(value, |v, k| v.get(k))
}

/// The plan for a client's JSON settings: each of writ's hooks added under
/// its event unless a `writ hook HOOK` is there already, and (Claude Code)
/// "writ" added to `enabledMcpjsonServers`.
fn settings_plan(original: &Value, ours: &Json, hook: &str) -> Result<Plan, String> {
    let Value::Object(top) = original else {
        return Err("its top level is not a JSON object".into());
    };
    let mut plan = Plan::default();
    let Json::Obj(members) = ours else {
        return Err("writ's settings are not an object".into());
    };
    for (key, value) in members {
        match (key.as_str(), value, top.get(key)) {
            (_, _, None) => plan.edits.push(Edit::Member {
                at: vec![],
                key: key.clone(),
                value: value.clone(),
            }),
            ("enabledMcpjsonServers", _, Some(Value::Array(names))) => {
                if !names.iter().any(|n| n == "writ") {
                    plan.edits.push(Edit::Element {
                        at: vec![key.clone()],
                        value: s("writ"),
                    });
                }
                if object_at(original, &["disabledMcpjsonServers"])
                    .and_then(Value::as_array)
                    .is_some_and(|names| names.iter().any(|n| n == "writ"))
                {
                    plan.notes.push(
                        "\"writ\" is in disabledMcpjsonServers too, which writ leaves as it is: \
                         take it out there for Claude Code to start writ"
                            .into(),
                    );
                }
            }
            ("hooks", Json::Obj(events), Some(Value::Object(have))) => {
                for (event, groups) in events {
                    match have.get(event) {
                        None => plan.edits.push(Edit::Member {
                            at: vec!["hooks".into()],
                            key: event.clone(),
                            value: groups.clone(),
                        }),
                        Some(Value::Array(existing)) => {
                            let Json::Arr(groups) = groups else { continue };
                            for group in groups {
                                if let Some(kept) = writ_hook_in(existing, hook) {
                                    if kept != group.value() {
                                        plan.notes.push(format!(
                                            "kept the writ hook already under {event}: {kept}"
                                        ));
                                    }
                                    continue;
                                }
                                plan.edits.push(Edit::Element {
                                    at: vec!["hooks".into(), event.clone()],
                                    value: group.clone(),
                                });
                            }
                        }
                        Some(_) => return Err(format!("\"hooks\".\"{event}\" is not a list")),
                    }
                }
            }
            (_, _, Some(_)) => {
                return Err(format!("\"{key}\" is not what the client reads there"));
            }
        }
    }
    Ok(plan)
}

/// The group of `groups` that already runs `writ hook HOOK` (by any
/// command that ends so: an older install, another way to run writ).
fn writ_hook_in(groups: &[Value], hook: &str) -> Option<Value> {
    let ending = format!("hook {hook}");
    groups
        .iter()
        .find(|group| {
            group["hooks"].as_array().is_some_and(|hooks| {
                hooks.iter().any(|h| {
                    h["command"]
                        .as_str()
                        .is_some_and(|c| c.contains("writ") && c.trim_end().ends_with(&ending))
                })
            })
        })
        .cloned()
}

/// The plan for an MCP servers file: writ's entry under `section`.
fn servers_plan(original: &Value, section: &str, entry: &Json) -> Result<Plan, String> {
    let Value::Object(top) = original else {
        return Err("its top level is not a JSON object".into());
    };
    let mut plan = Plan::default();
    match top.get(section) {
        Some(Value::Object(servers)) => match servers.get("writ") {
            Some(found) if *found == entry.value() => {}
            Some(_) => {
                return Err(format!(
                    "it has another server named \"writ\" under \"{section}\" (an older \
                     `writ config` wrote one with --agent, which makes every session one \
                     agent: replace it with the entry below)"
                ));
            }
            None => plan.edits.push(Edit::Member {
                at: vec![section.to_string()],
                key: "writ".into(),
                value: entry.clone(),
            }),
        },
        Some(_) => return Err(format!("\"{section}\" is not a JSON object")),
        None => plan.edits.push(Edit::Member {
            at: vec![],
            key: section.to_string(),
            value: obj(&[("writ", entry.clone())]),
        }),
    }
    Ok(plan)
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
    let launch = Launch::detect();
    let file = match cmd.file {
        Some(file) => file,
        None => client.default_file(&root)?,
    };
    let snippet = client.snippet(&launch, &root);
    let hooks = client.hooks(&launch, &root, &file);
    if !cmd.write {
        print!("{snippet}");
        eprintln!("writ config: this goes in {}", file.display());
        if let Some(hooks) = &hooks {
            eprintln!(
                "writ config: and this in {}:\n{}",
                hooks.file().display(),
                hooks.shown()
            );
        }
        eprintln!(
            "writ config: `writ config {} --write` merges it there",
            client.name()
        );
        return Ok(());
    }
    // Every file is read and merged before any is written: a file writ
    // cannot edit safely leaves every file as it was.
    let existing = read_config(&file)?;
    let mcp = match client.section() {
        Some(section) => {
            let entry = client.entry(&launch, &root);
            merge_json(&file, existing.as_deref(), &snippet, |original| {
                servers_plan(original, section, &entry)
            })?
        }
        None => merge_codex(existing.as_deref(), &snippet).map_err(|why| {
            format!(
                "{}: {why}; left unchanged. Add this by hand:\n{snippet}",
                file.display()
            )
        })?,
    };
    let mut notes = Vec::new();
    let mut said = vec![if mcp.is_some() {
        format!("writ config: added writ to {}", file.display())
    } else {
        format!("writ config: {} already has writ", file.display())
    }];
    let mut writes: Vec<(PathBuf, String)> = Vec::new();
    let after_mcp = mcp.clone().or(existing);
    if let Some(text) = mcp {
        writes.push((file.clone(), text));
    }
    if let Some(hooks) = &hooks {
        // Gemini CLI's and Codex's hooks go in the file the server went in.
        let current = if hooks.file() == file {
            after_mcp
        } else {
            read_config(hooks.file())?
        };
        let (merged, noted) = install_hooks(hooks, current.as_deref())?;
        notes.extend(noted);
        let what = match hooks {
            Hooks::Settings { what, .. } => what,
            Hooks::Codex { .. } => "writ's hooks",
            Hooks::Plugin { .. } => "writ's plugin",
        };
        said.push(match merged {
            Some(text) => {
                let line = format!("writ config: added {what} to {}", hooks.file().display());
                match writes.iter_mut().find(|(f, _)| f == hooks.file()) {
                    Some((_, pending)) => *pending = text,
                    None => writes.push((hooks.file().to_path_buf(), text)),
                }
                line
            }
            None => format!("writ config: {} already has {what}", hooks.file().display()),
        });
    }
    for (file, text) in &writes {
        write_atomically(file, text)?;
    }
    for line in said {
        println!("{line}");
    }
    for note in notes {
        println!("writ config: note: {note}");
    }
    println!("still to do:");
    for step in client.still_to_do(&root, hooks.is_some()) {
        println!("  - {step}");
    }
    Ok(())
}

/// The text of `hooks`'s file (now `existing`) with writ's hooks added,
/// None when it has them already, with notes on what was left as it is;
/// refused as every config file is when writ cannot add to it safely.
fn install_hooks(
    hooks: &Hooks,
    existing: Option<&str>,
) -> Result<(Option<String>, Vec<String>), String> {
    match hooks {
        Hooks::Settings {
            file,
            hook,
            settings,
            ..
        } => {
            let whole = format!("{}\n", settings.pretty("", "  "));
            let mut said = Vec::new();
            let merged = merge_json(file, existing, &whole, |original| {
                let plan = settings_plan(original, settings, hook)?;
                said.clone_from(&plan.notes);
                Ok(plan)
            })?;
            Ok((merged, said))
        }
        Hooks::Codex { file, groups } => {
            let merged = merge_codex_hooks(existing, groups).map_err(|why| {
                let tables: Vec<&str> = groups.iter().map(|g| g.table.as_str()).collect();
                format!(
                    "{}: {why}; left unchanged. Add this by hand:\n{}",
                    file.display(),
                    tables.join("\n")
                )
            })?;
            Ok((merged, Vec::new()))
        }
        Hooks::Plugin { file, text } => match existing {
            Some(have) if have == text => Ok((None, Vec::new())),
            Some(have) if have.starts_with(PLUGIN_HEADER) => Ok((
                Some(text.clone()),
                vec![format!(
                    "{} was another writ's plugin; it is this writ's now",
                    file.display()
                )],
            )),
            Some(_) => Err(format!(
                "{}: not writ's plugin; left unchanged. Put writ's beside it by hand: \
                 `writ hook opencode --print-plugin > {}`",
                file.display(),
                file.with_file_name("writ-hook.js").display()
            )),
            None => Ok((Some(text.clone()), Vec::new())),
        },
    }
}

/// A user's TOML file, parsed; refused whole when it is not TOML, so writ
/// never appends to a file it cannot read.
fn user_toml(text: &str) -> Result<toml_edit::DocumentMut, String> {
    text.parse::<toml_edit::DocumentMut>().map_err(|e| {
        format!(
            "not valid TOML ({}), so writ will not add to it",
            e.to_string().trim()
        )
    })
}

/// Codex's file with each of writ's hook groups appended under its event,
/// unless that event already runs `writ hook codex`; None when nothing is
/// to add, or why it cannot be added safely. As for the server's table,
/// the file is parsed before and after, and the result must say what the
/// file said plus writ's groups.
fn merge_codex_hooks(
    existing: Option<&str>,
    groups: &[CodexHook],
) -> Result<Option<String>, String> {
    let text = existing.unwrap_or("");
    let parse = |text: &str| text.parse::<toml_edit::DocumentMut>();
    let before = user_toml(text)?;
    let have = toml_value(before.as_item());
    let mut expected = have.clone();
    let mut added = String::new();
    for group in groups {
        let event = group.event;
        match have.get("hooks") {
            None => {}
            Some(Value::Object(events)) => match events.get(event) {
                None => {}
                // A writ hook under the event already: kept, not added twice.
                Some(Value::Array(existing)) if writ_hook_in(existing, "codex").is_some() => {
                    continue;
                }
                Some(Value::Array(_)) => {}
                Some(_) => return Err(format!("its hooks.{event} is not a list of tables")),
            },
            Some(_) => return Err("its hooks is not a table".into()),
        }
        let ours =
            parse(&group.table).map_err(|e| format!("writ's own table is not TOML ({e})"))?;
        let ours = toml_value(ours.as_item())["hooks"][event][0].clone();
        if let Value::Object(top) = &mut expected {
            let events = top
                .entry("hooks")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Value::Object(events) = events {
                let list = events
                    .entry(event)
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = list {
                    list.push(ours);
                }
            }
        }
        added.push_str(&group.table);
        added.push('\n');
    }
    if added.is_empty() {
        return Ok(None);
    }
    let mut merged = text.to_string();
    if !merged.is_empty() && !merged.ends_with('\n') {
        merged.push('\n');
    }
    if !merged.is_empty() {
        merged.push('\n');
    }
    merged.push_str(added.trim_end());
    merged.push('\n');
    let after = parse(&merged).map_err(|_| {
        "its hooks cannot take another table after it (an inline table?)".to_string()
    })?;
    if toml_value(after.as_item()) != expected {
        return Err("writ's hooks would change what the file says".into());
    }
    Ok(Some(merged))
}

/// The JSON file `file` (now `existing`) with what `plan` says merged in
/// (`whole` when the file is missing or empty), None when it has it all
/// already; refused when it is not plain JSON or writ's additions would
/// not land cleanly.
fn merge_json(
    file: &Path,
    existing: Option<&str>,
    whole: &str,
    plan: impl FnOnce(&Value) -> Result<Plan, String>,
) -> Result<Option<String>, String> {
    let by_hand = |why: String| {
        format!(
            "{}: {why}; left unchanged. Add this by hand:\n{whole}",
            file.display()
        )
    };
    match existing {
        Some(text) if !text.trim().is_empty() => {
            let original: Value = serde_json::from_str(text).map_err(|e| {
                by_hand(format!("not plain JSON ({e}), so writ will not rewrite it"))
            })?;
            let plan = plan(&original).map_err(by_hand)?;
            if plan.edits.is_empty() {
                return Ok(None);
            }
            apply_edits(text, &original, &plan.edits)
                .map(Some)
                .map_err(by_hand)
        }
        _ => Ok(Some(whole.to_string())),
    }
}

/// The text of a config file, or None when there is none. Opened without
/// following a symlink and without blocking (a FIFO would hang an open
/// for reading), and refused unless it is a regular file: a link planted
/// in a repository must not pull an outside file's content into it, nor
/// have writ's edit land outside.
fn read_config(file: &Path) -> Result<Option<String>, String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read as _;
    let shown = |why: String| format!("{}: {why}; left unchanged", file.display());
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(shown(format!(
                "its folder {} is a symlink, and writ does not write through one",
                dir.display()
            )));
        }
    }
    let fd = match rustix::fs::open(
        file,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(shown(
                "it is a symlink, and writ does not write through one".into(),
            ));
        }
        Err(e) => return Err(shown(std::io::Error::from(e).to_string())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| shown(std::io::Error::from(e).to_string()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(shown("it is not a regular file".into()));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(16 << 20)
        .read_to_string(&mut text)
        .map_err(|e| shown(e.to_string()))?;
    Ok(Some(text))
}

/// `text` with `edits` made, each inserted into the original text so that
/// everything else (key order, spacing) stays as it was; the result is
/// parsed again and must equal `original` with the additions.
fn apply_edits(text: &str, original: &Value, edits: &[Edit]) -> Result<String, String> {
    let mut merged = text.to_string();
    let mut expected = original.clone();
    for edit in edits {
        let (at, key, value, open) = match edit {
            Edit::Member { at, key, value } => (at, Some(key.as_str()), value, b'{'),
            Edit::Element { at, value } => (at, None, value, b'['),
        };
        let start =
            value_offset(&merged, at).ok_or("writ could not find where to add its entry")?;
        if merged.as_bytes().get(start) != Some(&open) {
            return Err("writ could not find where to add its entry".into());
        }
        let addition = element_text(&merged, start + 1, key, value);
        merged.insert_str(start + 1, &addition);
        let container = at
            .iter()
            .try_fold(&mut expected, |v, k| v.get_mut(k))
            .ok_or("writ's entry has no place in the file")?;
        match (container, key) {
            (Value::Object(members), Some(key)) => {
                members.insert(key.to_string(), value.value());
            }
            (Value::Array(items), None) => items.insert(0, value.value()),
            _ => return Err("writ's entry has no place in the file".into()),
        }
    }
    // The proof that nothing else changed.
    let check: Value =
        serde_json::from_str(&merged).map_err(|e| format!("writ's edit would not parse ({e})"))?;
    if check != expected {
        return Err("writ's edit would change other entries".into());
    }
    Ok(merged)
}

/// `"key": value,` (or `value,` in an array) to insert at `at`, just after
/// a container's opening bracket, indented like the item that follows it;
/// no comma when the container is empty.
fn element_text(text: &str, at: usize, key: Option<&str>, value: &Json) -> String {
    let rest = &text[at..];
    let gap_len = rest.len() - rest.trim_start().len();
    let gap = &rest[..gap_len];
    let empty = rest.trim_start().starts_with(['}', ']']);
    let mut out = String::new();
    let mut indent = "";
    match gap.rfind('\n') {
        // The next item is on its own line: put ours on a line before it.
        Some(newline) if !empty => {
            indent = &gap[newline + 1..];
            out.push('\n');
            out.push_str(indent);
        }
        _ => {}
    }
    if let Some(key) = key {
        let _ = write!(out, "{}: ", json_string(key));
    }
    out.push_str(&value.pretty(indent, "  "));
    if !empty {
        out.push(',');
        if !gap.contains('\n') {
            out.push(' ');
        }
    }
    out
}

/// The offset where the value at `path` (object keys from the top) starts
/// in `text`, which is valid JSON.
fn value_offset(text: &str, path: &[String]) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = skip_space(bytes, 0);
    for key in path {
        i = member_value_offset(text, i, key)?;
    }
    Some(i)
}

/// The offset where the value of member `key` of the object starting at
/// `start` in `text` starts.
fn member_value_offset(text: &str, start: usize, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = start;
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
            return Some(i);
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

/// A TOML value as JSON, to compare what two parses of a file say.
fn toml_value(item: &toml_edit::Item) -> Value {
    use toml_edit::{Item, Value as T};
    fn value(v: &T) -> Value {
        match v {
            T::String(s) => Value::String(s.value().clone()),
            T::Integer(i) => Value::from(*i.value()),
            T::Float(f) => Value::from(*f.value()),
            T::Boolean(b) => Value::Bool(*b.value()),
            T::Datetime(d) => Value::String(format!("datetime {}", d.value())),
            T::Array(a) => Value::Array(a.iter().map(value).collect()),
            T::InlineTable(t) => {
                Value::Object(t.iter().map(|(k, v)| (k.to_string(), value(v))).collect())
            }
        }
    }
    match item {
        Item::None => Value::Null,
        Item::Value(v) => value(v),
        Item::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), toml_value(v)))
                .collect(),
        ),
        Item::ArrayOfTables(a) => Value::Array(
            a.iter()
                .map(|t| toml_value(&toml_edit::Item::Table(t.clone())))
                .collect(),
        ),
    }
}

/// Codex's file with `table` appended, None when it has that table
/// already, or why it cannot be added safely. The file is parsed with a
/// real TOML parser before (invalid: refused) and after: the result must
/// say exactly what the file said plus `mcp_servers.writ`. Whatever form
/// the file names `mcp_servers.writ` in (quoted, escaped, dotted, inline),
/// the parser sees it.
fn merge_codex(existing: Option<&str>, table: &str) -> Result<Option<String>, String> {
    let text = existing.unwrap_or("");
    let parse = |text: &str| text.parse::<toml_edit::DocumentMut>();
    let before = user_toml(text)?;
    let ours = parse(table).map_err(|e| format!("writ's own table is not TOML ({e})"))?;
    let ours = toml_value(ours.as_item());
    let want = &ours["mcp_servers"]["writ"];
    let have = toml_value(before.as_item());
    match have.get("mcp_servers") {
        None => {}
        Some(Value::Object(servers)) => match servers.get("writ") {
            Some(found) if found == want => return Ok(None),
            Some(_) => {
                return Err(
                    "it has another mcp_servers.writ (an older `writ config` wrote one with \
                     --agent, which makes every session one agent: replace it with the table \
                     below)"
                        .into(),
                );
            }
            None => {}
        },
        Some(_) => return Err("its mcp_servers is not a table".into()),
    }
    let mut merged = text.to_string();
    if !merged.is_empty() && !merged.ends_with('\n') {
        merged.push('\n');
    }
    if !merged.is_empty() {
        merged.push('\n');
    }
    merged.push_str(table);
    let after = parse(&merged).map_err(|_| {
        "its mcp_servers cannot take another table after it (an inline table?)".to_string()
    })?;
    let mut expected = have;
    if let Value::Object(top) = &mut expected {
        let servers = top
            .entry("mcp_servers")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(servers) = servers {
            servers.insert("writ".into(), want.clone());
        }
    }
    if toml_value(after.as_item()) != expected {
        return Err("writ's table would change what the file says".into());
    }
    Ok(Some(merged))
}

/// Replaces `file` with `text` by writ's one atomic write (a temporary
/// file in its folder, created `O_EXCL|O_NOFOLLOW`, synced, renamed over),
/// keeping the old file's permissions (0644 for a new file: `.mcp.json`
/// and the other project files are meant to be committed and read by
/// every collaborator, and none holds a secret): a crash leaves
/// the old file or the new one, and a link planted at the temporary name
/// cannot redirect it.
fn write_atomically(file: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mode = match std::fs::symlink_metadata(file) {
        Ok(meta) if meta.is_file() => meta.permissions().mode(),
        _ => 0o644,
    };
    writ::write_atomic(file, text.as_bytes(), mode, true).map_err(|e| e.to_string())
}

/// Whether `command` is an executable file in a folder of `PATH`.
fn on_path(command: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(command))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Json {
        obj(&[
            ("command", s("writ")),
            ("args", Json::Arr(vec![s("mcp"), s(".")])),
        ])
    }

    const ENTRY: &str = r#"{"command": "writ", "args": ["mcp", "."]}"#;

    fn merge(text: &str) -> Result<Option<String>, String> {
        let original: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let plan = servers_plan(&original, "mcpServers", &entry())?;
        if plan.edits.is_empty() {
            return Ok(None);
        }
        apply_edits(text, &original, &plan.edits).map(Some)
    }

    fn launch() -> Launch {
        Launch {
            program: "writ".into(),
            prefix: vec![],
        }
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
            assert_eq!(
                value["mcpServers"]["writ"],
                entry().value(),
                "{text} -> {merged}"
            );
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
        assert_eq!(value["mcpServers"]["writ"], entry().value());
        assert_eq!(value["a\"mcpServers"]["}"], "{");
    }

    #[test]
    fn claude_hooks_are_added_beside_what_is_there_and_never_twice() {
        let ours = claude_settings(&launch());
        let text = "{\n  \"hooks\": {\n    \"PreToolUse\": [\n      {\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"lint\"}]}\n    ]\n  },\n  \"enabledMcpjsonServers\": [\"github\"]\n}\n";
        let original: Value = serde_json::from_str(text).unwrap();
        let plan = settings_plan(&original, &ours, "claude-code").unwrap();
        let merged = apply_edits(text, &original, &plan.edits).unwrap();
        let value: Value = serde_json::from_str(&merged).unwrap();
        let pre = value["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2, "{merged}");
        assert!(pre.iter().any(|g| g["matcher"] == "Bash"), "{merged}");
        assert!(
            pre.iter().any(|g| g["matcher"] == CLAUDE_BEFORE),
            "{merged}"
        );
        for event in [
            "PostToolUse",
            "PostToolUseFailure",
            "UserPromptSubmit",
            "SubagentStop",
        ] {
            assert_eq!(
                value["hooks"][event][0]["hooks"][0]["command"], "writ hook claude-code",
                "{event}: {merged}"
            );
        }
        assert_eq!(
            value["enabledMcpjsonServers"],
            serde_json::json!(["writ", "github"])
        );
        // Again: nothing to add.
        let again: Value = serde_json::from_str(&merged).unwrap();
        assert!(
            settings_plan(&again, &ours, "claude-code")
                .unwrap()
                .edits
                .is_empty()
        );
    }

    #[test]
    fn a_hook_command_is_quoted_for_the_shell() {
        let launch = Launch {
            program: "/opt/my tools/writ".into(),
            prefix: vec![],
        };
        assert_eq!(
            launch.shell(&["hook", "claude-code"]),
            "'/opt/my tools/writ' hook claude-code"
        );
        let launch = Launch {
            program: "npx".into(),
            prefix: vec!["-y".into(), "writ-sched".into()],
        };
        assert_eq!(
            launch.shell(&["hook", "claude-code"]),
            "npx -y writ-sched hook claude-code"
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }

    #[test]
    fn codex_refuses_a_table_it_cannot_see_whole_or_a_file_that_is_not_toml() {
        let table = codex_table(&launch(), "/r");
        for text in [
            "[mcp_servers.writ]\ncommand = \"other\"\n",
            "[mcp_servers . \"writ\"]\n",
            "[mcp_servers.\"\\u0077rit\"]\ncommand = \"other\"\n",
            "[mcp_servers]\nwrit = { command = \"x\" }\n",
            "mcp_servers = { writ = { command = \"x\" } }\n",
            "mcp_servers = { other = { command = \"x\" } }\n",
            "mcp_servers.writ.command = \"x\"\n",
            "model = \"unterminated\n",
            "[a]\nx = 1\n[a]\nx = 2\n",
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
        // What a line scan mistakes for tables is read as the strings it is.
        let tricky = "notes = \"\"\"\n[mcp_servers.writ]\n\"\"\"\nraw = '''[x]'''\nt = { a = 1 }\n";
        let merged = merge_codex(Some(tricky), &table).unwrap().unwrap();
        let doc: toml_edit::DocumentMut = merged.parse().unwrap();
        assert_eq!(doc["mcp_servers"]["writ"]["args"][1].as_str(), Some("/r"));
        assert!(merged.starts_with(tricky));
    }
}
