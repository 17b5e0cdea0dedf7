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
//! The graph is kept acyclic. A cycle is looked for when a request is about
//! to wait (its own edges, and the edges of lower-priority waiters it jumps
//! ahead of) and when a fence is granted past lower-priority waiters (their
//! new hard edges). Every other event (grants in the wake-up scan, releases,
//! cancellations) only removes edges or turns a soft edge to a fence request
//! into the hard edge it already stood for — except that a fence granted or
//! released changes whom the owner's precedence passes, so after those
//! [`closed_cycle`] is asked.
//!
//! A cycle found is first handed to the reordering search ([`Orders`]), as
//! PostgreSQL's `deadlock.c` does with soft edges (`FindLockCycle`,
//! `ExpandConstraints`, `TopoSort`): soft edges are queue order, and a
//! different order may leave no cycle at all. A move puts a waiting request
//! just ahead of a request of the same priority it queues behind on a
//! cycle (never across priorities; a `child_wait` is never moved); the
//! search tries moves breadth first, up to [`MAX_MOVES`] moves and
//! [`MAX_TRIES`] orders judged, and the first order with no cycle is applied
//! ([`Verdict::Reorder`], then the wake-up scan over every waiter). Only a
//! cycle that no such order removes is refused: the new request, the fence
//! grant, or the newest waiting request on the cycle. The search runs only
//! once a cycle was found, so the common path never pays for it.
//!
//! The dump shows the graph folded onto actors ([`WaitEdge`]).

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use serde::Serialize;

use crate::core::judge;
use crate::core::queue::{Need, Pos, WaiterId};
use crate::core::state::{Blocker, State};
use crate::core::table::{ActorId, Claim, HoldKind, conflict};
use crate::core::wait_graph::{Asking, Node, WaitGraph, actors_of};

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

/// The in-process graph: a request is one in the queue, or the one being
/// decided ([`Who::New`]).
type Graph = WaitGraph<Who>;

/// A request as the graph sees it.
#[derive(Clone, Copy)]
struct Req<'a> {
    id: Who,
    requester: ActorId,
    claim: &'a Claim,
    /// The owner its hold will have, when that hold is a fence.
    fence_owner: Option<ActorId>,
}

impl Req<'_> {
    fn asking(&self) -> Asking<Who> {
        Asking {
            request: self.id,
            requester: self.requester,
            fence_owner: self.fence_owner,
        }
    }
}

/// Adds the edges of `req`, queued at `at`, as the core's judgement draws
/// them ([`judge::wait_edges`]).
fn add_request(graph: &mut Graph, state: &State, req: &Req<'_>, at: Pos) {
    let edges = judge::wait_edges(&state.view(None), req.requester, req.claim, at);
    graph.add_request(req.id, req.requester, &edges, Who::Queued, req.fence_owner);
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
                    id: Who::Queued(w.id),
                    requester: w.requester,
                    claim: &w.claim,
                    fence_owner: judge::fence_owner(&w.claim),
                },
            ))
        })
        .collect()
}

/// The graph of the current queue, plus `new` (if any) as if queued at
/// `Pos` — with the edges of the waiters behind it that it would block.
/// Earlier conflicting waiters come from the queue's path index.
fn build(state: &State, new: Option<(Req<'_>, Pos)>) -> Graph {
    let reqs = waiting(state);
    let mut graph = Graph::default();
    for (pos, req) in &reqs {
        add_request(&mut graph, state, req, *pos);
    }
    if let Some((new, at)) = new {
        add_request(&mut graph, state, &new, at);
        for (_, behind) in reqs.iter().filter(|(pos, _)| *pos > at) {
            if conflict(behind.claim, new.claim).is_none() {
                continue;
            }
            let passes = state.passes(new.claim, behind.claim);
            graph.add_pair(new.asking(), behind.asking(), passes);
        }
    }
    graph
}

/// A cycle in an acyclic-but-for-new-edges graph, as actor ids.
fn find_cycle(graph: &Graph, state: &State) -> Option<Vec<ActorId>> {
    let component = graph.cyclic_components().into_iter().next()?;
    cycle_in(graph, state, &component)
}

/// A cycle inside the strongly connected component `component`, as actor
/// ids.
fn cycle_in(graph: &Graph, state: &State, component: &[Node<Who>]) -> Option<Vec<ActorId>> {
    let path = graph.cycle_in(component)?;
    let owners: HashMap<WaiterId, ActorId> =
        state.queue.entries().map(|w| (w.id, w.requester)).collect();
    Some(actors_of(path, |who| match who {
        Who::Queued(w) => owners.get(&w).copied(),
        Who::New => None,
    }))
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

/// What queuing this request does to the wait-for graph: nothing cyclic
/// ([`Verdict::Free`]); a cycle that the moves of [`Verdict::Reorder`]
/// remove (the request queues, then the moves are applied with the
/// request as [`Who::New`]); or a cycle no reordering within the bound
/// removes ([`Verdict::Deadlock`], actor ids, requester first).
pub(crate) fn cycle_if_waiting(
    state: &State,
    requester: ActorId,
    claim: &Claim,
    need: &Need,
    (priority, refusals): (i32, u32),
) -> Verdict {
    let new = Req {
        id: Who::New,
        requester,
        claim,
        fence_owner: judge::fence_owner(claim),
    };
    let at = Pos::end_of_tier(priority, refusals);
    let graph = build(state, Some((new, at)));
    if let Some(slot) = state.slot_wait(claim, need, at) {
        if let Some(cycle) = graph.slot_cycle(requester, &slot_holders(state, slot)) {
            return Verdict::Deadlock(cycle);
        }
    }
    // A holder of a slot that starts waiting may catch a slot wait queued
    // earlier.
    for (pos, waiter) in state.queue.children_ahead(Pos::end_of(i32::MIN)) {
        if let Some(slot) = state.slot_wait(&waiter.claim, &waiter.need, pos) {
            if slot_holders(state, slot).contains(&requester) {
                if let Some(cycle) = graph.slot_cycle(waiter.requester, &slot_holders(state, slot))
                {
                    return Verdict::Deadlock(starting_with(cycle, requester));
                }
            }
        }
    }
    if !graph.is_cyclic() {
        return Verdict::Free;
    }
    let movable = matches!(need, Need::Hold);
    if let Some(moves) = reorder_queue(
        state,
        Some((claim, requester, (priority, refusals), movable)),
        &[],
    ) {
        return Verdict::Reorder(moves);
    }
    match find_cycle(&graph, state) {
        Some(cycle) => Verdict::Deadlock(starting_with(cycle, requester)),
        None => Verdict::Deadlock(vec![requester]),
    }
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

/// What granting `claim` (a fence of `claim.owner`) now does to the graph
/// through the waiters it would block (each gains a hard edge to the
/// owner): nothing cyclic; a cycle the moves remove (apply them, then
/// grant); or a cycle no reordering removes (actor ids, owner first).
pub(crate) fn cycle_if_granted(state: &State, claim: &Claim) -> Verdict {
    if claim.kind != HoldKind::Fence {
        return Verdict::Free;
    }
    let blocked: Vec<WaiterId> = state
        .queue
        .entries()
        .filter(|w| w.is_waiting())
        .filter(|w| w.requester != claim.owner && conflict(&w.claim, claim).is_some())
        .map(|w| w.id)
        .collect();
    if blocked.is_empty() {
        return Verdict::Free;
    }
    let mut graph = build(state, None);
    for &id in &blocked {
        graph.add_edge(Node::Request(Who::Queued(id)), Node::Actor(claim.owner));
    }
    if !graph.is_cyclic() {
        return Verdict::Free;
    }
    let extra: Vec<(Option<WaiterId>, ActorId)> = blocked
        .into_iter()
        .map(|id| (Some(id), claim.owner))
        .collect();
    if let Some(moves) = reorder_queue(state, None, &extra) {
        return Verdict::Reorder(moves);
    }
    match find_cycle(&graph, state) {
        Some(cycle) => Verdict::Deadlock(starting_with(cycle, claim.owner)),
        None => Verdict::Deadlock(vec![claim.owner]),
    }
}

/// A cycle in the current wait-for graph (which a fence granted or
/// released may have closed), if any.
pub(crate) struct Closed {
    /// The newest waiting request on a cycle (on any, when several stand):
    /// the one refused when no reordering removes every cycle.
    pub(crate) newest: WaiterId,
    /// The cycle as actor ids, `newest`'s actor first.
    pub(crate) cycle: Vec<ActorId>,
    /// Moves that leave the graph acyclic, when the search found some.
    pub(crate) moves: Option<Vec<Move>>,
}

/// A cycle in the current wait-for graph, with the moves that remove every
/// cycle if the bounded search finds them.
pub(crate) fn closed_cycle(state: &State) -> Option<Closed> {
    if !state.queue.has_waiting() {
        return None;
    }
    let graph = build(state, None);
    if !graph.is_cyclic() {
        return None;
    }
    // The newest waiting request on any cycle: a node is on a cycle exactly
    // when its strongly connected component has more than one node. Taking
    // the newest of every such component, not of the first one the search
    // returns, keeps the choice independent of the order components are
    // found in (several cycles can stand when no order within the search's
    // bound removes them all, though each alone could be). Every component
    // with an edge holds a request: actors only point at requests.
    let (newest, scc) = graph
        .cyclic_components()
        .into_iter()
        .filter_map(|component| {
            let newest = component
                .iter()
                .filter_map(|node| match node {
                    Node::Request(Who::Queued(id)) => Some(*id),
                    Node::Request(Who::New) | Node::Actor(_) => None,
                })
                .max()?;
            Some((newest, component))
        })
        .max_by_key(|(newest, _)| *newest)?;
    let requester = state.queue.get(newest)?.requester;
    let cycle = cycle_in(&graph, state, &scc)?;
    Some(Closed {
        newest,
        cycle: starting_with(cycle, requester),
        moves: reorder_queue(state, None, &[]),
    })
}

/// [`reorder`] over the in-process queue, plus `new` (its claim,
/// requester, priority and refusals, and whether it may move) queued
/// where it will queue, with the moves in the queue's terms.
fn reorder_queue(
    state: &State,
    new: Option<(&Claim, ActorId, (i32, u32), bool)>,
    extra: &[(Option<WaiterId>, ActorId)],
) -> Option<Vec<Move>> {
    let mut waiting: Vec<Waiting<'_, WaiterId>> = state
        .queue
        .entries()
        .filter(|w| w.is_waiting())
        .map(|w| Waiting {
            id: Some(w.id),
            requester: w.requester,
            claim: &w.claim,
            priority: w.priority,
            movable: matches!(w.need, Need::Hold),
        })
        .collect();
    if let Some((claim, requester, (priority, refusals), movable)) = new {
        // Where it will queue: by priority, then refusals (SPEC §6).
        let end = Pos::end_of_tier(priority, refusals);
        let at = waiting
            .iter()
            .take_while(|w| {
                w.id.and_then(|id| state.queue.pos_of(id))
                    .is_some_and(|pos| pos < end)
            })
            .count();
        waiting.insert(
            at,
            Waiting {
                id: None,
                requester,
                claim,
                priority,
                movable,
            },
        );
    }
    let moves = reorder(&state.view(None), waiting, Pos::end_of(i32::MIN), extra)?;
    debug_assert!(
        !moves.is_empty(),
        "the search's graph lost the cycle the queue's graph has"
    );
    let who = |id: Option<WaiterId>| id.map_or(Who::New, Who::Queued);
    Some(
        moves
            .into_iter()
            .map(|(waiter, of)| Move {
                waiter: who(waiter),
                of: who(of),
            })
            .collect(),
    )
}

/// Who a move of the reordering search moves, or moves ahead of; also a
/// request of the in-process wait-for graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Who {
    /// A request in the queue.
    Queued(WaiterId),
    /// The request being decided, once it is queued.
    New,
}

/// One word per request: the graph hashes its nodes on every edge it
/// adds, and building it is most of what a new wait costs.
impl std::hash::Hash for Who {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Who::Queued(id) => id.0.hash(state),
            Who::New => u64::MAX.hash(state),
        }
    }
}

/// One move of the reordering search: `waiter` goes just ahead of `of`, a
/// request of the same priority queued ahead of it (PostgreSQL's
/// constraint "waiter before blocker", applied as its `TopoSort` applies a
/// single constraint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Move {
    pub(crate) waiter: Who,
    pub(crate) of: Who,
}

/// What an event does to the wait-for graph.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// No cycle.
    Free,
    /// A cycle that these moves of the queue remove; apply them in order.
    Reorder(Vec<Move>),
    /// A cycle that no reordering within the bound removes.
    Deadlock(Vec<ActorId>),
}

/// The most moves one reordering may make.
const MAX_MOVES: usize = 2;

/// The most reorderings one search judges.
const MAX_TRIES: usize = 64;

/// A waiting request as the reordering search sees it.
pub(crate) struct Waiting<'a, W> {
    /// The request, or `None` for the one being decided (not queued yet).
    pub(crate) id: Option<W>,
    pub(crate) requester: ActorId,
    pub(crate) claim: &'a Claim,
    pub(crate) priority: i32,
    /// Only a request that asks for keys alone may be moved: a
    /// `child_wait` keeps its place, since the slots it reserves depend on
    /// it (§11).
    pub(crate) movable: bool,
}

/// The search's graph: a request is named by its index among the items.
type OrderGraph = WaitGraph<usize>;

/// Two requests that conflict, `a` and `b` (indices of items), and
/// whether each passes the other by the owner's precedence when behind it.
struct Pair {
    a: usize,
    b: usize,
    b_passes_a: bool,
    a_passes_b: bool,
}

/// The wait-for graph as a function of queue order, for the reordering
/// search: the edges no order changes (actor to request, hard edges, and
/// `extra`), and the conflicting pairs whose edges follow from which of
/// the two is ahead.
struct Orders<'a, W> {
    items: Vec<Waiting<'a, W>>,
    fixed: Vec<(Node<usize>, Node<usize>)>,
    pairs: Vec<Pair>,
}

/// Moves of the reordering search in a table's terms: `(waiter, ahead of)`,
/// `None` standing for the request being decided.
pub(crate) type Moves<W> = Vec<(Option<W>, Option<W>)>;

/// The moves that leave a table's wait-for graph without a cycle, if the
/// bounded search finds some (none when it has no cycle): each
/// `(waiter, ahead of)`, `None` standing for the request being decided. `waiting` is every waiting request in
/// queue order, the one being decided (if any) at its place; `end` is a
/// place behind them all; `extra` adds, for a fence about to be granted,
/// the hard edges of the requests it would block to its owner. Both tables
/// ask this one search, each through its [`View`](judge::View), so a soft
/// cycle ends the same way in process and in etcd.
pub(crate) fn reorder<V: judge::View>(
    view: &V,
    waiting: Vec<Waiting<'_, V::Waiter>>,
    end: V::Place,
    extra: &[(Option<V::Waiter>, ActorId)],
) -> Option<Moves<V::Waiter>>
where
    V::Waiter: std::hash::Hash,
{
    let orders = Orders::of(view, waiting, end, extra);
    let order: Vec<usize> = (0..orders.items.len()).collect();
    orders.search(order)
}

impl<'a, W: Copy + Eq + std::hash::Hash> Orders<'a, W> {
    fn of<V: judge::View<Waiter = W>>(
        view: &V,
        items: Vec<Waiting<'a, W>>,
        end: V::Place,
        extra: &[(Option<W>, ActorId)],
    ) -> Self {
        let index: HashMap<Option<W>, usize> = items
            .iter()
            .enumerate()
            .map(|(i, item)| (item.id, i))
            .collect();
        let passes =
            |earlier: &Claim, claim: &Claim| judge::passing_fence(view, earlier, claim).is_some();
        let mut paired: HashSet<(usize, usize)> = HashSet::new();
        let mut pairs = Vec::new();
        for (a, item) in items.iter().enumerate() {
            let mut add = |b: usize| {
                let (a, b) = (a.min(b), a.max(b));
                if a != b && paired.insert((a, b)) {
                    pairs.push(Pair {
                        a,
                        b,
                        b_passes_a: passes(items[a].claim, items[b].claim),
                        a_passes_b: passes(items[b].claim, items[a].claim),
                    });
                }
            };
            match item.id {
                Some(_) => {
                    let _ = view.visit_waiters(item.claim, end, |_, id, _, _| {
                        if let Some(&b) = index.get(&Some(id)) {
                            add(b);
                        }
                        ControlFlow::<()>::Continue(())
                    });
                }
                // Not queued, so no visit finds it: judged against each.
                None => {
                    for (b, other) in items.iter().enumerate() {
                        if conflict(other.claim, item.claim).is_some() {
                            add(b);
                        }
                    }
                }
            }
        }
        let mut fixed: Vec<(Node<usize>, Node<usize>)> = extra
            .iter()
            .filter_map(|(id, owner)| {
                let &i = index.get(id)?;
                Some((Node::Request(i), Node::Actor(*owner)))
            })
            .collect();
        for (i, item) in items.iter().enumerate() {
            fixed.push((Node::Actor(item.requester), Node::Request(i)));
            for owner in judge::fence_owners_in_the_way(view, item.requester, item.claim) {
                fixed.push((Node::Request(i), Node::Actor(owner)));
            }
        }
        Orders {
            items,
            fixed,
            pairs,
        }
    }

    /// Each item's place in `order`.
    fn places(&self, order: &[usize]) -> Vec<usize> {
        let mut at = vec![0; self.items.len()];
        for (place, &item) in order.iter().enumerate() {
            at[item] = place;
        }
        at
    }

    /// A pair as `order` puts it: (ahead, behind, behind passes ahead).
    fn arranged(pair: &Pair, at: &[usize]) -> (usize, usize, bool) {
        if at[pair.a] < at[pair.b] {
            (pair.a, pair.b, pair.b_passes_a)
        } else {
            (pair.b, pair.a, pair.a_passes_b)
        }
    }

    /// Item `i` as the graph sees it.
    fn asking(&self, i: usize) -> Asking<usize> {
        let item = &self.items[i];
        Asking {
            request: i,
            requester: item.requester,
            fence_owner: judge::fence_owner(item.claim),
        }
    }

    /// The graph under `order`.
    fn graph(&self, order: &[usize]) -> OrderGraph {
        let at = self.places(order);
        let mut graph = OrderGraph::default();
        for &(from, to) in &self.fixed {
            graph.add_edge(from, to);
        }
        for pair in &self.pairs {
            let (ahead, behind, passes) = Self::arranged(pair, &at);
            graph.add_pair(self.asking(ahead), self.asking(behind), passes);
        }
        graph
    }

    /// The moves worth trying under `order`: (waiter, ahead of) for every
    /// soft edge on a cycle of `graph` — a waiter queued behind a
    /// conflicting request of its priority that it does not pass, where
    /// the edge to that request (or to the owner of the fence it asks for)
    /// lies on a cycle. The latest waiter first, then the shortest move.
    fn candidates(&self, order: &[usize], graph: &OrderGraph) -> Vec<(usize, usize)> {
        let mut component: HashMap<Node<usize>, usize> = HashMap::new();
        for (c, nodes) in graph.cyclic_components().into_iter().enumerate() {
            component.extend(nodes.into_iter().map(|n| (n, c)));
        }
        let on_cycle = |from: Node<usize>, to: Node<usize>| {
            component
                .get(&from)
                .is_some_and(|c| component.get(&to) == Some(c))
        };
        let at = self.places(order);
        let mut found: Vec<(usize, usize)> = Vec::new();
        for pair in &self.pairs {
            let (ahead, behind, passes) = Self::arranged(pair, &at);
            let (a, b) = (&self.items[ahead], &self.items[behind]);
            if passes || a.priority != b.priority || !b.movable {
                continue;
            }
            let soft_owner = judge::fence_owner(a.claim)
                .filter(|&owner| owner != b.requester)
                .is_some_and(|owner| on_cycle(Node::Request(behind), Node::Actor(owner)));
            if on_cycle(Node::Request(behind), Node::Request(ahead)) || soft_owner {
                found.push((behind, ahead));
            }
        }
        found.sort_by_key(|&(w, v)| (std::cmp::Reverse(at[w]), std::cmp::Reverse(at[v])));
        found
    }

    /// Breadth first over moves from `order`: every candidate move, then
    /// every candidate move after each of those, up to [`MAX_MOVES`] moves
    /// and [`MAX_TRIES`] orders judged; the first order whose graph has no
    /// cycle wins. The search runs only when a cycle was found, so the
    /// common path never pays for it.
    fn search(&self, order: Vec<usize>) -> Option<Moves<W>> {
        if !self.graph(&order).is_cyclic() {
            return Some(Vec::new());
        }
        let mut tries = 0;
        // Each order reached, with the moves (waiter, ahead of) that made it.
        type Reached = (Vec<usize>, Vec<(usize, usize)>);
        let mut frontier: Vec<Reached> = vec![(order, Vec::new())];
        for _ in 0..MAX_MOVES {
            let mut next = Vec::new();
            for (order, moves) in &frontier {
                let graph = self.graph(order);
                for (waiter, of) in self.candidates(order, &graph) {
                    if tries == MAX_TRIES {
                        return None;
                    }
                    tries += 1;
                    let mut moved: Vec<usize> =
                        order.iter().copied().filter(|&i| i != waiter).collect();
                    let Some(at) = moved.iter().position(|&i| i == of) else {
                        continue;
                    };
                    moved.insert(at, waiter);
                    let mut moves = moves.clone();
                    moves.push((waiter, of));
                    if !self.graph(&moved).is_cyclic() {
                        return Some(
                            moves
                                .into_iter()
                                .map(|(w, of)| (self.items[w].id, self.items[of].id))
                                .collect(),
                        );
                    }
                    next.push((moved, moves));
                }
            }
            frontier = next;
        }
        None
    }
}

/// Every edge of the current wait-for graph, folded onto actors
/// ([`folded`]): each waiting request's hard and soft edges, as
/// [`judge::wait_edges`] draws them.
pub(crate) fn wait_for_edges(state: &State) -> Vec<WaitEdge> {
    let view = state.view(None);
    let mut edges = Vec::new();
    for (pos, req) in waiting(state) {
        let found = judge::wait_edges(&view, req.requester, req.claim, pos);
        for to in found.fences {
            edges.push(WaitEdge {
                from: req.requester,
                to,
                hard: true,
            });
        }
        for earlier in found.earlier.iter().filter_map(|&w| state.queue.get(w)) {
            edges.push(WaitEdge {
                from: req.requester,
                to: earlier.claim.owner,
                hard: false,
            });
        }
    }
    folded(edges)
}

/// Wait-for edges as the dump shows them (SPEC §5), on both tables: one
/// per pair of actors (hard when any edge between them is), none from an
/// actor to itself. A soft edge points at the earlier request's claim
/// owner: its actor, or for a `child_wait` the child it would make.
pub(crate) fn folded(mut edges: Vec<WaitEdge>) -> Vec<WaitEdge> {
    edges.retain(|e| e.from != e.to);
    edges.sort_by_key(|e| (e.from, e.to, !e.hard));
    edges.dedup_by_key(|e| (e.from, e.to));
    edges
}
