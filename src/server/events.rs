//! `GET /events` (the scheduler's event stream as server-sent events) and
//! `GET /` (the page that draws it).
//!
//! `/events` takes the session token only: the stream shows every actor's
//! paths and refusals, which an actor token may not see (§13), so an actor
//! token is 403 `forbidden`. Each event is one SSE message: `id:` is its
//! sequence number, `data:` its JSON (docs/PROTOCOL.md). A client that
//! reconnects sends `Last-Event-ID` and reads what it missed from the ring,
//! or one `gap` event. A reader that falls behind the ring while connected
//! gets a `gap` event and its stream ends: it is dropped, and it never
//! slows admission, because the scheduler only writes into the ring.
//! A stream gathers events for [`BATCH`] and sends them in one write, so a
//! connected reader costs one wake-up and one write per batch, not per event.
//! A first connection may ask for the recent past (`?recent=N`): the last
//! N events the ring holds, then live, so a viewer who opens the page late
//! still reads what happened. The server's log and metrics read the stream
//! from its start (`observe`), so the ring is always recorded into; a
//! stream's subscription also outlives the stream by [`LINGER`], which
//! keeps a lone reader's reconnect whole where nothing else subscribes.
//!
//! `/` needs no token: it is a static page with no data in it. The page
//! asks for the token (or reads it from the URL fragment, which browsers
//! never send to a server) and sends it in an `Authorization` header with
//! `fetch()`, streaming `/events` through a reader: no token in a URL,
//! so none in a log or a browser history.

use std::convert::Infallible;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::auth::{self, Caller};
use super::rpc::App;
use crate::{Error, EventKind, Subscription};

/// The page, served as it is: no build step, nothing fetched from elsewhere.
const PAGE: &str = include_str!("page.html");

/// How often an idle stream sends a comment, so dead connections are found.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a stream gathers events after the first before it writes them.
const BATCH: Duration = Duration::from_millis(20);

/// The most events one write carries; the rest follow at once.
const BATCH_MAX: usize = 512;

/// How long recording goes on after a stream ends: the page and `writ top`
/// reconnect a second after theirs does.
const LINGER: Duration = Duration::from_secs(10);

/// A stream's subscription, kept for [`LINGER`] after the stream is dropped
/// (the client left, or lagged and was cut off) unless the server stops.
struct Lingering {
    sub: Option<Subscription>,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let (Some(sub), Ok(runtime)) = (self.sub.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let mut stop = self.stop.clone();
        runtime.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(LINGER) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            drop(sub);
        });
    }
}

/// Adds `/events` and `/` to the server's routes.
pub(crate) fn mount(router: Router<Arc<App>>) -> Router<Arc<App>> {
    router.route("/events", get(events)).route("/", get(page))
}

/// The `Last-Event-ID` a reconnecting client sends; anything but a
/// number is ignored (the client starts from now).
fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `/events?recent=N`: start with the last N events the ring holds.
#[derive(serde::Deserialize)]
struct EventsQuery {
    recent: Option<usize>,
}

async fn events(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
) -> Response {
    if !auth::origin_allowed(&headers) {
        let e = Error::Forbidden {
            reason: "requests from a non-loopback Origin are refused".into(),
        };
        return auth::refuse(StatusCode::FORBIDDEN, &e);
    }
    match app.authenticate_any(auth::bearer(&headers)).await {
        Ok(Caller::Session) => {}
        Ok(Caller::Actor(_)) => {
            let e = Error::Forbidden {
                reason: "the event stream shows every actor: it takes the session token".into(),
            };
            return auth::refuse(StatusCode::FORBIDDEN, &e);
        }
        Err(e) => return auth::refuse(StatusCode::UNAUTHORIZED, &e),
    }
    let last = last_event_id(&headers);
    // A reconnect resumes where it was; a first connection may ask for the
    // recent past, which the ring keeps (the server records from its start).
    let recent = query.recent;
    let subscription = match (last, recent) {
        (Some(last), _) => app.sched.subscribe_after(last),
        (None, Some(recent)) => app.sched.subscribe_recent(recent),
        (None, None) => app.sched.subscribe(),
    };
    let reader = Reader {
        kept: Lingering {
            sub: Some(subscription),
            stop: app.stopping(),
        },
        // Only a resumed stream may start with a gap and go on.
        may_gap: last.is_some(),
        done: false,
        behind: false,
    };
    let stream = futures_util::stream::unfold(reader, |mut reader| async move {
        let chunk = reader.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), reader))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// One `/events` stream: its subscription and where it is in it.
struct Reader {
    kept: Lingering,
    /// Whether the next event may be a gap without ending the stream.
    may_gap: bool,
    /// Set once the reader fell behind: its last chunk said so.
    done: bool,
    /// Whether the last batch was full, so more was waiting behind it.
    behind: bool,
}

impl Reader {
    /// The next bytes to send: a batch of events, a keep-alive comment, or
    /// `None` when the stream ends (lagged, or the server stops).
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let Lingering {
            sub: Some(sub),
            stop,
        } = &mut self.kept
        else {
            return None;
        };
        let first = tokio::select! {
            event = sub.next() => event,
            () = tokio::time::sleep(KEEP_ALIVE) => return Some(Bytes::from_static(b": keep-alive\n\n")),
            // Shutdown ends every stream, so the drain is not held up.
            _ = stop.wait_for(|s| *s) => return None,
        };
        // Gather what follows for a moment and send it in one write: the
        // reader then costs one wake-up and one write per batch, not per
        // event, however fast admissions come.
        // A full batch left more behind it: that goes out at once.
        if !self.behind {
            tokio::select! {
                () = tokio::time::sleep(BATCH) => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
        let mut chunk = Vec::new();
        let mut next = Some(first);
        let mut count = 0;
        while let Some(event) = next {
            // Any gap but a resumed stream's first event means this reader
            // fell behind the ring while connected: it is told, then dropped.
            let lagged = !self.may_gap && matches!(event.kind, EventKind::Gap { .. });
            self.may_gap = false;
            // Serialized straight into the chunk: compact JSON has no
            // newline, so one `data:` line carries it.
            // Writing into a `Vec` cannot fail.
            let _ = write!(chunk, "id: {}\ndata: ", event.seq);
            let start = chunk.len();
            if let Err(e) = serde_json::to_writer(&mut chunk, &*event) {
                chunk.truncate(start);
                let error = json!({"seq": event.seq, "kind": "error", "message": e.to_string()});
                chunk.extend_from_slice(error.to_string().as_bytes());
            }
            chunk.extend_from_slice(b"\n\n");
            count += 1;
            if lagged {
                self.done = true;
                break;
            }
            next = if count < BATCH_MAX {
                sub.try_next()
            } else {
                None
            };
        }
        self.behind = count == BATCH_MAX;
        Some(Bytes::from(chunk))
    }
}

async fn page() -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
            ),
        ],
        PAGE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Scheduler};

    fn note(sched: &Scheduler) {
        sched.emit(|| EventKind::LeaseExpired {
            lease: "l-test-1".into(),
            actors: 0,
            holds: 0,
        });
    }

    /// What a reader that was alone and resumes from `last` reads first,
    /// after its stream's subscription was let go by `end` and one event
    /// happened.
    fn resumed_after(end: impl FnOnce(Subscription)) -> &'static str {
        let sched = Scheduler::new(Config::default());
        let only = sched.subscribe();
        note(&sched);
        let last = only.cursor();
        end(only);
        note(&sched);
        let mut again = sched.subscribe_after(last);
        again.try_next().map_or("nothing", |e| e.kind.name())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_lone_reader_that_reconnects_within_the_linger_misses_nothing() {
        let (_stopping, stop) = tokio::sync::watch::channel(false);
        let kept = resumed_after(|sub| {
            drop(Lingering {
                sub: Some(sub),
                stop,
            })
        });
        assert_eq!(kept, "lease_expired");
        // Without it, nobody listened in between: a gap.
        assert_eq!(resumed_after(drop), "gap");
    }
}
