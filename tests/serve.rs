//! `writ serve` under bad input, hostile callers and failing clients.
//!
//! Each attack is performed on the wire and the test asserts it fails with
//! its own error kind, changes nothing, and leaves the server serving.
//! Nothing here sleeps to synchronize: waits poll the dump with a deadline.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use writ::remote::Session;
use writ::server::{Options, Server};
use writ::{Error, Grant};

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

async fn start(root: &PathBuf, ttl: Duration) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(
        Options::new(root)
            .config(config)
            .lease_ttl(ttl)
            .max_body(64 * 1024),
    )
    .await
    .unwrap()
}

/// One HTTP/1.1 exchange on a fresh connection, written by hand so that
/// malformed requests can be sent as they are.
async fn raw(addr: SocketAddr, request: Vec<u8>) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn post(token: Option<&str>, headers: &str, body: &[u8]) -> Vec<u8> {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let mut request = format!(
        "POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{auth}{headers}\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

async fn rpc(server: &Server, token: &str, method: &str, params: Value) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    raw(
        server.addr(),
        post(Some(token), "", body.to_string().as_bytes()),
    )
    .await
}

/// A root actor made over `/rpc` with the session's token: its handle.
async fn root_actor(server: &Server, name: &str) -> String {
    let (_, made) = rpc(
        server,
        server.token(),
        "actor.create",
        json!({"name": name, "grant": {"workspace": true}}),
    )
    .await;
    made["result"]["actor"]
        .as_str()
        .unwrap_or_else(|| panic!("actor.create: {made}"))
        .to_string()
}

fn kind(answer: &Value) -> &str {
    answer["error"]["data"]["kind"].as_str().unwrap_or("<none>")
}

/// What must not change: actors, holds and waiters (ids, names, paths).
fn state(server: &Server) -> Value {
    let dump = serde_json::to_value(server.scheduler().dump()).unwrap();
    let strip = |list: &Value, keys: &[&str]| -> Value {
        list.as_array()
            .unwrap()
            .iter()
            .map(|e| keys.iter().map(|k| e[*k].clone()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
            .into()
    };
    json!([
        strip(&dump["actors"], &["id", "name"]),
        strip(&dump["holds"], &["id", "actor", "paths"]),
        strip(&dump["waiters"], &["id", "actor"]),
    ])
}

async fn until(server: &Server, what: &str, pred: impl Fn(&writ::Dump) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pred(&server.scheduler().dump()) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            server.scheduler().dump()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_its_own_kind_changes_nothing_and_the_server_keeps_serving() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let (_, made) = rpc(
        &server,
        &token,
        "actor.create",
        json!({"name": "a", "grant": {"workspace": true}}),
    )
    .await;
    let actor = made["result"]["actor"].as_str().unwrap().to_string();
    let actor_token = made["result"]["token"].as_str().unwrap().to_string();
    let (_, made) = rpc(
        &server,
        &token,
        "actor.create",
        json!({"name": "b", "grant": {"workspace": true}}),
    )
    .await;
    let other = made["result"]["actor"].as_str().unwrap().to_string();
    let (_, held) = rpc(
        &server,
        &token,
        "admit",
        json!({"actor": other, "targets": ["held.rs"], "wait": false}),
    )
    .await;
    let hold = held["result"]["hold"].as_str().unwrap().to_string();
    let instance = actor.split('-').nth(1).unwrap().to_string();
    let before = state(&server);

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"session.info","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100 * 1024)
    );
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed JSON",
            post(Some(&token), "", b"{\"jsonrpc\": "),
            200,
            "parse_error",
        ),
        (
            "not an object",
            post(Some(&token), "", b"[1, 2]"),
            200,
            "invalid_request",
        ),
        (
            "no jsonrpc",
            post(Some(&token), "", br#"{"id":1,"method":"dump"}"#),
            200,
            "invalid_request",
        ),
        (
            "unknown method",
            post(
                Some(&token),
                "",
                br#"{"jsonrpc":"2.0","id":1,"method":"rm.rf"}"#,
            ),
            200,
            "unknown_method",
        ),
        (
            "params not an object",
            post(
                Some(&token),
                "",
                br#"{"jsonrpc":"2.0","id":1,"method":"dump","params":[1]}"#,
            ),
            200,
            "invalid_params",
        ),
        (
            "oversized body",
            post(Some(&token), "", big.as_bytes()),
            413,
            "body_too_large",
        ),
        (
            "no token",
            post(None, "", br#"{"jsonrpc":"2.0","id":1,"method":"dump"}"#),
            401,
            "unauthorized",
        ),
        (
            "wrong token",
            post(
                Some("0123456789abcdef0123"),
                "",
                br#"{"jsonrpc":"2.0","id":1,"method":"dump"}"#,
            ),
            401,
            "unauthorized",
        ),
        (
            "forged actor token",
            post(
                Some(&format!("{actor}.{}", "0".repeat(64))),
                "",
                br#"{"jsonrpc":"2.0","id":1,"method":"dump"}"#,
            ),
            401,
            "unauthorized",
        ),
        (
            "foreign origin",
            post(
                Some(&token),
                "Origin: http://evil.example\r\n",
                br#"{"jsonrpc":"2.0","id":1,"method":"lease.revoke","params":{"lease":"x"}}"#,
            ),
            403,
            "forbidden",
        ),
    ];
    for (what, request, status, expected) in cases {
        let (got_status, answer) = raw(server.addr(), request).await;
        assert_eq!(got_status, status, "{what}: {answer}");
        assert_eq!(kind(&answer), expected, "{what}: {answer}");
        assert!(answer["error"]["code"].is_i64(), "{what}");
        assert_eq!(state(&server), before, "{what} changed state");
    }

    let calls: Vec<(&str, &str, &str, Value, &str)> = vec![
        (
            "wrong type",
            &token,
            "admit",
            json!({"actor": actor, "targets": 3}),
            "invalid_params",
        ),
        (
            "missing param",
            &token,
            "admit",
            json!({"targets": ["a"]}),
            "invalid_params",
        ),
        (
            "unknown field",
            &token,
            "release",
            json!({"hold": hold, "force": true}),
            "invalid_params",
        ),
        (
            "actor as number",
            &token,
            "admit",
            json!({"actor": 5, "targets": ["a"]}),
            "invalid_params",
        ),
        (
            "bad handle",
            &token,
            "release",
            json!({"hold": "nonsense"}),
            "invalid_params",
        ),
        (
            "unknown hold",
            &token,
            "release",
            json!({"hold": format!("h-{instance}-999")}),
            "unknown_hold",
        ),
        (
            "unknown actor",
            &token,
            "admit",
            json!({"actor": format!("a-{instance}-999"), "targets": ["a"]}),
            "unknown_actor",
        ),
        (
            "handle of another run",
            &token,
            "admit",
            json!({"actor": "a-00000000-1", "targets": ["a"]}),
            "unknown_lease",
        ),
        (
            "unknown lease",
            &token,
            "lease.keepalive",
            json!({"lease": format!("l-{instance}-999")}),
            "unknown_lease",
        ),
        (
            "escaping path",
            &token,
            "admit",
            json!({"actor": actor, "targets": ["../../etc/passwd"], "wait": false}),
            "outside_grant",
        ),
        (
            "escaping file",
            &token,
            "files.write",
            json!({"actor": actor, "path": "/etc/x", "content": "x"}),
            "outside_grant",
        ),
        (
            "escaping grant root",
            &token,
            "actor.create",
            json!({"name": "c", "grant": {"workspace": true, "root": "/"}}),
            "outside_grant",
        ),
        (
            "bad grant",
            &token,
            "actor.create",
            json!({"name": "c", "grant": {"workspace": true, "read_only": true}}),
            "invalid_params",
        ),
        (
            "bad content",
            &token,
            "files.write",
            json!({"actor": actor, "path": "x", "content": {"base64": "!"}}),
            "invalid_params",
        ),
        (
            "discovery folder",
            &token,
            "files.read",
            json!({"actor": actor, "path": ".writ/serve.json"}),
            "policy",
        ),
        (
            "another actor's hold",
            &actor_token,
            "release",
            json!({"hold": hold}),
            "forbidden",
        ),
        (
            "another actor",
            &actor_token,
            "admit",
            json!({"actor": other, "targets": ["z"], "wait": false}),
            "forbidden",
        ),
        (
            "another actor's files",
            &actor_token,
            "files.read",
            json!({"actor": other, "path": "x"}),
            "forbidden",
        ),
        (
            "a root actor",
            &actor_token,
            "actor.create",
            json!({"name": "c", "grant": {"workspace": true}}),
            "forbidden",
        ),
        (
            "revoke",
            &actor_token,
            "lease.revoke",
            json!({"lease": made["result"]["lease"]}),
            "forbidden",
        ),
        (
            "rewind",
            &actor_token,
            "history.rewind",
            json!({"turn": "t"}),
            "forbidden",
        ),
        ("stop", &actor_token, "session.stop", json!({}), "forbidden"),
        (
            "contested",
            &token,
            "admit",
            json!({"actor": actor, "targets": ["held.rs"], "wait": false}),
            "busy",
        ),
    ];
    for (what, token, method, params, expected) in calls {
        let (status, answer) = rpc(&server, token, method, params).await;
        assert_eq!(status, 200, "{what}: {answer}");
        assert_eq!(kind(&answer), expected, "{what}: {answer}");
        assert_eq!(answer["id"], 7, "{what}");
        assert_eq!(state(&server), before, "{what} changed state");
    }
    // Still serving, and the actor token works for its own actor.
    let (_, ok) = rpc(
        &server,
        &actor_token,
        "admit",
        json!({"actor": actor, "targets": ["mine.rs"], "wait": false}),
    )
    .await;
    assert!(ok["result"]["hold"].is_string(), "{ok}");
    let (_, info) = rpc(&server, &token, "session.info", json!({})).await;
    assert_eq!(info["result"]["protocol"], writ::PROTOCOL_VERSION);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_token_acts_for_its_line_only() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let (_, lead) = rpc(
        &server,
        &token,
        "actor.create",
        json!({"name": "lead", "grant": {"workspace": true}}),
    )
    .await;
    let lead_token = lead["result"]["token"].as_str().unwrap().to_string();
    let lead_id = lead["result"]["actor"].as_str().unwrap().to_string();
    let (_, kid) = rpc(
        &server,
        &lead_token,
        "actor.create",
        json!({"name": "kid", "parent": lead_id, "grant": {"fenced": ["src/"]}}),
    )
    .await;
    let kid_id = kid["result"]["actor"].as_str().unwrap().to_string();
    let kid_token = kid["result"]["token"].as_str().unwrap().to_string();
    assert_eq!(
        kid["result"]["lease"], lead["result"]["lease"],
        "a child inherits its parent's lease"
    );
    // The parent's token acts for its child; the child's never for its parent.
    let (_, ok) = rpc(
        &server,
        &lead_token,
        "admit",
        json!({"actor": kid_id, "targets": ["src/a.rs"], "wait": false}),
    )
    .await;
    assert!(ok["result"]["hold"].is_string(), "{ok}");
    let (_, no) = rpc(
        &server,
        &kid_token,
        "admit",
        json!({"actor": lead_id, "targets": ["b.rs"], "wait": false}),
    )
    .await;
    assert_eq!(kind(&no), "forbidden");
    let (_, lead_hold) = rpc(
        &server,
        &lead_token,
        "admit",
        json!({"actor": lead_id, "targets": ["b.rs"], "wait": false}),
    )
    .await;
    let (_, no) = rpc(
        &server,
        &kid_token,
        "release",
        json!({"hold": lead_hold["result"]["hold"]}),
    )
    .await;
    assert_eq!(kind(&no), "forbidden", "{no}");
    // The kid's own hold is the kid's to release, whoever made it for it.
    let (_, yes) = rpc(
        &server,
        &kid_token,
        "release",
        json!({"hold": ok["result"]["hold"]}),
    )
    .await;
    assert!(yes["result"]["released"].is_string(), "{yes}");
    // A sibling's token cannot touch the line at all.
    let (_, sib) = rpc(
        &server,
        &token,
        "actor.create",
        json!({"name": "sib", "grant": {"workspace": true}}),
    )
    .await;
    let sib_token = sib["result"]["token"].as_str().unwrap().to_string();
    let (_, no) = rpc(
        &server,
        &sib_token,
        "files.read",
        json!({"actor": kid_id, "path": "src/a.rs"}),
    )
    .await;
    assert_eq!(kind(&no), "forbidden", "{no}");
    let (_, no) = rpc(
        &server,
        &sib_token,
        "lease.keepalive",
        json!({"lease": lead["result"]["lease"]}),
    )
    .await;
    assert_eq!(kind(&no), "forbidden", "{no}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_frees_everything_and_a_waiter_elsewhere_is_admitted() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_millis(300)).await;
    let token = server.token().to_string();
    // A client that takes a fence and then goes silent (no keep-alive).
    let (_, made) = rpc(
        &server,
        &token,
        "actor.create",
        json!({"name": "silent", "grant": {"workspace": true}}),
    )
    .await;
    let silent = made["result"]["actor"].as_str().unwrap().to_string();
    let (_, fence) = rpc(
        &server,
        &token,
        "fence",
        json!({"actor": silent, "targets": ["src/"]}),
    )
    .await;
    assert!(fence["result"]["hold"].is_string(), "{fence}");
    // A live client waits for it; its own lease is kept alive meanwhile.
    let session = Session::connect(server.url(), &token).await.unwrap();
    let waiter = session
        .actor("waiter", Grant::workspace(&root))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter.admit(["src/lib.rs"]))
        .await
        .expect("the lapsed lease's fence was not freed")
        .unwrap();
    // The lapsed lease's guards go first (which admits the waiter), then
    // its actors, as a client's own scope would drop them.
    until(&server, "the silent actor to go", |d| {
        d.actors.iter().all(|a| a.name != "silent")
    })
    .await;
    let dump = server.scheduler().dump();
    assert_eq!(dump.holds.len(), 1);
    assert_eq!(dump.holds[0].actor, "waiter");
    // The lapsed lease is gone for its owner too.
    let (_, again) = rpc(
        &server,
        &token,
        "admit",
        json!({"actor": silent, "targets": ["x"], "wait": false}),
    )
    .await;
    assert_eq!(kind(&again), "unknown_actor");
    got.release().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_with_sigkill_frees_its_fence_within_the_ttl() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_millis(500)).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["__hold", server.url(), server.token(), "src/"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let mut byte = [0u8; 1];
        if out.read(&mut byte).await.unwrap() == 0 {
            panic!(
                "the client exited before holding: {}",
                String::from_utf8_lossy(&line)
            );
        }
        line.push(byte[0]);
    }
    assert!(
        line.starts_with(b"held "),
        "{}",
        String::from_utf8_lossy(&line)
    );
    // The client keeps its lease alive: after several TTLs it still holds.
    let session = Session::connect(server.url(), server.token())
        .await
        .unwrap();
    let waiter = session
        .actor("waiter", Grant::workspace(&root))
        .await
        .unwrap();
    match waiter
        .admit_timeout(["src/a.rs"], Duration::from_millis(1500))
        .await
    {
        Err(Error::Timeout { .. }) => {}
        other => panic!(
            "expected the live client to keep its fence, got {:?}",
            other.map(drop)
        ),
    }
    child.start_kill().unwrap(); // SIGKILL
    let _ = child.wait().await;
    let killed = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter.admit(["src/a.rs"]))
        .await
        .expect("the killed client's fence was not freed")
        .unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "freed only after {:?}",
        killed.elapsed()
    );
    got.release().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_disconnecting_mid_wait_leaves_no_waiter() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let session = Session::connect(server.url(), &token).await.unwrap();
    let holder = session
        .actor("holder", Grant::workspace(&root))
        .await
        .unwrap();
    let held = holder.try_admit(["x.rs"]).await.unwrap();
    let (_, made) = rpc(
        &server,
        &token,
        "actor.create",
        json!({"name": "w", "grant": {"workspace": true}}),
    )
    .await;
    let w = made["result"]["actor"].as_str().unwrap().to_string();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "admit", "params": {"actor": w, "targets": ["x.rs"]}});
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(&post(Some(&token), "", body.to_string().as_bytes()))
        .await
        .unwrap();
    until(&server, "the waiter", |d| d.waiters.len() == 1).await;
    drop(stream);
    until(&server, "no waiter", |d| d.waiters.is_empty()).await;
    // Nothing was granted behind the holder's back, and the holder still holds.
    let dump = server.scheduler().dump();
    assert_eq!(dump.holds.len(), 1);
    assert_eq!(dump.holds[0].actor, "holder");
    held.release().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_answers_unknown_lease_and_clients_recover() {
    let (_dir, root) = workspace();
    let token = "restart-token-0123456789";
    let options = || {
        Options::new(&root)
            .config(writ::Config::default().durability(writ::Durability::Process))
            .token(token)
    };
    let first = Server::start(options()).await.unwrap();
    let addr = first.addr();
    let session = Session::connect(first.url(), token).await.unwrap();
    let actor = session.actor("a", Grant::workspace(&root)).await.unwrap();
    let _held = actor.try_admit(["a.rs"]).await.unwrap();
    first.shutdown().await;
    let second = Server::start(options().listen(addr)).await.unwrap();
    assert!(
        second.scheduler().dump().holds.is_empty(),
        "a restarted server starts empty"
    );
    match actor.try_admit(["b.rs"]).await {
        Err(Error::UnknownLease { .. }) => {}
        other => panic!("expected UnknownLease, got {:?}", other.map(drop)),
    }
    // Re-creating the actor through the same session works.
    let again = session.actor("a", Grant::workspace(&root)).await.unwrap();
    let r = again.try_admit(["a.rs"]).await.unwrap();
    r.release().await.unwrap();
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_client_cannot_block_others() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    // Half a request, never finished, on an open connection.
    let mut stuck = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let token = server.token().to_string();
    stuck
        .write_all(
            format!("POST /rpc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 500\r\n\r\n{{\"jsonrpc\"").as_bytes(),
        )
        .await
        .unwrap();
    // Half a header on another.
    let mut stuck_header = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stuck_header
        .write_all(b"POST /rpc HTTP/1.1\r\nHost:")
        .await
        .unwrap();
    let session = Session::connect(server.url(), &token).await.unwrap();
    let a = session.actor("a", Grant::workspace(&root)).await.unwrap();
    let started = Instant::now();
    for _ in 0..20 {
        let r = a.try_admit(["f.rs"]).await.unwrap();
        r.release().await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "others were slowed to {:?}",
        started.elapsed()
    );
    drop((stuck, stuck_header));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_fails_waiters_releases_everything_and_removes_the_discovery_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let (_dir, root) = workspace();
    let discovery = root.join(".writ").join("serve.json");
    let server = Server::start(
        Options::new(&root)
            .config(writ::Config::default().durability(writ::Durability::Process))
            .discovery_file(&discovery),
    )
    .await
    .unwrap();
    let mode = std::fs::metadata(&discovery).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let found = writ::server::read_discovery(&discovery).unwrap();
    assert_eq!(found.url, server.url());
    let session = Session::discover(&root).await.unwrap();
    let holder = session
        .actor("holder", Grant::workspace(&root))
        .await
        .unwrap();
    let waiter = session
        .actor("waiter", Grant::workspace(&root))
        .await
        .unwrap();
    let _held = holder.fence(["src/"]).await.unwrap();
    let sched = server.scheduler().clone();
    let (waited, ()) = tokio::join!(waiter.admit(["src/a.rs"]), async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while sched.dump().waiters.is_empty() {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.shutdown().await;
    });
    match waited {
        Err(Error::Unavailable { reason }) => assert!(reason.contains("shutting down"), "{reason}"),
        other => panic!("expected Unavailable, got {:?}", other.map(drop)),
    }
    assert!(sched.dump().holds.is_empty());
    assert!(sched.dump().actors.is_empty());
    assert!(!discovery.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dump_and_health_endpoints() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let get = |path: &str, token: Option<&str>| {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\r\n")
            .into_bytes()
    };
    let (status, health) = raw(server.addr(), get("/health", None)).await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    let (status, _) = raw(server.addr(), get("/dump", None)).await;
    assert_eq!(status, 401);
    let session = Session::connect(server.url(), server.token())
        .await
        .unwrap();
    let a = session
        .actor("lead", Grant::workspace(&root))
        .await
        .unwrap();
    let _r = a.request(["a.rs"]).label("edit").try_admit().await.unwrap();
    let (status, dump) = raw(server.addr(), get("/dump", Some(server.token()))).await;
    assert_eq!(status, 200);
    assert_eq!(dump["holds"][0]["label"], "edit");
    let table = session.dump_table().await.unwrap();
    assert!(table.contains("lead") && table.contains("a.rs"), "{table}");
    server.shutdown().await;
}

/// `files.write`, `files.append` and `files.replace` asked with
/// `current: true`: a `stale` or `not_read` refusal carries the file as
/// `files.read` returns it (for an append, its last 20 lines) in
/// `data.current`, and that counts as the actor's read — the retry passes
/// with no `files.read`. Without the field the refusal is as it was and
/// marks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_asked_for_current_carries_the_file_and_counts_as_its_read() {
    let (_dir, root) = workspace();
    let lines: String = (1..=30).map(|n| format!("{n}\n")).collect();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join("log.txt"), &lines).unwrap();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let mut actors = Vec::new();
    for name in ["a", "b"] {
        let (_, created) = rpc(
            &server,
            &token,
            "actor.create",
            json!({"name": name, "grant": {"workspace": true}}),
        )
        .await;
        actors.push(created["result"]["actor"].as_str().unwrap().to_string());
    }
    let (a, b) = (actors[0].as_str(), actors[1].as_str());
    let replace = |current: Option<bool>| {
        let mut p = json!({"actor": a, "path": "a.txt", "old": "one", "new": "two"});
        if let Some(current) = current {
            p["current"] = json!(current);
        }
        p
    };

    // Not asked: the refusal as before, no content, no mark.
    for current in [None, Some(false)] {
        let (_, answer) = rpc(&server, &token, "files.replace", replace(current)).await;
        assert_eq!(kind(&answer), "not_read", "{answer}");
        assert!(answer["error"]["data"].get("current").is_none(), "{answer}");
    }
    // Asked: the content and its mark; then the retry passes unread.
    let (_, answer) = rpc(&server, &token, "files.replace", replace(Some(true))).await;
    assert_eq!(kind(&answer), "not_read", "{answer}");
    let current = &answer["error"]["data"]["current"];
    assert_eq!(current["content"], "one\n", "{answer}");
    assert_eq!(current["mark"]["len"], 4, "{answer}");
    let (_, answer) = rpc(&server, &token, "files.replace", replace(None)).await;
    assert_eq!(answer["result"]["op"], "replace", "{answer}");

    // Stale, for an append: the tail, from line 10 (0-based) of 31.
    let read = json!({"actor": a, "path": "log.txt"});
    let (_, answer) = rpc(&server, &token, "files.read", read).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let write = json!({"actor": b, "path": "log.txt", "content": "b\n", "current": true});
    let (_, answer) = rpc(&server, &token, "files.append", write.clone()).await;
    assert_eq!(kind(&answer), "not_read", "{answer}");
    let (_, answer) = rpc(&server, &token, "files.append", write).await;
    assert_eq!(answer["result"]["op"], "append", "{answer}");
    let append = json!({"actor": a, "path": "log.txt", "content": "a\n", "current": true});
    let (_, answer) = rpc(&server, &token, "files.append", append.clone()).await;
    assert_eq!(kind(&answer), "stale", "{answer}");
    let current = &answer["error"]["data"]["current"];
    let tail: String = (12..=30).map(|n| format!("{n}\n")).collect::<String>() + "b\n";
    assert_eq!(current["content"], tail.as_str(), "{answer}");
    assert_eq!(current["lines"], json!([11, null]), "{answer}");
    assert_eq!(current["mark"]["len"], lines.len() + 2, "{answer}");
    let (_, answer) = rpc(&server, &token, "files.append", append).await;
    assert_eq!(answer["result"]["op"], "append", "{answer}");
    assert!(
        std::fs::read_to_string(root.join("log.txt"))
            .unwrap()
            .ends_with("30\nb\na\n")
    );

    // A field of another type is refused, and nothing is written.
    let write = json!({"actor": b, "path": "a.txt", "content": "x\n", "current": "yes"});
    let (_, answer) = rpc(&server, &token, "files.write", write).await;
    assert_eq!(kind(&answer), "invalid_params", "{answer}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "two\n"
    );
    server.shutdown().await;
}

/// docs/PROTOCOL.md carries the table of error kinds and codes exactly as
/// `writ::ERROR_KINDS` has it, and documents every method.
#[test]
fn the_protocol_document_matches_the_code() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/PROTOCOL.md")).unwrap();
    let mut table = String::from("| kind | code | meaning |\n|---|---|---|\n");
    for k in writ::ERROR_KINDS {
        table.push_str(&format!("| `{}` | {} | {} |\n", k.kind, k.code, k.meaning));
    }
    assert!(
        doc.contains(&table),
        "docs/PROTOCOL.md must contain this table:\n{table}"
    );
    assert!(doc.contains(&format!("protocol version: `{}`", writ::PROTOCOL_VERSION)));
    for method in [
        "session.info",
        "session.stop",
        "actor.create",
        "actor.child_wait",
        "actor.drop",
        "admit",
        "fence",
        "fence.extend",
        "fence.narrow",
        "release",
        "dump",
        "lease.keepalive",
        "lease.revoke",
        "files.read",
        "files.write",
        "files.append",
        "files.replace",
        "files.delete",
        "files.rename",
        "files.run",
        "turn.set",
        "history.snapshot",
        "history.record",
        "history.rewind",
        "history.redo",
        "plan.validate",
    ] {
        assert!(
            doc.contains(&format!("### `{method}`")),
            "{method} is not documented"
        );
    }
}

/// A remote admit dropped at the moment its grant arrives leaves nothing
/// behind: the grant is either never made (the wait was cancelled) or
/// handed back by the client. Run many times so both orders occur.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_racing_with_a_dropped_admit_is_released_not_leaked() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let session = Session::connect(server.url(), server.token())
        .await
        .unwrap();
    let holder = session
        .actor("holder", Grant::workspace(&root))
        .await
        .unwrap();
    let waiter = session
        .actor("waiter", Grant::workspace(&root))
        .await
        .unwrap();
    for _round in 0..30 {
        let held = holder.try_admit(["r.rs"]).await.unwrap();
        let sched = server.scheduler().clone();
        tokio::select! {
            // Admitted once the holder let go: dropped here, released in the
            // background.
            got = waiter.admit(["r.rs"]) => drop(got.unwrap()),
            () = async {
                let deadline = Instant::now() + Duration::from_secs(10);
                while sched.dump().waiters.is_empty() {
                    assert!(Instant::now() < deadline);
                    tokio::task::yield_now().await;
                }
                // Release and give up in the same breath.
                held.release().await.unwrap();
            } => {}
        }
        until(&server, "nothing held or waiting", |d| {
            d.holds.is_empty() && d.waiters.is_empty()
        })
        .await;
    }
    server.shutdown().await;
}

/// `writ demo --serve`: agent processes through one server lose no update.
#[test]
fn the_serve_demo_loses_no_update() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["demo", "--serve", "--agents", "3", "--calls", "20"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("writes 60, gave up 0 (waited past 10s), lost updates 0, failed workers 0"),
        "{text}"
    );
    // The summary adds up: every call was admitted once, none timed out.
    assert!(
        text.contains("counters at the end: admitted 63, refused 0")
            && text.contains("timed out 0"),
        "{text}"
    );
    assert!(text.contains("the server's dump mid-run"), "{text}");
}

/// A ticket given up before its grant: the grant that arrives later is
/// released at once and its `admit` answers `unknown_hold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_given_up_before_its_grant_releases_the_grant_on_arrival() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let holder = root_actor(&server, "holder").await;
    let w = root_actor(&server, "w").await;
    let (_, held) = rpc(
        &server,
        &token,
        "admit",
        json!({"actor": holder, "targets": ["t.rs"], "wait": false}),
    )
    .await;
    let waiting = rpc(
        &server,
        &token,
        "admit",
        json!({"actor": w, "targets": ["t.rs"], "ticket": "T1"}),
    );
    let (answer, ()) = tokio::join!(waiting, async {
        until(&server, "the waiter", |d| d.waiters.len() == 1).await;
        let (_, gave_up) = rpc(
            &server,
            &token,
            "release",
            json!({"actor": w, "ticket": "T1"}),
        )
        .await;
        assert!(gave_up["result"]["released"].is_null(), "{gave_up}");
        let (_, released) = rpc(
            &server,
            &token,
            "release",
            json!({"hold": held["result"]["hold"]}),
        )
        .await;
        assert!(released["result"]["released"].is_string(), "{released}");
    });
    assert_eq!(kind(&answer.1), "unknown_hold", "{}", answer.1);
    until(&server, "nothing held", |d| {
        d.holds.is_empty() && d.waiters.is_empty()
    })
    .await;
    server.shutdown().await;
}

/// A loopback proxy to `server` that passes every exchange but loses the
/// server's answer on a connection that carried an `admit` (it closes
/// that connection instead), as a network does that breaks after the
/// request arrived.
async fn answer_losing_proxy(server: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = upstream.into_split();
                let lose = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let seen = lose.clone();
                let up = tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from_client.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        if chunk.windows(7).any(|w| w == b"\"admit\"") {
                            seen.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        if to_server.write_all(chunk).await.is_err() {
                            break;
                        }
                    }
                });
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = from_server.read(&mut buf).await {
                    if n == 0 || lose.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    if to_client.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_answer_was_lost_is_given_back_by_its_ticket() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let direct = server.url().trim_start_matches("http://").to_string();
    let proxy = answer_losing_proxy(direct.parse().unwrap()).await;
    let session = Session::connect(&format!("http://{proxy}"), server.token())
        .await
        .unwrap();
    let agent = session
        .actor("agent", Grant::workspace(&root))
        .await
        .unwrap();
    // The server grants it; the client never hears so.
    let lost = agent.try_admit(["x.rs"]).await;
    assert!(
        matches!(lost, Err(writ::Error::Unavailable { .. })),
        "{lost:?}"
    );
    // The client gives its ticket up, which releases the grant: the live
    // actor's lease would otherwise keep it as long as the client runs.
    until(&server, "the lost grant released", |d| d.holds.is_empty()).await;
    server.shutdown().await;
}

/// `resume` asks again for the request a ticket named: a grant is answered
/// as it was (the same hold, nothing granted twice), a ticket never seen is
/// asked for now, and a ticket given up stays given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_ticket_finds_its_grant_and_asks_afresh_otherwise() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let a = root_actor(&server, "a").await;
    let admit = |ticket: &str, resume: bool| json!({"actor": a, "targets": ["t.rs"], "wait": false, "ticket": ticket, "resume": resume});
    let (_, first) = rpc(&server, &token, "admit", admit("T1", false)).await;
    let (_, again) = rpc(&server, &token, "admit", admit("T1", true)).await;
    assert_eq!(first["result"]["hold"], again["result"]["hold"], "{again}");
    assert_eq!(again["result"]["paths"], first["result"]["paths"]);
    assert_eq!(server.scheduler().dump().holds.len(), 1);
    // Without `resume`, the live ticket is refused, as before.
    let (_, refused) = rpc(&server, &token, "admit", admit("T1", false)).await;
    assert_eq!(kind(&refused), "invalid_params", "{refused}");
    let (_, released) = rpc(
        &server,
        &token,
        "release",
        json!({"hold": first["result"]["hold"]}),
    )
    .await;
    assert!(released["result"]["released"].is_string(), "{released}");
    // A ticket never seen: asked for now.
    let (_, fresh) = rpc(&server, &token, "admit", admit("T2", true)).await;
    assert!(fresh["result"]["hold"].is_string(), "{fresh}");
    // A ticket given up: never granted.
    let (_, gave_up) = rpc(
        &server,
        &token,
        "release",
        json!({"actor": a, "ticket": "T3"}),
    )
    .await;
    assert!(gave_up["result"]["released"].is_null(), "{gave_up}");
    let (_, refused) = rpc(&server, &token, "admit", admit("T3", true)).await;
    assert_eq!(kind(&refused), "unavailable", "{refused}");
    assert_eq!(server.scheduler().dump().holds.len(), 1);
    server.shutdown().await;
}

/// Attack: an actor resumes another actor's ticket. Tickets are per actor,
/// so it finds nothing of the other's: its request is asked afresh and
/// meets the other's hold (`busy`); it is never handed that hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_cannot_take_another_actors_grant_by_resuming_its_ticket() {
    let (_dir, root) = workspace();
    let server = start(&root, Duration::from_secs(30)).await;
    let token = server.token().to_string();
    let a = root_actor(&server, "a").await;
    let b = root_actor(&server, "b").await;
    let admit = |actor: &str, resume: bool| json!({"actor": actor, "targets": ["t.rs"], "wait": false, "ticket": "T1", "resume": resume});
    let (_, granted) = rpc(&server, &token, "admit", admit(&a, false)).await;
    assert!(granted["result"]["hold"].is_string(), "{granted}");
    let (_, stolen) = rpc(&server, &token, "admit", admit(&b, true)).await;
    assert_eq!(kind(&stolen), "busy", "{stolen}");
    assert_eq!(server.scheduler().dump().holds.len(), 1);
    server.shutdown().await;
}
