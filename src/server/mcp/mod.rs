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
//! Who a session or call acts as is decided in `mcp::identity` (SPEC §14),
//! which asks the server through [`Host`], implemented here. A
//! session may name its agent (`Writ-Agent: NAME`, or `?agent=NAME`):
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
use std::sync::{Arc, Weak};
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
use super::rpc::App;
use crate::mcp::identity::seats::{Claimed, Host, McpSeat, OnTable, Owner, Pending, Seats};
use crate::mcp::{Identity, OpeningSlot, SessionTools, ToolOptions, ToolServer};
use crate::{Error, ProtocolError, Result};

/// The header that names an MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// Adds `/mcp` to the server's routes.
pub(crate) fn mount(router: Router<Arc<App>>, app: &Arc<App>) -> Result<Router<Arc<App>>> {
    let mut sessions = LocalSessionManager::default();
    // `/mcp` ends idle sessions itself (see `reap`): rmcp's own timer would
    // count only the requests it sees.
    sessions.session_config.keep_alive = None;
    let sessions = Arc::new(sessions);
    let host: Weak<dyn Host> = Arc::downgrade(app) as _;
    let seats = Arc::new(Seats::new(host));
    let mcp = Arc::new(Mcp {
        app: Arc::downgrade(app),
        service: service(app, sessions.clone(), seats.clone())?,
        sessions,
        live: Mutex::default(),
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
    /// Who sessions and calls act as (`files.run {agent}` too), and the
    /// agents that outlive them.
    seats: Arc<Seats>,
    /// A session whose stream is gone ends this long after.
    ttl: Duration,
    /// A session with no stream, or an agent with no session, ends this
    /// long after its last request.
    idle: Duration,
    max_body: usize,
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
    seats: Arc<Seats>,
) -> Result<Service> {
    let identity = Identity::seats(seats);
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
        mcp.seats
            .drop_agents(|_, _, in_use, last| !in_use && now.duration_since(last) >= mcp.idle);
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
        request.extensions_mut().insert(owner(&caller));
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
            match crate::mcp::identity::handle::agent_name(&parts) {
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
        self.seats.drop_agents(|_, n, _, _| n == name)
    }

    fn seat(&self, caller: Caller, name: String) -> super::rpc::SeatFuture<'_> {
        Box::pin(async move {
            let seat = self.seats.named(owner(&caller), name).await?;
            let actor = seat.actor()?;
            Ok((actor, Box::new(seat) as Box<dyn std::any::Any + Send>))
        })
    }

    fn absent(&self) -> Vec<super::rpc::AbsentAgent> {
        self.seats
            .absent()
            .into_iter()
            .map(|a| super::rpc::AbsentAgent {
                name: a.name,
                actor: a.actor,
                idle: a.idle,
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
        let ended: Vec<String> = self
            .live
            .lock()
            .iter()
            .filter(|(_, s)| matches!(s.owner, Caller::Actor(n) if ids.contains(&n)))
            .map(|(id, _)| id.clone())
            .collect();
        self.close_sessions(ended).await;
        self.seats
            .drop_agents(|owner, _, _, _| matches!(owner, Owner::Actor(n) if ids.contains(n)));
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
}

/// Whose token a caller came with, as the MCP identity table keys agents.
fn owner(caller: &Caller) -> Owner {
    match caller {
        Caller::Session => Owner::Session,
        Caller::Actor(n) => Owner::Actor(*n),
    }
}

/// The caller an owner of the MCP identity table is ([`owner`] undone).
fn caller(owner: &Owner) -> Caller {
    match owner {
        Owner::Session => Caller::Session,
        Owner::Actor(n) => Caller::Actor(*n),
    }
}

impl Claimed for super::mcp_cap::Claim {
    fn keep(self: Box<Self>) {
        super::mcp_cap::Claim::keep(*self);
    }
}

/// What the MCP identity table asks of the server: its session cap, its
/// actors (in process, or in the session's table in etcd), and which
/// server a minted handle names.
impl Host for App {
    fn owner<'a>(&'a self, headers: Option<&'a http::HeaderMap>) -> Pending<'a, Owner> {
        Box::pin(async move {
            let caller = self
                .authenticate_any(headers.and_then(auth::bearer))
                .await
                .map_err(|e| e.to_string())?;
            Ok(owner(&caller))
        })
    }

    fn claim(&self, owner: &Owner) -> std::result::Result<Box<dyn Claimed>, String> {
        Ok(Box::new(self.mcp_sessions.claim(&caller(owner))?))
    }

    fn cap(&self) -> usize {
        self.mcp_sessions.max()
    }

    fn on_table<'a>(&'a self, seat: McpSeat<'a>) -> Pending<'a, Option<OnTable>> {
        Box::pin(async move {
            let made = self.mcp_seat(seat).await.transpose();
            made.map_err(|e| e.to_string())
        })
    }

    fn root(&self) -> std::result::Result<crate::Actor, String> {
        self.sched
            .actor("mcp", crate::Grant::workspace(&self.root))
            .map_err(|e| e.to_string())
    }

    fn token_actor(&self, n: u64) -> std::result::Result<Arc<crate::Actor>, String> {
        self.registry()
            .actors
            .get(&n)
            .map(|slot| slot.actor.clone())
            .ok_or_else(|| "this token's actor is gone".to_string())
    }

    fn here(&self) -> Option<String> {
        self.in_etcd().then(|| {
            self.url
                .strip_prefix("http://")
                .unwrap_or(&self.url)
                .to_string()
        })
    }

    fn register(&self) -> Pending<'_, ()> {
        Box::pin(async move { self.mcp_register().await.map_err(|e| e.to_string()) })
    }

    fn registered<'a>(&'a self, server: &'a str) -> Pending<'a, bool> {
        Box::pin(async move { self.mcp_registered(server).await.map_err(|e| e.to_string()) })
    }
}
