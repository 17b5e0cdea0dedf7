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

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use super::auth::{self, Caller};
use super::rpc::App;
use crate::mcp::{Identity, SessionActor, SessionStart, ToolOptions, ToolServer};
use crate::{Error, Grant, Result};

/// Adds `/mcp` to the server's routes.
pub(crate) fn mount(router: Router<Arc<App>>, app: &Arc<App>) -> Result<Router<Arc<App>>> {
    // `/events` and the page ride along with `/mcp` until the route table
    // mounts them itself.
    let router = super::events::mount(router);
    let service = service(app)?;
    Ok(router.route(
        "/mcp",
        any(move |State(app): State<Arc<App>>, request: Request| {
            let service = service.clone();
            async move { handle(&app, &service, request).await }
        }),
    ))
}

type Service = StreamableHttpService<ToolServer, LocalSessionManager>;

fn service(app: &Arc<App>) -> Result<Service> {
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
        match caller {
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
        }
    });
    let opts = ToolOptions::default().call_wait(app.call_wait);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(app.ttl);
    let config = StreamableHttpServerConfig::default().with_max_request_body_bytes(app.max_body);
    Ok(StreamableHttpService::new(
        move || Ok(ToolServer::new(identity.clone(), opts.clone())),
        Arc::new(sessions),
        config,
    ))
}

fn refuse(status: StatusCode, e: &Error) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": e.code(), "message": e.to_string(), "data": e.data()},
    });
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn handle(app: &App, service: &Service, request: Request) -> Response {
    let headers = request.headers();
    if !auth::origin_allowed(headers) {
        let e = Error::Forbidden {
            reason: "requests from a non-loopback Origin are refused".into(),
        };
        return refuse(StatusCode::FORBIDDEN, &e);
    }
    // Every request is authenticated (an actor token renews its lease), not
    // only the one that opens the session.
    if let Err(e) = app.authenticate(auth::bearer(headers)) {
        return refuse(StatusCode::UNAUTHORIZED, &e);
    }
    service.handle(request).await.map(Body::new)
}
