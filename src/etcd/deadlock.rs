//! The wait-for graph of a session in etcd, and who is refused when it has
//! a cycle.
//!
//! Pure. Each waiting request keeps one edge record (`P e/<waiter>`): its
//! actor, its queue revision, and the edges the core's judgement drew for
//! it (`core::judge::wait_edges`): the owners of the fences in its way
//! (hard edges), the earlier requests in its way that it does not pass
//! (soft edges) and the owners of the fences those ask for, and the earlier
//! requests it passes. The graph's nodes are actors and waiting requests,
//! as in the core (SPEC §4's refinement): actor → each of its waiting
//! requests, request → owners of fences in its way, request → earlier
//! requests in its way and the owners of the fences they ask for, and a
//! request passed by a fence request → that fence's owner. A cycle through a request is refused on that request only if it is
//! the newest request of the cycle — the one that closed it — so that of
//! the tables that see one cycle, exactly one request is refused, whichever
//! table looks first.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::core::deadlock::shortest_path;

/// A waiting request's edges, as its record holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Edges {
    pub(crate) actor: u64,
    pub(crate) name: String,
    /// Its queue revision (`i64::MAX` for a request about to queue).
    pub(crate) queued: i64,
    /// Owners of live fences in its way, with their names.
    pub(crate) hard: Vec<(u64, String)>,
    /// Earlier waiting requests in its way that it does not pass.
    pub(crate) soft: Vec<u64>,
    /// For a `child_wait` whose paths are free and which waits for a slot
    /// (SPEC §11): the limit. Such a wait has no single edge: it waits on
    /// *any* live child holding a slot of that limit ([`slot_deadlock`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slot: Option<SlotKind>,
    /// Owners of the fences that the earlier requests in its way ask for:
    /// once granted, such a fence is held until its owner's waits are
    /// over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) asked: Vec<u64>,
    /// The earlier requests it passes by its owner's precedence, when it
    /// asks for a fence: each waits on that fence's owner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) passed: Vec<u64>,
    /// The owner of the fence it asks for, if it asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fence_owner: Option<u64>,
}

/// The slot limit a `child_wait` waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SlotKind {
    /// `max_actors`: every live child holds one.
    Actors,
    /// `max_writers`: every live writable child holds one.
    Writers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Node {
    Actor(u64),
    Request(u64),
}

/// The cycle through request `me` (with edges `mine`) in the graph of
/// `others`, if there is one and `me` is the newest request on it: the
/// names of its actors, the requester's first.
pub(crate) fn refused_cycle(
    me: u64,
    mine: &Edges,
    others: &BTreeMap<u64, Edges>,
) -> Option<Vec<String>> {
    find_cycle(me, mine, others, true)
}

/// The cycle through request `me` (with edges `mine`) in the graph of
/// `others`, whichever request on it is the newest: for a grant that would
/// add `mine`'s edges, which is refused instead (SPEC §4: a fence granted
/// past waiters may not close a cycle).
pub(crate) fn cycle_through(
    me: u64,
    mine: &Edges,
    others: &BTreeMap<u64, Edges>,
) -> Option<Vec<String>> {
    find_cycle(me, mine, others, false)
}

/// The graph of one read: `others`' records and the request `me` being
/// decided (with `mine`), its nodes' successors and the actors' names.
struct View<'a> {
    me: u64,
    mine: &'a Edges,
    others: &'a BTreeMap<u64, Edges>,
    requests_of: HashMap<u64, Vec<u64>>,
    /// For each request, the owners of the fence requests that pass it.
    passed_by: HashMap<u64, Vec<u64>>,
    names: HashMap<u64, &'a str>,
}

impl<'a> View<'a> {
    fn new(me: u64, mine: &'a Edges, others: &'a BTreeMap<u64, Edges>) -> Self {
        let mut requests_of: HashMap<u64, Vec<u64>> = HashMap::new();
        requests_of.entry(mine.actor).or_default().push(me);
        for (&w, edges) in others {
            if w != me {
                requests_of.entry(edges.actor).or_default().push(w);
            }
        }
        // A request passed by a fence request waits on that fence's owner.
        let mut passed_by: HashMap<u64, Vec<u64>> = HashMap::new();
        let records = others
            .iter()
            .filter(|(w, _)| **w != me)
            .chain(std::iter::once((&me, mine)));
        for (_, edges) in records {
            if let Some(owner) = edges.fence_owner {
                for &w in &edges.passed {
                    passed_by.entry(w).or_default().push(owner);
                }
            }
        }
        let mut names: HashMap<u64, &str> = HashMap::new();
        for edges in others.values().chain(std::iter::once(mine)) {
            names.insert(edges.actor, &edges.name);
            for (owner, name) in &edges.hard {
                names.entry(*owner).or_insert(name);
            }
        }
        View {
            me,
            mine,
            others,
            requests_of,
            passed_by,
            names,
        }
    }

    fn record(&self, w: u64) -> Option<&'a Edges> {
        if w == self.me {
            Some(self.mine)
        } else {
            self.others.get(&w)
        }
    }

    fn next(&self, node: Node) -> Vec<Node> {
        match node {
            Node::Actor(a) => self
                .requests_of
                .get(&a)
                .map(|ws| ws.iter().map(|&w| Node::Request(w)).collect())
                .unwrap_or_default(),
            Node::Request(w) => match self.record(w) {
                Some(edges) => edges
                    .hard
                    .iter()
                    .filter(|(owner, _)| *owner != edges.actor)
                    .map(|(owner, _)| Node::Actor(*owner))
                    .chain(
                        edges
                            .soft
                            .iter()
                            .filter(|&&v| self.record(v).is_some())
                            .map(|&v| Node::Request(v)),
                    )
                    .chain(
                        edges
                            .asked
                            .iter()
                            .chain(self.passed_by.get(&w).into_iter().flatten())
                            .filter(|&&owner| owner != edges.actor)
                            .map(|&owner| Node::Actor(owner)),
                    )
                    .collect(),
                None => Vec::new(),
            },
        }
    }

    /// Whether `to` can be reached from `from` (in one step or more).
    fn reaches(&self, from: Node, to: Node) -> bool {
        let mut seen = std::collections::HashSet::from([from]);
        let mut queue = VecDeque::from([from]);
        while let Some(node) = queue.pop_front() {
            for after in self.next(node) {
                if after == to {
                    return true;
                }
                if seen.insert(after) {
                    queue.push_back(after);
                }
            }
        }
        false
    }

    /// The actors on a shortest path from actor `from` to actor `to`,
    /// `from` first and `to` left out; `None` when `from` does not wait on
    /// `to`.
    fn actors_on_path(&self, from: u64, to: u64) -> Option<Vec<u64>> {
        let path = shortest_path(Node::Actor(from), Node::Actor(to), |n| self.next(n))?;
        Some(
            path.into_iter()
                .filter_map(|node| match node {
                    Node::Actor(actor) if actor != to => Some(actor),
                    Node::Actor(_) | Node::Request(_) => None,
                })
                .collect(),
        )
    }

    fn name(&self, actor: u64) -> String {
        self.names
            .get(&actor)
            .map_or_else(|| actor.to_string(), |n| n.to_string())
    }
}

/// A slot wait that can never end (SPEC §11), judged for request `me`
/// (with `mine`): the `child_wait` `waiter` waits for a slot of a limit
/// whose live holders are `holders` (ids and names), and every one of them
/// waits, directly or through others, on the `child_wait`'s requester — so
/// none can give a slot back first. A slot wait is an "any of them" wait:
/// one holder that waits elsewhere, or not at all, is no deadlock.
///
/// Of the requests that make it (the slot wait, and the holders' waiting
/// requests on a path back to the requester) the newest is refused — the
/// one that closed it, as for an ordinary cycle — so `Some` only when that
/// is `me`: the names of every actor on the cycle (the requester, each
/// holder and the actors between it and the requester), `me`'s actor first.
pub(crate) fn slot_deadlock(
    me: u64,
    mine: &Edges,
    others: &BTreeMap<u64, Edges>,
    waiter: u64,
    holders: &[(u64, String)],
) -> Option<Vec<String>> {
    let view = View::new(me, mine, others);
    let wait = view.record(waiter)?;
    let requester = Node::Actor(wait.actor);
    if holders.is_empty()
        || !holders
            .iter()
            .all(|&(h, _)| h == wait.actor || view.reaches(Node::Actor(h), requester))
    {
        return None;
    }
    let mut newest = (wait.queued, waiter);
    for &(h, _) in holders {
        for &w in view.requests_of.get(&h).into_iter().flatten() {
            if let Some(edges) = view.record(w) {
                if view.reaches(Node::Request(w), requester) {
                    newest = newest.max((edges.queued, w));
                }
            }
        }
    }
    if newest.1 != me {
        return None;
    }
    // Every actor of the cycle (SPEC §4): each holder, then the actors its
    // wait passes through on its way back to the requester.
    let mut actors = vec![wait.actor];
    for &(h, _) in holders {
        if h == wait.actor {
            continue;
        }
        for actor in view.actors_on_path(h, wait.actor)? {
            if !actors.contains(&actor) {
                actors.push(actor);
            }
        }
    }
    if let Some(at) = actors.iter().position(|&a| a == mine.actor) {
        actors.rotate_left(at);
    }
    Some(actors.into_iter().map(|a| view.name(a)).collect())
}

fn find_cycle(
    me: u64,
    mine: &Edges,
    others: &BTreeMap<u64, Edges>,
    newest_only: bool,
) -> Option<Vec<String>> {
    let view = View::new(me, mine, others);
    let record = |w: u64| view.record(w);
    let next = |node: Node| view.next(node);
    // Breadth-first from `me`, back to `me`: the shortest cycle through it.
    let start = Node::Request(me);
    let mut parent: HashMap<Node, Node> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    let mut closing = None;
    'search: while let Some(node) = queue.pop_front() {
        for after in next(node) {
            if after == start {
                closing = Some(node);
                break 'search;
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = parent.entry(after) {
                slot.insert(node);
                queue.push_back(after);
            }
        }
    }
    let mut node = closing?;
    let mut cycle = vec![node];
    while node != start {
        node = *parent.get(&node)?;
        cycle.push(node);
    }
    cycle.reverse();
    // The newest request on the cycle is refused; ties go by id.
    let newest = cycle
        .iter()
        .filter_map(|n| match *n {
            Node::Request(w) => record(w).map(|e| (e.queued, w)),
            Node::Actor(_) => None,
        })
        .max()?;
    if newest_only && newest.1 != me {
        return None;
    }
    let mut actors: Vec<u64> = Vec::new();
    for node in cycle {
        let actor = match node {
            Node::Actor(a) => a,
            Node::Request(w) => record(w)?.actor,
        };
        if actors.last() != Some(&actor) {
            actors.push(actor);
        }
    }
    if actors.len() > 1 && actors.first() == actors.last() {
        actors.pop();
    }
    Some(actors.iter().map(|&a| view.name(a)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(actor: u64, queued: i64, hard: &[u64], soft: &[u64]) -> Edges {
        Edges {
            actor,
            name: format!("a{actor}"),
            queued,
            hard: hard.iter().map(|&h| (h, format!("a{h}"))).collect(),
            soft: soft.to_vec(),
            ..Edges::default()
        }
    }

    #[test]
    fn a_slot_wait_is_a_deadlock_only_when_every_holder_waits_on_its_requester() {
        // Request 30 of actor 1 waits for an actor slot; children 2 and 3
        // hold the two slots.
        let mut slot_wait = edges(1, 20, &[], &[]);
        slot_wait.slot = Some(SlotKind::Actors);
        let holders = [(2, "a2".to_string()), (3, "a3".to_string())];
        // Child 2 waits on actor 1's fence, child 3 on nothing: no deadlock.
        let k2 = edges(2, 10, &[1], &[]);
        let others = BTreeMap::from([(30, slot_wait.clone()), (40, k2.clone())]);
        assert_eq!(slot_deadlock(30, &slot_wait, &others, 30, &holders), None);
        // Child 3 waits behind child 2's request: every holder is caught,
        // and the one that closes it (the newest) is refused, by name.
        let k3 = edges(3, 25, &[], &[40]);
        let others = BTreeMap::from([(30, slot_wait.clone()), (40, k2), (50, k3.clone())]);
        assert_eq!(
            slot_deadlock(50, &k3, &others, 30, &holders),
            Some(vec!["a3".into(), "a1".into(), "a2".into()])
        );
        assert_eq!(
            slot_deadlock(30, &slot_wait, &others, 30, &holders),
            None,
            "not the newest"
        );
        // The slot wait arriving last is the one refused.
        let mut arriving = slot_wait.clone();
        arriving.queued = i64::MAX;
        assert_eq!(
            slot_deadlock(u64::MAX, &arriving, &others, u64::MAX, &holders),
            Some(vec!["a1".into(), "a2".into(), "a3".into()])
        );
        // No holder, no deadlock: a slot will not come, but nobody waits on
        // anybody (a limit of 0 is refused elsewhere).
        assert_eq!(slot_deadlock(30, &slot_wait, &others, 30, &[]), None);
    }

    #[test]
    fn fence_requests_draw_edges_to_their_owners_ahead_and_past() {
        // Actor 2's request 10 waits on actor 1's fence; actor 3's fence
        // request 20 passes it (a fence of 3's line blocks it), so 10 waits
        // on 3 too. Actor 3's request 30 then waits on actor 2's fence.
        let passed = edges(2, 5, &[1], &[]);
        let mut fence_request = edges(3, 7, &[], &[]);
        fence_request.passed = vec![10];
        fence_request.fence_owner = Some(3);
        let arriving = edges(3, i64::MAX, &[2], &[]);
        let others = BTreeMap::from([(10, passed.clone()), (20, fence_request.clone())]);
        assert_eq!(
            refused_cycle(u64::MAX, &arriving, &others),
            Some(vec!["a3".into(), "a2".into()])
        );
        // Without the edge past the waiter, no cycle.
        let mut no_owner = fence_request;
        no_owner.fence_owner = None;
        let others = BTreeMap::from([(10, passed.clone()), (20, no_owner)]);
        assert_eq!(refused_cycle(u64::MAX, &arriving, &others), None);
        // A request behind actor 2's fence request waits on actor 2.
        let mut behind = edges(4, i64::MAX, &[], &[40]);
        behind.asked = vec![2];
        let two_waits_on_four = edges(2, 8, &[4], &[]);
        let others = BTreeMap::from([(40, edges(2, 6, &[], &[])), (50, two_waits_on_four)]);
        assert_eq!(
            refused_cycle(u64::MAX, &behind, &others),
            Some(vec!["a4".into(), "a2".into()])
        );
        behind.asked.clear();
        assert_eq!(refused_cycle(u64::MAX, &behind, &others), None);
    }

    #[test]
    fn two_fence_holders_waiting_for_each_other_refuse_the_newer() {
        // Request 10 of actor 1 waits for actor 2's fence; request 20 of
        // actor 2 waits for actor 1's fence.
        let older = edges(1, 5, &[2], &[]);
        let newer = edges(2, 9, &[1], &[]);
        let others = BTreeMap::from([(10, older.clone()), (20, newer.clone())]);
        assert_eq!(
            refused_cycle(20, &newer, &others),
            Some(vec!["a2".into(), "a1".into()])
        );
        assert_eq!(
            refused_cycle(10, &older, &others),
            None,
            "the older one waits on"
        );
        // About to queue: it is the newest of any cycle it closes.
        let arriving = edges(2, i64::MAX, &[1], &[]);
        let only_older = BTreeMap::from([(10, older)]);
        assert!(refused_cycle(u64::MAX, &arriving, &only_older).is_some());
    }

    #[test]
    fn soft_edges_close_cycles_and_parallel_requests_of_one_actor_do_not() {
        // 10 (actor 1) waits for actor 2's fence; 20 (actor 2) queues behind
        // 30 (actor 3), which waits for actor 1's fence.
        let others = BTreeMap::from([(10, edges(1, 1, &[2], &[])), (30, edges(3, 2, &[1], &[]))]);
        let mine = edges(2, 3, &[], &[30]);
        assert_eq!(
            refused_cycle(20, &mine, &others),
            Some(vec!["a2".into(), "a3".into(), "a1".into()])
        );
        // Two requests of one actor behind each other are no cycle.
        let mine = edges(1, 3, &[], &[10]);
        assert_eq!(refused_cycle(11, &mine, &others), None);
    }

    #[test]
    fn a_grant_that_closes_a_cycle_finds_it_whoever_is_newest() {
        // 10 (actor 1) waits for actor 2's fence. Granting actor 1 a fence
        // that 20 (actor 2, the older request) waits for closes the cycle
        // 20 -> 1 -> 10 -> 2 -> 20: the grant is refused, though 20 is not
        // the newest request on it.
        let newer = edges(1, 9, &[2], &[]);
        let older_after_grant = edges(2, 5, &[1], &[]);
        let others = BTreeMap::from([(10, newer), (20, edges(2, 5, &[], &[]))]);
        assert_eq!(refused_cycle(20, &older_after_grant, &others), None);
        assert_eq!(
            cycle_through(20, &older_after_grant, &others),
            Some(vec!["a2".into(), "a1".into()])
        );
        // Actor 1 not waiting: no cycle.
        let idle = BTreeMap::from([(20, edges(2, 5, &[], &[]))]);
        assert_eq!(cycle_through(20, &older_after_grant, &idle), None);
    }
}
