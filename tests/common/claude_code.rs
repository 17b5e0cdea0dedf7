//! The real Claude Code CLI for the real-CLI suite: installed from
//! tests/cli's lockfile into a folder under target/ (reused; see
//! tests/common/cli_install.rs), run headless against a scripted model, one private home per run, and
//! set up with writ the way a user does it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The `claude` executable: the lockfile's version, or the newest on npm
/// when `WRIT_CLI_LATEST=1`.
pub fn claude_bin() -> PathBuf {
    super::cli_install::cli_bin("claude", "@anthropic-ai/claude-code")
}

/// The folder holding the `writ` the tests built, for PATH: a user has
/// `writ` on PATH, and `writ config` writes `writ` as the command.
pub fn writ_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_writ"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

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
    let settings: Value = std::fs::read_to_string(&settings_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
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
