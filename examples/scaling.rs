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
//! are medians of 9 rounds in which every variant at every size takes its
//! turn, so the ratios hold even on a busy machine; the absolute numbers do
//! not. Growth is printed for the baselines too: on a loaded machine, what
//! moves baseline A moves writ alike.

use std::collections::HashSet;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use writ::bench_support::workload::{live_path, live_request, probe, probe_paths};
use writ::bench_support::{NaiveTable, Request, Table};

/// Time per call of `f`, run `iters` times.
fn per_op(iters: usize, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed() / iters as u32
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// One way to admit and release the probe request at one table size.
trait Variant {
    fn admit_release(&mut self);
}

/// writ's table, or the scan, behind a mutex, with a probe request.
struct Tabled<T> {
    table: Mutex<T>,
    request: Request,
}

macro_rules! tabled {
    ($t:ty) => {
        impl Tabled<$t> {
            fn new(live: usize) -> Self {
                let mut table = <$t>::new();
                for i in 0..live {
                    table.insert(live_request(i));
                }
                Tabled {
                    table: Mutex::new(table),
                    request: probe(1, live),
                }
            }
        }

        impl Variant for Tabled<$t> {
            fn admit_release(&mut self) {
                let id = self.table.lock().admit(&mut self.request);
                let id = black_box(id).expect("the probe key is free");
                self.table.lock().release(id, &mut self.request);
            }
        }
    };
}

tabled!(Table);
tabled!(NaiveTable);

/// Baseline A.
struct HashSetLock {
    set: Mutex<HashSet<PathBuf>>,
    key: PathBuf,
    owned: Option<PathBuf>,
}

impl HashSetLock {
    fn new(live: usize) -> Self {
        let key = PathBuf::from(&probe_paths(1, live)[0]);
        HashSetLock {
            set: Mutex::new((0..live).map(|i| PathBuf::from(live_path(i))).collect()),
            owned: Some(key.clone()),
            key,
        }
    }
}

impl Variant for HashSetLock {
    fn admit_release(&mut self) {
        if let Some(path) = self.owned.take() {
            assert!(self.set.lock().insert(path));
        }
        self.owned = self.set.lock().take(black_box(&self.key));
    }
}

/// Medians of `ROUNDS` rounds, the variants taking turns within each round
/// so that a busy machine slows all of them alike.
const ROUNDS: usize = 9;

const SIZES: [usize; 2] = [100, 100_000];

/// Medians per size of (writ, A, B). Every variant at every size takes its
/// turn in every round, so load that comes and goes weighs on all alike.
fn measure() -> Vec<[Duration; 3]> {
    let mut ours: Vec<Tabled<Table>> = SIZES.iter().map(|&n| Tabled::<Table>::new(n)).collect();
    let mut a: Vec<HashSetLock> = SIZES.iter().map(|&n| HashSetLock::new(n)).collect();
    let mut b: Vec<Tabled<NaiveTable>> = SIZES
        .iter()
        .map(|&n| Tabled::<NaiveTable>::new(n))
        .collect();
    let mut times: Vec<[Vec<Duration>; 3]> = SIZES.iter().map(|_| Default::default()).collect();
    for _ in 0..ROUNDS {
        for (i, &live) in SIZES.iter().enumerate() {
            let scan_iters = (2_000_000 / live).clamp(10, 20_000);
            times[i][0].push(per_op(100_000, || ours[i].admit_release()));
            times[i][1].push(per_op(100_000, || a[i].admit_release()));
            times[i][2].push(per_op(scan_iters, || b[i].admit_release()));
        }
    }
    times.into_iter().map(|t| t.map(median)).collect()
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
    println!("admit + release of one exclusive key (median of {ROUNDS} rounds)\n");
    println!(
        "{:>12}  {:>12}  {:>12}  {:>12}  {:>8}  {:>9}",
        "live holds", "writ", "A: hashset", "B: scan", "writ/A", "B/writ"
    );
    let results = measure();
    for (live, [ours, a, b]) in SIZES.iter().zip(&results) {
        println!(
            "{:>12}  {:>12}  {:>12}  {:>12}  {:>7.2}x  {:>8.0}x",
            live,
            ns(*ours),
            ns(*a),
            ns(*b),
            ours.as_secs_f64() / a.as_secs_f64(),
            b.as_secs_f64() / ours.as_secs_f64(),
        );
    }
    let growth = |v: usize| results[1][v].as_secs_f64() / results[0][v].as_secs_f64();
    println!(
        "\nfrom 100 to 100k live holds: writ {:.2}x, A {:.2}x, B {:.0}x",
        growth(0),
        growth(1),
        growth(2)
    );
}
