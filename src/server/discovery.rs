//! The discovery file (`ROOT/.writ/serve.json`, mode 0600) and the user's
//! state directory.

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::files::atomic::Dir;
use crate::{Error, Result};

pub use crate::wire::discovery::Discovery;

/// The canonical form of a folder, or `InvalidPath`.
pub(crate) fn canonical_dir(dir: &Path) -> Result<PathBuf> {
    let canonical = std::fs::canonicalize(dir)
        .map_err(|e| Error::invalid(dir, format!("the folder cannot be resolved ({e})")))?;
    if !canonical.is_dir() {
        return Err(Error::invalid(dir, "it is not a folder"));
    }
    Ok(canonical)
}

/// `ROOT/.writ/serve.json`, or `serve.json` in `state_dir` when given.
pub fn discovery_path(root: &Path, state_dir: Option<&Path>) -> PathBuf {
    match state_dir {
        Some(dir) => dir.join("serve.json"),
        None => root.join(".writ").join("serve.json"),
    }
}

/// The user's state folder for a workspace: `$XDG_STATE_HOME/writ/<hash of
/// ROOT>`, else `~/.local/state/writ/<hash>`.
pub fn state_dir(root: &Path) -> Result<PathBuf> {
    use sha2::Digest as _;
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local").join("state"),
            None => {
                return Err(Error::History {
                    reason: "neither XDG_STATE_HOME nor HOME is set; pass --history-dir".into(),
                });
            }
        },
    };
    let digest = sha2::Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Ok(base.join("writ").join(hash))
}

/// The default history folder of a workspace: `<state dir>/history`.
pub fn default_history_dir(root: &Path) -> Result<PathBuf> {
    Ok(state_dir(root)?.join("history"))
}

/// Reads a discovery file for a client, as SPEC §15 says every client
/// must: the file is not a symlink, belongs to this user and is readable by
/// no one else (mode 0600), and the URL it names is loopback (or a Unix
/// socket). A file that breaks a rule is refused with the reason: a token
/// is never sent where a planted file points.
pub fn read_discovery(path: &Path) -> Result<Discovery> {
    crate::wire::discovery::read_trusted(path)
}

/// Who besides its owner may reach an existing private folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// No one (mode 0700 or stricter): `ROOT/.writ`, which lies in the
    /// workspace every agent works in (SPEC §13).
    OwnerOnly,
    /// Others may read or enter it, never write to it: a folder the user
    /// chose (`--state-dir`, the state folder), whose files are 0600 anyway.
    NoOtherWriters,
}

impl Reach {
    /// The reach a folder is held to: `.writ` is the workspace's.
    fn of(dir: &Path) -> Reach {
        if dir.file_name().is_some_and(|n| n == ".writ") {
            Reach::OwnerOnly
        } else {
            Reach::NoOtherWriters
        }
    }

    /// The mode bits an existing folder may not have.
    fn forbidden(self) -> u32 {
        match self {
            Reach::OwnerOnly => 0o077,
            Reach::NoOtherWriters => 0o022,
        }
    }
}

/// Makes (or checks) the folder a private file goes in, and returns its
/// handle: created mode 0700 (with any missing folders above it) without
/// following a symlink; an existing one must be a real folder of this user
/// that no one else can write to — nor read, for `.writ` ([`Reach`]).
fn private_folder(dir: &Path) -> Result<OwnedFd> {
    use std::os::unix::fs::DirBuilderExt as _;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        Some(_) => Path::new("."),
        None => Path::new("/"),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(|e| Error::io("create the folder", parent, e))?;
    let name = dir
        .file_name()
        .ok_or_else(|| Error::invalid(dir, "it does not name a folder"))?;
    let parent_fd = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open the folder", parent, e.into()))?;
    match rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(Error::io("create the folder", dir, e.into())),
    }
    let refuse = |why: String| Error::Unavailable {
        reason: format!(
            "{} {why}; writ keeps the session token there and will not use it — remove it \
             (or fix it: a folder of this user, mode 0700) and start again",
            dir.display()
        ),
    };
    let fd = match rustix::fs::openat(
        &parent_fd,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOTDIR) => {
            return Err(refuse("is a symlink or not a folder".into()));
        }
        Err(e) => return Err(Error::io("open the folder", dir, e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| Error::io("inspect", dir, e.into()))?;
    let uid = rustix::process::geteuid().as_raw();
    if stat.st_uid != uid {
        return Err(refuse(format!(
            "belongs to uid {}, not to this user ({uid})",
            stat.st_uid
        )));
    }
    if stat.st_mode & Reach::of(dir).forbidden() != 0 {
        return Err(refuse(format!(
            "has mode {:04o}: others could read or replace what is in it",
            stat.st_mode & 0o7777
        )));
    }
    Ok(fd)
}

/// Writes `bytes` as `name` in the checked folder `dir` by the one atomic
/// write every file of writ's goes through
/// (`files::atomic`): a temporary name opened `O_EXCL|O_NOFOLLOW` (nothing
/// planted there can redirect it), mode 0600, synced, then renamed into
/// place.
fn write_private_at(dir: &Dir, name: &str, bytes: &[u8]) -> Result<()> {
    dir.replace(OsStr::new(name), bytes, Some(0o600), true, None)
        .map(drop)
}

/// The handle of a folder [`private_folder`] made or checked.
fn checked_folder(dir: &Path) -> Result<Dir> {
    Ok(Dir::root(Arc::new(private_folder(dir)?), dir.to_path_buf()))
}

/// Writes `bytes` to `path`, readable by its owner only, atomically: the
/// folder is made mode 0700 (with any missing folders above it) or checked
/// to be a real folder of this user that no one else can write to, and the
/// file is written by a random temporary name opened `O_EXCL|O_NOFOLLOW`,
/// then renamed over `path`. What writ keeps for a user (the hook's state,
/// the discovery file) goes through here.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let state = dir.path().join("writ").join("hooks").join("s.json");
/// writ::server::write_private(&state, b"{}").unwrap();
/// assert_eq!(writ::server::read_private(&state).unwrap().as_deref(), Some("{}"));
/// ```
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::invalid(path, "it does not name a file"))?;
    write_private_at(&checked_folder(dir)?, name, bytes)
}

/// Reads a file written by [`write_private`] (at most 1 MiB): refused when
/// it is a symlink, another user's, or readable by others; `Ok(None)` when
/// it does not exist.
pub fn read_private(path: &Path) -> Result<Option<String>> {
    crate::wire::discovery::read_private(path, 1 << 20)
}

/// Writes the discovery file atomically, readable by its owner only, in a
/// folder made or checked as [`private_folder`] says, beside a
/// `.gitignore` of `*` so neither it nor anything else writ keeps there is
/// ever committed.
pub(crate) fn write(path: &Path, discovery: &Discovery) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::invalid(path, "it does not name a file"))?;
    let text = serde_json::to_vec_pretty(discovery).map_err(|e| Error::Unavailable {
        reason: format!("cannot encode the discovery file ({e})"),
    })?;
    let folder = checked_folder(dir)?;
    write_private_at(&folder, ".gitignore", b"*\n")?;
    write_private_at(&folder, name, &text)
}

/// Removes the discovery file if it is still this server's (a newer server
/// may have replaced it).
pub(crate) fn remove(path: &Path, token: &str) {
    if let Ok(found) = read_discovery(path) {
        if found.token == token && found.pid == std::process::id() {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(path = %path.display(), "could not remove the discovery file: {e}");
            }
        }
    }
}

/// The session token kept in `path`, made (and written, mode 0600) when the
/// file does not exist yet.
pub(crate) fn token_from_file(path: &Path) -> Result<String> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.trim().to_string();
            super::auth::check_token_shape(&token)?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = crate::random::hex(32)?;
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| Error::io("create the folder", dir, e))?;
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| Error::io("create", path, e))?;
            file.write_all(token.as_bytes())
                .map_err(|e| Error::io("write", path, e))?;
            Ok(token)
        }
        Err(e) => Err(Error::io("read", path, e)),
    }
}
