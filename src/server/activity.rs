//! `--idle-exit`: whether any client is still connected, and the task that
//! stops a server nobody has used for that long.
//!
//! A client counts as connected while one of its requests is in flight —
//! which includes a held-open stream: a `writ mcp` bridge's MCP GET stream,
//! a `/events` reader, a long-poll — and for the window after its last
//! request ended. Clients that keep something alive between requests
//! renew it with requests of their own (a lease's keep-alive, a hook's next
//! event), so they count too. `/health` does not: it is how a bridge asks
//! whether a server is there, not a client's work.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::rpc::App;

/// The requests in flight and when the last one ended.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        }
    }
}

/// One request in flight; dropped with its response body.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Activity {
    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        *self.last.lock() = Instant::now();
        InFlight(self.clone())
    }

    /// How long no request has been in flight (zero while one is).
    pub(crate) fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        self.last.lock().elapsed()
    }
}

/// Counts a request as activity until its response body is dropped (sent
/// whole, or its client gone), so a stream held open counts all along.
pub(crate) async fn track(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let in_flight = app.activity.begin();
    let response = next.run(request).await;
    response.map(|body| {
        Body::new(Tracked {
            body,
            _in_flight: in_flight,
        })
    })
}

/// A response body that counts as activity until it is dropped. It passes
/// its size on, so a whole answer still goes with a `Content-Length`.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Stops the server (`stop`) once no client has been connected for
/// `idle`; returns early when the server stops for another reason.
pub(crate) async fn exit_when_idle(
    activity: Arc<Activity>,
    idle: Duration,
    stop: watch::Sender<bool>,
    mut stopping: watch::Receiver<bool>,
) {
    // Checked a few times per window: the server stops at most a quarter
    // window late, and a long window costs a wake-up every few seconds.
    let step = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
    loop {
        let quiet = activity.idle_for();
        if quiet >= idle {
            tracing::info!(
                idle_secs = idle.as_secs_f64(),
                "no client for --idle-exit; stopping"
            );
            let _ = stop.send(true);
            return;
        }
        let wait = (idle - quiet).min(step);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}
