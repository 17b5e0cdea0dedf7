//! The bound on open MCP sessions per token (SPEC §13,
//! `--max-mcp-sessions`): each session costs the server its actor, its
//! tools and rmcp's buffers until it ends, so a token that opens sessions
//! and never closes them is refused once it reaches the cap, with a
//! sentence naming it. A server counts its own sessions, in process and on
//! etcd alike: sessions live in the server that opened them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::auth::Caller;

/// Open sessions per token.
#[derive(Debug)]
pub(crate) struct SessionCap {
    max: usize,
    open: Arc<Mutex<HashMap<Caller, usize>>>,
    /// The sessions that opened on a claim, by session id: only their end
    /// frees a seat (an `initialize` refused still gets an id from rmcp).
    bound: Mutex<HashMap<String, Caller>>,
}

/// One session counted against its token until [`Claim::keep`] hands it
/// to the session's end, or it is dropped (the session never opened).
pub(crate) struct Claim {
    open: Arc<Mutex<HashMap<Caller, usize>>>,
    caller: Option<Caller>,
}

impl SessionCap {
    pub(crate) fn new(max: usize) -> Self {
        SessionCap {
            max: max.max(1),
            open: Arc::default(),
            bound: Mutex::default(),
        }
    }

    /// The cap: sessions per token, and minted agents per token in a pool
    /// of their own.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Counts one more session of `caller`, or refuses it at the cap.
    pub(crate) fn claim(&self, caller: &Caller) -> Result<Claim, String> {
        let mut open = self.open.lock();
        let n = open.entry(caller.clone()).or_insert(0);
        if *n >= self.max {
            return Err(format!(
                "this token has {} MCP sessions open, the server's cap (--max-mcp-sessions {}); \
                 close sessions you no longer use (DELETE /mcp) or name one agent for all of them \
                 (the Writ-Agent header) and reuse its session",
                *n, self.max
            ));
        }
        *n += 1;
        Ok(Claim {
            open: self.open.clone(),
            caller: Some(caller.clone()),
        })
    }

    /// The session `id` opened on a claim of `caller` ([`Claim::keep`]).
    pub(crate) fn bind(&self, id: &str, caller: &Caller) {
        self.bound.lock().insert(id.to_string(), caller.clone());
    }

    /// The session `id` ended: its seat is free again, if it held one.
    pub(crate) fn ended(&self, id: &str) {
        if let Some(caller) = self.bound.lock().remove(id) {
            release(&self.open, &caller);
        }
    }
}

fn release(open: &Mutex<HashMap<Caller, usize>>, caller: &Caller) {
    let mut open = open.lock();
    if let Some(n) = open.get_mut(caller) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            open.remove(caller);
        }
    }
}

impl Claim {
    /// The session opened: it stays counted until
    /// [`SessionCap::ended`] at its end.
    pub(crate) fn keep(mut self) {
        self.caller = None;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(caller) = self.caller.take() {
            release(&self.open, &caller);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_refuses_one_more_and_frees_a_seat_per_end() {
        let cap = SessionCap::new(2);
        let caller = Caller::Session;
        cap.claim(&caller).unwrap().keep();
        cap.bind("s1", &caller);
        cap.claim(&caller).unwrap().keep();
        cap.bind("s2", &caller);
        let refused = cap.claim(&caller).err().unwrap_or_default();
        assert!(refused.contains("--max-mcp-sessions 2"), "{refused}");
        assert!(
            cap.claim(&Caller::Actor(7)).is_ok(),
            "another token is not counted"
        );
        // A session that never held a seat frees none.
        cap.ended("refused");
        assert!(cap.claim(&caller).is_err());
        cap.ended("s1");
        cap.ended("s1");
        let claim = cap.claim(&caller).unwrap();
        drop(claim); // never opened: the seat is free again
        cap.claim(&caller).unwrap().keep();
        assert!(cap.claim(&caller).is_err(), "one end frees one seat");
    }
}
