//! What the version gate (SPEC §6) needs from a session on etcd, so that a
//! file op served by any server sees what every other server saw: each
//! actor's read marks and the last writer through writ of each file.
//!
//! # Implementation details
//!
//! - A mark is `P m/<actor><path>` (the `ReadMark` as JSON, with its view
//!   and the receipts of the appends and edits made with it, SPEC §6) on
//!   the actor's lease: when the lease ends the marks go with it, and
//!   dropping the actor deletes them with its record
//!   ([`Table::drop_actor`]). A write that keeps a receipt stores the mark
//!   again in the transaction that ends it, so a call resent through any
//!   server finds it.
//! - The last writer is `P o<path>` (writer's name, the content hash it
//!   produced, when), on no lease: as in process, who wrote a file outlives
//!   the writer. A delete removes the key (no content, nothing to name).
//! - Both are written only inside the op's own hold, in the transaction
//!   that releases it, and only while the hold and the actor are still
//!   there. A read's shared hold and a write's exclusive hold on one file
//!   conflict, so etcd orders them: the mark's mod revision is below the
//!   writer record's exactly when the read came first. That order, not the
//!   wall clocks of two machines, decides whether a `Stale` names the
//!   writer ("after the mark was taken", never an earlier writer).
//! - The snapshot of a write made outside writ (SPEC §8: `history.snapshot`,
//!   then `history.record` through any server) is `P x/<actor><path>`, on
//!   the actor's lease, between the two steps; its blobs are in the
//!   session's history folder.
//! - Nothing here is in a range an admission reads or compares (`P m/`,
//!   `P x/` and `P w` are beside `P k`), so the gate's keys never make an
//!   admission retry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::actors::ActorRef;
use super::decide::{ClaimRecord, Meta};
use super::holds::{entry_puts, key_records};
use super::layout::Owner;
use super::store::{
    LeaseId, Table, etcd_error, id_in, now_ms, ranges_of, still, to_json, unavailable, with_lease,
};
use crate::core::key::{Key, written_files};
use crate::core::table::HoldId;
use crate::error::{Error, Result};
use crate::files::Known;
use crate::files::gate::ReadMark;
use crate::kinds::{HoldKind, Mode};

/// The value of `P o<path>`.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct WriterRecord {
    /// The writer's name, as `Stale { writer }` names it.
    pub(super) actor: String,
    /// The content hash its write produced.
    after: String,
    /// When it wrote (milliseconds since the epoch), for `Stale`'s age.
    at_ms: u64,
    /// The operation that wrote it (`write`, `append`, `replace`,
    /// `rename`), for the event stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) op: Option<String>,
}

/// The label of a claim, as in process.
const CLAIM_LABEL: &str = "redoing a refused write";

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// The claims among an actor's owner index (`P f/<actor>/`, read as
/// `owned`) on any of the files `norms`.
fn own_claims_on(owned: &[etcd_client::KeyValue], norms: &[PathBuf]) -> OwnClaims {
    OwnClaims {
        claims: owned
            .iter()
            .filter_map(|kv| {
                let id = id_in(kv.key())?;
                let record = serde_json::from_slice::<ClaimRecord>(kv.value()).ok()?;
                let on_these = HoldKind::from(record.meta.kind) == HoldKind::Claim
                    && record
                        .keys
                        .iter()
                        .any(|k| !k.tree && norms.iter().any(|n| n.to_str() == Some(&k.path)));
                on_these.then_some((HoldId(id), record))
            })
            .collect(),
        refusals: Vec::new(),
    }
}

/// A file's path as the etcd keys spell it: UTF-8, like every path there.
fn utf8(norm: &Path) -> Result<()> {
    match norm.to_str() {
        Some(_) => Ok(()),
        None => Err(Error::invalid(norm, "the etcd table stores paths as UTF-8")),
    }
}

/// The claims (SPEC §6) an actor held on the files of a write when the
/// write began ([`Table::gate_state`]), which the write's end ends, and
/// how often its writes there were refused `Stale` since one landed.
#[derive(Debug, Default, Clone)]
pub(crate) struct OwnClaims {
    claims: Vec<(HoldId, ClaimRecord)>,
    refusals: Vec<(PathBuf, u32)>,
}

impl OwnClaims {
    /// The refusals counted on `norm`.
    fn refusals_on(&self, norm: &Path) -> u32 {
        self.refusals
            .iter()
            .find(|(n, _)| n == norm)
            .map_or(0, |(_, count)| *count)
    }
}

/// A refusal count as stored (`P z/…`: decimal digits); anything else is
/// no count.
fn count_of(kv: Option<&etcd_client::KeyValue>) -> u32 {
    kv.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
        .unwrap_or(0)
}

/// What a file op leaves for the gate of later ops, stored as it ends.
#[derive(Debug, Default)]
pub(crate) struct GateRecords {
    /// A claim to give the actor on this file (the op's write was refused
    /// `Stale` on a claiming handle), for this long (SPEC §6).
    pub(crate) claim: Option<(Key, Duration)>,
    /// The actor's claims on the op's written files, which its end ends
    /// (a claim ends at its holder's next write there, applied or refused).
    pub(crate) ended: OwnClaims,
    /// Marks the op made (a read, or a write under
    /// `Config::refresh_mark_on_write`), by folded path.
    pub(crate) marks: Vec<(PathBuf, ReadMark)>,
    /// What the op wrote, by folded path: (writer, content hash), or `None`
    /// where it removed the file.
    pub(crate) writes: Vec<(PathBuf, Option<(String, String)>)>,
    /// The operation that wrote (`write`, `append`, ...), if it wrote.
    pub(crate) op: Option<String>,
}

impl Table {
    /// `actor`'s marks of the files `norms` (folded paths) and their last
    /// writers, read at one revision: for each, the mark, and the writer
    /// only if its write came after the mark in etcd's order. With them,
    /// the actor's claims on those files (its owner index, `P f/<actor>/`).
    pub(crate) async fn gate_state(
        &self,
        actor: &ActorRef,
        norms: &[PathBuf],
    ) -> Result<(Vec<Known>, OwnClaims)> {
        let layout = self.layout();
        let mut reads = Vec::with_capacity(norms.len() * 3 + 1);
        for norm in norms {
            utf8(norm)?;
            reads.push(TxnOp::get(layout.mark(actor.id.0, norm), None));
            reads.push(TxnOp::get(layout.writer(norm), None));
        }
        for norm in norms {
            reads.push(TxnOp::get(layout.refusals(actor.id.0, norm), None));
        }
        reads.push(TxnOp::get(
            layout.fences_of(actor.id.0),
            Some(GetOptions::new().with_prefix()),
        ));
        let read = self.read(reads).await.map_err(unavailable)?;
        let mut ranges = ranges_of(&read);
        let owned = ranges.pop().unwrap_or_default();
        let counts = ranges.split_off(norms.len() * 2);
        let mut claims = own_claims_on(&owned, norms);
        claims.refusals = norms
            .iter()
            .zip(&counts)
            .map(|(norm, kvs)| (norm.clone(), count_of(kvs.first())))
            .collect();
        let now = now_ms();
        let known = ranges
            .chunks(2)
            .map(|pair| {
                let mark = pair.first().and_then(|kvs| kvs.first());
                let writer = pair.get(1).and_then(|kvs| kvs.first());
                // A record that does not decode was not written by a
                // server: it is not a mark (NotRead), nor a writer.
                let Some((mark, mark_rev)) = mark.and_then(|kv| {
                    serde_json::from_slice::<ReadMark>(kv.value())
                        .ok()
                        .map(|m| (m, kv.mod_revision()))
                }) else {
                    return Known::default();
                };
                // Equal revisions: one transaction stored both, the end
                // of this actor's own write (its receipt kept with the
                // mark it was made with, SPEC §6), which came after the
                // read. No other op stores a mark and a writer at once.
                let writer = writer
                    .filter(|kv| kv.mod_revision() >= mark_rev)
                    .and_then(|kv| serde_json::from_slice::<WriterRecord>(kv.value()).ok())
                    .map(|w| {
                        let ago = Duration::from_millis(now.saturating_sub(w.at_ms));
                        (w.actor, w.after, ago)
                    });
                Known {
                    mark: Some(mark),
                    writer,
                }
            })
            .collect();
        Ok((known, claims))
    }

    /// The writes that give `actor` a claim on the file `key` (SPEC §6):
    /// its hold record, owner index and index entry, all on `lease`, a
    /// lease of the claim's own with its TTL, whose end deletes them (and
    /// so wakes the writers watching the file). `until_ms` is when that is.
    ///
    /// `call` is the record of the refused write's call hold, whose owner
    /// the claim is given to.
    fn claim_puts(
        &self,
        call: &Meta,
        key: &Key,
        lease: LeaseId,
        until_ms: u64,
    ) -> Result<Vec<TxnOp>> {
        utf8(&key.norm)?;
        let layout = self.layout();
        let id = self.next_id()?;
        let keys = [(key.clone(), Mode::Exclusive)];
        let meta = Meta {
            owner: call.owner,
            lineage: call.lineage.clone(),
            kind: HoldKind::Claim.into(),
            name: call.name.clone(),
            label: Some(CLAIM_LABEL.into()),
            since_ms: now_ms(),
            priority: 0,
            file_op: false,
            refusals: 0,
        };
        let record = to_json(&ClaimRecord {
            meta: meta.clone(),
            keys: key_records(&keys),
            ticket: None,
            child_of: None,
            taken_over: None,
            until_ms: Some(until_ms),
        })?;
        let mut puts = vec![
            TxnOp::put(layout.hold(id), record.clone(), with_lease(lease)),
            TxnOp::put(layout.fence(call.owner, id), record, with_lease(lease)),
        ];
        puts.extend(entry_puts(layout, &meta, &keys, Owner::Hold(id), lease)?);
        Ok(puts)
    }

    /// Ends a file op of `actor` that ran inside the call hold `hold`:
    /// releases the hold and, in the same transaction and only if the hold
    /// and the actor are both still there, stores `records` (marks on the
    /// actor's lease, writers on none). If either went meanwhile, the hold
    /// is released all the same and nothing is stored: a mark of a dropped
    /// actor, or a writer record made after the hold was lost, would be a
    /// claim the table can no longer back.
    pub(crate) async fn finish_file_op(
        &self,
        actor: &ActorRef,
        hold: HoldId,
        records: GateRecords,
    ) -> Result<()> {
        let layout = self.layout();
        let key = layout.hold(hold.0);
        // A file op's hold is never widened: the revision this table wrote
        // it at is still its record's, and no read is needed first.
        let (record, unchanged) = match self.forget(hold) {
            Some((record, written)) => (
                record,
                Compare::mod_revision(key.clone(), CompareOp::Equal, written),
            ),
            None => {
                let (_, record, created) = self.held(hold).await?;
                (record, still(key, created))
            }
        };
        let deletes = self.release_ops(hold, &record);
        let mut writes = deletes.clone();
        // The actor's claims on the files it wrote end with the write
        // (applied or refused), in the transaction that ends it; a claim
        // this refusal gives replaces them.
        for (claim, claimed) in &records.ended.claims {
            writes.extend(self.release_ops(*claim, claimed));
        }
        // A write that landed forgets its refusals there; one refused
        // counts one more (SPEC §6: the queue for the file's next claim).
        for (norm, _) in &records.writes {
            if records.ended.refusals_on(norm) > 0 {
                writes.push(TxnOp::delete(layout.refusals(actor.id.0, norm), None));
            }
        }
        if let Some((key, ttl)) = &records.claim {
            let count = records.ended.refusals_on(&key.norm).saturating_add(1);
            writes.push(TxnOp::put(
                layout.refusals(actor.id.0, &key.norm),
                count.to_string(),
                with_lease(actor.lease),
            ));
            // Its own lease, so that its TTL is etcd's to keep: no server
            // has to be alive to end it. Without one, no claim is given
            // (the refusal stands; the agent redoes as without claims).
            if let Ok(lease) = self.grant_lease(*ttl).await {
                let until_ms = now_ms().saturating_add(ttl_ms(*ttl));
                writes.extend(self.claim_puts(&record.meta, key, lease, until_ms)?);
            }
        }
        for (norm, mark) in &records.marks {
            utf8(norm)?;
            writes.push(TxnOp::put(
                layout.mark(actor.id.0, norm),
                to_json(mark)?,
                with_lease(actor.lease),
            ));
        }
        for (norm, wrote) in &records.writes {
            utf8(norm)?;
            writes.push(match wrote {
                Some((name, after)) => TxnOp::put(
                    layout.writer(norm),
                    to_json(&WriterRecord {
                        actor: name.clone(),
                        after: after.clone(),
                        at_ms: now_ms(),
                        op: records.op.clone(),
                    })?,
                    None,
                ),
                None => TxnOp::delete(layout.writer(norm), None),
            });
        }
        let ops = writes.len();
        let compares: Vec<Compare> =
            vec![unchanged, still(layout.actor(actor.id.0), actor.revision)];
        // Deleting the hold's keys when they are gone already is harmless
        // (ids are never reused), so the fallback needs no compare.
        let txn = Txn::new().when(compares).and_then(writes).or_else(deletes);
        self.txn(txn)
            .await
            .map(drop)
            .map_err(|e| etcd_error(e, Some(actor.lease), ops, self.inner.options.max_txn_ops))
    }

    /// Releases the call hold `hold` (`release` over the wire), ending in
    /// the same transaction its owner's claims on the files it held
    /// exclusively (a claim ends at its holder's next write there, SPEC
    /// §6) and, with `claim_ttl`, giving the owner a claim on each of them
    /// for that long instead (`release {hold, claim: true}`: the hooks' write
    /// refused `Stale`), counted as a refusal there. A hold of another kind
    /// is released as [`Table::release`] does. `UnknownHold` if it is gone.
    ///
    /// One read more than a plain release (the owner's claims and counts),
    /// two when this table did not grant the hold.
    pub(crate) async fn release_call(
        &self,
        hold: HoldId,
        claim_ttl: Option<Duration>,
    ) -> Result<()> {
        let layout = self.layout();
        let key = layout.hold(hold.0);
        let (record, unchanged) = match self.remembered_record(hold) {
            Some((record, written)) => (
                record,
                Compare::mod_revision(key.clone(), CompareOp::Equal, written),
            ),
            None => {
                let (_, record, created) = self.held(hold).await?;
                (record, still(key.clone(), created))
            }
        };
        let files: Vec<Key> = written_files(&record.keys()).cloned().collect();
        if HoldKind::from(record.meta.kind) != HoldKind::Call || files.is_empty() {
            return self.release(hold).await;
        }
        let owner = record.meta.owner;
        let norms: Vec<PathBuf> = files.iter().map(|k| k.norm.clone()).collect();
        // The hold's own key too: its lease is its owner's, which the
        // refusal counts go on.
        let mut reads = vec![
            TxnOp::get(key.clone(), None),
            TxnOp::get(
                layout.fences_of(owner),
                Some(GetOptions::new().with_prefix()),
            ),
        ];
        for norm in &norms {
            utf8(norm)?;
            reads.push(TxnOp::get(layout.refusals(owner, norm), None));
        }
        // Without that read the hold is released all the same (as
        // `Table::release` does, answers lost included), its claims left
        // to their TTL.
        let Ok(read) = self.read(reads).await else {
            return self.release(hold).await;
        };
        let mut ranges = ranges_of(&read).into_iter();
        let owner_lease = ranges
            .next()
            .and_then(|kvs| kvs.first().map(|kv| LeaseId(kv.lease())));
        let ended = own_claims_on(&ranges.next().unwrap_or_default(), &norms);
        let mut writes = self.release_ops(hold, &record);
        for (claim, claimed) in &ended.claims {
            writes.extend(self.release_ops(*claim, claimed));
        }
        if let (Some(ttl), Some(owner_lease)) = (claim_ttl.filter(|t| !t.is_zero()), owner_lease) {
            for (norm, kvs) in norms.iter().zip(ranges) {
                let count = count_of(kvs.first()).saturating_add(1);
                writes.push(TxnOp::put(
                    layout.refusals(owner, norm),
                    count.to_string(),
                    with_lease(owner_lease),
                ));
            }
            if let Ok(lease) = self.grant_lease(ttl).await {
                let until_ms = now_ms().saturating_add(ttl_ms(ttl));
                for file in &files {
                    writes.extend(self.claim_puts(&record.meta, file, lease, until_ms)?);
                }
            }
        }
        // A claim only for a live owner, on the hold as read.
        let txn = Txn::new()
            .when([
                unchanged,
                Compare::create_revision(layout.actor(owner), CompareOp::NotEqual, 0),
            ])
            .and_then(writes);
        match self.txn(txn).await {
            Ok(done) if done.succeeded() => {
                self.forget(hold);
                Ok(())
            }
            // Changed or gone since, or its owner dropped: released as
            // any hold is, with nothing given.
            Ok(_) => self.release(hold).await,
            // An answer lost may hide a release that landed: gone then.
            Err(_) => match self.release(hold).await {
                Err(Error::UnknownHold { .. }) => Ok(()),
                other => other,
            },
        }
    }

    /// The most refusals of `actor`'s writes on any file `keys` hold
    /// exclusively (SPEC §6), read when a file op's write queues.
    pub(crate) async fn refusals_on(&self, actor: &ActorRef, keys: &[(Key, Mode)]) -> Result<u32> {
        let counted = self.refusal_counts(actor, keys).await?;
        Ok(counted.iter().map(|(_, n)| *n).max().unwrap_or(0))
    }

    /// Counts a write of `actor`'s told `Busy` (its wait for a claimed or
    /// held file ran out) as one more refusal on each file `keys` hold
    /// exclusively (SPEC §6's queue, as `Actor::wait_call` counts it in
    /// process): a writer that only ever waited would otherwise stay
    /// behind every writer refused `Stale` once. The count orders a queue
    /// and nothing else, so one lost to a race with another server is
    /// harmless: no compare on it.
    pub(crate) async fn count_busy_write(
        &self,
        actor: &ActorRef,
        keys: &[(Key, Mode)],
    ) -> Result<()> {
        let counted = self.refusal_counts(actor, keys).await?;
        if counted.is_empty() {
            return Ok(());
        }
        for (norm, _) in &counted {
            utf8(norm)?;
        }
        let layout = self.layout();
        let puts: Vec<TxnOp> = counted
            .iter()
            .map(|(norm, n)| {
                TxnOp::put(
                    layout.refusals(actor.id.0, norm),
                    n.saturating_add(1).to_string(),
                    with_lease(actor.lease),
                )
            })
            .collect();
        // Only while the actor lives: a count on no lease would outlive it.
        let txn = Txn::new()
            .when([still(layout.actor(actor.id.0), actor.revision)])
            .and_then(puts);
        self.txn(txn)
            .await
            .map_err(|e| etcd_error(e, Some(actor.lease), 1, 1))?;
        Ok(())
    }

    /// `actor`'s refusal count on each file `keys` hold exclusively, in
    /// one read (none for keys that hold no file exclusively).
    async fn refusal_counts<'k>(
        &self,
        actor: &ActorRef,
        keys: &'k [(Key, Mode)],
    ) -> Result<Vec<(&'k Path, u32)>> {
        let norms: Vec<&Path> = written_files(keys).map(|k| k.norm.as_path()).collect();
        if norms.is_empty() {
            return Ok(Vec::new());
        }
        let layout = self.layout();
        let reads: Vec<TxnOp> = norms
            .iter()
            .map(|n| TxnOp::get(layout.refusals(actor.id.0, n), None))
            .collect();
        let read = self.read(reads).await.map_err(unavailable)?;
        Ok(norms
            .into_iter()
            .zip(ranges_of(&read))
            .map(|(norm, kvs)| (norm, count_of(kvs.first())))
            .collect())
    }

    /// Keeps the snapshot of `actor`'s outside write to `norm` (encoded by
    /// the history) for the write's record through any server, on the
    /// actor's lease, while the actor lives.
    pub(crate) async fn keep_outside_snapshot(
        &self,
        actor: &ActorRef,
        norm: &Path,
        carried: Vec<u8>,
    ) -> Result<()> {
        utf8(norm)?;
        let layout = self.layout();
        let txn = Txn::new()
            .when([still(layout.actor(actor.id.0), actor.revision)])
            .and_then([TxnOp::put(
                layout.outside_snapshot(actor.id.0, norm),
                carried,
                with_lease(actor.lease),
            )]);
        let done = self
            .txn(txn)
            .await
            .map_err(|e| etcd_error(e, Some(actor.lease), 1, 1))?;
        if done.succeeded() {
            Ok(())
        } else {
            Err(Error::UnknownActor {
                actor: actor.id.0.to_string(),
            })
        }
    }

    /// The snapshot kept for `actor`'s outside write to `norm`, if any.
    pub(crate) async fn outside_snapshot(
        &self,
        actor: &ActorRef,
        norm: &Path,
    ) -> Result<Option<Vec<u8>>> {
        let got = self
            .get(self.layout().outside_snapshot(actor.id.0, norm), None)
            .await
            .map_err(unavailable)?;
        Ok(got.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Forgets the snapshot of `actor`'s outside write to `norm` once the
    /// write is recorded.
    pub(crate) async fn forget_outside_snapshot(
        &self,
        actor: &ActorRef,
        norm: &Path,
    ) -> Result<()> {
        self.delete(self.layout().outside_snapshot(actor.id.0, norm))
            .await
            .map(drop)
            .map_err(unavailable)
    }
}
