//! `writ serve` benchmarks, each against a baseline measured in the same run.
//!
//! - `roundtrip`: `try_admit` + `release` through `writ::remote` over
//!   loopback HTTP (two requests), against the same pair in process and
//!   against a bare HTTP echo round trip on the same stack (axum server,
//!   hyper-util client, one connection kept alive) done twice; then the
//!   ratio of the two again, in rounds that take both one after the other.
//! - `load` (printed after criterion's groups): 64 concurrent clients, each
//!   with its own session and connections, admitting random sets of 1–4 of
//!   256 files (waiting when contested) for a few seconds, with an oracle
//!   that fails the run if two clients ever hold one file at once; then
//!   1,000 live leases and the memory each costs.
//!
//! - `events`: admission throughput with nobody reading `/events` against
//!   the same with a connected slow consumer (an `/events` reader over HTTP
//!   that reads one chunk every 50 ms and reconnects with `Last-Event-ID` a
//!   second after it is dropped, as the page and `writ top` do, plus an in-process subscription that never
//!   reads, so the ring is recorded into for the whole measurement): over
//!   HTTP (`try_admit` + `release` through `writ::remote`) and in process
//!   on the server's scheduler.
//!
//! `cargo bench --bench serve` takes well under a minute on a 2-core machine.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "common/rounds.rs"]
mod rounds;

use criterion::Criterion;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use writ::remote::Session;
use writ::server::{Options, Server};
use writ::{Config, Durability, Grant, Scheduler};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn start(root: &Path) -> Server {
    Server::start(
        Options::new(root)
            .config(Config::default().durability(Durability::Process))
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

fn roundtrip(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut group = c.benchmark_group("roundtrip");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    let sched = Scheduler::new(Config::default());
    let local = sched.actor("bench", Grant::workspace(&root)).unwrap();
    group.bench_function("in_process", |b| {
        b.iter(|| drop(black_box(local.try_admit(["src/lib.rs"]).unwrap())))
    });

    let (server, session, actor) = rt.block_on(async {
        let server = start(&root).await;
        let session = Session::connect(server.url(), server.token())
            .await
            .unwrap();
        let actor = session
            .actor("bench", Grant::workspace(&root))
            .await
            .unwrap();
        (server, session, actor)
    });
    group.bench_function("http_try_admit_release", |b| {
        b.iter_custom(|iters| rt.block_on(time_remote(&actor, iters)))
    });

    let (client, url) = rt.block_on(async {
        let url = echo_server().await;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(connector);
        (client, url)
    });
    group.bench_function("http_echo_twice", |b| {
        b.iter_custom(|iters| rt.block_on(time_echo_twice(&client, &url, iters)))
    });
    group.finish();
    roundtrip_interleaved(&rt, &actor, &client, &url);
    rt.block_on(async move {
        drop(actor);
        drop(session);
        server.shutdown().await;
    });
}

/// `iters` pairs of `try_admit` + `release` through `writ::remote`.
async fn time_remote(actor: &writ::remote::Actor, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let r = actor.try_admit(["src/lib.rs"]).await.unwrap();
        r.release().await.unwrap();
    }
    start.elapsed()
}

/// `iters` pairs of bare HTTP echo round trips, each with a body the size
/// of an admit request.
async fn time_echo_twice(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    iters: u64,
) -> Duration {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"admit","params":{"actor":"a-0-1","targets":["src/lib.rs"],"wait":false}}"#;
    let start = Instant::now();
    for _ in 0..iters * 2 {
        let request = hyper::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(body)))
            .unwrap();
        let response = client.request(request).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        black_box(bytes);
    }
    start.elapsed()
}

/// The round trip's ratio over two echoes, measured in rounds that take
/// both one after the other (`WRIT_SERVE_ROUNDS`, default 15; 0 skips
/// it): load that comes and goes during a run then weighs on both alike,
/// where criterion's functions, seconds apart, each meet their own.
fn roundtrip_interleaved(
    rt: &tokio::runtime::Runtime,
    actor: &writ::remote::Actor,
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
) {
    const ITERS: u64 = 300;
    let per_pair = |d: Duration| d.as_secs_f64() * 1e6 / ITERS as f64;
    let Some(r) = rounds::measure(
        "WRIT_SERVE_ROUNDS",
        || {
            let echo = per_pair(rt.block_on(time_echo_twice(client, url, ITERS)));
            let remote = per_pair(rt.block_on(time_remote(actor, ITERS)));
            [echo, remote]
        },
        |[echo, remote]| remote / echo,
    ) else {
        return;
    };
    let [echo, remote] = r.median;
    println!(
        "roundtrip interleaved ({} rounds of {ITERS} pairs each): median round echo twice \
         {echo:.1} µs, try_admit + release {remote:.1} µs; ratio median {:.2} (min {:.2}, \
         max {:.2}; target ≤ 1.5)",
        r.rounds, r.ratio, r.min, r.max
    );
}

/// An `/events` reader that reads one chunk every 50 ms: far slower than the
/// admissions it is sent, so it lags, is dropped with a gap, and reconnects.
async fn slow_consumer(
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
    connected: Arc<tokio::sync::Notify>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = url.trim_start_matches("http://").to_string();
    let mut last: Option<u64> = None;
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        if !first {
            // As the page and `writ top` do: a second before reconnecting.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        first = false;
        let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await else {
            return;
        };
        let resume = last.map_or(String::new(), |l| format!("Last-Event-ID: {l}\r\n"));
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n{resume}\r\n"
        );
        if stream.write_all(request.as_bytes()).await.is_err() {
            return;
        }
        let mut chunk = vec![0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // The first chunk holds the response head: connected.
                    connected.notify_one();
                    // The last id seen in this chunk, if one is whole.
                    let text = String::from_utf8_lossy(&chunk[..n]);
                    if let Some(id) = text
                        .rsplit("id: ")
                        .next()
                        .and_then(|rest| rest.split('\n').next())
                        .and_then(|id| id.trim().parse().ok())
                    {
                        last = Some(id);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn events(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut group = c.benchmark_group("events");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let (server, session, actor) = rt.block_on(async {
        let server = start(&root).await;
        let session = Session::connect(server.url(), server.token())
            .await
            .unwrap();
        let actor = session
            .actor("bench", Grant::workspace(&root))
            .await
            .unwrap();
        (server, session, actor)
    });
    let local = server
        .scheduler()
        .actor("local", Grant::workspace(&root))
        .unwrap();
    let http_pair = |b: &mut criterion::Bencher| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let r = actor.try_admit(["src/lib.rs"]).await.unwrap();
                    r.release().await.unwrap();
                }
                start.elapsed()
            })
        })
    };
    group.bench_function("http/no_listener", http_pair);
    group.bench_function("in_process/no_listener", |b| {
        b.iter(|| drop(black_box(local.try_admit(["src/lib.rs"]).unwrap())))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let keeper = server.scheduler().subscribe();
    let reader = rt.spawn(slow_consumer(
        server.url().to_string(),
        server.token().to_string(),
        stop.clone(),
        Arc::default(),
    ));
    group.bench_function("http/slow_consumer", http_pair);
    group.bench_function("in_process/slow_consumer", |b| {
        b.iter(|| drop(black_box(local.try_admit(["src/lib.rs"]).unwrap())))
    });
    group.finish();
    stop.store(true, Ordering::Relaxed);
    drop(keeper);
    drop(local);
    rt.block_on(async move {
        reader.abort();
        drop(actor);
        drop(session);
        server.shutdown().await;
    });
}

/// The same comparison as the `events` group, interleaved: rounds of 300
/// HTTP admissions with nobody listening, then 300 with the slow consumer
/// and the never-reading subscription attached, so both halves of a round
/// see the same machine load; prints the median of the per-round ratios.
fn events_interleaved() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    rt.block_on(async {
        let server = start(&root).await;
        let session = Session::connect(server.url(), server.token())
            .await
            .unwrap();
        let actor = session
            .actor("bench", Grant::workspace(&root))
            .await
            .unwrap();
        let pairs = |n: usize| {
            let actor = &actor;
            async move {
                let start = Instant::now();
                for _ in 0..n {
                    let r = actor.try_admit(["src/lib.rs"]).await.unwrap();
                    r.release().await.unwrap();
                }
                start.elapsed() / n as u32
            }
        };
        pairs(300).await; // warm-up
        let mut ratios = Vec::new();
        let (mut quiet_all, mut watched_all) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            let quiet = pairs(300).await;
            let stop = Arc::new(AtomicBool::new(false));
            let keeper = server.scheduler().subscribe();
            let connected = Arc::new(tokio::sync::Notify::new());
            let reader = tokio::spawn(slow_consumer(
                server.url().to_string(),
                server.token().to_string(),
                stop.clone(),
                connected.clone(),
            ));
            tokio::time::timeout(Duration::from_secs(5), connected.notified())
                .await
                .expect("the slow consumer connects");
            let watched = pairs(300).await;
            stop.store(true, Ordering::Relaxed);
            reader.abort();
            drop(keeper);
            ratios.push(watched.as_secs_f64() / quiet.as_secs_f64());
            quiet_all.push(quiet);
            watched_all.push(watched);
        }
        ratios.sort_by(|a, b| a.total_cmp(b));
        quiet_all.sort();
        watched_all.sort();
        println!(
            "events interleaved: 15 rounds of 300 HTTP try_admit+release: median {:.1?} with nobody listening, {:.1?} with a slow consumer; median per-round ratio {:.3} (min {:.3}, max {:.3})",
            quiet_all[7], watched_all[7], ratios[7], ratios[0], ratios[14]
        );
        drop(actor);
        drop(session);
        server.shutdown().await;
    });
}

/// A random number generator good enough to pick files (xorshift).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn load() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    const CLIENTS: usize = 64;
    const FILES: usize = 256;
    // The target figure is for 10 s; `WRIT_SERVE_LOAD_SECS` shortens it
    // for a quick look.
    let secs: f64 = std::env::var("WRIT_SERVE_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let run_for = Duration::from_secs_f64(secs);
    rt.block_on(async {
        let server = start(&root).await;
        let in_use: Arc<Vec<AtomicBool>> = Arc::new((0..FILES).map(|_| AtomicBool::new(false)).collect());
        let done = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let overlaps = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + run_for;
        let mut tasks = Vec::new();
        for client in 0..CLIENTS {
            let (url, token, root) = (server.url().to_string(), server.token().to_string(), root.clone());
            let (in_use, done, errors, overlaps) = (in_use.clone(), done.clone(), errors.clone(), overlaps.clone());
            tasks.push(tokio::spawn(async move {
                let session = Session::connect(&url, &token).await.unwrap();
                let actor = session.actor(format!("c{client}"), Grant::workspace(&root)).await.unwrap();
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (client as u64 + 1);
                while Instant::now() < deadline {
                    let n = 1 + (next(&mut rng) % 4) as usize;
                    let mut files: Vec<usize> = (0..n).map(|_| (next(&mut rng) % FILES as u64) as usize).collect();
                    files.sort_unstable();
                    files.dedup();
                    let names: Vec<PathBuf> = files.iter().map(|f| PathBuf::from(format!("f{f}.rs"))).collect();
                    match actor.admit(&names).await {
                        Ok(r) => {
                            for f in &files {
                                if in_use[*f].swap(true, Ordering::SeqCst) {
                                    overlaps.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            tokio::task::yield_now().await;
                            for f in &files {
                                in_use[*f].store(false, Ordering::SeqCst);
                            }
                            r.release().await.unwrap();
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("client {client}: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        let started = Instant::now();
        for t in tasks {
            t.await.unwrap();
        }
        let elapsed = started.elapsed();
        let ops = done.load(Ordering::Relaxed);
        println!(
            "load: {CLIENTS} clients, random sets of 1-4 of {FILES} files: {ops} admit+release in {elapsed:.1?} = {:.0}/s, overlaps {}, errors {}",
            ops as f64 / elapsed.as_secs_f64(),
            overlaps.load(Ordering::SeqCst),
            errors.load(Ordering::Relaxed),
        );
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "the oracle saw two holders of one file");
        assert_eq!(errors.load(Ordering::Relaxed), 0);

        // 1,000 live leases: each a session with one actor.
        let rss_before = rss_bytes();
        let started = Instant::now();
        let mut sessions = Vec::new();
        for i in 0..1000 {
            let session = Session::connect(server.url(), server.token()).await.unwrap();
            let actor = session.actor(format!("idle{i}"), Grant::workspace(&root)).await.unwrap();
            sessions.push((session, actor));
        }
        let made = started.elapsed();
        let rss_after = rss_bytes();
        let probe = sessions[0].1.try_admit(["probe.rs"]).await.unwrap();
        probe.release().await.unwrap();
        println!(
            "leases: 1000 live leases made in {made:.1?} ({:.0}/s); process memory grew {} KiB = {} bytes per idle lease (client and server in one process)",
            1000.0 / made.as_secs_f64(),
            rss_after.saturating_sub(rss_before) / 1024,
            rss_after.saturating_sub(rss_before) / 1000,
        );
        drop(sessions);
        server.shutdown().await;
    });
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    roundtrip(&mut c);
    events(&mut c);
    c.final_summary();
    events_interleaved();
    load();
}
