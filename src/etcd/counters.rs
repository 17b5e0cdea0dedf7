//! The session's admission counters in etcd: one key per table and counter,
//! whose version is the count, put in the transaction of the event counted.
//! A refusal's put carries what the event stream tells of it ([`Told`]):
//! a refusal writes nothing else, so this is how every server hears of it,
//! at no cost but the bytes.

use etcd_client::{KeyValue, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::error::Error;

use super::store::Table;

/// One of the session's admission counters (SPEC §5, as
/// `core::state::Counters` counts them in process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    Admitted,
    Refused,
    Waited,
    TimedOut,
    Deadlocks,
}

impl Counter {
    const ALL: [Counter; 5] = [
        Counter::Admitted,
        Counter::Refused,
        Counter::Waited,
        Counter::TimedOut,
        Counter::Deadlocks,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Counter::Admitted => "admitted",
            Counter::Refused => "refused",
            Counter::Waited => "waited",
            Counter::TimedOut => "timed_out",
            Counter::Deadlocks => "deadlocks",
        }
    }

    /// The counter whose key ends in `name`.
    pub(super) fn named(name: &[u8]) -> Option<Counter> {
        Counter::ALL
            .into_iter()
            .find(|c| c.name().as_bytes() == name)
    }

    /// The counter an admission that ended in `outcome` counts, if any.
    pub(super) fn of_refusal(outcome: &Error) -> Option<Counter> {
        match outcome {
            Error::Busy(_) | Error::NoSlot { .. } => Some(Counter::Refused),
            Error::Timeout { .. } => Some(Counter::TimedOut),
            Error::Deadlock { .. } => Some(Counter::Deadlocks),
            _ => None,
        }
    }
}

/// Who was refused, and why: the value of a refusal's counter put, which
/// the event stream turns into `refused`, `timed_out` or `deadlock`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Told {
    /// The actor that asked (a `child_wait`'s parent).
    pub(crate) actor: u64,
    pub(crate) name: String,
    /// The error's wire kind.
    pub(crate) kind: String,
    /// The error's sentence.
    pub(crate) message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
    /// Its waiter, when it had queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) waiter: Option<u64>,
    /// A deadlock's cycle, by actor name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) cycle: Vec<String>,
    /// How long it waited, in milliseconds.
    #[serde(default)]
    pub(crate) waited_ms: u64,
}

impl Told {
    /// What `actor` (`name`) was refused with `error`, having waited as
    /// `waiter` for `waited_ms` if it queued.
    pub(crate) fn of(
        (actor, name): (u64, &str),
        error: &Error,
        waiter: Option<u64>,
        waited_ms: u64,
    ) -> Told {
        let (path, holder, cycle) = match error {
            Error::Busy(busy) => (
                Some(busy.path.display().to_string()),
                Some(busy.holder.clone()),
                Vec::new(),
            ),
            Error::Deadlock { cycle, .. } => (None, None, cycle.clone()),
            _ => (None, None, Vec::new()),
        };
        Told {
            actor,
            name: name.to_string(),
            kind: error.kind().to_string(),
            message: error.to_string(),
            path,
            holder,
            waiter,
            cycle,
            waited_ms,
        }
    }
}

/// The session's counters: each table's counter keys at one revision,
/// each key's version being its count, summed by counter.
pub(super) fn sum_counters(counts: &[KeyValue]) -> crate::Counters {
    let mut sum = crate::Counters::default();
    for kv in counts {
        let name = kv.key().rsplit(|&b| b == b'/').next().unwrap_or_default();
        let n = u64::try_from(kv.version()).unwrap_or(0);
        let slot = match Counter::named(name) {
            Some(Counter::Admitted) => &mut sum.admitted,
            Some(Counter::Refused) => &mut sum.refused,
            Some(Counter::Waited) => &mut sum.waited,
            Some(Counter::TimedOut) => &mut sum.timed_out,
            Some(Counter::Deadlocks) => &mut sum.deadlocks,
            None => continue,
        };
        *slot += n;
    }
    sum
}

impl Table {
    /// The write that counts one `counter` event: a put of this table's
    /// key for it, whose etcd version is the count. It goes into the
    /// transaction that makes the event, so the event and its count land
    /// together (one more operation, no round trip, and no compare: two
    /// admissions counting at once never make each other retry).
    pub(crate) fn count(&self, counter: Counter) -> TxnOp {
        self.count_told(counter, None)
    }

    /// [`count`](Table::count), the put carrying what is `told` of a
    /// refusal for the event stream.
    pub(crate) fn count_told(&self, counter: Counter, told: Option<&Told>) -> TxnOp {
        let value = told
            .and_then(|t| serde_json::to_vec(t).ok())
            .unwrap_or_default();
        TxnOp::put(
            self.layout().counter(self.inner.instance, counter.name()),
            value,
            None,
        )
    }

    /// Counts an event that commits nothing else (a refusal, a deadlock
    /// found before queuing), before the caller hears of it, so a dump
    /// read after the answer shows it. If etcd cannot be reached the count
    /// is lost, and the refusal still stands.
    pub(crate) async fn bump(&self, counter: Counter, told: Option<&Told>) {
        let _ = self
            .txn(Txn::new().and_then([self.count_told(counter, told)]))
            .await;
    }
}
