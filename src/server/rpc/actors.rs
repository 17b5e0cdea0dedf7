//! `actor.create`, `actor.child_wait` and `actor.drop` (SPEC §3, §11, §13).

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::{ActorParams, CreateParams, Creation};
use super::{App, InProcess, invalid, timeout};
use crate::server::auth::Caller;
use crate::{Error, Result};

/// The actor methods of a table.
pub(super) trait Actors {
    /// `actor.create` (a root actor, or a child at once) and
    /// `actor.child_wait` (a child once its paths and a slot are free).
    async fn create(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: CreateParams,
        creation: Creation,
    ) -> Result<Value>;

    /// `actor.drop`: the actor, its holds and its descendants go.
    async fn drop_actor(&self, app: &Arc<App>, caller: &Caller, p: ActorParams) -> Result<Value>;
}

/// The parameter combinations no table takes.
fn check_shape(p: &CreateParams, creation: Creation) -> Result<()> {
    match (&p.parent, &p.lease, creation) {
        (Some(_), Some(_), _) => Err(invalid(
            "a child belongs to its parent's lease; do not pass 'lease'",
        )),
        (None, _, Creation::Wait) => Err(invalid("actor.child_wait needs a 'parent'")),
        _ => Ok(()),
    }
}

impl Actors for InProcess {
    async fn create(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: CreateParams,
        creation: Creation,
    ) -> Result<Value> {
        let grant = app.grant(caller, &p.grant)?;
        check_shape(&p, creation)?;
        match (&p.parent, p.lease) {
            (Some(parent), _) => {
                let (parent, lease, lineage) = app.actor_for(caller, parent)?;
                let child = match creation {
                    Creation::Wait => {
                        // The in-process timeout, so that a wait given up
                        // counts as timed out, not as cancelled.
                        let waiting = match timeout(p.timeout_ms) {
                            Some(d) => parent.child_wait_timeout(p.name, grant, d),
                            None => parent.child_wait(p.name, grant),
                        };
                        app.long_poll(lease, waiting).await?
                    }
                    Creation::Now => parent.child(p.name, grant)?,
                };
                app.keep_actor(child, Some(lease), Some(&lineage))
            }
            (None, lease) => {
                app.session_only(caller, "creating a root actor")?;
                let lease = match lease {
                    Some(l) => Some(app.lease_of(caller, &l)?),
                    None => None,
                };
                let actor = app.sched.actor(p.name, grant)?;
                app.keep_actor(actor, lease, None)
            }
        }
    }

    async fn drop_actor(&self, app: &Arc<App>, caller: &Caller, p: ActorParams) -> Result<Value> {
        let n = app.parse('a', "an actor", &p.actor)?;
        let slot = {
            let mut reg = app.registry();
            let slot = reg.actors.get(&n).ok_or_else(|| Error::UnknownActor {
                actor: p.actor.clone(),
            })?;
            app.may(caller, &slot.lineage, &p.actor)?;
            let lease = slot.lease;
            reg.renew(lease, app.ttl);
            reg.actors.remove(&n)
        };
        drop(slot);
        app.actors_gone(vec![n]);
        Ok(json!({"dropped": p.actor}))
    }
}

#[cfg(feature = "etcd")]
mod on_etcd {
    use super::*;
    use crate::core::scope::Scope;
    use crate::etcd::{ActorRef, AdmitRequest, ChildAsk, GrantRecord};
    use crate::sched::actor::scoped_keys;
    use crate::server::rpc::EtcdBackend;
    use crate::server::rpc::etcd::key_target;
    use crate::{ActorId, HoldKind, Target};

    impl Actors for EtcdBackend {
        async fn create(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: CreateParams,
            creation: Creation,
        ) -> Result<Value> {
            let grant = app.grant(caller, &p.grant)?;
            check_shape(&p, creation)?;
            // As in process: a grant root and each read root is an existing
            // folder, kept canonical.
            let root = crate::sched::resolve::canonical_root(grant.root())?;
            let read_roots = grant
                .read_roots()
                .iter()
                .map(|r| crate::sched::resolve::canonical_root(r))
                .collect::<Result<Vec<_>>>()?;
            let read_only = grant.is_read_only();
            // A fenced grant's targets, resolved against its root: the
            // fence the new actor takes (all-or-nothing) and the keys its
            // writes must lie inside. Judged as in process: a grant fence
            // is the new actor's first fence, taken with a workspace scope
            // (so not exclusive under a read-only root).
            let fence_targets = match grant.fenced_targets() {
                Some(targets) => {
                    let resolver = self.resolver(&root, &read_roots);
                    let keys = scoped_keys(
                        &Scope::Workspace,
                        &p.name,
                        &resolver,
                        targets,
                        HoldKind::Fence,
                    )?;
                    Some(keys.into_iter().map(key_target).collect::<Vec<Target>>())
                }
                None => None,
            };
            let record = GrantRecord {
                read_only,
                fence: fence_targets.clone(),
                read_roots,
            };
            let token = |id: ActorId| app.actor_token(id);
            let table = &self.table;
            let (actor, token) = match (&p.parent, p.lease) {
                (None, lease) => {
                    app.session_only(caller, "creating a root actor")?;
                    let (lease, fresh) = match lease {
                        Some(l) => (app.etcd_lease(&l)?, false),
                        None => (table.grant_lease(app.ttl).await?, true),
                    };
                    let made = table
                        .create_actor_with_token(lease, &p.name, &root, None, record, token)
                        .await;
                    let made = match (made, &fence_targets) {
                        (Ok(made), Some(fence)) => self.take_grant_fence(made, fence, fresh).await,
                        (made, _) => made,
                    };
                    if made.is_err() && fresh {
                        let _ = table.revoke(lease).await;
                    }
                    made?
                }
                (Some(parent), _) => {
                    let limited = self.limits != (None, None);
                    let parent = self.actor(app, caller, parent).await?;
                    self.check_child(&parent, &root, read_only, fence_targets.as_deref())?;
                    match creation {
                        Creation::Wait => {
                            // Waits for the grant fence's paths, then for a
                            // slot (SPEC §11), in the table; the child, its
                            // token and its fence are made in one
                            // transaction.
                            let ask = ChildAsk {
                                parent: parent.clone(),
                                name: p.name.clone(),
                                root: root.clone(),
                                grant: record,
                                fence: fence_targets.clone(),
                                limits: self.limits,
                                timeout: timeout(p.timeout_ms),
                            };
                            let waiting = table.child_wait(ask, token);
                            self.long_poll(app, parent.lease(), waiting).await?
                        }
                        Creation::Now => {
                            let made = table
                                .create_actor_with_token_in(
                                    parent.lease(),
                                    &p.name,
                                    &root,
                                    Some(&parent),
                                    record,
                                    limited.then_some(self.limits),
                                    token,
                                )
                                .await?;
                            match &fence_targets {
                                Some(fence) => self.take_grant_fence(made, fence, false).await?,
                                None => made,
                            }
                        }
                    }
                }
            };
            Ok(json!({
                "actor": app.handle('a', actor.id().0),
                "token": token,
                "lease": app.lease_handle(actor.lease()),
                "name": actor.name(),
                "root": actor.root(),
            }))
        }

        async fn drop_actor(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: ActorParams,
        ) -> Result<Value> {
            let actor = self.actor(app, caller, &p.actor).await?;
            self.table.drop_actor_marking(&actor).await?;
            app.actors_gone(vec![actor.id().0]);
            Ok(json!({"dropped": p.actor}))
        }
    }

    impl EtcdBackend {
        /// Takes a new actor's grant fence, try-only; if it is refused the
        /// actor goes again (its whole lease, when it had one of its own),
        /// so a refused creation leaves nothing (SPEC §3).
        async fn take_grant_fence(
            &self,
            (actor, token): (ActorRef, String),
            fence: &[Target],
            own_lease: bool,
        ) -> Result<(ActorRef, String)> {
            let taken = self
                .table
                .admit(&actor, AdmitRequest::fence(fence.to_vec()))
                .await;
            match taken {
                Ok(_) => Ok((actor, token)),
                Err(e) => {
                    if !own_lease {
                        let _ = self.table.drop_actor(&actor).await;
                    }
                    Err(e)
                }
            }
        }
    }
}
