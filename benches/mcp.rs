//! MCP benchmarks: the file tools over Streamable HTTP (`/mcp` on a real
//! `writ serve` in this process, loopback) against their baselines in the
//! same run.
//!
//! - `mcp_write`: one `write_file` of 4 KiB through an MCP session (one
//!   `tools/call` POST, answered with one JSON reply), against the same
//!   `Files::write` in process (called directly, handed to the blocking
//!   pool, or run in place on an async worker as the tools run it) and
//!   against a bare HTTP round trip on the same stack (axum server,
//!   hyper-util client, one kept-alive connection) carrying the same
//!   request body, echoed back — and a small one. After criterion's
//!   groups, the target's ratio is measured again with the three taken in
//!   turn, round after round (`interleaved`).
//!   Both writers use the same configuration (no history, `Durability::Process`,
//!   marks refreshed on write so that the same file can be rewritten without
//!   a read in between).
//! - `load` (printed after criterion's groups): 16 MCP sessions for
//!   `WRIT_MCP_LOAD_SECS` seconds (default 10), each reading and then
//!   appending to or editing either its own file or one of 4 shared files,
//!   every write adding a marker unique to that write. At the end every file
//!   is read back: every accepted write's marker must be there exactly once
//!   and no refused write's marker at all (0 lost updates, 0 phantom writes),
//!   or the run fails.
//!
//! `cargo bench --bench mcp` takes about half a minute after the build.

#[path = "../tests/common/mcp_http_client.rs"]
mod mcp_http_client;

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "common/rounds.rs"]
mod rounds;

use criterion::Criterion;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_http_client::McpHttp;
use serde_json::json;
use writ::server::{Options, Server};
use writ::{Config, Durability, Grant, Scheduler};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn config() -> Config {
    Config::default()
        .durability(Durability::Process)
        .refresh_mark_on_write(true)
}

async fn start(root: &Path) -> Server {
    Server::start(
        Options::new(root)
            .config(config())
            .lease_ttl(Duration::from_secs(120)),
    )
    .await
    .unwrap()
}

/// A bare echo server on the same stack: axum on hyper, loopback.
async fn echo_server() -> String {
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(|body: Bytes| async move { body }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/echo", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// 4 KiB of text, in lines.
fn content() -> String {
    let line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.\n";
    line.repeat(4096 / line.len())
}

/// One kept-alive HTTP client and the echo endpoint it talks to.
struct Echo {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
}

impl Echo {
    async fn start() -> Self {
        let url = echo_server().await;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Echo {
            client: Client::builder(TokioExecutor::new()).build(connector),
            url,
        }
    }

    /// `iters` round trips carrying `body` there and back.
    async fn time(&self, body: &Bytes, iters: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..iters {
            let request = hyper::Request::post(self.url.as_str())
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            let response = self.client.request(request).await.unwrap();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            black_box(bytes);
        }
        start.elapsed()
    }
}

/// `iters` in-process writes of `data`.
fn time_in_process(actor: &writ::Actor, data: &str, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(actor.files().write("local.txt", data).unwrap());
    }
    start.elapsed()
}

/// `iters` `write_file` calls of `data` on an MCP session.
async fn time_mcp(client: &mut McpHttp, data: &str, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let (error, text) = client
            .call("write_file", json!({"path": "mcp.txt", "content": data}))
            .await;
        assert!(!error, "{text}");
    }
    start.elapsed()
}

fn mcp_write(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let data = content();
    assert_eq!(data.len(), 4096);
    let mut group = c.benchmark_group("mcp_write");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    let sched = Scheduler::new(config());
    let local = sched.actor("bench", Grant::workspace(&root)).unwrap();
    local.files().write("local.txt", &data).unwrap();
    group.bench_function("in_process", |b| {
        b.iter_custom(|iters| time_in_process(&local, &data, iters))
    });

    // The same write handed to tokio's blocking pool and awaited, and run
    // in place on an async worker (`block_in_place`, as the tools run it):
    // what each way of leaving the async threads costs.
    let shared = std::sync::Arc::new(local);
    group.bench_function("in_process_spawn_blocking", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let (actor, data) = (shared.clone(), data.clone());
                    let receipt = tokio::task::spawn_blocking(move || {
                        actor.files().write("local.txt", &data).unwrap()
                    })
                    .await
                    .unwrap();
                    black_box(receipt);
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("in_process_block_in_place", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let actor = shared.clone();
                let data = data.clone();
                let task = tokio::spawn(async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let receipt = tokio::task::block_in_place(|| {
                            actor.files().write("local.txt", &data).unwrap()
                        });
                        black_box(receipt);
                        tokio::task::yield_now().await;
                    }
                    start.elapsed()
                });
                task.await.unwrap()
            })
        })
    });

    let (server, mut client) = rt.block_on(async {
        let server = start(&root).await;
        let mut client = McpHttp::new(&format!("{}/mcp", server.url()), server.token());
        assert_eq!(client.initialize("bench").await.status, 200);
        time_mcp(&mut client, &data, 1).await;
        (server, client)
    });
    group.bench_function("mcp_write_file", |b| {
        b.iter_custom(|iters| rt.block_on(time_mcp(&mut client, &data, iters)))
    });

    // The same call naming no tool (its 4 KiB of arguments still sent,
    // parsed and answered with a tool error): what `/mcp` costs without
    // the file operation.
    group.bench_function("mcp_no_tool", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let (error, text) = client
                        .call("no_such_tool", json!({"path": "mcp.txt", "content": data}))
                        .await;
                    assert!(error, "{text}");
                }
                start.elapsed()
            })
        })
    });

    // The same session's round trip through rmcp, with no tool behind it:
    // what the MCP layer (rmcp's session, SSE framing, the /mcp checks) costs.
    group.bench_function("mcp_ping", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let reply = client.request("ping", json!({})).await;
                    assert!(reply.message().is_some(), "{}", reply.body);
                }
                start.elapsed()
            })
        })
    });

    let echo = rt.block_on(Echo::start());
    // The MCP request's own bytes, and a small request.
    let big = Bytes::from(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "write_file", "arguments": {"path": "mcp.txt", "content": data}}})
        .to_string(),
    );
    let small = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Wrote mcp.txt"}]}}"#);
    for (name, body) in [("http_echo_4k", &big), ("http_echo_small", &small)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| rt.block_on(echo.time(body, iters)))
        });
    }
    group.finish();
    interleaved(&rt, &shared, &data, &mut client, &echo, &big);
    rt.block_on(async move {
        client.close().await;
        server.shutdown().await;
    });
}

/// The target's ratio, M ÷ (A + B), measured in rounds that take A, B and M
/// one after the other (`WRIT_MCP_ROUNDS`, default 15; 0 skips it): load
/// that comes and goes during a run then weighs on all three alike, where
/// criterion's groups, minutes apart, each meet their own.
fn interleaved(
    rt: &tokio::runtime::Runtime,
    local: &writ::Actor,
    data: &str,
    client: &mut McpHttp,
    echo: &Echo,
    body: &Bytes,
) {
    const ITERS: u64 = 300;
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / ITERS as f64;
    let Some(r) = rounds::measure(
        "WRIT_MCP_ROUNDS",
        || {
            let a = per_call(time_in_process(local, data, ITERS));
            let b = per_call(rt.block_on(echo.time(body, ITERS)));
            let m = per_call(rt.block_on(time_mcp(client, data, ITERS)));
            [a, b, m]
        },
        |[a, b, m]| m / (a + b),
    ) else {
        return;
    };
    let [a, b, m] = r.median;
    println!(
        "mcp_write interleaved ({} rounds of {ITERS} calls each): median round A {a:.1} µs, \
         B {b:.1} µs, M {m:.1} µs; M ÷ (A + B) median {:.2} (min {:.2}, max {:.2}; target ≤ 1.5)",
        r.rounds, r.ratio, r.min, r.max
    );
}

/// A random number generator good enough to pick files (xorshift).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

const SESSIONS: usize = 16;
const SHARED: usize = 4;
/// Every file starts with this line; an edit inserts its marker after it.
const HEAD: &str = "start\n";

/// What one session did: accepted markers by file, refusals by kind.
#[derive(Default)]
struct Tally {
    accepted: Vec<(String, String)>,
    refused: Vec<(String, String)>,
    stale: u64,
    busy: u64,
    other: u64,
    calls: u64,
}

async fn session(url: String, token: String, me: usize, deadline: Instant) -> Tally {
    let mut client = McpHttp::new(&url, &token);
    assert_eq!(client.initialize(&format!("s{me:02}")).await.status, 200);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (me as u64 + 1);
    let mut tally = Tally::default();
    let mut n = 0u64;
    while Instant::now() < deadline {
        let pick = next(&mut rng);
        let file = if pick % 2 == 0 {
            format!("own-{me:02}.txt")
        } else {
            format!("shared-{}.txt", (pick >> 8) % SHARED as u64)
        };
        // A read of one line leaves a mark over the whole file.
        let (error, text) = client
            .call("read_file", json!({"path": file, "offset": 1, "limit": 1}))
            .await;
        tally.calls += 1;
        assert!(!error, "read {file}: {text}");
        n += 1;
        let marker = format!("s{me:02}-{n:06}");
        let (error, text) = if n % 2 == 0 {
            client
                .call(
                    "append_file",
                    json!({"path": file, "content": format!("{marker}\n")}),
                )
                .await
        } else {
            client
                .call(
                    "edit_file",
                    json!({"path": file, "old_string": HEAD, "new_string": format!("{HEAD}{marker}\n")}),
                )
                .await
        };
        tally.calls += 1;
        if !error {
            tally.accepted.push((file, marker));
        } else {
            if text.contains("changed since you read it") {
                tally.stale += 1;
            } else if text.contains("busy")
                || text.contains("gave up waiting")
                || text.contains("retry later")
            {
                tally.busy += 1;
            } else {
                eprintln!("session {me}: {text}");
                tally.other += 1;
            }
            tally.refused.push((file, marker));
        }
    }
    client.close().await;
    tally
}

fn load() {
    let secs: f64 = std::env::var("WRIT_MCP_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let run_for = Duration::from_secs_f64(secs);
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut files: Vec<String> = (0..SESSIONS).map(|i| format!("own-{i:02}.txt")).collect();
    files.extend((0..SHARED).map(|i| format!("shared-{i}.txt")));
    for f in &files {
        std::fs::write(root.join(f), HEAD).unwrap();
    }
    let tallies = rt.block_on(async {
        let server = start(&root).await;
        let url = format!("{}/mcp", server.url());
        let deadline = Instant::now() + run_for;
        let tasks: Vec<_> = (0..SESSIONS)
            .map(|me| {
                tokio::spawn(session(
                    url.clone(),
                    server.token().to_string(),
                    me,
                    deadline,
                ))
            })
            .collect();
        let started = Instant::now();
        let mut tallies = Vec::new();
        for t in tasks {
            tallies.push(t.await.unwrap());
        }
        let elapsed = started.elapsed();
        server.shutdown().await;
        (tallies, elapsed)
    });
    let (tallies, elapsed) = tallies;

    // Every file as it ended, marker by marker.
    let mut found: HashMap<String, Vec<String>> = HashMap::new();
    for f in &files {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        assert!(text.starts_with(HEAD), "{f} lost its first line");
        found.insert(
            f.clone(),
            text.lines().skip(1).map(str::to_string).collect(),
        );
    }
    let mut count: HashMap<(&str, &str), usize> = HashMap::new();
    for (f, markers) in &found {
        for m in markers {
            *count.entry((f.as_str(), m.as_str())).or_default() += 1;
        }
    }
    let (mut lost, mut doubled, mut phantom) = (0, 0, 0);
    let (mut accepted, mut shared_accepted, mut calls) = (0u64, 0u64, 0u64);
    let (mut stale, mut busy, mut other) = (0, 0, 0);
    for t in &tallies {
        for (f, m) in &t.accepted {
            accepted += 1;
            shared_accepted += u64::from(f.starts_with("shared"));
            match count.get(&(f.as_str(), m.as_str())) {
                None => lost += 1,
                Some(1) => {}
                Some(_) => doubled += 1,
            }
        }
        for (f, m) in &t.refused {
            phantom += usize::from(count.contains_key(&(f.as_str(), m.as_str())));
        }
        calls += t.calls;
        stale += t.stale;
        busy += t.busy;
        other += t.other;
    }
    let present: usize = found.values().map(Vec::len).sum();
    println!(
        "load: {SESSIONS} MCP sessions over Streamable HTTP, {} own files + {SHARED} shared, {elapsed:.1?}: \
         {calls} tool calls = {:.0}/s; {accepted} writes accepted = {:.0}/s ({shared_accepted} to shared files); \
         refused: {stale} stale, {busy} busy, {other} other; \
         markers on disk {present}: lost {lost}, duplicated {doubled}, from refused writes {phantom}",
        SESSIONS,
        calls as f64 / elapsed.as_secs_f64(),
        accepted as f64 / elapsed.as_secs_f64(),
    );
    assert_eq!(lost, 0, "an accepted write is missing from its file");
    assert_eq!(doubled, 0, "a write landed twice");
    assert_eq!(phantom, 0, "a refused write changed a file");
    assert_eq!(
        present as u64, accepted,
        "every marker on disk is an accepted write"
    );
    assert_eq!(other, 0, "only stale and busy refusals are expected");
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    mcp_write(&mut c);
    c.final_summary();
    load();
}
