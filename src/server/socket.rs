//! The optional Unix socket of `writ serve` (`--socket PATH`): the same
//! routes and the same auth as loopback HTTP, reachable by the user who
//! started the server and by no one else.
//!
//! Two walls keep other users out, and each would do on its own:
//!
//! 1. **The file's mode.** Connecting to a Unix socket needs write
//!    permission on its file, and the file is 0600 from the moment it has
//!    its name (see [`bind`] for how).
//! 2. **The peer's uid.** Every accepted connection's peer credentials
//!    (`SO_PEERCRED`, fixed by the kernel when the peer connected) are
//!    compared with the server's effective uid; a connection of any other
//!    uid is closed before a byte of it is read ([`SameUid`]). This holds
//!    even if the mode is widened later, or a folder ACL lets others in.
//!
//! The token is still required on the socket: it is one more way in, not a
//! way around auth.

use std::io;
use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

use crate::{Error, Result};

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes,
/// one of them the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// An `axum` listener over a Unix socket that serves only peers of one uid.
///
/// A connection of another uid, or one whose credentials cannot be read, is
/// dropped (closed) at once and never handed to the HTTP server, so nothing
/// it sent is parsed.
#[derive(Debug)]
pub(crate) struct SameUid {
    listener: UnixListener,
    /// The uid a peer must have: the server's effective uid.
    uid: u32,
}

impl SameUid {
    /// Serves only peers whose uid is `uid`.
    pub(crate) fn new(listener: UnixListener, uid: u32) -> SameUid {
        SameUid { listener, uid }
    }
}

impl axum::serve::Listener for SameUid {
    type Io = UnixStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            // axum's own accept retries transient errors with a back-off.
            let (stream, addr) = axum::serve::Listener::accept(&mut self.listener).await;
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == self.uid => return (stream, addr),
                Ok(cred) => tracing::warn!(
                    peer_uid = cred.uid(),
                    peer_pid = ?cred.pid(),
                    "closed a socket connection from another user"
                ),
                Err(e) => tracing::warn!("closed a socket connection whose peer is unknown: {e}"),
            }
            drop(stream);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// The socket's name in the file system, removed when this is dropped if it
/// is still the same file (a later server may have replaced a file it found
/// stale, and its socket is not ours to remove).
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Where the socket is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino);
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), "could not remove the socket: {e}");
            }
        }
    }
}

fn refuse(path: &Path, kind: io::ErrorKind, why: &str) -> Error {
    Error::io("listen on", path, io::Error::new(kind, why.to_string()))
}

/// Binds the socket at `path` (mode 0600), replacing a stale socket left by
/// a server that died, and refusing anything else found there.
///
/// # Why bind elsewhere and link
///
/// `bind` creates the file with the process umask, and on Linux neither a
/// `fchmod` of the socket before `bind` (it changes the socket's own inode,
/// not the file) nor a `chmod` after it (a window) gives a 0600 file at once;
/// changing the umask is process-wide and races with every other thread.
/// So the socket is bound inside a fresh 0700 folder beside `path`, where
/// no other user can reach it, set to 0600 there, and only then given its
/// name with `link`. `link` never replaces an existing file, so a server
/// that raced us to `path` keeps its socket and we are refused; the
/// listening socket follows its file, not its first name, so clients that
/// connect to `path` reach it. The folder lives beside `path` because a
/// hard link cannot cross file systems.
pub(crate) fn bind(path: &Path, uid: u32) -> Result<(SameUid, SocketFile)> {
    let path = std::path::absolute(path).map_err(|e| Error::io("listen on", path, e))?;
    if path.to_str().is_none() {
        return Err(Error::invalid(
            &path,
            "a socket path must be UTF-8 (it is written into the discovery file)",
        ));
    }
    let (Some(dir), Some(_)) = (path.parent(), path.file_name()) else {
        return Err(Error::invalid(&path, "a socket path names a file"));
    };
    if !dir.is_dir() {
        return Err(Error::invalid(&path, "its folder does not exist"));
    }
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(refuse(
            &path,
            io::ErrorKind::InvalidInput,
            "the path is longer than a Unix socket address holds (107 bytes)",
        ));
    }
    clear_stale(&path, uid)?;

    let staging = dir.join(format!(".w{}", crate::random::hex(4)?));
    let staged = staging.join("s");
    if staged.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(refuse(
            &path,
            io::ErrorKind::InvalidInput,
            "the socket's folder path is too long (the socket is first bound in a \
             folder beside it, which needs 12 bytes more than the folder's path)",
        ));
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|e| Error::io("create the folder", &staging, e))?;
    let bound = bind_staged(&staged, &path);
    // The staging name and folder go whatever happened; the socket keeps
    // its final name (if it got one).
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    let (listener, file) = bound?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("listen on", &path, e))?;
    let listener =
        UnixListener::from_std(listener).map_err(|e| Error::io("listen on", &path, e))?;
    Ok((SameUid::new(listener, uid), file))
}

fn bind_staged(
    staged: &Path,
    path: &Path,
) -> Result<(std::os::unix::net::UnixListener, SocketFile)> {
    let listener = std::os::unix::net::UnixListener::bind(staged)
        .map_err(|e| Error::io("listen on", path, e))?;
    std::fs::set_permissions(staged, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("set the mode of", path, e))?;
    let meta = std::fs::symlink_metadata(staged).map_err(|e| Error::io("inspect", path, e))?;
    match std::fs::hard_link(staged, path) {
        Ok(()) => Ok((
            listener,
            SocketFile {
                path: path.to_path_buf(),
                dev: meta.dev(),
                ino: meta.ino(),
            },
        )),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(refuse(
            path,
            io::ErrorKind::AddrInUse,
            "another process created it while this server was starting",
        )),
        Err(e) => Err(Error::io("listen on", path, e)),
    }
}

/// Makes room at `path`: nothing there is fine; a socket of ours that no
/// one listens on (a server that was killed) is removed; anything else —
/// a live socket, another user's socket, a file, a folder, a link — is
/// refused and left alone.
fn clear_stale(path: &Path, uid: u32) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("inspect", path, e)),
    };
    if !meta.file_type().is_socket() {
        return Err(refuse(
            path,
            io::ErrorKind::AlreadyExists,
            "it exists and is not a socket; writ will not replace it",
        ));
    }
    if meta.uid() != uid {
        return Err(refuse(
            path,
            io::ErrorKind::PermissionDenied,
            "it is another user's socket",
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(refuse(
            path,
            io::ErrorKind::AddrInUse,
            "a running server listens on it; stop that server or choose another path",
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing a stale socket");
            match std::fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io("remove the stale socket", path, e)),
            }
        }
        Err(e) => Err(refuse(
            path,
            io::ErrorKind::AddrInUse,
            &format!("it is a socket that cannot be probed ({e}); writ will not replace it"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// The peer filter refuses a uid other than the one it was given. No
    /// process this test can start has another uid unless it runs as root,
    /// so the filter is told to expect a uid that is not ours and the peer
    /// is this process: the same comparison, reachable by any user. (The
    /// tests in tests/serve_socket.rs use a real peer of another uid when
    /// they run as root.)
    #[tokio::test]
    async fn a_peer_of_an_unexpected_uid_is_closed_unread() {
        let dir = tempfile::tempdir().unwrap();
        let me = rustix::process::geteuid().as_raw();
        let other = me.wrapping_add(1);
        let (mut listener, _file) = bind(&dir.path().join("s.sock"), me).unwrap();
        listener.uid = other;
        let path = dir.path().join("s.sock");
        let accepted = tokio::spawn(async move {
            // Would return only for a peer of uid `other`.
            axum::serve::Listener::accept(&mut listener).await
        });
        let mut peer = UnixStream::connect(&path).await.unwrap();
        let _ = peer
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), peer.read_to_end(&mut answer))
            .await
            .expect("the refused connection was not closed");
        assert!(
            answer.is_empty(),
            "the refused peer got {read:?}: {answer:?}"
        );
        assert!(
            !accepted.is_finished(),
            "the listener handed out the connection"
        );
        accepted.abort();
    }

    #[tokio::test]
    async fn the_socket_is_0600_and_removed_when_its_file_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let me = rustix::process::geteuid().as_raw();
        let (listener, file) = bind(&path, me).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600);
        // Nothing but the socket is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("s.sock")]);
        drop(file);
        assert!(!path.exists());
        drop(listener);
    }
}
