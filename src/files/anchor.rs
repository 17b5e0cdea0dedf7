//! Anchored edits (SPEC §6): whether a replace or an append made against an
//! older version of a file can be applied to the current one without
//! overwriting anything its author has not seen, and what changed between
//! the two. Pure: bytes in, a decision out; the pipeline asks it when a
//! mark is stale, with the marked version found in history.
//!
//! # Implementation details
//!
//! - The two versions are compared line by line (`similar`, Myers), lines
//!   kept with their terminators, as bytes: a file need not be UTF-8.
//! - A replace's `old` spans the lines holding any of its bytes. A change
//!   between the versions *touches* a line when it deletes or rewrites it;
//!   the edit is refused when a change touches a spanned line or the line
//!   on either side, or inserts lines between two spanned lines. Lines
//!   inserted just before or just after the span (two agents adding
//!   entries at the end of one list) touch nothing: every spanned and
//!   neighbouring line is then the same in both versions.
//! - That the span is unchanged and `old` occurs exactly once in each
//!   version makes the current occurrence the very text the agent saw: the
//!   spanned lines are equal, so `old` lies in them at the same offset, and
//!   it occurs nowhere else.

use std::time::Instant;

use similar::{Algorithm, DiffOp};

/// How long a line diff between an agent's read and the current content
/// may take before it settles for a less minimal one (which can only
/// refuse more, or show a longer diff).
pub(crate) const DIFF_TIME: std::time::Duration = std::time::Duration::from_millis(500);

/// An edit that met a stale mark and may be anchored.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Edit<'e> {
    /// An append: it overwrites nothing.
    Append,
    /// One or more exact replacements (`old`, `new`), made in order, all
    /// of which must be anchored (the filesystem tools' `edits` list: all
    /// or none).
    Replace(&'e [(&'e [u8], &'e [u8])]),
}

/// Why an edit cannot be applied on top of the changes since its mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanchored {
    /// `old` is missing from one of the versions (or empty).
    Missing,
    /// `old` occurs more than once in one of the versions.
    Ambiguous,
    /// A change between the versions touches `old` or a line beside it.
    Touched,
}

/// Decides whether `edit`, made by an agent that read `marked`, can be
/// applied to `current` without overwriting anything it has not seen.
/// `deadline` bounds the line diff; a diff cut short is less minimal, which
/// can only refuse more.
pub(crate) fn decide(
    marked: &[u8],
    current: &[u8],
    edit: Edit<'_>,
    deadline: Option<Instant>,
) -> Result<(), Unanchored> {
    let olds = match edit {
        Edit::Append => return Ok(()),
        Edit::Replace(olds) => olds,
    };
    let m_lines = lines(marked);
    let c_lines = lines(current);
    let ops = similar::capture_diff_slices_deadline(Algorithm::Myers, &m_lines, &c_lines, deadline);
    let starts = line_starts(&m_lines);
    for (old, _) in olds {
        let at = unique(marked, old)?;
        unique(current, old)?;
        let first = line_at(&starts, at);
        let end = line_at(&starts, at + old.len() - 1) + 1;
        if ops.iter().any(|op| touches(op, first, end)) {
            return Err(Unanchored::Touched);
        }
    }
    Ok(())
}

/// Insertions at one point are kept both (SPEC §6): `current` with the
/// lines a replace (`old` → `new`) inserts, when that is all it does
/// (`new` is `old`, whole lines, with whole lines added and nothing
/// removed or rewritten), put where the agent put them relative to the
/// lines it saw in `marked`, after lines others inserted at the same gap
/// since. `None` when the replace is not such an insertion, `old` is not
/// once in `marked`, or a change since deleted or rewrote a spanned line
/// or the line on either side (others' insertions anywhere are fine);
/// the replace is then judged as [`decide`] says.
pub(crate) fn inserted(
    marked: &[u8],
    current: &[u8],
    old: &[u8],
    new: &[u8],
    deadline: Option<Instant>,
) -> Option<Vec<u8>> {
    let gaps = insertion(old, new)?;
    let m_lines = lines(marked);
    let c_lines = lines(current);
    let starts = line_starts(&m_lines);
    let at = unique(marked, old).ok()?;
    // Whole lines only: `old` starts a line and ends one.
    let first = line_at(&starts, at);
    if starts.get(first) != Some(&at) {
        return None;
    }
    let end = first + lines(old).len();
    // Where each line of the marked version is now, if it is unchanged.
    let ops = similar::capture_diff_slices_deadline(Algorithm::Myers, &m_lines, &c_lines, deadline);
    let mut now: Vec<Option<usize>> = vec![None; m_lines.len()];
    for op in &ops {
        if let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = *op
        {
            for i in 0..len {
                now[old_index + i] = Some(new_index + i);
            }
        }
    }
    let (lo, hi) = (first.saturating_sub(1), (end + 1).min(m_lines.len()));
    if aligned_by_choice(&ops, &m_lines, &c_lines, lo, hi) {
        return None;
    }
    // The spanned lines and their neighbours, unchanged.
    let mut place = Vec::with_capacity(end - first + 1);
    for (line, at_now) in now.iter().enumerate().take(hi).skip(lo) {
        let at_now = (*at_now)?;
        if (first..end).contains(&line) {
            place.push(at_now);
        }
    }
    // Gap `g` is before spanned line `g`; the last one, after the span,
    // is before the line after it (or the end). Each goes just before
    // that line: after whatever others inserted in the same gap.
    let after = match m_lines.get(end) {
        Some(_) => now[end]?,
        None => c_lines.len(),
    };
    place.push(after);
    let mut out = Vec::with_capacity(current.len() + new.len());
    let mut next = 0;
    for (gap, ours) in gaps.iter().enumerate() {
        let before = place[gap];
        for line in &c_lines[next..before] {
            out.extend_from_slice(line);
        }
        next = before;
        for line in ours {
            out.extend_from_slice(line);
        }
    }
    for line in &c_lines[next..] {
        out.extend_from_slice(line);
    }
    Some(out)
}

/// The lines `new` adds to `old`, gap by gap (gap `g` before `old`'s
/// line `g`, the last after it), when `new` is exactly `old`'s whole lines
/// with whole lines added; `None` otherwise, or when where they go is
/// ambiguous (an added line equal to a line of `old` beside it).
fn insertion<'a>(old: &'a [u8], new: &'a [u8]) -> Option<Vec<Vec<&'a [u8]>>> {
    if old.is_empty() || !old.ends_with(b"\n") || !new.ends_with(b"\n") || new.len() <= old.len() {
        return None;
    }
    let (o, n) = (lines(old), lines(new));
    // The earliest and the latest way to find `old`'s lines in `new`
    // must agree, or the gaps are ambiguous.
    let earliest = {
        let mut at = Vec::with_capacity(o.len());
        let mut j = 0;
        for line in &o {
            while n.get(j)? != line {
                j += 1;
            }
            at.push(j);
            j += 1;
        }
        at
    };
    let latest = {
        let mut at = vec![0; o.len()];
        let mut j = n.len();
        for (i, line) in o.iter().enumerate().rev() {
            loop {
                j = j.checked_sub(1)?;
                if n[j] == *line {
                    break;
                }
            }
            at[i] = j;
        }
        at
    };
    if earliest != latest {
        return None;
    }
    let mut gaps = Vec::with_capacity(o.len() + 1);
    let mut from = 0;
    for &at in &earliest {
        gaps.push(n[from..at].to_vec());
        from = at + 1;
    }
    gaps.push(n[from..].to_vec());
    Some(gaps)
}

/// `current` with each replacement (`old`, `new`) made in order at the one
/// occurrence of `old`; `None` when one of them is not there exactly once.
pub(crate) fn replaced(current: &[u8], pairs: &[(&[u8], &[u8])]) -> Option<Vec<u8>> {
    let mut out = current.to_vec();
    for (old, new) in pairs {
        let at = unique(&out, old).ok()?;
        out.splice(at..at + old.len(), new.iter().copied());
    }
    Some(out)
}

/// Whether the line diff `ops` may have aligned the marked version's lines
/// `lo..hi` (a span and its neighbours) with the current content by choice
/// rather than by identity: a change since deleted, rewrote or added a line
/// with the text of one of them, so "unchanged" may be another instance of
/// that text, and an edit could land beside lines the agent never saw
/// there. Such an edit is not anchored (it is refused with the current
/// content, and the agent redoes it on what it then sees).
fn aligned_by_choice(
    ops: &[DiffOp],
    m_lines: &[&[u8]],
    c_lines: &[&[u8]],
    lo: usize,
    hi: usize,
) -> bool {
    let named = &m_lines[lo..hi];
    let repeats = |from: &[&[u8]]| from.iter().any(|line| named.contains(line));
    ops.iter().any(|op| match *op {
        DiffOp::Equal { .. } => false,
        DiffOp::Insert {
            new_index, new_len, ..
        } => repeats(&c_lines[new_index..new_index + new_len]),
        DiffOp::Delete {
            old_index, old_len, ..
        } => repeats(&m_lines[old_index..old_index + old_len]),
        DiffOp::Replace {
            old_index,
            old_len,
            new_index,
            new_len,
        } => {
            repeats(&m_lines[old_index..old_index + old_len])
                || repeats(&c_lines[new_index..new_index + new_len])
        }
    })
}

/// Does `op` touch the span of lines `first..end` (of the marked version)
/// or a line beside it?
fn touches(op: &DiffOp, first: usize, end: usize) -> bool {
    match *op {
        DiffOp::Equal { .. } => false,
        // Lines inserted at `at` go between lines `at - 1` and `at`.
        DiffOp::Insert { old_index: at, .. } => first < at && at < end,
        DiffOp::Delete {
            old_index, old_len, ..
        }
        | DiffOp::Replace {
            old_index, old_len, ..
        } => old_index < end + 1 && first.saturating_sub(1) < old_index + old_len,
    }
}

/// Where `needle` occurs in `hay`: the first offset and how many times,
/// overlapping occurrences counted (in `aaa`, `aa` occurs twice). The one
/// finder of `old` for every replace, anchored or not: a text that occurs
/// twice, overlapping, is ambiguous, never "the first one".
pub(crate) fn occurrences(hay: &[u8], needle: &[u8]) -> (Option<usize>, usize) {
    if needle.is_empty() {
        return (None, 0);
    }
    let finder = memchr::memmem::Finder::new(needle);
    let Some(first) = finder.find(hay) else {
        return (None, 0);
    };
    let (mut count, mut from) = (1, first + 1);
    while let Some(at) = hay.get(from..).and_then(|rest| finder.find(rest)) {
        count += 1;
        from += at + 1;
    }
    (Some(first), count)
}

/// The offset of the one occurrence of `needle` in `hay` (overlapping
/// occurrences counted, as [`occurrences`] counts them).
fn unique(hay: &[u8], needle: &[u8]) -> Result<usize, Unanchored> {
    match occurrences(hay, needle) {
        (Some(at), 1) => Ok(at),
        (None, _) => Err(Unanchored::Missing),
        (Some(_), _) => Err(Unanchored::Ambiguous),
    }
}

/// Lines with their terminators; a final line may have none.
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

/// Where each line starts.
fn line_starts(lines: &[&[u8]]) -> Vec<usize> {
    let mut at = 0;
    lines
        .iter()
        .map(|line| {
            let start = at;
            at += line.len();
            start
        })
        .collect()
}

/// The line holding byte `offset`.
fn line_at(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).saturating_sub(1)
}

/// What changed from `marked` to `current`, as a unified diff (two lines
/// of context; bytes that are not UTF-8 shown as U+FFFD), cut at a line end
/// within `bound` bytes. `true` beside it when it was cut.
pub(crate) fn changes(marked: &[u8], current: &[u8], bound: usize) -> (String, bool) {
    let (old, new) = (
        String::from_utf8_lossy(marked),
        String::from_utf8_lossy(current),
    );
    let diff = similar::TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .timeout(DIFF_TIME)
        .diff_lines(old.as_ref(), new.as_ref());
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header("your read", "now")
        .to_string();
    if text.len() <= bound {
        return (text, false);
    }
    let mut end = bound;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text[..end].rfind('\n').map_or(0, |i| i + 1);
    (text[..cut].to_string(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replace(marked: &str, current: &str, old: &str) -> Result<(), Unanchored> {
        decide(
            marked.as_bytes(),
            current.as_bytes(),
            Edit::Replace(&[(old.as_bytes(), b"")]),
            None,
        )
    }

    const FILE: &str = "a\nb\nc\nd\ne\nf\ng\n";

    #[test]
    fn a_change_away_from_old_is_anchored() {
        assert_eq!(replace(FILE, "A\nb\nc\nd\ne\nf\ng\n", "e\n"), Ok(()));
        assert_eq!(replace(FILE, "a\nb\nc\nd\ne\nf\nG\n", "c\n"), Ok(()));
        assert_eq!(replace(FILE, "a\nb\nc\nd\ne\nf\n", "c"), Ok(()));
        // Lines added just before or after the span touch nothing.
        assert_eq!(replace(FILE, "a\nb\nc\nX\nd\ne\nf\ng\n", "d\n"), Ok(()));
        assert_eq!(replace(FILE, "a\nb\nc\nd\nX\ne\nf\ng\n", "d\n"), Ok(()));
        // A span of several lines, partial at both ends.
        assert_eq!(replace(FILE, "a\nb\nc\nd\ne\nf\ng\nh\n", "c\nd\ne"), Ok(()));
    }

    #[test]
    fn a_change_to_old_or_a_line_beside_it_is_touched() {
        // The line itself, the one before, the one after.
        assert_eq!(
            replace(FILE, "a\nb\nc\nD\ne\nf\ng\n", "d"),
            Err(Unanchored::Missing)
        );
        assert_eq!(
            replace(FILE, "a\nb\nC\nd\ne\nf\ng\n", "d\n"),
            Err(Unanchored::Touched)
        );
        assert_eq!(
            replace(FILE, "a\nb\nc\nd\nE\nf\ng\n", "d\n"),
            Err(Unanchored::Touched)
        );
        // Part of the line `old` sits in, outside `old` itself.
        assert_eq!(
            replace("x = 1 + 2\n", "x = 1 + 3\n", "1"),
            Err(Unanchored::Touched)
        );
        // A line deleted beside it, a line inserted inside a span.
        assert_eq!(
            replace(FILE, "a\nb\nd\ne\nf\ng\n", "d\n"),
            Err(Unanchored::Touched)
        );
        assert_eq!(
            replace(FILE, "a\nb\nc\nX\nd\ne\nf\ng\n", "c\nd\n"),
            Err(Unanchored::Missing)
        );
        assert_eq!(
            replace(FILE, "a\nb\nc\nX\nd\ne\nf\ng\n", "c\nX"),
            Err(Unanchored::Missing)
        );
        // The same text, moved: the line before it is now after it.
        assert_eq!(
            replace("p\nq\nr\ns\n", "p\nr\ns\nq\n", "q\n"),
            Err(Unanchored::Touched)
        );
    }

    #[test]
    fn old_must_be_unique_in_both_versions() {
        assert_eq!(
            replace(FILE, "a\nb\nc\nd\ne\nf\ng\nd\n", "d\n"),
            Err(Unanchored::Ambiguous)
        );
        assert_eq!(
            replace("d\nd\n", "d\nx\n", "d\n"),
            Err(Unanchored::Ambiguous)
        );
        assert_eq!(replace(FILE, FILE, "zz"), Err(Unanchored::Missing));
        assert_eq!(replace(FILE, FILE, ""), Err(Unanchored::Missing));
        // Every edit of a list must be anchored.
        let olds: [(&[u8], &[u8]); 2] = [(b"a\n", b""), (b"e\n", b"")];
        let current = b"a\nb\nc\nd\ne\nF\ng\n";
        assert_eq!(
            decide(FILE.as_bytes(), current, Edit::Replace(&olds), None),
            Err(Unanchored::Touched)
        );
        let olds: [(&[u8], &[u8]); 2] = [(b"a\n", b""), (b"c\n", b"")];
        assert_eq!(
            decide(FILE.as_bytes(), current, Edit::Replace(&olds), None),
            Ok(())
        );
    }

    #[test]
    fn replacements_are_made_in_order_at_the_one_occurrence() {
        let pairs: [(&[u8], &[u8]); 2] = [(b"b", b"xb"), (b"xb", b"y")];
        assert_eq!(replaced(b"abc", &pairs).as_deref(), Some(&b"ayc"[..]));
        let pairs: [(&[u8], &[u8]); 1] = [(b"a", b"z")];
        assert_eq!(replaced(b"aa", &pairs), None);
    }

    #[test]
    fn overlapping_occurrences_count() {
        assert_eq!(occurrences(b"aaaa", b"aa"), (Some(0), 3));
        assert_eq!(occurrences(b"xay", b"a"), (Some(1), 1));
        assert_eq!(occurrences(b"xy", b"a"), (None, 0));
        assert_eq!(occurrences(b"xy", b""), (None, 0));
        // `A B A` in `A B A B A`: twice, sharing the middle `A`.
        assert_eq!(occurrences(b"A\nB\nA\nB\nA\n", b"A\nB\nA"), (Some(0), 2));
        // The case the rule is for: bob turned `Z` into `A`, so `A B A` is
        // ambiguous now, and alice's stale edit must not pick bob's line.
        assert_eq!(
            replace("Z\nB\nA\nB\nA\nY\n", "A\nB\nA\nB\nA\nY\n", "A\nB\nA"),
            Err(Unanchored::Ambiguous)
        );
        let pairs: [(&[u8], &[u8]); 1] = [(b"A\nB\nA", b"N")];
        assert_eq!(replaced(b"A\nB\nA\nB\nA\nY\n", &pairs), None);
    }

    #[test]
    fn insertions_at_one_point_are_kept_both() {
        let marked = b"R = {\n    'a': 1,\n}\nX = 0\n";
        // Another agent added its entry at the same point since.
        let current = b"S = 1\nR = {\n    'a': 1,\n    'b': 2,\n}\nX = 0\n";
        let old = b"    'a': 1,\n}\n";
        let new = b"    'a': 1,\n    'c': 3,\n}\n";
        assert_eq!(
            inserted(marked, current, old, new, None).as_deref(),
            Some(&b"S = 1\nR = {\n    'a': 1,\n    'b': 2,\n    'c': 3,\n}\nX = 0\n"[..])
        );
        // A rewrite of a spanned line, or of the line beside it: no.
        let rewritten = b"R = {\n    'a': 9,\n    'b': 2,\n}\nX = 1\n";
        assert_eq!(inserted(marked, rewritten, old, new, None), None);
        let beside = b"R = [\n    'a': 1,\n    'b': 2,\n}\nX = 1\n";
        assert_eq!(inserted(marked, beside, old, new, None), None);
        // Not an insertion, or an ambiguous one: no.
        assert_eq!(inserted(marked, current, old, b"}\n", None), None);
        assert_eq!(
            inserted(marked, current, b"}\n", b"}\n}\n", None),
            None,
            "which closing brace is ours"
        );
        // Insertions before and after the span go after others' there.
        let before = b"R = {\n    'z': 0,\n    'a': 1,\n}\nX = 0\nY = 0\n";
        assert_eq!(
            inserted(
                marked,
                before,
                old,
                b"    'y': 0,\n    'a': 1,\n}\nW = 0\n",
                None
            )
            .as_deref(),
            Some(&b"R = {\n    'z': 0,\n    'y': 0,\n    'a': 1,\n}\nW = 0\nX = 0\nY = 0\n"[..])
        );
    }

    #[test]
    fn an_append_is_always_anchored() {
        assert_eq!(decide(b"a\n", b"", Edit::Append, None), Ok(()));
    }

    #[test]
    fn files_without_a_final_newline_and_not_utf8() {
        assert_eq!(replace("a\nb", "A\nx\nb", "b"), Err(Unanchored::Touched));
        assert_eq!(replace("a\nb\nc", "a\nb\nc\nd", "a"), Ok(()));
        let marked = b"\xff\n\xfe\nq\n";
        let olds: [(&[u8], &[u8]); 1] = [(b"\xfe", b"")];
        assert_eq!(
            decide(marked, b"\xff\n\xfe\nq\nr\n", Edit::Replace(&olds), None),
            Ok(())
        );
    }

    #[test]
    fn the_changes_are_a_unified_diff_cut_at_a_line_end() {
        let (diff, cut) = changes(b"a\nb\n", b"a\nB\n", 1 << 20);
        assert!(!cut);
        assert!(diff.contains("-b\n+B\n"), "{diff}");
        assert!(diff.starts_with("--- your read\n+++ now\n"), "{diff}");
        let (short, cut) = changes(b"a\nb\n", b"a\nB\n", 20);
        assert!(cut);
        assert!(short.ends_with('\n') && short.len() <= 20, "{short:?}");
        assert_eq!(changes(b"a\n", b"a\n", 100), (String::new(), false));
    }
}
