//! `writ mcp` as a bridge: MCP messages from stdin go unchanged to a running
//! `writ serve` at `/mcp` (Streamable HTTP), and its answers come back on
//! stdout. Many stdio agents thus share one scheduler, and each client's own
//! `clientInfo` (or `--agent NAME`) names its actor: each bridge process's
//! session is its own agent. A call whose `agent` argument names another
//! agent (a hook fills it in for a subagent) goes without the bridge's
//! default, so the call's own agent is the one that acts.
//!
//! The bridge lives as long as its client, whatever the client's call rate,
//! and ends what its client acted as when the client stops it (end of
//! stdin, SIGTERM, SIGINT, SIGHUP), so nothing reserved outlives it. Meanwhile,
//! once the session is open it holds the session's GET stream open (the
//! server counts a session with a stream as alive, and pings it), reopening
//! it if it drops. When the server restarts, the next call finds the
//! session gone (404, or no server): the bridge finds the server again the
//! way it found it first, opens a new session with the client's own
//! `initialize`, and sends the call there. The client sees its call
//! answered; its read marks are gone, so writ tells it to read again. A
//! call whose answer was lost on the way is sent again the same way, on a
//! new session, after the old one is ended: whatever the lost call
//! reserved goes with it, and a write it made cannot be made twice (the
//! new session has read nothing, so the write sent again is refused until
//! the client reads the file).
//!
//! A client on the current revision (2026-07-28) has no session: each of
//! its requests carries its revision in `_meta` and goes on its own, with
//! the headers that revision requires of an HTTP request
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and `agent` mirrored
//! into `Mcp-Param-Writ-Agent`), which a stdio client never sends. The
//! bridge is one client, so it keeps one agent for it: the handle the
//! server gives its first call goes, as `Writ-Agent`, with every later call
//! that names no agent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// Finds the server again after it went away: its URL and token.
pub type Discover = Box<dyn Fn() -> Option<(String, String)> + Send + Sync>;

/// How the bridge reaches and names itself to the server.
pub struct Bridge<'a> {
    /// `/mcp?tools=…`: the tool set to ask for.
    pub tools: Option<&'a str>,
    /// `Writ-Agent`: the agent every session of the bridge acts as.
    pub agent: Option<&'a str>,
    /// How to find the server after a restart.
    pub discover: Discover,
}

/// Where the server is now.
#[derive(Clone)]
struct Target {
    endpoint: Uri,
    authorization: String,
}

/// What every request to the server carries, and what the bridge keeps to
/// open a session again.
struct Link {
    pool: Pool<HttpConnector, Full<Bytes>>,
    target: Mutex<Target>,
    query: String,
    agent: Option<String>,
    discover: Discover,
    /// `Mcp-Session-Id` and `MCP-Protocol-Version`, learned from `initialize`.
    session: Mutex<(Option<String>, Option<String>)>,
    /// The agent a modern call acts as when it names none: the handle the
    /// server gave the bridge's first such call.
    handle: Mutex<Option<String>>,
    /// The client's `initialize` and `notifications/initialized`, to open a
    /// session again after a restart.
    opening: Mutex<(Option<Value>, Option<String>)>,
    /// Counts the sessions opened: a call that failed on session `n` opens
    /// a new one only if no other call already did.
    generation: AtomicU64,
    reopening: tokio::sync::Mutex<()>,
    /// The task holding the session's GET stream open.
    stream: Mutex<Option<tokio::task::JoinHandle<()>>>,
    out: tokio::sync::Mutex<tokio::io::Stdout>,
}

fn target(url: &str, token: &str, query: &str) -> Result<Target, String> {
    let endpoint: Uri = format!("{}/mcp{query}", url.trim_end_matches('/'))
        .parse()
        .map_err(|e| format!("'{url}' is not a URL: {e}"))?;
    Ok(Target {
        endpoint,
        authorization: format!("Bearer {token}"),
    })
}

/// Bridges stdin/stdout to `url`'s `/mcp` until stdin ends, then ends the
/// MCP session (an unnamed session's actor and reservations go with it).
pub async fn run(url: &str, token: &str, bridge: Bridge<'_>) -> Result<(), String> {
    let query = bridge
        .tools
        .map(|t| format!("?tools={t}"))
        .unwrap_or_default();
    let link = Arc::new(Link {
        pool: Pool::builder(TokioExecutor::new()).build(HttpConnector::new()),
        target: Mutex::new(target(url, token, &query)?),
        query,
        agent: bridge.agent.map(str::to_string),
        discover: bridge.discover,
        session: Mutex::new((None, None)),
        handle: Mutex::new(None),
        opening: Mutex::new((None, None)),
        generation: AtomicU64::new(0),
        reopening: tokio::sync::Mutex::new(()),
        stream: Mutex::new(None),
        out: tokio::sync::Mutex::new(tokio::io::stdout()),
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut calls = tokio::task::JoinSet::new();
    let mut stop = Stop::listen();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line.map_err(|e| format!("cannot read stdin: {e}"))?,
            () = stop.recv() => {
                // A client stops its server with a signal as often as by
                // closing stdin: the calls in flight are abandoned, and the
                // session still ends, so nothing it reserved outlives it.
                calls.abort_all();
                if let Some(stream) = link.stream.lock().take() {
                    stream.abort();
                }
                let _ = tokio::time::timeout(Duration::from_secs(2), link.close()).await;
                return Ok(());
            }
        };
        let Some(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let error = json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("not JSON: {e}")}});
                link.emit(&error.to_string()).await;
                continue;
            }
        };
        // The session id comes with the answer to `initialize`: everything
        // after it must wait for that answer. Other calls run concurrently,
        // so a call waiting for a busy path does not hold up the rest.
        match message.get("method").and_then(Value::as_str) {
            Some("initialize") => {
                link.opening.lock().0 = Some(message.clone());
                link.clone().forward(message, line).await;
            }
            Some("notifications/initialized") => {
                link.opening.lock().1 = Some(line.clone());
                link.clone().forward(message, line).await;
                link.listen();
            }
            _ => {
                calls.spawn(link.clone().forward(message, line));
            }
        }
    }
    while calls.join_next().await.is_some() {}
    if let Some(stream) = link.stream.lock().take() {
        stream.abort();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), link.close()).await;
    Ok(())
}

/// SIGTERM, SIGINT and SIGHUP: how clients and terminals stop a bridge.
struct Stop(Vec<tokio::signal::unix::Signal>);

impl Stop {
    /// Listens from now on; a signal that cannot be listened for is left
    /// to its default action, which ends the bridge as before.
    fn listen() -> Stop {
        use tokio::signal::unix::{SignalKind, signal};
        let kinds = [
            SignalKind::terminate(),
            SignalKind::interrupt(),
            SignalKind::hangup(),
        ];
        Stop(kinds.into_iter().filter_map(|k| signal(k).ok()).collect())
    }

    /// The first of the signals to arrive (never, if none is heard).
    async fn recv(&mut self) {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        let heard = self.0.iter_mut().map(|s| Box::pin(s.recv()));
        futures_util::future::select_all(heard).await;
    }
}

/// How one request to the server went.
enum Sent {
    Answered(Response<Incoming>),
    /// The session is gone (404) or the server cannot be reached.
    Lost(String),
}

impl Link {
    async fn emit(&self, line: &str) {
        let mut out = self.out.lock().await;
        // A client that closed stdout is gone; there is no one to tell.
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.write_all(b"\n").await;
        let _ = out.flush().await;
    }

    /// A request to the server; `modern`, the headers of a request of the
    /// current revision, which goes with no session.
    fn request(
        &self,
        method: Method,
        body: Bytes,
        modern: Option<&Modern>,
    ) -> Option<Request<Full<Bytes>>> {
        let names_agent = modern.map_or_else(|| call_names_agent(&body), |m| m.names_agent);
        let (session, version) = match modern {
            Some(m) => (None, Some(m.version.clone())),
            None => self.session.lock().clone(),
        };
        let target = self.target.lock().clone();
        let accept = match method {
            Method::GET => "text/event-stream",
            _ => "application/json, text/event-stream",
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(target.endpoint)
            .header(hyper::header::AUTHORIZATION, target.authorization)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, accept);
        // A call that names its agent (a hook filled it for a subagent)
        // acts as that agent: the bridge's own default does not go with it.
        let learned = match modern {
            Some(m) if !m.names_agent => self.handle.lock().clone(),
            _ => None,
        };
        if !names_agent && let Some(agent) = self.agent.clone().or(learned) {
            builder = builder.header("writ-agent", agent);
        }
        for (name, value) in modern.map(|m| m.headers.as_slice()).unwrap_or_default() {
            builder = builder.header(*name, value);
        }
        if let Some(id) = session {
            builder = builder.header("mcp-session-id", id);
        }
        if let Some(v) = version {
            builder = builder.header("mcp-protocol-version", v);
        }
        builder.body(Full::new(body)).ok()
    }

    /// Sends one message on the current session.
    async fn send(&self, method: Method, body: Bytes) -> Sent {
        self.send_as(method, body, None).await
    }

    /// Sends one message, on the current session or, `modern`, on none.
    async fn send_as(&self, method: Method, body: Bytes, modern: Option<&Modern>) -> Sent {
        let Some(request) = self.request(method, body, modern) else {
            return Sent::Lost("cannot build the request".into());
        };
        match self.pool.request(request).await {
            Ok(response) if response.status() == StatusCode::NOT_FOUND => {
                Sent::Lost("the server no longer knows this session".into())
            }
            Ok(response) => Sent::Answered(response),
            Err(e) => Sent::Lost(format!("cannot reach writ serve: {e}")),
        }
    }

    /// Opens a new session after the old one was lost (the server
    /// restarted): finds the server again, replays the client's
    /// `initialize` (its answer is the bridge's, not the client's) and
    /// `notifications/initialized`, and holds the new session's stream.
    /// Does nothing if another call already did since `seen`.
    async fn reopen(self: &Arc<Self>, seen: u64) -> Result<(), String> {
        let _one = self.reopening.lock().await;
        if self.generation.load(Ordering::SeqCst) != seen {
            return Ok(());
        }
        let (initialize, initialized) = self.opening.lock().clone();
        let mut initialize = initialize.ok_or("the client has not initialized")?;
        self.end_lost_session().await;
        // Finding (or starting) the server blocks on files and a lock.
        let (url, token) = tokio::task::block_in_place(|| (self.discover)())
            .ok_or("no writ serve is running for this workspace any more, and none could be started; start one and retry")?;
        *self.target.lock() = target(&url, &token, &self.query)?;
        *self.session.lock() = (None, None);
        initialize["id"] = json!(format!("writ-bridge-reopen-{seen}"));
        let response = match self
            .send(Method::POST, Bytes::from(initialize.to_string()))
            .await
        {
            Sent::Answered(r) if r.status().is_success() => r,
            Sent::Answered(r) => {
                return Err(format!("writ serve refused a new session: {}", r.status()));
            }
            Sent::Lost(why) => return Err(why),
        };
        if let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session.lock().0 = Some(id.to_string());
        }
        // The answer names the protocol version; nothing else of it is kept.
        if let Ok(body) = response.into_body().collect().await {
            let body = body.to_bytes();
            let text = String::from_utf8_lossy(&body);
            let answer = serde_json::from_str::<Value>(&text).ok().or_else(|| {
                let end = event_end(&body).map_or(body.len(), |(n, _)| n);
                event_data(&body[..end]).and_then(|d| serde_json::from_str(&d).ok())
            });
            if let Some(answer) = answer {
                self.learn_version(&answer);
            }
        }
        if let Some(line) = initialized {
            let _ = self.send(Method::POST, Bytes::from(line)).await;
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.listen();
        Ok(())
    }

    /// Ends the session a call was lost on, if the server still knows it.
    ///
    /// The call may have been served before its answer was lost: a
    /// reservation it made would live on in that session, where the client
    /// can never release it, and refuse the same call sent again on the new
    /// session. Ending the session releases it, as a ticket given up does.
    /// A server that restarted answers 404; one that does not answer within
    /// the bound lets the session end by itself, when it idles out.
    async fn end_lost_session(&self) {
        if self.session.lock().0.is_none() {
            return;
        }
        let ended = self.send(Method::DELETE, Bytes::new());
        let _ = tokio::time::timeout(Duration::from_secs(2), ended).await;
    }

    /// Holds the session's GET stream open, reopening it when it drops
    /// while the session lives, and relays what the server sends on it.
    fn listen(self: &Arc<Self>) {
        let link = self.clone();
        let task = tokio::spawn(async move {
            loop {
                match link.send(Method::GET, Bytes::new()).await {
                    Sent::Answered(r) if r.status().is_success() => {
                        link.relay_events(r, None, true).await;
                    }
                    // The server does not offer a stream, or the session is
                    // gone: the next call opens a new one.
                    Sent::Answered(_) | Sent::Lost(_) => return,
                }
                // The stream dropped; ask again, unhurried, while the
                // session may still be there.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        if let Some(old) = self.stream.lock().replace(task) {
            old.abort();
        }
    }

    /// Sends one message and writes every message of the answer to stdout.
    /// A message lost on the way — the session gone, the server
    /// unreachable, or the answer broken off before it came — is sent once
    /// more, on a new session ([`Link::reopen`]).
    async fn forward(self: Arc<Self>, message: Value, line: String) {
        let id = message.get("id").cloned();
        if let Some(modern) = Modern::of(&message) {
            let sent = self
                .send_as(Method::POST, Bytes::from(line), Some(&modern))
                .await;
            // The answer to a call that named its own agent (a subagent's)
            // names that agent: it is not the bridge's to adopt.
            let adopt = !modern.names_agent;
            if let Err(reason) = self.deliver(sent, id.as_ref(), adopt).await
                && let Some(id) = id
            {
                let error = json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32603, "message": reason}});
                self.emit(&error.to_string()).await;
            }
            return;
        }
        let is_initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        let adopt = !call_names_agent(line.as_bytes());
        let mut again = !is_initialize;
        let reason = loop {
            let seen = self.generation.load(Ordering::SeqCst);
            let sent = self.send(Method::POST, Bytes::from(line.clone())).await;
            let lost = match self.deliver(sent, id.as_ref(), adopt).await {
                Ok(()) => return,
                Err(lost) => lost,
            };
            if !again {
                break lost;
            }
            again = false;
            if let Err(why) = self.reopen(seen).await {
                break why;
            }
        };
        if let Some(id) = id {
            let error = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32603, "message": reason}});
            self.emit(&error.to_string()).await;
        }
    }

    /// Writes every message of one answer to stdout; why it was lost if
    /// the answer to request `id` did not come.
    /// `adopt`: whether a handle in the answer may become the bridge's own.
    async fn deliver(&self, sent: Sent, id: Option<&Value>, adopt: bool) -> Result<(), String> {
        let response = match sent {
            Sent::Answered(r) => r,
            Sent::Lost(reason) => return Err(reason),
        };
        if let Some(session) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session.lock().0 = Some(session.to_string());
        }
        let status = response.status();
        let sse = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if sse {
            let answered = self.relay_events(response, id, adopt).await;
            return match (answered, id) {
                (false, Some(_)) => Err("the answer broke off before it came".into()),
                _ => Ok(()),
            };
        }
        let body = match response.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if id.is_some() => return Err(format!("the answer broke off: {e}")),
            Err(_) => return Ok(()),
        };
        if body.is_empty() {
            return Ok(()); // 202 for a notification or a response.
        }
        let answer = match serde_json::from_slice::<Value>(&body) {
            Ok(answer) if answer.get("jsonrpc").is_some() => answer,
            _ => {
                let text = String::from_utf8_lossy(&body);
                return match id {
                    Some(id) => {
                        let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
                            "message": format!("writ serve answered HTTP {status}: {text}")}});
                        self.emit(&error.to_string()).await;
                        Ok(())
                    }
                    None => Ok(()),
                };
            }
        };
        let answer = match (id, answer.get("id")) {
            // A refusal before the session (401, 403) names no id: give it the request's.
            (Some(id), Some(Value::Null)) => {
                let mut a = answer.clone();
                a["id"] = id.clone();
                a
            }
            _ => answer,
        };
        self.learn_version(&answer);
        if adopt {
            self.learn_handle(&answer);
        }
        self.emit(&answer.to_string()).await;
        Ok(())
    }

    /// Remembers the first agent handle the server gives a call: the
    /// bridge's client acts as that agent from then on.
    fn learn_handle(&self, answer: &Value) {
        if let Some(handle) = answer
            .get("result")
            .and_then(|r| r.get("structuredContent"))
            .and_then(|s| s.get("agent"))
            .and_then(Value::as_str)
        {
            self.handle.lock().get_or_insert_with(|| handle.to_string());
        }
    }

    /// Remembers the protocol version `initialize` agreed on.
    fn learn_version(&self, answer: &Value) {
        if let Some(v) = answer
            .get("result")
            .and_then(|r| r.get("protocolVersion"))
            .and_then(Value::as_str)
        {
            self.session.lock().1 = Some(v.to_string());
        }
    }

    /// Forwards each `data:` event of a server-sent event stream; whether
    /// one of them answered request `id`.
    async fn relay_events(
        &self,
        response: Response<Incoming>,
        id: Option<&Value>,
        adopt: bool,
    ) -> bool {
        let mut body = response.into_body();
        let mut pending = Vec::new();
        let mut answered = false;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = event_end(&pending) {
                let event: Vec<u8> = pending.drain(..end.0 + end.1).collect();
                if let Some(message) = event_data(&event[..end.0]) {
                    if let Ok(value) = serde_json::from_str::<Value>(&message) {
                        self.learn_version(&value);
                        if adopt {
                            self.learn_handle(&value);
                        }
                        answered |= id.is_some_and(|id| value.get("id") == Some(id));
                    }
                    self.emit(&message).await;
                }
            }
        }
        answered
    }

    /// Ends what the bridge's client acted as: its MCP session (HTTP
    /// DELETE), which frees an unnamed session's actor and holds; or, for
    /// a client of the current revision, which has no session, the agent
    /// minted for it (`agent.release`), which would otherwise keep its
    /// reservations for `--mcp-idle`. An agent named with `--agent` is
    /// left as it is: a named agent outlives its clients (SPEC §14).
    async fn close(&self) {
        if self.session.lock().0.is_some() {
            let _ = self.send(Method::DELETE, Bytes::new()).await;
            return;
        }
        if self.agent.is_some() {
            return;
        }
        let Some(handle) = self.handle.lock().clone() else {
            return;
        };
        let target = self.target.lock().clone();
        let mut rpc = target.endpoint.into_parts();
        rpc.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/rpc"));
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "agent.release",
            "params": {"name": handle}});
        let request = Uri::from_parts(rpc).ok().and_then(|uri| {
            Request::post(uri)
                .header(hyper::header::AUTHORIZATION, target.authorization)
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .ok()
        });
        if let Some(request) = request {
            let _ = self.pool.request(request).await;
        }
    }
}

/// A request of the current revision (2026-07-28), and the headers its
/// HTTP request must carry (SEP-2243): its revision, method and name, and
/// the arguments its tools mirror (`agent`).
struct Modern {
    version: String,
    headers: Vec<(&'static str, String)>,
    /// The call names its agent itself.
    names_agent: bool,
}

impl Modern {
    /// The message as a modern request, if it is one (its `_meta` names
    /// its revision).
    fn of(message: &Value) -> Option<Modern> {
        let params = message.get("params");
        let version = params?
            .get("_meta")?
            .get("io.modelcontextprotocol/protocolVersion")?
            .as_str()?
            .to_string();
        let method = message.get("method").and_then(Value::as_str)?;
        let mut headers = vec![("mcp-method", header_value(method))];
        let name = match method {
            "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                params.and_then(|p| p.get("uri"))
            }
            "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
            _ => None,
        };
        if let Some(name) = name.and_then(Value::as_str) {
            headers.push(("mcp-name", header_value(name)));
        }
        let agent = (method == "tools/call")
            .then(|| params?.get("arguments")?.get("agent")?.as_str())
            .flatten();
        if let Some(agent) = agent {
            headers.push(("mcp-param-writ-agent", header_value(agent)));
        }
        Some(Modern {
            version,
            headers,
            names_agent: agent.is_some(),
        })
    }
}

/// Whether `body` is a `tools/call` whose arguments name an `agent`.
fn call_names_agent(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|message| {
        message.get("method").and_then(Value::as_str) == Some("tools/call")
            && message
                .get("params")
                .and_then(|p| p.get("arguments"))
                .and_then(|a| a.get("agent"))
                .is_some_and(Value::is_string)
    })
}

/// A header value as SEP-2243 writes it: as it is when it is plain
/// printable ASCII without surrounding blanks, else `=?base64?…?=`.
fn header_value(value: &str) -> String {
    use base64::Engine as _;
    let blank_ends = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let printable = value.chars().all(|c| (' '..='~').contains(&c));
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    if printable && !blank_ends && !looks_encoded {
        value.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

/// Where the first complete event ends: (its length, the separator's length).
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The `data:` lines of one event, joined; `None` when it has none (a
/// priming or keep-alive event).
fn event_data(event: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(event);
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    let joined = data.join("\n");
    (!joined.trim().is_empty()).then_some(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tool_call_naming_its_agent_goes_without_the_bridges_default() {
        let call = |args: Value| {
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "read_file", "arguments": args}})
            .to_string()
        };
        assert!(call_names_agent(
            call(json!({"path": "a", "agent": "claude-code-1/sub-2"})).as_bytes()
        ));
        assert!(!call_names_agent(call(json!({"path": "a"})).as_bytes()));
        assert!(!call_names_agent(
            call(json!({"path": "a", "agent": 7})).as_bytes()
        ));
        let listing = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                             "params": {"arguments": {"agent": "x"}}});
        assert!(!call_names_agent(listing.to_string().as_bytes()));
        assert!(!call_names_agent(b"not json"));
    }

    #[test]
    fn events_are_split_and_data_joined() {
        let buf = b"id: 1\nretry: 3000\ndata:\n\nevent: message\ndata: {\"a\":1}\n\nrest";
        let first = event_end(buf).unwrap_or((0, 0));
        assert_eq!(event_data(&buf[..first.0]), None);
        let second = &buf[first.0 + first.1..];
        let end = event_end(second).unwrap_or((0, 0));
        assert_eq!(event_data(&second[..end.0]).as_deref(), Some("{\"a\":1}"));
        assert_eq!(event_end(b"data: x\r\n\r\n"), Some((7, 4)));
    }
}
