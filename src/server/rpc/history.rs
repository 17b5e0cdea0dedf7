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
/// `session.info` lists them: history is not kept for a session in etcd.
#[cfg(feature = "etcd")]
pub(super) const NOT_ON_ETCD: &[&str] = &[
    "turn.set",
    "history.snapshot",
    "history.record",
    "history.rewind",
    "history.redo",
];

#[cfg(feature = "etcd")]
mod on_etcd {
    use super::*;
    use crate::Error;
    use crate::server::rpc::EtcdBackend;

    fn unsupported(method: &str) -> Error {
        Error::Unsupported {
            what: format!("the method `{method}`"),
        }
    }

    impl History for EtcdBackend {
        async fn set_turn(&self, _: &Arc<App>, _: &Caller, _: TurnParams) -> Result<Value> {
            Err(unsupported("turn.set"))
        }

        async fn snapshot(&self, _: &Arc<App>, _: &Caller, _: PathParams) -> Result<Value> {
            Err(unsupported("history.snapshot"))
        }

        async fn record(&self, _: &Arc<App>, _: &Caller, _: PathParams) -> Result<Value> {
            Err(unsupported("history.record"))
        }

        async fn rewind(
            &self,
            _: &Arc<App>,
            _: &Caller,
            _: RewindParams,
            mode: Option<RewindMode>,
        ) -> Result<Value> {
            Err(unsupported(match mode {
                None => "history.redo",
                Some(_) => "history.rewind",
            }))
        }
    }
}
