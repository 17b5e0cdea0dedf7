//! The file tools' history hook, backed by the scheduler's history
//! [`Handle`](super::Handle): translates the pipeline's pre-images and
//! receipts into history's own vocabulary.

use std::sync::Arc;

use super::{Content, Post, Pre, Protection, WriteKind};
use crate::actor::ActorMeta;
use crate::error::Result;
use crate::files::{FileOp, HistoryHook, PreImage, Receipt};
use crate::scheduler::Scheduler;

/// The hook for `sched`, when it has a history directory.
pub(crate) fn hook(sched: &Scheduler) -> Option<Arc<dyn HistoryHook>> {
    sched
        .shared
        .history
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
        let protection = self
            .0
            .shared
            .history
            .snapshot(actor, kind, &pre, new, unprotected)?;
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
        self.0.shared.history.record(actor, &post)
    }
}
