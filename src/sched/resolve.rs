//! Spellings become keys against the file system: symlinks of the existing
//! prefix, `..` the way the OS applies it, component-wise containment in the
//! grant root, and the probe behind `CaseMode::Detect`.
//!
//! The key algebra itself (what a key is, overlap, folding, merging) is pure
//! and lives in [`crate::core::key`]; everything here does `readlink`, `lstat`
//! or `canonicalize`.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::core::key::{Area, CaseMode, Key, Lookup, Target, check_length, check_spelling, fold};
use crate::error::{Error, Result};

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
        let resolved = match target.lookup() {
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
        // Under a deep root, a short relative path can still resolve long.
        check_length(&resolved)?;
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
        if target.is_workspace() || target.lookup() == Lookup::Resolved {
            return Ok(target.clone());
        }
        let (key, _) = self.resolve(target)?;
        Ok(target.at_resolved(key.path))
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
    use crate::core::key::overlaps;

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
