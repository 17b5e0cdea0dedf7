//! Delegated writers (SPEC §9, §12 "Delegated writers"): fence ownership,
//! process-tree stopping, environment, output, artifacts, refusals.
//!
//! Synchronization never sleeps for a fixed time: tests wait on pids,
//! files the child writes, fence releases and the scheduler's dump, with a
//! bounded deadline only where they wait on the OS.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use writ::delegate::{Change, Run, Sandbox, Status};
use writ::{Actor, Config, Error, Grant, HoldKind, Scheduler, Target};

const GRACE: Duration = Duration::from_millis(150);
const BOUND: Duration = Duration::from_secs(10);

/// The environment test writes the process environment; every other test
/// holds this for reading while it runs, so no spawn reads the environment
/// while it changes.
static ENV: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

struct Ws {
    _env: tokio::sync::RwLockReadGuard<'static, ()>,
    _dir: tempfile::TempDir,
    root: PathBuf,
    sched: Scheduler,
    lead: Actor,
}

async fn ws_with(config: Config) -> Ws {
    let env = ENV.read().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let sched = Scheduler::new(config.session("t"));
    let lead = sched.actor("lead", Grant::workspace(&root)).unwrap();
    Ws {
        _env: env,
        _dir: dir,
        root,
        sched,
        lead,
    }
}

async fn ws() -> Ws {
    ws_with(Config::default()).await
}

fn write(path: impl AsRef<Path>, content: impl AsRef<[u8]>) {
    let path = path.as_ref();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

/// A `/bin/sh -c` run with a short grace and a generous deadline, in a
/// process group only: these tests watch the child's processes by their
/// host pids, which a PID namespace would hide.
fn sh(script: &str) -> Run {
    Run::new("/bin/sh")
        .args(["-c", script])
        .grace(GRACE)
        .timeout(Duration::from_secs(30))
        .sandbox(Sandbox::Off)
}

/// The same run in the bubblewrap sandbox, which must work: the run fails
/// with `Error::Spawn` naming the package to install when it does not.
fn sandboxed(script: &str) -> Run {
    sh(script).sandbox(Sandbox::Required)
}

/// Runs `run`, failing the test with what to install when the sandbox is
/// missing.
async fn delegate_sandboxed(lead: &Actor, run: Run) -> writ::delegate::Report {
    match lead.delegate(run).await {
        Ok(report) => {
            assert!(report.sandboxed, "{report}");
            report
        }
        Err(e @ Error::Spawn { .. }) => panic!(
            "the bubblewrap sandbox is needed for this test: {e} (on Debian: apt-get install -y bubblewrap)"
        ),
        Err(e) => panic!("{e}"),
    }
}

/// Shell: publish `$value` in file `name` atomically (write, then rename).
fn put(name: &str, value: &str) -> String {
    format!("echo {value} > {name}.tmp && mv {name}.tmp {name};")
}

/// Shell: wait (bounded) until the test creates `go` in the run folder.
const WAIT_GO: &str = "i=0; while [ ! -e go ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done;";

/// The process state letter, or `None` when the pid does not exist at all.
fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    stat[close + 1..].split_whitespace().next()?.chars().next()
}

/// Alive, zombies not counted (an orphan's reaper may never reap it).
fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

fn read_pid(path: &Path) -> u32 {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Polls (bounded) for something the OS or the child will make true.
async fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The one run folder under `base/.writ-runs/` holding `file`, once it does.
fn run_file(base: &Path, file: &str) -> Option<PathBuf> {
    fs::read_dir(base.join(".writ-runs"))
        .ok()?
        .flatten()
        .map(|e| e.path().join(file))
        .find(|p| p.exists())
}

fn runs_in(base: &Path) -> Vec<PathBuf> {
    match fs::read_dir(base.join(".writ-runs")) {
        Ok(read) => read.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// The live run actor's name and fenced paths, from the dump.
fn run_in_dump(sched: &Scheduler, prefix: &str) -> Option<(String, Vec<(PathBuf, bool)>)> {
    let dump = sched.dump();
    let actor = dump.actors.iter().find(|a| a.name.starts_with(prefix))?;
    let hold = dump
        .holds
        .iter()
        .find(|h| h.actor == actor.name && h.kind == HoldKind::Fence)?;
    Some((
        actor.name.clone(),
        hold.paths
            .iter()
            .map(|p| (p.path.clone(), p.tree))
            .collect(),
    ))
}

fn assert_idle(w: &Ws) {
    let dump = w.sched.dump();
    assert!(dump.holds.is_empty(), "holds left: {:?}", dump.holds);
    assert_eq!(dump.actors.len(), 1, "actors left: {:?}", dump.actors);
}

fn changes(report: &writ::delegate::Report) -> Vec<(String, Change)> {
    report
        .artifacts
        .iter()
        .map(|a| (a.path.display().to_string(), a.change.clone()))
        .collect()
}

// ---------------------------------------------------------------- process tree

#[tokio::test]
async fn helpers_a_launcher_left_behind_are_stopped_after_it_exits() {
    let w = ws().await;
    let script = format!(
        "(sleep 0.5; echo leaked > ../../sentinel) & {} {} exit 0",
        put("helper.pid", "$!"),
        put("leader.pid", "$$")
    );
    let grace = Duration::from_secs(5);
    let report = w.lead.delegate(sh(&script).grace(grace)).await.unwrap();
    assert_eq!(report.status, Status::Completed, "{report}");
    assert_eq!(report.exit_code, Some(0));
    let run_dir = w.root.join(&report.run_dir);
    let helper = read_pid(&run_dir.join("helper.pid"));
    let leader = read_pid(&run_dir.join("leader.pid"));
    assert!(!alive(helper), "the helper outlived the run");
    assert_eq!(
        state(leader),
        None,
        "the leader is reaped, not left a zombie"
    );
    assert!(!w.root.join("sentinel").exists());
    assert!(
        report.duration < grace,
        "helpers that die on SIGTERM do not cost the grace ({:?})",
        report.duration
    );
    assert_idle(&w);
}

#[tokio::test]
async fn helpers_that_ignore_sigterm_get_sigkill_after_the_grace() {
    let w = ws().await;
    // The leader leaves only once the helper ignores SIGTERM: on a busy
    // machine the helper may not have run its `trap` yet when the leader
    // exits, and SIGTERM would end it before any grace.
    let script = format!(
        "(trap '' TERM; : > trapped; while :; do sleep 0.05; done) & {} \
         i=0; while [ ! -e trapped ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; exit 0",
        put("helper.pid", "$!")
    );
    let report = w.lead.delegate(sh(&script)).await.unwrap();
    assert_eq!(report.status, Status::Completed);
    let helper = read_pid(&w.root.join(&report.run_dir).join("helper.pid"));
    assert!(!alive(helper), "the helper survived SIGKILL");
    assert!(report.duration >= GRACE, "SIGKILL came before the grace");
    let log = fs::read_to_string(w.root.join(&report.log)).unwrap();
    assert!(log.contains("SIGKILL after the grace"), "{log}");
}

#[tokio::test]
async fn the_deadline_stops_the_whole_tree() {
    let w = ws().await;
    let script = format!(
        "(sleep 30; echo leaked > ../../sentinel) & {} {} sleep 30",
        put("helper.pid", "$!"),
        put("leader.pid", "$$")
    );
    let timeout = Duration::from_secs(1);
    let started = Instant::now();
    let report = w.lead.delegate(sh(&script).timeout(timeout)).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(report.status, Status::TimedOut, "{report}");
    assert_eq!(report.exit_code, None);
    assert_eq!(report.signal, Some(15), "SIGTERM ended the leader");
    assert!(elapsed >= timeout);
    assert!(
        elapsed < timeout + 2 * GRACE + Duration::from_secs(2),
        "{elapsed:?}"
    );
    let run_dir = w.root.join(&report.run_dir);
    assert!(!alive(read_pid(&run_dir.join("helper.pid"))));
    assert_eq!(state(read_pid(&run_dir.join("leader.pid"))), None);
    assert!(!w.root.join("sentinel").exists());
    assert_idle(&w);
}

#[tokio::test]
async fn dropping_the_run_stops_the_tree_then_releases_the_fence() {
    let w = ws().await;
    let script = format!(
        "(sleep 30; echo leaked > ../../sentinel) & {} {} sleep 30",
        put("helper.pid", "$!"),
        put("leader.pid", "$$")
    );
    let run = w.lead.delegate(sh(&script));
    let leader_file = tokio::select! {
        r = run => panic!("the run ended: {r:?}"),
        f = async {
            wait_until("the leader's pid", || run_file(&w.root, "leader.pid").is_some()).await;
            run_file(&w.root, "leader.pid").unwrap()
        } => f,
    }; // the run's future is dropped here
    let run_dir = leader_file.parent().unwrap().to_path_buf();
    let helper = read_pid(&run_dir.join("helper.pid"));
    let leader = read_pid(&leader_file);
    // The fence is released only once the tree is stopped: waiting for it
    // is waiting for the cleanup.
    let after = w
        .lead
        .admit_timeout([Target::tree(&run_dir)], BOUND)
        .await
        .expect("the fence was released");
    assert!(!alive(helper), "the helper outlived the cancelled run");
    assert_eq!(
        state(leader),
        None,
        "the leader is reaped, not left a zombie"
    );
    let log = fs::read_to_string(run_dir.join("output.log")).unwrap();
    assert!(log.contains("status: cancelled"), "{log}");
    assert!(!w.root.join("sentinel").exists());
    drop(after);
    assert_idle(&w);
}

#[tokio::test]
async fn while_a_dropped_run_stops_the_dump_says_cancelled() {
    let w = ws().await;
    // A helper that ignores SIGTERM keeps the group alive for the grace.
    let script = format!(
        "(trap '' TERM; while :; do sleep 0.05; done) & {} sleep 30",
        put("helper.pid", "$!")
    );
    let run = w.lead.delegate(sh(&script).grace(Duration::from_secs(1)));
    let helper_file = tokio::select! {
        r = run => panic!("the run ended: {r:?}"),
        f = async {
            wait_until("the helper's pid", || run_file(&w.root, "helper.pid").is_some()).await;
            run_file(&w.root, "helper.pid").unwrap()
        } => f,
    };
    let dump = w.sched.dump();
    let marker = dump
        .holds
        .iter()
        .find(|h| h.actor.starts_with("lead/run-") && h.kind == HoldKind::Call)
        .unwrap_or_else(|| panic!("no cancellation marker in\n{dump}"));
    assert_eq!(
        marker.label.as_deref(),
        Some("cancelled: stopping the process tree")
    );
    let run_dir = helper_file.parent().unwrap();
    let _released = w
        .lead
        .admit_timeout([Target::tree(run_dir)], BOUND)
        .await
        .unwrap();
    assert!(!alive(read_pid(&helper_file)), "SIGKILL after the grace");
}

#[tokio::test]
async fn a_process_that_left_the_group_cannot_hold_the_run_past_its_deadline() {
    let w = ws().await;
    // The escapee starts its own session and keeps stdout and stderr open.
    let script = format!(
        "setsid sh -c '{} exec sleep 30' & sleep 30",
        put("escapee.pid", "$$")
    );
    let timeout = Duration::from_secs(1);
    let started = Instant::now();
    let report = w.lead.delegate(sh(&script).timeout(timeout)).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(report.status, Status::TimedOut);
    assert!(
        elapsed < timeout + 3 * GRACE + Duration::from_secs(2),
        "the open pipe held the run: {elapsed:?}"
    );
    assert!(
        report.notes.iter().any(|n| n.contains("abandoned")),
        "{report}"
    );
    let escapee = read_pid(&w.root.join(&report.run_dir).join("escapee.pid"));
    // Documented limit: only the group is stopped.
    assert!(alive(escapee), "an escapee is not killed");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(escapee as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

#[tokio::test]
async fn a_process_that_left_the_group_cannot_hold_a_finished_run() {
    let w = ws().await;
    let script = format!(
        "setsid sh -c '{} exec sleep 30' & while [ ! -e escapee.pid ]; do sleep 0.01; done; exit 0",
        put("escapee.pid", "$$")
    );
    let report = w.lead.delegate(sh(&script)).await.unwrap();
    assert_eq!(report.status, Status::Completed);
    assert!(
        report.duration < Duration::from_secs(5),
        "{:?}",
        report.duration
    );
    let escapee = read_pid(&w.root.join(&report.run_dir).join("escapee.pid"));
    assert!(alive(escapee));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(escapee as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

#[tokio::test]
async fn exit_codes_and_signals_decide_the_status() {
    let w = ws().await;
    let failed = w.lead.delegate(sh("echo oops >&2; exit 3")).await.unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!((failed.exit_code, failed.signal), (Some(3), None));
    assert!(failed.output_tail.contains("oops"));
    let killed = w.lead.delegate(sh("kill -9 $$")).await.unwrap();
    assert_eq!(killed.status, Status::Failed);
    assert_eq!((killed.exit_code, killed.signal), (None, Some(9)));
    assert!(killed.to_string().contains("ended by signal 9"), "{killed}");
}

#[tokio::test]
async fn a_sandboxed_run_ended_by_a_signal_is_reported_as_one() {
    let w = ws().await;
    let killed = delegate_sandboxed(&w.lead, sandboxed("kill -9 $$")).await;
    assert!(killed.sandboxed, "{killed}");
    assert_eq!(killed.status, Status::Failed);
    assert_eq!(
        (killed.exit_code, killed.signal),
        (None, Some(9)),
        "{killed}"
    );
    assert!(killed.to_string().contains("ended by signal 9"), "{killed}");
    let failed = delegate_sandboxed(&w.lead, sandboxed("exit 3")).await;
    assert_eq!(
        (failed.exit_code, failed.signal),
        (Some(3), None),
        "{failed}"
    );
}

// ------------------------------------------------------------ environment

#[tokio::test]
async fn the_environment_is_the_whitelist_plus_what_the_caller_passes() {
    let _env = ENV.write().await;
    let vars = [
        ("WRIT_TEST_SECRET", "hunter2"),
        ("ANTHROPIC_API_KEY", "sk-secret"),
        ("WRIT_TEST_PROXY", "http://proxy:3128"),
        ("LC_WRIT_TEST", "lc"),
        ("XDG_WRIT_TEST", "xdg"),
    ];
    for (k, v) in vars {
        // SAFETY: every other test in this binary holds `ENV` for reading
        // while it runs, so no other thread reads or writes the environment
        // while this write lock is held.
        unsafe { std::env::set_var(k, v) };
    }
    let dir = tempfile::tempdir().unwrap();
    let sched = Scheduler::new(Config::default());
    let lead = sched.actor("lead", Grant::workspace(dir.path())).unwrap();
    let report = lead
        .delegate(
            Run::new("env")
                .inherit("WRIT_TEST_PROXY")
                .inherit("WRIT_TEST_UNSET")
                .env("WRIT_EXTRA", "1")
                .env("HOME", "/tmp/agent-home"),
        )
        .await;
    for (k, _) in vars {
        // SAFETY: as above.
        unsafe { std::env::remove_var(k) };
    }
    let report = report.unwrap();
    let child: BTreeMap<&str, &str> = report
        .output_tail
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    assert!(!child.contains_key("WRIT_TEST_SECRET"), "{child:?}");
    assert!(!child.contains_key("ANTHROPIC_API_KEY"));
    assert!(
        !child.contains_key("CARGO_MANIFEST_DIR"),
        "cargo's variables stay out"
    );
    assert!(!child.contains_key("WRIT_TEST_UNSET"));
    assert_eq!(child.get("WRIT_TEST_PROXY"), Some(&"http://proxy:3128"));
    assert_eq!(child.get("WRIT_EXTRA"), Some(&"1"));
    assert_eq!(
        child.get("HOME"),
        Some(&"/tmp/agent-home"),
        "explicit values win"
    );
    assert_eq!(child.get("LC_WRIT_TEST"), Some(&"lc"));
    assert_eq!(child.get("XDG_WRIT_TEST"), Some(&"xdg"));
    assert_eq!(
        child.get("PATH").copied(),
        std::env::var("PATH").ok().as_deref()
    );
    let allowed = [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "TERM",
        "TZ",
        "TMPDIR",
        "WRIT_TEST_PROXY",
        "WRIT_EXTRA",
    ];
    for (name, value) in &child {
        // bwrap always tells the child its working folder, the run folder.
        let pwd = *name == "PWD"
            && report.sandboxed
            && Path::new(value) == dir.path().canonicalize().unwrap().join(&report.run_dir);
        assert!(
            allowed.contains(name) || name.starts_with("LC_") || name.starts_with("XDG_") || pwd,
            "{name} reached the child"
        );
    }
}

// ------------------------------------------------------------ output, task

#[tokio::test]
async fn the_task_arrives_on_stdin_and_in_task_md_and_the_child_runs_in_its_folder() {
    let w = ws().await;
    let task = "Fix the lexer.\nKeep raw strings.\n";
    let report = w
        .lead
        .delegate(sh("cat > got.txt; pwd -P > cwd.txt").task(task))
        .await
        .unwrap();
    let run_dir = w.root.join(&report.run_dir);
    assert!(report.run_dir.starts_with(".writ-runs"));
    let name = report.run_dir.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("t-lead-"),
        "<session>-<actor>-<id>: {name}"
    );
    assert_eq!(fs::read_to_string(run_dir.join("got.txt")).unwrap(), task);
    assert_eq!(fs::read_to_string(run_dir.join("TASK.md")).unwrap(), task);
    assert_eq!(
        fs::read_to_string(run_dir.join("cwd.txt")).unwrap().trim(),
        run_dir.to_str().unwrap()
    );
    assert_eq!(report.log, report.run_dir.join("output.log"));
    // Bookkeeping files are not artifacts; what the child wrote is.
    let paths: Vec<_> = changes(&report).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            report.run_dir.join("cwd.txt").display().to_string(),
            report.run_dir.join("got.txt").display().to_string()
        ]
    );
}

#[tokio::test]
async fn the_tail_is_bounded_and_whole_characters_while_the_log_keeps_everything() {
    let w = ws().await;
    let body = "é".repeat(60_000) + "\nEND\n";
    write(w.root.join("big.txt"), &body);
    let report = w
        .lead
        .delegate(sh("cat ../../big.txt; echo to-stderr >&2").tail(1001))
        .await
        .unwrap();
    assert!(report.output_tail.len() <= 1001);
    assert!(
        !report.output_tail.contains('\u{fffd}'),
        "a character was cut"
    );
    // stdout and stderr are separate pipes, read as data arrives: which of
    // the two last lines is read last is up to the scheduler.
    let tail = &report.output_tail;
    assert!(
        tail.ends_with("END\nto-stderr\n") || tail.ends_with("END\n"),
        "the tail ends with the last output: {:?}",
        tail.chars().rev().take(20).collect::<String>()
    );
    assert_eq!(report.output_bytes, body.len() as u64 + 10);
    // The stderr line (one small write) may land between any two stdout
    // chunks; without it the log is stdout, byte for byte.
    let mut log = fs::read(w.root.join(&report.log)).unwrap();
    let stderr_at = log
        .windows(10)
        .position(|bytes| bytes == b"to-stderr\n")
        .expect("the log keeps stderr");
    log.drain(stderr_at..stderr_at + 10);
    assert!(log.starts_with(body.as_bytes()), "the log keeps everything");
    let log = String::from_utf8_lossy(&log);
    assert!(log.contains("[writ] status: completed (exit code 0)"));
}

// ------------------------------------------------------------ artifacts

fn git(root: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test]
async fn artifacts_are_the_difference_the_run_made() {
    let w = ws().await;
    let p = w.root.join("proj");
    for (name, content) in [
        ("keep.txt", "keep"),
        ("edit.txt", "one"),
        ("gone.txt", "gone"),
        ("old.txt", "rename me"),
        ("copy-src.txt", "copied content"),
        ("dirty.txt", "clean"),
        ("same.txt", "abcd"),
        ("touched.txt", "same"),
        ("chmod.txt", "mode"),
        ("x.txt", "xxxxx"),
    ] {
        write(p.join(name), content);
    }
    let have_git = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok();
    if have_git {
        write(w.root.join(".gitignore"), ".writ-runs/\n");
        git(&w.root, &["init", "-q"]);
        git(&w.root, &["config", "user.email", "t@example.com"]);
        git(&w.root, &["config", "user.name", "t"]);
        git(&w.root, &["config", "commit.gpgsign", "false"]);
        git(&w.root, &["add", "-A"]);
        git(&w.root, &["commit", "-qm", "base"]);
    } else {
        println!("note: git is not installed; the commit check is skipped");
    }
    // Dirty before the run (uncommitted), then changed again by it.
    write(p.join("dirty.txt"), "dirty");
    let script = r#"
        P=../../proj
        printf two > $P/edit.txt
        rm $P/gone.txt
        mv $P/old.txt $P/new.txt
        cp $P/copy-src.txt $P/copy-dst.txt && rm $P/copy-src.txt
        printf dirtier > $P/dirty.txt
        touch -r $P/same.txt stamp; printf wxyz > $P/same.txt; touch -r stamp $P/same.txt
        touch $P/touched.txt
        chmod 600 $P/chmod.txt
        rm $P/x.txt; printf yyyyy > $P/y.txt
        mkdir -p $P/newdir/sub && echo n > $P/newdir/sub/f.txt
        echo notes > notes.md
        if command -v git >/dev/null; then git -C $P add edit.txt && git -C $P commit -qm 'agent: edit'; fi
    "#;
    let report = w
        .lead
        .delegate(sh(script).project_dir("proj"))
        .await
        .unwrap();
    assert_eq!(report.status, Status::Completed, "{report}");
    let run = report.run_dir.display().to_string();
    let from = |p: &str| Change::Renamed { from: p.into() };
    let expected = vec![
        (format!("{run}/notes.md"), Change::Created),
        (format!("{run}/stamp"), Change::Created),
        ("proj/copy-dst.txt".into(), from("proj/copy-src.txt")),
        ("proj/dirty.txt".into(), Change::Modified),
        ("proj/edit.txt".into(), Change::Modified),
        ("proj/gone.txt".into(), Change::Deleted),
        ("proj/new.txt".into(), from("proj/old.txt")),
        ("proj/newdir/sub/f.txt".into(), Change::Created),
        ("proj/same.txt".into(), Change::Modified),
        // Never a rename, even if the file system reuses x.txt's inode.
        ("proj/x.txt".into(), Change::Deleted),
        ("proj/y.txt".into(), Change::Created),
    ];
    assert_eq!(changes(&report), expected, "{report}");
    assert!(report.artifacts.iter().all(|a| a.path.is_relative()));
    assert!(report.run_dir.is_relative() && report.log.is_relative());
    assert!(!report.scan_truncated);
    if have_git {
        let summaries: Vec<_> = report.commits.iter().map(|c| c.summary.as_str()).collect();
        assert_eq!(summaries, ["agent: edit"]);
        assert_eq!(report.commits[0].id.len(), 40);
    }
    let text = report.to_string();
    assert!(
        text.contains("renamed   proj/old.txt -> proj/new.txt"),
        "{text}"
    );
    assert!(text.contains("completed with exit code 0"), "{text}");
    assert!(
        !text.contains(w.root.to_str().unwrap()),
        "no host paths: {text}"
    );
}

/// Waits until the file system's clock has moved past every timestamp under
/// `dir`, so none of its files counts as racy.
async fn let_the_clock_tick(dir: &Path) {
    let newest = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (m.ctime(), m.ctime_nsec())
        })
        .max()
        .unwrap();
    let probe = dir.parent().unwrap().join("probe");
    wait_until("the file system clock", || {
        fs::write(&probe, "").unwrap();
        let m = fs::metadata(&probe).unwrap();
        (m.ctime(), m.ctime_nsec()) > newest
    })
    .await;
    fs::remove_file(probe).unwrap();
}

#[tokio::test]
async fn stat_decides_unchanged_files_without_hashing_them() {
    let w = ws().await;
    let p = w.root.join("proj");
    for i in 0..50 {
        write(p.join(format!("f{i:02}")), [b'a'; 1024]);
    }
    let_the_clock_tick(&p).await;
    let report = w
        .lead
        .delegate(sh("printf b >> ../../proj/f07; touch ../../proj/f08; head -c 1024 /dev/zero | tr '\\0' a > ../../proj/f09").project_dir("proj"))
        .await
        .unwrap();
    // f07 grew (size decides), f08 only touched (hash says unchanged), f09
    // rewritten with identical content (hash says unchanged).
    assert_eq!(changes(&report), [("proj/f07".into(), Change::Modified)]);
    assert_eq!(report.scan.hashed_before, 50 * 1024);
    assert_eq!(
        report.scan.hashed_after,
        2 * 1024,
        "only f08 and f09, whose stat changed but not their size, are hashed again"
    );
}

#[tokio::test]
async fn a_large_tree_is_scanned_only_up_to_the_bound_and_says_so() {
    let w = ws().await;
    let p = w.root.join("proj");
    for d in 0..30 {
        let dir = p.join(format!("d{d:02}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("f{f:03}")), "x").unwrap();
        }
    }
    let report = w
        .lead
        .delegate(
            sh("echo y > ../../proj/d00/f001; echo y > ../../proj/d29/f099")
                .project_dir("proj")
                .scan_limits(200, u64::MAX),
        )
        .await
        .unwrap();
    assert!(report.scan_truncated);
    assert!(report.scan.entries_before <= 200, "{:?}", report.scan);
    assert!(report.scan.entries_after <= 200, "{:?}", report.scan);
    // The walk stopped early (3000+ entries exist); what it saw is reported,
    // and nothing past the bound is invented or listed.
    assert_eq!(
        changes(&report),
        [("proj/d00/f001".into(), Change::Modified)]
    );
    assert!(report.to_string().contains("stopped at its bound"));
}

#[tokio::test]
async fn the_byte_bound_stops_hashing_while_walking() {
    let w = ws().await;
    for i in 0..10 {
        write(w.root.join(format!("proj/f{i}")), [0u8; 10 * 1024]);
    }
    let report = w
        .lead
        .delegate(
            sh("true")
                .project_dir("proj")
                .scan_limits(usize::MAX, 25 * 1024),
        )
        .await
        .unwrap();
    assert!(report.scan_truncated);
    assert_eq!(report.scan.hashed_before, 20 * 1024);
}

// ------------------------------------------------------------ the fence

#[tokio::test]
async fn the_run_fences_its_folder_and_project_folders_for_the_whole_run() {
    let w = ws().await;
    write(w.root.join("src/a.rs"), "fn a() {}");
    let sibling = w.lead.child("sibling", Grant::workspace(&w.root)).unwrap();
    let script = format!("{WAIT_GO} echo done");
    let run = w.lead.delegate(sh(&script).project_dir("src"));
    let checks = async {
        wait_until("the run actor", || {
            run_in_dump(&w.sched, "lead/run-").is_some()
        })
        .await;
        let (name, paths) = run_in_dump(&w.sched, "lead/run-").unwrap();
        let dump = w.sched.dump();
        let run_actor = dump.actors.iter().find(|a| a.name == name).unwrap();
        assert_eq!(run_actor.parent, Some(w.lead.id()));
        let run_dir = paths
            .iter()
            .find(|(p, _)| p.starts_with(w.root.join(".writ-runs")))
            .map(|(p, _)| p.clone())
            .unwrap();
        assert!(paths.contains(&(run_dir.clone(), true)), "{paths:?}");
        assert!(paths.contains(&(w.root.join("src"), true)), "{paths:?}");
        assert!(w.sched.dump().to_string().contains(&name));

        // Everyone else, the delegating actor included, is refused.
        for (who, target) in [
            (&sibling, PathBuf::from("src/a.rs")),
            (&sibling, run_dir.join("x.txt")),
            (&w.lead, PathBuf::from("src/a.rs")),
        ] {
            match who.try_admit([target.as_path()]) {
                Err(Error::Busy(busy)) => assert_eq!(busy.holder, name),
                other => panic!("{} was admitted to {target:?}: {other:?}", who.name()),
            }
        }
        assert!(sibling.try_admit(["elsewhere.txt"]).is_ok());
        assert!(
            sibling
                .try_admit([Target::file("src/a.rs").shared()])
                .is_ok(),
            "reads pass through fences"
        );
        // A second run on the same project folder is refused, creating nothing.
        match w.lead.delegate(sh("true").project_dir("src")).await {
            Err(Error::Busy(busy)) => assert_eq!(busy.holder, name),
            other => panic!("expected Busy, got {other:?}"),
        }
        assert_eq!(runs_in(&w.root).len(), 1);
        fs::write(run_dir.join("go"), "").unwrap();
    };
    let (report, ()) = tokio::join!(run, checks);
    let report = report.unwrap();
    assert_eq!(report.status, Status::Completed, "{report}");
    assert!(
        sibling.try_admit(["src/a.rs"]).is_ok(),
        "released after the run"
    );
    assert!(w.lead.try_admit(["src/a.rs"]).is_ok());
    assert!(run_in_dump(&w.sched, "lead/run-").is_none());
}

#[tokio::test]
async fn every_run_gets_its_own_folder() {
    let w = ws().await;
    let (a, b) = tokio::join!(w.lead.delegate(sh("true")), w.lead.delegate(sh("true")));
    let (a, b) = (a.unwrap(), b.unwrap());
    let c = w.lead.delegate(sh("true")).await.unwrap();
    assert_ne!(a.run_dir, b.run_dir);
    assert_ne!(a.run_dir, c.run_dir);
    assert_ne!(b.run_dir, c.run_dir);
    assert_ne!(a.actor, b.actor);
    assert_eq!(runs_in(&w.root).len(), 3);
}

#[tokio::test]
async fn a_run_folder_left_by_an_earlier_process_is_never_reused() {
    let w = ws().await;
    // Ids restart in every process; a fixed session name meets old folders.
    for id in 1..=300 {
        write(
            w.root.join(format!(".writ-runs/t-lead-{id}/TASK.md")),
            "an old task",
        );
    }
    let report = w.lead.delegate(sh("true").task("new")).await.unwrap();
    let id: u64 = report
        .run_dir
        .to_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(id > 300, "{:?}", report.run_dir);
    for id in 1..=300 {
        let old = w.root.join(format!(".writ-runs/t-lead-{id}/TASK.md"));
        assert_eq!(fs::read_to_string(old).unwrap(), "an old task");
    }
}

#[tokio::test]
async fn a_contested_fence_starts_nothing() {
    let w = ws().await;
    fs::create_dir(w.root.join("src")).unwrap();
    let sibling = w.lead.child("sibling", Grant::workspace(&w.root)).unwrap();
    let _fence = sibling.fence(["src/"]).unwrap();
    match w
        .lead
        .delegate(sh("touch ../../started").project_dir("src"))
        .await
    {
        Err(Error::Busy(busy)) => assert_eq!(busy.holder, "sibling"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(!w.root.join("started").exists(), "the command never ran");
    assert!(!w.root.join(".writ-runs").exists(), "nothing was created");
    assert_eq!(w.sched.dump().holds.len(), 1, "only the sibling's fence");
}

#[tokio::test]
async fn a_fenced_actor_delegates_inside_its_own_fence_only() {
    let w = ws().await;
    fs::create_dir_all(w.root.join("src/p")).unwrap();
    fs::create_dir_all(w.root.join("docs")).unwrap();
    let parser = w
        .lead
        .child("parser", Grant::fenced(&w.root, ["src/"]))
        .unwrap();
    let report = parser
        .delegate(sh("echo x > ../../p/new.rs").project_dir("src/p"))
        .await
        .unwrap();
    assert!(
        report.run_dir.starts_with("src/.writ-runs"),
        "{:?}",
        report.run_dir
    );
    assert!(report.actor.starts_with("parser/run-"));
    assert_eq!(changes(&report), [("src/p/new.rs".into(), Change::Created)]);
    match parser.delegate(sh("true").project_dir("docs")).await {
        Err(Error::OutsideFence { .. }) => {}
        other => panic!("expected OutsideFence, got {other:?}"),
    }
    assert_eq!(runs_in(&w.root.join("src")).len(), 1, "nothing created");
    assert!(runs_in(&w.root).is_empty());
}

#[tokio::test]
async fn the_whole_root_can_be_the_project_folder() {
    let w = ws().await;
    write(w.root.join("README.md"), "old");
    let report = w
        .lead
        .delegate(sh("echo new > ../../README.md").project_dir("."))
        .await
        .unwrap();
    // The run folder lies inside the project folder: walked once, and its
    // bookkeeping files are still not artifacts.
    assert_eq!(changes(&report), [("README.md".into(), Change::Modified)]);
}

#[tokio::test]
async fn a_read_only_actor_cannot_delegate() {
    let w = ws().await;
    let reader = w.lead.child("reader", Grant::read_only(&w.root)).unwrap();
    match reader.delegate(sh("true")).await {
        Err(Error::ReadOnly { .. }) => {}
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    assert!(runs_in(&w.root).is_empty());
}

#[tokio::test]
async fn a_run_counts_against_slot_limits() {
    let w = ws_with(Config::default().max_actors(1)).await;
    let _kid = w.lead.child("kid", Grant::read_only(&w.root)).unwrap();
    match w.lead.delegate(sh("true")).await {
        Err(Error::NoSlot { .. }) => {}
        other => panic!("expected NoSlot, got {other:?}"),
    }
    assert!(runs_in(&w.root).is_empty());
}

// ------------------------------------------------------------ refusals

#[tokio::test]
async fn a_command_that_cannot_start_is_an_error_leaving_nothing_behind() {
    let w = ws().await;
    // Not found: refused before anything is taken.
    match w.lead.delegate(Run::new("/no/such/agent")).await {
        Err(Error::Spawn { program, reason }) => {
            assert_eq!(program, "/no/such/agent");
            assert!(reason.contains("does not exist"), "{reason}");
        }
        other => panic!("expected Spawn, got {other:?}"),
    }
    match w.lead.delegate(Run::new("no-such-agent-on-path")).await {
        Err(Error::Spawn { reason, .. }) => assert!(reason.contains("PATH"), "{reason}"),
        other => panic!("expected Spawn, got {other:?}"),
    }
    // Found and executable, but the OS cannot run it: fails at the spawn,
    // after the fence and the folder were made, and undoes both.
    let bogus = w.root.join("bogus-agent");
    fs::write(&bogus, b"\x7fELF not really").unwrap();
    fs::set_permissions(&bogus, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    match w.lead.delegate(Run::new("bogus-agent")).await {
        Err(Error::Spawn { program, .. }) => assert_eq!(program, "bogus-agent"),
        other => panic!("expected Spawn, got {other:?}"),
    }
    match w.lead.delegate(Run::new("/bin/sh").env("A=B", "x")).await {
        Err(Error::Spawn { reason, .. }) => assert!(reason.contains("invalid")),
        other => panic!("expected Spawn, got {other:?}"),
    }
    assert!(
        !w.root.join(".writ-runs").exists(),
        "nothing is created on disk"
    );
    assert_idle(&w);
    assert_eq!(
        w.sched.dump().counters.refused,
        0,
        "no fence was ever contested"
    );
}

#[tokio::test]
async fn bad_project_folders_are_refused_before_anything_is_taken() {
    let w = ws().await;
    write(w.root.join("file.txt"), "x");
    for (dir, expect) in [
        ("missing", "does not exist"),
        ("file.txt", "must be a folder"),
    ] {
        match w.lead.delegate(sh("true").project_dir(dir)).await {
            Err(Error::InvalidPath { reason, .. }) => assert!(reason.contains(expect), "{reason}"),
            other => panic!("expected InvalidPath for {dir}, got {other:?}"),
        }
    }
    match w.lead.delegate(sh("true").project_dir("../outside")).await {
        Err(Error::OutsideGrant { .. }) => {}
        other => panic!("expected OutsideGrant, got {other:?}"),
    }
    assert!(!w.root.join(".writ-runs").exists());
    assert_idle(&w);
}

#[test]
fn the_run_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let _env = ENV.blocking_read();
    let dir = tempfile::tempdir().unwrap();
    let sched = Scheduler::new(Config::default());
    let lead = sched.actor("lead", Grant::workspace(dir.path())).unwrap();
    let future = lead.delegate(Run::new("true"));
    assert_send(&future);
}

// ---------------------------------------------------------------- attacks (SPEC §9)

/// Host processes whose working directory lies in `dir` (zombies have none).
fn processes_in(dir: &Path) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}

/// A `NAME=value` of this process's own environment that a child must not
/// see (not on the whitelist).
fn orchestrator_secret() -> String {
    let environ = fs::read("/proc/self/environ").unwrap();
    let whitelisted = |name: &str| {
        [
            "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "TMPDIR",
        ]
        .contains(&name)
            || name.starts_with("LC_")
            || name.starts_with("XDG_")
    };
    environ
        .split(|&b| b == 0)
        .filter_map(|var| std::str::from_utf8(var).ok())
        .find(|var| {
            var.split_once('=')
                .is_some_and(|(name, value)| !whitelisted(name) && value.len() >= 3)
        })
        .expect("the test process has a variable outside the whitelist (cargo sets CARGO_*)")
        .to_string()
}

const READ_ENVIRONS: &str = "cat /proc/$PPID/environ > parent.env 2>/dev/null; \
    for f in /proc/[0-9]*/environ; do cat \"$f\"; echo; done > all.env 2>/dev/null; true";

#[tokio::test]
async fn attack_2_a_sandboxed_child_cannot_read_the_orchestrators_environment() {
    let w = ws().await;
    let secret = orchestrator_secret();
    let seen = |report: &writ::delegate::Report| {
        let dir = w.root.join(&report.run_dir);
        let mut all = fs::read(dir.join("parent.env")).unwrap_or_default();
        all.extend(fs::read(dir.join("all.env")).unwrap_or_default());
        all.split(|&b| b == 0 || b == b'\n')
            .any(|var| var == secret.as_bytes())
    };
    // Without the sandbox the attack works: the reason the sandbox exists.
    let open = w.lead.delegate(sh(READ_ENVIRONS)).await.unwrap();
    assert!(!open.sandboxed);
    assert!(
        seen(&open),
        "the unsandboxed child read the parent's environment"
    );
    let report = delegate_sandboxed(&w.lead, sandboxed(READ_ENVIRONS)).await;
    assert_eq!(report.status, Status::Completed, "{report}");
    assert!(!seen(&report), "the sandboxed child read '{secret}'");
}

#[tokio::test]
async fn attack_3_a_setsid_escapee_ends_with_the_sandboxed_run() {
    let w = ws().await;
    fs::create_dir(w.root.join("src")).unwrap();
    // The escapee leaves the group and the session and keeps writing; the
    // leader exits as soon as it has started.
    let script = "setsid sh -c 'while :; do echo x >> ../../src/late.txt; sleep 0.02; done' \
                  </dev/null >/dev/null 2>&1 & \
                  (sh -c 'sleep 30 & exit 0') ; \
                  while [ ! -s ../../src/late.txt ]; do sleep 0.01; done; exit 0";
    let report = delegate_sandboxed(&w.lead, sandboxed(script).project_dir("src")).await;
    assert_eq!(report.status, Status::Completed, "{report}");
    let run_dir = w.root.join(&report.run_dir);
    assert_eq!(
        processes_in(&run_dir),
        Vec::<u32>::new(),
        "processes of the run outlived it"
    );
    // Nothing writes there any more: a fence taken now stays quiet.
    let size = fs::metadata(w.root.join("src/late.txt")).unwrap().len();
    let _fence = w
        .lead
        .admit_timeout([Target::tree(w.root.join("src"))], BOUND)
        .await
        .unwrap();
    assert!(processes_in(&run_dir).is_empty());
    assert_eq!(
        fs::metadata(w.root.join("src/late.txt")).unwrap().len(),
        size
    );
    assert_eq!(
        changes(&report),
        vec![("src/late.txt".into(), Change::Created)]
    );
}

#[tokio::test]
async fn attack_3_a_sandboxed_child_cannot_write_outside_its_fence() {
    let w = ws().await;
    write(w.root.join("docs/guide.md"), "the guide\n");
    fs::create_dir(w.root.join("src")).unwrap();
    let extra = tempfile::tempdir().unwrap();
    let script = "echo x > ../../docs/guide.md; echo docs=$? > ../../src/results; \
                  echo x > ../../evil.txt; echo root=$? >> ../../src/results; \
                  echo x > /etc/writ-test-evil; echo etc=$? >> ../../src/results; \
                  echo x > \"$EXTRA/config.json\"; echo extra=$? >> ../../src/results; \
                  echo x > /tmp/scratch && echo tmp=0 >> ../../src/results";
    let report = delegate_sandboxed(
        &w.lead,
        sandboxed(script)
            .project_dir("src")
            .writable(extra.path())
            .env("EXTRA", extra.path()),
    )
    .await;
    assert_eq!(report.status, Status::Completed, "{report}");
    let results = fs::read_to_string(w.root.join("src/results")).unwrap();
    assert_eq!(
        results, "docs=2\nroot=2\netc=2\nextra=0\ntmp=0\n",
        "{report}"
    );
    assert_eq!(
        fs::read_to_string(w.root.join("docs/guide.md")).unwrap(),
        "the guide\n"
    );
    assert!(!w.root.join("evil.txt").exists());
    assert!(!Path::new("/etc/writ-test-evil").exists());
    assert!(!Path::new("/tmp/scratch").exists(), "/tmp is private");
    assert_eq!(
        fs::read_to_string(extra.path().join("config.json")).unwrap(),
        "x\n"
    );
}

#[tokio::test]
async fn a_sandboxed_run_keeps_the_network_unless_told_not_to() {
    let w = ws().await;
    let script = "tail -n +3 /proc/net/dev | wc -l > interfaces";
    let on = delegate_sandboxed(&w.lead, sandboxed(script)).await;
    let off = delegate_sandboxed(&w.lead, sandboxed(script).network(false)).await;
    let count = |r: &writ::delegate::Report| {
        fs::read_to_string(w.root.join(&r.run_dir).join("interfaces"))
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    assert_eq!(count(&off), 1, "only the loopback interface");
    let host = fs::read_to_string("/proc/net/dev").unwrap().lines().count() as u32 - 2;
    assert_eq!(count(&on), host, "the host's interfaces");
}

#[tokio::test]
async fn without_a_sandbox_the_report_says_so() {
    let w = ws().await;
    let report = w.lead.delegate(sh("true")).await.unwrap();
    assert!(!report.sandboxed);
    assert!(report.to_string().contains("Not sandboxed"), "{report}");
    let report = delegate_sandboxed(&w.lead, sandboxed("true")).await;
    assert!(
        report.to_string().contains("Sandboxed (bubblewrap)"),
        "{report}"
    );
}

#[tokio::test]
async fn a_missing_writable_folder_is_refused_before_anything_runs() {
    let w = ws().await;
    match w
        .lead
        .delegate(sandboxed("true").writable("no/such/dir"))
        .await
    {
        Err(Error::Spawn { reason, .. }) => assert!(reason.contains("writable"), "{reason}"),
        other => panic!("expected Spawn, got {other:?}"),
    }
    assert!(runs_in(&w.root).is_empty());
    assert_idle(&w);
}

/// Drops a run once its child has created `ready` in the run folder, then
/// waits (bounded) for the fence on the run folder; returns the folder.
async fn cancel_when_ready(w: &Ws, script: &str) -> PathBuf {
    let run = w.lead.delegate(sh(script));
    let ready = tokio::select! {
        r = run => panic!("the run ended: {r:?}"),
        f = async {
            wait_until("the child to be ready", || run_file(&w.root, "ready").is_some()).await;
            run_file(&w.root, "ready").unwrap()
        } => f,
    }; // dropped: cancelled
    let run_dir = ready.parent().unwrap().to_path_buf();
    let _released = w
        .lead
        .admit_timeout([Target::tree(&run_dir)], GRACE + BOUND)
        .await
        .expect("the cancelled run's fence was released");
    run_dir
}

#[tokio::test]
async fn attack_5_cancel_never_writes_the_log_through_a_planted_symlink() {
    let w = ws().await;
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("authorized_keys");
    fs::write(&target, "ssh-ed25519 AAAA the-owner\n").unwrap();
    let script = format!(
        "rm output.log; ln -s {} output.log; touch ready; sleep 30",
        target.display()
    );
    let run_dir = cancel_when_ready(&w, &script).await;
    assert!(
        fs::symlink_metadata(run_dir.join("output.log"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(&target).unwrap(),
        "ssh-ed25519 AAAA the-owner\n",
        "the runner wrote through the child's symlink"
    );
}

#[tokio::test]
async fn attack_6_a_planted_fifo_cannot_hang_the_cancel() {
    let w = ws().await;
    let started = Instant::now();
    let run_dir = cancel_when_ready(
        &w,
        "rm output.log; mkfifo output.log; touch ready; sleep 30",
    )
    .await;
    assert!(
        started.elapsed() < GRACE + Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !fs::symlink_metadata(run_dir.join("output.log"))
            .unwrap()
            .is_file()
    );
    // Project folders are writable again.
    w.lead
        .files()
        .write(run_dir.join("after.txt"), "x")
        .unwrap();
}

#[tokio::test]
async fn attack_7_paths_longer_than_path_max_are_reported() {
    let w = ws().await;
    fs::create_dir(w.root.join("src")).unwrap();
    // 25 nested 200-character folders: about 5 KB of path, past PATH_MAX.
    // Built bottom-up with short paths only (a shell cannot `cd` that deep).
    let script = "cd ../../src && d=$(printf 'd%.0s' $(seq 200)) && \
                  mkdir x && echo deep > x/payload.sh && \
                  for i in $(seq 24); do mkdir y && mv x y/$d && mv y x || exit 1; done && mv x $d";
    let report = w
        .lead
        .delegate(sh(script).project_dir("src"))
        .await
        .unwrap();
    assert_eq!(report.status, Status::Completed, "{report}");
    let found = report.artifacts.iter().any(|a| {
        a.change == Change::Created
            && a.path.ends_with("payload.sh")
            && a.path.components().count() == 27
    });
    assert!(
        found || (report.scan_truncated && !report.notes.is_empty()),
        "a deep file was silently left out: {report}"
    );
    assert!(
        found,
        "the walk through folder handles sees any depth: {report}"
    );
}

#[tokio::test]
async fn attack_8_bookkeeping_names_cannot_hide_artifacts() {
    let w = ws().await;
    let script = "rm output.log; mkdir output.log; echo evil > output.log/payload.sh; \
                  rm TASK.md; echo evil > TASK.md";
    let report = w.lead.delegate(sh(script)).await.unwrap();
    assert_eq!(report.status, Status::Completed, "{report}");
    let run = report.run_dir.display().to_string();
    let mut got = changes(&report);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            (format!("{run}/TASK.md"), Change::Created),
            (format!("{run}/output.log/payload.sh"), Change::Created),
        ],
        "{report}"
    );
}
