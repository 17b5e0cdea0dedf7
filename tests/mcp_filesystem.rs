//! `writ mcp --tools filesystem` against the reference server it stands in
//! for, `@modelcontextprotocol/server-filesystem`: the same scripted MCP
//! sessions (the official Python SDK, over stdio) run against both, on the
//! same folder laid out anew for each, and their results are compared.
//!
//! Needs node and npm (the reference server is installed into `target/` on
//! first run, network needed once) and python3 with its venv module.

#![cfg(feature = "mcp")]

#[path = "common/mcp_driver.rs"]
mod driver;
#[path = "common/npmenv.rs"]
mod npmenv;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use driver::{call, ok, refused};
use serde_json::{Value, json};

/// The reference server's version the results are compared with.
const REFERENCE: &str = "2026.8.31";
const PACKAGE: &str = "@modelcontextprotocol/server-filesystem";

/// The reference server's entry point, installed once under `target/`.
fn reference_server() -> PathBuf {
    npmenv::npm_package("npm-fs", PACKAGE, REFERENCE)
        .join("dist")
        .join("index.js")
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

/// A small project: text in folders, an image, a binary, a folder a tree
/// listing leaves out.
fn lay_out(root: &Path) {
    if root.exists() {
        fs::remove_dir_all(root).unwrap();
    }
    let files: &[(&str, &[u8])] = &[
        ("README.md", b"# Demo\n\nA small project.\n"),
        ("notes.md", b"one\ntwo\nthree\nfour\nfive\n"),
        ("src/lib.rs", b"pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\npub fn sub(a: i32, b: i32) -> i32 {\n    a - b\n}\n"),
        ("src/main.rs", b"fn main() {\n    println!(\"hi\");\n}\n"),
        ("src/util/mod.rs", b"// util\n"),
        ("docs/guide.txt", b"Guide\r\nline two\r\n"),
        ("docs/a b.txt", b"spaced\n"),
        ("node_modules/dep/index.js", b"module.exports = 1;\n"),
        ("img.png", &[0x89, b'P', b'N', b'G', 13, 10, 26, 10, 0, 0, 0, 13]),
        ("data.bin", &[0, 1, 2, 3, 255, 254]),
        ("big.txt", &[b'x'; 3000]),
        (".hidden", b"secret-ish\n"),
    ];
    for (rel, bytes) in files {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }
    fs::create_dir_all(root.join("empty")).unwrap();
}

/// Every file under `root` with its bytes, for comparing end states.
fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                stack.push(path);
            } else {
                out.push((rel, fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn writ_agent(root: &Path, scratch: &Path) -> Value {
    json!({"stdio": [
        env!("CARGO_BIN_EXE_writ"), "mcp", root, "--tools", "filesystem", "--embedded",
        "--history-dir", scratch.join("history"), "--call-wait", "0.5"
    ]})
}

fn reference_agent(server: &Path, root: &Path) -> Value {
    json!({"stdio": ["node", server, root]})
}

/// A result without what writ adds to name the agent a call acted as
/// (SPEC §14: `structuredContent.agent`, and the sentence asking the model
/// to pass its handle), which the reference server has no notion of.
fn without_agent(mut result: Value) -> Value {
    if let Some(structured) = result["structured"].as_object_mut() {
        structured.remove("agent");
    }
    if let Some(blocks) = result["content"].as_array_mut() {
        blocks.retain(|b| {
            !b["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("Pass \"agent\""))
        });
        let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
        result["text"] = json!(text.join("\n"));
    }
    result
}

/// A tool's schemas without what writ adds to every tool: the `agent`
/// argument (asserted there, mirrored into the `Writ-Agent` header), and
/// in the output schema `agent` and a refusal's `error` (SPEC §14
/// results: every result validates, refusals too, so `read_media_file`'s
/// `content` may also be a refusal's sentence or list a text).
fn without_agent_argument(mut tool: Value) -> Value {
    let agent = tool["input_schema"]["properties"]
        .as_object_mut()
        .and_then(|p| p.remove("agent"))
        .unwrap_or_else(|| panic!("no agent argument: {tool}"));
    assert_eq!(agent["x-mcp-header"], "Writ-Agent", "{tool}");
    let media = tool["name"] == "read_media_file";
    if let Some(p) = tool["output_schema"]["properties"].as_object_mut() {
        assert_eq!(
            p.remove("agent").map(|a| a["type"].clone()),
            Some(json!("string"))
        );
        assert_eq!(
            p.remove("error").map(|e| e["type"].clone()),
            Some(json!("object"))
        );
        if media {
            let widened = p["content"]["anyOf"].clone();
            assert_eq!(widened[0], json!({"type": "string"}), "{widened}");
            let mut media = widened[1].clone();
            let kinds = media
                .pointer_mut("/items/anyOf")
                .and_then(Value::as_array_mut);
            let text = kinds.and_then(Vec::pop).unwrap_or_default();
            assert_eq!(text["properties"]["type"]["const"], "text", "{widened}");
            p.insert("content".into(), media);
        }
    }
    tool
}

/// Only what must differ: the digits of the timestamps `get_file_info`
/// shows (their format stays compared), and what names writ's agent.
fn normalized(result: Value) -> Value {
    let mut result = without_agent(result);
    let stamp = |text: &str| -> String {
        text.lines()
            .map(|line| {
                let is_time = ["created: ", "modified: ", "accessed: "]
                    .iter()
                    .any(|k| line.starts_with(k));
                if is_time {
                    line.chars()
                        .map(|c| if c.is_ascii_digit() { '#' } else { c })
                        .collect()
                } else {
                    line.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    if let Some(text) = result["text"].as_str().map(stamp) {
        result["text"] = json!(text.clone());
        if result["structured"]["content"].is_string() {
            result["structured"]["content"] = json!(text.clone());
        }
        if let Some(block) = result["content"].get_mut(0) {
            if block["type"] == "text" {
                block["text"] = json!(text);
            }
        }
    }
    result
}

/// The single-agent session: reads, listings, searches and info, then edits
/// that keep writ's rule (read before changing an existing file), then calls
/// both servers refuse.
fn single_agent_steps(root: &Path) -> (Vec<Value>, Vec<bool>) {
    let p = |rel: &str| root.join(rel).display().to_string();
    let r = root.display().to_string();
    // (step, whether both must succeed)
    let steps = [
        (call("a", "list_allowed_directories", json!({})), true),
        (call("a", "list_directory", json!({"path": r})), true),
        (call("a", "list_directory", json!({"path": p("src")})), true),
        (
            call("a", "list_directory_with_sizes", json!({"path": r})),
            true,
        ),
        (
            call(
                "a",
                "list_directory_with_sizes",
                json!({"path": r, "sortBy": "size"}),
            ),
            true,
        ),
        (call("a", "directory_tree", json!({"path": r})), true),
        (
            call(
                "a",
                "directory_tree",
                json!({"path": r, "excludePatterns": ["node_modules", "*.bin"]}),
            ),
            true,
        ),
        (
            call(
                "a",
                "search_files",
                json!({"path": r, "pattern": "**/*.rs"}),
            ),
            true,
        ),
        (
            call("a", "search_files", json!({"path": r, "pattern": "*.md"})),
            true,
        ),
        (
            call(
                "a",
                "search_files",
                json!({"path": r, "pattern": "**/*.{txt,js}", "excludePatterns": ["node_modules/**"]}),
            ),
            true,
        ),
        (
            call(
                "a",
                "search_files",
                json!({"path": p("src"), "pattern": "nothing-*"}),
            ),
            true,
        ),
        (
            call("a", "get_file_info", json!({"path": p("README.md")})),
            true,
        ),
        (call("a", "get_file_info", json!({"path": p("src")})), true),
        (
            call("a", "read_text_file", json!({"path": p("src/lib.rs")})),
            true,
        ),
        (
            call(
                "a",
                "read_text_file",
                json!({"path": p("notes.md"), "head": 2}),
            ),
            true,
        ),
        (
            call(
                "a",
                "read_text_file",
                json!({"path": p("notes.md"), "tail": 2}),
            ),
            true,
        ),
        (
            call(
                "a",
                "read_text_file",
                json!({"path": p("docs/guide.txt"), "tail": 1}),
            ),
            true,
        ),
        (
            call("a", "read_text_file", json!({"path": "notes.md"})),
            true,
        ),
        (
            call("a", "read_file", json!({"path": p("README.md")})),
            true,
        ),
        (
            call(
                "a",
                "read_multiple_files",
                json!({"paths": [p("README.md"), p("docs/a b.txt"), p("missing.md")]}),
            ),
            true,
        ),
        (
            call("a", "read_media_file", json!({"path": p("img.png")})),
            true,
        ),
        (
            call("a", "read_media_file", json!({"path": p("data.bin")})),
            true,
        ),
        (
            call(
                "a",
                "edit_file",
                json!({"path": p("src/lib.rs"), "dryRun": true,
            "edits": [{"oldText": "a + b", "newText": "a.wrapping_add(b)"}]}),
            ),
            true,
        ),
        (
            call(
                "a",
                "edit_file",
                json!({"path": p("src/lib.rs"),
            "edits": [{"oldText": "a + b", "newText": "a.wrapping_add(b)"},
                      {"oldText": "pub fn sub(a: i32, b: i32) -> i32 {\n  a - b", "newText": "pub fn sub(a: i32, b: i32) -> i32 {\n    a.wrapping_sub(b)"}]}),
            ),
            true,
        ),
        (
            call("a", "read_text_file", json!({"path": p("src/lib.rs")})),
            true,
        ),
        (
            call("a", "read_text_file", json!({"path": p("docs/guide.txt")})),
            true,
        ),
        (
            call(
                "a",
                "edit_file",
                json!({"path": p("docs/guide.txt"),
            "edits": [{"oldText": "line two", "newText": "line 2\nline 3"}]}),
            ),
            true,
        ),
        (
            call(
                "a",
                "write_file",
                json!({"path": p("new.txt"), "content": "fresh\n"}),
            ),
            true,
        ),
        (
            call("a", "read_text_file", json!({"path": p("README.md")})),
            true,
        ),
        (
            call(
                "a",
                "write_file",
                json!({"path": p("README.md"), "content": "# Demo\n\nRewritten.\n"}),
            ),
            true,
        ),
        (
            call("a", "create_directory", json!({"path": p("out/deep")})),
            true,
        ),
        (
            call("a", "create_directory", json!({"path": p("out")})),
            true,
        ),
        (
            call("a", "read_text_file", json!({"path": p("new.txt")})),
            true,
        ),
        (
            call(
                "a",
                "move_file",
                json!({"source": p("new.txt"), "destination": p("out/deep/new.txt")}),
            ),
            true,
        ),
        (
            call(
                "a",
                "move_file",
                json!({"source": p("docs"), "destination": p("manual")}),
            ),
            true,
        ),
        (
            call("a", "list_directory", json!({"path": p("out/deep")})),
            true,
        ),
        (
            call(
                "a",
                "directory_tree",
                json!({"path": r, "excludePatterns": ["node_modules"]}),
            ),
            true,
        ),
        // Refused by both (texts differ: each says it in its own words).
        (
            call("a", "read_text_file", json!({"path": p("missing.md")})),
            false,
        ),
        (
            call("a", "read_text_file", json!({"path": "/etc/hostname"})),
            false,
        ),
        (
            call(
                "a",
                "read_text_file",
                json!({"path": p("notes.md"), "head": 1, "tail": 1}),
            ),
            false,
        ),
        (
            call("a", "read_text_file", json!({"path": p("notes.md")})),
            true,
        ),
        (
            call(
                "a",
                "edit_file",
                json!({"path": p("notes.md"),
            "edits": [{"oldText": "no such line", "newText": "x"}]}),
            ),
            false,
        ),
        (
            call(
                "a",
                "move_file",
                json!({"source": p("notes.md"), "destination": p("README.md")}),
            ),
            false,
        ),
        (
            call("a", "list_directory", json!({"path": p("nowhere")})),
            false,
        ),
    ];
    steps.into_iter().unzip()
}

fn run_session(agent: Value, steps: &[Value], scratch: &Path) -> Vec<Value> {
    let mut all = vec![json!({"agent": "a", "list_tools": true})];
    all.extend_from_slice(steps);
    driver::run(&json!({"agents": {"a": agent}, "steps": all}), scratch)
}

#[test]
fn the_same_session_gives_the_same_results_as_the_reference_server() {
    let server = reference_server();
    let (ws, scratch) = (tempdir(), tempdir());
    let root = ws.path().join("project");
    let (steps, succeed) = single_agent_steps(&root);

    lay_out(&root);
    let theirs = run_session(reference_agent(&server, &root), &steps, scratch.path());
    let their_end = snapshot(&root);
    lay_out(&root);
    let ours = run_session(writ_agent(&root, scratch.path()), &steps, scratch.path());
    let our_end = snapshot(&root);

    // The tools: names, titles, schemas and annotations as the reference's.
    let (their_tools, our_tools) = (&theirs[0]["tools"], &ours[0]["tools"]);
    let names = |tools: &Value| -> Vec<String> {
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(our_tools), names(their_tools));
    assert_eq!(names(our_tools).len(), 14);
    for (theirs, ours) in their_tools
        .as_array()
        .unwrap()
        .iter()
        .zip(our_tools.as_array().unwrap())
    {
        let ours = &without_agent_argument(ours.clone());
        for key in ["title", "input_schema", "output_schema", "annotations"] {
            assert_eq!(ours[key], theirs[key], "{} of {}", key, theirs["name"]);
        }
        let gated =
            ["write_file", "edit_file", "move_file"].contains(&theirs["name"].as_str().unwrap());
        if !gated {
            assert_eq!(
                ours["description"], theirs["description"],
                "{}",
                theirs["name"]
            );
        }
    }

    for (i, (step, must_succeed)) in steps.iter().zip(&succeed).enumerate() {
        let (theirs, ours) = (
            normalized(theirs[i + 1].clone()),
            normalized(ours[i + 1].clone()),
        );
        if *must_succeed {
            ok(&theirs);
            ok(&ours);
            assert_eq!(ours, theirs, "step {i}: {step}");
        } else {
            refused(&theirs, &[]);
            refused(&ours, &[]);
        }
    }
    assert_eq!(our_end, their_end, "the folders end alike");
}

/// Waits for `writ serve` to write its discovery file.
fn discovery(path: &Path, server: &mut Child) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        {
            return (
                found["url"].as_str().unwrap().to_string(),
                found["token"].as_str().unwrap().to_string(),
            );
        }
        assert!(
            server.try_wait().unwrap().is_none(),
            "writ serve exited before it was ready"
        );
        assert!(
            Instant::now() < deadline,
            "writ serve did not start within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends the server process this test started.
struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two agents edit one file, both having read it: the second writer works
/// from a copy that is no longer current.
fn two_agent_steps(file: &str) -> Vec<Value> {
    vec![
        call("alice", "read_text_file", json!({"path": file})),
        call("bob", "read_text_file", json!({"path": file})),
        call(
            "alice",
            "edit_file",
            json!({"path": file, "edits": [{"oldText": "v0", "newText": "v0\nalice"}]}),
        ),
        call(
            "bob",
            "write_file",
            json!({"path": file, "content": "v0\nbob\n"}),
        ),
        call("bob", "read_text_file", json!({"path": file})),
        // A file bob never read: the reference server overwrites it.
        call(
            "bob",
            "write_file",
            json!({"path": format!("{file}.orig"), "content": "bob's\n"}),
        ),
    ]
}

#[test]
fn the_reference_server_loses_an_update_where_writ_refuses_the_second_writer() {
    let server = reference_server();
    let (ws, scratch) = (tempdir(), tempdir());
    let root = ws.path().join("project");
    fs::create_dir_all(&root).unwrap();
    let file = root.join("shared.txt");
    let path = file.display().to_string();

    // The reference server: each agent runs its own copy on the folder.
    fs::write(&file, "v0\n").unwrap();
    fs::write(format!("{path}.orig"), "kept\n").unwrap();
    let agents = json!({
        "alice": reference_agent(&server, &root),
        "bob": reference_agent(&server, &root),
    });
    let theirs = driver::run(
        &json!({"agents": agents, "steps": two_agent_steps(&path)}),
        scratch.path(),
    );
    ok(&theirs[2]);
    ok(&theirs[3]);
    ok(&theirs[5]);
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "v0\nbob\n",
        "the reference server let bob overwrite alice's edit unseen"
    );
    let orig = fs::read_to_string(format!("{path}.orig")).unwrap();
    assert_eq!(orig, "bob's\n", "and a file bob never read");

    // writ: one `writ serve` for the folder, each agent a `writ mcp` bridge.
    fs::write(&file, "v0\n").unwrap();
    fs::write(format!("{path}.orig"), "kept\n").unwrap();
    let state = scratch.path().join("state");
    let serve = Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("serve")
        .arg(&root)
        .args([
            "--mcp-tools",
            "filesystem",
            "--no-history",
            "--no-fsync",
            "--call-wait",
            "0.5",
        ])
        .arg("--state-dir")
        .arg(&state)
        .env("XDG_STATE_HOME", scratch.path().join("xdg"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut serve = Stop(serve);
    let (url, token) = discovery(&state.join("serve.json"), &mut serve.0);
    let bridge = || {
        json!({"stdio": [env!("CARGO_BIN_EXE_writ"), "mcp", &root, "--tools", "filesystem",
                         "--url", &url, "--token", &token]})
    };
    let agents = json!({"alice": bridge(), "bob": bridge()});
    let ours = driver::run(
        &json!({"agents": agents, "steps": two_agent_steps(&path)}),
        scratch.path(),
    );
    ok(&ours[2]);
    let refusal = refused(&ours[3], &["alice"]);
    assert!(refusal.contains("shared.txt"), "{refusal}");
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "v0\nalice\n",
        "alice's edit is kept"
    );
    assert_eq!(
        ok(&without_agent(ours[4].clone())),
        "v0\nalice\n",
        "bob sees it when he reads again"
    );
    refused(&ours[5], &["have not read"]);

    // `--mcp-tools filesystem` is the server's default; a session may ask
    // for writ's own set.
    let listing = |endpoint: String| {
        let agents = json!({"plain": {"http": endpoint, "token": &token}});
        let steps = [json!({"agent": "plain", "list_tools": true})];
        let out = driver::run(&json!({"agents": agents, "steps": steps}), scratch.path());
        let tools = out[0]["tools"].as_array().cloned().unwrap_or_default();
        tools
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect::<Vec<_>>()
    };
    assert_eq!(listing(format!("{url}/mcp")).len(), 14);
    let writs = listing(format!("{url}/mcp?tools=writ"));
    assert!(writs.contains(&"writ_status".to_string()), "{writs:?}");
    let orig = fs::read_to_string(format!("{path}.orig")).unwrap();
    assert_eq!(orig, "kept\n", "a file bob never read is left alone");
}
