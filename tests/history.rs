//! File history: per-turn rewind with conflict detection, merge mode, redo,
//! crash recovery and pruning (SPEC §7).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use writ::history::{Action, Conflict, FileState, History, Prune, RewindMode, RewindReport};
use writ::{Actor, Config, Durability, Error, Grant, HistoryStatus, Scheduler};

struct Env {
    _dir: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    data: PathBuf,
    sched: Scheduler,
}

fn env() -> Env {
    env_with(|c| c)
}

fn env_with(f: impl FnOnce(Config) -> Config) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let root = base.join("ws");
    let data = base.join("history");
    fs::create_dir(&root).unwrap();
    let config = Config::default()
        .history_dir(&data)
        .durability(Durability::Process)
        .session("s1");
    let sched = Scheduler::new(f(config));
    Env {
        _dir: dir,
        base,
        root,
        data,
        sched,
    }
}

impl Env {
    fn agent(&self, name: &str, turn: &str) -> Actor {
        let actor = self
            .sched
            .actor(name, Grant::workspace(&self.root))
            .unwrap();
        actor.set_turn(turn);
        actor
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn put(&self, rel: &str, bytes: &str, mode: u32) {
        let p = self.path(rel);
        fs::write(&p, bytes).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn get(&self, rel: &str) -> Option<String> {
        fs::read(self.path(rel))
            .ok()
            .map(|b| String::from_utf8(b).unwrap())
    }

    fn mode(&self, rel: &str) -> u32 {
        fs::metadata(self.path(rel)).unwrap().permissions().mode() & 0o7777
    }

    fn blobs(&self) -> usize {
        fs::read_dir(self.data.join("blobs"))
            .unwrap()
            .map(|fan| fs::read_dir(fan.unwrap().path()).unwrap().count())
            .sum()
    }
}

fn conflicts(result: Result<RewindReport, Error>) -> Vec<Conflict> {
    match result {
        Err(Error::RewindConflict { conflicts }) => conflicts,
        other => panic!("expected RewindConflict, got {other:?}"),
    }
}

fn action(report: &RewindReport, path: &Path) -> Action {
    report
        .files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("{} is not in the report {report:?}", path.display()))
        .action
        .clone()
}

/// The exercise: A, the agent writes B, a person writes C → conflict and
/// nothing touched; the person puts B back → rewind gives A; redo gives B.
#[test]
fn the_exercise() {
    let e = env();
    let demo = e.path("demo.txt");
    fs::write(&demo, "A\n").unwrap();
    let agent = e.agent("agent", "turn-1");
    let files = agent.files();
    files.read("demo.txt").unwrap();
    let receipt = files.write("demo.txt", "B\n").unwrap();
    assert_eq!(receipt.history, HistoryStatus::Recorded);
    let calls = History::open(&e.data)
        .unwrap()
        .calls("s1", Some("turn-1"))
        .unwrap();
    assert_eq!(
        calls[0].files[0].after,
        FileState::File {
            sha256: receipt.after.clone().unwrap(),
            size: 2,
            mode: e.mode("demo.txt"),
        },
        "history records the after-hash"
    );

    fs::write(&demo, "C\n").unwrap(); // a person
    let found = conflicts(e.sched.rewind_turn("turn-1"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, demo);
    assert_eq!(found[0].expected, receipt.after.unwrap());
    assert_eq!(found[0].turn, None, "the change came from outside writ");
    assert!(
        found[0].summary.contains("\"B\" became \"C\""),
        "{}",
        found[0].summary
    );
    assert_eq!(e.get("demo.txt").unwrap(), "C\n", "nothing touched");

    fs::write(&demo, "B\n").unwrap(); // the person puts B back
    let report = e.sched.rewind_turn("turn-1").unwrap();
    assert_eq!(e.get("demo.txt").unwrap(), "A\n");
    assert_eq!(action(&report, &demo), Action::Restored);
    assert!(report.to_string().contains("restored"), "{report}");

    let again = e.sched.redo_turn("turn-1").unwrap();
    assert_eq!(e.get("demo.txt").unwrap(), "B\n");
    assert_eq!(action(&again, &demo), Action::Restored);
}

/// A turn that creates, updates, deletes and renames; one file conflicts:
/// nothing at all is touched. Resolved: every file comes back exactly.
#[test]
fn a_multi_file_turn_is_all_or_nothing() {
    let e = env();
    e.put("upd.txt", "u1\n", 0o600);
    e.put("del.sh", "#!/bin/sh\n", 0o751);
    e.put("old.txt", "moved\n", 0o640);
    e.put("untracked.txt", "mine\n", 0o644);
    let agent = e.agent("agent", "t");
    let files = agent.files();
    files.write("new.txt", "fresh\n").unwrap();
    files.read("upd.txt").unwrap();
    files.write("upd.txt", "u2\n").unwrap();
    files.read("del.sh").unwrap();
    files.delete("del.sh").unwrap();
    files.read("old.txt").unwrap();
    files.rename("old.txt", "sub/new-name.txt").unwrap();
    let after_turn = |e: &Env| {
        assert_eq!(e.get("new.txt").as_deref(), Some("fresh\n"));
        assert_eq!(e.get("del.sh"), None);
        assert_eq!(e.get("old.txt"), None);
        assert_eq!(e.get("sub/new-name.txt").as_deref(), Some("moved\n"));
    };

    fs::write(e.path("upd.txt"), "u2 and a person's line\n").unwrap();
    let found = conflicts(e.sched.rewind_turn("t"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, e.path("upd.txt"));
    after_turn(&e);
    assert_eq!(e.get("upd.txt").unwrap(), "u2 and a person's line\n");

    fs::write(e.path("upd.txt"), "u2\n").unwrap();
    let report = e.sched.rewind_turn("t").unwrap();
    assert_eq!(e.get("new.txt"), None, "the created file is deleted");
    assert_eq!(e.get("upd.txt").unwrap(), "u1\n");
    assert_eq!(e.mode("upd.txt"), 0o600);
    assert_eq!(e.get("del.sh").unwrap(), "#!/bin/sh\n", "re-created");
    assert_eq!(e.mode("del.sh"), 0o751, "with its mode");
    assert_eq!(e.get("old.txt").unwrap(), "moved\n", "moved back");
    assert_eq!(e.mode("old.txt"), 0o640);
    assert_eq!(e.get("sub/new-name.txt"), None);
    assert_eq!(
        e.get("untracked.txt").unwrap(),
        "mine\n",
        "never a whole-tree reset"
    );
    assert_eq!(action(&report, &e.path("new.txt")), Action::Deleted);
    assert_eq!(action(&report, &e.path("upd.txt")), Action::Restored);
    assert_eq!(action(&report, &e.path("del.sh")), Action::Recreated);
    assert_eq!(action(&report, &e.path("old.txt")), Action::Recreated);
    assert_eq!(
        action(&report, &e.path("sub/new-name.txt")),
        Action::Deleted
    );
    assert_eq!(report.files.len(), 5);
    assert_eq!(report.changed(), 5);

    // The rewind itself can be undone.
    e.sched.redo_turn("t").unwrap();
    after_turn(&e);
    assert_eq!(e.get("upd.txt").unwrap(), "u2\n");
}

#[test]
fn empty_and_absent_are_different_states() {
    let e = env();
    e.put("empty.txt", "", 0o644);
    e.put("data.txt", "data\n", 0o644);
    let agent = e.agent("agent", "t");
    let files = agent.files();
    files.write("made-empty.txt", "").unwrap(); // absent → empty
    files.read("empty.txt").unwrap();
    files.delete("empty.txt").unwrap(); // empty → absent
    files.read("data.txt").unwrap();
    files.delete("data.txt").unwrap();

    // A person leaves an empty file where the turn deleted data.txt: that is
    // not the absent file the turn left.
    e.put("data.txt", "", 0o644);
    let found = conflicts(e.sched.rewind_turn("t"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].expected, "absent");
    assert_ne!(found[0].found, "absent");
    fs::remove_file(e.path("data.txt")).unwrap();

    let report = e.sched.rewind_turn("t").unwrap();
    assert_eq!(action(&report, &e.path("made-empty.txt")), Action::Deleted);
    assert!(
        !e.path("made-empty.txt").exists(),
        "an empty file is a file"
    );
    assert_eq!(e.get("empty.txt").as_deref(), Some(""), "re-created, empty");
    assert!(matches!(
        report.files[1].end,
        FileState::File { size: 0, .. }
    ));
    e.sched.redo_turn("t").unwrap();
    assert_eq!(e.get("made-empty.txt").as_deref(), Some(""));
    assert!(!e.path("empty.txt").exists());
}

#[test]
fn rewind_compares_content_not_mode_but_restores_mode() {
    let e = env();
    e.put("run.sh", "echo 1\n", 0o700);
    let agent = e.agent("agent", "t");
    agent.files().read("run.sh").unwrap();
    agent.files().write("run.sh", "echo 2\n").unwrap();
    fs::set_permissions(e.path("run.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    e.sched.rewind_turn("t").unwrap();
    assert_eq!(e.get("run.sh").unwrap(), "echo 1\n");
    assert_eq!(e.mode("run.sh"), 0o700);
}

fn lines(n: usize, changed: &[(usize, &str)]) -> String {
    (1..=n)
        .map(|i| {
            changed
                .iter()
                .find(|(at, _)| *at == i)
                .map_or(format!("line {i}\n"), |(_, s)| format!("{s}\n"))
        })
        .collect()
}

#[test]
fn merge_mode_reverses_cleanly_or_touches_nothing() {
    let e = env();
    e.put("clean.txt", &lines(10, &[]), 0o644);
    e.put("clash.txt", &lines(10, &[]), 0o644);
    let agent = e.agent("agent", "t");
    let files = agent.files();
    for f in ["clean.txt", "clash.txt"] {
        files.read(f).unwrap();
        files.replace(f, "line 2\n", "agent 2\n").unwrap();
    }
    // A person edits far from the agent's change in one file, on it in the other.
    fs::write(
        e.path("clean.txt"),
        lines(10, &[(2, "agent 2"), (8, "person 8")]),
    )
    .unwrap();
    fs::write(e.path("clash.txt"), lines(10, &[(2, "person 2")])).unwrap();

    let strict = conflicts(e.sched.rewind_turn("t"));
    assert_eq!(strict.len(), 2);
    let merge = conflicts(e.sched.rewind_turn_with("t", RewindMode::Merge));
    assert_eq!(merge.len(), 1, "only the overlapping file conflicts");
    assert_eq!(merge[0].path, e.path("clash.txt"));
    assert!(merge[0].summary.contains("merge:"), "{}", merge[0].summary);
    assert_eq!(
        e.get("clean.txt").unwrap(),
        lines(10, &[(2, "agent 2"), (8, "person 8")]),
        "nothing at all is touched"
    );

    fs::write(e.path("clash.txt"), lines(10, &[(2, "agent 2")])).unwrap();
    let report = e.sched.rewind_turn_with("t", RewindMode::Merge).unwrap();
    assert_eq!(action(&report, &e.path("clean.txt")), Action::Merged);
    assert_eq!(action(&report, &e.path("clash.txt")), Action::Restored);
    assert_eq!(
        e.get("clean.txt").unwrap(),
        lines(10, &[(8, "person 8")]),
        "the agent's change is gone, the person's kept"
    );
    assert_eq!(e.get("clash.txt").unwrap(), lines(10, &[]));

    // Redo gives back exactly what was there before the merge.
    e.sched.redo_turn("t").unwrap();
    assert_eq!(
        e.get("clean.txt").unwrap(),
        lines(10, &[(2, "agent 2"), (8, "person 8")])
    );
}

#[test]
fn a_later_write_by_another_turn_is_a_conflict_naming_it() {
    let e = env();
    e.put("a.txt", "A\n", 0o644);
    let one = e.agent("one", "turn-1");
    let two = e.agent("two", "turn-2");
    one.files().read("a.txt").unwrap();
    one.files().write("a.txt", "B\n").unwrap();
    two.files().read("a.txt").unwrap();
    two.files().write("a.txt", "C\n").unwrap();

    let found = conflicts(e.sched.rewind_turn("turn-1"));
    assert_eq!(found[0].turn.as_deref(), Some("turn-2"));
    assert!(found[0].summary.contains("turn-2"), "{}", found[0].summary);
    assert_eq!(e.get("a.txt").unwrap(), "C\n");
    // Undo in order instead: turn-2, then turn-1.
    e.sched.rewind_turn("turn-2").unwrap();
    assert_eq!(e.get("a.txt").unwrap(), "B\n");
    e.sched.rewind_turn("turn-1").unwrap();
    assert_eq!(e.get("a.txt").unwrap(), "A\n");

    // Even when turn-1 wrote last, rewinding it would wipe turn-2's work;
    // and rewinding turn-2 would wipe turn-1's later write.
    e.put("b.txt", "A\n", 0o644);
    for (actor, text) in [(&one, "B\n"), (&two, "C\n"), (&one, "D\n")] {
        actor.files().read("b.txt").unwrap();
        actor.files().write("b.txt", text).unwrap();
    }
    let found = conflicts(e.sched.rewind_turn("turn-1"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].turn.as_deref(), Some("turn-2"));
    assert_eq!(found[0].expected, found[0].found, "the content is turn-1's");
    let found = conflicts(e.sched.rewind_turn("turn-2"));
    assert_eq!(found[0].turn.as_deref(), Some("turn-1"));
    assert_eq!(e.get("b.txt").unwrap(), "D\n");
}

#[test]
fn rewind_is_busy_while_anyone_holds_a_path() {
    let e = env();
    let agent = e.agent("agent", "t");
    agent.files().write("a.txt", "x").unwrap();
    agent.files().write("b.txt", "y").unwrap();
    let other = e.sched.actor("other", Grant::workspace(&e.root)).unwrap();
    let fence = other.fence(["b.txt"]).unwrap();
    match e.sched.rewind_turn("t") {
        Err(Error::Busy(busy)) => assert_eq!(busy.holder, "other"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(e.path("a.txt").exists() && e.path("b.txt").exists());
    // The agent's own later call is refused while the rewind holds.
    drop(fence);
    e.sched.rewind_turn("t").unwrap();
    assert!(!e.path("a.txt").exists() && !e.path("b.txt").exists());
    assert!(e.sched.dump().is_idle(), "the rewind's hold is released");
}

#[test]
fn unknown_turns_and_missing_history_are_errors() {
    let e = env();
    let agent = e.sched.actor("agent", Grant::workspace(&e.root)).unwrap();
    agent.files().write("before-any-turn.txt", "x").unwrap();
    match e.sched.rewind_turn("turn-9") {
        Err(Error::UnknownTurn { turn }) => assert_eq!(turn, "turn-9"),
        other => panic!("expected UnknownTurn, got {other:?}"),
    }
    assert!(e.path("before-any-turn.txt").exists());
    agent.set_turn("t");
    agent.files().write("a.txt", "x").unwrap();
    assert!(matches!(e.sched.redo_turn("t"), Err(Error::History { .. })));

    let plain = Scheduler::new(Config::default());
    assert!(matches!(plain.rewind_turn("t"), Err(Error::History { .. })));
}

#[test]
fn rewind_refuses_a_path_that_became_a_symlink_out_of_the_root() {
    let e = env();
    let outside = e.base.join("outside");
    fs::create_dir(&outside).unwrap();
    let agent = e.agent("agent", "t");
    agent.files().write("sub/a.txt", "agent\n").unwrap();
    agent.files().write("b.txt", "agent\n").unwrap();
    // The same content outside, so only the path policy can tell.
    fs::write(outside.join("a.txt"), "agent\n").unwrap();
    fs::remove_dir_all(e.path("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, e.path("sub")).unwrap();
    // Outside the root today: a conflict entry, never a write.
    match e.sched.rewind_turn("t") {
        Err(Error::RewindConflict { conflicts }) => {
            assert_eq!(conflicts.len(), 1, "{conflicts:?}");
            assert_eq!(conflicts[0].path, e.path("sub/a.txt"));
            assert!(conflicts[0].summary.contains("outside the grant root"));
        }
        other => panic!("expected RewindConflict, got {other:?}"),
    }
    assert!(outside.join("a.txt").exists(), "nothing outside is touched");
    assert!(e.path("b.txt").exists(), "nothing at all is touched");

    // The file itself swapped for a link out of the root.
    fs::remove_file(e.path("sub")).unwrap();
    fs::create_dir(e.path("sub")).unwrap();
    std::os::unix::fs::symlink(outside.join("a.txt"), e.path("sub/a.txt")).unwrap();
    assert!(matches!(
        e.sched.rewind_turn("t"),
        Err(Error::RewindConflict { .. })
    ));
    assert!(outside.join("a.txt").exists());
}

#[test]
fn rewind_applies_todays_sensitive_name_policy() {
    let e = env();
    let agent = e.agent("agent", "t");
    agent
        .files()
        .allow_sensitive(".env.local")
        .write(".env.local", "KEY=1\n")
        .unwrap();
    agent.files().write("a.txt", "x").unwrap();
    assert!(matches!(
        e.sched.rewind_turn("t"),
        Err(Error::Policy { .. })
    ));
    assert!(e.path(".env.local").exists() && e.path("a.txt").exists());
}

#[test]
fn turns_group_all_actors_and_children_start_in_their_parents_turn() {
    let e = env();
    let lead = e.sched.actor("lead", Grant::workspace(&e.root)).unwrap();
    lead.files().write("no-turn.txt", "x").unwrap();
    lead.set_turn("t");
    let kid = lead.child("kid", Grant::workspace(&e.root)).unwrap();
    let other = e.agent("other", "t");
    lead.files().write("lead.txt", "x").unwrap();
    kid.files().write("kid.txt", "x").unwrap();
    other.files().write("other.txt", "x").unwrap();
    let report = e.sched.rewind_turn("t").unwrap();
    assert_eq!(report.files.len(), 3);
    for f in ["lead.txt", "kid.txt", "other.txt"] {
        assert!(!e.path(f).exists(), "{f}");
    }
    assert!(
        e.path("no-turn.txt").exists(),
        "calls before set_turn belong to no turn"
    );
    let turns = History::open(&e.data).unwrap().turns().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].turn, None);
    assert_eq!(turns[1].turn.as_deref(), Some("t"));
    assert_eq!(turns[1].actors, ["lead", "kid", "other"]);
}

#[test]
fn rewinding_twice_changes_nothing_the_second_time() {
    let e = env();
    let agent = e.agent("agent", "t");
    agent.files().write("a.txt", "x").unwrap();
    e.sched.rewind_turn("t").unwrap();
    let again = e.sched.rewind_turn("t").unwrap();
    assert_eq!(again.files[0].action, Action::AlreadyRestored);
    assert_eq!(again.changed(), 0);
}

#[test]
fn an_agent_whose_read_predates_a_rewind_is_told_the_rewind_wrote_it() {
    let e = env();
    e.put("a.txt", "A\n", 0o644);
    let agent = e.agent("agent", "t");
    agent.files().read("a.txt").unwrap();
    agent.files().write("a.txt", "B\n").unwrap();
    let reader = e.agent("reader", "t2");
    reader.files().read("a.txt").unwrap();
    e.sched.rewind_turn("t").unwrap();
    match reader.files().write("a.txt", "C\n") {
        Err(Error::Stale { writer, .. }) => assert_eq!(writer.as_deref(), Some("rewind of t")),
        other => panic!("expected Stale, got {other:?}"),
    }
}

/// The state right after the turn of [`crash_fixture`].
fn assert_turn_state(e: &Env) {
    assert_eq!(e.get("new.txt").as_deref(), Some("new\n"));
    assert_eq!(e.get("upd.txt").as_deref(), Some("u2\n"));
    assert_eq!(e.get("del.txt"), None);
    assert_eq!(e.get("src.txt"), None);
    assert_eq!(e.get("dst.txt").as_deref(), Some("moved\n"));
}

/// The state before the turn of [`crash_fixture`].
fn assert_before_state(e: &Env) {
    assert_eq!(e.get("new.txt"), None);
    assert_eq!(e.get("upd.txt").as_deref(), Some("u1\n"));
    assert_eq!(e.mode("upd.txt"), 0o600);
    assert_eq!(e.get("del.txt").as_deref(), Some("gone\n"));
    assert_eq!(e.mode("del.txt"), 0o640);
    assert_eq!(e.get("src.txt").as_deref(), Some("moved\n"));
    assert_eq!(e.get("dst.txt"), None);
}

/// A turn of five paths: create, update, delete and a rename (two ends).
fn crash_fixture() -> Env {
    let e = env();
    e.put("upd.txt", "u1\n", 0o600);
    e.put("del.txt", "gone\n", 0o640);
    e.put("src.txt", "moved\n", 0o644);
    let agent = e.agent("agent", "t");
    let files = agent.files();
    files.write("new.txt", "new\n").unwrap();
    for f in ["upd.txt", "del.txt", "src.txt"] {
        files.read(f).unwrap();
    }
    files.write("upd.txt", "u2\n").unwrap();
    files.delete("del.txt").unwrap();
    files.rename("src.txt", "dst.txt").unwrap();
    assert_turn_state(&e);
    e
}

fn crash(result: Result<RewindReport, Error>) {
    match result {
        Err(Error::History { reason }) => assert!(reason.contains("failpoint"), "{reason}"),
        other => panic!("expected the failpoint, got {other:?}"),
    }
}

#[test]
fn a_rewind_interrupted_after_any_restore_converges() {
    for k in 0..5 {
        // Re-running the rewind finishes it; redo then gives the turn back.
        let e = crash_fixture();
        e.sched.set_rewind_failpoint(Some(k));
        crash(e.sched.rewind_turn("t"));
        e.sched.set_rewind_failpoint(None);
        let report = e.sched.rewind_turn("t").unwrap();
        assert_eq!(report.changed(), 5 - k, "k = {k}");
        assert_before_state(&e);
        e.sched.redo_turn("t").unwrap();
        assert_turn_state(&e);

        // Or redo straight away: the pre-rewind snapshot gives everything back.
        let e = crash_fixture();
        e.sched.set_rewind_failpoint(Some(k));
        crash(e.sched.rewind_turn("t"));
        e.sched.set_rewind_failpoint(None);
        e.sched.redo_turn("t").unwrap();
        assert_turn_state(&e);
        e.sched.rewind_turn("t").unwrap();
        assert_before_state(&e);
    }
}

#[test]
fn a_redo_interrupted_after_any_restore_converges() {
    for k in 0..5 {
        let e = crash_fixture();
        e.sched.rewind_turn("t").unwrap();
        e.sched.set_rewind_failpoint(Some(k));
        crash(e.sched.redo_turn("t"));
        e.sched.set_rewind_failpoint(None);
        let turns = History::open(&e.data).unwrap().turns().unwrap();
        assert_eq!(turns[0].status, writ::history::TurnStatus::Interrupted);
        e.sched.redo_turn("t").unwrap();
        assert_turn_state(&e);

        let e = crash_fixture();
        e.sched.rewind_turn("t").unwrap();
        e.sched.set_rewind_failpoint(Some(k));
        crash(e.sched.redo_turn("t"));
        e.sched.set_rewind_failpoint(None);
        e.sched.rewind_turn("t").unwrap();
        assert_before_state(&e);
    }
}

#[test]
fn a_torn_last_journal_line_is_ignored() {
    let e = env();
    let agent = e.agent("agent", "t");
    agent.files().write("a.txt", "x").unwrap();
    let journal = e.data.join("journal.jsonl");
    let mut text = fs::read(&journal).unwrap();
    text.extend_from_slice(br#"{"type":"write","session":"s1","tu"#);
    fs::write(&journal, &text).unwrap();

    let history = History::open(&e.data).unwrap();
    assert_eq!(history.skipped_lines().unwrap(), 1);
    assert_eq!(history.turns().unwrap().len(), 1);
    // Later appends start on a fresh line, so nothing good is swallowed.
    agent.files().write("b.txt", "y").unwrap();
    assert_eq!(history.calls("s1", Some("t")).unwrap().len(), 2);
    assert_eq!(history.skipped_lines().unwrap(), 1);
    e.sched.rewind_turn("t").unwrap();
    assert!(!e.path("a.txt").exists() && !e.path("b.txt").exists());
}

#[test]
fn the_journal_holds_no_file_bodies_and_blobs_are_deduplicated() {
    let e = env();
    e.put("a.txt", "SECRET-BODY-1\n", 0o644);
    let agent = e.agent("agent", "t");
    let files = agent.files();
    files.read("a.txt").unwrap();
    files.write("a.txt", "SECRET-BODY-2\n").unwrap();
    files.write("b.txt", "SECRET-BODY-2\n").unwrap();
    files.write("c.txt", "SECRET-BODY-1\n").unwrap();
    let journal = fs::read_to_string(e.data.join("journal.jsonl")).unwrap();
    assert!(!journal.contains("SECRET-BODY"), "{journal}");
    assert_eq!(e.blobs(), 2, "two distinct contents, two blobs");
}

#[test]
fn prune_keeps_every_referenced_blob() {
    let e = env();
    let agent = e.agent("agent", "t1");
    agent.files().write("shared.txt", "shared\n").unwrap(); // blob "shared"
    agent.files().write("only1.txt", "only one\n").unwrap();
    agent.set_turn("t2");
    agent.files().write("only2.txt", "only two\n").unwrap();
    agent.set_turn("t3");
    agent.files().read("shared.txt").unwrap();
    agent.files().write("shared.txt", "three\n").unwrap(); // pre-image "shared"
    assert_eq!(e.blobs(), 4);

    let history = History::open(&e.data).unwrap();
    let report = history
        .prune(&Prune::keep_last(1).blob_grace(std::time::Duration::ZERO))
        .unwrap();
    assert_eq!(report.turns_removed, 2);
    assert_eq!(report.blobs_removed, 2, "{report:?}");
    assert_eq!(e.blobs(), 2, "\"shared\" is still referenced by t3");
    assert!(matches!(
        e.sched.rewind_turn("t1"),
        Err(Error::UnknownTurn { .. })
    ));
    e.sched.rewind_turn("t3").unwrap();
    assert_eq!(e.get("shared.txt").as_deref(), Some("shared\n"));

    // With the default grace, a fresh unreferenced blob survives a prune.
    let report = history.prune(&Prune::keep_last(0)).unwrap();
    assert_eq!(report.blobs_removed, 0);
}

#[test]
fn files_above_the_snapshot_limit_need_unprotected() {
    let e = env_with(|c| c.snapshot_limit(8));
    e.put("big.txt", "0123456789\n", 0o644);
    let agent = e.agent("agent", "t");
    agent.files().read("big.txt").unwrap();
    assert!(matches!(
        agent.files().write("big.txt", "small\n"),
        Err(Error::History { .. })
    ));
    assert_eq!(e.get("big.txt").unwrap(), "0123456789\n", "nothing written");

    let receipt = agent
        .files()
        .unprotected()
        .write("big.txt", "small\n")
        .unwrap();
    assert_eq!(receipt.history, HistoryStatus::Unprotected);
    assert!(receipt.to_string().contains("unprotected"), "{receipt}");
    let small = agent.files().unprotected().write("s.txt", "x").unwrap();
    assert_eq!(
        small.history,
        HistoryStatus::Recorded,
        "a small file is snapshotted"
    );

    let report = e.sched.rewind_turn("t").unwrap();
    assert!(matches!(
        action(&report, &e.path("big.txt")),
        Action::LeftAsIs { .. }
    ));
    assert_eq!(e.get("big.txt").unwrap(), "small\n");
    assert!(!e.path("s.txt").exists());
}

#[test]
fn a_failed_snapshot_fails_the_write_and_a_failed_journal_says_incomplete() {
    let e = env();
    e.put("a.txt", "A\n", 0o644);
    let agent = e.agent("agent", "t");
    agent.files().write("first.txt", "x").unwrap(); // opens the store

    // The journal cannot be appended to: the write lands, the receipt says so.
    let journal = e.data.join("journal.jsonl");
    fs::rename(&journal, e.data.join("saved")).unwrap();
    fs::create_dir(&journal).unwrap();
    agent.files().read("a.txt").unwrap();
    let receipt = agent.files().write("a.txt", "B\n").unwrap();
    assert!(matches!(receipt.history, HistoryStatus::Incomplete { .. }));
    assert!(receipt.to_string().contains("written, history incomplete"));
    assert_eq!(e.get("a.txt").unwrap(), "B\n");
    fs::remove_dir(&journal).unwrap();
    fs::rename(e.data.join("saved"), &journal).unwrap();

    // No blob can be stored: nothing is written.
    fs::rename(e.data.join("blobs"), e.data.join("saved-blobs")).unwrap();
    fs::write(e.data.join("blobs"), "not a folder").unwrap();
    agent.files().read("a.txt").unwrap();
    assert!(agent.files().write("a.txt", "C\n").is_err());
    assert!(agent.files().write("created.txt", "C\n").is_err());
    assert_eq!(e.get("a.txt").unwrap(), "B\n");
    assert!(!e.path("created.txt").exists());
}

#[test]
fn concurrent_writers_in_one_turn_journal_every_call() {
    let e = env();
    let lead = e.agent("lead", "t");
    let kids: Vec<Actor> = (0..4)
        .map(|i| {
            lead.child(format!("kid{i}"), Grant::workspace(&e.root))
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for (i, kid) in kids.iter().enumerate() {
            s.spawn(move || {
                for n in 0..20 {
                    kid.files()
                        .write(format!("k{i}/f{n}.txt"), format!("{i}-{n}"))
                        .unwrap();
                }
            });
        }
    });
    let history = History::open(&e.data).unwrap();
    assert_eq!(history.skipped_lines().unwrap(), 0);
    assert_eq!(history.calls("s1", Some("t")).unwrap().len(), 80);
    let report = e.sched.rewind_turn("t").unwrap();
    assert_eq!(report.changed(), 80);
    for i in 0..4 {
        assert_eq!(fs::read_dir(e.path(&format!("k{i}"))).unwrap().count(), 0);
    }
}

#[test]
fn writes_after_a_rewind_join_the_next_rewind_and_block_a_redo() {
    let e = env();
    e.put("a.txt", "A\n", 0o644);
    let agent = e.agent("agent", "t");
    agent.files().read("a.txt").unwrap();
    agent.files().write("a.txt", "B\n").unwrap();
    e.sched.rewind_turn("t").unwrap();
    // The same turn goes on writing.
    agent.files().write("b.txt", "new\n").unwrap();
    agent.files().read("a.txt").unwrap();
    agent.files().write("a.txt", "C\n").unwrap();
    assert!(matches!(e.sched.redo_turn("t"), Err(Error::History { .. })));
    let report = e.sched.rewind_turn("t").unwrap();
    assert_eq!(e.get("a.txt").as_deref(), Some("A\n"));
    assert!(!e.path("b.txt").exists());
    assert_eq!(report.changed(), 2);
    e.sched.redo_turn("t").unwrap();
    assert_eq!(e.get("a.txt").as_deref(), Some("C\n"));
    assert_eq!(e.get("b.txt").as_deref(), Some("new\n"));
}

#[test]
fn a_deleted_symlink_is_left_as_it_is_and_said_so() {
    let e = env();
    e.put("target.txt", "t\n", 0o644);
    std::os::unix::fs::symlink("target.txt", e.path("link")).unwrap();
    let agent = e.agent("agent", "t");
    agent.files().delete("link").unwrap();
    agent.files().write("a.txt", "x").unwrap();
    let calls = History::open(&e.data)
        .unwrap()
        .calls("s1", Some("t"))
        .unwrap();
    assert!(!calls[0].files[0].protected, "a link has no snapshot");
    let report = e.sched.rewind_turn("t").unwrap();
    match action(&report, &e.path("link")) {
        Action::LeftAsIs { reason } => assert!(reason.contains("symlink"), "{reason}"),
        other => panic!("expected LeftAsIs, got {other:?}"),
    }
    assert!(!e.path("a.txt").exists(), "the rest of the turn is rewound");
    assert_eq!(e.get("target.txt").as_deref(), Some("t\n"));
}

#[test]
fn with_file_op_wait_a_rewind_waits_for_a_call_in_progress() {
    let e = env_with(|c| c.file_op_wait(std::time::Duration::from_secs(20)));
    let agent = e.agent("agent", "t");
    agent.files().write("a.txt", "x").unwrap();
    let other = e.sched.actor("other", Grant::workspace(&e.root)).unwrap();
    let call = other.try_admit(["a.txt"]).unwrap();
    std::thread::scope(|s| {
        let rewind = s.spawn(|| e.sched.rewind_turn("t"));
        // Release only once the rewind is queued behind the call.
        while e.sched.dump().waiters.is_empty() {
            std::thread::yield_now();
        }
        assert!(e.path("a.txt").exists());
        drop(call);
        rewind.join().unwrap().unwrap();
    });
    assert!(!e.path("a.txt").exists());
}

/// An editor outside writ (reported by a hook) creates one file, deletes
/// another and leaves a third as it was, each inside the agent's
/// reservation: the rewind deletes the new file, re-creates the deleted one
/// with its mode, and the untouched file is not in the turn at all.
#[test]
fn outside_writes_reported_before_and_after_are_rewound_like_writes() {
    let e = env();
    e.put("gone.rs", "kept\n", 0o640);
    e.put("same.rs", "same\n", 0o644);
    let agent = e.agent("editor", "t1");
    for (rel, change) in [
        ("new.rs", Some("new\n")),
        ("gone.rs", None),
        ("same.rs", Some("same\n")),
    ] {
        let hold = agent.try_admit([rel]).unwrap();
        assert!(agent.before_outside_write(rel).unwrap());
        match change {
            Some(text) => fs::write(e.path(rel), text).unwrap(),
            None => fs::remove_file(e.path(rel)).unwrap(),
        }
        let receipt = agent.after_outside_write(rel).unwrap();
        assert_eq!(receipt.history, HistoryStatus::Recorded, "{rel}");
        drop(hold);
    }
    let report = e.sched.rewind_turn("t1").unwrap();
    assert_eq!(report.files.len(), 2, "{report}");
    assert_eq!(action(&report, &e.path("new.rs")), Action::Deleted);
    assert_eq!(action(&report, &e.path("gone.rs")), Action::Recreated);
    assert_eq!(e.get("new.rs"), None);
    assert_eq!(e.get("gone.rs").as_deref(), Some("kept\n"));
    assert_eq!(e.mode("gone.rs"), 0o640);
    e.sched.redo_turn("t1").unwrap();
    assert_eq!(e.get("new.rs").as_deref(), Some("new\n"));
    assert_eq!(e.get("gone.rs"), None);
}

/// Without its own exclusive reservation on the file an actor can neither
/// snapshot nor record an outside write; a record with no snapshot before it
/// is reported as incomplete history, never as recorded.
#[test]
fn outside_writes_need_a_reservation_and_a_snapshot_first() {
    let e = env();
    e.put("a.rs", "a\n", 0o644);
    let agent = e.agent("editor", "t1");
    let other = e.agent("other", "t2");
    let refused = |r: Result<bool, Error>| match r {
        Err(Error::InvalidPath { reason, .. }) => {
            assert!(reason.contains("no call reservation"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    refused(agent.before_outside_write("a.rs"));
    let theirs = other.try_admit(["a.rs"]).unwrap();
    refused(agent.before_outside_write("a.rs"));
    drop(theirs);
    let shared = agent
        .try_admit([writ::Target::file("a.rs").shared()])
        .unwrap();
    refused(agent.before_outside_write("a.rs"));
    drop(shared);
    assert!(matches!(
        agent.after_outside_write("a.rs"),
        Err(Error::InvalidPath { .. })
    ));

    let hold = agent.try_admit(["a.rs"]).unwrap();
    fs::write(e.path("a.rs"), "b\n").unwrap();
    let receipt = agent.after_outside_write("a.rs").unwrap();
    assert!(
        matches!(receipt.history, HistoryStatus::Incomplete { .. }),
        "{receipt:?}"
    );
    drop(hold);
    assert!(matches!(
        e.sched.rewind_turn("t1"),
        Err(Error::UnknownTurn { .. })
    ));
    assert!(matches!(
        agent.before_outside_write(".env"),
        Err(Error::Policy { .. })
    ));
}
