//! Leases and the registry of everything made over the wire.
//!
//! # Implementation details
//!
//! The [`Registry`] maps wire numbers to the in-process objects: actors
//! (`Arc<Actor>`), holds (the `Reservation` or `Fence` guard) and leases.
//! Every actor and hold records its lease; dropping a lease removes its
//! entries from the maps under the registry lock and drops the objects after
//! the lock is released, which runs exactly the in-process `Drop`s (holds
//! released, waiters woken).
//!
//! A lease's `deadline` is pushed forward by every request that touches it.
//! While a long-poll of the lease is open (`polls > 0`) it cannot lapse; the
//! poll's end renews it. One reaper task sleeps until the earliest deadline
//! and is poked (a `Notify` permit) when a lease appears or a poll ends, the
//! only two events that can make the earliest deadline earlier than the one
//! it sleeps for.
//!
//! Invariants (checked by the tests through the dump): every actor and hold
//! entry names a live lease; a lease's `revoked` channel is set exactly when
//! it leaves the map.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use crate::{Actor, Fence, Reservation};

/// A guard held on behalf of a wire client.
#[derive(Debug)]
pub(crate) enum Guard {
    Reservation(Reservation),
    Fence(Fence),
}

impl Guard {
    pub(crate) fn paths(&self) -> Vec<std::path::PathBuf> {
        match self {
            Guard::Reservation(r) => r.paths(),
            Guard::Fence(f) => f.paths(),
        }
    }
}

/// An actor made over the wire.
#[derive(Debug)]
pub(crate) struct ActorSlot {
    pub(crate) actor: Arc<Actor>,
    pub(crate) lease: u64,
    /// Wire numbers of its ancestors and itself, root first: an actor token
    /// may act for this actor iff its number is in here.
    pub(crate) lineage: Arc<[u64]>,
    /// The secret half of its token.
    pub(crate) secret: String,
}

/// What became of a wait a client named with a ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ticket {
    /// Its request is being served (waiting, or being admitted).
    Waiting,
    /// Granted as this hold.
    Granted(u64),
    /// The client gave up: a grant arriving later is released at once.
    Abandoned,
}

/// A hold made over the wire.
#[derive(Debug)]
pub(crate) struct HoldSlot {
    pub(crate) guard: Guard,
    /// The ticket its request carried, if any.
    pub(crate) ticket: Option<(u64, String)>,
    pub(crate) lineage: Arc<[u64]>,
    pub(crate) lease: u64,
}

/// A lease: a TTL with actors and holds attached.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) deadline: Instant,
    /// Open long-polls of this lease; it cannot lapse while one is open.
    pub(crate) polls: usize,
    /// Set to true when the lease ends, so that its long-polls stop waiting.
    pub(crate) revoked: watch::Sender<bool>,
}

/// Everything made over the wire, by wire number.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) leases: HashMap<u64, Lease>,
    pub(crate) actors: HashMap<u64, ActorSlot>,
    pub(crate) holds: HashMap<u64, HoldSlot>,
    /// Tickets by (actor, ticket); removed with their hold, their late
    /// grant, or their lease.
    pub(crate) tickets: HashMap<(u64, String), (Ticket, u64)>,
    next_lease: u64,
}

/// What a dropped lease leaves to be dropped outside the registry lock.
#[derive(Debug, Default)]
pub(crate) struct Dropped {
    pub(crate) actors: Vec<Arc<Actor>>,
    pub(crate) holds: Vec<Guard>,
}

impl Dropped {
    /// Drops the guards first, then the actors (as a client's scope would).
    pub(crate) fn release(self) -> (usize, usize) {
        let counts = (self.actors.len(), self.holds.len());
        drop(self.holds);
        drop(self.actors);
        counts
    }
}

impl Registry {
    pub(crate) fn new_lease(&mut self, ttl: Duration) -> u64 {
        self.next_lease += 1;
        let (revoked, _) = watch::channel(false);
        self.leases.insert(
            self.next_lease,
            Lease {
                deadline: Instant::now() + ttl,
                polls: 0,
                revoked,
            },
        );
        self.next_lease
    }

    /// Pushes a lease's deadline to `ttl` from now. False when it is gone.
    pub(crate) fn renew(&mut self, lease: u64, ttl: Duration) -> bool {
        match self.leases.get_mut(&lease) {
            Some(l) => {
                l.deadline = Instant::now() + ttl;
                true
            }
            None => false,
        }
    }

    /// Removes a lease with its actors and holds. `None` when it is gone.
    pub(crate) fn remove_lease(&mut self, lease: u64) -> Option<Dropped> {
        let entry = self.leases.remove(&lease)?;
        let _ = entry.revoked.send(true);
        let holds: Vec<u64> = self
            .holds
            .iter()
            .filter(|(_, h)| h.lease == lease)
            .map(|(id, _)| *id)
            .collect();
        self.tickets.retain(|_, (_, l)| *l != lease);
        let actors: Vec<u64> = self
            .actors
            .iter()
            .filter(|(_, a)| a.lease == lease)
            .map(|(id, _)| *id)
            .collect();
        Some(Dropped {
            holds: holds
                .iter()
                .filter_map(|id| self.holds.remove(id))
                .map(|h| h.guard)
                .collect(),
            actors: actors
                .iter()
                .filter_map(|id| self.actors.remove(id))
                .map(|a| a.actor)
                .collect(),
        })
    }

    /// Removes every lease (shutdown).
    pub(crate) fn clear(&mut self) -> Dropped {
        for lease in self.leases.values() {
            let _ = lease.revoked.send(true);
        }
        self.leases.clear();
        self.tickets.clear();
        Dropped {
            actors: self.actors.drain().map(|(_, a)| a.actor).collect(),
            holds: self.holds.drain().map(|(_, h)| h.guard).collect(),
        }
    }

    /// Removes a hold (and its ticket).
    pub(crate) fn remove_hold(&mut self, hold: u64) -> Option<HoldSlot> {
        let slot = self.holds.remove(&hold)?;
        if let Some(ticket) = &slot.ticket {
            self.tickets.remove(ticket);
        }
        Some(slot)
    }

    /// Leases past their deadline with no open poll, and the earliest
    /// deadline among the others.
    pub(crate) fn lapsed(&self, now: Instant) -> (Vec<u64>, Option<Instant>) {
        let mut lapsed = Vec::new();
        let mut next: Option<Instant> = None;
        for (id, lease) in &self.leases {
            if lease.polls > 0 {
                continue;
            }
            if lease.deadline <= now {
                lapsed.push(*id);
            } else {
                next = Some(next.map_or(lease.deadline, |n| n.min(lease.deadline)));
            }
        }
        (lapsed, next)
    }
}

/// The reaper: drops lapsed leases, sleeping until the earliest deadline.
pub(crate) async fn reap(app: Arc<super::rpc::App>, poke: Arc<Notify>) {
    let mut stop = app.stopping();
    loop {
        let (lapsed, next) = app.registry().lapsed(Instant::now());
        for lease in lapsed {
            if let Some((actors, holds)) = app.drop_lease(lease) {
                let lease = app.handle('l', lease);
                tracing::info!(%lease, actors, holds, "lease lapsed");
                app.sched.emit(|| crate::EventKind::LeaseExpired {
                    lease,
                    actors,
                    holds,
                });
            }
        }
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = poke.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
