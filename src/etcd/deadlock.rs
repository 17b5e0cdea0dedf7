//! The wait-for graph of a session in etcd, and which request acts when
//! it has a cycle.
//!
//! Pure. Each waiting request keeps one edge record (`P e/<waiter>`): its
//! actor, its queue revision, and the edges the core's judgement drew for
//! it (`core::judge::wait_edges`). The records of one read are drawn into
//! the core's own graph ([`WaitGraph`]), which the in-process table builds
//! too, and searched with its searches: the shortest cycle through a
//! request, and a slot deadlock. What is etcd's own is only who acts: a
//! request acts on a cycle through it only if it is the newest request of
//! the cycle — the one that closed it — so that of the tables that see one
//! cycle, exactly one request acts (reorders the queue, or is refused),
//! whichever table looks first.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::core::judge::WaitEdges;
use crate::core::table::ActorId;
use crate::core::wait_graph::{Node, WaitGraph, actors_of};

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
/// decided (with `mine`), drawn into the core's [`WaitGraph`], and the
/// actors' names.
struct Read<'a> {
    graph: WaitGraph<u64>,
    records: HashMap<u64, &'a Edges>,
    names: HashMap<u64, &'a str>,
}

impl<'a> Read<'a> {
    fn new(me: u64, mine: &'a Edges, others: &'a BTreeMap<u64, Edges>) -> Self {
        let mut records: HashMap<u64, &Edges> = others
            .iter()
            .filter(|(w, _)| **w != me)
            .map(|(&w, e)| (w, e))
            .collect();
        records.insert(me, mine);
        let mut graph = WaitGraph::default();
        // A request whose record is gone waits on nothing: the edges of
        // the others name only requests that still have one.
        let present = |ws: &[u64]| -> Vec<u64> {
            ws.iter()
                .copied()
                .filter(|w| records.contains_key(w))
                .collect()
        };
        for (&w, edges) in &records {
            let drawn = WaitEdges {
                fences: edges
                    .hard
                    .iter()
                    .map(|(owner, _)| ActorId(*owner))
                    .collect(),
                earlier: present(&edges.soft),
                asked: edges.asked.iter().map(|&a| ActorId(a)).collect(),
                passed: present(&edges.passed),
            };
            graph.add_request(
                w,
                ActorId(edges.actor),
                &drawn,
                |v| v,
                edges.fence_owner.map(ActorId),
            );
        }
        let mut names: HashMap<u64, &str> = HashMap::new();
        for edges in records.values() {
            names.insert(edges.actor, &edges.name);
        }
        for edges in records.values() {
            for (owner, name) in &edges.hard {
                names.entry(*owner).or_insert(name);
            }
        }
        Read {
            graph,
            records,
            names,
        }
    }

    fn name(&self, actor: ActorId) -> String {
        self.names
            .get(&actor.0)
            .map_or_else(|| actor.0.to_string(), |n| n.to_string())
    }

    fn names(&self, actors: Vec<ActorId>) -> Vec<String> {
        actors.into_iter().map(|a| self.name(a)).collect()
    }
}

/// A slot wait that can never end (SPEC §11), judged for request `me`
/// (with `mine`): the `child_wait` `waiter` waits for a slot of a limit
/// whose live holders are `holders` (ids and names), and every one of them
/// waits, directly or through others, on the `child_wait`'s requester — so
/// none can give a slot back first ([`WaitGraph::slot_cycle`]).
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
    let read = Read::new(me, mine, others);
    let wait = read.records.get(&waiter)?;
    let requester = ActorId(wait.actor);
    let holder_ids: Vec<ActorId> = holders.iter().map(|&(h, _)| ActorId(h)).collect();
    let mut actors = read.graph.slot_cycle(requester, &holder_ids)?;
    let mut newest = (wait.queued, waiter);
    for (&w, edges) in &read.records {
        let holds_a_slot = holder_ids.contains(&ActorId(edges.actor));
        if holds_a_slot && read.graph.reaches(Node::Request(w), Node::Actor(requester)) {
            newest = newest.max((edges.queued, w));
        }
    }
    if newest.1 != me {
        return None;
    }
    if let Some(at) = actors.iter().position(|&a| a == ActorId(mine.actor)) {
        actors.rotate_left(at);
    }
    Some(read.names(actors))
}

fn find_cycle(
    me: u64,
    mine: &Edges,
    others: &BTreeMap<u64, Edges>,
    newest_only: bool,
) -> Option<Vec<String>> {
    let read = Read::new(me, mine, others);
    let cycle = read.graph.cycle_through(me)?;
    // The newest request on the cycle is refused; ties go by id.
    let newest = cycle
        .iter()
        .filter_map(|n| match *n {
            Node::Request(w) => read.records.get(&w).map(|e| (e.queued, w)),
            Node::Actor(_) => None,
        })
        .max()?;
    if newest_only && newest.1 != me {
        return None;
    }
    let actors = actors_of(cycle, |w| read.records.get(&w).map(|e| ActorId(e.actor)));
    Some(read.names(actors))
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
