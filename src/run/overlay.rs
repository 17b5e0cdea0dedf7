//! The run's private copy-on-write view of the workspace (SPEC §17).
//!
//! # Implementation details
//!
//! The command runs in an unprivileged user, mount and PID namespace in
//! which:
//!
//! 1. the real workspace is bind-mounted at `<run>/stage` (so the real tree
//!    stays reachable after step 2 hides it);
//! 2. overlayfs is mounted over the workspace's own path: the real tree is
//!    the lower layer (read live), `<run>/upper` the upper layer that takes
//!    every write, create, delete (a whiteout) and rename;
//! 3. the pass-through folders (`.git`, ignored build folders) are bind
//!    mounted from `<run>/stage` back over the overlay, so writes there land
//!    in the real tree;
//! 4. the command is `exec`ed in its working folder, seen through the
//!    overlay, in a nested user namespace that maps the caller's own uid
//!    and gid (the mounts needed the namespace's root; the command does
//!    not). It is PID 1 of its PID namespace, so when the run is stopped
//!    nothing it started survives, `setsid` or not.
//!
//! These steps are system calls made between `fork` and `exec` (`ns.rs`),
//! not helper programs: util-linux's `unshare`, a `sh` script and a `mount`
//! per mount cost about 10 ms a run, ten times a plain `sh -c true`.
//!
//! Why not bubblewrap, which §9 uses: bwrap gained `--overlay` in 0.9, and
//! the distributions we target ship 0.8 (Debian 12); and bwrap's `--ro-bind
//! / /` sandbox is the opposite of what a shell command needs (it runs as it
//! would, caches and `/tmp` included); and it is one more program to start.
//!
//! The layer lives outside the workspace (overlayfs refuses an upper layer
//! inside its lower one), under `<tmp>/writ-runs-<uid>/<run>/`, where a refused
//! run's layer is kept for `writ run --show`.
//!
//! Whether it works is probed once per process on a scratch tree: the kernel
//! may refuse user namespaces, or overlayfs in them (before Linux 5.11).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The folder that holds this user's runs' layers (one per user: a kept
/// layer holds the workspace's files as the command left them).
pub(crate) fn runs_dir() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    std::env::temp_dir().join(format!("writ-runs-{uid}"))
}

/// Creates [`runs_dir`], private to this user.
fn create_runs_dir() -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = runs_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(&dir)?;
            if meta.is_dir() && meta.uid() == rustix::process::getuid().as_raw() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{} is not a folder of this user's", dir.display()),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

/// One run's layer: its folder, and the upper, work and stage folders in it.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(crate) dir: PathBuf,
}

impl Layer {
    pub(crate) fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    pub(crate) fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
    pub(crate) fn stage(&self) -> PathBuf {
        self.dir.join("stage")
    }

    /// Creates the run's folders; the run folder itself must be new.
    pub(crate) fn create(dir: PathBuf) -> io::Result<Layer> {
        create_runs_dir()?;
        std::fs::create_dir(&dir)?;
        let layer = Layer { dir };
        for sub in [layer.upper(), layer.work(), layer.stage()] {
            std::fs::create_dir(&sub)?;
        }
        Ok(layer)
    }

    /// Creates a run's folder with a stage only (a read-only run has no
    /// layers); the run folder itself must be new.
    pub(crate) fn create_stage(dir: PathBuf) -> io::Result<Layer> {
        create_runs_dir()?;
        std::fs::create_dir(&dir)?;
        let layer = Layer { dir };
        std::fs::create_dir(layer.stage())?;
        Ok(layer)
    }

    /// Removes the run's folder (the work folder may hold entries only the
    /// namespace's root could remove; they are made writable first).
    pub(crate) fn remove(&self) {
        make_writable(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let path = entry.path();
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
            make_writable(&path);
        }
    }
}

/// A path overlayfs cannot take as a mount option (`,` and `:` separate
/// options and layers; a newline would break the script's quoting of
/// nothing, but is refused for clarity).
fn unfit(path: &Path) -> bool {
    let s = path.as_os_str().as_encoded_bytes();
    s.iter().any(|b| matches!(b, b',' | b':' | b'\n'))
}

/// The namespace plan of a run over `root` in `layer`.
pub(crate) fn plan(
    root: &Path,
    layer: &Layer,
    passthrough: &[PathBuf],
    cwd: &Path,
) -> io::Result<super::ns::Plan> {
    super::ns::Plan::new(
        root,
        &layer.stage(),
        &layer.upper(),
        &layer.work(),
        passthrough,
        cwd,
    )
}

/// Has `cmd` enter the run's namespaces (see `ns.rs`) before it `exec`s.
pub(crate) fn prepare(cmd: &mut Command, plan: std::sync::Arc<super::ns::Plan>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `ns::enter` makes only async-signal-safe system calls on
    // memory built before the fork (the plan, kept alive by the closure).
    unsafe {
        cmd.pre_exec(move || super::ns::enter(&plan));
    }
}

/// Whether an overlay can be made, or why not.
pub(crate) fn available(root: &Path) -> Result<(), String> {
    if unfit(root) {
        return Err(format!(
            "the workspace path {} holds a ',' or ':', which overlayfs cannot take",
            root.display()
        ));
    }
    if unfit(&runs_dir()) {
        return Err("the temporary folder's path holds a ',' or ':'".into());
    }
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("overlays are made on Linux only".into());
    }
    let scratch = runs_dir().join(format!("probe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    create_runs_dir()
        .and_then(|()| std::fs::create_dir(&scratch))
        .map_err(|e| format!("no scratch folder for the overlay probe: {e}"))?;
    let root = scratch.join("root");
    std::fs::create_dir(&root).map_err(|e| e.to_string())?;
    std::fs::write(root.join("f"), b"lower").map_err(|e| e.to_string())?;
    let layer = Layer {
        dir: scratch.join("layer"),
    };
    for dir in [&layer.dir, &layer.upper(), &layer.work(), &layer.stage()] {
        std::fs::create_dir(dir).map_err(|e| e.to_string())?;
    }
    let plan = plan(&root, &layer, &[], &root).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "echo upper > f"])
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    prepare(&mut cmd, std::sync::Arc::new(plan));
    let out = cmd.output();
    let lower = std::fs::read(root.join("f")).unwrap_or_default();
    let upper = std::fs::read(layer.upper().join("f")).unwrap_or_default();
    layer.remove();
    let _ = std::fs::remove_dir_all(&scratch);
    match out {
        Ok(out) if out.status.success() && lower == b"lower" && upper == b"upper\n" => Ok(()),
        Ok(out) => Err(format!(
            "the kernel refused an overlay in a user namespace ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!(
            "the kernel refused an overlay in a user namespace ({e})"
        )),
    }
}

/// One entry of the upper layer, relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Upper {
    /// A regular file the run created or changed (content not compared yet).
    File(PathBuf),
    /// A whiteout: the run removed what the lower layer has at this path.
    Removed(PathBuf),
    /// A folder the run removed and made again: nothing below it in the
    /// lower layer is visible to it any more.
    Opaque(PathBuf),
    /// A folder the run created (it may stay empty).
    Dir(PathBuf),
    /// A symlink or special file: not committed.
    Other(PathBuf),
}

/// Every entry of the upper layer, depth first, parents before children.
pub(crate) fn scan(upper: &Path) -> io::Result<Vec<Upper>> {
    let mut out = Vec::new();
    walk(upper, Path::new(""), &mut out)?;
    Ok(out)
}

fn walk(base: &Path, rel: &Path, out: &mut Vec<Upper>) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(base.join(rel))?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = rel.join(entry.file_name());
        let meta = std::fs::symlink_metadata(base.join(&path))?;
        let kind = meta.file_type();
        if kind.is_char_device() && meta.rdev() == 0 {
            out.push(Upper::Removed(path));
        } else if kind.is_dir() {
            if opaque(&base.join(&path)) {
                out.push(Upper::Opaque(path.clone()));
            } else {
                out.push(Upper::Dir(path.clone()));
            }
            walk(base, &path, out)?;
        } else if kind.is_file() {
            out.push(Upper::File(path));
        } else {
            out.push(Upper::Other(path));
        }
    }
    Ok(())
}

/// Whether overlayfs marked this upper folder opaque (`userxattr` mounts
/// use the `user.overlay.` namespace).
fn opaque(dir: &Path) -> bool {
    let mut value = [0u8; 4];
    matches!(
        rustix::fs::getxattr(dir, "user.overlay.opaque", &mut value),
        Ok(n) if value[..n].starts_with(b"y")
    )
}

/// The name a command is known by in messages.
pub(crate) fn describe(argv: &[OsString]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|a| OsStr::to_string_lossy(a).into_owned())
        .collect();
    let line = words.join(" ");
    if line.chars().count() > 120 {
        let cut: String = line.chars().take(120).collect();
        format!("{cut}…")
    } else {
        line
    }
}
