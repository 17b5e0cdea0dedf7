//! `writ history`: list, show, rewind, redo and prune the turns recorded in
//! a history directory.
//!
//! Rewind and redo build a scheduler with the directory and the turn's
//! session (read from the journal), so the same engine runs as in a live
//! session: the same conflict checks, the same all-or-nothing reservation.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;
use writ::history::{Call, FileState, History, Prune, RewindMode, TurnSummary};
use writ::{Config, Error, Scheduler};

/// Exit code of a rewind or redo refused because of conflicts.
const CONFLICT: u8 = 3;

/// `writ history …`
#[derive(Debug, Args)]
pub struct HistoryCmd {
    #[command(subcommand)]
    pub action: Action,
}

/// Options every history command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The history directory (what `Config::history_dir` was set to).
    #[arg(long)]
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A workspace a rewind or redo may write in (repeat for several;
    /// default: the current folder). Journal records that point anywhere
    /// else are reported as conflicts and never written.
    #[arg(long)]
    pub workspace: Vec<PathBuf>,
}

/// What to do with the history.
#[derive(Debug, Subcommand)]
pub enum Action {
    /// List the recorded turns.
    List {
        #[command(flatten)]
        common: Common,
    },
    /// Show every call of one turn, with each file's state before and after.
    Show {
        /// The turn.
        turn: String,
        /// The session, when several recorded this turn name.
        #[arg(long)]
        session: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Rewind a turn: refused, touching nothing, if any file it wrote
    /// changed since (exit code 3).
    Rewind {
        /// The turn.
        turn: String,
        /// The session, when several recorded this turn name.
        #[arg(long)]
        session: Option<String>,
        /// Also rewind files edited since, when the agent's change reverses
        /// cleanly out of them.
        #[arg(long)]
        merge: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Undo the last rewind of a turn, under the same rules.
    Redo {
        /// The turn.
        turn: String,
        /// The session, when several recorded this turn name.
        #[arg(long)]
        session: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Remove old turns from the journal, and the snapshots only they used.
    Prune {
        /// Keep this many most recently active turns.
        #[arg(long)]
        keep: Option<usize>,
        /// Remove turns inactive for more than this many days.
        #[arg(long)]
        older_than_days: Option<u64>,
        #[command(flatten)]
        common: Common,
    },
}

/// Runs a history command; prints its result and returns the exit code.
pub fn run(cmd: HistoryCmd) -> ExitCode {
    let json = match &cmd.action {
        Action::List { common }
        | Action::Show { common, .. }
        | Action::Rewind { common, .. }
        | Action::Redo { common, .. }
        | Action::Prune { common, .. } => common.json,
    };
    match execute(cmd.action) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e, json),
    }
}

fn fail(e: &Error, json: bool) -> ExitCode {
    let code = match e {
        Error::RewindConflict { .. } => ExitCode::from(CONFLICT),
        _ => ExitCode::FAILURE,
    };
    if json {
        #[derive(Serialize)]
        struct Failure<'a> {
            error: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            conflicts: Option<&'a [writ::history::Conflict]>,
        }
        let conflicts = match e {
            Error::RewindConflict { conflicts } => Some(conflicts.as_slice()),
            _ => None,
        };
        println!(
            "{}",
            to_json(&Failure {
                error: e.to_string(),
                conflicts,
            })
        );
    } else {
        eprintln!("writ history: {e}");
        if let Error::RewindConflict { conflicts } = e {
            for c in conflicts {
                eprintln!("  {c}");
            }
        }
    }
    code
}

fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot encode the result: {e}\"}}"))
}

fn execute(action: Action) -> Result<String, Error> {
    match action {
        Action::List { common } => {
            let turns = History::open(&common.dir)?.turns()?;
            Ok(if common.json {
                to_json(&turns) + "\n"
            } else {
                list_table(&turns)
            })
        }
        Action::Show {
            turn,
            session,
            common,
        } => {
            let history = History::open(&common.dir)?;
            let session = session_of(&history, &turn, session)?;
            let calls = history.calls(&session, Some(&turn))?;
            Ok(if common.json {
                to_json(&calls) + "\n"
            } else {
                show_table(&session, &turn, &calls)
            })
        }
        Action::Rewind {
            turn,
            session,
            merge,
            common,
        } => {
            let sched = scheduler(&common, &turn, session)?;
            let mode = if merge {
                RewindMode::Merge
            } else {
                RewindMode::Strict
            };
            let report = sched.rewind_turn_with(&turn, mode)?;
            Ok(if common.json {
                to_json(&report) + "\n"
            } else {
                report.to_string()
            })
        }
        Action::Redo {
            turn,
            session,
            common,
        } => {
            let report = scheduler(&common, &turn, session)?.redo_turn(&turn)?;
            Ok(if common.json {
                to_json(&report) + "\n"
            } else {
                report.to_string()
            })
        }
        Action::Prune {
            keep,
            older_than_days,
            common,
        } => {
            if keep.is_none() && older_than_days.is_none() {
                return Err(Error::History {
                    reason: "say what to prune: --keep N and/or --older-than-days D".into(),
                });
            }
            let mut rule = Prune::default();
            rule.keep_turns = keep;
            rule.older_than = older_than_days.map(|d| Duration::from_secs(d * 86_400));
            let report = History::open(&common.dir)?.prune(&rule)?;
            Ok(if common.json {
                to_json(&report) + "\n"
            } else {
                format!(
                    "pruned {} turn(s); {} journal record(s) kept; {} snapshot(s) removed ({} bytes)\n",
                    report.turns_removed,
                    report.records_kept,
                    report.blobs_removed,
                    report.bytes_freed
                )
            })
        }
    }
}

/// The session that recorded `turn`: the one given, or the only one.
fn session_of(history: &History, turn: &str, given: Option<String>) -> Result<String, Error> {
    if let Some(session) = given {
        return Ok(session);
    }
    let sessions = history.sessions_of(turn)?;
    match sessions.as_slice() {
        [] => Err(Error::UnknownTurn {
            turn: turn.to_string(),
        }),
        [one] => Ok(one.clone()),
        many => Err(Error::History {
            reason: format!(
                "turn '{turn}' was recorded by {} sessions ({}); choose one with --session",
                many.len(),
                many.join(", ")
            ),
        }),
    }
}

/// A scheduler of the turn's session over the history directory.
fn scheduler(common: &Common, turn: &str, session: Option<String>) -> Result<Scheduler, Error> {
    let history = History::open(&common.dir)?;
    let session = session_of(&history, turn, session)?;
    let sched = Scheduler::new(Config::default().history_dir(&common.dir).session(session));
    let here = [PathBuf::from(".")];
    let workspaces = if common.workspace.is_empty() {
        &here[..]
    } else {
        &common.workspace[..]
    };
    for ws in workspaces {
        // Creating an actor makes its root a grant root of this session:
        // the only places the rewind may write.
        drop(sched.actor("writ-history", writ::Grant::workspace(ws))?);
    }
    Ok(sched)
}

/// Milliseconds since the epoch as `YYYY-MM-DD hh:mm:ss` UTC.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn list_table(turns: &[TurnSummary]) -> String {
    if turns.is_empty() {
        return "no turns recorded\n".to_string();
    }
    let rows: Vec<Vec<String>> = turns
        .iter()
        .map(|t| {
            vec![
                t.session.clone(),
                t.turn.clone().unwrap_or_else(|| "(no turn)".into()),
                t.status.to_string(),
                t.calls.to_string(),
                t.files.to_string(),
                t.actors.join(","),
                utc(t.last_ms),
            ]
        })
        .collect();
    writ::text::table(
        &[
            "SESSION",
            "TURN",
            "STATUS",
            "CALLS",
            "FILES",
            "ACTORS",
            "LAST (UTC)",
        ],
        &rows,
    )
}

fn state(s: &FileState) -> String {
    s.to_string()
}

fn show_table(session: &str, turn: &str, calls: &[Call]) -> String {
    let mut rows = Vec::new();
    for call in calls {
        for file in &call.files {
            rows.push(vec![
                utc(call.time_ms),
                call.actor.clone(),
                call.op.to_string(),
                file.path.display().to_string(),
                state(&file.before),
                state(&file.after),
                if file.protected { "" } else { "unprotected" }.to_string(),
            ]);
        }
    }
    let mut out = format!(
        "turn '{turn}' of session {session}: {} call(s)\n",
        calls.len()
    );
    out.push_str(&writ::text::table(
        &["TIME (UTC)", "ACTOR", "OP", "PATH", "BEFORE", "AFTER", ""],
        &rows,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14 22:13:20");
    }
}
