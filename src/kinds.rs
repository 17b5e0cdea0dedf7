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
}
