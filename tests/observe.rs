//! What `writ serve` tells the person running it: its log on stderr and
//! `GET /metrics`. A real `writ serve` process is driven through a
//! refusal, a timeout, a deadlock, both version-gate refusals, an MCP
//! session with a contested tool call and a lapsed lease; then
//!
//! - the scrape is parsed by the official Python `prometheus-client`
//!   parser, and every counter is checked against what the test did;
//! - the log (JSON lines, `RUST_LOG=debug`) has one `info` line for each
//!   of those lifecycle events, and no token anywhere in it.
//!
//! Nothing sleeps to synchronize: each step waits for its condition with
//! a deadline.

mod common;

#[path = "common/mcp_http_client.rs"]
mod mcp_http_client;
#[path = "common/serve_process.rs"]
mod serve_process;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_http_client::McpHttp;
use serde_json::{Value, json};
use serve_process::Serve;
use writ::Grant;
use writ::remote::Session;

/// `GET path` with `token`: status and body.
async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = hyper::Request::get(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The scrape as the official Python parser reads it: one entry per
/// sample, keyed `name{label="value",...}` (labels sorted).
fn parse_with_python(scrape: &str, scratch: &Path) -> BTreeMap<String, f64> {
    let python = common::pyenv::venv_python(&["prometheus-client"]);
    let file = scratch.join("scrape.txt");
    std::fs::write(&file, scrape).unwrap();
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in family.samples:
        labels = ",".join('%s="%s"' % (k, v) for k, v in sorted(s.labels.items()))
        out[s.name + ("{" + labels + "}" if labels else "")] = s.value
print(json.dumps(out))
"#;
    let output = Command::new(python)
        .args(["-c", script])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the Python parser refused the scrape: {}\n{scrape}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Waits (deadline 20 s) until `check` holds for the server's dump.
async fn until_dump(session: &Session, what: &str, check: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let dump = session.dump().await.unwrap();
        if check(&dump) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {dump:#}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn the_log_and_the_metrics_tell_what_happened_and_never_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("c.txt"), "one\n").unwrap();
    let state = dir.path().join("state");
    let mut serve = Serve::start(
        &root,
        &state,
        &[
            // Short, so the unrenewed lease below lapses soon; three
            // keep-alive rounds long, so the live ones never do.
            "--lease-ttl",
            "2",
            "--call-wait",
            "0.3",
            "--log-format",
            "json",
        ],
        &[("RUST_LOG", "debug")],
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (scrape, secrets, counters) = rt.block_on(async {
        let session = Session::connect(&serve.url, &serve.token).await.unwrap();
        let alice = session
            .actor("alice", Grant::workspace(&root))
            .await
            .unwrap();
        let bob = session.actor("bob", Grant::workspace(&root)).await.unwrap();
        let mut secrets = vec![serve.token.clone(), alice.token().to_string()];
        secrets.push(bob.token().to_string());

        // A busy refusal and a timeout, both behind alice's call.
        let held = alice.try_admit(["a.rs"]).await.unwrap();
        assert!(bob.try_admit(["a.rs"]).await.is_err());
        let timed_out = bob
            .admit_timeout(["a.rs"], Duration::from_millis(100))
            .await;
        assert!(matches!(timed_out, Err(writ::Error::Timeout { .. })));

        // A deadlock between two fences.
        let x = alice.fence(["x/"]).await.unwrap();
        let y = bob.fence(["y/"]).await.unwrap();
        let alice_waits = alice.fence_wait(["y/"]);
        let bob_refused = async {
            until_dump(&session, "alice waits for y/", |d| {
                d["waiters"].as_array().is_some_and(|w| w.len() == 1)
            })
            .await;
            let refused = bob.fence_wait(["x/"]).await;
            assert!(matches!(refused, Err(writ::Error::Deadlock { .. })));
            y.release().await.unwrap();
        };
        let (got_y, ()) = tokio::join!(alice_waits, bob_refused);
        let got_y = got_y.unwrap();
        got_y.release().await.unwrap();
        x.release().await.unwrap();

        // The version gate: bob writes what he never read, then alice
        // writes what bob changed since she read it.
        let not_read = bob.files().write("c.txt", "bob\n").await;
        assert!(matches!(not_read, Err(writ::Error::NotRead { .. })));
        alice.files().read("c.txt").await.unwrap();
        bob.files().read("c.txt").await.unwrap();
        bob.files().write("c.txt", "bob\n").await.unwrap();
        let stale = alice.files().write("c.txt", "alice\n").await;
        assert!(matches!(stale, Err(writ::Error::Stale { .. })));

        // An MCP agent: one write that lands, one that waits behind
        // alice's call and gives up; then it leaves.
        let mut mcp = McpHttp::new(&format!("{}/mcp", serve.url), &serve.token)
            .with_header("Writ-Agent", "carol");
        assert_eq!(mcp.initialize("observe-test").await.status, 200);
        let (failed, text) = mcp
            .call("write_file", json!({"path": "m.txt", "content": "m\n"}))
            .await;
        assert!(!failed, "{text}");
        let (failed, text) = mcp
            .call("write_file", json!({"path": "a.rs", "content": "no\n"}))
            .await;
        assert!(
            failed && text.contains("alice"),
            "busy, naming alice: {text}"
        );
        assert_eq!(mcp.close().await, 200);
        held.release().await.unwrap();

        // A lease nobody renews lapses after the 2 s TTL.
        let lapsing = session
            .call(
                "actor.create",
                json!({"name": "lapsing", "grant": {"workspace": true}}),
            )
            .await
            .unwrap();
        secrets.push(lapsing["token"].as_str().unwrap().to_string());
        until_dump(&session, "the unrenewed lease lapses", |d| {
            d["actors"]
                .as_array()
                .is_some_and(|a| a.iter().all(|a| a["name"] != "lapsing"))
        })
        .await;

        // Only the session token scrapes.
        let metrics = format!("{}/metrics", serve.url);
        assert_eq!(get(&metrics, None).await.0, 401);
        assert_eq!(get(&metrics, Some(alice.token())).await.0, 403);
        let (status, scrape) = get(&metrics, Some(&serve.token)).await;
        assert_eq!(status, 200, "{scrape}");
        let counters = session.dump().await.unwrap()["counters"].clone();
        alice.close().await.unwrap();
        bob.close().await.unwrap();
        session.close().await.unwrap();
        (scrape, secrets, counters)
    });

    let samples = parse_with_python(&scrape, dir.path());
    let sample = |name: &str| -> f64 {
        *samples
            .get(name)
            .unwrap_or_else(|| panic!("no sample {name} in:\n{scrape}"))
    };
    let from_dump = |key: &str| counters[key].as_f64().unwrap();
    assert_eq!(sample("writ_admissions_total"), from_dump("admitted"));
    assert_eq!(sample("writ_waits_total"), from_dump("waited"));
    // bob's busy try; the MCP call's wait is a timeout, not a refusal.
    assert_eq!(sample(r#"writ_refusals_total{kind="busy"}"#), 1.0);
    assert_eq!(sample(r#"writ_gate_refusals_total{kind="not_read"}"#), 1.0);
    assert_eq!(sample(r#"writ_gate_refusals_total{kind="stale"}"#), 1.0);
    // bob's and the MCP call's.
    assert_eq!(sample("writ_timeouts_total"), 2.0);
    assert_eq!(sample("writ_deadlocks_total"), 1.0);
    // Three waits ended: bob's timeout, alice's fence, the MCP call's.
    assert_eq!(sample("writ_waits_total"), 3.0);
    assert_eq!(sample("writ_wait_seconds_count"), 3.0);
    assert!(sample(r#"writ_wait_seconds_bucket{le="+Inf"}"#) == 3.0);
    assert_eq!(
        sample(r#"writ_tool_calls_total{outcome="ok",tool="write_file"}"#),
        1.0
    );
    assert_eq!(
        sample(r#"writ_tool_calls_total{outcome="busy",tool="write_file"}"#),
        1.0
    );
    assert_eq!(sample("writ_mcp_sessions_opened_total"), 1.0);
    assert_eq!(sample("writ_mcp_sessions"), 0.0);
    // alice and bob and the MCP agent's line; their holds all released.
    assert_eq!(sample("writ_holds"), 0.0);
    assert_eq!(sample("writ_waiters"), 0.0);
    assert_eq!(sample("writ_events_lost_total"), 0.0);
    assert!(sample("writ_leases") >= 1.0, "alice's and bob's leases");

    serve.terminate();
    let log = std::fs::read_to_string(&serve.log).unwrap();
    for secret in &secrets {
        // An actor token is `handle.secret`: neither whole nor its secret.
        let hidden = secret.rsplit('.').next().unwrap_or(secret);
        assert!(!log.contains(hidden), "a token reached the log:\n{log}");
    }
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    let info = |message: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["level"] == "INFO" && l["fields"]["message"] == message)
            .collect()
    };
    let one = |message: &str| -> &Value {
        let found = info(message);
        assert!(!found.is_empty(), "no info line {message:?} in:\n{log}");
        found[0]
    };
    one("writ serve listening");
    // The Rust client keeps one lease for its session; the raw one its own.
    assert_eq!(info("lease created").len(), 2, "{log}");
    let busy = one("refused");
    assert_eq!(busy["fields"]["kind"], "busy", "{busy}");
    assert_eq!(busy["fields"]["path"], "a.rs", "{busy}");
    assert_eq!(busy["fields"]["holder"], "alice", "{busy}");
    let refusals: Vec<String> = info("refused")
        .iter()
        .map(|l| l["fields"]["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        refusals,
        ["busy", "not_read", "stale"],
        "one line per refusal, none for the MCP call's wait: {log}"
    );
    let timeouts = info("timed out");
    assert_eq!(timeouts.len(), 2, "{log}");
    assert_eq!(timeouts[1]["fields"]["actor"], "carol", "{log}");
    assert_eq!(timeouts[1]["fields"]["holder"], "alice", "{log}");
    let deadlock = one("deadlock refused");
    assert_eq!(deadlock["fields"]["actor"], "bob");
    assert!(
        deadlock["fields"]["cycle"]
            .as_str()
            .is_some_and(|c| c.contains("alice") && c.contains("bob")),
        "{deadlock}"
    );
    assert_eq!(one("MCP session opened")["fields"]["agent"], "carol");
    assert_eq!(one("MCP session closed")["fields"]["agent"], "carol");
    one("lease lapsed");
    one("lease revoked");
    one("writ serve stopped; everything released");
    // Everything else is at debug.
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "DEBUG" && l["fields"]["message"] == "file written"),
        "{log}"
    );
}

/// `writ top` draws on a terminal: without one it says so in one sentence
/// and fails, before it looks for a server.
#[test]
fn writ_top_without_a_terminal_says_so_and_fails() {
    let out = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["top", "--url", "http://127.0.0.1:9", "--token", "x"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
    assert!(
        stderr.contains("terminal") && stderr.contains("writ dump"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing drawn");
}

/// SPEC §13 "Names and logs": a path an agent chose is escaped in the log
/// (it can neither forge a line nor drive the terminal), a name holding a
/// control or bidi character is refused, a policy refusal is logged at
/// info and counted, and the MCP library's own lines stay out of an
/// `info` log.
#[test]
fn the_log_escapes_what_agents_choose_and_tells_policy_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let state = dir.path().join("state");
    let forged =
        "x.rs\n2026-01-01T00:00:00.000000Z  INFO writ: lease revoked lease=l1\u{1b}[31m\u{202e}";
    let mut serve = Serve::start(&root, &state, &[], &[("RUST_LOG", "info")]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scrape = rt.block_on(async {
        let session = Session::connect(&serve.url, &serve.token).await.unwrap();
        let alice = session
            .actor("alice", Grant::workspace(&root))
            .await
            .unwrap();
        let bob = session.actor("bob", Grant::workspace(&root)).await.unwrap();
        alice.files().write(forged, "one\n").await.unwrap();
        let refused = bob.files().write(forged, "two\n").await;
        assert!(
            matches!(refused, Err(writ::Error::NotRead { .. })),
            "{refused:?}"
        );
        let policy = bob.files().write(".env", "TOKEN=1\n").await;
        assert!(
            matches!(policy, Err(writ::Error::Policy { .. })),
            "{policy:?}"
        );
        let outside = bob.files().write("../out.txt", "x\n").await;
        assert!(outside.is_err(), "{outside:?}");
        for name in ["evil\u{202e}gnp.rs", "two\nlines", "esc\u{1b}[2J"] {
            let made = session
                .call(
                    "actor.create",
                    json!({"name": name, "grant": {"workspace": true}}),
                )
                .await;
            assert!(
                matches!(&made, Err(writ::Error::Protocol { .. })),
                "{name:?}: {made:?}"
            );
        }
        let mut mcp = McpHttp::new(&format!("{}/mcp", serve.url), &serve.token);
        assert_eq!(mcp.initialize("quiet").await.status, 200);
        let mut bidi = McpHttp::new(&format!("{}/mcp", serve.url), &serve.token)
            .with_header("Writ-Agent", "a\u{202e}b");
        assert_ne!(bidi.initialize("bidi").await.status, 200);
        assert_eq!(mcp.close().await, 200);
        let (status, scrape) = get(&format!("{}/metrics", serve.url), Some(&serve.token)).await;
        assert_eq!(status, 200, "{scrape}");
        alice.close().await.unwrap();
        bob.close().await.unwrap();
        session.close().await.unwrap();
        scrape
    });
    serve.terminate();
    let log = std::fs::read_to_string(&serve.log).unwrap();
    assert!(
        !log.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "a raw control or bidi character reached the log:\n{log:?}"
    );
    for line in log.lines() {
        assert!(
            line.starts_with(|c: char| c.is_ascii_digit()) && !line.starts_with("2026-01-01"),
            "a line the server did not write:\n{line}\nin:\n{log}"
        );
    }
    assert!(log.contains("x.rs\\n2026-01-01"), "{log}");
    let refused: Vec<&str> = log.lines().filter(|l| l.contains(" refused ")).collect();
    assert!(
        refused
            .iter()
            .any(|l| l.contains("kind=policy") && l.contains("path=.env")),
        "{log}"
    );
    assert!(!log.contains("holder=-") && !log.contains("None"), "{log}");
    assert!(
        !log.contains("rmcp"),
        "the MCP library logged at info:\n{log}"
    );
    let samples = parse_with_python(&scrape, dir.path());
    assert_eq!(
        samples.get(r#"writ_refusals_total{kind="policy"}"#),
        Some(&1.0),
        "{scrape}"
    );
    assert!(
        samples
            .get(r#"writ_refusals_total{kind="outside_grant"}"#)
            .is_some_and(|n| *n >= 1.0),
        "{scrape}"
    );
}

/// SPEC §13 for the operator: the live page's
/// refusal count is the log's (a policy or gate refusal, logged, is
/// counted on the page, not only the table's admission refusals); a named
/// agent whose sessions ended is marked on the page with its idle time,
/// and `writ release --agent NAME` frees its reservations at once, not
/// `--mcp-idle` later.
#[test]
fn the_page_counts_logged_refusals_and_marks_and_frees_agents_without_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = writ::server::Server::start(
            writ::server::Options::new(&root).mcp_idle(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
        let (url, token) = (server.url().to_string(), server.token().to_string());
        let dump = |url: String, token: String| async move {
            let (status, body) = get(&format!("{url}/dump"), Some(&token)).await;
            assert_eq!(status, 200, "{body}");
            serde_json::from_str::<Value>(&body).unwrap()
        };
        let session = Session::connect(&url, &token).await.unwrap();
        let bob = session.actor("bob", Grant::workspace(&root)).await.unwrap();
        let policy = bob.files().write(".env", "TOKEN=1\n").await;
        assert!(
            matches!(policy, Err(writ::Error::Policy { .. })),
            "{policy:?}"
        );
        std::fs::write(root.join("seen.md"), "x\n").unwrap();
        let unread = bob.files().write("seen.md", "y\n").await;
        assert!(
            matches!(unread, Err(writ::Error::NotRead { .. })),
            "{unread:?}"
        );
        // The log counts as the events are read: wait for both.
        let deadline = Instant::now() + Duration::from_secs(10);
        let shown = loop {
            let d = dump(url.clone(), token.clone()).await;
            if d["refused"].as_u64().is_some_and(|n| n >= 2) || Instant::now() > deadline {
                break d;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(shown["refused"], 2, "the page's count: {shown}");
        assert_eq!(
            shown["counters"]["refused"], 0,
            "the table counts admissions only"
        );
        let page = include_str!("../src/server/page.html");
        assert!(page.contains("d.refused"), "the page shows the log's count");

        // A named agent reserves, and its client is killed: no session.
        let mut reviewer =
            McpHttp::new(&format!("{url}/mcp"), &token).with_header("Writ-Agent", "reviewer");
        assert_eq!(reviewer.initialize("reviewer").await.status, 200);
        let (error, text) = reviewer.call("reserve", json!({"paths": ["src/"]})).await;
        assert!(!error, "{text}");
        assert_eq!(reviewer.close().await, 200);
        // The session's end reaches its agent just after the DELETE's answer.
        let absent_of = |d: &Value| d["absent_agents"].as_array().cloned().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(10);
        let shown = loop {
            let d = dump(url.clone(), token.clone()).await;
            if !absent_of(&d).is_empty() || Instant::now() > deadline {
                break d;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let absent = absent_of(&shown);
        assert_eq!(absent.len(), 1, "{shown}");
        assert_eq!(absent[0]["name"], "reviewer");
        let actor = absent[0]["actor"].as_u64().unwrap();
        assert!(
            shown["holds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["actor_id"] == actor),
            "the agent's reservation is still held: {shown}"
        );
        assert!(page.contains("absent_agents"), "the page marks them");

        // Freed now, by name; a second release finds nobody.
        let release = |url: String, token: String| {
            tokio::task::spawn_blocking(move || {
                std::process::Command::new(env!("CARGO_BIN_EXE_writ"))
                    .args([
                        "release", "--agent", "reviewer", "--url", &url, "--token", &token,
                    ])
                    .output()
                    .unwrap()
            })
        };
        let freed = release(url.clone(), token.clone()).await.unwrap();
        assert!(freed.status.success(), "{freed:?}");
        let shown = dump(url.clone(), token.clone()).await;
        assert_eq!(shown["holds"], json!([]), "{shown}");
        assert_eq!(shown["absent_agents"], json!([]), "{shown}");
        let again = release(url.clone(), token.clone()).await.unwrap();
        assert!(!again.status.success());
        assert!(
            String::from_utf8_lossy(&again.stderr).contains("no agent named 'reviewer'"),
            "{again:?}"
        );
        // An actor token may not release the session's agents.
        let made = session
            .call(
                "actor.create",
                json!({"name": "worker", "grant": {"workspace": true}}),
            )
            .await
            .unwrap();
        let worker = Session::connect(&url, made["token"].as_str().unwrap())
            .await
            .unwrap();
        let forbidden = worker
            .call("agent.release", json!({"name": "reviewer"}))
            .await;
        assert!(
            matches!(forbidden, Err(writ::Error::Forbidden { .. })),
            "{forbidden:?}"
        );
        bob.close().await.unwrap();
        session.close().await.unwrap();
        server.shutdown().await;
    });
}
