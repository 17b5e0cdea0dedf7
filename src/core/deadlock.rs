//! The wait-for graph and deadlock detection.
//!
//! # Implementation details
//!
//! The graph has two kinds of nodes: actors and waiting requests. Its edges:
//!
//! - actor A → each waiting request of A: an actor keeps its fences until its
//!   waits are over, so whatever waits on A's fences waits on A's requests too;
//! - request W → actor B, a *hard* edge, for every fence of B that W conflicts
//!   with;
//! - request W → request W', a *soft* edge, for every conflicting request
//!   waiting ahead of W; when W' asks for a fence (or a child's grant fence),
//!   also W → the fence's owner, because once granted it is held until its
//!   owner's waits are over.
//!
//! Call holds never create edges: a call is admitted once for its whole set
//! and never holds while waiting. Requests rather than actors are the nodes
//! for the soft edges so that several parallel calls of one actor, queued
//! behind each other's neighbours, are not mistaken for a cycle (a call
//! request granted is released without waiting for anything).
//!
//! The graph is kept acyclic: a request about to wait is refused if queuing
//! it would close a cycle (its own edges, and the edges of lower-priority
//! waiters it jumps ahead of), and a fence granted past lower-priority
//! waiters is refused if their new hard edges would close one. Every other
//! event (grants in the wake-up scan, releases, cancellations) only removes
//! edges or turns a soft edge to a fence request into the hard edge it
//! already stood for — except that a fence granted or released changes whom
//! the owner's precedence passes, so after those [`closed_cycle`] is asked
//! and the newest waiting request on a cycle is refused.
//!
//! The dump shows the graph folded onto actors ([`WaitEdge`]).

use std::collections::{HashMap, HashSet};

use petgraph::graphmap::DiGraphMap;
use serde::Serialize;

use crate::core::queue::{Need, Pos, WaiterId};
use crate::core::state::{Blocker, State};
use crate::core::table::{ActorId, Claim, HoldKind, conflict};

/// One edge of the wait-for graph folded onto actors, as the dump shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitEdge {
    /// The waiting actor.
    pub from: ActorId,
    /// The actor it waits for.
    pub to: ActorId,
    /// Hard: `to` holds a fence in the way. Soft: `to` is queued ahead.
    pub hard: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Node {
    Actor(ActorId),
    Request(WaiterId),
    /// The request being decided, not queued yet.
    New,
}

/// A request as the graph sees it.
struct Req<'a> {
    node: Node,
    requester: ActorId,
    claim: &'a Claim,
    /// The owner its hold will have, when that hold is a fence.
    fence_owner: Option<ActorId>,
}

fn fence_owner(claim: &Claim, need: &Need) -> Option<ActorId> {
    match need {
        Need::Child(_) => Some(claim.owner),
        Need::Hold if claim.kind == HoldKind::Fence => Some(claim.owner),
        Need::Hold => None,
    }
}

type Graph = DiGraphMap<Node, ()>;

/// Adds the edges of `req`, whose conflicting earlier waiters are `ahead`.
fn add_request(graph: &mut Graph, state: &State, req: &Req<'_>, ahead: &[WaiterId]) {
    graph.add_edge(Node::Actor(req.requester), req.node, ());
    for blocking in state.table.conflicts(req.claim, None) {
        if let Some(hold) = state.table.get(blocking.hold) {
            if hold.claim.kind == HoldKind::Fence && hold.claim.owner != req.requester {
                graph.add_edge(req.node, Node::Actor(hold.claim.owner), ());
            }
        }
    }
    for earlier in ahead.iter().filter_map(|&id| state.queue.get(id)) {
        graph.add_edge(req.node, Node::Request(earlier.id), ());
        if let Some(owner) = fence_owner(&earlier.claim, &earlier.need) {
            if owner != req.requester {
                graph.add_edge(req.node, Node::Actor(owner), ());
            }
        }
    }
}

/// The waiting requests with their places, in queue order.
fn waiting(state: &State) -> Vec<(Pos, Req<'_>)> {
    state
        .queue
        .entries()
        .filter(|w| w.is_waiting())
        .filter_map(|w| {
            let pos = state.queue.pos_of(w.id)?;
            Some((
                pos,
                Req {
                    node: Node::Request(w.id),
                    requester: w.requester,
                    claim: &w.claim,
                    fence_owner: fence_owner(&w.claim, &w.need),
                },
            ))
        })
        .collect()
}

/// The conflicting waiters before `at`, split into those `req` queues
/// behind and those it passes by the fence owner's precedence (§4).
fn ahead_of(state: &State, claim: &Claim, at: Pos) -> (Vec<WaiterId>, Vec<WaiterId>) {
    state
        .queue
        .conflicts_ahead(claim, at, &|_| false)
        .into_iter()
        .partition(|&id| {
            state
                .queue
                .get(id)
                .is_none_or(|earlier| !state.passes(&earlier.claim, claim))
        })
}

/// A request that passes an earlier waiter gives it no edge; but when the
/// passing request asks for a fence, that fence, once granted, is in the
/// waiter's way until its owner's waits are over: the waiter's hard edge
/// to the owner is drawn now, as a soft edge to a fence request stands for
/// the hard edge it will become.
fn add_passed(graph: &mut Graph, state: &State, req: &Req<'_>, passed: &[WaiterId]) {
    let Some(owner) = req.fence_owner else {
        return;
    };
    for earlier in passed.iter().filter_map(|&id| state.queue.get(id)) {
        if earlier.requester != owner {
            graph.add_edge(Node::Request(earlier.id), Node::Actor(owner), ());
        }
    }
}

/// The graph of the current queue, plus `new` (if any) as if queued at
/// `Pos` — with the edges of the waiters behind it that it would block.
/// Earlier conflicting waiters come from the queue's path index.
fn build(state: &State, new: Option<(Req<'_>, Pos)>) -> Graph {
    let reqs = waiting(state);
    let mut graph = Graph::new();
    for (pos, req) in &reqs {
        let (blocking, passed) = ahead_of(state, req.claim, *pos);
        add_request(&mut graph, state, req, &blocking);
        add_passed(&mut graph, state, req, &passed);
    }
    if let Some((new, at)) = new {
        let (blocking, passed) = ahead_of(state, new.claim, at);
        add_request(&mut graph, state, &new, &blocking);
        add_passed(&mut graph, state, &new, &passed);
        for (_, behind) in reqs.iter().filter(|(pos, _)| *pos > at) {
            if conflict(behind.claim, new.claim).is_none() {
                continue;
            }
            if state.passes(new.claim, behind.claim) {
                // `behind` passes the new request; a fence it asks for
                // will be in the new request's way.
                if let Some(owner) = behind.fence_owner {
                    if owner != new.requester {
                        graph.add_edge(new.node, Node::Actor(owner), ());
                    }
                }
                continue;
            }
            graph.add_edge(behind.node, new.node, ());
            if let Some(owner) = new.fence_owner {
                if owner != behind.requester {
                    graph.add_edge(behind.node, Node::Actor(owner), ());
                }
            }
        }
    }
    graph
}

/// A cycle in an acyclic-but-for-new-edges graph, as actor ids.
fn find_cycle(graph: &Graph, state: &State) -> Option<Vec<ActorId>> {
    let scc = petgraph::algo::tarjan_scc(graph)
        .into_iter()
        .find(|component| component.len() > 1)?;
    let members: HashSet<Node> = scc.iter().copied().collect();
    // Walk inside the component until a node repeats: that loop is a cycle.
    let start = *scc.iter().min()?;
    let mut path = vec![start];
    let mut index: HashMap<Node, usize> = HashMap::from([(start, 0)]);
    loop {
        let here = *path.last()?;
        let next = graph
            .neighbors(here)
            .filter(|n| members.contains(n))
            .min()?;
        if let Some(&at) = index.get(&next) {
            path.drain(..at);
            break;
        }
        index.insert(next, path.len());
        path.push(next);
    }
    let owners: HashMap<WaiterId, ActorId> =
        state.queue.entries().map(|w| (w.id, w.requester)).collect();
    let mut actors: Vec<ActorId> = Vec::new();
    for node in path {
        let actor = match node {
            Node::Actor(a) => Some(a),
            Node::Request(w) => owners.get(&w).copied(),
            Node::New => None,
        };
        if let Some(actor) = actor {
            if actors.last() != Some(&actor) {
                actors.push(actor);
            }
        }
    }
    if actors.len() > 1 && actors.first() == actors.last() {
        actors.pop();
    }
    Some(actors)
}

/// Rotates a cycle so that `first` leads, if it is on it.
fn starting_with(mut cycle: Vec<ActorId>, first: ActorId) -> Vec<ActorId> {
    match cycle.iter().position(|&a| a == first) {
        Some(at) => {
            cycle.rotate_left(at);
            cycle
        }
        None => {
            cycle.insert(0, first);
            cycle
        }
    }
}

/// The cycle (actor ids, requester first) that queuing this request would
/// close, or `None`.
pub(crate) fn cycle_if_waiting(
    state: &State,
    requester: ActorId,
    claim: &Claim,
    need: &Need,
    priority: i32,
) -> Option<Vec<ActorId>> {
    let new = Req {
        node: Node::New,
        requester,
        claim,
        fence_owner: fence_owner(claim, need),
    };
    let at = Pos::end_of(priority);
    let graph = build(state, Some((new, at)));
    if let Some(slot) = state.slot_wait(claim, need, at) {
        if let Some(cycle) = slot_cycle(state, &graph, requester, slot) {
            return Some(cycle);
        }
    }
    // A holder of a slot that starts waiting may catch a slot wait queued
    // earlier.
    for (pos, waiter) in state.queue.children_ahead(Pos::end_of(i32::MIN)) {
        if let Some(slot) = state.slot_wait(&waiter.claim, &waiter.need, pos) {
            if slot_holders(state, slot).contains(&requester) {
                if let Some(cycle) = slot_cycle(state, &graph, waiter.requester, slot) {
                    return Some(starting_with(cycle, requester));
                }
            }
        }
    }
    if !petgraph::algo::is_cyclic_directed(&graph) {
        return None;
    }
    find_cycle(&graph, state).map(|cycle| starting_with(cycle, requester))
}

/// A slot wait that can never end (§11): the new request (a `child_wait`
/// of `requester` at `at`) waits for a slot, and every live child holding a
/// slot of that limit waits, directly or through others, on `requester` —
/// so none of them can give a slot back before the requester stops
/// waiting. A slot wait is an "any of them" wait, so it is a deadlock only
/// when *every* holder is caught; one holder on its own is not a cycle.
/// Returns the requester followed by the holders (`slot` is the limit the
/// requester waits on).
fn slot_cycle(
    state: &State,
    graph: &Graph,
    requester: ActorId,
    slot: Blocker,
) -> Option<Vec<ActorId>> {
    let holders = slot_holders(state, slot);
    if holders.is_empty() {
        return None;
    }
    let caught = |holder: ActorId| {
        holder == requester
            || (graph.contains_node(Node::Actor(holder))
                && petgraph::algo::has_path_connecting(
                    graph,
                    Node::Actor(holder),
                    Node::Actor(requester),
                    None,
                ))
    };
    if !holders.iter().all(|&h| caught(h)) {
        return None;
    }
    let mut cycle = vec![requester];
    cycle.extend(holders.into_iter().filter(|&h| h != requester));
    Some(cycle)
}

/// The live children holding a slot of the limit `slot` names.
fn slot_holders(state: &State, slot: Blocker) -> Vec<ActorId> {
    let counts = |c: &crate::core::table::ChildRecord| match slot {
        Blocker::Slots => c.counts_actor,
        Blocker::Writers => c.counts_writer,
        Blocker::Hold(_) | Blocker::Waiter { .. } => false,
    };
    state
        .actors
        .values()
        .filter(|(c, _)| counts(c))
        .map(|(c, _)| c.id)
        .collect()
}

/// The cycle that granting `claim` (a fence of `claim.owner`) now would
/// close through the waiters it would block, or `None`.
pub(crate) fn cycle_if_granted(state: &State, claim: &Claim) -> Option<Vec<ActorId>> {
    if claim.kind != HoldKind::Fence {
        return None;
    }
    let blocked: Vec<Node> = waiting(state)
        .iter()
        .filter(|(_, w)| w.requester != claim.owner && conflict(w.claim, claim).is_some())
        .map(|(_, w)| w.node)
        .collect();
    if blocked.is_empty() {
        return None;
    }
    let mut graph = build(state, None);
    for node in blocked {
        graph.add_edge(node, Node::Actor(claim.owner), ());
    }
    if !petgraph::algo::is_cyclic_directed(&graph) {
        return None;
    }
    find_cycle(&graph, state).map(|cycle| starting_with(cycle, claim.owner))
}

/// A cycle in the current wait-for graph (which a fence granted or
/// released may have closed): the newest waiting request on it and the
/// cycle as actor ids, that request's actor first.
pub(crate) fn closed_cycle(state: &State) -> Option<(WaiterId, Vec<ActorId>)> {
    if !state.queue.has_waiting() {
        return None;
    }
    let graph = build(state, None);
    if !petgraph::algo::is_cyclic_directed(&graph) {
        return None;
    }
    let scc = petgraph::algo::tarjan_scc(&graph)
        .into_iter()
        .find(|component| component.len() > 1)?;
    // Every component with an edge holds a request: actors only point at
    // requests.
    let newest = scc
        .iter()
        .filter_map(|node| match node {
            Node::Request(id) => Some(*id),
            Node::Actor(_) | Node::New => None,
        })
        .max()?;
    let requester = state.queue.get(newest)?.requester;
    let cycle = find_cycle(&graph, state)?;
    Some((newest, starting_with(cycle, requester)))
}

/// Every edge of the current wait-for graph, folded onto actors.
pub(crate) fn wait_for_edges(state: &State) -> Vec<WaitEdge> {
    let mut edges = Vec::new();
    for (pos, req) in waiting(state) {
        for blocking in state.table.conflicts(req.claim, None) {
            if let Some(hold) = state.table.get(blocking.hold) {
                if hold.claim.kind == HoldKind::Fence {
                    edges.push(WaitEdge {
                        from: req.requester,
                        to: hold.claim.owner,
                        hard: true,
                    });
                }
            }
        }
        let passes = |earlier: &Claim| state.passes(earlier, req.claim);
        for earlier in state.queue.conflicts_ahead(req.claim, pos, &passes) {
            if let Some(earlier) = state.queue.get(earlier) {
                edges.push(WaitEdge {
                    from: req.requester,
                    to: fence_owner(&earlier.claim, &earlier.need).unwrap_or(earlier.requester),
                    hard: false,
                });
            }
        }
    }
    edges.retain(|e| e.from != e.to);
    edges.sort_by_key(|e| (e.from, e.to, !e.hard));
    edges.dedup_by_key(|e| (e.from, e.to));
    edges
}
