//! Tickets (SPEC §13): a client's name for one request, kept so that a
//! wait can be resumed or given up through any server. Every path that
//! stores one — admit, fence, release/give-up, in process and on etcd —
//! asks these two rules, so no client grows a server's memory or a
//! session's keys by naming requests.

use crate::error::{Error, ProtocolError, Result};

/// A ticket is this long at most, in bytes.
pub(crate) const MAX_TICKET_LEN: usize = 128;

/// Tickets one actor may have live at once (waiting, granted or given up).
pub(crate) const MAX_TICKETS_PER_ACTOR: usize = 64;

fn invalid(detail: String) -> Error {
    Error::Protocol {
        kind: ProtocolError::InvalidParams,
        detail,
    }
}

/// A ticket's length: 1 to [`MAX_TICKET_LEN`] bytes.
pub(crate) fn check_len(ticket: &str) -> Result<()> {
    if ticket.is_empty() || ticket.len() > MAX_TICKET_LEN {
        return Err(invalid(format!(
            "a ticket is 1 to {MAX_TICKET_LEN} bytes long; this one is {}",
            ticket.len()
        )));
    }
    Ok(())
}

/// One more ticket for an actor that has `live` of them: refused at
/// [`MAX_TICKETS_PER_ACTOR`].
pub(crate) fn check_room(live: usize) -> Result<()> {
    if live >= MAX_TICKETS_PER_ACTOR {
        return Err(invalid(format!(
            "the actor has {live} live tickets, the limit; release holds or give tickets up first"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_counts_past_the_bounds_are_refused() {
        assert!(check_len("t").is_ok());
        assert!(check_len("").is_err());
        assert!(check_len(&"t".repeat(MAX_TICKET_LEN)).is_ok());
        assert!(check_len(&"t".repeat(MAX_TICKET_LEN + 1)).is_err());
        assert!(check_room(MAX_TICKETS_PER_ACTOR - 1).is_ok());
        assert!(check_room(MAX_TICKETS_PER_ACTOR).is_err());
    }
}
