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
//! The file tools run the crate's own file pipeline around an etcd hold
//! (the `files` module below). What the table cannot do yet (history,
//! `turn.set`) is refused whole with `Error::Unsupported`, never
//! approximated.

mod files;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{
    ActorParams, AdmitParams, App, CreateParams, DumpParams, HoldParams, HoldTargetsParams,
    LeaseParams, TokenClaim, invalid, params, targets, timeout, unknown_token,
};
use crate::core::key::{self, Key};
use crate::core::scope::Scope;
use crate::etcd::tokens::token_hash;
use crate::etcd::{
    ActorRef, AdmitRequest, ChildAsk, GrantRecord, LeaseId, Table, TableDump, TableOptions,
};
use crate::sched::actor::{check_child_root, scoped_keys};
use crate::sched::resolve::Resolver;
use crate::server::auth::{self, Caller};
use crate::wire::PROTOCOL_VERSION;
use crate::{ActorId, CaseMode, Config, Error, HoldId, HoldKind, Mode, Result, Scheduler, Target};

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
    table: Table,
    portable: bool,
    /// The session's case mode, `Detect` already probed.
    case: CaseMode,
    /// `max_actors`, `max_writers` (SPEC §11): the same on every server of
    /// the session (the first one stores them).
    limits: (Option<usize>, Option<usize>),
    /// The file machinery's own scheduler (never the server's, which stays
    /// empty): file ops run as ephemeral actors of it, inside holds taken
    /// in etcd, so its admissions are never contested. It keeps the hash
    /// cache; marks and last writers come from etcd for every op.
    files: Scheduler,
    /// `Config::file_op_wait`: how long a contested file op waits in etcd
    /// (try-only without it).
    file_op_wait: Option<Duration>,
}

/// The methods of SPEC §13 the etcd table does not serve yet.
const UNSUPPORTED: &[&str] = &[
    "turn.set",
    "history.snapshot",
    "history.record",
    "history.rewind",
    "history.redo",
];

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported { what: what.into() }
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
        // The file machinery's scheduler: the server's rules (policy,
        // limits, durability), the session's case, no history (not kept on
        // etcd), and no waiting of its own (etcd does the waiting).
        let mut local = config.clone();
        local.history_dir = None;
        local.file_op_wait = None;
        local.case = case;
        Ok(EtcdBackend {
            table,
            portable: config.portable_names,
            case,
            limits,
            files: Scheduler::new(local),
            file_op_wait: config.file_op_wait,
        })
    }

    /// The resolver of targets for an actor rooted at `root`: keys as the
    /// in-process table makes them, folded when the session folds case.
    fn resolver(&self, root: &Path, read_roots: &[PathBuf]) -> Resolver {
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

    /// An actor's scope as the core's rules take it.
    fn actor_scope(&self, actor: &ActorRef) -> Scope {
        actor_scope(&self.resolver(Path::new("/"), &[]), actor)
    }
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

fn actor_scope(keys: &Resolver, actor: &ActorRef) -> Scope {
    scope_of(keys, actor.is_read_only(), actor.grant_fence())
}

/// A key of a claim as the table takes it: a resolved target.
fn key_target((key, mode): (Key, Mode)) -> Target {
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
    fn lease_handle(&self, lease: LeaseId) -> String {
        self.handle('l', lease_number(lease))
    }

    fn etcd_lease(&self, handle: &str) -> Result<LeaseId> {
        let n = self.parse('l', "a lease", handle)?;
        i64::try_from(n)
            .map(LeaseId)
            .map_err(|_| invalid(format!("'{handle}' is not a lease handle")))
    }

    /// Names ids in the table's errors by their wire handles.
    fn etcd_named(&self, e: Error) -> Error {
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

    /// The actor a request acts for, after the caller's rights are checked.
    async fn etcd_actor(
        &self,
        backend: &EtcdBackend,
        caller: &Caller,
        handle: &str,
    ) -> Result<ActorRef> {
        let n = self.parse('a', "an actor", handle)?;
        let actor = backend
            .table
            .actor(ActorId(n))
            .await
            .map_err(|e| self.etcd_named(e))?;
        let lineage: Vec<u64> = actor.lineage().iter().map(|a| a.0).collect();
        self.may(caller, &lineage, handle)?;
        Ok(actor)
    }

    /// Runs a wait: the lease is renewed while it runs (an open long-poll
    /// keeps it alive), and the server's shutdown ends it. Dropping the
    /// future (the client went away) cancels the table's wait.
    async fn etcd_long_poll<T>(
        &self,
        backend: &EtcdBackend,
        lease: LeaseId,
        wait: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let table = backend.table.clone();
        let period = (self.ttl / 3).max(Duration::from_millis(100));
        let renew = async move {
            loop {
                tokio::time::sleep(period).await;
                let _ = table.keep_alive(lease).await;
            }
        };
        let mut stop = self.stop_rx.clone();
        tokio::select! {
            result = wait => result,
            () = renew => Err(Error::Unavailable { reason: "the lease renewal ended".into() }),
            _ = stop.wait_for(|s| *s) => Err(Error::Unavailable {
                reason: "this server is shutting down; the wait was cancelled (holds in etcd stay; another server of the session can serve them)".into(),
            }),
        }
    }

    /// Runs one method against the table in etcd; `None` for the methods
    /// that do not touch the table (served as in process).
    pub(crate) async fn etcd_call(
        self: &Arc<Self>,
        backend: &EtcdBackend,
        caller: &Caller,
        method: &str,
        p: Value,
    ) -> Option<Result<Value>> {
        let answer = match method {
            "session.info" => Ok(self.etcd_info(backend, caller)),
            "actor.create" | "actor.child_wait" => {
                self.etcd_create(backend, caller, method, p).await
            }
            "actor.drop" => self.etcd_drop(backend, caller, p).await,
            "admit" | "fence" => self.etcd_admit(backend, caller, method, p).await,
            "release" => self.etcd_release(backend, caller, p).await,
            "fence.extend" | "fence.narrow" => self.etcd_change(backend, caller, method, p).await,
            "dump" => self.etcd_dump(backend, p).await,
            "files.read" | "files.write" | "files.append" | "files.replace" | "files.delete"
            | "files.rename" => self.etcd_files(backend, caller, method, p).await,
            "lease.keepalive" => self.etcd_keepalive(backend, caller, p).await,
            "lease.revoke" => self.etcd_revoke(backend, caller, p).await,
            m if UNSUPPORTED.contains(&m) => Err(unsupported(format!("the method `{m}`"))),
            _ => return None,
        };
        Some(answer.map_err(|e| self.etcd_named(e)))
    }

    fn etcd_info(&self, backend: &EtcdBackend, caller: &Caller) -> Value {
        json!({
            "protocol": PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "root": self.root,
            "session": backend.table.session(),
            "backend": "etcd",
            "instance": self.instance,
            "lease_ttl_ms": self.ttl.as_millis() as u64,
            "call_wait_ms": self.call_wait.as_millis() as u64,
            "max_body": self.max_body,
            "history_dir": Value::Null,
            "unsupported": UNSUPPORTED,
            "caller": match caller {
                Caller::Session => "session".to_string(),
                Caller::Actor(n) => self.handle('a', *n),
            },
        })
    }

    async fn etcd_create(
        &self,
        backend: &EtcdBackend,
        caller: &Caller,
        method: &str,
        p: Value,
    ) -> Result<Value> {
        let p: CreateParams = params(p)?;
        let grant = self.grant(caller, &p.grant)?;
        // As in process: a grant root and each read root is an existing
        // folder, kept canonical.
        let root = crate::sched::resolve::canonical_root(grant.root())?;
        let read_roots = grant
            .read_roots()
            .iter()
            .map(|r| crate::sched::resolve::canonical_root(r))
            .collect::<Result<Vec<_>>>()?;
        let read_only = grant.is_read_only();
        // A fenced grant's targets, resolved against its root: the fence
        // the new actor takes (all-or-nothing) and the keys its writes
        // must lie inside.
        // Judged as in process: a grant fence is the new actor's first
        // fence, taken with a workspace scope (so not exclusive under a
        // read-only root).
        let fence_targets = match grant.fenced_targets() {
            Some(targets) => {
                let resolver = backend.resolver(&root, &read_roots);
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
        let token = |id: ActorId| -> Result<String> {
            Ok(format!(
                "{}.{}",
                self.handle('a', id.0),
                auth::random_hex(32)?
            ))
        };
        let table = &backend.table;
        let (actor, token) = match (&p.parent, p.lease) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "a child belongs to its parent's lease; do not pass 'lease'",
                ));
            }
            (None, _) if method == "actor.child_wait" => {
                return Err(invalid("actor.child_wait needs a 'parent'"));
            }
            (None, lease) => {
                self.session_only(caller, "creating a root actor")?;
                let (lease, fresh) = match lease {
                    Some(l) => (self.etcd_lease(&l)?, false),
                    None => (table.grant_lease(self.ttl).await?, true),
                };
                let made = table
                    .create_actor_with_token(lease, &p.name, &root, None, record, token)
                    .await;
                let made = match (made, &fence_targets) {
                    (Ok(made), Some(fence)) => {
                        self.take_grant_fence(backend, made, fence, fresh).await
                    }
                    (made, _) => made,
                };
                if made.is_err() && fresh {
                    let _ = table.revoke(lease).await;
                }
                made?
            }
            (Some(parent), None) => {
                let limited = backend.limits != (None, None);
                let parent = self.etcd_actor(backend, caller, parent).await?;
                check_child_root(&backend.resolver(parent.root(), parent.read_roots()), &root)?;
                // The core's rule for a child's scope (SPEC §3).
                let keys = backend.resolver(Path::new("/"), &[]);
                actor_scope(&keys, &parent).check_child(
                    parent.name(),
                    &scope_of(&keys, read_only, fence_targets.as_deref()),
                    &keys.key_for(root.clone(), true),
                )?;
                if method == "actor.child_wait" {
                    // Waits for the grant fence's paths, then for a slot
                    // (SPEC §11), in the table; the child, its token and
                    // its fence are made in one transaction.
                    let ask = ChildAsk {
                        parent: parent.clone(),
                        name: p.name.clone(),
                        root: root.clone(),
                        grant: record,
                        fence: fence_targets.clone(),
                        limits: backend.limits,
                        timeout: timeout(p.timeout_ms),
                    };
                    let waiting = table.child_wait(ask, token);
                    self.etcd_long_poll(backend, parent.lease(), waiting)
                        .await?
                } else {
                    let made = table
                        .create_actor_with_token_in(
                            parent.lease(),
                            &p.name,
                            &root,
                            Some(&parent),
                            record,
                            limited.then_some(backend.limits),
                            token,
                        )
                        .await?;
                    match &fence_targets {
                        Some(fence) => self.take_grant_fence(backend, made, fence, false).await?,
                        None => made,
                    }
                }
            }
        };
        Ok(json!({
            "actor": self.handle('a', actor.id().0),
            "token": token,
            "lease": self.lease_handle(actor.lease()),
            "name": actor.name(),
            "root": actor.root(),
        }))
    }

    /// Takes a new actor's grant fence, try-only; if it is refused the
    /// actor goes again (its whole lease, when it had one of its own), so
    /// a refused creation leaves nothing (SPEC §3).
    async fn take_grant_fence(
        &self,
        backend: &EtcdBackend,
        (actor, token): (ActorRef, String),
        fence: &[Target],
        own_lease: bool,
    ) -> Result<(ActorRef, String)> {
        let taken = backend
            .table
            .admit(&actor, AdmitRequest::fence(fence.to_vec()))
            .await;
        match taken {
            Ok(_) => Ok((actor, token)),
            Err(e) => {
                if !own_lease {
                    let _ = backend.table.drop_actor(&actor).await;
                }
                Err(e)
            }
        }
    }

    async fn etcd_drop(&self, backend: &EtcdBackend, caller: &Caller, p: Value) -> Result<Value> {
        let p: ActorParams = params(p)?;
        let actor = self.etcd_actor(backend, caller, &p.actor).await?;
        backend.table.drop_actor_marking(&actor).await?;
        Ok(json!({"dropped": p.actor}))
    }

    /// An actor's targets for a hold of `kind`, as the table takes them:
    /// resolved as in process (symlinks, the grant root), then judged by
    /// the core's scope rules ([`Scope::claim_keys`]) exactly as in process.
    fn etcd_targets(
        &self,
        backend: &EtcdBackend,
        actor: &ActorRef,
        targets: &[Target],
        kind: HoldKind,
    ) -> Result<Vec<Target>> {
        let resolver = backend.resolver(actor.root(), actor.read_roots());
        let scope = backend.actor_scope(actor);
        let keys = scoped_keys(&scope, actor.name(), &resolver, targets, kind)?;
        Ok(keys.into_iter().map(key_target).collect())
    }

    async fn etcd_admit(
        &self,
        backend: &EtcdBackend,
        caller: &Caller,
        method: &str,
        p: Value,
    ) -> Result<Value> {
        let p: AdmitParams = params(p)?;
        let targets = targets(&p.targets, self.max_targets)?;
        let actor = self.etcd_actor(backend, caller, &p.actor).await?;
        let fence = method == "fence";
        let kind = if fence {
            HoldKind::Fence
        } else {
            HoldKind::Call
        };
        let resolved = self.etcd_targets(backend, &actor, &targets, kind)?;
        let mut request = if fence {
            AdmitRequest::fence(resolved)
        } else {
            AdmitRequest::call(resolved)
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
        let wait = p.wait.unwrap_or(!fence);
        if wait {
            request = match timeout(p.timeout_ms) {
                Some(d) => request.wait_timeout(d),
                None => request.wait(),
            };
        }
        let admitting = backend.table.admit(&actor, request);
        let grant = if wait {
            self.etcd_long_poll(backend, actor.lease(), admitting)
                .await?
        } else {
            admitting.await?
        };
        let hold = grant.hold().0;
        Ok(json!({
            "hold": self.handle('h', hold),
            "kind": match grant.kind() { HoldKind::Fence => "fence", HoldKind::Call => "call" },
            "paths": grant.paths(),
            "revision": grant.revision(),
        }))
    }

    /// `fence.extend` (a fence or a call reservation, try-only) and
    /// `fence.narrow` (a fence), all-or-nothing.
    async fn etcd_change(
        &self,
        backend: &EtcdBackend,
        caller: &Caller,
        method: &str,
        p: Value,
    ) -> Result<Value> {
        let p: HoldTargetsParams = params(p)?;
        let targets = targets(&p.targets, self.max_targets)?;
        let hold = HoldId(self.parse('h', "a hold", &p.hold)?);
        let (lineage, kind) = backend.table.hold_lineage(hold).await?;
        self.may(caller, &lineage, &p.hold)?;
        let owner = lineage.last().copied().unwrap_or_default();
        let actor = backend.table.actor(ActorId(owner)).await?;
        let resolved = self.etcd_targets(backend, &actor, &targets, kind)?;
        let changed = if method == "fence.extend" {
            backend.table.extend(&actor, hold, &resolved).await?
        } else if kind == HoldKind::Fence {
            backend.table.narrow(&actor, hold, &resolved).await?
        } else {
            return Err(invalid(format!(
                "{} is a call reservation; only a fence can be narrowed",
                p.hold
            )));
        };
        Ok(json!({"hold": p.hold, "paths": changed.paths(), "revision": changed.revision()}))
    }

    async fn etcd_release(
        &self,
        backend: &EtcdBackend,
        caller: &Caller,
        p: Value,
    ) -> Result<Value> {
        let p: HoldParams = params(p)?;
        let (n, named) = match (&p.hold, &p.actor, &p.ticket) {
            (Some(hold), None, None) => (self.parse('h', "a hold", hold)?, hold.clone()),
            (None, Some(actor), Some(ticket)) => {
                // The answer is in etcd: any server of the session can
                // give the wait up, whichever one served it.
                let actor = self.etcd_actor(backend, caller, actor).await?;
                return Ok(match backend.table.give_up(&actor, ticket).await? {
                    Some(hold) => json!({"released": self.handle('h', hold.0)}),
                    None => json!({"released": null, "ticket": ticket}),
                });
            }
            _ => return Err(invalid("release takes {hold} or {actor, ticket}")),
        };
        let hold = HoldId(n);
        let released = match backend.table.hold_lineage(hold).await {
            Ok((lineage, _)) => {
                self.may(caller, &lineage, &named)?;
                backend.table.release(hold).await
            }
            Err(e) => Err(e),
        };
        match released {
            Ok(()) => {}
            // A fence its owner's drop released: handing it back is
            // harmless (once), as in process.
            Err(Error::UnknownHold { .. }) => match backend.table.drop_mark(hold).await? {
                Some(lineage) => {
                    self.may(caller, &lineage, &named)?;
                    backend.table.clear_drop_mark(hold).await?;
                }
                None => return Err(Error::UnknownHold { hold: named }),
            },
            Err(e) => return Err(e),
        }
        Ok(json!({"released": named}))
    }

    async fn etcd_dump(&self, backend: &EtcdBackend, p: Value) -> Result<Value> {
        let p: DumpParams = params(p)?;
        let dump = backend.table.dump().await?;
        match p.format.as_deref() {
            None | Some("json") => self.dump_json(&dump),
            Some("table") => Ok(json!({
                "table": format!("{}\netcd revision {}", dump.table, dump.revision)
            })),
            Some(other) => Err(invalid(format!(
                "unknown dump format '{other}' (json or table)"
            ))),
        }
    }

    /// SPEC §5's dump as the in-process table gives it, plus what only a
    /// session in etcd has: the revision it was read at, each actor's
    /// lease and each waiter's queue revision (holds carry their fencing
    /// token as `revision`).
    fn dump_json(&self, dump: &TableDump) -> Result<Value> {
        let mut value = serde_json::to_value(&dump.table).map_err(|e| Error::Protocol {
            kind: crate::ProtocolError::Internal,
            detail: format!("the dump did not encode: {e}"),
        })?;
        value["backend"] = json!("etcd");
        value["revision"] = json!(dump.revision);
        if let Some(actors) = value["actors"].as_array_mut() {
            for (entry, lease) in actors.iter_mut().zip(&dump.leases) {
                entry["lease"] = json!(self.lease_handle(*lease));
            }
        }
        if let Some(waiters) = value["waiters"].as_array_mut() {
            for (entry, queued) in waiters.iter_mut().zip(&dump.queued) {
                entry["revision"] = json!(queued);
            }
        }
        Ok(value)
    }

    async fn etcd_keepalive(
        &self,
        backend: &EtcdBackend,
        caller: &Caller,
        p: Value,
    ) -> Result<Value> {
        let p: LeaseParams = params(p)?;
        let lease = self.etcd_lease(&p.lease)?;
        if let Caller::Actor(n) = caller {
            let mine = backend.table.actor(ActorId(*n)).await?;
            if mine.lease() != lease {
                return Err(Error::Forbidden {
                    reason: format!("this token's actor does not belong to lease {}", p.lease),
                });
            }
        }
        backend.table.keep_alive(lease).await?;
        Ok(json!({"lease": p.lease, "ttl_ms": self.ttl.as_millis() as u64}))
    }

    async fn etcd_revoke(&self, backend: &EtcdBackend, caller: &Caller, p: Value) -> Result<Value> {
        let p: LeaseParams = params(p)?;
        self.session_only(caller, "revoking a lease")?;
        let lease = self.etcd_lease(&p.lease)?;
        let (actors, holds) = backend.table.lease_contents(lease).await?;
        backend.table.revoke(lease).await?;
        Ok(json!({"lease": p.lease, "actors": actors, "holds": holds}))
    }
}
