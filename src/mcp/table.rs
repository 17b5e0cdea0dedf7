//! A session whose holds are taken in another table than its actor's own
//! scheduler: a server whose session's table is in etcd (SPEC §16).
//!
//! The tools take holds in three places — a file operation's call hold
//! (`with_wait`), `reserve`'s fence, and the table `writ_status` shows —
//! and ask [`SessionTable`] at each when the session has one. Everything
//! else (path resolution, the policy, the gate, the I/O, read marks) is
//! the session actor's own: its [`Files`] run admitted by the table.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::{Actor, ActorId, Dump, Files, Target};

/// What a [`SessionTable`] answers, later.
pub(crate) type TableFuture<'a, T> = Pin<Box<dyn Future<Output = crate::Result<T>> + Send + 'a>>;

/// A tool's result, whatever its type.
pub(crate) type AnyResult = Box<dyn Any + Send>;

/// One file operation of a tool, its result type erased (each tool's
/// differs; `with_wait` gives it back).
pub(crate) type ErasedOp = Box<dyn FnOnce(Files<'_>) -> crate::Result<AnyResult> + Send>;

/// Where a session's holds are taken when it is not its actor's own
/// scheduler.
pub(crate) trait SessionTable: Send + Sync {
    /// Runs `op` with `actor`'s files, every operation admitted in the
    /// table first (a contested one waiting up to `wait`) and what it read
    /// and wrote kept there for the gate of every later operation.
    fn file_op(
        &self,
        actor: Arc<Actor>,
        wait: Duration,
        op: ErasedOp,
    ) -> TableFuture<'_, AnyResult>;

    /// A fence on `targets` (`reserve`), waiting up to `wait`; when the
    /// wait runs out, tried once more, so the refusal names who holds
    /// the paths then (`Busy`).
    fn reserve(
        &self,
        targets: Vec<Target>,
        label: String,
        wait: Duration,
    ) -> TableFuture<'_, Box<dyn TableFence>>;

    /// The whole table, and the session actor's id in it.
    fn dump(&self) -> TableFuture<'_, (Dump, ActorId)>;

    /// The session actor's id in the table (a subagent is made its child
    /// there).
    fn actor_id(&self) -> ActorId;
}

/// A fence a [`SessionTable`] granted; dropping it releases it there.
pub(crate) trait TableFence: Send + Sync {
    /// Keeps only `to` (paths the fence already holds).
    fn narrow(&mut self, to: Vec<Target>) -> TableFuture<'_, ()>;
}

/// A session's table, owned as its actor is.
#[derive(Clone)]
pub(crate) enum TableRef {
    /// The session's own: it goes when the session ends.
    Owned(Arc<dyn SessionTable>),
    /// A named agent's, which outlives the session.
    Shared(Weak<dyn SessionTable>),
}

impl TableRef {
    /// The table, unless it went with its agent.
    pub(crate) fn get(&self) -> Option<Arc<dyn SessionTable>> {
        match self {
            TableRef::Owned(table) => Some(table.clone()),
            TableRef::Shared(weak) => weak.upgrade(),
        }
    }
}

impl std::fmt::Debug for TableRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TableRef::Owned(_) => "TableRef::Owned",
            TableRef::Shared(_) => "TableRef::Shared",
        })
    }
}
