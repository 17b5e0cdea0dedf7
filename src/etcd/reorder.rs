//! Soft cycles reordered away (SPEC §4), as in process: the core's search
//! ([`reorder`]) over one read of the whole queue, and the moves it finds
//! written as the moved waiters' places (`P p/<waiter>`), in one
//! transaction that compares on everything the search read.
//!
//! A place in etcd is the revision a request queued at, which cannot
//! change; a moved waiter's place is a [`Moved`] record instead, which
//! every read of the queue applies ([`apply_moves`]). The record goes with
//! its waiter (the waiter's lease, and the waiter's own clean-ups).

use std::collections::HashMap;

use etcd_client::{Txn, TxnOp};

use crate::core::deadlock::{Waiting, reorder};
use crate::core::judge::View;
use crate::core::table::{ActorId, Claim};
use crate::error::{Error, Result};

use super::decide::{Moved, Place, Standing, placed_by};
use super::graph::whole_queue;
use super::store::{LeaseId, Table, id_in, to_json, unavailable, unchanged_since, with_lease};

/// The request being decided, when it is not queued yet.
pub(super) struct Deciding<'a> {
    pub(super) requester: u64,
    pub(super) claim: &'a Claim,
    pub(super) priority: i32,
    /// A `child_wait` keeps its place (SPEC §11).
    pub(super) movable: bool,
}

/// What a look for a soft cycle found.
#[derive(Debug)]
pub(super) enum Reordered {
    /// No cycle at the revision read.
    NoCycle,
    /// Moves that remove every cycle were written; `new` is the place the
    /// request being decided moves to, if it moves.
    Moved { new: Option<Moved> },
    /// No reordering within the search's bound removes the cycle.
    Stuck,
    /// The queue changed while the moves were being written.
    Raced,
}

/// A cycle a request closes, as the deadlock check found it.
#[derive(Debug)]
pub(super) struct Closed {
    /// Its actors' names, the requester's first.
    pub(super) actors: Vec<String>,
    /// Whether a reordering of the queue may remove it: a slot wait (SPEC
    /// §11) is an "any of" wait no order changes.
    pub(super) reorderable: bool,
}

/// The most times one request reorders the queue before a cycle it still
/// closes is refused: each reordering removes every cycle it saw, so only
/// a queue that keeps changing under it gets there.
const MAX_REORDERS: usize = 3;

impl Table {
    /// Looks for a cycle in the whole queue (with `new` in it, queued
    /// behind its priority, and the hard edges `extra`: waiter id to the
    /// owner of a fence about to be granted) and, if the core's search
    /// finds moves that remove it, writes them.
    pub(super) async fn reorder(
        &self,
        new: Option<Deciding<'_>>,
        extra: &[(u64, u64)],
    ) -> Result<Reordered> {
        let layout = self.layout();
        let (revision, [waiters, fences, moved]) = self
            .read_prefixes([layout.waiters(), layout.all_fences(), layout.all_moved()])
            .await?;
        let (snapshot, children) = whole_queue(&waiters, &fences, &moved);
        // A moved place goes on its waiter's lease, to go with it.
        let leases: HashMap<u64, i64> = waiters
            .iter()
            .filter_map(|kv| Some((id_in(kv.key())?, kv.lease())))
            .collect();
        let waiting = snapshot.waiters();
        let mut items: Vec<Waiting<'_, usize>> = waiting
            .iter()
            .enumerate()
            .map(|(i, w)| Waiting {
                id: Some(i),
                requester: snapshot.requester(i),
                claim: &w.claim,
                priority: w.meta.priority,
                movable: !children.contains(&w.id()),
            })
            .collect();
        if let Some(new) = &new {
            let at = items
                .iter()
                .take_while(|w| w.priority >= new.priority)
                .count();
            items.insert(
                at,
                Waiting {
                    id: None,
                    requester: ActorId(new.requester),
                    claim: new.claim,
                    priority: new.priority,
                    movable: new.movable,
                },
            );
        }
        let index: HashMap<u64, usize> = waiting
            .iter()
            .enumerate()
            .map(|(i, w)| (w.id(), i))
            .collect();
        let extra: Vec<(Option<usize>, ActorId)> = extra
            .iter()
            .filter_map(|(w, owner)| Some((Some(*index.get(w)?), ActorId(*owner))))
            .collect();
        // Who stands where now: the request being decided is behind every
        // place read (it queues at a later revision).
        let stands: Vec<Standing> = items
            .iter()
            .map(|item| Standing {
                id: item.id,
                priority: item.priority,
                place: item.id.and_then(|i| waiting[i].place()),
            })
            .collect();
        let Some(moves) = reorder(&snapshot, items, Place::new(i32::MIN), &extra) else {
            return Ok(Reordered::Stuck);
        };
        if moves.is_empty() {
            return Ok(Reordered::NoCycle);
        }
        let Some(placed) = placed_by(&stands, &moves, revision) else {
            return Ok(Reordered::Stuck);
        };
        let mut writes = Vec::new();
        let mut new_place = None;
        for (item, place) in placed {
            match stands[item].id {
                Some(i) => {
                    let id = waiting[i].id();
                    // On its waiter's lease: it goes with the waiter.
                    let lease = LeaseId(leases.get(&id).copied().unwrap_or(0));
                    writes.push(TxnOp::put(
                        layout.moved(id),
                        to_json(&place)?,
                        with_lease(lease),
                    ));
                }
                None => new_place = Some(place),
            }
        }
        if !writes.is_empty() {
            let txn = Txn::new()
                .when([
                    unchanged_since(&layout.waiters(), revision),
                    unchanged_since(&layout.all_fences(), revision),
                    unchanged_since(&layout.all_moved(), revision),
                ])
                .and_then(writes);
            let done = self.txn(txn).await.map_err(unavailable)?;
            if !done.succeeded() {
                return Ok(Reordered::Raced);
            }
        }
        Ok(Reordered::Moved { new: new_place })
    }
}

impl Table {
    /// Ends a cycle a request closes (SPEC §4): by reordering the queue if
    /// the core's search finds moves that remove it — then the request
    /// looks again, from the place returned if it is `deciding` and moved
    /// — or else by refusing it with `Deadlock`.
    pub(super) async fn end_cycle(
        &self,
        closed: Closed,
        deciding: Option<Deciding<'_>>,
        reorders: &mut usize,
    ) -> Result<Option<Moved>> {
        let refused = |closed: Closed| Error::Deadlock {
            cycle: closed.actors,
        };
        if !closed.reorderable || *reorders >= MAX_REORDERS {
            return Err(refused(closed));
        }
        *reorders += 1;
        match self.reorder(deciding, &[]).await {
            Ok(Reordered::Stuck) => Err(refused(closed)),
            Ok(Reordered::Moved { new }) => Ok(new),
            // A write whose answer was lost shows at the next look.
            Ok(Reordered::NoCycle | Reordered::Raced) | Err(Error::Unavailable { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
