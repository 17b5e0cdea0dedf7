//! Asking again by ticket through any table: a grant whose answer was
//! lost is answered as it was, and a wait whose table went away (or whose
//! connection broke) goes on here, in its place in the queue.
//!
//! A waiting request's keys hang on the waiter lease of the table serving
//! it, and its place among equal priorities is the revision its keys were
//! created at. Taking a wait over puts the same keys again, on this
//! table's waiter lease, in one transaction that compares nothing changed
//! them: a put keeps a key's create revision, so the place is kept, and
//! the table that served the wait before finds its record on another
//! lease at its next read and ends its side of the wait without removing
//! anything (`Round::TakenOver`).

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use tokio::sync::oneshot;

use crate::core::table::HoldId;
use crate::error::{Error, Result};

use super::admission::{ABANDONED, Admission, Grant, Wait};
use super::decide::ClaimRecord;
use super::holds::{entry_puts, key_records};
use super::layout::Owner;
use super::pipeline::Queued;
use super::store::{
    Table, id_in, prefix_get, ranges_of, revision_of, still, to_json, unavailable, with_lease,
};

/// How many times a takeover that raced (the wait was granted, removed or
/// taken over meanwhile) is looked at again before the request is asked
/// afresh.
const TAKEOVER_ROUNDS: usize = 3;

/// Where a ticket's request stands in etcd.
enum Found {
    /// Granted as this hold.
    Granted(u64),
    /// Given up by its caller.
    Abandoned,
    /// Waiting as this waiter record.
    Waiting(u64, Box<(KeyValue, ClaimRecord)>),
    /// Not in etcd: never arrived, or its wait ended.
    Nowhere,
}

impl Table {
    /// [`AdmitRequest::resume`](super::AdmitRequest::resume).
    pub(super) async fn resume(&self, admission: Admission) -> Result<Grant> {
        let Some(hash) = admission.ticket.clone() else {
            return Err(Error::Protocol {
                kind: crate::ProtocolError::InvalidParams,
                detail: "resume names the request by its ticket: give the ticket it was asked with"
                    .into(),
            });
        };
        // In the admission's own task: a wait taken over is that task's
        // to serve or remove, even if the caller leaves right after.
        self.answered_by(admission, |table, admission, answer| async move {
            table.resume_task(admission, hash, answer).await;
        })
        .await
    }

    async fn resume_task(
        self,
        mut admission: Admission,
        hash: String,
        answer: oneshot::Sender<Result<Grant>>,
    ) {
        for _ in 0..TAKEOVER_ROUNDS {
            if answer.is_closed() {
                return;
            }
            let found = match self.find(&admission, &hash).await {
                Ok(found) => found,
                Err(e) => {
                    let _ = answer.send(Err(e));
                    return;
                }
            };
            let (id, kv, record) = match found {
                // A caller who left meanwhile still holds it, through its
                // actor: it resumes again, or gives the ticket up.
                Found::Granted(hold) => {
                    let _ = answer.send(self.granted_as(&admission, hold).await);
                    return;
                }
                Found::Abandoned => {
                    let _ = answer.send(Err(Error::Unavailable {
                        reason: "the caller gave this request up".into(),
                    }));
                    return;
                }
                Found::Nowhere => break,
                Found::Waiting(id, found) => {
                    let (kv, record) = *found;
                    (id, kv, record)
                }
            };
            if let Err(e) = same_request(&admission, &record) {
                let _ = answer.send(Err(e));
                return;
            }
            match self.take_over(&admission, id, &kv, &record).await {
                Err(e) => {
                    let _ = answer.send(Err(e));
                    return;
                }
                // Granted, removed or taken over since the read.
                Ok(None) => continue,
                Ok(Some(written)) => {
                    // As it was first asked: its age and its place.
                    admission.priority = record.meta.priority;
                    admission.label = record.meta.label.clone();
                    admission.since_ms = record.meta.since_ms;
                    let queued = Queued {
                        waiter: id,
                        place: kv.create_revision(),
                        written,
                    };
                    return self.drive(admission, Some(queued), answer).await;
                }
            }
        }
        self.drive(admission, None, answer).await;
    }

    /// The ticket's answer, else its waiter record, at one revision.
    async fn find(&self, admission: &Admission, hash: &str) -> Result<Found> {
        let layout = self.layout();
        let owner = admission.actor.id.0;
        let read = self
            .read(vec![
                TxnOp::get(layout.ticket(owner, hash), None),
                prefix_get(&layout.waiters()),
            ])
            .await
            .map_err(unavailable)?;
        let mut ranges = ranges_of(&read).into_iter();
        let (answer, waiters) = (ranges.next(), ranges.next());
        if let Some(kv) = answer.as_ref().and_then(|a| a.first()) {
            if kv.value() == ABANDONED.as_bytes() {
                return Ok(Found::Abandoned);
            }
            let hold = std::str::from_utf8(kv.value())
                .ok()
                .and_then(|hex| u64::from_str_radix(hex, 16).ok());
            return Ok(hold.map_or(Found::Nowhere, Found::Granted));
        }
        for kv in waiters.into_iter().flatten() {
            let (Some(id), Ok(record)) = (
                id_in(kv.key()),
                serde_json::from_slice::<ClaimRecord>(kv.value()),
            ) else {
                continue;
            };
            if record.meta.owner == owner
                && record.ticket.as_deref() == Some(hash)
                && record.child_of.is_none()
            {
                return Ok(Found::Waiting(id, Box::new((kv, record))));
            }
        }
        Ok(Found::Nowhere)
    }

    /// The grant `hold` made, as its first answer said it.
    async fn granted_as(&self, admission: &Admission, hold: u64) -> Result<Grant> {
        let (record, revision) = self
            .record::<ClaimRecord>(self.layout().hold(hold), || Error::UnknownHold {
                hold: hold.to_string(),
            })
            .await?;
        if record.meta.owner != admission.actor.id.0 {
            return Err(Error::UnknownHold {
                hold: hold.to_string(),
            });
        }
        Ok(Grant {
            hold: HoldId(hold),
            revision,
            kind: record.meta.kind.into(),
            paths: record.keys().into_iter().map(|(k, _)| k.path).collect(),
        })
    }

    /// Moves waiter `id` (its record `kv`) onto this table's waiter lease,
    /// keeping its keys' create revisions: the revision it wrote them at,
    /// or `None` if the record changed since it was read.
    async fn take_over(
        &self,
        admission: &Admission,
        id: u64,
        kv: &KeyValue,
        record: &ClaimRecord,
    ) -> Result<Option<i64>> {
        let layout = self.layout();
        let edges = self
            .get(layout.edges(id), None)
            .await
            .map_err(unavailable)?;
        // The place a reordering moved it to goes with it.
        let moved = self
            .get(layout.moved(id), None)
            .await
            .map_err(unavailable)?;
        let lease = self.waiter_lease().await?;
        // Its place keeps its tier of refusals (SPEC §6).
        admission
            .refusals
            .store(record.meta.refusals, std::sync::atomic::Ordering::Relaxed);
        let mut taken = record.clone();
        taken.taken_over = Some(self.next_id()?);
        let value = to_json(&taken)?;
        let mut writes = vec![TxnOp::put(
            layout.waiter(id),
            value.clone(),
            with_lease(lease),
        )];
        if let Some(edges) = edges.kvs().first() {
            writes.push(TxnOp::put(
                layout.edges(id),
                edges.value().to_vec(),
                with_lease(lease),
            ));
        }
        if let Some(moved) = moved.kvs().first() {
            writes.push(TxnOp::put(
                layout.moved(id),
                moved.value().to_vec(),
                with_lease(lease),
            ));
        }
        writes.extend(entry_puts(
            layout,
            &record.meta,
            &record.keys(),
            Owner::Waiter(id),
            lease,
        )?);
        let actor = &admission.actor;
        let txn = Txn::new()
            .when([
                Compare::mod_revision(layout.waiter(id), CompareOp::Equal, kv.mod_revision()),
                still(layout.actor(actor.id.0), actor.revision),
            ])
            .and_then(writes);
        let ops = (admission.ops_needed(), self.inner.options.max_txn_ops);
        let done = self
            .queue_txn(txn, lease, (id, value), &record.keys(), ops)
            .await?;
        Ok(done.succeeded().then(|| revision_of(&done)))
    }
}

/// Whether a resume asks for the request the waiter record is: the same
/// targets, the same kind, and still waiting (a try-only resume of a wait
/// would end it at the first look, losing its place).
fn same_request(admission: &Admission, record: &ClaimRecord) -> Result<()> {
    let refused = |detail: &str| {
        Err(Error::Protocol {
            kind: crate::ProtocolError::InvalidParams,
            detail: detail.to_string(),
        })
    };
    if record.keys != key_records(&admission.keys) || record.meta.kind != admission.kind.into() {
        return refused(
            "the ticket names a request for other targets; resume asks for the same ones",
        );
    }
    if admission.wait == Wait::Never {
        return refused(
            "the ticket's request is waiting: resume it waiting (wait: true), with what is left of its timeout",
        );
    }
    Ok(())
}
