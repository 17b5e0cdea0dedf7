//! A minimal MCP client over Streamable HTTP on hyper: initialize, then
//! JSON-RPC requests on the session, each answered as JSON or as an SSE
//! stream whose data line carries the reply. Used where the Python SDK is
//! too slow (benchmarks) or where the raw HTTP status is the point (401s).

// Each test binary that includes this file uses a part of it.
#![allow(dead_code)]

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// The protocol revision the client asks for.
pub const PROTOCOL: &str = "2025-11-25";

/// The current revision, which has no session: a client of it sends its
/// revision with every request and carries its agent in a handle.
pub const MODERN: &str = "2026-07-28";

/// One HTTP client (one kept-alive connection per concurrent request) for an
/// MCP endpoint.
#[derive(Clone)]
pub struct McpHttp {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
    token: String,
    session: Option<String>,
    next_id: u64,
    /// Headers sent with every request (a `Writ-Agent`, say).
    extra: Vec<(String, String)>,
    /// On the current revision: the agent handle writ gave the first call,
    /// passed on every later one (`Some(None)` until then).
    modern: Option<Option<String>>,
}

/// One HTTP exchange: status, headers, body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The JSON-RPC message the body carries: the body itself, or the SSE
    /// data line that holds a reply (priming events carry no JSON).
    pub fn message(&self) -> Option<Value> {
        if let Ok(v) = serde_json::from_str::<Value>(&self.body) {
            return Some(v);
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("result").is_some() || v.get("error").is_some())
    }
}

impl McpHttp {
    /// A client of `url` (the `/mcp` endpoint) sending `token` as bearer.
    pub fn new(url: &str, token: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        McpHttp {
            client: Client::builder(TokioExecutor::new()).build(connector),
            url: url.to_string(),
            token: token.to_string(),
            session: None,
            next_id: 0,
            extra: Vec::new(),
            modern: None,
        }
    }

    /// A client of the current revision (2026-07-28): no `initialize`, no
    /// session; it passes the handle its first call is given as `agent` on
    /// every later call, as a model told so does.
    #[allow(dead_code)] // not every test binary speaks the current revision
    pub fn modern(url: &str, token: &str) -> Self {
        McpHttp {
            modern: Some(None),
            ..McpHttp::new(url, token)
        }
    }

    /// The same client, sending `name: value` with every request.
    #[allow(dead_code)] // not every test binary names agents
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.extra.push((name.to_string(), value.to_string()));
        self
    }

    /// Opens the session's event stream (HTTP GET) and keeps it open until
    /// the returned task is aborted (the client going away); its status
    /// first.
    #[allow(dead_code)] // not every test binary holds a stream
    pub async fn hold_stream(&self) -> (StatusCode, tokio::task::JoinHandle<()>) {
        let request = self
            .on_session(hyper::Method::GET)
            .header("accept", "text/event-stream")
            .body(Full::new(Bytes::new()))
            .unwrap_or_else(|e| panic!("request: {e}"));
        let response = self
            .client
            .request(request)
            .await
            .unwrap_or_else(|e| panic!("GET {}: {e}", self.url));
        let status = response.status();
        let mut body = response.into_body();
        let task = tokio::spawn(async move { while let Some(Ok(_)) = body.frame().await {} });
        (status, task)
    }

    /// A request to the endpoint with this client's token, protocol and
    /// session (if any).
    fn on_session(&self, method: hyper::Method) -> hyper::http::request::Builder {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(self.url.as_str())
            .header("authorization", format!("Bearer {}", self.token))
            .header(
                "mcp-protocol-version",
                if self.modern.is_some() {
                    MODERN
                } else {
                    PROTOCOL
                },
            );
        for (name, value) in &self.extra {
            request = request.header(name.as_str(), value.as_str());
        }
        match &self.session {
            Some(session) => request.header("mcp-session-id", session),
            None => request,
        }
    }

    /// POSTs one JSON-RPC message on this client's session (if any).
    pub async fn post(&self, message: &Value) -> Reply {
        self.post_with(message, &[]).await
    }

    /// The same, with extra headers (a `Host` given here is sent instead of
    /// the one the client would add).
    pub async fn post_with(&self, message: &Value, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.on_session(hyper::Method::POST);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            // `to_vec`, not `to_string`: Value's Display escapes through a
            // formatter, several times slower on a 4 KiB argument.
            .body(Full::new(Bytes::from(
                serde_json::to_vec(message).unwrap_or_else(|e| panic!("encode: {e}")),
            )))
            .unwrap_or_else(|e| panic!("request: {e}"));
        let response = self
            .client
            .request(request)
            .await
            .unwrap_or_else(|e| panic!("POST {}: {e}", self.url));
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("body: {e}"))
            .to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// Opens an MCP session as `name`; returns the initialize reply (its
    /// status says whether the session was opened).
    pub async fn initialize(&mut self, name: &str) -> Reply {
        let reply = self
            .post(&json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": name, "version": "0"},
                },
            }))
            .await;
        if reply.status == StatusCode::OK {
            self.session = reply
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let sent = self
                .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
            assert!(
                sent.status.is_success(),
                "initialized: {} {}",
                sent.status,
                sent.body
            );
        }
        reply
    }

    /// Sends a request on the session and returns the HTTP reply.
    pub async fn request(&mut self, method: &str, params: Value) -> Reply {
        self.next_id += 1;
        let message =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.post(&message).await
    }

    /// Calls a tool; returns `(is_error, text)`. Panics on a transport or
    /// protocol error.
    pub async fn call(&mut self, tool: &str, mut args: Value) -> (bool, String) {
        let reply = match self.modern.clone() {
            None => {
                self.request("tools/call", json!({"name": tool, "arguments": args}))
                    .await
            }
            Some(handle) => {
                let mut headers = vec![("mcp-method", "tools/call".to_string())];
                headers.push(("mcp-name", tool.to_string()));
                if let Some(handle) = handle {
                    args["agent"] = json!(handle);
                    headers.push(("mcp-param-writ-agent", handle));
                }
                self.next_id += 1;
                let message = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                "params": {"name": tool, "arguments": args, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "writ-bench", "version": "0"},
                }}});
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                self.post_with(&message, &headers).await
            }
        };
        let message = reply
            .message()
            .unwrap_or_else(|| panic!("{tool}: {} {}", reply.status, reply.body));
        let result = message
            .get("result")
            .unwrap_or_else(|| panic!("{tool}: {message}"));
        let text = result["content"]
            .as_array()
            .and_then(|c| c.first())
            .and_then(|c| c["text"].as_str())
            .unwrap_or_default()
            .to_string();
        if let (Some(handle @ None), Some(given)) = (
            &mut self.modern,
            result["structuredContent"]["agent"].as_str(),
        ) {
            *handle = Some(given.to_string());
        }
        (result["isError"].as_bool().unwrap_or(false), text)
    }

    /// The same session with another bearer token (an attacker who learned
    /// the session id).
    #[allow(dead_code)] // the benchmark shares this file and attacks nothing
    pub fn with_token(&self, token: &str) -> Self {
        McpHttp {
            token: token.to_string(),
            ..self.clone()
        }
    }

    /// Sends a bodiless request on the session; returns its status (the
    /// body, an event stream for GET, is dropped).
    async fn bodiless(&self, method: hyper::Method, accept: &str) -> StatusCode {
        let request = self
            .on_session(method.clone())
            .header("accept", accept)
            .body(Full::new(Bytes::new()))
            .unwrap_or_else(|e| panic!("request: {e}"));
        self.client
            .request(request)
            .await
            .map(|r| r.status())
            .unwrap_or_else(|e| panic!("{method} {}: {e}", self.url))
    }

    /// Opens the session's event stream (HTTP GET) and returns its status.
    #[allow(dead_code)] // the benchmark shares this file and attacks nothing
    pub async fn listen(&self) -> StatusCode {
        self.bodiless(hyper::Method::GET, "text/event-stream").await
    }

    /// Ends the session (HTTP DELETE).
    pub async fn close(&mut self) -> StatusCode {
        if self.session.is_none() {
            return StatusCode::OK;
        }
        let status = self
            .bodiless(hyper::Method::DELETE, "application/json, text/event-stream")
            .await;
        self.session = None;
        status
    }
}
