//! A Python virtualenv for tests that drive writ with Python programs
//! (the official MCP SDK, the Python client).
//!
//! The venv lives in `target/tmp/test-venv`, is created with `python3 -m venv`
//! and pip-installed on first use, and is reused afterwards. Test binaries run
//! concurrently: a lock file serializes creation and installs.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv's `python`, with `packages` (pip requirement specifiers)
/// installed. Panics with one line saying what to install when `python3` or
/// its `venv` module is missing, and with pip's output when an install fails.
// `File::lock` is newer than the crate's MSRV; only the tests use it, and
// they build with the toolchain `.ci/run` uses.
#[allow(clippy::incompatible_msrv)]
pub fn venv_python(packages: &[&str]) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    if let Err(e) = fs::create_dir_all(tmp) {
        panic!("cannot create {}: {e}", tmp.display());
    }
    let venv = tmp.join("test-venv");
    let lock = match File::create(tmp.join("test-venv.lock")) {
        Ok(file) => file,
        Err(e) => panic!("cannot create the venv lock file in {}: {e}", tmp.display()),
    };
    if let Err(e) = lock.lock() {
        panic!("cannot lock the venv lock file: {e}");
    }
    let python = venv.join("bin").join("python");
    if !python.exists() {
        create(&venv);
    }
    let stamp = venv.join("writ-installed.txt");
    let installed = fs::read_to_string(&stamp).unwrap_or_default();
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !installed.lines().any(|line| line == *p))
        .collect();
    if !missing.is_empty() {
        install(&python, &missing);
        let mut file = match OpenOptions::new().create(true).append(true).open(&stamp) {
            Ok(file) => file,
            Err(e) => panic!(
                "cannot record installed packages in {}: {e}",
                stamp.display()
            ),
        };
        for p in &missing {
            if let Err(e) = writeln!(file, "{p}") {
                panic!(
                    "cannot record installed packages in {}: {e}",
                    stamp.display()
                );
            }
        }
    }
    drop(lock);
    python
}

fn create(venv: &Path) {
    let out = match Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(venv)
        .output()
    {
        Ok(out) => out,
        Err(_) => panic!(
            "python3 is not installed: install Python 3.9 or newer with its venv module (Debian/Ubuntu: apt-get install python3 python3-venv)"
        ),
    };
    if !out.status.success() {
        // A half-made venv would be taken for a good one next time.
        let _ = fs::remove_dir_all(venv);
        panic!(
            "python3 cannot create a virtualenv: install its venv module (Debian/Ubuntu: apt-get install python3-venv); python3 said: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

fn install(python: &Path, packages: &[&str]) {
    let out = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .output();
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "pip could not install {} into the test venv (network needed on first run): {}",
            packages.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("cannot run {}: {e}", python.display()),
    }
}
