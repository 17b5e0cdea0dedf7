//! The cost of an admission through the etcd table (SPEC §16), against the
//! in-process scheduler in the same run.
//!
//! - `admission/in_process`: `try_admit` + drop of one file on a
//!   `Scheduler` (the baseline).
//! - `admission/raw_etcd_txn_pair`: the floor of an admission and its
//!   release on etcd: one transaction with one compare and one put (the
//!   grant), then one delete (the release), with etcd's own client on the
//!   same etcd: two round trips, both Raft writes.
//! - `admission/etcd_admit_release`: `Table::admit` + `Table::release` of
//!   one file, uncontested, through a single-member etcd on loopback that
//!   the bench starts (its data folder on the temp file system): a read
//!   transaction, the commit transaction, then the release's read and
//!   delete transaction: four etcd round trips, two of them Raft writes.
//! - `admission/etcd_admit_release_deep`: the same for a key 10 components
//!   deep (more ranges read and compared).
//! - `admission/serve_admit_release`: `try_admit` + `release` of one file
//!   through `writ serve` (its in-process table) with the Rust client: two
//!   HTTP round trips on loopback.
//! - `admission/serve_etcd_admit_release`: the same through a `writ serve
//!   --etcd` on the bench's etcd: the HTTP round trips, the actor's token
//!   and record looked up in etcd, and the table's transactions.
//!
//! Throughput, `throughput_16_clients/*`: 16 clients at once, each
//! admitting and releasing its own file (no contention: what the store
//! and the servers do in parallel), one iteration being one round of all
//! 16, reported as admissions per second, for the same four backends:
//! `in_process` (16 actors of one `Scheduler`), `etcd_table` (16 actors
//! on one `Table`), `serve` and `serve_etcd` (16 clients, each with its
//! own connection, on one `writ serve` and on one `writ serve --etcd`).
//!
//! Needs `etcd` on `PATH` (`apt-get install etcd-server`).
//! `cargo bench --features etcd --bench etcd`.

use std::hint::black_box;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use futures_util::future::join_all;
use writ::etcd::{AdmitRequest, Table, TableOptions};
use writ::{Config, Grant, Scheduler};

/// The etcd process and its data folder, removed after it.
struct Etcd {
    child: Child,
    _data: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.write_all(b"GET /health HTTP/1.0\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

fn start_etcd() -> (Etcd, String) {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .arg("--name=bench")
        .arg(format!("--data-dir={}", dir.path().join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=bench={peer_url}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("this bench needs etcd: apt-get install etcd-server");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !healthy(client) {
        assert!(
            Instant::now() < deadline,
            "etcd was not healthy within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (Etcd { child, _data: dir }, client_url)
}

fn admission(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut group = c.benchmark_group("admission");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    let sched = Scheduler::new(Config::default());
    let local = sched.actor("bench", Grant::workspace(&root)).unwrap();
    let paths = local.resolve(["src/lib.rs"]).unwrap();
    group.bench_function("in_process", |b| {
        b.iter(|| drop(black_box(local.try_admit(&paths).unwrap())))
    });

    let (_etcd, endpoint) = start_etcd();
    let (table, actor) = rt.block_on(async {
        let table = Table::connect(&[endpoint.as_str()], "bench", TableOptions::default())
            .await
            .unwrap();
        let lease = table.grant_lease(Duration::from_secs(600)).await.unwrap();
        let actor = table
            .create_actor(lease, "bench", Path::new("/ws"), None)
            .await
            .unwrap();
        (table, actor)
    });
    let raw = rt.block_on(async {
        etcd_client::Client::connect([endpoint.as_str()], None)
            .await
            .unwrap()
    });
    group.bench_function("raw_etcd_txn_pair", |b| {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut raw = raw.clone();
                let start = Instant::now();
                for _ in 0..iters {
                    let key = "raw/ws/src/lib.rs";
                    let grant = Txn::new()
                        .when([Compare::version(key, CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key, "held", None)]);
                    assert!(raw.txn(grant).await.unwrap().succeeded());
                    black_box(raw.delete(key, None).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    for (name, path) in [
        ("etcd_admit_release", "/ws/src/lib.rs"),
        ("etcd_admit_release_deep", "/ws/a/b/c/d/e/f/g/h/lib.rs"),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let grant = table
                            .admit(&actor, AdmitRequest::call([path]))
                            .await
                            .unwrap();
                        table.release(black_box(grant).hold()).await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });
    }

    // The same client call through `writ serve`, in process and on etcd.
    let servers = rt.block_on(async {
        let local = writ::server::Server::start(writ::server::Options::new(&root))
            .await
            .unwrap();
        let on_etcd = writ::server::Server::start(
            writ::server::Options::new(&root)
                .token("0123456789abcdef0123456789abcdef")
                .etcd([endpoint.as_str()], "bench-serve", TableOptions::default()),
        )
        .await
        .unwrap();
        let mut actors = Vec::new();
        for server in [&local, &on_etcd] {
            let session = writ::remote::Session::connect(server.url(), server.token())
                .await
                .unwrap();
            let actor = session
                .actor("bench", Grant::workspace(&root))
                .await
                .unwrap();
            actors.push((session, actor));
        }
        (local, on_etcd, actors)
    });
    for (name, (_, actor)) in ["serve_admit_release", "serve_etcd_admit_release"]
        .into_iter()
        .zip(&servers.2)
    {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let call = actor.try_admit(["src/lib.rs"]).await.unwrap();
                        black_box(call).release().await.unwrap();
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();

    const CLIENTS: usize = 16;
    let mut group = c.benchmark_group("throughput_16_clients");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(CLIENTS as u64));
    let files: Vec<String> = (0..CLIENTS).map(|n| format!("src/f{n}.rs")).collect();
    let locals: Vec<_> = files
        .iter()
        .map(|file| {
            let actor = sched.actor("client", Grant::workspace(&root)).unwrap();
            let paths = actor.resolve([file.as_str()]).unwrap();
            (actor, paths)
        })
        .collect();
    group.bench_function("in_process", |b| {
        b.iter(|| {
            for (actor, paths) in &locals {
                drop(black_box(actor.try_admit(paths).unwrap()));
            }
        })
    });
    let table_actors = rt.block_on(async {
        let lease = table.grant_lease(Duration::from_secs(600)).await.unwrap();
        let mut actors = Vec::new();
        for n in 0..CLIENTS {
            let actor = table
                .create_actor(lease, &format!("c{n}"), Path::new("/ws"), None)
                .await
                .unwrap();
            actors.push((actor, format!("/ws/src/f{n}.rs")));
        }
        actors
    });
    group.bench_function("etcd_table", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    join_all(table_actors.iter().map(|(actor, path)| async {
                        let asked = AdmitRequest::call([path.as_str()]);
                        let grant = table.admit(actor, asked).await.unwrap();
                        table.release(black_box(grant).hold()).await.unwrap();
                    }))
                    .await;
                }
                start.elapsed()
            })
        })
    });
    for (name, server) in [("serve", &servers.0), ("serve_etcd", &servers.1)] {
        let clients = rt.block_on(async {
            let mut clients = Vec::new();
            for file in &files {
                let session = writ::remote::Session::connect(server.url(), server.token())
                    .await
                    .unwrap();
                let actor = session
                    .actor("client", Grant::workspace(&root))
                    .await
                    .unwrap();
                clients.push((session, actor, file.clone()));
            }
            clients
        });
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        join_all(clients.iter().map(|(_, actor, file)| async move {
                            let call = actor.try_admit([file.as_str()]).await.unwrap();
                            black_box(call).release().await.unwrap();
                        }))
                        .await;
                    }
                    start.elapsed()
                })
            })
        });
        rt.block_on(async { drop(clients) });
    }
    group.finish();
    rt.block_on(async {
        let (local, on_etcd, actors) = servers;
        drop(actors);
        local.shutdown().await;
        on_etcd.shutdown().await;
    });
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    admission(&mut criterion);
    criterion.final_summary();
}
