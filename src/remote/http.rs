//! One JSON-RPC call over HTTP/1.1.
//!
//! The client is hyper-util's pooled client on the same hyper that serves
//! `writ serve`: one HTTP stack in the crate, keep-alive connections, and
//! dropping a call's future drops its connection, which is how the server
//! learns that a waiting `admit` was cancelled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::{Error, Result};

/// A cheap-to-clone JSON-RPC client bound to one server and one token.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    pool: Pool<HttpConnector, Full<Bytes>>,
    rpc: Uri,
    authorization: Arc<str>,
    next_id: Arc<AtomicU64>,
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        reason: reason.into(),
    }
}

impl Client {
    pub(crate) fn new(url: &str, token: &str) -> Result<Client> {
        let base = url.trim_end_matches('/');
        let rpc: Uri = format!("{base}/rpc")
            .parse()
            .map_err(|e| unavailable(format!("'{url}' is not a URL ({e})")))?;
        if rpc.scheme_str() != Some("http") {
            return Err(unavailable(format!(
                "'{url}' is not an http:// URL (writ serve listens on loopback HTTP)"
            )));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Client {
            pool: Pool::builder(TokioExecutor::new()).build(connector),
            rpc,
            authorization: Arc::from(format!("Bearer {token}")),
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    /// Calls `method`; a JSON-RPC error comes back as the `writ::Error` it
    /// describes.
    pub(crate) async fn call(&self, method: &str, params: Value) -> Result<Value> {
        // Relaxed: ids only need to differ.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.rpc.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::AUTHORIZATION, &*self.authorization)
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| unavailable(format!("cannot build the request ({e})")))?;
        let response =
            self.pool.request(request).await.map_err(|e| {
                unavailable(format!("cannot reach the server at {} ({e})", self.rpc))
            })?;
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
