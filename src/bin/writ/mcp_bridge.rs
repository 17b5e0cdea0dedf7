//! `writ mcp` as a bridge: MCP messages from stdin go unchanged to a running
//! `writ serve` at `/mcp` (Streamable HTTP), and its answers come back on
//! stdout. Many stdio agents thus share one scheduler, and each client's own
//! `clientInfo` names its actor.

use std::sync::Arc;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, Uri};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// What every request to the server carries.
struct Link {
    pool: Pool<HttpConnector, Full<Bytes>>,
    endpoint: Uri,
    authorization: String,
    /// `Mcp-Session-Id` and `MCP-Protocol-Version`, learned from `initialize`.
    session: Mutex<(Option<String>, Option<String>)>,
    out: tokio::sync::Mutex<tokio::io::Stdout>,
}

/// Whether a server answers at `url` (its `/health`).
pub async fn alive(url: &str) -> bool {
    let Ok(uri) = format!("{}/health", url.trim_end_matches('/')).parse::<Uri>() else {
        return false;
    };
    let pool: Pool<HttpConnector, Full<Bytes>> =
        Pool::builder(TokioExecutor::new()).build(HttpConnector::new());
    let Ok(request) = Request::get(uri).body(Full::new(Bytes::new())) else {
        return false;
    };
    let answer = tokio::time::timeout(std::time::Duration::from_secs(2), pool.request(request));
    matches!(answer.await, Ok(Ok(response)) if response.status().is_success())
}

/// Bridges stdin/stdout to `url`'s `/mcp` until stdin ends, then ends the
/// MCP session (its actor and reservations go with it). `tools` asks the
/// server for a tool set (`/mcp?tools=…`) instead of its default.
pub async fn run(url: &str, token: &str, tools: Option<&str>) -> Result<(), String> {
    let query = tools.map(|t| format!("?tools={t}")).unwrap_or_default();
    let endpoint: Uri = format!("{}/mcp{query}", url.trim_end_matches('/'))
        .parse()
        .map_err(|e| format!("'{url}' is not a URL: {e}"))?;
    let link = Arc::new(Link {
        pool: Pool::builder(TokioExecutor::new()).build(HttpConnector::new()),
        endpoint,
        authorization: format!("Bearer {token}"),
        session: Mutex::new((None, None)),
        out: tokio::sync::Mutex::new(tokio::io::stdout()),
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut calls = tokio::task::JoinSet::new();
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| format!("cannot read stdin: {e}"))?
    {
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
        if message.get("method").and_then(Value::as_str) == Some("initialize") {
            link.clone().forward(message, line).await;
        } else {
            calls.spawn(link.clone().forward(message, line));
        }
    }
    while calls.join_next().await.is_some() {}
    link.close().await;
    Ok(())
}

impl Link {
    async fn emit(&self, line: &str) {
        let mut out = self.out.lock().await;
        // A client that closed stdout is gone; there is no one to tell.
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.write_all(b"\n").await;
        let _ = out.flush().await;
    }

    fn request(&self, method: Method, body: Bytes) -> Option<Request<Full<Bytes>>> {
        let (session, version) = self.session.lock().clone();
        let mut builder = Request::builder()
            .method(method)
            .uri(self.endpoint.clone())
            .header(hyper::header::AUTHORIZATION, &self.authorization)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream");
        if let Some(id) = session {
            builder = builder.header("mcp-session-id", id);
        }
        if let Some(v) = version {
            builder = builder.header("mcp-protocol-version", v);
        }
        builder.body(Full::new(body)).ok()
    }

    /// Sends one message and writes every message of the answer to stdout.
    async fn forward(self: Arc<Self>, message: Value, line: String) {
        let id = message.get("id").cloned();
        let fail = |reason: String| {
            id.as_ref().map(|id| {
                json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32603, "message": reason}})
                .to_string()
            })
        };
        let Some(request) = self.request(Method::POST, Bytes::from(line)) else {
            if let Some(e) = fail("cannot build the request".into()) {
                self.emit(&e).await;
            }
            return;
        };
        let response = match self.pool.request(request).await {
            Ok(r) => r,
            Err(e) => {
                let reason = format!("cannot reach writ serve at {}: {e}", self.endpoint);
                if let Some(e) = fail(reason) {
                    self.emit(&e).await;
                }
                return;
            }
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
            self.relay_events(response).await;
            return;
        }
        let body = match response.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                if let Some(e) = fail(format!("the answer broke off: {e}")) {
                    self.emit(&e).await;
                }
                return;
            }
        };
        if body.is_empty() {
            return; // 202 for a notification or a response.
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(answer) if answer.get("jsonrpc").is_some() => {
                let answer = match (&id, answer.get("id")) {
                    // A refusal before the session (401, 403) names no id: give it the request's.
                    (Some(id), Some(Value::Null)) => {
                        let mut a = answer.clone();
                        a["id"] = id.clone();
                        a
                    }
                    _ => answer,
                };
                self.learn_version(&answer);
                self.emit(&answer.to_string()).await;
            }
            _ => {
                let text = String::from_utf8_lossy(&body);
                if let Some(e) = fail(format!("writ serve answered HTTP {status}: {text}")) {
                    self.emit(&e).await;
                }
            }
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

    /// Forwards each `data:` event of a server-sent event stream.
    async fn relay_events(&self, response: Response<Incoming>) {
        let mut body = response.into_body();
        let mut pending = Vec::new();
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
                    }
                    self.emit(&message).await;
                }
            }
        }
    }

    /// Ends the MCP session (HTTP DELETE), which frees its actor and holds.
    async fn close(&self) {
        if self.session.lock().0.is_none() {
            return;
        }
        if let Some(request) = self.request(Method::DELETE, Bytes::new()) {
            let _ = self.pool.request(request).await;
        }
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
