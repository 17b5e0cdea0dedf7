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

use std::collections::HashSet;

use petgraph::graphmap::DiGraphMap;
use serde::Serialize;

use crate::index::FastMap;
use crate::queue::{Pos, Waiter};
use crate::state::State;
use crate::table::{ActorId, Claim, HoldKind};

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

/// The edges a request of `requester` would add, given the waiters ahead
/// of `limit` (both kinds are found through the table's and the queue's
/// path indexes, so a request looks only at what overlaps it).
fn edges_of<'a>(
    state: &'a State,
    requester: ActorId,
    claim: &'a Claim,
    limit: Pos,
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
    let soft = state
        .queue
        .conflicts_ahead(claim, limit)
        .into_iter()
        .filter_map(move |id| state.queue.get(id))
        .map(move |w| WaitEdge {
            from: requester,
            to: w.requester,
            hard: false,
        });
    hard.chain(soft).filter(|e| e.from != e.to)
}

/// Every edge of the current wait-for graph.
pub(crate) fn wait_for_edges(state: &State) -> Vec<WaitEdge> {
    let mut edges = Vec::new();
    for waiter in state.queue.entries().filter(|w| w.is_waiting()) {
        if let Some(pos) = state.queue.pos_of(waiter.id) {
            edges.extend(edges_of(state, waiter.requester, &waiter.claim, pos));
        }
    }
    edges.sort_by_key(|e| (e.from, e.to, !e.hard));
    edges.dedup_by_key(|e| (e.from, e.to));
    edges
}

/// The edges of the wait-for graph that can be reached from the targets of
/// `new_edges` without passing through `requester`, in the order
/// [`wait_for_edges`] lists them. A path back to the requester uses only
/// these, so the search sees what it would see in the whole graph, while a
/// request pays for the actors it could wait on, not for every waiter.
fn reachable_edges(state: &State, requester: ActorId, new_edges: &[WaitEdge]) -> Vec<WaitEdge> {
    let mut waiting: FastMap<ActorId, Vec<&Waiter>> = FastMap::default();
    for w in state.queue.entries().filter(|w| w.is_waiting()) {
        waiting.entry(w.requester).or_default().push(w);
    }
    let mut seen: HashSet<ActorId> = HashSet::from([requester]);
    let mut stack: Vec<ActorId> = new_edges.iter().map(|e| e.to).collect();
    let mut edges = Vec::new();
    while let Some(actor) = stack.pop() {
        if !seen.insert(actor) {
            continue;
        }
        for w in waiting.get(&actor).into_iter().flatten() {
            if let Some(pos) = state.queue.pos_of(w.id) {
                for edge in edges_of(state, actor, &w.claim, pos) {
                    stack.push(edge.to);
                    edges.push(edge);
                }
            }
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
    let new_edges: Vec<WaitEdge> =
        edges_of(state, requester, claim, Pos::end_of(priority)).collect();
    if new_edges.is_empty() {
        return None;
    }
    let mut graph: DiGraphMap<ActorId, ()> = DiGraphMap::new();
    for edge in reachable_edges(state, requester, &new_edges) {
        graph.add_edge(edge.from, edge.to, ());
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

/// The cycle search over the whole graph, as it was before it was narrowed
/// to the reachable edges: what property tests compare with.
#[cfg(test)]
pub(crate) fn cycle_if_waiting_whole_graph(
    state: &State,
    requester: ActorId,
    claim: &Claim,
    priority: i32,
) -> Option<Vec<ActorId>> {
    let new_edges: Vec<WaitEdge> =
        edges_of(state, requester, claim, Pos::end_of(priority)).collect();
    if new_edges.is_empty() {
        return None;
    }
    let mut graph: DiGraphMap<ActorId, ()> = DiGraphMap::new();
    for edge in wait_for_edges(state) {
        graph.add_edge(edge.from, edge.to, ());
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
