//! The discovery file as every client reads it (SPEC §15): what it says,
//! and the rules that decide whether a client may trust it with a token.
//!
//! A discovery file tells a client where the server is and gives it the
//! session token. A file planted by someone else could point the client,
//! and whatever token it sends, at a listener of theirs; so a client uses
//! a discovery file only when it is a regular file of this user that no one
//! else can read or replace (mode 0600, not a symlink), and only a loopback
//! URL or a Unix socket from it.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What a running server tells its clients through the discovery file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// The base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// The Unix socket, if the server listens on one.
    pub socket: Option<PathBuf>,
    /// The server's process id.
    pub pid: u32,
    /// The session token.
    pub token: String,
    /// The server's crate version.
    pub version: String,
    /// The protocol version (see docs/PROTOCOL.md).
    #[serde(default)]
    pub protocol: String,
    /// The canonical workspace root.
    #[serde(default)]
    pub root: PathBuf,
}

/// A discovery file is never this large; a bigger one is not read.
const MAX_DISCOVERY_BYTES: u64 = 64 * 1024;

fn refused(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Unavailable {
        reason: format!(
            "{} is not trusted: {why}; writ reads only files of this user that no one else \
             can write, and never sends a token where an untrusted file points (start the \
             server again, or pass --url and --token)",
            path.display()
        ),
    }
}

/// Reads a file only its owner may have written: a regular file (not a
/// symlink) of this user, mode 0600 or stricter, at most `limit` bytes.
/// `Ok(None)` when it does not exist.
pub(crate) fn read_private(path: &Path, limit: u64) -> Result<Option<String>> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(refused(path, "it is a symlink")),
        Err(e) => return Err(Error::io("open", path, e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| Error::io("inspect", path, e.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(refused(path, "it is not a regular file"));
    }
    let uid = rustix::process::geteuid().as_raw();
    if stat.st_uid != uid {
        return Err(refused(
            path,
            format!(
                "it belongs to uid {}, not to this user ({uid})",
                stat.st_uid
            ),
        ));
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(refused(
            path,
            format!(
                "its mode is {:04o}, so others could have written it (writ writes it 0600)",
                stat.st_mode & 0o7777
            ),
        ));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(limit)
        .read_to_string(&mut text)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(Some(text))
}

/// Reads and checks a discovery file (see the [module docs](self)).
pub(crate) fn read_trusted(path: &Path) -> Result<Discovery> {
    let text = read_private(path, MAX_DISCOVERY_BYTES)?.ok_or_else(|| Error::Unavailable {
        reason: format!("no server found: {} does not exist", path.display()),
    })?;
    let found: Discovery = serde_json::from_str(&text)
        .map_err(|e| refused(path, format_args!("it is not a discovery file ({e})")))?;
    if !is_loopback_url(&found.url) {
        return Err(refused(
            path,
            format_args!("its URL {} is not a loopback address", found.url),
        ));
    }
    if found.socket.as_deref().is_some_and(|s| !s.is_absolute()) {
        return Err(refused(path, "its socket is not an absolute path"));
    }
    Ok(found)
}

/// Whether `url` is `http://` on a loopback host: `localhost`, an address
/// in 127.0.0.0/8, or `[::1]`.
pub(crate) fn is_loopback_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, _)) => host,
            None => return false,
        },
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_pass() {
        for good in [
            "http://127.0.0.1:4000",
            "http://127.9.9.9:1/",
            "http://localhost:80",
            "http://[::1]:8080",
        ] {
            assert!(is_loopback_url(good), "{good}");
        }
        for bad in [
            "http://10.0.0.5:2379",
            "https://127.0.0.1:1",
            "http://evil.example:80",
            "http://127.0.0.1.evil.example:80",
            "http://user@127.0.0.1:80",
            "http://[::2]:80",
            "ftp://127.0.0.1",
            "http://[::1",
        ] {
            assert!(!is_loopback_url(bad), "{bad}");
        }
    }
}
