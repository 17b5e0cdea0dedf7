//! File-operation costs: the version gate's re-check of a large unchanged
//! file (stat cache vs full sha256), and a transactional 4 KiB write vs a
//! bare durable write (temp + fsync + rename + folder fsync), and `replace`
//! in a large file against its search alone.
//!
//! Run: `cargo bench --bench files -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use sha2::{Digest, Sha256};
use writ::{Config, Durability, Grant, Scheduler};

const BIG: usize = 64 * 1024 * 1024;
const SMALL: usize = 4 * 1024;

fn scratch() -> tempfile::TempDir {
    // The build's own temp folder: a real disk, so fsync costs what it costs.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a scratch folder")
}

fn gate_recheck(c: &mut Criterion) {
    let dir = scratch();
    let content: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &content).expect("write the big file");
    // The racy-git rule trusts a cache entry only when the file's last change
    // is safely older than the entry: let the new file age first.
    std::thread::sleep(Duration::from_millis(300));
    let sched = Scheduler::new(Config::default());
    let agent = sched
        .actor("bench", Grant::workspace(dir.path()))
        .expect("an actor");
    agent.files().read("big.bin").expect("read the big file");

    let mut group = c.benchmark_group("gate_recheck_64MiB");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.bench_function("verify_stat_cache", |b| {
        let files = agent.files();
        b.iter(|| files.verify(black_box("big.bin")).expect("current"))
    });
    group.throughput(Throughput::Bytes(BIG as u64));
    group.bench_function("verify_full_sha256", |b| {
        let files = agent.files().without_hash_cache();
        b.iter(|| files.verify(black_box("big.bin")).expect("current"))
    });
    group.bench_function("sha256_in_memory", |b| {
        b.iter(|| Sha256::digest(black_box(&content)))
    });
    group.finish();
}

/// What any careful tool does to replace a file durably, without writ.
fn bare_durable_write(dir: &Path, data: &[u8], durable: bool) {
    let temp = dir.join(".bare.tmp");
    let mut file = std::fs::File::create(&temp).expect("create");
    file.write_all(data).expect("write");
    if durable {
        file.sync_all().expect("fsync");
    }
    drop(file);
    std::fs::rename(&temp, dir.join("bare.bin")).expect("rename");
    if durable {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .expect("fsync dir");
    }
}

fn small_write(c: &mut Criterion) {
    let data = vec![b'x'; SMALL];
    let mut group = c.benchmark_group("write_4KiB");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    for (durability, name) in [
        (Durability::Process, "no_fsync"),
        (Durability::Machine, "durable"),
    ] {
        let dir = scratch();
        // A chain of edits without re-reads keeps the bench about the write.
        let sched = Scheduler::new(
            Config::default()
                .durability(durability)
                .refresh_mark_on_write(true),
        );
        let agent = sched
            .actor("bench", Grant::workspace(dir.path()))
            .expect("an actor");
        agent.files().write("w.bin", &data).expect("create");
        agent.files().read("w.bin").expect("read");
        group.bench_function(format!("writ_{name}"), |b| {
            let files = agent.files();
            b.iter(|| {
                files
                    .write(black_box("w.bin"), black_box(&data))
                    .expect("write")
            })
        });
        let durable = durability == Durability::Machine;
        group.bench_function(format!("bare_{name}"), |b| {
            b.iter(|| bare_durable_write(dir.path(), black_box(&data), durable))
        });
    }
    group.finish();
}

/// The search `Files::replace` did before it used `memchr::memmem`: shift by
/// one byte, compare at every offset. Kept here as the baseline.
fn shift_by_one_count(hay: &[u8], needle: &[u8]) -> usize {
    let (mut at, mut count) = (0, 0);
    while at + needle.len() <= hay.len() {
        if hay[at..].starts_with(needle) {
            count += 1;
            at += needle.len();
        } else {
            at += 1;
        }
    }
    count
}

/// `replace` of a 300-byte snippet in a 200 KB source file, whose text
/// shares long prefixes with the snippet (as code does): the whole call
/// through writ (read, admit, gate, search, write), against the search
/// alone, old and new.
fn replace_in_large_file(c: &mut Criterion) {
    const FILE: usize = 200 * 1024;
    let line = "    let value = compute(&input, Options::default())?; // step\n";
    let mut text = String::with_capacity(FILE + 400);
    while text.len() < FILE / 2 {
        text.push_str(line);
    }
    // The snippet: five near-copies of the common line, made unique by its end.
    let old: String =
        line.repeat(4) + "    let value = compute(&input, Options::strict())?;   // done\n";
    let new = old.replace("strict", "STRICT");
    text.push_str(&old);
    while text.len() < FILE {
        text.push_str(line);
    }
    assert!((290..=330).contains(&old.len()), "a ~300-byte snippet");

    let dir = scratch();
    std::fs::write(dir.path().join("big.rs"), &text).expect("write the file");
    let sched = Scheduler::new(Config::default().durability(Durability::Process));
    let agent = sched
        .actor("bench", Grant::workspace(dir.path()))
        .expect("an actor");
    let mut group = c.benchmark_group("replace_300B_in_200KB");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    // Criterion calls the routine several times (warm-up, samples); the
    // direction must follow the file across calls, not restart with each.
    let forward = std::cell::Cell::new(true);
    group.bench_function("writ_read_and_replace", |b| {
        let files = agent.files();
        b.iter(|| {
            let (from, to) = if forward.get() {
                (&old, &new)
            } else {
                (&new, &old)
            };
            forward.set(!forward.get());
            files.read("big.rs").expect("read");
            files.replace("big.rs", from, to).expect("replace")
        })
    });
    group.bench_function("search_memmem", |b| {
        b.iter(|| memchr::memmem::find_iter(black_box(text.as_bytes()), old.as_bytes()).count())
    });
    group.bench_function("search_shift_by_one", |b| {
        b.iter(|| shift_by_one_count(black_box(text.as_bytes()), old.as_bytes()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = gate_recheck, small_write, replace_in_large_file
}
criterion_main!(benches);
