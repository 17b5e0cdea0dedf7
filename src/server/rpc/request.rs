//! A JSON-RPC call, read once: the method name and its parameters become one
//! [`Request`], and nothing after this file looks at a method string again.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::invalid;
use crate::{Error, HoldKind, ProtocolError, Result};

fn params<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| invalid(format!("invalid params: {e}")))
}

/// An actor's name, as every name an agent chooses: refused when it holds
/// a control character or a bidirectional override (SPEC §13).
fn named(p: CreateParams) -> Result<CreateParams> {
    crate::text::check_name("an actor name", &p.name).map_err(invalid)?;
    Ok(p)
}

/// A request's label, as [`named`].
fn labelled(p: AdmitParams) -> Result<AdmitParams> {
    if let Some(label) = &p.label {
        crate::text::check_name("a label", label).map_err(invalid)?;
    }
    Ok(p)
}

/// `actor.create` and `actor.child_wait`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateParams {
    pub(super) name: String,
    pub(super) parent: Option<String>,
    pub(super) grant: Value,
    pub(super) lease: Option<String>,
    pub(super) timeout_ms: Option<u64>,
}

/// How a child comes to be: at once, or after waiting for its grant fence's
/// paths and a slot (`actor.child_wait`, SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Creation {
    Now,
    Wait,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActorParams {
    pub(super) actor: String,
}

/// `admit` and `fence`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdmitParams {
    pub(super) actor: String,
    pub(super) targets: Value,
    pub(super) wait: Option<bool>,
    pub(super) timeout_ms: Option<u64>,
    #[serde(default)]
    pub(super) priority: i32,
    pub(super) label: Option<String>,
    pub(super) ticket: Option<String>,
    /// Ask again for the request `ticket` named (see PROTOCOL.md, Tickets).
    #[serde(default)]
    pub(super) resume: bool,
}

impl AdmitParams {
    /// Whether the request waits: a call reservation does unless told not
    /// to, a fence does only when told to.
    pub(super) fn waits(&self, kind: HoldKind) -> bool {
        self.wait.unwrap_or(kind == HoldKind::Call)
    }
}

/// `release`: a hold, or a ticket's request given up.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseParams {
    hold: Option<String>,
    actor: Option<String>,
    ticket: Option<String>,
    /// With `hold`: the caller refused the write it reserved for `Stale`
    /// (a hook judging in its own process), so the reservation leaves its
    /// actor a claim on each file it held (SPEC §6).
    #[serde(default)]
    claim: bool,
}

/// What a `release` names.
pub(super) enum Release {
    /// A hold, and whether it leaves its actor a claim.
    Hold(String, bool),
    /// The request `ticket` of `actor`, granted or not.
    Ticket { actor: String, ticket: String },
}

impl ReleaseParams {
    fn read(self) -> Result<Release> {
        match (self.hold, self.actor, self.ticket, self.claim) {
            (Some(hold), None, None, claim) => Ok(Release::Hold(hold, claim)),
            (None, Some(actor), Some(ticket), false) => Ok(Release::Ticket { actor, ticket }),
            _ => Err(invalid("release takes {hold, claim?} or {actor, ticket}")),
        }
    }
}

/// `fence.extend` and `fence.narrow`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HoldTargetsParams {
    pub(super) hold: String,
    pub(super) targets: Value,
}

/// Which way a hold's paths change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Extend,
    Narrow,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaseParams {
    pub(super) lease: String,
}

/// The dump's two spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DumpFormat {
    Json,
    Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DumpParams {
    format: Option<String>,
}

impl DumpParams {
    fn read(self) -> Result<DumpFormat> {
        match self.format.as_deref() {
            None | Some("json") => Ok(DumpFormat::Json),
            Some("table") => Ok(DumpFormat::Table),
            Some(other) => Err(invalid(format!(
                "unknown dump format '{other}' (json or table)"
            ))),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadParams {
    actor: String,
    path: String,
    lines: Option<(usize, Option<usize>)>,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteParams {
    actor: String,
    path: String,
    content: Value,
    timeout_ms: Option<u64>,
    #[serde(default)]
    current: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceParams {
    actor: String,
    path: String,
    old: String,
    new: String,
    timeout_ms: Option<u64>,
    #[serde(default)]
    current: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteParams {
    actor: String,
    path: String,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameParams {
    actor: String,
    from: String,
    to: String,
    timeout_ms: Option<u64>,
}

/// One file operation (`files.*`, SPEC §6–§7).
pub(super) enum FileOp {
    Read {
        path: String,
        lines: Option<(usize, Option<usize>)>,
        /// Read for a refused append that carries only the tail: the mark
        /// is good for an append only (SPEC §6).
        tail_only: bool,
    },
    Write {
        path: String,
        content: Vec<u8>,
        append: bool,
    },
    Replace {
        path: String,
        old: String,
        new: String,
    },
    Delete {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
}

impl FileOp {
    /// The paths it touches, in the pipeline's order.
    pub(super) fn paths(&self) -> Vec<&str> {
        match self {
            FileOp::Read { path, .. }
            | FileOp::Write { path, .. }
            | FileOp::Replace { path, .. }
            | FileOp::Delete { path } => vec![path],
            FileOp::Rename { from, to } => vec![from, to],
        }
    }

    /// What the op does, for the label of the reservation it waits for.
    pub(super) fn verb(&self) -> &'static str {
        match self {
            FileOp::Read { .. } => "read",
            FileOp::Write { append: true, .. } => "append",
            FileOp::Write { .. } => "write",
            FileOp::Replace { .. } => "replace",
            FileOp::Delete { .. } => "delete",
            FileOp::Rename { .. } => "rename",
        }
    }
}

/// A file method: which actor, how long it may wait for its paths
/// (try-only without), and the op.
pub(super) struct FileRequest {
    pub(super) actor: String,
    pub(super) timeout_ms: Option<u64>,
    pub(super) op: FileOp,
    /// `current: true`: a `stale` or `not_read` refusal also carries what
    /// the file holds now.
    pub(super) current: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TurnParams {
    pub(super) actor: String,
    pub(super) turn: String,
}

/// `history.snapshot` and `history.record`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PathParams {
    pub(super) actor: String,
    pub(super) path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RewindParams {
    pub(super) turn: String,
    #[serde(default)]
    pub(super) merge: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanTask {
    pub(super) name: String,
    pub(super) writes: Value,
    #[serde(default)]
    pub(super) depends_on: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanParams {
    pub(super) tasks: Vec<PlanTask>,
}

/// `files.run` (SPEC §17): a shell line (`command`, run with `sh -c`) or
/// an argument vector (`argv`), exactly one of them; run as an actor
/// (`actor`, its handle) or as the token's named agent (`agent`, the one
/// `/mcp` sessions naming it act as), exactly one of them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunParams {
    #[serde(default)]
    pub(super) actor: String,
    pub(super) agent: Option<String>,
    pub(super) command: Option<String>,
    pub(super) argv: Option<Vec<String>>,
    pub(super) cwd: Option<String>,
    pub(super) timeout_s: Option<f64>,
    pub(super) keep_s: Option<f64>,
}

/// `agent.release`: a named MCP agent, by its name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentParams {
    pub(super) name: String,
}

/// One method of SPEC §13 with its parameters read.
pub(super) enum Request {
    Info,
    Stop,
    ReleaseAgent(AgentParams),
    Create(CreateParams, Creation),
    DropActor(ActorParams),
    Admit(AdmitParams, HoldKind),
    Change(HoldTargetsParams, Change),
    Release(Release),
    Dump(DumpFormat),
    KeepAlive(LeaseParams),
    Revoke(LeaseParams),
    File(FileRequest),
    SetTurn(TurnParams),
    Snapshot(PathParams),
    Record(PathParams),
    Rewind(RewindParams),
    Redo(RewindParams),
    Plan(PlanParams),
    Run(RunParams),
}

impl Request {
    /// Reads `method` and its parameters; an unknown method or a malformed
    /// parameter is refused before anything runs.
    pub(super) fn parse(method: &str, p: Value) -> Result<Request> {
        Ok(match method {
            "session.info" => Request::Info,
            "session.stop" => Request::Stop,
            "agent.release" => Request::ReleaseAgent(params(p)?),
            "actor.create" => Request::Create(named(params(p)?)?, Creation::Now),
            "actor.child_wait" => Request::Create(named(params(p)?)?, Creation::Wait),
            "actor.drop" => Request::DropActor(params(p)?),
            "admit" => Request::Admit(labelled(params(p)?)?, HoldKind::Call),
            "fence" => Request::Admit(labelled(params(p)?)?, HoldKind::Fence),
            "fence.extend" => Request::Change(params(p)?, Change::Extend),
            "fence.narrow" => Request::Change(params(p)?, Change::Narrow),
            "release" => Request::Release(params::<ReleaseParams>(p)?.read()?),
            "dump" => Request::Dump(params::<DumpParams>(p)?.read()?),
            "lease.keepalive" => Request::KeepAlive(params(p)?),
            "lease.revoke" => Request::Revoke(params(p)?),
            "files.read" => {
                let p: ReadParams = params(p)?;
                Request::File(FileRequest {
                    actor: p.actor,
                    timeout_ms: p.timeout_ms,
                    op: FileOp::Read {
                        path: p.path,
                        lines: p.lines,
                        tail_only: false,
                    },
                    current: false,
                })
            }
            "files.write" | "files.append" => {
                let p: WriteParams = params(p)?;
                let content = crate::wire::content_from_wire(&p.content).map_err(invalid)?;
                Request::File(FileRequest {
                    actor: p.actor,
                    timeout_ms: p.timeout_ms,
                    op: FileOp::Write {
                        path: p.path,
                        content,
                        append: method == "files.append",
                    },
                    current: p.current,
                })
            }
            "files.replace" => {
                let p: ReplaceParams = params(p)?;
                Request::File(FileRequest {
                    actor: p.actor,
                    timeout_ms: p.timeout_ms,
                    op: FileOp::Replace {
                        path: p.path,
                        old: p.old,
                        new: p.new,
                    },
                    current: p.current,
                })
            }
            "files.delete" => {
                let p: DeleteParams = params(p)?;
                Request::File(FileRequest {
                    actor: p.actor,
                    timeout_ms: p.timeout_ms,
                    op: FileOp::Delete { path: p.path },
                    current: false,
                })
            }
            "files.rename" => {
                let p: RenameParams = params(p)?;
                Request::File(FileRequest {
                    actor: p.actor,
                    timeout_ms: p.timeout_ms,
                    op: FileOp::Rename {
                        from: p.from,
                        to: p.to,
                    },
                    current: false,
                })
            }
            "files.run" => Request::Run(params(p)?),
            "turn.set" => Request::SetTurn(params(p)?),
            "history.snapshot" => Request::Snapshot(params(p)?),
            "history.record" => Request::Record(params(p)?),
            "history.rewind" => Request::Rewind(params(p)?),
            "history.redo" => Request::Redo(params(p)?),
            "plan.validate" => Request::Plan(params(p)?),
            other => {
                return Err(Error::Protocol {
                    kind: ProtocolError::UnknownMethod,
                    detail: format!("unknown method '{other}'; see docs/PROTOCOL.md"),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Minimal parameters for each method PROTOCOL.md documents.
    fn minimal(method: &str) -> Value {
        let actor = "a-x-1";
        match method {
            "session.info" | "session.stop" | "dump" => json!({}),
            "agent.release" => json!({"name": "reviewer"}),
            "actor.create" | "actor.child_wait" => {
                json!({"name": "n", "parent": actor, "grant": {"workspace": true}})
            }
            "actor.drop" => json!({ "actor": actor }),
            "admit" | "fence" => json!({"actor": actor, "targets": ["a"]}),
            "fence.extend" | "fence.narrow" => json!({"hold": "h-x-1", "targets": ["a"]}),
            "release" => json!({"hold": "h-x-1"}),
            "lease.keepalive" | "lease.revoke" => json!({"lease": "l-x-1"}),
            "files.read" | "files.delete" | "history.snapshot" | "history.record" => {
                json!({"actor": actor, "path": "a"})
            }
            "files.write" | "files.append" => json!({"actor": actor, "path": "a", "content": ""}),
            "files.replace" => json!({"actor": actor, "path": "a", "old": "x", "new": "y"}),
            "files.rename" => json!({"actor": actor, "from": "a", "to": "b"}),
            "files.run" => json!({"actor": actor, "command": "true"}),
            "turn.set" => json!({"actor": actor, "turn": "t"}),
            "history.rewind" | "history.redo" => json!({"turn": "t"}),
            "plan.validate" => json!({"tasks": []}),
            other => panic!("PROTOCOL.md documents `{other}`: give it parameters here"),
        }
    }

    fn documented() -> Vec<String> {
        let protocol = include_str!("../../../docs/PROTOCOL.md");
        let methods = protocol
            .split_once("\n## Methods\n")
            .map_or("", |(_, rest)| rest);
        methods
            .lines()
            .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_documented_method_is_read_and_an_unknown_one_refused() {
        let methods = documented();
        assert_eq!(methods.len(), 27, "{methods:?}");
        for method in &methods {
            if let Err(e) = Request::parse(method, minimal(method)) {
                panic!("{method}: {e}");
            }
        }
        let unknown = Request::parse("files.chmod", json!({}));
        assert!(matches!(
            unknown,
            Err(Error::Protocol {
                kind: ProtocolError::UnknownMethod,
                ..
            })
        ));
    }

    #[test]
    fn malformed_parameters_are_refused_before_anything_runs() {
        let refused = |method: &str, p: Value| match Request::parse(method, p) {
            Err(Error::Protocol {
                kind: ProtocolError::InvalidParams,
                detail,
            }) => detail,
            Err(other) => panic!("{method}: {other}"),
            Ok(_) => panic!("{method}: read"),
        };
        // `current` belongs to the writes that can be refused as stale.
        refused(
            "files.delete",
            json!({"actor": "a-x-1", "path": "a", "current": true}),
        );
        refused(
            "files.write",
            json!({"actor": "a-x-1", "path": "a", "content": "", "current": 1}),
        );
        let detail = refused("release", json!({"hold": "h-x-1", "ticket": "t"}));
        assert!(
            detail.contains("{hold, claim?} or {actor, ticket}"),
            "{detail}"
        );
        // A claim is left by a hold its caller refused, never by a ticket.
        refused(
            "release",
            json!({"actor": "a-x-1", "ticket": "t", "claim": true}),
        );
        let detail = refused("dump", json!({"format": "xml"}));
        assert!(detail.contains("json or table"), "{detail}");
    }

    #[test]
    fn the_refused_write_reads_back_the_file_it_names() {
        let Ok(Request::File(request)) = Request::parse(
            "files.append",
            json!({"actor": "a-x-1", "path": "log.md", "content": "x", "current": true}),
        ) else {
            panic!("files.append was not read as a file request");
        };
        assert!(request.current);
        assert_eq!(request.op.paths(), ["log.md"]);
        assert_eq!(request.op.verb(), "append");
    }
}
