//! What every real coding CLI's session shares: the `writ` the tests built
//! first on its PATH, `writ config CLIENT --write` as a user runs it, and
//! one headless process with its output in files, waited for with a
//! deadline. Each CLI's own set-up (its flags, its home, its provider
//! variables) builds the command: tests/common/claude_code.rs and
//! other_clis.rs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The folder holding the `writ` the tests built, first on every CLI's
/// PATH: a user has `writ` on PATH, and `writ config` writes `writ` as the
/// command.
pub fn writ_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_writ"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `PATH` with [`writ_dir`] first.
pub fn path_with_writ() -> String {
    format!(
        "{}:{}",
        writ_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `writ config CLIENT ROOT --write` as a user runs it, with `writ` on
/// PATH (so the configuration runs `writ`) and `envs` (Codex's
/// `CODEX_HOME`, the state folder): the one way the suites configure writ
/// for a CLI. Returns what it printed.
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
    /// Starts `command` (a CLI set up to run headless) with no input and
    /// its output in `stdout.txt` and `stderr.txt` under `home`.
    pub fn spawn(mut command: Command, home: &Path) -> Session {
        std::fs::create_dir_all(home).unwrap_or_else(|e| panic!("{}: {e}", home.display()));
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
