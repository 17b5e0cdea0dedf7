//! The page at `/`, opened in a real browser: headless Chromium, driven
//! over the DevTools protocol on a pipe, against a `writ serve` process.
//! The page must log in from the URL fragment, draw the actors, holds,
//! waiter and wait-for graph from `/dump`, then redraw when `/events`
//! reports a change. Nothing sleeps to synchronize: the page is asked to
//! wait (with a deadline) until it shows what the test expects, and the
//! test asserts on what it showed.
//!
//! The page is opened late, after refusals, a timeout, writes and an MCP
//! agent's contested call have happened: it must still log each of them
//! (from the ring, `/events?recent=`), once each, with paths relative to
//! the root, and draw an edge from a waiter to the call that blocks it.
//!
//! It needs Chromium (`apt-get install chromium`), and fails without it.

#[path = "common/mcp_http_client.rs"]
mod mcp_http_client;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use writ::Grant;
use writ::remote::Session;

/// Where Chromium is, or the one line that says how to get it.
fn chromium() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    ["chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| on_path.iter().map(move |dir| dir.join(name)))
        .chain([PathBuf::from("/usr/bin/chromium")])
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("this test opens the page in headless Chromium: apt-get install chromium")
        })
}

/// A headless Chromium speaking the DevTools protocol on a pipe: commands
/// go to its fd 3, replies and events come from its fd 4, each message one
/// JSON text ended by a NUL byte.
struct Browser {
    child: Child,
    commands: ChildStdin,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
    /// The page's session, once attached.
    session: Option<String>,
    log: PathBuf,
    _profile: tempfile::TempDir,
}

/// How long one DevTools command may take.
const COMMAND_WAIT: Duration = Duration::from_secs(30);

/// How long a freshly started Chromium may take to open its first tab.
const START_WAIT: Duration = Duration::from_secs(20);

/// How many times Chromium is started before the test gives up on it.
const STARTS: usize = 3;

impl Browser {
    fn launch(log: PathBuf) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(&log).unwrap();
        // The shell gives Chromium the two pipe ends as fds 3 and 4, where
        // `--remote-debugging-pipe` looks for them.
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-default-apps",
                "--disable-extensions",
                "--disable-sync",
                // Loopback only: every other name fails to resolve.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--window-size=1280,1100",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("/bin/sh starts Chromium");
        let commands = child.stdin.take().unwrap();
        let mut replies = BufReader::new(child.stdout.take().unwrap());
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut message = Vec::new();
            while matches!(replies.read_until(0, &mut message), Ok(n) if n > 0) {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && tx.send(value).is_err()
                {
                    return;
                }
                message.clear();
            }
        });
        Browser {
            child,
            commands,
            messages,
            next_id: 0,
            session: None,
            log,
            _profile: profile,
        }
    }

    /// A Chromium with `url` open in a tab it is attached to. A browser
    /// that does not open its first tab within [`START_WAIT`] (seen once on
    /// a loaded machine: `Target.createTarget` never answered) is killed
    /// and started afresh, [`STARTS`] times at most; what it logged is
    /// printed each time.
    fn open_at(log: PathBuf, url: &str) -> Browser {
        for start in 1..=STARTS {
            let mut browser = Browser::launch(log.clone());
            match browser.send(
                "Target.createTarget",
                json!({"url": "about:blank"}),
                START_WAIT,
            ) {
                Ok(Ok(target)) => {
                    browser.attach(&target, url);
                    return browser;
                }
                Ok(Err(error)) => panic!("Target.createTarget: {error}{}", browser.log_tail()),
                Err(why) => {
                    eprintln!(
                        "Chromium start {start} of {STARTS}: Target.createTarget: {why}{}",
                        browser.log_tail()
                    );
                }
            }
        }
        panic!("Chromium never opened a tab in {STARTS} starts")
    }

    /// The end of what Chromium wrote to its log, to show with a failure.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("\nChromium's log ({}) ends:\n{tail}", self.log.display())
    }

    /// Sends one command (to the attached page, once there is one) and
    /// returns its result, or its error as `Err`.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.send(method, params, COMMAND_WAIT)
            .unwrap_or_else(|why| panic!("{method}: {why}{}", self.log_tail()))
    }

    /// [`Browser::call`], saying why when no answer came within `wait`.
    fn send(
        &mut self,
        method: &str,
        params: Value,
        wait: Duration,
    ) -> Result<Result<Value, Value>, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            command["sessionId"] = Value::from(session.as_str());
        }
        let mut bytes = command.to_string().into_bytes();
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .and_then(|()| self.commands.flush())
            .map_err(|e| format!("Chromium's pipe is closed ({e})"))?;
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self
                .messages
                .recv_timeout(left)
                .map_err(|e| format!("no answer ({e:?})"))?;
            if message["id"] == id {
                return Ok(match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message["result"].clone()),
                });
            }
        }
    }

    /// Attaches to the new tab `target` and opens `url` in it.
    fn attach(&mut self, target: &Value, url: &str) {
        let attached = self
            .call(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .unwrap();
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        let navigated = self.call("Page.navigate", json!({"url": url})).unwrap();
        assert!(navigated.get("errorText").is_none(), "{navigated}");
    }

    /// Runs `script` (an expression whose value is a promise) in the page
    /// and returns what it resolved to. A page still loading has no
    /// context to run it in yet: asked again, within the deadline.
    fn evaluate(&mut self, script: &str) -> Value {
        let deadline = Instant::now() + COMMAND_WAIT;
        loop {
            let answer = self.call(
                "Runtime.evaluate",
                json!({"expression": script, "awaitPromise": true, "returnByValue": true}),
            );
            match answer {
                Ok(result) if result.get("exceptionDetails").is_none() => {
                    return result["result"]["value"].clone();
                }
                Ok(result) => panic!("the script failed in the page: {result}"),
                Err(error) if Instant::now() < deadline => {
                    eprintln!("asking the page again: {error}");
                }
                Err(error) => panic!("the page never ran the script: {error}"),
            }
        }
    }

    /// The page as a PNG.
    fn screenshot(&mut self) -> Vec<u8> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closed politely, Chromium takes its helper processes with it.
        self.session = None;
        let closed = self
            .send("Browser.close", json!({}), Duration::from_secs(10))
            .is_ok();
        if !closed {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A script that waits (polling the DOM, 20 s at most) until `ready`
/// holds for the page's sections, then returns their text either way, so
/// the test's assertions show what the page showed.
fn wait_for(ready: &str) -> String {
    format!(
        r#"(async () => {{
  const text = (id) => {{ const e = document.getElementById(id); return e ? e.innerText : ""; }};
  const look = () => ({{
    status: text("status"), counters: text("counters"), actors: text("actors"),
    holds: text("holds"), waiters: text("waiters"), log: text("log"),
    graph: (document.getElementById("graph") || {{}}).innerHTML || "",
    url: location.href,
  }});
  const ready = (s) => {ready};
  const deadline = Date.now() + 20000;
  for (;;) {{
    const s = look();
    if (ready(s) || Date.now() > deadline) return s;
    await new Promise((ok) => setTimeout(ok, 50));
  }}
}})()"#
    )
}

/// A `writ serve` process on a fresh workspace; killed if the test fails.
struct Serve {
    child: Child,
    url: String,
    token: String,
}

impl Serve {
    fn start(root: &Path, state: &Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
            .arg("serve")
            .arg(root)
            // A larger ring than the default, as a session would ask for one.
            .args(["--no-history", "--no-fsync", "--events-ring", "65536"])
            // An MCP call that waits gives up soon.
            .args(["--call-wait", "0.3"])
            .env("XDG_STATE_HOME", state)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // Its first line names the URL once it listens; the discovery file
        // is written before it.
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // The rest is read too: a closed pipe would fail its next line.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let url = line
            .strip_prefix("writ serve: ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("writ serve said {line:?}"))
            .to_string();
        let found =
            writ::server::read_discovery(&writ::server::discovery_path(root, None)).unwrap();
        assert_eq!(found.url, url);
        Serve {
            child,
            url,
            token: found.token,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_page_shows_the_table_in_a_browser_and_follows_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir_all(root.join("src/parser")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("notes.md"), "notes\n").unwrap();
    let serve = Serve::start(&root, &dir.path().join("state"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // A lead with a fenced child that holds a file, a fence of the lead's
    // own, and a second root actor waiting for a file inside it.
    let (session, lead, parser, lex, guide, waiter) = rt.block_on(async {
        let session = Session::connect(&serve.url, &serve.token).await.unwrap();
        let lead = session
            .actor("lead", Grant::workspace(&root))
            .await
            .unwrap();
        let parser = lead
            .child("parser", Grant::fenced(&root, ["src/parser/"]))
            .await
            .unwrap();
        let lex = parser
            .request(["src/parser/lex.rs"])
            .label("write lex.rs")
            .try_admit()
            .await
            .unwrap();
        // A fence, so the reviewer's wait is an edge of the wait-for graph.
        let guide = lead
            .request(["docs/"])
            .label("edit the docs")
            .fence()
            .await
            .unwrap();
        let reviewer = session
            .actor("reviewer", Grant::workspace(&root))
            .await
            .unwrap();
        let waiter = tokio::spawn(async move {
            let held = reviewer.admit(["docs/guide.md"]).await;
            (reviewer, held)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while session.dump().await.unwrap()["waiters"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            assert!(Instant::now() < deadline, "the reviewer never queued");
            tokio::task::yield_now().await;
        }
        (session, lead, parser, lex, guide, waiter)
    });

    // Before anyone watches: a busy refusal, both gate refusals, a write,
    // an MCP agent whose write waits behind a call and gives up, and a
    // waiter behind that call, still waiting when the page opens.
    let (tester, readme, tester_waits) = rt.block_on(async {
        let tester = session
            .actor("tester", Grant::workspace(&root))
            .await
            .unwrap();
        assert!(tester.try_admit(["src/parser/lex.rs"]).await.is_err());
        let not_read = tester.files().write("notes.md", "tester\n").await;
        assert!(matches!(not_read, Err(writ::Error::NotRead { .. })));
        lead.files().read("notes.md").await.unwrap();
        tester.files().read("notes.md").await.unwrap();
        tester.files().write("notes.md", "tester\n").await.unwrap();
        let stale = lead.files().write("notes.md", "lead\n").await;
        assert!(matches!(stale, Err(writ::Error::Stale { .. })));
        let readme = lead
            .request(["README.md"])
            .label("edit the readme")
            .try_admit()
            .await
            .unwrap();
        let mut carol = mcp_http_client::McpHttp::new(&format!("{}/mcp", serve.url), &serve.token)
            .with_header("Writ-Agent", "carol");
        assert_eq!(carol.initialize("page-test").await.status, 200);
        let (failed, text) = carol
            .call(
                "write_file",
                json!({"path": "README.md", "content": "no\n"}),
            )
            .await;
        assert!(failed && text.contains("lead"), "{text}");
        let tester_waits = {
            let session = session.clone();
            let root = root.clone();
            tokio::spawn(async move {
                let waiting = session.actor("waiter", Grant::workspace(&root)).await?;
                let held = waiting.admit(["README.md"]).await?;
                held.release().await?;
                waiting.close().await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while session.dump().await.unwrap()["waiters"]
            .as_array()
            .is_none_or(|w| w.len() < 2)
        {
            assert!(Instant::now() < deadline, "the second waiter never queued");
            tokio::task::yield_now().await;
        }
        (tester, readme, tester_waits)
    });

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    // The token goes in the fragment, which the browser never sends.
    let mut browser = Browser::open_at(
        shots.join("page_browser-chromium.log"),
        &format!("{}/#token={}", serve.url, serve.token),
    );
    let shown = browser.evaluate(&wait_for(
        r#"s.status === "live" && ["lead", "parser", "reviewer"].every((n) => s.actors.includes(n))
           && s.holds.includes("edit the docs") && s.waiters.includes("reviewer") && s.graph.includes("<svg")
           && s.log.includes("gave up") && s.graph.includes('data-edge="call"')"#,
    ));
    let field = |key: &str| shown[key].as_str().unwrap_or_default().to_string();
    assert_eq!(field("status"), "live", "the page reads /events: {shown:#}");
    assert!(
        !field("url").contains(&serve.token),
        "the token is wiped from the address bar: {}",
        field("url")
    );
    for name in ["lead", "parser", "reviewer"] {
        assert!(field("actors").contains(name), "actor {name}: {shown:#}");
    }
    // The child is drawn under its parent: its line comes after the lead's.
    let actors = field("actors");
    assert!(
        actors.find("lead") < actors.find("parser"),
        "the tree: {actors}"
    );
    let holds = field("holds");
    for want in [
        "src/parser/lex.rs",
        "write lex.rs",
        "docs/",
        "edit the docs",
        "src/parser/",
        "fence",
    ] {
        assert!(holds.contains(want), "holds show {want:?}: {holds}");
    }
    let waiters = field("waiters");
    assert!(
        waiters.contains("reviewer")
            && waiters.contains("docs/guide.md")
            && waiters.contains("held by lead"),
        "the waiter, what it waits for and who holds it: {waiters}"
    );
    let graph = field("graph");
    assert!(
        graph.contains("reviewer") && graph.contains("lead") && graph.contains("<line"),
        "the wait-for graph has the reviewer's edge to the lead: {graph}"
    );
    assert!(
        field("counters").contains("2 waiting"),
        "counters: {}",
        field("counters")
    );
    // Opened late, it reads the past from the ring: every refusal once,
    // the gate's too, the write, and the MCP call's wait as one line.
    let log = field("log");
    let lines = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(lines("tester refused (busy)"), 1, "{log}");
    assert_eq!(lines("tester refused (not_read)"), 1, "{log}");
    assert_eq!(lines("lead refused (stale)"), 1, "{log}");
    assert_eq!(lines("tester write notes.md"), 1, "{log}");
    assert_eq!(lines("carol gave up"), 1, "{log}");
    assert_eq!(lines("carol refused"), 0, "a wait is one line: {log}");
    assert!(
        log.contains("README.md held by lead"),
        "what it waited for: {log}"
    );
    let counters = field("counters");
    // Refused: the log's three lines (busy, not_read, stale), not only
    // the table's admission refusal.
    assert!(
        counters.contains("3 refused") && counters.contains("1 timed out"),
        "the counters agree with the log: {counters}"
    );
    // A waiter behind a call has its edge to the caller.
    assert!(
        graph.contains(r#"data-edge="call" data-from="waiter" data-to="lead""#),
        "the edge to a call in progress: {graph}"
    );
    for section in ["holds", "waiters", "log", "actors"] {
        assert!(
            !field(section).contains(&root.display().to_string()),
            "{section}: paths relative to the root: {}",
            field(section)
        );
    }
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    let shot = shots.join("page_browser.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!("the page as Chromium drew it: {}", shot.display());

    // The lead lets go and is refused inside its child's fence: the page
    // learns of both from /events alone and redraws.
    let reviewing = rt.block_on(async {
        guide.release().await.unwrap();
        let (reviewer, held) = waiter.await.unwrap();
        let held = held.unwrap();
        assert!(lead.try_admit(["src/parser/lex.rs"]).await.is_err());
        (reviewer, held)
    });
    let shown = browser.evaluate(&wait_for(
        r#"s.log.includes("lead refused (busy)") && s.waiters.includes("waiter") && s.holds.includes("reviewer")"#,
    ));
    let log = shown["log"].as_str().unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("lead refused (busy)") && l.contains("src/parser/lex.rs")),
        "the refusal is logged with its sentence: {shown:#}"
    );
    assert!(
        !shown["waiters"]
            .as_str()
            .unwrap_or_default()
            .contains("reviewer"),
        "the reviewer was admitted: {shown:#}"
    );
    assert!(
        shown["holds"]
            .as_str()
            .unwrap_or_default()
            .contains("reviewer"),
        "the reviewer's hold is drawn: {shown:#}"
    );
    drop(browser);

    rt.block_on(async {
        readme.release().await.unwrap();
        tester_waits.await.unwrap().unwrap();
        tester.close().await.unwrap();
        let (reviewer, held) = reviewing;
        held.release().await.unwrap();
        lex.release().await.unwrap();
        reviewer.close().await.unwrap();
        parser.close().await.unwrap();
        lead.close().await.unwrap();
        session.call("session.stop", json!({})).await.unwrap();
    });
}
