//! The real Claude Code CLI for the real-CLI suite: installed from
//! tests/cli's lockfile with `npm ci` into a folder under target/ (reused),
//! run headless against a scripted model, one private home per run, and
//! set up with writ the way a user does it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const INSTALL_HINT: &str = "node (22 or later) and npm are required: install them (Debian/Ubuntu: apt-get install nodejs npm)";

/// The `claude` executable: the lockfile's version, or the newest on npm
/// when `WRIT_CLI_LATEST=1` (the weekly job that finds a CLI's change the
/// week it ships).
pub fn claude_bin() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    for tool in ["node", "npm"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(found.is_ok_and(|s| s.success()), "{INSTALL_HINT}");
    }
    let pinned = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let latest = std::env::var("WRIT_CLI_LATEST").is_ok_and(|v| v == "1");
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(if latest {
        "real-cli-latest"
    } else {
        "real-cli"
    });
    let bin = prefix.join("node_modules/.bin/claude");
    std::fs::create_dir_all(&prefix).unwrap_or_else(|e| panic!("{}: {e}", prefix.display()));
    if latest {
        if !bin.exists() {
            npm(
                &prefix,
                &[
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "@anthropic-ai/claude-code@latest",
                ],
            );
        }
        return bin;
    }
    // `npm ci` again whenever the lockfile changed since the last install.
    let lock = std::fs::read(pinned.join("package-lock.json"))
        .unwrap_or_else(|e| panic!("tests/cli/package-lock.json: {e}"));
    let installed_lock = std::fs::read(prefix.join("package-lock.json")).ok();
    if !bin.exists() || installed_lock.as_deref() != Some(&lock[..]) {
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pinned.join(file), prefix.join(file))
                .unwrap_or_else(|e| panic!("copying tests/cli/{file}: {e}"));
        }
        npm(&prefix, &["ci", "--no-audit", "--no-fund"]);
    }
    bin
}

fn npm(prefix: &Path, args: &[&str]) {
    let status = Command::new("npm")
        .args(args)
        .current_dir(prefix)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("npm could not start: {e}"));
    assert!(
        status.success(),
        "npm {} failed with {status}",
        args.join(" ")
    );
}

/// The folder holding the `writ` the tests built, for PATH: a user has
/// `writ` on PATH, and `writ config` writes `writ` as the command.
pub fn writ_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_writ"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Whether `writ config claude --write` still leaves steps to the user
/// that the harness does by hand: the hooks in `.claude/settings.json`
/// and the approval of the project's MCP server. When `writ config` does
/// both (SPEC §14: it installs the client's hooks beside its MCP entry and
/// approves where the client documents a file for it), this is false and
/// the suite checks `writ config` wrote them.
pub const COMPLETE_CONFIG_BY_HAND: bool = true;

/// Sets `root` up for Claude Code with writ, as a user does: `writ config
/// claude --write` (MCP entry, hooks, approval). The one place the suite
/// configures writ.
pub fn configure_writ(root: &Path, state: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["config", "claude"])
        .arg(root)
        .arg("--write")
        .env("XDG_STATE_HOME", state)
        .output()
        .unwrap_or_else(|e| panic!("writ config could not start: {e}"));
    assert!(
        out.status.success(),
        "writ config claude --write failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let settings_path = root.join(".claude/settings.json");
    let mut settings: Value = std::fs::read_to_string(&settings_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    if COMPLETE_CONFIG_BY_HAND {
        // docs/AGENTS.md's hooks, and the approval Claude Code asks of a
        // user for a project's `.mcp.json` servers.
        let hook = json!([{"type": "command", "command": "writ hook claude-code"}]);
        if settings.get("hooks").is_none() {
            settings["hooks"] = json!({
                "PreToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit", "hooks": hook}],
                "PostToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit|Read", "hooks": hook}],
                "UserPromptSubmit": [{"hooks": hook}],
            });
        }
        if settings.get("enabledMcpjsonServers").is_none() {
            settings["enabledMcpjsonServers"] = json!(["writ"]);
        }
        std::fs::create_dir_all(root.join(".claude")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&settings_path, settings.to_string()).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(
        settings.get("hooks").is_some(),
        "writ config claude --write installed no hooks: {settings}"
    );
    let approved = settings["enabledMcpjsonServers"]
        .as_array()
        .is_some_and(|a| a.iter().any(|s| s == "writ"))
        || settings["enableAllProjectMcpServers"] == true;
    assert!(
        approved,
        "writ config claude --write left the MCP server unapproved: {settings}"
    );
}

/// One headless Claude Code process.
pub struct Session {
    child: Child,
    started: Instant,
    out: PathBuf,
    err: PathBuf,
}

/// How a session ended.
pub struct Ended {
    /// Its exit status, None when it outlived the deadline and was killed.
    pub status: Option<std::process::ExitStatus>,
    /// Its stream-json output.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl Ended {
    /// The Claude Code session id its stream's `init` event names.
    pub fn session_id(&self) -> Option<String> {
        self.stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["type"] == "system" && event["subtype"] == "init")
            .and_then(|event| event["session_id"].as_str().map(str::to_string))
    }
}

impl Session {
    /// Starts `claude -p PROMPT` in `root`, with its own home under `home`,
    /// talking to the model at `model_url`; `XDG_STATE_HOME` is `state`
    /// (where writ's hook keeps its state).
    pub fn start(
        claude: &Path,
        root: &Path,
        home: &Path,
        state: &Path,
        model_url: &str,
        prompt: &str,
    ) -> Session {
        std::fs::create_dir_all(home).unwrap_or_else(|e| panic!("{}: {e}", home.display()));
        let path = format!(
            "{}:{}",
            writ_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = home.join("stdout.jsonl");
        let err = home.join("stderr.txt");
        let child = Command::new(claude)
            .args(["-p", prompt, "--output-format", "stream-json", "--verbose"])
            .arg("--dangerously-skip-permissions")
            .current_dir(root)
            .env("HOME", home)
            .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
            .env("XDG_STATE_HOME", state)
            .env("PATH", path)
            .env("ANTHROPIC_BASE_URL", model_url)
            .env("ANTHROPIC_API_KEY", "sk-scripted-model")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            // Bypassing permissions is refused to root unless the CLI is
            // told it runs in a sandbox (CI containers run as root).
            .env("IS_SANDBOX", "1")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("CLAUDECODE")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap_or_else(|e| panic!("{e}")))
            .stderr(std::fs::File::create(&err).unwrap_or_else(|e| panic!("{e}")))
            .spawn()
            .unwrap_or_else(|e| panic!("{} could not start: {e}", claude.display()));
        Session {
            child,
            started: Instant::now(),
            out,
            err,
        }
    }

    /// Waits for the session to end, killing it after `deadline` from its
    /// start.
    pub fn finish(mut self, deadline: Duration) -> Ended {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if self.started.elapsed() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        Ended {
            status,
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err).unwrap_or_default(),
        }
    }
}
