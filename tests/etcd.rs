//! The session's table in etcd (SPEC §16), against a real etcd.
//!
//! Each test starts its own `etcd` (Debian's `etcd-server`) on free
//! loopback ports with a data folder of its own, waits for its `/health`
//! to answer (polled, with a deadline), and stops it when the test ends.
//! Without an `etcd` on `PATH` every test fails with one line saying what
//! to install. Tables are the way several servers share a session: two
//! `Table`s connected separately stand for two servers.

#![allow(async_fn_in_trait)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use writ::etcd::{ActorRef, AdmitRequest, Grant, LeaseId, Table, TableDump, TableOptions};
use writ::{Error, HoldKind, Mode, Target};

#[path = "common/etcd_server.rs"]
mod etcd_server;
use etcd_server::{Cluster, Etcd, with_etcd};
#[path = "common/etcd_serve.rs"]
mod etcd_serve;
use etcd_serve::{SESSION_TOKEN, ServeProcess};

/// Tables on a test's etcd: two of them stand for two servers.
trait Tables {
    async fn table(&self, session: &str) -> Table;
    async fn table_with(&self, session: &str, options: TableOptions) -> Table;
}

impl Tables for Etcd {
    async fn table(&self, session: &str) -> Table {
        self.table_with(session, TableOptions::default()).await
    }

    async fn table_with(&self, session: &str, options: TableOptions) -> Table {
        Table::connect(&[self.endpoint.as_str()], session, options)
            .await
            .unwrap()
    }
}

const TTL: Duration = Duration::from_secs(30);

async fn actor(table: &Table, name: &str) -> ActorRef {
    let lease = table.grant_lease(TTL).await.unwrap();
    table
        .create_actor(lease, name, Path::new("/ws"), None)
        .await
        .unwrap()
}

fn target(path: &str, mode: Mode) -> Target {
    let target = Target::from(path);
    match mode {
        Mode::Shared => target.shared(),
        Mode::Exclusive => target,
    }
}

fn request(kind: HoldKind, targets: Vec<Target>) -> AdmitRequest {
    match kind {
        HoldKind::Fence => AdmitRequest::fence(targets),
        HoldKind::Call => AdmitRequest::call(targets),
        HoldKind::Claim => unreachable!("claims are given by the file tools, never asked for"),
    }
}

fn busy_path(result: Result<Grant, Error>) -> PathBuf {
    match result {
        Err(Error::Busy(busy)) => busy.path,
        other => panic!("expected Busy, got {other:?}"),
    }
}

/// SPEC §3's table, as the expected answer: does `a` clash with `b`?
fn spec_clash(a: (HoldKind, Mode), b: (HoldKind, Mode)) -> bool {
    use HoldKind::{Call, Fence};
    use Mode::{Exclusive as X, Shared as S};
    let row = |k: (HoldKind, Mode)| match k {
        (Fence, X) => 0,
        (Fence, S) => 1,
        (Call, X) => 2,
        (Call, S) => 3,
        // A claim (SPEC §6) is judged as an exclusive fence.
        (HoldKind::Claim, _) => 0,
    };
    const TABLE: [[bool; 4]; 4] = [
        [true, true, true, false],
        [true, false, true, false],
        [true, true, true, true],
        [false, false, true, false],
    ];
    TABLE[row(a)][row(b)]
}

const SHAPES: [(HoldKind, Mode); 4] = [
    (HoldKind::Fence, Mode::Exclusive),
    (HoldKind::Fence, Mode::Shared),
    (HoldKind::Call, Mode::Exclusive),
    (HoldKind::Call, Mode::Shared),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conflict_matrix_holds_between_unrelated_actors_on_two_tables() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("matrix").await, etcd.table("matrix").await);
    let (a, b) = (actor(&one, "a").await, actor(&two, "b").await);
    for held in SHAPES {
        for asked in SHAPES {
            let first = one
                .admit(&a, request(held.0, vec![target("/ws/f.rs", held.1)]))
                .await
                .unwrap();
            let second = two
                .admit(&b, request(asked.0, vec![target("/ws/f.rs", asked.1)]))
                .await;
            assert_eq!(
                second.is_err(),
                spec_clash(held, asked),
                "{held:?} held, {asked:?} asked: {second:?}"
            );
            if let Ok(grant) = second {
                two.release(grant.hold()).await.unwrap();
            } else {
                assert_eq!(busy_path(second), PathBuf::from("/ws/f.rs"));
            }
            one.release(first.hold()).await.unwrap();
        }
    }
    let dump = one.dump().await.unwrap();
    assert!(dump.table.holds.is_empty(), "{dump:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_overlap_what_lies_beneath_them_and_nothing_else() {
    let etcd = Etcd::start();
    let table = etcd.table("trees").await;
    let (a, b) = (actor(&table, "a").await, actor(&table, "b").await);
    let tree = table
        .admit(&a, AdmitRequest::call(["/ws/src/"]))
        .await
        .unwrap();
    let refused = table
        .admit(&b, AdmitRequest::call(["/ws/src/deep/x.rs"]))
        .await;
    assert_eq!(busy_path(refused), PathBuf::from("/ws/src/deep/x.rs"));
    let refused = table.admit(&b, AdmitRequest::call(["/ws/"])).await;
    assert_eq!(busy_path(refused), PathBuf::from("/ws"));
    for free in ["/ws/src-old/x.rs", "/ws/sr", "/ws/other/"] {
        let grant = table.admit(&b, AdmitRequest::call([free])).await.unwrap();
        table.release(grant.hold()).await.unwrap();
    }
    table.release(tree.hold()).await.unwrap();
    let file = table
        .admit(&a, AdmitRequest::call(["/ws/a"]))
        .await
        .unwrap();
    let beneath = table
        .admit(&b, AdmitRequest::call(["/ws/a/b"]))
        .await
        .unwrap();
    assert_eq!(table.dump().await.unwrap().table.holds.len(), 2);
    table.release(file.hold()).await.unwrap();
    table.release(beneath.hold()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_covers_its_owner_and_descendants_but_not_upwards() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("covers").await, etcd.table("covers").await);
    let lease = one.grant_lease(TTL).await.unwrap();
    let parent = one
        .create_actor(lease, "parent", Path::new("/ws"), None)
        .await
        .unwrap();
    // The child is made through the other table: the lineage is in etcd.
    let child = two
        .create_actor(lease, "child", Path::new("/ws"), Some(&parent))
        .await
        .unwrap();
    let stranger = actor(&two, "stranger").await;
    let fence = one
        .admit(&parent, AdmitRequest::fence(["/ws/src/"]))
        .await
        .unwrap();
    let call = two
        .admit(&child, AdmitRequest::call(["/ws/src/a.rs"]))
        .await
        .unwrap();
    // Within the line, calls still exclude each other.
    let twin = one
        .admit(&child, AdmitRequest::call(["/ws/src/a.rs"]))
        .await;
    assert_eq!(busy_path(twin), PathBuf::from("/ws/src/a.rs"));
    let outsider = two
        .admit(&stranger, AdmitRequest::call(["/ws/src/b.rs"]))
        .await;
    assert_eq!(busy_path(outsider), PathBuf::from("/ws/src/b.rs"));
    // Ownership moves down, never up.
    let child_fence = two
        .admit(&child, AdmitRequest::fence(["/ws/src/lex/"]))
        .await
        .unwrap();
    let upwards = one
        .admit(&parent, AdmitRequest::call(["/ws/src/lex/x.rs"]))
        .await;
    assert_eq!(busy_path(upwards), PathBuf::from("/ws/src/lex/x.rs"));
    let own = one
        .admit(&parent, AdmitRequest::call(["/ws/src/main.rs"]))
        .await
        .unwrap();
    // Dropping the parent releases its fence only; the stranger gets in.
    one.drop_actor(&parent).await.unwrap();
    let dump = one.dump().await.unwrap();
    assert!(
        dump.table.holds.iter().any(|h| h.id == own.hold()),
        "calls survive their actor's drop: {dump:?}"
    );
    assert!(!dump.table.holds.iter().any(|h| h.id == fence.hold()));
    let now = two
        .admit(&stranger, AdmitRequest::call(["/ws/src/b.rs"]))
        .await
        .unwrap();
    for hold in [call.hold(), child_fence.hold(), own.hold(), now.hold()] {
        one.release(hold).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_one_contested_path_leaves_nothing_behind() {
    let etcd = Etcd::start();
    let table = etcd.table("whole").await;
    let (a, b, c) = (
        actor(&table, "a").await,
        actor(&table, "b").await,
        actor(&table, "c").await,
    );
    let held = table
        .admit(&b, AdmitRequest::call(["/ws/b"]))
        .await
        .unwrap();
    let refused = table
        .admit(&a, AdmitRequest::call(["/ws/a", "/ws/b", "/ws/c/"]))
        .await;
    assert_eq!(busy_path(refused), PathBuf::from("/ws/b"));
    let dump = table.dump().await.unwrap();
    assert_eq!(dump.table.holds.len(), 1, "{dump:?}");
    assert!(dump.table.waiters.is_empty());
    let free = table
        .admit(&c, AdmitRequest::call(["/ws/a", "/ws/c/x"]))
        .await
        .unwrap();
    assert_eq!(free.paths().len(), 2);
    table.release(free.hold()).await.unwrap();
    table.release(held.hold()).await.unwrap();
    assert!(matches!(
        table.release(held.hold()).await,
        Err(Error::UnknownHold { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tables_racing_for_one_path_grant_it_once() {
    let etcd = Etcd::start();
    let tables = [etcd.table("race").await, etcd.table("race").await];
    for round in 0..5 {
        let mut actors = Vec::new();
        for i in 0..16 {
            let table = &tables[i % 2];
            actors.push((table.clone(), actor(table, &format!("r{round}-{i}")).await));
        }
        let start = Arc::new(tokio::sync::Barrier::new(actors.len()));
        let tasks: Vec<_> = actors
            .into_iter()
            .map(|(table, me)| {
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    table
                        .admit(&me, AdmitRequest::call(["/ws/src/", "/ws/README.md"]))
                        .await
                })
            })
            .collect();
        let mut granted = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(grant) => granted.push(grant),
                Err(Error::Busy(_)) => {}
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(granted.len(), 1, "round {round}: {granted:?}");
        tables[0].release(granted[0].hold()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_per_path_and_show_in_the_dump() {
    let etcd = Etcd::start();
    let tables = [etcd.table("tokens").await, etcd.table("tokens").await];
    let actors = [actor(&tables[0], "a").await, actor(&tables[1], "b").await];
    let mut last = 0;
    for i in 0..8 {
        let (table, me) = (&tables[i % 2], &actors[i % 2]);
        let path = if i % 3 == 0 { "/ws/x/" } else { "/ws/x/y.rs" };
        let grant = table.admit(me, AdmitRequest::call([path])).await.unwrap();
        assert!(grant.revision() > last, "{} after {last}", grant.revision());
        last = grant.revision();
        let dump = tables[(i + 1) % 2].dump().await.unwrap();
        let shown = dump
            .table
            .holds
            .iter()
            .find(|h| h.id == grant.hold())
            .unwrap();
        assert_eq!(shown.revision, Some(grant.revision()));
        table.release(grant.hold()).await.unwrap();
    }
}

async fn poll_until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_renewed_frees_its_holds_within_the_ttl() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("lapse").await, etcd.table("lapse").await);
    let ttl = Duration::from_secs(2);
    let kept = one.grant_lease(ttl).await.unwrap();
    let lapsing = one.grant_lease(ttl).await.unwrap();
    let keeper = one
        .create_actor(kept, "keeper", Path::new("/ws"), None)
        .await
        .unwrap();
    let dying = one
        .create_actor(lapsing, "dying", Path::new("/ws"), None)
        .await
        .unwrap();
    let kept_fence = one
        .admit(&keeper, AdmitRequest::fence(["/ws/kept/"]))
        .await
        .unwrap();
    one.admit(&dying, AdmitRequest::fence(["/ws/src/"]))
        .await
        .unwrap();
    let other = actor(&two, "other").await;
    assert!(
        two.admit(&other, AdmitRequest::call(["/ws/src/a.rs"]))
            .await
            .is_err()
    );
    let lapsed_at = Instant::now();
    // The other lease is renewed through the *other* table while we wait.
    let granted = loop {
        two.keep_alive(kept).await.unwrap();
        match two
            .admit(&other, AdmitRequest::call(["/ws/src/a.rs"]))
            .await
        {
            Ok(grant) => break grant,
            Err(Error::Busy(_)) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            lapsed_at.elapsed() < ttl + Duration::from_secs(4),
            "the lapsed lease's fence was still held after {:?}",
            lapsed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    two.keep_alive(kept).await.unwrap();
    let dump = two.dump().await.unwrap();
    assert!(
        !dump.table.actors.iter().any(|a| a.id == dying.id()),
        "{dump:?}"
    );
    assert!(
        dump.table.holds.iter().any(|h| h.id == kept_fence.hold()),
        "{dump:?}"
    );
    assert!(matches!(
        one.keep_alive(lapsing).await,
        Err(Error::UnknownLease { .. })
    ));
    assert!(matches!(
        one.admit(&dying, AdmitRequest::call(["/ws/x"])).await,
        Err(Error::UnknownActor { .. })
    ));
    two.release(granted.hold()).await.unwrap();
    // Revoking frees everything at once.
    one.revoke(kept).await.unwrap();
    poll_until(Duration::from_secs(5), "revoked holds gone", || async {
        one.dump()
            .await
            .is_ok_and(|d| !d.table.holds.iter().any(|h| h.id == kept_fence.hold()))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_too_large_for_one_transaction_is_refused_whole() {
    // etcd's own limit, lower than the table believes: etcd refuses, and
    // the table reports it the same way.
    let etcd = Etcd::start_with(&["--max-txn-ops=16"]);
    let trusting = etcd.table("large").await;
    let (a, b) = (actor(&trusting, "a").await, actor(&trusting, "b").await);
    let many: Vec<String> = (0..12).map(|i| format!("/ws/d{i}/f.rs")).collect();
    let refused = trusting
        .admit(&a, AdmitRequest::call(many.iter().map(String::as_str)))
        .await;
    assert!(
        matches!(refused, Err(Error::TxnTooLarge { .. })),
        "{refused:?}"
    );
    // Told the limit, the table refuses before sending anything.
    let told = etcd
        .table_with("large", TableOptions::default().max_txn_ops(16))
        .await;
    match told
        .admit(&a, AdmitRequest::call(many.iter().map(String::as_str)))
        .await
    {
        Err(Error::TxnTooLarge { ops, limit }) => {
            assert_eq!(limit, 16);
            assert!(ops > 16);
        }
        other => panic!("{other:?}"),
    }
    let dump = told.dump().await.unwrap();
    assert!(
        dump.table.holds.is_empty() && dump.table.waiters.is_empty(),
        "{dump:?}"
    );
    // Every path is free for another: nothing was left behind.
    let grant = told
        .admit(
            &b,
            AdmitRequest::call(many.iter().take(2).map(String::as_str)),
        )
        .await
        .unwrap();
    told.release(grant.hold()).await.unwrap();
}

/// The oracle's rule for unrelated actors (no covers): overlapping keys
/// whose kinds and modes clash.
fn keys_overlap(a: &(PathBuf, bool), b: &(PathBuf, bool)) -> bool {
    a.0 == b.0 || (a.1 && b.0.starts_with(&a.0)) || (b.1 && a.0.starts_with(&b.0))
}

type Held = (HoldKind, Vec<(PathBuf, bool, Mode)>);

fn holds_conflict(a: &Held, b: &Held) -> bool {
    a.1.iter().any(|(pa, ta, ma)| {
        b.1.iter().any(|(pb, tb, mb)| {
            keys_overlap(&(pa.clone(), *ta), &(pb.clone(), *tb))
                && spec_clash((a.0, *ma), (b.0, *mb))
        })
    })
}

fn dump_conflicts(dump: &TableDump) -> Option<String> {
    let held: Vec<Held> = dump
        .table
        .holds
        .iter()
        .map(|h| {
            (
                h.kind,
                h.paths
                    .iter()
                    .map(|p| (p.path.clone(), p.tree, p.mode))
                    .collect(),
            )
        })
        .collect();
    for (i, a) in held.iter().enumerate() {
        for b in &held[i + 1..] {
            if holds_conflict(a, b) {
                return Some(format!("{a:?} and {b:?} at revision {}", dump.revision));
            }
        }
    }
    None
}

/// A small deterministic generator (xorshift), so a failing run can be
/// told apart by its seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The round trips of an admission (DISTRIBUTED.md): a request on paths
/// nobody holds or waits for commits in the round trip that would read
/// them, and the table that granted a hold releases it without reading it
/// first; a request whose ranges hold anything reads, then commits.
#[tokio::test]
async fn an_uncontested_admit_and_its_release_take_one_round_trip_each() {
    let etcd = Etcd::start();
    let table = etcd.table("trips").await;
    let other = etcd.table("trips").await;
    let (a, b) = (actor(&table, "a").await, actor(&table, "b").await);
    let trips = |before: u64| table.calls() - before;
    let exclusive = || request(HoldKind::Call, vec![target("/ws/a.rs", Mode::Exclusive)]);
    let before = table.calls();
    let grant = table.admit(&a, exclusive()).await.unwrap();
    assert_eq!(trips(before), 1, "an uncontested admission");
    let before = table.calls();
    table.release(grant.hold()).await.unwrap();
    assert_eq!(trips(before), 1, "the release of a hold this table granted");
    assert!(table.dump().await.unwrap().table.holds.is_empty());
    // Shared reads of one file: the second finds the first in its range.
    let read = || request(HoldKind::Call, vec![target("/ws/r.rs", Mode::Shared)]);
    let first = table.admit(&a, read()).await.unwrap();
    let before = table.calls();
    let second = table.admit(&b, read()).await.unwrap();
    assert_eq!(trips(before), 2, "a read, then the commit");
    // A hold released through a table that did not grant it is read first.
    let before = other.calls();
    other.release(first.hold()).await.unwrap();
    assert_eq!(other.calls() - before, 2);
    // Its granting table finds it gone without a second trip.
    let before = table.calls();
    assert!(matches!(
        table.release(first.hold()).await,
        Err(Error::UnknownHold { .. })
    ));
    assert_eq!(trips(before), 1);
    table.release(second.hold()).await.unwrap();
    let dump = table.dump().await.unwrap();
    assert!(dump.table.holds.is_empty(), "{dump:?}");
    assert_eq!(dump.table.counters.admitted, 5, "two actors, three grants");
}

/// A TCP link to etcd that can lose one answer: armed, it passes the
/// client's bytes on, and once the client has sent a write large enough to
/// be a transaction (pings and window updates are a few dozen bytes), it
/// cuts both connections at etcd's next bytes instead of passing them on.
/// etcd has then received the request, and the client never hears back.
struct LossyLink {
    url: String,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl LossyLink {
    const LARGE: usize = 300;

    fn to(endpoint: &str) -> LossyLink {
        let target = endpoint.trim_start_matches("http://").to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (armed2, cuts2) = (armed.clone(), cuts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                let sent_large = Arc::new(AtomicBool::new(false));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (armed_up, large_up) = (armed2.clone(), sent_large.clone());
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 || s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        if n >= Self::LARGE && armed_up.load(Ordering::SeqCst) {
                            large_up.store(true, Ordering::SeqCst);
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                let (armed_down, cuts_down) = (armed2.clone(), cuts2.clone());
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let (mut s_in, mut c_out) = (server, client);
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if sent_large.load(Ordering::SeqCst)
                            && armed_down.swap(false, Ordering::SeqCst)
                        {
                            cuts_down.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                    let _ = s_in.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        LossyLink { url, armed, cuts }
    }

    fn lose_the_next_answer(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

/// Two tables of `session`: one through a [`LossyLink`] (with a 1 s call
/// bound), one straight to etcd.
async fn lossy_tables(etcd: &Etcd, session: &str) -> (LossyLink, Table, Table) {
    let link = LossyLink::to(&etcd.endpoint);
    let options = TableOptions::default().call_timeout(Duration::from_secs(1));
    let table = Table::connect(&[link.url.as_str()], session, options)
        .await
        .unwrap();
    let direct = etcd.table(session).await;
    (link, table, direct)
}

/// A commit whose answer is lost (the connection to etcd cut after etcd
/// received it) is found by its own entries in the next round and
/// answered as the grant it was, with its token; nothing is left held
/// twice, and a waiting request's queue entry is not left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_whose_commit_answer_was_lost_is_granted_once() {
    let etcd = Etcd::start();
    let (link, table, direct) = lossy_tables(&etcd, "lossy").await;
    let me = actor(&table, "a").await;
    for (round, wait) in [(0, false), (1, true)] {
        let path = format!("/ws/lost{round}.rs");
        let mut asked = request(HoldKind::Call, vec![target(&path, Mode::Exclusive)]);
        if wait {
            asked = asked.wait_timeout(Duration::from_secs(20));
        }
        link.lose_the_next_answer();
        let grant = table
            .admit(&me, asked)
            .await
            .expect("granted despite the lost answer");
        assert_eq!(link.cuts(), round + 1, "the answer was lost");
        let dump = direct.dump().await.unwrap();
        assert_eq!(dump.table.holds.len(), 1, "{dump:?}");
        assert_eq!(dump.table.holds[0].revision, Some(grant.revision()));
        assert!(dump.table.waiters.is_empty(), "{dump:?}");
        table.release(grant.hold()).await.unwrap();
        assert!(direct.dump().await.unwrap().table.holds.is_empty());
    }
}

/// A grant asked for with a ticket, whose answer was lost and whose
/// caller then left, is the ticket's: the table that granted it does not
/// release it, so a resume through another table is handed a hold that
/// stays. (It once released it on the caller's leaving: the resumed
/// caller then wrote under a hold that was gone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticketed_grant_whose_caller_left_is_kept_for_its_resume() {
    let etcd = Etcd::start();
    let (link, table, direct) = lossy_tables(&etcd, "lossy-ticket").await;
    let me = actor(&table, "a").await;
    let asked = || {
        request(HoldKind::Call, vec![target("/ws/t.rs", Mode::Exclusive)])
            .wait_timeout(Duration::from_secs(20))
            .ticket("t1")
    };
    link.lose_the_next_answer();
    let first = tokio::spawn({
        let (table, me) = (table.clone(), me.clone());
        async move { table.admit(&me, asked()).await }
    });
    // The commit lands, its answer is lost, and the caller leaves.
    while link.cuts() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.abort();
    let resumed = direct
        .admit(&me, asked().resume())
        .await
        .expect("the grant found by its ticket");
    // The granting table's round after the loss (a 200 ms pause, a 1 s
    // call bound) is long over by then.
    let gone = tokio::time::timeout(Duration::from_secs(3), async {
        while !direct.dump().await.unwrap().table.holds.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        gone.is_err(),
        "the resumed grant was released under its caller"
    );
    direct.release(resumed.hold()).await.unwrap();
    assert!(direct.dump().await.unwrap().table.holds.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tables_and_32_clients_never_hold_conflicting_paths_at_once() {
    let secs: u64 = std::env::var("WRIT_ETCD_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let etcd = Etcd::start();
    let tables = [
        etcd.table("stress").await,
        etcd.table("stress").await,
        etcd.table("stress").await,
    ];
    let paths = [
        ("/ws/", true),
        ("/ws/a/", true),
        ("/ws/a/x", false),
        ("/ws/a/y", false),
        ("/ws/b/", true),
        ("/ws/b/x", false),
        ("/ws/c", false),
    ];
    let live: Arc<parking_lot::Mutex<Vec<(u64, Held)>>> = Arc::default();
    let stop = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for client in 0..32u64 {
        let table = tables[client as usize % 3].clone();
        let live = live.clone();
        tasks.push(tokio::spawn(async move {
            let me = actor(&table, &format!("c{client}")).await;
            let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (client + 1));
            let mut grants = 0u64;
            // A live client renews its lease; a run may outlast the TTL.
            let mut renewed = Instant::now();
            while Instant::now() < stop {
                if renewed.elapsed() > TTL / 3 {
                    table.keep_alive(me.lease()).await.unwrap();
                    renewed = Instant::now();
                }
                let kind = if dice.roll(4) == 0 {
                    HoldKind::Fence
                } else {
                    HoldKind::Call
                };
                let mut targets = Vec::new();
                let mut keys = Vec::new();
                for _ in 0..1 + dice.roll(2) {
                    let (path, tree) = paths[dice.roll(paths.len())];
                    let mode = if dice.roll(2) == 0 {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    };
                    targets.push(target(path, mode));
                    keys.push((PathBuf::from(path.trim_end_matches('/')), tree, mode));
                }
                let mut asked = request(kind, targets);
                if dice.roll(3) == 0 {
                    asked = asked.wait_timeout(Duration::from_millis(500));
                }
                let grant = match table.admit(&me, asked).await {
                    Ok(grant) => grant,
                    Err(Error::Busy(_) | Error::Timeout { .. }) => continue,
                    Err(e) => panic!("{e}"),
                };
                let mine: Held = (kind, keys);
                {
                    let mut live = live.lock();
                    if let Some((_, other)) = live.iter().find(|(_, h)| holds_conflict(h, &mine)) {
                        panic!("granted {mine:?} while {other:?} was held");
                    }
                    live.push((grant.hold().0, mine));
                }
                tokio::task::yield_now().await;
                live.lock().retain(|(id, _)| *id != grant.hold().0);
                table.release(grant.hold()).await.unwrap();
                grants += 1;
            }
            grants
        }));
    }
    // A second oracle: the store itself, one consistent snapshot at a time.
    let watcher = tables[0].clone();
    let snapshots = tokio::spawn(async move {
        let mut seen = 0u64;
        while Instant::now() < stop {
            let dump = watcher.dump().await.unwrap();
            if let Some(conflict) = dump_conflicts(&dump) {
                panic!("the store held conflicting holds: {conflict}");
            }
            seen += 1;
        }
        seen
    });
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let snapshots = snapshots.await.unwrap();
    assert!(total > 32, "only {total} grants in {secs} s");
    assert!(snapshots > 0);
    let dump = tables[1].dump().await.unwrap();
    assert!(
        dump.table.holds.is_empty() && dump.table.waiters.is_empty(),
        "{dump:?}"
    );
    eprintln!("{total} grants and {snapshots} snapshots in {secs} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_own_error() {
    let etcd = Etcd::start();
    assert!(matches!(
        Table::connect(
            &[etcd.endpoint.as_str()],
            "no/slash",
            TableOptions::default()
        )
        .await,
        Err(Error::Protocol { .. })
    ));
    let table = etcd.table("bad").await;
    let a = actor(&table, "a").await;
    for bad in ["relative/path", "/ws/a\0b"] {
        assert!(
            matches!(
                table.admit(&a, AdmitRequest::call([bad])).await,
                Err(Error::InvalidPath { .. })
            ),
            "{bad:?}"
        );
    }
    let none: [&str; 0] = [];
    assert!(matches!(
        table.admit(&a, AdmitRequest::call(none)).await,
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        table.keep_alive(LeaseId(12345)).await,
        Err(Error::UnknownLease { .. })
    ));
    assert!(matches!(
        table.actor(writ::ActorId(999)).await,
        Err(Error::UnknownActor { .. })
    ));
    // The workspace target is the actor's root.
    let all = table
        .admit(&a, AdmitRequest::call([Target::workspace()]))
        .await
        .unwrap();
    assert_eq!(all.paths(), [PathBuf::from("/ws")]);
}

/// The grant a spawned waiting admission ends with, within 5 s.
async fn grant_of(task: tokio::task::JoinHandle<Result<Grant, Error>>) -> Grant {
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(Ok(grant))) => grant,
        Ok(Ok(Err(e))) => panic!("the waiter was refused: {e}"),
        Ok(Err(e)) => panic!("the waiter's task failed: {e}"),
        Err(_) => panic!("the waiter was not granted within 5 s"),
    }
}

async fn waiters_in(table: &Table) -> usize {
    table.dump().await.map_or(0, |d| d.table.waiters.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_admitted_when_the_holder_releases_through_another_table() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("wake").await, etcd.table("wake").await);
    let (a, b) = (actor(&one, "a").await, actor(&two, "b").await);
    let held = one.admit(&a, AdmitRequest::call(["/ws/x"])).await.unwrap();
    let waiting = {
        let two = two.clone();
        tokio::spawn(async move { two.admit(&b, AdmitRequest::call(["/ws/x"]).wait()).await })
    };
    poll_until(Duration::from_secs(5), "b queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    let dump = one.dump().await.unwrap();
    assert_eq!(dump.table.waiters[0].actor, "b");
    one.release(held.hold()).await.unwrap();
    let granted = grant_of(waiting).await;
    assert!(granted.revision() > held.revision());
    let dump = one.dump().await.unwrap();
    assert!(dump.table.waiters.is_empty(), "{dump:?}");
    assert_eq!(dump.table.holds.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_admit_cannot_jump_a_waiter_queued_through_another_table() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("fair").await, etcd.table("fair").await);
    let (a, b, c) = (
        actor(&one, "a").await,
        actor(&two, "b").await,
        actor(&one, "c").await,
    );
    let held = one.admit(&a, AdmitRequest::call(["/ws/x"])).await.unwrap();
    let waiting = {
        let two = two.clone();
        tokio::spawn(async move {
            two.admit(&b, AdmitRequest::call(["/ws/x", "/ws/y"]).wait())
                .await
        })
    };
    poll_until(Duration::from_secs(5), "b queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    // `/ws/y` is free, but b queued for it first.
    match one.admit(&c, AdmitRequest::call(["/ws/y"])).await {
        Err(Error::Busy(busy)) => {
            assert!(busy.queued, "{busy}");
            assert_eq!(busy.holder, "b");
            assert!(busy.to_string().contains("queued"), "{busy}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    // A fence waits its turn too; a disjoint request passes freely.
    assert!(one.admit(&c, AdmitRequest::fence(["/ws/"])).await.is_err());
    let disjoint = one.admit(&c, AdmitRequest::call(["/ws/z"])).await.unwrap();
    // Strictly higher priority goes ahead of the queue (SPEC §11).
    let urgent = one
        .admit(&c, AdmitRequest::call(["/ws/y"]).priority(1))
        .await
        .unwrap();
    one.release(urgent.hold()).await.unwrap();
    one.release(held.hold()).await.unwrap();
    let granted = grant_of(waiting).await;
    assert_eq!(granted.paths().len(), 2);
    for hold in [granted.hold(), disjoint.hold()] {
        one.release(hold).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_owner_and_its_children_pass_a_waiter_their_fence_blocks() {
    let etcd = Etcd::start();
    let (one, two) = (
        etcd.table("precedence").await,
        etcd.table("precedence").await,
    );
    let lease = one.grant_lease(TTL).await.unwrap();
    let parent = one
        .create_actor(lease, "parent", Path::new("/ws"), None)
        .await
        .unwrap();
    let child = one
        .create_actor(lease, "child", Path::new("/ws"), Some(&parent))
        .await
        .unwrap();
    let (sibling, stranger) = (actor(&two, "sibling").await, actor(&two, "stranger").await);
    let fence = one
        .admit(&parent, AdmitRequest::fence(["/ws/src/"]))
        .await
        .unwrap();
    let waiting = {
        let two = two.clone();
        let sibling = sibling.clone();
        tokio::spawn(async move {
            two.admit(&sibling, AdmitRequest::call(["/ws/src/a.rs"]).wait())
                .await
        })
    };
    poll_until(Duration::from_secs(5), "sibling queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    // The sibling cannot be granted before the fence goes: the owner's line
    // passes it, on either table.
    let by_child = two
        .admit(&child, AdmitRequest::call(["/ws/src/a.rs"]))
        .await
        .unwrap();
    one.release(by_child.hold()).await.unwrap();
    let by_parent = one
        .admit(&parent, AdmitRequest::call(["/ws/src/a.rs"]))
        .await
        .unwrap();
    one.release(by_parent.hold()).await.unwrap();
    // Outside the line, fairness is unchanged.
    assert!(
        two.admit(&stranger, AdmitRequest::call(["/ws/src/a.rs"]))
            .await
            .is_err()
    );
    one.release(fence.hold()).await.unwrap();
    let granted = grant_of(waiting).await;
    two.release(granted.hold()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_cancellation_leave_no_waiter_and_wake_those_behind() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("cancel").await, etcd.table("cancel").await);
    let (a, b, c) = (
        actor(&one, "a").await,
        actor(&two, "b").await,
        actor(&one, "c").await,
    );
    let held = one.admit(&a, AdmitRequest::call(["/ws/x"])).await.unwrap();
    let started = Instant::now();
    match two
        .admit(
            &b,
            AdmitRequest::call(["/ws/x"]).wait_timeout(Duration::from_millis(300)),
        )
        .await
    {
        Err(Error::Timeout { paths, .. }) => assert_eq!(paths, [PathBuf::from("/ws/x")]),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(waiters_in(&one).await, 0);
    // A dropped future: b queues for x and y, then its caller goes away.
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        two.admit(&b, AdmitRequest::call(["/ws/x", "/ws/y"]).wait()),
    )
    .await;
    assert!(dropped.is_err(), "it could not have been granted");
    poll_until(
        Duration::from_secs(5),
        "the dropped waiter removed",
        || async { waiters_in(&one).await == 0 },
    )
    .await;
    // Nothing of b blocks c's try any more.
    let y = one.admit(&c, AdmitRequest::call(["/ws/y"])).await.unwrap();
    one.release(y.hold()).await.unwrap();
    // An aborted task behind which another waits: the one behind is
    // granted once the hold goes.
    let aborted = {
        let two = two.clone();
        let b = b.clone();
        tokio::spawn(async move { two.admit(&b, AdmitRequest::call(["/ws/x"]).wait()).await })
    };
    poll_until(Duration::from_secs(5), "b queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    let behind = {
        let one = one.clone();
        tokio::spawn(async move { one.admit(&c, AdmitRequest::call(["/ws/x"]).wait()).await })
    };
    poll_until(Duration::from_secs(5), "c queued", || async {
        waiters_in(&one).await == 2
    })
    .await;
    aborted.abort();
    poll_until(
        Duration::from_secs(5),
        "the aborted waiter removed",
        || async { waiters_in(&one).await == 1 },
    )
    .await;
    one.release(held.hold()).await.unwrap();
    let granted = grant_of(behind).await;
    let dump = one.dump().await.unwrap();
    assert_eq!(dump.table.holds.len(), 1, "{dump:?}");
    assert_eq!(dump.table.holds[0].actor, "c");
    one.release(granted.hold()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_fence_holders_on_two_tables_is_refused_with_the_cycle() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("deadlock").await, etcd.table("deadlock").await);
    let (a, b) = (actor(&one, "a").await, actor(&two, "b").await);
    let fence_a = one
        .admit(&a, AdmitRequest::fence(["/ws/a/"]))
        .await
        .unwrap();
    let fence_b = two
        .admit(&b, AdmitRequest::fence(["/ws/b/"]))
        .await
        .unwrap();
    let a_waits = {
        let one = one.clone();
        let a = a.clone();
        tokio::spawn(async move { one.admit(&a, AdmitRequest::call(["/ws/b/x"]).wait()).await })
    };
    poll_until(Duration::from_secs(5), "a queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    // b's wait would close the cycle: it is refused at once, and nothing of
    // it stays queued.
    let started = Instant::now();
    match two.admit(&b, AdmitRequest::call(["/ws/a/x"]).wait()).await {
        Err(Error::Deadlock { cycle }) => assert_eq!(cycle, ["b", "a"]),
        other => panic!("expected Deadlock, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(waiters_in(&one).await, 1);
    // Calls make no edges: b's call on a free file waits for nobody.
    two.release(fence_b.hold()).await.unwrap();
    let granted = grant_of(a_waits).await;
    one.release(granted.hold()).await.unwrap();
    one.release(fence_a.hold()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_formed_by_a_race_between_tables_is_refused_within_the_check_period() {
    let etcd = Etcd::start();
    let options = || TableOptions::default().deadlock_check(Duration::from_millis(500));
    let (one, two) = (
        etcd.table_with("race-deadlock", options()).await,
        etcd.table_with("race-deadlock", options()).await,
    );
    for round in 0..3 {
        let (a, b) = (
            actor(&one, &format!("a{round}")).await,
            actor(&two, &format!("b{round}")).await,
        );
        let fence_a = one
            .admit(&a, AdmitRequest::fence(["/ws/a/"]))
            .await
            .unwrap();
        let fence_b = two
            .admit(&b, AdmitRequest::fence(["/ws/b/"]))
            .await
            .unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let mut wait_a = {
            let (one, a, start) = (one.clone(), a.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                one.admit(
                    &a,
                    AdmitRequest::call(["/ws/b/x"]).wait_timeout(Duration::from_secs(10)),
                )
                .await
            })
        };
        let mut wait_b = {
            let (two, b, start) = (two.clone(), b.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                two.admit(
                    &b,
                    AdmitRequest::call(["/ws/a/x"]).wait_timeout(Duration::from_secs(10)),
                )
                .await
            })
        };
        // Exactly one of the two is refused, within the check period (and
        // a margin for the round trips); the other waits on.
        let started = Instant::now();
        let (first, a_refused) = tokio::select! {
            done = &mut wait_a => (done.unwrap(), true),
            done = &mut wait_b => (done.unwrap(), false),
        };
        let (survivor, survivor_fence, refused_fence) = if a_refused {
            (wait_b, fence_b.hold(), fence_a.hold())
        } else {
            (wait_a, fence_a.hold(), fence_b.hold())
        };
        let cycle = match first {
            Err(Error::Deadlock { cycle }) => cycle,
            other => panic!("round {round}: expected Deadlock, got {other:?}"),
        };
        assert_eq!(cycle.len(), 2, "{cycle:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        // The refused one's fence goes; the survivor is granted.
        one.release(refused_fence).await.unwrap();
        let granted = grant_of(survivor).await;
        one.release(granted.hold()).await.unwrap();
        one.release(survivor_fence).await.unwrap();
        assert!(one.dump().await.unwrap().table.holds.is_empty());
    }
}

// ---- `writ serve --etcd`: processes killed mid-run ----

/// One JSON-RPC call over plain HTTP: the result, or the error object.
fn rpc(
    url: &str,
    token: &str,
    method: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, serde_json::Value> {
    use std::io::{Read as _, Write as _};
    let address = url.trim_start_matches("http://");
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        .to_string();
    let request = format!(
        "POST /rpc HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = std::net::TcpStream::connect(address)
        .map_err(|e| serde_json::json!({"connect": e.to_string()}))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| serde_json::json!({"send": e.to_string()}))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| serde_json::json!({"read": e.to_string()}))?;
    let json = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let mut reply: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| serde_json::json!({"answer": answer, "parse": e.to_string()}))?;
    match reply.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(reply["error"].take()),
    }
}

/// A GET of `route` through `url`: its status and its JSON body.
fn get(url: &str, token: &str, route: &str) -> (u16, serde_json::Value) {
    use std::io::{Read as _, Write as _};
    let address = url.trim_start_matches("http://");
    let request = format!(
        "GET {route} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\n\r\n"
    );
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (
        status,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// A `GET /events` stream through `url`, read as it comes.
struct EventStream {
    reader: std::io::BufReader<std::net::TcpStream>,
}

impl EventStream {
    fn open(url: &str) -> EventStream {
        use std::io::{BufRead as _, Write as _};
        let address = url.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {SESSION_TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut reader = std::io::BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        EventStream { reader }
    }

    /// The next event's data, or a panic naming `what` at `deadline`.
    fn next(&mut self, deadline: Instant, what: &str) -> serde_json::Value {
        use std::io::BufRead as _;
        let mut line = String::new();
        loop {
            assert!(
                Instant::now() < deadline,
                "no event came: waiting for {what}"
            );
            match self.reader.read_line(&mut line) {
                Ok(0) => panic!("the stream ended: waiting for {what}"),
                Ok(_) if line.ends_with('\n') => {
                    // Chunk sizes, ids and keep-alives are other lines.
                    if let Some(data) = line.trim_end().strip_prefix("data: ") {
                        return serde_json::from_str(data).unwrap();
                    }
                    line.clear();
                }
                // A partial line, or the read timed out: read on.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("the stream broke: {e}"),
            }
        }
    }

    /// Events up to and including the first that `done` accepts.
    fn until(
        &mut self,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            let event = self.next(deadline, what);
            let last = done(&event);
            seen.push(event);
            if last {
                return seen;
            }
        }
    }
}

/// Holds on `path` in a dump read through `url`.
fn holds_on(url: &str, path: &Path) -> usize {
    let dump = rpc(url, SESSION_TOKEN, "dump", serde_json::json!({})).unwrap();
    dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| {
            h["paths"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["path"].as_str() == path.to_str())
        })
        .count()
}

fn waiters_through(url: &str) -> usize {
    let dump = rpc(url, SESSION_TOKEN, "dump", serde_json::json!({})).unwrap();
    dump["waiters"].as_array().map_or(0, Vec::len)
}

/// Polls `check` every 20 ms until it holds, for at most `limit`.
fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn workspace_root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

/// A root actor made through `url`: (handle, token).
fn root_actor(url: &str, name: &str) -> (String, String) {
    let made = rpc(
        url,
        SESSION_TOKEN,
        "actor.create",
        serde_json::json!({"name": name, "grant": {"workspace": true}}),
    )
    .unwrap();
    (
        made["actor"].as_str().unwrap().to_string(),
        made["token"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_client_killed_with_sigkill_frees_its_holds_within_the_ttl() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "kill-client", "2");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "kill-client", "2");
    let path = root.join("x.rs");
    // The client: another process, fencing x.rs through server one and
    // renewing its lease in the background.
    let mut client = std::process::Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["__hold", &one.url, SESSION_TOKEN, "x.rs"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "the client's fence", || {
        holds_on(&two.url, &path) == 1
    });
    // A waiter through server two.
    let (waiter, token) = root_actor(&two.url, "waiter");
    let url = two.url.clone();
    let waiting = std::thread::spawn(move || {
        let asked = serde_json::json!({"actor": waiter, "targets": ["x.rs"], "timeout_ms": 30_000});
        let answer = rpc(&url, &token, "admit", asked);
        (answer, Instant::now())
    });
    wait_until(Duration::from_secs(10), "the waiter", || {
        waiters_through(&one.url) == 1
    });
    // Three TTLs while the client lives: its renewals keep the fence.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(holds_on(&one.url, &path), 1, "a live client lost its fence");
    assert!(
        !waiting.is_finished(),
        "the waiter was admitted past a live fence"
    );
    client.kill().unwrap();
    let killed = Instant::now();
    client.wait().unwrap();
    let (answer, at) = waiting.join().unwrap();
    let grant = answer.unwrap_or_else(|e| panic!("the waiter was refused: {e}"));
    let took = at.duration_since(killed);
    assert!(
        took < Duration::from_secs(2) + Duration::from_millis(2_500),
        "the killed client's fence went after {took:?}, TTL 2 s"
    );
    assert_eq!(grant["paths"][0].as_str(), path.to_str());
    assert_eq!(holds_on(&one.url, &path), 1, "exactly the waiter's hold");
}

#[test]
fn a_server_killed_mid_run_loses_no_holds_and_grants_nothing_twice() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let mut one = ServeProcess::start_at(&etcd.endpoint, &root, "kill-server", "2");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "kill-server", "2");
    let path = root.join("x.rs");
    let (holder, holder_token) = root_actor(&one.url, "holder");
    let fence = fence_via(&one.url, &holder_token, &holder, "x.rs").unwrap();
    // A waiter whose wait runs on server one, when server one dies.
    let (waiter, waiter_token) = root_actor(&one.url, "waiter");
    let ask = |url: String| {
        let (waiter, token) = (waiter.clone(), waiter_token.clone());
        std::thread::spawn(move || {
            let asked =
                serde_json::json!({"actor": waiter, "targets": ["x.rs"], "timeout_ms": 30_000});
            rpc(&url, &token, "admit", asked)
        })
    };
    let first = ask(one.url.clone());
    wait_until(Duration::from_secs(10), "the waiter", || {
        waiters_through(&two.url) == 1
    });
    one.kill();
    assert!(
        first.join().unwrap().is_err(),
        "a wait on a killed server cannot have been granted"
    );
    // Both clients go on through server two: the waiter asks again, the
    // holder renews its lease there for three TTLs and keeps its fence.
    let second = ask(two.url.clone());
    let lease = fence_lease(&two.url, &holder);
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        rpc(
            &two.url,
            &holder_token,
            "lease.keepalive",
            serde_json::json!({ "lease": lease }),
        )
        .unwrap();
        assert_eq!(holds_on(&two.url, &path), 1, "the holder lost its fence");
        assert!(!second.is_finished(), "granted while the fence is held");
        std::thread::sleep(Duration::from_millis(300));
    }
    // The holder's actor is known to server two: it can still act.
    rpc(
        &two.url,
        &holder_token,
        "admit",
        serde_json::json!({"actor": holder, "targets": ["y.rs"], "wait": false}),
    )
    .unwrap();
    rpc(
        &two.url,
        &holder_token,
        "release",
        serde_json::json!({"hold": fence["hold"]}),
    )
    .unwrap();
    let granted = second
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the waiter was refused: {e}"));
    assert_eq!(granted["paths"][0].as_str(), path.to_str());
    assert_eq!(holds_on(&two.url, &path), 1, "exactly the waiter's hold");
}

/// The lease of actor `actor`, from a dump.
fn fence_lease(url: &str, actor: &str) -> String {
    let dump = rpc(url, SESSION_TOKEN, "dump", serde_json::json!({})).unwrap();
    let id: u64 = actor.rsplit('-').next().unwrap().parse().unwrap();
    dump["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"].as_u64() == Some(id))
        .map(|a| a["lease"].as_str().unwrap().to_string())
        .unwrap()
}

#[test]
fn an_etcd_restart_mid_run_fails_requests_clearly_and_grants_nothing_twice() {
    let mut etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "restart", "10");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "restart", "10");
    let path = root.join("x.rs");
    let (holder, holder_token) = root_actor(&one.url, "holder");
    let (other, _) = root_actor(&two.url, "other");
    let fence = fence_via(&one.url, &holder_token, &holder, "x.rs").unwrap();
    let try_x = |url: &str| {
        rpc(
            url,
            SESSION_TOKEN,
            "admit",
            serde_json::json!({"actor": other, "targets": ["x.rs"], "wait": false}),
        )
    };
    etcd.kill();
    // While etcd is down every server refuses clearly, and grants nothing.
    for url in [&one.url, &two.url] {
        let refused = try_x(url).expect_err("granted while etcd was down");
        assert_eq!(refused["data"]["kind"], "unavailable", "{refused}");
        let refused = rpc(url, SESSION_TOKEN, "dump", serde_json::json!({}))
            .expect_err("a dump while etcd was down");
        assert_eq!(refused["data"]["kind"], "unavailable", "{refused}");
    }
    etcd.restart();
    // The servers recover on their own: the fence is still held, and the
    // other actor is refused it, through either server.
    wait_until(Duration::from_secs(30), "a server answering again", || {
        rpc(&two.url, SESSION_TOKEN, "dump", serde_json::json!({})).is_ok()
    });
    for url in [&one.url, &two.url] {
        let refused = try_x(url).expect_err("granted twice after the restart");
        assert_eq!(refused["data"]["kind"], "busy", "{refused}");
        assert_eq!(holds_on(url, &path), 1);
    }
    rpc(
        &two.url,
        &holder_token,
        "release",
        serde_json::json!({"hold": fence["hold"]}),
    )
    .unwrap();
    let granted = try_x(&one.url).unwrap();
    assert!(
        granted["revision"].as_i64() > fence["revision"].as_i64(),
        "fencing tokens grow across the restart: {granted} after {fence}"
    );
}

/// `GET /metrics` through `url` with the session token: metric name (with
/// its labels) → value, of the lines that are not comments.
fn scrape(url: &str) -> std::collections::BTreeMap<String, f64> {
    use std::io::{Read as _, Write as _};
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {SESSION_TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_default();
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// A try-only `method` (`admit` or `fence`) of `path` by `actor` through
/// `url`.
fn try_via(
    method: &str,
    url: &str,
    token: &str,
    actor: &str,
    path: &str,
) -> Result<serde_json::Value, serde_json::Value> {
    rpc(
        url,
        token,
        method,
        serde_json::json!({"actor": actor, "targets": [path], "wait": false}),
    )
}

fn try_admit_via(
    url: &str,
    token: &str,
    actor: &str,
    path: &str,
) -> Result<serde_json::Value, serde_json::Value> {
    try_via("admit", url, token, actor, path)
}

fn fence_via(
    url: &str,
    token: &str,
    actor: &str,
    path: &str,
) -> Result<serde_json::Value, serde_json::Value> {
    try_via("fence", url, token, actor, path)
}

/// Releases the hold a grant answer names, through `url`.
fn release_via(
    url: &str,
    token: &str,
    grant: &serde_json::Value,
) -> Result<serde_json::Value, serde_json::Value> {
    rpc(
        url,
        token,
        "release",
        serde_json::json!({"hold": grant["hold"]}),
    )
}

/// One try-only admit and its release through `url`: how long the admit
/// took, and the error of the first that failed.
fn admit_and_release(
    url: &str,
    actor: &str,
    token: &str,
    path: &str,
) -> (Duration, Option<serde_json::Value>) {
    let asked = Instant::now();
    let answer = try_admit_via(url, token, actor, path);
    let took = asked.elapsed();
    match answer {
        Ok(grant) => (took, release_via(url, token, &grant).err()),
        Err(e) => (took, Some(e)),
    }
}

#[test]
fn a_cluster_serves_on_with_a_follower_killed_and_answers_in_bounds_with_one_paused() {
    let mut cluster = Cluster::start(3);
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&cluster.endpoints(), &root, "members", "10");
    let (actor, token) = root_actor(&one.url, "a");
    // A follower killed: the quorum answers, so every admit is granted (a
    // call the client sent to the dead member is sent again).
    let dead = cluster.follower();
    cluster.kill(dead);
    let failed: Vec<_> = (0..30)
        .filter_map(|i| admit_and_release(&one.url, &actor, &token, &format!("k{i}.rs")).1)
        .collect();
    assert!(failed.is_empty(), "with a member killed: {failed:?}");
    // The scrape reads the session's table in etcd, and counts the calls
    // this server sent again.
    let metrics = scrape(&one.url);
    assert!(metrics["writ_admissions_total"] >= 30.0, "{metrics:?}");
    assert_eq!(metrics["writ_holds"], 0.0, "{metrics:?}");
    assert!(
        metrics.contains_key("writ_etcd_resends_total"),
        "{metrics:?}"
    );
    cluster.restart(dead);
    // A follower paused: a call sent to it fails on the call bound (2 s)
    // and a read is asked again elsewhere, so an admit (a few calls) is
    // answered within a few bounds instead of waiting for the member; once
    // it goes on everything is granted.
    let paused = cluster.follower();
    cluster.signal(paused, "STOP");
    let mut slowest = Duration::ZERO;
    for i in 0..8 {
        let (took, _) = admit_and_release(&one.url, &actor, &token, &format!("p{i}.rs"));
        slowest = slowest.max(took);
    }
    cluster.signal(paused, "CONT");
    assert!(
        slowest < Duration::from_secs(10),
        "an admit took {slowest:?} with a member paused"
    );
    let mut round = 0;
    wait_until(Duration::from_secs(30), "every admit granted again", || {
        round += 1;
        admit_and_release(&one.url, &actor, &token, &format!("after{round}.rs"))
            .1
            .is_none()
    });
}

#[test]
fn a_widened_fence_shows_the_token_of_the_grant_that_widened_it() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "widen", "10");
    let (a, a_token) = root_actor(&one.url, "a");
    let (b, b_token) = root_actor(&one.url, "b");
    let fence = rpc(
        &one.url,
        &a_token,
        "fence",
        serde_json::json!({"actor": a, "targets": ["x.rs"]}),
    )
    .unwrap();
    // A later grant of y.rs, then the fence widened onto it.
    let call = try_admit_via(&one.url, &b_token, &b, "y.rs").unwrap();
    release_via(&one.url, &b_token, &call).unwrap();
    let widened = rpc(
        &one.url,
        &a_token,
        "fence.extend",
        serde_json::json!({"hold": fence["hold"], "targets": ["y.rs"]}),
    )
    .unwrap();
    let token = widened["revision"].as_i64().unwrap();
    assert!(
        token > call["revision"].as_i64().unwrap(),
        "{widened} after {call}"
    );
    let dump = rpc(&one.url, SESSION_TOKEN, "dump", serde_json::json!({})).unwrap();
    let shown: Vec<i64> = dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["actor"] == "a")
        .map(|h| h["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(shown, [token], "the widened fence's token in {dump}");
}

#[test]
fn a_wait_ended_by_an_etcd_restart_leaves_no_waiter_behind() {
    let mut etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "ghost", "10");
    let (holder, holder_token) = root_actor(&one.url, "holder");
    let (waiter, waiter_token) = root_actor(&one.url, "waiter");
    let (other, other_token) = root_actor(&one.url, "other");
    let fence = fence_via(&one.url, &holder_token, &holder, "x.rs").unwrap();
    let url = one.url.clone();
    let waiting = std::thread::spawn(move || {
        let asked = serde_json::json!({"actor": waiter, "targets": ["x.rs"], "timeout_ms": 60_000});
        rpc(&url, &waiter_token, "admit", asked)
    });
    wait_until(Duration::from_secs(10), "the waiter", || {
        waiters_through(&one.url) == 1
    });
    // Its watch breaks with etcd; the wait is answered, and ends.
    etcd.kill();
    let refused = waiting
        .join()
        .unwrap()
        .expect_err("granted while etcd was down");
    assert_eq!(refused["data"]["kind"], "unavailable", "{refused}");
    etcd.restart();
    wait_until(
        Duration::from_secs(30),
        "the server answering again",
        || rpc(&one.url, SESSION_TOKEN, "dump", serde_json::json!({})).is_ok(),
    );
    // Its record was on the server's own lease, which etcd restored: it
    // must go because the wait ended, not because a lease did.
    wait_until(
        Duration::from_secs(10),
        "the ended wait's record gone",
        || waiters_through(&one.url) == 0,
    );
    release_via(&one.url, &holder_token, &fence).unwrap();
    let granted = try_admit_via(&one.url, &other_token, &other, "x.rs");
    assert!(granted.is_ok(), "x.rs stayed blocked: {granted:?}");
}

#[test]
fn the_event_stream_of_one_server_tells_what_is_done_through_another_in_order() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "stream", "10");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "stream", "10");
    let mut stream = EventStream::open(&one.url);
    // Everything below goes through the other server.
    let (lead, lead_token) = root_actor(&two.url, "lead");
    let fence = fence_via(&two.url, &lead_token, &lead, "a.rs").unwrap();
    let (other, other_token) = root_actor(&two.url, "other");
    // Refused at once, then a wait that runs out: refusals write nothing
    // but their count, and are told all the same.
    fence_via(&two.url, &other_token, &other, "a.rs").unwrap_err();
    let short = serde_json::json!({"actor": other, "targets": ["a.rs"], "timeout_ms": 300});
    let timed_out = rpc(&two.url, &other_token, "admit", short).unwrap_err();
    assert_eq!(timed_out["data"]["kind"], "timeout", "{timed_out}");
    let waiting = {
        let (url, token, actor) = (two.url.clone(), other_token.clone(), other.clone());
        std::thread::spawn(move || {
            let asked =
                serde_json::json!({"actor": actor, "targets": ["a.rs"], "timeout_ms": 30_000});
            rpc(&url, &token, "admit", asked)
        })
    };
    let mut seen = stream.until("the timeout", |e| e["kind"] == "timed_out");
    seen.extend(stream.until("other's wait", |e| e["kind"] == "waiting"));
    release_via(&two.url, &lead_token, &fence).unwrap();
    let grant = waiting.join().unwrap().unwrap();
    release_via(&two.url, &other_token, &grant).unwrap();
    let wrote = serde_json::json!({"actor": other, "path": "b.txt", "content": "hi\n"});
    rpc(&two.url, &other_token, "files.write", wrote).unwrap();
    rpc(
        &two.url,
        SESSION_TOKEN,
        "actor.drop",
        serde_json::json!({"actor": other}),
    )
    .unwrap();
    seen.extend(stream.until("other dropped", |e| e["kind"] == "actor_dropped"));
    // The oracle: what was done, in the order it was done.
    let prefix = format!("{}/", root.display());
    let told: Vec<String> = seen
        .iter()
        .map(|e| {
            let who = e["actor_name"]
                .as_str()
                .or(e["name"].as_str())
                .unwrap_or("?");
            let what = e["kind"].as_str().unwrap_or("?");
            let path = e["paths"][0]["path"]
                .as_str()
                .or(e["path"].as_str())
                .map(|p| format!(" {}", p.trim_start_matches(&prefix)))
                .unwrap_or_default();
            format!("{what} {who}{path}")
        })
        .collect();
    assert_eq!(
        told,
        [
            "actor_created lead",
            "admitted lead a.rs",
            "actor_created other",
            "refused other a.rs",
            "waiting other a.rs",
            "timed_out other",
            "waiting other a.rs",
            "released lead",
            "woken other",
            "admitted other a.rs",
            "released other",
            "admitted other b.txt",
            "file_written other b.txt",
            "released other",
            "actor_dropped other",
        ]
        .map(String::from),
        "{seen:#?}"
    );
    let by_kind = |kind: &str| seen.iter().find(|e| e["kind"] == kind).unwrap();
    assert_eq!(by_kind("waiting")["cause"]["holder"], "lead");
    assert_eq!(by_kind("admitted")["hold_kind"], "fence");
    assert_eq!(by_kind("file_written")["op"], "write");
    assert_eq!(by_kind("refused")["error"], "busy");
    assert_eq!(by_kind("refused")["holder"], "lead");
    assert_eq!(by_kind("timed_out")["cause"]["holder"], "lead");
    assert_eq!(by_kind("timed_out")["waiter"], by_kind("waiting")["waiter"]);
    // Ids are the table's, as the dump names them; sequence numbers are
    // consecutive.
    let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

/// A TCP link to etcd that can be cut: its connections closed, and new
/// ones refused, until it is mended.
struct CutLink {
    url: String,
    up: Arc<AtomicBool>,
    open: Arc<parking_lot::Mutex<Vec<std::net::TcpStream>>>,
}

impl CutLink {
    fn to(endpoint: &str) -> CutLink {
        let target = endpoint.trim_start_matches("http://").to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let up = Arc::new(AtomicBool::new(true));
        let open: Arc<parking_lot::Mutex<Vec<std::net::TcpStream>>> = Arc::default();
        let (up2, open2) = (up.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if !up2.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                open2
                    .lock()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        CutLink { url, up, open }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for stream in self.open.lock().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn mend(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[test]
fn the_event_stream_reads_on_from_where_its_watch_broke() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    // One server reaches etcd through a link that is cut: its watch breaks
    // while the other server goes on.
    let link = CutLink::to(&etcd.endpoint);
    let one = ServeProcess::start_at(&link.url, &root, "broken", "30");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "broken", "30");
    let mut stream = EventStream::open(&one.url);
    root_actor(&two.url, "before");
    let first = stream.until("the first actor", |e| e["kind"] == "actor_created");
    assert_eq!(first.len(), 1, "{first:#?}");
    link.cut();
    root_actor(&two.url, "while");
    link.mend();
    root_actor(&two.url, "after");
    let next = stream.until("the last actor", |e| e["name"] == "after");
    let names: Vec<&str> = next.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names, ["while", "after"], "{next:#?}");
}

#[test]
fn a_server_on_etcd_shares_tokens_and_keeps_read_only_actors() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "refusals", "10");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "refusals", "10");
    let (actor, token) = root_actor(&one.url, "lead");
    // The actor's token works on the other server, and names its actor.
    let info = rpc(&two.url, &token, "session.info", serde_json::json!({})).unwrap();
    assert_eq!(info["caller"], actor.as_str());
    assert_eq!(info["backend"], "etcd");
    rpc(
        &two.url,
        &token,
        "admit",
        serde_json::json!({"actor": actor, "targets": ["a.rs"], "wait": false}),
    )
    .unwrap();
    // The event stream shows every actor: an actor's token, known in etcd
    // only, is refused as in process (403), not taken for unknown (401).
    let (status, refused) = get(&one.url, &token, "/events");
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["data"]["kind"], "forbidden", "{refused}");
    // A read-only actor's children are read-only too, on every server.
    let reader = rpc(
        &one.url,
        SESSION_TOKEN,
        "actor.create",
        serde_json::json!({"name": "reader", "grant": {"read_only": true}}),
    )
    .unwrap();
    let writer = rpc(
        &two.url,
        SESSION_TOKEN,
        "actor.create",
        serde_json::json!({"name": "w", "parent": reader["actor"], "grant": {"workspace": true}}),
    )
    .unwrap_err();
    assert_eq!(writer["data"]["kind"], "read_only", "{writer}");
    let child = rpc(
        &two.url,
        SESSION_TOKEN,
        "actor.create",
        serde_json::json!({"name": "r", "parent": reader["actor"], "grant": {"read_only": true}}),
    )
    .unwrap();
    let write = rpc(
        &one.url,
        SESSION_TOKEN,
        "admit",
        serde_json::json!({"actor": child["actor"], "targets": ["a.rs"], "wait": false}),
    )
    .unwrap_err();
    assert_eq!(write["data"]["kind"], "read_only", "{write}");
    rpc(
        &one.url,
        SESSION_TOKEN,
        "lease.revoke",
        serde_json::json!({"lease": reader["lease"]}),
    )
    .unwrap();
    let dump = rpc(&one.url, SESSION_TOKEN, "dump", serde_json::json!({})).unwrap();
    assert_eq!(dump["actors"].as_array().unwrap().len(), 1, "{dump}");
    assert_eq!(dump["holds"].as_array().unwrap().len(), 1, "{dump}");
    // A dropped actor's token is unknown on every server.
    rpc(
        &two.url,
        &token,
        "actor.drop",
        serde_json::json!({ "actor": actor }),
    )
    .unwrap();
    for url in [&one.url, &two.url] {
        let refused = rpc(url, &token, "session.info", serde_json::json!({})).unwrap_err();
        assert_eq!(refused["data"]["kind"], "unauthorized", "{refused}");
    }
    // A server with another session token is refused at start.
    let state = tempfile::tempdir().unwrap();
    let other = state.path().join("token");
    std::fs::write(&other, "fedcba9876543210fedcba9876543210").unwrap();
    let started = std::process::Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("serve")
        .arg(&root)
        .args([
            "--etcd",
            &etcd.endpoint,
            "--session",
            "refusals",
            "--no-history",
        ])
        .arg("--token-file")
        .arg(&other)
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    assert!(!started.status.success());
    let said = String::from_utf8_lossy(&started.stderr);
    assert!(said.contains("another session token"), "{said}");
}

/// Three `writ serve --etcd` on one session, 32 clients of the Rust client
/// (spread over the servers in turn) asking for calls on
/// overlapping files and trees, shared and exclusive, try-only and
/// waiting, for `WRIT_ETCD_STRESS_SECS` (default 10) seconds. The oracle
/// registers each grant after it arrives and unregisters it before its
/// release, so the intervals it sees lie inside the real holds: two
/// conflicting entries at once would be a double grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_and_32_clients_never_grant_conflicting_calls() {
    let secs: u64 = std::env::var("WRIT_ETCD_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let options = writ::server::Options::new(&root).token(SESSION_TOKEN).etcd(
            [etcd.endpoint.as_str()],
            "serve-stress",
            TableOptions::default(),
        );
        servers.push(writ::server::Server::start(options).await.unwrap());
    }
    let targets: [(&str, bool); 5] = [
        ("src/a.rs", false),
        ("src/b.rs", false),
        ("docs/c.md", false),
        ("src", true),
        ("docs", true),
    ];
    // Who holds what: (client, path, tree, mode).
    type Granted = Vec<(usize, PathBuf, bool, Mode)>;
    let held: Arc<std::sync::Mutex<Granted>> = Default::default();
    let granted = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut clients = Vec::new();
    for n in 0..32usize {
        let server = &servers[n % 3];
        let session = writ::remote::Session::connect(server.url(), server.token())
            .await
            .unwrap();
        let actor = session
            .actor(format!("c{n}"), writ::Grant::workspace(&root))
            .await
            .unwrap();
        let (held, granted, root) = (held.clone(), granted.clone(), root.clone());
        clients.push(tokio::spawn(async move {
            let _session = session;
            let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1));
            while Instant::now() < until {
                let (rel, tree) = targets[dice.roll(targets.len())];
                let mode = if dice.roll(3) == 0 {
                    Mode::Exclusive
                } else {
                    Mode::Shared
                };
                let path = root.join(rel);
                let target = match (tree, mode) {
                    (true, Mode::Shared) => Target::tree(&path).shared(),
                    (true, Mode::Exclusive) => Target::tree(&path),
                    (false, Mode::Shared) => Target::file(&path).shared(),
                    (false, Mode::Exclusive) => Target::file(&path),
                };
                let asked = if dice.roll(2) == 0 {
                    actor.try_admit([target]).await
                } else {
                    actor
                        .admit_timeout([target], Duration::from_millis(300))
                        .await
                };
                let call = match asked {
                    Ok(call) => call,
                    Err(Error::Busy(_) | Error::Timeout { .. }) => continue,
                    Err(e) => panic!("c{n}: {e}"),
                };
                {
                    let mut now = held.lock().unwrap();
                    for (m, other, other_tree, other_mode) in now.iter() {
                        let overlap = other == &path
                            || (*other_tree && path.starts_with(other))
                            || (tree && other.starts_with(&path));
                        let clash = mode == Mode::Exclusive || *other_mode == Mode::Exclusive;
                        assert!(
                            !(overlap && clash),
                            "c{n} was granted {path:?} ({mode:?}) while c{m} holds {other:?} ({other_mode:?})"
                        );
                    }
                    now.push((n, path.clone(), tree, mode));
                }
                granted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::task::yield_now().await;
                held.lock().unwrap().retain(|(m, ..)| *m != n);
                call.release().await.unwrap();
            }
            actor.close().await.unwrap();
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let total = granted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(total > 32, "only {total} grants in {secs} s");
    let dump = writ::remote::Session::connect(servers[1].url(), SESSION_TOKEN)
        .await
        .unwrap()
        .dump()
        .await
        .unwrap();
    assert_eq!(dump["holds"].as_array().map(Vec::len), Some(0), "{dump}");
    assert_eq!(dump["waiters"].as_array().map(Vec::len), Some(0), "{dump}");
    println!("{total} grants in {secs} s through three servers");
    for server in servers {
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dump_shows_ages_waiter_ids_labels_and_the_wait_for_edges() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("edges").await, etcd.table("edges").await);
    let a = actor(&one, "a").await;
    let b = actor(&two, "b").await;
    let fence = one
        .admit(&a, AdmitRequest::fence(["/ws/src/"]))
        .await
        .unwrap();
    let waiting = {
        let (two, b) = (two.clone(), b.clone());
        tokio::spawn(async move {
            let asked = AdmitRequest::call(["/ws/src/x.rs"]).wait().label("edit");
            two.admit(&b, asked).await
        })
    };
    poll_until(Duration::from_secs(10), "the waiter's edge", || async {
        !one.dump().await.unwrap().table.edges.is_empty()
    })
    .await;
    let dump = one.dump().await.unwrap();
    assert_eq!(
        dump.table.edges,
        vec![writ::WaitEdge {
            from: b.id(),
            to: a.id(),
            hard: true
        }]
    );
    assert_eq!(dump.table.waiters.len(), 1);
    assert_eq!(dump.table.waiters[0].label.as_deref(), Some("edit"));
    assert!(dump.table.waiters[0].waited < Duration::from_secs(60));
    assert!(dump.table.holds[0].age < Duration::from_secs(60));
    one.release(fence.hold()).await.unwrap();
    let grant = grant_of(waiting).await;
    let dump = two.dump().await.unwrap();
    assert!(
        dump.table.edges.is_empty() && dump.table.waiters.is_empty(),
        "{dump:?}"
    );
    two.release(grant.hold()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_is_revoked_leaves_the_queue_at_once() {
    // A check period far longer than the test's patience: only the watch
    // on the actor's record can end the wait in time.
    let etcd = Etcd::start();
    let options = TableOptions::default().deadlock_check(Duration::from_secs(60));
    let one = etcd.table_with("revoked", options.clone()).await;
    let two = etcd.table_with("revoked", options).await;
    let holder = actor(&one, "holder").await;
    let first = actor(&two, "first").await;
    let held = one
        .admit(&holder, AdmitRequest::call(["/ws/x.rs"]))
        .await
        .unwrap();
    let waiting = {
        let (two, first) = (two.clone(), first.clone());
        tokio::spawn(async move {
            two.admit(&first, AdmitRequest::call(["/ws/x.rs"]).wait())
                .await
        })
    };
    poll_until(Duration::from_secs(10), "the waiter", || async {
        waiters_in(&one).await == 1
    })
    .await;
    one.revoke(first.lease()).await.unwrap();
    poll_until(
        Duration::from_secs(5),
        "the revoked waiter gone",
        || async { waiters_in(&one).await == 0 },
    )
    .await;
    match tokio::time::timeout(Duration::from_secs(5), waiting).await {
        Ok(Ok(Err(Error::UnknownActor { .. }))) => {}
        other => panic!("expected unknown_actor, got {other:?}"),
    }
    one.release(held.hold()).await.unwrap();
}

/// Slot limits through two servers: children made at once through both
/// never exceed `max_actors` (each creation is committed only if no actor
/// was created or dropped since it counted), and a server with other
/// limits than the session's does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_made_at_once_through_two_servers_never_exceed_max_actors() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let config = || writ::Config::default().max_actors(3);
    let mut servers = Vec::new();
    for _ in 0..2 {
        let options = writ::server::Options::new(&root)
            .config(config())
            .token(SESSION_TOKEN)
            .etcd([etcd.endpoint.as_str()], "slots", TableOptions::default());
        servers.push(writ::server::Server::start(options).await.unwrap());
    }
    let other = writ::server::Options::new(&root)
        .config(writ::Config::default().max_actors(4))
        .token(SESSION_TOKEN)
        .etcd([etcd.endpoint.as_str()], "slots", TableOptions::default());
    match writ::server::Server::start(other).await {
        Err(Error::Forbidden { reason }) => assert!(reason.contains("slot limits"), "{reason}"),
        other => panic!("expected forbidden, got {:?}", other.err()),
    }
    let mut sessions = Vec::new();
    for server in &servers {
        sessions.push(
            writ::remote::Session::connect(server.url(), server.token())
                .await
                .unwrap(),
        );
    }
    let lead = Arc::new(
        sessions[0]
            .actor("lead", writ::Grant::workspace(&root))
            .await
            .unwrap(),
    );
    let mut made = Vec::new();
    for n in 0..12 {
        let lead = lead.clone();
        let root = root.clone();
        made.push(tokio::spawn(async move {
            lead.child(format!("k{n}"), writ::Grant::workspace(&root))
                .await
        }));
    }
    let (mut children, mut refused) = (Vec::new(), 0);
    for task in made {
        match task.await.unwrap() {
            Ok(child) => children.push(child),
            Err(Error::NoSlot { max: 3, .. }) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!((children.len(), refused), (3, 9));
    let dump = sessions[1].dump().await.unwrap();
    assert_eq!(dump["slots"]["actors"], 3, "{dump}");
    assert_eq!(dump["slots"]["max_actors"], 3, "{dump}");
    for child in children {
        child.close().await.unwrap();
    }
    drop(sessions);
    for server in servers {
        server.shutdown().await;
    }
}

/// A slot wait across servers (SPEC §11): under `max_actors(1)` a
/// `child_wait` through server A queues while a child made through server
/// B holds the slot; `child()` through B is refused meanwhile; a second
/// `child_wait` through B queues behind the first; the drop through B
/// admits A's, and its close admits B's: freed slots go to queued child
/// waits in queue order, whichever server serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_wait_through_one_server_gets_the_slot_a_drop_through_the_other_frees() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let options = writ::server::Options::new(&root)
            .config(writ::Config::default().max_actors(1))
            .token(SESSION_TOKEN)
            .etcd(
                [etcd.endpoint.as_str()],
                "slot-wait",
                TableOptions::default(),
            );
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
    let grant = || writ::Grant::workspace(&root);
    let lead = sessions[0].actor("lead", grant()).await.unwrap();
    let other = Arc::new(sessions[1].actor("other", grant()).await.unwrap());
    let k = other.child("k", grant()).await.unwrap();
    let waiting = |session: &writ::remote::Session| {
        let session = session.clone();
        async move { session.dump().await.unwrap() }
    };
    let count = |dump: &serde_json::Value| dump["waiters"].as_array().map_or(0, Vec::len);
    let first = tokio::spawn(async move {
        let root = lead.root().to_path_buf();
        lead.child_wait("first", writ::Grant::workspace(root)).await
    });
    poll_until(Duration::from_secs(10), "A's child_wait queued", || {
        let dump = waiting(&sessions[1]);
        async move { count(&dump.await) == 1 }
    })
    .await;
    let dump = sessions[1].dump().await.unwrap();
    let queued = &dump["waiters"][0];
    assert_eq!(
        (&queued["actor"], &queued["child"], &queued["cause"]),
        (
            &serde_json::json!("lead"),
            &serde_json::json!("first"),
            &serde_json::json!({"cause": "slots"})
        ),
        "{dump}"
    );
    match other.child("late", grant()).await {
        Err(Error::NoSlot { max: 1, .. }) => {}
        made => panic!(
            "expected no_slot, got {:?}",
            made.map(|a| a.name().to_string())
        ),
    }
    let second = {
        let other = other.clone();
        let root = root.clone();
        tokio::spawn(async move {
            other
                .child_wait("second", writ::Grant::read_only(&root))
                .await
        })
    };
    poll_until(Duration::from_secs(10), "B's child_wait queued", || {
        let dump = waiting(&sessions[0]);
        async move { count(&dump.await) == 2 }
    })
    .await;
    // The drop through B frees the slot for A's child_wait, queued first.
    k.close().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("A's child_wait admitted")
        .unwrap()
        .unwrap();
    assert_eq!(first.name(), "first");
    assert!(
        !second.is_finished(),
        "B's child_wait waits for the next slot"
    );
    let dump = sessions[0].dump().await.unwrap();
    assert_eq!(dump["slots"]["actors"], 1, "{dump}");
    assert_eq!(dump["waiters"][0]["child"], "second", "{dump}");
    first.close().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("B's child_wait admitted")
        .unwrap()
        .unwrap();
    assert_eq!(second.name(), "second");
    let dump = sessions[1].dump().await.unwrap();
    assert_eq!(count(&dump), 0, "{dump}");
    // Counted as in process: k, two children made after waiting (each
    // waited once), and the refused child.
    assert_eq!(dump["counters"]["waited"], 2, "{dump}");
    assert_eq!(dump["counters"]["refused"], 1, "{dump}");
    second.close().await.unwrap();
    drop(sessions);
    for server in servers {
        server.shutdown().await;
    }
}

/// The counters as a tuple: (admitted, refused, waited, timed out,
/// deadlocks).
fn counts(c: &writ::Counters) -> (u64, u64, u64, u64, u64) {
    (c.admitted, c.refused, c.waited, c.timed_out, c.deadlocks)
}

/// Both tables' dumps show exactly `want`, read right after the event.
async fn counted(tables: [&Table; 2], want: (u64, u64, u64, u64, u64), after: &str) {
    for (n, table) in tables.iter().enumerate() {
        let dump = table.dump().await.unwrap();
        assert_eq!(
            counts(&dump.table.counters),
            want,
            "through table {n} after {after}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_are_exact_through_either_table_right_after_each_event() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("counts").await, etcd.table("counts").await);
    let both = [&one, &two];
    counted(both, (0, 0, 0, 0, 0), "nothing").await;
    // Making an actor is an admission, as in process.
    let (a, b) = (actor(&one, "a").await, actor(&two, "b").await);
    counted(both, (2, 0, 0, 0, 0), "two actors").await;
    let held = one.admit(&a, AdmitRequest::call(["/ws/x"])).await.unwrap();
    counted(both, (3, 0, 0, 0, 0), "a grant").await;
    busy_path(two.admit(&b, AdmitRequest::call(["/ws/x"])).await);
    counted(both, (3, 1, 0, 0, 0), "a try-only refusal").await;
    match two
        .admit(
            &b,
            AdmitRequest::call(["/ws/x"]).wait_timeout(Duration::from_millis(200)),
        )
        .await
    {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    counted(both, (3, 1, 1, 1, 0), "a wait that timed out").await;
    let waiting = {
        let two = two.clone();
        let b = b.clone();
        tokio::spawn(async move { two.admit(&b, AdmitRequest::call(["/ws/x"]).wait()).await })
    };
    poll_until(Duration::from_secs(5), "b queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    counted(both, (3, 1, 2, 1, 0), "a request queued").await;
    one.release(held.hold()).await.unwrap();
    let granted = grant_of(waiting).await;
    counted(both, (4, 1, 2, 1, 0), "a waiter granted").await;
    two.release(granted.hold()).await.unwrap();
    // A deadlock refused before queuing: counted, and not as a wait.
    let fa = one
        .admit(&a, AdmitRequest::fence(["/ws/a/"]))
        .await
        .unwrap();
    let fb = two
        .admit(&b, AdmitRequest::fence(["/ws/b/"]))
        .await
        .unwrap();
    let a_waits = {
        let one = one.clone();
        let a = a.clone();
        tokio::spawn(async move { one.admit(&a, AdmitRequest::call(["/ws/b/x"]).wait()).await })
    };
    poll_until(Duration::from_secs(5), "a queued", || async {
        waiters_in(&one).await == 1
    })
    .await;
    match two.admit(&b, AdmitRequest::call(["/ws/a/y"]).wait()).await {
        Err(Error::Deadlock { .. }) => {}
        other => panic!("expected Deadlock, got {other:?}"),
    }
    counted(both, (6, 1, 3, 1, 1), "a deadlock").await;
    two.release(fb.hold()).await.unwrap();
    let granted = grant_of(a_waits).await;
    counted(both, (7, 1, 3, 1, 1), "the other waiter granted").await;
    one.release(granted.hold()).await.unwrap();
    one.release(fa.hold()).await.unwrap();
    // Releases count nothing.
    counted(both, (7, 1, 3, 1, 1), "releases").await;
}

/// 16 clients on two tables at once: made together, then in each of 5
/// rounds all try one file together (one is granted, and releases only
/// after every other was refused). The clients' own tally is the oracle:
/// the counters must match it exactly, so no count is lost when two
/// admissions (or refusals) of one table count at the same moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_match_what_concurrent_clients_were_told() {
    const CLIENTS: u64 = 16;
    const ROUNDS: u64 = 5;
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("tally").await, etcd.table("tally").await);
    let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS as usize));
    let mut tasks = Vec::new();
    for n in 0..CLIENTS {
        let table = if n % 2 == 0 { one.clone() } else { two.clone() };
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let me = actor(&table, &format!("c{n}")).await;
            let (mut granted, mut refused) = (0u64, 0u64);
            for _ in 0..ROUNDS {
                barrier.wait().await;
                let got = table.admit(&me, AdmitRequest::call(["/ws/hot.rs"])).await;
                barrier.wait().await;
                match got {
                    Ok(grant) => {
                        granted += 1;
                        table.release(grant.hold()).await.unwrap();
                    }
                    Err(Error::Busy(_)) => refused += 1,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            (granted, refused)
        }));
    }
    let (mut granted, mut refused) = (0, 0);
    for task in tasks {
        let (g, r) = task.await.unwrap();
        granted += g;
        refused += r;
    }
    assert_eq!((granted, refused), (ROUNDS, ROUNDS * (CLIENTS - 1)));
    counted(
        [&one, &two],
        (CLIENTS + granted, refused, 0, 0, 0),
        "the race",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_folds_case_compares_folded_keys_and_dumps_the_spelling() {
    let etcd = Etcd::start();
    let folding = TableOptions::default().fold_case(true);
    let one = etcd.table_with("fold", folding.clone()).await;
    let two = etcd.table_with("fold", folding).await;
    let (a, b) = (actor(&one, "a").await, actor(&two, "b").await);
    let held = one
        .admit(&a, AdmitRequest::call(["/ws/Src/Lexer.RS"]))
        .await
        .unwrap();
    // Other spellings of the same key, through the other table; full case
    // folding, not only ASCII (ß folds to ss).
    busy_path(
        two.admit(&b, AdmitRequest::call(["/ws/src/lexer.rs"]))
            .await,
    );
    busy_path(
        two.admit(&b, AdmitRequest::call([Target::tree("/ws/SRC")]))
            .await,
    );
    let street = one
        .admit(&a, AdmitRequest::call(["/ws/Straße.md"]))
        .await
        .unwrap();
    busy_path(two.admit(&b, AdmitRequest::call(["/ws/STRASSE.md"])).await);
    // A different name is still free.
    let other = two
        .admit(&b, AdmitRequest::call(["/ws/src/lexer.rs.bak"]))
        .await
        .unwrap();
    let dump = two.dump().await.unwrap();
    let spelled: Vec<&Path> = dump
        .table
        .holds
        .iter()
        .map(|h| h.paths[0].path.as_path())
        .collect();
    assert_eq!(
        spelled,
        [
            Path::new("/ws/Src/Lexer.RS"),
            Path::new("/ws/Straße.md"),
            Path::new("/ws/src/lexer.rs.bak")
        ]
    );
    for grant in [held, street] {
        one.release(grant.hold()).await.unwrap();
    }
    two.release(other.hold()).await.unwrap();
    // Released under its spelling, the folded key is free again.
    let again = two
        .admit(&b, AdmitRequest::call(["/ws/SRC/LEXER.rs"]))
        .await
        .unwrap();
    two.release(again.hold()).await.unwrap();
    // A table that compares byte-exactly may not join this session.
    match Table::connect(&[etcd.endpoint.as_str()], "fold", TableOptions::default()).await {
        Err(Error::Forbidden { .. }) => {}
        other => panic!("expected Forbidden, got {other:?}"),
    }
    // Nor may a folding one join a byte-exact session.
    let _exact = etcd.table("exact").await;
    match Table::connect(
        &[etcd.endpoint.as_str()],
        "exact",
        TableOptions::default().fold_case(true),
    )
    .await
    {
        Err(Error::Forbidden { .. }) => {}
        other => panic!("expected Forbidden, got {other:?}"),
    }
}

/// Read roots through two servers: an actor made through one with a read
/// root takes shared holds there through the other, and is refused
/// exclusive ones (`policy`) through either — the roots are in its record.
#[test]
fn read_roots_are_shared_only_on_every_server() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::create_dir_all(root.join("ws")).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "read-roots", "10");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "read-roots", "10");
    let refs = root.join("refs");
    let made = rpc(
        &one.url,
        SESSION_TOKEN,
        "actor.create",
        serde_json::json!({
            "name": "a",
            "grant": {"root": "ws", "workspace": true, "read_roots": [refs]},
        }),
    )
    .unwrap();
    let actor = &made["actor"];
    let doc = refs.join("doc.md");
    let shared = rpc(
        &two.url,
        SESSION_TOKEN,
        "admit",
        serde_json::json!({"actor": actor, "targets": [{"path": doc, "shared": true}], "wait": false}),
    )
    .unwrap();
    assert_eq!(holds_on(&one.url, &doc), 1);
    for url in [&one.url, &two.url] {
        let refused = rpc(
            url,
            SESSION_TOKEN,
            "admit",
            serde_json::json!({"actor": actor, "targets": [doc], "wait": false}),
        )
        .unwrap_err();
        assert_eq!(refused["data"]["kind"], "policy", "{refused}");
        let outside = rpc(
            url,
            SESSION_TOKEN,
            "admit",
            serde_json::json!({"actor": actor, "targets": [root.join("elsewhere")], "wait": false}),
        )
        .unwrap_err();
        assert_eq!(outside["data"]["kind"], "outside_grant", "{outside}");
    }
    // Its own workspace stays writable.
    rpc(
        &two.url,
        SESSION_TOKEN,
        "admit",
        serde_json::json!({"actor": actor, "targets": ["a.rs"], "wait": false}),
    )
    .unwrap();
    rpc(
        &one.url,
        SESSION_TOKEN,
        "release",
        serde_json::json!({"hold": shared["hold"]}),
    )
    .unwrap();
    assert_eq!(holds_on(&two.url, &doc), 0);
}

/// Through a server, a fenced actor is one admission with its grant fence
/// (as in process), and a refused one is one refusal and no admission,
/// whichever server reads the dump.
#[test]
fn a_fenced_actor_counts_once_through_a_server() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::create_dir_all(root.join("src")).unwrap();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "fenced-counts", "10");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "fenced-counts", "10");
    let counters = |url: &str| {
        let dump = rpc(url, SESSION_TOKEN, "dump", serde_json::json!({})).unwrap();
        let c = &dump["counters"];
        (c["admitted"].clone(), c["refused"].clone())
    };
    let fenced =
        serde_json::json!({"name": "f", "grant": {"fenced": [{"path": "src", "tree": true}]}});
    rpc(&one.url, SESSION_TOKEN, "actor.create", fenced.clone()).unwrap();
    for url in [&one.url, &two.url] {
        assert_eq!(counters(url), (1.into(), 0.into()), "after a fenced actor");
    }
    let refused = rpc(&two.url, SESSION_TOKEN, "actor.create", fenced).unwrap_err();
    assert_eq!(refused["data"]["kind"], "busy", "{refused}");
    for url in [&one.url, &two.url] {
        assert_eq!(counters(url), (1.into(), 1.into()), "after a refused one");
    }
}

/// SPEC §13's tickets through two tables: a wait given up through the
/// table that did not serve it is never granted afterwards, and a grant
/// whose answer the caller never got is released by giving its ticket up
/// anywhere. Nothing of either ticket is left in etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_given_up_through_another_table_is_never_granted_or_is_released() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("tickets").await, etcd.table("tickets").await);
    let holder = actor(&one, "holder").await;
    let caller = actor(&one, "caller").await;
    let fence = one
        .admit(&holder, AdmitRequest::fence(["/ws/src/"]))
        .await
        .unwrap();
    // Given up while it waits, through the other table.
    let waiting = {
        let (one, caller) = (one.clone(), caller.clone());
        tokio::spawn(async move {
            let asked = AdmitRequest::call(["/ws/src/a.rs"]).wait().ticket("w-1");
            one.admit(&caller, asked).await
        })
    };
    poll_until(Duration::from_secs(10), "the wait to queue", || async {
        one.dump().await.unwrap().table.waiters.len() == 1
    })
    .await;
    assert_eq!(two.give_up(&caller, "w-1").await.unwrap(), None);
    one.release(fence.hold()).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), waiting).await {
        Ok(Ok(Err(Error::Unavailable { .. }))) => {}
        other => panic!("a wait given up must not be granted: {other:?}"),
    }
    let dump = two.dump().await.unwrap();
    assert!(
        dump.table.holds.is_empty() && dump.table.waiters.is_empty(),
        "{dump:?}"
    );
    assert_eq!(
        etcd_keys(&etcd, "tickets", "g/").await,
        Vec::<String>::new()
    );

    // Granted, and the answer lost: giving the ticket up releases it.
    let asked = AdmitRequest::call(["/ws/src/a.rs"]).ticket("w-2");
    let grant = one.admit(&caller, asked).await.unwrap();
    assert_eq!(
        etcd_keys(&etcd, "tickets", "g/").await.len(),
        1,
        "the answer lands with the grant"
    );
    assert_eq!(
        two.give_up(&caller, "w-2").await.unwrap(),
        Some(grant.hold())
    );
    assert!(two.dump().await.unwrap().table.holds.is_empty());
    assert_eq!(
        etcd_keys(&etcd, "tickets", "g/").await,
        Vec::<String>::new()
    );
    // A second give-up finds nothing to release; it cannot tell a ticket
    // answered long ago from one still to be granted, so it leaves its
    // mark, which goes with the actor's lease.
    assert_eq!(one.give_up(&caller, "w-2").await.unwrap(), None);
    let marks = etcd_keys(&etcd, "tickets", "g/").await;
    assert_eq!(marks.len(), 1);
    // A hold released by its holder takes its answer with it.
    let asked = AdmitRequest::call(["/ws/src/b.rs"]).ticket("w-3");
    let grant = two.admit(&caller, asked).await.unwrap();
    assert_eq!(etcd_keys(&etcd, "tickets", "g/").await.len(), 2);
    one.release(grant.hold()).await.unwrap();
    assert_eq!(etcd_keys(&etcd, "tickets", "g/").await, marks);
    one.revoke(caller.lease()).await.unwrap();
    assert_eq!(
        etcd_keys(&etcd, "tickets", "g/").await,
        Vec::<String>::new()
    );
}

/// SPEC §13 on etcd: tickets are bounded in length and in number per
/// actor on every path that stores one: give-ups of tickets never asked
/// with stop at the bound, through either table, and a ticket too long
/// is refused by admit and give-up alike, with nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_are_bounded_in_length_and_number_per_actor_on_etcd() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("bounds").await, etcd.table("bounds").await);
    let caller = actor(&one, "caller").await;
    let long = "t".repeat(129);
    let refused = |e: &Error| matches!(e, Error::Protocol { .. });
    let given_up = one.give_up(&caller, &long).await;
    assert!(given_up.as_ref().is_err_and(refused), "{given_up:?}");
    let asked = AdmitRequest::call(["/ws/a.rs"]).ticket(long.clone());
    let admitted = one.admit(&caller, asked).await;
    assert!(admitted.as_ref().is_err_and(refused), "{admitted:?}");
    assert!(etcd_keys(&etcd, "bounds", "g/").await.is_empty());
    let mut stopped = None;
    for i in 0..150 {
        let via = if i % 2 == 0 { &one } else { &two };
        if let Err(e) = via.give_up(&caller, &format!("never-{i}")).await {
            stopped = Some((i, e));
            break;
        }
    }
    let (at, error) = stopped.unwrap_or_else(|| panic!("150 unused tickets were stored"));
    assert_eq!(at, 64, "{error}");
    assert!(refused(&error), "{error:?}");
    assert_eq!(etcd_keys(&etcd, "bounds", "g/").await.len(), 64);
    // At the bound a new ticket is refused for an admit too; one already
    // stored may still be given up again.
    let asked = AdmitRequest::call(["/ws/b.rs"]).ticket("one-more");
    let admitted = two.admit(&caller, asked).await;
    assert!(admitted.as_ref().is_err_and(refused), "{admitted:?}");
    assert_eq!(two.give_up(&caller, "never-3").await.unwrap(), None);
    assert!(two.dump().await.unwrap().table.holds.is_empty());
}

/// SPEC §13 on etcd: the per-actor ticket bound holds under concurrency.
/// 300 give-ups of distinct tickets at once, over two tables, store at
/// most the bound: the count is checked inside the transaction that
/// stores, not before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_given_up_concurrently_through_two_tables_stay_within_the_bound() {
    let etcd = Etcd::start();
    let (one, two) = (etcd.table("racing").await, etcd.table("racing").await);
    let caller = actor(&one, "caller").await;
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let via = if i % 2 == 0 { one.clone() } else { two.clone() };
            let caller = caller.clone();
            tokio::spawn(async move { via.give_up(&caller, &format!("racing-{i}")).await })
        })
        .collect();
    let mut stored = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(None) => stored += 1,
            Ok(Some(hold)) => panic!("a ticket never asked with released {hold:?}"),
            Err(Error::Protocol { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let keys = etcd_keys(&etcd, "racing", "g/").await.len();
    assert_eq!(keys, stored, "every give-up that succeeded stored one mark");
    assert!(keys <= 64, "{keys} tickets stored past the bound of 64");
    assert_eq!(keys, 64, "the bound is reached, not undershot");

    // Admissions with tickets, 150 at once over the two tables: the
    // tickets they leave stored settle within the bound too.
    let (one, two) = (
        etcd.table("racing-admits").await,
        etcd.table("racing-admits").await,
    );
    let caller = actor(&one, "caller").await;
    let tasks: Vec<_> = (0..150)
        .map(|i| {
            let via = if i % 2 == 0 { one.clone() } else { two.clone() };
            let caller = caller.clone();
            tokio::spawn(async move {
                let asked =
                    AdmitRequest::call([format!("/ws/{i}.rs")]).ticket(format!("admit-{i}"));
                via.admit(&caller, asked).await
            })
        })
        .collect();
    let mut granted = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(grant) => granted.push(grant),
            Err(Error::Protocol { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let keys = etcd_keys(&etcd, "racing-admits", "g/").await.len();
    assert!(keys <= 64, "{keys} tickets stored past the bound of 64");
    assert_eq!(
        keys,
        granted.len(),
        "each grant kept has its ticket's answer"
    );
}

// ---- the file tools through two servers (SPEC §6–§7 across servers) ----

/// Two `writ serve --etcd` in this process on session `session` of `etcd`,
/// each with a client session of the Rust client.
async fn file_servers(
    etcd: &Etcd,
    root: &Path,
    session: &str,
) -> (Vec<writ::server::Server>, [writ::remote::Session; 2]) {
    let config = writ::Config::default().durability(writ::Durability::Process);
    file_servers_with(etcd, root, session, config).await
}

async fn file_servers_with(
    etcd: &Etcd,
    root: &Path,
    session: &str,
    config: writ::Config,
) -> (Vec<writ::server::Server>, [writ::remote::Session; 2]) {
    let mut servers = Vec::new();
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let options = writ::server::Options::new(root)
            .config(config.clone())
            .token(SESSION_TOKEN)
            .etcd([etcd.endpoint.as_str()], session, TableOptions::default());
        let server = writ::server::Server::start(options).await.unwrap();
        sessions.push(
            writ::remote::Session::connect(server.url(), server.token())
                .await
                .unwrap(),
        );
        servers.push(server);
    }
    let Ok(sessions) = <[_; 2]>::try_from(sessions) else {
        unreachable!()
    };
    (servers, sessions)
}

/// One file op of the actor `actor` (a wire handle), through `via`.
async fn file_op(
    via: &writ::remote::Session,
    method: &str,
    actor: &str,
    mut params: serde_json::Value,
) -> Result<serde_json::Value, Error> {
    params["actor"] = actor.into();
    via.call(method, params).await
}

async fn read_through(via: &writ::remote::Session, actor: &str, path: &str) -> Vec<u8> {
    let read = file_op(
        via,
        "files.read",
        actor,
        serde_json::json!({ "path": path }),
    )
    .await
    .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    read["content"].as_str().unwrap().as_bytes().to_vec()
}

async fn write_through(
    via: &writ::remote::Session,
    actor: &str,
    path: &str,
    content: &str,
) -> Result<serde_json::Value, Error> {
    let params = serde_json::json!({ "path": path, "content": content });
    file_op(via, "files.write", actor, params).await
}

fn stale_writer(result: Result<serde_json::Value, Error>) -> Option<String> {
    match result {
        Err(Error::Stale { writer, .. }) => writer,
        other => panic!("expected Stale, got {other:?}"),
    }
}

/// No call held and nothing waiting in the session (fences may stay), read
/// through each server: every file op handed its etcd hold back.
async fn nothing_held(sessions: &[writ::remote::Session; 2]) {
    for session in sessions {
        let dump = session.dump().await.unwrap();
        let calls = dump["holds"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["kind"] == "call")
            .count();
        assert!(
            calls == 0 && dump["waiters"].as_array().unwrap().is_empty(),
            "{dump:#}"
        );
    }
}

/// The keys of session `session` under `P <kind>` in etcd, read directly.
async fn etcd_keys(etcd: &Etcd, session: &str, kind: &str) -> Vec<String> {
    let mut client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
        .await
        .unwrap();
    let prefix = format!("/writ/{session}/{kind}");
    let got = client
        .get(
            prefix.as_bytes(),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    got.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// SPEC §6 across servers: a mark taken through one server gates a write
/// through the other; `Stale` names the writer who wrote through the other
/// server, `None` for a change from outside writ, and never an earlier
/// writer, whichever server checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_gate_holds_across_servers_and_names_the_writer_of_the_other() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::write(root.join("notes.md"), "one\n").unwrap();
    let (servers, [one, two]) = file_servers(&etcd, &root, "gate").await;
    let alice = one
        .actor("alice", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let bob = two
        .actor("bob", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let (alice, bob) = (alice.handle().to_string(), bob.handle().to_string());

    // Alice's mark through A; Bob reads and writes through B.
    assert!(matches!(
        write_through(&one, &alice, "notes.md", "alice\n").await,
        Err(Error::NotRead { .. })
    ));
    assert_eq!(read_through(&one, &alice, "notes.md").await, b"one\n");
    assert_eq!(read_through(&two, &bob, "notes.md").await, b"one\n");
    let params = serde_json::json!({"path": "notes.md", "old": "one", "new": "uno"});
    file_op(&two, "files.replace", &bob, params).await.unwrap();
    // Alice's write through A (and through B) is stale, naming Bob.
    for via in [&one, &two] {
        let refused = write_through(via, &alice, "notes.md", "alice\n").await;
        assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    }
    assert_eq!(std::fs::read(root.join("notes.md")).unwrap(), b"uno\n");

    // An actor's file ops may go through any server: read through B,
    // write through A.
    assert_eq!(read_through(&two, &alice, "notes.md").await, b"uno\n");
    let receipt = write_through(&one, &alice, "notes.md", "alice\n")
        .await
        .unwrap();
    assert_eq!(receipt["history"]["status"], "off", "{receipt}");
    // No write refreshes a mark: a second write needs a new read.
    assert_eq!(
        stale_writer(write_through(&two, &alice, "notes.md", "again\n").await).as_deref(),
        Some("alice")
    );

    // A change from outside writ names no writer.
    read_through(&one, &bob, "notes.md").await;
    std::fs::write(root.join("notes.md"), "by hand\n").unwrap();
    assert_eq!(
        stale_writer(write_through(&two, &bob, "notes.md", "bob\n").await),
        None
    );

    // Never an earlier writer: Bob wrote `bob\n` before Alice's mark; the
    // file changed outside writ after her read and back to Bob's content.
    read_through(&two, &bob, "notes.md").await;
    write_through(&two, &bob, "notes.md", "bob\n")
        .await
        .unwrap();
    std::fs::write(root.join("notes.md"), "outside\n").unwrap();
    read_through(&one, &alice, "notes.md").await;
    std::fs::write(root.join("notes.md"), "bob\n").unwrap();
    for via in [&one, &two] {
        let refused = write_through(via, &alice, "notes.md", "alice\n").await;
        assert_eq!(stale_writer(refused), None, "an earlier writer was named");
    }
    assert_eq!(std::fs::read(root.join("notes.md")).unwrap(), b"bob\n");

    // A ranged read through B marks the whole file: its tail is enough
    // for an append through A.
    std::fs::write(root.join("log.md"), "a\nb\nc\n").unwrap();
    let params = serde_json::json!({"path": "log.md", "lines": [2, null]});
    let tail = file_op(&two, "files.read", &alice, params).await.unwrap();
    assert_eq!(tail["content"], "c\n");
    assert_eq!(tail["mark"]["len"], 6);
    let params = serde_json::json!({"path": "log.md", "content": "d\n"});
    file_op(&one, "files.append", &alice, params).await.unwrap();
    assert_eq!(std::fs::read(root.join("log.md")).unwrap(), b"a\nb\nc\nd\n");

    // Delete and rename gate the same way across servers, and a rename's
    // destination names its writer.
    write_through(&one, &alice, "a.txt", "a\n").await.unwrap();
    write_through(&one, &alice, "b.txt", "b\n").await.unwrap();
    let rename = serde_json::json!({"from": "a.txt", "to": "b.txt"});
    assert!(matches!(
        file_op(&two, "files.rename", &bob, rename.clone()).await,
        Err(Error::NotRead { .. })
    ));
    read_through(&two, &bob, "a.txt").await;
    read_through(&one, &bob, "b.txt").await;
    read_through(&one, &alice, "b.txt").await;
    file_op(&one, "files.rename", &bob, rename).await.unwrap();
    let delete = serde_json::json!({"path": "b.txt"});
    let refused = file_op(&two, "files.delete", &alice, delete.clone()).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    read_through(&one, &alice, "b.txt").await;
    file_op(&two, "files.delete", &alice, delete).await.unwrap();
    assert!(!root.join("a.txt").exists() && !root.join("b.txt").exists());
    nothing_held(&[one, two]).await;
    for server in servers {
        assert!(server.scheduler().dump().actors.is_empty());
        server.shutdown().await;
    }
}

/// SPEC §6 on etcd: a refused append asked with `current: true` carries
/// only the tail, and the mark it stores in etcd is good for an append
/// only, through either server: a write or a delete of the file still
/// needs a read of the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_carried_only_the_tail_marks_for_appends_only_across_servers() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let lines: String = (1..=1000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(root.join("log.md"), &lines).unwrap();
    let (servers, [one, two]) = file_servers(&etcd, &root, "tail").await;
    let alice = one
        .actor("alice", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let alice = alice.handle().to_string();
    let append = serde_json::json!({"path": "log.md", "content": "alice\n", "current": true});
    assert!(matches!(
        file_op(&one, "files.append", &alice, append.clone()).await,
        Err(Error::NotRead { .. })
    ));
    for via in [&one, &two] {
        assert!(matches!(
            write_through(via, &alice, "log.md", "all mine\n").await,
            Err(Error::NotRead { .. })
        ));
        let delete = serde_json::json!({"path": "log.md"});
        assert!(matches!(
            file_op(via, "files.delete", &alice, delete).await,
            Err(Error::NotRead { .. })
        ));
    }
    assert_eq!(std::fs::read_to_string(root.join("log.md")).unwrap(), lines);
    file_op(&two, "files.append", &alice, append).await.unwrap();
    assert!(
        std::fs::read_to_string(root.join("log.md"))
            .unwrap()
            .ends_with("line 1000\nalice\n")
    );
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §13 on etcd: a refusal of the path rules (here a sensitive name)
/// is decided by the server before anything reaches etcd, and still shows
/// in that server's `writ_refusals_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_refusal_on_etcd_is_counted_by_the_server_that_refused_it() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let (servers, [one, two]) = file_servers(&etcd, &root, "policy").await;
    let bob = one
        .actor("bob", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let bob = bob.handle().to_string();
    let refused = write_through(&one, &bob, ".env", "TOKEN=1\n").await;
    assert!(matches!(refused, Err(Error::Policy { .. })), "{refused:?}");
    let url = servers[0].url().to_string();
    poll_until(
        Duration::from_secs(10),
        "the policy refusal counted",
        || {
            let url = url.clone();
            async move {
                let samples = tokio::task::spawn_blocking(move || scrape(&url))
                    .await
                    .unwrap();
                samples.get(r#"writ_refusals_total{kind="policy"}"#) == Some(&1.0)
            }
        },
    )
    .await;
    drop((one, two));
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6, anchored edits, on etcd: Alice's mark was taken through one
/// server and Bob changed the file through the other; her replace away
/// from his change and her append are applied on top of it (the version
/// her mark names is in the session's history, whichever server wrote it),
/// the receipt carrying his change and naming him, while a replace of the
/// line he touched and a whole write are still refused. With
/// `--strict-gate` every one of them is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anchored_edits_hold_across_servers_and_strict_gate_refuses_them() {
    for anchored in [true, false] {
        let etcd = Etcd::start();
        let (_dir, root) = workspace_root();
        let history = tempfile::tempdir().unwrap();
        std::fs::write(root.join("r.py"), "A = [\n    # end\n]\nB = 0\n").unwrap();
        let config = writ::Config::default()
            .durability(writ::Durability::Process)
            .history_dir(history.path())
            .anchored_edits(anchored);
        let (_servers, [one, two]) = file_servers_with(&etcd, &root, "anchored", config).await;
        let alice = one
            .actor("alice", writ::Grant::workspace(&root))
            .await
            .unwrap();
        let bob = two
            .actor("bob", writ::Grant::workspace(&root))
            .await
            .unwrap();
        let (alice, bob) = (alice.handle().to_string(), bob.handle().to_string());
        read_through(&one, &alice, "r.py").await;
        read_through(&two, &bob, "r.py").await;
        let theirs = serde_json::json!({"path": "r.py", "old": "B = 0", "new": "B = 1"});
        file_op(&two, "files.replace", &bob, theirs).await.unwrap();
        let ours = serde_json::json!({"path": "r.py", "old": "    # end\n", "new": "    \"alice\",\n    # end\n"});
        let replaced = file_op(&one, "files.replace", &alice, ours).await;
        let append = serde_json::json!({"path": "r.py", "content": "C = 1\n"});
        let appended = file_op(&two, "files.append", &alice, append).await;
        let touched = serde_json::json!({"path": "r.py", "old": "]\n", "new": ")\n"});
        let bob_line = file_op(&one, "files.replace", &alice, touched).await;
        assert!(matches!(bob_line, Err(Error::Stale { .. })), "{bob_line:?}");
        let written = write_through(&one, &alice, "r.py", "gone\n").await;
        // The last writer: Alice's own append when it landed.
        let last = if anchored { "alice" } else { "bob" };
        assert_eq!(stale_writer(written).as_deref(), Some(last));
        if anchored {
            let receipt = replaced.unwrap();
            assert_eq!(receipt["anchored"]["writer"], "bob", "{receipt}");
            let diff = receipt["anchored"]["diff"].as_str().unwrap();
            assert!(diff.contains("-B = 0\n+B = 1\n"), "{diff}");
            assert!(appended.unwrap()["anchored"].is_object());
            assert_eq!(
                std::fs::read_to_string(root.join("r.py")).unwrap(),
                "A = [\n    \"alice\",\n    # end\n]\nB = 1\nC = 1\n"
            );
        } else {
            assert_eq!(stale_writer(replaced).as_deref(), Some("bob"));
            assert_eq!(stale_writer(appended).as_deref(), Some("bob"));
            assert_eq!(
                std::fs::read_to_string(root.join("r.py")).unwrap(),
                "A = [\n    # end\n]\nB = 1\n"
            );
        }
    }
}

/// SPEC §8 on etcd: every server of a session records in the session's
/// journal (one history folder, checked when a server starts), under the
/// actor's turn kept in etcd, so a turn written through two servers is
/// rewound and redone through either; the restore's paths are reserved in
/// etcd, so a hold through the other server refuses it with nothing
/// touched; a child made after `turn.set` writes in its parent's turn; a
/// write made outside writ is recorded under the actor's call in etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_written_through_two_servers_is_rewound_through_either() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let history = tempfile::tempdir().unwrap();
    std::fs::write(root.join("a.md"), "a0\n").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .history_dir(history.path());
    let (mut servers, [one, two]) =
        file_servers_with(&etcd, &root, "journal", config.clone()).await;
    let agent = one
        .actor("agent", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let agent = agent.handle().to_string();
    let turn = serde_json::json!({"actor": agent, "turn": "t1"});
    two.call("turn.set", turn).await.unwrap();
    // Through A: a replace; through B: a new file; through A again, a
    // child made after the turn was set, rooted in a folder no actor of B
    // ever had, writes a file of its own.
    read_through(&one, &agent, "a.md").await;
    let params = serde_json::json!({"path": "a.md", "old": "a0", "new": "a1"});
    let receipt = file_op(&one, "files.replace", &agent, params)
        .await
        .unwrap();
    assert_eq!(receipt["history"]["status"], "recorded", "{receipt}");
    let receipt = write_through(&two, &agent, "b.md", "b1\n").await.unwrap();
    assert_eq!(receipt["history"]["status"], "recorded", "{receipt}");
    let child = one
        .call(
            "actor.create",
            serde_json::json!({"name": "helper", "parent": agent, "grant": {"workspace": true, "root": "sub"}}),
        )
        .await
        .unwrap();
    let child = child["actor"].as_str().unwrap().to_string();
    write_through(&one, &child, "c.md", "c1\n").await.unwrap();
    // A write made outside writ, under the agent's call held in etcd:
    // snapshotted through B, written by hand, recorded through A. Without
    // the call, the snapshot is refused as in process.
    let outside = serde_json::json!({"actor": agent, "path": "d.md"});
    let refused = two.call("history.snapshot", outside.clone()).await;
    assert!(
        matches!(&refused, Err(Error::InvalidPath { reason, .. }) if reason.contains("holds no call reservation")),
        "{refused:?}"
    );
    let params = serde_json::json!({"actor": agent, "targets": ["d.md"], "wait": false});
    let call = one.call("admit", params).await.unwrap();
    let taken = two.call("history.snapshot", outside.clone()).await.unwrap();
    assert_eq!(taken["snapshot"], true, "{taken}");
    std::fs::write(root.join("d.md"), "d1\n").unwrap();
    let receipt = one.call("history.record", outside).await.unwrap();
    assert_eq!(receipt["history"]["status"], "recorded", "{receipt}");
    one.call("release", serde_json::json!({"hold": call["hold"]}))
        .await
        .unwrap();

    // A call held through B on one of the turn's files refuses the rewind
    // through A, and nothing is touched.
    let other = two
        .actor("other", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let held = other.try_admit(["b.md"]).await.unwrap();
    let refused = one
        .call("history.rewind", serde_json::json!({"turn": "t1"}))
        .await;
    assert!(matches!(refused, Err(Error::Busy(_))), "{refused:?}");
    assert_eq!(std::fs::read(root.join("a.md")).unwrap(), b"a1\n");
    assert_eq!(std::fs::read(root.join("b.md")).unwrap(), b"b1\n");
    held.release().await.unwrap();

    // Through B: every write of the turn, whichever server served it.
    let report = two
        .call("history.rewind", serde_json::json!({"turn": "t1"}))
        .await
        .unwrap();
    assert_eq!(
        report["files"].as_array().map(Vec::len),
        Some(4),
        "{report}"
    );
    assert_eq!(std::fs::read(root.join("a.md")).unwrap(), b"a0\n");
    assert!(!root.join("b.md").exists());
    assert!(!root.join("sub/c.md").exists());
    assert!(!root.join("d.md").exists());
    // Redone through A.
    one.call("history.redo", serde_json::json!({"turn": "t1"}))
        .await
        .unwrap();
    assert_eq!(std::fs::read(root.join("a.md")).unwrap(), b"a1\n");
    assert_eq!(std::fs::read(root.join("b.md")).unwrap(), b"b1\n");
    assert_eq!(std::fs::read(root.join("sub/c.md")).unwrap(), b"c1\n");
    assert_eq!(std::fs::read(root.join("d.md")).unwrap(), b"d1\n");
    // The restores' own actors and holds are gone.
    nothing_held(&[one.clone(), two.clone()]).await;
    let dump = one.dump().await.unwrap();
    let names: Vec<&str> = dump["actors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert!(names.iter().all(|n| !n.contains("t1")), "{names:?}");

    // A server with another history folder (or none) does not join.
    let elsewhere = tempfile::tempdir().unwrap();
    let configs = [
        config.clone().history_dir(elsewhere.path()),
        writ::Config::default().durability(writ::Durability::Process),
    ];
    for config in configs {
        let options = writ::server::Options::new(&root)
            .config(config)
            .token(SESSION_TOKEN)
            .etcd([etcd.endpoint.as_str()], "journal", TableOptions::default());
        match writ::server::Server::start(options).await {
            Err(Error::Forbidden { reason }) => {
                assert!(reason.contains("history folder"), "{reason}");
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a server with another history folder joined the session"),
        }
    }
    servers.clear();
}

/// A file op's `timeout_ms` (SPEC §13) is the same on etcd as in process:
/// without it a contested write is refused `busy` at once; with it the
/// write waits in etcd's queue and runs once the path is free, released
/// through the other server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_op_with_a_timeout_waits_in_etcd_for_its_path() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let (servers, [one, two]) = file_servers(&etcd, &root, "file-wait").await;
    let holder = one
        .actor("holder", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let writer = two
        .actor("writer", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let held = holder.try_admit(["new.md"]).await.unwrap();
    let writer = writer.handle().to_string();
    assert!(matches!(
        write_through(&two, &writer, "new.md", "x\n").await,
        Err(Error::Busy(_))
    ));
    let params = serde_json::json!({"path": "new.md", "content": "waited\n", "timeout_ms": 60_000});
    let waiting = tokio::spawn({
        let two = two.clone();
        async move { file_op(&two, "files.write", &writer, params).await }
    });
    poll_until(Duration::from_secs(30), "the write to queue", || async {
        one.dump().await.unwrap()["waiters"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
    })
    .await;
    assert!(!root.join("new.md").exists());
    held.release().await.unwrap();
    let receipt = waiting.await.unwrap().unwrap();
    assert_eq!(receipt["history"]["status"], "off", "{receipt}");
    assert_eq!(std::fs::read(root.join("new.md")).unwrap(), b"waited\n");
    nothing_held(&[one, two]).await;
    drop(servers);
}

/// A read-only or fenced actor, or one rooted in a folder, cannot write
/// outside its bounds through either server, and a refused op writes
/// nothing and leaves no hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_cannot_write_outside_its_grant_through_either_server() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    for folder in ["ws", "src", "docs", "secret"] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    std::fs::write(root.join("docs/guide.md"), "guide\n").unwrap();
    std::os::unix::fs::symlink(root.join("secret"), root.join("ws/link")).unwrap();
    let (servers, [one, two]) = file_servers(&etcd, &root, "bounds").await;
    let reader = one
        .actor("reader", writ::Grant::read_only(&root))
        .await
        .unwrap();
    let fenced = two
        .actor("fenced", writ::Grant::fenced(&root, [Target::tree("src")]))
        .await
        .unwrap();
    let inner = one
        .actor("inner", writ::Grant::workspace(root.join("ws")))
        .await
        .unwrap();
    for via in [&one, &two] {
        // Read-only: reads pass, every write is `ReadOnly`.
        assert_eq!(
            read_through(via, reader.handle(), "docs/guide.md").await,
            b"guide\n"
        );
        let write = write_through(via, reader.handle(), "docs/new.md", "x").await;
        assert!(matches!(write, Err(Error::ReadOnly { .. })), "{write:?}");
        // Fenced: writes inside the grant fence only.
        let write = write_through(via, fenced.handle(), "docs/new.md", "x").await;
        assert!(
            matches!(write, Err(Error::OutsideFence { .. })),
            "{write:?}"
        );
        read_through(via, fenced.handle(), "docs/guide.md").await;
        let params = serde_json::json!({"path": "docs/guide.md"});
        let delete = file_op(via, "files.delete", fenced.handle(), params).await;
        assert!(
            matches!(delete, Err(Error::OutsideFence { .. })),
            "{delete:?}"
        );
        // Rooted in ws/: `..`, a symlink out, an absolute path elsewhere.
        for path in ["../docs/new.md", "link/new.md"] {
            let write = write_through(via, inner.handle(), path, "x").await;
            assert!(
                matches!(write, Err(Error::OutsideGrant { .. })),
                "{path}: {write:?}"
            );
        }
        let elsewhere = root.join("docs/new.md");
        let write = write_through(via, inner.handle(), elsewhere.to_str().unwrap(), "x").await;
        assert!(
            matches!(write, Err(Error::OutsideGrant { .. })),
            "{write:?}"
        );
        // A sensitive name.
        let write = write_through(via, inner.handle(), ".env", "TOKEN=x\n").await;
        assert!(matches!(write, Err(Error::Policy { .. })), "{write:?}");
    }
    for refused in ["docs/new.md", "secret/new.md", "ws/.env"] {
        assert!(!root.join(refused).exists(), "{refused} was written");
    }
    assert_eq!(
        std::fs::read(root.join("docs/guide.md")).unwrap(),
        b"guide\n"
    );
    // Inside their bounds they write.
    write_through(&one, fenced.handle(), "src/lib.rs", "fn f() {}\n")
        .await
        .unwrap();
    write_through(&two, inner.handle(), "notes.md", "n\n")
        .await
        .unwrap();
    assert!(root.join("src/lib.rs").exists() && root.join("ws/notes.md").exists());
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

/// A file op contested by a hold taken through the other server is `Busy`
/// (naming the holder) and writes nothing; a read passes a fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_op_contested_through_the_other_server_is_busy_and_writes_nothing() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::create_dir_all(root.join("locked")).unwrap();
    std::fs::write(root.join("locked/y.txt"), "y\n").unwrap();
    std::fs::write(root.join("c.txt"), "c\n").unwrap();
    let (servers, [one, two]) = file_servers(&etcd, &root, "contested").await;
    let a = one.actor("a", writ::Grant::workspace(&root)).await.unwrap();
    let o = two.actor("o", writ::Grant::workspace(&root)).await.unwrap();
    let fence = o.fence([Target::tree("locked")]).await.unwrap();
    // A read passes the fence (SPEC §3), a write does not.
    assert_eq!(read_through(&one, a.handle(), "locked/y.txt").await, b"y\n");
    for (path, content) in [("locked/x.txt", "x"), ("locked/y.txt", "mine\n")] {
        match write_through(&one, a.handle(), path, content).await {
            Err(Error::Busy(busy)) => assert_eq!(busy.holder, "o"),
            other => panic!("expected Busy, got {other:?}"),
        }
    }
    let rename = serde_json::json!({"from": "c.txt", "to": "locked/c.txt"});
    read_through(&one, a.handle(), "c.txt").await;
    let moved = file_op(&one, "files.rename", a.handle(), rename).await;
    assert!(matches!(moved, Err(Error::Busy(_))), "{moved:?}");
    assert!(!root.join("locked/x.txt").exists() && !root.join("locked/c.txt").exists());
    assert_eq!(std::fs::read(root.join("locked/y.txt")).unwrap(), b"y\n");
    assert!(root.join("c.txt").exists());
    // A write in progress (a call held through B) refuses a read too.
    let call = o.try_admit(["c.txt"]).await.unwrap();
    let read = file_op(
        &one,
        "files.read",
        a.handle(),
        serde_json::json!({"path": "c.txt"}),
    )
    .await;
    assert!(matches!(read, Err(Error::Busy(_))), "{read:?}");
    call.release().await.unwrap();
    fence.release().await.unwrap();
    write_through(&one, a.handle(), "locked/x.txt", "x")
        .await
        .unwrap();
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

/// An actor's marks are its own: dropping it (through either server)
/// deletes them, its parent's stay, and the end of the lease takes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_actors_marks_are_gone() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::write(root.join("f.txt"), "f\n").unwrap();
    let (servers, [one, two]) = file_servers(&etcd, &root, "marks").await;
    let lead = one
        .actor("lead", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let child = lead
        .child("child", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let (lead_handle, child_handle) = (lead.handle().to_string(), child.handle().to_string());
    read_through(&one, &lead_handle, "f.txt").await;
    read_through(&two, &child_handle, "f.txt").await;
    assert_eq!(etcd_keys(&etcd, "marks", "m/").await.len(), 2);
    two.call("actor.drop", serde_json::json!({"actor": child_handle}))
        .await
        .unwrap();
    let left = etcd_keys(&etcd, "marks", "m/").await;
    assert_eq!(left.len(), 1, "{left:?}");
    // The parent's mark still gates for it.
    write_through(&two, &lead_handle, "f.txt", "g\n")
        .await
        .unwrap();
    let lease = lead.lease().to_string();
    one.call("lease.revoke", serde_json::json!({"lease": lease}))
        .await
        .unwrap();
    assert!(etcd_keys(&etcd, "marks", "m/").await.is_empty());
    // Who wrote last outlives the writer (as in process).
    assert_eq!(etcd_keys(&etcd, "marks", "o").await.len(), 1);
    for server in servers {
        server.shutdown().await;
    }
}

/// With `Config::file_op_wait`, a contested file op waits in etcd's queue
/// (seen in the dump through the other server) and runs once the holder
/// through the other server lets go, writing nothing before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_file_op_wait_a_contested_op_waits_for_the_other_servers_holder() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .file_op_wait(Duration::from_secs(30));
    let (servers, [one, two]) = file_servers_with(&etcd, &root, "op-wait", config).await;
    let a = one.actor("a", writ::Grant::workspace(&root)).await.unwrap();
    let o = two.actor("o", writ::Grant::workspace(&root)).await.unwrap();
    let call = o.try_admit(["c.txt"]).await.unwrap();
    let handle = a.handle().to_string();
    let writing = {
        let one = writ::remote::Session::connect(servers[0].url(), servers[0].token())
            .await
            .unwrap();
        tokio::spawn(async move { write_through(&one, &handle, "c.txt", "c\n").await })
    };
    poll_until(
        Duration::from_secs(10),
        "the write queued in etcd",
        || async {
            let dump = two.dump().await.unwrap();
            dump["waiters"].as_array().is_some_and(|w| w.len() == 1)
        },
    )
    .await;
    assert!(!root.join("c.txt").exists());
    call.release().await.unwrap();
    let receipt = writing.await.unwrap().unwrap();
    assert_eq!(receipt["op"], "write");
    assert_eq!(std::fs::read(root.join("c.txt")).unwrap(), b"c\n");
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

/// The waiting records of `session` in etcd: each one's key and the lease
/// it hangs on.
fn waiter_leases(endpoint: &str, session: &str) -> Vec<(Vec<u8>, i64)> {
    with_etcd(endpoint, async |client| {
        let prefix = format!("/writ/{session}/q/");
        let got = client
            .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .unwrap();
        got.kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.lease()))
            .collect()
    })
}

/// Whether etcd still keeps `lease`.
fn lease_alive(endpoint: &str, lease: i64) -> bool {
    with_etcd(endpoint, async |client| {
        client
            .lease_time_to_live(lease, None)
            .await
            .is_ok_and(|answer| answer.ttl() > 0)
    })
}

/// A wait whose server dies is asked again by its ticket (`resume`)
/// through another server: it goes on there in its place in the queue,
/// ahead of a request that queued after it, past the end of the dead
/// server's queue lease; and a grant whose answer was lost is answered
/// again, the same hold.
#[test]
fn a_wait_resumed_through_another_server_keeps_its_place_and_finds_its_grant() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let mut one = ServeProcess::start_at(&etcd.endpoint, &root, "resume", "20");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "resume", "20");
    let (holder, holder_token) = root_actor(&two.url, "holder");
    let fence = fence_via(&two.url, &holder_token, &holder, "x.rs").unwrap();
    let (first, first_token) = root_actor(&two.url, "first");
    let (second, second_token) = root_actor(&two.url, "second");
    let ask = |url: &str, actor: &str, token: &str, extra: serde_json::Value| {
        let (url, token) = (url.to_string(), token.to_string());
        let mut asked =
            serde_json::json!({"actor": actor, "targets": ["x.rs"], "timeout_ms": 60_000});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            asked[k] = v;
        }
        std::thread::spawn(move || rpc(&url, &token, "admit", asked))
    };
    let first_wait = ask(
        &one.url,
        &first,
        &first_token,
        serde_json::json!({"ticket": "t1"}),
    );
    wait_until(Duration::from_secs(10), "the first waiter", || {
        waiters_through(&two.url) == 1
    });
    let second_wait = ask(&two.url, &second, &second_token, serde_json::json!({}));
    wait_until(Duration::from_secs(10), "the second waiter", || {
        waiters_through(&two.url) == 2
    });
    let before = waiter_leases(&etcd.endpoint, "resume");
    let mut leases: Vec<i64> = before.iter().map(|(_, l)| *l).collect();
    leases.sort_unstable();
    leases.dedup();
    assert_eq!(leases.len(), 2, "one queue lease per server: {before:?}");
    one.kill();
    assert!(
        first_wait.join().unwrap().is_err(),
        "a wait on a killed server cannot have been granted"
    );
    let resumed = ask(
        &two.url,
        &first,
        &first_token,
        serde_json::json!({"ticket": "t1", "resume": true}),
    );
    // The first wait moves onto server two's queue lease, its key kept;
    // server one's queue lease then ends.
    wait_until(
        Duration::from_secs(20),
        "the wait to move and the dead lease to end",
        || {
            let now = waiter_leases(&etcd.endpoint, "resume");
            let Some(&(_, kept)) = now.first() else {
                return false;
            };
            now.iter().all(|(_, lease)| *lease == kept)
                && now.iter().map(|(k, _)| k).eq(before.iter().map(|(k, _)| k))
                && leases
                    .iter()
                    .all(|&l| l == kept || !lease_alive(&etcd.endpoint, l))
        },
    );
    release_via(&two.url, &holder_token, &fence).unwrap();
    let granted = resumed
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the resumed wait was refused: {e}"));
    assert!(
        !second_wait.is_finished(),
        "the later request was granted first"
    );
    // Its answer lost, the grant is asked for again by its ticket.
    let again = rpc(
        &two.url,
        &first_token,
        "admit",
        serde_json::json!({"actor": first, "targets": ["x.rs"], "wait": false, "ticket": "t1", "resume": true}),
    )
    .unwrap();
    assert_eq!(again["hold"], granted["hold"], "{again}");
    assert_eq!(holds_on(&two.url, &root.join("x.rs")), 1);
    release_via(&two.url, &first_token, &granted).unwrap();
    let later = second_wait
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the later request was refused: {e}"));
    release_via(&two.url, &second_token, &later).unwrap();
    assert_eq!(waiters_through(&two.url), 0);
}

/// A server paused while it serves a wait, which its client then resumes
/// through another server and is granted: when the paused server goes on,
/// its side of the wait ends (`unavailable`) and leaves the grant's answer
/// alone, so the grant is still found by its ticket. (The paused server
/// once deleted that answer as if it were a give-up's mark.)
#[test]
fn a_server_that_wakes_after_its_wait_was_resumed_elsewhere_leaves_the_answer() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "resume-pause", "20");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "resume-pause", "20");
    let (holder, holder_token) = root_actor(&two.url, "holder");
    let fence = fence_via(&two.url, &holder_token, &holder, "x.rs").unwrap();
    let (waiter, token) = root_actor(&two.url, "waiter");
    let asked = serde_json::json!({"actor": waiter, "targets": ["x.rs"], "timeout_ms": 60_000, "ticket": "t1"});
    let first = {
        let (url, token, asked) = (one.url.clone(), token.clone(), asked.clone());
        std::thread::spawn(move || rpc(&url, &token, "admit", asked))
    };
    wait_until(Duration::from_secs(10), "the waiter", || {
        waiters_through(&two.url) == 1
    });
    one.signal(rustix::process::Signal::STOP);
    release_via(&two.url, &holder_token, &fence).unwrap();
    let mut again = asked.clone();
    again["resume"] = serde_json::json!(true);
    let granted = rpc(&two.url, &token, "admit", again.clone())
        .unwrap_or_else(|e| panic!("the resumed wait: {e}"));
    one.signal(rustix::process::Signal::CONT);
    let ended = first.join().unwrap();
    assert_eq!(
        ended.as_ref().err().map(|e| e["data"]["kind"].clone()),
        Some(serde_json::json!("unavailable")),
        "the paused server's side of the wait: {ended:?}"
    );
    again["wait"] = serde_json::json!(false);
    let found = rpc(&two.url, &token, "admit", again)
        .unwrap_or_else(|e| panic!("the grant asked for again by its ticket: {e}"));
    assert_eq!(found["hold"], granted["hold"]);
    release_via(&two.url, &token, &granted).unwrap();
    assert_eq!(holds_on(&two.url, &root.join("x.rs")), 0);
}

/// A waiting request watches through the etcd member its server calls;
/// when that member dies the watch breaks, and the wait reads again from
/// another member and goes on in its place, instead of ending
/// `unavailable` (which would lose its place to one member's death).
#[test]
fn a_wait_goes_on_when_the_etcd_member_it_watches_through_dies() {
    let mut cluster = Cluster::start(3);
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&cluster.endpoints(), &root, "watch-member", "20");
    let (holder, holder_token) = root_actor(&one.url, "holder");
    let fence = fence_via(&one.url, &holder_token, &holder, "x.rs").unwrap();
    let (waiter, token) = root_actor(&one.url, "waiter");
    let waiting = {
        let url = one.url.clone();
        let asked = serde_json::json!({"actor": waiter, "targets": ["x.rs"], "timeout_ms": 60_000});
        std::thread::spawn(move || rpc(&url, &token, "admit", asked))
    };
    wait_until(Duration::from_secs(10), "the waiter", || {
        waiters_through(&one.url) == 1
    });
    // The server calls the first endpoint until a call to it fails.
    cluster.kill(0);
    assert_eq!(
        waiters_through(&one.url),
        1,
        "the wait ended with the member"
    );
    release_via(&one.url, &holder_token, &fence).unwrap();
    let granted = waiting
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the wait ended with the member: {e}"));
    assert_eq!(granted["paths"][0].as_str(), root.join("x.rs").to_str());
}

/// Attack, on etcd: an actor resumes another actor's granted ticket.
/// Tickets are per actor (their answer keys and the waiter records `find`
/// matches are the owner's), so it finds nothing: its request is asked
/// afresh and meets the other's hold (`busy`); it is never handed it.
#[test]
fn an_actor_cannot_take_another_actors_grant_by_resuming_its_ticket() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let one = ServeProcess::start_at(&etcd.endpoint, &root, "resume-steal", "20");
    let (a, a_token) = root_actor(&one.url, "a");
    let (b, b_token) = root_actor(&one.url, "b");
    let ask = |actor: &str, path: &str, extra: serde_json::Value| {
        let mut asked = serde_json::json!({"actor": actor, "targets": [path], "ticket": "T1"});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            asked[k] = v;
        }
        asked
    };
    let granted = rpc(
        &one.url,
        &a_token,
        "admit",
        ask(&a, "x.rs", serde_json::json!({"wait": false})),
    )
    .unwrap();
    let stolen = rpc(
        &one.url,
        &b_token,
        "admit",
        ask(
            &b,
            "x.rs",
            serde_json::json!({"wait": false, "resume": true}),
        ),
    );
    assert_eq!(
        stolen.as_ref().err().map(|e| e["data"]["kind"].clone()),
        Some(serde_json::json!("busy")),
        "{stolen:?}"
    );
    assert_eq!(holds_on(&one.url, &root.join("x.rs")), 1);
    release_via(&one.url, &a_token, &granted).unwrap();
    assert_eq!(holds_on(&one.url, &root.join("x.rs")), 0);
}

#[path = "common/mcp_driver.rs"]
mod mcp_driver;

/// Runs an MCP driver script (the official Python SDK) off the runtime's
/// threads, while the test's servers go on serving.
async fn drive(script: serde_json::Value) -> Vec<serde_json::Value> {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_path_buf();
    tokio::task::spawn_blocking(move || mcp_driver::run(&script, &dir))
        .await
        .unwrap()
}

/// Agents on the current MCP revision (the SDK's `mcp.Client` at its
/// defaults: no session) against two servers of one session: a minted
/// handle carries the agent's reads and reservations from call to call on
/// the server that minted it, its reservation holds against a client of
/// the other server, and the other server answers the handle with a
/// sentence naming the server that holds it, never a silent new agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_handles_on_etcd_belong_to_the_server_that_minted_them() {
    use mcp_driver::{call, ok, refused};
    use serde_json::json;
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let (servers, _sessions) = file_servers(&etcd, &root, "mcp-handles").await;
    let modern = |server: &writ::server::Server| json!({"http": format!("{}/mcp", server.url()), "token": SESSION_TOKEN, "client": true});
    let script = json!({
        "agents": {"one": modern(&servers[0]), "two": modern(&servers[1])},
        "steps": [
            {"agent": "one", "tool": "read_file", "args": {"path": "a.txt"}, "protocol": true},
            {"agent": "one", "tool": "reserve", "args": {"paths": ["b/"]}, "agent_from": 0},
            call("two", "write_file", json!({"path": "b/x.txt", "content": "two\n"})),
            {"agent": "two", "tool": "write_file", "args": {"path": "a.txt", "content": "stolen\n"}, "agent_from": 0},
            {"agent": "one", "tool": "write_file", "args": {"path": "a.txt", "content": "two\n"}, "agent_from": 0},
            {"agent": "one", "tool": "release", "args": {}, "agent_from": 0},
            call("two", "write_file", json!({"path": "b/x.txt", "content": "two\n"})),
        ],
    });
    let r = drive(script).await;
    assert_eq!(r[0]["protocol"], "2026-07-28", "{}", r[0]);
    ok(&r[0]);
    let handle = r[0]["structured"]["agent"].as_str().unwrap().to_string();
    let one_url = servers[0].url().to_string();
    assert!(
        handle.ends_with(one_url.trim_start_matches("http://")),
        "{handle}"
    );
    ok(&r[1]);
    refused(&r[2], &["b/x.txt"]);
    refused(&r[3], &["another server of this session", &one_url]);
    ok(&r[4]);
    assert!(ok(&r[5]).contains("Released"), "{}", r[5]);
    ok(&r[6]);
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "two\n"
    );
    for server in servers {
        server.shutdown().await;
    }
}

/// Finding 7 of round 4: a handle that names a server no server of the
/// session registered (a forged `agent-…@evil.example:80`) is refused
/// plainly, naming no server; a handle of a registered server still names
/// it. Servers register in the session's table when they mint a handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_a_forged_handle_on_etcd_names_no_server() {
    use mcp_driver::{call, ok, refused};
    use serde_json::json;
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let (servers, _sessions) = file_servers(&etcd, &root, "mcp-forged").await;
    let modern = |server: &writ::server::Server| json!({"http": format!("{}/mcp", server.url()), "token": SESSION_TOKEN, "client": true});
    let forged = "agent-aaaaaaaaaaaaaa@evil.example:80";
    let script = json!({
        "agents": {"one": modern(&servers[0]), "two": modern(&servers[1])},
        "steps": [
            {"agent": "two", "tool": "read_file", "args": {"path": "a.txt", "agent": forged}},
            call("one", "read_file", json!({"path": "a.txt"})),
            {"agent": "two", "tool": "read_file", "args": {"path": "a.txt"}, "agent_from": 1},
        ],
    });
    let r = drive(script).await;
    let text = refused(&r[0], &["not given by any server of this session"]);
    assert!(!text.contains("evil.example"), "{text}");
    assert!(!text.contains("http://"), "{text}");
    ok(&r[1]);
    let one_url = servers[0].url().to_string();
    refused(&r[2], &["another server of this session", &one_url]);
    for server in servers {
        server.shutdown().await;
    }
}

/// `/mcp` on two servers of one session, driven by the official MCP Python
/// SDK (and one agent through `writ mcp`, the stdio bridge): agents on
/// different servers see each other's reservations and writes, the version
/// gate holds between them and names the writer, a named agent's sessions
/// share their reads, and a closed session's reservation is gone from etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_agents_on_two_servers_share_one_table() {
    use mcp_driver::{call, ok, refused};
    use serde_json::json;
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lex.rs"), "// lex\n").unwrap();
    let (servers, [one, _]) = file_servers(&etcd, &root, "mcp").await;
    let http = |server: &writ::server::Server, query: &str| json!({"http": format!("{}/mcp{query}", server.url()), "token": SESSION_TOKEN});
    let bridged = json!({"stdio": [
        env!("CARGO_BIN_EXE_writ"), "mcp", &root,
        "--url", servers[1].url(), "--token", SESSION_TOKEN,
    ]});
    let script = json!({
        "agents": {
            "alpha": http(&servers[0], ""),
            "beta": http(&servers[1], ""),
            "gamma": bridged,
            "w1": http(&servers[0], "?agent=writer"),
            "w2": http(&servers[0], "?agent=writer"),
        },
        "steps": [
            call("alpha", "reserve", json!({"paths": ["src/"], "note": "renaming the lexer"})),
            call("beta", "write_file", json!({"path": "src/lex.rs", "content": "// beta\n"})),
            call("gamma", "writ_status", json!({})),
            call("alpha", "read_file", json!({"path": "src/lex.rs"})),
            call("alpha", "write_file", json!({"path": "src/lex.rs", "content": "// alpha\n"})),
            call("alpha", "release", json!({"paths": ["src/"]})),
            call("gamma", "read_file", json!({"path": "src/lex.rs"})),
            call("gamma", "edit_file", json!({"path": "src/lex.rs", "old_string": "alpha", "new_string": "gamma"})),
            call("alpha", "write_file", json!({"path": "src/lex.rs", "content": "// alpha again\n"})),
            call("alpha", "write_file", json!({"path": "src/lex.rs", "content": "// alpha again\n"})),
            call("w1", "read_file", json!({"path": "src/lex.rs"})),
            call("w2", "append_file", json!({"path": "src/lex.rs", "content": "// writer\n"})),
            call("beta", "reserve", json!({"paths": ["docs/"]})),
            call("alpha", "write_file", json!({"path": "docs/a.md", "content": "a\n"})),
            {"agent": "beta", "close": true},
            call("alpha", "write_file", json!({"path": "docs/a.md", "content": "a\n"})),
            call("alpha", "writ_status", json!({})),
        ],
    });
    let r = drive(script).await;
    ok(&r[0]);
    // A reservation taken through one server refuses a write through the
    // other, naming who holds it; every server's status shows it.
    refused(&r[1], &["'alpha'", "src/lex.rs"]);
    let status = ok(&r[2]);
    assert!(status.contains("'alpha' reserved src/"), "{status}");
    assert!(status.contains("renaming the lexer"), "{status}");
    ok(&r[3]);
    ok(&r[4]);
    ok(&r[5]);
    ok(&r[6]);
    ok(&r[7]);
    // alpha read before gamma's edit through the other server: refused,
    // naming gamma, with the current content, which counts as a read.
    refused(&r[8], &["changed since you read it", "'gamma'", "// gamma"]);
    ok(&r[9]);
    // Two sessions of one named agent share its reads.
    ok(&r[10]);
    ok(&r[11]);
    refused(&r[13], &["'beta'"]);
    assert_eq!(r[14]["closed"], true);
    // beta's session closed through its server: its reservation is gone
    // from etcd, and a write through the other server goes through.
    ok(&r[15]);
    let status = ok(&r[16]);
    assert!(!status.contains("beta"), "{status}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/lex.rs")).unwrap(),
        "// alpha again\n// writer\n"
    );
    // Every session has ended with the driver: their actors and holds are
    // gone from etcd; the named agent lives on for `--mcp-idle`, and each
    // server's MCP root (the sessions' parent, as in process) while it runs.
    poll_until(
        Duration::from_secs(10),
        "the sessions' actors gone",
        || async {
            let dump = one.call("dump", json!({})).await.unwrap();
            let mut names: Vec<&str> = dump["actors"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|a| a["name"].as_str())
                .collect();
            names.sort_unstable();
            names == ["mcp", "mcp", "writer"] && dump["holds"].as_array().unwrap().is_empty()
        },
    )
    .await;
    // The two contested calls each waited and timed out, told who held the
    // path: counted once each, as timed out, as in process.
    let dump = one.call("dump", json!({})).await.unwrap();
    assert_eq!(dump["counters"]["timed_out"], 2, "{dump}");
    assert_eq!(dump["counters"]["refused"], 0, "{dump}");
    drop(servers);
}

#[path = "common/mcp_http_client.rs"]
mod mcp_http_client;

/// An MCP session opened with an actor's token acts as that actor on every
/// server: writes outside its grant fence are refused, other agents' writes
/// inside it are refused naming it, a reservation outside it is refused, and
/// a token no server issued opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_token_mcp_session_on_etcd_is_fenced_like_its_actor() {
    use mcp_driver::{call, ok, refused};
    use serde_json::json;
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let (servers, [one, _]) = file_servers(&etcd, &root, "mcp-fenced").await;
    let worker = one
        .actor("worker", writ::Grant::fenced(&root, ["src/"]))
        .await
        .unwrap();
    let http = |server: &writ::server::Server, token: &str| json!({"http": format!("{}/mcp", server.url()), "token": token});
    let script = json!({
        "agents": {
            "claude-code": http(&servers[1], worker.token()),
            "other": http(&servers[0], SESSION_TOKEN),
            "intruder": http(&servers[1], "a-etcd-1.not-a-secret"),
        },
        "steps": [
            call("claude-code", "write_file", json!({"path": "src/a.rs", "content": "// worker\n"})),
            call("claude-code", "write_file", json!({"path": "docs/b.md", "content": "no\n"})),
            call("claude-code", "reserve", json!({"paths": ["docs/"]})),
            call("claude-code", "writ_status", json!({})),
            call("other", "write_file", json!({"path": "src/c.rs", "content": "no\n"})),
            call("other", "write_file", json!({"path": "docs/b.md", "content": "yes\n"})),
            call("intruder", "writ_status", json!({})),
        ],
    });
    let r = drive(script).await;
    ok(&r[0]);
    refused(&r[1], &["docs/b.md"]);
    refused(&r[2], &["docs"]);
    assert!(ok(&r[3]).contains("You are 'worker'"));
    refused(&r[4], &["'worker'"]);
    ok(&r[5]);
    let error = r[6]["error"].as_str().unwrap_or_default();
    assert!(
        !error.is_empty(),
        "a forged token opened a session: {}",
        r[6]
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
        "// worker\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("docs/b.md")).unwrap(),
        "yes\n"
    );
    assert!(!root.join("src/c.rs").exists());
    // The token's actor outlives the session: the server did not drop it.
    let dump = one.call("dump", json!({})).await.unwrap();
    assert!(
        dump["actors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "worker"),
        "{dump}"
    );
    drop(servers);
}

/// A server that dies (SIGKILL) with an MCP session's reservation: the
/// session's lease is the server's to renew, so the reservation goes within
/// the TTL, and an agent on the other server that was refused writes then.
#[test]
fn an_mcp_reservation_of_a_killed_server_goes_within_the_ttl() {
    use mcp_http_client::McpHttp;
    use serde_json::json;
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let mut one = ServeProcess::start_at(&etcd.endpoint, &root, "mcp-kill", "2");
    let two = ServeProcess::start_at(&etcd.endpoint, &root, "mcp-kill", "2");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut alpha = McpHttp::new(&format!("{}/mcp", one.url), SESSION_TOKEN);
        assert!(alpha.initialize("alpha").await.status.is_success());
        let (refused, text) = alpha.call("reserve", json!({"paths": ["x.rs"]})).await;
        assert!(!refused, "{text}");
        let mut beta = McpHttp::new(&format!("{}/mcp", two.url), SESSION_TOKEN);
        assert!(beta.initialize("beta").await.status.is_success());
        let write = json!({"path": "x.rs", "content": "beta\n"});
        let (refused, text) = beta.call("write_file", write.clone()).await;
        assert!(refused && text.contains("'alpha'"), "{text}");
        // Three TTLs: the live server keeps renewing its session's lease.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let (refused, text) = beta.call("write_file", write.clone()).await;
        assert!(refused && text.contains("'alpha'"), "{text}");
        one.kill();
        let killed = Instant::now();
        // The write waits (up to the call wait) in etcd's queue and goes
        // through once the dead server's lease ends.
        let mut written = false;
        while !written {
            let (refused, text) = beta.call("write_file", write.clone()).await;
            written = !refused;
            assert!(
                written || killed.elapsed() < Duration::from_secs(10),
                "still refused 10 s after the kill: {text}"
            );
        }
        let took = killed.elapsed();
        assert!(
            took < Duration::from_secs(2) + Duration::from_millis(3_500),
            "the dead server's reservation went after {took:?}, TTL 2 s"
        );
    });
    assert_eq!(
        std::fs::read_to_string(root.join("x.rs")).unwrap(),
        "beta\n"
    );
    drop(two);
}

/// MCP sessions opened with the session token are children of their
/// server's MCP root, as in process, so the session's slot limits count
/// them whichever server they reach; a refused session leaves nothing, and
/// a session's end frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_on_etcd_count_against_the_sessions_slot_limits() {
    use mcp_http_client::{McpHttp, Reply};
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .max_actors(1);
    let (servers, [one, _]) = file_servers_with(&etcd, &root, "mcp-slots", config).await;
    let endpoint = |i: usize| format!("{}/mcp", servers[i].url());
    let opened = |reply: &Reply| reply.message().is_some_and(|m| m.get("result").is_some());
    let mut first = McpHttp::new(&endpoint(0), SESSION_TOKEN);
    assert!(opened(&first.initialize("first").await));
    // Asked by hand: a refused `initialize` opens no session to confirm.
    let second = McpHttp::new(&endpoint(1), SESSION_TOKEN);
    let refused = second
        .post(&serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": mcp_http_client::PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "second", "version": "0"},
            },
        }))
        .await;
    assert!(!opened(&refused), "{}", refused.body);
    assert!(refused.body.contains("max_actors"), "{}", refused.body);
    let children = |dump: serde_json::Value| -> Vec<String> {
        dump["actors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| !a["parent"].is_null())
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect()
    };
    let dump = one.call("dump", serde_json::json!({})).await.unwrap();
    assert_eq!(children(dump), ["first"]);
    assert_eq!(first.close().await, 200);
    // The first session's end frees its slot (its lease is revoked in a
    // task of its own): a session through the other server opens then.
    poll_until(
        Duration::from_secs(10),
        "the first session's slot",
        || async { children(one.call("dump", serde_json::json!({})).await.unwrap()).is_empty() },
    )
    .await;
    let mut third = McpHttp::new(&endpoint(1), SESSION_TOKEN);
    assert!(opened(&third.initialize("third").await));
    let (refused, text) = third
        .call(
            "write_file",
            serde_json::json!({"path": "a.md", "content": "a\n"}),
        )
        .await;
    assert!(!refused, "{text}");
    let dump = one.call("dump", serde_json::json!({})).await.unwrap();
    assert_eq!(children(dump), ["third"]);
    drop(servers);
}

/// `files.run` on a session in etcd (SPEC §17): the commit's write set is
/// admitted in etcd and judged against the actor's marks kept there, and
/// what it wrote is recorded there for every server's gate. An overwrite
/// of another agent's work the actor has not read is refused (nothing
/// applied); once the actor read it through the other server, the same
/// overwrite commits; a commit waits in etcd for a hold taken through the
/// other server; and a later write of the other agent is stale, naming the
/// run's actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_run_commits_through_the_etcd_tables_admission() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::write(root.join("list.txt"), "one\ntwo\nthree\n").unwrap();
    let hist = tempfile::tempdir().unwrap();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .history_dir(hist.path());
    let (servers, [one, two]) = file_servers_with(&etcd, &root, "run", config).await;
    let a = one.actor("a", writ::Grant::workspace(&root)).await.unwrap();
    let b = two.actor("b", writ::Grant::workspace(&root)).await.unwrap();
    let (a, b) = (a.handle().to_string(), b.handle().to_string());
    read_through(&two, &b, "list.txt").await;
    let params = serde_json::json!({"path": "list.txt", "old": "two\n", "new": "b's work\n"});
    file_op(&two, "files.replace", &b, params).await.unwrap();
    let run = |command: &str| serde_json::json!({ "command": command });
    let overwrite = run("printf 'rewritten\\n' > list.txt");
    // a has not read b's work: refused, nothing applied.
    let refused = file_op(&one, "files.run", &a, overwrite.clone())
        .await
        .unwrap();
    if refused["mode"] != "overlay" {
        eprintln!("no overlay here: {refused}");
        return;
    }
    assert_eq!(refused["committed"], false, "{refused}");
    assert_eq!(refused["conflicts"][0]["writers"][0], "b", "{refused}");
    assert_eq!(
        std::fs::read_to_string(root.join("list.txt")).unwrap(),
        "one\nb's work\nthree\n"
    );
    // a reads it through the other server: its mark is in etcd, and the
    // run through this one sees it.
    read_through(&two, &a, "list.txt").await;
    let done = file_op(&one, "files.run", &a, overwrite).await.unwrap();
    assert_eq!(done["committed"], true, "{done}");
    assert_eq!(
        std::fs::read_to_string(root.join("list.txt")).unwrap(),
        "rewritten\n"
    );
    // The run's write is in etcd: b's next write through the other server
    // is stale, naming a.
    assert_eq!(
        stale_writer(write_through(&two, &b, "list.txt", "b again\n").await).as_deref(),
        Some("a")
    );
    // A hold taken through the other server: the commit waits for it in
    // etcd, and lands once it is released.
    let holder = two.actor("o", writ::Grant::workspace(&root)).await.unwrap();
    let call = holder.try_admit(["list.txt"]).await.unwrap();
    let waiting = {
        let one = one.clone();
        let a = a.clone();
        tokio::spawn(async move {
            file_op(
                &one,
                "files.run",
                &a,
                run("sed -i s/rewritten/sed/ list.txt"),
            )
            .await
        })
    };
    let url = servers[1].url().to_string();
    tokio::task::spawn_blocking(move || {
        wait_until(
            Duration::from_secs(20),
            "the run's commit to wait in etcd",
            || waiters_through(&url) == 1,
        )
    })
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("list.txt")).unwrap(),
        "rewritten\n",
        "nothing lands while the hold is held"
    );
    call.release().await.unwrap();
    let landed = waiting.await.unwrap().unwrap();
    assert_eq!(landed["committed"], true, "{landed}");
    assert_eq!(
        std::fs::read_to_string(root.join("list.txt")).unwrap(),
        "sed\n"
    );
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

/// tests/run.rs's race cases on a session in etcd, the other agent writing
/// through the other server while the command runs: the run's writes are
/// not in the real tree until it commits (its build output is), a `sed -i`
/// of other lines merges with that edit, and a run touching two files of
/// which one conflicts applies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_run_on_etcd_merges_other_lines_and_refuses_a_conflict_whole() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let lines = "one\ntwo\nthree\nfour\n";
    for file in ["list.txt", "b.txt"] {
        std::fs::write(root.join(file), lines).unwrap();
    }
    let hist = tempfile::tempdir().unwrap();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .history_dir(hist.path());
    let (servers, [one, two]) = file_servers_with(&etcd, &root, "runrace", config).await;
    let a = one.actor("a", writ::Grant::workspace(&root)).await.unwrap();
    let b = two.actor("b", writ::Grant::workspace(&root)).await.unwrap();
    let (a, b) = (a.handle().to_string(), b.handle().to_string());
    for file in ["list.txt", "b.txt"] {
        read_through(&two, &b, file).await;
    }
    // The command stops at a handshake of two named pipes, so that b's
    // edit lands while it runs.
    let sig = tempfile::tempdir().unwrap();
    for fifo in ["ready", "go"] {
        let made = std::process::Command::new("mkfifo")
            .arg(sig.path().join(fifo))
            .status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    }
    // What the real tree shows while the command runs: `during` checks it.
    let race = |before: &str,
                during: fn(&Path),
                path: &'static str,
                old: &'static str,
                new: &'static str| {
        let command = format!(
            "{before}\necho ready > {s}/ready\nread go < {s}/go",
            s = sig.path().display()
        );
        let (one, two, a, b) = (one.clone(), two.clone(), a.clone(), b.clone());
        let sig = sig.path().to_path_buf();
        let root = root.clone();
        async move {
            let params = serde_json::json!({ "command": command });
            let run = tokio::spawn(async move { file_op(&one, "files.run", &a, params).await });
            let ready = sig.join("ready");
            tokio::task::spawn_blocking(move || std::fs::read(ready).unwrap())
                .await
                .unwrap();
            during(&root);
            let edit = serde_json::json!({ "path": path, "old": old, "new": new });
            file_op(&two, "files.replace", &b, edit).await.unwrap();
            let go = sig.join("go");
            tokio::task::spawn_blocking(move || std::fs::write(go, "go\n").unwrap())
                .await
                .unwrap();
            run.await.unwrap().unwrap()
        }
    };
    std::fs::write(root.join(".gitignore"), "/target\n").unwrap();
    let merged = race(
        "sed -i s/one/ONE/ list.txt\nmkdir -p target && echo obj > target/out.o",
        |root| {
            // The run's own write is not in the real tree until it
            // commits; its build output passes straight through.
            assert_eq!(
                std::fs::read_to_string(root.join("list.txt")).unwrap(),
                "one\ntwo\nthree\nfour\n"
            );
            assert_eq!(
                std::fs::read_to_string(root.join("target/out.o")).unwrap(),
                "obj\n"
            );
        },
        "list.txt",
        "four\n",
        "FOUR\n",
    )
    .await;
    assert_eq!(merged["mode"], "overlay", "{merged}");
    assert_eq!(merged["committed"], true, "{merged}");
    assert_eq!(merged["artifacts"][0]["merged"], true, "{merged}");
    assert_eq!(
        std::fs::read_to_string(root.join("list.txt")).unwrap(),
        "ONE\ntwo\nthree\nFOUR\n"
    );
    let refused = race(
        "sed -i s/two/TWO/ list.txt\nsed -i s/three/RUN/ b.txt",
        |_| {},
        "b.txt",
        "three\n",
        "B\n",
    )
    .await;
    assert_eq!(refused["committed"], false, "{refused}");
    assert_eq!(
        refused["conflicts"].as_array().map(Vec::len),
        Some(1),
        "{refused}"
    );
    assert_eq!(refused["conflicts"][0]["path"], "b.txt", "{refused}");
    assert_eq!(refused["conflicts"][0]["writers"][0], "b", "{refused}");
    assert_eq!(
        std::fs::read_to_string(root.join("list.txt")).unwrap(),
        "ONE\ntwo\nthree\nFOUR\n",
        "nothing of the refused run was applied"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "one\ntwo\nB\nfour\n"
    );
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

// ---- claims on hot files (SPEC §6) through two servers ----

/// Two servers on one session whose file tools claim with `ttl`; no
/// history, so a stale write is refused (not anchored) and gives a claim.
async fn claim_servers(
    etcd: &Etcd,
    root: &Path,
    session: &str,
    ttl: Duration,
) -> (Vec<writ::server::Server>, [writ::remote::Session; 2]) {
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .claim_ttl(ttl);
    file_servers_with(etcd, root, session, config).await
}

/// The claims in the session's dump read through `via`: (holder, ends_in
/// in seconds).
async fn claims_in(via: &writ::remote::Session) -> Vec<(String, f64)> {
    let dump = via.dump().await.unwrap();
    dump["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["kind"] == "claim")
        .map(|h| {
            (
                h["actor"].as_str().unwrap_or_default().to_string(),
                h["ends_in"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect()
}

/// `who` writes `content` to `path` through `via` as an agent's surface
/// does (`current`), waiting up to `wait_ms` for a busy file.
async fn agent_write(
    via: &writ::remote::Session,
    who: &str,
    path: &str,
    content: &str,
    wait_ms: u64,
) -> Result<serde_json::Value, Error> {
    let params = serde_json::json!({
        "path": path, "content": content, "current": true, "timeout_ms": wait_ms,
    });
    file_op(via, "files.write", who, params).await
}

/// Alice reads, bob writes after her read, alice's write is refused
/// `Stale`: the state every claim test starts from. Returns the handles.
async fn alice_refused(
    one: &writ::remote::Session,
    two: &writ::remote::Session,
    root: &Path,
) -> (writ::remote::Actor, writ::remote::Actor) {
    std::fs::write(root.join("hot.md"), "one\n").unwrap();
    let alice = one
        .actor("alice", writ::Grant::workspace(root))
        .await
        .unwrap();
    let bob = two
        .actor("bob", writ::Grant::workspace(root))
        .await
        .unwrap();
    read_through(one, alice.handle(), "hot.md").await;
    read_through(two, bob.handle(), "hot.md").await;
    agent_write(two, bob.handle(), "hot.md", "bob\n", 0)
        .await
        .unwrap();
    let refused = agent_write(one, alice.handle(), "hot.md", "alice\n", 0).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    (alice, bob)
}

/// SPEC §6 on etcd: a `Stale` refusal through server one gives the refused
/// agent a claim in etcd, shown in every server's dump with its end; the
/// other agent's write through server two waits its call-wait, then is
/// refused `Busy` naming the claimer, while its read passes; the claimer's
/// next write (through server two) lands and ends the claim, and the
/// other's write is judged as usual after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_refusal_claims_the_file_for_every_server_until_its_holder_writes() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(30);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claims", ttl).await;
    let (alice, bob) = alice_refused(&one, &two, &root).await;
    for via in [&one, &two] {
        let claims = claims_in(via).await;
        assert!(
            matches!(claims.as_slice(), [(who, ends)] if who == "alice" && *ends > 20.0 && *ends <= 30.0),
            "{claims:?}"
        );
    }
    read_through(&two, bob.handle(), "hot.md").await;
    let waited = Instant::now();
    let held_back = agent_write(&two, bob.handle(), "hot.md", "bob again\n", 300).await;
    let Err(e @ Error::Busy { .. }) = &held_back else {
        panic!("{held_back:?}")
    };
    assert!(e.to_string().contains("claimed by 'alice'"), "{e}");
    assert!(
        waited.elapsed() >= Duration::from_millis(300),
        "it did not wait"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("hot.md")).unwrap(),
        "bob\n"
    );
    // The refusal was alice's read: her redo lands, through the other server.
    agent_write(&two, alice.handle(), "hot.md", "alice\n", 0)
        .await
        .unwrap();
    assert!(
        claims_in(&one).await.is_empty(),
        "the claim outlived its holder's write"
    );
    let judged = agent_write(&one, bob.handle(), "hot.md", "bob again\n", 0).await;
    assert_eq!(stale_writer(judged).as_deref(), Some("alice"));
    // bob's refusal is bob's claim now, and alice is the one held back.
    let claims = claims_in(&two).await;
    assert!(
        matches!(claims.as_slice(), [(who, _)] if who == "bob"),
        "{claims:?}"
    );
    read_through(&one, alice.handle(), "hot.md").await;
    let held_back = agent_write(&one, alice.handle(), "hot.md", "x\n", 0).await;
    assert!(
        matches!(held_back, Err(Error::Busy { .. })),
        "{held_back:?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("hot.md")).unwrap(),
        "alice\n"
    );
    nothing_held(&[one, two]).await;
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6 on etcd: a claim is on a lease of its own with the claim's TTL:
/// when etcd ends it, the writer waiting on the file through the other
/// server is woken (its watch sees the keys go) and its write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_ends_at_its_ttl_and_the_writer_waiting_through_another_server_goes_on() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(2);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claim-ttl", ttl).await;
    let (alice, bob) = alice_refused(&one, &two, &root).await;
    read_through(&two, bob.handle(), "hot.md").await;
    let waiting = Instant::now();
    let landed = agent_write(&two, bob.handle(), "hot.md", "bob 2\n", 20_000).await;
    let waited = waiting.elapsed();
    landed.unwrap();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(10),
        "the write waited {waited:?} for a claim of {ttl:?}"
    );
    assert!(claims_in(&one).await.is_empty());
    assert_eq!(
        std::fs::read_to_string(root.join("hot.md")).unwrap(),
        "bob 2\n"
    );
    drop(alice);
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6 on etcd: a claim ends with its agent: dropping the claimer
/// through one server wakes the writer waiting through the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimer_dropped_through_one_server_frees_the_writer_waiting_on_the_other() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(30);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claim-drop", ttl).await;
    let (alice, bob) = alice_refused(&one, &two, &root).await;
    read_through(&two, bob.handle(), "hot.md").await;
    let writer = two.clone();
    let bob_handle = bob.handle().to_string();
    let waiting = tokio::spawn(async move {
        agent_write(&writer, &bob_handle, "hot.md", "bob 2\n", 20_000).await
    });
    // The write is queued behind the claim before the claimer goes.
    poll_until(Duration::from_secs(10), "bob's write queued", || {
        let one = one.clone();
        async move {
            let dump = one.dump().await.unwrap();
            !dump["waiters"].as_array().unwrap().is_empty()
        }
    })
    .await;
    let dropped = Instant::now();
    alice.close().await.unwrap();
    waiting.await.unwrap().unwrap();
    assert!(dropped.elapsed() < Duration::from_secs(10));
    assert!(claims_in(&one).await.is_empty());
    assert!(etcd_keys(&etcd, "claim-drop", "f/").await.is_empty());
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6 on etcd, the hooks' path: `release {hold, claim: true}` of a
/// write's call gives its actor a claim on the file in etcd, which holds
/// back another actor's write through the other server (reads pass); the
/// holder's next call there ends it when released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_released_with_claim_claims_the_file_in_etcd_until_its_next_write() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(30);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claim-hook", ttl).await;
    std::fs::write(root.join("hot.md"), "one\n").unwrap();
    let alice = one
        .actor("alice", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let bob = two
        .actor("bob", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let admit = |via: &writ::remote::Session, who: &str, target: serde_json::Value| {
        let (via, who) = (via.clone(), who.to_string());
        async move {
            let asked = serde_json::json!({"actor": who, "targets": [target], "wait": false});
            via.call("admit", asked).await
        }
    };
    let call = admit(&one, alice.handle(), "hot.md".into()).await.unwrap();
    one.call(
        "release",
        serde_json::json!({"hold": call["hold"], "claim": true}),
    )
    .await
    .unwrap();
    let claims = claims_in(&two).await;
    assert!(
        matches!(claims.as_slice(), [(who, _)] if who == "alice"),
        "{claims:?}"
    );
    let refused = admit(&two, bob.handle(), "hot.md".into()).await;
    let Err(e @ Error::Busy { .. }) = &refused else {
        panic!("{refused:?}")
    };
    assert!(e.to_string().contains("claimed by 'alice'"), "{e}");
    let read = serde_json::json!({"path": "hot.md", "shared": true});
    let reading = admit(&two, bob.handle(), read).await.unwrap();
    two.call("release", serde_json::json!({"hold": reading["hold"]}))
        .await
        .unwrap();
    // alice's next write there (a call, through the other server) ends it.
    let redo = admit(&two, alice.handle(), "hot.md".into()).await.unwrap();
    two.call("release", serde_json::json!({"hold": redo["hold"]}))
        .await
        .unwrap();
    assert!(
        claims_in(&one).await.is_empty(),
        "the redo did not end the claim"
    );
    let call = admit(&two, bob.handle(), "hot.md".into()).await.unwrap();
    two.call("release", serde_json::json!({"hold": call["hold"]}))
        .await
        .unwrap();
    for server in servers {
        server.shutdown().await;
    }
}

/// The waiters in the session's dump read through `via`, in queue order:
/// (actor, refusals).
async fn queued_in(via: &writ::remote::Session) -> Vec<(String, u64)> {
    let dump = via.dump().await.unwrap();
    dump["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["actor"].as_str().unwrap_or_default().to_string(),
                w["refusals"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// `hot.md`, and alice, bob, carol and dave made through `via`, each of
/// whom has read it.
async fn four_readers_of_a_hot_file(
    via: &writ::remote::Session,
    root: &Path,
) -> [writ::remote::Actor; 4] {
    std::fs::write(root.join("hot.md"), "one\n").unwrap();
    let mut actors = Vec::new();
    for name in ["alice", "bob", "carol", "dave"] {
        let actor = via.actor(name, writ::Grant::workspace(root)).await.unwrap();
        read_through(via, actor.handle(), "hot.md").await;
        actors.push(actor);
    }
    <[_; 4]>::try_from(actors).unwrap_or_else(|_| panic!("four"))
}

/// `who` writes `content` to `hot.md` through `via` in a task of its own,
/// waiting up to 30 s for the file.
fn write_later(
    via: &writ::remote::Session,
    who: &writ::remote::Actor,
    content: &str,
) -> tokio::task::JoinHandle<Result<serde_json::Value, Error>> {
    let (via, who, content) = (via.clone(), who.handle().to_string(), content.to_string());
    tokio::spawn(async move { agent_write(&via, &who, "hot.md", &content, 30_000).await })
}

/// SPEC §6 on etcd: writers waiting for a claimed file queue by how often
/// their writes there were refused (most first), then by age, whichever
/// server they wait through: carol, refused once (her claim lapsed),
/// queues after dave and is still ahead of him, and when alice's claim
/// ends her write lands first (dave's is then judged against hers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_queue_for_a_claimed_file_by_refusals_then_age_across_servers() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(3);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claim-queue", ttl).await;
    let [alice, bob, carol, dave] = four_readers_of_a_hot_file(&one, &root).await;
    agent_write(&two, bob.handle(), "hot.md", "bob\n", 0)
        .await
        .unwrap();
    // carol is refused once; her claim lapses unused.
    let refused = agent_write(&one, carol.handle(), "hot.md", "carol\n", 0).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    poll_until(Duration::from_secs(20), "carol's claim lapsed", || {
        let one = one.clone();
        async move { claims_in(&one).await.is_empty() }
    })
    .await;
    let refused = agent_write(&two, alice.handle(), "hot.md", "alice\n", 0).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    let dave_writes = write_later(&one, &dave, "dave\n");
    poll_until(Duration::from_secs(2), "dave queued", || {
        let two = two.clone();
        async move { queued_in(&two).await.len() == 1 }
    })
    .await;
    let carol_writes = write_later(&two, &carol, "carol\n");
    poll_until(Duration::from_secs(2), "carol queued", || {
        let one = one.clone();
        async move { queued_in(&one).await.len() == 2 }
    })
    .await;
    let order = queued_in(&one).await;
    assert_eq!(
        order,
        [("carol".to_string(), 1), ("dave".to_string(), 0)],
        "most refused first, then age"
    );
    assert!(
        !claims_in(&two).await.is_empty(),
        "alice's claim ended too early for the test"
    );
    carol_writes.await.unwrap().unwrap();
    let dave_judged = dave_writes.await.unwrap();
    assert_eq!(stale_writer(dave_judged).as_deref(), Some("carol"));
    assert_eq!(
        std::fs::read_to_string(root.join("hot.md")).unwrap(),
        "carol\n"
    );
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6's queue on etcd, as in process (`Actor::wait_call`): a write
/// told `Busy` after its wait counts as refused there, so dave, who only
/// ever waited out alice's claim, queues ahead of carol, who came first
/// but was never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_told_busy_on_a_claimed_file_queues_as_refused_across_servers() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(60);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claim-busy", ttl).await;
    let [alice, bob, carol, dave] = four_readers_of_a_hot_file(&one, &root).await;
    agent_write(&two, bob.handle(), "hot.md", "bob\n", 0)
        .await
        .unwrap();
    let refused = agent_write(&two, alice.handle(), "hot.md", "alice\n", 0).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    let busy = agent_write(&one, dave.handle(), "hot.md", "dave\n", 200).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    let carol_writes = write_later(&two, &carol, "carol\n");
    poll_until(Duration::from_secs(5), "carol queued", || {
        let one = one.clone();
        async move { queued_in(&one).await.len() == 1 }
    })
    .await;
    let dave_writes = write_later(&one, &dave, "dave\n");
    poll_until(Duration::from_secs(5), "dave queued", || {
        let two = two.clone();
        async move { queued_in(&two).await.len() == 2 }
    })
    .await;
    assert_eq!(
        queued_in(&two).await,
        [("dave".to_string(), 1), ("carol".to_string(), 0)],
        "a Busy write counts as refused: dave first"
    );
    carol_writes.abort();
    dave_writes.abort();
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6 and §4 on etcd: a claimer's wait on another claim is a hard
/// wait-for edge, so two claimers each waiting for the other's file,
/// through different servers, is a deadlock: the wait that closed the
/// cycle is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claimers_waiting_on_each_other_through_two_servers_is_a_deadlock() {
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    let ttl = Duration::from_secs(30);
    let (servers, [one, two]) = claim_servers(&etcd, &root, "claim-cycle", ttl).await;
    for file in ["f.md", "g.md"] {
        std::fs::write(root.join(file), "one\n").unwrap();
    }
    let alice = one
        .actor("alice", writ::Grant::workspace(&root))
        .await
        .unwrap();
    let bob = two
        .actor("bob", writ::Grant::workspace(&root))
        .await
        .unwrap();
    for file in ["f.md", "g.md"] {
        read_through(&one, alice.handle(), file).await;
        read_through(&two, bob.handle(), file).await;
    }
    agent_write(&two, bob.handle(), "f.md", "bob\n", 0)
        .await
        .unwrap();
    agent_write(&one, alice.handle(), "g.md", "alice\n", 0)
        .await
        .unwrap();
    // Each is refused on the file the other wrote, and claims it.
    let refused = agent_write(&one, alice.handle(), "f.md", "alice\n", 0).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("bob"));
    let refused = agent_write(&two, bob.handle(), "g.md", "bob\n", 0).await;
    assert_eq!(stale_writer(refused).as_deref(), Some("alice"));
    assert_eq!(claims_in(&one).await.len(), 2);
    let (via, who) = (one.clone(), alice.handle().to_string());
    let alice_waits =
        tokio::spawn(async move { agent_write(&via, &who, "g.md", "alice 2\n", 20_000).await });
    poll_until(Duration::from_secs(5), "alice queued", || {
        let two = two.clone();
        async move { queued_in(&two).await.len() == 1 }
    })
    .await;
    let closed = agent_write(&two, bob.handle(), "f.md", "bob 2\n", 20_000).await;
    assert!(matches!(closed, Err(Error::Deadlock { .. })), "{closed:?}");
    alice_waits.abort();
    for server in servers {
        server.shutdown().await;
    }
}

/// SPEC §6 and §14 on etcd: over MCP, the agent refused `Stale` through
/// one server claims the file in etcd (`writ_status` on the other server
/// shows it); the other agent's write through the other server waits its
/// call-wait, then is refused naming the claimer, while its read passes;
/// the claimer's retry lands and ends the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mcp_on_two_servers_the_refused_agent_claims_the_file_and_the_other_waits() {
    use mcp_http_client::McpHttp;
    use serde_json::json;
    let etcd = Etcd::start();
    let (_dir, root) = workspace_root();
    std::fs::write(root.join("plan.md"), "# Plan\n- a\n- b\n").unwrap();
    let config = writ::Config::default()
        .durability(writ::Durability::Process)
        .claim_ttl(Duration::from_secs(30));
    let mut servers = Vec::new();
    for _ in 0..2 {
        let options = writ::server::Options::new(&root)
            .config(config.clone())
            .call_wait(Duration::from_millis(300))
            .token(SESSION_TOKEN)
            .etcd(
                [etcd.endpoint.as_str()],
                "claim-mcp",
                TableOptions::default(),
            );
        servers.push(writ::server::Server::start(options).await.unwrap());
    }
    let mut alpha = McpHttp::new(&format!("{}/mcp", servers[0].url()), SESSION_TOKEN);
    assert!(alpha.initialize("alpha").await.status.is_success());
    let mut beta = McpHttp::new(&format!("{}/mcp", servers[1].url()), SESSION_TOKEN);
    assert!(beta.initialize("beta").await.status.is_success());
    let edit =
        |old: &str, new: &str| json!({"path": "plan.md", "old_string": old, "new_string": new});
    let read = json!({"path": "plan.md"});
    assert!(!alpha.call("read_file", read.clone()).await.0);
    assert!(!beta.call("read_file", read.clone()).await.0);
    let (error, text) = beta.call("edit_file", edit("- b", "- b (beta)")).await;
    assert!(!error, "{text}");
    let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
    assert!(
        error && text.contains("changed since you read it"),
        "{text}"
    );
    let (_, status) = beta.call("writ_status", json!({})).await;
    assert!(status.contains("'alpha' claimed plan.md"), "{status}");
    assert!(!beta.call("read_file", read.clone()).await.0);
    let waited = Instant::now();
    let (error, text) = beta
        .call("edit_file", edit("# Plan", "# Plan (beta)"))
        .await;
    assert!(error && text.contains("claimed by 'alpha'"), "{text}");
    assert!(
        waited.elapsed() >= Duration::from_millis(300),
        "it did not wait"
    );
    let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
    assert!(!error, "{text}");
    let session = writ::remote::Session::connect(servers[1].url(), SESSION_TOKEN)
        .await
        .unwrap();
    assert!(
        claims_in(&session).await.is_empty(),
        "the claim outlived its holder's write"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("plan.md")).unwrap(),
        "# Plan\n- a (alpha)\n- b (beta)\n"
    );
    for server in servers {
        server.shutdown().await;
    }
}
