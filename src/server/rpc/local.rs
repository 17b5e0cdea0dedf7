//! The in-process table's side of the methods: the registry of actors,
//! holds, leases and tickets made over the wire (`super::lease`), and
//! keeping a lease from lapsing while one of its requests waits.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::{App, invalid};
use crate::server::auth::Caller;
use crate::server::lease::{ActorSlot, Guard, HoldSlot, Ticket};
use crate::{Actor, Error, Result, tickets};

/// A ticket claimed for one request: while it lives the ticket is
/// `Waiting`; dropped before the grant (an error, a timeout, a client that
/// went away) it frees the ticket.
pub(super) struct TicketClaim {
    app: Arc<App>,
    key: (u64, String),
    granted: bool,
}

impl Drop for TicketClaim {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut reg = self.app.reg.lock();
        if matches!(
            reg.tickets.get(&self.key),
            Some((Ticket::Waiting | Ticket::Abandoned, _))
        ) {
            reg.tickets.remove(&self.key);
        }
    }
}

/// What runs when actors made over the wire are dropped (see
/// [`App::actors_gone`]); `/mcp` sets it.
pub(crate) struct ActorsGone(pub(crate) Box<dyn Fn(Vec<u64>) + Send + Sync>);

impl std::fmt::Debug for ActorsGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ActorsGone")
    }
}

/// `/mcp`'s named agents, as the operator sees and frees them (the live
/// page, `agent.release`); `/mcp` sets it.
pub(crate) trait NamedAgents: Send + Sync {
    /// Drops every agent named `name` (of any token) with its
    /// reservations, at once; how many went.
    fn release(&self, name: &str) -> usize;
    /// The agents no session or call acts as now: their reservations
    /// stay until `--mcp-idle` or a release.
    fn absent(&self) -> Vec<AbsentAgent>;
    /// Acts as the named agent `name` of `caller`'s token — the actor
    /// every `/mcp` session and call naming it shares, made on first use
    /// as they make it — for as long as the returned seat lives
    /// (`files.run {agent}`: the command's writes are judged against that
    /// agent's reads): its actor, and the seat to keep meanwhile.
    fn seat(&self, caller: Caller, name: String) -> SeatFuture<'_>;
}

/// What [`NamedAgents::seat`] answers: the agent's actor, and what keeps
/// it seated until dropped.
pub(crate) type SeatFuture<'a> = std::pin::Pin<
    Box<
        dyn Future<
                Output = std::result::Result<(Arc<Actor>, Box<dyn std::any::Any + Send>), String>,
            > + Send
            + 'a,
    >,
>;

/// An agent with no session (see [`NamedAgents::absent`]).
#[derive(Debug, Clone)]
pub(crate) struct AbsentAgent {
    /// Its name (a minted agent's is its handle).
    pub(crate) name: String,
    /// Its actor's id in the table, while it has one.
    pub(crate) actor: Option<u64>,
    /// How long since its last session or call ended.
    pub(crate) idle: std::time::Duration,
}

/// Keeps a lease from lapsing while a long-poll is open; its end renews it.
struct OpenPoll {
    app: Arc<App>,
    lease: u64,
}

impl Drop for OpenPoll {
    fn drop(&mut self) {
        {
            let mut reg = self.app.reg.lock();
            if let Some(lease) = reg.leases.get_mut(&self.lease) {
                lease.polls = lease.polls.saturating_sub(1);
                lease.deadline = Instant::now() + self.app.ttl;
            }
        }
        self.app.poke.notify_one();
    }
}

impl App {
    /// The actor a request acts for, after the caller's rights are checked;
    /// renews its lease.
    pub(super) fn actor_for(
        &self,
        caller: &Caller,
        handle: &str,
    ) -> Result<(Arc<Actor>, u64, Arc<[u64]>)> {
        let n = self.parse('a', "an actor", handle)?;
        let mut reg = self.reg.lock();
        let slot = reg.actors.get(&n).ok_or_else(|| Error::UnknownActor {
            actor: handle.to_string(),
        })?;
        self.may(caller, &slot.lineage, handle)?;
        let found = (slot.actor.clone(), slot.lease, slot.lineage.clone());
        reg.renew(found.1, self.ttl);
        Ok(found)
    }

    pub(super) fn lease_of(&self, caller: &Caller, handle: &str) -> Result<u64> {
        let lease = self.parse('l', "a lease", handle)?;
        let reg = self.reg.lock();
        if !reg.leases.contains_key(&lease) {
            return Err(Error::UnknownLease {
                lease: handle.to_string(),
            });
        }
        if let Caller::Actor(n) = caller {
            if reg.actors.get(n).map(|a| a.lease) != Some(lease) {
                return Err(Error::Forbidden {
                    reason: format!("this token's actor does not belong to lease {handle}"),
                });
            }
        }
        Ok(lease)
    }

    /// Drops a lease exactly as dropping its actors and guards in process.
    pub(crate) fn drop_lease(&self, lease: u64) -> Option<(usize, usize)> {
        let dropped = self.reg.lock().remove_lease(lease)?;
        let gone: Vec<u64> = dropped.actors.iter().map(|a| a.id().0).collect();
        let counts = dropped.release();
        self.actors_gone(gone);
        Some(counts)
    }

    /// Tells what hangs on actors made over the wire (MCP sessions opened
    /// with their tokens, and those sessions' named agents) that the
    /// actors `gone` were dropped: a revoke wins over their lifetimes
    /// (SPEC §14).
    pub(crate) fn actors_gone(&self, gone: Vec<u64>) {
        if gone.is_empty() {
            return;
        }
        if let Some(hook) = self.on_actors_gone.get() {
            (hook.0)(gone);
        }
    }

    /// Drops everything (shutdown).
    pub(crate) fn drop_all(&self) -> (usize, usize) {
        let dropped = self.reg.lock().clear();
        dropped.release()
    }

    /// Runs a wait on behalf of a lease: the lease cannot lapse while it
    /// runs, and the wait ends (with nothing left behind: the future is
    /// dropped) when the lease ends or the server stops.
    pub(super) async fn long_poll<T>(
        self: &Arc<Self>,
        lease: u64,
        wait: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut revoked = {
            let mut reg = self.reg.lock();
            let Some(entry) = reg.leases.get_mut(&lease) else {
                return Err(Error::UnknownLease {
                    lease: self.handle('l', lease),
                });
            };
            entry.polls += 1;
            entry.revoked.subscribe()
        };
        let _open = OpenPoll {
            app: self.clone(),
            lease,
        };
        let mut stop = self.stop_rx.clone();
        tokio::select! {
            result = wait => result,
            _ = revoked.wait_for(|r| *r) => Err(Error::UnknownLease { lease: self.handle('l', lease) }),
            _ = stop.wait_for(|s| *s) => Err(Error::Unavailable {
                reason: "the server is shutting down; every waiter was failed and every hold released".into(),
            }),
        }
    }

    /// Files a granted guard under its lease; a lease that ended meanwhile
    /// gets the guard dropped (released), never leaked.
    pub(super) fn keep_hold(
        &self,
        guard: Guard,
        lineage: Arc<[u64]>,
        lease: u64,
        claim: Option<TicketClaim>,
    ) -> Result<Value> {
        let ticket = claim.as_ref().map(|c| c.key.clone());
        let (id, kind) = match &guard {
            Guard::Reservation(r) => (r.id().0, "call"),
            Guard::Fence(f) => (f.id().0, "fence"),
        };
        let paths = guard.paths();
        let mut reg = self.reg.lock();
        if !reg.leases.contains_key(&lease) {
            drop(reg);
            drop(guard);
            return Err(Error::UnknownLease {
                lease: self.handle('l', lease),
            });
        }
        if let Some(key) = &ticket {
            if let Some((Ticket::Abandoned, _)) = reg.tickets.get(key) {
                // The client gave up before this grant: hand it back.
                reg.tickets.remove(key);
                drop(reg);
                drop(guard);
                drop(claim);
                return Err(Error::UnknownHold {
                    hold: self.handle('h', id),
                });
            }
            reg.tickets
                .insert(key.clone(), (Ticket::Granted(id), lease));
        }
        if let Some(mut claim) = claim {
            claim.granted = true;
        }
        reg.holds.insert(
            id,
            HoldSlot {
                guard,
                ticket,
                lineage,
                lease,
            },
        );
        reg.renew(lease, self.ttl);
        drop(reg);
        Ok(json!({"hold": self.handle('h', id), "kind": kind, "paths": paths}))
    }

    /// Claims `ticket` for one request of actor `n`: refused when it is
    /// already live (a second request must never overwrite the first's
    /// answer), too long, or one too many for the actor.
    pub(super) fn claim_ticket(
        self: &Arc<Self>,
        n: u64,
        ticket: String,
        lease: u64,
    ) -> Result<TicketClaim> {
        tickets::check_len(&ticket)?;
        let mut reg = self.reg.lock();
        let key = (n, ticket);
        if reg.tickets.contains_key(&key) {
            return Err(invalid(format!(
                "ticket '{}' is already live (a request with it is waiting or holds, or it was given up); \
                 name each request with a new ticket",
                key.1
            )));
        }
        tickets::check_room(reg.tickets.keys().filter(|(owner, _)| *owner == n).count())?;
        reg.tickets.insert(key.clone(), (Ticket::Waiting, lease));
        Ok(TicketClaim {
            app: self.clone(),
            key,
            granted: false,
        })
    }

    /// A resumed request (`resume` with its `ticket`) of actor `n`: the
    /// answer its grant had, if it was granted; `None` to ask for it now.
    /// A wait this server serves ends with its connection, so there is no
    /// wait to take over here: only a grant is found.
    pub(super) fn resumed(&self, n: u64, ticket: Option<&str>) -> Result<Option<Value>> {
        let ticket = ticket.ok_or_else(|| {
            invalid("resume names the request by its ticket: give the ticket it was asked with")
        })?;
        let reg = self.reg.lock();
        match reg.tickets.get(&(n, ticket.to_string())) {
            Some((Ticket::Granted(hold), _)) => {
                let slot = reg.holds.get(hold).ok_or_else(|| Error::UnknownHold {
                    hold: self.handle('h', *hold),
                })?;
                let kind = match &slot.guard {
                    Guard::Reservation(_) => "call",
                    Guard::Fence(_) => "fence",
                };
                Ok(Some(json!({
                    "hold": self.handle('h', *hold),
                    "kind": kind,
                    "paths": slot.guard.paths(),
                })))
            }
            Some((Ticket::Abandoned, _)) => Err(Error::Unavailable {
                reason: "the caller gave this request up".into(),
            }),
            // Its first request is still being served (its connection's
            // end not noticed yet): asked again, it will have an answer.
            Some((Ticket::Waiting, _)) => Err(Error::Unavailable {
                reason: "the ticket's first request is still being answered; resume again".into(),
            }),
            None => Ok(None),
        }
    }

    /// The hold a ticket was granted as, or `None` after marking the ticket
    /// abandoned, so that a grant still on its way is released on arrival.
    pub(super) fn release_ticket(
        &self,
        caller: &Caller,
        actor: &str,
        ticket: &str,
    ) -> Result<Option<u64>> {
        let n = self.parse('a', "an actor", actor)?;
        tickets::check_len(ticket)?;
        let mut reg = self.reg.lock();
        let slot = reg.actors.get(&n).ok_or_else(|| Error::UnknownActor {
            actor: actor.to_string(),
        })?;
        self.may(caller, &slot.lineage, actor)?;
        let lease = slot.lease;
        let key = (n, ticket.to_string());
        match reg.tickets.get(&key) {
            Some((Ticket::Granted(hold), _)) => Ok(Some(*hold)),
            Some(_) => {
                reg.tickets.insert(key, (Ticket::Abandoned, lease));
                Ok(None)
            }
            None => {
                // Never seen: marked so a request still on its way is
                // refused, within the actor's ticket limit.
                tickets::check_room(reg.tickets.keys().filter(|(owner, _)| *owner == n).count())?;
                reg.tickets.insert(key, (Ticket::Abandoned, lease));
                Ok(None)
            }
        }
    }

    /// Files a new actor; its token's secret is made here.
    pub(super) fn keep_actor(
        &self,
        actor: Actor,
        lease: Option<u64>,
        parent_lineage: Option<&[u64]>,
    ) -> Result<Value> {
        let n = actor.id().0;
        let secret = crate::random::hex(32)?;
        let lineage: Arc<[u64]> = parent_lineage
            .unwrap_or_default()
            .iter()
            .copied()
            .chain([n])
            .collect();
        let root = actor.root().to_path_buf();
        let name = actor.name().to_string();
        let mut reg = self.reg.lock();
        let lease = match lease {
            Some(l) if reg.leases.contains_key(&l) => l,
            Some(l) => {
                drop(reg);
                drop(actor);
                return Err(Error::UnknownLease {
                    lease: self.handle('l', l),
                });
            }
            None => {
                let l = reg.new_lease(self.ttl);
                self.poke.notify_one();
                tracing::info!(lease = %self.handle('l', l), actor = %name, "lease created");
                l
            }
        };
        reg.actors.insert(
            n,
            ActorSlot {
                actor: Arc::new(actor),
                lease,
                lineage,
                secret: secret.clone(),
            },
        );
        reg.renew(lease, self.ttl);
        drop(reg);
        let handle = self.handle('a', n);
        Ok(json!({
            "actor": handle,
            "token": format!("{handle}.{secret}"),
            "lease": self.handle('l', lease),
            "name": name,
            "root": root,
        }))
    }
}
