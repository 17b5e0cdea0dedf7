//! `admit`, `fence`, `fence.extend`, `fence.narrow` and `release` (SPEC
//! §2–§4, §13): holds taken, changed and given back.

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::{AdmitParams, Change, HoldTargetsParams, Release};
use super::{App, HEAVY_TARGETS, InProcess, invalid, targets, timeout};
use crate::server::auth::Caller;
use crate::server::lease::Guard;
use crate::{Error, HoldKind, ProtocolError, Result};

/// The hold methods of a table.
pub(super) trait Holds {
    /// `admit` (a call reservation) or `fence`, waiting or try-only.
    async fn admit(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: AdmitParams,
        kind: HoldKind,
    ) -> Result<Value>;

    /// `fence.extend` (a fence or a call reservation, try-only) and
    /// `fence.narrow` (a fence), all-or-nothing.
    async fn change(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: HoldTargetsParams,
        change: Change,
    ) -> Result<Value>;

    /// `release`: a hold, or a ticket's request (granted or not) given up.
    async fn release(&self, app: &Arc<App>, caller: &Caller, release: Release) -> Result<Value>;
}

fn narrow_only_fences(hold: &str) -> Error {
    invalid(format!(
        "{hold} is a call reservation; only a fence can be narrowed"
    ))
}

impl Holds for InProcess {
    async fn admit(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: AdmitParams,
        kind: HoldKind,
    ) -> Result<Value> {
        let targets = targets(&p.targets, app.max_targets)?;
        let wait = p.waits(kind);
        let (actor, lease, lineage) = app.actor_for(caller, &p.actor)?;
        if p.resume {
            if let Some(granted) = app.resumed(actor.id().0, p.ticket.as_deref())? {
                return Ok(granted);
            }
        }
        let claim = match p.ticket {
            Some(ticket) => Some(app.claim_ticket(actor.id().0, ticket, lease)?),
            None => None,
        };
        let heavy = targets.len() > HEAVY_TARGETS;
        let targets = if heavy {
            // Resolving many paths touches the file system for each: off
            // the async workers, so others' answers never wait.
            let a = actor.clone();
            App::blocking(move || a.resolve(targets).map(|r| r.targets().to_vec())).await?
        } else {
            targets
        };
        let mut request = actor.request(targets).priority(p.priority);
        if let Some(label) = p.label {
            request = request.label(label);
        }
        let limit = timeout(p.timeout_ms);
        let guard = match (kind, wait) {
            (HoldKind::Call, true) => {
                let waiting = match limit {
                    Some(d) => request.admit_timeout(d),
                    None => request.admit(),
                };
                Guard::Reservation(app.long_poll(lease, waiting).await?)
            }
            // So is checking them against the table.
            (HoldKind::Call, false) if heavy => {
                Guard::Reservation(App::blocking(move || request.try_admit()).await?)
            }
            (HoldKind::Call, false) => Guard::Reservation(request.try_admit()?),
            (HoldKind::Fence, true) => {
                let waiting = match limit {
                    Some(d) => request.fence_wait_timeout(d),
                    None => request.fence_wait(),
                };
                Guard::Fence(app.long_poll(lease, waiting).await?)
            }
            (HoldKind::Fence, false) if heavy => {
                Guard::Fence(App::blocking(move || request.fence()).await?)
            }
            (HoldKind::Fence, false) => Guard::Fence(request.fence()?),
            // No method asks for one: the file tools give claims.
            (HoldKind::Claim, _) => return Err(claim_asked()),
        };
        app.keep_hold(guard, lineage, lease, claim)
    }

    async fn change(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: HoldTargetsParams,
        change: Change,
    ) -> Result<Value> {
        let targets = targets(&p.targets, app.max_targets)?;
        let n = app.parse('h', "a hold", &p.hold)?;
        let mut reg = app.registry();
        let slot = reg.holds.get_mut(&n).ok_or_else(|| Error::UnknownHold {
            hold: p.hold.clone(),
        })?;
        app.may(caller, &slot.lineage, &p.hold)?;
        match (&mut slot.guard, change) {
            (Guard::Fence(f), Change::Extend) => f.extend(targets)?,
            (Guard::Fence(f), Change::Narrow) => f.narrow(targets)?,
            (Guard::Reservation(r), Change::Extend) => r.extend(targets)?,
            (Guard::Reservation(_), Change::Narrow) => return Err(narrow_only_fences(&p.hold)),
        }
        let paths = slot.guard.paths();
        let lease = slot.lease;
        reg.renew(lease, app.ttl);
        Ok(json!({"hold": p.hold, "paths": paths}))
    }

    async fn release(&self, app: &Arc<App>, caller: &Caller, release: Release) -> Result<Value> {
        let (n, named, claim) = match release {
            Release::Hold(hold, claim) => (app.parse('h', "a hold", &hold)?, hold, claim),
            Release::Ticket { actor, ticket } => {
                match app.release_ticket(caller, &actor, &ticket)? {
                    Some(hold) => (hold, app.handle('h', hold), false),
                    None => return Ok(json!({"released": null, "ticket": ticket})),
                }
            }
        };
        let slot = {
            let mut reg = app.registry();
            let slot = reg.holds.get(&n).ok_or_else(|| Error::UnknownHold {
                hold: named.clone(),
            })?;
            app.may(caller, &slot.lineage, &named)?;
            let lease = slot.lease;
            reg.renew(lease, app.ttl);
            reg.remove_hold(n)
        };
        // Given before the reservation goes, inside it: no other writer
        // slips in between (a fence leaves no claim: it is no write).
        let ttl = app.sched.config().claim_ttl_of();
        if let (true, Some(Guard::Reservation(call))) =
            (claim && !ttl.is_zero(), slot.as_ref().map(|s| &s.guard))
        {
            call.claim(ttl);
        }
        drop(slot);
        Ok(json!({"released": named}))
    }
}

#[cfg(feature = "etcd")]
mod on_etcd {
    use super::*;
    use crate::HoldId;
    use crate::etcd::AdmitRequest;
    use crate::server::rpc::EtcdBackend;

    impl Holds for EtcdBackend {
        async fn admit(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: AdmitParams,
            kind: HoldKind,
        ) -> Result<Value> {
            let targets = targets(&p.targets, app.max_targets)?;
            let wait = p.waits(kind);
            let actor = self.actor(app, caller, &p.actor).await?;
            let resolved = self.targets_of(&actor, &targets, kind)?;
            let mut request = match kind {
                HoldKind::Fence => AdmitRequest::fence(resolved),
                HoldKind::Call => AdmitRequest::call(resolved),
                // No method asks for one: the file tools give claims.
                HoldKind::Claim => return Err(claim_asked()),
            }
            .priority(p.priority);
            if let Some(label) = p.label {
                request = request.label(label);
            }
            if let Some(ticket) = &p.ticket {
                request = request.ticket(ticket.clone());
            }
            if p.resume {
                request = request.resume();
            }
            if wait {
                request = match timeout(p.timeout_ms) {
                    Some(d) => request.wait_timeout(d),
                    None => request.wait(),
                };
            }
            let admitting = self.table.admit(&actor, request);
            let grant = if wait {
                self.long_poll(app, actor.lease(), admitting).await?
            } else {
                admitting.await?
            };
            Ok(json!({
                "hold": app.handle('h', grant.hold().0),
                "kind": match grant.kind() {
                    HoldKind::Fence => "fence",
                    HoldKind::Call => "call",
                    HoldKind::Claim => "claim",
                },
                "paths": grant.paths(),
                "revision": grant.revision(),
            }))
        }

        async fn change(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: HoldTargetsParams,
            change: Change,
        ) -> Result<Value> {
            let targets = targets(&p.targets, app.max_targets)?;
            let hold = HoldId(app.parse('h', "a hold", &p.hold)?);
            let (lineage, kind) = self.table.hold_lineage(hold).await?;
            app.may(caller, &lineage, &p.hold)?;
            let owner = lineage.last().copied().unwrap_or_default();
            let actor = self.table.actor(crate::ActorId(owner)).await?;
            let resolved = self.targets_of(&actor, &targets, kind)?;
            let changed = match (change, kind) {
                (Change::Extend, _) => self.table.extend(&actor, hold, &resolved).await?,
                (Change::Narrow, HoldKind::Fence) => {
                    self.table.narrow(&actor, hold, &resolved).await?
                }
                (Change::Narrow, HoldKind::Call | HoldKind::Claim) => {
                    return Err(narrow_only_fences(&p.hold));
                }
            };
            Ok(json!({"hold": p.hold, "paths": changed.paths(), "revision": changed.revision()}))
        }

        async fn release(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            release: Release,
        ) -> Result<Value> {
            let (named, claim) = match release {
                Release::Hold(hold, claim) => (hold, claim),
                Release::Ticket { actor, ticket } => {
                    // The answer is in etcd: any server of the session can
                    // give the wait up, whichever one served it.
                    let actor = self.actor(app, caller, &actor).await?;
                    return Ok(match self.table.give_up(&actor, &ticket).await? {
                        Some(hold) => json!({"released": app.handle('h', hold.0)}),
                        None => json!({"released": null, "ticket": ticket}),
                    });
                }
            };
            let hold = HoldId(app.parse('h', "a hold", &named)?);
            let released = match self.table.hold_lineage(hold).await {
                // A call's release ends its owner's claims on the files it
                // held, and with `claim` (a hooked write refused `Stale`)
                // gives a claim on them (SPEC §6), in one transaction.
                Ok((lineage, HoldKind::Call)) => {
                    app.may(caller, &lineage, &named)?;
                    let ttl = self.files.config().claim_ttl_of();
                    let ttl = (claim && !ttl.is_zero()).then_some(ttl);
                    self.table.release_call(hold, ttl).await
                }
                Ok((lineage, _)) => {
                    app.may(caller, &lineage, &named)?;
                    self.table.release(hold).await
                }
                Err(e) => Err(e),
            };
            match released {
                Ok(()) => {}
                // A fence its owner's drop released: handing it back is
                // harmless (once), as in process.
                Err(Error::UnknownHold { .. }) => match self.table.drop_mark(hold).await? {
                    Some(lineage) => {
                        app.may(caller, &lineage, &named)?;
                        self.table.clear_drop_mark(hold).await?;
                    }
                    None => return Err(Error::UnknownHold { hold: named }),
                },
                Err(e) => return Err(e),
            }
            Ok(json!({"released": named}))
        }
    }
}

/// A claim asked for by a method: none does (the file tools give claims
/// on a `Stale` refusal), so this is a caller's mistake, never a panic.
fn claim_asked() -> Error {
    Error::Protocol {
        kind: ProtocolError::InvalidParams,
        detail: "a claim is given by a refused write, never asked for".into(),
    }
}
