//! The two words of the conflict table that every layer speaks, errors
//! included: how a key is held ([`Mode`]) and what a hold is for
//! ([`HoldKind`]).
//!
//! They sit at the ground, beside `error`, so that `Error::Busy` can name
//! them without the error type importing the core it describes.

use serde::Serialize;

/// How a key is held: for writing or for reading.
///
/// `Shared < Exclusive`: merging keeps the stronger mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Read or observe; many may share.
    Shared,
    /// Write; excludes others (see the conflict table in the crate docs).
    Exclusive,
}

/// What a hold is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// Long-lived: the right to write an area, held until its guard or actor drops.
    Fence,
    /// One tool call, held until its `Reservation` drops.
    Call,
    /// A hot file's claim (SPEC §6): a `Stale` refusal through the agent
    /// tools holds the file for the agent it refused, until that agent's
    /// next write to it, a TTL, a release or the agent's end. It excludes
    /// other actors' writes and fences as an exclusive fence does, never
    /// reads, and is never asked for: the file tools grant it.
    Claim,
}

impl HoldKind {
    /// Whether a hold of this kind outlives a call: a fence or a claim.
    /// Such a hold covers its owner's line, draws hard edges in the
    /// wait-for graph and is released with its actor.
    pub fn outlives_call(self) -> bool {
        matches!(self, HoldKind::Fence | HoldKind::Claim)
    }
}
