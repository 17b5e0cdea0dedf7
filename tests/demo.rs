//! The demo binary runs end to end and loses nothing with writ.

use std::process::{Command, Output};

/// Runs the `writ` binary with `args`.
fn writ(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_writ"))
        .args(args)
        .output()
        .expect("the writ binary runs")
}

/// Runs it and returns its standard output, failing on a non-zero exit.
fn writ_ok(args: &[&str]) -> String {
    let output = writ(args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn demo_loses_no_update_with_writ() {
    let stdout = writ_ok(&[
        "demo", "--agents", "4", "--calls", "40", "--seed", "3", "--json",
    ]);
    let outcome: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    assert_eq!(outcome["with_writ"]["lost_updates"], 0);
    assert_eq!(outcome["through_files"]["lost_updates"], 0);
    assert!(
        outcome["through_files"]["writes"]
            .as_u64()
            .is_some_and(|w| w > 0)
    );
    // 4 agents: 2 optimistic (1 worker each), 2 fenced (2 parallel workers and a sub-agent each).
    let workers = 2 + 2 * 3;
    let writes = outcome["with_writ"]["writes"].as_u64().unwrap();
    let refused_by_fence = outcome["admission"]["refused_by_fence"].as_u64().unwrap();
    assert_eq!(
        writes + refused_by_fence,
        workers * 40,
        "every call either wrote or was refused by a fence"
    );
    assert_eq!(outcome["admission"]["deadlocks_refused"], 1);
    assert!(
        outcome["dump"]["holds"]
            .as_array()
            .is_some_and(|h| !h.is_empty())
    );
}

#[test]
fn demo_refuses_bad_arguments() {
    let output = writ(&["demo", "--agents", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("at least 1"));
}

#[test]
fn plan_demo_shows_a_refusal_and_the_fixed_waves() {
    let text = writ_ok(&["demo", "--plan"]);
    assert!(
        text.contains("refused: tasks 'lexer' and 'parser'"),
        "{text}"
    );
    assert!(text.contains("wave 1:"), "{text}");
}

#[test]
fn delegate_demo_reports_the_fake_agents_changes() {
    let text = writ_ok(&["demo", "--delegate"]);
    assert!(
        text.contains("renamed   src/util.rs -> src/helpers.rs"),
        "{text}"
    );
    assert!(
        text.contains("lead/run-1"),
        "the dump taken during the run shows the run's actor: {text}"
    );
    assert!(
        text.contains("Sandboxed (bubblewrap)"),
        "the demo's run is sandboxed and says so (needs bubblewrap installed): {text}"
    );
}
