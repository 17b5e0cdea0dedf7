//! `writ demo`: concurrent read-modify-write tool calls, without and with writ.
//!
//! Every agent repeatedly reads a shared file, "thinks" for a moment (the
//! window in which a model decides its edit), and writes the file back with one
//! new record appended. A write that succeeded but whose record is missing
//! from the final file is a lost update. The count comes from the files'
//! contents, never from the scheduler's counters.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use writ::{Actor, Config, Grant, Scheduler};

use crate::rng::Rng;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub agents: usize,
    pub calls: usize,
    pub seed: u64,
    pub progress: bool,
}

/// One run's results, from the files' contents.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunResult {
    /// Writes that reported success.
    pub writes: u64,
    /// Successful writes whose record is missing from the final files.
    pub lost_updates: u64,
    /// Wall time of the run.
    pub seconds: f64,
}

/// Admission statistics of the run with writ.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Admission {
    pub admitted: u64,
    /// Try-only requests refused (the table's count).
    pub refused: u64,
    /// Calls into a sibling's fence, refused (the agent chose another file).
    pub refused_by_fence: u64,
    pub waited: u64,
    /// Calls that waited past the bound and gave up (the agent moved on).
    pub timed_out: u64,
    pub deadlocks_refused: u64,
    /// The deadlock message the scripted pair received.
    pub deadlock_message: Option<String>,
}

/// The whole demo's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub agents: usize,
    pub calls_per_agent: usize,
    pub seed: u64,
    pub without_writ: RunResult,
    pub with_writ: RunResult,
    pub admission: Admission,
    /// The same agents editing through `writ::Files` (version gate and
    /// atomic writes), with stale reads refused and redone.
    pub through_files: crate::demo_files::FilesOutcome,
    /// One dump taken while the run with writ was busy.
    pub dump: Option<writ::Dump>,
    #[serde(skip)]
    pub dump_table: Option<String>,
}

const SHARED_FILES: usize = 4;

fn shared_file(root: &Path, i: usize) -> PathBuf {
    root.join("shared").join(format!("notes-{i}.txt"))
}

fn module_file(root: &Path, agent: usize, i: usize) -> PathBuf {
    root.join("modules")
        .join(format!("agent-{agent}"))
        .join(format!("part-{i}.txt"))
}

fn sub_file(root: &Path, agent: usize, i: usize) -> PathBuf {
    root.join("modules")
        .join(format!("agent-{agent}"))
        .join("sub")
        .join(format!("part-{i}.txt"))
}

fn prepare(root: &Path, agents: usize) -> std::io::Result<()> {
    fs::create_dir_all(root.join("shared"))?;
    for i in 0..SHARED_FILES {
        fs::write(shared_file(root, i), "")?;
    }
    for agent in 0..agents {
        fs::create_dir_all(
            root.join("modules")
                .join(format!("agent-{agent}"))
                .join("sub"),
        )?;
        for i in 0..2 {
            fs::write(module_file(root, agent, i), "")?;
            fs::write(sub_file(root, agent, i), "")?;
        }
    }
    Ok(())
}

/// The read-modify-write every call makes: the "think" pause is what lets
/// another writer slip in between the read and the write.
fn edit(path: &Path, record: &str, think: Duration) -> std::io::Result<()> {
    let mut content = fs::read_to_string(path)?;
    std::thread::sleep(think);
    content.push_str(record);
    content.push('\n');
    fs::write(path, content)
}

/// What a worker thread does. Even agents are optimistic and edit shared
/// files; odd agents are fenced on their module folder and make two parallel
/// tool calls at a time there, and each has a sub-agent fenced on a subfolder.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// An optimistic agent editing `shared/`; every tenth call it tries a
    /// fenced neighbour's module file instead (and is refused by the fence).
    Shared { agent: usize },
    /// One of two parallel calls of a fenced agent inside its own fence.
    Module { agent: usize },
    /// The sub-agent of a fenced agent, inside its own subfolder.
    Sub { agent: usize },
}

fn pick(rng: &mut Rng, root: &Path, role: Role, agents: usize, call: usize) -> PathBuf {
    match role {
        Role::Shared { agent } if call % 10 == 9 && agent + 1 < agents => {
            module_file(root, agent + 1, 0)
        }
        Role::Shared { .. } => shared_file(root, rng.below(SHARED_FILES as u64) as usize),
        Role::Module { agent } => module_file(root, agent, rng.below(2) as usize),
        Role::Sub { agent } => sub_file(root, agent, rng.below(2) as usize),
    }
}

/// Worker `w`'s generator: the same in both runs, so both make the same calls.
fn worker_rng(seed: u64, w: usize) -> Rng {
    Rng::new(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9))
}

/// The longest a call waits for its file before the agent gives up on it:
/// agents wait for each other with a bound, they never spin on `Busy`.
const WAIT_BOUND: Duration = Duration::from_secs(10);

/// Whether `pick` sent a call into a fenced neighbour's module: such a call
/// is try-only (a fence stays for the run; a model told so picks another
/// file), every other call waits for its file with [`WAIT_BOUND`].
fn into_neighbours_fence(role: Role, agents: usize, call: usize) -> bool {
    matches!(role, Role::Shared { agent } if call % 10 == 9 && agent + 1 < agents)
}

fn think_time(rng: &mut Rng) -> Duration {
    Duration::from_micros(50 + rng.below(150))
}

/// Counts records that were written successfully but are absent now.
fn count_lost(written: &[(PathBuf, String)]) -> u64 {
    let mut lost = 0;
    let mut cache: std::collections::HashMap<&Path, HashSet<String>> = Default::default();
    for (path, record) in written {
        let lines = cache.entry(path.as_path()).or_insert_with(|| {
            fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect()
        });
        if !lines.contains(record) {
            lost += 1;
        }
    }
    lost
}

fn progress_bar(opts: &Options, total: u64) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{msg:>14} [{bar:40}] {pos}/{len} calls") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Every worker thread's role.
fn workers(agents: usize) -> Vec<Role> {
    let mut out = Vec::new();
    for agent in 0..agents {
        if agent % 2 == 0 {
            out.push(Role::Shared { agent });
        } else {
            out.push(Role::Module { agent });
            out.push(Role::Module { agent });
            out.push(Role::Sub { agent });
        }
    }
    out
}

fn run_without(opts: &Options, root: &Path, bar: &ProgressBar) -> std::io::Result<RunResult> {
    bar.set_message("without writ");
    let written = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let workers = workers(opts.agents);
    let barrier = Arc::new(Barrier::new(workers.len()));
    std::thread::scope(|scope| {
        for (w, &role) in workers.iter().enumerate() {
            let (written, barrier, bar) = (written.clone(), barrier.clone(), bar.clone());
            let mut rng = worker_rng(opts.seed, w);
            let (calls, agents) = (opts.calls, opts.agents);
            scope.spawn(move || {
                barrier.wait();
                for call in 0..calls {
                    let path = pick(&mut rng, root, role, agents, call);
                    let record = format!("worker-{w} call-{call}");
                    if edit(&path, &record, think_time(&mut rng)).is_ok() {
                        if let Ok(mut written) = written.lock() {
                            written.push((path, record));
                        }
                    }
                    bar.inc(1);
                }
            });
        }
    });
    let written = written.lock().map(|w| w.clone()).unwrap_or_default();
    Ok(RunResult {
        writes: written.len() as u64,
        lost_updates: count_lost(&written),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Two fenced agents each wait for the other's fence: writ refuses the
/// request that would close the cycle instead of hanging both.
fn scripted_deadlock(lead: &Actor, root: &Path) -> Option<String> {
    let a = lead.child("planner-a", Grant::workspace(root)).ok()?;
    let b = lead.child("planner-b", Grant::workspace(root)).ok()?;
    let _fa = a.fence(["docs/a/"]).ok()?;
    let _fb = b.fence(["docs/b/"]).ok()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok()?;
    runtime.block_on(async {
        let mut a_waits = std::pin::pin!(a.fence_wait(["docs/b/"]));
        // Poll once so the first request is queued before the second asks.
        let first = futures_poll_once(a_waits.as_mut());
        if first.is_some() {
            return None;
        }
        match b.fence_wait(["docs/a/"]).await {
            Err(e @ writ::Error::Deadlock { .. }) => Some(e.to_string()),
            _ => None,
        }
    })
}

fn futures_poll_once<F: std::future::Future + ?Sized>(
    fut: std::pin::Pin<&mut F>,
) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// A dump and its table, taken mid-run.
type Snapshot = (writ::Dump, String);

fn run_with(
    opts: &Options,
    root: &Path,
    bar: &ProgressBar,
) -> Result<(RunResult, Admission, Option<Snapshot>), writ::Error> {
    bar.set_message("with writ");
    let sched = Scheduler::new(Config::default());
    let lead = sched.actor("lead", Grant::workspace(root))?;
    // Agents: even ones optimistic, odd ones fenced on their module folder,
    // each fenced agent with a sub-agent fenced on a subfolder of its fence.
    let mut actors: Vec<Actor> = Vec::new();
    let mut subs: Vec<Option<Actor>> = Vec::new();
    for agent in 0..opts.agents {
        let name = format!("agent-{agent}");
        if agent % 2 == 0 {
            actors.push(lead.child(name, Grant::workspace(root))?);
            subs.push(None);
        } else {
            let module = format!("modules/agent-{agent}/");
            let parent = lead.child(name, Grant::fenced(root, [module.clone()]))?;
            let sub = parent.child(
                format!("agent-{agent}/sub"),
                Grant::fenced(root, [format!("{module}sub/")]),
            )?;
            actors.push(parent);
            subs.push(Some(sub));
        }
    }
    let workers = workers(opts.agents);
    let worker_actors: Vec<&Actor> = workers
        .iter()
        .filter_map(|role| match *role {
            Role::Shared { agent } | Role::Module { agent } => actors.get(agent),
            Role::Sub { agent } => subs.get(agent).and_then(Option::as_ref),
        })
        .collect();
    // The scripted deadlock first, so every count below, and the dump
    // taken mid-run, include it: the summary and the dump agree.
    let deadlock_message = scripted_deadlock(&lead, root);
    let fence_refusals = Arc::new(AtomicU64::new(0));
    let written = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicU64::new(0));
    let total = (workers.len() * opts.calls) as u64;
    let snapshot: Arc<Mutex<Option<Snapshot>>> = Arc::new(Mutex::new(None));
    let barrier = Arc::new(Barrier::new(workers.len()));
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (w, (&role, actor)) in workers.iter().zip(&worker_actors).enumerate() {
            let (written, fence_refusals, done, barrier, bar, snapshot, sched) = (
                written.clone(),
                fence_refusals.clone(),
                done.clone(),
                barrier.clone(),
                bar.clone(),
                snapshot.clone(),
                sched.clone(),
            );
            let mut rng = worker_rng(opts.seed, w);
            let (calls, agents) = (opts.calls, opts.agents);
            scope.spawn(move || {
                barrier.wait();
                for call in 0..calls {
                    let path = pick(&mut rng, root, role, agents, call);
                    let record = format!("worker-{w} call-{call}");
                    let label = format!(
                        "edit {}",
                        path.strip_prefix(root).unwrap_or(&path).display()
                    );
                    let request = actor.request([path.as_path()]).label(label);
                    // An agent waits for a file another is writing, up to a
                    // bound (the table counts a wait that gives up as a
                    // timeout); a sibling's fence refuses at once.
                    let reservation = if into_neighbours_fence(role, agents, call) {
                        request.try_admit().inspect_err(|e| {
                            if matches!(e, writ::Error::Busy(b) if b.kind == writ::HoldKind::Fence)
                            {
                                fence_refusals.fetch_add(1, Ordering::Relaxed);
                            }
                        })
                    } else {
                        request.admit_blocking_timeout(WAIT_BOUND)
                    };
                    if let Ok(reservation) = reservation {
                        if edit(&path, &record, think_time(&mut rng)).is_ok() {
                            if let Ok(mut written) = written.lock() {
                                written.push((path, record));
                            }
                        }
                        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                        // One dump, taken mid-run while this call still
                        // holds; a few tries to catch one with waiters.
                        if finished >= total / 2 && finished < total / 2 + 64 {
                            if let Ok(mut slot) = snapshot.lock() {
                                if slot.as_ref().is_none_or(|(d, _)| d.waiters.is_empty()) {
                                    let dump = sched.dump();
                                    let table = dump.to_string();
                                    *slot = Some((dump, table));
                                }
                            }
                        }
                        drop(reservation);
                    }
                    bar.inc(1);
                }
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    let written = written.lock().map(|w| w.clone()).unwrap_or_default();
    let counters = sched.dump().counters;
    let admission = Admission {
        admitted: counters.admitted,
        refused: counters.refused,
        refused_by_fence: fence_refusals.load(Ordering::Relaxed),
        waited: counters.waited,
        timed_out: counters.timed_out,
        deadlocks_refused: counters.deadlocks,
        deadlock_message,
    };
    let snapshot = snapshot.lock().ok().and_then(|mut s| s.take());
    Ok((
        RunResult {
            writes: written.len() as u64,
            lost_updates: count_lost(&written),
            seconds,
        },
        admission,
        snapshot,
    ))
}

/// Runs both halves of the demo in fresh temporary workspaces.
pub fn run(opts: &Options) -> Result<Outcome, Box<dyn std::error::Error>> {
    let total = (workers(opts.agents).len() * opts.calls) as u64;
    let bar = progress_bar(opts, total * 2);
    let without_dir = tempfile::tempdir()?;
    prepare(without_dir.path(), opts.agents)?;
    let without_writ = run_without(opts, without_dir.path(), &bar)?;
    let with_dir = tempfile::tempdir()?;
    prepare(with_dir.path(), opts.agents)?;
    let (with_writ, admission, snapshot) = run_with(opts, with_dir.path(), &bar)?;
    bar.finish_and_clear();
    let through_files = crate::demo_files::run(opts.agents, opts.calls, opts.seed)?;
    let (dump, dump_table) = match snapshot {
        Some((dump, table)) => (Some(dump), Some(table)),
        None => (None, None),
    };
    Ok(Outcome {
        agents: opts.agents,
        calls_per_agent: opts.calls,
        seed: opts.seed,
        without_writ,
        with_writ,
        admission,
        through_files,
        dump,
        dump_table,
    })
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b) = (&self.without_writ, &self.with_writ);
        writeln!(
            f,
            "{} agents, {} calls per worker, seed {}: even agents optimistic on shared/, odd agents fenced on",
            self.agents, self.calls_per_agent, self.seed
        )?;
        writeln!(
            f,
            "modules/agent-N/ making two parallel calls there, each with a sub-agent fenced on modules/agent-N/sub/"
        )?;
        writeln!(f)?;
        writeln!(f, "                      without writ    with writ")?;
        writeln!(
            f,
            "  successful writes   {:>12}    {:>9}",
            a.writes, b.writes
        )?;
        writeln!(
            f,
            "  lost updates        {:>12}    {:>9}",
            a.lost_updates, b.lost_updates
        )?;
        writeln!(
            f,
            "  seconds             {:>12.2}    {:>9.2}",
            a.seconds, b.seconds
        )?;
        writeln!(f)?;
        let s = &self.admission;
        writeln!(
            f,
            "admission (the table's counters at the end): {} admitted, {} refused ({} by a sibling's fence), {} waited, {} gave up after {}s, {} deadlock(s) refused",
            s.admitted,
            s.refused,
            s.refused_by_fence,
            s.waited,
            s.timed_out,
            WAIT_BOUND.as_secs(),
            s.deadlocks_refused
        )?;
        if let Some(message) = &s.deadlock_message {
            writeln!(f, "deadlock refused: {message}")?;
        }
        writeln!(f)?;
        writeln!(f, "{}", self.through_files)?;
        if let Some(table) = &self.dump_table {
            writeln!(f)?;
            writeln!(
                f,
                "dump taken mid-run (the scripted deadlock came first, so it counts it too):"
            )?;
            writeln!(f, "{table}")?;
        }
        Ok(())
    }
}
