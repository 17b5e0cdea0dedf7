//! The JSON-RPC methods of a server whose session's table is in etcd
//! (`writ serve --etcd`, SPEC §16): the same methods and answers as the
//! in-process table, served by [`crate::etcd::Table`].
//!
//! # Implementation details
//!
//! Nothing about the session lives in this process: actors, holds, waiters,
//! leases and token hashes are etcd keys, so any server of the session can
//! serve any request, and a server that dies takes nothing with it. Wire
//! handles are the table's ids (unique in the session) under the instance
//! name `etcd`: `a-etcd-<id>`, `h-etcd-<id>`, `l-etcd-<etcd lease>`.
//!
//! Tickets too (SPEC §13: a grant racing a client's give-up is handed
//! back) are answered in etcd, so a client whose server died gives its wait
//! up through another ([`Table::give_up`]).
//!
//! The methods themselves are in the family files beside this one, each
//! with its in-process and etcd implementation; this file holds what they
//! share on etcd: joining the session, resolving an actor's targets as the
//! core's scope rules take them, naming ids by their handles, and keeping a
//! lease alive through a wait. The file tools run the crate's own file
//! pipeline around an etcd hold (`file_ops`).

mod file_ops;
#[cfg(feature = "mcp")]
mod mcp_table;

pub(super) use file_ops::local_grant;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::{App, TokenClaim, invalid, unknown_token};
use crate::core::key::{self, Key};
use crate::core::scope::Scope;
use crate::etcd::tokens::token_hash;
use crate::etcd::{ActorRef, LeaseId, Table, TableOptions};
use crate::sched::actor::{check_child_root, scoped_keys};
use crate::sched::resolve::Resolver;
use crate::server::auth::Caller;
use crate::{ActorId, CaseMode, Config, Error, HoldKind, Mode, Result, Scheduler, Target};

/// Where a server finds its session's table in etcd.
#[derive(Debug, Clone)]
pub(crate) struct EtcdOptions {
    pub(crate) endpoints: Vec<String>,
    pub(crate) session: String,
    pub(crate) table: TableOptions,
}

/// The etcd side of an [`App`].
#[derive(Debug)]
pub(crate) struct EtcdBackend {
    pub(super) table: Table,
    portable: bool,
    /// The session's case mode, `Detect` already probed.
    case: CaseMode,
    /// `max_actors`, `max_writers` (SPEC §11): the same on every server of
    /// the session (the first one stores them).
    pub(super) limits: (Option<usize>, Option<usize>),
    /// The file machinery's own scheduler (never the server's, which stays
    /// empty): file ops run as ephemeral actors of it, inside holds taken
    /// in etcd, so its admissions are never contested. It keeps the hash
    /// cache; marks and last writers come from etcd for every op.
    pub(super) files: Scheduler,
    /// `Config::file_op_wait`: how long a contested file op waits in etcd
    /// (try-only without it).
    pub(super) file_op_wait: Option<Duration>,
    /// The session's history folder, the same on every server of the
    /// session (the first one stores it): the journal they all record in.
    pub(super) history_dir: Option<PathBuf>,
    /// This server's MCP root actor, once a session-token MCP session has
    /// made it: the parent of its sessions' actors (`mcp_table`).
    #[cfg(feature = "mcp")]
    pub(super) mcp_root: tokio::sync::Mutex<Option<(ActorRef, tokio::task::JoinHandle<()>)>>,
}

impl EtcdBackend {
    /// Connects to etcd, joins the session and makes sure this server has
    /// the session's token: the first server of a session stores its
    /// token's hash (a compare on its absence), every later one must bring
    /// the same token, and the same slot limits and case mode.
    pub(crate) async fn connect(
        options: &EtcdOptions,
        config: &Config,
        root: &std::path::Path,
        token: &str,
    ) -> Result<EtcdBackend> {
        let case = match config.case {
            CaseMode::Detect => crate::sched::resolve::detect_case(root),
            other => other,
        };
        // Targets are resolved (and folded) here with the in-process
        // resolver; the table folds the keys it is given the same way and
        // makes every server of the session agree on the mode.
        let table_options = options
            .table
            .clone()
            .fold_case(case == CaseMode::Insensitive);
        let table = Table::connect(&options.endpoints, &options.session, table_options).await?;
        if !table.claim_session_token(&token_hash(token)).await? {
            return Err(Error::Forbidden {
                reason: format!(
                    "session '{}' in etcd was started with another session token; start every server of a session with the same token (writ serve --token-file FILE)",
                    options.session
                ),
            });
        }
        let limits = (config.max_actors, config.max_writers);
        let spelled = json!({"max_actors": limits.0, "max_writers": limits.1}).to_string();
        if !table.claim_limits(&spelled).await? {
            return Err(Error::Forbidden {
                reason: format!(
                    "session '{}' in etcd was started with other slot limits than this server's {spelled}; give every server of a session the same max_actors and max_writers",
                    options.session
                ),
            });
        }
        // Every server of the session records in one journal, or none
        // does: a write served by a server without it could never be
        // rewound.
        let journal = match &config.history_dir {
            Some(dir) => std::fs::canonicalize(dir)
                .unwrap_or_else(|_| dir.clone())
                .to_str()
                .map(str::to_string)
                .ok_or_else(|| {
                    Error::invalid(dir, "a session on etcd stores its history folder as UTF-8")
                })?,
            None => String::new(),
        };
        if !table.claim_journal(&journal).await? {
            return Err(Error::Forbidden {
                reason: format!(
                    "session '{}' in etcd was started with another history folder than this server's ({}); give every server of a session the same --history-dir (a folder they all reach), or none",
                    options.session,
                    if journal.is_empty() { "none" } else { &journal },
                ),
            });
        }
        // The file machinery's scheduler: the server's rules (policy,
        // limits, durability, history folder), the session's case and
        // name (so every server's journal records are the session's), and
        // no waiting of its own (etcd does the waiting).
        let mut local = config.clone().session(options.session.clone());
        local.file_op_wait = None;
        local.case = case;
        let files = Scheduler::new(local);
        // Actors are made by any server of the session, all inside its
        // root: a rewind here restores what the others recorded too.
        files.admit_grant_tree(root)?;
        Ok(EtcdBackend {
            table,
            portable: config.portable_names,
            case,
            limits,
            files,
            file_op_wait: config.file_op_wait,
            history_dir: config.history_dir.clone(),
            #[cfg(feature = "mcp")]
            mcp_root: tokio::sync::Mutex::new(None),
        })
    }

    /// The resolver of targets for an actor rooted at `root`: keys as the
    /// in-process table makes them, folded when the session folds case.
    pub(super) fn resolver(&self, root: &Path, read_roots: &[PathBuf]) -> Resolver {
        Resolver::new(
            root.to_path_buf(),
            read_roots.to_vec(),
            self.case,
            self.portable,
        )
    }

    /// What `/metrics` reads: the session's counters and live records in
    /// etcd, and how many calls this server sent again.
    pub(crate) async fn table_reading(&self) -> Result<crate::server::observe::TableReading> {
        let dump = self.table.dump().await?;
        Ok(crate::server::observe::TableReading {
            counters: dump.table.counters,
            actors: dump.table.actors.len(),
            holds: dump.table.holds.len(),
            waiters: dump.table.waiters.len(),
            etcd_resends: Some(self.table.resends()),
        })
    }
}

/// `actor`'s targets for a hold of `kind`, resolved by `resolver` (the
/// actor's) and judged by the core's scope rules ([`Scope::claim_keys`])
/// exactly as in process.
pub(super) fn scoped_targets(
    keys: &Resolver,
    resolver: &Resolver,
    actor: &ActorRef,
    targets: &[Target],
    kind: HoldKind,
) -> Result<Vec<Target>> {
    let scope = actor_scope(keys, actor);
    let keys = scoped_keys(&scope, actor.name(), resolver, targets, kind)?;
    Ok(keys.into_iter().map(key_target).collect())
}

/// The scope of an actor with such a grant, as the core's rules take it:
/// its grant fence folded by `keys` as the session folds keys, and merged
/// as in process.
fn scope_of(keys: &Resolver, read_only: bool, fence: Option<&[Target]>) -> Scope {
    match (read_only, fence) {
        (true, _) => Scope::ReadOnly,
        (false, Some(fence)) => Scope::Fenced(key::merge(
            fence
                .iter()
                .map(|t| (keys.key_for(t.path().to_path_buf(), t.is_tree()), t.mode()))
                .collect(),
        )),
        (false, None) => Scope::Workspace,
    }
}

pub(super) fn actor_scope(keys: &Resolver, actor: &ActorRef) -> Scope {
    scope_of(keys, actor.is_read_only(), actor.grant_fence())
}

/// A key of a claim as the table takes it: a resolved target.
pub(super) fn key_target((key, mode): (Key, Mode)) -> Target {
    let target = if key.tree {
        Target::tree(key.path)
    } else {
        Target::file(key.path)
    };
    match mode {
        Mode::Shared => target.shared().resolved(),
        Mode::Exclusive => target.resolved(),
    }
}

fn lease_number(lease: LeaseId) -> u64 {
    // etcd's lease ids are positive.
    u64::try_from(lease.0).unwrap_or(0)
}

impl App {
    /// A new actor's token: its handle, then a secret of its own.
    pub(super) fn actor_token(&self, id: ActorId) -> Result<String> {
        Ok(format!(
            "{}.{}",
            self.handle('a', id.0),
            crate::random::hex(32)?
        ))
    }

    /// Feeds the session's events, as etcd orders them, into this server's
    /// event ring until the server stops: `/events`, the log and the
    /// metrics then show what every server of the session does. The
    /// session is read before this returns, so whatever happens after is
    /// reported.
    pub(crate) async fn follow_etcd_events(&self) -> Result<()> {
        let Some(backend) = &self.etcd else {
            return Ok(());
        };
        let feed = backend.table.event_feed().await?;
        let sched = self.sched.clone();
        let mut stop = self.stopping();
        tokio::spawn(async move {
            tokio::select! {
                () = feed.run(move |event| sched.emit(|| event)) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
        self.follow_path_refusals(backend.files.subscribe());
        Ok(())
    }

    /// The file tools' refusals of the path rules (a sensitive name, a path
    /// out of the grant or the fence, a read-only actor) are decided by
    /// this server before anything reaches etcd: they come from the file
    /// machinery's own scheduler into this server's ring, so its log and
    /// `writ_refusals_total` show them as in process (SPEC §13).
    fn follow_path_refusals(&self, mut refusals: crate::sched::events::Subscription) {
        let sched = self.sched.clone();
        let mut stop = self.stopping();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    event = refusals.next() => event,
                    _ = stop.wait_for(|s| *s) => return,
                };
                if let crate::EventKind::Refused { error, .. } = &event.kind {
                    if matches!(
                        error.as_str(),
                        "policy" | "outside_grant" | "outside_fence" | "read_only"
                    ) {
                        sched.emit(|| event.kind.clone());
                    }
                }
            }
        });
    }

    pub(super) fn lease_handle(&self, lease: LeaseId) -> String {
        self.handle('l', lease_number(lease))
    }

    pub(super) fn etcd_lease(&self, handle: &str) -> Result<LeaseId> {
        let n = self.parse('l', "a lease", handle)?;
        i64::try_from(n)
            .map(LeaseId)
            .map_err(|_| invalid(format!("'{handle}' is not a lease handle")))
    }

    /// Names ids in the table's errors by their wire handles.
    pub(super) fn etcd_named(&self, e: Error) -> Error {
        let renamed = |text: &str, prefix: char| {
            text.parse::<u64>()
                .map_or_else(|_| text.to_string(), |n| self.handle(prefix, n))
        };
        match e {
            Error::UnknownActor { actor } => Error::UnknownActor {
                actor: renamed(&actor, 'a'),
            },
            Error::UnknownHold { hold } => Error::UnknownHold {
                hold: renamed(&hold, 'h'),
            },
            Error::UnknownLease { lease } => Error::UnknownLease {
                lease: renamed(&lease, 'l'),
            },
            other => other,
        }
    }

    /// Who is calling: the session token is this server's own (checked
    /// against the session's hash at start); an actor token is found by its
    /// hash in etcd, with its actor still live, and renews its lease.
    pub(crate) async fn etcd_authenticate(
        &self,
        backend: &EtcdBackend,
        token: Option<&str>,
    ) -> Result<Caller> {
        let n = match self.claim(token)? {
            TokenClaim::Session => return Ok(Caller::Session),
            // The whole token is hashed: its secret is checked by finding
            // the hash in etcd.
            TokenClaim::Actor { n, .. } => n,
        };
        let token = token.unwrap_or_default();
        let (actor, lease) = backend
            .table
            .token_owner(&token_hash(token), ActorId(n))
            .await?
            .ok_or_else(unknown_token)?;
        // Any request made with the lease's tokens renews it (SPEC §13);
        // the request does not wait for the renewal.
        let table = backend.table.clone();
        tokio::spawn(async move {
            let _ = table.keep_alive(lease).await;
        });
        Ok(Caller::Actor(actor.0))
    }
}

impl EtcdBackend {
    /// The actor a request acts for, after the caller's rights are checked.
    pub(super) async fn actor(&self, app: &App, caller: &Caller, handle: &str) -> Result<ActorRef> {
        let n = app.parse('a', "an actor", handle)?;
        let actor = self
            .table
            .actor(ActorId(n))
            .await
            .map_err(|e| app.etcd_named(e))?;
        let lineage: Vec<u64> = actor.lineage().iter().map(|a| a.0).collect();
        app.may(caller, &lineage, handle)?;
        Ok(actor)
    }

    /// An actor's targets for a hold of `kind`, as the table takes them:
    /// resolved as in process (symlinks, the grant root), then judged by
    /// the core's scope rules ([`Scope::claim_keys`]) exactly as in process.
    pub(super) fn targets_of(
        &self,
        actor: &ActorRef,
        targets: &[Target],
        kind: HoldKind,
    ) -> Result<Vec<Target>> {
        let resolver = self.resolver(actor.root(), actor.read_roots());
        scoped_targets(&self.keys(), &resolver, actor, targets, kind)
    }

    /// Folds keys as the session does, whatever the actor.
    pub(super) fn keys(&self) -> Resolver {
        self.resolver(Path::new("/"), &[])
    }

    /// The core's rules for a child of `parent` rooted at `root` with such
    /// a grant (SPEC §3): its root within the parent's, its scope within
    /// the parent's scope.
    pub(super) fn check_child(
        &self,
        parent: &ActorRef,
        root: &Path,
        read_only: bool,
        fence: Option<&[Target]>,
    ) -> Result<()> {
        check_child_root(&self.resolver(parent.root(), parent.read_roots()), root)?;
        let keys = self.keys();
        actor_scope(&keys, parent).check_child(
            parent.name(),
            &scope_of(&keys, read_only, fence),
            &keys.key_for(root.to_path_buf(), true),
        )
    }

    /// Renews `lease` until this server stops (then revokes it: what is on
    /// it was this server's alone) or the task is aborted.
    pub(super) fn renew(&self, app: &App, lease: LeaseId) -> tokio::task::JoinHandle<()> {
        let (table, mut stop) = (self.table.clone(), app.stopping());
        let period = (app.ttl / 3).max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                let stopped = tokio::select! {
                    () = tokio::time::sleep(period) => false,
                    _ = stop.wait_for(|stopped| *stopped) => true,
                };
                if stopped {
                    let _ = table.revoke(lease).await;
                    return;
                }
                let _ = table.keep_alive(lease).await;
            }
        })
    }

    /// Runs a wait: the lease is renewed while it runs (an open long-poll
    /// keeps it alive), and the server's shutdown ends it. Dropping the
    /// future (the client went away) cancels the table's wait.
    pub(super) async fn long_poll<T>(
        &self,
        app: &App,
        lease: LeaseId,
        wait: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let table = self.table.clone();
        let period = (app.ttl / 3).max(Duration::from_millis(100));
        let renew = async move {
            loop {
                tokio::time::sleep(period).await;
                let _ = table.keep_alive(lease).await;
            }
        };
        let mut stop = app.stopping();
        tokio::select! {
            result = wait => result,
            () = renew => Err(Error::Unavailable { reason: "the lease renewal ended".into() }),
            _ = stop.wait_for(|s| *s) => Err(Error::Unavailable {
                reason: "this server is shutting down; the wait was cancelled (holds in etcd stay; another server of the session can serve them)".into(),
            }),
        }
    }
}
