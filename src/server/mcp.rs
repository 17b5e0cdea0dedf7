//! `/mcp`: writ's file tools over MCP Streamable HTTP (features `server` and
//! `mcp`).
//!
//! Every request passes the same checks as `/rpc` (a loopback `Origin`, a
//! known bearer token) before rmcp sees it. The token of the request that
//! opens an MCP session decides its actor: an actor token acts as that actor
//! (the session never keeps it alive: when its lease ends, the session's
//! calls are refused); the session token gets a fresh workspace actor named
//! after `clientInfo.name`, a child of the server's MCP root actor, owned by
//! the MCP session. The MCP session is a lease: DELETE, or `--lease-ttl` of
//! silence, ends it, and with it its actor (when owned) and every
//! reservation it made.
//!
//! An MCP session belongs to the token that opened it: a request naming the
//! session (`Mcp-Session-Id`) with any other token, even a valid one (another
//! actor's, or the session token on an actor's session), is refused with 403
//! and reaches nothing, so a leaked session id gives no one else the
//! session's actor or its reservations.
//!
//! The session's tool set is the server's (`--mcp-tools`) unless the URL
//! that opens it asks for one: `/mcp?tools=filesystem` serves the reference
//! filesystem server's tools (`writ mcp --tools filesystem` bridges so).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::any;
use http_body_util::BodyExt as _;
use parking_lot::Mutex;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::auth::{self, Caller};
use super::rpc::App;
use crate::mcp::{Identity, SessionActor, SessionStart, ToolOptions, ToolServer, ToolSet};
use crate::{Error, Grant, Result};

/// The header that names an MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// Adds `/mcp` to the server's routes.
pub(crate) fn mount(router: Router<Arc<App>>, app: &Arc<App>) -> Result<Router<Arc<App>>> {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(app.ttl);
    let sessions = Arc::new(sessions);
    let mcp = Arc::new(Mcp {
        service: service(app, sessions.clone())?,
        sessions,
        owners: Mutex::default(),
    });
    Ok(router.route(
        "/mcp",
        any(move |State(app): State<Arc<App>>, request: Request| {
            let mcp = mcp.clone();
            async move { mcp.handle(&app, request).await }
        }),
    ))
}

type Service = StreamableHttpService<ToolServer, LocalSessionManager>;

/// `/mcp`: rmcp's service, and who opened each of its sessions.
struct Mcp {
    service: Service,
    sessions: Arc<LocalSessionManager>,
    /// The caller whose token opened each session, by session id.
    owners: Mutex<HashMap<String, Caller>>,
}

fn service(app: &Arc<App>, sessions: Arc<LocalSessionManager>) -> Result<Service> {
    // Session-token sessions get children of one root actor, so the dump
    // shows them together and their names are made unique in one place. It
    // is made with the first such session: a server no MCP client uses shows
    // no MCP actor.
    let children: Arc<OnceLock<Identity>> = Arc::default();
    let weak = Arc::downgrade(app);
    let identity = Identity::rule(move |start: &SessionStart<'_>| {
        let app = weak
            .upgrade()
            .ok_or_else(|| "the server is shutting down".to_string())?;
        let headers = start.http.map(|parts| &parts.headers);
        let caller = app
            .authenticate(headers.and_then(auth::bearer))
            .map_err(|e| e.to_string())?;
        let asked = start
            .http
            .map(|parts| asked_tools(&parts.uri))
            .transpose()?;
        let actor = match caller {
            Caller::Session => {
                let children = match children.get() {
                    Some(children) => children,
                    None => {
                        let root = app
                            .sched
                            .actor("mcp", Grant::workspace(&app.root))
                            .map_err(|e| e.to_string())?;
                        // A racing first session may have won; its root stays.
                        children.get_or_init(|| Identity::children_of(Arc::new(root)))
                    }
                };
                children.open(start)
            }
            Caller::Actor(n) => app
                .registry()
                .actors
                .get(&n)
                .map(|slot| SessionActor::shared(&slot.actor))
                .ok_or_else(|| "this token's actor is gone".to_string()),
        }?;
        Ok(match asked.flatten() {
            Some(tools) => actor.with_tools(tools),
            None => actor,
        })
    });
    let opts = ToolOptions::default()
        .call_wait(app.call_wait)
        .tools(app.mcp_tools);
    let config = StreamableHttpServerConfig::default().with_max_request_body_bytes(app.max_body);
    Ok(StreamableHttpService::new(
        move || Ok(ToolServer::new(identity.clone(), opts.clone())),
        sessions,
        config,
    ))
}

/// The tool set the `tools` query parameter asks for, if any.
fn asked_tools(uri: &axum::http::Uri) -> std::result::Result<Option<ToolSet>, String> {
    let query = uri.query().unwrap_or_default();
    query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("tools="))
        .next_back()
        .map(str::parse)
        .transpose()
}

impl Mcp {
    async fn handle(&self, app: &App, request: Request) -> Response {
        let headers = request.headers();
        if !auth::origin_allowed(headers) {
            let e = Error::Forbidden {
                reason: "requests from a non-loopback Origin are refused".into(),
            };
            return auth::refuse(StatusCode::FORBIDDEN, &e);
        }
        // Every request is authenticated (an actor token renews its lease),
        // not only the one that opens the session.
        let caller = match app.authenticate(auth::bearer(headers)) {
            Ok(caller) => caller,
            Err(e) => return auth::refuse(StatusCode::UNAUTHORIZED, &e),
        };
        let session = headers
            .get(SESSION_ID)
            .map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned());
        if let Some(id) = &session {
            // A session unknown here is unknown to rmcp too (it is recorded
            // before its id is sent), which answers 404.
            if self
                .owners
                .lock()
                .get(id)
                .is_some_and(|owner| *owner != caller)
            {
                let e = Error::Forbidden {
                    reason: "this MCP session was opened with another token; use that token, \
                             or open a session of your own"
                        .into(),
                };
                return auth::refuse(StatusCode::FORBIDDEN, &e);
            }
        }
        let method = request.method().clone();
        let response = self.service.handle(request).await;
        match (&session, method) {
            (None, axum::http::Method::POST) => self.opened(&response, caller).await,
            (Some(id), axum::http::Method::DELETE) if response.status().is_success() => {
                self.owners.lock().remove(id);
            }
            (_, axum::http::Method::POST) => {}
            // GET opens the session's long-lived event stream: stream it.
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

    /// Records who opened the session a POST without a session id opened
    /// (if it did), and forgets the sessions that have ended since.
    async fn opened<B>(&self, response: &axum::http::Response<B>, caller: Caller) {
        let Some(id) = response.headers().get(SESSION_ID) else {
            return;
        };
        let id = String::from_utf8_lossy(id.as_bytes()).into_owned();
        let live = self.sessions.sessions.read().await;
        let mut owners = self.owners.lock();
        owners.retain(|known, _| live.contains_key(known.as_str()));
        owners.insert(id, caller);
    }
}
