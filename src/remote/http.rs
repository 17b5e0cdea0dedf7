//! One JSON-RPC call over HTTP/1.1.
//!
//! The client is hyper-util's pooled client on the same hyper that serves
//! `writ serve`: one HTTP stack in the crate, keep-alive connections, and
//! dropping a call's future drops its connection, which is how the server
//! learns that a waiting `admit` was cancelled.
//!
//! A `unix:PATH` URL reaches the server's Unix socket through the same pool,
//! with a connector that dials the socket instead of a TCP address, so
//! keep-alive and cancellation behave as they do over TCP.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, Uri};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use crate::{Error, Result};

/// The `unix:` URL prefix: `unix:/run/user/1000/writ.sock`.
pub(crate) const UNIX_SCHEME: &str = "unix:";

/// Dials one Unix socket, whatever the request's URI says.
#[derive(Debug, Clone)]
struct UnixConnector {
    path: Arc<Path>,
}

impl tower_service::Service<Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.path.clone();
        Box::pin(async move {
            tokio::net::UnixStream::connect(&*path)
                .await
                .map(TokioIo::new)
        })
    }
}

/// The pool of one transport.
#[derive(Debug, Clone)]
enum Transport {
    Tcp(Pool<HttpConnector, Full<Bytes>>),
    Unix(Pool<UnixConnector, Full<Bytes>>),
}

impl Transport {
    async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> std::result::Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        match self {
            Transport::Tcp(pool) => pool.request(request).await,
            Transport::Unix(pool) => pool.request(request).await,
        }
    }
}

/// A cheap-to-clone JSON-RPC client bound to one server and one token.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    pool: Transport,
    rpc: Uri,
    /// The URL as given, for messages.
    url: Arc<str>,
    authorization: Arc<str>,
    next_id: Arc<AtomicU64>,
    /// Makes this client's tickets differ from another client's that acts
    /// for the same actor.
    nonce: u64,
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        reason: reason.into(),
    }
}

impl Client {
    /// A client of the server at `url`: `http://HOST:PORT` or `unix:PATH`.
    pub(crate) fn new(url: &str, token: &str) -> Result<Client> {
        let base = url.trim_end_matches('/');
        let (pool, rpc) = if let Some(path) = base.strip_prefix(UNIX_SCHEME) {
            if path.is_empty() {
                return Err(unavailable(format!(
                    "'{url}' names no socket (the form is unix:/path/to/writ.sock)"
                )));
            }
            let connector = UnixConnector {
                path: Arc::from(Path::new(path)),
            };
            // The authority only fills the Host header; the socket is the address.
            let rpc = Uri::from_static("http://localhost/rpc");
            (
                Transport::Unix(Pool::builder(TokioExecutor::new()).build(connector)),
                rpc,
            )
        } else {
            let rpc: Uri = format!("{base}/rpc")
                .parse()
                .map_err(|e| unavailable(format!("'{url}' is not a URL ({e})")))?;
            if rpc.scheme_str() != Some("http") {
                return Err(unavailable(format!(
                    "'{url}' is neither an http:// URL nor unix:PATH (writ serve listens \
                     on loopback HTTP and, with --socket, a Unix socket)"
                )));
            }
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            (
                Transport::Tcp(Pool::builder(TokioExecutor::new()).build(connector)),
                rpc,
            )
        };
        Ok(Client {
            pool,
            rpc,
            url: Arc::from(base),
            authorization: Arc::from(format!("Bearer {token}")),
            next_id: Arc::new(AtomicU64::new(1)),
            nonce: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ (u64::from(std::process::id()) << 32),
        })
    }

    /// A ticket naming one wait, so that it can be given up from another
    /// connection (see `Request::hold`).
    pub(crate) fn ticket(&self) -> String {
        // Relaxed: tickets only need to differ.
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}-{n}", self.nonce)
    }

    /// The error for a request the pool could not deliver.
    fn unreachable(&self, e: &hyper_util::client::legacy::Error) -> Error {
        // The pool's own message is generic ("client error (Connect)");
        // the cause (refused, no such file, ...) is in its sources.
        let mut why = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            why.push_str(": ");
            why.push_str(&cause.to_string());
            source = cause.source();
        }
        unavailable(format!("cannot reach the server at {} ({why})", self.url))
    }

    /// Calls `method`; a JSON-RPC error comes back as the `writ::Error` it
    /// describes.
    pub(crate) async fn call(&self, method: &str, params: Value) -> Result<Value> {
        // Relaxed: ids only need to differ.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let body = Bytes::from(body.to_string());
        let build = || {
            Request::builder()
                .method(Method::POST)
                .uri(self.rpc.clone())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::AUTHORIZATION, &*self.authorization)
                .body(Full::new(body.clone()))
                .map_err(|e| unavailable(format!("cannot build the request ({e})")))
        };
        let response = match self.pool.request(build()?).await {
            Ok(response) => response,
            // A kept-alive connection the server closed while idle (it was
            // restarted, or shut it) can be picked from the pool before its
            // close is seen; the request then breaks off unanswered. A
            // server closes a connection unanswered only when it goes away,
            // so one retry on a fresh connection cannot run a call twice on
            // the same server. A failure to connect is not retried: nobody
            // is there.
            Err(e) if !e.is_connect() => self
                .pool
                .request(build()?)
                .await
                .map_err(|e| self.unreachable(&e))?,
            Err(e) => return Err(self.unreachable(&e)),
        };
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unavailable(format!("the server's answer broke off ({e})")))?
            .to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).map_err(|_| {
            unavailable(format!(
                "the server answered HTTP {status} with something that is not JSON-RPC"
            ))
        })?;
        if let Some(error) = answer.get("error") {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("");
            return Err(Error::from_wire(
                message,
                error.get("data").unwrap_or(&Value::Null),
            ));
        }
        match answer.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(unavailable(
                "the server's answer has neither result nor error",
            )),
        }
    }
}
