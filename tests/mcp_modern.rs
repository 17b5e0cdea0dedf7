//! Agents on the current MCP revision (2026-07-28: no `initialize`, no
//! session), driven by the official Python SDK's `mcp.Client` at its
//! defaults, over HTTP and through the `writ mcp` bridge (SPEC §14,
//! "The stateless revision"): identity travels in a handle, so an agent
//! keeps its reads and reservations from call to call, and no sentence writ
//! sends is untrue. Also the handshake-era client that opens a session per
//! call and continues by its handle.
//!
//! Needs python3 with venv (the SDK is installed under `target/`).

#![cfg(feature = "cli")]

#[path = "common/mcp_driver.rs"]
mod driver;
#[path = "common/mcp_http_client.rs"]
mod http_client;

use std::fs;
use std::path::{Path, PathBuf};

use driver::{call, ok, refused};
use serde_json::{Value, json};
use writ::server::{Options, Server};

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let root = dir.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("a.txt"), "one\ntwo\nthree\n").unwrap_or_else(|e| panic!("{e}"));
    (dir, root)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

async fn start(root: &Path) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(
        Options::new(root)
            .config(config)
            .discovery_file(root.join(".writ/serve.json")),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

/// An `mcp.Client` at its defaults over HTTP.
fn modern(server: &Server, token: &str) -> Value {
    json!({"http": format!("{}/mcp", server.url()), "token": token, "client": true})
}

async fn run(script: Value, scratch: PathBuf) -> Vec<Value> {
    tokio::task::spawn_blocking(move || driver::run(&script, &scratch))
        .await
        .unwrap_or_else(|e| panic!("driver thread: {e}"))
}

/// The handle a result names.
#[track_caller]
fn handle(result: &Value) -> &str {
    result["structured"]["agent"]
        .as_str()
        .unwrap_or_else(|| panic!("no structuredContent.agent: {result}"))
}

/// Asserts the result asks the model to pass its handle, in the form the
/// SPEC gives.
#[track_caller]
fn asks_to_pass(result: &Value) {
    let text = result["text"].as_str().unwrap_or_default();
    let wanted = format!("\"agent\": \"{}\"", handle(result));
    assert!(
        text.contains(&wanted),
        "should ask to pass {wanted}: {text}"
    );
}

#[test]
fn a_modern_client_at_its_defaults_keeps_its_reads_and_reservations_by_its_handle() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let script = json!({
            "agents": {"m": modern(&server, &token), "other": modern(&server, &token)},
            "steps": [
                // 0: the first call names no agent: one is minted.
                {"agent": "m", "tool": "read_file", "args": {"path": "a.txt"}, "protocol": true},
                // 1: the write passes it: the read carries over.
                {"agent": "m", "tool": "write_file", "args": {"path": "a.txt", "content": "one\nTWO\nthree\n"}, "agent_from": 0},
                // 2: an edit that forgot its handle is another agent, refused
                //    with the content, which counts as its read...
                call("m", "edit_file", json!({"path": "a.txt", "old_string": "TWO", "new_string": "2"})),
                // 3: ...so the same edit with the handle step 2 gave lands.
                {"agent": "m", "tool": "edit_file", "args": {"path": "a.txt", "old_string": "TWO", "new_string": "2"}, "agent_from": 2},
                // 4: append: the mark of step 2 is stale now (writes do not
                //    refresh it): refused with the tail, which is enough...
                {"agent": "m", "tool": "append_file", "args": {"path": "a.txt", "content": "four\n"}, "agent_from": 2},
                // 5: ...for the append sent again.
                {"agent": "m", "tool": "append_file", "args": {"path": "a.txt", "content": "four\n"}, "agent_from": 2},
                // 6: a reservation by handle holds across calls...
                {"agent": "m", "tool": "reserve", "args": {"paths": ["b/"]}, "agent_from": 0},
                // 7: ...against a second client...
                call("other", "write_file", json!({"path": "b/x.txt", "content": "other\n"})),
                // 8: ...shows in the agent's own status...
                {"agent": "m", "tool": "writ_status", "args": {}, "agent_from": 0},
                // 9: ...and is released by the handle that made it.
                {"agent": "m", "tool": "release", "args": {"paths": ["b/"]}, "agent_from": 0},
                call("other", "write_file", json!({"path": "b/x.txt", "content": "other\n"})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        assert_eq!(r[0]["protocol"], "2026-07-28", "{}", r[0]);
        ok(&r[0]);
        asks_to_pass(&r[0]);
        let first = handle(&r[0]).to_string();
        assert!(ok(&r[1]).contains("Wrote a.txt"));
        assert_eq!(handle(&r[1]), first);
        // A call that named its agent is not asked again.
        assert!(!r[1]["text"].as_str().unwrap_or_default().contains("Pass \""));
        refused(&r[2], &["you have not read it", "this counts as reading it", "TWO"]);
        asks_to_pass(&r[2]);
        let second = handle(&r[2]).to_string();
        assert_ne!(second, first, "two calls without identity share no handle");
        assert!(ok(&r[3]).contains("Edited a.txt"));
        refused(&r[4], &["changed since you read it"]);
        assert!(ok(&r[5]).contains("Appended to a.txt"));
        let reserved = ok(&r[6]);
        assert!(reserved.contains("until you call release."), "{reserved}");
        refused(&r[7], &["b/x.txt"]);
        assert!(ok(&r[8]).contains("reserved b/"), "{}", r[8]);
        assert!(ok(&r[9]).contains("Released b/"), "{}", r[9]);
        ok(&r[10]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "one\n2\nthree\nfour\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("b/x.txt")).unwrap_or_default(),
        "other\n"
    );
}

#[test]
fn two_modern_calls_without_identity_never_share_a_read() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let script = json!({
            "agents": {"one": modern(&server, &token), "two": modern(&server, &token)},
            "steps": [
                call("one", "read_file", json!({"path": "a.txt"})),
                call("one", "write_file", json!({"path": "a.txt", "content": "lost?\n"})),
                call("two", "read_file", json!({"path": "a.txt"})),
                call("two", "write_file", json!({"path": "a.txt", "content": "lost?\n"})),
                // A reservation without identity is the minted agent's, and
                // says so; nobody else can release it.
                call("one", "reserve", json!({"paths": ["a.txt"]})),
                call("two", "release", json!({"paths": ["a.txt"]})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        refused(&r[1], &["you have not read it"]);
        ok(&r[2]);
        refused(&r[3], &["you have not read it"]);
        let handles: Vec<&str> = r.iter().map(handle).collect();
        let mut distinct = handles.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), handles.len(), "{handles:?}");
        ok(&r[4]);
        asks_to_pass(&r[4]);
        refused(&r[5], &["no reservation"]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "one\ntwo\nthree\n"
    );
}

#[test]
fn a_modern_stdio_client_through_the_bridge_is_one_agent_pinned_or_at_its_defaults() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let bridge = |mode: Option<&str>| {
            let mut agent = json!({"stdio": [env!("CARGO_BIN_EXE_writ"), "mcp", root], "client": true});
            if let Some(mode) = mode {
                agent["mode"] = json!(mode);
            }
            agent
        };
        let script = json!({
            "agents": {"pinned": bridge(Some("2026-07-28")), "auto": bridge(None)},
            "steps": [
                {"agent": "pinned", "tool": "read_file", "args": {"path": "a.txt"}, "protocol": true},
                // The bridge carries the handle: no `agent` needed.
                call("pinned", "edit_file", json!({"path": "a.txt", "old_string": "one", "new_string": "1"})),
                {"agent": "auto", "tool": "read_file", "args": {"path": "a.txt"}, "protocol": true},
                call("auto", "edit_file", json!({"path": "a.txt", "old_string": "two", "new_string": "2"})),
                call("pinned", "reserve", json!({"paths": ["c/"]})),
                call("auto", "write_file", json!({"path": "c/d.txt", "content": "x"})),
                call("pinned", "release", json!({})),
                call("auto", "write_file", json!({"path": "c/d.txt", "content": "x"})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        assert_eq!(r[0]["protocol"], "2026-07-28", "{}", r[0]);
        assert_eq!(r[2]["protocol"], "2026-07-28", "{}", r[2]);
        ok(&r[0]);
        ok(&r[1]);
        assert_eq!(handle(&r[0]), handle(&r[1]));
        ok(&r[2]);
        ok(&r[3]);
        assert_ne!(handle(&r[0]), handle(&r[2]), "two bridges are two agents");
        ok(&r[4]);
        refused(&r[5], &["c/d.txt"]);
        assert!(ok(&r[6]).contains("Released your reservation"), "{}", r[6]);
        ok(&r[7]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "1\n2\nthree\n"
    );
}

#[test]
fn a_client_that_opens_a_session_per_call_continues_by_its_handle() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        // Handshake-era sessions, one per call, without a name (as
        // langchain-mcp-adapters' `get_tools()` opens them).
        let legacy = json!({"http": format!("{}/mcp", server.url()), "token": token});
        let script = json!({
            "agents": {"s1": legacy, "s2": legacy, "s3": legacy, "s4": legacy},
            "steps": [
                call("s1", "read_file", json!({"path": "a.txt"})),
                // The session's reservation goes with it, and it says so.
                call("s1", "reserve", json!({"paths": ["r/"]})),
                {"agent": "s1", "close": true},
                // The next session passes the handle: it has read a.txt.
                {"agent": "s2", "tool": "edit_file", "args": {"path": "a.txt", "old_string": "three", "new_string": "3"}, "agent_from": 0},
                {"agent": "s2", "close": true},
                // A session that forgot it is refused with the content...
                call("s3", "edit_file", json!({"path": "a.txt", "old_string": "two", "new_string": "2"})),
                {"agent": "s3", "close": true},
                // ...and the next one that passes the handle of that refusal lands.
                {"agent": "s4", "tool": "edit_file", "args": {"path": "a.txt", "old_string": "two", "new_string": "2"}, "agent_from": 5},
                call("s4", "write_file", json!({"path": "r/x.txt", "content": "free\n"})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        asks_to_pass(&r[0]);
        // Only its reads outlive the session, and the sentence says so.
        let told = r[0]["text"].as_str().unwrap_or_default();
        assert!(told.contains("what you read here carries over"), "{told}");
        assert!(told.contains("or this MCP session ends"), "{told}");
        let reserved = ok(&r[1]);
        assert!(reserved.contains("or this MCP session ends"), "{reserved}");
        assert!(ok(&r[3]).contains("Edited a.txt"), "{}", r[3]);
        refused(&r[5], &["this counts as reading it", "two"]);
        asks_to_pass(&r[5]);
        assert!(ok(&r[7]).contains("Edited a.txt"), "{}", r[7]);
        ok(&r[8]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "one\n2\n3\n"
    );
}

#[test]
fn every_tool_of_both_sets_takes_an_agent_mirrored_into_a_header() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let mut filesystem = modern(&server, &token);
        filesystem["http"] = json!(format!("{}/mcp?tools=filesystem", server.url()));
        let script = json!({
            "agents": {"writ": modern(&server, &token), "fs": filesystem},
            "steps": [
                {"agent": "writ", "list_tools": true},
                {"agent": "fs", "list_tools": true},
                {"agent": "fs", "tool": "read_text_file", "args": {"path": root.join("a.txt")}},
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        for (listing, count) in [(&r[0], 10), (&r[1], 14)] {
            let tools = listing["tools"]
                .as_array()
                .unwrap_or_else(|| panic!("{listing}"));
            assert_eq!(tools.len(), count, "{listing}");
            for tool in tools {
                let agent = &tool["input_schema"]["properties"]["agent"];
                assert_eq!(agent["type"], "string", "{tool}");
                assert_eq!(agent["x-mcp-header"], "Writ-Agent", "{tool}");
                assert!(
                    !tool["input_schema"]["required"]
                        .as_array()
                        .is_some_and(|r| r.contains(&json!("agent")))
                );
            }
        }
        // The filesystem set's structured result keeps its `content` and
        // names the agent beside it.
        ok(&r[2]);
        assert!(r[2]["structured"]["content"].is_string(), "{}", r[2]);
        asks_to_pass(&r[2]);
        server.shutdown().await;
    });
}

#[test]
fn an_actor_tokens_modern_reservation_outlives_its_call_but_not_a_revoke() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let session = writ::remote::Session::connect(server.url(), &token)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let worker = session
            .actor("worker", writ::Grant::workspace(&root))
            .await
            .unwrap_or_else(|e| panic!("actor: {e}"));
        let agents = json!({"worker": modern(&server, worker.token()), "other": modern(&server, &token)});
        let reserve = json!({
            "agents": agents,
            "steps": [
                call("worker", "reserve", json!({"paths": ["src/"]})),
                call("other", "write_file", json!({"path": "src/x.rs", "content": "other\n"})),
            ],
        });
        let r = run(reserve, scratch.path().to_path_buf()).await;
        // The token is the identity: no handle to pass, none asked for.
        let reserved = ok(&r[0]);
        assert!(reserved.contains("until you call release."), "{reserved}");
        assert_eq!(handle(&r[0]), "worker");
        assert!(!r[0]["text"].as_str().unwrap_or_default().contains("Pass \""));
        refused(&r[1], &["'worker'", "src/x.rs"]);
        // Revoking the actor's lease frees what its calls reserved at once.
        let lease = worker.lease().to_string();
        session
            .call("lease.revoke", json!({"lease": lease}))
            .await
            .unwrap_or_else(|e| panic!("revoke: {e}"));
        let dump = server.scheduler().dump();
        assert!(dump.holds.is_empty(), "{dump}");
        let after = json!({
            "agents": {"other": modern(&server, &token)},
            "steps": [call("other", "write_file", json!({"path": "src/x.rs", "content": "other\n"}))],
        });
        ok(&run(after, scratch.path().to_path_buf()).await[0]);
        server.shutdown().await;
    });
}

/// The benchmarks' own client of the current revision (hyper, no SDK):
/// what it sends is what the revision requires, and carrying the handle it
/// was given costs it no call.
#[test]
fn a_raw_modern_client_carries_its_handle_with_no_extra_call() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let url = format!("{}/mcp", server.url());
        let mut client = http_client::McpHttp::modern(&url, server.token());
        // `server/discover` names both eras' revisions.
        let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}}}});
        let reply = client
            .post_with(&discover, &[("mcp-method", "server/discover")])
            .await;
        let versions = reply
            .message()
            .map(|m| m["result"]["supportedVersions"].clone())
            .unwrap_or_default();
        for version in ["2025-06-18", "2025-11-25", "2026-07-28"] {
            assert!(
                versions
                    .as_array()
                    .is_some_and(|v| v.contains(&json!(version))),
                "{version} in {versions}: {}",
                reply.body
            );
        }
        let (error, text) = client.call("read_file", json!({"path": "a.txt"})).await;
        assert!(!error, "{text}");
        let (error, text) = client
            .call(
                "edit_file",
                json!({"path": "a.txt", "old_string": "two", "new_string": "2"}),
            )
            .await;
        assert!(!error, "{text}");
        let mut other = http_client::McpHttp::modern(&url, server.token());
        let (error, text) = other
            .call("append_file", json!({"path": "a.txt", "content": "x\n"}))
            .await;
        assert!(error, "an anonymous call has read nothing: {text}");
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "one\n2\nthree\n"
    );
}

/// A call of the current revision has no session to count, so the agent it
/// mints counts against its token's `--max-mcp-sessions` until it goes:
/// calls that never pass their handle cannot grow the server without bound.
#[test]
fn minted_agents_count_against_the_tokens_session_cap() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(Options::new(&root).config(config).max_mcp_sessions(2))
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        let url = format!("{}/mcp", server.url());
        let mut first = http_client::McpHttp::modern(&url, server.token());
        for n in 0..2 {
            let mut anonymous = http_client::McpHttp::modern(&url, server.token());
            let (error, text) = anonymous.call("read_file", json!({"path": "a.txt"})).await;
            assert!(!error, "call {n}: {text}");
            if n == 0 {
                first = anonymous;
            }
        }
        let mut third = http_client::McpHttp::modern(&url, server.token());
        let (error, text) = third.call("read_file", json!({"path": "a.txt"})).await;
        assert!(error, "a third minted agent is refused: {text}");
        assert!(text.contains("--max-mcp-sessions 2"), "{text}");
        // An agent that passes its handle is not a new one.
        let (error, text) = first.call("read_file", json!({"path": "a.txt"})).await;
        assert!(!error, "{text}");
        server.shutdown().await;
    });
}

/// `writ mcp` on a scheduler of its own (no server) serves one client, so
/// a modern stdio client is one agent for the life of the process: no
/// handle to carry, and reads count for its writes.
#[test]
fn a_modern_stdio_client_of_an_embedded_writ_mcp_is_one_agent() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let embedded =
        json!({"stdio": [env!("CARGO_BIN_EXE_writ"), "mcp", root, "--embedded"], "client": true});
    let script = json!({
        "agents": {"e": embedded},
        "steps": [
            {"agent": "e", "tool": "read_file", "args": {"path": "a.txt"}, "protocol": true},
            call("e", "write_file", json!({"path": "a.txt", "content": "embedded\n"})),
        ],
    });
    let r = driver::run(&script, scratch.path());
    assert_eq!(r[0]["protocol"], "2026-07-28", "{}", r[0]);
    ok(&r[0]);
    ok(&r[1]);
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "embedded\n"
    );
}
