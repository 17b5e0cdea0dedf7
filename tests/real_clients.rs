//! writ serve driven by MCP clients nobody here wrote, the way agents use
//! them (SPEC §14): the official Python SDK, LangGraph's
//! `create_react_agent` with `langchain-mcp-adapters` (a session per tool
//! call), the OpenAI Agents SDK with its default time-outs, and the
//! official TypeScript SDK. Models are scripted; each "thinks" for three
//! lease TTLs between a read and a write, which must cost nothing.
//!
//! The Python frameworks pin an older MCP SDK than the conformance driver,
//! so they get a venv of their own under `target/`; the TypeScript SDK is
//! installed with npm under `target/` too. Needs python3 with venv, and
//! node with npm.

#![cfg(all(feature = "mcp", feature = "server"))]

#[path = "common/npmenv.rs"]
mod npmenv;
#[path = "common/pyenv.rs"]
mod pyenv;
#[path = "common/scratch.rs"]
mod scratch;

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scratch::runtime;
use serde_json::{Value, json};
use writ::server::{Options, Server};
use writ::{Grant, Target};

const TTL: Duration = Duration::from_secs(1);

const FRAMEWORKS: &[&str] = &[
    "langgraph==1.2.24",
    "langchain-mcp-adapters==0.3.2",
    "openai-agents==0.24.0",
];

const TS_SDK: &str = "@modelcontextprotocol/sdk";
const TS_SDK_VERSION: &str = "1.32.2";
const NODE_HINT: &str = "node is required: install it (Debian/Ubuntu: apt-get install nodejs npm)";

/// A workspace with the files the scenarios read and write.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let (dir, root) = scratch::workspace();
    for (name, text) in [
        ("notes.md", "one\n"),
        ("other.md", "two\n"),
        ("race.md", "race\n"),
    ] {
        fs::write(root.join(name), text).unwrap_or_else(|e| panic!("{e}"));
    }
    (dir, root)
}

async fn start(root: &Path) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(Options::new(root).config(config).lease_ttl(TTL))
        .await
        .unwrap_or_else(|e| panic!("start: {e}"))
}

/// A server with its discovery file, for the `writ mcp` bridge to find.
async fn start_with_discovery(root: &Path) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(
        Options::new(root)
            .config(config)
            .lease_ttl(TTL)
            .discovery_file(root.join(".writ").join("serve.json")),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

/// The config file a client script reads.
fn config(server: &Server, root: &Path) -> PathBuf {
    let path = root.join(".writ").join("client.json");
    fs::create_dir_all(root.join(".writ")).unwrap_or_else(|e| panic!("{e}"));
    let config = json!({"url": format!("{}/mcp", server.url()), "token": server.token(),
                        "root": root, "ttl": TTL.as_secs_f64(),
                        "writ": env!("CARGO_BIN_EXE_writ")});
    fs::write(&path, config.to_string()).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// Runs a scenario of `tests/py/agent_frameworks.py` to its end, off the
/// runtime's threads; its JSON result.
async fn scenario(name: &str, config: &Path) -> Value {
    let (name, config) = (name.to_string(), config.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let python = pyenv::named_venv_python("agents-venv", FRAMEWORKS);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/agent_frameworks.py");
        let out = Command::new(python)
            .arg(script)
            .arg(&name)
            .arg(&config)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{name}: {e}: {stdout}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Exactly one of two racing writes won; the other's tool result is writ's
/// sentence naming the winner; the file is the winner's write, whole (no
/// update lost). `write` picks a racer's write result: (ok, text).
fn one_winner(root: &Path, result: &Value, write: impl Fn(&Value) -> (bool, String)) {
    let results = result["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 2, "{result}");
    let outcomes: Vec<(String, bool, String)> = results
        .iter()
        .map(|r| {
            let (ok, text) = write(r);
            (
                r["agent"].as_str().unwrap_or_default().to_string(),
                ok,
                text,
            )
        })
        .collect();
    let winners: Vec<&(String, bool, String)> = outcomes.iter().filter(|o| o.1).collect();
    assert_eq!(winners.len(), 1, "exactly one write wins: {outcomes:?}");
    let winner = &winners[0].0;
    let loser = outcomes
        .iter()
        .find(|o| !o.1)
        .unwrap_or_else(|| panic!("{outcomes:?}"));
    assert!(
        loser.2.contains(winner.as_str()),
        "the loser reads writ's sentence naming the winner: {}",
        loser.2
    );
    assert_eq!(
        fs::read_to_string(root.join("race.md")).unwrap_or_default(),
        format!("{winner}\n")
    );
}

/// A client process of `scenario` reserves `k/` and waits; it keeps the
/// reservation for three TTLs while it lives, and SIGKILL frees it within
/// the TTL (plus the ping that notices the dead stream).
async fn killed_client_is_freed(server: &Server, mut child: std::process::Child) {
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let line = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .next()
            .and_then(Result::ok)
            .unwrap_or_default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        line.contains("\"reserved\": true") || line.contains("\"reserved\":true"),
        "{line}"
    );
    let held = |d: &writ::Dump| {
        d.holds
            .iter()
            .any(|h| h.paths.iter().any(|p| p.path.ends_with("k")))
    };
    tokio::time::sleep(TTL * 3).await;
    assert!(
        held(&server.scheduler().dump()),
        "the live client lost its reservation"
    );
    let _ = child.kill();
    let _ = child.wait();
    let killed = Instant::now();
    while held(&server.scheduler().dump()) {
        assert!(
            killed.elapsed() < TTL * 10,
            "the killed client's reservation stayed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Python interpreter of the agent frameworks' venv, and the script.
async fn frameworks() -> (PathBuf, PathBuf) {
    let python =
        tokio::task::spawn_blocking(|| pyenv::named_venv_python("agents-venv", FRAMEWORKS))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/agent_frameworks.py");
    (python, script)
}

/// Another agent, "holder", fences `folder`: writes there are refused.
fn hold_folder(server: &Server, root: &Path, folder: &str) -> (writ::Actor, writ::Fence) {
    let holder = server
        .scheduler()
        .actor("holder", Grant::workspace(root))
        .unwrap_or_else(|e| panic!("{e}"));
    let fence = holder
        .request([Target::tree(folder)])
        .fence()
        .unwrap_or_else(|e| panic!("{e}"));
    (holder, fence)
}

fn no_warnings(result: &Value) {
    let warnings = result["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warnings.is_empty(),
        "the client logged warnings: {warnings:?}"
    );
}

#[test]
fn the_official_python_sdk_outlives_a_pause_and_loses_no_update_in_a_race() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let config = config(&server, &root);
        let paused = scenario("sdk_pause", &config).await;
        assert_eq!(paused["read_error"], false, "{paused}");
        assert_eq!(
            paused["write_error"], false,
            "the pause cost the write: {paused}"
        );
        no_warnings(&paused);
        assert_eq!(
            fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
            "after the pause\n"
        );
        let raced = scenario("sdk_race", &config).await;
        one_winner(&root, &raced, |r| {
            (
                r["error"] == false,
                r["text"].as_str().unwrap_or_default().to_string(),
            )
        });
        no_warnings(&raced);
        server.shutdown().await;
    });
}

#[test]
fn clients_killed_with_sigkill_free_their_reservations_within_the_ttl() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let config = config(&server, &root);
        let (python, script) = frameworks().await;
        // The official Python SDK, then the Agents SDK's MCP server session.
        for scenario in ["sdk_hold", "agents_hold"] {
            let child = Command::new(&python)
                .arg(&script)
                .arg(scenario)
                .arg(&config)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn: {e}"));
            killed_client_is_freed(&server, child).await;
        }
        // The official TypeScript SDK.
        let sdk = tokio::task::spawn_blocking(typescript_sdk)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let ts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ts/sdk_client.mjs");
        let child = Command::new("node")
            .arg(ts)
            .arg(sdk)
            .arg(&config)
            .arg("hold")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{NODE_HINT}: {e}"));
        killed_client_is_freed(&server, child).await;
        server.shutdown().await;
    });
}

#[test]
fn the_official_python_sdk_through_the_bridge_outlives_a_pause() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start_with_discovery(&root).await;
        let config = config(&server, &root);
        let result = scenario("sdk_bridge", &config).await;
        assert_eq!(
            result["write_error"], false,
            "the pause cost the write: {result}"
        );
        no_warnings(&result);
        assert_eq!(
            fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
            "through the bridge\n"
        );
        server.shutdown().await;
    });
}

#[test]
fn langgraph_and_agents_sdk_agents_racing_lose_no_update() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let config = config(&server, &root);
        let result = scenario("langgraph_race", &config).await;
        one_winner(&root, &result, |r| {
            (
                r["write"]["status"] == "success",
                r["write"]["text"].as_str().unwrap_or_default().to_string(),
            )
        });
        no_warnings(&result);
        // The loser's refusal left it a claim on race.md (SPEC §6), which
        // it never redeems: a fresh server, so the next race starts even.
        server.shutdown().await;
        fs::write(root.join("race.md"), "race\n").unwrap_or_else(|e| panic!("{e}"));
        let server = start(&root).await;
        let config = self::config(&server, &root);
        let result = scenario("agents_race", &config).await;
        one_winner(&root, &result, |r| {
            let text = r["write"].as_str().unwrap_or_default().to_string();
            (text.contains("Wrote race.md"), text)
        });
        no_warnings(&result);
        server.shutdown().await;
    });
}

#[test]
fn langgraph_with_get_tools_reads_then_edits_with_a_named_agent() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let config = config(&server, &root);
        let result = scenario("langgraph", &config).await;
        let outputs = result["outputs"].as_array().cloned().unwrap_or_default();
        assert_eq!(outputs.len(), 4, "{result}");
        for output in &outputs {
            assert_eq!(output["status"], "success", "{output}");
        }
        assert!(
            outputs[2]["text"].as_str().unwrap_or("").contains("Edited"),
            "{result}"
        );
        assert_eq!(
            fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
            "ONE\n"
        );
        assert_eq!(
            fs::read_to_string(root.join("other.md")).unwrap_or_default(),
            "TWO\n"
        );
        no_warnings(&result);
        server.shutdown().await;
    });
}

#[test]
fn the_openai_agents_sdk_reads_writs_sentence_before_its_timeout() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let (_holder, fence) = hold_folder(&server, &root, "held");
        let config = config(&server, &root);
        let result = scenario("agents_sdk", &config).await;
        let outputs = result["outputs"].as_array().cloned().unwrap_or_default();
        let output = |id: &str| {
            outputs
                .iter()
                .find(|o| o["call_id"] == id)
                .and_then(|o| o["output"].as_str())
                .unwrap_or_else(|| panic!("no output for {id}: {result}"))
                .to_string()
        };
        assert!(
            output("call2-0").contains("Wrote notes.md"),
            "after the pause: {result}"
        );
        let refused = output("call2-1");
        assert!(
            refused.contains("holder") && !refused.contains("An error occurred"),
            "the model must read writ's sentence: {refused}"
        );
        assert!(!root.join("held/x.md").exists());
        no_warnings(&result);
        drop(fence);
        server.shutdown().await;
    });
}

/// The official TypeScript SDK, installed once with npm under `target/`.
fn typescript_sdk() -> PathBuf {
    npmenv::npm_package("npm-mcp-sdk", TS_SDK, TS_SDK_VERSION)
}

/// Runs `tests/ts/sdk_client.mjs` in `mode` ("" for the pause) to its
/// end, off the runtime's threads; its JSON result.
async fn typescript(config: &Path, mode: &str) -> Value {
    let (config, mode) = (config.to_path_buf(), mode.to_string());
    tokio::task::spawn_blocking(move || {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ts/sdk_client.mjs");
        let out = Command::new("node")
            .arg(script)
            .arg(typescript_sdk())
            .arg(config)
            .arg(mode)
            .output()
            .unwrap_or_else(|e| panic!("{NODE_HINT}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {stdout}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_official_typescript_sdk_outlives_a_pause_and_reads_writs_sentence() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let (_holder, fence) = hold_folder(&server, &root, "held");
        let config = config(&server, &root);
        let result = typescript(&config, "").await;
        assert_eq!(
            result["write_error"], false,
            "the pause cost the write: {result}"
        );
        assert_eq!(result["held_error"], true, "{result}");
        assert!(
            result["held"].as_str().unwrap_or("").contains("holder"),
            "{result}"
        );
        assert_eq!(result["terminated"], "ok", "{result}");
        no_warnings(&result);
        assert_eq!(
            fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
            "from typescript\n"
        );
        // Two TypeScript agents racing on one file: no update lost.
        let raced = typescript(&config, "race").await;
        one_winner(&root, &raced, |r| {
            (
                r["error"] == false,
                r["text"].as_str().unwrap_or_default().to_string(),
            )
        });
        no_warnings(&raced);
        drop(fence);
        server.shutdown().await;
    });
}

/// SPEC §14 results: a program on the TypeScript SDK reading `content[0]`
/// of an unnamed session's results counts right (it read `NaN` when the
/// handle sentence came as a second block), every result is one block
/// whose text `structuredContent.text` repeats, and the SDK's own check of
/// each result against the tool's output schema passes.
#[test]
fn a_typescript_program_counts_through_read_file_on_one_text_block() {
    let (_dir, root) = workspace();
    fs::write(root.join("counter.txt"), "0\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let config = config(&server, &root);
        let result = typescript(&config, "count").await;
        let blocks = result["blocks"].as_array().cloned().unwrap_or_default();
        assert_eq!(blocks.len(), 10, "{result}");
        assert!(blocks.iter().all(|b| b == 1), "one block each: {result}");
        let same = result["same"].as_array().cloned().unwrap_or_default();
        assert!(same.iter().all(|s| s == true), "{result}");
        no_warnings(&result);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("counter.txt")).unwrap_or_default(),
        "5\n"
    );
}
