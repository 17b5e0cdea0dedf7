//! What a model is told when its edit met a stale read and was applied on
//! top of the changes since (an anchored edit, SPEC §6): that it was, and
//! those changes, so that it has seen them. Asked by writ's own tools and
//! by the filesystem set where they turn a receipt into the result text.

use crate::Receipt;

/// The paragraph a tool's result text ends with when `receipt` is of an
/// anchored edit; empty otherwise.
pub(super) fn note(receipt: &Receipt) -> String {
    let Some(anchored) = &receipt.anchored else {
        return String::new();
    };
    let who = match &anchored.writer {
        Some(writer) => format!(" ('{writer}' wrote it last)"),
        None => String::new(),
    };
    let cut = if anchored.truncated {
        "[Cut short at the read limit; read the file to see the rest.]\n"
    } else {
        ""
    };
    format!(
        "\n\nThe file changed since you read it{who}. Those changes did not touch the text \
         your edit replaced or the lines beside it, so your edit was applied on top of them. \
         What changed since your read (others' changes, not yours) is below; you have now seen \
         it. Your read was not refreshed: read the file again before write_file, or when an \
         edit is refused.\n\n```diff\n{}{cut}```",
        anchored.diff
    )
}
