//! The agents of a server's `/mcp` that outlive a call (SPEC §14): named
//! with `Writ-Agent`, minted as handles, an actor token's own; what keeps
//! each alive (its sessions and calls, [`AgentUse`], then `--mcp-idle`);
//! and what an ended session's own agent leaves behind ([`Ghost`]).

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Instant;

use parking_lot::Mutex;

use super::seats::Owner;
use super::{Agent, SessionActor};

/// The agents of `/mcp` that outlive a call: (owner, name) → the agent.
/// A named or minted agent is keyed by its name; an actor token's own
/// reservations across modern calls by the empty name (no agent is named
/// so).
pub(crate) type Agents = Mutex<HashMap<AgentKey, AgentSlot>>;

pub(crate) type AgentKey = (Owner, String);

/// An agent and what keeps it alive.
pub(crate) struct AgentSlot {
    /// The agent; `None` for what a session's own agent left behind when
    /// the session ended ([`Ghost`]): only its reads, until a call names
    /// its handle and an agent takes them over.
    pub(crate) agent: Option<Agent>,
    /// The reads an agent made under this handle takes over.
    pub(crate) marks: Vec<crate::ReadMark>,
    /// Made for calls that named no agent and outliving them (a modern
    /// call's agent, a session's reads after it ended): counted in the
    /// token's pool of such agents, where the longest idle makes room
    /// (`Seats::make_room`), never against its sessions.
    pub(crate) minted: bool,
    /// A handshake session's own agent: it ends with that session
    /// ([`Ghost`]), whoever else passes its handle meanwhile.
    pub(crate) bound: bool,
    /// A subagent's parent agent (`PARENT/CHILD`), kept alive while its
    /// child lives.
    pub(crate) parent: Option<SessionActor>,
    /// The sessions and calls acting as it now ([`AgentUse`]).
    pub(crate) users: usize,
    /// When its last user went.
    pub(crate) last: Instant,
}

impl AgentSlot {
    pub(super) fn new(agent: Option<Agent>, marks: Vec<crate::ReadMark>) -> Self {
        AgentSlot {
            agent,
            marks,
            minted: false,
            bound: false,
            parent: None,
            users: 0,
            last: Instant::now(),
        }
    }
}

/// Takes the agents of `keys` out of `agents`, with every subagent of
/// theirs (`PARENT/CHILD`, at any depth): dropping an agent drops its
/// children. Dropped by the caller once the lock is released (an agent's
/// guards take it again).
pub(crate) fn take_agents(
    agents: &mut HashMap<AgentKey, AgentSlot>,
    keys: Vec<AgentKey>,
) -> Vec<AgentSlot> {
    let mut taken = Vec::new();
    let mut keys = keys;
    while let Some(key) = keys.pop() {
        let Some(slot) = agents.remove(&key) else {
            continue;
        };
        taken.push(slot);
        let prefix = format!("{}/", key.1);
        keys.extend(
            agents
                .keys()
                .filter(|(owner, name)| *owner == key.0 && name.starts_with(&prefix))
                .cloned(),
        );
    }
    taken
}

/// One session or call acting as an agent: the agent lives while one does,
/// then `--mcp-idle` after the last.
pub(crate) struct AgentUse {
    pub(super) agents: Weak<Agents>,
    pub(super) key: AgentKey,
}

/// The end of a handshake-era session's own agent (SPEC §14). While the
/// session lives, its agent is found by its handle like any other: another
/// session or call passing the handle acts as it at once (one agent, one
/// set of marks). When the session ends, the agent's actor and
/// reservations go with it, and its read marks stay under the handle for
/// `--mcp-idle`, so a later session or call passing the handle has read
/// what the session read. Nothing else outlives the session.
pub(crate) struct Ghost {
    pub(super) agents: Weak<Agents>,
    pub(super) key: AgentKey,
}

impl Drop for Ghost {
    fn drop(&mut self) {
        let Some(agents) = self.agents.upgrade() else {
            return;
        };
        let gone = {
            let mut agents = agents.lock();
            let Some(slot) = agents.get_mut(&self.key).filter(|slot| slot.bound) else {
                return;
            };
            let gone = slot.agent.take();
            slot.marks = gone
                .as_ref()
                .and_then(Agent::actor)
                .map(|actor| actor.marks())
                .unwrap_or_default();
            slot.bound = false;
            slot.minted = true;
            slot.last = Instant::now();
            gone
        };
        // Dropped once the lock is released: its reservations' guards
        // take it again.
        drop(gone);
    }
}

impl Drop for AgentUse {
    fn drop(&mut self) {
        let Some(agents) = self.agents.upgrade() else {
            return;
        };
        if let Some(slot) = agents.lock().get_mut(&self.key) {
            slot.users = slot.users.saturating_sub(1);
            slot.last = Instant::now();
        }
    }
}

/// An agent as a call or session names it: the handle it is found by, and
/// the name of its actor.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    /// What a model passes as `agent` to act as the agent again.
    pub(in crate::mcp) key: String,
    /// The name of the agent's actor.
    pub(in crate::mcp) actor: String,
    /// Writ made the handle for a caller that named no agent (its results
    /// then ask the model to pass it).
    pub(in crate::mcp) minted: bool,
    /// The agent ends with the session it is made for ([`Ghost`]).
    pub(in crate::mcp) bound: bool,
}

impl Handle {
    /// An agent the caller named: its actor bears the name.
    pub(crate) fn named(name: String) -> Self {
        Handle {
            key: name.clone(),
            actor: name,
            minted: false,
            bound: false,
        }
    }

    /// A handle writ mints for a caller that named no agent; its actor is
    /// named after the client.
    pub(crate) fn minted(key: String, actor: String, bound: bool) -> Self {
        Handle {
            key,
            actor,
            minted: true,
            bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_an_agent_takes_its_subagents_and_only_its_own() {
        let mut agents: HashMap<AgentKey, AgentSlot> = HashMap::new();
        let session = |name: &str| (Owner::Session, name.to_string());
        for name in [
            "lead",
            "lead/one",
            "lead/one/deep",
            "lead/two",
            "leader",
            "other/lead",
        ] {
            agents.insert(session(name), AgentSlot::new(None, Vec::new()));
        }
        agents.insert(
            (Owner::Actor(7), "lead/one".into()),
            AgentSlot::new(None, Vec::new()),
        );
        let taken = take_agents(&mut agents, vec![session("lead")]);
        assert_eq!(taken.len(), 4);
        let mut left: Vec<String> = agents.keys().map(|(_, name)| name.clone()).collect();
        left.sort();
        assert_eq!(left, ["lead/one", "leader", "other/lead"]);
    }
}
