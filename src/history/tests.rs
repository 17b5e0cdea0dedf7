//! Engine tests through the crate-internal recording interface (the one the
//! file tools' hook calls).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::*;
use crate::history::Handle;
use crate::sched::actor::{Actor, Grant};
use crate::sched::scheduler::Scheduler;

/// A workspace and, outside it, a history directory.
fn setup() -> ((tempfile::TempDir, tempfile::TempDir), Scheduler, Actor) {
    let dir = tempfile::tempdir().unwrap();
    let history = tempfile::tempdir().unwrap();
    let sched = Scheduler::new(
        Config::default()
            .history_dir(history.path().join("h"))
            .durability(Durability::Process),
    );
    let actor = sched.actor("agent", Grant::workspace(dir.path())).unwrap();
    ((dir, history), sched, actor)
}

#[test]
fn a_record_without_its_snapshot_is_an_error_not_a_guess() {
    let ((dir, _history), sched, actor) = setup();
    let path = dir.path().join("a.txt");
    let post = [Post {
        path: &path,
        state: Some(("00", 1, 0o644)),
    }];
    let err = Handle::of(&sched).record(&actor.meta, &post).unwrap_err();
    assert!(matches!(err, Error::History { .. }), "{err}");
}

#[test]
fn a_path_that_is_not_utf8_cannot_be_journaled_so_it_is_not_written() {
    let ((dir, _history), sched, actor) = setup();
    let path = dir.path().join(OsStr::from_bytes(b"bad\xff.txt"));
    let pre = [Pre {
        path: &path,
        content: None,
    }];
    let result = Handle::of(&sched).snapshot(&actor.meta, WriteKind::Edit, &pre, Some(b"x"), false);
    assert!(matches!(result, Err(Error::History { .. })));
}

#[test]
fn a_snapshot_pairs_with_the_record_of_the_same_actor_and_paths() {
    let ((dir, _history), sched, actor) = setup();
    let other = sched.actor("other", Grant::workspace(dir.path())).unwrap();
    let path = dir.path().join("a.txt");
    let pre = [Pre {
        path: &path,
        content: None,
    }];
    let history = Handle::of(&sched);
    history
        .snapshot(&actor.meta, WriteKind::Edit, &pre, Some(b"x"), false)
        .unwrap();
    let sha = sha256_hex(b"x");
    let post = [Post {
        path: &path,
        state: Some((&sha, 1, 0o644)),
    }];
    assert!(
        history.record(&other.meta, &post).is_err(),
        "not its snapshot"
    );
    history.record(&actor.meta, &post).unwrap();
    assert!(history.record(&actor.meta, &post).is_err(), "used once");
    let store = history.store().unwrap();
    let records = store.load().unwrap().records;
    let [Record::Write(w)] = records.as_slice() else {
        panic!("{records:?}")
    };
    assert_eq!(w.op, Op::Create);
    assert_eq!(w.files[0].after.as_ref().map(|a| a.blob), Some(true));
    assert!(Path::new(&w.root).is_absolute());
}
