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
use crate::files::Receipt;
use crate::sched::actor::{Actor, ActorMeta};
use crate::sched::scheduler::Scheduler;

/// Proof that an actor read a file: the sha256 of its complete content at
/// the time of the read.
///
/// Returned by [`Files::read`](crate::Files::read) and
/// [`Files::read_range`](crate::Files::read_range) (a ranged read still
/// hashes the whole file). Marks are kept per actor; an orchestrator can also
/// keep them itself (they are `serde`) and hand them back with
/// [`Actor::add_mark`]. A mark says how much of the file its reader saw
/// ([`View`]); marks stored before views existed read as whole ones.
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
#[serde(from = "MarkRecord", into = "MarkRecord")]
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
    /// How much of the file the reader was shown (SPEC §6): a write, a
    /// delete or a move replaces the whole content and needs a
    /// [`View::Whole`]; an edit needs any view but a [`View::Tail`]; an
    /// append any view at all.
    pub view: View,
    /// The receipts of the appends and edits made with this mark, newest
    /// last, so that a call resent after a lost answer is answered with
    /// its first receipt instead of being applied twice (SPEC §6). A new
    /// read of the file makes a new mark without them.
    pub(crate) sent: Vec<Sent>,
}

impl ReadMark {
    /// A mark of `path` whose complete content hashes to `sha256`, read
    /// now, as `view` showed it: for an orchestrator that keeps marks of
    /// its own ([`Actor::add_mark`]).
    pub fn new(path: impl Into<PathBuf>, sha256: impl Into<String>, len: u64, view: View) -> Self {
        ReadMark {
            path: path.into(),
            sha256: sha256.into(),
            len,
            read_at: SystemTime::now(),
            view,
            sent: Vec::new(),
        }
    }

    /// The receipt of the call `call` made with this mark, if it was made.
    pub(crate) fn sent(&self, call: &str) -> Option<&Receipt> {
        self.sent
            .iter()
            .find(|sent| sent.call == call)
            .map(|sent| &sent.receipt)
    }

    /// Keeps the receipt of `call`, dropping the oldest past [`SENT_KEPT`].
    /// The diff of an anchored receipt is not kept (it can be as large as
    /// the read bound, and the mark travels with every write on etcd): a
    /// repeat makes it again from history.
    pub(crate) fn keep_sent(&mut self, call: String, receipt: &Receipt) {
        let mut receipt = receipt.clone();
        if let Some(anchored) = &mut receipt.anchored {
            anchored.diff = String::new();
            anchored.truncated = false;
        }
        self.sent.retain(|sent| sent.call != call);
        self.sent.push(Sent { call, receipt });
        let over = self.sent.len().saturating_sub(SENT_KEPT);
        self.sent.drain(..over);
    }
}

/// How many receipts one mark keeps for resent calls.
pub(crate) const SENT_KEPT: usize = 16;

/// One call made with a mark, and what it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sent {
    /// The call's fingerprint: the operation and its arguments, hashed.
    call: String,
    /// Its receipt (an anchored one without its diff).
    receipt: Receipt,
}

/// A mark as it is stored and sent. Marks written before views existed
/// have no `view` (they were of the whole file) or `tail_only: true`;
/// `tail_only` is still written beside a tail view for readers that know
/// only it.
#[derive(Serialize, Deserialize)]
struct MarkRecord {
    path: PathBuf,
    sha256: String,
    len: u64,
    read_at: SystemTime,
    #[serde(default, skip_serializing_if = "View::is_whole")]
    view: View,
    #[serde(default, skip_serializing_if = "is_false")]
    tail_only: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sent: Vec<Sent>,
}

impl From<MarkRecord> for ReadMark {
    fn from(r: MarkRecord) -> Self {
        let view = match r.view {
            View::Whole if r.tail_only => View::Tail { first: 0, total: 0 },
            view => view,
        };
        ReadMark {
            path: r.path,
            sha256: r.sha256,
            len: r.len,
            read_at: r.read_at,
            view,
            sent: r.sent,
        }
    }
}

impl From<ReadMark> for MarkRecord {
    fn from(m: ReadMark) -> Self {
        MarkRecord {
            tail_only: matches!(m.view, View::Tail { .. }),
            path: m.path,
            sha256: m.sha256,
            len: m.len,
            read_at: m.read_at,
            view: m.view,
            sent: m.sent,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How much of a file a read showed its reader (SPEC §6: what the agent
/// saw bounds what it may replace whole). Line numbers are 1-based, as
/// the tools show them.
///
/// ```
/// use writ::View;
/// let seen = View::Lines { first: 1, last: 2000, total: 5000, cut: 0 };
/// assert!(!seen.is_whole());
/// assert_eq!(seen.to_string(), "lines 1-2000 of 5000");
/// // Reading on from where the first read stopped sees the rest.
/// let rest = View::Lines { first: 2001, last: 5000, total: 5000, cut: 0 };
/// assert_eq!(seen.merge(&rest), View::Whole);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "seen", rename_all = "snake_case")]
#[non_exhaustive]
pub enum View {
    /// All of it.
    #[default]
    Whole,
    /// Lines `first..=last` of its `total` lines (none when `last <
    /// first`); `cut` of them were shown cut short, being longer than a
    /// line may be shown.
    Lines {
        /// The first line shown.
        first: u64,
        /// The last line shown.
        last: u64,
        /// How many lines the file has.
        total: u64,
        /// How many of the lines shown were cut short.
        #[serde(default)]
        cut: u64,
    },
    /// Its first `shown` bytes of `total` (a read cut short by the read
    /// bound).
    Bytes {
        /// Bytes shown, from the start.
        shown: u64,
        /// The file's size.
        total: u64,
    },
    /// Its last lines, from line `first` of `total` (a refused append
    /// shows only those; 0 when not known): good for an append only.
    Tail {
        /// The first line shown.
        first: u64,
        /// How many lines the file has.
        total: u64,
    },
    /// Lines around some places in it (an edit's preview, which shows
    /// the diff it would make).
    Excerpts {
        /// How many lines the file has.
        total: u64,
    },
}

impl View {
    /// Lines `first..=last` of `total`, `cut` of them cut short: the whole
    /// file when that is every line, none cut.
    pub(crate) fn lines(first: u64, last: u64, total: u64, cut: u64) -> View {
        if first <= 1 && last >= total && cut == 0 {
            View::Whole
        } else {
            View::Lines {
                first,
                last,
                total,
                cut,
            }
        }
    }

    /// Whether the reader saw all of the file.
    pub fn is_whole(&self) -> bool {
        matches!(self, View::Whole)
    }

    /// What two reads of the same content showed together: lines that
    /// join up are one range, and a range of every line, none cut, is
    /// the whole file. Views that do not join keep the wider one (an
    /// edit's rights over an append's), else `other`, the newer.
    #[must_use]
    pub fn merge(&self, other: &View) -> View {
        use View::{Bytes, Lines, Tail, Whole};
        let joined = match (self, other) {
            (Whole, _) | (_, Whole) => Whole,
            (
                Lines {
                    first: f1,
                    last: l1,
                    total,
                    cut: c1,
                },
                Lines {
                    first: f2,
                    last: l2,
                    total: t2,
                    cut: c2,
                },
            ) if total == t2
                && f1.max(f2) <= &(l1.min(l2).saturating_add(1))
                && f1 <= l1
                && f2 <= l2 =>
            {
                Lines {
                    first: *f1.min(f2),
                    last: *l1.max(l2),
                    total: *total,
                    cut: *c1.max(c2),
                }
            }
            (Tail { .. }, wider @ (Lines { .. } | Bytes { .. } | View::Excerpts { .. }))
            | (wider @ (Lines { .. } | Bytes { .. } | View::Excerpts { .. }), Tail { .. }) => {
                wider.clone()
            }
            _ => other.clone(),
        };
        match joined {
            Lines {
                first,
                last,
                total,
                cut,
            } => View::lines(first, last, total, cut),
            view => view,
        }
    }

    /// Where the rest of the file is, for the sentence a refusal gives.
    fn rest(&self) -> String {
        match self {
            View::Lines { cut, .. } if *cut > 0 => "lines longer than a read shows cannot be                  seen whole, so change the file with edits"
                .to_string(),
            View::Lines { first, last, total, .. } if last < first => {
                format!("read it (it has {total} lines)")
            }
            View::Lines { first, last, total, .. } => match (*first > 1, last < total) {
                (true, true) => format!("read lines 1-{} and from line {}", first - 1, last + 1),
                (true, false) => format!("read lines 1-{}", first - 1),
                _ => format!("read on from line {}", last + 1),
            },
            View::Bytes { .. } => "read the rest of it".to_string(),
            View::Excerpts { .. } => "read it".to_string(),
            View::Tail { .. } | View::Whole => "read all of it".to_string(),
        }
    }
}

impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            View::Whole => f.write_str("all of it"),
            View::Lines {
                first, last, total, ..
            } if last < first => {
                write!(f, "none of its {total} lines")
            }
            View::Lines {
                first,
                last,
                total,
                cut,
            } => {
                write!(f, "lines {first}-{last} of {total}")?;
                if *cut > 0 {
                    write!(f, ", {cut} of them cut short")?;
                }
                Ok(())
            }
            View::Bytes { shown, total } => write!(f, "the first {shown} of {total} bytes"),
            View::Tail { first, total } if *total > 0 => {
                write!(f, "its last lines ({first}-{total} of {total})")
            }
            View::Tail { .. } => f.write_str("its last lines"),
            View::Excerpts { total } => write!(f, "the lines around an edit, of {total} lines"),
        }
    }
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

    /// Changes the mark of `norm` in place, if there is one.
    pub(crate) fn update(&self, norm: &Path, f: impl FnOnce(&mut ReadMark)) {
        if let Some(mark) = self.marks.lock().get_mut(norm) {
            f(mark);
        }
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
    /// hashes to `current`, needs `mark` to be of exactly that content,
    /// and of a view wide enough for what the write replaces (`need`): a
    /// tail does for an append only, any other part for an edit, and only
    /// the whole file for a write, a delete or a move (`PartialView`,
    /// judged before the content: a fresher partial read would not do
    /// either).
    pub(crate) fn check(
        &self,
        key: &Key,
        mark: Option<ReadMark>,
        current: &str,
        need: Need,
    ) -> Result<()> {
        let Some(mark) =
            mark.filter(|m| need == Need::Append || !matches!(m.view, View::Tail { .. }))
        else {
            return Err(Error::NotRead {
                path: key.path.clone(),
            });
        };
        if need == Need::Whole && !mark.view.is_whole() {
            return Err(Error::PartialView {
                path: key.path.clone(),
                seen: mark.view.to_string(),
                rest: mark.view.rest(),
            });
        }
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

/// What a write replaces, for the view its mark must be of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// The whole content (a write, a delete, a move): a whole view.
    Whole,
    /// Text it names (an edit): any view but a tail.
    Edit,
    /// Nothing (an append): any view.
    Append,
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
