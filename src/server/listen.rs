//! The HTTP side: routes, the JSON-RPC envelope, and shutdown.
//!
//! One router serves loopback TCP and, with `--socket`, a Unix socket:
//! the routes, auth and limits are the same on both.
//!
//! Each connection is served by its own task (hyper), so a slow or stuck
//! client never blocks another. Bounded by construction (SPEC §13): a
//! request's headers must arrive within `--header-timeout` (hyper's timer
//! drops a slow-loris client, answered by nobody), a body within
//! [`BODY_DEADLINE`], and a response may stall unwritten (a client that
//! never reads) no longer than the header timeout; at most `--max-connections` connections are open per
//! listener (more wait in the kernel's backlog, costing no descriptor,
//! while the connection idle the longest is closed to make room), and
//! on TCP every request whose `Host` is not a loopback authority is 403
//! before any route runs. When a client disconnects, hyper drops the
//! handler's future, which drops a waiting `Acquire`: the wait is cancelled
//! exactly as in process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::auth::{self, Caller};
use super::rpc::App;
use super::socket::{SameUid, SocketFile};
use crate::{Error, ProtocolError};

/// How long a request body may take to arrive.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// How long shutdown waits for in-flight requests after failing the waiters.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

fn router(app: Arc<App>) -> Router {
    let routes = Router::new()
        .route("/rpc", post(rpc))
        .route("/dump", get(dump))
        .route("/health", get(health))
        .route("/metrics", get(metrics));
    let routes = super::events::mount(routes);
    #[cfg(feature = "mcp")]
    let routes = match super::mcp::mount(routes.clone(), &app) {
        Ok(with_mcp) => with_mcp.layer(axum::middleware::from_fn_with_state(app.clone(), mcp_body)),
        Err(e) => {
            tracing::error!(error = %e, "cannot serve /mcp; serving the rest");
            routes
        }
    };
    routes
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            super::activity::track,
        ))
        .with_state(app)
}

/// Serves `listener` with `router` until `stop` turns true, on a task of
/// its own; the task ends once the listener's open requests are done.
fn spawn_serving<L>(
    listener: L,
    router: Router,
    stop: &watch::Receiver<bool>,
    limits: super::Limits,
) -> tokio::task::JoinHandle<std::io::Result<()>>
where
    L: axum::serve::Listener,
{
    let stopped = stop.clone();
    tokio::spawn(serve_connections(listener, router, stopped, limits))
}

async fn serve_connections<L>(
    mut listener: L,
    router: Router,
    mut stop: watch::Receiver<bool>,
    limits: super::Limits,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    let max = limits.max_connections;
    let open = Arc::new(tokio::sync::Semaphore::new(max));
    let conns = Arc::new(super::conns::Conns::default());
    loop {
        // A permit before the accept: past the cap, connections wait in
        // the backlog instead of taking descriptors, and the connection
        // idle the longest is closed to make room for them.
        let permit = loop {
            if let Ok(permit) = open.clone().try_acquire_owned() {
                break Some(permit);
            }
            let closing = conns.close_longest_idle();
            tokio::select! {
                permit = open.clone().acquire_owned() => break permit.ok(),
                () = conns.idle(), if !closing => {}
                _ = stop.wait_for(|s| *s) => break None,
            }
        };
        let Some(permit) = permit else { break };
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => break,
        };
        let (id, close) = conns.opened();
        let service = {
            let (router, conns) = (router.clone(), conns.clone());
            hyper::service::service_fn(
                move |request: axum::http::Request<hyper::body::Incoming>| {
                    let busy = conns.begin(id);
                    let mut router = router.clone();
                    async move {
                        let response =
                            tower_service::Service::call(&mut router, request.map(Body::new))
                                .await?;
                        // Busy until the response body is dropped: sent whole,
                        // or its client gone.
                        Ok::<_, std::convert::Infallible>(response.map(|body| {
                            Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                                let _busy = &busy;
                                frame
                            }))
                        }))
                    }
                },
            )
        };
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(
                TokioIo::new(super::conns::WriteStall::new(io, limits.header_timeout)),
                service,
            );
        let (conns, mut stopped) = (conns.clone(), stop.clone());
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            // A client that sent its headers too slowly, never read its
            // answers, or went away, ends its own connection; told to close
            // (it was idle the longest at the cap, or the server stops), it
            // ends at once when idle (a half-sent head included: finishing
            // it could take the whole header timeout, while new clients
            // wait), or after its request when busy.
            let told = tokio::select! {
                _ = connection.as_mut() => false,
                () = close.notified() => true,
                stopping = stopped.wait_for(|s| *s) => stopping.is_ok(),
            };
            if told && conns.is_busy(id) {
                connection.as_mut().graceful_shutdown();
                let _ = connection.as_mut().await;
            }
            conns.closed(id);
            drop(permit);
        });
    }
    drop(listener);
    conns.close_all();
    // Every connection has ended once all the permits are back.
    let _ = open
        .acquire_many(u32::try_from(max).unwrap_or(u32::MAX))
        .await;
    Ok(())
}

/// Refuses, on TCP, every request whose `Host` is not a loopback
/// authority: a DNS-rebinding page reaches the port under its own name.
async fn loopback_host(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if host.is_some_and(auth::loopback_authority) {
        return next.run(request).await;
    }
    let e = Error::Forbidden {
        reason: "requests on TCP must name a loopback Host (127.0.0.1, localhost or [::1])".into(),
    };
    json_response(StatusCode::FORBIDDEN, &error_body(&Value::Null, &e))
}

/// Serves until `stop` turns true, then shuts down: the waiters have been
/// failed by then (they watch `stop` too), in-flight requests get a short
/// drain, every lease is dropped and the discovery file and the socket are
/// removed.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    socket: Option<(SameUid, SocketFile)>,
    app: Arc<App>,
    observed: crate::sched::events::Subscription,
    stop: watch::Receiver<bool>,
    discovery: Option<PathBuf>,
) {
    let reaper = tokio::spawn(super::lease::reap(app.clone(), app.poke()));
    // Subscribed (by `Server::start`) before the first connection is
    // accepted: the log and the metrics see every event, and the ring keeps
    // the recent past for a viewer who connects late.
    let observer = tokio::spawn(super::observe::watch(app.clone(), observed));
    let router = router(app.clone());
    let tcp_router = router
        .clone()
        .layer(axum::middleware::from_fn(loopback_host));
    let tcp = spawn_serving(listener, tcp_router, &stop, app.limits);
    let (unix, socket_file) = match socket {
        Some((listener, file)) => (
            Some(spawn_serving(listener, router, &stop, app.limits)),
            Some(file),
        ),
        None => (None, None),
    };
    let mut stopped = stop.clone();
    let _ = stopped.wait_for(|s| *s).await;
    let drained = tokio::time::timeout(DRAIN_DEADLINE, async {
        let _ = tcp.await;
        if let Some(unix) = unix {
            let _ = unix.await;
        }
    });
    if drained.await.is_err() {
        tracing::warn!("requests still open after the drain deadline; closing");
    }
    reaper.abort();
    observer.abort();
    // No new client can arrive through the socket's name from here on.
    drop(socket_file);
    let (actors, holds) = app.drop_all();
    tracing::info!(actors, holds, "writ serve stopped; everything released");
    if let Some(path) = discovery {
        super::discovery::remove(&path, app.token());
    }
}

/// Listeners for SIGTERM and SIGINT. A signal is heard only from the moment
/// its listener exists, so a server that others may stop is made with them.
#[derive(Debug)]
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts listening; `None` (with a warning) if the process cannot.
    pub(crate) fn listen() -> Option<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some(Signals { term, int }),
            _ => {
                tracing::warn!(
                    "cannot listen for signals; stop the server with `writ serve --stop`"
                );
                None
            }
        }
    }

    /// The next SIGTERM or SIGINT.
    pub(crate) async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

fn error_body(id: &Value, e: &Error) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": e.code(), "message": e.to_string(), "data": e.data()},
    })
}

fn protocol(kind: ProtocolError, detail: impl Into<String>) -> Error {
    Error::Protocol {
        kind,
        detail: detail.into(),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The checks every authenticated route makes, in order: a foreign origin
/// is 403, a missing or unknown token 401; nothing runs before both pass.
async fn admit_caller(app: &App, headers: &HeaderMap) -> Result<Caller, Box<Response>> {
    if !auth::origin_allowed(headers) {
        let e = Error::Forbidden {
            reason: "requests from a non-loopback Origin are refused".into(),
        };
        return Err(Box::new(json_response(
            StatusCode::FORBIDDEN,
            &error_body(&Value::Null, &e),
        )));
    }
    app.authenticate_any(auth::bearer(headers))
        .await
        .map_err(|e| {
            // A token is unknown (401), or etcd could not be asked (503).
            let status = match e {
                Error::Protocol {
                    kind: ProtocolError::Unauthorized,
                    ..
                } => StatusCode::UNAUTHORIZED,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            Box::new(json_response(status, &error_body(&Value::Null, &e)))
        })
}

/// A request body, whole: within `max_body` bytes (else 413) and within
/// [`BODY_DEADLINE`] (else 408), so a client that never finishes its body
/// holds neither a connection nor anything it would keep alive. Asked by
/// `/rpc` and `/mcp` alike (SPEC §13).
async fn whole_body(
    body: Body,
    max_body: usize,
) -> std::result::Result<axum::body::Bytes, Box<Response>> {
    match tokio::time::timeout(BODY_DEADLINE, axum::body::to_bytes(body, max_body)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => {
            let e = protocol(
                ProtocolError::BodyTooLarge,
                format!("the request body is larger than {max_body} bytes (--max-body) or broken"),
            );
            Err(Box::new(json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &error_body(&Value::Null, &e),
            )))
        }
        Err(_) => {
            let e = protocol(
                ProtocolError::InvalidRequest,
                format!("the request body did not arrive within {BODY_DEADLINE:?}"),
            );
            Err(Box::new(json_response(
                StatusCode::REQUEST_TIMEOUT,
                &error_body(&Value::Null, &e),
            )))
        }
    }
}

/// Reads a refused request's body and keeps none of it, within `max_body`
/// bytes and [`BODY_DEADLINE`]: a client that sends its body after its
/// headers would otherwise find the connection closed under it (EPIPE on
/// a Unix socket, a reset over TCP) and never see the refusal, and a body
/// kept would let anyone without a token make the server hold
/// `--max-body` per connection (SPEC §13).
async fn discard_body(body: Body, max_body: usize) {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let _ = tokio::time::timeout(BODY_DEADLINE, async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen = seen.saturating_add(data.len());
                if seen > max_body {
                    break;
                }
            }
        }
    })
    .await;
}

/// `/mcp`'s POST bodies are read whole (see [`whole_body`]) before the MCP
/// service sees them, which would otherwise wait for an unfinished one
/// for as long as its client keeps the connection; only a caller with a
/// token has its body kept.
#[cfg(feature = "mcp")]
async fn mcp_body(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.uri().path() != "/mcp" || request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // The token first, from the headers alone: a caller without one has
    // its body read and dropped, and the MCP service refuses it as before.
    if app
        .authenticate_any(auth::bearer(&parts.headers))
        .await
        .is_err()
    {
        discard_body(body, app.max_body).await;
        return next
            .run(axum::extract::Request::from_parts(parts, Body::empty()))
            .await;
    }
    match whole_body(body, app.max_body).await {
        Ok(bytes) => {
            next.run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(response) => *response,
    }
}

async fn rpc(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let caller = match admit_caller(&app, &headers).await {
        Ok(c) => c,
        Err(response) => {
            discard_body(body, app.max_body).await;
            return *response;
        }
    };
    let bytes = match whole_body(body, app.max_body).await {
        Ok(bytes) => bytes,
        Err(response) => return *response,
    };
    let request: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            let e = protocol(
                ProtocolError::ParseError,
                format!("the body is not JSON: {e}"),
            );
            return json_response(StatusCode::OK, &error_body(&Value::Null, &e));
        }
    };
    let Value::Object(mut request) = request else {
        let e = protocol(
            ProtocolError::InvalidRequest,
            "a request is one JSON-RPC 2.0 object (batches are not supported)",
        );
        return json_response(StatusCode::OK, &error_body(&Value::Null, &e));
    };
    let id = request.remove("id");
    let reply_id = id.clone().unwrap_or(Value::Null);
    if !matches!(reply_id, Value::Null | Value::String(_) | Value::Number(_)) {
        let e = protocol(
            ProtocolError::InvalidRequest,
            "'id' must be a string or a number",
        );
        return json_response(StatusCode::OK, &error_body(&Value::Null, &e));
    }
    let method = match (request.get("jsonrpc"), request.get("method")) {
        (Some(Value::String(v)), Some(Value::String(m))) if v == "2.0" => m.clone(),
        _ => {
            let e = protocol(
                ProtocolError::InvalidRequest,
                "a request needs \"jsonrpc\": \"2.0\" and a string \"method\"",
            );
            return json_response(StatusCode::OK, &error_body(&reply_id, &e));
        }
    };
    let params = match request.remove("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            let e = protocol(ProtocolError::InvalidParams, "'params' must be an object");
            return json_response(StatusCode::OK, &error_body(&reply_id, &e));
        }
    };
    let outcome = app.answer(&caller, &method, params).await;
    if id.is_none() {
        // A notification: done, and nothing to say.
        return StatusCode::NO_CONTENT.into_response();
    }
    match outcome {
        Ok(result) => json_response(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": reply_id, "result": result}),
        ),
        Err((e, current)) => {
            tracing::debug!(%method, kind = e.kind(), "refused");
            let mut body = error_body(&reply_id, &e);
            if let (Some(current), Some(data)) = (current, body["error"]["data"].as_object_mut()) {
                data.insert("current".into(), current);
            }
            json_response(StatusCode::OK, &body)
        }
    }
}

#[derive(serde::Deserialize)]
struct DumpQuery {
    format: Option<String>,
}

async fn dump(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<DumpQuery>,
) -> Response {
    let caller = match admit_caller(&app, &headers).await {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    if app.in_etcd() {
        let format = query.format.clone().map_or(Value::Null, Value::from);
        return match app.call(&caller, "dump", json!({ "format": format })).await {
            Ok(Value::Object(mut table)) if query.format.as_deref() == Some("table") => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                table
                    .remove("table")
                    .and_then(|t| t.as_str().map(str::to_string))
                    .unwrap_or_default(),
            )
                .into_response(),
            Ok(v) => json_response(StatusCode::OK, &for_the_page(&app, v)),
            Err(e @ Error::Protocol { .. }) => {
                json_response(StatusCode::BAD_REQUEST, &error_body(&Value::Null, &e))
            }
            Err(e) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &error_body(&Value::Null, &e),
            ),
        };
    }
    let dump = app.sched.dump();
    match query.format.as_deref() {
        Some("table") => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            dump.to_string(),
        )
            .into_response(),
        None | Some("json") => match serde_json::to_value(&dump) {
            Ok(v) => json_response(StatusCode::OK, &for_the_page(&app, v)),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        Some(other) => (
            StatusCode::BAD_REQUEST,
            format!("unknown format '{other}' (json or table)"),
        )
            .into_response(),
    }
}

/// `GET /dump`'s JSON with what the live page shows beside the table:
/// `refused`, every refusal this server logged (the table's own
/// `counters.refused` counts admissions only, not the gate's or the
/// policy's refusals), and `absent_agents`, the named agents no session
/// acts as now (`[{name, actor, idle}]`, `idle` in seconds), which keep
/// their reservations until `--mcp-idle` or `agent.release`.
fn for_the_page(app: &App, mut dump: Value) -> Value {
    let absent: Vec<Value> = app
        .named_agents
        .get()
        .and_then(std::sync::Weak::upgrade)
        .map(|agents| agents.absent())
        .unwrap_or_default()
        .into_iter()
        .map(|a| json!({"name": a.name, "actor": a.actor, "idle": a.idle.as_secs_f64()}))
        .collect();
    if let Some(fields) = dump.as_object_mut() {
        fields.insert("refused".into(), json!(app.metrics.refused()));
        fields.insert("absent_agents".into(), Value::Array(absent));
    }
    dump
}

/// `GET /metrics`: the Prometheus text format. The session token only:
/// the counts describe every actor of the session, as `/events` does.
async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match admit_caller(&app, &headers).await {
        Ok(Caller::Session) => {}
        Ok(Caller::Actor(_)) => {
            let e = Error::Forbidden {
                reason: "the metrics count every actor's work: they take the session token".into(),
            };
            return json_response(StatusCode::FORBIDDEN, &error_body(&Value::Null, &e));
        }
        Err(response) => return *response,
    }
    let table = match app.table_reading().await {
        Ok(table) => table,
        Err(e) => {
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &error_body(&Value::Null, &e),
            );
        }
    };
    match app.metrics.render(&app, &table) {
        Ok(text) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, super::observe::CONTENT_TYPE),
                (header::CACHE_CONTROL, "no-store"),
            ],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Liveness, without a token; it tells nothing about the workspace.
async fn health() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "status": "ok",
            "protocol": crate::wire::PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
        }),
    )
}
