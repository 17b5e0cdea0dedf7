//! `writ demo --plan`: a plan refused because two unordered tasks write the
//! same file, then accepted once a dependency orders them, with its waves.
//!
//! Validation only resolves paths; nothing is written under `root`.

use std::fmt::Write as _;
use std::path::Path;

use writ::Target;
use writ::plan::Plan;

/// One task of the demo plan: its name, what it writes (or reads, shared),
/// and what it waits for.
struct Step {
    name: &'static str,
    targets: Vec<Target>,
    after: Vec<&'static str>,
}

/// A parser rewrite split among six agents. `lexer` and `parser` both touch
/// `src/parser/lex.rs` (one names the file, the other the whole folder).
fn steps(parser_after_lexer: bool) -> Vec<Step> {
    vec![
        Step {
            name: "lexer",
            targets: vec![Target::file("src/parser/lex.rs")],
            after: vec![],
        },
        Step {
            name: "parser",
            targets: vec![Target::tree("src/parser")],
            after: if parser_after_lexer {
                vec!["lexer"]
            } else {
                vec![]
            },
        },
        Step {
            name: "cli",
            targets: vec![
                Target::file("src/main.rs"),
                // Reads the parser's public API; readers never clash.
                Target::file("src/parser/mod.rs").shared(),
            ],
            after: vec!["parser"],
        },
        Step {
            name: "docs",
            // Describes the new API, so it reads it once the parser is done.
            targets: vec![
                Target::tree("docs"),
                Target::file("src/parser/mod.rs").shared(),
            ],
            after: vec!["parser"],
        },
        Step {
            name: "ci",
            targets: vec![Target::file(".github/workflows/ci.yml")],
            after: vec![],
        },
        Step {
            name: "release",
            // A release script is an opaque tool: it may write anything.
            targets: vec![Target::workspace()],
            after: vec!["cli", "docs", "ci"],
        },
    ]
}

fn plan(root: &Path, steps: &[Step]) -> Plan {
    steps.iter().fold(Plan::new(root), |plan, step| {
        plan.task(step.name, step.targets.iter(), step.after.iter().copied())
    })
}

fn describe(out: &mut String, steps: &[Step]) {
    let rows: Vec<(&str, String, &[&str])> = steps
        .iter()
        .map(|step| {
            let targets: Vec<String> = step.targets.iter().map(target_text).collect();
            (step.name, targets.join(", "), step.after.as_slice())
        })
        .collect();
    let width = rows.iter().map(|(_, t, _)| t.len()).max().unwrap_or(0);
    for (name, targets, after) in rows {
        let line = if after.is_empty() {
            format!("  {name:<8} {targets}")
        } else {
            format!("  {name:<8} {targets:<width$}  after {}", after.join(", "))
        };
        let _ = writeln!(out, "{line}");
    }
}

fn target_text(target: &Target) -> String {
    if target.is_workspace() {
        return "the whole workspace".into();
    }
    let mut s = target.path().display().to_string();
    if target.is_tree() {
        s.push('/');
    }
    if target.mode() == writ::Mode::Shared {
        s.push_str(" (read)");
    }
    s
}

/// Runs the scenario and returns what it printed.
///
/// Errors other than the expected `PlanConflict` (a root that cannot be
/// resolved, say) are returned as they are.
pub fn run(root: &Path) -> writ::Result<String> {
    let mut out = String::new();
    let first = steps(false);
    let _ = writeln!(out, "A plan for six agents, checked before any starts:");
    describe(&mut out, &first);
    match plan(root, &first).validate() {
        Err(conflict @ writ::Error::PlanConflict { .. }) => {
            let _ = writeln!(out, "\nrefused: {conflict}");
        }
        Err(other) => return Err(other),
        Ok(waves) => {
            // Not expected: lexer and parser overlap and nothing orders them.
            let _ = writeln!(out, "\naccepted unexpectedly, in {} waves", waves.len());
        }
    }

    let fixed = steps(true);
    let _ = writeln!(out, "\nFixed: 'parser' now runs after 'lexer'.");
    let waves = plan(root, &fixed).validate()?;
    let _ = writeln!(
        out,
        "accepted; the waves (each starts once the previous is done):"
    );
    for (i, wave) in waves.iter().enumerate() {
        let _ = writeln!(out, "  wave {}: {}", i + 1, wave.join(", "));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn refuses_then_accepts_with_waves() {
        let dir = tempfile::tempdir().unwrap();
        let out = super::run(dir.path()).unwrap();
        assert!(
            out.contains("refused: tasks 'lexer' and 'parser' both write"),
            "{out}"
        );
        assert!(
            out.contains("src/parser/lex.rs and neither depends"),
            "{out}"
        );
        assert!(
            out.contains(
                "  wave 1: lexer, ci\n  wave 2: parser\n  wave 3: cli, docs\n  wave 4: release\n"
            ),
            "{out}"
        );
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_missing_root_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            super::run(&dir.path().join("missing")),
            Err(writ::Error::InvalidPath { .. })
        ));
    }
}
