//! File history: per-turn rewind with conflict detection, merge mode, redo,
//! crash recovery and pruning (SPEC §7).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use writ::history::{Action, FileState, History, Prune, RewindMode};
use writ::{Config, Durability, Error, Grant, HistoryStatus, Scheduler};

struct Env {
    _dir: tempfile::TempDir,
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
        root,
        data,
        sched,
    }
}

fn read(p: &Path) -> Option<Vec<u8>> {
    fs::read(p).ok()
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn conflicts(result: Result<writ::history::RewindReport, Error>) -> Vec<writ::history::Conflict> {
    match result {
        Err(Error::RewindConflict { conflicts }) => conflicts,
        other => panic!("expected RewindConflict, got {other:?}"),
    }
}

/// The exercise: A, agent writes B, a person writes C → conflict, nothing
/// touched; the person restores B → rewind gives A; redo gives B again.
#[test]
fn the_exercise() {
    let e = env();
    let demo = e.root.join("demo.txt");
    fs::write(&demo, "A\n").unwrap();
    let agent = e.sched.actor("agent", Grant::workspace(&e.root)).unwrap();
    agent.set_turn("turn-1");
    let files = agent.files();
    files.read("demo.txt").unwrap();
    let receipt = files.write("demo.txt", "B\n").unwrap();
    assert_eq!(receipt.history, HistoryStatus::Recorded);

    fs::write(&demo, "C\n").unwrap(); // a person
    let found = conflicts(e.sched.rewind_turn("turn-1"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, demo);
    assert_eq!(found[0].turn, None, "the change came from outside writ");
    assert!(found[0].summary.contains("\"B\" became \"C\""), "{}", found[0].summary);
    assert_eq!(read(&demo).unwrap(), b"C\n", "nothing touched");

    fs::write(&demo, "B\n").unwrap(); // the person puts B back
    let report = e.sched.rewind_turn("turn-1").unwrap();
    assert_eq!(read(&demo).unwrap(), b"A\n");
    assert_eq!(report.files.len(), 1);
    assert_eq!(report.files[0].action, Action::Restored);
    println!("{report}");

    let again = e.sched.redo_turn("turn-1").unwrap();
    assert_eq!(read(&demo).unwrap(), b"B\n");
    assert_eq!(again.files[0].action, Action::Restored);
}
