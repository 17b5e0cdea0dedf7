//! The wait-for graph (SPEC §4's refinement), one type for both tables.
//!
//! Nodes are actors and waiting requests; `R` names a request as its table
//! does (the in-process queue's id, or an etcd waiter id). Edges are drawn
//! from what [`judge::wait_edges`](crate::core::judge::wait_edges) judged
//! of each waiting request ([`WaitGraph::add_request`]):
//!
//! - actor → each of its waiting requests: an actor keeps its fences until
//!   its waits are over, so whatever waits on its fences waits on its
//!   requests too;
//! - request → the owner of each live fence in its way (hard);
//! - request → each earlier request in its way that it does not pass
//!   (soft), and → the owner of the fence such a request asks for;
//! - a request passed by a fence request → that fence's owner.
//!
//! The searches are the ones both tables ask: a cycle through one request
//! ([`WaitGraph::cycle_through`]), whether one node waits on another, and
//! the actors of a slot deadlock ([`WaitGraph::slot_cycle`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

use petgraph::graphmap::DiGraphMap;

use crate::core::judge::WaitEdges;
use crate::core::table::ActorId;

/// A node of the wait-for graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Node<R> {
    Actor(ActorId),
    Request(R),
}

/// A waiting request as [`WaitGraph::add_pair`] sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asking<R> {
    pub(crate) request: R,
    pub(crate) requester: ActorId,
    /// The owner of the fence it asks for, if it asks for one.
    pub(crate) fence_owner: Option<ActorId>,
}

/// The wait-for graph of one table at one moment.
#[derive(Debug, Clone)]
pub(crate) struct WaitGraph<R: Copy + Ord + Hash> {
    graph: DiGraphMap<Node<R>, ()>,
}

impl<R: Copy + Ord + Hash> Default for WaitGraph<R> {
    fn default() -> Self {
        WaitGraph {
            graph: DiGraphMap::new(),
        }
    }
}

impl<R: Copy + Ord + Hash> WaitGraph<R> {
    /// Adds waiting request `request` of `requester`, with the edges the
    /// core's judgement drew for it (their requests named as `name` names
    /// them) and the owner of the fence it asks for (if it asks for one).
    pub(crate) fn add_request<W: Copy>(
        &mut self,
        request: R,
        requester: ActorId,
        edges: &WaitEdges<W>,
        name: impl Fn(W) -> R,
        fence_owner: Option<ActorId>,
    ) {
        let node = Node::Request(request);
        self.add_edge(Node::Actor(requester), node);
        for &owner in edges.fences.iter().chain(&edges.asked) {
            self.add_edge(node, Node::Actor(owner));
        }
        for &earlier in &edges.earlier {
            self.add_edge(node, Node::Request(name(earlier)));
        }
        if let Some(owner) = fence_owner {
            for &passed in &edges.passed {
                self.add_edge(Node::Request(name(passed)), Node::Actor(owner));
            }
        }
    }

    /// Adds the edges between two conflicting waiting requests, `ahead`
    /// queued before `behind`: `behind` queues behind `ahead` (an edge to
    /// it, and one to the owner of the fence `ahead` asks for) — unless
    /// `behind` passes it by the fence owner's precedence (`passes`), when
    /// the fence `behind` asks for will be in `ahead`'s way instead (as
    /// `judge::wait_edges`'s `passed`). For a queue order not judged yet:
    /// a request about to queue, or an order the reordering search tries.
    pub(crate) fn add_pair(&mut self, ahead: Asking<R>, behind: Asking<R>, passes: bool) {
        let (from, owner_of) = if passes {
            (ahead, behind)
        } else {
            self.add_edge(Node::Request(behind.request), Node::Request(ahead.request));
            (behind, ahead)
        };
        if let Some(owner) = owner_of.fence_owner.filter(|&o| o != from.requester) {
            self.add_edge(Node::Request(from.request), Node::Actor(owner));
        }
    }

    /// Adds one edge (an event's edge that no request's judgement drew
    /// yet: a fence about to be granted, a request about to queue).
    pub(crate) fn add_edge(&mut self, from: Node<R>, to: Node<R>) {
        self.graph.add_edge(from, to, ());
    }

    /// Whether the graph has a cycle.
    pub(crate) fn is_cyclic(&self) -> bool {
        petgraph::algo::is_cyclic_directed(&self.graph)
    }

    /// The strongly connected components with a cycle.
    pub(crate) fn cyclic_components(&self) -> Vec<Vec<Node<R>>> {
        petgraph::algo::tarjan_scc(&self.graph)
            .into_iter()
            .filter(|component| component.len() > 1)
            .collect()
    }

    /// A cycle inside the strongly connected component `component`: the
    /// walk from its least node along least successors until a node
    /// repeats (deterministic, whatever order the component came in).
    pub(crate) fn cycle_in(&self, component: &[Node<R>]) -> Option<Vec<Node<R>>> {
        let members: HashSet<Node<R>> = component.iter().copied().collect();
        let start = *component.iter().min()?;
        let mut path = vec![start];
        let mut index: HashMap<Node<R>, usize> = HashMap::from([(start, 0)]);
        loop {
            let here = *path.last()?;
            let next = self
                .graph
                .neighbors(here)
                .filter(|n| members.contains(n))
                .min()?;
            if let Some(&at) = index.get(&next) {
                path.drain(..at);
                return Some(path);
            }
            index.insert(next, path.len());
            path.push(next);
        }
    }

    /// The shortest cycle through `request`, as its nodes from `request`
    /// on (breadth first, so the fewest steps back to it).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn cycle_through(&self, request: R) -> Option<Vec<Node<R>>> {
        let start = Node::Request(request);
        if !self.graph.contains_node(start) {
            return None;
        }
        // The shortest way back from any successor, with `request` ahead.
        let back = self
            .graph
            .neighbors(start)
            .filter_map(|next| shortest_path(next, start, |n| self.graph.neighbors(n)))
            .min_by_key(Vec::len)?;
        let mut cycle = vec![start];
        cycle.extend(back.into_iter().filter(|&n| n != start));
        Some(cycle)
    }

    /// Whether `to` is reached from `from` in one step or more.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn reaches(&self, from: Node<R>, to: Node<R>) -> bool {
        self.graph.contains_node(from)
            && shortest_path(from, to, |n| self.graph.neighbors(n)).is_some_and(|p| p.len() > 1)
    }

    /// The actors on a shortest path from actor `from` to actor `to`,
    /// `from` first and `to` left out; `None` when `from` does not wait on
    /// `to`.
    pub(crate) fn actors_on_path(&self, from: ActorId, to: ActorId) -> Option<Vec<ActorId>> {
        if !self.graph.contains_node(Node::Actor(from)) {
            return None;
        }
        let path = shortest_path(Node::Actor(from), Node::Actor(to), |n| {
            self.graph.neighbors(n)
        })?;
        Some(
            path.into_iter()
                .filter_map(|node| match node {
                    Node::Actor(actor) if actor != to => Some(actor),
                    _ => None,
                })
                .collect(),
        )
    }

    /// A slot wait that can never end (SPEC §11): `requester` waits for a
    /// slot of a limit whose live holders are `holders`, and every one of
    /// them waits, directly or through others, on `requester` — so none
    /// can give a slot back before it stops waiting. A slot wait is an
    /// "any of them" wait: one holder that waits elsewhere, or not at all,
    /// is no deadlock. Returns every actor of the cycle (§4 names them
    /// all): the requester, then each holder followed by the actors its
    /// wait passes through on its way back to the requester, each once.
    pub(crate) fn slot_cycle(
        &self,
        requester: ActorId,
        holders: &[ActorId],
    ) -> Option<Vec<ActorId>> {
        if holders.is_empty() {
            return None;
        }
        let mut cycle = vec![requester];
        for &holder in holders {
            if holder == requester {
                continue;
            }
            for actor in self.actors_on_path(holder, requester)? {
                if !cycle.contains(&actor) {
                    cycle.push(actor);
                }
            }
        }
        Some(cycle)
    }
}

/// A cycle's nodes as its actors, in order: each request stands for its
/// actor (`actor_of`; `None` leaves it out), one actor twice in a row
/// counts once, and the cycle does not end where it began.
pub(crate) fn actors_of<R>(
    cycle: impl IntoIterator<Item = Node<R>>,
    actor_of: impl Fn(R) -> Option<ActorId>,
) -> Vec<ActorId> {
    let mut actors: Vec<ActorId> = Vec::new();
    for node in cycle {
        let actor = match node {
            Node::Actor(a) => Some(a),
            Node::Request(r) => actor_of(r),
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
    actors
}

/// A shortest path from `start` to `goal` (both included) in the graph
/// whose successors `next` gives, or `None` when `goal` cannot be reached.
pub(crate) fn shortest_path<N, I>(start: N, goal: N, mut next: impl FnMut(N) -> I) -> Option<Vec<N>>
where
    N: Copy + Eq + Hash,
    I: IntoIterator<Item = N>,
{
    let mut parent: HashMap<N, N> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        if node == goal {
            break;
        }
        for after in next(node) {
            if after != start && !parent.contains_key(&after) {
                parent.insert(after, node);
                queue.push_back(after);
            }
        }
    }
    let mut path = vec![goal];
    let mut node = goal;
    while node != start {
        node = *parent.get(&node)?;
        path.push(node);
    }
    path.reverse();
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_path_takes_the_fewest_steps_and_is_none_without_a_way() {
        // 1 -> 2 -> 3 -> 4 and 1 -> 4 -> 5; 6 is reached from nowhere.
        let next = |n: u32| match n {
            1 => vec![2, 4],
            2 => vec![3],
            3 => vec![4],
            4 => vec![5],
            _ => vec![],
        };
        assert_eq!(shortest_path(1, 5, next), Some(vec![1, 4, 5]));
        assert_eq!(shortest_path(2, 5, next), Some(vec![2, 3, 4, 5]));
        assert_eq!(shortest_path(1, 6, next), None);
        assert_eq!(shortest_path(5, 1, next), None);
    }

    #[test]
    fn the_shortest_cycle_through_a_request_is_found_and_folded_onto_actors() {
        // Request 10 of actor 1 waits on actor 2's fence; request 20 of
        // actor 2 queues behind request 30 of actor 3, which waits on
        // actor 1's fence.
        let mut graph: WaitGraph<u64> = WaitGraph::default();
        let edges = |fences: &[u64], earlier: &[u64]| WaitEdges {
            fences: fences.iter().map(|&a| ActorId(a)).collect(),
            earlier: earlier.to_vec(),
            asked: Vec::new(),
            passed: Vec::new(),
        };
        graph.add_request(10, ActorId(1), &edges(&[2], &[]), |w| w, None);
        graph.add_request(30, ActorId(3), &edges(&[1], &[]), |w| w, None);
        assert_eq!(graph.cycle_through(10), None);
        assert!(!graph.is_cyclic());
        assert!(!graph.reaches(Node::Actor(ActorId(2)), Node::Actor(ActorId(1))));
        graph.add_request(20, ActorId(2), &edges(&[], &[30]), |w| w, None);
        let cycle = graph.cycle_through(20).unwrap();
        assert_eq!(cycle.first(), Some(&Node::Request(20)));
        let actor = |r: u64| Some(ActorId(r / 10));
        assert_eq!(
            actors_of(cycle, actor),
            [ActorId(2), ActorId(3), ActorId(1)]
        );
        assert!(graph.reaches(Node::Actor(ActorId(2)), Node::Actor(ActorId(1))));
        assert!(!graph.reaches(Node::Actor(ActorId(4)), Node::Actor(ActorId(1))));
        assert_eq!(graph.cyclic_components().len(), 1);
    }
}
