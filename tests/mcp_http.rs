//! `/mcp` on `writ serve` (Streamable HTTP), driven by the official MCP
//! Python SDK: several agents share one scheduler.
//!
//! Needs python3 with its venv module; the SDK is installed into a venv
//! under `target/` on first run (network needed once).

#![cfg(all(feature = "mcp", feature = "server", feature = "remote"))]

#[path = "common/mcp_driver.rs"]
mod driver;
#[path = "common/mcp_http_client.rs"]
mod http_client;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use driver::{call, ok, refused};
use serde_json::{Value, json};
use writ::server::{Options, Server};

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let root = fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
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
            .call_wait(Duration::from_millis(300))
            .lease_ttl(Duration::from_secs(5)),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

/// The URL and header docs/AGENTS.md gives for an HTTP agent.
fn http_agent(server: &Server, token: &str) -> Value {
    json!({"http": format!("{}/mcp", server.url()), "token": token})
}

/// Runs the driver off the runtime's threads (it blocks on the Python
/// process while the server keeps serving).
async fn run(script: Value, scratch: PathBuf) -> Vec<Value> {
    tokio::task::spawn_blocking(move || driver::run(&script, &scratch))
        .await
        .unwrap_or_else(|e| panic!("driver thread: {e}"))
}

#[test]
fn two_agents_editing_one_file_the_second_is_refused_with_the_current_content() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("plan.md"), "# Plan\n- a\n- b\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let script = json!({
            "agents": {"alpha": http_agent(&server, &token), "beta": http_agent(&server, &token)},
            "steps": [
                call("alpha", "read_file", json!({"path": "plan.md"})),
                call("beta", "read_file", json!({"path": "plan.md"})),
                call("alpha", "edit_file", json!({"path": "plan.md", "old_string": "- a", "new_string": "- a (alpha)"})),
                call("beta", "edit_file", json!({"path": "plan.md", "old_string": "- b", "new_string": "- b (beta)"})),
                call("beta", "edit_file", json!({"path": "plan.md", "old_string": "- b", "new_string": "- b (beta)"})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        ok(&r[1]);
        ok(&r[2]);
        // The refusal shows beta what alpha made of the file, and counts
        // as beta's read of it: its next edit needs no read_file.
        refused(
            &r[3],
            &["changed since you read it", "'alpha'", "     2\t- a (alpha)\n"],
        );
        ok(&r[4]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("plan.md")).unwrap_or_default(),
        "# Plan\n- a (alpha)\n- b (beta)\n"
    );
}

/// A write refused for want of a current read (`NotRead`, `Stale`) carries
/// the file as the read tool shows it — numbered, the tail for an append,
/// plain text in the filesystem tool set — and records it as the agent's
/// read: the next write passes without a read. The rule itself holds: a
/// change after the refusal refuses the retry again, and a file the
/// refusal could not show (binary) is not marked as read.
#[test]
fn a_refusal_for_want_of_a_read_carries_the_current_content_as_the_read() {
    let (_dir, root) = workspace();
    let lines: String = (1..=30).map(|n| format!("line {n}\n")).collect();
    fs::write(root.join("log.md"), &lines).unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("plan.md"), "- a\n- b\n").unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("blob.bin"), [0u8, 1, 2, 0]).unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let url = format!("{}/mcp", server.url());
        let session = |name: &'static str, url: String| {
            let client =
                http_client::McpHttp::new(&url, server.token()).with_header("Writ-Agent", name);
            async move {
                let mut client = client;
                assert_eq!(client.initialize(name).await.status, 200);
                client
            }
        };
        let mut alpha = session("alpha", url.clone()).await;
        let mut beta = session("beta", url.clone()).await;
        let edit =
            |old: &str, new: &str| json!({"path": "plan.md", "old_string": old, "new_string": new});

        // NotRead: the whole file, numbered; then the edit passes unread.
        let (error, text) = beta.call("edit_file", edit("- b", "- b (beta)")).await;
        assert!(error, "{text}");
        assert!(
            text.contains("plan.md exists and you have not read it"),
            "{text}"
        );
        assert!(text.contains("\n     1\t- a\n     2\t- b\n"), "{text}");
        assert!(text.contains("without calling read_file"), "{text}");
        let (error, text) = beta.call("edit_file", edit("- b", "- b (beta)")).await;
        assert!(!error, "the refusal did not count as beta's read: {text}");

        // Stale: alpha read before beta's edit; the refusal names beta and
        // shows beta's line.
        let (error, text) = alpha.call("read_file", json!({"path": "log.md"})).await;
        assert!(!error, "{text}");
        let (error, text) = beta.call("read_file", json!({"path": "log.md"})).await;
        assert!(!error, "{text}");
        let (error, text) = beta
            .call(
                "append_file",
                json!({"path": "log.md", "content": "beta\n"}),
            )
            .await;
        assert!(!error, "{text}");
        // An append shows the tail only: the last 20 of 31 lines.
        let (error, text) = alpha
            .call(
                "append_file",
                json!({"path": "log.md", "content": "alpha\n"}),
            )
            .await;
        assert!(error, "{text}");
        assert!(
            text.contains("changed since you read it ('beta' wrote it"),
            "{text}"
        );
        assert!(
            text.contains("    12\tline 12\n") && text.contains("    31\tbeta\n"),
            "{text}"
        );
        assert!(!text.contains("\tline 11\n"), "more than the tail: {text}");
        let (error, text) = alpha
            .call(
                "append_file",
                json!({"path": "log.md", "content": "alpha\n"}),
            )
            .await;
        assert!(!error, "the tail did not count as alpha's read: {text}");

        // A change after the refusal is refused again, with the newer content.
        let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
        assert!(error && text.contains("     2\t- b (beta)\n"), "{text}");
        let (error, text) = beta.call("read_file", json!({"path": "plan.md"})).await;
        assert!(!error, "{text}");
        let (error, text) = beta
            .call("edit_file", edit("- b (beta)", "- b (beta 2)"))
            .await;
        assert!(!error, "{text}");
        let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
        assert!(
            error && text.contains("'beta'") && text.contains("     2\t- b (beta 2)\n"),
            "{text}"
        );
        let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
        assert!(!error, "{text}");

        // A binary file is shown nothing, so it stays unread.
        for _ in 0..2 {
            let (error, text) = alpha
                .call("write_file", json!({"path": "blob.bin", "content": "text"}))
                .await;
            assert!(error && text.contains("read it first"), "{text}");
        }

        // The filesystem tool set shows the file as read_text_file does.
        let mut fs_agent = session("gamma", format!("{url}?tools=filesystem")).await;
        let path = root.join("plan.md").display().to_string();
        let (error, text) = fs_agent
            .call("write_file", json!({"path": path, "content": "gamma\n"}))
            .await;
        assert!(error, "{text}");
        assert!(text.contains("\n\n- a (alpha)\n- b (beta 2)\n"), "{text}");
        assert!(text.contains("without calling read_text_file"), "{text}");
        let (error, text) = fs_agent
            .call("write_file", json!({"path": path, "content": "gamma\n"}))
            .await;
        assert!(!error, "{text}");
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("plan.md")).unwrap_or_default(),
        "gamma\n"
    );
    assert!(
        fs::read_to_string(root.join("log.md"))
            .unwrap_or_default()
            .ends_with("line 30\nbeta\nalpha\n")
    );
    assert_eq!(
        fs::read(root.join("blob.bin")).unwrap_or_default(),
        [0u8, 1, 2, 0]
    );
}

#[test]
fn reserve_blocks_another_agent_and_release_frees_it() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let script = json!({
            "agents": {"alpha": http_agent(&server, &token), "beta": http_agent(&server, &token)},
            "steps": [
                call("alpha", "reserve", json!({"paths": ["src/"], "note": "renaming the parser API"})),
                call("beta", "write_file", json!({"path": "src/lex.rs", "content": "// beta\n"})),
                call("beta", "reserve", json!({"paths": ["src/lex.rs", "docs/"]})),
                call("beta", "writ_status", json!({})),
                call("alpha", "write_file", json!({"path": "src/lex.rs", "content": "// alpha\n"})),
                call("alpha", "release", json!({})),
                call("beta", "read_file", json!({"path": "src/lex.rs"})),
                call("beta", "write_file", json!({"path": "src/lex.rs", "content": "// beta\n"})),
                call("beta", "reserve", json!({"paths": ["docs/"]})),
                call("beta", "release", json!({"paths": ["docs/"]})),
                call("beta", "release", json!({"paths": ["docs/"]})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        assert!(ok(&r[0]).contains("Reserved src/"));
        refused(&r[1], &["'alpha'", "src/lex.rs"]);
        refused(&r[2], &["'alpha'"]);
        let status = ok(&r[3]);
        assert!(status.contains("'alpha' reserved src/"), "{status}");
        assert!(status.contains("renaming the parser API"), "{status}");
        ok(&r[4]);
        ok(&r[5]);
        ok(&r[6]);
        ok(&r[7]);
        ok(&r[8]);
        ok(&r[9]);
        refused(&r[10], &["no reservation"]);
        // beta's refused `reserve` left nothing behind: src/lex.rs and docs/ are free.
        let dump = server.scheduler().dump();
        assert!(dump.holds.is_empty(), "{dump}");
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("src/lex.rs")).unwrap_or_default(),
        "// beta\n"
    );
}

#[test]
fn a_closed_session_frees_its_reservations_and_its_actor() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let script = json!({
            "agents": {"alpha": http_agent(&server, &token), "beta": http_agent(&server, &token)},
            "steps": [
                call("alpha", "reserve", json!({"paths": ["src/"]})),
                call("beta", "write_file", json!({"path": "src/a.rs", "content": "// beta\n"})),
                {"agent": "alpha", "close": true},
                call("beta", "write_file", json!({"path": "src/a.rs", "content": "// beta\n"})),
                call("beta", "writ_status", json!({})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        refused(&r[1], &["'alpha'"]);
        assert_eq!(r[2]["closed"], true);
        ok(&r[3]);
        let status = ok(&r[4]);
        assert!(!status.contains("alpha"), "{status}");
        let dump = server.scheduler().dump();
        assert!(!dump.actors.iter().any(|a| a.name == "alpha"), "{dump}");
        server.shutdown().await;
    });
}

#[test]
fn an_actor_token_session_is_fenced_like_its_actor() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let session = writ::remote::Session::connect(server.url(), server.token())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let worker = session
            .actor("worker", writ::Grant::fenced(&root, ["src/"]))
            .await
            .unwrap_or_else(|e| panic!("actor: {e}"));
        let token = server.token().to_string();
        let script = json!({
            "agents": {
                "claude-code": http_agent(&server, worker.token()),
                "other": http_agent(&server, &token),
                "intruder": http_agent(&server, "a-0-1.not-a-secret"),
                "anonymous": {"http": format!("{}/mcp", server.url())},
            },
            "steps": [
                call("claude-code", "write_file", json!({"path": "src/a.rs", "content": "// worker\n"})),
                call("claude-code", "write_file", json!({"path": "docs/b.md", "content": "no\n"})),
                call("claude-code", "writ_status", json!({})),
                call("other", "write_file", json!({"path": "src/c.rs", "content": "no\n"})),
                call("other", "write_file", json!({"path": "docs/b.md", "content": "yes\n"})),
                call("intruder", "writ_status", json!({})),
                call("anonymous", "writ_status", json!({})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        refused(&r[1], &["docs/b.md"]);
        assert!(ok(&r[2]).contains("You are 'worker'"));
        refused(&r[3], &["'worker'"]);
        ok(&r[4]);
        for (i, result) in r[5..].iter().enumerate() {
            let error = result["error"].as_str().unwrap_or_default();
            assert!(!error.is_empty(), "step {} should fail to connect: {result}", i + 5);
        }
        worker.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        session.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("src/a.rs")).unwrap_or_default(),
        "// worker\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("docs/b.md")).unwrap_or_default(),
        "yes\n"
    );
    assert!(!root.join("src/c.rs").exists());
}

#[test]
fn stdio_agents_bridged_to_one_server_share_its_scheduler() {
    let (_dir, root) = workspace();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("notes.md"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(
            Options::new(&root)
                .config(config)
                .discovery_file(root.join(".writ/serve.json")),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        // The command line docs/AGENTS.md gives: the discovery file finds the server.
        let stdio = json!({"stdio": [env!("CARGO_BIN_EXE_writ"), "mcp", root]});
        let script = json!({
            "agents": {"alpha": stdio.clone(), "beta": stdio},
            "steps": [
                call("alpha", "read_file", json!({"path": "notes.md"})),
                call("beta", "read_file", json!({"path": "notes.md"})),
                call("alpha", "append_file", json!({"path": "notes.md", "content": "alpha\n"})),
                call("beta", "append_file", json!({"path": "notes.md", "content": "beta\n"})),
                call("beta", "reserve", json!({"paths": ["notes.md"]})),
                call("alpha", "read_file", json!({"path": "notes.md"})),
                call("alpha", "append_file", json!({"path": "notes.md", "content": "again\n"})),
                {"agent": "beta", "close": true},
                call("alpha", "read_file", json!({"path": "notes.md"})),
                call("alpha", "append_file", json!({"path": "notes.md", "content": "again\n"})),
            ],
        });
        let r = run(script, scratch.path().to_path_buf()).await;
        ok(&r[0]);
        ok(&r[1]);
        ok(&r[2]);
        refused(&r[3], &["changed since you read it", "'alpha'"]);
        ok(&r[4]);
        ok(&r[5]);
        refused(&r[6], &["'beta'"]);
        ok(&r[8]);
        ok(&r[9]);
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
        "one\nalpha\nagain\n"
    );
}

#[test]
fn only_this_servers_live_tokens_open_an_mcp_session() {
    let (_dir, root) = workspace();
    let (_other_dir, other_root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let other = start(&other_root).await;
        let url = format!("{}/mcp", server.url());
        let here = writ::remote::Session::connect(server.url(), server.token())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let there = writ::remote::Session::connect(other.url(), other.token())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let foreign = there
            .actor("foreign", writ::Grant::workspace(&other_root))
            .await
            .unwrap_or_else(|e| panic!("actor: {e}"));
        let revoked = here
            .actor("revoked", writ::Grant::workspace(&root))
            .await
            .unwrap_or_else(|e| panic!("actor: {e}"));
        here.call("lease.revoke", json!({"lease": revoked.lease()}))
            .await
            .unwrap_or_else(|e| panic!("revoke: {e}"));
        let live = here
            .actor("live", writ::Grant::workspace(&root))
            .await
            .unwrap_or_else(|e| panic!("actor: {e}"));
        let names = |server: &Server| {
            let mut names: Vec<String> = server
                .scheduler()
                .dump()
                .actors
                .iter()
                .map(|a| a.name.clone())
                .collect();
            names.sort();
            names
        };
        let before = names(&server);
        assert_eq!(before, ["live"]);

        // Another server's session token, another server's actor token
        // (whose handle names that server), a revoked lease's token, and a
        // well-formed token of this server's instance that was never given.
        let instance = live.handle().split('-').nth(1).unwrap_or_default();
        let forged = format!("a-{instance}-1.{}", "0".repeat(64));
        for token in [other.token(), foreign.token(), revoked.token(), &forged] {
            let mut client = http_client::McpHttp::new(&url, token);
            let reply = client.initialize("intruder").await;
            assert_eq!(reply.status, 401, "{token}: {}", reply.body);
            assert!(reply.body.contains("unauthorized"), "{}", reply.body);
            assert_eq!(names(&server), before, "a refused token created nothing");
        }

        // The same request with this server's tokens opens a session (so
        // the refusals above were about the token, not the request)...
        let mut session_client = http_client::McpHttp::new(&url, server.token());
        assert_eq!(session_client.initialize("agent").await.status, 200);
        let (error, text) = session_client.call("writ_status", json!({})).await;
        assert!(!error && text.contains("You are 'agent'"), "{text}");
        let mut actor_client = http_client::McpHttp::new(&url, live.token());
        assert_eq!(actor_client.initialize("live-agent").await.status, 200);
        let (error, text) = actor_client.call("writ_status", json!({})).await;
        assert!(!error && text.contains("You are 'live'"), "{text}");

        // ...and once the actor's lease is revoked, its open MCP session's
        // next request is refused as well.
        here.call("lease.revoke", json!({"lease": live.lease()}))
            .await
            .unwrap_or_else(|e| panic!("revoke: {e}"));
        let reply = actor_client.request("tools/list", json!({})).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
        assert!(names(&server).iter().all(|n| n != "live"));

        session_client.close().await;
        // `here`'s lease is the one revoked above: nothing left to close.
        drop((foreign, revoked, live, here));
        there.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        other.shutdown().await;
        server.shutdown().await;
    });
}

/// Waits (bounded) until the server's table satisfies `ready`.
async fn until(server: &Server, what: &str, ready: impl Fn(&writ::Dump) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready(&server.scheduler().dump()) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            server.scheduler().dump()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_contested_write_waits_out_a_read_or_a_write_then_proceeds_or_is_refused() {
    let (_dir, root) = workspace();
    fs::write(root.join("notes.md"), "start\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        for call_wait in [Duration::from_secs(30), Duration::from_millis(300)] {
            let config = writ::Config::default().durability(writ::Durability::Process);
            let server = Server::start(Options::new(&root).config(config).call_wait(call_wait))
                .await
                .unwrap_or_else(|e| panic!("start: {e}"));
            let holder = server
                .scheduler()
                .actor("holder", writ::Grant::workspace(&root))
                .unwrap_or_else(|e| panic!("actor: {e}"));
            let mut client =
                http_client::McpHttp::new(&format!("{}/mcp", server.url()), server.token());
            assert_eq!(client.initialize("writer").await.status, 200);
            for (n, shared) in [true, false].into_iter().enumerate() {
                let (error, text) = client.call("read_file", json!({"path": "notes.md"})).await;
                assert!(!error, "{text}");
                let before = fs::read_to_string(root.join("notes.md")).unwrap_or_default();
                let target = writ::Target::file("notes.md");
                let target = if shared { target.shared() } else { target };
                let hold = holder
                    .request([target])
                    .label("working")
                    .try_admit()
                    .unwrap_or_else(|e| panic!("hold: {e}"));
                let content = format!("write {n}\n");
                let writing = tokio::spawn({
                    let content = content.clone();
                    async move {
                        let result = client
                            .call(
                                "write_file",
                                json!({"path": "notes.md", "content": content}),
                            )
                            .await;
                        (client, result)
                    }
                });
                let what = if shared { "a read" } else { "a write" };
                if call_wait > Duration::from_secs(1) {
                    // Released once the write waits for it: the write proceeds.
                    until(&server, "the write to wait", |d| {
                        d.waiters.iter().any(|w| w.actor == "writer")
                    })
                    .await;
                    drop(hold);
                    let (back, (error, text)) =
                        writing.await.unwrap_or_else(|e| panic!("call: {e}"));
                    client = back;
                    assert!(!error, "a write behind {what} must wait for it: {text}");
                    assert_eq!(
                        fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
                        content
                    );
                } else {
                    // Held past the call wait: refused, naming the holder.
                    let (back, (error, text)) =
                        writing.await.unwrap_or_else(|e| panic!("call: {e}"));
                    client = back;
                    drop(hold);
                    assert!(
                        error,
                        "a write behind {what} held too long is refused: {text}"
                    );
                    assert!(text.contains("'holder'"), "{text}");
                    assert_eq!(
                        fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
                        before,
                        "a refused write changes nothing"
                    );
                }
                let dump = server.scheduler().dump();
                assert!(dump.holds.is_empty() && dump.waiters.is_empty(), "{dump}");
            }
            client.close().await;
            drop(holder);
            server.shutdown().await;
        }
    });
}

#[test]
fn an_mcp_session_answers_only_the_token_that_opened_it() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let url = format!("{}/mcp", server.url());
        let session = writ::remote::Session::connect(server.url(), server.token())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let [victim, attacker] =
            ["victim", "attacker"].map(|name| session.actor(name, writ::Grant::workspace(&root)));
        let victim = victim.await.unwrap_or_else(|e| panic!("actor: {e}"));
        let attacker = attacker.await.unwrap_or_else(|e| panic!("actor: {e}"));
        let mut owner = http_client::McpHttp::new(&url, victim.token());
        assert_eq!(owner.initialize("victim-agent").await.status, 200);
        let (error, text) = owner.call("reserve", json!({"paths": ["src/"]})).await;
        assert!(!error, "{text}");
        let table = |server: &Server| {
            let d = server.scheduler().dump();
            let mut holds: Vec<String> = d
                .holds
                .iter()
                .map(|h| format!("{} {:?} {:?}", h.actor, h.kind, h.paths))
                .collect();
            holds.sort();
            let mut actors: Vec<String> = d.actors.iter().map(|a| a.name.clone()).collect();
            actors.sort();
            (holds, actors)
        };
        let before = table(&server);

        // The victim's session id with another actor's token, and with the
        // session token: every method is refused and nothing happens.
        for token in [attacker.token(), server.token()] {
            let mut intruder = owner.with_token(token);
            let reply = intruder
                .request(
                    "tools/call",
                    json!({"name": "write_file",
                           "arguments": {"path": "src/evil.rs", "content": "pwned\n"}}),
                )
                .await;
            assert_eq!(reply.status, 403, "{}", reply.body);
            assert!(reply.body.contains("another token"), "{}", reply.body);
            let reply = intruder
                .request("tools/call", json!({"name": "release", "arguments": {}}))
                .await;
            assert_eq!(reply.status, 403, "{}", reply.body);
            assert_eq!(intruder.listen().await, 403);
            assert_eq!(intruder.close().await, 403);
            assert_eq!(
                table(&server),
                before,
                "a refused request changed the table"
            );
        }
        assert!(!root.join("src/evil.rs").exists());

        // The session is unaffected: its own token still works, its
        // reservation still holds.
        let (error, text) = owner.call("writ_status", json!({})).await;
        assert!(!error && text.contains("You are 'victim'"), "{text}");
        assert!(text.contains("reserved src/"), "{text}");
        let (error, text) = owner
            .call(
                "write_file",
                json!({"path": "src/ok.rs", "content": "mine\n"}),
            )
            .await;
        assert!(!error, "{text}");
        assert!(owner.close().await.is_success());

        drop((victim, attacker));
        session
            .close()
            .await
            .unwrap_or_else(|e| panic!("close: {e}"));
        server.shutdown().await;
    });
}

/// Runs `writ hook claude-code` on one event, as Claude Code would, and
/// returns what it printed. A deny is also one `info` line of its log.
fn hook(root: &Path, event: Value) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["hook", "claude-code"])
        .current_dir(root)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(event.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("stdin: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(
        out.status.success(),
        "the hook must never fail the tool call"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let denied = stderr.lines().filter(|l| l.contains("hook denied")).count();
    assert_eq!(
        denied,
        usize::from(stdout.contains("\"deny\"")),
        "one log line per deny: {stderr}"
    );
    stdout
}

/// A hook event of the documented shape.
fn event(root: &Path, session: &str, when: &str, tool: &str, id: &str, file: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/dev/null",
        "cwd": root,
        "permission_mode": "default",
        "hook_event_name": when,
        "tool_name": tool,
        "tool_input": {"file_path": root.join(file), "old_string": "a", "new_string": "b"},
        "tool_use_id": id,
    })
}

#[test]
fn claude_code_hook_reaches_the_server_through_the_discovery_files_socket() {
    let (_dir, root) = workspace();
    let sockets = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("lib.rs"), "a\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let discovery = root.join(".writ/serve.json");
        let server = Server::start(
            Options::new(&root)
                .socket(sockets.path().join("writ.sock"))
                .discovery_file(&discovery),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        // The file's URL leads nowhere: only its socket reaches the server.
        let text = fs::read_to_string(&discovery).unwrap_or_else(|e| panic!("{e}"));
        let mut found: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        found["url"] = json!("http://127.0.0.1:9");
        fs::write(&discovery, found.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let r = root.clone();
        let allowed = tokio::task::spawn_blocking(move || {
            hook(
                &r,
                event(&r, "sess-dddd4444", "PostToolUse", "Read", "t0", "lib.rs"),
            );
            hook(
                &r,
                event(&r, "sess-dddd4444", "PreToolUse", "Edit", "t1", "lib.rs"),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("hook thread: {e}"));
        assert_eq!(allowed, "");
        let dump = server.scheduler().dump();
        assert!(
            dump.holds
                .iter()
                .any(|h| h.paths.iter().any(|p| p.path.ends_with("lib.rs"))),
            "the hook reserved lib.rs over the socket:\n{dump}"
        );
        server.shutdown().await;
    });
}

#[test]
fn claude_code_hook_reserves_edits_and_denies_busy_or_stale_files() {
    let (_dir, root) = workspace();
    fs::write(root.join("lib.rs"), "a\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(
            Options::new(&root)
                .config(config)
                .discovery_file(root.join(".writ/serve.json")),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        let r = root.clone();
        let (deny_busy, allowed_after, deny_stale) = tokio::task::spawn_blocking(move || {
            let root = r.as_path();
            assert_eq!(
                hook(
                    root,
                    event(root, "sess-aaaa1111", "PostToolUse", "Read", "t0", "lib.rs")
                ),
                ""
            );
            assert_eq!(
                hook(
                    root,
                    event(root, "sess-aaaa1111", "PreToolUse", "Edit", "t1", "lib.rs")
                ),
                ""
            );
            let deny_busy = hook(
                root,
                event(root, "sess-bbbb2222", "PreToolUse", "Write", "t2", "lib.rs"),
            );
            fs::write(root.join("lib.rs"), "b\n").unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                hook(
                    root,
                    event(root, "sess-aaaa1111", "PostToolUse", "Edit", "t1", "lib.rs")
                ),
                ""
            );
            hook(
                root,
                event(
                    root,
                    "sess-bbbb2222",
                    "PostToolUse",
                    "Read",
                    "t2r",
                    "lib.rs",
                ),
            );
            let allowed_after = hook(
                root,
                event(root, "sess-bbbb2222", "PreToolUse", "Write", "t3", "lib.rs"),
            );
            hook(
                root,
                event(
                    root,
                    "sess-bbbb2222",
                    "PostToolUse",
                    "Write",
                    "t3",
                    "lib.rs",
                ),
            );
            hook(
                root,
                event(root, "sess-cccc3333", "PostToolUse", "Read", "t4", "lib.rs"),
            );
            fs::write(root.join("lib.rs"), "changed by a person\n")
                .unwrap_or_else(|e| panic!("{e}"));
            let deny_stale = hook(
                root,
                event(root, "sess-cccc3333", "PreToolUse", "Edit", "t5", "lib.rs"),
            );
            (deny_busy, allowed_after, deny_stale)
        })
        .await
        .unwrap_or_else(|e| panic!("hook thread: {e}"));
        let busy: Value =
            serde_json::from_str(&deny_busy).unwrap_or_else(|e| panic!("{e}: {deny_busy}"));
        let out = &busy["hookSpecificOutput"];
        assert_eq!(out["hookEventName"], "PreToolUse");
        assert_eq!(out["permissionDecision"], "deny");
        let reason = out["permissionDecisionReason"].as_str().unwrap_or_default();
        assert!(reason.contains("claude-code-sess-aaa"), "{reason}");
        assert_eq!(allowed_after, "");
        let stale: Value =
            serde_json::from_str(&deny_stale).unwrap_or_else(|e| panic!("{e}: {deny_stale}"));
        let reason = stale["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap_or_default();
        assert!(
            reason.contains("changed since you last read it"),
            "{reason}"
        );
        // Every PreToolUse that was allowed had its PostToolUse: nothing is held.
        let dump = server.scheduler().dump();
        assert!(
            dump.holds.iter().all(|h| h.kind != writ::HoldKind::Call),
            "{dump}"
        );
        server.shutdown().await;
    });
}

/// A hook event that is not about a tool: the user sent a prompt.
fn prompt(root: &Path, session: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/dev/null",
        "cwd": root,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "tidy up lib.rs",
    })
}

#[test]
fn claude_code_hook_writes_are_history_a_rewind_restores_and_later_edits_conflict() {
    let (_dir, root) = workspace();
    let history = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("lib.rs"), "original\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let config = writ::Config::default()
            .durability(writ::Durability::Process)
            .history_dir(history.path());
        let server = Server::start(
            Options::new(&root)
                .config(config)
                .discovery_file(root.join(".writ/serve.json")),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        let session = writ::remote::Session::connect(server.url(), server.token())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let sess = "sess-aaaa1111";
        let events = move |root: PathBuf, list: Vec<Value>| {
            tokio::task::spawn_blocking(move || {
                for e in list {
                    let out = hook(&root, e);
                    assert_eq!(out, "", "the hook denied: {out}");
                }
            })
        };

        // Turn 1: Claude Code reads lib.rs and its built-in Edit rewrites it.
        let r = root.clone();
        events(
            r.clone(),
            vec![
                prompt(&r, sess),
                event(&r, sess, "PostToolUse", "Read", "t0", "lib.rs"),
                event(&r, sess, "PreToolUse", "Edit", "t1", "lib.rs"),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        fs::write(root.join("lib.rs"), "edited by claude\n").unwrap_or_else(|e| panic!("{e}"));
        events(
            r.clone(),
            vec![event(&r, sess, "PostToolUse", "Edit", "t1", "lib.rs")],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));

        let turn1 = format!("claude-code-{sess}-1");
        let report = session
            .rewind_turn(&turn1)
            .await
            .unwrap_or_else(|e| panic!("rewind: {e}"));
        assert_eq!(report["files"][0]["action"], "restored", "{report}");
        assert_eq!(
            fs::read_to_string(root.join("lib.rs")).unwrap_or_default(),
            "original\n"
        );
        session
            .call("history.redo", json!({"turn": turn1}))
            .await
            .unwrap_or_else(|e| panic!("redo: {e}"));
        assert_eq!(
            fs::read_to_string(root.join("lib.rs")).unwrap_or_default(),
            "edited by claude\n"
        );

        // Another agent reads the file; then, in turn 2, Claude Code's Write
        // replaces it. The other agent's write is refused as stale, naming
        // the Claude Code session as the writer.
        let other = session
            .actor("other", writ::Grant::workspace(&root))
            .await
            .unwrap_or_else(|e| panic!("actor: {e}"));
        other
            .set_turn("other-1")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        other
            .files()
            .read("lib.rs")
            .await
            .unwrap_or_else(|e| panic!("read: {e}"));
        events(
            r.clone(),
            vec![
                prompt(&r, sess),
                event(&r, sess, "PreToolUse", "Write", "t2", "lib.rs"),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        fs::write(root.join("lib.rs"), "rewritten by claude\n").unwrap_or_else(|e| panic!("{e}"));
        events(
            r.clone(),
            vec![event(&r, sess, "PostToolUse", "Write", "t2", "lib.rs")],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        match other.files().write("lib.rs", "other\n").await {
            Err(writ::Error::Stale { writer, .. }) => {
                assert_eq!(writer.as_deref(), Some("claude-code-sess-aaa"));
            }
            other => panic!("expected a stale write naming Claude Code, got {other:?}"),
        }
        other
            .files()
            .read("lib.rs")
            .await
            .unwrap_or_else(|e| panic!("read: {e}"));
        other
            .files()
            .write("lib.rs", "other\n")
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));

        // Rewinding turn 2 now would undo the other agent's later write:
        // refused as a conflict naming its turn, and nothing is touched.
        let turn2 = format!("claude-code-{sess}-2");
        match session.rewind_turn(&turn2).await {
            Err(writ::Error::RewindConflict { conflicts }) => {
                assert_eq!(conflicts.len(), 1, "{conflicts:?}");
                let said = conflicts[0].to_string();
                assert!(said.contains("other-1"), "{said}");
            }
            other => panic!("expected a rewind conflict, got {other:?}"),
        }
        assert_eq!(
            fs::read_to_string(root.join("lib.rs")).unwrap_or_default(),
            "other\n"
        );
        // Every reservation the hook took was released after its write.
        let dump = server.scheduler().dump();
        assert!(
            dump.holds.iter().all(|h| h.kind != writ::HoldKind::Call),
            "{dump}"
        );
        other.close().await.unwrap_or_else(|e| panic!("close: {e}"));
        session
            .close()
            .await
            .unwrap_or_else(|e| panic!("close: {e}"));
        server.shutdown().await;
    });
}

/// `/mcp` answers a session's `tools/call` itself, as one JSON reply; the
/// other requests keep rmcp's answer (an SSE stream). Both carry the same
/// JSON-RPC reply, so a client cannot tell them apart by content.
#[test]
fn tool_calls_are_answered_as_json_and_the_rest_as_rmcp_does() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let mut client =
            http_client::McpHttp::new(&format!("{}/mcp", server.url()), server.token());
        assert_eq!(client.initialize("json").await.status, 200);
        let content_type = |reply: &http_client::Reply| {
            reply
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let reply = client
            .request(
                "tools/call",
                json!({"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(content_type(&reply), "application/json", "{}", reply.body);
        let message: Value = serde_json::from_str(&reply.body)
            .unwrap_or_else(|e| panic!("one JSON reply: {e}: {}", reply.body));
        assert_eq!(message["jsonrpc"], "2.0");
        assert_eq!(message["id"], 1);
        assert_eq!(message["result"]["isError"], false, "{message}");
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap_or_default(), "a\n");
        // A refusal is a result too, never a protocol error.
        let reply = client
            .request("tools/call", json!({"name": "write_file", "arguments": {"path": "../x"}}))
            .await;
        let message = reply.message().unwrap_or_else(|| panic!("{}", reply.body));
        assert_eq!(message["result"]["isError"], true, "{message}");
        assert_eq!(message["id"], 2);
        // A string id comes back as it was sent.
        let reply = client
            .post(&json!({"jsonrpc": "2.0", "id": "call-α", "method": "tools/call",
                          "params": {"name": "writ_status", "arguments": {}}}))
            .await;
        assert_eq!(reply.message().map(|m| m["id"].clone()), Some(json!("call-α")));
        for method in ["ping", "tools/list"] {
            let reply = client.request(method, json!({})).await;
            assert_eq!(reply.status, 200, "{method}: {}", reply.body);
            assert_eq!(content_type(&reply), "text/event-stream", "{method}");
            assert!(reply.message().is_some_and(|m| m.get("result").is_some()));
        }
        // Broken calls reach rmcp, which answers them as before: the server
        // survives and the session goes on.
        for broken in [
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"arguments": {}}}),
            json!({"jsonrpc": "1.0", "id": 9, "method": "tools/call", "params": {"name": "writ_status"}}),
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": "nope"}),
        ] {
            let reply = client.post(&broken).await;
            assert!(
                reply.message().is_none_or(|m| m.get("result").is_none()),
                "{broken} must not run a tool: {}",
                reply.body
            );
        }
        let (error, text) = client.call("read_file", json!({"path": "a.txt"})).await;
        assert!(!error, "{text}");
        client.close().await;
        server.shutdown().await;
    });
}

/// A server whose contested tool calls wait up to 60 s, an in-process
/// actor "holder" to contest them, and an MCP session "writer".
struct Contested {
    server: Server,
    holder: writ::Actor,
    client: http_client::McpHttp,
}

async fn contested(root: &Path) -> Contested {
    let config = writ::Config::default().durability(writ::Durability::Process);
    let server = Server::start(
        Options::new(root)
            .config(config)
            .call_wait(Duration::from_secs(60)),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"));
    let holder = server
        .scheduler()
        .actor("holder", writ::Grant::workspace(root))
        .unwrap_or_else(|e| panic!("actor: {e}"));
    let mut client = http_client::McpHttp::new(&format!("{}/mcp", server.url()), server.token());
    assert_eq!(client.initialize("writer").await.status, 200);
    Contested {
        server,
        holder,
        client,
    }
}

/// A `tools/call` waiting for a contested path stops when the client
/// cancels it (`notifications/cancelled`): it leaves no waiter, writes
/// nothing, and the session goes on.
#[test]
fn a_cancelled_tool_call_stops_waiting_and_writes_nothing() {
    let (_dir, root) = workspace();
    fs::write(root.join("notes.md"), "start\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let Contested {
            server,
            holder,
            mut client,
        } = contested(&root).await;
        let hold = holder
            .request([writ::Target::file("notes.md")])
            .try_admit()
            .unwrap_or_else(|e| panic!("hold: {e}"));
        let writing = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .post(&json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
                                  "params": {"name": "write_file",
                                             "arguments": {"path": "notes.md", "content": "lost\n"}}}))
                    .await
            }
        });
        until(&server, "the write to wait", |d| {
            d.waiters.iter().any(|w| w.actor == "writer")
        })
        .await;
        let sent = client
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 41, "reason": "the user stopped it"}}))
            .await;
        assert_eq!(sent.status, 202, "{}", sent.body);
        let reply = tokio::time::timeout(Duration::from_secs(10), writing)
            .await
            .unwrap_or_else(|_| panic!("a cancelled call must end long before its 60 s wait"))
            .unwrap_or_else(|e| panic!("call: {e}"));
        assert!(reply.message().is_none(), "no reply to a cancelled call: {}", reply.body);
        let dump = server.scheduler().dump();
        assert!(dump.waiters.is_empty(), "{dump}");
        drop(hold);
        let dump = server.scheduler().dump();
        assert!(dump.holds.is_empty() && dump.waiters.is_empty(), "{dump}");
        assert_eq!(fs::read_to_string(root.join("notes.md")).unwrap_or_default(), "start\n");
        // Cancelling a call that already ended, or never existed, is harmless.
        let sent = client
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 41}}))
            .await;
        assert!(sent.status.is_success(), "{}", sent.status);
        let (error, text) = client.call("read_file", json!({"path": "notes.md"})).await;
        assert!(!error, "{text}");
        client.close().await;
        drop(holder);
        server.shutdown().await;
    });
}

/// SPEC §14 "Lifetime": a session lives as long as its client, not its
/// call rate. A session holding its GET stream lives on past --mcp-idle and
/// ends within the lease TTL once its stream is gone; one without a stream
/// lives --mcp-idle after its last request, then goes with its
/// reservations; DELETE ends a session at once and is answered 200.
#[test]
fn a_session_lives_as_long_as_its_client_not_its_call_rate() {
    let (_dir, root) = workspace();
    let ttl = Duration::from_millis(400);
    let idle = Duration::from_millis(2500);
    runtime().block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(
            Options::new(&root)
                .config(config)
                .lease_ttl(ttl)
                .mcp_idle(idle),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        let url = format!("{}/mcp", server.url());
        let mut streamed = http_client::McpHttp::new(&url, server.token());
        let mut quiet = http_client::McpHttp::new(&url, server.token());
        assert_eq!(streamed.initialize("streamed").await.status, 200);
        assert_eq!(quiet.initialize("quiet").await.status, 200);
        let (error, text) = streamed.call("reserve", json!({"paths": ["a/"]})).await;
        assert!(!error, "{text}");
        // The quiet session's idle time runs from its last request, which
        // the server took no earlier than this instant.
        let quiet_last = std::time::Instant::now();
        let (error, text) = quiet.call("reserve", json!({"paths": ["b/"]})).await;
        assert!(!error, "{text}");
        let (status, stream) = streamed.hold_stream().await;
        assert_eq!(status, 200);
        // The model thinks: three lease TTLs without a request. Both live.
        tokio::time::sleep(ttl * 3).await;
        let dump = server.scheduler().dump();
        assert!(
            quiet_last.elapsed() >= idle || dump.holds.iter().any(|h| h.actor == "quiet"),
            "a quiet session ended before --mcp-idle:\n{dump}"
        );
        assert!(dump.holds.iter().any(|h| h.actor == "streamed"), "{dump}");
        // Past --mcp-idle the quiet one is gone, the streamed one is not.
        until(&server, "the quiet session's reservation to go", |d| {
            d.holds.iter().all(|h| h.actor != "quiet")
        })
        .await;
        assert!(quiet_last.elapsed() >= idle, "{:?}", quiet_last.elapsed());
        let dump = server.scheduler().dump();
        assert!(dump.holds.iter().any(|h| h.actor == "streamed"), "{dump}");
        let reply = quiet
            .request("tools/call", json!({"name": "writ_status"}))
            .await;
        assert_eq!(
            reply.status, 404,
            "an ended session is unknown: {}",
            reply.body
        );
        // The client goes away (its stream's connection closes): its
        // reservation goes within the TTL, not --mcp-idle.
        stream.abort();
        let gone = std::time::Instant::now();
        until(&server, "the streamed session's reservation to go", |d| {
            d.holds.iter().all(|h| h.actor != "streamed")
        })
        .await;
        assert!(gone.elapsed() < idle, "{:?}", gone.elapsed());
        // DELETE is a plain 200, and frees at once.
        let mut closing = http_client::McpHttp::new(&url, server.token());
        assert_eq!(closing.initialize("closing").await.status, 200);
        let (error, text) = closing.call("reserve", json!({"paths": ["c/"]})).await;
        assert!(!error, "{text}");
        assert_eq!(closing.close().await, 200);
        // The session's worker drops its tools as it ends, just after the
        // answer: within moments, not a TTL.
        let closed = std::time::Instant::now();
        until(&server, "the closed session's reservation to go", |d| {
            d.holds.iter().all(|h| h.actor != "closing")
        })
        .await;
        assert!(closed.elapsed() < ttl, "{:?}", closed.elapsed());
        server.shutdown().await;
    });
}

/// SPEC §14 "Named agents": every session of one (token, name) is one
/// actor — a read in one session lets an edit in the next, and a
/// reservation outlives the session that made it — whether the name comes
/// as a header or on the URL. Unnamed sessions stay one actor each.
#[test]
fn sessions_of_one_named_agent_share_reads_and_reservations() {
    let (_dir, root) = workspace();
    fs::write(root.join("notes.md"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(
            Options::new(&root)
                .config(config)
                .call_wait(Duration::from_millis(200)),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        let url = format!("{}/mcp", server.url());
        let session_of = |name: Option<&str>, by_header: bool| {
            let client = match (name, by_header) {
                (Some(n), true) => {
                    http_client::McpHttp::new(&url, server.token()).with_header("Writ-Agent", n)
                }
                (Some(n), false) => {
                    http_client::McpHttp::new(&format!("{url}?agent={n}"), server.token())
                }
                (None, _) => http_client::McpHttp::new(&url, server.token()),
            };
            async move {
                let mut client = client;
                assert_eq!(client.initialize("langchain").await.status, 200);
                client
            }
        };
        // One session per call, as get_tools() does.
        for by_header in [true, false] {
            let mut first = session_of(Some("alice"), by_header).await;
            let (error, text) = first.call("read_file", json!({"path": "notes.md"})).await;
            assert!(!error, "{text}");
            assert_eq!(first.close().await, 200);
            let mut second = session_of(Some("alice"), by_header).await;
            let (error, text) = second
                .call(
                    "edit_file",
                    json!({"path": "notes.md", "old_string": "one", "new_string": "two"}),
                )
                .await;
            assert!(!error, "the agent's read was lost between sessions: {text}");
            let (error, text) = second
                .call(
                    "edit_file",
                    json!({"path": "notes.md", "old_string": "two", "new_string": "one"}),
                )
                .await;
            assert!(error, "an edit needs a fresh read: {text}");
            let (error, text) = second.call("read_file", json!({"path": "notes.md"})).await;
            assert!(!error, "{text}");
            let (error, text) = second
                .call(
                    "edit_file",
                    json!({"path": "notes.md", "old_string": "two", "new_string": "one"}),
                )
                .await;
            assert!(!error, "{text}");
            assert_eq!(second.close().await, 200);
        }
        let mut reserving = session_of(Some("alice"), true).await;
        let (error, text) = reserving.call("reserve", json!({"paths": ["r/"]})).await;
        assert!(!error, "{text}");
        assert_eq!(reserving.close().await, 200);
        let dump = server.scheduler().dump();
        assert!(
            dump.holds.iter().any(|h| h.actor == "alice"),
            "the reservation went with its session:\n{dump}"
        );
        let mut bob = session_of(Some("bob"), true).await;
        let (error, text) = bob
            .call("write_file", json!({"path": "r/x.md", "content": "bob\n"}))
            .await;
        assert!(error && text.contains("alice"), "{text}");
        let mut later = session_of(Some("alice"), true).await;
        let (error, text) = later.call("writ_status", json!({})).await;
        assert!(!error && text.contains("r/"), "{text}");
        let (error, text) = later.call("release", json!({})).await;
        assert!(!error, "{text}");
        // Without a name, a session is its own actor.
        let mut reader = session_of(None, false).await;
        let (error, text) = reader.call("read_file", json!({"path": "notes.md"})).await;
        assert!(!error, "{text}");
        let mut writer = session_of(None, false).await;
        let (error, text) = writer
            .call(
                "edit_file",
                json!({"path": "notes.md", "old_string": "one", "new_string": "x"}),
            )
            .await;
        assert!(error && text.contains("read"), "{text}");
        server.shutdown().await;
    });
}

/// A client that reuses the id of a call still running gets both answers:
/// neither call is taken for a cancellation of the other.
#[test]
fn a_reused_request_id_cancels_nothing() {
    let (_dir, root) = workspace();
    fs::write(root.join("notes.md"), "start\n").unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let Contested {
            server,
            holder,
            mut client,
        } = contested(&root).await;
        let (error, text) = client.call("read_file", json!({"path": "notes.md"})).await;
        assert!(!error, "{text}");
        let hold = holder
            .request([writ::Target::file("notes.md")])
            .try_admit()
            .unwrap_or_else(|e| panic!("hold: {e}"));
        let call = |name: &str, arguments: Value| {
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})
        };
        let writing = tokio::spawn({
            let client = client.clone();
            let message = call(
                "write_file",
                json!({"path": "notes.md", "content": "mine\n"}),
            );
            async move { client.post(&message).await }
        });
        until(&server, "the write to wait", |d| {
            d.waiters.iter().any(|w| w.actor == "writer")
        })
        .await;
        let status = client.post(&call("writ_status", json!({}))).await;
        let status = status
            .message()
            .unwrap_or_else(|| panic!("{}", status.body));
        assert_eq!(status["result"]["isError"], false, "{status}");
        let dump = server.scheduler().dump();
        assert!(dump.waiters.iter().any(|w| w.actor == "writer"), "{dump}");
        drop(hold);
        let written = tokio::time::timeout(Duration::from_secs(10), writing)
            .await
            .unwrap_or_else(|_| panic!("the write must proceed once the hold goes"))
            .unwrap_or_else(|e| panic!("call: {e}"));
        let written = written
            .message()
            .unwrap_or_else(|| panic!("{}", written.body));
        assert_eq!(written["result"]["isError"], false, "{written}");
        assert_eq!(
            fs::read_to_string(root.join("notes.md")).unwrap_or_default(),
            "mine\n"
        );
        client.close().await;
        drop(holder);
        server.shutdown().await;
    });
}

/// A tool call that names a foreign host or comes from a foreign page (DNS
/// rebinding, a browser tab) is refused before it reaches a tool, with the
/// right token and session: nothing is written and the session goes on.
#[test]
fn a_tool_call_from_a_foreign_host_or_origin_is_refused_and_writes_nothing() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let mut client =
            http_client::McpHttp::new(&format!("{}/mcp", server.url()), server.token());
        assert_eq!(client.initialize("victim").await.status, 200);
        let write = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                           "params": {"name": "write_file",
                                      "arguments": {"path": "owned.txt", "content": "pwned\n"}}});
        for attack in [
            ("host", "evil.example"),
            ("host", "evil.example:80"),
            ("host", "127.0.0.1.evil.example"),
            ("origin", "http://evil.example"),
            ("origin", "http://localhost.evil.example"),
        ] {
            let reply = client.post_with(&write, &[attack]).await;
            assert_eq!(reply.status, 403, "{attack:?}: {}", reply.body);
            assert!(
                reply.message().is_none_or(|m| m.get("result").is_none()),
                "{attack:?} reached a tool: {}",
                reply.body
            );
            assert!(
                !root.join("owned.txt").exists(),
                "{attack:?} wrote the file"
            );
        }
        let (error, text) = client
            .call(
                "write_file",
                json!({"path": "owned.txt", "content": "mine\n"}),
            )
            .await;
        assert!(!error, "{text}");
        assert_eq!(
            fs::read_to_string(root.join("owned.txt")).unwrap_or_default(),
            "mine\n"
        );
        client.close().await;
        server.shutdown().await;
    });
}

/// SPEC §6: a refused append carries only the file's tail, and the mark it
/// records is good for an append only — a `write_file`, an edit, a delete
/// or a move still needs a read of the whole file, so 1,000 lines the agent
/// never saw are never overwritten.
#[test]
fn a_refusal_that_carried_only_the_tail_marks_the_file_for_appends_only() {
    let (_dir, root) = workspace();
    let lines: String = (1..=1000).map(|n| format!("line {n}\n")).collect();
    fs::write(root.join("log.md"), &lines).unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let url = format!("{}/mcp", server.url());
        let append = json!({"path": "log.md", "content": "agent\n"});
        for (tool, args) in [
            (
                "write_file",
                json!({"path": "log.md", "content": "all mine\n"}),
            ),
            (
                "edit_file",
                json!({"path": "log.md", "old_string": "line 1000\n", "new_string": "x\n"}),
            ),
            ("delete_file", json!({"path": "log.md"})),
            ("move_file", json!({"from": "log.md", "to": "moved.md"})),
        ] {
            // A fresh agent each time: a refused write_file carries the
            // whole file (within the read bound), which is a read.
            let mut agent =
                http_client::McpHttp::new(&url, server.token()).with_header("Writ-Agent", tool);
            assert_eq!(agent.initialize(tool).await.status, 200);
            let (error, text) = agent.call("append_file", append.clone()).await;
            assert!(error, "{text}");
            assert!(text.contains("  1000\tline 1000"), "{text}");
            assert!(!text.contains("\tline 1\n"), "{text}");
            let (error, text) = agent.call(tool, args).await;
            assert!(error, "{tool} passed on a mark of the tail: {text}");
            assert!(text.contains("not read"), "{tool}: {text}");
            assert_eq!(
                fs::read_to_string(root.join("log.md")).unwrap_or_default(),
                lines,
                "{tool} changed the file"
            );
        }
        // Appending is what the tail was for.
        let mut agent =
            http_client::McpHttp::new(&url, server.token()).with_header("Writ-Agent", "appender");
        assert_eq!(agent.initialize("appender").await.status, 200);
        let (error, text) = agent.call("append_file", append.clone()).await;
        assert!(error, "{text}");
        let (error, text) = agent.call("append_file", append).await;
        assert!(!error, "{text}");
        server.shutdown().await;
    });
}

/// SPEC §14: a named agent opened with an actor token is that actor's
/// child; revoking the actor's lease, or dropping the actor, drops the
/// agent and its reservations at once, though its session keeps a GET
/// stream open and `--mcp-idle` is long.
#[test]
fn revoking_an_actor_drops_its_named_agents_and_their_reservations() {
    let (_dir, root) = workspace();
    fs::create_dir_all(root.join("src")).unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let server = start(&root).await;
        let rpc = http_client::McpHttp::new(&format!("{}/rpc", server.url()), server.token());
        let call = |method: &'static str, params: Value| {
            let rpc = rpc.clone();
            async move {
                let reply = rpc
                    .post(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
                    .await;
                serde_json::from_str::<Value>(&reply.body)
                    .unwrap_or_else(|e| panic!("{method}: {e}: {}", reply.body))
            }
        };
        for end in ["lease.revoke", "actor.drop"] {
            let made = call(
                "actor.create",
                json!({"name": format!("sub-{end}"), "grant": {"workspace": true}}),
            )
            .await;
            let result = &made["result"];
            let (actor, token, lease) = (
                result["actor"].as_str().unwrap_or_default().to_string(),
                result["token"].as_str().unwrap_or_default().to_string(),
                result["lease"].as_str().unwrap_or_default().to_string(),
            );
            let mut helper = http_client::McpHttp::new(&format!("{}/mcp", server.url()), &token)
                .with_header("Writ-Agent", "helper");
            assert_eq!(helper.initialize("helper").await.status, 200);
            let (error, text) = helper.call("reserve", json!({"paths": ["src/"]})).await;
            assert!(!error, "{text}");
            let (status, stream) = helper.hold_stream().await;
            assert_eq!(status, 200);
            until(&server, "the reservation", |d| {
                d.holds.iter().any(|h| h.actor == "helper")
            })
            .await;
            let ended = match end {
                "lease.revoke" => call(end, json!({"lease": lease})).await,
                _ => call(end, json!({"actor": actor})).await,
            };
            assert!(ended.get("result").is_some(), "{ended}");
            until(&server, "the agent and its reservation to go", |d| {
                !d.holds.iter().any(|h| h.actor == "helper")
                    && !d.actors.iter().any(|a| a.name == "helper")
            })
            .await;
            stream.abort();
        }
        server.shutdown().await;
    });
}

/// Anchored edits through `/mcp` (SPEC §6): with file history, an
/// `edit_file` or `append_file` whose read is stale but which cannot
/// overwrite unseen work is applied, and its result tells the model so and
/// shows what changed since its read; the filesystem set's `edit_file`
/// anchors its `edits` list all or none; an edit of a line another agent
/// changed is still refused with the current content.
#[test]
fn an_edit_that_cannot_overwrite_unseen_work_is_applied_with_the_changes_shown() {
    let (_dir, root) = workspace();
    let history = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    fs::write(root.join("reg.py"), "R = [\n    # end\n]\nV = 1\n")
        .unwrap_or_else(|e| panic!("{e}"));
    runtime().block_on(async {
        let config = writ::Config::default()
            .durability(writ::Durability::Process)
            .history_dir(history.path());
        let server = Server::start(Options::new(&root).config(config))
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        let url = format!("{}/mcp", server.url());
        let mut agents = Vec::new();
        for (name, url) in [
            ("alpha", url.clone()),
            ("beta", url.clone()),
            ("gamma", format!("{url}?tools=filesystem")),
        ] {
            let mut client =
                http_client::McpHttp::new(&url, server.token()).with_header("Writ-Agent", name);
            assert_eq!(client.initialize(name).await.status, 200);
            agents.push(client);
        }
        let [alpha, beta, gamma] = &mut agents[..] else {
            unreachable!()
        };
        let read = json!({"path": "reg.py"});
        for agent in [&mut *alpha, &mut *beta] {
            assert!(!agent.call("read_file", read.clone()).await.0);
        }
        assert!(!gamma.call("read_text_file", read.clone()).await.0);
        let entry = |who: &str| {
            json!({"path": "reg.py", "old_string": "    # end\n",
                   "new_string": format!("    \"{who}\",\n    # end\n")})
        };
        let (error, text) = alpha.call("edit_file", entry("alpha")).await;
        assert!(!error, "{text}");
        assert!(!text.contains("applied on top"), "{text}");
        let (error, text) = beta.call("edit_file", entry("beta")).await;
        assert!(!error, "{text}");
        assert!(
            text.contains("('alpha' wrote it last)")
                && text.contains("applied on top of them")
                && text.contains("+    \"alpha\",\n"),
            "{text}"
        );
        let (error, text) = beta
            .call(
                "append_file",
                json!({"path": "reg.py", "content": "W = 2\n"}),
            )
            .await;
        assert!(!error && text.contains("applied on top of them"), "{text}");
        // The filesystem set: both edits anchored, the diff of the edit
        // itself first, then what changed since gamma's read.
        let edits = json!({"path": "reg.py", "edits": [
            {"oldText": "R = [", "newText": "Q = ["},
            {"oldText": "V = 1", "newText": "V = 3"},
        ]});
        let (error, text) = gamma.call("edit_file", edits).await;
        assert!(!error, "{text}");
        assert!(
            text.contains("+V = 3") && text.contains("+W = 2\n") && text.contains("applied on top"),
            "{text}"
        );
        // Beta's read still names the start: a replace of the line gamma
        // changed, and a whole write, are refused with the content.
        let (error, text) = beta
            .call(
                "edit_file",
                json!({"path": "reg.py", "old_string": "]\n", "new_string": ")\n"}),
            )
            .await;
        assert!(
            error && text.contains("changed since you read it"),
            "{text}"
        );
        assert!(text.contains("\tV = 3\n"), "{text}");
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("reg.py")).unwrap_or_default(),
        "Q = [\n    \"alpha\",\n    \"beta\",\n    # end\n]\nV = 3\nW = 2\n"
    );
}
