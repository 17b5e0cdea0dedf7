//! The in-process scheduler's own contract: what only the in-process API can
//! show. Every behaviour of SPEC §2–§5 that the wire can express lives once
//! in tests/conformance.rs, which runs it on the in-process scheduler and on
//! a `writ serve` alike. What stays here, and why:
//!
//! - `a_grant_never_picked_up_is_handed_back_on_drop`: a future polled by
//!   hand, granted by the wake-up scan, then dropped unpolled — the
//!   synchronous `Drop` of an in-process `Acquire` (the wire's counterpart,
//!   a grant racing a dropped admit, is in tests/serve.rs).
//! - `admit_blocking_waits_on_a_plain_thread`: the blocking admits exist
//!   only in process.
//! - `a_panicking_call_releases_its_reservation`: guards released by unwinding
//!   on the thread that holds them; a remote guard releases in the background.
//! - `public_types_have_the_promised_bounds`,
//!   `a_future_outlives_the_borrowed_targets`: properties of the in-process
//!   types and futures themselves.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use writ::{Config, Error, Grant, Scheduler};

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical temp dir");
    (dir, root)
}

fn sched() -> Scheduler {
    Scheduler::new(Config::default())
}

/// Polls a future once with a no-op waker.
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_grant_never_picked_up_is_handed_back_on_drop() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let held = a.try_admit(["x.rs"]).unwrap();
    let mut waiting = Box::pin(b.admit(["x.rs"]));
    assert!(poll_once(waiting.as_mut()).is_pending());
    drop(held); // the wake-up scan grants b's request
    assert_eq!(s.dump().holds.len(), 1);
    drop(waiting); // ...which is dropped before it was polled again
    assert!(s.dump().is_idle());
}

#[test]
fn admit_blocking_waits_on_a_plain_thread() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let held = a.try_admit(["x.rs"]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let r = b.admit_blocking(["x.rs"]);
            tx.send(r.is_ok()).unwrap();
        });
        while s2.dump().waiters.is_empty() {
            std::thread::yield_now();
        }
        drop(held);
        assert!(rx.recv().unwrap());
    });
    let timed = b.admit_blocking_timeout(["x.rs"], Duration::from_millis(1));
    assert!(timed.is_ok(), "free now");
    let _again = a.try_admit(["y.rs"]).unwrap();
    assert!(matches!(
        b.admit_blocking_timeout(["y.rs"], Duration::from_millis(5)),
        Err(Error::Timeout { .. })
    ));
    assert!(s.dump().waiters.is_empty());
}

#[test]
fn a_panicking_call_releases_its_reservation() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let result = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let _r = a.try_admit(["x.rs"]).unwrap();
                let _f = a.fence(["dir/"]).unwrap();
                panic!("the tool call failed");
            })
            .join()
    });
    assert!(result.is_err());
    assert!(s.dump().is_idle());
    assert!(b.try_admit(["x.rs", "dir/y"]).is_ok());
}

#[test]
fn public_types_have_the_promised_bounds() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send_static<T: Send + 'static>() {}
    send_sync_static::<Scheduler>();
    send_sync_static::<writ::Actor>();
    send_static::<writ::Reservation>();
    send_static::<writ::Fence>();
    send_static::<writ::Acquire<writ::Reservation>>();
    send_static::<writ::Acquire<writ::Fence>>();
    send_static::<writ::Acquire<writ::Actor>>();
    send_sync_static::<Error>();
    fn clone<T: Clone>() {}
    clone::<Scheduler>();
}

#[test]
fn a_future_outlives_the_borrowed_targets() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let fut = {
        let owned = String::from("x.rs");
        a.admit([owned.as_str()])
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert!(
        rt.block_on(async { tokio::spawn(fut).await })
            .unwrap()
            .is_ok()
    );
}
