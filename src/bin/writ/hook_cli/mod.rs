//! `writ hook CLIENT`: a coding CLI's hooks for its built-in file tools, so
//! that edits that bypass MCP are still admitted through the running
//! `writ serve`. One engine (`engine`) holds the rules; each client is a
//! vocabulary that maps its events onto it (`claude`, `codex`, `gemini`,
//! `opencode`).

mod claude;
mod codex;
mod engine;
mod gemini;
mod opencode;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;

/// writ's opencode plugin, running writ as `argv` (a JavaScript array of
/// strings).
pub fn opencode_plugin(argv: &str) -> String {
    opencode::plugin(argv)
}

/// Hooks for coding agents' built-in tools.
#[derive(Debug, Args)]
pub struct HookCmd {
    #[command(subcommand)]
    agent: HookAgent,
}

#[derive(Debug, Subcommand)]
enum HookAgent {
    /// Claude Code: PreToolUse/PostToolUse for Write|Edit|NotebookEdit|Read
    /// (and MultiEdit), PreToolUse for Bash (its command sent through
    /// `writ run`) and mcp__writ__*, UserPromptSubmit and SubagentStop.
    ClaudeCode(Common),
    /// Codex CLI: PreToolUse/PostToolUse for apply_patch, PreToolUse for
    /// Bash (its command sent through `writ run`), UserPromptSubmit.
    Codex(Common),
    /// Gemini CLI: BeforeTool/AfterTool for write_file|replace, AfterTool for
    /// read_file|read_many_files,
    /// BeforeTool for run_shell_command (sent through `writ run`), AfterTool
    /// for writ's MCP tools (a refusal handed to the model as text),
    /// BeforeAgent.
    Gemini(Common),
    /// opencode, through writ's plugin: tool.execute.before/after for
    /// write|edit|read, tool.execute.before for bash (its command sent
    /// through `writ run`), chat.message.
    Opencode(OpencodeArgs),
}

/// `writ hook opencode`: the hook, or the plugin that calls it.
#[derive(Debug, Args)]
struct OpencodeArgs {
    #[command(flatten)]
    common: Common,
    /// Print the plugin opencode loads (put it in `.opencode/plugin/`)
    /// instead of handling an event.
    #[arg(long)]
    print_plugin: bool,
}

/// How every hook finds its server.
#[derive(Debug, Args)]
struct Common {
    /// The workspace whose server to use (default: the nearest folder above
    /// the file with `.writ/serve.json`).
    root: Option<PathBuf>,
    /// The server's URL instead of the discovery file.
    #[arg(long)]
    url: Option<String>,
    /// The token for --url (default: $WRIT_TOKEN).
    #[arg(long, requires = "url")]
    token: Option<String>,
    /// Where the discovery file is (default: ROOT/.writ).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Seconds after which a reservation whose PostToolUse never came is
    /// released.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    hook_ttl: f64,
}

impl Common {
    fn settings(&self) -> engine::Settings {
        engine::Settings {
            root: self.root.clone(),
            url: self.url.clone(),
            token: self.token.clone(),
            state_dir: self.state_dir.clone(),
            hook_ttl: Duration::try_from_secs_f64(self.hook_ttl).unwrap_or(Duration::from_secs(60)),
        }
    }
}

/// Runs one hook event. It always exits 0: the decision is in what it
/// prints, and a write it cannot judge is denied, never let through.
pub fn run(cmd: HookCmd) -> ExitCode {
    if let HookAgent::Opencode(OpencodeArgs {
        print_plugin: true, ..
    }) = cmd.agent
    {
        print!("{}", opencode::PLUGIN);
        return ExitCode::SUCCESS;
    }
    let mut input = String::new();
    let event = match std::io::stdin().read_to_string(&mut input) {
        Ok(_) => serde_json::from_str::<Value>(&input).map_err(|e| e.to_string()),
        Err(e) => Err(format!("cannot read the event: {e}")),
    };
    let out = match cmd.agent {
        HookAgent::ClaudeCode(args) => match event.and_then(|e| claude::parse(&e)) {
            Err(why) => claude::output(&unreadable(&why)),
            Ok(claude::Parsed::Mcp(input)) => Some(claude::mcp_output(input)),
            Ok(claude::Parsed::Shell {
                event,
                input,
                agent,
            }) => {
                let renewed = decide(&args, &event);
                match engine::wrap_shell(event.cwd.as_deref(), &agent, input) {
                    Some(input) => Some(claude::mcp_output(input)),
                    None => claude::output(&renewed),
                }
            }
            Ok(claude::Parsed::Engine(event)) => claude::output(&decide(&args, &event)),
        },
        // Codex reads a decision, and a rewritten input, as Claude Code does.
        HookAgent::Codex(args) => {
            let wrapped = event.as_ref().ok().and_then(|e| {
                let (input, dir) = codex::SHELL.of(e)?;
                engine::wrap_shell(dir.as_deref(), &codex::agent(e)?, input)
            });
            match event.and_then(|e| codex::parse(&e)) {
                Err(why) => claude::output(&unreadable(&why)),
                Ok(event) => {
                    let decision = decide(&args, &event);
                    match wrapped {
                        Some(input) if matches!(decision, engine::Decision::Pass) => {
                            Some(claude::mcp_output(input))
                        }
                        _ => claude::output(&decision),
                    }
                }
            }
        }
        HookAgent::Gemini(args) => {
            let wrapped = event.as_ref().ok().and_then(|e| {
                let (input, dir) = gemini::SHELL.of(e)?;
                engine::wrap_shell(dir.as_deref(), &gemini::agent(e)?, input)
            });
            let refusal = event.as_ref().ok().and_then(gemini::mcp_refusal);
            match event.and_then(|e| gemini::parse(&e)) {
                Err(why) => gemini::output(&unreadable(&why)),
                Ok(event) => {
                    let decision = decide(&args, &event);
                    if let Some(text) = refusal {
                        // A blocked result is shown as `Tool result
                        // blocked: <reason>`, as text.
                        return print_out(gemini::output(&engine::Decision::Deny(text)));
                    }
                    match wrapped {
                        Some(input) if matches!(decision, engine::Decision::Pass) => {
                            Some(gemini::shell_output(input))
                        }
                        _ => gemini::output(&decision),
                    }
                }
            }
        }
        HookAgent::Opencode(args) => {
            let wrapped = event.as_ref().ok().and_then(|e| {
                let (input, dir) = opencode::SHELL.of(e)?;
                engine::wrap_shell(dir.as_deref(), &opencode::agent(e)?, input)
            });
            match event.and_then(|e| opencode::parse(&e)) {
                Err(why) => opencode::output(&unreadable(&why)),
                Ok(event) => {
                    let decision = decide(&args.common, &event);
                    match wrapped {
                        Some(input) if matches!(decision, engine::Decision::Pass) => {
                            Some(opencode::shell_output(input))
                        }
                        _ => opencode::output(&decision),
                    }
                }
            }
        }
    };
    print_out(out)
}

fn print_out(out: Option<Value>) -> ExitCode {
    if let Some(out) = out {
        println!("{out}");
    }
    ExitCode::SUCCESS
}

/// An event that cannot be read is denied: the client applies a deny only
/// before a tool runs (the one place a write could slip through) and
/// ignores it elsewhere.
fn unreadable(why: &str) -> engine::Decision {
    engine::Decision::Deny(format!(
        "writ hook could not read this event ({why}); the call is denied so that no other agent's work is overwritten."
    ))
}

fn decide(args: &Common, event: &engine::Event) -> engine::Decision {
    let decision = engine::decide(&args.settings(), event);
    if let engine::Decision::Deny(reason) = &decision {
        tracing::info!(
            client = event.prefix,
            step = ?event.step,
            session = %event.who.session,
            agent = event.who.agent.as_deref().unwrap_or_default(),
            %reason,
            "hook denied"
        );
    }
    decision
}
