//! `writ demo --serve`: the lost-update workload run by several OS
//! processes through one `writ serve`.
//!
//! This process starts the server; each agent is a `writ __demo-worker`
//! process that, per call, admits one shared file over the wire, reads it,
//! thinks, and writes it back with its record appended. An agent waits for
//! its file up to a bound ([`WAIT_BOUND`]) and gives that call up past it;
//! it never spins on `Busy`. The count of lost updates comes from the
//! files' contents.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use writ::server::{Options, Server};

use crate::rng::Rng;

const SHARED_FILES: usize = 4;

/// The longest an agent waits for its file before it gives the call up.
const WAIT_BOUND: Duration = Duration::from_secs(10);

/// What one agent process reports on stdout (one JSON line).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Report {
    /// Calls whose write landed.
    writes: u64,
    /// Calls given up after waiting [`WAIT_BOUND`] for their file.
    gave_up: Vec<usize>,
}

fn shared(root: &Path, i: usize) -> PathBuf {
    root.join("shared").join(format!("notes-{i}.txt"))
}

fn record(agent: usize, call: usize) -> String {
    format!("agent-{agent} call-{call}")
}

/// Runs the demo; `keep` leaves the server up afterwards (until Ctrl-C).
pub fn run(agents: usize, calls: usize, seed: u64, keep: bool) -> ExitCode {
    let result = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|dir| {
            let root = std::fs::canonicalize(dir.path()).map_err(|e| e.to_string())?;
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?
                .block_on(drive(&root, agents, calls, seed, keep))
        });
    match result {
        Ok((text, lost)) => {
            print!("{text}");
            if lost == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "writ demo --serve: updates were lost through the server — this is a bug"
                );
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("writ demo --serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn drive(
    root: &Path,
    agents: usize,
    calls: usize,
    seed: u64,
    keep: bool,
) -> Result<(String, u64), String> {
    std::fs::create_dir_all(root.join("shared")).map_err(|e| e.to_string())?;
    for i in 0..SHARED_FILES {
        std::fs::write(shared(root, i), "").map_err(|e| e.to_string())?;
    }
    let config = writ::Config::default().durability(writ::Durability::Process);
    let server = Server::start(Options::new(root).config(config))
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let children = spawn_workers(server.url(), server.token(), agents, calls, seed, 0)?;
    // The dump mid-run: the first one that shows a hold and a waiter.
    let mut mid_run = None;
    let waiting = async {
        let mut outputs = Vec::new();
        for child in children {
            outputs.push(child.wait_with_output().await);
        }
        outputs
    };
    tokio::pin!(waiting);
    let outputs = loop {
        tokio::select! {
            outputs = &mut waiting => break outputs,
            () = tokio::time::sleep(Duration::from_millis(3)), if mid_run.is_none() => {
                let dump = server.scheduler().dump();
                if !dump.holds.is_empty() && !dump.waiters.is_empty() {
                    mid_run = Some(dump.to_string());
                }
            }
        }
    };
    let elapsed = started.elapsed();
    let mut writes = 0u64;
    let mut failed = 0usize;
    let mut gave_up = std::collections::HashSet::new();
    for (agent, output) in outputs.into_iter().enumerate() {
        let report = output
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| serde_json::from_slice::<Report>(&out.stdout).ok());
        match report {
            Some(report) => {
                writes += report.writes;
                gave_up.extend(report.gave_up.into_iter().map(|call| record(agent, call)));
            }
            None => failed += 1,
        }
    }
    let mut content = String::new();
    for i in 0..SHARED_FILES {
        content.push_str(&std::fs::read_to_string(shared(root, i)).map_err(|e| e.to_string())?);
    }
    let present: std::collections::HashSet<&str> = content.lines().collect();
    // A call given up wrote nothing, so nothing of it can be lost.
    let lost = (0..agents)
        .flat_map(|a| (0..calls).map(move |c| record(a, c)))
        .filter(|r| !present.contains(r.as_str()) && !gave_up.contains(r))
        .count() as u64;
    let counters = server.scheduler().dump().counters;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "writ demo --serve: {agents} agent processes x {calls} calls through one server at {}",
        server.url()
    );
    let _ = writeln!(
        text,
        "  writes {writes}, gave up {} (waited past {}s), lost updates {lost}, failed workers {failed}, {:.1}s",
        gave_up.len(),
        WAIT_BOUND.as_secs(),
        elapsed.as_secs_f64(),
    );
    let _ = writeln!(text, "  the table's counters at the end: {counters}");
    let _ = writeln!(text, "\nthe server's dump mid-run:");
    let _ = writeln!(
        text,
        "{}",
        mid_run
            .as_deref()
            .unwrap_or("(the run ended before a hold and a waiter were seen together)")
    );
    if keep {
        print!("{text}");
        println!(
            "\n--keep: the server stays up at {} (token {}); Ctrl-C to stop.\n             The agents go on working, {KEEP_PACE_MS} ms a call, so there is something to watch:\n             in a browser at {}/#token={} (the token stays in the fragment,\n             which is never sent), or with `writ top --url {} --token {}`.",
            server.url(),
            server.token(),
            server.url(),
            server.token(),
            server.url(),
            server.token()
        );
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let (url, token) = (server.url().to_string(), server.token().to_string());
        tokio::select! {
            () = keep_working(&url, &token, agents, seed) => {}
            () = server.wait() => {}
        }
        return Ok((String::new(), lost + failed as u64));
    }
    server.shutdown().await;
    Ok((text, lost + failed as u64))
}

/// How long a call of `--keep`'s workload thinks, on average: slow enough
/// for a person to watch the holds and waiters move.
const KEEP_PACE_MS: u64 = 300;

/// Starts one `writ __demo-worker` process per agent; each is killed if
/// its handle is dropped.
fn spawn_workers(
    url: &str,
    token: &str,
    agents: usize,
    calls: usize,
    seed: u64,
    pace_ms: u64,
) -> Result<Vec<tokio::process::Child>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    (0..agents)
        .map(|agent| {
            tokio::process::Command::new(&exe)
                .args([
                    "__demo-worker",
                    url,
                    token,
                    &agent.to_string(),
                    &calls.to_string(),
                    &seed.to_string(),
                    "--pace-ms",
                    &pace_ms.to_string(),
                ])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot start a worker: {e}"))
        })
        .collect()
}

/// `--keep`'s workload: rounds of the same agents, paced, until the server
/// stops (the caller drops this future, and the workers with it).
async fn keep_working(url: &str, token: &str, agents: usize, seed: u64) {
    for round in 1u64.. {
        let Ok(children) = spawn_workers(url, token, agents, 20, seed ^ round, KEEP_PACE_MS) else {
            return;
        };
        for child in children {
            let _ = child.wait_with_output().await;
        }
    }
}

/// One agent process: admits a shared file, reads it, thinks, writes it
/// back with its record appended; prints how many writes it made.
pub fn worker(
    url: &str,
    token: &str,
    agent: usize,
    calls: usize,
    seed: u64,
    pace_ms: u64,
) -> ExitCode {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let session = writ::remote::Session::connect(url, token)
                    .await
                    .map_err(|e| e.to_string())?;
                let info = session.info().await.map_err(|e| e.to_string())?;
                let root = PathBuf::from(info["root"].as_str().unwrap_or("."));
                let actor = session
                    .actor(format!("agent-{agent}"), writ::Grant::workspace(&root))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut rng = Rng::new(seed ^ (agent as u64 + 1).wrapping_mul(0x9E37_79B9));
                let mut report = Report::default();
                for call in 0..calls {
                    let file = shared(&root, rng.below(SHARED_FILES as u64) as usize);
                    let held = match actor
                        .request([file.as_path()])
                        .label(format!("append {}", record(agent, call)))
                        .admit_timeout(WAIT_BOUND)
                        .await
                    {
                        Ok(held) => held,
                        Err(writ::Error::Timeout { .. }) => {
                            report.gave_up.push(call);
                            continue;
                        }
                        Err(e) => return Err(e.to_string()),
                    };
                    let mut text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
                    // The model "thinks" between its read and its write.
                    let think = if pace_ms == 0 {
                        Duration::from_micros(200 + rng.below(800))
                    } else {
                        Duration::from_millis(pace_ms / 2 + rng.below(pace_ms))
                    };
                    tokio::time::sleep(think).await;
                    text.push_str(&record(agent, call));
                    text.push('\n');
                    std::fs::write(&file, text).map_err(|e| e.to_string())?;
                    held.release().await.map_err(|e| e.to_string())?;
                    report.writes += 1;
                }
                session.close().await.map_err(|e| e.to_string())?;
                serde_json::to_string(&report).map_err(|e| e.to_string())
            })
        });
    match result {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("writ __demo-worker {agent}: {e}");
            ExitCode::FAILURE
        }
    }
}
