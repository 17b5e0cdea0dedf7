//! Plan validation: before anything starts, check that tasks which may run
//! at the same time never write the same paths.
//!
//! An orchestrator that splits work into tasks knows, before it spawns a
//! single agent, which paths each task will write and which tasks must wait
//! for which. [`Plan::validate`] checks that knowledge against the rules the
//! scheduler will apply at run time:
//!
//! - every pair of tasks whose write sets overlap — judged by the same
//!   resolution, overlap and mode rules as the scheduler's holds: two
//!   shared targets do not clash, exclusive against anything does — must be
//!   ordered by the dependency graph, directly or transitively; otherwise
//!   [`Error::PlanConflict`] names both tasks and a path they both write;
//! - dependencies must not form a cycle ([`Error::PlanCycle`] names the
//!   tasks on one);
//! - every dependency must name a task of the plan, and no two tasks may
//!   share a name ([`Error::InvalidPlan`]).
//!
//! When several apply, `InvalidPlan` is reported first, then `PlanCycle`,
//! then `PlanConflict`. Targets that cannot be resolved (outside the root,
//! malformed) are reported with the scheduler's own errors
//! ([`Error::OutsideGrant`], [`Error::InvalidPath`]) once the graph is known
//! to be sound, before conflicts are looked for.
//!
//! A valid plan yields its *waves*: a task's wave is the length of its
//! longest dependency chain, so each task runs as early as its dependencies
//! allow and independent tasks share the first wave. Within a wave, tasks
//! keep the order they were added in.
//!
//! ```
//! # fn main() -> Result<(), writ::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let root = dir.path();
//! use writ::plan::Plan;
//!
//! let plan = Plan::new(root)
//!     .task("lexer", ["src/parser/lex.rs"], [])
//!     .task("parser", ["src/parser/"], [])
//!     .task("docs", ["docs/"], []);
//! // lexer and parser both write src/parser/lex.rs, and nothing orders them.
//! match plan.clone().validate() {
//!     Err(writ::Error::PlanConflict { first, second, path }) => {
//!         assert_eq!((first.as_str(), second.as_str()), ("lexer", "parser"));
//!         assert!(path.ends_with("src/parser/lex.rs"));
//!     }
//!     other => panic!("expected PlanConflict, got {other:?}"),
//! }
//!
//! // Ordering them fixes it; docs is independent and shares the first wave.
//! let waves = Plan::new(root)
//!     .task("lexer", ["src/parser/lex.rs"], [])
//!     .task("parser", ["src/parser/"], ["lexer"])
//!     .task("docs", ["docs/"], [])
//!     .validate()?;
//! assert_eq!(waves, vec![vec!["lexer", "docs"], vec!["parser"]]);
//! # Ok(()) }
//! ```
//!
//! # Implementation details
//!
//! Validation runs in four passes, each only if the previous one passed:
//! names (a hash map), the dependency graph (a petgraph `DiGraph` with one
//! node per task in insertion order; `toposort` for order and, on failure,
//! `tarjan_scc` to find a cycle), resolution of every target into the
//! scheduler's keys, and conflicts.
//!
//! Conflicts are found without comparing every pair of tasks: all keys of
//! all tasks are sorted component-wise, which puts every path right after
//! the trees that contain it, and one sweep with a stack of the enclosing
//! trees yields exactly the overlapping pairs. Only those are judged by the
//! scheduler's conflict rule (`table::conflict`) and checked against the
//! transitive closure of the dependency graph, kept as one bit set of
//! ancestors per task. The cost is O(K log K) for K keys plus the number of
//! overlapping pairs, and O(T²/64) words for T tasks' closure.

use std::collections::HashMap;
use std::path::PathBuf;

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::core::key::{self, CaseMode, Key, Mode, Target};
use crate::core::table::{self, ActorId, Claim, HoldKind};
use crate::error::{Error, Result};
use crate::sched::resolve::{self, Resolver};

/// One task of a plan: a name, the paths it writes, the tasks it waits for.
#[derive(Debug, Clone)]
struct Task {
    name: String,
    targets: Vec<Target>,
    depends_on: Vec<String>,
}

/// A set of tasks with write targets and dependencies, checked before
/// anything starts.
///
/// Paths resolve against `root` exactly as an actor's targets resolve
/// against its grant root: symlinks of the existing prefix are followed, a
/// trailing `/` (or [`Target::tree`]) means a tree, [`Target::workspace`] is
/// the whole root, and [`Target::shared`] marks a path the task only reads
/// while others may too. Case and portable-name rules default to those of
/// [`Config::default`](crate::Config::default); set them with
/// [`Plan::case`] and [`Plan::portable_names`] to match the scheduler's
/// configuration.
///
/// ```
/// # fn main() -> Result<(), writ::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// use writ::plan::Plan;
/// use writ::Target;
///
/// let schema = || Target::file("db/schema.sql").shared();
/// let waves = Plan::new(dir.path())
///     .task("schema", ["db/schema.sql"], [])
///     // Both read the schema: shared targets never clash with each other.
///     .task("api", [Target::tree("src/api"), schema()], ["schema"])
///     .task("client", [Target::tree("src/client"), schema()], ["schema"])
///     .task("changelog", ["CHANGELOG.md"], [])
///     // An opaque tool (a release script) may write anything: it goes last.
///     .task("release", [Target::workspace()], ["api", "client", "changelog"])
///     .validate()?;
/// assert_eq!(
///     waves,
///     vec![vec!["schema", "changelog"], vec!["api", "client"], vec!["release"]]
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a plan does nothing until it is validated"]
pub struct Plan {
    root: PathBuf,
    case: CaseMode,
    portable_names: bool,
    tasks: Vec<Task>,
}

impl Plan {
    /// An empty plan whose relative paths resolve against `root` (a
    /// directory that must exist when the plan is validated).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Plan {
            root: root.into(),
            case: CaseMode::default(),
            portable_names: true,
            tasks: Vec::new(),
        }
    }

    /// Adds a task: its name, the paths it writes (anything that converts
    /// into a [`Target`]; a task may write nothing) and the names of the
    /// tasks that must finish before it starts.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let plan = writ::plan::Plan::new(dir.path())
    ///     .task("a", ["src/a.rs"], [])
    ///     .task("b", ["src/"], ["a"]);
    /// assert_eq!(plan.validate().unwrap(), vec![vec!["a"], vec!["b"]]);
    /// ```
    pub fn task<'a, I, D>(
        mut self,
        name: impl Into<String>,
        write_targets: I,
        depends_on: D,
    ) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Target>,
        D: IntoIterator<Item = &'a str>,
    {
        self.tasks.push(Task {
            name: name.into(),
            targets: write_targets.into_iter().map(Into::into).collect(),
            depends_on: depends_on.into_iter().map(str::to_string).collect(),
        });
        self
    }

    /// How paths compare (default as [`Config::case`](crate::Config::case)).
    pub fn case(mut self, case: CaseMode) -> Self {
        self.case = case;
        self
    }

    /// Refuse Windows reserved names and trailing dots or spaces (default
    /// on, as [`Config::portable_names`](crate::Config::portable_names)).
    pub fn portable_names(mut self, on: bool) -> Self {
        self.portable_names = on;
        self
    }

    /// Checks the plan and returns its waves: `waves[i]` holds the tasks
    /// whose longest dependency chain has `i` links, in insertion order.
    /// Every task of a wave can start once the earlier waves are done, and
    /// no two tasks of one wave write overlapping paths.
    ///
    /// Errors, in this order of precedence: [`Error::InvalidPlan`] (an empty
    /// or duplicate task name, or a dependency on a task the plan does not
    /// have), [`Error::PlanCycle`] (the tasks on one cycle, each depending on
    /// the next and the last on the first), [`Error::InvalidPath`] or
    /// [`Error::OutsideGrant`] for a root or target that cannot be resolved,
    /// and [`Error::PlanConflict`] for the first pair of unordered tasks, in
    /// insertion order, whose writes overlap.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use writ::plan::Plan;
    /// let cyclic = Plan::new(dir.path())
    ///     .task("a", ["a.rs"], ["b"])
    ///     .task("b", ["b.rs"], ["a"]);
    /// match cyclic.validate() {
    ///     Err(writ::Error::PlanCycle { tasks }) => assert_eq!(tasks, ["a", "b"]),
    ///     other => panic!("expected PlanCycle, got {other:?}"),
    /// }
    /// let unknown = Plan::new(dir.path()).task("a", ["a.rs"], ["setup"]);
    /// assert!(matches!(unknown.validate(), Err(writ::Error::InvalidPlan { .. })));
    /// ```
    pub fn validate(&self) -> Result<Vec<Vec<String>>> {
        let deps = self.dependency_indices()?;
        let graph = dependency_graph(&deps);
        let order = match toposort(&graph, None) {
            Ok(order) => order,
            Err(_) => {
                return Err(Error::PlanCycle {
                    tasks: self.a_cycle(&graph, &deps),
                });
            }
        };
        let claims = self.claims()?;
        let ancestors = Ancestors::new(&order, &deps);
        if let Some(conflict) = first_conflict(&claims, &ancestors) {
            return Err(conflict.into_error(self));
        }
        Ok(self.waves(&order, &deps))
    }

    /// Checks names and maps each task's dependencies to task indices
    /// (deduplicated, in the order they were given).
    fn dependency_indices(&self) -> Result<Vec<Vec<usize>>> {
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(self.tasks.len());
        for (i, task) in self.tasks.iter().enumerate() {
            if task.name.is_empty() {
                return Err(Error::InvalidPlan {
                    reason: format!("task #{} has an empty name", i + 1),
                });
            }
            if index.insert(task.name.as_str(), i).is_some() {
                return Err(Error::InvalidPlan {
                    reason: format!(
                        "two tasks are named '{}'; task names must be unique",
                        task.name
                    ),
                });
            }
        }
        self.tasks
            .iter()
            .map(|task| {
                let mut deps: Vec<usize> = Vec::with_capacity(task.depends_on.len());
                for dep in &task.depends_on {
                    let Some(&d) = index.get(dep.as_str()) else {
                        return Err(Error::InvalidPlan {
                            reason: format!(
                                "task '{}' depends on '{dep}', which is not a task of the plan",
                                task.name
                            ),
                        });
                    };
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
                Ok(deps)
            })
            .collect()
    }

    /// The names of the tasks on one cycle, for a graph `toposort` refused.
    ///
    /// Deterministic: among the strongly connected components that contain
    /// a cycle, the one holding the earliest-added task; from that task, the
    /// shortest way back to it along dependencies (breadth-first, each
    /// task's dependencies in the order given).
    fn a_cycle(&self, graph: &DiGraph<(), ()>, deps: &[Vec<usize>]) -> Vec<String> {
        let cyclic = tarjan_scc(graph)
            .into_iter()
            .filter_map(|scc| {
                let members: Vec<usize> = scc.iter().map(|n| n.index()).collect();
                let start = *members.iter().min()?;
                let cyclic = members.len() > 1 || deps[start].contains(&start);
                cyclic.then_some((start, members))
            })
            .min_by_key(|(start, _)| *start);
        let Some((start, members)) = cyclic else {
            // toposort found a cycle, so some component has one; naming
            // every task is a safe answer if that ever failed to hold.
            return self.tasks.iter().map(|t| t.name.clone()).collect();
        };
        let mut in_scc = vec![false; self.tasks.len()];
        for &m in &members {
            in_scc[m] = true;
        }
        // Breadth-first from `start` along "depends on" edges inside the
        // component, until an edge leads back to `start`.
        let mut came_from: Vec<Option<usize>> = vec![None; self.tasks.len()];
        let mut frontier = std::collections::VecDeque::from([start]);
        let mut last = None;
        'search: while let Some(t) = frontier.pop_front() {
            for &d in &deps[t] {
                if d == start {
                    last = Some(t);
                    break 'search;
                }
                if in_scc[d] && came_from[d].is_none() {
                    came_from[d] = Some(t);
                    frontier.push_back(d);
                }
            }
        }
        let mut cycle = Vec::new();
        let mut at = last;
        while let Some(t) = at {
            cycle.push(t);
            at = if t == start { None } else { came_from[t] };
        }
        if cycle.is_empty() {
            // Unreachable (a cyclic component has a cycle through each of
            // its tasks); the component is still a truthful answer.
            cycle = members;
        }
        cycle.reverse();
        cycle
            .into_iter()
            .map(|t| self.tasks[t].name.clone())
            .collect()
    }

    /// Resolves every task's targets into merged keys, as one claim per task.
    fn claims(&self) -> Result<Vec<Claim>> {
        let root = resolve::canonical_root(&self.root)?;
        let resolver = Resolver::new(root, Vec::new(), self.case, self.portable_names);
        self.tasks
            .iter()
            .enumerate()
            .map(|(i, task)| {
                let keys = task
                    .targets
                    .iter()
                    .map(|target| {
                        let key = if target.is_workspace() {
                            resolver.key_for(resolver.root.clone(), true)
                        } else {
                            resolver.resolve(target)?.0
                        };
                        Ok((key, target.mode()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                // Each task is its own actor with no ancestors, so no claim
                // covers another and the table's matrix alone decides; tasks
                // are judged as fences, the claim they will run under.
                let owner = ActorId(i as u64);
                Ok(Claim {
                    owner,
                    lineage: [owner].into_iter().collect(),
                    kind: HoldKind::Fence,
                    keys: key::merge(keys),
                })
            })
            .collect()
    }

    /// Groups tasks by the length of their longest dependency chain.
    fn waves(&self, order: &[NodeIndex], deps: &[Vec<usize>]) -> Vec<Vec<String>> {
        let mut wave = vec![0usize; self.tasks.len()];
        for node in order {
            let t = node.index();
            wave[t] = deps[t].iter().map(|&d| wave[d] + 1).max().unwrap_or(0);
        }
        let count = wave.iter().max().map_or(0, |w| w + 1);
        let mut waves = vec![Vec::new(); count];
        for (t, task) in self.tasks.iter().enumerate() {
            waves[wave[t]].push(task.name.clone());
        }
        waves
    }
}

/// One node per task (index = insertion order), one edge per dependency,
/// from the dependency to the task that waits for it.
fn dependency_graph(deps: &[Vec<usize>]) -> DiGraph<(), ()> {
    let edges: usize = deps.iter().map(Vec::len).sum();
    let mut graph = DiGraph::with_capacity(deps.len(), edges);
    for _ in deps {
        graph.add_node(());
    }
    for (t, ds) in deps.iter().enumerate() {
        for &d in ds {
            graph.add_edge(NodeIndex::new(d), NodeIndex::new(t), ());
        }
    }
    graph
}

/// The transitive closure of "depends on": one bit set per task of the
/// tasks it waits for, directly or not.
struct Ancestors {
    words: usize,
    bits: Vec<u64>,
}

impl Ancestors {
    /// Fills the sets in topological order, so each dependency's set is
    /// complete before it is merged into its dependents'.
    fn new(order: &[NodeIndex], deps: &[Vec<usize>]) -> Self {
        let words = deps.len().div_ceil(64);
        let mut bits = vec![0u64; words * deps.len()];
        for node in order {
            let t = node.index();
            for &d in &deps[t] {
                for w in 0..words {
                    bits[t * words + w] |= bits[d * words + w];
                }
                bits[t * words + d / 64] |= 1 << (d % 64);
            }
        }
        Ancestors { words, bits }
    }

    /// Does `task` wait, directly or transitively, for `other`?
    fn waits_for(&self, task: usize, other: usize) -> bool {
        self.bits[task * self.words + other / 64] & (1 << (other % 64)) != 0
    }

    fn ordered(&self, a: usize, b: usize) -> bool {
        self.waits_for(a, b) || self.waits_for(b, a)
    }
}

/// Two unordered tasks (`first` added before `second`) and a path both write.
struct Conflict {
    first: usize,
    second: usize,
    path: PathBuf,
}

impl Conflict {
    fn into_error(self, plan: &Plan) -> Error {
        Error::PlanConflict {
            first: plan.tasks[self.first].name.clone(),
            second: plan.tasks[self.second].name.clone(),
            path: self.path,
        }
    }
}

/// One key of one task, for the sweep.
struct Entry<'a> {
    task: usize,
    key: &'a Key,
    mode: Mode,
}

/// The unordered pair of tasks with clashing writes that comes first in
/// insertion order (smallest first task, then smallest second task), with
/// the deepest path both write.
fn first_conflict(claims: &[Claim], ancestors: &Ancestors) -> Option<Conflict> {
    let mut entries: Vec<Entry<'_>> = claims
        .iter()
        .enumerate()
        .flat_map(|(task, claim)| {
            claim.keys.iter().map(move |(key, mode)| Entry {
                task,
                key,
                mode: *mode,
            })
        })
        .collect();
    // Component-wise order puts everything under a path right after it, so
    // a tree stays on the stack exactly while the sweep is inside it.
    entries.sort_by(|a, b| a.key.norm.cmp(&b.key.norm).then(a.task.cmp(&b.task)));

    let mut best: Option<(usize, usize)> = None;
    let mut consider = |a: &Entry<'_>, b: &Entry<'_>| {
        if a.task == b.task || !table::clash((HoldKind::Fence, a.mode), (HoldKind::Fence, b.mode)) {
            return;
        }
        let pair = (a.task.min(b.task), a.task.max(b.task));
        if best.is_some_and(|best| best <= pair) || ancestors.ordered(pair.0, pair.1) {
            return;
        }
        best = Some(pair);
    };
    let mut trees: Vec<&Entry<'_>> = Vec::new(); // enclosing trees, outermost first
    let mut same: Vec<&Entry<'_>> = Vec::new(); // exact keys equal to the current path
    for entry in &entries {
        while trees
            .last()
            .is_some_and(|t| !entry.key.norm.starts_with(&t.key.norm))
        {
            trees.pop();
        }
        if same.first().is_some_and(|s| s.key.norm != entry.key.norm) {
            same.clear();
        }
        for other in trees.iter().chain(same.iter()) {
            consider(other, entry);
        }
        if entry.key.tree {
            trees.push(entry);
        } else {
            same.push(entry);
        }
    }

    let (first, second) = best?;
    let (a, b) = (&claims[first], &claims[second]);
    // Report the overlap itself: of two overlapping keys, the deeper one is
    // what both write.
    let path = a.keys.iter().find_map(|(ka, ma)| {
        b.keys
            .iter()
            .find(|(kb, mb)| {
                key::overlaps(ka, kb)
                    && table::clash((HoldKind::Fence, *ma), (HoldKind::Fence, *mb))
            })
            .map(|(kb, _)| {
                if key::inside(ka, kb) {
                    ka.path.clone()
                } else {
                    kb.path.clone()
                }
            })
    })?;
    Some(Conflict {
        first,
        second,
        path,
    })
}

/// The examples of `docs/ORCHESTRATION.md`, compiled and run with the
/// doctests so that the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../docs/ORCHESTRATION.md")]
pub struct OrchestrationGuide;
