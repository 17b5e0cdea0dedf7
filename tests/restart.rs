//! Stopping fast: `writ serve` ends with SIGTERM at once however many
//! clients hold streams open (the page's `/events`, an MCP agent's GET
//! stream, a waiting `admit`), and a server started again on the same
//! folder right after succeeds; both under a second, measured against a
//! deadline.

#[path = "common/mcp_http_client.rs"]
mod mcp_http_client;
#[path = "common/serve_process.rs"]
mod serve_process;

use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_http_client::McpHttp;
use serve_process::Serve;
use writ::Grant;
use writ::remote::Session;

/// What stop plus restart may take with clients connected.
const STOP_AND_RESTART: Duration = Duration::from_secs(1);

#[test]
fn sigterm_with_clients_connected_stops_at_once_and_a_restart_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let state = dir.path().join("state");
    // A long call wait: an MCP write waiting for its path must not hold
    // the stop up either.
    let mut serve = Serve::start(&root, &state, &["--call-wait", "60"], &[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (events, mcp_stream, waiter, tool_call, holder, session) = rt.block_on(async {
        // The page's stream.
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let request = hyper::Request::get(format!("{}/events", serve.url))
            .header("authorization", format!("Bearer {}", serve.token))
            .body(Empty::new())
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let events = tokio::spawn(async move { while let Some(Ok(_)) = body.frame().await {} });
        // An MCP agent with its GET stream open.
        let mut mcp = McpHttp::new(&format!("{}/mcp", serve.url), &serve.token);
        assert_eq!(mcp.initialize("restart-test").await.status, 200);
        let (status, mcp_stream) = mcp.hold_stream().await;
        assert_eq!(status, 200);
        // A fence, and a client long-polling behind it.
        let session = Session::connect(&serve.url, &serve.token).await.unwrap();
        let holder = session
            .actor("holder", Grant::workspace(&root))
            .await
            .unwrap();
        let fence = holder.fence(["src/"]).await.unwrap();
        let waiting = session
            .actor("waiter", Grant::workspace(&root))
            .await
            .unwrap();
        let waiter = tokio::spawn(async move {
            let got = waiting.admit(["src/a.rs"]).await.map(drop);
            drop(fence);
            got
        });
        // An MCP tool call waiting for a file inside the fence.
        let mut writer = mcp.clone();
        let tool_call = tokio::spawn(async move {
            writer
                .call(
                    "write_file",
                    serde_json::json!({"path": "src/b.rs", "content": "b\n"}),
                )
                .await
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while session.dump().await.unwrap()["waiters"]
            .as_array()
            .is_none_or(|w| w.len() < 2)
        {
            assert!(Instant::now() < deadline, "the waiters never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (events, mcp_stream, waiter, tool_call, holder, session)
    });

    let stopping = Instant::now();
    serve.terminate();
    let stopped = stopping.elapsed();
    let mut again = Serve::start(&root, &state, &[], &[]);
    let restarted = stopping.elapsed();
    assert!(
        restarted < STOP_AND_RESTART,
        "stop took {stopped:?}, stop and restart {restarted:?}"
    );
    assert_ne!(again.url, serve.url, "a new server, on a new port");
    assert_eq!(again.token, serve.token, "the kept session token");

    rt.block_on(async {
        // Every stream was closed by the stop, not left to time out.
        let ended = Duration::from_secs(5);
        tokio::time::timeout(ended, events).await.unwrap().unwrap();
        tokio::time::timeout(ended, mcp_stream)
            .await
            .unwrap()
            .unwrap();
        let waited = tokio::time::timeout(ended, waiter).await.unwrap().unwrap();
        assert!(
            matches!(waited, Err(writ::Error::Unavailable { .. })),
            "the waiter was failed: {waited:?}"
        );
        let (failed, text) = tokio::time::timeout(ended, tool_call)
            .await
            .unwrap()
            .unwrap();
        assert!(failed && text.contains("stopping"), "{text}");
        assert!(!root.join("src/b.rs").exists(), "the call did nothing");
        drop((holder, session));
        // The new server serves.
        let fresh = Session::connect(&again.url, &again.token).await.unwrap();
        assert!(fresh.dump().await.unwrap()["actors"].is_array());
    });
    again.terminate();
}
