//! `writ top`: a running server's table in the terminal, redrawn as
//! `/events` reports changes.
//!
//! A background task reads `/events` (reconnecting with `Last-Event-ID`),
//! keeps a log of refusals, deadlocks, timeouts and gaps, and fetches one
//! consistent `/dump` after each burst of events (at most five a second).
//! The terminal loop draws what it has and quits on `q`, Esc or Ctrl-C.
//! Plain crossterm on the terminal it runs in: it works over SSH.

use std::collections::{BTreeMap, VecDeque};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style, Stylize as _};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, Wrap};
use serde_json::Value;

use crate::serve_cli::{TargetArgs, locate_http};

/// How many log lines are kept.
const LOG_LINES: usize = 500;

/// How many past events a first connection asks for: started late,
/// `writ top` still shows what happened.
const RECENT: usize = 500;

/// What the screen shows; the stream task writes it, the terminal loop reads it.
#[derive(Debug, Default)]
pub struct View {
    /// Where the server is.
    pub url: String,
    /// Connected, reconnecting, refused...
    pub status: String,
    /// The last dump (`None` before the first).
    pub dump: Option<Value>,
    /// Writes, refusals, deadlocks, timeouts, lapsed leases and gaps,
    /// oldest first, each with its time.
    pub log: VecDeque<String>,
    /// The server's ROOT: paths inside it are shown relative to it.
    pub root: Option<String>,
    /// Bumped on every change, so the loop redraws only when needed.
    pub version: u64,
}

impl View {
    /// Takes one event of `/events` into the log; true when the tables
    /// need a fresh dump.
    pub fn take(&mut self, event: &Value) -> bool {
        let name = |key: &str| event[key].as_str().unwrap_or("?").to_string();
        let sentence = |key: &str| self.rel_text(&name(key));
        let line = match event["kind"].as_str().unwrap_or("") {
            "refused" => Some(format!(
                "{} refused ({}): {}",
                name("actor_name"),
                name("error"),
                sentence("message")
            )),
            "deadlock" => Some(format!(
                "{} deadlock: {}",
                name("actor_name"),
                sentence("message")
            )),
            "timed_out" => Some(format!(
                "{} gave up after {} ms{}",
                name("actor_name"),
                event["waited_ms"],
                if event["cause"].is_object() {
                    format!(" waiting for {}", self.cause(&event["cause"]))
                } else {
                    String::new()
                }
            )),
            "file_written" => Some(format!(
                "{} {} {}",
                name("actor_name"),
                name("op"),
                self.rel(&name("path"))
            )),
            "lease_expired" => Some(format!(
                "lease {} lapsed: {} actors, {} holds freed",
                name("lease"),
                event["actors"],
                event["holds"]
            )),
            "gap" => Some(format!(
                "missed events after {} (the tables are redrawn from a fresh dump)",
                event["after"]
            )),
            _ => None,
        };
        if let Some(line) = line {
            if self.log.len() == LOG_LINES {
                self.log.pop_front();
            }
            let at = event["at_ms"].as_u64().map_or_else(String::new, clock);
            // Names, paths and sentences came from agents: escaped.
            self.log
                .push_back(format!("{at}  {}", writ::text::escape(&line)));
            self.version += 1;
        }
        true
    }

    /// A path inside ROOT relative to it (`.` for ROOT), else as it is.
    pub fn rel(&self, path: &str) -> String {
        match self.root.as_deref() {
            Some(root) if path == root => ".".to_string(),
            Some(root) => path
                .strip_prefix(root)
                .and_then(|rest| rest.strip_prefix('/'))
                .unwrap_or(path)
                .to_string(),
            None => path.to_string(),
        }
    }

    /// A sentence with ROOT's prefix taken off the paths in it.
    fn rel_text(&self, text: &str) -> String {
        match self.root.as_deref() {
            Some(root) => text.replace(&format!("{root}/"), ""),
            None => text.to_string(),
        }
    }

    fn paths(&self, v: &Value) -> String {
        v.as_array()
            .map(|list| {
                list.iter()
                    .map(|p| {
                        let mut s = self.rel(&text(&p["path"]));
                        if p["tree"].as_bool() == Some(true) {
                            s.push('/');
                        }
                        if p["mode"] == "shared" {
                            s.push_str(" (shared)");
                        }
                        s
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    }

    fn cause(&self, v: &Value) -> String {
        match v["cause"].as_str() {
            None => "granted, not picked up".into(),
            Some("path") => format!(
                "{} held by {}",
                self.rel(&text(&v["path"])),
                text(&v["holder"])
            ),
            Some(other) => other.to_string(),
        }
    }

    fn set_status(&mut self, status: impl Into<String>) {
        self.status = status.into();
        self.version += 1;
    }
}

/// `HH:MM:SS` (UTC, marked `Z`) of a time in milliseconds since the epoch.
pub fn clock(at_ms: u64) -> String {
    let secs = at_ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Why `writ top` cannot draw here, if it cannot: it needs a terminal on
/// its output and a controlling terminal to read keys from.
fn no_terminal() -> Option<&'static str> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return Some("its output is not a terminal");
    }
    if std::fs::File::open("/dev/tty").is_err() {
        return Some("this process has no terminal to read keys from");
    }
    None
}

/// Runs `writ top`.
pub fn run(target: TargetArgs) -> ExitCode {
    if let Some(why) = no_terminal() {
        eprintln!(
            "writ top: draws a live view on a terminal, but {why}; run it in one, or use `writ dump` for the table once."
        );
        return ExitCode::from(2);
    }
    let (url, token) = match locate_http(target) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("writ top: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match crate::serve_cli::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("writ top: {e}");
            return ExitCode::FAILURE;
        }
    };
    let view = Arc::new(parking_lot::Mutex::new(View {
        url: url.clone(),
        status: "connecting".into(),
        ..View::default()
    }));
    let feeder = runtime.spawn(feed(url, token, view.clone()));
    let outcome = terminal_loop(&view);
    feeder.abort();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writ top: {e}");
            ExitCode::FAILURE
        }
    }
}

fn terminal_loop(view: &parking_lot::Mutex<View>) -> std::io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let mut drawn = u64::MAX;
    let result = loop {
        let version = view.lock().version;
        if version != drawn {
            let view = view.lock();
            if let Err(e) = terminal.draw(|frame| draw(frame, &view)) {
                break Err(e);
            }
            drawn = version;
        }
        match event::poll(Duration::from_millis(100)) {
            Ok(false) => {}
            Ok(true) => match event::read() {
                Ok(Event::Key(key)) if key.kind == KeyEventKind::Press => {
                    let ctrl_c = key.code == KeyCode::Char('c')
                        && key.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        break Ok(());
                    }
                }
                Ok(Event::Resize(..)) => drawn = u64::MAX,
                Ok(_) => {}
                Err(e) => break Err(e),
            },
            Err(e) => break Err(e),
        }
    };
    ratatui::try_restore()?;
    result
}

/// Reads `/events` for as long as `writ top` runs, fetching a dump after
/// each burst of events.
async fn feed(url: String, token: String, view: Arc<parking_lot::Mutex<View>>) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let session = writ::remote::Session::connect(&url, &token).await;
    let session = match session {
        Ok(s) => s,
        Err(e) => {
            view.lock().set_status(format!("cannot connect: {e}"));
            return;
        }
    };
    if let Ok(info) = session.info().await {
        view.lock().root = info["root"].as_str().map(str::to_string);
    }
    let refresh = Arc::new(tokio::sync::Notify::new());
    {
        // One dump at a time, at most five a second, always after the
        // latest event that asked for it.
        let (view, refresh) = (view.clone(), refresh.clone());
        tokio::spawn(async move {
            loop {
                match session.dump().await {
                    Ok(dump) => {
                        let mut v = view.lock();
                        v.dump = Some(dump);
                        v.version += 1;
                    }
                    Err(e) => view.lock().set_status(format!("dump failed: {e}")),
                }
                refresh.notified().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
    let mut last: Option<u64> = None;
    loop {
        // The first connection reads the recent past; a reconnect resumes.
        let path = match last {
            Some(_) => "/events".to_string(),
            None => format!("/events?recent={RECENT}"),
        };
        let mut request = hyper::Request::get(format!("{url}{path}"))
            .header("authorization", format!("Bearer {token}"));
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        let response = match request.body(Empty::new()) {
            Ok(request) => client.request(request).await,
            Err(e) => {
                view.lock().set_status(format!("bad URL: {e}"));
                return;
            }
        };
        match response {
            Ok(response) if response.status() == 401 || response.status() == 403 => {
                view.lock().set_status(format!(
                    "the token was refused (HTTP {}); /events takes the session token",
                    response.status().as_u16()
                ));
                return;
            }
            Ok(response) if response.status().is_success() => {
                view.lock().set_status("live");
                let mut body = response.into_body();
                let mut buffer = String::new();
                while let Some(Ok(frame)) = body.frame().await {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    buffer.push_str(&String::from_utf8_lossy(&data));
                    while let Some((id, event)) = next_message(&mut buffer) {
                        last = Some(id);
                        if view.lock().take(&event) {
                            refresh.notify_one();
                        }
                    }
                }
                view.lock().set_status("reconnecting");
            }
            Ok(response) => view
                .lock()
                .set_status(format!("HTTP {}; retrying", response.status().as_u16())),
            Err(e) => view
                .lock()
                .set_status(format!("disconnected ({e}); retrying")),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Takes the next complete server-sent event off `buffer`: its id and
/// parsed data. Comments (keep-alives) and unparsable messages are skipped.
pub fn next_message(buffer: &mut String) -> Option<(u64, Value)> {
    while let Some(end) = buffer.find("\n\n") {
        let message: String = buffer.drain(..end + 2).collect();
        let mut id = None;
        let mut data = String::new();
        for line in message.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse::<u64>().ok();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        if let (Some(id), Ok(event)) = (id, serde_json::from_str(&data)) {
            return Some((id, event));
        }
    }
    None
}

/// A value of the dump or an event as a table cell: names and paths are
/// agents' choices, escaped so none drives the terminal.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => writ::text::escape(s).into_owned(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A hold's label, and for a claim (SPEC §6) the time its TTL has left.
fn label_of(hold: &Value) -> String {
    let label = text(&hold["label"]);
    match hold["ends_in"].as_f64() {
        Some(secs) => format!("{label}, ends in {secs:.1} s"),
        None => label,
    }
}

fn array(dump: &Value, key: &str) -> Vec<Value> {
    dump[key].as_array().cloned().unwrap_or_default()
}

/// Draws the whole view.
pub fn draw(frame: &mut Frame, view: &View) {
    let area = frame.area();
    let [head, middle, holds_area, waiters_area, log_area] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(5),
        Constraint::Min(4),
        Constraint::Min(4),
        Constraint::Length(8),
    ])
    .areas(area);
    let empty = Value::Null;
    let dump = view.dump.as_ref().unwrap_or(&empty);
    let counters = &dump["counters"];
    let head_lines = vec![
        Line::from(vec![
            Span::styled("writ top ", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!(
                "{}  session {}  ",
                view.url,
                text(&dump["session"])
            )),
            Span::styled(view.status.clone(), Style::new().italic()),
            Span::raw("   q quits"),
        ]),
        Line::from(format!(
            "actors {}  holds {}  waiting {}  admitted {}  refused {}  waited {}  timed out {}  deadlocks {}",
            array(dump, "actors").len(),
            array(dump, "holds").len(),
            array(dump, "waiters").len(),
            text(&counters["admitted"]),
            text(&counters["refused"]),
            text(&counters["waited"]),
            text(&counters["timed_out"]),
            text(&counters["deadlocks"]),
        )),
    ];
    frame.render_widget(Paragraph::new(head_lines), head);

    let [tree_area, graph_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(middle);
    frame.render_widget(
        Paragraph::new(actor_tree(dump))
            .block(Block::new().borders(Borders::ALL).title(" actors ")),
        tree_area,
    );
    frame.render_widget(
        Paragraph::new(wait_for(dump))
            .block(Block::new().borders(Borders::ALL).title(" wait-for graph ")),
        graph_area,
    );

    let holds: Vec<Row> = array(dump, "holds")
        .iter()
        .map(|h| {
            Row::new(vec![
                text(&h["id"]),
                text(&h["actor"]),
                text(&h["kind"]),
                view.paths(&h["paths"]),
                label_of(h),
            ])
        })
        .collect();
    frame.render_widget(
        Table::new(
            holds,
            [
                Constraint::Length(6),
                Constraint::Length(14),
                Constraint::Length(6),
                Constraint::Fill(3),
                Constraint::Fill(1),
            ],
        )
        .header(Row::new(["id", "actor", "kind", "paths", "label"]).bold())
        .block(Block::new().borders(Borders::ALL).title(" holds ")),
        holds_area,
    );

    let waiters: Vec<Row> = array(dump, "waiters")
        .iter()
        .map(|w| {
            let blocked: Vec<String> = w["blocked_by"]["holds"]
                .as_array()
                .map(|l| l.iter().map(text).collect())
                .unwrap_or_default();
            Row::new(vec![
                text(&w["id"]),
                text(&w["actor"]),
                view.paths(&w["paths"]),
                format!("{} [holds {}]", view.cause(&w["cause"]), blocked.join(", ")),
            ])
        })
        .collect();
    frame.render_widget(
        Table::new(
            waiters,
            [
                Constraint::Length(6),
                Constraint::Length(14),
                Constraint::Fill(2),
                Constraint::Fill(2),
            ],
        )
        .header(Row::new(["id", "actor", "paths", "blocked by"]).bold())
        .block(Block::new().borders(Borders::ALL).title(" waiters ")),
        waiters_area,
    );

    let shown = usize::from(log_area.height.saturating_sub(2));
    let lines: Vec<Line> = view
        .log
        .iter()
        .skip(view.log.len().saturating_sub(shown))
        .map(|l| Line::from(l.as_str()))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::new()
                .borders(Borders::ALL)
                .title(" log: writes, refusals, deadlocks, timeouts "),
        ),
        log_area,
    );
}

fn actor_tree(dump: &Value) -> Vec<Line<'static>> {
    let actors = array(dump, "actors");
    let ids: Vec<u64> = actors.iter().filter_map(|a| a["id"].as_u64()).collect();
    let mut children: BTreeMap<Option<u64>, Vec<&Value>> = BTreeMap::new();
    for a in &actors {
        let parent = a["parent"].as_u64().filter(|p| ids.contains(p));
        children.entry(parent).or_default().push(a);
    }
    let mut lines = Vec::new();
    fn walk(
        at: Option<u64>,
        depth: usize,
        children: &BTreeMap<Option<u64>, Vec<&Value>>,
        lines: &mut Vec<Line<'static>>,
    ) {
        for a in children.get(&at).into_iter().flatten() {
            let indent = if depth == 0 {
                String::new()
            } else {
                format!("{}└ ", "  ".repeat(depth - 1))
            };
            lines.push(Line::from(format!(
                "{indent}{} #{} {}",
                text(&a["name"]),
                text(&a["id"]),
                text(&a["scope"])
            )));
            walk(a["id"].as_u64(), depth + 1, children, lines);
        }
    }
    walk(None, 0, &children, &mut lines);
    lines
}

/// Every waiter's edges to whoever is in its way, as (from, to, arrow):
/// the dump's wait-for edges (fences, what deadlock detection sees), an
/// edge to the holder of each hold that blocks it (call holds included)
/// and to each request queued ahead of it. One edge per pair; the dump's
/// kind wins.
pub fn wait_edges(dump: &Value) -> Vec<(u64, u64, &'static str)> {
    let mut edges: Vec<(u64, u64, &'static str)> = Vec::new();
    let mut add = |from: Option<u64>, to: Option<u64>, arrow: &'static str| {
        if let (Some(from), Some(to)) = (from, to) {
            if from != to && !edges.iter().any(|e| (e.0, e.1) == (from, to)) {
                edges.push((from, to, arrow));
            }
        }
    };
    for e in array(dump, "edges") {
        let arrow = if e["hard"].as_bool() == Some(true) {
            "==>"
        } else {
            "-->"
        };
        add(e["from"].as_u64(), e["to"].as_u64(), arrow);
    }
    let holds = array(dump, "holds");
    let waiters = array(dump, "waiters");
    let owner = |list: &[Value], id: &Value| {
        list.iter()
            .find(|x| x["id"] == *id)
            .and_then(|x| x["actor_id"].as_u64().map(|a| (a, x["kind"].clone())))
    };
    for w in &waiters {
        for id in w["blocked_by"]["holds"].as_array().into_iter().flatten() {
            if let Some((holder, kind)) = owner(&holds, id) {
                let arrow = if kind == "call" { "..>" } else { "==>" };
                add(w["actor_id"].as_u64(), Some(holder), arrow);
            }
        }
        for id in w["blocked_by"]["waiters"].as_array().into_iter().flatten() {
            if let Some((ahead, _)) = owner(&waiters, id) {
                add(w["actor_id"].as_u64(), Some(ahead), "-->");
            }
        }
    }
    edges
}

/// The wait-for graph as arrows between names: `==>` hard (a fence in the
/// way), `..>` a call in progress, `-->` soft (queued ahead).
fn wait_for(dump: &Value) -> Vec<Line<'static>> {
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for a in array(dump, "actors") {
        if let Some(id) = a["id"].as_u64() {
            names.insert(id, text(&a["name"]));
        }
    }
    for (list, id, name) in [
        ("holds", "actor_id", "actor"),
        ("waiters", "actor_id", "actor"),
    ] {
        for x in array(dump, list) {
            if let Some(id) = x[id].as_u64() {
                names.entry(id).or_insert_with(|| text(&x[name]));
            }
        }
    }
    let name = |v: &Value| {
        v.as_u64()
            .and_then(|id| names.get(&id).cloned())
            .unwrap_or_else(|| format!("#{}", text(v)))
    };
    let name = |id: u64| name(&Value::from(id));
    let edges = wait_edges(dump);
    if edges.is_empty() {
        return vec![Line::from("nobody waits for anyone")];
    }
    edges
        .iter()
        .map(|(from, to, arrow)| Line::from(format!("{} {arrow} {}", name(*from), name(*to))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use writ::{Config, Grant, Scheduler};

    /// A claim (SPEC §6) shows its kind and the time its TTL has left,
    /// read from a real scheduler's dump; other holds show their label.
    #[test]
    fn a_claim_shows_the_time_it_has_left() {
        let dir = tempfile::tempdir().unwrap();
        let sched = Scheduler::new(Config::default());
        let a = sched.actor("a", Grant::workspace(dir.path())).unwrap();
        let call = a.try_admit(["hot.rs"]).unwrap();
        call.claim(std::time::Duration::from_secs(600));
        let dump = serde_json::to_value(sched.dump()).unwrap();
        let holds = array(&dump, "holds");
        let claim = holds.iter().find(|h| h["kind"] == "claim").unwrap();
        let label = label_of(claim);
        let left: f64 = label
            .strip_prefix("redoing a refused write, ends in ")
            .and_then(|rest| rest.strip_suffix(" s"))
            .and_then(|secs| secs.parse().ok())
            .unwrap_or_else(|| panic!("{label}"));
        assert!((590.0..=600.0).contains(&left), "{label}");
        let other = holds.iter().find(|h| h["kind"] == "call").unwrap();
        assert_eq!(label_of(other), text(&other["label"]));
    }

    fn screen(view: &View) -> String {
        let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
        terminal.draw(|frame| draw(frame, view)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..buffer.area.height {
            for x in 0..buffer.area.width {
                out.push_str(buffer[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    /// A real scheduler's dump and events (a child's fence, its call, a
    /// refused request, a waiter behind the fence), drawn into a test
    /// terminal: every part of the view shows what it should.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_view_shows_tree_holds_waiters_graph_counters_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let sched = Scheduler::new(Config::default());
        let mut events = sched.subscribe();
        let lead = Arc::new(sched.actor("lead", Grant::workspace(&root)).unwrap());
        let kid = lead.child("kid", Grant::fenced(&root, ["src/"])).unwrap();
        let _call = kid.try_admit(["src/a.rs"]).unwrap();
        assert!(lead.try_admit(["src/a.rs"]).is_err());
        kid.files().write("src/new.rs", "fn f() {}\n").unwrap();
        // A call in progress blocks a second root actor: its edge is drawn
        // too, though no deadlock can go through it.
        let note = lead.try_admit(["notes.md"]).unwrap();
        let third = Arc::new(sched.actor("third", Grant::workspace(&root)).unwrap());
        let waiters = [
            {
                let lead = lead.clone();
                tokio::spawn(async move { lead.admit(["src/b.rs"]).await.map(drop) })
            },
            {
                let third = third.clone();
                tokio::spawn(async move { third.admit(["notes.md"]).await.map(drop) })
            },
        ];
        let mut view = View {
            url: "http://127.0.0.1:1".into(),
            status: "live".into(),
            root: Some(root.display().to_string()),
            ..View::default()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut waiting = 0;
        while waiting < 2 {
            let event = tokio::time::timeout_at(deadline, events.next())
                .await
                .unwrap();
            let json = serde_json::to_value(&*event).unwrap();
            assert!(view.take(&json));
            if event.kind.name() == "waiting" {
                waiting += 1;
            }
        }
        view.dump = Some(serde_json::to_value(sched.dump()).unwrap());
        let text = screen(&view);
        assert!(text.contains("writ top"), "{text}");
        assert!(text.contains("lead #1 workspace"), "the tree: {text}");
        assert!(
            text.contains("└ kid #2 fenced"),
            "the child under its parent: {text}"
        );
        assert!(
            text.contains("lead ==> kid"),
            "the hard wait-for edge: {text}"
        );
        assert!(
            text.contains("third ..> lead"),
            "the edge to a call in progress: {text}"
        );
        assert!(
            !text.contains(&root.display().to_string()),
            "paths are relative to the root: {text}"
        );
        assert!(
            text.contains("grant fence"),
            "the fence in the holds: {text}"
        );
        assert!(text.contains("src/a.rs"), "the call's path: {text}");
        assert!(text.contains("src/b.rs"), "the waiter's path: {text}");
        assert!(text.contains("refused 1"), "the counters: {text}");
        assert!(text.contains("waiting 2"), "{text}");
        assert!(text.contains("lead refused (busy):"), "the log: {text}");
        assert!(text.contains("kid write src/new.rs"), "writes: {text}");
        let stamped = view.log.iter().all(|line| {
            let b = line.as_bytes();
            b.len() > 10 && b[2] == b':' && b[5] == b':' && b[8] == b'Z'
        });
        assert!(stamped, "every log line has its time: {:?}", view.log);
        assert!(text.contains("q quits"), "{text}");
        drop(kid);
        drop(note);
        for waiter in waiters {
            waiter.await.unwrap().unwrap();
        }
    }

    #[test]
    fn sse_messages_are_split_and_keep_alives_skipped() {
        let mut buffer =
            String::from(": keep-alive\n\nid: 4\ndata: {\"seq\":4,\"kind\":\"gap\"}\n\nid: 5\nda");
        let (id, event) = next_message(&mut buffer).unwrap();
        assert_eq!((id, event["kind"].as_str()), (4, Some("gap")));
        assert!(next_message(&mut buffer).is_none());
        assert_eq!(buffer, "id: 5\nda");
    }
}
