//! Folder operations: create, list, walk, inspect and move, through the
//! same `O_NOFOLLOW` walk of folder handles as every file operation.
//!
//! A folder tool that checked a path and then acted on the path string
//! could be redirected by a folder swapped for a symlink in between (an
//! agent with a shell does that in a loop). Here the path is resolved and
//! judged by the policy once, then every step acts on handles opened one
//! component at a time without following symlinks, so a swap makes the
//! operation fail, never escape. Sensitive folders (`.writ/` and the
//! configured folder patterns) are neither listed, walked into, created
//! into, nor moved, and a folder that contains a sensitive name is never
//! moved.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;
use serde::Serialize;

use super::atomic::{self, Dir};
use super::policy::{self, Access};
use super::{Files, Place};
use crate::core::key::{Area, Key, Mode};
use crate::error::{Error, Result};

/// Walks and trees go no deeper than this many folders: deeper trees are
/// not made by people, and one made to break a listing must not.
pub(crate) const MAX_DEPTH: usize = 256;

/// A folder move refuses a folder with more entries than this: each must be
/// checked against the policy before the move.
const MAX_MOVED_ENTRIES: usize = 100_000;

/// What a folder entry is, as a listing shows it (a symlink is itself,
/// never what it points to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Folder,
    /// A symbolic link (not followed).
    Symlink,
    /// A fifo, socket or device.
    Other,
}

/// One entry of [`Files::list_dir`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FolderEntry {
    /// The entry's name (lossily UTF-8).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes as the file system reports it (a symlink's own).
    pub size: u64,
}

fn kind_of(kind: FileType) -> EntryKind {
    match kind {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Folder,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

impl Files<'_> {
    /// Resolves a folder path and checks the policy on it as a folder: a
    /// sensitive folder pattern matches the folder's own name too.
    fn place_folder(&self, path: &Path, follow: bool, access: Access) -> Result<Place> {
        let place = self.place(path, follow, access)?;
        let config = &self.actor.sched.shared.config;
        policy::check_folders(
            &config.sensitive,
            &self.allowed,
            &place.rel.join("_"),
            &place.key,
        )?;
        Ok(place)
    }

    /// Opens the folder a place names through folder handles; `Ok(None)`
    /// when it does not exist.
    fn open_folder(&self, place: &Place) -> Result<Option<Dir>> {
        let resolver = &self.meta().resolver;
        let base = resolver
            .base_of(&place.key)
            .ok_or_else(|| Error::OutsideGrant {
                path: place.key.path.clone(),
                root: resolver.root.clone(),
            })?;
        if place.key.path == base {
            let fd = if base == resolver.root {
                self.root_fd()?
            } else {
                atomic::open_root(base)?
            };
            return Ok(Some(Dir::root(fd, base.to_path_buf())));
        }
        match self.folder(place, false)? {
            Some((parent, name)) => parent.open_dir(&name),
            None => Ok(None),
        }
    }

    /// Whether a name is hidden from listings and walks: one that matches a
    /// sensitive folder pattern (`.writ/`), unless allowed.
    fn hidden(&self, name: &OsStr) -> bool {
        let name = name.to_string_lossy();
        let folder_match = |patterns: &[String]| {
            patterns.iter().any(|p| {
                p.strip_suffix('/')
                    .is_some_and(|folder| policy::matches(folder, &name))
            })
        };
        folder_match(&self.actor.sched.shared.config.sensitive) && !folder_match(&self.allowed)
    }

    /// Creates a folder and any missing folders above it (nothing when it
    /// already exists), under an exclusive call hold on it. Sensitive
    /// folders and read-only roots are refused.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// agent.files().create_dir("src/parser")?;
    /// assert!(dir.path().join("src/parser").is_dir());
    /// assert!(agent.files().create_dir(".writ/x").is_err());
    /// # Ok(()) }
    /// ```
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        let place = self.place_folder(path.as_ref(), true, Access::Write)?;
        let _hold = self.admit(
            &[(&place, Mode::Exclusive)],
            format!("create folder {}", place.rel.display()),
        )?;
        if self.meta().resolver.base_of(&place.key) == Some(place.key.path.as_path()) {
            return Ok(());
        }
        let (parent, name) = self.folder(&place, true)?.ok_or_else(|| Error::NotFound {
            path: place.key.path.clone(),
        })?;
        parent.make_dir(&name, self.durable())?;
        Ok(())
    }

    /// The entries of a folder, sorted by name: never through a symlink,
    /// sensitive folders (`.writ/`) left out.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("a.rs"), "fn a() {}\n").unwrap();
    /// # std::fs::create_dir(dir.path().join(".writ")).unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// let names: Vec<String> = agent.files().list_dir(".")?.into_iter().map(|e| e.name).collect();
    /// assert_eq!(names, ["a.rs"]);
    /// # Ok(()) }
    /// ```
    pub fn list_dir(&self, path: impl AsRef<Path>) -> Result<Vec<FolderEntry>> {
        let place = self.place_folder(path.as_ref(), true, Access::Read)?;
        let dir = self.open_folder(&place)?.ok_or_else(|| Error::NotFound {
            path: place.key.path.clone(),
        })?;
        self.entries(&dir)
    }

    fn entries(&self, dir: &Dir) -> Result<Vec<FolderEntry>> {
        let mut out = Vec::new();
        for listed in dir.list()? {
            if self.hidden(&listed.name) {
                continue;
            }
            let kind = kind_of(listed.kind);
            let size = dir.stat(&listed.name)?.map_or(0, |s| s.st_size as u64);
            out.push(FolderEntry {
                name: listed.name.to_string_lossy().into_owned(),
                kind,
                size,
            });
        }
        Ok(out)
    }

    /// Visits every entry beneath a folder, depth first, in name order:
    /// `visit(relative path, entry)` returns whether to descend into a
    /// folder. Never follows a symlink; sensitive folders (`.writ/`) are
    /// skipped; no deeper than 256 folders.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::create_dir_all(dir.path().join("src/a")).unwrap();
    /// # std::fs::write(dir.path().join("src/a/x.rs"), "").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// let mut seen = Vec::new();
    /// agent.files().walk("src", &mut |rel, _| {
    ///     seen.push(rel.to_path_buf());
    ///     true
    /// })?;
    /// assert_eq!(seen, [std::path::Path::new("a"), std::path::Path::new("a/x.rs")]);
    /// # Ok(()) }
    /// ```
    pub fn walk(
        &self,
        path: impl AsRef<Path>,
        visit: &mut dyn FnMut(&Path, &FolderEntry) -> bool,
    ) -> Result<()> {
        let place = self.place_folder(path.as_ref(), true, Access::Read)?;
        let dir = self.open_folder(&place)?.ok_or_else(|| Error::NotFound {
            path: place.key.path.clone(),
        })?;
        self.walk_in(&dir, &PathBuf::new(), 0, visit)
    }

    fn walk_in(
        &self,
        dir: &Dir,
        rel: &Path,
        depth: usize,
        visit: &mut dyn FnMut(&Path, &FolderEntry) -> bool,
    ) -> Result<()> {
        for entry in self.entries(dir)? {
            let here = rel.join(&entry.name);
            if visit(&here, &entry) && entry.kind == EntryKind::Folder && depth < MAX_DEPTH {
                // A folder swapped for something else meanwhile is skipped.
                if let Ok(Some(sub)) = dir.open_dir(OsStr::new(&entry.name)) {
                    self.walk_in(&sub, &here, depth + 1, visit)?;
                }
            }
        }
        Ok(())
    }

    /// The metadata of a path: symlinks on the way are resolved inside the
    /// root (one pointing out is refused), then every folder is opened
    /// without following, so a swap cannot redirect the look.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("a.rs"), "fn a() {}\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// assert_eq!(agent.files().metadata("a.rs")?.len(), 10);
    /// # Ok(()) }
    /// ```
    pub fn metadata(&self, path: impl AsRef<Path>) -> Result<std::fs::Metadata> {
        let place = self.place_folder(path.as_ref(), true, Access::Read)?;
        let not_found = || Error::NotFound {
            path: place.key.path.clone(),
        };
        if self.meta().resolver.base_of(&place.key) == Some(place.key.path.as_path()) {
            let dir = self.open_folder(&place)?.ok_or_else(not_found)?;
            return dir.metadata(None)?.ok_or_else(not_found);
        }
        let (parent, name) = self.folder(&place, false)?.ok_or_else(not_found)?;
        parent.metadata(Some(&name))?.ok_or_else(not_found)
    }

    /// Moves a folder whole, under exclusive tree holds on both places.
    /// The destination must not exist; neither end may be a sensitive
    /// folder or lie in one, and the folder may contain no sensitive name
    /// (it would carry a secret past the policy). Read marks stay with the
    /// old paths: the moved files must be read again before they change.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::create_dir_all(dir.path().join("old/x")).unwrap();
    /// # std::fs::create_dir_all(dir.path().join(".writ")).unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// agent.files().move_dir("old", "new")?;
    /// assert!(dir.path().join("new/x").is_dir());
    /// assert!(agent.files().move_dir(".writ", "notes").is_err());
    /// # Ok(()) }
    /// ```
    pub fn move_dir(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let mut src = self.place_folder(from.as_ref(), false, Access::Write)?;
        let mut dst = self.place_folder(to.as_ref(), false, Access::Write)?;
        src.key.tree = true;
        dst.key.tree = true;
        let resolver = &self.meta().resolver;
        if resolver.base_of(&src.key) == Some(src.key.path.as_path()) {
            return Err(Error::invalid(
                &src.key.path,
                "the root itself cannot be moved",
            ));
        }
        if dst.key.norm.starts_with(&src.key.norm) {
            return Err(Error::invalid(
                &dst.key.path,
                "a folder cannot be moved into itself",
            ));
        }
        let _hold = self.admit(
            &[(&src, Mode::Exclusive), (&dst, Mode::Exclusive)],
            format!("move folder {} -> {}", src.rel.display(), dst.rel.display()),
        )?;
        let not_found = || Error::NotFound {
            path: src.key.path.clone(),
        };
        let (src_parent, src_name) = self.folder(&src, false)?.ok_or_else(not_found)?;
        let moved = src_parent.open_dir(&src_name)?.ok_or_else(not_found)?;
        self.check_moved_contents(&moved, &src)?;
        let (dst_parent, dst_name) = self.folder(&dst, true)?.ok_or_else(|| Error::NotFound {
            path: dst.key.path.clone(),
        })?;
        src_parent.move_dir(&src_name, &dst_parent, &dst_name, self.durable())
    }

    /// Refuses a folder move that would carry a sensitive name.
    fn check_moved_contents(&self, moved: &Dir, place: &Place) -> Result<()> {
        let sensitive = &self.actor.sched.shared.config.sensitive;
        let mut seen = 0usize;
        let mut stack: Vec<(Dir, usize)> = vec![(moved.again(), 0)];
        while let Some((dir, depth)) = stack.pop() {
            if depth > MAX_DEPTH {
                return Err(Error::invalid(
                    &place.key.path,
                    format!("it is more than {MAX_DEPTH} folders deep; it is not moved"),
                ));
            }
            for listed in dir.list()? {
                seen += 1;
                if seen > MAX_MOVED_ENTRIES {
                    return Err(Error::invalid(
                        &place.key.path,
                        format!("it holds more than {MAX_MOVED_ENTRIES} entries; it is not moved"),
                    ));
                }
                let inner = dir.path.join(&listed.name);
                let is_dir = listed.kind == FileType::Directory;
                let probe = if is_dir {
                    Path::new(&listed.name).join("_")
                } else {
                    PathBuf::from(&listed.name)
                };
                let key = Key::exact(inner.clone(), false);
                policy::check(
                    sensitive,
                    &self.allowed,
                    Path::new(&listed.name),
                    &key,
                    Area::Writable,
                    Access::Write,
                )
                .and_then(|()| policy::check_folders(sensitive, &self.allowed, &probe, &key))
                .map_err(|e| match e {
                    Error::Policy { reason, .. } => Error::Policy {
                        path: place.key.path.clone(),
                        reason: format!(
                            "it contains {}: {reason}",
                            inner
                                .strip_prefix(&place.key.path)
                                .unwrap_or(&inner)
                                .display()
                        ),
                    },
                    other => other,
                })?;
                if is_dir {
                    if let Some(sub) = dir.open_dir(&listed.name)? {
                        stack.push((sub, depth + 1));
                    }
                }
            }
        }
        Ok(())
    }
}
