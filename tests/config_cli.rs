//! `writ config CLIENT [--write]`: the snippet of each MCP client is the
//! stdio bridge, and a merge adds writ's entry without changing anything
//! the client's file already has.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn writ_config(dir: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("config")
        .args(args)
        .current_dir(dir)
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
fn every_client_gets_the_stdio_bridge_with_no_port_and_no_token() {
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
        let folder = if client == "vscode" {
            "${workspaceFolder}"
        } else {
            &*root
        };
        assert_eq!(line, ["writ", "mcp", folder, "--agent", client], "{client}");
        let printed = text(&out.stdout);
        assert!(
            !printed.contains("http") && !printed.contains("token"),
            "{client}: {printed}"
        );
    }
    let out = writ_config(dir.path(), &["codex"], &[]);
    assert!(out.status.success(), "codex: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "[mcp_servers.writ]\ncommand = \"writ\"\nargs = [\"mcp\", \"{root}\", \"--agent\", \"codex\"]\n"
        )
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
        ["writ", "mcp", "${workspaceFolder}", "--agent", "vscode"]
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

    // A writ table of another hand is not appended to.
    let other = "[mcp_servers.writ]\ncommand = \"/opt/writ\"\n";
    std::fs::write(&file, other).unwrap();
    let out = writ_config(dir.path(), &["codex", "--write"], &envs);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), other);
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
