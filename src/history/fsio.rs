//! The file system side of a restore: what a path holds now, and putting
//! back bytes or removing a file — through the file tools' directory
//! handles (`files::atomic`), so a restore lands exactly like a write: every
//! folder opened from the root with `O_NOFOLLOW`, a temp file beside the
//! target, fsync, `renameat` over it, fsync of the folder, mode set.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::store::sha256_hex;
use crate::error::{Error, Result};
use crate::files::atomic::{self, Entry};

/// What a path holds now.
#[derive(Debug, Clone)]
pub(crate) enum Current {
    Absent,
    File {
        sha256: String,
        mode: u32,
        bytes: Vec<u8>,
    },
    /// Not a regular file: "a symlink", "a folder", "a special file".
    Other(&'static str),
}

/// Reads what `path` (under `root`) holds, without following a symlink
/// anywhere on the way.
pub(crate) fn current(root: &Path, path: &Path) -> Result<Current> {
    let Some((dir, name)) =
        atomic::open_parent(root, atomic::open_root(root)?, path, false, false)?
    else {
        return Ok(Current::Absent);
    };
    Ok(match dir.entry(&name)? {
        Entry::Missing => Current::Absent,
        Entry::Symlink => Current::Other("a symlink"),
        Entry::Dir => Current::Other("a folder"),
        Entry::Other => Current::Other("a special file"),
        Entry::File(mut file, meta) => {
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            file.read_to_end(&mut bytes)
                .map_err(|e| Error::io("read", path, e))?;
            Current::File {
                sha256: sha256_hex(&bytes),
                mode: meta.permissions().mode() & 0o7777,
                bytes,
            }
        }
    })
}

/// Replaces (or creates, with missing folders) `path` with `bytes` and
/// `mode`, atomically.
pub(crate) fn put(root: &Path, path: &Path, bytes: &[u8], mode: u32, durable: bool) -> Result<()> {
    let Some((dir, name)) =
        atomic::open_parent(root, atomic::open_root(root)?, path, true, durable)?
    else {
        return Err(Error::NotFound {
            path: path.to_path_buf(),
        });
    };
    dir.replace(&name, bytes, Some(mode & 0o7777), durable, None)?;
    Ok(())
}

/// Removes the file `path` (a missing file is already removed).
pub(crate) fn remove(root: &Path, path: &Path, durable: bool) -> Result<()> {
    let Some((dir, name)) =
        atomic::open_parent(root, atomic::open_root(root)?, path, false, durable)?
    else {
        return Ok(());
    };
    match dir.entry(&name)? {
        Entry::Missing => Ok(()),
        Entry::File(..) => dir.unlink(&name, durable, None),
        _ => Err(Error::invalid(
            path,
            "it is no longer a regular file, so the rewind left it alone",
        )),
    }
}
