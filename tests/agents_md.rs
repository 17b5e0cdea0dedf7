//! docs/AGENTS.md's SDK snippets run as printed: each is taken from the
//! file, run against a server with only `WRIT_URL` and `WRIT_TOKEN` set, and
//! must do what the text around it says (the Python one edits a file with
//! the handle writ minted; the TypeScript one reads it over a session).

#![cfg(all(feature = "mcp", feature = "server"))]

// Only its pin of the Python SDK and its venv are used here.
#[allow(dead_code)]
#[path = "common/mcp_driver.rs"]
mod driver;
#[path = "common/npmenv.rs"]
mod npmenv;
#[path = "common/scratch.rs"]
mod scratch;

use std::path::Path;
use std::process::{Command, Output};

use writ::server::{Options, Server};

const TS_SDK: &str = "@modelcontextprotocol/sdk";
const TS_SDK_VERSION: &str = "1.32.2";

/// The first fenced block of `lang` after the line starting with `after`.
fn snippet(after: &str, lang: &str) -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/AGENTS.md"))
        .unwrap_or_else(|e| panic!("docs/AGENTS.md: {e}"));
    let start = doc
        .find(after)
        .unwrap_or_else(|| panic!("AGENTS.md has no {after:?}"));
    let fence = format!("```{lang}\n");
    let open = doc[start..]
        .find(&fence)
        .map(|i| start + i + fence.len())
        .unwrap_or_else(|| panic!("no ```{lang} block after {after:?}"));
    let close = doc[open..]
        .find("\n```")
        .unwrap_or_else(|| panic!("the ```{lang} block is not closed"));
    format!("{}\n", &doc[open..open + close])
}

/// A server for a workspace holding `src/lib.rs`; runs `run(url, token)`
/// and returns what it printed, with the file afterwards.
fn against_a_server(run: impl FnOnce(&str, &str) -> Output + Send + 'static) -> (Output, String) {
    let (_dir, root) = scratch::workspace();
    std::fs::create_dir_all(root.join("src")).unwrap_or_else(|e| panic!("{e}"));
    let lib = root.join("src/lib.rs");
    std::fs::write(&lib, "pub fn add(a: u8, b: u8) -> u8 {\n    a + b\n}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let runtime = scratch::runtime();
    let out = runtime.block_on(async {
        let config = writ::Config::default().durability(writ::Durability::Process);
        let server = Server::start(Options::new(&root).config(config))
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        let (url, token) = (format!("{}/mcp", server.url()), server.token().to_string());
        let out = tokio::task::spawn_blocking(move || run(&url, &token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        server.shutdown().await;
        out
    });
    let after = std::fs::read_to_string(&lib).unwrap_or_default();
    (out, after)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_python_snippet_runs_as_printed_and_edits_with_the_minted_handle() {
    let code = snippet("The official Python SDK (`mcp` 2.x)", "python");
    let python = driver::pyenv::venv_python(&[driver::MCP_SDK]);
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = scratch.path().join("snippet.py");
    std::fs::write(&file, code).unwrap_or_else(|e| panic!("{e}"));
    let (out, after) = against_a_server(move |url, token| {
        Command::new(python)
            .arg(&file)
            .env("WRIT_URL", url)
            .env("WRIT_TOKEN", token)
            .output()
            .unwrap_or_else(|e| panic!("python: {e}"))
    });
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(after.contains("a.wrapping_add(b)"), "{after}");
}

#[test]
fn the_typescript_snippet_runs_as_printed_and_reads_over_a_session() {
    let code = snippet("The TypeScript SDK (`@modelcontextprotocol/sdk`", "js");
    let sdk = npmenv::npm_package("npm-mcp-sdk", TS_SDK, TS_SDK_VERSION);
    // Beside the SDK's node_modules, so its imports resolve as printed.
    let prefix = sdk
        .ancestors()
        .find(|p| p.ends_with("node_modules"))
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in a node_modules", sdk.display()))
        .to_path_buf();
    let file = tempfile::Builder::new()
        .prefix("agents-md-")
        .suffix(".mjs")
        .tempfile_in(&prefix)
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(file.path(), code).unwrap_or_else(|e| panic!("{e}"));
    let path = file.path().to_path_buf();
    let (out, after) = against_a_server(move |url, token| {
        Command::new("node")
            .arg(&path)
            .env("WRIT_URL", url)
            .env("WRIT_TOKEN", token)
            .output()
            .unwrap_or_else(|e| panic!("node: {e}"))
    });
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("a + b"), "{}", text(&out.stdout));
    assert!(after.contains("a + b"));
}
