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
//! 1. Each op runs as an actor of this server's private `Scheduler` (file
//!    machinery only; the server's own scheduler stays empty) with the etcd
//!    actor's name, root, read-only flag and read roots: an *ephemeral* one
//!    made for the op and dropped when it ends (`files.*`), or an MCP
//!    session's mirror, kept by the session (`mcp_table`).
//! 2. Its `Files` handle is [`admitted_by`](crate::files::Files) an
//!    [`EtcdAdmission`]: after the pipeline resolved the op's paths and
//!    checked the policy, and before its local call hold, the hook keeps a
//!    fenced actor's writes inside its grant fence (`OutsideFence`), takes a
//!    call hold in etcd on exactly those keys (exclusive, shared for a read;
//!    try-only unless the request's `timeout_ms`, an MCP tool call or
//!    `Config::file_op_wait` gives a wait: [`OpWait`]), and loads the
//!    actor's marks and the keys' last writers from etcd into the local
//!    gate. The keys are
//!    resolved once, so a symlink swapped between two resolutions cannot
//!    make the etcd hold and the I/O disagree. The local hold is then
//!    uncontested: two local ops overlap only if etcd admitted both, which
//!    it does only for reads.
//! 3. When the op is over (however it ended), a task of its own releases the
//!    etcd hold and, in the same transaction, stores the mark a read made
//!    and who wrote what (the pipeline tells the hook of each change as it
//!    lands; `Table::finish_file_op`). It runs even if the
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
use crate::etcd::{ActorRef, AdmitRequest, OwnClaims, Table};
use crate::files::gate::{MarkStore, ReadMark};
use crate::files::{Known, OuterAdmission};
use crate::sched::resolve::Resolver;
use crate::{
    Actor, Error, Files, Grant, HoldId, HoldKind, Mode, Receipt, Result, Scheduler, Target,
};

/// What the hook admitted in etcd, for the end of the op.
struct Admitted {
    hold: HoldId,
    /// The op's keys (folded), in the pipeline's order (a rename: source,
    /// destination).
    norms: Vec<PathBuf>,
    /// What etcd knew of them when the op began.
    known: Vec<Known>,
    /// The actor's claims on the files the op writes, when it began: its
    /// end ends them (SPEC §6).
    claims: OwnClaims,
    /// The claim the op's `Stale` refusal gives the actor (SPEC §6).
    claim: Option<(Key, Duration)>,
    /// The change the op made, once it is on disk.
    landed: Option<Receipt>,
}

/// The etcd side of one file op's admission (step 2 of the module doc).
struct EtcdAdmission {
    table: Table,
    actor: ActorRef,
    /// The runtime the server runs on: the pipeline is synchronous and
    /// runs on a blocking thread, which waits here for etcd's answers.
    runtime: tokio::runtime::Handle,
    /// How a contested op waits in etcd.
    wait: OpWait,
    /// A write told `Busy` after its wait counts as refused there (the
    /// agent tools, claims on: SPEC §6's queue).
    counts_busy: bool,
    /// Folds keys as the session does, to compare them with the grant fence.
    keys: Resolver,
    /// Each admission etcd granted (before anything else can fail), in
    /// order, taken when the op is over.
    admitted: Mutex<Vec<Admitted>>,
}

impl OuterAdmission for EtcdAdmission {
    fn admit(&self, keys: &[(Key, Mode)], label: &str) -> Result<Vec<Known>> {
        // A fenced actor writes only within its grant fence (SPEC §3), on
        // every server: its record carries the fence, the core judges.
        let fold =
            |(key, mode): &(Key, Mode)| (self.keys.key_for(key.path.clone(), key.tree), *mode);
        let wanted = keys
            .iter()
            .map(fold)
            .map(|(key, mode)| Wanted::Key(key, mode, Area::Writable))
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
        let request = AdmitRequest::call(targets).label(label).file_op();
        let (table, actor) = (&self.table, &self.actor);
        let grant = self.runtime.block_on(async {
            match self.wait {
                OpWait::Never => table.admit(actor, request).await,
                OpWait::For(limit) => table.admit(actor, request.wait_timeout(limit)).await,
                OpWait::Call(limit) => {
                    let answer = table.wait_call(actor, request, limit).await;
                    if self.counts_busy && matches!(answer, Err(crate::Error::Busy(_))) {
                        // The keys as the table holds them, folded again
                        // only here: a busy answer is the rare way out.
                        let folded: Vec<(Key, Mode)> = keys.iter().map(fold).collect();
                        // Not counted is only a place lost in the queue.
                        let _ = table.count_busy_write(actor, &folded).await;
                    }
                    answer
                }
            }
        })?;
        let norms: Vec<PathBuf> = keys.iter().map(|(k, _)| k.norm.clone()).collect();
        self.admitted.lock().push(Admitted {
            hold: grant.hold(),
            norms: norms.clone(),
            known: Vec::new(),
            claims: OwnClaims::default(),
            claim: None,
            landed: None,
        });
        // Only a write checks the gate; a read needs nothing from etcd.
        let (known, claims) = if keys.iter().any(|(_, m)| *m == Mode::Exclusive) {
            self.runtime
                .block_on(self.table.gate_state(&self.actor, &norms))?
        } else {
            (vec![Known::default(); keys.len()], OwnClaims::default())
        };
        if let Some(admitted) = self.admitted.lock().last_mut() {
            admitted.known = known.clone();
            admitted.claims = claims;
        }
        Ok(known)
    }

    fn landed(&self, receipt: &Receipt) {
        if let Some(admitted) = self.admitted.lock().last_mut() {
            admitted.landed = Some(receipt.clone());
        }
    }

    fn claim(&self, key: &Key, ttl: Duration) {
        if let Some(admitted) = self.admitted.lock().last_mut() {
            admitted.claim = Some((key.clone(), ttl));
        }
    }
}

/// What an op leaves in etcd for the gate of later ops: the marks it made
/// (new or changed since the op began, when it succeeded) and who wrote
/// what (whenever a change landed).
fn records_of(
    admitted: &Admitted,
    succeeded: bool,
    marks_after: &[Option<ReadMark>],
    writer: &str,
) -> crate::etcd::GateRecords {
    let mut records = crate::etcd::GateRecords {
        claim: admitted.claim.clone(),
        ended: admitted.claims.clone(),
        ..Default::default()
    };
    if succeeded {
        for (i, norm) in admitted.norms.iter().enumerate() {
            let before = admitted.known.get(i).and_then(|k| k.mark.as_ref());
            if let Some(Some(after)) = marks_after.get(i) {
                if before != Some(after) {
                    records.marks.push((norm.clone(), after.clone()));
                }
            }
        }
    }
    if let Some(receipt) = &admitted.landed {
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
pub(super) fn release_later(table: Table, hold: HoldId) {
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

/// The grant of an etcd actor's local actor, as far as the pipeline
/// enforces it itself (its fence is the hook's to enforce: a local fence
/// would contest the local calls of the actor's children).
pub(in crate::server) fn local_grant(actor: &ActorRef) -> Grant {
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

/// How a contested file op waits in etcd.
#[derive(Debug, Clone, Copy)]
pub(in crate::server) enum OpWait {
    /// It does not: try-only.
    Never,
    /// At most this long (`Config::file_op_wait`), then `Timeout`.
    For(Duration),
    /// A tool call's wait (a request's `timeout_ms`, the MCP tools): at
    /// most this long, then who holds a path now (`Busy`), or the grant if
    /// the paths came free — as `Actor::wait_call` ends in process.
    Call(Duration),
}

/// The local actor a file op runs as.
pub(in crate::server) enum Local {
    /// A fresh one, made for the op and dropped with it (`files.*`).
    Ephemeral,
    /// One the caller keeps (an MCP session's): the op leaves its marks
    /// on it too.
    Kept(Arc<Actor>),
}

/// Runs the crate's file pipeline around holds taken in etcd (steps 1–3
/// of the module doc): what `files.*` and the MCP tools of a server on
/// etcd both go through.
#[derive(Debug, Clone)]
pub(in crate::server) struct FileRunner {
    table: Table,
    /// The file machinery's own scheduler ([`EtcdBackend::files`]).
    files: Scheduler,
    /// Folds keys as the session does.
    keys: Resolver,
}

impl FileRunner {
    /// Runs `op` with `actor`'s file tools, admitted in etcd; a contested
    /// op waits there as `wait` says. With `claiming`, a write refused
    /// `Stale` gives the actor a claim on the file in etcd (SPEC §6: the
    /// agent tools ask for it).
    ///
    /// The op and its end run in a task of their own, so that the etcd
    /// holds are released (and what the op read and wrote is stored)
    /// however the caller's future ends: the client gone, the server
    /// stopping.
    pub(in crate::server) async fn run<T: Send + 'static>(
        &self,
        actor: ActorRef,
        local: Local,
        wait: OpWait,
        claiming: bool,
        op: impl FnOnce(Files<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let grant = local_grant(&actor);
        let hook = Arc::new(EtcdAdmission {
            table: self.table.clone(),
            actor: actor.clone(),
            runtime: tokio::runtime::Handle::current(),
            wait,
            counts_busy: claiming && !self.files.shared.config.claim_ttl.is_zero(),
            keys: self.keys.clone(),
            admitted: Mutex::new(Vec::new()),
        });
        let sched = self.files.clone();
        let table = self.table.clone();
        let task = tokio::spawn(async move {
            let name = actor.name().to_string();
            let turn = actor.turn().map(str::to_string);
            let local_hook = hook.clone();
            let ran = App::blocking(move || {
                let local = match local {
                    Local::Kept(actor) => actor,
                    Local::Ephemeral => Arc::new(sched.actor(name, grant)?),
                };
                // Recorded in the session's journal under the actor's turn,
                // whichever server serves the op.
                if let Some(turn) = turn {
                    local.set_turn(turn);
                }
                let files = local.files().admitted_by(local_hook.clone());
                let done = op(if claiming { files.claiming() } else { files });
                // The marks the op left (a read's, or a refreshed one).
                let marks = MarkStore::of(&local.meta);
                let after: Vec<Vec<Option<ReadMark>>> = local_hook
                    .admitted
                    .lock()
                    .iter()
                    .map(|a| a.norms.iter().map(|n| marks.get(n)).collect())
                    .collect();
                Ok((done, after))
            })
            .await;
            let succeeded = matches!(&ran, Ok((Ok(_), _)));
            let admitted = std::mem::take(&mut *hook.admitted.lock());
            for (i, admitted) in admitted.iter().enumerate() {
                let after = match &ran {
                    Ok((_, after)) => after.get(i).map(Vec::as_slice).unwrap_or_default(),
                    Err(_) => &[],
                };
                let records = records_of(admitted, succeeded, after, actor.name());
                if table
                    .finish_file_op(&actor, admitted.hold, records)
                    .await
                    .is_err()
                {
                    release_later(table.clone(), admitted.hold);
                }
            }
            ran.and_then(|(done, _)| done)
        });
        super::super::joined(task, "a file operation").await
    }
}

impl FileRunner {
    /// Runs a shell command as `actor` (`files.run`, SPEC §17): a local
    /// actor made for it runs the command through its overlay; the
    /// commit's write set is admitted in etcd (one exclusive hold on every
    /// path it changes, waiting up to the commit wait, the fence checked as
    /// for any write) and judged against the marks etcd keeps for the
    /// actor; what landed is recorded in etcd and the hold released when
    /// the run is over, however it ended (as step 3 of the module doc).
    pub(in crate::server) async fn run_command(
        &self,
        actor: ActorRef,
        cmd: crate::run::Command,
    ) -> Result<crate::run::RunReport> {
        let grant = local_grant(&actor);
        let hook = Arc::new(EtcdAdmission {
            table: self.table.clone(),
            actor: actor.clone(),
            runtime: tokio::runtime::Handle::current(),
            wait: OpWait::For(cmd.commit_wait_limit()),
            counts_busy: false,
            keys: self.keys.clone(),
            admitted: Mutex::new(Vec::new()),
        });
        let sched = self.files.clone();
        let table = self.table.clone();
        let task = tokio::spawn(async move {
            let local = sched.actor(actor.name().to_string(), grant)?;
            if let Some(turn) = actor.turn() {
                local.set_turn(turn.to_string());
            }
            let outer: Arc<dyn OuterAdmission> = hook.clone();
            let ran = local.run(cmd.admitted_by(crate::run::Outer(outer))).await;
            let admitted = std::mem::take(&mut *hook.admitted.lock());
            for admitted in admitted {
                // Its writes end the actor's claims there, as any write's.
                let mut records = crate::etcd::GateRecords {
                    ended: admitted.claims.clone(),
                    ..Default::default()
                };
                if let Ok(report) = &ran {
                    for (norm, sha) in &report.landed {
                        let wrote = sha.clone().map(|h| (actor.name().to_string(), h));
                        records.writes.push((norm.clone(), wrote));
                    }
                    if !records.writes.is_empty() {
                        records.op = Some("run".into());
                    }
                }
                if table
                    .finish_file_op(&actor, admitted.hold, records)
                    .await
                    .is_err()
                {
                    release_later(table.clone(), admitted.hold);
                }
            }
            ran
        });
        super::super::joined(task, "a command").await
    }
}

impl EtcdBackend {
    /// What runs this server's file ops around etcd holds.
    pub(in crate::server) fn file_runner(&self) -> FileRunner {
        FileRunner {
            table: self.table.clone(),
            files: self.files.clone(),
            keys: self.resolver(std::path::Path::new("/"), &[]),
        }
    }

    /// Runs one file op for `actor`, a contested one waiting up to `wait`
    /// in etcd (the request's `timeout_ms`, else `Config::file_op_wait`;
    /// try-only without either); `current` (an agent's surface) claims a
    /// file a write is refused `Stale` on, as in process.
    pub(in crate::server::rpc) async fn file_op(
        &self,
        app: &App,
        actor: ActorRef,
        op: FileOp,
        wait: Option<Duration>,
        current: bool,
    ) -> Result<Done> {
        let lease = actor.lease();
        let wait = match (wait, self.file_op_wait) {
            (Some(limit), _) => OpWait::Call(limit),
            (None, Some(limit)) => OpWait::For(limit),
            (None, None) => OpWait::Never,
        };
        let runner = self.file_runner();
        let running = runner.run(actor, Local::Ephemeral, wait, current, move |files| {
            run(files, op)
        });
        self.long_poll(app, lease, running).await
    }
}
