//! Text for people: the aligned tables that [`Dump`](crate::Dump)'s
//! `Display` and the `writ history` listings print.

use unicode_width::UnicodeWidthStr;

/// Rows as columns two spaces apart, each padded to its widest cell, one line
/// per row after the header; trailing spaces trimmed.
///
/// Every cell is [`escape`]d first: cells hold what agents chose (paths,
/// labels), and a raw newline, escape or bidirectional override in one
/// would forge a row or drive the reader's terminal.
///
/// Widths are display columns, not characters, so names with wide (CJK) or
/// combining characters still line up in a terminal.
///
/// ```
/// let text = writ::text::table(
///     &["actor", "path"],
///     &[vec!["lead".into(), "src/".into()], vec!["解析器".into(), "src/lex.rs".into()]],
/// );
/// assert_eq!(text, "actor   path\nlead    src/\n解析器  src/lex.rs\n");
/// ```
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| escape(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let start = out.len();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            out.push_str(cell);
            if i + 1 < widths.len() {
                // `{:<w$}` pads by characters; pad by display width instead.
                let pad = w.saturating_sub(cell.width()) + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        let trimmed = out[start..].trim_end().len();
        out.truncate(start + trimmed);
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(|cell| cell.as_ref()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn wide_characters_are_padded_by_display_width() {
        let text = table(&["a", "b"], &[vec!["日本".into(), "x".into()]]);
        // "日本" is four columns wide: the header's "a" gets three spaces of
        // padding plus the two-space gap.
        assert_eq!(text, "a     b\n日本  x\n");
    }

    #[test]
    fn cells_are_escaped() {
        let text = table(&["path"], &[vec!["a\nb\u{1b}[31m\u{202e}c".into()]]);
        assert_eq!(text, "path\na\\nb\\u{1b}[31m\\u{202e}c\n");
    }

    #[test]
    fn short_rows_and_empty_tables() {
        assert_eq!(table(&["a", "b"], &[]), "a  b\n");
        assert_eq!(table(&["a", "b"], &[vec!["x".into()]]), "a  b\nx\n");
    }
}

/// Whether `c` could deceive a person reading a name or a log line: a
/// control character (a newline forges a line, an escape drives the
/// terminal) or a bidirectional override or isolate (U+202A–U+202E,
/// U+2066–U+2069), which reorders the text after it.
pub(crate) fn deceptive(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A name an agent chose (an actor, an MCP client or agent, a label), as
/// SPEC §13 takes it: refused with a sentence saying why when it holds a
/// [`deceptive`] character. `what` names it ("an actor name").
#[cfg_attr(not(any(feature = "server", feature = "mcp")), allow(dead_code))]
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), String> {
    match name.chars().find(|&c| deceptive(c)) {
        None => Ok(()),
        Some(c) => Err(format!(
            "{what} may not hold control characters or bidirectional overrides; this one holds U+{:04X}",
            u32::from(c)
        )),
    }
}

/// `text` with every control character and bidirectional override or
/// isolate (U+202A–U+202E, U+2066–U+2069) written as an escape (`\n`,
/// `\u{202e}`), so that what an agent chose (a path, a name) shown in a
/// log line, on the page or in `writ top` can neither forge a line nor
/// reorder or recolour one. Escaping twice changes nothing more.
///
/// ```
/// assert_eq!(writ::text::escape("a\nb\u{202e}c"), "a\\nb\\u{202e}c");
/// assert_eq!(writ::text::escape("src/lib.rs"), "src/lib.rs");
/// ```
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(deceptive) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if deceptive(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names_with_controls_or_bidi_overrides_are_refused() {
        assert!(check_name("a name", "helper-2 (review)").is_ok());
        assert!(check_name("a name", "解析器").is_ok());
        for bad in [
            "a\nb",
            "a\u{1b}[31m",
            "a\u{202e}b",
            "a\u{2066}b",
            "a\u{85}b",
        ] {
            assert!(check_name("a name", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn escaped_text_has_no_raw_control_or_bidi_character() {
        let forged = "x.rs\n2026-01-01T00:00:00Z  INFO refused actor=root\u{1b}]0;t\u{7}\u{202e}";
        let shown = escape(forged);
        assert!(!shown.chars().any(deceptive), "{shown}");
        assert!(shown.contains("x.rs\\n2026"), "{shown}");
        assert_eq!(escape(&shown), shown, "escaping twice changes nothing more");
    }
}
