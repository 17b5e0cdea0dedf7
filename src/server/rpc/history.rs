//! `turn.set` and `history.*` (SPEC §8, §13): per-turn history and rewind.

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::{PathParams, RewindParams, TurnParams};
use super::{App, InProcess};
use crate::Result;
use crate::history::RewindMode;
use crate::server::auth::Caller;

/// The history methods of a table.
pub(super) trait History {
    /// `turn.set`: the actor's later writes belong to this turn.
    async fn set_turn(&self, app: &Arc<App>, caller: &Caller, p: TurnParams) -> Result<Value>;

    /// `history.snapshot`: a file's content kept before a write made
    /// outside writ.
    async fn snapshot(&self, app: &Arc<App>, caller: &Caller, p: PathParams) -> Result<Value>;

    /// `history.record`: a write made outside writ, recorded.
    async fn record(&self, app: &Arc<App>, caller: &Caller, p: PathParams) -> Result<Value>;

    /// `history.rewind` (with its mode) and `history.redo` (`mode: None`).
    async fn rewind(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: RewindParams,
        mode: Option<RewindMode>,
    ) -> Result<Value>;
}

impl History for InProcess {
    async fn set_turn(&self, app: &Arc<App>, caller: &Caller, p: TurnParams) -> Result<Value> {
        let (actor, _, _) = app.actor_for(caller, &p.actor)?;
        actor.set_turn(p.turn.clone());
        Ok(json!({"actor": p.actor, "turn": p.turn}))
    }

    async fn snapshot(&self, app: &Arc<App>, caller: &Caller, p: PathParams) -> Result<Value> {
        let (actor, _, _) = app.actor_for(caller, &p.actor)?;
        let path = p.path.clone();
        let taken = App::blocking(move || actor.before_outside_write(&p.path)).await?;
        Ok(json!({"path": path, "snapshot": taken}))
    }

    async fn record(&self, app: &Arc<App>, caller: &Caller, p: PathParams) -> Result<Value> {
        let (actor, _, _) = app.actor_for(caller, &p.actor)?;
        let receipt = App::blocking(move || actor.after_outside_write(&p.path)).await?;
        Ok(json!(receipt))
    }

    async fn rewind(
        &self,
        app: &Arc<App>,
        caller: &Caller,
        p: RewindParams,
        mode: Option<RewindMode>,
    ) -> Result<Value> {
        app.session_only(caller, "rewinding a turn")?;
        let sched = app.sched.clone();
        let report = App::blocking(move || match mode {
            None => sched.redo_turn(&p.turn),
            Some(mode) => sched.rewind_turn_with(&p.turn, mode),
        })
        .await?;
        Ok(json!(report))
    }
}

/// The methods a server on etcd refuses whole (`unsupported`), as
/// `session.info` lists them: none of history's any more.
#[cfg(feature = "etcd")]
pub(super) const NOT_ON_ETCD: &[&str] = &[];

#[cfg(feature = "etcd")]
mod on_etcd {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::etcd::{ActorRef, AdmitRequest};
    use crate::history::RestoreKind;
    use crate::server::rpc::EtcdBackend;
    use crate::server::rpc::etcd::local_grant;
    use crate::{Actor, Target};

    impl EtcdBackend {
        /// One step of a write made outside writ (`history.snapshot`
        /// before it, `history.record` after), for an actor of the session.
        /// Its reservation is in etcd: the actor must hold an exclusive
        /// call on the file there (taken through any server), which keeps
        /// every other write out. The step runs as an ephemeral actor of
        /// this server's file scheduler, in the actor's turn; only when the
        /// actor holds the file in etcd does it get the local call the step
        /// checks for, so otherwise the step refuses as in process. The
        /// snapshot moves between the steps through etcd (`carry`), so each
        /// step may go through any server. Returns the step's answer, the
        /// snapshot taken out of it, the actor and the file's folded key.
        async fn outside_write<T: Send + 'static>(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: PathParams,
            carry: Carry,
            step: impl FnOnce(&Actor, &str) -> Result<T> + Send + 'static,
        ) -> Result<(T, Option<Vec<u8>>, ActorRef, PathBuf)> {
            let actor = self.actor(app, caller, &p.actor).await?;
            let resolver = self.resolver(actor.root(), actor.read_roots());
            let (key, _) = resolver.resolve(&Target::file(&p.path))?;
            let held = self
                .table
                .holds_exclusive_call(&actor, Target::file(&key.path).resolved())
                .await?;
            let carried = match carry {
                Carry::In => self.table.outside_snapshot(&actor, &key.norm).await?,
                Carry::Out => None,
            };
            let (files, grant) = (self.files.clone(), local_grant(&actor));
            let (name, turn) = (actor.name().to_string(), actor.turn().map(str::to_string));
            let (answer, kept) = App::blocking(move || {
                let local = files.actor(name, grant)?;
                if let Some(turn) = turn {
                    local.set_turn(turn);
                }
                let _call = if held {
                    Some(local.try_admit([p.path.as_str()])?)
                } else {
                    None
                };
                let path = Path::new(&p.path);
                if let Some(carried) = carried {
                    local.put_outside_snapshot(path, &carried)?;
                }
                let answer = step(&local, &p.path)?;
                let kept = match carry {
                    Carry::Out => local.take_outside_snapshot(path)?,
                    Carry::In => None,
                };
                Ok((answer, kept))
            })
            .await?;
            Ok((answer, kept, actor, key.norm))
        }
    }

    /// Which way a step of an outside write moves its snapshot.
    #[derive(Debug, Clone, Copy)]
    enum Carry {
        /// Out of the step, into etcd (`history.snapshot`).
        Out,
        /// Out of etcd, into the step (`history.record`).
        In,
    }

    impl History for EtcdBackend {
        async fn set_turn(&self, app: &Arc<App>, caller: &Caller, p: TurnParams) -> Result<Value> {
            let actor = self.actor(app, caller, &p.actor).await?;
            self.table.set_turn(&actor, &p.turn).await?;
            Ok(json!({"actor": p.actor, "turn": p.turn}))
        }

        async fn snapshot(&self, app: &Arc<App>, caller: &Caller, p: PathParams) -> Result<Value> {
            let path = p.path.clone();
            let (taken, kept, actor, norm) = self
                .outside_write(app, caller, p, Carry::Out, |local, path| {
                    local.before_outside_write(path)
                })
                .await?;
            // Kept in etcd, so that the record may go through any server.
            if let Some(kept) = kept {
                self.table
                    .keep_outside_snapshot(&actor, &norm, kept)
                    .await?;
            }
            Ok(json!({"path": path, "snapshot": taken}))
        }

        async fn record(&self, app: &Arc<App>, caller: &Caller, p: PathParams) -> Result<Value> {
            let (receipt, _, actor, norm) = self
                .outside_write(app, caller, p, Carry::In, |local, path| {
                    local.after_outside_write(path)
                })
                .await?;
            self.table.forget_outside_snapshot(&actor, &norm).await?;
            Ok(json!(receipt))
        }

        /// The journal is the session's (every server records in it); the
        /// restore's paths are reserved in etcd first, by an actor of its
        /// own on a lease of its own that goes when the restore is over,
        /// so a hold through any server refuses it (or makes it wait
        /// `file_op_wait`), as the session's reservation does in process.
        async fn rewind(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: RewindParams,
            mode: Option<RewindMode>,
        ) -> Result<Value> {
            app.session_only(caller, "rewinding a turn")?;
            let (kind, mode) = match mode {
                None => (RestoreKind::Redo, RewindMode::Strict),
                Some(mode) => (RestoreKind::Rewind, mode),
            };
            let lease = self.table.grant_lease(app.ttl).await?;
            let actor = match self
                .table
                .create_actor(lease, &format!("{kind} {}", p.turn), &app.root, None)
                .await
            {
                Ok(actor) => actor,
                Err(e) => {
                    let _ = self.table.revoke(lease).await;
                    return Err(e);
                }
            };
            let (table, files, wait) = (self.table.clone(), self.files.clone(), self.file_op_wait);
            let runtime = tokio::runtime::Handle::current();
            // The restore and the end of its lease run in a task of their
            // own: a client gone mid-restore leaves no hold in etcd for
            // the lease's TTL.
            let task = tokio::spawn(async move {
                let owner = table.clone();
                let restored = App::blocking(move || {
                    let reserve = |paths: &[PathBuf], label: &str| -> Result<()> {
                        let targets = paths.iter().map(|p| Target::file(p).resolved());
                        let mut request = AdmitRequest::call(targets).label(label);
                        if let Some(wait) = wait {
                            request = request.wait_timeout(wait);
                        }
                        runtime.block_on(owner.admit(&actor, request)).map(drop)
                    };
                    files.restore_turn_admitted_by(&p.turn, kind, mode, &reserve)
                })
                .await;
                let _ = table.revoke(lease).await;
                restored
            });
            let restoring = crate::server::rpc::joined(task, "a restore");
            let report = self.long_poll(app, lease, restoring).await?;
            Ok(json!(report))
        }
    }
}
