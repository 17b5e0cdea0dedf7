//! writ's file tools over the Model Context Protocol (feature `mcp`).
//!
//! [`ToolServer`] is an MCP server (an [`rmcp::ServerHandler`]) whose tools
//! are one agent's [`Files`](crate::Files): `read_file`, `write_file`,
//! `edit_file`, `append_file`, `delete_file`, `move_file`, `list_dir`,
//! `reserve`, `release` and `writ_status`. Every write is admitted, passes
//! the read-before-write gate and the path policy, and lands atomically; a
//! refusal is a tool result with `isError: true` whose text is the error's
//! sentence, so the model reads it and acts.
//!
//! One `ToolServer` serves one MCP session. Which actor the session acts as
//! is decided when the client initializes, by its [`Identity`]: a fresh
//! workspace child named after the client (`clientInfo.name`), a given
//! actor, or a custom rule (a server maps a bearer token to an actor). When
//! the session ends the `ToolServer` is dropped, and with it the session's
//! reservations and — when the session owns it — its actor.
//!
//! ```
//! # fn main() -> Result<(), writ::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! use std::sync::Arc;
//! use writ::mcp::{Identity, ToolOptions, ToolServer};
//!
//! let sched = writ::Scheduler::new(writ::Config::default());
//! let lead = Arc::new(sched.actor("lead", writ::Grant::workspace(dir.path()))?);
//! // One ToolServer per session; each session gets its own child of `lead`.
//! let identity = Identity::children_of(lead);
//! let server = ToolServer::new(identity.clone(), ToolOptions::default());
//! assert_eq!(server.tool_names().len(), 11);
//! // Serve it: `rmcp::ServiceExt::serve(server, rmcp::transport::stdio())`.
//! # Ok(()) }
//! ```

mod anchored;
mod args;
mod filesystem;
pub(crate) mod identity;
mod result;
mod run;
pub(crate) mod table;
mod tools;

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::{Actor, Fence, Target};

pub use filesystem::FILESYSTEM_TOOL_NAMES;
pub use identity::{Agent, Identity, SessionActor, SessionStart};
pub use tools::TOOL_NAMES;

use identity::{Era, Opening};
use table::{SessionTable, TableFence};

/// Which tools a [`ToolServer`] offers.
///
/// ```
/// use writ::mcp::ToolSet;
/// assert_eq!("filesystem".parse::<ToolSet>(), Ok(ToolSet::Filesystem));
/// assert_eq!(ToolSet::Filesystem.names().len(), 14);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolSet {
    /// writ's own eleven tools ([`TOOL_NAMES`]).
    #[default]
    Writ,
    /// The fourteen tools of the reference server
    /// `@modelcontextprotocol/server-filesystem`, with its names, parameters
    /// and output texts ([`FILESYSTEM_TOOL_NAMES`]), every write gated as
    /// writ's own are.
    Filesystem,
}

impl ToolSet {
    /// The names of the tools, in the order `tools/list` gives them.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            ToolSet::Writ => &TOOL_NAMES,
            ToolSet::Filesystem => &FILESYSTEM_TOOL_NAMES,
        }
    }
}

impl ToolSet {
    /// The tool set a request's URL asks for (`?tools=filesystem`), if any.
    pub(crate) fn asked_in(uri: &http::Uri) -> Result<Option<ToolSet>, String> {
        let query = uri.query().unwrap_or_default();
        query
            .split('&')
            .filter_map(|pair| pair.strip_prefix("tools="))
            .next_back()
            .map(str::parse)
            .transpose()
    }
}

impl std::str::FromStr for ToolSet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "writ" => Ok(ToolSet::Writ),
            "filesystem" => Ok(ToolSet::Filesystem),
            other => Err(format!(
                "unknown tool set '{other}': use writ (the default) or filesystem"
            )),
        }
    }
}

/// Limits and waits of the tools.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolOptions {
    /// How long a write to a contested path waits before it is refused
    /// (`--call-wait`, default 5 s).
    pub call_wait: Duration,
    /// Lines `read_file` returns when no `limit` is given (default 2000).
    pub read_lines: usize,
    /// Characters of one line `read_file` shows before cutting it (default 2000).
    pub line_chars: usize,
    /// Bytes of text one `read_file` returns at most (default 256 KiB).
    pub read_bytes: usize,
    /// Entries `list_dir` returns at most (default 1000).
    pub list_entries: usize,
    /// The tool set (default: writ's own).
    pub tools: ToolSet,
    /// The scheduler is this process's alone (`writ mcp --private`): the
    /// instructions and `writ_status` say nothing is shared.
    pub private: bool,
    /// Told of each tool call's end (`writ serve` counts them for `/metrics`).
    pub(crate) on_call: Option<CallObserver>,
}

/// A callback told of each tool call's end: the tool's name and the
/// outcome (`ok`, `bad_arguments`, or the refusal's kind).
#[derive(Clone)]
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) struct CallObserver(pub(crate) Arc<OnCall>);

/// What a [`CallObserver`] calls: (tool, outcome).
pub(crate) type OnCall = dyn Fn(&str, &str) + Send + Sync;

impl std::fmt::Debug for CallObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallObserver")
    }
}

impl Default for ToolOptions {
    fn default() -> Self {
        ToolOptions {
            call_wait: Duration::from_secs(3),
            read_lines: 2000,
            line_chars: 2000,
            read_bytes: 256 * 1024,
            list_entries: 1000,
            tools: ToolSet::Writ,
            private: false,
            on_call: None,
        }
    }
}

impl ToolOptions {
    /// How long a contested write waits before it is refused.
    pub fn call_wait(mut self, wait: Duration) -> Self {
        self.call_wait = wait;
        self
    }

    /// The tool set sessions get unless their [`SessionActor`] says otherwise.
    pub fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// Serve on a scheduler no other process shares, and say so.
    pub fn private(mut self, private: bool) -> Self {
        self.private = private;
        self
    }
}

/// What a call whose actor went is told (a named agent's, or a token's
/// whose lease ended; on either table).
pub(crate) fn gone() -> String {
    "The actor this session acts as is gone (its lease ended or it was dropped); \
     start a new MCP session."
        .to_string()
}

/// Reservations made with the `reserve` tool: one session's, or one named
/// agent's across all its sessions.
type Reservations = Arc<Mutex<Vec<Held>>>;

/// One reservation made with the `reserve` tool.
#[derive(Debug)]
struct Held {
    fence: Reserved,
    /// The resolved targets, to match `release {paths}` against.
    targets: Vec<Target>,
}

/// Where a reservation's fence is held; dropping it releases it there.
enum Reserved {
    /// In the session actor's own scheduler.
    Here(Fence),
    /// In the session's table.
    Table(Box<dyn TableFence>),
}

impl Reserved {
    /// Keeps only `to`, paths the fence already holds.
    async fn narrow(&mut self, to: Vec<Target>) -> crate::Result<()> {
        match self {
            Reserved::Here(fence) => fence.narrow(to.into_iter().map(Target::resolved)),
            Reserved::Table(fence) => fence.narrow(to).await,
        }
    }
}

impl fmt::Debug for Reserved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reserved::Here(fence) => fence.fmt(f),
            Reserved::Table(_) => f.write_str("Reserved::Table"),
        }
    }
}

/// The state of one MCP session.
struct Session {
    identity: Identity,
    opts: ToolOptions,
    actor: OnceLock<SessionActor>,
    /// Serializes the first `open` (initialize and a racing first call).
    opening: tokio::sync::Mutex<()>,
    /// Reservations of this session (released when it ends), or of its
    /// named agent; set when the session opens.
    held: OnceLock<Reservations>,
    /// Whether a result of the session named its minted handle in a
    /// sentence yet: a session is told once, on its first result.
    told: std::sync::atomic::AtomicBool,
}

/// An MCP server whose tools are one agent's writ file tools (see the
/// [module docs](self)). Create one per MCP session.
#[derive(Clone)]
pub struct ToolServer {
    session: Arc<Session>,
}

impl fmt::Debug for ToolServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolServer")
            .field("identity", &self.session.identity)
            .field("actor", &self.actor().map(|a| a.name().to_string()))
            .finish()
    }
}

impl ToolServer {
    /// A server for one session; its actor is chosen by `identity` when the
    /// client initializes.
    pub fn new(identity: Identity, opts: ToolOptions) -> Self {
        ToolServer {
            session: Arc::new(Session {
                identity,
                opts,
                actor: OnceLock::new(),
                opening: tokio::sync::Mutex::new(()),
                held: OnceLock::new(),
                told: Default::default(),
            }),
        }
    }

    /// The names of the tools this server offers (the session's set once
    /// it is open, else the default of its options).
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.tool_set().names().to_vec()
    }

    fn tool_set(&self) -> ToolSet {
        self.session
            .actor
            .get()
            .and_then(|a| a.tools)
            .unwrap_or(self.session.opts.tools)
    }

    /// The session's actor, once the client has initialized (and while it
    /// lives).
    pub fn actor(&self) -> Option<Arc<Actor>> {
        self.session.actor.get().and_then(|a| a.get().ok())
    }

    /// The session's seat, decided by its identity on first use.
    async fn open(&self, opening: Opening) -> Result<SessionActor, String> {
        if let Some(seat) = self.session.actor.get() {
            return Ok(seat.clone());
        }
        let _once = self.session.opening.lock().await;
        if let Some(seat) = self.session.actor.get() {
            return Ok(seat.clone());
        }
        let seat = self.session.identity.seat(opening).await?;
        let seat = self.session.actor.get_or_init(|| seat);
        if let Some(shared) = &seat.reservations {
            let _ = self.session.held.set(shared.clone());
        }
        Ok(seat.clone())
    }

    /// A server for one call that acts as `seat` instead of the session's
    /// actor (the call named another agent): the same tools and options,
    /// the seat's actor, reservations and table.
    fn seated(&self, seat: SessionActor) -> ToolServer {
        let held = OnceLock::new();
        if let Some(shared) = &seat.reservations {
            let _ = held.set(shared.clone());
        }
        ToolServer {
            session: Arc::new(Session {
                identity: self.session.identity.clone(),
                opts: self.session.opts.clone(),
                actor: OnceLock::from(seat),
                opening: tokio::sync::Mutex::new(()),
                held,
                told: Default::default(),
            }),
        }
    }

    /// Runs one `tools/call`: as the agent its `agent` argument names
    /// (SPEC §14: a handle, or a name), else as the session's actor; the
    /// result names the agent when it has a handle.
    async fn serve_call(
        &self,
        mut request: CallToolRequestParams,
        opening: impl Fn() -> Opening,
    ) -> CallToolResult {
        // A call that names no agent it can have is refused as every
        // refusal is: one text, in both places, with its kind.
        let refused = |text: String, kind: &str| {
            let mut refusal = tool_error(text);
            refusal.structured_content =
                Some(result::refusal_fields(serde_json::json!({ "kind": kind })));
            result::finish(refusal, self.tool_set(), None, result::Tell::Quietly)
        };
        let asked = match identity::handle::take_agent(&mut request.arguments) {
            Ok(asked) => asked,
            Err(text) => return refused(text, "bad_arguments"),
        };
        let own = self
            .session
            .actor
            .get()
            .and_then(|seat| seat.handle.as_ref())
            .map(|h| h.key.clone());
        let seats = self.session.identity.server_seats();
        let (server, seat) = match (&asked, seats) {
            (Some(name), Some(seats)) if own.as_deref() != Some(name.as_str()) => {
                let opening = Opening {
                    agent: Some(name.clone()),
                    ..opening()
                };
                match seats.open(opening).await {
                    Ok(seat) => (self.seated(seat.clone()), seat),
                    Err(reason) => return refused(reason, "unavailable"),
                }
            }
            _ => match self.open(opening()).await {
                Ok(seat) => (self.clone(), seat),
                Err(reason) => return refused(reason, "unavailable"),
            },
        };
        let result = match server.current(&seat) {
            Ok(actor) => server.dispatch(&actor, request).await,
            Err(reason) => {
                let mut gone = tool_error(reason);
                gone.structured_content = Some(result::refusal_fields(
                    serde_json::json!({"kind": "unavailable"}),
                ));
                gone
            }
        };
        // A handle writ minted is told in a sentence on the first result of
        // the session it was minted for (a modern call is a session of one
        // call); a model that passes it, or a long session told once, reads
        // it in `structuredContent.agent` only.
        let tell = match &seat.handle {
            Some(h) if h.minted && asked.is_none() && !self.session.told.swap(true, Relaxed) => {
                match seat.bound {
                    true => result::Tell::AskToPassReads,
                    false => result::Tell::AskToPass,
                }
            }
            _ => result::Tell::Quietly,
        };
        let handle = seat.handle.as_ref().map(|h| h.key.as_str());
        result::finish(result, server.tool_set(), handle, tell)
    }

    /// Whether `reserve` keeps its reservations for an agent that outlives
    /// the session, rather than for the session alone.
    fn reservations_are_the_agents(&self) -> bool {
        self.session
            .actor
            .get()
            .is_some_and(|seat| seat.reservations.is_some() && !seat.bound)
    }

    /// The reservations the session's `reserve` and `release` act on.
    fn reservations(&self) -> &Reservations {
        self.session.held.get_or_init(Reservations::default)
    }

    /// The live actor; when it is gone, so are this session's reservations.
    fn current(&self, actor: &SessionActor) -> Result<Arc<Actor>, String> {
        actor
            .get()
            .inspect_err(|_| self.reservations().lock().clear())
    }

    /// What a request of `context` opens the session with.
    fn opening(
        client_name: Option<&str>,
        context: &RequestContext<RoleServer>,
        era: Era,
    ) -> Opening {
        // A request of the current revision names its client in its own
        // `_meta` (SEP-2575); it has no handshake for the peer to keep.
        let peer = context.peer.peer_info();
        let name = client_name
            .map(str::to_string)
            .or_else(|| match era {
                Era::Modern => context.meta.client_info().map(|i| i.name),
                Era::Handshake => None,
            })
            .or_else(|| peer.map(|p| p.client_info.name.clone()))
            .unwrap_or_else(|| "agent".to_string());
        Opening {
            client_name: name,
            http: context.extensions.get::<http::request::Parts>().cloned(),
            agent: None,
            era,
        }
    }

    /// The table the session's holds are taken in (`None`: its actor's
    /// scheduler).
    fn table(&self) -> Result<Option<Arc<dyn SessionTable>>, String> {
        match self.session.actor.get() {
            Some(actor) => actor.table(),
            None => Ok(None),
        }
    }
}

/// Runs a tool's blocking file work (file operations block on I/O and,
/// with `Config::file_op_wait`, on admission) without stalling the async
/// threads.
///
/// On a multi-thread runtime the work runs in place (`block_in_place`: the
/// worker hands its other tasks to another thread meanwhile), so the call
/// goes on without waiting to be woken from the blocking pool: two thread
/// hops fewer per call, 25–40 % of a 4 KiB `write_file` over HTTP once
/// `/mcp` answers tool calls itself (docs/PERFORMANCE.md). A current-thread
/// runtime cannot hand its tasks over, so there the work goes to the
/// blocking pool.
async fn off_async_threads<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        Ok(tokio::task::block_in_place(work))
    } else {
        tokio::task::spawn_blocking(work).await
    }
}

/// The answer to a tool call of a session using `set` that was still
/// running when the server stopped: nothing was done, and the agent may
/// retry once it is back.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
fn stopping_result(set: ToolSet) -> CallToolResult {
    let mut stopping = tool_error(
        "writ serve is stopping; this call did nothing. Retry it in a moment: the server \
         (or its next run) answers again.",
    );
    stopping.structured_content = Some(result::refusal_fields(
        serde_json::json!({"kind": "unavailable"}),
    ));
    result::finish(stopping, set, None, result::Tell::Quietly)
}

fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn tool_ok(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// What a `--private` session says first: the rest of the instructions
/// speak of other agents, none of whom this scheduler sees.
pub(crate) const PRIVATE: &str = "PRIVATE: this writ runs on its own (`writ mcp --private`): \
nothing is shared with any other agent or process, so no one else's work is protected from yours \
or yours from theirs.";

const INSTRUCTIONS: &str = "These file tools are shared with other agents working in the same \
folder at the same time; they keep you from overwriting each other's work. Read a file with \
read_file before you change it, and read it again after each change before the next one. When \
a tool refuses, its message says why (another agent is writing there, the file changed since \
you read it, a protected file) and what to do next. A refusal because the file changed or was \
not read shows its current content and counts as reading it: redo your change on top of that \
content at once. Otherwise wait and retry, or work on another file. Use reserve for multi-step work on several files and release \
when done; writ_status shows who works where. Every tool takes an optional `agent`: when a result gives you \
a handle (structuredContent.agent, or a sentence asking you to pass it), pass it as \"agent\" on all your \
later calls, so that what you read and reserved carries over from call to call.";

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("writ", env!("CARGO_PKG_VERSION")))
            .with_instructions({
                let shared = match self.tool_set() {
                    ToolSet::Writ => INSTRUCTIONS,
                    ToolSet::Filesystem => filesystem::INSTRUCTIONS,
                };
                if self.session.opts.private {
                    format!("{PRIVATE} {shared}")
                } else {
                    shared.to_string()
                }
            })
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let name = request.client_info.name.clone();
        let seat = self
            .open(Self::opening(Some(&name), &context, Era::Handshake))
            .await
            .map_err(|reason| ErrorData::invalid_request(reason.clone(), None))?;
        self.current(&seat)
            .map_err(|reason| ErrorData::invalid_request(reason, None))?;
        if let Some(slot) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<OpeningSlot>())
        {
            // Only the first initialize of a session opens it; a repeated one
            // names the same session, so losing the race changes nothing.
            let _ = slot.0.set(SessionTools(Arc::downgrade(&self.session)));
        }
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // A modern listing has no session: the URL it came to says the set.
        let asked = match self.session.actor.get() {
            Some(_) => None,
            None => context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| ToolSet::asked_in(&parts.uri).ok().flatten()),
        };
        let set = asked.unwrap_or_else(|| self.tool_set());
        let tools = match set {
            ToolSet::Writ => tools::definitions(),
            ToolSet::Filesystem => filesystem::definitions(),
        };
        Ok(ListToolsResult::with_all_items(
            result::with_output_schemas(identity::handle::with_agent_argument(tools), set),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A modern request carries its revision in `_meta` (rmcp moves it
        // to the context); a handshake-era one does not.
        let era = match context
            .meta
            .protocol_version()
            .or_else(|| request.meta.as_ref().and_then(|m| m.protocol_version()))
        {
            Some(_) => Era::Modern,
            None => Era::Handshake,
        };
        let opening = || Self::opening(None, &context, era);
        Ok(self.serve_call(request, opening).await.into())
    }
}

impl ToolServer {
    async fn dispatch(&self, actor: &Arc<Actor>, request: CallToolRequestParams) -> CallToolResult {
        let call = tools::Call {
            server: self,
            actor,
            arguments: request.arguments,
        };
        let (outcome, result) = match self.tool_set() {
            ToolSet::Writ => tools::call(&request.name, call).await,
            ToolSet::Filesystem => filesystem::call(&request.name, call).await,
        };
        if let Some(observer) = &self.session.opts.on_call {
            (observer.0)(&request.name, outcome);
        }
        result
    }
}

/// One session's tools as a transport of writ's own holds them, to answer
/// `tools/call` without rmcp's session worker (`/mcp` does, for speed).
///
/// It does not keep the session alive: rmcp owns the [`ToolServer`], and
/// when the session ends the tools go with it (and with them the session's
/// reservations and owned actor), whoever still holds this.
#[derive(Clone)]
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) struct SessionTools(Weak<Session>);

#[cfg_attr(not(feature = "server"), allow(dead_code))]
impl SessionTools {
    /// The name of the actor the session acts as, once it is open.
    pub(crate) fn actor_name(&self) -> Option<String> {
        let session = self.0.upgrade()?;
        let actor = session.actor.get()?.get().ok()?;
        Some(actor.name().to_string())
    }

    /// The answer to one of the session's calls still running when the
    /// server stopped.
    pub(crate) fn stopping_result(&self) -> CallToolResult {
        let set = match self.0.upgrade() {
            Some(session) => ToolServer { session }.tool_set(),
            None => ToolSet::Writ,
        };
        stopping_result(set)
    }

    /// The handle of the agent the session acts as, if it has one.
    pub(crate) fn handle(&self) -> Option<String> {
        let session = self.0.upgrade()?;
        let handle = session.actor.get()?.handle.as_ref()?;
        Some(handle.key.clone())
    }

    /// Runs one tool call exactly as the session's `tools/call` would; `None`
    /// when the session has ended or has not been initialized. `http` is
    /// the call's request, for a call that names another agent.
    pub(crate) async fn call(
        &self,
        request: CallToolRequestParams,
        http: &http::request::Parts,
    ) -> Option<CallToolResult> {
        let server = ToolServer {
            session: self.0.upgrade()?,
        };
        server.session.actor.get()?;
        let opening = || Opening {
            client_name: "agent".to_string(),
            http: Some(http.clone()),
            agent: None,
            era: Era::Handshake,
        };
        Some(server.serve_call(request, opening).await)
    }
}

/// Put into the extensions of the HTTP request that opens a session: the
/// session's `initialize` leaves its [`SessionTools`] there, so the HTTP
/// layer learns which tools the new session id stands for.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) struct OpeningSlot(Arc<OnceLock<SessionTools>>);

#[cfg_attr(not(feature = "server"), allow(dead_code))]
impl OpeningSlot {
    /// The tools of the session this request opened, if it opened one.
    pub(crate) fn opened(&self) -> Option<SessionTools> {
        self.0.get().cloned()
    }
}
