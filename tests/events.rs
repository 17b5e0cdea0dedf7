//! `GET /events` and `GET /` on `writ serve`: the event stream under load
//! against an oracle of what the clients did, reconnects with
//! `Last-Event-ID`, the slow reader that is dropped with a `gap`, auth, and
//! the JSON the page consumes. Nothing sleeps to synchronize: readers wait
//! for what they expect with a deadline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use writ::Grant;
use writ::remote::Session;
use writ::server::{Options, Server};

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

async fn start(root: &PathBuf) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(
        Options::new(root)
            .config(config)
            .lease_ttl(Duration::from_secs(60)),
    )
    .await
    .unwrap()
}

type Http = Client<HttpConnector, Empty<Bytes>>;

fn http() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get(
    client: &Http,
    server: &Server,
    path: &str,
    token: Option<&str>,
    last: Option<u64>,
) -> hyper::Response<Incoming> {
    let mut request = hyper::Request::get(format!("{}{path}", server.url()));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(last) = last {
        request = request.header("last-event-id", last.to_string());
    }
    client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap()
}

/// Reads server-sent events off a response body.
struct Sse {
    body: Incoming,
    buffer: Vec<u8>,
    ended: bool,
}

/// What the next read of a stream gave.
enum Next {
    /// An event: its `id:` and its `data:`.
    Event(u64, String),
    /// The server ended the stream (or the connection broke).
    Ended,
    /// Nothing came before the deadline.
    Stalled,
}

impl Sse {
    fn new(response: hyper::Response<Incoming>) -> Self {
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            body: response.into_body(),
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next event (its `id:` and parsed `data:`), `None` when the
    /// stream ended or `deadline` passed.
    async fn next(&mut self, deadline: Instant) -> Option<(u64, Value)> {
        match self.next_raw(deadline).await {
            Next::Event(id, data) => {
                let value: Value = serde_json::from_str(&data).unwrap();
                assert_eq!(value["seq"], id, "the SSE id is the sequence number");
                Some((id, value))
            }
            Next::Ended | Next::Stalled => None,
        }
    }

    async fn next_raw(&mut self, deadline: Instant) -> Next {
        loop {
            // Messages end with a blank line; a frame may end anywhere,
            // even inside a character, so bytes are kept until one is whole.
            while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let message: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let message = std::str::from_utf8(&message).unwrap();
                let mut id = None;
                let mut data = String::new();
                for line in message.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse::<u64>().unwrap());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if let Some(id) = id {
                    return Next::Event(id, data);
                }
                // A comment (keep-alive): read on.
            }
            if self.ended {
                return Next::Ended;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Next::Stalled;
            };
            match tokio::time::timeout(left, self.body.frame()).await {
                Err(_) => return Next::Stalled,
                Ok(None) | Ok(Some(Err(_))) => self.ended = true,
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

fn kind(event: &Value) -> &str {
    event["kind"].as_str().unwrap()
}

/// How long the load runs: the target's 10 s. `WRIT_EVENTS_LOAD_SECS` only
/// shortens it for a quick look while working on the stream.
fn load_duration() -> Duration {
    let secs = std::env::var("WRIT_EVENTS_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s <= 10.0)
        .unwrap_or(10.0);
    Duration::from_secs_f64(secs)
}

/// An event as the load test's reader keeps it: what the oracle compares.
#[derive(Debug, serde::Deserialize)]
struct Wire {
    seq: u64,
    kind: String,
    hold: Option<u64>,
    actor_name: Option<String>,
    name: Option<String>,
    paths: Option<Vec<WirePath>>,
}

#[derive(Debug, serde::Deserialize)]
struct WirePath {
    path: PathBuf,
}

/// What the load test's reader read, over all its connections.
#[derive(Debug, Default)]
struct Read {
    /// Every sequence number, in the order read.
    seqs: Vec<u64>,
    /// The `admitted` and `released` events.
    holds: Vec<Wire>,
    /// Any `gap` events (there must be none).
    gaps: Vec<Wire>,
    /// Reconnects the reader chose (to resume under load)…
    resumed: usize,
    /// …and those forced on it (the server ended its stream).
    cut_off: usize,
}

/// Reads `/events` until every client's actor was dropped. Every
/// `RESUME_EVERY` events it hangs up and reconnects with `Last-Event-ID`,
/// and it does the same whenever the server ends its stream, so the run
/// checks resuming under load as well as the live stream.
async fn read_until_dropped(
    url: String,
    token: String,
    clients: BTreeSet<String>,
    subscribed: tokio::sync::oneshot::Sender<()>,
) -> Read {
    const RESUME_EVERY: usize = 5_000;
    // Far longer than any pause a loaded machine makes between events.
    const STALL: Duration = Duration::from_secs(60);
    let client = http();
    let mut read = Read::default();
    let mut waiting_for = clients;
    let mut last: Option<u64> = None;
    let mut subscribed = Some(subscribed);
    while !waiting_for.is_empty() {
        assert!(
            read.cut_off < 1_000,
            "the stream keeps ending: {} reconnects",
            read.cut_off
        );
        let mut request = hyper::Request::get(format!("{url}/events"))
            .header("authorization", format!("Bearer {token}"));
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        let response = client
            .request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let mut stream = Sse::new(response);
        // The server subscribed before it answered.
        if let Some(subscribed) = subscribed.take() {
            let _ = subscribed.send(());
        }
        let mut on_this_connection = 0;
        loop {
            match stream.next_raw(Instant::now() + STALL).await {
                Next::Event(seq, data) => {
                    let event: Wire = serde_json::from_str(&data).unwrap();
                    assert_eq!(event.seq, seq, "the SSE id is the sequence number");
                    read.seqs.push(seq);
                    last = Some(seq);
                    match event.kind.as_str() {
                        "admitted" | "released" => read.holds.push(event),
                        "gap" => read.gaps.push(event),
                        "actor_dropped" => {
                            waiting_for.remove(event.name.as_deref().unwrap_or(""));
                        }
                        _ => {}
                    }
                    if waiting_for.is_empty() {
                        break;
                    }
                    on_this_connection += 1;
                    if on_this_connection == RESUME_EVERY {
                        read.resumed += 1;
                        break;
                    }
                }
                Next::Ended => {
                    read.cut_off += 1;
                    break;
                }
                Next::Stalled => panic!(
                    "no event for {STALL:?} after {} read; still waiting for {} actors to drop",
                    read.seqs.len(),
                    waiting_for.len()
                ),
            }
        }
    }
    read
}

/// The number in a hold's wire handle (`h-<instance>-<n>`): the id the
/// dump and `/events` give the hold.
fn hold_number(handle: &str) -> u64 {
    handle
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{handle} is not a hold handle"))
}

/// 64 clients, each with its own session and actor, admit random sets of
/// 1–4 of 48 files (waiting when contested) and release them, for 10 s,
/// while one reader consumes `/events` over HTTP, hanging up and resuming
/// with `Last-Event-ID` every few thousand events. The oracle is what the
/// clients were given: for every hold id a client got, the stream has
/// exactly one `admitted` (with that client's actor and the paths it got)
/// and exactly one `released` after it, each before the client's next
/// hold; it has no hold nobody was given, no `gap`, and consecutive
/// sequence numbers. The ring is made large enough for the whole run, so
/// a gap here would be a bug, not a slow machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_every_admission_and_release_appears_once_in_order() {
    const CLIENTS: usize = 64;
    const RING: usize = 1 << 20;
    let (_dir, root) = workspace();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .events_ring(RING);
    let server = Server::start(
        Options::new(&root)
            .config(config)
            .lease_ttl(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let names: BTreeSet<String> = (0..CLIENTS).map(|c| format!("c{c}")).collect();
    let (subscribed, reader_is_subscribed) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(read_until_dropped(
        server.url().to_string(),
        server.token().to_string(),
        names,
        subscribed,
    ));
    // Nobody admits before the reader's stream has begun.
    reader_is_subscribed.await.unwrap();
    let started = Instant::now();
    let stop_at = started + load_duration();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (url, token, root) = (
            server.url().to_string(),
            server.token().to_string(),
            root.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let session = Session::connect(&url, &token).await.unwrap();
            let actor = session
                .actor(format!("c{c}"), Grant::workspace(&root))
                .await
                .unwrap();
            let mut seed = (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            // (hold id, its paths), in the order this client was given them.
            let mut given: Vec<(u64, Vec<PathBuf>)> = Vec::new();
            while Instant::now() < stop_at {
                let count = 1 + (next() % 4) as usize;
                let files: Vec<String> =
                    (0..count).map(|_| format!("f{}.rs", next() % 48)).collect();
                let held = actor.admit(files).await.unwrap();
                let mut paths = held.paths();
                paths.sort();
                given.push((hold_number(held.id()), paths));
                held.release().await.unwrap();
            }
            actor.close().await.unwrap();
            session.close().await.unwrap();
            given
        }));
    }
    let mut oracle: BTreeMap<String, Vec<(u64, Vec<PathBuf>)>> = BTreeMap::new();
    for (c, task) in tasks.into_iter().enumerate() {
        oracle.insert(format!("c{c}"), task.await.unwrap());
    }
    let ran = started.elapsed();
    let read = tokio::time::timeout(Duration::from_secs(300), reader)
        .await
        .expect("the reader saw every client's actor dropped within 300 s")
        .unwrap();
    let given: usize = oracle.values().map(Vec::len).sum();
    eprintln!(
        "{CLIENTS} clients for {ran:.1?}: {given} holds; the reader read {} events, \
         resumed {} times by choice and {} times after the server ended its stream",
        read.seqs.len(),
        read.resumed,
        read.cut_off
    );
    assert!(given >= CLIENTS, "every client admitted at least once");

    // The oracle: what the clients were given, hold by hold.
    let mut by_hold: HashMap<u64, (Vec<&Wire>, Vec<&Wire>)> = HashMap::new();
    for event in &read.holds {
        let hold = event.hold.expect("admitted and released name their hold");
        let entry = by_hold.entry(hold).or_default();
        match event.kind.as_str() {
            "admitted" => entry.0.push(event),
            _ => entry.1.push(event),
        }
    }
    for (name, holds) in &oracle {
        let mut previous_release = None;
        for (hold, paths) in holds {
            let (admitted, released) = by_hold.remove(hold).unwrap_or_default();
            assert_eq!(
                (admitted.len(), released.len()),
                (1, 1),
                "{name}'s hold {hold}: (admitted, released) events in the stream, \
                 where the client was given it once and released it once"
            );
            let (admitted, released) = (admitted[0], released[0]);
            assert!(
                admitted.seq < released.seq,
                "{name}'s hold {hold}: released (#{}) before admitted (#{})",
                released.seq,
                admitted.seq
            );
            for event in [admitted, released] {
                assert_eq!(
                    event.actor_name.as_deref(),
                    Some(name.as_str()),
                    "{event:?}"
                );
            }
            let mut got: Vec<PathBuf> = admitted
                .paths
                .iter()
                .flatten()
                .map(|p| p.path.clone())
                .collect();
            got.sort();
            assert_eq!(
                &got, paths,
                "{name}'s hold {hold}: the admitted paths are the ones the client got"
            );
            if let Some(before) = previous_release {
                assert!(
                    before < admitted.seq,
                    "{name}'s hold {hold} admitted (#{}) before its previous hold was released (#{before})",
                    admitted.seq
                );
            }
            previous_release = Some(released.seq);
        }
    }
    assert!(
        by_hold.is_empty(),
        "the stream has {} holds no client was given, e.g. {:?}",
        by_hold.len(),
        by_hold.iter().next()
    );
    // The stream's own account: nothing lost, nothing twice.
    assert!(
        read.gaps.is_empty(),
        "no event may be lost: {:?}",
        read.gaps
    );
    for pair in read.seqs.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "sequence numbers are consecutive");
    }
    assert!(
        read.resumed >= 1,
        "the run was long enough to resume at least once"
    );
    server.shutdown().await;
}

/// A reader that reconnects with `Last-Event-ID` reads what it missed, in
/// order, even when it was the only reader (its stream's subscription
/// outlives the stream); one whose missed events the ring no longer holds
/// gets a `gap`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_reader_gets_what_it_missed_or_a_gap() {
    let (_dir, root) = workspace();
    let server = start(&root).await;
    let client = http();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Nobody else listens.
    let mut first = Sse::new(get(&client, &server, "/events", Some(server.token()), None).await);
    let sched = server.scheduler().clone();
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let (last, _) = first.next(deadline).await.unwrap();
    drop(first);
    for n in 0..3 {
        drop(lead.try_admit([format!("r{n}.rs")]).unwrap());
    }
    let mut again = Sse::new(
        get(
            &client,
            &server,
            "/events",
            Some(server.token()),
            Some(last),
        )
        .await,
    );
    let mut kinds = Vec::new();
    for want in 1..=6 {
        let (seq, event) = again.next(deadline).await.unwrap();
        assert_eq!(seq, last + want);
        kinds.push(kind(&event).to_string());
    }
    assert_eq!(
        kinds,
        [
            "admitted", "released", "admitted", "released", "admitted", "released"
        ]
    );
    // Far behind: the ring has moved on.
    for n in 0..writ::EVENT_RING {
        drop(lead.try_admit([format!("s{}.rs", n % 7)]).unwrap());
    }
    let mut late = Sse::new(
        get(
            &client,
            &server,
            "/events",
            Some(server.token()),
            Some(last),
        )
        .await,
    );
    let (seq, gap) = late.next(deadline).await.unwrap();
    assert_eq!(kind(&gap), "gap");
    assert_eq!(gap["after"], last);
    assert_eq!(gap["next"], seq + 1);
    let (after_gap, _) = late.next(deadline).await.unwrap();
    assert_eq!(
        after_gap,
        seq + 1,
        "the reader goes on from the oldest event kept"
    );
    server.shutdown().await;
}

/// A viewer who connects late asks for the recent past (`?recent=N`): it
/// reads the last N events, no gap, then goes on live; without the
/// parameter a first connection starts from now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reader_gets_the_recent_past_without_a_gap() {
    let (_dir, root) = workspace();
    let server = start(&root).await;
    let client = http();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Nobody watches while these happen.
    let sched = server.scheduler().clone();
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    for name in ["a.rs", "b.rs", "c.rs"] {
        drop(lead.try_admit([name]).unwrap());
    }
    let mut late = Sse::new(
        get(
            &client,
            &server,
            "/events?recent=4",
            Some(server.token()),
            None,
        )
        .await,
    );
    let mut now = Sse::new(get(&client, &server, "/events", Some(server.token()), None).await);
    let mut seen = Vec::new();
    let mut last = 0;
    for _ in 0..4 {
        let (seq, event) = late.next(deadline).await.unwrap();
        assert!(seq > last, "in order");
        last = seq;
        let path = event["paths"][0]["path"].as_str().unwrap_or_default();
        let file = path.rsplit('/').next().unwrap_or_default().to_string();
        seen.push(format!("{} {file}", kind(&event)));
    }
    assert_eq!(
        seen,
        ["admitted b.rs", "released ", "admitted c.rs", "released "],
        "the last four events, no gap"
    );
    drop(lead.try_admit(["d.rs"]).unwrap());
    let (seq, live) = late.next(deadline).await.unwrap();
    assert_eq!((seq, kind(&live)), (last + 1, "admitted"), "then live");
    let (_, first) = now.next(deadline).await.unwrap();
    assert_eq!(
        first["paths"][0]["path"]
            .as_str()
            .map(|p| p.ends_with("d.rs")),
        Some(true),
        "without ?recent a reader starts from now: {first}"
    );
    server.shutdown().await;
}

/// A reader that does not read falls behind: admission never waits for it,
/// and when it reads again it gets a `gap` and its stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_is_dropped_with_a_gap_and_never_slows_admission() {
    let (_dir, root) = workspace();
    let server = start(&root).await;
    let client = http();
    let mut slow = Sse::new(get(&client, &server, "/events", Some(server.token()), None).await);
    let sched = server.scheduler().clone();
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    // Far more than the ring and the socket buffers hold, while the reader
    // reads nothing; every admission must go through at once.
    for n in 0..60_000 {
        drop(lead.try_admit([format!("x{}.rs", n % 13)]).unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut gap = None;
    while let Some((_, event)) = slow.next(deadline).await {
        if kind(&event) == "gap" {
            gap = Some(event);
            break;
        }
    }
    let gap = gap.expect("the slow reader is told it lost events");
    assert!(gap["next"].as_u64().unwrap() > gap["after"].as_u64().unwrap() + 1);
    assert!(slow.next(deadline).await.is_none(), "then its stream ends");
    // The server goes on serving new readers.
    let mut fresh = Sse::new(get(&client, &server, "/events", Some(server.token()), None).await);
    drop(lead.try_admit(["y.rs"]).unwrap());
    let (_, event) = fresh.next(deadline).await.unwrap();
    assert_eq!(kind(&event), "admitted");
    server.shutdown().await;
}

/// `/events` takes the session token only; `/` needs none and carries none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_takes_the_session_token_only_and_the_page_is_static() {
    let (_dir, root) = workspace();
    let server = start(&root).await;
    let client = http();
    let none = get(&client, &server, "/events", None, None).await;
    assert_eq!(none.status(), 401);
    let wrong = get(&client, &server, "/events", Some("nope"), None).await;
    assert_eq!(wrong.status(), 401);
    let session = Session::connect(server.url(), server.token())
        .await
        .unwrap();
    let actor = session
        .actor("agent", Grant::workspace(&root))
        .await
        .unwrap();
    let as_actor = get(&client, &server, "/events", Some(actor.token()), None).await;
    assert_eq!(as_actor.status(), 403);
    let body = as_actor.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["data"]["kind"], "forbidden");

    let page = get(&client, &server, "/", None, None).await;
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    let html = String::from_utf8(
        page.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(!html.contains(server.token()));
    for outside in [
        "src=\"http",
        "href=\"http",
        "url(http",
        "@import",
        "fetch(\"http",
    ] {
        assert!(
            !html.contains(outside),
            "nothing is loaded from elsewhere: {outside}"
        );
    }
    assert!(html.contains("/events") && html.contains("/dump"));
    drop(actor);
    server.shutdown().await;
}

/// What the page reads, field by field, from `/dump` and `/events` while
/// one actor waits behind another's fence and a third is refused by a
/// deadlock: the same names the page's script uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_data_path_has_every_field_the_page_reads() {
    let (_dir, root) = workspace();
    let server = start(&root).await;
    let client = http();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stream = Sse::new(get(&client, &server, "/events", Some(server.token()), None).await);
    let sched = server.scheduler().clone();
    let lead = Arc::new(sched.actor("lead", Grant::workspace(&root)).unwrap());
    let kid = lead.child("kid", Grant::fenced(&root, ["src/"])).unwrap();
    let held = kid.try_admit(["src/a.rs"]).unwrap();
    assert!(lead.try_admit(["src/a.rs"]).is_err()); // refused
    let waiter = {
        let lead = lead.clone();
        // Behind the child's fence: a hard wait-for edge lead → kid.
        tokio::spawn(async move { lead.admit(["src/b.rs"]).await.map(drop) })
    };
    let mut events: Vec<Value> = Vec::new();
    while !events.iter().any(|e| kind(e) == "waiting") {
        events.push(stream.next(deadline).await.expect("a waiting event").1);
    }

    let dump = get(&client, &server, "/dump", Some(server.token()), None).await;
    let dump: Value =
        serde_json::from_slice(&dump.into_body().collect().await.unwrap().to_bytes()).unwrap();
    for actor in dump["actors"].as_array().unwrap() {
        for field in ["id", "name", "parent", "scope", "root"] {
            assert!(actor.get(field).is_some(), "actors[].{field}: {actor}");
        }
    }
    let holds = dump["holds"].as_array().unwrap();
    assert!(!holds.is_empty());
    for hold in holds {
        for field in ["id", "actor", "actor_id", "kind", "paths", "label", "age"] {
            assert!(hold.get(field).is_some(), "holds[].{field}: {hold}");
        }
        for path in hold["paths"].as_array().unwrap() {
            assert!(
                path["path"].is_string() && path["tree"].is_boolean() && path["mode"].is_string()
            );
        }
    }
    let waiters = dump["waiters"].as_array().unwrap();
    assert_eq!(waiters.len(), 1);
    for field in [
        "id", "actor", "actor_id", "paths", "cause", "waited", "priority",
    ] {
        assert!(waiters[0].get(field).is_some(), "waiters[].{field}");
    }
    assert!(
        !waiters[0]["blocked_by"]["holds"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let edges = dump["edges"].as_array().unwrap();
    assert!(
        !edges.is_empty(),
        "the wait-for graph has the waiter's edge"
    );
    for edge in edges {
        assert!(edge["from"].is_u64() && edge["to"].is_u64(), "{edge}");
    }
    for field in ["admitted", "refused", "waited", "timed_out", "deadlocks"] {
        assert!(dump["counters"][field].is_u64(), "counters.{field}");
    }
    // The log's lines: refusals and waits carry their actor and sentence.
    let refused = events
        .iter()
        .find(|e| kind(e) == "refused")
        .expect("a refused event");
    assert_eq!(refused["actor_name"], "lead");
    assert_eq!(refused["error"], "busy");
    assert!(refused["message"].as_str().unwrap().contains("a.rs"));
    let waiting = events.iter().find(|e| kind(e) == "waiting").unwrap();
    assert!(waiting["cause"].is_object() || waiting["cause"].is_string());
    for event in &events {
        assert!(event["seq"].is_u64() && event["at_ms"].is_u64(), "{event}");
    }
    drop(held);
    drop(kid);
    waiter.await.unwrap().unwrap();
    let mut woke = false;
    while !woke {
        let (_, event) = stream.next(deadline).await.expect("the waiter wakes");
        woke = kind(&event) == "woken";
    }
    server.shutdown().await;
}

/// Every event kind is documented in docs/PROTOCOL.md, with its fields.
#[test]
fn the_protocol_document_lists_every_event_kind() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/PROTOCOL.md")).unwrap();
    for kind in writ::EVENT_KINDS {
        assert!(
            doc.contains(&format!("| `{kind}` |")),
            "docs/PROTOCOL.md lacks the event kind {kind}"
        );
    }
    assert!(doc.contains("Last-Event-ID"));
    assert!(doc.contains("--events-ring") && doc.contains("\"events_ring\""));
    assert!(doc.contains(&format!("last {} events", writ::EVENT_RING)));
}
