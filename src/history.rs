//! Per-turn file history, rewind and redo.

use std::path::PathBuf;

/// One file a rewind would overwrite without having written it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Conflict {
    /// The file.
    pub path: PathBuf,
    /// What writ expected to find (a sha256, or "absent").
    pub expected: String,
    /// What is there now.
    pub found: String,
    /// A short diff summary.
    pub summary: String,
}
