//! The friction benchmark: how many tool calls scripted agents spend per
//! task that lands, and how many updates they lose, when they share one
//! folder through writ, with a blind overwrite, or each in a git worktree
//! merged at the end.
//!
//! ```sh
//! cargo run --release --example friction -- --agents 4,8 --seeds 3
//! cargo run --release --example friction -- --agents 4 --tasks 3 --time-scale 0.02   # seconds
//! cargo run --release --example friction -- --agents 4,8,16,32,64 --seeds 1 \
//!     --registry natural --modes writ,writ-noclaims,writ-strict,blind --time-scale 0.25
//! ```
//!
//! Flags: `--agents 4,8` (agent counts), `--seeds 3` (seeds 1..=N, or `2-3`; the
//! summary gives medians), `--tasks 10` (per agent), `--time-scale 1.0`
//! (multiplies the think and turn times: 0.1 runs ten times faster),
//! `--modes writ,writ-modern,writ-noclaims,writ-strict,writ-reread,blind,worktree`
//! (`writ`: anchored edits, `writ serve`'s default; `writ-modern`: the same
//! with agents on the current MCP revision, carrying a handle instead of a
//! session; `writ-noclaims`: `--claim-ttl 0`, no claim on a stale
//! refusal; `writ-strict`: `--strict-gate`), `--registry marker,natural`
//! (how the agents add their registry line: before an end-marker line, or
//! the natural edit, the last entry and the closing bracket replaced by
//! the last entry, their own and the bracket; default `marker`),
//! `--call-wait 3` (the server's call-wait in seconds at full times). Below
//! 1.0, `--time-scale` scales the server's call-wait and claim TTL too
//! (floors 0.25 s and 0.5 s).
//! The workload and the modes are described in `workload.rs`;
//! docs/PERFORMANCE.md has the figures.

#[path = "../../tests/common/mcp_http_client.rs"]
mod mcp_http_client;
mod workload;

use std::collections::BTreeMap;
use std::time::Duration;

use workload::{MIN_CALLS, Mode, Params, RegistryEdit, Report};

struct Args {
    agents: Vec<usize>,
    seeds: std::ops::RangeInclusive<u64>,
    tasks: usize,
    time_scale: f64,
    modes: Vec<Mode>,
    registry: Vec<RegistryEdit>,
    call_wait: Duration,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        agents: vec![4, 8],
        seeds: 1..=3,
        tasks: 10,
        time_scale: 1.0,
        modes: Mode::ALL.to_vec(),
        registry: vec![RegistryEdit::Marker],
        call_wait: Duration::from_secs(3),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--agents" => {
                args.agents = value
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().map_err(|e| bad(&e)))
                    .collect::<Result<_, _>>()?;
            }
            // `3` (seeds 1 to 3) or `2-3` (seeds 2 and 3).
            "--seeds" => {
                let (from, to) = value.split_once('-').unwrap_or(("1", &value));
                let from: u64 = from.parse().map_err(|e| bad(&e))?;
                let to: u64 = to.parse().map_err(|e| bad(&e))?;
                args.seeds = from..=to;
            }
            "--call-wait" => {
                let secs: f64 = value.parse().map_err(|e| bad(&e))?;
                args.call_wait = Duration::try_from_secs_f64(secs).map_err(|e| bad(&e))?;
            }
            "--tasks" => args.tasks = value.parse().map_err(|e| bad(&e))?,
            "--time-scale" => args.time_scale = value.parse().map_err(|e| bad(&e))?,
            "--modes" => {
                args.modes = value
                    .split(',')
                    .map(|m| Mode::parse(m.trim()).ok_or_else(|| bad(&"unknown mode")))
                    .collect::<Result<_, _>>()?;
            }
            "--registry" => {
                args.registry = value
                    .split(',')
                    .map(|r| RegistryEdit::parse(r.trim()).ok_or_else(|| bad(&"unknown edit")))
                    .collect::<Result<_, _>>()?;
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if !(args.time_scale.is_finite() && args.time_scale >= 0.0) {
        return Err("--time-scale must be a number, 0 or more".into());
    }
    if args.agents.contains(&0)
        || args.tasks == 0
        || *args.seeds.start() == 0
        || args.seeds.is_empty()
        || args.registry.is_empty()
    {
        return Err("agents, tasks and seeds must be at least 1".into());
    }
    Ok(args)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("friction: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("friction: runtime: {e}");
            std::process::exit(1);
        }
    };
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("friction: temp folder: {e}");
            std::process::exit(1);
        }
    };
    let (call_wait, claim_ttl) = Params::new(1, 1, 1, args.time_scale)
        .scale_waits(true)
        .call_wait(args.call_wait)
        .waits();
    println!(
        "friction: {} tasks per agent, think 0.2-7 s and a turn of 0.2-1.5 s before each call, \
         times x{}; call-wait {call_wait:.2?}, claim TTL {claim_ttl:.2?}",
        args.tasks, args.time_scale
    );
    let mut reports: Vec<Report> = Vec::new();
    for &registry in &args.registry {
        for &agents in &args.agents {
            for seed in args.seeds.clone() {
                let params = Params::new(agents, args.tasks, seed, args.time_scale)
                    .registry(registry)
                    .scale_waits(true)
                    .call_wait(args.call_wait);
                // The modes of one seed run side by side: their agents mostly
                // wait (the model's turns), and each wall time is then taken
                // under the same load as the others'.
                let runs: Vec<_> = args
                    .modes
                    .iter()
                    .map(|&mode| {
                        let (params, base) = (params.clone(), dir.path().to_path_buf());
                        runtime.spawn(async move { workload::run(mode, &params, &base).await })
                    })
                    .collect();
                for (&mode, run) in args.modes.iter().zip(runs) {
                    let outcome = runtime
                        .block_on(run)
                        .unwrap_or_else(|e| Err(format!("the run failed: {e}")));
                    match outcome {
                        Ok(report) => {
                            println!(
                                "  {} agents {agents} seed {seed} {:<13} calls {:>4} \
                             changes {:>3}/{:<3} landed {:>3}/{:<3} \
                             lost {:>3} extra {:>2} refusals {:>3} in a row {:>2} anchored {:>3} \
                             wall {:>7.2?}{}{}",
                                registry.name(),
                                mode.name(),
                                report.calls,
                                report.accepted,
                                report.intended,
                                report.landed_tasks,
                                agents * args.tasks,
                                report.lost,
                                report.extra,
                                report.refusals.values().sum::<usize>(),
                                report.longest.0,
                                report.anchored,
                                report.wall,
                                if mode == Mode::Worktree {
                                    format!(" + merge {:.2?}", report.merge)
                                } else {
                                    String::new()
                                },
                                if report.longest.0 > 1 {
                                    format!(" [{}]", report.longest.1)
                                } else {
                                    String::new()
                                }
                            );
                            for why in &report.gave_up {
                                println!("    gave up a task: {why}");
                            }
                            reports.push(report);
                        }
                        Err(e) => {
                            eprintln!("friction: {} agents {agents} seed {seed}: {e}", mode.name());
                            std::process::exit(1);
                        }
                    }
                }
            }
        }
    }
    for &registry in &args.registry {
        let of: Vec<Report> = reports
            .iter()
            .filter(|r| r.registry == registry)
            .cloned()
            .collect();
        println!();
        println!("registry edit: {}", registry.name());
        summary(&args, &of);
        targets(&args, &of);
    }
    let failed = reports
        .iter()
        .any(|r| r.mode.is_writ() && (r.lost > 0 || r.extra > 0));
    if failed {
        eprintln!("friction: writ lost or invented an update");
        std::process::exit(1);
    }
}

fn summary(args: &Args, reports: &[Report]) {
    println!();
    println!(
        "medians over {} seed(s); calls per landed task against the minimum of {MIN_CALLS}; \
         wall time (the agents' work; a worktree's merge is not in it) over blind \
         overwrite's in the same seed",
        args.seeds.clone().count()
    );
    println!(
        "| agents | mode | lost updates (of {} changes per agent) | calls per landed task | \
         ÷ minimum | tasks landed | refusals per task | retries refused again | \
         most refusals in a row (changes refused 3+ in a row) | anchored per task | \
         wall ÷ blind |",
        args.tasks * 4
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &agents in &args.agents {
        for &mode in &args.modes {
            let runs: Vec<&Report> = reports
                .iter()
                .filter(|r| r.agents == agents && r.mode == mode)
                .collect();
            let of = |f: &dyn Fn(&Report) -> f64| median(runs.iter().map(|r| f(r)).collect());
            let wall_ratio = |r: &Report| {
                reports
                    .iter()
                    .find(|b| b.agents == agents && b.seed == r.seed && b.mode == Mode::Blind)
                    .map_or(f64::NAN, |b| {
                        r.wall.as_secs_f64() / b.wall.max(Duration::from_micros(1)).as_secs_f64()
                    })
            };
            let calls = of(&|r| r.calls_per_task());
            // Summed over seeds: a seed may retry nothing.
            let (retries, again) = runs.iter().fold((0, 0), |(n, again), r| {
                (n + r.retries, again + r.retries_refused)
            });
            let again = if retries == 0 {
                "—".to_string()
            } else {
                format!("{:.0}% of {retries}", 100.0 * again as f64 / retries as f64)
            };
            // The worst over seeds: the mark is for every retry.
            let longest = runs
                .iter()
                .map(|r| &r.longest)
                .max_by_key(|(n, _)| *n)
                .filter(|(n, _)| *n > 0)
                .map_or("—".to_string(), |(n, file)| format!("{n} ({file})"));
            let thrice: usize = runs
                .iter()
                .flat_map(|r| r.streaks.range(3..).map(|(_, count)| count))
                .sum();
            println!(
                "| {agents} | {} | {} | {calls:.2} | {:.2} | {} | {:.2} | {again} | {longest}; {thrice} \
                 | {:.2} | {:.2} |",
                mode.name(),
                of(&|r| r.lost as f64),
                calls / MIN_CALLS as f64,
                of(&|r| r.landed_tasks as f64),
                of(&|r| r.refusals.values().sum::<usize>() as f64 / r.landed_tasks.max(1) as f64),
                of(&|r| r.anchored as f64 / r.landed_tasks.max(1) as f64),
                of(&wall_ratio),
            );
        }
    }
    println!();
    println!("refusals by kind and file, summed over seeds:");
    for &agents in &args.agents {
        for &mode in &args.modes {
            let mut sum: BTreeMap<(String, String), usize> = BTreeMap::new();
            let mut conflicts = 0;
            for r in reports
                .iter()
                .filter(|r| r.agents == agents && r.mode == mode)
            {
                for (key, n) in &r.refusals {
                    *sum.entry(key.clone()).or_default() += n;
                }
                conflicts += r.conflicts;
            }
            let listed: Vec<String> = sum
                .iter()
                .map(|((kind, file), n)| format!("{kind} {file}: {n}"))
                .collect();
            let mut line = format!("  agents {agents} {:<11}", mode.name());
            if listed.is_empty() {
                line.push_str(" none");
            } else {
                line.push(' ');
                line.push_str(&listed.join(", "));
            }
            if mode == Mode::Worktree {
                line.push_str(&format!(" (merge conflicts: {conflicts} files)"));
            }
            println!("{line}");
        }
    }
}

/// The hot-file targets (docs/PERFORMANCE.md), each through writ mode,
/// met or missed: 0 lost at every size, calls per landed task at 8 and 16
/// agents, wall ÷ blind at 16, no retry refused more than twice in a row
/// (three refusals of one change in a row at most: the first attempt's
/// and two retries'), and every task landed at 64 agents.
fn targets(args: &Args, reports: &[Report]) {
    let median_of = |agents: usize, mode: Mode, f: &dyn Fn(&Report) -> f64| {
        median(
            reports
                .iter()
                .filter(|r| r.agents == agents && r.mode == mode)
                .map(f)
                .collect(),
        )
    };
    let wall = |r: &Report| {
        reports
            .iter()
            .find(|b| b.agents == r.agents && b.seed == r.seed && b.mode == Mode::Blind)
            .map_or(f64::NAN, |b| {
                r.wall.as_secs_f64() / b.wall.max(Duration::from_micros(1)).as_secs_f64()
            })
    };
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!();
    println!("targets (hot files):");
    for &mode in args.modes.iter().filter(|m| m.is_writ()) {
        let runs: Vec<&Report> = reports.iter().filter(|r| r.mode == mode).collect();
        let lost: usize = runs.iter().map(|r| r.lost + r.extra).sum();
        let mut line = format!(
            "  {:<13} lost+extra {lost}: {}",
            mode.name(),
            verdict(lost == 0)
        );
        for (agents, mark) in [(8, 8.6), (16, 9.2)] {
            if args.agents.contains(&agents) {
                let calls = median_of(agents, mode, &|r| r.calls_per_task());
                line.push_str(&format!(
                    "; calls/task at {agents} {calls:.2} (≤ {mark}): {}",
                    verdict(calls <= mark)
                ));
            }
        }
        if args.agents.contains(&16) && args.modes.contains(&Mode::Blind) {
            let ratio = median_of(16, mode, &wall);
            line.push_str(&format!(
                "; wall ÷ blind at 16 {ratio:.2} (≤ 1.3): {}",
                verdict(ratio <= 1.3)
            ));
        }
        let most = runs.iter().map(|r| r.longest.0).max().unwrap_or(0);
        line.push_str(&format!(
            "; most refusals in a row {most} (≤ 3): {}",
            verdict(most <= 3)
        ));
        if args.agents.contains(&64) {
            let all = runs
                .iter()
                .filter(|r| r.agents == 64)
                .all(|r| r.landed_tasks == 64 * args.tasks && r.lost + r.extra == 0);
            line.push_str(&format!("; 64 agents all landed, 0 lost: {}", verdict(all)));
        }
        println!("{line}");
    }
}
