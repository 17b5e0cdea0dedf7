//! The Python client (`clients/python`) against the real `writ serve`:
//! `mypy --strict` on the package, then its pytest suite, in the shared venv.
//!
//! The client is tested from its source (`PYTHONPATH`/`MYPYPATH`), not
//! installed: it ships in one distribution, the `writ-sched` wheel, and
//! `clients/python/pyproject.toml` holds only its development settings.

mod common;

use std::path::Path;
use std::process::Command;

use common::pyenv::venv_python;

const PACKAGES: &[&str] = &["pytest", "mypy"];

/// Where `writ_client` is imported from: the source, ahead of anything an
/// older test run installed in the shared venv.
const SOURCE: &str = "clients/python/src";

fn crate_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `python args..` in the crate root with the output streamed, and
/// fails the test with `what` if it does not succeed.
fn run_python(python: &Path, args: &[&str], what: &str) {
    let status = Command::new(python)
        .args(args)
        .current_dir(crate_root())
        .env("WRIT_BIN", env!("CARGO_BIN_EXE_writ"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONPATH", crate_root().join(SOURCE))
        .env("MYPYPATH", crate_root().join(SOURCE))
        .status();
    match status {
        Ok(s) => assert!(s.success(), "{what} failed with {s}"),
        Err(e) => panic!("{what} could not start: {e}"),
    }
}

#[test]
fn the_client_passes_mypy_strict() {
    let python = venv_python(PACKAGES);
    run_python(
        &python,
        &[
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "clients/python/src/writ_client",
            "examples/orchestrator.py",
        ],
        "mypy --strict clients/python",
    );
}

#[test]
fn the_client_passes_its_pytest_suite_against_writ_serve() {
    let python = venv_python(PACKAGES);
    run_python(
        &python,
        &[
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "clients/python/tests",
        ],
        "pytest clients/python/tests",
    );
}

const TABLE_BEGIN: &str = "<!-- error-kinds:begin -->";
const TABLE_END: &str = "<!-- error-kinds:end -->";

/// `busy` -> `Busy`, `not_read` -> `NotRead`: the client's class for a kind.
fn class_name(kind: &str) -> String {
    kind.split('_')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

/// The client README's error table, rendered from the server's one table.
fn error_table() -> String {
    let mut out = String::from(
        "| kind | code | exception | meaning |\n|------|------|-----------|---------|\n",
    );
    for k in writ::ERROR_KINDS {
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            k.kind,
            k.code,
            class_name(k.kind),
            k.meaning
        ));
    }
    out
}

/// The README's table is `writ::ERROR_KINDS` (the table docs/PROTOCOL.md is
/// checked against), and the client has exactly one class per kind.
/// `WRIT_BLESS=1` rewrites the README's copy instead of failing.
#[test]
fn the_client_follows_the_servers_error_table() {
    let readme_path = crate_root().join("clients/python/README.md");
    let readme = match std::fs::read_to_string(&readme_path) {
        Ok(text) => text,
        Err(e) => panic!("cannot read {}: {e}", readme_path.display()),
    };
    let (Some(begin), Some(end)) = (readme.find(TABLE_BEGIN), readme.find(TABLE_END)) else {
        panic!("clients/python/README.md lacks the {TABLE_BEGIN} / {TABLE_END} markers");
    };
    let current = &readme[begin + TABLE_BEGIN.len()..end];
    let expected = format!("\n{}", error_table());
    if current != expected {
        if std::env::var_os("WRIT_BLESS").is_some() {
            let updated = format!(
                "{}{expected}{}",
                &readme[..begin + TABLE_BEGIN.len()],
                &readme[end..]
            );
            if let Err(e) = std::fs::write(&readme_path, updated) {
                panic!("cannot write {}: {e}", readme_path.display());
            }
        } else {
            panic!(
                "clients/python/README.md's error table differs from writ::ERROR_KINDS; \
                 regenerate it with `WRIT_BLESS=1 cargo test --test python_client`"
            );
        }
    }

    let python = venv_python(PACKAGES);
    let output = Command::new(&python)
        .args([
            "-c",
            "import json, writ_client; \
             print(json.dumps({k: c.__name__ for k, c in writ_client.KINDS.items()}))",
        ])
        .env("PYTHONPATH", crate_root().join(SOURCE))
        .output();
    let output = match output {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "importing writ_client failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("cannot run {}: {e}", python.display()),
    };
    let classes: std::collections::BTreeMap<String, String> =
        match serde_json::from_slice(&output.stdout) {
            Ok(map) => map,
            Err(e) => panic!("writ_client.KINDS did not print as JSON: {e}"),
        };
    let wanted: std::collections::BTreeMap<String, String> = writ::ERROR_KINDS
        .iter()
        .map(|k| (k.kind.to_string(), class_name(k.kind)))
        .collect();
    assert_eq!(
        classes, wanted,
        "writ_client must have exactly one exception class per server error kind"
    );
}

/// The client's `__version__` is the wheel's, which is the crate's (maturin
/// takes it from Cargo.toml): the one distribution has one version.
#[test]
fn the_clients_version_is_the_crates() {
    let init_path = crate_root().join(SOURCE).join("writ_client/__init__.py");
    let init = match std::fs::read_to_string(&init_path) {
        Ok(text) => text,
        Err(e) => panic!("cannot read {}: {e}", init_path.display()),
    };
    let declared = init
        .lines()
        .find_map(|line| line.strip_prefix("__version__ = "))
        .map(|v| v.trim().trim_matches('"'));
    assert_eq!(
        declared,
        Some(env!("CARGO_PKG_VERSION")),
        "{}'s __version__ is not Cargo.toml's version",
        init_path.display()
    );
}
