//! `writ demo --delegate`: a fake coding agent, run under a fence.
//!
//! The agent is a small `/bin/sh` script written into a temporary
//! workspace. It reads its task from stdin, says it is ready, waits for the
//! demo to take a dump of the scheduler while it runs, then edits, creates,
//! deletes and renames files, leaves a background helper behind (which the
//! runner stops) and exits. The demo returns that dump and the run's report.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use writ::delegate::{Run, Sandbox};
use writ::{Config, Grant, Scheduler};

/// The fake agent. Its working directory is its run folder,
/// `<root>/.writ-runs/<run>/`, so the project is `../../src`.
const AGENT: &str = r#"#!/bin/sh
task=$(cat)
echo "agent: task: $task"
echo ready > ready.tmp && mv ready.tmp ready
# Wait (at most 5 s) until the demo has taken its dump.
i=0; while [ ! -e go ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
P=../../src
printf 'pub fn lex(s: &str) -> Vec<&str> { s.split_whitespace().collect() }\n' > $P/lexer.rs
printf 'pub enum Token { Word, Space }\n' > $P/tokens.rs
rm $P/old_parser.rs
mv $P/util.rs $P/helpers.rs
echo "lexer fixed; util.rs is now helpers.rs" > NOTES.md
(sleep 30; echo "// written by a leftover helper" >> $P/lexer.rs) &
echo "agent: done; a helper (pid $!) is still running" >&2
exit 0
"#;

fn io_error(e: writ::Error) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The `ready` file of the one live run, once the agent has written it.
fn ready_file(root: &Path) -> Option<PathBuf> {
    std::fs::read_dir(root.join(".writ-runs"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("ready"))
        .find(|p| p.exists())
}

/// Runs the demo and returns what it shows: the dump taken while the agent
/// ran, then the report.
pub async fn run() -> std::io::Result<String> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let src = root.join("src");
    std::fs::create_dir_all(&src)?;
    std::fs::write(src.join("lexer.rs"), "pub fn lex() {} // broken\n")?;
    std::fs::write(src.join("old_parser.rs"), "// to be removed\n")?;
    std::fs::write(src.join("util.rs"), "pub fn helper() {}\n")?;
    std::fs::create_dir_all(root.join("tools"))?;
    let agent = root.join("tools/agent.sh");
    std::fs::write(&agent, AGENT)?;
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;

    let sched = Scheduler::new(Config::default().session("demo"));
    let lead = sched
        .actor("lead", Grant::workspace(root))
        .map_err(io_error)?;
    let run = Run::new("tools/agent.sh")
        .task("Fix the lexer and rename util.rs to helpers.rs")
        .project_dir("src")
        .timeout(Duration::from_secs(30))
        .grace(Duration::from_millis(500))
        // Sandboxed when bubblewrap works here (the report says which): the
        // leftover helper then ends with the run, escapees included.
        .sandbox(Sandbox::Auto);

    // While the run is live: wait (bounded) for the agent's `ready`, dump,
    // then let the agent go on.
    let observe = async {
        let deadline = Instant::now() + Duration::from_secs(10);
        let ready = loop {
            if let Some(ready) = ready_file(root) {
                break ready;
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the fake agent did not start",
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let dump = sched.dump();
        std::fs::write(ready.with_file_name("go"), "")?;
        Ok(dump)
    };
    let (report, dump) = tokio::join!(lead.delegate(run), observe);
    let report = report.map_err(io_error)?;
    let dump = dump?;
    Ok(format!(
        "== While the agent ran: the scheduler ==\n{dump}\n== The run's report ==\n{report}"
    ))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_demo_shows_the_live_fence_and_an_honest_report() {
        let out = super::run().await.unwrap();
        println!("{out}");
        let (dump, report) = out.split_once("== The run's report ==").unwrap();
        assert!(dump.contains("lead/run-"), "{dump}");
        assert!(dump.contains(".writ-runs/demo-lead-"), "{dump}");
        assert!(report.contains("completed with exit code 0"), "{report}");
        // The machines the checks run on have bubblewrap (.ci/run installs it).
        assert!(
            report.contains("Sandboxed (bubblewrap)"),
            "the demo run must be sandboxed (install bubblewrap): {report}"
        );
        for line in [
            "modified  src/lexer.rs",
            "created   src/tokens.rs",
            "deleted   src/old_parser.rs",
            "renamed   src/util.rs -> src/helpers.rs",
        ] {
            assert!(report.contains(line), "{line} missing from:\n{report}");
        }
    }
}
