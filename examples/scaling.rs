//! How the cost of an admission grows with the number of live holds.
//!
//! `cargo run --release --example scaling` prints, in a few seconds, the
//! median cost of admitting and releasing one exclusive key (checked against
//! every live hold, inserted, removed) at 100 and at 100,000 live holds, for:
//!
//! - writ's indexed resource table;
//! - baseline A: `parking_lot::Mutex<HashSet<PathBuf>>` insert + remove, the
//!   floor of any keyed lock (no trees, modes or owners);
//! - baseline B: a linear scan over every live hold with component-wise
//!   path containment, as schedulers of this kind do.
//!
//! Each variant takes a mutex per admission and per release. The figures
//! are medians of several rounds in one process, so the ratios hold even on
//! a busy machine; the absolute numbers do not.

use std::collections::HashSet;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use writ::__bench::workload::{live_path, live_request, probe, probe_paths};
use writ::__bench::{NaiveTable, Table};

/// The median over `rounds` of the time per call of `f`, run `iters`
/// times per round.
fn per_op(rounds: usize, iters: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed() / iters as u32
        })
        .collect();
    times.sort();
    times[rounds / 2]
}

macro_rules! admit_release {
    ($table:ty, $live:expr, $iters:expr) => {{
        let mut table = <$table>::new();
        for i in 0..$live {
            table.insert(live_request(i));
        }
        let table = Mutex::new(table);
        let mut request = probe(1, $live);
        per_op(9, $iters, || {
            let id = table.lock().admit(&mut request);
            let id = black_box(id).expect("the probe key is free");
            table.lock().release(id, &mut request);
        })
    }};
}

fn hashset(live: usize, iters: usize) -> Duration {
    let set: Mutex<HashSet<PathBuf>> =
        Mutex::new((0..live).map(|i| PathBuf::from(live_path(i))).collect());
    let key = PathBuf::from(&probe_paths(1, live)[0]);
    let mut owned = Some(key.clone());
    per_op(9, iters, || {
        let path = owned.take().expect("returned every time");
        assert!(set.lock().insert(path));
        owned = set.lock().take(black_box(&key));
    })
}

fn ns(d: Duration) -> String {
    let ns = d.as_secs_f64() * 1e9;
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn main() {
    println!("admit + release of one exclusive key (median of 9 rounds)\n");
    println!(
        "{:>12}  {:>12}  {:>12}  {:>12}  {:>8}  {:>8}",
        "live holds", "writ", "A: hashset", "B: scan", "writ/A", "B/writ"
    );
    let mut indexed = Vec::new();
    for live in [100usize, 100_000] {
        let ours = admit_release!(Table, live, 200_000);
        let a = hashset(live, 200_000);
        let scan_iters = if live > 10_000 { 20 } else { 20_000 };
        let b = admit_release!(NaiveTable, live, scan_iters);
        println!(
            "{:>12}  {:>12}  {:>12}  {:>12}  {:>7.2}x  {:>7.0}x",
            live,
            ns(ours),
            ns(a),
            ns(b),
            ours.as_secs_f64() / a.as_secs_f64(),
            b.as_secs_f64() / ours.as_secs_f64(),
        );
        indexed.push(ours);
    }
    println!(
        "\nwrit at 100k live holds / at 100: {:.2}x",
        indexed[1].as_secs_f64() / indexed[0].as_secs_f64()
    );
}
