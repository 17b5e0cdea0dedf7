//! Claude Code's Bash tool through `writ run` (SPEC §17 "Hooks send shell
//! commands through it"), driven by scripted models (SPEC §15): with
//! `writ config claude --write`'s hooks, a session's shell command runs in
//! a copy-on-write layer and its write set is committed all or nothing —
//! merged with another session's edit of other lines, refused where it
//! would overwrite another session's edit it never saw, and the refusal is
//! what the model reads.

// The shared helpers serve several suites; this one uses a part of them.
#[path = "common/claude_code.rs"]
#[allow(dead_code)]
mod claude_code;
#[path = "common/cli_install.rs"]
mod cli_install;
#[path = "common/cli_session.rs"]
#[allow(dead_code)]
mod cli_session;
#[path = "common/scripted_model.rs"]
#[allow(dead_code)]
mod scripted_model;
#[path = "common/serve_process.rs"]
mod serve_process;
#[path = "common/shell_script.rs"]
mod shell_script;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve_process::Serve;
use std::time::Duration;

use claude_code::{Ended, Session, claude_bin, configure_writ};
use scripted_model::{ScriptedModel, ToolResult};
use serde_json::json;
use shell_script::{Play, Steps, bash, call, wait_for_file};

/// A session's deadline: far above a run's few seconds.
const DEADLINE: Duration = Duration::from_secs(180);

/// The file both sessions change.
const NOTES: &str = "notes.txt";
const NOTES_TEXT: &str = "one\ntwo\nthree\nfour\n";

/// A workspace (`base/repo`) served by `writ serve`, configured for Claude
/// Code with writ's hooks, and a scripted model.
struct World {
    _dir: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    model: ScriptedModel,
    claude: PathBuf,
    serve: Option<Serve>,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let base = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let root = base.join("repo");
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join(NOTES), NOTES_TEXT).unwrap_or_else(|e| panic!("{e}"));
        World {
            _dir: dir,
            base,
            root,
            model: ScriptedModel::start(),
            claude: claude_bin(),
            serve: None,
        }
    }

    fn state(&self) -> PathBuf {
        self.base.join("state")
    }

    /// `writ serve` on the workspace (history on: a run's commit merges
    /// against the snapshot of what another agent's write replaced), then
    /// `writ config claude --write`.
    fn serve_and_configure(&mut self) {
        self.serve = Some(Serve::start_with_history(&self.root, &self.state(), &[]));
        configure_writ(&self.root, &self.state());
    }

    fn notes(&self) -> String {
        std::fs::read_to_string(self.root.join(NOTES)).unwrap_or_default()
    }

    fn start(&self, name: &str, steps: Vec<Play>) -> Session {
        self.model.add(name, Steps::new(steps));
        Session::start(
            &self.claude,
            &self.root,
            &self.base.join("home").join(name),
            &self.state(),
            &self.model.url,
            &format!("{} Do your task.", ScriptedModel::marker(name)),
        )
    }

    fn results(&self, name: &str) -> Vec<ToolResult> {
        self.model.transcript(name).results
    }

    /// What went on, for a failing assertion's message.
    fn story(&self, names: &[&str], ended: &[Ended]) -> String {
        let mut story = format!("final {NOTES}:\n{}\n", self.notes());
        for name in names {
            story.push_str(&format!("--- {name}\n"));
            for r in self.results(name) {
                story.push_str(&format!(
                    "  {} {:.300} error={} {:.1200}\n",
                    r.name,
                    r.input.to_string(),
                    r.is_error,
                    r.text
                ));
            }
        }
        for (i, e) in ended.iter().enumerate() {
            story.push_str(&format!(
                "--- session {i}: {:?}\n  stderr: {:.800}\n",
                e.status, e.stderr
            ));
        }
        if let Some(serve) = &self.serve {
            story.push_str(&format!("--- serve log:\n{}\n", serve.log_tail(3000)));
        }
        story
    }
}

/// A session's steps that read `NOTES` and replace `old` by `new` with
/// Claude Code's own tools; `before_edit` runs between the two.
fn editor(
    root: &Path,
    old: &'static str,
    new: &'static str,
    before_edit: impl FnOnce() + Send + 'static,
    after_edit: impl FnOnce() + Send + 'static,
) -> Vec<Play> {
    let file = root.join(NOTES).display().to_string();
    let read_file = file.clone();
    let mut before_edit = Some(before_edit);
    let mut after_edit = Some(after_edit);
    vec![
        Box::new(move |_| call("Read", json!({"file_path": read_file}))),
        Box::new(move |_| {
            if let Some(f) = before_edit.take() {
                f();
            }
            call(
                "Edit",
                json!({"file_path": file, "old_string": old, "new_string": new}),
            )
        }),
        Box::new(move |_| {
            if let Some(f) = after_edit.take() {
                f();
            }
            scripted_model::Step::End("edited".into())
        }),
    ]
}

fn bash_result(world: &World, name: &str) -> Option<ToolResult> {
    world.results(name).into_iter().find(|r| r.name == "Bash")
}

/// `sed -i` run by one session's Bash tool while another session edits
/// another line of the same file with Claude Code's Edit: the command runs
/// in its own layer (the other session's Edit sees the file as it was),
/// and its commit merges the two changes. Both kept; 0 lost.
#[test]
fn a_sed_through_bash_and_another_sessions_edit_of_other_lines_both_land() {
    let mut world = World::new();
    world.serve_and_configure();
    // The command says when sed has run (outside the workspace, so not
    // part of its write set) and ends once the other session's edit
    // landed: the edit falls inside the run.
    let sed_ran = world.base.join("sed-ran");
    let edited = world.base.join("edited");
    let command = "sed -i 's/^one$/one (shell)/' notes.txt && touch ../sed-ran && \
         for i in $(seq 1200); do [ -e ../edited ] && break; sleep 0.05; done && echo sed-done";
    let shell = world.start("shell", vec![Box::new(move |_| bash(command))]);
    let edited_mark = edited.clone();
    let editor_steps = editor(
        &world.root,
        "four",
        "four (editor)",
        move || {
            wait_for_file(&sed_ran, Duration::from_secs(90));
        },
        move || {
            let _ = std::fs::write(&edited_mark, "");
        },
    );
    let other = world.start("editor", editor_steps);
    let ended = vec![shell.finish(DEADLINE), other.finish(DEADLINE)];
    let story = || world.story(&["shell", "editor"], &ended);
    assert!(
        world.base.join("sed-ran").exists() && edited.exists(),
        "the two sessions did not overlap: {}",
        story()
    );
    let result =
        bash_result(&world, "shell").unwrap_or_else(|| panic!("no Bash result: {}", story()));
    assert!(
        !result.is_error && result.text.contains("sed-done"),
        "the shell session's command failed: {}",
        story()
    );
    assert!(
        result.input["command"] == command,
        "the model's own call is what it sent: {}",
        story()
    );
    assert!(
        result.text.contains("merged"),
        "the commit merged the two changes and said so: {}",
        story()
    );
    let edit_landed = world
        .results("editor")
        .iter()
        .any(|r| r.name == "Edit" && !r.is_error);
    assert!(edit_landed, "the editor's Edit was refused: {}", story());
    assert_eq!(
        world.notes(),
        "one (shell)\ntwo\nthree\nfour (editor)\n",
        "both changes are kept: {}",
        story()
    );
    cli_install::figure(
        "real-cli: claude-code Bash `sed -i` beside another session's Edit: 2 landed, 0 lost"
            .to_string(),
    );
}

/// `git checkout -- .` run by one session's Bash tool over another
/// session's edit it never saw (a real git repository): the run's commit
/// is refused, nothing is applied, the other session's edit stays, and the
/// model reads the refusal (writ run's exit status 75 and its sentence).
#[test]
fn a_git_checkout_through_bash_over_another_sessions_unseen_edit_is_refused() {
    let mut world = World::new();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&world.root)
            .output()
            .unwrap_or_else(|e| panic!("git could not start: {e}"));
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    git(&["add", NOTES]);
    git(&["commit", "-q", "-m", "notes"]);
    world.serve_and_configure();
    let editor = world.start(
        "editor",
        editor(&world.root, "two", "two (editor)", || {}, || {}),
    );
    let first = editor.finish(DEADLINE);
    let edited = "one\ntwo (editor)\nthree\nfour\n";
    assert_eq!(
        world.notes(),
        edited,
        "the editor's edit landed: {}",
        world.story(&["editor"], &[first])
    );
    let resetter = world.start(
        "resetter",
        vec![Box::new(|_| bash("git checkout -- . && echo restored"))],
    );
    let ended = vec![resetter.finish(DEADLINE)];
    let story = || world.story(&["editor", "resetter"], &ended);
    assert_eq!(
        world.notes(),
        edited,
        "the other session's edit stays: {}",
        story()
    );
    let result =
        bash_result(&world, "resetter").unwrap_or_else(|| panic!("no Bash result: {}", story()));
    assert!(
        result.is_error,
        "a refused run is a failed command: {}",
        story()
    );
    for says in ["75", "refused, nothing was applied", "has not read"] {
        assert!(
            result.text.contains(says),
            "the model was not told {says:?}: {}",
            story()
        );
    }
    cli_install::figure("real-cli: claude-code Bash `git checkout -- .` over another session's unseen edit: refused, 0 lost".to_string());
}
