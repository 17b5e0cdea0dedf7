//! Attacks on `writ serve` itself (SPEC §13 "Auth" and "Bounded by
//! construction"), each performed against a real server and asserted to
//! fail, with another client answered throughout: a foreign `Host` on
//! every endpoint, half-sent requests by the thousand, tickets that grow
//! memory or overwrite each other, and requests of tens of thousands of
//! paths.

#![cfg(all(feature = "server", feature = "mcp"))]

#[path = "common/mcp_http_client.rs"]
mod http_client;
#[path = "common/scratch.rs"]
mod scratch;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_client::McpHttp;
use scratch::{runtime, workspace};
use serde_json::{Value, json};
use writ::server::{Options, Server};

/// One raw HTTP/1.1 exchange; the status line's code (0 when the server
/// closed without an answer).
fn raw(addr: &str, request: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    stream
        .write_all(request.as_bytes())
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut answer = String::new();
    let _ = BufReader::new(stream).read_line(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

async fn rpc(server_url: &str, token: &str, method: &str, params: Value) -> Value {
    let client = McpHttp::new(&format!("{server_url}/rpc"), token);
    let reply = client
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .await;
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{method}: {e}: {}", reply.body))
}

/// A workspace actor made with the session token; its handle.
async fn workspace_actor(server_url: &str, token: &str, name: &str) -> String {
    let made = rpc(
        server_url,
        token,
        "actor.create",
        json!({"name": name, "grant": {"workspace": true}}),
    )
    .await;
    made["result"]["actor"]
        .as_str()
        .unwrap_or_else(|| panic!("{made}"))
        .to_string()
}

/// An actor made with the session token: its handle and its own token.
async fn actor_with_token(
    server_url: &str,
    token: &str,
    name: &str,
    grant: Value,
) -> (String, String) {
    let made = rpc(
        server_url,
        token,
        "actor.create",
        json!({"name": name, "grant": grant}),
    )
    .await;
    let field = |key: &str| {
        made["result"][key]
            .as_str()
            .unwrap_or_else(|| panic!("{made}"))
            .to_string()
    };
    (field("actor"), field("token"))
}

/// A server with `options`, started.
async fn start(options: Options) -> Server {
    Server::start(options)
        .await
        .unwrap_or_else(|e| panic!("start: {e}"))
}

fn kind(answer: &Value) -> &str {
    answer["error"]["data"]["kind"].as_str().unwrap_or("")
}

#[test]
fn a_foreign_host_is_refused_on_every_endpoint() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root)).await;
        let addr = server.url().trim_start_matches("http://").to_string();
        let token = server.token().to_string();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"dump"}"#;
        let requests = |host: &str| {
            [
                format!(
                    "POST /rpc HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
                format!("GET /dump HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"),
                format!("GET /events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"),
                format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
                format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
                format!(
                    "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
                     Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
                     Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                ),
            ]
        };
        let (a, foreign) = (addr.clone(), requests("evil.example:80"));
        let codes = tokio::task::spawn_blocking(move || foreign.map(|r| raw(&a, &r)))
            .await
            .unwrap();
        assert_eq!(codes, [403; 6], "a foreign Host was served");
        let (a, local) = (addr.clone(), requests(&addr));
        let codes = tokio::task::spawn_blocking(move || local.map(|r| raw(&a, &r)))
            .await
            .unwrap();
        assert_ne!(codes[0], 403, "the loopback Host is served");
        assert_ne!(codes[3], 403, "the loopback Host is served");
        server.shutdown().await;
    });
}

/// `writ serve` in a child process whose soft open-file limit is 1,024 (a
/// common default), as the attack found it.
fn serve_process(root: &Path) -> (Child, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn 1024 && exec '{}' serve '{}' --no-history --header-timeout 1",
            env!("CARGO_BIN_EXE_writ"),
            root.display()
        ))
        .env("XDG_STATE_HOME", root.join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let mut url = None;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix("writ serve: ") {
            url = rest.split_whitespace().next().map(str::to_string);
        }
        if line.contains("discovery file") {
            break;
        }
    }
    let url = url.unwrap_or_else(|| panic!("writ serve did not start"));
    (child, url)
}

#[test]
fn half_sent_requests_by_the_thousand_never_stop_the_server_answering() {
    const HALF_OPEN: usize = 1_100;
    // The attacker needs the descriptors; the server is the one bounded.
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
    let (_dir, root) = workspace();
    let (mut child, url) = serve_process(&root);
    let addr = url.trim_start_matches("http://").to_string();
    let mut held = Vec::with_capacity(HALF_OPEN);
    for _ in 0..HALF_OPEN {
        // Connected even past the server's cap: the kernel's backlog
        // takes it, and the server has not accepted it.
        let Ok(mut stream) = TcpStream::connect_timeout(
            &addr.parse().unwrap_or_else(|e| panic!("{e}")),
            Duration::from_secs(5),
        ) else {
            break;
        };
        let _ = stream.write_all(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
        held.push(stream);
    }
    assert!(held.len() >= 600, "only {} connections opened", held.len());
    let started = Instant::now();
    let code = raw(
        &addr,
        &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    let waited = started.elapsed();
    // The half-sent requests, cut off by the header timeout, answer nothing.
    let mut first = held.swap_remove(0);
    let _ = first.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf = Vec::new();
    let _ = first.read_to_end(&mut buf);
    drop(held);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code, 200, "the server stopped answering (after {waited:?})");
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert!(
        !String::from_utf8_lossy(&buf).contains("200 OK"),
        "a half-sent request was answered"
    );
}

#[test]
fn tickets_are_bounded_and_a_live_ticket_is_never_overwritten() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root)).await;
        let (url, token) = (server.url().to_string(), server.token().to_string());
        let made = |name: &'static str| workspace_actor(&url, &token, name);
        let (holder, waiter) = (made("holder").await, made("waiter").await);
        // A ticket of 1 MiB is refused, nothing kept.
        let huge = "t".repeat(1 << 20);
        let answer = rpc(
            &url,
            &token,
            "admit",
            json!({"actor": waiter, "targets": ["a.rs"], "wait": false, "ticket": huge}),
        )
        .await;
        assert_eq!(kind(&answer), "invalid_params", "{answer:.300}");
        // One actor's live tickets are bounded.
        let mut refused = None;
        for i in 0..80 {
            let answer = rpc(
                &url,
                &token,
                "admit",
                json!({"actor": waiter, "targets": [format!("f{i}.rs")], "wait": false,
                       "ticket": format!("t{i}")}),
            )
            .await;
            if answer.get("error").is_some() {
                refused = Some((i, answer));
                break;
            }
        }
        let (at, answer) = refused.unwrap_or_else(|| panic!("80 live tickets were kept"));
        assert_eq!(at, 64, "{answer}");
        assert_eq!(kind(&answer), "invalid_params", "{answer}");
        // Giving up a ticket never asked with stores it too: bounded in
        // length, and refused past the actor's count.
        let other = made("other").await;
        let long = "g".repeat(1 << 20);
        let answer = rpc(
            &url,
            &token,
            "release",
            json!({"actor": other, "ticket": long}),
        )
        .await;
        assert_eq!(kind(&answer), "invalid_params", "{answer:.300}");
        let mut refused = None;
        for i in 0..80 {
            let answer = rpc(
                &url,
                &token,
                "release",
                json!({"actor": other, "ticket": format!("never-{i}")}),
            )
            .await;
            if answer.get("error").is_some() {
                refused = Some((i, answer));
                break;
            }
        }
        let (at, answer) = refused.unwrap_or_else(|| panic!("80 unused tickets were kept"));
        assert_eq!(at, 64, "{answer}");
        assert_eq!(kind(&answer), "invalid_params", "{answer}");
        // Two live requests with one ticket: the second is refused, and the
        // first's grant stays reachable by its ticket.
        let fence = rpc(
            &url,
            &token,
            "fence",
            json!({"actor": holder, "targets": ["x.rs"]}),
        )
        .await;
        let fence = fence["result"]["hold"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let second = made("second").await;
        let first = tokio::spawn({
            let (url, token, second) = (url.clone(), token.clone(), second.clone());
            async move {
                rpc(
                    &url,
                    &token,
                    "admit",
                    json!({"actor": second, "targets": ["x.rs"],
                    "timeout_ms": 20_000, "ticket": "same"}),
                )
                .await
            }
        });
        // The first request is queued once the dump shows it waiting.
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.scheduler().dump().waiters.is_empty() {
            assert!(Instant::now() < deadline, "the first request never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let again = rpc(
            &url,
            &token,
            "admit",
            json!({"actor": second,
            "targets": ["y.rs"], "wait": false, "ticket": "same"}),
        )
        .await;
        assert_eq!(kind(&again), "invalid_params", "{again}");
        assert!(
            again["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("already live"),
            "{again}"
        );
        let released = rpc(&url, &token, "release", json!({"hold": fence})).await;
        assert!(released.get("result").is_some(), "{released}");
        let first = first.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(first["result"]["hold"].is_string(), "{first}");
        server.shutdown().await;
    });
}

#[test]
fn a_request_past_max_targets_admits_nothing_and_huge_ones_starve_nobody() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root)).await;
        let (url, token) = (server.url().to_string(), server.token().to_string());
        let actor = |name: &'static str| workspace_actor(&url, &token, name);
        let big = actor("big").await;
        let paths = |prefix: &str, n: usize| -> Vec<String> {
            (0..n)
                .map(|i| format!("{prefix}/d{}/f{i}.rs", i % 97))
                .collect()
        };
        let answer = rpc(
            &url,
            &token,
            "admit",
            json!({"actor": big, "targets": paths("over", 40_000), "wait": false}),
        )
        .await;
        assert_eq!(kind(&answer), "invalid_params", "{answer:.300}");
        assert!(server.scheduler().dump().holds.is_empty());
        // Two requests at the limit, at once, while another client admits
        // and releases small requests: each of those answers promptly.
        let heavy: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|prefix| {
                let (url, token, big, targets) =
                    (url.clone(), token.clone(), big.clone(), paths(prefix, 4096));
                tokio::spawn(async move {
                    rpc(
                        &url,
                        &token,
                        "admit",
                        json!({"actor": big, "targets": targets, "wait": false}),
                    )
                    .await
                })
            })
            .collect();
        let small = actor("small").await;
        let mut slowest = Duration::ZERO;
        for i in 0..20 {
            let started = Instant::now();
            let got = rpc(
                &url,
                &token,
                "admit",
                json!({"actor": small, "targets": [format!("s{i}.rs")], "wait": false}),
            )
            .await;
            slowest = slowest.max(started.elapsed());
            let hold = got["result"]["hold"]
                .as_str()
                .unwrap_or_else(|| panic!("{got}"));
            rpc(&url, &token, "release", json!({"hold": hold})).await;
        }
        for task in heavy {
            let answer = task.await.unwrap_or_else(|e| panic!("{e}"));
            assert!(answer["result"]["hold"].is_string(), "{answer:.300}");
        }
        assert!(
            slowest < Duration::from_secs(5),
            "a small request waited {slowest:?}"
        );
        server.shutdown().await;
    });
}

#[test]
fn configured_sensitive_names_never_expose_the_session_token() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        // The way the docs show extending the sensitive names.
        let file: writ::server::ConfigFile =
            serde_json::from_value(json!({"sensitive_names": [".env", "*.pem", "*.secret"]}))
                .unwrap_or_else(|e| panic!("{e}"));
        let discovery = writ::server::discovery_path(&root, None);
        let server = start(
            Options::new(&root)
                .config_file(file)
                .discovery_file(&discovery),
        )
        .await;
        let (url, token) = (server.url().to_string(), server.token().to_string());
        let (actor, actor_token) =
            actor_with_token(&url, &token, "reader", json!({"read_only": true})).await;
        assert!(
            std::fs::read_to_string(&discovery).is_ok_and(|found| found.contains(&token)),
            "the discovery file holds the token"
        );
        let read = rpc(
            &url,
            &actor_token,
            "files.read",
            json!({"actor": actor, "path": ".writ/serve.json"}),
        )
        .await;
        assert_eq!(kind(&read), "policy", "{read}");
        assert!(
            !read.to_string().contains(&token),
            "the token leaked: {read}"
        );
        // The configured names are refused too.
        let secret = rpc(
            &url,
            &token,
            "files.write",
            json!({"actor": workspace_actor(&url, &token, "w").await,
                   "path": "db.secret", "content": "x"}),
        )
        .await;
        assert_eq!(kind(&secret), "policy", "{secret}");
        // And through MCP's read_file.
        let mut mcp = McpHttp::new(&format!("{url}/mcp"), &actor_token);
        mcp.initialize("reader").await;
        let (refused, text) = mcp
            .call("read_file", json!({"path": ".writ/serve.json"}))
            .await;
        assert!(!text.contains(&token), "the token leaked: {text}");
        assert!(refused, "{text}");
        server.shutdown().await;
    });
}

#[test]
fn mcp_sessions_per_token_are_capped_and_a_closed_one_frees_its_seat() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root).max_mcp_sessions(3)).await;
        let (url, token) = (server.url().to_string(), server.token().to_string());
        let (_, actor_token) =
            actor_with_token(&url, &token, "opener", json!({"workspace": true})).await;
        let mut open = Vec::new();
        for i in 0..3 {
            let mut client = McpHttp::new(&format!("{url}/mcp"), &actor_token);
            let reply = client.initialize(&format!("c{i}")).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            open.push(client);
        }
        let one_more = McpHttp::new(&format!("{url}/mcp"), &actor_token);
        let reply = one_more
            .post(&json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": http_client::PROTOCOL, "capabilities": {},
                           "clientInfo": {"name": "c3", "version": "0"}},
            }))
            .await;
        assert!(
            reply.body.contains("\"error\""),
            "a fourth session opened: {}",
            reply.body
        );
        assert!(
            reply.body.contains("--max-mcp-sessions 3"),
            "{} {}",
            reply.status,
            reply.body
        );
        // Another token has its own seats.
        let mut other = McpHttp::new(&format!("{url}/mcp"), &token);
        assert_eq!(other.initialize("other").await.status, 200);
        // A closed session frees its seat.
        let mut first = open.swap_remove(0);
        assert!(first.close().await.is_success());
        let mut again = McpHttp::new(&format!("{url}/mcp"), &actor_token);
        let reply = again.initialize("again").await;
        assert!(
            reply.headers.contains_key("mcp-session-id"),
            "{}",
            reply.body
        );
        server.shutdown().await;
    });
}

#[test]
fn an_unfinished_mcp_body_is_cut_by_the_body_timeout_like_rpcs() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root)).await;
        let addr = server.addr().to_string();
        let token = server.token().to_string();
        let started = Instant::now();
        let codes = tokio::task::spawn_blocking(move || {
            ["/mcp", "/rpc"].map(|route| {
                raw(
                    &addr,
                    &format!(
                        "POST {route} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
                         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                         Content-Length: 100\r\n\r\n{{\"jsonrpc\": \"2.0\""
                    ),
                )
            })
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(codes, [408, 408], "after {:?}", started.elapsed());
        server.shutdown().await;
    });
}

#[test]
fn idle_connections_at_the_cap_never_make_a_new_client_wait() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root).max_connections(8)).await;
        let addr = server.addr().to_string();
        let answered = tokio::task::spawn_blocking(move || {
            // Eight kept-alive connections, each done with its request and
            // left open: the cap is reached, and every one is idle.
            let mut idle = Vec::new();
            for _ in 0..8 {
                let mut stream =
                    TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect: {e}"));
                let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                stream
                    .write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
                    .unwrap_or_else(|e| panic!("send: {e}"));
                let mut reader = BufReader::new(stream);
                let mut status = String::new();
                let _ = reader.read_line(&mut status);
                assert!(status.contains(" 200 "), "{status}");
                idle.push(reader);
            }
            let started = Instant::now();
            let code = raw(
                &addr,
                &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
            );
            (code, started.elapsed(), idle.len())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let (code, waited, _) = answered;
        assert_eq!(code, 200, "after {waited:?}");
        // The header timeout (10 s) would have freed a slot; closing the
        // longest-idle connection frees one at once.
        assert!(
            waited < Duration::from_secs(3),
            "a new client waited {waited:?}"
        );
        server.shutdown().await;
    });
}

/// `writ serve ROOT` in a child process under the shell's `limits` (e.g.
/// `ulimit -n 128`) with `args`; the child and its URL.
fn serve_child(root: &Path, limits: &str, args: &str) -> (Child, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{limits} && exec '{}' serve '{}' --no-history {args}",
            env!("CARGO_BIN_EXE_writ"),
            root.display()
        ))
        .env("XDG_STATE_HOME", root.join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let mut url = None;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix("writ serve: ") {
            url = rest.split_whitespace().next().map(str::to_string);
        }
        if line.contains("discovery file") {
            break;
        }
    }
    let url = url.unwrap_or_else(|| panic!("writ serve did not start"));
    (child, url)
}

/// A field of /proc/PID/status, in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

#[test]
fn a_body_without_a_token_is_never_kept() {
    // 40 clients without a token each send all but the last byte of an
    // 8 MiB body, /rpc and /mcp alike, and stall: were bodies read before
    // the token was checked, the server would hold 320 MiB for them.
    const CLIENTS: usize = 40;
    const BODY: usize = 8 * 1024 * 1024;
    let (_dir, root) = workspace();
    let (mut child, url) = serve_child(&root, "true", "--header-timeout 30");
    let addr = url.trim_start_matches("http://").to_string();
    let before = status_kib(child.id(), "VmRSS");
    let chunk = std::sync::Arc::new(vec![b' '; BODY - 1]);
    let senders: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, chunk) = (addr.clone(), chunk.clone());
            std::thread::spawn(move || {
                let route = if i % 2 == 0 { "/rpc" } else { "/mcp" };
                let mut stream =
                    TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect: {e}"));
                let _ = stream.set_write_timeout(Some(Duration::from_secs(20)));
                let head = format!(
                    "POST {route} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer nottoken{i}\r\n\
                     Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                     Content-Length: {BODY}\r\n\r\n"
                );
                let sent = stream
                    .write_all(head.as_bytes())
                    .and_then(|()| stream.write_all(&chunk));
                (stream, sent.is_ok())
            })
        })
        .collect();
    let streams: Vec<_> = senders
        .into_iter()
        .map(|s| s.join().unwrap_or_else(|_| panic!("a sender panicked")))
        .collect();
    let sent = streams.iter().filter(|(_, ok)| *ok).count();
    // The peak, whenever it was reached while the bodies arrived.
    let peak = status_kib(child.id(), "VmHWM");
    let answered = raw(
        &addr,
        &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    );
    drop(streams);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(sent, CLIENTS, "every body but its last byte was taken");
    assert_eq!(answered, 200);
    let grown = peak.saturating_sub(before) / 1024;
    assert!(
        grown < 64,
        "the server grew by {grown} MiB for {CLIENTS} bodies without a token"
    );
}

#[test]
fn clients_that_never_read_their_answers_never_fill_the_connection_cap() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(
            Options::new(&root)
                .max_connections(4)
                .header_timeout(Duration::from_secs(1)),
        )
        .await;
        let addr = server.addr().to_string();
        let (code, waited) = tokio::task::spawn_blocking(move || {
            // Four clients pipeline requests and never read an answer,
            // until the server stops taking their requests: its answers
            // cannot be written.
            let stuck: Vec<TcpStream> = (0..4)
                .map(|_| {
                    let mut stream =
                        TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect: {e}"));
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
                    let burst =
                        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").repeat(1000);
                    while stream.write_all(burst.as_bytes()).is_ok() {}
                    stream
                })
                .collect();
            let started = Instant::now();
            let code = raw(
                &addr,
                &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
            );
            drop(stuck);
            (code, started.elapsed())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            code, 200,
            "a new client was not answered (after {waited:?})"
        );
        assert!(
            waited < Duration::from_secs(10),
            "a new client waited {waited:?}"
        );
        server.shutdown().await;
    });
}

#[test]
fn half_sent_heads_under_a_low_descriptor_limit_never_stop_the_answers() {
    // A small cap, and the default cap past what 128 descriptors allow:
    // either way the half-sent heads are the idle connections to close,
    // and the header timeout (30 s) is not what frees a seat.
    for args in ["--max-connections 16", ""] {
        let (_dir, root) = workspace();
        let (mut child, url) = serve_child(
            &root,
            "ulimit -n 128",
            &format!("--header-timeout 30 {args}"),
        );
        let addr = url.trim_start_matches("http://").to_string();
        let held: Vec<TcpStream> = (0..300)
            .filter_map(|_| {
                let mut stream = TcpStream::connect_timeout(
                    &addr.parse().unwrap_or_else(|e| panic!("{e}")),
                    Duration::from_secs(5),
                )
                .ok()?;
                let _ = stream.write_all(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
                Some(stream)
            })
            .collect();
        assert!(held.len() >= 200, "only {} connections opened", held.len());
        let started = Instant::now();
        let code = raw(
            &addr,
            &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        );
        let waited = started.elapsed();
        drop(held);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            code, 200,
            "{args:?}: nobody was answered (after {waited:?})"
        );
        assert!(
            waited < Duration::from_secs(10),
            "{args:?}: a new client waited {waited:?}"
        );
    }
}

#[test]
fn dump_tables_show_agent_chosen_paths_escaped() {
    let (_dir, root) = workspace();
    runtime().block_on(async {
        let server = start(Options::new(&root)).await;
        let (url, token) = (server.url().to_string(), server.token().to_string());
        let actor = workspace_actor(&url, &token, "lead").await;
        let forged = "a\u{1b}[31mred\u{202e}txt.rs\nholds (0):";
        let held = rpc(
            &url,
            &token,
            "admit",
            json!({"actor": actor, "targets": [forged], "wait": false}),
        )
        .await;
        assert!(held["result"]["hold"].is_string(), "{held}");
        let addr = server.addr().to_string();
        let (table, printed) = tokio::task::spawn_blocking({
            let (url, token) = (url.clone(), token.clone());
            move || {
                let mut stream =
                    TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect: {e}"));
                let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                let _ = stream.write_all(
                    format!(
                        "GET /dump?format=table HTTP/1.1\r\nHost: {addr}\r\n\
                         Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                );
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                let printed = Command::new(env!("CARGO_BIN_EXE_writ"))
                    .args(["dump", "--url", &url, "--token", &token])
                    .output()
                    .unwrap_or_else(|e| panic!("writ dump: {e}"));
                (
                    answer,
                    String::from_utf8_lossy(&printed.stdout).into_owned(),
                )
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        for (what, text) in [("/dump?format=table", &table), ("writ dump", &printed)] {
            assert!(
                text.contains("a\\u{1b}[31mred\\u{202e}txt.rs\\nholds (0):"),
                "{what} does not show the path escaped:\n{text}"
            );
            assert!(
                !text.chars().any(|c| c == '\u{1b}' || c == '\u{202e}'),
                "{what} printed a raw escape:\n{text}"
            );
            assert_eq!(
                text.lines().filter(|l| l.starts_with("holds (")).count(),
                1,
                "{what} printed a forged line:\n{text}"
            );
        }
        server.shutdown().await;
    });
}
