//! The `writ mcp` bridge as a stdio client lives with it (SPEC §14
//! "Lifetime"): its session outlives a model's pause of several lease
//! TTLs, survives a restart of the server (the next call works, and is told
//! to read again), a bridge stopped by SIGTERM, SIGINT or SIGHUP frees
//! what its session held at once, and one killed with SIGKILL within the
//! lease TTL; a call whose answer is lost on the way is
//! neither left holding nor made twice. Driven with raw JSON-RPC lines, as
//! any stdio client speaks.

#![cfg(all(feature = "mcp", feature = "server"))]

#[path = "common/mcp_http_client.rs"]
mod http_client;
#[path = "common/scratch.rs"]
mod scratch;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use scratch::workspace;
use serde_json::{Value, json};

const TTL: Duration = Duration::from_secs(1);

/// Not an argument of `writ mcp`: starts a [`StdioClient`] that speaks the
/// current revision, which opens no session.
const MODERN: &str = "<modern>";

/// `writ serve ROOT` until it has written its discovery file.
fn serve(root: &Path, state: &Path) -> Child {
    serve_with_ttl(root, state, "1")
}

/// `writ serve ROOT --lease-ttl TTL` (seconds).
fn serve_with_ttl(root: &Path, state: &Path, ttl: &str) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["serve"])
        .arg(root)
        .args(["--no-history", "--lease-ttl", ttl])
        .env("XDG_STATE_HOME", state)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let started = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("discovery file"));
    assert!(started, "writ serve did not start");
    child
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// A stdio MCP client of `writ mcp ROOT`, speaking JSON lines.
struct StdioClient {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next: u64,
    /// The answer to `initialize`.
    init: Value,
}

impl StdioClient {
    fn start(root: &Path) -> Self {
        Self::start_with(root, &[])
    }

    fn start_with(root: &Path, args: &[&str]) -> Self {
        Self::start_in(root, None, args)
    }

    /// `writ mcp ROOT ARGS` with `state` as its state folder (where a
    /// server it starts keeps its log, token and history).
    fn start_in(root: &Path, state: Option<&Path>, args: &[&str]) -> Self {
        let modern = args.contains(&MODERN);
        let args: Vec<&str> = args.iter().copied().filter(|a| *a != MODERN).collect();
        let mut command = Command::new(env!("CARGO_BIN_EXE_writ"));
        if let Some(state) = state {
            command.env("XDG_STATE_HOME", state);
        }
        let mut child = command
            .arg("mcp")
            .arg(root)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn: {e}"));
        let stdin = child.stdin.take().unwrap_or_else(|| panic!("stdin"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut client = StdioClient {
            child,
            stdin,
            lines,
            next: 0,
            init: Value::Null,
        };
        if modern {
            return client;
        }
        let init = client.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bridged", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        client.init = init;
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap_or_else(|e| panic!("stdin: {e}"));
        self.stdin.flush().unwrap_or_else(|e| panic!("stdin: {e}"));
    }

    /// Sends a request and returns its answer (other lines are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"));
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// Calls a tool as a client of the current revision (2026-07-28)
    /// does: no session, the revision in each request's `_meta`.
    fn call_modern(&mut self, tool: &str, arguments: Value) -> (bool, String) {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"}});
        let answer = self.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": meta}),
        );
        tool_result(tool, &answer)
    }

    /// Calls a tool: (is_error, text). A protocol error fails the test: the
    /// client must always get a tool result it can read.
    fn call(&mut self, tool: &str, arguments: Value) -> (bool, String) {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        tool_result(tool, &answer)
    }
}

/// A tool call's answer as (is_error, text); a protocol error fails the test.
fn tool_result(tool: &str, answer: &Value) -> (bool, String) {
    let result = answer
        .get("result")
        .unwrap_or_else(|| panic!("{tool}: not a tool result: {answer}"));
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    (
        result["isError"].as_bool().unwrap_or(false),
        text.to_string(),
    )
}

/// The URL and token of the server running for `root`.
fn discovered(root: &Path) -> (String, String) {
    let found: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(".writ/serve.json")).unwrap_or_default(),
    )
    .unwrap_or(Value::Null);
    (
        found["url"].as_str().unwrap_or_default().to_string(),
        found["token"].as_str().unwrap_or_default().to_string(),
    )
}

/// The holds of the server running for `root`, by actor name.
fn holders(root: &Path) -> Vec<String> {
    let (url, token) = discovered(root);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    runtime.block_on(async {
        let rpc = http_client::McpHttp::new(&format!("{url}/rpc"), &token);
        let reply = rpc
            .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "dump"}))
            .await;
        let dump: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
        dump["result"]["holds"]
            .as_array()
            .map(|holds| {
                holds
                    .iter()
                    .filter_map(|h| h["actor"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    })
}

#[test]
fn the_bridge_outlives_pauses_and_restarts_and_dies_with_its_client() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    std::fs::write(root.join("a.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    let server = serve(&root, &state);
    let mut client = StdioClient::start(&root);
    let (error, text) = client.call("read_file", json!({"path": "a.txt"}));
    assert!(!error, "{text}");
    // The model thinks for three lease TTLs.
    std::thread::sleep(TTL * 3);
    let (error, text) = client.call("write_file", json!({"path": "a.txt", "content": "two\n"}));
    assert!(!error, "the pause cost the session: {text}");
    // The server restarts under the client. The bridge's open stream does
    // not hold the stop up: it ends well within the 5 s drain deadline.
    let stopping = Instant::now();
    stop(server);
    let stopped_in = stopping.elapsed();
    assert!(
        stopped_in < Duration::from_secs(4),
        "the stop took {stopped_in:?}"
    );
    let server = serve(&root, &state);
    let (error, text) = client.call("write_file", json!({"path": "a.txt", "content": "three\n"}));
    assert!(error && text.contains("read"), "after a restart: {text}");
    let (error, text) = client.call("read_file", json!({"path": "a.txt"}));
    assert!(!error, "{text}");
    let (error, text) = client.call("write_file", json!({"path": "a.txt", "content": "three\n"}));
    assert!(!error, "{text}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap_or_default(),
        "three\n"
    );
    let (error, text) = client.call("reserve", json!({"paths": ["r/"]}));
    assert!(!error, "{text}");
    assert!(holders(&root).iter().any(|h| h == "bridged"));
    // Killed with SIGKILL: its stream drops, its reservation goes within
    // the TTL (plus the ping that notices).
    let _ = client.child.kill();
    let _ = client.child.wait();
    let killed = Instant::now();
    while holders(&root).iter().any(|h| h == "bridged") {
        assert!(
            killed.elapsed() < TTL * 10,
            "the killed client's reservation outlived it"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(server);
}

/// A client that stops its server with a signal (as coding CLIs do on
/// exit) frees what the bridge's session reserved at once: with a lease
/// TTL of ten minutes, waiting for the lease would keep another agent out
/// all that time.
#[test]
fn a_bridge_stopped_by_a_signal_ends_its_session_and_frees_its_reservation() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    let server = serve_with_ttl(&root, &state, "600");
    for signal in ["-TERM", "-HUP", "-INT"] {
        let mut client = StdioClient::start(&root);
        let (error, text) = client.call("reserve", json!({"paths": ["r/"]}));
        assert!(!error, "{text}");
        stop_bridge(client, signal, &root);
        // A client of the current revision has no session: what ends
        // with the bridge is the agent minted for it.
        let mut client = StdioClient::start_with(&root, &[MODERN]);
        let (error, text) = client.call_modern("reserve", json!({"paths": ["r/"]}));
        assert!(!error, "{text}");
        stop_bridge(client, signal, &root);
    }
    // Closing stdin ends the minted agent the same way.
    let mut client = StdioClient::start_with(&root, &[MODERN]);
    let (error, text) = client.call_modern("reserve", json!({"paths": ["r/"]}));
    assert!(!error, "{text}");
    // Named after the `clientInfo` in its `_meta`, as a handshake names it.
    let held = holders(&root);
    assert!(held.len() == 1 && held[0].starts_with("modern"), "{held:?}");
    drop(client.stdin);
    let _ = client.child.wait();
    assert_eq!(
        holders(&root),
        Vec::<String>::new(),
        "the reservation of a client of the current revision outlived its bridge"
    );
    stop(server);
}

/// Stops `client`'s bridge with `signal` and checks it freed its one
/// reservation as it ended.
fn stop_bridge(mut client: StdioClient, signal: &str, root: &Path) {
    // Each bridge's session is its own agent: `bridged`, `bridged-2`…
    let held = holders(root);
    assert_eq!(held.len(), 1, "{signal}: {held:?}");
    let _ = Command::new("kill")
        .args([signal, &client.child.id().to_string()])
        .status();
    let status = client.child.wait().unwrap_or_else(|e| panic!("{e}"));
    // Ended by itself, not by the signal's default action.
    assert!(
        status.code().is_some(),
        "{signal}: the bridge died of the signal"
    );
    assert_eq!(
        holders(root),
        Vec::<String>::new(),
        "{signal}: the reservation outlived the bridge stopped by a signal"
    );
}

/// A TCP link in front of the server that loses one answer on purpose:
/// once armed with a needle, it passes on the next request carrying it and
/// cuts that connection when the server's answer comes, so the call is
/// served and its answer never arrives.
struct CuttingLink {
    addr: String,
    needle: Arc<Mutex<Option<&'static [u8]>>>,
    cuts: Arc<AtomicUsize>,
}

impl CuttingLink {
    fn start(server_url: &str) -> CuttingLink {
        let server = server_url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .to_string();
        let needle: Arc<Mutex<Option<&'static [u8]>>> = Arc::new(Mutex::new(None));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (shared_needle, shared_cuts) = (needle.clone(), cuts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(upstream) = TcpStream::connect(&server) else {
                    continue;
                };
                Self::pipe(client, upstream, shared_needle.clone(), shared_cuts.clone());
            }
        });
        CuttingLink { addr, needle, cuts }
    }

    /// Relays one connection both ways.
    fn pipe(
        client: TcpStream,
        upstream: TcpStream,
        needle: Arc<Mutex<Option<&'static [u8]>>>,
        cuts: Arc<AtomicUsize>,
    ) {
        let armed = Arc::new(AtomicBool::new(false));
        let (Ok(mut from_client), Ok(mut to_upstream)) = (client.try_clone(), upstream.try_clone())
        else {
            return;
        };
        let armed_here = armed.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16384];
            while let Ok(n @ 1..) = from_client.read(&mut buf) {
                let chunk = &buf[..n];
                {
                    let mut wanted = needle.lock().unwrap_or_else(|e| e.into_inner());
                    if wanted.is_some_and(|w| chunk.windows(w.len()).any(|x| x == w)) {
                        // Armed before the request goes on, so its answer
                        // is the next thing this connection carries back.
                        *wanted = None;
                        armed_here.store(true, Ordering::SeqCst);
                    }
                }
                if to_upstream.write_all(chunk).is_err() {
                    break;
                }
            }
            let _ = to_upstream.shutdown(Shutdown::Write);
        });
        std::thread::spawn(move || {
            let (mut from_upstream, mut to_client) = (upstream, client);
            let mut buf = [0u8; 16384];
            while let Ok(n @ 1..) = from_upstream.read(&mut buf) {
                if armed.load(Ordering::SeqCst) {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    let _ = to_client.shutdown(Shutdown::Both);
                    let _ = from_upstream.shutdown(Shutdown::Both);
                    return;
                }
                if to_client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to_client.shutdown(Shutdown::Write);
        });
    }

    /// Loses the answer to the next request that carries `needle`.
    fn arm(&self, needle: &'static [u8]) {
        *self.needle.lock().unwrap_or_else(|e| e.into_inner()) = Some(needle);
    }
}

#[test]
fn a_call_whose_answer_is_lost_is_neither_left_holding_nor_made_twice() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    std::fs::write(root.join("log.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    // Sessions outlive the test unless ended: what the lost call left
    // behind would otherwise go when its session idles out.
    let server = serve_with_ttl(&root, &state, "60");
    let (url, token) = discovered(&root);
    let link = CuttingLink::start(&url);
    let proxied = format!("http://{}", link.addr);
    let mut client = StdioClient::start_with(&root, &["--url", &proxied, "--token", &token]);
    // A reservation served, its answer lost: the bridge sends it again on
    // a new session, after ending the one that holds the first.
    link.arm(b"\"reserve\"");
    let (error, text) = client.call("reserve", json!({"paths": ["src/"]}));
    assert_eq!(link.cuts.load(Ordering::SeqCst), 1, "no answer was lost");
    assert!(!error, "the reservation sent again: {text}");
    let held = holders(&root);
    assert_eq!(held.len(), 1, "holds after one lost answer: {held:?}");
    let (error, text) = client.call("release", json!({}));
    assert!(!error && text.contains("Released"), "{text}");
    assert!(holders(&root).is_empty(), "{:?}", holders(&root));
    // An append served, its answer lost: sent again on a new session that
    // has read nothing, it is refused, never appended twice.
    let (error, text) = client.call("read_file", json!({"path": "log.txt"}));
    assert!(!error, "{text}");
    link.arm(b"\"append_file\"");
    let (error, text) = client.call(
        "append_file",
        json!({"path": "log.txt", "content": "two\n"}),
    );
    assert_eq!(link.cuts.load(Ordering::SeqCst), 2, "no answer was lost");
    assert!(
        error && text.contains("read"),
        "the append sent again: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("log.txt")).unwrap_or_default(),
        "one\ntwo\n"
    );
    stop(server);
}

/// The pid in `root`'s discovery file, if there is one.
fn discovered_pid(root: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(root.join(".writ/serve.json")).ok()?;
    let found: Value = serde_json::from_str(&text).ok()?;
    found["pid"].as_i64().and_then(|p| i32::try_from(p).ok())
}

/// Whether process `pid` still exists.
fn running(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

/// Waits up to `limit` for `done`, checking every few milliseconds (the
/// process watched is not this test's child: nothing to wait on).
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

#[test]
fn two_bridges_with_no_server_start_one_and_are_refused_against_each_other() {
    let (_dir, root) = workspace();
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("shared.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(discovered_pid(&root).is_none(), "no server yet");
    // Both started at once, before either has a server to find.
    let starts: Vec<_> = (0..2)
        .map(|_| {
            let (root, state) = (root.clone(), state.path().to_path_buf());
            std::thread::spawn(move || {
                StdioClient::start_in(&root, Some(&state), &["--idle-exit", "1"])
            })
        })
        .collect();
    let mut clients: Vec<StdioClient> = starts
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap_or_else(|_| panic!("a bridge did not start"))
        })
        .collect();
    let pid = discovered_pid(&root).unwrap_or_else(|| panic!("no server was started"));
    assert!(running(pid), "the started server is not running");
    let log = std::fs::read_dir(state.path().join("writ"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|d| std::fs::read_to_string(d.path().join("serve.log")).unwrap_or_default())
        .collect::<String>();
    assert_eq!(
        log.matches("starting `writ serve").count(),
        1,
        "two bridges at once started one server: {log}"
    );
    let mut bob = clients.pop().unwrap_or_else(|| panic!("two clients"));
    let mut alice = clients.pop().unwrap_or_else(|| panic!("two clients"));
    let (error, text) = alice.call("reserve", json!({"paths": ["shared.txt"]}));
    assert!(!error, "alice reserves: {text}");
    bob.call("read_file", json!({"path": "shared.txt"}));
    let (error, text) = bob.call(
        "write_file",
        json!({"path": "shared.txt", "content": "bob\n"}),
    );
    assert!(
        error,
        "bob's write went through alice's reservation: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("shared.txt")).unwrap_or_default(),
        "one\n"
    );
    // Both gone: the server they started stops by itself once idle.
    drop((alice.stdin, bob.stdin));
    let _ = (alice.child.wait(), bob.child.wait());
    assert!(
        within(Duration::from_secs(20), || !running(pid)),
        "the auto-started server did not exit after --idle-exit with no client"
    );
    assert!(
        !root.join(".writ/serve.json").exists(),
        "the discovery file outlived the server"
    );
}

#[test]
fn a_server_with_idle_exit_stays_while_a_bridge_is_connected_and_a_plain_one_never_idles() {
    let (_dir, root) = workspace();
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut client = StdioClient::start_in(&root, Some(state.path()), &["--idle-exit", "0.3"]);
    let pid = discovered_pid(&root).unwrap_or_else(|| panic!("no server was started"));
    // Several windows pass with the bridge connected but making no call:
    // its open stream counts.
    let gone = within(Duration::from_secs(2), || !running(pid));
    assert!(!gone, "the server idled out under a connected bridge");
    let (error, text) = client.call("list_dir", json!({}));
    assert!(!error, "{text}");
    drop(client.stdin);
    let _ = client.child.wait();
    assert!(
        within(Duration::from_secs(20), || !running(pid)),
        "the server did not exit once its bridge was gone"
    );
    // A person's `writ serve` (no --idle-exit) with no client at all stays.
    let server = serve(&root, state.path());
    let pid = discovered_pid(&root).unwrap_or_else(|| panic!("no discovery file"));
    assert!(
        !within(Duration::from_secs(1), || !running(pid)),
        "writ serve without --idle-exit stopped by itself"
    );
    stop(server);
}

#[test]
fn a_private_bridge_says_nothing_is_shared_and_starts_no_server() {
    let (_dir, root) = workspace();
    let state = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut client = StdioClient::start_in(&root, Some(state.path()), &["--private"]);
    let instructions = client.init["result"]["instructions"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        instructions.contains("nothing is shared"),
        "instructions: {instructions}"
    );
    let (error, status) = client.call("writ_status", json!({}));
    assert!(!error && status.contains("nothing is shared"), "{status}");
    assert!(
        discovered_pid(&root).is_none(),
        "--private started a server"
    );
    // A bridge (not private) says nothing of the kind.
    let mut shared = StdioClient::start_in(&root, Some(state.path()), &["--idle-exit", "1"]);
    let (_, status) = shared.call("writ_status", json!({}));
    assert!(!status.contains("nothing is shared"), "{status}");
    let pid = discovered_pid(&root).unwrap_or_else(|| panic!("no server was started"));
    drop((client.stdin, shared.stdin));
    let _ = (client.child.wait(), shared.child.wait());
    assert!(within(Duration::from_secs(20), || !running(pid)));
}

/// A stand-in for `writ serve`'s `/mcp` that records each request's head
/// and answers every request with a session and an empty tool result.
fn recording_server() -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let url = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let (tx, heads) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(match stream.try_clone() {
                    Ok(s) => s,
                    Err(_) => return,
                });
                let mut out = stream;
                loop {
                    let mut head = String::new();
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let _ = tx.send(format!("{head}\n{message}"));
                    let answer = match message.get("id") {
                        _ if head.starts_with("GET") => {
                            "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n"
                                .to_string()
                        }
                        Some(id) => {
                            let result = if message["method"] == "initialize" {
                                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                       "serverInfo": {"name": "fake", "version": "1"}})
                            } else {
                                json!({"content": [{"type": "text", "text": "ok"}]})
                            };
                            let body =
                                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                 mcp-session-id: s1\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        }
                        None => "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_string(),
                    };
                    if out.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, heads)
}

#[test]
fn a_call_naming_its_agent_goes_without_the_bridges_default_agent() {
    let (_dir, root) = workspace();
    let (url, heads) = recording_server();
    let mut client =
        StdioClient::start_with(&root, &["--url", &url, "--token", "t", "--agent", "shared"]);
    let request_of = |heads: &mpsc::Receiver<String>, path: &str| loop {
        let seen = heads
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the bridge never sent the call for {path}"));
        if seen.contains("tools/call") && seen.contains(path) {
            return seen.to_ascii_lowercase();
        }
    };
    client.call("read_file", json!({"path": "mine.txt"}));
    let plain = request_of(&heads, "mine.txt");
    assert!(plain.contains("writ-agent: shared"), "{plain}");
    // A subagent's call, its agent filled in by a hook: that agent acts.
    client.call(
        "read_file",
        json!({"path": "sub.txt", "agent": "claude-code-1/sub-2"}),
    );
    let named = request_of(&heads, "sub.txt");
    assert!(!named.contains("writ-agent: shared"), "{named}");
    assert!(named.contains("claude-code-1/sub-2"), "{named}");
}
