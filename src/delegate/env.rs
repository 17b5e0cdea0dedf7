//! The child's environment and the program it runs.
//!
//! The environment is built from nothing: a fixed whitelist of host
//! variables (locale, terminal, home, path, temporary folder, XDG folders),
//! then the names the caller asked to inherit, then the caller's own
//! values. Provider keys, tokens and proxies of the host never reach the
//! child unless the caller names them.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Host variables passed through by exact name.
pub(crate) const WHITELIST: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "TMPDIR",
];

/// Host variables passed through by prefix.
pub(crate) const WHITELIST_PREFIXES: &[&str] = &["LC_", "XDG_"];

/// True when a host variable may reach the child without being asked for.
pub(crate) fn whitelisted(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    WHITELIST.iter().any(|w| w.as_bytes() == bytes)
        || WHITELIST_PREFIXES
            .iter()
            .any(|p| bytes.len() > p.len() && bytes.starts_with(p.as_bytes()))
}

/// A name the OS can carry: not empty, no `=`, no NUL.
pub(crate) fn valid_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty() && !bytes.contains(&b'=') && !bytes.contains(&0)
}

/// The complete environment of the child, from `host` (the parent's
/// variables), the names to inherit and the explicit values. Later sources
/// win; the result is sorted by name.
pub(crate) fn child_env(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    inherit: &[OsString],
    explicit: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut env = std::collections::BTreeMap::new();
    for (name, value) in host {
        if whitelisted(&name) || inherit.contains(&name) {
            env.insert(name, value);
        }
    }
    for (name, value) in explicit {
        env.insert(name.clone(), value.clone());
    }
    env.into_iter().collect()
}

/// Finds the program the way `execvp` would, using the child's `PATH`:
/// a name with a separator is a path (a relative one is taken from `base`),
/// anything else is searched for on `PATH`. Returns the absolute path of an
/// executable regular file, or why there is none.
pub(crate) fn find_program(
    program: &OsStr,
    path_var: Option<&OsStr>,
    base: &Path,
) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program name is empty".into());
    }
    if program.as_bytes().contains(&0) {
        return Err("the program name contains a NUL byte".into());
    }
    if program.as_bytes().contains(&b'/') {
        let path = base.join(program);
        return match executable(&path) {
            Ok(()) => Ok(path),
            Err(why) => Err(why),
        };
    }
    let Some(path_var) = path_var else {
        return Err("it is not a path and PATH is not set".into());
    };
    for dir in std::env::split_paths(path_var) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let candidate = dir.join(program);
        if executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err("it was not found on PATH".into())
}

fn executable(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err("it is not a regular file".into()),
        // `access(X_OK)` asks the kernel whether *this* process may run it
        // (owner, group, other, ACLs), which mode bits alone cannot tell.
        Ok(_) => rustix::fs::access(path, rustix::fs::Access::EXEC_OK)
            .map_err(|_| "it is not executable by this user".to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("it does not exist".into()),
        Err(e) => Err(format!("it cannot be inspected ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> OsString {
        OsString::from(s)
    }

    #[test]
    fn only_whitelisted_inherited_and_explicit_names_pass() {
        let host = [
            ("PATH", "/bin"),
            ("HOME", "/home/a"),
            ("LC_ALL", "C"),
            ("XDG_CONFIG_HOME", "/c"),
            ("LC_", "prefix alone is not a name"),
            ("ANTHROPIC_API_KEY", "secret"),
            ("HTTPS_PROXY", "http://proxy"),
            ("PATHX", "not PATH"),
        ]
        .map(|(k, v)| (os(k), os(v)));
        let env = child_env(
            host,
            &[os("HTTPS_PROXY"), os("MISSING")],
            &[(os("MODE"), os("ci")), (os("HOME"), os("/run"))],
        );
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "HOME",
                "HTTPS_PROXY",
                "LC_ALL",
                "MODE",
                "PATH",
                "XDG_CONFIG_HOME"
            ]
        );
        assert!(
            env.contains(&(os("HOME"), os("/run"))),
            "explicit values win"
        );
    }

    #[test]
    fn names_with_equals_or_nul_are_invalid() {
        assert!(valid_name(OsStr::new("A_B")));
        assert!(!valid_name(OsStr::new("")));
        assert!(!valid_name(OsStr::new("A=B")));
        assert!(!valid_name(OsStr::from_bytes(b"A\0B")));
    }

    #[test]
    fn programs_are_found_on_the_childs_path_or_by_path() {
        let base = Path::new("/");
        assert!(find_program(OsStr::new("sh"), Some(OsStr::new("/nope:/bin")), base).is_ok());
        assert!(find_program(OsStr::new("sh"), Some(OsStr::new("/nope")), base).is_err());
        assert!(find_program(OsStr::new("sh"), None, base).is_err());
        assert!(find_program(OsStr::new("bin/sh"), None, base).is_ok());
        assert!(find_program(OsStr::new("/etc/hostname-nope"), None, base).is_err());
        assert!(find_program(OsStr::new(""), None, base).is_err());
    }
}
