//! Judging a run's write set and applying it all or nothing (SPEC §17).
//!
//! # Implementation details
//!
//! For each path the run changed, three versions meet: `start` (what the
//! path held when the run began), `run` (what the run left in its layer) and
//! `live` (what the real tree holds now). No tree is copied at the start:
//!
//! - if history holds a write to the path made since the run began, the
//!   pre-image of the first such write is `start`, and its writers are who
//!   changed it meanwhile;
//! - else, if the file's ctime is older than the file system's clock at
//!   the run's start (the ctime of a file made then: file systems stamp
//!   from a coarse clock, so a change in the same tick counts as during
//!   the run — the safe side), `start` is `live`;
//! - else the path was changed outside writ during the run: there is no
//!   base, and that is a conflict.
//!
//! `start == live`: the run's version is applied. Otherwise the two sides
//! are merged line by line (`similar::TextMerge`, a diff3): changes to
//! different lines, and the same change on both sides, merge; overlapping
//! changes, binary files, and a create or delete on either side are
//! conflicts.
//!
//! Then the unseen-work rule: if another agent wrote the path after this
//! agent last read it (history again, and the agent's read mark), the
//! result must keep that agent's change (the diff3 of the change's
//! pre-image, the result and `start` must leave the result as it is), and a
//! delete never does. This refuses `git checkout -- .` over another agent's
//! edit while letting `sed -i` of other lines through.
//!
//! Everything is judged under one reservation on every path of the write
//! set; only when no path conflicts is anything written: pre-images are
//! snapshotted as one history call of the agent (its turn), the files are
//! replaced atomically (`history::fsio`, the file tools' own write path),
//! and a failure part-way puts back what was already written.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use similar::{TextDiff, TextMerge};

use super::overlay::Upper;
use super::passthrough::Rules;
use super::{RunArtifact, RunConflict};
use crate::core::key::Target;
use crate::delegate::Change;
use crate::error::{Error, Result};
use crate::files::gate::{Gate, MarkStore, sha256_hex};
use crate::history::fsio::{self, Current};
use crate::history::record::Record;
use crate::history::{Content, Handle, Post, Pre, WriteKind};
use crate::sched::actor::Actor;

/// The longest diff a conflict carries.
const DIFF_LIMIT: usize = 16 * 1024;

/// What the run's layer asks for at one path.
#[derive(Debug, Clone)]
struct Wanted {
    /// Relative to the root.
    rel: PathBuf,
    /// `None`: remove the file.
    run: Option<(Vec<u8>, u32)>,
}

/// What a commit did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) artifacts: Vec<RunArtifact>,
    pub(crate) conflicts: Vec<RunConflict>,
    pub(crate) passed_through: Vec<PathBuf>,
    pub(crate) notes: Vec<String>,
    /// Whether anything was judged at all (the write set was not empty).
    pub(crate) judged: bool,
    /// What was applied, by folded path, with its content hash (`None`:
    /// removed).
    pub(crate) landed: Vec<(PathBuf, Option<String>)>,
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The regular files under `dir` (relative to `root`) in the real tree.
fn live_files_under(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = rel.join(entry.file_name());
        if kind.is_dir() {
            live_files_under(root, &path, out);
        } else if kind.is_file() {
            out.push(path);
        }
    }
}

/// The write set from the layer's entries, and the ignored paths copied
/// straight through to the real tree.
fn write_set(
    root: &Path,
    upper: &Path,
    entries: &[Upper],
    rules: &Rules,
    out: &mut Outcome,
) -> Result<(Vec<Wanted>, Vec<PathBuf>)> {
    let mut wanted = Vec::new();
    let mut dirs = Vec::new();
    let in_upper: BTreeSet<&Path> = entries
        .iter()
        .filter_map(|e| match e {
            Upper::File(p) => Some(p.as_path()),
            _ => None,
        })
        .collect();
    for entry in entries {
        match entry {
            Upper::File(rel) => {
                let path = upper.join(rel);
                let bytes = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
                let mode = std::fs::metadata(&path)
                    .map(|m| m.permissions().mode() & 0o7777)
                    .unwrap_or(0o644);
                if rules.passes(rel, false) {
                    through_put(root, rel, &bytes, mode)?;
                    out.passed_through.push(rel.clone());
                    continue;
                }
                wanted.push(Wanted {
                    rel: rel.clone(),
                    run: Some((bytes, mode)),
                });
            }
            Upper::Removed(rel) => {
                let real = root.join(rel);
                let meta = std::fs::symlink_metadata(&real);
                if meta.as_ref().is_ok_and(|m| m.is_dir()) {
                    let mut files = Vec::new();
                    live_files_under(root, rel, &mut files);
                    for file in files {
                        remove_or_judge(root, rules, file, &mut wanted, out);
                    }
                    dirs.push(rel.clone());
                } else if meta.is_ok() {
                    remove_or_judge(root, rules, rel.clone(), &mut wanted, out);
                }
            }
            Upper::Opaque(rel) => {
                let mut files = Vec::new();
                live_files_under(root, rel, &mut files);
                for file in files {
                    if !in_upper.contains(file.as_path()) {
                        remove_or_judge(root, rules, file, &mut wanted, out);
                    }
                }
            }
            Upper::Dir(_) => {}
            Upper::Other(rel) => out.notes.push(format!(
                "{} is a symlink or special file in the run's layer; only regular files are committed",
                rel.display()
            )),
        }
    }
    Ok((wanted, dirs))
}

fn remove_or_judge(
    root: &Path,
    rules: &Rules,
    rel: PathBuf,
    wanted: &mut Vec<Wanted>,
    out: &mut Outcome,
) {
    if rules.passes(&rel, false) {
        let _ = std::fs::remove_file(root.join(&rel));
        out.passed_through.push(rel);
    } else {
        wanted.push(Wanted { rel, run: None });
    }
}

/// Writes an ignored path to the real tree without judgement.
fn through_put(root: &Path, rel: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
    }
    std::fs::write(&path, bytes).map_err(|e| Error::io("write", &path, e))?;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
    Ok(())
}

/// One path, judged.
struct Judged {
    rel: PathBuf,
    abs: PathBuf,
    norm: PathBuf,
    live: Option<(Vec<u8>, String, u32)>,
    result: Option<(Vec<u8>, u32)>,
    merged: bool,
}

/// The journal's writes to `abs`, oldest first: (time, actor, before
/// (hash, stored as a blob), after hash).
type Writes = Vec<(u64, String, Option<(String, bool)>, Option<String>)>;

fn writes_to(records: &[Record], abs: &Path) -> Writes {
    let mut out = Vec::new();
    for record in records {
        let Record::Write(w) = record else { continue };
        for change in &w.files {
            if change.path == abs {
                out.push((
                    w.time_ms,
                    w.actor.clone(),
                    change.before.as_ref().map(|b| (b.sha256.clone(), b.blob)),
                    change.after.as_ref().map(|a| a.sha256.clone()),
                ));
            }
        }
    }
    out
}

fn diff(a: &[u8], b: &[u8], from: &str, to: &str) -> String {
    let (Ok(a), Ok(b)) = (std::str::from_utf8(a), std::str::from_utf8(b)) else {
        return format!("binary content ({} bytes → {} bytes)", a.len(), b.len());
    };
    let mut text = TextDiff::from_lines(a, b)
        .unified_diff()
        .header(from, to)
        .to_string();
    if text.len() > DIFF_LIMIT {
        let mut cut = DIFF_LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (cut)\n");
    }
    text
}

/// diff3 of text; `None` when a side is not text or the changes overlap.
fn merge3(base: &[u8], ours: &[u8], theirs: &[u8]) -> Option<Vec<u8>> {
    let (Ok(base), Ok(ours), Ok(theirs)) = (
        std::str::from_utf8(base),
        std::str::from_utf8(ours),
        std::str::from_utf8(theirs),
    ) else {
        return None;
    };
    let merge = TextMerge::from_lines(base, ours, theirs);
    (!merge.is_conflicted()).then(|| merge.to_string().into_bytes())
}

/// What a commit judges: the run's layer and when the run began.
pub(crate) struct Job<'a> {
    pub(crate) root: &'a Path,
    pub(crate) upper: &'a Path,
    pub(crate) entries: &'a [Upper],
    pub(crate) rules: &'a Rules,
    /// The wall clock when the run began (history's clock).
    pub(crate) started: SystemTime,
    /// The file system's clock then, in nanoseconds (ctimes' clock).
    pub(crate) clock: i128,
    /// The reservation's label.
    pub(crate) label: &'a str,
    /// How long the reservation may wait.
    pub(crate) wait: Duration,
    /// A table that admits the write set too, first (an etcd table).
    pub(crate) outer: Option<std::sync::Arc<dyn crate::files::OuterAdmission>>,
}

/// Judges the layer's write set and applies it, all or nothing.
pub(crate) async fn commit(actor: &Actor, job: Job<'_>) -> Result<Outcome> {
    let Job {
        root,
        upper,
        entries,
        rules,
        started,
        clock,
        label,
        wait,
        outer,
    } = job;
    let mut out = Outcome::default();
    let (wanted, removed_dirs) = write_set(root, upper, entries, rules, &mut out)?;
    // A path the run left as the real tree has it now needs no judgement:
    // nobody's work is at stake, and nothing waits for it.
    let mut set = Vec::with_capacity(wanted.len());
    for w in wanted {
        let live = match fsio::current(root, &root.join(&w.rel)) {
            Ok(Current::File { bytes, .. }) => Some(bytes),
            _ => None,
        };
        let same = match (&w.run, &live) {
            (Some((run, _)), Some(live)) => run == live,
            (None, None) => true,
            _ => false,
        };
        if !same {
            set.push(w);
        }
    }
    if set.is_empty() {
        create_dirs(root, entries, rules);
        return Ok(out);
    }
    out.judged = true;

    // One all-or-nothing reservation on the whole write set.
    let mut targets = Vec::with_capacity(set.len());
    let mut places = Vec::with_capacity(set.len());
    for w in &set {
        let (key, _) = actor
            .meta
            .resolver
            .resolve(&Target::file(root.join(&w.rel)))?;
        targets.push(Target::file(key.path.clone()).resolved());
        places.push(key);
    }
    // The outer table first (its holds are what other servers see), with
    // what it knows of each path: this agent's marks live there.
    let known = match outer {
        Some(outer) => {
            let keys: Vec<(crate::core::key::Key, crate::kinds::Mode)> = places
                .iter()
                .map(|k| (k.clone(), crate::kinds::Mode::Exclusive))
                .collect();
            let label = label.to_string();
            let admitted = tokio::task::spawn_blocking(move || outer.admit(&keys, &label))
                .await
                .map_err(|e| Error::io("admit", root, std::io::Error::other(e.to_string())))?;
            Some(admitted?)
        }
        None => None,
    };
    let _call = actor
        .request(targets)
        .label(label.to_string())
        .admit_timeout(wait)
        .await?;

    let history = Handle::of(actor.scheduler());
    let records = if history.enabled() {
        history.store()?.load()?.records
    } else {
        Vec::new()
    };
    let store = if history.enabled() {
        Some(history.store()?)
    } else {
        None
    };
    let blob = |sha: &str, stored: bool| -> Option<Vec<u8>> {
        if !stored {
            return None;
        }
        store.as_ref()?.read_blob(sha).ok()
    };
    // A record in the same millisecond as the start counts as during the
    // run: merged against its pre-image rather than judged as unseen.
    let start_ms = ms(started);
    let start_ns = clock;
    let me = actor.name().to_string();
    let marks = MarkStore::of(&actor.meta);

    let mut judged = Vec::with_capacity(set.len());
    for (i, (w, key)) in set.into_iter().zip(places).enumerate() {
        let abs = key.path.clone();
        let live = match fsio::current(root, &abs)? {
            Current::Absent => None,
            Current::File {
                bytes,
                sha256,
                mode,
                ..
            } => Some((bytes, sha256, mode)),
            Current::Other(what) => {
                out.conflicts.push(RunConflict {
                    path: w.rel.clone(),
                    reason: format!("the real tree now has {what} there"),
                    writers: Vec::new(),
                    run_diff: String::new(),
                    live_diff: String::new(),
                });
                continue;
            }
        };
        let writes = writes_to(&records, &abs);
        let during: Vec<_> = writes.iter().filter(|(t, ..)| *t >= start_ms).collect();
        let mut writers: Vec<String> = during.iter().map(|(_, a, ..)| a.clone()).collect();
        writers.dedup();
        let start: Option<Vec<u8>> = if let Some((_, _, before, _)) = during.first() {
            match before {
                None => None,
                Some((sha, stored)) => match blob(sha, *stored) {
                    Some(bytes) => Some(bytes),
                    None => {
                        out.conflicts.push(RunConflict {
                            path: w.rel.clone(),
                            reason: "changed during the run, and its version at the run's start was not snapshotted, so the changes cannot be merged".into(),
                            writers,
                            run_diff: String::new(),
                            live_diff: String::new(),
                        });
                        continue;
                    }
                },
            }
        } else {
            // Content a writ write produced before the run began is the
            // start, however recent its ctime.
            let by_writ = match (writes.last(), &live) {
                (Some((_, _, _, Some(after))), Some((_, sha, _))) => after == sha,
                _ => false,
            };
            let changed = !by_writ
                && std::fs::symlink_metadata(&abs).is_ok_and(|m| {
                    i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()) >= start_ns
                });
            if changed && live.is_some() {
                out.conflicts.push(RunConflict {
                    path: w.rel.clone(),
                    reason: "changed outside writ during the run: its version at the run's start is unknown, so the changes cannot be merged".into(),
                    writers: vec!["outside writ".into()],
                    run_diff: String::new(),
                    live_diff: String::new(),
                });
                continue;
            }
            live.as_ref().map(|(b, ..)| b.clone())
        };
        let live_bytes = live.as_ref().map(|(b, ..)| b.as_slice());
        let run_bytes = w.run.as_ref().map(|(b, _)| b.as_slice());
        let empty: &[u8] = b"";
        let (result, merged) = if start.as_deref() == live_bytes {
            (w.run.clone(), false)
        } else {
            match (start.as_deref(), run_bytes, live_bytes) {
                (Some(s), Some(r), Some(l)) => match merge3(s, r, l) {
                    Some(m) => (Some((m, w.run.as_ref().map_or(0o644, |x| x.1))), true),
                    None => {
                        out.conflicts.push(RunConflict {
                            path: w.rel.clone(),
                            reason: "the run's changes and the changes made meanwhile overlap"
                                .into(),
                            writers,
                            run_diff: diff(s, r, "start", "run"),
                            live_diff: diff(s, l, "start", "now"),
                        });
                        continue;
                    }
                },
                (s, r, l) => {
                    let s = s.unwrap_or(empty);
                    out.conflicts.push(RunConflict {
                        path: w.rel.clone(),
                        reason:
                            "the file was created or deleted on one side while the other changed it"
                                .into(),
                        writers,
                        run_diff: diff(s, r.unwrap_or(empty), "start", "run"),
                        live_diff: diff(s, l.unwrap_or(empty), "start", "now"),
                    });
                    continue;
                }
            }
        };
        // The unseen-work rule.
        if let Some(start) = &start {
            let mark = match &known {
                Some(known) => known.get(i).and_then(|k| k.mark.clone()),
                None => marks.get(&key.norm),
            };
            let seen = mark.as_ref().is_some_and(|m| m.sha256 == sha256_hex(start));
            let read_ms = mark.as_ref().map_or(0, |m| ms(m.read_at));
            let unseen: Vec<_> = writes
                .iter()
                .filter(|(t, a, ..)| *t > read_ms && *t < start_ms && *a != me)
                .collect();
            if !seen && !unseen.is_empty() {
                let who: Vec<String> = {
                    let mut v: Vec<String> = unseen.iter().map(|(_, a, ..)| a.clone()).collect();
                    v.dedup();
                    v
                };
                let kept = match (&result, unseen.first().and_then(|(_, _, b, _)| b.as_ref())) {
                    (None, _) => false,
                    (Some((r, _)), Some((sha, stored))) => {
                        blob(sha, *stored).is_some_and(|p| keeps(&p, start, r))
                    }
                    // Created by the other agent: a change keeps its lines
                    // unless it overwrites them all.
                    (Some((r, _)), None) => r == start || shares_a_line(start, r),
                };
                if !kept {
                    let before = unseen
                        .first()
                        .and_then(|(_, _, b, _)| b.as_ref())
                        .and_then(|(sha, stored)| blob(sha, *stored))
                        .unwrap_or_default();
                    out.conflicts.push(RunConflict {
                        path: w.rel.clone(),
                        reason: format!(
                            "the run would overwrite work of {} that this agent has not read; read the file, then run again",
                            who.join(", ")
                        ),
                        writers: who,
                        run_diff: diff(start, result.as_ref().map_or(empty, |r| &r.0), "now", "run"),
                        live_diff: diff(&before, start, "before", "their change"),
                    });
                    continue;
                }
            }
        }
        judged.push(Judged {
            rel: w.rel,
            abs,
            norm: key.norm,
            live,
            result,
            merged,
        });
    }
    if !out.conflicts.is_empty() {
        return Ok(out);
    }
    let judged: Vec<Judged> = judged
        .into_iter()
        .filter(|j| j.live.as_ref().map(|l| &l.0) != j.result.as_ref().map(|r| &r.0))
        .collect();
    apply(actor, root, &judged, &mut out, history.enabled())?;
    create_dirs(root, entries, rules);
    for dir in removed_dirs.iter().rev() {
        let _ = std::fs::remove_dir(root.join(dir));
    }
    Ok(out)
}

/// Whether `result` keeps the change `before → theirs` (`result` was made
/// from `theirs`): no change from `theirs` to `result` touches a line that
/// change wrote, or the place where it removed lines. A second change to
/// other lines — even the next one — keeps it.
fn keeps(before: &[u8], theirs: &[u8], result: &[u8]) -> bool {
    if theirs == result {
        return true;
    }
    let (Ok(before), Ok(theirs), Ok(result)) = (
        std::str::from_utf8(before),
        std::str::from_utf8(theirs),
        std::str::from_utf8(result),
    ) else {
        return false;
    };
    let their_change = TextDiff::from_lines(before, theirs);
    let ours = TextDiff::from_lines(theirs, result);
    let touched: Vec<std::ops::Range<usize>> = ours
        .ops()
        .iter()
        .filter(|op| op.tag() != similar::DiffTag::Equal)
        .map(|op| op.old_range())
        .collect();
    their_change
        .ops()
        .iter()
        .filter(|op| op.tag() != similar::DiffTag::Equal)
        .all(|op| {
            let written = op.new_range();
            touched.iter().all(|t| {
                if written.is_empty() {
                    // Lines removed at one point: ours must not touch it.
                    let at = written.start;
                    let touches = if t.is_empty() {
                        t.start == at
                    } else {
                        t.start <= at && at <= t.end
                    };
                    !touches
                } else if t.is_empty() {
                    // An insertion inside their lines splits them.
                    !(written.start < t.start && t.start < written.end)
                } else {
                    t.end <= written.start || written.end <= t.start
                }
            })
        })
}

/// Whether the two texts have a non-blank line in common.
fn shares_a_line(a: &[u8], b: &[u8]) -> bool {
    let lines: BTreeSet<&[u8]> = a
        .split(|&c| c == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .collect();
    b.split(|&c| c == b'\n').any(|l| lines.contains(l))
}

/// Folders the run created (even empty ones) exist in the real tree too.
fn create_dirs(root: &Path, entries: &[Upper], rules: &Rules) {
    for entry in entries {
        if let Upper::Dir(rel) | Upper::Opaque(rel) = entry {
            if !rules.passes(rel, true) {
                let _ = std::fs::create_dir_all(root.join(rel));
            }
        }
    }
}

/// Snapshots, writes, records; puts back what was written if a write fails.
fn apply(
    actor: &Actor,
    root: &Path,
    judged: &[Judged],
    out: &mut Outcome,
    recorded: bool,
) -> Result<()> {
    if judged.is_empty() {
        return Ok(());
    }
    let history = Handle::of(actor.scheduler());
    let durable = history.durable();
    if recorded {
        let pre: Vec<Pre<'_>> = judged
            .iter()
            .map(|j| Pre {
                path: &j.abs,
                content: j.live.as_ref().map(|(bytes, sha256, mode)| Content {
                    sha256,
                    mode: *mode,
                    bytes,
                }),
            })
            .collect();
        history.snapshot(&actor.meta, WriteKind::Edit, &pre, None, false)?;
    }
    let mut done: Vec<&Judged> = Vec::new();
    for j in judged {
        let step = match &j.result {
            Some((bytes, mode)) => fsio::put(root, &j.abs, bytes, *mode, durable),
            None => fsio::remove(root, &j.abs, durable),
        };
        if let Err(e) = step {
            for d in done.iter().rev() {
                let _ = match &d.live {
                    Some((bytes, _, mode)) => fsio::put(root, &d.abs, bytes, *mode, durable),
                    None => fsio::remove(root, &d.abs, durable),
                };
            }
            return Err(e);
        }
        done.push(j);
    }
    let shas: Vec<Option<(String, u64, u32)>> = judged
        .iter()
        .map(|j| {
            j.result
                .as_ref()
                .map(|(b, m)| (sha256_hex(b), b.len() as u64, *m))
        })
        .collect();
    let gate = Gate::of(actor.scheduler());
    for (j, sha) in judged.iter().zip(&shas) {
        out.landed
            .push((j.norm.clone(), sha.as_ref().map(|s| s.0.clone())));
        gate.record_write(
            &j.norm,
            &actor.meta.name,
            sha.as_ref().map(|s| s.0.as_str()),
        );
        out.artifacts.push(RunArtifact {
            path: j.rel.clone(),
            change: match (&j.live, &j.result) {
                (None, _) => Change::Created,
                (_, None) => Change::Deleted,
                _ => Change::Modified,
            },
            merged: j.merged,
        });
    }
    if recorded {
        let post: Vec<Post<'_>> = judged
            .iter()
            .zip(&shas)
            .map(|(j, sha)| Post {
                path: &j.abs,
                state: sha.as_ref().map(|(s, n, m)| (s.as_str(), *n, *m)),
            })
            .collect();
        if let Err(e) = history.record(&actor.meta, &post) {
            out.notes.push(format!(
                "the files were written but history did not record them: {e}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_take_both_sides_and_refuse_overlaps() {
        let base = b"a\nb\nc\nd\n";
        let ours = b"A\nb\nc\nd\n";
        let theirs = b"a\nb\nc\nD\n";
        assert_eq!(merge3(base, ours, theirs).unwrap(), b"A\nb\nc\nD\n");
        assert_eq!(merge3(base, ours, ours).unwrap(), ours.to_vec());
        assert!(merge3(base, b"X\nb\nc\nd\n", b"Y\nb\nc\nd\n").is_none());
    }

    #[test]
    fn a_result_keeps_their_change_unless_it_rewrites_those_lines() {
        let before = b"one\ntwo\nthree\n";
        let theirs = b"one\nTHEIRS\nthree\n";
        // sed of the line next to theirs keeps it.
        assert!(keeps(before, theirs, b"ONE\nTHEIRS\nthree\n"));
        assert!(keeps(before, theirs, b"one\nTHEIRS\nthree\nfour\n"));
        // A checkout (back to before) or a rewrite of their line does not.
        assert!(!keeps(before, theirs, before));
        assert!(!keeps(before, theirs, b"one\nmine\nthree\n"));
        assert!(!keeps(before, theirs, b"x\n"));
        // Their deletion undone is not kept either.
        assert!(!keeps(b"a\nb\nc\n", b"a\nc\n", b"a\nb\nc\n"));
    }
}
