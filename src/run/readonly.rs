//! Which commands look read-only, so that they run without an overlay.
//!
//! # Why
//!
//! A fresh overlay makes every lookup cold: each file a command looks at
//! gets an overlay inode and dentry made over the real tree's warm ones. A
//! `git status` or `grep -r` over 10,000 files pays about twice its plain
//! time for that alone (docs/PERFORMANCE.md), and most of what agents run
//! through their shell only reads. A command that writes nothing in the
//! workspace needs no layer to catch its writes: it runs with the workspace
//! bound read-only instead (the pass-through folders, `.git` among them,
//! writable as in an overlay run), which costs one bind mount and shares
//! the real tree's warm caches.
//!
//! # Why a guess is safe
//!
//! The guess only picks the cheaper way to run. A command guessed wrong
//! cannot write the workspace — its write fails with `EROFS` ("Read-only
//! file system"), nothing lands — and writ runs it again through the
//! overlay ([`super::View::Auto`]). So the guess is generous where a
//! wrong answer costs a second run of a reader (`awk`, `sed` without `-i`)
//! and strict where the command's shape says it writes: a redirection into
//! a file, `sed -i`, `find -delete`, a git command that changes the
//! worktree, anything it does not know.

use std::ffi::OsString;
use std::path::Path;

/// Programs that write nothing in the working tree whatever their
/// arguments (writes through `sed`'s `w` or `awk`'s `print >` fail and
/// are run again; see the module docs).
const READERS: &[&str] = &[
    "[",
    "awk",
    "b2sum",
    "basename",
    "cat",
    "cd",
    "cksum",
    "cmp",
    "column",
    "comm",
    "cut",
    "date",
    "df",
    "diff",
    "dirname",
    "du",
    "echo",
    "egrep",
    "false",
    "fgrep",
    "file",
    "gawk",
    "grep",
    "head",
    "hexdump",
    "id",
    "jq",
    "ls",
    "md5sum",
    "mawk",
    "nl",
    "od",
    "printf",
    "pwd",
    "readlink",
    "realpath",
    "rg",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "stat",
    "tail",
    "test",
    "tr",
    "tree",
    "true",
    "uname",
    "wc",
    "which",
    "whoami",
    "xxd",
];

/// Git commands that change nothing outside `.git` (which passes through).
const GIT_READERS: &[&str] = &[
    "annotate",
    "blame",
    "branch",
    "cat-file",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "for-each-ref",
    "grep",
    "log",
    "ls-files",
    "ls-tree",
    "merge-base",
    "name-rev",
    "rev-list",
    "rev-parse",
    "shortlog",
    "show",
    "show-ref",
    "status",
    "tag",
    "version",
];

/// Whether `argv` looks like a command that writes nothing in the
/// workspace: a known reader, or `sh -c LINE` (or `bash -c`) whose line
/// is readers joined by `|`, `&&`, `||` and `;`, redirected to nothing
/// but `/dev/null` and other descriptors, with no substitution.
///
/// ```ignore
/// assert!(looks_read_only(&["git".into(), "status".into()]));
/// assert!(!looks_read_only(&["sh".into(), "-c".into(), "sed -i s/a/b/ f".into()]));
/// ```
pub(crate) fn looks_read_only(argv: &[OsString]) -> bool {
    let words: Option<Vec<String>> = argv.iter().map(|a| a.to_str().map(String::from)).collect();
    let Some(words) = words else {
        return false;
    };
    let program = words.first().map(|w| basename(w));
    if matches!(program, Some("sh" | "bash" | "dash"))
        && words.get(1).map(String::as_str) == Some("-c")
    {
        return words
            .get(2)
            .and_then(|line| segments(line))
            .is_some_and(|segments| segments.iter().all(|s| reads_only(s)));
    }
    reads_only(&words)
}

fn basename(word: &str) -> &str {
    Path::new(word)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(word)
}

/// Whether one simple command (its words, variable assignments first)
/// only reads.
fn reads_only(words: &[String]) -> bool {
    let mut words = words
        .iter()
        .map(String::as_str)
        .skip_while(|w| is_assignment(w));
    let Some(program) = words.next() else {
        return true;
    };
    let args: Vec<&str> = words.collect();
    match basename(program) {
        "sed" => !args.iter().any(|a| {
            a.starts_with("--in-place")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('i'))
        }),
        "find" => !args.iter().any(|a| {
            matches!(
                *a,
                "-delete"
                    | "-exec"
                    | "-execdir"
                    | "-ok"
                    | "-okdir"
                    | "-fprint"
                    | "-fprint0"
                    | "-fprintf"
                    | "-fls"
            )
        }),
        "sort" => !args.iter().any(|a| {
            *a == "-o"
                || a.starts_with("--output")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('o'))
        }),
        "uniq" => args.iter().filter(|a| !a.starts_with('-')).count() <= 1,
        "git" => git_reads_only(&args),
        name => READERS.contains(&name),
    }
}

/// `git [global options] COMMAND …` with a reading COMMAND.
fn git_reads_only(args: &[&str]) -> bool {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match *arg {
            // Global options that take the next word.
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" => {
                it.next();
            }
            a if a.starts_with('-') => {}
            command => return GIT_READERS.contains(&command),
        }
    }
    false
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A shell line's simple commands as words, split at `|`, `||`, `&&`,
/// `;` and newlines; `None` for anything the guess does not read: a
/// substitution, a subshell or group, a background `&`, a here-document,
/// a redirection into anything but `/dev/null` or a descriptor, an
/// unterminated quote.
fn segments(line: &str) -> Option<Vec<Vec<String>>> {
    let mut out = vec![Vec::new()];
    let mut word = String::new();
    // A word is in progress (an empty quoted word counts).
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    fn end(word: &mut String, in_word: &mut bool, out: &mut [Vec<String>]) {
        if *in_word {
            if let Some(last) = out.last_mut() {
                last.push(std::mem::take(word));
            }
            *in_word = false;
        }
    }
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end(&mut word, &mut in_word, &mut out),
            '\n' | ';' => {
                end(&mut word, &mut in_word, &mut out);
                out.push(Vec::new());
            }
            '#' if !in_word => {
                // A comment runs to the end of the line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push(Vec::new());
                        break;
                    }
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        '`' => return None,
                        '$' if chars.peek() == Some(&'(') => return None,
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    // A line continuation.
                    Some('\n') | None => {}
                    Some(c) => word.push(c),
                }
            }
            '`' | '(' | ')' => return None,
            '$' if chars.peek() == Some(&'(') => return None,
            '|' => {
                end(&mut word, &mut in_word, &mut out);
                // `||` and `|&` join as `|` does.
                if matches!(chars.peek(), Some('|' | '&')) {
                    chars.next();
                }
                out.push(Vec::new());
            }
            '&' => {
                end(&mut word, &mut in_word, &mut out);
                match chars.next() {
                    Some('&') => out.push(Vec::new()),
                    // `&>` and `&>>`: both outputs into a file.
                    Some('>') => {
                        if chars.peek() == Some(&'>') {
                            chars.next();
                        }
                        redirected_harmlessly(&mut chars)?;
                    }
                    _ => return None,
                }
            }
            '>' => {
                // `2>`: the descriptor's digits are no word of the command.
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end(&mut word, &mut in_word, &mut out);
                if matches!(chars.peek(), Some('>' | '|')) {
                    chars.next();
                }
                redirected_harmlessly(&mut chars)?;
            }
            '<' => {
                if matches!(chars.peek(), Some('<' | '(' | '>' | '&')) {
                    return None;
                }
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end(&mut word, &mut in_word, &mut out);
                // The input file is read, not a word of the command.
                read_target(&mut chars)?;
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end(&mut word, &mut in_word, &mut out);
    out.retain(|s| !s.is_empty());
    Some(out)
}

/// After `>`: `&N`, `&-` or `/dev/null`, else `None`.
fn redirected_harmlessly(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<()> {
    if chars.peek() == Some(&'&') {
        chars.next();
        let fd = read_target(chars)?;
        return (fd == "-" || fd.chars().all(|c| c.is_ascii_digit())).then_some(());
    }
    (read_target(chars)? == "/dev/null").then_some(())
}

/// A redirection's target word: plain characters after optional blanks.
fn read_target(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
    while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
        chars.next();
    }
    let mut target = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || matches!(c, ';' | '|' | '&' | '<' | '>' | '(' | ')') {
            break;
        }
        if matches!(c, '\'' | '"' | '\\' | '`' | '$') {
            return None;
        }
        target.push(c);
        chars.next();
    }
    (!target.is_empty()).then_some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(l: &str) -> bool {
        looks_read_only(&["/bin/sh".into(), "-c".into(), l.into()])
    }

    #[test]
    fn readers_and_their_pipelines_look_read_only() {
        for l in [
            "ls -la",
            "git status --short",
            "git -C sub --no-pager log --oneline -5",
            "grep -rn 'fn main' src | head -20",
            "cd src && grep -c x *.rs; wc -l lib.rs",
            "sed -n '1,20p' src/lib.rs",
            "find . -name '*.rs' -newer Cargo.toml 2>/dev/null | sort | uniq -c",
            "cat a.txt > /dev/null 2>&1",
            "LC_ALL=C grep -r x . || true",
            "git diff HEAD~1 -- src # what changed",
            "wc -l < src/lib.rs",
            "rg \"a b\" &>/dev/null",
        ] {
            assert!(line(l), "{l}");
        }
        assert!(looks_read_only(&["git".into(), "status".into()]));
        assert!(looks_read_only(&[
            "/usr/bin/grep".into(),
            "-r".into(),
            "x".into()
        ]));
    }

    #[test]
    fn writers_and_what_the_guess_cannot_read_do_not() {
        for l in [
            "sed -i 's/a/b/' f.txt",
            "sed -ni 's/a/b/p' f.txt",
            "sed --in-place=.bak 's/a/b/' f.txt",
            "echo x > f.txt",
            "echo x >> f.txt",
            "cat a 2> err.log",
            "grep x a | tee out",
            "find . -name '*.o' -delete",
            "find . -exec rm {} \\;",
            "sort -o out.txt in.txt",
            "uniq in.txt out.txt",
            "git checkout -- .",
            "git stash",
            "git -C sub reset --hard",
            "cargo fmt",
            "ls $(pwd)",
            "ls `pwd`",
            "echo \"$(rm -rf x)\"",
            "(cd a && ls)",
            "ls &",
            "cat <<EOF\nx\nEOF",
            "diff <(ls a) <(ls b)",
            "echo 'unterminated",
            "echo x >\"f\"",
            "git",
        ] {
            assert!(!line(l), "{l}");
        }
        assert!(!looks_read_only(&[
            "sed".into(),
            "-i".into(),
            "s/a/b/".into(),
            "f".into()
        ]));
        assert!(!looks_read_only(&["npm".into(), "install".into()]));
    }
}
