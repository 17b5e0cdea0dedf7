//! writ keeps concurrent AI agents from destroying each other's work.
//!
//! Every file-mutating tool call of a multi-agent session goes through one
//! [`Scheduler`]. A call is *admitted* with an all-or-nothing reservation on
//! every path it will touch, or refused with a [`Busy`] a model can act on, or
//! waits fairly. Long-lived fences and per-call reservations share one
//! resource table; deadlocks between fence holders are refused, not waited on.
//!
//! # Brief overview
//!
//! - [`Scheduler`]: one per session, cloned to every child agent. [`Scheduler::dump`]
//!   copies everything live into a [`Dump`] (JSON and a table).
//! - [`Actor`]: one agent, made with a [`Grant`] (`workspace`, `fenced`,
//!   `read_only`). It admits calls ([`Actor::try_admit`], [`Actor::admit`]),
//!   takes fences ([`Actor::fence`]) and makes children ([`Actor::child`]).
//! - [`Target`]: a path as a caller names it (`"src/"` is a tree); it becomes
//!   a canonical key inside the grant root or an [`Error::OutsideGrant`].
//! - [`Reservation`] and [`Fence`]: guards; dropping one releases its hold and
//!   wakes whoever can now proceed.
//! - [`Files`] ([`Actor::files`]): one actor's file tools. Reads leave a
//!   [`ReadMark`]; writes, appends, replaces, deletes and renames are
//!   admitted like any call, pass the read-before-write version gate and the
//!   path policy, land atomically and return a [`Receipt`].
//! - [`Error`]: one enum; every message is a sentence a model can act on.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), writ::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let root = dir.path();
//! use writ::{Config, Grant, Scheduler, Target};
//!
//! let sched = Scheduler::new(Config::default());
//! let lead = sched.actor("lead", Grant::workspace(root))?;
//! let parser = lead.child("parser", Grant::fenced(root, ["src/parser/"]))?;
//!
//! // The child writes inside its fence; a sibling is refused there.
//! let call = parser.try_admit(["src/parser/lex.rs"])?;
//! let sibling = lead.child("docs", Grant::workspace(root))?;
//! match sibling.try_admit(["src/parser/lex.rs"]) {
//!     Err(writ::Error::Busy(busy)) => assert_eq!(busy.holder, "parser"),
//!     other => panic!("expected Busy, got {other:?}"),
//! }
//! // Reads pass through fences and wait only for writes in progress.
//! drop(call);
//! let read = sibling.admit([Target::file("src/parser/lex.rs").shared()]).await?;
//! println!("{}", sched.dump());
//! # drop(read); Ok(()) }
//! ```
//!
//! # Layers
//!
//! The source tree is the architecture, bottom up: the ground (`error`,
//! `kinds`), a pure `core` (keys, index, table, queue, state, deadlock — no
//! locks, no I/O), the live scheduler `sched` around it, the file tools
//! `files`, then [`history`], [`delegate`] and [`plan`]. Imports point down
//! only.
//!
//! The full contract (conflict table, fairness, deadlock rules) is in
//! `docs/DESIGN.md`; the module map is in `docs/ARCHITECTURE.md`.

#![deny(missing_docs)]

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// The ground: the one error type and the words it shares with every layer.
mod error;
mod kinds;
#[cfg_attr(not(any(feature = "server", feature = "mcp")), allow(dead_code))]
mod random;
pub mod text;
#[cfg_attr(not(any(feature = "server", feature = "etcd")), allow(dead_code))]
mod tickets;

// The layers, bottom up; imports point down only (docs/ARCHITECTURE.md).
mod core;
pub mod delegate;
mod files;
pub mod history;
pub mod plan;
pub mod run;
mod sched;

#[doc(hidden)]
pub mod bench_support;
#[cfg(feature = "etcd")]
pub mod etcd;
// The etcd table's pure parts (key layout, the admission decision, the
// deadlock search) need no etcd client, so their unit tests run in every
// `cargo test`, not only in a build that has `protoc`. Without the table
// that calls them, most of them are unused here.
#[cfg(all(test, not(feature = "etcd")))]
#[path = "etcd"]
#[allow(dead_code)]
mod etcd {
    mod deadlock;
    mod decide;
    mod layout;
}
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "remote")]
pub mod remote;
#[cfg(feature = "server")]
pub mod server;
#[cfg(any(feature = "server", feature = "remote"))]
mod wire;
#[cfg(any(feature = "server", feature = "remote"))]
pub use wire::PROTOCOL_VERSION;

pub use crate::core::deadlock::WaitEdge;
pub use crate::core::key::{CaseMode, Resolved, Target, normalize_lexically};
pub use crate::core::queue::{WaitCause, WaiterId};
pub use crate::core::state::Counters;
pub use crate::core::table::{ActorId, HoldId, ScopeKind};
pub use error::{Busy, ERROR_KINDS, Error, ErrorKind, ProtocolError, Result, SlotLimit};
#[doc(hidden)]
pub use files::WriteStep;
pub use files::atomic::write_atomic;
pub use files::folders::{EntryKind, FolderEntry};
pub use files::gate::{ReadMark, View};
pub use files::{Anchored, FileOp, Files, HistoryStatus, Receipt};
pub use kinds::{HoldKind, Mode};
pub use sched::actor::{Actor, Grant};
pub use sched::config::{
    Approval, Config, DEFAULT_CLAIM_TTL, DEFAULT_MAX_READ_BYTES, DEFAULT_SENSITIVE, Durability,
};
pub use sched::dump::{ActorEntry, BlockedBy, Dump, HoldEntry, PathEntry, Slots, WaiterEntry};
pub use sched::events::{EVENT_KINDS, EVENT_RING, Event, EventKind, Subscription};
pub use sched::guard::{Fence, Reservation};
pub use sched::request::{Acquire, Request};
pub use sched::scheduler::Scheduler;
