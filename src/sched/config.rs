//! Scheduler configuration: a value built with chained setters.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::core::key::CaseMode;

/// Decides whether a fence may grow to a path outside what its actor declared.
///
/// Asked outside the scheduler's lock, at most once per path for a fence's
/// life. Closures `Fn(&str, &Path) -> bool` implement it.
///
/// ```
/// let config = writ::Config::default()
///     .approval(|actor: &str, path: &std::path::Path| actor == "lead" || path.ends_with("docs"));
/// # let _ = config;
/// ```
pub trait Approval: Send + Sync {
    /// May `actor` widen its fence to `path`?
    fn approve(&self, actor: &str, path: &Path) -> bool;
}

impl<F> Approval for F
where
    F: Fn(&str, &Path) -> bool + Send + Sync,
{
    fn approve(&self, actor: &str, path: &Path) -> bool {
        self(actor, path)
    }
}

/// How hard a write tries to survive a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync the temp file, the directory and the history (survives a power cut).
    #[default]
    Machine,
    /// No fsync: survives a killed process, not a power cut. For tests and demos.
    Process,
}

/// Everything a [`Scheduler`](crate::Scheduler) can be told.
///
/// ```
/// use std::time::Duration;
/// let config = writ::Config::default()
///     .max_actors(6)
///     .max_writers(3)
///     .session("run-42")
///     .file_op_wait(Duration::from_secs(2));
/// assert_eq!(config.session_id(), "run-42");
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) case: CaseMode,
    pub(crate) portable_names: bool,
    pub(crate) max_actors: Option<usize>,
    pub(crate) max_writers: Option<usize>,
    pub(crate) approval: Option<Arc<dyn Approval>>,
    pub(crate) session: String,
    pub(crate) file_op_wait: Option<Duration>,
    pub(crate) history_dir: Option<PathBuf>,
    pub(crate) snapshot_limit: u64,
    pub(crate) max_read_bytes: u64,
    pub(crate) durability: Durability,
    pub(crate) refresh_mark_on_write: bool,
    pub(crate) anchored_edits: bool,
    pub(crate) claim_ttl: Duration,
    pub(crate) sensitive: Vec<String>,
    pub(crate) events_ring: usize,
}

/// The default of [`Config::claim_ttl`]: 10 s.
pub const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(10);

/// The default of [`Config::max_read_bytes`]: 64 MiB.
pub const DEFAULT_MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// The sensitive-name patterns refused by default (`*` matches any run of
/// characters within one name; a pattern ending in `/` names a folder, and
/// refuses everything beneath it).
pub const DEFAULT_SENSITIVE: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".npmrc",
    ".pypirc",
    "credentials",
    "credentials.json",
    ".git-credentials",
    "*.p12",
    "*.pfx",
    ".writ/",
];

impl Default for Config {
    fn default() -> Self {
        Config {
            case: CaseMode::default(),
            portable_names: true,
            max_actors: None,
            max_writers: None,
            approval: None,
            session: random_session_id(),
            file_op_wait: None,
            history_dir: None,
            snapshot_limit: 16 * 1024 * 1024,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            durability: Durability::Machine,
            refresh_mark_on_write: false,
            anchored_edits: true,
            claim_ttl: DEFAULT_CLAIM_TTL,
            sensitive: DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect(),
            events_ring: crate::sched::events::EVENT_RING,
        }
    }
}

impl Config {
    /// How paths compare (default: `Sensitive` on Linux, `Insensitive` on macOS and Windows).
    pub fn case(mut self, case: CaseMode) -> Self {
        self.case = case;
        self
    }

    /// Refuse Windows reserved device names and trailing dots or spaces (default on).
    pub fn portable_names(mut self, on: bool) -> Self {
        self.portable_names = on;
        self
    }

    /// At most `n` live child actors.
    pub fn max_actors(mut self, n: usize) -> Self {
        self.max_actors = Some(n);
        self
    }

    /// At most `n` live child actors that may write.
    pub fn max_writers(mut self, n: usize) -> Self {
        self.max_writers = Some(n);
        self
    }

    /// The hook asked before a fence grows outside what its actor declared.
    pub fn approval(mut self, hook: impl Approval + 'static) -> Self {
        self.approval = Some(Arc::new(hook));
        self
    }

    /// The session id (default: random). It names run folders and history.
    pub fn session(mut self, id: impl Into<String>) -> Self {
        self.session = id.into();
        self
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// Make file operations wait up to `d` for a contested path instead of
    /// returning `Busy` at once.
    pub fn file_op_wait(mut self, d: Duration) -> Self {
        self.file_op_wait = Some(d);
        self
    }

    /// Where file history (blobs and journal) is kept; no history without it.
    pub fn history_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.history_dir = Some(dir.into());
        self
    }

    /// Files larger than this many bytes are not snapshotted; writing them
    /// needs `Files::unprotected` (default 16 MiB).
    pub fn snapshot_limit(mut self, bytes: u64) -> Self {
        self.snapshot_limit = bytes;
        self
    }

    /// The most bytes a file operation reads into memory (default 64 MiB):
    /// a whole read, an edit's pre-image, or the lines `read_range`
    /// returns. Past it the operation is `Error::TooLarge` and nothing is
    /// read, so a huge or endlessly growing file cannot exhaust memory.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("big.log"), "line\n".repeat(100)).unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().max_read_bytes(64));
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// assert!(matches!(agent.files().read("big.log"), Err(writ::Error::TooLarge { .. })));
    /// let (tail, _mark) = agent.files().read_range("big.log", 98..)?;
    /// assert_eq!(tail, b"line\nline\n");
    /// # Ok(()) }
    /// ```
    pub fn max_read_bytes(mut self, bytes: u64) -> Self {
        self.max_read_bytes = bytes;
        self
    }

    /// fsync policy (default [`Durability::Machine`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Let a successful write refresh the writer's read mark (default false:
    /// consecutive edits need a re-read).
    pub fn refresh_mark_on_write(mut self, on: bool) -> Self {
        self.refresh_mark_on_write = on;
        self
    }

    /// Anchored edits (SPEC §6, default on): a replace or an append whose
    /// read mark is stale is applied to the current content when it cannot
    /// overwrite anything the agent has not seen — the version the mark
    /// names is found in history and, for a replace, `old` is unique in it
    /// and in the current content and untouched by the changes between
    /// them. The receipt then carries those changes
    /// ([`Receipt::anchored`](crate::Receipt::anchored)). Off (`writ serve
    /// --strict-gate`), every stale mark is refused. Needs
    /// [`Config::history_dir`]: without history no marked version is found.
    pub fn anchored_edits(mut self, on: bool) -> Self {
        self.anchored_edits = on;
        self
    }

    /// How long a hot file's claim lives (SPEC §6, default 10 s; zero turns
    /// claims off, `writ serve --claim-ttl`). A `Stale` refusal through the
    /// agent tools gives the refused agent a claim on the file: other
    /// actors' writes to it wait until that agent's next write to it, this
    /// long at most. Reads never wait.
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl;
        self
    }

    /// The claim TTL ([`Config::claim_ttl`]); zero when claims are off.
    pub fn claim_ttl_of(&self) -> Duration {
        self.claim_ttl
    }

    /// Add sensitive-name patterns to the built-in ones
    /// ([`DEFAULT_SENSITIVE`]). The built-in patterns cannot be configured
    /// away: they protect `.writ/`, where a server keeps its session token,
    /// so a configuration that replaced them would hand that token to any
    /// agent. A person allows one name per handle with
    /// [`Files::allow_sensitive`](crate::Files::allow_sensitive).
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join(".env"), "TOKEN=1\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().sensitive_names(["*.secret"]));
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// assert!(matches!(agent.files().write("db.secret", "x"), Err(writ::Error::Policy { .. })));
    /// assert!(matches!(agent.files().read(".env"), Err(writ::Error::Policy { .. })));
    /// # Ok(()) }
    /// ```
    pub fn sensitive_names<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for pattern in patterns.into_iter().map(Into::into) {
            if !self.sensitive.contains(&pattern) {
                self.sensitive.push(pattern);
            }
        }
        self
    }

    /// How many events the event stream's ring keeps for readers that lag
    /// or reconnect (default [`EVENT_RING`](crate::EVENT_RING); at least 1).
    /// The ring fills only while someone subscribes, and holds at most this
    /// many events: a few hundred bytes each.
    ///
    /// ```
    /// let sched = writ::Scheduler::new(writ::Config::default().events_ring(2));
    /// let mut late = sched.subscribe();
    /// for n in 0..3 {
    ///     sched.actor(format!("a{n}"), writ::Grant::read_only(".")).unwrap();
    /// }
    /// // Three `actor_created` and three `actor_dropped`: the ring kept two.
    /// assert_eq!(late.try_next().unwrap().kind.name(), "gap");
    /// assert_eq!(std::iter::from_fn(|| late.try_next()).count(), 2);
    /// ```
    pub fn events_ring(mut self, events: usize) -> Self {
        self.events_ring = events.max(1);
        self
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("case", &self.case)
            .field("portable_names", &self.portable_names)
            .field("max_actors", &self.max_actors)
            .field("max_writers", &self.max_writers)
            .field("approval", &self.approval.as_ref().map(|_| "<hook>"))
            .field("session", &self.session)
            .field("file_op_wait", &self.file_op_wait)
            .field("history_dir", &self.history_dir)
            .field("snapshot_limit", &self.snapshot_limit)
            .field("max_read_bytes", &self.max_read_bytes)
            .field("durability", &self.durability)
            .field("refresh_mark_on_write", &self.refresh_mark_on_write)
            .field("anchored_edits", &self.anchored_edits)
            .field("sensitive", &self.sensitive)
            .field("events_ring", &self.events_ring)
            .finish()
    }
}

/// A short id unlikely to repeat: time, process id and a counter, hashed.
fn random_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    // Relaxed: uniqueness only needs each call to see a different value.
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:012x}", hasher.finish() & 0xffff_ffff_ffff)
}
