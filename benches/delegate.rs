//! Costs of the delegated-run hardening (SPEC §9): the bubblewrap sandbox's
//! start-up against an unsandboxed run of the same command, and the
//! manifest walk through folder handles against a walk by full paths.
//!
//! Run: `cargo bench --bench delegate -- --warm-up-time 1 --measurement-time 3`
//! (needs `bwrap`: install the `bubblewrap` package).

use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use sha2::{Digest, Sha256};
use writ::delegate::{Run, Sandbox, Status};
use writ::{Config, Grant, Scheduler};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a scratch folder")
}

/// A whole delegated run of `true` (fence, run folder, both scans, spawn,
/// stop, report), in a process group only and in the sandbox.
fn sandbox_start(c: &mut Criterion) {
    let dir = scratch();
    let root = dir.path().canonicalize().expect("the scratch folder");
    std::fs::create_dir(root.join("src")).expect("src");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let sched = Scheduler::new(Config::default().session("bench"));
    let lead = sched
        .actor("lead", Grant::workspace(&root))
        .expect("an actor");
    let run = |sandbox| {
        let report = runtime
            .block_on(lead.delegate(Run::new("true").project_dir("src").sandbox(sandbox)))
            .expect("the run");
        assert_eq!(report.status, Status::Completed);
        assert_eq!(report.sandboxed, sandbox == Sandbox::Required);
        // Keep the runs folder small: the next run's scan stays the same.
        let _ = std::fs::remove_dir_all(root.join(&report.run_dir));
    };
    let mut group = c.benchmark_group("delegate_true");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    group.bench_function("process_group", |b| b.iter(|| run(Sandbox::Off)));
    group.bench_function("bwrap_sandbox", |b| b.iter(|| run(Sandbox::Required)));
    group.finish();
}

/// The baseline: the same walk by full paths (`read_dir`, `symlink_metadata`,
/// `open`), as the runner walked before it used folder handles.
fn path_walk(dir: &Path, out: &mut Vec<(PathBuf, [u8; 32])>) {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        if meta.is_dir() {
            path_walk(&path, out);
        } else if meta.is_file() {
            let mut file = std::fs::File::open(&path).expect("open");
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).expect("read");
            out.push((path, Sha256::digest(&bytes).into()));
        }
    }
}

/// 2,000 small files in 40 folders, two levels deep.
fn manifest_walk(c: &mut Criterion) {
    let dir = scratch();
    let root = dir.path().canonicalize().expect("the scratch folder");
    for a in 0..8 {
        for b in 0..5 {
            let folder = root.join(format!("src/m{a}/n{b}"));
            std::fs::create_dir_all(&folder).expect("folders");
            for f in 0..50 {
                std::fs::write(folder.join(format!("f{f}.rs")), format!("// {a} {b} {f}\n"))
                    .expect("a file");
            }
        }
    }
    let trees = vec![PathBuf::from("src")];
    assert_eq!(writ::bench_support::manifest_walk(&root, &trees), 2000);
    let mut group = c.benchmark_group("manifest_walk_2000_files");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    group.bench_function("folder_handles", |b| {
        b.iter(|| writ::bench_support::manifest_walk(black_box(&root), &trees))
    });
    group.bench_function("full_paths", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(2000);
            path_walk(black_box(&root.join("src")), &mut out);
            out.len()
        })
    });
    group.finish();
}

criterion_group!(benches, sandbox_start, manifest_walk);
criterion_main!(benches);
