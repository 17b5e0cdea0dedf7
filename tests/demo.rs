//! The demo binary runs end to end and loses nothing with writ.

use std::process::{Command, Output};

/// Runs the `writ` binary with `args`.
fn writ(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(args)
        .output()
        .expect("the writ binary runs")
}

/// Runs it and returns its standard output, failing on a non-zero exit.
fn writ_ok(args: &[&str]) -> String {
    let output = writ(args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn demo_loses_no_update_with_writ() {
    let stdout = writ_ok(&[
        "demo", "--agents", "4", "--calls", "40", "--seed", "3", "--json",
    ]);
    let outcome: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    assert_eq!(outcome["with_writ"]["lost_updates"], 0);
    assert_eq!(outcome["through_files"]["lost_updates"], 0);
    assert!(
        outcome["through_files"]["writes"]
            .as_u64()
            .is_some_and(|w| w > 0)
    );
    // 4 agents: 2 optimistic (1 worker each), 2 fenced (2 parallel workers and a sub-agent each).
    let workers = 2 + 2 * 3;
    let writes = outcome["with_writ"]["writes"].as_u64().unwrap();
    let admission = &outcome["admission"];
    let count = |key: &str| admission[key].as_u64().unwrap();
    assert_eq!(
        writes + count("refused_by_fence") + count("timed_out"),
        workers * 40,
        "every call wrote, was refused by a fence, or waited its bound and gave up: {admission}"
    );
    assert_eq!(
        count("refused"),
        count("refused_by_fence"),
        "agents wait instead of being refused and retrying: {admission}"
    );
    assert_eq!(admission["deadlocks_refused"], 1);
    assert_eq!(
        outcome["dump"]["counters"]["deadlocks"], admission["deadlocks_refused"],
        "the summary and the dump agree on deadlocks"
    );
    assert!(
        outcome["dump"]["holds"]
            .as_array()
            .is_some_and(|h| !h.is_empty())
    );
}

#[test]
fn demo_refuses_bad_arguments() {
    let output = writ(&["demo", "--agents", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("at least 1"));
}

#[test]
fn plan_demo_shows_a_refusal_and_the_fixed_waves() {
    let text = writ_ok(&["demo", "--plan"]);
    assert!(
        text.contains("refused: tasks 'lexer' and 'parser'"),
        "{text}"
    );
    assert!(text.contains("wave 1:"), "{text}");
}

#[test]
fn delegate_demo_reports_the_fake_agents_changes() {
    let text = writ_ok(&["demo", "--delegate"]);
    assert!(
        text.contains("renamed   src/util.rs -> src/helpers.rs"),
        "{text}"
    );
    assert!(
        text.contains("lead/run-1"),
        "the dump taken during the run shows the run's actor: {text}"
    );
    assert!(
        text.contains("Sandboxed (bubblewrap)"),
        "the demo's run is sandboxed and says so (needs bubblewrap installed): {text}"
    );
}

/// One HTTP/1.1 request on a fresh loopback connection; the answer's head
/// and as much body as arrives until `done` says enough or 30 s pass.
fn http(addr: &str, request: &str, done: impl Fn(&str) -> bool) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    while !done(&String::from_utf8_lossy(&answer)) && std::time::Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// `writ demo --serve --keep` leaves its server up with the agents still
/// working: the page is served, `/events` reports admissions as they
/// happen, and `session.stop` ends it all (workers included).
#[test]
fn demo_serve_keep_leaves_a_working_server_to_watch() {
    use std::io::BufRead as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["demo", "--serve", "--keep", "--agents", "3", "--calls", "5"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("--keep:") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the demo ended before leaving its server up"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    // "--keep: the server stays up at http://ADDR (token TOKEN); ..."
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let token = line
        .split("(token ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_string();

    let page = http(
        &addr,
        &format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        |_| false,
    );
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("<title>writ</title>"));
    let events = http(
        &addr,
        &format!("GET /events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"),
        |text| text.contains(r#""kind":"admitted""#),
    );
    assert!(
        events.starts_with("HTTP/1.1 200") && events.contains(r#""kind":"admitted""#),
        "the agents go on working, and /events shows it: {events}"
    );

    let body = r#"{"jsonrpc":"2.0","id":1,"method":"session.stop","params":{}}"#;
    let stopped = http(
        &addr,
        &format!(
            "POST /rpc HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
        |_| false,
    );
    assert!(stopped.starts_with("HTTP/1.1 200"), "{stopped}");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(status) => assert!(status.unwrap().success(), "the demo lost no update"),
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            panic!("the demo did not stop within 30 s of session.stop");
        }
    }
}
