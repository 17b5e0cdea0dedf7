//! The journal's records: one JSON object per line.
//!
//! Records hold ids, paths, hashes, sizes and modes — never file bodies; the
//! bodies live in content-addressed blobs. Three kinds:
//!
//! - `write`: one file operation (a call) of an actor, with the state of every
//!   path it changed before and after. Appended after the change is in place;
//!   its blobs were stored before.
//! - `restore`: the intent of a rewind or redo, appended before anything is
//!   restored, with the state each file had just before (`from`, snapshotted)
//!   and the state it is given (`to`). A crash between the intent and `done`
//!   leaves a plan that a re-run finishes, or a redo reverses.
//! - `done`: the restore with that id finished.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{FileState, Op, RestoreKind, RewindMode};

/// The state of a file as the journal records it (a present regular file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateRec {
    pub(crate) sha256: String,
    pub(crate) size: u64,
    pub(crate) mode: u32,
    /// True when the content is stored as a blob (it can be restored).
    #[serde(default)]
    pub(crate) blob: bool,
}

impl StateRec {
    pub(crate) fn public(state: &Option<StateRec>) -> FileState {
        match state {
            None => FileState::Absent,
            Some(s) => FileState::File {
                sha256: s.sha256.clone(),
                size: s.size,
                mode: s.mode,
            },
        }
    }
}

/// One path changed by a write.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Change {
    pub(crate) path: PathBuf,
    /// Something (a file, or a symlink the operation acted on) was there.
    pub(crate) existed_before: bool,
    /// `None`: no regular file was there.
    pub(crate) before: Option<StateRec>,
    /// `None`: no regular file is there now.
    pub(crate) after: Option<StateRec>,
    /// Why this change cannot be rewound (a symlink was deleted or moved),
    /// if it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unrestorable: Option<String>,
}

/// One file operation of an actor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WriteRec {
    pub(crate) session: String,
    pub(crate) turn: Option<String>,
    pub(crate) call: String,
    pub(crate) actor: String,
    /// The actor's canonical grant root: where a rewind's walk starts.
    pub(crate) root: PathBuf,
    pub(crate) op: Op,
    pub(crate) time_ms: u64,
    pub(crate) files: Vec<Change>,
}

/// One file of a rewind or redo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RestoreFile {
    pub(crate) path: PathBuf,
    pub(crate) root: PathBuf,
    /// The state just before the restore (what a redo gives back).
    pub(crate) from: Option<StateRec>,
    /// The state the restore gives the file.
    pub(crate) to: Option<StateRec>,
    /// Why the file was left as it was, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<String>,
}

/// The intent of a rewind or redo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RestoreRec {
    pub(crate) id: String,
    pub(crate) session: String,
    pub(crate) turn: String,
    pub(crate) kind: RestoreKind,
    pub(crate) mode: RewindMode,
    pub(crate) time_ms: u64,
    pub(crate) files: Vec<RestoreFile>,
}

/// A restore finished.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DoneRec {
    pub(crate) id: String,
    pub(crate) time_ms: u64,
}

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Record {
    Write(WriteRec),
    Restore(RestoreRec),
    Done(DoneRec),
}

impl Record {
    /// Every blob this record refers to.
    pub(crate) fn blobs(&self) -> impl Iterator<Item = &str> {
        let states: Vec<&StateRec> = match self {
            Record::Write(w) => w
                .files
                .iter()
                .flat_map(|c| c.before.iter().chain(c.after.iter()))
                .collect(),
            Record::Restore(r) => r
                .files
                .iter()
                .flat_map(|f| f.from.iter().chain(f.to.iter()))
                .collect(),
            Record::Done(_) => Vec::new(),
        };
        states
            .into_iter()
            .filter(|s| s.blob)
            .map(|s| s.sha256.as_str())
    }

    pub(crate) fn time_ms(&self) -> u64 {
        match self {
            Record::Write(w) => w.time_ms,
            Record::Restore(r) => r.time_ms,
            Record::Done(d) => d.time_ms,
        }
    }
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
