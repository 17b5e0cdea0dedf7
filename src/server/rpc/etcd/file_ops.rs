//! The file tools (`files.*`, SPEC §6–§7) on a server whose session's table
//! is in etcd: any server serves any actor's file ops, and the version gate
//! holds session-wide.
//!
//! # Implementation details
//!
//! The file pipeline is the crate's own (`crate::files`: path policy,
//! admission, gate, atomic write through folder handles, `Receipt`); this
//! module only puts etcd around it:
//!
//! 1. Each op runs as an *ephemeral* actor of this server's private
//!    `Scheduler` (file machinery only; the server's own scheduler stays
//!    empty), made with the etcd actor's name, root, read-only flag and read
//!    roots, and dropped when the op ends.
//! 2. Its `Files` handle is [`admitted_by`](crate::files::Files) an
//!    [`EtcdAdmission`]: after the pipeline resolved the op's paths and
//!    checked the policy, and before its local call hold, the hook keeps a
//!    fenced actor's writes inside its grant fence (`OutsideFence`), takes a
//!    call hold in etcd on exactly those keys (exclusive, shared for a read;
//!    try-only unless the request's `timeout_ms` or `Config::file_op_wait`
//!    gives a wait), and loads the actor's marks
//!    and the keys' last writers from etcd into the local gate. The keys are
//!    resolved once, so a symlink swapped between two resolutions cannot
//!    make the etcd hold and the I/O disagree. The local hold is then
//!    uncontested: two local ops overlap only if etcd admitted both, which
//!    it does only for reads.
//! 3. When the op is over (however it ended), a task of its own releases the
//!    etcd hold and, in the same transaction, stores the mark a read made
//!    and who wrote what (`Table::finish_file_op`). It runs even if the
//!    client went away meanwhile, so a hold is never left behind by a
//!    dropped request; a release etcd refused is retried in the background.
//!
//! History: with a history folder (the session's, the same on every
//! server), the op is recorded in the session's journal under the etcd
//! actor's turn (`Table::set_turn`, kept in its record), whichever server
//! serves it; without one, receipts say `history: off`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::super::App;
use super::super::files::{Done, run};
use super::super::request::FileOp;
use super::EtcdBackend;
use crate::core::key::{Area, Key};
use crate::core::scope::Wanted;
use crate::etcd::{ActorRef, AdmitRequest, Table};
use crate::files::gate::{MarkStore, ReadMark};
use crate::files::{Known, OuterAdmission};
use crate::sched::resolve::Resolver;
use crate::{Error, Grant, HoldId, HoldKind, Mode, ProtocolError, Result, Target};

/// What the hook admitted in etcd, for the end of the op.
struct Admitted {
    hold: HoldId,
    /// The op's keys (folded), in the pipeline's order (a rename: source,
    /// destination).
    norms: Vec<PathBuf>,
    /// What etcd knew of them when the op began.
    known: Vec<Known>,
}

/// The etcd side of one file op's admission (step 2 of the module doc).
struct EtcdAdmission {
    table: Table,
    actor: ActorRef,
    /// The runtime the server runs on: the pipeline is synchronous and
    /// runs on a blocking thread, which waits here for etcd's answers.
    runtime: tokio::runtime::Handle,
    /// `Config::file_op_wait`: how long a contested op waits in etcd.
    wait: Option<Duration>,
    /// Folds keys as the session does, to compare them with the grant fence.
    keys: Resolver,
    /// Filled once etcd granted the hold (before anything else can fail),
    /// taken when the op is over.
    admitted: Mutex<Option<Admitted>>,
}

impl OuterAdmission for EtcdAdmission {
    fn admit(&self, keys: &[(Key, Mode)], label: &str) -> Result<Vec<Known>> {
        // A fenced actor writes only within its grant fence (SPEC §3), on
        // every server: its record carries the fence, the core judges.
        let wanted = keys
            .iter()
            .map(|(key, mode)| {
                let key = self.keys.key_for(key.path.clone(), key.tree);
                Wanted::Key(key, *mode, Area::Writable)
            })
            .collect();
        let root = self.keys.key_for(self.actor.root().to_path_buf(), true);
        super::actor_scope(&self.keys, &self.actor).claim_keys(
            self.actor.name(),
            &root,
            HoldKind::Call,
            wanted,
        )?;
        let targets: Vec<Target> = keys
            .iter()
            .map(|(key, mode)| match mode {
                Mode::Shared => Target::file(&key.path).shared(),
                Mode::Exclusive => Target::file(&key.path),
            })
            .collect();
        let mut request = AdmitRequest::call(targets).label(label).file_op();
        if let Some(wait) = self.wait {
            request = request.wait_timeout(wait);
        }
        let grant = self
            .runtime
            .block_on(self.table.admit(&self.actor, request))?;
        let norms: Vec<PathBuf> = keys.iter().map(|(k, _)| k.norm.clone()).collect();
        *self.admitted.lock() = Some(Admitted {
            hold: grant.hold(),
            norms: norms.clone(),
            known: Vec::new(),
        });
        // Only a write checks the gate; a read needs nothing from etcd.
        let known = if keys.iter().any(|(_, m)| *m == Mode::Exclusive) {
            self.runtime
                .block_on(self.table.gate_state(&self.actor, &norms))?
        } else {
            vec![Known::default(); keys.len()]
        };
        if let Some(admitted) = self.admitted.lock().as_mut() {
            admitted.known = known.clone();
        }
        Ok(known)
    }
}

/// What an op leaves in etcd for the gate of later ops: the marks it made
/// (new or changed since the op began) and who wrote what.
fn records_of(
    admitted: &Admitted,
    done: &Result<Done>,
    marks_after: &[Option<ReadMark>],
    writer: &str,
) -> crate::etcd::GateRecords {
    let mut records = crate::etcd::GateRecords::default();
    if done.is_err() {
        // A refused op wrote nothing and made no mark.
        return records;
    }
    for (i, norm) in admitted.norms.iter().enumerate() {
        let before = admitted.known.get(i).and_then(|k| k.mark.as_ref());
        if let Some(Some(after)) = marks_after.get(i) {
            if before != Some(after) {
                records.marks.push((norm.clone(), after.clone()));
            }
        }
    }
    if let Ok(Done::Changed(receipt)) = done {
        records.op = Some(receipt.op.to_string());
        let wrote = receipt.after.clone().map(|h| (writer.to_string(), h));
        match (&receipt.from, admitted.norms.as_slice()) {
            (Some(_), [from, to]) => {
                records.writes.push((from.clone(), None));
                records.writes.push((to.clone(), wrote));
            }
            (_, [path, ..]) => records.writes.push((path.clone(), wrote)),
            _ => {}
        }
    }
    records
}

/// Releases a hold etcd did not let go of at the end of an op, retrying in
/// the background for about a minute (etcd briefly unreachable); after that
/// the hold goes with its lease.
fn release_later(table: Table, hold: HoldId) {
    tokio::spawn(async move {
        for attempt in 1..=20u64 {
            tokio::time::sleep(Duration::from_millis(250 * attempt.min(12))).await;
            match table.release(hold).await {
                Ok(()) | Err(Error::UnknownHold { .. }) => return,
                Err(_) => {}
            }
        }
    });
}

/// The grant of an etcd actor's ephemeral local actor, as far as the
/// pipeline enforces it itself (its fence is the hook's to enforce: a local
/// fence would contest the local calls of the actor's children).
pub(in crate::server::rpc) fn local_grant(actor: &ActorRef) -> Grant {
    let mut grant = if actor.is_read_only() {
        Grant::read_only(actor.root())
    } else {
        Grant::workspace(actor.root())
    };
    for root in actor.read_roots() {
        grant = grant.read_root(root);
    }
    grant
}

impl EtcdBackend {
    /// Runs one file op for `actor`, a contested one waiting up to `wait`
    /// in etcd (the request's `timeout_ms`, else `Config::file_op_wait`;
    /// try-only without either).
    pub(in crate::server::rpc) async fn file_op(
        &self,
        app: &App,
        actor: ActorRef,
        op: FileOp,
        wait: Option<Duration>,
    ) -> Result<Done> {
        let lease = actor.lease();
        let grant = local_grant(&actor);
        let hook = Arc::new(EtcdAdmission {
            table: self.table.clone(),
            actor: actor.clone(),
            runtime: tokio::runtime::Handle::current(),
            wait: wait.or(self.file_op_wait),
            keys: self.resolver(std::path::Path::new("/"), &[]),
            admitted: Mutex::new(None),
        });
        let sched = self.files.clone();
        let table = self.table.clone();
        // The op and its end run in a task of their own, so that the etcd
        // hold is released however the request ends (the client gone, the
        // server stopping).
        let task = tokio::spawn(async move {
            let name = actor.name().to_string();
            let turn = actor.turn().map(str::to_string);
            let local_hook = hook.clone();
            let ran = App::blocking(move || {
                let local = sched.actor(name, grant)?;
                // Recorded in the session's journal under the actor's turn,
                // whichever server serves the op.
                if let Some(turn) = turn {
                    local.set_turn(turn);
                }
                let done = run(local.files().admitted_by(local_hook.clone()), op);
                // The marks the op left on the ephemeral actor (a read's, or
                // a refreshed one), read before it goes.
                let marks = MarkStore::of(&local.meta);
                let after: Vec<Option<ReadMark>> = local_hook
                    .admitted
                    .lock()
                    .as_ref()
                    .map(|a| a.norms.iter().map(|n| marks.get(n)).collect())
                    .unwrap_or_default();
                Ok((done, after))
            })
            .await;
            let admitted = hook.admitted.lock().take();
            if let Some(admitted) = admitted {
                let records = match &ran {
                    Ok((done, after)) => records_of(&admitted, done, after, actor.name()),
                    Err(_) => crate::etcd::GateRecords::default(),
                };
                if table
                    .finish_file_op(&actor, admitted.hold, records)
                    .await
                    .is_err()
                {
                    release_later(table, admitted.hold);
                }
            }
            ran.and_then(|(done, _)| done)
        });
        let running = async move {
            task.await.map_err(|e| Error::Protocol {
                kind: ProtocolError::Internal,
                detail: format!("a file operation failed to run: {e}"),
            })?
        };
        self.long_poll(app, lease, running).await
    }
}
