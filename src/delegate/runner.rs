//! One delegated run, start to finish.
//!
//! # Implementation details
//!
//! Order matters and each step undoes what came before it on failure:
//!
//! 1. Check the input (environment names, the program, the project folders):
//!    nothing is held or created yet.
//! 2. Take the fence: a child actor `<actor>/run-<id>` with one try-only
//!    tree fence on the run folder and the project folders.
//! 3. Create the run folder exclusively (an existing folder is never
//!    reused: the next id is tried), then `TASK.md` and `output.log`.
//! 4. Walk the fenced folders (before manifest) and record git `HEAD`s.
//! 5. Spawn. A failure here removes the run folder (and `.writ-runs` if this
//!    run created it) and releases the fence before returning `Spawn`.
//! 6. Wait for the leader's exit or the deadline while copying output; stop
//!    the group; reap; drain what output is left for at most a grace.
//! 7. Walk again, diff, read commits, release the fence, report.
//!
//! From step 2 on, a [`RunGuard`] owns the run actor and (from step 5) the
//! process tree. If the future is dropped, the guard's `Drop` sends SIGTERM
//! to the group, marks the run as cancelled in the dump (a labelled call
//! hold inside its own fence) and hands the rest of the stop to a thread,
//! which releases the fence only once the group is stopped and the leader
//! reaped.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::process::Signal;
use tokio::io::AsyncWriteExt;

use super::manifest::{self, Limits, Walker};
use super::output::{self, Tail};
use super::process::{self, Tree};
use super::{
    Artifact, Report, Run, Sandbox, ScanStats, Status, git, relative, sandbox, spawn_error,
};
use crate::core::key::{Mode, Target};
use crate::error::{Error, Result};
use crate::sched::actor::{Actor, Grant};
use crate::sched::guard::Reservation;

/// The folder under the base that holds run folders.
pub(crate) const RUNS: &str = ".writ-runs";

/// Run ids: unique within the process, hence within any session.
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// Attempts at a fresh run folder before giving up.
const ATTEMPTS: usize = 16;

/// The longest piece of a run folder's name taken from the session or actor.
const NAME_PART: usize = 48;

/// Output left unread after the stop is waited for at least this long.
const MIN_DRAIN: Duration = Duration::from_millis(50);

/// Keeps `[A-Za-z0-9_.-]`, replaces the rest with `_`, bounds the length.
pub(crate) fn sanitize(part: &str) -> String {
    let mut out: String = part
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(NAME_PART)
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = format!("_{out}");
    }
    out
}

/// Where a run folder goes: the root, or a fenced actor's first folder.
// The crate's `Error` carries `Busy` by value (SPEC §10); its size is the
// crate's decision, not this function's.
fn base_of(actor: &Actor) -> Result<PathBuf> {
    let Some(fence) = actor.meta.grant_fence() else {
        return Ok(actor.root().to_path_buf());
    };
    fence
        .iter()
        .find(|(k, m)| k.tree && *m == Mode::Exclusive)
        .map(|(k, _)| k.path.clone())
        .ok_or_else(|| Error::OutsideFence {
            path: actor.root().join(RUNS),
            actor: actor.name().to_string(),
            fence: fence.iter().map(|(k, _)| k.path.clone()).collect(),
        })
}

/// The fenced run folder, freshly created.
struct Opened {
    run_actor: Actor,
    run_dir: PathBuf,
    runs: PathBuf,
    created_runs: bool,
}

/// Takes the fence, then creates the run folder; a folder that already
/// exists is never reused.
fn open_run(actor: &Actor, base: &Path, projects: &[PathBuf]) -> Result<Opened> {
    let session = sanitize(actor.scheduler().config().session_id());
    let who = sanitize(actor.name());
    let runs = base.join(RUNS);
    for _ in 0..ATTEMPTS {
        // Relaxed: ids only need to be distinct.
        let id = NEXT_RUN.fetch_add(1, Ordering::Relaxed) + 1;
        let run_dir = runs.join(format!("{session}-{who}-{id}"));
        let targets = std::iter::once(Target::tree(&run_dir))
            .chain(projects.iter().map(Target::tree))
            .collect::<Vec<_>>();
        let run_actor = actor.child(
            format!("{}/run-{id}", actor.name()),
            Grant::fenced(actor.root(), targets),
        )?;
        // The fence is held: now the folder.
        let created_runs = match fs::create_dir(&runs) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(Error::io("create", &runs, e)),
        };
        if !fs::symlink_metadata(&runs).is_ok_and(|m| m.is_dir()) {
            return Err(Error::invalid(
                &runs,
                "it must be a plain folder (a link or a file is in the way)",
            ));
        }
        match fs::create_dir(&run_dir) {
            Ok(()) => {
                return Ok(Opened {
                    run_actor,
                    run_dir,
                    runs,
                    created_runs,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Left by an earlier process of the same session name (ids
                // restart in every process): move past every id in use.
                skip_past_existing(&runs, &format!("{session}-{who}-"));
                continue;
            }
            Err(e) => {
                if created_runs {
                    let _ = fs::remove_dir(&runs);
                }
                return Err(Error::io("create", &run_dir, e));
            }
        }
    }
    Err(Error::io(
        "create a fresh run folder in",
        &runs,
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            "every candidate name was taken",
        ),
    ))
}

/// Raises the run id counter past every `<prefix><id>` folder in `runs`.
fn skip_past_existing(runs: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    let highest = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            name.to_str()?.strip_prefix(prefix)?.parse::<u64>().ok()
        })
        .max();
    if let Some(highest) = highest {
        // Relaxed: ids only need to be distinct; the exclusive mkdir decides.
        NEXT_RUN.fetch_max(highest, Ordering::Relaxed);
    }
}

/// `message` with the root spelled `.`, so host paths stay out of reports.
fn hide_root(message: &str, root: &Path) -> String {
    message.replace(root.to_string_lossy().as_ref(), ".")
}

/// Appends a line to the log through the handle the runner opened, never
/// by its path: the child may have replaced `output.log` by a symlink to a
/// file elsewhere, or by a fifo an `open` would block on. Best effort (the
/// log is a record, not a channel anyone waits on).
fn append_log(log: Option<&fs::File>, line: &str) {
    if let Some(mut file) = log {
        let _ = writeln!(file, "{line}");
    }
}

/// Owns the run actor (the fence) and, once spawned, the process tree. Its
/// `Drop` is the cancellation path.
struct RunGuard {
    /// Dropped before `actor`: the tree stops before the fence goes.
    tree: Option<Tree>,
    actor: Option<Actor>,
    run_dir: PathBuf,
    /// A second handle on the log the runner created (shares its offset).
    log: Option<fs::File>,
    grace: Duration,
    /// Set when the run was finished or abandoned properly.
    done: bool,
}

impl RunGuard {
    /// Undoes everything before the spawn: the folder and the fence.
    fn abandon(&mut self, opened: &OpenedPaths) {
        self.done = true;
        let _ = fs::remove_dir_all(&opened.run_dir);
        if opened.created_runs {
            let _ = fs::remove_dir(&opened.runs); // only if still empty
        }
        drop(self.tree.take());
        drop(self.actor.take());
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut cancel = Cancel {
            tree: self.tree.take(),
            marker: None,
            actor: self.actor.take(),
            log: self.log.take(),
            grace: self.grace,
        };
        let Some(tree) = &cancel.tree else {
            drop(cancel); // nothing was started: record it and release
            return;
        };
        tree.signal(Signal::TERM);
        // Let the dump show the run as cancelled while it stops: a call hold
        // inside its own fence (covered by it, so it contends with nobody
        // but requests already queued there, which win: best effort).
        cancel.marker = cancel.actor.as_ref().and_then(|actor| {
            actor
                .request([Target::tree(&self.run_dir)])
                .label(format!("{}: stopping the process tree", Status::Cancelled))
                .try_admit()
                .ok()
        });
        tracing::debug!(pid = tree.pid(), "delegated run cancelled");
        let spawned = std::thread::Builder::new()
            .name("writ-run-cancel".into())
            .spawn(move || cancel.run());
        // Without a thread the closure, and `cancel` in it, was dropped:
        // Cancel's Drop kills at once, reaps, records and releases inline.
        drop(spawned);
    }
}

/// The rest of a cancelled run, on its own thread.
struct Cancel {
    tree: Option<Tree>,
    /// The dump's sign that the run was cancelled; released before the fence.
    marker: Option<Reservation>,
    actor: Option<Actor>,
    log: Option<fs::File>,
    grace: Duration,
}

impl Cancel {
    fn run(mut self) {
        if let Some(tree) = self.tree.as_mut() {
            tree.stop_blocking(self.grace);
        }
        // Drop records and releases.
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        let line = match self.tree.take() {
            Some(tree) => {
                drop(tree); // kills and reaps if `run` did not
                format!(
                    "[writ] status: {}: the run was dropped; its process group was stopped and the leader reaped",
                    Status::Cancelled
                )
            }
            None => format!(
                "[writ] status: {}: the run was dropped before or after its command ran",
                Status::Cancelled
            ),
        };
        append_log(self.log.as_ref(), &line);
        drop(self.marker.take());
        drop(self.actor.take());
    }
}

struct OpenedPaths {
    run_dir: PathBuf,
    runs: PathBuf,
    created_runs: bool,
}

/// Output copying and stdin feeding, driven alongside whatever the run is
/// waiting for.
struct Background<'a> {
    pump: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    pump_done: bool,
    feed: Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>,
}

enum Polled<T> {
    Main(T),
    Pump,
    Feed,
}

impl Background<'_> {
    /// Awaits `main` while the output keeps being copied and stdin fed.
    async fn drive<T>(&mut self, main: impl Future<Output = T>) -> T {
        tokio::pin!(main);
        loop {
            let Background {
                pump,
                pump_done,
                feed,
            } = self;
            let feeding = feed.is_some();
            let feed = async {
                if let Some(f) = feed.as_mut() {
                    f.as_mut().await;
                }
            };
            let polled = tokio::select! {
                biased;
                out = &mut main => Polled::Main(out),
                () = pump.as_mut(), if !*pump_done => Polled::Pump,
                () = feed, if feeding => Polled::Feed,
            };
            match polled {
                Polled::Main(out) => return out,
                Polled::Pump => self.pump_done = true,
                Polled::Feed => self.feed = None,
            }
        }
    }

    /// Waits up to `bound` for the output to reach end of file; false when
    /// it was abandoned.
    async fn drain(&mut self, bound: Duration) -> bool {
        self.feed = None;
        if !self.pump_done {
            self.pump_done = tokio::time::timeout(bound, self.pump.as_mut())
                .await
                .is_ok();
        }
        self.pump_done
    }
}

enum Ended {
    Exited,
    TimedOut,
}

/// What step 1 established: the environment, the program, the folders.
struct Checked {
    env: Vec<(OsString, OsString)>,
    program: PathBuf,
    projects: Vec<PathBuf>,
    /// `Run::writable`, resolved.
    writable: Vec<PathBuf>,
    /// The working bwrap to run in, or why the run is not sandboxed.
    sandbox: std::result::Result<&'static Path, String>,
}

/// Step 1: checks the input; nothing is held or created.
fn check(actor: &Actor, run: &Run) -> Result<Checked> {
    let invalid = run
        .env
        .iter()
        .map(|(name, _)| name)
        .chain(&run.inherit)
        .find(|name| !super::env::valid_name(name));
    if let Some(name) = invalid {
        return Err(spawn_error(
            &run.program,
            format!("the environment variable name {name:?} is invalid"),
        ));
    }
    let env = super::env::child_env(std::env::vars_os(), &run.inherit, &run.env);
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = super::env::find_program(&run.program, path_var, actor.root())
        .map_err(|why| spawn_error(&run.program, why))?;
    let mut projects = Vec::with_capacity(run.project_dirs.len());
    for dir in &run.project_dirs {
        let (key, _) = actor.meta.resolver.resolve(&Target::tree(dir))?;
        match fs::metadata(&key.path) {
            Ok(meta) if meta.is_dir() => projects.push(key.path),
            Ok(_) => return Err(Error::invalid(dir, "a project folder must be a folder")),
            Err(_) => return Err(Error::invalid(dir, "the project folder does not exist")),
        }
    }
    let mut writable = Vec::with_capacity(run.writable.len());
    for dir in &run.writable {
        let path = actor.root().join(dir);
        match fs::canonicalize(&path) {
            Ok(path) if path.is_dir() => writable.push(path),
            _ => {
                return Err(spawn_error(
                    &run.program,
                    format!(
                        "the writable folder {} is not an existing folder; create it first",
                        dir.display()
                    ),
                ));
            }
        }
    }
    let sandbox = match run.sandbox {
        Sandbox::Off => Err("the run asked for no sandbox (Sandbox::Off)".to_string()),
        Sandbox::Auto => sandbox::bwrap().map_err(str::to_string),
        Sandbox::Required => Ok(sandbox::bwrap().map_err(|why| {
            spawn_error(
                &run.program,
                format!("the run requires the sandbox, but {why}"),
            )
        })?),
    };
    Ok(Checked {
        env,
        program,
        projects,
        writable,
        sandbox,
    })
}

/// Writes `TASK.md` and creates `output.log`; returns the log, the file
/// system's clock (the ctime of `TASK.md`) for the racy-file rule, and the
/// two files' identities (device, inode): the manifest recognizes the
/// bookkeeping files by them, never by their names alone. The caller keeps
/// both handles open for the whole run, so that no file the child creates
/// can be given one of those inode numbers again.
#[allow(clippy::type_complexity)]
fn write_run_files(
    run_dir: &Path,
    task: &str,
) -> io::Result<(fs::File, fs::File, manifest::Stamp, [(u64, u64); 2])> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(run_dir.join("TASK.md"))?;
    file.write_all(task.as_bytes())?;
    let meta = file.metadata()?;
    let log = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(run_dir.join("output.log"))?;
    let log_meta = log.metadata()?;
    Ok((
        log,
        file,
        (meta.ctime(), meta.ctime_nsec()),
        [(meta.dev(), meta.ino()), (log_meta.dev(), log_meta.ino())],
    ))
}

/// How step 6 went.
struct Supervised {
    ended: Ended,
    status: Option<std::process::ExitStatus>,
    stopper: process::Stopper,
    /// The output reached end of file (rather than being abandoned).
    drained: bool,
}

/// Step 6: feeds the task, copies the output, waits for the leader's exit
/// or the deadline, stops the group, reaps the leader, drains the output.
async fn supervise(
    tree: &mut Tree,
    io: Io,
    task: Vec<u8>,
    deadline: tokio::time::Instant,
    grace: Duration,
    out: &mut Output,
) -> Supervised {
    let Io {
        mut stdin,
        stdout,
        stderr,
        mut exited,
    } = io;
    let feed = async move {
        // A child that never reads stdin only costs this future.
        let _ = stdin.write_all(&task).await;
        let _ = stdin.shutdown().await;
    };
    let pump = output::pump(
        stdout,
        stderr,
        &mut out.log,
        &mut out.tail,
        &mut out.log_error,
    );
    let mut bg = Background {
        pump: Box::pin(pump),
        pump_done: false,
        feed: Some(Box::pin(feed)),
    };
    let ended = bg
        .drive(async {
            tokio::select! {
                biased;
                _ = &mut exited => Ended::Exited,
                () = tokio::time::sleep_until(deadline) => Ended::TimedOut,
            }
        })
        .await;
    let mut stopper = process::Stopper::new(grace);
    while let Some(wait) = stopper.step(tree, std::time::Instant::now()) {
        bg.drive(tokio::time::sleep(wait)).await;
    }
    let mut status = tree.try_reap();
    if status.is_none() && matches!(ended, Ended::TimedOut) {
        // The group could not be inspected, or SIGKILL is slow to land:
        // wait (bounded) for the leader's exit itself.
        let _ = bg
            .drive(tokio::time::timeout(process::KILL_WAIT, &mut exited))
            .await;
        status = tree.try_reap();
    }
    let drained = bg.drain(grace.max(MIN_DRAIN)).await;
    Supervised {
        ended,
        status,
        stopper,
        drained,
    }
}

/// The child's pipes and the leader's exit notification.
struct Io {
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    exited: tokio::sync::oneshot::Receiver<()>,
}

/// Where the output goes.
struct Output {
    log: tokio::fs::File,
    tail: Tail,
    log_error: Option<io::Error>,
}

/// What step 7's scan found.
struct Scanned {
    changes: Vec<(PathBuf, super::Change)>,
    uncertain: usize,
    truncated: bool,
    stats: ScanStats,
    unreadable: usize,
    unexamined: Vec<String>,
}

/// Step 7: the walk after the run, compared with the walk before.
fn scan_after(walker: &Walker<'_>, before: &manifest::Manifest) -> Scanned {
    let after = walker.after(before.frontier.as_deref());
    let mut rehash = manifest::Rehash::new(walker.root, walker.limits.bytes);
    let (changes, uncertain) = manifest::diff(before, &after, &mut rehash);
    Scanned {
        changes,
        uncertain,
        // An entry the walks could not examine makes the scan incomplete.
        truncated: before.frontier.is_some()
            || after.frontier.is_some()
            || rehash.exhausted
            || before.unreadable + after.unreadable > 0,
        stats: ScanStats {
            entries_before: before.visited,
            entries_after: after.visited,
            hashed_before: before.hashed,
            hashed_after: rehash.used,
        },
        unreadable: before.unreadable + after.unreadable,
        unexamined: before
            .unexamined
            .iter()
            .chain(&after.unexamined)
            .cloned()
            .collect(),
    }
}

/// Runs `f` with a walker over the run's trees, on the blocking pool.
async fn walk<T: Send + 'static>(
    scope: &Scope,
    f: impl FnOnce(&Walker<'_>) -> T + Send + 'static,
) -> io::Result<T> {
    let Scope {
        root,
        trees,
        skip,
        limits,
    } = scope.clone();
    tokio::task::spawn_blocking(move || {
        f(&Walker {
            root: &root,
            trees: &trees,
            skip: &skip,
            limits,
        })
    })
    .await
    .map_err(|e| io::Error::other(e.to_string()))
}

/// What the walks cover.
#[derive(Clone)]
struct Scope {
    root: PathBuf,
    trees: Vec<PathBuf>,
    skip: Vec<(PathBuf, (u64, u64))>,
    limits: Limits,
}

pub(crate) async fn delegate(actor: &Actor, run: Run) -> Result<Report> {
    // 1. Input.
    let Checked {
        env,
        program,
        projects,
        writable,
        sandbox,
    } = check(actor, &run)?;
    let root = actor.root().to_path_buf();
    let base = base_of(actor)?;

    // 2–3. The fence, then the folder.
    let Opened {
        run_actor,
        run_dir,
        runs,
        created_runs,
    } = open_run(actor, &base, &projects)?;
    let run_name = run_actor.name().to_string();
    let log_path = run_dir.join("output.log");
    let opened = OpenedPaths {
        run_dir: run_dir.clone(),
        runs,
        created_runs,
    };
    let mut guard = RunGuard {
        tree: None,
        actor: Some(run_actor),
        run_dir: run_dir.clone(),
        log: None,
        grace: run.grace,
        done: false,
    };
    let (log_file, task_file, clock, bookkeeping) = match write_run_files(&run_dir, &run.task) {
        Ok(files) => files,
        Err(e) => {
            guard.abandon(&opened);
            return Err(Error::io("write the run files in", &run_dir, e));
        }
    };
    guard.log = log_file.try_clone().ok();

    // 4. Before.
    let rel_run_dir = relative(&root, &run_dir);
    let scope = Scope {
        trees: manifest::disjoint(
            std::iter::once(rel_run_dir.clone())
                .chain(projects.iter().map(|p| relative(&root, p)))
                .collect(),
        ),
        skip: vec![
            (rel_run_dir.join("TASK.md"), bookkeeping[0]),
            (rel_run_dir.join("output.log"), bookkeeping[1]),
        ],
        limits: Limits {
            entries: run.scan_entries,
            bytes: run.scan_bytes,
        },
        root: root.clone(),
    };
    let before = match walk(&scope, move |w| w.before(Some(clock))).await {
        Ok(before) => before,
        Err(e) => {
            guard.abandon(&opened);
            return Err(Error::io("scan", &run_dir, e));
        }
    };
    let mut notes = Vec::new();
    let git_dirs: Vec<PathBuf> = scope.trees.iter().map(|t| root.join(t)).collect();
    let heads = match git::heads(&git_dirs, &env).await {
        Ok(heads) => heads,
        Err(git::GitError::Missing) => {
            notes.push("git is not installed, so commits made during the run were not read".into());
            Vec::new()
        }
        Err(git::GitError::Failed(why)) => {
            notes.push(format!(
                "commits could not be read: {}",
                hide_root(&why, &root)
            ));
            Vec::new()
        }
    };

    // 5. Spawn (inside the sandbox when there is one).
    let sandboxed = sandbox.is_ok();
    let spawned = match &sandbox {
        Ok(bwrap) => {
            let open: Vec<PathBuf> = projects.iter().chain(&writable).cloned().collect();
            let wrapped = sandbox::wrap(
                bwrap,
                &root,
                &run_dir,
                &open,
                run.network,
                &program,
                &run.args,
            );
            process::spawn(
                &wrapped.program,
                std::ffi::OsStr::new("bwrap"),
                &wrapped.args,
                &env,
                &run_dir,
            )
        }
        Err(why) => {
            if run.sandbox == Sandbox::Auto {
                notes.push(format!(
                    "not sandboxed: {why}; only the process group was stopped, and the run could write outside its fenced folders"
                ));
            }
            process::spawn(&program, &run.program, &run.args, &env, &run_dir)
        }
    };
    let spawned = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            guard.abandon(&opened);
            return Err(spawn_error(&run.program, e.to_string()));
        }
    };
    let started = tokio::time::Instant::now();
    tracing::debug!(run = %run_name, pid = spawned.tree.pid(), "delegated run started");
    let io = Io {
        stdin: spawned.stdin,
        stdout: spawned.stdout,
        stderr: spawned.stderr,
        exited: spawned.exited,
    };
    let tree = guard.tree.insert(spawned.tree);

    // 6. Run, stop, reap, drain.
    let mut out = Output {
        log: tokio::fs::File::from_std(log_file),
        tail: Tail::new(run.tail),
        log_error: None,
    };
    let task = run.task.into_bytes();
    let Supervised {
        ended,
        status,
        stopper,
        drained,
    } = supervise(tree, io, task, started + run.timeout, run.grace, &mut out).await;
    let duration = started.elapsed();
    match (status, guard.tree.take()) {
        (Some(_), _) | (None, None) => {}
        (None, Some(tree)) => {
            notes.push(format!(
                "the leader had not exited {:?} after SIGKILL; it will be reaped when it does",
                process::KILL_WAIT
            ));
            tree.reap_later();
        }
    }
    if stopper.survivors {
        notes.push(format!(
            "processes of the run's group were still alive {:?} after SIGKILL",
            process::KILL_WAIT
        ));
    }
    if !drained {
        notes.push(
            "output still open after the process group was stopped was abandoned; a process that left the group may still hold it (and may still be running: only the group is stopped)"
                .into(),
        );
    }
    let mut exit_code = status.and_then(|s| s.code());
    let mut signal = status.and_then(|s| s.signal());
    if let Some(sig) = exit_code
        .filter(|_| sandboxed)
        .and_then(sandbox::signal_of_exit_code)
    {
        // bwrap waits for the program and exits with 128 + N when signal N
        // ended it: that is a death by signal, reported as one.
        exit_code = None;
        signal = Some(sig);
        notes.push(format!(
            "the sandbox reported exit status {}, its way of saying the program was ended by signal {sig}",
            128 + sig
        ));
    }
    let status = match ended {
        Ended::TimedOut => Status::TimedOut,
        Ended::Exited if exit_code == Some(0) => Status::Completed,
        Ended::Exited => Status::Failed,
    };
    let how = match (exit_code, signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => "no exit status".into(),
    };
    let killed = if stopper.killed {
        " (SIGKILL after the grace)"
    } else {
        ""
    };
    let trailer = format!(
        "\n[writ] status: {status} ({how}) after {duration:.1?}; the process group was stopped{killed}\n"
    );
    if let Some(e) = out.log_error.take() {
        notes.push(format!("the log could not be written completely: {e}"));
    }
    let _ = out.log.write_all(trailer.as_bytes()).await;
    let _ = out.log.flush().await;

    // 7. After, diff, commits; then release.
    let scanned = match walk(&scope, move |w| scan_after(w, &before)).await {
        Ok(scanned) => scanned,
        Err(e) => {
            notes.push(format!("the scan after the run failed: {e}"));
            Scanned {
                changes: Vec::new(),
                uncertain: 0,
                truncated: true,
                stats: ScanStats::default(),
                unreadable: 0,
                unexamined: Vec::new(),
            }
        }
    };
    if scanned.uncertain > 0 {
        notes.push(format!(
            "{} file(s) whose metadata changed could not be hashed, so they are listed as modified",
            scanned.uncertain
        ));
    }
    if scanned.unreadable > 0 {
        notes.push(format!(
            "{} file(s) or folder(s) could not be examined during the scans, so changes there may be missing: {}",
            scanned.unreadable,
            scanned.unexamined.join(", ")
        ));
    }
    let commits = match git::commits_since(&heads, &env).await {
        Ok(commits) => commits,
        Err(git::GitError::Missing) => Vec::new(),
        Err(git::GitError::Failed(why)) => {
            notes.push(format!(
                "commits could not be read: {}",
                hide_root(&why, &root)
            ));
            Vec::new()
        }
    };
    drop(task_file); // the walks are done: its inode may be reused now
    guard.done = true;
    drop(guard.actor.take());
    tracing::debug!(run = %run_name, %status, "delegated run finished");

    Ok(Report {
        actor: run_name,
        program: run.program.to_string_lossy().into_owned(),
        status,
        exit_code,
        signal,
        output_tail: out.tail.text(),
        output_bytes: out.tail.total,
        log: relative(&root, &log_path),
        run_dir: rel_run_dir,
        artifacts: scanned
            .changes
            .into_iter()
            .map(|(path, change)| Artifact { path, change })
            .collect(),
        commits,
        scan_truncated: scanned.truncated,
        duration,
        notes,
        scan: scanned.stats,
        sandboxed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_are_sanitized_and_bounded() {
        assert_eq!(sanitize("lead/run-3"), "lead_run-3");
        assert_eq!(sanitize("über agent"), "_ber_agent");
        assert_eq!(sanitize(""), "_");
        assert_eq!(sanitize(".."), "_..");
        assert_eq!(sanitize(&"x".repeat(500)).len(), NAME_PART);
    }
}
