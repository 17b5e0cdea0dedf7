//! What the benchmarks and the `scaling` example need of the crate's
//! internals, and nothing else. Not part of the API: no stability promise.
//!
//! [`Table`] is the indexed resource table the scheduler uses; [`NaiveTable`]
//! is the linear scan (every hold, every pair of keys, component-wise
//! containment) that schedulers of this kind use, kept as the reference
//! implementation and as baseline B. Both take a [`Request`] whose hold moves
//! into the table on admission and back out on release, so that a loop of
//! admissions measures the table, not the allocator.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::core::key::{Key, Mode};
use crate::core::table::{ActorId, Claim, Hold, HoldId, HoldKind, naive};

/// A prepared request: one hold, moved into a table by `admit` and back out
/// by `release`.
#[derive(Debug)]
pub struct Request {
    hold: Option<Hold>,
}

impl Request {
    /// A request of actor `owner` (a root actor: its lineage is itself)
    /// for `paths` (absolute; a trailing `/` makes a tree key), all of one
    /// kind and mode.
    pub fn new(owner: u64, paths: &[&str], fence: bool, exclusive: bool) -> Request {
        let mode = if exclusive {
            Mode::Exclusive
        } else {
            Mode::Shared
        };
        let keys = paths
            .iter()
            .map(|p| {
                let tree = p.len() > 1 && p.ends_with('/');
                let path = if tree { &p[..p.len() - 1] } else { p };
                (Key::exact(PathBuf::from(path), tree), mode)
            })
            .collect();
        Request {
            hold: Some(Hold {
                claim: Claim {
                    owner: ActorId(owner),
                    lineage: Arc::from([ActorId(owner)]),
                    kind: if fence {
                        HoldKind::Fence
                    } else {
                        HoldKind::Call
                    },
                    keys,
                },
                actor_name: Arc::from("bench"),
                label: None,
                since: Instant::now(),
            }),
        }
    }

    fn claim(&self) -> Option<&Claim> {
        self.hold.as_ref().map(|h| &h.claim)
    }
}

/// The indexed resource table the scheduler uses.
#[derive(Debug, Default)]
pub struct Table(crate::core::table::Table);

/// The linear-scan table (baseline B and the reference implementation).
#[derive(Debug, Default)]
pub struct NaiveTable(naive::Table);

macro_rules! table_api {
    ($t:ty) => {
        impl $t {
            /// An empty table.
            pub fn new() -> Self {
                Self::default()
            }

            /// Checks `request` against every live hold and, when nothing
            /// conflicts, inserts it: `None` when it conflicts (or is
            /// already admitted).
            pub fn admit(&mut self, request: &mut Request) -> Option<HoldId> {
                let claim = request.claim()?;
                if self.0.first_conflict(claim, None).is_some() {
                    return None;
                }
                let hold = request.hold.take()?;
                Some(self.0.insert(hold))
            }

            /// Releases `id`, handing the hold back to `request`.
            pub fn release(&mut self, id: HoldId, request: &mut Request) {
                request.hold = self.0.remove(id);
            }

            /// Inserts a hold without checking it (to fill a table).
            pub fn insert(&mut self, request: Request) -> Option<HoldId> {
                Some(self.0.insert(request.hold?))
            }

            /// The number of live holds.
            pub fn len(&self) -> usize {
                self.0.len()
            }

            /// True when nothing is held.
            pub fn is_empty(&self) -> bool {
                self.0.len() == 0
            }
        }
    };
}

table_api!(Table);
table_api!(NaiveTable);

/// Resolves an absolute path the way admission does (symlinks of the
/// existing prefix followed, the rest normalized lexically).
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    crate::sched::resolve::resolve(path)
}

/// The synthetic workload of the benchmarks and the `scaling` example.
///
/// Live holds sit at a realistic depth (8 components), 100 files per
/// directory: mostly exclusive calls on files, one in ten a shared call,
/// one in ten a tree fence in another part of the repository; each belongs
/// to its own actor. Probe requests name files no live hold touches, in
/// directories that exist.
pub mod workload {
    use super::Request;

    /// The repository the synthetic paths live in.
    pub const REPO: &str = "/home/agent/work/repo";

    /// The path of the `i`-th live hold's key.
    pub fn live_path(i: usize) -> String {
        format!("{REPO}/src/d{:04}/f{:03}.rs", i / 100, i % 100)
    }

    /// The `i`-th live hold.
    pub fn live_request(i: usize) -> Request {
        let owner = 1_000 + i as u64;
        match i % 10 {
            0 => Request::new(owner, &[&live_path(i)], false, false),
            1 => Request::new(owner, &[&format!("{REPO}/vendor/v{i}/")], true, true),
            _ => Request::new(owner, &[&live_path(i)], false, true),
        }
    }

    /// `k` paths no live hold of a table of `live` touches.
    pub fn probe_paths(k: usize, live: usize) -> Vec<String> {
        let dirs = (live / 100).max(1);
        (0..k)
            .map(|m| format!("{REPO}/src/d{:04}/new{m}.rs", (m * 37) % dirs))
            .collect()
    }

    /// An exclusive call on [`probe_paths`], by an actor of its own.
    pub fn probe(k: usize, live: usize) -> Request {
        let paths = probe_paths(k, live);
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        Request::new(1, &refs, false, true)
    }
}

/// One manifest walk as a delegated run does it (stat and hash every file,
/// through folder handles) over `trees` (relative to `root`); returns the
/// number of entries recorded.
#[cfg(unix)]
pub fn manifest_walk(root: &Path, trees: &[PathBuf]) -> usize {
    let walker = crate::delegate::bench_walker(root, trees);
    walker.before(None).entries.len()
}
