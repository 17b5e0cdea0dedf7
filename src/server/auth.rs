//! Tokens and origins.
//!
//! The session token is 64 hex digits. An actor token is the actor's handle,
//! a dot and 64 hex digits of its own secret: the handle finds the actor
//! (a lookup that reveals nothing secret), then the secret is compared in
//! constant time, so response timing tells an attacker nothing about how
//! much of a guess was right.

use axum::http::HeaderMap;
use subtle::ConstantTimeEq as _;

use crate::{Error, ProtocolError, Result};

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Caller {
    /// The session token: may do everything.
    Session,
    /// An actor token: acts only for this actor (its wire number) and its
    /// descendants.
    Actor(u64),
}

/// A token given on the command line or by a caller must be plain text that
/// fits in a header.
pub(crate) fn check_token_shape(token: &str) -> Result<()> {
    if token.len() < 16
        || !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(Error::Protocol {
            kind: ProtocolError::InvalidParams,
            detail: "a session token is at least 16 letters, digits or dashes".into(),
        });
    }
    Ok(())
}

/// Constant-time equality of two secrets (the length is not secret).
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// True when the request has no `Origin`, or a loopback one. Browsers send
/// `Origin` on cross-site requests; a page on another site (or a DNS name
/// rebound to 127.0.0.1) never has a loopback origin.
pub(crate) fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| !rest.contains('/') && loopback_authority(rest))
}

/// True when `authority` (`host[:port]`, as in a `Host` header or an
/// origin after its scheme) names the loopback host.
pub(crate) fn loopback_authority(authority: &str) -> bool {
    let host = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once(']') {
            Some((host, after)) if after.is_empty() || after.starts_with(':') => host,
            _ => return false,
        }
    } else {
        authority.split(':').next().unwrap_or("")
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// The answer to a request refused at the door (401, 403, a bad request
/// before any JSON-RPC id is known): a JSON-RPC error with a null id, in
/// the same shape `/rpc` uses, so every client reads one format.
pub(crate) fn refuse(status: axum::http::StatusCode, e: &Error) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let body = serde_json::json!({
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with_origin(origin: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::ORIGIN, origin.parse().unwrap());
        h
    }

    #[test]
    fn origins() {
        assert!(origin_allowed(&HeaderMap::new()));
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8080",
        ] {
            assert!(origin_allowed(&with_origin(ok)), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://127.0.0.1.evil.example",
            "http://localhost.evil.example:80",
            "file://",
            "http://[::1].evil",
        ] {
            assert!(!origin_allowed(&with_origin(bad)), "{bad}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abcd", "abcd"));
        assert!(!same_secret("abcd", "abce"));
        assert!(!same_secret("abcd", "abc"));
    }
}
