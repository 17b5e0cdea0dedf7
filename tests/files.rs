//! Transactional file operations (SPEC §7, §8): the ops, admission, fault
//! injection at every I/O step, SIGKILL mid-write, and symlink attacks.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use writ::{Actor, Config, Durability, Error, FileOp, Grant, Scheduler, Target, WriteStep};

fn process() -> Config {
    Config::default().durability(Durability::Process)
}

fn setup(config: Config) -> (tempfile::TempDir, Scheduler, Actor) {
    let dir = tempfile::tempdir().unwrap();
    let sched = Scheduler::new(config);
    let actor = sched.actor("agent", Grant::workspace(dir.path())).unwrap();
    (dir, sched, actor)
}

fn temp_leftovers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in walk(dir) {
        let name = entry.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with(".writ-tmp-") {
            found.push(name);
        }
    }
    found
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn public_types_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<writ::Files<'static>>();
    send_sync::<writ::Receipt>();
    send_sync::<writ::ReadMark>();
}

#[test]
fn write_creates_missing_folders_and_reports_a_receipt() {
    let (dir, _sched, a) = setup(process());
    let receipt = a.files().write("deep/er/new.rs", b"fn x() {}\n").unwrap();
    assert_eq!(receipt.op, FileOp::Write);
    assert_eq!(receipt.before, None);
    assert_eq!(receipt.size, 10);
    assert_eq!(
        receipt.path,
        dir.path().canonicalize().unwrap().join("deep/er/new.rs")
    );
    let (_, mark) = a.files().read("deep/er/new.rs").unwrap();
    assert_eq!(receipt.after, Some(mark.sha256));
    assert_eq!(
        std::fs::read(dir.path().join("deep/er/new.rs")).unwrap(),
        b"fn x() {}\n"
    );
    assert!(receipt.to_string().starts_with("created "), "{receipt}");
}

#[test]
fn a_rewrite_keeps_the_files_mode() {
    let (dir, _sched, a) = setup(process());
    let path = dir.path().join("run.sh");
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).unwrap();
    a.files().read("run.sh").unwrap();
    let receipt = a.files().write("run.sh", "#!/bin/sh\necho hi\n").unwrap();
    assert_eq!(receipt.mode, Some(0o751));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o751);
}

#[test]
fn append_and_replace() {
    let (dir, _sched, a) = setup(process());
    let files = a.files();
    files.append("notes.md", "one\n").unwrap();
    files.read("notes.md").unwrap();
    let receipt = files.append("notes.md", "two\n").unwrap();
    assert_eq!(receipt.op, FileOp::Append);
    files.read("notes.md").unwrap();
    // Refused before anything is written.
    assert!(matches!(
        files.replace("notes.md", "three", "3"),
        Err(Error::NoMatch { .. })
    ));
    assert!(matches!(
        files.replace("notes.md", "o", "0"),
        Err(Error::AmbiguousMatch { count: 2, .. })
    ));
    assert!(matches!(
        files.replace("notes.md", "", "x"),
        Err(Error::NoMatch { .. })
    ));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.md")).unwrap(),
        "one\ntwo\n"
    );
    let message = files.replace("notes.md", "o", "0").unwrap_err().to_string();
    assert!(message.contains("2 times"), "{message}");
    files.replace("notes.md", "two", "2").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.md")).unwrap(),
        "one\n2\n"
    );
}

#[test]
fn folders_and_special_files_are_invalid_paths() {
    let (dir, _sched, a) = setup(process());
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/f"), "x").unwrap();
    let files = a.files();
    for result in [
        files.write("sub", "x").map(|_| ()),
        files.append("sub", "x").map(|_| ()),
        files.delete("sub").map(|_| ()),
        files.rename("sub", "sub2").map(|_| ()),
        files.read("sub").map(|_| ()),
        files.write(".", "x").map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(Error::InvalidPath { .. })),
            "{result:?}"
        );
    }
    files.read("sub/f").unwrap();
    assert!(matches!(
        files.rename("sub/f", "sub"),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        files.rename("sub/f", "sub/f"),
        Err(Error::InvalidPath { .. })
    ));
    // A fifo is not a regular file (and opening it must not block).
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        dir.path().join("pipe"),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    assert!(matches!(files.read("pipe"), Err(Error::InvalidPath { .. })));
    assert!(matches!(
        files.write("pipe", "x"),
        Err(Error::InvalidPath { .. })
    ));
    assert!(dir.path().join("sub/f").exists());
}

#[test]
fn delete_and_rename_act_on_a_symlink_itself() {
    let (dir, _sched, a) = setup(process());
    std::fs::write(dir.path().join("target.txt"), "content\n").unwrap();
    std::os::unix::fs::symlink("target.txt", dir.path().join("link")).unwrap();
    // A write through an inside link writes its target (the key is the target).
    a.files().read("link").unwrap();
    let receipt = a.files().write("link", "new\n").unwrap();
    assert!(receipt.path.ends_with("target.txt"));
    assert!(dir.path().join("link").is_symlink());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target.txt")).unwrap(),
        "new\n"
    );
    // Rename moves the link, delete removes it: the target stays.
    a.files().rename("link", "moved").unwrap();
    assert!(dir.path().join("moved").is_symlink());
    a.files().delete("moved").unwrap();
    assert!(!dir.path().join("moved").exists() && !dir.path().join("moved").is_symlink());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target.txt")).unwrap(),
        "new\n"
    );
}

#[test]
fn a_read_only_actor_cannot_write_through_files() {
    let (dir, sched, _a) = setup(process());
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let reader = sched
        .actor("reviewer", Grant::read_only(dir.path()))
        .unwrap();
    let files = reader.files();
    files.read("a.txt").unwrap();
    for result in [
        files.write("a.txt", "y"),
        files.write("new.txt", "y"),
        files.append("a.txt", "y"),
        files.replace("a.txt", "x", "y"),
        files.delete("a.txt"),
        files.rename("a.txt", "b.txt"),
    ] {
        match result {
            Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reviewer"),
            other => panic!("expected ReadOnly, got {other:?}"),
        }
    }
    assert!(!dir.path().join("new.txt").exists());
}

#[test]
fn a_contested_path_is_busy_and_names_the_holder() {
    let (dir, sched, a) = setup(process());
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let other = sched.actor("other", Grant::workspace(dir.path())).unwrap();
    a.files().read("a.txt").unwrap();
    let held = other
        .request(["a.txt"])
        .label("shell: cargo fmt")
        .try_admit()
        .unwrap();
    match a.files().write("a.txt", "y") {
        Err(Error::Busy(busy)) => {
            assert_eq!(busy.holder, "other");
            assert!(busy.to_string().contains("cargo fmt"), "{busy}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    // Reads wait only for writes in progress: a write hold blocks them too.
    assert!(matches!(a.files().read("a.txt"), Err(Error::Busy(_))));
    drop(held);
    a.files().write("a.txt", "y").unwrap();
    // A fence of another actor refuses the write; a read passes through it.
    a.files().read("a.txt").unwrap();
    let fence = other.fence(["a.txt"]).unwrap();
    assert!(matches!(a.files().write("a.txt", "z"), Err(Error::Busy(_))));
    a.files().read("a.txt").unwrap();
    drop(fence);
    a.files().write("a.txt", "z").unwrap();
}

#[test]
fn a_rename_holds_both_ends() {
    let (dir, sched, a) = setup(process());
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let other = sched.actor("other", Grant::workspace(dir.path())).unwrap();
    a.files().read("a.txt").unwrap();
    let held = other.try_admit(["b.txt"]).unwrap();
    assert!(matches!(
        a.files().rename("a.txt", "b.txt"),
        Err(Error::Busy(_))
    ));
    drop(held);
    // While the rename runs, the dump shows one call hold on both paths.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (sched2, seen2) = (sched.clone(), seen.clone());
    let files = a.files().on_write_step(move |_| {
        let dump = sched2.dump();
        for hold in &dump.holds {
            seen2.lock().push((hold.label.clone(), hold.paths.len()));
        }
        Ok(())
    });
    files.rename("a.txt", "b.txt").unwrap();
    let seen = seen.lock();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|(label, n)| label.as_deref() == Some("rename a.txt -> b.txt") && *n == 2),
        "{seen:?}"
    );
}

#[test]
fn writes_are_admitted_with_a_labelled_exclusive_call_hold() {
    let (dir, sched, a) = setup(process());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (sched2, seen2) = (sched.clone(), seen.clone());
    let files = a.files().on_write_step(move |_| {
        for hold in sched2.dump().holds {
            seen2
                .lock()
                .push(format!("{:?} {:?}", hold.kind, hold.label));
        }
        Ok(())
    });
    files.write("src/a.rs", "x").unwrap();
    assert!(
        seen.lock()
            .iter()
            .all(|s| s == "Call Some(\"write src/a.rs\")")
    );
    assert!(!seen.lock().is_empty());
    assert!(sched.dump().holds.is_empty(), "released after the call");
    assert!(dir.path().join("src/a.rs").exists());
}

#[test]
fn file_op_wait_waits_for_the_holder() {
    let (dir, sched, a) = setup(process().file_op_wait(Duration::from_secs(20)));
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let other = sched.actor("other", Grant::workspace(dir.path())).unwrap();
    a.files().read("a.txt").unwrap();
    let held = other.try_admit(["a.txt"]).unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| a.files().write("a.txt", "y"));
        // Release only once the write is queued behind the hold.
        while sched.dump().waiters.is_empty() {
            std::thread::yield_now();
        }
        drop(held);
        writer.join().unwrap().unwrap();
    });
    assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"y");

    // And gives up with Timeout, nothing written.
    let (dir, sched, a) = setup(process().file_op_wait(Duration::from_millis(50)));
    let other = sched.actor("other", Grant::workspace(dir.path())).unwrap();
    let _held = other.try_admit(["b.txt"]).unwrap();
    assert!(matches!(
        a.files().write("b.txt", "y"),
        Err(Error::Timeout { .. })
    ));
    assert!(!dir.path().join("b.txt").exists());
}

#[test]
fn a_fenced_actor_writes_only_inside_its_fence() {
    let dir = tempfile::tempdir().unwrap();
    let sched = Scheduler::new(process());
    let lead = sched.actor("lead", Grant::workspace(dir.path())).unwrap();
    let kid = lead
        .child("parser", Grant::fenced(dir.path(), ["src/parser/"]))
        .unwrap();
    kid.files().write("src/parser/lex.rs", "x").unwrap();
    assert!(matches!(
        kid.files().write("src/main.rs", "x"),
        Err(Error::OutsideFence { .. })
    ));
    // The lead is refused inside the child's fence.
    lead.files().read("src/parser/lex.rs").unwrap();
    assert!(matches!(
        lead.files().write("src/parser/lex.rs", "y"),
        Err(Error::Busy(_))
    ));
}

const STEPS: [WriteStep; 5] = [
    WriteStep::CreateTemp,
    WriteStep::WriteData,
    WriteStep::SyncFile,
    WriteStep::Rename,
    WriteStep::SyncDir,
];

/// Fault injection at every I/O step of a write: the target is entirely old
/// (or, for the folder fsync after the rename, entirely new), never torn, and
/// no temp file is left behind.
#[test]
fn a_failure_at_any_write_step_leaves_old_or_new_and_no_temp() {
    let (dir, _sched, a) = setup(Config::default().durability(Durability::Machine));
    let old = format!("{}MARKER\n", "old content\n".repeat(1000));
    let new = "new content\n".repeat(1500);
    for op in ["write", "append", "replace", "create"] {
        for step in STEPS {
            let name = format!("{op}-{step:?}.txt");
            let path = dir.path().join(&name);
            if op != "create" {
                std::fs::write(&path, &old).unwrap();
                a.files().read(&name).unwrap();
            }
            let files = a.files().on_write_step(move |s| {
                if s == step {
                    Err(std::io::Error::other(format!("injected at {s:?}")))
                } else {
                    Ok(())
                }
            });
            let result = match op {
                "append" => files.append(&name, &new),
                "replace" => files.replace(&name, "MARKER", &new),
                _ => files.write(&name, &new),
            };
            let err = match result {
                Err(Error::Io { source, .. }) => source,
                other => panic!("{op} at {step:?}: expected Io, got {other:?}"),
            };
            assert!(err.to_string().contains("injected"), "{err}");
            let now = std::fs::read(&path).ok();
            let expected_new = match op {
                "append" => Some(format!("{old}{new}").into_bytes()),
                "replace" => Some(old.replacen("MARKER", &new, 1).into_bytes()),
                _ => Some(new.clone().into_bytes()),
            };
            let expected_old = (op != "create").then(|| old.clone().into_bytes());
            if step == WriteStep::SyncDir {
                assert_eq!(now, expected_new, "{op} at {step:?}: the rename happened");
            } else {
                assert_eq!(now, expected_old, "{op} at {step:?}: must be untouched");
            }
            assert_eq!(
                temp_leftovers(dir.path()),
                Vec::<String>::new(),
                "{op} at {step:?}"
            );
        }
    }
    // Delete and rename fail cleanly too.
    std::fs::write(dir.path().join("d.txt"), "keep").unwrap();
    a.files().read("d.txt").unwrap();
    let failing = |step| {
        a.files().on_write_step(move |s| {
            if s == step {
                Err(std::io::Error::other("injected"))
            } else {
                Ok(())
            }
        })
    };
    assert!(matches!(
        failing(WriteStep::Rename).delete("d.txt"),
        Err(Error::Io { .. })
    ));
    assert!(matches!(
        failing(WriteStep::Rename).rename("d.txt", "e.txt"),
        Err(Error::Io { .. })
    ));
    assert_eq!(std::fs::read(dir.path().join("d.txt")).unwrap(), b"keep");
    assert!(!dir.path().join("e.txt").exists());
    // The mark survived the failures: the retry passes.
    a.files().delete("d.txt").unwrap();
}

/// The same content rule for every crash point: a whole file starts with
/// its own length and a fill byte, then repeats that byte.
fn version(n: u64) -> Vec<u8> {
    let fill = b'a' + (n % 26) as u8;
    let len = 48 * 1024 + (n % 7) as usize * 4096;
    let mut out = format!("v{n} {len} {}\n", fill as char).into_bytes();
    out.resize(len, fill);
    out
}

fn is_whole_version(bytes: &[u8]) -> Option<u64> {
    let header_end = bytes.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..header_end]).ok()?;
    let mut parts = header.split(' ');
    let n: u64 = parts.next()?.strip_prefix('v')?.parse().ok()?;
    (version(n) == bytes).then_some(n)
}

const CHILD_ENV: &str = "WRIT_CRASH_CHILD";

/// Not a test on its own: the child process of
/// `a_write_killed_at_any_moment_leaves_old_or_new`. It writes new versions
/// of one file and stops at the step it is told to, or writes in a loop.
#[test]
#[ignore = "run as a child by a_write_killed_at_any_moment_leaves_old_or_new"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let dir = PathBuf::from(parts.next().unwrap());
    let step = parts.next().unwrap().to_string();
    let first: u64 = parts.next().unwrap().parse().unwrap();
    let durability = if step == "loop" {
        Durability::Process
    } else {
        Durability::Machine
    };
    let sched = Scheduler::new(Config::default().durability(durability));
    let actor = sched.actor("child", Grant::workspace(&dir)).unwrap();
    let stop_at = STEPS.into_iter().find(|s| format!("{s:?}") == step);
    let files = actor.files().on_write_step(move |s| {
        if Some(s) == stop_at {
            println!("at {s:?}");
            loop {
                std::thread::park();
            }
        }
        Ok(())
    });
    println!("started");
    for n in first.. {
        files.read("data.bin").unwrap();
        files.write("data.bin", version(n)).unwrap();
        println!("wrote {n}");
    }
}

/// A child killed with SIGKILL at each step of a write, and at arbitrary
/// moments of a write loop: the file is always a whole old or new version.
#[test]
fn a_write_killed_at_any_moment_leaves_old_or_new() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.bin");
    std::fs::write(&data, version(0)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut current = 0u64;
    let mut landed = 0;
    let kills = 120;
    for i in 1..=kills {
        let step = match i % 6 {
            0 => "loop".to_string(),
            k => format!("{:?}", STEPS[k as usize - 1]),
        };
        let first = i * 1000;
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--include-ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(
                CHILD_ENV,
                format!("{}|{step}|{first}", dir.path().display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Wait for the child to reach the kill point: the step it parks at,
        // or (loop) a varying number of completed writes.
        let wanted = if step == "loop" {
            format!("wrote {}", first + i % 3)
        } else {
            format!("at {step}")
        };
        loop {
            let line = lines.next().expect("the child ended early").unwrap();
            if line == wanted {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let bytes = std::fs::read(&data).unwrap();
        let n = is_whole_version(&bytes)
            .unwrap_or_else(|| panic!("kill {i} at {step}: torn file ({} bytes)", bytes.len()));
        match step.as_str() {
            // Killed before the rename: the old version.
            "CreateTemp" | "WriteData" | "SyncFile" | "Rename" => assert_eq!(n, current, "{step}"),
            // Killed after it: the new one.
            "SyncDir" => assert_eq!(n, first, "{step}"),
            _ => assert!(n == current || n >= first, "{step}: {n}"),
        }
        if n != current {
            landed += 1;
        }
        current = n;
    }
    assert!(landed >= kills / 6, "new versions landed {landed} times");
    // Temp files a kill leaves are never the target and carry writ's prefix.
    for path in walk(dir.path()) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name == "data.bin" || name.starts_with(".writ-tmp-"),
            "{name}"
        );
    }
}

#[test]
fn escapes_by_dotdot_absolute_paths_and_symlinks_are_refused() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("s.txt")).unwrap();
    let sched = Scheduler::new(process());
    let a = sched.actor("a", Grant::workspace(&root)).unwrap();
    let files = a.files();
    let outside_secret = outside.join("secret.txt");
    for path in [
        Path::new("../outside/secret.txt"),
        Path::new("out/secret.txt"),
        Path::new("s.txt"),
        Path::new("sub/../../outside/new.txt"),
        outside_secret.as_path(),
    ] {
        assert!(
            matches!(files.read(path), Err(Error::OutsideGrant { .. })),
            "{path:?}"
        );
        assert!(
            matches!(files.write(path, "pwned"), Err(Error::OutsideGrant { .. })),
            "{path:?}"
        );
        assert!(
            matches!(files.append(path, "pwned"), Err(Error::OutsideGrant { .. })),
            "{path:?}"
        );
    }
    // The link itself lies inside: deleting it removes only the link.
    files.delete("s.txt").unwrap();
    assert_eq!(std::fs::read_to_string(&outside_secret).unwrap(), "secret");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    let message = files.write("../x", "y").unwrap_err().to_string();
    assert!(message.contains("outside the workspace"), "{message}");
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::OutsideGrant { .. } => "outside_grant",
        Error::InvalidPath { .. } => "invalid_path",
        Error::NotRead { .. } => "not_read",
        Error::Stale { .. } => "stale",
        Error::NotFound { .. } => "not_found",
        Error::Busy(_) => "busy",
        Error::Io { .. } => "io",
        _ => "other",
    }
}

/// A folder on the way and the file itself are atomically exchanged with
/// symlinks to an outside folder (`renameat2(RENAME_EXCHANGE)`, so the name
/// never goes missing) by another thread while writes run: none lands
/// outside.
#[test]
fn symlinks_swapped_in_during_writes_never_redirect_them() {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::create_dir_all(root.join("e")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("d.link")).unwrap();
    std::fs::write(root.join("e/f.txt"), "v0").unwrap();
    std::os::unix::fs::symlink(outside.join("f.txt"), root.join("e/f.link")).unwrap();
    let sched = Scheduler::new(process());
    let a = sched.actor("a", Grant::workspace(&root)).unwrap();
    let stop = AtomicBool::new(false);
    let swaps = AtomicUsize::new(0);
    let attempts = 10_000;
    let mut landed = 0;
    let mut refused = std::collections::BTreeMap::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            let exchange = |x: &Path, y: &Path| {
                renameat_with(CWD, x, CWD, y, RenameFlags::EXCHANGE).unwrap();
            };
            let (d, d_link) = (root.join("d"), root.join("d.link"));
            let (f, f_link) = (root.join("e/f.txt"), root.join("e/f.link"));
            while !stop.load(Ordering::Relaxed) {
                exchange(&d, &d_link);
                exchange(&f, &f_link);
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
                exchange(&d, &d_link);
                exchange(&f, &f_link);
                std::thread::yield_now();
            }
        });
        let files = a.files();
        for i in 0..attempts {
            let path = if i % 2 == 0 {
                format!("d/new-{}.txt", i % 16)
            } else {
                "e/f.txt".to_string()
            };
            let _ = files.read(&path);
            match files.write(&path, format!("v{i}")) {
                Ok(_) => landed += 1,
                Err(e) => *refused.entry(kind(&e)).or_insert(0) += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let escaped: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
    assert!(escaped.is_empty(), "writes landed outside: {escaped:?}");
    assert!(swaps.load(Ordering::Relaxed) > 0, "the attacker never ran");
    assert!(landed > 0, "no write landed; refusals: {refused:?}");
    eprintln!("landed {landed}, refused {refused:?}");
    assert!(sched.dump().holds.is_empty());
}

#[test]
fn a_reservation_never_bypasses_the_gate() {
    // Holding a reservation does not let an unread write through: the gate
    // runs inside every Files call.
    let (dir, _sched, a) = setup(process());
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let other = _sched.actor("other", Grant::workspace(dir.path())).unwrap();
    assert!(matches!(
        other.files().write("a.txt", "y"),
        Err(Error::NotRead { .. })
    ));
    // And Files goes through admission even for a tree someone fenced.
    let _fence = a.fence([Target::tree("locked")]).unwrap();
    assert!(matches!(
        other.files().write("locked/new.txt", "y"),
        Err(Error::Busy(_))
    ));
    assert!(!dir.path().join("locked").exists());
}
