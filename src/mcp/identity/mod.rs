//! Who an MCP session or call acts as (SPEC §14), in one place: the
//! [`Identity`] a [`ToolServer`](super::ToolServer) is made with, the
//! [`SessionActor`] it decides on, a named [`Agent`], and — for a server —
//! the agents that outlive a call and the decision itself:
//!
//! - `handle`: the `agent` argument and headers, name checks, minting;
//! - `agents`: the registry of agents by (owner, handle), what keeps each
//!   alive (its users, `--mcp-idle`, a handshake session's [`Ghost`]);
//! - `seats`: the decision ([`Seats::open`]: by owner, named agent and
//!   era), written against [`Host`], which the server implements (its
//!   session cap, actors made in process or on etcd, a token's actor, the
//!   server a minted handle names).
//!
//! A call goes one way down: the request to the `ToolServer`, to its
//! `Identity`, to `Seats`, to the `Host`; nothing here names the server.

pub(crate) mod agents;
pub(crate) mod handle;
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) mod seats;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::table::{SessionTable, TableRef};
use super::{Reservations, ToolSet, gone};
use crate::{Actor, Grant};

use agents::Handle;
use seats::Seats;

/// What a session opening looks like to an [`Identity`] rule.
#[derive(Debug)]
#[non_exhaustive]
pub struct SessionStart<'a> {
    /// The client's `clientInfo.name` (`"agent"` when it gave none).
    pub client_name: &'a str,
    /// The HTTP request that opened the session, when it came over HTTP.
    pub http: Option<&'a http::request::Parts>,
}

type Rule = dyn Fn(&SessionStart<'_>) -> Result<SessionActor, String> + Send + Sync;

/// A session or call opening, owned: what the decision of a server
/// ([`Seats`]) is given.
pub(crate) struct Opening {
    /// The client's `clientInfo.name` (`"agent"` when it gave none).
    pub(crate) client_name: String,
    /// The HTTP request that opened the session, when it came over HTTP.
    pub(crate) http: Option<http::request::Parts>,
    /// The agent one call names in its `agent` argument: that call acts as
    /// this agent, whatever its session acts as.
    pub(crate) agent: Option<String>,
    /// Which revision's lifecycle the opening belongs to.
    pub(crate) era: Era,
}

/// The two lifecycles of MCP (SPEC §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` opened a session, which outlives the call.
    Handshake,
    /// The revision of 2026-07-28: no session, the call is all there is.
    Modern,
}

impl Opening {
    /// The opening as a [`SessionStart`].
    pub(crate) fn start(&self) -> SessionStart<'_> {
        SessionStart {
            client_name: &self.client_name,
            http: self.http.as_ref(),
        }
    }
}

/// The actor an MCP session acts as, and whether the session owns it.
#[derive(Debug, Clone)]
pub struct SessionActor {
    held: ActorRef,
    pub(super) tools: Option<ToolSet>,
    /// The reservations list of a named agent, shared by its sessions;
    /// `None`: the session keeps its own.
    pub(super) reservations: Option<Reservations>,
    /// The table the session's holds are taken in, when it is not the
    /// actor's scheduler.
    table: Option<TableRef>,
    /// The handle a model passes as `agent` to act as this actor again,
    /// when it has one (a named or minted agent of a server).
    pub(super) handle: Option<Handle>,
    /// The agent is the session's own (a handshake session's minted
    /// handle): its actor and reservations end with that session, and only
    /// its reads outlive it under the handle.
    pub(super) bound: bool,
    /// Kept while the session or call acting as this actor lives (a named
    /// agent counts its users by it).
    keep: Vec<Arc<dyn std::any::Any + Send + Sync>>,
}

/// A named agent (SPEC §14): one actor, with its read marks, turn and
/// reservations, shared by every MCP session that names it. Clients that
/// open a session per tool call (langchain-mcp-adapters' `get_tools()`)
/// keep their reads and reservations from call to call by naming the agent.
/// The agent, and so its actor and reservations, lives as long as the
/// value (the server keeps it while any of its sessions lives, then for
/// `--mcp-idle`).
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// use std::sync::Arc;
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let actor = sched.actor("reviewer", writ::Grant::workspace(dir.path()))?;
/// let agent = writ::mcp::Agent::new(Arc::new(actor));
/// let identity = writ::mcp::Identity::agent(&agent);
/// // Every ToolServer made with `identity` acts as "reviewer", sharing its
/// // reservations.
/// # let _ = identity; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    actor: ActorRef,
    reservations: Reservations,
    table: Option<Arc<dyn SessionTable>>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("actor", &self.actor().map(|a| a.name().to_string()))
            // Never waits: a Debug taken while the list is locked would
            // otherwise wait on itself.
            .field(
                "reservations",
                &self.reservations.try_lock().map(|r| r.len()),
            )
            .finish()
    }
}

impl Agent {
    /// An agent acting as `actor`, with no reservations yet.
    pub fn new(actor: Arc<Actor>) -> Self {
        Agent {
            actor: ActorRef::Owned(actor),
            reservations: Arc::default(),
            table: None,
        }
    }

    /// An agent acting as an actor owned elsewhere (an actor token's): its
    /// reservations outlive each call, but never the actor, which goes when
    /// its owner drops it (a revoked lease wins).
    pub(crate) fn of_shared(actor: &Arc<Actor>) -> Self {
        Agent {
            actor: ActorRef::Shared(Arc::downgrade(actor)),
            reservations: Arc::default(),
            table: None,
        }
    }

    /// The agent's holds are taken in `table`, not in its actor's
    /// scheduler.
    pub(crate) fn on_table(mut self, table: Arc<dyn SessionTable>) -> Self {
        self.table = Some(table);
        self
    }

    /// The agent's actor, unless it is gone (an actor owned elsewhere is
    /// dropped by its owner).
    pub fn actor(&self) -> Option<Arc<Actor>> {
        match &self.actor {
            ActorRef::Owned(actor) => Some(actor.clone()),
            ActorRef::Shared(weak) => weak.upgrade(),
        }
    }

    /// How many reservations the agent holds.
    pub fn reservations(&self) -> usize {
        self.reservations.lock().len()
    }
}

#[derive(Debug, Clone)]
enum ActorRef {
    Owned(Arc<Actor>),
    Shared(Weak<Actor>),
}

impl SessionActor {
    /// An actor that lives as long as the session (dropped when it ends).
    pub fn owned(actor: Arc<Actor>) -> Self {
        Self::acting_as(ActorRef::Owned(actor))
    }

    /// A seat acting as `held`, with nothing else yet.
    fn acting_as(held: ActorRef) -> Self {
        SessionActor {
            held,
            tools: None,
            reservations: None,
            table: None,
            handle: None,
            bound: false,
            keep: Vec::new(),
        }
    }

    /// The session's holds are taken in `table`, which goes with the
    /// session, not in its actor's scheduler.
    pub(crate) fn on_table(mut self, table: Arc<dyn SessionTable>) -> Self {
        self.table = Some(TableRef::Owned(table));
        self
    }

    /// A named agent's actor and reservations, shared with its other
    /// sessions; the agent outlives the session.
    pub fn agent(agent: &Agent) -> Self {
        let held = match &agent.actor {
            ActorRef::Owned(actor) => Arc::downgrade(actor),
            ActorRef::Shared(weak) => weak.clone(),
        };
        SessionActor {
            reservations: Some(agent.reservations.clone()),
            table: agent
                .table
                .as_ref()
                .map(|t| TableRef::Shared(Arc::downgrade(t))),
            ..Self::acting_as(ActorRef::Shared(held))
        }
    }

    /// The session acts as the agent a model names by `handle`; `minted`
    /// when writ made the handle for a caller that named no agent (its
    /// results then ask the model to pass it).
    pub(crate) fn with_handle(mut self, handle: Handle) -> Self {
        self.handle = Some(handle);
        self
    }

    /// `keep` lives as long as the session (or call) acting as this actor.
    pub(crate) fn keeping(mut self, keep: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.keep.push(keep);
        self
    }

    /// The agent is the session's own: it ends with the session that
    /// minted its handle (see [`SessionActor::bound`]).
    pub(crate) fn bound_to_session(mut self, bound: bool) -> Self {
        self.bound = bound;
        self
    }

    /// An actor owned elsewhere (e.g. by a server lease): the session acts
    /// as it while it lives and never keeps it alive.
    pub fn shared(actor: &Arc<Actor>) -> Self {
        Self::acting_as(ActorRef::Shared(Arc::downgrade(actor)))
    }

    /// The actor, unless it is gone.
    pub(crate) fn actor(&self) -> Result<Arc<Actor>, String> {
        self.get()
    }

    /// This session gets `tools` instead of the server's default set (a
    /// client asked for it when it opened the session).
    pub fn with_tools(mut self, tools: ToolSet) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The actor, unless it is gone.
    pub(super) fn get(&self) -> Result<Arc<Actor>, String> {
        match &self.held {
            ActorRef::Owned(actor) => Ok(actor.clone()),
            ActorRef::Shared(weak) => weak.upgrade().ok_or_else(gone),
        }
    }

    /// The seat's actor's id in the table its holds are taken in (etcd),
    /// if it has one.
    pub(crate) fn table_actor(&self) -> Result<Option<crate::ActorId>, String> {
        Ok(self.table()?.map(|table| table.actor_id()))
    }

    /// The table the session's holds are taken in: `None` for the actor's
    /// own scheduler; an error when it went with its agent (never the
    /// actor's scheduler instead: that would take holds nobody else sees).
    pub(super) fn table(&self) -> Result<Option<Arc<dyn SessionTable>>, String> {
        match &self.table {
            None => Ok(None),
            Some(table) => table.get().map(Some).ok_or_else(gone),
        }
    }
}

/// Decides which actor an MCP session acts as.
#[derive(Clone)]
pub struct Identity {
    how: How,
}

#[derive(Clone)]
enum How {
    Children {
        parent: Arc<Actor>,
        names: Arc<ClientNames>,
    },
    Actor(Arc<Actor>),
    Rule(Arc<Rule>),
    /// The decision of a server (SPEC §14: `seats`).
    Seats(Arc<Seats>),
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.how {
            How::Children { parent, .. } => write!(f, "Identity::children_of({:?})", parent.name()),
            How::Actor(actor) => write!(f, "Identity::actor({:?})", actor.name()),
            How::Rule(_) => f.write_str("Identity::rule(..)"),
            How::Seats(_) => f.write_str("Identity::seats(..)"),
        }
    }
}

impl Identity {
    /// Every session gets a fresh workspace child of `parent`, named after
    /// the client and made unique with a counter (`codex`, `codex-2`, …).
    /// The session owns it: when the session ends, the actor is dropped.
    pub fn children_of(parent: Arc<Actor>) -> Self {
        Identity {
            how: How::Children {
                parent,
                names: Arc::default(),
            },
        }
    }

    /// Every session acts as `agent`: its actor and its reservations,
    /// which outlive each session.
    pub fn agent(agent: &Agent) -> Self {
        let agent = agent.clone();
        Identity::rule(move |_| Ok(SessionActor::agent(&agent)))
    }

    /// Every session acts as `actor` (shared; the session's reservations
    /// are still its own and go when it ends).
    pub fn actor(actor: Arc<Actor>) -> Self {
        Identity {
            how: How::Actor(actor),
        }
    }

    /// A custom rule, e.g. a server mapping the bearer token of the request
    /// that opened the session to an actor. An `Err` refuses the session
    /// with that sentence.
    pub fn rule(
        rule: impl Fn(&SessionStart<'_>) -> Result<SessionActor, String> + Send + Sync + 'static,
    ) -> Self {
        Identity {
            how: How::Rule(Arc::new(rule)),
        }
    }

    /// A server's decision ([`Seats`]): it may ask the server (its
    /// session cap, a table in etcd) before it decides.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn seats(seats: Arc<Seats>) -> Self {
        Identity {
            how: How::Seats(seats),
        }
    }

    /// The server's decision, when this identity is one.
    pub(super) fn server_seats(&self) -> Option<&Seats> {
        match &self.how {
            How::Seats(seats) => Some(seats),
            _ => None,
        }
    }

    /// A workspace child of a [`children_of`](Self::children_of) identity's
    /// parent, named exactly `name` (a named agent); an error for other
    /// identities.
    pub fn parent_child(&self, name: &str) -> Result<Actor, String> {
        match &self.how {
            How::Children { parent, .. } => parent
                .child(clean_name(name), Grant::workspace(parent.root()))
                .map_err(|e| e.to_string()),
            _ => Err("this identity makes no children".to_string()),
        }
    }

    /// The actor for a session that opens as `opening` describes, however
    /// this identity decides.
    pub(super) async fn seat(&self, opening: Opening) -> Result<SessionActor, String> {
        match &self.how {
            How::Seats(seats) => seats.open(opening).await,
            _ => self.open(&opening.start()),
        }
    }

    /// The actor for a session that opens as `start` describes.
    pub fn open(&self, start: &SessionStart<'_>) -> Result<SessionActor, String> {
        match &self.how {
            How::Actor(actor) => Ok(SessionActor::owned(actor.clone())),
            How::Rule(rule) => rule(start),
            How::Seats(_) => Err("this identity decides asynchronously".to_string()),
            How::Children { parent, names } => {
                let name = names.unique(start.client_name);
                parent
                    .child(name, Grant::workspace(parent.root()))
                    .map(|child| SessionActor::owned(Arc::new(child)))
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// How many sessions took each client name: their actors are named
/// `codex`, `codex-2`, …, in one process and on either table.
#[derive(Debug, Default)]
pub(crate) struct ClientNames(Mutex<HashMap<String, usize>>);

impl ClientNames {
    /// `client_name`, cleaned, made unique among the names given so far.
    pub(crate) fn unique(&self, client_name: &str) -> String {
        let base = clean_name(client_name);
        let mut names = self.0.lock();
        let n = names.entry(base.clone()).or_insert(0);
        *n += 1;
        if *n == 1 { base } else { format!("{base}-{n}") }
    }
}

/// A client name fit for an actor name: printable, bounded.
pub(crate) fn clean_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|&c| !crate::text::deceptive(c))
        .take(handle::MAX_AGENT_NAME)
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() {
        "agent".to_string()
    } else {
        cleaned.to_string()
    }
}
