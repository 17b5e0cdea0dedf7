//! Merge mode and conflict summaries: line diffs with `similar`.
//!
//! Taking the agent's change back out of a file a person edited since is a
//! three-way merge whose common ancestor is the agent's result (`after`):
//! one side is what the agent started from (`before`, i.e. the agent's diff
//! reversed), the other is the file as it is now (`current`, the person's
//! edits). `similar::TextMerge` combines the two only where their hunks do not
//! overlap; like xdiff, hunks that merely touch at a line boundary count as
//! overlapping, so a reverse hunk is applied only where the lines around it
//! are still the agent's, never next to or inside a person's edit. An edit
//! both sides made identically (the person already undid that hunk) is
//! taken once.

use std::time::Duration;

use similar::{DiffTag, TextDiff, TextMerge};

/// What reversing the agent's change out of the current content gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reverse {
    /// The content with the agent's change taken out and the person's kept.
    Clean(Vec<u8>),
    /// This many regions where the agent's change and a later edit overlap.
    Overlap(usize),
    /// One of the versions is not UTF-8 text; binary files are not merged.
    NotText,
}

/// Takes the change `before → after` back out of `current`.
pub(crate) fn reverse(before: &[u8], after: &[u8], current: &[u8]) -> Reverse {
    let (Ok(before), Ok(after), Ok(current)) = (
        std::str::from_utf8(before),
        std::str::from_utf8(after),
        std::str::from_utf8(current),
    ) else {
        return Reverse::NotText;
    };
    let merge = TextMerge::from_lines(after, before, current);
    if merge.is_conflicted() {
        return Reverse::Overlap(merge.conflict_count());
    }
    // Without conflicts, Display is exactly the merged lines.
    Reverse::Clean(merge.to_string().into_bytes())
}

/// The longest excerpt of a line a summary quotes.
const QUOTE: usize = 60;

fn quote(line: Option<&str>) -> String {
    match line {
        None => "nothing".to_string(),
        Some(line) => {
            let line = line.trim_end_matches(['\n', '\r']);
            if line.chars().count() > QUOTE {
                let cut: String = line.chars().take(QUOTE).collect();
                format!("\"{cut}…\"")
            } else {
                format!("\"{line}\"")
            }
        }
    }
}

/// A one-line description of how `found` differs from `expected`: lines
/// added and removed, and the first change quoted.
pub(crate) fn summary(expected: &[u8], found: &[u8]) -> String {
    let (Ok(old), Ok(new)) = (std::str::from_utf8(expected), std::str::from_utf8(found)) else {
        return format!(
            "binary content differs ({} bytes expected, {} found)",
            expected.len(),
            found.len()
        );
    };
    // A bounded diff: a summary must not stall a rewind on a huge file.
    let diff = TextDiff::configure()
        .timeout(Duration::from_millis(200))
        .diff_lines(old, new);
    let (mut added, mut removed) = (0usize, 0usize);
    let mut first = None;
    for op in diff.ops() {
        let (tag, old_range, new_range) = op.as_tag_tuple();
        if tag == DiffTag::Equal {
            continue;
        }
        removed += old_range.len();
        added += new_range.len();
        if first.is_none() {
            first = Some((
                old_range.start + 1,
                diff.old_slice(old_range.start)
                    .filter(|_| !old_range.is_empty()),
                diff.new_slice(new_range.start)
                    .filter(|_| !new_range.is_empty()),
            ));
        }
    }
    match first {
        None => "the lines are equal but the bytes differ".to_string(),
        Some((line, was, now)) => format!(
            "{added} line(s) added, {removed} removed; first at line {line}: {} became {}",
            quote(was),
            quote(now)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_reverse_keeps_the_persons_edit() {
        let before = "one\ntwo\nthree\nfour\nfive\n";
        let after = "one\nTWO\nthree\nfour\nfive\n"; // the agent's change
        let current = "one\nTWO\nthree\nfour\nFIVE\n"; // a person's edit since
        assert_eq!(
            reverse(before.as_bytes(), after.as_bytes(), current.as_bytes()),
            Reverse::Clean(b"one\ntwo\nthree\nfour\nFIVE\n".to_vec())
        );
    }

    #[test]
    fn overlapping_or_touching_edits_do_not_merge() {
        let before = "one\ntwo\nthree\n";
        let after = "one\nTWO\nthree\n";
        // The person edited the agent's line itself.
        assert!(matches!(
            reverse(before.as_bytes(), after.as_bytes(), b"one\nTw0\nthree\n"),
            Reverse::Overlap(1)
        ));
        // The person edited the line right next to it: no context is left.
        assert!(matches!(
            reverse(before.as_bytes(), after.as_bytes(), b"one\nTWO\nTHREE\n"),
            Reverse::Overlap(1)
        ));
    }

    #[test]
    fn binary_content_is_not_merged() {
        assert_eq!(reverse(b"a\n", &[0xff, 0xfe], b"a\n"), Reverse::NotText);
    }

    #[test]
    fn summaries_count_lines_and_quote_the_first_change() {
        let s = summary(b"a\nB\nc\n", b"a\nC\nc\nd\n");
        assert!(s.starts_with("2 line(s) added, 1 removed"), "{s}");
        assert!(s.contains("line 2: \"B\" became \"C\""), "{s}");
        assert!(summary(&[0xff, 1], &[0xfe]).starts_with("binary"));
    }
}
