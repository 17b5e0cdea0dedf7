//! The version gate: read marks (sha256) and the rule that a write to an
//! existing file needs a current mark.

/// An actor's read marks.
#[derive(Debug, Default)]
pub(crate) struct MarkStore {}
