//! Live holds: reading one back and releasing it in one transaction.
//!
//! A table remembers the holds it granted (their records, and the
//! revision each was last written at), so that the release of one is a
//! single transaction: the deletions, guarded by the record still being
//! the one written then. A hold widened or narrowed since, or released
//! elsewhere, fails that compare, and is released by reading it first.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use crate::core::key::Key;
use crate::core::table::HoldId;
use crate::error::{Error, Result};
use crate::kinds::{HoldKind, Mode};

use super::decide::{ClaimRecord, EntryValue, KeyRecord, Meta};
use super::layout::{Layout, Owner};
use super::store::{LeaseId, Table, ranges_of, still, timed_out, to_json, unavailable, with_lease};

/// How many granted holds a table remembers; past it, it forgets one (a
/// release of a forgotten hold reads it first, as one granted elsewhere).
const REMEMBERED: usize = 4096;

impl Table {
    /// A live hold's record key, its record, and the revision it was
    /// created at (what a release compares on). `UnknownHold` if it is gone.
    pub(crate) async fn held(&self, hold: HoldId) -> Result<(Vec<u8>, ClaimRecord, i64)> {
        let key = self.layout().hold(hold.0);
        let unknown = || Error::UnknownHold {
            hold: hold.0.to_string(),
        };
        let (record, created) = self.record(key.clone(), unknown).await?;
        Ok((key, record, created))
    }

    /// Remembers a hold this table granted, written at `revision`.
    pub(super) fn remember(&self, hold: HoldId, record: ClaimRecord, revision: i64) {
        let mut granted = self.inner.granted.lock();
        if granted.len() >= REMEMBERED {
            if let Some(&any) = granted.keys().next() {
                granted.remove(&any);
            }
        }
        granted.insert(hold.0, (record, revision));
    }

    /// The record of a hold this table granted, if it remembers it.
    pub(super) fn remembered(&self, hold: HoldId) -> Option<Meta> {
        self.inner
            .granted
            .lock()
            .get(&hold.0)
            .map(|(r, _)| r.meta.clone())
    }

    /// The record of a hold this table granted and the revision it was
    /// last written at, if it remembers it (it stays remembered).
    pub(super) fn remembered_record(&self, hold: HoldId) -> Option<(ClaimRecord, i64)> {
        self.inner.granted.lock().get(&hold.0).cloned()
    }

    /// Forgets a hold this table granted: its record and the revision it
    /// was written at, if it remembered it.
    pub(super) fn forget(&self, hold: HoldId) -> Option<(ClaimRecord, i64)> {
        self.inner.granted.lock().remove(&hold.0)
    }

    /// Releases a hold: its record, index entries and owner index go in
    /// one transaction. `UnknownHold` if it is already gone.
    pub async fn release(&self, hold: HoldId) -> Result<()> {
        let known = self.forget(hold);
        if let Some((record, written)) = known {
            let key = self.layout().hold(hold.0);
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    written,
                )])
                .and_then(self.release_ops(hold, &record))
                .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
            // A release whose answer timed out may have landed: it is sent
            // again, and a hold found gone then was released by it (or by
            // its lease, or its owner's drop: gone either way).
            let mut tries = 1;
            let done = loop {
                match self.txn(txn.clone()).await {
                    Err(e) if tries < 3 && timed_out(&e) => tries += 1,
                    answer => break answer.map_err(unavailable)?,
                }
            };
            if done.succeeded() {
                return Ok(());
            }
            if ranges_of(&done).iter().all(Vec::is_empty) {
                return if tries > 1 {
                    Ok(())
                } else {
                    Err(Error::UnknownHold {
                        hold: hold.0.to_string(),
                    })
                };
            }
            // Changed since this table wrote it: read it, as below.
        }
        let (key, record, created) = self.held(hold).await?;
        let unknown = || Error::UnknownHold {
            hold: hold.0.to_string(),
        };
        let deletes = self.release_ops(hold, &record);
        let txn = Txn::new().when([still(key, created)]).and_then(deletes);
        let done = self.txn(txn).await.map_err(unavailable)?;
        if done.succeeded() {
            Ok(())
        } else {
            Err(unknown())
        }
    }

    /// The deletions that release `hold`, whose record is `record`: the
    /// record, its owner index (a fence's or a claim's) and one entry per key.
    pub(super) fn release_ops(&self, hold: HoldId, record: &ClaimRecord) -> Vec<TxnOp> {
        let layout = self.layout();
        let mut deletes = vec![TxnOp::delete(layout.hold(hold.0), None)];
        // A claim is in its owner's index too (SPEC §6: ended with it).
        if HoldKind::from(record.meta.kind).outlives_call() {
            deletes.push(TxnOp::delete(layout.fence(record.meta.owner, hold.0), None));
        }
        for (k, _) in record.keys() {
            deletes.push(TxnOp::delete(layout.entry(&k, Owner::Hold(hold.0)), None));
        }
        if let Some(hash) = &record.ticket {
            deletes.push(TxnOp::delete(layout.ticket(record.meta.owner, hash), None));
        }
        deletes
    }
}

/// The keys of a hold or waiter as its record spells them.
pub(super) fn key_records(keys: &[(Key, Mode)]) -> Vec<KeyRecord> {
    keys.iter()
        .map(|(k, m)| KeyRecord {
            path: k.norm.to_string_lossy().into_owned(),
            spelled: (k.path != k.norm).then(|| k.path.to_string_lossy().into_owned()),
            tree: k.tree,
            mode: (*m).into(),
        })
        .collect()
}

/// The index entries of `keys` of one hold or waiter (`owner`), each
/// repeating its `meta` so that one read of the index decides, on `lease`.
pub(super) fn entry_puts(
    layout: &Layout,
    meta: &Meta,
    keys: &[(Key, Mode)],
    owner: Owner,
    lease: LeaseId,
) -> Result<Vec<TxnOp>> {
    keys.iter()
        .map(|(key, mode)| {
            let value = EntryValue {
                meta: meta.clone(),
                mode: (*mode).into(),
            };
            Ok(TxnOp::put(
                layout.entry(key, owner),
                to_json(&value)?,
                with_lease(lease),
            ))
        })
        .collect()
}
