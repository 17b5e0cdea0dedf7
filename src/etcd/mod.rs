//! The session's table in etcd (feature `etcd`; SPEC §16).
//!
//! A [`Table`] is one process's handle on a session whose holds, waiters
//! and actors are etcd keys under `/writ/<session>/`. Any number of tables
//! — in one process or on many machines — may serve one session: etcd's
//! transactions, not a lock in any of them, decide who gets what, by the
//! rules of SPEC §3–§4, judged with the same code the in-process scheduler
//! uses (the crate's pure core).
//!
//! - An admission is one etcd transaction: read what can conflict (the
//!   ancestors of each key and the range beneath a tree key), decide, and
//!   commit with a compare on every range read, so nothing changed in
//!   between; a lost race reads again. All-or-nothing: a request is granted
//!   whole or leaves nothing.
//! - Every grant carries a fencing token, [`Grant::revision`]: the etcd
//!   revision of its commit, strictly increasing for any one path.
//! - A client's lease is an etcd lease ([`LeaseId`]): every key its actors
//!   create is attached to it, so a client that stops renewing it frees
//!   everything within its TTL, and any table can renew it.
//!
//! Paths handed to a table are keys already: absolute, resolved (symlinks
//! followed) by whoever serves the actor, compared byte-exactly. docs/DISTRIBUTED.md
//! has the key layout, the transaction, the guarantees and the costs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), writ::Error> {
//! use std::time::Duration;
//! use writ::etcd::{AdmitRequest, Table, TableOptions};
//!
//! let table = Table::connect(&["http://127.0.0.1:2379"], "demo", TableOptions::default()).await?;
//! let lease = table.grant_lease(Duration::from_secs(15)).await?;
//! let lead = table.create_actor(lease, "lead", "/ws".as_ref(), None).await?;
//! let call = table.admit(&lead, AdmitRequest::call(["/ws/src/lib.rs"])).await?;
//! println!("granted with fencing token {}", call.revision());
//! table.release(call.hold()).await?;
//! table.revoke(lease).await?;
//! # Ok(()) }
//! ```
//!
//! # Layout of this module
//!
//! Lowest layer first; a file uses only the files above it in this list
//! (`.ci/layers` checks it). Everything below `store` adds methods to
//! [`Table`].
//!
//! | file | what it is |
//! |---|---|
//! | `layout` | the key schema: every key of a session, and the ranges a key can conflict in |
//! | `options` | [`TableOptions`] |
//! | `deadlock` | the cycle search over edge records (pure) |
//! | `decide` | records as stored, and one read as a `Snapshot` that `core::judge` decides on: holds and waiters in the way, the owner's precedence, slot reservations, blockers and edges |
//! | `store` | [`Table`] and its connection: bounded calls, sent again when they reached no member; record and compare helpers; [`LeaseId`] |
//! | `counters` | the admission counters, counted in the transaction of their event |
//! | `holds` | a hold's keys as written (records, index entries), reading a hold back, releasing it |
//! | `actors` | actors' records and grants, leases, making and dropping actors |
//! | `tokens` | session and actor tokens, by their hashes |
//! | `files` | the file tools' read marks and last writers, and claims (SPEC §6): given and ended with a file op, counted per file |
//! | `graph` | the wait-for edges true at one read; the cycle a grant would close |
//! | `reorder` | soft cycles reordered away by the core's search, the moved places written |
//! | `queue` | the waiters' lease, edge records, leaving the queue, watching for a change |
//! | `pipeline` | the one admission pipeline (read, decide, commit or queue and wait, until an answer) over a `Need`: a hold or a child; the deadlock check before a wait |
//! | `admission` | [`AdmitRequest`], [`Grant`]: a hold's round (its read, judgement and commit) and queuing; tickets |
//! | `change` | widening and narrowing a live hold |
//! | `resume` | asking again by ticket: a lost grant's answer, a wait taken over in its place |
//! | `slots` | `child_wait`: a child's round (its grant fence's paths, then its slot) through the same pipeline |
//! | `dump` | [`TableDump`]: the session at one revision, as the in-process [`Dump`](crate::Dump) |
//! | `events` | the session's event stream: one read, then one watch, each revision told as the in-process scheduler tells the same change |
//!
//! # Implementation details
//!
//! Each admission (and each `child_wait`) runs in a task of its own (spawned on the caller's tokio
//! runtime); the future [`Table::admit`] returns only waits for its answer.
//! So a caller that drops the future never leaves a commit half-observed:
//! the task notices the dropped receiver, deletes its waiter keys, and
//! releases a grant that landed after the caller left.

mod actors;
mod admission;
mod change;
mod counters;
mod deadlock;
mod decide;
mod dump;
mod events;
mod files;
mod graph;
mod holds;
mod layout;
mod options;
mod pipeline;
mod queue;
mod reorder;
mod resume;
mod slots;
mod store;
pub(crate) mod tokens;

pub use actors::ActorRef;
pub use admission::{AdmitRequest, Grant};
pub use dump::TableDump;
pub use options::TableOptions;
pub use store::{LeaseId, Table};

pub(crate) use actors::GrantRecord;
pub(crate) use files::{GateRecords, OwnClaims};
pub(crate) use slots::ChildAsk;
