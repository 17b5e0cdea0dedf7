//! The decision of which actor an MCP session or call acts as (SPEC §14),
//! for a server's `/mcp`: by its owner (the session token or an actor
//! token), the agent it names, and its protocol era. It is written against
//! [`Host`], what it asks of the server it runs in; the server's HTTP side
//! (sessions' lifetime, the direct `tools/call` replies) implements it and
//! is not named here.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::agents::{AgentKey, AgentSlot, AgentUse, Agents, Ghost, Handle, take_agents};
use super::handle;
use super::{Agent, ClientNames, Era, Identity, Opening, SessionActor, SessionStart};
use crate::mcp::ToolSet;
use crate::mcp::table::SessionTable;
use crate::{Actor, ActorId, Grant};

/// Whose token a session or call came with: the agents of one owner are
/// apart from every other's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// The session token.
    Session,
    /// An actor token: the actor's wire number.
    Actor(u64),
}

/// What a [`Host`] answers later.
pub(crate) type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// An actor made in the session's table (etcd): its local mirror and the
/// table its holds are taken in.
pub(crate) type OnTable = (Arc<Actor>, Arc<dyn SessionTable>);

/// A session counted against its token's cap until it is kept (the session
/// opened: its end frees the place) or dropped (it never opened).
pub(crate) trait Claimed: Send {
    /// The session opened.
    fn keep(self: Box<Self>);
}

/// Which actor to make in the session's table.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum McpSeat<'a> {
    /// A new child named so of the server's MCP root: the session's (or
    /// its named agent's) own, on a lease the server keeps while it lives.
    Own(&'a str),
    /// A new child named so of the token's actor (a named agent).
    ChildOf(ActorId, &'a str),
    /// The token's actor itself, kept alive by its token's owner.
    Token(ActorId),
}

/// What the decision asks of the server it runs in.
pub(crate) trait Host: Send + Sync {
    /// Who the bearer token of `headers` is: for a request whose owner the
    /// HTTP side did not leave in its extensions.
    fn owner<'a>(&'a self, headers: Option<&'a http::HeaderMap>) -> Pending<'a, Owner>;

    /// Claims a place for one more session of `owner` under its token's
    /// cap (`--max-mcp-sessions`), or refuses it in a sentence.
    fn claim(&self, owner: &Owner) -> Result<Box<dyn Claimed>, String>;

    /// The cap: how many agents minted for calls that named none a token
    /// keeps at once.
    fn cap(&self) -> usize;

    /// Makes the actor `seat` says in the session's table: `None` in
    /// process, where the decision makes its actors itself.
    fn on_table<'a>(&'a self, seat: McpSeat<'a>) -> Pending<'a, Option<OnTable>>;

    /// In process, the actor whose workspace children session-token agents
    /// are (made once, with the first of them).
    fn root(&self) -> Result<Actor, String>;

    /// In process, the actor of actor token `n`, while its lease lives.
    fn token_actor(&self, n: u64) -> Result<Arc<Actor>, String>;

    /// This server's `host:port` when minted handles name their server
    /// (the session's table is in etcd); `None` in process.
    fn here(&self) -> Option<String>;

    /// Registers this server as one whose handles another server of the
    /// session may name, before a handle naming it is given out.
    fn register(&self) -> Pending<'_, ()>;

    /// Whether a server of the session at `server` (`host:port`) registered
    /// itself.
    fn registered<'a>(&'a self, server: &'a str) -> Pending<'a, bool>;
}

/// An agent with no session or call acting as it (the live page marks
/// them).
#[derive(Debug)]
pub(crate) struct Absent {
    /// Its handle.
    pub(crate) name: String,
    /// Its actor's wire number, while it lives.
    pub(crate) actor: Option<u64>,
    /// How long since its last user went.
    pub(crate) idle: Duration,
}

/// Decides which actor each MCP session and call acts as (SPEC §14), and
/// keeps the agents that outlive them.
pub(crate) struct Seats {
    host: Weak<dyn Host>,
    /// The agents that outlive a call, by (owner, handle).
    agents: Arc<Agents>,
    /// In process, session-token sessions get children of one root actor,
    /// so the dump shows them together. It is made with the first such
    /// session: a server no MCP client uses shows no MCP actor. (On etcd
    /// the table keeps the server's root.)
    children: OnceLock<Identity>,
    /// How many session-token sessions took each client name: their
    /// actors are named `codex`, `codex-2`, …, on either table.
    names: ClientNames,
}

/// A new agent handle. Where handles name their server (etcd: named agents
/// are each server's own, SPEC §14), the server is registered in the
/// session's table first, and the handle names it after an `@`: another
/// server of the session can then say where the handle belongs.
async fn mint(host: &dyn Host) -> Result<String, String> {
    let handle = handle::mint()?;
    let Some(here) = host.here() else {
        return Ok(handle);
    };
    host.register().await?;
    Ok(format!("{handle}@{here}"))
}

/// Refuses a handle another server of the session minted: passing it here
/// would silently make a new agent that has read nothing. Only a server
/// registered in the session's table is named (a forged handle must not
/// send a model's calls to a server of its author's choosing).
async fn elsewhere(host: &dyn Host, name: &str) -> Result<(), String> {
    let Some((_, server)) = name.split_once('@') else {
        return Ok(());
    };
    let Some(here) = host.here() else {
        return Ok(());
    };
    if !name.starts_with("agent-") || server == here {
        return Ok(());
    }
    if !host.registered(server).await? {
        return Err(
            "This agent handle was not given by any server of this session (or its \
                    server has stopped): pass a handle a result of these tools gave you, or \
                    leave out \"agent\" to act as a new agent. Nothing was done."
                .to_string(),
        );
    }
    Err(format!(
        "The agent handle \"{name}\" was given by the writ server at http://{server}, another \
         server of this session; a handle works only on the server that gave it. Send your calls \
         to http://{server}, or leave out \"agent\" to act as a new agent here. Nothing was done."
    ))
}

impl Seats {
    /// The decision of a server, asking `host`.
    pub(crate) fn new(host: Weak<dyn Host>) -> Seats {
        Seats {
            host,
            agents: Arc::default(),
            children: OnceLock::new(),
            names: ClientNames::default(),
        }
    }

    /// The server, unless it is gone.
    fn host(&self) -> Result<Arc<dyn Host>, String> {
        self.host
            .upgrade()
            .ok_or_else(|| "the server is shutting down".to_string())
    }

    /// The actor a session or call that opens as `opening` acts as.
    pub(crate) async fn open(&self, opening: Opening) -> Result<SessionActor, String> {
        let host = self.host()?;
        let host = &*host;
        let start = opening.start();
        // `/mcp` authenticated the request and left its owner in its
        // extensions; a transport without them authenticates here.
        let owner = match start.http.and_then(|p| p.extensions.get::<Owner>()) {
            Some(owner) => owner.clone(),
            None => host.owner(start.http.map(|p| &p.headers)).await?,
        };
        crate::text::check_name("an MCP client name", start.client_name)?;
        // A session counts against its token's cap (`--max-mcp-sessions`)
        // from its opening to its end; a call that names an agent inside a
        // session opens none.
        let session = match (opening.era, &opening.agent) {
            (Era::Handshake, None) => Some(host.claim(&owner)?),
            _ => None,
        };
        let asked = start
            .http
            .map(|parts| ToolSet::asked_in(&parts.uri))
            .transpose()?;
        let named = match &opening.agent {
            Some(name) => Some(name.clone()),
            None => start.http.map(handle::agent_name).transpose()?.flatten(),
        };
        if let Some(name) = &named {
            elsewhere(host, name).await?;
        }
        let actor = self.seat(host, owner, named, opening.era, &start).await?;
        if let Some(session) = session {
            session.keep();
        }
        Ok(match asked.flatten() {
            Some(tools) => actor.with_tools(tools),
            None => actor,
        })
    }

    /// SPEC §14, the table: an actor token acts as its actor (a name makes
    /// a child of it); the session token acts as the agent it names, else
    /// as a new agent whose handle writ mints, so that a client with no
    /// session to carry it (the modern revision, or a session per call)
    /// continues as its agent by passing the handle.
    async fn seat(
        &self,
        host: &dyn Host,
        owner: Owner,
        named: Option<String>,
        era: Era,
        start: &SessionStart<'_>,
    ) -> Result<SessionActor, String> {
        // An actor token's modern results name its actor; passing that
        // name back is the token's own seat, not a child of that name.
        let named = match (named, &owner) {
            (Some(name), Owner::Actor(n)) if self.token_handle(*n).as_deref() == Some(&name) => {
                None
            }
            (named, _) => named,
        };
        Ok(match (named, &owner) {
            (Some(name), _) => self.agent(host, owner, Handle::named(name)).await?,
            // A modern call has no session: its agent lives on by itself
            // (`--mcp-idle` after its last call), reservations and all.
            // It counts in its token's pool of minted agents, never
            // against its sessions (SPEC §13: a call with no identity never
            // costs another client its seat).
            (None, Owner::Session) if era == Era::Modern => {
                let key = mint(host).await?;
                self.make_room(&owner, host.cap())?;
                let handle = Handle::minted(key, self.names.unique(start.client_name), false);
                self.agent(host, owner, handle).await?
            }
            // A session's own agent, found by its handle while the session
            // lives; its actor and reservations go with the session (a
            // killed client's within the lease TTL), but what it read
            // outlives it under its handle, so a client that opens a
            // session per call continues by passing the handle.
            (None, Owner::Session) => {
                let key = mint(host).await?;
                let handle =
                    Handle::minted(key.clone(), self.names.unique(start.client_name), true);
                let seat = self.agent(host, owner.clone(), handle).await?;
                let ghost = Ghost {
                    agents: Arc::downgrade(&self.agents),
                    key: (owner, key),
                };
                seat.keeping(Arc::new(ghost))
            }
            (None, Owner::Actor(n)) if era == Era::Modern => self.token_agent(host, *n).await?,
            (None, Owner::Actor(n)) => match host.on_table(McpSeat::Token(ActorId(*n))).await? {
                Some((mirror, table)) => SessionActor::owned(mirror).on_table(table),
                None => SessionActor::shared(&host.token_actor(*n)?),
            },
        })
    }

    /// A session or call acting as the agent of `key`, counted as its
    /// user while it lives (the agents' lock held).
    fn use_agent(
        &self,
        agents: &mut HashMap<AgentKey, AgentSlot>,
        key: &AgentKey,
    ) -> Option<SessionActor> {
        let slot = agents.get_mut(key)?;
        let agent = slot.agent.as_ref()?;
        let seat = SessionActor::agent(agent).bound_to_session(slot.bound);
        slot.users += 1;
        slot.last = Instant::now();
        let user = AgentUse {
            agents: Arc::downgrade(&self.agents),
            key: key.clone(),
        };
        Some(seat.keeping(Arc::new(user)))
    }

    /// The agent `name` of `owner`'s token, made on first use: what
    /// `files.run {agent}` acts as, the same agent `/mcp` sessions naming
    /// it act as.
    pub(crate) async fn named(&self, owner: Owner, name: String) -> Result<SessionActor, String> {
        let host = self.host()?;
        self.agent(&*host, owner, Handle::named(name)).await
    }

    /// A named (or minted) agent's actor: all sessions and calls of one
    /// (token, handle) share it.
    ///
    /// A name `PARENT/CHILD` names a subagent (SPEC §14 subagents): the
    /// agent CHILD as a child actor of the named agent PARENT (its own
    /// marks and holds, PARENT's turn), both made on first use; PARENT
    /// lives while CHILD does, and dropping PARENT drops CHILD.
    async fn agent(
        &self,
        host: &dyn Host,
        owner: Owner,
        handle: Handle,
    ) -> Result<SessionActor, String> {
        let key = (owner.clone(), handle.key.clone());
        let named = |seat: SessionActor| seat.with_handle(handle.clone());
        let name = handle.actor.as_str();
        if let Some(seat) = self.use_agent(&mut self.agents.lock(), &key) {
            return Ok(named(seat));
        }
        let parent = match handle.key.rsplit_once('/') {
            Some((parent, child)) => {
                if parent.split('/').any(str::is_empty) || child.is_empty() {
                    return Err(format!(
                        "The agent name \"{}\" has an empty part: a subagent is named \
                         \"PARENT/CHILD\" (for example \"claude-1a2b3c4d/5e6f7a8b\"). Nothing was done.",
                        handle.key
                    ));
                }
                let parent = Handle::named(parent.to_string());
                Some(Box::pin(self.agent(host, owner.clone(), parent)).await?)
            }
            None => None,
        };
        let table_parent = match &parent {
            Some(parent) => Some(parent.table_actor()?),
            None => None,
        };
        let seat = match (&owner, table_parent.flatten()) {
            (_, Some(parent)) => McpSeat::ChildOf(parent, name),
            (Owner::Session, None) => McpSeat::Own(name),
            (Owner::Actor(n), None) => McpSeat::ChildOf(ActorId(*n), name),
        };
        // On etcd the actor is made first (that awaits); in process, under
        // the lock. A racing first session of the agent may have made it
        // meanwhile: the first one stays, one made here goes.
        let made = host.on_table(seat).await;
        let mut agents = self.agents.lock();
        if let Some(seat) = self.use_agent(&mut agents, &key) {
            return Ok(named(seat));
        }
        let agent = match made? {
            Some((mirror, table)) => Agent::new(mirror).on_table(table),
            None => {
                let of = |parent: &Actor| {
                    parent
                        .child(name.to_string(), Grant::workspace(parent.root()))
                        .map_err(|e| e.to_string())
                };
                let actor = match (&parent, &owner) {
                    (Some(parent), _) => of(&*parent.actor()?),
                    (None, Owner::Session) => self.mcp_root(host)?.parent_child(name),
                    (None, Owner::Actor(n)) => of(&*host.token_actor(*n)?),
                }?;
                Agent::new(Arc::new(actor))
            }
        };
        self.keep(&mut agents, key, agent, &handle, parent)
            .map(named)
    }

    /// Makes room in `owner`'s pool of minted agents (modern calls' that
    /// named none, and what ended sessions read) for one more: at `max`,
    /// the longest idle goes, with its reservations. A call with no
    /// identity never costs another client its seat, and never grows the
    /// server without bound.
    fn make_room(&self, owner: &Owner, max: usize) -> Result<(), String> {
        let evicted = {
            let mut agents = self.agents.lock();
            let minted = || {
                agents
                    .iter()
                    .filter(|((of, _), slot)| of == owner && slot.minted)
            };
            if minted().count() < max {
                return Ok(());
            }
            let idlest = minted()
                .filter(|(_, slot)| slot.users == 0)
                .min_by_key(|(_, slot)| slot.last)
                .map(|(key, _)| key.clone());
            match idlest {
                Some(key) => take_agents(&mut agents, vec![key]),
                None => {
                    return Err(format!(
                        "{max} agents of calls that passed no `agent` are working right now, the \
                         server's bound for this token; pass \"agent\" (the handle an earlier \
                         result gave you) and retry. Nothing was done."
                    ));
                }
            }
        };
        drop(evicted);
        Ok(())
    }

    /// The handle an actor token's modern seat names: its actor's name,
    /// once the seat exists.
    fn token_handle(&self, n: u64) -> Option<String> {
        let agents = self.agents.lock();
        let slot = agents.get(&(Owner::Actor(n), String::new()))?;
        Some(slot.agent.as_ref()?.actor()?.name().to_string())
    }

    /// An actor token's own seat for modern calls: its actor, with
    /// reservations that outlive each call (there is no session to keep
    /// them) but never the actor, which its lease keeps.
    async fn token_agent(&self, host: &dyn Host, n: u64) -> Result<SessionActor, String> {
        let key = (Owner::Actor(n), String::new());
        let named = |seat: SessionActor| {
            let name = seat.actor()?.name().to_string();
            Ok(seat.with_handle(Handle::named(name)))
        };
        if let Some(seat) = self.use_agent(&mut self.agents.lock(), &key) {
            return named(seat);
        }
        let made = host.on_table(McpSeat::Token(ActorId(n))).await;
        let mut agents = self.agents.lock();
        if let Some(seat) = self.use_agent(&mut agents, &key) {
            return named(seat);
        }
        let agent = match made? {
            Some((mirror, table)) => Agent::new(mirror).on_table(table),
            None => Agent::of_shared(&host.token_actor(n)?),
        };
        let handle = Handle::named(String::new());
        named(self.keep(&mut agents, key, agent, &handle, None)?)
    }

    /// Keeps a new agent under `key`, seated once; it takes over the
    /// reads an ended session left under the handle.
    fn keep(
        &self,
        agents: &mut HashMap<AgentKey, AgentSlot>,
        key: AgentKey,
        agent: Agent,
        handle: &Handle,
        parent: Option<SessionActor>,
    ) -> Result<SessionActor, String> {
        // What is there is reads only (`use_agent` found no agent): no
        // guard of it takes the lock on its drop.
        let (marks, users) = agents
            .remove(&key)
            .map(|ghost| (ghost.marks, ghost.users))
            .unwrap_or_default();
        if let Some(actor) = agent.actor() {
            for mark in marks {
                // A read of a path the new actor may not read is dropped.
                let _ = actor.add_mark(mark);
            }
        }
        let mut slot = AgentSlot::new(Some(agent), Vec::new());
        slot.minted = handle.minted && !handle.bound;
        slot.bound = handle.bound;
        slot.parent = parent;
        slot.users = users;
        agents.insert(key.clone(), slot);
        self.use_agent(agents, &key)
            .ok_or_else(|| "the agent went as it was made".to_string())
    }

    /// The in-process MCP root: session-token agents are its children.
    fn mcp_root(&self, host: &dyn Host) -> Result<&Identity, String> {
        if let Some(children) = self.children.get() {
            return Ok(children);
        }
        let root = host.root()?;
        // A racing first session may have won; its root stays.
        Ok(self
            .children
            .get_or_init(|| Identity::children_of(Arc::new(root))))
    }

    /// Drops the agents `gone` picks (by owner, handle, whether a session
    /// or call acts as it, and when its last user went), with their
    /// subagents and reservations; how many it picked (its subagents not
    /// counted). They are dropped after the agents' lock is released: a dropped
    /// agent's guards take that lock again.
    pub(crate) fn drop_agents(&self, gone: impl Fn(&Owner, &str, bool, Instant) -> bool) -> usize {
        let (count, dropped) = {
            let mut agents = self.agents.lock();
            let keys: Vec<AgentKey> = agents
                .iter()
                .filter(|((owner, name), slot)| gone(owner, name, slot.users > 0, slot.last))
                .map(|(key, _)| key.clone())
                .collect();
            (keys.len(), take_agents(&mut agents, keys))
        };
        drop(dropped);
        count
    }

    /// The named agents no session or call acts as now.
    pub(crate) fn absent(&self) -> Vec<Absent> {
        let now = Instant::now();
        self.agents
            .lock()
            .iter()
            .filter(|((_, name), slot)| !name.is_empty() && slot.users == 0 && slot.agent.is_some())
            .map(|((_, name), slot)| Absent {
                name: name.clone(),
                actor: slot.agent.as_ref().and_then(Agent::actor).map(|a| a.id().0),
                idle: now.saturating_duration_since(slot.last),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::{Config, Scheduler};

    /// A server in process with one actor token (7), a cap of two, and
    /// its claims counted.
    struct Fake {
        sched: Scheduler,
        root: std::path::PathBuf,
        token: Arc<Actor>,
        kept: Arc<AtomicUsize>,
        claimed: AtomicUsize,
    }

    struct FakeClaim(Arc<AtomicUsize>);

    impl Claimed for FakeClaim {
        fn keep(self: Box<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Host for Fake {
        fn owner<'a>(&'a self, _: Option<&'a http::HeaderMap>) -> Pending<'a, Owner> {
            Box::pin(async { Ok(Owner::Session) })
        }
        fn claim(&self, _: &Owner) -> Result<Box<dyn Claimed>, String> {
            self.claimed.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(FakeClaim(self.kept.clone())))
        }
        fn cap(&self) -> usize {
            2
        }
        fn on_table<'a>(&'a self, _: McpSeat<'a>) -> Pending<'a, Option<OnTable>> {
            Box::pin(async { Ok(None) })
        }
        fn root(&self) -> Result<Actor, String> {
            self.sched
                .actor("mcp", Grant::workspace(&self.root))
                .map_err(|e| e.to_string())
        }
        fn token_actor(&self, n: u64) -> Result<Arc<Actor>, String> {
            match n {
                7 => Ok(self.token.clone()),
                _ => Err("this token's actor is gone".to_string()),
            }
        }
        fn here(&self) -> Option<String> {
            None
        }
        fn register(&self) -> Pending<'_, ()> {
            Box::pin(async { Ok(()) })
        }
        fn registered<'a>(&'a self, _: &'a str) -> Pending<'a, bool> {
            Box::pin(async { Ok(false) })
        }
    }

    fn opening(owner: Owner, agent: Option<&str>, era: Era) -> Opening {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(owner);
        Opening {
            client_name: "codex".to_string(),
            http: Some(parts),
            agent: agent.map(str::to_string),
            era,
        }
    }

    fn key(seat: &SessionActor) -> Option<(String, bool)> {
        seat.handle.as_ref().map(|h| (h.key.clone(), h.minted))
    }

    #[tokio::test]
    async fn the_table_seats_each_owner_named_agent_and_era() {
        let dir = tempfile::tempdir().unwrap();
        let sched = Scheduler::new(Config::default());
        let token = Arc::new(sched.actor("tok", Grant::workspace(dir.path())).unwrap());
        let fake = Arc::new(Fake {
            sched,
            root: dir.path().to_path_buf(),
            token: token.clone(),
            kept: Arc::default(),
            claimed: AtomicUsize::new(0),
        });
        let host: Arc<dyn Host> = fake.clone();
        let seats = Seats::new(Arc::downgrade(&host));
        let session = |agent, era| seats.open(opening(Owner::Session, agent, era));
        let token_of = |agent, era| seats.open(opening(Owner::Actor(7), agent, era));

        // The session token's handshake session: its own minted agent,
        // bound to it, counted against the cap.
        let own = session(None, Era::Handshake).await.unwrap();
        let (handle, minted) = key(&own).unwrap();
        assert!(handle.starts_with("agent-") && minted && own.bound);
        assert_eq!(own.actor().unwrap().name(), "codex");
        // A modern call: a minted agent of its own, not bound, no session.
        let call = session(None, Era::Modern).await.unwrap();
        assert!(key(&call).unwrap().1 && !call.bound);
        assert_eq!(call.actor().unwrap().name(), "codex-2");
        // Passing a handle acts as that agent.
        let again = session(Some(&handle), Era::Modern).await.unwrap();
        assert_eq!(again.actor().unwrap().id(), own.actor().unwrap().id());
        // A named agent is one actor for every call naming it.
        let lead = session(Some("lead"), Era::Modern).await.unwrap();
        let lead_again = session(Some("lead"), Era::Handshake).await.unwrap();
        assert_eq!(key(&lead), Some(("lead".to_string(), false)));
        assert_eq!(lead.actor().unwrap().id(), lead_again.actor().unwrap().id());

        // An actor token's modern call acts as its actor, named by it, and
        // passing that name back is the same seat, not a child so named.
        let mine = token_of(None, Era::Modern).await.unwrap();
        assert_eq!(mine.actor().unwrap().id(), token.id());
        assert_eq!(key(&mine), Some(("tok".to_string(), false)));
        let back = token_of(Some("tok"), Era::Modern).await.unwrap();
        assert_eq!(back.actor().unwrap().id(), token.id());
        // Its handshake session acts as its actor with no handle; a name
        // makes a child of it.
        let plain = token_of(None, Era::Handshake).await.unwrap();
        assert_eq!(plain.actor().unwrap().id(), token.id());
        assert!(key(&plain).is_none());
        let sub = token_of(Some("sub"), Era::Handshake).await.unwrap();
        assert_eq!(sub.actor().unwrap().name(), "sub");
        assert_ne!(sub.actor().unwrap().id(), token.id());

        // Only handshake sessions that name no agent take a place under
        // the cap; each that opened keeps it.
        assert_eq!(fake.claimed.load(Ordering::SeqCst), 2);
        assert_eq!(fake.kept.load(Ordering::SeqCst), 2);

        // Modern calls that name no agent share a pool of the cap's size:
        // at the bound, the longest idle goes; when every one is in use,
        // the call is refused.
        let second = session(None, Era::Modern).await.unwrap();
        let refused = session(None, Era::Modern).await.err().unwrap_or_default();
        assert!(refused.contains("working right now"), "{refused}");
        drop(call);
        let third = session(None, Era::Modern).await.unwrap();
        assert_ne!(key(&third), key(&second));
    }
}
