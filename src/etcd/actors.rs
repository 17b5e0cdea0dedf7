//! Actors and leases: an actor's record (its lineage, root and grant), the
//! leases its keys hang on, making, looking up and dropping actors.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::Target;
use crate::core::table::{ActorId, HoldId};
use crate::error::{Error, Result};
use crate::kinds::Mode;

use super::counters::Counter;
use super::decide::ModeRecord;
use super::store::{
    LeaseId, Table, etcd_error, id_in, now_ms, revision_of, still, to_json, unavailable, with_lease,
};

/// An actor of the session, as any table of it knows it.
///
/// Plain data: holding it keeps nothing alive (the lease does). Obtain one
/// from [`Table::create_actor`] or, for an actor made elsewhere,
/// [`Table::actor`].
///
/// ```no_run
/// # async fn demo(table: writ::etcd::Table, id: writ::ActorId) -> Result<(), writ::Error> {
/// let actor = table.actor(id).await?;
/// println!("{} ({}), lease {}", actor.name(), actor.id().0, actor.lease());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorRef {
    pub(super) id: ActorId,
    pub(super) name: String,
    pub(super) lineage: Arc<[u64]>,
    pub(super) lease: LeaseId,
    pub(super) root: PathBuf,
    /// The revision its record was created at: compared on every commit,
    /// so that nothing is granted to an actor whose lease ended.
    pub(super) revision: i64,
    /// Made with a read-only grant (SPEC §3): whoever serves it refuses
    /// its exclusive targets.
    pub(super) read_only: bool,
    /// Its grant fence (resolved targets, with their modes), for an actor
    /// made with a fenced grant: whoever serves it keeps its writes and
    /// fences within them.
    pub(super) fence: Option<Arc<[Target]>>,
    /// Its read-only roots (canonical): whoever serves it lets it take
    /// shared holds there and nothing else.
    pub(super) read_roots: Arc<[PathBuf]>,
    /// The turn its writes are recorded under (SPEC §8), as its record said
    /// when it was read: a child starts with its parent's.
    pub(super) turn: Option<Arc<str>>,
}

impl ActorRef {
    /// The actor's id, unique in the session.
    pub fn id(&self) -> ActorId {
        self.id
    }

    /// The actor's name (for people; need not be unique).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease every key of the actor is attached to.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// The actor's root: the folder `Target::workspace()` names.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its ancestors' ids and its own, root first.
    pub fn lineage(&self) -> Vec<ActorId> {
        self.lineage.iter().map(|&a| ActorId(a)).collect()
    }

    /// Whether it was made read-only (by a server, for a `read_only`
    /// grant): it may take shared holds only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Its grant fence (resolved targets, with their modes), for an actor
    /// made (by a server) with a fenced grant.
    pub fn grant_fence(&self) -> Option<&[Target]> {
        self.fence.as_deref()
    }

    /// Its read-only roots (canonical folders), for an actor made (by a
    /// server) with a grant that has some (SPEC §3): shared holds only.
    pub fn read_roots(&self) -> &[PathBuf] {
        &self.read_roots
    }

    /// The turn its writes are recorded under, if one was set
    /// ([`Table::set_turn`], or its parent's when it was made).
    pub fn turn(&self) -> Option<&str> {
        self.turn.as_deref()
    }
}

/// What a server records of an actor's grant besides its root (SPEC §3),
/// so that every server of the session enforces it.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrantRecord {
    pub(crate) read_only: bool,
    pub(crate) fence: Option<Vec<Target>>,
    pub(crate) read_roots: Vec<PathBuf>,
}

/// One key of a grant fence as an actor's record spells it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct FenceKeyRecord {
    pub(super) path: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) tree: bool,
    pub(super) mode: ModeRecord,
}

impl FenceKeyRecord {
    fn of(target: &Target) -> Result<Self> {
        let path = target.path();
        Ok(FenceKeyRecord {
            path: path
                .to_str()
                .ok_or_else(|| Error::invalid(path, "the etcd table stores paths as UTF-8"))?
                .to_string(),
            tree: target.is_tree(),
            mode: target.mode().into(),
        })
    }

    fn target(&self) -> Target {
        let target = if self.tree {
            Target::tree(&self.path)
        } else {
            Target::file(&self.path)
        };
        match Mode::from(self.mode) {
            Mode::Shared => target.shared().resolved(),
            Mode::Exclusive => target.resolved(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ActorRecord {
    pub(super) name: String,
    pub(super) lineage: Vec<u64>,
    pub(super) root: String,
    pub(super) lease: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) read_only: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) fence: Option<Vec<FenceKeyRecord>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) read_roots: Vec<String>,
    /// Wall-clock milliseconds since the epoch (for its age in the dump).
    #[serde(default)]
    pub(super) since_ms: u64,
    /// The turn its writes are recorded under (SPEC §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) turn: Option<String>,
}

/// An actor's record and lineage (its ancestors' ids and its own, root
/// first), as every table reads it back.
pub(super) fn actor_record(
    id: u64,
    lease: LeaseId,
    name: &str,
    root: &Path,
    parent: Option<&ActorRef>,
    grant: &GrantRecord,
) -> Result<(ActorRecord, Vec<u64>)> {
    let Some(root_text) = root.to_str().filter(|_| root.is_absolute()) else {
        return Err(Error::invalid(
            root,
            "an actor's root must be an absolute UTF-8 path",
        ));
    };
    let mut lineage = parent.map(|p| p.lineage.to_vec()).unwrap_or_default();
    lineage.push(id);
    let record = ActorRecord {
        name: name.to_string(),
        lineage: lineage.clone(),
        root: root_text.to_string(),
        lease: lease.0,
        read_only: grant.read_only,
        fence: grant
            .fence
            .as_ref()
            .map(|keys| {
                keys.iter()
                    .map(FenceKeyRecord::of)
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?,
        read_roots: grant
            .read_roots
            .iter()
            .map(|r| {
                r.to_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::invalid(r, "the etcd table stores paths as UTF-8"))
            })
            .collect::<Result<Vec<_>>>()?,
        since_ms: now_ms(),
        // A child starts in its parent's turn, as in process.
        turn: parent.and_then(|p| p.turn.as_deref().map(str::to_string)),
    };
    Ok((record, lineage))
}

impl Table {
    /// Grants a lease of `ttl` (rounded up to whole seconds, at least 1;
    /// etcd may raise it to its own minimum).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
        let granted = self
            .resend(|mut client| async move { client.lease_grant(secs, None).await })
            .await
            .map_err(unavailable)?;
        Ok(LeaseId(granted.id()))
    }

    /// Renews `lease` once. Any table of the session may renew any lease.
    /// A renewal changes nothing but the lease's deadline, so one that
    /// failed or got no answer (a paused member, its connection found
    /// dead, an election going on) is asked again, of the next member, for
    /// up to three call bounds in all. A healthy member answers a renewal
    /// (no write) in milliseconds, so the first tries wait a quarter of the
    /// call bound each: a paused member then costs half a second, not two.
    pub async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        let call = self.inner.options.call_timeout;
        let until = tokio::time::Instant::now() + call * 3;
        let mut tries = 0;
        loop {
            tries += 1;
            let limit = if tries <= 6 { call / 4 } else { call };
            let started = tokio::time::Instant::now();
            let failure = match self.renew(lease, limit).await {
                Err(e @ Error::Unavailable { .. }) => e,
                done => return done,
            };
            if tokio::time::Instant::now() + limit > until {
                return Err(failure);
            }
            // A failure at once (no leader yet) is not asked again at once.
            if started.elapsed() < Duration::from_millis(50) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// One renewal of `lease`, answered within `bound` (its answer comes on
    /// a stream, which no call timeout bounds): a renewal that was not is
    /// a failed call to its member, which the next call then avoids.
    async fn renew(&self, lease: LeaseId, bound: Duration) -> Result<()> {
        let answer = self
            .call_once(|mut client| async move {
                let renewal = async {
                    let (mut keeper, mut stream) = client.lease_keep_alive(lease.0).await?;
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                match tokio::time::timeout(bound, renewal).await {
                    Ok(answer) => answer,
                    Err(_) => Err(etcd_client::Error::GRpcStatus(
                        tonic::Status::deadline_exceeded(format!(
                            "etcd did not renew lease {lease} within {bound:?}"
                        )),
                    )),
                }
            })
            .await;
        match answer {
            Ok(Some(answer)) if answer.ttl() > 0 => Ok(()),
            Ok(_) => Err(Error::UnknownLease {
                lease: lease.to_string(),
            }),
            Err(e) => Err(etcd_error(e, Some(lease), 0, 0)),
        }
    }

    /// Revokes `lease`: every key attached to it — its actors, their holds
    /// and waiters — is deleted in one step.
    pub async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.resend(|mut client| async move { client.lease_revoke(lease.0).await })
            .await
            .map(drop)
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))
    }

    /// Creates an actor on `lease`, as a child of `parent` if given (the
    /// parent must still be live). `root` is the folder
    /// `Target::workspace()` names for it.
    pub async fn create_actor(
        &self,
        lease: LeaseId,
        name: &str,
        root: &Path,
        parent: Option<&ActorRef>,
    ) -> Result<ActorRef> {
        let id = self.next_id()?;
        self.put_actor(
            id,
            lease,
            name,
            root,
            parent,
            GrantRecord::default(),
            Vec::new(),
            Vec::new(),
        )
        .await
    }

    /// Writes an actor's record (and `extra`, on the same lease, in the same
    /// transaction), guarded by its parent's record being the one it knew.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn put_actor(
        &self,
        id: u64,
        lease: LeaseId,
        name: &str,
        root: &Path,
        parent: Option<&ActorRef>,
        grant: GrantRecord,
        extra: Vec<TxnOp>,
        extra_compares: Vec<Compare>,
    ) -> Result<ActorRef> {
        let (record, lineage) = actor_record(id, lease, name, root, parent, &grant)?;
        let mut compares: Vec<Compare> = parent
            .map(|p| still(self.layout().actor(p.id.0), p.revision))
            .into_iter()
            .collect();
        compares.extend(extra_compares);
        let mut puts = vec![TxnOp::put(
            self.layout().actor(id),
            to_json(&record)?,
            with_lease(lease),
        )];
        puts.extend(extra);
        // An actor is one admission in process, with its grant fence if it
        // has one: a fenced actor is counted by its fence's grant (or
        // refusal) instead.
        if grant.fence.is_none() {
            puts.push(self.count(Counter::Admitted));
        }
        let txn = Txn::new().when(compares).and_then(puts);
        let done = self
            .txn(txn)
            .await
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))?;
        if !done.succeeded() {
            return Err(Error::UnknownActor {
                actor: parent.map_or_else(String::new, |p| p.id.0.to_string()),
            });
        }
        Ok(ActorRef {
            id: ActorId(id),
            name: name.to_string(),
            lineage: lineage.into(),
            lease,
            root: root.to_path_buf(),
            revision: revision_of(&done),
            read_only: grant.read_only,
            fence: grant.fence.map(Into::into),
            read_roots: grant.read_roots.into(),
            turn: parent.and_then(|p| p.turn.clone()),
        })
    }

    /// Looks up a live actor, wherever it was created.
    pub async fn actor(&self, id: ActorId) -> Result<ActorRef> {
        let unknown = || Error::UnknownActor {
            actor: id.0.to_string(),
        };
        let (record, created): (ActorRecord, i64) =
            self.record(self.layout().actor(id.0), unknown).await?;
        Ok(ActorRef {
            id,
            name: record.name,
            lineage: record.lineage.into(),
            lease: LeaseId(record.lease),
            root: PathBuf::from(record.root),
            revision: created,
            read_only: record.read_only,
            fence: record
                .fence
                .map(|keys| keys.iter().map(FenceKeyRecord::target).collect()),
            read_roots: record.read_roots.iter().map(PathBuf::from).collect(),
            turn: record.turn.map(Into::into),
        })
    }

    /// Sets the turn `actor`'s later writes are recorded under (SPEC §8),
    /// on every server of the session: its record is written again (on its
    /// lease, keeping its creation revision, which commits compare), while
    /// the actor lives. Its children made afterwards start in this turn.
    pub async fn set_turn(&self, actor: &ActorRef, turn: &str) -> Result<()> {
        let key = self.layout().actor(actor.id.0);
        let unknown = || Error::UnknownActor {
            actor: actor.id.0.to_string(),
        };
        // The record is written whole, with a compare on the revision it
        // was read at: two turns set at once through two servers end with
        // one of them, never with a record mixed from both reads.
        for _ in 0..3 {
            let got = self.get(key.clone(), None).await.map_err(unavailable)?;
            let kv = got.kvs().first().ok_or_else(unknown)?;
            if kv.create_revision() != actor.revision {
                return Err(unknown());
            }
            let mut record: ActorRecord =
                serde_json::from_slice(kv.value()).map_err(|_| unknown())?;
            record.turn = Some(turn.to_string());
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::put(
                    key.clone(),
                    to_json(&record)?,
                    with_lease(LeaseId(record.lease)),
                )]);
            let done = self
                .txn(txn)
                .await
                .map_err(|e| etcd_error(e, Some(actor.lease), 0, 0))?;
            if done.succeeded() {
                return Ok(());
            }
        }
        Err(Error::Unavailable {
            reason: "the actor's record kept changing while its turn was set; ask again".into(),
        })
    }

    /// Drops an actor: releases its fences (each atomically) and deletes
    /// its record. Its calls stay until released, its children stay (SPEC
    /// §3).
    pub async fn drop_actor(&self, actor: &ActorRef) -> Result<()> {
        let fences = self.fence_ids(actor).await?;
        self.drop_with_fences(actor, &fences).await
    }

    /// The ids of `actor`'s live fences.
    pub(super) async fn fence_ids(&self, actor: &ActorRef) -> Result<Vec<u64>> {
        let fences = self
            .get(
                self.layout().fences_of(actor.id.0),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(unavailable)?;
        Ok(fences
            .kvs()
            .iter()
            .filter_map(|kv| id_in(kv.key()))
            .collect())
    }

    /// Drops `actor`, whose live fences are `fences` ([`Table::fence_ids`]).
    pub(super) async fn drop_with_fences(&self, actor: &ActorRef, fences: &[u64]) -> Result<()> {
        for &id in fences {
            match self.release(HoldId(id)).await {
                Ok(()) | Err(Error::UnknownHold { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // Its read marks go with it (SPEC §6: marks are the actor's), in
        // the same step as its record, so no file op can store one after.
        let gone = Txn::new().and_then([
            TxnOp::delete(self.layout().actor(actor.id.0), None),
            TxnOp::delete(
                self.layout().marks_of(actor.id.0),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            ),
            TxnOp::delete(
                self.layout().refusals_of(actor.id.0),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            ),
        ]);
        self.txn(gone).await.map(drop).map_err(unavailable)
    }
}
