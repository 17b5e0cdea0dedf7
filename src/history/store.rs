//! The history store: content-addressed blobs and the append-only journal.
//!
//! Layout of a history directory:
//!
//! ```text
//! <dir>/journal.jsonl      one JSON record per line (see `record`)
//! <dir>/journal.lock       flock'd around every append and rewrite
//! <dir>/blobs/ab/cdef…     file bodies, named by their sha256
//! ```
//!
//! A blob is written (temp file, fsync, rename, fsync of the folder) before
//! the change it protects; storing an existing blob again only refreshes its
//! mtime, which keeps `prune` from deleting a blob a write in progress is
//! about to reference. The journal is appended under an exclusive `flock` of
//! `journal.lock` (not of the journal itself, which `prune` replaces by
//! rename), one whole line per append, fsynced under `Durability::Machine`.
//! A crash can leave a torn last line: loading skips any line that does not
//! parse, and the next append starts on a fresh line so the fragment never
//! swallows a good record.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::record::Record;
use crate::error::{Error, Result};

const JOURNAL: &str = "journal.jsonl";
const LOCK: &str = "journal.lock";
const BLOBS: &str = "blobs";

pub(crate) use crate::files::gate::sha256_hex;

/// A blob name must be a sha256 in lowercase hex: the journal is data, and a
/// crafted "hash" must never name a path outside the blob folder.
fn valid_hash(sha: &str) -> bool {
    sha.len() == 64
        && sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn history_err(reason: impl Into<String>) -> Error {
    Error::History {
        reason: reason.into(),
    }
}

/// What loading the journal found.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) records: Vec<Record>,
    /// Lines that did not parse (a torn last line after a crash), skipped.
    pub(crate) torn: usize,
}

/// What a blob sweep removed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Swept {
    pub(crate) blobs: usize,
    pub(crate) bytes: u64,
}

/// One history directory.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) dir: PathBuf,
    durable: bool,
    /// Serializes this process's appends and rewrites; `journal.lock`
    /// excludes other processes.
    lock: parking_lot::Mutex<()>,
}

/// Puts `bytes` at `path` whole or not at all, mode 0600 (the one atomic
/// write, [`crate::write_atomic`]), its failure said as `op` on `shown`.
///
/// The store's own files live outside every grant root, so plain paths are
/// enough here; the file tools' writes go through directory handles instead.
fn replace_file(
    path: &Path,
    bytes: &[u8],
    durable: bool,
    op: &'static str,
    shown: &Path,
) -> Result<()> {
    crate::files::atomic::write_atomic(path, bytes, 0o600, durable).map_err(|e| match e {
        Error::Io { source, .. } => Error::io(op, shown, source),
        other => other,
    })
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

impl Store {
    /// Opens (creating if needed) the store at `dir`.
    pub(crate) fn open(dir: &Path, durable: bool) -> Result<Store> {
        private_dir(&dir.join(BLOBS))
            .map_err(|e| Error::io("create the history directory", dir, e))?;
        Ok(Store {
            dir: dir.to_path_buf(),
            durable,
            lock: parking_lot::Mutex::new(()),
        })
    }

    /// Opens a store that must already hold a journal (for tools that only
    /// read or act on recorded history).
    pub(crate) fn open_existing(dir: &Path, durable: bool) -> Result<Store> {
        if !dir.join(JOURNAL).is_file() {
            return Err(history_err(format!(
                "{} holds no history journal ({JOURNAL})",
                dir.display()
            )));
        }
        Store::open(dir, durable)
    }

    fn blob_path(&self, sha: &str) -> PathBuf {
        self.dir.join(BLOBS).join(&sha[..2]).join(&sha[2..])
    }

    /// Is the blob `sha` stored?
    pub(crate) fn has_blob(&self, sha: &str) -> bool {
        valid_hash(sha) && self.blob_path(sha).is_file()
    }

    /// Stores `bytes`, whose sha256 is `sha`, durably (per the store's
    /// durability) before returning.
    pub(crate) fn put_blob(&self, sha: &str, bytes: &[u8]) -> Result<()> {
        if !valid_hash(sha) {
            return Err(history_err(format!("'{sha}' is not a sha256")));
        }
        let path = self.blob_path(sha);
        if let Ok(file) = File::open(&path) {
            // Deduplicated — if it is whole: a blob stored without fsync
            // (`Durability::Process`) can be cut short by a power cut, and a
            // short blob must be written again, not trusted forever.
            if file.metadata().is_ok_and(|m| m.len() == bytes.len() as u64) {
                // Refresh the mtime so a concurrent prune's grace period
                // protects it until the journal references it again; if that
                // fails the blob is still there, which is what matters now.
                let _ = file.set_modified(SystemTime::now());
                return Ok(());
            }
        }
        let folder = path.parent().unwrap_or(&self.dir).to_path_buf();
        let fail = |e: io::Error| Error::io("store a snapshot in", &folder, e);
        let created_folder = !folder.is_dir();
        if created_folder {
            private_dir(&folder).map_err(fail)?;
            if self.durable {
                sync_dir(&self.dir.join(BLOBS)).map_err(fail)?;
            }
        }
        replace_file(&path, bytes, self.durable, "store a snapshot in", &folder)
    }

    /// The bytes of blob `sha`, checked against their hash.
    pub(crate) fn read_blob(&self, sha: &str) -> Result<Vec<u8>> {
        if !self.has_blob(sha) {
            return Err(history_err(format!(
                "the snapshot {} is missing from {}",
                short(sha),
                self.dir.display()
            )));
        }
        let path = self.blob_path(sha);
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| Error::io("read the snapshot", &path, e))?;
        if sha256_hex(&bytes) != sha {
            return Err(history_err(format!(
                "the snapshot {} in {} is corrupt (its content does not match its hash)",
                short(sha),
                self.dir.display()
            )));
        }
        Ok(bytes)
    }

    /// Takes the cross-process journal lock (and this process's) for `f`.
    fn locked<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let _guard = self.lock.lock();
        let lock_path = self.dir.join(LOCK);
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| Error::io("open the history lock", &lock_path, e))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::io("lock the history journal", &lock_path, e.into()))?;
        // The flock is released when `lock` is closed, after `f`.
        f()
    }

    /// Appends one record as one line.
    pub(crate) fn append(&self, record: &Record) -> Result<()> {
        let mut line = serde_json::to_vec(record)
            .map_err(|e| history_err(format!("a journal record cannot be encoded ({e})")))?;
        line.push(b'\n');
        let path = self.dir.join(JOURNAL);
        self.locked(|| {
            let fail = |e| Error::io("append to the history journal", &path, e);
            let existed = path.exists();
            let mut file = OpenOptions::new()
                .append(true)
                .read(true)
                .create(true)
                .mode(0o600)
                .open(&path)
                .map_err(fail)?;
            let len = file.metadata().map_err(fail)?.len();
            if len > 0 && !ends_with_newline(&file, len).map_err(fail)? {
                // A torn line from a crash: keep it on a line of its own.
                line.insert(0, b'\n');
            }
            file.write_all(&line).map_err(fail)?;
            if self.durable {
                file.sync_data().map_err(fail)?;
                if !existed {
                    sync_dir(&self.dir).map_err(fail)?;
                }
            }
            Ok(())
        })
    }

    /// Reads every record; lines that do not parse are counted and skipped.
    pub(crate) fn load(&self) -> Result<Loaded> {
        let path = self.dir.join(JOURNAL);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(Error::io("read the history journal", &path, e)),
        };
        Ok(parse(&bytes))
    }

    /// Replaces the journal with `keep(current records)`, atomically (temp
    /// file, fsync, rename, fsync of the folder), holding the journal lock so
    /// no append is lost; then removes blobs no kept record references,
    /// sparing those modified within `grace`.
    pub(crate) fn rewrite(
        &self,
        grace: Duration,
        keep: impl FnOnce(Loaded) -> Vec<Record>,
    ) -> Result<(usize, Swept)> {
        let path = self.dir.join(JOURNAL);
        self.locked(|| {
            let loaded = self.load()?;
            let kept = keep(loaded);
            let mut text = Vec::new();
            for record in &kept {
                serde_json::to_writer(&mut text, record).map_err(|e| {
                    history_err(format!("a journal record cannot be encoded ({e})"))
                })?;
                text.push(b'\n');
            }
            replace_file(
                &path,
                &text,
                self.durable,
                "rewrite the history journal",
                &path,
            )?;
            let referenced: HashSet<&str> = kept.iter().flat_map(Record::blobs).collect();
            let swept = self.sweep(&referenced, grace)?;
            Ok((kept.len(), swept))
        })
    }

    /// Removes every blob not in `referenced` and older than `grace`.
    fn sweep(&self, referenced: &HashSet<&str>, grace: Duration) -> Result<Swept> {
        let blobs = self.dir.join(BLOBS);
        let fail = |e| Error::io("clean the snapshots in", &blobs, e);
        let mut swept = Swept::default();
        let now = SystemTime::now();
        for fan in fs::read_dir(&blobs).map_err(fail)? {
            let fan = fan.map_err(fail)?;
            let Some(prefix) = fan.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !fan.file_type().map_err(fail)?.is_dir() {
                continue;
            }
            for entry in fs::read_dir(fan.path()).map_err(fail)? {
                let entry = entry.map_err(fail)?;
                let Some(rest) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let sha = format!("{prefix}{rest}");
                let meta = entry.metadata().map_err(fail)?;
                let young = meta
                    .modified()
                    .ok()
                    .and_then(|m| now.duration_since(m).ok())
                    .is_none_or(|age| age < grace);
                // Leftover temp files of a crashed store are swept like
                // unreferenced blobs (they never are referenced).
                if referenced.contains(sha.as_str()) || young {
                    continue;
                }
                match fs::remove_file(entry.path()) {
                    Ok(()) => {
                        swept.blobs += usize::from(valid_hash(&sha));
                        swept.bytes += meta.len();
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(fail(e)),
                }
            }
        }
        Ok(swept)
    }
}

fn ends_with_newline(file: &File, len: u64) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] == b'\n')
}

/// Parses journal text; a line that does not parse is skipped and counted.
// Hand-written on purpose: a JSON-lines reader would stop at the first bad
// line, and a torn last line after a crash is expected, not an error.
pub(crate) fn parse(bytes: &[u8]) -> Loaded {
    let mut loaded = Loaded::default();
    for line in bytes.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(record) => loaded.records.push(record),
            Err(e) => {
                tracing::warn!(error = %e, "skipping a journal line that does not parse (torn by a crash?)");
                loaded.torn += 1;
            }
        }
    }
    loaded
}

/// The first 12 hex digits of a hash, for messages.
pub(crate) fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_content_addressed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        let sha = sha256_hex(b"hello");
        store.put_blob(&sha, b"hello").unwrap();
        store.put_blob(&sha, b"hello").unwrap();
        assert_eq!(store.read_blob(&sha).unwrap(), b"hello");
        assert!(
            dir.path()
                .join("blobs")
                .join(&sha[..2])
                .join(&sha[2..])
                .is_file()
        );
        // A corrupt blob is refused, not returned.
        fs::write(store.blob_path(&sha), b"tampered").unwrap();
        assert!(matches!(store.read_blob(&sha), Err(Error::History { .. })));
        // A short (torn) blob is written again, not trusted.
        fs::write(store.blob_path(&sha), b"hel").unwrap();
        store.put_blob(&sha, b"hello").unwrap();
        assert_eq!(store.read_blob(&sha).unwrap(), b"hello");
        // A crafted hash cannot name a path outside the blob folder.
        assert!(store.put_blob("../../../../etc/x", b"x").is_err());
        assert!(!store.has_blob("../journal.jsonl"));
    }

    #[test]
    fn known_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
