//! The run's process tree: one process group, stopped and reaped as a whole.
//!
//! # Implementation details
//!
//! Hand-written rather than a process-management crate: the order of
//! signalling the group and reaping the leader is the safety argument below,
//! and no crate we know exposes it.
//!
//! The leader is spawned with `std::process::Command` in a new process group
//! (`process_group(0)`: its pgid is its pid). The standard library's `Child`
//! rather than tokio's is deliberate: tokio reaps its children on its own
//! schedule (and reaps dropped ones from an orphan queue), while the group
//! must be signalled *before* the leader is reaped. A pid — and so a process
//! group id — cannot be reused while an unreaped zombie holds it, so as long
//! as the leader is not reaped, `kill(-pgid, ..)` reaches this run's group
//! and nobody else's. Every group signal below is sent from a [`Tree`]
//! whose leader is not yet reaped, and nothing reaps it except [`Tree`].
//!
//! The leader's exit is observed without reaping it: a watcher thread blocks
//! in `waitid(P_PID, pid, WEXITED | WNOWAIT)` and then fires a oneshot. The
//! thread is started before the child, so a failure to start it is a spawn
//! failure with nothing running.
//!
//! Stopping ([`Stopper`]): SIGTERM to the group; poll until no member is
//! alive or the grace passes; SIGKILL to the group; poll (bounded) until no
//! member is alive; only then reap the leader. "Alive" ignores zombies: the
//! unreaped leader is one, and orphans of a group whose reaper (pid 1 of a
//! container, say) does not reap stay zombies forever. On Linux the members
//! are found in `/proc` (`/proc/<pid>/stat`: state and pgrp); elsewhere the
//! group cannot be inspected, so the whole grace is always waited.
//!
//! A process that leaves the group (`setsid`, `setpgid`) is not signalled.
//! That is a limit of process groups, documented in `docs/DELEGATION.md`.
//!
//! # Windows (designed, not implemented)
//!
//! The same guarantees map onto a Job Object: create the job with
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`; create the leader with
//! `CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP`; assign it to the job; only
//! then resume its main thread — so no descendant can be born outside the
//! job. The leader's exit is its process handle becoming signalled (the
//! handle keeps the pid from being reused, like the zombie above). Stopping
//! is `GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT)` to the group as the
//! polite signal, the grace, then `TerminateJobObject`; "alive" is
//! `JOBOBJECT_BASIC_ACCOUNTING_INFORMATION::ActiveProcesses`. A process
//! can only leave the job if the job allows breakaway, which this job does
//! not. None of this is compiled today: on Windows `Actor::delegate`
//! returns `Error::Spawn`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

/// How often a stopping group is checked.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// How long members may take to die after SIGKILL before the stop gives up
/// waiting for them (a process in uninterruptible sleep can take that long).
pub(crate) const KILL_WAIT: Duration = Duration::from_secs(5);

/// A started run: its tree, its pipes, and the leader's exit notification.
pub(crate) struct Spawned {
    pub(crate) tree: Tree,
    pub(crate) stdin: tokio::process::ChildStdin,
    pub(crate) stdout: tokio::process::ChildStdout,
    pub(crate) stderr: tokio::process::ChildStderr,
    /// Fires when the leader has exited (it is then a zombie, not reaped).
    pub(crate) exited: tokio::sync::oneshot::Receiver<()>,
}

/// Starts `program` (an absolute path; `arg0` is what it is told it is
/// called) in a new process group with exactly `env`, in `cwd`, with piped
/// standard streams. Needs a tokio runtime with I/O enabled.
pub(crate) fn spawn(
    program: &Path,
    arg0: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> io::Result<Spawned> {
    spawn_with(program, arg0, args, env, cwd, |_| {})
}

/// [`spawn`], with `prepare` given the command last (a `pre_exec` hook, say).
pub(crate) fn spawn_with(
    program: &Path,
    arg0: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    prepare: impl FnOnce(&mut Command),
) -> io::Result<Spawned> {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel::<Pid>();
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("writ-run-watch".into())
        .spawn(move || watch(pid_rx, exit_tx))?;

    let mut cmd = Command::new(program);
    cmd.arg0(arg0)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    prepare(&mut cmd);
    // On failure `pid_tx` drops and the watcher ends without waiting.
    let mut child = cmd.spawn()?;
    let pid = Pid::from_child(&child);
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let tree = Tree {
        child,
        pgid: pid,
        status: None,
    };
    // From here on, an early return drops `tree`, which kills and reaps.
    let _ = pid_tx.send(pid);
    let missing = || io::Error::other("a standard stream of the child was not piped");
    Ok(Spawned {
        stdin: tokio::process::ChildStdin::from_std(stdin.ok_or_else(missing)?)?,
        stdout: tokio::process::ChildStdout::from_std(stdout.ok_or_else(missing)?)?,
        stderr: tokio::process::ChildStderr::from_std(stderr.ok_or_else(missing)?)?,
        exited: exit_rx,
        tree,
    })
}

/// Waits, without reaping, for the leader to exit.
fn watch(pid: std::sync::mpsc::Receiver<Pid>, exited: tokio::sync::oneshot::Sender<()>) {
    let Ok(pid) = pid.recv() else {
        return; // the spawn failed
    };
    // Returns once the leader has exited (left a zombie) or is no longer our
    // child (already reaped by a stop): either way it has ended.
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    while let Err(Errno::INTR) = rustix::process::waitid(WaitId::Pid(pid), options) {}
    let _ = exited.send(());
}

/// The leader and its process group. Dropping an unreaped tree kills the
/// group at once (SIGKILL) and reaps the leader, blocking briefly.
#[derive(Debug)]
pub(crate) struct Tree {
    child: Child,
    pgid: Pid,
    /// The leader's status once reaped. While `None`, the pgid is safe to signal.
    status: Option<ExitStatus>,
}

impl Tree {
    /// The leader's pid, which is also the group id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Signals the whole group, unless the leader is reaped (then the group
    /// id could name someone else's group; nothing is sent).
    pub(crate) fn signal(&self, signal: Signal) {
        if self.status.is_none() {
            // ESRCH (no member left) is fine; nothing else can fail for our own group.
            let _ = rustix::process::kill_process_group(self.pgid, signal);
        }
    }

    /// Reaps the leader if it has exited. Only call once the group is stopped.
    pub(crate) fn try_reap(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// Reaps the leader, blocking until it exits. Only call once the group
    /// is stopped.
    pub(crate) fn reap_blocking(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(status) = self.child.wait() {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// Hands an unreaped leader (stuck, for example, in uninterruptible
    /// sleep after SIGKILL) to a thread that reaps it when it exits.
    pub(crate) fn reap_later(mut self) {
        if self.status.is_some() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("writ-run-reap".into())
            .spawn(move || {
                self.reap_blocking();
            });
        // If no thread can be made, the closure (and the tree) was dropped:
        // its Drop kills and reaps inline.
        drop(spawned);
    }

    /// Stops the group (see [`Stopper`]) and reaps the leader, blocking.
    pub(crate) fn stop_blocking(&mut self, grace: Duration) -> Stopper {
        let mut stopper = Stopper::new(grace);
        while let Some(wait) = stopper.step(self, Instant::now()) {
            std::thread::sleep(wait);
        }
        self.reap_blocking();
        stopper
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.signal(Signal::KILL);
            self.reap_blocking();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Term { until: Instant },
    Kill { until: Instant },
    Done,
}

/// SIGTERM, grace, SIGKILL, as a state machine the async runner and a
/// blocking thread drive alike: [`Stopper::step`] says how long to wait
/// before the next step, or `None` once the group is stopped.
#[derive(Debug)]
pub(crate) struct Stopper {
    grace: Duration,
    phase: Phase,
    /// SIGKILL was needed.
    pub(crate) killed: bool,
    /// Members were still alive [`KILL_WAIT`] after SIGKILL.
    pub(crate) survivors: bool,
}

impl Stopper {
    pub(crate) fn new(grace: Duration) -> Self {
        Stopper {
            grace,
            phase: Phase::Start,
            killed: false,
            survivors: false,
        }
    }

    pub(crate) fn step(&mut self, tree: &Tree, now: Instant) -> Option<Duration> {
        loop {
            match self.phase {
                Phase::Start => {
                    tree.signal(Signal::TERM);
                    self.phase = Phase::Term {
                        until: now + self.grace,
                    };
                }
                Phase::Term { until } => {
                    if group_alive(tree.pgid) == Some(false) {
                        self.phase = Phase::Done;
                    } else if now >= until {
                        tree.signal(Signal::KILL);
                        self.killed = true;
                        self.phase = Phase::Kill {
                            until: now + KILL_WAIT,
                        };
                    } else {
                        return Some(POLL.min(until - now));
                    }
                }
                Phase::Kill { until } => {
                    if group_alive(tree.pgid) != Some(true) {
                        self.phase = Phase::Done;
                    } else if now >= until {
                        self.survivors = true;
                        self.phase = Phase::Done;
                    } else {
                        // Again, for members forked since the last signal.
                        tree.signal(Signal::KILL);
                        return Some(POLL);
                    }
                }
                Phase::Done => return None,
            }
        }
    }
}

/// Whether any member of the group is alive, zombies not counted; `None`
/// when the platform gives no way to tell.
#[cfg(target_os = "linux")]
pub(crate) fn group_alive(pgid: Pid) -> Option<bool> {
    let pgid = pgid.as_raw_nonzero().get();
    let proc = std::fs::read_dir("/proc").ok()?;
    for entry in proc.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Some((state, pgrp)) = stat_of(&format!("/proc/{pid}/stat")) else {
            continue; // gone since the listing
        };
        if pgrp != pgid {
            continue;
        }
        if !is_dead(state) || threads_alive(pid) {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn group_alive(_pgid: Pid) -> Option<bool> {
    None
}

#[cfg(target_os = "linux")]
fn is_dead(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// A process whose main thread has exited shows as a zombie while its other
/// threads still run.
#[cfg(target_os = "linux")]
fn threads_alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        let path = task.path().join("stat");
        stat_of(&path.to_string_lossy()).is_some_and(|(state, _)| !is_dead(state))
    })
}

/// The state letter and process group of `/proc/<pid>/stat`. The command
/// name may hold spaces and parentheses, so fields are read after the last `)`.
#[cfg(target_os = "linux")]
fn stat_of(path: &str) -> Option<(u8, i32)> {
    let stat = std::fs::read(path).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat");
        std::fs::write(&path, "42 (a) b (c)) S 1 4242 4242 0 -1").unwrap();
        assert_eq!(stat_of(&path.to_string_lossy()), Some((b'S', 4242)));
    }

    #[test]
    fn a_stopped_group_is_not_alive_and_its_leader_is_reaped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let sh = Path::new("/bin/sh");
        let args = ["-c".into(), "sleep 30 & sleep 30".into()];
        let mut spawned = spawn(sh, OsStr::new("sh"), &args, &[], Path::new("/")).unwrap();
        assert_eq!(group_alive(spawned.tree.pgid), Some(true));
        let stopper = spawned.tree.stop_blocking(Duration::from_secs(5));
        assert!(!stopper.killed, "sh and sleep die on SIGTERM");
        assert_eq!(group_alive(spawned.tree.pgid), Some(false));
        let pid = spawned.tree.pid();
        assert!(spawned.tree.status.is_some());
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "the leader is reaped, not a zombie"
        );
    }
}
