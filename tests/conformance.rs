//! The conformance suite (SPEC §15): the scheduler's behaviours (§2–§5)
//! written ONCE against a small trait, and run against the in-process
//! `Scheduler` and against a `writ serve` through `writ::remote`. Both must
//! pass the same assertions; each test may pick the `Config` it runs under,
//! which the server takes as it is.
//!
//! The suite uses only the public API. What only the in-process API can show
//! (the drop timing of guards, a future polled by hand, blocking admits,
//! type bounds) stays in tests/scheduler.rs.
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
use writ::{Config, Error, Grant, HoldKind, Mode, Target};

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
    async fn child(&self, name: &str, grant: Grant) -> Result<Self, Error>;
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
    async fn child(&self, name: &str, grant: Grant) -> Result<Self, Error> {
        writ::Actor::child(self, name, grant)
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
    async fn child(&self, name: &str, grant: Grant) -> Result<Self, Error> {
        writ::remote::Actor::child(self, name, grant).await
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

async fn read_only_actors_take_shared_holds_only<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let reader = lead.child("reader", Grant::read_only(root)).await.unwrap();
    match reader.try_admit(t(&["a.rs"])).await {
        Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reader"),
        other => panic!("expected ReadOnly, got {:?}", other.err()),
    }
    passes(&reader, shared("a.rs")).await;
    match reader.child("writer", Grant::workspace(root)).await {
        Err(Error::ReadOnly { .. }) => {}
        other => panic!("expected ReadOnly, got {:?}", other.err()),
    }
    reader
        .child("reader2", Grant::read_only(root))
        .await
        .unwrap();
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

async fn workspace_target_is_the_whole_writable_scope<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let shell = lead.try_admit(vec![Target::workspace()]).await.unwrap();
    busy(other.try_admit(t(&[".env"])).await); // a shell covers every path
    lead.release(shell).await;
    let fenced = lead
        .child("fenced", Grant::fenced(root, ["src/"]))
        .await
        .unwrap();
    let shell = fenced.try_admit(vec![Target::workspace()]).await.unwrap();
    let dump = b.dump().await;
    let call = dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["kind"] == "call")
        .unwrap();
    assert_eq!(
        call["paths"],
        json!([{"path": text(&root.join("src")), "tree": true, "mode": "exclusive"}])
    );
    fenced.release(shell).await;
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

async fn soft_edges_close_cycles_too<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let bb = b.actor("b", Grant::workspace(root)).await.unwrap();
    let e = b.actor("e", Grant::workspace(root)).await.unwrap();
    let c = b.actor("c", Grant::workspace(root)).await.unwrap();
    let _fa = a.fence(t(&["a/"])).await.unwrap();
    let _fe = e.fence(t(&["e/"])).await.unwrap();
    let _cx = c.try_admit(t(&["x.rs"])).await.unwrap();
    // b waits on a's fence (hard edge b -> a) for a/ and x.rs.
    let mut b_waits = Box::pin(bb.admit(t(&["a/f", "x.rs"])));
    queued(b, &mut b_waits, 1).await;
    // a waits on e's fence (hard edge a -> e).
    let mut a_waits = Box::pin(a.admit(t(&["e/g"])));
    queued(b, &mut a_waits, 2).await;
    // e now wants x.rs: b's earlier request is blocked by a fence that does
    // not cover e, so e queues behind it (soft edge e -> b): e -> b -> a -> e.
    let mut cycle = deadlock(within("e's admit", e.admit(t(&["x.rs"]))).await);
    cycle.sort();
    assert_eq!(cycle, ["a", "b", "e"]);
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

/// The owner's precedence passes only a waiter its fence blocks: a shared
/// call queued behind that waiter passes through the fence and still
/// blocks the owner's exclusive request, and queuing there would close the
/// cycle owner -> shared call -> waiter -> owner. The owner is refused with
/// `Deadlock` when it asks, never left waiting.
async fn a_fence_owner_behind_a_shared_call_behind_its_blocked_waiter_is_refused<B: Backend>(
    b: &B,
) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let sib = b.actor("sib", Grant::workspace(root)).await.unwrap();
    let reader = b.actor("reader", Grant::workspace(root)).await.unwrap();
    let _fence = lead.fence(t(&["src/"])).await.unwrap();
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs"])));
    queued(b, &mut sib_waits, 1).await;
    let mut reader_waits = Box::pin(reader.admit(shared("src/a.rs")));
    queued(b, &mut reader_waits, 2).await;
    let cycle = deadlock(within("the owner's admit", lead.admit(t(&["src/a.rs"]))).await);
    assert_eq!(cycle, ["lead", "reader", "sib"]);
    assert_eq!(b.dump().await["counters"]["deadlocks"], 1);
    b.check();
}

/// Releasing a fence ends the precedence it gave: a request of its owner
/// that passed a waiter the fence blocked queues behind that waiter again.
/// When that waiter still reaches the owner through others (here through
/// `t`'s fence, and `t` waiting on the owner's other fence), that closes a
/// cycle no new wait closed; the passing request is refused with
/// `Deadlock` then, instead of hanging with everyone on the cycle.
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
    let mut sib_waits = Box::pin(sib.admit(t(&["src/a.rs", "lib/b.rs"])));
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
    assert_eq!(names, [&json!("t"), &json!("sib")]);
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
    for needle in [
        "actors (2):",
        "  parser",
        "holds (2):",
        "write_file src/lex.rs",
        "waiters (1):",
        "hold 1, hold 2",
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

// ---- §3: fences ----

async fn fences_extend_all_or_nothing_and_narrow<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let mut f = a.fence(t(&["src/"])).await.unwrap();
    let held = o.try_admit(t(&["docs/x.md"])).await.unwrap();
    busy(a.extend(&mut f, t(&["lib/", "docs/"])).await);
    // Nothing was added: lib/ is still free.
    let lib = o.try_admit(t(&["lib/y.rs"])).await.unwrap();
    o.release(lib).await;
    o.release(held).await;
    a.extend(&mut f, t(&["docs/"])).await.unwrap();
    busy(o.try_admit(t(&["docs/x.md"])).await);
    a.narrow(&mut f, t(&["src/lex.rs"])).await.unwrap();
    let now_free = o
        .try_admit(t(&["docs/x.md", "src/other.rs"]))
        .await
        .unwrap();
    busy(o.try_admit(t(&["src/lex.rs"])).await);
    match a.narrow(&mut f, t(&["elsewhere.rs"])).await {
        Err(Error::OutsideFence { .. }) => {}
        other => panic!("expected OutsideFence, got {:?}", other.err()),
    }
    o.release(now_free).await;
    a.release_fence(f).await;
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
    ($($name:ident $(($config:expr))?),* $(,)?) => {
        mod in_process {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    a_fenced_grant_is_acquired_all_or_nothing_at_creation,
    children_of_fenced_actors_are_fenced_inside_or_read_only,
    read_only_actors_take_shared_holds_only,
    read_roots_are_shared_only,
    workspace_target_is_the_whole_writable_scope,
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
    soft_edges_close_cycles_too,
    a_fence_owner_and_its_children_pass_a_waiter_their_fence_blocks,
    a_fence_taken_by_precedence_may_not_close_a_cycle,
    a_fence_owner_behind_a_shared_call_behind_its_blocked_waiter_is_refused,
    a_cycle_closed_by_releasing_a_fence_refuses_a_waiting_request,
    extend_is_judged_at_the_requests_own_priority,
    calls_never_create_wait_edges,
    reservation_extend_is_all_or_nothing,
    fences_extend_all_or_nothing_and_narrow,
    parallel_calls_of_one_actor_are_not_a_deadlock,
    a_fence_granted_past_waiters_may_not_close_a_cycle,
    // §5 the dump
    dump_shows_actors_holds_waiters_and_counters(config().session("s-1")),
    // §6–§7 the file tools
    files_pass_the_version_gate,
    a_contested_file_op_is_busy_and_writes_nothing,
);
