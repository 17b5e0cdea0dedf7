//! The file tools' history hook, backed by the scheduler's history
//! [`Handle`](super::Handle): translates the pipeline's pre-images and
//! receipts into history's own vocabulary.

use std::sync::Arc;

use super::{Content, Handle, Post, Pre, Protection, WriteKind};
use crate::error::Result;
use crate::files::{FileOp, Files, HistoryHook, PreImage, Receipt};
use crate::sched::actor::{Actor, ActorMeta};
use crate::sched::scheduler::Scheduler;

impl Actor {
    /// This actor's file tools, recording into the session's history when
    /// `Config::history_dir` is set (otherwise receipts say history is off).
    ///
    /// Defined here rather than in `files`, which sits below history: this is
    /// where the file tools and their history are put together.
    ///
    /// ```
    /// # fn main() -> Result<(), writ::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let sched = writ::Scheduler::new(writ::Config::default());
    /// let agent = sched.actor("agent", writ::Grant::workspace(dir.path()))?;
    /// let receipt = agent.files().write("notes.md", "# Notes\n")?;
    /// assert_eq!(receipt.history, writ::HistoryStatus::Off);
    /// # Ok(()) }
    /// ```
    pub fn files(&self) -> Files<'_> {
        Files::new(self, hook(&self.sched))
    }
}

/// The hook for `sched`, when it has a history directory.
fn hook(sched: &Scheduler) -> Option<Arc<dyn HistoryHook>> {
    Handle::of(sched)
        .enabled()
        .then(|| Arc::new(Recording(sched.clone())) as Arc<dyn HistoryHook>)
}

/// Records writes into the history of one scheduler.
struct Recording(Scheduler);

impl HistoryHook for Recording {
    fn snapshot(
        &self,
        actor: &ActorMeta,
        op: FileOp,
        pre: &[PreImage<'_>],
        new: Option<&[u8]>,
        unprotected: bool,
    ) -> Result<bool> {
        let kind = match op {
            FileOp::Delete => WriteKind::Delete,
            FileOp::Rename => WriteKind::Rename,
            _ => WriteKind::Edit,
        };
        let pre: Vec<Pre<'_>> = pre
            .iter()
            .map(|p| Pre {
                path: p.path,
                content: p.state.as_ref().map(|s| Content {
                    sha256: s.sha256,
                    mode: s.mode,
                    bytes: s.bytes,
                }),
            })
            .collect();
        let protection = Handle::of(&self.0).snapshot(actor, kind, &pre, new, unprotected)?;
        Ok(protection == Protection::Protected)
    }

    fn record(&self, actor: &ActorMeta, receipt: &Receipt) -> Result<()> {
        let after = match (&receipt.after, receipt.mode) {
            (Some(sha256), Some(mode)) => Some((sha256.as_str(), receipt.size, mode)),
            _ => None,
        };
        let mut post = Vec::with_capacity(2);
        if let Some(from) = &receipt.from {
            post.push(Post {
                path: from,
                state: None,
            });
        }
        post.push(Post {
            path: &receipt.path,
            state: after,
        });
        Handle::of(&self.0).record(actor, &post)
    }

    fn version(&self, sha256: &str) -> Option<Vec<u8>> {
        // Every version a write through writ produced or replaced is a
        // blob, checked against its hash as it is read back.
        Handle::of(&self.0).store().ok()?.read_blob(sha256).ok()
    }
}
