//! What `writ serve` tells the person running it: a log line for each
//! thing that happened (through `tracing`; the binary chooses where lines
//! go and how they look), and `GET /metrics`, the session's counters in the
//! Prometheus text format.
//!
//! # Implementation details
//!
//! One task reads the scheduler's event stream from the server's start to
//! its stop ([`watch`]). Its subscription is also what keeps the ring
//! recording, so a viewer who connects late can be given the recent past
//! (`/events?recent=N`). From each event it writes one log line (refusals,
//! timeouts and deadlocks at `info`, everything else at `debug`) and
//! counts what the scheduler does not count itself: refusals by kind, the
//! version gate's refusals, the time each wait took. Those counts come
//! from the stream, so a reader that fell behind the ring would miss some:
//! the task then says so (`warn`) and counts the events it lost
//! (`writ_events_lost_total`); it reads as fast as events come, so this
//! takes thousands of events within one scheduling delay.
//!
//! What the scheduler counts exactly (admissions, waits, timeouts,
//! deadlocks) and what is live (actors, holds, waiters, leases, MCP
//! sessions) is read at scrape time instead, from one dump and the
//! registry, so those numbers are never behind.
//!
//! No log line carries a token: lines name actors, paths, kinds and
//! lease handles, never a bearer token or an actor token's secret.

use std::path::Path;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::rpc::App;
use crate::text::escape;
use crate::{Event, EventKind, Subscription, WaitCause};

/// A metric's one label: a kind (`busy`, `stale`, ...).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

/// A tool call's labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: String,
}

/// The seconds a wait's histogram tells apart: from a millisecond (a
/// lock handed over at once) to a minute (an agent's long edit).
const WAIT_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

/// The counts `/metrics` shows that no other part of the server keeps.
/// Each is a shared handle: cloning one shares its value.
#[derive(Debug)]
pub(crate) struct Metrics {
    refusals: Family<KindLabel, Counter>,
    gate_refusals: Family<KindLabel, Counter>,
    wait_seconds: Histogram,
    tool_calls: Family<ToolLabels, Counter>,
    mcp_sessions: Gauge,
    mcp_sessions_opened: Counter,
    events_lost: Counter,
    /// Every refusal logged, of every kind (the sum of `refusals` and
    /// `gate_refusals`): the count the live page shows.
    refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            refusals: Family::default(),
            gate_refusals: Family::default(),
            wait_seconds: Histogram::new(WAIT_BUCKETS),
            tool_calls: Family::default(),
            mcp_sessions: Gauge::default(),
            mcp_sessions_opened: Counter::default(),
            events_lost: Counter::default(),
            refused: Counter::default(),
        }
    }
}

/// The tool names a metric may carry: a client may call any name, and
/// each label value is a series Prometheus keeps, so unknown names count
/// as one.
fn tool_label(tool: &str) -> &str {
    #[cfg(feature = "mcp")]
    if crate::mcp::TOOL_NAMES.contains(&tool) || crate::mcp::FILESYSTEM_TOOL_NAMES.contains(&tool) {
        return tool;
    }
    let _ = tool;
    "unknown"
}

impl Metrics {
    /// One MCP tool call ended with `outcome` (`ok`, or the kind of its
    /// refusal).
    pub(crate) fn tool_call(&self, tool: &str, outcome: &str) {
        self.tool_calls
            .get_or_create(&ToolLabels {
                tool: tool_label(tool).to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Every refusal logged so far (each is counted in
    /// `writ_refusals_total` or `writ_gate_refusals_total`): what the
    /// live page shows as refused, so a refusal in the log is never
    /// missing from the page.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.get()
    }

    /// An MCP session opened.
    pub(crate) fn mcp_session_opened(&self) {
        self.mcp_sessions.inc();
        self.mcp_sessions_opened.inc();
    }

    /// An MCP session ended.
    pub(crate) fn mcp_session_closed(&self) {
        self.mcp_sessions.dec();
    }

    /// Counts and logs one event of the stream.
    fn take(&self, event: &Event, root: &Path) {
        // Paths and names are agents' choices: escaped, so that none forges
        // a line or drives the terminal (SPEC §13), whatever the format.
        let shown = |path: &Path| -> String {
            let text = match path.strip_prefix(root) {
                Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
                Ok(rel) => rel.display().to_string(),
                Err(_) => path.display().to_string(),
            };
            escape(&text).into_owned()
        };
        let paths = |paths: &[crate::PathEntry]| -> String {
            paths
                .iter()
                .map(|p| shown(&p.path) + if p.tree { "/" } else { "" })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &event.kind {
            EventKind::Refused {
                actor_name,
                error,
                message,
                path,
                holder,
                ..
            } => {
                let family = match error.as_str() {
                    "stale" | "not_read" => &self.gate_refusals,
                    _ => &self.refusals,
                };
                family
                    .get_or_create(&KindLabel {
                        kind: error.clone(),
                    })
                    .inc();
                self.refused.inc();
                tracing::info!(
                    actor = %escape(actor_name),
                    kind = %error,
                    path = path.as_deref().map(shown).map(tracing::field::display),
                    holder = holder.as_deref().map(escape).map(tracing::field::display),
                    reason = %escape(message),
                    "refused"
                );
            }
            EventKind::TimedOut {
                actor_name,
                waited_ms,
                cause,
                ..
            } => {
                self.wait_seconds.observe(*waited_ms as f64 / 1000.0);
                let (path, holder) = match cause {
                    Some(WaitCause::Path { path, holder }) => {
                        (Some(shown(path)), Some(escape(holder).into_owned()))
                    }
                    Some(other) => (Some(escape(&other.to_string()).into_owned()), None),
                    None => (None, None),
                };
                tracing::info!(
                    actor = %escape(actor_name),
                    waited_ms,
                    path = path.map(tracing::field::display),
                    holder = holder.map(tracing::field::display),
                    "timed out"
                );
            }
            EventKind::Deadlock {
                actor_name, cycle, ..
            } => {
                tracing::info!(
                    actor = %escape(actor_name),
                    cycle = %escape(&cycle.join(" -> ")),
                    "deadlock refused"
                );
            }
            EventKind::Woken {
                actor_name,
                waited_ms,
                ..
            } => {
                self.wait_seconds.observe(*waited_ms as f64 / 1000.0);
                tracing::debug!(actor = %escape(actor_name), waited_ms, "woken");
            }
            EventKind::Admitted {
                hold,
                actor_name,
                hold_kind,
                paths: held,
                label,
                waited_ms,
                ..
            } => tracing::debug!(
                actor = %escape(actor_name),
                hold = hold.0,
                kind = ?hold_kind,
                paths = %paths(held),
                label = label.as_deref().map(escape).map(tracing::field::display),
                waited_ms,
                "admitted"
            ),
            EventKind::Waiting {
                actor_name,
                paths: wanted,
                cause,
                ..
            } => tracing::debug!(
                actor = %escape(actor_name),
                paths = %paths(wanted),
                cause = %escape(&cause.to_string()),
                "waiting"
            ),
            EventKind::Cancelled { actor_name, .. } => {
                tracing::debug!(actor = %escape(actor_name), "wait cancelled");
            }
            EventKind::Released {
                hold, actor_name, ..
            } => tracing::debug!(actor = %escape(actor_name), hold = hold.0, "released"),
            EventKind::Changed {
                hold,
                actor_name,
                paths: now,
                ..
            } => {
                tracing::debug!(
                    actor = %escape(actor_name),
                    hold = hold.0,
                    paths = %paths(now),
                    "fence changed"
                )
            }
            EventKind::ActorCreated {
                actor, name, scope, ..
            } => tracing::debug!(
                actor = %escape(name),
                id = actor.0,
                scope = ?scope,
                "actor created"
            ),
            EventKind::ActorDropped { actor, name } => {
                tracing::debug!(actor = %escape(name), id = actor.0, "actor dropped");
            }
            EventKind::FileWritten {
                actor_name,
                op,
                path,
                turn,
                ..
            } => tracing::debug!(
                actor = %escape(actor_name),
                op = %op,
                path = %shown(path),
                turn = turn.as_deref().map(escape).map(tracing::field::display),
                "file written"
            ),
            EventKind::Rewound { turn, redo, paths } => tracing::debug!(
                turn = %escape(turn),
                redo,
                files = paths.len(),
                "turn restored"
            ),
            // Logged where the lease ends (`lease::reap`), with the same facts.
            EventKind::LeaseExpired { .. } => {}
            EventKind::Gap { after, next } => {
                let lost = next.saturating_sub(*after).saturating_sub(1);
                self.events_lost.inc_by(lost);
                tracing::warn!(
                    lost,
                    "the log and the metrics fell behind the event ring and missed events"
                );
            }
        }
    }

    /// The scrape: everything above, and what is read now from the table
    /// and the registry.
    pub(crate) fn render(
        &self,
        app: &App,
        table: &TableReading,
    ) -> Result<String, std::fmt::Error> {
        let leases = app.registry().leases.len();
        let counters = table.counters;
        let gauge = |n: usize| ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
        let mut registry = Registry::with_prefix("writ");
        registry.register(
            "admissions",
            "Requests granted, at once or after waiting",
            ConstCounter::new(counters.admitted),
        );
        registry.register(
            "refusals",
            "Requests refused without waiting, by the error's kind (busy, no_slot, ...)",
            self.refusals.clone(),
        );
        registry.register(
            "gate_refusals",
            "Writes the version gate refused: stale (changed since read) or not_read",
            self.gate_refusals.clone(),
        );
        registry.register(
            "waits",
            "Requests that had to wait",
            ConstCounter::new(counters.waited),
        );
        registry.register(
            "wait_seconds",
            "How long waits that ended (granted or timed out) took",
            self.wait_seconds.clone(),
        );
        registry.register(
            "timeouts",
            "Waits that gave up at their timeout",
            ConstCounter::new(counters.timed_out),
        );
        registry.register(
            "deadlocks",
            "Requests refused because waiting would close a wait-for cycle",
            ConstCounter::new(counters.deadlocks),
        );
        registry.register("actors", "Live actors", gauge(table.actors));
        registry.register("holds", "Live holds (calls and fences)", gauge(table.holds));
        registry.register("waiters", "Requests waiting now", gauge(table.waiters));
        if let Some(resends) = table.etcd_resends {
            registry.register(
                "etcd_resends",
                "Calls to etcd sent again by this server (they reached no member, or a read timed out)",
                ConstCounter::new(resends),
            );
        }
        registry.register("leases", "Live leases of wire clients", gauge(leases));
        registry.register(
            "mcp_sessions",
            "Open MCP sessions",
            self.mcp_sessions.clone(),
        );
        registry.register(
            "mcp_sessions_opened",
            "MCP sessions opened since the server started",
            self.mcp_sessions_opened.clone(),
        );
        registry.register(
            "tool_calls",
            "MCP tool calls by tool and outcome (ok, or the refusal's kind)",
            self.tool_calls.clone(),
        );
        registry.register(
            "events_lost",
            "Events the log and these counters missed by falling behind the event ring",
            self.events_lost.clone(),
        );
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

/// What a scrape reads from the session's table when it is taken: the
/// in-process scheduler's, or on `writ serve --etcd` the session's in etcd
/// (every server's work), with this server's etcd resends.
pub(crate) struct TableReading {
    pub(crate) counters: crate::Counters,
    pub(crate) actors: usize,
    pub(crate) holds: usize,
    pub(crate) waiters: usize,
    pub(crate) etcd_resends: Option<u64>,
}

impl TableReading {
    /// The in-process table's.
    pub(crate) fn of(dump: &crate::Dump) -> TableReading {
        TableReading {
            counters: dump.counters,
            actors: dump.actors.len(),
            holds: dump.holds.len(),
            waiters: dump.waiters.len(),
            etcd_resends: None,
        }
    }
}

/// The `Content-Type` of a scrape.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Reads the event stream until the server stops, logging and counting
/// each event. `events` is subscribed before the server serves anything,
/// so nothing that happens is missed.
pub(crate) async fn watch(app: Arc<App>, mut events: Subscription) {
    let mut stop = app.stopping();
    loop {
        tokio::select! {
            event = events.next() => app.metrics.take(&event, &app.root),
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
