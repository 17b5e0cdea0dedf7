//! The bubblewrap sandbox of a delegated run (SPEC §9, **Sandbox**).
//!
//! # Implementation details
//!
//! writ builds the `bwrap` command line itself (bwrap's command line is a
//! stable interface; namespaces are not hand-rolled here):
//!
//! - `--unshare-pid` and `--proc /proc`: the child's own PID namespace and
//!   `/proc`, so no other process's `/proc/<pid>/environ` is visible, and
//!   when the namespace's first process (bwrap's own init) exits, the
//!   kernel kills every process left in it — a `setsid` escapee included.
//! - `--die-with-parent`: bwrap's init dies when the runner's direct child
//!   (the outer bwrap, the process group leader) does.
//! - `--ro-bind / /`: the host read-only; then a private `--tmpfs /tmp`,
//!   `--dev /dev`; then the grant root read-only again (it may live under
//!   `/tmp`); then `--bind` for the run folder, the project folders and
//!   `Run::writable` folders — parents before children, so a nested bind
//!   stays visible.
//! - `--unshare-net` only for `Run::network(false)`.
//!
//! The child stays in the runner's process group (no `--new-session`: its
//! stdin is a pipe, not a terminal), so SIGTERM still reaches every member
//! first and the grace works as without the sandbox.
//!
//! Whether bwrap works is probed once per process by running the same kind
//! of command line with `true`: bwrap can be installed and still refused
//! by the kernel (no user namespaces, a seccomp policy).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// What to run instead of the program: bwrap and its arguments.
pub(crate) struct Wrapped {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
}

/// The one line telling a person what to install.
pub(crate) const INSTALL: &str = "install bubblewrap (the `bubblewrap` package, command `bwrap`)";

/// A working `bwrap`, or why there is none (probed once per process).
pub(crate) fn bwrap() -> Result<&'static Path, &'static str> {
    static PROBE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PROBE
        .get_or_init(probe)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

fn probe() -> Result<PathBuf, String> {
    let path_var = std::env::var_os("PATH");
    let program = super::env::find_program(
        std::ffi::OsStr::new("bwrap"),
        path_var.as_deref(),
        Path::new("/"),
    )
    .map_err(|_| format!("bwrap was not found on PATH; {INSTALL}"))?;
    let output = Command::new(&program)
        .args([
            "--die-with-parent",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--",
            "true",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("bwrap could not be started ({e}); {INSTALL}"))?;
    if output.status.success() {
        Ok(program)
    } else {
        let why = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "bwrap is installed but cannot create a sandbox here ({}): it needs user or PID namespaces",
            why.trim()
        ))
    }
}

/// The signal behind a sandboxed run's exit status: bwrap exits with
/// 128 + N when signal N ended the program (as shells do), so a status
/// past 128 that names a signal is read as that signal.
pub(crate) fn signal_of_exit_code(code: i32) -> Option<i32> {
    let signal = code.checked_sub(128)?;
    (1..=64).contains(&signal).then_some(signal)
}

/// The bwrap command line running `program args` in `run_dir`, with the
/// host read-only except `writable`.
pub(crate) fn wrap(
    bwrap: &Path,
    root: &Path,
    run_dir: &Path,
    writable: &[PathBuf],
    network: bool,
    program: &Path,
    args: &[OsString],
) -> Wrapped {
    let mut out: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-pid",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    out.push(root.into());
    out.push(root.into());
    let mut binds: Vec<&Path> = std::iter::once(run_dir)
        .chain(writable.iter().map(PathBuf::as_path))
        .collect();
    // Parents before children: a later bind over a folder hides earlier
    // binds inside it.
    binds.sort_by_key(|p| p.components().count());
    binds.dedup();
    for path in binds {
        out.push("--bind".into());
        out.push(path.into());
        out.push(path.into());
    }
    if !network {
        out.push("--unshare-net".into());
    }
    out.push("--chdir".into());
    out.push(run_dir.into());
    out.push("--".into());
    out.push(program.into());
    out.extend(args.iter().cloned());
    Wrapped {
        program: bwrap.to_path_buf(),
        args: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_go_parents_first_and_the_network_is_kept_by_default() {
        let w = wrap(
            Path::new("/usr/bin/bwrap"),
            Path::new("/ws"),
            Path::new("/ws/.writ-runs/r1"),
            &[PathBuf::from("/ws/src/deep"), PathBuf::from("/ws/src")],
            true,
            Path::new("/bin/sh"),
            &["-c".into(), "true".into()],
        );
        let args: Vec<String> = w
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        let parent = joined.find("--bind /ws/src /ws/src").unwrap();
        let child = joined.find("--bind /ws/src/deep /ws/src/deep").unwrap();
        assert!(parent < child, "{joined}");
        assert!(!joined.contains("--unshare-net"));
        assert!(joined.ends_with("-- /bin/sh -c true"), "{joined}");
        let tmp = joined.find("--tmpfs /tmp").unwrap();
        let root = joined.find("--ro-bind /ws /ws").unwrap();
        assert!(tmp < root, "the root is bound over the private /tmp");
    }
}
