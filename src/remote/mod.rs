//! The Rust client of `writ serve` (feature `remote`): the same names,
//! argument types and [`Error`] values as the in-process API, over the wire.
//!
//! - [`Session::connect`] (or [`Session::discover`], which reads the
//!   discovery file) → [`Session::actor`] → an [`Actor`] with `child`,
//!   `try_admit`, `admit`, `admit_timeout`, `fence`, `fence_wait` and
//!   [`Actor::files`].
//! - Guards ([`Reservation`], [`Fence`]) and actors release on drop, in the
//!   background (a tokio runtime must be running); `release().await` does
//!   it in the foreground and reports errors.
//! - The session's lease is kept alive by a background task for as long as
//!   the session or anything made from it lives; after that the server lets
//!   it lapse within its TTL (or at once with [`Session::close`]).
//! - Methods are `async` (a network round trip is not a thing to hide);
//!   errors are the server's `writ::Error` rebuilt from the wire, plus
//!   [`Error::Unavailable`] when the server cannot be reached and
//!   [`Error::UnknownLease`] after it restarted.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), writ::Error> {
//! use writ::remote::Session;
//! let session = Session::discover("/path/to/repo").await?;
//! let lead = session.actor("lead", writ::Grant::workspace("/path/to/repo")).await?;
//! let call = lead.try_admit(["src/lib.rs"]).await?;   // Err(Error::Busy(_)) if contested
//! let (bytes, _mark) = lead.files().read("src/lib.rs").await?;
//! drop(call);                                          // released in the background
//! # let _ = bytes; Ok(()) }
//! ```

mod http;

use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::wire::{content_from_wire, content_to_wire, target_to_wire};
use crate::{Error, Grant, ReadMark, Receipt, Result, Target};

/// What every handle of one session shares.
#[derive(Debug)]
struct Inner {
    http: http::Client,
    /// The lease this session's root actors join; `None` until the first
    /// actor, and again after the server said the lease is gone.
    lease: Mutex<Option<String>>,
    ttl: Duration,
    keepalive: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.keepalive.lock().take() {
            task.abort();
        }
        // Revoke the lease at once rather than letting it lapse.
        if let Some(lease) = self.lease.lock().take() {
            let http = self.http.clone();
            spawn_detached(async move {
                let _ = http.call("lease.revoke", json!({ "lease": lease })).await;
            });
        }
    }
}

/// Runs a cleanup on the current tokio runtime, if there is one; without
/// one, the server's lease TTL does the cleanup instead.
fn spawn_detached(f: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(f);
    }
}

/// A connection to a `writ serve` session.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

fn path_text(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::invalid(path, "the path is not UTF-8, which the wire needs"))
}

fn targets_to_wire<I>(targets: I) -> Value
where
    I: IntoIterator,
    I::Item: Into<Target>,
{
    Value::Array(
        targets
            .into_iter()
            .map(|t| target_to_wire(&t.into()))
            .collect(),
    )
}

fn grant_to_wire(grant: &Grant) -> Result<Value> {
    let root =
        std::path::absolute(grant.root()).map_err(|e| Error::io("resolve", grant.root(), e))?;
    let mut value = match grant.fenced_targets() {
        Some(targets) => json!({"fenced": targets.iter().map(target_to_wire).collect::<Vec<_>>()}),
        None if grant.is_read_only() => json!({"read_only": true}),
        None => json!({"workspace": true}),
    };
    value["root"] = Value::from(path_text(&root)?);
    if !grant.read_roots().is_empty() {
        value["read_roots"] = grant
            .read_roots()
            .iter()
            .map(|r| {
                std::path::absolute(r)
                    .map_err(|e| Error::io("resolve", r, e))
                    .and_then(|r| path_text(&r))
            })
            .collect::<Result<Vec<_>>>()?
            .into();
    }
    Ok(value)
}

fn text(value: &Value, key: &str) -> Result<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Error::Unavailable {
            reason: format!("the server's answer lacks '{key}'"),
        })
}

fn paths(value: &Value) -> Vec<PathBuf> {
    value
        .get("paths")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

fn decode<T: serde::de::DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| Error::Unavailable {
        reason: format!("the server's answer does not decode: {e}"),
    })
}

impl Session {
    /// Connects to a server at `url` with a token, and checks both with
    /// `session.info`.
    ///
    /// `url` is the loopback URL (`http://127.0.0.1:40123`) or, for a server
    /// started with `--socket PATH`, `unix:PATH` (e.g.
    /// `unix:/run/user/1000/writ.sock`; a relative PATH is taken from the
    /// current folder). Over the socket the protocol, the token and every
    /// answer are the same.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// use writ::remote::Session;
    /// let token = std::env::var("WRIT_TOKEN").unwrap_or_default();
    /// let session = Session::connect("unix:/run/user/1000/writ.sock", &token).await?;
    /// println!("{}", session.dump_table().await?);
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, token: &str) -> Result<Session> {
        let http = http::Client::new(url, token)?;
        let info = http.call("session.info", json!({})).await?;
        let ttl = Duration::from_millis(
            info.get("lease_ttl_ms")
                .and_then(Value::as_u64)
                .unwrap_or(15_000),
        );
        Ok(Session {
            inner: Arc::new(Inner {
                http,
                lease: Mutex::new(None),
                ttl,
                keepalive: Mutex::new(None),
            }),
        })
    }

    /// Connects to the server of the workspace `root`, from its discovery
    /// file (`ROOT/.writ/serve.json`). When the file names a Unix socket the
    /// socket is tried first, and the loopback URL if the socket cannot be
    /// reached. The file is used only if it is this user's, mode 0600, not a
    /// symlink, and names a loopback URL (SPEC §15); else `Unavailable`
    /// says why, and no token is sent.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// let session = writ::remote::Session::discover("/path/to/repo").await?;
    /// # let _ = session; Ok(()) }
    /// ```
    pub async fn discover(root: impl AsRef<Path>) -> Result<Session> {
        // The checks of SPEC §15: this user's file, mode 0600, not a
        // symlink, and a loopback URL; otherwise no token leaves.
        let path = root.as_ref().join(".writ").join("serve.json");
        let found = crate::wire::discovery::read_trusted(&path)?;
        if let Some(socket) = found.socket.as_deref().and_then(Path::to_str) {
            match Session::connect(&format!("{}{socket}", http::UNIX_SCHEME), &found.token).await {
                Err(Error::Unavailable { reason }) => {
                    tracing::debug!(socket, %reason, "the socket did not answer; trying the URL");
                }
                other => return other,
            }
        }
        Session::connect(&found.url, &found.token).await
    }

    /// The lease this session's actors belong to, once it has one.
    pub fn lease(&self) -> Option<String> {
        self.inner.lease.lock().clone()
    }

    /// A root actor, as [`Scheduler::actor`](crate::Scheduler::actor). The
    /// grant's root must lie inside the server's workspace.
    pub async fn actor(&self, name: impl Into<String>, grant: Grant) -> Result<Actor> {
        let lease = self.inner.lease.lock().clone();
        let mut params = json!({"name": name.into(), "grant": grant_to_wire(&grant)?});
        if let Some(lease) = &lease {
            params["lease"] = Value::from(lease.as_str());
        }
        let made = match self.inner.http.call("actor.create", params.clone()).await {
            // The lease lapsed or the server restarted: start a new one.
            Err(Error::UnknownLease { .. }) if lease.is_some() => {
                *self.inner.lease.lock() = None;
                params.as_object_mut().map(|p| p.remove("lease"));
                self.inner.http.call("actor.create", params).await?
            }
            other => other?,
        };
        let actor = Actor::from_wire(&self.inner, &made)?;
        let started = {
            let mut lease = self.inner.lease.lock();
            let fresh = lease.as_deref() != Some(actor.lease.as_str());
            *lease = Some(actor.lease.clone());
            fresh
        };
        if started {
            self.start_keepalive();
        }
        Ok(actor)
    }

    fn start_keepalive(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let period = (self.inner.ttl / 3).max(Duration::from_millis(10));
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let Some(lease) = inner.lease.lock().clone() else {
                    return;
                };
                let http = inner.http.clone();
                drop(inner);
                if let Err(Error::UnknownLease { .. }) = http
                    .call("lease.keepalive", json!({ "lease": lease }))
                    .await
                {
                    if let Some(inner) = weak.upgrade() {
                        let mut current = inner.lease.lock();
                        if current.as_deref() == Some(lease.as_str()) {
                            *current = None;
                        }
                    }
                    return;
                }
            }
        });
        if let Some(old) = self.inner.keepalive.lock().replace(task) {
            old.abort();
        }
    }

    /// The server's dump as JSON (the [`Dump`](crate::Dump) of §5).
    pub async fn dump(&self) -> Result<Value> {
        self.inner.http.call("dump", json!({})).await
    }

    /// The server's dump as the text table.
    pub async fn dump_table(&self) -> Result<String> {
        let v = self
            .inner
            .http
            .call("dump", json!({"format": "table"}))
            .await?;
        text(&v, "table")
    }

    /// `session.info`: protocol version, root, lease TTL, ...
    pub async fn info(&self) -> Result<Value> {
        self.inner.http.call("session.info", json!({})).await
    }

    /// Any method of the protocol, for what this client has no method for.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value> {
        self.inner.http.call(method, params).await
    }

    /// Rewinds a turn (`history.rewind`), returning the report as JSON.
    pub async fn rewind_turn(&self, turn: &str) -> Result<Value> {
        self.inner
            .http
            .call("history.rewind", json!({ "turn": turn }))
            .await
    }

    /// Revokes the lease now: every actor and guard of this session is
    /// dropped on the server.
    pub async fn close(self) -> Result<()> {
        let lease = self.inner.lease.lock().take();
        if let Some(task) = self.inner.keepalive.lock().take() {
            task.abort();
        }
        match lease {
            Some(lease) => self
                .inner
                .http
                .call("lease.revoke", json!({ "lease": lease }))
                .await
                .map(drop),
            None => Ok(()),
        }
    }
}

/// An actor on the server, as [`crate::Actor`]. Dropping it drops the
/// server's actor (in the background), releasing its fences.
#[derive(Debug)]
pub struct Actor {
    inner: Arc<Inner>,
    handle: String,
    token: String,
    name: String,
    root: PathBuf,
    lease: String,
}

impl Drop for Actor {
    fn drop(&mut self) {
        if self.handle.is_empty() {
            return; // closed already
        }
        let http = self.inner.http.clone();
        let actor = std::mem::take(&mut self.handle);
        spawn_detached(async move {
            let _ = http.call("actor.drop", json!({ "actor": actor })).await;
        });
    }
}

impl Actor {
    fn from_wire(inner: &Arc<Inner>, made: &Value) -> Result<Actor> {
        Ok(Actor {
            inner: inner.clone(),
            handle: text(made, "actor")?,
            token: text(made, "token")?,
            name: text(made, "name")?,
            root: PathBuf::from(text(made, "root")?),
            lease: text(made, "lease")?,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its wire handle (`a-…`).
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// Its actor token: hand it to a process that should act only as this
    /// actor and its descendants.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Its canonical grant root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The lease it belongs to.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    async fn make_child(&self, method: &str, name: String, grant: Grant) -> Result<Actor> {
        let params = json!({"name": name, "parent": self.handle, "grant": grant_to_wire(&grant)?});
        let made = self.inner.http.call(method, params).await?;
        Actor::from_wire(&self.inner, &made)
    }

    /// A child actor, try-only (`NoSlot`, `Busy`), as [`crate::Actor::child`].
    pub async fn child(&self, name: impl Into<String>, grant: Grant) -> Result<Actor> {
        self.make_child("actor.create", name.into(), grant).await
    }

    /// A child actor, waiting for a slot and its fence.
    pub async fn child_wait(&self, name: impl Into<String>, grant: Grant) -> Result<Actor> {
        self.make_child("actor.child_wait", name.into(), grant)
            .await
    }

    /// [`Actor::child_wait`], giving up with `Error::Timeout` after
    /// `timeout`, as [`crate::Actor::child_wait_timeout`].
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), writ::Error> {
    /// # let session = writ::remote::Session::discover("/path/to/repo").await?;
    /// # let lead = session.actor("lead", writ::Grant::workspace("/path/to/repo")).await?;
    /// use std::time::Duration;
    /// let grant = writ::Grant::fenced("/path/to/repo", ["src/"]);
    /// match lead.child_wait_timeout("parser", grant, Duration::from_secs(5)).await {
    ///     Ok(parser) => drop(parser),
    ///     Err(writ::Error::Timeout { .. }) => { /* no slot or fence within 5 s */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn child_wait_timeout(
        &self,
        name: impl Into<String>,
        grant: Grant,
        timeout: Duration,
    ) -> Result<Actor> {
        let params = json!({
            "name": name.into(),
            "parent": self.handle,
            "grant": grant_to_wire(&grant)?,
            "timeout_ms": timeout.as_millis() as u64,
        });
        let made = self.inner.http.call("actor.child_wait", params).await?;
        Actor::from_wire(&self.inner, &made)
    }

    /// A request builder: priority and label, then try or wait.
    pub fn request<I>(&self, targets: I) -> Request<'_>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        Request {
            actor: self,
            targets: targets_to_wire(targets),
            priority: 0,
            label: None,
        }
    }

    /// Reserves every target at once, or `Err(Busy)` immediately.
    pub async fn try_admit<I>(&self, targets: I) -> Result<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).try_admit().await
    }

    /// Waits until every target can be reserved at once. Dropping the future
    /// closes the request, which cancels the wait on the server.
    pub async fn admit<I>(&self, targets: I) -> Result<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).admit().await
    }

    /// [`Actor::admit`], giving up with `Error::Timeout` after `timeout`.
    pub async fn admit_timeout<I>(&self, targets: I, timeout: Duration) -> Result<Reservation>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).admit_timeout(timeout).await
    }

    /// An additional fence, try-only.
    pub async fn fence<I>(&self, targets: I) -> Result<Fence>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).fence().await
    }

    /// An additional fence, waiting until it can be taken.
    pub async fn fence_wait<I>(&self, targets: I) -> Result<Fence>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.request(targets).fence_wait().await
    }

    /// Tags this actor's writes with a user turn (`turn.set`).
    pub async fn set_turn(&self, turn: impl Into<String>) -> Result<()> {
        let params = json!({"actor": self.handle, "turn": turn.into()});
        self.inner.http.call("turn.set", params).await.map(drop)
    }

    /// Snapshots `path` into history before a writer outside writ changes
    /// it (`history.snapshot`); the actor must hold an exclusive call
    /// reservation on it. See [`crate::Actor::before_outside_write`].
    ///
    /// ```no_run
    /// # async fn demo(actor: &writ::remote::Actor) -> Result<(), writ::Error> {
    /// let hold = actor.try_admit(["src/lib.rs"]).await?;
    /// actor.before_outside_write("src/lib.rs").await?;
    /// // ... an editor writes src/lib.rs ...
    /// actor.after_outside_write("src/lib.rs").await?;
    /// hold.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn before_outside_write(&self, path: impl AsRef<Path>) -> Result<bool> {
        let params = json!({"actor": self.handle, "path": path_text(path.as_ref())?});
        let v = self.inner.http.call("history.snapshot", params).await?;
        Ok(v["snapshot"].as_bool().unwrap_or(false))
    }

    /// Journals that outside write as this actor's call
    /// (`history.record`); see [`crate::Actor::after_outside_write`].
    pub async fn after_outside_write(&self, path: impl AsRef<Path>) -> Result<Receipt> {
        let params = json!({"actor": self.handle, "path": path_text(path.as_ref())?});
        decode(self.inner.http.call("history.record", params).await?)
    }

    /// Runs a shell command as a transaction (`files.run`, SPEC §17): the
    /// server runs `sh -c command` through a private copy-on-write layer
    /// over the workspace and commits its writes all or nothing as this
    /// actor's. Returns the run report (see [`crate::run::RunReport`]) as
    /// JSON; a refused commit is `"committed": false`, not an error.
    ///
    /// ```no_run
    /// # async fn demo(actor: &writ::remote::Actor) -> Result<(), writ::Error> {
    /// let report = actor.run("cargo fmt", None, None).await?;
    /// if report["committed"] == false {
    ///     println!("{}", report["conflicts"]);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run(
        &self,
        command: &str,
        cwd: Option<&Path>,
        timeout: Option<Duration>,
    ) -> Result<Value> {
        let mut params = json!({"actor": self.handle, "command": command});
        if let Some(cwd) = cwd {
            params["cwd"] = Value::from(path_text(cwd)?);
        }
        if let Some(t) = timeout {
            params["timeout_s"] = Value::from(t.as_secs_f64());
        }
        self.inner.http.call("files.run", params).await
    }

    /// [`Actor::run`] with an argument vector instead of a shell line.
    pub async fn run_argv(&self, argv: &[String], timeout: Option<Duration>) -> Result<Value> {
        let mut params = json!({"actor": self.handle, "argv": argv});
        if let Some(t) = timeout {
            params["timeout_s"] = Value::from(t.as_secs_f64());
        }
        self.inner.http.call("files.run", params).await
    }

    /// This actor's file tools.
    pub fn files(&self) -> Files<'_> {
        Files { actor: self }
    }

    /// Drops the actor on the server now (releasing its fences) and reports
    /// how that went; dropping an `Actor` does the same in the background.
    pub async fn close(mut self) -> Result<()> {
        let actor = std::mem::take(&mut self.handle);
        self.inner
            .http
            .call("actor.drop", json!({ "actor": actor }))
            .await
            .map(drop)
    }
}

/// A request being built, as [`crate::Request`].
#[derive(Debug)]
#[must_use = "a request does nothing until it is admitted"]
pub struct Request<'a> {
    actor: &'a Actor,
    targets: Value,
    priority: i32,
    label: Option<String>,
}

impl Request<'_> {
    /// Higher goes first among conflicting waiters (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// A label shown in the dump and in `Busy` messages.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    fn params(&self, wait: bool, timeout: Option<Duration>) -> Value {
        let mut p = json!({
            "actor": self.actor.handle,
            "targets": self.targets,
            "wait": wait,
            "priority": self.priority,
        });
        if let Some(label) = &self.label {
            p["label"] = Value::from(label.as_str());
        }
        if let Some(t) = timeout {
            p["timeout_ms"] = Value::from(t.as_millis() as u64);
        }
        p
    }

    /// Asks for a hold, with a ticket. If the caller drops this future
    /// before the answer is in, the dropped request closes its connection
    /// (which cancels a wait on the server) and a `release {actor, ticket}`
    /// is sent in the background, so a grant already made, or still on its
    /// way, is handed back, never leaked; so is it after an `unavailable`
    /// answer, which cannot tell whether a grant was made. Once the answer is in, the `Held`
    /// is built in the same poll: there is no moment where it can be lost.
    async fn hold(&self, method: &str, wait: bool, timeout: Option<Duration>) -> Result<Held> {
        let inner = &self.actor.inner;
        let ticket = inner.http.ticket();
        let mut params = self.params(wait, timeout);
        params["ticket"] = Value::from(ticket.as_str());
        let mut pending = PendingTicket {
            http: Some(inner.http.clone()),
            actor: self.actor.handle.clone(),
            ticket,
        };
        let answer = inner.http.call(method, params).await;
        let held = answer.and_then(|got| {
            Ok(Held {
                inner: Some(inner.clone()),
                hold: text(&got, "hold")?,
                paths: paths(&got),
                actor: self.actor.name.clone(),
            })
        });
        // An answer that says what happened ends the ticket. One that does
        // not (the server, or its etcd, did not answer; the reply broke
        // off) may hide a grant made meanwhile: the ticket is given up
        // when `pending` drops, which releases such a grant.
        if !matches!(held, Err(Error::Unavailable { .. })) {
            pending.http = None;
        }
        held
    }

    /// Reserves every target at once, or `Err(Busy)` immediately.
    pub async fn try_admit(self) -> Result<Reservation> {
        self.hold("admit", false, None).await.map(Reservation)
    }

    /// Waits until every target can be reserved at once.
    pub async fn admit(self) -> Result<Reservation> {
        self.hold("admit", true, None).await.map(Reservation)
    }

    /// Waits at most `timeout` (`Error::Timeout`).
    pub async fn admit_timeout(self, timeout: Duration) -> Result<Reservation> {
        self.hold("admit", true, Some(timeout))
            .await
            .map(Reservation)
    }

    /// A fence, try-only.
    pub async fn fence(self) -> Result<Fence> {
        self.hold("fence", false, None).await.map(Fence)
    }

    /// A fence, waiting.
    pub async fn fence_wait(self) -> Result<Fence> {
        self.hold("fence", true, None).await.map(Fence)
    }
}

/// A request for a hold still in flight; dropped before its answer is in,
/// it gives the ticket up on the server in the background.
struct PendingTicket {
    /// `None` once the answer is in.
    http: Option<http::Client>,
    actor: String,
    ticket: String,
}

impl Drop for PendingTicket {
    fn drop(&mut self) {
        if let Some(http) = self.http.take() {
            let params = json!({"actor": self.actor, "ticket": self.ticket});
            spawn_detached(async move {
                let _ = http.call("release", params).await;
            });
        }
    }
}

/// A hold on the server; released on drop in the background.
#[derive(Debug)]
struct Held {
    inner: Option<Arc<Inner>>,
    hold: String,
    paths: Vec<PathBuf>,
    actor: String,
}

impl Held {
    async fn release(mut self) -> Result<()> {
        match self.inner.take() {
            Some(inner) => inner
                .http
                .call("release", json!({ "hold": self.hold }))
                .await
                .map(drop),
            None => Ok(()),
        }
    }

    async fn change(&mut self, method: &str, targets: Value) -> Result<()> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let got = inner
            .http
            .call(method, json!({"hold": self.hold, "targets": targets}))
            .await?;
        self.paths = paths(&got);
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let hold = std::mem::take(&mut self.hold);
            spawn_detached(async move {
                let _ = inner.http.call("release", json!({ "hold": hold })).await;
            });
        }
    }
}

/// A call reservation on the server, as [`crate::Reservation`].
#[derive(Debug)]
#[must_use = "dropping a Reservation releases it"]
pub struct Reservation(Held);

impl Reservation {
    /// The hold's wire handle (`h-…`).
    pub fn id(&self) -> &str {
        &self.0.hold
    }

    /// The reserved keys (absolute, resolved), as the server admitted them.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.0.paths.clone()
    }

    /// The name of the actor it belongs to.
    pub fn actor(&self) -> &str {
        &self.0.actor
    }

    /// Adds targets without waiting: all-or-nothing, `Err(Busy)` when contested.
    pub async fn extend<I>(&mut self, targets: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.0
            .change("fence.extend", targets_to_wire(targets))
            .await
    }

    /// Releases now and reports how that went.
    pub async fn release(self) -> Result<()> {
        self.0.release().await
    }
}

/// A fence on the server, as [`crate::Fence`].
#[derive(Debug)]
#[must_use = "dropping a Fence releases it"]
pub struct Fence(Held);

impl Fence {
    /// The hold's wire handle (`h-…`).
    pub fn id(&self) -> &str {
        &self.0.hold
    }

    /// The fenced keys (absolute, resolved).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.0.paths.clone()
    }

    /// Widens the fence: all-or-nothing, `Err(Busy)` when contested.
    pub async fn extend<I>(&mut self, targets: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.0
            .change("fence.extend", targets_to_wire(targets))
            .await
    }

    /// Narrows the fence to `targets`; the rest is released at once.
    pub async fn narrow<I>(&mut self, targets: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Into<Target>,
    {
        self.0
            .change("fence.narrow", targets_to_wire(targets))
            .await
    }

    /// Releases now and reports how that went.
    pub async fn release(self) -> Result<()> {
        self.0.release().await
    }
}

/// One actor's file tools on the server, as [`crate::Files`].
#[derive(Debug)]
pub struct Files<'a> {
    actor: &'a Actor,
}

impl Files<'_> {
    async fn call(&self, method: &str, mut params: Value) -> Result<Value> {
        params["actor"] = Value::from(self.actor.handle.as_str());
        self.actor.inner.http.call(method, params).await
    }

    async fn read_with(&self, path: &Path, lines: Value) -> Result<(Vec<u8>, ReadMark)> {
        let mut got = self
            .call(
                "files.read",
                json!({"path": path_text(path)?, "lines": lines}),
            )
            .await?;
        let content = content_from_wire(got.get("content").unwrap_or(&Value::Null))
            .map_err(|reason| Error::Unavailable { reason })?;
        let mark = decode(got["mark"].take())?;
        Ok((content, mark))
    }

    /// Reads a whole file: its bytes and a read mark.
    pub async fn read(&self, path: impl AsRef<Path>) -> Result<(Vec<u8>, ReadMark)> {
        self.read_with(path.as_ref(), Value::Null).await
    }

    /// Reads lines `lines` (0-based) with a mark over the whole file.
    pub async fn read_range(
        &self,
        path: impl AsRef<Path>,
        lines: impl RangeBounds<usize>,
    ) -> Result<(Vec<u8>, ReadMark)> {
        let start = match lines.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match lines.end_bound() {
            Bound::Included(e) => Some(e.saturating_add(1)),
            Bound::Excluded(e) => Some(*e),
            Bound::Unbounded => None,
        };
        self.read_with(path.as_ref(), json!([start, end])).await
    }

    /// Writes a file (creating it), behind the version gate.
    pub async fn write(&self, path: impl AsRef<Path>, data: impl AsRef<[u8]>) -> Result<Receipt> {
        let p =
            json!({"path": path_text(path.as_ref())?, "content": content_to_wire(data.as_ref())});
        decode(self.call("files.write", p).await?)
    }

    /// Appends to a file.
    pub async fn append(&self, path: impl AsRef<Path>, data: impl AsRef<[u8]>) -> Result<Receipt> {
        let p =
            json!({"path": path_text(path.as_ref())?, "content": content_to_wire(data.as_ref())});
        decode(self.call("files.append", p).await?)
    }

    /// Replaces the one occurrence of `old` by `new`.
    pub async fn replace(
        &self,
        path: impl AsRef<Path>,
        old: impl AsRef<str>,
        new: impl AsRef<str>,
    ) -> Result<Receipt> {
        let p =
            json!({"path": path_text(path.as_ref())?, "old": old.as_ref(), "new": new.as_ref()});
        decode(self.call("files.replace", p).await?)
    }

    /// Deletes a file.
    pub async fn delete(&self, path: impl AsRef<Path>) -> Result<Receipt> {
        let p = json!({"path": path_text(path.as_ref())?});
        decode(self.call("files.delete", p).await?)
    }

    /// Renames a file.
    pub async fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<Receipt> {
        let p = json!({"from": path_text(from.as_ref())?, "to": path_text(to.as_ref())?});
        decode(self.call("files.rename", p).await?)
    }
}
