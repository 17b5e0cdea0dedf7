//! The `writ` command: the demo, the history tools and the MCP server.

mod config_cli;
mod demo;
mod demo_delegate;
mod demo_files;
mod demo_plan;
#[cfg(all(feature = "server", feature = "remote"))]
mod demo_serve;
mod history_cli;
#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
mod hook_cli;
#[cfg(all(feature = "mcp", feature = "remote"))]
mod mcp_bridge;
#[cfg(feature = "mcp")]
mod mcp_cli;
mod rng;
#[cfg(all(feature = "server", feature = "remote"))]
mod run_cli;
#[cfg(all(feature = "server", feature = "remote"))]
mod serve_cli;
#[cfg(all(feature = "server", feature = "remote"))]
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// writ keeps concurrent AI agents from destroying each other's work.
// Named here: clap would otherwise take the package's name (`writ-sched`),
// and the command is `writ`.
#[derive(Debug, Parser)]
#[command(name = "writ", version, about)]
struct Cli {
    /// How log lines on stderr look: text (one line each) or json (one
    /// object each). RUST_LOG chooses which are written (default: info for
    /// `writ serve`, warnings elsewhere).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of the log on stderr.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Sends the library's `tracing` events to stderr, filtered by `RUST_LOG`
/// (else `default`). Stdout is left alone: `writ mcp` speaks MCP on it,
/// and `writ serve`'s first line there is its URL.
fn init_logs(format: LogFormat, default: &str) {
    use tracing_subscriber::EnvFilter;
    let asked = std::env::var("RUST_LOG").ok();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // The MCP library logs each session's internals at info (debug dumps,
    // session ids): kept at warn unless RUST_LOG names it.
    let filter = match asked {
        Some(asked) if asked.contains("rmcp") => filter,
        _ => match "rmcp=warn".parse() {
            Ok(quiet) => filter.add_directive(quiet),
            Err(_) => filter,
        },
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Set once, first thing: only a second call could fail, and there is none.
    let _ = match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Concurrent agents editing shared files, without and with writ.
    Demo {
        /// Number of agents.
        #[arg(long, default_value_t = 8)]
        agents: usize,
        /// Tool calls per agent.
        #[arg(long, default_value_t = 150)]
        calls: usize,
        /// Seed for file choice and timing.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
        /// Instead: validate a task plan, refused and then fixed.
        #[arg(long, conflicts_with_all = ["json", "delegate"])]
        plan: bool,
        /// Instead: run a fake coding agent as a fenced delegated writer.
        #[arg(long, conflicts_with = "json")]
        delegate: bool,
        /// Instead: the same workload run by agent processes through one `writ serve`.
        #[cfg(all(feature = "server", feature = "remote"))]
        #[arg(long, conflicts_with_all = ["json", "plan", "delegate"])]
        serve: bool,
        /// With --serve: leave the server up afterwards (Ctrl-C stops it).
        #[cfg(all(feature = "server", feature = "remote"))]
        #[arg(long, requires = "serve")]
        keep: bool,
    },
    /// Recorded file history: list, show, rewind, redo, prune.
    History(history_cli::HistoryCmd),
    /// writ's file tools for an agent over MCP on stdio.
    #[cfg(feature = "mcp")]
    Mcp(mcp_cli::McpCmd),
    /// Print an MCP client's configuration for writ (the `writ mcp` bridge:
    /// no port, no token), or merge it into the client's file with --write.
    Config(config_cli::ConfigCmd),
    /// Run a shell command as a transaction: through a private copy-on-write
    /// layer, its writes committed all or nothing (or `--show` a kept run).
    #[cfg(all(feature = "server", feature = "remote"))]
    Run(run_cli::RunCmd),
    /// Hooks for coding agents' built-in file tools (through `writ serve`).
    #[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
    Hook(hook_cli::HookCmd),
    /// One scheduler for every process of a session, over loopback HTTP (and
    /// a Unix socket with --socket).
    #[cfg(all(feature = "server", feature = "remote"))]
    Serve(Box<serve_cli::ServeCmd>),
    /// Print a running server's table.
    #[cfg(all(feature = "server", feature = "remote"))]
    Dump {
        #[command(flatten)]
        target: serve_cli::TargetArgs,
        /// Print the dump as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Say whether a server is running, and its URL.
    #[cfg(all(feature = "server", feature = "remote"))]
    Status(serve_cli::TargetArgs),
    /// Watch a running server live: actors, holds, waiters, the wait-for
    /// graph, counters and refusals, redrawn from its event stream (q quits).
    #[cfg(all(feature = "server", feature = "remote"))]
    Top(serve_cli::TargetArgs),
    /// A client that takes a fence and then waits to be killed (for tests).
    #[cfg(all(feature = "server", feature = "remote"))]
    #[command(name = "__hold", hide = true)]
    Hold {
        /// The server's URL.
        url: String,
        /// The session token.
        token: String,
        /// The target to fence.
        target: String,
    },
    /// One agent process of `writ demo --serve`.
    #[cfg(all(feature = "server", feature = "remote"))]
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker {
        /// The server's URL.
        url: String,
        /// The session token.
        token: String,
        /// This agent's number.
        agent: usize,
        /// Tool calls to make.
        calls: usize,
        /// The demo's seed.
        seed: u64,
        /// Milliseconds each call "thinks" on average (0: the measured
        /// run's fraction of a millisecond).
        #[arg(long, default_value_t = 0)]
        pace_ms: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `writ serve` runs for a person who wants to see it work; the other
    // commands print their own answers and only warn.
    #[cfg(all(feature = "server", feature = "remote"))]
    let default = match &cli.command {
        Command::Serve(_) => "warn,writ=info",
        _ => "warn",
    };
    #[cfg(not(all(feature = "server", feature = "remote")))]
    let default = "warn";
    init_logs(cli.log_format, default);
    match cli.command {
        Command::History(cmd) => history_cli::run(cmd),
        #[cfg(feature = "mcp")]
        Command::Mcp(cmd) => mcp_cli::run(cmd),
        Command::Config(cmd) => config_cli::run(cmd),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Run(cmd) => run_cli::run(cmd),
        #[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
        Command::Hook(cmd) => hook_cli::run(cmd),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Serve(cmd) => serve_cli::serve(*cmd),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Dump { target, json } => serve_cli::dump(target, json),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Status(target) => serve_cli::status(target),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Top(target) => top::run(target),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Hold { url, token, target } => serve_cli::hold(&url, &token, &target),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::DemoWorker {
            url,
            token,
            agent,
            calls,
            seed,
            pace_ms,
        } => demo_serve::worker(&url, &token, agent, calls, seed, pace_ms),
        #[cfg(all(feature = "server", feature = "remote"))]
        Command::Demo {
            serve: true,
            agents,
            calls,
            seed,
            keep,
            ..
        } => {
            if agents == 0 || calls == 0 {
                eprintln!("writ demo: --agents and --calls must be at least 1");
                return ExitCode::from(2);
            }
            demo_serve::run(agents, calls, seed, keep)
        }
        Command::Demo { plan: true, .. } => run_plan_demo(),
        Command::Demo { delegate: true, .. } => run_delegate_demo(),
        Command::Demo {
            agents,
            calls,
            seed,
            json,
            ..
        } => {
            if agents == 0 || calls == 0 {
                eprintln!("writ demo: --agents and --calls must be at least 1");
                return ExitCode::from(2);
            }
            let opts = demo::Options {
                agents,
                calls,
                seed,
                progress: !json,
            };
            match demo::run(&opts) {
                Ok(outcome) => {
                    if json {
                        match serde_json::to_string_pretty(&outcome) {
                            Ok(text) => println!("{text}"),
                            Err(e) => {
                                eprintln!("writ demo: {e}");
                                return ExitCode::FAILURE;
                            }
                        }
                    } else {
                        print!("{outcome}");
                    }
                    if outcome.with_writ.lost_updates == 0
                        && outcome.through_files.lost_updates == 0
                    {
                        ExitCode::SUCCESS
                    } else {
                        eprintln!("writ demo: updates were lost with writ — this is a bug");
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("writ demo: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn run_plan_demo() -> ExitCode {
    let result = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|dir| demo_plan::run(dir.path()).map_err(|e| e.to_string()));
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("writ demo --plan: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_delegate_demo() -> ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .and_then(|runtime| runtime.block_on(demo_delegate::run()));
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("writ demo --delegate: {e}");
            ExitCode::FAILURE
        }
    }
}
