//! Rewind and redo: plan from the journal, check every file, then restore
//! all of them under one reservation — or touch nothing.
//!
//! # Implementation details
//!
//! A *plan* has one step per path the turn touched, in the order the turn
//! first touched them: the state the path should be in now (`from`) and the
//! state the restore gives it (`to`).
//!
//! - A first rewind takes `from` = the turn's last post-state of the path
//!   and `to` = its pre-state before the turn's first write to it (a rename
//!   is two paths, so both ends are tracked).
//! - A redo reverses the turn's last rewind record (`from` and `to`
//!   swapped); a rewind after a redo reverses that redo.
//! - Rewinding again after a rewind, or redoing again after a redo, re-runs
//!   that record's plan: files already restored count as restored, so a run
//!   interrupted by a crash is finished, and a finished one changes nothing.
//! - Writes the turn made after its last rewind or redo are laid over the
//!   plan (see [`plan`]).
//!
//! Each step is then checked against the file as it is:
//! 1. equal to `to` → already restored;
//! 2. equal to `from` → restore, unless another turn whose writes are still
//!    in effect wrote the path after this turn first did (restoring would
//!    wipe that turn's work: a conflict naming it);
//! 3. anything else → in merge mode, the agent's change reversed out of the
//!    current text if that is clean; otherwise a conflict naming the turn
//!    whose write produced the current content, if writ made it.
//!
//! Only content (hash, or absent) is compared; modes are restored but not
//! compared. Any conflict → `Error::RewindConflict` and nothing is touched.
//! Otherwise the session reserves every path at once (`session_admit`: any
//! live hold, fences included, refuses it), plans and checks again inside
//! the hold, snapshots every file it will change, journals the intent
//! (`restore` record), restores in reverse order, and journals `done`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::fsio::{self, Current};
use super::merge::{self, Reverse};
use super::record::{self, DoneRec, Record, RestoreFile, RestoreRec, StateRec, WriteRec};
use super::store::{Store, sha256_hex};
use super::{
    Action, Conflict, FileReport, FileState, Handle, RestoreKind, RewindMode, RewindReport,
};
use crate::core::key::Target;
use crate::error::{Error, Result};
use crate::files::gate::Gate;
use crate::files::policy;
use crate::sched::resolve::{self, Resolver};
use crate::sched::scheduler::Scheduler;

/// One path of a plan.
#[derive(Debug, Clone)]
struct Step {
    path: PathBuf,
    root: PathBuf,
    /// The state the path should be in now.
    from: Option<StateRec>,
    /// The state the restore gives it.
    to: Option<StateRec>,
    /// Journal index of the turn's first write to the path: later writes by
    /// other turns are what a restore could wipe.
    since: usize,
    /// Why the path is left as it is, if it is.
    skip: Option<String>,
    /// It belongs to a restore that finished: report it, touch nothing.
    settled: bool,
}

/// What to do with one step that does not conflict.
#[derive(Debug, Clone)]
enum Verdict {
    Skip(String),
    Already,
    Restore,
    Merge(Vec<u8>),
}

/// The restore record a plan re-runs: its id, and whether it finished.
type Resumes = Option<(String, bool)>;

/// What a touched step writes: bytes and mode, or `None` to delete.
type Payload = Option<(Vec<u8>, u32)>;

/// A checked plan.
struct Prepared {
    steps: Vec<(Step, Current, Verdict)>,
    resumes: Resumes,
}

impl Prepared {
    /// Every path the restore reserves: each one it is responsible for
    /// (not skipped, not settled by an earlier run).
    fn paths(&self) -> Vec<PathBuf> {
        self.steps
            .iter()
            .filter(|(s, _, v)| !s.settled && !matches!(v, Verdict::Skip(_)))
            .map(|(s, _, _)| s.path.clone())
            .collect()
    }
}

fn history_err(reason: impl Into<String>) -> Error {
    Error::History {
        reason: reason.into(),
    }
}

// The session's rewind entry points live here, with the rewind they run,
// rather than in `sched`: the scheduler does not know history exists.
impl Scheduler {
    /// Rewinds every write tagged `turn` in this session, by any actor,
    /// strictly: each file must be exactly as the turn left it (or already
    /// restored), else `Err(Error::RewindConflict { conflicts })` and nothing
    /// is touched. Needs `Config::history_dir`; an unknown turn is
    /// `Error::UnknownTurn`; a path held by anyone (fences included) is
    /// `Error::Busy` unless `Config::file_op_wait` is set (then it waits,
    /// blocking the thread: call it from a blocking context, never on an
    /// async runtime's worker thread). See [`history`](crate::history).
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().history_dir(dir.path()));
    /// match sched.rewind_turn("turn-7") {
    ///     Err(writ::Error::UnknownTurn { turn }) => assert_eq!(turn, "turn-7"),
    ///     other => panic!("expected UnknownTurn, got {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn rewind_turn(&self, turn: &str) -> Result<RewindReport> {
        run(self, turn, RestoreKind::Rewind, RewindMode::Strict, None)
    }

    /// [`Scheduler::rewind_turn`] in the given mode: `RewindMode::Merge`
    /// also rewinds a file edited since, when the agent's change reverses
    /// cleanly out of it; what does not reverse cleanly stays a conflict
    /// and nothing is touched.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let (ws, data) = (dir.path().join("ws"), dir.path().join("h"));
    /// # std::fs::create_dir(&ws).unwrap();
    /// # std::fs::write(ws.join("a.txt"), "1\n2\n3\n4\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data));
    /// let agent = sched.actor("agent", writ::Grant::workspace(&ws))?;
    /// agent.set_turn("t");
    /// agent.files().read("a.txt")?;
    /// agent.files().replace("a.txt", "1\n", "one\n")?;
    /// std::fs::write(ws.join("a.txt"), "one\n2\n3\nfour\n").unwrap(); // a person's edit
    /// sched.rewind_turn_with("t", writ::history::RewindMode::Merge)?;
    /// assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "1\n2\n3\nfour\n");
    /// # Ok(()) }
    /// ```
    pub fn rewind_turn_with(&self, turn: &str, mode: RewindMode) -> Result<RewindReport> {
        run(self, turn, RestoreKind::Rewind, mode, None)
    }

    /// Undoes the last rewind of `turn`, under the same rules: each file
    /// must be exactly as that rewind left it (or already redone), else
    /// `Error::RewindConflict` and nothing is touched. A turn never rewound
    /// is `Error::History`.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let (ws, data) = (dir.path().join("ws"), dir.path().join("h"));
    /// # std::fs::create_dir(&ws).unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data));
    /// let agent = sched.actor("agent", writ::Grant::workspace(&ws))?;
    /// agent.set_turn("t");
    /// agent.files().write("new.rs", "fn f() {}\n")?;
    /// sched.rewind_turn("t")?;
    /// assert!(!ws.join("new.rs").exists());
    /// let report = sched.redo_turn("t")?;
    /// assert!(ws.join("new.rs").exists());
    /// assert_eq!(report.changed(), 1);
    /// # Ok(()) }
    /// ```
    pub fn redo_turn(&self, turn: &str) -> Result<RewindReport> {
        run(self, turn, RestoreKind::Redo, RewindMode::Strict, None)
    }

    /// A rewind (`kind`) or a redo of `turn` whose paths are admitted by
    /// `outer` first, the session's table outside this process (SPEC §16),
    /// and then reserved here as always. An `Err` from `outer` refuses the
    /// restore with nothing touched.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn restore_turn_admitted_by(
        &self,
        turn: &str,
        kind: RestoreKind,
        mode: RewindMode,
        outer: OuterReserve<'_>,
    ) -> Result<RewindReport> {
        run(self, turn, kind, mode, Some(outer))
    }

    /// Makes the next rewinds and redos stop, as a crash would, after
    /// `after` restores (`None`: never). For tests of crash recovery.
    #[doc(hidden)]
    pub fn set_rewind_failpoint(&self, after: Option<usize>) {
        Handle::of(self).set_failpoint(after);
    }
}

/// Admits a restore's paths (canonical) in a table outside this process,
/// before this scheduler's own session reservation; `Err` refuses it. What
/// it admitted is its to give back once the restore is over.
pub(crate) type OuterReserve<'a> = &'a (dyn Fn(&[PathBuf], &str) -> Result<()> + Sync);

/// Runs a rewind or redo of `turn` in `sched`'s session (its paths
/// admitted by `outer` first, when the session's table is elsewhere) and
/// tells the event stream what it restored.
fn run(
    sched: &Scheduler,
    turn: &str,
    kind: RestoreKind,
    mode: RewindMode,
    outer: Option<OuterReserve<'_>>,
) -> Result<RewindReport> {
    let report = run_once(sched, turn, kind, mode, outer)?;
    sched.emit(|| crate::sched::events::EventKind::Rewound {
        turn: report.turn.clone(),
        redo: kind == RestoreKind::Redo,
        paths: report.files.iter().map(|f| f.path.clone()).collect(),
    });
    Ok(report)
}

fn run_once(
    sched: &Scheduler,
    turn: &str,
    kind: RestoreKind,
    mode: RewindMode,
    outer: Option<OuterReserve<'_>>,
) -> Result<RewindReport> {
    let handle = Handle::of(sched);
    let store = handle.store()?;
    let session = sched.config().session_id().to_string();
    // A first check outside any hold, so conflicts are reported even when a
    // path is also busy, and nothing is reserved for a rewind that cannot run.
    let first = prepare(sched, &store, &session, turn, kind, mode)?;
    let paths = first.paths();
    let label = format!("{kind} turn {turn}");
    let _hold = if paths.is_empty() {
        None
    } else {
        if let Some(outer) = outer {
            outer(&paths, &label)?;
        }
        Some(sched.session_admit(&paths, &label)?)
    };
    // Inside the hold nobody writes through writ to these paths: check again
    // against the journal and the files as they are now.
    let inside = prepare(sched, &store, &session, turn, kind, mode)?;
    if let Some(extra) = inside.paths().into_iter().find(|p| !paths.contains(p)) {
        return Err(history_err(format!(
            "turn '{turn}' wrote {} while the {kind} was being prepared; nothing was touched, retry",
            extra.display()
        )));
    }
    execute(sched, &store, &session, turn, kind, mode, inside)
}

/// Plans and checks; `Err(RewindConflict)` when any file conflicts.
fn prepare(
    sched: &Scheduler,
    store: &Store,
    session: &str,
    turn: &str,
    kind: RestoreKind,
    mode: RewindMode,
) -> Result<Prepared> {
    let records = store.load()?.records;
    let (steps, resumes) = plan(&records, session, turn, kind)?;
    let mut roots: HashSet<PathBuf> = HashSet::new();
    let mut checked = Vec::with_capacity(steps.len());
    let mut conflicts = Vec::new();
    for step in steps {
        if step.skip.is_none() && !step.settled {
            // Nothing read back is trusted: the record's root must be a
            // grant root of this session and its path must resolve inside
            // it under today's policy, or the step is a conflict.
            if let Some(why) = untrusted(sched, &step) {
                conflicts.push(Conflict {
                    path: step.path.clone(),
                    expected: describe(&step.from),
                    found: "not checked".to_string(),
                    summary: why,
                    turn: None,
                });
                continue;
            }
            if !roots.contains(&step.root) {
                check_root(&step.root)?;
                roots.insert(step.root.clone());
            }
            check_policy(sched, &step)?;
        }
        let current = if step.skip.is_none() && !step.settled {
            fsio::current(&step.root, &step.path)?
        } else {
            // Only reported, never touched: an unreadable path is not an error.
            fsio::current(&step.root, &step.path).unwrap_or(Current::Other("unreadable"))
        };
        match judge(&records, store, session, turn, mode, &step, &current)? {
            Ok(verdict) => checked.push((step, current, verdict)),
            Err(conflict) => conflicts.push(conflict),
        }
    }
    if !conflicts.is_empty() {
        return Err(Error::RewindConflict { conflicts });
    }
    Ok(Prepared {
        steps: checked,
        resumes,
    })
}

/// The plan for a rewind or redo of `turn`, from the session's writes
/// tagged `turn` and the turn's last restore record (its *baseline*), and
/// the id of that record when the plan finishes it.
///
/// | kind   | baseline           | plan                                             |
/// |--------|--------------------|--------------------------------------------------|
/// | rewind | none               | every write of the turn                          |
/// | rewind | a rewind           | that rewind again (settled if it finished)       |
/// | rewind | a redo             | that redo reversed                               |
/// | redo   | none               | refused: nothing to redo                         |
/// | redo   | a rewind           | that rewind reversed                             |
/// | redo   | a redo             | that redo again (settled if it finished)         |
///
/// Writes of the turn after its baseline are laid over a rewind's plan (the
/// path's `from` becomes its new last post-state, its `to` stays the state
/// before the turn); a redo is refused when there are any. A *settled* step
/// belongs to a finished restore: it is reported, never touched or checked
/// for conflicts, because the restore that owned it is over.
fn plan(
    records: &[Record],
    session: &str,
    turn: &str,
    kind: RestoreKind,
) -> Result<(Vec<Step>, Resumes)> {
    let writes: Vec<(usize, &WriteRec)> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Record::Write(w) if w.session == session && w.turn.as_deref() == Some(turn) => {
                Some((i, w))
            }
            _ => None,
        })
        .collect();
    if writes.is_empty() {
        return Err(Error::UnknownTurn {
            turn: turn.to_string(),
        });
    }
    let mut first_write: HashMap<&Path, usize> = HashMap::new();
    for (i, w) in &writes {
        for c in &w.files {
            first_write.entry(&c.path).or_insert(*i);
        }
    }
    let baseline = records.iter().enumerate().rev().find_map(|(i, r)| match r {
        Record::Restore(x) if x.session == session && x.turn == turn => Some((i, x)),
        _ => None,
    });
    let done = |id: &str| {
        records
            .iter()
            .any(|r| matches!(r, Record::Done(d) if d.id == id))
    };
    let since = |i: usize| writes.iter().filter(move |(w, _)| *w > i).copied();
    let from_record = |i: usize, r: &RestoreRec, reverse: bool, settled: bool| -> Vec<Step> {
        r.files
            .iter()
            .map(|f| {
                let (from, to) = if reverse {
                    (f.to.clone(), f.from.clone())
                } else {
                    (f.from.clone(), f.to.clone())
                };
                Step {
                    path: f.path.clone(),
                    root: f.root.clone(),
                    from,
                    to,
                    since: first_write.get(f.path.as_path()).copied().unwrap_or(i),
                    skip: f.skipped.clone(),
                    settled,
                }
            })
            .collect()
    };
    let Some((at, base)) = baseline else {
        return match kind {
            RestoreKind::Rewind => Ok((overlay(Vec::new(), writes.iter().copied()), None)),
            RestoreKind::Redo => Err(history_err(format!(
                "turn '{turn}' has not been rewound, so there is nothing to redo"
            ))),
        };
    };
    let finished = done(&base.id);
    if kind == RestoreKind::Redo && since(at).next().is_some() {
        return Err(history_err(format!(
            "turn '{turn}' wrote files after its last {}, so that cannot be redone; rewind the \
             turn again instead",
            base.kind
        )));
    }
    let (steps, resumes) = if base.kind == kind {
        (
            from_record(at, base, false, finished),
            Some((base.id.clone(), finished)),
        )
    } else {
        (from_record(at, base, true, false), None)
    };
    Ok((overlay(steps, since(at)), resumes))
}

/// Lays the turn's `writes` over `steps`: a path already planned keeps its
/// target and takes the new last post-state as `from`; a new path is
/// planned from its state before its first write here to its last.
fn overlay<'a>(
    mut steps: Vec<Step>,
    writes: impl Iterator<Item = (usize, &'a WriteRec)>,
) -> Vec<Step> {
    let mut index: HashMap<PathBuf, usize> = steps
        .iter()
        .enumerate()
        .map(|(at, s)| (s.path.clone(), at))
        .collect();
    for (i, w) in writes {
        for c in &w.files {
            let at = match index.get(&c.path) {
                Some(&at) => {
                    let step = &mut steps[at];
                    step.from = c.after.clone();
                    step.settled = false;
                    at
                }
                None => {
                    let skip = match &c.before {
                        Some(b) if !b.blob => Some(
                            "it was written unprotected (larger than the snapshot limit), so no \
                             snapshot exists to restore"
                                .to_string(),
                        ),
                        _ => None,
                    };
                    index.insert(c.path.clone(), steps.len());
                    steps.push(Step {
                        path: c.path.clone(),
                        root: w.root.clone(),
                        from: c.after.clone(),
                        to: c.before.clone(),
                        since: i,
                        skip,
                        settled: false,
                    });
                    steps.len() - 1
                }
            };
            if let Some(reason) = &c.unrestorable {
                steps[at].skip.get_or_insert_with(|| reason.clone());
            }
        }
    }
    steps
}

/// Why a journal record cannot be restored where it points, if it cannot:
/// its root is not a grant root of this session, or its path does not
/// resolve inside that root today.
fn untrusted(sched: &Scheduler, step: &Step) -> Option<String> {
    if !sched.is_grant_root(&step.root) {
        return Some(format!(
            "the journal names the root {}, which is not a grant root of this session; \
             a record pointing outside the workspace is never written",
            step.root.display()
        ));
    }
    let resolver = Resolver::new(
        step.root.clone(),
        Vec::new(),
        sched.case_mode(&step.root),
        false,
    );
    match resolver.resolve(&Target::file(&step.path)) {
        Ok(_) => None,
        Err(Error::OutsideGrant { .. }) => Some(format!(
            "it resolves outside the grant root {} today; a record pointing outside the \
             workspace is never written",
            step.root.display()
        )),
        Err(_) => None, // reported by the policy check that follows
    }
}

/// The grant root a write was recorded under must still be itself: a root
/// that moved or became a symlink is not followed.
fn check_root(root: &Path) -> Result<()> {
    let canonical = resolve::canonical_root(root)?;
    if canonical != root {
        return Err(Error::Policy {
            path: root.to_path_buf(),
            reason: format!(
                "the workspace now resolves to {}; history does not follow a moved root",
                canonical.display()
            ),
        });
    }
    Ok(())
}

/// Today's path policy, again: the path must still resolve inside its root
/// (a folder or the file itself that became a symlink out of it is
/// `OutsideGrant`), and a sensitive name is refused (`Policy`) — an
/// allowance a file handle had when the turn wrote it does not carry over.
fn check_policy(sched: &Scheduler, step: &Step) -> Result<()> {
    let config = sched.config();
    let resolver = Resolver::new(
        step.root.clone(),
        Vec::new(),
        sched.case_mode(&step.root),
        false,
    );
    let (key, area) = resolver.resolve(&Target::file(&step.path))?;
    policy::check(
        &config.sensitive,
        &[],
        &step.path,
        &key,
        area,
        policy::Access::Write,
    )
}

fn is(current: &Current, state: &Option<StateRec>) -> bool {
    match (current, state) {
        (Current::Absent, None) => true,
        (Current::File { sha256, .. }, Some(s)) => *sha256 == s.sha256,
        _ => false,
    }
}

fn describe(state: &Option<StateRec>) -> String {
    match state {
        None => "absent".to_string(),
        Some(s) => s.sha256.clone(),
    }
}

fn describe_current(current: &Current) -> String {
    match current {
        Current::Absent => "absent".to_string(),
        Current::File { sha256, .. } => sha256.clone(),
        Current::Other(what) => (*what).to_string(),
    }
}

/// How a turn is named in messages: plain in this session, with its session
/// otherwise.
fn turn_label(session: &str, w_session: &str, turn: Option<&str>, actor: Option<&str>) -> String {
    let name = match (turn, actor) {
        (Some(t), _) => t.to_string(),
        (None, Some(a)) => format!("(no turn, by '{a}')"),
        (None, None) => "(no turn)".to_string(),
    };
    if w_session == session {
        name
    } else {
        format!("{name} of session {w_session}")
    }
}

/// Is the write at journal index `at`, by `turn` of `session`, in effect?
/// Not when a rewind of its turn came after it and no redo after that.
/// Writes outside any turn always are.
fn in_effect(records: &[Record], at: usize, session: &str, turn: Option<&str>) -> bool {
    let Some(turn) = turn else { return true };
    let last = records.iter().enumerate().rev().find_map(|(i, r)| match r {
        Record::Restore(x) if x.session == session && x.turn == turn => Some((i, x.kind)),
        _ => None,
    });
    match last {
        Some((i, RestoreKind::Rewind)) => i < at,
        _ => true,
    }
}

fn is_this(session: &str, turn: &str, w_session: &str, w_turn: Option<&str>) -> bool {
    w_session == session && w_turn == Some(turn)
}

/// The latest write still in effect, by another turn, to `step.path` after
/// this turn first wrote it.
fn interference(records: &[Record], session: &str, turn: &str, step: &Step) -> Option<String> {
    records
        .iter()
        .enumerate()
        .skip(step.since + 1)
        .rev()
        .find_map(|(i, r)| match r {
            Record::Write(w)
                if !is_this(session, turn, &w.session, w.turn.as_deref())
                    && w.files.iter().any(|c| c.path == step.path)
                    && in_effect(records, i, &w.session, w.turn.as_deref()) =>
            {
                Some(turn_label(
                    session,
                    &w.session,
                    w.turn.as_deref(),
                    Some(&w.actor),
                ))
            }
            _ => None,
        })
}

/// The other turn whose write (or restore) through writ produced `sha` at
/// `step.path` after this turn first wrote it.
fn producer(
    records: &[Record],
    session: &str,
    turn: &str,
    step: &Step,
    current: &Current,
) -> Option<String> {
    let made = |state: &Option<StateRec>| is(current, state);
    records
        .iter()
        .skip(step.since + 1)
        .rev()
        .find_map(|r| match r {
            Record::Write(w) if !is_this(session, turn, &w.session, w.turn.as_deref()) => w
                .files
                .iter()
                .any(|c| c.path == step.path && made(&c.after))
                .then(|| turn_label(session, &w.session, w.turn.as_deref(), Some(&w.actor))),
            Record::Restore(x) if !(x.session == session && x.turn == turn) => x
                .files
                .iter()
                .any(|f| f.path == step.path && f.skipped.is_none() && made(&f.to))
                .then(|| {
                    format!(
                        "{} ({})",
                        turn_label(session, &x.session, Some(&x.turn), None),
                        x.kind
                    )
                }),
            _ => None,
        })
}

/// What happened to the file since, in a few words.
fn difference(store: &Store, expected: &Option<StateRec>, current: &Current) -> String {
    match (expected, current) {
        (_, Current::Other(what)) => format!("it is now {what}"),
        (None, Current::File { bytes, .. }) => format!(
            "a file ({} bytes) is there, where the turn left none",
            bytes.len()
        ),
        (Some(_), Current::Absent) => "the file was deleted after the turn wrote it".to_string(),
        (Some(s), Current::File { bytes, .. }) => match store.read_blob(&s.sha256) {
            Ok(old) if s.blob => merge::summary(&old, bytes),
            _ => format!(
                "the content differs ({} bytes expected, {} found)",
                s.size,
                bytes.len()
            ),
        },
        (None, Current::Absent) => "no difference".to_string(),
    }
}

/// Decides one step (see the module docs for the rules): a verdict, or the
/// conflict that stops the whole restore. `Err` only for a broken store.
fn judge(
    records: &[Record],
    store: &Store,
    session: &str,
    turn: &str,
    mode: RewindMode,
    step: &Step,
    current: &Current,
) -> Result<std::result::Result<Verdict, Conflict>> {
    if let Some(reason) = &step.skip {
        return Ok(Ok(Verdict::Skip(reason.clone())));
    }
    if is(current, &step.to) {
        return Ok(Ok(Verdict::Already));
    }
    if step.settled {
        return Ok(Ok(Verdict::Skip(
            "an earlier run already restored it, and it has changed since".to_string(),
        )));
    }
    let conflict = |summary: String, by: Option<String>| Conflict {
        path: step.path.clone(),
        expected: describe(&step.from),
        found: describe_current(current),
        summary,
        turn: by,
    };
    if is(current, &step.from) {
        if let Some(other) = interference(records, session, turn, step) {
            return Ok(Err(conflict(
                format!(
                    "turn '{other}' wrote this file through writ after this turn did, and its \
                     work would be lost; rewind '{other}' first"
                ),
                Some(other),
            )));
        }
        target_available(store, step)?;
        return Ok(Ok(Verdict::Restore));
    }
    let by = producer(records, session, turn, step, current);
    let mut summary = difference(store, &step.from, current);
    summary.push_str(&match &by {
        Some(t) => format!("; changed through writ by turn '{t}'"),
        None => "; changed outside writ (a person, a shell or a formatter)".to_string(),
    });
    if mode == RewindMode::Merge {
        match try_merge(store, step, current) {
            Ok(bytes) => {
                target_available(store, step)?;
                return Ok(Ok(Verdict::Merge(bytes)));
            }
            Err(why) => {
                summary.push_str("; merge: ");
                summary.push_str(&why);
            }
        }
    }
    Ok(Err(conflict(summary, by)))
}

/// The bytes a restore puts back must exist before anything is touched.
fn target_available(store: &Store, step: &Step) -> Result<()> {
    match &step.to {
        Some(s) if !store.has_blob(&s.sha256) => Err(history_err(format!(
            "the snapshot of {} ({}) is missing from the history store, so it cannot be \
             restored; nothing was touched",
            step.path.display(),
            super::store::short(&s.sha256)
        ))),
        _ => Ok(()),
    }
}

/// Reverses the agent's change (`to` → `from`) out of the current content.
fn try_merge(
    store: &Store,
    step: &Step,
    current: &Current,
) -> std::result::Result<Vec<u8>, String> {
    let (Some(from), Some(to), Current::File { bytes, .. }) = (&step.from, &step.to, current)
    else {
        return Err("only a file that exists before, after and now can be merged".to_string());
    };
    let (Ok(after), Ok(before)) = (store.read_blob(&from.sha256), store.read_blob(&to.sha256))
    else {
        return Err("the agent's versions of the file are not both snapshotted".to_string());
    };
    match merge::reverse(&before, &after, bytes) {
        Reverse::Clean(merged) => Ok(merged),
        Reverse::Overlap(n) => Err(format!(
            "the agent's change overlaps or touches later edits in {n} place(s)"
        )),
        Reverse::NotText => Err("the file is not UTF-8 text".to_string()),
    }
}

fn state_of(current: &Current) -> Option<StateRec> {
    match current {
        Current::File {
            sha256,
            mode,
            bytes,
        } => Some(StateRec {
            sha256: sha256.clone(),
            size: bytes.len() as u64,
            mode: *mode,
            blob: true,
        }),
        _ => None,
    }
}

fn public(current: &Current) -> FileState {
    match current {
        Current::File {
            sha256,
            mode,
            bytes,
        } => FileState::File {
            sha256: sha256.clone(),
            size: bytes.len() as u64,
            mode: *mode,
        },
        Current::Absent => FileState::Absent,
        Current::Other(what) => FileState::Other {
            what: (*what).to_string(),
        },
    }
}

/// Snapshots, journals the intent, restores in reverse order, journals done.
fn execute(
    sched: &Scheduler,
    store: &Store,
    session: &str,
    turn: &str,
    kind: RestoreKind,
    mode: RewindMode,
    prepared: Prepared,
) -> Result<RewindReport> {
    let handle = Handle::of(sched);
    let durable = handle.durable();
    // What each touched step writes, loaded (and hash-checked) before
    // anything changes; and the current content, snapshotted for a redo.
    let mut writes: Vec<(usize, Payload)> = Vec::new();
    let mut files = Vec::with_capacity(prepared.steps.len());
    for (at, (step, current, verdict)) in prepared.steps.iter().enumerate() {
        let mut from = step.from.clone();
        let mut to = step.to.clone();
        match verdict {
            Verdict::Restore | Verdict::Merge(_) => {
                if let Current::File { sha256, bytes, .. } = current {
                    store.put_blob(sha256, bytes)?;
                }
                from = state_of(current);
                let target = match (verdict, &step.to) {
                    (Verdict::Merge(bytes), Some(t)) => {
                        let sha = sha256_hex(bytes);
                        store.put_blob(&sha, bytes)?;
                        to = Some(StateRec {
                            sha256: sha,
                            size: bytes.len() as u64,
                            mode: t.mode,
                            blob: true,
                        });
                        Some((bytes.clone(), t.mode))
                    }
                    (_, Some(t)) => Some((store.read_blob(&t.sha256)?, t.mode)),
                    (_, None) => None,
                };
                writes.push((at, target));
            }
            Verdict::Already => {
                if let Some(f) = &mut from {
                    f.blob = store.has_blob(&f.sha256);
                }
            }
            Verdict::Skip(_) => {}
        }
        files.push(RestoreFile {
            path: step.path.clone(),
            root: step.root.clone(),
            from,
            to,
            skipped: match verdict {
                Verdict::Skip(reason) => Some(reason.clone()),
                _ => None,
            },
        });
    }
    let intent = RestoreRec {
        id: handle.restore_id(),
        session: session.to_string(),
        turn: turn.to_string(),
        kind,
        mode,
        time_ms: record::now_ms(),
        files: files.clone(),
    };
    let id = if writes.is_empty() {
        match &prepared.resumes {
            // Nothing left to do for an unfinished record: it is finished.
            Some((id, false)) => Some(id.clone()),
            _ => None,
        }
    } else {
        store.append(&Record::Restore(intent.clone()))?;
        Some(intent.id.clone())
    };
    let failpoint = handle.failpoint();
    let writer: std::sync::Arc<str> = format!("{kind} of {turn}").into();
    let total = writes.len();
    for (done, (at, target)) in writes.iter().rev().enumerate() {
        if done == failpoint {
            return Err(history_err(format!(
                "failpoint: stopped after {done} of {total} restore(s)"
            )));
        }
        let (step, checked, _) = &prepared.steps[*at];
        // The hold keeps writ's writers out; a person may still have edited
        // the file since the check. Never overwrite that.
        let now = fsio::current(&step.root, &step.path)?;
        if describe_current(&now) != describe_current(checked) {
            return Err(history_err(format!(
                "{} changed while the {kind} ran, so it was left alone; {done} of {total} \
                 file(s) were restored — run the {kind} again to finish, or redo/rewind to undo it",
                step.path.display()
            )));
        }
        match target {
            None => fsio::remove(&step.root, &step.path, durable)?,
            Some((bytes, mode)) => fsio::put(&step.root, &step.path, bytes, *mode, durable)?,
        }
        // The gate names the rewind as the writer, so an agent whose mark
        // predates it is told why its read is stale.
        let key = Resolver::new(
            step.root.clone(),
            Vec::new(),
            sched.case_mode(&step.root),
            false,
        )
        .key_for(step.path.clone(), false);
        let after = target.as_ref().map(|(bytes, _)| sha256_hex(bytes));
        Gate::of(sched).record_write(&key.norm, &writer, after.as_deref());
    }
    if let Some(id) = id {
        let done = Record::Done(DoneRec {
            id,
            time_ms: record::now_ms(),
        });
        if let Err(e) = store.append(&done) {
            // The files are restored; only the bookkeeping line is missing,
            // and a re-run finds everything restored and changes nothing.
            tracing::warn!(error = %e, "the rewind finished but its 'done' line was not journaled");
        }
    }
    let files = prepared
        .steps
        .iter()
        .zip(&files)
        .map(|((step, current, verdict), file)| {
            let (action, end) = match verdict {
                Verdict::Skip(reason) => (
                    Action::LeftAsIs {
                        reason: reason.clone(),
                    },
                    public(current),
                ),
                Verdict::Already => (Action::AlreadyRestored, StateRec::public(&step.to)),
                Verdict::Merge(_) => (Action::Merged, StateRec::public(&file.to)),
                Verdict::Restore => (
                    match (&step.from, &step.to) {
                        (_, None) => Action::Deleted,
                        (None, Some(_)) => Action::Recreated,
                        _ => Action::Restored,
                    },
                    StateRec::public(&step.to),
                ),
            };
            FileReport {
                path: step.path.clone(),
                action,
                end,
            }
        })
        .collect();
    Ok(RewindReport {
        session: session.to_string(),
        turn: turn.to_string(),
        kind,
        mode,
        files,
    })
}
