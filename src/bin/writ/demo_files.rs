//! The file-tools scenario of `writ demo`: agents edit shared files through
//! `Files` with read-modify-write, and none of their updates is lost.
//!
//! Each agent, on its own thread, repeatedly either increments a shared
//! counter (`counter.txt`: read, parse, write the next value) or appends a
//! unique record to a shared log (`log.md`: read the tail, append). Between
//! its read and its write other agents write too, so the version gate
//! refuses stale writes (`Stale`, `NotRead`) and the agent re-reads and
//! redoes its edit; a path another agent is writing is waited for, up to a
//! bound (`Config::file_op_wait`), never spun on. At the
//! end the files themselves are checked: the counter equals the number of
//! increments that were acknowledged, and every acknowledged record is in the
//! log exactly once.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::time::Instant;

use serde::Serialize;
use writ::{Actor, Config, Durability, Error, Files, Grant, Scheduler};

use crate::rng::Rng;

const COUNTER: &str = "counter.txt";
const LOG: &str = "log.md";
/// A guard against a livelock bug turning into a hang.
const MAX_ATTEMPTS: u64 = 1_000_000;

/// What the scenario did and what the files say afterwards.
#[derive(Debug, Clone, Serialize)]
pub struct FilesOutcome {
    /// Agents (threads) that ran.
    pub agents: usize,
    /// Calls each agent made.
    pub calls: usize,
    /// Writes that landed (increments + appends).
    pub writes: u64,
    /// Counter increments that landed.
    pub increments: u64,
    /// Log appends that landed.
    pub appends: u64,
    /// Writes refused as `Stale` and redone after a re-read.
    pub stale_refusals: u64,
    /// Writes refused as `NotRead` and redone after a read.
    pub not_read_refusals: u64,
    /// File operations that waited for another agent's write (the table's count).
    pub waited: u64,
    /// Edits given up after waiting past the bound (none land; none is lost).
    pub gave_up: u64,
    /// The counter's final value, read from the file.
    pub counter_final: u64,
    /// Acknowledged records found exactly once in the log file.
    pub records_found: u64,
    /// Acknowledged updates missing from (or duplicated in) the final files.
    pub lost_updates: u64,
    /// Wall-clock time of the scenario.
    pub elapsed_ms: u128,
}

impl fmt::Display for FilesOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "files demo: {} agents x {} calls in {} ms",
            self.agents, self.calls, self.elapsed_ms
        )?;
        writeln!(
            f,
            "  writes landed      {} ({} increments, {} appends)",
            self.writes, self.increments, self.appends
        )?;
        writeln!(
            f,
            "  stale refusals     {} (re-read and redone)",
            self.stale_refusals
        )?;
        writeln!(
            f,
            "  not-read refusals  {} (read and redone)",
            self.not_read_refusals
        )?;
        writeln!(
            f,
            "  waited             {} (for another agent's write; {} gave up after {}s)",
            self.waited,
            self.gave_up,
            WAIT_BOUND.as_secs()
        )?;
        writeln!(
            f,
            "  counter in file    {} (expected {})",
            self.counter_final, self.increments
        )?;
        writeln!(
            f,
            "  records in log     {} of {}",
            self.records_found, self.appends
        )?;
        write!(f, "  lost updates       {}", self.lost_updates)
    }
}

#[derive(Default)]
struct Tally {
    increments: u64,
    appends: Vec<String>,
    stale: u64,
    not_read: u64,
    gave_up: u64,
}

/// How long a file operation waits for another agent's write before the
/// agent gives the edit up.
const WAIT_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

fn other(e: impl fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn parse_counter(bytes: &[u8]) -> io::Result<u64> {
    let text = std::str::from_utf8(bytes).map_err(other)?;
    text.trim()
        .strip_prefix("count: ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| other(format!("the counter file is malformed: {text:?}")))
}

/// Runs one read-modify-write until it lands (`true`): `Stale`/`NotRead`
/// re-read and redo the edit. Each file operation waits for another
/// agent's write up to [`WAIT_BOUND`]; past it the edit is given up
/// (`false`). `edit` gets the bytes read.
fn read_modify_write(
    files: &Files<'_>,
    tally: &mut Tally,
    read: impl Fn(&Files<'_>) -> writ::Result<Vec<u8>>,
    write: impl Fn(&Files<'_>, &[u8]) -> writ::Result<writ::Receipt>,
) -> io::Result<bool> {
    let gave_up = |tally: &mut Tally| {
        tally.gave_up += 1;
        Ok(false)
    };
    for _ in 0..MAX_ATTEMPTS {
        let bytes = match read(files) {
            Ok(bytes) => bytes,
            Err(Error::Timeout { .. } | Error::Busy(_)) => return gave_up(tally),
            Err(e) => return Err(other(e)),
        };
        // Give the others a chance to get in between the read and the write,
        // as a model's think time would.
        std::thread::yield_now();
        match write(files, &bytes) {
            Ok(_) => return Ok(true),
            Err(Error::Stale { .. }) => tally.stale += 1,
            Err(Error::NotRead { .. }) => tally.not_read += 1,
            Err(Error::Timeout { .. } | Error::Busy(_)) => return gave_up(tally),
            Err(e) => return Err(other(e)),
        }
    }
    Err(other("an edit did not land after a million attempts"))
}

fn agent(actor: &Actor, index: usize, calls: usize, seed: u64) -> io::Result<Tally> {
    let files = actor.files();
    let mut rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut tally = Tally::default();
    for call in 0..calls {
        if rng.below(2) == 0 {
            let landed = read_modify_write(
                &files,
                &mut tally,
                |f| f.read(COUNTER).map(|(bytes, _)| bytes),
                |f, bytes| {
                    let n = parse_counter(bytes).map_err(|e| Error::Io {
                        op: "parse",
                        path: COUNTER.into(),
                        source: e,
                    })?;
                    f.write(COUNTER, format!("count: {}\n", n + 1))
                },
            )?;
            tally.increments += u64::from(landed);
        } else {
            let record = format!("agent-{index} call-{call}\n");
            let landed = read_modify_write(
                &files,
                &mut tally,
                // Any part is enough before an append: the mark covers the whole file.
                |f| f.read_range(LOG, 0..1).map(|(bytes, _)| bytes),
                |f, _| f.append(LOG, &record),
            )?;
            if landed {
                tally.appends.push(record);
            }
        }
    }
    Ok(tally)
}

/// Runs the scenario: `agents` threads, `calls` edits each, choices drawn
/// from `seed`. Fails only on an unexpected error.
pub fn run(agents: usize, calls: usize, seed: u64) -> io::Result<FilesOutcome> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join(COUNTER), "count: 0\n")?;
    std::fs::write(dir.path().join(LOG), "# log\n")?;
    // Process durability: the scenario is about lost updates, not power cuts.
    let sched = Scheduler::new(
        Config::default()
            .durability(Durability::Process)
            .file_op_wait(WAIT_BOUND),
    );
    let lead = sched
        .actor("lead", Grant::workspace(dir.path()))
        .map_err(other)?;
    let actors = (0..agents)
        .map(|i| lead.child(format!("agent-{i}"), Grant::workspace(dir.path())))
        .collect::<writ::Result<Vec<_>>>()
        .map_err(other)?;
    let tallies = std::thread::scope(|s| {
        let handles: Vec<_> = actors
            .iter()
            .enumerate()
            .map(|(i, actor)| s.spawn(move || agent(actor, i, calls, seed)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(other("an agent panicked"))))
            .collect::<io::Result<Vec<Tally>>>()
    })?;

    // Verify from the files, not from the tallies.
    let counter_final = parse_counter(&std::fs::read(dir.path().join(COUNTER))?)?;
    let log = std::fs::read_to_string(dir.path().join(LOG))?;
    let mut in_log: HashMap<&str, u64> = HashMap::new();
    for line in log.lines().skip(1) {
        *in_log.entry(line).or_insert(0) += 1;
    }
    let increments: u64 = tallies.iter().map(|t| t.increments).sum();
    let acknowledged: Vec<&String> = tallies.iter().flat_map(|t| &t.appends).collect();
    let records_found = acknowledged
        .iter()
        .filter(|r| in_log.get(r.trim_end()) == Some(&1))
        .count() as u64;
    let appends = acknowledged.len() as u64;
    let extra_lines = (log.lines().count() as u64 - 1).saturating_sub(appends);
    let lost_updates = increments.abs_diff(counter_final) + (appends - records_found) + extra_lines;
    Ok(FilesOutcome {
        agents,
        calls,
        writes: increments + appends,
        increments,
        appends,
        stale_refusals: tallies.iter().map(|t| t.stale).sum(),
        not_read_refusals: tallies.iter().map(|t| t.not_read).sum(),
        waited: sched.dump().counters.waited,
        gave_up: tallies.iter().map(|t| t.gave_up).sum(),
        counter_final,
        records_found,
        lost_updates,
        elapsed_ms: started.elapsed().as_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_update_is_lost_with_the_default_size() {
        let outcome = run(8, 200, 7).unwrap();
        eprintln!("{outcome}");
        assert_eq!(outcome.lost_updates, 0, "{outcome}");
        assert_eq!(outcome.writes, 1600);
        assert!(
            outcome.stale_refusals + outcome.waited > 0,
            "no contention: {outcome}"
        );
        assert_eq!(outcome.counter_final, outcome.increments);
        assert_eq!(outcome.records_found, outcome.appends);
        let json = serde_json::to_value(&outcome).unwrap();
        assert_eq!(json["lost_updates"], 0);
    }
}
