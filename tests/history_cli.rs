//! `writ history` runs end to end against a journal a session recorded.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use writ::{Config, Durability, Grant, Scheduler};

/// Runs `writ history ARGS --dir DIR` in the workspace beside `dir` (the
/// default `--workspace` of a rewind), when there is one.
fn writ(args: &[&str], dir: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.arg("history").args(args).arg("--dir").arg(dir);
    let ws = dir.with_file_name("ws");
    if ws.is_dir() {
        cmd.current_dir(ws);
    }
    cmd.output().expect("the writ binary runs")
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A session that wrote demo.txt (A → B) in turn-1, then ended.
fn recorded() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let (root, data) = (base.join("ws"), base.join("history"));
    fs::create_dir(&root).unwrap();
    fs::write(root.join("demo.txt"), "A\n").unwrap();
    let sched = Scheduler::new(
        Config::default()
            .history_dir(&data)
            .durability(Durability::Process)
            .session("run-1"),
    );
    let agent = sched.actor("agent", Grant::workspace(&root)).unwrap();
    agent.set_turn("turn-1");
    agent.files().read("demo.txt").unwrap();
    agent.files().write("demo.txt", "B\n").unwrap();
    agent.files().write("notes.md", "new\n").unwrap();
    (dir, root, data)
}

#[test]
fn list_show_rewind_and_redo_from_the_command_line() {
    let (_dir, root, data) = recorded();

    let list = writ(&["list"], &data);
    assert!(list.status.success());
    let text = String::from_utf8(list.stdout).unwrap();
    assert!(text.starts_with("SESSION"), "{text}");
    assert!(text.contains("run-1") && text.contains("turn-1") && text.contains("applied"));
    let turns = json(&writ(&["list", "--json"], &data));
    assert_eq!(turns[0]["turn"], "turn-1");
    assert_eq!(turns[0]["calls"], 2);

    let show = writ(&["show", "turn-1"], &data);
    let text = String::from_utf8(show.stdout).unwrap();
    assert!(text.contains("update") && text.contains("create"), "{text}");
    let calls = json(&writ(&["show", "turn-1", "--json"], &data));
    assert_eq!(calls.as_array().unwrap().len(), 2);

    // A person's edit: refused with exit code 3, nothing touched.
    fs::write(root.join("demo.txt"), "C\n").unwrap();
    let refused = writ(&["rewind", "turn-1", "--json"], &data);
    assert_eq!(refused.status.code(), Some(3));
    let body = json(&refused);
    assert_eq!(
        body["conflicts"][0]["path"],
        root.join("demo.txt").to_str().unwrap()
    );
    assert_eq!(fs::read_to_string(root.join("demo.txt")).unwrap(), "C\n");
    assert!(root.join("notes.md").exists());

    fs::write(root.join("demo.txt"), "B\n").unwrap();
    let rewound = writ(&["rewind", "turn-1"], &data);
    assert!(
        rewound.status.success(),
        "{}",
        String::from_utf8_lossy(&rewound.stderr)
    );
    assert!(String::from_utf8_lossy(&rewound.stdout).contains("restored"));
    assert_eq!(fs::read_to_string(root.join("demo.txt")).unwrap(), "A\n");
    assert!(!root.join("notes.md").exists());
    assert_eq!(
        json(&writ(&["list", "--json"], &data))[0]["status"],
        "rewound"
    );

    let redone = json(&writ(&["redo", "turn-1", "--json"], &data));
    assert_eq!(redone["kind"], "redo");
    assert_eq!(fs::read_to_string(root.join("demo.txt")).unwrap(), "B\n");
    assert_eq!(fs::read_to_string(root.join("notes.md")).unwrap(), "new\n");
}

#[test]
fn bad_requests_fail_clearly() {
    let (_dir, _root, data) = recorded();
    let unknown = writ(&["rewind", "turn-9"], &data);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("turn-9"));

    let empty = tempfile::tempdir().unwrap();
    let missing = writ(&["list"], empty.path());
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no history journal"));

    let nothing = writ(&["prune"], &data);
    assert_eq!(nothing.status.code(), Some(1));
    let pruned = json(&writ(&["prune", "--keep", "0", "--json"], &data));
    assert_eq!(pruned["turns_removed"], 1);
}
