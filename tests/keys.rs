//! Properties of paths and keys, through the public API.
//!
//! - `normalize_lexically` is idempotent and leaves no `.`, no inner `..`,
//!   and no `..` above an absolute root.
//! - Every target resolves to a key inside the grant root, or is refused
//!   with `OutsideGrant` / `InvalidPath`; the key equals an oracle that walks
//!   the spelling with the OS's own `canonicalize` for the existing part
//!   (random spellings with `..`, `.`, `//`, absolute forms, and symlinks
//!   pointing inside and outside the root).
//! - The overlap relation, observed through admission (one actor holds a,
//!   another tries b), equals a brute-force component comparison.
//! - Under `CaseMode::Insensitive`, keys compare case-folded (the same
//!   brute-force relation on lower-cased spellings) while the dump keeps the
//!   caller's spelling; under `Sensitive`, spellings differing in case are
//!   distinct.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError, TestError, TestRunner};
use writ::{CaseMode, Config, Error, Grant, Scheduler, Target, normalize_lexically};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/keys.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// Runs a property; each case reports which class of outcome it hit, and
/// every class in `must_see` has to occur (a generator that never produces
/// an outside path or a conflict would pass vacuously).
fn check<S: Strategy>(
    name: &str,
    strategy: S,
    must_see: &[&str],
    test: impl Fn(S::Value) -> Result<&'static str, TestCaseError>,
) {
    let seen: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
    let mut runner = TestRunner::new(ProptestConfig {
        source_file: Some(file!()),
        ..config(2000)
    });
    let result = runner.run(&strategy, |v| {
        let class = test(v)?;
        *seen.lock().unwrap().entry(class).or_default() += 1;
        Ok(())
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, value)) => panic!("{name}: {why}\nminimal input: {value:?}"),
        Err(e) => panic!("{name}: {e}"),
    }
    let seen = seen.into_inner().unwrap();
    eprintln!("{name}: {seen:?}");
    for class in must_see {
        assert!(
            seen.get(class).is_some_and(|&n| n > 0),
            "{name}: never saw {class}: {seen:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Lexical normalization.

fn spelling() -> impl Strategy<Value = String> {
    let comp = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("..".to_string()),
        Just(".".to_string()),
        Just(String::new()), // makes `//`
    ];
    (any::<bool>(), prop::collection::vec(comp, 0..8)).prop_map(|(abs, comps)| {
        let body = comps.join("/");
        if abs { format!("/{body}") } else { body }
    })
}

#[test]
fn normalize_is_idempotent_and_clean() {
    check(
        "normalize",
        spelling(),
        &["absolute", "relative", "climbs"],
        |s| {
            let once = normalize_lexically(Path::new(&s));
            let twice = normalize_lexically(&once);
            prop_assert_eq!(&once, &twice);
            let comps: Vec<Component> = once.components().collect();
            prop_assert!(!comps.contains(&Component::CurDir), "{:?}", once);
            // `..` only as a leading run of a relative path.
            let leading = comps
                .iter()
                .take_while(|c| **c == Component::ParentDir)
                .count();
            prop_assert!(
                comps[leading..].iter().all(|c| *c != Component::ParentDir),
                "{:?}",
                once
            );
            if Path::new(&s).is_absolute() {
                prop_assert!(once.is_absolute());
                prop_assert_eq!(leading, 0);
            }
            // It agrees with a stack evaluation of the spelling.
            let mut stack: Vec<&str> = Vec::new();
            let mut ups = 0usize;
            for c in s.split('/') {
                match c {
                    "" | "." => {}
                    ".." => {
                        if stack.pop().is_none() && !s.starts_with('/') {
                            ups += 1;
                        }
                    }
                    other => stack.push(other),
                }
            }
            let mut want = PathBuf::from(if s.starts_with('/') { "/" } else { "" });
            for _ in 0..ups {
                want.push("..");
            }
            for c in stack {
                want.push(c);
            }
            let climbs = ups > 0;
            prop_assert_eq!(once, want);
            Ok(if climbs {
                "climbs"
            } else if s.starts_with('/') {
                "absolute"
            } else {
                "relative"
            })
        },
    );
}

// ---------------------------------------------------------------------------
// Resolution.

/// base/ws is the grant root:
/// ws/d1/d2/, ws/file, ws/in -> ws/d1 (absolute), ws/d1/up -> .. (relative),
/// ws/out -> base/out (outside), ws/d1/loopy -> ../out (relative, outside).
struct Fixture {
    _dir: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("d1/d2")).unwrap();
        std::fs::create_dir_all(base.join("out/sub")).unwrap();
        std::fs::create_dir_all(base.join("ws-old")).unwrap();
        std::fs::write(ws.join("file"), b"f").unwrap();
        std::os::unix::fs::symlink(ws.join("d1"), ws.join("in")).unwrap();
        std::os::unix::fs::symlink("..", ws.join("d1/up")).unwrap();
        std::os::unix::fs::symlink(base.join("out"), ws.join("out")).unwrap();
        std::os::unix::fs::symlink("../out", ws.join("d1/loopy")).unwrap();
        Fixture {
            _dir: dir,
            base,
            ws,
        }
    })
}

/// The oracle: walks the spelling; each existing step is resolved by the
/// OS (`canonicalize`), a missing remainder is kept lexically, and a `..`
/// that climbs out of the missing part makes the walk existing again.
fn oracle(start: &Path, spelling: &Path) -> PathBuf {
    let mut cur = start.to_path_buf();
    let mut missing = 0usize;
    for c in spelling.components() {
        match c {
            Component::RootDir => {
                cur = PathBuf::from("/");
                missing = 0;
            }
            Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                cur.pop();
                missing = missing.saturating_sub(1);
            }
            Component::Normal(name) => {
                let next = cur.join(name);
                if missing > 0 {
                    missing += 1;
                    cur = next;
                } else if std::fs::symlink_metadata(&next).is_ok() {
                    cur = std::fs::canonicalize(&next).unwrap();
                } else {
                    missing = 1;
                    cur = next;
                }
            }
        }
    }
    cur
}

/// Component-wise containment (never a string prefix).
fn within(path: &Path, root: &Path) -> bool {
    let p: Vec<_> = path.components().collect();
    let r: Vec<_> = root.components().collect();
    p.len() >= r.len() && p[..r.len()] == r[..]
}

fn messy_spelling() -> impl Strategy<Value = (u8, String)> {
    let comp = prop_oneof![
        3 => Just("d1"),
        2 => Just("d2"),
        2 => Just("in"),
        2 => Just("up"),
        2 => Just("out"),
        1 => Just("loopy"),
        1 => Just("sub"),
        1 => Just("file"),
        1 => Just("ws"),
        1 => Just("ws-old"),
        3 => Just(".."),
        2 => Just("."),
        2 => Just("new"),
        1 => Just(""),
    ];
    // 0: relative to the root; 1: absolute under the root; 2: absolute under the base.
    (0u8..3, prop::collection::vec(comp, 1..7))
        .prop_map(|(anchor, comps)| (anchor, comps.join("/")))
}

#[test]
fn resolved_keys_stay_inside_the_root() {
    check(
        "resolution",
        messy_spelling(),
        &["inside", "outside"],
        |(anchor, rel)| {
            let f = fixture();
            let spelling = match anchor {
                0 => PathBuf::from(&rel),
                1 => PathBuf::from(format!("{}/{rel}", f.ws.display())),
                _ => PathBuf::from(format!("{}/{rel}", f.base.display())),
            };
            let sched = Scheduler::new(Config::default());
            let actor = sched.actor("a", Grant::workspace(&f.ws)).unwrap();
            let want = oracle(&f.ws, &spelling);
            match actor.try_admit([Target::file(&spelling)]) {
                Ok(r) => {
                    let paths = r.paths();
                    prop_assert_eq!(paths.len(), 1);
                    prop_assert!(
                        within(&paths[0], &f.ws),
                        "{:?} outside {:?}",
                        paths[0],
                        f.ws
                    );
                    prop_assert_eq!(&paths[0], &want, "spelling {:?}", spelling);
                    Ok("inside")
                }
                Err(Error::OutsideGrant { path, .. }) => {
                    prop_assert!(
                        !within(&want, &f.ws),
                        "{:?} refused, oracle says {:?}",
                        spelling,
                        want
                    );
                    prop_assert_eq!(path, want);
                    Ok("outside")
                }
                Err(Error::InvalidPath { .. }) => {
                    // Only an empty spelling is invalid in this universe.
                    prop_assert!(
                        spelling.as_os_str().is_empty() || rel.split('/').all(|c| c.is_empty()),
                        "{:?} refused as invalid",
                        spelling
                    );
                    Ok("invalid")
                }
                Err(e) => Err(TestCaseError::fail(format!(
                    "unexpected error for {spelling:?}: {e}"
                ))),
            }
        },
    );
}

// ---------------------------------------------------------------------------
// Overlap, through admission.

#[derive(Debug, Clone)]
struct Spec {
    comps: Vec<&'static str>,
    tree: bool,
    shared: bool,
}

fn spec(names: &'static [&'static str]) -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(prop::sample::select(names), 1..=3),
        any::<bool>(),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(comps, tree, shared)| Spec {
            comps,
            tree,
            shared,
        })
}

impl Spec {
    fn target(&self, base: &str) -> Target {
        let path = format!("{base}/{}", self.comps.join("/"));
        let t = if self.tree {
            Target::tree(path)
        } else {
            Target::file(path)
        };
        if self.shared { t.shared() } else { t }
    }
}

/// The brute-force relation: equal components, or a tree whose components
/// are a prefix of the other's.
fn brute_overlap(a: &[String], a_tree: bool, b: &[String], b_tree: bool) -> bool {
    let prefix =
        |s: &[String], l: &[String]| s.len() <= l.len() && s.iter().zip(l).all(|(x, y)| x == y);
    a == b || (a_tree && prefix(a, b)) || (b_tree && prefix(b, a))
}

fn fresh_base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

fn root_dir() -> &'static PathBuf {
    static R: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &R.get_or_init(fresh_base).1
}

#[test]
fn admission_conflicts_iff_brute_force_overlap() {
    let specs = || prop::collection::vec(spec(&["p", "q", "pq"]), 1..=2);
    check(
        "overlap",
        (specs(), specs()),
        &["busy", "free"],
        |(a, b)| {
            let root = root_dir();
            let sched = Scheduler::new(Config::default().case(CaseMode::Sensitive));
            let one = sched.actor("one", Grant::workspace(root)).unwrap();
            let two = sched.actor("two", Grant::workspace(root)).unwrap();
            let _held = one.try_admit(a.iter().map(|s| s.target("k"))).unwrap();
            let owned = |s: &Spec| s.comps.iter().map(|c| c.to_string()).collect::<Vec<_>>();
            let expect_busy = a.iter().any(|x| {
                b.iter().any(|y| {
                    brute_overlap(&owned(x), x.tree, &owned(y), y.tree) && !(x.shared && y.shared)
                })
            });
            match two.try_admit(b.iter().map(|s| s.target("k"))) {
                Ok(_) => {
                    prop_assert!(!expect_busy, "admitted {:?} over {:?}", b, a);
                    Ok("free")
                }
                Err(Error::Busy(busy)) => {
                    prop_assert!(expect_busy, "refused {:?} over {:?}: {}", b, a, busy);
                    prop_assert_eq!(busy.holder, "one");
                    Ok("busy")
                }
                Err(e) => Err(TestCaseError::fail(e.to_string())),
            }
        },
    );
}

#[test]
fn case_folding_is_consistent() {
    let names = || spec(&["src", "Src", "SRC", "lex.rs", "Lex.RS"]);
    let classes = [
        "busy-insensitive",
        "free-insensitive",
        "busy-sensitive",
        "free-sensitive",
    ];
    check(
        "case",
        (names(), names(), any::<bool>()),
        &classes,
        |(a, b, insensitive)| {
            let root = root_dir();
            let case = if insensitive {
                CaseMode::Insensitive
            } else {
                CaseMode::Sensitive
            };
            let sched = Scheduler::new(Config::default().case(case));
            let one = sched.actor("one", Grant::workspace(root)).unwrap();
            let two = sched.actor("two", Grant::workspace(root)).unwrap();
            let held = one.try_admit([a.target("cases")]).unwrap();
            // The dump keeps the caller's spelling.
            let spelled = root.join("cases").join(a.comps.join("/"));
            prop_assert_eq!(held.paths(), vec![spelled.clone()]);
            prop_assert_eq!(&sched.dump().holds[0].paths[0].path, &spelled);
            let fold = |s: &Spec| -> Vec<String> {
                s.comps
                    .iter()
                    .map(|c| {
                        if insensitive {
                            c.to_lowercase()
                        } else {
                            c.to_string()
                        }
                    })
                    .collect()
            };
            let expect_busy =
                brute_overlap(&fold(&a), a.tree, &fold(&b), b.tree) && !(a.shared && b.shared);
            let got = two.try_admit([b.target("cases")]);
            prop_assert_eq!(
                got.is_err(),
                expect_busy,
                "{:?} vs {:?} ({:?}): {:?}",
                a,
                b,
                case,
                got.err().map(|e| e.to_string())
            );
            Ok(match (expect_busy, insensitive) {
                (true, true) => "busy-insensitive",
                (false, true) => "free-insensitive",
                (true, false) => "busy-sensitive",
                (false, false) => "free-sensitive",
            })
        },
    );
}

/// `CaseMode::Detect` probes once per scheduler, at the first actor's root,
/// and every actor folds by that answer (§2). A hard link under a
/// case-swapped name makes a root probe as case-insensitive on any file
/// system; a second root without one probes sensitive. Were each root
/// probed on its own, the two actors would fold one file two ways and both
/// hold it exclusively.
#[test]
fn detect_probes_once_and_every_actor_folds_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("Probe"), "x").unwrap();
    std::fs::hard_link(root.join("Probe"), root.join("pROBE")).unwrap();
    let sub = root.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("Plain"), "x").unwrap();
    let s = Scheduler::new(Config::default().case(CaseMode::Detect));
    let lead = s.actor("lead", Grant::workspace(&root)).unwrap();
    let kid = lead.child("kid", Grant::workspace(&sub)).unwrap();
    let other = s.actor("other", Grant::workspace(&sub)).unwrap();
    let _held = lead.try_admit(["sub/F.rs"]).unwrap();
    for actor in [&kid, &other] {
        match actor.try_admit(["f.rs"]) {
            Err(Error::Busy(busy)) => assert_eq!(busy.holder, "lead"),
            other => panic!("one file, two keys: {other:?}"),
        }
    }
    // The other way round: a first root that probes sensitive makes the
    // whole scheduler sensitive.
    let s = Scheduler::new(Config::default().case(CaseMode::Detect));
    let first = s.actor("first", Grant::workspace(&sub)).unwrap();
    let second = s.actor("second", Grant::workspace(&root)).unwrap();
    let _a = first.try_admit(["F.rs"]).unwrap();
    assert!(second.try_admit(["sub/f.rs"]).is_ok());
}

/// `Insensitive` folding is NFC plus full case folding (§2): composed and
/// decomposed spellings, `ß`/`ss`, final sigma and the Kelvin sign are one
/// key each, and the dump keeps the caller's spelling.
#[test]
fn insensitive_folding_is_unicode_correct() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let s = Scheduler::new(Config::default().case(CaseMode::Insensitive));
    let a = s.actor("a", Grant::workspace(&root)).unwrap();
    let b = s.actor("b", Grant::workspace(&root)).unwrap();
    for (held, asked) in [
        ("caf\u{e9}.md", "cafe\u{301}.md"),
        ("CAFE\u{301}.md", "caf\u{e9}.md"),
        ("stra\u{df}e.md", "STRASSE.md"),
        (
            "\u{3bf}\u{3c3}\u{3bf}\u{3c2}.md",
            "\u{39f}\u{3a3}\u{39f}\u{3a3}.md",
        ),
        ("a\u{3c2}.md", "a\u{3c3}.md"),
        ("\u{212a}elvin.md", "kelvin.md"),
        ("\u{1e9e}.md", "ss.md"),
    ] {
        let held_call = a.try_admit([held]).unwrap();
        match b.try_admit([asked]) {
            Err(Error::Busy(busy)) => assert_eq!(busy.holder, "a"),
            other => panic!("{held:?} and {asked:?} are one file: {other:?}"),
        }
        assert_eq!(s.dump().holds[0].paths[0].path, root.join(held));
        drop(held_call);
    }
    // Different names stay different.
    let _x = a.try_admit(["resume.md"]).unwrap();
    assert!(b.try_admit(["r\u{e9}sum\u{e9}.md"]).is_ok());
}
