//! `session.info`, `session.stop`, `agent.release` and `plan.validate`
//! (SPEC §12–§13): the session itself, not its table.

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::{AgentParams, PlanParams};
use super::{App, InProcess, targets};
use crate::server::auth::Caller;
use crate::wire::PROTOCOL_VERSION;
use crate::{Error, ProtocolError, Result};

/// What a table adds to `session.info`.
pub(super) trait Session {
    fn info(&self, app: &App, caller: &Caller) -> Value;
}

/// `session.info`'s fields that every table has.
fn common_info(app: &App, caller: &Caller) -> Value {
    json!({
        "protocol": PROTOCOL_VERSION,
        "version": env!("CARGO_PKG_VERSION"),
        "root": app.root,
        "instance": app.instance,
        "lease_ttl_ms": app.ttl.as_millis() as u64,
        "call_wait_ms": app.call_wait.as_millis() as u64,
        "max_body": app.max_body,
        "caller": match caller {
            Caller::Session => "session".to_string(),
            Caller::Actor(n) => app.handle('a', *n),
        },
    })
}

impl Session for InProcess {
    fn info(&self, app: &App, caller: &Caller) -> Value {
        let mut info = common_info(app, caller);
        info["session"] = json!(app.sched.config().session_id());
        info["history_dir"] = json!(app.history_dir);
        info
    }
}

#[cfg(feature = "etcd")]
impl Session for super::EtcdBackend {
    fn info(&self, app: &App, caller: &Caller) -> Value {
        let mut info = common_info(app, caller);
        info["session"] = json!(self.table.session());
        info["backend"] = json!("etcd");
        info["history_dir"] = json!(self.history_dir);
        info["unsupported"] = json!(super::history::NOT_ON_ETCD);
        info
    }
}

/// `session.stop` (the session token only): the server stops.
pub(super) fn stop(app: &App, caller: &Caller) -> Result<Value> {
    app.session_only(caller, "stopping the server")?;
    let _ = app.stop_tx.send(true);
    Ok(json!({"stopping": true}))
}

/// `agent.release {name}`: the session token frees a named agent's
/// reservations now (its client was killed, and `--mcp-idle` is long),
/// on this server. `{released}` counts the agents that went; none is
/// not an error (it went already).
pub(super) fn release_agent(app: &App, caller: &Caller, p: AgentParams) -> Result<Value> {
    app.session_only(caller, "releasing an agent")?;
    if p.name.is_empty() {
        return Err(Error::Protocol {
            kind: ProtocolError::InvalidParams,
            detail: "'name' names the agent to release".into(),
        });
    }
    let released = app
        .named_agents
        .get()
        .and_then(std::sync::Weak::upgrade)
        .map_or(0, |agents| agents.release(&p.name));
    if released > 0 {
        tracing::info!(agent = %crate::text::escape(&p.name), released, "agent released");
    }
    Ok(json!({ "released": released }))
}

/// `plan.validate`: a plan's tasks in waves, judged against the workspace
/// (no table involved).
pub(super) fn validate_plan(app: &Arc<App>, p: PlanParams) -> Result<Value> {
    let mut plan = crate::plan::Plan::new(&app.root).case(app.sched.case_mode(&app.root));
    for task in &p.tasks {
        plan = plan.task(
            task.name.clone(),
            targets(&task.writes, app.max_targets)?,
            task.depends_on.iter().map(String::as_str),
        );
    }
    let waves = plan.validate()?;
    Ok(json!({ "waves": waves }))
}
