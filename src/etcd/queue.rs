//! Waiting: the lease a table's waiters hang on, their edge records, leaving
//! the queue, and watching the ranges that block a waiter.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, WatchOptions};
use tokio::sync::oneshot;

use crate::core::key::Key;
use crate::error::{Error, Result};
use crate::kinds::Mode;

use super::counters::{Counter, Told};
use super::deadlock::Edges;
use super::layout::Owner;
use super::store::LeaseId;
use super::store::{Table, etcd_error, to_json, unavailable, with_lease};

/// Why a wait ended.
pub(super) enum Woken {
    Changed,
    Cancelled,
    TimedOut,
}

/// How a wait for a change ended.
pub(super) trait WaitEnded {
    /// The error that ends the request (`None`: read again): cancelled,
    /// timed out on `keys` after waiting since `started`, or etcd's.
    fn ended(self, keys: &[(Key, Mode)], started: tokio::time::Instant) -> Option<Error>;
}

impl WaitEnded for Result<Woken> {
    fn ended(self, keys: &[(Key, Mode)], started: tokio::time::Instant) -> Option<Error> {
        match self {
            Ok(Woken::Changed) => None,
            Ok(Woken::Cancelled) => Some(Error::Unavailable {
                reason: "cancelled".into(),
            }),
            Ok(Woken::TimedOut) => Some(Error::Timeout {
                paths: keys.iter().map(|(k, _)| k.path.clone()).collect(),
                waited: started.elapsed(),
            }),
            Err(e) => Some(e),
        }
    }
}

/// How a task knows the waiter record it may remove is still its own.
#[derive(Debug, Clone)]
pub(super) enum Mine {
    /// The task wrote it at this revision.
    Written(i64),
    /// The task's write of it, whose answer was lost, would make this its
    /// value, on this table's waiter lease (every write of a record, the
    /// first and each takeover's, is a value of its own).
    Value(Vec<u8>),
}

impl Table {
    /// The lease of this table's waiting requests: granted on first use
    /// and renewed every third of its TTL by a task that ends with the
    /// table (then etcd ends the lease, and the queue places with it).
    pub(super) async fn waiter_lease(&self) -> Result<LeaseId> {
        let mut slot = self.inner.waiter_lease.lock().await;
        if let Some(lease) = *slot {
            return Ok(lease);
        }
        let ttl = self.inner.options.waiter_ttl;
        let lease = self.grant_lease(ttl).await?;
        *slot = Some(lease);
        let table = Arc::downgrade(&self.inner);
        let period = (ttl / 3).max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = table.upgrade() else { return };
                let table = Table { inner };
                if let Err(Error::UnknownLease { .. }) = table.keep_alive(lease).await {
                    // Lapsed (etcd was out for longer than the TTL): the
                    // next request to queue gets a new one.
                    let mut slot = table.inner.waiter_lease.lock().await;
                    if *slot == Some(lease) {
                        *slot = None;
                    }
                    return;
                }
            }
        });
        Ok(lease)
    }

    pub(super) async fn put_edges(&self, waiter: u64, edges: &Edges) -> Result<()> {
        let lease = self.waiter_lease().await?;
        let (key, value) = (self.layout().edges(waiter), to_json(edges)?);
        self.resend(|mut client| {
            let (key, value) = (key.clone(), value.clone());
            async move { client.put(key, value, with_lease(lease)).await }
        })
        .await
        .map(drop)
        .map_err(|e| match etcd_error(e, Some(lease), 0, 0) {
            // The lease is this server's, not the client's: its lapse ends
            // the wait (the next one gets a new lease), and says nothing
            // of the client's own lease.
            Error::UnknownLease { .. } => Error::Unavailable {
                reason: "this server's queue lease in etcd lapsed; ask again".into(),
            },
            other => other,
        })
    }

    /// A wait that ended without a grant leaves the queue: its record, if
    /// it queued (as `queued`), removed with the count of why it ended,
    /// asked again until etcd answers (its keys are on this server's
    /// lease, which outlives an etcd restart: a record left behind would
    /// block its paths for as long as this server runs); else the count
    /// alone.
    pub(super) async fn leave_queue(
        &self,
        queued: Option<(u64, Mine)>,
        keys: &[(Key, Mode)],
        counted: Option<(Counter, Told)>,
    ) {
        let Some((id, mine)) = queued else {
            if let Some((counter, told)) = counted {
                self.bump(counter, Some(&told)).await;
            }
            return;
        };
        let keys = keys.to_vec();
        self.until_done(move |table| {
            let (keys, mine, counted) = (keys.clone(), mine.clone(), counted.clone());
            async move { table.dequeue(id, mine, &keys, counted).await }
        })
        .await;
    }

    /// Deletes a waiter's record, entries and edges in one transaction,
    /// with the count of why it left the queue. Idempotent: a waiter
    /// already gone is not counted again. Only while the record is as this
    /// task wrote it ([`Mine`]): once a resume took the wait over
    /// (`Table::resume`), the wait and its keys are another task's.
    pub(super) async fn dequeue(
        &self,
        id: u64,
        mine: Mine,
        keys: &[(Key, Mode)],
        counted: Option<(Counter, Told)>,
    ) -> Result<()> {
        let layout = self.layout();
        let mut deletes = vec![
            TxnOp::delete(layout.waiter(id), None),
            TxnOp::delete(layout.edges(id), None),
            TxnOp::delete(layout.moved(id), None),
            // A `child_wait`'s mark, if it is one (nothing otherwise).
            TxnOp::delete(layout.slot_waiter(id), None),
        ];
        deletes.extend(
            counted
                .as_ref()
                .map(|(counter, told)| self.count_told(*counter, Some(told))),
        );
        deletes.extend(
            keys.iter()
                .map(|(key, _)| TxnOp::delete(layout.entry(key, Owner::Waiter(id)), None)),
        );
        let present = match mine {
            Mine::Written(at) => vec![Compare::mod_revision(
                layout.waiter(id),
                CompareOp::Equal,
                at,
            )],
            Mine::Value(value) => match *self.inner.waiter_lease.lock().await {
                Some(lease) => vec![
                    Compare::value(layout.waiter(id), CompareOp::Equal, value),
                    Compare::lease(layout.waiter(id), CompareOp::Equal, lease.0),
                ],
                // With no lease, none of this table's waiter records is left.
                None => return Ok(()),
            },
        };
        self.txn(Txn::new().when(present).and_then(deletes))
            .await
            .map(drop)
            .map_err(unavailable)
    }

    /// Waits until something changes in `ranges` after `revision`, the
    /// deadline passes, the caller goes away, or a `deadlock_check` period
    /// ends (a re-read then catches whatever no event announced).
    pub(super) async fn wait_for_change<T>(
        &self,
        ranges: &[Vec<u8>],
        revision: i64,
        deadline: Option<tokio::time::Instant>,
        answer: &mut oneshot::Sender<Result<T>>,
    ) -> Result<Woken> {
        let options = || {
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision + 1),
            )
        };
        let Some((first, rest)) = ranges.split_first() else {
            return Ok(Woken::Changed);
        };
        let created = self
            .resend(|mut client| {
                let (first, options) = (first.clone(), options());
                async move { client.watch(first, options).await }
            })
            .await;
        let mut stream = match created {
            Ok(stream) => stream,
            Err(e) => return watch_broke(e, deadline, answer).await,
        };
        for range in rest {
            if let Err(e) = stream.watch(range.clone(), options()).await {
                return watch_broke(e, deadline, answer).await;
            }
        }
        let period = tokio::time::sleep(self.inner.options.deadlock_check);
        tokio::pin!(period);
        let until = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until);
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(m)) if m.canceled() || !m.events().is_empty() => return Ok(Woken::Changed),
                    Ok(Some(_)) => continue,
                    Ok(None) => return Ok(Woken::Changed),
                    Err(e) => return watch_broke(e, deadline, answer).await,
                },
                () = &mut period => return Ok(Woken::Changed),
                () = &mut until => return Ok(Woken::TimedOut),
                () = answer.closed() => return Ok(Woken::Cancelled),
            }
        }
    }
}

/// A watch that broke (its member died or was cut off, etcd restarted) is
/// a change: the waiter reads again, from whichever member answers, and
/// its request ends `unavailable` if etcd does not answer its reads.
/// Ending the wait here would lose its place in the queue to one member's
/// failure. The pause keeps a member that keeps refusing watches from
/// costing more than a read every tenth of a second; the wait's deadline
/// and its caller leaving still end it.
async fn watch_broke<T>(
    e: etcd_client::Error,
    deadline: Option<tokio::time::Instant>,
    answer: &mut oneshot::Sender<Result<T>>,
) -> Result<Woken> {
    tracing::debug!(error = %e, "a watch broke; reading again");
    let until = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        () = answer.closed() => Ok(Woken::Cancelled),
        () = until => Ok(Woken::TimedOut),
        () = tokio::time::sleep(Duration::from_millis(100)) => Ok(Woken::Changed),
    }
}
