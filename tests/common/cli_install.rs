//! The coding CLIs the real-CLI suite runs, installed from tests/cli's
//! package.json and lockfile (the pinned versions, one lockfile for every
//! CLI) into one folder under target/, reused while the lockfile is
//! unchanged; or the newest on npm with `WRIT_CLI_LATEST=1` (the weekly
//! job that finds a CLI's change the week it ships).
//!
//! `npm install` with the lockfile, not `npm ci`: a lockfile npm writes
//! for opencode lists platform packages the registry does not serve for
//! this platform, which `npm ci` refuses as "out of sync" while `npm
//! install` installs exactly the locked versions of what this platform
//! needs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

const INSTALL_HINT: &str = "node (20 or later) and npm are required: install them (Debian/Ubuntu: apt-get install nodejs npm)";

/// The executable `bin` of the npm package `package`.
///
/// Panics with one line naming what to install when node or npm is
/// missing, and with npm's exit status when the install fails.
pub fn cli_bin(bin: &str, package: &str) -> PathBuf {
    // One install at a time: threads of one test binary by the mutex,
    // test binaries run at once (nextest) by the lock file.
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    for tool in ["node", "npm"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(found.is_ok_and(|s| s.success()), "{INSTALL_HINT}");
    }
    let pinned = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let latest = std::env::var("WRIT_CLI_LATEST").is_ok_and(|v| v == "1");
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(if latest {
        "real-cli-latest"
    } else {
        "real-cli"
    });
    std::fs::create_dir_all(&prefix).unwrap_or_else(|e| panic!("{}: {e}", prefix.display()));
    let lock_file = File::create(prefix.join(".install.lock"))
        .unwrap_or_else(|e| panic!("{}: {e}", prefix.display()));
    rustix::fs::flock(&lock_file, rustix::fs::FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("locking {}: {e}", prefix.display()));
    let path = prefix.join("node_modules/.bin").join(bin);
    if latest {
        if !path.exists() {
            npm(
                &prefix,
                &[
                    "install",
                    "--no-audit",
                    "--no-fund",
                    &format!("{package}@latest"),
                ],
            );
        }
        return path;
    }
    // Installed again whenever the pinned lockfile changed since the last
    // install (npm may rewrite the copy it installed from: the stamp is
    // the pinned one as it was installed).
    let lock = std::fs::read(pinned.join("package-lock.json"))
        .unwrap_or_else(|e| panic!("tests/cli/package-lock.json: {e}"));
    let stamp = prefix.join(".installed-lock.json");
    let installed = std::fs::read(&stamp).ok();
    if !path.exists() || installed.as_deref() != Some(&lock[..]) {
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pinned.join(file), prefix.join(file))
                .unwrap_or_else(|e| panic!("copying tests/cli/{file}: {e}"));
        }
        npm(&prefix, &["install", "--no-audit", "--no-fund"]);
        std::fs::write(&stamp, &lock).unwrap_or_else(|e| panic!("{}: {e}", stamp.display()));
    }
    assert!(
        path.exists(),
        "npm installed no {bin} from {package} in {}",
        prefix.display()
    );
    path
}

fn npm(prefix: &Path, args: &[&str]) {
    let status = Command::new("npm")
        .args(args)
        .current_dir(prefix)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("npm could not start: {e}"));
    assert!(
        status.success(),
        "npm {} failed with {status}",
        args.join(" ")
    );
}

/// Prints one figure of a real-CLI run (a `real-cli: …` line) and keeps it
/// in `real-cli-figures.txt` under the tests' target folder, which
/// `.ci/run` prints once the suite is over: the figures of a CI run
/// without running the CLIs a second time.
#[allow(dead_code)] // not every suite reports figures
pub fn figure(line: String) {
    use std::io::Write as _;
    eprintln!("{line}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("real-cli-figures.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}
