//! The coding CLIs beside Claude Code for the real-CLI suite (Gemini CLI,
//! Codex CLI, opencode): installed from tests/cli's lockfile
//! (tests/common/cli_install.rs), each run headless against the
//! scripted model with a private home and every call home switched off,
//! and writ configured for each the way a user does it, by `writ config
//! CLIENT --write`.

use std::path::Path;
use std::process::Command;

use serde_json::json;

pub use super::cli_session::{Ended, Session, path_with_writ, writ_config};

/// Sets `root` up for Gemini CLI with writ: `writ config gemini --write`
/// (its MCP server and hooks in `ROOT/.gemini/settings.json`).
pub fn configure_gemini(root: &Path) {
    let said = writ_config("gemini", root, &[]);
    assert!(said.contains("trust"), "no trust step printed: {said}");
}

impl Session {
    /// Starts `gemini -p PROMPT` in `root` with its own home under `home`,
    /// talking to the scripted model at `model_url`.
    pub fn gemini(
        gemini: &Path,
        root: &Path,
        home: &Path,
        state: &Path,
        model_url: &str,
        prompt: &str,
    ) -> Session {
        let config = home.join(".gemini");
        std::fs::create_dir_all(&config).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
        let settings = json!({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        });
        std::fs::write(config.join("settings.json"), settings.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut command = Command::new(gemini);
        command
            .args([
                "-p",
                prompt,
                "--yolo",
                "--output-format",
                "json",
                "--skip-trust",
            ])
            .current_dir(root)
            .env("HOME", home)
            .env("XDG_STATE_HOME", state)
            .env("PATH", path_with_writ())
            .env("GEMINI_API_KEY", "scripted-model")
            .env("GOOGLE_GEMINI_BASE_URL", model_url)
            // `--skip-trust` is read after the workspace settings (and
            // their hooks) were dropped as untrusted; the variable is not.
            .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
            .env("GEMINI_TELEMETRY_ENABLED", "false")
            .env("GEMINI_CLI_NO_RELAUNCH", "true")
            .env("NO_BROWSER", "1")
            .env_remove("GOOGLE_API_KEY")
            .env_remove("GOOGLE_CLOUD_PROJECT")
            .env_remove("GOOGLE_GENAI_USE_VERTEXAI");
        Session::spawn(command, home)
    }
}

/// The model name the scripted Codex sessions use: one Codex offers
/// `apply_patch` to.
pub const CODEX_MODEL: &str = "gpt-5.5";

/// How a Codex session is set up: with writ (`writ config codex --write`)
/// or not, and the model it names.
pub struct CodexSetup {
    /// Whether writ is configured.
    pub hooks: bool,
    /// The model's name.
    pub model: &'static str,
}

/// A model name Codex has no catalog entry for: it offers such a model no
/// `apply_patch` and no `tool_search`, so MCP tools are its direct tools.
pub const CODEX_PLAIN_MODEL: &str = "scripted-plain";

impl Session {
    /// Starts `codex exec PROMPT` in `root` with its own `CODEX_HOME` under
    /// `home`, talking to the scripted Responses API at `model_url`; with
    /// `hooks`, writ is configured by `writ config codex --write` (its MCP
    /// server and hooks; a new hook runs once the user trusts it, so the
    /// headless run passes `--dangerously-bypass-hook-trust`).
    pub fn codex(
        codex: &Path,
        root: &Path,
        home: &Path,
        state: &Path,
        model_url: &str,
        prompt: &str,
        setup: CodexSetup,
    ) -> Session {
        let CodexSetup { hooks, model } = setup;
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home)
            .unwrap_or_else(|e| panic!("{}: {e}", codex_home.display()));
        let config = format!(
            r#"model = "{model}"
model_provider = "scripted"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.scripted]
name = "scripted"
base_url = "{model_url}/v1"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"
"#
        );
        std::fs::write(codex_home.join("config.toml"), config).unwrap_or_else(|e| panic!("{e}"));
        if hooks {
            let said = writ_config("codex", root, &[("CODEX_HOME", &codex_home)]);
            assert!(said.contains("trust"), "no trust step printed: {said}");
        }
        let mut command = Command::new(codex);
        command.args([
            "exec",
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
        ]);
        if hooks {
            command.arg("--dangerously-bypass-hook-trust");
        }
        command
            .arg(prompt)
            .current_dir(root)
            .env("HOME", home)
            .env("CODEX_HOME", &codex_home)
            .env("XDG_STATE_HOME", state)
            .env("PATH", path_with_writ())
            .env("SCRIPTED_API_KEY", "scripted-model")
            .env("NO_UPDATE_NOTIFIER", "1")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("CODEX_SANDBOX");
        Session::spawn(command, home)
    }
}

impl Session {
    /// Starts `opencode run PROMPT` in `root` with its own home under
    /// `home`, talking to the scripted Chat Completions API at `model_url`
    /// through a provider on `@ai-sdk/openai-compatible`.
    pub fn opencode(
        opencode: &Path,
        root: &Path,
        home: &Path,
        state: &Path,
        model_url: &str,
        prompt: &str,
    ) -> Session {
        let config_dir = home.join(".config/opencode");
        std::fs::create_dir_all(&config_dir)
            .unwrap_or_else(|e| panic!("{}: {e}", config_dir.display()));
        let config = json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            // Headless runs reject every permission prompt.
            "permission": {"edit": "allow", "bash": "allow", "external_directory": "allow"},
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "scripted",
                "options": {"baseURL": format!("{model_url}/v1"), "apiKey": "scripted-model"},
                "models": {"scripted": {"name": "scripted", "tool_call": true}}
            }}
        });
        std::fs::write(config_dir.join("opencode.json"), config.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut command = Command::new(opencode);
        command
            .args(["run", "--format", "json", "-m", "scripted/scripted", prompt])
            .current_dir(root)
            // opencode 1.18.33's `run` serves its session in `$PWD`, not in
            // the folder it was started in: a stale PWD (the test's own)
            // would put the session, and its plugins, elsewhere.
            .env("PWD", root)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_STATE_HOME", state)
            .env("PATH", path_with_writ())
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
            .env("OPENCODE_DISABLE_SHARE", "1")
            .env_remove("OPENAI_API_KEY");
        Session::spawn(command, home)
    }
}

/// Sets `root` up for opencode with writ: `writ config opencode --write`
/// (its MCP server in `opencode.json`, writ's plugin in
/// `.opencode/plugin/writ.js`).
pub fn configure_opencode(root: &Path) {
    writ_config("opencode", root, &[]);
    assert!(
        root.join(".opencode/plugin/writ.js").is_file(),
        "writ config opencode --write put no plugin in .opencode/plugin"
    );
}
