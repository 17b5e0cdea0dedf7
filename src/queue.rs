//! The wait queue: requests that could not be granted yet.
//!
//! Pure data, kept in queue order: higher priority first, then arrival. The
//! wake-up rule that walks it lives in [`crate::state`], beside the table it
//! consults. Wakers are plain `std::task::Waker`s, stored and taken only
//! while the scheduler's mutex is held, and woken after it is released.

use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use serde::Serialize;

use crate::state::ChildRecord;
use crate::table::{ActorId, Claim, HoldId};

/// A waiting request's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct WaiterId(pub u64);

/// What a waiting request needs besides its keys.
#[derive(Debug, Clone)]
pub(crate) enum Need {
    /// Only its keys (a call or a fence).
    Hold,
    /// A new child actor: a slot, then its grant fence (possibly empty).
    Child(ChildRecord),
}

/// Where a waiting request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaiterState {
    /// Not granted yet.
    Waiting,
    /// Granted by a wake-up scan; the hold (if it has keys) is already in the
    /// table and waits for the future to pick it up, or to hand it back if
    /// the future is dropped first.
    Granted(Option<HoldId>),
}

/// A request in the queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) id: WaiterId,
    /// The actor that asked (for a child, its parent).
    pub(crate) requester: ActorId,
    pub(crate) requester_name: Arc<str>,
    /// The hold the request will become.
    pub(crate) claim: Claim,
    pub(crate) need: Need,
    pub(crate) priority: i32,
    pub(crate) seq: u64,
    pub(crate) label: Option<Arc<str>>,
    pub(crate) since: Instant,
    pub(crate) waker: Option<Waker>,
    pub(crate) state: WaiterState,
}

impl Waiter {
    pub(crate) fn is_waiting(&self) -> bool {
        self.state == WaiterState::Waiting
    }
}

/// The queue. Invariant: `entries` is sorted by `(-priority, seq)`, and seqs
/// are unique.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    entries: Vec<Waiter>,
    next_seq: u64,
    next_id: u64,
}

impl Queue {
    /// The index a new request of `priority` takes: after every entry of
    /// equal or higher priority.
    pub(crate) fn position_for(&self, priority: i32) -> usize {
        self.entries.partition_point(|w| w.priority >= priority)
    }

    /// The entries a new request of `priority` would queue behind.
    pub(crate) fn ahead_of(&self, priority: i32) -> &[Waiter] {
        &self.entries[..self.position_for(priority)]
    }

    /// Allocates an id; the caller builds the waiter and calls [`Queue::insert`].
    pub(crate) fn next_id(&mut self) -> (WaiterId, u64) {
        self.next_id += 1;
        self.next_seq += 1;
        (WaiterId(self.next_id), self.next_seq)
    }

    pub(crate) fn insert(&mut self, waiter: Waiter) {
        let at = self.position_for(waiter.priority);
        self.entries.insert(at, waiter);
    }

    pub(crate) fn remove(&mut self, id: WaiterId) -> Option<Waiter> {
        let at = self.entries.iter().position(|w| w.id == id)?;
        Some(self.entries.remove(at))
    }

    pub(crate) fn get(&self, id: WaiterId) -> Option<&Waiter> {
        self.entries.iter().find(|w| w.id == id)
    }

    pub(crate) fn get_mut(&mut self, id: WaiterId) -> Option<&mut Waiter> {
        self.entries.iter_mut().find(|w| w.id == id)
    }

    pub(crate) fn entries(&self) -> &[Waiter] {
        &self.entries
    }

    pub(crate) fn entries_mut(&mut self) -> &mut [Waiter] {
        &mut self.entries
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Panics when the order invariant is broken.
    pub(crate) fn assert_invariants(&self) {
        for pair in self.entries.windows(2) {
            let ordered = pair[0].priority > pair[1].priority
                || (pair[0].priority == pair[1].priority && pair[0].seq < pair[1].seq);
            assert!(
                ordered,
                "queue out of order: {:?} before {:?}",
                pair[0].id, pair[1].id
            );
        }
    }
}

/// Why a request is waiting, checked in this order.
///
/// ```
/// let cause = writ::WaitCause::Path { path: "src/lex.rs".into(), holder: "parser".into() };
/// assert_eq!(cause.to_string(), "waiting for 'parser' to release src/lex.rs");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "cause")]
pub enum WaitCause {
    /// `Config::max_actors` is reached.
    Slots,
    /// `Config::max_writers` is reached.
    Writers,
    /// A path is held, or queued for, by someone else.
    Path {
        /// The contested path (the requester's key).
        path: std::path::PathBuf,
        /// The name of the actor holding or queued for it.
        holder: String,
    },
}

impl std::fmt::Display for WaitCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitCause::Slots => f.write_str("waiting for a free actor slot (max_actors)"),
            WaitCause::Writers => f.write_str("waiting for a free writer slot (max_writers)"),
            WaitCause::Path { path, holder } => {
                write!(f, "waiting for '{holder}' to release {}", path.display())
            }
        }
    }
}
