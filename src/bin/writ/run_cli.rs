//! `writ run [--agent NAME] -- CMD…`: a shell command as a transaction
//! (SPEC §17), through the running server for the folder when there is one
//! (`files.run`), else in this process; and `writ run --show RUN`.
//!
//! The command's output goes to standard output; the report (what was
//! applied, or why nothing was) to standard error. The exit status is the
//! command's own when its writes were committed, and 75 (`EX_TEMPFAIL`)
//! when the commit was refused: nothing was applied, look and redo.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

/// The exit status of a run whose commit was refused.
const REFUSED: u8 = 75;

#[derive(Debug, Args)]
pub struct RunCmd {
    /// Who the writes are made as (history, conflicts and other agents'
    /// refusals name it). Through a server, the named agent of that name —
    /// the actor `/mcp` sessions and calls naming it act as, made on first
    /// use — so its reads count for the command's writes; without it, a
    /// fresh actor named "shell".
    #[arg(long)]
    agent: Option<String>,
    /// The workspace (default: the nearest folder above the current one
    /// that a `writ serve` serves, else the current folder).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Seconds before the command's whole process tree is stopped.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Seconds a refused run's layer is kept for `--show`.
    #[arg(long, default_value_t = 600.0)]
    keep: f64,
    /// Show a kept run's layer (its id is in the report) instead of running.
    #[arg(long, value_name = "RUN", conflicts_with = "command")]
    show: Option<String>,
    /// Print the report as JSON (on standard output, instead of the output).
    #[arg(long)]
    json: bool,
    /// Run in this process even when a server serves the folder.
    #[arg(long)]
    in_process: bool,
    /// The command and its arguments.
    #[arg(last = true, required_unless_present = "show")]
    command: Vec<String>,
}

fn secs(s: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("--{what} must be a number of seconds"))
}

/// The nearest folder at or above `dir` a server serves.
fn served_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(".writ").join("serve.json")).is_ok())
        .map(Path::to_path_buf)
}

pub fn run(cmd: RunCmd) -> ExitCode {
    match go(cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("writ run: {e}");
            ExitCode::from(2)
        }
    }
}

fn go(cmd: RunCmd) -> Result<ExitCode, String> {
    if let Some(run) = &cmd.show {
        let shown = writ::run::show(run).map_err(|e| e.to_string())?;
        if cmd.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&shown).map_err(|e| e.to_string())?
            );
        } else {
            println!("run {} kept at {}", shown.run, shown.dir.display());
            for p in &shown.written {
                println!(
                    "wrote   {}  ({})",
                    p.display(),
                    shown.dir.join("upper").join(p).display()
                );
            }
            for p in &shown.removed {
                println!("removed {}", p.display());
            }
            if !shown.output.is_empty() {
                println!("--- output ---\n{}", shown.output.trim_end());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let timeout = secs(cmd.timeout, "timeout")?;
    let keep = secs(cmd.keep, "keep")?;
    let here = std::env::current_dir().map_err(|e| e.to_string())?;
    let served = served_root(&here);
    let root = cmd
        .root
        .clone()
        .or_else(|| served.clone())
        .unwrap_or_else(|| here.clone());
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let here = here.canonicalize().unwrap_or(here);
    let cwd = here.strip_prefix(&root).ok().map(Path::to_path_buf);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let through_server = !cmd.in_process && root.join(".writ").join("serve.json").exists();
    let report: serde_json::Value = runtime.block_on(async {
        if through_server {
            let session = writ::remote::Session::discover(&root)
                .await
                .map_err(|e| format!("the server for {} did not answer: {e}", root.display()))?;
            let mut params = serde_json::json!({
                "argv": cmd.command,
                "timeout_s": timeout.as_secs_f64(),
                "keep_s": keep.as_secs_f64(),
            });
            let actor = match &cmd.agent {
                Some(name) => {
                    params["agent"] = serde_json::Value::from(name.clone());
                    None
                }
                None => {
                    let actor = session
                        .actor("shell", writ::Grant::workspace(&root))
                        .await
                        .map_err(|e| e.to_string())?;
                    params["actor"] = serde_json::Value::from(actor.handle().to_string());
                    Some(actor)
                }
            };
            if let Some(cwd) = cwd.as_ref().filter(|c| !c.as_os_str().is_empty()) {
                params["cwd"] = serde_json::Value::from(cwd.to_string_lossy().into_owned());
            }
            let report = session
                .call("files.run", params)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(actor) = actor {
                let _ = actor.close().await;
            }
            let _ = session.close().await;
            Ok::<_, String>(report)
        } else {
            let state = writ::server::state_dir(&root).map_err(|e| e.to_string())?;
            let history = state.join("history");
            std::fs::create_dir_all(&history).map_err(|e| format!("{}: {e}", history.display()))?;
            let sched = writ::Scheduler::new(writ::Config::default().history_dir(history));
            let actor = sched
                .actor(
                    cmd.agent.clone().unwrap_or_else(|| "shell".into()),
                    writ::Grant::workspace(&root),
                )
                .map_err(|e| e.to_string())?;
            let mut command = writ::run::Command::new(cmd.command.clone())
                .timeout(timeout)
                .keep(keep);
            if let Some(cwd) = cwd.as_ref().filter(|c| !c.as_os_str().is_empty()) {
                command = command.cwd(cwd);
            }
            let report = actor.run(command).await.map_err(|e| e.to_string())?;
            serde_json::to_value(&report).map_err(|e| e.to_string())
        }
    })?;
    print_report(&report, cmd.json);
    let committed = report["committed"].as_bool().unwrap_or(false);
    if !committed {
        return Ok(ExitCode::from(REFUSED));
    }
    let code = report["exit_code"].as_i64().unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

fn print_report(report: &serde_json::Value, json: bool) {
    if json {
        println!("{report:#}");
        return;
    }
    if let Some(out) = report["output"].as_str() {
        print!("{out}");
    }
    let id = report["run"].as_str().unwrap_or("?");
    let mode = report["mode"].as_str().unwrap_or("?");
    if report["committed"].as_bool().unwrap_or(false) {
        for a in report["artifacts"].as_array().into_iter().flatten() {
            let change = match &a["change"] {
                serde_json::Value::String(s) => s.clone(),
                other => other
                    .as_object()
                    .and_then(|o| o.keys().next().cloned())
                    .unwrap_or_default(),
            };
            let merged = if a["merged"].as_bool().unwrap_or(false) {
                " (merged with changes made meanwhile)"
            } else {
                ""
            };
            eprintln!(
                "writ run {id} ({mode}): {change} {}{merged}",
                a["path"].as_str().unwrap_or("?")
            );
        }
    } else {
        eprintln!("writ run {id} ({mode}): refused, nothing was applied");
        for c in report["conflicts"].as_array().into_iter().flatten() {
            eprintln!(
                "  {}: {}",
                c["path"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("")
            );
            for key in ["run_diff", "live_diff"] {
                for line in c[key].as_str().unwrap_or("").lines() {
                    eprintln!("    {line}");
                }
            }
        }
        eprintln!("  look: writ run --show {id}");
    }
    for note in report["notes"].as_array().into_iter().flatten() {
        eprintln!("writ run: note: {}", note.as_str().unwrap_or(""));
    }
}
