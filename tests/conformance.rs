//! The conformance suite (SPEC §15): the scheduler's behaviours (§2–§5,
//! and the slots, priorities and fence changes of §11) and the file tools,
//! written ONCE against a small trait, and run against the in-process
//! `Scheduler` and against a `writ serve` through `writ::remote`. Both must
//! pass the same assertions; each test may pick the `Config` it runs under,
//! which the server takes as it is.
//!
//! The suite uses only the public API. What only the in-process API can show
//! (the drop timing of guards, a future polled by hand, blocking admits,
//! hooks in `Config`, type bounds) stays in tests/scheduler.rs and
//! tests/orchestration.rs, whose headers say why.
//!
//! Guards are released through the trait (`release`), because a remote guard
//! dropped without it is released in the background and a test must not race
//! that. A waiting request is a boxed future: `queued` polls it until the
//! dump shows it waiting; from then on the queue (in process, or on the
//! server) keeps it without further polling, and dropping the box cancels it.

#![allow(async_fn_in_trait)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use writ::{Config, Error, Grant, HoldKind, Mode, SlotLimit, Target};

/// A session that makes actors.
trait Backend {
    type Actor: Agent;
    fn root(&self) -> &Path;
    async fn actor(&self, name: &str, grant: Grant) -> Result<Self::Actor, Error>;
    async fn dump(&self) -> Value;
    async fn dump_table(&self) -> String;
    /// Checks the scheduler's internal invariants (over HTTP, those of the
    /// server's scheduler): the harness's own check, not a behaviour.
    fn check(&self);
}

/// A request's priority and label (the `request(..)` builder).
#[derive(Default)]
struct Ask {
    priority: i32,
    label: Option<&'static str>,
}

fn at(priority: i32) -> Ask {
    Ask {
        priority,
        label: None,
    }
}

/// An actor that admits, fences, makes children and uses files.
trait Agent: Sized {
    type Call;
    type Fence;
    fn name(&self) -> &str;
    async fn child(&self, name: &str, grant: Grant) -> Result<Self, Error>;
    async fn child_wait(&self, name: &str, grant: Grant) -> Result<Self, Error>;
    async fn child_wait_timeout(
        &self,
        name: &str,
        grant: Grant,
        d: Duration,
    ) -> Result<Self, Error>;
    async fn try_admit(&self, t: Vec<Target>) -> Result<Self::Call, Error>;
    async fn admit(&self, t: Vec<Target>) -> Result<Self::Call, Error>;
    async fn admit_timeout(&self, t: Vec<Target>, d: Duration) -> Result<Self::Call, Error>;
    async fn fence(&self, t: Vec<Target>) -> Result<Self::Fence, Error>;
    async fn fence_wait(&self, t: Vec<Target>) -> Result<Self::Fence, Error>;
    async fn try_admit_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Call, Error>;
    async fn admit_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Call, Error>;
    async fn fence_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Fence, Error>;
    async fn extend_call(&self, c: &mut Self::Call, t: Vec<Target>) -> Result<(), Error>;
    fn call_paths(c: &Self::Call) -> Vec<PathBuf>;
    fn fence_paths(f: &Self::Fence) -> Vec<PathBuf>;
    async fn extend(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error>;
    async fn narrow(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error>;
    /// Releases a call; it goes by the hold, so any actor may hand it in.
    async fn release(&self, c: Self::Call);
    /// Releases a fence; it goes by the hold, as `release`.
    async fn release_fence(&self, f: Self::Fence);
    async fn close(self);
    async fn read(&self, path: &str) -> Result<Vec<u8>, Error>;
    async fn write(&self, path: &str, data: &str) -> Result<(), Error>;
    async fn replace(&self, path: &str, old: &str, new: &str) -> Result<(), Error>;
    async fn delete(&self, path: &str) -> Result<(), Error>;
    async fn rename(&self, from: &str, to: &str) -> Result<(), Error>;
}

// ---- the in-process backend ----

struct InProcess {
    sched: writ::Scheduler,
    root: PathBuf,
}

impl Backend for InProcess {
    type Actor = writ::Actor;
    fn root(&self) -> &Path {
        &self.root
    }
    async fn actor(&self, name: &str, grant: Grant) -> Result<writ::Actor, Error> {
        self.sched.actor(name, grant)
    }
    async fn dump(&self) -> Value {
        serde_json::to_value(self.sched.dump()).unwrap()
    }
    async fn dump_table(&self) -> String {
        self.sched.dump().to_string()
    }
    fn check(&self) {
        self.sched.assert_invariants();
    }
}

fn in_process_request(a: &writ::Actor, t: Vec<Target>, ask: Ask) -> writ::Request {
    let request = a.request(t).priority(ask.priority);
    match ask.label {
        Some(label) => request.label(label),
        None => request,
    }
}

impl Agent for writ::Actor {
    type Call = writ::Reservation;
    type Fence = writ::Fence;
    fn name(&self) -> &str {
        writ::Actor::name(self)
    }
    async fn child(&self, name: &str, grant: Grant) -> Result<Self, Error> {
        writ::Actor::child(self, name, grant)
    }
    async fn child_wait(&self, name: &str, grant: Grant) -> Result<Self, Error> {
        writ::Actor::child_wait(self, name, grant).await
    }
    async fn child_wait_timeout(
        &self,
        name: &str,
        grant: Grant,
        d: Duration,
    ) -> Result<Self, Error> {
        writ::Actor::child_wait_timeout(self, name, grant, d).await
    }
    async fn try_admit(&self, t: Vec<Target>) -> Result<Self::Call, Error> {
        writ::Actor::try_admit(self, t)
    }
    async fn admit(&self, t: Vec<Target>) -> Result<Self::Call, Error> {
        writ::Actor::admit(self, t).await
    }
    async fn admit_timeout(&self, t: Vec<Target>, d: Duration) -> Result<Self::Call, Error> {
        writ::Actor::admit_timeout(self, t, d).await
    }
    async fn fence(&self, t: Vec<Target>) -> Result<Self::Fence, Error> {
        writ::Actor::fence(self, t)
    }
    async fn fence_wait(&self, t: Vec<Target>) -> Result<Self::Fence, Error> {
        writ::Actor::fence_wait(self, t).await
    }
    async fn try_admit_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Call, Error> {
        in_process_request(self, t, ask).try_admit()
    }
    async fn admit_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Call, Error> {
        in_process_request(self, t, ask).admit().await
    }
    async fn fence_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Fence, Error> {
        in_process_request(self, t, ask).fence()
    }
    async fn extend_call(&self, c: &mut Self::Call, t: Vec<Target>) -> Result<(), Error> {
        c.extend(t)
    }
    fn call_paths(c: &Self::Call) -> Vec<PathBuf> {
        c.paths()
    }
    fn fence_paths(f: &Self::Fence) -> Vec<PathBuf> {
        f.paths()
    }
    async fn extend(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error> {
        f.extend(t)
    }
    async fn narrow(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error> {
        f.narrow(t)
    }
    async fn release(&self, c: Self::Call) {
        drop(c)
    }
    async fn release_fence(&self, f: Self::Fence) {
        drop(f)
    }
    async fn close(self) {
        drop(self)
    }
    async fn read(&self, path: &str) -> Result<Vec<u8>, Error> {
        self.files().read(path).map(|(b, _)| b)
    }
    async fn write(&self, path: &str, data: &str) -> Result<(), Error> {
        self.files().write(path, data).map(drop)
    }
    async fn replace(&self, path: &str, old: &str, new: &str) -> Result<(), Error> {
        self.files().replace(path, old, new).map(drop)
    }
    async fn delete(&self, path: &str) -> Result<(), Error> {
        self.files().delete(path).map(drop)
    }
    async fn rename(&self, from: &str, to: &str) -> Result<(), Error> {
        self.files().rename(from, to).map(drop)
    }
}

// ---- the server backend ----

struct OverHttp {
    session: writ::remote::Session,
    server: writ::server::Server,
    root: PathBuf,
}

impl Backend for OverHttp {
    type Actor = writ::remote::Actor;
    fn root(&self) -> &Path {
        &self.root
    }
    async fn actor(&self, name: &str, grant: Grant) -> Result<Self::Actor, Error> {
        self.session.actor(name, grant).await
    }
    async fn dump(&self) -> Value {
        self.session.dump().await.unwrap()
    }
    async fn dump_table(&self) -> String {
        self.session.dump_table().await.unwrap()
    }
    fn check(&self) {
        self.server.scheduler().assert_invariants();
    }
}

fn remote_request(a: &writ::remote::Actor, t: Vec<Target>, ask: Ask) -> writ::remote::Request<'_> {
    let request = a.request(t).priority(ask.priority);
    match ask.label {
        Some(label) => request.label(label),
        None => request,
    }
}

impl Agent for writ::remote::Actor {
    type Call = writ::remote::Reservation;
    type Fence = writ::remote::Fence;
    fn name(&self) -> &str {
        writ::remote::Actor::name(self)
    }
    async fn child(&self, name: &str, grant: Grant) -> Result<Self, Error> {
        writ::remote::Actor::child(self, name, grant).await
    }
    async fn child_wait(&self, name: &str, grant: Grant) -> Result<Self, Error> {
        writ::remote::Actor::child_wait(self, name, grant).await
    }
    async fn child_wait_timeout(
        &self,
        name: &str,
        grant: Grant,
        d: Duration,
    ) -> Result<Self, Error> {
        writ::remote::Actor::child_wait_timeout(self, name, grant, d).await
    }
    async fn try_admit(&self, t: Vec<Target>) -> Result<Self::Call, Error> {
        writ::remote::Actor::try_admit(self, t).await
    }
    async fn admit(&self, t: Vec<Target>) -> Result<Self::Call, Error> {
        writ::remote::Actor::admit(self, t).await
    }
    async fn admit_timeout(&self, t: Vec<Target>, d: Duration) -> Result<Self::Call, Error> {
        writ::remote::Actor::admit_timeout(self, t, d).await
    }
    async fn fence(&self, t: Vec<Target>) -> Result<Self::Fence, Error> {
        writ::remote::Actor::fence(self, t).await
    }
    async fn fence_wait(&self, t: Vec<Target>) -> Result<Self::Fence, Error> {
        writ::remote::Actor::fence_wait(self, t).await
    }
    async fn try_admit_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Call, Error> {
        remote_request(self, t, ask).try_admit().await
    }
    async fn admit_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Call, Error> {
        remote_request(self, t, ask).admit().await
    }
    async fn fence_with(&self, t: Vec<Target>, ask: Ask) -> Result<Self::Fence, Error> {
        remote_request(self, t, ask).fence().await
    }
    async fn extend_call(&self, c: &mut Self::Call, t: Vec<Target>) -> Result<(), Error> {
        c.extend(t).await
    }
    fn call_paths(c: &Self::Call) -> Vec<PathBuf> {
        c.paths()
    }
    fn fence_paths(f: &Self::Fence) -> Vec<PathBuf> {
        f.paths()
    }
    async fn extend(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error> {
        f.extend(t).await
    }
    async fn narrow(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error> {
        f.narrow(t).await
    }
    async fn release(&self, c: Self::Call) {
        c.release().await.unwrap()
    }
    async fn release_fence(&self, f: Self::Fence) {
        f.release().await.unwrap()
    }
    async fn close(self) {
        writ::remote::Actor::close(self).await.unwrap()
    }
    async fn read(&self, path: &str) -> Result<Vec<u8>, Error> {
        self.files().read(path).await.map(|(b, _)| b)
    }
    async fn write(&self, path: &str, data: &str) -> Result<(), Error> {
        self.files().write(path, data).await.map(drop)
    }
    async fn replace(&self, path: &str, old: &str, new: &str) -> Result<(), Error> {
        self.files().replace(path, old, new).await.map(drop)
    }
    async fn delete(&self, path: &str) -> Result<(), Error> {
        self.files().delete(path).await.map(drop)
    }
    async fn rename(&self, from: &str, to: &str) -> Result<(), Error> {
        self.files().rename(from, to).await.map(drop)
    }
}

// ---- two servers sharing one session on etcd (feature `etcd`) ----

#[cfg(feature = "etcd")]
#[path = "common/etcd_server.rs"]
mod etcd_server;

/// Two `writ serve --etcd` servers on one session of a real etcd. Root
/// actors are made alternately through one and the other (a child goes
/// through its parent's server), and dumps are read alternately too, so a
/// behaviour passes only if every server sees what another one did.
#[cfg(feature = "etcd")]
struct OverEtcd {
    sessions: [writ::remote::Session; 2],
    servers: Vec<writ::server::Server>,
    root: PathBuf,
    turn: std::sync::atomic::AtomicUsize,
    _etcd: etcd_server::Etcd,
}

#[cfg(feature = "etcd")]
impl OverEtcd {
    fn next(&self) -> &writ::remote::Session {
        let n = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.sessions[n % 2]
    }
}

#[cfg(feature = "etcd")]
impl Backend for OverEtcd {
    type Actor = writ::remote::Actor;
    fn root(&self) -> &Path {
        &self.root
    }
    async fn actor(&self, name: &str, grant: Grant) -> Result<Self::Actor, Error> {
        self.next().actor(name, grant).await
    }
    async fn dump(&self) -> Value {
        self.next().dump().await.unwrap()
    }
    async fn dump_table(&self) -> String {
        self.next().dump_table().await.unwrap()
    }
    /// Nothing reached either server's in-process table: the whole
    /// session is in etcd.
    fn check(&self) {
        for server in &self.servers {
            let local = server.scheduler().dump();
            assert!(
                local.actors.is_empty() && local.holds.is_empty() && local.waiters.is_empty(),
                "a server on etcd used its in-process table: {local}"
            );
        }
    }
}

// ---- helpers ----

fn t(paths: &[&str]) -> Vec<Target> {
    paths.iter().map(|p| Target::from(*p)).collect()
}

fn shared(path: &str) -> Vec<Target> {
    vec![Target::from(path).shared()]
}

fn busy<T>(result: Result<T, Error>) -> writ::Busy {
    match result {
        Err(Error::Busy(b)) => b,
        Err(other) => panic!("expected Busy, got {other}"),
        Ok(_) => panic!("expected Busy, got a grant"),
    }
}

fn deadlock<T>(result: Result<T, Error>) -> Vec<String> {
    match result {
        Err(Error::Deadlock { cycle }) => cycle,
        Err(other) => panic!("expected Deadlock, got {other}"),
        Ok(_) => panic!("expected Deadlock, got a grant"),
    }
}

/// A path as the dump spells it.
fn text(path: &Path) -> Value {
    Value::from(path.to_str().unwrap())
}

/// Asks `targets` as `actor` without waiting, expects the grant, and hands it back.
async fn passes<A: Agent>(actor: &A, targets: Vec<Target>) {
    match actor.try_admit(targets).await {
        Ok(call) => actor.release(call).await,
        Err(e) => panic!("expected a grant, got {e}"),
    }
}

fn count(dump: &Value, what: &str) -> usize {
    dump[what].as_array().map_or(0, Vec::len)
}

/// Nothing held and nothing waiting (actors may live on).
fn idle(dump: &Value) -> bool {
    count(dump, "holds") == 0 && count(dump, "waiters") == 0
}

const PATIENCE: Duration = Duration::from_secs(10);

/// Polls the dump until `pred` holds, for at most `PATIENCE`.
async fn until<B: Backend>(b: &B, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let dump = b.dump().await;
        if pred(&dump) {
            return dump;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {dump:#}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn waiters<B: Backend>(b: &B, n: usize) -> Value {
    until(b, &format!("{n} waiter(s)"), |d| count(d, "waiters") == n).await
}

/// Drives a request until the dump shows `n` waiters (it being the last),
/// failing if it is answered instead.
async fn queued<B, F, T>(b: &B, request: &mut F, n: usize)
where
    B: Backend,
    F: Future<Output = Result<T, Error>> + Unpin,
{
    tokio::select! {
        biased;
        _ = waiters(b, n) => {}
        answer = request => panic!(
            "expected to wait as waiter {n}, was answered: {:?}",
            answer.err().map(|e| e.to_string())
        ),
    }
}

/// Awaits an answer that must come without anyone else acting (bounded).
async fn within<F: Future>(what: &str, answer: F) -> F::Output {
    tokio::time::timeout(PATIENCE, answer)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PATIENCE:?}"))
}

// ---- §3: the conflict matrix ----

#[derive(Debug, Clone, Copy, PartialEq)]
enum Relation {
    Same,
    ParentOverChild,
    ChildOverParent,
    Siblings,
}

enum Guard<A: Agent> {
    Fence(A::Fence),
    Call(A::Call),
}

async fn take<A: Agent>(actor: &A, (kind, mode): (HoldKind, Mode)) -> Result<Guard<A>, Error> {
    let target = match mode {
        Mode::Shared => shared("x.rs"),
        Mode::Exclusive => t(&["x.rs"]),
    };
    match kind {
        HoldKind::Fence => actor.fence(target).await.map(Guard::Fence),
        HoldKind::Call => actor.try_admit(target).await.map(Guard::Call),
        HoldKind::Claim => unreachable!("claims are given by the file tools, never taken"),
    }
}

async fn give_back<A: Agent>(actor: &A, guard: Guard<A>) {
    match guard {
        Guard::Fence(f) => actor.release_fence(f).await,
        Guard::Call(c) => actor.release(c).await,
    }
}

/// Takes hold `first` as one actor, then asks hold `then` as another (related
/// as given) and reports whether that was refused. Leaves nothing behind.
async fn clash_for<B: Backend>(
    b: &B,
    first: (HoldKind, Mode),
    then: (HoldKind, Mode),
    relation: Relation,
) -> bool {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let parent = lead.child("parent", Grant::workspace(root)).await.unwrap();
    let child = parent.child("child", Grant::workspace(root)).await.unwrap();
    let sibling = lead.child("sibling", Grant::workspace(root)).await.unwrap();
    let (one, two) = match relation {
        Relation::Same => (&parent, &parent),
        Relation::ParentOverChild => (&parent, &child),
        Relation::ChildOverParent => (&child, &parent),
        Relation::Siblings => (&parent, &sibling),
    };
    let held = take(one, first)
        .await
        .expect("the first hold is always granted");
    let refused = match take(two, then).await {
        Ok(guard) => {
            give_back(two, guard).await;
            false
        }
        Err(Error::Busy(_)) => true,
        Err(e) => panic!("unexpected {e}"),
    };
    b.check();
    give_back(one, held).await;
    for actor in [child, sibling, parent, lead] {
        actor.close().await;
    }
    assert!(idle(&b.dump().await));
    refused
}

async fn conflict_matrix_between_unrelated_actors<B: Backend>(b: &B) {
    use HoldKind::*;
    use Mode::*;
    let fx = (Fence, Exclusive);
    let fs = (Fence, Shared);
    let cx = (Call, Exclusive);
    let cs = (Call, Shared);
    let expected = [
        (fx, fx, true),
        (fx, fs, true),
        (fx, cx, true),
        (fx, cs, false),
        (fs, fx, true),
        (fs, fs, false),
        (fs, cx, true),
        (fs, cs, false),
        (cx, fx, true),
        (cx, fs, true),
        (cx, cx, true),
        (cx, cs, true),
        (cs, fx, false),
        (cs, fs, false),
        (cs, cx, true),
        (cs, cs, false),
    ];
    for (first, then, clash) in expected {
        assert_eq!(
            clash_for(b, first, then, Relation::Siblings).await,
            clash,
            "{first:?} then {then:?} (siblings)"
        );
    }
}

async fn a_fence_covers_its_owner_and_descendants_but_not_upwards<B: Backend>(b: &B) {
    use HoldKind::*;
    use Mode::*;
    use Relation::*;
    let fx = (Fence, Exclusive);
    let cx = (Call, Exclusive);
    let cs = (Call, Shared);
    // The owner's and its descendants' holds pass through its fence.
    assert!(!clash_for(b, fx, cx, Same).await);
    assert!(!clash_for(b, fx, fx, Same).await);
    assert!(!clash_for(b, fx, cx, ParentOverChild).await);
    assert!(!clash_for(b, fx, fx, ParentOverChild).await);
    // Ownership moves down, never up: the child's fence refuses the
    // parent's calls, though a parent's fence still covers the child's.
    assert!(clash_for(b, fx, cx, ChildOverParent).await);
    assert!(!clash_for(b, fx, fx, ChildOverParent).await);
    // Within a line, calls still exclude each other.
    assert!(clash_for(b, cx, cx, Same).await);
    assert!(clash_for(b, cx, cs, ParentOverChild).await);
    assert!(!clash_for(b, cs, cs, Same).await);
}

async fn parallel_calls_of_one_actor_on_one_file_are_serialized<B: Backend>(b: &B) {
    let a = b
        .actor("a", Grant::fenced(b.root(), ["src/"]))
        .await
        .unwrap();
    let first = a.try_admit(t(&["src/lex.rs"])).await.unwrap();
    assert_eq!(busy(a.try_admit(t(&["src/lex.rs"])).await).holder, "a");
    a.release(first).await;
    passes(&a, t(&["src/lex.rs"])).await;
}

// ---- §2: keys ----

async fn trees_cover_descendants_exact_keys_only_themselves<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let tree = a.try_admit(t(&["src/"])).await.unwrap();
    busy(o.try_admit(t(&["src/deep/x.rs"])).await);
    busy(o.try_admit(t(&["src"])).await); // the tree's own path
    passes(&o, t(&["src-old/x.rs"])).await; // a sibling prefix is not inside
    let exact = a.try_admit(t(&["lib"])).await.unwrap();
    passes(&o, t(&["lib/inner.rs"])).await; // an exact key covers only itself
    busy(o.try_admit(t(&["lib/"])).await); // a tree over an exact key overlaps it
    busy(o.try_admit(vec![Target::tree(root.join("."))]).await);
    a.release(exact).await;
    a.release(tree).await;
    assert!(idle(&b.dump().await));
}

async fn spellings_resolve_to_one_key<B: Backend>(b: &B) {
    let root = b.root();
    std::fs::create_dir_all(root.join("src/real")).unwrap();
    std::os::unix::fs::symlink(root.join("src/real"), root.join("link")).unwrap();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let held = a.try_admit(t(&["src/real/x.rs"])).await.unwrap();
    for spelling in [
        "src/real/x.rs".to_string(),
        "./src//real/./x.rs".to_string(),
        "src/other/../real/x.rs".to_string(),
        "link/x.rs".to_string(),
        "link/../real/x.rs".to_string(),
        root.join("src/real/x.rs").display().to_string(),
    ] {
        let refused = busy(o.try_admit(t(&[spelling.as_str()])).await);
        assert_eq!(refused.path, root.join("src/real/x.rs"), "{spelling}");
    }
    a.release(held).await;
}

async fn escapes_are_refused_without_residue<B: Backend>(b: &B) {
    let base = b.root();
    let root = base.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(base.join("ws-old")).unwrap();
    std::os::unix::fs::symlink(base.join("ws-old"), root.join("escape")).unwrap();
    let a = b.actor("a", Grant::workspace(&root)).await.unwrap();
    for bad in [
        "../ws-old/a.rs",
        "escape/a.rs",
        "/etc/passwd",
        "sub/../../ws-old/x",
        "escape/",
    ] {
        match a.try_admit(t(&["ok.rs", bad])).await {
            Err(Error::OutsideGrant { path, root: r }) => {
                assert!(!path.starts_with(&root), "{bad}: {path:?}");
                assert_eq!(r, root);
            }
            other => panic!("{bad}: expected OutsideGrant, got {:?}", other.err()),
        }
    }
    assert!(idle(&b.dump().await), "nothing of a refused request stays");
}

async fn malformed_targets_are_invalid_paths<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let long = "x".repeat(300);
    for bad in [
        "",
        "a\0b",
        "CON",
        "dir/nul.txt",
        "trailing.",
        "space ",
        long.as_str(),
    ] {
        match a.try_admit(t(&[bad])).await {
            Err(Error::InvalidPath { .. }) => {}
            other => panic!("{bad:?}: expected InvalidPath, got {:?}", other.err()),
        }
    }
    match a.try_admit(vec![]).await {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {:?}", other.err()),
    }
    assert!(idle(&b.dump().await));
}

/// Runs under `Config::portable_names(false)`.
async fn without_portable_names_windows_rules_do_not_apply<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    passes(&a, t(&["CON", "trailing."])).await;
}

async fn grant_roots_must_exist_and_children_stay_inside<B: Backend>(b: &B) {
    let root = b.root();
    std::fs::write(root.join("file"), "x").unwrap();
    for bad in ["missing", "file"] {
        match b.actor("a", Grant::workspace(root.join(bad))).await {
            Err(Error::InvalidPath { .. }) => {}
            other => panic!("{bad}: expected InvalidPath, got {:?}", other.err()),
        }
    }
    std::fs::create_dir_all(root.join("ws/sub")).unwrap();
    std::fs::create_dir_all(root.join("ws-old")).unwrap();
    let lead = b
        .actor("lead", Grant::workspace(root.join("ws")))
        .await
        .unwrap();
    lead.child("in", Grant::workspace(root.join("ws/sub")))
        .await
        .unwrap();
    for (name, outside) in [("out", root.join("ws-old")), ("up", root.to_path_buf())] {
        match lead.child(name, Grant::workspace(outside)).await {
            Err(Error::OutsideGrant { .. }) => {}
            other => panic!("{name}: expected OutsideGrant, got {:?}", other.err()),
        }
    }
}

/// Runs under `CaseMode::Insensitive`.
async fn insensitive_case_compares_folded_and_dumps_the_spelling<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let held = a.try_admit(t(&["Src/Lexer.RS"])).await.unwrap();
    busy(o.try_admit(t(&["src/lexer.rs"])).await);
    let dump = b.dump().await;
    assert_eq!(
        dump["holds"][0]["paths"][0]["path"],
        text(&root.join("Src/Lexer.RS"))
    );
    a.release(held).await;
}

/// Runs under `CaseMode::Sensitive`.
async fn sensitive_case_tells_spellings_apart<B: Backend>(b: &B) {
    let c = b.actor("c", Grant::workspace(b.root())).await.unwrap();
    let d = b.actor("d", Grant::workspace(b.root())).await.unwrap();
    let held = c.try_admit(t(&["Src/Lexer.RS"])).await.unwrap();
    passes(&d, t(&["src/lexer.rs"])).await;
    c.release(held).await;
}

/// Runs under `CaseMode::Detect`.
async fn detect_probes_the_root_file_system<B: Backend>(b: &B) {
    let root = b.root();
    std::fs::write(root.join("Probe.txt"), "x").unwrap();
    // Linux temp file systems are case-sensitive: the swapped spelling is
    // another file, so Detect behaves as Sensitive there.
    let insensitive_fs = std::fs::metadata(root.join("pROBE.TXT")).is_ok();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let held = a.try_admit(t(&["Lexer.rs"])).await.unwrap();
    match o.try_admit(t(&["lexer.rs"])).await {
        Ok(call) => {
            assert!(!insensitive_fs);
            o.release(call).await;
        }
        Err(Error::Busy(_)) => assert!(insensitive_fs),
        Err(e) => panic!("unexpected {e}"),
    }
    a.release(held).await;
}

async fn overlapping_targets_in_one_request_merge<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let held = a
        .try_admit(vec![
            Target::file("a.rs").shared(),
            Target::file("a.rs"),
            Target::tree("src"),
            Target::file("src/x.rs").shared(),
            Target::tree("docs").shared(),
            Target::file("docs/y.md"),
        ])
        .await
        .unwrap();
    let dump = b.dump().await;
    let entry = |rel: &str, tree: bool, mode: &str| json!({"path": text(&root.join(rel)), "tree": tree, "mode": mode});
    assert_eq!(
        dump["holds"][0]["paths"],
        json!([
            entry("a.rs", false, "exclusive"),
            entry("docs", true, "shared"),
            entry("docs/y.md", false, "exclusive"),
            entry("src", true, "exclusive"),
        ])
    );
    assert_eq!(
        B::Actor::call_paths(&held),
        ["a.rs", "docs", "docs/y.md", "src"].map(|p| root.join(p))
    );
    a.release(held).await;
}

// ---- §3: grants ----

async fn fenced_actor_writes_only_inside_its_fence_and_reads_anywhere<B: Backend>(b: &B) {
    let root = b.root();
    let a = b
        .actor("a", Grant::fenced(root, ["src/parser/"]))
        .await
        .unwrap();
    passes(&a, t(&["src/parser/lex.rs"])).await;
    passes(&a, t(&["src/parser/"])).await; // equal counts as inside
    match a.try_admit(t(&["src/main.rs"])).await {
        Err(Error::OutsideFence { path, actor, fence }) => {
            assert_eq!(path, root.join("src/main.rs"));
            assert_eq!(actor, "a");
            assert_eq!(fence, vec![root.join("src/parser")]);
        }
        other => panic!("expected OutsideFence, got {:?}", other.err()),
    }
    passes(&a, shared("src/main.rs")).await;
    match a.fence(t(&["docs/"])).await {
        Err(Error::OutsideFence { .. }) => {}
        other => panic!(
            "expected OutsideFence, got {:?}",
            other.err().map(|e| e.to_string())
        ),
    }
    let inner = a.fence(t(&["src/parser/sub/"])).await.unwrap();
    a.release_fence(inner).await;
}

async fn a_fenced_grant_is_acquired_all_or_nothing_at_creation<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let held = a.try_admit(t(&["docs/b.md"])).await.unwrap();
    let before = count(&b.dump().await, "holds");
    let refused = busy(
        b.actor("b", Grant::fenced(root, ["src/", "docs/b.md"]))
            .await,
    );
    assert_eq!(refused.holder, "a");
    let dump = b.dump().await;
    assert_eq!(
        count(&dump, "holds"),
        before,
        "no part of the fence was taken"
    );
    assert!(
        dump["actors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["name"] != "b")
    );
    passes(&a, t(&["src/x.rs"])).await;
    // A child's fenced grant likewise; closing the fenced actor frees it.
    let kid = a
        .child("kid", Grant::fenced(root, ["src/parser/"]))
        .await
        .unwrap();
    let twin = a
        .child("twin", Grant::fenced(root, ["src/lib.rs", "src/parser/"]))
        .await;
    assert_eq!(busy(twin).holder, "kid");
    kid.close().await;
    let twin = a
        .child("twin", Grant::fenced(root, ["src/parser/"]))
        .await
        .unwrap();
    twin.close().await;
    a.release(held).await;
}

async fn children_of_fenced_actors_are_fenced_inside_or_read_only<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b
        .actor("lead", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    lead.child("inside", Grant::fenced(root, ["src/a/"]))
        .await
        .unwrap();
    for (name, grant) in [
        ("wider", Grant::fenced(root, ["docs/"])),
        ("optimistic", Grant::workspace(root)),
    ] {
        match lead.child(name, grant).await {
            Err(Error::OutsideFence { .. }) => {}
            other => panic!("{name}: expected OutsideFence, got {:?}", other.err()),
        }
    }
    lead.child("reader", Grant::read_only(root)).await.unwrap();
}

fn outside_fence<T>(result: Result<T, Error>, path: &Path) {
    match result {
        Err(Error::OutsideFence { path: p, .. }) => assert_eq!(p, path),
        Err(other) => panic!("expected OutsideFence for {}, got {other}", path.display()),
        Ok(_) => panic!("expected OutsideFence for {}, got a grant", path.display()),
    }
}

/// The modes of the call holds of `actor` in the dump.
fn call_modes(dump: &Value, actor: &str) -> Vec<Value> {
    dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["actor"] == actor && h["kind"] == "call")
        .flat_map(|h| {
            h["paths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["mode"].clone())
        })
        .collect()
}

async fn a_fenced_actor_fences_only_within_its_grant_fence_even_shared<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::fenced(root, ["src/"])).await.unwrap();
    // A shared call reads anywhere; a shared fence is still a fence.
    passes(&a, shared("README.md")).await;
    outside_fence(a.fence(shared("README.md")).await, &root.join("README.md"));
    let mut inner = a.fence(t(&["src/a/"])).await.unwrap();
    outside_fence(
        a.extend(&mut inner, shared("docs/")).await,
        &root.join("docs"),
    );
    assert_eq!(B::Actor::fence_paths(&inner), [root.join("src/a")]);
    // Nothing of the refused fences was left behind.
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    passes(&o, t(&["README.md", "docs/x.md"])).await;
    a.release_fence(inner).await;
}

async fn a_shared_grant_fence_lets_its_actor_read_and_watch_but_not_write<B: Backend>(b: &B) {
    let root = b.root();
    let a = b
        .actor("a", Grant::fenced(root, [Target::tree("src").shared()]))
        .await
        .unwrap();
    passes(&a, shared("src/x.rs")).await;
    outside_fence(a.try_admit(t(&["src/x.rs"])).await, &root.join("src/x.rs"));
    outside_fence(a.fence(t(&["src/a/"])).await, &root.join("src/a"));
    let watch = a.fence(vec![Target::tree("src/a").shared()]).await.unwrap();
    a.release_fence(watch).await;
    // Its `workspace()` is its grant fence at the fence's mode: a read.
    let all = a.try_admit(vec![Target::workspace()]).await.unwrap();
    assert_eq!(call_modes(&b.dump().await, "a"), [json!("shared")]);
    a.release(all).await;
    // A writable child is fenced within it at modes no stronger.
    outside_fence(
        a.child("kid", Grant::fenced(root, ["src/a/"])).await,
        &root.join("src/a"),
    );
    let kid = a
        .child("kid", Grant::fenced(root, [Target::tree("src/a").shared()]))
        .await
        .unwrap();
    outside_fence(
        kid.try_admit(t(&["src/a/x.rs"])).await,
        &root.join("src/a/x.rs"),
    );
    kid.close().await;
    // Others read under it; nobody writes there while it stands.
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    passes(&o, shared("src/x.rs")).await;
    assert_eq!(busy(o.try_admit(t(&["src/x.rs"])).await).holder, "a");
}

async fn extending_a_hold_onto_what_it_holds_is_granted_while_others_wait<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let mut call = lead.try_admit(t(&["x.rs"])).await.unwrap();
    let mut w = Box::pin(other.admit(t(&["x.rs"])));
    queued(b, &mut w, 1).await;
    lead.extend_call(&mut call, t(&["x.rs"])).await.unwrap();
    assert_eq!(B::Actor::call_paths(&call), [root.join("x.rs")]);
    // A shared hold made exclusive is a new claim on the held path: the
    // earlier waiter for it comes first (a call has no owner's precedence).
    let mut read = lead.try_admit(shared("docs/a.md")).await.unwrap();
    let mut w2 = Box::pin(other.admit(t(&["docs/a.md"])));
    queued(b, &mut w2, 2).await;
    lead.extend_call(&mut read, shared("docs/a.md"))
        .await
        .unwrap();
    assert!(busy(lead.extend_call(&mut read, t(&["docs/a.md"])).await).queued);
    assert_eq!(
        call_modes(&b.dump().await, "lead"),
        [json!("exclusive"), json!("shared")]
    );
    b.check();
    lead.release(call).await;
    lead.release(read).await;
    for (what, w) in [("w", w), ("w2", w2)] {
        let r = within(what, w).await.unwrap();
        other.release(r).await;
    }
}

fn read_only_refused<T>(result: Result<T, Error>) {
    match result {
        Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reader"),
        Err(other) => panic!("expected ReadOnly, got {other}"),
        Ok(_) => panic!("expected ReadOnly, got a grant"),
    }
}

async fn a_read_only_actor_takes_shared_holds_only<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let reader = lead.child("reader", Grant::read_only(root)).await.unwrap();
    read_only_refused(reader.try_admit(t(&["a.rs"])).await);
    read_only_refused(reader.fence(t(&["src/"])).await);
    read_only_refused(reader.try_admit(vec![Target::workspace()]).await);
    read_only_refused(
        reader
            .try_admit(vec![Target::file("b.rs").shared(), Target::file("a.rs")])
            .await,
    );
    assert_eq!(count(&b.dump().await, "holds"), 0);
    let read = reader.try_admit(shared("a.rs")).await.unwrap();
    let watch = reader
        .fence(vec![Target::tree("src").shared()])
        .await
        .unwrap();
    let all = reader
        .try_admit(vec![Target::workspace().shared()])
        .await
        .unwrap();
    reader.release(read).await;
    reader.release_fence(watch).await;
    reader.release(all).await;
}

async fn a_child_of_a_read_only_actor_must_be_read_only<B: Backend>(b: &B) {
    let root = b.root();
    let reader = b.actor("reader", Grant::read_only(root)).await.unwrap();
    for grant in [Grant::workspace(root), Grant::fenced(root, ["src/"])] {
        read_only_refused(reader.child("kid", grant.clone()).await);
        read_only_refused(within("a child_wait", reader.child_wait("kid", grant)).await);
    }
    assert_eq!(count(&b.dump().await, "actors"), 1);
    let kid = reader.child("kid", Grant::read_only(root)).await.unwrap();
    kid.close().await;
}

async fn a_read_only_child_of_a_fenced_parent_needs_no_fence<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let parser = lead
        .child("parser", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    // A writable child without a fence would exceed its parent's write scope.
    match parser.child("helper", Grant::workspace(root)).await {
        Err(Error::OutsideFence { .. }) => {}
        other => panic!("expected OutsideFence, got {:?}", other.err()),
    }
    let reviewer = parser
        .child("reviewer", Grant::read_only(root))
        .await
        .unwrap();
    // It reads anywhere under its root, inside the fence or not.
    let both = vec![
        Target::file("src/lex.rs").shared(),
        Target::file("README.md").shared(),
    ];
    passes(&reviewer, both).await;
    assert_eq!(
        count(&b.dump().await, "holds"),
        1,
        "only the parser's grant fence"
    );
}

async fn workspace_target_reserves_the_grant_root_as_a_tree<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let shell = lead
        .try_admit_with(
            vec![Target::workspace()],
            Ask {
                priority: 0,
                label: Some("bash: make"),
            },
        )
        .await
        .unwrap();
    let dump = b.dump().await;
    assert_eq!(count(&dump, "holds"), 1);
    assert_eq!(
        dump["holds"][0]["paths"],
        json!([{"path": text(root), "tree": true, "mode": "exclusive"}])
    );
    let refused = busy(other.try_admit(t(&["deep/down/file.rs"])).await);
    assert_eq!(refused.label.as_deref(), Some("bash: make"));
    busy(other.try_admit(t(&[".env"])).await); // a shell covers every path
    busy(other.try_admit(shared("README.md")).await);
    lead.release(shell).await;
    // Shared: an observing tool lets readers through, not writers.
    let observe = lead
        .try_admit(vec![Target::workspace().shared()])
        .await
        .unwrap();
    passes(&other, shared("a.rs")).await;
    busy(other.try_admit(t(&["a.rs"])).await);
    lead.release(observe).await;
}

async fn workspace_target_of_a_fenced_actor_is_its_grant_fence<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead
        .child("kid", Grant::fenced(root, ["src/", "docs/"]))
        .await
        .unwrap();
    let shell = kid.try_admit(vec![Target::workspace()]).await.unwrap();
    let dump = b.dump().await;
    let call = dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["kind"] == "call")
        .unwrap();
    let tree =
        |rel: &str| json!({"path": text(&root.join(rel)), "tree": true, "mode": "exclusive"});
    assert_eq!(call["paths"], json!([tree("docs"), tree("src")]));
    // Outside the kid's fence the lead still works.
    let readme = lead.try_admit(t(&["README.md"])).await.unwrap();
    // A second opaque call of the same actor waits for the first.
    busy(kid.try_admit(vec![Target::workspace()]).await);
    kid.release(shell).await;
    lead.release(readme).await;
}

async fn read_roots_are_shared_only<B: Backend>(b: &B) {
    let base = b.root();
    std::fs::create_dir_all(base.join("ws")).unwrap();
    std::fs::create_dir_all(base.join("refs")).unwrap();
    let a = b
        .actor(
            "a",
            Grant::workspace(base.join("ws")).read_root(base.join("refs")),
        )
        .await
        .unwrap();
    passes(&a, vec![Target::file(base.join("refs/doc.md")).shared()]).await;
    match a
        .try_admit(vec![Target::file(base.join("refs/doc.md"))])
        .await
    {
        Err(Error::Policy { .. }) => {}
        other => panic!("expected Policy, got {:?}", other.err()),
    }
    match a
        .try_admit(vec![Target::file(base.join("elsewhere"))])
        .await
    {
        Err(Error::OutsideGrant { .. }) => {}
        other => panic!("expected OutsideGrant, got {:?}", other.err()),
    }
}

async fn dropping_an_actor_releases_its_fences_but_not_its_calls_or_children<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let parent = lead
        .child("parent", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    let child = parent
        .child("child", Grant::fenced(root, ["src/a/"]))
        .await
        .unwrap();
    let extra = parent.fence(t(&["src/b/"])).await.unwrap();
    let call = parent.try_admit(t(&["src/c.rs"])).await.unwrap();
    parent.close().await;
    let dump = b.dump().await;
    let holds = dump["holds"].as_array().unwrap();
    let of = |name: &str| holds.iter().filter(|h| h["actor"] == name).count();
    assert!(
        holds
            .iter()
            .all(|h| h["actor"] != "parent" || h["kind"] == "call")
    );
    assert_eq!(of("parent"), 1, "the call stays");
    assert_eq!(of("child"), 1, "the child's fence stays");
    assert!(
        dump["actors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "child")
    );
    // Lineage survives the middle actor: the child's own calls still pass its fence.
    passes(&child, t(&["src/a/x.rs"])).await;
    passes(&lead, t(&["src/b/x.rs"])).await; // the extra fence is gone
    lead.release_fence(extra).await; // releasing a released fence is harmless
    lead.release(call).await;
    child.close().await;
    assert!(idle(&b.dump().await));
}

// ---- §4: admission ----

async fn all_or_nothing_leaves_nothing_behind<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let held = a.try_admit(t(&["b.rs"])).await.unwrap();
    let refused = busy(o.try_admit(t(&["a.rs", "b.rs", "c.rs"])).await);
    assert_eq!(refused.path, root.join("b.rs"));
    let dump = b.dump().await;
    assert_eq!(count(&dump, "holds"), 1, "none of a.rs, c.rs was taken");
    assert_eq!(count(&dump, "waiters"), 0);
    passes(&a, t(&["a.rs", "c.rs"])).await;
    a.release(held).await;
    passes(&o, t(&["a.rs", "b.rs", "c.rs"])).await;
}

async fn busy_names_the_holder_and_reads_well<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let parser = lead
        .child("parser", Grant::fenced(root, ["src/parser/"]))
        .await
        .unwrap();
    let refused = busy(lead.try_admit(t(&["src/parser/lex.rs"])).await);
    assert_eq!(refused.holder, "parser");
    assert_eq!(refused.kind, HoldKind::Fence);
    assert_eq!(refused.path, root.join("src/parser/lex.rs"));
    assert!(!refused.queued);
    let text = Error::Busy(refused).to_string();
    assert!(
        text.starts_with("src/parser/lex.rs is fenced for writing by 'parser'"),
        "{text}"
    );
    assert!(
        text.contains("retry later or choose another file"),
        "{text}"
    );
    let call = parser
        .try_admit_with(
            t(&["src/parser/lex.rs"]),
            Ask {
                priority: 0,
                label: Some("write_file"),
            },
        )
        .await
        .unwrap();
    let sibling = lead.child("docs", Grant::workspace(root)).await.unwrap();
    let refused = busy(sibling.try_admit(shared("src/parser/lex.rs")).await);
    assert_eq!(refused.kind, HoldKind::Call);
    let text = Error::Busy(refused).to_string();
    assert!(
        text.starts_with("src/parser/lex.rs is being written by 'parser' (write_file, for "),
        "{text}"
    );
    parser.release(call).await;
}

async fn a_waiter_is_admitted_when_the_holder_releases<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["x.rs"])).await.unwrap();
    let mut waiting = Box::pin(o.admit(t(&["x.rs", "y.rs"])));
    queued(b, &mut waiting, 1).await;
    assert_eq!(b.dump().await["waiters"][0]["actor"], "o");
    a.release(held).await;
    let got = within("the waiter", waiting).await.unwrap();
    assert_eq!(B::Actor::call_paths(&got).len(), 2);
    let dump = b.dump().await;
    assert_eq!(dump["holds"][0]["actor"], "o");
    assert_eq!(dump["counters"]["waited"], 1);
    o.release(got).await;
}

async fn try_admit_cannot_jump_a_queued_waiter<B: Backend>(b: &B) {
    let reader1 = b
        .actor("reader1", Grant::workspace(b.root()))
        .await
        .unwrap();
    let writer = b.actor("writer", Grant::workspace(b.root())).await.unwrap();
    let reader2 = b
        .actor("reader2", Grant::workspace(b.root()))
        .await
        .unwrap();
    let read = reader1.try_admit(shared("x.rs")).await.unwrap();
    let mut write = Box::pin(writer.admit(t(&["x.rs"])));
    queued(b, &mut write, 1).await;
    // A second reader is compatible with the first but not with the queued writer.
    let refused = busy(reader2.try_admit(shared("x.rs")).await);
    assert!(refused.queued);
    assert_eq!(refused.holder, "writer");
    assert!(
        Error::Busy(refused)
            .to_string()
            .contains("is queued to be written by 'writer'")
    );
    // A fence is judged the same way.
    busy(reader2.fence(shared("x.rs")).await);
    reader1.release(read).await;
    let got = within("the writer", write).await.unwrap();
    writer.release(got).await;
}

async fn disjoint_requests_pass_a_waiter<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let w = b.actor("w", Grant::workspace(b.root())).await.unwrap();
    let c = b.actor("c", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["x.rs"])).await.unwrap();
    let mut waiting = Box::pin(w.admit(t(&["x.rs", "y.rs"])));
    queued(b, &mut waiting, 1).await;
    passes(&c, t(&["z.rs"])).await; // no head-of-line blocking
    let promised = busy(c.try_admit(t(&["y.rs"])).await);
    assert!(promised.queued, "y.rs is promised to the waiter");
    a.release(held).await;
    let got = within("the waiter", waiting).await.unwrap();
    w.release(got).await;
}

async fn cancelling_a_waiter_leaves_nothing_and_wakes_those_behind<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let w = b.actor("w", Grant::workspace(b.root())).await.unwrap();
    let c = b.actor("c", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["x.rs"])).await.unwrap();
    let mut first = Box::pin(w.admit(t(&["x.rs", "y.rs"])));
    queued(b, &mut first, 1).await;
    // c wants only y.rs: soft-blocked behind w's queued request.
    let mut second = Box::pin(c.admit(t(&["y.rs"])));
    queued(b, &mut second, 2).await;
    drop(first);
    let got = within("the request behind the cancelled one", second)
        .await
        .unwrap();
    let dump = waiters(b, 0).await;
    assert_eq!(count(&dump, "holds"), 2);
    b.check();
    c.release(got).await;
    a.release(held).await;
    assert!(idle(&b.dump().await));
}

async fn admit_timeout_gives_up_cleanly<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["x.rs"])).await.unwrap();
    match o
        .admit_timeout(t(&["x.rs"]), Duration::from_millis(20))
        .await
    {
        Err(Error::Timeout { paths, waited }) => {
            assert_eq!(paths, vec![b.root().join("x.rs")]);
            assert!(waited >= Duration::from_millis(20));
        }
        other => panic!("expected Timeout, got {:?}", other.err()),
    }
    let dump = waiters(b, 0).await;
    assert_eq!(dump["counters"]["timed_out"], 1);
    a.release(held).await;
}

async fn deadlock_between_fence_holders_is_refused_with_the_cycle<B: Backend>(b: &B) {
    let lead = b.actor("lead", Grant::workspace(b.root())).await.unwrap();
    let alpha = lead
        .child("alpha", Grant::workspace(b.root()))
        .await
        .unwrap();
    let beta = lead
        .child("beta", Grant::workspace(b.root()))
        .await
        .unwrap();
    let fa = alpha.fence(t(&["a/"])).await.unwrap();
    let fb = beta.fence(t(&["b/"])).await.unwrap();
    let mut alpha_waits = Box::pin(alpha.fence_wait(t(&["b/x"])));
    queued(b, &mut alpha_waits, 1).await;
    let cycle = deadlock(within("beta's admit", beta.admit(t(&["a/y"]))).await);
    assert_eq!(cycle, ["beta", "alpha"]);
    let text = Error::Deadlock { cycle }.to_string();
    assert!(text.contains("'beta' -> 'alpha' -> 'beta'"), "{text}");
    let dump = b.dump().await;
    assert_eq!(dump["counters"]["deadlocks"], 1);
    assert_eq!(
        count(&dump, "waiters"),
        1,
        "the refused request did not queue"
    );
    beta.release_fence(fb).await;
    let got = within("alpha's fence", alpha_waits).await.unwrap();
    alpha.release_fence(got).await;
    alpha.release_fence(fa).await;
}

/// The actors of the waiting requests, in queue order.
async fn queue_order<B: Backend>(b: &B) -> Vec<String> {
    waiter_names(&b.dump().await)
}

/// The waiters' actors in a dump, in queue order.
fn waiter_names(dump: &Value) -> Vec<String> {
    dump["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["actor"].as_str().unwrap().to_string())
        .collect()
}

/// A soft cycle is not refused (SPEC §4): e's request would queue behind
/// b's on x.rs (soft edge e -> b), b waits on a's fence (b -> a) and a on
/// e's (a -> e). Placed ahead of b instead, e's request waits only for
/// c's call, b queues behind it, and there is no cycle; once the holds go,
/// everyone gets through.
async fn a_soft_cycle_is_removed_by_reordering_the_queue<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let e = b.actor("e", Grant::workspace(root)).await.unwrap();
    let c = b.actor("c", Grant::workspace(root)).await.unwrap();
    let fa = a.fence(t(&["a/"])).await.unwrap();
    let fe = e.fence(t(&["e/"])).await.unwrap();
    let cx = c.try_admit(t(&["x.rs"])).await.unwrap();
    let mut b_waits = Box::pin(bb.admit(t(&["a/f", "x.rs"])));
    queued(b, &mut b_waits, 1).await;
    let mut a_waits = Box::pin(a.admit(t(&["e/g"])));
    queued(b, &mut a_waits, 2).await;
    let mut e_waits = Box::pin(e.admit(t(&["x.rs"])));
    queued(b, &mut e_waits, 3).await;
    assert_eq!(queue_order(b).await, ["e", "b", "a"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    b.check();
    // c's call goes: e (now first on x.rs) gets it, not b.
    c.release(cx).await;
    let got = within("e's admit", e_waits).await.unwrap();
    assert_eq!(queue_order(b).await, ["b", "a"]);
    e.release(got).await;
    e.release_fence(fe).await;
    let got = within("a's admit", a_waits).await.unwrap();
    a.release(got).await;
    a.release_fence(fa).await;
    let got = within("b's admit", b_waits).await.unwrap();
    bb.release(got).await;
    ended_idle_without_deadlocks(b).await;
}

/// Reordering never crosses priorities (SPEC §4, §11): the cycle of
/// `a_soft_cycle_is_removed_by_reordering_the_queue` with b's request at a
/// higher priority than e's has its soft edge across priorities, so no
/// reordering removes it and e is refused.
async fn a_soft_cycle_across_priorities_is_refused<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let e = b.actor("e", Grant::workspace(root)).await.unwrap();
    let c = b.actor("c", Grant::workspace(root)).await.unwrap();
    let _fa = a.fence(t(&["a/"])).await.unwrap();
    let _fe = e.fence(t(&["e/"])).await.unwrap();
    let _cx = c.try_admit(t(&["x.rs"])).await.unwrap();
    let mut b_waits = Box::pin(bb.admit_with(t(&["a/f", "x.rs"]), at(1)));
    queued(b, &mut b_waits, 1).await;
    let mut a_waits = Box::pin(a.admit(t(&["e/g"])));
    queued(b, &mut a_waits, 2).await;
    let mut cycle = deadlock(within("e's admit", e.admit(t(&["x.rs"]))).await);
    assert_eq!(cycle.first().map(String::as_str), Some("e"));
    cycle.sort();
    assert_eq!(cycle, ["a", "b", "e"]);
    assert_eq!(queue_order(b).await, ["b", "a"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 1);
    b.check();
}

/// A cycle of hard edges only is refused, whatever soft edges lie around
/// it: b's request queues behind two requests on x.rs (soft edges off the
/// cycle) and waits on a's fence while a waits on b's.
async fn a_cycle_of_hard_edges_is_refused_whatever_the_queue<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let c = b.actor("c", Grant::workspace(root)).await.unwrap();
    let d = b.actor("d", Grant::workspace(root)).await.unwrap();
    let e = b.actor("e", Grant::workspace(root)).await.unwrap();
    let _fa = a.fence(t(&["a/"])).await.unwrap();
    let _fb = bb.fence(t(&["b/"])).await.unwrap();
    let _cx = c.try_admit(t(&["x.rs"])).await.unwrap();
    let mut a_waits = Box::pin(a.admit(t(&["b/1"])));
    queued(b, &mut a_waits, 1).await;
    let mut d_waits = Box::pin(d.admit(t(&["x.rs"])));
    queued(b, &mut d_waits, 2).await;
    let mut e_waits = Box::pin(e.admit(t(&["x.rs"])));
    queued(b, &mut e_waits, 3).await;
    let cycle = deadlock(within("b's admit", bb.admit(t(&["a/1", "x.rs"]))).await);
    assert_eq!(cycle, ["b", "a"]);
    assert_eq!(queue_order(b).await, ["a", "d", "e"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 1);
    b.check();
}

/// PostgreSQL's isolation spec `deadlock-soft`, in writ's terms: the locks
/// held to commit are fences (ACCESS SHARE a shared fence, ACCESS
/// EXCLUSIVE an exclusive one). d1 and d2 share a1 and a2; e1 waits on d1
/// for a1 and e2 on d2 for a2; d1 queues behind e2 for a2, and d2's
/// request for a1 behind e1 would close d2 -> e1 -> d1 -> e2 -> d2 with
/// two soft edges. Nothing is refused: d2's request goes ahead of e1 (its
/// own soft edge reversed; PostgreSQL's detector happens to reverse
/// d1 -> e2 instead) and is granted at once beside d1's shared fence;
/// then each commit lets the next one through.
async fn postgres_deadlock_soft_refuses_nothing<B: Backend>(b: &B) {
    let root = b.root();
    let d1 = b.actor("d1", Grant::workspace(root)).await.unwrap();
    let d2 = b.actor("d2", Grant::workspace(root)).await.unwrap();
    let e1 = b.actor("e1", Grant::workspace(root)).await.unwrap();
    let e2 = b.actor("e2", Grant::workspace(root)).await.unwrap();
    let d1a1 = d1.fence(shared("a1")).await.unwrap();
    let d2a2 = d2.fence(shared("a2")).await.unwrap();
    let mut e1l = Box::pin(e1.fence_wait(t(&["a1"])));
    queued(b, &mut e1l, 1).await;
    let mut e2l = Box::pin(e2.fence_wait(t(&["a2"])));
    queued(b, &mut e2l, 2).await;
    let mut d1a2 = Box::pin(d1.fence_wait(shared("a2")));
    queued(b, &mut d1a2, 3).await;
    let d2a1 = within("d2a1", d2.fence_wait(shared("a1")))
        .await
        .expect("d2's request is moved ahead of e1 and granted, not refused");
    assert_eq!(queue_order(b).await, ["e1", "e2", "d1"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    b.check();
    // d2 commits: e2 gets a2; then e2 commits: d1 gets a2.
    d2.release_fence(d2a1).await;
    d2.release_fence(d2a2).await;
    let e2a2 = within("e2l", e2l).await.unwrap();
    e2.release_fence(e2a2).await;
    let d1a2 = within("d1a2", d1a2).await.unwrap();
    // d1 commits: e1 gets a1.
    d1.release_fence(d1a2).await;
    d1.release_fence(d1a1).await;
    let e1a1 = within("e1l", e1l).await.unwrap();
    e1.release_fence(e1a1).await;
    ended_idle_without_deadlocks(b).await;
}

/// Every request is over, none was refused as a deadlock, and the
/// backend's own checks hold: how a soft-cycle scenario ends.
async fn ended_idle_without_deadlocks<B: Backend>(b: &B) {
    assert!(idle(&b.dump().await));
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    b.check();
}

/// PostgreSQL's isolation spec `deadlock-soft-2`: s1's request for a2 must
/// jump both s3 and s4 (hard-blocked on s2's a2, which waits on s1's a1).
/// One move does it — a move puts the request ahead of everything between
/// — and s1 is granted a2 at once beside s2's shared fence. SHARE UPDATE
/// EXCLUSIVE, which conflicts with itself, is an exclusive fence on a1,
/// and a shared one on a2, where it meets only ACCESS SHARE (a shared
/// fence) and ACCESS EXCLUSIVE (an exclusive one).
async fn postgres_deadlock_soft_2_refuses_nothing<B: Backend>(b: &B) {
    let root = b.root();
    let s1 = b.actor("s1", Grant::workspace(root)).await.unwrap();
    let s2 = b.actor("s2", Grant::workspace(root)).await.unwrap();
    let s3 = b.actor("s3", Grant::workspace(root)).await.unwrap();
    let s4 = b.actor("s4", Grant::workspace(root)).await.unwrap();
    let s1a = s1.fence(t(&["a1"])).await.unwrap();
    let s2a = s2.fence(shared("a2")).await.unwrap();
    let mut s2b = Box::pin(s2.fence_wait(t(&["a1"])));
    queued(b, &mut s2b, 1).await;
    let mut s3a = Box::pin(s3.fence_wait(t(&["a2"])));
    queued(b, &mut s3a, 2).await;
    let mut s4a = Box::pin(s4.fence_wait(t(&["a2"])));
    queued(b, &mut s4a, 3).await;
    let s1b = within("s1b", s1.fence_wait(shared("a2")))
        .await
        .expect("s1's request jumps s3 and s4 and is granted, not refused");
    assert_eq!(queue_order(b).await, ["s2", "s3", "s4"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    // Commits in the spec's order: s1, s2, s3, s4.
    s1.release_fence(s1b).await;
    s1.release_fence(s1a).await;
    let s2b = within("s2b", s2b).await.unwrap();
    s2.release_fence(s2b).await;
    s2.release_fence(s2a).await;
    let s3a = within("s3a", s3a).await.unwrap();
    s3.release_fence(s3a).await;
    let s4a = within("s4a", s4a).await.unwrap();
    s4.release_fence(s4a).await;
    ended_idle_without_deadlocks(b).await;
}

/// Precedence of a fence's owner (SPEC §4): a waiter its fence blocks can
/// only be granted once the fence goes, so it blocks neither the owner nor
/// its children, and gives them no edge.
async fn a_fence_owner_and_its_children_pass_a_waiter_their_fence_blocks<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let fence = lead.fence(t(&["src/"])).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    // The owner and its child are not locked out of their own fence.
    passes(&lead, t(&["src/a.rs"])).await;
    passes(&kid, t(&["src/a.rs"])).await;
    let r = within("the owner's admit", lead.admit(t(&["src/a.rs"])))
        .await
        .expect("the owner's admit is granted, not refused");
    lead.release(r).await;
    let r = within("the child's admit", kid.admit(t(&["src/a.rs"])))
        .await
        .expect("the child's admit is granted, not refused");
    // Outside the fence's line, fairness is unchanged: y.rs is free, but
    // sib asked first.
    let refused = busy(other.try_admit(t(&["y.rs"])).await);
    assert!(refused.queued, "{refused:?}");
    assert_eq!(refused.holder, "sib");
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    // Once the fence and the child's call go, sib is granted.
    kid.release(r).await;
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    b.check();
    sib.release(got).await;
}

/// A fence that a child takes by precedence is in the passed waiter's way:
/// when the child itself waits on that waiter, the grant would close a
/// cycle and is refused.
async fn a_fence_taken_by_precedence_may_not_close_a_cycle<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let _fl = lead.fence(t(&["src/"])).await.unwrap();
    let _fs = sib.fence(t(&["docs/"])).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    // sib waits on lead's fence; kid waits on sib's.
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut kid_waits = Box::pin(kid.admit(t(&["docs/d.md"])));
    queued(b, &mut kid_waits, 2).await;
    assert_eq!(deadlock(kid.fence(t(&["src/a.rs"])).await), ["kid", "sib"]);
    drop(kid_waits);
    waiters(b, 1).await;
    let f = kid.fence(t(&["src/a.rs"])).await.unwrap();
    kid.release_fence(f).await;
}

/// A request queued behind a waiting fence request waits, through it, on
/// the fence's owner (SPEC §4: once granted, that fence is held until its
/// owner's waits are over). `x` would queue behind `y`'s fence request on
/// a.rs while `y` waits on `x`'s fence: refused at once, not found only
/// when `z`'s call goes and `y`'s fence is granted. `x` asks at a lower
/// priority, so no reordering of the queue removes the cycle.
async fn a_request_behind_a_fence_request_waits_on_its_owner<B: Backend>(b: &B) {
    let root = b.root();
    let x = b.actor("x", Grant::workspace(root)).await.unwrap();
    let y = b.actor("y", Grant::workspace(root)).await.unwrap();
    let z = b.actor("z", Grant::workspace(root)).await.unwrap();
    let zc = z.try_admit(t(&["a.rs"])).await.unwrap();
    let fx = x.fence(t(&["b/"])).await.unwrap();
    let mut y_fence = Box::pin(y.fence_wait(t(&["a.rs"])));
    queued(b, &mut y_fence, 1).await;
    let mut y_waits = Box::pin(y.admit(t(&["b/1"])));
    queued(b, &mut y_waits, 2).await;
    let cycle = deadlock(within("x's admit", x.admit_with(t(&["a.rs"]), at(-1))).await);
    assert_eq!(cycle, ["x", "y"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 1);
    x.release_fence(fx).await;
    let got = within("y's admit", y_waits).await.unwrap();
    y.release(got).await;
    z.release(zc).await;
    let got = within("y's fence", y_fence).await.unwrap();
    y.release_fence(got).await;
    assert!(idle(&b.dump().await));
    b.check();
}

/// A fence request that passes an earlier waiter by its owner's precedence
/// gives that waiter an edge to the fence's owner (SPEC §4): once
/// granted, that fence is in the waiter's way too. `kid`'s fence request
/// on src/a.rs waits for `kid2`'s call and passes `sib`'s waiting request
/// (`lead`'s fence covers `kid` and blocks `sib`); `kid` then asking for a
/// path under `sib`'s fence closes kid -> sib -> kid and is refused at
/// once.
async fn a_waiter_passed_by_a_fence_request_waits_on_its_owner<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let kid2 = lead.child("kid2", Grant::workspace(root)).await.unwrap();
    let fl = lead.fence(t(&["src/"])).await.unwrap();
    let fs = sib.fence(t(&["docs/"])).await.unwrap();
    let k2 = kid2.try_admit(t(&["src/a.rs"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut kid_fence = Box::pin(kid.fence_wait(t(&["src/a.rs"])));
    queued(b, &mut kid_fence, 2).await;
    let cycle = deadlock(within("kid's admit", kid.admit(t(&["docs/d.md"]))).await);
    assert_eq!(cycle, ["kid", "sib"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 1);
    kid2.release(k2).await;
    let got = within("kid's fence", kid_fence).await.unwrap();
    kid.release_fence(got).await;
    lead.release_fence(fl).await;
    let got = within("sib's admit", sib_waits).await.unwrap();
    sib.release(got).await;
    sib.release_fence(fs).await;
    assert!(idle(&b.dump().await));
    b.check();
}

/// The owner's precedence passes only a waiter its fence blocks: a shared
/// call queued behind that waiter passes through the fence and still
/// blocks the owner's exclusive request, and queuing there would close the
/// cycle owner -> shared call -> waiter -> owner. That cycle is soft (the
/// owner's edge to the shared call is queue order), so the owner's request
/// goes ahead of the shared call instead (SPEC §4) — where it passes the
/// blocked waiter and is granted at once; the others follow once the
/// owner's holds go.
async fn a_fence_owner_behind_a_shared_call_behind_its_blocked_waiter_goes_ahead<B: Backend>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let reader = b.actor("reader", Grant::workspace(root)).await.unwrap();
    let fence = lead.fence(t(&["src/"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut reader_waits = Box::pin(reader.admit(shared("src/a.rs")));
    queued(b, &mut reader_waits, 2).await;
    let got = within("the owner's admit", lead.admit(t(&["src/a.rs"])))
        .await
        .expect("the owner's request is moved ahead and granted, not refused");
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    assert_eq!(queue_order(b).await, ["sib", "reader"]);
    b.check();
    lead.release(got).await;
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
    let got = within("reader", reader_waits).await.unwrap();
    reader.release(got).await;
    assert!(idle(&b.dump().await));
    b.check();
}

/// Releasing a fence ends the precedence it gave: a request of its owner
/// that passed a waiter the fence blocked queues behind that waiter again.
/// When that waiter still reaches the owner through others (here through
/// `t`'s fence, and `t` waiting on the owner's other fence), that closes a
/// cycle no new wait closed. Here the waiter asked at a higher priority,
/// so no reordering removes the cycle (moves never cross priorities): the
/// passing request is refused with `Deadlock` then, instead of hanging
/// with everyone on the cycle.
async fn a_cycle_closed_by_releasing_a_fence_refuses_a_waiting_request<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let tt = b.actor("t", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let src = lead.fence(t(&["src/"])).await.unwrap();
    let _doc = lead.fence(t(&["doc/"])).await.unwrap();
    let _lib = tt.fence(t(&["lib/"])).await.unwrap();
    let x = other.try_admit(t(&["x.rs"])).await.unwrap();
    let mut t_waits = Box::pin(tt.admit(t(&["doc/d.md"])));
    queued(b, &mut t_waits, 1).await;
    let mut sib_waits = Box::pin(sib.admit_with(t(&["src/a.rs", "lib/b.rs"]), at(1)));
    queued(b, &mut sib_waits, 2).await;
    // lead passes sib inside src/ and waits only for x.rs.
    let mut lead_waits = Box::pin(lead.admit(t(&["src/a.rs", "x.rs"])));
    queued(b, &mut lead_waits, 3).await;
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    lead.release_fence(src).await;
    let mut cycle = deadlock(within("lead's admit", lead_waits).await);
    assert_eq!(cycle.first().map(String::as_str), Some("lead"));
    cycle.sort();
    assert_eq!(cycle, ["lead", "sib", "t"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 1);
    b.check();
    // The others still wait, each on a live fence.
    other.release(x).await;
    let dump = b.dump().await;
    let names: Vec<&Value> = dump["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["actor"])
        .collect();
    assert_eq!(names, [&json!("sib"), &json!("t")]);
}

/// The cycle of `a_cycle_closed_by_releasing_a_fence_refuses_a_waiting_request`
/// at one priority: the owner's request, queued behind the waiter again
/// when the fence goes, is moved ahead of it instead (SPEC §4), where it
/// waits only for x.rs; nothing is refused, and everyone gets through.
async fn a_cycle_closed_by_releasing_a_fence_is_reordered_away<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let tt = b.actor("t", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let src = lead.fence(t(&["src/"])).await.unwrap();
    let doc = lead.fence(t(&["doc/"])).await.unwrap();
    let lib = tt.fence(t(&["lib/"])).await.unwrap();
    let x = other.try_admit(t(&["x.rs"])).await.unwrap();
    let mut t_waits = Box::pin(tt.admit(t(&["doc/d.md"])));
    queued(b, &mut t_waits, 1).await;
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "lib/b.rs"])));
    queued(b, &mut sib_waits, 2).await;
    let mut lead_waits = Box::pin(lead.admit(t(&["src/a.rs", "x.rs"])));
    queued(b, &mut lead_waits, 3).await;
    assert_eq!(queue_order(b).await, ["t", "sib", "lead"]);
    lead.release_fence(src).await;
    // In process the release reorders the queue before it returns; on
    // etcd the request that closed the cycle does, once it looks again.
    until(b, "lead moved ahead of sib", |d| {
        waiter_names(d) == ["t", "lead", "sib"]
    })
    .await;
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    b.check();
    other.release(x).await;
    let got = within("lead's admit", lead_waits).await.unwrap();
    lead.release(got).await;
    lead.release_fence(doc).await;
    let got = within("t's admit", t_waits).await.unwrap();
    tt.release(got).await;
    tt.release_fence(lib).await;
    let got = within("sib's admit", sib_waits).await.unwrap();
    sib.release(got).await;
    ended_idle_without_deadlocks(b).await;
}

async fn extend_is_judged_at_the_requests_own_priority<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let c = b.actor("c", Grant::workspace(root)).await.unwrap();
    let _cz = c.try_admit(t(&["z.rs"])).await.unwrap();
    // b waits at priority -1 for y.rs (and z.rs, held).
    let mut b_waits = Box::pin(bb.admit_with(t(&["y.rs", "z.rs"]), at(-1)));
    queued(b, &mut b_waits, 1).await;
    // A priority -5 reservation may not widen past it...
    let mut low = a.try_admit_with(t(&["a.rs"]), at(-5)).await.unwrap();
    let refused = busy(a.extend_call(&mut low, t(&["y.rs"])).await);
    assert!(refused.queued, "{refused:?}");
    let mut low_fence = a.fence_with(t(&["f/"]), at(-5)).await.unwrap();
    busy(a.extend(&mut low_fence, t(&["y.rs"])).await);
    a.release(low).await;
    a.release_fence(low_fence).await;
    // ...while a priority 10 one goes ahead of a priority 0 waiter.
    let mut b0 = Box::pin(bb.admit_with(t(&["w.rs", "z.rs"]), Ask::default()));
    queued(b, &mut b0, 2).await;
    let mut high = a.try_admit_with(t(&["a.rs"]), at(10)).await.unwrap();
    a.extend_call(&mut high, t(&["w.rs"]))
        .await
        .expect("priority 10 is ahead of priority 0");
    let mut high_fence = a.fence_with(t(&["g/"]), at(10)).await.unwrap();
    a.extend(&mut high_fence, t(&["y.rs"]))
        .await
        .expect("priority 10 is ahead of priority -1");
    b.check();
    a.release(high).await;
    a.release_fence(high_fence).await;
}

async fn calls_never_create_wait_edges<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let bb = b.actor("b", Grant::workspace(b.root())).await.unwrap();
    let _ra = a.try_admit(t(&["x.rs"])).await.unwrap();
    let _rb = bb.try_admit(t(&["y.rs"])).await.unwrap();
    let mut a_waits = Box::pin(a.admit(t(&["y.rs"])));
    queued(b, &mut a_waits, 1).await;
    // Call holds create no edges: this queues instead of being refused.
    let mut b_waits = Box::pin(bb.admit(t(&["x.rs"])));
    queued(b, &mut b_waits, 2).await;
    assert_eq!(count(&b.dump().await, "edges"), 0);
}

async fn reservation_extend_is_all_or_nothing<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let held = o.try_admit(t(&["busy.rs"])).await.unwrap();
    let mut r = a.try_admit(t(&["x.rs"])).await.unwrap();
    busy(a.extend_call(&mut r, t(&["y.rs", "busy.rs"])).await);
    assert_eq!(B::Actor::call_paths(&r), vec![root.join("x.rs")]);
    a.extend_call(&mut r, t(&["y.rs"])).await.unwrap();
    assert_eq!(
        B::Actor::call_paths(&r),
        vec![root.join("x.rs"), root.join("y.rs")]
    );
    assert_eq!(count(&b.dump().await["holds"][1], "paths"), 2);
    a.release(r).await;
    o.release(held).await;
}

async fn parallel_calls_of_one_actor_are_not_a_deadlock<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let bb = b.actor("b", Grant::workspace(b.root())).await.unwrap();
    let c = b.actor("c", Grant::workspace(b.root())).await.unwrap();
    let held = c.try_admit(t(&["x.rs"])).await.unwrap();
    // a's first call waits for c; b's call queues behind it; a's second call
    // queues behind b's. Folded onto actors that is a -> b -> a, but each
    // call is granted in turn once c releases: no deadlock.
    let mut a1 = Box::pin(a.admit(t(&["x.rs"])));
    queued(b, &mut a1, 1).await;
    let mut b1 = Box::pin(bb.admit(t(&["x.rs", "y.rs"])));
    queued(b, &mut b1, 2).await;
    let mut a2 = Box::pin(a.admit(t(&["y.rs"])));
    queued(b, &mut a2, 3).await; // queued, not refused as a deadlock
    c.release(held).await;
    let r1 = within("a's first call", a1).await.unwrap();
    a.release(r1).await;
    let r2 = within("b's call", b1).await.unwrap();
    bb.release(r2).await;
    let r3 = within("a's second call", a2).await.unwrap();
    a.release(r3).await;
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
}

async fn a_fence_granted_past_waiters_may_not_close_a_cycle<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let bb = b.actor("b", Grant::workspace(b.root())).await.unwrap();
    let c = b.actor("c", Grant::workspace(b.root())).await.unwrap();
    let _fb = bb.fence(t(&["b/"])).await.unwrap();
    let _cw = c.try_admit(t(&["w.rs"])).await.unwrap();
    // a waits on b's fence; b waits on c's call.
    let mut a_waits = Box::pin(a.admit(t(&["b/x.rs"])));
    queued(b, &mut a_waits, 1).await;
    let mut b_waits = Box::pin(bb.admit(t(&["z.rs", "w.rs"])));
    queued(b, &mut b_waits, 2).await;
    // A higher-priority fence of a on z.rs would be granted past b's
    // request, and then b would wait on a while a waits on b.
    assert_eq!(
        deadlock(a.fence_with(t(&["z.rs"]), at(1)).await),
        ["a", "b"]
    );
    // Without the cycle (a not waiting), the same fence is fine.
    drop(a_waits);
    waiters(b, 1).await;
    let fence = a.fence_with(t(&["z.rs"]), at(1)).await.unwrap();
    a.release_fence(fence).await;
}

// ---- §5: the dump ----

/// Runs under `Config::session("s-1")`.
async fn dump_shows_actors_holds_waiters_and_counters<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead
        .child("parser", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    let call = kid
        .try_admit_with(
            t(&["src/lex.rs"]),
            Ask {
                priority: 0,
                label: Some("write_file src/lex.rs"),
            },
        )
        .await
        .unwrap();
    let mut waiting = Box::pin(lead.admit_with(t(&["src/lex.rs"]), at(3)));
    queued(b, &mut waiting, 1).await;
    let dump = b.dump().await;
    assert_eq!(dump["session"], "s-1");
    assert_eq!(count(&dump, "actors"), 2);
    assert_eq!(dump["actors"][1]["parent"], dump["actors"][0]["id"]);
    assert_eq!(count(&dump, "holds"), 2);
    let hold = &dump["holds"][1];
    assert_eq!(
        (&hold["actor"], &hold["kind"]),
        (&json!("parser"), &json!("call"))
    );
    assert_eq!(hold["label"], "write_file src/lex.rs");
    assert_eq!(hold["paths"][0]["mode"], "exclusive");
    let waiter = &dump["waiters"][0];
    assert_eq!(waiter["actor"], "lead");
    assert_eq!(waiter["priority"], 3);
    assert_eq!(
        waiter["blocked_by"]["holds"],
        json!([dump["holds"][0]["id"], dump["holds"][1]["id"]])
    );
    assert_eq!(
        waiter["cause"],
        json!({"cause": "path", "path": text(&root.join("src/lex.rs")), "holder": "parser"})
    );
    assert_eq!(count(&dump, "edges"), 1, "lead waits on parser's fence");
    assert_eq!(dump["edges"][0]["hard"], true);
    assert_eq!(dump["counters"]["admitted"], 3, "two actors and one call");
    assert_eq!(dump["counters"]["waited"], 1);

    let table = b.dump_table().await;
    // Hold ids are the backend's own (small numbers in process, unique
    // session-wide ones in etcd): the table names the two the JSON has.
    let blocked = format!(
        "hold {}, hold {}",
        dump["holds"][0]["id"], dump["holds"][1]["id"]
    );
    for needle in [
        "actors (2):",
        "  parser",
        "holds (2):",
        "write_file src/lex.rs",
        "waiters (1):",
        blocked.as_str(),
        "waiting for 'parser' to release",
        "counters: admitted 3",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in\n{table}");
    }
    // The child is indented under its parent.
    let lead_line = table
        .lines()
        .find(|l| l.contains("lead ") && l.contains("workspace"))
        .unwrap();
    let kid_line = table
        .lines()
        .find(|l| l.contains("parser") && l.contains("fenced"))
        .unwrap();
    let indent = |l: &str| l.len() - l.trim_start().len();
    assert!(indent(kid_line) > indent(lead_line), "{table}");
    drop(waiting);
    waiters(b, 0).await;
    kid.release(call).await;
}

// ---- §11: slots and child_wait ----

fn no_slot<T>(result: Result<T, Error>) -> (SlotLimit, usize) {
    match result {
        Err(Error::NoSlot { limit, max }) => (limit, max),
        Err(other) => panic!("expected NoSlot, got {other}"),
        Ok(_) => panic!("expected NoSlot, got an actor"),
    }
}

/// Live child actors and writers, from the dump.
fn slots(dump: &Value) -> (u64, u64) {
    let n = |k: &str| dump["slots"][k].as_u64().unwrap();
    (n("actors"), n("writers"))
}

fn causes(dump: &Value) -> Vec<Value> {
    let waiters = dump["waiters"].as_array().unwrap();
    waiters.iter().map(|w| w["cause"].clone()).collect()
}

fn path_cause(path: &Path, holder: &str) -> Value {
    json!({"cause": "path", "path": text(path), "holder": holder})
}

/// Runs under `max_actors(1)` and `max_writers(1)`.
async fn root_actors_count_against_no_limit<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let _b = b.actor("b", Grant::fenced(root, ["src/"])).await.unwrap();
    let _c = b.actor("c", Grant::read_only(root)).await.unwrap();
    assert_eq!(slots(&b.dump().await), (0, 0));
    // The one child slot is still free.
    let _kid = a.child("kid", Grant::workspace(root)).await.unwrap();
    assert_eq!(slots(&b.dump().await).0, 1);
}

/// Runs under `max_actors(2)`.
async fn child_past_max_actors_is_no_slot_naming_the_limit<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let k1 = lead.child("k1", Grant::workspace(root)).await.unwrap();
    let k2 = k1.child("k2", Grant::read_only(root)).await.unwrap(); // grandchildren count too
    let err = lead
        .child("k3", Grant::read_only(root))
        .await
        .map(drop)
        .unwrap_err();
    assert!(err.to_string().contains("max_actors is 2"), "{err}");
    assert_eq!(
        no_slot(lead.child("k3", Grant::read_only(root)).await),
        (SlotLimit::MaxActors, 2)
    );
    // A refused child leaves nothing behind.
    let dump = b.dump().await;
    assert_eq!(count(&dump, "actors"), 3);
    assert_eq!(slots(&dump).0, 2);
    // Closing a child frees its slot.
    k2.close().await;
    let k3 = lead.child("k3", Grant::read_only(root)).await.unwrap();
    k1.close().await;
    k3.close().await;
    assert_eq!(slots(&b.dump().await).0, 0);
}

/// Runs under `max_writers(1)`.
async fn read_only_children_do_not_count_as_writers<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let writer = lead.child("writer", Grant::workspace(root)).await.unwrap();
    assert_eq!(
        no_slot(lead.child("w2", Grant::fenced(root, ["src/"])).await),
        (SlotLimit::MaxWriters, 1)
    );
    let _r1 = lead.child("r1", Grant::read_only(root)).await.unwrap();
    let _r2 = lead.child("r2", Grant::read_only(root)).await.unwrap();
    let dump = b.dump().await;
    assert_eq!(slots(&dump), (3, 1));
    assert_eq!(dump["slots"]["max_writers"], 1);
    writer.close().await;
    lead.child("w2", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
}

/// Runs under `max_actors(1)` and `max_writers(5)`.
async fn read_only_children_still_count_as_actors<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let _r1 = lead.child("r1", Grant::read_only(root)).await.unwrap();
    assert_eq!(
        no_slot(lead.child("r2", Grant::read_only(root)).await),
        (SlotLimit::MaxActors, 1)
    );
}

/// Runs under `max_actors(2)` and `max_writers(1)`: a queued writer holds
/// its claim on the last actor slot, so a reader may not take it from
/// under it.
async fn child_is_refused_while_a_child_wait_is_queued_on_that_limit<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let w1 = lead.child("w1", Grant::workspace(root)).await.unwrap();
    let mut w2 = Box::pin(lead.child_wait("w2", Grant::workspace(root)));
    queued(b, &mut w2, 1).await;
    assert_eq!(causes(&b.dump().await), [json!({"cause": "writers"})]);
    assert_eq!(
        no_slot(lead.child("reader", Grant::read_only(root)).await),
        (SlotLimit::MaxActors, 2)
    );
    // Both limits block a writer; actor slots are checked first.
    assert_eq!(
        no_slot(lead.child("w3", Grant::workspace(root)).await),
        (SlotLimit::MaxActors, 2)
    );
    // The freed writer slot goes to the queued child_wait, not to a caller
    // of child() that arrives later.
    w1.close().await;
    assert_eq!(
        no_slot(lead.child("w3", Grant::workspace(root)).await),
        (SlotLimit::MaxWriters, 1)
    );
    let w2 = within("w2", w2).await.unwrap();
    assert_eq!(w2.name(), "w2");
    // Now the reader fits.
    lead.child("reader", Grant::read_only(root)).await.unwrap();
    b.check();
}

/// Runs under `max_actors(1)`.
async fn freed_slots_go_to_queued_child_waits_in_queue_order<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let first = lead.child("first", Grant::workspace(root)).await.unwrap();
    let mut wa = Box::pin(lead.child_wait("a", Grant::workspace(root)));
    queued(b, &mut wa, 1).await;
    let mut wb = Box::pin(lead.child_wait("b", Grant::read_only(root)));
    queued(b, &mut wb, 2).await;
    let mut wc = Box::pin(lead.child_wait("c", Grant::fenced(root, ["src/"])));
    queued(b, &mut wc, 3).await;
    let dump = b.dump().await;
    let queue = dump["waiters"].as_array().unwrap();
    let children: Vec<&Value> = queue.iter().map(|w| &w["child"]).collect();
    assert_eq!(children, [&json!("a"), &json!("b"), &json!("c")]);
    // A child_wait waiter shows its parent as the actor.
    assert!(queue.iter().all(|w| w["actor"] == "lead"));
    assert_eq!(causes(&dump), vec![json!({"cause": "slots"}); 3]);

    first.close().await;
    let a = within("a", wa).await.unwrap();
    assert_eq!(count(&waiters(b, 2).await, "waiters"), 2);
    a.close().await;
    let kid = within("b", wb).await.unwrap();
    waiters(b, 1).await;
    kid.close().await;
    let c = within("c", wc).await.unwrap();
    assert_eq!(c.name(), "c");
    assert_eq!(count(&b.dump().await, "holds"), 1, "c's grant fence");
    c.close().await;
    assert!(idle(&b.dump().await));
}

/// Runs under `max_actors(1)`.
async fn a_child_wait_blocked_by_a_path_reserves_no_slot<B: Backend>(b: &B) {
    let root = b.root();
    std::fs::create_dir(root.join("docs")).unwrap();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let fence = sib.fence(t(&["src/"])).await.unwrap();
    let mut waits = Box::pin(lead.child_wait("w", Grant::fenced(root, ["src/"])));
    queued(b, &mut waits, 1).await;
    assert_eq!(
        causes(&b.dump().await),
        [path_cause(&root.join("src"), "sib")]
    );
    // The slot is free and nobody else waits for one: a disjoint child
    // takes it.
    let disjoint = lead
        .child("docs", Grant::workspace(root.join("docs")))
        .await
        .expect("a path-blocked child_wait reserves no slot");
    // Once its path is free, the child_wait waits for the slot...
    sib.release_fence(fence).await;
    let dump = b.dump().await;
    assert_eq!(causes(&dump), [json!({"cause": "slots"})]);
    // ...and from then on it reserves the next free one.
    disjoint.close().await;
    let w = within("w", waits).await.unwrap();
    assert_eq!(w.name(), "w");
    b.check();
}

/// Runs under `max_actors(1)`.
async fn a_slot_wait_that_every_slot_holder_waits_on_is_a_deadlock<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let _fence = lead.fence(t(&["src/"])).await.unwrap();
    // k holds the only slot and waits on lead's fence.
    let k = other.child("k", Grant::workspace(root)).await.unwrap();
    let mut k_waits = Box::pin(k.admit(t(&["src/a.rs"])));
    queued(b, &mut k_waits, 1).await;
    // lead waiting for a slot would wait for k, which waits for lead.
    let cycle = deadlock(
        within(
            "lead's child_wait",
            lead.child_wait("w", Grant::workspace(root)),
        )
        .await,
    );
    assert_eq!(cycle, ["lead", "k"]);
    assert_eq!(
        count(&b.dump().await, "waiters"),
        1,
        "the refused wait did not queue"
    );
    // The other order: lead's slot wait first, then k starts waiting on
    // lead — k's request is the one that closes it.
    drop(k_waits);
    waiters(b, 0).await;
    let mut lead_waits = Box::pin(lead.child_wait("w", Grant::workspace(root)));
    queued(b, &mut lead_waits, 1).await;
    deadlock(within("k's admit", k.admit(t(&["src/a.rs"]))).await);
    // With a holder that does not wait on lead, the slot wait is fine.
    k.close().await;
    let w = within("lead's child_wait", lead_waits).await.unwrap();
    assert_eq!(w.name(), "w");
}

/// Runs under `max_actors(1)`.
async fn child_wait_timeout_gives_up_and_leaves_nothing<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let first = lead.child("first", Grant::workspace(root)).await.unwrap();
    let late = lead
        .child_wait_timeout("late", Grant::workspace(root), Duration::from_millis(30))
        .await;
    match late {
        Err(Error::Timeout { waited, .. }) => assert!(waited >= Duration::from_millis(30)),
        other => panic!("expected Timeout, got {:?}", other.err()),
    }
    let dump = waiters(b, 0).await;
    assert_eq!(dump["counters"]["timed_out"], 1);
    assert_eq!(count(&dump, "actors"), 2);
    first.close().await;
    let next = within(
        "a free slot",
        lead.child_wait_timeout("next", Grant::workspace(root), PATIENCE),
    )
    .await
    .unwrap();
    assert_eq!(next.name(), "next");
    b.check();
}

// ---- §11: wait causes and priorities ----

/// A child_wait for `src/`, while a sibling child holds it: which limit
/// (or the path) the dump names depends on the configured limits.
async fn child_wait_cause<B: Backend>(b: &B) -> Value {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let _k1 = lead
        .child("k1", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    let mut k2 = Box::pin(lead.child_wait("k2", Grant::fenced(root, ["src/"])));
    queued(b, &mut k2, 1).await;
    let dump = b.dump().await;
    assert_eq!(
        dump["waiters"][0]["actor"], "lead",
        "a child_wait shows its parent"
    );
    assert_eq!(dump["waiters"][0]["child"], "k2");
    dump["waiters"][0]["cause"].clone()
}

/// Runs under `max_actors(1)` and `max_writers(1)`: blocked by all three.
async fn a_wait_blocked_by_every_limit_names_the_slots<B: Backend>(b: &B) {
    assert_eq!(child_wait_cause(b).await, json!({"cause": "slots"}));
}

/// Runs under `max_actors(2)` and `max_writers(1)`: a free actor slot.
async fn a_wait_blocked_by_writers_and_a_path_names_the_writers<B: Backend>(b: &B) {
    assert_eq!(child_wait_cause(b).await, json!({"cause": "writers"}));
}

/// Runs under `max_actors(2)` and `max_writers(2)`: only the path.
async fn a_wait_blocked_by_a_path_only_names_it_and_its_holder<B: Backend>(b: &B) {
    let cause = child_wait_cause(b).await;
    assert_eq!(cause, path_cause(&b.root().join("src"), "k1"));
}

async fn a_waiter_behind_an_earlier_waiter_names_that_waiter<B: Backend>(b: &B) {
    let root = b.root();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let first = b.actor("first", Grant::workspace(root)).await.unwrap();
    let second = b.actor("second", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["a.rs"])).await.unwrap();
    let mut w1 = Box::pin(first.admit(t(&["a.rs", "b.rs"])));
    queued(b, &mut w1, 1).await;
    let mut w2 = Box::pin(second.admit(t(&["b.rs"])));
    queued(b, &mut w2, 2).await;
    let dump = b.dump().await;
    assert_eq!(
        causes(&dump),
        [
            path_cause(&root.join("a.rs"), "holder"),
            path_cause(&root.join("b.rs"), "first")
        ]
    );
    assert_eq!(
        dump["waiters"][1]["blocked_by"]["waiters"],
        json!([dump["waiters"][0]["id"]])
    );
    holder.release(held).await;
    let r1 = within("first", w1).await.unwrap();
    assert_eq!(
        causes(&b.dump().await),
        [path_cause(&root.join("b.rs"), "first")]
    );
    first.release(r1).await;
    let r2 = within("second", w2).await.unwrap();
    second.release(r2).await;
}

async fn higher_priority_first_then_arrival_order<B: Backend>(b: &B) {
    let root = b.root();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["a.rs"])).await.unwrap();
    let order = [("A", 0), ("B", 5), ("C", 0), ("D", 5), ("E", -1)];
    let mut actors = Vec::new();
    for (name, _) in order {
        actors.push(b.actor(name, Grant::workspace(root)).await.unwrap());
    }
    let mut waiting = Vec::new();
    for (n, (actor, (_, priority))) in actors.iter().zip(order).enumerate() {
        let mut w = Box::pin(actor.admit_with(t(&["a.rs"]), at(priority)));
        // Queued one at a time, so arrival order is known.
        queued(b, &mut w, n + 1).await;
        waiting.push(Some(w));
    }
    let dump = b.dump().await;
    let queue: Vec<(&str, i64)> = dump["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["actor"].as_str().unwrap(),
                w["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(queue, [("B", 5), ("D", 5), ("A", 0), ("C", 0), ("E", -1)]);
    holder.release(held).await;
    for name in ["B", "D", "A", "C", "E"] {
        let at = order.iter().position(|(n, _)| *n == name).unwrap();
        let w = waiting[at].take().unwrap();
        let got = within(name, w).await.unwrap();
        assert_eq!(b.dump().await["holds"][0]["actor"], name);
        actors[at].release(got).await;
    }
    assert!(idle(&b.dump().await));
}

async fn a_request_keeps_its_priority_in_every_form<B: Backend>(b: &B) {
    let root = b.root();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let waiter = b.actor("waiter", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["a.rs"])).await.unwrap();
    // waiter (priority 0) waits for a.rs and, behind it, claims b.rs too.
    let mut w = Box::pin(waiter.admit(t(&["a.rs", "b.rs"])));
    queued(b, &mut w, 1).await;
    // Plain forms use priority 0, so they queue behind the waiter.
    let refused = busy(other.try_admit(t(&["b.rs"])).await);
    assert!(refused.queued);
    assert_eq!(refused.holder, "waiter");
    busy(other.fence(t(&["b.rs"])).await);
    busy(other.try_admit_with(t(&["b.rs"]), at(0)).await);
    busy(other.fence_with(t(&["b.rs"]), at(-3)).await);
    // A higher priority is ahead of the waiter in every form.
    let r = other.try_admit_with(t(&["b.rs"]), at(1)).await.unwrap();
    other.release(r).await;
    let f = other.fence_with(t(&["b.rs"]), at(1)).await.unwrap();
    other.release_fence(f).await;
    let r = within("a priority 1 admit", other.admit_with(t(&["b.rs"]), at(1)))
        .await
        .unwrap();
    other.release(r).await;
    // A waiting request of higher priority is queued ahead of the waiter.
    let blocker = other.try_admit(t(&["c.rs"])).await.unwrap();
    let mut hi = Box::pin(other.admit_with(t(&["b.rs", "c.rs"]), at(2)));
    queued(b, &mut hi, 2).await;
    let dump = b.dump().await;
    assert_eq!(dump["waiters"][0]["priority"], 2);
    assert_eq!(dump["waiters"][1]["actor"], "waiter");
    drop(hi);
    waiters(b, 1).await;
    other.release(blocker).await;
    holder.release(held).await;
    let r = within("the waiter", w).await.unwrap();
    waiter.release(r).await;
}

async fn disjoint_requests_never_wait_for_each_other<B: Backend>(b: &B) {
    let root = b.root();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let urgent = b.actor("urgent", Grant::workspace(root)).await.unwrap();
    let low = b.actor("low", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["src/a.rs"])).await.unwrap();
    let mut w = Box::pin(urgent.admit_with(t(&["src/"]), at(100)));
    queued(b, &mut w, 1).await;
    // Nothing overlaps docs/: neither the hold nor the urgent waiter is in the way.
    let r1 = low
        .try_admit_with(t(&["docs/a.md"]), at(-100))
        .await
        .unwrap();
    let r2 = within(
        "a disjoint admit",
        low.admit_with(t(&["docs/b.md"]), at(-100)),
    )
    .await
    .unwrap();
    let f = low.fence(t(&["tests/"])).await.unwrap();
    low.release(r1).await;
    low.release(r2).await;
    low.release_fence(f).await;
    holder.release(held).await;
    let r = within("the urgent waiter", w).await.unwrap();
    urgent.release(r).await;
}

async fn no_starvation_within_a_priority_level<B: Backend>(b: &B) {
    let root = b.root();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let patient = b.actor("patient", Grant::workspace(root)).await.unwrap();
    let eager = b.actor("eager", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["a.rs"])).await.unwrap();
    let mut w = Box::pin(patient.admit(t(&["a.rs", "b.rs"])));
    queued(b, &mut w, 1).await;
    // b.rs is free, but taking it would keep the patient waiter waiting: a
    // stream of try_admits (and fences) of the same priority is refused.
    for i in 0..50 {
        let refused = if i % 2 == 0 {
            busy(eager.try_admit(t(&["b.rs"])).await)
        } else {
            busy(eager.fence(t(&["b.rs"])).await)
        };
        assert!(refused.queued);
        assert_eq!(refused.holder, "patient");
    }
    assert_eq!(count(&b.dump().await, "waiters"), 1);
    // The holder releases: the waiter is granted before anyone else can try.
    holder.release(held).await;
    busy(eager.try_admit(t(&["b.rs"])).await);
    let r = within("the patient waiter", w).await.unwrap();
    assert_eq!(B::Actor::call_paths(&r).len(), 2);
    patient.release(r).await;
}

// ---- §11: widening and narrowing ----

async fn widen_is_all_or_nothing<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let mut fence = lead.fence(t(&["src/"])).await.unwrap();
    let held = other
        .try_admit_with(
            t(&["docs/a.md"]),
            Ask {
                priority: 0,
                label: Some("edit"),
            },
        )
        .await
        .unwrap();
    let refused = busy(lead.extend(&mut fence, t(&["tests/", "docs/"])).await);
    assert_eq!(refused.holder, "other");
    assert_eq!(refused.path, root.join("docs"));
    // Nothing was added: tests/ is still free for others.
    assert_eq!(B::Actor::fence_paths(&fence), [root.join("src")]);
    passes(&other, t(&["tests/x.rs"])).await;
    lead.extend(&mut fence, t(&["tests/"])).await.unwrap();
    assert_eq!(
        B::Actor::fence_paths(&fence),
        [root.join("src"), root.join("tests")]
    );
    busy(other.try_admit(t(&["tests/x.rs"])).await);
    other.release(held).await;
    lead.extend(&mut fence, t(&["docs/"])).await.unwrap();
    assert_eq!(B::Actor::fence_paths(&fence).len(), 3);
    b.check();
    lead.release_fence(fence).await;
}

async fn widen_is_not_refused_by_a_waiter_on_the_part_already_held<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let mut fence = lead.fence(t(&["src/"])).await.unwrap();
    let mut w = Box::pin(other.admit(t(&["src/a.rs"])));
    queued(b, &mut w, 1).await;
    // docs/ is contested by nobody; the waiter waits for src/, which the
    // fence already holds.
    lead.extend(&mut fence, t(&["docs/"])).await.unwrap();
    // Asking again for what the fence already covers changes nothing.
    lead.extend(&mut fence, t(&["src/b.rs"])).await.unwrap();
    assert_eq!(
        B::Actor::fence_paths(&fence),
        [root.join("docs"), root.join("src")]
    );
    // A call's reservation grows the same way.
    let mut call = lead.try_admit(t(&["x.rs"])).await.unwrap();
    let mut w2 = Box::pin(other.admit(t(&["x.rs"])));
    queued(b, &mut w2, 2).await;
    lead.extend_call(&mut call, t(&["y.rs"])).await.unwrap();
    // But a new path an earlier waiter asked for is refused (fairness) —
    // a waiter blocked by a call, not by a fence covering the call (that
    // one the fence's owner would pass, SPEC §4).
    let mut w3 = Box::pin(other.admit(t(&["x.rs", "z.rs"])));
    queued(b, &mut w3, 3).await;
    assert!(busy(lead.extend_call(&mut call, t(&["z.rs"])).await).queued);
    lead.release(call).await;
    lead.release_fence(fence).await;
    for (what, w) in [("w", w), ("w2", w2), ("w3", w3)] {
        let r = within(what, w).await.unwrap();
        other.release(r).await;
    }
}

async fn narrow_wakes_a_waiter_for_the_released_part_not_the_kept_part<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let mut fence = lead.fence(t(&["src/", "docs/"])).await.unwrap();
    let mut on_docs = Box::pin(a.admit(t(&["docs/a.md"])));
    queued(b, &mut on_docs, 1).await;
    let mut on_kept = Box::pin(bb.admit(t(&["src/lex.rs"])));
    queued(b, &mut on_kept, 2).await;
    let mut on_src = Box::pin(bb.admit(t(&["src/ast.rs"])));
    queued(b, &mut on_src, 3).await;
    lead.narrow(&mut fence, t(&["src/lex.rs"])).await.unwrap();
    assert_eq!(B::Actor::fence_paths(&fence), [root.join("src/lex.rs")]);
    // The released parts' waiters were granted by the narrow itself.
    let dump = b.dump().await;
    assert_eq!(count(&dump, "waiters"), 1);
    assert_eq!(
        dump["waiters"][0]["paths"][0]["path"],
        text(&root.join("src/lex.rs"))
    );
    assert_eq!(
        causes(&dump),
        [path_cause(&root.join("src/lex.rs"), "lead")]
    );
    let r1 = within("on docs", on_docs).await.unwrap();
    let r2 = within("on src", on_src).await.unwrap();
    assert_eq!(count(&b.dump().await, "waiters"), 1);
    lead.release_fence(fence).await;
    let r3 = within("on the kept part", on_kept).await.unwrap();
    a.release(r1).await;
    bb.release(r2).await;
    bb.release(r3).await;
}

async fn narrow_outside_the_current_fence_changes_nothing<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let mut fence = lead.fence(t(&["src/", "docs/a.md"])).await.unwrap();
    let mut w = Box::pin(other.admit(t(&["docs/a.md"])));
    queued(b, &mut w, 1).await;
    let held = [root.join("docs/a.md"), root.join("src")];
    for bad in [
        t(&["src/a.rs", "tests/x.rs"]),
        t(&["docs/"]), // wider than the exact key it holds
        t(&["docs/a.md/"]),
        t(&["src/a.rs", "docs/b.md"]),
    ] {
        match lead.narrow(&mut fence, bad.clone()).await {
            Err(Error::OutsideFence {
                actor, fence: f, ..
            }) => {
                assert_eq!(actor, "lead");
                assert_eq!(f, held);
            }
            other => panic!("expected OutsideFence for {bad:?}, got {:?}", other.err()),
        }
        assert_eq!(B::Actor::fence_paths(&fence), held);
        assert_eq!(count(&b.dump().await, "waiters"), 1, "nothing was released");
    }
    match lead.narrow(&mut fence, vec![]).await {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {:?}", other.err()),
    }
    assert_eq!(B::Actor::fence_paths(&fence).len(), 2);
    lead.narrow(&mut fence, t(&["src/"])).await.unwrap();
    let r = within("the waiter", w).await.unwrap();
    other.release(r).await;
    lead.release_fence(fence).await;
}

async fn narrow_can_only_weaken_a_mode<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let shared_tree = |p: &str| vec![Target::tree(p).shared()];
    let mode_of = |dump: &Value| dump["holds"][0]["paths"][0]["mode"].clone();
    let mut watch = lead.fence(shared_tree("vendor")).await.unwrap();
    match lead
        .narrow(&mut watch, vec![Target::file("vendor/lib.rs")])
        .await
    {
        Err(Error::OutsideFence { .. }) => {}
        other => panic!("expected OutsideFence, got {:?}", other.err()),
    }
    assert_eq!(mode_of(&b.dump().await), "shared");
    assert_eq!(B::Actor::fence_paths(&watch), [root.join("vendor")]);
    lead.release_fence(watch).await;

    let mut fence = lead.fence(t(&["src/"])).await.unwrap();
    busy(other.fence(shared_tree("src")).await);
    // Exclusive to shared: another shared fence may now join.
    lead.narrow(&mut fence, shared_tree("src")).await.unwrap();
    assert_eq!(mode_of(&b.dump().await), "shared");
    let theirs = other.fence(shared_tree("src")).await.unwrap();
    // ... but writes by others are still refused under a shared fence.
    busy(other.try_admit(t(&["src/a.rs"])).await);
    other.release_fence(theirs).await;
    lead.release_fence(fence).await;
}

// ---- §6–§7: the file tools ----

async fn files_pass_the_version_gate<B: Backend>(b: &B) {
    std::fs::write(b.root().join("notes.md"), "one\n").unwrap();
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    match a.write("notes.md", "two\n").await {
        Err(Error::NotRead { path }) => assert!(path.ends_with("notes.md")),
        other => panic!("expected NotRead, got {other:?}"),
    }
    assert_eq!(a.read("notes.md").await.unwrap(), b"one\n");
    assert_eq!(o.read("notes.md").await.unwrap(), b"one\n");
    o.replace("notes.md", "one", "uno").await.unwrap();
    match a.write("notes.md", "two\n").await {
        Err(Error::Stale { writer, .. }) => assert_eq!(writer.as_deref(), Some("o")),
        other => panic!("expected Stale, got {other:?}"),
    }
    a.read("notes.md").await.unwrap();
    match a.replace("notes.md", "absent", "x").await {
        Err(Error::NoMatch { .. }) => {}
        other => panic!("expected NoMatch, got {other:?}"),
    }
    a.write("new/dir/file.txt", "fresh").await.unwrap();
    a.read("new/dir/file.txt").await.unwrap();
    a.rename("new/dir/file.txt", "moved.txt").await.unwrap();
    a.read("moved.txt").await.unwrap();
    a.delete("moved.txt").await.unwrap();
    match a.read("moved.txt").await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    match a.read(".env").await {
        Err(Error::Policy { .. }) => {}
        other => panic!("expected Policy, got {other:?}"),
    }
    assert_eq!(std::fs::read(b.root().join("notes.md")).unwrap(), b"uno\n");
}

async fn a_contested_file_op_is_busy_and_writes_nothing<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let f = o.fence(t(&["locked/"])).await.unwrap();
    assert_eq!(busy(a.write("locked/x.txt", "x").await).holder, "o");
    assert!(!b.root().join("locked/x.txt").exists());
    o.release_fence(f).await;
}

// ---- rule families across backends: scope, growth, precedence, slots, edges ----

/// The dump's wait-for edges as `(from, to, hard)` with actors named,
/// sorted: ids differ between backends, names do not.
fn named_edges(dump: &Value) -> Vec<(String, String, bool)> {
    let name = |id: &Value| {
        dump["actors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| &a["id"] == id)
            .map_or_else(
                || id.to_string(),
                |a| a["name"].as_str().unwrap().to_string(),
            )
    };
    let mut edges: Vec<(String, String, bool)> = dump["edges"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                name(&e["from"]),
                name(&e["to"]),
                e["hard"].as_bool().unwrap(),
            )
        })
        .collect();
    edges.sort();
    edges
}

fn edge(from: &str, to: &str, hard: bool) -> (String, String, bool) {
    (from.to_string(), to.to_string(), hard)
}

/// The one waiter whose actor is `actor`.
fn waiter_of<'a>(dump: &'a Value, actor: &str) -> &'a Value {
    let mine: Vec<&Value> = dump["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["actor"] == actor)
        .collect();
    assert_eq!(mine.len(), 1, "one waiter of {actor}: {dump:#}");
    mine[0]
}

/// The id of the one hold of `actor` of `kind` ("fence" or "call").
fn hold_id(dump: &Value, actor: &str, kind: &str) -> Value {
    let mine: Vec<&Value> = dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["actor"] == actor && h["kind"] == kind)
        .collect();
    assert_eq!(mine.len(), 1, "one {kind} of {actor}: {dump:#}");
    mine[0]["id"].clone()
}

fn policy_refused<T>(result: Result<T, Error>) {
    match result {
        Err(Error::Policy { .. }) => {}
        Err(other) => panic!("expected Policy, got {other}"),
        Ok(_) => panic!("expected Policy, got a grant"),
    }
}

fn sorted(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths
}

/// SPEC §3: a fenced actor's "*exclusive* targets must lie inside its fence
/// (`Error::OutsideFence`) ... its shared targets may be anywhere under its
/// root"; "A fenced actor's additional fences must lie inside its grant
/// fence"; "a *writable* child of a fenced actor must be fenced inside its
/// parent's fence". §11: `Target::workspace()` is "for a fenced actor its
/// grant fence"; a fence "narrowed ... a mode can only weaken". Inside means
/// at a mode no stronger, so a shared part of a grant fence is read scope
/// only, for calls, fences, growth and children alike, at any depth.
async fn a_mixed_mode_grant_fence_bounds_calls_fences_growth_and_children<B: Backend>(b: &B) {
    let root = b.root();
    let a = b
        .actor(
            "a",
            Grant::fenced(root, [Target::tree("src"), Target::tree("docs").shared()]),
        )
        .await
        .unwrap();
    // Calls write only where the grant fence is exclusive, and read anywhere.
    passes(&a, t(&["src/x.rs"])).await;
    outside_fence(
        a.try_admit(t(&["docs/a.md"])).await,
        &root.join("docs/a.md"),
    );
    passes(&a, shared("docs/a.md")).await;
    passes(&a, shared("README.md")).await;
    // Its workspace() is the grant fence, each part at its own mode.
    let all = a.try_admit(vec![Target::workspace()]).await.unwrap();
    let tree =
        |rel: &str, mode: &str| json!({"path": text(&root.join(rel)), "tree": true, "mode": mode});
    let dump = b.dump().await;
    let call = &dump["holds"][1];
    assert_eq!(call["kind"], "call", "{dump:#}");
    assert_eq!(
        call["paths"],
        json!([tree("docs", "shared"), tree("src", "exclusive")])
    );
    a.release(all).await;
    // Fences, their growth and their narrowing keep to the same modes.
    outside_fence(a.fence(t(&["docs/sub/"])).await, &root.join("docs/sub"));
    let watch = a
        .fence(vec![Target::tree("docs/sub").shared()])
        .await
        .unwrap();
    a.release_fence(watch).await;
    let mut inner = a.fence(t(&["src/a/"])).await.unwrap();
    outside_fence(
        a.extend(&mut inner, t(&["docs/b.md"])).await,
        &root.join("docs/b.md"),
    );
    assert_eq!(B::Actor::fence_paths(&inner), [root.join("src/a")]);
    a.extend(&mut inner, shared("docs/b.md")).await.unwrap();
    a.narrow(
        &mut inner,
        vec![
            Target::tree("src/a").shared(),
            Target::file("docs/b.md").shared(),
        ],
    )
    .await
    .unwrap();
    outside_fence(
        a.narrow(&mut inner, t(&["src/a/"])).await,
        &root.join("src/a"),
    );
    assert_eq!(
        sorted(B::Actor::fence_paths(&inner)),
        [root.join("docs/b.md"), root.join("src/a")]
    );
    a.release_fence(inner).await;
    // A call grows the same way.
    let mut call = a.try_admit(t(&["src/x.rs"])).await.unwrap();
    outside_fence(
        a.extend_call(&mut call, t(&["docs/c.md"])).await,
        &root.join("docs/c.md"),
    );
    a.extend_call(&mut call, shared("docs/c.md")).await.unwrap();
    assert_eq!(
        sorted(B::Actor::call_paths(&call)),
        [root.join("docs/c.md"), root.join("src/x.rs")]
    );
    a.release(call).await;
    // Children: fenced inside it at modes no stronger, however they ask.
    outside_fence(
        a.child("w", Grant::fenced(root, ["docs/a/"])).await,
        &root.join("docs/a"),
    );
    outside_fence(
        within(
            "a child_wait",
            a.child_wait("w", Grant::fenced(root, ["docs/a/"])),
        )
        .await,
        &root.join("docs/a"),
    );
    let reader = a
        .child(
            "reader",
            Grant::fenced(root, [Target::tree("docs/a").shared()]),
        )
        .await
        .unwrap();
    outside_fence(
        reader.child("g", Grant::fenced(root, ["docs/a/b/"])).await,
        &root.join("docs/a/b"),
    );
    outside_fence(reader.child("g", Grant::workspace(root)).await, root);
    let g = reader
        .child(
            "g",
            Grant::fenced(root, [Target::tree("docs/a/b").shared()]),
        )
        .await
        .unwrap();
    outside_fence(
        g.try_admit(t(&["docs/a/b/x.md"])).await,
        &root.join("docs/a/b/x.md"),
    );
    g.close().await;
    reader.close().await;
    let weaker = a
        .child(
            "weaker",
            Grant::fenced(root, [Target::tree("src").shared()]),
        )
        .await
        .unwrap();
    outside_fence(
        weaker.try_admit(t(&["src/x.rs"])).await,
        &root.join("src/x.rs"),
    );
    weaker.close().await;
    let equal = a
        .child("equal", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    passes(&equal, t(&["src/x.rs"])).await;
    equal.close().await;
    let dump = b.dump().await;
    assert_eq!(count(&dump, "holds"), 1, "only a's grant fence: {dump:#}");
    assert_eq!(count(&dump, "actors"), 1);
}

/// SPEC §2: "`Grant::read_root(p)` adds a read-only root ... targets under it
/// ... may only be shared (a write there is `Error::Policy`)"; §11 and §3: a
/// read-only actor takes shared holds only — refused with `ReadOnly` whether
/// it asks for a call or a fence or grows one, its `workspace()` is only
/// readable, and its shared fence (Fence-S) keeps writers out while
/// readers pass (§3's table).
async fn read_only_scopes_hold_at_shared_mode_whatever_asks_or_grows<B: Backend>(b: &B) {
    let base = b.root();
    let ws = base.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(base.join("refs")).unwrap();
    let doc = base.join("refs/doc.md");
    let lead = b
        .actor("lead", Grant::workspace(&ws).read_root(base.join("refs")))
        .await
        .unwrap();
    // Under a read root, a shared fence watches; nothing writes.
    let watch = lead.fence(vec![Target::file(&doc).shared()]).await.unwrap();
    policy_refused(lead.fence(vec![Target::tree(base.join("refs"))]).await);
    let mut call = lead.try_admit(t(&["a.rs"])).await.unwrap();
    policy_refused(lead.extend_call(&mut call, vec![Target::file(&doc)]).await);
    assert_eq!(B::Actor::call_paths(&call), [ws.join("a.rs")]);
    lead.extend_call(&mut call, vec![Target::file(&doc).shared()])
        .await
        .unwrap();
    lead.release(call).await;
    lead.release_fence(watch).await;
    // A read-only actor: ReadOnly for every exclusive claim, asked or grown.
    let reader = lead
        .child("reader", Grant::read_only(&ws).read_root(base.join("refs")))
        .await
        .unwrap();
    read_only_refused(reader.try_admit(vec![Target::file(&doc)]).await);
    let mut read = reader.try_admit(shared("a.rs")).await.unwrap();
    read_only_refused(reader.extend_call(&mut read, t(&["a.rs"])).await);
    let mut watch = reader
        .fence(vec![Target::tree("src").shared()])
        .await
        .unwrap();
    read_only_refused(reader.extend(&mut watch, t(&["src/x.rs"])).await);
    reader
        .extend(&mut watch, vec![Target::file(&doc).shared()])
        .await
        .unwrap();
    read_only_refused(reader.try_admit(vec![Target::workspace()]).await);
    let all = reader
        .try_admit(vec![Target::workspace().shared()])
        .await
        .unwrap();
    assert_eq!(
        call_modes(&b.dump().await, "reader"),
        [json!("shared"), json!("shared")]
    );
    reader.release(all).await;
    reader.release(read).await;
    // Its shared fence keeps writers out and lets readers in.
    let other = lead.child("other", Grant::workspace(&ws)).await.unwrap();
    let refused = busy(other.try_admit(t(&["src/x.rs"])).await);
    assert_eq!(
        (
            refused.holder.as_str(),
            refused.kind,
            refused.mode,
            refused.queued
        ),
        ("reader", HoldKind::Fence, Mode::Shared, false)
    );
    passes(&other, shared("src/x.rs")).await;
    busy(other.fence(t(&["src/"])).await);
    let theirs = other
        .fence(vec![Target::tree("src").shared()])
        .await
        .unwrap();
    other.release_fence(theirs).await;
    reader.release_fence(watch).await;
}

/// SPEC §4: "an earlier waiting request that is blocked by a fence which
/// covers the new request (the new request's actor is the fence's owner or
/// a descendant) does not block the new request"; §11: a widening is judged
/// as a request for what it adds. So a hold of a fence's owner grows onto
/// paths that fence holds past the waiters it blocks, but not onto a path
/// an earlier waiter wants that only a call blocks ("a call has no owner's
/// precedence"). A waiter then waits for what now holds its path.
async fn growing_onto_paths_the_owners_fence_holds_passes_the_waiters_it_blocks<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let other2 = b.actor("other2", Grant::workspace(root)).await.unwrap();
    let src = lead.fence(t(&["src/"])).await.unwrap();
    let mut x = lead.try_admit(t(&["x.rs"])).await.unwrap();
    let mut w1 = Box::pin(other.admit(t(&["src/a.rs"])));
    queued(b, &mut w1, 1).await;
    let mut w2 = Box::pin(other2.admit(t(&["x.rs"])));
    queued(b, &mut w2, 2).await;
    let mut docs = lead.fence(t(&["docs/"])).await.unwrap();
    lead.extend(&mut docs, t(&["src/a.rs"]))
        .await
        .expect("src/a.rs waits for the owner's fence: the owner goes first");
    let refused = busy(lead.extend(&mut docs, t(&["x.rs"])).await);
    assert_eq!(
        (
            refused.holder.as_str(),
            refused.kind,
            refused.queued,
            &refused.path
        ),
        ("other2", HoldKind::Call, true, &root.join("x.rs"))
    );
    assert_eq!(
        sorted(B::Actor::fence_paths(&docs)),
        [root.join("docs"), root.join("src/a.rs")]
    );
    // Without src/, the widened fence holds src/a.rs against the waiter.
    lead.release_fence(src).await;
    let dump = b.dump().await;
    let waiting = waiter_of(&dump, "other");
    assert_eq!(
        waiting["blocked_by"]["holds"],
        json!([hold_id(&dump, "lead", "fence")])
    );
    assert_eq!(waiting["cause"], path_cause(&root.join("src/a.rs"), "lead"));
    assert_eq!(named_edges(&dump), [edge("other", "lead", true)]);
    // A call of the owner grows onto the fenced path the same way.
    lead.extend_call(&mut x, t(&["src/a.rs"]))
        .await
        .expect("the fence blocking the waiter covers the call");
    lead.release_fence(docs).await;
    // Only the owner's call is in its way now; a call makes no edge.
    let dump = until(b, "the waiter's edge to go with the fence", |d| {
        count(d, "edges") == 0
    })
    .await;
    let waiting = waiter_of(&dump, "other");
    assert_eq!(
        waiting["blocked_by"]["holds"],
        json!([hold_id(&dump, "lead", "call")])
    );
    lead.release(x).await;
    for (actor, w) in [(&other, w1), (&other2, w2)] {
        let got = within(actor.name(), w).await.unwrap();
        actor.release(got).await;
    }
    b.check();
}

/// SPEC §11: a narrowed fence's rest "is released at once and waiters
/// woken", and "a mode can only weaken" (a shared fence waiting on the
/// exclusive one is granted when the narrow weakens it); §3: a call inside
/// its owner's fence "is still a Call hold", so a waiter the released part
/// blocked still waits for a child's call there — with no edge (§4: "Call
/// holds never create edges").
async fn narrowing_a_fence_leaves_waiters_blocked_by_its_lines_calls<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let watcher = b.actor("watcher", Grant::workspace(root)).await.unwrap();
    let mut fence = lead.fence(t(&["src/", "docs/"])).await.unwrap();
    let call = kid.try_admit(t(&["src/a.rs"])).await.unwrap();
    let mut w1 = Box::pin(other.admit(t(&["src/a.rs"])));
    queued(b, &mut w1, 1).await;
    let mut w2 = Box::pin(watcher.fence_wait(vec![Target::tree("docs").shared()]));
    queued(b, &mut w2, 2).await;
    let dump = b.dump().await;
    let (fence_id, call_id) = (
        hold_id(&dump, "lead", "fence"),
        hold_id(&dump, "kid", "call"),
    );
    assert_eq!(
        waiter_of(&dump, "other")["blocked_by"]["holds"],
        json!([fence_id, call_id])
    );
    assert_eq!(
        named_edges(&dump),
        [edge("other", "lead", true), edge("watcher", "lead", true)]
    );
    lead.narrow(
        &mut fence,
        vec![Target::tree("src/b"), Target::tree("docs").shared()],
    )
    .await
    .unwrap();
    let watch = within("the shared fence", w2).await.unwrap();
    let dump = until(b, "one waiter and no edge", |d| {
        count(d, "waiters") == 1 && count(d, "edges") == 0
    })
    .await;
    let waiting = waiter_of(&dump, "other");
    assert_eq!(waiting["blocked_by"]["holds"], json!([call_id]));
    assert_eq!(waiting["cause"], path_cause(&root.join("src/a.rs"), "kid"));
    // A writer under docs/ meets two shared fences, the older first.
    let refused = busy(other.try_admit(t(&["docs/x.md"])).await);
    assert_eq!(
        (
            refused.holder.as_str(),
            refused.kind,
            refused.mode,
            refused.queued
        ),
        ("lead", HoldKind::Fence, Mode::Shared, false)
    );
    kid.release(call).await;
    let got = within("other", w1).await.unwrap();
    other.release(got).await;
    watcher.release_fence(watch).await;
    lead.release_fence(fence).await;
    b.check();
}

/// SPEC §4: precedence of a fence's owner passes "an earlier waiting
/// request that is blocked by a fence which covers the new request (the new
/// request's actor is the fence's owner or a descendant)" and "gives it no
/// soft edge"; §3: "A fence covers every hold whose owner is the fence's
/// owner or one of its descendants" — by owner, at any depth, on any path,
/// and never upwards ("Ownership moves down, never up"). "Outside the
/// fence, fairness is unchanged."
async fn precedence_reaches_every_descendant_but_no_ancestor_or_stranger<B: Backend>(b: &B) {
    let root = b.root();
    let top = b.actor("top", Grant::workspace(root)).await.unwrap();
    let lead = top.child("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let grandkid = kid.child("grandkid", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let stranger = b.actor("stranger", Grant::workspace(root)).await.unwrap();
    let fence = lead.fence(t(&["src/"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    // A grandchild passes sib, inside the fence and outside it: sib cannot
    // be granted before the fence goes.
    passes(&grandkid, t(&["src/a.rs"])).await;
    passes(&grandkid, t(&["y.rs"])).await;
    // So does a child's grant fence.
    let k2 = lead
        .child("k2", Grant::fenced(root, ["src/b/"]))
        .await
        .expect("a child's grant fence passes a waiter its parent's fence blocks");
    k2.close().await;
    // The fence does not cover its owner's parent.
    let refused = busy(top.try_admit(t(&["src/a.rs"])).await);
    assert_eq!(
        (refused.holder.as_str(), refused.kind, refused.queued),
        ("lead", HoldKind::Fence, false)
    );
    for outsider in [&top, &stranger] {
        let refused = busy(outsider.try_admit(t(&["y.rs"])).await);
        assert_eq!(
            (refused.holder.as_str(), refused.queued),
            ("sib", true),
            "{}",
            outsider.name()
        );
    }
    // A waiting descendant passes sib too, with no soft edge to it.
    let z = stranger.try_admit(t(&["z.rs"])).await.unwrap();
    let mut kid_waits = Box::pin(kid.admit(t(&["src/a.rs", "y.rs", "z.rs"])));
    queued(b, &mut kid_waits, 2).await;
    let dump = b.dump().await;
    let waiting = waiter_of(&dump, "kid");
    assert_eq!(count(&waiting["blocked_by"], "waiters"), 0, "{dump:#}");
    assert_eq!(
        waiting["blocked_by"]["holds"],
        json!([hold_id(&dump, "stranger", "call")])
    );
    assert_eq!(named_edges(&dump), [edge("sib", "lead", true)]);
    assert_eq!(dump["counters"]["deadlocks"], 0);
    stranger.release(z).await;
    let got = within("kid", kid_waits).await.unwrap();
    kid.release(got).await;
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
    b.check();
}

/// SPEC §11: "The wait queue is ordered by priority, then arrival;
/// "earlier" in §4 (fairness, soft edges) means ahead in that queue", and
/// a request keeps its priority "in every form"; §4's precedence passes a
/// waiter the owner's fence blocks whatever that waiter's priority, while a
/// waiter the fence does not block is passed only from a strictly higher
/// priority — and then waits on the fence that passed it (a hard edge).
async fn precedence_passes_any_priority_fairness_only_a_lower_one<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let hi = b.actor("hi", Grant::workspace(root)).await.unwrap();
    let fence = lead.fence(t(&["src/"])).await.unwrap();
    let z = holder.try_admit(t(&["z.rs"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit_with(t(&["src/a.rs"]), at(5)));
    queued(b, &mut sib_waits, 1).await;
    // Blocked by the fence: passed from any priority.
    let r = kid
        .try_admit_with(t(&["src/a.rs"]), at(-5))
        .await
        .expect("precedence does not ask the waiter's priority");
    kid.release(r).await;
    // Blocked by a call only: passed from a higher priority alone.
    let mut hi_waits = Box::pin(hi.admit_with(t(&["y.rs", "z.rs"]), at(5)));
    queued(b, &mut hi_waits, 2).await;
    for p in [0, 5] {
        let refused = busy(kid.try_admit_with(t(&["y.rs"]), at(p)).await);
        assert_eq!(
            (refused.holder.as_str(), refused.queued),
            ("hi", true),
            "at {p}"
        );
    }
    let r = kid.try_admit_with(t(&["y.rs"]), at(6)).await.unwrap();
    kid.release(r).await;
    let refused = busy(lead.fence_with(t(&["y.rs"]), at(5)).await);
    assert_eq!((refused.holder.as_str(), refused.queued), ("hi", true));
    let y = lead.fence_with(t(&["y.rs"]), at(6)).await.unwrap();
    // hi now waits on lead's fence as well.
    let dump = until(b, "hi's hard edge", |d| count(d, "edges") == 2).await;
    assert_eq!(
        named_edges(&dump),
        [edge("hi", "lead", true), edge("sib", "lead", true)]
    );
    lead.release_fence(y).await;
    holder.release(z).await;
    let got = within("hi", hi_waits).await.unwrap();
    hi.release(got).await;
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
}

/// Runs under `max_actors(1)`. SPEC §11: "A `child_wait` that waits for a
/// path (its fenced grant is contested) does not hold or reserve a slot";
/// contested is judged as §4 judges any request — by live holds and by the
/// requests ahead of it in the queue, "ordered by priority, then arrival".
/// A higher-priority waiter queued earlier on its paths leaves it no claim
/// on a freed slot; a plain `child()` takes it.
async fn a_child_wait_behind_a_higher_priority_waiter_on_its_paths_reserves_no_slot<B: Backend>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let urgent = b.actor("urgent", Grant::workspace(root)).await.unwrap();
    let k1 = lead.child("k1", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["src/a.rs"])).await.unwrap();
    let mut urgent_waits = Box::pin(urgent.admit_with(t(&["src/"]), at(5)));
    queued(b, &mut urgent_waits, 1).await;
    let mut w = Box::pin(lead.child_wait("w", Grant::fenced(root, ["src/x/"])));
    queued(b, &mut w, 2).await;
    assert_eq!(
        causes(&b.dump().await),
        [
            path_cause(&root.join("src"), "holder"),
            json!({"cause": "slots"})
        ]
    );
    k1.close().await;
    // The freed slot is not w's: its paths wait for urgent.
    let dump = until(b, "w to wait for its path", |d| {
        causes(d).get(1) == Some(&path_cause(&root.join("src/x"), "urgent"))
    })
    .await;
    assert_eq!(slots(&dump).0, 0);
    let waiting = waiter_of(&dump, "lead");
    assert_eq!(count(&waiting["blocked_by"], "holds"), 0);
    assert_eq!(
        waiting["blocked_by"]["waiters"],
        json!([waiter_of(&dump, "urgent")["id"]])
    );
    assert_eq!(named_edges(&dump), [edge("lead", "urgent", false)]);
    let r = lead
        .child("r", Grant::read_only(root))
        .await
        .expect("a child_wait contested on its paths reserves no slot");
    assert_eq!(
        no_slot(lead.child("r2", Grant::read_only(root)).await),
        (SlotLimit::MaxActors, 1)
    );
    holder.release(held).await;
    let got = within("urgent", urgent_waits).await.unwrap();
    urgent.release(got).await;
    // Its paths free, w waits for the slot, and gets it when r goes.
    until(b, "w to wait for a slot", |d| {
        causes(d) == [json!({"cause": "slots"})]
    })
    .await;
    r.close().await;
    let w = within("w", w).await.unwrap();
    assert_eq!(w.name(), "w");
    b.check();
}

/// Runs under `max_actors(1)`. SPEC §11: the queue is "ordered by priority,
/// then arrival", and freed slots "go to queued `child_wait`s in queue
/// order": a `child_wait` queued after a lower-priority request on its
/// paths is ahead of it, its paths are free, so it keeps its claim on the
/// slot (a `child()` gets `NoSlot`) and gets the slot when one is freed;
/// that request then waits on the new child's grant fence (a hard edge).
async fn a_child_wait_ahead_of_a_lower_priority_waiter_keeps_its_slot<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let low = b.actor("low", Grant::workspace(root)).await.unwrap();
    let k1 = lead.child("k1", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["src/a.rs"])).await.unwrap();
    let mut low_waits = Box::pin(low.admit_with(t(&["src/"]), at(-1)));
    queued(b, &mut low_waits, 1).await;
    let mut w = Box::pin(lead.child_wait("w", Grant::fenced(root, ["src/x/"])));
    queued(b, &mut w, 2).await;
    let dump = b.dump().await;
    assert_eq!(dump["waiters"][0]["child"], "w", "priority first: {dump:#}");
    assert_eq!(
        causes(&dump),
        [
            json!({"cause": "slots"}),
            path_cause(&root.join("src"), "holder")
        ]
    );
    assert_eq!(
        no_slot(lead.child("r", Grant::read_only(root)).await),
        (SlotLimit::MaxActors, 1)
    );
    k1.close().await;
    let w = within("w", w).await.unwrap();
    let dump = until(b, "low's hard edge to w", |d| count(d, "edges") == 1).await;
    assert_eq!(named_edges(&dump), [edge("low", "w", true)]);
    assert_eq!(
        waiter_of(&dump, "low")["blocked_by"]["holds"],
        json!([
            hold_id(&dump, "holder", "call"),
            hold_id(&dump, "w", "fence")
        ])
    );
    holder.release(held).await;
    w.close().await;
    let got = within("low", low_waits).await.unwrap();
    low.release(got).await;
}

/// Runs under `max_actors(2)` and `max_writers(1)`. SPEC §11: "Waiting for
/// a slot joins the wait-for graph: when every live child holding a slot of
/// that limit waits, directly or through others, on the requester, the
/// slot wait is refused at once with `Deadlock`." A holder of that limit
/// that does not wait on the requester may still free it (the wait
/// queues), and a limit the wait is not blocked by is not asked.
async fn a_slot_wait_is_a_deadlock_only_if_every_holder_of_its_limit_waits_on_the_requester<
    B: Backend,
>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let _fence = lead.fence(t(&["src/"])).await.unwrap();
    let k = other.child("k", Grant::workspace(root)).await.unwrap();
    let r = other.child("r", Grant::read_only(root)).await.unwrap();
    let mut k_waits = Box::pin(k.admit(t(&["src/a.rs"])));
    queued(b, &mut k_waits, 1).await;
    // Actor slots: k waits on lead, r does not.
    let mut w = Box::pin(lead.child_wait("w", Grant::read_only(root)));
    queued(b, &mut w, 2).await;
    assert_eq!(
        causes(&b.dump().await),
        [
            path_cause(&root.join("src/a.rs"), "lead"),
            json!({"cause": "slots"})
        ]
    );
    drop(w);
    waiters(b, 1).await;
    r.close().await;
    // The one writer slot is k's, and k waits on lead.
    let cycle = deadlock(
        within(
            "a writer's child_wait",
            lead.child_wait("w", Grant::workspace(root)),
        )
        .await,
    );
    assert_eq!(cycle, ["lead", "k"]);
    // An actor slot is free: a reader's child_wait is not blocked at all.
    let w = within(
        "a reader's child_wait",
        lead.child_wait("w", Grant::read_only(root)),
    )
    .await
    .unwrap();
    let dump = b.dump().await;
    assert_eq!(dump["counters"]["deadlocks"], 1);
    assert_eq!(count(&dump, "waiters"), 1);
    w.close().await;
}

/// Runs under `max_actors(1)`. SPEC §11: a slot wait is a deadlock when the
/// slot's holder waits on the requester "directly or through others"; §4:
/// `Deadlock { cycle }` names "the actors in the cycle" — here the one
/// between the holder and the requester too.
async fn a_slot_wait_deadlock_through_another_actor_names_the_whole_cycle<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let x = b.actor("x", Grant::workspace(root)).await.unwrap();
    let _fl = lead.fence(t(&["src/"])).await.unwrap();
    let _fx = x.fence(t(&["lib/"])).await.unwrap();
    let k = other.child("k", Grant::workspace(root)).await.unwrap();
    let mut x_waits = Box::pin(x.admit(t(&["src/a.rs"])));
    queued(b, &mut x_waits, 1).await;
    let mut k_waits = Box::pin(k.admit(t(&["lib/b.rs"])));
    queued(b, &mut k_waits, 2).await;
    let cycle = deadlock(
        within(
            "lead's child_wait",
            lead.child_wait("w", Grant::workspace(root)),
        )
        .await,
    );
    assert_eq!(cycle, ["lead", "k", "x"]);
    let dump = b.dump().await;
    assert_eq!(count(&dump, "waiters"), 2, "the refused wait did not queue");
    assert_eq!(dump["counters"]["deadlocks"], 1);
}

/// SPEC §4: the wait-for graph has "actor → actor" edges: "a waiting
/// request of A conflicts with a fence of B — a hard edge — or queues
/// behind a conflicting earlier request of B — a soft edge"; "Call holds
/// never create edges"; §5: waiters show `blocked_by` (hold and waiter ids)
/// and the dump shows the edges. Edges follow the table: a released fence
/// takes its hard edges with it.
async fn the_dump_shows_hard_edges_to_fences_and_soft_edges_to_earlier_waiters<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let c = b.actor("c", Grant::workspace(root)).await.unwrap();
    let d = b.actor("d", Grant::workspace(root)).await.unwrap();
    let fence = a.fence(t(&["src/"])).await.unwrap();
    let x = d.try_admit(t(&["x.rs"])).await.unwrap();
    let mut b_waits = Box::pin(bb.admit(t(&["src/a.rs", "x.rs"])));
    queued(b, &mut b_waits, 1).await;
    let mut c_waits = Box::pin(c.admit(t(&["x.rs"])));
    queued(b, &mut c_waits, 2).await;
    let dump = b.dump().await;
    assert_eq!(
        named_edges(&dump),
        [edge("b", "a", true), edge("c", "b", false)]
    );
    let waiting = waiter_of(&dump, "c");
    assert_eq!(
        waiting["blocked_by"]["holds"],
        json!([hold_id(&dump, "d", "call")])
    );
    assert_eq!(
        waiting["blocked_by"]["waiters"],
        json!([waiter_of(&dump, "b")["id"]])
    );
    a.release_fence(fence).await;
    let dump = until(b, "b's hard edge to go", |d| count(d, "edges") == 1).await;
    assert_eq!(named_edges(&dump), [edge("c", "b", false)]);
    d.release(x).await;
    let got = within("b", b_waits).await.unwrap();
    // c now waits for b's call: no edge at all.
    let dump = until(b, "c behind b's call", |d| {
        count(d, "waiters") == 1 && count(d, "edges") == 0
    })
    .await;
    assert_eq!(
        waiter_of(&dump, "c")["cause"],
        path_cause(&root.join("x.rs"), "b")
    );
    bb.release(got).await;
    let got = within("c", c_waits).await.unwrap();
    c.release(got).await;
}

/// SPEC §4: "the check runs when a request is about to start waiting, and
/// that request is the one refused: it fails at once with
/// `Error::Deadlock { cycle }` (... the names of the actors in the
/// cycle)"; a try-only request never waits, so it is `Busy`, not refused
/// as a deadlock.
async fn a_hard_cycle_through_three_fence_owners_is_refused_naming_all_three<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let alpha = lead.child("alpha", Grant::workspace(root)).await.unwrap();
    let beta = lead.child("beta", Grant::workspace(root)).await.unwrap();
    let gamma = lead.child("gamma", Grant::workspace(root)).await.unwrap();
    let fa = alpha.fence(t(&["a/"])).await.unwrap();
    let fb = beta.fence(t(&["b/"])).await.unwrap();
    let fc = gamma.fence(t(&["c/"])).await.unwrap();
    let mut alpha_waits = Box::pin(alpha.fence_wait(t(&["b/x"])));
    queued(b, &mut alpha_waits, 1).await;
    let mut beta_waits = Box::pin(beta.admit(t(&["c/y"])));
    queued(b, &mut beta_waits, 2).await;
    assert_eq!(
        named_edges(&b.dump().await),
        [edge("alpha", "beta", true), edge("beta", "gamma", true)]
    );
    let refused = busy(gamma.try_admit(t(&["a/z"])).await);
    assert_eq!(
        (refused.holder.as_str(), refused.kind, refused.queued),
        ("alpha", HoldKind::Fence, false)
    );
    let cycle = deadlock(within("gamma's admit", gamma.admit(t(&["a/z"]))).await);
    assert_eq!(cycle, ["gamma", "alpha", "beta"]);
    let dump = b.dump().await;
    assert_eq!(dump["counters"]["deadlocks"], 1);
    assert_eq!(count(&dump, "waiters"), 2);
    gamma.release_fence(fc).await;
    let got = within("beta", beta_waits).await.unwrap();
    beta.release(got).await;
    beta.release_fence(fb).await;
    let got = within("alpha", alpha_waits).await.unwrap();
    alpha.release_fence(got).await;
    alpha.release_fence(fa).await;
}

/// SPEC §4: "When the blocker is an earlier waiting request rather than a
/// hold, `holder` is that request's actor, `kind` its requested kind, ...
/// and the message says it is queued"; §13's `busy` data carries `mode`
/// and `queued`. A waiting fence, shared call or `child_wait` (whose grant
/// fence is a fence) refuses a try-caller so.
async fn busy_behind_a_queued_request_names_its_requested_kind_and_mode<B: Backend>(b: &B) {
    let root = b.root();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let fencer = b.actor("fencer", Grant::workspace(root)).await.unwrap();
    let reader = b.actor("reader", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let held = holder.try_admit(t(&["a.rs"])).await.unwrap();
    let mut f = Box::pin(fencer.fence_wait(t(&["a.rs", "b.rs"])));
    queued(b, &mut f, 1).await;
    let mut r = Box::pin(reader.admit_with(
        vec![Target::file("a.rs").shared(), Target::file("c.rs").shared()],
        Ask {
            priority: 0,
            label: Some("grep"),
        },
    ));
    queued(b, &mut r, 2).await;
    let kinds: Vec<Value> = b.dump().await["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("fence"), json!("call")]);
    let refused = busy(other.try_admit(t(&["b.rs"])).await);
    assert_eq!(
        (
            refused.holder.as_str(),
            refused.kind,
            refused.mode,
            refused.queued,
            &refused.path
        ),
        (
            "fencer",
            HoldKind::Fence,
            Mode::Exclusive,
            true,
            &root.join("b.rs")
        )
    );
    let message = Error::Busy(refused).to_string();
    assert!(
        message.starts_with("b.rs is queued to be fenced by 'fencer'"),
        "{message}"
    );
    let refused = busy(other.try_admit(t(&["c.rs"])).await);
    assert_eq!(
        (
            refused.holder.as_str(),
            refused.kind,
            refused.mode,
            refused.queued
        ),
        ("reader", HoldKind::Call, Mode::Shared, true)
    );
    assert_eq!(refused.label.as_deref(), Some("grep"));
    let message = Error::Busy(refused).to_string();
    assert!(
        message.starts_with("c.rs is queued to be read by 'reader'"),
        "{message}"
    );
    // Reads do not clash with a queued read.
    passes(&other, shared("c.rs")).await;
    // A child_wait waiting for its grant fence's paths is a queued fence.
    let lib = holder.fence(t(&["lib/"])).await.unwrap();
    let mut w = Box::pin(lead.child_wait("w", Grant::fenced(root, ["lib/", "tests/"])));
    queued(b, &mut w, 3).await;
    let refused = busy(other.try_admit(t(&["tests/x.rs"])).await);
    assert_eq!(
        (refused.kind, refused.mode, refused.queued),
        (HoldKind::Fence, Mode::Exclusive, true)
    );
    drop(w);
    waiters(b, 2).await;
    holder.release_fence(lib).await;
    holder.release(held).await;
    let got = within("fencer", f).await.unwrap();
    fencer.release_fence(got).await;
    let got = within("reader", r).await.unwrap();
    reader.release(got).await;
}

/// SPEC §4: precedence of a fence's owner: "an earlier waiting request that
/// is blocked by a fence which covers the new request ... does not block
/// the new request and gives it no soft edge". A fence granted while a
/// request of its line already waits (here past the earlier waiter by
/// priority, §11) starts that precedence at once: the soft edge goes, so no
/// cycle runs through it, and the owner waiting on its descendant's own
/// fence is queued, not refused as a deadlock.
async fn a_fence_granted_later_ends_the_soft_edges_of_its_lines_waiters<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let own = lead.try_admit(t(&["src/a.rs"])).await.unwrap();
    let z = holder.try_admit(t(&["z.rs"])).await.unwrap();
    let kid_fence = kid.fence(t(&["k/"])).await.unwrap();
    // sib waits for lead's call; kid queues behind sib on y.rs.
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut kid_waits = Box::pin(kid.admit(t(&["y.rs", "z.rs"])));
    queued(b, &mut kid_waits, 2).await;
    assert_eq!(named_edges(&b.dump().await), [edge("kid", "sib", false)]);
    // lead's fence, granted past sib by priority, now blocks sib: from here
    // on kid passes sib.
    let fence = lead.fence_with(t(&["src/"]), at(1)).await.unwrap();
    until(b, "sib's hard edge to the new fence", |d| {
        named_edges(d).contains(&edge("sib", "lead", true))
    })
    .await;
    // So lead waiting on kid's fence closes no cycle.
    let mut lead_waits = Box::pin(lead.admit(t(&["k/x.rs"])));
    queued(b, &mut lead_waits, 3).await;
    let dump = b.dump().await;
    assert_eq!(dump["counters"]["deadlocks"], 0);
    assert_eq!(count(&waiter_of(&dump, "kid")["blocked_by"], "waiters"), 0);
    assert_eq!(
        named_edges(&dump),
        [edge("lead", "kid", true), edge("sib", "lead", true)]
    );
    // Everyone is granted in turn.
    holder.release(z).await;
    let got = within("kid", kid_waits).await.unwrap();
    kid.release(got).await;
    kid.release_fence(kid_fence).await;
    let got = within("lead", lead_waits).await.unwrap();
    lead.release(got).await;
    lead.release(own).await;
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
}

/// SPEC §4: precedence holds while the fence does ("that waiter cannot be
/// granted before the fence goes anyway"); once it is released, fairness
/// is unchanged: a waiting request of the owner's line that passed the
/// earlier waiter queues behind it again — a soft edge, shown by the dump
/// (§5: one consistent snapshot of the wait-for edges) as soon as the
/// release is done.
async fn releasing_a_fence_puts_its_lines_waiters_back_behind_the_waiter_it_blocked<B: Backend>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let fence = lead.fence(t(&["src/"])).await.unwrap();
    let w = holder.try_admit(t(&["w.rs"])).await.unwrap();
    let z = holder.try_admit(t(&["z.rs"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "w.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut kid_waits = Box::pin(kid.admit(t(&["y.rs", "z.rs"])));
    queued(b, &mut kid_waits, 2).await;
    assert_eq!(named_edges(&b.dump().await), [edge("sib", "lead", true)]);
    lead.release_fence(fence).await;
    let dump = b.dump().await;
    let sib_id = waiter_of(&dump, "sib")["id"].clone();
    assert_eq!(
        waiter_of(&dump, "kid")["blocked_by"]["waiters"],
        json!([sib_id])
    );
    assert_eq!(named_edges(&dump), [edge("kid", "sib", false)]);
    holder.release(w).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
    holder.release(z).await;
    let got = within("kid", kid_waits).await.unwrap();
    kid.release(got).await;
}

/// SPEC §5: the dump's counters — "admitted, refused, waited, timed out,
/// deadlocks" — count each request once: a try-only refusal (`Busy` by a
/// hold or a queued request, of a call, a fence, a widening or a fenced
/// child) is refused; a wait is waited (and timed out when it times out);
/// an actor is one admission with its grant fence; a widening is no new
/// admission.
async fn counters_count_each_admission_and_refusal_once<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    let x = a.try_admit(t(&["x.rs"])).await.unwrap();
    busy(o.try_admit(t(&["x.rs"])).await);
    busy(o.fence(t(&["x.rs"])).await);
    let mut y = o.try_admit(t(&["y.rs"])).await.unwrap();
    busy(o.extend_call(&mut y, t(&["x.rs"])).await);
    o.extend_call(&mut y, t(&["v.rs"])).await.unwrap();
    busy(a.child("k", Grant::fenced(root, ["x.rs"])).await);
    let mut waiting = Box::pin(o.admit(t(&["x.rs", "q.rs"])));
    queued(b, &mut waiting, 1).await;
    assert!(busy(a.try_admit(t(&["q.rs"])).await).queued);
    drop(waiting);
    waiters(b, 0).await;
    match o
        .admit_timeout(t(&["x.rs"]), Duration::from_millis(20))
        .await
    {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {:?}", other.err()),
    }
    let kid = a.child("reader", Grant::read_only(root)).await.unwrap();
    let dump = waiters(b, 0).await;
    assert_eq!(
        dump["counters"],
        json!({"admitted": 5, "refused": 5, "waited": 2, "timed_out": 1, "deadlocks": 0})
    );
    kid.close().await;
    o.release(y).await;
    a.release(x).await;
}

/// SPEC §2: "An actor's lineage (its chain of ancestors) is fixed at
/// creation and survives the drop of a middle actor"; §4: the owner's
/// precedence reaches its descendants, so a grandchild whose parent was
/// dropped still passes a waiter its grandparent's fence blocks.
async fn precedence_survives_the_drop_of_a_middle_actor<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let mid = lead.child("mid", Grant::workspace(root)).await.unwrap();
    let grandkid = mid.child("grandkid", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let fence = lead.fence(t(&["src/"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    mid.close().await;
    passes(&grandkid, t(&["src/a.rs"])).await;
    passes(&grandkid, t(&["y.rs"])).await;
    // Outside the line, fairness is unchanged.
    let refused = busy(other.try_admit(t(&["y.rs"])).await);
    assert_eq!((refused.holder.as_str(), refused.queued), ("sib", true));
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
}

/// Runs under `max_actors(2)` and `max_writers(1)`. SPEC §11: "Freed slots
/// go to queued `child_wait`s in queue order; `child()` gets `NoSlot` while
/// a `child_wait` is queued on that limit": a writer's `child_wait` waiting
/// for the writer slot also holds its claim on an actor slot, so a reader's
/// `child_wait` behind it waits for an actor slot; one freed writer lets
/// both through in order.
async fn one_freed_writer_slot_lets_queued_child_waits_through_in_order<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let w1 = lead.child("w1", Grant::workspace(root)).await.unwrap();
    let mut w2 = Box::pin(lead.child_wait("w2", Grant::workspace(root)));
    queued(b, &mut w2, 1).await;
    let mut r = Box::pin(lead.child_wait("r", Grant::read_only(root)));
    queued(b, &mut r, 2).await;
    assert_eq!(
        causes(&b.dump().await),
        [json!({"cause": "writers"}), json!({"cause": "slots"})]
    );
    assert_eq!(
        no_slot(lead.child("r2", Grant::read_only(root)).await),
        (SlotLimit::MaxActors, 2)
    );
    w1.close().await;
    let w2 = within("w2", w2).await.unwrap();
    let r = within("r", r).await.unwrap();
    let dump = b.dump().await;
    assert_eq!(slots(&dump), (2, 1));
    assert_eq!(count(&dump, "waiters"), 0);
    r.close().await;
    w2.close().await;
}

/// SPEC §4: "A fence granted past lower-priority waiters ... that would
/// close a cycle is refused with `Deadlock`" — a cycle of the wait-for
/// graph as it is, where the owner's precedence gave a passing request "no
/// soft edge". A fence granted past a waiter whose only way back to the
/// fence's owner would run through such an edge closes no cycle, and is
/// granted.
async fn a_fence_past_a_waiter_closes_no_cycle_through_an_edge_precedence_removed<B: Backend>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let x = b.actor("x", Grant::workspace(root)).await.unwrap();
    let own = lead.try_admit(t(&["src/a.rs"])).await.unwrap();
    let z = holder.try_admit(t(&["z.rs"])).await.unwrap();
    let kid_fence = kid.fence(t(&["k/"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "v.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut kid_waits = Box::pin(kid.admit(t(&["y.rs", "z.rs"])));
    queued(b, &mut kid_waits, 2).await;
    // lead's fence blocks sib from now on: kid passes sib, no soft edge.
    let fence = lead.fence_with(t(&["src/"]), at(1)).await.unwrap();
    until(b, "sib's hard edge to the new fence", |d| {
        named_edges(d).contains(&edge("sib", "lead", true))
    })
    .await;
    // x waits on kid's fence, then fences v.rs past sib: sib -> x, and
    // x -> kid, but kid no longer waits on sib.
    let mut x_waits = Box::pin(x.admit(t(&["k/x.rs"])));
    queued(b, &mut x_waits, 3).await;
    let v = x
        .fence_with(t(&["v.rs"]), at(1))
        .await
        .expect("no cycle runs through kid's request");
    assert_eq!(b.dump().await["counters"]["deadlocks"], 0);
    x.release_fence(v).await;
    drop(x_waits);
    waiters(b, 2).await;
    holder.release(z).await;
    let got = within("kid", kid_waits).await.unwrap();
    kid.release(got).await;
    kid.release_fence(kid_fence).await;
    lead.release(own).await;
    lead.release_fence(fence).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
}

/// SPEC §11: a narrowed fence's rest "is released at once and waiters
/// woken"; §4: the owner's precedence lasts only while its fence blocks
/// the earlier waiter. Narrowing the fence off that waiter's path puts a
/// waiting request of the owner's line back behind it: its soft edge is in
/// the dump (§5) as soon as the narrow returns.
async fn narrowing_a_fence_off_a_waiters_path_puts_its_lines_waiters_back_behind_it<B: Backend>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let holder = b.actor("holder", Grant::workspace(root)).await.unwrap();
    let mut fence = lead.fence(t(&["src/"])).await.unwrap();
    let w = holder.try_admit(t(&["w.rs"])).await.unwrap();
    let z = holder.try_admit(t(&["z.rs"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "w.rs", "y.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut kid_waits = Box::pin(kid.admit(t(&["y.rs", "z.rs"])));
    queued(b, &mut kid_waits, 2).await;
    assert_eq!(named_edges(&b.dump().await), [edge("sib", "lead", true)]);
    lead.narrow(&mut fence, t(&["src/b/"])).await.unwrap();
    let dump = b.dump().await;
    let sib_id = waiter_of(&dump, "sib")["id"].clone();
    assert_eq!(
        waiter_of(&dump, "kid")["blocked_by"]["waiters"],
        json!([sib_id])
    );
    assert_eq!(named_edges(&dump), [edge("kid", "sib", false)]);
    holder.release(w).await;
    let got = within("sib", sib_waits).await.unwrap();
    sib.release(got).await;
    holder.release(z).await;
    let got = within("kid", kid_waits).await.unwrap();
    kid.release(got).await;
    lead.release_fence(fence).await;
}

/// SPEC §4: "a waiting request of A conflicts with a fence of B — a hard
/// edge"; §11: a `child_wait` waiting for its grant fence's paths is such a
/// request of its parent ("a `child_wait` waiter shows its parent as
/// `actor`"). A fence owner that then waits on the parent's fence closes
/// the cycle and is refused, naming both.
async fn a_child_wait_on_a_fence_is_a_hard_edge_of_its_parent<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let beta = b.actor("beta", Grant::workspace(root)).await.unwrap();
    let _fa = lead.fence(t(&["a/"])).await.unwrap();
    let fb = beta.fence(t(&["b/"])).await.unwrap();
    let mut w = Box::pin(lead.child_wait("w", Grant::fenced(root, ["b/"])));
    queued(b, &mut w, 1).await;
    assert_eq!(named_edges(&b.dump().await), [edge("lead", "beta", true)]);
    let cycle = deadlock(within("beta's admit", beta.admit(t(&["a/x.rs"]))).await);
    assert_eq!(cycle, ["beta", "lead"]);
    beta.release_fence(fb).await;
    let w = within("w", w).await.unwrap();
    assert_eq!(w.name(), "w");
}

/// SPEC §3: "A child's write scope never exceeds its parent's"; §8: "The
/// most specific root decides: a read-only root inside the grant root is
/// read-only". A writable child rooted in its parent's read-only area would
/// write where its parent may not: it is refused (in process as
/// `OutsideGrant`, the refusal §2 gives a child root outside its parent's
/// writable root), and nothing of it is left.
async fn a_writable_child_cannot_be_rooted_in_its_parents_read_only_area<B: Backend>(b: &B) {
    let ws = b.root().join("ws");
    let vendor = ws.join("vendor");
    std::fs::create_dir_all(&vendor).unwrap();
    let lead = b
        .actor("lead", Grant::workspace(&ws).read_root(&vendor))
        .await
        .unwrap();
    policy_refused(
        lead.try_admit(vec![Target::file(vendor.join("x.rs"))])
            .await,
    );
    match lead.child("kid", Grant::workspace(&vendor)).await {
        Err(Error::OutsideGrant { path, root }) => {
            assert_eq!((path, root), (vendor.clone(), ws.clone()));
        }
        Err(other) => panic!("expected OutsideGrant, got {other}"),
        Ok(kid) => {
            let wrote = kid.try_admit(t(&["x.rs"])).await.is_ok();
            panic!("a writable child was made in a read-only area (it may write there: {wrote})");
        }
    }
    match within(
        "a child_wait",
        lead.child_wait("kid", Grant::workspace(&vendor)),
    )
    .await
    {
        Err(Error::OutsideGrant { .. }) => {}
        other => panic!("expected OutsideGrant, got {:?}", other.err()),
    }
    assert_eq!(count(&b.dump().await, "actors"), 1);
}

/// SPEC §2: under a read root, targets "may only be shared (a write there
/// is `Error::Policy`)"; §3: "Fences claim the right to write", and a
/// fenced grant's fence "is acquired, all-or-nothing, when the actor is
/// created". So a fenced grant may watch a read root (a shared fence) but
/// not fence it exclusively: that creation is `Policy`, and leaves nothing.
async fn a_fenced_grant_fences_a_read_root_only_shared<B: Backend>(b: &B) {
    let base = b.root();
    let ws = base.join("ws");
    let refs = base.join("refs");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&refs).unwrap();
    policy_refused(
        b.actor(
            "a",
            Grant::fenced(&ws, [Target::tree("src"), Target::tree(&refs)]).read_root(&refs),
        )
        .await,
    );
    assert_eq!(count(&b.dump().await, "actors"), 0);
    let a = b
        .actor(
            "a",
            Grant::fenced(&ws, [Target::tree("src"), Target::tree(&refs).shared()])
                .read_root(&refs),
        )
        .await
        .unwrap();
    policy_refused(
        a.child(
            "kid",
            Grant::fenced(&ws, [Target::tree(&refs)]).read_root(&refs),
        )
        .await,
    );
    let dump = b.dump().await;
    assert_eq!(count(&dump, "actors"), 1);
    assert_eq!(count(&dump, "holds"), 1, "only a's grant fence");
}

/// SPEC §3: a fenced actor's "*exclusive* targets must lie inside its
/// fence (`Error::OutsideFence`)" at the fence's mode; §11: "any write
/// through `Files` by a reader is `Error::ReadOnly`"; §2: under a read root
/// "a write there is `Error::Policy`"; §7: a refused op writes nothing.
async fn file_writes_keep_to_the_writers_scope<B: Backend>(b: &B) {
    let base = b.root();
    let ws = base.join("ws");
    let refs = base.join("refs");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&refs).unwrap();
    let lead = b
        .actor("lead", Grant::workspace(&ws).read_root(&refs))
        .await
        .unwrap();
    let a = lead
        .child(
            "a",
            Grant::fenced(&ws, [Target::tree("src"), Target::tree("docs").shared()]),
        )
        .await
        .unwrap();
    let reader = lead.child("reader", Grant::read_only(&ws)).await.unwrap();
    a.write("src/x.rs", "x").await.unwrap();
    for path in ["docs/y.md", "README.md"] {
        outside_fence(a.write(path, "y").await, &ws.join(path));
    }
    match reader.write("src/z.rs", "z").await {
        Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reader"),
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    let doc = refs.join("doc.md");
    policy_refused(lead.write(doc.to_str().unwrap(), "d").await);
    for absent in [
        ws.join("docs/y.md"),
        ws.join("README.md"),
        ws.join("src/z.rs"),
        doc,
    ] {
        assert!(!absent.exists(), "{}", absent.display());
    }
    assert_eq!(count(&b.dump().await, "holds"), 1, "only a's grant fence");
}

/// SPEC §2: "An empty target list is `InvalidPath`" — a fenced grant's
/// target list too, for a root actor and a child, leaving nothing.
async fn an_empty_fenced_grant_is_an_invalid_path<B: Backend>(b: &B) {
    let root = b.root();
    let none: Vec<Target> = Vec::new();
    match b.actor("a", Grant::fenced(root, none.clone())).await {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {:?}", other.err()),
    }
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    match lead.child("kid", Grant::fenced(root, none)).await {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {:?}", other.err()),
    }
    let dump = b.dump().await;
    assert_eq!(count(&dump, "actors"), 1);
    assert_eq!(count(&dump, "holds"), 0);
}

// ---- running the suite on both backends ----

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

fn config() -> Config {
    Config::default().durability(writ::Durability::Process)
}

/// Each entry is a behaviour above, optionally with the `Config` it runs
/// under (the default is `config()`); both backends get the same one.
macro_rules! conformance {
    ($($(#[$meta:meta])* $name:ident $(($config:expr))?),* $(,)?) => {
        mod in_process {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$meta])*
                async fn $name() {
                    let (_dir, root) = workspace();
                    #[allow(unused_variables)]
                    let config = config();
                    $(let config = $config;)?
                    let backend = InProcess { sched: writ::Scheduler::new(config), root };
                    super::$name(&backend).await;
                    backend.check();
                }
            )*
        }
        mod over_http {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$meta])*
                async fn $name() {
                    let (_dir, root) = workspace();
                    #[allow(unused_variables)]
                    let config = config();
                    $(let config = $config;)?
                    let server =
                        writ::server::Server::start(writ::server::Options::new(&root).config(config))
                            .await
                            .unwrap();
                    let session = writ::remote::Session::connect(server.url(), server.token())
                        .await
                        .unwrap();
                    let backend = OverHttp { session, server, root };
                    super::$name(&backend).await;
                    backend.check();
                    backend.server.shutdown().await;
                }
            )*
        }
    };
}

/// The part of the suite a session on etcd serves (SPEC §16), through two
/// servers sharing it. docs/DISTRIBUTED.md says what is left out and why.
#[cfg(feature = "etcd")]
macro_rules! conformance_on_etcd {
    ($($(#[$meta:meta])* $name:ident $(($config:expr))?),* $(,)?) => {
        mod over_etcd {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$meta])*
                async fn $name() {
                    let (_dir, root) = workspace();
                    #[allow(unused_variables)]
                    let config = config();
                    $(let config = $config;)?
                    let etcd = etcd_server::Etcd::start();
                    let mut servers = Vec::new();
                    for _ in 0..2 {
                        let options = writ::server::Options::new(&root)
                            .config(config.clone())
                            .token("0123456789abcdef0123456789abcdef")
                            .etcd([etcd.endpoint.as_str()], config.session_id(), Default::default());
                        servers.push(writ::server::Server::start(options).await.unwrap());
                    }
                    let mut sessions = Vec::new();
                    for server in &servers {
                        sessions.push(
                            writ::remote::Session::connect(server.url(), server.token())
                                .await
                                .unwrap(),
                        );
                    }
                    let Ok(sessions) = <[_; 2]>::try_from(sessions) else { unreachable!() };
                    let backend = OverEtcd {
                        sessions,
                        servers,
                        root,
                        turn: Default::default(),
                        _etcd: etcd,
                    };
                    super::$name(&backend).await;
                    backend.check();
                    for server in backend.servers {
                        server.shutdown().await;
                    }
                }
            )*
        }
    };
}

#[cfg(feature = "etcd")]
conformance_on_etcd!(
    conflict_matrix_between_unrelated_actors,
    a_fence_covers_its_owner_and_descendants_but_not_upwards,
    trees_cover_descendants_exact_keys_only_themselves,
    spellings_resolve_to_one_key,
    escapes_are_refused_without_residue,
    malformed_targets_are_invalid_paths,
    without_portable_names_windows_rules_do_not_apply(config().portable_names(false)),
    grant_roots_must_exist_and_children_stay_inside,
    sensitive_case_tells_spellings_apart(config().case(writ::CaseMode::Sensitive)),
    detect_probes_the_root_file_system(config().case(writ::CaseMode::Detect)),
    overlapping_targets_in_one_request_merge,
    parallel_calls_of_one_actor_on_one_file_are_serialized,
    fenced_actor_writes_only_inside_its_fence_and_reads_anywhere,
    a_fenced_actor_fences_only_within_its_grant_fence_even_shared,
    a_shared_grant_fence_lets_its_actor_read_and_watch_but_not_write,
    a_fenced_grant_is_acquired_all_or_nothing_at_creation,
    children_of_fenced_actors_are_fenced_inside_or_read_only,
    a_read_only_actor_takes_shared_holds_only,
    a_child_of_a_read_only_actor_must_be_read_only,
    a_read_only_child_of_a_fenced_parent_needs_no_fence,
    workspace_target_reserves_the_grant_root_as_a_tree,
    workspace_target_of_a_fenced_actor_is_its_grant_fence,
    dropping_an_actor_releases_its_fences_but_not_its_calls_or_children,
    busy_names_the_holder_and_reads_well,
    all_or_nothing_leaves_nothing_behind,
    try_admit_cannot_jump_a_queued_waiter,
    disjoint_requests_pass_a_waiter,
    cancelling_a_waiter_leaves_nothing_and_wakes_those_behind,
    a_soft_cycle_is_removed_by_reordering_the_queue,
    a_fence_owner_behind_a_shared_call_behind_its_blocked_waiter_goes_ahead,
    a_cycle_closed_by_releasing_a_fence_is_reordered_away,
    postgres_deadlock_soft_refuses_nothing,
    postgres_deadlock_soft_2_refuses_nothing,
    a_soft_cycle_across_priorities_is_refused,
    a_cycle_of_hard_edges_is_refused_whatever_the_queue,
    calls_never_create_wait_edges,
    a_fence_taken_by_precedence_may_not_close_a_cycle,
    a_request_behind_a_fence_request_waits_on_its_owner,
    a_waiter_passed_by_a_fence_request_waits_on_its_owner,
    a_fence_granted_past_waiters_may_not_close_a_cycle,
    extend_is_judged_at_the_requests_own_priority,
    reservation_extend_is_all_or_nothing,
    higher_priority_first_then_arrival_order,
    a_request_keeps_its_priority_in_every_form,
    disjoint_requests_never_wait_for_each_other,
    no_starvation_within_a_priority_level,
    widen_is_all_or_nothing,
    widen_is_not_refused_by_a_waiter_on_the_part_already_held,
    extending_a_hold_onto_what_it_holds_is_granted_while_others_wait,
    narrow_outside_the_current_fence_changes_nothing,
    narrow_can_only_weaken_a_mode,
    root_actors_count_against_no_limit(config().max_actors(1).max_writers(1)),
    child_past_max_actors_is_no_slot_naming_the_limit(config().max_actors(2)),
    read_only_children_do_not_count_as_writers(config().max_writers(1)),
    read_only_children_still_count_as_actors(config().max_actors(1).max_writers(5)),
    child_is_refused_while_a_child_wait_is_queued_on_that_limit(
        config().max_actors(2).max_writers(1)
    ),
    freed_slots_go_to_queued_child_waits_in_queue_order(config().max_actors(1)),
    a_child_wait_blocked_by_a_path_reserves_no_slot(config().max_actors(1)),
    a_slot_wait_that_every_slot_holder_waits_on_is_a_deadlock(config().max_actors(1)),
    child_wait_timeout_gives_up_and_leaves_nothing(config().max_actors(1)),
    a_wait_blocked_by_every_limit_names_the_slots(config().max_actors(1).max_writers(1)),
    a_wait_blocked_by_writers_and_a_path_names_the_writers(config().max_actors(2).max_writers(1)),
    a_wait_blocked_by_a_path_only_names_it_and_its_holder(config().max_actors(2).max_writers(2)),
    a_waiter_is_admitted_when_the_holder_releases,
    admit_timeout_gives_up_cleanly,
    deadlock_between_fence_holders_is_refused_with_the_cycle,
    a_fence_owner_and_its_children_pass_a_waiter_their_fence_blocks,
    a_cycle_closed_by_releasing_a_fence_refuses_a_waiting_request,
    parallel_calls_of_one_actor_are_not_a_deadlock,
    insensitive_case_compares_folded_and_dumps_the_spelling(
        config().case(writ::CaseMode::Insensitive)
    ),
    read_roots_are_shared_only,
    dump_shows_actors_holds_waiters_and_counters(config().session("s-1")),
    a_waiter_behind_an_earlier_waiter_names_that_waiter,
    narrow_wakes_a_waiter_for_the_released_part_not_the_kept_part,
    files_pass_the_version_gate,
    a_contested_file_op_is_busy_and_writes_nothing,
    a_mixed_mode_grant_fence_bounds_calls_fences_growth_and_children,
    read_only_scopes_hold_at_shared_mode_whatever_asks_or_grows,
    growing_onto_paths_the_owners_fence_holds_passes_the_waiters_it_blocks,
    narrowing_a_fence_leaves_waiters_blocked_by_its_lines_calls,
    precedence_reaches_every_descendant_but_no_ancestor_or_stranger,
    precedence_passes_any_priority_fairness_only_a_lower_one,
    a_child_wait_behind_a_higher_priority_waiter_on_its_paths_reserves_no_slot(
        config().max_actors(1)
    ),
    a_child_wait_ahead_of_a_lower_priority_waiter_keeps_its_slot(config().max_actors(1)),
    a_slot_wait_is_a_deadlock_only_if_every_holder_of_its_limit_waits_on_the_requester(
        config().max_actors(2).max_writers(1)
    ),
    the_dump_shows_hard_edges_to_fences_and_soft_edges_to_earlier_waiters,
    a_hard_cycle_through_three_fence_owners_is_refused_naming_all_three,
    busy_behind_a_queued_request_names_its_requested_kind_and_mode,
    counters_count_each_admission_and_refusal_once,
    precedence_survives_the_drop_of_a_middle_actor,
    one_freed_writer_slot_lets_queued_child_waits_through_in_order(
        config().max_actors(2).max_writers(1)
    ),
    a_child_wait_on_a_fence_is_a_hard_edge_of_its_parent,
    file_writes_keep_to_the_writers_scope,
    an_empty_fenced_grant_is_an_invalid_path,
    a_writable_child_cannot_be_rooted_in_its_parents_read_only_area,
    a_fenced_grant_fences_a_read_root_only_shared,
    a_fence_granted_later_ends_the_soft_edges_of_its_lines_waiters,
    releasing_a_fence_puts_its_lines_waiters_back_behind_the_waiter_it_blocked,
    a_fence_past_a_waiter_closes_no_cycle_through_an_edge_precedence_removed,
    narrowing_a_fence_off_a_waiters_path_puts_its_lines_waiters_back_behind_it,
    a_slot_wait_deadlock_through_another_actor_names_the_whole_cycle(config().max_actors(1)),
);

conformance!(
    // §3 the conflict matrix
    conflict_matrix_between_unrelated_actors,
    a_fence_covers_its_owner_and_descendants_but_not_upwards,
    parallel_calls_of_one_actor_on_one_file_are_serialized,
    // §2 keys
    trees_cover_descendants_exact_keys_only_themselves,
    spellings_resolve_to_one_key,
    escapes_are_refused_without_residue,
    malformed_targets_are_invalid_paths,
    without_portable_names_windows_rules_do_not_apply(config().portable_names(false)),
    grant_roots_must_exist_and_children_stay_inside,
    insensitive_case_compares_folded_and_dumps_the_spelling(
        config().case(writ::CaseMode::Insensitive)
    ),
    sensitive_case_tells_spellings_apart(config().case(writ::CaseMode::Sensitive)),
    detect_probes_the_root_file_system(config().case(writ::CaseMode::Detect)),
    overlapping_targets_in_one_request_merge,
    // §3 grants
    fenced_actor_writes_only_inside_its_fence_and_reads_anywhere,
    a_fenced_actor_fences_only_within_its_grant_fence_even_shared,
    a_shared_grant_fence_lets_its_actor_read_and_watch_but_not_write,
    a_fenced_grant_is_acquired_all_or_nothing_at_creation,
    children_of_fenced_actors_are_fenced_inside_or_read_only,
    a_read_only_actor_takes_shared_holds_only,
    a_child_of_a_read_only_actor_must_be_read_only,
    a_read_only_child_of_a_fenced_parent_needs_no_fence,
    read_roots_are_shared_only,
    workspace_target_reserves_the_grant_root_as_a_tree,
    workspace_target_of_a_fenced_actor_is_its_grant_fence,
    dropping_an_actor_releases_its_fences_but_not_its_calls_or_children,
    // §4 admission, waiting, cancellation, timeouts, deadlocks
    all_or_nothing_leaves_nothing_behind,
    busy_names_the_holder_and_reads_well,
    a_waiter_is_admitted_when_the_holder_releases,
    try_admit_cannot_jump_a_queued_waiter,
    disjoint_requests_pass_a_waiter,
    cancelling_a_waiter_leaves_nothing_and_wakes_those_behind,
    admit_timeout_gives_up_cleanly,
    deadlock_between_fence_holders_is_refused_with_the_cycle,
    a_soft_cycle_is_removed_by_reordering_the_queue,
    a_soft_cycle_across_priorities_is_refused,
    a_cycle_of_hard_edges_is_refused_whatever_the_queue,
    postgres_deadlock_soft_refuses_nothing,
    postgres_deadlock_soft_2_refuses_nothing,
    a_fence_owner_and_its_children_pass_a_waiter_their_fence_blocks,
    a_fence_taken_by_precedence_may_not_close_a_cycle,
    a_request_behind_a_fence_request_waits_on_its_owner,
    a_waiter_passed_by_a_fence_request_waits_on_its_owner,
    a_fence_owner_behind_a_shared_call_behind_its_blocked_waiter_goes_ahead,
    a_cycle_closed_by_releasing_a_fence_refuses_a_waiting_request,
    a_cycle_closed_by_releasing_a_fence_is_reordered_away,
    extend_is_judged_at_the_requests_own_priority,
    calls_never_create_wait_edges,
    reservation_extend_is_all_or_nothing,
    parallel_calls_of_one_actor_are_not_a_deadlock,
    a_fence_granted_past_waiters_may_not_close_a_cycle,
    // §5 the dump
    dump_shows_actors_holds_waiters_and_counters(config().session("s-1")),
    // §11 slots and child_wait
    root_actors_count_against_no_limit(config().max_actors(1).max_writers(1)),
    child_past_max_actors_is_no_slot_naming_the_limit(config().max_actors(2)),
    read_only_children_do_not_count_as_writers(config().max_writers(1)),
    read_only_children_still_count_as_actors(config().max_actors(1).max_writers(5)),
    child_is_refused_while_a_child_wait_is_queued_on_that_limit(
        config().max_actors(2).max_writers(1)
    ),
    freed_slots_go_to_queued_child_waits_in_queue_order(config().max_actors(1)),
    a_child_wait_blocked_by_a_path_reserves_no_slot(config().max_actors(1)),
    a_slot_wait_that_every_slot_holder_waits_on_is_a_deadlock(config().max_actors(1)),
    child_wait_timeout_gives_up_and_leaves_nothing(config().max_actors(1)),
    // §11 wait causes, priorities, widening and narrowing
    a_wait_blocked_by_every_limit_names_the_slots(config().max_actors(1).max_writers(1)),
    a_wait_blocked_by_writers_and_a_path_names_the_writers(config().max_actors(2).max_writers(1)),
    a_wait_blocked_by_a_path_only_names_it_and_its_holder(config().max_actors(2).max_writers(2)),
    a_waiter_behind_an_earlier_waiter_names_that_waiter,
    higher_priority_first_then_arrival_order,
    a_request_keeps_its_priority_in_every_form,
    disjoint_requests_never_wait_for_each_other,
    no_starvation_within_a_priority_level,
    widen_is_all_or_nothing,
    widen_is_not_refused_by_a_waiter_on_the_part_already_held,
    extending_a_hold_onto_what_it_holds_is_granted_while_others_wait,
    narrow_wakes_a_waiter_for_the_released_part_not_the_kept_part,
    narrow_outside_the_current_fence_changes_nothing,
    narrow_can_only_weaken_a_mode,
    // §6–§7 the file tools
    files_pass_the_version_gate,
    a_contested_file_op_is_busy_and_writes_nothing,
    // rule families across backends
    a_mixed_mode_grant_fence_bounds_calls_fences_growth_and_children,
    read_only_scopes_hold_at_shared_mode_whatever_asks_or_grows,
    growing_onto_paths_the_owners_fence_holds_passes_the_waiters_it_blocks,
    narrowing_a_fence_leaves_waiters_blocked_by_its_lines_calls,
    precedence_reaches_every_descendant_but_no_ancestor_or_stranger,
    precedence_passes_any_priority_fairness_only_a_lower_one,
    a_child_wait_behind_a_higher_priority_waiter_on_its_paths_reserves_no_slot(
        config().max_actors(1)
    ),
    a_child_wait_ahead_of_a_lower_priority_waiter_keeps_its_slot(config().max_actors(1)),
    a_slot_wait_is_a_deadlock_only_if_every_holder_of_its_limit_waits_on_the_requester(
        config().max_actors(2).max_writers(1)
    ),
    the_dump_shows_hard_edges_to_fences_and_soft_edges_to_earlier_waiters,
    a_hard_cycle_through_three_fence_owners_is_refused_naming_all_three,
    busy_behind_a_queued_request_names_its_requested_kind_and_mode,
    a_fence_granted_later_ends_the_soft_edges_of_its_lines_waiters,
    releasing_a_fence_puts_its_lines_waiters_back_behind_the_waiter_it_blocked,
    counters_count_each_admission_and_refusal_once,
    precedence_survives_the_drop_of_a_middle_actor,
    one_freed_writer_slot_lets_queued_child_waits_through_in_order(
        config().max_actors(2).max_writers(1)
    ),
    a_fence_past_a_waiter_closes_no_cycle_through_an_edge_precedence_removed,
    narrowing_a_fence_off_a_waiters_path_puts_its_lines_waiters_back_behind_it,
    a_child_wait_on_a_fence_is_a_hard_edge_of_its_parent,
    a_writable_child_cannot_be_rooted_in_its_parents_read_only_area,
    a_fenced_grant_fences_a_read_root_only_shared,
    file_writes_keep_to_the_writers_scope,
    an_empty_fenced_grant_is_an_invalid_path,
    a_slot_wait_deadlock_through_another_actor_names_the_whole_cycle(config().max_actors(1)),
);
