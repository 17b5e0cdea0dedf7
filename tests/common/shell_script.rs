//! A scripted agent that plays fixed steps, each decided from the results
//! of the one before: the shell scenarios' sessions (run a command through
//! the CLI's Bash tool; read, then edit a line).

// Each test binary that includes this file uses a part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::scripted_model::{Script, Seen, Step, ToolCall};

/// One step: given the previous step's results, what to do next.
pub type Play = Box<dyn FnMut(&Seen) -> Step + Send>;

/// Plays its steps in order, then ends the turn.
pub struct Steps {
    steps: VecDeque<Play>,
}

impl Steps {
    /// The steps, in order.
    pub fn new(steps: Vec<Play>) -> Steps {
        Steps {
            steps: steps.into(),
        }
    }
}

impl Script for Steps {
    fn next(&mut self, seen: &Seen) -> Step {
        match self.steps.pop_front() {
            Some(mut play) => play(seen),
            None => Step::End("done".into()),
        }
    }
}

/// One call of `tool` with `input`.
pub fn call(tool: &str, input: Value) -> Step {
    Step::Call(vec![ToolCall {
        name: tool.to_string(),
        input,
    }])
}

/// A call of Claude Code's Bash tool.
pub fn bash(command: &str) -> Step {
    call(
        "Bash",
        json!({"command": command, "description": "run a shell command"}),
    )
}

/// Waits until `path` exists (another process made it), at most
/// `patience`; whether it does.
pub fn wait_for_file(path: &Path, patience: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < patience {
        if std::fs::symlink_metadata(path).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
