//! `writ config CLIENT [--write]`: the snippet of each MCP client is the
//! stdio bridge with no shared agent name, run the way the user runs writ,
//! naming the workspace relatively in files meant to be shared; a merge
//! adds writ's entries without changing anything the client's files
//! already have, and says what the user must still do. A config file that
//! is a symlink or a FIFO is refused, untouched, at once.

use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A folder holding a `writ` (this build's), for a PATH on which `writ` is
/// found.
fn path_with_writ() -> (tempfile::TempDir, PathBuf) {
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_writ"), bin.path().join("writ")).unwrap();
    let path = bin.path().to_path_buf();
    (bin, path)
}

/// `writ config ARGS` in `dir`, with `writ` on PATH.
fn writ_config(dir: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let (_bin, path) = path_with_writ();
    writ_config_on(dir, args, envs, &path)
}

/// `writ config ARGS` in `dir` with PATH set to `path`.
fn writ_config_on(dir: &Path, args: &[&str], envs: &[(&str, &Path)], path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("config")
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("WRIT_LAUNCHER")
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("writ config could not start: {e}"))
}

fn text(output: &[u8]) -> String {
    String::from_utf8_lossy(output).into_owned()
}

/// The `writ mcp` command line a snippet's entry starts.
fn command_line(client: &str, entry: &Value) -> Vec<String> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("{client}: not a list: {v}"))
            .iter()
            .map(|s| s.as_str().unwrap_or_default().to_string())
            .collect()
    };
    if client == "opencode" {
        strings(&entry["command"])
    } else {
        let mut line = vec![entry["command"].as_str().unwrap_or_default().to_string()];
        line.extend(strings(&entry["args"]));
        line
    }
}

#[test]
fn every_client_gets_the_stdio_bridge_with_no_port_no_token_and_no_shared_agent() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let root = root.to_string_lossy();
    for (client, section) in [
        ("claude", "mcpServers"),
        ("gemini", "mcpServers"),
        ("cursor", "mcpServers"),
        ("opencode", "mcp"),
        ("vscode", "servers"),
    ] {
        let out = writ_config(dir.path(), &[client], &[]);
        assert!(out.status.success(), "{client}: {}", text(&out.stderr));
        let snippet: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{client}: not JSON ({e}): {}", text(&out.stdout)));
        let line = command_line(client, &snippet[section]["writ"]);
        // A shared file names the workspace as the client resolves it on
        // any machine: never this one's path.
        let folder = if matches!(client, "vscode" | "cursor") {
            "${workspaceFolder}"
        } else {
            "."
        };
        assert_eq!(line, ["writ", "mcp", folder], "{client}");
        let printed = text(&out.stdout);
        assert!(
            !printed.contains("http")
                && !printed.contains("token")
                && !printed.contains("--agent")
                && !printed.contains(&*root),
            "{client}: {printed}"
        );
    }
    let out = writ_config(dir.path(), &["codex"], &[]);
    assert!(out.status.success(), "codex: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("[mcp_servers.writ]\ncommand = \"writ\"\nargs = [\"mcp\", \"{root}\"]\n")
    );
}

#[test]
fn write_adds_writ_and_keeps_every_byte_already_there() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".mcp.json");
    let before = "{\n    \"mcpServers\": {\n        \"github\": {\"command\": \"gh-mcp\", \"env\": {\"A\": \"1\"}}\n    },\n    \"zeta\": [1, 2]\n}\n";
    std::fs::write(&file, before).unwrap();

    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = std::fs::read_to_string(&file).unwrap();
    let merged: Value = serde_json::from_str(&after).unwrap();
    assert_eq!(
        command_line("claude", &merged["mcpServers"]["writ"])[..2],
        ["writ", "mcp"]
    );
    // Only lines were added: every original line is there, in order.
    let mut added = after.lines().filter(|l| !before.contains(*l));
    assert!(
        added.next().is_some_and(|l| l.contains("\"writ\"")),
        "{after}"
    );
    assert_eq!(added.next(), None, "{after}");
    let kept: Vec<&str> = after.lines().filter(|l| before.contains(*l)).collect();
    assert_eq!(kept, before.lines().collect::<Vec<_>>());

    // Again: nothing to do, and the file is untouched.
    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("already has writ"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
}

/// The merged file keeps its permissions: the atomic write (a new file
/// renamed over the old one) gives the new content the old file's mode.
#[test]
fn write_keeps_the_files_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".mcp.json");
    std::fs::write(&file, "{}\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();

    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(after["mcpServers"]["writ"].is_object(), "{after}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "the merged file's mode is {mode:04o}");
}

/// A config file writ creates is one a project commits and every
/// collaborator's client reads: readable by all, like any file an editor
/// makes, and writable by its owner only.
#[test]
fn a_new_config_file_is_readable_by_everyone() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for made in [".mcp.json", ".claude/settings.json"] {
        let mode = std::fs::metadata(dir.path().join(made))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o644, "{made} was made {mode:04o}");
    }
}

#[test]
fn a_file_writ_cannot_edit_safely_is_left_exactly_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    for (client, path, content) in [
        // Comments (VS Code reads JSON with comments; writ does not).
        (
            "vscode",
            ".vscode/mcp.json",
            "{\n  // mine\n  \"servers\": {}\n}\n",
        ),
        // Someone else's server already called writ.
        (
            "cursor",
            ".cursor/mcp.json",
            "{\"mcpServers\": {\"writ\": {\"command\": \"/opt/other\"}}}",
        ),
        ("gemini", ".gemini/settings.json", "[1, 2]"),
        ("opencode", "opencode.json", "{\"mcp\": \"not an object\"}"),
    ] {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, content).unwrap();
        let out = writ_config(dir.path(), &[client, "--write"], &[]);
        assert!(!out.status.success(), "{client}: {}", text(&out.stdout));
        let said = text(&out.stderr);
        assert!(
            said.contains("left unchanged") && said.contains("\"writ\""),
            "{client}: {said}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), content, "{client}");
    }
}

#[test]
fn a_missing_file_and_its_folder_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let out = writ_config(dir.path(), &["vscode", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".vscode/mcp.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["servers"]["writ"]["type"], "stdio");
    assert_eq!(
        command_line("vscode", &written["servers"]["writ"]),
        ["writ", "mcp", "${workspaceFolder}"]
    );
}

#[test]
fn codex_gets_a_table_appended_to_its_own_config() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let file = home.join("config.toml");
    let before = "model = \"o4\"\n\n[mcp_servers.github]\ncommand = \"gh-mcp\"";
    std::fs::write(&file, before).unwrap();
    let envs = [("CODEX_HOME", home.as_path())];

    let out = writ_config(dir.path(), &["codex", "--write"], &envs);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(after.starts_with(before), "{after}");
    assert!(
        after[before.len()..]
            .starts_with("\n\n[mcp_servers.writ]\ncommand = \"writ\"\nargs = [\"mcp\", "),
        "{after}"
    );

    let out = writ_config(dir.path(), &["codex", "--write"], &envs);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);

    // A writ table of another hand is not appended to, whatever form
    // names it; nor is a file that is not TOML.
    for other in [
        "[mcp_servers.writ]\ncommand = \"/opt/writ\"\n",
        "[mcp_servers.\"\\u0077rit\"]\ncommand = \"/opt/writ\"\n",
        "doc = \"\"\"\n[x]\n\"\"\"\nmcp_servers = { other = { command = \"o\" } }\n",
        "model = \"o4\n",
    ] {
        std::fs::write(&file, other).unwrap();
        let out = writ_config(dir.path(), &["codex", "--write"], &envs);
        assert!(!out.status.success(), "{other}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains("left unchanged"), "{other}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), other);
    }
}

#[test]
fn file_names_another_config_to_merge_into() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("user-settings.json");
    std::fs::write(&file, "{\"theme\": \"dark\"}").unwrap();
    let out = writ_config(
        dir.path(),
        &["gemini", "--write", "--file", file.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["theme"], "dark");
    assert_eq!(written["mcpServers"]["writ"]["command"], "writ");
    assert!(!dir.path().join(".gemini").exists());
}

#[test]
fn the_command_is_the_way_writ_was_run_when_writ_is_not_on_path() {
    let dir = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    // uvx and npx put their temporary `writ` on PATH while it runs: the
    // launcher wins over it.
    let (_bin, with_writ) = path_with_writ();
    for (launcher, line) in [
        ("uvx", vec!["uvx", "writ-sched", "mcp", "."]),
        ("npx", vec!["npx", "-y", "writ-sched", "mcp", "."]),
        ("pipx", vec!["pipx", "run", "writ-sched", "mcp", "."]),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_writ"))
            .args(["config", "claude"])
            .current_dir(dir.path())
            .env("PATH", &with_writ)
            .env("WRIT_LAUNCHER", launcher)
            .output()
            .unwrap();
        assert!(out.status.success(), "{launcher}: {}", text(&out.stderr));
        let snippet: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(command_line("claude", &snippet["mcpServers"]["writ"]), line);
        // The hooks run writ the same way.
        let said = text(&out.stderr);
        let hook = format!("{} hook claude-code", line[..line.len() - 2].join(" "));
        assert!(said.contains(&hook), "{launcher}: {said}");
    }
    // Run some other way: this binary, by its absolute path.
    let out = writ_config_on(dir.path(), &["opencode"], &[], empty.path());
    let snippet: Value = serde_json::from_slice(&out.stdout).unwrap();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_writ")).unwrap();
    assert_eq!(
        command_line("opencode", &snippet["mcp"]["writ"]),
        [exe.to_string_lossy().as_ref(), "mcp", "."]
    );
}

#[test]
fn claude_gets_its_hooks_and_the_server_approved_beside_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let before = "{\n  \"model\": \"opus\",\n  \"hooks\": {\n    \"PreToolUse\": [\n      {\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"lint\"}]}\n    ]\n  }\n}\n";
    std::fs::write(&settings, before).unwrap();
    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(".mcp.json") && said.contains("settings.json"),
        "{said}"
    );
    assert!(
        said.contains("still to do:") && said.contains("claude"),
        "{said}"
    );
    let after = std::fs::read_to_string(&settings).unwrap();
    // Only added: every original line is still there, in order.
    let mut lines = after.lines();
    for line in before.lines() {
        assert!(lines.any(|l| l == line), "lost {line:?}: {after}");
    }
    let value: Value = serde_json::from_str(&after).unwrap();
    assert_eq!(value["model"], "opus");
    assert_eq!(value["enabledMcpjsonServers"], serde_json::json!(["writ"]));
    let hook = serde_json::json!([{"type": "command", "command": "writ hook claude-code"}]);
    let pre = value["hooks"]["PreToolUse"].as_array().unwrap();
    assert!(pre.iter().any(|g| g["matcher"] == "Bash"), "{after}");
    assert!(
        pre.iter().any(
            |g| g["matcher"] == "Write|Edit|MultiEdit|NotebookEdit|Bash|mcp__writ__.*"
                && g["hooks"] == hook
        ),
        "{after}"
    );
    assert_eq!(
        value["hooks"]["PostToolUse"][0]["matcher"],
        "Write|Edit|MultiEdit|NotebookEdit|Read"
    );
    assert_eq!(
        value["hooks"]["PostToolUseFailure"][0]["matcher"],
        "Write|Edit|MultiEdit|NotebookEdit"
    );
    for event in ["UserPromptSubmit", "SubagentStop"] {
        let group = &value["hooks"][event][0];
        assert_eq!(group["hooks"], hook, "{event}");
        assert!(group.get("matcher").is_none(), "{event}: {group}");
    }
    // Again: nothing is added twice, and neither file changes.
    let mcp = std::fs::read_to_string(dir.path().join(".mcp.json")).unwrap();
    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), after);
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".mcp.json")).unwrap(),
        mcp
    );
}

#[test]
fn gemini_is_told_to_trust_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = writ_config(dir.path(), &["gemini", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("still to do:") && said.contains("trust"),
        "{said}"
    );
}

#[test]
fn a_symlinked_config_file_or_folder_is_refused_and_nothing_outside_changes() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.json");
    std::fs::write(&secret, "{\"token\": \"s3cret\"}").unwrap();
    let link = dir.path().join(".mcp.json");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let out = writ_config(dir.path(), &["claude", "--write"], &[]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("symlink"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "{\"token\": \"s3cret\"}"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A linked folder: the edit would land outside.
    std::os::unix::fs::symlink(outside.path(), dir.path().join(".vscode")).unwrap();
    let out = writ_config(dir.path(), &["vscode", "--write"], &[]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(!outside.path().join("mcp.json").exists());
}

#[test]
fn a_fifo_config_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("opencode.json");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let (_bin, path) = path_with_writ();
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["config", "opencode", "--write"])
        .current_dir(dir.path())
        .env("PATH", &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // No writer ever opens the FIFO: a blocking open would wait forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("writ config hung on a FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert!(!status.success());
    assert!(
        text(&out.stderr).contains("not a regular file"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

/// The TOML file `file`, parsed.
fn toml_of(file: &Path) -> toml_edit::DocumentMut {
    std::fs::read_to_string(file)
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{}: not TOML: {e}", file.display()))
}

/// The commands of the hook groups under `event` in a Codex config.
fn codex_commands(doc: &toml_edit::DocumentMut, event: &str) -> Vec<(String, String)> {
    let groups = doc["hooks"][event]
        .as_array_of_tables()
        .unwrap_or_else(|| panic!("hooks.{event} is not a list of tables"));
    groups
        .iter()
        .flat_map(|g| {
            let matcher = g
                .get("matcher")
                .and_then(|m| m.as_str())
                .unwrap_or_default()
                .to_string();
            g["hooks"]
                .as_array_of_tables()
                .into_iter()
                .flatten()
                .map(move |h| {
                    (
                        matcher.clone(),
                        h["command"].as_str().unwrap_or_default().to_string(),
                    )
                })
        })
        .collect()
}

#[test]
fn codex_gets_its_hooks_beside_its_server_and_never_twice() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let file = home.join("config.toml");
    let before = "model = \"o4\"\n\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"lint\"\n";
    std::fs::write(&file, before).unwrap();
    let envs = [("CODEX_HOME", home.as_path())];

    let out = writ_config(dir.path(), &["codex", "--write"], &envs);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("added writ's hooks") && said.contains("trust"),
        "{said}"
    );
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(after.starts_with(before), "{after}");
    let doc = toml_of(&file);
    assert_eq!(doc["mcp_servers"]["writ"]["command"].as_str(), Some("writ"));
    let hook = "writ hook codex".to_string();
    assert_eq!(
        codex_commands(&doc, "PreToolUse"),
        [
            ("Bash".to_string(), "lint".to_string()),
            ("apply_patch|Bash".to_string(), hook.clone())
        ]
    );
    assert_eq!(
        codex_commands(&doc, "PostToolUse"),
        [("apply_patch".to_string(), hook.clone())]
    );
    assert_eq!(
        codex_commands(&doc, "UserPromptSubmit"),
        [(String::new(), hook)]
    );

    // Again: nothing is added twice.
    let out = writ_config(dir.path(), &["codex", "--write"], &envs);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("already has writ's hooks"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
}

#[test]
fn a_codex_file_writ_cannot_add_hooks_to_is_left_whole_server_and_all() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let file = home.join("config.toml");
    let envs = [("CODEX_HOME", home.as_path())];
    for before in [
        // Inline tables take no [[hooks.X]] after them.
        "model = \"o4\"\nhooks = { PreToolUse = [] }\n",
        "[hooks]\nPreToolUse = \"not a list\"\n",
        "hooks = 3\n",
    ] {
        std::fs::write(&file, before).unwrap();
        let out = writ_config(dir.path(), &["codex", "--write"], &envs);
        assert!(!out.status.success(), "{before}: {}", text(&out.stdout));
        let said = text(&out.stderr);
        assert!(
            said.contains("left unchanged") && said.contains("hook codex"),
            "{before}: {said}"
        );
        // Not even the server's table went in.
        assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    }
}

#[test]
fn gemini_gets_its_hooks_in_the_file_its_server_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".gemini/settings.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let before = "{\n  \"theme\": \"dark\",\n  \"hooks\": {\n    \"BeforeTool\": [\n      {\"matcher\": \"run_shell_command\", \"hooks\": [{\"type\": \"command\", \"command\": \"audit\"}]}\n    ]\n  }\n}\n";
    std::fs::write(&file, before).unwrap();
    let out = writ_config(dir.path(), &["gemini", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = std::fs::read_to_string(&file).unwrap();
    let mut lines = after.lines();
    for line in before.lines() {
        assert!(lines.any(|l| l == line), "lost {line:?}: {after}");
    }
    let value: Value = serde_json::from_str(&after).unwrap();
    assert_eq!(value["theme"], "dark");
    assert_eq!(
        command_line("gemini", &value["mcpServers"]["writ"]),
        ["writ", "mcp", "."]
    );
    let hook = serde_json::json!([{"type": "command", "command": "writ hook gemini"}]);
    let before_tool = value["hooks"]["BeforeTool"].as_array().unwrap();
    assert_eq!(before_tool.len(), 2, "{after}");
    assert!(
        before_tool
            .iter()
            .any(|g| g["matcher"] == "run_shell_command")
    );
    assert!(
        before_tool
            .iter()
            .any(|g| g["matcher"] == "write_file|replace|run_shell_command" && g["hooks"] == hook),
        "{after}"
    );
    assert_eq!(
        value["hooks"]["AfterTool"],
        serde_json::json!([{"matcher": "write_file|replace|read_file|read_many_files|mcp_writ_.*", "hooks": hook}])
    );
    assert_eq!(
        value["hooks"]["BeforeAgent"],
        serde_json::json!([{"hooks": hook}])
    );
    let out = writ_config(dir.path(), &["gemini", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("already has writ's hooks"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
}

/// `writ hook opencode --print-plugin`.
fn printed_plugin() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["hook", "opencode", "--print-plugin"])
        .output()
        .unwrap();
    assert!(out.status.success());
    text(&out.stdout)
}

#[test]
fn opencode_gets_writs_plugin_beside_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join(".opencode/plugin/writ.js");
    let out = writ_config(dir.path(), &["opencode", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("added writ's plugin"));
    let written = std::fs::read_to_string(&plugin).unwrap();
    assert_eq!(written, printed_plugin());
    assert!(written.contains("const WRIT = [\"writ\"];"));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("opencode.json")).unwrap())
            .unwrap();
    assert_eq!(
        command_line("opencode", &config["mcp"]["writ"]),
        ["writ", "mcp", "."]
    );

    let out = writ_config(dir.path(), &["opencode", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("already has writ's plugin"));

    // An older writ's plugin is writ's own: replaced by this one's.
    std::fs::write(&plugin, "// writ's plugin for opencode, an old one\n").unwrap();
    let out = writ_config(dir.path(), &["opencode", "--write"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&plugin).unwrap(), written);

    // Someone else's file of that name is not; and then nothing is written.
    std::fs::remove_file(dir.path().join("opencode.json")).unwrap();
    std::fs::write(&plugin, "export const Mine = async () => ({});\n").unwrap();
    let out = writ_config(dir.path(), &["opencode", "--write"], &[]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("--print-plugin"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&plugin).unwrap(),
        "export const Mine = async () => ({});\n"
    );
    assert!(!dir.path().join("opencode.json").exists());
}

#[test]
fn hooks_and_the_plugin_run_writ_the_way_it_was_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_bin, with_writ) = path_with_writ();
    let run = |args: &[&str], home: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_writ"))
            .arg("config")
            .args(args)
            .current_dir(dir.path())
            .env("PATH", &with_writ)
            .env("CODEX_HOME", home)
            .env("WRIT_LAUNCHER", "npx")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    };
    let home = dir.path().join("codex-home");
    run(&["codex", "--write"], &home);
    let doc = toml_of(&home.join("config.toml"));
    assert_eq!(
        codex_commands(&doc, "PostToolUse")[0].1,
        "npx -y writ-sched hook codex"
    );
    run(&["gemini", "--write"], &home);
    let gemini: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        gemini["hooks"]["AfterTool"][0]["hooks"][0]["command"],
        "npx -y writ-sched hook gemini"
    );
    run(&["opencode", "--write"], &home);
    let plugin = std::fs::read_to_string(dir.path().join(".opencode/plugin/writ.js")).unwrap();
    assert!(
        plugin.contains("const WRIT = [\"npx\", \"-y\", \"writ-sched\"];"),
        "{plugin}"
    );
}

#[test]
fn a_symlinked_plugin_or_plugin_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("elsewhere.js");
    std::fs::write(&target, "// mine\n").unwrap();
    let folder = dir.path().join(".opencode/plugin");
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(&target, folder.join("writ.js")).unwrap();
    let out = writ_config(dir.path(), &["opencode", "--write"], &[]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("symlink"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "// mine\n");
    assert!(!dir.path().join("opencode.json").exists());

    std::fs::remove_dir_all(dir.path().join(".opencode")).unwrap();
    std::fs::create_dir_all(dir.path().join(".opencode")).unwrap();
    std::os::unix::fs::symlink(outside.path(), &folder).unwrap();
    let out = writ_config(dir.path(), &["opencode", "--write"], &[]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(!outside.path().join("writ.js").exists());
}
