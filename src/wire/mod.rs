//! The spellings `writ serve` and its clients share: targets, grants, file
//! content and the JSON-RPC envelope. See docs/PROTOCOL.md.

use serde_json::{Value, json};

use crate::Target;

pub(crate) mod discovery;

/// The protocol version `session.info` returns; bumped on any incompatible
/// change of a method, parameter, result or error kind.
pub const PROTOCOL_VERSION: &str = "1";

/// A target from its wire spelling: a string (a trailing `/` is a tree,
/// `"*"` is [`Target::workspace`]) or `{path, tree?, shared?}` (or
/// `{workspace: true, shared?}`).
pub(crate) fn target_from_wire(value: &Value) -> Result<Target, String> {
    match value {
        Value::String(s) if s == "*" => Ok(Target::workspace()),
        Value::String(s) => Ok(Target::from(s.as_str())),
        Value::Object(map) => {
            let flag = |k: &str| match map.get(k) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(format!("target field '{k}' must be a boolean")),
            };
            for k in map.keys() {
                if !matches!(k.as_str(), "path" | "tree" | "shared" | "workspace") {
                    return Err(format!("unknown target field '{k}'"));
                }
            }
            let target = if flag("workspace")? {
                Target::workspace()
            } else {
                let path = match map.get("path") {
                    Some(Value::String(p)) => p.as_str(),
                    _ => return Err("a target object needs a string 'path'".into()),
                };
                if flag("tree")? {
                    Target::tree(path)
                } else {
                    Target::from(path)
                }
            };
            Ok(if flag("shared")? {
                target.shared()
            } else {
                target
            })
        }
        _ => Err("a target is a string or an object {path, tree?, shared?}".into()),
    }
}

/// A list of targets from the wire.
pub(crate) fn targets_from_wire(value: &Value) -> Result<Vec<Target>, String> {
    match value {
        Value::Array(items) => items.iter().map(target_from_wire).collect(),
        Value::String(_) | Value::Object(_) => Ok(vec![target_from_wire(value)?]),
        _ => Err("'targets' must be a list of targets".into()),
    }
}

/// A target's wire spelling: always the object form, so nothing depends on
/// how a path string ends.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn target_to_wire(target: &Target) -> Value {
    let shared = target.mode() == crate::Mode::Shared;
    if target.is_workspace() {
        return json!({"workspace": true, "shared": shared});
    }
    json!({
        "path": target.path().to_string_lossy(),
        "tree": target.is_tree(),
        "shared": shared,
    })
}

/// File content from the wire: a UTF-8 string, or `{"base64": ..}`.
pub(crate) fn content_from_wire(value: &Value) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(map) => match map.get("base64") {
            Some(Value::String(b)) if map.len() == 1 => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| format!("'base64' content does not decode: {e}")),
            _ => Err("content is a string or {\"base64\": \"..\"}".into()),
        },
        _ => Err("content is a string or {\"base64\": \"..\"}".into()),
    }
}

/// File content for the wire: a string when it is UTF-8, else base64.
pub(crate) fn content_to_wire(bytes: &[u8]) -> Value {
    use base64::Engine as _;
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::from(text),
        Err(_) => json!({"base64": base64::engine::general_purpose::STANDARD.encode(bytes)}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip() {
        for t in [
            Target::file("a.rs"),
            Target::tree("src").shared(),
            Target::workspace(),
            Target::from("docs/"),
        ] {
            let back = target_from_wire(&target_to_wire(&t)).unwrap();
            assert_eq!(back, t);
        }
        assert_eq!(target_from_wire(&json!("*")).unwrap(), Target::workspace());
        assert!(target_from_wire(&json!("src/")).unwrap().is_tree());
        assert!(target_from_wire(&json!(3)).is_err());
        assert!(target_from_wire(&json!({"path": "a", "tree": "yes"})).is_err());
        assert!(target_from_wire(&json!({"path": "a", "bogus": 1})).is_err());
    }

    #[test]
    fn content_round_trips() {
        for bytes in [&b"text\n"[..], &[0xff, 0x00, 0x80][..], &[][..]] {
            assert_eq!(content_from_wire(&content_to_wire(bytes)).unwrap(), bytes);
        }
        assert!(content_from_wire(&json!({"base64": "!!"})).is_err());
    }
}
