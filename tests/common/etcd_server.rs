//! An etcd of a test's own (Debian's `etcd-server`): free loopback ports, a
//! data folder of its own, `/health` polled with a deadline, killed when
//! dropped. Without an `etcd` on `PATH` it fails with one line saying what
//! to install. Shared by tests/etcd.rs and tests/conformance.rs.
#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NEED_ETCD: &str = "these tests need etcd: apt-get install etcd-server";

/// An etcd of this test's own; killed and its data removed on drop.
pub struct Etcd {
    child: Option<Child>,
    pub endpoint: String,
    client: u16,
    peer: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The body of `GET path` from the member on `port`; empty if it did not
/// answer.
fn get(port: u16, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

fn healthy(port: u16) -> bool {
    get(port, "/health").contains("\"health\":\"true\"")
}

/// The command line of one etcd member on loopback, logging to `log`.
fn member_command(
    name: &str,
    data: &std::path::Path,
    (client, peer): (u16, u16),
    initial_cluster: &str,
    state: &str,
    log: std::fs::File,
) -> Command {
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut command = Command::new("etcd");
    command
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg(format!("--initial-cluster-state={state}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    command
}

/// Whether the member answering on `port` is its cluster's leader.
fn leads(port: u16) -> bool {
    get(port, "/metrics")
        .lines()
        .any(|l| l == "etcd_server_is_leader 1")
}

impl Etcd {
    pub fn start() -> Etcd {
        Etcd::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Etcd {
        if Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .output()
            .is_err()
        {
            panic!("{NEED_ETCD}");
        }
        // A free port is free only when it is looked at: another test (they
        // run in parallel, each with servers on port 0) may take it before
        // etcd binds it. Such a start is tried again on other ports.
        let mut attempts = 0;
        loop {
            let (client, peer) = (free_port(), free_port());
            let mut etcd = Etcd {
                child: None,
                endpoint: format!("http://127.0.0.1:{client}"),
                client,
                peer,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                dir: tempfile::tempdir().unwrap(),
            };
            match etcd.try_run("new") {
                Ok(()) => return etcd,
                Err(log) if log.contains("address already in use") && attempts < 5 => {
                    attempts += 1;
                }
                Err(log) => panic!("etcd exited before it was healthy:\n{log}"),
            }
        }
    }

    fn run(&mut self, state: &str) {
        if let Err(log) = self.try_run(state) {
            panic!("etcd exited before it was healthy:\n{log}");
        }
    }

    /// Starts etcd and waits until it is healthy; its log if it exited first.
    fn try_run(&mut self, state: &str) -> Result<(), String> {
        let dir = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .unwrap();
        let peer_url = format!("http://127.0.0.1:{}", self.peer);
        let mut command = member_command(
            "writ-test",
            &dir.join("data"),
            (self.client, self.peer),
            &format!("writ-test={peer_url}"),
            state,
            log,
        );
        command.args(&self.extra);
        let mut child = command.spawn().unwrap_or_else(|_| panic!("{NEED_ETCD}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(self.client) {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
                return Err(format!("({status})\n{log}"));
            }
            assert!(
                Instant::now() < deadline,
                "etcd was not healthy within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The etcd that answered must be this one, not one of another test
        // that took the port while this one failed to bind it.
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
            return Err(format!("({status})\n{log}"));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Kills etcd (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data (after [`Etcd::kill`]).
    pub fn restart(&mut self) {
        self.kill();
        self.run("existing");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A cluster of etcd members of this test's own on loopback (one data
/// folder each), for faults that only a cluster has: a member down while
/// the quorum answers, a member paused. Every member killed on drop.
pub struct Cluster {
    members: Vec<Member>,
    initial: String,
    dir: tempfile::TempDir,
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

impl Cluster {
    /// Starts `n` members at once (none is healthy before a quorum is up)
    /// and waits until each answers `/health`.
    pub fn start(n: usize) -> Cluster {
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            members,
            initial,
            dir: tempfile::tempdir().unwrap(),
        };
        for i in 0..n {
            cluster.spawn(i, "new");
        }
        for i in 0..n {
            cluster.until_healthy(i);
        }
        cluster
    }

    /// Every member's client URL, comma-separated (as `--etcd` takes them).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize, state: &str) {
        if Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .output()
            .is_err()
        {
            panic!("{NEED_ETCD}");
        }
        let member = &self.members[i];
        let data = self.dir.path().join(&member.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", member.name)))
            .unwrap();
        let child = member_command(
            &member.name,
            &data,
            (member.client, member.peer),
            &self.initial,
            state,
            log,
        )
        .arg("--initial-cluster-token=writ-test-cluster")
        .spawn()
        .unwrap_or_else(|_| panic!("{NEED_ETCD}"));
        self.members[i].child = Some(child);
    }

    fn until_healthy(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(self.members[i].client) {
            let name = self.members[i].name.clone();
            if let Some(Ok(Some(status))) = self.members[i].child.as_mut().map(Child::try_wait) {
                let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
                    .unwrap_or_default();
                panic!("etcd member {name} exited ({status}):\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "etcd member {name} was not healthy within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A member that is not the leader (etcd's `etcd_server_is_leader`
    /// metric), waiting for a leader to be elected.
    pub fn follower(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leading: Vec<bool> = self.members.iter().map(|m| leads(m.client)).collect();
            if leading.iter().any(|&l| l) {
                if let Some(i) = leading.iter().position(|&l| !l) {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no etcd leader within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The member that leads, waiting for one to be elected (etcd's
    /// `etcd_server_is_leader` metric; a stopped member does not answer).
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = self.members.iter().position(|m| leads(m.client)) {
                return i;
            }
            assert!(Instant::now() < deadline, "no etcd leader within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills member `i` (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data (after [`Cluster::kill`]).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i, "existing");
        self.until_healthy(i);
    }

    /// Sends member `i` a signal by name (`STOP`, `CONT`).
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.members[i].child.as_ref().expect("a live member").id();
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGKILL ends a stopped member too.
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// Runs `f` with a client of the etcd at `endpoint`, on a runtime of its
/// own: for a test that looks at etcd's keys and leases itself.
pub fn with_etcd<T>(endpoint: &str, f: impl AsyncFnOnce(&mut etcd_client::Client) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    runtime.block_on(async {
        let mut client = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap_or_else(|e| panic!("etcd at {endpoint}: {e}"));
        f(&mut client).await
    })
}
