//! SPEC §11 on the in-process API only: what orchestrators rely on and the
//! wire cannot express. Slot limits, `child_wait`, wait causes, priorities,
//! widening and narrowing, the workspace target and read-only actors run in
//! tests/conformance.rs, in process and over HTTP alike. What stays here:
//!
//! - `a_hold_that_blocks_a_child_waits_paths_hands_its_slot_on`: a slot
//!   reservation moving between two futures polled by hand.
//! - `child_wait_is_cancel_safe`: a slot granted by the wake-up scan to a
//!   future polled by hand, then dropped unpolled (the synchronous `Drop` of
//!   an in-process `Acquire`).
//! - `dropping_a_child_wakes_a_child_wait_on_another_thread`,
//!   `slot_limits_hold_under_concurrency`: real wakers across threads and
//!   tasks sharing one in-process `Actor`.
//! - the `on_queued` callback and the approval hook: closures in `Config`
//!   that a client cannot set on a server.
//! - `admit_blocking` and `Fence::modes`: calls that exist only in process.
//!
//! No sleeps: waiting futures are polled by hand with a no-op waker, spawned
//! tasks report over channels, and "is it queued yet" is answered by polling
//! `sched.dump()` with a bounded deadline.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use writ::{Config, Dump, Error, Grant, Mode, Scheduler, Target, WaitCause};

fn setup(config: Config) -> (tempfile::TempDir, PathBuf, Scheduler) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root, Scheduler::new(config))
}

/// Polls a future once with a waker that does nothing; a later poll picks up
/// whatever a wake-up scan granted meanwhile.
fn poll<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(Waker::noop()))
}

fn ready<F: Future + Unpin>(fut: &mut F) -> F::Output {
    match poll(fut) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("expected the request to be granted by now"),
    }
}

fn busy<T: std::fmt::Debug>(result: Result<T, Error>) -> writ::Busy {
    match result {
        Err(Error::Busy(busy)) => busy,
        other => panic!("expected Busy, got {other:?}"),
    }
}

fn causes(dump: &Dump) -> Vec<WaitCause> {
    dump.waiters
        .iter()
        .map(|w| {
            w.cause
                .clone()
                .expect("every waiter in the dump has a cause")
        })
        .collect()
}

fn path_cause(root: &Path, rel: &str, holder: &str) -> WaitCause {
    WaitCause::Path {
        path: root.join(rel),
        holder: holder.into(),
    }
}

// ---------------------------------------------------------------- slots

#[test]
fn child_wait_is_cancel_safe() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let first = lead.child("first", Grant::workspace(&root)).unwrap();
    let mut a = lead.child_wait("a", Grant::workspace(&root));
    let mut b = lead.child_wait("b", Grant::workspace(&root));
    assert!(poll(&mut a).is_pending() && poll(&mut b).is_pending());
    // Cancelled while waiting: it leaves the queue and b moves up.
    drop(a);
    let dump = sched.dump();
    assert_eq!(dump.waiters.len(), 1);
    assert_eq!(dump.waiters[0].child.as_deref(), Some("b"));
    // Cancelled after the scan granted it but before it was picked up: the
    // slot is handed back, not leaked.
    drop(first);
    assert_eq!(sched.dump().slots.actors, 1, "b was granted the slot");
    drop(b);
    let dump = sched.dump();
    assert_eq!(dump.slots.actors, 0);
    assert_eq!(dump.actors.len(), 1, "only lead is live");
    let again = lead.child("again", Grant::workspace(&root)).unwrap();
    drop(again);
    sched.assert_invariants();
}

/// §11: a `child_wait` reserves its slot only while its paths are free. A
/// hold granted past it (at a higher priority) that blocks its paths takes
/// the reservation away, and the slot wait behind it, which blocks on nothing
/// else, is granted at once rather than left waiting for an unrelated wake.
#[test]
fn a_hold_that_blocks_a_child_waits_paths_hands_its_slot_on() {
    let (_dir, root, sched) = setup(Config::default().max_actors(2).max_writers(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let _writer = lead.child("writer", Grant::workspace(&root)).unwrap();
    // Its paths are free and no writer slot is: it waits for one and
    // reserves the last actor slot meanwhile.
    let mut fenced = lead.child_wait("fenced", Grant::fenced(&root, ["x/"]));
    assert!(poll(&mut fenced).is_pending());
    // Needs only an actor slot, and the last one is reserved ahead of it.
    let mut reader = lead.child_wait("reader", Grant::read_only(&root));
    assert!(poll(&mut reader).is_pending());
    assert_eq!(
        causes(&sched.dump()),
        [WaitCause::Writers, WaitCause::Slots]
    );
    // Granted past `fenced` by priority; now `fenced` waits for a path.
    let call = lead.request(["x/f.rs"]).priority(1).try_admit().unwrap();
    let reader = ready(&mut reader).expect("the slot reservation moved on to the reader");
    // Only `fenced` still waits; causes are named slots first (§11).
    assert_eq!(causes(&sched.dump()), [WaitCause::Slots]);
    sched.assert_invariants();
    drop((call, reader));
}

#[test]
fn dropping_a_child_wakes_a_child_wait_on_another_thread() {
    let (_dir, root, sched) = setup(Config::default().max_writers(1));
    let lead = Arc::new(sched.actor("lead", Grant::workspace(&root)).unwrap());
    let first = lead.child("first", Grant::workspace(&root)).unwrap();
    let waiter = {
        let (lead, root) = (lead.clone(), root.clone());
        std::thread::spawn(move || {
            // A real waker this time: the thread parks until the drop wakes it.
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(lead.child_wait("second", Grant::workspace(&root)))
                .map(|kid| kid.name().to_string())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while sched.dump().waiters.is_empty() {
        assert!(Instant::now() < deadline, "child_wait never queued");
        std::thread::yield_now();
    }
    drop(first);
    assert_eq!(waiter.join().unwrap().unwrap(), "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slot_limits_hold_under_concurrency() {
    const MAX_ACTORS: usize = 3;
    const MAX_WRITERS: usize = 2;
    const TASKS: usize = 48;
    let (_dir, root, sched) = setup(
        Config::default()
            .max_actors(MAX_ACTORS)
            .max_writers(MAX_WRITERS),
    );
    let lead = Arc::new(sched.actor("lead", Grant::workspace(&root)).unwrap());
    // Independent counters: incremented once a child is obtained, decremented
    // before it is dropped. If a limit ever let one child too many through,
    // a counter would exceed it.
    let live = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let (actors, writers, peak_actors, peak_writers) = (0, 1, 2, 3);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..TASKS {
        let (lead, root, live) = (lead.clone(), root.clone(), live.clone());
        tasks.spawn(async move {
            let read_only = i % 3 == 0;
            let grant = if read_only {
                Grant::read_only(&root)
            } else {
                Grant::fenced(&root, [format!("w{i}/")])
            };
            // Every fifth task tries once instead of waiting.
            let kid = if i % 5 == 0 {
                match lead.child(format!("t{i}"), grant) {
                    Ok(kid) => kid,
                    Err(Error::NoSlot { .. }) => return false,
                    Err(e) => panic!("unexpected {e}"),
                }
            } else {
                lead.child_wait(format!("t{i}"), grant).await.unwrap()
            };
            let a = live[actors].fetch_add(1, Ordering::SeqCst) + 1;
            live[peak_actors].fetch_max(a, Ordering::SeqCst);
            if !read_only {
                let w = live[writers].fetch_add(1, Ordering::SeqCst) + 1;
                live[peak_writers].fetch_max(w, Ordering::SeqCst);
            }
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            if !read_only {
                live[writers].fetch_sub(1, Ordering::SeqCst);
            }
            live[actors].fetch_sub(1, Ordering::SeqCst);
            drop(kid);
            true
        });
    }
    let mut created = 0;
    while let Some(done) = tasks.join_next().await {
        created += usize::from(done.unwrap());
    }
    let peak_a = live[peak_actors].load(Ordering::SeqCst);
    let peak_w = live[peak_writers].load(Ordering::SeqCst);
    assert!(peak_a <= MAX_ACTORS, "{peak_a} children were live at once");
    assert!(peak_w <= MAX_WRITERS, "{peak_w} writers were live at once");
    // Every fifth task (i = 0, 5, …) may be refused: ceil(TASKS / 5) of them.
    assert!(peak_a >= 1 && created >= TASKS - TASKS.div_ceil(5));
    let dump = sched.dump();
    assert_eq!((dump.slots.actors, dump.slots.writers), (0, 0));
    assert!(dump.is_idle(), "{dump}");
    sched.assert_invariants();
}

// ---------------------------------------------------------------- on_queued

#[test]
fn on_queued_runs_once_outside_the_lock_with_the_cause() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let held = holder.request(["a.rs"]).label("edit").try_admit().unwrap();

    let (tx, rx) = mpsc::channel();
    let calls = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (sched, calls) = (sched.clone(), calls.clone());
        std::thread::spawn(move || {
            let mut fut = other
                .request(["a.rs"])
                .on_queued(move |cause: &WaitCause| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    // Taking the lock again: this would hang if the callback
                    // ran under the scheduler's lock.
                    let dump = sched.dump();
                    tx.send((cause.clone(), dump.waiters.len())).unwrap();
                })
                .admit();
            assert!(poll(&mut fut).is_pending());
            assert!(poll(&mut fut).is_pending(), "a second poll calls nothing");
            (other, fut)
        })
    };
    let (cause, waiters_seen) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("on_queued never returned: was it called under the lock?");
    assert_eq!(cause, path_cause(&root, "a.rs", "holder"));
    assert_eq!(
        waiters_seen, 1,
        "the callback runs once the request is queued"
    );
    let (_other, mut fut) = worker.join().unwrap();
    assert_eq!(causes(&sched.dump()), vec![cause]);
    drop(held);
    let r = ready(&mut fut).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(rx.try_recv().is_err());
    drop(r);
}

#[test]
fn on_queued_is_not_called_when_nothing_waits() {
    let (_dir, root, sched) = setup(Config::default());
    let a = sched.actor("a", Grant::workspace(&root)).unwrap();
    let b = sched.actor("b", Grant::workspace(&root)).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let count = |calls: &Arc<AtomicUsize>| {
        let calls = calls.clone();
        move |_: &WaitCause| {
            calls.fetch_add(1, Ordering::SeqCst);
        }
    };
    let mut granted = a.request(["a.rs"]).on_queued(count(&calls)).admit();
    let held = ready(&mut granted).unwrap();
    // A try-only refusal does not queue either.
    busy(b.request(["a.rs"]).on_queued(count(&calls)).try_admit());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    drop(held);
}

// ---------------------------------------------------------------- approval

#[test]
fn widen_outside_a_fenced_actors_grant_fence_is_outside_fence() {
    let asked = Arc::new(AtomicUsize::new(0));
    let hook = {
        let asked = asked.clone();
        move |_: &str, _: &Path| {
            asked.fetch_add(1, Ordering::SeqCst);
            true
        }
    };
    let (_dir, root, sched) = setup(Config::default().approval(hook));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let kid = lead
        .child("kid", Grant::fenced(&root, ["src/", "docs/"]))
        .unwrap();
    let mut fence = kid.fence(["src/a/"]).unwrap();
    match fence.extend(["tests/"]) {
        Err(Error::OutsideFence { actor, path, .. }) => {
            assert_eq!(actor, "kid");
            assert_eq!(path, root.join("tests"));
        }
        other => panic!("expected OutsideFence, got {other:?}"),
    }
    // Inside the grant fence is what the actor declared: no approval asked.
    fence.extend(["src/b/", "docs/"]).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(fence.paths().len(), 3);
}

#[test]
fn approval_is_asked_once_per_path_outside_what_was_declared() {
    let asked: Arc<std::sync::Mutex<Vec<PathBuf>>> = Arc::default();
    let hook = {
        let asked = asked.clone();
        move |actor: &str, path: &Path| {
            assert_eq!(actor, "lead");
            asked.lock().unwrap().push(path.to_path_buf());
            !path.ends_with("vendor")
        }
    };
    let (_dir, root, sched) = setup(Config::default().approval(hook));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let count = || asked.lock().unwrap().len();
    let mut fence = lead.fence(["src/"]).unwrap();
    // Inside the fence's initial targets: not asked.
    fence.extend(["src/a/b.rs"]).unwrap();
    assert_eq!(count(), 0);
    // Outside: asked once, then remembered for the fence's life, even after
    // the path was narrowed away.
    fence.extend(["docs/"]).unwrap();
    assert_eq!(*asked.lock().unwrap(), vec![root.join("docs")]);
    fence.extend(["docs/"]).unwrap();
    fence.narrow(["src/"]).unwrap();
    fence.extend(["docs/"]).unwrap();
    // A path inside an approved tree needs no new answer.
    fence.extend(["docs/guide/intro.md"]).unwrap();
    assert_eq!(count(), 1);
    // A refusal is NotApproved, all-or-nothing, and also remembered.
    fence.narrow(["src/"]).unwrap();
    match fence.extend(["docs/", "vendor/"]) {
        Err(Error::NotApproved { actor, path }) => {
            assert_eq!(actor, "lead");
            assert_eq!(path, root.join("vendor"));
        }
        other => panic!("expected NotApproved, got {other:?}"),
    }
    assert_eq!(fence.paths(), vec![root.join("src")], "nothing was added");
    assert!(matches!(
        fence.extend(["vendor/"]),
        Err(Error::NotApproved { .. })
    ));
    assert_eq!(count(), 2);
    // A new fence starts with no answers.
    drop(fence);
    let mut other_fence = lead.fence(["tests/"]).unwrap();
    other_fence.extend(["docs/"]).unwrap();
    assert_eq!(count(), 3);
    // A file and the tree of the same name are different paths: approving
    // the file does not approve everything beneath it.
    other_fence.extend(["notes"]).unwrap();
    other_fence.extend(["notes/"]).unwrap();
    assert_eq!(count(), 5);
}

#[test]
fn approval_answers_follow_the_case_mode() {
    let asked = Arc::new(AtomicUsize::new(0));
    let hook = {
        let asked = asked.clone();
        move |_: &str, _: &Path| {
            asked.fetch_add(1, Ordering::SeqCst);
            true
        }
    };
    let (_dir, root, sched) = setup(
        Config::default()
            .case(writ::CaseMode::Insensitive)
            .approval(hook),
    );
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let mut fence = lead.fence(["src/"]).unwrap();
    fence.extend(["Docs/"]).unwrap();
    fence.extend(["docs/"]).unwrap(); // the same path under Insensitive
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[test]
fn approval_hook_is_asked_outside_the_lock() {
    let cell: Arc<OnceLock<Scheduler>> = Arc::default();
    let hook = {
        let cell = cell.clone();
        move |_: &str, _: &Path| {
            // Would hang if the hook ran under the scheduler's lock.
            cell.get().is_some_and(|s| s.dump().holds.len() == 1)
        }
    };
    let (_dir, root, sched) = setup(Config::default().approval(hook));
    let _ = cell.set(sched.clone());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut fence = lead.fence(["src/"]).unwrap();
        let result = fence.extend(["docs/"]).map(|()| fence.paths().len());
        tx.send(result.map_err(|e| e.to_string())).unwrap();
    });
    let result = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the approval hook never returned: was it called under the lock?");
    assert_eq!(result, Ok(2));
}

// ---------------------------------------------------------------- in-process-only forms

#[test]
fn admit_blocking_keeps_its_priority() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let waiter = sched.actor("waiter", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let held = holder.try_admit(["a.rs"]).unwrap();
    let mut w = waiter.admit(["a.rs", "b.rs"]);
    assert!(poll(&mut w).is_pending());
    // Priority 0 would queue behind the waiter (and time out); 1 goes ahead.
    assert!(matches!(
        other
            .request(["b.rs"])
            .admit_blocking_timeout(Duration::from_millis(1)),
        Err(Error::Timeout { .. })
    ));
    let r = other
        .request(["b.rs"])
        .priority(1)
        .admit_blocking()
        .unwrap();
    drop((r, held));
    drop(ready(&mut w).unwrap());
}

#[test]
fn fence_modes_follow_a_narrow_to_shared() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let mut fence = lead.fence(["src/"]).unwrap();
    assert_eq!(fence.modes(), vec![(root.join("src"), Mode::Exclusive)]);
    fence.narrow([Target::tree("src").shared()]).unwrap();
    assert_eq!(fence.modes(), vec![(root.join("src"), Mode::Shared)]);
}
