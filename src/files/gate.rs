//! The version gate: read marks (sha256) and the rule that a write to an
//! existing file needs a current mark.
//!
//! # Implementation details
//!
//! - Marks live per actor in a [`MarkStore`], keyed by the canonical key
//!   (`Key::norm`), newest mark winning. A write never creates or refreshes
//!   one unless `Config::refresh_mark_on_write` is set, so consecutive edits
//!   need a re-read.
//! - [`Gate`] hangs off the scheduler's shared state with its own leaf
//!   mutexes (never held while the admission lock is taken). It keeps, per
//!   key, the last write made through writ (who, the content hash it
//!   produced, when) — so a `Stale` can name the writer — and a stat-keyed
//!   hash cache.
//! - Writer attribution: a stale mark names the last writ writer only when
//!   the current content is exactly what that writer produced AND that write
//!   happened after the mark was taken. Anything else (a person, a shell, a
//!   formatter, or an outside change that reverted to an older writ write)
//!   is `None`: never an earlier writer.
//! - The hash cache is keyed by (device, inode) and checks size, mtime and
//!   ctime to the nanosecond. It follows git's "racy clean" rule: an entry is
//!   trusted only when both the file's mtime and ctime are safely older than
//!   the moment the hash was recorded (taken *before* reading), because a
//!   change within the same timestamp tick would leave every stat field
//!   equal. "Safely" is [`RACY_MARGIN_FINE`] for file systems with sub-second
//!   timestamps and [`RACY_MARGIN_COARSE`] when both timestamps are whole
//!   seconds. Clock skew between a network file server and this machine
//!   larger than the margin defeats the rule, as it does for git.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::key::{Key, Target};
use crate::error::{Error, Result};
use crate::sched::actor::{Actor, ActorMeta};
use crate::sched::scheduler::Scheduler;

/// Proof that an actor read a file: the sha256 of its complete content at
/// the time of the read.
///
/// Returned by [`Files::read`](crate::Files::read) and
/// [`Files::read_range`](crate::Files::read_range) (a ranged read still
/// hashes the whole file). Marks are kept per actor; an orchestrator can also
/// keep them itself (they are `serde`) and hand them back with
/// [`Actor::add_mark`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a.txt"), "one\n")?;
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
/// let (_, mark) = agent.files().read("a.txt")?;
/// let saved = serde_json::to_string(&mark)?;      // e.g. kept with the transcript
/// agent.forget_marks();                           // the read fell out of context
/// assert!(agent.files().write("a.txt", b"two\n").is_err());
/// agent.add_mark(serde_json::from_str(&saved)?)?; // handed back
/// agent.files().write("a.txt", b"two\n")?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadMark {
    /// The file's absolute, resolved path.
    pub path: PathBuf,
    /// Lowercase hex sha256 of the complete file content.
    pub sha256: String,
    /// The file's length in bytes.
    pub len: u64,
    /// When the read was admitted. A `Stale` names another actor as the
    /// writer only for a write made after this moment.
    pub read_at: SystemTime,
    /// The reader was shown only the file's tail (a refused append carries
    /// just that, SPEC §6): the mark is good for an append only, and a
    /// write, an edit, a delete or a move of the file still needs a read of
    /// the whole of it (`NotRead`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tail_only: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// An actor's read marks, keyed by canonical key.
#[derive(Debug, Default)]
pub(crate) struct MarkStore {
    marks: Mutex<HashMap<PathBuf, ReadMark>>,
}

impl MarkStore {
    /// The read marks of the actor `meta` describes, kept with the actor.
    pub(crate) fn of(meta: &ActorMeta) -> Arc<MarkStore> {
        meta.extensions.get_or_init(MarkStore::default)
    }

    pub(crate) fn get(&self, norm: &Path) -> Option<ReadMark> {
        self.marks.lock().get(norm).cloned()
    }

    /// Stores a mark; the newest mark of a path replaces older ones.
    pub(crate) fn put(&self, norm: PathBuf, mark: ReadMark) {
        self.marks.lock().insert(norm, mark);
    }

    pub(crate) fn remove(&self, norm: &Path) -> bool {
        self.marks.lock().remove(norm).is_some()
    }

    fn clear(&self) {
        self.marks.lock().clear();
    }

    fn all(&self) -> Vec<ReadMark> {
        let mut marks: Vec<ReadMark> = self.marks.lock().values().cloned().collect();
        marks.sort_by(|a, b| a.path.cmp(&b.path));
        marks
    }
}

impl Actor {
    /// Forgets this actor's read mark of `path` (for example when the read
    /// fell out of the model's context). Returns whether there was one.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # std::fs::write(dir.path().join("a.rs"), "fn a() {}\n")?;
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// agent.files().read("a.rs")?;
    /// assert!(agent.forget_mark("a.rs"));
    /// assert!(matches!(agent.files().write("a.rs", b""), Err(writ::Error::NotRead { .. })));
    /// # Ok(()) }
    /// ```
    pub fn forget_mark(&self, path: impl AsRef<Path>) -> bool {
        match self.meta.resolver.resolve(&Target::file(path.as_ref())) {
            Ok((key, _)) => MarkStore::of(&self.meta).remove(&key.norm),
            Err(_) => false,
        }
    }

    /// Forgets every read mark of this actor (for example after the
    /// conversation was summarized).
    pub fn forget_marks(&self) {
        MarkStore::of(&self.meta).clear();
    }

    /// Adds a mark an orchestrator kept (see [`ReadMark`]); it replaces this
    /// actor's mark of the same path. The mark's path is resolved like any
    /// target: outside the grant it is `OutsideGrant`.
    pub fn add_mark(&self, mark: ReadMark) -> Result<()> {
        let (key, _) = self.meta.resolver.resolve(&Target::file(&mark.path))?;
        let mark = ReadMark {
            path: key.path,
            ..mark
        };
        MarkStore::of(&self.meta).put(key.norm, mark);
        Ok(())
    }

    /// A copy of this actor's read marks, sorted by path.
    pub fn marks(&self) -> Vec<ReadMark> {
        MarkStore::of(&self.meta).all()
    }
}

/// The last write made through writ to one key.
#[derive(Debug, Clone)]
struct LastWrite {
    actor: Arc<str>,
    /// The content hash it produced; `None` when it removed the file.
    after: Option<String>,
    at: SystemTime,
    when: Instant,
}

/// The stat fields the hash cache compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StatKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
}

impl StatKey {
    pub(crate) fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        StatKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }

    /// Whole-second timestamps suggest a file system with coarse granularity.
    fn coarse(&self) -> bool {
        self.mtime_ns % 1_000_000_000 == 0 && self.ctime_ns % 1_000_000_000 == 0
    }
}

/// How much older than the recording moment a timestamp must be on a file
/// system with sub-second timestamps. Linux stamps files from a clock that
/// ticks every 1–10 ms; this leaves a wide berth.
pub(crate) const RACY_MARGIN_FINE: Duration = Duration::from_millis(100);
/// The same for whole-second timestamps (FAT keeps 2 s).
pub(crate) const RACY_MARGIN_COARSE: Duration = Duration::from_secs(2);

/// Beyond this many entries the cache starts over (it only saves work).
const CACHE_LIMIT: usize = 65_536;

#[derive(Debug, Clone)]
struct CacheEntry {
    stat: StatKey,
    sha256: String,
    /// Wall-clock nanoseconds taken before the content was read.
    recorded_ns: i128,
}

impl CacheEntry {
    /// The racy-git rule: trust the entry only if nothing about the file
    /// changed AND its last change was safely before the hash was taken.
    fn trusted(&self, stat: &StatKey) -> bool {
        let margin = if stat.coarse() {
            RACY_MARGIN_COARSE
        } else {
            RACY_MARGIN_FINE
        };
        let safe_before = self.recorded_ns - margin.as_nanos() as i128;
        self.stat == *stat && stat.mtime_ns < safe_before && stat.ctime_ns < safe_before
    }
}

pub(crate) fn now_ns() -> i128 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// Session-wide gate records: last writer per key and the hash cache.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    writers: Mutex<HashMap<PathBuf, LastWrite>>,
    cache: Mutex<HashMap<(u64, u64), CacheEntry>>,
}

impl Gate {
    /// The gate records of `sched`'s session, kept with the session.
    pub(crate) fn of(sched: &Scheduler) -> Arc<Gate> {
        sched.extension(|_| Gate::default())
    }

    /// Remembers that `actor` produced `after` (or removed the file) at `norm`.
    pub(crate) fn record_write(&self, norm: &Path, actor: &Arc<str>, after: Option<&str>) {
        let write = LastWrite {
            actor: actor.clone(),
            after: after.map(str::to_owned),
            at: SystemTime::now(),
            when: Instant::now(),
        };
        self.writers.lock().insert(norm.to_path_buf(), write);
    }

    /// Replaces what the gate knows of the last writ write to `norm` with
    /// what a table outside this process knows (a session on etcd): a
    /// write of `writer` (name, content hash, how long ago) that came after
    /// `mark` in that table's order is kept as made after the mark; without
    /// both, nothing is known, so a `Stale` there names no writer.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn seed_writer(
        &self,
        norm: &Path,
        mark: Option<&ReadMark>,
        writer: Option<(String, String, Duration)>,
    ) {
        let mut writers = self.writers.lock();
        match (mark, writer) {
            (Some(mark), Some((actor, after, ago))) => {
                let now = Instant::now();
                writers.insert(
                    norm.to_path_buf(),
                    LastWrite {
                        actor: actor.into(),
                        after: Some(after),
                        // The outer table's order decided "after the
                        // mark"; the check below compares these times.
                        at: mark.read_at,
                        when: now.checked_sub(ago).unwrap_or(now),
                    },
                );
            }
            _ => {
                writers.remove(norm);
            }
        }
    }

    /// Who made the current content `current` after `mark` was taken, if a
    /// writ write did.
    fn writer(&self, norm: &Path, current: &str, mark: &ReadMark) -> Option<(String, Duration)> {
        let writers = self.writers.lock();
        let last = writers.get(norm)?;
        (last.after.as_deref() == Some(current) && last.at >= mark.read_at)
            .then(|| (last.actor.to_string(), last.when.elapsed()))
    }

    /// The cached hash of a file with this stat, if the entry is trusted.
    pub(crate) fn cached(&self, stat: &StatKey) -> Option<String> {
        let cache = self.cache.lock();
        let entry = cache.get(&(stat.dev, stat.ino))?;
        entry.trusted(stat).then(|| entry.sha256.clone())
    }

    /// Records a hash taken of a file whose stat was `stat` both before and
    /// after reading; `recorded_ns` is when the reading began.
    pub(crate) fn remember(&self, stat: StatKey, sha256: &str, recorded_ns: i128) {
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(
            (stat.dev, stat.ino),
            CacheEntry {
                stat,
                sha256: sha256.to_owned(),
                recorded_ns,
            },
        );
    }

    /// The gate itself: a write to the existing file `key`, whose content
    /// hashes to `current`, needs `mark` to be of exactly that content; a
    /// mark of the tail only does for an `append` and nothing else.
    pub(crate) fn check(
        &self,
        key: &Key,
        mark: Option<ReadMark>,
        current: &str,
        append: bool,
    ) -> Result<()> {
        let Some(mark) = mark.filter(|m| append || !m.tail_only) else {
            return Err(Error::NotRead {
                path: key.path.clone(),
            });
        };
        if mark.sha256 == current {
            return Ok(());
        }
        let (writer, ago) = match self.writer(&key.norm, current, &mark) {
            Some((w, ago)) => (Some(w), Some(ago)),
            None => (None, None),
        };
        Err(Error::Stale {
            path: key.path.clone(),
            writer,
            ago,
        })
    }
}

/// Lowercase hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// sha256 of a byte slice, as lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Reads a whole open file from its start (positioned reads, so the file
/// offset does not matter). `stat` sizes the buffer; a file that grew while
/// being read is read to its new end, but never past `limit` bytes (then
/// the error's kind is `FileTooLarge`, carrying a [`TooLargeAt`]).
pub(crate) fn read_all(file: &File, stat: &StatKey, limit: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    if stat.size > limit {
        return Err(too_large(stat.size));
    }
    // One spare byte, so that the read that finds the end needs no regrowth.
    let mut bytes = vec![0u8; usize::try_from(stat.size).unwrap_or(0).saturating_add(1)];
    let mut filled = 0usize;
    loop {
        if filled as u64 > limit {
            // It grew past the limit while we read: stop, do not follow it.
            return Err(too_large(filled as u64));
        }
        if filled == bytes.len() {
            let grown = (bytes.len() * 2).min(
                usize::try_from(limit)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
            );
            bytes.resize(grown.max(filled + 1), 0);
        }
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(filled);
    Ok(bytes)
}

/// The error [`read_all`] gives past its limit; `size` is what was seen.
fn too_large(size: u64) -> io::Error {
    io::Error::new(io::ErrorKind::FileTooLarge, TooLargeAt(size))
}

/// The size carried by a [`too_large`] error.
#[derive(Debug)]
pub(crate) struct TooLargeAt(pub(crate) u64);

impl std::fmt::Display for TooLargeAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at least {} bytes", self.0)
    }
}

impl std::error::Error for TooLargeAt {}

/// Hashes a whole open file without keeping its bytes.
pub(crate) fn hash_file(file: &File, stat: &StatKey) -> io::Result<String> {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 256 * 1024;
    let mut hasher = Sha256::new();
    // A small file needs a small buffer: zeroing 256 KiB would cost more
    // than hashing 4 KiB.
    let mut chunk = vec![0u8; (stat.size.saturating_add(1)).clamp(4096, CHUNK) as usize];
    let mut offset = 0u64;
    loop {
        match file.read_at(&mut chunk, offset) {
            Ok(0) => return Ok(hex(&hasher.finalize())),
            Ok(n) => {
                hasher.update(&chunk[..n]);
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime_ns: i128, ctime_ns: i128) -> StatKey {
        StatKey {
            dev: 1,
            ino: 2,
            size: 10,
            mtime_ns,
            ctime_ns,
        }
    }

    const SEC: i128 = 1_000_000_000;

    #[test]
    fn racy_entries_are_not_trusted() {
        let gate = Gate::default();
        let t = 1_700_000_000 * SEC + 123_456_789;
        // Recorded within the same tick as the last change: every stat field
        // of a same-size edit in that tick would be equal, so never trusted.
        gate.remember(stat(t, t), "h", t + 1_000_000);
        assert_eq!(gate.cached(&stat(t, t)), None);
        // Recorded 50 ms after the change: still inside the fine margin.
        gate.remember(stat(t, t), "h", t + 50_000_000);
        assert_eq!(gate.cached(&stat(t, t)), None);
        // A change whose mtime was restored to an old value but whose ctime
        // is recent is not trusted either.
        gate.remember(stat(t - 10 * SEC, t), "h", t + 1_000_000);
        assert_eq!(gate.cached(&stat(t - 10 * SEC, t)), None);
        // Safely older: trusted, and only for exactly the same stat.
        gate.remember(stat(t, t), "h", t + SEC);
        assert_eq!(gate.cached(&stat(t, t)).as_deref(), Some("h"));
        assert_eq!(gate.cached(&stat(t, t + 1)), None);
        assert_eq!(
            gate.cached(&StatKey {
                size: 11,
                ..stat(t, t)
            }),
            None
        );
    }

    #[test]
    fn coarse_timestamps_need_the_wide_margin() {
        let gate = Gate::default();
        let t = 1_700_000_000 * SEC;
        gate.remember(stat(t, t), "h", t + SEC);
        assert_eq!(gate.cached(&stat(t, t)), None, "1 s is within a 2 s tick");
        gate.remember(stat(t, t), "h", t + 3 * SEC);
        assert_eq!(gate.cached(&stat(t, t)).as_deref(), Some("h"));
    }

    #[test]
    fn a_future_mtime_is_never_trusted() {
        let gate = Gate::default();
        let t = 1_700_000_000 * SEC + 5;
        gate.remember(stat(t + 100 * SEC, t), "h", t + SEC);
        assert_eq!(gate.cached(&stat(t + 100 * SEC, t)), None);
    }

    #[test]
    fn whole_files_are_read_even_when_they_grew_after_the_stat() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        let file = File::open(&path).unwrap();
        let stat = StatKey::of(&file.metadata().unwrap());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[8u8; 5_000])
            .unwrap();
        let bytes = read_all(&file, &stat, u64::MAX).unwrap();
        assert_eq!(bytes.len(), 15_000);
        assert_eq!(hash_file(&file, &stat).unwrap(), sha256_hex(&bytes));
        let empty = StatKey { size: 0, ..stat };
        assert_eq!(read_all(&file, &empty, u64::MAX).unwrap(), bytes);
    }

    #[test]
    fn hex_is_lowercase_and_sha256_matches_a_known_vector() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
