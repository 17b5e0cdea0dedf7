//! Shell commands as transactions (SPEC §17): `writ run -- CMD…`.
//!
//! # Brief overview
//!
//! - [`Command`]: what to run (a program and its arguments, or a shell
//!   line), where, for how long, how long a refused run's layer is kept.
//! - [`Actor::run`]: runs it with the workspace seen through a private
//!   copy-on-write layer (the real tree below, the command's writes above),
//!   then judges the layer's write set as this actor's writes and applies it
//!   all or nothing — merged where another agent changed the same file
//!   meanwhile, refused as a whole where the changes overlap or would
//!   overwrite work this agent has not seen.
//! - [`RunReport`]: exit status and output (either way), the mode that ran
//!   ([`RunMode`]), what was applied ([`RunArtifact`]) or why nothing was
//!   ([`RunConflict`]).
//! - [`show`]: a kept run's layer, for `writ run --show RUN`.
//!
//! `.git/` internals and the paths the root `.gitignore` names (build
//! outputs, dependency folders, caches) pass straight through to the real
//! tree, unjudged. Where no overlay can be made (no user namespaces, not
//! Linux), the command runs under an exclusive fence on the whole workspace
//! and its write set is the before/after manifest of §9
//! ([`RunMode::Fenced`]).
//!
//! # Example
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), writ::Error> {
//! use writ::run::Command;
//! let sched = writ::Scheduler::new(writ::Config::default().history_dir("/tmp/h"));
//! let agent = sched.actor("agent", writ::Grant::workspace("/work/project"))?;
//! let report = agent.run(Command::shell("cargo fmt")).await?;
//! if report.committed {
//!     for a in &report.artifacts { println!("{:?} {}", a.change, a.path.display()); }
//! } else {
//!     for c in &report.conflicts { println!("{}: {}", c.path.display(), c.reason); }
//! }
//! # Ok(()) }
//! ```

mod commit;
mod ns;
mod overlay;
mod passthrough;
mod readonly;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::core::key::Target;
use crate::delegate::output::{self, Tail};
use crate::delegate::process;
use crate::delegate::{Change, Status};
use crate::error::{Error, Result};
use crate::sched::actor::Actor;

/// The default time limit of a command: 10 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a refused run's layer is kept by default: 10 minutes.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(600);
/// How long the commit waits for the write set's reservation by default.
pub const DEFAULT_COMMIT_WAIT: Duration = Duration::from_secs(30);
/// The output kept in memory and returned: the last 64 KiB.
pub const DEFAULT_TAIL: usize = 64 * 1024;

/// A command to run as a transaction, built with chained setters.
#[derive(Debug, Clone)]
pub struct Command {
    argv: Vec<OsString>,
    cwd: Option<PathBuf>,
    timeout: Duration,
    keep: Duration,
    grace: Duration,
    commit_wait: Duration,
    view: View,
    outer: Option<Outer>,
}

/// How a command sees the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum View {
    /// [`View::ReadOnly`] where the command looks as if it only reads
    /// (`ls`, `grep`, `git status`, `sed -n`, pipelines of them), else
    /// [`View::CopyOnWrite`]. A command guessed wrong fails to write
    /// (nothing lands) and runs again through the overlay, once.
    #[default]
    Auto,
    /// Through a private copy-on-write layer, then committed
    /// ([`RunMode::Overlay`]).
    CopyOnWrite,
    /// The workspace bound read-only, the pass-through folders writable:
    /// no layer, nothing to commit, the real tree's warm caches
    /// ([`RunMode::ReadOnly`]).
    ReadOnly,
    /// Under the exclusive workspace fence ([`RunMode::Fenced`]), as where
    /// no overlay can be made.
    Fenced,
}

/// A table the commit is admitted by too, before the actor's own (a
/// server's etcd table: its holds, its marks), as the file tools'
/// `Files::admitted_by`.
#[derive(Clone)]
pub(crate) struct Outer(pub(crate) std::sync::Arc<dyn crate::files::OuterAdmission>);

impl fmt::Debug for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Outer")
    }
}

impl Command {
    /// Runs `argv[0]` (looked up on `PATH`) with the rest as arguments.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Command {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            timeout: DEFAULT_TIMEOUT,
            keep: DEFAULT_KEEP,
            grace: crate::delegate::DEFAULT_GRACE,
            commit_wait: DEFAULT_COMMIT_WAIT,
            view: View::Auto,
            outer: None,
        }
    }

    /// The commit's write set is admitted by `outer` too (all or nothing,
    /// waiting up to the commit wait), and the unseen-work rule reads the
    /// marks `outer` knows; `outer` is told nothing else — the caller
    /// records what landed ([`RunReport::landed`]).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn admitted_by(mut self, outer: Outer) -> Self {
        self.outer = Some(outer);
        self
    }

    /// How long the commit waits for its reservation.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn commit_wait_limit(&self) -> Duration {
        self.commit_wait
    }

    /// Runs `line` with `/bin/sh -c`.
    pub fn shell(line: impl Into<String>) -> Self {
        Command::new(["/bin/sh".to_string(), "-c".to_string(), line.into()])
    }

    /// The working folder (relative to the actor's root, or absolute inside
    /// it); the root by default.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The time limit; past it the whole process tree is stopped (SIGTERM,
    /// a grace, SIGKILL) and the write set judged as it stands.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a refused run's layer is kept for [`show`].
    pub fn keep(mut self, keep: Duration) -> Self {
        self.keep = keep;
        self
    }

    /// How long the commit waits for its reservation (others' calls on the
    /// same paths) before it is refused as `Timeout`.
    pub fn commit_wait(mut self, wait: Duration) -> Self {
        self.commit_wait = wait;
        self
    }

    /// Never make an overlay: run under the exclusive workspace fence
    /// ([`RunMode::Fenced`]), as where no overlay can be made.
    pub fn fenced(self) -> Self {
        self.view(View::Fenced)
    }

    /// How the command sees the workspace; [`View::Auto`] by default.
    pub fn view(mut self, view: View) -> Self {
        self.view = view;
        self
    }
}

/// How a command ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunMode {
    /// Through a private copy-on-write layer, then committed.
    Overlay,
    /// Under an exclusive fence on the workspace, writing the real tree;
    /// the write set is the before/after manifest.
    Fenced,
    /// With the workspace read-only (the pass-through folders writable):
    /// nothing to commit.
    ReadOnly,
}

/// One path a run changed in the real tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunArtifact {
    /// Relative to the actor's root.
    pub path: PathBuf,
    /// What happened to it.
    pub change: Change,
    /// The run's change was merged with changes made meanwhile.
    pub merged: bool,
}

/// Why a path of the write set refused the commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConflict {
    /// Relative to the actor's root.
    pub path: PathBuf,
    /// Why, in a sentence.
    pub reason: String,
    /// Who changed it (agents, or "outside writ").
    pub writers: Vec<String>,
    /// The run's change, as a unified diff.
    pub run_diff: String,
    /// The other side's change, as a unified diff.
    pub live_diff: String,
}

/// How a command ran and what came of its writes.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunReport {
    /// The run's id (for [`show`]).
    pub run: String,
    /// How it ran.
    pub mode: RunMode,
    /// How the command ended.
    pub status: Status,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// The end of its output (stdout and stderr interleaved).
    pub output: String,
    /// Every byte of output seen.
    pub output_bytes: u64,
    /// True when the write set was applied (or was empty).
    pub committed: bool,
    /// What was applied, relative to the root.
    pub artifacts: Vec<RunArtifact>,
    /// Why nothing was applied (empty when committed).
    pub conflicts: Vec<RunConflict>,
    /// Ignored paths written straight through, unjudged.
    pub passed_through: Vec<PathBuf>,
    /// Where the refused run's layer is kept (until `kept_for` passes).
    pub kept: Option<PathBuf>,
    /// How long the layer is kept.
    pub kept_for: Option<Duration>,
    /// How long the command ran.
    pub duration: Duration,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
    /// What was applied, by folded path: the content hash it holds now, or
    /// `None` where the file was removed (for an outer table's records).
    #[serde(skip)]
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) landed: Vec<(PathBuf, Option<String>)>,
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match (self.exit_code, self.signal) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(s)) => format!("signal {s}"),
            _ => "no exit status".into(),
        };
        let mode = match self.mode {
            RunMode::Overlay => "overlay",
            RunMode::Fenced => "fenced",
            RunMode::ReadOnly => "read-only",
        };
        writeln!(f, "run {} ({mode}): {} ({how})", self.run, self.status)?;
        if self.committed {
            if self.artifacts.is_empty() {
                writeln!(f, "nothing to commit")?;
            }
            for a in &self.artifacts {
                let what = match &a.change {
                    Change::Created => "created",
                    Change::Modified if a.merged => "merged",
                    Change::Modified => "modified",
                    Change::Deleted => "deleted",
                    Change::Renamed { .. } => "renamed",
                };
                writeln!(f, "{what} {}", a.path.display())?;
            }
        } else {
            writeln!(f, "refused: nothing was applied")?;
            for c in &self.conflicts {
                writeln!(f, "conflict {}: {}", c.path.display(), c.reason)?;
                if !c.writers.is_empty() {
                    writeln!(f, "  changed by: {}", c.writers.join(", "))?;
                }
                for line in c.run_diff.lines().chain(c.live_diff.lines()) {
                    writeln!(f, "  {line}")?;
                }
            }
            if let Some(kept) = &self.kept {
                writeln!(f, "the run's layer is kept at {}", kept.display())?;
            }
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}

/// Run ids: unique within the process; the pid makes them unique on the machine.
static NEXT: AtomicU64 = AtomicU64::new(0);

fn run_id() -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms:x}-{}-{n}", std::process::id())
}

/// The command line a hook puts in place of `command` so that it runs
/// through `writ run` as `agent`: `writ run --agent AGENT -- sh -c COMMAND`,
/// quoted for a POSIX shell. `writ` is the path of the writ binary.
pub fn wrapped_command_line(writ: &str, agent: &str, command: &str) -> String {
    format!(
        "{} run --agent {} -- /bin/sh -c {}",
        quote(writ),
        quote(agent),
        quote(command)
    )
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A kept run's layer: what its command wrote, as it would have committed.
#[derive(Debug, Clone, Serialize)]
pub struct Shown {
    /// The run's id.
    pub run: String,
    /// The layer's folder (its `upper/` holds the files as the run left them).
    pub dir: PathBuf,
    /// Paths the run wrote, relative to the root.
    pub written: Vec<PathBuf>,
    /// Paths the run removed.
    pub removed: Vec<PathBuf>,
    /// The command's output log.
    pub output: String,
}

/// A kept run's layer, by id. Layers past their keep time are removed as
/// they are found.
pub fn show(run: &str) -> Result<Shown> {
    if run.is_empty() || run.contains(['/', '\0']) || run.starts_with('.') {
        return Err(Error::invalid(run, "not a run id"));
    }
    sweep();
    let dir = overlay::runs_dir().join(run);
    if !dir.join("upper").is_dir() {
        return Err(Error::NotFound { path: dir });
    }
    let entries = overlay::scan(&dir.join("upper")).map_err(|e| Error::io("read", &dir, e))?;
    let mut written = Vec::new();
    let mut removed = Vec::new();
    for e in entries {
        match e {
            overlay::Upper::File(p) => written.push(p),
            overlay::Upper::Removed(p) => removed.push(p),
            _ => {}
        }
    }
    let output = std::fs::read_to_string(dir.join("output.log")).unwrap_or_default();
    Ok(Shown {
        run: run.to_string(),
        dir,
        written,
        removed,
        output,
    })
}

/// Removes kept layers whose keep time has passed (`<run>/keep-until`
/// holds the deadline in seconds since the epoch).
fn sweep() {
    let Ok(entries) = std::fs::read_dir(overlay::runs_dir()) else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for entry in entries.flatten() {
        let until = std::fs::read_to_string(entry.path().join("keep-until"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        if until.is_some_and(|u| u < now) {
            overlay::Layer { dir: entry.path() }.remove();
        }
    }
}

impl Actor {
    /// Runs `command` as a transaction (SPEC §17): see the [module
    /// docs](crate::run). The output and exit status are returned whether
    /// the commit was applied or refused; errors are for a command that
    /// could not start, a path outside the grant, or a commit that could not
    /// be admitted in time.
    pub async fn run(&self, command: Command) -> Result<RunReport> {
        if command.argv.is_empty() {
            return Err(Error::invalid("", "the command is empty"));
        }
        let root = self.root().to_path_buf();
        let cwd = match &command.cwd {
            None => root.clone(),
            Some(dir) => {
                let (key, _) = self.meta.resolver.resolve(&Target::tree(dir))?;
                if !key.path.is_dir() {
                    return Err(Error::invalid(dir, "the working folder is not a folder"));
                }
                key.path
            }
        };
        let read_only = match command.view {
            View::ReadOnly => true,
            View::Auto => readonly::looks_read_only(&command.argv),
            View::CopyOnWrite | View::Fenced => false,
        };
        // The read-only view needs namespaces, not overlayfs: it is tried
        // before the overlay's probe (a scratch overlay mounted and torn
        // down, several ms), which a `writ run` without a server would
        // otherwise pay for every `git status`. Where the namespaces are
        // refused the spawn fails, and the run takes the way below.
        let mut again = false;
        if read_only && cfg!(target_os = "linux") {
            match self.run_read_only(&command, &root, &cwd).await {
                Ok(report) if command.view == View::Auto && report.failed_to_write() => {
                    again = true;
                }
                Err(Error::Spawn { .. }) => {}
                done => return done,
            }
        }
        let overlay = if command.view == View::Fenced {
            Err("the run asked for the fenced mode".to_string())
        } else {
            overlay::available(&root)
        };
        let mut report = match overlay {
            Ok(()) => self.run_overlay(command, root, cwd).await,
            // The fallback's fence is this scheduler's: another server's
            // writes would not wait for it.
            Err(why) if command.outer.is_some() => Err(Error::invalid(
                &root,
                format!(
                    "no overlay can be made here ({why}), and the fenced fallback is not served on a shared table"
                ),
            )),
            Err(why) => self.run_fenced(command, root, cwd, why).await,
        }?;
        if again {
            report.notes.insert(
                0,
                "the command looked read-only and ran with the workspace read-only, but it writes: it ran again, and this is that run".into(),
            );
        }
        Ok(report)
    }

    async fn run_overlay(
        &self,
        command: Command,
        root: PathBuf,
        cwd: PathBuf,
    ) -> Result<RunReport> {
        sweep();
        let id = run_id();
        let layer = overlay::Layer::create(overlay::runs_dir().join(&id))
            .map_err(|e| Error::io("create the run's layer in", overlay::runs_dir(), e))?;
        let rules = passthrough::Rules::load(&root);
        let through = rules.top_dirs(&root);
        let plan = match overlay::plan(&root, &layer, &through, &cwd) {
            Ok(plan) => std::sync::Arc::new(plan),
            Err(e) => {
                layer.remove();
                return Err(Error::invalid(&root, e.to_string()));
            }
        };
        let started = SystemTime::now();
        let clock = match fs_clock(&layer.dir) {
            Ok(clock) => clock,
            Err(e) => {
                layer.remove();
                return Err(Error::io("stamp the run's start in", &layer.dir, e));
            }
        };
        let mut ran = match supervise(&cwd, &layer.dir, &command, Some(plan)).await {
            Ok(ran) => ran,
            Err(e) => {
                layer.remove();
                return Err(e);
            }
        };
        let mut notes = std::mem::take(&mut ran.notes);
        let namespace = ran.namespace.take();
        let label = format!("writ run: {}", overlay::describe(&command.argv));
        let entries = match overlay::scan(&layer.upper()) {
            Ok(entries) => entries,
            Err(e) => {
                layer.remove();
                return Err(Error::io("read the run's layer", layer.upper(), e));
            }
        };
        let outcome = commit::commit(
            self,
            commit::Job {
                root: &root,
                upper: &layer.upper(),
                entries: &entries,
                rules: &rules,
                started,
                clock,
                label: &label,
                wait: command.commit_wait,
                outer: command.outer.as_ref().map(|o| o.0.clone()),
            },
        )
        .await;
        // The output and exit status come back either way: a commit that
        // could not be made (its reservation timed out, a path outside the
        // actor's fence) is a refusal with the reason, not a lost report.
        let (outcome, failed) = match outcome {
            Ok(outcome) => (outcome, false),
            Err(e) => {
                notes.push(format!(
                    "nothing was applied: the commit could not be made: {e}"
                ));
                (commit::Outcome::default(), true)
            }
        };
        notes.extend(outcome.notes);
        let committed = !failed && outcome.conflicts.is_empty();
        let (kept, kept_for) = if committed {
            (None, None)
        } else {
            keep(&layer, command.keep);
            (Some(layer.dir.clone()), Some(command.keep))
        };
        clean_up_later(namespace, committed.then(|| layer.clone()));
        Ok(RunReport {
            committed,
            artifacts: outcome.artifacts,
            conflicts: outcome.conflicts,
            passed_through: outcome.passed_through,
            kept,
            kept_for,
            notes,
            landed: outcome.landed,
            ..ran.report(id, RunMode::Overlay)
        })
    }

    /// A run with no layer: the workspace bound read-only. Nothing it does
    /// in the workspace can land, so there is nothing to judge or commit.
    async fn run_read_only(&self, command: &Command, root: &Path, cwd: &Path) -> Result<RunReport> {
        let id = run_id();
        let layer = overlay::Layer::create_stage(overlay::runs_dir().join(&id))
            .map_err(|e| Error::io("create the run's folder in", overlay::runs_dir(), e))?;
        let rules = passthrough::Rules::load(root);
        let through = rules.top_dirs(root);
        let ran = match ns::Plan::read_only(root, &layer.stage(), &through, cwd) {
            Ok(plan) => supervise(cwd, &layer.dir, command, Some(std::sync::Arc::new(plan))).await,
            Err(e) => Err(Error::invalid(root, e.to_string())),
        };
        let mut ran = match ran {
            Ok(ran) => ran,
            Err(e) => {
                layer.remove();
                return Err(e);
            }
        };
        clean_up_later(ran.namespace.take(), Some(layer));
        Ok(ran.report(id, RunMode::ReadOnly))
    }

    async fn run_fenced(
        &self,
        command: Command,
        root: PathBuf,
        cwd: PathBuf,
        why: String,
    ) -> Result<RunReport> {
        let id = run_id();
        let dir = overlay::runs_dir().join(&id);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
        let fence = self
            .request([Target::tree(&root)])
            .label(format!(
                "writ run (fenced): {}",
                overlay::describe(&command.argv)
            ))
            .fence_wait_timeout(command.commit_wait)
            .await;
        let fence = match fence {
            Ok(fence) => fence,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let walker_root = root.clone();
        let trees = vec![PathBuf::new()];
        let limits = crate::delegate::manifest::Limits {
            entries: crate::delegate::DEFAULT_SCAN_ENTRIES,
            bytes: crate::delegate::DEFAULT_SCAN_BYTES,
        };
        let walk = move |after: Option<crate::delegate::manifest::Manifest>| {
            let walker = crate::delegate::manifest::Walker {
                root: &walker_root,
                trees: &trees,
                skip: &[],
                limits,
            };
            match after {
                None => (walker.before(None), None),
                Some(before) => {
                    let after = walker.after(before.frontier.as_deref());
                    let mut rehash =
                        crate::delegate::manifest::Rehash::new(walker.root, limits.bytes);
                    let (changes, _) =
                        crate::delegate::manifest::diff(&before, &after, &mut rehash);
                    (before, Some(changes))
                }
            }
        };
        let walk2 = walk.clone();
        let before = tokio::task::spawn_blocking(move || walk(None).0)
            .await
            .map_err(|e| Error::io("scan", &root, std::io::Error::other(e.to_string())))?;
        let ran = supervise(&cwd, &dir, &command, None).await;
        let _ = std::fs::remove_dir_all(&dir);
        let mut ran = ran?;
        let changes = tokio::task::spawn_blocking(move || walk2(Some(before)).1)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        drop(fence);
        let rules = passthrough::Rules::load(&root);
        let mut notes = std::mem::take(&mut ran.notes);
        notes.push(format!(
            "no overlay ({why}): the command ran under an exclusive fence on the workspace, writing the real tree; its changes are not in history"
        ));
        let (passed, judged): (Vec<_>, Vec<_>) = changes
            .into_iter()
            .partition(|(p, _)| rules.passes(p, false));
        Ok(RunReport {
            artifacts: judged
                .into_iter()
                .map(|(path, change)| RunArtifact {
                    path,
                    change,
                    merged: false,
                })
                .collect(),
            passed_through: passed.into_iter().map(|(p, _)| p).collect(),
            notes,
            ..ran.report(id, RunMode::Fenced)
        })
    }
}

/// Drops a finished run's mount namespace and removes its folder, on a
/// thread of its own: ending the namespace unmounts what it mounted (for an
/// overlay, an inode evicted per file the command looked at) and is nobody's
/// wait once the report is out.
fn clean_up_later(namespace: Option<std::fs::File>, discard: Option<overlay::Layer>) {
    let fallback = discard.clone();
    let cleanup = move || {
        drop(namespace);
        if let Some(layer) = discard {
            layer.remove();
        }
    };
    if std::thread::Builder::new()
        .name("writ-run-cleanup".into())
        .spawn(cleanup)
        .is_err()
    {
        // The closure, and the namespace with it, was dropped here.
        if let Some(layer) = fallback {
            layer.remove();
        }
    }
}

impl RunReport {
    /// A read-only run whose command failed on the read-only workspace.
    fn failed_to_write(&self) -> bool {
        self.mode == RunMode::ReadOnly
            && self.status == Status::Failed
            && self.output.contains("Read-only file system")
    }
}

/// The file system's clock now: the ctime of a file made in `dir`, in
/// nanoseconds since the epoch.
fn fs_clock(dir: &Path) -> std::io::Result<i128> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join("started");
    std::fs::write(&path, b"")?;
    let meta = std::fs::metadata(&path)?;
    Ok(i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()))
}

/// Marks a refused run's layer to be kept for `keep`.
fn keep(layer: &overlay::Layer, keep: Duration) {
    let until = SystemTime::now()
        .checked_add(keep)
        .unwrap_or_else(SystemTime::now)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let _ = std::fs::write(layer.dir.join("keep-until"), until.to_string());
}

/// How the command ran.
struct Ran {
    status: Status,
    exit_code: Option<i32>,
    signal: Option<i32>,
    output: String,
    output_bytes: u64,
    duration: Duration,
    notes: Vec<String>,
    /// The overlay's mount namespace, held so that unmounting it happens
    /// when this is dropped, not in the command's exit (`ns::hold`).
    namespace: Option<std::fs::File>,
}

impl Ran {
    /// The run's report as `mode` ran it: committed, with nothing applied,
    /// until the caller says what its commit did.
    fn report(self, run: String, mode: RunMode) -> RunReport {
        RunReport {
            run,
            mode,
            status: self.status,
            exit_code: self.exit_code,
            signal: self.signal,
            output: self.output,
            output_bytes: self.output_bytes,
            committed: true,
            artifacts: Vec::new(),
            conflicts: Vec::new(),
            passed_through: Vec::new(),
            kept: None,
            kept_for: None,
            duration: self.duration,
            notes: self.notes,
            landed: Vec::new(),
        }
    }
}

/// Runs the command in its own process group with the caller's
/// environment (through the overlay of `plan`, when given), copying its
/// output to `<dir>/output.log` and a tail; stops the whole tree at the
/// deadline (SIGTERM, grace, SIGKILL), as §9 does.
async fn supervise(
    cwd: &Path,
    dir: &Path,
    command: &Command,
    plan: Option<std::sync::Arc<ns::Plan>>,
) -> Result<Ran> {
    let program = Path::new(&command.argv[0]);
    let args = &command.argv[1..];
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let resolved =
        crate::delegate::env::find_program(program.as_os_str(), path_var, cwd).map_err(|why| {
            Error::Spawn {
                program: program.to_string_lossy().into_owned(),
                reason: why,
            }
        })?;
    let log_path = dir.join("output.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io("create", &log_path, e))?;
    let overlaid = plan.is_some();
    let prepare = |cmd: &mut std::process::Command| {
        if let Some(plan) = plan {
            overlay::prepare(cmd, plan);
        }
    };
    let spawned = process::spawn_with(&resolved, program.as_os_str(), args, &env, cwd, prepare)
        .map_err(|e| Error::Spawn {
            program: program.to_string_lossy().into_owned(),
            reason: e.to_string(),
        })?;
    let started = tokio::time::Instant::now();
    let mut tree = spawned.tree;
    // Read before the command can end: see `ns::hold`.
    let namespace = if overlaid { ns::hold(tree.pid()) } else { None };
    drop(spawned.stdin);
    let mut exited = spawned.exited;
    let mut log = tokio::fs::File::from_std(log);
    let mut tail = Tail::new(DEFAULT_TAIL);
    let mut log_error = None;
    let mut notes = Vec::new();
    let timed_out;
    {
        let pump = output::pump(
            spawned.stdout,
            spawned.stderr,
            &mut log,
            &mut tail,
            &mut log_error,
        );
        tokio::pin!(pump);
        let mut pump_done = false;
        let deadline = started + command.timeout;
        loop {
            tokio::select! {
                biased;
                _ = &mut exited => { timed_out = false; break; }
                () = tokio::time::sleep_until(deadline) => { timed_out = true; break; }
                () = &mut pump, if !pump_done => { pump_done = true; }
            }
        }
        let mut stopper = process::Stopper::new(command.grace);
        // Through the overlay the command is PID 1 of its own PID
        // namespace: the kernel ends every process in it when it ends, and
        // the leader exits only after that. A leader that exited by itself
        // leaves nothing to stop (and a read-only `ls` does not pay a scan
        // of `/proc`).
        let left_nothing = overlaid && !timed_out;
        while let Some(wait) = (!left_nothing)
            .then(|| stopper.step(&tree, std::time::Instant::now()))
            .flatten()
        {
            if pump_done {
                tokio::time::sleep(wait).await;
            } else {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = &mut pump => { pump_done = true; }
                }
            }
        }
        if stopper.killed {
            notes.push("the process tree was killed (SIGKILL after the grace)".to_string());
        }
        if !pump_done
            && tokio::time::timeout(command.grace.max(Duration::from_millis(50)), &mut pump)
                .await
                .is_err()
        {
            notes.push("output still open after the process tree was stopped was abandoned".into());
        }
    }
    let _ = log.flush().await;
    let status = match tree.try_reap() {
        Some(status) => Some(status),
        None => {
            let _ = tokio::time::timeout(process::KILL_WAIT, &mut exited).await;
            tree.try_reap()
        }
    };
    if status.is_none() {
        tree.reap_later();
    }
    use std::os::unix::process::ExitStatusExt;
    let mut exit_code = status.and_then(|s| s.code());
    let mut signal = status.and_then(|s| s.signal());
    // The overlay's waiting parent reports a death by signal N as exit
    // status 128 + N, as a shell does.
    if let Some(code) = exit_code.filter(|c| (129..=192).contains(c)) {
        if timed_out {
            exit_code = None;
            signal = Some(code - 128);
        }
    }
    let status = if timed_out {
        Status::TimedOut
    } else if exit_code == Some(0) {
        Status::Completed
    } else {
        Status::Failed
    };
    if let Some(e) = log_error {
        notes.push(format!(
            "the output log could not be written completely: {e}"
        ));
    }
    Ok(Ran {
        status,
        exit_code,
        signal,
        output: tail.text(),
        output_bytes: tail.total,
        duration: started.elapsed(),
        notes,
        namespace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_quote_for_a_posix_shell() {
        assert_eq!(
            wrapped_command_line("/usr/bin/writ", "agent-1", "sed -i 's/a/b/' x.txt"),
            "/usr/bin/writ run --agent agent-1 -- /bin/sh -c 'sed -i '\\''s/a/b/'\\'' x.txt'"
        );
    }
}
