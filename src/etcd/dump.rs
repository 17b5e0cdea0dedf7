//! The dump: the whole session read at one revision, as the server shows it.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{KeyValue, TxnOp};

use crate::core::queue::WaiterId;
use crate::core::table::{ActorId, HoldId, ScopeKind};
use crate::error::Result;
use crate::sched::dump::{ActorEntry, BlockedBy, Dump, HoldEntry, PathEntry, Slots, WaiterEntry};

use super::actors::ActorRecord;
use super::counters::sum_counters;
use super::decide::{Blocked, ClaimRecord, Other, Place, Snapshot};
use super::graph::{dump_edges, moved_places, others};
use super::layout::Owner;
use super::slots::limits_in;
use super::store::{
    LeaseId, Table, id_in, now_ms, prefix_get, ranges_of, revision_of, unavailable,
};

/// The session's table at one etcd revision: SPEC §5's [`Dump`], built
/// as the in-process table builds it, and what only a table in etcd has.
///
/// ```no_run
/// # async fn demo(table: writ::etcd::Table) -> Result<(), writ::Error> {
/// let read = table.dump().await?;
/// println!("at revision {}:\n{}", read.revision, read.table);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TableDump {
    /// The etcd revision the copy was read at.
    pub revision: i64,
    /// The session, as SPEC §5 shapes it for both tables: a hold's
    /// `revision` is its fencing token; a waiter's `cause` is judged at
    /// the dump's revision (`None` when nothing is in its way any more:
    /// its table grants it next); the edges are those true at that
    /// revision; the counters are summed over every table.
    pub table: Dump,
    /// Each actor's lease, in the order of `table.actors`.
    pub leases: Vec<LeaseId>,
    /// Each waiter's queue revision (its place among equal priorities), in
    /// the order of `table.waiters`.
    pub queued: Vec<i64>,
}

pub(super) fn paths_of(record: &ClaimRecord) -> Vec<PathEntry> {
    record
        .keys
        .iter()
        .map(|k| PathEntry {
            // As the caller spelled it, as in process (SPEC §5).
            path: PathBuf::from(k.spelled.as_ref().unwrap_or(&k.path)),
            tree: k.tree,
            mode: k.mode.into(),
        })
        .collect()
}

impl Table {
    /// A copy of the whole session's table, read in one transaction at one
    /// revision.
    pub async fn dump(&self) -> Result<TableDump> {
        let layout = self.layout();
        let prefixes = [
            layout.actors(),
            layout.holds(),
            layout.waiters(),
            layout.all_edges(),
            layout.all_fences(),
            layout.counters(),
            layout.all_moved(),
        ];
        let mut reads: Vec<TxnOp> = prefixes.iter().map(|p| prefix_get(p)).collect();
        reads.push(TxnOp::get(layout.limits(), None));
        let read = self.read(reads).await.map_err(unavailable)?;
        let revision = revision_of(&read);
        let mut ranges = ranges_of(&read).into_iter();
        let mut next = || ranges.next().unwrap_or_default();
        let (actor_kvs, holds, waiter_kvs, edges, fences, counts, moved_kvs, limits) = (
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
            next(),
        );
        let limits = limits_in(&limits);
        let counters = sum_counters(&counts);
        let now = now_ms();
        let age = |since: u64| Duration::from_millis(now.saturating_sub(since));
        let edges = dump_edges(&waiter_kvs, &edges, &fences, &moved_kvs);
        let mut actors: Vec<(i64, ActorEntry, LeaseId)> = actor_kvs
            .iter()
            .filter_map(|kv| {
                let record: ActorRecord = serde_json::from_slice(kv.value()).ok()?;
                let parent = record.lineage.iter().rev().nth(1).map(|&p| ActorId(p));
                let scope = if record.read_only {
                    ScopeKind::ReadOnly
                } else if record.fence.is_some() {
                    ScopeKind::Fenced
                } else {
                    ScopeKind::Workspace
                };
                let actor = ActorEntry {
                    id: ActorId(id_in(kv.key())?),
                    name: record.name,
                    parent,
                    root: PathBuf::from(record.root),
                    scope,
                    age: age(record.since_ms),
                };
                Some((kv.create_revision(), actor, LeaseId(record.lease)))
            })
            .collect();
        // Creation order: ids are unique, not ordered across tables.
        actors.sort_by_key(|(made, actor, _)| (*made, actor.id));
        let (actors, leases): (Vec<ActorEntry>, Vec<LeaseId>) = actors
            .into_iter()
            .map(|(_, actor, lease)| (actor, lease))
            .unzip();
        let children = actors.iter().filter(|a| a.parent.is_some());
        let slots = Slots {
            actors: children.clone().count(),
            max_actors: limits.0,
            writers: children.filter(|a| a.scope != ScopeKind::ReadOnly).count(),
            max_writers: limits.1,
        };
        // A hold's token is the revision its record last changed at: a
        // widened fence's new part was granted then, and a token must be
        // at least the revision that granted each of its paths (the
        // answer to `fence.extend` and `fence.narrow` says the same).
        let mut holds = others(&holds, Owner::Hold, KeyValue::mod_revision);
        holds.sort_by_key(|(_, h)| (h.revision, h.owner));
        // A waiter's place is the revision it queued at, or where a
        // reordering moved it (in queue order).
        let moved = moved_places(&moved_kvs);
        let mut waiters = others(&waiter_kvs, Owner::Waiter, KeyValue::create_revision);
        for (_, w) in &mut waiters {
            w.moved = moved.get(&w.id()).copied();
        }
        waiters.sort_by_key(|(_, w)| w.place());
        let snapshot = Snapshot::new(
            holds.iter().map(|(_, h)| h.clone()).collect(),
            waiters.iter().map(|(_, w)| w.clone()).collect(),
        );
        let id_of = |o: &Other| match o.owner {
            Owner::Hold(id) | Owner::Waiter(id) => id,
        };
        // A child_wait's cause also counts the slots (SPEC §11), and its
        // actor is the parent that asked.
        let child_waits = self
            .dump_child_waits(
                revision,
                limits,
                &actor_kvs,
                &waiter_kvs,
                &fences,
                &moved_kvs,
            )
            .await?;
        let queued = waiters.iter().map(|(_, w)| w.revision).collect();
        let waiters: Vec<WaiterEntry> = waiters
            .iter()
            .map(|(record, w)| {
                let place = w.place().unwrap_or(Place::new(w.meta.priority));
                let blockers = snapshot.explain(&w.claim, None, place);
                let mut entry = WaiterEntry {
                    id: WaiterId(id_of(w)),
                    actor: record.meta.name.clone(),
                    actor_id: ActorId(record.meta.owner),
                    kind: record.meta.kind.into(),
                    child: None,
                    paths: paths_of(record),
                    priority: record.meta.priority,
                    refusals: record.meta.refusals,
                    cause: blockers
                        .first
                        .and_then(|b| match b {
                            Blocked::Path(other, key, _) => Some((other, key)),
                            Blocked::Slot(_) => None,
                        })
                        .map(|(other, key)| crate::WaitCause::Path {
                            path: w
                                .claim
                                .keys
                                .get(key)
                                .map(|(k, _)| k.path.clone())
                                .unwrap_or_default(),
                            holder: other.meta.name.clone(),
                        }),
                    label: record.meta.label.clone(),
                    waited: age(record.meta.since_ms),
                    blocked_by: BlockedBy {
                        holds: blockers.holds.iter().map(|h| HoldId(id_of(h))).collect(),
                        waiters: blockers
                            .waiters
                            .iter()
                            .map(|q| WaiterId(id_of(q)))
                            .collect(),
                    },
                };
                if let Some(wait) = child_waits.iter().find(|c| c.id == id_of(w)) {
                    entry.cause = wait.cause.clone();
                    entry.child = Some(std::mem::replace(
                        &mut entry.actor,
                        wait.parent_name.clone(),
                    ));
                    entry.actor_id = wait.parent;
                }
                entry
            })
            .collect();
        let holds = holds
            .into_iter()
            .map(|(record, h)| HoldEntry {
                id: HoldId(id_of(&h)),
                actor_id: ActorId(record.meta.owner),
                paths: paths_of(&record),
                actor: record.meta.name,
                kind: record.meta.kind.into(),
                label: record.meta.label,
                revision: Some(h.revision),
                age: age(record.meta.since_ms),
                ends_in: record.until_ms.map(|until| {
                    Duration::from_millis(until.saturating_sub(super::store::now_ms()))
                }),
            })
            .collect();
        Ok(TableDump {
            revision,
            table: Dump {
                session: self.session().to_string(),
                actors,
                holds,
                waiters,
                edges,
                slots,
                counters,
            },
            leases,
            queued,
        })
    }
}
