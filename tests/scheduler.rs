//! The scheduler's contract (SPEC §2–§5), one rule per test where possible.

use std::future::Future;
use std::path::PathBuf;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use writ::{Config, Error, Grant, HoldKind, Mode, Scheduler, Target};

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

fn busy(result: Result<impl std::fmt::Debug, Error>) -> writ::Busy {
    match result {
        Err(Error::Busy(busy)) => busy,
        other => panic!("expected Busy, got {other:?}"),
    }
}

// ---------------------------------------------------------------- §3 matrix

#[derive(Debug, Clone, Copy, PartialEq)]
enum Relation {
    Same,
    ParentOverChild,
    ChildOverParent,
    Siblings,
}

/// Takes hold `a` as actor A, then asks hold `b` as actor B (related as
/// given) and reports whether B was refused.
fn clash_for(a: (HoldKind, Mode), b: (HoldKind, Mode), relation: Relation) -> bool {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let parent = lead.child("parent", Grant::workspace(&root)).unwrap();
    let child = parent.child("child", Grant::workspace(&root)).unwrap();
    let sibling = lead.child("sibling", Grant::workspace(&root)).unwrap();
    let (first, second) = match relation {
        Relation::Same => (&parent, &parent),
        Relation::ParentOverChild => (&parent, &child),
        Relation::ChildOverParent => (&child, &parent),
        Relation::Siblings => (&parent, &sibling),
    };
    let target = |mode: Mode| match mode {
        Mode::Shared => Target::file("x.rs").shared(),
        Mode::Exclusive => Target::file("x.rs"),
    };
    #[allow(dead_code)] // held only for their Drop
    enum Guard {
        F(writ::Fence),
        R(writ::Reservation),
    }
    let take = |actor: &writ::Actor, (kind, mode): (HoldKind, Mode)| -> Result<Guard, Error> {
        match kind {
            HoldKind::Fence => actor.fence([target(mode)]).map(Guard::F),
            HoldKind::Call => actor.try_admit([target(mode)]).map(Guard::R),
        }
    };
    let _held = take(first, a).expect("the first hold is always granted");
    let refused = match take(second, b) {
        Ok(_) => false,
        Err(Error::Busy(_)) => true,
        Err(e) => panic!("unexpected {e}"),
    };
    s.assert_invariants();
    refused
}

#[test]
fn conflict_matrix_between_unrelated_actors() {
    use HoldKind::*;
    use Mode::*;
    let fx = (Fence, Exclusive);
    let fs = (Fence, Shared);
    let cx = (Call, Exclusive);
    let cs = (Call, Shared);
    let expected = [
        (fx, fx, true),
        (fx, fs, true),
        (fx, cx, true),
        (fx, cs, false),
        (fs, fx, true),
        (fs, fs, false),
        (fs, cx, true),
        (fs, cs, false),
        (cx, fx, true),
        (cx, fs, true),
        (cx, cx, true),
        (cx, cs, true),
        (cs, fx, false),
        (cs, fs, false),
        (cs, cx, true),
        (cs, cs, false),
    ];
    for (a, b, clash) in expected {
        assert_eq!(
            clash_for(a, b, Relation::Siblings),
            clash,
            "{a:?} then {b:?} (siblings)"
        );
    }
}

#[test]
fn a_fence_covers_its_owner_and_descendants_but_not_upwards() {
    use HoldKind::*;
    use Mode::*;
    let fx = (Fence, Exclusive);
    let cx = (Call, Exclusive);
    let cs = (Call, Shared);
    // The owner's and its descendants' holds pass through its fence.
    assert!(!clash_for(fx, cx, Relation::Same));
    assert!(!clash_for(fx, fx, Relation::Same));
    assert!(!clash_for(fx, cx, Relation::ParentOverChild));
    assert!(!clash_for(fx, fx, Relation::ParentOverChild));
    // Ownership moves down, never up: the child's fence refuses the
    // parent's calls, though a parent's fence still covers the child's.
    assert!(clash_for(fx, cx, Relation::ChildOverParent));
    assert!(!clash_for(fx, fx, Relation::ChildOverParent));
    // Within a line, calls still exclude each other.
    assert!(clash_for(cx, cx, Relation::Same));
    assert!(clash_for(cx, cs, Relation::ParentOverChild));
    assert!(!clash_for(cs, cs, Relation::Same));
}

#[test]
fn parallel_calls_of_one_actor_on_one_file_are_serialized() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::fenced(&root, ["src/"])).unwrap();
    let first = a.try_admit(["src/lex.rs"]).unwrap();
    let b = busy(a.try_admit(["src/lex.rs"]));
    assert_eq!(b.holder, "a");
    drop(first);
    assert!(a.try_admit(["src/lex.rs"]).is_ok());
}

// ---------------------------------------------------------------- §2 keys

#[test]
fn trees_cover_descendants_exact_keys_only_themselves() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _tree = a.try_admit(["src/"]).unwrap();
    assert!(b.try_admit(["src/deep/x.rs"]).is_err());
    assert!(b.try_admit(["src"]).is_err(), "the tree's own path");
    assert!(
        b.try_admit(["src-old/x.rs"]).is_ok(),
        "a sibling prefix is not inside"
    );
    let _exact = a.try_admit(["lib"]).unwrap();
    assert!(
        b.try_admit(["lib/inner.rs"]).is_ok(),
        "an exact key covers only itself"
    );
    assert!(
        b.try_admit(["lib/"]).is_err(),
        "a tree over an exact key overlaps it"
    );
    assert!(b.try_admit([Target::tree(root.join("."))]).is_err());
}

#[test]
fn spellings_resolve_to_one_key() {
    let (_dir, root) = workspace();
    std::fs::create_dir_all(root.join("src/real")).unwrap();
    std::os::unix::fs::symlink(root.join("src/real"), root.join("link")).unwrap();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _r = a.try_admit(["src/real/x.rs"]).unwrap();
    for spelling in [
        "src/real/x.rs".to_string(),
        "./src//real/./x.rs".to_string(),
        "src/other/../real/x.rs".to_string(),
        "link/x.rs".to_string(),
        "link/../real/x.rs".to_string(),
        root.join("src/real/x.rs").display().to_string(),
    ] {
        let refused = busy(b.try_admit([spelling.as_str()]));
        assert_eq!(refused.path, root.join("src/real/x.rs"), "{spelling}");
    }
}

#[test]
fn escapes_are_refused_without_residue() {
    let (_dir, base) = workspace();
    let root = base.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(base.join("ws-old")).unwrap();
    std::os::unix::fs::symlink(base.join("ws-old"), root.join("escape")).unwrap();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    for bad in [
        "../ws-old/a.rs",
        "escape/a.rs",
        "/etc/passwd",
        "sub/../../ws-old/x",
        "escape/",
    ] {
        match a.try_admit(["ok.rs", bad]) {
            Err(Error::OutsideGrant { path, root: r }) => {
                assert!(!path.starts_with(&root), "{bad}: {path:?}");
                assert_eq!(r, root);
            }
            other => panic!("{bad}: expected OutsideGrant, got {other:?}"),
        }
    }
    assert!(s.dump().is_idle(), "nothing of a refused request stays");
}

#[test]
fn malformed_targets_are_invalid_paths() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let long = "x".repeat(300);
    for bad in [
        "",
        "a\0b",
        "CON",
        "dir/nul.txt",
        "trailing.",
        "space ",
        long.as_str(),
    ] {
        assert!(
            matches!(a.try_admit([bad]), Err(Error::InvalidPath { .. })),
            "{bad:?} should be InvalidPath"
        );
    }
    assert!(matches!(
        a.try_admit(Vec::<&str>::new()),
        Err(Error::InvalidPath { .. })
    ));
    // Without portable names, Windows rules do not apply.
    let lax = Scheduler::new(Config::default().portable_names(false));
    let b = lax.actor("b", Grant::workspace(&root)).unwrap();
    assert!(b.try_admit(["CON", "trailing."]).is_ok());
    assert!(s.dump().is_idle());
}

#[test]
fn grant_roots_must_exist_and_children_stay_inside() {
    let (_dir, root) = workspace();
    std::fs::write(root.join("file"), "x").unwrap();
    let s = sched();
    assert!(matches!(
        s.actor("a", Grant::workspace(root.join("missing"))),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        s.actor("a", Grant::workspace(root.join("file"))),
        Err(Error::InvalidPath { .. })
    ));
    std::fs::create_dir_all(root.join("ws/sub")).unwrap();
    std::fs::create_dir_all(root.join("ws-old")).unwrap();
    let lead = s.actor("lead", Grant::workspace(root.join("ws"))).unwrap();
    assert!(
        lead.child("in", Grant::workspace(root.join("ws/sub")))
            .is_ok()
    );
    assert!(matches!(
        lead.child("out", Grant::workspace(root.join("ws-old"))),
        Err(Error::OutsideGrant { .. })
    ));
    assert!(matches!(
        lead.child("up", Grant::workspace(&root)),
        Err(Error::OutsideGrant { .. })
    ));
}

#[test]
fn insensitive_case_compares_folded_and_dumps_the_spelling() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default().case(writ::CaseMode::Insensitive));
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _r = a.try_admit(["Src/Lexer.RS"]).unwrap();
    assert!(b.try_admit(["src/lexer.rs"]).is_err());
    assert_eq!(s.dump().holds[0].paths[0].path, root.join("Src/Lexer.RS"));
    let sensitive = Scheduler::new(Config::default().case(writ::CaseMode::Sensitive));
    let c = sensitive.actor("c", Grant::workspace(&root)).unwrap();
    let d = sensitive.actor("d", Grant::workspace(&root)).unwrap();
    let _r = c.try_admit(["Src/Lexer.RS"]).unwrap();
    assert!(d.try_admit(["src/lexer.rs"]).is_ok());
}

#[test]
fn overlapping_targets_in_one_request_merge() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let _r = a
        .try_admit([
            Target::file("a.rs").shared(),
            Target::file("a.rs"),
            Target::tree("src"),
            Target::file("src/x.rs").shared(),
            Target::tree("docs").shared(),
            Target::file("docs/y.md"),
        ])
        .unwrap();
    let dump = s.dump();
    let paths: Vec<(PathBuf, bool, Mode)> = dump.holds[0]
        .paths
        .iter()
        .map(|p| (p.path.clone(), p.tree, p.mode))
        .collect();
    assert_eq!(
        paths,
        vec![
            (root.join("a.rs"), false, Mode::Exclusive),
            (root.join("docs"), true, Mode::Shared),
            (root.join("docs/y.md"), false, Mode::Exclusive),
            (root.join("src"), true, Mode::Exclusive),
        ]
    );
}

// ---------------------------------------------------------------- §3 grants

#[test]
fn fenced_actor_writes_only_inside_its_fence_and_reads_anywhere() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::fenced(&root, ["src/parser/"])).unwrap();
    assert!(a.try_admit(["src/parser/lex.rs"]).is_ok());
    assert!(
        a.try_admit(["src/parser/"]).is_ok(),
        "equal counts as inside"
    );
    match a.try_admit(["src/main.rs"]) {
        Err(Error::OutsideFence { path, actor, fence }) => {
            assert_eq!(path, root.join("src/main.rs"));
            assert_eq!(actor, "a");
            assert_eq!(fence, vec![root.join("src/parser")]);
        }
        other => panic!("expected OutsideFence, got {other:?}"),
    }
    assert!(a.try_admit([Target::file("src/main.rs").shared()]).is_ok());
    assert!(matches!(
        a.fence(["docs/"]),
        Err(Error::OutsideFence { .. })
    ));
    assert!(a.fence(["src/parser/sub/"]).is_ok());
}

#[test]
fn a_fenced_grant_is_acquired_all_or_nothing_at_creation() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let _r = a.try_admit(["docs/b.md"]).unwrap();
    let before = s.dump().holds.len();
    let refused = busy(s.actor("b", Grant::fenced(&root, ["src/", "docs/b.md"])));
    assert_eq!(refused.holder, "a");
    assert_eq!(
        s.dump().holds.len(),
        before,
        "no part of the fence was taken"
    );
    assert!(s.dump().actors.iter().all(|actor| actor.name != "b"));
    assert!(a.try_admit(["src/x.rs"]).is_ok());
}

#[test]
fn children_of_fenced_actors_are_fenced_inside_or_read_only() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::fenced(&root, ["src/"])).unwrap();
    assert!(
        lead.child("inside", Grant::fenced(&root, ["src/a/"]))
            .is_ok()
    );
    assert!(matches!(
        lead.child("wider", Grant::fenced(&root, ["docs/"])),
        Err(Error::OutsideFence { .. })
    ));
    assert!(matches!(
        lead.child("optimistic", Grant::workspace(&root)),
        Err(Error::OutsideFence { .. })
    ));
    assert!(lead.child("reader", Grant::read_only(&root)).is_ok());
}

#[test]
fn read_only_actors_take_shared_holds_only() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let reader = lead.child("reader", Grant::read_only(&root)).unwrap();
    assert!(matches!(
        reader.try_admit(["a.rs"]),
        Err(Error::ReadOnly { .. })
    ));
    assert!(reader.try_admit([Target::file("a.rs").shared()]).is_ok());
    assert!(matches!(
        reader.child("writer", Grant::workspace(&root)),
        Err(Error::ReadOnly { .. })
    ));
    assert!(reader.child("reader2", Grant::read_only(&root)).is_ok());
}

#[test]
fn read_roots_are_shared_only() {
    let (_dir, base) = workspace();
    std::fs::create_dir_all(base.join("ws")).unwrap();
    std::fs::create_dir_all(base.join("refs")).unwrap();
    let s = sched();
    let a = s
        .actor(
            "a",
            Grant::workspace(base.join("ws")).read_root(base.join("refs")),
        )
        .unwrap();
    assert!(
        a.try_admit([Target::file(base.join("refs/doc.md")).shared()])
            .is_ok()
    );
    assert!(matches!(
        a.try_admit([base.join("refs/doc.md")]),
        Err(Error::Policy { .. })
    ));
    assert!(matches!(
        a.try_admit([base.join("elsewhere")]),
        Err(Error::OutsideGrant { .. })
    ));
}

#[test]
fn workspace_target_is_the_whole_writable_scope() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let other = s.actor("other", Grant::workspace(&root)).unwrap();
    let shell = lead.try_admit([Target::workspace()]).unwrap();
    assert!(
        other.try_admit([".env"]).is_err(),
        "a shell covers every path"
    );
    drop(shell);
    let fenced = lead
        .child("fenced", Grant::fenced(&root, ["src/"]))
        .unwrap();
    let _shell = fenced.try_admit([Target::workspace()]).unwrap();
    let dump = s.dump();
    let call = dump
        .holds
        .iter()
        .find(|h| h.kind == HoldKind::Call)
        .unwrap();
    assert_eq!(call.paths.len(), 1);
    assert_eq!(call.paths[0].path, root.join("src"));
    assert!(call.paths[0].tree);
}

#[test]
fn dropping_an_actor_releases_its_fences_but_not_its_calls_or_children() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let parent = lead
        .child("parent", Grant::fenced(&root, ["src/"]))
        .unwrap();
    let child = parent
        .child("child", Grant::fenced(&root, ["src/a/"]))
        .unwrap();
    let extra = parent.fence(["src/b/"]).unwrap();
    let call = parent.try_admit(["src/c.rs"]).unwrap();
    drop(parent);
    let dump = s.dump();
    assert!(
        dump.holds
            .iter()
            .all(|h| h.actor != "parent" || h.kind == HoldKind::Call)
    );
    assert_eq!(
        dump.holds.iter().filter(|h| h.actor == "parent").count(),
        1,
        "the call stays"
    );
    assert!(
        dump.holds.iter().any(|h| h.actor == "child"),
        "the child's fence stays"
    );
    assert!(dump.actors.iter().any(|a| a.name == "child"));
    // Lineage survives the middle actor: the child's own calls still pass its fence.
    assert!(child.try_admit(["src/a/x.rs"]).is_ok());
    assert!(
        lead.try_admit(["src/b/x.rs"]).is_ok(),
        "the extra fence is gone"
    );
    drop(extra); // dropping a released guard is harmless
    drop(call);
    drop(child);
    assert!(s.dump().is_idle());
}

// ---------------------------------------------------------------- §4 admission

#[test]
fn all_or_nothing_leaves_nothing_behind() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let held = a.try_admit(["b.rs"]).unwrap();
    let refused = busy(b.try_admit(["a.rs", "b.rs", "c.rs"]));
    assert_eq!(refused.path, root.join("b.rs"));
    assert_eq!(s.dump().holds.len(), 1, "none of a.rs, c.rs was taken");
    assert!(a.try_admit(["a.rs", "c.rs"]).is_ok());
    drop(held);
    assert!(b.try_admit(["a.rs", "b.rs", "c.rs"]).is_ok());
}

#[test]
fn busy_names_the_holder_and_reads_well() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let parser = lead
        .child("parser", Grant::fenced(&root, ["src/parser/"]))
        .unwrap();
    let refused = busy(lead.try_admit(["src/parser/lex.rs"]));
    assert_eq!(refused.holder, "parser");
    assert_eq!(refused.kind, HoldKind::Fence);
    assert_eq!(refused.path, root.join("src/parser/lex.rs"));
    let text = Error::Busy(refused).to_string();
    assert!(
        text.starts_with("src/parser/lex.rs is fenced for writing by 'parser'"),
        "{text}"
    );
    assert!(
        text.contains("retry later or choose another file"),
        "{text}"
    );
    let _call = parser
        .request(["src/parser/lex.rs"])
        .label("write_file")
        .try_admit()
        .unwrap();
    let sibling = lead.child("docs", Grant::workspace(&root)).unwrap();
    let text = Error::Busy(busy(
        sibling.try_admit([Target::file("src/parser/lex.rs").shared()]),
    ))
    .to_string();
    assert!(
        text.starts_with("src/parser/lex.rs is being written by 'parser' (write_file, for "),
        "{text}"
    );
}

#[tokio::test]
async fn a_waiter_is_admitted_when_the_holder_releases() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let held = a.try_admit(["x.rs"]).unwrap();
    let waiter = tokio::spawn(b.admit(["x.rs", "y.rs"]));
    wait_for_waiters(&s, 1).await;
    drop(held);
    let reservation = waiter.await.unwrap().unwrap();
    assert_eq!(reservation.paths().len(), 2);
    assert_eq!(s.dump().counters.waited, 1);
}

/// Yields until the dump shows `n` waiters (bounded, no sleeps).
async fn wait_for_waiters(s: &Scheduler, n: usize) {
    for _ in 0..100_000 {
        if s.dump().waiters.len() == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never saw {n} waiters: {}", s.dump());
}

#[test]
fn try_admit_cannot_jump_a_queued_waiter() {
    let (_dir, root) = workspace();
    let s = sched();
    let reader1 = s.actor("reader1", Grant::workspace(&root)).unwrap();
    let writer = s.actor("writer", Grant::workspace(&root)).unwrap();
    let reader2 = s.actor("reader2", Grant::workspace(&root)).unwrap();
    let read = reader1.try_admit([Target::file("x.rs").shared()]).unwrap();
    let mut write = pin!(writer.admit(["x.rs"]));
    assert!(poll_once(write.as_mut()).is_pending());
    // A second reader is compatible with the first but not with the queued writer.
    let refused = busy(reader2.try_admit([Target::file("x.rs").shared()]));
    assert!(refused.queued);
    assert_eq!(refused.holder, "writer");
    assert!(
        Error::Busy(refused)
            .to_string()
            .contains("is queued to be written by 'writer'")
    );
    // A fence is judged the same way.
    assert!(reader2.fence([Target::file("x.rs").shared()]).is_err());
    drop(read);
    assert!(matches!(poll_once(write.as_mut()), Poll::Ready(Ok(_))));
}

#[test]
fn disjoint_requests_pass_a_waiter() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let c = s.actor("c", Grant::workspace(&root)).unwrap();
    let _held = a.try_admit(["x.rs"]).unwrap();
    let mut waiting = pin!(b.admit(["x.rs", "y.rs"]));
    assert!(poll_once(waiting.as_mut()).is_pending());
    assert!(c.try_admit(["z.rs"]).is_ok(), "no head-of-line blocking");
    assert!(
        c.try_admit(["y.rs"]).is_err(),
        "but y.rs is promised to the waiter"
    );
}

#[test]
fn cancelling_a_waiter_leaves_nothing_and_wakes_those_behind() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let c = s.actor("c", Grant::workspace(&root)).unwrap();
    let _held = a.try_admit(["x.rs"]).unwrap();
    let mut first = Box::pin(b.admit(["x.rs", "y.rs"]));
    assert!(poll_once(first.as_mut()).is_pending());
    // c wants only y.rs: soft-blocked behind b's queued request.
    let mut second = pin!(c.admit(["y.rs"]));
    assert!(poll_once(second.as_mut()).is_pending());
    assert_eq!(s.dump().waiters.len(), 2);
    drop(first);
    s.assert_invariants();
    assert!(
        matches!(poll_once(second.as_mut()), Poll::Ready(Ok(_))),
        "woken once b's request left"
    );
    assert_eq!(s.dump().waiters.len(), 0);
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

#[tokio::test]
async fn admit_timeout_gives_up_cleanly() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _held = a.try_admit(["x.rs"]).unwrap();
    match b.admit_timeout(["x.rs"], Duration::from_millis(20)).await {
        Err(Error::Timeout { paths, waited }) => {
            assert_eq!(paths, vec![root.join("x.rs")]);
            assert!(waited >= Duration::from_millis(20));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    let dump = s.dump();
    assert_eq!(dump.waiters.len(), 0);
    assert_eq!(dump.counters.timed_out, 1);
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
fn deadlock_between_fence_holders_is_refused_with_the_cycle() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let a = lead.child("alpha", Grant::workspace(&root)).unwrap();
    let b = lead.child("beta", Grant::workspace(&root)).unwrap();
    let _fa = a.fence(["a/"]).unwrap();
    let _fb = b.fence(["b/"]).unwrap();
    let mut a_waits = pin!(a.fence_wait(["b/x"]));
    assert!(poll_once(a_waits.as_mut()).is_pending());
    let mut b_waits = pin!(b.admit(["a/y"]));
    match poll_once(b_waits.as_mut()) {
        Poll::Ready(Err(Error::Deadlock { cycle })) => {
            assert_eq!(cycle, vec!["beta".to_string(), "alpha".to_string()]);
            let text = Error::Deadlock { cycle }.to_string();
            assert!(text.contains("'beta' -> 'alpha' -> 'beta'"), "{text}");
        }
        other => panic!("expected Deadlock, got {other:?}"),
    }
    assert_eq!(s.dump().counters.deadlocks, 1);
    assert_eq!(
        s.dump().waiters.len(),
        1,
        "the refused request did not queue"
    );
}

#[test]
fn soft_edges_close_cycles_too() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let e = s.actor("e", Grant::workspace(&root)).unwrap();
    let c = s.actor("c", Grant::workspace(&root)).unwrap();
    let _fa = a.fence(["a/"]).unwrap();
    let _fe = e.fence(["e/"]).unwrap();
    let _cx = c.try_admit(["x.rs"]).unwrap();
    // b waits on a's fence (hard edge b -> a) for a/ and x.rs.
    let mut b_waits = pin!(b.admit(["a/f", "x.rs"]));
    assert!(poll_once(b_waits.as_mut()).is_pending());
    // a waits on e's fence (hard edge a -> e).
    let mut a_waits = pin!(a.admit(["e/g"]));
    assert!(poll_once(a_waits.as_mut()).is_pending());
    // e now wants x.rs: b's earlier request is blocked by a fence that does
    // not cover e, so e queues behind it (soft edge e -> b): e -> b -> a -> e.
    let mut e_waits = pin!(e.admit(["x.rs"]));
    assert!(matches!(
        poll_once(e_waits.as_mut()),
        Poll::Ready(Err(Error::Deadlock { .. }))
    ));
}

/// Precedence of a fence's owner (SPEC §4). This replaces the old
/// expectation that the owner's own request queues behind a waiter its
/// fence blocks (soft edge a -> b, refused as a deadlock): that waiter can
/// only be granted once the fence goes, so it blocks neither the owner nor
/// its children, and gives them no edge.
#[test]
fn a_fence_owner_and_its_children_pass_a_waiter_their_fence_blocks() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let sib = s.actor("sib", Grant::workspace(&root)).unwrap();
    let other = s.actor("other", Grant::workspace(&root)).unwrap();
    let fence = lead.fence(["src/"]).unwrap();
    let kid = lead.child("kid", Grant::workspace(&root)).unwrap();
    let mut sib_waits = pin!(sib.admit(["src/a.rs", "y.rs"]));
    assert!(poll_once(sib_waits.as_mut()).is_pending());
    // The owner and its child are not locked out of their own fence.
    drop(
        lead.try_admit(["src/a.rs"])
            .expect("the owner passes the waiter"),
    );
    drop(
        kid.try_admit(["src/a.rs"])
            .expect("a child passes the waiter"),
    );
    let mut lead_waits = pin!(lead.admit(["src/a.rs"]));
    let Poll::Ready(Ok(r)) = poll_once(lead_waits.as_mut()) else {
        panic!("the owner's admit must be granted, not refused or queued");
    };
    drop(r);
    let mut kid_waits = pin!(kid.admit(["src/a.rs"]));
    let Poll::Ready(Ok(r)) = poll_once(kid_waits.as_mut()) else {
        panic!("the child's admit must be granted, not queued forever");
    };
    // Outside the fence's line, fairness is unchanged: y.rs is free, but
    // sib asked first.
    let refused = busy(other.try_admit(["y.rs"]));
    assert!(refused.queued, "{refused:?}");
    assert_eq!(refused.holder, "sib");
    assert_eq!(s.dump().counters.deadlocks, 0);
    // Once the fence and the child's call go, sib is granted.
    drop(r);
    drop(fence);
    assert!(matches!(poll_once(sib_waits.as_mut()), Poll::Ready(Ok(_))));
    s.assert_invariants();
}

/// A fence that a child takes by precedence is in the passed waiter's way:
/// when the child itself waits on that waiter, the grant would close a
/// cycle and is refused.
#[test]
fn a_fence_taken_by_precedence_may_not_close_a_cycle() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let sib = s.actor("sib", Grant::workspace(&root)).unwrap();
    let _fl = lead.fence(["src/"]).unwrap();
    let _fs = sib.fence(["docs/"]).unwrap();
    let kid = lead.child("kid", Grant::workspace(&root)).unwrap();
    // sib waits on lead's fence; kid waits on sib's.
    let mut sib_waits = pin!(sib.admit(["src/a.rs"]));
    assert!(poll_once(sib_waits.as_mut()).is_pending());
    let mut kid_waits = Box::pin(kid.admit(["docs/d.md"]));
    assert!(poll_once(kid_waits.as_mut()).is_pending());
    match kid.fence(["src/a.rs"]) {
        Err(Error::Deadlock { cycle }) => assert_eq!(cycle, ["kid", "sib"]),
        other => panic!("expected Deadlock, got {other:?}"),
    }
    drop(kid_waits);
    assert!(kid.fence(["src/a.rs"]).is_ok());
}

/// The owner's precedence passes only a waiter its fence blocks: a shared
/// call queued behind that waiter passes through the fence and still
/// blocks the owner's exclusive request, and queuing there would close the
/// cycle owner -> shared call -> waiter -> owner. The owner is refused with
/// `Deadlock` when it asks, never left waiting.
#[test]
fn a_fence_owner_behind_a_shared_call_behind_its_blocked_waiter_is_refused() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let sib = s.actor("sib", Grant::workspace(&root)).unwrap();
    let reader = s.actor("reader", Grant::workspace(&root)).unwrap();
    let _fence = lead.fence(["src/"]).unwrap();
    let mut sib_waits = pin!(sib.admit(["src/a.rs"]));
    assert!(poll_once(sib_waits.as_mut()).is_pending());
    let mut reader_waits = pin!(reader.admit([Target::from("src/a.rs").shared()]));
    assert!(poll_once(reader_waits.as_mut()).is_pending());
    let mut lead_waits = pin!(lead.admit(["src/a.rs"]));
    match poll_once(lead_waits.as_mut()) {
        Poll::Ready(Err(Error::Deadlock { cycle })) => {
            assert_eq!(cycle, ["lead", "reader", "sib"]);
        }
        other => panic!("the owner must be admitted or refused, got {other:?}"),
    }
    assert_eq!(s.dump().counters.deadlocks, 1);
    s.assert_invariants();
}

/// Releasing a fence ends the precedence it gave: a request of its owner
/// that passed a waiter the fence blocked queues behind that waiter again.
/// When that waiter still reaches the owner through others (here through
/// `t`'s fence, and `t` waiting on the owner's other fence), that closes a
/// cycle no new wait closed; the passing request is refused with
/// `Deadlock` then, instead of hanging with everyone on the cycle.
#[test]
fn a_cycle_closed_by_releasing_a_fence_refuses_a_waiting_request() {
    let (_dir, root) = workspace();
    let s = sched();
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let sib = s.actor("sib", Grant::workspace(&root)).unwrap();
    let t = s.actor("t", Grant::workspace(&root)).unwrap();
    let other = s.actor("other", Grant::workspace(&root)).unwrap();
    let src = lead.fence(["src/"]).unwrap();
    let _doc = lead.fence(["doc/"]).unwrap();
    let _lib = t.fence(["lib/"]).unwrap();
    let x = other.try_admit(["x.rs"]).unwrap();
    let mut t_waits = pin!(t.admit(["doc/d.md"]));
    assert!(poll_once(t_waits.as_mut()).is_pending());
    let mut sib_waits = pin!(sib.admit(["src/a.rs", "lib/b.rs"]));
    assert!(poll_once(sib_waits.as_mut()).is_pending());
    // lead passes sib inside src/ and waits only for x.rs.
    let mut lead_waits = pin!(lead.admit(["src/a.rs", "x.rs"]));
    assert!(poll_once(lead_waits.as_mut()).is_pending());
    assert_eq!(s.dump().counters.deadlocks, 0);
    drop(src);
    match poll_once(lead_waits.as_mut()) {
        Poll::Ready(Err(Error::Deadlock { mut cycle })) => {
            assert_eq!(cycle.first().map(String::as_str), Some("lead"));
            cycle.sort();
            assert_eq!(cycle, ["lead", "sib", "t"]);
        }
        other => panic!("expected Deadlock once src/ is gone, got {other:?}"),
    }
    assert_eq!(s.dump().counters.deadlocks, 1);
    s.assert_invariants();
    // The others still wait, each on a live fence.
    drop(x);
    assert!(poll_once(sib_waits.as_mut()).is_pending());
    assert!(poll_once(t_waits.as_mut()).is_pending());
}

#[test]
fn extend_is_judged_at_the_requests_own_priority() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let c = s.actor("c", Grant::workspace(&root)).unwrap();
    let _cz = c.try_admit(["z.rs"]).unwrap();
    // b waits at priority -1 for y.rs (and z.rs, held).
    let mut b_waits = pin!(b.request(["y.rs", "z.rs"]).priority(-1).admit());
    assert!(poll_once(b_waits.as_mut()).is_pending());
    // A priority -5 reservation may not widen past it...
    let mut low = a.request(["a.rs"]).priority(-5).try_admit().unwrap();
    let refused = busy(low.extend(["y.rs"]));
    assert!(refused.queued, "{refused:?}");
    let mut low_fence = a.request(["f/"]).priority(-5).fence().unwrap();
    busy(low_fence.extend(["y.rs"]));
    drop((low, low_fence));
    // ...while a priority 10 one goes ahead of a priority 0 waiter.
    let mut b0 = pin!(b.request(["w.rs", "z.rs"]).admit());
    assert!(poll_once(b0.as_mut()).is_pending());
    let mut high = a.request(["a.rs"]).priority(10).try_admit().unwrap();
    high.extend(["w.rs"])
        .expect("priority 10 is ahead of priority 0");
    let mut high_fence = a.request(["g/"]).priority(10).fence().unwrap();
    high_fence
        .extend(["y.rs"])
        .expect("priority 10 is ahead of priority -1");
    s.assert_invariants();
}

#[test]
fn calls_never_create_wait_edges() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _ra = a.try_admit(["x.rs"]).unwrap();
    let _rb = b.try_admit(["y.rs"]).unwrap();
    let mut a_waits = pin!(a.admit(["y.rs"]));
    assert!(poll_once(a_waits.as_mut()).is_pending());
    let mut b_waits = pin!(b.admit(["x.rs"]));
    assert!(
        poll_once(b_waits.as_mut()).is_pending(),
        "call holds create no edges"
    );
    assert!(s.dump().edges.is_empty());
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
fn reservation_extend_is_all_or_nothing() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _held = b.try_admit(["busy.rs"]).unwrap();
    let mut r = a.try_admit(["x.rs"]).unwrap();
    assert!(r.extend(["y.rs", "busy.rs"]).is_err());
    assert_eq!(r.paths(), vec![root.join("x.rs")]);
    r.extend(["y.rs"]).unwrap();
    assert_eq!(r.paths(), vec![root.join("x.rs"), root.join("y.rs")]);
}

// ---------------------------------------------------------------- §5 dump

#[test]
fn dump_shows_actors_holds_waiters_and_counters() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default().session("s-1"));
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let kid = lead
        .child("parser", Grant::fenced(&root, ["src/"]))
        .unwrap();
    let _call = kid
        .request(["src/lex.rs"])
        .label("write_file src/lex.rs")
        .try_admit()
        .unwrap();
    let mut waiting = pin!(lead.request(["src/lex.rs"]).priority(3).admit());
    assert!(poll_once(waiting.as_mut()).is_pending());
    let dump = s.dump();
    assert_eq!(dump.session, "s-1");
    assert_eq!(dump.actors.len(), 2);
    assert_eq!(dump.actors[1].parent, Some(dump.actors[0].id));
    assert_eq!(dump.holds.len(), 2);
    let call = &dump.holds[1];
    assert_eq!((call.actor.as_str(), call.kind), ("parser", HoldKind::Call));
    assert_eq!(call.label.as_deref(), Some("write_file src/lex.rs"));
    let waiter = &dump.waiters[0];
    assert_eq!(waiter.actor, "lead");
    assert_eq!(waiter.priority, 3);
    assert_eq!(
        waiter.blocked_by.holds,
        vec![dump.holds[0].id, dump.holds[1].id]
    );
    assert_eq!(
        waiter.cause,
        Some(writ::WaitCause::Path {
            path: root.join("src/lex.rs"),
            holder: "parser".into()
        })
    );
    assert_eq!(dump.edges.len(), 1, "lead waits on parser's fence");
    assert!(dump.edges[0].hard);
    assert_eq!(dump.counters.admitted, 3, "two actors and one call");
    assert_eq!(dump.counters.waited, 1);

    let json = serde_json::to_value(&dump).unwrap();
    assert_eq!(json["holds"][1]["actor"], "parser");
    assert_eq!(json["holds"][1]["kind"], "call");
    assert_eq!(json["holds"][1]["paths"][0]["mode"], "exclusive");
    assert_eq!(json["waiters"][0]["cause"]["cause"], "path");
    assert_eq!(json["counters"]["waited"], 1);

    let table = dump.to_string();
    for needle in [
        "actors (2):",
        "  parser",
        "holds (2):",
        "write_file src/lex.rs",
        "waiters (1):",
        "hold 1, hold 2",
        "waiting for 'parser' to release",
        "counters: admitted 3",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in\n{table}");
    }
    // The child is indented under its parent.
    let lead_line = table
        .lines()
        .find(|l| l.contains("lead ") && l.contains("workspace"))
        .unwrap();
    let kid_line = table
        .lines()
        .find(|l| l.contains("parser") && l.contains("fenced"))
        .unwrap();
    let indent = |l: &str| l.len() - l.trim_start().len();
    assert!(indent(kid_line) > indent(lead_line), "{table}");
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

#[test]
fn detect_probes_the_root_file_system() {
    let (_dir, root) = workspace();
    std::fs::write(root.join("Probe.txt"), "x").unwrap();
    // Linux temp file systems are case-sensitive: the swapped spelling is
    // another file, so Detect behaves as Sensitive there.
    let insensitive_fs = std::fs::metadata(root.join("pROBE.TXT")).is_ok();
    let s = Scheduler::new(Config::default().case(writ::CaseMode::Detect));
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let _r = a.try_admit(["Lexer.rs"]).unwrap();
    assert_eq!(b.try_admit(["lexer.rs"]).is_err(), insensitive_fs);
}

#[test]
fn parallel_calls_of_one_actor_are_not_a_deadlock() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let c = s.actor("c", Grant::workspace(&root)).unwrap();
    let held = c.try_admit(["x.rs"]).unwrap();
    // a's first call waits for c; b's call queues behind it; a's second call
    // queues behind b's. Folded onto actors that is a -> b -> a, but each
    // call is granted in turn once c releases: no deadlock.
    let mut a1 = pin!(a.admit(["x.rs"]));
    assert!(poll_once(a1.as_mut()).is_pending());
    let mut b1 = pin!(b.admit(["x.rs", "y.rs"]));
    assert!(poll_once(b1.as_mut()).is_pending());
    let mut a2 = pin!(a.admit(["y.rs"]));
    assert!(
        poll_once(a2.as_mut()).is_pending(),
        "queued, not refused as a deadlock"
    );
    drop(held);
    let Poll::Ready(Ok(r1)) = poll_once(a1.as_mut()) else {
        panic!("a's first call")
    };
    drop(r1);
    let Poll::Ready(Ok(r2)) = poll_once(b1.as_mut()) else {
        panic!("b's call")
    };
    drop(r2);
    assert!(matches!(poll_once(a2.as_mut()), Poll::Ready(Ok(_))));
    assert_eq!(s.dump().counters.deadlocks, 0);
}

#[test]
fn a_fence_granted_past_waiters_may_not_close_a_cycle() {
    let (_dir, root) = workspace();
    let s = sched();
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    let c = s.actor("c", Grant::workspace(&root)).unwrap();
    let _fb = b.fence(["b/"]).unwrap();
    let _cw = c.try_admit(["w.rs"]).unwrap();
    // a waits on b's fence; b waits on c's call.
    let mut a_waits = Box::pin(a.admit(["b/x.rs"]));
    assert!(poll_once(a_waits.as_mut()).is_pending());
    let mut b_waits = pin!(b.admit(["z.rs", "w.rs"]));
    assert!(poll_once(b_waits.as_mut()).is_pending());
    // A higher-priority fence of a on z.rs would be granted past b's
    // request, and then b would wait on a while a waits on b.
    match a.request(["z.rs"]).priority(1).fence() {
        Err(Error::Deadlock { cycle }) => assert_eq!(cycle, ["a", "b"]),
        other => panic!("expected Deadlock, got {other:?}"),
    }
    // Without the cycle (a not waiting), the same fence is fine.
    drop(a_waits);
    let fence = a.request(["z.rs"]).priority(1).fence();
    assert!(fence.is_ok(), "{fence:?}");
}
