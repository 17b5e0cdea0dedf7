//! `files.read`, `files.write`, `files.append`, `files.replace`,
//! `files.delete` and `files.rename` (SPEC §6–§7): the crate's file
//! pipeline, run for an actor of the table.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::request::{FileOp, FileRequest, RunParams};
use super::{App, InProcess};
use crate::server::auth::Caller;
use crate::{Actor, Files, ReadMark, Receipt, Reservation, Result, Target, wire};

/// The file methods of a table.
pub(super) trait FileOps {
    async fn file(&self, app: &Arc<App>, caller: &Caller, request: FileRequest) -> Result<Value>;

    /// `files.run` (SPEC §17): a shell command as a transaction.
    async fn run_command(&self, app: &Arc<App>, caller: &Caller, p: RunParams) -> Result<Value>;
}

/// The command `files.run` asked for.
fn command_of(p: &RunParams) -> Result<crate::run::Command> {
    let mut cmd = match (&p.command, &p.argv) {
        (Some(line), None) => crate::run::Command::shell(line.clone()),
        (None, Some(argv)) if !argv.is_empty() => crate::run::Command::new(argv.clone()),
        _ => {
            return Err(crate::Error::invalid(
                "",
                "files.run takes exactly one of `command` (a shell line) or `argv` (not empty)",
            ));
        }
    };
    if let Some(cwd) = &p.cwd {
        cmd = cmd.cwd(cwd);
    }
    let secs = |s: f64| Duration::try_from_secs_f64(s).ok();
    if let Some(t) = p.timeout_s.and_then(secs) {
        cmd = cmd.timeout(t);
    }
    if let Some(k) = p.keep_s.and_then(secs) {
        cmd = cmd.keep(k);
    }
    Ok(cmd)
}

/// The named agent `files.run` runs as, when it names one instead of an
/// actor.
fn named_agent(p: &RunParams) -> Result<Option<&str>> {
    match (p.actor.is_empty(), p.agent.as_deref()) {
        (false, None) => Ok(None),
        (true, Some(name)) if !name.is_empty() => Ok(Some(name)),
        _ => Err(crate::Error::invalid(
            "",
            "files.run takes exactly one of `actor` (an actor's handle) or `agent` (a named agent)",
        )),
    }
}

/// What a file op answered.
pub(super) enum Done {
    Read(Vec<u8>, ReadMark),
    Changed(Receipt),
}

impl Done {
    pub(super) fn to_wire(&self) -> Value {
        match self {
            Done::Read(bytes, mark) => {
                json!({"content": wire::content_to_wire(bytes), "mark": mark})
            }
            Done::Changed(receipt) => json!(receipt),
        }
    }
}

/// Runs `op` with an actor's file tools.
pub(super) fn run(files: Files<'_>, op: FileOp) -> Result<Done> {
    match op {
        FileOp::Read {
            path,
            lines,
            tail_only,
        } => match lines {
            None if tail_only => files.read_for_append(&path),
            None => files.read(&path),
            Some((start, None)) => files.read_range(&path, start..),
            Some((start, Some(end))) => files.read_range(&path, start..end),
        }
        .map(|(bytes, mark)| Done::Read(bytes, mark)),
        FileOp::Write {
            path,
            content,
            append: true,
        } => files.append(&path, content).map(Done::Changed),
        FileOp::Write { path, content, .. } => files.write(&path, content).map(Done::Changed),
        FileOp::Replace { path, old, new } => files.replace(&path, &old, &new).map(Done::Changed),
        FileOp::Delete { path } => files.delete(&path).map(Done::Changed),
        FileOp::Rename { from, to } => files.rename(&from, &to).map(Done::Changed),
    }
}

/// An actor's file tools, inside `call` when the op waited for one;
/// claiming a file a write is refused `Stale` on when the caller asked for
/// the current content with the refusal (`current`: an agent's surface,
/// SPEC §6).
fn within<'a>(actor: &'a Actor, call: Option<&'a mut Reservation>, current: bool) -> Files<'a> {
    let files = match call {
        Some(call) => actor.files().within(call),
        None => actor.files(),
    };
    if current { files.claiming() } else { files }
}

impl FileOps for InProcess {
    async fn file(&self, app: &Arc<App>, caller: &Caller, request: FileRequest) -> Result<Value> {
        let (actor, lease, _) = app.actor_for(caller, &request.actor)?;
        let call = match request.timeout_ms {
            // A call reservation on the op's paths, waited for that long
            // (shared for a read), as MCP's tools wait (`Actor::wait_call`);
            // the lease cannot lapse meanwhile. `None` when the paths came
            // free as the wait ended.
            Some(ms) => {
                let shared = matches!(request.op, FileOp::Read { .. });
                let paths = request.op.paths();
                let targets = paths
                    .iter()
                    .map(|p| {
                        let target = Target::file(*p);
                        if shared { target.shared() } else { target }
                    })
                    .collect();
                let label = format!("{} {}", request.op.verb(), paths.join(", "));
                let wait = actor.wait_call(targets, label, Duration::from_millis(ms));
                app.long_poll(lease, wait).await?
            }
            // Try-only.
            None => None,
        };
        let current = request.current;
        let done = App::blocking(move || {
            let mut call = call;
            run(within(&actor, call.as_mut(), current), request.op)
        })
        .await?;
        Ok(done.to_wire())
    }

    async fn run_command(&self, app: &Arc<App>, caller: &Caller, p: RunParams) -> Result<Value> {
        let cmd = command_of(&p)?;
        if let Some(name) = named_agent(&p)? {
            let agents = app
                .named_agents
                .get()
                .and_then(std::sync::Weak::upgrade)
                .ok_or_else(|| {
                    crate::Error::invalid(
                        name,
                        "named agents are `/mcp`'s, and this server has none",
                    )
                })?;
            // Seated for the whole run: the agent cannot go idle meanwhile.
            let (actor, seat) = agents
                .seat(caller.clone(), name.to_string())
                .await
                .map_err(|why| crate::Error::invalid(name, why))?;
            let report = actor.run(cmd).await?;
            drop(seat);
            return Ok(json!(report));
        }
        let (actor, lease, _) = app.actor_for(caller, &p.actor)?;
        // The lease cannot lapse while the command runs.
        let report = app.long_poll(lease, actor.run(cmd)).await?;
        Ok(json!(report))
    }
}

#[cfg(feature = "etcd")]
impl FileOps for super::EtcdBackend {
    async fn file(&self, app: &Arc<App>, caller: &Caller, request: FileRequest) -> Result<Value> {
        let actor = self.actor(app, caller, &request.actor).await?;
        let wait = request.timeout_ms.map(Duration::from_millis);
        let current = request.current;
        Ok(self
            .file_op(app, actor, request.op, wait, current)
            .await?
            .to_wire())
    }

    async fn run_command(&self, app: &Arc<App>, caller: &Caller, p: RunParams) -> Result<Value> {
        let cmd = command_of(&p)?;
        if let Some(name) = named_agent(&p)? {
            return Err(crate::Error::invalid(
                name,
                "files.run {agent} is not served on a session whose table is in etcd yet; pass `actor`",
            ));
        }
        let actor = self.actor(app, caller, &p.actor).await?;
        let lease = actor.lease();
        let runner = self.file_runner();
        let running = runner.run_command(actor, cmd);
        let report = self.long_poll(app, lease, running).await?;
        Ok(json!(report))
    }
}
