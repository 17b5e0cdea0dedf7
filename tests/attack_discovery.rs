//! Attacks on the discovery folder, the hook and the clients' discovery
//! rules (SPEC §13 first bullet, §14 "Hooks", §15 "Discovery"), each
//! performed and asserted to fail: the token written where a planted
//! symlink points, a `.writ` others can reach, a planted discovery file
//! that stops the server or draws a client's token, tokens committed to
//! git, and a hook steered by the event's `cwd` or by a planted state file.

#![cfg(all(feature = "mcp", feature = "server", feature = "remote"))]

#[path = "common/mcp_http_client.rs"]
mod http_client;
#[path = "common/scratch.rs"]
mod scratch;

use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use scratch::{runtime, workspace};
use serde_json::{Value, json};
use sha2::Digest as _;
use writ::server::{Options, Server};

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `writ serve ROOT` as a process: `Ok(child)` once it printed its
/// discovery file (it serves), `Err(stderr)` when it exited.
fn serve(root: &Path, state: &Path) -> Result<Child, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["serve"])
        .arg(root)
        .args(["--no-history"])
        .env("XDG_STATE_HOME", state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if line.contains("discovery file") {
            return Ok(child);
        }
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    Err(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[test]
fn a_symlinked_discovery_folder_is_refused_and_its_target_untouched() {
    let (_dir, root) = workspace();
    let (_elsewhere, elsewhere) = workspace();
    let (_state, state) = workspace();
    std::os::unix::fs::symlink(&elsewhere, root.join(".writ")).unwrap();
    let err = serve(&root, &state).map(stop).expect_err("it served");
    assert!(err.contains("symlink"), "{err}");
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "{err}");
}

#[test]
fn a_discovery_folder_others_can_reach_is_refused() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    fs::create_dir(root.join(".writ")).unwrap();
    fs::set_permissions(root.join(".writ"), fs::Permissions::from_mode(0o777)).unwrap();
    let err = serve(&root, &state).map(stop).expect_err("it served");
    assert!(err.contains("mode 0777"), "{err}");
    assert!(!root.join(".writ/serve.json").exists());
}

/// A folder the user chose (`--state-dir`) may be readable by others (its
/// files are 0600), never writable by them.
#[test]
fn a_chosen_state_folder_others_can_write_to_is_refused() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    for (mode, starts) in [(0o755, true), (0o777, false), (0o775, false)] {
        let (_chosen, chosen) = workspace();
        fs::set_permissions(&chosen, fs::Permissions::from_mode(mode)).unwrap();
        let started = Command::new(env!("CARGO_BIN_EXE_writ"))
            .args(["serve"])
            .arg(&root)
            .args(["--no-history", "--state-dir"])
            .arg(&chosen)
            .env("XDG_STATE_HOME", &state)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map(|mut child| {
                let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
                let served = BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .any(|line| line.contains("discovery file"));
                if served {
                    stop(child);
                } else {
                    let _ = child.wait();
                }
                served
            })
            .unwrap_or_else(|e| panic!("spawn: {e}"));
        assert_eq!(started, starts, "--state-dir of mode {mode:o}");
        assert!(
            !chosen.join("serve.json").exists(),
            "removed at stop, or never written"
        );
    }
}

#[test]
fn planted_symlinks_never_redirect_what_the_server_writes() {
    let (_dir, root) = workspace();
    let (_victims, victims) = workspace();
    fs::create_dir(root.join(".writ")).unwrap();
    fs::set_permissions(root.join(".writ"), fs::Permissions::from_mode(0o700)).unwrap();
    for name in ["serve.json", ".gitignore"] {
        let victim = victims.join(name);
        fs::write(&victim, "victim\n").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&victim, root.join(".writ").join(name)).unwrap();
    }
    runtime().block_on(async {
        let server = Server::start(
            Options::new(&root).discovery_file(root.join(".writ").join("serve.json")),
        )
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
        for name in ["serve.json", ".gitignore"] {
            assert_eq!(fs::read_to_string(victims.join(name)).unwrap(), "victim\n");
            assert_eq!(mode(&victims.join(name)), 0o644);
            let written = root.join(".writ").join(name);
            assert!(fs::symlink_metadata(&written).unwrap().is_file(), "{name}");
            assert_eq!(mode(&written), 0o600, "{name}");
        }
        assert_eq!(
            fs::read_to_string(root.join(".writ/.gitignore")).unwrap(),
            "*\n"
        );
        server.shutdown().await;
    });
    // Nothing but the two files (no temporary left behind).
    let mut names: Vec<String> = fs::read_dir(root.join(".writ"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".gitignore"]);
}

/// Plants `ROOT/.writ/serve.json` (in a 0700 `.writ`, the file 0600, as a
/// server would) naming `pid` and a URL where nothing answers.
fn plant_discovery(root: &Path, pid: u32) -> PathBuf {
    let writ = root.join(".writ");
    fs::create_dir_all(&writ).unwrap();
    fs::set_permissions(&writ, fs::Permissions::from_mode(0o700)).unwrap();
    let planted = writ.join("serve.json");
    fs::write(
        &planted,
        json!({"url": "http://127.0.0.1:9", "socket": null, "pid": pid,
               "token": "0".repeat(64), "version": "0"})
        .to_string(),
    )
    .unwrap();
    fs::set_permissions(&planted, fs::Permissions::from_mode(0o600)).unwrap();
    planted
}

#[test]
fn a_planted_discovery_file_naming_a_live_pid_does_not_stop_the_server() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    // This test's own pid is alive; port 9 answers nothing.
    let planted = plant_discovery(&root, std::process::id());
    let child = serve(&root, &state).unwrap_or_else(|e| panic!("refused to start: {e}"));
    let found: Value = serde_json::from_str(&fs::read_to_string(&planted).unwrap()).unwrap();
    assert_eq!(found["pid"], child.id());
    stop(child);
}

#[test]
fn nothing_of_writ_shows_in_git_status_after_serve_mcp_and_the_hook() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap_or_else(|e| panic!("git is required (apt-get install git): {e}"))
    };
    assert!(git(&["init", "-q"]).status.success());
    fs::write(root.join("lib.rs"), "a\n").unwrap();
    assert!(git(&["add", "-A"]).status.success());
    assert!(
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "init"
        ])
        .status
        .success()
    );
    let child = serve(&root, &state).unwrap_or_else(|e| panic!("serve: {e}"));
    let found: Value =
        serde_json::from_str(&fs::read_to_string(root.join(".writ/serve.json")).unwrap()).unwrap();
    let (url, token) = (
        found["url"].as_str().unwrap().to_string(),
        found["token"].as_str().unwrap().to_string(),
    );
    runtime().block_on(async {
        let mut agent = http_client::McpHttp::new(&format!("{url}/mcp"), &token);
        assert!(agent.initialize("agent").await.status.is_success());
        let (err, text) = agent.call("read_file", json!({"path": "lib.rs"})).await;
        assert!(!err, "{text}");
    });
    let read = hook(
        &state,
        &event(
            &root,
            "sess-git",
            "PostToolUse",
            "Read",
            "t0",
            &root.join("lib.rs"),
        ),
    );
    assert_eq!(read, "");
    let out = hook(
        &state,
        &event(
            &root,
            "sess-git",
            "PreToolUse",
            "Edit",
            "t1",
            &root.join("lib.rs"),
        ),
    );
    assert_eq!(out, "", "the hook denied: {out}");
    let status = git(&["status", "--porcelain", "--untracked-files=all"]);
    let listed = String::from_utf8_lossy(&status.stdout).into_owned();
    stop(child);
    assert_eq!(listed, "", "git status shows writ's files");
}

/// Runs `writ hook claude-code` on one event with its state under `state`.
fn hook(state: &Path, event: &Value) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(["hook", "claude-code"])
        .env("XDG_STATE_HOME", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(event.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("stdin: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(out.status.success(), "the hook must never fail the call");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn event(cwd: &Path, session: &str, when: &str, tool: &str, id: &str, file: &Path) -> Value {
    json!({
        "session_id": session, "transcript_path": "/dev/null", "cwd": cwd,
        "permission_mode": "default", "hook_event_name": when, "tool_name": tool,
        "tool_input": {"file_path": file, "old_string": "a", "new_string": "b"},
        "tool_use_id": id,
    })
}

fn denied(out: &str) -> Option<String> {
    let v: Value = serde_json::from_str(out).ok()?;
    let out = &v["hookSpecificOutput"];
    (out["permissionDecision"] == "deny").then(|| {
        out["permissionDecisionReason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
}

/// Where the hook keeps a Claude Code session's state for `root`.
fn hook_state(state: &Path, root: &Path, session: &str) -> PathBuf {
    let digest = sha2::Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    state
        .join("writ")
        .join(hash)
        .join("hooks")
        .join(format!("{session}.json"))
}

async fn start(root: &Path) -> Server {
    Server::start(
        Options::new(root)
            .discovery_file(root.join(".writ").join("serve.json"))
            .lease_ttl(Duration::from_secs(30)),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

async fn rpc(server: &Server, token: &str, method: &str, params: Value) -> Value {
    let client = http_client::McpHttp::new(&format!("{}/rpc", server.url()), token);
    let reply = client
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .await;
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{method}: {e}: {}", reply.body))
}

/// A workspace actor made with `token`; its handle.
async fn new_actor(server: &Server, token: &str, name: &str) -> String {
    let made = rpc(
        server,
        token,
        "actor.create",
        json!({"name": name, "grant": {"workspace": true}}),
    )
    .await;
    made["result"]["actor"]
        .as_str()
        .unwrap_or_else(|| panic!("{made}"))
        .to_string()
}

#[test]
fn the_hook_finds_the_root_from_the_file_not_from_the_events_cwd() {
    let (_dir, root) = workspace();
    let (_other, other) = workspace();
    let (_state, state) = workspace();
    fs::write(root.join("lib.rs"), "a\n").unwrap();
    runtime().block_on(async {
        let server = start(&root).await;
        let actor = new_actor(&server, server.token(), "owner").await;
        let held = rpc(
            &server,
            server.token(),
            "fence",
            json!({"actor": actor, "targets": ["lib.rs"]}),
        )
        .await;
        assert!(held["result"]["hold"].is_string(), "{held}");
        let (s, o, r) = (state.clone(), other.clone(), root.clone());
        let out = tokio::task::spawn_blocking(move || {
            hook(
                &s,
                &event(
                    &o,
                    "sess-cwd",
                    "PreToolUse",
                    "Edit",
                    "t1",
                    &r.join("lib.rs"),
                ),
            )
        })
        .await
        .unwrap();
        let reason = denied(&out).unwrap_or_else(|| panic!("allowed: {out:?}"));
        assert!(reason.contains("owner"), "{reason}");
        server.shutdown().await;
    });
}

#[test]
fn the_hook_denies_writes_into_writ_and_history_never_copies_the_token() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let (s, r) = (state.clone(), root.clone());
        let out = tokio::task::spawn_blocking(move || {
            hook(
                &s,
                &event(
                    &r,
                    "sess-w",
                    "PreToolUse",
                    "Write",
                    "t1",
                    &r.join(".writ/serve.json"),
                ),
            )
        })
        .await
        .unwrap();
        let reason = denied(&out).unwrap_or_else(|| panic!("allowed: {out:?}"));
        assert!(reason.contains(".writ"), "{reason}");
        let actor = new_actor(&server, &token, "a").await;
        let snap = rpc(
            &server,
            &token,
            "history.snapshot",
            json!({"actor": actor, "path": ".writ/serve.json"}),
        )
        .await;
        assert_eq!(snap["error"]["data"]["kind"], "policy", "{snap}");
        server.shutdown().await;
    });
}

#[test]
fn a_write_under_a_served_root_whose_server_is_gone_is_denied() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    plant_discovery(&root, 1);
    let out = hook(
        &state,
        &event(
            &root,
            "sess-gone",
            "PreToolUse",
            "Edit",
            "t1",
            &root.join("lib.rs"),
        ),
    );
    let reason = denied(&out).unwrap_or_else(|| panic!("allowed: {out:?}"));
    assert!(reason.contains("cannot be reached"), "{reason}");
    // A file under no served root is not writ's business.
    let (_free, free) = workspace();
    let out = hook(
        &state,
        &event(
            &free,
            "sess-gone",
            "PreToolUse",
            "Edit",
            "t2",
            &free.join("x"),
        ),
    );
    assert_eq!(out, "");
}

#[test]
fn a_planted_hook_state_releases_nobody_and_redirects_no_write() {
    let (_dir, root) = workspace();
    let (_state, state) = workspace();
    let (_victims, victims) = workspace();
    fs::write(root.join("lib.rs"), "a\n").unwrap();
    runtime().block_on(async {
        let server = start(&root).await;
        let token = server.token().to_string();
        let actor = new_actor(&server, &token, "owner").await;
        let held = rpc(
            &server,
            &token,
            "fence",
            json!({"actor": actor, "targets": ["src/"]}),
        )
        .await;
        let hold = held["result"]["hold"].as_str().unwrap().to_string();
        // Session one: a state naming the owner's fence as its own, long expired.
        let planted = hook_state(&state, &root, "sess-plant");
        fs::create_dir_all(planted.parent().unwrap()).unwrap();
        fs::set_permissions(planted.parent().unwrap(), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(
            &planted,
            json!({"actor": null, "token": null, "marks": {},
            "holds": {"old": [hold, root.join("src/a.rs"), 0]}, "prompts": 0})
            .to_string(),
        )
        .unwrap();
        fs::set_permissions(&planted, fs::Permissions::from_mode(0o600)).unwrap();
        // Session two: its state file is a symlink to a victim.
        let victim = victims.join("victim.txt");
        fs::write(&victim, "victim\n").unwrap();
        std::os::unix::fs::symlink(&victim, hook_state(&state, &root, "sess-link")).unwrap();
        let (s, r) = (state.clone(), root.clone());
        let outs = tokio::task::spawn_blocking(move || {
            ["sess-plant", "sess-link"].map(|sess| {
                hook(
                    &s,
                    &event(&r, sess, "PreToolUse", "Edit", "t1", &r.join("lib.rs")),
                )
            })
        })
        .await
        .unwrap();
        let dump = server.scheduler().dump();
        assert!(
            dump.holds.iter().any(|h| h.actor == "owner"),
            "the owner's fence was released: {outs:?}\n{dump}"
        );
        server.shutdown().await;
    });
    assert_eq!(
        fs::read_to_string(victims.join("victim.txt")).unwrap(),
        "victim\n"
    );
}

#[test]
fn clients_refuse_a_discovery_file_others_could_have_written() {
    let (_dir, root) = workspace();
    fs::create_dir(root.join(".writ")).unwrap();
    let planted = root.join(".writ/serve.json");
    let write = |url: &str, mode: u32| {
        fs::write(
            &planted,
            json!({"url": url, "socket": null, "pid": 1, "token": "0".repeat(64), "version": "0"})
                .to_string(),
        )
        .unwrap();
        fs::set_permissions(&planted, fs::Permissions::from_mode(mode)).unwrap();
    };
    runtime().block_on(async {
        write("http://127.0.0.1:9", 0o666);
        let err = writ::remote::Session::discover(&root)
            .await
            .map(drop)
            .unwrap_err();
        assert!(err.to_string().contains("0666"), "{err}");
        write("http://10.0.0.5:4000", 0o600);
        let err = writ::remote::Session::discover(&root)
            .await
            .map(drop)
            .unwrap_err();
        assert!(err.to_string().contains("loopback"), "{err}");
    });
    // The command-line clients follow the same rules.
    write("http://10.0.0.5:4000", 0o600);
    let out = Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("dump")
        .arg(&root)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
}
