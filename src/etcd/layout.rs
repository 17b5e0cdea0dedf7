//! Where everything of one session lives in etcd's key space, and which
//! ranges can hold what conflicts with a key.
//!
//! Pure: byte strings in, byte strings out. The layout (also in
//! docs/DISTRIBUTED.md), under `P = /writ/<session>/`:
//!
//! | key | value | lease |
//! |---|---|---|
//! | `P i` | the last instance number handed out | none |
//! | `P s` | sha256 of the session token (hex), set by the first server | none |
//! | `P l` | the session's slot limits, set by the first server | none |
//! | `P c` | the session's case mode, set by the first table | none |
//! | `P n/<instance>/<counter>` | nothing: its version is that table's count | none |
//! | `P t/<sha256 of an actor token>` | the token's actor and lease | the actor's |
//! | `P v/<host:port>` | nothing: a server whose MCP handles others may name | its MCP root's |
//! | `P r/<hold>` | a fence released by its owner's drop: the owner's lineage | the owner's |
//! | `P g/<actor>/<sha256 of a ticket>` | the hold granted to the wait the ticket names, or `abandoned` when its caller gave it up first | the actor's |
//! | `P a/<actor>` | the actor record | the actor's |
//! | `P h/<hold>` | the hold record (every key of the hold) | the owner's |
//! | `P f/<owner>/<hold>` | the fence's (or claim's) record again, found by owner | the owner's (a claim's own) |
//! | `P q/<waiter>` | the waiting request (every key it asks for) | the requester's |
//! | `P e/<waiter>` | the waiting request's wait-for edges | the requester's |
//! | `P w/<waiter>` | nothing: marks a waiting `child_wait` | the requester's |
//! | `P p/<waiter>` | the place a reordering of the queue moved the waiting request to | the requester's |
//! | `P k<path>\0<t\|f>/<h\|w><id>` | one key of a hold (`h`) or waiter (`w`) | its owner's |
//! | `P m/<actor><path>` | the actor's read mark of a file (SPEC §6) | the actor's |
//! | `P z/<actor><path>` | how often the actor's writes to a file were refused `Stale` since one landed (SPEC §6) | the actor's |
//! | `P o<path>` | the last write through writ to a file: writer, content hash | none |
//!
//! Ids are 16 hex digits. `<path>` is the key's normalized absolute path
//! (case-folded in a session that folds case) without a trailing
//! separator, the root being the empty string; `t` marks a tree key, `f` a
//! file key. Since a path component holds neither `/` nor
//! NUL, the entries *at* a path are exactly the prefix `P k<path>\0`, the
//! tree entries at it `P k<path>\0t/`, and the entries strictly *beneath*
//! it `P k<path>/`: what can conflict with one key is a few disjoint
//! prefixes, whatever else the table holds.

use std::collections::BTreeSet;
use std::path::Path;

use crate::core::key::Key;

/// What an index entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    Hold(u64),
    Waiter(u64),
}

/// The records the event stream follows ([`Layout::record_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record<'k> {
    /// `P a/<actor>`.
    Actor(u64),
    /// `P h/<hold>`.
    Hold(u64),
    /// `P q/<waiter>`.
    Waiter(u64),
    /// `P o<path>`: the last write to a file.
    Writer(&'k Path),
    /// `P n/<instance>/<counter>`: one of a table's counters, by name.
    Counter(&'k [u8]),
}

/// The key prefixes of one session.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: Vec<u8>,
}

/// The first key after every key that starts with `prefix` (etcd's
/// `range_end` for a prefix). Every prefix here ends in a byte below 0xff.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

pub(crate) fn hex(id: u64) -> String {
    format!("{id:016x}")
}

/// A key's path as the index spells it: the normalized path without a
/// trailing separator, the root as the empty string.
fn spelled(path: &Path) -> &[u8] {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes == b"/" { &[] } else { bytes }
}

impl Layout {
    pub(crate) fn new(session: &str) -> Self {
        Layout {
            root: format!("/writ/{session}/").into_bytes(),
        }
    }

    fn under(&self, rest: &[u8]) -> Vec<u8> {
        let mut key = self.root.clone();
        key.extend_from_slice(rest);
        key
    }

    /// Every key of the session.
    pub(crate) fn everything(&self) -> Vec<u8> {
        self.root.clone()
    }

    /// What kind of record `key` is, and of which id or path: what the
    /// event stream follows of the session.
    pub(crate) fn record_of<'k>(&self, key: &'k [u8]) -> Option<Record<'k>> {
        let rest = key.strip_prefix(self.root.as_slice())?;
        let id = |tail: &[u8]| {
            std::str::from_utf8(tail)
                .ok()
                .filter(|t| t.len() == 16)
                .and_then(|t| u64::from_str_radix(t, 16).ok())
        };
        match rest {
            [b'a', b'/', tail @ ..] => id(tail).map(Record::Actor),
            [b'h', b'/', tail @ ..] => id(tail).map(Record::Hold),
            [b'q', b'/', tail @ ..] => id(tail).map(Record::Waiter),
            [b'n', b'/', tail @ ..] => tail.rsplit(|&b| b == b'/').next().map(Record::Counter),
            [b'o', path @ ..] if path.first() == Some(&b'/') => std::str::from_utf8(path)
                .ok()
                .map(|p| Record::Writer(Path::new(p))),
            _ => None,
        }
    }

    pub(crate) fn instances(&self) -> Vec<u8> {
        self.under(b"i")
    }

    pub(crate) fn session_token(&self) -> Vec<u8> {
        self.under(b"s")
    }

    /// The session's case mode (`sensitive` or `insensitive`), set by its
    /// first table.
    pub(crate) fn case(&self) -> Vec<u8> {
        self.under(b"c")
    }

    /// The session's slot limits (SPEC §11), set by its first server.
    pub(crate) fn limits(&self) -> Vec<u8> {
        self.under(b"l")
    }

    /// The session's history folder (the journal every server of the
    /// session records in, or none), set by its first server.
    pub(crate) fn journal(&self) -> Vec<u8> {
        self.under(b"j")
    }

    /// A server of the session whose MCP agent handles others may name:
    /// its `host:port`, on its MCP root's lease.
    pub(crate) fn mcp_server(&self, authority: &str) -> Vec<u8> {
        self.under(format!("v/{authority}").as_bytes())
    }

    /// An actor token's key: the hex sha256 of the token, never the token.
    pub(crate) fn token(&self, hash: &str) -> Vec<u8> {
        self.under(format!("t/{hash}").as_bytes())
    }

    /// The mark of a fence released because its owner was dropped.
    pub(crate) fn dropped(&self, hold: u64) -> Vec<u8> {
        self.under(format!("r/{}", hex(hold)).as_bytes())
    }

    /// One table instance's key for one counter (SPEC §5): its etcd
    /// *version* is the count (every event puts it once, in the
    /// transaction that makes the event), so nothing ever compares on it
    /// and no two tables write the same one.
    pub(crate) fn counter(&self, instance: u64, name: &str) -> Vec<u8> {
        self.under(format!("n/{}/{name}", hex(instance)).as_bytes())
    }

    pub(crate) fn counters(&self) -> Vec<u8> {
        self.under(b"n/")
    }

    pub(crate) fn actor(&self, id: u64) -> Vec<u8> {
        self.under(format!("a/{}", hex(id)).as_bytes())
    }

    pub(crate) fn actors(&self) -> Vec<u8> {
        self.under(b"a/")
    }

    pub(crate) fn hold(&self, id: u64) -> Vec<u8> {
        self.under(format!("h/{}", hex(id)).as_bytes())
    }

    /// The answer to the wait `ticket_hash` names (SPEC §13's tickets),
    /// where every server finds it.
    pub(crate) fn ticket(&self, actor: u64, ticket_hash: &str) -> Vec<u8> {
        self.under(format!("g/{}/{ticket_hash}", hex(actor)).as_bytes())
    }

    /// Every ticket answer of `actor`, counted against its bound.
    pub(crate) fn tickets_of(&self, actor: u64) -> Vec<u8> {
        self.under(format!("g/{}/", hex(actor)).as_bytes())
    }

    pub(crate) fn holds(&self) -> Vec<u8> {
        self.under(b"h/")
    }

    pub(crate) fn fence(&self, owner: u64, id: u64) -> Vec<u8> {
        self.under(format!("f/{}/{}", hex(owner), hex(id)).as_bytes())
    }

    pub(crate) fn all_fences(&self) -> Vec<u8> {
        self.under(b"f/")
    }

    pub(crate) fn fences_of(&self, owner: u64) -> Vec<u8> {
        self.under(format!("f/{}/", hex(owner)).as_bytes())
    }

    pub(crate) fn waiter(&self, id: u64) -> Vec<u8> {
        self.under(format!("q/{}", hex(id)).as_bytes())
    }

    pub(crate) fn waiters(&self) -> Vec<u8> {
        self.under(b"q/")
    }

    /// The mark of a waiting `child_wait` (its record is `q/<waiter>`):
    /// nothing, created and deleted with that record, so a child's slot
    /// count can compare on this prefix alone (no `child_wait` queued or
    /// gone since the count) without retrying for every other waiter.
    pub(crate) fn slot_waiter(&self, waiter: u64) -> Vec<u8> {
        self.under(format!("w/{}", hex(waiter)).as_bytes())
    }

    pub(crate) fn slot_waiters(&self) -> Vec<u8> {
        self.under(b"w/")
    }

    pub(crate) fn edges(&self, waiter: u64) -> Vec<u8> {
        self.under(format!("e/{}", hex(waiter)).as_bytes())
    }

    pub(crate) fn all_edges(&self) -> Vec<u8> {
        self.under(b"e/")
    }

    /// The place a reordering of the queue moved a waiter to.
    pub(crate) fn moved(&self, waiter: u64) -> Vec<u8> {
        self.under(format!("p/{}", hex(waiter)).as_bytes())
    }

    pub(crate) fn all_moved(&self) -> Vec<u8> {
        self.under(b"p/")
    }

    /// An actor's read mark of the file `norm` (an absolute path, folded as
    /// the session folds): `P m/<actor><norm>`.
    pub(crate) fn mark(&self, actor: u64, norm: &Path) -> Vec<u8> {
        let mut out = self.under(format!("m/{}", hex(actor)).as_bytes());
        out.extend_from_slice(norm.as_os_str().as_encoded_bytes());
        out
    }

    /// How often an actor's writes to the file `norm` were refused `Stale`
    /// since one landed there (SPEC §6: its place in the file's queue):
    /// `P z/<actor><norm>`.
    pub(crate) fn refusals(&self, actor: u64, norm: &Path) -> Vec<u8> {
        let mut out = self.under(format!("z/{}", hex(actor)).as_bytes());
        out.extend_from_slice(norm.as_os_str().as_encoded_bytes());
        out
    }

    /// Every refusal count of one actor (as [`Layout::marks_of`]).
    pub(crate) fn refusals_of(&self, actor: u64) -> Vec<u8> {
        self.under(format!("z/{}/", hex(actor)).as_bytes())
    }

    /// Every read mark of one actor. Paths begin with `/`, and ids have a
    /// fixed width, so this prefix holds that actor's marks and no other's.
    pub(crate) fn marks_of(&self, actor: u64) -> Vec<u8> {
        self.under(format!("m/{}/", hex(actor)).as_bytes())
    }

    /// The snapshot of an actor's write made outside writ to the file
    /// `norm`, kept between `history.snapshot` and `history.record`:
    /// `P x/<actor><norm>`.
    pub(crate) fn outside_snapshot(&self, actor: u64, norm: &Path) -> Vec<u8> {
        let mut out = self.under(format!("x/{}", hex(actor)).as_bytes());
        out.extend_from_slice(norm.as_os_str().as_encoded_bytes());
        out
    }

    /// The last write through writ to the file `norm`: `P o<norm>` (the
    /// origin of its content). Not under `w/`: a path begins with `/`,
    /// and `P w/` is the prefix of the queued `child_wait`s.
    pub(crate) fn writer(&self, norm: &Path) -> Vec<u8> {
        let mut out = self.under(b"o");
        out.extend_from_slice(norm.as_os_str().as_encoded_bytes());
        out
    }

    /// The index entry of one key of a hold or waiter.
    pub(crate) fn entry(&self, key: &Key, owner: Owner) -> Vec<u8> {
        let mut out = self.under(b"k");
        out.extend_from_slice(spelled(&key.norm));
        out.extend_from_slice(if key.tree { b"\0t/" } else { b"\0f/" });
        let tail = match owner {
            Owner::Hold(id) => format!("h{}", hex(id)),
            Owner::Waiter(id) => format!("w{}", hex(id)),
        };
        out.extend_from_slice(tail.as_bytes());
        out
    }

    /// Reads an index entry's key back: the path, whether it is a tree,
    /// and what it belongs to. `None` for anything else.
    pub(crate) fn parse_entry<'k>(&self, entry: &'k [u8]) -> Option<(&'k [u8], bool, Owner)> {
        let rest = entry
            .strip_prefix(self.root.as_slice())?
            .strip_prefix(b"k")?;
        let nul = rest.iter().rposition(|&b| b == 0)?;
        let (path, tail) = (&rest[..nul], &rest[nul + 1..]);
        let (tree, tail) = match tail {
            [b't', b'/', tail @ ..] => (true, tail),
            [b'f', b'/', tail @ ..] => (false, tail),
            _ => return None,
        };
        let (kind, digits) = tail.split_first()?;
        let id = u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        let owner = match kind {
            b'h' => Owner::Hold(id),
            b'w' => Owner::Waiter(id),
            _ => return None,
        };
        Some((path, tree, owner))
    }

    /// The prefixes that hold every index entry that can overlap one of
    /// `keys`: for each key, the tree entries at each strict ancestor, all
    /// entries at the key's path, and for a tree key everything beneath it.
    /// Prefixes inside another prefix of the set are left out, so the list
    /// is the fewest disjoint ranges that cover them all (sorted).
    pub(crate) fn conflict_ranges<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a Key>,
    ) -> Vec<Vec<u8>> {
        let mut all = BTreeSet::new();
        for key in keys {
            let path = spelled(&key.norm);
            // Every strict ancestor: the root, then each `/`-ended prefix.
            let ancestors = std::iter::once(0).chain(
                path.iter()
                    .enumerate()
                    .skip(1)
                    .filter(|(_, b)| **b == b'/')
                    .map(|(i, _)| i),
            );
            for end in ancestors {
                let mut at = self.under(b"k");
                at.extend_from_slice(&path[..end]);
                at.extend_from_slice(b"\0t/");
                all.insert(at);
            }
            let mut at = self.under(b"k");
            at.extend_from_slice(path);
            if key.tree {
                let mut beneath = at.clone();
                beneath.push(b'/');
                all.insert(beneath);
            }
            at.push(0);
            all.insert(at);
        }
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(all.len());
        for prefix in all {
            if out.last().is_some_and(|kept| prefix.starts_with(kept)) {
                continue;
            }
            out.push(prefix);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(p: &str) -> Key {
        let tree = p.ends_with('/') && p.len() > 1;
        let trimmed = if tree { p.trim_end_matches('/') } else { p };
        Key::exact(trimmed, tree || p == "/")
    }

    fn shown(ranges: &[Vec<u8>]) -> Vec<String> {
        ranges
            .iter()
            .map(|r| String::from_utf8_lossy(r).replace('\0', "\\0"))
            .collect()
    }

    #[test]
    fn a_file_key_reads_its_ancestors_trees_and_its_own_entries() {
        let layout = Layout::new("s");
        assert_eq!(
            shown(&layout.conflict_ranges([&k("/ws/src/a.rs")])),
            vec![
                "/writ/s/k\\0t/",
                "/writ/s/k/ws\\0t/",
                "/writ/s/k/ws/src\\0t/",
                "/writ/s/k/ws/src/a.rs\\0",
            ]
        );
    }

    #[test]
    fn a_tree_key_reads_beneath_itself_and_absorbs_keys_there() {
        let layout = Layout::new("s");
        let ranges = layout.conflict_ranges([&k("/ws/src/"), &k("/ws/src/a.rs"), &k("/ws/b")]);
        assert_eq!(
            shown(&ranges),
            vec![
                "/writ/s/k\\0t/",
                "/writ/s/k/ws\\0t/",
                "/writ/s/k/ws/b\\0",
                "/writ/s/k/ws/src\\0",
                "/writ/s/k/ws/src/",
            ]
        );
        // `/ws-old` is no descendant of `/ws`: its entries lie in none of them.
        let stranger = layout.entry(&k("/ws-old/a"), Owner::Hold(1));
        assert!(
            !layout
                .conflict_ranges([&k("/ws/")])
                .iter()
                .any(|r| stranger.starts_with(r))
        );
    }

    #[test]
    fn every_overlapping_entry_lies_in_a_range_and_no_other_does() {
        let layout = Layout::new("s");
        let paths = [
            "/",
            "/ws/",
            "/ws",
            "/ws/a",
            "/ws/a/",
            "/ws/a/b",
            "/ws/ab",
            "/ws-old/a",
            "/x/",
        ];
        for mine in paths {
            let ranges = layout.conflict_ranges([&k(mine)]);
            for theirs in paths {
                let entry = layout.entry(&k(theirs), Owner::Waiter(7));
                let inside = ranges.iter().any(|r| entry.starts_with(r));
                let overlap = crate::core::key::overlaps(&k(mine), &k(theirs));
                assert_eq!(inside, overlap, "{mine} vs {theirs}");
            }
        }
    }

    #[test]
    fn marks_are_found_by_their_actor_and_writers_by_path() {
        let layout = Layout::new("s");
        let mark = layout.mark(0xa, Path::new("/ws/src/a.rs"));
        assert_eq!(
            String::from_utf8_lossy(&mark),
            "/writ/s/m/000000000000000a/ws/src/a.rs"
        );
        assert!(mark.starts_with(&layout.marks_of(0xa)));
        // Another actor's marks (even one whose id starts alike) lie
        // outside the prefix.
        assert!(
            !layout
                .mark(0xab, Path::new("/ws/a"))
                .starts_with(&layout.marks_of(0xa))
        );
        assert!(
            !layout
                .mark(0xa0, Path::new("/ws/a"))
                .starts_with(&layout.marks_of(0xa))
        );
        assert_eq!(
            String::from_utf8_lossy(&layout.writer(Path::new("/ws/src/a.rs"))),
            "/writ/s/o/ws/src/a.rs"
        );
        // Neither kind lies in a range an admission reads or compares.
        let ranges = layout.conflict_ranges([&k("/")]);
        for key in [mark, layout.writer(Path::new("/ws/a"))] {
            assert!(!ranges.iter().any(|r| key.starts_with(r)));
        }
    }

    #[test]
    fn entries_parse_back() {
        let layout = Layout::new("s");
        let entry = layout.entry(&k("/ws/src/"), Owner::Hold(0xab));
        assert_eq!(
            layout.parse_entry(&entry),
            Some((&b"/ws/src"[..], true, Owner::Hold(0xab)))
        );
        let root = layout.entry(&k("/"), Owner::Waiter(2));
        assert_eq!(
            layout.parse_entry(&root),
            Some((&b""[..], true, Owner::Waiter(2)))
        );
        assert_eq!(layout.parse_entry(b"/writ/s/a/01"), None);
        assert_eq!(prefix_end(b"/writ/s/k\0"), b"/writ/s/k\x01".to_vec());
    }

    #[test]
    fn every_kind_of_key_is_under_its_own_prefix_and_no_other() {
        let layout = Layout::new("s");
        let file = Path::new("/ws/src/a.rs");
        let prefixes = [
            ("counters", layout.counters()),
            ("actors", layout.actors()),
            ("holds", layout.holds()),
            ("fences", layout.all_fences()),
            ("waiters", layout.waiters()),
            ("child waits", layout.slot_waiters()),
            ("edges", layout.all_edges()),
            ("marks of 1", layout.marks_of(1)),
            ("refusals of 1", layout.refusals_of(1)),
            ("index", layout.under(b"k")),
        ];
        let keys = [
            ("counters", layout.counter(1, "admitted")),
            ("actors", layout.actor(1)),
            ("holds", layout.hold(1)),
            ("fences", layout.fence(1, 2)),
            ("waiters", layout.waiter(1)),
            ("child waits", layout.slot_waiter(1)),
            ("edges", layout.edges(1)),
            ("marks of 1", layout.mark(1, file)),
            ("refusals of 1", layout.refusals(1, file)),
            ("", layout.refusals(2, file)),
            (
                "index",
                layout.entry(&Key::exact("/ws/src/a.rs", false), Owner::Hold(1)),
            ),
            ("", layout.writer(file)),
            ("", layout.ticket(1, "ab")),
            ("", layout.token("ab")),
            ("", layout.dropped(1)),
            ("", layout.mark(2, file)),
            ("", layout.instances()),
            ("", layout.session_token()),
            ("", layout.case()),
            ("", layout.limits()),
        ];
        for (kind, key) in &keys {
            let under: Vec<&str> = prefixes
                .iter()
                .filter(|(_, prefix)| key.starts_with(prefix))
                .map(|(name, _)| *name)
                .collect();
            let expected: Vec<&str> = if kind.is_empty() { vec![] } else { vec![kind] };
            assert_eq!(under, expected, "{}", String::from_utf8_lossy(key));
        }
    }
}
