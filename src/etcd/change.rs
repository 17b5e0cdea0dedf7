//! Changing a live hold: widening it (`fence.extend`, `reservation.extend`)
//! and narrowing a fence (`fence.narrow`), each all-or-nothing in one
//! transaction guarded by the hold's record being the one read (SPEC §11).

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::actors::ActorRef;
use super::admission::{Admission, Grant, Replace, Wait, keys_of};
use super::decide::ClaimRecord;
use super::holds::{entry_puts, key_records};
use super::layout::Owner;
use super::store::{Table, revision_of, to_json, unavailable, with_lease};
use crate::Target;
use crate::core::key::{Key, merge};
use crate::core::scope;
use crate::core::table::{ActorId, Claim, HoldId};
use crate::error::{Error, Result};
use crate::kinds::HoldKind;

impl Table {
    /// A live hold of `actor`: its record, and the record's mod revision.
    async fn hold_of(&self, actor: &ActorRef, hold: HoldId) -> Result<(ClaimRecord, i64)> {
        let unknown = || Error::UnknownHold {
            hold: hold.0.to_string(),
        };
        let got = self
            .get(self.layout().hold(hold.0), None)
            .await
            .map_err(unavailable)?;
        let kv = got.kvs().first().ok_or_else(unknown)?;
        let record: ClaimRecord = serde_json::from_slice(kv.value()).map_err(|_| unknown())?;
        if record.meta.owner != actor.id.0 {
            return Err(unknown());
        }
        Ok((record, kv.mod_revision()))
    }

    /// Widens a live hold of `actor` by `targets`, try-only and
    /// all-or-nothing: the added keys are judged as a request of the hold's
    /// kind at its priority (a waiter on the part already held does not
    /// refuse it; the hold does not conflict with itself), and the hold's
    /// record and entries are replaced in one transaction. `Busy` leaves
    /// the hold as it was.
    pub(crate) async fn extend(
        &self,
        actor: &ActorRef,
        hold: HoldId,
        targets: &[Target],
    ) -> Result<Grant> {
        let (record, revision) = self.hold_of(actor, hold).await?;
        let old = record.keys();
        let added = scope::uncovered(&old, keys_of(actor, targets, self.case())?);
        if added.is_empty() {
            // Nothing to add: as in process, granted with nothing changed,
            // whoever waits for what the hold already has.
            return Ok(Grant {
                hold,
                revision,
                kind: record.meta.kind.into(),
                paths: old.iter().map(|(k, _)| k.path.clone()).collect(),
            });
        }
        let keys = merge(old.iter().cloned().chain(added.iter().cloned()).collect());
        let kind: HoldKind = record.meta.kind.into();
        let claim = Claim {
            owner: actor.id,
            lineage: actor.lineage.iter().map(|&a| ActorId(a)).collect(),
            kind,
            keys: added.clone(),
        };
        let ranges = self.layout().conflict_ranges(added.iter().map(|(k, _)| k));
        let admission = Admission {
            actor: actor.clone(),
            kind,
            keys,
            claim,
            ranges,
            priority: record.meta.priority,
            label: record.meta.label.clone(),
            wait: Wait::Never,
            hold: hold.0,
            since_ms: record.meta.since_ms,
            replaces: Some(Replace { revision, old }),
            after_timeout: false,
            file_op: record.meta.file_op,
            refusals: std::sync::atomic::AtomicU32::new(record.meta.refusals),
            ticket: record.ticket.clone(),
        };
        self.spawn_admission(admission).await
    }

    /// Narrows a live fence of `actor` to `targets`, which must lie inside
    /// it with modes no stronger (`OutsideFence` otherwise, nothing
    /// changed); the part given up is released in the same transaction.
    pub(crate) async fn narrow(
        &self,
        actor: &ActorRef,
        hold: HoldId,
        targets: &[Target],
    ) -> Result<Grant> {
        let (record, revision) = self.hold_of(actor, hold).await?;
        let old = record.keys();
        let keys = keys_of(actor, targets, self.case())?;
        scope::check_narrow(&actor.name, &old, &keys)?;
        let layout = self.layout();
        let mut narrowed = record.clone();
        narrowed.keys = key_records(&keys);
        let value = to_json(&narrowed)?;
        let lease = with_lease(actor.lease);
        let mut writes = vec![TxnOp::put(
            layout.hold(hold.0),
            value.clone(),
            lease.clone(),
        )];
        if HoldKind::from(record.meta.kind) == HoldKind::Fence {
            writes.push(TxnOp::put(
                layout.fence(actor.id.0, hold.0),
                value,
                lease.clone(),
            ));
        }
        let same = |a: &Key, b: &Key| a.norm == b.norm && a.tree == b.tree;
        for (key, _) in &old {
            if !keys.iter().any(|(k, _)| same(k, key)) {
                writes.push(TxnOp::delete(layout.entry(key, Owner::Hold(hold.0)), None));
            }
        }
        writes.extend(entry_puts(
            layout,
            &narrowed.meta,
            &keys,
            Owner::Hold(hold.0),
            actor.lease,
        )?);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                layout.hold(hold.0),
                CompareOp::Equal,
                revision,
            )])
            .and_then(writes);
        let done = self.txn(txn).await.map_err(unavailable)?;
        if !done.succeeded() {
            return Err(Error::Unavailable {
                reason: "the fence changed while it was being narrowed; ask again".into(),
            });
        }
        // In process the narrow grants the waiters it lets through before
        // it returns (SPEC §11); here their own tables grant them, so the
        // narrow waits for that, within one deadlock-check period (a
        // waiter whose table died must not stall it).
        let settled = tokio::time::Instant::now() + self.inner.options.deadlock_check;
        self.until_nothing_is_due(settled).await;
        Ok(Grant {
            hold,
            revision: revision_of(&done),
            kind: record.meta.kind.into(),
            paths: keys.iter().map(|(k, _)| k.path.clone()).collect(),
        })
    }
}

impl Table {
    /// Returns once no waiter is left that nothing blocks any more (each
    /// such one is about to be granted by the table serving it), or at
    /// `deadline`. Best effort: the narrow has committed, so its answer
    /// says so; if etcd does not answer this wait (a read or a watch that
    /// fails, or takes past the deadline), it ends early.
    async fn until_nothing_is_due(&self, deadline: tokio::time::Instant) {
        let settling = async {
            loop {
                let dump = self.dump().await.ok()?;
                if dump.table.waiters.iter().all(|w| w.cause.is_some()) {
                    return Some(());
                }
                let options = etcd_client::WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(dump.revision + 1);
                let waiters = self.layout().waiters();
                let mut stream = self
                    .call_once(
                        |mut client| async move { client.watch(waiters, Some(options)).await },
                    )
                    .await
                    .ok()?;
                loop {
                    match stream.message().await.ok()? {
                        Some(m) if m.canceled() || !m.events().is_empty() => break,
                        Some(_) => {}
                        None => break,
                    }
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, settling).await;
    }
}
