//! The debug dump: everything live, copied out in one lock acquisition.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};

use crate::core::deadlock::{WaitEdge, wait_for_edges};
use crate::core::key::Mode;
use crate::core::queue::{Need, WaitCause, WaiterId};
use crate::core::state::{Counters, State};
use crate::core::table::ScopeKind;
use crate::core::table::{ActorId, HoldId, HoldKind};
use crate::sched::config::Config;

fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn opt_secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// A snapshot of a scheduler: `Serialize` (JSON) and `Display` (a table).
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let _r = lead.request(["a.rs"]).label("edit").try_admit()?;
/// let dump = sched.dump();
/// assert_eq!(dump.holds[0].actor, "lead");
/// let json = serde_json::to_value(&dump).unwrap();
/// assert_eq!(json["holds"][0]["label"], "edit");
/// assert!(dump.to_string().contains("a.rs"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Dump {
    /// The session id.
    pub session: String,
    /// Live actors, in creation order.
    pub actors: Vec<ActorEntry>,
    /// Live holds, in grant order.
    pub holds: Vec<HoldEntry>,
    /// Waiting requests, in queue order.
    pub waiters: Vec<WaiterEntry>,
    /// The wait-for graph.
    pub edges: Vec<WaitEdge>,
    /// Slot counts and limits.
    pub slots: Slots,
    /// Admission counters.
    pub counters: Counters,
}

/// An actor in the dump.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ActorEntry {
    /// Its id.
    pub id: ActorId,
    /// Its name.
    pub name: String,
    /// Its parent's id (the parent may already be gone).
    pub parent: Option<ActorId>,
    /// Its canonical grant root.
    pub root: PathBuf,
    /// How it may act.
    pub scope: ScopeKind,
    /// How long it has lived.
    #[serde(serialize_with = "secs")]
    pub age: Duration,
}

/// A path of a hold or waiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PathEntry {
    /// The absolute resolved key, spelled as the caller spelled it.
    pub path: PathBuf,
    /// True when it covers everything beneath it.
    pub tree: bool,
    /// Its mode.
    pub mode: Mode,
}

/// A hold in the dump.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct HoldEntry {
    /// Its id.
    pub id: HoldId,
    /// The owning actor's name.
    pub actor: String,
    /// The owning actor's id.
    pub actor_id: ActorId,
    /// Fence, call or claim.
    pub kind: HoldKind,
    /// Its paths.
    pub paths: Vec<PathEntry>,
    /// Its label.
    pub label: Option<String>,
    /// How long it has been held.
    #[serde(serialize_with = "secs")]
    pub age: Duration,
    /// For a claim (SPEC §6), how long until its TTL ends it (`null` for
    /// other holds).
    #[serde(serialize_with = "opt_secs")]
    pub ends_in: Option<Duration>,
    /// Its fencing token: the etcd revision of its grant, for a session
    /// in etcd (SPEC §16); `None` in process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// What blocks a waiter.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct BlockedBy {
    /// Conflicting live holds.
    pub holds: Vec<HoldId>,
    /// Conflicting requests queued ahead.
    pub waiters: Vec<WaiterId>,
}

/// A waiting request in the dump.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct WaiterEntry {
    /// Its id.
    pub id: WaiterId,
    /// The requesting actor's name (for a `child_wait`, the parent).
    pub actor: String,
    /// The requesting actor's id.
    pub actor_id: ActorId,
    /// The kind of hold it asks for.
    pub kind: HoldKind,
    /// For a `child_wait`, the child's name.
    pub child: Option<String>,
    /// Its paths.
    pub paths: Vec<PathEntry>,
    /// Its priority.
    pub priority: i32,
    /// How often its actor's writes to these paths were refused `Stale`
    /// since one landed: its place among writers of one priority waiting
    /// for a claimed file (SPEC §6).
    pub refusals: u32,
    /// Why it waits (`None` only for a grant not yet picked up).
    pub cause: Option<WaitCause>,
    /// Its label.
    pub label: Option<String>,
    /// How long it has waited.
    #[serde(serialize_with = "secs")]
    pub waited: Duration,
    /// What blocks it.
    pub blocked_by: BlockedBy,
}

/// Slot counts and limits.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Slots {
    /// Live child actors.
    pub actors: usize,
    /// `Config::max_actors`.
    pub max_actors: Option<usize>,
    /// Live child actors that may write.
    pub writers: usize,
    /// `Config::max_writers`.
    pub max_writers: Option<usize>,
}

fn path_entries(keys: &[(crate::core::key::Key, Mode)]) -> Vec<PathEntry> {
    keys.iter()
        .map(|(k, m)| PathEntry {
            path: k.path.clone(),
            tree: k.tree,
            mode: *m,
        })
        .collect()
}

impl Dump {
    pub(crate) fn capture(state: &State, config: &Config, now: Instant) -> Dump {
        let actors = state
            .actors
            .values()
            .map(|(record, since)| ActorEntry {
                id: record.id,
                name: record.name.to_string(),
                parent: record.parent,
                root: record.root.clone(),
                scope: record.scope,
                age: now.saturating_duration_since(*since),
            })
            .collect();
        let holds = state
            .table
            .iter()
            .map(|(id, hold)| HoldEntry {
                id,
                actor: hold.actor_name.to_string(),
                actor_id: hold.claim.owner,
                kind: hold.claim.kind,
                paths: path_entries(&hold.claim.keys),
                label: hold.label.as_deref().map(str::to_string),
                age: now.saturating_duration_since(hold.since),
                ends_in: state
                    .claims
                    .get(&id)
                    .map(|until| until.saturating_duration_since(now)),
                revision: None,
            })
            .collect();
        let waiters = state
            .queue
            .entries()
            .filter(|w| w.is_waiting())
            .map(|w| {
                let (holds, waiters, cause) = state.blockers_of(w.id);
                WaiterEntry {
                    id: w.id,
                    actor: w.requester_name.to_string(),
                    actor_id: w.requester,
                    kind: w.claim.kind,
                    child: match &w.need {
                        Need::Child(child) => Some(child.name.to_string()),
                        Need::Hold => None,
                    },
                    paths: path_entries(&w.claim.keys),
                    priority: w.priority,
                    refusals: w.refusals,
                    cause,
                    label: w.label.as_deref().map(str::to_string),
                    waited: now.saturating_duration_since(w.since),
                    blocked_by: BlockedBy { holds, waiters },
                }
            })
            .collect();
        Dump {
            session: config.session.clone(),
            actors,
            holds,
            waiters,
            edges: wait_for_edges(state),
            slots: Slots {
                actors: state.live_children,
                max_actors: state.max_actors,
                writers: state.live_writers,
                max_writers: state.max_writers,
            },
            counters: state.counters,
        }
    }

    /// True when nothing is held and nothing waits.
    pub fn is_idle(&self) -> bool {
        self.holds.is_empty() && self.waiters.is_empty()
    }
}

fn paths_text(paths: &[PathEntry]) -> String {
    paths
        .iter()
        .map(|p| {
            let mut s = p.path.display().to_string();
            if p.tree {
                s.push('/');
            }
            if p.mode == Mode::Shared {
                s.push_str(" (shared)");
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes an aligned table, indented under its heading.
fn table(f: &mut fmt::Formatter<'_>, header: &[&str], rows: &[Vec<String>]) -> fmt::Result {
    for line in crate::text::table(header, rows).lines() {
        writeln!(f, "  {line}")?;
    }
    Ok(())
}

impl fmt::Display for Dump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every name and path below is escaped (`text::table`): agents
        // choose them, and this table goes to terminals.
        writeln!(f, "writ session {}", crate::text::escape(&self.session))?;
        // Actors as a tree: children under their parent, orphans at the top.
        let live: std::collections::HashSet<ActorId> = self.actors.iter().map(|a| a.id).collect();
        let mut rows = Vec::new();
        fn walk(
            dump: &Dump,
            parent: Option<ActorId>,
            live: &std::collections::HashSet<ActorId>,
            depth: usize,
            rows: &mut Vec<Vec<String>>,
        ) {
            for actor in dump.actors.iter().filter(|a| {
                a.parent == parent || (depth == 0 && a.parent.is_some_and(|p| !live.contains(&p)))
            }) {
                rows.push(vec![
                    format!("{}{}", "  ".repeat(depth), actor.name),
                    actor.id.0.to_string(),
                    format!("{:?}", actor.scope).to_lowercase(),
                    actor.root.display().to_string(),
                ]);
                walk(dump, Some(actor.id), live, depth + 1, rows);
            }
        }
        walk(self, None, &live, 0, &mut rows);
        writeln!(f, "actors ({}):", self.actors.len())?;
        table(f, &["name", "id", "scope", "root"], &rows)?;
        // Fencing tokens get a column only where holds have them (etcd).
        let tokens = self.holds.iter().any(|h| h.revision.is_some());
        let rows: Vec<Vec<String>> = self
            .holds
            .iter()
            .map(|h| {
                let mut row = vec![
                    h.id.0.to_string(),
                    h.actor.clone(),
                    format!("{:?}", h.kind).to_lowercase(),
                    format!("{:.1?}", h.age),
                    h.label.clone().unwrap_or_default(),
                    paths_text(&h.paths),
                ];
                if tokens {
                    row.insert(4, h.revision.map(|r| r.to_string()).unwrap_or_default());
                }
                row
            })
            .collect();
        writeln!(f, "holds ({}):", self.holds.len())?;
        let mut header = vec!["id", "actor", "kind", "age", "label", "paths"];
        if tokens {
            header.insert(4, "token");
        }
        table(f, &header, &rows)?;
        let rows: Vec<Vec<String>> = self
            .waiters
            .iter()
            .map(|w| {
                let mut blocked: Vec<String> = w
                    .blocked_by
                    .holds
                    .iter()
                    .map(|h| format!("hold {}", h.0))
                    .collect();
                blocked.extend(
                    w.blocked_by
                        .waiters
                        .iter()
                        .map(|q| format!("waiter {}", q.0)),
                );
                vec![
                    w.id.0.to_string(),
                    match &w.child {
                        Some(child) => format!("{} (child {child})", w.actor),
                        None => w.actor.clone(),
                    },
                    w.priority.to_string(),
                    format!("{:.1?}", w.waited),
                    w.cause.as_ref().map(|c| c.to_string()).unwrap_or_default(),
                    blocked.join(", "),
                    paths_text(&w.paths),
                ]
            })
            .collect();
        writeln!(f, "waiters ({}):", self.waiters.len())?;
        table(
            f,
            &[
                "id",
                "actor",
                "prio",
                "waited",
                "cause",
                "blocked by",
                "paths",
            ],
            &rows,
        )?;
        if !self.edges.is_empty() {
            let rows: Vec<Vec<String>> = self
                .edges
                .iter()
                .map(|e| {
                    vec![
                        e.from.0.to_string(),
                        e.to.0.to_string(),
                        if e.hard { "hard" } else { "soft" }.into(),
                    ]
                })
                .collect();
            writeln!(f, "wait-for edges ({}):", self.edges.len())?;
            table(f, &["from", "to", "edge"], &rows)?;
        }
        let limit = |n: Option<usize>| n.map_or("-".to_string(), |n| n.to_string());
        writeln!(
            f,
            "slots: actors {}/{}, writers {}/{}",
            self.slots.actors,
            limit(self.slots.max_actors),
            self.slots.writers,
            limit(self.slots.max_writers)
        )?;
        write!(f, "counters: {}", self.counters)
    }
}
