//! Errors on the wire: one stable snake_case kind and one JSON-RPC code per
//! kind, and the `data` object `{"kind": .., ...fields}` that carries a
//! variant's fields across a process boundary and back.
//!
//! [`ERROR_KINDS`] is the one table of kinds and codes: `Error::code` looks
//! codes up in it and docs/PROTOCOL.md is checked against it by a test.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{Busy, Error, SlotLimit};
use crate::kinds::{HoldKind, Mode};

/// Which protocol rule a request broke; each is its own kind on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The body is not JSON.
    ParseError,
    /// The body is JSON but not a JSON-RPC 2.0 request.
    InvalidRequest,
    /// No such method.
    UnknownMethod,
    /// A parameter is missing or has the wrong type.
    InvalidParams,
    /// The body exceeds the server's `--max-body`.
    BodyTooLarge,
    /// No token, or a token the server does not know.
    Unauthorized,
    /// The server failed in a way that is not the caller's fault.
    Internal,
}

impl ProtocolError {
    /// The kind's wire name.
    pub fn kind(self) -> &'static str {
        match self {
            ProtocolError::ParseError => "parse_error",
            ProtocolError::InvalidRequest => "invalid_request",
            ProtocolError::UnknownMethod => "unknown_method",
            ProtocolError::InvalidParams => "invalid_params",
            ProtocolError::BodyTooLarge => "body_too_large",
            ProtocolError::Unauthorized => "unauthorized",
            ProtocolError::Internal => "internal",
        }
    }

    fn from_kind(kind: &str) -> Option<Self> {
        [
            ProtocolError::ParseError,
            ProtocolError::InvalidRequest,
            ProtocolError::UnknownMethod,
            ProtocolError::InvalidParams,
            ProtocolError::BodyTooLarge,
            ProtocolError::Unauthorized,
            ProtocolError::Internal,
        ]
        .into_iter()
        .find(|p| p.kind() == kind)
    }
}

/// One error kind on the wire: its name, its JSON-RPC code and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorKind {
    /// The snake_case name carried in `data.kind`.
    pub kind: &'static str,
    /// The JSON-RPC `code`; stable across versions.
    pub code: i64,
    /// One line for docs/PROTOCOL.md.
    pub meaning: &'static str,
}

const fn kind(kind: &'static str, code: i64, meaning: &'static str) -> ErrorKind {
    ErrorKind {
        kind,
        code,
        meaning,
    }
}

/// Every error kind with its stable code. Protocol kinds use JSON-RPC's
/// reserved codes where one exists; the rest of the protocol kinds are in
/// -32000..-32099 (server errors) and refusals of §2–§11 from 1001 up.
pub const ERROR_KINDS: &[ErrorKind] = &[
    kind("parse_error", -32700, "the body is not JSON"),
    kind(
        "invalid_request",
        -32600,
        "not a JSON-RPC 2.0 request object",
    ),
    kind("unknown_method", -32601, "no such method"),
    kind(
        "invalid_params",
        -32602,
        "a parameter is missing or has the wrong type",
    ),
    kind(
        "internal",
        -32603,
        "the server failed; not the caller's fault",
    ),
    kind("body_too_large", -32001, "the body exceeds `--max-body`"),
    kind(
        "unauthorized",
        -32002,
        "no token or an unknown token (HTTP 401)",
    ),
    kind(
        "forbidden",
        -32003,
        "an actor token acting outside its actor's line",
    ),
    kind(
        "unknown_lease",
        -32004,
        "the lease expired, was revoked, or the server restarted",
    ),
    kind(
        "unknown_actor",
        -32005,
        "the actor was dropped or its lease ended",
    ),
    kind(
        "unknown_hold",
        -32006,
        "the hold was released or its lease ended",
    ),
    kind(
        "unavailable",
        -32007,
        "the server is shutting down or cannot be reached",
    ),
    kind("busy", 1001, "a path is held or queued for by someone else"),
    kind("timeout", 1002, "a wait gave up after its timeout"),
    kind("deadlock", 1003, "waiting would close a cycle"),
    kind(
        "outside_grant",
        1004,
        "the path resolves outside the grant root",
    ),
    kind(
        "outside_fence",
        1005,
        "the path lies outside the actor's fence",
    ),
    kind(
        "invalid_path",
        1006,
        "the path is malformed or of the wrong kind",
    ),
    kind("no_slot", 1007, "a slot limit is reached"),
    kind("read_only", 1008, "a read-only actor asked for a write"),
    kind("released", 1009, "the guard's actor was dropped"),
    kind("policy", 1010, "the path policy refuses the access"),
    kind(
        "not_read",
        1011,
        "a write to an existing file not read first",
    ),
    kind("stale", 1012, "the file changed since it was read"),
    kind("not_found", 1013, "the file does not exist"),
    kind("no_match", 1014, "`replace` found no occurrence"),
    kind(
        "ambiguous_match",
        1015,
        "`replace` found several occurrences",
    ),
    kind(
        "rewind_conflict",
        1016,
        "a rewind would overwrite changes writ did not make",
    ),
    kind("unknown_turn", 1017, "no history is recorded for the turn"),
    kind("history", 1018, "history is unavailable"),
    kind(
        "not_approved",
        1019,
        "the approval hook refused a wider fence",
    ),
    kind("plan_conflict", 1020, "two unordered tasks write one path"),
    kind("plan_cycle", 1021, "a plan's dependencies form a cycle"),
    kind("invalid_plan", 1022, "a plan is malformed"),
    kind("spawn", 1023, "a delegated command could not start"),
    kind("io", 1024, "an operating-system error on a path"),
    kind(
        "too_large",
        1025,
        "a whole read would exceed `max_read_bytes`",
    ),
    kind(
        "txn_too_large",
        1026,
        "an admission needs more operations than one etcd transaction allows",
    ),
    kind(
        "unsupported",
        1027,
        "a server whose table is in etcd cannot serve this request yet",
    ),
    kind(
        "partial_view",
        1028,
        "a whole-file write after a read that showed part of the file",
    ),
];

fn secs(d: &Duration) -> Value {
    json!(d.as_secs_f64())
}

fn hold_kind(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Fence => "fence",
        HoldKind::Call => "call",
        HoldKind::Claim => "claim",
    }
}

fn mode(mode: Mode) -> &'static str {
    match mode {
        Mode::Shared => "shared",
        Mode::Exclusive => "exclusive",
    }
}

impl Error {
    /// The stable snake_case name of this error's kind on the wire.
    ///
    /// ```
    /// let e = writ::Error::NotFound { path: "a.rs".into() };
    /// assert_eq!(e.kind(), "not_found");
    /// assert_eq!(e.code(), 1013);
    /// assert_eq!(e.data()["path"], "a.rs");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Busy(_) => "busy",
            Error::Timeout { .. } => "timeout",
            Error::Deadlock { .. } => "deadlock",
            Error::OutsideGrant { .. } => "outside_grant",
            Error::OutsideFence { .. } => "outside_fence",
            Error::InvalidPath { .. } => "invalid_path",
            Error::NoSlot { .. } => "no_slot",
            Error::ReadOnly { .. } => "read_only",
            Error::Released { .. } => "released",
            Error::Policy { .. } => "policy",
            Error::NotRead { .. } => "not_read",
            Error::Stale { .. } => "stale",
            Error::PartialView { .. } => "partial_view",
            Error::NotFound { .. } => "not_found",
            Error::TooLarge { .. } => "too_large",
            Error::TxnTooLarge { .. } => "txn_too_large",
            Error::NoMatch { .. } => "no_match",
            Error::AmbiguousMatch { .. } => "ambiguous_match",
            Error::RewindConflict { .. } => "rewind_conflict",
            Error::UnknownTurn { .. } => "unknown_turn",
            Error::History { .. } => "history",
            Error::NotApproved { .. } => "not_approved",
            Error::PlanConflict { .. } => "plan_conflict",
            Error::PlanCycle { .. } => "plan_cycle",
            Error::InvalidPlan { .. } => "invalid_plan",
            Error::Spawn { .. } => "spawn",
            Error::Protocol { kind, .. } => kind.kind(),
            Error::Forbidden { .. } => "forbidden",
            Error::UnknownLease { .. } => "unknown_lease",
            Error::UnknownActor { .. } => "unknown_actor",
            Error::UnknownHold { .. } => "unknown_hold",
            Error::Unavailable { .. } => "unavailable",
            Error::Unsupported { .. } => "unsupported",
            Error::Io { .. } => "io",
        }
    }

    /// The stable JSON-RPC code of this error's kind (from [`ERROR_KINDS`]).
    pub fn code(&self) -> i64 {
        let kind = self.kind();
        ERROR_KINDS
            .iter()
            .find(|k| k.kind == kind)
            .map_or(-32603, |k| k.code)
    }

    /// The JSON-RPC error `data`: `{"kind": .., ...the variant's fields}`.
    /// Paths are absolute keys; durations are seconds.
    pub fn data(&self) -> Value {
        let mut data = match self {
            Error::Busy(b) => json!({
                "path": b.path, "holder": b.holder, "hold_kind": hold_kind(b.kind),
                "mode": mode(b.mode), "label": b.label, "age": secs(&b.age),
                "queued": b.queued, "relative": b.relative,
            }),
            Error::Timeout { paths, waited } => json!({"paths": paths, "waited": secs(waited)}),
            Error::Deadlock { cycle } => json!({ "cycle": cycle }),
            Error::OutsideGrant { path, root } => json!({"path": path, "root": root}),
            Error::OutsideFence { path, actor, fence } => {
                json!({"path": path, "actor": actor, "fence": fence})
            }
            Error::InvalidPath { path, reason } => json!({"path": path, "reason": reason}),
            Error::NoSlot { limit, max } => json!({"limit": limit, "max": max}),
            Error::ReadOnly { actor, path } => json!({"actor": actor, "path": path}),
            Error::Released { what, actor } => json!({"what": what, "actor": actor}),
            Error::Policy { path, reason } => json!({"path": path, "reason": reason}),
            Error::NotRead { path } | Error::NotFound { path } | Error::NoMatch { path } => {
                json!({ "path": path })
            }
            Error::Stale { path, writer, ago } => {
                json!({"path": path, "writer": writer, "ago": ago.as_ref().map(secs)})
            }
            Error::PartialView { path, seen, rest } => {
                json!({"path": path, "seen": seen, "rest": rest})
            }
            Error::AmbiguousMatch { path, count } => json!({"path": path, "count": count}),
            Error::TooLarge { path, size, limit } => {
                json!({"path": path, "size": size, "limit": limit})
            }
            Error::TxnTooLarge { ops, limit } => json!({"ops": ops, "limit": limit}),
            Error::RewindConflict { conflicts } => json!({ "conflicts": conflicts }),
            Error::UnknownTurn { turn } => json!({ "turn": turn }),
            Error::History { reason }
            | Error::InvalidPlan { reason }
            | Error::Forbidden { reason }
            | Error::Unavailable { reason } => json!({ "reason": reason }),
            Error::NotApproved { actor, path } => json!({"actor": actor, "path": path}),
            Error::PlanConflict {
                first,
                second,
                path,
            } => json!({"first": first, "second": second, "path": path}),
            Error::PlanCycle { tasks } => json!({ "tasks": tasks }),
            Error::Spawn { program, reason } => json!({"program": program, "reason": reason}),
            Error::Protocol { detail, .. } => json!({ "detail": detail }),
            Error::UnknownLease { lease } => json!({ "lease": lease }),
            Error::UnknownActor { actor } => json!({ "actor": actor }),
            Error::UnknownHold { hold } => json!({ "hold": hold }),
            Error::Unsupported { what } => json!({ "what": what }),
            Error::Io { op, path, source } => json!({
                "op": op, "path": path, "error": source.to_string(),
                "io_kind": format!("{:?}", source.kind()),
            }),
        };
        if let Value::Object(map) = &mut data {
            map.insert("kind".into(), Value::from(self.kind()));
        }
        data
    }

    /// Rebuilds the error a server sent: `message` is the JSON-RPC error's
    /// message, `data` its data. An unknown kind becomes
    /// `Protocol { kind: Internal }` carrying the message.
    pub fn from_wire(message: &str, data: &Value) -> Error {
        let empty = Map::new();
        let d = data.as_object().unwrap_or(&empty);
        let kind = d.get("kind").and_then(Value::as_str).unwrap_or("");
        let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let opt_text = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
        let path = |k: &str| PathBuf::from(text(k));
        let paths = |k: &str| -> Vec<PathBuf> {
            d.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(PathBuf::from)
                        .collect()
                })
                .unwrap_or_default()
        };
        let strings = |k: &str| -> Vec<String> {
            d.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let duration = |k: &str| {
            d.get(k)
                .and_then(Value::as_f64)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
        };
        let count = |k: &str| d.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
        match kind {
            "busy" => Error::Busy(Busy {
                path: path("path"),
                holder: text("holder"),
                kind: match text("hold_kind").as_str() {
                    "fence" => HoldKind::Fence,
                    "claim" => HoldKind::Claim,
                    _ => HoldKind::Call,
                },
                mode: if text("mode") == "shared" {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                },
                label: opt_text("label"),
                age: duration("age").unwrap_or_default(),
                queued: d.get("queued").and_then(Value::as_bool).unwrap_or(false),
                relative: path("relative"),
            }),
            "timeout" => Error::Timeout {
                paths: paths("paths"),
                waited: duration("waited").unwrap_or_default(),
            },
            "deadlock" => Error::Deadlock {
                cycle: strings("cycle"),
            },
            "outside_grant" => Error::OutsideGrant {
                path: path("path"),
                root: path("root"),
            },
            "outside_fence" => Error::OutsideFence {
                path: path("path"),
                actor: text("actor"),
                fence: paths("fence"),
            },
            "invalid_path" => Error::InvalidPath {
                path: path("path"),
                reason: text("reason"),
            },
            "no_slot" => Error::NoSlot {
                limit: if text("limit") == "max_writers" {
                    SlotLimit::MaxWriters
                } else {
                    SlotLimit::MaxActors
                },
                max: count("max"),
            },
            "read_only" => Error::ReadOnly {
                actor: text("actor"),
                path: path("path"),
            },
            "released" => Error::Released {
                what: if text("what") == "fence" {
                    "fence"
                } else {
                    "reservation"
                },
                actor: text("actor"),
            },
            "policy" => Error::Policy {
                path: path("path"),
                reason: text("reason"),
            },
            "not_read" => Error::NotRead { path: path("path") },
            "stale" => Error::Stale {
                path: path("path"),
                writer: opt_text("writer"),
                ago: duration("ago"),
            },
            "not_found" => Error::NotFound { path: path("path") },
            "partial_view" => Error::PartialView {
                path: path("path"),
                seen: text("seen"),
                rest: text("rest"),
            },
            "too_large" => Error::TooLarge {
                path: path("path"),
                size: d.get("size").and_then(Value::as_u64).unwrap_or(0),
                limit: d.get("limit").and_then(Value::as_u64).unwrap_or(0),
            },
            "txn_too_large" => Error::TxnTooLarge {
                ops: count("ops"),
                limit: count("limit"),
            },
            "no_match" => Error::NoMatch { path: path("path") },
            "ambiguous_match" => Error::AmbiguousMatch {
                path: path("path"),
                count: count("count"),
            },
            "rewind_conflict" => Error::RewindConflict {
                conflicts: d
                    .get("conflicts")
                    .cloned()
                    .and_then(|c| serde_json::from_value(c).ok())
                    .unwrap_or_default(),
            },
            "unknown_turn" => Error::UnknownTurn { turn: text("turn") },
            "history" => Error::History {
                reason: text("reason"),
            },
            "not_approved" => Error::NotApproved {
                actor: text("actor"),
                path: path("path"),
            },
            "plan_conflict" => Error::PlanConflict {
                first: text("first"),
                second: text("second"),
                path: path("path"),
            },
            "plan_cycle" => Error::PlanCycle {
                tasks: strings("tasks"),
            },
            "invalid_plan" => Error::InvalidPlan {
                reason: text("reason"),
            },
            "spawn" => Error::Spawn {
                program: text("program"),
                reason: text("reason"),
            },
            "forbidden" => Error::Forbidden {
                reason: text("reason"),
            },
            "unknown_lease" => Error::UnknownLease {
                lease: text("lease"),
            },
            "unknown_actor" => Error::UnknownActor {
                actor: text("actor"),
            },
            "unknown_hold" => Error::UnknownHold { hold: text("hold") },
            "unavailable" => Error::Unavailable {
                reason: text("reason"),
            },
            "unsupported" => Error::Unsupported { what: text("what") },
            "io" => Error::Io {
                op: io_op(&text("op")),
                path: path("path"),
                source: std::io::Error::other(text("error")),
            },
            other => Error::Protocol {
                kind: ProtocolError::from_kind(other).unwrap_or(ProtocolError::Internal),
                detail: match d.get("detail").and_then(Value::as_str) {
                    Some(detail) => detail.to_string(),
                    None => message.to_string(),
                },
            },
        }
    }
}

/// `Error::Io::op` is a `&'static str`; an op read back from the wire maps
/// to the crate's own spelling when it is one, else to a neutral verb.
fn io_op(op: &str) -> &'static str {
    const OPS: &[&str] = &[
        "read",
        "write",
        "open",
        "create",
        "delete",
        "rename",
        "inspect",
        "scan",
        "open the folder",
        "create the folder",
        "sync the folder above",
        "create a temporary file beside",
        "store a snapshot in",
        "read the snapshot",
        "read the history journal",
        "append to the history journal",
        "rewrite the history journal",
        "lock the history journal",
        "open the history lock",
        "create the history directory",
        "clean the snapshots in",
        "write the run files in",
    ];
    OPS.iter().find(|o| **o == op).copied().unwrap_or("access")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_codes_are_unique() {
        for (i, a) in ERROR_KINDS.iter().enumerate() {
            for b in &ERROR_KINDS[i + 1..] {
                assert_ne!(a.kind, b.kind);
                assert_ne!(a.code, b.code, "{} and {}", a.kind, b.kind);
            }
        }
    }

    #[test]
    fn every_kind_has_a_code_in_the_table() {
        let samples = [
            Error::Busy(Busy {
                path: "/w/a".into(),
                holder: "h".into(),
                kind: HoldKind::Fence,
                mode: Mode::Shared,
                label: Some("l".into()),
                age: Duration::from_millis(1500),
                queued: true,
                relative: "a".into(),
            }),
            Error::Timeout {
                paths: vec!["/w/a".into()],
                waited: Duration::from_secs(2),
            },
            Error::Deadlock {
                cycle: vec!["a".into(), "b".into()],
            },
            Error::Stale {
                path: "/w/a".into(),
                writer: Some("w".into()),
                ago: Some(Duration::from_secs(1)),
            },
            Error::NoSlot {
                limit: SlotLimit::MaxWriters,
                max: 3,
            },
            Error::Protocol {
                kind: ProtocolError::BodyTooLarge,
                detail: "too big".into(),
            },
            Error::UnknownLease {
                lease: "l-1".into(),
            },
            Error::Unsupported {
                what: "fence.extend".into(),
            },
        ];
        for e in samples {
            assert!(
                ERROR_KINDS.iter().any(|k| k.kind == e.kind()),
                "{}",
                e.kind()
            );
            let back = Error::from_wire(&e.to_string(), &e.data());
            assert_eq!(back.kind(), e.kind());
            assert_eq!(back.to_string(), e.to_string(), "{}", e.kind());
        }
    }
}
