//! A `writ serve` process for the tests that need the binary: started on
//! a root, its stderr in a file, stopped with SIGTERM.

// Each test binary that includes this file uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `writ serve` process whose stderr goes to a file.
pub struct Serve {
    pub child: Child,
    pub url: String,
    pub token: String,
    pub log: PathBuf,
}

impl Serve {
    /// With `--no-history`: what most suites judge is the table.
    pub fn start(root: &Path, state: &Path, args: &[&str], envs: &[(&str, &str)]) -> Serve {
        Serve::spawn(root, state, &[&["--no-history"], args].concat(), envs)
    }

    /// With history on, as a user runs it: the hooks snapshot what a write
    /// overwrites, and a run's commit merges against history's pre-images.
    pub fn start_with_history(root: &Path, state: &Path, args: &[&str]) -> Serve {
        Serve::spawn(root, state, args, &[])
    }

    /// The end of its log, for a failing assertion's message.
    pub fn log_tail(&self, max: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let cut = log.len().saturating_sub(max);
        let start = (cut..=log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(log.len());
        log[start..].to_string()
    }

    fn spawn(root: &Path, state: &Path, args: &[&str], envs: &[(&str, &str)]) -> Serve {
        std::fs::create_dir_all(state).unwrap();
        // One log per start: a restart on the same state keeps the first's.
        let log = (1..)
            .map(|n| state.join(format!("serve-{n}.log")))
            .find(|path| !path.exists())
            .unwrap();
        let stderr = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
            .arg("serve")
            .arg(root)
            .arg("--no-fsync")
            .args(args)
            .env("XDG_STATE_HOME", state)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let url = line
            .strip_prefix("writ serve: ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("writ serve said {line:?}"))
            .to_string();
        let found =
            writ::server::read_discovery(&writ::server::discovery_path(root, None)).unwrap();
        Serve {
            child,
            url,
            token: found.token,
            log,
        }
    }

    /// Sends SIGTERM and waits (with a deadline) for the process to end.
    pub fn terminate(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "writ serve ended with {status}");
                return;
            }
            assert!(Instant::now() < deadline, "writ serve did not stop");
            std::thread::yield_now();
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
