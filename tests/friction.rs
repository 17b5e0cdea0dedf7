//! The friction benchmark's short form (`examples/friction`): a few
//! scripted agents through writ's `/mcp`, a blind overwrite and a git
//! worktree each, with the think times scaled down. Through writ no update
//! is lost and every call is accounted for; the oracle finds the updates
//! the worktree merge loses.

#![cfg(all(feature = "server", feature = "mcp"))]

#[path = "common/mcp_http_client.rs"]
mod mcp_http_client;
// The command line's half of the workload is not used here.
#[allow(dead_code)]
#[path = "../examples/friction/workload.rs"]
mod workload;

use workload::{MIN_CALLS, Mode, Params, RegistryEdit};

#[test]
fn the_short_form_loses_nothing_through_writ_and_accounts_for_every_call() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (agents, tasks) = (4, 3);
    let all = agents * tasks;
    // The natural registry edit (the last entry and the bracket) as well
    // as the end-marker one: neither is ever refused when anchored.
    let runs = [RegistryEdit::Marker, RegistryEdit::Natural]
        .into_iter()
        .flat_map(|registry| Mode::ALL.map(|mode| (registry, mode)));
    for (registry, mode) in runs {
        let params = Params::new(agents, tasks, 1, 0.02).registry(registry);
        let r = runtime
            .block_on(workload::run(mode, &params, dir.path()))
            .unwrap_or_else(|e| panic!("{}: {e}", mode.name()));
        let refusals: usize = r.refusals.values().sum();
        let what = format!("{} {}: {r:?}", mode.name(), registry.name());
        assert_eq!(r.intended, all * 4, "{what}");
        match mode {
            Mode::Writ
            | Mode::WritModern
            | Mode::WritNoClaims
            | Mode::WritStrict
            | Mode::WritReread => {
                assert_eq!((r.lost, r.extra), (0, 0), "{what}");
                assert_eq!(r.landed_tasks, all, "{what}");
                assert!(r.refusals.keys().all(|(kind, _)| kind == "stale"), "{what}");
                if matches!(mode, Mode::Writ | Mode::WritModern | Mode::WritNoClaims) {
                    // Anchored edits: the registry line, the changelog entry
                    // and the function edit cannot overwrite unseen work;
                    // only the version bump, whose `old` the others change,
                    // is ever refused.
                    assert!(
                        r.refusals.keys().all(|(_, file)| file == "version.py"),
                        "{what}"
                    );
                } else {
                    assert_eq!(r.anchored, 0, "{what}");
                }
                // A refusal that carries the content costs its retry only;
                // one that does not costs a read_file as well.
                let per_refusal = if mode == Mode::WritReread { 2 } else { 1 };
                assert_eq!(r.calls, MIN_CALLS * all + per_refusal * refusals, "{what}");
            }
            Mode::Blind => {
                assert_eq!(
                    (r.accepted, r.calls, refusals),
                    (all * 4, MIN_CALLS * all, 0),
                    "{what}"
                );
            }
            Mode::Worktree => {
                assert_eq!((r.accepted, r.calls), (all * 4, MIN_CALLS * all), "{what}");
                // Every agent bumped 1.0.0 to 1.0.3 and added lines at the
                // registry's one anchor: the merge keeps one agent's.
                assert!(r.conflicts > 0 && r.lost >= all - tasks, "{what}");
            }
        }
    }
}
