//! Path policy: read-write roots, read-only roots, sensitive names.
//!
//! The policy governs what [`Files`](crate::Files) (and delegated runs) read
//! and write; it does not restrict reservations — a shell's
//! `Target::workspace()` covers `.env` like any other path.
//!
//! Rules, in order:
//! 1. Everything outside the grant root and the read-only roots is denied by
//!    resolution itself (`Error::OutsideGrant`), after `..` and symlinks.
//! 2. A write under a read-only root is `Error::Policy`; a write by a
//!    read-only actor is `Error::ReadOnly`.
//! 3. A sensitive name (`Config::sensitive_names`, default
//!    [`DEFAULT_SENSITIVE`](crate::DEFAULT_SENSITIVE)) is refused for reads
//!    and writes, unless the [`Files`](crate::Files) handle allows it with
//!    [`Files::allow_sensitive`](crate::Files::allow_sensitive). The file
//!    name is checked as the caller spelled it AND as it resolved, because a
//!    harmless-looking symlink may point at a secret.
//!
//! Patterns match one file name (the last component), case-insensitively by
//! the same Unicode folding as keys (NFC, full case folding); `*` matches
//! any run of characters, nothing else is special.

use std::ffi::OsStr;
use std::path::Path;

use crate::core::key::{Area, Key, fold_str};
use crate::error::{Error, Result};

/// What a file operation does with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// Does `name` match the glob `pattern` (`*` only, compared under the
/// case-insensitive key folding, so `id_rſa` and `ID_RSA` are `id_rsa`)?
// Hand-written on purpose: sensitive-name patterns are one file name with `*`
// and nothing else; a glob crate would add `?`, classes and escapes that a
// policy file would then have to reason about.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let pattern = fold_str(pattern);
    let name = fold_str(name);
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    // Iterative wildcard matching with one backtrack point: linear enough for
    // file names, and no recursion on hostile patterns.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The first pattern of `patterns` that `name` matches.
fn first_match<'a>(patterns: &'a [String], name: &OsStr) -> Option<&'a str> {
    let name = name.to_string_lossy();
    patterns
        .iter()
        .find(|p| matches(p, &name))
        .map(String::as_str)
}

/// Checks one path of a file operation.
///
/// `spelled` is the path as the caller gave it; `key` where it resolved.
pub(crate) fn check(
    sensitive: &[String],
    allowed: &[String],
    spelled: &Path,
    key: &Key,
    area: Area,
    access: Access,
) -> Result<()> {
    if access == Access::Write && area == Area::ReadOnly {
        return Err(Error::Policy {
            path: key.path.clone(),
            reason: "it lies under a read-only root; write only inside the workspace".into(),
        });
    }
    for (name, via) in [
        (spelled.file_name(), ""),
        (key.path.file_name(), " (where the path resolves)"),
    ] {
        let Some(name) = name else { continue };
        let Some(pattern) = first_match(sensitive, name) else {
            continue;
        };
        if first_match(allowed, name).is_some() {
            continue;
        }
        let what = match access {
            Access::Read => "read",
            Access::Write => "written",
        };
        return Err(Error::Policy {
            path: key.path.clone(),
            reason: format!(
                "'{}'{via} matches the sensitive-name pattern '{pattern}', and secrets are not {what} by agent tools; \
                 work without it, or ask a person to allow it explicitly",
                name.to_string_lossy()
            ),
        });
    }
    Ok(())
}

/// Checks the folders of a path (relative to its grant root) against the
/// folder patterns (those ending in `/`, like `.writ/`): everything beneath a
/// sensitive folder is refused like a sensitive file.
pub(crate) fn check_folders(
    sensitive: &[String],
    allowed: &[String],
    relative: &Path,
    key: &Key,
) -> Result<()> {
    let Some(folders) = relative.parent() else {
        return Ok(());
    };
    for folder in folders.components() {
        let name = folder.as_os_str().to_string_lossy();
        let hit = |patterns: &[String]| {
            patterns.iter().position(|p| {
                p.strip_suffix('/')
                    .is_some_and(|folder| matches(folder, &name))
            })
        };
        if let Some(i) = hit(sensitive) {
            let pattern = &sensitive[i];
            if hit(allowed).is_some() {
                continue;
            }
            return Err(Error::Policy {
                path: key.path.clone(),
                reason: format!(
                    "it lies in the folder '{name}', which matches the sensitive-name pattern '{pattern}'; \
                     work without it, or ask a person to allow it explicitly"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::config::DEFAULT_SENSITIVE;

    #[test]
    fn globs() {
        assert!(matches(".env", ".env"));
        assert!(matches(".env", ".ENV"));
        assert!(!matches(".env", ".envrc"));
        assert!(matches(".env.*", ".env.local"));
        assert!(!matches(".env.*", ".env"));
        assert!(matches("*.pem", "server.pem"));
        assert!(matches("*.pem", ".pem"));
        assert!(!matches("*.pem", "server.pem.txt"));
        assert!(matches("id_rsa*", "id_rsa.pub"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
        assert!(matches("*", ""));
        assert!(!matches("", "x"));
    }

    #[test]
    fn folder_patterns_refuse_everything_beneath_and_match_no_file_name() {
        let patterns: Vec<String> = DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect();
        let key = Key::exact("/ws/.writ/serve.json", false);
        for inside in [".writ/serve.json", "a/.writ/b/c", ".WRIT/x"] {
            assert!(
                check_folders(&patterns, &[], Path::new(inside), &key).is_err(),
                "{inside}"
            );
        }
        for outside in [".writ", "writ/x", ".writing/x", "src/lib.rs"] {
            assert!(
                check_folders(&patterns, &[], Path::new(outside), &key).is_ok(),
                "{outside}"
            );
        }
        // Allowing the folder pattern lets it through.
        let allowed = vec![".writ/".to_string()];
        assert!(check_folders(&patterns, &allowed, Path::new(".writ/x"), &key).is_ok());
        // A folder pattern never matches a file name.
        assert!(first_match(&patterns, OsStr::new(".writ")).is_none());
    }

    #[test]
    fn default_patterns_cover_the_usual_secrets() {
        let patterns: Vec<String> = DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect();
        for secret in [
            ".env",
            ".env.production",
            "id_rsa",
            "id_ed25519",
            "tls.key",
            "cert.pem",
            "credentials",
            ".netrc",
            ".git-credentials",
        ] {
            assert!(
                first_match(&patterns, OsStr::new(secret)).is_some(),
                "{secret}"
            );
        }
        for plain in ["main.rs", "environment.md", "keys.rs", "README.md"] {
            assert!(
                first_match(&patterns, OsStr::new(plain)).is_none(),
                "{plain}"
            );
        }
    }
}
