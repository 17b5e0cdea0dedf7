//! Shell commands as transactions (SPEC §17): `Actor::run` through a
//! private copy-on-write layer, then a commit that merges, applies all or
//! nothing, or refuses.
//!
//! The races are made with FIFOs outside the workspace: the command signals
//! `ready` when it has written, then waits for `go`; the test makes the
//! other agent's change in between. Nothing sleeps for synchronization.
#![cfg(target_os = "linux")]

#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[path = "common/mcp_http_client.rs"]
mod http_client;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command as Proc;
use std::time::Duration;

use writ::delegate::{Change, Status};
use writ::run::{Command, RunMode, View};
use writ::{Actor, Config, Grant, Scheduler};

struct Ws {
    _dir: tempfile::TempDir,
    _hist: tempfile::TempDir,
    sig: tempfile::TempDir,
    root: PathBuf,
    sched: Scheduler,
    a: Actor,
    b: Actor,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let hist = tempfile::tempdir().unwrap();
    let sig = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let sched = Scheduler::new(Config::default().history_dir(hist.path()).session("t"));
    let a = sched.actor("a", Grant::workspace(&root)).unwrap();
    let b = sched.actor("b", Grant::workspace(&root)).unwrap();
    for fifo in ["ready", "go"] {
        let ok = Proc::new("mkfifo")
            .arg(sig.path().join(fifo))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    Ws {
        _dir: dir,
        _hist: hist,
        sig,
        root,
        sched,
        a,
        b,
    }
}

impl Ws {
    fn put(&self, rel: &str, text: &str) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        self.settle();
    }

    fn get(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel)).unwrap()
    }

    /// Waits until the file system's clock and the wall clock have both
    /// moved past every change made so far, so that the next run starts
    /// strictly after them (a change in the same tick as a run's start is
    /// taken as made during it).
    fn settle(&self) {
        use std::os::unix::fs::MetadataExt;
        let probe = self.sig.path().join("clock");
        fs::write(&probe, "").unwrap();
        let first = fs::metadata(&probe).unwrap();
        let first = (first.ctime(), first.ctime_nsec());
        let ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        let first_ms = ms();
        loop {
            fs::write(&probe, "").unwrap();
            let now = fs::metadata(&probe).unwrap();
            if (now.ctime(), now.ctime_nsec()) > first && ms() > first_ms {
                break;
            }
            std::thread::yield_now();
        }
    }

    /// `before`, then the handshake, then `after`, as one shell line.
    fn paused(&self, before: &str, after: &str) -> Command {
        let sig = self.sig.path().display();
        Command::shell(format!(
            "{before}\necho ready > {sig}/ready\nread go < {sig}/go\n{after}"
        ))
    }

    /// Waits for the command to reach the handshake.
    async fn ready(&self) {
        let path = self.sig.path().join("ready");
        tokio::task::spawn_blocking(move || fs::read(path).unwrap())
            .await
            .unwrap();
    }

    /// Lets the command go on.
    async fn go(&self) {
        let path = self.sig.path().join("go");
        tokio::task::spawn_blocking(move || fs::write(path, "go\n").unwrap())
            .await
            .unwrap();
    }

    fn git(&self, args: &[&str]) {
        let ok = Proc::new("git")
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .current_dir(&self.root)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
}

const LINES: &str = "one\ntwo\nthree\nfour\nfive\nsix\n";

fn overlay_or_skip(report: &writ::run::RunReport) -> bool {
    if report.mode != RunMode::Overlay {
        eprintln!("no overlay here: {:?}", report.notes);
        return false;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_writes_are_invisible_until_it_commits() {
    let ws = ws();
    ws.put("notes.txt", "old\n");
    let cmd = ws.paused(
        "echo new > notes.txt\necho made > made.txt",
        "cat notes.txt",
    );
    let (report, ()) = tokio::join!(ws.a.run(cmd), async {
        ws.ready().await;
        assert_eq!(ws.get("notes.txt"), "old\n", "the real tree is untouched");
        assert!(!ws.root.join("made.txt").exists());
        ws.go().await;
    });
    let report = report.unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert_eq!(report.status, Status::Completed);
    assert_eq!(report.output, "new\n", "the command sees its own writes");
    assert!(report.committed, "{report}");
    assert_eq!(ws.get("notes.txt"), "new\n");
    assert_eq!(ws.get("made.txt"), "made\n");
    let mut changes: Vec<_> = report
        .artifacts
        .iter()
        .map(|a| (a.path.clone(), a.change.clone()))
        .collect();
    changes.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        changes,
        vec![
            (PathBuf::from("made.txt"), Change::Created),
            (PathBuf::from("notes.txt"), Change::Modified)
        ]
    );
    assert!(report.kept.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sed_during_another_agents_edit_of_other_lines_keeps_both() {
    let ws = ws();
    ws.put("list.txt", LINES);
    ws.b.files().read("list.txt").unwrap();
    let cmd = ws.paused("sed -i s/one/ONE/ list.txt", "true");
    let (report, ()) = tokio::join!(ws.a.run(cmd), async {
        ws.ready().await;
        // b edits another line while the run holds its own copy.
        ws.b.files()
            .replace("list.txt", "five\n", "FIVE\n")
            .unwrap();
        ws.go().await;
    });
    let report = report.unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert!(report.committed, "{report}");
    assert_eq!(ws.get("list.txt"), "ONE\ntwo\nthree\nfour\nFIVE\nsix\n");
    assert_eq!(report.artifacts.len(), 1);
    assert!(report.artifacts[0].merged);
}

/// A real formatter: `rustfmt` rewrites the badly formatted function at
/// the top while another agent edits the body of the one at the bottom;
/// the commit merges the two (diff3 against the version at the run's
/// start), so neither is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_formatter_during_another_agents_edit_of_another_function_keeps_both() {
    let found = Proc::new("rustfmt").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "this test runs the real rustfmt: install it (rustup component add rustfmt)"
    );
    let ws = ws();
    let before = "fn first( a:u32 )->u32{a+1}\n\nfn last(b: u32) -> u32 {\n    b\n}\n";
    ws.put("lib.rs", before);
    ws.b.files().read("lib.rs").unwrap();
    let cmd = ws.paused("rustfmt --edition 2021 lib.rs", "true");
    let (report, ()) = tokio::join!(ws.a.run(cmd), async {
        ws.ready().await;
        ws.b.files()
            .replace("lib.rs", "    b\n", "    b * 2\n")
            .unwrap();
        ws.go().await;
    });
    let report = report.unwrap();
    assert_eq!(report.mode, RunMode::Overlay, "{report}");
    assert!(report.committed, "{report}");
    assert_eq!(
        ws.get("lib.rs"),
        "fn first(a: u32) -> u32 {\n    a + 1\n}\n\nfn last(b: u32) -> u32 {\n    b * 2\n}\n"
    );
    assert!(report.artifacts[0].merged, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_changes_refuse_the_whole_run() {
    let ws = ws();
    ws.put("a.txt", LINES);
    ws.put("b.txt", LINES);
    ws.b.files().read("b.txt").unwrap();
    let cmd = ws.paused("sed -i s/two/TWO/ a.txt\nsed -i s/three/RUN/ b.txt", "true");
    let (report, ()) = tokio::join!(ws.a.run(cmd), async {
        ws.ready().await;
        ws.b.files().replace("b.txt", "three\n", "B\n").unwrap();
        ws.go().await;
    });
    let report = report.unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert!(!report.committed, "{report}");
    assert!(report.artifacts.is_empty());
    assert_eq!(ws.get("a.txt"), LINES, "nothing was applied");
    assert_eq!(ws.get("b.txt"), "one\ntwo\nB\nfour\nfive\nsix\n");
    assert_eq!(report.conflicts.len(), 1);
    let c = &report.conflicts[0];
    assert_eq!(c.path, Path::new("b.txt"));
    assert_eq!(c.writers, vec!["b".to_string()]);
    assert!(c.run_diff.contains("+RUN"), "{}", c.run_diff);
    assert!(c.live_diff.contains("+B"), "{}", c.live_diff);
    // The refused layer is kept for a look.
    let kept = report.kept.as_ref().expect("kept");
    assert!(kept.join("upper/a.txt").is_file());
    let shown = writ::run::show(&report.run).unwrap();
    assert_eq!(
        shown.written,
        vec![PathBuf::from("a.txt"), PathBuf::from("b.txt")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_checkout_over_another_agents_unseen_edit_is_refused() {
    let ws = ws();
    ws.put("lib.rs", LINES);
    ws.put("other.rs", "x\n");
    ws.git(&["init", "-q"]);
    ws.git(&["add", "."]);
    ws.git(&["commit", "-q", "-m", "base"]);
    ws.b.files().read("lib.rs").unwrap();
    ws.b.files()
        .replace("lib.rs", "two\n", "b's work\n")
        .unwrap();
    ws.put("other.rs", "outside edit before the run\n");
    let report =
        ws.a.run(Command::new(["git", "checkout", "--", "."]))
            .await
            .unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert_eq!(report.status, Status::Completed, "{report}");
    assert!(!report.committed, "{report}");
    assert_eq!(ws.get("lib.rs"), "one\nb's work\nthree\nfour\nfive\nsix\n");
    assert_eq!(
        ws.get("other.rs"),
        "outside edit before the run\n",
        "all or nothing"
    );
    let c = report
        .conflicts
        .iter()
        .find(|c| c.path == Path::new("lib.rs"))
        .expect("lib.rs conflicts");
    assert_eq!(c.writers, vec!["b".to_string()]);
    assert!(c.reason.contains("not read"), "{}", c.reason);

    // Once a has read b's work, the same checkout is its decision to make.
    ws.a.files().read("lib.rs").unwrap();
    let report =
        ws.a.run(Command::new(["git", "checkout", "--", "."]))
            .await
            .unwrap();
    assert!(report.committed, "{report}");
    assert_eq!(ws.get("lib.rs"), LINES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_outputs_and_git_internals_pass_straight_through() {
    let ws = ws();
    ws.put(".gitignore", "/target\n*.pyc\n");
    ws.put("src/main.rs", "fn main() {}\n");
    ws.git(&["init", "-q"]);
    let cmd = ws.paused(
        "mkdir -p target/debug && echo obj > target/debug/main.o\necho c > src/m.pyc\ngit add src/main.rs",
        "true",
    );
    let (report, ()) = tokio::join!(ws.a.run(cmd), async {
        ws.ready().await;
        // Visible in the real tree while the command still runs.
        assert_eq!(ws.get("target/debug/main.o"), "obj\n");
        ws.go().await;
    });
    let report = report.unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert!(report.committed, "{report}");
    assert!(report.artifacts.is_empty(), "{report}");
    assert_eq!(report.passed_through, vec![PathBuf::from("src/m.pyc")]);
    assert_eq!(ws.get("src/m.pyc"), "c\n");
    let staged = Proc::new("git")
        .args(["diff", "--cached", "--name-only"])
        .current_dir(&ws.root)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&staged.stdout), "src/main.rs\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_command_commits_nothing_and_waits_for_nothing() {
    let ws = ws();
    ws.put("src/a.rs", "needle\n");
    ws.git(&["init", "-q"]);
    // b holds a call on the file: a commit touching it would have to wait.
    let _held = ws.b.request(["src/a.rs"]).try_admit().unwrap();
    let line = "git status --short; grep -r needle src";
    for (view, mode) in [
        (View::Auto, RunMode::ReadOnly),
        (View::CopyOnWrite, RunMode::Overlay),
    ] {
        let report =
            ws.a.run(Command::shell(line).commit_wait(Duration::ZERO).view(view))
                .await
                .unwrap();
        assert_eq!(report.mode, mode, "{report}");
        assert!(report.committed, "{report}");
        assert!(report.artifacts.is_empty());
        assert!(
            report.output.contains("src/a.rs:needle"),
            "{}",
            report.output
        );
        assert!(report.kept.is_none());
    }
}

/// A command run read-only cannot write the workspace, whatever it tries:
/// its write fails and the real tree keeps what it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_run_cannot_write_the_workspace() {
    let ws = ws();
    ws.put("a.txt", "mine\n");
    for attack in [
        "echo theirs > a.txt",
        "rm -f a.txt",
        "mv a.txt b.txt",
        "mkdir d",
        "touch new.txt",
    ] {
        let report =
            ws.a.run(Command::shell(attack).view(View::ReadOnly))
                .await
                .unwrap();
        assert_eq!(report.mode, RunMode::ReadOnly, "{report}");
        assert_eq!(report.status, Status::Failed, "{attack}: {report}");
        assert!(
            report.output.contains("Read-only file system"),
            "{attack}: {}",
            report.output
        );
    }
    assert_eq!(ws.get("a.txt"), "mine\n");
    let mut names: Vec<_> = fs::read_dir(&ws.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt"]);
}

/// A read-only run still writes its pass-through folders (build outputs,
/// `.git`), as an overlay run does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_run_writes_its_pass_through_folders() {
    let ws = ws();
    ws.put(".gitignore", "/target\n");
    ws.put("target/.keep", "");
    ws.git(&["init", "-q"]);
    let report = ws
        .a
        .run(Command::shell("echo obj > target/out.o && git add .gitignore").view(View::ReadOnly))
        .await
        .unwrap();
    assert_eq!(report.mode, RunMode::ReadOnly, "{report}");
    assert_eq!(report.status, Status::Completed, "{report}");
    assert_eq!(ws.get("target/out.o"), "obj\n");
    let staged = Proc::new("git")
        .args(["diff", "--cached", "--name-only"])
        .current_dir(&ws.root)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&staged.stdout), ".gitignore\n");
}

/// A command that looks read-only but writes (`sed`'s `w` command) fails
/// on the read-only workspace and runs again through the overlay, where
/// its write commits like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_guessed_read_only_that_writes_runs_again_through_the_overlay() {
    let ws = ws();
    ws.put("in.txt", "one\ntwo\n");
    let report =
        ws.a.run(Command::shell("sed -n '/two/w out.txt' in.txt"))
            .await
            .unwrap();
    assert_eq!(report.mode, RunMode::Overlay, "{report}");
    assert!(report.committed, "{report}");
    assert!(
        report.notes.iter().any(|n| n.contains("ran again")),
        "{report}"
    );
    assert_eq!(ws.get("out.txt"), "two\n");
    assert_eq!(
        report
            .artifacts
            .iter()
            .map(|a| a.path.clone())
            .collect::<Vec<_>>(),
        [PathBuf::from("out.txt")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_is_one_rewindable_call_of_the_turn() {
    let ws = ws();
    ws.put("a.txt", "a\n");
    ws.put("b.txt", "b\n");
    ws.a.set_turn("t1");
    let report =
        ws.a.run(Command::shell("echo A > a.txt; rm b.txt; echo c > c.txt"))
            .await
            .unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert!(report.committed, "{report}");
    assert!(!ws.root.join("b.txt").exists());
    let history = writ::history::History::open(ws._hist.path()).unwrap();
    let calls = history.calls("t", Some("t1")).unwrap();
    assert_eq!(calls.len(), 1, "{calls:?}");
    ws.sched.rewind_turn("t1").unwrap();
    assert_eq!(ws.get("a.txt"), "a\n");
    assert_eq!(ws.get("b.txt"), "b\n");
    assert!(!ws.root.join("c.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_tree_and_the_output_comes_back() {
    let ws = ws();
    let report =
        ws.a.run(
            Command::shell("echo started; echo partial > p.txt; sleep 600")
                .timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(report.status, Status::TimedOut);
    assert!(report.output.starts_with("started\n"), "{}", report.output);
    if report.mode == RunMode::Overlay {
        // What it wrote before the deadline is judged like any write set.
        assert_eq!(ws.get("p.txt"), "partial\n");
    }
}

/// A process the command leaves running in the background (its output
/// still open) ends with the command: the run's PID namespace ends with
/// it, so a run that ended by itself has nothing left to stop or wait for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_processes_end_with_the_command() {
    let ws = ws();
    let report =
        ws.a.run(Command::shell("sleep 600 & echo started"))
            .await
            .unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert_eq!(report.status, Status::Completed);
    assert_eq!(report.output, "started\n");
    assert!(
        !report.notes.iter().any(|n| n.contains("still open")),
        "the background sleep outlived the command: {:?}",
        report.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_fallback_says_so_and_reports_the_manifest() {
    let ws = ws();
    ws.put("a.txt", "a\n");
    let report =
        ws.a.run(Command::shell("echo A > a.txt; echo n > n.txt").fenced())
            .await
            .unwrap();
    assert_eq!(report.mode, RunMode::Fenced);
    assert!(report.committed);
    let mut paths: Vec<_> = report.artifacts.iter().map(|a| a.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, vec![PathBuf::from("a.txt"), PathBuf::from("n.txt")]);
    assert!(report.notes.iter().any(|n| n.contains("fence")));
    assert_eq!(ws.get("a.txt"), "A\n");
}

/// `files.run` on `/rpc` and `run` in the Rust client: the server runs the
/// command and judges it with its own table and history.
#[cfg(all(feature = "server", feature = "remote"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_run_through_the_server_merges_and_refuses_like_in_process() {
    let ws = ws();
    ws.put("list.txt", LINES);
    let hist = tempfile::tempdir().unwrap();
    let server = writ::server::Server::start(
        writ::server::Options::new(&ws.root).config(Config::default().history_dir(hist.path())),
    )
    .await
    .unwrap();
    let session = writ::remote::Session::connect(server.url(), server.token())
        .await
        .unwrap();
    let a = session
        .actor("a", Grant::workspace(&ws.root))
        .await
        .unwrap();
    let b = session
        .actor("b", Grant::workspace(&ws.root))
        .await
        .unwrap();
    b.files().read("list.txt").await.unwrap();
    b.files()
        .replace("list.txt", "two\n", "b's work\n")
        .await
        .unwrap();
    ws.settle();
    // a has not read b's work: a checkout-like overwrite is refused.
    let refused = a
        .run(
            &format!("printf '{}' > list.txt", LINES.replace('\n', "\\n")),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(refused["committed"], false, "{refused}");
    assert_eq!(refused["conflicts"][0]["writers"][0], "b", "{refused}");
    assert_eq!(
        ws.get("list.txt"),
        "one\nb's work\nthree\nfour\nfive\nsix\n"
    );
    // A sed of another line keeps b's work.
    let merged = a
        .run("sed -i s/six/SIX/ list.txt", None, None)
        .await
        .unwrap();
    assert_eq!(merged["committed"], true, "{merged}");
    assert_eq!(merged["artifacts"][0]["path"], "list.txt");
    assert_eq!(
        ws.get("list.txt"),
        "one\nb's work\nthree\nfour\nfive\nSIX\n"
    );
    // A reader runs with the workspace read-only and sees the live tree.
    let read = a.run("grep -c SIX list.txt", None, None).await.unwrap();
    assert_eq!(read["mode"], "read_only", "{read}");
    assert_eq!(read["output"], "1\n", "{read}");
    // Bad parameters are refused before anything runs.
    let bad = session
        .call("files.run", serde_json::json!({"actor": a.handle()}))
        .await;
    assert!(bad.is_err());
}

/// `writ run --agent NAME` through a server (`files.run {agent}`) runs as
/// the named agent `/mcp` sessions naming it act as: what that agent read
/// counts for the command's writes. The same overwrite as a fresh actor
/// (`files.run {actor}`, `writ run` without `--agent`) is refused.
#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_run_as_a_named_agent_counts_that_agents_reads() {
    let ws = ws();
    ws.put("list.txt", LINES);
    let hist = tempfile::tempdir().unwrap();
    let server = writ::server::Server::start(
        writ::server::Options::new(&ws.root)
            .config(Config::default().history_dir(hist.path()))
            .discovery_file(ws.root.join(".writ/serve.json")),
    )
    .await
    .unwrap();
    let session = writ::remote::Session::connect(server.url(), server.token())
        .await
        .unwrap();
    let b = session
        .actor("b", Grant::workspace(&ws.root))
        .await
        .unwrap();
    b.files().read("list.txt").await.unwrap();
    b.files()
        .replace("list.txt", "two\n", "b's work\n")
        .await
        .unwrap();
    ws.settle();
    // The named agent "fmt" reads b's work through /mcp.
    let mut mcp = http_client::McpHttp::modern(&format!("{}/mcp", server.url()), server.token());
    let (error, text) = mcp
        .call(
            "read_file",
            serde_json::json!({"path": "list.txt", "agent": "fmt"}),
        )
        .await;
    assert!(!error, "{text}");
    let overwrite = serde_json::json!("printf 'rewritten\\n' > list.txt");
    // A fresh actor has not read it: refused, nothing applied.
    let fresh = session
        .actor("fmt", Grant::workspace(&ws.root))
        .await
        .unwrap();
    let refused = session
        .call(
            "files.run",
            serde_json::json!({"actor": fresh.handle(), "command": overwrite}),
        )
        .await
        .unwrap();
    assert_eq!(refused["committed"], false, "{refused}");
    assert_eq!(
        ws.get("list.txt"),
        "one\nb's work\nthree\nfour\nfive\nsix\n"
    );
    // `writ run` in the served folder: without --agent a fresh actor
    // (refused, 75); with --agent fmt the named agent, which read it.
    let cli = |agent: Option<&'static str>| {
        let root = ws.root.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = Proc::new(env!("CARGO_BIN_EXE_writ"));
            cmd.arg("run");
            if let Some(agent) = agent {
                cmd.args(["--agent", agent]);
            }
            cmd.args(["--", "sh", "-c", "printf 'rewritten\\n' > list.txt"])
                .current_dir(root)
                .output()
                .unwrap()
        })
    };
    let out = cli(None).await.unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(
        ws.get("list.txt"),
        "one\nb's work\nthree\nfour\nfive\nsix\n"
    );
    let out = cli(Some("fmt")).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(ws.get("list.txt"), "rewritten\n");
    // Exactly one of `actor` and `agent`.
    for both in [
        serde_json::json!({"command": "true"}),
        serde_json::json!({"actor": fresh.handle(), "agent": "fmt", "command": "true"}),
    ] {
        assert!(session.call("files.run", both).await.is_err());
    }
}

/// `run_command` in writ's MCP tool set.
#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_command_tool_reports_output_and_changed_files() {
    let ws = ws();
    ws.put("a.txt", "x\n");
    let hist = tempfile::tempdir().unwrap();
    let server = writ::server::Server::start(
        writ::server::Options::new(&ws.root).config(Config::default().history_dir(hist.path())),
    )
    .await
    .unwrap();
    let mut client = http_client::McpHttp::new(&format!("{}/mcp", server.url()), server.token());
    assert_eq!(client.initialize("shell-agent").await.status, 200);
    let (error, text) = client
        .call(
            "run_command",
            serde_json::json!({"command": "echo hello; echo y > a.txt"}),
        )
        .await;
    assert!(!error, "{text}");
    assert!(text.contains("hello"), "{text}");
    assert!(text.contains("- a.txt modified"), "{text}");
    assert_eq!(ws.get("a.txt"), "y\n");
    let (error, text) = client
        .call("run_command", serde_json::json!({"command": 3}))
        .await;
    assert!(error, "{text}");
}

/// `writ run -- CMD` in process: the command's exit status when committed,
/// 75 when refused, and `--show` lists the kept layer.
#[cfg(all(feature = "server", feature = "remote"))]
#[test]
fn the_command_line_exits_with_the_commands_status_or_75_when_refused() {
    let ws = ws();
    ws.put("a.txt", "a\n");
    let state = tempfile::tempdir().unwrap();
    let writ = |args: &[&str]| {
        Proc::new(env!("CARGO_BIN_EXE_writ"))
            .args(args)
            .current_dir(&ws.root)
            .env("XDG_STATE_HOME", state.path())
            .output()
            .unwrap()
    };
    let out = writ(&[
        "run",
        "--agent",
        "x",
        "--",
        "sh",
        "-c",
        "echo A > a.txt; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(ws.get("a.txt"), "A\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("fenced") {
        return; // no overlay here: nothing is ever refused
    }
    assert!(stderr.contains("modified a.txt"), "{stderr}");
    // An outside change during the run: refused, 75, and the layer kept.
    let sig = ws.sig.path().display().to_string();
    let line = format!("echo run > a.txt; echo ready > {sig}/ready; read go < {sig}/go");
    let child = Proc::new(env!("CARGO_BIN_EXE_writ"))
        .args(["run", "--agent", "x", "--", "sh", "-c", &line])
        .current_dir(&ws.root)
        .env("XDG_STATE_HOME", state.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    fs::read(ws.sig.path().join("ready")).unwrap();
    fs::write(ws.root.join("a.txt"), "person\n").unwrap();
    fs::write(ws.sig.path().join("go"), "go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(ws.get("a.txt"), "person\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("changed outside writ"), "{stderr}");
    let id = stderr
        .split("writ run --show ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the report names the run");
    let shown = writ(&["run", "--show", id]);
    assert!(shown.status.success());
    assert!(String::from_utf8_lossy(&shown.stdout).contains("wrote   a.txt"));
}

/// A commit that cannot be made (here: a write outside the actor's fence)
/// still returns the command's output and status, applies nothing, and
/// keeps the layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_cannot_be_made_still_returns_the_output() {
    let ws = ws();
    ws.put("src/a.rs", "a\n");
    ws.put("other.txt", "o\n");
    let fenced = ws
        .sched
        .actor(
            "fenced",
            Grant::fenced(&ws.root, [writ::Target::tree(ws.root.join("src"))]),
        )
        .unwrap();
    let report = fenced
        .run(Command::shell(
            "echo out; echo A > src/a.rs; echo X > other.txt",
        ))
        .await
        .unwrap();
    if !overlay_or_skip(&report) {
        return;
    }
    assert_eq!(report.status, Status::Completed);
    assert_eq!(report.output, "out\n");
    assert!(!report.committed, "{report}");
    assert!(
        report.notes.iter().any(|n| n.contains("could not be made")),
        "{report}"
    );
    assert_eq!(ws.get("src/a.rs"), "a\n");
    assert_eq!(ws.get("other.txt"), "o\n");
    assert!(report.kept.is_some());
}
