//! The wait-for graph and deadlock detection.
//!
//! Nodes are actors. A waiting request of A has a *hard* edge A → B for every
//! fence of B it conflicts with, and a *soft* edge A → C for every conflicting
//! request of C waiting ahead of it (as in PostgreSQL's lock manager, both
//! count). Self-edges are ignored. Call holds never create edges: a call is
//! admitted once for its whole set and never holds while waiting.
//!
//! The check runs when a request is about to start waiting; if one of its new
//! edges leads back to its own actor, that request is refused.

use petgraph::graphmap::DiGraphMap;
use serde::Serialize;

use crate::queue::Waiter;
use crate::state::State;
use crate::table::{ActorId, Claim, HoldKind, conflict};

/// One edge of the wait-for graph, as the dump shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitEdge {
    /// The waiting actor.
    pub from: ActorId,
    /// The actor it waits for.
    pub to: ActorId,
    /// Hard: `to` holds a fence in the way. Soft: `to` is queued ahead.
    pub hard: bool,
}

/// The edges a request of `requester` would add, given the waiters ahead of it.
fn edges_of<'a>(
    state: &'a State,
    requester: ActorId,
    claim: &'a Claim,
    ahead: impl Iterator<Item = &'a Waiter> + 'a,
) -> impl Iterator<Item = WaitEdge> + 'a {
    let hard = state
        .table
        .conflicts(claim, None)
        .filter_map(move |b| state.table.get(b.hold))
        .filter(|hold| hold.claim.kind == HoldKind::Fence)
        .map(move |hold| WaitEdge {
            from: requester,
            to: hold.claim.owner,
            hard: true,
        });
    let soft = ahead
        .filter(|w| w.is_waiting() && conflict(claim, &w.claim).is_some())
        .map(move |w| WaitEdge {
            from: requester,
            to: w.requester,
            hard: false,
        });
    hard.chain(soft).filter(|e| e.from != e.to)
}

/// Every edge of the current wait-for graph.
pub(crate) fn wait_for_edges(state: &State) -> Vec<WaitEdge> {
    let entries = state.queue.entries();
    let mut edges = Vec::new();
    for (i, waiter) in entries.iter().enumerate() {
        if waiter.is_waiting() {
            edges.extend(edges_of(
                state,
                waiter.requester,
                &waiter.claim,
                entries[..i].iter(),
            ));
        }
    }
    edges.sort_by_key(|e| (e.from, e.to, !e.hard));
    edges.dedup_by_key(|e| (e.from, e.to));
    edges
}

/// The cycle a new waiting request would close, requester first, or `None`.
pub(crate) fn cycle_if_waiting(
    state: &State,
    requester: ActorId,
    claim: &Claim,
    priority: i32,
) -> Option<Vec<ActorId>> {
    let new_edges: Vec<WaitEdge> = edges_of(
        state,
        requester,
        claim,
        state.queue.ahead_of(priority).iter(),
    )
    .collect();
    if new_edges.is_empty() {
        return None;
    }
    let mut graph: DiGraphMap<ActorId, ()> = DiGraphMap::new();
    for edge in wait_for_edges(state) {
        graph.add_edge(edge.from, edge.to, ());
    }
    // A request of higher priority queues ahead of conflicting waiters that
    // are already there: each of them gains a soft edge to the requester, and
    // that edge can close the cycle (B, holding a fence A needs, waits behind
    // A's new request).
    let behind = &state.queue.entries()[state.queue.position_for(priority)..];
    for w in behind {
        if w.is_waiting() && w.requester != requester && conflict(&w.claim, claim).is_some() {
            graph.add_edge(w.requester, requester, ());
        }
    }
    new_edges.iter().find_map(|edge| {
        graph.add_node(edge.to);
        let (_, path) =
            petgraph::algo::astar(&graph, edge.to, |n| n == requester, |_| 0u32, |_| 0u32)?;
        let mut cycle = vec![requester];
        cycle.extend(path.into_iter().filter(|&n| n != requester));
        Some(cycle)
    })
}
