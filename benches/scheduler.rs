//! Scheduler benchmarks, each against a baseline measured in the same run.
//!
//! Groups (filter with `cargo bench --bench scheduler -- <group>`):
//!
//! - `table`: admit + release of 1, 4 and 16 keys at 100, 10k and 100k live
//!   holds, for the indexed table (`indexed`), the linear scan that
//!   schedulers of this kind use (`scan`, baseline B) and, for one key, a
//!   `parking_lot::Mutex<HashSet<PathBuf>>` insert + remove (`hashset`,
//!   baseline A: the floor of any keyed lock). Every variant takes a mutex
//!   per admission and per release, as the scheduler does.
//! - `depth`: the indexed table's admit + release at key depths 4 to 32.
//! - `resolve`: path resolution alone at depth 3 and 8 (real directories),
//!   against the C library's `realpath` and a single `lstat`.
//! - `try_admit`: the public `try_admit` + release, end to end, at depth 3
//!   and 8, with and without resolving (`Actor::resolve` once).
//! - `waiters`: `try_admit` + release of a free path with 0, 100 and 10k
//!   requests waiting on other paths.
//! - `contended`: 2 to 64 threads admitting random sets of 1–4 of 256
//!   files, waiting when contested (`writ`), against a mutex over a
//!   `HashSet` of held files that takes a whole set or yields and retries
//!   (`hashset`); time per 1024 admissions over all threads.
//! - `wake`: release → the waiting tokio task runs, on a 2-worker and a
//!   current-thread runtime, against the same hand-over through
//!   `tokio::sync::Notify`.
//! - `dump`: `Scheduler::dump()` with 10k live holds, against copying the
//!   same strings out.
//!
//! The whole run takes a few minutes on a 2-core machine.

use std::collections::HashSet;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use parking_lot::Mutex;
use writ::bench_support::workload::{live_path, live_request, probe, probe_paths};
use writ::bench_support::{NaiveTable, Table};
use writ::{Config, Grant, Scheduler, Target};

macro_rules! fill {
    ($t:ty, $n:expr) => {{
        let mut table = <$t>::new();
        for i in 0..$n {
            table.insert(live_request(i));
        }
        Mutex::new(table)
    }};
}

fn table(c: &mut Criterion) {
    let mut group = c.benchmark_group("table");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(30);
    for live in [100usize, 10_000, 100_000] {
        let indexed = fill!(Table, live);
        for k in [1usize, 4, 16] {
            let mut request = probe(k, live);
            group.bench_function(BenchmarkId::new(format!("indexed/{k}"), live), |b| {
                b.iter(|| {
                    let id = indexed.lock().admit(&mut request);
                    let id = black_box(id).expect("probe keys are free");
                    indexed.lock().release(id, &mut request);
                })
            });
        }
        drop(indexed);

        // Baseline A: a keyed lock that knows no trees, modes or owners.
        let set: Mutex<HashSet<PathBuf>> =
            Mutex::new((0..live).map(|i| PathBuf::from(live_path(i))).collect());
        let key = PathBuf::from(&probe_paths(1, live)[0]);
        let mut owned = Some(key.clone());
        group.bench_function(BenchmarkId::new("hashset/1", live), |b| {
            b.iter(|| {
                let path = owned.take().expect("returned every iteration");
                assert!(set.lock().insert(path));
                owned = set.lock().take(black_box(&key));
            })
        });
        drop(set);

        // Baseline B: the linear scan, path pair by path pair.
        let scan = fill!(NaiveTable, live);
        for k in [1usize, 4, 16] {
            let mut request = probe(k, live);
            if live >= 100_000 {
                group.sample_size(10);
            }
            group.bench_function(BenchmarkId::new(format!("scan/{k}"), live), |b| {
                b.iter(|| {
                    let id = scan.lock().admit(&mut request);
                    let id = black_box(id).expect("probe keys are free");
                    scan.lock().release(id, &mut request);
                })
            });
            group.sample_size(30);
        }
    }
    group.finish();
}

/// How the table's cost grows with the depth of the key (10k live holds).
fn depth(c: &mut Criterion) {
    let mut group = c.benchmark_group("depth");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(30);
    let indexed = fill!(Table, 10_000);
    for depth in [4usize, 8, 16, 32] {
        let path: String = (1..depth).map(|i| format!("/p{i}")).collect::<String>() + "/f.rs";
        let mut request = writ::bench_support::Request::new(1, &[&path], false, true);
        group.bench_function(BenchmarkId::new("indexed", depth), |b| {
            b.iter(|| {
                let id = indexed.lock().admit(&mut request);
                let id = black_box(id).expect("the key is free");
                indexed.lock().release(id, &mut request);
            })
        });
    }
    group.finish();
}

/// How `try_admit` + release grows with the number of requests waiting on
/// other paths (each blocked by a fence).
fn waiters(c: &mut Criterion) {
    use std::future::Future;
    use std::task::{Context, Waker};

    let mut group = c.benchmark_group("waiters");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(30);
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let sched = Scheduler::new(Config::default());
    let owner = sched
        .actor("owner", Grant::workspace(&root))
        .expect("actor");
    let caller = sched
        .actor("caller", Grant::workspace(&root))
        .expect("actor");
    let waiter = sched
        .actor("waiter", Grant::workspace(&root))
        .expect("actor");
    let _fence = owner.fence(["queued/"]).expect("free");
    let free = caller.resolve(["src/free.rs"]).expect("resolves");
    let mut pending = Vec::new();
    for waiting in [0usize, 100, 10_000] {
        while pending.len() < waiting {
            let path = format!("queued/f{}.rs", pending.len());
            let mut admit = Box::pin(waiter.admit([path.as_str()]));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(admit.as_mut().poll(&mut cx).is_pending(), "queued");
            pending.push(admit);
        }
        group.bench_function(BenchmarkId::new("try_admit_resolved", waiting), |b| {
            b.iter(|| drop(black_box(caller.try_admit(&free).expect("free"))))
        });
    }
    group.finish();
    drop(pending);
}

/// A workspace with `depth`-component relative paths that exist.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    rel: PathBuf,
}

fn tree(depth: usize) -> Tree {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical temp dir");
    let mut rel = PathBuf::new();
    for d in 0..depth - 1 {
        rel.push(format!("dir{d}"));
    }
    std::fs::create_dir_all(root.join(&rel)).expect("directories");
    rel.push("file.rs");
    std::fs::write(root.join(&rel), b"fn main() {}\n").expect("a file");
    Tree {
        _dir: dir,
        root,
        rel,
    }
}

fn resolve(c: &mut Criterion) {
    let mut group = c.benchmark_group("resolve");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(30);
    for depth in [3usize, 8] {
        let t = tree(depth);
        let absolute = t.root.join(&t.rel);
        group.bench_function(BenchmarkId::new("walk", depth), |b| {
            b.iter(|| writ::bench_support::resolve(black_box(&absolute)).expect("resolves"))
        });
        // For comparison: the C library's realpath (every component must exist).
        group.bench_function(BenchmarkId::new("canonicalize", depth), |b| {
            b.iter(|| std::fs::canonicalize(black_box(&absolute)).expect("resolves"))
        });
        // The floor: one lstat of the whole path.
        group.bench_function(BenchmarkId::new("lstat", depth), |b| {
            b.iter(|| std::fs::symlink_metadata(black_box(&absolute)).expect("exists"))
        });
    }
    group.finish();
}

fn try_admit(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_admit");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(30);
    for depth in [3usize, 8] {
        let t = tree(depth);
        let sched = Scheduler::new(Config::default());
        let actor = sched
            .actor("bench", Grant::workspace(&t.root))
            .expect("an actor");
        let target = t.rel.as_path();
        group.bench_function(BenchmarkId::new("resolving", depth), |b| {
            b.iter(|| drop(black_box(actor.try_admit([target]).expect("free"))))
        });
        let resolved = actor.resolve([target]).expect("resolves");
        group.bench_function(BenchmarkId::new("resolved", depth), |b| {
            b.iter(|| drop(black_box(actor.try_admit(&resolved).expect("free"))))
        });
    }
    group.finish();
}

/// A tiny xorshift generator: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Admissions per iteration of a `contended` benchmark, over all threads.
const OPS: usize = 1024;

/// Runs `op` `iters * OPS` times over `threads` threads started together;
/// returns the time from their start to the last one's end.
fn run_threads<S: Send + 'static>(
    threads: usize,
    iters: u64,
    state: impl Fn(usize) -> S,
    op: fn(&mut S, &mut Rng),
) -> Duration {
    let per_thread = (iters as usize * OPS).div_ceil(threads);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let mut s = state(t);
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                barrier.wait();
                for _ in 0..per_thread {
                    op(&mut s, &mut rng);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for w in workers {
        w.join().expect("worker");
    }
    start.elapsed()
}

/// 1 to 4 distinct files of 256.
fn random_set(rng: &mut Rng, set: &mut Vec<usize>) {
    set.clear();
    let n = 1 + (rng.next() % 4) as usize;
    while set.len() < n {
        let f = (rng.next() % 256) as usize;
        if !set.contains(&f) {
            set.push(f);
        }
    }
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .throughput(Throughput::Elements(OPS as u64));
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let sched = Scheduler::new(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).expect("actor");
    let files: Arc<Vec<Target>> = Arc::new(
        lead.resolve((0..256).map(|i| format!("src/f{i:03}.rs")))
            .expect("resolves")
            .into_iter()
            .collect(),
    );
    for threads in [2usize, 4, 16, 64] {
        // writ: every thread its own actor, waiting when contested.
        group.bench_function(BenchmarkId::new("writ", threads), |b| {
            b.iter_custom(|iters| {
                let state = |t: usize| {
                    let actor = sched
                        .actor(format!("w{t}"), Grant::workspace(&root))
                        .expect("actor");
                    (actor, files.clone(), Vec::with_capacity(4))
                };
                run_threads(threads, iters, state, |(actor, files, set), rng| {
                    random_set(rng, set);
                    let targets = set.iter().map(|&f| &files[f]);
                    let r = actor.admit_blocking(targets).expect("calls never deadlock");
                    drop(black_box(r));
                })
            })
        });
        // Baseline: a keyed lock (a mutex over the set of held files) that
        // takes a whole set or yields and retries: no trees, modes, owners,
        // queue or fairness.
        let held: Arc<Mutex<HashSet<usize>>> = Arc::default();
        group.bench_function(BenchmarkId::new("hashset", threads), |b| {
            b.iter_custom(|iters| {
                let state = |_| (held.clone(), Vec::with_capacity(4));
                run_threads(threads, iters, state, |(held, set), rng| {
                    random_set(rng, set);
                    loop {
                        let mut h = held.lock();
                        if set.iter().all(|f| !h.contains(f)) {
                            h.extend(set.iter().copied());
                            break;
                        }
                        drop(h);
                        std::thread::yield_now();
                    }
                    let mut h = held.lock();
                    for f in set.iter() {
                        h.remove(f);
                    }
                })
            })
        });
    }
    group.finish();
    sched.assert_invariants();
}

fn wake(c: &mut Criterion) {
    let mut group = c.benchmark_group("wake");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(20);
    let dir = tempfile::tempdir().expect("a temp dir");
    let sched = Scheduler::new(Config::default());
    let holder = sched
        .actor("holder", Grant::workspace(dir.path()))
        .expect("actor");
    let waiter = sched
        .actor("waiter", Grant::workspace(dir.path()))
        .expect("actor");
    let file = holder.resolve(["a.rs"]).expect("resolves");
    for (name, workers) in [("multi_thread", 2usize), ("current_thread", 0)] {
        let rt = if workers == 0 {
            tokio::runtime::Builder::new_current_thread().build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .build()
        }
        .expect("a runtime");
        group.bench_function(BenchmarkId::new("writ", name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += rt.block_on(async {
                        let held = holder.try_admit(&file).expect("free");
                        let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
                        let admit = waiter
                            .request(&file)
                            .on_queued(move |_| {
                                let _ = queued_tx.send(());
                            })
                            .admit();
                        let task = tokio::spawn(async move {
                            let r = admit.await;
                            let at = Instant::now();
                            drop(r);
                            at
                        });
                        queued_rx.await.expect("queued");
                        let released = Instant::now();
                        drop(held);
                        let running = task.await.expect("the waiter runs");
                        running.saturating_duration_since(released)
                    });
                }
                total
            })
        });
        // Baseline: the same hand-over through tokio's own primitive.
        group.bench_function(BenchmarkId::new("tokio_notify", name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += rt.block_on(async {
                        let notify = Arc::new(tokio::sync::Notify::new());
                        let (queued_tx, queued_rx) = tokio::sync::oneshot::channel::<()>();
                        let waiting = notify.clone();
                        let task = tokio::spawn(async move {
                            let notified = waiting.notified();
                            tokio::pin!(notified);
                            notified.as_mut().enable();
                            let _ = queued_tx.send(());
                            notified.await;
                            Instant::now()
                        });
                        queued_rx.await.expect("waiting");
                        let released = Instant::now();
                        notify.notify_one();
                        let running = task.await.expect("the waiter runs");
                        running.saturating_duration_since(released)
                    });
                }
                total
            })
        });
    }
    group.finish();
}

fn dump(c: &mut Criterion) {
    let mut group = c.benchmark_group("dump");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let dir = tempfile::tempdir().expect("a temp dir");
    let sched = Scheduler::new(Config::default());
    let actors: Vec<_> = (0..100)
        .map(|i| {
            sched
                .actor(format!("a{i}"), Grant::workspace(dir.path()))
                .expect("actor")
        })
        .collect();
    let paths: Vec<String> = (0..10_000)
        .map(|i| format!("src/d{:03}/f{:03}.rs", i / 100, i % 100))
        .collect();
    let holds: Vec<_> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            actors[i % actors.len()]
                .try_admit([p.as_str()])
                .expect("free")
        })
        .collect();
    group.bench_function("writ/10k_holds", |b| b.iter(|| black_box(sched.dump())));
    // Baseline: copying the same strings out (actor name, path, label per
    // hold), the floor of any snapshot that owns its data.
    let copies: Vec<(String, PathBuf, Option<String>)> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("a{}", i % 100), dir.path().join(p), None))
        .collect();
    group.bench_function("copy_strings/10k_holds", |b| {
        b.iter(|| black_box(copies.clone()))
    });
    group.finish();
    drop(holds);
}

fn quick() -> Criterion {
    Criterion::default().configure_from_args()
}

criterion_group! {
    name = benches;
    config = quick();
    targets = table, depth, resolve, try_admit, waiters, contended, wake, dump
}
criterion_main!(benches);
