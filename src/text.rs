//! Text for people: the aligned tables that [`Dump`](crate::Dump)'s
//! `Display` and the `writ history` listings print.

use unicode_width::UnicodeWidthStr;

/// Rows as columns two spaces apart, each padded to its widest cell, one line
/// per row after the header; trailing spaces trimmed.
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
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in rows {
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
    for row in rows {
        line(&mut row.iter().map(String::as_str));
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
    fn short_rows_and_empty_tables() {
        assert_eq!(table(&["a", "b"], &[]), "a  b\n");
        assert_eq!(table(&["a", "b"], &[vec!["x".into()]]), "a  b\nx\n");
    }
}
