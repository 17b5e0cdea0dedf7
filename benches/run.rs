//! The cost of running a shell command through `writ run` (SPEC §17),
//! against the same command run plainly — `true`, and `git status` and
//! `grep -r` on a 10,000-file tree:
//!
//! - `writ_run`: as `writ run` runs it by default ([`View::Auto`]); the two
//!   readers run with the workspace bound read-only, and so does `true`;
//! - `writ_run_overlay`: through the copy-on-write overlay
//!   ([`View::CopyOnWrite`]): its set-up, the cold lookups of a fresh
//!   overlay, the scan of its layer and the (empty) commit.
//!
//! Run: `cargo bench --bench run -- --warm-up-time 1 --measurement-time 5`
//! (Linux with unprivileged user namespaces; elsewhere the fenced fallback
//! is what is measured).

use std::path::Path;
use std::process::Command as Proc;

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use writ::run::{Command, View};
use writ::{Config, Grant, Scheduler};

/// A tree of `files` small source files in folders of 100, committed to git.
fn tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("src/m{:03}", i / 100));
        std::fs::create_dir_all(&dir).expect("a folder");
        std::fs::write(
            dir.join(format!("f{i:05}.rs")),
            format!("pub fn f{i}() -> u32 {{\n    {i}\n}}\n"),
        )
        .expect("a file");
    }
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &[
            "-c",
            "user.email=b@example.com",
            "-c",
            "user.name=b",
            "commit",
            "-qm",
            "tree",
        ],
    ] {
        let ok = Proc::new("git").args(args).current_dir(root).status();
        assert!(ok.is_ok_and(|s| s.success()), "git {args:?}");
    }
}

fn run(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a scratch folder");
    let root = dir.path().canonicalize().expect("the scratch folder");
    tree(&root, 10_000);
    let history = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a history folder");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let sched = Scheduler::new(Config::default().history_dir(history.path()));
    let agent = sched
        .actor("bench", Grant::workspace(&root))
        .expect("an actor");
    let through_writ = |argv: &[&str], view: View| {
        let report = runtime
            .block_on(agent.run(Command::new(argv.iter().copied()).view(view)))
            .expect("the run");
        assert!(report.committed && report.artifacts.is_empty(), "{report}");
    };
    let plain = |argv: &[&str]| {
        let out = Proc::new(argv[0])
            .args(&argv[1..])
            .current_dir(&root)
            .output()
            .expect("the command");
        assert!(out.status.success() || argv[0] == "grep");
    };
    let commands: [(&str, &[&str]); 3] = [
        ("true", &["sh", "-c", "true"]),
        ("git_status_10k", &["git", "status", "--short"]),
        ("grep_r_10k", &["grep", "-r", "-q", "no-such-text", "src"]),
    ];
    let mut group = c.benchmark_group("run");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    for (name, argv) in commands {
        group.bench_function(format!("{name}/plain"), |b| b.iter(|| plain(argv)));
        group.bench_function(format!("{name}/writ_run"), |b| {
            b.iter(|| through_writ(argv, View::Auto))
        });
        group.bench_function(format!("{name}/writ_run_overlay"), |b| {
            b.iter(|| through_writ(argv, View::CopyOnWrite))
        });
    }
    group.finish();
}

criterion_group!(benches, run);
criterion_main!(benches);
