//! The pure core: what the scheduler decides, with no locks, no threads, no
//! tokio and no file system.
//!
//! Every type here is plain data changed through `&mut self`; the live layer
//! ([`crate::sched`]) wraps it in one mutex and does the waking. Nothing in
//! this folder imports anything outside it but the ground (`error`, `kinds`);
//! `.ci/run` checks that.
//!
//! | module | concept |
//! |---|---|
//! | [`key`] | targets and keys: case folding, overlap, containment, merging |
//! | [`index`] | the path index beneath the table and the queue |
//! | [`table`] | holds, the kind/mode matrix, the *covers* rule; actor records |
//! | [`queue`] | waiting requests in priority-then-arrival order (a soft cycle may move a waiter ahead within its priority); wait causes |
//! | [`judge`] | the grant rule's judgement over a read-only view: blockers, precedence, slot reservation — one rule set for the in-process table and the table in etcd |
//! | [`scope`] | what a grant lets an actor hold; what widening and narrowing a hold may change |
//! | [`state`] | table + queue + actors + slots + counters: the grant and wake-up rules |
//! | [`wait_graph`] | the wait-for graph and its searches (a cycle through a request, a slot deadlock), one type for both tables |
//! | [`deadlock`] | the in-process graph over the state; soft cycles reordered away (one search over a view, for both tables), other cycles refused |

pub(crate) mod deadlock;
pub(crate) mod index;
pub(crate) mod judge;
pub(crate) mod key;
pub(crate) mod queue;
pub(crate) mod scope;
pub(crate) mod state;
pub(crate) mod table;
pub(crate) mod wait_graph;
