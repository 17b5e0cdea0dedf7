//! Attacks on the folder tools (SPEC §8 folder operations, §13 `.writ/`),
//! each performed over HTTP against a real server and asserted to fail:
//! stealing the session token by moving `.writ/` away, reading or listing
//! it, escaping the root through a folder swapped for a symlink while a
//! folder tool runs, sizes of files outside the root, and paths too long
//! to name again.

#![cfg(all(feature = "mcp", feature = "server"))]

#[path = "common/mcp_http_client.rs"]
mod http_client;
#[path = "common/scratch.rs"]
mod scratch;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_client::McpHttp;
use scratch::{runtime, workspace};
use serde_json::{Value, json};
use writ::server::{Options, Server};

async fn start(root: &Path) -> Server {
    let config = writ::Config::default().durability(writ::Durability::Process);
    Server::start(
        Options::new(root)
            .config(config)
            .discovery_file(root.join(".writ").join("serve.json"))
            .call_wait(Duration::from_millis(200))
            .lease_ttl(Duration::from_secs(30)),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

/// A workspace actor's token, made with the session token (an agent gets
/// one of these, never the session token).
async fn actor_token(server: &Server, name: &str) -> String {
    let rpc = McpHttp::new(&format!("{}/rpc", server.url()), server.token());
    let reply = rpc
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "actor.create",
            "params": {"name": name, "grant": {"workspace": true}}}))
        .await;
    let message: Value = serde_json::from_str(&reply.body)
        .unwrap_or_else(|e| panic!("actor.create: {e}: {}", reply.body));
    message["result"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("actor.create: {message}"))
        .to_string()
}

/// An MCP session with the reference filesystem tool set.
async fn filesystem_agent(server: &Server, token: &str) -> McpHttp {
    let mut agent = McpHttp::new(&format!("{}/mcp?tools=filesystem", server.url()), token);
    let reply = agent.initialize("attacker").await;
    assert!(reply.status.is_success(), "{} {}", reply.status, reply.body);
    agent
}

/// An MCP session with writ's own tool set.
async fn writ_agent(server: &Server, token: &str) -> McpHttp {
    let mut agent = McpHttp::new(&format!("{}/mcp", server.url()), token);
    let reply = agent.initialize("attacker").await;
    assert!(reply.status.is_success(), "{} {}", reply.status, reply.body);
    agent
}

fn p(root: &Path, rel: &str) -> String {
    root.join(rel).display().to_string()
}

#[test]
fn moving_the_discovery_folder_away_is_refused_and_the_token_stays_unread() {
    let (_dir, root) = workspace();
    fs::create_dir_all(root.join("sub/.writ")).unwrap();
    fs::write(root.join("sub/.writ/serve.json"), "{\"token\": \"nested\"}").unwrap();
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        assert!(root.join(".writ/serve.json").exists());
        let actor = actor_token(&server, "agent").await;
        for bearer in [&token, &actor] {
            let mut agent = filesystem_agent(&server, bearer).await;
            let (err, text) = agent
                .call(
                    "move_file",
                    json!({"source": p(&root, ".writ"), "destination": p(&root, "notes")}),
                )
                .await;
            assert!(err, "moving .writ away: {text}");
            // A folder that contains a `.writ` carries it with it: refused too.
            let (err, text) = agent
                .call(
                    "move_file",
                    json!({"source": p(&root, "sub"), "destination": p(&root, "moved")}),
                )
                .await;
            assert!(err && text.contains(".writ"), "moving its parent: {text}");
            // Moving a folder into `.writ/` is refused.
            fs::create_dir_all(root.join("plain")).unwrap();
            let (err, text) = agent
                .call(
                    "move_file",
                    json!({"source": p(&root, "plain"), "destination": p(&root, ".writ/hooks")}),
                )
                .await;
            assert!(err, "moving into .writ: {text}");
            let (err, text) = agent
                .call("create_directory", json!({"path": p(&root, ".writ/x")}))
                .await;
            assert!(err, "creating in .writ: {text}");
            let (err, text) = agent
                .call(
                    "read_text_file",
                    json!({"path": p(&root, ".writ/serve.json")}),
                )
                .await;
            assert!(err && !text.contains(&token), "reading the token: {text}");
        }
        assert!(!root.join("notes").exists());
        assert!(!root.join("moved").exists());
        assert!(root.join("sub/.writ/serve.json").exists());
        assert!(!root.join(".writ/hooks").exists());
        assert!(!root.join(".writ/x").exists());
        assert!(root.join(".writ/serve.json").exists());
        server.shutdown().await;
    });
}

#[test]
fn no_listing_tool_shows_what_is_in_the_discovery_folder() {
    let (_dir, root) = workspace();
    fs::write(root.join("a.txt"), "a\n").unwrap();
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let actor = actor_token(&server, "agent").await;
        let mut fs_agent = filesystem_agent(&server, &actor).await;
        let everything = json!({"path": p(&root, "")});
        for (tool, args) in [
            ("list_directory", everything.clone()),
            ("list_directory_with_sizes", everything.clone()),
            ("directory_tree", everything.clone()),
            (
                "search_files",
                json!({"path": p(&root, ""), "pattern": "**/*"}),
            ),
            (
                "search_files",
                json!({"path": p(&root, ""), "pattern": "**/serve.json"}),
            ),
            ("list_directory", json!({"path": p(&root, ".writ")})),
            ("directory_tree", json!({"path": p(&root, ".writ")})),
            (
                "get_file_info",
                json!({"path": p(&root, ".writ/serve.json")}),
            ),
            ("get_file_info", json!({"path": p(&root, ".writ")})),
        ] {
            let (_, text) = fs_agent.call(tool, args.clone()).await;
            assert!(
                !text.contains("serve.json") || text.contains("sensitive"),
                "{tool} {args}: {text}"
            );
            assert!(!text.contains(&token), "{tool}: the token");
            assert!(
                !text.contains("[DIR] .writ") && !text.contains("\"name\": \".writ\""),
                "{tool} {args}: {text}"
            );
        }
        let mut writ = writ_agent(&server, &actor).await;
        let (err, text) = writ.call("list_dir", json!({"path": ""})).await;
        assert!(!err && !text.contains(".writ"), "list_dir: {text}");
        let (err, text) = writ.call("list_dir", json!({"path": ".writ"})).await;
        assert!(
            err && !text.contains("serve.json"),
            "list_dir .writ: {text}"
        );
        server.shutdown().await;
    });
}

#[test]
fn sizes_never_come_from_outside_the_root() {
    let (_dir, root) = workspace();
    let (_outside_dir, outside) = workspace();
    fs::write(outside.join("secret.bin"), vec![7u8; 123_457]).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.bin"), root.join("link")).unwrap();
    runtime().block_on(async {
        let server = start(&root).await;
        let mut agent = filesystem_agent(&server, server.token()).await;
        let (_, text) = agent
            .call("list_directory_with_sizes", json!({"path": p(&root, "")}))
            .await;
        assert!(
            !text.contains("120.56 KB") && !text.contains("123457"),
            "the outside file's size: {text}"
        );
        let (err, text) = agent
            .call("get_file_info", json!({"path": p(&root, "link")}))
            .await;
        assert!(err && !text.contains("123457"), "get_file_info: {text}");
        server.shutdown().await;
    });
}

/// A thread swaps `ROOT/d` between a real folder and a symlink to a folder
/// outside the root, as fast as it can, while an agent creates, lists and
/// moves folders through it. Nothing outside may ever be created, listed
/// or moved.
#[test]
fn a_folder_swapped_for_a_symlink_never_lets_a_folder_tool_out() {
    const TRIES: usize = 300;
    let (_dir, root) = workspace();
    let (_outside_dir, outside) = workspace();
    fs::write(outside.join("outside-only.txt"), "x").unwrap();
    for i in 0..TRIES {
        fs::create_dir_all(outside.join(format!("victim{i}"))).unwrap();
    }
    // `d` is, in turn, a real folder and a symlink to `outside`: a tool that
    // resolves `d/...` while it is real and then acts on the path string
    // after the swap acts outside.
    let real = root.join("d.real");
    fs::create_dir_all(&real).unwrap();
    for i in 0..TRIES {
        fs::create_dir_all(real.join(format!("victim{i}"))).unwrap();
    }
    let link = root.join("d.link");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, real, link, d) = (stop.clone(), real.clone(), link.clone(), root.join("d"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for parked in [&real, &link] {
                    if fs::rename(parked, &d).is_ok() {
                        std::thread::yield_now();
                        let _ = fs::rename(&d, parked);
                    }
                }
            }
        })
    };
    let listed_outside = runtime().block_on(async {
        let server = start(&root).await;
        let actor = actor_token(&server, "agent").await;
        let mut agent = filesystem_agent(&server, &actor).await;
        let mut mine = writ_agent(&server, &actor).await;
        let mut listed_outside = Vec::new();
        for i in 0..TRIES {
            let _ = agent
                .call(
                    "create_directory",
                    json!({"path": p(&root, &format!("d/new{i}"))}),
                )
                .await;
            let _ = agent
                .call(
                    "move_file",
                    json!({"source": p(&root, &format!("d/victim{i}")),
                           "destination": p(&root, &format!("taken{i}"))}),
                )
                .await;
            for (tool, args) in [
                ("list_directory", json!({"path": p(&root, "d")})),
                ("list_directory_with_sizes", json!({"path": p(&root, "d")})),
                ("directory_tree", json!({"path": p(&root, "d")})),
                (
                    "search_files",
                    json!({"path": p(&root, "d"), "pattern": "*only*"}),
                ),
            ] {
                let (_, text) = agent.call(tool, args).await;
                if text.contains("outside-only") {
                    listed_outside.push(format!("{tool}: {text}"));
                }
            }
            let (_, text) = mine.call("list_dir", json!({"path": "d"})).await;
            if text.contains("outside-only") {
                listed_outside.push(format!("list_dir: {text}"));
            }
        }
        server.shutdown().await;
        listed_outside
    });
    stop.store(true, Ordering::Relaxed);
    swapper
        .join()
        .unwrap_or_else(|_| panic!("the swapper panicked"));
    assert!(
        listed_outside.is_empty(),
        "listed outside: {listed_outside:?}"
    );
    let made: Vec<String> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("new"))
        .collect();
    assert!(made.is_empty(), "folders created outside: {made:?}");
    let moved: Vec<usize> = (0..TRIES)
        .filter(|i| !outside.join(format!("victim{i}")).is_dir())
        .collect();
    assert!(moved.is_empty(), "outside folders moved away: {moved:?}");
}

#[test]
fn a_path_longer_than_path_max_is_refused_and_a_deep_tree_breaks_no_listing() {
    let (_dir, root) = workspace();
    // Made with a shell, past what any tool may make: 300 folders deep.
    let mut deep = root.join("deep");
    for _ in 0..300 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    runtime().block_on(async {
        let server = start(&root).await;
        let mut agent = filesystem_agent(&server, server.token()).await;
        let long = "x/".repeat(2_500) + "f.txt";
        let (err, text) = agent
            .call(
                "write_file",
                json!({"path": p(&root, &long), "content": "pwned"}),
            )
            .await;
        assert!(err && text.contains("limit"), "a 5000-byte path: {text}");
        let (err, text) = agent
            .call("create_directory", json!({"path": p(&root, &long)}))
            .await;
        assert!(err && text.contains("limit"), "a 5000-byte folder: {text}");
        assert!(!root.join("x").exists(), "nothing of it was made");
        let mut writ = writ_agent(&server, server.token()).await;
        let (err, text) = writ
            .call("write_file", json!({"path": long, "content": "pwned"}))
            .await;
        assert!(err && text.contains("limit"), "writ's write_file: {text}");
        // The tree of the root still answers, the deep part cut off.
        let (err, text) = agent
            .call("directory_tree", json!({"path": p(&root, "")}))
            .await;
        assert!(!err, "directory_tree: {text}");
        assert!(text.contains("\"deep\""), "{text}");
        let (err, text) = agent
            .call(
                "search_files",
                json!({"path": p(&root, ""), "pattern": "**/nothing"}),
            )
            .await;
        assert!(!err, "search_files: {text}");
        server.shutdown().await;
    });
}
