//! The discovery file (`ROOT/.writ/serve.json`, mode 0600) and the user's
//! state directory.

use std::io::Write as _;
use std::path::{Path, PathBuf};

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

/// Reads a discovery file.
pub fn read_discovery(path: &Path) -> Result<Discovery> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Unavailable {
        reason: format!("{} is not a discovery file ({e})", path.display()),
    })
}

/// Writes the discovery file atomically, readable by its owner only.
pub(crate) fn write(path: &Path, discovery: &Discovery) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("create the folder", dir, e))?;
    let text = serde_json::to_vec_pretty(discovery).map_err(|e| Error::Unavailable {
        reason: format!("cannot encode the discovery file ({e})"),
    })?;
    let tmp = dir.join(format!(".serve.json.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", path, e))
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
            let token = super::auth::random_hex(32)?;
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
