//! A `writ serve --etcd` process of a test's own: started on a session of
//! etcd members, found by its discovery file (polled, with a deadline),
//! killed when dropped. Shared by tests/etcd.rs and tests/etcd_faults.rs.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

/// The session token every test server is started with.
pub const SESSION_TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A `writ serve --etcd` process; SIGKILLed on drop.
pub struct ServeProcess {
    child: std::process::Child,
    pub url: String,
    state: tempfile::TempDir,
}

impl ServeProcess {
    /// Starts a server of session `session` for `root` on the etcd members
    /// at `endpoints` (comma-separated), with a lease TTL of `ttl` seconds,
    /// and waits for its discovery file to name its URL.
    pub fn start_at(endpoints: &str, root: &Path, session: &str, ttl: &str) -> ServeProcess {
        let state = tempfile::tempdir().unwrap_or_else(|e| panic!("a state folder: {e}"));
        let token_file = state.path().join("token");
        std::fs::write(&token_file, SESSION_TOKEN).unwrap_or_else(|e| panic!("{e}"));
        let log =
            std::fs::File::create(state.path().join("serve.log")).unwrap_or_else(|e| panic!("{e}"));
        let stdout = log.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_writ"))
            .arg("serve")
            .arg(root)
            .args(["--etcd", endpoints, "--session", session])
            .args(["--lease-ttl", ttl, "--no-history"])
            .arg("--token-file")
            .arg(&token_file)
            .arg("--state-dir")
            .arg(state.path())
            .stdin(std::process::Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("writ serve: {e}"));
        let mut server = ServeProcess {
            child,
            url: String::new(),
            state,
        };
        let discovery = server.state.path().join("serve.json");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = std::fs::read_to_string(&discovery)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
            if let Some(url) = found.as_ref().and_then(|f| f["url"].as_str()) {
                server.url = url.to_string();
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let log = std::fs::read_to_string(server.state.path().join("serve.log"));
                panic!("writ serve exited ({status}): {}", log.unwrap_or_default());
            }
            assert!(
                Instant::now() < deadline,
                "writ serve did not start in 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, …) to the server.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap_or_else(|e| panic!("kill: {e}"));
    }

    /// SIGKILL, and wait until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
