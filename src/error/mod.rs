//! The crate's one error type.
//!
//! Every `Display` is a full sentence addressed to whoever made the call,
//! often a model: it says what happened and what to do next.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kinds::{HoldKind, Mode};

mod wire;
pub use wire::{ERROR_KINDS, ErrorKind, ProtocolError};

/// A result whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in writ.
///
/// Every variant except [`Error::Busy`] is a struct variant; match them with
/// `{ .. }` so that added fields do not break callers.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// match lead.try_admit(["../outside.txt"]) {
///     Err(writ::Error::OutsideGrant { path, .. }) => assert!(path.ends_with("outside.txt")),
///     other => panic!("expected OutsideGrant, got {other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A path is held (or queued for) by someone else; nothing was reserved.
    #[error("{0}")]
    Busy(Busy),

    /// A waiting request gave up after its timeout; nothing was reserved.
    #[error(
        "gave up waiting for {} after {:.1?}; nothing was reserved. Retry later or choose other files.",
        display_paths(paths),
        waited
    )]
    Timeout {
        /// The requested keys.
        paths: Vec<PathBuf>,
        /// How long the request waited.
        waited: Duration,
    },

    /// Waiting would close a cycle in the wait-for graph; this request was refused.
    #[error(
        "refused to wait: it would deadlock with {} (the cycle is {}). Release a fence you hold, or ask for everything you need at once.",
        cycle.iter().skip(1).map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "),
        cycle.iter().chain(cycle.first()).map(|n| format!("'{n}'")).collect::<Vec<_>>().join(" -> ")
    )]
    Deadlock {
        /// The names of the actors in the cycle, starting with the requester.
        cycle: Vec<String>,
    },

    /// The path resolves outside the actor's grant root.
    #[error(
        "{} is outside the workspace {} (after resolving `..` and symlinks); choose a path inside it.",
        path.display(),
        root.display()
    )]
    OutsideGrant {
        /// The offending path (resolved as far as possible).
        path: PathBuf,
        /// The grant root it must lie in.
        root: PathBuf,
    },

    /// The path lies outside the fence the actor or its parent holds.
    #[error(
        "{} is outside the fence of '{actor}' ({}); write only inside it, or ask the lead to widen the fence.",
        path.display(),
        display_paths(fence)
    )]
    OutsideFence {
        /// The offending path.
        path: PathBuf,
        /// The actor whose fence was exceeded.
        actor: String,
        /// The fence it must lie in.
        fence: Vec<PathBuf>,
    },

    /// The path is malformed, or not of the kind the operation needs.
    #[error("invalid path {}: {reason}.", path.display())]
    InvalidPath {
        /// The path as given.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },

    /// A slot limit is reached.
    #[error(
        "no free slot: {limit} is {max} and all are in use; wait for an agent to finish (child_wait) or try later."
    )]
    NoSlot {
        /// Which limit.
        limit: SlotLimit,
        /// Its configured value.
        max: usize,
    },

    /// A read-only actor asked for a write.
    #[error(
        "'{actor}' is read-only and cannot write {}; ask an actor with write access.",
        path.display()
    )]
    ReadOnly {
        /// The read-only actor.
        actor: String,
        /// The path it tried to write.
        path: PathBuf,
    },

    /// A guard's owner is gone, so the guard no longer holds anything.
    #[error("{what} was already released because its actor '{actor}' was dropped.")]
    Released {
        /// What was released ("fence", "reservation").
        what: &'static str,
        /// The actor that owned it.
        actor: String,
    },

    /// The path policy refuses this access.
    #[error("{} is not allowed: {reason}.", path.display())]
    Policy {
        /// The refused path.
        path: PathBuf,
        /// Which rule refused it.
        reason: String,
    },

    /// A write to an existing file the actor has not read.
    #[error(
        "{} exists and you have not read it; read it first (for an append, reading its tail is enough), then retry.",
        path.display()
    )]
    NotRead {
        /// The file.
        path: PathBuf,
    },

    /// A write that replaces a whole file (a write, a delete, a move)
    /// after a read that showed only part of it (SPEC §6): nothing was done.
    #[error(
        "{} was shown to you only in part ({seen}), and this replaces all of it, so nothing was done; {rest} first, or change only what you saw with an edit or an append.",
        path.display()
    )]
    PartialView {
        /// The file.
        path: PathBuf,
        /// What the read showed ("lines 1-2000 of 5000").
        seen: String,
        /// How to see the rest ("read on from line 2001").
        rest: String,
    },

    /// A write to a file that changed since the actor's read.
    #[error(
        "{} changed since you read it{}; read it again and redo your edit on the current content (for an append, reading its tail is enough).",
        path.display(),
        match (writer, ago) {
            (Some(w), Some(ago)) => format!(" ('{w}' wrote it {:.1?} ago)", ago),
            (Some(w), None) => format!(" ('{w}' wrote it)"),
            _ => " (changed outside writ)".to_string(),
        }
    )]
    Stale {
        /// The file.
        path: PathBuf,
        /// The actor whose write through writ produced the current content, if known.
        writer: Option<String>,
        /// How long ago that write happened, if known.
        ago: Option<Duration>,
    },

    /// The file does not exist.
    #[error("{} does not exist.", path.display())]
    NotFound {
        /// The missing file.
        path: PathBuf,
    },

    /// `replace` found no occurrence of the text.
    #[error(
        "the text to replace was not found in {}; read the file again and copy the exact text.",
        path.display()
    )]
    NoMatch {
        /// The file.
        path: PathBuf,
    },

    /// `replace` found the text more than once.
    #[error(
        "the text to replace occurs {count} times in {}; include more surrounding lines so it matches exactly once.",
        path.display()
    )]
    AmbiguousMatch {
        /// The file.
        path: PathBuf,
        /// How many times it occurs.
        count: usize,
    },

    /// A rewind or redo would overwrite changes writ did not make.
    #[error(
        "rewind refused, nothing was touched: {} file(s) changed after the turn ({}). Resolve them or rewind in merge mode.",
        conflicts.len(),
        conflicts.iter().map(|c| c.path.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    RewindConflict {
        /// One entry per conflicting path.
        conflicts: Vec<Conflict>,
    },

    /// No history is recorded for this turn.
    #[error("no history is recorded for turn '{turn}'.")]
    UnknownTurn {
        /// The turn asked for.
        turn: String,
    },

    /// History is not configured or cannot be used.
    #[error("history is unavailable: {reason}.")]
    History {
        /// What is wrong.
        reason: String,
    },

    /// The approval hook refused to widen a fence.
    #[error(
        "widening the fence of '{actor}' to {} was not approved; stay inside the current fence.",
        path.display()
    )]
    NotApproved {
        /// The actor whose fence was to grow.
        actor: String,
        /// The path that was refused.
        path: PathBuf,
    },

    /// Two unordered tasks of a plan write overlapping paths.
    #[error(
        "tasks '{first}' and '{second}' both write {} and neither depends on the other; add a dependency or split the files.",
        path.display()
    )]
    PlanConflict {
        /// One task.
        first: String,
        /// The other task.
        second: String,
        /// A path both write.
        path: PathBuf,
    },

    /// A plan's dependencies form a cycle.
    #[error("the plan's dependencies form a cycle through {}.", tasks.join(" -> "))]
    PlanCycle {
        /// Tasks on the cycle.
        tasks: Vec<String>,
    },

    /// A plan is malformed.
    #[error("invalid plan: {reason}.")]
    InvalidPlan {
        /// What is wrong.
        reason: String,
    },

    /// A file is larger than a whole read may be (`Config::max_read_bytes`);
    /// nothing was read into memory.
    #[error(
        "{} is {size} bytes, more than the {limit} bytes a whole read may return; read the part you need with read_range (a range of lines), or ask for a larger max_read_bytes.",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes when the read stopped (at least this much).
        size: u64,
        /// `Config::max_read_bytes`.
        limit: u64,
    },

    /// A delegated command could not start.
    #[error("could not start '{program}': {reason}; nothing was run and no fence is held.")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        reason: String,
    },

    /// A request to `writ serve` broke the protocol (malformed JSON, an
    /// unknown method, wrong parameters, a body too large, no valid token).
    #[error("{detail}")]
    Protocol {
        /// Which rule was broken; each is its own kind on the wire.
        kind: ProtocolError,
        /// What exactly was wrong.
        detail: String,
    },

    /// The caller's token may not act for this actor, hold or lease.
    #[error("forbidden: {reason}; nothing was changed.")]
    Forbidden {
        /// What the token tried to do.
        reason: String,
    },

    /// The server does not know this lease.
    #[error(
        "lease '{lease}' is unknown: it expired, was revoked, or the server restarted; create your actors again."
    )]
    UnknownLease {
        /// The lease as named by the caller.
        lease: String,
    },

    /// The server does not know this actor.
    #[error("actor '{actor}' is unknown: it was dropped or its lease ended.")]
    UnknownActor {
        /// The actor as named by the caller.
        actor: String,
    },

    /// The server does not know this hold.
    #[error("hold '{hold}' is unknown: it was released or its lease ended.")]
    UnknownHold {
        /// The hold as named by the caller.
        hold: String,
    },

    /// An admission needs more operations in one etcd transaction than the
    /// store allows (`--max-txn-ops`); it was refused whole, never split.
    #[error(
        "the request needs {ops} operations in one etcd transaction, more than the limit of {limit}; nothing was reserved. Ask for fewer paths at once (a tree covers everything beneath it)."
    )]
    TxnTooLarge {
        /// The operations the request needs in one transaction.
        ops: usize,
        /// The store's limit per transaction.
        limit: usize,
    },

    /// A request a server whose session's table is in etcd (`writ serve
    /// --etcd`) cannot serve yet: refused whole, never approximated.
    #[error(
        "{what} is not supported yet when the session's table is in etcd (writ serve --etcd); nothing was changed."
    )]
    Unsupported {
        /// What was asked for.
        what: String,
    },

    /// The server cannot be reached or is shutting down.
    #[error("the writ server is unavailable: {reason}.")]
    Unavailable {
        /// Why.
        reason: String,
    },

    /// An operating-system error on a path.
    #[error("could not {op} {}: {source}.", path.display())]
    Io {
        /// What writ was doing.
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::InvalidPath {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which slot limit refused a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotLimit {
    /// `Config::max_actors`: live child actors.
    MaxActors,
    /// `Config::max_writers`: live child actors that may write.
    MaxWriters,
}

impl fmt::Display for SlotLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SlotLimit::MaxActors => "max_actors",
            SlotLimit::MaxWriters => "max_writers",
        })
    }
}

/// Why a request was refused: who holds (or waits for) the contested path.
///
/// Its `Display` is meant to be handed to a model as the tool call's result.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let parser = lead.child("parser", writ::Grant::workspace(dir.path()))?;
/// let _held = parser.request(["lex.rs"]).label("write_file").try_admit()?;
/// let Err(writ::Error::Busy(busy)) = lead.try_admit(["lex.rs"]) else { panic!() };
/// assert_eq!(busy.holder, "parser");
/// assert_eq!(busy.kind, writ::HoldKind::Call);
/// assert!(busy.to_string().starts_with("lex.rs is being written by 'parser'"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Busy {
    /// The requester's key (absolute, canonical) that overlaps the blocker.
    pub path: PathBuf,
    /// The name of the actor holding (or queued for) the path.
    pub holder: String,
    /// The blocker's kind (for a queued request: the kind it asked for).
    pub kind: HoldKind,
    /// The blocker's mode on the contested path.
    pub mode: Mode,
    /// The blocker's label, if it has one.
    pub label: Option<String>,
    /// How long the blocker has held (or waited).
    pub age: Duration,
    /// True when the blocker is an earlier waiting request, not a hold.
    pub queued: bool,
    /// `path` relative to the requester's root, for messages.
    pub relative: PathBuf,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match (self.queued, self.kind, self.mode) {
            (true, HoldKind::Call, Mode::Exclusive) => "is queued to be written by",
            (true, HoldKind::Call, Mode::Shared) => "is queued to be read by",
            (true, HoldKind::Fence, _) => "is queued to be fenced by",
            (false, HoldKind::Call, Mode::Exclusive) => "is being written by",
            (false, HoldKind::Call, Mode::Shared) => "is being read by",
            (false, HoldKind::Fence, Mode::Exclusive) => "is fenced for writing by",
            (false, HoldKind::Fence, Mode::Shared) => "is fenced against writes by",
            (_, HoldKind::Claim, _) => "is claimed by",
        };
        write!(f, "{} {what} '{}'", self.relative.display(), self.holder)?;
        let verb = if self.queued { "waiting" } else { "for" };
        match &self.label {
            Some(label) => write!(f, " ({label}, {verb} {:.1?})", self.age)?,
            None => write!(f, " ({verb} {:.1?})", self.age)?,
        }
        f.write_str("; retry later or choose another file.")
    }
}

impl From<Busy> for Error {
    fn from(busy: Busy) -> Self {
        Error::Busy(busy)
    }
}

/// One file a rewind would overwrite without having written it: an entry of
/// `Error::RewindConflict`.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let (ws, data) = (dir.path().join("ws"), dir.path().join("h"));
/// # std::fs::create_dir(&ws).unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data));
/// let agent = sched.actor("agent", writ::Grant::workspace(&ws))?;
/// agent.set_turn("t");
/// agent.files().write("a.txt", "agent\n")?;
/// std::fs::write(ws.join("a.txt"), "").unwrap(); // someone empties it
/// let Err(writ::Error::RewindConflict { conflicts }) = sched.rewind_turn("t") else {
///     panic!("an emptied file is not the agent's");
/// };
/// // An empty file is not an absent one: it has the hash of zero bytes.
/// assert!(conflicts[0].found.starts_with("e3b0c442"));
/// assert_eq!(conflicts[0].turn, None); // changed outside writ
/// println!("{}", conflicts[0]); // …/a.txt: expected 3f0e…, found e3b0…: 0 line(s) added, 1 removed; …
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Conflict {
    /// The file.
    pub path: PathBuf,
    /// What writ expected to find (a sha256, or "absent").
    pub expected: String,
    /// What is there now (a sha256, "absent", or what kind of thing it is).
    pub found: String,
    /// A short diff summary and who changed it.
    pub summary: String,
    /// The other turn whose write through writ produced (or also changed)
    /// the current content, if there is one; `None` when the change came
    /// from outside writ.
    pub turn: Option<String>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, found {} — {}",
            self.path.display(),
            short_hash(&self.expected),
            short_hash(&self.found),
            self.summary
        )
    }
}

/// The first twelve hex digits of a sha256, as messages show it.
fn short_hash(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
