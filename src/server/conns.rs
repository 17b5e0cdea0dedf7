//! The open connections of one listener, for its cap (SPEC §13): at
//! `--max-connections`, the connection idle the longest (no request in
//! flight, no response streaming) is closed to make room, so connections
//! a client keeps open and idle never make a new client wait.
//!
//! A connection is busy from the moment a request's head has arrived
//! until its response body is dropped (sent, or abandoned): a long-poll
//! or an event stream is never taken for idle. A connection whose request
//! head has not arrived yet is idle, so half-sent requests make room too:
//! told to close, an idle connection is dropped at once, never left to
//! finish a head it may never finish.
//!
//! A connection whose answers cannot be written ([`WriteStall`]: a client
//! that pipelines requests and never reads) is cut once a write has made
//! no progress for the stall limit, busy or not.

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// One listener's connections.
#[derive(Debug, Default)]
pub(crate) struct Conns {
    open: Mutex<HashMap<u64, Conn>>,
    next: std::sync::atomic::AtomicU64,
    /// Poked when a connection becomes idle: an accept waiting at the cap
    /// looks again for one to close.
    became_idle: Notify,
}

#[derive(Debug)]
struct Conn {
    busy: usize,
    idle_since: Instant,
    /// Told once to close (it closes as soon as it is idle).
    close: Arc<Notify>,
    closing: bool,
}

/// A request in flight on a connection, until its response is dropped.
#[derive(Debug)]
pub(crate) struct Busy {
    conns: Arc<Conns>,
    id: u64,
}

impl Conns {
    /// A connection was accepted: its id, and what tells it to close.
    pub(crate) fn opened(&self) -> (u64, Arc<Notify>) {
        // An id only has to differ from every other: no ordering with
        // other memory is needed.
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let close = Arc::new(Notify::new());
        self.open.lock().insert(
            id,
            Conn {
                busy: 0,
                idle_since: Instant::now(),
                close: close.clone(),
                closing: false,
            },
        );
        (id, close)
    }

    /// The connection `id` ended.
    pub(crate) fn closed(&self, id: u64) {
        self.open.lock().remove(&id);
    }

    /// A request of connection `id` began.
    pub(crate) fn begin(self: &Arc<Self>, id: u64) -> Busy {
        if let Some(conn) = self.open.lock().get_mut(&id) {
            conn.busy += 1;
        }
        Busy {
            conns: self.clone(),
            id,
        }
    }

    /// Whether connection `id` has a request in flight.
    pub(crate) fn is_busy(&self, id: u64) -> bool {
        self.open.lock().get(&id).is_some_and(|c| c.busy > 0)
    }

    /// Tells the connection idle the longest to close; false when every
    /// connection is busy (or already closing).
    pub(crate) fn close_longest_idle(&self) -> bool {
        let close = {
            let mut open = self.open.lock();
            let Some(conn) = open
                .values_mut()
                .filter(|c| c.busy == 0 && !c.closing)
                .min_by_key(|c| c.idle_since)
            else {
                return false;
            };
            conn.closing = true;
            conn.close.clone()
        };
        // Told with the lock released: the woken task takes it at once.
        close.notify_one();
        true
    }

    /// Tells every connection to close (shutdown).
    pub(crate) fn close_all(&self) {
        let closes: Vec<Arc<Notify>> = self
            .open
            .lock()
            .values_mut()
            .map(|conn| {
                conn.closing = true;
                conn.close.clone()
            })
            .collect();
        for close in closes {
            close.notify_one();
        }
    }

    /// Waits until a connection may have become idle.
    pub(crate) async fn idle(&self) {
        self.became_idle.notified().await;
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let idle = match self.conns.open.lock().get_mut(&self.id) {
            Some(conn) => {
                conn.busy = conn.busy.saturating_sub(1);
                if conn.busy == 0 {
                    conn.idle_since = Instant::now();
                }
                conn.busy == 0
            }
            None => false,
        };
        if idle {
            self.conns.became_idle.notify_one();
        }
    }
}

/// A connection's stream whose writes fail (`TimedOut`) once one has been
/// pending, with no byte taken, for longer than `limit`: a client that
/// never reads its answers holds its connection no longer than that.
#[derive(Debug)]
pub(crate) struct WriteStall<I> {
    io: I,
    limit: Duration,
    /// Started when a write first found the stream full.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> WriteStall<I> {
    /// `io`, cut after `limit` without write progress.
    pub(crate) fn new(io: I, limit: Duration) -> Self {
        WriteStall {
            io,
            limit,
            stalled: None,
        }
    }

    fn check<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no answer bytes within the stall limit",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteStall<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteStall<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.check(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.check(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.check(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.check(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_no_one_takes_fails_after_the_stall_limit_and_progress_resets_it() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (server, mut client) = tokio::io::duplex(64);
            let mut server = WriteStall::new(server, Duration::from_millis(100));
            // Read slowly but steadily (longer than the limit in all):
            // each write makes progress within it, so a long answer to a
            // slow reader is never cut.
            let reader = tokio::spawn(async move {
                let mut buf = [0u8; 32];
                let mut taken = 0;
                while taken < 256 {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    taken += client.read(&mut buf).await.unwrap_or(256);
                }
                client
            });
            server.write_all(&[b'x'; 256]).await.unwrap();
            let _client = reader.await.unwrap();
            // Then nobody reads: the next write fails once stalled.
            let stalled =
                tokio::time::timeout(Duration::from_secs(5), server.write_all(&[b'y'; 1024])).await;
            match stalled {
                Ok(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
                other => panic!("a stalled write was not cut: {other:?}"),
            }
        });
    }

    #[test]
    fn the_longest_idle_connection_is_closed_never_a_busy_one() {
        let conns = Arc::new(Conns::default());
        let (old, old_close) = conns.opened();
        let (busy, _) = conns.opened();
        let (_new, _) = conns.opened();
        let working = conns.begin(busy);
        let _ = old;
        assert!(conns.close_longest_idle());
        // The oldest idle one was told; the busy one never is.
        let told = old_close.notified();
        tokio::pin!(told);
        assert!(
            futures_util::FutureExt::now_or_never(told.as_mut()).is_some(),
            "the longest-idle connection was not told to close"
        );
        assert!(conns.close_longest_idle(), "the newer idle one");
        assert!(!conns.close_longest_idle(), "only the busy one is left");
        drop(working);
        assert!(conns.close_longest_idle(), "idle once its request ended");
    }
}
