//! Delegated writers: a coding-agent CLI, or any command whose writes are
//! unknown, run under a fence, stopped as a whole process tree, with a clean
//! environment and an honest report of what it changed.
//!
//! # Brief overview
//!
//! - [`Run`]: what to run — program, arguments, the task (written to
//!   `TASK.md` and fed on stdin), project folders, time limit, environment.
//! - [`Actor::delegate`]: runs it. The run gets a child actor named
//!   `<actor>/run-<id>` holding one tree fence on its own run folder
//!   (`<base>/.writ-runs/<session>-<actor>-<id>/`) and on every project
//!   folder, for the whole run: everyone else — the delegating actor
//!   included — is refused there until the run ends.
//! - [`Report`]: how it ended ([`Status`]), exit code or signal, the tail of
//!   its output, the full log's path, the [`Artifact`]s (what it created,
//!   modified, deleted or renamed, relative to the root) and the git commits
//!   it made.
//!
//! Refusals are errors, never a status: a contested fence is
//! [`Error::Busy`], a program that cannot start is [`Error::Spawn`], and
//! either leaves nothing on disk and no hold behind.
//!
//! What the runner guarantees and what it does not (processes that leave
//! the process group, writes outside the fenced folders) is set out in
//! `docs/DELEGATION.md`. Delegated runs are implemented on unix; on other
//! platforms `delegate` returns `Error::Spawn`.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), writ::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let root = dir.path();
//! # std::fs::create_dir(root.join("src")).unwrap();
//! use std::time::Duration;
//! use writ::delegate::{Change, Run, Status};
//!
//! let sched = writ::Scheduler::new(writ::Config::default());
//! let lead = sched.actor("lead", writ::Grant::workspace(root))?;
//! let report = lead
//!     .delegate(
//!         Run::new("/bin/sh")
//!             .args(["-c", "cat > ../../src/notes.md"]) // the task arrives on stdin
//!             .task("Write the notes")
//!             .project_dir("src")
//!             .timeout(Duration::from_secs(30)),
//!     )
//!     .await?;
//! assert_eq!(report.status, Status::Completed);
//! assert_eq!(report.artifacts[0].path, std::path::Path::new("src/notes.md"));
//! assert_eq!(report.artifacts[0].change, Change::Created);
//! println!("{report}");
//! # Ok(()) }
//! ```

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::sched::actor::Actor;

#[cfg(unix)]
pub(crate) mod env;
#[cfg(unix)]
mod git;
#[cfg(unix)]
pub(crate) mod manifest;
#[cfg(unix)]
pub(crate) mod output;
#[cfg(unix)]
pub(crate) mod process;
#[cfg(unix)]
mod runner;
#[cfg(unix)]
mod sandbox;

/// The default time limit of a run: 10 minutes from the spawn.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// The default grace between SIGTERM and SIGKILL: 2 seconds.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// The default size of the in-memory output tail: 64 KiB.
pub const DEFAULT_TAIL: usize = 64 * 1024;
/// The default bound on entries a manifest walk visits.
pub const DEFAULT_SCAN_ENTRIES: usize = 100_000;
/// The default bound on content bytes a manifest walk hashes.
pub const DEFAULT_SCAN_BYTES: u64 = 256 * 1024 * 1024;

/// A command to run as a delegated writer, built with chained setters.
///
/// ```
/// use std::time::Duration;
/// use writ::delegate::Run;
///
/// let run = Run::new("claude")
///     .args(["-p", "--output-format", "text"])
///     .task("Fix the lexer's handling of raw strings")
///     .project_dir("src/parser")
///     .timeout(Duration::from_secs(600))
///     .grace(Duration::from_secs(5))
///     .inherit("HTTPS_PROXY")            // passed through from the host, if set
///     .env("CLAUDE_CONFIG_DIR", "/etc/agent"); // passed as given
/// # let _ = run;
/// ```
#[derive(Debug, Clone)]
pub struct Run {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) task: String,
    pub(crate) project_dirs: Vec<PathBuf>,
    pub(crate) timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) inherit: Vec<OsString>,
    pub(crate) tail: usize,
    pub(crate) scan_entries: usize,
    pub(crate) scan_bytes: u64,
    pub(crate) sandbox: Sandbox,
    pub(crate) writable: Vec<PathBuf>,
    pub(crate) network: bool,
}

/// Whether a run is sandboxed with bubblewrap (`bwrap`); see
/// [`Run::sandbox`] and `docs/DELEGATION.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Sandbox {
    /// Sandboxed when a working `bwrap` is available; otherwise run in a
    /// process group only, and the report says so (the default).
    #[default]
    Auto,
    /// Sandboxed, or not run at all: without a working `bwrap` the run is
    /// `Error::Spawn`.
    Required,
    /// Never sandboxed: the process group is all that holds the child.
    Off,
}

impl Run {
    /// Runs `program`: a name looked up on the child's `PATH`, or a path (a
    /// relative path is taken from the delegating actor's root).
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Run {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            task: String::new(),
            project_dirs: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            grace: DEFAULT_GRACE,
            env: Vec::new(),
            inherit: Vec::new(),
            tail: DEFAULT_TAIL,
            scan_entries: DEFAULT_SCAN_ENTRIES,
            scan_bytes: DEFAULT_SCAN_BYTES,
            sandbox: Sandbox::Auto,
            writable: Vec::new(),
            network: true,
        }
    }

    /// Whether to run inside a bubblewrap sandbox (default
    /// [`Sandbox::Auto`]). In the sandbox the child has its own PID
    /// namespace and `/proc` (when the run ends, its whole tree ends,
    /// escapees included; no other process's environment is visible), the
    /// host is read-only except the run folder, the project folders and
    /// [`Run::writable`] folders, and `/tmp` is private.
    ///
    /// ```
    /// use writ::delegate::{Run, Sandbox};
    /// let run = Run::new("claude")
    ///     .sandbox(Sandbox::Required) // Error::Spawn without a working bwrap
    ///     .writable("/home/me/.claude") // the CLI's own config and session files
    ///     .network(true);
    /// # let _ = run;
    /// ```
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Another folder the sandboxed child may write (a CLI's config or
    /// cache folder; absolute, or relative to the delegating actor's root).
    /// It must exist. Writes there are not fenced and not in the report.
    pub fn writable(mut self, dir: impl Into<PathBuf>) -> Self {
        self.writable.push(dir.into());
        self
    }

    /// Keep the network in the sandbox (default `true`; a coding CLI needs
    /// it to reach its model). `false` gives the child no network at all.
    pub fn network(mut self, on: bool) -> Self {
        self.network = on;
        self
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// The task: written to `TASK.md` in the run folder and fed on stdin
    /// (stdin is then closed).
    pub fn task(mut self, task: impl Into<String>) -> Self {
        self.task = task.into();
        self
    }

    /// A folder the command may change (relative to the delegating actor's
    /// root, or absolute inside it). It must exist. It is fenced for the run
    /// and its changes are reported.
    pub fn project_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.project_dirs.push(dir.into());
        self
    }

    /// The time limit, counted from the spawn (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The time between SIGTERM and SIGKILL when the group is stopped
    /// (default [`DEFAULT_GRACE`]).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets a variable in the child's environment.
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// Passes a host variable through (when it is set), e.g. a proxy. Only
    /// the whitelist (see `docs/DELEGATION.md`) passes without being named.
    pub fn inherit(mut self, name: impl AsRef<OsStr>) -> Self {
        self.inherit.push(name.as_ref().to_os_string());
        self
    }

    /// The size of the in-memory output tail in bytes (default
    /// [`DEFAULT_TAIL`]); the log on disk keeps everything.
    pub fn tail(mut self, bytes: usize) -> Self {
        self.tail = bytes;
        self
    }

    /// Bounds each manifest walk to `entries` visited entries and `bytes`
    /// hashed content bytes (defaults [`DEFAULT_SCAN_ENTRIES`],
    /// [`DEFAULT_SCAN_BYTES`]). A walk that reaches a bound stops there and
    /// the report says `scan_truncated`.
    pub fn scan_limits(mut self, entries: usize, bytes: u64) -> Self {
        self.scan_entries = entries;
        self.scan_bytes = bytes;
        self
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The leader exited with code 0.
    Completed,
    /// The leader exited with another code, or was killed by a signal.
    Failed,
    /// The leader had not exited by the deadline; the group was stopped.
    TimedOut,
    /// The run's future was dropped; the group was stopped. No [`Report`]
    /// is returned for such a run: this is what its log records.
    Cancelled,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::TimedOut => "timed out",
            Status::Cancelled => "cancelled",
        })
    }
}

/// What happened to one path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// It did not exist before the run.
    Created,
    /// Its content changed.
    Modified,
    /// It no longer exists.
    Deleted,
    /// It was moved here from `from` (same file, or same content).
    Renamed {
        /// The old path, relative to the root.
        from: PathBuf,
    },
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Artifact {
    /// The path, relative to the delegating actor's root.
    pub path: PathBuf,
    /// What happened to it.
    pub change: Change,
}

/// A commit made during the run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Commit {
    /// The full commit id.
    pub id: String,
    /// Its subject line.
    pub summary: String,
}

/// How much the manifest walks did; for tests and diagnostics.
#[doc(hidden)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    /// Entries the walk before the run visited.
    pub entries_before: usize,
    /// Entries the walk after the run visited.
    pub entries_after: usize,
    /// Content bytes hashed before the run.
    pub hashed_before: u64,
    /// Content bytes hashed after the run (only where stat could not decide).
    pub hashed_after: u64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// What a delegated run did. Its `Display` is a summary written for a model
/// and a person alike.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The run's child actor (`<actor>/run-<id>`).
    pub actor: String,
    /// The program, as given.
    pub program: String,
    /// How it ended.
    pub status: Status,
    /// The leader's exit code (`None` when a signal ended it).
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, if one did.
    pub signal: Option<i32>,
    /// The end of stdout and stderr, interleaved as they arrived (at most
    /// the tail size, starting on a character boundary).
    pub output_tail: String,
    /// Every byte of output the run produced (the log has them all).
    pub output_bytes: u64,
    /// The full output, `<run dir>/output.log`, relative to the root.
    pub log: PathBuf,
    /// The run folder (the child's working directory), relative to the root.
    pub run_dir: PathBuf,
    /// What changed in the fenced folders, sorted by path.
    pub artifacts: Vec<Artifact>,
    /// Commits made during the run, oldest first.
    pub commits: Vec<Commit>,
    /// A manifest walk reached its bound: changes past it are not listed.
    pub scan_truncated: bool,
    /// From the spawn until the process group was stopped.
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Anything else the reader should know (output abandoned, files that
    /// could not be read, git unavailable, …).
    pub notes: Vec<String>,
    /// Walk statistics.
    #[doc(hidden)]
    pub scan: ScanStats,
    /// Whether the run was inside the bubblewrap sandbox (see
    /// [`Run::sandbox`]); when it was not, a note says why.
    pub sandboxed: bool,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Delegated run '{}' ({}) {}",
            self.actor, self.program, self.status
        )?;
        match (self.exit_code, self.signal) {
            (Some(code), _) => write!(f, " with exit code {code}")?,
            (None, Some(signal)) => write!(f, ", ended by signal {signal}")?,
            (None, None) => {}
        }
        writeln!(f, " after {:.1?}.", self.duration)?;
        if self.sandboxed {
            writeln!(
                f,
                "Sandboxed (bubblewrap): own process tree, host read-only outside the fenced folders."
            )?;
        } else {
            writeln!(f, "Not sandboxed: only its process group was stopped.")?;
        }
        writeln!(
            f,
            "Run folder: {} (full output: {}).",
            self.run_dir.display(),
            self.log.display()
        )?;
        match self.artifacts.len() {
            0 => writeln!(f, "No files changed in the fenced folders.")?,
            n => {
                writeln!(f, "{n} file(s) changed:")?;
                for a in &self.artifacts {
                    match &a.change {
                        Change::Created => writeln!(f, "  created   {}", a.path.display())?,
                        Change::Modified => writeln!(f, "  modified  {}", a.path.display())?,
                        Change::Deleted => writeln!(f, "  deleted   {}", a.path.display())?,
                        Change::Renamed { from } => {
                            writeln!(f, "  renamed   {} -> {}", from.display(), a.path.display())?
                        }
                    }
                }
            }
        }
        if self.scan_truncated {
            writeln!(
                f,
                "The scan stopped at its bound: changes past it are not listed."
            )?;
        }
        if !self.commits.is_empty() {
            writeln!(f, "{} commit(s) made during the run:", self.commits.len())?;
            for c in &self.commits {
                let short = c.id.get(..10).unwrap_or(&c.id);
                writeln!(f, "  {short} {}", c.summary)?;
            }
        }
        for note in &self.notes {
            writeln!(f, "Note: {note}")?;
        }
        if self.output_tail.is_empty() {
            writeln!(f, "It printed nothing.")?;
        } else {
            if self.output_bytes > self.output_tail.len() as u64 {
                writeln!(
                    f,
                    "Last {} of {} bytes of output:",
                    self.output_tail.len(),
                    self.output_bytes
                )?;
            } else {
                writeln!(f, "Output:")?;
            }
            for line in self.output_tail.lines() {
                writeln!(f, "  | {line}")?;
            }
        }
        Ok(())
    }
}

impl Actor {
    /// Runs a delegated writer under a fence and reports what it did.
    ///
    /// In order: the program is looked up and the project folders checked;
    /// a child actor `<actor>/run-<id>` takes one try-only tree fence on the
    /// run folder and every project folder (`Err(Busy)` when contested,
    /// `Err(NoSlot)` past a slot limit, `Err(OutsideFence)` when a fenced
    /// actor names a folder outside its fence); the run folder is created
    /// (never reused) with `TASK.md` and `output.log`; the fenced folders
    /// are scanned; then the command starts in its own process group, in the
    /// run folder, with a whitelisted environment, the task on stdin. At
    /// its exit or deadline the whole group gets SIGTERM, then SIGKILL after
    /// the grace, and the leader is reaped; the folders are scanned again,
    /// the fence released, and the difference reported.
    ///
    /// A program that cannot start is `Err(Error::Spawn)` with nothing
    /// created and no hold left. Needs a tokio runtime with I/O and time
    /// enabled.
    ///
    /// # Cancel safety
    /// Dropping the future stops the run: the group gets SIGTERM at once,
    /// and a background thread waits the grace, sends SIGKILL, reaps the
    /// leader, records `cancelled` in the log and only then releases the
    /// fence; meanwhile the dump shows a call hold of the run actor labelled
    /// `cancelled: stopping the process tree`. No [`Report`] is produced.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// use writ::delegate::{Run, Status};
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
    /// let report = lead.delegate(Run::new("/bin/sh").args(["-c", "exit 3"])).await?;
    /// assert_eq!(report.status, Status::Failed);
    /// assert_eq!(report.exit_code, Some(3));
    /// match lead.delegate(Run::new("/no/such/agent")).await {
    ///     Err(writ::Error::Spawn { .. }) => {}
    ///     other => panic!("expected Spawn, got {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn delegate(&self, run: Run) -> impl Future<Output = Result<Report>> + Send + '_ {
        #[cfg(unix)]
        {
            runner::delegate(self, run)
        }
        #[cfg(not(unix))]
        {
            let program = run.program.to_string_lossy().into_owned();
            async move {
                Err(Error::Spawn {
                    program,
                    reason: "delegated runs are implemented on unix only so far".into(),
                })
            }
        }
    }
}

/// A path relative to `root` (empty for the root itself); `path` must lie
/// inside it.
#[cfg_attr(not(unix), allow(dead_code))]
fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A manifest walker with the default bounds, for the benchmarks.
#[cfg(unix)]
pub(crate) fn bench_walker<'a>(root: &'a Path, trees: &'a [PathBuf]) -> manifest::Walker<'a> {
    manifest::Walker {
        root,
        trees,
        skip: &[],
        limits: manifest::Limits {
            entries: DEFAULT_SCAN_ENTRIES,
            bytes: DEFAULT_SCAN_BYTES,
        },
    }
}

#[cfg_attr(not(unix), allow(dead_code))]
fn spawn_error(program: &OsStr, reason: impl Into<String>) -> Error {
    Error::Spawn {
        program: program.to_string_lossy().into_owned(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let run = Run::new("claude");
        assert_eq!(run.timeout, Duration::from_secs(600));
        assert_eq!(run.grace, Duration::from_secs(2));
        assert_eq!(run.tail, 64 * 1024);
        assert!(run.env.is_empty() && run.inherit.is_empty());
        assert_eq!(run.sandbox, Sandbox::Auto);
        assert!(run.network && run.writable.is_empty());
    }
}
