//! The key algebra: targets, keys, case folding, overlap, containment, merging.
//!
//! A [`Target`] is what a caller names; a [`Key`] is what the resource table
//! compares. Everything here is pure: turning a spelling into a key against
//! the file system (symlinks, `..` as the OS applies it, containment in the
//! grant root) is `sched::resolve`'s job, one layer up.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

pub use crate::kinds::Mode;

use crate::error::{Error, Result};

/// What part of the namespace a target names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Shape {
    File,
    Tree,
    Workspace,
}

/// A path an actor names in a request, before resolution.
///
/// `&str`, `String`, `&Path` and `PathBuf` convert into a target; a spelling
/// that ends in a separator is a tree.
///
/// ```
/// use writ::{Target, Mode};
/// assert!(Target::from("src/").is_tree());
/// assert!(!Target::from("src/lib.rs").is_tree());
/// assert_eq!(Target::file("Cargo.toml").shared().mode(), Mode::Shared);
/// assert_eq!(Target::tree("vendor").mode(), Mode::Exclusive);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    path: PathBuf,
    shape: Shape,
    mode: Mode,
    /// How the path is looked up.
    lookup: Lookup,
}

/// How a target's path becomes a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lookup {
    /// As the OS would open it: every symlink followed.
    Follow,
    /// The last component names a symlink itself rather than its target
    /// (`Files::delete` and `Files::rename` act on links).
    NoFollow,
    /// Already a key (absolute, resolved): no lookups. File operations name
    /// the keys they resolved, then reach them through `O_NOFOLLOW` folder
    /// handles, which refuse a path that changed in between.
    Resolved,
}

impl Target {
    /// Exactly this path, exclusively.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Target {
            path: path.into(),
            shape: Shape::File,
            mode: Mode::Exclusive,
            lookup: Lookup::Follow,
        }
    }

    /// This path and everything beneath it, exclusively.
    pub fn tree(path: impl Into<PathBuf>) -> Self {
        Target {
            path: path.into(),
            shape: Shape::Tree,
            mode: Mode::Exclusive,
            lookup: Lookup::Follow,
        }
    }

    /// The actor's whole writable scope: its grant root as a tree, or for a
    /// fenced actor its grant fence. Shell and MCP tools, whose write extent is
    /// unknown, reserve this.
    pub fn workspace() -> Self {
        Target {
            path: PathBuf::new(),
            shape: Shape::Workspace,
            mode: Mode::Exclusive,
            lookup: Lookup::Follow,
        }
    }

    /// The same target, held shared (for reading).
    #[must_use]
    pub fn shared(mut self) -> Self {
        self.mode = Mode::Shared;
        self
    }

    /// The same target, held exclusive (for writing). This is the default.
    #[must_use]
    pub fn exclusive(mut self) -> Self {
        self.mode = Mode::Exclusive;
        self
    }

    /// The same target, naming a symlink in its last component itself
    /// instead of the link's target.
    pub(crate) fn no_follow(mut self) -> Self {
        self.lookup = Lookup::NoFollow;
        self
    }

    /// The same target, whose path is already a resolved key.
    /// How the path is to be looked up.
    pub(crate) fn lookup(&self) -> Lookup {
        self.lookup
    }

    /// The same shape and mode at `path`, an already-resolved key.
    pub(crate) fn at_resolved(&self, path: PathBuf) -> Target {
        Target {
            path,
            shape: self.shape,
            mode: self.mode,
            lookup: Lookup::Resolved,
        }
    }

    pub(crate) fn resolved(mut self) -> Self {
        self.lookup = Lookup::Resolved;
        self
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mode it asks for.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// True for a tree target (including [`Target::workspace`]).
    pub fn is_tree(&self) -> bool {
        self.shape != Shape::File
    }

    /// True for [`Target::workspace`].
    pub fn is_workspace(&self) -> bool {
        self.shape == Shape::Workspace
    }

    fn from_spelling(path: PathBuf) -> Self {
        let bytes = path.as_os_str().as_encoded_bytes();
        let tree = bytes.len() > 1
            && bytes
                .last()
                .is_some_and(|&b| std::path::is_separator(b as char));
        Target {
            shape: if tree { Shape::Tree } else { Shape::File },
            path,
            mode: Mode::Exclusive,
            lookup: Lookup::Follow,
        }
    }
}

impl From<&str> for Target {
    fn from(s: &str) -> Self {
        Target::from_spelling(PathBuf::from(s))
    }
}
impl From<String> for Target {
    fn from(s: String) -> Self {
        Target::from_spelling(PathBuf::from(s))
    }
}
impl From<&String> for Target {
    fn from(s: &String) -> Self {
        Target::from_spelling(PathBuf::from(s))
    }
}
impl From<&Path> for Target {
    fn from(p: &Path) -> Self {
        Target::from_spelling(p.to_path_buf())
    }
}
impl From<PathBuf> for Target {
    fn from(p: PathBuf) -> Self {
        Target::from_spelling(p)
    }
}
impl From<&PathBuf> for Target {
    fn from(p: &PathBuf) -> Self {
        Target::from_spelling(p.clone())
    }
}
impl From<&Target> for Target {
    fn from(t: &Target) -> Self {
        t.clone()
    }
}

/// Targets resolved once, to be admitted many times.
///
/// Resolving a target (one `lstat` per path component, and a `readlink` per
/// symlink) costs more than admitting it. A caller that admits the same
/// paths again and again — a batch of edits to one file, a benchmark — can
/// resolve them once with [`Actor::resolve`](crate::Actor::resolve) and
/// pass the result (by reference) wherever targets are taken:
/// `try_admit`, `admit`, `request`, `fence`.
///
/// # A snapshot of the file system
///
/// A resolved key names what the path resolved to *when it was resolved*.
/// If a symlink on the way changes afterwards, the key does not follow it:
/// two actors may then reserve one file under two keys. Every admission
/// still checks the key, component by component, against the admitting
/// actor's grant root (`OutsideGrant` otherwise), so a resolved key never
/// names a path outside the root; and the file operations resolve again,
/// relative to directory handles, whatever was reserved. Resolve again when the tree may have
/// changed. (For the same reason writ keeps no resolution cache of its own:
/// an entry could not be trusted after a symlink changes without the very
/// `lstat`s it was meant to save.)
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let sched = writ::Scheduler::new(writ::Config::default());
/// let lead = sched.actor("lead", writ::Grant::workspace(dir.path()))?;
/// let paths = lead.resolve(["src/lib.rs", "docs/"])?;   // resolved once
/// for _ in 0..3 {
///     let call = lead.try_admit(&paths)?;              // admitted many times
///     assert_eq!(call.paths().len(), 2);
/// }
/// assert!(paths.targets()[1].is_tree());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    targets: Vec<Target>,
}

impl Resolved {
    pub(crate) fn new(targets: Vec<Target>) -> Self {
        Resolved { targets }
    }

    /// The resolved targets: absolute canonical paths, with the shape and
    /// mode each was asked with.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }
}

impl<'a> IntoIterator for &'a Resolved {
    type Item = &'a Target;
    type IntoIter = std::slice::Iter<'a, Target>;

    fn into_iter(self) -> Self::IntoIter {
        self.targets.iter()
    }
}

impl IntoIterator for Resolved {
    type Item = Target;
    type IntoIter = std::vec::IntoIter<Target>;

    fn into_iter(self) -> Self::IntoIter {
        self.targets.into_iter()
    }
}

/// How path spellings compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseMode {
    /// Byte-exact comparison (Linux's default).
    Sensitive,
    /// Case-folded comparison (macOS's and Windows' default): NFC, then
    /// full Unicode case folding, so composed and decomposed spellings and
    /// `ß`/`ss` are one key.
    Insensitive,
    /// Probe the file system once per scheduler, at the first actor's grant
    /// root, and fold every key of the scheduler by that answer;
    /// `Sensitive` if it cannot be probed.
    Detect,
}

impl Default for CaseMode {
    fn default() -> Self {
        if cfg!(any(target_os = "macos", target_os = "windows")) {
            CaseMode::Insensitive
        } else {
            CaseMode::Sensitive
        }
    }
}

/// A resolved, absolute, canonical path as the resource table compares it.
///
/// `norm` is what comparisons use (case-folded under `Insensitive`); `path`
/// is what people see.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) path: PathBuf,
    pub(crate) norm: PathBuf,
    pub(crate) tree: bool,
}

impl Key {
    /// A key compared byte-exactly. Tests, the pure core and the policy
    /// checks of a moved folder's contents use it.
    pub(crate) fn exact(path: impl Into<PathBuf>, tree: bool) -> Self {
        let path = path.into();
        Key {
            norm: path.clone(),
            path,
            tree,
        }
    }
}

/// Two keys overlap when they are equal, or one is a tree that is an
/// ancestor-or-equal of the other.
pub(crate) fn overlaps(a: &Key, b: &Key) -> bool {
    if a.norm == b.norm {
        return true;
    }
    (a.tree && b.norm.starts_with(&a.norm)) || (b.tree && a.norm.starts_with(&b.norm))
}

/// `key` lies inside `fence` (equal counts): everything `key` names is also
/// named by `fence`.
pub(crate) fn inside(key: &Key, fence: &Key) -> bool {
    if fence.tree {
        key.norm.starts_with(&fence.norm)
    } else {
        !key.tree && key.norm == fence.norm
    }
}

/// The files among `keys` a hold would write: held exclusively, and not
/// a whole tree. A claim and a refusal count (SPEC §6) are kept on these,
/// by every table.
pub(crate) fn written_files(keys: &[(Key, Mode)]) -> impl Iterator<Item = &Key> {
    keys.iter()
        .filter(|(key, mode)| *mode == Mode::Exclusive && !key.tree)
        .map(|(key, _)| key)
}

/// Merges the keys of one request: equal keys take the stronger mode, and a
/// tree absorbs a key beneath it only when the tree's mode is at least as
/// strong. The result is sorted, so equal requests produce equal key lists.
pub(crate) fn merge(mut keys: Vec<(Key, Mode)>) -> Vec<(Key, Mode)> {
    // Trees first among equal paths, so that one absorbs its exact twin.
    // In this (component-wise) order a tree's descendants follow it
    // contiguously, so one sweep with a stack of the open trees decides
    // every absorption: O(n log n) for the sort, O(n) after it.
    keys.sort_by(|(a, _), (b, _)| a.norm.cmp(&b.norm).then(b.tree.cmp(&a.tree)));
    let mut twins_folded: Vec<(Key, Mode)> = Vec::with_capacity(keys.len());
    for (key, mode) in keys {
        match twins_folded.last_mut() {
            Some((last, m)) if last.norm == key.norm && last.tree == key.tree => {
                *m = (*m).max(mode)
            }
            _ => twins_folded.push((key, mode)),
        }
    }
    let mut out: Vec<(Key, Mode)> = Vec::with_capacity(twins_folded.len());
    // The kept trees that are ancestors-or-equal of the current key, each
    // with the strongest mode among it and the trees above it.
    let mut open: Vec<(usize, Mode)> = Vec::new();
    for (key, mode) in twins_folded {
        while let Some(&(at, _)) = open.last() {
            if key.norm.starts_with(&out[at].0.norm) {
                break;
            }
            open.pop();
        }
        let strongest_above = open.last().map(|&(_, m)| m);
        if strongest_above.is_some_and(|m| m >= mode) {
            continue;
        }
        if key.tree {
            let strongest = strongest_above.map_or(mode, |m| m.max(mode));
            open.push((out.len(), strongest));
        }
        out.push((key, mode));
    }
    out
}

/// Removes `.`, resolves `..` against earlier components and collapses
/// repeated separators, without touching the file system. A `..` that would
/// climb above the start of a relative path is kept; above the root of an
/// absolute path it is dropped, as the OS does.
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    let mut depth = 0usize; // normal components in `out` that a `..` may pop
    for component in path.components() {
        match component {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => {
                out.push(component.as_os_str());
                depth = 0;
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if depth > 0 {
                    out.pop();
                    depth -= 1;
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            Component::Normal(c) => {
                out.push(c);
                depth += 1;
            }
        }
    }
    out
}

/// Folds a name the way a case-insensitive file system compares names:
/// canonical caseless matching (Unicode D145) — decompose, apply full case
/// folding (`ß` → `ss`, `ſ` → `s`, final `ς` → `σ`), and recompose to NFC.
/// Composed and decomposed spellings of one name fold to one string. The
/// decomposition before folding is what makes the result canonical for
/// every input (folding a composed character can leave marks out of order);
/// on NFC input it folds exactly what "NFC, then full case folding"
/// compares equal.
pub(crate) fn fold_str(s: &str) -> String {
    use caseless::Caseless;
    use unicode_normalization::UnicodeNormalization;
    if s.is_ascii() {
        // ASCII is already NFC, and its full case folding is lowercasing.
        return s.to_ascii_lowercase();
    }
    s.nfd().default_case_fold().nfc().collect()
}

/// Case-folds a path for comparison.
pub(crate) fn fold(path: &Path, case: CaseMode) -> PathBuf {
    match case {
        CaseMode::Insensitive => match path.to_str() {
            Some(s) => PathBuf::from(fold_str(s)),
            None => {
                // Not UTF-8: fold the ASCII letters only, keeping every byte.
                use std::os::unix::ffi::OsStringExt;
                let mut bytes = path.as_os_str().as_encoded_bytes().to_vec();
                bytes.make_ascii_lowercase();
                PathBuf::from(OsString::from_vec(bytes))
            }
        },
        _ => path.to_path_buf(),
    }
}

const RESERVED: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// The longest file name component the platform allows, in bytes.
pub(crate) const NAME_MAX: usize = 255;

/// The longest path the platform accepts in one system call, in bytes
/// (Linux's `PATH_MAX` counts the terminating NUL). A longer path could be
/// created step by step but never named again, so no tool may make one.
pub(crate) const PATH_MAX: usize = 4095;

/// Checks the length of a path as given or as resolved.
pub(crate) fn check_length(path: &Path) -> Result<()> {
    let len = path.as_os_str().as_encoded_bytes().len();
    if len > PATH_MAX {
        // The message names only the path's start: echoing it whole would
        // flood the caller with what it sent.
        let start: String = path.to_string_lossy().chars().take(80).collect();
        return Err(Error::invalid(
            Path::new(&format!("{start}…")),
            format!("the path is {len} bytes long, more than the limit of {PATH_MAX}"),
        ));
    }
    Ok(())
}

/// Checks one component of a caller's spelling.
pub(crate) fn check_component(
    component: &OsStr,
    portable: bool,
) -> std::result::Result<(), String> {
    let bytes = component.as_encoded_bytes();
    if bytes.len() > NAME_MAX {
        return Err(format!(
            "a component is {} bytes long, more than the limit of {NAME_MAX}",
            bytes.len()
        ));
    }
    if !portable {
        return Ok(());
    }
    let Some(name) = component.to_str() else {
        return Ok(());
    };
    if name.ends_with('.') || name.ends_with(' ') {
        return Err(format!(
            "'{name}' ends in a dot or a space, which Windows cannot store"
        ));
    }
    let stem = name.split('.').next().unwrap_or(name).trim_end();
    if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem)) {
        return Err(format!("'{name}' is a reserved device name on Windows"));
    }
    Ok(())
}

/// Checks a caller's spelling before any I/O.
pub(crate) fn check_spelling(path: &Path, portable: bool) -> Result<()> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.is_empty() {
        return Err(Error::invalid(path, "the path is empty"));
    }
    if bytes.contains(&0) {
        return Err(Error::invalid(path, "the path contains a NUL byte"));
    }
    check_length(path)?;
    for component in path.components() {
        if let Component::Normal(c) = component {
            check_component(c, portable).map_err(|reason| Error::invalid(path, reason))?;
        }
    }
    Ok(())
}

/// Where a resolved key landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// Under the grant root: any mode.
    Writable,
    /// Under a read-only root: shared only.
    ReadOnly,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(p: &str) -> Key {
        Key::exact(p.trim_end_matches('/'), p.ends_with('/'))
    }

    #[test]
    fn overlap_is_component_wise() {
        assert!(overlaps(&k("/ws/"), &k("/ws/a.rs")));
        assert!(!overlaps(&k("/ws/"), &k("/ws-old/a.rs")));
        assert!(
            !overlaps(&k("/ws"), &k("/ws/a.rs")),
            "an exact key covers only itself"
        );
        assert!(overlaps(&k("/ws/a"), &k("/ws/a")));
        assert!(overlaps(&k("/ws/a"), &k("/ws/a/")));
        assert!(!overlaps(&k("/ws/a.rs"), &k("/ws/b.rs")));
    }

    #[test]
    fn inside_includes_equal() {
        assert!(inside(&k("/ws/src/a.rs"), &k("/ws/src/")));
        assert!(inside(&k("/ws/src/"), &k("/ws/src/")));
        assert!(inside(&k("/ws/a"), &k("/ws/a")));
        assert!(!inside(&k("/ws/a/"), &k("/ws/a")));
        assert!(!inside(&k("/ws/src-old/a"), &k("/ws/src/")));
    }

    #[test]
    fn merge_keeps_stronger_mode_and_tree_absorbs_only_weaker() {
        let merged = merge(vec![
            (k("/ws/a"), Mode::Shared),
            (k("/ws/a"), Mode::Exclusive),
            (k("/ws/src/"), Mode::Exclusive),
            (k("/ws/src/x.rs"), Mode::Shared),
            (k("/ws/doc/"), Mode::Shared),
            (k("/ws/doc/y.md"), Mode::Exclusive),
        ]);
        assert_eq!(
            merged,
            vec![
                (k("/ws/a"), Mode::Exclusive),
                (k("/ws/doc/"), Mode::Shared),
                (k("/ws/doc/y.md"), Mode::Exclusive),
                (k("/ws/src/"), Mode::Exclusive),
            ]
        );
        let twins = merge(vec![
            (k("/ws/a"), Mode::Exclusive),
            (k("/ws/a/"), Mode::Exclusive),
        ]);
        assert_eq!(twins, vec![(k("/ws/a/"), Mode::Exclusive)]);
    }

    /// The merge as first written: quadratic, and obviously right.
    fn merge_reference(mut keys: Vec<(Key, Mode)>) -> Vec<(Key, Mode)> {
        keys.sort_by(|(a, _), (b, _)| a.norm.cmp(&b.norm).then(b.tree.cmp(&a.tree)));
        let mut out: Vec<(Key, Mode)> = Vec::with_capacity(keys.len());
        for (key, mode) in keys {
            if let Some(existing) = out
                .iter_mut()
                .find(|(k, _)| k.norm == key.norm && k.tree == key.tree)
            {
                existing.1 = existing.1.max(mode);
                continue;
            }
            if out
                .iter()
                .any(|(k, m)| k.tree && *m >= mode && key.norm.starts_with(&k.norm))
            {
                continue;
            }
            if key.tree {
                out.retain(|(k, m)| !(k.norm.starts_with(&key.norm) && *m <= mode));
            }
            out.push((key, mode));
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_sweep_merges_as_the_reference_does(
            keys in proptest::collection::vec(
                (
                    proptest::collection::vec(proptest::sample::select(&["a", "b", "a b", "c"][..]), 0..4),
                    proptest::bool::ANY,
                    proptest::bool::ANY,
                ),
                0..24,
            )
        ) {
            let keys: Vec<(Key, Mode)> = keys
                .into_iter()
                .map(|(parts, tree, shared)| {
                    let path = format!("/ws/{}", parts.join("/"));
                    let mode = if shared { Mode::Shared } else { Mode::Exclusive };
                    (Key::exact(path.trim_end_matches('/'), tree), mode)
                })
                .collect();
            proptest::prop_assert_eq!(merge(keys.clone()), merge_reference(keys));
        }
    }

    #[test]
    fn lexical_normalization() {
        assert_eq!(
            normalize_lexically(Path::new("/a/./b//c/../d")),
            PathBuf::from("/a/b/d")
        );
        assert_eq!(normalize_lexically(Path::new("/../a")), PathBuf::from("/a"));
        assert_eq!(
            normalize_lexically(Path::new("a/../../b")),
            PathBuf::from("../b")
        );
    }

    #[test]
    fn reserved_names_and_trailing_dots() {
        for bad in ["CON", "nul.txt", "com1", "LPT9.log", "name.", "name "] {
            assert!(check_component(OsStr::new(bad), true).is_err(), "{bad}");
            assert!(check_component(OsStr::new(bad), false).is_ok(), "{bad}");
        }
        for good in ["console", "a.rs", "COM10", ".env"] {
            assert!(check_component(OsStr::new(good), true).is_ok(), "{good}");
        }
        assert!(check_component(OsStr::new(&"x".repeat(256)), false).is_err());
    }

    #[test]
    fn spelling_checks() {
        assert!(check_spelling(Path::new(""), true).is_err());
        assert!(check_spelling(Path::new("a\0b"), true).is_err());
        assert!(check_spelling(Path::new("src/a.rs"), true).is_ok());
        let long = "d/".repeat(PATH_MAX / 2 + 1);
        assert!(check_spelling(Path::new(&long), false).is_err());
        assert!(check_spelling(Path::new(&long[..PATH_MAX]), false).is_ok());
    }

    #[test]
    fn trailing_separator_means_tree() {
        assert!(Target::from("src/").is_tree());
        assert!(Target::from(String::from("src/")).is_tree());
        assert!(Target::from(Path::new("src/")).is_tree());
        assert!(!Target::from(PathBuf::from("src")).is_tree());
        assert!(!Target::from("/").is_tree() || Target::from("/").path() == Path::new("/"));
    }
}
