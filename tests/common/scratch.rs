//! A canonical temporary workspace and a runtime, as the server tests use.

// Each test binary that includes this file uses a part of it.
#![allow(dead_code)]

use std::path::PathBuf;

/// A temporary folder and its canonical path (symlinks resolved, as the
/// server reports paths).
pub fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    (dir, root)
}

/// A two-worker runtime, like the machine the suite runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}
