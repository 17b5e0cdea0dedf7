//! Hot files: a `Stale` refusal holds the file for the one it refused
//! (SPEC §6). A claim is a hold of kind `claim` in the one table: other
//! actors' writes wait for it, reads never do; it ends at its holder's
//! next write to the file, at its TTL, on release or with its actor; the
//! writers waiting for it queue by refusals, then age; and a claimer's
//! wait on another claim is an edge of the wait-for graph.
//!
//! The table's own invariants under claims (no two conflicting holds, no
//! lost wake-up, the wait-for edges) are checked on random sessions by the
//! state's model in `src/core/state.rs`.

use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use writ::{Actor, Config, Error, Grant, HoldKind, Scheduler, Target};

const TTL: Duration = Duration::from_secs(600);

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let root = fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    (dir, root)
}

/// Actors of the whole workspace, named so.
fn actors<const N: usize>(s: &Scheduler, root: &Path, names: [&str; N]) -> [Actor; N] {
    names.map(|name| {
        s.actor(name, Grant::workspace(root))
            .unwrap_or_else(|e| panic!("actor {name}: {e}"))
    })
}

/// Polls a future once with a no-op waker.
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

fn claims(s: &Scheduler) -> Vec<String> {
    s.dump()
        .holds
        .iter()
        .filter(|h| h.kind == HoldKind::Claim)
        .map(|h| h.actor.clone())
        .collect()
}

#[test]
fn a_claim_holds_back_other_writers_not_readers_until_its_holder_writes() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b] = actors(&s, &root, ["a", "b"]);
    let refused = a.try_admit(["hot.rs"]).unwrap();
    assert_eq!(refused.claim(TTL).len(), 1);
    drop(refused);
    assert_eq!(claims(&s), ["a"]);
    match b.try_admit(["hot.rs"]) {
        Err(Error::Busy(busy)) => {
            assert_eq!(busy.holder, "a");
            assert_eq!(busy.kind, HoldKind::Claim);
            assert!(busy.to_string().contains("is claimed by 'a'"), "{busy}");
        }
        other => panic!("b's write passed a's claim: {other:?}"),
    }
    // Reads never wait; other files are free.
    drop(
        b.request([Target::file("hot.rs").shared()])
            .try_admit()
            .unwrap(),
    );
    drop(b.try_admit(["cold.rs"]).unwrap());
    // The claimer's own write passes, and ends the claim once it is done.
    let write = a.try_admit(["hot.rs"]).unwrap();
    assert_eq!(claims(&s), ["a"]);
    drop(write);
    assert!(claims(&s).is_empty());
    drop(b.try_admit(["hot.rs"]).unwrap());
    s.assert_invariants();
    assert!(s.dump().is_idle());
}

/// Reads never wait for a claim, not even through the writers queued
/// behind it: those cannot go before the claim ends, so a read passes
/// them (as the fence owner's line passes the waiters its fence blocks).
/// Otherwise every read of a hot file waits out the claimer's model turn
/// and, behind a few claims in a row, is told `Busy`.
#[test]
fn a_read_passes_the_writers_queued_behind_a_claim() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b, c, d] = actors(&s, &root, ["a", "b", "c", "d"]);
    // a's write is live; b's write and then c's read queue behind it.
    let refused = a.try_admit(["hot.rs"]).unwrap();
    let mut b_waits = Box::pin(b.request(["hot.rs"]).admit());
    assert!(poll_once(b_waits.as_mut()).is_pending());
    let mut c_reads = Box::pin(c.request([Target::file("hot.rs").shared()]).admit());
    assert!(poll_once(c_reads.as_mut()).is_pending());
    // a's write is refused and claims the file: b waits on, c reads.
    refused.claim(TTL);
    drop(refused);
    assert!(poll_once(b_waits.as_mut()).is_pending());
    let Poll::Ready(Ok(c_read)) = poll_once(c_reads.as_mut()) else {
        panic!("a read queued behind a writer waited for the claim");
    };
    // A read that comes later passes b too; a write does not.
    let d_read = d
        .request([Target::file("hot.rs").shared()])
        .try_admit()
        .unwrap_or_else(|e| panic!("a read waited behind a claim's queue: {e}"));
    match d.try_admit(["hot.rs"]) {
        Err(Error::Busy(busy)) => assert_eq!(busy.holder, "a"),
        other => panic!("d's write passed a's claim: {:?}", other.map(|_| ())),
    }
    drop((c_read, d_read));
    s.assert_invariants();
    // a writes: its claim ends, and b goes.
    drop(a.try_admit(["hot.rs"]).unwrap());
    let Poll::Ready(Ok(b_write)) = poll_once(b_waits.as_mut()) else {
        panic!("b did not go once the claim ended");
    };
    // b's write is live: a read waits for it, as for any write.
    assert!(matches!(
        d.request([Target::file("hot.rs").shared()]).try_admit(),
        Err(Error::Busy(_))
    ));
    drop(b_write);
    s.assert_invariants();
    assert!(s.dump().is_idle());
}

#[test]
fn a_write_refused_again_renews_the_claim_instead_of_ending_it() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b] = actors(&s, &root, ["a", "b"]);
    let first = a.try_admit(["hot.rs"]).unwrap();
    let old = first.claim(TTL);
    drop(first);
    let again = a.try_admit(["hot.rs"]).unwrap();
    let new = again.claim(TTL);
    drop(again);
    assert_ne!(old, new);
    assert_eq!(claims(&s), ["a"], "one claim, the new one");
    assert!(b.try_admit(["hot.rs"]).is_err());
    s.assert_invariants();
}

#[test]
fn a_claimer_that_dies_frees_the_file_for_the_writer_waiting() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b] = actors(&s, &root, ["a", "b"]);
    let refused = a.try_admit(["hot.rs"]).unwrap();
    refused.claim(TTL);
    drop(refused);
    let mut waiting = Box::pin(b.admit(["hot.rs"]));
    assert!(poll_once(waiting.as_mut()).is_pending());
    drop(a);
    match poll_once(waiting.as_mut()) {
        Poll::Ready(Ok(call)) => drop(call),
        other => panic!(
            "b still waits for a dead claimer: {:?}",
            other.map(|r| r.err())
        ),
    }
    assert!(s.dump().is_idle());
    s.assert_invariants();
}

#[test]
fn a_claim_that_expires_while_its_holder_writes_leaves_the_write_alone() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b] = actors(&s, &root, ["a", "b"]);
    let refused = a.try_admit(["hot.rs"]).unwrap();
    refused.claim(Duration::from_nanos(1));
    drop(refused);
    // The holder's write is admitted (its claim, or nothing, in the way)...
    let write = a.try_admit(["hot.rs"]).unwrap();
    let mut waiting = Box::pin(b.admit(["hot.rs"]));
    assert!(poll_once(waiting.as_mut()).is_pending());
    // ...the claim's time runs out meanwhile: b still waits for the write.
    s.expire_claims();
    assert!(claims(&s).is_empty());
    assert!(poll_once(waiting.as_mut()).is_pending());
    s.assert_invariants();
    drop(write);
    match poll_once(waiting.as_mut()) {
        Poll::Ready(Ok(call)) => drop(call),
        other => panic!("b was not admitted: {:?}", other.map(|r| r.err())),
    }
    assert!(s.dump().is_idle());
}

#[test]
fn a_claim_ends_at_its_ttl_and_the_writer_waiting_goes_on() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b] = actors(&s, &root, ["a", "b"]);
    let refused = a.try_admit(["hot.rs"]).unwrap();
    refused.claim(Duration::from_millis(200));
    drop(refused);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        // No one writes and no one calls: the scheduler ends it itself.
        let call = tokio::time::timeout(Duration::from_secs(20), b.admit(["hot.rs"]))
            .await
            .unwrap_or_else(|_| panic!("the claim never ended"))
            .unwrap_or_else(|e| panic!("{e}"));
        drop(call);
    });
    assert!(s.dump().is_idle());
}

#[test]
fn two_claimers_waiting_on_each_other_is_a_deadlock() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b] = actors(&s, &root, ["a", "b"]);
    let ca = a.try_admit(["f.rs"]).unwrap();
    ca.claim(TTL);
    drop(ca);
    let cb = b.try_admit(["g.rs"]).unwrap();
    cb.claim(TTL);
    drop(cb);
    // a waits for b's claim on g.rs: an edge a -> b.
    let mut a_waits = Box::pin(a.admit(["g.rs"]));
    assert!(poll_once(a_waits.as_mut()).is_pending());
    assert!(
        s.dump()
            .edges
            .iter()
            .any(|e| e.from == a.id() && e.to == b.id() && e.hard),
        "{:?}",
        s.dump().edges
    );
    // b waiting for a's claim on f.rs would close the cycle: refused.
    let mut b_waits = Box::pin(b.admit(["f.rs"]));
    match poll_once(b_waits.as_mut()) {
        Poll::Ready(Err(Error::Deadlock { cycle })) => {
            let mut names = cycle.clone();
            names.sort();
            assert_eq!(names, ["a", "b"], "{cycle:?}");
        }
        other => panic!("expected a deadlock, got {:?}", other.map(|r| r.err())),
    }
    s.assert_invariants();
}

#[test]
fn writers_queue_for_a_claimed_file_by_refusals_then_age() {
    let (_dir, root) = workspace();
    let s = Scheduler::new(Config::default());
    let [a, b, c, d] = actors(&s, &root, ["a", "b", "c", "d"]);
    let refused = a.try_admit(["hot.rs"]).unwrap();
    refused.claim(TTL);
    drop(refused);
    let mut b_waits = Box::pin(b.request(["hot.rs"]).refusals(1).admit());
    let mut c_waits = Box::pin(c.request(["hot.rs"]).refusals(3).admit());
    let mut d_waits = Box::pin(d.request(["hot.rs"]).refusals(1).admit());
    for w in [&mut b_waits, &mut c_waits, &mut d_waits] {
        assert!(poll_once(w.as_mut()).is_pending());
    }
    let order: Vec<String> = s.dump().waiters.iter().map(|w| w.actor.clone()).collect();
    assert_eq!(order, ["c", "b", "d"], "most refused first, then age");
    // a writes: its claim ends, and the most refused writer goes first.
    drop(a.try_admit(["hot.rs"]).unwrap());
    let Poll::Ready(Ok(first)) = poll_once(c_waits.as_mut()) else {
        panic!("c (3 refusals) was not first");
    };
    assert!(poll_once(b_waits.as_mut()).is_pending());
    drop(first);
    let Poll::Ready(Ok(second)) = poll_once(b_waits.as_mut()) else {
        panic!("b (1 refusal, older) was not next");
    };
    assert!(poll_once(d_waits.as_mut()).is_pending());
    drop(second);
    assert!(matches!(poll_once(d_waits.as_mut()), Poll::Ready(Ok(_))));
}

/// The file tools: a write refused `Stale` on a claiming handle claims
/// the file inside its own call; a plain handle, a `NotRead` refusal and
/// `claim_ttl(0)` claim nothing.
#[test]
fn a_stale_refusal_of_the_agent_tools_claims_the_file() {
    for (ttl, claiming, claimed) in [
        (TTL, true, true),
        (TTL, false, false),
        (Duration::ZERO, true, false),
    ] {
        let (_dir, root) = workspace();
        fs::write(root.join("hot.md"), "one\n").unwrap_or_else(|e| panic!("{e}"));
        let s = Scheduler::new(Config::default().anchored_edits(false).claim_ttl(ttl));
        let [a, b, c] = actors(&s, &root, ["a", "b", "c"]);
        // Never read: NotRead claims nothing.
        assert!(matches!(
            c.files().claiming().write("hot.md", "c\n"),
            Err(Error::NotRead { .. })
        ));
        assert!(claims(&s).is_empty());
        a.files().read("hot.md").unwrap();
        b.files().read("hot.md").unwrap();
        b.files().write("hot.md", "two\n").unwrap();
        let files = if claiming {
            a.files().claiming()
        } else {
            a.files()
        };
        assert!(matches!(
            files.write("hot.md", "three\n"),
            Err(Error::Stale { .. })
        ));
        assert_eq!(
            !claims(&s).is_empty(),
            claimed,
            "ttl {ttl:?}, claiming {claiming}"
        );
        b.files().read("hot.md").unwrap();
        let second = b.files().write("hot.md", "four\n");
        assert_eq!(
            matches!(&second, Err(Error::Busy(busy)) if busy.holder == "a"),
            claimed,
            "{second:?}"
        );
        if claimed {
            // a redoes its change on what it now reads: it lands, the
            // claim ends, and b's write is judged as usual.
            a.files().read("hot.md").unwrap();
            a.files().claiming().write("hot.md", "three\n").unwrap();
            assert!(claims(&s).is_empty());
            assert!(matches!(
                b.files().write("hot.md", "four\n"),
                Err(Error::Stale { .. })
            ));
        }
        s.assert_invariants();
    }
}

#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[path = "common/mcp_http_client.rs"]
mod http_client;

/// Two agents over MCP: the one refused `Stale` gets a claim (shown by
/// `writ_status` and the dump); the other's write waits the call-wait, then
/// is refused `Busy` naming the claimer, while its read passes; the
/// claimer's retry lands, and the other's write is judged as usual after.
#[cfg(all(feature = "mcp", feature = "server", feature = "remote"))]
#[test]
fn over_mcp_the_refused_agent_claims_the_file_and_the_other_waits() {
    use serde_json::json;
    use writ::server::{Options, Server};

    let (_dir, root) = workspace();
    fs::write(root.join("plan.md"), "# Plan\n- a\n- b\n").unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async {
        // No history: a stale edit cannot be anchored, so it is refused.
        let config = Config::default()
            .durability(writ::Durability::Process)
            .claim_ttl(TTL);
        let server = Server::start(
            Options::new(&root)
                .config(config)
                .call_wait(Duration::from_millis(300))
                .lease_ttl(Duration::from_secs(30)),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        let url = format!("{}/mcp", server.url());
        let mut agents = Vec::new();
        for name in ["alpha", "beta"] {
            let mut client =
                http_client::McpHttp::new(&url, server.token()).with_header("Writ-Agent", name);
            assert_eq!(client.initialize(name).await.status, 200);
            agents.push(client);
        }
        let [mut alpha, mut beta] = <[_; 2]>::try_from(agents).unwrap_or_else(|_| panic!("two"));
        let edit =
            |old: &str, new: &str| json!({"path": "plan.md", "old_string": old, "new_string": new});
        let read = json!({"path": "plan.md"});

        assert!(!alpha.call("read_file", read.clone()).await.0);
        assert!(!beta.call("read_file", read.clone()).await.0);
        let (error, text) = beta.call("edit_file", edit("- b", "- b (beta)")).await;
        assert!(!error, "{text}");
        // alpha is refused: the refusal carries the content and claims the file.
        let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
        assert!(
            error && text.contains("changed since you read it"),
            "{text}"
        );
        let dump = server.scheduler().dump();
        let claim = dump.holds.iter().find(|h| h.kind == HoldKind::Claim);
        assert_eq!(claim.map(|h| h.actor.as_str()), Some("alpha"), "{dump}");
        let (_, status) = beta.call("writ_status", json!({})).await;
        assert!(status.contains("'alpha' claimed plan.md"), "{status}");
        // beta reads freely, but its write waits, then names the claimer.
        assert!(!beta.call("read_file", read.clone()).await.0);
        let waited = std::time::Instant::now();
        let (error, text) = beta
            .call("edit_file", edit("# Plan", "# Plan (beta)"))
            .await;
        assert!(error && text.contains("claimed by 'alpha'"), "{text}");
        assert!(
            waited.elapsed() >= Duration::from_millis(300),
            "it did not wait"
        );
        // alpha's retry lands and ends the claim.
        let (error, text) = alpha.call("edit_file", edit("- a", "- a (alpha)")).await;
        assert!(!error, "{text}");
        assert!(
            server
                .scheduler()
                .dump()
                .holds
                .iter()
                .all(|h| h.kind != HoldKind::Claim),
            "the claim outlived its holder's write"
        );
        // beta's write is judged as usual: stale, now beta's claim.
        let (error, text) = beta
            .call("edit_file", edit("# Plan", "# Plan (beta)"))
            .await;
        assert!(error && text.contains("'alpha'"), "{text}");
        let (error, text) = beta
            .call("edit_file", edit("# Plan", "# Plan (beta)"))
            .await;
        assert!(!error, "{text}");
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(root.join("plan.md")).unwrap_or_default(),
        "# Plan (beta)\n- a (alpha)\n- b (beta)\n"
    );
}
