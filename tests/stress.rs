//! Oracle stress test: many tasks and threads hammer one scheduler, and an
//! oracle outside the scheduler checks that no two conflicting holders are
//! ever inside at once.
//!
//! 32 tokio tasks (on a 2-worker runtime) and 4 OS threads (`admit_blocking`),
//! each with its own actor in one of 4 groups (a root and its children),
//! run `STRESS_OPS` operations in total (default 200,000): `admit`,
//! `try_admit`, `admit_timeout`, `select!` against a timer (cancellation),
//! a single poll then drop, `Reservation::extend`, priorities, and fences
//! held by one task per group while its actors make calls inside them.
//!
//! The oracle is plain atomics per file: exclusive-call holders per group,
//! shared-call holders, and the group holding an exclusive fence. Entering
//! increments its own counter first and then reads the others (all SeqCst),
//! so two holders that overlap in time cannot both miss each other. Leaving
//! decrements before the guard drops.
//!
//! A watchdog fails the test with a dump if no operation completes for 30 s.
//! At the end the dump must be idle and every oracle counter zero.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use writ::{Actor, Config, Error, Grant, Mode, Scheduler, Target};

const GROUPS: usize = 4;
const DIRS: usize = 6;
const FILES_PER_DIR: usize = 8;
const LEAVES: usize = DIRS * FILES_PER_DIR;
const TASKS: usize = 32;
const THREADS: usize = 4;

/// A small deterministic generator (xorshift64*), one per worker.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A target of the universe and the leaves (files) it covers.
#[derive(Clone, Debug)]
struct Pick {
    target: Target,
    leaves: Vec<usize>,
    mode: Mode,
}

fn pick(rng: &mut Rng, allow_shared: bool) -> Pick {
    let dir = rng.below(DIRS);
    let shared = allow_shared && rng.chance(30);
    let mode = if shared {
        Mode::Shared
    } else {
        Mode::Exclusive
    };
    let (target, leaves) = if rng.chance(5) {
        (
            Target::tree(format!("d{dir}")),
            (0..FILES_PER_DIR)
                .map(|f| dir * FILES_PER_DIR + f)
                .collect(),
        )
    } else {
        let f = rng.below(FILES_PER_DIR);
        (
            Target::file(format!("d{dir}/f{f}")),
            vec![dir * FILES_PER_DIR + f],
        )
    };
    let target = if shared { target.shared() } else { target };
    Pick {
        target,
        leaves,
        mode,
    }
}

/// The target of one leaf (file).
fn leaf_target(leaf: usize) -> Target {
    Target::file(format!(
        "d{}/f{}",
        leaf / FILES_PER_DIR,
        leaf % FILES_PER_DIR
    ))
}

fn picks(rng: &mut Rng) -> Vec<Pick> {
    (0..1 + rng.below(2)).map(|_| pick(rng, true)).collect()
}

/// The strongest mode each leaf is requested in.
fn leaf_modes(picks: &[Pick]) -> BTreeMap<usize, Mode> {
    let mut m = BTreeMap::new();
    for p in picks {
        for &l in &p.leaves {
            let e = m.entry(l).or_insert(p.mode);
            *e = (*e).max(p.mode);
        }
    }
    m
}

/// The independent oracle.
struct Oracle {
    writers: Vec<[AtomicI64; GROUPS]>,
    readers: Vec<AtomicI64>,
    fence: Vec<AtomicU64>,
    violations: AtomicU64,
    first: Mutex<Option<String>>,
}

impl Oracle {
    fn new() -> Self {
        Oracle {
            writers: (0..LEAVES).map(|_| Default::default()).collect(),
            readers: (0..LEAVES).map(|_| AtomicI64::new(0)).collect(),
            fence: (0..LEAVES).map(|_| AtomicU64::new(0)).collect(),
            violations: AtomicU64::new(0),
            first: Mutex::new(None),
        }
    }

    fn violation(&self, what: String) {
        self.violations.fetch_add(1, SeqCst);
        self.first.lock().unwrap().get_or_insert(what);
    }

    fn writers_total(&self, leaf: usize) -> i64 {
        self.writers[leaf].iter().map(|w| w.load(SeqCst)).sum()
    }

    fn enter_call(&self, group: usize, modes: &BTreeMap<usize, Mode>) {
        for (&leaf, &mode) in modes {
            match mode {
                Mode::Exclusive => {
                    self.writers[leaf][group].fetch_add(1, SeqCst);
                    let (w, r) = (self.writers_total(leaf), self.readers[leaf].load(SeqCst));
                    let f = self.fence[leaf].load(SeqCst);
                    if w != 1 || r != 0 || (f != 0 && f != group as u64 + 1) {
                        self.violation(format!(
                            "write of leaf {leaf} by group {group}: writers {w}, readers {r}, fence {f}"
                        ));
                    }
                }
                Mode::Shared => {
                    self.readers[leaf].fetch_add(1, SeqCst);
                    let w = self.writers_total(leaf);
                    if w != 0 {
                        self.violation(format!("read of leaf {leaf} during {w} writes"));
                    }
                }
            }
        }
    }

    fn leave_call(&self, group: usize, modes: &BTreeMap<usize, Mode>) {
        for (&leaf, &mode) in modes {
            match mode {
                Mode::Exclusive => self.writers[leaf][group].fetch_sub(1, SeqCst),
                Mode::Shared => self.readers[leaf].fetch_sub(1, SeqCst),
            };
        }
    }

    fn enter_fence(&self, group: usize, leaves: &[usize]) {
        for &leaf in leaves {
            if let Err(other) =
                self.fence[leaf].compare_exchange(0, group as u64 + 1, SeqCst, SeqCst)
            {
                self.violation(format!(
                    "fence on leaf {leaf} by group {group} while group {} fences it",
                    other - 1
                ));
            }
            for (h, w) in self.writers[leaf].iter().enumerate() {
                let n = w.load(SeqCst);
                if h != group && n != 0 {
                    self.violation(format!(
                        "fence on leaf {leaf} by group {group} during {n} writes of group {h}"
                    ));
                }
            }
        }
    }

    fn leave_fence(&self, leaves: &[usize]) {
        for &leaf in leaves {
            self.fence[leaf].store(0, SeqCst);
        }
    }

    fn assert_clear(&self) {
        for leaf in 0..LEAVES {
            assert_eq!(self.writers_total(leaf), 0);
            assert_eq!(self.readers[leaf].load(SeqCst), 0);
            assert_eq!(self.fence[leaf].load(SeqCst), 0);
        }
    }
}

#[derive(Default)]
struct Stats {
    ops: AtomicU64,
    held: AtomicU64,
    busy: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
    deadlocks: AtomicU64,
    fences: AtomicU64,
    extended: AtomicU64,
    owner_probes: AtomicU64,
}

struct World {
    sched: Scheduler,
    /// `actors[group]`: the group's root, then two children.
    actors: Vec<Vec<Arc<Actor>>>,
    oracle: Oracle,
    stats: Stats,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, SeqCst);
}

impl World {
    fn refused(&self, e: Error) {
        match e {
            Error::Busy(_) => bump(&self.stats.busy),
            Error::Timeout { .. } => bump(&self.stats.timeouts),
            Error::Deadlock { .. } => bump(&self.stats.deadlocks),
            other => self.oracle.violation(format!("unexpected error: {other}")),
        }
    }
}

/// Holds a granted call for a moment, checked by the oracle.
async fn hold_call(
    w: &World,
    group: usize,
    modes: &BTreeMap<usize, Mode>,
    rng: &mut Rng,
    r: writ::Reservation,
) {
    w.oracle.enter_call(group, modes);
    for _ in 0..rng.below(3) {
        tokio::task::yield_now().await;
    }
    w.oracle.leave_call(group, modes);
    bump(&w.stats.held);
    drop(r);
}

async fn call_op(w: &World, group: usize, actor: &Actor, rng: &mut Rng) {
    let ps = picks(rng);
    let modes = leaf_modes(&ps);
    let targets: Vec<Target> = ps.iter().map(|p| p.target.clone()).collect();
    let prio = if rng.chance(10) { 1 } else { 0 };
    let req = actor.request(targets.clone()).priority(prio);
    match rng.below(100) {
        0..30 => match req.admit().await {
            Ok(r) => hold_call(w, group, &modes, rng, r).await,
            Err(e) => w.refused(e),
        },
        30..45 => match req.try_admit() {
            Ok(r) => hold_call(w, group, &modes, rng, r).await,
            Err(e) => w.refused(e),
        },
        45..60 => {
            let d = Duration::from_micros(rng.below(2000) as u64);
            match req.admit_timeout(d).await {
                Ok(r) => hold_call(w, group, &modes, rng, r).await,
                Err(e) => w.refused(e),
            }
        }
        60..75 => {
            let d = Duration::from_micros(rng.below(1500) as u64);
            tokio::select! {
                r = req.admit() => match r {
                    Ok(r) => hold_call(w, group, &modes, rng, r).await,
                    Err(e) => w.refused(e),
                },
                _ = tokio::time::sleep(d) => bump(&w.stats.cancelled),
            }
        }
        75..88 => {
            // One poll, then dropped (granted or queued: either way cancelled).
            match tokio::time::timeout(Duration::ZERO, req.admit()).await {
                Ok(Ok(r)) => hold_call(w, group, &modes, rng, r).await,
                Ok(Err(e)) => w.refused(e),
                Err(_) => bump(&w.stats.cancelled),
            }
        }
        _ => {
            // A call that finds it needs more paths asks without waiting.
            let Ok(mut r) = req.admit().await else {
                return;
            };
            let extra = pick(rng, false);
            let mut all = ps.clone();
            match r.extend([extra.target.clone()]) {
                Ok(()) => {
                    all.push(extra);
                    bump(&w.stats.extended);
                }
                Err(e) => w.refused(e),
            }
            hold_call(w, group, &leaf_modes(&all), rng, r).await;
        }
    }
}

/// The group's fence task: a fence on a folder, calls inside it by the
/// group's root, then release.
async fn fence_op(w: &World, group: usize, rng: &mut Rng) {
    let lead = &w.actors[group][0];
    let dir = rng.below(DIRS);
    let leaves: Vec<usize> = (0..FILES_PER_DIR)
        .map(|f| dir * FILES_PER_DIR + f)
        .collect();
    let d = Duration::from_micros(2000 + rng.below(20_000) as u64);
    let prio = if rng.chance(50) { 1 } else { 0 };
    let req = lead
        .request([Target::tree(format!("d{dir}"))])
        .priority(prio);
    let fence = match req.fence_wait_timeout(d).await {
        Ok(f) => f,
        Err(e) => return w.refused(e),
    };
    w.oracle.enter_fence(group, &leaves);
    bump(&w.stats.fences);
    owner_probe(w, group, dir, rng).await;
    for _ in 0..rng.below(4) {
        call_op(w, group, lead, rng).await;
    }
    w.oracle.leave_fence(&leaves);
    drop(fence);
}

/// Precedence of a fence's owner (SPEC §4), checked from outside: inside
/// its own fence, the owner's exclusive try may be refused by a hold or by a
/// waiter of its own line, but never by an outsider's waiting request that
/// the fence blocks — an exclusive call or a fence from outside overlapping
/// a fenced file is always blocked by the fence. (An outsider's waiting
/// shared call is not: reads pass through fences.)
async fn owner_probe(w: &World, group: usize, dir: usize, rng: &mut Rng) {
    let lead = &w.actors[group][0];
    let leaf = dir * FILES_PER_DIR + rng.below(FILES_PER_DIR);
    let modes = BTreeMap::from([(leaf, Mode::Exclusive)]);
    bump(&w.stats.owner_probes);
    match lead.try_admit([leaf_target(leaf)]) {
        Ok(r) => hold_call(w, group, &modes, rng, r).await,
        Err(Error::Busy(busy)) => {
            let outsider = !busy.holder.starts_with(&format!("g{group}"));
            let fence_blocks_it =
                busy.kind == writ::HoldKind::Fence || busy.mode == Mode::Exclusive;
            if busy.queued && outsider && fence_blocks_it {
                w.oracle.violation(format!(
                    "g{group} inside its own fence was refused behind a waiter its fence blocks: {busy}"
                ));
            }
            bump(&w.stats.busy);
        }
        Err(e) => w.refused(e),
    }
}

fn blocking_op(w: &World, group: usize, actor: &Actor, rng: &mut Rng) {
    let ps = picks(rng);
    let modes = leaf_modes(&ps);
    let targets: Vec<Target> = ps.iter().map(|p| p.target.clone()).collect();
    let r = if rng.chance(50) {
        actor.admit_blocking(targets)
    } else {
        actor.admit_blocking_timeout(targets, Duration::from_micros(rng.below(2000) as u64))
    };
    match r {
        Ok(r) => {
            w.oracle.enter_call(group, &modes);
            for _ in 0..rng.below(3) {
                std::thread::yield_now();
            }
            w.oracle.leave_call(group, &modes);
            bump(&w.stats.held);
            drop(r);
        }
        Err(e) => w.refused(e),
    }
}

fn total_ops() -> u64 {
    std::env::var("STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000)
}

#[test]
fn oracle_stress() {
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = std::fs::canonicalize(dir.path()).unwrap();
    for d in 0..DIRS {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
    }
    let sched = Scheduler::new(Config::default().session("stress"));
    // One actor per worker, so that deadlock refusals stay rare and the
    // run spends its operations on admission rather than on refusals.
    // actors[g][0] is the group's root (used only by its fence task);
    // then one child per task of the group and one per blocking thread.
    let mut actors = Vec::new();
    for g in 0..GROUPS {
        let lead = sched
            .actor(format!("g{g}"), Grant::workspace(&root))
            .unwrap();
        let workers = TASKS / GROUPS - 1 + THREADS / GROUPS;
        let kids: Vec<Actor> = (0..workers)
            .map(|k| {
                lead.child(format!("g{g}c{k}"), Grant::workspace(&root))
                    .unwrap()
            })
            .collect();
        let mut group = vec![Arc::new(lead)];
        group.extend(kids.into_iter().map(Arc::new));
        actors.push(group);
    }
    let world = Arc::new(World {
        sched: sched.clone(),
        actors,
        oracle: Oracle::new(),
        stats: Stats::default(),
    });
    let total = total_ops();
    let per_worker = total / (TASKS + THREADS) as u64 + 1;
    let seed: u64 = std::env::var("STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let started = Instant::now();

    let (done_tx, done_rx) = mpsc::channel::<()>();
    let load = {
        let world = world.clone();
        std::thread::spawn(move || {
            let mut threads = Vec::new();
            for t in 0..THREADS {
                let world = world.clone();
                threads.push(std::thread::spawn(move || {
                    let mut rng = Rng::new(seed ^ (1000 + t as u64));
                    let group = t % GROUPS;
                    let actor = world.actors[group].last().unwrap().clone();
                    for _ in 0..per_worker {
                        blocking_op(&world, group, &actor, &mut rng);
                        bump(&world.stats.ops);
                    }
                }));
            }
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut tasks = Vec::new();
                for t in 0..TASKS {
                    let world = world.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut rng = Rng::new(seed ^ t as u64);
                        let group = t % GROUPS;
                        let fencer = t < GROUPS; // the group root's only task
                        let actor = world.actors[group][t / GROUPS].clone();
                        for _ in 0..per_worker {
                            if fencer && rng.chance(20) {
                                fence_op(&world, group, &mut rng).await;
                            } else {
                                call_op(&world, group, &actor, &mut rng).await;
                            }
                            bump(&world.stats.ops);
                        }
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            });
            for t in threads {
                t.join().unwrap();
            }
            let _ = done_tx.send(());
        })
    };

    // Watchdog: fail with a dump if no operation completes for 30 s.
    let mut last = 0;
    let mut stalled = 0;
    loop {
        match done_rx.recv_timeout(Duration::from_secs(1)) {
            Ok(()) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The load thread panicked; join it to surface the panic.
                load.join().unwrap();
                unreachable!("the load thread ended without reporting");
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = world.stats.ops.load(SeqCst);
                stalled = if now == last { stalled + 1 } else { 0 };
                last = now;
                assert!(
                    stalled < 30,
                    "no progress for 30 s at {now} ops; dump:\n{}",
                    world.sched.dump()
                );
            }
        }
    }
    load.join().unwrap();
    let elapsed = started.elapsed();

    let s = &world.stats;
    let get = |c: &AtomicU64| c.load(SeqCst);
    eprintln!(
        "stress: {} ops in {elapsed:.2?}: held {}, busy {}, timeouts {}, cancelled {}, deadlocks {}, fences {}, extended {}",
        get(&s.ops),
        get(&s.held),
        get(&s.busy),
        get(&s.timeouts),
        get(&s.cancelled),
        get(&s.deadlocks),
        get(&s.fences),
        get(&s.extended)
    );
    let violations = world.oracle.violations.load(SeqCst);
    assert_eq!(
        violations,
        0,
        "oracle violations; first: {:?}",
        world.oracle.first.lock().unwrap()
    );
    world.oracle.assert_clear();
    let dump = world.sched.dump();
    assert!(dump.is_idle(), "residue after the run:\n{dump}");
    world.sched.assert_invariants();
    eprintln!("scheduler counters: {:?}", dump.counters);
    assert!(get(&s.ops) >= total);
    // The load must have produced contention of every kind, or it proves nothing.
    for (name, n) in [
        ("held", get(&s.held)),
        ("busy", get(&s.busy)),
        ("timeouts", get(&s.timeouts)),
        ("cancelled", get(&s.cancelled)),
        ("fences", get(&s.fences)),
        ("owner probes", get(&s.owner_probes)),
        ("waited", dump.counters.waited),
    ] {
        assert!(n > 0, "the run never produced: {name}");
    }
    drop(world);
    assert!(sched.dump().actors.is_empty());
}
