//! Before/after manifests of the fenced trees, and what changed between them.
//!
//! # Implementation details
//!
//! A walk visits each tree depth-first with every directory's entries sorted
//! by name, so it meets paths in increasing component-wise order (the order
//! of [`Path`]'s `Ord`). That makes a walk stopped by its bound a clean
//! *prefix*: everything up to the last path it visited (its `frontier`) was
//! seen, nothing after it was. Two manifests are compared only up to the
//! smaller frontier, so a truncated scan reports the changes it could see
//! and never invents creations or deletions beyond what it walked.
//!
//! The bound is enforced while walking: entries are counted as directories
//! are read (a directory with more entries than the budget left stops the
//! walk before its names are sorted), and hashed bytes are counted as files
//! are read.
//!
//! The walk before the run records size, mtime, ctime, device, inode and the
//! content hash of every file. The walk after records stat data only; the
//! comparison hashes a file afterwards only when stat cannot decide:
//! - size, mtime, ctime, device and inode all equal (and the file was not
//!   "racy", below) → unchanged, not hashed;
//! - size differs → modified, not hashed;
//! - otherwise the hashes decide.
//!
//! Racy files (git's rule): a file whose mtime or ctime is not older than
//! the file system's clock when the walk began could be written again within
//! the same timestamp tick without its stat changing. The clock is read from
//! a file created just before the walk (the run's `TASK.md`), so it has the
//! file system's own granularity. Racy files are always compared by hash.
//!
//! The walk goes through folder handles (`openat`, `fstatat` with no-follow,
//! one folder open per level), never through full paths, so no path length
//! hides a file. An entry it cannot examine (permissions, too many open
//! folders) is counted and named in the report's notes, and the report says
//! the scan is incomplete — never a silent skip.
//!
//! `.git` directories are not walked (commits are read with `git` instead).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use sha2::{Digest, Sha256};

use super::Change;

/// A file-system timestamp: seconds and nanoseconds.
pub(crate) type Stamp = (i64, i64);

/// How far one walk may go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Entries (directories, files, links) visited.
    pub(crate) entries: usize,
    /// Bytes of file content hashed.
    pub(crate) bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    File,
    Symlink,
}

/// What a walk records about one file or symbolic link.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) mtime: Stamp,
    pub(crate) ctime: Stamp,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// Content hash (a link's target for a link); `None` when not hashed or unreadable.
    pub(crate) hash: Option<[u8; 32]>,
    /// Stat equality cannot be trusted for this file (see the module docs).
    pub(crate) racy: bool,
}

impl Entry {
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    fn from_stat(stat: &rustix::fs::Stat, kind: Kind) -> Self {
        Entry {
            kind,
            size: stat.st_size as u64,
            mtime: (stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            ctime: (stat.st_ctime as i64, stat.st_ctime_nsec as i64),
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            hash: None,
            racy: false,
        }
    }

    fn same_stat(&self, other: &Entry) -> bool {
        self.kind == other.kind
            && self.size == other.size
            && self.mtime == other.mtime
            && self.ctime == other.ctime
            && self.dev == other.dev
            && self.ino == other.ino
    }
}

/// The files and links of the fenced trees, keyed by path relative to the
/// actor's root.
#[derive(Debug, Default)]
pub(crate) struct Manifest {
    pub(crate) entries: BTreeMap<PathBuf, Entry>,
    /// Set when a bound stopped the walk: the last path visited (empty when
    /// none was). Paths after it were not seen.
    pub(crate) frontier: Option<PathBuf>,
    /// Entries visited.
    pub(crate) visited: usize,
    /// Content bytes hashed.
    pub(crate) hashed: u64,
    /// Directories or files that could not be examined.
    pub(crate) unreadable: usize,
    /// The first few of them, with the reason (relative paths).
    pub(crate) unexamined: Vec<String>,
}

/// One walk over the fenced trees.
#[derive(Debug)]
pub(crate) struct Walker<'a> {
    /// The canonical root all paths are relative to.
    pub(crate) root: &'a Path,
    /// The trees, relative to `root`: sorted, none inside another.
    pub(crate) trees: &'a [PathBuf],
    /// The run's bookkeeping files: a path with the (device, inode) the
    /// runner created there. Skipped only while both match — a child that
    /// replaces `output.log` by a folder or another file has made an
    /// artifact like any other.
    pub(crate) skip: &'a [(PathBuf, (u64, u64))],
    pub(crate) limits: Limits,
}

/// The walk stopped: bound reached, or (after) past the frontier.
struct Stop;

impl Walker<'_> {
    /// The manifest before the run: stat and hash every file. `clock` is the
    /// file system's time as the walk begins (see racy files).
    pub(crate) fn before(&self, clock: Option<Stamp>) -> Manifest {
        self.walk(Some(clock), None)
    }

    /// The manifest after the run: stat only, and no further than
    /// `stop_after` (the frontier of the walk before, if it had one).
    pub(crate) fn after(&self, stop_after: Option<&Path>) -> Manifest {
        self.walk(None, stop_after)
    }

    // Hand-written rather than a directory-walking crate: the bound on
    // entries and bytes must stop the walk while it walks (not filter after),
    // and the order must be the sorted path order a truncated walk compares.
    fn walk(&self, hash: Option<Option<Stamp>>, stop_after: Option<&Path>) -> Manifest {
        let mut m = Manifest::default();
        let mut last = PathBuf::new();
        for tree in self.trees {
            if self
                .visit_tree(tree, &mut m, &mut last, hash, stop_after)
                .is_err()
            {
                break;
            }
        }
        m
    }

    fn visit_tree(
        &self,
        tree: &Path,
        m: &mut Manifest,
        last: &mut PathBuf,
        hash: Option<Option<Stamp>>,
        stop_after: Option<&Path>,
    ) -> Result<(), Stop> {
        if stop_after.is_some_and(|s| tree > s) {
            return Err(Stop);
        }
        // The tree itself is opened by path (a short one: a project folder
        // or the run folder); everything under it through folder handles.
        let Ok(top) = rustix::fs::open(self.root.join(tree), dir_flags(), Mode::empty()) else {
            return Ok(()); // not there, or not a folder: nothing to record
        };
        if m.visited >= self.limits.entries {
            m.frontier = Some(last.clone());
            return Err(Stop);
        }
        m.visited += 1;
        *last = tree.to_path_buf();
        let Some(children) = self.children(tree, &top, m) else {
            m.frontier = Some(last.clone());
            return Err(Stop);
        };
        let mut stack: Vec<(OwnedFd, std::vec::IntoIter<(PathBuf, OsString)>)> =
            vec![(top, children.into_iter())];
        while let Some((dir, names)) = stack.last_mut() {
            let Some((rel, name)) = names.next() else {
                stack.pop();
                continue;
            };
            if stop_after.is_some_and(|s| rel.as_path() > s) {
                // Walk order is increasing: everything left lies past it too.
                return Err(Stop);
            }
            let stat = match rustix::fs::statat(&*dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) => continue, // vanished
                Err(e) => {
                    m.cannot_examine(&rel, e);
                    continue;
                }
            };
            let id = (stat.st_dev as u64, stat.st_ino as u64);
            if self.skip.iter().any(|(path, at)| *path == rel && *at == id) {
                continue;
            }
            if m.visited >= self.limits.entries {
                m.frontier = Some(last.clone());
                return Err(Stop);
            }
            m.visited += 1;
            let file_type = FileType::from_raw_mode(stat.st_mode as _);
            if file_type == FileType::Directory {
                *last = rel.clone();
                let sub = match rustix::fs::openat(&*dir, &name, dir_flags(), Mode::empty()) {
                    Ok(sub) => sub,
                    Err(Errno::NOENT) => continue,
                    Err(e) => {
                        m.cannot_examine(&rel, e);
                        continue;
                    }
                };
                match self.children(&rel, &sub, m) {
                    Some(children) => stack.push((sub, children.into_iter())),
                    None => {
                        // Too many entries to read within the bound: nothing
                        // inside this directory counts as seen.
                        m.frontier = Some(last.clone());
                        return Err(Stop);
                    }
                }
                continue;
            }
            let kind = match file_type {
                FileType::RegularFile => Kind::File,
                FileType::Symlink => Kind::Symlink,
                _ => {
                    *last = rel; // sockets, pipes, devices: not artifacts
                    continue;
                }
            };
            let mut entry = Entry::from_stat(&stat, kind);
            if let Some(clock) = hash {
                entry.racy = clock.is_none_or(|c| entry.mtime >= c || entry.ctime >= c);
                let room = self.limits.bytes.saturating_sub(m.hashed);
                match content_hash(&*dir, &name, kind, room) {
                    Hashed::Done(digest, read) => {
                        m.hashed += read;
                        entry.hash = Some(digest);
                        if read != entry.size {
                            entry.racy = true; // it changed while we read it
                        }
                    }
                    Hashed::OverBudget => {
                        m.frontier = Some(last.clone());
                        return Err(Stop);
                    }
                    Hashed::Unreadable(e) => m.cannot_examine(&rel, e),
                }
            }
            m.entries.insert(rel.clone(), entry);
            *last = rel;
        }
        Ok(())
    }

    /// The sorted children of an open directory (relative path and name),
    /// or `None` when reading them would pass the entry bound. An
    /// unreadable directory has none, and says so.
    fn children(
        &self,
        rel: &Path,
        dir: &OwnedFd,
        m: &mut Manifest,
    ) -> Option<Vec<(PathBuf, OsString)>> {
        let mut read = match rustix::fs::Dir::read_from(dir) {
            Ok(read) => read,
            Err(e) => {
                m.cannot_examine(rel, e);
                return Some(Vec::new());
            }
        };
        let room = self.limits.entries.saturating_sub(m.visited);
        let mut names = Vec::new();
        while let Some(entry) = read.read() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    m.cannot_examine(rel, e);
                    break;
                }
            };
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." || name == ".git" {
                continue;
            }
            if names.len() >= room {
                return None;
            }
            names.push(name.to_os_string());
        }
        names.sort();
        Some(names.into_iter().map(|n| (rel.join(&n), n)).collect())
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl Manifest {
    /// Records an entry the walk could not examine: never a silent skip.
    fn cannot_examine(&mut self, rel: &Path, e: Errno) {
        self.unreadable += 1;
        if self.unexamined.len() < UNEXAMINED_NAMED {
            self.unexamined.push(format!("{} ({e})", rel.display()));
        }
    }
}

/// How many unexaminable paths a manifest names (the rest are counted).
const UNEXAMINED_NAMED: usize = 8;

enum Hashed {
    Done([u8; 32], u64),
    OverBudget,
    Unreadable(Errno),
}

/// Hashes a file's content (or a link's target), named `name` in the open
/// folder `dir`, reading at most `room` bytes. The file is opened without
/// following a link swapped in since it was listed, and without blocking on
/// a fifo swapped in.
fn content_hash(dir: &OwnedFd, name: &OsStr, kind: Kind, room: u64) -> Hashed {
    let mut hasher = Sha256::new();
    match kind {
        Kind::Symlink => {
            let target = match rustix::fs::readlinkat(dir, name, Vec::new()) {
                Ok(target) => target,
                Err(e) => return Hashed::Unreadable(e),
            };
            let bytes = target.as_bytes();
            if bytes.len() as u64 > room {
                return Hashed::OverBudget;
            }
            hasher.update(bytes);
            Hashed::Done(hasher.finalize().into(), bytes.len() as u64)
        }
        Kind::File => {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let file = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => fs::File::from(fd),
                Err(e) => return Hashed::Unreadable(e),
            };
            // One byte past the room tells "exactly full" from "too big".
            let mut reader = file.take(room.saturating_add(1));
            let mut buf = vec![0u8; 64 * 1024];
            let mut read = 0u64;
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        read += n as u64;
                        if read > room {
                            return Hashed::OverBudget;
                        }
                        hasher.update(&buf[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Hashed::Unreadable(Errno::from_io_error(&e).unwrap_or(Errno::IO));
                    }
                }
            }
            Hashed::Done(hasher.finalize().into(), read)
        }
    }
}

/// Opens the folder holding `rel` (relative to `root`) one component at a
/// time, so no path length limits it; returns it and the last name.
fn open_parent(root: &Path, rel: &Path) -> Option<(OwnedFd, OsString)> {
    let name = rel.file_name()?.to_os_string();
    let mut dir = rustix::fs::open(root, dir_flags(), Mode::empty()).ok()?;
    for part in rel.parent()?.components() {
        let std::path::Component::Normal(part) = part else {
            return None;
        };
        dir = rustix::fs::openat(&dir, part, dir_flags(), Mode::empty()).ok()?;
    }
    Some((dir, name))
}

/// Hashes files of the walk after, on demand and once, within a byte budget.
#[derive(Debug)]
pub(crate) struct Rehash<'a> {
    root: &'a Path,
    budget: u64,
    /// Bytes hashed so far.
    pub(crate) used: u64,
    /// The budget ran out: some comparisons could not be decided by hash.
    pub(crate) exhausted: bool,
    cache: HashMap<PathBuf, Option<[u8; 32]>>,
}

impl<'a> Rehash<'a> {
    pub(crate) fn new(root: &'a Path, budget: u64) -> Self {
        Rehash {
            root,
            budget,
            used: 0,
            exhausted: false,
            cache: HashMap::new(),
        }
    }

    fn get(&mut self, rel: &Path, entry: &Entry) -> Option<[u8; 32]> {
        if let Some(known) = self.cache.get(rel) {
            return *known;
        }
        let room = self.budget.saturating_sub(self.used);
        let hashed = match open_parent(self.root, rel) {
            Some((dir, name)) => content_hash(&dir, &name, entry.kind, room),
            None => Hashed::Unreadable(Errno::NOENT),
        };
        let digest = match hashed {
            Hashed::Done(digest, read) => {
                self.used += read;
                Some(digest)
            }
            Hashed::OverBudget => {
                self.exhausted = true;
                None
            }
            Hashed::Unreadable(_) => None,
        };
        self.cache.insert(rel.to_path_buf(), digest);
        digest
    }
}

/// The difference the run made, sorted by path, and how many files were
/// reported modified only because their content could not be hashed.
pub(crate) fn diff(
    before: &Manifest,
    after: &Manifest,
    rehash: &mut Rehash<'_>,
) -> (Vec<(PathBuf, Change)>, usize) {
    let limit = match (&before.frontier, &after.frontier) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.as_ref().or(b.as_ref()),
    };
    let seen = |p: &Path| limit.is_none_or(|f| p <= f.as_path());

    let mut changes = Vec::new();
    let mut uncertain = 0;
    let mut deleted: Vec<(&PathBuf, &Entry)> = Vec::new();
    for (path, was) in before.entries.iter().filter(|(p, _)| seen(p)) {
        match after.entries.get(path) {
            None => deleted.push((path, was)),
            Some(now) => {
                if now.kind != was.kind || now.size != was.size {
                    changes.push((path.clone(), Change::Modified));
                } else if was.racy || !was.same_stat(now) {
                    match (was.hash, rehash.get(path, now)) {
                        (Some(a), Some(b)) if a == b => {}
                        (Some(_), Some(_)) => changes.push((path.clone(), Change::Modified)),
                        _ => {
                            uncertain += 1;
                            changes.push((path.clone(), Change::Modified));
                        }
                    }
                }
            }
        }
    }
    let created: Vec<(&PathBuf, &Entry)> = after
        .entries
        .iter()
        .filter(|(p, _)| seen(p) && !before.entries.contains_key(*p))
        .collect();

    // Renames: the same inode and size at a new path (confirmed by hash when
    // the old content's hash is known, so a reused inode is not a rename), or
    // equal content hashes.
    let mut taken = vec![false; deleted.len()];
    let mut renamed = vec![None; created.len()];
    let by_inode: HashMap<(u64, u64), usize> = deleted
        .iter()
        .enumerate()
        .map(|(i, (_, e))| ((e.dev, e.ino), i))
        .collect();
    for (c, (path, now)) in created.iter().enumerate() {
        let Some(&d) = by_inode.get(&(now.dev, now.ino)) else {
            continue;
        };
        let was = deleted[d].1;
        if taken[d] || was.kind != now.kind || was.size != now.size {
            continue;
        }
        let same = match was.hash {
            Some(h) => rehash.get(path, now) == Some(h),
            None => true,
        };
        if same {
            taken[d] = true;
            renamed[c] = Some(d);
        }
    }
    let mut by_content: HashMap<(Kind, u64, [u8; 32]), Vec<usize>> = HashMap::new();
    for (d, (_, was)) in deleted.iter().enumerate() {
        if let (false, Some(h)) = (taken[d], was.hash) {
            by_content
                .entry((was.kind, was.size, h))
                .or_default()
                .push(d);
        }
    }
    let sizes: std::collections::HashSet<u64> = by_content.keys().map(|(_, s, _)| *s).collect();
    for (c, (path, now)) in created.iter().enumerate() {
        if renamed[c].is_some() || !sizes.contains(&now.size) {
            continue;
        }
        let Some(h) = rehash.get(path, now) else {
            continue;
        };
        if let Some(candidates) = by_content.get_mut(&(now.kind, now.size, h)) {
            if let Some(pos) = candidates.iter().position(|&d| !taken[d]) {
                let d = candidates.remove(pos);
                taken[d] = true;
                renamed[c] = Some(d);
            }
        }
    }

    for (c, (path, _)) in created.iter().enumerate() {
        let change = match renamed[c] {
            Some(d) => Change::Renamed {
                from: deleted[d].0.clone(),
            },
            None => Change::Created,
        };
        changes.push(((*path).clone(), change));
    }
    for (d, (path, _)) in deleted.iter().enumerate() {
        if !taken[d] {
            changes.push(((*path).clone(), Change::Deleted));
        }
    }
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    (changes, uncertain)
}

/// The trees to walk: relative to `root`, sorted, none inside another.
pub(crate) fn disjoint(mut trees: Vec<PathBuf>) -> Vec<PathBuf> {
    trees.sort();
    trees.dedup();
    let mut out: Vec<PathBuf> = Vec::with_capacity(trees.len());
    for tree in trees {
        // Sorted component-wise, an ancestor comes right before its descendants.
        if out.last().is_some_and(|prev| tree.starts_with(prev)) {
            continue;
        }
        out.push(tree);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walker<'a>(root: &'a Path, trees: &'a [PathBuf], limits: Limits) -> Walker<'a> {
        Walker {
            root,
            trees,
            skip: &[],
            limits,
        }
    }

    const WIDE: Limits = Limits {
        entries: usize::MAX,
        bytes: u64::MAX,
    };

    #[test]
    fn nested_trees_are_walked_once() {
        let trees = disjoint(vec!["a/b".into(), "a".into(), "ab".into(), "a".into()]);
        assert_eq!(trees, [PathBuf::from("a"), PathBuf::from("ab")]);
        let trees = disjoint(vec!["".into(), "x".into()]);
        assert_eq!(trees, [PathBuf::from("")]);
    }

    #[test]
    fn walk_order_is_path_order() {
        let dir = tempfile::tempdir().unwrap();
        for p in ["t/a/x", "t/a-c", "t/b", "t/a/y/z"] {
            let p = dir.path().join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "1").unwrap();
        }
        let trees = [PathBuf::from("t")];
        let m = walker(dir.path(), &trees, WIDE).before(None);
        let paths: Vec<_> = m.entries.keys().cloned().collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        assert_eq!(paths.len(), 4);
        assert_eq!(m.hashed, 4);
    }

    #[test]
    fn truncated_walks_compare_only_what_both_saw() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["a", "b", "c"] {
            for f in 0..3 {
                let p = dir.path().join(format!("t/{d}/f{f}"));
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(p, "x").unwrap();
            }
        }
        let trees = [PathBuf::from("t")];
        let limits = Limits {
            entries: 6,
            bytes: u64::MAX,
        };
        let w = walker(dir.path(), &trees, limits);
        let before = w.before(None);
        // t, t/a, its three files, t/b; t/b's entries do not fit.
        assert_eq!(before.visited, 6);
        assert_eq!(before.frontier.as_deref(), Some(Path::new("t/b")));
        fs::write(dir.path().join("t/a/f1"), "changed").unwrap();
        fs::write(dir.path().join("t/c/f0"), "changed").unwrap();
        fs::remove_file(dir.path().join("t/c/f2")).unwrap();
        let after = w.after(before.frontier.as_deref());
        let mut rehash = Rehash::new(dir.path(), u64::MAX);
        let (changes, _) = diff(&before, &after, &mut rehash);
        assert_eq!(changes, [(PathBuf::from("t/a/f1"), Change::Modified)]);
    }

    #[test]
    fn racy_files_are_hashed_and_settled_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("t")).unwrap();
        fs::write(dir.path().join("t/f"), "x").unwrap();
        let trees = [PathBuf::from("t")];
        let w = walker(dir.path(), &trees, WIDE);
        for (clock, rehashed) in [(Some((i64::MIN, 0)), 1), (Some((i64::MAX, 0)), 0)] {
            let before = w.before(clock);
            let after = w.after(None);
            let mut rehash = Rehash::new(dir.path(), u64::MAX);
            let (changes, _) = diff(&before, &after, &mut rehash);
            assert!(changes.is_empty());
            assert_eq!(rehash.used, rehashed, "clock {clock:?}");
        }
    }

    #[test]
    fn byte_bound_stops_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        fs::create_dir(&t).unwrap();
        for i in 0..5 {
            fs::write(t.join(format!("f{i}")), [0u8; 100]).unwrap();
        }
        let trees = [PathBuf::from("t")];
        let limits = Limits {
            entries: usize::MAX,
            bytes: 250,
        };
        let m = walker(dir.path(), &trees, limits).before(None);
        assert_eq!(m.hashed, 200);
        assert_eq!(m.entries.len(), 2);
        assert_eq!(m.frontier.as_deref(), Some(Path::new("t/f1")));
    }
}
