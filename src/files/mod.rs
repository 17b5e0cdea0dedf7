//! Transactional file operations through the scheduler.
//!
//! [`Files`] is one actor's set of file tools. Every operation runs the same
//! pipeline (see `docs/FILES.md`):
//!
//! 1. resolve the path to its key and check the path policy;
//! 2. admit a Call hold through the scheduler — exclusive on every path a
//!    mutation touches, shared for a read; try-only (`Busy`) unless
//!    `Config::file_op_wait` is set;
//! 3. inside the hold, check the version gate (a current read mark);
//! 4. read the pre-image and apply the edit in memory (a `replace` that does
//!    not match exactly once stops here);
//! 5. hand the pre-image to the history hook — if that fails, nothing is
//!    written;
//! 6. write a temp file beside the target through a folder handle, fsync,
//!    `renameat` over the target, fsync the folder, keep the mode;
//! 7. record who wrote what (for `Stale` messages) and return a [`Receipt`].
//!
//! There is no write path that skips step 2.

pub(crate) mod anchor;
pub(crate) mod atomic;
pub(crate) mod folders;
pub(crate) mod gate;
pub(crate) mod policy;

use std::borrow::Cow;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

pub use atomic::WriteStep;
use atomic::{Dir, Entry, StepHook};

use self::anchor::Edit;
use self::gate::{Gate, MarkStore, Need, ReadMark, StatKey, View};
use self::policy::Access;
use crate::core::key::{Key, Mode, Target};
use crate::core::scope::Scope;
use crate::error::{Error, Result};
use crate::sched::actor::{Actor, ActorMeta};
use crate::sched::config::Durability;
use crate::sched::events::EventKind;
use crate::sched::guard::Reservation;

/// Which file operation produced a [`Receipt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileOp {
    /// [`Files::write`].
    Write,
    /// [`Files::append`].
    Append,
    /// [`Files::replace`].
    Replace,
    /// [`Files::delete`].
    Delete,
    /// [`Files::rename`].
    Rename,
}

impl fmt::Display for FileOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileOp::Write => "write",
            FileOp::Append => "append",
            FileOp::Replace => "replace",
            FileOp::Delete => "delete",
            FileOp::Rename => "rename",
        })
    }
}

/// Whether a change is covered by file history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
#[non_exhaustive]
pub enum HistoryStatus {
    /// No history is configured for this scheduler; the change is not
    /// recorded anywhere but on disk.
    Off,
    /// The pre-image was snapshotted and the change journaled.
    Recorded,
    /// The file was written, but recording it afterwards failed: the change
    /// is on disk and its pre-image is saved, but the journal lacks it.
    Incomplete {
        /// Why the journal append failed.
        reason: String,
    },
    /// Written without a snapshot, as the caller asked
    /// ([`Files::unprotected`]).
    Unprotected,
}

/// What a file operation did.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
/// let receipt = agent.files().write("notes/todo.md", b"- ship\n")?;
/// assert_eq!(receipt.before, None); // created
/// assert_eq!(receipt.size, 7);
/// println!("{receipt}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Receipt {
    /// The operation.
    pub op: FileOp,
    /// The file's absolute, resolved path (a rename's destination).
    pub path: PathBuf,
    /// A rename's source.
    pub from: Option<PathBuf>,
    /// sha256 of the content before (`None`: there was no file).
    pub before: Option<String>,
    /// sha256 of the content after (`None`: there is no file now).
    pub after: Option<String>,
    /// The size in bytes after (0 after a delete).
    pub size: u64,
    /// The permission bits after (`None` after a delete).
    pub mode: Option<u32>,
    /// Whether file history covers this change.
    pub history: HistoryStatus,
    /// Set when a replace or an append met a stale mark and was applied
    /// on top of the changes since (an anchored edit, SPEC §6): what
    /// changed between the version the mark names and the content the edit
    /// was applied to. The mark is not refreshed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchored: Option<Anchored>,
    /// Set when this answers a call resent after its answer was lost
    /// (SPEC §6): an append or edit identical to one the actor already
    /// made with the same mark. Nothing was written: this is the first
    /// write's receipt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat: bool,
}

/// What an anchored edit was applied on top of: the changes since the
/// agent's read, which it has now seen (see [`Receipt::anchored`]).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let history = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("list.py"), "ITEMS = [\n    # end\n]\n")?;
/// let sched = writ::Scheduler::new(writ::Config::default().history_dir(history.path()));
/// let (a, b) = (
///     sched.actor("a", writ::Grant::workspace(dir.path()))?,
///     sched.actor("b", writ::Grant::workspace(dir.path()))?,
/// );
/// a.files().read("list.py")?;
/// b.files().read("list.py")?;
/// a.files().replace("list.py", "    # end\n", "    \"a\",\n    # end\n")?;
/// // b's mark is stale, but its edit cannot overwrite what a wrote.
/// let receipt = b.files().replace("list.py", "    # end\n", "    \"b\",\n    # end\n")?;
/// let anchored = receipt.anchored.expect("applied on top of a's change");
/// assert_eq!(anchored.writer.as_deref(), Some("a"));
/// assert!(anchored.diff.contains("+    \"a\",\n"));
/// assert_eq!(
///     std::fs::read_to_string(dir.path().join("list.py"))?,
///     "ITEMS = [\n    \"a\",\n    \"b\",\n    # end\n]\n"
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Anchored {
    /// sha256 of the version the agent's mark names (what it read).
    pub marked: String,
    /// Who produced the content the edit was applied to, after the mark,
    /// as `Stale` would name them (`None`: changed outside writ, or not
    /// only by the last writer).
    pub writer: Option<String>,
    /// A unified diff from the marked version to the content the edit was
    /// applied to, within the read bound of the surface that made the
    /// edit (the tools' read bound for MCP, `Config::max_read_bytes`
    /// otherwise).
    pub diff: String,
    /// The diff was cut short at that bound.
    #[serde(default)]
    pub truncated: bool,
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.from, self.op) {
            (Some(from), _) => write!(f, "renamed {} to {}", from.display(), self.path.display())?,
            (None, FileOp::Delete) => write!(f, "deleted {}", self.path.display())?,
            (None, op) => write!(
                f,
                "{} {} ({} bytes)",
                match op {
                    FileOp::Append => "appended to",
                    FileOp::Replace => "edited",
                    _ if self.before.is_none() => "created",
                    _ => "wrote",
                },
                self.path.display(),
                self.size
            )?,
        }
        match &self.history {
            HistoryStatus::Incomplete { reason } => {
                write!(f, "; written, history incomplete ({reason})")?;
            }
            HistoryStatus::Unprotected => f.write_str("; unprotected (no snapshot)")?,
            _ => {}
        }
        if self.anchored.is_some() {
            f.write_str("; applied on top of changes made since the read")?;
        }
        if self.repeat {
            f.write_str("; a repeat of a call already applied, nothing written again")?;
        }
        Ok(())
    }
}

/// One file's state just before an operation replaces it, for the history
/// hook.
pub(crate) struct PreImage<'a> {
    pub(crate) path: &'a Path,
    /// `None`: the file does not exist (or is a symlink, which has no content).
    pub(crate) state: Option<PreState<'a>>,
}

/// The content and mode of an existing file.
pub(crate) struct PreState<'a> {
    pub(crate) sha256: &'a str,
    pub(crate) mode: u32,
    pub(crate) bytes: &'a [u8],
}

/// Where file history plugs into the write pipeline.
///
/// `snapshot` runs inside the exclusive hold, after the gate and before
/// anything on disk changes: an `Err` fails the operation with nothing
/// written. `record` runs after the change is in place: an `Err` does not
/// undo it, the receipt says "history incomplete".
pub(crate) trait HistoryHook: Send + Sync {
    /// Saves the pre-images of every path the operation will change, and
    /// the new content when there is one (`new`). `Ok(false)` when a
    /// pre-image above the snapshot limit was left unsaved because the
    /// handle is [`Files::unprotected`]; without that, such a pre-image is
    /// an `Err`.
    fn snapshot(
        &self,
        actor: &ActorMeta,
        op: FileOp,
        pre: &[PreImage<'_>],
        new: Option<&[u8]>,
        unprotected: bool,
    ) -> Result<bool>;
    /// Journals the finished change.
    fn record(&self, actor: &ActorMeta, receipt: &Receipt) -> Result<()>;
    /// The content whose sha256 is `sha256`, if history holds it: the
    /// version a stale mark names, for an anchored edit.
    fn version(&self, _sha256: &str) -> Option<Vec<u8>> {
        None
    }
}

/// Admission by a table outside this process (the session's table in etcd,
/// SPEC §16), asked by a [`Files`] handle before its own call hold, on
/// exactly the keys step 1 resolved: so the outer hold and the I/O always
/// agree, as the local hold and the I/O do. What it returns is what the gate
/// needs to know of those keys and this process cannot: the actor's marks
/// and the last writers through writ, kept with that table.
pub(crate) trait OuterAdmission: Send + Sync {
    /// Admits `keys` (resolved, with their modes) for the operation
    /// `label`, all or nothing, and returns what is known of each key, in
    /// order. An `Err` refuses the operation before anything is read or
    /// written.
    fn admit(&self, keys: &[(Key, Mode)], label: &str) -> Result<Vec<Known>>;

    /// Told of each change the operation made, once it is on disk: the
    /// table records who wrote what, for the gate of later operations
    /// wherever they run.
    fn landed(&self, _receipt: &Receipt) {}

    /// A write to `key` (a file) was refused `Stale` on a handle that is
    /// [`Files::claiming`]: the outer table gives the actor a claim on it
    /// for `ttl` (SPEC §6), as the operation ends, inside its own hold.
    fn claim(&self, _key: &Key, _ttl: std::time::Duration) {}
}

/// What an outer table knows of one key, for the gate.
#[derive(Debug, Default, Clone)]
pub(crate) struct Known {
    /// The actor's mark of the key, if it has one.
    pub(crate) mark: Option<ReadMark>,
    /// The last write through writ to the key — (writer, the content hash
    /// it produced, how long ago) — only when that write came after `mark`
    /// in the outer table's own order (never by comparing two machines'
    /// clocks).
    pub(crate) writer: Option<(String, String, std::time::Duration)>,
}

/// How many lines of a file an append needs to have seen: the tail a
/// refused append carries (SPEC §6), on `/rpc` and through the MCP tools
/// alike.
#[cfg_attr(not(any(feature = "mcp", feature = "server")), allow(dead_code))]
pub(crate) const TAIL_LINES: usize = 20;

/// The first line (1-based) of the tail a refused append shows, in a file
/// of `total` lines: the last [`TAIL_LINES`] of them.
#[cfg_attr(not(any(feature = "mcp", feature = "server")), allow(dead_code))]
pub(crate) fn tail_first_line(total: u64) -> u64 {
    total.saturating_sub(TAIL_LINES as u64) + 1
}

/// Whether a refused write shows its agent the file as it is now (SPEC
/// §6): the file changed since the agent read it, or the agent never read
/// it. Either way what it needs is the current content, which then counts
/// as read; every other refusal carries none.
#[cfg_attr(not(any(feature = "mcp", feature = "server")), allow(dead_code))]
pub(crate) fn refusal_shows_current(error: &Error) -> bool {
    matches!(error, Error::Stale { .. } | Error::NotRead { .. })
}

/// A resolved path of one operation.
struct Place {
    key: Key,
    /// Relative to the actor's root, for labels.
    rel: PathBuf,
}

/// One actor's file tools: reads that leave a [`ReadMark`], and writes that
/// pass admission, the version gate and the path policy, and land atomically.
///
/// Operations are synchronous and block on I/O; call them from a blocking
/// context (e.g. `tokio::task::spawn_blocking`), never on an async runtime's
/// worker thread when `Config::file_op_wait` is set.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # std::fs::write(dir.path().join("a.rs"), "fn old() {}\n").unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
/// let files = agent.files();
///
/// // An existing file must be read before it is changed.
/// assert!(matches!(files.write("a.rs", b"x"), Err(writ::Error::NotRead { .. })));
/// let (bytes, _mark) = files.read("a.rs")?;
/// assert_eq!(bytes, b"fn old() {}\n");
/// files.replace("a.rs", "old", "new")?;
///
/// // Each write needs a fresh read: the mark is now stale.
/// assert!(matches!(files.append("a.rs", b"// more\n"), Err(writ::Error::Stale { .. })));
/// files.read("a.rs")?;
/// files.append("a.rs", b"// more\n")?;
/// files.read("a.rs")?; // a rename needs a current mark too
/// files.rename("a.rs", "b.rs")?;
/// # Ok(()) }
/// ```
#[must_use = "Files does nothing until an operation is called"]
pub struct Files<'a> {
    actor: &'a Actor,
    allowed: Vec<String>,
    unprotected: bool,
    use_cache: bool,
    steps: Option<StepHook>,
    history: Option<Arc<dyn HistoryHook>>,
    /// The call reservation operations run inside, when given one.
    within: Option<parking_lot::Mutex<&'a mut Reservation>>,
    /// The table that admits every operation before this scheduler does,
    /// when the session's table is elsewhere.
    outer: Option<Arc<dyn OuterAdmission>>,
    /// The grant root's folder handle, opened on first use: the walk to
    /// every file starts from it.
    root: OnceLock<Arc<OwnedFd>>,
    /// How long an anchored edit's diff may be, when the surface shows
    /// less than `Config::max_read_bytes` (the tools' read bound).
    diff_bound: Option<usize>,
    /// Whether a `Stale` refusal gives a claim (SPEC §6): the agent tools.
    claiming: bool,
}

impl fmt::Debug for Files<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Files")
            .field("actor", &self.actor.name())
            .field("allowed", &self.allowed)
            .field("unprotected", &self.unprotected)
            .finish()
    }
}

impl<'a> Files<'a> {
    /// `actor`'s file tools, recording into `history` when there is one.
    /// [`Actor::files`] (defined with history, which plugs itself in here)
    /// is the public way in.
    pub(crate) fn new(actor: &'a Actor, history: Option<Arc<dyn HistoryHook>>) -> Self {
        Files {
            actor,
            allowed: Vec::new(),
            unprotected: false,
            use_cache: true,
            steps: None,
            history,
            within: None,
            outer: None,
            root: OnceLock::new(),
            diff_bound: None,
            claiming: false,
        }
    }
}

fn io_err<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> Error + 'p {
    move |e| Error::io(op, path, e)
}

/// The bytes of lines `lines` (0-based, each with its terminator): the
/// in-memory model `range_of` is tested against.
#[cfg(test)]
fn line_slice<'b>(bytes: &'b [u8], lines: &impl RangeBounds<usize>) -> &'b [u8] {
    let first = match lines.start_bound() {
        Bound::Included(&n) => n,
        Bound::Excluded(&n) => n.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match lines.end_bound() {
        Bound::Included(&n) => n.saturating_add(1),
        Bound::Excluded(&n) => n,
        Bound::Unbounded => usize::MAX,
    };
    // Where each line starts; a final newline opens no further line.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            memchr::memchr_iter(b'\n', bytes)
                .filter(|&i| i + 1 < bytes.len())
                .map(|i| i + 1),
        )
        .collect();
    let offset = |line: usize| starts.get(line).copied().unwrap_or(bytes.len());
    let start = offset(first);
    let stop = offset(end).max(start);
    &bytes[start..stop]
}

/// What [`range_of`] read: the kept bytes, the hash of all of them, how
/// many there were, and how many lines.
type Ranged = (Vec<u8>, String, u64, u64);

/// Streams the first `size` bytes of `file` (what it held when opened: a
/// file that keeps growing cannot keep the read going), hashing them all
/// and keeping only the bytes of `lines` (0-based, as [`line_slice`]).
/// `Ok(Err(n))` when the kept bytes would pass `limit` (`n` of them seen).
fn range_of(
    file: &std::fs::File,
    size: u64,
    lines: &impl RangeBounds<usize>,
    limit: u64,
) -> std::io::Result<std::result::Result<Ranged, u64>> {
    use sha2::Digest;
    use std::os::unix::fs::FileExt;
    let first = match lines.start_bound() {
        Bound::Included(&n) => n,
        Bound::Excluded(&n) => n.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match lines.end_bound() {
        Bound::Included(&n) => n.saturating_add(1),
        Bound::Excluded(&n) => n,
        Bound::Unbounded => usize::MAX,
    };
    let mut hasher = sha2::Sha256::new();
    let mut kept = Vec::new();
    let mut line = 0usize;
    let mut chunk = vec![0u8; (size.saturating_add(1)).clamp(4096, 256 * 1024) as usize];
    let mut offset = 0u64;
    while offset < size {
        let want = usize::try_from(size - offset).map_or(chunk.len(), |left| left.min(chunk.len()));
        let n = match file.read_at(&mut chunk[..want], offset) {
            Ok(0) => break, // it shrank
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&chunk[..n]);
        offset += n as u64;
        for piece in chunk[..n].split_inclusive(|&b| b == b'\n') {
            if line >= first && line < end {
                if (kept.len() + piece.len()) as u64 > limit {
                    return Ok(Err((kept.len() + piece.len()) as u64));
                }
                kept.extend_from_slice(piece);
            }
            if piece.last() == Some(&b'\n') {
                line += 1;
            }
        }
    }
    let sha256 = gate::hex(&hasher.finalize());
    // A last line without a newline is a line too.
    let mut last = [0u8; 1];
    let unterminated =
        offset > 0 && matches!(file.read_at(&mut last, offset - 1), Ok(1)) && last[0] != b'\n';
    let lines = line as u64 + u64::from(unterminated);
    Ok(Ok((kept, sha256, offset, lines)))
}

/// The fingerprint of a call (SPEC §6, resent calls): its operation and
/// arguments, each length-prefixed so no two calls share one.
fn fingerprint(op: &str, args: &[&[u8]]) -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update(op.as_bytes());
    for arg in args {
        hasher.update((arg.len() as u64).to_le_bytes());
        hasher.update(arg);
    }
    gate::hex(&hasher.finalize())
}

impl<'a> Files<'a> {
    /// Allows a sensitive name (a pattern of the same form as
    /// `Config::sensitive_names`, e.g. `".env.example"`) for this handle's
    /// reads and writes. Sensitive names are refused by default; allow only
    /// what a person has decided an agent may see.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join(".env.example"), "PORT=8080\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// assert!(matches!(agent.files().read(".env.example"), Err(writ::Error::Policy { .. })));
    /// let (bytes, _) = agent.files().allow_sensitive(".env.example").read(".env.example")?;
    /// assert_eq!(bytes, b"PORT=8080\n");
    /// # Ok(()) }
    /// ```
    pub fn allow_sensitive(mut self, pattern: impl Into<String>) -> Self {
        self.allowed.push(pattern.into());
        self
    }

    /// Writes through this handle are marked "unprotected" in their
    /// receipts: the caller accepts that files too large to snapshot
    /// (`Config::snapshot_limit`) are written without a pre-image.
    pub fn unprotected(mut self) -> Self {
        self.unprotected = true;
        self
    }

    /// This handle's operations run inside `call`, a call reservation of
    /// the same actor (e.g. one its caller waited for with
    /// [`Request::admit_timeout`](crate::Request::admit_timeout)), instead of
    /// admitting a call hold of their own, which `call` would conflict with:
    /// two calls of one actor on one path are serialized. Paths `call` does
    /// not cover yet are added to it without waiting
    /// ([`Reservation::extend`]: all or nothing, `Busy` when contested) and
    /// stay until it drops. A reservation of another actor is not used.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// let mut call = agent.request(["notes.md"]).label("edit notes").try_admit()?;
    /// // A second call of the same actor on the same path is refused...
    /// assert!(matches!(agent.files().write("notes.md", "x"), Err(writ::Error::Busy(_))));
    /// // ...while inside the first one the write runs.
    /// agent.files().within(&mut call).write("notes.md", "x")?;
    /// assert_eq!(sched.dump().holds.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn within(mut self, call: &'a mut Reservation) -> Self {
        if Arc::ptr_eq(call.meta(), &self.actor.meta) {
            self.within = Some(parking_lot::Mutex::new(call));
        }
        self
    }

    /// Anchored edits of this handle carry a diff of at most `bytes`
    /// (a surface that shows less than `Config::max_read_bytes`, as the
    /// MCP tools' read bound does).
    #[cfg_attr(not(any(feature = "mcp", feature = "server")), allow(dead_code))]
    pub(crate) fn diff_bound(mut self, bytes: usize) -> Self {
        self.diff_bound = Some(bytes);
        self
    }

    /// Re-hash every file the gate checks instead of trusting the stat cache
    /// (for measurements).
    #[doc(hidden)]
    pub fn without_hash_cache(mut self) -> Self {
        self.use_cache = false;
        self
    }

    /// Runs `hook` before each I/O step of a write; an `Err` fails that step
    /// (fault injection for tests).
    #[doc(hidden)]
    pub fn on_write_step(
        mut self,
        hook: impl Fn(WriteStep) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Self {
        self.steps = Some(Arc::new(hook));
        self
    }

    /// A write this handle refuses `Stale` holds the file for this actor
    /// (SPEC §6, "hot files"): it gets a claim on it for
    /// [`Config::claim_ttl`](crate::Config::claim_ttl), so other actors'
    /// writes there wait until its next write to it (or the TTL). The
    /// agent tools (MCP, the hook, `files.*` with `current`) ask for this,
    /// since their refusal carries the current content and the agent
    /// redoes its change at once.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("hot.md"), "one\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().anchored_edits(false));
    /// let a = sched.actor("a", writ::Grant::workspace(dir.path()))?;
    /// let b = sched.actor("b", writ::Grant::workspace(dir.path()))?;
    /// a.files().read("hot.md")?;
    /// b.files().read("hot.md")?;
    /// b.files().write("hot.md", "two\n")?;
    /// let refused = a.files().claiming().write("hot.md", "three\n");
    /// assert!(matches!(refused, Err(writ::Error::Stale { .. })));
    /// b.files().read("hot.md")?;
    /// let busy = b.files().write("hot.md", "four\n").unwrap_err();
    /// assert!(busy.to_string().contains("claimed by 'a'"), "{busy}");
    /// a.files().read("hot.md")?;
    /// a.files().write("hot.md", "three\n")?; // a's write lands; its claim ends
    /// # Ok(()) }
    /// ```
    pub fn claiming(mut self) -> Self {
        self.claiming = true;
        self
    }

    /// Every operation of this handle is admitted by `outer` first (on the
    /// keys it resolved), and the gate learns from it what it knows of
    /// them (marks, last writers) before checking.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn admitted_by(mut self, outer: Arc<dyn OuterAdmission>) -> Self {
        self.outer = Some(outer);
        self
    }

    #[cfg(test)]
    pub(crate) fn with_history(mut self, hook: Arc<dyn HistoryHook>) -> Self {
        self.history = Some(hook);
        self
    }

    fn meta(&self) -> &ActorMeta {
        &self.actor.meta
    }

    fn durable(&self) -> bool {
        self.actor.sched.shared.config.durability == Durability::Machine
    }

    /// Step 1: resolve and check the policy.
    fn place(&self, path: &Path, follow: bool, access: Access) -> Result<Place> {
        self.told(self.placed(path, follow, access))
    }

    /// A refusal of the path rules (a sensitive name, a path out of the
    /// grant or the fence, a read-only actor) is an event of the stream,
    /// as a busy path is: the refusals an operator most wants to see are
    /// logged and counted like every other (SPEC §13).
    fn told<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(
            e @ (Error::Policy { .. }
            | Error::OutsideGrant { .. }
            | Error::OutsideFence { .. }
            | Error::ReadOnly { .. }),
        ) = &result
        {
            let meta = self.meta();
            self.actor
                .sched
                .emit(|| crate::sched::events::refused(meta.id, meta.name.clone(), e));
        }
        result
    }

    fn placed(&self, path: &Path, follow: bool, access: Access) -> Result<Place> {
        let meta = self.meta();
        if access == Access::Write && matches!(meta.scope, Scope::ReadOnly) {
            return Err(Error::ReadOnly {
                actor: meta.name.to_string(),
                path: path.to_path_buf(),
            });
        }
        let target = if follow {
            Target::file(path)
        } else {
            Target::file(path).no_follow()
        };
        let (key, area) = meta.resolver.resolve(&target)?;
        let config = &self.actor.sched.shared.config;
        policy::check(&config.sensitive, &self.allowed, path, &key, area, access)?;
        let rel = meta.resolver.relative(&key.path);
        policy::check_folders(&config.sensitive, &self.allowed, &rel, &key)?;
        Ok(Place { rel, key })
    }

    /// Step 2: the call hold, on exactly the keys step 1 resolved (named as
    /// resolved keys, so admission does no second lookup). Should a folder
    /// on the way be swapped for a symlink afterwards, the `O_NOFOLLOW` walk
    /// in step 6 refuses it: the hold and the I/O always agree.
    fn admit(&self, places: &[(&Place, Mode)], label: String) -> Result<Option<Reservation>> {
        self.told(self.admitted(places, label))
    }

    fn admitted(&self, places: &[(&Place, Mode)], label: String) -> Result<Option<Reservation>> {
        if let Some(outer) = &self.outer {
            let keys: Vec<(Key, Mode)> = places.iter().map(|(p, m)| (p.key.clone(), *m)).collect();
            let known = outer.admit(&keys, &label)?;
            // The gate of this process then sees what the outer table
            // knows: this actor's marks and who wrote last, nothing older.
            let marks = MarkStore::of(self.meta());
            let gate = Gate::of(&self.actor.sched);
            for ((place, _), known) in places.iter().zip(known) {
                let norm = &place.key.norm;
                match &known.mark {
                    Some(mark) => marks.put(norm.clone(), mark.clone()),
                    None => {
                        marks.remove(norm);
                    }
                }
                gate.seed_writer(norm, known.mark.as_ref(), known.writer);
            }
        }
        let targets = places.iter().map(|(place, mode)| {
            let t = if place.key.tree {
                Target::tree(place.key.path.clone()).resolved()
            } else {
                Target::file(place.key.path.clone()).resolved()
            };
            if *mode == Mode::Shared { t.shared() } else { t }
        });
        if let Some(call) = &self.within {
            // Already admitted: only what the call does not cover is asked for.
            return call.lock().extend(targets).map(|()| None);
        }
        // The request's place among the writers of a hot file comes from
        // the actor's refusals there (SPEC §6), which the request reads.
        let request = self.actor.request(targets).label(label);
        match self.actor.sched.shared.config.file_op_wait {
            Some(wait) => request.admit_blocking_timeout(wait),
            None => request.try_admit(),
        }
        .map(Some)
    }

    /// The grant root's folder handle, opened once.
    fn root_fd(&self) -> Result<Arc<OwnedFd>> {
        if let Some(fd) = self.root.get() {
            return Ok(fd.clone());
        }
        let fd = atomic::open_root(&self.meta().resolver.root)?;
        Ok(self.root.get_or_init(|| fd).clone())
    }

    /// Opens the folder of a place through directory handles.
    fn folder(&self, place: &Place, create: bool) -> Result<Option<(Dir, std::ffi::OsString)>> {
        let resolver = &self.meta().resolver;
        let base = resolver
            .base_of(&place.key)
            .ok_or_else(|| Error::OutsideGrant {
                path: place.key.path.clone(),
                root: resolver.root.clone(),
            })?;
        let base_fd = if base == resolver.root {
            self.root_fd()?
        } else {
            atomic::open_root(base)?
        };
        atomic::open_parent(base, base_fd, &place.key.path, create, self.durable())
    }

    /// The gate's view of an existing file's hash, from the stat cache when
    /// the entry is trusted.
    fn current_hash(&self, place: &Place, file: &std::fs::File, stat: StatKey) -> Result<String> {
        let gate = Gate::of(&self.actor.sched);
        if self.use_cache {
            if let Some(hash) = gate.cached(&stat) {
                return Ok(hash);
            }
        }
        let recorded = gate::now_ns();
        let hash = gate::hash_file(file, &stat).map_err(io_err("read", &place.key.path))?;
        self.remember_if_unchanged(file, stat, &hash, recorded);
        Ok(hash)
    }

    fn remember_if_unchanged(
        &self,
        file: &std::fs::File,
        stat: StatKey,
        hash: &str,
        recorded: i128,
    ) {
        if let Ok(after) = file.metadata() {
            if StatKey::of(&after) == stat {
                Gate::of(&self.actor.sched).remember(stat, hash, recorded);
            }
        }
    }

    /// Reads a whole open file and hashes it.
    fn load(
        &self,
        place: &Place,
        file: &std::fs::File,
        stat: StatKey,
    ) -> Result<(Vec<u8>, String)> {
        let recorded = gate::now_ns();
        let limit = self.actor.sched.shared.config.max_read_bytes;
        let bytes = gate::read_all(file, &stat, limit).map_err(|e| {
            if e.kind() == std::io::ErrorKind::FileTooLarge {
                let size = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<gate::TooLargeAt>())
                    .map_or(stat.size, |at| at.0);
                Error::TooLarge {
                    path: place.key.path.clone(),
                    size,
                    limit,
                }
            } else {
                Error::io("read", &place.key.path, e)
            }
        })?;
        let hash = gate::sha256_hex(&bytes);
        self.remember_if_unchanged(file, stat, &hash, recorded);
        Ok((bytes, hash))
    }

    /// Step 3: a write to the existing file at `place` whose content hashes
    /// to `current` needs this actor's current mark, of a view wide enough
    /// for what it replaces (`need`).
    fn gate(&self, place: &Place, current: &str, need: Need) -> Result<()> {
        let mark = MarkStore::of(self.meta()).get(&place.key.norm);
        Gate::of(&self.actor.sched).check(&place.key, mark, current, need)
    }

    /// A call resent after its answer was lost (SPEC §6): the receipt of
    /// `call` if this actor already made it with its mark of `place`, as
    /// it was answered, marked as a repeat (an anchored one with its diff
    /// made again from history: marks keep none).
    fn resent(&self, place: &Place, call: &str) -> Option<Receipt> {
        let mark = MarkStore::of(self.meta()).get(&place.key.norm)?;
        let mut receipt = mark.sent(call)?.clone();
        receipt.repeat = true;
        if let Some(anchored) = &mut receipt.anchored {
            let versions = self.history.as_ref().and_then(|hook| {
                let marked = hook.version(&anchored.marked)?;
                let applied_to = hook.version(receipt.before.as_deref()?)?;
                Some((marked, applied_to))
            });
            if let Some((marked, applied_to)) = versions {
                let (diff, truncated) = anchor::changes(&marked, &applied_to, self.bound());
                anchored.diff = diff;
                anchored.truncated = truncated;
            }
        }
        Some(receipt)
    }

    /// How long a diff this handle returns may be.
    fn bound(&self) -> usize {
        let config = &self.actor.sched.shared.config;
        let max = usize::try_from(config.max_read_bytes).unwrap_or(usize::MAX);
        self.diff_bound.map_or(max, |bound| bound.min(max))
    }

    /// A write to `place` was refused `error`: a `Stale` refusal on a
    /// handle that is [`Files::claiming`] gives the actor a claim on the
    /// file, inside the write's own call (`hold`, or the call the handle
    /// runs within), so no other writer slips in before it.
    fn claim_if_stale(&self, hold: Option<&Reservation>, place: &Place, error: &Error) {
        if !self.claiming || !matches!(error, Error::Stale { .. }) {
            return;
        }
        let ttl = self.actor.sched.shared.config.claim_ttl;
        if ttl.is_zero() || place.key.tree {
            return;
        }
        // Under a table elsewhere (etcd) the claim is that table's: one
        // given in this process would hold the file for this server only.
        if let Some(outer) = &self.outer {
            outer.claim(&place.key, ttl);
            return;
        }
        match (hold, &self.within) {
            (Some(hold), _) => {
                hold.claim_key(place.key.clone(), ttl);
            }
            (None, Some(call)) => {
                call.lock().claim_key(place.key.clone(), ttl);
            }
            (None, None) => {}
        }
    }

    /// A gate's refusal, told to the event stream.
    fn refused_if_err<T>(&self, checked: Result<T>) -> Result<T> {
        if let Err(e) = &checked {
            let meta = self.meta();
            self.actor
                .sched
                .emit(|| crate::sched::events::refused(meta.id, meta.name.clone(), e));
        }
        checked
    }

    /// An anchored edit (SPEC §6): `edit` met `stale`, a refusal of this
    /// actor's mark at `place` whose content is now `current`. Applied when
    /// anchored edits are on, history holds the marked version and
    /// [`anchor::decide`] finds the edit cannot overwrite unseen work;
    /// otherwise `stale` stands.
    ///
    /// `apply` makes the new content of `current`; for a replace it must be
    /// exactly the replacements the decision was asked about (the
    /// filesystem tools' matching is looser), or `stale` stands.
    fn anchored<'d>(
        &self,
        place: &Place,
        edit: Edit<'_>,
        current: &[u8],
        stale: Error,
        apply: impl FnOnce(Option<&[u8]>) -> Result<Cow<'d, [u8]>>,
    ) -> Result<(Cow<'d, [u8]>, Anchored)> {
        let config = &self.actor.sched.shared.config;
        let (true, Some(hook)) = (config.anchored_edits, &self.history) else {
            return Err(stale);
        };
        let Some(mark) = MarkStore::of(self.meta()).get(&place.key.norm) else {
            return Err(stale);
        };
        let Some(marked) = hook.version(&mark.sha256) else {
            return Err(stale);
        };
        // The diff runs inside the exclusive hold: a pathological pair of
        // versions gets a less minimal diff (more refusals), not a stall.
        let deadline = std::time::Instant::now() + anchor::DIFF_TIME;
        let new = match (anchor::decide(&marked, current, edit, Some(deadline)), edit) {
            (Ok(()), _) => {
                let Ok(new) = apply(Some(current)) else {
                    return Err(stale);
                };
                if let Edit::Replace(pairs) = edit {
                    if anchor::replaced(current, pairs).as_deref() != Some(&*new) {
                        return Err(stale);
                    }
                }
                new
            }
            // Insertions at one point are kept both: a replace that only
            // inserts lines goes between the lines it saw, after others'.
            (Err(_), Edit::Replace(&[(old, new)])) => {
                match anchor::inserted(&marked, current, old, new, Some(deadline)) {
                    Some(rebased) => Cow::Owned(rebased),
                    None => return Err(stale),
                }
            }
            (Err(_), _) => return Err(stale),
        };
        let writer = match stale {
            Error::Stale { writer, .. } => writer,
            _ => None,
        };
        let (diff, truncated) = anchor::changes(&marked, current, self.bound());
        Ok((
            new,
            Anchored {
                marked: mark.sha256,
                writer,
                diff,
                truncated,
            },
        ))
    }

    fn not_a_file(place: &Place, entry: &Entry) -> Error {
        let reason = match entry {
            Entry::Dir => "it is a folder; file operations act on regular files",
            Entry::Symlink => {
                "it became a symlink after it was resolved; nothing was done, check it and retry"
            }
            _ => "it is not a regular file (a fifo, socket or device)",
        };
        Error::invalid(&place.key.path, reason)
    }

    /// Journals the change (step 8) and says how well history covers it;
    /// `protected` is what the snapshot reported.
    fn history_status(&self, receipt: &Receipt, protected: bool) -> HistoryStatus {
        // Every changed file passes here once, after it landed on disk.
        if let Some(outer) = &self.outer {
            outer.landed(receipt);
        }
        self.actor.sched.emit(|| {
            let meta = self.meta();
            EventKind::FileWritten {
                actor: meta.id,
                actor_name: meta.name.clone(),
                op: receipt.op.to_string(),
                path: receipt.path.clone(),
                turn: meta.turn.lock().as_deref().map(str::to_string),
            }
        });
        match &self.history {
            None if self.unprotected => HistoryStatus::Unprotected,
            None => HistoryStatus::Off,
            Some(hook) => match hook.record(self.meta(), receipt) {
                Ok(()) if protected => HistoryStatus::Recorded,
                Ok(()) => HistoryStatus::Unprotected,
                Err(e) => HistoryStatus::Incomplete {
                    reason: e.to_string(),
                },
            },
        }
    }

    /// Opens the regular file at `place` for reading, through its folder's
    /// handle: a missing file is `NotFound`, anything else not a file is
    /// refused as `not_a_file` says.
    fn open_file(&self, place: &Place) -> Result<(std::fs::File, std::fs::Metadata)> {
        let not_found = || Error::NotFound {
            path: place.key.path.clone(),
        };
        let (dir, name) = self.folder(place, false)?.ok_or_else(not_found)?;
        match dir.entry(&name)? {
            Entry::File(file, meta) => Ok((file, meta)),
            Entry::Missing => Err(not_found()),
            other => Err(Self::not_a_file(place, &other)),
        }
    }

    /// Reads a whole file and records a mark of it for this actor.
    ///
    /// Takes a shared call hold (reads pass through fences and wait only for
    /// a write in progress). A missing file is `NotFound`; a folder is
    /// `InvalidPath`; a sensitive name is `Policy`.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<(Vec<u8>, ReadMark)> {
        self.read_seen(path.as_ref(), |_| View::Whole)
    }

    /// Reads a whole file for a caller that shows only its tail (a refused
    /// append carrying the file's last lines, SPEC §6) and records a mark
    /// good for an append only ([`View::Tail`]): a write, an edit, a
    /// delete or a move of the file still needs a read of the whole of it.
    /// A current whole-file mark the actor already holds is kept.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("log.md"), "a\nb\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// let (_, mark) = agent.files().read_for_append("log.md")?;
    /// assert!(matches!(mark.view, writ::View::Tail { .. }));
    /// assert!(matches!(agent.files().write("log.md", b""), Err(writ::Error::NotRead { .. })));
    /// agent.files().append("log.md", b"c\n")?;
    /// # Ok(()) }
    /// ```
    pub fn read_for_append(&self, path: impl AsRef<Path>) -> Result<(Vec<u8>, ReadMark)> {
        self.read_seen(path.as_ref(), |_| View::Tail { first: 0, total: 0 })
    }

    /// Reads a whole file for a caller that shows its reader what `look`
    /// says of the bytes (a line range, a text cut at a bound), and records
    /// a mark of that view (SPEC §6). A mark of the same content the actor
    /// already holds widens it: two reads that together showed every line
    /// are a whole view. Either way the new mark keeps no receipts (a new
    /// read, SPEC §6).
    pub(crate) fn read_seen(
        &self,
        path: &Path,
        look: impl FnOnce(&[u8]) -> View,
    ) -> Result<(Vec<u8>, ReadMark)> {
        let place = self.place(path, true, Access::Read)?;
        let _hold = self.admit(
            &[(&place, Mode::Shared)],
            format!("read {}", place.rel.display()),
        )?;
        let read_at = SystemTime::now();
        let (file, meta) = self.open_file(&place)?;
        let (bytes, sha256) = self.load(&place, &file, StatKey::of(&meta))?;
        let view = look(&bytes);
        let len = bytes.len() as u64;
        let mark = self.marked(&place, sha256, len, read_at, view);
        Ok((bytes, mark))
    }

    /// Records this actor's new mark of `place`, widened by the one it
    /// holds when that is of the same content.
    fn marked(
        &self,
        place: &Place,
        sha256: String,
        len: u64,
        read_at: SystemTime,
        view: View,
    ) -> ReadMark {
        let marks = MarkStore::of(self.meta());
        let view = match marks.get(&place.key.norm) {
            Some(old) if old.sha256 == sha256 => old.view.merge(&view),
            _ => view,
        };
        let mut mark = ReadMark::new(place.key.path.clone(), sha256, len, view);
        mark.read_at = read_at;
        marks.put(place.key.norm.clone(), mark.clone());
        mark
    }

    /// Reads some lines of a file (0-based line numbers, each line with its
    /// terminator; a range past the end is cut short) and records a mark
    /// hashed over the *whole* file, of a view of those lines
    /// ([`View::Lines`]; [`View::Whole`] when they are all of them): enough
    /// for an append or an edit, not for a write, a delete or a move
    /// (`PartialView`).
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("log.md"), "a\nb\nc\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// let (tail, mark) = agent.files().read_range("log.md", 2..)?;
    /// assert_eq!(tail, b"c\n");
    /// assert_eq!(mark.len, 6); // the mark covers the whole file
    /// agent.files().append("log.md", b"d\n")?;
    /// # Ok(()) }
    /// ```
    pub fn read_range(
        &self,
        path: impl AsRef<Path>,
        lines: impl RangeBounds<usize>,
    ) -> Result<(Vec<u8>, ReadMark)> {
        let place = self.place(path.as_ref(), true, Access::Read)?;
        let _hold = self.admit(
            &[(&place, Mode::Shared)],
            format!("read {}", place.rel.display()),
        )?;
        let read_at = SystemTime::now();
        let (file, meta) = self.open_file(&place)?;
        let stat = StatKey::of(&meta);
        let recorded = gate::now_ns();
        let limit = self.actor.sched.shared.config.max_read_bytes;
        let (slice, sha256, len, total) = range_of(&file, stat.size, &lines, limit)
            .map_err(io_err("read", &place.key.path))?
            .map_err(|size| Error::TooLarge {
                path: place.key.path.clone(),
                size,
                limit,
            })?;
        if len == stat.size {
            self.remember_if_unchanged(&file, stat, &sha256, recorded);
        }
        let first = match lines.start_bound() {
            Bound::Included(&n) => n as u64,
            Bound::Excluded(&n) => (n as u64).saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match lines.end_bound() {
            Bound::Included(&n) => (n as u64).saturating_add(1),
            Bound::Excluded(&n) => n as u64,
            Bound::Unbounded => u64::MAX,
        }
        .min(total);
        let view = View::lines(first.saturating_add(1), end.max(first), total, 0);
        let mark = self.marked(&place, sha256, len, read_at, view);
        Ok((slice, mark))
    }

    /// Checks that this actor's mark of `path` is current (under a shared
    /// hold), without reading the file into memory when the stat cache
    /// vouches for it. `NotRead` or `Stale` otherwise.
    pub fn verify(&self, path: impl AsRef<Path>) -> Result<ReadMark> {
        let place = self.place(path.as_ref(), true, Access::Read)?;
        let _hold = self.admit(
            &[(&place, Mode::Shared)],
            format!("verify {}", place.rel.display()),
        )?;
        let (file, meta) = self.open_file(&place)?;
        let current = self.current_hash(&place, &file, StatKey::of(&meta))?;
        self.gate(&place, &current, Need::Edit)?;
        MarkStore::of(self.meta())
            .get(&place.key.norm)
            .ok_or_else(|| Error::NotRead {
                path: place.key.path.clone(),
            })
    }

    /// Replaces the file's whole content (creating the file and any missing
    /// folders). An existing file needs a current read mark (`NotRead`,
    /// `Stale`); a new one does not.
    pub fn write(&self, path: impl AsRef<Path>, data: impl AsRef<[u8]>) -> Result<Receipt> {
        let data = data.as_ref();
        self.edit(path.as_ref(), FileOp::Write, None, None, |_| {
            Ok(Cow::Borrowed(data))
        })
    }

    /// Appends to the file (creating it if missing). An existing file needs
    /// a current read mark; reading its tail with [`Files::read_range`] is
    /// enough. The whole file is replaced atomically, never torn. A stale
    /// mark whose version history holds is an anchored append (see
    /// [`Receipt::anchored`]). The same append made again with the same
    /// mark is a call resent after a lost answer: it is answered with the
    /// first one's receipt ([`Receipt::repeat`]) and writes nothing.
    pub fn append(&self, path: impl AsRef<Path>, data: impl AsRef<[u8]>) -> Result<Receipt> {
        let data = data.as_ref();
        let call = fingerprint("append", &[data]);
        self.edit(
            path.as_ref(),
            FileOp::Append,
            Some(Edit::Append),
            Some(call),
            |pre| {
                let mut out = pre.unwrap_or_default().to_vec();
                out.extend_from_slice(data);
                Ok(Cow::Owned(out))
            },
        )
    }

    /// Replaces the one occurrence of `old` with `new`. The file must exist
    /// (`NotFound`) and be read (`NotRead`, `Stale`); `old` must occur
    /// exactly once (`NoMatch` — also for an empty `old` — or
    /// `AmbiguousMatch`), checked before anything is written. With a stale
    /// mark it is applied when it cannot overwrite unseen work (an anchored
    /// edit, [`Receipt::anchored`]): `old` occurs once in the version the
    /// mark names and once now, and no change between them touches it or
    /// a line beside it. `old` occurring twice, even overlapping (`aba`
    /// in `ababa`), is ambiguous. The same replace made again with the
    /// same mark is answered with the first one's receipt
    /// ([`Receipt::repeat`]).
    pub fn replace(
        &self,
        path: impl AsRef<Path>,
        old: impl AsRef<str>,
        new: impl AsRef<str>,
    ) -> Result<Receipt> {
        let (old, new) = (old.as_ref().as_bytes(), new.as_ref().as_bytes());
        let path = path.as_ref();
        self.edit(
            path,
            FileOp::Replace,
            Some(Edit::Replace(&[(old, new)])),
            Some(fingerprint("replace", &[old, new])),
            |pre| {
                let pre = pre.unwrap_or_default();
                let (first, count) = anchor::occurrences(pre, old);
                match (first, count) {
                    (Some(at), 1) => {
                        let mut out = Vec::with_capacity(pre.len() - old.len() + new.len());
                        out.extend_from_slice(&pre[..at]);
                        out.extend_from_slice(new);
                        out.extend_from_slice(&pre[at + old.len()..]);
                        Ok(Cow::Owned(out))
                    }
                    (_, 0) => Err(Error::NoMatch { path: path.into() }),
                    (_, count) => Err(Error::AmbiguousMatch {
                        path: path.into(),
                        count,
                    }),
                }
            },
        )
    }

    /// Replaces every non-overlapping occurrence of `old` with `new`, under
    /// the same rules as [`Files::replace`] except that several matches are
    /// fine; no match (or an empty `old`) is `NoMatch`.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("a.rs"), "x + x\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// agent.files().read("a.rs")?;
    /// agent.files().replace_all("a.rs", "x", "y")?;
    /// assert_eq!(std::fs::read(dir.path().join("a.rs")).unwrap(), b"y + y\n");
    /// # Ok(()) }
    /// ```
    pub fn replace_all(
        &self,
        path: impl AsRef<Path>,
        old: impl AsRef<str>,
        new: impl AsRef<str>,
    ) -> Result<Receipt> {
        let (old, new) = (old.as_ref().as_bytes(), new.as_ref().as_bytes());
        let path = path.as_ref();
        let call = fingerprint("replace_all", &[old, new]);
        self.edit(path, FileOp::Replace, None, Some(call), |pre| {
            let pre = pre.unwrap_or_default();
            if anchor::occurrences(pre, old).1 == 0 {
                return Err(Error::NoMatch { path: path.into() });
            }
            let mut out = Vec::with_capacity(pre.len());
            let mut at = 0;
            while at < pre.len() {
                if pre[at..].starts_with(old) {
                    out.extend_from_slice(new);
                    at += old.len();
                } else {
                    out.push(pre[at]);
                    at += 1;
                }
            }
            Ok(Cow::Owned(out))
        })
    }

    /// Replaces the file's content with what `f` makes of the current one,
    /// under the rules of [`Files::replace`]: the file must exist and be
    /// read since it last changed, and `f` runs under the exclusive hold,
    /// after the gate, so it sees exactly the content the agent read. An
    /// error from `f` writes nothing and is returned as it is.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// agent.files().read("a.txt")?;
    /// agent.files().rewrite("a.txt", |old| Ok(old.to_ascii_uppercase()))?;
    /// assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"ONE\nTWO\n");
    /// # Ok(()) }
    /// ```
    pub fn rewrite(
        &self,
        path: impl AsRef<Path>,
        f: impl FnOnce(&[u8]) -> Result<Vec<u8>>,
    ) -> Result<Receipt> {
        self.edit(path.as_ref(), FileOp::Replace, None, None, |pre| {
            f(pre.unwrap_or_default()).map(Cow::Owned)
        })
    }

    /// [`Files::rewrite`] for a list of replacements (`old`, `new`) that
    /// `f` applies in order: with a stale mark it is an anchored edit when
    /// every one of them is (all or none), as [`Files::replace`] says, and
    /// what `f` made is exactly those replacements.
    #[cfg_attr(not(any(feature = "mcp", feature = "server")), allow(dead_code))]
    pub(crate) fn rewrite_anchored(
        &self,
        path: impl AsRef<Path>,
        edits: &[(&str, &str)],
        f: impl FnOnce(&[u8]) -> Result<Vec<u8>>,
    ) -> Result<Receipt> {
        let pairs: Vec<(&[u8], &[u8])> = edits
            .iter()
            .map(|(old, new)| (old.as_bytes(), new.as_bytes()))
            .collect();
        let args: Vec<&[u8]> = pairs.iter().flat_map(|(old, new)| [*old, *new]).collect();
        self.edit(
            path.as_ref(),
            FileOp::Replace,
            Some(Edit::Replace(&pairs)),
            Some(fingerprint("edits", &args)),
            |pre| f(pre.unwrap_or_default()).map(Cow::Owned),
        )
    }

    /// The shared pipeline of write, append and replace; `anchor` is the
    /// edit as an anchored edit sees it, when it may be one; `call` the
    /// fingerprint of an append or edit, whose resending is answered, not
    /// repeated.
    fn edit<'d>(
        &self,
        path: &Path,
        op: FileOp,
        anchor: Option<Edit<'_>>,
        call: Option<String>,
        apply: impl FnOnce(Option<&[u8]>) -> Result<Cow<'d, [u8]>>,
    ) -> Result<Receipt> {
        let place = self.place(path, true, Access::Write)?;
        let hold = self.admit(
            &[(&place, Mode::Exclusive)],
            format!("{op} {}", place.rel.display()),
        )?;
        // A resent call is answered before anything is read: it is judged
        // by the mark it was made with, not by what the file holds now.
        if let Some(receipt) = call.as_deref().and_then(|call| self.resent(&place, call)) {
            return Ok(receipt);
        }
        let need = match op {
            FileOp::Append => Need::Append,
            FileOp::Replace => Need::Edit,
            _ => Need::Whole,
        };
        let used = MarkStore::of(self.meta()).get(&place.key.norm);
        let must_exist = op == FileOp::Replace;
        let not_found = || Error::NotFound {
            path: place.key.path.clone(),
        };
        let (dir, name) = self.folder(&place, !must_exist)?.ok_or_else(not_found)?;
        let existing = match dir.entry(&name)? {
            Entry::File(file, meta) => Some((file, meta)),
            Entry::Missing if must_exist => return Err(not_found()),
            Entry::Missing => None,
            other => return Err(Self::not_a_file(&place, &other)),
        };
        // Gate, then pre-image. A plain write reads the old bytes only when
        // history needs them; otherwise the (cached) hash is enough.
        let needs_bytes = op != FileOp::Write || self.history.is_some();
        let mut stale = None;
        let (pre_bytes, before, old_mode) = match &existing {
            None => (None, None, None),
            Some((file, meta)) => {
                use std::os::unix::fs::PermissionsExt;
                let stat = StatKey::of(meta);
                let (bytes, hash) = if needs_bytes {
                    let (bytes, hash) = self.load(&place, file, stat)?;
                    (Some(bytes), hash)
                } else {
                    (None, self.current_hash(&place, file, stat)?)
                };
                match (self.gate(&place, &hash, need), anchor) {
                    (Ok(()), _) => {}
                    (Err(e @ Error::Stale { .. }), Some(edit)) if bytes.is_some() => {
                        stale = Some((e, edit));
                    }
                    (Err(e), _) => {
                        self.claim_if_stale(hold.as_ref(), &place, &e);
                        return self.refused_if_err(Err(e));
                    }
                }
                (bytes, Some(hash), Some(meta.permissions().mode()))
            }
        };
        let (new, anchored) = match (stale, &pre_bytes) {
            (Some((stale, edit)), Some(current)) => {
                let found = self.anchored(&place, edit, current, stale, apply);
                if let Err(e) = &found {
                    self.claim_if_stale(hold.as_ref(), &place, e);
                }
                let (new, anchored) = self.refused_if_err(found)?;
                (new, Some(anchored))
            }
            _ => (apply(pre_bytes.as_deref())?, None),
        };
        let mut protected = true;
        if let Some(hook) = &self.history {
            let state = match (&before, old_mode, &pre_bytes) {
                (Some(sha256), Some(mode), Some(bytes)) => Some(PreState {
                    sha256,
                    mode,
                    bytes,
                }),
                _ => None,
            };
            protected = hook.snapshot(
                self.meta(),
                op,
                &[PreImage {
                    path: &place.key.path,
                    state,
                }],
                Some(&new),
                self.unprotected,
            )?;
        }
        let mode = dir.replace(&name, &new, old_mode, self.durable(), self.steps.as_ref())?;
        let after = gate::sha256_hex(&new);
        // An anchored edit leaves the mark as it was: the agent has seen
        // the changes, not the file.
        self.wrote(&place, Some(&after), new.len() as u64, anchored.is_none());
        let mut receipt = Receipt {
            op,
            path: place.key.path.clone(),
            from: None,
            before,
            after: Some(after),
            size: new.len() as u64,
            mode: Some(mode),
            history: HistoryStatus::Off,
            anchored,
            repeat: false,
        };
        receipt.history = self.history_status(&receipt, protected);
        // The receipt rides with the mark the write was made with (not a
        // refreshed one: a write after that is a new call).
        if let (Some(call), Some(used)) = (call, used.filter(|_| receipt.before.is_some())) {
            MarkStore::of(self.meta()).update(&place.key.norm, |mark| {
                if mark.sha256 == used.sha256 && mark.read_at == used.read_at {
                    mark.keep_sent(call, &receipt);
                }
            });
        }
        Ok(receipt)
    }

    /// Step 7: the session-wide record of who produced this content, and
    /// (only if configured) a refreshed mark.
    fn wrote(&self, place: &Place, after: Option<&str>, len: u64, refresh: bool) {
        let meta = self.meta();
        meta.landed(&place.key.norm);
        Gate::of(&self.actor.sched).record_write(&place.key.norm, &meta.name, after);
        if let Some(after) = after {
            if refresh && self.actor.sched.shared.config.refresh_mark_on_write {
                let mark = ReadMark::new(place.key.path.clone(), after, len, View::Whole);
                MarkStore::of(meta).put(place.key.norm.clone(), mark);
            }
        }
    }

    /// The pre-image of an existing entry a delete or rename will remove:
    /// regular files go through the gate; a symlink is acted on itself and
    /// carries no content to protect.
    fn removable(
        &self,
        hold: Option<&Reservation>,
        place: &Place,
        entry: Entry,
    ) -> Result<Option<Removed>> {
        match entry {
            Entry::Missing => Ok(None),
            Entry::Symlink => Ok(Some(Removed::default())),
            Entry::File(file, meta) => {
                use std::os::unix::fs::PermissionsExt;
                let stat = StatKey::of(&meta);
                let (bytes, hash) = if self.history.is_some() {
                    let (bytes, hash) = self.load(place, &file, stat)?;
                    (Some(bytes), hash)
                } else {
                    (None, self.current_hash(place, &file, stat)?)
                };
                let gated = self.gate(place, &hash, Need::Whole);
                if let Err(e) = &gated {
                    self.claim_if_stale(hold, place, e);
                }
                self.refused_if_err(gated)?;
                Ok(Some(Removed {
                    sha256: Some(hash),
                    mode: Some(meta.permissions().mode()),
                    size: stat.size,
                    bytes,
                }))
            }
            other => Err(Self::not_a_file(place, &other)),
        }
    }

    /// Deletes a file (a symlink itself, never its target). An existing file
    /// needs a current read mark; a folder is `InvalidPath`; a missing file
    /// is `NotFound`.
    pub fn delete(&self, path: impl AsRef<Path>) -> Result<Receipt> {
        let place = self.place(path.as_ref(), false, Access::Write)?;
        let hold = self.admit(
            &[(&place, Mode::Exclusive)],
            format!("delete {}", place.rel.display()),
        )?;
        let not_found = || Error::NotFound {
            path: place.key.path.clone(),
        };
        let (dir, name) = self.folder(&place, false)?.ok_or_else(not_found)?;
        let removed = self
            .removable(hold.as_ref(), &place, dir.entry(&name)?)?
            .ok_or_else(not_found)?;
        let mut protected = true;
        if let Some(hook) = &self.history {
            protected = hook.snapshot(
                self.meta(),
                FileOp::Delete,
                &[removed.pre_image(&place.key.path)],
                None,
                self.unprotected,
            )?;
        }
        dir.unlink(&name, self.durable(), self.steps.as_ref())?;
        self.wrote(&place, None, 0, true);
        let mut receipt = Receipt {
            op: FileOp::Delete,
            path: place.key.path.clone(),
            from: None,
            before: removed.sha256,
            after: None,
            size: 0,
            mode: None,
            history: HistoryStatus::Off,
            anchored: None,
            repeat: false,
        };
        receipt.history = self.history_status(&receipt, protected);
        Ok(receipt)
    }

    /// Renames a file (a symlink itself, never its target), holding both
    /// ends. The source needs a current read mark, and so does an existing
    /// destination file (it is replaced); missing destination folders are
    /// created. A folder at either end is `InvalidPath`.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<Receipt> {
        let src = self.place(from.as_ref(), false, Access::Write)?;
        let dst = self.place(to.as_ref(), false, Access::Write)?;
        if src.key.norm == dst.key.norm {
            return Err(Error::invalid(
                &dst.key.path,
                "the source and the destination are the same file",
            ));
        }
        let hold = self.admit(
            &[(&src, Mode::Exclusive), (&dst, Mode::Exclusive)],
            format!("rename {} -> {}", src.rel.display(), dst.rel.display()),
        )?;
        let not_found = || Error::NotFound {
            path: src.key.path.clone(),
        };
        let (src_dir, src_name) = self.folder(&src, false)?.ok_or_else(not_found)?;
        let moved = self
            .removable(hold.as_ref(), &src, src_dir.entry(&src_name)?)?
            .ok_or_else(not_found)?;
        let (dst_dir, dst_name) = self.folder(&dst, true)?.ok_or_else(|| Error::NotFound {
            path: dst.key.path.clone(),
        })?;
        let replaced = self.removable(hold.as_ref(), &dst, dst_dir.entry(&dst_name)?)?;
        let mut protected = true;
        if let Some(hook) = &self.history {
            let mut pre = vec![moved.pre_image(&src.key.path)];
            pre.push(match &replaced {
                Some(r) => r.pre_image(&dst.key.path),
                None => PreImage {
                    path: &dst.key.path,
                    state: None,
                },
            });
            protected = hook.snapshot(self.meta(), FileOp::Rename, &pre, None, self.unprotected)?;
        }
        src_dir.rename_to(
            &src_name,
            &dst_dir,
            &dst_name,
            replaced.is_some(),
            self.durable(),
            self.steps.as_ref(),
        )?;
        self.wrote(&src, None, 0, true);
        self.wrote(&dst, moved.sha256.as_deref(), moved.size, true);
        let mut receipt = Receipt {
            op: FileOp::Rename,
            path: dst.key.path.clone(),
            from: Some(src.key.path.clone()),
            before: replaced.and_then(|r| r.sha256),
            after: moved.sha256,
            size: moved.size,
            mode: moved.mode,
            history: HistoryStatus::Off,
            anchored: None,
            repeat: false,
        };
        receipt.history = self.history_status(&receipt, protected);
        Ok(receipt)
    }
}

/// What a delete or rename takes away from a path.
#[derive(Default)]
struct Removed {
    /// `None` for a symlink.
    sha256: Option<String>,
    mode: Option<u32>,
    size: u64,
    bytes: Option<Vec<u8>>,
}

impl Removed {
    fn pre_image<'p>(&'p self, path: &'p Path) -> PreImage<'p> {
        let state = match (&self.sha256, self.mode, &self.bytes) {
            (Some(sha256), Some(mode), Some(bytes)) => Some(PreState {
                sha256,
                mode,
                bytes,
            }),
            _ => None,
        };
        PreImage { path, state }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ranges() {
        let text = b"a\nb\nc\n";
        assert_eq!(line_slice(text, &(0..1)), b"a\n");
        assert_eq!(line_slice(text, &(1..)), b"b\nc\n");
        assert_eq!(line_slice(text, &(2..=2)), b"c\n");
        assert_eq!(line_slice(text, &(..)), text);
        assert_eq!(line_slice(text, &(5..9)), b"");
        let (start, end) = (2, 1);
        assert_eq!(
            line_slice(text, &(start..end)),
            b"",
            "a reversed range is empty"
        );
        assert_eq!(line_slice(b"a\nb", &(1..2)), b"b");
        assert_eq!(line_slice(b"", &(0..1)), b"");
    }

    use crate::sched::actor::Grant;
    use crate::sched::config::{Config, Durability};
    use crate::sched::scheduler::Scheduler;
    use parking_lot::Mutex;

    /// One pre-image as the hook saw it: op, path, (sha256, bytes).
    type Seen = (FileOp, PathBuf, Option<(String, Vec<u8>)>);

    /// A history hook that remembers what it saw and fails on demand.
    #[derive(Default)]
    struct Recorder {
        fail_snapshot: bool,
        fail_record: bool,
        seen: Mutex<Vec<Seen>>,
    }

    impl HistoryHook for Recorder {
        fn snapshot(
            &self,
            _: &ActorMeta,
            op: FileOp,
            pre: &[PreImage<'_>],
            _: Option<&[u8]>,
            _: bool,
        ) -> Result<bool> {
            if self.fail_snapshot {
                return Err(Error::History {
                    reason: "the history disk is full".into(),
                });
            }
            let mut seen = self.seen.lock();
            for p in pre {
                let state = p
                    .state
                    .as_ref()
                    .map(|s| (s.sha256.to_owned(), s.bytes.to_vec()));
                seen.push((op, p.path.to_path_buf(), state));
            }
            Ok(true)
        }
        fn record(&self, _: &ActorMeta, _: &Receipt) -> Result<()> {
            if self.fail_record {
                return Err(Error::History {
                    reason: "the journal is read-only".into(),
                });
            }
            Ok(())
        }
    }

    fn setup() -> (tempfile::TempDir, Scheduler) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "old\n").unwrap();
        let sched = Scheduler::new(Config::default().durability(Durability::Process));
        (dir, sched)
    }

    fn leftovers(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(atomic::TEMP_PREFIX)
            })
            .count()
    }

    #[test]
    fn a_failed_snapshot_writes_nothing() {
        let (dir, sched) = setup();
        let agent = sched.actor("agent", Grant::workspace(dir.path())).unwrap();
        let hook = Arc::new(Recorder {
            fail_snapshot: true,
            ..Recorder::default()
        });
        let files = agent.files().with_history(hook);
        files.read("a.txt").unwrap();
        for result in [
            files.write("a.txt", "new\n"),
            files.append("a.txt", "more\n"),
            files.replace("a.txt", "old", "new"),
            files.delete("a.txt"),
            files.rename("a.txt", "b.txt"),
            files.write("created.txt", "x"),
        ] {
            assert!(matches!(result, Err(Error::History { .. })), "{result:?}");
        }
        assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"old\n");
        assert!(!dir.path().join("b.txt").exists());
        assert!(!dir.path().join("created.txt").exists());
        assert_eq!(leftovers(dir.path()), 0);
    }

    #[test]
    fn the_hook_sees_pre_images_before_the_replace() {
        let (dir, sched) = setup();
        let agent = sched.actor("agent", Grant::workspace(dir.path())).unwrap();
        let hook = Arc::new(Recorder::default());
        let files = agent.files().with_history(hook.clone());
        let (_, mark) = files.read("a.txt").unwrap();
        let receipt = files.write("a.txt", "new\n").unwrap();
        assert_eq!(receipt.history, HistoryStatus::Recorded);
        files.write("fresh.txt", "x").unwrap();
        let seen = hook.seen.lock();
        assert_eq!(seen[0].0, FileOp::Write);
        assert_eq!(seen[0].2, Some((mark.sha256, b"old\n".to_vec())));
        assert_eq!(seen[1].2, None, "a create has no pre-image");
    }

    #[test]
    fn a_failed_journal_append_says_history_incomplete() {
        let (dir, sched) = setup();
        let agent = sched.actor("agent", Grant::workspace(dir.path())).unwrap();
        let hook = Arc::new(Recorder {
            fail_record: true,
            ..Recorder::default()
        });
        let files = agent.files().with_history(hook);
        files.read("a.txt").unwrap();
        let receipt = files.write("a.txt", "new\n").unwrap();
        assert!(matches!(receipt.history, HistoryStatus::Incomplete { .. }));
        assert!(
            receipt.to_string().contains("history incomplete"),
            "{receipt}"
        );
        assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"new\n");
    }

    #[test]
    fn without_history_receipts_say_off_or_unprotected() {
        let (dir, sched) = setup();
        let agent = sched.actor("agent", Grant::workspace(dir.path())).unwrap();
        assert_eq!(
            agent.files().write("n.txt", "x").unwrap().history,
            HistoryStatus::Off
        );
        let receipt = agent.files().unprotected().write("m.txt", "x").unwrap();
        assert_eq!(receipt.history, HistoryStatus::Unprotected);
    }

    #[test]
    fn an_anchored_diff_is_cut_at_the_handle_s_bound() {
        let (dir, _) = setup();
        let history = tempfile::tempdir().unwrap();
        let sched = Scheduler::new(
            Config::default()
                .durability(Durability::Process)
                .history_dir(history.path()),
        );
        let (a, b) = (
            sched.actor("a", Grant::workspace(dir.path())).unwrap(),
            sched.actor("b", Grant::workspace(dir.path())).unwrap(),
        );
        a.files().read("a.txt").unwrap();
        b.files().read("a.txt").unwrap();
        b.files().append("a.txt", "b".repeat(200) + "\n").unwrap();
        let receipt = a.files().diff_bound(60).append("a.txt", "a\n").unwrap();
        let anchored = receipt.anchored.unwrap();
        assert!(
            anchored.truncated && anchored.diff.len() <= 60,
            "{anchored:?}"
        );
        // Without a bound of its own, a handle's is `max_read_bytes`.
        b.files().read("a.txt").unwrap();
        a.files().read("a.txt").unwrap();
        b.files().append("a.txt", "b".repeat(200) + "\n").unwrap();
        let receipt = a.files().append("a.txt", "a2\n").unwrap();
        assert!(!receipt.anchored.unwrap().truncated);
    }

    #[test]
    fn the_streamed_range_is_the_slice_of_the_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for text in [&b"a\nb\nc\n"[..], b"a\nb", b"", b"\n\n", b"x"] {
            std::fs::write(&path, text).unwrap();
            let file = std::fs::File::open(&path).unwrap();
            for (a, b) in [(0, 1), (1, 3), (2, 9), (5, 9), (0, 0)] {
                let (kept, sha, len, lines) = range_of(&file, text.len() as u64, &(a..b), u64::MAX)
                    .unwrap()
                    .unwrap();
                assert_eq!(kept, line_slice(text, &(a..b)), "{text:?} {a}..{b}");
                assert_eq!(sha, gate::sha256_hex(text));
                assert_eq!(len, text.len() as u64);
                let text_lines = String::from_utf8_lossy(text).lines().count() as u64;
                assert_eq!(lines, text_lines, "{text:?}");
            }
            let over = range_of(&file, text.len() as u64, &(..), 0).unwrap();
            assert_eq!(over.is_err(), !text.is_empty());
        }
    }
}

/// The examples of `docs/FILES.md`, compiled and run as doctests so that the
/// guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/FILES.md")]
pub struct FilesGuide;
