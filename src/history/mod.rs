//! Per-turn file history: snapshots, a journal, conflict-aware rewind,
//! merge mode and redo.
//!
//! With [`Config::history_dir`](crate::Config::history_dir) set, every change
//! made through [`Files`](crate::Files) is recorded: the pre-image of each
//! file is stored as a content-addressed blob *before* the file is replaced
//! (a failed snapshot fails the write), and after the replace a journal line
//! records the call — session, turn, call id, actor, operation, and for each
//! path the state before and after (sha256, size, mode). The journal never
//! holds file bodies.
//!
//! [`Actor::set_turn`](crate::Actor::set_turn) tags an actor's writes with a
//! user turn (a child starts in its parent's turn).
//! [`Scheduler::rewind_turn`](crate::Scheduler::rewind_turn) takes back every
//! write of that turn in this session, but only where each file is still
//! exactly as the turn left it: anything else — a person's edit, a later
//! write by another turn — is a [`Conflict`], and then nothing at all is
//! touched. [`RewindMode::Merge`] still rewinds a file a person edited when
//! the agent's change reverses cleanly out of it.
//! [`Scheduler::redo_turn`](crate::Scheduler::redo_turn) undoes the last
//! rewind under the same rules. [`History`] lists and prunes recorded turns
//! (the `writ history` command uses it).
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), writ::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let (ws, data) = (dir.path().join("ws"), dir.path().join("history"));
//! # std::fs::create_dir(&ws).unwrap();
//! # std::fs::write(ws.join("demo.txt"), "A\n").unwrap();
//! use writ::history::RewindMode;
//! use writ::{Config, Error, Grant, Scheduler};
//!
//! let sched = Scheduler::new(Config::default().history_dir(&data));
//! let agent = sched.actor("agent", Grant::workspace(&ws))?;
//! agent.set_turn("turn-7");
//! agent.files().read("demo.txt")?;
//! agent.files().write("demo.txt", "B\n")?;
//!
//! std::fs::write(ws.join("demo.txt"), "C\n").unwrap(); // a person edits it
//! match sched.rewind_turn("turn-7") {
//!     Err(Error::RewindConflict { conflicts }) => {
//!         assert_eq!(conflicts.len(), 1); // and nothing was touched
//!         println!("{}", conflicts[0]);
//!     }
//!     other => panic!("expected a conflict, got {other:?}"),
//! }
//! std::fs::write(ws.join("demo.txt"), "B\n").unwrap(); // the person undoes it
//! let report = sched.rewind_turn_with("turn-7", RewindMode::Strict)?;
//! assert_eq!(std::fs::read_to_string(ws.join("demo.txt")).unwrap(), "A\n");
//! println!("{report}");
//! sched.redo_turn("turn-7")?; // B again
//! # assert_eq!(std::fs::read_to_string(ws.join("demo.txt")).unwrap(), "B\n");
//! # Ok(()) }
//! ```
//!
//! # What is not covered
//!
//! Only writes made through writ's file tools are recorded, and writes an
//! outside editor reports before and after
//! ([`Actor::before_outside_write`](crate::Actor::before_outside_write)).
//! Shell commands, formatters, delegated child processes and anything else
//! that writes files directly are not, and neither are writes made while no history directory
//! is configured. A rewind never tries to undo those; when they touched a
//! file the turn wrote, the rewind reports a conflict instead of overwriting
//! them.
//!
//! # Implementation details
//!
//! `store` keeps blobs and the journal; `record` defines the journal lines;
//! `outside` records writes reported by a hook;
//! `rewind` plans, checks and runs rewinds and redos; `merge` reverses a
//! change out of edited text and summarizes conflicts; `fsio` reads and
//! restores files; `view` is the read-only [`History`]. The state kept per
//! scheduler (`Handle`) has two leaf mutexes (the store slot and the
//! pending snapshots), never held while the scheduler's state lock is taken.

pub(crate) mod fsio;
mod hook;
mod merge;
mod outside;
pub(crate) mod record;
mod rewind;
pub(crate) mod store;
mod view;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::core::table::ActorId;
use crate::error::{Error, Result};
use crate::sched::actor::ActorMeta;
use crate::sched::config::{Config, Durability};
use crate::sched::scheduler::Scheduler;

pub use view::{Call, CallFile, History, Prune, PruneReport, TurnStatus, TurnSummary};

use record::{Change, Record, StateRec, WriteRec};
use store::{Store, sha256_hex};

/// What a recorded call did to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Op {
    /// The file did not exist before.
    Create,
    /// An existing file's content changed (write, append, replace).
    Update,
    /// The file was deleted.
    Delete,
    /// The file moved (both ends are recorded).
    Rename,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Rename => "rename",
        })
    }
}

/// How a rewind treats files edited after the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RewindMode {
    /// Every file must be exactly as the turn left it (or already restored).
    #[default]
    Strict,
    /// A file edited since is still rewound when the agent's own change
    /// reverses cleanly out of it (no hunk overlaps or touches a later edit);
    /// anything else stays a conflict.
    Merge,
}

/// A rewind, or a redo (which undoes the last rewind of a turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreKind {
    /// Takes a turn's writes back.
    Rewind,
    /// Undoes the turn's last rewind.
    Redo,
}

impl fmt::Display for RestoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RestoreKind::Rewind => "rewind",
            RestoreKind::Redo => "redo",
        })
    }
}

/// A path's content state: absent, a regular file, or something else. An
/// empty file is a file (of size 0), never absent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
#[non_exhaustive]
pub enum FileState {
    /// No file at the path.
    Absent,
    /// A regular file.
    File {
        /// sha256 of the content, lowercase hex.
        sha256: String,
        /// Size in bytes.
        size: u64,
        /// Permission bits.
        mode: u32,
    },
    /// Not a regular file (only reported for paths a rewind leaves alone).
    Other {
        /// What it is: "a symlink", "a folder", …
        what: String,
    },
}

impl fmt::Display for FileState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileState::Absent => f.write_str("absent"),
            FileState::Other { what } => f.write_str(what),
            FileState::File { sha256, size, mode } => {
                write!(f, "{} ({size} bytes, {mode:o})", store::short(sha256))
            }
        }
    }
}

/// What a rewind or redo did to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
#[non_exhaustive]
pub enum Action {
    /// Earlier content and mode were put back.
    Restored,
    /// The file was re-created (the turn had deleted or moved it).
    Recreated,
    /// The file was deleted (the turn had created it).
    Deleted,
    /// The agent's change was reversed out of later edits (merge mode).
    Merged,
    /// The file was already in the state the rewind gives it.
    AlreadyRestored,
    /// The file was left as it is.
    LeftAsIs {
        /// Why (for example: written unprotected, so no snapshot exists).
        reason: String,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Restored => f.write_str("restored"),
            Action::Recreated => f.write_str("re-created"),
            Action::Deleted => f.write_str("deleted"),
            Action::Merged => f.write_str("merged"),
            Action::AlreadyRestored => f.write_str("already restored"),
            Action::LeftAsIs { reason } => write!(f, "left as is: {reason}"),
        }
    }
}

/// One file of a [`RewindReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FileReport {
    /// The file (absolute, resolved).
    pub path: PathBuf,
    /// What was done.
    #[serde(flatten)]
    pub action: Action,
    /// Its state when the rewind finished.
    pub end: FileState,
}

/// What [`Scheduler::rewind_turn`](crate::Scheduler::rewind_turn) or
/// [`Scheduler::redo_turn`](crate::Scheduler::redo_turn) did: every file of
/// the turn with its end state. `Display` is a short table.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let (ws, data) = (dir.path().join("ws"), dir.path().join("h"));
/// # std::fs::create_dir(&ws).unwrap();
/// use writ::history::{Action, FileState};
/// let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data));
/// let agent = sched.actor("agent", writ::Grant::workspace(&ws))?;
/// agent.set_turn("t");
/// agent.files().write("new.rs", "")?;
/// let report = sched.rewind_turn("t")?;
/// assert_eq!(report.files[0].action, Action::Deleted);
/// assert_eq!(report.files[0].end, FileState::Absent);
/// print!("{report}"); // rewind of turn 't' (1 file(s), 1 changed): …
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RewindReport {
    /// The session.
    pub session: String,
    /// The turn.
    pub turn: String,
    /// Rewind or redo.
    pub kind: RestoreKind,
    /// Strict or merge.
    pub mode: RewindMode,
    /// Every file the turn touched, in the order the turn first touched them.
    pub files: Vec<FileReport>,
}

impl RewindReport {
    /// How many files were changed by this rewind (not counting files that
    /// were already restored or left as they were).
    pub fn changed(&self) -> usize {
        self.files
            .iter()
            .filter(|f| {
                matches!(
                    f.action,
                    Action::Restored | Action::Recreated | Action::Deleted | Action::Merged
                )
            })
            .count()
    }
}

impl fmt::Display for RewindReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} of turn '{}' ({} file(s), {} changed):",
            self.kind,
            self.turn,
            self.files.len(),
            self.changed()
        )?;
        let width = self
            .files
            .iter()
            .map(|r| r.action.to_string().len().min(40))
            .max()
            .unwrap_or(0);
        for file in &self.files {
            writeln!(
                f,
                "  {:<width$}  {}  -> {}",
                file.action.to_string(),
                file.path.display(),
                file.end
            )?;
        }
        Ok(())
    }
}

pub use crate::error::Conflict;

/// A pre-image the file tools hand to history: one path an operation will
/// change, as it is just before the change.
pub(crate) struct Pre<'a> {
    pub(crate) path: &'a Path,
    /// `None` when no regular file is there.
    pub(crate) content: Option<Content<'a>>,
}

/// The content and mode of an existing regular file.
pub(crate) struct Content<'a> {
    pub(crate) sha256: &'a str,
    pub(crate) mode: u32,
    pub(crate) bytes: &'a [u8],
}

/// The file tools' operations, as history groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WriteKind {
    /// write, append, replace: one path gets new content.
    Edit,
    Delete,
    /// Two paths: the source, then the destination.
    Rename,
}

/// One path's state after an operation, for [`Handle::record`].
pub(crate) struct Post<'a> {
    pub(crate) path: &'a Path,
    /// `(sha256, size, mode)`, or `None` when no file is there now.
    pub(crate) state: Option<(&'a str, u64, u32)>,
}

/// Whether a snapshot covered every pre-image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protection {
    Protected,
    /// A pre-image above the snapshot limit was not stored, as the caller
    /// allowed (`Files::unprotected`).
    Unprotected,
}

/// A snapshot taken, waiting for its write to finish. Encoded only to be
/// carried between the processes of one session ([`Handle::take_pending`]).
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    kind: WriteKind,
    turn: Option<String>,
    changes: Vec<Change>,
    /// The new content's hash when it was stored as a blob too.
    post_blob: Option<String>,
}

/// Per-scheduler history state: the store (opened on first use), the
/// snapshots of writes in progress, and the test failpoint.
pub(crate) struct Handle {
    dir: Option<PathBuf>,
    session: String,
    durable: bool,
    limit: u64,
    /// Opened lazily, so `Scheduler::new` stays infallible; a failed open is
    /// retried on the next use. Leaf lock.
    store: parking_lot::Mutex<Option<Arc<Store>>>,
    /// Snapshots whose write has not been recorded yet, by actor and paths.
    /// The exclusive call hold on those paths keeps the key unique while a
    /// write runs; a write that fails leaves its entry to be replaced by the
    /// next snapshot of the same paths. Leaf lock.
    pending: parking_lot::Mutex<HashMap<(ActorId, Vec<PathBuf>), Pending>>,
    /// Restores allowed before a simulated crash (`usize::MAX`: none).
    failpoint: AtomicUsize,
    calls: AtomicU64,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").field("dir", &self.dir).finish()
    }
}

fn history_err(reason: impl Into<String>) -> Error {
    Error::History {
        reason: reason.into(),
    }
}

fn pending_key(actor: &ActorMeta, paths: impl Iterator<Item = PathBuf>) -> (ActorId, Vec<PathBuf>) {
    let mut paths: Vec<PathBuf> = paths.collect();
    paths.sort();
    (actor.id, paths)
}

impl Handle {
    /// The history of `sched`'s session, made from its configuration on
    /// first use.
    pub(crate) fn of(sched: &Scheduler) -> Arc<Handle> {
        sched.extension(Handle::new)
    }

    pub(crate) fn new(config: &Config) -> Self {
        Handle {
            dir: config.history_dir.clone(),
            session: config.session_id().to_string(),
            durable: config.durability == Durability::Machine,
            limit: config.snapshot_limit,
            store: parking_lot::Mutex::new(None),
            pending: parking_lot::Mutex::new(HashMap::new()),
            failpoint: AtomicUsize::new(usize::MAX),
            calls: AtomicU64::new(0),
        }
    }

    /// True when a history directory is configured.
    pub(crate) fn enabled(&self) -> bool {
        self.dir.is_some()
    }

    pub(crate) fn durable(&self) -> bool {
        self.durable
    }

    /// The store, opened on first use.
    pub(crate) fn store(&self) -> Result<Arc<Store>> {
        let Some(dir) = &self.dir else {
            return Err(history_err(
                "no history directory is configured (Config::history_dir), so nothing was recorded",
            ));
        };
        let mut slot = self.store.lock();
        if let Some(store) = slot.as_ref() {
            return Ok(store.clone());
        }
        let store = Arc::new(Store::open(dir, self.durable)?);
        *slot = Some(store.clone());
        Ok(store)
    }

    pub(crate) fn set_failpoint(&self, after: Option<usize>) {
        // Relaxed: a test sets it before the rewind it targets starts.
        self.failpoint
            .store(after.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// A fresh id for a restore record.
    pub(crate) fn restore_id(&self) -> String {
        // Relaxed: ids only need to be distinct.
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        format!("r{:x}-{}-{n}", record::now_ms(), std::process::id())
    }

    pub(crate) fn failpoint(&self) -> usize {
        self.failpoint.load(Ordering::Relaxed)
    }

    /// Step "snapshot" of the write pipeline: stores every pre-image (and the
    /// new content, when given) as blobs, durably, before anything on disk
    /// changes. An `Err` must fail the write. A pre-image above
    /// `Config::snapshot_limit` is refused unless `unprotected`, in which
    /// case it is journaled without a blob and cannot be rewound.
    pub(crate) fn snapshot(
        &self,
        actor: &ActorMeta,
        kind: WriteKind,
        pre: &[Pre<'_>],
        new: Option<&[u8]>,
        unprotected: bool,
    ) -> Result<Protection> {
        let store = self.store()?;
        let mut protection = Protection::Protected;
        let mut changes = Vec::with_capacity(pre.len());
        for p in pre {
            if p.path.to_str().is_none() {
                return Err(history_err(format!(
                    "{} is not valid UTF-8 and cannot be journaled; nothing was written",
                    p.path.display()
                )));
            }
            let before = match &p.content {
                None => None,
                Some(c) => {
                    let size = c.bytes.len() as u64;
                    let blob = if size <= self.limit {
                        store.put_blob(c.sha256, c.bytes)?;
                        true
                    } else if unprotected {
                        protection = Protection::Unprotected;
                        false
                    } else {
                        return Err(history_err(format!(
                            "{} is {size} bytes, more than the snapshot limit of {} bytes \
                             (Config::snapshot_limit), so it cannot be snapshotted and nothing \
                             was written; write it through files().unprotected() to accept \
                             that this change cannot be rewound",
                            p.path.display(),
                            self.limit
                        )));
                    };
                    Some(StateRec {
                        sha256: c.sha256.to_string(),
                        size,
                        mode: c.mode & 0o7777,
                        blob,
                    })
                }
            };
            // A symlink (or anything but a regular file) has no content to
            // snapshot; record that something was there.
            let existed_before = before.is_some() || std::fs::symlink_metadata(p.path).is_ok();
            let unrestorable = (existed_before && before.is_none()).then(|| {
                "a symlink (or special file) was changed; only regular files are snapshotted"
                    .to_string()
            });
            changes.push(Change {
                path: p.path.to_path_buf(),
                existed_before,
                before,
                after: None,
                unrestorable,
            });
        }
        if kind == WriteKind::Rename {
            // A moved symlink leaves a symlink at the destination: neither
            // end can be restored from snapshots.
            if let Some(reason) = changes.first().and_then(|c| c.unrestorable.clone()) {
                for change in &mut changes {
                    change.unrestorable.get_or_insert_with(|| reason.clone());
                }
            }
        }
        let post_blob = match new {
            Some(bytes) if bytes.len() as u64 <= self.limit => {
                let sha = sha256_hex(bytes);
                store.put_blob(&sha, bytes)?;
                Some(sha)
            }
            _ => None,
        };
        let pending = Pending {
            kind,
            turn: actor.turn.lock().as_deref().map(str::to_string),
            changes,
            post_blob,
        };
        let key = pending_key(actor, pre.iter().map(|p| p.path.to_path_buf()));
        self.pending.lock().insert(key, pending);
        Ok(protection)
    }

    /// Step "journal" of the write pipeline, after the change is in place:
    /// appends the call's record. An `Err` leaves the change on disk; the
    /// receipt must say the history is incomplete.
    pub(crate) fn record(&self, actor: &ActorMeta, post: &[Post<'_>]) -> Result<()> {
        let key = pending_key(actor, post.iter().map(|p| p.path.to_path_buf()));
        let Some(pending) = self.pending.lock().remove(&key) else {
            return Err(history_err(
                "the change was made but no snapshot of it was found, so it was not journaled",
            ));
        };
        let store = self.store()?;
        let mut changes = pending.changes;
        let source_blob = changes
            .first()
            .and_then(|c| c.before.as_ref())
            .map(|b| b.blob);
        for change in &mut changes {
            let Some(p) = post.iter().find(|p| p.path == change.path) else {
                continue;
            };
            change.after = p.state.map(|(sha256, size, mode)| {
                let blob = match pending.kind {
                    // The destination holds the source's bytes, whose blob
                    // (if any) the snapshot stored.
                    WriteKind::Rename => source_blob.unwrap_or(false),
                    _ => pending.post_blob.as_deref() == Some(sha256),
                };
                StateRec {
                    sha256: sha256.to_string(),
                    size,
                    mode: mode & 0o7777,
                    blob,
                }
            });
        }
        let op = match pending.kind {
            WriteKind::Edit if changes.iter().all(|c| !c.existed_before) => Op::Create,
            WriteKind::Edit => Op::Update,
            WriteKind::Delete => Op::Delete,
            WriteKind::Rename => Op::Rename,
        };
        // Relaxed: call ids only need to be distinct.
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let time_ms = record::now_ms();
        let write = WriteRec {
            session: self.session.clone(),
            turn: pending.turn,
            call: format!("{time_ms:x}-{n}"),
            actor: actor.name.to_string(),
            root: actor.resolver.root.clone(),
            op,
            time_ms,
            files: changes,
        };
        store.append(&Record::Write(write))
    }

    /// The snapshot of an outside write to `path` that `actor` took and
    /// has not recorded yet, taken out of this process (encoded) to be
    /// recorded by another process of the session: a server on etcd keeps
    /// it in etcd between the two steps, which any server may serve.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn take_pending(&self, actor: &ActorMeta, path: &Path) -> Result<Option<Vec<u8>>> {
        let key = pending_key(actor, std::iter::once(path.to_path_buf()));
        let Some(pending) = self.pending.lock().remove(&key) else {
            return Ok(None);
        };
        serde_json::to_vec(&pending)
            .map(Some)
            .map_err(|e| history_err(format!("the snapshot did not encode: {e}")))
    }

    /// Puts back, for `actor`'s record of its outside write to `path`, a
    /// snapshot [`Handle::take_pending`] took out of a process of the
    /// session. One that is not a snapshot of exactly `path` is refused.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn put_pending(&self, actor: &ActorMeta, path: &Path, carried: &[u8]) -> Result<()> {
        let pending: Pending = serde_json::from_slice(carried)
            .map_err(|e| history_err(format!("the carried snapshot is unreadable: {e}")))?;
        if !matches!(pending.changes.as_slice(), [change] if change.path == path) {
            return Err(history_err(format!(
                "the carried snapshot is not one of {}",
                path.display()
            )));
        }
        let key = pending_key(actor, std::iter::once(path.to_path_buf()));
        self.pending.lock().insert(key, pending);
        Ok(())
    }

    /// The journal step for a write made outside the file tools after
    /// [`Handle::snapshot`]: stores the post-image (`bytes`) as a blob, then
    /// journals the call as `record` does — a delete when the file is gone.
    /// A file the writer left as it was is not journaled. Returns the
    /// pre-image's hash.
    pub(crate) fn record_outside(
        &self,
        actor: &ActorMeta,
        post: Post<'_>,
        bytes: Option<&[u8]>,
    ) -> Result<Option<String>> {
        let key = pending_key(actor, std::iter::once(post.path.to_path_buf()));
        let stored = match (post.state, bytes) {
            (Some((sha256, size, _)), Some(bytes)) if size <= self.limit => {
                self.store()?.put_blob(sha256, bytes)?;
                Some(sha256.to_string())
            }
            _ => None,
        };
        let before = {
            let mut pending = self.pending.lock();
            let Some(entry) = pending.get_mut(&key) else {
                return Err(history_err(
                    "no snapshot was taken before this write (or the server restarted since), so it was not journaled",
                ));
            };
            let change = entry.changes.first();
            let before = change
                .and_then(|c| c.before.as_ref())
                .map(|b| b.sha256.clone());
            let existed = change.is_some_and(|c| c.existed_before);
            if before.as_deref() == post.state.map(|s| s.0) && (existed || post.state.is_none()) {
                pending.remove(&key);
                return Ok(before);
            }
            if post.state.is_none() {
                entry.kind = WriteKind::Delete;
            }
            entry.post_blob = stored;
            before
        };
        self.record(actor, &[post])?;
        Ok(before)
    }
}

#[cfg(test)]
mod tests;

/// The examples of `docs/HISTORY.md`, compiled and run as doctests so that
/// the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/HISTORY.md")]
pub struct HistoryGuide;
