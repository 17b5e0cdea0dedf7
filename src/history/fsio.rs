//! The file system side of a restore: what a path holds now, and putting
//! back bytes or removing a file.
//!
//! Interim implementation over `std::fs`; it is replaced by the file tools'
//! directory-handle primitives once those are merged.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::store::sha256_hex;
use crate::error::{Error, Result};

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

/// Reads what `path` (under `root`) holds, without following a final symlink.
pub(crate) fn current(_root: &Path, path: &Path) -> Result<Current> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(20) => {
            return Ok(Current::Absent);
        }
        Err(e) => return Err(Error::io("inspect", path, e)),
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Ok(Current::Other("a symlink"));
    }
    if kind.is_dir() {
        return Ok(Current::Other("a folder"));
    }
    if !kind.is_file() {
        return Ok(Current::Other("a special file"));
    }
    let bytes = fs::read(path).map_err(|e| Error::io("read", path, e))?;
    Ok(Current::File {
        sha256: sha256_hex(&bytes),
        mode: meta.permissions().mode() & 0o7777,
        bytes,
    })
}

/// Replaces (or creates) `path` with `bytes` and `mode`, atomically.
pub(crate) fn put(_root: &Path, path: &Path, bytes: &[u8], mode: u32, durable: bool) -> Result<()> {
    let parent = path
        .parent()
        .ok_or_else(|| Error::invalid(path, "it has no parent folder"))?;
    fs::create_dir_all(parent).map_err(|e| Error::io("create the folder", parent, e))?;
    let mut temp = tempfile::Builder::new()
        .prefix(".writ-tmp-")
        .tempfile_in(parent)
        .map_err(|e| Error::io("create a temporary file beside", path, e))?;
    let fail = |e| Error::io("restore", path, e);
    temp.write_all(bytes).map_err(fail)?;
    temp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode & 0o7777))
        .map_err(fail)?;
    if durable {
        temp.as_file().sync_all().map_err(fail)?;
    }
    temp.persist(path).map_err(|e| fail(e.error))?;
    if durable {
        fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(fail)?;
    }
    Ok(())
}

/// Removes the file `path`.
pub(crate) fn remove(_root: &Path, path: &Path, durable: bool) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("delete", path, e)),
    }
    if durable {
        if let Some(parent) = path.parent() {
            fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io("sync the folder of", path, e))?;
        }
    }
    Ok(())
}
