//! Attacks on the file tools and on history (SPEC §7, §8), each performed
//! and asserted to fail. The attacks on delegated runs are in
//! `tests/delegate.rs` (they share its helpers).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use writ::{Config, Durability, Error, Grant, Scheduler, WriteStep};

fn process() -> Config {
    Config::default().durability(Durability::Process)
}

fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

// ------------------------------------------- 4. a read-only root inside the root

#[test]
fn attack_4_a_read_only_root_inside_the_grant_root_stays_read_only() {
    let (_dir, ws) = canonical_tempdir();
    let vendor = ws.join("vendor");
    fs::create_dir(&vendor).unwrap();
    fs::write(vendor.join("lib.rs"), "pub fn vendored() {}\n").unwrap();
    let sched = Scheduler::new(process());
    let agent = sched
        .actor("agent", Grant::workspace(&ws).read_root(&vendor))
        .unwrap();
    let files = agent.files();
    // Reading is what a read-only root is for.
    let (bytes, _) = files.read("vendor/lib.rs").unwrap();
    assert_eq!(bytes, b"pub fn vendored() {}\n");
    for (what, result) in [
        ("overwrite", files.write("vendor/lib.rs", "pwned")),
        ("append", files.append("vendor/lib.rs", "pwned")),
        (
            "replace",
            files.replace("vendor/lib.rs", "vendored", "pwned"),
        ),
        ("create", files.write("vendor/new.rs", "pwned")),
        ("delete", files.delete("vendor/lib.rs")),
        ("rename out", files.rename("vendor/lib.rs", "stolen.rs")),
    ] {
        match result {
            Err(Error::Policy { reason, .. }) => {
                assert!(reason.contains("read-only root"), "{what}: {reason}")
            }
            other => panic!("{what}: expected Policy, got {other:?}"),
        }
    }
    assert_eq!(
        fs::read(vendor.join("lib.rs")).unwrap(),
        b"pub fn vendored() {}\n"
    );
    assert!(!vendor.join("new.rs").exists());
    assert!(!ws.join("stolen.rs").exists());
    // The rest of the workspace stays writable.
    files.write("src.rs", "fn main() {}\n").unwrap();
}

// ------------------------------------------- 9. set-user-id bits and the temp file

#[test]
fn attack_9_set_user_id_and_set_group_id_never_reach_new_content() {
    let (_dir, ws) = canonical_tempdir();
    let tool = ws.join("tool");
    fs::write(&tool, "#!/bin/sh\necho harmless\n").unwrap();
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o6755)).unwrap();
    assert_eq!(mode(&tool), 0o6755, "the file system keeps the bits");
    let sched = Scheduler::new(process());
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    let files = agent.files();
    files.read("tool").unwrap();
    let receipt = files.write("tool", "#!/bin/sh\nid\n").unwrap();
    assert_eq!(
        mode(&tool),
        0o755,
        "the permission bits stay, the privilege goes"
    );
    assert_eq!(receipt.mode, Some(0o755));
    // The sticky bit and plain permission bits are kept as they were.
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o1750)).unwrap();
    files.read("tool").unwrap();
    files.append("tool", "echo more\n").unwrap();
    assert_eq!(mode(&tool), 0o1750);
}

#[test]
fn attack_9_new_content_is_never_in_a_world_readable_temp_file() {
    let (_dir, ws) = canonical_tempdir();
    fs::write(ws.join("secret-notes.md"), "old\n").unwrap();
    fs::set_permissions(
        ws.join("secret-notes.md"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let sched = Scheduler::new(process());
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (seen_in_hook, folder) = (seen.clone(), ws.clone());
    let files = agent.files().on_write_step(move |step| {
        if step == WriteStep::WriteData {
            // Half the new content is in the temp file now.
            for entry in fs::read_dir(&folder)?.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".writ-tmp-")
                {
                    seen_in_hook
                        .lock()
                        .push(entry.metadata()?.permissions().mode() & 0o7777);
                }
            }
        }
        Ok(())
    });
    files.read("secret-notes.md").unwrap();
    files.write("secret-notes.md", "the new secret\n").unwrap();
    files.write("fresh.md", "new file\n").unwrap();
    assert_eq!(*seen.lock(), vec![0o600, 0o600]);
    assert_eq!(mode(&ws.join("secret-notes.md")), 0o600);
    // A new file gets the usual mode under the umask, not 0600.
    assert_eq!(mode(&ws.join("fresh.md")) & 0o600, 0o600);
    assert_ne!(
        mode(&ws.join("fresh.md")),
        0o600,
        "a new file is not left private"
    );
}

// ------------------------------------------- 10. a create that races another creator

#[test]
fn attack_10_a_create_never_replaces_a_file_that_appeared_meanwhile() {
    let (_dir, ws) = canonical_tempdir();
    let sched = Scheduler::new(process());
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    let target = ws.join("report.md");
    let hook_target = target.clone();
    // Deterministic: the other creator lands just before writ's rename.
    let files = agent.files().on_write_step(move |step| {
        if step == WriteStep::Rename {
            fs::write(&hook_target, "a person's report\n")?;
        }
        Ok(())
    });
    match files.write("report.md", "the agent's report\n") {
        Err(Error::NotRead { path }) => assert_eq!(path, target),
        other => panic!("expected NotRead, got {other:?}"),
    }
    assert_eq!(fs::read(&target).unwrap(), b"a person's report\n");
    let leftovers = fs::read_dir(&ws)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".writ-tmp-"))
        .count();
    assert_eq!(leftovers, 0, "the temp file is cleaned up");
    // Same for an append that creates.
    fs::remove_file(&target).unwrap();
    let hook_target = target.clone();
    let files = agent.files().on_write_step(move |step| {
        if step == WriteStep::Rename {
            fs::write(&hook_target, "theirs\n")?;
        }
        Ok(())
    });
    assert!(matches!(
        files.append("report.md", "ours\n"),
        Err(Error::NotRead { .. })
    ));
    assert_eq!(fs::read(&target).unwrap(), b"theirs\n");
}

#[test]
fn attack_10_a_rename_never_replaces_a_destination_that_appeared_meanwhile() {
    let (_dir, ws) = canonical_tempdir();
    fs::write(ws.join("draft.md"), "the agent's draft\n").unwrap();
    let sched = Scheduler::new(process());
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    let appeared = ws.join("final.md");
    let hook_target = appeared.clone();
    let files = agent.files().on_write_step(move |step| {
        if step == WriteStep::Rename {
            fs::write(&hook_target, "a person's final version\n")?;
        }
        Ok(())
    });
    files.read("draft.md").unwrap();
    match files.rename("draft.md", "final.md") {
        Err(Error::NotRead { path }) => assert_eq!(path, appeared),
        other => panic!("expected NotRead, got {other:?}"),
    }
    assert_eq!(fs::read(&appeared).unwrap(), b"a person's final version\n");
    assert_eq!(
        fs::read(ws.join("draft.md")).unwrap(),
        b"the agent's draft\n"
    );
}

#[test]
fn attack_10_racing_creators_lose_nothing() {
    let (_dir, ws) = canonical_tempdir();
    let sched = Scheduler::new(process());
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    const ROUNDS: usize = 300;
    let (mut writ_won, mut they_won) = (0, 0);
    for round in 0..ROUNDS {
        let path = ws.join(format!("f{round}"));
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let go = barrier.clone();
        let other = path.clone();
        let creator = std::thread::spawn(move || {
            use std::io::Write;
            go.wait();
            // O_EXCL: it succeeds only if the name did not exist.
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&other)
                .ok()?;
            file.write_all(b"theirs").unwrap();
            Some(())
        });
        barrier.wait();
        let ours = agent.files().write(format!("f{round}"), "ours");
        let theirs = creator.join().unwrap();
        let content = fs::read(&path).unwrap();
        // The oracle: whoever created the file first keeps it.
        match (&ours, theirs) {
            (Ok(_), None) => {
                assert_eq!(content, b"ours");
                writ_won += 1;
            }
            (Err(Error::NotRead { .. }), Some(())) => {
                assert_eq!(content, b"theirs");
                they_won += 1;
            }
            (Ok(_), Some(())) => panic!(
                "round {round}: both creates succeeded, so writ replaced a file nobody read (now {:?})",
                String::from_utf8_lossy(&content)
            ),
            (other, theirs) => panic!("round {round}: unexpected {other:?} / {theirs:?}"),
        }
    }
    assert_eq!(writ_won + they_won, ROUNDS);
    eprintln!("racing creates: writ first {writ_won}, the other first {they_won}");
}

// ------------------------------------------- 11. unbounded reads

#[test]
fn attack_11_a_huge_file_is_too_large_for_a_whole_read() {
    let (_dir, ws) = canonical_tempdir();
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef012345678\n"; // 58 bytes
    fs::write(ws.join("huge.log"), line.repeat(100)).unwrap();
    let sched = Scheduler::new(process().max_read_bytes(1000));
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    let files = agent.files();
    match files.read("huge.log") {
        Err(e @ Error::TooLarge { .. }) => {
            let Error::TooLarge { size, limit, .. } = &e else {
                unreachable!()
            };
            assert_eq!((*size, *limit), (5800, 1000));
            assert!(e.to_string().contains("read_range"), "{e}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // A range within the bound works, and its mark covers the whole file,
    // so an append after reading the tail is allowed...
    let (tail, mark) = files.read_range("huge.log", 99..).unwrap();
    assert_eq!(tail, line.as_bytes());
    assert_eq!(mark.len, 5800);
    // ...but an edit would need the whole pre-image in memory.
    assert!(matches!(
        files.append("huge.log", "more\n"),
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        files.read_range("huge.log", ..),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(fs::metadata(ws.join("huge.log")).unwrap().len(), 5800);
}

#[test]
fn attack_11_an_endlessly_growing_file_cannot_keep_a_read_going() {
    let (_dir, ws) = canonical_tempdir();
    let path = ws.join("growing.log");
    fs::write(&path, "start\n").unwrap();
    let sched = Scheduler::new(process().max_read_bytes(1 << 20));
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (stop_writer, grow) = (stop.clone(), path.clone());
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut file = fs::OpenOptions::new().append(true).open(&grow).unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        // Bounded, so a failing test cannot fill the disk: 64 MiB at most.
        for _ in 0..1024 {
            if stop_writer.load(Ordering::Relaxed) || file.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    // Every read ends: with the file as it was, or TooLarge at the bound.
    for _ in 0..5 {
        match agent.files().read("growing.log") {
            Ok((bytes, _)) => assert!(bytes.len() <= 1 << 20),
            Err(Error::TooLarge { limit, .. }) => assert_eq!(limit, 1 << 20),
            Err(other) => panic!("{other:?}"),
        }
        let _ = agent.files().read_range("growing.log", 0..1).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

// ------------------------------------------- 1. a forged journal

#[test]
fn attack_1_a_history_directory_inside_a_grant_root_is_refused() {
    let (_dir, ws) = canonical_tempdir();
    let sched = Scheduler::new(process().history_dir(ws.join(".writ-history")));
    match sched.actor("agent", Grant::workspace(&ws)) {
        Err(e @ Error::InvalidPath { .. }) => {
            assert!(e.to_string().contains("history directory"), "{e}")
        }
        other => panic!("expected InvalidPath, got {other:?}"),
    }
    // A root above the workspace contains it too; a sibling does not.
    let sub = ws.join("project");
    fs::create_dir(&sub).unwrap();
    let sched = Scheduler::new(process().history_dir(ws.join("history")));
    assert!(sched.actor("outer", Grant::workspace(&ws)).is_err());
    sched.actor("inner", Grant::workspace(&sub)).unwrap();
}

#[test]
fn attack_1_a_forged_journal_record_never_makes_rewind_write_outside() {
    let (_dir, base) = canonical_tempdir();
    let (ws, data, outside) = (base.join("ws"), base.join("history"), base.join("home"));
    for d in [&ws, &outside] {
        fs::create_dir(d).unwrap();
    }
    let sched = Scheduler::new(process().history_dir(&data).session("s"));
    let agent = sched.actor("agent", Grant::workspace(&ws)).unwrap();
    agent.set_turn("t1");
    let files = agent.files();
    files
        .write("payload.txt", "ssh-ed25519 AAAA attacker\n")
        .unwrap();
    files.read("payload.txt").unwrap();
    files.delete("payload.txt").unwrap();
    // The forgery: the delete's record again, pointing outside the
    // workspace, so that rewinding it "re-creates" the attacker's content.
    let journal = data.join("journal.jsonl");
    let text = fs::read_to_string(&journal).unwrap();
    let last = text.lines().last().unwrap();
    let ws_s = ws.to_str().unwrap();
    let forged_root = last
        .replace(
            &format!("{ws_s}/payload.txt"),
            &format!("{}/authorized_keys", outside.display()),
        )
        .replace(ws_s, outside.to_str().unwrap());
    let forged_path = last.replace(
        &format!("{ws_s}/payload.txt"),
        &format!("{ws_s}/../home/authorized_keys"),
    );
    assert_ne!(forged_root, last, "the record names its root and path");
    fs::write(&journal, format!("{text}{forged_root}\n{forged_path}\n")).unwrap();

    match sched.rewind_turn("t1") {
        Err(Error::RewindConflict { conflicts }) => {
            assert!(
                conflicts
                    .iter()
                    .any(|c| c.path.starts_with(&outside) && c.summary.contains("never written")),
                "{conflicts:?}"
            );
            assert!(
                conflicts
                    .iter()
                    .any(|c| c.summary.contains("outside the grant root")),
                "{conflicts:?}"
            );
        }
        other => panic!("expected RewindConflict, got {other:?}"),
    }
    assert!(!outside.join("authorized_keys").exists());
    assert!(
        !ws.join("payload.txt").exists(),
        "nothing at all was touched"
    );
}
