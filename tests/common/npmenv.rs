//! npm packages the tests run (the reference filesystem MCP server, the
//! official TypeScript MCP SDK), each installed once into its own folder
//! under `CARGO_TARGET_TMPDIR` at a pinned version and reused.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

const INSTALL_HINT: &str =
    "node and npm are required: install them (Debian/Ubuntu: apt-get install nodejs npm)";

/// The installed package's folder (`<folder>/node_modules/<package>`),
/// installing `package@version` first unless that version is there.
///
/// Panics with one line naming what to install when node or npm is
/// missing, and with npm's exit status when the install fails.
pub fn npm_package(folder: &str, package: &str, version: &str) -> PathBuf {
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
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(folder);
    let installed_at = prefix.join("node_modules").join(package);
    let installed = fs::read_to_string(installed_at.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .is_some_and(|manifest| manifest["version"] == version);
    if !installed {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg(format!("{package}@{version}"))
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("npm could not start: {e}"));
        assert!(
            status.success(),
            "npm install {package}@{version} failed with {status}"
        );
    }
    installed_at
}
