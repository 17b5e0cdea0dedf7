//! The wait-for graph as one read sees it: every waiter's edges judged at
//! that revision, and the cycle a grant past waiters would close. The cycle search
//! itself is pure (`deadlock`).

use etcd_client::KeyValue;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::core::deadlock::{WaitEdge, folded};
use crate::core::table::{ActorId, Claim};
use crate::error::Result;

use super::deadlock::{self, Edges};
use super::decide::{ClaimRecord, Moved, Other, Place, Snapshot, apply_moves, moves_in};
use super::layout::Owner;
use super::store::{Table, id_in};

/// The claims of one read's waiters (queue order: priority, then the
/// revision each queued at) or fences (grant order), as `decide` takes them.
pub(super) fn others(
    kvs: &[KeyValue],
    owner: fn(u64) -> Owner,
    revision: fn(&KeyValue) -> i64,
) -> Vec<(ClaimRecord, Other)> {
    let mut found: Vec<(ClaimRecord, Other)> = kvs
        .iter()
        .filter_map(|kv| {
            let record: ClaimRecord = serde_json::from_slice(kv.value()).ok()?;
            let other = Other {
                owner: owner(id_in(kv.key())?),
                meta: record.meta.clone(),
                claim: record.claim(),
                revision: revision(kv),
                moved: None,
            };
            Some((record, other))
        })
        .collect();
    found.sort_by_key(|(_, o)| (std::cmp::Reverse(o.meta.priority), o.revision, o.owner));
    found
}

/// The places a reordering moved waiters to, from one read of `P p/`.
pub(super) fn moved_places(moved: &[KeyValue]) -> HashMap<u64, Moved> {
    moves_in(moved.iter().map(|kv| (id_in(kv.key()), kv.value())))
}

/// One read of the whole queue — the waiter records (whole claims), the
/// live fences and the moved places — as a [`Snapshot`], waiters in queue
/// order; and the ids of the waiting `child_wait`s. Only fences make edges
/// and let a request pass (SPEC §4): they are all the holds the graph and
/// the reordering search need.
pub(super) fn whole_queue(
    waiters: &[KeyValue],
    fences: &[KeyValue],
    moved: &[KeyValue],
) -> (Snapshot, HashSet<u64>) {
    let mut requesters = HashMap::new();
    let mut queued: Vec<Other> = others(waiters, Owner::Waiter, KeyValue::create_revision)
        .into_iter()
        .map(|(record, o)| {
            if let Some(child_of) = record.child_of {
                requesters.insert(o.id(), child_of.parent);
            }
            o
        })
        .collect();
    apply_moves(&mut queued, &moved_places(moved));
    let held: Vec<Other> = others(fences, Owner::Hold, KeyValue::mod_revision)
        .into_iter()
        .map(|(_, o)| o)
        .collect();
    let children = requesters.keys().copied().collect();
    (
        Snapshot::new(held, queued).with_requesters(requesters),
        children,
    )
}

/// Every waiting request's edges at one read (`waiters`, their `edges`
/// records and the live `fences`), drawn there by the core's judgement
/// (`core::judge::wait_edges`, SPEC §4): a hard edge to the owner of each
/// live fence in its way, a soft edge to each earlier waiter in its way
/// that no fence of its line lets it pass (and an edge to the owner of the
/// fence that waiter asks for), and the waiters it passes. A waiter's record says only that it waits
/// and, for a `child_wait`, on which slot limit; what it waits for is read
/// afresh, so a fence granted, released or narrowed since it last looked
/// counts at once.
pub(super) fn edges_at(
    waiters: &[KeyValue],
    edges: &[KeyValue],
    fences: &[KeyValue],
    moved: &[KeyValue],
) -> BTreeMap<u64, Edges> {
    let (snapshot, _) = whole_queue(waiters, fences, moved);
    let mut out = BTreeMap::new();
    for kv in edges {
        let Some(id) = id_in(kv.key()) else { continue };
        let Ok(mut found) = serde_json::from_slice::<Edges>(kv.value()) else {
            continue;
        };
        let Some(me) = snapshot
            .waiters()
            .iter()
            .find(|w| w.owner == Owner::Waiter(id))
        else {
            continue;
        };
        let place = me.place().unwrap_or(Place::new(me.meta.priority));
        snapshot.wait_edges(found.actor, &me.claim, place, &mut found);
        // The queue position is the edge record's creation (with the waiter).
        found.queued = kv.create_revision();
        out.insert(id, found);
    }
    out
}

/// The wait-for edges between actors at one read ([`edges_at`]), folded
/// onto actors, without self-edges, each once.
pub(super) fn dump_edges(
    waiters: &[KeyValue],
    edges: &[KeyValue],
    fences: &[KeyValue],
    moved: &[KeyValue],
) -> Vec<WaitEdge> {
    let actor_of: HashMap<u64, u64> = others(waiters, Owner::Waiter, KeyValue::create_revision)
        .into_iter()
        .filter_map(|(_, w)| match w.owner {
            Owner::Waiter(id) => Some((id, w.meta.owner)),
            Owner::Hold(_) => None,
        })
        .collect();
    let mut out = Vec::new();
    for found in edges_at(waiters, edges, fences, moved).values() {
        for (owner, _) in &found.hard {
            out.push(WaitEdge {
                from: ActorId(found.actor),
                to: ActorId(*owner),
                hard: true,
            });
        }
        for earlier in &found.soft {
            if let Some(&actor) = actor_of.get(earlier) {
                out.push(WaitEdge {
                    from: ActorId(found.actor),
                    to: ActorId(actor),
                    hard: false,
                });
            }
        }
    }
    folded(out)
}

/// Keeps the edges of a request (whole claim `claim`) that are true: a
/// hard edge while its owner holds a fence in the way, a soft one while the
/// earlier request still waits (`waiting`; `None` keeps every soft edge).
pub(super) fn true_edges(
    fences_of: &std::collections::HashMap<u64, Vec<Claim>>,
    waiting: Option<&std::collections::HashMap<u64, Claim>>,
    claim: &Claim,
    edges: &mut Edges,
) {
    edges.hard.retain(|(owner, _)| {
        fences_of.get(owner).is_some_and(|fs| {
            fs.iter()
                .any(|f| crate::core::table::conflict(claim, f).is_some())
        })
    });
    if let Some(waiting) = waiting {
        edges.soft.retain(|v| waiting.contains_key(v));
    }
}

impl Table {
    /// Every waiting request's edges that are true at one revision.
    pub(super) async fn wait_for_graph(&self) -> Result<std::collections::BTreeMap<u64, Edges>> {
        Ok(self.graph_and_fences().await?.0)
    }

    /// The edges true at one revision (a hard edge while its owner holds a
    /// fence that conflicts with the request, a soft one while the earlier
    /// request still waits), and the live fences by owner.
    #[allow(clippy::type_complexity)]
    pub(super) async fn graph_and_fences(
        &self,
    ) -> Result<(
        std::collections::BTreeMap<u64, Edges>,
        std::collections::HashMap<u64, Vec<Claim>>,
    )> {
        let layout = self.layout();
        let (_, [edges, waiters, fences, moved]) = self
            .read_prefixes([
                layout.all_edges(),
                layout.waiters(),
                layout.all_fences(),
                layout.all_moved(),
            ])
            .await?;
        let mut fences_of: HashMap<u64, Vec<Claim>> = HashMap::new();
        for kv in &fences {
            if let Ok(record) = serde_json::from_slice::<ClaimRecord>(kv.value()) {
                fences_of
                    .entry(record.meta.owner)
                    .or_default()
                    .push(record.claim());
            }
        }
        let others = edges_at(&waiters, &edges, &fences, &moved);
        Ok((others, fences_of))
    }

    /// The cycle that granting a fence to `owner` (its id and name) would
    /// close: each waiter in `passed` gains a hard edge to the owner.
    pub(super) async fn cycle_by_granting(
        &self,
        owner: (u64, String),
        passed: &[u64],
    ) -> Result<Option<Vec<String>>> {
        let others = self.wait_for_graph().await?;
        for &w in passed {
            let Some(mut edges) = others.get(&w).cloned() else {
                continue;
            };
            edges.hard.push(owner.clone());
            if let Some(mut cycle) = deadlock::cycle_through(w, &edges, &others) {
                // Named from the requester, as a refused wait is.
                if let Some(at) = cycle.iter().position(|n| *n == owner.1) {
                    cycle.rotate_left(at);
                }
                return Ok(Some(cycle));
            }
        }
        Ok(None)
    }
}
