//! [`History`]: the recorded turns of a history directory, read-only, and
//! pruning.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::record::{self, Record, StateRec};
use super::store::Store;
use super::{FileState, Op, RestoreKind};
use crate::error::Result;

/// Where a turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnStatus {
    /// Its writes are in effect (never rewound).
    Applied,
    /// Rewound.
    Rewound,
    /// Rewound, then redone: its writes are in effect again.
    Redone,
    /// A rewind or redo stopped before it finished (a crash); running it
    /// again finishes it, running the other one undoes it.
    Interrupted,
}

impl fmt::Display for TurnStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TurnStatus::Applied => "applied",
            TurnStatus::Rewound => "rewound",
            TurnStatus::Redone => "redone",
            TurnStatus::Interrupted => "interrupted",
        })
    }
}

/// One recorded turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TurnSummary {
    /// The session it belongs to.
    pub session: String,
    /// The turn; `None` groups the session's writes made outside any turn
    /// (they cannot be rewound).
    pub turn: Option<String>,
    /// How many calls (file operations) it recorded.
    pub calls: usize,
    /// How many distinct files they touched.
    pub files: usize,
    /// The actors that wrote, by name.
    pub actors: Vec<String>,
    /// Its first record, in milliseconds since the Unix epoch.
    pub first_ms: u64,
    /// Its last record (a write, rewind or redo).
    pub last_ms: u64,
    /// Applied, rewound, redone or interrupted.
    pub status: TurnStatus,
}

/// One path of a recorded call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CallFile {
    /// The file (absolute, resolved).
    pub path: PathBuf,
    /// Its state before the call.
    pub before: FileState,
    /// Its state after the call.
    pub after: FileState,
    /// False when the earlier content was not snapshotted (written
    /// unprotected, or a symlink), so a rewind leaves this file alone.
    pub protected: bool,
}

/// One recorded call (file operation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Call {
    /// The call id.
    pub call: String,
    /// The actor that made it.
    pub actor: String,
    /// What it did.
    pub op: Op,
    /// When, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Every path it changed (a rename has two).
    pub files: Vec<CallFile>,
}

/// Which turns [`History::prune`] removes: those beyond the `keep_turns`
/// most recent, and those whose last activity is older than `older_than`.
///
/// ```
/// use std::time::Duration;
/// let rule = writ::history::Prune::keep_last(20).or_older_than(Duration::from_secs(7 * 86400));
/// # let _ = rule;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prune {
    /// Keep at most this many turns (the most recently active).
    pub keep_turns: Option<usize>,
    /// Remove turns whose last record is older than this.
    pub older_than: Option<Duration>,
    /// Unreferenced blobs younger than this are kept: a write in progress
    /// stores its blob before it journals the reference (default 10 minutes).
    pub blob_grace: Duration,
}

impl Default for Prune {
    fn default() -> Self {
        Prune {
            keep_turns: None,
            older_than: None,
            blob_grace: Duration::from_secs(600),
        }
    }
}

impl Prune {
    /// Keep the `n` most recently active turns.
    pub fn keep_last(n: usize) -> Self {
        Prune {
            keep_turns: Some(n),
            ..Prune::default()
        }
    }

    /// Remove turns inactive for longer than `age`.
    pub fn older_than(age: Duration) -> Self {
        Prune {
            older_than: Some(age),
            ..Prune::default()
        }
    }

    /// Also remove turns inactive for longer than `age`.
    #[must_use]
    pub fn or_older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Sets the grace period for unreferenced blobs.
    #[must_use]
    pub fn blob_grace(mut self, grace: Duration) -> Self {
        self.blob_grace = grace;
        self
    }
}

/// What [`History::prune`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Turns removed from the journal.
    pub turns_removed: usize,
    /// Journal records kept.
    pub records_kept: usize,
    /// Blobs deleted (none that a kept record refers to).
    pub blobs_removed: usize,
    /// Bytes those blobs held.
    pub bytes_freed: u64,
}

/// The recorded history in a directory: list turns and their calls, prune.
///
/// Rewinding and redoing go through a [`Scheduler`](crate::Scheduler)
/// configured with the same directory and session, so that they take the
/// session's reservation like any write.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let data = dir.path().join("history");
/// # let ws = dir.path().join("ws");
/// # std::fs::create_dir(&ws).unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data).session("s1"));
/// let agent = sched.actor("agent", writ::Grant::workspace(&ws))?;
/// agent.set_turn("turn-1");
/// agent.files().write("notes.md", "hi\n")?;
/// let history = writ::history::History::open(&data)?;
/// let turns = history.turns()?;
/// assert_eq!(turns[0].turn.as_deref(), Some("turn-1"));
/// assert_eq!(turns[0].session, "s1");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct History {
    store: Store,
}

/// The key of a turn: session and turn (or none).
type TurnKey = (String, Option<String>);

fn key_of(record: &Record, restores: &BTreeMap<String, TurnKey>) -> Option<TurnKey> {
    match record {
        Record::Write(w) => Some((w.session.clone(), w.turn.clone())),
        Record::Restore(r) => Some((r.session.clone(), Some(r.turn.clone()))),
        Record::Done(d) => restores.get(&d.id).cloned(),
    }
}

impl History {
    /// Opens a history directory; it must already hold a journal.
    pub fn open(dir: impl AsRef<Path>) -> Result<History> {
        Ok(History {
            store: Store::open_existing(dir.as_ref(), true)?,
        })
    }

    /// How many journal lines were skipped because they do not parse (a
    /// line torn by a crash).
    pub fn skipped_lines(&self) -> Result<usize> {
        Ok(self.store.load()?.torn)
    }

    /// Every recorded turn, in the order they started.
    pub fn turns(&self) -> Result<Vec<TurnSummary>> {
        let records = self.store.load()?.records;
        let restores = restore_keys(&records);
        let done: HashSet<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::Done(d) => Some(d.id.as_str()),
                _ => None,
            })
            .collect();
        let mut order: Vec<TurnKey> = Vec::new();
        let mut turns: BTreeMap<TurnKey, TurnSummary> = BTreeMap::new();
        let mut files: BTreeMap<TurnKey, BTreeSet<PathBuf>> = BTreeMap::new();
        for record in &records {
            let Some(key) = key_of(record, &restores) else {
                continue;
            };
            let time = record.time_ms();
            let entry = turns.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                TurnSummary {
                    session: key.0.clone(),
                    turn: key.1.clone(),
                    calls: 0,
                    files: 0,
                    actors: Vec::new(),
                    first_ms: time,
                    last_ms: time,
                    status: TurnStatus::Applied,
                }
            });
            entry.first_ms = entry.first_ms.min(time);
            entry.last_ms = entry.last_ms.max(time);
            match record {
                Record::Write(w) => {
                    entry.calls += 1;
                    if !entry.actors.contains(&w.actor) {
                        entry.actors.push(w.actor.clone());
                    }
                    files
                        .entry(key)
                        .or_default()
                        .extend(w.files.iter().map(|c| c.path.clone()));
                }
                Record::Restore(r) => {
                    entry.status = match (r.kind, done.contains(r.id.as_str())) {
                        (_, false) => TurnStatus::Interrupted,
                        (RestoreKind::Rewind, true) => TurnStatus::Rewound,
                        (RestoreKind::Redo, true) => TurnStatus::Redone,
                    };
                }
                Record::Done(_) => {}
            }
        }
        Ok(order
            .into_iter()
            .filter_map(|key| {
                let mut summary = turns.remove(&key)?;
                summary.files = files.get(&key).map_or(0, BTreeSet::len);
                // A turn known only from restores (its writes were pruned)
                // is not worth listing.
                (summary.calls > 0).then_some(summary)
            })
            .collect())
    }

    /// The sessions that recorded writes under `turn`.
    pub fn sessions_of(&self, turn: &str) -> Result<Vec<String>> {
        let mut sessions: Vec<String> = Vec::new();
        for record in self.store.load()?.records {
            if let Record::Write(w) = record {
                if w.turn.as_deref() == Some(turn) && !sessions.contains(&w.session) {
                    sessions.push(w.session);
                }
            }
        }
        Ok(sessions)
    }

    /// The calls recorded in `session` under `turn` (`None`: outside any
    /// turn), in order.
    pub fn calls(&self, session: &str, turn: Option<&str>) -> Result<Vec<Call>> {
        let public = |s: &Option<StateRec>| StateRec::public(s);
        Ok(self
            .store
            .load()?
            .records
            .into_iter()
            .filter_map(|r| match r {
                Record::Write(w) if w.session == session && w.turn.as_deref() == turn => {
                    Some(Call {
                        call: w.call,
                        actor: w.actor,
                        op: w.op,
                        time_ms: w.time_ms,
                        files: w
                            .files
                            .iter()
                            .map(|c| CallFile {
                                path: c.path.clone(),
                                before: public(&c.before),
                                after: public(&c.after),
                                protected: c.unrestorable.is_none()
                                    && c.before.as_ref().is_none_or(|b| b.blob),
                            })
                            .collect(),
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// Removes the turns `rule` selects from the journal (rewritten
    /// atomically), then deletes the blobs no remaining record refers to.
    /// A blob still referenced is never deleted.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let data = dir.path().join("history");
    /// # let ws = dir.path().join("ws");
    /// # std::fs::create_dir(&ws).unwrap();
    /// # let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data));
    /// # let agent = sched.actor("agent", writ::Grant::workspace(&ws))?;
    /// for turn in ["t1", "t2", "t3"] {
    ///     agent.set_turn(turn);
    ///     agent.files().write(format!("{turn}.md"), turn)?;
    /// }
    /// let history = writ::history::History::open(&data)?;
    /// let report = history.prune(&writ::history::Prune::keep_last(2))?;
    /// assert_eq!(report.turns_removed, 1);
    /// assert_eq!(history.turns()?.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn prune(&self, rule: &Prune) -> Result<PruneReport> {
        let now = record::now_ms();
        let cutoff = rule
            .older_than
            .map(|age| now.saturating_sub(age.as_millis() as u64));
        let mut removed_turns = 0;
        let (kept, swept) = self.store.rewrite(rule.blob_grace, |loaded| {
            let records = loaded.records;
            let restores = restore_keys(&records);
            // Per turn: the journal position and time of its last record.
            // Recency is the position (the journal is in append order, and
            // clocks tie within a millisecond); age is the time.
            let mut last: BTreeMap<TurnKey, (usize, u64)> = BTreeMap::new();
            for (at, record) in records.iter().enumerate() {
                if let Some(key) = key_of(record, &restores) {
                    let entry = last.entry(key).or_insert((0, 0));
                    *entry = (at, entry.1.max(record.time_ms()));
                }
            }
            let mut by_recency: Vec<(&TurnKey, &(usize, u64))> = last.iter().collect();
            by_recency.sort_by_key(|(_, (at, _))| std::cmp::Reverse(*at));
            let removed: HashSet<TurnKey> = by_recency
                .iter()
                .enumerate()
                .filter(|(rank, (_, (_, time)))| {
                    rule.keep_turns.is_some_and(|n| *rank >= n) || cutoff.is_some_and(|c| *time < c)
                })
                .map(|(_, (key, _))| (*key).clone())
                .collect();
            removed_turns = removed.len();
            records
                .into_iter()
                .filter(|r| key_of(r, &restores).is_none_or(|k| !removed.contains(&k)))
                .collect()
        })?;
        Ok(PruneReport {
            turns_removed: removed_turns,
            records_kept: kept,
            blobs_removed: swept.blobs,
            bytes_freed: swept.bytes,
        })
    }
}

/// Restore ids → their turn, so `done` lines go with their turn.
fn restore_keys(records: &[Record]) -> BTreeMap<String, TurnKey> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Restore(x) => Some((x.id.clone(), (x.session.clone(), Some(x.turn.clone())))),
            _ => None,
        })
        .collect()
}
