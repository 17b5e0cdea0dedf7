//! Writes that writ does not make but hears about before and after: an
//! agent's built-in editor reported by a hook (`writ hook claude-code`).
//! The pre-image is snapshotted before the write and the post-image
//! journaled after it, as the actor's call in its current turn, so a rewind
//! of that turn puts the pre-image back and a later write by another turn
//! is a conflict, exactly as for a write through [`Files`](crate::Files).

use std::path::Path;

use super::fsio::{self, Current};
use super::{Content, Handle, Post, Pre, WriteKind};
use crate::core::key::{Key, Target, overlaps};
use crate::error::{Error, Result};
use crate::files::gate::Gate;
use crate::files::policy;
use crate::files::{FileOp, HistoryStatus, Receipt};
use crate::kinds::{HoldKind, Mode};
use crate::sched::actor::Actor;

impl Actor {
    /// Snapshots the current content of `path` into history before a writer
    /// outside writ (an agent's built-in editor) changes it; call
    /// [`Actor::after_outside_write`] once it has. The actor must hold an
    /// exclusive call reservation on the file (as
    /// [`Actor::try_admit`]`([path])` gives) for both steps, so that nothing
    /// else writes it in between; otherwise `Error::InvalidPath` saying so.
    ///
    /// Returns `false`, having stored nothing, when the session has no
    /// history directory. A sensitive name is `Error::Policy`; a folder or
    /// another non-file is `Error::InvalidPath`; a file above the snapshot
    /// limit is `Error::History` (it could not be rewound).
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let (ws, data) = (dir.path().join("ws"), dir.path().join("history"));
    /// # std::fs::create_dir(&ws).unwrap();
    /// # std::fs::write(ws.join("a.rs"), "old\n").unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default().history_dir(&data));
    /// let agent = sched.actor("editor", writ::Grant::workspace(&ws))?;
    /// agent.set_turn("t1");
    /// let hold = agent.try_admit(["a.rs"])?;
    /// assert!(agent.before_outside_write("a.rs")?);
    /// std::fs::write(ws.join("a.rs"), "new\n").unwrap(); // the editor writes
    /// agent.after_outside_write("a.rs")?;
    /// drop(hold);
    /// sched.rewind_turn("t1")?;
    /// assert_eq!(std::fs::read_to_string(ws.join("a.rs")).unwrap(), "old\n");
    /// # Ok(()) }
    /// ```
    pub fn before_outside_write(&self, path: impl AsRef<Path>) -> Result<bool> {
        let history = Handle::of(&self.sched);
        let key = self.outside_key(path.as_ref())?;
        if !history.enabled() {
            return Ok(false);
        }
        let current = fsio::current(&self.meta.resolver.root, &key.path)?;
        let content = match &current {
            Current::Absent => None,
            Current::File {
                sha256,
                mode,
                bytes,
            } => Some(Content {
                sha256,
                mode: *mode,
                bytes,
            }),
            Current::Other(what) => {
                return Err(Error::invalid(
                    &key.path,
                    format!("it is {what}; only regular files are snapshotted"),
                ));
            }
        };
        let pre = Pre {
            path: &key.path,
            content,
        };
        history.snapshot(&self.meta, WriteKind::Edit, &[pre], None, false)?;
        Ok(true)
    }

    /// Journals the write an outside writer made since
    /// [`Actor::before_outside_write`] as this actor's call (its turn, the
    /// snapshotted pre-image, the post-image now on disk, which is stored as
    /// well so the write can be redone), and records this actor as the
    /// file's last writer, so a stale read elsewhere names it. Returns the
    /// receipt; its `history` is `Off` without a history directory and
    /// `Incomplete` when no snapshot was taken first. A file the writer left
    /// unchanged is not journaled (`before == after` in the receipt).
    ///
    /// The same reservation rule as for `before_outside_write` applies.
    pub fn after_outside_write(&self, path: impl AsRef<Path>) -> Result<Receipt> {
        let history = Handle::of(&self.sched);
        let key = self.outside_key(path.as_ref())?;
        let current = fsio::current(&self.meta.resolver.root, &key.path)?;
        let after = match &current {
            Current::Absent => None,
            Current::File {
                sha256,
                mode,
                bytes,
            } => Some((sha256.as_str(), bytes.len() as u64, *mode, bytes.as_slice())),
            Current::Other(what) => {
                return Err(Error::invalid(
                    &key.path,
                    format!("it is {what}; only regular files are recorded"),
                ));
            }
        };
        Gate::of(&self.sched).record_write(&key.norm, &self.meta.name, after.map(|a| a.0));
        let mut receipt = Receipt {
            op: if after.is_some() {
                FileOp::Write
            } else {
                FileOp::Delete
            },
            path: key.path.clone(),
            from: None,
            before: None,
            after: after.map(|a| a.0.to_string()),
            size: after.map_or(0, |a| a.1),
            mode: after.map(|a| a.2),
            history: HistoryStatus::Off,
            anchored: None,
            repeat: false,
        };
        if !history.enabled() {
            return Ok(receipt);
        }
        let post = Post {
            path: &key.path,
            state: after.map(|(sha, size, mode, _)| (sha, size, mode)),
        };
        receipt.history = match history.record_outside(&self.meta, post, after.map(|a| a.3)) {
            Ok(before) => {
                receipt.before = before;
                HistoryStatus::Recorded
            }
            Err(e) => HistoryStatus::Incomplete {
                reason: e.to_string(),
            },
        };
        Ok(receipt)
    }

    /// The snapshot [`Actor::before_outside_write`] took of `path`, taken
    /// out of this process (encoded) for [`Actor::put_outside_snapshot`]
    /// in another process of the session; `None` when there is none.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn take_outside_snapshot(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        let (key, _) = self.meta.resolver.resolve(&Target::file(path))?;
        Handle::of(&self.sched).take_pending(&self.meta, &key.path)
    }

    /// Puts back a snapshot [`Actor::take_outside_snapshot`] carried, so
    /// that [`Actor::after_outside_write`] of `path` records the write.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn put_outside_snapshot(&self, path: &Path, carried: &[u8]) -> Result<()> {
        let (key, _) = self.meta.resolver.resolve(&Target::file(path))?;
        Handle::of(&self.sched).put_pending(&self.meta, &key.path, carried)
    }

    /// `path` resolved for an outside write: inside the grant, allowed by
    /// the policy, and held by this actor's own exclusive call reservation.
    fn outside_key(&self, path: &Path) -> Result<Key> {
        let meta = &self.meta;
        let (key, area) = meta.resolver.resolve(&Target::file(path))?;
        let config = self.sched.config();
        policy::check(
            &config.sensitive,
            &[],
            path,
            &key,
            area,
            policy::Access::Write,
        )?;
        // A sensitive folder (`.writ/`, where the session token is) holds
        // nothing history may copy, whatever the file's own name.
        let rel = meta.resolver.relative(&key.path);
        policy::check_folders(&config.sensitive, &[], &rel, &key)?;
        // Only this actor's own exclusive call on the file counts: while it
        // lasts, no other write can be admitted to it.
        let held = {
            let state = self.sched.shared.lock();
            state.table.iter().any(|(_, hold)| {
                hold.claim.owner == meta.id
                    && hold.claim.kind == HoldKind::Call
                    && hold
                        .claim
                        .keys
                        .iter()
                        .any(|(k, m)| *m == Mode::Exclusive && overlaps(k, &key))
            })
        };
        if !held {
            return Err(Error::invalid(
                &key.path,
                format!(
                    "'{}' holds no call reservation on it; reserve the file (admit) before the outside write and keep it until that write is recorded",
                    meta.name
                ),
            ));
        }
        Ok(key)
    }
}
