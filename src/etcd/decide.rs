//! What the table read from etcd means, decided by the core's rules.
//!
//! Pure: the records of one read go in, a verdict comes out. The rules are
//! the core's own: a read becomes a [`Snapshot`], which answers the visits
//! of the core's [`View`], and [`judge`] decides — grant rules, the fence
//! owner's precedence, slot reservation, the blockers a wait-for edge
//! stands for. Nothing here restates a rule; it only rebuilds claims from
//! records and names the core's answers in the records' terms.
//!
//! A claim rebuilt from a read holds only the keys the read found, which
//! are exactly its keys that can overlap the request's (the ranges of
//! [`Layout::conflict_ranges`](super::layout::Layout::conflict_ranges)), so
//! `conflict` answers for it as for the whole hold. The precedence needs a
//! waiter's whole claim and the fences of the requester's lineage whole
//! ([`Snapshot::with_whole`], [`Snapshot::with_fences`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::judge::{self, Seats, Slots, View};
use crate::core::key::Key;
use crate::core::queue::WaitCause;
use crate::core::table::{ActorId, Claim, conflict};
use crate::error::SlotLimit;
use crate::kinds::{HoldKind, Mode};

use super::deadlock::Edges;
use super::layout::{Layout, Owner};

/// `HoldKind` as the records spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KindRecord {
    Fence,
    Call,
    Claim,
}

impl From<HoldKind> for KindRecord {
    fn from(kind: HoldKind) -> Self {
        match kind {
            HoldKind::Fence => KindRecord::Fence,
            HoldKind::Call => KindRecord::Call,
            HoldKind::Claim => KindRecord::Claim,
        }
    }
}

impl From<KindRecord> for HoldKind {
    fn from(kind: KindRecord) -> Self {
        match kind {
            KindRecord::Fence => HoldKind::Fence,
            KindRecord::Call => HoldKind::Call,
            KindRecord::Claim => HoldKind::Claim,
        }
    }
}

/// `Mode` as the records spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ModeRecord {
    Shared,
    Exclusive,
}

impl From<Mode> for ModeRecord {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Shared => ModeRecord::Shared,
            Mode::Exclusive => ModeRecord::Exclusive,
        }
    }
}

impl From<ModeRecord> for Mode {
    fn from(mode: ModeRecord) -> Self {
        match mode {
            ModeRecord::Shared => Mode::Shared,
            ModeRecord::Exclusive => Mode::Exclusive,
        }
    }
}

/// Who holds or waits, and how: the part of a record every index entry
/// repeats, so that one read of the index decides without a second one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) owner: u64,
    pub(crate) lineage: Vec<u64>,
    pub(crate) kind: KindRecord,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
    /// Wall-clock milliseconds since the epoch (for ages in messages only).
    pub(crate) since_ms: u64,
    #[serde(default)]
    pub(crate) priority: i32,
    /// A file op's own call hold (a server serving `files.*` took it): as
    /// in process, no `release` or `fence.extend` over the wire can reach
    /// it; the op releases it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) file_op: bool,
    /// For a file op's waiting write: how often its actor's writes to
    /// the file were refused `Stale` since one landed there (SPEC §6): the
    /// most refused writers queue first among one priority.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) refusals: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The value of one index entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EntryValue {
    #[serde(flatten)]
    pub(crate) meta: Meta,
    pub(crate) mode: ModeRecord,
}

/// One key of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    /// The key as the table compares it (folded in a session that folds
    /// case), which is also its index entry's path.
    pub(crate) path: String,
    /// The caller's spelling, when it differs from `path` (SPEC §5: the
    /// dump shows the spelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spelled: Option<String>,
    pub(crate) tree: bool,
    pub(crate) mode: ModeRecord,
}

/// A hold's or waiter's record (`h/`, `f/`, `q/`): every key of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClaimRecord {
    #[serde(flatten)]
    pub(crate) meta: Meta,
    pub(crate) keys: Vec<KeyRecord>,
    /// The hash of the ticket the grant was asked with: its answer key
    /// goes with the hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ticket: Option<String>,
    /// For a waiting `child_wait` (SPEC §11): who asks. The record's
    /// `meta` is the child it would make (so its keys, the grant fence,
    /// conflict and cover as that child's fence will), this the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) child_of: Option<ChildOf>,
    /// For a waiting request taken over by a resume (`Table::resume`):
    /// that takeover's own id, so that each write of the record is told
    /// apart by its value (a clean-up compares on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) taken_over: Option<u64>,
    /// For a claim (SPEC §6): when its lease ends it, in wall-clock
    /// milliseconds since the epoch (for the dump's `ends_in` only: the
    /// lease ends it, whatever the clocks say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) until_ms: Option<u64>,
}

/// The parent of a waiting `child_wait`, and what the child would count
/// against (SPEC §11: every child an actor slot, a writable one a writer
/// slot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChildOf {
    pub(crate) parent: u64,
    pub(crate) parent_name: String,
    #[serde(default)]
    pub(crate) read_only: bool,
}

impl ClaimRecord {
    pub(crate) fn keys(&self) -> Vec<(Key, Mode)> {
        self.keys
            .iter()
            .map(|k| {
                let norm = PathBuf::from(&k.path);
                let key = Key {
                    path: k
                        .spelled
                        .as_ref()
                        .map_or_else(|| norm.clone(), PathBuf::from),
                    norm,
                    tree: k.tree,
                };
                (key, k.mode.into())
            })
            .collect()
    }

    pub(crate) fn claim(&self) -> Claim {
        claim_of(&self.meta, self.keys())
    }
}

pub(crate) fn claim_of(meta: &Meta, keys: Vec<(Key, Mode)>) -> Claim {
    let lineage: Arc<[ActorId]> = meta.lineage.iter().map(|&a| ActorId(a)).collect();
    Claim {
        owner: ActorId(meta.owner),
        lineage,
        kind: meta.kind.into(),
        keys,
    }
}

/// A hold or waiter as one read saw it.
#[derive(Debug, Clone)]
pub(crate) struct Other {
    pub(crate) owner: Owner,
    pub(crate) meta: Meta,
    /// Its keys that the read found.
    pub(crate) claim: Claim,
    /// The revision its entries were created at: the grant's fencing token
    /// for a hold, the queue position for a waiter.
    pub(crate) revision: i64,
    /// For a waiter a reordering moved ([`Moved`]), its place since.
    pub(crate) moved: Option<Moved>,
}

/// Where a reordering of the queue put a waiter (SPEC §4; the record
/// `P p/<waiter>`): among the requests of its priority, where one queued at
/// `revision` stands, and among those of one revision by `step` (an
/// unmoved request's step is 0). A queue place in etcd is otherwise the
/// revision a request queued at, which cannot change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Moved {
    pub(crate) revision: i64,
    pub(crate) step: i64,
}

/// Puts the waiters a reordering moved (`moved`, by waiter id) at their
/// places, and the waiters back in queue order.
pub(crate) fn apply_moves(waiters: &mut [Other], moved: &HashMap<u64, Moved>) {
    for waiter in waiters.iter_mut() {
        if let Owner::Waiter(id) = waiter.owner {
            waiter.moved = moved.get(&id).copied();
        }
    }
    waiters.sort_by_key(|w| w.place());
}

/// The moved places of one read of `P p/` (waiter ids and values; see
/// [`Moved`]). A value that does not parse is no move.
pub(crate) fn moves_in<'a>(
    records: impl IntoIterator<Item = (Option<u64>, &'a [u8])>,
) -> HashMap<u64, Moved> {
    records
        .into_iter()
        .filter_map(|(id, value)| Some((id?, serde_json::from_slice(value).ok()?)))
        .collect()
}

/// Groups index entries (key, value, create revision) into holds and
/// waiters. Holds come in grant order; waiters in queue order (priority,
/// then revision). Entries that do not parse are skipped: nothing but this
/// module writes under the index prefix.
pub(crate) fn group<'a>(
    layout: &Layout,
    entries: impl IntoIterator<Item = (&'a [u8], &'a [u8], i64)>,
) -> (Vec<Other>, Vec<Other>) {
    let mut by_owner: BTreeMap<Owner, Other> = BTreeMap::new();
    for (key, value, revision) in entries {
        let Some((path, tree, owner)) = layout.parse_entry(key) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<EntryValue>(value) else {
            continue;
        };
        let Ok(path) = std::str::from_utf8(path) else {
            continue;
        };
        let path = if path.is_empty() { "/" } else { path };
        let key = (Key::exact(path, tree), Mode::from(value.mode));
        by_owner
            .entry(owner)
            .or_insert_with(|| Other {
                owner,
                claim: claim_of(&value.meta, Vec::new()),
                meta: value.meta,
                revision,
                moved: None,
            })
            .claim
            .keys
            .push(key);
    }
    let (mut holds, mut waiters): (Vec<Other>, Vec<Other>) = by_owner
        .into_values()
        .partition(|o| matches!(o.owner, Owner::Hold(_)));
    holds.sort_by_key(|o| (o.revision, o.owner));
    waiters.sort_by_key(|o| o.place());
    (holds, waiters)
}

/// A place in the queue, ordered front to back (SPEC §4): higher priority
/// first, then more refusals (SPEC §6: the writers a claimed file's
/// refusals held back the longest), then the earlier revision (or the
/// place a reordering gave, [`Moved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Place {
    rank: Reverse<i32>,
    refusals: Reverse<u32>,
    revision: i64,
    step: i64,
    waiter: u64,
}

impl Place {
    /// A request not queued yet: behind every waiter of at least its
    /// priority.
    pub(crate) fn new(priority: i32) -> Place {
        Place {
            rank: Reverse(priority),
            refusals: Reverse(0),
            revision: i64::MAX,
            step: 0,
            waiter: u64::MAX,
        }
    }

    /// The place of `waiter` (`u64::MAX`: not queued yet) that a
    /// reordering moved to `moved`.
    pub(crate) fn moved(priority: i32, waiter: u64, moved: Moved) -> Place {
        Place {
            rank: Reverse(priority),
            refusals: Reverse(0),
            revision: moved.revision,
            step: moved.step,
            waiter,
        }
    }

    /// As a [`Moved`] record: where it stands among its priority.
    pub(crate) fn as_moved(&self) -> Moved {
        Moved {
            revision: self.revision,
            step: self.step,
        }
    }

    /// The place of `waiter`, queued at `revision`.
    pub(crate) fn queued(priority: i32, waiter: u64, revision: i64) -> Place {
        Place {
            rank: Reverse(priority),
            refusals: Reverse(0),
            revision,
            step: 0,
            waiter,
        }
    }

    /// The same place in the tier of `refusals` (SPEC §6), within its
    /// priority.
    pub(crate) fn refused(self, refusals: u32) -> Place {
        Place {
            refusals: Reverse(refusals),
            ..self
        }
    }
}

/// Gap left between an unmoved place and one moved just ahead of it, so
/// that later moves still find room between.
const GAP: i64 = 1 << 32;

/// A request of the search as it stands at the read: its id in the search
/// (`None` for the request being decided), its priority, and its place
/// (`None` until it queues, after the read's revision).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Standing {
    pub(crate) id: Option<usize>,
    pub(crate) priority: i32,
    pub(crate) place: Option<Place>,
}

/// The places the moves give: each moved request (an index into `stands`)
/// with a place between its neighbours in the order the moves make.
/// `None` when no place is left between two neighbours (never in
/// practice: a move leaves a gap of [`GAP`]).
pub(crate) fn placed_by(
    stands: &[Standing],
    moves: &[(Option<usize>, Option<usize>)],
    revision: i64,
) -> Option<Vec<(usize, Moved)>> {
    let item_of = |id: Option<usize>| stands.iter().position(|s| s.id == id);
    let mut order: Vec<usize> = (0..stands.len()).collect();
    let mut moved: Vec<usize> = Vec::new();
    for &(waiter, of) in moves {
        let (waiter, of) = (item_of(waiter)?, item_of(of)?);
        order.retain(|&i| i != waiter);
        let at = order.iter().position(|&i| i == of)?;
        order.insert(at, waiter);
        if !moved.contains(&waiter) {
            moved.push(waiter);
        }
    }
    // Where an item stands as a (revision, step) key among its priority.
    let key = |i: usize, given: &HashMap<usize, Moved>| -> Moved {
        if let Some(m) = given.get(&i) {
            return *m;
        }
        match stands[i].place {
            Some(place) => place.as_moved(),
            // Not queued yet: it will queue at a later revision.
            None => Moved {
                revision: revision + 1,
                step: 0,
            },
        }
    };
    let mut given: HashMap<usize, Moved> = HashMap::new();
    for (at, &item) in order.iter().enumerate() {
        if !moved.contains(&item) {
            continue;
        }
        // The next item not moved, of the same priority: a move never
        // crosses priorities, so there is one (the one it went ahead of,
        // or one behind that).
        let after = order[at + 1..]
            .iter()
            .copied()
            .find(|i| !moved.contains(i))?;
        let high = key(after, &given);
        let low = at
            .checked_sub(1)
            .map(|before| order[before])
            .filter(|&before| stands[before].priority == stands[item].priority)
            .map(|before| key(before, &given));
        // How many moved items stand in this gap, and which one this is.
        let run_start = order[..at]
            .iter()
            .rposition(|i| !moved.contains(i))
            .map_or(0, |p| p + 1);
        let run_end = at + 1 + order[at + 1..].iter().position(|i| !moved.contains(i))?;
        let (nth, count) = ((at - run_start) as i64 + 1, (run_end - run_start) as i64);
        let place = match low {
            Some(low) if low.revision == high.revision => {
                let room = high.step.checked_sub(low.step)?;
                if room <= count {
                    return None;
                }
                Moved {
                    revision: high.revision,
                    step: low.step + room / (count + 1) * nth,
                }
            }
            _ => Moved {
                revision: high.revision,
                step: high.step.checked_sub(GAP * (count + 1 - nth))?,
            },
        };
        given.insert(item, place);
    }
    Some(
        moved
            .into_iter()
            .filter_map(|i| Some((i, *given.get(&i)?)))
            .collect(),
    )
}

impl Other {
    /// Its place, when it is a waiter.
    pub(crate) fn place(&self) -> Option<Place> {
        match self.owner {
            Owner::Waiter(id) => Some(
                match self.moved {
                    Some(moved) => Place::moved(self.meta.priority, id, moved),
                    None => Place::queued(self.meta.priority, id, self.revision),
                }
                .refused(self.meta.refusals),
            ),
            Owner::Hold(_) => None,
        }
    }

    /// Its hold's or waiter's id.
    pub(crate) fn id(&self) -> u64 {
        match self.owner {
            Owner::Hold(id) | Owner::Waiter(id) => id,
        }
    }
}

/// A `child_wait` queued in one read: its place, its claim, its seats.
#[derive(Debug, Clone)]
pub(crate) struct QueuedChild {
    pub(crate) place: Place,
    pub(crate) claim: Claim,
    pub(crate) seats: Seats,
}

/// One read of the table, as the core's judgement ([`judge`]) sees it: the
/// live holds the read found (grant order), the waiting requests (queue
/// order), and what the fence owner's precedence and slot reservation
/// need. The rules are the core's; this only answers its visits.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    holds: Vec<Other>,
    waiters: Vec<Other>,
    /// The waiters' whole claims, where the read found only their keys in
    /// the request's ranges; a waiter missing here left since the read and
    /// blocks nobody. `None`: the read found every waiter whole.
    whole: Option<HashMap<u64, Claim>>,
    /// Who asked for each waiter, where that is not its claim's owner (a
    /// `child_wait`'s parent).
    requesters: HashMap<u64, u64>,
    children: Vec<QueuedChild>,
    slots: Slots,
}

impl Snapshot {
    /// The holds (grant order) and waiters (queue order) of one read.
    pub(crate) fn new(holds: Vec<Other>, waiters: Vec<Other>) -> Self {
        Snapshot {
            holds,
            waiters,
            ..Snapshot::default()
        }
    }

    /// Adds live fences read whole (those of the requester's lineage: the
    /// only ones whose precedence can let it pass a waiter).
    pub(crate) fn with_fences(mut self, fences: Vec<Other>) -> Self {
        for fence in fences {
            match self.holds.iter_mut().find(|h| h.owner == fence.owner) {
                Some(found) => *found = fence,
                None => self.holds.push(fence),
            }
        }
        self.holds.sort_by_key(|h| (h.revision, h.owner));
        self
    }

    /// Sets the waiters' whole claims (see [`Snapshot::whole`]).
    pub(crate) fn with_whole(mut self, whole: HashMap<u64, Claim>) -> Self {
        self.whole = Some(whole);
        self
    }

    /// Sets who asked for the waiters whose claim is another's (a
    /// `child_wait`'s claim is its child's; its parent asked).
    pub(crate) fn with_requesters(mut self, requesters: HashMap<u64, u64>) -> Self {
        self.requesters = requesters;
        self
    }

    /// Adds the queued `child_wait`s and the slot counts.
    pub(crate) fn with_children(mut self, children: Vec<QueuedChild>, slots: Slots) -> Self {
        self.children = children;
        self.slots = slots;
        self
    }

    /// The waiters, in queue order.
    pub(crate) fn waiters(&self) -> &[Other] {
        &self.waiters
    }

    /// The ids of the waiters ahead of `at` in `claim`'s way: those whose
    /// whole claims the precedence needs.
    pub(crate) fn waiters_in_the_way(&self, claim: &Claim, at: Place) -> Vec<u64> {
        let mut found = Vec::new();
        let _ = self.visit_waiters(claim, at, |_, w, _, _| {
            found.push(self.waiters[w].id());
            ControlFlow::<()>::Continue(())
        });
        found
    }

    /// Whether a live hold is in `claim`'s way.
    pub(crate) fn hold_in_the_way(&self, claim: &Claim) -> bool {
        judge::first_hold(self, claim).is_some()
    }

    /// Every blocker of `claim` at `at` (a new child's `seats` given), by
    /// the core's [`judge::explain`], in the records' terms.
    pub(crate) fn explain(&self, claim: &Claim, seats: Option<Seats>, at: Place) -> Verdict<'_> {
        let found = judge::explain(self, claim, seats, at);
        Verdict {
            first: found.first.map(|b| match b {
                judge::Blocker::Slot(limit) => Blocked::Slot(limit),
                judge::Blocker::Hold(h, key) => Blocked::Path(&self.holds[h], key, false),
                judge::Blocker::Waiter(w, key) => Blocked::Path(&self.waiters[w], key, true),
            }),
            holds: found.holds.iter().map(|&(h, _)| &self.holds[h]).collect(),
            waiters: found
                .waiters
                .iter()
                .map(|&(w, _)| &self.waiters[w])
                .collect(),
            relied: found
                .relied
                .iter()
                .map(|&h| (self.holds[h].id(), self.holds[h].revision))
                .collect(),
        }
    }

    /// The wait-for edges of a request by `requester` for `claim` at `at`
    /// ([`judge::wait_edges`]), in the records' terms: `edges` keeps its
    /// actor, name, queue revision and slot, and gets everything else.
    pub(crate) fn wait_edges(&self, requester: u64, claim: &Claim, at: Place, edges: &mut Edges) {
        let found = judge::wait_edges(self, ActorId(requester), claim, at);
        edges.hard = found
            .fences
            .into_iter()
            .map(|ActorId(a)| (a, self.name_of(a)))
            .collect();
        edges.soft = found
            .earlier
            .iter()
            .map(|&w| self.waiters[w].id())
            .collect();
        edges.asked = found.asked.into_iter().map(|ActorId(a)| a).collect();
        edges.passed = found.passed.iter().map(|&w| self.waiters[w].id()).collect();
        edges.fence_owner = judge::fence_owner(claim).map(|ActorId(o)| o);
    }

    /// An actor's name as the records of this read give it.
    fn name_of(&self, actor: u64) -> String {
        self.holds
            .iter()
            .chain(&self.waiters)
            .find(|o| o.meta.owner == actor)
            .map_or_else(|| actor.to_string(), |o| o.meta.name.clone())
    }

    /// The slot limit that leaves a new child taking `seats` (queued at
    /// `at`) without a slot ([`judge::judge`]'s first rule).
    pub(crate) fn slot_limit(&self, seats: Seats, at: Place) -> Option<SlotLimit> {
        judge::slot_limit(self.slots, seats, judge::reserved_ahead(self, at))
    }
}

impl View for Snapshot {
    /// An index into the holds, which are in grant order.
    type Hold = usize;
    /// An index into the waiters.
    type Waiter = usize;
    type Place = Place;

    fn visit_holds<B>(
        &self,
        claim: &Claim,
        mut each: impl FnMut(usize, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        for (i, hold) in self.holds.iter().enumerate() {
            if let Some(key) = conflict(claim, &hold.claim) {
                each(i, &hold.claim, key)?;
            }
        }
        ControlFlow::Continue(())
    }

    fn visit_waiters<B>(
        &self,
        claim: &Claim,
        at: Place,
        mut each: impl FnMut(Place, usize, &Claim, usize) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        for (i, waiter) in self.waiters.iter().enumerate() {
            let Some(place) = waiter.place().filter(|p| *p < at) else {
                continue;
            };
            let whole = match &self.whole {
                None => &waiter.claim,
                Some(whole) => match whole.get(&waiter.id()) {
                    Some(claim) => claim,
                    None => continue,
                },
            };
            if let Some(key) = conflict(claim, whole) {
                each(place, i, whole, key)?;
            }
        }
        ControlFlow::Continue(())
    }

    fn visit_children<B>(
        &self,
        at: Place,
        mut each: impl FnMut(Place, &Claim, Seats) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        for child in self.children.iter().filter(|c| c.place < at) {
            each(child.place, &child.claim, child.seats)?;
        }
        ControlFlow::Continue(())
    }

    fn slots(&self) -> Slots {
        self.slots
    }

    fn requester(&self, waiter: usize) -> ActorId {
        let w = &self.waiters[waiter];
        ActorId(
            self.requesters
                .get(&w.id())
                .copied()
                .unwrap_or(w.meta.owner),
        )
    }
}

/// What stands in a request's way at one read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Blocked<'a> {
    /// A slot limit.
    Slot(SlotLimit),
    /// A live hold (`false`) or a waiter ahead (`true`), and the index of
    /// the request's key in its way.
    Path(&'a Other, usize, bool),
}

/// Everything in a request's way at one read ([`Snapshot::explain`]).
#[derive(Debug)]
pub(crate) struct Verdict<'a> {
    /// What it waits for.
    pub(crate) first: Option<Blocked<'a>>,
    /// The live holds in its way, in grant order.
    pub(crate) holds: Vec<&'a Other>,
    /// The waiters ahead in its way that it does not pass, in queue order:
    /// its soft edges.
    pub(crate) waiters: Vec<&'a Other>,
    /// The fences (id, revision) whose owner's precedence let it pass a
    /// waiter: a commit compares them.
    pub(crate) relied: Vec<(u64, i64)>,
}

impl Verdict<'_> {
    /// What the request waits for, as a dump shows it (`claim` is the
    /// request's).
    pub(crate) fn cause(&self, claim: &Claim) -> Option<WaitCause> {
        Some(match self.first? {
            Blocked::Slot(SlotLimit::MaxActors) => WaitCause::Slots,
            Blocked::Slot(SlotLimit::MaxWriters) => WaitCause::Writers,
            Blocked::Path(other, key, _) => WaitCause::Path {
                path: claim.keys.get(key)?.0.path.clone(),
                holder: other.meta.name.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(owner: u64, lineage: &[u64], kind: KindRecord, priority: i32) -> Meta {
        Meta {
            owner,
            lineage: lineage.to_vec(),
            kind,
            name: format!("a{owner}"),
            file_op: false,
            refusals: 0,
            label: None,
            since_ms: 0,
            priority,
        }
    }

    fn entry(
        layout: &Layout,
        path: &str,
        owner: Owner,
        meta: &Meta,
        mode: ModeRecord,
    ) -> (Vec<u8>, Vec<u8>) {
        let tree = path.ends_with('/');
        let key = Key::exact(path.trim_end_matches('/'), tree);
        let value = EntryValue {
            meta: meta.clone(),
            mode,
        };
        (
            layout.entry(&key, owner),
            serde_json::to_vec(&value).unwrap_or_default(),
        )
    }

    #[test]
    fn entries_group_into_claims_in_grant_and_queue_order() {
        let layout = Layout::new("s");
        let fence = meta(1, &[1], KindRecord::Fence, 0);
        let low = meta(2, &[2], KindRecord::Call, 0);
        let high = meta(3, &[3], KindRecord::Call, 5);
        let raw = [
            (
                entry(
                    &layout,
                    "/ws/a/",
                    Owner::Hold(9),
                    &fence,
                    ModeRecord::Exclusive,
                ),
                40,
            ),
            (
                entry(&layout, "/ws/b", Owner::Hold(9), &fence, ModeRecord::Shared),
                40,
            ),
            (
                entry(
                    &layout,
                    "/ws/a/x",
                    Owner::Hold(4),
                    &low,
                    ModeRecord::Exclusive,
                ),
                30,
            ),
            (
                entry(
                    &layout,
                    "/ws/a/x",
                    Owner::Waiter(5),
                    &low,
                    ModeRecord::Exclusive,
                ),
                10,
            ),
            (
                entry(
                    &layout,
                    "/ws/a/x",
                    Owner::Waiter(6),
                    &high,
                    ModeRecord::Exclusive,
                ),
                50,
            ),
        ];
        let (holds, waiters) = group(
            &layout,
            raw.iter()
                .map(|((k, v), r)| (k.as_slice(), v.as_slice(), *r)),
        );
        assert_eq!(
            holds.iter().map(|h| h.owner).collect::<Vec<_>>(),
            [Owner::Hold(4), Owner::Hold(9)]
        );
        assert_eq!(holds[1].claim.keys.len(), 2);
        assert_eq!(holds[1].claim.kind, HoldKind::Fence);
        assert_eq!(
            waiters.iter().map(|w| w.owner).collect::<Vec<_>>(),
            [Owner::Waiter(6), Owner::Waiter(5)],
            "priority first, then revision"
        );
        let queued = Place::queued(0, 5, 10);
        let ahead = |place: Place, w: &Other| w.place().is_some_and(|p| p < place);
        assert!(ahead(queued, &waiters[0]));
        assert!(
            !ahead(queued, &waiters[1]),
            "a waiter is not ahead of itself"
        );
        assert!(ahead(Place::new(0), &waiters[1]));
        assert!(!ahead(Place::new(6), &waiters[0]));
    }

    #[test]
    fn a_fence_lets_its_owners_line_pass_a_waiter_it_blocks() {
        let parent_fence = claim_of(
            &meta(1, &[1], KindRecord::Fence, 0),
            vec![(Key::exact("/ws/src", true), Mode::Exclusive)],
        );
        let sibling_waiting = claim_of(
            &meta(7, &[7], KindRecord::Call, 0),
            vec![(Key::exact("/ws/src/a", false), Mode::Exclusive)],
        );
        let child_call = claim_of(
            &meta(2, &[1, 2], KindRecord::Call, 0),
            vec![(Key::exact("/ws/src/a", false), Mode::Exclusive)],
        );
        let stranger_call = claim_of(
            &meta(3, &[3], KindRecord::Call, 0),
            vec![(Key::exact("/ws/src/a", false), Mode::Exclusive)],
        );
        let fence = Other {
            owner: Owner::Hold(11),
            meta: meta(1, &[1], KindRecord::Fence, 0),
            claim: parent_fence,
            revision: 5,
            moved: None,
        };
        let snapshot = Snapshot::new(Vec::new(), Vec::new()).with_fences(vec![fence]);
        assert_eq!(
            judge::passing_fence(&snapshot, &sibling_waiting, &child_call),
            Some(0)
        );
        assert!(judge::passing_fence(&snapshot, &sibling_waiting, &stranger_call).is_none());
    }

    #[test]
    fn blockers_list_holds_then_waiters_ahead_a_fence_does_not_let_pass() {
        let other = |owner: Owner, meta: Meta, path: &str, revision: i64| Other {
            owner,
            claim: claim_of(
                &meta,
                vec![(
                    Key::exact(path.trim_end_matches('/'), path.ends_with('/')),
                    Mode::Exclusive,
                )],
            ),
            meta,
            revision,
            moved: None,
        };
        let holds = [
            other(
                Owner::Hold(1),
                meta(1, &[1], KindRecord::Fence, 0),
                "/ws/src/",
                5,
            ),
            other(
                Owner::Hold(2),
                meta(9, &[9], KindRecord::Call, 0),
                "/ws/b",
                6,
            ),
        ];
        let waiters = [
            // Blocked by the fence of actor 1, so actor 1's line passes it.
            other(
                Owner::Waiter(3),
                meta(7, &[7], KindRecord::Call, 0),
                "/ws/src/a",
                7,
            ),
            other(
                Owner::Waiter(4),
                meta(8, &[8], KindRecord::Call, 0),
                "/ws/b",
                8,
            ),
        ];
        let child = claim_of(
            &meta(2, &[1, 2], KindRecord::Call, 0),
            vec![
                (Key::exact("/ws/src/a", false), Mode::Exclusive),
                (Key::exact("/ws/b", false), Mode::Exclusive),
            ],
        );
        let snapshot = Snapshot::new(holds.to_vec(), waiters.to_vec());
        let found = snapshot.explain(&child, None, Place::new(0));
        let owners = |os: &[&Other]| os.iter().map(|o| o.owner).collect::<Vec<_>>();
        assert_eq!(
            owners(&found.holds),
            [Owner::Hold(2)],
            "its parent's fence covers it"
        );
        assert_eq!(
            owners(&found.waiters),
            [Owner::Waiter(4)],
            "it passes waiter 3"
        );
        let Some(Blocked::Path(first, key, false)) = found.first else {
            panic!("a hold is in the way: {:?}", found.first);
        };
        assert_eq!((first.owner, key), (Owner::Hold(2), 1));
        let mut edges = Edges::default();
        snapshot.wait_edges(2, &child, Place::new(0), &mut edges);
        assert_eq!(edges.hard, [], "no fence is in its way");
        assert_eq!(edges.soft, [4], "it passes waiter 3");

        let stranger = claim_of(
            &meta(5, &[5], KindRecord::Call, 0),
            vec![(Key::exact("/ws/src/a", false), Mode::Exclusive)],
        );
        let found = snapshot.explain(&stranger, None, Place::queued(0, 3, 7));
        assert_eq!(owners(&found.holds), [Owner::Hold(1)]);
        let mut edges = Edges::default();
        snapshot.wait_edges(5, &stranger, Place::queued(0, 3, 7), &mut edges);
        assert_eq!(
            edges.hard,
            [(1, "a1".to_string())],
            "the fence is a hard edge"
        );
        assert!(
            found.waiters.is_empty(),
            "nothing conflicting is ahead of waiter 3"
        );
    }

    /// The in-process state as one full read of etcd would show it: its
    /// holds in grant order, its waiting requests in queue order (a rank
    /// for a revision), the queued `child_wait`s and the slots.
    fn snapshot_of(state: &crate::core::state::State) -> Snapshot {
        use crate::core::queue::Need;
        let meta_of = |claim: &Claim, priority: i32| Meta {
            owner: claim.owner.0,
            lineage: claim.lineage.iter().map(|a| a.0).collect(),
            kind: claim.kind.into(),
            name: format!("a{}", claim.owner.0),
            file_op: false,
            refusals: 0,
            label: None,
            since_ms: 0,
            priority,
        };
        let holds = state
            .table
            .iter()
            .map(|(id, h)| Other {
                owner: Owner::Hold(id.0),
                meta: meta_of(&h.claim, 0),
                claim: h.claim.clone(),
                revision: id.0 as i64,
                moved: None,
            })
            .collect();
        let (mut waiters, mut children, mut requesters) = (Vec::new(), Vec::new(), HashMap::new());
        for (rank, w) in state.queue.entries().filter(|w| w.is_waiting()).enumerate() {
            let place = Place::queued(w.priority, w.id.0, rank as i64);
            if let Need::Child(child) = &w.need {
                children.push(QueuedChild {
                    place,
                    claim: w.claim.clone(),
                    seats: Seats {
                        actor: child.counts_actor,
                        writer: child.counts_writer,
                    },
                });
            }
            requesters.insert(w.id.0, w.requester.0);
            waiters.push(Other {
                owner: Owner::Waiter(w.id.0),
                meta: meta_of(&w.claim, w.priority),
                claim: w.claim.clone(),
                revision: rank as i64,
                moved: None,
            });
        }
        let slots = Slots {
            children: state.live_children,
            writers: state.live_writers,
            max_actors: state.max_actors,
            max_writers: state.max_writers,
        };
        Snapshot::new(holds, waiters)
            .with_requesters(requesters)
            .with_children(children, slots)
    }

    /// A blocker by kind and id (the views name holds and waiters their
    /// own way).
    fn named<H, W>(
        blocker: Option<judge::Blocker<H, W>>,
        hold: impl Fn(H) -> u64,
        waiter: impl Fn(W) -> u64,
    ) -> Option<(u8, u64, usize)> {
        blocker.map(|b| match b {
            judge::Blocker::Slot(SlotLimit::MaxActors) => (0, 0, 0),
            judge::Blocker::Slot(SlotLimit::MaxWriters) => (1, 0, 0),
            judge::Blocker::Hold(h, key) => (2, hold(h), key),
            judge::Blocker::Waiter(w, key) => (3, waiter(w), key),
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// The two tables ask the same rules through two views: the
        /// state's indexes and an etcd read. Over random sessions, both
        /// views lead every rule to the same answer, for every waiting
        /// request and for each request before it is asked.
        #[test]
        fn a_read_of_the_state_is_judged_as_the_state(
            ops in proptest::collection::vec(crate::core::state::model::op(), 1..40),
            max_actors in proptest::option::of(1usize..=3),
            max_writers in proptest::option::of(0usize..=2),
        ) {
            use crate::core::queue::Pos;
            use crate::core::state::model::{Op, apply};
            let mut state = crate::core::state::State::new(max_actors, max_writers);
            for (n, op) in ops.iter().enumerate() {
                let snapshot = snapshot_of(&state);
                let live = state.view(None);
                let hold_id = |h: crate::core::table::HoldId| h.0;
                let at_hold = |i: usize| snapshot.holds[i].id();
                let at_waiter = |i: usize| snapshot.waiters[i].id();
                if let Op::Request { claim, priority, .. } = op {
                    proptest::prop_assert_eq!(
                        named(judge::judge(&live, claim, None, Pos::end_of(*priority)), hold_id, |w| w.0),
                        named(judge::judge(&snapshot, claim, None, Place::new(*priority)), at_hold, at_waiter),
                        "a new request {:?}", claim
                    );
                }
                for (rank, w) in state.queue.entries().filter(|w| w.is_waiting()).enumerate() {
                    let Some(pos) = state.queue.pos_of(w.id) else { continue };
                    let place = Place::queued(w.priority, w.id.0, rank as i64);
                    let seats = match &w.need {
                        crate::core::queue::Need::Child(c) => Some(Seats { actor: c.counts_actor, writer: c.counts_writer }),
                        crate::core::queue::Need::Hold => None,
                    };
                    let a = judge::explain(&live, &w.claim, seats, pos);
                    let b = judge::explain(&snapshot, &w.claim, seats, place);
                    proptest::prop_assert_eq!(named(a.first, hold_id, |w| w.0), named(b.first, at_hold, at_waiter), "first blocker of {:?}", w.id);
                    proptest::prop_assert_eq!(
                        a.holds.iter().map(|&(h, k)| (h.0, k)).collect::<Vec<_>>(),
                        b.holds.iter().map(|&(h, k)| (at_hold(h), k)).collect::<Vec<_>>()
                    );
                    proptest::prop_assert_eq!(
                        a.waiters.iter().map(|&(w, k)| (w.0, k)).collect::<Vec<_>>(),
                        b.waiters.iter().map(|&(w, k)| (at_waiter(w), k)).collect::<Vec<_>>()
                    );
                    let a = judge::wait_edges(&live, w.requester, &w.claim, pos);
                    let b = judge::wait_edges(&snapshot, w.requester, &w.claim, place);
                    proptest::prop_assert_eq!(&a.fences, &b.fences);
                    proptest::prop_assert_eq!(&a.asked, &b.asked);
                    proptest::prop_assert_eq!(
                        a.earlier.iter().map(|w| w.0).collect::<Vec<_>>(),
                        b.earlier.iter().map(|&w| at_waiter(w)).collect::<Vec<_>>()
                    );
                    proptest::prop_assert_eq!(
                        a.passed.iter().map(|w| w.0).collect::<Vec<_>>(),
                        b.passed.iter().map(|&w| at_waiter(w)).collect::<Vec<_>>()
                    );
                    if let Some(seats) = seats {
                        proptest::prop_assert_eq!(
                            judge::slot_wait(&live, &w.claim, seats, pos),
                            judge::slot_wait(&snapshot, &w.claim, seats, place)
                        );
                    }
                }
                apply(&mut state, op, 100 + n as u64);
            }
        }
    }

    #[test]
    fn a_moved_request_stands_between_its_new_neighbours() {
        // Three waiters of one priority queued at revisions 10, 20, 30; the
        // last moves ahead of the second.
        let place = |i: u64, r: i64| Some(Place::queued(0, i, r));
        let stand = |id: Option<usize>, place: Option<Place>| Standing {
            id,
            priority: 0,
            place,
        };
        let stands = [
            stand(Some(0), place(0, 10)),
            stand(Some(1), place(1, 20)),
            stand(Some(2), place(2, 30)),
        ];
        let placed = placed_by(&stands, &[(Some(2), Some(1))], 40).unwrap();
        assert_eq!(placed.len(), 1);
        let (item, moved) = placed[0];
        assert_eq!(item, 2);
        let moved = Place::moved(0, 2, moved);
        assert!(place(0, 10).unwrap() < moved && moved < place(1, 20).unwrap());
        // A request not queued yet moves ahead of the first; another
        // waiter then moves ahead of it: both stay in that order, ahead.
        let stands = [stands[0], stands[1], stand(None, None)];
        let placed = placed_by(&stands, &[(None, Some(0)), (Some(1), None)], 40).unwrap();
        let at: HashMap<usize, Place> = placed
            .iter()
            .map(|&(i, m)| (i, Place::moved(0, i as u64, m)))
            .collect();
        assert!(at[&1] < at[&2] && at[&2] < place(0, 10).unwrap());
    }
}
