//! Runs `tests/py/mcp_driver.py` (the official MCP Python SDK) on a script
//! of tool calls and returns one JSON value per step.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[path = "pyenv.rs"]
pub mod pyenv;

/// The MCP SDK the tests drive writ with.
pub const MCP_SDK: &str = "mcp==2.3.0";

/// Runs `script` (see the driver's docstring) and returns its step results.
pub fn run(script: &Value, scratch: &Path) -> Vec<Value> {
    let python = pyenv::venv_python(&[MCP_SDK]);
    let file = scratch.join("script.json");
    std::fs::write(&file, script.to_string()).unwrap_or_else(|e| panic!("write script: {e}"));
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/mcp_driver.py");
    let out = Command::new(python)
        .arg(driver)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the MCP driver: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP driver failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("bad line {line}: {e}")))
        .collect();
    let steps = script["steps"].as_array().map_or(0, Vec::len);
    assert_eq!(results.len(), steps, "one result per step:\n{stdout}");
    results
}

/// A tool call step.
pub fn call(agent: &str, tool: &str, args: Value) -> Value {
    serde_json::json!({"agent": agent, "tool": tool, "args": args})
}

/// A step's result: whether it is an error, and its text. Panics on a step
/// that raised (a protocol error or a broken transport).
pub fn outcome(result: &Value) -> (bool, &str) {
    assert!(result.get("error").is_none(), "the step raised: {result}");
    (
        result["is_error"]
            .as_bool()
            .unwrap_or_else(|| panic!("not a call result: {result}")),
        result["text"].as_str().unwrap_or_default(),
    )
}

/// Asserts a successful call and returns its text.
#[track_caller]
pub fn ok(result: &Value) -> &str {
    let (err, text) = outcome(result);
    assert!(!err, "expected success, got a refusal: {text}");
    text
}

/// Asserts a refusal (`isError: true`) whose text contains every one of `needles`.
#[track_caller]
pub fn refused<'a>(result: &'a Value, needles: &[&str]) -> &'a str {
    let (err, text) = outcome(result);
    assert!(err, "expected a refusal, got success: {text}");
    for n in needles {
        assert!(text.contains(n), "refusal should mention {n:?}: {text}");
    }
    text
}

/// Asserts that a call result carries its one complete text in both places
/// (SPEC §14 results): `content` is exactly one text block, the structured
/// result holds the same text under `field` (`text` in writ's set,
/// `content` in the filesystem set), and it validates against the tool's
/// output schema (refusals too). Returns the text.
#[track_caller]
#[allow(dead_code)] // not every test binary checks results' shape
pub fn whole<'a>(result: &'a Value, field: &str) -> &'a str {
    assert!(result.get("error").is_none(), "the step raised: {result}");
    let blocks = result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {result}"));
    assert_eq!(blocks.len(), 1, "exactly one content block: {result}");
    assert_eq!(blocks[0]["type"], "text", "{result}");
    let text = blocks[0]["text"].as_str().unwrap_or_default();
    assert_eq!(
        result["structured"][field].as_str(),
        Some(text),
        "structuredContent.{field} is the whole text: {result}"
    );
    assert!(
        result["schema_error"].is_null(),
        "the result validates against the tool's output schema: {result}"
    );
    text
}
