//! The real Claude Code CLI for the real-CLI suite: installed from
//! tests/cli's lockfile into a folder under target/ (reused; see
//! tests/common/cli_install.rs), run headless against a scripted model, one private home per run, and
//! set up with writ the way a user does it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

pub use super::cli_session::{Ended, Session, path_with_writ, writ_config};

/// The `claude` executable: the lockfile's version, or the newest on npm
/// when `WRIT_CLI_LATEST=1`.
pub fn claude_bin() -> PathBuf {
    super::cli_install::cli_bin("claude", "@anthropic-ai/claude-code")
}

/// Sets `root` up for Claude Code with writ, as a user does: `writ config
/// claude --write` (MCP entry, hooks, approval). The one place the suite
/// configures writ.
pub fn configure_writ(root: &Path, state: &Path) {
    writ_config("claude", root, &[("XDG_STATE_HOME", state)]);
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
        let mut command = Command::new(claude);
        command
            .args(["-p", prompt, "--output-format", "stream-json", "--verbose"])
            .arg("--dangerously-skip-permissions")
            .current_dir(root)
            .env("HOME", home)
            .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
            .env("XDG_STATE_HOME", state)
            .env("PATH", path_with_writ())
            .env("ANTHROPIC_BASE_URL", model_url)
            .env("ANTHROPIC_API_KEY", "sk-scripted-model")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            // Bypassing permissions is refused to root unless the CLI is
            // told it runs in a sandbox (CI containers run as root).
            .env("IS_SANDBOX", "1")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("CLAUDECODE");
        Session::spawn(command, home)
    }
}
