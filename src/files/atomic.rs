//! Directory handles and the atomic replace.
//!
//! Every file operation reaches its file through a chain of directory
//! handles opened from the root, one component at a time, with `O_NOFOLLOW`
//! and `O_DIRECTORY`. The key was resolved (symlinks followed) before
//! admission, so every folder on the way is a real folder; if one has been
//! swapped for a symlink since, opening it fails (`ELOOP`/`ENOTDIR`) and the
//! operation stops with nothing written. The file itself is opened relative
//! to its folder's handle with `O_NOFOLLOW` too, the temp file is created
//! with `O_EXCL` in that folder, and `renameat` replaces the name inside the
//! same handle — so no path swapped between check and use can redirect a
//! write outside the root.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};

/// The I/O steps of a transactional write, in order. Fault injection (a
/// testing aid, see [`Files::on_write_step`](crate::Files::on_write_step))
/// can fail any of them.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteStep {
    /// Creating the temp file beside the target.
    CreateTemp,
    /// Writing the new content; the hook runs after the first half is
    /// written, so a failure here leaves a torn temp file behind to clean.
    WriteData,
    /// fsync of the temp file (`Durability::Machine` only).
    SyncFile,
    /// Renaming the temp file over the target (also a rename's `renameat`
    /// and a delete's `unlinkat`).
    Rename,
    /// fsync of the folder after the rename (`Durability::Machine` only).
    SyncDir,
}

/// A hook run before each step; an `Err` is treated as that step's failure.
pub(crate) type StepHook = Arc<dyn Fn(WriteStep) -> io::Result<()> + Send + Sync>;

fn step(hook: Option<&StepHook>, s: WriteStep) -> io::Result<()> {
    match hook {
        Some(h) => h(s),
        None => Ok(()),
    }
}

/// What a name in a folder is, without following a symlink.
#[derive(Debug)]
pub(crate) enum Entry {
    Missing,
    /// A regular file, opened read-only, with its metadata.
    File(File, Metadata),
    Symlink,
    Dir,
    /// A fifo, socket or device.
    Other,
}

/// An open folder handle and its path (for messages only).
#[derive(Debug)]
pub(crate) struct Dir {
    fd: Arc<OwnedFd>,
    pub(crate) path: PathBuf,
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn swapped(path: &Path) -> Error {
    Error::invalid(
        path,
        "a component on the way is not a folder (a file, or a symlink swapped in after the \
         path was resolved); nothing was done — check the path and retry",
    )
}

/// Opens a root folder (a grant root or read-only root).
pub(crate) fn open_root(base: &Path) -> Result<Arc<OwnedFd>> {
    rustix::fs::open(base, dir_flags(), Mode::empty())
        .map(Arc::new)
        .map_err(|e| Error::io("open the folder", base, e.into()))
}

/// Opens the folder that holds `key_path`, walking from `base` (a grant root
/// or read-only root the key lies under, open as `base_fd`). Missing folders
/// are created when `create` is set; otherwise a missing folder gives
/// `Ok(None)`.
pub(crate) fn open_parent(
    base: &Path,
    base_fd: Arc<OwnedFd>,
    key_path: &Path,
    create: bool,
    durable: bool,
) -> Result<Option<(Dir, OsString)>> {
    let mut names: Vec<&OsStr> = Vec::new();
    for component in key_path.components().skip(base.components().count()) {
        match component {
            Component::Normal(name) => names.push(name),
            _ => return Err(Error::invalid(key_path, "it is not a resolved path")),
        }
    }
    let Some(file_name) = names.pop() else {
        return Err(Error::invalid(
            key_path,
            "it is a folder (the root itself); name a file inside it",
        ));
    };
    let mut fd = base_fd;
    let mut path = base.to_path_buf();
    for name in names {
        path.push(name);
        let next = match rustix::fs::openat(&*fd, name, dir_flags(), Mode::empty()) {
            Ok(next) => next,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&*fd, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(Error::io("create the folder", &path, e.into())),
                }
                if durable {
                    rustix::fs::fsync(&fd)
                        .map_err(|e| Error::io("sync the folder above", &path, e.into()))?;
                }
                rustix::fs::openat(&fd, name, dir_flags(), Mode::empty()).map_err(|e| match e {
                    Errno::LOOP | Errno::NOTDIR => swapped(key_path),
                    e => Error::io("open the folder", &path, e.into()),
                })?
            }
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(swapped(key_path)),
            Err(e) => return Err(Error::io("open the folder", &path, e.into())),
        };
        fd = Arc::new(next);
    }
    Ok(Some((Dir { fd, path }, file_name.to_os_string())))
}

/// The permission bits new content keeps from the file it replaces: all
/// but set-user-id and set-group-id (an agent's content must never become
/// a privileged program).
const KEPT_BITS: u32 = 0o1777;

/// The process's umask, for the mode of a new file. Read from
/// `/proc/self/status` where it is available (reading it with `umask(2)`
/// means setting it, which races with other threads); else the usual 022.
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("Umask:"))?;
                u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).ok()
            })
            .unwrap_or(0o022)
            & 0o777
    })
}

/// Renames `from` in `from_dir` to `to` in `to_dir` unless `to` exists
/// (`AlreadyExists`), atomically.
fn rename_noreplace(from_dir: &Dir, from: &OsStr, to_dir: &Dir, to: &OsStr) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    match rustix::fs::renameat_with(
        &*from_dir.fd,
        from,
        &*to_dir.fd,
        to,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => return Ok(()),
        // The file system does not support the flag: link + unlink.
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {}
        Err(e) => return Err(e.into()),
    }
    // `linkat` never replaces an existing name; the old name then goes.
    rustix::fs::linkat(&*from_dir.fd, from, &*to_dir.fd, to, AtFlags::empty())?;
    let _ = rustix::fs::unlinkat(&*from_dir.fd, from, AtFlags::empty());
    Ok(())
}

/// A process-wide counter that keeps temp names unique between threads.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The prefix of every temp file writ creates; a crash (not an error) can
/// leave one behind, never in place of the target.
pub(crate) const TEMP_PREFIX: &str = ".writ-tmp-";

impl Dir {
    fn at(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// What `name` is, without following a symlink; a regular file comes
    /// back opened (`O_NOFOLLOW | O_NONBLOCK`, so a fifo swapped in cannot
    /// block us) together with its metadata.
    pub(crate) fn entry(&self, name: &OsStr) -> Result<Entry> {
        let stat = match rustix::fs::statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(Entry::Missing),
            Err(e) => return Err(Error::io("inspect", self.at(name), e.into())),
        };
        match FileType::from_raw_mode(stat.st_mode as _) {
            FileType::RegularFile => {}
            FileType::Symlink => return Ok(Entry::Symlink),
            FileType::Directory => return Ok(Entry::Dir),
            _ => return Ok(Entry::Other),
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&*self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(Entry::Missing),
            Err(Errno::LOOP) => return Ok(Entry::Symlink),
            Err(e) => return Err(Error::io("open", self.at(name), e.into())),
        };
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| Error::io("inspect", self.at(name), e))?;
        Ok(if meta.is_file() {
            Entry::File(file, meta)
        } else if meta.is_dir() {
            Entry::Dir
        } else {
            Entry::Other
        })
    }

    fn create_temp(&self, hook: Option<&StepHook>) -> io::Result<(File, OsString)> {
        step(hook, WriteStep::CreateTemp)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut attempts = 0;
        loop {
            // Relaxed: the counter only has to hand out distinct numbers.
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = OsString::from(format!("{TEMP_PREFIX}{}-{n}", std::process::id()));
            // 0600: the new content is nobody else's to read until it has
            // its final mode, given just before the rename.
            match rustix::fs::openat(&*self.fd, &name, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((File::from(fd), name)),
                Err(Errno::EXIST) if attempts < 16 => attempts += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Replaces `name` with `data` atomically: temp file in this folder,
    /// write, (fsync), `renameat` over the target, (fsync the folder).
    /// `mode` is the mode to keep (the old file's, without its set-user-id
    /// and set-group-id bits: new content never inherits them); a new file
    /// gets the default mode under the umask. Returns the new file's mode.
    ///
    /// `mode: None` means the file did not exist: then the rename never
    /// replaces a file that appeared meanwhile (`RENAME_NOREPLACE`, or link +
    /// unlink where that is missing) and such a file is `Error::NotRead`.
    ///
    /// Any failure before the rename removes the temp file and leaves the
    /// target as it was. A failed folder fsync after the rename is reported
    /// as an error that says the new content is in place.
    pub(crate) fn replace(
        &self,
        name: &OsStr,
        data: &[u8],
        mode: Option<u32>,
        durable: bool,
        hook: Option<&StepHook>,
    ) -> Result<u32> {
        let target = self.at(name);
        let (mut file, temp) = self
            .create_temp(hook)
            .map_err(|e| Error::io("create a temporary file beside", &target, e))?;
        let written = (|| -> std::result::Result<u32, (&'static str, io::Error)> {
            let write = |e| ("write the temporary file for", e);
            if hook.is_some() {
                // Two halves, so a fault injected here leaves a torn temp.
                let half = data.len() / 2;
                file.write_all(&data[..half]).map_err(write)?;
                step(hook, WriteStep::WriteData).map_err(write)?;
                file.write_all(&data[half..]).map_err(write)?;
            } else {
                file.write_all(data).map_err(write)?;
            }
            let new_mode = match mode {
                Some(mode) => mode & KEPT_BITS,
                None => 0o666 & !umask(),
            };
            rustix::fs::fchmod(&file, Mode::from_raw_mode(new_mode))
                .map_err(|e| ("give the mode to", e.into()))?;
            if durable {
                let sync = |e| ("sync the temporary file for", e);
                step(hook, WriteStep::SyncFile).map_err(sync)?;
                file.sync_all().map_err(sync)?;
            }
            let rename = |e| ("replace", e);
            step(hook, WriteStep::Rename).map_err(rename)?;
            if mode.is_some() {
                rustix::fs::renameat(&*self.fd, &temp, &*self.fd, name)
                    .map_err(|e| rename(e.into()))?;
            } else {
                rename_noreplace(self, &temp, self, name).map_err(rename)?;
            }
            Ok(new_mode)
        })();
        drop(file);
        let new_mode = match written {
            Ok(mode) => mode,
            Err((op, e)) => {
                // Best effort: the error that matters is the one above.
                let _ = rustix::fs::unlinkat(&*self.fd, &temp, AtFlags::empty());
                if e.kind() == io::ErrorKind::AlreadyExists {
                    // Someone created the file while we were creating it:
                    // their content is unread, so it is not ours to replace.
                    return Err(Error::NotRead { path: target });
                }
                return Err(Error::io(op, target, e));
            }
        };
        self.sync(durable, hook, name)?;
        Ok(new_mode)
    }

    /// fsync of the folder after its entries changed.
    fn sync(&self, durable: bool, hook: Option<&StepHook>, name: &OsStr) -> Result<()> {
        if !durable {
            return Ok(());
        }
        step(hook, WriteStep::SyncDir)
            .and_then(|()| rustix::fs::fsync(&*self.fd).map_err(io::Error::from))
            .map_err(|e| {
                Error::io(
                    "sync the folder (the change is already in place, but may not survive a power cut) after changing",
                    self.at(name),
                    e,
                )
            })
    }

    /// Removes `name` (a file or a symlink, never a folder).
    pub(crate) fn unlink(
        &self,
        name: &OsStr,
        durable: bool,
        hook: Option<&StepHook>,
    ) -> Result<()> {
        step(hook, WriteStep::Rename)
            .and_then(|()| {
                rustix::fs::unlinkat(&*self.fd, name, AtFlags::empty()).map_err(io::Error::from)
            })
            .map_err(|e| Error::io("delete", self.at(name), e))?;
        self.sync(durable, hook, name)
    }

    /// Renames `name` in this folder to `to_name` in `to` (a symlink itself
    /// rather than its target). `replace`: the destination existed and may
    /// be replaced; otherwise one that appeared meanwhile is never replaced
    /// (`Error::NotRead`).
    pub(crate) fn rename_to(
        &self,
        name: &OsStr,
        to: &Dir,
        to_name: &OsStr,
        replace: bool,
        durable: bool,
        hook: Option<&StepHook>,
    ) -> Result<()> {
        step(hook, WriteStep::Rename)
            .and_then(|()| {
                if replace {
                    rustix::fs::renameat(&*self.fd, name, &*to.fd, to_name).map_err(io::Error::from)
                } else {
                    rename_noreplace(self, name, to, to_name)
                }
            })
            .map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists && !replace {
                    Error::NotRead {
                        path: to.at(to_name),
                    }
                } else {
                    Error::io("rename", self.at(name), e)
                }
            })?;
        to.sync(durable, hook, to_name)?;
        if to.path != self.path {
            self.sync(durable, hook, name)?;
        }
        Ok(())
    }
}

/// Replaces the file at `path` with `bytes`, whole or not at all, by the
/// same steps as every file tool's write: a temporary
/// file created `O_EXCL|O_NOFOLLOW` mode 0600 beside it (nothing planted
/// at its name can redirect the write), the content, the file's final
/// `mode` (set-user-id and set-group-id dropped), then a rename over `path`;
/// with `durable`, the file and its folder are synced too. On failure the
/// temporary file is removed and `path` is as it was.
///
/// For files writ keeps for its user (the history store, a client's
/// configuration), not a grant root's: the folder is opened by its path,
/// following a symlink the user put there. It must exist.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("settings.json");
/// writ::write_atomic(&file, b"{}", 0o600, false).unwrap();
/// assert_eq!(std::fs::read(&file).unwrap(), b"{}");
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, durable: bool) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::invalid(path, "it does not name a file"))?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let fd = rustix::fs::open(
        folder,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open the folder", folder, e.into()))?;
    Dir::root(Arc::new(fd), folder.to_path_buf())
        .replace(name, bytes, Some(mode), durable, None)
        .map(drop)
}

/// One name in a folder, as the folder's own listing gives it.
#[derive(Debug)]
pub(crate) struct Listed {
    pub(crate) name: OsString,
    pub(crate) kind: FileType,
}

impl Dir {
    /// Another handle on the same open folder.
    pub(crate) fn again(&self) -> Dir {
        Dir {
            fd: self.fd.clone(),
            path: self.path.clone(),
        }
    }

    /// The handle of a root folder itself (a grant or read-only root).
    pub(crate) fn root(fd: Arc<OwnedFd>, path: PathBuf) -> Dir {
        Dir { fd, path }
    }

    /// Opens the folder `name` in this one, never through a symlink:
    /// `Ok(None)` when nothing has that name, an error when it is not a
    /// real folder.
    pub(crate) fn open_dir(&self, name: &OsStr) -> Result<Option<Dir>> {
        let path = self.at(name);
        match rustix::fs::openat(&*self.fd, name, dir_flags(), Mode::empty()) {
            Ok(fd) => Ok(Some(Dir {
                fd: Arc::new(fd),
                path,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => Err(Error::invalid(
                path,
                "it is not a folder (a file, or a symlink, which folder tools never follow)",
            )),
            Err(e) => Err(Error::io("open the folder", path, e.into())),
        }
    }

    /// Makes the folder `name` here; `false` when a folder is already there.
    pub(crate) fn make_dir(&self, name: &OsStr, durable: bool) -> Result<bool> {
        let path = self.at(name);
        match rustix::fs::mkdirat(&*self.fd, name, Mode::from_raw_mode(0o777)) {
            Ok(()) => {
                if durable {
                    rustix::fs::fsync(&*self.fd)
                        .map_err(|e| Error::io("sync the folder above", &path, e.into()))?;
                }
                Ok(true)
            }
            Err(Errno::EXIST) => match self.stat(name)? {
                Some(stat) if FileType::from_raw_mode(stat.st_mode as _) == FileType::Directory => {
                    Ok(false)
                }
                _ => Err(Error::invalid(
                    path,
                    "something that is not a folder already has this name",
                )),
            },
            Err(e) => Err(Error::io("create the folder", path, e.into())),
        }
    }

    /// What `name` is here, without following a symlink.
    pub(crate) fn stat(&self, name: &OsStr) -> Result<Option<rustix::fs::Stat>> {
        match rustix::fs::statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::io("inspect", self.at(name), e.into())),
        }
    }

    /// The metadata of `name` here (a symlink's own), or of this folder
    /// itself when `name` is `None`; `Ok(None)` when nothing has the name.
    pub(crate) fn metadata(&self, name: Option<&OsStr>) -> Result<Option<Metadata>> {
        let name = name.unwrap_or(OsStr::new("."));
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&*self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Error::io("inspect", self.at(name), e.into())),
        };
        File::from(fd)
            .metadata()
            .map(Some)
            .map_err(|e| Error::io("inspect", self.at(name), e))
    }

    /// The names in this folder (without `.` and `..`), sorted by bytes.
    pub(crate) fn list(&self) -> Result<Vec<Listed>> {
        let reading = rustix::fs::Dir::read_from(&*self.fd)
            .map_err(|e| Error::io("list the folder", &self.path, e.into()))?;
        let mut out = Vec::new();
        for entry in reading {
            let entry = entry.map_err(|e| Error::io("list the folder", &self.path, e.into()))?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes).to_os_string();
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                // Some file systems leave the type out of the listing.
                kind = match self.stat(&name)? {
                    Some(stat) => FileType::from_raw_mode(stat.st_mode as _),
                    None => continue,
                };
            }
            out.push(Listed { name, kind });
        }
        out.sort_by(|a, b| a.name.as_encoded_bytes().cmp(b.name.as_encoded_bytes()));
        Ok(out)
    }

    /// Renames the folder `name` here to `to_name` in `to`, never replacing
    /// anything there.
    pub(crate) fn move_dir(
        &self,
        name: &OsStr,
        to: &Dir,
        to_name: &OsStr,
        durable: bool,
    ) -> Result<()> {
        rename_noreplace(self, name, to, to_name).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Error::invalid(to.at(to_name), "the destination already exists")
            } else {
                Error::io("move", self.at(name), e)
            }
        })?;
        to.sync(durable, None, to_name)?;
        if to.path != self.path {
            self.sync(durable, None, name)?;
        }
        Ok(())
    }
}
