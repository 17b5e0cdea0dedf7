//! The coding CLIs beside Claude Code for the real-CLI suite (Gemini CLI,
//! Codex CLI, opencode): installed from tests/cli's lockfile
//! (tests/common/cli_install.rs), each run headless against the
//! scripted model with a private home and every call home switched off,
//! and writ configured for each the way a user does it, by `writ config
//! CLIENT --write`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// The folder holding the `writ` the tests built, first on every CLI's PATH.
pub fn writ_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_writ"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn path_with_writ() -> String {
    format!(
        "{}:{}",
        writ_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `writ config CLIENT ROOT --write` as a user runs it, with `writ` on
/// PATH (so the configuration runs `writ`) and `envs` (Codex's
/// `CODEX_HOME`): the one way the suite configures writ for a CLI. Returns
/// what it printed.
pub fn writ_config(client: &str, root: &Path, envs: &[(&str, &Path)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("config")
        .arg(client)
        .arg(root)
        .arg("--write")
        .current_dir(root)
        .env("PATH", path_with_writ())
        .env_remove("WRIT_LAUNCHER")
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("writ config could not start: {e}"));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "writ config {client} --write failed: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Sets `root` up for Gemini CLI with writ: `writ config gemini --write`
/// (its MCP server and hooks in `ROOT/.gemini/settings.json`).
pub fn configure_gemini(root: &Path) {
    let said = writ_config("gemini", root, &[]);
    assert!(said.contains("trust"), "no trust step printed: {said}");
}

/// One headless CLI process.
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
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl Session {
    fn spawn(mut command: Command, home: &Path) -> Session {
        let out = home.join("stdout.txt");
        let err = home.join("stderr.txt");
        let child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap_or_else(|e| panic!("{e}")))
            .stderr(std::fs::File::create(&err).unwrap_or_else(|e| panic!("{e}")))
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
        Session {
            child,
            started: Instant::now(),
            out,
            err,
        }
    }

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
