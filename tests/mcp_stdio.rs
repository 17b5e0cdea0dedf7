//! `writ mcp ROOT` over stdio, driven by the official MCP Python SDK.
//!
//! Needs python3 with its venv module; the SDK is installed into a venv
//! under `target/` on first run (network needed once).

#![cfg(feature = "mcp")]

#[path = "common/mcp_driver.rs"]
mod driver;

use std::fs;
use std::path::Path;

use driver::{call, ok, refused};
use serde_json::{Value, json};

/// A stdio agent on a scheduler of its own (`--private`: no server is
/// started), with a history folder inside the test's scratch space.
fn stdio_agent(root: &Path, scratch: &Path) -> Value {
    json!({
        "stdio": [
            env!("CARGO_BIN_EXE_writ"), "mcp", root, "--private",
            "--history-dir", scratch.join("history"), "--call-wait", "0.5"
        ]
    })
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

#[test]
fn tools_are_listed_with_schemas_for_every_input() {
    let (ws, scratch) = (tempdir(), tempdir());
    let script = json!({
        "agents": {"alpha": stdio_agent(ws.path(), scratch.path())},
        "steps": [{"agent": "alpha", "list_tools": true}],
    });
    let results = driver::run(&script, scratch.path());
    let tools = results[0]["tools"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
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
            "run_command"
        ]
    );
    let props = |name: &str| -> Vec<String> {
        let tool = tools
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_default();
        let mut keys: Vec<String> = tool["input_schema"]["properties"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };
    // Every tool takes the optional `agent` handle (SPEC §14).
    assert_eq!(props("read_file"), ["agent", "limit", "offset", "path"]);
    assert_eq!(
        props("edit_file"),
        ["agent", "new_string", "old_string", "path", "replace_all"]
    );
    assert_eq!(props("move_file"), ["agent", "from", "to"]);
    assert_eq!(props("reserve"), ["agent", "note", "paths"]);
    assert_eq!(props("release"), ["agent", "paths"]);
    assert_eq!(props("writ_status"), ["agent"]);
    for tool in &tools {
        let description = tool["description"].as_str().unwrap_or_default();
        assert!(description.len() > 80, "{description}");
    }
    let write = tools
        .iter()
        .find(|t| t["name"] == "write_file")
        .cloned()
        .unwrap_or_default();
    let text = write["description"].as_str().unwrap_or_default();
    assert!(text.contains("read it first"), "{text}");
    assert!(text.contains("counts as reading"), "{text}");
}

#[test]
fn writes_need_a_current_read_and_refusals_change_nothing() {
    let (ws, scratch) = (tempdir(), tempdir());
    let file = ws.path().join("src/lib.rs");
    fs::create_dir_all(ws.path().join("src")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(&file, "fn a() {}\nfn b() {}\nfn a2() {}\n").unwrap_or_else(|e| panic!("{e}"));
    let a = |tool: &str, args: Value| call("alpha", tool, args);
    let script = json!({
        "agents": {"alpha": stdio_agent(ws.path(), scratch.path())},
        "steps": [
            a("write_file", json!({"path": "src/lib.rs", "content": "gone\n"})),
            a("read_file", json!({"path": "src/lib.rs", "offset": 2, "limit": 1})),
            a("edit_file", json!({"path": "src/lib.rs", "old_string": "fn b()", "new_string": "fn beta()"})),
            a("edit_file", json!({"path": "src/lib.rs", "old_string": "fn beta()", "new_string": "fn b()"})),
            a("read_file", json!({"path": "src/lib.rs"})),
            a("edit_file", json!({"path": "src/lib.rs", "old_string": "fn a", "new_string": "fn z"})),
            a("edit_file", json!({"path": "src/lib.rs", "old_string": "fn a", "new_string": "fn z", "replace_all": true})),
            a("read_file", json!({"path": "src/lib.rs"})),
            a("append_file", json!({"path": "src/lib.rs", "content": "// end\n"})),
            a("write_file", json!({"path": "docs/new.md", "content": "# new\n"})),
            a("read_file", json!({"path": "docs/new.md"})),
            a("move_file", json!({"from": "docs/new.md", "to": "docs/moved.md"})),
            a("read_file", json!({"path": "docs/moved.md"})),
            a("delete_file", json!({"path": "docs/moved.md"})),
            a("list_dir", json!({})),
            a("read_file", json!({"path": "docs/moved.md"})),
        ],
    });
    let r = driver::run(&script, scratch.path());
    refused(&r[0], &["you have not read it", "     1\tfn a() {}\n"]);
    assert_eq!(
        ok(&r[1]),
        "     2\tfn b() {}\n[Showing lines 2-2 of 3. To read on, call read_file with offset=3.]\n"
    );
    ok(&r[2]);
    refused(
        &r[3],
        &[
            "changed since you read it",
            "     2\tfn beta() {}\n",
            "counts as reading it",
        ],
    );
    assert!(ok(&r[4]).contains("     2\tfn beta() {}\n"));
    refused(&r[5], &["2"]);
    ok(&r[6]);
    ok(&r[7]);
    ok(&r[8]);
    assert!(ok(&r[9]).contains("Created docs/new.md"));
    ok(&r[10]);
    assert!(ok(&r[11]).contains("Moved docs/new.md to docs/moved.md"));
    ok(&r[12]);
    ok(&r[13]);
    let listing = ok(&r[14]);
    assert!(
        listing.contains("docs/") && listing.contains("src/"),
        "{listing}"
    );
    refused(&r[15], &["docs/moved.md"]);
    assert_eq!(
        fs::read_to_string(&file).unwrap_or_default(),
        "fn z() {}\nfn beta() {}\nfn z2() {}\n// end\n"
    );
    assert!(!ws.path().join("docs/moved.md").exists());
}

#[test]
fn sensitive_files_and_escapes_are_refused() {
    let (ws, scratch, outside) = (tempdir(), tempdir(), tempdir());
    let root = ws.path();
    fs::write(root.join(".env"), "TOKEN=secret\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(outside.path().join("victim.txt"), "keep\n").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(outside.path().join("victim.txt"), root.join("link.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(root.join(".env"), root.join("innocent.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap_or_else(|e| panic!("{e}"));
    let victim = outside.path().join("victim.txt");
    let a = |tool: &str, args: Value| call("alpha", tool, args);
    let script = json!({
        "agents": {"alpha": stdio_agent(root, scratch.path())},
        "steps": [
            a("read_file", json!({"path": ".env"})),
            a("write_file", json!({"path": ".env", "content": "TOKEN=mine\n"})),
            a("read_file", json!({"path": "innocent.txt"})),
            a("read_file", json!({"path": "../victim.txt"})),
            a("write_file", json!({"path": victim, "content": "pwned\n"})),
            a("read_file", json!({"path": "link.txt"})),
            a("write_file", json!({"path": "link.txt", "content": "pwned\n"})),
            a("write_file", json!({"path": "out/victim.txt", "content": "pwned\n"})),
            a("write_file", json!({"path": "out/new.txt", "content": "pwned\n"})),
            a("list_dir", json!({"path": "out"})),
            a("write_file", json!({"path": "id_rsa", "content": "key\n"})),
        ],
    });
    let r = driver::run(&script, scratch.path());
    for (i, result) in r.iter().enumerate() {
        let (err, text) = driver::outcome(result);
        assert!(err, "step {i} should be refused: {text}");
        assert!(
            !text.contains("TOKEN=secret"),
            "step {i} leaked the secret: {text}"
        );
        assert!(
            !text.contains("keep"),
            "step {i} leaked the outside file: {text}"
        );
    }
    refused(&r[0], &[".env"]);
    refused(&r[3], &["outside the workspace"]);
    assert_eq!(
        fs::read_to_string(root.join(".env")).unwrap_or_default(),
        "TOKEN=secret\n"
    );
    assert_eq!(fs::read_to_string(&victim).unwrap_or_default(), "keep\n");
    assert!(!outside.path().join("new.txt").exists());
    assert!(!root.join("id_rsa").exists());
}

#[test]
fn bad_input_is_a_tool_error_and_the_server_survives() {
    let (ws, scratch) = (tempdir(), tempdir());
    let root = ws.path();
    fs::write(root.join("a.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("blob.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir(root.join("dir")).unwrap_or_else(|e| panic!("{e}"));
    let a = |tool: &str, args: Value| call("alpha", tool, args);
    let script = json!({
        "agents": {"alpha": stdio_agent(root, scratch.path())},
        "steps": [
            a("read_file", json!({})),
            a("read_file", json!({"path": 42})),
            a("read_file", json!({"path": "a.txt", "offset": "two"})),
            a("read_file", json!({"path": "a.txt", "offset": 0})),
            a("edit_file", json!({"path": "a.txt", "old_str": "one", "new_str": "two"})),
            a("write_file", json!({"path": "a.txt"})),
            a("reserve", json!({"paths": []})),
            a("reserve", json!({"paths": [1, 2]})),
            a("no_such_tool", json!({"path": "a.txt"})),
            a("read_file", json!({"path": "blob.bin"})),
            a("write_file", json!({"path": "blob.bin", "content": "text"})),
            a("read_file", json!({"path": "dir"})),
            a("list_dir", json!({"path": "a.txt"})),
            a("read_file", json!({"path": "missing.txt"})),
            a("read_file", json!({"path": "bad\u{0}name"})),
            a("release", json!({"paths": ["a.txt"]})),
            a("read_file", json!({"path": "a.txt"})),
        ],
    });
    let r = driver::run(&script, scratch.path());
    refused(&r[0], &["needs `path`"]);
    refused(&r[1], &["must be a string, got a number"]);
    refused(&r[2], &["offset", "got a string"]);
    refused(&r[3], &["offset", "at least 1"]);
    refused(&r[4], &["old_str", "old_string"]);
    refused(&r[5], &["needs `content`"]);
    refused(&r[6], &["empty"]);
    refused(&r[7], &["must be a string"]);
    refused(&r[8], &["no tool named", "read_file"]);
    refused(&r[9], &["binary"]);
    refused(&r[10], &["you have not read it"]);
    refused(&r[11], &["folder"]);
    refused(&r[12], &["is a file"]);
    refused(&r[13], &["missing.txt"]);
    driver::outcome(&r[14]);
    refused(&r[15], &["no reservation"]);
    assert_eq!(ok(&r[16]), "     1\tone\n");
    assert_eq!(
        fs::read(root.join("blob.bin")).unwrap_or_default(),
        [0u8, 159, 146, 150, 0, 1]
    );
}
