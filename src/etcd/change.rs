//! Changing a live hold: widening it (`fence.extend`, `reservation.extend`)
//! and narrowing a fence (`fence.narrow`), each all-or-nothing in one
//! transaction guarded by the hold's record being the one read (SPEC §11).

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::decide::ClaimRecord;
use super::layout::Owner;
use super::{
    ActorRef, Admission, Grant, Replace, Table, Wait, key_records, keys_of, to_json, unavailable,
    with_lease,
};
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
            file_op: record.meta.file_op,
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
        writes.extend(super::entry_puts(
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
        self.until_nothing_is_due(settled).await?;
        Ok(Grant {
            hold,
            revision: super::revision_of(&done),
            kind: record.meta.kind.into(),
            paths: keys.iter().map(|(k, _)| k.path.clone()).collect(),
        })
    }
}

impl Table {
    /// Returns once no waiter is left that nothing blocks any more (each
    /// such one is about to be granted by the table serving it), or at
    /// `deadline`.
    async fn until_nothing_is_due(&self, deadline: tokio::time::Instant) -> Result<()> {
        loop {
            let dump = self.dump().await?;
            if dump.waiters.iter().all(|w| w.cause.is_some()) {
                return Ok(());
            }
            let options = etcd_client::WatchOptions::new()
                .with_prefix()
                .with_start_revision(dump.revision + 1);
            let mut client = self.client();
            let mut stream = client
                .watch(self.layout().waiters(), Some(options))
                .await
                .map_err(unavailable)?;
            loop {
                match tokio::time::timeout_at(deadline, stream.message()).await {
                    Err(_) => return Ok(()),
                    Ok(Ok(Some(m))) if m.canceled() || !m.events().is_empty() => break,
                    Ok(Ok(Some(_))) => {}
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => return Err(unavailable(e)),
                }
            }
        }
    }
}
