//! Engine tests through the crate-internal recording interface.
