//! The conformance suite: the scheduler's behaviours written ONCE against a
//! small trait, and run against the in-process `Scheduler` and against a
//! `writ serve` through `writ::remote`. Both must pass the same assertions.
//!
//! The suite uses only the public API. Guards are released through the
//! trait (`release`), because a remote guard dropped without it is released
//! in the background and a test must not race that.

#![allow(async_fn_in_trait)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use writ::{Error, Grant, HoldKind, Target};

/// A session that makes actors.
trait Backend {
    type Actor: Agent;
    fn root(&self) -> &Path;
    async fn actor(&self, name: &str, grant: Grant) -> Result<Self::Actor, Error>;
    async fn dump(&self) -> Value;
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
    async fn extend(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error>;
    async fn narrow(&self, f: &mut Self::Fence, t: Vec<Target>) -> Result<(), Error>;
    async fn release(&self, c: Self::Call);
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

fn count(dump: &Value, what: &str) -> usize {
    dump[what].as_array().map_or(0, Vec::len)
}

/// Polls the dump until `pred` holds, for at most 10 s.
async fn until<B: Backend>(b: &B, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
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

// ---- the suite ----

async fn conflict_matrix_between_unrelated_actors<B: Backend>(b: &B) {
    let root = b.root();
    let a = b.actor("a", Grant::workspace(root)).await.unwrap();
    let o = b.actor("o", Grant::workspace(root)).await.unwrap();
    // Fence-X blocks Call-X and Call-S? No: a read passes through a fence.
    let f = a.fence(t(&["x.rs"])).await.unwrap();
    assert_eq!(busy(o.try_admit(t(&["x.rs"])).await).kind, HoldKind::Fence);
    let read = o.try_admit(shared("x.rs")).await.unwrap();
    // Call-S blocks Call-X.
    let write = busy(a.try_admit(t(&["x.rs"])).await);
    assert_eq!(write.holder, "o");
    o.release(read).await;
    a.release_fence(f).await;
    // Call-X blocks Call-S.
    let w = a.try_admit(t(&["x.rs"])).await.unwrap();
    assert_eq!(busy(o.try_admit(shared("x.rs")).await).holder, "a");
    a.release(w).await;
    // Fence-S and Call-S share; Fence-S blocks Call-X.
    let fs = a.fence(shared("x.rs")).await.unwrap();
    let r = o.try_admit(shared("x.rs")).await.unwrap();
    busy(o.try_admit(t(&["x.rs"])).await);
    o.release(r).await;
    a.release_fence(fs).await;
    assert_eq!(count(&b.dump().await, "holds"), 0);
}

async fn a_fence_covers_its_owner_and_descendants_but_not_upwards<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead.child("kid", Grant::workspace(root)).await.unwrap();
    let other = b.actor("other", Grant::workspace(root)).await.unwrap();
    let f = lead.fence(t(&["src/"])).await.unwrap();
    let own = lead.try_admit(t(&["src/a.rs"])).await.unwrap();
    let kids = kid.try_admit(t(&["src/b.rs"])).await.unwrap();
    assert_eq!(busy(other.try_admit(t(&["src/c.rs"])).await).holder, "lead");
    // The child's fence does not cover the parent.
    let kf = kid.fence(t(&["src/k/"])).await.unwrap();
    assert_eq!(busy(lead.try_admit(t(&["src/k/x.rs"])).await).holder, "kid");
    kid.release_fence(kf).await;
    lead.release(own).await;
    kid.release(kids).await;
    lead.release_fence(f).await;
}

async fn parallel_calls_of_one_actor_are_serialized<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let first = a.try_admit(t(&["f.rs"])).await.unwrap();
    let second = busy(a.try_admit(t(&["f.rs"])).await);
    assert_eq!(second.holder, "a");
    a.release(first).await;
    let again = a.try_admit(t(&["f.rs"])).await.unwrap();
    a.release(again).await;
}

async fn trees_cover_descendants_exact_keys_only_themselves<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let tree = a.try_admit(vec![Target::tree("docs")]).await.unwrap();
    busy(o.try_admit(t(&["docs/deep/x.md"])).await);
    let beside = o.try_admit(t(&["docs-old/x.md"])).await.unwrap();
    a.release(tree).await;
    let file = a.try_admit(t(&["docs"])).await.unwrap();
    let inside = o.try_admit(t(&["docs-old/y.md"])).await.unwrap();
    a.release(file).await;
    o.release(beside).await;
    o.release(inside).await;
}

async fn escapes_are_refused_without_residue<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    for bad in ["../outside.rs", "/etc/passwd", "src/../../x"] {
        match a.try_admit(t(&["ok.rs", bad])).await {
            Err(Error::OutsideGrant { .. }) => {}
            other => panic!("{bad}: expected OutsideGrant, got {:?}", other.err()),
        }
    }
    match a.try_admit(t(&["a\0b"])).await {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {:?}", other.err()),
    }
    match a.try_admit(vec![]).await {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {:?}", other.err()),
    }
    assert_eq!(count(&b.dump().await, "holds"), 0);
}

async fn all_or_nothing_leaves_nothing_behind<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["b.rs"])).await.unwrap();
    busy(o.try_admit(t(&["a.rs", "b.rs", "c.rs"])).await);
    let dump = b.dump().await;
    assert_eq!(count(&dump, "holds"), 1);
    assert_eq!(count(&dump, "waiters"), 0);
    let free = a.try_admit(t(&["a.rs", "c.rs"])).await.unwrap();
    a.release(free).await;
    a.release(held).await;
}

async fn busy_names_the_holder_and_reads_well<B: Backend>(b: &B) {
    let parser = b.actor("parser", Grant::workspace(b.root())).await.unwrap();
    let lead = b.actor("lead", Grant::workspace(b.root())).await.unwrap();
    let held = parser.try_admit(t(&["src/lex.rs"])).await.unwrap();
    let e = lead
        .try_admit(t(&["src/lex.rs"]))
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("src/lex.rs is being written by 'parser'"),
        "{e}"
    );
    let Error::Busy(busy) = e else { panic!() };
    assert_eq!(busy.holder, "parser");
    assert_eq!(busy.kind, HoldKind::Call);
    assert!(busy.path.is_absolute() && busy.path.ends_with("src/lex.rs"));
    assert!(!busy.queued);
    parser.release(held).await;
}

async fn a_waiter_is_admitted_when_the_holder_releases<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["w.rs"])).await.unwrap();
    let (got, ()) = tokio::join!(o.admit(t(&["w.rs"])), async {
        let dump = waiters(b, 1).await;
        assert_eq!(dump["waiters"][0]["actor"], "o");
        a.release(held).await;
    });
    let got = got.unwrap();
    assert_eq!(b.dump().await["holds"][0]["actor"], "o");
    o.release(got).await;
}

async fn try_admit_cannot_jump_a_queued_waiter<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let w = b.actor("w", Grant::workspace(b.root())).await.unwrap();
    let c = b.actor("c", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(shared("q.rs")).await.unwrap();
    let (got, ()) = tokio::join!(w.admit(t(&["q.rs"])), async {
        waiters(b, 1).await;
        // A read would pass the shared hold, but not the queued writer.
        let jumped = busy(c.try_admit(shared("q.rs")).await);
        assert!(jumped.queued);
        assert_eq!(jumped.holder, "w");
        a.release(held).await;
    });
    w.release(got.unwrap()).await;
}

async fn disjoint_requests_pass_a_waiter<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let w = b.actor("w", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["d.rs"])).await.unwrap();
    let (got, ()) = tokio::join!(w.admit(t(&["d.rs"])), async {
        waiters(b, 1).await;
        let free = a.try_admit(t(&["elsewhere.rs"])).await.unwrap();
        a.release(free).await;
        a.release(held).await;
    });
    w.release(got.unwrap()).await;
}

async fn cancelling_a_waiter_leaves_nothing_and_wakes_those_behind<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let w = b.actor("w", Grant::workspace(b.root())).await.unwrap();
    let r = b.actor("r", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(shared("c.rs")).await.unwrap();
    {
        // The writer queues; dropping its future cancels the wait.
        let writer = w.admit(t(&["c.rs"]));
        tokio::pin!(writer);
        tokio::select! {
            _ = &mut writer => panic!("the writer cannot be admitted yet"),
            _ = waiters(b, 1) => {}
        }
    }
    waiters(b, 0).await;
    // The reader behind the cancelled writer passes again.
    let read = r.try_admit(shared("c.rs")).await.unwrap();
    r.release(read).await;
    a.release(held).await;
}

async fn admit_timeout_gives_up_cleanly<B: Backend>(b: &B) {
    let a = b.actor("a", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let held = a.try_admit(t(&["t.rs"])).await.unwrap();
    match o
        .admit_timeout(t(&["t.rs"]), Duration::from_millis(50))
        .await
    {
        Err(Error::Timeout { waited, .. }) => assert!(waited >= Duration::from_millis(50)),
        other => panic!("expected Timeout, got {:?}", other.err()),
    }
    let dump = waiters(b, 0).await;
    assert_eq!(dump["counters"]["timed_out"], 1);
    a.release(held).await;
}

async fn deadlock_between_fence_holders_is_refused_with_the_cycle<B: Backend>(b: &B) {
    let x = b.actor("x", Grant::workspace(b.root())).await.unwrap();
    let y = b.actor("y", Grant::workspace(b.root())).await.unwrap();
    let fx = x.fence(t(&["x/"])).await.unwrap();
    let fy = y.fence(t(&["y/"])).await.unwrap();
    let (first, ()) = tokio::join!(x.fence_wait(t(&["y/"])), async {
        waiters(b, 1).await;
        match y.fence_wait(t(&["x/"])).await {
            Err(Error::Deadlock { cycle }) => {
                assert_eq!(cycle.len(), 2);
                assert_eq!(cycle[0], "y");
            }
            other => panic!(
                "expected Deadlock, got {:?}",
                other.err().map(|e| e.to_string())
            ),
        }
        y.release_fence(fy).await;
    });
    x.release_fence(first.unwrap()).await;
    x.release_fence(fx).await;
}

async fn fenced_grants_are_taken_at_creation_and_bound_writes<B: Backend>(b: &B) {
    let root = b.root();
    let lead = b.actor("lead", Grant::workspace(root)).await.unwrap();
    let kid = lead
        .child("kid", Grant::fenced(root, ["src/parser/"]))
        .await
        .unwrap();
    match kid.try_admit(t(&["src/other.rs"])).await {
        Err(Error::OutsideFence { actor, .. }) => assert_eq!(actor, "kid"),
        other => panic!("expected OutsideFence, got {:?}", other.err()),
    }
    // Reads may go anywhere under the root.
    let read = kid.try_admit(shared("src/other.rs")).await.unwrap();
    kid.release(read).await;
    // A second fenced child on the same folder is refused, all-or-nothing.
    let e = lead
        .child("twin", Grant::fenced(root, ["src/lib.rs", "src/parser/"]))
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(busy::<()>(Err(e)).holder, "kid");
    let dump = b.dump().await;
    assert_eq!(count(&dump, "actors"), 2);
    // Dropping the fenced actor releases its fence.
    kid.close().await;
    let twin = lead
        .child("twin", Grant::fenced(root, ["src/parser/"]))
        .await
        .unwrap();
    twin.close().await;
}

async fn read_only_actors_take_shared_holds_only<B: Backend>(b: &B) {
    let reader = b.actor("reader", Grant::read_only(b.root())).await.unwrap();
    match reader.try_admit(t(&["a.rs"])).await {
        Err(Error::ReadOnly { actor, .. }) => assert_eq!(actor, "reader"),
        other => panic!("expected ReadOnly, got {:?}", other.err()),
    }
    let r = reader.try_admit(shared("a.rs")).await.unwrap();
    reader.release(r).await;
    match reader.child("w", Grant::workspace(b.root())).await {
        Err(Error::ReadOnly { .. }) => {}
        other => panic!("expected ReadOnly, got {:?}", other.err()),
    }
}

async fn the_workspace_target_is_the_whole_writable_scope<B: Backend>(b: &B) {
    let a = b.actor("shell", Grant::workspace(b.root())).await.unwrap();
    let o = b.actor("o", Grant::workspace(b.root())).await.unwrap();
    let all = a.try_admit(vec![Target::workspace()]).await.unwrap();
    busy(o.try_admit(t(&["any/where.rs"])).await);
    a.release(all).await;
}

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

fn config() -> writ::Config {
    writ::Config::default().durability(writ::Durability::Process)
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (_dir, root) = super::workspace();
                    let backend = super::InProcess { sched: writ::Scheduler::new(super::config()), root };
                    super::$name(&backend).await;
                }
            )*
        }
        mod over_http {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (_dir, root) = super::workspace();
                    let server = writ::server::Server::start(
                        writ::server::Options::new(&root).config(super::config()),
                    )
                    .await
                    .unwrap();
                    let session = writ::remote::Session::connect(server.url(), server.token())
                        .await
                        .unwrap();
                    let backend = super::OverHttp { session, root };
                    super::$name(&backend).await;
                    server.shutdown().await;
                }
            )*
        }
    };
}

conformance!(
    conflict_matrix_between_unrelated_actors,
    a_fence_covers_its_owner_and_descendants_but_not_upwards,
    parallel_calls_of_one_actor_are_serialized,
    trees_cover_descendants_exact_keys_only_themselves,
    escapes_are_refused_without_residue,
    all_or_nothing_leaves_nothing_behind,
    busy_names_the_holder_and_reads_well,
    a_waiter_is_admitted_when_the_holder_releases,
    try_admit_cannot_jump_a_queued_waiter,
    disjoint_requests_pass_a_waiter,
    cancelling_a_waiter_leaves_nothing_and_wakes_those_behind,
    admit_timeout_gives_up_cleanly,
    deadlock_between_fence_holders_is_refused_with_the_cycle,
    fenced_grants_are_taken_at_creation_and_bound_writes,
    read_only_actors_take_shared_holds_only,
    the_workspace_target_is_the_whole_writable_scope,
    fences_extend_all_or_nothing_and_narrow,
    files_pass_the_version_gate,
    a_contested_file_op_is_busy_and_writes_nothing,
);
