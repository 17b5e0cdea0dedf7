//! Who an MCP call acts as (SPEC §14), for `/mcp` on `writ serve`: the
//! agents that outlive a call (named with `Writ-Agent`, minted as handles,
//! an actor token's own), what keeps each alive (its sessions and calls,
//! then `--mcp-idle`; what an ended session read, as a [`Ghost`]), the
//! bound on minted agents, and [`Seats`], the one decision of which actor
//! a session or call gets: by its caller (session token or actor token),
//! the agent it names, and its protocol era. The HTTP side, sessions'
//! lifetime and the direct `tools/call` replies, is `super`'s.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::Mutex;

use super::super::auth::{self, Caller};
use super::super::rpc::{App, McpSeat};
use crate::mcp::handle;
use crate::mcp::{Agent, ClientNames, Era, Identity, Opening, SessionActor, SessionStart, ToolSet};
use crate::{Grant, Result};

/// The agents of `/mcp` that outlive a call: (caller, name) → the agent.
/// A named or minted agent is keyed by its name; an actor token's own
/// reservations across modern calls by the empty name (no agent is named
/// so).
pub(super) type Agents = Mutex<HashMap<AgentKey, AgentSlot>>;

pub(super) type AgentKey = (Caller, String);

/// An agent and what keeps it alive.
pub(super) struct AgentSlot {
    /// The agent; `None` for what a session's own agent left behind when
    /// the session ended ([`Ghost`]): only its reads, until a call names
    /// its handle and an agent takes them over.
    pub(super) agent: Option<Agent>,
    /// The reads an agent made under this handle takes over.
    pub(super) marks: Vec<crate::ReadMark>,
    /// Made for calls that named no agent and outliving them (a modern
    /// call's agent, a session's reads after it ended): counted in the
    /// token's pool of such agents, where the longest idle makes room
    /// ([`Seats::make_room`]), never against its sessions.
    pub(super) minted: bool,
    /// A handshake session's own agent: it ends with that session
    /// ([`Ghost`]), whoever else passes its handle meanwhile.
    pub(super) bound: bool,
    /// A subagent's parent agent (`PARENT/CHILD`), kept alive while its
    /// child lives.
    pub(super) parent: Option<SessionActor>,
    /// The sessions and calls acting as it now ([`AgentUse`]).
    pub(super) users: usize,
    /// When its last user went.
    pub(super) last: Instant,
}

impl AgentSlot {
    fn new(agent: Option<Agent>, marks: Vec<crate::ReadMark>) -> Self {
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
pub(super) fn take_agents(
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
                .filter(|(caller, name)| *caller == key.0 && name.starts_with(&prefix))
                .cloned(),
        );
    }
    taken
}

/// One session or call acting as an agent: the agent lives while one does,
/// then `--mcp-idle` after the last.
pub(super) struct AgentUse {
    agents: Weak<Agents>,
    key: AgentKey,
}

/// The end of a handshake-era session's own agent (SPEC §14). While the
/// session lives, its agent is found by its handle like any other: another
/// session or call passing the handle acts as it at once (one agent, one
/// set of marks). When the session ends, the agent's actor and
/// reservations go with it, and its read marks stay under the handle for
/// `--mcp-idle`, so a later session or call passing the handle has read
/// what the session read. Nothing else outlives the session.
pub(super) struct Ghost {
    agents: Weak<Agents>,
    key: AgentKey,
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

/// The agent a request names: the `Writ-Agent` header (or its mirrored
/// `Mcp-Param-Writ-Agent`), else `?agent=` on the URL. An empty name is no
/// name.
pub(super) fn agent_name(
    parts: &axum::http::request::Parts,
) -> std::result::Result<Option<String>, String> {
    if let Some(name) = handle::header_agent(&parts.headers)? {
        return Ok(Some(name));
    }
    let from_query = parts.uri.query().and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.strip_prefix("agent="))
            .next_back()
            .map(percent_decode)
    });
    match from_query {
        Some(name) => handle::checked_name(&name),
        None => Ok(None),
    }
}

/// `%XX` and `+` of a query value, decoded; invalid escapes stay as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A new agent handle. On etcd, named agents are each server's own (SPEC
/// §14), so a handle minted there names its server after an `@`, and the
/// server is registered in the session's table first: another server of
/// the session can then say where the handle belongs.
async fn mint(app: &App) -> std::result::Result<String, String> {
    let handle = handle::mint()?;
    if !app.in_etcd() {
        return Ok(handle);
    }
    app.mcp_register().await.map_err(|e| e.to_string())?;
    Ok(format!("{handle}@{}", authority(&app.url)))
}

/// `host:port` of a server's URL.
fn authority(url: &str) -> &str {
    url.strip_prefix("http://").unwrap_or(url)
}

/// Refuses a handle another server of the session minted: passing it here
/// would silently make a new agent that has read nothing. Only a server
/// registered in the session's table is named (a forged handle must not
/// send a model's calls to a server of its author's choosing).
async fn elsewhere(app: &App, name: &str) -> std::result::Result<(), String> {
    let Some((_, server)) = name.split_once('@') else {
        return Ok(());
    };
    if !app.in_etcd() || !name.starts_with("agent-") || server == authority(&app.url) {
        return Ok(());
    }
    if !app
        .mcp_registered(server)
        .await
        .map_err(|e| e.to_string())?
    {
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

/// An agent as a call or session names it: the handle it is found by, and
/// the name of its actor.
pub(super) struct Handle {
    key: String,
    actor: String,
    /// Writ made the handle for a caller that named no agent.
    minted: bool,
    /// The agent ends with the session it is made for ([`Ghost`]).
    bound: bool,
}

impl Handle {
    /// An agent the caller named: its actor bears the name.
    fn named(name: String) -> Self {
        Handle {
            key: name.clone(),
            actor: name,
            minted: false,
            bound: false,
        }
    }

    /// A handle writ mints for a caller that named no agent; its actor is
    /// named after the client.
    fn minted(key: String, actor: String, bound: bool) -> Self {
        Handle {
            key,
            actor,
            minted: true,
            bound,
        }
    }
}

/// Decides which actor each MCP session acts as (SPEC §14).
pub(super) struct Seats {
    app: Weak<App>,
    /// The named agents, shared with `/mcp`'s reaper.
    agents: Arc<Agents>,
    /// In process, session-token sessions get children of one root actor,
    /// so the dump shows them together. It is made with the first such
    /// session: a server no MCP client uses shows no MCP actor. (On etcd
    /// the table keeps the server's root: `rpc/etcd/mcp_table`.)
    children: OnceLock<Identity>,
    /// How many session-token sessions took each client name: their
    /// actors are named `codex`, `codex-2`, …, on either table.
    names: ClientNames,
}

impl Seats {
    /// The decision for `app`'s `/mcp`, sharing its agents with the reaper.
    pub(super) fn new(app: &Arc<App>, agents: Arc<Agents>) -> Seats {
        Seats {
            app: Arc::downgrade(app),
            agents,
            children: OnceLock::new(),
            names: ClientNames::default(),
        }
    }

    pub(super) async fn open(&self, opening: Opening) -> std::result::Result<SessionActor, String> {
        let app = self
            .app
            .upgrade()
            .ok_or_else(|| "the server is shutting down".to_string())?;
        let start = opening.start();
        // `/mcp` authenticated the request and left who called in its
        // extensions; a transport without them authenticates here.
        let caller = match start.http.and_then(|p| p.extensions.get::<Caller>()) {
            Some(caller) => caller.clone(),
            None => app
                .authenticate_any(start.http.map(|p| &p.headers).and_then(auth::bearer))
                .await
                .map_err(|e| e.to_string())?,
        };
        crate::text::check_name("an MCP client name", start.client_name)?;
        // A session counts against its token's cap (`--max-mcp-sessions`)
        // from its opening to its end; a call that names an agent inside a
        // session opens none.
        let session = match (opening.era, &opening.agent) {
            (Era::Handshake, None) => Some(app.mcp_sessions.claim(&caller)?),
            _ => None,
        };
        let asked = start
            .http
            .map(|parts| ToolSet::asked_in(&parts.uri))
            .transpose()?;
        let named = match &opening.agent {
            Some(name) => Some(name.clone()),
            None => start.http.map(agent_name).transpose()?.flatten(),
        };
        // SPEC §14: an actor token acts as its actor (a name makes a child
        // of it); the session token acts as the agent it names, else as a
        // new agent whose handle writ mints, so that a client with no
        // session to carry it (the modern revision, or a session per call)
        // continues as its agent by passing the handle.
        if let Some(name) = &named {
            elsewhere(&app, name).await?;
        }
        // An actor token's modern results name its actor; passing that
        // name back is the token's own seat, not a child of that name.
        let named = match (named, &caller) {
            (Some(name), Caller::Actor(n)) if self.token_handle(*n).as_deref() == Some(&name) => {
                None
            }
            (named, _) => named,
        };
        let actor = match (named, &caller) {
            (Some(name), _) => self.agent(&app, caller, Handle::named(name)).await?,
            // A modern call has no session: its agent lives on by itself
            // (`--mcp-idle` after its last call), reservations and all.
            // It counts in its token's pool of minted agents, never
            // against its sessions (SPEC §13: a call with no identity never
            // costs another client its seat).
            (None, Caller::Session) if opening.era == Era::Modern => {
                let key = mint(&app).await?;
                self.make_room(&caller, app.mcp_sessions.max())?;
                let handle = Handle::minted(key, self.unique(start.client_name), false);
                self.agent(&app, caller, handle).await?
            }
            // A session's own agent, found by its handle while the session
            // lives; its actor and reservations go with the session (a
            // killed client's within the lease TTL), but what it read
            // outlives it under its handle, so a client that opens a
            // session per call continues by passing the handle.
            (None, Caller::Session) => {
                let key = mint(&app).await?;
                let handle = Handle::minted(key.clone(), self.unique(start.client_name), true);
                let seat = self.agent(&app, caller.clone(), handle).await?;
                let ghost = Ghost {
                    agents: Arc::downgrade(&self.agents),
                    key: (caller, key),
                };
                seat.keeping(Arc::new(ghost))
            }
            (None, Caller::Actor(n)) if opening.era == Era::Modern => {
                self.token_agent(&app, *n).await?
            }
            (None, Caller::Actor(_)) => self.unnamed(&app, caller, &start).await?,
        };
        if let Some(session) = session {
            session.keep();
        }
        Ok(match asked.flatten() {
            Some(tools) => actor.with_tools(tools),
            None => actor,
        })
    }

    /// A session or call acting as the agent of `key`, counted as its
    /// user while it lives (the agents' lock held).
    fn seat(
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

    /// The agent `name` of `caller`'s token, made on first use: what
    /// `files.run {agent}` acts as, the same agent `/mcp` sessions naming
    /// it act as.
    pub(super) async fn named(
        &self,
        app: &App,
        caller: Caller,
        name: String,
    ) -> std::result::Result<SessionActor, String> {
        self.agent(app, caller, Handle::named(name)).await
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
        app: &App,
        caller: Caller,
        handle: Handle,
    ) -> std::result::Result<SessionActor, String> {
        let key = (caller.clone(), handle.key.clone());
        let named = |seat: SessionActor| seat.with_handle(&handle.key, handle.minted);
        let name = &handle.actor;
        if let Some(seat) = self.seat(&mut self.agents.lock(), &key) {
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
                Some(Box::pin(self.agent(app, caller.clone(), parent)).await?)
            }
            None => None,
        };
        let table_parent = match &parent {
            Some(parent) => Some(parent.table_actor()?),
            None => None,
        };
        let seat = match (&caller, table_parent.flatten()) {
            (_, Some(parent)) => McpSeat::ChildOf(parent, name),
            (Caller::Session, None) => McpSeat::Own(name),
            (Caller::Actor(n), None) => McpSeat::ChildOf(crate::ActorId(*n), name),
        };
        // On etcd the actor is made first (that awaits); in process, under
        // the lock. A racing first session of the agent may have made it
        // meanwhile: the first one stays, one made here goes.
        let made = app.mcp_seat(seat).await;
        let mut agents = self.agents.lock();
        if let Some(seat) = self.seat(&mut agents, &key) {
            return Ok(named(seat));
        }
        let agent = match made {
            Some(made) => {
                let (mirror, table) = made.map_err(|e| e.to_string())?;
                Agent::new(mirror).on_table(table)
            }
            None => {
                let of = |parent: &crate::Actor| {
                    parent
                        .child(name.clone(), Grant::workspace(parent.root()))
                        .map_err(|e| e.to_string())
                };
                let actor = match (&parent, &caller) {
                    (Some(parent), _) => of(&*parent.actor()?),
                    (None, Caller::Session) => self.mcp_root(app)?.parent_child(name),
                    (None, Caller::Actor(n)) => of(&*token_actor(app, *n)?),
                }?;
                Agent::new(Arc::new(actor))
            }
        };
        self.keep(&mut agents, key, agent, &handle, parent)
            .map(named)
    }

    /// Makes room in `caller`'s pool of minted agents (modern calls' that
    /// named none, and what ended sessions read) for one more: at `max`,
    /// the longest idle goes, with its reservations. A call with no
    /// identity never costs another client its seat, and never grows the
    /// server without bound.
    fn make_room(&self, caller: &Caller, max: usize) -> std::result::Result<(), String> {
        let evicted = {
            let mut agents = self.agents.lock();
            let minted = || {
                agents
                    .iter()
                    .filter(|((of, _), slot)| of == caller && slot.minted)
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
        let slot = agents.get(&(Caller::Actor(n), String::new()))?;
        Some(slot.agent.as_ref()?.actor()?.name().to_string())
    }

    /// An actor token's own seat for modern calls: its actor, with
    /// reservations that outlive each call (there is no session to keep
    /// them) but never the actor, which its lease keeps.
    async fn token_agent(&self, app: &App, n: u64) -> std::result::Result<SessionActor, String> {
        let key = (Caller::Actor(n), String::new());
        let named = |seat: SessionActor| {
            let name = seat.actor()?.name().to_string();
            Ok(seat.with_handle(&name, false))
        };
        if let Some(seat) = self.seat(&mut self.agents.lock(), &key) {
            return named(seat);
        }
        let made = app.mcp_seat(McpSeat::Token(crate::ActorId(n))).await;
        let mut agents = self.agents.lock();
        if let Some(seat) = self.seat(&mut agents, &key) {
            return named(seat);
        }
        let agent = match made {
            Some(made) => {
                let (mirror, table) = made.map_err(|e| e.to_string())?;
                Agent::new(mirror).on_table(table)
            }
            None => Agent::of_shared(&token_actor(app, n)?),
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
    ) -> std::result::Result<SessionActor, String> {
        // What is there is reads only (`seat` found no agent): no guard
        // of it takes the lock on its drop.
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
        self.seat(agents, &key)
            .ok_or_else(|| "the agent went as it was made".to_string())
    }

    /// The actor of a session that names no agent: a fresh child of the
    /// MCP root named after the client (session token), or the token's
    /// actor.
    async fn unnamed(
        &self,
        app: &App,
        caller: Caller,
        start: &SessionStart<'_>,
    ) -> std::result::Result<SessionActor, String> {
        match caller {
            Caller::Session => {
                let name = self.unique(start.client_name);
                match app.mcp_seat(McpSeat::Own(&name)).await {
                    Some(made) => on_table(made),
                    None => self
                        .mcp_root(app)?
                        .parent_child(&name)
                        .map(|child| SessionActor::owned(Arc::new(child))),
                }
            }
            Caller::Actor(n) => match app.mcp_seat(McpSeat::Token(crate::ActorId(n))).await {
                Some(made) => on_table(made),
                None => Ok(SessionActor::shared(&token_actor(app, n)?)),
            },
        }
    }

    /// The in-process MCP root actor: session-token sessions' actors are
    /// its children.
    fn mcp_root(&self, app: &App) -> std::result::Result<&Identity, String> {
        if let Some(children) = self.children.get() {
            return Ok(children);
        }
        let root = app
            .sched
            .actor("mcp", Grant::workspace(&app.root))
            .map_err(|e| e.to_string())?;
        // A racing first session may have won; its root stays.
        Ok(self
            .children
            .get_or_init(|| Identity::children_of(Arc::new(root))))
    }

    /// A client name made unique among this server's sessions.
    fn unique(&self, client_name: &str) -> String {
        self.names.unique(client_name)
    }
}

/// A session acting as an actor of the table in etcd: its mirror, its
/// holds taken in `table`.
fn on_table(
    made: Result<(Arc<crate::Actor>, Arc<dyn crate::mcp::table::SessionTable>)>,
) -> std::result::Result<SessionActor, String> {
    let (mirror, table) = made.map_err(|e| e.to_string())?;
    Ok(SessionActor::owned(mirror).on_table(table))
}

/// The in-process actor of an actor token.
fn token_actor(app: &App, n: u64) -> std::result::Result<Arc<crate::Actor>, String> {
    app.registry()
        .actors
        .get(&n)
        .map(|slot| slot.actor.clone())
        .ok_or_else(|| "this token's actor is gone".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_an_agent_takes_its_subagents_and_only_its_own() {
        let mut agents: HashMap<AgentKey, AgentSlot> = HashMap::new();
        let session = |name: &str| (Caller::Session, name.to_string());
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
            (Caller::Actor(7), "lead/one".into()),
            AgentSlot::new(None, Vec::new()),
        );
        let taken = take_agents(&mut agents, vec![session("lead")]);
        assert_eq!(taken.len(), 4);
        let mut left: Vec<String> = agents.keys().map(|(_, name)| name.clone()).collect();
        left.sort();
        assert_eq!(left, ["lead/one", "leader", "other/lead"]);
    }
}
