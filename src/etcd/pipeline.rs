//! The one admission pipeline: read, decide, commit or wait, until an
//! answer — for every request the table waits on, whatever it asks for.
//!
//! A request asks for a hold (`admission`: a call or a fence) or for a
//! child and its slot (`slots`: `child_wait`), as the core's queue asks
//! `Need::Hold` or `Need::Child`. What differs between the two is one
//! round (what it reads, how it judges, what it commits) and how it queues
//! and cleans up; that is the [`Need`] trait. Everything else is here,
//! once: the try-only refusal, the deadlock check before a wait and the
//! reordering that may end a cycle, queuing, waiting by watch, timeouts and
//! cancellation, a resumed wait taken over, rounds whose answer was lost,
//! the count of why a request ended, and a grant nobody will receive.

use std::time::Duration;

use tokio::sync::oneshot;

use crate::core::key::{Key, Mode};
use crate::core::table::Claim;
use crate::error::{Error, Result};

use super::counters::{Counter, Told};
use super::deadlock::{self, Edges};
use super::decide::{Moved, Place};
use super::graph::true_edges;
use super::queue::{Mine, WaitEnded};
use super::reorder::{Closed, Deciding};
use super::store::Table;

/// How long a request may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    Never,
    Forever,
    For(Duration),
}

/// A request already in the queue, as the task serving it knows it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Queued {
    pub(super) waiter: u64,
    /// Its place among equal priorities: the revision it first queued at.
    pub(super) place: i64,
    /// The revision this task wrote its waiter record at.
    pub(super) written: i64,
}

/// Where a request stands for one round.
#[derive(Debug, Clone, Copy)]
pub(super) struct Standing {
    /// Its place in the queue order (a new request's is behind everyone
    /// of its priority).
    pub(super) place: Place,
    /// Its waiter id and the revision this task wrote its record at, once
    /// it queued.
    pub(super) queued: Option<(u64, i64)>,
}

/// What one round of a request came to.
pub(super) enum Round<G> {
    Granted(G),
    /// Something the decision relied on changed since the read: read again.
    Raced,
    /// Blocked as read at `revision`: a try-only request is refused with
    /// `refusal`; a waiting one has these wait-for edges and watches these
    /// ranges for a change.
    Blocked {
        refusal: Error,
        revision: i64,
        edges: Edges,
        watch: Vec<Vec<u8>>,
    },
    /// etcd did not answer the round's transaction: it may have committed.
    /// The next round reads whether it did and goes on from there, so
    /// asking again is safe.
    Unclear(Error),
    /// Its waiter record moved to another table's waiter lease: the
    /// request was resumed there (`Table::resume`).
    TakenOver,
}

/// How many rounds in a row may end unclear before the request fails
/// `unavailable` (each call is bounded by its own timeout).
const UNCLEAR_ROUNDS: u32 = 3;

/// What a request asks for, as the pipeline drives it.
pub(super) trait Need: Send + Sync + 'static {
    /// What its grant hands the caller.
    type Granted: Send + 'static;

    /// Whether its wait-for edge record is written again whenever a round
    /// finds other edges. A hold's edges are judged afresh by every read
    /// of the graph, so its record is written once, when it queues; a
    /// `child_wait`'s slot wait (which limit it waits for) is not.
    const REWRITES_EDGES: bool;

    /// Its keys, for the queue's entries and a timeout's paths.
    fn keys(&self) -> &[(Key, Mode)];
    /// What it claims, for the deadlock check.
    fn claim(&self) -> &Claim;
    /// The actor that asks (id, name): a `child_wait`'s parent.
    fn asker(&self) -> (u64, &str);
    /// Whether a refusal of this request is counted (and told) on its own.
    fn counts_refusal(&self) -> bool {
        true
    }
    fn wait(&self) -> Wait;
    /// Its place before it queued: behind everyone of its priority.
    fn first_place(&self) -> Place;
    /// Its place once queued as `waiter` at `revision`, or moved to `to`.
    fn queued_place(&self, waiter: u64, revision: i64, to: Option<Moved>) -> Place;
    /// It, as the reordering search takes a request not queued yet.
    fn deciding(&self) -> Deciding<'_>;

    /// One round: read at a revision, decide, and commit if free.
    async fn round(&self, table: &Table, at: Standing) -> Result<Round<Self::Granted>>;
    /// Queues it with its first edges (and the place a reordering gave it
    /// before it queued); its waiter id and queue revision.
    async fn enqueue(
        &self,
        table: &Table,
        edges: &Edges,
        moved: Option<Moved>,
    ) -> Result<(u64, i64)>;
    /// Undoes a round that may have committed unseen: the request ends
    /// `unavailable`, and a grant nobody was told of must not stay.
    async fn lost(&self, table: &Table);
    /// Undoes a grant whose caller left before it was answered.
    async fn unclaimed(&self, table: &Table, granted: Self::Granted);
}

impl Table {
    /// Drives `need` until it has an answer, and sends it: from scratch, or
    /// (`queued`) as the waiter a resume took over. Whatever the request
    /// wrote to etcd it cleans up, however it ends.
    pub(super) async fn drive<N: Need>(
        self,
        need: N,
        queued: Option<Queued>,
        answer: oneshot::Sender<Result<N::Granted>>,
    ) {
        let mut at = Standing {
            place: match queued {
                Some(q) => need.queued_place(q.waiter, q.place, None),
                None => need.first_place(),
            },
            queued: queued.map(|q| (q.waiter, q.written)),
        };
        // Resumed through another table (`Table::resume`): the wait, and
        // its clean-up, are that table's now.
        let mut taken_over = false;
        let started = tokio::time::Instant::now();
        let deadline = match need.wait() {
            Wait::For(d) => Some(started + d),
            _ => None,
        };
        let mut answer = answer;
        let mut written_edges: Option<Edges> = None;
        let mut unclear = 0;
        // How often this request reordered the queue, and where that moved
        // it before it queued.
        let mut reorders = 0;
        let mut moved_to: Option<Moved> = None;
        let outcome: Result<N::Granted> = loop {
            if answer.is_closed() {
                break Err(Error::Unavailable {
                    reason: "cancelled".into(),
                });
            }
            let round = need.round(&self, at).await;
            if !matches!(round, Ok(Round::Unclear(_))) {
                unclear = 0;
            }
            let (revision, edges, watch) = match round {
                Ok(Round::Granted(granted)) => break Ok(granted),
                Ok(Round::Raced) => continue,
                Ok(Round::TakenOver) => {
                    taken_over = true;
                    break Err(Error::Unavailable {
                        reason: "this request was resumed through another server".into(),
                    });
                }
                Ok(Round::Unclear(e)) => {
                    let late = deadline.is_some_and(|at| tokio::time::Instant::now() >= at);
                    if unclear + 1 >= UNCLEAR_ROUNDS || late {
                        break Err(e);
                    }
                    unclear += 1;
                    // Another member most likely answers the next call; a
                    // pause lets a leader election settle.
                    tokio::time::sleep(Duration::from_millis(100 << unclear)).await;
                    continue;
                }
                Ok(Round::Blocked {
                    refusal,
                    revision,
                    edges,
                    watch,
                }) => {
                    if need.wait() == Wait::Never {
                        break Err(refusal);
                    }
                    (revision, edges, watch)
                }
                Err(e) => break Err(e),
            };
            let me = at.queued.map_or(u64::MAX, |(id, _)| id);
            match self.refused_cycle(me, &edges, need.claim()).await {
                Ok(Some(closed)) => {
                    let deciding = at.queued.is_none().then(|| need.deciding());
                    match self.end_cycle(closed, deciding, &mut reorders).await {
                        Ok(new) => {
                            if let (None, Some(to)) = (at.queued, new) {
                                moved_to = Some(to);
                                at.place = need.queued_place(u64::MAX, 0, Some(to));
                            }
                            continue;
                        }
                        Err(e) => break Err(e),
                    }
                }
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            let Some((id, _)) = at.queued else {
                match need.enqueue(&self, &edges, moved_to).await {
                    Ok((id, revision)) => {
                        at.queued = Some((id, revision));
                        at.place = need.queued_place(id, revision, moved_to);
                        written_edges = Some(edges);
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            };
            if N::REWRITES_EDGES && written_edges.as_ref() != Some(&edges) {
                if let Err(e) = self.put_edges(id, &edges).await {
                    break Err(e);
                }
                written_edges = Some(edges);
            }
            let woken = self
                .wait_for_change(&watch, revision, deadline, &mut answer)
                .await;
            if let Some(end) = woken.ended(need.keys(), started) {
                break Err(end);
            }
        };
        // A refusal, a timeout or a deadlock is counted before the caller
        // hears of it; a queued request's count goes with its dequeue.
        let counted = outcome
            .as_ref()
            .err()
            .filter(|_| need.counts_refusal())
            .and_then(|e| {
                let counter = Counter::of_refusal(e)?;
                let waited = crate::sched::events::millis(started.elapsed());
                let waiter = at.queued.map(|(id, _)| id);
                Some((counter, Told::of(need.asker(), e, waiter, waited)))
            });
        if outcome.is_err() && !taken_over {
            let queued = at.queued.map(|(id, written)| (id, Mine::Written(written)));
            self.leave_queue(queued, need.keys(), counted).await;
        }
        if matches!(outcome, Err(Error::Unavailable { .. })) && !taken_over {
            need.lost(&self).await;
        }
        if let Err(Ok(granted)) = answer.send(outcome) {
            need.unclaimed(&self, granted).await;
        }
    }

    /// The deadlock check (SPEC §4, across tables): reads every waiting
    /// request's edges and refuses `me` if it is the newest request of a
    /// cycle through it. `me` is `u64::MAX` for a request about to queue.
    ///
    /// Edge records are written by their waiters when they look, so one may
    /// be stale (its blocker released a moment ago). The check therefore
    /// reads the edges, the waiting requests and the live fences in one
    /// transaction — one revision — and keeps only the edges true at it: a
    /// hard edge while its owner holds a fence that conflicts with the
    /// request, a soft edge while the earlier request still waits. A cycle
    /// found is then a cycle at that revision.
    pub(super) async fn refused_cycle(
        &self,
        me: u64,
        mine: &Edges,
        my_claim: &Claim,
    ) -> Result<Option<Closed>> {
        let (others, fences_of) = self.graph_and_fences().await?;
        let mut mine = mine.clone();
        mine.queued = others.get(&me).map_or(i64::MAX, |e| e.queued);
        true_edges(&fences_of, None, my_claim, &mut mine);
        if let Some(actors) = deadlock::refused_cycle(me, &mine, &others) {
            return Ok(Some(Closed {
                actors,
                reorderable: true,
            }));
        }
        // Slot waits (SPEC §11) are "any of" waits, judged apart.
        Ok(self
            .slot_cycle(me, &mine, &others)
            .await?
            .map(|actors| Closed {
                actors,
                reorderable: false,
            }))
    }
}
