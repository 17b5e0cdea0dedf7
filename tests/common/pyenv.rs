//! One Python virtualenv for every test binary that drives Python tools.
//!
//! The venv lives in `CARGO_TARGET_TMPDIR/test-venv`: created with
//! `python3 -m venv` on first use, reused afterwards. Test binaries run in
//! parallel, so creation and installs are serialized by an exclusive lock on
//! `test-venv.lock`. A package spec that names a local folder (like
//! `./clients/python`) is reinstalled whenever its files change, so the venv
//! never tests stale code.

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const INSTALL_HINT: &str = "python3 with the venv module is required: install python3 and python3-venv (Debian/Ubuntu: apt-get install python3 python3-venv)";

/// The venv's Python interpreter, with `packages` installed (pip specs, or
/// folders relative to the crate root).
///
/// Panics with one line naming what to install when python3 or its venv
/// module is missing, and with pip's exit status when an install fails.
#[allow(dead_code)] // not every test binary uses the shared venv
pub fn venv_python(packages: &[&str]) -> PathBuf {
    named_venv_python("test-venv", packages)
}

/// Like [`venv_python`], in a venv of its own named `name`: for packages
/// whose requirements clash with the shared venv's (the agent frameworks
/// pin an older MCP SDK than the one the conformance driver speaks).
#[allow(dead_code)] // not every test binary needs a venv of its own
pub fn named_venv_python(name: &str, packages: &[&str]) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = tmp.join(name);
    if let Err(e) = fs::create_dir_all(tmp) {
        panic!("cannot create {}: {e}", tmp.display());
    }
    let lock_path = tmp.join(format!("{name}.lock"));
    let lock = match File::create(&lock_path) {
        Ok(f) => f,
        Err(e) => panic!("cannot open the venv lock {}: {e}", lock_path.display()),
    };
    if let Err(e) = lock_exclusive(&lock) {
        panic!("cannot lock {}: {e}", lock_path.display());
    }

    let python = venv.join("bin").join("python");
    if !python.exists() {
        create_venv(&venv);
    }

    let stamps = venv.join("writ-installed");
    if let Err(e) = fs::create_dir_all(&stamps) {
        panic!("cannot create {}: {e}", stamps.display());
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for spec in packages {
        let local = manifest.join(spec);
        let (arg, fingerprint) = if local.is_dir() {
            (
                local.to_string_lossy().into_owned(),
                folder_fingerprint(&local),
            )
        } else {
            (spec.to_string(), String::from("registry"))
        };
        let stamp = stamps.join(format!("{:016x}", hash_of(spec)));
        if fs::read_to_string(&stamp).is_ok_and(|s| s == fingerprint) {
            continue;
        }
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]);
        if local.is_dir() {
            pip.arg("--force-reinstall").arg("--no-deps");
        }
        pip.arg(&arg);
        run(pip, &format!("pip install {arg}"));
        if let Err(e) = fs::write(&stamp, &fingerprint) {
            panic!("cannot write {}: {e}", stamp.display());
        }
    }
    drop(lock);
    python
}

/// Blocks until the other test binaries are done creating or installing.
// `File::lock` is stable since Rust 1.89, newer than the crate's declared
// minimum; only the test suite needs it.
#[allow(clippy::incompatible_msrv)]
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    file.lock()
}

fn create_venv(venv: &Path) {
    match Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        _ => panic!("{INSTALL_HINT}"),
    }
    // A half-made venv from an interrupted run would fail in confusing ways.
    if venv.exists() {
        if let Err(e) = fs::remove_dir_all(venv) {
            panic!("cannot remove the broken venv {}: {e}", venv.display());
        }
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match made {
        Ok(status) if status.success() && venv.join("bin").join("python").exists() => {}
        _ => {
            let _ = fs::remove_dir_all(venv);
            panic!("{INSTALL_HINT}");
        }
    }
}

fn run(mut command: Command, what: &str) {
    match command.status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("{what} failed with {status}"),
        Err(e) => panic!("{what} could not start: {e}"),
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// A fingerprint of a package folder's sources: names and contents of its
/// files, skipping tests, caches and build output.
fn folder_fingerprint(dir: &Path) -> String {
    let mut files = Vec::new();
    collect(dir, dir, &mut files);
    files.sort();
    let mut h = DefaultHasher::new();
    for rel in &files {
        rel.hash(&mut h);
        fs::read(dir.join(rel)).unwrap_or_default().hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

fn collect(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.')
            || name == "__pycache__"
            || name == "tests"
            || name == "build"
            || name.ends_with(".egg-info")
        {
            continue;
        }
        if path.is_dir() {
            collect(base, &path, out);
        } else if let Ok(rel) = path.strip_prefix(base) {
            out.push(rel.to_path_buf());
        }
    }
}
