//! The session's events, read from etcd: what every table of the session
//! did, in etcd's order, as the in-process scheduler reports the same
//! changes ([`EventKind`]). `writ serve --etcd` feeds them into its event
//! ring, so `/events` (and the log and the metrics that read it) show the
//! whole session on every server.
//!
//! # Implementation details
//!
//! List, then watch: one read of the session's actors, holds and waiters
//! at a revision, then one watch of the whole session from the next
//! revision on. A transaction's changes share one revision and arrive in
//! one watch response; each revision is turned into events against a
//! mirror of those records, in the order the in-process scheduler emits
//! them: actors created, files written, holds released, waits ended, holds
//! granted or changed, waits begun, actors dropped. The mirror is what
//! names the owner of a deleted key, and what a new waiter's cause is
//! judged on (the core's `explain`, as the dump judges it).
//!
//! A refusal writes nothing but its count: the count's put carries what
//! the stream tells of it (`counters::Told`), so a `busy`, a `no_slot`, a
//! `deadlock` and a waiter's timeout reach every server's stream. A waiter
//! that leaves with neither a grant nor a refusal was withdrawn
//! (`cancelled`). A file's writer is the owner of the call hold released
//! with the write's record (the op's own hold, `Table::finish_file_op`).
//! What the version gate refuses (`stale`, `not_read`) is judged by the
//! serving process alone and is not in etcd, so it is not in the stream.
//!
//! A watch that breaks (its member died) is opened again from the first
//! revision not yet read, so nothing is skipped; a revision etcd has
//! compacted away since cannot be read again, and the feed then reads the
//! session anew and goes on from there (the events in between are lost,
//! and the log says so).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, KeyValue, WatchOptions};

use super::actors::ActorRecord;
use super::counters::{Counter, Told};
use super::decide::{ClaimRecord, Snapshot};
use super::dump::paths_of;
use super::files::WriterRecord;
use super::graph::others;
use super::layout::{Owner, Record};
use super::store::{Table, now_ms};
use crate::core::queue::{WaitCause, WaiterId};
use crate::core::table::{ActorId, HoldId, HoldKind, ScopeKind};
use crate::error::Result;
use crate::sched::events::EventKind;

/// The records the events are told from, as of the last revision read.
#[derive(Default)]
struct Mirror {
    actors: HashMap<u64, ActorRecord>,
    holds: HashMap<u64, (ClaimRecord, KeyValue)>,
    waiters: HashMap<u64, (ClaimRecord, KeyValue)>,
}

/// The session's event stream from one table ([`Table::event_feed`]).
pub(crate) struct EventFeed {
    table: Table,
    mirror: Mirror,
    /// The last revision whose changes are in the mirror.
    revision: i64,
}

/// One change of one revision.
struct Change {
    deleted: bool,
    kv: KeyValue,
}

fn decode<T: serde::de::DeserializeOwned>(kv: &KeyValue) -> Option<T> {
    serde_json::from_slice(kv.value()).ok()
}

fn scope_of(record: &ActorRecord) -> ScopeKind {
    if record.read_only {
        ScopeKind::ReadOnly
    } else if record.fence.is_some() {
        ScopeKind::Fenced
    } else {
        ScopeKind::Workspace
    }
}

fn millis_since(since_ms: u64) -> u64 {
    now_ms().saturating_sub(since_ms)
}

impl Mirror {
    /// The actor a waiting request is reported for: the parent that asked,
    /// for a `child_wait` (as in process).
    fn asker(record: &ClaimRecord) -> (ActorId, Arc<str>) {
        match &record.child_of {
            Some(of) => (ActorId(of.parent), of.parent_name.as_str().into()),
            None => (ActorId(record.meta.owner), record.meta.name.as_str().into()),
        }
    }

    /// The event of a refusal counted under `counter`: `timed_out` (a
    /// waiter that gave up, with what it still waited for), `deadlock`, or
    /// `refused`.
    fn refusal(counter: Counter, told: Told, cause: Option<WaitCause>) -> EventKind {
        let actor = ActorId(told.actor);
        let actor_name: Arc<str> = told.name.as_str().into();
        match (counter, told.waiter) {
            (Counter::TimedOut, Some(waiter)) => EventKind::TimedOut {
                waiter: WaiterId(waiter),
                actor,
                actor_name,
                waited_ms: told.waited_ms,
                cause,
            },
            (Counter::Deadlocks, waiter) => EventKind::Deadlock {
                actor,
                actor_name,
                waiter: waiter.map(WaiterId),
                cycle: told.cycle,
                message: told.message,
            },
            _ => EventKind::Refused {
                actor,
                actor_name,
                error: told.kind,
                message: told.message,
                path: told.path.map(PathBuf::from),
                holder: told.holder,
            },
        }
    }

    /// Why the waiter `id` waits, judged on the mirror as it stands.
    fn cause(&self, id: u64) -> WaitCause {
        let kvs = |records: &HashMap<u64, (ClaimRecord, KeyValue)>| -> Vec<KeyValue> {
            records.values().map(|(_, kv)| kv.clone()).collect()
        };
        let holds = others(&kvs(&self.holds), Owner::Hold, KeyValue::mod_revision);
        let waiters = others(
            &kvs(&self.waiters),
            Owner::Waiter,
            KeyValue::create_revision,
        );
        let me = waiters
            .iter()
            .map(|(_, w)| w)
            .find(|w| w.owner == Owner::Waiter(id))
            .cloned();
        let snapshot = Snapshot::new(
            holds.into_iter().map(|(_, h)| h).collect(),
            waiters.into_iter().map(|(_, w)| w).collect(),
        );
        let judged = me.and_then(|w| {
            let place = w.place()?;
            snapshot.explain(&w.claim, None, place).cause(&w.claim)
        });
        let record = self.waiters.get(&id).map(|(r, _)| r);
        judged.unwrap_or_else(|| match record {
            // Nothing in its way at this revision but the slots it counts
            // against (a child_wait), or a grant about to land.
            Some(r) if r.child_of.is_some() => WaitCause::Slots,
            Some(r) => WaitCause::Path {
                path: r
                    .keys
                    .first()
                    .map(|k| PathBuf::from(&k.path))
                    .unwrap_or_default(),
                holder: "the queue".to_string(),
            },
            None => WaitCause::Slots,
        })
    }

    /// The events of one revision's changes, applied to the mirror.
    fn apply(&mut self, table: &Table, changes: Vec<Change>) -> Vec<EventKind> {
        let layout = table.layout();
        let mut actors = Vec::new();
        let mut holds = Vec::new();
        let mut waiters = Vec::new();
        let mut writes = Vec::new();
        let mut told = Vec::new();
        for change in changes {
            match layout.record_of(change.kv.key()) {
                Some(Record::Counter(name)) if !change.deleted => {
                    if let (Some(counter), Some(t)) =
                        (Counter::named(name), decode::<Told>(&change.kv))
                    {
                        told.push((counter, t));
                    }
                }
                Some(Record::Actor(id)) => actors.push((id, change)),
                Some(Record::Hold(id)) => holds.push((id, change)),
                Some(Record::Waiter(id)) => waiters.push((id, change)),
                Some(Record::Writer(path)) => writes.push((path.to_path_buf(), change)),
                Some(Record::Counter(_)) | None => {}
            }
        }
        let mut out = Vec::new();
        let created = |c: &Change| !c.deleted && c.kv.version() == 1;
        // Who got something in this revision: a hold, or (a child_wait)
        // its new actor.
        let granted: HashSet<u64> = holds
            .iter()
            .filter(|(_, c)| created(c))
            .filter_map(|(_, c)| decode::<ClaimRecord>(&c.kv).map(|r| r.meta.owner))
            .chain(actors.iter().filter(|(_, c)| created(c)).map(|(id, _)| *id))
            .collect();
        for (id, change) in actors.iter().filter(|(_, c)| !c.deleted) {
            let Some(record) = decode::<ActorRecord>(&change.kv) else {
                continue;
            };
            if created(change) {
                out.push(EventKind::ActorCreated {
                    actor: ActorId(*id),
                    name: record.name.as_str().into(),
                    parent: record.lineage.iter().rev().nth(1).map(|&p| ActorId(p)),
                    root: PathBuf::from(&record.root),
                    scope: scope_of(&record),
                });
            }
            self.actors.insert(*id, record);
        }
        // A file op's write is told before the release of its hold, which
        // is in the same transaction (as in process: the write, then the
        // hold's end).
        let releasing: Vec<&ClaimRecord> = holds
            .iter()
            .filter(|(_, c)| c.deleted)
            .filter_map(|(id, _)| self.holds.get(id).map(|(r, _)| r))
            .collect();
        out.extend(self.written(&writes, &releasing));
        for (id, _) in holds.iter().filter(|(_, c)| c.deleted) {
            if let Some((record, _)) = self.holds.remove(id) {
                out.push(EventKind::Released {
                    hold: HoldId(*id),
                    actor: ActorId(record.meta.owner),
                    actor_name: record.meta.name.as_str().into(),
                });
            }
        }
        let mut waited: HashMap<u64, u64> = HashMap::new();
        for (id, _) in waiters.iter().filter(|(_, c)| c.deleted) {
            // Why it left, if it was refused: told with the count, in the
            // transaction that dequeued it.
            let why = told
                .iter()
                .position(|(_, t)| t.waiter == Some(*id))
                .map(|i| told.swap_remove(i));
            let cause = match &why {
                Some((Counter::TimedOut, _)) => Some(self.cause(*id)),
                _ => None,
            };
            let Some((record, _)) = self.waiters.remove(id) else {
                continue;
            };
            let (actor, actor_name) = Self::asker(&record);
            if let Some((counter, t)) = why {
                out.push(Self::refusal(counter, t, cause));
            } else if granted.contains(&record.meta.owner) {
                let waited_ms = millis_since(record.meta.since_ms);
                waited.insert(record.meta.owner, waited_ms);
                out.push(EventKind::Woken {
                    waiter: WaiterId(*id),
                    actor,
                    actor_name,
                    waited_ms,
                });
            } else {
                out.push(EventKind::Cancelled {
                    waiter: WaiterId(*id),
                    actor,
                    actor_name,
                });
            }
        }
        // Refused before it queued: nothing else in the transaction.
        out.extend(
            told.into_iter()
                .map(|(counter, t)| Self::refusal(counter, t, None)),
        );
        for (id, change) in holds.into_iter().filter(|(_, c)| !c.deleted) {
            let Some(record) = decode::<ClaimRecord>(&change.kv) else {
                continue;
            };
            let (actor, actor_name) = (ActorId(record.meta.owner), record.meta.name.as_str());
            let before = self.holds.get(&id).map(|(r, _)| r.claim().keys);
            if before.is_none() {
                out.push(EventKind::Admitted {
                    hold: HoldId(id),
                    actor,
                    actor_name: actor_name.into(),
                    hold_kind: record.meta.kind.into(),
                    paths: paths_of(&record),
                    label: record.meta.label.as_deref().map(Arc::from),
                    waited_ms: waited.get(&record.meta.owner).copied().unwrap_or(0),
                });
            } else if before != Some(record.claim().keys) {
                out.push(EventKind::Changed {
                    hold: HoldId(id),
                    actor,
                    actor_name: actor_name.into(),
                    paths: paths_of(&record),
                });
            }
            self.holds.insert(id, (record, change.kv));
        }
        let mut queued = Vec::new();
        for (id, change) in waiters.into_iter().filter(|(_, c)| !c.deleted) {
            let Some(record) = decode::<ClaimRecord>(&change.kv) else {
                continue;
            };
            if !self.waiters.contains_key(&id) {
                queued.push(id);
            }
            self.waiters.insert(id, (record, change.kv));
        }
        for id in queued {
            let cause = self.cause(id);
            let Some((record, _)) = self.waiters.get(&id) else {
                continue;
            };
            let (actor, actor_name) = Self::asker(record);
            out.push(EventKind::Waiting {
                waiter: WaiterId(id),
                actor,
                actor_name,
                hold_kind: record.meta.kind.into(),
                paths: paths_of(record),
                priority: record.meta.priority,
                cause,
            });
        }
        for (id, _) in actors.iter().filter(|(_, c)| c.deleted) {
            if let Some(record) = self.actors.remove(id) {
                out.push(EventKind::ActorDropped {
                    actor: ActorId(*id),
                    name: record.name.as_str().into(),
                });
            }
        }
        out
    }

    /// `file_written` for the last-writer records of one revision. The
    /// writer is the owner of the file op's call hold released with them;
    /// a rename stores the destination and deletes the source's record,
    /// which is one event, for the destination.
    fn written(&self, writes: &[(PathBuf, Change)], released: &[&ClaimRecord]) -> Vec<EventKind> {
        let renamed = writes.iter().any(|(_, c)| {
            !c.deleted
                && decode::<WriterRecord>(&c.kv).and_then(|w| w.op).as_deref() == Some("rename")
        });
        let mut out = Vec::new();
        for (norm, change) in writes {
            let op = if change.deleted {
                if renamed {
                    continue;
                }
                "delete".to_string()
            } else {
                decode::<WriterRecord>(&change.kv)
                    .and_then(|w| w.op)
                    .unwrap_or_else(|| "write".to_string())
            };
            let hold = released.iter().find_map(|r| {
                let key = r.keys.iter().find(|k| Path::new(&k.path) == norm)?;
                Some((r, key))
            });
            let Some((record, key)) =
                hold.filter(|(r, _)| HoldKind::from(r.meta.kind) == HoldKind::Call)
            else {
                continue;
            };
            let owner = record.meta.owner;
            out.push(EventKind::FileWritten {
                actor: ActorId(owner),
                actor_name: record.meta.name.as_str().into(),
                op,
                path: PathBuf::from(key.spelled.as_ref().unwrap_or(&key.path)),
                turn: self.actors.get(&owner).and_then(|a| a.turn.clone()),
            });
        }
        out
    }
}

/// How long a broken watch waits before it is opened again, at most.
const REOPEN_MAX: Duration = Duration::from_secs(2);

impl Table {
    /// The session's event stream from now on: reads the session once (so
    /// whatever happens after this returns is reported).
    pub(crate) async fn event_feed(&self) -> Result<EventFeed> {
        let (revision, mirror) = self.mirror().await?;
        Ok(EventFeed {
            table: self.clone(),
            mirror,
            revision,
        })
    }

    async fn mirror(&self) -> Result<(i64, Mirror)> {
        let layout = self.layout();
        let (revision, [actors, holds, waiters]) = self
            .read_prefixes([layout.actors(), layout.holds(), layout.waiters()])
            .await?;
        let claims = |kvs: Vec<KeyValue>| -> HashMap<u64, (ClaimRecord, KeyValue)> {
            kvs.into_iter()
                .filter_map(|kv| {
                    let id = match layout.record_of(kv.key())? {
                        Record::Hold(id) | Record::Waiter(id) => id,
                        _ => return None,
                    };
                    Some((id, (decode(&kv)?, kv)))
                })
                .collect()
        };
        let mirror = Mirror {
            actors: actors
                .iter()
                .filter_map(|kv| match layout.record_of(kv.key())? {
                    Record::Actor(id) => Some((id, decode(kv)?)),
                    _ => None,
                })
                .collect(),
            holds: claims(holds),
            waiters: claims(waiters),
        };
        Ok((revision, mirror))
    }
}

impl EventFeed {
    /// Hands every event to `emit`, in etcd's order, until the task is
    /// dropped; a broken watch is opened again from where it broke.
    pub(crate) async fn run(mut self, mut emit: impl FnMut(EventKind)) {
        let mut pause = Duration::from_millis(50);
        loop {
            match self.follow(&mut emit).await {
                Ok(()) => pause = Duration::from_millis(50),
                Err(e) => {
                    tracing::debug!(error = %e, "the event watch broke; opening it again");
                    pause = (pause * 2).min(REOPEN_MAX);
                }
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Follows one watch until it ends.
    async fn follow(&mut self, emit: &mut impl FnMut(EventKind)) -> Result<()> {
        let everything = self.table.layout().everything();
        let from = self.revision + 1;
        let mut stream = self
            .table
            .resend(|mut client| {
                let key = everything.clone();
                let options = WatchOptions::new().with_prefix().with_start_revision(from);
                async move { client.watch(key, Some(options)).await }
            })
            .await
            .map_err(super::store::unavailable)?;
        while let Some(response) = stream.message().await.map_err(super::store::unavailable)? {
            if response.compact_revision() > 0 {
                // What was missed is gone from etcd: read the session
                // anew and go on from there.
                let (revision, mirror) = self.table.mirror().await?;
                tracing::warn!(
                    from = self.revision + 1,
                    to = revision,
                    "etcd compacted events the stream had not read; they are lost"
                );
                (self.revision, self.mirror) = (revision, mirror);
                return Ok(());
            }
            if response.canceled() {
                return Ok(());
            }
            // One revision is one transaction: its changes are told together.
            let mut events = response.events().iter().peekable();
            while let Some(first) = events.next() {
                let Some(kv) = first.kv() else { continue };
                let revision = kv.mod_revision();
                let mut changes = vec![change_of(first.event_type(), kv)];
                while let Some(next) =
                    events.next_if(|e| e.kv().map(KeyValue::mod_revision) == Some(revision))
                {
                    if let Some(kv) = next.kv() {
                        changes.push(change_of(next.event_type(), kv));
                    }
                }
                for event in self.mirror.apply(&self.table, changes) {
                    emit(event);
                }
                self.revision = revision;
            }
        }
        Ok(())
    }
}

fn change_of(kind: EventType, kv: &KeyValue) -> Change {
    Change {
        deleted: kind == EventType::Delete,
        kv: kv.clone(),
    }
}
