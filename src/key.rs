//! Paths become keys: targets, resolution, containment, overlap, merging.
//!
//! A [`Target`] is what a caller names; a [`Key`] is what the resource table
//! compares. Resolution does what the OS would do: the longest existing prefix
//! is resolved with its symlinks (so a `..` after a symlink climbs from the
//! link's target), the missing remainder is normalized lexically, and the
//! result is checked component-wise against the grant root — never by string
//! prefix, so `/ws-old` is not inside `/ws`.
//!
//! The comparison helpers ([`overlaps`], [`inside`], [`merge`],
//! [`normalize_lexically`]) are pure and do no I/O.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// How a key is held: for writing or for reading.
///
/// `Shared < Exclusive`: merging keeps the stronger mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Read or observe; many may share.
    Shared,
    /// Write; excludes others (see the conflict table in the crate docs).
    Exclusive,
}

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
enum Lookup {
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
    /// Case-folded comparison (macOS's and Windows' default).
    Insensitive,
    /// Probe each grant root's file system; `Sensitive` if it cannot be probed.
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
    /// A key compared byte-exactly. Tests and the pure core use it.
    #[cfg_attr(not(test), allow(dead_code))]
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

/// Merges the keys of one request: equal keys take the stronger mode, and a
/// tree absorbs a key beneath it only when the tree's mode is at least as
/// strong. The result is sorted, so equal requests produce equal key lists.
pub(crate) fn merge(mut keys: Vec<(Key, Mode)>) -> Vec<(Key, Mode)> {
    // Trees first among equal paths, so that one absorbs its exact twin.
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
        let absorbed = out
            .iter()
            .any(|(k, m)| k.tree && *m >= mode && key.norm.starts_with(&k.norm));
        if absorbed {
            continue;
        }
        // A stronger tree arriving later (only possible for an equal path with
        // a weaker exact key first, which the sort prevents) or a tree that
        // swallows earlier keys: drop those it absorbs.
        if key.tree {
            out.retain(|(k, m)| !(k.norm.starts_with(&key.norm) && *m <= mode));
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

/// Case-folds a path for comparison.
pub(crate) fn fold(path: &Path, case: CaseMode) -> PathBuf {
    match case {
        CaseMode::Insensitive => match path.to_str() {
            Some(s) => PathBuf::from(s.to_lowercase()),
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
    for component in path.components() {
        if let Component::Normal(c) = component {
            check_component(c, portable).map_err(|reason| Error::invalid(path, reason))?;
        }
    }
    Ok(())
}

/// How many symlinks one resolution may follow before giving up, as Linux's
/// `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// Resolves `path` (absolute) the way the OS would: symlinks of the existing
/// prefix are followed, the missing remainder is normalized lexically.
///
/// A `..` that climbs back out of the missing remainder makes the next
/// component existing again, so it is checked (and followed) too.
///
/// Cost: one `readlink` per component of the existing prefix (as the C
/// library's `realpath` does), and no allocation per component. `readlink`
/// answers "not a symlink" (`EINVAL`), "missing" (`ENOENT`, `ENOTDIR`) or
/// the link's target in one call, where `lstat` would need a second call
/// for a link. Nothing is cached: an entry could only be trusted after the
/// very checks it would save, since any component may become a symlink at
/// any time.
pub(crate) fn resolve(path: &Path) -> io::Result<PathBuf> {
    debug_assert!(path.is_absolute());
    let mut resolved = PathBuf::new();
    // The root (and on Windows the prefix) of `path`.
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => resolved.push(component.as_os_str()),
            _ => break,
        }
    }
    resolve_from(resolved, path)
}

/// [`resolve`] for `rest` (its root and prefix ignored) below `start`, an
/// existing path without symlinks (a canonical grant root): the components
/// of `start` need no lookups, and a `..` that climbs out of it pops a real
/// folder, exactly as the OS would.
pub(crate) fn resolve_from(mut resolved: PathBuf, rest: &Path) -> io::Result<PathBuf> {
    // Components still to resolve, the next one last. Borrowed from `rest`;
    // a symlink's target adds owned ones.
    let mut pending: Vec<Cow<'_, OsStr>> = Vec::with_capacity(16);
    for component in rest.components().rev() {
        match component {
            Component::Prefix(_) | Component::RootDir => {}
            other => pending.push(Cow::Borrowed(other.as_os_str())),
        }
    }
    let mut missing = 0usize; // trailing components of `resolved` that do not exist
    let mut links = 0usize;
    let mut buf = [0u8; 256];
    while let Some(name) = pending.pop() {
        if *name == *"." {
            continue;
        }
        if *name == *".." {
            resolved.pop();
            missing = missing.saturating_sub(1);
            continue;
        }
        resolved.push(&name);
        if missing > 0 {
            missing += 1;
            continue;
        }
        match read_link(&resolved, &mut buf) {
            Ok(Some(target)) => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                resolved.pop();
                if target.is_absolute() {
                    resolved = PathBuf::new();
                }
                let mut prefix = Vec::new();
                for component in target.components() {
                    match component {
                        Component::Prefix(_) | Component::RootDir => {
                            resolved.push(component.as_os_str())
                        }
                        other => prefix.push(Cow::Owned(other.as_os_str().to_os_string())),
                    }
                }
                pending.extend(prefix.into_iter().rev());
            }
            Ok(None) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(20) => {
                // ENOTDIR: a component under a regular file cannot exist either.
                missing = 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(resolved)
}

/// The target of `path` if it is a symlink, `None` if it exists and is
/// not one. `buf` holds short targets without allocating.
fn read_link(path: &Path, buf: &mut [u8; 256]) -> io::Result<Option<PathBuf>> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    match rustix::fs::readlinkat_raw(rustix::fs::CWD, path, &mut *buf) {
        Ok(len) if len < buf.len() => Ok(Some(PathBuf::from(OsStr::from_bytes(&buf[..len])))),
        // Possibly cut short: read it again, whole.
        Ok(_) => {
            let target = rustix::fs::readlink(path, Vec::new())?;
            Ok(Some(PathBuf::from(OsString::from_vec(target.into_bytes()))))
        }
        Err(rustix::io::Errno::INVAL) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The file system's case behaviour at `root`, found by looking up an entry
/// under a case-swapped spelling. `Sensitive` if nothing can be probed.
pub(crate) fn detect_case(root: &Path) -> CaseMode {
    use std::os::unix::fs::MetadataExt;
    let same = |a: &Path, b: &Path| -> Option<bool> {
        let ma = std::fs::symlink_metadata(a).ok()?;
        match std::fs::symlink_metadata(b) {
            Ok(mb) => Some(ma.dev() == mb.dev() && ma.ino() == mb.ino()),
            Err(_) => Some(false),
        }
    };
    let swapped = |name: &str| -> Option<String> {
        let s: String = name
            .chars()
            .map(|c| {
                if c.is_uppercase() {
                    c.to_lowercase().next().unwrap_or(c)
                } else {
                    c.to_uppercase().next().unwrap_or(c)
                }
            })
            .collect();
        (s != name).then_some(s)
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root) {
        candidates.extend(entries.flatten().take(16).map(|e| e.path()));
    }
    candidates.push(root.to_path_buf());
    for path in candidates {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            continue;
        };
        if let Some(other) = swapped(name) {
            if let Some(same) = same(&path, &parent.join(other)) {
                return if same {
                    CaseMode::Insensitive
                } else {
                    CaseMode::Sensitive
                };
            }
        }
    }
    CaseMode::Sensitive
}

/// Where a resolved key landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// Under the grant root: any mode.
    Writable,
    /// Under a read-only root: shared only.
    ReadOnly,
}

/// One actor's resolution context: its canonical root, read-only roots and
/// case mode.
#[derive(Debug, Clone)]
pub(crate) struct Resolver {
    pub(crate) root: PathBuf,
    root_norm: PathBuf,
    read_roots: Vec<(PathBuf, PathBuf)>,
    pub(crate) case: CaseMode,
    portable: bool,
}

/// Canonicalizes a grant root, refusing what is not an existing directory.
pub(crate) fn canonical_root(root: &Path) -> Result<PathBuf> {
    check_spelling(root, false)?;
    let canonical = std::fs::canonicalize(root)
        .map_err(|e| Error::invalid(root, format!("the grant root cannot be resolved ({e})")))?;
    if !canonical.is_dir() {
        return Err(Error::invalid(root, "the grant root is not a directory"));
    }
    Ok(canonical)
}

impl Resolver {
    pub(crate) fn new(
        root: PathBuf,
        read_roots: Vec<PathBuf>,
        case: CaseMode,
        portable: bool,
    ) -> Self {
        let case = match case {
            CaseMode::Detect => detect_case(&root),
            other => other,
        };
        Resolver {
            root_norm: fold(&root, case),
            read_roots: read_roots
                .into_iter()
                .map(|r| (fold(&r, case), r))
                .collect(),
            root,
            case,
            portable,
        }
    }

    /// The key for an absolute, already-resolved path.
    pub(crate) fn key_for(&self, path: PathBuf, tree: bool) -> Key {
        Key {
            norm: fold(&path, self.case),
            path,
            tree,
        }
    }

    /// Whether the key lies in the grant root or a read-only root. The most
    /// specific root decides: a read-only root inside the grant root makes
    /// its tree read-only.
    pub(crate) fn area(&self, key: &Key) -> Option<Area> {
        let read_only = self
            .read_roots
            .iter()
            .any(|(norm, _)| key.norm.starts_with(norm) && norm.starts_with(&self.root_norm));
        if key.norm.starts_with(&self.root_norm) && !read_only {
            Some(Area::Writable)
        } else if read_only
            || self
                .read_roots
                .iter()
                .any(|(norm, _)| key.norm.starts_with(norm))
        {
            Some(Area::ReadOnly)
        } else {
            None
        }
    }

    /// The root (grant root or read-only root) a key lies under: where a
    /// file operation's walk of directory handles starts.
    pub(crate) fn base_of(&self, key: &Key) -> Option<&Path> {
        if key.norm.starts_with(&self.root_norm) {
            return Some(&self.root);
        }
        self.read_roots
            .iter()
            .find(|(norm, _)| key.norm.starts_with(norm))
            .map(|(_, root)| root.as_path())
    }

    /// Resolves one path target (not `workspace()`) to a key inside the root
    /// or a read-only root.
    pub(crate) fn resolve(&self, target: &Target) -> Result<(Key, Area)> {
        let given = target.path();
        check_spelling(given, self.portable)?;
        let cannot = |e: io::Error| Error::invalid(given, format!("it cannot be resolved ({e})"));
        // A relative path starts at the canonical root, which needs no lookups.
        let lookup = |path: &Path| -> Result<PathBuf> {
            if path.is_absolute() {
                resolve(path).map_err(cannot)
            } else {
                resolve_from(self.root.clone(), path).map_err(cannot)
            }
        };
        let resolved = match target.lookup {
            Lookup::Follow => lookup(given)?,
            Lookup::NoFollow => {
                // The link itself: resolve its folder (`..` the OS way), keep
                // its own name. `file_name` is `None` for a trailing `..`.
                match (given.parent(), given.file_name()) {
                    (Some(parent), Some(name)) => lookup(parent)?.join(name),
                    _ => return Err(Error::invalid(given, "it does not name a file")),
                }
            }
            Lookup::Resolved if given.is_absolute() => given.to_path_buf(),
            Lookup::Resolved => return Err(Error::invalid(given, "it is not a resolved path")),
        };
        let key = self.key_for(resolved, target.is_tree());
        match self.area(&key) {
            Some(area) => Ok((key, area)),
            None => Err(Error::OutsideGrant {
                path: key.path,
                root: self.root.clone(),
            }),
        }
    }

    /// Resolves `target` into a resolved target (same shape and mode);
    /// `workspace()` stays as it is, to expand when admitted.
    pub(crate) fn resolve_target(&self, target: &Target) -> Result<Target> {
        if target.is_workspace() || target.lookup == Lookup::Resolved {
            return Ok(target.clone());
        }
        let (key, _) = self.resolve(target)?;
        Ok(Target {
            path: key.path,
            shape: target.shape,
            mode: target.mode,
            lookup: Lookup::Resolved,
        })
    }

    /// `path` relative to the root, for messages; absolute when outside.
    pub(crate) fn relative(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
            Ok(rel) => rel.to_path_buf(),
            Err(_) => path.to_path_buf(),
        }
    }
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
    }

    #[test]
    fn trailing_separator_means_tree() {
        assert!(Target::from("src/").is_tree());
        assert!(Target::from(String::from("src/")).is_tree());
        assert!(Target::from(Path::new("src/")).is_tree());
        assert!(!Target::from(PathBuf::from("src")).is_tree());
        assert!(!Target::from("/").is_tree() || Target::from("/").path() == Path::new("/"));
    }

    #[test]
    fn resolve_follows_symlinks_then_applies_dotdot() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::os::unix::fs::symlink(root.join("real/inner"), root.join("link")).unwrap();
        // link/.. is real/, not root/: `..` applies to the link's target.
        assert_eq!(
            resolve(&root.join("link/../x")).unwrap(),
            root.join("real/x")
        );
        // A missing remainder is normalized lexically.
        assert_eq!(
            resolve(&root.join("new/./a/../b")).unwrap(),
            root.join("new/b")
        );
        // Climbing out of the missing part makes components existing again.
        assert_eq!(
            resolve(&root.join("new/../link/f")).unwrap(),
            root.join("real/inner/f")
        );
        // A dangling symlink resolves to where a write would land.
        std::os::unix::fs::symlink("/nonexistent-writ-target/f", root.join("dangling")).unwrap();
        assert_eq!(
            resolve(&root.join("dangling")).unwrap(),
            PathBuf::from("/nonexistent-writ-target/f")
        );
        // A loop is an error, not a hang.
        std::os::unix::fs::symlink(root.join("loop"), root.join("loop")).unwrap();
        assert!(resolve(&root.join("loop/x")).is_err());
    }

    #[test]
    fn resolver_refuses_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("ws");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(base.join("ws-old")).unwrap();
        std::os::unix::fs::symlink(base.join("ws-old"), root.join("out")).unwrap();
        let r = Resolver::new(root.clone(), vec![], CaseMode::Sensitive, true);
        for escape in ["../ws-old/a", "out/a", "/etc/passwd", "a/../../ws-old/x"] {
            assert!(
                matches!(
                    r.resolve(&Target::from(escape)),
                    Err(Error::OutsideGrant { .. })
                ),
                "{escape}"
            );
        }
        let (key, area) = r.resolve(&Target::from("src/../a.rs")).unwrap();
        assert_eq!(key.path, root.join("a.rs"));
        assert_eq!(area, Area::Writable);
    }

    #[test]
    fn insensitive_keys_fold_but_keep_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let r = Resolver::new(root.clone(), vec![], CaseMode::Insensitive, true);
        let (a, _) = r.resolve(&Target::from("Src/Lex.rs")).unwrap();
        let (b, _) = r.resolve(&Target::from("src/lex.RS")).unwrap();
        assert!(overlaps(&a, &b));
        assert_eq!(a.path, root.join("Src/Lex.rs"));
    }

    #[test]
    fn resolved_targets_skip_resolution_but_not_containment() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("ws");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let wide = Resolver::new(base.clone(), vec![], CaseMode::Sensitive, true);
        let narrow = Resolver::new(root.clone(), vec![], CaseMode::Sensitive, true);
        let inside = wide.resolve_target(&Target::from("ws/link/a.rs")).unwrap();
        assert_eq!(inside.path(), root.join("real/a.rs"));
        assert!(!inside.is_tree());
        let (key, _) = narrow.resolve(&inside).unwrap();
        assert_eq!(key.path, root.join("real/a.rs"));
        // Resolved by an actor with a wider root: still refused outside.
        let outside = wide.resolve_target(&Target::tree("other")).unwrap();
        assert!(outside.is_tree());
        assert!(matches!(
            narrow.resolve(&outside),
            Err(Error::OutsideGrant { .. })
        ));
        // A resolved key is a snapshot: it does not follow a later change.
        std::fs::remove_file(root.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), root.join("link")).unwrap();
        assert_eq!(
            narrow.resolve(&inside).unwrap().0.path,
            root.join("real/a.rs")
        );
        assert!(matches!(
            narrow.resolve(&Target::from("link/a.rs")),
            Err(Error::OutsideGrant { .. })
        ));
    }
}
