//! The live scheduler around the core: one mutex over `core::state::State`,
//! the public handles ([`Scheduler`](scheduler::Scheduler),
//! [`Actor`](actor::Actor), the guards), waiting and waking, and resolving
//! spellings against the file system.
//!
//! | module | concept |
//! |---|---|
//! | [`scheduler`] | `Scheduler`: the mutex around `State`; wakes after unlocking; session extensions |
//! | [`actor`] | `Actor`, `Grant`: grants, lineage, request validation |
//! | [`request`] | the `Request` builder and the `Acquire` future (cancel-safe waits, timeouts) |
//! | [`guard`] | `Reservation` and `Fence` (extend, narrow, approval) |
//! | [`dump`] | `Dump`: one consistent copy of everything live |
//! | [`events`] | the event stream: a bounded ring recorded into only while someone subscribes |
//! | [`config`] | `Config` and the `Approval` hook |
//! | [`resolve`] | spellings → keys against the file system; the case probe |
//! | [`sync`] | the one seam for the mutex, `Arc` and atomics (loom under `--cfg writ_loom`) |

pub(crate) mod actor;
pub(crate) mod config;
pub(crate) mod dump;
pub(crate) mod events;
pub(crate) mod extensions;
pub(crate) mod guard;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod scheduler;
pub(crate) mod sync;
