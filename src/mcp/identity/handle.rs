//! Identity by handle (SPEC §14): the optional `agent` argument every tool
//! takes, in both tool sets, and what a result tells the model about it.
//!
//! The MCP revision of 2026-07-28 has no sessions, so nothing carries an
//! agent from one call to the next but the call itself: a client names its
//! agent in the `agent` argument (mirrored by modern clients into the
//! `Mcp-Param-Writ-Agent` header, and accepted as `Writ-Agent` too), and a
//! call that names none acts as a fresh agent whose handle the result gives
//! back. Both tool sets go through this one module: the argument is added
//! to every schema here, taken out of every call here (the tools never see
//! it); `mcp/result` puts the handle in every result.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

/// The argument that names the agent a call acts as.
pub(crate) const AGENT_ARG: &str = "agent";

/// The header a modern client mirrors `agent` into (`x-mcp-header`), and
/// the one handshake-era clients set themselves.
pub(crate) const AGENT_HEADER: &str = "writ-agent";

/// The standard header a modern client mirrors an `x-mcp-header` argument
/// into (SEP-2243): `Mcp-Param-` and the annotation's name.
pub(crate) const MIRRORED_AGENT_HEADER: &str = "mcp-param-writ-agent";

/// The longest agent name accepted.
pub(crate) const MAX_AGENT_NAME: usize = 64;

const AGENT_DOC: &str = "Your agent handle, exactly as an earlier result of these tools gave it \
(structuredContent.agent, or the sentence asking you to pass it). Pass it on every call so that \
what you read and reserved carries over from call to call; leave it out only on your very first \
call, and you are given one.";

/// Every tool of `tools` with the optional `agent` argument in its input
/// schema (its output schema names the agent too: `mcp/result`).
pub(crate) fn with_agent_argument(mut tools: Vec<Tool>) -> Vec<Tool> {
    for tool in &mut tools {
        let mut input = (*tool.input_schema).clone();
        if let Some(Value::Object(properties)) = input.get_mut("properties") {
            properties.insert(
                AGENT_ARG.into(),
                json!({"type": "string", "description": AGENT_DOC, "x-mcp-header": "Writ-Agent"}),
            );
        }
        tool.input_schema = Arc::new(input);
    }
    tools
}

/// An agent name checked: trimmed, 1 to [`MAX_AGENT_NAME`] characters, and
/// the rule every name an agent chooses keeps (`text::check_name`: no
/// control or bidirectional-override character). An empty name is none.
pub(crate) fn checked_name(name: &str) -> Result<Option<String>, String> {
    let name = name.trim();
    if name.is_empty() {
        return Ok(None);
    }
    if name.chars().count() > MAX_AGENT_NAME {
        return Err(format!("an agent name is 1 to {MAX_AGENT_NAME} characters"));
    }
    crate::text::check_name("an agent name", name)?;
    Ok(Some(name.to_string()))
}

/// Takes the `agent` argument out of a call's arguments: the agent it
/// names, if any. A value that is not a valid name is the model's mistake,
/// told in a sentence.
pub(crate) fn take_agent(arguments: &mut Option<JsonObject>) -> Result<Option<String>, String> {
    let Some(value) = arguments.as_mut().and_then(|args| args.remove(AGENT_ARG)) else {
        return Ok(None);
    };
    match value {
        Value::Null => Ok(None),
        Value::String(name) => checked_name(&name).map_err(|why| {
            format!(
                "The `agent` argument is not a handle these tools gave: {why}. Nothing was done."
            )
        }),
        other => Err(format!(
            "The `agent` argument must be a string (the handle an earlier result gave you), not \
             {other}. Nothing was done."
        )),
    }
}

/// The agent a request's headers name: `Writ-Agent`, else the mirrored
/// `Mcp-Param-Writ-Agent` (plain, or in SEP-2243's `=?base64?…?=` form).
pub(crate) fn header_agent(headers: &http::HeaderMap) -> Result<Option<String>, String> {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map(str::to_string)
                    .map_err(|_| format!("the {name} header is not text"))
            })
            .transpose()
    };
    let plain = text(AGENT_HEADER)?;
    let mirrored = match text(MIRRORED_AGENT_HEADER)? {
        Some(value) => Some(
            decode_header_value(&value)
                .ok_or_else(|| format!("the {MIRRORED_AGENT_HEADER} header is not valid Base64"))?,
        ),
        None => None,
    };
    match plain.or(mirrored) {
        Some(name) => checked_name(&name),
        None => Ok(None),
    }
}

/// The agent a request names: the `Writ-Agent` header (or its mirrored
/// `Mcp-Param-Writ-Agent`), else `?agent=` on the URL. An empty name is no
/// name.
pub(crate) fn agent_name(parts: &http::request::Parts) -> Result<Option<String>, String> {
    if let Some(name) = header_agent(&parts.headers)? {
        return Ok(Some(name));
    }
    let from_query = parts.uri.query().and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.strip_prefix("agent="))
            .next_back()
            .map(percent_decode)
    });
    match from_query {
        Some(name) => checked_name(&name),
        None => Ok(None),
    }
}

/// `%XX` and `+` of a query value, decoded; invalid escapes stay as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A SEP-2243 header value: `=?base64?…?=` decoded, anything else as it is.
fn decode_header_value(value: &str) -> Option<String> {
    use base64::Engine as _;
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_string()),
    }
}

/// A new handle: a short name nobody can guess, so no two calls share one
/// by accident or by a guess.
pub(crate) fn mint() -> Result<String, String> {
    let bytes = crate::random::bytes(9).map_err(|e| format!("cannot make an agent handle: {e}"))?;
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let mut handle = String::from("agent-");
    // 14 characters of five bits: 70 of the 72 random bits drawn.
    let mut bits: u128 = 0;
    for b in bytes {
        bits = (bits << 8) | u128::from(b);
    }
    for _ in 0..14 {
        handle.push(ALPHABET[(bits & 31) as usize] as char);
        bits >>= 5;
    }
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_distinct_and_fit_a_name() {
        let a = mint().unwrap();
        let b = mint().unwrap();
        assert_ne!(a, b);
        assert_eq!(checked_name(&a).unwrap().as_deref(), Some(a.as_str()));
        assert_eq!(a.len(), "agent-".len() + 14);
    }

    #[test]
    fn the_agent_argument_is_taken_out_and_checked() {
        let mut args = serde_json::from_value(json!({"path": "a", "agent": "h1"})).ok();
        assert_eq!(take_agent(&mut args).unwrap().as_deref(), Some("h1"));
        assert!(!args.unwrap().contains_key("agent"));
        let mut bad = serde_json::from_value(json!({"agent": 7})).ok();
        assert!(
            take_agent(&mut bad)
                .unwrap_err()
                .contains("must be a string")
        );
        let mut bidi = serde_json::from_value(json!({"agent": "a\u{202E}b"})).ok();
        assert!(take_agent(&mut bidi).is_err());
        let mut none = None;
        assert_eq!(take_agent(&mut none).unwrap(), None);
    }

    #[test]
    fn mirrored_headers_are_decoded() {
        let mut headers = http::HeaderMap::new();
        headers.insert(MIRRORED_AGENT_HEADER, "=?base64?aDE=?=".parse().unwrap());
        assert_eq!(header_agent(&headers).unwrap().as_deref(), Some("h1"));
        headers.insert(AGENT_HEADER, "named".parse().unwrap());
        assert_eq!(header_agent(&headers).unwrap().as_deref(), Some("named"));
    }
}
