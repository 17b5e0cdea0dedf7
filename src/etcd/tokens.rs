//! What a server keeps in etcd besides the table: the session token's hash
//! and one key per actor token (SPEC §16: every server of a session accepts
//! the same tokens). Only sha256 hashes are stored, so reading etcd does not
//! reveal a token.

use std::path::Path;

use etcd_client::{Compare, CompareOp, LeaseTimeToLiveOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::actors::{ActorRef, GrantRecord};
use super::counters::{Counter, Told};
use super::decide::ClaimRecord;
use super::store::{LeaseId, Table, etcd_error, ranges_of, to_json, unavailable, with_lease};
use crate::core::table::{ActorId, HoldId};
use crate::error::{Error, Result};
use crate::kinds::HoldKind;

/// The value of `P t/<hash>`.
#[derive(Debug, Serialize, Deserialize)]
struct TokenRecord {
    actor: u64,
    lease: i64,
}

/// The hex sha256 of a token: what etcd stores instead of it.
pub(crate) fn token_hash(token: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Table {
    /// Stores the session token's hash unless the session has one already
    /// (a compare on its absence, so two servers starting at once agree),
    /// and says whether the session's hash is `hash`.
    pub(crate) async fn claim_session_token(&self, hash: &str) -> Result<bool> {
        self.claim_session_value(self.layout().session_token(), hash)
            .await
    }

    /// Stores the session's slot limits (as text) unless it has some, and
    /// says whether the session's are these: every server of a session
    /// must count against the same limits.
    pub(crate) async fn claim_limits(&self, limits: &str) -> Result<bool> {
        self.claim_session_value(self.layout().limits(), limits)
            .await
    }

    /// Stores the session's history folder (as text, empty for none)
    /// unless it has one, and says whether the session's is this one:
    /// every server of a session records in the same journal, or none does.
    pub(crate) async fn claim_journal(&self, folder: &str) -> Result<bool> {
        self.claim_session_value(self.layout().journal(), folder)
            .await
    }

    /// Registers a server of the session at `authority` (`host:port`) as
    /// one whose MCP agent handles other servers may name, on `lease`.
    pub(crate) async fn register_mcp_server(&self, authority: &str, lease: LeaseId) -> Result<()> {
        let key = self.layout().mcp_server(authority);
        let txn = Txn::new().and_then([TxnOp::put(key, "", with_lease(lease))]);
        self.idempotent_txn(txn).await.map_err(unavailable)?;
        Ok(())
    }

    /// Whether a server at `authority` registered itself and still lives.
    pub(crate) async fn mcp_server_registered(&self, authority: &str) -> Result<bool> {
        let key = self.layout().mcp_server(authority);
        let found = self.get(key, None).await.map_err(unavailable)?;
        Ok(!found.kvs().is_empty())
    }

    pub(crate) async fn claim_session_value(&self, key: Vec<u8>, hash: &str) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), hash, None)])
            .or_else([TxnOp::get(key, None)]);
        let done = self.idempotent_txn(txn).await.map_err(unavailable)?;
        if done.succeeded() {
            return Ok(true);
        }
        let stored = ranges_of(&done)
            .into_iter()
            .flatten()
            .next()
            .map(|kv| kv.value().to_vec());
        Ok(stored.is_some_and(|v| v == hash.as_bytes()))
    }

    /// Creates an actor as [`Table::create_actor`] does, with its token:
    /// `token` makes the token from the new actor's id, and its hash is
    /// stored on the actor's lease in the same transaction as the record.
    /// `grant` is what the servers enforce of the actor's grant (read-only,
    /// its grant fence).
    pub(crate) async fn create_actor_with_token(
        &self,
        lease: LeaseId,
        name: &str,
        root: &Path,
        parent: Option<&ActorRef>,
        grant: GrantRecord,
        token: impl FnOnce(ActorId) -> Result<String>,
    ) -> Result<(ActorRef, String)> {
        self.create_actor_with_token_in(lease, name, root, parent, grant, None, token)
            .await
    }

    /// As [`Table::create_actor_with_token`], for a child counted against
    /// the session's slot limits (SPEC §11; root actors count against
    /// none): the live children (and writable children) are counted at one
    /// revision and the actor is created only if nothing was created or
    /// dropped since, else counted again. `NoSlot` when a limit is reached.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn create_actor_with_token_in(
        &self,
        lease: LeaseId,
        name: &str,
        root: &Path,
        parent: Option<&ActorRef>,
        grant: GrantRecord,
        limits: Option<(Option<usize>, Option<usize>)>,
        token: impl FnOnce(ActorId) -> Result<String>,
    ) -> Result<(ActorRef, String)> {
        let id = self.next_id()?;
        let token = token(ActorId(id))?;
        let put = self.token_put(&token, id, lease)?;
        let Some((max_actors, max_writers)) = limits.filter(|_| parent.is_some()) else {
            let actor = self
                .put_actor(id, lease, name, root, parent, grant, vec![put], Vec::new())
                .await?;
            return Ok((actor, token));
        };
        loop {
            // The live children, and the slots `child_wait`s queued ahead
            // reserve (SPEC §11: `NoSlot` while one is queued on the
            // limit), at one revision; the creation commits only if none
            // of that changed since.
            let (refused, counted) = self
                .slot_for_child(grant.read_only, (max_actors, max_writers))
                .await?;
            if let Some(limit) = refused {
                let max = match limit {
                    crate::SlotLimit::MaxActors => max_actors,
                    crate::SlotLimit::MaxWriters => max_writers,
                };
                let refusal = Error::NoSlot {
                    limit,
                    max: max.unwrap_or(0),
                };
                // Refused for a slot: counted as in process, and told.
                let told = parent.map(|p| Told::of((p.id.0, p.name()), &refusal, None, 0));
                self.bump(Counter::Refused, told.as_ref()).await;
                return Err(refusal);
            }
            let made = self
                .put_actor(
                    id,
                    lease,
                    name,
                    root,
                    parent,
                    grant.clone(),
                    vec![put.clone()],
                    counted,
                )
                .await;
            match (made, parent) {
                (Ok(actor), _) => return Ok((actor, token)),
                // Lost a race with another creation or drop: count again,
                // unless the parent is what went.
                (Err(Error::UnknownActor { .. }), Some(parent))
                    if self.actor(parent.id).await.is_ok() => {}
                (Err(e), _) => return Err(e),
            }
        }
    }

    /// The key of an actor's token (its hash) naming the actor and its
    /// lease, on that lease.
    pub(crate) fn token_put(&self, token: &str, id: u64, lease: LeaseId) -> Result<TxnOp> {
        let record = TokenRecord {
            actor: id,
            lease: lease.0,
        };
        Ok(TxnOp::put(
            self.layout().token(&token_hash(token)),
            to_json(&record)?,
            with_lease(lease),
        ))
    }

    /// The actor and lease of a token that names actor `id`, if the token
    /// is known and the actor still live (one read of both keys).
    pub(crate) async fn token_owner(
        &self,
        hash: &str,
        id: ActorId,
    ) -> Result<Option<(ActorId, LeaseId)>> {
        let layout = self.layout();
        let read = vec![
            TxnOp::get(layout.token(hash), None),
            TxnOp::get(layout.actor(id.0), None),
        ];
        let done = self.read(read).await.map_err(unavailable)?;
        let mut ranges = ranges_of(&done).into_iter();
        let (Some(token), Some(actor)) = (ranges.next(), ranges.next()) else {
            return Ok(None);
        };
        let (Some(token), false) = (token.first(), actor.is_empty()) else {
            return Ok(None);
        };
        match serde_json::from_slice::<TokenRecord>(token.value()) {
            Ok(record) if record.actor == id.0 => Ok(Some((id, LeaseId(record.lease)))),
            _ => Ok(None),
        }
    }

    /// The lineage (root first) of a live hold's owner, and its kind. A
    /// file op's own hold is `UnknownHold`: the wire reaches only holds it
    /// handed out, as in process.
    pub(crate) async fn hold_lineage(&self, hold: HoldId) -> Result<(Vec<u64>, HoldKind)> {
        let unknown = || Error::UnknownHold {
            hold: hold.0.to_string(),
        };
        // An owner's lineage and a hold's kind never change: what this
        // table granted it need not read again.
        let meta = match self.remembered(hold) {
            Some(meta) => meta,
            None => {
                let (record, _): (ClaimRecord, i64) =
                    self.record(self.layout().hold(hold.0), unknown).await?;
                record.meta
            }
        };
        if meta.file_op {
            return Err(unknown());
        }
        Ok((meta.lineage, meta.kind.into()))
    }

    /// How many actors and holds are attached to `lease` (what revoking it
    /// drops). `UnknownLease` if etcd does not know it.
    pub(crate) async fn lease_contents(&self, lease: LeaseId) -> Result<(usize, usize)> {
        let answer = self
            .resend(|mut client| async move {
                client
                    .lease_time_to_live(lease.0, Some(LeaseTimeToLiveOptions::new().with_keys()))
                    .await
            })
            .await
            .map_err(|e| etcd_error(e, Some(lease), 0, 0))?;
        // etcd answers a lease it does not know with a TTL of -1.
        if answer.ttl() < 0 {
            return Err(Error::UnknownLease {
                lease: lease.to_string(),
            });
        }
        let (actors, holds) = (self.layout().actors(), self.layout().holds());
        let count = |prefix: &[u8]| {
            answer
                .keys()
                .iter()
                .filter(|k| k.starts_with(prefix))
                .count()
        };
        Ok((count(&actors), count(&holds)))
    }

    /// Drops an actor as [`Table::drop_actor`] does, first leaving a mark
    /// (on its lease, with its lineage) for each of its fences: releasing
    /// such a fence later is harmless, as releasing a `Fence` guard of a
    /// dropped actor is in process (SPEC §3).
    pub(crate) async fn drop_actor_marking(&self, actor: &ActorRef) -> Result<()> {
        let fences = self.fence_ids(actor).await?;
        let lineage = to_json(&actor.lineage.to_vec())?;
        let marks: Vec<TxnOp> = fences
            .iter()
            .map(|&id| {
                TxnOp::put(
                    self.layout().dropped(id),
                    lineage.clone(),
                    with_lease(actor.lease),
                )
            })
            .collect();
        if !marks.is_empty() {
            self.txn(Txn::new().and_then(marks))
                .await
                .map_err(|e| etcd_error(e, Some(actor.lease), 0, 0))?;
        }
        self.drop_with_fences(actor, &fences).await
    }

    /// The lineage of the owner of a fence released by its owner's drop,
    /// if `hold` is one.
    pub(crate) async fn drop_mark(&self, hold: HoldId) -> Result<Option<Vec<u64>>> {
        let got = self
            .get(self.layout().dropped(hold.0), None)
            .await
            .map_err(unavailable)?;
        Ok(got
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice(kv.value()).ok()))
    }

    /// Removes the mark: a dropped fence is handed back once.
    pub(crate) async fn clear_drop_mark(&self, hold: HoldId) -> Result<()> {
        self.delete(self.layout().dropped(hold.0))
            .await
            .map(drop)
            .map_err(unavailable)
    }
}
