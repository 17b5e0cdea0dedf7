//! What a run does not judge: `.git/` internals and the paths the
//! workspace's ignore rules match (build outputs, dependency folders,
//! caches). Those are passed straight through to the real tree: tools such
//! as cargo and git lock them themselves, and a build must not copy
//! gigabytes into the run's layer.
//!
//! # Implementation details
//!
//! Only the root `.gitignore` is read, and only its plain patterns: a name
//! (`target`, `*.pyc`, `__pycache__/`) matches that component anywhere; a
//! pattern with a `/` (`/build`, `docs/_site/`) matches from the root.
//! Negations (`!keep.me`) and `**` are not interpreted: such lines are
//! skipped, so a path they would exclude is judged like any other (the safe
//! side). Folders at the top of the workspace that a pattern names are bind
//! mounted over the overlay (see `overlay.rs`); anything else ignored that a
//! run writes lands in its layer and is copied through at the end without
//! judgement.

use std::path::{Component, Path, PathBuf};

/// Folders passed through even without a `.gitignore` line naming them.
const ALWAYS: &[&str] = &[".git"];

/// Names of build output folders created (empty) before a run when the
/// ignore rules name them but they do not exist yet, so that a first build
/// writes to the real tree rather than into the run's layer.
const BUILD_DIRS: &[&str] = &[
    "target",
    "node_modules",
    "dist",
    "build",
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".cache",
    ".next",
    ".tox",
];

#[derive(Debug, Clone)]
struct Pattern {
    glob: String,
    /// Matched from the root (the pattern held a `/` before its end).
    anchored: bool,
    /// Matches folders only (the pattern ended with `/`).
    dir_only: bool,
}

/// The workspace's pass-through rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    patterns: Vec<Pattern>,
}

impl Rules {
    /// The rules of the workspace at `root` (its `.gitignore`, if any).
    pub(crate) fn load(root: &Path) -> Rules {
        let text = std::fs::read_to_string(root.join(".gitignore")).unwrap_or_default();
        Rules::parse(&text)
    }

    pub(crate) fn parse(text: &str) -> Rules {
        let mut patterns = Vec::new();
        for line in text.lines() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            if line.contains("**") || line.contains('\\') || line.contains('[') {
                continue;
            }
            let dir_only = line.ends_with('/');
            let body = line.trim_end_matches('/');
            let anchored = body.contains('/');
            let glob = body.trim_start_matches('/').to_string();
            if glob.is_empty() {
                continue;
            }
            patterns.push(Pattern {
                glob,
                anchored,
                dir_only,
            });
        }
        Rules { patterns }
    }

    /// Whether `rel` (relative to the root; `is_dir` says what it is) or a
    /// folder above it is passed through.
    pub(crate) fn passes(&self, rel: &Path, is_dir: bool) -> bool {
        let parts: Vec<&str> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => s.to_str(),
                _ => None,
            })
            .collect();
        if parts.first().is_some_and(|first| ALWAYS.contains(first)) {
            return true;
        }
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let part_is_dir = !last || is_dir;
            for p in &self.patterns {
                if p.dir_only && !part_is_dir {
                    continue;
                }
                let hit = if p.anchored {
                    let prefix = parts[..=i].join("/");
                    glob(&p.glob, &prefix)
                } else {
                    glob(&p.glob, part)
                };
                if hit {
                    return true;
                }
            }
        }
        false
    }

    /// The top-level folders to bind over the overlay: `.git` and every
    /// folder at the root a pattern names. Build output folders the rules
    /// name but that do not exist yet are created (empty) first.
    pub(crate) fn top_dirs(&self, root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for name in BUILD_DIRS {
            let path = root.join(name);
            if self.passes(Path::new(name), true) && !path.exists() {
                // Best effort: without it a first build lands in the layer
                // and is copied through at the end instead.
                let _ = std::fs::create_dir(&path);
            }
        }
        let Ok(entries) = std::fs::read_dir(root) else {
            return out;
        };
        for entry in entries.flatten() {
            // A symlink is not followed: a bind would follow it out of the tree.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if !kind.is_dir() {
                continue;
            }
            let name = PathBuf::from(entry.file_name());
            if self.passes(&name, true) {
                out.push(name);
            }
        }
        out.sort();
        out
    }
}

/// `*` (any run of characters) and `?` (one character) over one string.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let (mut star, mut mark) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_patterns_match_names_anywhere_and_anchored_ones_from_the_root() {
        let rules = Rules::parse("/target\nnode_modules/\n*.pyc\n# c\n!keep\ndocs/_site\n");
        assert!(rules.passes(Path::new("target/debug/x"), false));
        assert!(!rules.passes(Path::new("src/target"), false), "anchored");
        assert!(rules.passes(Path::new("web/node_modules/a.js"), false));
        assert!(
            !rules.passes(Path::new("node_modules"), false),
            "a file named so"
        );
        assert!(rules.passes(Path::new("a/b/c.pyc"), false));
        assert!(rules.passes(Path::new("docs/_site/index.html"), false));
        assert!(rules.passes(Path::new(".git/index"), false));
        assert!(!rules.passes(Path::new("src/main.rs"), false));
        assert!(!rules.passes(Path::new("keep"), false));
    }

    #[test]
    fn globs() {
        assert!(glob("*.rs", "a.rs"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("*.rs", "a.rsx"));
        assert!(glob("*", ""));
    }
}
