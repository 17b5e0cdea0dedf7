//! `/mcp`: writ's file tools over MCP Streamable HTTP (features `server` and
//! `mcp`).
//!
//! Every request passes the same checks as `/rpc` (a loopback `Origin`, a
//! known bearer token) before rmcp sees it. The token of the request that
//! opens an MCP session decides its actor: an actor token acts as that actor
//! (the session never keeps it alive: when its lease ends, the session's
//! calls are refused); the session token gets a fresh workspace actor named
//! after `clientInfo.name`, a child of the server's MCP root actor, owned by
//! the MCP session.
//!
//! A session may name its agent (`Writ-Agent: NAME`, or `?agent=NAME`):
//! all sessions of one (token, name) share one actor — its read marks, its
//! reservations, its turn — so a client that opens a session per tool call
//! keeps what it read. With the session token the agent is a workspace
//! child of the MCP root actor named NAME; with an actor token, a child of
//! that token's actor.
//!
//! Lifetime follows the client, not its call rate (a model thinks for
//! minutes between calls): a session with an open GET stream is alive (an
//! SSE comment every few seconds tells a dead peer); one whose stream is
//! gone ends `--lease-ttl` after that; one with neither ends `--mcp-idle`
//! after its last request; DELETE (answered 200) ends it at once. An
//! unnamed session's actor and reservations go with it; a named agent lives
//! while any of its sessions lives, then `--mcp-idle`.
//!
//! An MCP session belongs to the token that opened it: a request naming the
//! session (`Mcp-Session-Id`) with any other token, even a valid one (another
//! actor's, or the session token on an actor's session), is refused with 403
//! and reaches nothing, so a leaked session id gives no one else the
//! session's actor or its reservations.
//!
//! `tools/call` on an open session is answered by `/mcp` itself, as one
//! JSON reply (`application/json`, which Streamable HTTP lets a server choose
//! per request), straight from the session's tools: rmcp's session worker,
//! its channels and its parse of the whole message cost more than the tool
//! (docs/PERFORMANCE.md). Everything else, and any request this path is not
//! sure of (a protocol revision with per-request headers, no
//! `Content-Length`, JSON it cannot read), goes to rmcp unchanged. Because
//! of that, rmcp does not see every request of a session, so `/mcp` keeps
//! each session's clock itself.
//!
//! The session's tool set is the server's (`--mcp-tools`) unless the URL
//! that opens it asks for one: `/mcp?tools=filesystem` serves the reference
//! filesystem server's tools (`writ mcp --tools filesystem` bridges so).
//!
//! On a server whose session's table is in etcd, the same rules hold with
//! the actors in etcd (`rpc/etcd/mcp_table`): a session-token session acts
//! as a new child of this server's MCP root in the table, on a lease this
//! server renews while the session (or its named agent) lives, an actor token's session acts as
//! that actor, and every hold a tool takes is taken in etcd, so agents on
//! every server of the session see each other. Named agents are this
//! server's.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::any;
use http_body_util::BodyExt as _;
use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ProtocolVersion, RequestId,
};
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::auth::{self, Caller};
use super::rpc::{App, McpSeat};
use crate::mcp::handle;
use crate::mcp::{
    Agent, Era, Identity, Opening, OpeningSlot, SessionActor, SessionStart, SessionTools,
    ToolOptions, ToolServer, ToolSet,
};
use crate::{Error, Grant, ProtocolError, Result};

/// The header that names an MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// Adds `/mcp` to the server's routes.
pub(crate) fn mount(router: Router<Arc<App>>, app: &Arc<App>) -> Result<Router<Arc<App>>> {
    let mut sessions = LocalSessionManager::default();
    // `/mcp` ends idle sessions itself (see `reap`): rmcp's own timer would
    // count only the requests it sees.
    sessions.session_config.keep_alive = None;
    let sessions = Arc::new(sessions);
    let agents: Arc<Agents> = Arc::default();
    let seats = Arc::new(Seats {
        app: Arc::downgrade(app),
        agents: agents.clone(),
        children: OnceLock::new(),
        names: Mutex::default(),
    });
    let mcp = Arc::new(Mcp {
        app: Arc::downgrade(app),
        service: service(app, sessions.clone(), seats.clone())?,
        sessions,
        live: Mutex::default(),
        agents,
        seats,
        ttl: app.ttl,
        idle: app.mcp_idle,
        max_body: app.max_body,
    });
    tokio::spawn(reap(Arc::downgrade(&mcp)));
    let named: std::sync::Weak<dyn super::rpc::NamedAgents> = Arc::downgrade(&mcp) as _;
    let _ = app.named_agents.set(named);
    let gone = Arc::downgrade(&mcp);
    let _ = app
        .on_actors_gone
        .set(super::rpc::ActorsGone(Box::new(move |ids| {
            if let Some(mcp) = gone.upgrade() {
                tokio::spawn(async move { mcp.actors_gone(&ids).await });
            }
        })));
    Ok(router.route(
        "/mcp",
        any(move |State(app): State<Arc<App>>, request: Request| {
            let mcp = mcp.clone();
            async move { mcp.handle(&app, request).await }
        }),
    ))
}

type Service = StreamableHttpService<ToolServer, LocalSessionManager>;

/// `/mcp`: rmcp's service, and what writ keeps of each of its sessions.
struct Mcp {
    /// The server: its metrics count sessions.
    app: Weak<App>,
    service: Service,
    sessions: Arc<LocalSessionManager>,
    /// The open sessions, by session id.
    live: Mutex<HashMap<String, Live>>,
    /// The named agents, by the token and name their sessions gave.
    agents: Arc<Agents>,
    /// Who sessions and calls act as (`files.run {agent}` too).
    seats: Arc<Seats>,
    /// A session whose stream is gone ends this long after.
    ttl: Duration,
    /// A session with no stream, or an agent with no session, ends this
    /// long after its last request.
    idle: Duration,
    max_body: usize,
}

/// The agents of `/mcp` that outlive a call: (caller, name) → the agent.
/// A named or minted agent is keyed by its name; an actor token's own
/// reservations across modern calls by the empty name (no agent is named
/// so).
type Agents = Mutex<HashMap<AgentKey, AgentSlot>>;

type AgentKey = (Caller, String);

/// An agent and what keeps it alive.
struct AgentSlot {
    /// The agent; `None` for what a session's own agent left behind when
    /// the session ended ([`Ghost`]): only its reads, until a call names
    /// its handle and an agent takes them over.
    agent: Option<Agent>,
    /// The reads an agent made under this handle takes over.
    marks: Vec<crate::ReadMark>,
    /// Made for calls that named no agent and outliving them (a modern
    /// call's agent, a session's reads after it ended): counted in the
    /// token's pool of such agents, where the longest idle makes room
    /// ([`Seats::make_room`]), never against its sessions.
    minted: bool,
    /// A handshake session's own agent: it ends with that session
    /// ([`Ghost`]), whoever else passes its handle meanwhile.
    bound: bool,
    /// A subagent's parent agent (`PARENT/CHILD`), kept alive while its
    /// child lives.
    parent: Option<SessionActor>,
    /// The sessions and calls acting as it now ([`AgentUse`]).
    users: usize,
    /// When its last user went.
    last: Instant,
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
fn take_agents(agents: &mut HashMap<AgentKey, AgentSlot>, keys: Vec<AgentKey>) -> Vec<AgentSlot> {
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
struct AgentUse {
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
struct Ghost {
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
fn agent_name(parts: &axum::http::request::Parts) -> std::result::Result<Option<String>, String> {
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

/// One open MCP session.
struct Live {
    /// The caller whose token opened the session.
    owner: Caller,
    /// The session's tools, for the `tools/call`s `/mcp` answers itself.
    tools: Option<SessionTools>,
    /// When its last request ended (or the one in progress began).
    last: Instant,
    /// Requests of the session in progress: it is not idle while one runs.
    in_progress: usize,
    /// Its open GET streams: alive while one is open.
    streams: usize,
    /// When its last stream closed, if it ever had one: the session ends
    /// the lease TTL after (unless a stream or a request comes).
    stream_lost: Option<Instant>,
    /// Who it acts as, for the log: the agent's name, else its actor's.
    name: String,
    /// The `tools/call`s `/mcp` is answering, by request id: a
    /// `notifications/cancelled` naming one ends it. The number tells a
    /// call from a later one that reused its id.
    calls: HashMap<RequestId, (u64, oneshot::Sender<()>)>,
    next_call: u64,
}

fn service(
    app: &Arc<App>,
    sessions: Arc<LocalSessionManager>,
    decide: Arc<Seats>,
) -> Result<Service> {
    let identity = Identity::later(move |opening: Opening| {
        let decide = decide.clone();
        async move { decide.open(opening).await }
    });
    let mut opts = ToolOptions::default()
        .call_wait(app.call_wait)
        .tools(app.mcp_tools);
    let counted = Arc::downgrade(app);
    opts.on_call = Some(crate::mcp::CallObserver(Arc::new(move |tool, outcome| {
        tracing::debug!(tool, outcome, "tool call");
        if let Some(app) = counted.upgrade() {
            app.metrics.tool_call(tool, outcome);
        }
    })));
    // A comment on every open stream this often: a write to a dead peer
    // fails, the stream's body is dropped, and the session's clock starts
    // (well within the lease TTL).
    let ping = (app.ttl / 3).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(app.max_body)
        .with_sse_keep_alive(Some(ping));
    Ok(StreamableHttpService::new(
        move || Ok(ToolServer::new(identity.clone(), opts.clone())),
        sessions,
        config,
    ))
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
struct Handle {
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
struct Seats {
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
    names: Mutex<HashMap<String, usize>>,
}

impl Seats {
    async fn open(&self, opening: Opening) -> std::result::Result<SessionActor, String> {
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

    /// A client name made unique among this server's sessions (`codex`,
    /// `codex-2`, …).
    fn unique(&self, client_name: &str) -> String {
        let base = crate::mcp::clean_name(client_name);
        let mut names = self.names.lock();
        let n = names.entry(base.clone()).or_insert(0);
        *n += 1;
        if *n == 1 { base } else { format!("{base}-{n}") }
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

/// One open GET stream of a session; dropped with the response body.
struct OpenStream {
    mcp: Weak<Mcp>,
    id: String,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let Some(mcp) = self.mcp.upgrade() else {
            return;
        };
        if let Some(live) = mcp.live.lock().get_mut(&self.id) {
            live.streams = live.streams.saturating_sub(1);
            if live.streams == 0 {
                live.stream_lost = Some(Instant::now());
            }
        }
    }
}

impl Live {
    /// Whether the session has ended by `now`: no request in progress, no
    /// stream open, and either its stream gone for `ttl` or no request for
    /// `idle`.
    fn ended(&self, now: Instant, ttl: Duration, idle: Duration) -> bool {
        if self.in_progress > 0 || self.streams > 0 {
            return false;
        }
        // An `initialize` whose opening was refused (a bad name, the
        // session cap) still got an id from rmcp: nothing acts in it.
        if self.tools.is_none() {
            return true;
        }
        let quiet = now.duration_since(self.last);
        match self.stream_lost {
            Some(lost) => now.duration_since(lost).min(quiet) >= ttl,
            None => quiet >= idle,
        }
    }
}

/// Closes the sessions that ended (see [`Live::ended`]) and the named
/// agents idle past `--mcp-idle` with no session, until `/mcp` is gone.
async fn reap(mcp: Weak<Mcp>) {
    let Some(period) = mcp.upgrade().map(|mcp| {
        (mcp.ttl.min(mcp.idle) / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }) else {
        return;
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(mcp) = mcp.upgrade() else { return };
        let now = Instant::now();
        let ended: Vec<String> = mcp
            .live
            .lock()
            .iter()
            .filter(|(_, s)| s.ended(now, mcp.ttl, mcp.idle))
            .map(|(id, _)| id.clone())
            .collect();
        mcp.close_sessions(ended).await;
        // An agent's actor and reservations go once it has no session and
        // has been idle for `--mcp-idle`.
        mcp.drop_agents(|_, a| a.users == 0 && now.duration_since(a.last) >= mcp.idle);
    }
}

/// What a request of a known session finds.
enum Lookup<'a> {
    /// The session is live and the caller owns it: the request counts as
    /// activity until the guard goes.
    Known(Activity<'a>),
    /// Another token opened it.
    Foreign,
    /// Not a session of this server (rmcp answers 404).
    Unknown,
}

/// One request of a session in progress; it renews the session's lease
/// when it ends, however it ends.
struct Activity<'a> {
    mcp: &'a Mcp,
    id: &'a str,
}

impl Drop for Activity<'_> {
    fn drop(&mut self) {
        if let Some(live) = self.mcp.live.lock().get_mut(self.id) {
            live.in_progress -= 1;
            live.last = Instant::now();
        }
    }
}

/// A JSON-RPC message read as a request or notification whose parameters
/// are `P`; anything else fails to parse and goes to rmcp. Read in one pass
/// with its parameters: the 4 KiB of a `write_file` are parsed once.
#[derive(Deserialize)]
struct Incoming<'a, P> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    params: P,
}

impl<P> Incoming<'_, P> {
    /// A request (`id` given) or a notification (`None`) of `method`.
    fn is(&self, method: &str, request: bool) -> bool {
        self.jsonrpc == "2.0" && self.method == method && self.id.is_some() == request
    }
}

/// A JSON-RPC result.
#[derive(Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: &'a CallToolResult,
}

/// Protocol revisions `/mcp` answers `tools/call` in itself: those opened
/// by `initialize`, with no per-request headers to check against the body.
const DIRECT_REVISIONS: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// Whether a POST's headers are ones `/mcp` may answer without rmcp: the
/// checks rmcp makes before it reads a body, passed for certain (anything
/// unusual goes to rmcp, which answers it as it always did).
fn direct_headers(headers: &HeaderMap, max_body: usize) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let accepts = |wanted: &str| {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|media| media.trim().eq_ignore_ascii_case(wanted))
    };
    let json_body = text(header::CONTENT_TYPE.as_str()).is_some_and(|ct| {
        let essence = ct.split_once(';').map_or(ct, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    });
    let revision = match text("mcp-protocol-version") {
        None => headers.get("mcp-protocol-version").is_none(),
        Some(v) => DIRECT_REVISIONS.iter().any(|known| known.as_str() == v),
    };
    let bounded = text(header::CONTENT_LENGTH.as_str())
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n <= max_body);
    // rmcp refuses a Host that is not loopback (DNS rebinding); so does this
    // path, by leaving such a request to rmcp.
    let loopback = text(header::HOST.as_str()).is_some_and(auth::loopback_authority);
    accepts("application/json")
        && accepts("text/event-stream")
        && json_body
        && revision
        && bounded
        && loopback
}

/// Who answers a POST.
enum Answer {
    /// `/mcp` did.
    Done(Response),
    /// rmcp does: the request, whole again.
    Pass(Request),
}

impl Mcp {
    async fn handle(self: &Arc<Self>, app: &App, request: Request) -> Response {
        let headers = request.headers();
        if !auth::origin_allowed(headers) {
            let e = Error::Forbidden {
                reason: "requests from a non-loopback Origin are refused".into(),
            };
            return auth::refuse(StatusCode::FORBIDDEN, &e);
        }
        // Every request is authenticated (an actor token renews its lease),
        // not only the one that opens the session.
        let caller = match app.authenticate_any(auth::bearer(headers)).await {
            Ok(caller) => caller,
            Err(e) => return auth::refuse(StatusCode::UNAUTHORIZED, &e),
        };
        let session = headers
            .get(SESSION_ID)
            .map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned());
        let method = request.method().clone();
        let mut request = request;
        // Who called, for the tools' identity (a call naming an agent, a
        // modern call): authenticated once, here.
        request.extensions_mut().insert(caller.clone());
        let _activity = match session.as_deref().map(|id| self.enter(id, &caller)) {
            Some(Lookup::Foreign) => {
                let e = Error::Forbidden {
                    reason: "this MCP session was opened with another token; use that token, \
                             or open a session of your own"
                        .into(),
                };
                return auth::refuse(StatusCode::FORBIDDEN, &e);
            }
            Some(Lookup::Known(activity)) => {
                if method == Method::POST {
                    request = match self.answer(activity.id, request).await {
                        Answer::Done(response) => return response,
                        Answer::Pass(request) => request,
                    };
                }
                Some(activity)
            }
            // A session unknown here is unknown to rmcp too (it is recorded
            // before its id is sent), which answers 404.
            Some(Lookup::Unknown) | None => None,
        };
        let opening = OpeningSlot::default();
        if session.is_none() {
            request.extensions_mut().insert(opening.clone());
            let (parts, body) = request.into_parts();
            match agent_name(&parts) {
                Ok(_) => {}
                Err(reason) => {
                    let e = Error::Protocol {
                        kind: ProtocolError::InvalidParams,
                        detail: reason,
                    };
                    return auth::refuse(StatusCode::BAD_REQUEST, &e);
                }
            };
            request = Request::from_parts(parts, body);
        }
        let response = self.service.handle(request).await;
        match (&session, method) {
            (None, Method::POST) => self.opened(&response, caller, &opening),
            (Some(id), Method::DELETE) if response.status().is_success() => {
                self.end_session(id);
                // rmcp answers 202; a terminated session is a plain 200 to
                // every client (the official SDKs warn on anything else).
                let mut response = response.map(Body::new);
                *response.status_mut() = StatusCode::OK;
                return response;
            }
            (_, Method::POST) => {}
            // GET opens the session's long-lived event stream: stream it,
            // counting it open while it lasts.
            (Some(id), Method::GET) if response.status().is_success() => {
                return self.stream(id, response.map(Body::new), app.stopping());
            }
            _ => return response.map(Body::new),
        }
        // A POST is answered with a short SSE stream that ends with the reply
        // (writ's tools send nothing before it). Sent as it is produced, its
        // last piece (the end of the chunked body) waits for the client's
        // delayed ACK behind the event before it (Nagle's algorithm on the
        // accepted socket): tens of milliseconds per tool call on a
        // kept-alive connection. Collected first, it leaves in one write.
        let (parts, body) = response.into_parts();
        match body.collect().await {
            Ok(body) => Response::from_parts(parts, Body::from(body.to_bytes())),
            Err(never) => match never {},
        }
    }

    /// Looks a session up for a request of `caller`, and if it may go on,
    /// counts the request as the session's activity.
    fn enter<'a>(&'a self, id: &'a str, caller: &Caller) -> Lookup<'a> {
        let mut live = self.live.lock();
        match live.get_mut(id) {
            None => Lookup::Unknown,
            Some(session) if session.owner != *caller => Lookup::Foreign,
            Some(session) => {
                session.in_progress += 1;
                session.last = Instant::now();
                Lookup::Known(Activity { mcp: self, id })
            }
        }
    }

    /// Answers a POST of session `id` that is a `tools/call` (or cancels
    /// one) from the session's tools; hands anything else back for rmcp.
    async fn answer(&self, id: &str, request: Request) -> Answer {
        if !direct_headers(request.headers(), self.max_body) {
            return Answer::Pass(request);
        }
        let Some(tools) = self.live.lock().get(id).and_then(|s| s.tools.clone()) else {
            return Answer::Pass(request);
        };
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(Body::new(body), self.max_body).await {
            Ok(bytes) => bytes,
            Err(e) => {
                let e = Error::Protocol {
                    kind: ProtocolError::ParseError,
                    detail: format!("the request body could not be read: {e}"),
                };
                return Answer::Done(auth::refuse(StatusCode::BAD_REQUEST, &e));
            }
        };
        let pass =
            |parts, bytes: Bytes| Answer::Pass(Request::from_parts(parts, Body::from(bytes)));
        if let Ok(message) = serde_json::from_slice::<Incoming<'_, CallToolRequestParams>>(&bytes)
            && message.is("tools/call", true)
            && let Some(request_id) = message.id
        {
            let call = message.params;
            let revision_in_meta = call
                .meta
                .as_ref()
                .is_some_and(|m| m.protocol_version().is_some());
            if revision_in_meta || call.input_responses.is_some() || call.request_state.is_some() {
                return pass(parts, bytes);
            }
            return match self
                .call(id, &tools, request_id.clone(), call, &parts)
                .await
            {
                Called::Answered(result) => Answer::Done(json_reply(&request_id, &result)),
                Called::Cancelled => Answer::Done(no_reply()),
                Called::Closed => pass(parts, bytes),
            };
        }
        if let Ok(message) =
            serde_json::from_slice::<Incoming<'_, CancelledNotificationParam>>(&bytes)
            && message.is("notifications/cancelled", false)
        {
            let call = message
                .params
                .request_id
                .and_then(|request_id| self.live.lock().get_mut(id)?.calls.remove(&request_id));
            if let Some((_, stop)) = call {
                let _ = stop.send(());
                return Answer::Done(accepted());
            }
            // Not one of ours: rmcp's, or already answered.
        }
        pass(parts, bytes)
    }

    /// Runs one `tools/call` of session `id`, registered so that a
    /// `notifications/cancelled` (or the session's end) stops it.
    async fn call(
        &self,
        id: &str,
        tools: &SessionTools,
        request_id: RequestId,
        call: CallToolRequestParams,
        parts: &axum::http::request::Parts,
    ) -> Called {
        let (stop, stopped) = oneshot::channel();
        let (number, _unnamed) = {
            let mut live = self.live.lock();
            let Some(session) = live.get_mut(id) else {
                return Called::Closed;
            };
            session.next_call += 1;
            let number = session.next_call;
            match session.calls.entry(request_id.clone()) {
                Entry::Vacant(slot) => {
                    slot.insert((number, stop));
                    (number, None)
                }
                // The client reused the id of a call still running: that call
                // keeps the name, this one runs to its end (its sender is
                // kept here, so it is not taken as a cancellation).
                Entry::Occupied(_) => (number, Some(stop)),
            }
        };
        let mut stop = match self.app.upgrade() {
            Some(app) => app.stopping(),
            None => return Called::Closed,
        };
        let outcome = tokio::select! {
            result = tools.call(call, parts) => match result {
                Some(result) => Called::Answered(result),
                None => Called::Closed,
            },
            // Cancelled, or the session ended (its entry, and so the
            // sender, is gone).
            _ = stopped => Called::Cancelled,
            // A call waiting for a contested path must not hold up the
            // server's stop (and a restart on the same folder): it is
            // answered now, its wait dropped with nothing left behind.
            _ = stop.wait_for(|s| *s) => Called::Answered(tools.stopping_result()),
        };
        let mut live = self.live.lock();
        if let Some(session) = live.get_mut(id) {
            if session
                .calls
                .get(&request_id)
                .is_some_and(|(n, _)| *n == number)
            {
                session.calls.remove(&request_id);
            }
        }
        outcome
    }

    /// Records a session a POST without a session id opened (if it did):
    /// who opened it, and its tools.
    fn opened<B>(&self, response: &axum::http::Response<B>, caller: Caller, opening: &OpeningSlot) {
        let Some(id) = response.headers().get(SESSION_ID) else {
            return;
        };
        let id = String::from_utf8_lossy(id.as_bytes()).into_owned();
        let tools = opening.opened();
        let handle = tools.as_ref().and_then(SessionTools::handle);
        let name = handle
            .clone()
            .or_else(|| tools.as_ref().and_then(SessionTools::actor_name))
            .unwrap_or_default();
        tracing::info!(agent = %name, named = handle.is_some(), "MCP session opened");
        if let Some(app) = self.app.upgrade() {
            app.metrics.mcp_session_opened();
            if tools.is_some() {
                app.mcp_sessions.bind(&id, &caller);
            }
        }
        self.live.lock().insert(
            id,
            Live {
                owner: caller,
                tools,
                last: Instant::now(),
                in_progress: 0,
                streams: 0,
                stream_lost: None,
                name,
                calls: HashMap::new(),
                next_call: 0,
            },
        );
    }

    /// Forgets a session that ended. Its agent, if it acts as one, has a
    /// user fewer once rmcp drops the session's tools (and lives
    /// `--mcp-idle` past its last).
    fn end_session(&self, id: &str) {
        let ended = self.live.lock().remove(id);
        if let Some(live) = &ended {
            tracing::info!(agent = %live.name, "MCP session closed");
            if let Some(app) = self.app.upgrade() {
                app.metrics.mcp_session_closed();
                app.mcp_sessions.ended(id);
            }
        }
    }

    /// Streams a session's GET response, counted as an open stream until
    /// its body is dropped (the client went away, or the server ends it).
    /// The stream ends when the server stops, so a connected client never
    /// holds up a shutdown (and with it a restart on the same folder).
    fn stream(
        self: &Arc<Self>,
        id: &str,
        response: Response,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Response {
        match self.live.lock().get_mut(id) {
            Some(live) => live.streams += 1,
            None => return response,
        }
        let open = OpenStream {
            mcp: Arc::downgrade(self),
            id: id.to_string(),
        };
        let (parts, body) = response.into_parts();
        let body = futures_util::StreamExt::map(body.into_data_stream(), move |chunk| {
            let _open = &open;
            chunk
        });
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let body = futures_util::StreamExt::take_until(body, stopped);
        Response::from_parts(parts, Body::from_stream(body))
    }
}

/// How a `tools/call` `/mcp` ran ended.
enum Called {
    Answered(CallToolResult),
    /// Stopped by `notifications/cancelled`, or by the session's end.
    Cancelled,
    /// The session was gone before the call began: rmcp answers (404).
    Closed,
}

fn json_reply(id: &RequestId, result: &CallToolResult) -> Response {
    let reply = Reply {
        jsonrpc: "2.0",
        id,
        result,
    };
    match serde_json::to_vec(&reply) {
        Ok(body) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap_or_else(|_| internal()),
        Err(e) => {
            let e = Error::Protocol {
                kind: ProtocolError::Internal,
                detail: format!("the tool's result could not be encoded: {e}"),
            };
            auth::refuse(StatusCode::INTERNAL_SERVER_ERROR, &e)
        }
    }
}

/// The answer to a cancelled request: an event stream with no event (the
/// protocol sends no reply to a cancelled request).
fn no_reply() -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::empty())
        .unwrap_or_else(|_| internal())
}

/// The answer to a notification.
fn accepted() -> Response {
    Response::builder()
        .status(StatusCode::ACCEPTED)
        .body(Body::empty())
        .unwrap_or_else(|_| internal())
}

fn internal() -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

/// The operator's view of the named agents: which have no session (the
/// live page marks them), and releasing one before `--mcp-idle`.
impl super::rpc::NamedAgents for Mcp {
    fn release(&self, name: &str) -> usize {
        let count = self.agents.lock().keys().filter(|(_, n)| n == name).count();
        self.drop_agents(|(_, n), _| n == name);
        count
    }

    fn seat<'a>(
        &'a self,
        app: &'a App,
        caller: Caller,
        name: String,
    ) -> super::rpc::SeatFuture<'a> {
        Box::pin(async move {
            let seat = self.seats.agent(app, caller, Handle::named(name)).await?;
            let actor = seat.actor()?;
            Ok((actor, Box::new(seat) as Box<dyn std::any::Any + Send>))
        })
    }

    fn absent(&self) -> Vec<super::rpc::AbsentAgent> {
        let now = Instant::now();
        self.agents
            .lock()
            .iter()
            .filter(|((_, name), slot)| !name.is_empty() && slot.users == 0 && slot.agent.is_some())
            .map(|((_, name), slot)| super::rpc::AbsentAgent {
                name: name.clone(),
                actor: slot
                    .agent
                    .as_ref()
                    .and_then(crate::mcp::Agent::actor)
                    .map(|a| a.id().0),
                idle: now.saturating_duration_since(slot.last),
            })
            .collect()
    }
}

impl Mcp {
    /// Actors made over the wire were dropped (their lease revoked or
    /// lapsed, or `actor.drop`): the sessions their tokens opened end, and
    /// so do those tokens' named agents, with every reservation they made,
    /// at once, whatever their streams or `--mcp-idle` say (SPEC §14:
    /// revoke wins).
    async fn actors_gone(&self, ids: &[u64]) {
        let of_gone = |caller: &Caller| matches!(caller, Caller::Actor(n) if ids.contains(n));
        let ended: Vec<String> = self
            .live
            .lock()
            .iter()
            .filter(|(_, s)| of_gone(&s.owner))
            .map(|(id, _)| id.clone())
            .collect();
        self.close_sessions(ended).await;
        self.drop_agents(|(caller, _), _| of_gone(caller));
    }

    /// Ends these sessions: forgotten here, then closed in rmcp, and with
    /// them their tools, reservations and owned actors.
    async fn close_sessions(&self, ids: Vec<String>) {
        for id in ids {
            self.end_session(&id);
            if let Err(e) = self.sessions.close_session(&Arc::from(id.as_str())).await {
                tracing::warn!("closing the MCP session {id}: {e}");
            }
        }
    }

    /// Drops the agents `gone` picks, with their reservations. They are
    /// dropped after the agents' lock is released: a dropped agent's
    /// guards take that lock again.
    fn drop_agents(&self, gone: impl Fn(&AgentKey, &AgentSlot) -> bool) {
        let dropped: Vec<AgentSlot> = {
            let mut agents = self.agents.lock();
            let keys: Vec<AgentKey> = agents
                .iter()
                .filter(|(key, slot)| gone(key, slot))
                .map(|(key, _)| key.clone())
                .collect();
            take_agents(&mut agents, keys)
        };
        drop(dropped);
    }
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
