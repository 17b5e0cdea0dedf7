//! The read-before-write version gate (SPEC §6): one test per rule.

use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use writ::{Actor, Config, Durability, Error, Grant, ReadMark, Scheduler};

fn config() -> Config {
    Config::default().durability(Durability::Process)
}

struct Env {
    dir: tempfile::TempDir,
    sched: Scheduler,
}

impl Env {
    fn new(config: Config) -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
            sched: Scheduler::new(config),
        }
    }
    fn actor(&self, name: &str) -> Actor {
        self.sched
            .actor(name, Grant::workspace(self.dir.path()))
            .unwrap()
    }
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
    fn put(&self, rel: &str, content: &str) {
        std::fs::write(self.path(rel), content).unwrap();
    }
    fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }
}

fn is_not_read(r: writ::Result<writ::Receipt>) -> bool {
    matches!(r, Err(Error::NotRead { .. }))
}

fn stale_writer(r: writ::Result<writ::Receipt>) -> Option<String> {
    match r {
        Err(Error::Stale { writer, .. }) => writer,
        other => panic!("expected Stale, got {other:?}"),
    }
}

#[test]
fn creating_a_new_file_passes_without_a_read() {
    let env = Env::new(config());
    let a = env.actor("a");
    let receipt = a.files().write("src/new.rs", "fn main() {}\n").unwrap();
    assert_eq!(receipt.before, None);
    assert_eq!(env.get("src/new.rs"), "fn main() {}\n");
    // Appending creates too.
    a.files().append("log.md", "one\n").unwrap();
    assert_eq!(env.get("log.md"), "one\n");
}

#[test]
fn changing_an_unread_file_is_refused_and_leaves_it_alone() {
    let env = Env::new(config());
    env.put("a.txt", "keep me\n");
    let a = env.actor("a");
    let files = a.files();
    assert!(is_not_read(files.write("a.txt", "x")));
    assert!(is_not_read(files.append("a.txt", "x")));
    assert!(is_not_read(files.replace("a.txt", "keep", "lose")));
    assert!(is_not_read(files.delete("a.txt")));
    assert!(is_not_read(files.rename("a.txt", "b.txt")));
    assert_eq!(env.get("a.txt"), "keep me\n");
    let message = files.write("a.txt", "x").unwrap_err().to_string();
    assert!(message.contains("read it first"), "{message}");
    assert!(message.contains("tail"), "{message}");
}

#[test]
fn a_fresh_mark_passes() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    let (bytes, mark) = a.files().read("a.txt").unwrap();
    assert_eq!(bytes, b"v1\n");
    assert_eq!(mark.len, 3);
    assert_eq!(
        mark.path,
        env.dir.path().canonicalize().unwrap().join("a.txt")
    );
    let receipt = a.files().write("a.txt", "v2\n").unwrap();
    assert_eq!(receipt.before.as_deref(), Some(mark.sha256.as_str()));
    assert_eq!(env.get("a.txt"), "v2\n");
}

#[test]
fn an_outside_change_makes_the_mark_stale_with_no_writer() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    a.files().read("a.txt").unwrap();
    env.put("a.txt", "edited by a person\n");
    assert_eq!(stale_writer(a.files().write("a.txt", "v2\n")), None);
    assert_eq!(stale_writer(a.files().append("a.txt", "v2\n")), None);
    assert_eq!(env.get("a.txt"), "edited by a person\n");
    let message = a.files().write("a.txt", "x").unwrap_err().to_string();
    assert!(message.contains("changed outside writ"), "{message}");
    assert!(message.contains("read it again"), "{message}");
}

#[test]
fn another_actors_write_is_named_in_stale() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("alice");
    let b = env.actor("bob");
    a.files().read("a.txt").unwrap();
    b.files().read("a.txt").unwrap();
    b.files().write("a.txt", "bob's\n").unwrap();
    match a.files().replace("a.txt", "v1", "alice's") {
        Err(Error::Stale { writer, ago, path }) => {
            assert_eq!(writer.as_deref(), Some("bob"));
            assert!(ago.is_some());
            assert!(path.ends_with("a.txt"));
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    assert_eq!(env.get("a.txt"), "bob's\n");
    // Deletes and renames are gated the same way.
    assert_eq!(
        stale_writer(a.files().delete("a.txt")).as_deref(),
        Some("bob")
    );
    assert_eq!(
        stale_writer(a.files().rename("a.txt", "b.txt")).as_deref(),
        Some("bob")
    );
}

#[test]
fn an_earlier_writer_is_never_named() {
    let env = Env::new(config());
    env.put("a.txt", "v0\n");
    let a = env.actor("alice");
    let b = env.actor("bob");
    // Bob writes, then a person changes the file: Alice's stale mark was
    // made stale by the person, not by Bob.
    a.files().read("a.txt").unwrap();
    b.files().read("a.txt").unwrap();
    b.files().write("a.txt", "bob\n").unwrap();
    env.put("a.txt", "person\n");
    assert_eq!(stale_writer(a.files().write("a.txt", "x")), None);

    // Bob's content comes back by an outside revert AFTER Alice read: the
    // content equals Bob's, but Bob's write is older than Alice's mark.
    b.files().read("a.txt").unwrap();
    b.files().write("a.txt", "bob again\n").unwrap();
    env.put("a.txt", "person again\n");
    a.files().read("a.txt").unwrap();
    env.put("a.txt", "bob again\n");
    assert_eq!(stale_writer(a.files().write("a.txt", "x")), None);
    assert_eq!(env.get("a.txt"), "bob again\n");
}

#[test]
fn the_newest_mark_wins() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    let (_, old) = a.files().read("a.txt").unwrap();
    env.put("a.txt", "v2\n");
    let (_, new) = a.files().read("a.txt").unwrap();
    assert_ne!(old.sha256, new.sha256);
    // The newest mark stored replaces the older one, whichever it is.
    a.add_mark(old.clone()).unwrap();
    assert!(matches!(
        a.files().write("a.txt", "x"),
        Err(Error::Stale { .. })
    ));
    a.add_mark(new).unwrap();
    a.files().write("a.txt", "v3\n").unwrap();
    assert_eq!(a.marks().len(), 1);
}

#[test]
fn a_forgotten_mark_is_refused() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    env.put("b.txt", "v1\n");
    let a = env.actor("a");
    a.files().read("a.txt").unwrap();
    a.files().read("b.txt").unwrap();
    assert!(a.forget_mark("a.txt"));
    assert!(!a.forget_mark("a.txt"), "already forgotten");
    assert!(is_not_read(a.files().write("a.txt", "x")));
    a.forget_marks();
    assert!(is_not_read(a.files().write("b.txt", "x")));
    assert!(a.marks().is_empty());
    assert_eq!(env.get("a.txt"), "v1\n");
}

#[test]
fn marks_are_per_actor() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    let b = env.actor("b");
    a.files().read("a.txt").unwrap();
    assert!(is_not_read(b.files().write("a.txt", "x")));
}

#[test]
fn a_ranged_read_marks_the_whole_file() {
    let env = Env::new(config());
    let body: String = (0..100).map(|i| format!("line {i}\n")).collect();
    env.put("log.md", &body);
    let a = env.actor("a");
    let (tail, mark) = a.files().read_range("log.md", 98..).unwrap();
    assert_eq!(tail, b"line 98\nline 99\n");
    assert_eq!(mark.len, body.len() as u64);
    let (_, full) = a.files().read("log.md").unwrap();
    assert_eq!(mark.sha256, full.sha256);
    a.forget_marks();
    a.files().read_range("log.md", 99..100).unwrap();
    a.files().append("log.md", "line 100\n").unwrap();
    assert!(env.get("log.md").ends_with("line 99\nline 100\n"));
}

#[test]
fn consecutive_writes_need_rereads() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    a.files().read("a.txt").unwrap();
    a.files().write("a.txt", "v2\n").unwrap();
    // The write did not refresh the mark: it is stale (and names the writer).
    assert_eq!(
        stale_writer(a.files().write("a.txt", "v3\n")).as_deref(),
        Some("a")
    );
    a.files().read("a.txt").unwrap();
    a.files().write("a.txt", "v3\n").unwrap();
    assert_eq!(env.get("a.txt"), "v3\n");
    // Creating a file does not create a mark either.
    a.files().write("new.txt", "1").unwrap();
    assert!(is_not_read(a.files().write("new.txt", "2")));
}

#[test]
fn refresh_mark_on_write_lets_edits_chain() {
    let env = Env::new(config().refresh_mark_on_write(true));
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    a.files().read("a.txt").unwrap();
    a.files().write("a.txt", "v2\n").unwrap();
    a.files().append("a.txt", "v3\n").unwrap();
    a.files().write("new.txt", "1").unwrap();
    a.files().write("new.txt", "2").unwrap();
    assert_eq!(env.get("a.txt"), "v2\nv3\n");
    // Another actor's write still makes the mark stale.
    let b = env.actor("b");
    b.files().read("a.txt").unwrap();
    b.files().write("a.txt", "b\n").unwrap();
    assert_eq!(
        stale_writer(a.files().write("a.txt", "x")).as_deref(),
        Some("b")
    );
}

fn parallel_same_actor_writes(config: Config) {
    let env = Env::new(config);
    let a = env.actor("a");
    for round in 0..40 {
        env.put("a.txt", "base\n");
        a.files().read("a.txt").unwrap();
        let barrier = Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|t| {
                    let (a, barrier) = (&a, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        a.files().write("a.txt", format!("thread {t}\n"))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let landed: Vec<usize> = (0..2).filter(|&t| results[t].is_ok()).collect();
        assert_eq!(landed.len(), 1, "round {round}: {results:?}");
        let loser = &results[1 - landed[0]];
        assert!(
            matches!(loser, Err(Error::Busy(_)) | Err(Error::Stale { .. })),
            "{loser:?}"
        );
        assert_eq!(env.get("a.txt"), format!("thread {}\n", landed[0]));
    }
}

#[test]
fn two_parallel_writes_of_one_actor_never_both_land() {
    parallel_same_actor_writes(config());
}

#[test]
fn two_parallel_waiting_writes_of_one_actor_never_both_land() {
    parallel_same_actor_writes(config().file_op_wait(Duration::from_secs(10)));
}

#[test]
fn marks_round_trip_through_serde_and_add_mark() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    let (_, mark) = a.files().read("a.txt").unwrap();
    let json = serde_json::to_string(&mark).unwrap();
    let back: ReadMark = serde_json::from_str(&json).unwrap();
    assert_eq!(back, mark);
    a.forget_marks();
    assert!(is_not_read(a.files().write("a.txt", "x")));
    a.add_mark(back).unwrap();
    a.files().write("a.txt", "v2\n").unwrap();

    // A mark kept by an orchestrator can be handed to another actor.
    let (_, mark) = a.files().read("a.txt").unwrap();
    let b = env.actor("b");
    b.add_mark(mark).unwrap();
    b.files().write("a.txt", "v3\n").unwrap();

    // A mark for a path outside the grant is refused.
    let outside = ReadMark::new(
        Path::new("/etc/hostname"),
        "0".repeat(64),
        0,
        writ::View::Whole,
    );
    assert!(matches!(
        b.add_mark(outside),
        Err(Error::OutsideGrant { .. })
    ));
}

#[test]
fn delete_and_rename_need_current_marks_at_both_ends() {
    let env = Env::new(config());
    env.put("src.txt", "source\n");
    env.put("dst.txt", "destination\n");
    let a = env.actor("a");
    a.files().read("src.txt").unwrap();
    // The destination exists and was not read.
    assert!(is_not_read(a.files().rename("src.txt", "dst.txt")));
    a.files().read("dst.txt").unwrap();
    env.put("dst.txt", "changed\n");
    assert_eq!(stale_writer(a.files().rename("src.txt", "dst.txt")), None);
    a.files().read("dst.txt").unwrap();
    let receipt = a.files().rename("src.txt", "dst.txt").unwrap();
    assert!(receipt.before.is_some() && receipt.after.is_some());
    assert_eq!(env.get("dst.txt"), "source\n");
    assert!(!env.path("src.txt").exists());
    // The mark of the old destination content is stale now (the rename
    // wrote it); a rename onto a missing destination needs only the source's.
    assert_eq!(
        stale_writer(a.files().rename("dst.txt", "other.txt")).as_deref(),
        Some("a")
    );
    a.files().read("dst.txt").unwrap();
    a.files().rename("dst.txt", "other.txt").unwrap();
    // Delete. The rename did not carry a mark to the new name.
    assert!(is_not_read(a.files().delete("other.txt")));
    a.files().read("other.txt").unwrap();
    let receipt = a.files().delete("other.txt").unwrap();
    assert_eq!(receipt.after, None);
    assert!(!env.path("other.txt").exists());
}

#[test]
fn reading_a_missing_file_is_not_found() {
    let env = Env::new(config());
    let a = env.actor("a");
    assert!(matches!(
        a.files().read("nope.txt"),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        a.files().read("no/dir/x"),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        a.files().replace("nope.txt", "a", "b"),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        a.files().delete("nope.txt"),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        a.files().rename("nope.txt", "b"),
        Err(Error::NotFound { .. })
    ));
}

/// The racy-git rule end to end: a same-size edit in the same timestamp tick
/// with its mtime put back must still be seen.
#[test]
fn a_same_size_edit_with_restored_mtime_is_still_stale() {
    let env = Env::new(config());
    env.put("a.txt", "AAAA\n");
    let a = env.actor("a");
    for round in 0..20 {
        let (_, _mark) = a.files().read("a.txt").unwrap();
        // Hash it again through the gate so the cache has an entry.
        a.files().verify("a.txt").unwrap();
        let before = std::fs::metadata(env.path("a.txt")).unwrap();
        let mtime = before.modified().unwrap();
        std::fs::write(
            env.path("a.txt"),
            if round % 2 == 0 { "BBBB\n" } else { "AAAA\n" },
        )
        .unwrap();
        let file = std::fs::File::options()
            .write(true)
            .open(env.path("a.txt"))
            .unwrap();
        file.set_times(std::fs::FileTimes::new().set_modified(mtime))
            .unwrap();
        drop(file);
        let after = std::fs::metadata(env.path("a.txt")).unwrap();
        assert_eq!(after.modified().unwrap(), mtime);
        assert_eq!(after.len(), before.len());
        assert!(matches!(
            a.files().verify("a.txt"),
            Err(Error::Stale { .. })
        ));
        assert!(matches!(
            a.files().write("a.txt", "CCCC\n"),
            Err(Error::Stale { .. })
        ));
    }
}

#[test]
fn verify_reports_the_current_mark() {
    let env = Env::new(config());
    env.put("a.txt", "v1\n");
    let a = env.actor("a");
    assert!(matches!(
        a.files().verify("a.txt"),
        Err(Error::NotRead { .. })
    ));
    let (_, mark) = a.files().read("a.txt").unwrap();
    assert_eq!(a.files().verify("a.txt").unwrap(), mark);
    assert_eq!(
        a.files().without_hash_cache().verify("a.txt").unwrap(),
        mark
    );
}

// ---- what the agent saw bounds what it may replace whole (SPEC §6) ----

fn partial(r: writ::Result<writ::Receipt>) -> String {
    match r {
        Err(e @ Error::PartialView { .. }) => e.to_string(),
        other => panic!("expected PartialView, got {other:?}"),
    }
}

#[test]
fn a_whole_file_write_delete_or_move_needs_a_whole_view() {
    let env = Env::new(config());
    env.put("a.txt", "1\n2\n3\n4\n5\n");
    let a = env.actor("a");
    let (shown, mark) = a.files().read_range("a.txt", 0..2).unwrap();
    assert_eq!(shown, b"1\n2\n");
    assert_eq!(
        mark.view,
        writ::View::Lines {
            first: 1,
            last: 2,
            total: 5,
            cut: 0
        }
    );
    // What was shown plus a line, written whole, would drop lines 3-5.
    let refused = partial(a.files().write("a.txt", "1\n2\nnew\n"));
    assert!(refused.contains("lines 1-2 of 5"), "{refused}");
    assert!(refused.contains("from line 3"), "{refused}");
    partial(a.files().delete("a.txt"));
    partial(a.files().rename("a.txt", "b.txt"));
    assert_eq!(env.get("a.txt"), "1\n2\n3\n4\n5\n");
    assert!(!env.path("b.txt").exists());
    // Edits and appends name what they change: any view does.
    a.files().replace("a.txt", "2\n", "two\n").unwrap();
    a.files().read_range("a.txt", 4..).unwrap();
    a.files().append("a.txt", "6\n").unwrap();
    // Reading the rest of the same content makes the view whole.
    a.files().read_range("a.txt", 0..3).unwrap();
    partial(a.files().write("a.txt", "x\n"));
    let (_, mark) = a.files().read_range("a.txt", 3..).unwrap();
    assert_eq!(mark.view, writ::View::Whole);
    a.files().write("a.txt", "x\n").unwrap();
    // A range that is all of the file is a whole view at once.
    let (_, mark) = a.files().read_range("a.txt", 0..).unwrap();
    assert!(mark.view.is_whole());
    // A view of other content is not widened by an older one.
    a.files().read("a.txt").unwrap();
    a.files().write("a.txt", "p\nq\n").unwrap();
    a.files().read_range("a.txt", 1..).unwrap();
    partial(a.files().delete("a.txt"));
}

#[test]
fn a_tail_is_good_for_an_append_only_and_old_marks_read_as_whole() {
    let env = Env::new(config());
    env.put("log.md", "a\nb\n");
    let a = env.actor("a");
    let (_, mark) = a.files().read_for_append("log.md").unwrap();
    assert!(matches!(mark.view, writ::View::Tail { .. }));
    assert!(is_not_read(a.files().replace("log.md", "a", "A")));
    assert!(is_not_read(a.files().write("log.md", "")));
    // A mark kept before views existed: whole, or a tail.
    let sha = mark.sha256.clone();
    let path = env.path("log.md");
    let old = serde_json::json!({"path": path, "sha256": sha, "len": 4,
        "read_at": {"secs_since_epoch": 1, "nanos_since_epoch": 0}});
    let whole: ReadMark = serde_json::from_value(old.clone()).unwrap();
    assert!(whole.view.is_whole());
    let mut tail = old;
    tail["tail_only"] = true.into();
    let tail: ReadMark = serde_json::from_value(tail).unwrap();
    assert!(matches!(tail.view, writ::View::Tail { .. }));
    // ...and a tail is still written as `tail_only` for readers of old.
    let wire = serde_json::to_value(&tail).unwrap();
    assert_eq!(wire["tail_only"], true, "{wire}");
    assert_eq!(serde_json::from_value::<ReadMark>(wire).unwrap(), tail);
    a.add_mark(whole).unwrap();
    a.files().write("log.md", "c\n").unwrap();
}

// ---- a call resent after a lost answer is answered (SPEC §6) ----

#[test]
fn a_resent_append_or_edit_is_answered_with_its_receipt_and_writes_nothing() {
    let env = Env::new(config());
    env.put("log.md", "a\n");
    let a = env.actor("a");
    a.files().read("log.md").unwrap();
    let first = a.files().append("log.md", "b\n").unwrap();
    assert!(!first.repeat);
    let again = a.files().append("log.md", "b\n").unwrap();
    assert!(again.repeat, "{again:?}");
    assert_eq!(again.after, first.after);
    assert!(again.to_string().contains("repeat"), "{again}");
    assert_eq!(env.get("log.md"), "a\nb\n", "appended once");
    // Another append with the same mark is no resend: stale as ever.
    stale_writer(a.files().append("log.md", "c\n"));
    // A read makes a new mark without receipts: the same append again
    // is meant, and appends.
    a.files().read("log.md").unwrap();
    assert!(!a.files().append("log.md", "b\n").unwrap().repeat);
    assert_eq!(env.get("log.md"), "a\nb\nb\n");
    // Edits alike.
    a.files().read("log.md").unwrap();
    a.files().replace("log.md", "a\n", "A\n").unwrap();
    assert!(a.files().replace("log.md", "a\n", "A\n").unwrap().repeat);
    a.files().read("log.md").unwrap();
    a.files().replace_all("log.md", "b", "bb").unwrap();
    assert!(a.files().replace_all("log.md", "b", "bb").unwrap().repeat);
    assert_eq!(env.get("log.md"), "A\nbb\nbb\n");
    // Another actor's identical call is its own.
    let b = env.actor("b");
    b.files().read("log.md").unwrap();
    a.files().read("log.md").unwrap();
    a.files().append("log.md", "z\n").unwrap();
    assert!(b.files().append("log.md", "z\n").is_err());
}

#[test]
fn a_resent_anchored_append_is_answered_with_its_diff() {
    let history = tempfile::tempdir().unwrap();
    let env = Env::new(config().history_dir(history.path()));
    env.put("log.md", "a\n");
    let (a, b) = (env.actor("a"), env.actor("b"));
    a.files().read("log.md").unwrap();
    b.files().read("log.md").unwrap();
    b.files().append("log.md", "from b\n").unwrap();
    let first = a.files().append("log.md", "from a\n").unwrap();
    assert!(first.anchored.is_some());
    let again = a.files().append("log.md", "from a\n").unwrap();
    assert!(again.repeat);
    let anchored = again.anchored.expect("the first answer was anchored");
    assert!(anchored.diff.contains("+from b\n"), "{}", anchored.diff);
    assert_eq!(env.get("log.md"), "a\nfrom b\nfrom a\n");
    // Only the last 16 calls are kept.
    a.files().read("log.md").unwrap();
    for i in 0..17 {
        b.files().read("log.md").unwrap();
        b.files().append("log.md", format!("b{i}\n")).unwrap();
        a.files().append("log.md", format!("a{i}\n")).unwrap();
    }
    assert!(a.files().append("log.md", "a16\n").unwrap().repeat);
    assert!(!a.files().append("log.md", "a0\n").unwrap().repeat);
    assert_eq!(env.get("log.md").matches("a0\n").count(), 2);
}

// ---- `old` occurring twice, overlapping, is ambiguous (SPEC §6) ----

#[test]
fn an_old_text_that_overlaps_itself_twice_is_ambiguous() {
    let env = Env::new(config());
    env.put("f.txt", "A\nB\nA\nB\nA\n");
    let a = env.actor("a");
    a.files().read("f.txt").unwrap();
    match a.files().replace("f.txt", "A\nB\nA", "N") {
        Err(Error::AmbiguousMatch { count, .. }) => assert_eq!(count, 2),
        other => panic!("expected AmbiguousMatch, got {other:?}"),
    }
    assert_eq!(env.get("f.txt"), "A\nB\nA\nB\nA\n");
    // The same case, anchored: bob turns `Z` into `A`, and alice's edit
    // of `A B A` (once in what she read) must not land on bob's line.
    let history = tempfile::tempdir().unwrap();
    let env = Env::new(config().history_dir(history.path()));
    env.put("f.txt", "Z\nB\nA\nB\nA\nY\n");
    let (alice, bob) = (env.actor("alice"), env.actor("bob"));
    alice.files().read("f.txt").unwrap();
    bob.files().read("f.txt").unwrap();
    bob.files().replace("f.txt", "Z\n", "A\n").unwrap();
    let result = alice.files().replace("f.txt", "A\nB\nA\n", "N\n");
    assert_eq!(stale_writer(result).as_deref(), Some("bob"));
    assert_eq!(env.get("f.txt"), "A\nB\nA\nB\nA\nY\n");
}

// ---- the same rules through every surface: MCP (both tool sets), /rpc,
// in process and on etcd ----

#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[path = "common/mcp_http_client.rs"]
mod mcp_http_client;

#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
mod surfaces {
    use super::mcp_http_client::McpHttp;
    use std::path::Path;
    use std::time::Duration;

    /// 1,060 lines of 1,000 bytes: 1,060,000 bytes, more than one read
    /// shows (256 KiB).
    pub fn big() -> String {
        (0..1060)
            .map(|i| format!("{i:04}{}\n", "x".repeat(995)))
            .collect()
    }

    pub async fn agent(url: &str, token: &str, query: &str) -> McpHttp {
        let mut agent = McpHttp::new(&format!("{url}/mcp{query}"), token);
        agent.initialize("gate-test").await;
        agent
    }

    /// A read cut short by the read bound, a line range, and a `head`
    /// each leave a partial view: a whole write of what was shown plus a
    /// line is refused and the file is unchanged; an append or edit lands.
    pub async fn partial_views_refuse_whole_writes(url: &str, token: &str, root: &Path) {
        let text = big();
        std::fs::write(root.join("big.txt"), &text).unwrap();
        let mut writ_set = agent(url, token, "").await;
        let (error, shown) = writ_set
            .call("read_file", serde_json::json!({"path": "big.txt"}))
            .await;
        assert!(!error, "{shown}");
        assert!(shown.contains("To read on"), "cut short by the bound");
        let (error, said) = writ_set
            .call(
                "write_file",
                serde_json::json!({"path": "big.txt", "content": format!("{shown}one more\n")}),
            )
            .await;
        assert!(error && said.contains("only in part"), "{said}");
        assert!(said.contains("of 1060"), "{said}");
        assert_eq!(std::fs::read_to_string(root.join("big.txt")).unwrap(), text);
        // A line range, then a delete or a move: refused alike.
        let (error, _) = writ_set
            .call(
                "read_file",
                serde_json::json!({"path": "big.txt", "offset": 500, "limit": 5}),
            )
            .await;
        assert!(!error);
        let (error, said) = writ_set
            .call("delete_file", serde_json::json!({"path": "big.txt"}))
            .await;
        assert!(error && said.contains("lines 500-504 of 1060"), "{said}");
        let (error, said) = writ_set
            .call(
                "move_file",
                serde_json::json!({"from": "big.txt", "to": "moved.txt"}),
            )
            .await;
        assert!(error && said.contains("only in part"), "{said}");
        assert_eq!(std::fs::read_to_string(root.join("big.txt")).unwrap(), text);
        // An edit of what was shown lands.
        let (error, said) = writ_set
            .call("edit_file", serde_json::json!({"path": "big.txt", "old_string": "0011x", "new_string": "0011y"}))
            .await;
        assert!(!error, "{said}");
        // The filesystem set: a refusal cut short ("Cut short: … bytes"),
        // then a write of what it showed.
        let mut fs_set = agent(url, token, "?tools=filesystem").await;
        let (error, said) = fs_set
            .call(
                "write_file",
                serde_json::json!({"path": "big.txt", "content": "x\n"}),
            )
            .await;
        assert!(error && said.contains("Cut short"), "{said}");
        let now = std::fs::read_to_string(root.join("big.txt")).unwrap();
        let (error, said) = fs_set
            .call(
                "write_file",
                serde_json::json!({"path": "big.txt", "content": "x\n"}),
            )
            .await;
        assert!(error && said.contains("bytes"), "{said}");
        assert_eq!(std::fs::read_to_string(root.join("big.txt")).unwrap(), now);
        let (error, _) = fs_set
            .call(
                "read_text_file",
                serde_json::json!({"path": "big.txt", "head": 2}),
            )
            .await;
        assert!(!error);
        let (error, said) = fs_set
            .call(
                "write_file",
                serde_json::json!({"path": "big.txt", "content": "x\n"}),
            )
            .await;
        assert!(error && said.contains("lines 1-2 of 1060"), "{said}");
        // Reading all of it makes the view whole.
        let (error, _) = fs_set
            .call("read_text_file", serde_json::json!({"path": "big.txt"}))
            .await;
        assert!(!error);
        let (error, said) = fs_set
            .call(
                "write_file",
                serde_json::json!({"path": "big.txt", "content": "x\n"}),
            )
            .await;
        assert!(!error, "{said}");
        assert_eq!(
            std::fs::read_to_string(root.join("big.txt")).unwrap(),
            "x\n"
        );
        // An edit's preview shows lines around it: enough for the edit,
        // not for a whole write.
        std::fs::write(root.join("big.txt"), &text).unwrap();
        let edit = serde_json::json!({"path": "big.txt", "edits": [{"oldText": "0500x", "newText": "0500z"}]});
        let mut preview = edit.clone();
        preview["dryRun"] = true.into();
        let (error, said) = fs_set.call("edit_file", preview).await;
        assert!(!error, "{said}");
        let (error, said) = fs_set
            .call(
                "write_file",
                serde_json::json!({"path": "big.txt", "content": "x\n"}),
            )
            .await;
        assert!(error && said.contains("lines around an edit"), "{said}");
        let (error, said) = fs_set.call("edit_file", edit).await;
        assert!(!error, "{said}");
    }

    /// An append resent after its answer was lost is answered with the
    /// first result, marked as a repeat, and the file has it once; after
    /// a read the same append appends again.
    pub async fn resent_appends_land_once(url: &str, token: &str, root: &Path) {
        std::fs::write(root.join("log.md"), "a\n").unwrap();
        let mut writ_set = agent(url, token, "").await;
        writ_set
            .call("read_file", serde_json::json!({"path": "log.md"}))
            .await;
        let append = serde_json::json!({"path": "log.md", "content": "b\n"});
        let (error, first) = writ_set.call("append_file", append.clone()).await;
        assert!(
            !error && !first.contains("nothing was written this time"),
            "{first}"
        );
        let (error, again) = writ_set.call("append_file", append.clone()).await;
        assert!(
            !error && again.contains("nothing was written this time"),
            "{again}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("log.md")).unwrap(),
            "a\nb\n"
        );
        writ_set
            .call("read_file", serde_json::json!({"path": "log.md"}))
            .await;
        let (error, third) = writ_set.call("append_file", append).await;
        assert!(!error && !third.contains("nothing was written"), "{third}");
        assert_eq!(
            std::fs::read_to_string(root.join("log.md")).unwrap(),
            "a\nb\nb\n"
        );
        // The filesystem set's edit_file alike.
        let mut fs_set = agent(url, token, "?tools=filesystem").await;
        fs_set
            .call("read_text_file", serde_json::json!({"path": "log.md"}))
            .await;
        let edit =
            serde_json::json!({"path": "log.md", "edits": [{"oldText": "a\n", "newText": "A\n"}]});
        let (error, first) = fs_set.call("edit_file", edit.clone()).await;
        assert!(!error, "{first}");
        let (error, again) = fs_set.call("edit_file", edit).await;
        assert!(
            !error && again.contains("nothing was written this time"),
            "{again}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("log.md")).unwrap(),
            "A\nb\nb\n"
        );
    }

    pub fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    pub fn options(root: &Path) -> writ::server::Options {
        writ::server::Options::new(root)
            .config(writ::Config::default().durability(writ::Durability::Process))
            .call_wait(Duration::from_millis(300))
    }
}

#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[test]
fn partial_views_and_resent_calls_through_mcp_in_process() {
    surfaces::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let server = writ::server::Server::start(surfaces::options(&root))
            .await
            .unwrap();
        surfaces::partial_views_refuse_whole_writes(server.url(), server.token(), &root).await;
        surfaces::resent_appends_land_once(server.url(), server.token(), &root).await;
        server.shutdown().await;
    });
}

#[cfg(all(
    feature = "mcp",
    feature = "server",
    feature = "remote",
    feature = "etcd"
))]
#[path = "common/etcd_server.rs"]
mod etcd_server;

/// On etcd: MCP as in process, and through `/rpc` across two servers: a
/// line range read through one refuses a whole write through the other,
/// and an append resent through the other server is answered, not
/// appended twice.
#[cfg(all(
    feature = "mcp",
    feature = "server",
    feature = "remote",
    feature = "etcd"
))]
#[test]
fn partial_views_and_resent_calls_on_etcd() {
    surfaces::runtime().block_on(async {
        let etcd = etcd_server::Etcd::start();
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let mut servers = Vec::new();
        for _ in 0..2 {
            let options = surfaces::options(&root)
                .token("gate-token-0123456789")
                .etcd(
                    [etcd.endpoint.as_str()],
                    "gate",
                    writ::etcd::TableOptions::default(),
                );
            servers.push(writ::server::Server::start(options).await.unwrap());
        }
        surfaces::partial_views_refuse_whole_writes(
            servers[0].url(),
            "gate-token-0123456789",
            &root,
        )
        .await;
        surfaces::resent_appends_land_once(servers[1].url(), "gate-token-0123456789", &root).await;
        let (one, two) = (
            writ::remote::Session::connect(servers[0].url(), "gate-token-0123456789")
                .await
                .unwrap(),
            writ::remote::Session::connect(servers[1].url(), "gate-token-0123456789")
                .await
                .unwrap(),
        );
        let actor = one
            .actor("rpc", writ::Grant::workspace(&root))
            .await
            .unwrap();
        let handle = actor.handle().to_string();
        std::fs::write(root.join("r.txt"), "1\n2\n3\n").unwrap();
        let call = |via: &writ::remote::Session, method: &str, mut params: serde_json::Value| {
            params["actor"] = handle.clone().into();
            let (via, method) = (via.clone(), method.to_string());
            async move { via.call(&method, params).await }
        };
        call(
            &one,
            "files.read",
            serde_json::json!({"path": "r.txt", "lines": [0, 1]}),
        )
        .await
        .unwrap();
        let written = call(
            &two,
            "files.write",
            serde_json::json!({"path": "r.txt", "content": "1\n"}),
        )
        .await;
        assert!(
            matches!(written, Err(Error::PartialView { .. })),
            "{written:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("r.txt")).unwrap(),
            "1\n2\n3\n"
        );
        let append = serde_json::json!({"path": "r.txt", "content": "4\n"});
        let first = call(&one, "files.append", append.clone()).await.unwrap();
        assert!(first.get("repeat").is_none(), "{first}");
        let again = call(&two, "files.append", append).await.unwrap();
        assert_eq!(again["repeat"], true, "{again}");
        assert_eq!(again["after"], first["after"]);
        assert_eq!(
            std::fs::read_to_string(root.join("r.txt")).unwrap(),
            "1\n2\n3\n4\n"
        );
        for server in servers {
            server.shutdown().await;
        }
    });
}

/// An anchored result's diff is bounded by the tools' read bound (256 KiB
/// by default), not by the whole-read limit (64 MiB): another agent's
/// 600 KB rewrite shows as a diff cut short.
#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[test]
fn an_anchored_result_through_mcp_is_bounded_by_the_read_bound() {
    surfaces::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let history = tempfile::tempdir().unwrap();
        let config = writ::Config::default()
            .durability(writ::Durability::Process)
            .history_dir(history.path());
        let server = writ::server::Server::start(surfaces::options(&root).config(config))
            .await
            .unwrap();
        std::fs::write(root.join("n.md"), "start\n").unwrap();
        let mut alice = surfaces::agent(server.url(), server.token(), "").await;
        let mut bob = surfaces::agent(server.url(), server.token(), "?tools=filesystem").await;
        alice
            .call("read_file", serde_json::json!({"path": "n.md"}))
            .await;
        bob.call("read_text_file", serde_json::json!({"path": "n.md"}))
            .await;
        let rewrite: String = (0..6000)
            .map(|i| format!("{i:05}{}\n", "y".repeat(94)))
            .collect();
        let (error, said) = bob
            .call(
                "write_file",
                serde_json::json!({"path": "n.md", "content": rewrite}),
            )
            .await;
        assert!(!error, "{said}");
        let (error, said) = alice
            .call(
                "append_file",
                serde_json::json!({"path": "n.md", "content": "alice\n"}),
            )
            .await;
        assert!(!error, "{said}");
        assert!(
            said.contains("Cut short at the read limit"),
            "{}",
            &said[..200]
        );
        assert!(said.len() < 300 * 1024, "{} bytes", said.len());
        server.shutdown().await;
    });
}
