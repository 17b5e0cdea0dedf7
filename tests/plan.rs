//! SPEC §11 `writ::plan`: overlapping writes of unordered tasks, cycles,
//! malformed plans, their precedence, and waves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use writ::plan::Plan;
use writ::{CaseMode, Error, Target};

const NONE: [&str; 0] = [];

fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

fn conflict(result: writ::Result<Vec<Vec<String>>>) -> (String, String, PathBuf) {
    match result {
        Err(Error::PlanConflict {
            first,
            second,
            path,
        }) => (first, second, path),
        other => panic!("expected PlanConflict, got {other:?}"),
    }
}

fn cycle(result: writ::Result<Vec<Vec<String>>>) -> Vec<String> {
    match result {
        Err(Error::PlanCycle { tasks }) => tasks,
        other => panic!("expected PlanCycle, got {other:?}"),
    }
}

fn invalid(result: writ::Result<Vec<Vec<String>>>) -> String {
    match result {
        Err(Error::InvalidPlan { reason }) => reason,
        other => panic!("expected InvalidPlan, got {other:?}"),
    }
}

// ---------------------------------------------------------------- conflicts

#[test]
fn unordered_tasks_writing_one_file_conflict() {
    let (_dir, root) = root();
    let (first, second, path) = conflict(
        Plan::new(&root)
            .task("a", ["src/a.rs", "src/b.rs"], NONE)
            .task("b", ["src/b.rs"], NONE)
            .validate(),
    );
    assert_eq!((first.as_str(), second.as_str()), ("a", "b"));
    assert_eq!(path, root.join("src/b.rs"));
    let message = Plan::new(&root)
        .task("a", ["x"], NONE)
        .task("b", ["x"], NONE)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("'a' and 'b' both write") && message.contains("add a dependency"),
        "{message}"
    );
}

#[test]
fn a_tree_overlaps_the_paths_beneath_it() {
    let (_dir, root) = root();
    let (first, second, path) = conflict(
        Plan::new(&root)
            .task("docs", ["docs/"], NONE)
            .task("parser", [Target::tree("src/parser")], NONE)
            .task("lexer", ["src/parser/lex.rs"], NONE)
            .validate(),
    );
    assert_eq!((first.as_str(), second.as_str()), ("parser", "lexer"));
    assert_eq!(path, root.join("src/parser/lex.rs"), "the overlap itself");
    // A sibling spelled with the same prefix is not beneath the tree.
    Plan::new(&root)
        .task("parser", ["src/parser/"], NONE)
        .task("old", ["src/parser-old/lex.rs", "src/parser"], NONE)
        .validate()
        .map(drop)
        .expect_err("an exact key equal to the tree's path overlaps it");
    let waves = Plan::new(&root)
        .task("parser", ["src/parser/"], NONE)
        .task("old", ["src/parser-old/lex.rs", "src/parse"], NONE)
        .validate()
        .unwrap();
    assert_eq!(waves, [["parser", "old"]]);
    // An exact key covers only itself.
    let waves = Plan::new(&root)
        .task("a", ["src"], NONE)
        .task("b", ["src/a.rs"], NONE)
        .validate()
        .unwrap();
    assert_eq!(waves.len(), 1);
}

#[test]
fn ordered_tasks_may_write_the_same_paths() {
    let (_dir, root) = root();
    let waves = Plan::new(&root)
        .task("a", ["src/a.rs"], NONE)
        .task("b", ["src/"], ["a"])
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["a"], vec!["b"]]);
    // The dependency may point either way relative to insertion order.
    let waves = Plan::new(&root)
        .task("b", ["src/"], ["a"])
        .task("a", ["src/a.rs"], NONE)
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["a"], vec!["b"]]);
}

#[test]
fn transitive_order_is_enough() {
    let (_dir, root) = root();
    let waves = Plan::new(&root)
        .task("c", ["shared.rs"], ["b"])
        .task("b", ["b.rs"], ["a"])
        .task("a", ["shared.rs"], NONE)
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["a"], vec!["b"], vec!["c"]]);
    // Without the middle link, a and c are unordered.
    let (first, second, _) = conflict(
        Plan::new(&root)
            .task("c", ["shared.rs"], ["b"])
            .task("b", ["b.rs"], NONE)
            .task("a", ["shared.rs"], NONE)
            .validate(),
    );
    assert_eq!((first.as_str(), second.as_str()), ("c", "a"));
}

#[test]
fn shared_targets_clash_only_with_exclusive_ones() {
    let (_dir, root) = root();
    let read = |p: &str| Target::file(p).shared();
    let waves = Plan::new(&root)
        .task("r1", [read("Cargo.toml")], NONE)
        .task(
            "r2",
            [read("Cargo.toml"), Target::tree("src").shared()],
            NONE,
        )
        .task("w", ["src/a.rs"], ["r2"])
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["r1", "r2"], vec!["w"]]);
    let (first, second, path) = conflict(
        Plan::new(&root)
            .task("reader", [read("Cargo.toml")], NONE)
            .task("writer", ["Cargo.toml"], NONE)
            .validate(),
    );
    assert_eq!((first.as_str(), second.as_str()), ("reader", "writer"));
    assert_eq!(path, root.join("Cargo.toml"));
    // A shared tree against an exclusive file beneath it clashes too.
    conflict(
        Plan::new(&root)
            .task("reader", [Target::tree("src").shared()], NONE)
            .task("writer", ["src/lib.rs"], NONE)
            .validate(),
    );
}

#[test]
fn keys_resolve_as_the_scheduler_resolves_them() {
    let (_dir, root) = root();
    std::fs::create_dir_all(root.join("real")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
    // Through a symlink, `..`, `.`, doubled separators, an absolute spelling.
    for (a, b) in [
        ("link/x.rs", "real/x.rs"),
        ("src/../a.rs", "a.rs"),
        ("./src//b.rs", "src/b.rs"),
    ] {
        let (_, _, path) = conflict(
            Plan::new(&root)
                .task("one", [a], NONE)
                .task("two", [b], NONE)
                .validate(),
        );
        assert_eq!(path, root.join(b), "{a} vs {b}");
    }
    let absolute = root.join("abs.rs");
    conflict(
        Plan::new(&root)
            .task("one", [absolute.as_path()], NONE)
            .task("two", ["abs.rs"], NONE)
            .validate(),
    );
    // The root itself may be spelled through a symlink.
    let (_dir2, other) = self::root();
    std::os::unix::fs::symlink(&root, other.join("ws")).unwrap();
    let (_, _, path) = conflict(
        Plan::new(other.join("ws"))
            .task("one", ["f"], NONE)
            .task("two", ["f"], NONE)
            .validate(),
    );
    assert_eq!(path, root.join("f"));
}

#[test]
fn case_follows_the_configured_mode() {
    let (_dir, root) = root();
    let plan = || {
        Plan::new(&root)
            .task("one", ["Src/Lex.rs"], NONE)
            .task("two", ["src/lex.RS"], NONE)
    };
    let (_, _, path) = conflict(plan().case(CaseMode::Insensitive).validate());
    assert_eq!(path, root.join("Src/Lex.rs"), "the caller's spelling");
    assert_eq!(
        plan().case(CaseMode::Sensitive).validate().unwrap().len(),
        1
    );
    #[cfg(target_os = "linux")]
    assert_eq!(plan().validate().unwrap().len(), 1, "Linux's default");
}

#[test]
fn the_workspace_target_overlaps_everything() {
    let (_dir, root) = root();
    let (first, second, path) = conflict(
        Plan::new(&root)
            .task("edit", ["deep/down/file.rs"], NONE)
            .task("shell", [Target::workspace()], NONE)
            .validate(),
    );
    assert_eq!((first.as_str(), second.as_str()), ("edit", "shell"));
    assert_eq!(path, root.join("deep/down/file.rs"));
    let waves = Plan::new(&root)
        .task("edit", ["deep/down/file.rs"], NONE)
        .task("shell", [Target::workspace()], ["edit"])
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["edit"], vec!["shell"]]);
}

#[test]
fn the_first_conflicting_pair_in_insertion_order_is_reported() {
    let (_dir, root) = root();
    // Unordered overlapping pairs: (b, d) on y, (a, c) on x, (c, d) on z.
    let plan = Plan::new(&root)
        .task("a", ["x"], NONE)
        .task("b", ["y"], NONE)
        .task("c", ["x", "z"], NONE)
        .task("d", ["y", "z"], NONE);
    for _ in 0..3 {
        let (first, second, path) = conflict(plan.validate());
        assert_eq!((first.as_str(), second.as_str()), ("a", "c"));
        assert_eq!(path, root.join("x"));
    }
    let (first, second, _) = conflict(plan.clone().task("e", ["q"], NONE).validate());
    assert_eq!((first.as_str(), second.as_str()), ("a", "c"));
    // Ordering (a, c) leaves (b, d) as the first.
    let plan = Plan::new(&root)
        .task("a", ["x"], NONE)
        .task("b", ["y"], NONE)
        .task("c", ["x", "z"], ["a"])
        .task("d", ["y", "z"], NONE);
    let (first, second, path) = conflict(plan.validate());
    assert_eq!((first.as_str(), second.as_str()), ("b", "d"));
    assert_eq!(path, root.join("y"));
}

#[test]
fn unresolvable_roots_and_targets_get_the_schedulers_errors() {
    let (_dir, root) = root();
    match Plan::new(root.join("missing"))
        .task("a", ["x"], NONE)
        .validate()
    {
        Err(Error::InvalidPath { .. }) => {}
        other => panic!("expected InvalidPath, got {other:?}"),
    }
    match Plan::new(&root).task("a", ["../outside"], NONE).validate() {
        Err(Error::OutsideGrant { .. }) => {}
        other => panic!("expected OutsideGrant, got {other:?}"),
    }
    for bad in ["", "CON", "trailing."] {
        match Plan::new(&root).task("a", [bad], NONE).validate() {
            Err(Error::InvalidPath { .. }) => {}
            other => panic!("expected InvalidPath for {bad:?}, got {other:?}"),
        }
    }
    assert!(
        Plan::new(&root)
            .portable_names(false)
            .task("a", ["CON"], NONE)
            .validate()
            .is_ok()
    );
}

// ---------------------------------------------------------------- structure

#[test]
fn cycles_name_the_tasks_on_one_cycle() {
    let (_dir, root) = root();
    let tasks = cycle(
        Plan::new(&root)
            .task("free", ["f"], NONE)
            .task("a", ["a"], ["c"])
            .task("b", ["b"], ["a"])
            .task("c", ["c"], ["b"])
            .validate(),
    );
    // Each depends on the next, the last on the first.
    assert_eq!(tasks, ["a", "c", "b"]);
    let message = Plan::new(&root)
        .task("a", ["a"], ["b"])
        .task("b", ["b"], ["a"])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(message.contains("cycle through a -> b"), "{message}");
    // A task that depends on itself.
    assert_eq!(
        cycle(Plan::new(&root).task("me", ["m"], ["me"]).validate()),
        ["me"]
    );
    // Two cycles in one component: the shortest one back to the earliest task.
    let tasks = cycle(
        Plan::new(&root)
            .task("x", ["x"], ["y"])
            .task("y", ["y"], ["z", "x"])
            .task("z", ["z"], ["y"])
            .validate(),
    );
    assert_eq!(tasks, ["x", "y"]);
    // Tasks leading into a cycle are not on it.
    let tasks = cycle(
        Plan::new(&root)
            .task("head", ["h"], ["p"])
            .task("p", ["p"], ["q"])
            .task("q", ["q"], ["p"])
            .validate(),
    );
    assert_eq!(tasks, ["p", "q"]);
}

#[test]
fn malformed_plans_are_invalid() {
    let (_dir, root) = root();
    let reason = invalid(
        Plan::new(&root)
            .task("a", ["a"], NONE)
            .task("b", ["b"], ["a", "setup"])
            .validate(),
    );
    assert!(
        reason.contains("'b'") && reason.contains("'setup'"),
        "{reason}"
    );
    let reason = invalid(
        Plan::new(&root)
            .task("a", ["a"], NONE)
            .task("a", ["b"], NONE)
            .validate(),
    );
    assert!(reason.contains("'a'"), "{reason}");
    invalid(Plan::new(&root).task("", ["a"], NONE).validate());
}

#[test]
fn precedence_is_invalid_plan_then_cycle_then_conflict() {
    let (_dir, root) = root();
    // All three: a duplicate name, a cycle, a conflict.
    invalid(
        Plan::new(&root)
            .task("a", ["x"], ["b"])
            .task("b", ["y"], ["a"])
            .task("c", ["x"], NONE)
            .task("c", ["z"], NONE)
            .validate(),
    );
    // An unknown dependency, a cycle and a conflict.
    invalid(
        Plan::new(&root)
            .task("a", ["x"], ["b"])
            .task("b", ["y"], ["a", "ghost"])
            .task("c", ["x"], NONE)
            .validate(),
    );
    // A cycle and a conflict.
    cycle(
        Plan::new(&root)
            .task("c", ["x"], NONE)
            .task("a", ["x"], ["b"])
            .task("b", ["y"], ["a"])
            .validate(),
    );
    // A cycle and an unresolvable target: the graph is judged first.
    cycle(Plan::new(&root).task("a", ["../out"], ["a"]).validate());
}

// ---------------------------------------------------------------- waves

#[test]
fn independent_tasks_share_the_first_wave_in_insertion_order() {
    let (_dir, root) = root();
    let waves = Plan::new(&root)
        .task("z", ["z"], NONE)
        .task("m", ["m"], NONE)
        .task("a", ["a"], NONE)
        .validate()
        .unwrap();
    assert_eq!(waves, [["z", "m", "a"]]);
    assert!(Plan::new(&root).validate().unwrap().is_empty());
    // A task that writes nothing can still be ordered.
    let waves = Plan::new(&root)
        .task("review", Vec::<&str>::new(), ["m"])
        .task("m", ["m"], NONE)
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["m"], vec!["review"]]);
}

#[test]
fn a_wave_is_the_longest_dependency_chain() {
    let (_dir, root) = root();
    // d depends on a directly and, through b and c, at depth 3.
    let waves = Plan::new(&root)
        .task("d", ["d"], ["a", "c"])
        .task("c", ["c"], ["b"])
        .task("b", ["b"], ["a"])
        .task("a", ["a"], NONE)
        .task("e", ["e"], ["a"])
        .validate()
        .unwrap();
    assert_eq!(waves, [vec!["a"], vec!["b", "e"], vec!["c"], vec!["d"]]);
}

/// A path (from a small alphabet), whether it is a tree, whether it is shared.
type ModelTarget = (String, bool, bool);
/// A task's targets and the indices of the tasks it depends on.
type ModelTask = (Vec<ModelTarget>, Vec<usize>);

/// A random plan: task `i` may depend on any task added before it (so the
/// graph is acyclic), and writes a few paths from a small alphabet, some as
/// trees, some shared. Insertion order is then shuffled by `rotate`.
fn arbitrary_plan() -> impl Strategy<Value = Vec<ModelTask>> {
    let target = ("[a-c](/[a-c]){0,2}", any::<bool>(), any::<bool>());
    let task = (
        prop::collection::vec(target, 0..3),
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    );
    prop::collection::vec(task, 1..9).prop_map(|tasks| {
        tasks
            .into_iter()
            .enumerate()
            .map(|(i, (targets, deps))| {
                let deps = if i == 0 {
                    Vec::new()
                } else {
                    deps.iter().map(|d| d.index(i)).collect()
                };
                (targets, deps)
            })
            .collect()
    })
}

/// The naive model: every pair, overlap by prefix, reachability by search.
fn naive_first_conflict(
    root: &Path,
    order: &[usize],
    tasks: &[ModelTask],
) -> Option<(usize, usize)> {
    let reaches = |from: usize, to: usize| {
        let mut stack = vec![from];
        let mut seen = vec![false; tasks.len()];
        while let Some(t) = stack.pop() {
            if t == to {
                return true;
            }
            if !std::mem::replace(&mut seen[t], true) {
                stack.extend(tasks[t].1.iter().copied());
            }
        }
        false
    };
    let overlap = |(pa, ta, sa): &ModelTarget, (pb, tb, sb): &ModelTarget| {
        let (a, b) = (root.join(pa), root.join(pb));
        let touch = a == b || (*ta && b.starts_with(&a)) || (*tb && a.starts_with(&b));
        touch && !(*sa && *sb)
    };
    // Pairs in insertion order: by first position, then second.
    for (i, &a) in order.iter().enumerate() {
        for &b in &order[i + 1..] {
            let clash = tasks[a]
                .0
                .iter()
                .any(|x| tasks[b].0.iter().any(|y| overlap(x, y)));
            if clash && !reaches(a, b) && !reaches(b, a) {
                return Some((a, b));
            }
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn validation_matches_a_naive_model(tasks in arbitrary_plan(), rotate in 0usize..8) {
        let (_dir, root) = root();
        let name = |t: usize| format!("t{t}");
        // Insertion order differs from creation order, so dependencies may
        // point forward as well as back.
        let mut order: Vec<usize> = (0..tasks.len()).collect();
        order.rotate_left(rotate % tasks.len());
        let mut plan = Plan::new(&root);
        for &t in &order {
            let (targets, deps) = &tasks[t];
            let targets: Vec<Target> = targets
                .iter()
                .map(|(p, tree, shared)| {
                    let target = if *tree { Target::tree(p) } else { Target::file(p) };
                    if *shared { target.shared() } else { target }
                })
                .collect();
            let deps: Vec<String> = deps.iter().map(|&d| name(d)).collect();
            plan = plan.task(name(t), targets, deps.iter().map(String::as_str));
        }
        match (plan.validate(), naive_first_conflict(&root, &order, &tasks)) {
            (Ok(waves), None) => {
                // A valid topological layering, each task as early as possible,
                // insertion order within a wave.
                let wave_of: HashMap<String, usize> = waves
                    .iter()
                    .enumerate()
                    .flat_map(|(w, names)| names.iter().map(move |n| (n.clone(), w)))
                    .collect();
                prop_assert_eq!(wave_of.len(), tasks.len());
                for (t, (_, deps)) in tasks.iter().enumerate() {
                    let earliest = deps.iter().map(|&d| wave_of[&name(d)] + 1).max().unwrap_or(0);
                    prop_assert_eq!(wave_of[&name(t)], earliest);
                }
                for names in &waves {
                    prop_assert!(!names.is_empty());
                    let positions: Vec<usize> = names
                        .iter()
                        .map(|n| order.iter().position(|&t| name(t) == *n).unwrap())
                        .collect();
                    prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
                }
            }
            (Err(Error::PlanConflict { first, second, .. }), Some((a, b))) => {
                prop_assert_eq!((first, second), (name(a), name(b)));
            }
            (got, expected) => {
                prop_assert!(false, "validate gave {:?}, the model {:?}", got, expected);
            }
        }
    }
}
