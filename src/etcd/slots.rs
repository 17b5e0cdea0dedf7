//! Waiting for a slot (SPEC §11) in a session in etcd: `child_wait`, the
//! slots queued child waits reserve, and slot waits in the wait-for graph.
//!
//! A `child_wait` goes through the one admission pipeline
//! (`pipeline`: queuing, the deadlock check, waiting by watch, timeouts,
//! clean-up) as the `Need` of a child; this file has only its round (what
//! it reads, how the core judges its paths and then its slot, what it
//! commits) and its queue records.
//!
//! A waiting `child_wait` is a waiter like any other (`P q/<waiter>`, its
//! grant fence's keys as index entries, its edges in `P e/<waiter>`, all on
//! the serving table's waiter lease), whose record names the child it
//! would make (so its keys conflict and cover as that child's fence will)
//! and, in `child_of`, the parent that asks; a mark `P w/<waiter>` is
//! created and deleted with it, so that counting slots can compare on the
//! `child_wait`s alone.
//!
//! The rules are the in-process table's (`core::state`):
//!
//! - a `child_wait` is granted when its paths are free (no live hold and
//!   no earlier waiter it does not pass is in their way) and a slot is
//!   free: the live children, plus the slots reserved by the `child_wait`s
//!   queued ahead of it *whose paths are free*, stay below each limit that
//!   counts it. One still waiting for a path reserves nothing;
//! - a `child()` is refused (`NoSlot`) by the same count, so a freed slot
//!   goes to the queued `child_wait`s in queue order, not to a later
//!   caller;
//! - the grant is one transaction: the child's record, its token, its
//!   grant fence and the waiter's removal, with compares on every range
//!   read (its own paths, the live actors, the `child_wait` marks, and the
//!   paths of the fenced `child_wait`s ahead whose freedom was counted):
//!   nothing it relied on changed since the read.
//!
//! Whether a `child_wait` ahead has its paths free is read at the same
//! revision as everything else (etcd's reads at a past revision), so a
//! decision is one consistent view; the dump judges causes the same way.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Compare, GetOptions, KeyValue, Txn, TxnOp};
use tokio::sync::oneshot;

use super::actors::{ActorRecord, ActorRef, GrantRecord, actor_record};
use super::admission::{busy, keys_of};
use super::counters::Counter;
use super::deadlock::{self, Edges, SlotKind};
use super::decide::{
    self, Blocked, ChildOf, ClaimRecord, Meta, Moved, Other, Place, QueuedChild, Snapshot,
};
use super::graph::{moved_places, others};
use super::holds::{entry_puts, key_records};
use super::layout::{Layout, Owner};
use super::pipeline::{Need, Round, Standing, Wait};
use super::reorder::Deciding;
use super::store::{
    LeaseId, Table, etcd_error, id_in, now_ms, prefix_get, ranges_of, revision_of, still, to_json,
    unavailable, unchanged_since, with_lease,
};
use crate::core::judge::{Seats, Slots};
use crate::core::key::{Key, Mode};
use crate::core::table::{ActorId, Claim};
use crate::error::{Error, Result, SlotLimit};
use crate::kinds::HoldKind;
use crate::{Target, WaitCause};

/// The session's slot limits: `max_actors`, `max_writers`.
pub(crate) type Limits = (Option<usize>, Option<usize>);

/// Stands for the request being decided before it has a waiter id.
const NEW: u64 = u64::MAX;

/// What the dump shows of one waiting `child_wait`: the child waits, but
/// the parent is the actor that asked, as in process.
pub(crate) struct ChildWaitShown {
    /// The waiter's id.
    pub(crate) id: u64,
    /// Why it waits: slots first, then a path.
    pub(crate) cause: Option<WaitCause>,
    /// The parent that asked for the child.
    pub(crate) parent: ActorId,
    pub(crate) parent_name: String,
}

/// The session's slot limits as its limits record (one read) says them.
pub(super) fn limits_in(kvs: &[KeyValue]) -> Limits {
    #[derive(serde::Deserialize)]
    struct Stored {
        max_actors: Option<usize>,
        max_writers: Option<usize>,
    }
    kvs.first()
        .and_then(|kv| serde_json::from_slice::<Stored>(kv.value()).ok())
        .map_or((None, None), |s| (s.max_actors, s.max_writers))
}

/// A `child_wait` as a server asks it of the table.
#[derive(Debug, Clone)]
pub(crate) struct ChildAsk {
    pub(crate) parent: ActorRef,
    pub(crate) name: String,
    /// The child's grant root (canonical, inside the parent's).
    pub(crate) root: PathBuf,
    /// What servers enforce of the child's grant.
    pub(crate) grant: GrantRecord,
    /// The grant fence's targets, resolved, for a fenced grant.
    pub(crate) fence: Option<Vec<Target>>,
    pub(crate) limits: Limits,
    /// `None`: wait however long.
    pub(crate) timeout: Option<Duration>,
}

/// A `child_wait` on its way through the table.
struct ChildWait {
    parent: ActorRef,
    /// The child it would make (not in etcd until granted): its id, name,
    /// lineage and root, on the parent's lease.
    child: ActorRef,
    grant: GrantRecord,
    token: String,
    /// The grant fence's keys (none for an unfenced grant).
    keys: Vec<(Key, Mode)>,
    claim: Claim,
    ranges: Vec<Vec<u8>>,
    limits: Limits,
    wait: Wait,
    /// The id of the grant fence's hold, if it has one.
    hold: u64,
    since_ms: u64,
}

impl ChildWait {
    fn meta(&self) -> Meta {
        Meta {
            owner: self.child.id.0,
            lineage: self.child.lineage.to_vec(),
            kind: HoldKind::Fence.into(),
            name: self.child.name.clone(),
            label: None,
            since_ms: self.since_ms,
            priority: 0,
            file_op: false,
            refusals: 0,
        }
    }

    fn record(&self, child_of: bool) -> ClaimRecord {
        ClaimRecord {
            meta: self.meta(),
            keys: key_records(&self.keys),
            ticket: None,
            child_of: child_of.then(|| ChildOf {
                parent: self.parent.id.0,
                parent_name: self.parent.name.clone(),
                read_only: self.grant.read_only,
            }),
            taken_over: None,
            until_ms: None,
        }
    }

    fn entry_puts(&self, layout: &Layout, owner: Owner, lease: LeaseId) -> Result<Vec<TxnOp>> {
        entry_puts(layout, &self.meta(), &self.keys, owner, lease)
    }

    fn edges(&self, queued: i64) -> Edges {
        Edges {
            actor: self.parent.id.0,
            name: self.parent.name.clone(),
            queued,
            ..Edges::default()
        }
    }
}

/// A child asked for, with its slot: the pipeline's `Need::Child`.
impl Need for ChildWait {
    type Granted = ActorRef;
    const REWRITES_EDGES: bool = true;

    fn keys(&self) -> &[(Key, Mode)] {
        &self.keys
    }

    fn claim(&self) -> &Claim {
        &self.claim
    }

    fn asker(&self) -> (u64, &str) {
        (self.parent.id.0, self.parent.name())
    }

    fn wait(&self) -> Wait {
        self.wait
    }

    fn first_place(&self) -> Place {
        Place::new(0)
    }

    /// A `child_wait` keeps its place (SPEC §11): it is never moved.
    fn queued_place(&self, waiter: u64, revision: i64, _: Option<Moved>) -> Place {
        Place::queued(0, waiter, revision)
    }

    fn deciding(&self) -> Deciding<'_> {
        Deciding {
            requester: self.parent.id.0,
            claim: &self.claim,
            priority: 0,
            movable: false,
        }
    }

    async fn round(&self, table: &Table, at: Standing) -> Result<Round<ActorRef>> {
        table.child_step(self, at).await
    }

    async fn enqueue(&self, table: &Table, edges: &Edges, _: Option<Moved>) -> Result<(u64, i64)> {
        table.enqueue_child(self, edges).await
    }

    async fn lost(&self, table: &Table) {
        // A commit whose answer was lost may still have made the child.
        let _ = table.unmake_child(&self.child, &self.token).await;
    }

    async fn unclaimed(&self, table: &Table, made: ActorRef) {
        // The caller left after the commit: the child goes again.
        let _ = table.unmake_child(&made, &self.token).await;
    }
}

/// A waiting `child_wait` as one read saw it.
#[derive(Debug, Clone)]
struct SlotWaiter {
    id: u64,
    /// Its queue revision (the creation of its record).
    revision: i64,
    priority: i32,
    child: ChildOf,
    claim: Claim,
}

impl SlotWaiter {
    fn place(&self) -> Place {
        Place::queued(self.priority, self.id, self.revision)
    }

    fn seats(&self) -> Seats {
        seats(self.child.read_only)
    }
}

/// The slots a child takes (SPEC §11): every child an actor slot, a
/// writable one a writer slot.
fn seats(read_only: bool) -> Seats {
    Seats {
        actor: true,
        writer: !read_only,
    }
}

/// One index entry as read: key, value, create revision.
type Entry = (Vec<u8>, Vec<u8>, i64);

/// The session as one read saw it, for slot decisions.
#[derive(Debug, Default)]
struct World {
    revision: i64,
    /// Live children: id, name, read-only.
    children: Vec<(u64, String, bool)>,
    /// Waiting `child_wait`s in queue order.
    slot_waiters: Vec<SlotWaiter>,
    /// Every waiting request's whole claim (for the fence owner's
    /// precedence).
    claims: HashMap<u64, Claim>,
    /// Every live fence, whole.
    fences: Vec<Other>,
    /// The index entries in the conflict ranges of some claims (by waiter
    /// id, [`NEW`] for the request being decided), read at `revision`.
    entries: HashMap<u64, Vec<Entry>>,
    /// The places a reordering moved waiters to.
    moved: HashMap<u64, Moved>,
}

impl World {
    fn parse(
        revision: i64,
        actors: &[KeyValue],
        waiters: &[KeyValue],
        fences: &[KeyValue],
        moved: &[KeyValue],
    ) -> Self {
        let mut world = World {
            revision,
            moved: moved_places(moved),
            ..World::default()
        };
        for kv in actors {
            let (Some(id), Ok(record)) = (
                id_in(kv.key()),
                serde_json::from_slice::<ActorRecord>(kv.value()),
            ) else {
                continue;
            };
            if record.lineage.len() > 1 {
                world.children.push((id, record.name, record.read_only));
            }
        }
        for kv in waiters {
            let (Some(id), Ok(record)) = (
                id_in(kv.key()),
                serde_json::from_slice::<ClaimRecord>(kv.value()),
            ) else {
                continue;
            };
            let claim = record.claim();
            if let Some(child) = record.child_of {
                world.slot_waiters.push(SlotWaiter {
                    id,
                    revision: kv.create_revision(),
                    priority: record.meta.priority,
                    child,
                    claim: claim.clone(),
                });
            }
            world.claims.insert(id, claim);
        }
        world
            .slot_waiters
            .sort_by_key(|w| (std::cmp::Reverse(w.priority), w.revision, w.id));
        world.fences = others(fences, Owner::Hold, KeyValue::create_revision)
            .into_iter()
            .map(|(_, fence)| fence)
            .collect();
        world
    }

    /// The fenced `child_wait`s ahead of `place` (their paths decide
    /// whether they reserve a slot).
    fn fenced_ahead(&self, place: Place) -> Vec<&SlotWaiter> {
        self.slot_waiters
            .iter()
            .filter(|w| !w.claim.keys.is_empty() && w.place() < place)
            .collect()
    }

    /// The read as the core's judgement sees it: every index entry read
    /// (at one revision, so the claims' ranges agree), the waiters' and
    /// fences' whole claims, the queued `child_wait`s and the slots.
    fn snapshot(&self, layout: &Layout, limits: Limits) -> Snapshot {
        let entries: BTreeMap<&[u8], (&[u8], i64)> = self
            .entries
            .values()
            .flatten()
            .map(|(k, v, r)| (k.as_slice(), (v.as_slice(), *r)))
            .collect();
        let (holds, mut waiters) =
            decide::group(layout, entries.iter().map(|(k, (v, r))| (*k, *v, *r)));
        decide::apply_moves(&mut waiters, &self.moved);
        let children = self
            .slot_waiters
            .iter()
            .map(|w| QueuedChild {
                place: w.place(),
                claim: w.claim.clone(),
                seats: w.seats(),
            })
            .collect();
        let slots = Slots {
            children: self.children.len(),
            writers: self.children.iter().filter(|c| !c.2).count(),
            max_actors: limits.0,
            max_writers: limits.1,
        };
        let requesters = self
            .slot_waiters
            .iter()
            .map(|w| (w.id, w.child.parent))
            .collect();
        Snapshot::new(holds, waiters)
            .with_whole(self.claims.clone())
            .with_requesters(requesters)
            .with_fences(self.fences.clone())
            .with_children(children, slots)
    }

    /// The live children holding a slot of `kind`.
    fn holders(&self, kind: SlotKind) -> Vec<(u64, String)> {
        self.children
            .iter()
            .filter(|c| kind == SlotKind::Actors || !c.2)
            .map(|c| (c.0, c.1.clone()))
            .collect()
    }
}

fn slot_kind(limit: SlotLimit) -> SlotKind {
    match limit {
        SlotLimit::MaxActors => SlotKind::Actors,
        SlotLimit::MaxWriters => SlotKind::Writers,
    }
}

impl Table {
    /// Reads the live actors, the waiting requests and the live fences at
    /// one revision (with `extra` reads after them, whose answers are
    /// returned), then the index entries of `wanted` claims' conflict
    /// ranges at that same revision.
    async fn read_world(
        &self,
        extra: Vec<TxnOp>,
        wanted: impl Fn(&World) -> Vec<(u64, Vec<Vec<u8>>)>,
    ) -> Result<(World, Vec<Vec<KeyValue>>, Vec<(u64, Vec<Vec<u8>>)>)> {
        let layout = self.layout();
        let mut reads = vec![
            prefix_get(&layout.actors()),
            prefix_get(&layout.waiters()),
            prefix_get(&layout.all_fences()),
            prefix_get(&layout.all_moved()),
        ];
        reads.extend(extra);
        let read = self.read(reads).await.map_err(unavailable)?;
        let revision = revision_of(&read);
        let mut ranges = ranges_of(&read).into_iter();
        let actors = ranges.next().unwrap_or_default();
        let waiters = ranges.next().unwrap_or_default();
        let fences = ranges.next().unwrap_or_default();
        let moved = ranges.next().unwrap_or_default();
        let rest: Vec<Vec<KeyValue>> = ranges.collect();
        let mut world = World::parse(revision, &actors, &waiters, &fences, &moved);
        let wanted = wanted(&world);
        self.read_entries(&mut world, &wanted).await?;
        Ok((world, rest, wanted))
    }

    /// Reads the index entries in each claim's ranges at the world's
    /// revision (etcd keeps past revisions until it compacts them).
    async fn read_entries(&self, world: &mut World, wanted: &[(u64, Vec<Vec<u8>>)]) -> Result<()> {
        let reads: Vec<TxnOp> = wanted
            .iter()
            .flat_map(|(_, ranges)| ranges.iter())
            .map(|r| {
                TxnOp::get(
                    r.clone(),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_revision(world.revision),
                    ),
                )
            })
            .collect();
        if reads.is_empty() {
            return Ok(());
        }
        let read = self.read(reads).await.map_err(unavailable)?;
        let mut answers = ranges_of(&read).into_iter();
        for (who, ranges) in wanted {
            let found = world.entries.entry(*who).or_default();
            for _ in ranges {
                for kv in answers.next().unwrap_or_default() {
                    found.push((kv.key().to_vec(), kv.value().to_vec(), kv.create_revision()));
                }
            }
        }
        Ok(())
    }

    /// Whether a new child (`read_only` or not) finds a slot under
    /// `limits`, counting the slots reserved by queued `child_wait`s (SPEC
    /// §11): the limit that refuses it, and the compares under which the
    /// count still holds at a commit (nothing created, dropped, queued or
    /// unblocked since).
    pub(crate) async fn slot_for_child(
        &self,
        read_only: bool,
        limits: Limits,
    ) -> Result<(Option<SlotLimit>, Vec<Compare>)> {
        let layout = self.layout();
        let place = Place::new(0);
        let (world, _, wanted) = self
            .read_world(Vec::new(), |world| {
                world
                    .fenced_ahead(place)
                    .into_iter()
                    .map(|w| {
                        (
                            w.id,
                            layout.conflict_ranges(w.claim.keys.iter().map(|(k, _)| k)),
                        )
                    })
                    .collect()
            })
            .await?;
        let refused = world
            .snapshot(layout, limits)
            .slot_limit(seats(read_only), place);
        let mut compares = vec![
            unchanged_since(&layout.actors(), world.revision),
            unchanged_since(&layout.slot_waiters(), world.revision),
        ];
        for (_, ranges) in &wanted {
            compares.extend(ranges.iter().map(|r| unchanged_since(r, world.revision)));
        }
        Ok((refused, compares))
    }

    /// Makes a child of `ask.parent`, waiting (fairly, cancel-safely) for
    /// its grant fence's paths and then for a slot (SPEC §11); `token`
    /// makes the child's token from its id. `Deadlock` when the slot wait
    /// could never end, `Timeout` past `ask.timeout`.
    ///
    /// Dropping the future leaves nothing: the wait runs in a task of its
    /// own, which deletes its waiter keys, and drops a child made after
    /// the future was dropped.
    pub(crate) async fn child_wait(
        &self,
        ask: ChildAsk,
        token: impl FnOnce(ActorId) -> Result<String>,
    ) -> Result<(ActorRef, String)> {
        let id = self.next_id()?;
        let token = token(ActorId(id))?;
        let (_, lineage) = actor_record(
            id,
            ask.parent.lease,
            &ask.name,
            &ask.root,
            Some(&ask.parent),
            &ask.grant,
        )?;
        let child = ActorRef {
            id: ActorId(id),
            name: ask.name.clone(),
            lineage: lineage.into(),
            lease: ask.parent.lease,
            root: ask.root.clone(),
            revision: 0,
            read_only: ask.grant.read_only,
            fence: ask.grant.fence.clone().map(Into::into),
            read_roots: ask.grant.read_roots.clone().into(),
            turn: ask.parent.turn.clone(),
        };
        let keys = match &ask.fence {
            Some(targets) => keys_of(&child, targets, self.case())?,
            None => Vec::new(),
        };
        let claim = Claim {
            owner: child.id,
            lineage: child.lineage.iter().map(|&a| ActorId(a)).collect(),
            kind: HoldKind::Fence,
            keys: keys.clone(),
        };
        let ranges = self.layout().conflict_ranges(keys.iter().map(|(k, _)| k));
        let wait = ChildWait {
            parent: ask.parent,
            child,
            grant: ask.grant,
            token,
            keys,
            claim,
            ranges,
            limits: ask.limits,
            wait: ask.timeout.map_or(Wait::Forever, Wait::For),
            hold: self.next_id()?,
            since_ms: now_ms(),
        };
        let token = wait.token.clone();
        let (answer, answered) = oneshot::channel();
        let table = self.clone();
        tokio::spawn(async move { table.drive(wait, None, answer).await });
        let made = answered.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                reason: "the child_wait task ended without an answer".into(),
            })
        })?;
        Ok((made, token))
    }

    /// Drops a child made for a caller that left, with its token.
    async fn unmake_child(&self, child: &ActorRef, token: &str) -> Result<()> {
        self.drop_actor(child).await?;
        self.delete(self.layout().token(&super::tokens::token_hash(token)))
            .await
            .map(drop)
            .map_err(unavailable)
    }

    /// One round of a `child_wait`: read at a revision, decide (paths
    /// first, then a slot), and commit if both are free.
    async fn child_step(&self, wait: &ChildWait, at: Standing) -> Result<Round<ActorRef>> {
        let (waiter, place) = (at.queued, at.place);
        let layout = self.layout();
        let parent_key = layout.actor(wait.parent.id.0);
        let mut extra = vec![TxnOp::get(
            parent_key.clone(),
            Some(GetOptions::new().with_keys_only()),
        )];
        if let Some((id, _)) = waiter {
            extra.push(TxnOp::get(
                layout.waiter(id),
                Some(GetOptions::new().with_keys_only()),
            ));
        }
        let me = waiter.map_or(NEW, |w| w.0);
        let (world, found, wanted) = self
            .read_world(extra, |world| {
                let mut wanted = Vec::new();
                if !wait.keys.is_empty() {
                    wanted.push((me, wait.ranges.clone()));
                }
                for w in world.fenced_ahead(place) {
                    wanted.push((
                        w.id,
                        layout.conflict_ranges(w.claim.keys.iter().map(|(k, _)| k)),
                    ));
                }
                wanted
            })
            .await?;
        let mut found = found.into_iter();
        if found.next().is_none_or(|kvs| kvs.is_empty()) {
            return Err(Error::UnknownActor {
                actor: wait.parent.id.0.to_string(),
            });
        }
        if waiter.is_some() && found.next().is_none_or(|kvs| kvs.is_empty()) {
            // The waiter lease lapsed under it: its place is gone.
            return Err(Error::Unavailable {
                reason: "this request's place in the queue was lost (etcd was unreachable for longer than the queue lease); ask again".into(),
            });
        }
        let revision = world.revision;
        let queued = waiter.map_or(i64::MAX, |w| w.1);
        let mut watch = wait.ranges.clone();
        watch.push(parent_key);
        // Paths first: a child_wait waiting for a path holds and reserves
        // no slot (SPEC §11).
        let snapshot = world.snapshot(layout, wait.limits);
        let verdict = snapshot.explain(&wait.claim, None, place);
        if let Some(Blocked::Path(other, key, queued_ahead)) = verdict.first {
            let mut edges = wait.edges(queued);
            snapshot.wait_edges(wait.parent.id.0, &wait.claim, place, &mut edges);
            return Ok(Round::Blocked {
                refusal: busy(&wait.claim, &wait.parent.root, other, key, queued_ahead),
                revision,
                edges,
                watch,
            });
        }
        if let Some(limit) = snapshot.slot_limit(seats(wait.grant.read_only), place) {
            // A slot is given back by a drop (the actors), or by a
            // child_wait ahead leaving or stopping to reserve one.
            watch.push(layout.actors());
            watch.push(layout.slot_waiters());
            for (id, ranges) in &wanted {
                if *id != me {
                    watch.extend(ranges.iter().cloned());
                }
            }
            let mut edges = wait.edges(queued);
            edges.slot = Some(slot_kind(limit));
            let max = match limit {
                SlotLimit::MaxActors => wait.limits.0,
                SlotLimit::MaxWriters => wait.limits.1,
            };
            return Ok(Round::Blocked {
                refusal: Error::NoSlot {
                    limit,
                    max: max.unwrap_or(0),
                },
                revision,
                edges,
                watch,
            });
        }
        self.commit_child(wait, waiter, &world, &wanted, &verdict.relied)
            .await
    }

    /// The grant of a `child_wait`: the child's record and token, its
    /// grant fence, the count, and its waiter's keys deleted, in one
    /// transaction, with compares on everything the decision read.
    async fn commit_child(
        &self,
        wait: &ChildWait,
        waiter: Option<(u64, i64)>,
        world: &World,
        wanted: &[(u64, Vec<Vec<u8>>)],
        relied: &[(u64, i64)],
    ) -> Result<Round<ActorRef>> {
        let layout = self.layout();
        let revision = world.revision;
        let child = &wait.child;
        let lease = child.lease;
        let mut compares = vec![
            still(layout.actor(wait.parent.id.0), wait.parent.revision),
            unchanged_since(&layout.actors(), revision),
            unchanged_since(&layout.slot_waiters(), revision),
        ];
        for (_, ranges) in wanted {
            compares.extend(ranges.iter().map(|r| unchanged_since(r, revision)));
        }
        compares.extend(relied.iter().map(|&(id, at)| still(layout.hold(id), at)));
        let (record, _) = actor_record(
            child.id.0,
            lease,
            &child.name,
            &child.root,
            Some(&wait.parent),
            &wait.grant,
        )?;
        let mut writes = vec![
            TxnOp::put(
                layout.actor(child.id.0),
                to_json(&record)?,
                with_lease(lease),
            ),
            self.token_put(&wait.token, child.id.0, lease)?,
            // One admission, the actor with its grant fence, as in process.
            self.count(Counter::Admitted),
        ];
        if !wait.keys.is_empty() {
            let fence = to_json(&wait.record(false))?;
            writes.push(TxnOp::put(
                layout.hold(wait.hold),
                fence.clone(),
                with_lease(lease),
            ));
            writes.push(TxnOp::put(
                layout.fence(child.id.0, wait.hold),
                fence,
                with_lease(lease),
            ));
            writes.extend(wait.entry_puts(layout, Owner::Hold(wait.hold), lease)?);
        }
        if let Some((id, _)) = waiter {
            writes.push(TxnOp::delete(layout.waiter(id), None));
            writes.push(TxnOp::delete(layout.slot_waiter(id), None));
            writes.push(TxnOp::delete(layout.edges(id), None));
            for (key, _) in &wait.keys {
                writes.push(TxnOp::delete(layout.entry(key, Owner::Waiter(id)), None));
            }
        }
        let limit = self.inner.options.max_txn_ops;
        let ops = compares.len().max(writes.len());
        if ops > limit {
            return Err(Error::TxnTooLarge { ops, limit });
        }
        let txn = Txn::new().when(compares).and_then(writes);
        let done = self
            .txn(txn)
            .await
            .map_err(|e| etcd_error(e, Some(lease), ops, limit))?;
        if !done.succeeded() {
            return Ok(Round::Raced);
        }
        let mut made = child.clone();
        made.revision = revision_of(&done);
        Ok(Round::Granted(made))
    }

    /// Queues a `child_wait`: its record (with the parent), its mark, its
    /// grant fence's entries and its edges, on this table's waiter lease,
    /// while the parent lives. Returns its id and queue revision.
    async fn enqueue_child(&self, wait: &ChildWait, edges: &Edges) -> Result<(u64, i64)> {
        let layout = self.layout();
        let id = self.next_id()?;
        let waiter_lease = self.waiter_lease().await?;
        let lease = with_lease(waiter_lease);
        let record = to_json(&wait.record(true))?;
        let mut writes = vec![
            TxnOp::put(layout.waiter(id), record.clone(), lease.clone()),
            TxnOp::put(layout.slot_waiter(id), "", lease.clone()),
            TxnOp::put(layout.edges(id), to_json(edges)?, lease.clone()),
            self.count(Counter::Waited),
        ];
        writes.extend(wait.entry_puts(layout, Owner::Waiter(id), waiter_lease)?);
        let limit = self.inner.options.max_txn_ops;
        if writes.len() > limit {
            return Err(Error::TxnTooLarge {
                ops: writes.len(),
                limit,
            });
        }
        let txn = Txn::new()
            .when([still(layout.actor(wait.parent.id.0), wait.parent.revision)])
            .and_then(writes);
        let done = self
            .queue_txn(txn, waiter_lease, (id, record), &wait.keys, (0, limit))
            .await?;
        if !done.succeeded() {
            return Err(Error::UnknownActor {
                actor: wait.parent.id.0.to_string(),
            });
        }
        Ok((id, revision_of(&done)))
    }

    /// The slot waits that request `me` (with `mine`) makes endless
    /// (SPEC §11), if it is the one to refuse: for each `child_wait`
    /// waiting for a slot (its edge record says which limit), whether
    /// every live child holding a slot of that limit waits on its
    /// requester. Reads the live actors only when such a wait exists.
    pub(crate) async fn slot_cycle(
        &self,
        me: u64,
        mine: &Edges,
        others: &BTreeMap<u64, Edges>,
    ) -> Result<Option<Vec<String>>> {
        let mut waits: Vec<(u64, SlotKind)> = others
            .iter()
            .filter(|(id, _)| **id != me)
            .filter_map(|(id, e)| e.slot.map(|s| (*id, s)))
            .collect();
        if let Some(kind) = mine.slot {
            waits.push((me, kind));
        }
        if waits.is_empty() {
            return Ok(None);
        }
        let (revision, [actors]) = self.read_prefixes([self.layout().actors()]).await?;
        let world = World::parse(revision, &actors, &[], &[], &[]);
        for (waiter, kind) in waits {
            let holders = world.holders(kind);
            if let Some(cycle) = deadlock::slot_deadlock(me, mine, others, waiter, &holders) {
                return Ok(Some(cycle));
            }
        }
        Ok(None)
    }

    /// What the dump shows of each `child_wait` (read at `revision`): the
    /// parent as the actor, and the cause, judged as in process — `Slots`,
    /// `Writers` (the live children and the slots reserved ahead), then
    /// the path and its holder.
    pub(crate) async fn dump_child_waits(
        &self,
        revision: i64,
        limits: Limits,
        actors: &[KeyValue],
        waiters: &[KeyValue],
        fences: &[KeyValue],
        moved: &[KeyValue],
    ) -> Result<Vec<ChildWaitShown>> {
        // Most dumps have no child_wait: find that out without decoding
        // the session's records a second time (a dump may be read in a
        // loop by a monitor).
        let marked = |kv: &KeyValue| kv.value().windows(10).any(|w| w == b"\"child_of\"");
        if !waiters.iter().any(marked) {
            return Ok(Vec::new());
        }
        let layout = self.layout();
        let mut world = World::parse(revision, actors, waiters, fences, moved);
        if world.slot_waiters.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<(u64, Vec<Vec<u8>>)> = world
            .slot_waiters
            .iter()
            .filter(|w| !w.claim.keys.is_empty())
            .map(|w| {
                (
                    w.id,
                    layout.conflict_ranges(w.claim.keys.iter().map(|(k, _)| k)),
                )
            })
            .collect();
        self.read_entries(&mut world, &wanted).await?;
        let snapshot = world.snapshot(layout, limits);
        let shown = world
            .slot_waiters
            .iter()
            .map(|w| ChildWaitShown {
                id: w.id,
                cause: snapshot
                    .explain(&w.claim, Some(w.seats()), w.place())
                    .cause(&w.claim),
                parent: ActorId(w.child.parent),
                parent_name: w.child.parent_name.clone(),
            })
            .collect();
        Ok(shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::judge;

    fn waiter(id: u64, priority: i32, revision: i64) -> SlotWaiter {
        SlotWaiter {
            id,
            revision,
            priority,
            child: ChildOf {
                parent: 1,
                parent_name: "lead".into(),
                read_only: false,
            },
            claim: Claim {
                owner: ActorId(id),
                lineage: vec![ActorId(1), ActorId(id)].into(),
                kind: HoldKind::Fence,
                keys: Vec::new(),
            },
        }
    }

    #[test]
    fn queued_child_waits_reserve_slots_in_queue_order() {
        let layout = Layout::new("s");
        let mut world = World {
            children: vec![(7, "k".into(), false)],
            slot_waiters: vec![waiter(10, 0, 5), waiter(11, 0, 9)],
            ..World::default()
        };
        world.slot_waiters[1].child.read_only = true;
        let limits = (Some(3), Some(1));
        let snapshot = world.snapshot(&layout, limits);
        // A new child (priority 0) is behind both.
        let new = Place::new(0);
        assert_eq!(judge::reserved_ahead(&snapshot, new), (2, 1));
        assert_eq!(
            snapshot.slot_limit(seats(true), new),
            Some(SlotLimit::MaxActors)
        );
        // The first queued one has nobody ahead; the second has the first.
        let (first, second) = (world.slot_waiters[0].place(), world.slot_waiters[1].place());
        assert_eq!(judge::reserved_ahead(&snapshot, first), (0, 0));
        assert_eq!(judge::reserved_ahead(&snapshot, second), (1, 1));
        assert_eq!(
            snapshot.slot_limit(seats(false), first),
            Some(SlotLimit::MaxWriters)
        );
        assert_eq!(snapshot.slot_limit(seats(true), first), None);
        assert_eq!(world.holders(SlotKind::Writers), vec![(7, "k".to_string())]);
    }
}
