//! SPEC §11: what orchestrators rely on — slot limits, wait causes,
//! `on_queued`, priorities, fence widen/narrow with approval, opaque tools
//! (`Target::workspace()`) and read-only actors.
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

use writ::{Config, Dump, Error, Grant, HoldKind, Mode, Scheduler, SlotLimit, Target, WaitCause};

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

/// Waits (yielding, never sleeping) until the dump satisfies `what`.
async fn until(sched: &Scheduler, what: &str, f: impl Fn(&Dump) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dump = sched.dump();
        if f(&dump) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{dump}"
        );
        tokio::task::yield_now().await;
    }
}

fn no_slot(result: Result<writ::Actor, Error>) -> (SlotLimit, usize) {
    match result {
        Err(Error::NoSlot { limit, max }) => (limit, max),
        other => panic!("expected NoSlot, got {other:?}"),
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
fn root_actors_count_against_no_limit() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1).max_writers(1));
    let a = sched.actor("a", Grant::workspace(&root)).unwrap();
    let b = sched.actor("b", Grant::fenced(&root, ["src/"])).unwrap();
    let c = sched.actor("c", Grant::read_only(&root)).unwrap();
    let slots = sched.dump().slots;
    assert_eq!((slots.actors, slots.writers), (0, 0));
    // The one child slot is still free.
    let kid = a.child("kid", Grant::workspace(&root)).unwrap();
    assert_eq!(sched.dump().slots.actors, 1);
    drop((a, b, c, kid));
}

#[test]
fn child_past_max_actors_is_no_slot_naming_the_limit() {
    let (_dir, root, sched) = setup(Config::default().max_actors(2));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let k1 = lead.child("k1", Grant::workspace(&root)).unwrap();
    let k2 = k1.child("k2", Grant::read_only(&root)).unwrap(); // grandchildren count too
    let err = lead.child("k3", Grant::read_only(&root)).unwrap_err();
    assert!(err.to_string().contains("max_actors is 2"), "{err}");
    assert_eq!(
        no_slot(lead.child("k3", Grant::read_only(&root))),
        (SlotLimit::MaxActors, 2)
    );
    // A refused child leaves nothing behind.
    let dump = sched.dump();
    assert_eq!(dump.actors.len(), 3);
    assert_eq!(dump.slots.actors, 2);
    // Dropping a child frees its slot.
    drop(k2);
    let k3 = lead.child("k3", Grant::read_only(&root)).unwrap();
    drop((k1, k3));
    assert_eq!(sched.dump().slots.actors, 0);
}

#[test]
fn read_only_children_do_not_count_as_writers() {
    let (_dir, root, sched) = setup(Config::default().max_writers(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let writer = lead.child("writer", Grant::workspace(&root)).unwrap();
    assert_eq!(
        no_slot(lead.child("w2", Grant::fenced(&root, ["src/"]))),
        (SlotLimit::MaxWriters, 1)
    );
    let r1 = lead.child("r1", Grant::read_only(&root)).unwrap();
    let r2 = lead.child("r2", Grant::read_only(&root)).unwrap();
    let slots = sched.dump().slots;
    assert_eq!((slots.actors, slots.writers), (3, 1));
    assert_eq!(slots.max_writers, Some(1));
    drop(writer);
    let w2 = lead.child("w2", Grant::fenced(&root, ["src/"])).unwrap();
    drop((r1, r2, w2));
}

#[test]
fn read_only_children_still_count_as_actors() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1).max_writers(5));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let r1 = lead.child("r1", Grant::read_only(&root)).unwrap();
    assert_eq!(
        no_slot(lead.child("r2", Grant::read_only(&root))),
        (SlotLimit::MaxActors, 1)
    );
    drop(r1);
}

#[test]
fn child_is_refused_while_a_child_wait_is_queued_on_that_limit() {
    // Two actor slots, one writer slot: a queued writer holds its claim on
    // the last actor slot, so a reader may not take it from under it.
    let (_dir, root, sched) = setup(Config::default().max_actors(2).max_writers(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let w1 = lead.child("w1", Grant::workspace(&root)).unwrap();
    let mut w2 = lead.child_wait("w2", Grant::workspace(&root));
    assert!(poll(&mut w2).is_pending());
    assert_eq!(causes(&sched.dump()), vec![WaitCause::Writers]);
    assert_eq!(
        no_slot(lead.child("reader", Grant::read_only(&root))),
        (SlotLimit::MaxActors, 2)
    );
    // Both limits block a writer; actor slots are checked first.
    assert_eq!(
        no_slot(lead.child("w3", Grant::workspace(&root))),
        (SlotLimit::MaxActors, 2)
    );
    // The freed writer slot goes to the queued child_wait, not to a caller
    // of child() that arrives later.
    drop(w1);
    assert_eq!(
        no_slot(lead.child("w3", Grant::workspace(&root))),
        (SlotLimit::MaxWriters, 1)
    );
    let w2 = ready(&mut w2).unwrap();
    assert_eq!(w2.name(), "w2");
    // Now the reader fits.
    let reader = lead.child("reader", Grant::read_only(&root)).unwrap();
    drop((w2, reader));
    sched.assert_invariants();
}

#[test]
fn freed_slots_go_to_queued_child_waits_in_queue_order() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let first = lead.child("first", Grant::workspace(&root)).unwrap();
    let mut a = lead.child_wait("a", Grant::workspace(&root));
    let mut b = lead.child_wait("b", Grant::read_only(&root));
    let mut c = lead.child_wait("c", Grant::fenced(&root, ["src/"]));
    for fut in [&mut a, &mut b, &mut c] {
        assert!(poll(fut).is_pending());
    }
    let dump = sched.dump();
    let queued: Vec<_> = dump.waiters.iter().map(|w| w.child.clone()).collect();
    assert_eq!(
        queued,
        vec![Some("a".into()), Some("b".into()), Some("c".into())]
    );
    // A child_wait waiter shows its parent as the actor.
    assert!(dump.waiters.iter().all(|w| w.actor == "lead"));
    assert_eq!(causes(&dump), vec![WaitCause::Slots; 3]);

    drop(first);
    let a = ready(&mut a).unwrap();
    assert!(poll(&mut b).is_pending() && poll(&mut c).is_pending());
    drop(a);
    let b = ready(&mut b).unwrap();
    assert!(poll(&mut c).is_pending());
    drop(b);
    let c = ready(&mut c).unwrap();
    assert_eq!(c.name(), "c");
    assert_eq!(sched.dump().holds.len(), 1, "c's grant fence");
    drop(c);
    assert!(sched.dump().is_idle());
}

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

// ---------------------------------------------------------------- wait causes

#[test]
fn wait_causes_are_checked_slots_then_writers_then_path() {
    // Blocked by all three: the cause is Slots.
    let (_dir, root, sched) = setup(Config::default().max_actors(1).max_writers(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let k1 = lead.child("k1", Grant::fenced(&root, ["src/"])).unwrap();
    let mut k2 = lead.child_wait("k2", Grant::fenced(&root, ["src/"]));
    assert!(poll(&mut k2).is_pending());
    let dump = sched.dump();
    assert_eq!(causes(&dump), vec![WaitCause::Slots]);
    assert_eq!(dump.waiters[0].actor, "lead");
    assert_eq!(dump.waiters[0].child.as_deref(), Some("k2"));
    drop((k2, k1));

    // Writers and path, but a free actor slot: the cause is Writers.
    let (_dir, root, sched) = setup(Config::default().max_actors(2).max_writers(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let k1 = lead.child("k1", Grant::fenced(&root, ["src/"])).unwrap();
    let mut k2 = lead.child_wait("k2", Grant::fenced(&root, ["src/"]));
    assert!(poll(&mut k2).is_pending());
    assert_eq!(causes(&sched.dump()), vec![WaitCause::Writers]);
    drop((k2, k1));

    // Only the path: the cause names it and its holder.
    let (_dir, root, sched) = setup(Config::default().max_actors(2).max_writers(2));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let k1 = lead.child("k1", Grant::fenced(&root, ["src/"])).unwrap();
    let mut k2 = lead.child_wait("k2", Grant::fenced(&root, ["src/"]));
    assert!(poll(&mut k2).is_pending());
    let dump = sched.dump();
    assert_eq!(causes(&dump), vec![path_cause(&root, "src", "k1")]);
    assert_eq!(
        dump.waiters[0].actor, "lead",
        "a child_wait shows its parent"
    );
    // The cause follows the state: once k1 is gone, k2 gets its slot and fence.
    drop(k1);
    let k2 = ready(&mut k2).unwrap();
    assert_eq!(sched.dump().holds[0].actor, "k2");
    drop(k2);
}

#[test]
fn a_waiter_behind_an_earlier_waiter_names_that_waiter() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let first = sched.actor("first", Grant::workspace(&root)).unwrap();
    let second = sched.actor("second", Grant::workspace(&root)).unwrap();
    let held = holder.try_admit(["a.rs"]).unwrap();
    let mut w1 = first.admit(["a.rs", "b.rs"]);
    let mut w2 = second.admit(["b.rs"]);
    assert!(poll(&mut w1).is_pending() && poll(&mut w2).is_pending());
    let dump = sched.dump();
    assert_eq!(
        causes(&dump),
        vec![
            path_cause(&root, "a.rs", "holder"),
            path_cause(&root, "b.rs", "first")
        ]
    );
    assert_eq!(dump.waiters[1].blocked_by.waiters, vec![dump.waiters[0].id]);
    drop(held);
    let r1 = ready(&mut w1).unwrap();
    assert!(poll(&mut w2).is_pending());
    assert_eq!(
        causes(&sched.dump()),
        vec![path_cause(&root, "b.rs", "first")]
    );
    drop(r1);
    drop(ready(&mut w2).unwrap());
}

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

// ---------------------------------------------------------------- priorities

#[tokio::test(flavor = "current_thread")]
async fn higher_priority_first_then_arrival_order() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let held = holder.try_admit(["a.rs"]).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let order = [("A", 0), ("B", 5), ("C", 0), ("D", 5), ("E", -1)];
    let mut tasks = Vec::new();
    for (n, (name, priority)) in order.into_iter().enumerate() {
        let actor = sched.actor(name, Grant::workspace(&root)).unwrap();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let r = actor
                .request(["a.rs"])
                .priority(priority)
                .admit()
                .await
                .unwrap();
            tx.send(name).unwrap();
            drop(r);
        }));
        // Queue them one at a time so arrival order is known.
        until(&sched, "the request to queue", |d| d.waiters.len() == n + 1).await;
    }
    let dump = sched.dump();
    let queued: Vec<_> = dump
        .waiters
        .iter()
        .map(|w| (w.actor.as_str(), w.priority))
        .collect();
    assert_eq!(
        queued,
        vec![("B", 5), ("D", 5), ("A", 0), ("C", 0), ("E", -1)]
    );
    drop(held);
    let mut granted = Vec::new();
    for _ in 0..order.len() {
        granted.push(rx.recv().await.unwrap());
    }
    assert_eq!(granted, ["B", "D", "A", "C", "E"]);
    for task in tasks {
        task.await.unwrap();
    }
    assert!(sched.dump().is_idle());
}

#[test]
fn a_request_keeps_its_priority_in_every_form() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let waiter = sched.actor("waiter", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let held = holder.try_admit(["a.rs"]).unwrap();
    // waiter (priority 0) waits for a.rs and, behind it, claims b.rs too.
    let mut w = waiter.admit(["a.rs", "b.rs"]);
    assert!(poll(&mut w).is_pending());

    // Plain forms use priority 0, so they queue behind the waiter.
    let b = busy(other.try_admit(["b.rs"]));
    assert!(b.queued);
    assert_eq!(b.holder, "waiter");
    busy(other.fence(["b.rs"]));
    busy(other.request(["b.rs"]).priority(0).try_admit());
    busy(other.request(["b.rs"]).priority(-3).fence());
    // A higher priority is ahead of the waiter in every form.
    let r = other.request(["b.rs"]).priority(1).try_admit().unwrap();
    drop(r);
    let f = other.request(["b.rs"]).priority(1).fence().unwrap();
    drop(f);
    let mut a = other.request(["b.rs"]).priority(1).admit();
    let r = ready(&mut a).unwrap();
    drop(r);
    let r = other
        .request(["b.rs"])
        .priority(1)
        .admit_blocking()
        .unwrap();
    drop(r);
    // A waiting request of higher priority is queued ahead of the waiter.
    let blocker = other.try_admit(["c.rs"]).unwrap();
    let mut hi = other.request(["b.rs", "c.rs"]).priority(2).admit();
    assert!(poll(&mut hi).is_pending());
    let dump = sched.dump();
    assert_eq!(dump.waiters[0].priority, 2);
    assert_eq!(dump.waiters[1].actor, "waiter");
    drop(hi);
    drop((blocker, held));
    drop(ready(&mut w).unwrap());
}

#[test]
fn disjoint_requests_never_wait_for_each_other() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let urgent = sched.actor("urgent", Grant::workspace(&root)).unwrap();
    let low = sched.actor("low", Grant::workspace(&root)).unwrap();
    let held = holder.try_admit(["src/a.rs"]).unwrap();
    let mut w = urgent.request(["src/"]).priority(100).admit();
    assert!(poll(&mut w).is_pending());
    // Nothing overlaps docs/: neither the hold nor the urgent waiter is in the way.
    let r1 = low
        .request(["docs/a.md"])
        .priority(-100)
        .try_admit()
        .unwrap();
    let mut r2 = low.request(["docs/b.md"]).priority(-100).admit();
    let r2 = ready(&mut r2).unwrap();
    let f = low.fence(["tests/"]).unwrap();
    drop((r1, r2, f, held));
    drop(ready(&mut w).unwrap());
}

#[test]
fn no_starvation_within_a_priority_level() {
    let (_dir, root, sched) = setup(Config::default());
    let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
    let patient = sched.actor("patient", Grant::workspace(&root)).unwrap();
    let eager = sched.actor("eager", Grant::workspace(&root)).unwrap();
    let held = holder.try_admit(["a.rs"]).unwrap();
    let mut w = patient.admit(["a.rs", "b.rs"]);
    assert!(poll(&mut w).is_pending());
    // b.rs is free, but taking it would keep the patient waiter waiting: a
    // stream of try_admits (and fences) of the same priority is refused.
    for i in 0..50 {
        let b = if i % 2 == 0 {
            busy(eager.try_admit(["b.rs"]))
        } else {
            busy(eager.fence(["b.rs"]))
        };
        assert!(b.queued);
        assert_eq!(b.holder, "patient");
        assert!(poll(&mut w).is_pending());
    }
    // The holder releases: the waiter is granted before anyone else can try.
    drop(held);
    busy(eager.try_admit(["b.rs"]));
    let r = ready(&mut w).unwrap();
    assert_eq!(r.paths().len(), 2);
}

// ---------------------------------------------------------------- fence widen

#[test]
fn widen_is_all_or_nothing() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let mut fence = lead.fence(["src/"]).unwrap();
    let held = other
        .request(["docs/a.md"])
        .label("edit")
        .try_admit()
        .unwrap();
    let b = busy(fence.extend(["tests/", "docs/"]));
    assert_eq!(b.holder, "other");
    assert_eq!(b.path, root.join("docs"));
    // Nothing was added: tests/ is still free for others.
    assert_eq!(fence.paths(), vec![root.join("src")]);
    let probe = other.try_admit(["tests/x.rs"]).unwrap();
    drop(probe);
    fence.extend(["tests/"]).unwrap();
    assert_eq!(fence.paths(), vec![root.join("src"), root.join("tests")]);
    busy(other.try_admit(["tests/x.rs"]));
    drop(held);
    fence.extend(["docs/"]).unwrap();
    assert_eq!(fence.paths().len(), 3);
    sched.assert_invariants();
}

#[test]
fn widen_is_not_refused_by_a_waiter_on_the_part_already_held() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let mut fence = lead.fence(["src/"]).unwrap();
    let mut w = other.admit(["src/a.rs"]);
    assert!(poll(&mut w).is_pending());
    // docs/ is contested by nobody; the waiter waits for src/, which the
    // fence already holds.
    fence.extend(["docs/"]).unwrap();
    // Asking again for what the fence already covers changes nothing.
    fence.extend(["src/b.rs"]).unwrap();
    assert_eq!(fence.paths(), vec![root.join("docs"), root.join("src")]);
    // A call's reservation grows the same way.
    let mut call = lead.try_admit(["x.rs"]).unwrap();
    let mut w2 = other.admit(["x.rs"]);
    assert!(poll(&mut w2).is_pending());
    call.extend(["y.rs"]).unwrap();
    // But a new path an earlier waiter asked for is refused (fairness) —
    // a waiter blocked by a call, not by a fence covering the call (that
    // one the fence's owner would pass, SPEC §4).
    let mut w3 = other.admit(["x.rs", "z.rs"]);
    assert!(poll(&mut w3).is_pending());
    let b = busy(call.extend(["z.rs"]));
    assert!(b.queued);
    drop((call, fence));
    drop(ready(&mut w).unwrap());
    drop(ready(&mut w2).unwrap());
    drop(ready(&mut w3).unwrap());
}

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

// ---------------------------------------------------------------- fence narrow

#[test]
fn narrow_wakes_a_waiter_for_the_released_part_not_the_kept_part() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let a = sched.actor("a", Grant::workspace(&root)).unwrap();
    let b = sched.actor("b", Grant::workspace(&root)).unwrap();
    let mut fence = lead.fence(["src/", "docs/"]).unwrap();
    let mut on_docs = a.admit(["docs/a.md"]);
    let mut on_kept = b.admit(["src/lex.rs"]);
    let mut on_src = b.admit(["src/ast.rs"]);
    for fut in [&mut on_docs, &mut on_kept, &mut on_src] {
        assert!(poll(fut).is_pending());
    }
    fence.narrow(["src/lex.rs"]).unwrap();
    assert_eq!(fence.paths(), vec![root.join("src/lex.rs")]);
    // The released parts' waiters were granted by the narrow itself.
    let dump = sched.dump();
    assert_eq!(dump.waiters.len(), 1);
    assert_eq!(dump.waiters[0].paths[0].path, root.join("src/lex.rs"));
    assert_eq!(causes(&dump), vec![path_cause(&root, "src/lex.rs", "lead")]);
    let r1 = ready(&mut on_docs).unwrap();
    let r2 = ready(&mut on_src).unwrap();
    assert!(poll(&mut on_kept).is_pending());
    drop(fence);
    let r3 = ready(&mut on_kept).unwrap();
    drop((r1, r2, r3));
}

#[test]
fn narrow_outside_the_current_fence_changes_nothing() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let mut fence = lead.fence(["src/", "docs/a.md"]).unwrap();
    let mut w = other.admit(["docs/a.md"]);
    assert!(poll(&mut w).is_pending());
    for bad in [
        vec![Target::from("src/a.rs"), Target::from("tests/x.rs")],
        vec![Target::from("docs/")], // wider than the exact key it holds
        vec![Target::from("docs/a.md/")],
        vec![Target::from("src/a.rs"), Target::from("docs/b.md")],
    ] {
        match fence.narrow(bad.clone()) {
            Err(Error::OutsideFence {
                actor, fence: f, ..
            }) => {
                assert_eq!(actor, "lead");
                assert_eq!(f, vec![root.join("docs/a.md"), root.join("src")]);
            }
            other => panic!("expected OutsideFence for {bad:?}, got {other:?}"),
        }
        assert_eq!(
            fence.paths(),
            vec![root.join("docs/a.md"), root.join("src")]
        );
        assert!(poll(&mut w).is_pending(), "nothing was released");
    }
    match fence.narrow(Vec::<Target>::new()) {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {other:?}"),
    }
    assert_eq!(fence.paths().len(), 2);
    fence.narrow(["src/"]).unwrap();
    drop(ready(&mut w).unwrap());
}

#[test]
fn narrow_can_only_weaken_a_mode() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let mut watch = lead.fence([Target::tree("vendor").shared()]).unwrap();
    assert!(matches!(
        watch.narrow([Target::file("vendor/lib.rs")]),
        Err(Error::OutsideFence { .. })
    ));
    assert_eq!(watch.modes(), vec![(root.join("vendor"), Mode::Shared)]);
    drop(watch);

    let mut fence = lead.fence(["src/"]).unwrap();
    busy(other.fence([Target::tree("src").shared()]));
    // Exclusive to shared: another shared fence may now join.
    fence.narrow([Target::tree("src").shared()]).unwrap();
    assert_eq!(fence.modes(), vec![(root.join("src"), Mode::Shared)]);
    let theirs = other.fence([Target::tree("src").shared()]).unwrap();
    // ... but writes by others are still refused under a shared fence.
    busy(other.try_admit(["src/a.rs"]));
    drop((theirs, fence));
}

// ---------------------------------------------------------------- opaque tools

#[test]
fn workspace_target_reserves_the_grant_root_as_a_tree() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let shell = lead
        .request([Target::workspace()])
        .label("bash: make")
        .try_admit()
        .unwrap();
    let dump = sched.dump();
    assert_eq!(dump.holds.len(), 1);
    let path = &dump.holds[0].paths[0];
    assert_eq!(
        (path.path.as_path(), path.tree, path.mode),
        (root.as_path(), true, Mode::Exclusive)
    );
    let b = busy(other.try_admit(["deep/down/file.rs"]));
    assert_eq!(b.label.as_deref(), Some("bash: make"));
    busy(other.try_admit([Target::file("README.md").shared()]));
    drop(shell);
    // Shared: an observing tool lets readers through, not writers.
    let observe = lead.try_admit([Target::workspace().shared()]).unwrap();
    let read = other.try_admit([Target::file("a.rs").shared()]).unwrap();
    busy(other.try_admit(["a.rs"]));
    drop((observe, read));
}

#[test]
fn workspace_target_of_a_fenced_actor_is_its_grant_fence() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let kid = lead
        .child("kid", Grant::fenced(&root, ["src/", "docs/"]))
        .unwrap();
    let shell = kid.try_admit([Target::workspace()]).unwrap();
    let dump = sched.dump();
    let call = dump
        .holds
        .iter()
        .find(|h| h.kind == HoldKind::Call)
        .unwrap();
    let paths: Vec<_> = call.paths.iter().map(|p| (&p.path, p.tree)).collect();
    assert_eq!(
        paths,
        vec![(&root.join("docs"), true), (&root.join("src"), true)]
    );
    // Outside the kid's fence the lead still works.
    let readme = lead.try_admit(["README.md"]).unwrap();
    // A second opaque call of the same actor waits for the first.
    busy(kid.try_admit([Target::workspace()]));
    drop((shell, readme));
}

// ---------------------------------------------------------------- read-only actors

#[test]
fn a_read_only_actor_takes_shared_holds_only() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let reader = lead.child("reader", Grant::read_only(&root)).unwrap();
    for attempt in [
        reader.try_admit(["a.rs"]).map(drop),
        reader.fence(["src/"]).map(drop),
        reader.try_admit([Target::workspace()]).map(drop),
        reader
            .try_admit([Target::file("b.rs").shared(), Target::file("a.rs")])
            .map(drop),
    ] {
        match attempt {
            Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reader"),
            other => panic!("expected ReadOnly, got {other:?}"),
        }
    }
    assert!(sched.dump().holds.is_empty());
    let read = reader.try_admit([Target::file("a.rs").shared()]).unwrap();
    let watch = reader.fence([Target::tree("src").shared()]).unwrap();
    let all = reader.try_admit([Target::workspace().shared()]).unwrap();
    drop((read, watch, all));
}

#[test]
fn a_child_of_a_read_only_actor_must_be_read_only() {
    let (_dir, root, sched) = setup(Config::default());
    let reader = sched.actor("reader", Grant::read_only(&root)).unwrap();
    for grant in [Grant::workspace(&root), Grant::fenced(&root, ["src/"])] {
        match reader.child("kid", grant.clone()) {
            Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reader"),
            other => panic!("expected ReadOnly, got {other:?}"),
        }
        let mut waiting = reader.child_wait("kid", grant);
        assert!(matches!(ready(&mut waiting), Err(Error::ReadOnly { .. })));
    }
    assert_eq!(sched.dump().actors.len(), 1);
    let kid = reader.child("kid", Grant::read_only(&root)).unwrap();
    drop(kid);
}

#[test]
fn a_read_only_child_of_a_fenced_parent_needs_no_fence() {
    let (_dir, root, sched) = setup(Config::default());
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let parser = lead
        .child("parser", Grant::fenced(&root, ["src/"]))
        .unwrap();
    // A writable child without a fence would exceed its parent's write scope.
    assert!(matches!(
        parser.child("helper", Grant::workspace(&root)),
        Err(Error::OutsideFence { .. })
    ));
    let reviewer = parser.child("reviewer", Grant::read_only(&root)).unwrap();
    // It reads anywhere under its root, inside the fence or not.
    let r = reviewer
        .try_admit([
            Target::file("src/lex.rs").shared(),
            Target::file("README.md").shared(),
        ])
        .unwrap();
    drop(r);
    assert_eq!(sched.dump().holds.len(), 1, "only the parser's grant fence");
}

#[test]
fn a_child_wait_blocked_by_a_path_reserves_no_slot() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1));
    std::fs::create_dir(root.join("docs")).unwrap();
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let sib = sched.actor("sib", Grant::workspace(&root)).unwrap();
    let fence = sib.fence(["src/"]).unwrap();
    let mut waits = lead.child_wait("w", Grant::fenced(&root, ["src/"]));
    assert!(poll(&mut waits).is_pending());
    let dump = sched.dump();
    assert_eq!(causes(&dump), vec![path_cause(&root, "src", "sib")]);
    // The slot is free and nobody else waits for one: a disjoint child
    // takes it.
    let disjoint = lead
        .child("docs", Grant::workspace(root.join("docs")))
        .expect("a path-blocked child_wait reserves no slot");
    // Once its path is free, the child_wait waits for the slot...
    drop(fence);
    assert!(poll(&mut waits).is_pending());
    assert_eq!(causes(&sched.dump()), vec![WaitCause::Slots]);
    // ...and from then on it reserves the next free one.
    drop(disjoint);
    let w = ready(&mut waits).unwrap();
    assert_eq!(w.name(), "w");
    sched.assert_invariants();
}

#[test]
fn a_slot_wait_that_every_slot_holder_waits_on_is_a_deadlock() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let other = sched.actor("other", Grant::workspace(&root)).unwrap();
    let _fence = lead.fence(["src/"]).unwrap();
    // k holds the only slot and waits on lead's fence.
    let k = other.child("k", Grant::workspace(&root)).unwrap();
    let mut k_waits = k.admit(["src/a.rs"]);
    assert!(poll(&mut k_waits).is_pending());
    // lead waiting for a slot would wait for k, which waits for lead.
    let mut lead_waits = lead.child_wait("w", Grant::workspace(&root));
    match poll(&mut lead_waits) {
        Poll::Ready(Err(Error::Deadlock { cycle })) => assert_eq!(cycle, ["lead", "k"]),
        other => panic!("expected Deadlock, got {other:?}"),
    }
    assert_eq!(
        sched.dump().waiters.len(),
        1,
        "the refused wait did not queue"
    );
    // The other order: lead's slot wait first, then k starts waiting on
    // lead — k's request is the one that closes it.
    drop(k_waits);
    let mut lead_waits = lead.child_wait("w", Grant::workspace(&root));
    assert!(poll(&mut lead_waits).is_pending());
    let mut k_waits = k.admit(["src/a.rs"]);
    assert!(matches!(
        poll(&mut k_waits),
        Poll::Ready(Err(Error::Deadlock { .. }))
    ));
    // With a holder that does not wait on lead, the slot wait is fine.
    drop(lead_waits);
    let (_dir2, root2, sched2) = setup(Config::default().max_actors(1));
    let lead2 = sched2.actor("lead", Grant::workspace(&root2)).unwrap();
    let other2 = sched2.actor("other", Grant::workspace(&root2)).unwrap();
    let k2 = other2.child("k", Grant::workspace(&root2)).unwrap();
    let mut waits = lead2.child_wait("w", Grant::workspace(&root2));
    assert!(poll(&mut waits).is_pending());
    drop(k2);
    assert!(ready(&mut waits).is_ok());
}

#[tokio::test]
async fn child_wait_timeout_gives_up_and_leaves_nothing() {
    let (_dir, root, sched) = setup(Config::default().max_actors(1));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    let first = lead.child("first", Grant::workspace(&root)).unwrap();
    let late = lead
        .child_wait_timeout("late", Grant::workspace(&root), Duration::from_millis(30))
        .await;
    assert!(matches!(late, Err(Error::Timeout { .. })), "{late:?}");
    let dump = sched.dump();
    assert!(dump.waiters.is_empty());
    assert_eq!(dump.counters.timed_out, 1);
    drop(first);
    let next = lead
        .child_wait_timeout("next", Grant::workspace(&root), Duration::from_secs(5))
        .await;
    assert!(next.is_ok(), "{next:?}");
    sched.assert_invariants();
}
