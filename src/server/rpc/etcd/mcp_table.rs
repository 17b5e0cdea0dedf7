//! `/mcp` on a server whose session's table is in etcd: the MCP tools'
//! holds taken in etcd ([`SessionTable`]), so agents on every server of the
//! session see each other's writes and reservations.
//!
//! # Implementation details
//!
//! An MCP session acts as an actor of the table in etcd, and as a local
//! actor of the file machinery's scheduler with the same name, root and
//! grant (its *mirror*), which the tools' path resolution, policy and I/O
//! use exactly as in process. The mirror never holds anything another
//! server could miss: each file op runs admitted by etcd
//! ([`FileRunner`], as `files.*` runs), `reserve` takes its fence in etcd
//! (released there when the reservation drops), and `writ_status` reads the
//! session's whole table from etcd.
//!
//! Which etcd actor, and who keeps it alive:
//! - the session token: a new child of this server's MCP root actor (as in
//!   process, so the session's slot limits count it), on a lease of its
//!   own, which the server renews while the session (or its named agent)
//!   lives and revokes when it goes — a server that dies takes its
//!   sessions' holds with it within the lease TTL;
//! - an actor token with an agent name: a new child of that actor, on its
//!   lease, dropped when the agent goes;
//! - an actor token alone: that actor, kept alive by its token's owner.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::super::{App, McpSeat};
use super::file_ops::{FileRunner, Local, OpWait};
use super::{EtcdBackend, local_grant, scoped_targets};
use crate::etcd::{ActorRef, AdmitRequest, LeaseId, Table};
use crate::mcp::table::{AnyResult, ErasedOp, SessionTable, TableFence, TableFuture};
use crate::sched::resolve::Resolver;
use crate::{Actor, ActorId, Dump, Error, HoldId, HoldKind, Result, Target};

/// What ends with the session's table: the etcd actor the server made for
/// it, if it made one.
enum Keeper {
    /// Nothing: the token's owner keeps its actor.
    Nothing,
    /// A child of the server's MCP root on a lease of its own, renewed
    /// by `renewing`.
    Lease(LeaseId, JoinHandle<()>),
    /// A child on its parent's lease.
    Child(ActorRef),
}

/// An MCP session's holds, in the session's table in etcd.
pub(crate) struct EtcdSessionTable {
    table: Table,
    runner: FileRunner,
    /// The actor as the session opened; read again for each hold (its turn,
    /// and whether it is still live).
    actor: ActorRef,
    /// Folds keys as the session does.
    keys: Resolver,
    /// Resolves the actor's targets (its root and read roots).
    resolver: Resolver,
    keeper: Keeper,
    runtime: Handle,
}

impl EtcdSessionTable {
    /// The actor as it is now in etcd.
    async fn current(&self) -> Result<ActorRef> {
        match self.table.actor(self.actor.id()).await {
            // Told as in process: the session's actor is gone for good.
            Err(Error::UnknownActor { .. }) => Err(Error::Unavailable {
                reason: crate::mcp::gone(),
            }),
            other => other,
        }
    }
}

impl Drop for EtcdSessionTable {
    fn drop(&mut self) {
        let table = self.table.clone();
        match std::mem::replace(&mut self.keeper, Keeper::Nothing) {
            Keeper::Nothing => {}
            Keeper::Lease(lease, renewing) => {
                renewing.abort();
                // Its holds and waiters go with the lease, in etcd.
                self.runtime.spawn(async move {
                    let _ = table.revoke(lease).await;
                });
            }
            Keeper::Child(child) => {
                self.runtime.spawn(async move {
                    let _ = table.drop_actor_marking(&child).await;
                });
            }
        }
    }
}

impl SessionTable for EtcdSessionTable {
    fn file_op(
        &self,
        actor: Arc<Actor>,
        wait: Duration,
        op: ErasedOp,
    ) -> TableFuture<'_, AnyResult> {
        Box::pin(async move {
            let current = self.current().await?;
            self.runner
                // The agent tools: a stale refusal claims the file (SPEC §6).
                .run(current, Local::Kept(actor), OpWait::Call(wait), true, op)
                .await
        })
    }

    fn reserve(
        &self,
        targets: Vec<Target>,
        label: String,
        wait: Duration,
    ) -> TableFuture<'_, Box<dyn TableFence>> {
        Box::pin(async move {
            let actor = self.current().await?;
            let targets = scoped_targets(
                &self.keys,
                &self.resolver,
                &actor,
                &targets,
                HoldKind::Fence,
            )?;
            // Waited for as a contested write is (`Table::wait_call`).
            let request = AdmitRequest::fence(targets).label(label);
            let grant = self.table.wait_call(&actor, request, wait).await?;
            let fence = EtcdFence {
                table: self.table.clone(),
                hold: grant.hold(),
                actor,
                keys: self.keys.clone(),
                resolver: self.resolver.clone(),
                runtime: self.runtime.clone(),
            };
            Ok(Box::new(fence) as Box<dyn TableFence>)
        })
    }

    fn dump(&self) -> TableFuture<'_, (Dump, ActorId)> {
        Box::pin(async move { Ok((self.table.dump().await?.table, self.actor.id())) })
    }

    fn actor_id(&self) -> ActorId {
        self.actor.id()
    }
}

/// A `reserve` fence held in etcd.
struct EtcdFence {
    table: Table,
    hold: HoldId,
    actor: ActorRef,
    keys: Resolver,
    resolver: Resolver,
    runtime: Handle,
}

impl TableFence for EtcdFence {
    fn narrow(&mut self, to: Vec<Target>) -> TableFuture<'_, ()> {
        Box::pin(async move {
            let to = scoped_targets(
                &self.keys,
                &self.resolver,
                &self.actor,
                &to,
                HoldKind::Fence,
            )?;
            self.table
                .narrow(&self.actor, self.hold, &to)
                .await
                .map(drop)
        })
    }
}

impl Drop for EtcdFence {
    fn drop(&mut self) {
        let (table, hold) = (self.table.clone(), self.hold);
        self.runtime.spawn(async move {
            if table.release(hold).await.is_err() {
                super::file_ops::release_later(table, hold);
            }
        });
    }
}

impl EtcdBackend {
    /// The mirror of the etcd actor an MCP session acts as, and the table
    /// its holds are taken in.
    pub(in crate::server::rpc) async fn mcp_seat(
        &self,
        app: &App,
        seat: McpSeat<'_>,
    ) -> Result<(Arc<Actor>, Arc<dyn SessionTable>)> {
        let table = &self.table;
        let (actor, keeper) = match seat {
            McpSeat::Token(id) => (table.actor(id).await?, Keeper::Nothing),
            McpSeat::Own(name) => {
                // A child of this server's MCP root, counted against the
                // session's slot limits as in process, on a lease of its
                // own: the session's end revokes just that.
                let lease = table.grant_lease(app.ttl).await?;
                let made = match self.mcp_root(app).await {
                    Ok(root) => self.mcp_child(app, lease, &root, name).await,
                    Err(e) => Err(e),
                };
                match made {
                    Ok(actor) => (actor, Keeper::Lease(lease, self.renew(app, lease))),
                    Err(e) => {
                        let _ = table.revoke(lease).await;
                        return Err(e);
                    }
                }
            }
            McpSeat::ChildOf(parent, name) => {
                let parent = table.actor(parent).await?;
                // As `actor.create` checks a workspace child of its
                // parent's root.
                self.check_child(&parent, parent.root(), false, None)?;
                let child = self.mcp_child(app, parent.lease(), &parent, name).await?;
                (child.clone(), Keeper::Child(child))
            }
        };
        // Made before the keeper is handed over, so that a refusal here
        // still ends the actor (the table's drop does).
        let session = EtcdSessionTable {
            table: table.clone(),
            runner: self.file_runner(),
            keys: self.keys(),
            resolver: self.resolver(actor.root(), actor.read_roots()),
            actor: actor.clone(),
            keeper,
            runtime: Handle::current(),
        };
        let mirror = self.files.actor(actor.name(), local_grant(&actor))?;
        if let Some(turn) = actor.turn() {
            mirror.set_turn(turn);
        }
        Ok((Arc::new(mirror), Arc::new(session)))
    }

    /// A workspace child of `parent` named `name`, on `lease`, counted
    /// against the session's slot limits (SPEC §11) as in process. Its
    /// token is never handed out: the MCP session is its only user.
    async fn mcp_child(
        &self,
        app: &App,
        lease: LeaseId,
        parent: &ActorRef,
        name: &str,
    ) -> Result<ActorRef> {
        let token = |id: ActorId| app.actor_token(id);
        let limited = self.limits != (None, None);
        let (child, _) = self
            .table
            .create_actor_with_token_in(
                lease,
                name,
                parent.root(),
                Some(parent),
                Default::default(),
                limited.then_some(self.limits),
                token,
            )
            .await?;
        Ok(child)
    }

    /// This server's MCP root actor (named `mcp`, as in process), made
    /// with the first session-token session on a lease the server renews
    /// until it stops; made again if it was lost (its lease ended while
    /// etcd was out of reach).
    async fn mcp_root(&self, app: &App) -> Result<ActorRef> {
        let mut root = self.mcp_root.lock().await;
        if let Some((known, renewing)) = root.as_ref() {
            match self.table.actor(known.id()).await {
                Ok(live) => return Ok(live),
                Err(Error::UnknownActor { .. }) => {
                    renewing.abort();
                    *root = None;
                }
                Err(e) => return Err(e),
            }
        }
        let lease = self.table.grant_lease(app.ttl).await?;
        // The server is registered as one of the session's on the root's
        // lease: it names the servers a handle may send a model to.
        let authority = app.url.strip_prefix("http://").unwrap_or(&app.url);
        let made = match self.table.create_actor(lease, "mcp", &app.root, None).await {
            Ok(made) => match self.table.register_mcp_server(authority, lease).await {
                Ok(()) => made,
                Err(e) => {
                    let _ = self.table.revoke(lease).await;
                    return Err(e);
                }
            },
            Err(e) => {
                let _ = self.table.revoke(lease).await;
                return Err(e);
            }
        };
        let renewing = self.renew(app, lease);
        *root = Some((made.clone(), renewing));
        Ok(made)
    }
}

impl EtcdBackend {
    /// Registers this server in the session's table as one whose MCP
    /// agent handles other servers may name (with its MCP root, on the
    /// root's lease: registered while the server lives).
    pub(in crate::server::rpc) async fn mcp_register(&self, app: &App) -> Result<()> {
        self.mcp_root(app).await.map(drop)
    }

    /// Whether a server of the session at `authority` (`host:port`) is
    /// registered (see [`EtcdBackend::mcp_register`]).
    pub(in crate::server::rpc) async fn mcp_registered(&self, authority: &str) -> Result<bool> {
        self.table.mcp_server_registered(authority).await
    }
}
