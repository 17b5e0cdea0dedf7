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

use driver::{call, ok, refused, whole};
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
        let sets = [
            (&r[0], writ::mcp::TOOL_NAMES.len()),
            (&r[1], writ::mcp::FILESYSTEM_TOOL_NAMES.len()),
        ];
        for (listing, count) in sets {
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

/// Waits until `/dump` lists `count` agents that no call acts as now.
async fn idle_agents(server: &Server, count: usize) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let address = server.url().trim_start_matches("http://").to_string();
    for _ in 0..500 {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&address).await else {
            continue;
        };
        let request = format!(
            "GET /dump HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            server.token()
        );
        let mut answer = String::new();
        if stream.write_all(request.as_bytes()).await.is_err()
            || stream.read_to_string(&mut answer).await.is_err()
        {
            continue;
        }
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let dump: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        if dump["absent_agents"].as_array().map(Vec::len) == Some(count) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the dump never listed {count} idle agents");
}

/// A call of the current revision has no session to count, so the agent
/// it mints lives in a pool of its own per token, bounded as sessions are
/// (`--max-mcp-sessions`) but never counted against them: at the bound
/// the longest idle minted agent goes (SPEC §13: a call with no identity
/// never costs another client its seat, nor grows the server without
/// bound).
#[test]
fn minted_agents_have_a_pool_of_their_own_where_the_idlest_makes_room() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(Options::new(&root).config(config).max_mcp_sessions(2))
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        let url = format!("{}/mcp", server.url());
        let mut minted = Vec::new();
        for n in 0..3 {
            let mut anonymous = http_client::McpHttp::modern(&url, server.token());
            let (error, text) = anonymous.call("read_file", json!({"path": "a.txt"})).await;
            assert!(!error, "call {n}: {text}");
            minted.push(anonymous);
            // A call's agent is idle once the server has dropped the
            // call, which may come just after its answer: only an idle
            // one may make room.
            if n < 2 {
                idle_agents(&server, n + 1).await;
            }
        }
        // The third made room: the first, idle longest, went with its read;
        // the second kept its own.
        let edit = json!({"path": "a.txt", "old_string": "one", "new_string": "1"});
        let (error, text) = minted[0].call("edit_file", edit.clone()).await;
        assert!(error, "the evicted agent's read is gone: {text}");
        assert!(text.contains("you have not read it"), "{text}");
        let (error, text) = minted[1].call("edit_file", edit).await;
        assert!(!error, "{text}");
        // Sessions of the token still open, both of them.
        for name in ["late-1", "late-2"] {
            let mut session = http_client::McpHttp::new(&url, server.token());
            let reply = session.initialize(name).await;
            assert_eq!(reply.status, hyper::StatusCode::OK, "{}", reply.body);
            let (error, text) = session.call("read_file", json!({"path": "a.txt"})).await;
            assert!(!error, "{text}");
        }
        server.shutdown().await;
    });
}

/// Finding 4 of round 4: 300 calls that never pass their handle (more than
/// `--max-mcp-sessions` at its default) lock no session-token client out:
/// an `initialize` with the session token opens, a handshake client works,
/// and the minted agents stay within their bound.
#[test]
fn calls_without_identity_never_lock_session_clients_out() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let url = format!("{}/mcp", server.url());
        for n in 0..300 {
            let mut anonymous = http_client::McpHttp::modern(&url, server.token());
            let (error, text) = anonymous.call("list_dir", json!({})).await;
            assert!(!error, "call {n}: {text}");
        }
        let actors = server.scheduler().dump().actors.len();
        assert!(
            actors <= 256 + 2,
            "minted agents are bounded: {actors} actors"
        );
        let mut session = http_client::McpHttp::new(&url, server.token());
        let reply = session.initialize("claude-code").await;
        assert_eq!(reply.status, hyper::StatusCode::OK, "{}", reply.body);
        let (error, text) = session.call("read_file", json!({"path": "a.txt"})).await;
        assert!(!error, "{text}");
        let (error, text) = session
            .call("write_file", json!({"path": "a.txt", "content": "kept\n"}))
            .await;
        assert!(!error, "{text}");
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "kept\n"
    );
}

/// SPEC §14: another session passing a session's handle acts as that
/// session's agent at once, while the session lives (one agent, one set
/// of marks, whoever passes the handle), and after it ended (its reads).
#[test]
fn a_sessions_handle_is_its_agent_while_the_session_lives_and_after() {
    let (_dir, root) = workspace();
    fs::write(root.join("b.txt"), "b\n").unwrap_or_else(|e| panic!("{e}"));
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let legacy = json!({"http": format!("{}/mcp", server.url()), "token": server.token()});
        let script = json!({
            "agents": {"s1": legacy, "s2": legacy},
            "steps": [
                call("s1", "read_file", json!({"path": "a.txt"})),
                // s1 still lives: s2 passing its handle has read what s1 read...
                {"agent": "s2", "tool": "edit_file", "args": {"path": "a.txt", "old_string": "two", "new_string": "2"}, "agent_from": 0},
                // ...and what s2 reads as that agent, s1 has read.
                {"agent": "s2", "tool": "read_file", "args": {"path": "b.txt"}, "agent_from": 0},
                call("s1", "write_file", json!({"path": "b.txt", "content": "s1\n"})),
                // A reservation made by the handle is the session's, and says so.
                {"agent": "s2", "tool": "reserve", "args": {"paths": ["r/"]}, "agent_from": 0},
                call("s1", "writ_status", json!({})),
                {"agent": "s1", "close": true},
                // The session ended: its reservation went with it...
                call("s2", "write_file", json!({"path": "r/x.txt", "content": "free\n"})),
                // ...and its reads stay under the handle: the file changed
                // since (not "you have not read it"), and the refusal's
                // tail is a read for the append sent again.
                {"agent": "s2", "tool": "append_file", "args": {"path": "a.txt", "content": "four\n"}, "agent_from": 0},
                {"agent": "s2", "tool": "append_file", "args": {"path": "a.txt", "content": "four\n"}, "agent_from": 0},
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        asks_to_pass(&r[0]);
        let first = handle(&r[0]).to_string();
        assert!(ok(&r[1]).contains("Edited a.txt"), "{}", r[1]);
        assert_eq!(handle(&r[1]), first);
        ok(&r[2]);
        assert!(ok(&r[3]).contains("Wrote b.txt"), "{}", r[3]);
        let reserved = ok(&r[4]);
        assert!(reserved.contains("or this MCP session ends"), "{reserved}");
        assert!(ok(&r[5]).contains("reserved r/"), "{}", r[5]);
        ok(&r[7]);
        refused(&r[8], &["a.txt changed since you read it"]);
        assert!(ok(&r[9]).contains("Appended to a.txt"), "{}", r[9]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "one\n2\nthree\nfour\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("b.txt")).unwrap_or_default(),
        "s1\n"
    );
}

/// SPEC §14 subagents: `"agent": "PARENT/CHILD"` is the agent CHILD as a
/// child actor of the named agent PARENT, both made on first use, its own
/// marks and holds, refused against its siblings and its parent as
/// separate agents are; the per-call argument wins over the session's
/// default actor and over a `Writ-Agent` header (a bridge's), on both eras.
#[test]
fn subagents_named_parent_slash_child_are_agents_of_their_own() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start_quick(&root).await;
        let mcp = format!("{}/mcp", server.url());
        let headed = json!({"http": mcp, "token": server.token(), "headers": {"Writ-Agent": "lead"}});
        let mut modern_headed = headed.clone();
        modern_headed["client"] = json!(true);
        let as_agent = |agent: &str, tool: &str, mut args: Value| {
            args["agent"] = json!(agent);
            call("lead", tool, args)
        };
        let script = json!({
            "agents": {"lead": headed, "m": modern_headed},
            "steps": [
                as_agent("lead/one", "read_file", json!({"path": "a.txt"})),
                as_agent("lead/two", "edit_file", json!({"path": "a.txt", "old_string": "one", "new_string": "x"})),
                call("lead", "edit_file", json!({"path": "a.txt", "old_string": "one", "new_string": "x"})),
                as_agent("lead/one", "reserve", json!({"paths": ["r/"]})),
                as_agent("lead/two", "write_file", json!({"path": "r/x.txt", "content": "two\n"})),
                call("lead", "write_file", json!({"path": "r/x.txt", "content": "lead\n"})),
                {"agent": "m", "tool": "read_file", "args": {"path": "a.txt", "agent": "lead/three"}},
                as_agent("lead/one", "edit_file", json!({"path": "a.txt", "old_string": "one", "new_string": "1"})),
                as_agent("lead//x", "read_file", json!({"path": "a.txt"})),
                as_agent("lead/one", "release", json!({})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        assert_eq!(handle(&r[0]), "lead/one");
        refused(&r[1], &["you have not read it"]);
        assert_eq!(handle(&r[1]), "lead/two");
        refused(&r[2], &["you have not read it"]);
        assert_eq!(handle(&r[2]), "lead");
        ok(&r[3]);
        refused(&r[4], &["'lead/one'"]);
        refused(&r[5], &["'lead/one'"]);
        ok(&r[6]);
        assert_eq!(handle(&r[6]), "lead/three", "the argument wins over the header");
        assert!(ok(&r[7]).contains("Edited a.txt"), "{}", r[7]);
        refused(&r[8], &["empty part"]);
        ok(&r[9]);
        // Each subagent is a child actor of its parent agent.
        let dump = server.scheduler().dump();
        let id_of = |name: &str| {
            dump.actors
                .iter()
                .find(|a| a.name == name)
                .unwrap_or_else(|| panic!("no actor {name}: {dump}"))
        };
        let lead = id_of("lead").id;
        for child in ["lead/one", "lead/two", "lead/three"] {
            assert_eq!(id_of(child).parent, Some(lead), "{child}");
        }
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "1\ntwo\nthree\n"
    );
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

/// A server whose contested writes are refused after a short wait, so a
/// `Busy` refusal costs a test little.
async fn start_quick(root: &Path) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(
        Options::new(root)
            .config(config)
            .discovery_file(root.join(".writ/serve.json"))
            .call_wait(std::time::Duration::from_millis(200)),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

/// Files one tour of the tools works on, in its own folder.
fn lay_out_tour(root: &Path, dir: &str) {
    let dir = root.join(dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    for name in ["f.txt", "g.txt", "h.txt"] {
        fs::write(dir.join(name), "one\ntwo\n").unwrap_or_else(|e| panic!("{e}"));
    }
    // A 1×1 PNG, for read_media_file.
    let png = [
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R',
    ];
    fs::write(dir.join("pic.png"), png).unwrap_or_else(|e| panic!("{e}"));
}

/// One step of `who` in a tour that began at step `first`: the tour's
/// first step names no agent, every later one passes the handle it got.
fn toured(steps: &mut Vec<Value>, first: usize, who: &str, tool: &str, args: Value) -> usize {
    let mut step = json!({"agent": who, "tool": tool, "args": args});
    if steps.len() > first {
        step["agent_from"] = json!(first);
    }
    steps.push(step);
    steps.len() - 1
}

/// Every tool of writ's set, a success and each kind of refusal (`Busy`
/// on `busy/`, which another agent reserved before): the step each
/// refusal is at, with its kind.
fn writ_tour(steps: &mut Vec<Value>, who: &str, dir: &str) -> Vec<(usize, &'static str)> {
    let first = steps.len();
    let p = |name: &str| format!("{dir}/{name}");
    let mut t = |tool: &str, args: Value| toured(steps, first, who, tool, args);
    t("read_file", json!({"path": p("f.txt")}));
    let no_match = t(
        "edit_file",
        json!({"path": p("f.txt"), "old_string": "absent", "new_string": "x"}),
    );
    t(
        "edit_file",
        json!({"path": p("f.txt"), "old_string": "two", "new_string": "2"}),
    );
    let stale = t("write_file", json!({"path": p("f.txt"), "content": "w\n"}));
    t("write_file", json!({"path": p("f.txt"), "content": "w\n"}));
    let not_read = t("append_file", json!({"path": p("g.txt"), "content": "x\n"}));
    t("append_file", json!({"path": p("g.txt"), "content": "x\n"}));
    let not_read_bare = t("delete_file", json!({"path": p("h.txt")}));
    t("read_file", json!({"path": p("h.txt"), "offset": 2}));
    // A move replaces the whole file: a view of part of it is not enough.
    let partial = t("move_file", json!({"from": p("h.txt"), "to": p("h2.txt")}));
    t("read_file", json!({"path": p("h.txt")}));
    t("move_file", json!({"from": p("h.txt"), "to": p("h2.txt")}));
    t("list_dir", json!({"path": dir}));
    t("reserve", json!({"paths": [p("r/")], "note": "a tour"}));
    t("writ_status", json!({}));
    t("release", json!({}));
    let busy = t(
        "write_file",
        json!({"path": format!("busy/{dir}.txt"), "content": "x\n"}),
    );
    let bad = t("read_file", json!({"path": p("f.txt"), "bogus": 1}));
    vec![
        (no_match, "no_match"),
        (stale, "stale"),
        (not_read, "not_read"),
        (not_read_bare, "not_read"),
        (partial, "partial_view"),
        (busy, "busy"),
        (bad, "bad_arguments"),
    ]
}

/// Every tool of the filesystem set, successes and refusals, as
/// `writ_tour` does; the step of its media answer too.
fn filesystem_tour(
    steps: &mut Vec<Value>,
    who: &str,
    root: &Path,
    dir: &str,
) -> (Vec<usize>, usize) {
    let first = steps.len();
    let p = |name: &str| root.join(dir).join(name).display().to_string();
    let mut t = |tool: &str, args: Value| toured(steps, first, who, tool, args);
    t("read_text_file", json!({"path": p("f.txt")}));
    let not_read = t("write_file", json!({"path": p("g.txt"), "content": "w\n"}));
    t("write_file", json!({"path": p("g.txt"), "content": "w\n"}));
    let no_match = t(
        "edit_file",
        json!({"path": p("f.txt"), "edits": [{"oldText": "absent", "newText": "x"}]}),
    );
    t(
        "edit_file",
        json!({"path": p("f.txt"), "edits": [{"oldText": "two", "newText": "2"}]}),
    );
    t("read_file", json!({"path": p("f.txt")}));
    t(
        "read_multiple_files",
        json!({"paths": [p("f.txt"), p("g.txt")]}),
    );
    t("create_directory", json!({"path": p("d")}));
    t("list_directory", json!({"path": p("")}));
    t("list_directory_with_sizes", json!({"path": p("")}));
    t("directory_tree", json!({"path": p("")}));
    let unread_move = t(
        "move_file",
        json!({"source": p("h.txt"), "destination": p("h2.txt")}),
    );
    t("read_text_file", json!({"path": p("h.txt"), "tail": 1}));
    // A move replaces the whole file: its tail is not enough.
    let partial_move = t(
        "move_file",
        json!({"source": p("h.txt"), "destination": p("h2.txt")}),
    );
    t("read_text_file", json!({"path": p("h.txt")}));
    t(
        "move_file",
        json!({"source": p("h.txt"), "destination": p("h2.txt")}),
    );
    t("search_files", json!({"path": p(""), "pattern": "*.txt"}));
    t("get_file_info", json!({"path": p("f.txt")}));
    t("list_allowed_directories", json!({}));
    let media = t("read_media_file", json!({"path": p("pic.png")}));
    let missing = t("read_media_file", json!({"path": p("missing.png")}));
    let busy = t(
        "write_file",
        json!({"path": root.join("busy/y.txt").display().to_string(), "content": "y\n"}),
    );
    (
        vec![not_read, no_match, unread_move, partial_move, missing, busy],
        media,
    )
}

/// Asserts a tour's results: each one text in both places, validated; the
/// refusals refused (of their kind, where given); with `sentence`, the
/// handle sentence in the tour's first result only (its later calls pass
/// the handle).
#[track_caller]
fn check_tour(
    r: &[Value],
    steps: std::ops::Range<usize>,
    field: &str,
    refusals: &[(usize, &str)],
    media: Option<usize>,
    sentence: bool,
) {
    let first = steps.start;
    for i in steps {
        let result = &r[i];
        if Some(i) == media {
            let blocks = result["content"].as_array().cloned().unwrap_or_default();
            assert_eq!(blocks.len(), 1, "{result}");
            assert_eq!(blocks[0]["type"], "image", "{result}");
            assert_eq!(result["structured"]["content"][0], blocks[0], "{result}");
            assert!(result["schema_error"].is_null(), "{result}");
            continue;
        }
        let text = whole(result, field);
        if sentence {
            let handle = handle(result);
            let asked = text.contains(&format!("Pass \"agent\": \"{handle}\""));
            assert_eq!(
                asked,
                i == first,
                "the sentence on the first result only: {result}"
            );
        }
        match refusals.iter().find(|(at, _)| *at == i) {
            Some((_, kind)) => {
                assert_eq!(result["is_error"], true, "step {i}: {result}");
                if !kind.is_empty() {
                    assert_eq!(result["structured"]["error"]["kind"], *kind, "{result}");
                }
            }
            None => assert_eq!(result["is_error"], false, "step {i}: {result}"),
        }
    }
}

/// SPEC §14 results: every tool of both sets, over HTTP, on the current
/// revision and the handshake era, answers each call (successes and
/// refusals alike: `Busy`, `NotRead` and `Stale` carrying the content,
/// `NoMatch`, bad arguments) with exactly one text block, the same text in
/// `structuredContent` (with the agent and the tool's typed fields), valid
/// against the tool's output schema as the official Python SDK checks it:
/// a client that shows the model only `structuredContent` shows it all.
#[test]
fn every_result_of_both_sets_carries_its_one_text_in_both_places() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for dir in ["wm", "wh", "fm", "fh"] {
        lay_out_tour(&root, dir);
    }
    runtime().block_on(async {
        let server = start_quick(&root).await;
        let token = server.token().to_string();
        let mcp = format!("{}/mcp", server.url());
        let fs_url = format!("{mcp}?tools=filesystem");
        let script_agents = json!({
            "holder": {"http": mcp, "token": token, "headers": {"Writ-Agent": "holder"}},
            "wm": modern(&server, &token),
            "wh": {"http": mcp, "token": token},
            "fm": {"http": fs_url, "token": token, "client": true},
            "fh": {"http": fs_url, "token": token},
        });
        let mut steps = vec![call("holder", "reserve", json!({"paths": ["busy/"]}))];
        let wm = steps.len();
        let wm_refusals = writ_tour(&mut steps, "wm", "wm");
        let wh = steps.len();
        let wh_refusals = writ_tour(&mut steps, "wh", "wh");
        let fm = steps.len();
        let (fm_refusals, fm_media) = filesystem_tour(&mut steps, "fm", &root, "fm");
        let fh = steps.len();
        let (fh_refusals, fh_media) = filesystem_tour(&mut steps, "fh", &root, "fh");
        let end = steps.len();
        let listings = steps.len();
        for agent in ["wm", "wh", "fm", "fh"] {
            steps.push(json!({"agent": agent, "list_tools": true}));
        }
        let r = run(
            json!({"agents": script_agents, "steps": steps}),
            scratch.path().to_path_buf(),
        )
        .await;
        ok(&r[0]);
        check_tour(&r, wm..wh, "text", &wm_refusals, None, true);
        check_tour(&r, wh..fm, "text", &wh_refusals, None, true);
        let any = |at: Vec<usize>| at.into_iter().map(|i| (i, "")).collect::<Vec<_>>();
        check_tour(
            &r,
            fm..fh,
            "content",
            &any(fm_refusals),
            Some(fm_media),
            true,
        );
        check_tour(
            &r,
            fh..end,
            "content",
            &any(fh_refusals),
            Some(fh_media),
            true,
        );
        // The typed fields of a read and an edit.
        assert_eq!(r[wm]["structured"]["total_lines"], 2, "{}", r[wm]);
        assert_eq!(r[wm + 2]["structured"]["op"], "replace", "{}", r[wm + 2]);
        assert_eq!(r[wm + 2]["structured"]["path"], "wm/f.txt", "{}", r[wm + 2]);
        // A refusal that carries the content carries all of it in both.
        let stale = r[wm_refusals[1].0]["structured"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            stale.contains("changed since you read it") && stale.contains("2"),
            "{stale}"
        );
        // Every tool of both sets declares an output schema naming the
        // text, the agent and a refusal's error.
        for (i, field) in [
            (listings, "text"),
            (listings + 1, "text"),
            (listings + 2, "content"),
            (listings + 3, "content"),
        ] {
            let tools = r[i]["tools"].as_array().cloned().unwrap_or_default();
            assert!(tools.len() >= 10, "{}", r[i]);
            for tool in tools {
                let properties = &tool["output_schema"]["properties"];
                for name in [field, "agent", "error"] {
                    assert!(properties.get(name).is_some(), "{name} in {tool}");
                }
            }
        }
        server.shutdown().await;
    });
}

/// The same over stdio: `writ mcp` on a scheduler of its own (no handle:
/// one process, one agent) and the bridge to a server, each on the current
/// revision and the handshake era.
#[test]
fn every_result_over_stdio_carries_its_one_text_in_both_places() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for dir in ["em", "eh", "bm", "bh"] {
        lay_out_tour(&root, dir);
    }
    runtime().block_on(async {
        let server = start_quick(&root).await;
        let writ = env!("CARGO_BIN_EXE_writ");
        let embedded = |client: bool| json!({"stdio": [writ, "mcp", root, "--embedded", "--call-wait", "0.2"], "client": client});
        let bridged = |client: bool| json!({"stdio": [writ, "mcp", root], "client": client});
        let agents = json!({
            "holder": {"http": format!("{}/mcp", server.url()), "token": server.token()},
            "em": embedded(true), "eh": embedded(false),
            "bm": bridged(true), "bh": bridged(false),
        });
        let mut steps = Vec::new();
        let mut tours = Vec::new();
        for who in ["em", "eh"] {
            let first = steps.len();
            let refusals = writ_tour(&mut steps, who, who);
            tours.push((first, steps.len(), refusals, false));
        }
        steps.push(call("holder", "reserve", json!({"paths": ["busy/"]})));
        for who in ["bm", "bh"] {
            let first = steps.len();
            let refusals = writ_tour(&mut steps, who, who);
            tours.push((first, steps.len(), refusals, true));
        }
        let r = run(json!({"agents": agents, "steps": steps}), scratch.path().to_path_buf()).await;
        for (first, end, refusals, handles) in tours {
            if handles {
                // Whether the bridge's first result asks for a handle is
                // the bridge's identity to decide; the shape is not.
                check_tour(&r, first..end, "text", &refusals, None, false);
                continue;
            }
            // An embedded writ mcp is one agent: the shape holds all the
            // same, and its own scheduler's busy/ is nobody's (the other
            // embedded one may have made busy/x.txt, unread here).
            for (i, result) in r.iter().enumerate().take(end).skip(first) {
                whole(result, "text");
                match refusals.iter().find(|(at, _)| *at == i) {
                    Some((_, "busy")) => {}
                    Some(_) => assert_eq!(result["is_error"], true, "step {i}: {result}"),
                    None => assert_eq!(result["is_error"], false, "step {i}: {result}"),
                }
            }
        }
        server.shutdown().await;
    });
}
