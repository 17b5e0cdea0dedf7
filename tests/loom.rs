//! loom models of the scheduler's races.
//!
//! Each model runs the production scheduler (under `--cfg writ_loom` its
//! mutex, `Arc` and atomics are loom's, see `src/sync.rs`) with 2–3 threads
//! on 2–3 paths, and loom explores every interleaving of its lock
//! acquisitions up to the preemption bound. Models are named after the race
//! they cover. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg writ_loom" cargo test --release --test loom
//! ```
//!
//! `LOOM_MAX_PREEMPTIONS` overrides each model's default bound.
//!
//! Scheduler objects must be created inside `loom::model` (loom's `Arc` and
//! `Mutex` only exist there); the temp dir is created once, outside it.
#![cfg(writ_loom)]

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};

use loom::future::block_on;
use loom::model::Builder;
use loom::thread;
use writ::{Config, Dump, Error, Grant, Scheduler};

/// Explores `f` with `bound` preemptions (unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise), prints how many interleavings loom ran and fails if it
/// ran only one (a model with no branching checks nothing).
fn check(name: &str, bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let started = std::time::Instant::now();
    b.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{name}: {runs} interleavings, preemption bound {:?}, {:.2?}",
        b.preemption_bound,
        started.elapsed()
    );
    assert!(runs > 1, "{name}: loom explored a single interleaving");
}

/// A canonical temp root with `src/` in it.
fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    (dir, root)
}

fn sched() -> Scheduler {
    Scheduler::new(Config::default().session("loom"))
}

/// Every hold's path set, by actor name.
fn holds_by_actor(dump: &Dump) -> Vec<(String, BTreeSet<PathBuf>)> {
    dump.holds
        .iter()
        .map(|h| {
            (
                h.actor.clone(),
                h.paths.iter().map(|p| p.path.clone()).collect(),
            )
        })
        .collect()
}

fn set(root: &Path, rels: &[&str]) -> BTreeSet<PathBuf> {
    rels.iter().map(|r| root.join(r)).collect()
}

/// Two threads `try_admit` overlapping sets ({a, b} and {b, c}) while a third
/// takes dumps. Never both admitted; the loser is `Busy` naming the winner;
/// no dump ever shows a request's keys partially held.
#[test]
fn try_admit_overlapping_sets_all_or_nothing() {
    let (_dir, root) = root();
    check("try_admit_overlapping_sets_all_or_nothing", 3, move || {
        let sched = sched();
        let one = sched.actor("one", Grant::workspace(&root)).unwrap();
        let two = sched.actor("two", Grant::workspace(&root)).unwrap();
        let want_one = set(&root, &["a", "b"]);
        let want_two = set(&root, &["b", "c"]);

        let t1 = thread::spawn(move || {
            let r = one.try_admit(["a", "b"]);
            (one, r)
        });
        let t2 = thread::spawn(move || {
            let r = two.try_admit(["b", "c"]);
            (two, r)
        });
        let observer = {
            let sched = sched.clone();
            let (want_one, want_two) = (want_one.clone(), want_two.clone());
            thread::spawn(move || {
                let dump = sched.dump();
                assert!(dump.holds.len() <= 1, "both admitted: {dump}");
                for (actor, paths) in holds_by_actor(&dump) {
                    let want = if actor == "one" { &want_one } else { &want_two };
                    assert_eq!(&paths, want, "partial hold of '{actor}' visible");
                }
            })
        };
        let (one, r1) = t1.join().unwrap();
        let (two, r2) = t2.join().unwrap();
        observer.join().unwrap();

        // Both guards are still alive here: exactly one won.
        match (&r1, &r2) {
            (Ok(_), Err(Error::Busy(busy))) => assert_eq!(busy.holder, "one"),
            (Err(Error::Busy(busy)), Ok(_)) => assert_eq!(busy.holder, "two"),
            other => panic!("expected exactly one admission, got {other:?}"),
        }
        let dump = sched.dump();
        assert_eq!(dump.holds.len(), 1);
        sched.assert_invariants();
        drop((r1, r2, one, two));
        assert!(sched.dump().is_idle());
    });
}

/// A waiter blocks on a held path while another thread releases it: whichever
/// runs first, the waiter is woken and admitted (no lost wakeup; loom fails
/// the model if the waiter's thread is never unparked).
#[test]
fn release_during_acquire_wakes_waiter() {
    let (_dir, root) = root();
    check("release_during_acquire_wakes_waiter", 3, move || {
        let sched = sched();
        let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
        let waiter = sched.actor("waiter", Grant::workspace(&root)).unwrap();
        let held = holder.try_admit(["src/x", "src/y"]).unwrap();

        let t = thread::spawn(move || {
            let r = block_on(waiter.admit(["src/y"]));
            (waiter, r)
        });
        drop(held);
        let (waiter, r) = t.join().unwrap();
        let r = r.expect("the waiter is admitted once the holder releases");
        sched.assert_invariants();
        drop(r);
        assert!(sched.dump().is_idle());
        drop((waiter, holder));
    });
}

/// A queued waiter's future is dropped while the hold it waits for is
/// released, and a second waiter is queued behind it on the same path. In
/// every order (cancel first, release first and the first waiter granted
/// before its future drops) the second waiter is woken and admitted, and
/// nothing is left behind.
#[test]
fn concurrent_cancel_and_release_wake_next_waiter() {
    let (_dir, root) = root();
    check(
        "concurrent_cancel_and_release_wake_next_waiter",
        3,
        move || {
            let sched = sched();
            let holder = sched.actor("holder", Grant::workspace(&root)).unwrap();
            let first = sched.actor("first", Grant::workspace(&root)).unwrap();
            let second = sched.actor("second", Grant::workspace(&root)).unwrap();
            let held = holder.try_admit(["src/x"]).unwrap();

            // Queue both waiters, in order, before the race starts.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut f1 = Box::pin(first.admit(["src/x"]));
            let mut f2 = Box::pin(second.admit(["src/x", "src/z"]));
            assert!(f1.as_mut().poll(&mut cx).is_pending());
            assert!(f2.as_mut().poll(&mut cx).is_pending());
            let dump = sched.dump();
            let order: Vec<&str> = dump.waiters.iter().map(|w| w.actor.as_str()).collect();
            assert_eq!(order, ["first", "second"]);

            let canceller = thread::spawn(move || drop(f1));
            let releaser = thread::spawn(move || drop(held));
            let r = block_on(f2).expect("the second waiter is admitted");
            canceller.join().unwrap();
            releaser.join().unwrap();

            sched.assert_invariants();
            let dump = sched.dump();
            assert_eq!(dump.holds.len(), 1, "only the second waiter's call: {dump}");
            assert!(
                dump.waiters.is_empty(),
                "no residue of the cancelled waiter: {dump}"
            );
            drop(r);
            assert!(sched.dump().is_idle());
            drop((holder, first, second));
        },
    );
}

/// A parent's fence plus its descendant's call race a sibling's call on the
/// same file. The covers rule must hold in every order: either the fence and
/// the descendant's call are admitted and the sibling is refused by the
/// fence, or the sibling got there first and both the fence and the
/// descendant's call are refused by the sibling's call.
#[test]
fn fence_and_descendant_call_vs_sibling_call() {
    let (_dir, root) = root();
    check("fence_and_descendant_call_vs_sibling_call", 3, move || {
        let sched = sched();
        let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
        let parent = lead.child("parent", Grant::workspace(&root)).unwrap();
        let kid = parent.child("kid", Grant::workspace(&root)).unwrap();
        let sibling = lead.child("sibling", Grant::workspace(&root)).unwrap();

        let line = thread::spawn(move || {
            let fence = parent.fence(["src/"]);
            let call = kid.try_admit(["src/a"]);
            (parent, kid, fence, call)
        });
        let other = thread::spawn(move || {
            let call = sibling.try_admit(["src/a"]);
            (sibling, call)
        });
        let (parent, kid, fence, kid_call) = line.join().unwrap();
        let (sibling, sibling_call) = other.join().unwrap();
        sched.assert_invariants();

        match (&fence, &kid_call, &sibling_call) {
            (Ok(_), Ok(_), Err(Error::Busy(busy))) => {
                assert_eq!(busy.holder, "parent", "the sibling is refused by the fence")
            }
            (Err(Error::Busy(f)), Err(Error::Busy(k)), Ok(_)) => {
                assert_eq!(f.holder, "sibling");
                assert_eq!(k.holder, "sibling");
            }
            other => panic!("covers rule broken: {other:?}"),
        }
        drop((fence, kid_call, sibling_call));
        assert!(sched.dump().is_idle());
        drop((kid, parent, sibling, lead));
    });
}

/// Two fence holders each start waiting for the other's fence. At most one
/// may wait: the request that would close the cycle is refused with
/// `Deadlock` (and its actor backs off by dropping its fence), so the other
/// is admitted. Never both blocked forever (loom fails on a deadlock).
#[test]
fn crossed_fence_waits_refuse_one_with_deadlock() {
    let (_dir, root) = root();
    check(
        "crossed_fence_waits_refuse_one_with_deadlock",
        3,
        move || {
            let sched = sched();
            let a = sched.actor("a", Grant::workspace(&root)).unwrap();
            let b = sched.actor("b", Grant::workspace(&root)).unwrap();
            let fa = a.fence(["src/x"]).unwrap();
            let fb = b.fence(["src/y"]).unwrap();

            let run = |me: writ::Actor, mine: writ::Fence, want: &'static str, sched: Scheduler| {
                thread::spawn(move || {
                    let r = block_on(me.fence_wait([want]));
                    if let Err(Error::Deadlock { cycle }) = &r {
                        assert_eq!(cycle.first().map(String::as_str), Some(me.name()));
                        assert_eq!(cycle.len(), 2, "{cycle:?}");
                        assert!(sched.dump().waiters.len() <= 1, "both waiting");
                        drop(mine); // back off: release what the other waits for
                        return (me, None, r);
                    }
                    (me, Some(mine), r)
                })
            };
            let ta = run(a, fa, "src/y", sched.clone());
            let tb = run(b, fb, "src/x", sched.clone());
            let (a, fa, ra) = ta.join().unwrap();
            let (b, fb, rb) = tb.join().unwrap();

            let deadlocks = [&ra, &rb]
                .iter()
                .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
                .count();
            assert_eq!(deadlocks, 1, "exactly one refused: {ra:?} / {rb:?}");
            assert!(ra.is_ok() || rb.is_ok(), "the other is admitted");
            sched.assert_invariants();
            assert_eq!(sched.dump().counters.deadlocks, 1);
            drop((ra, rb, fa, fb));
            assert!(sched.dump().is_idle());
            drop((a, b));
        },
    );
}

/// Hot files (SPEC §6): a claim whose time runs out while its holder
/// writes, with another writer waiting. In every order of the expiry, the
/// holder's write and the waiter's wait, the waiter is admitted exactly
/// once, no two writes overlap, and no claim or hold is left.
#[test]
fn a_claim_expiring_while_its_holder_writes_lets_the_waiter_in() {
    let (_dir, root) = root();
    check(
        "a_claim_expiring_while_its_holder_writes_lets_the_waiter_in",
        3,
        move || {
            let sched = sched();
            let a = sched.actor("a", Grant::workspace(&root)).unwrap();
            let b = sched.actor("b", Grant::workspace(&root)).unwrap();
            let refused = a.try_admit(["src/hot"]).unwrap();
            // Its time is up as soon as anyone looks.
            refused.claim(std::time::Duration::from_nanos(1));
            drop(refused);

            let writer = thread::spawn(move || {
                let r = a.try_admit(["src/hot"]);
                if let Err(Error::Busy(busy)) = &r {
                    // Only once the claim is gone can b be ahead of a.
                    assert_eq!(busy.holder, "b");
                }
                drop(r);
                a
            });
            let reaper = {
                let sched = sched.clone();
                thread::spawn(move || sched.expire_claims())
            };
            let call = block_on(b.admit(["src/hot"])).expect("b is admitted");
            assert_eq!(
                sched.dump().holds.len(),
                1,
                "b's write overlaps another hold"
            );
            drop(call);
            let a = writer.join().unwrap();
            reaper.join().unwrap();
            sched.expire_claims();
            sched.assert_invariants();
            assert!(sched.dump().is_idle());
            drop((a, b));
        },
    );
}

/// A claimer dropped while another writer waits for its claim: whichever
/// comes first, the drop or the wait, the writer is admitted.
#[test]
fn a_dropped_claimer_lets_the_waiter_in() {
    let (_dir, root) = root();
    check("a_dropped_claimer_lets_the_waiter_in", 3, move || {
        let sched = sched();
        let a = sched.actor("a", Grant::workspace(&root)).unwrap();
        let b = sched.actor("b", Grant::workspace(&root)).unwrap();
        let refused = a.try_admit(["src/hot"]).unwrap();
        refused.claim(std::time::Duration::from_secs(600));
        drop(refused);
        let t = thread::spawn(move || drop(a));
        let call = block_on(b.admit(["src/hot"])).expect("b is admitted once a is gone");
        t.join().unwrap();
        sched.assert_invariants();
        drop(call);
        assert!(sched.dump().is_idle());
        drop(b);
    });
}

/// Two claimers each wait for the other's claimed file: exactly one is
/// refused `Deadlock`; it backs off by writing its own file (which ends its
/// claim) and the other is admitted.
#[test]
fn crossed_claims_refuse_one_with_deadlock() {
    let (_dir, root) = root();
    check("crossed_claims_refuse_one_with_deadlock", 3, move || {
        let sched = sched();
        let a = sched.actor("a", Grant::workspace(&root)).unwrap();
        let b = sched.actor("b", Grant::workspace(&root)).unwrap();
        for (me, file) in [(&a, "src/x"), (&b, "src/y")] {
            let refused = me.try_admit([file]).unwrap();
            refused.claim(std::time::Duration::from_secs(600));
        }
        let run = |me: writ::Actor, mine: &'static str, want: &'static str| {
            thread::spawn(move || {
                let r = block_on(me.admit([want]));
                if let Err(Error::Deadlock { cycle }) = &r {
                    assert_eq!(cycle.len(), 2, "{cycle:?}");
                    // Back off: its next write to its own file ends its claim.
                    drop(me.try_admit([mine]).expect("its own claimed file"));
                }
                (me, r)
            })
        };
        let ta = run(a, "src/x", "src/y");
        let tb = run(b, "src/y", "src/x");
        let (a, ra) = ta.join().unwrap();
        let (b, rb) = tb.join().unwrap();
        let deadlocks = [&ra, &rb]
            .iter()
            .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
            .count();
        assert_eq!(deadlocks, 1, "exactly one refused: {ra:?} / {rb:?}");
        sched.assert_invariants();
        drop((ra, rb, a, b));
        assert!(sched.dump().is_idle());
    });
}

/// The public handle types keep the bounds the docs promise under loom too.
#[test]
fn public_types_are_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<Scheduler>();
    send_sync::<writ::Actor>();
    send::<writ::Reservation>();
    send::<writ::Fence>();
    send::<writ::Acquire<writ::Reservation>>();
}
