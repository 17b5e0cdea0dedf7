//! The path index: a trie over key components, with intention counts.
//!
//! # Implementation details
//!
//! The resource table (live holds) and the wait queue (waiting requests)
//! each keep one [`Index`]. It answers one question: which entries have a key
//! that *overlaps* a given key and whose class is in a given set? Two keys
//! overlap when they are equal, or one is a tree key that is an
//! ancestor-or-equal of the other; an exact key at an ancestor does not
//! overlap its descendants. The class of an entry is the `(kind, mode)` pair
//! of its key ([`Class`]), so "whose class clashes with mine" is one bit mask
//! ([`Class::clashes`]).
//!
//! Every node stands for one path (the root node for the empty path; the
//! component `/` is an ordinary child of it) and keeps the entries whose key
//! is exactly that path. It also keeps, per class, how many entries lie
//! strictly beneath it: the *intention counts*, named after the intention
//! locks of hierarchical lock managers. A query walks the request key's
//! components from the root:
//!
//! 1. at every strict ancestor, only *tree* entries can overlap, and only
//!    those of a class in the mask are visited (a bit test skips the rest);
//! 2. at the key's own node, every entry of a class in the mask overlaps;
//! 3. beneath it, entries overlap only when the request key is a tree; the
//!    intention counts say which subtrees hold an entry of a class in the
//!    mask, and only those are descended.
//!
//! The walk stops as soon as the counts beneath the current node hold no
//! class of the mask, or the key's next component has no node. So a query
//! costs O(depth) hash look-ups plus the entries it reports (and, for a tree
//! key, the nodes on the way to them); it never visits an entry on an
//! unrelated path, however many there are. Insertion walks the same path,
//! creating nodes; removal starts at the node the insertion returned and
//! climbs parent links, so it hashes at most once (to unlink a node that
//! became empty).
//!
//! Components are compared as `Path::components` yields them, the way
//! `Path::eq` and `Path::starts_with` compare, so the index agrees with
//! [`crate::key::overlaps`] on every key, normalized or not.
//!
//! # Invariants (checked by [`Index::assert_consistent`])
//!
//! For every live node `n` and class `c`, tree flag `t`:
//! - `n.at[c][t]` = number of entries in `n.entries` of class `c` and tree flag `t`;
//! - `n.below[c]` = number of entries of class `c` in nodes strictly beneath `n`;
//! - bit `2c + t` of `n.at_bits` is set iff `n.at[c][t] > 0`;
//!   bit `c` of `n.below_bits` is set iff `n.below[c] > 0`;
//! - `n.children[name] = m` iff `m.parent = n` and `m.name = name`;
//! - every live node but the root has an entry or a child (empty nodes are
//!   unlinked and put on the free list at once), so the number of live
//!   nodes is at most the number of entries × depth, plus one.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ops::ControlFlow;

use crate::key::{Key, Mode};
use crate::table::HoldKind;

/// The hasher of the index's maps: fast on short strings and integers, and
/// seeded per process, so path names cannot be chosen to collide on purpose.
pub(crate) type Hasher = foldhash::fast::RandomState;

/// A map with the index's hasher.
pub(crate) type FastMap<K, V> = HashMap<K, V, Hasher>;

/// A node's position in [`Index::nodes`].
pub(crate) type NodeId = u32;

const ROOT: NodeId = 0;

/// A `(kind, mode)` pair as a number in `0..4`: one column of the conflict
/// matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Class(u8);

/// A set of classes: bit `c` stands for `Class(c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mask(u8);

/// `CLASH[c]` is the set of classes that clash with class `c`; it is
/// [`crate::table::clash`] as bits (a unit test checks the two agree).
///
/// Classes: 0 = Fence-X, 1 = Fence-S, 2 = Call-X, 3 = Call-S.
const CLASH: [Mask; 4] = [
    Mask(0b0111), // Fence-X: Fence-X, Fence-S, Call-X
    Mask(0b0101), // Fence-S: Fence-X, Call-X
    Mask(0b1111), // Call-X: everything
    Mask(0b0100), // Call-S: Call-X
];

impl Class {
    pub(crate) fn of(kind: HoldKind, mode: Mode) -> Class {
        Class(match (kind, mode) {
            (HoldKind::Fence, Mode::Exclusive) => 0,
            (HoldKind::Fence, Mode::Shared) => 1,
            (HoldKind::Call, Mode::Exclusive) => 2,
            (HoldKind::Call, Mode::Shared) => 3,
        })
    }

    /// The classes a key of this class clashes with.
    pub(crate) fn clashes(self) -> Mask {
        CLASH[usize::from(self.0)]
    }

    fn at_slot(self, tree: bool) -> usize {
        usize::from(self.0) * 2 + usize::from(tree)
    }
}

impl Mask {
    /// Every class: "which entries overlap", whatever they are.
    pub(crate) const ALL: Mask = Mask(0b1111);

    fn has(self, class: Class) -> bool {
        self.0 & (1 << class.0) != 0
    }

    /// The `at_bits` of tree entries of these classes.
    fn tree_bits(self) -> u8 {
        let mut bits = 0;
        for c in 0..4 {
            if self.0 & (1 << c) != 0 {
                bits |= 1 << (c * 2 + 1);
            }
        }
        bits
    }

    /// The `at_bits` of any entries (tree or exact) of these classes.
    fn any_bits(self) -> u8 {
        let mut bits = 0;
        for c in 0..4 {
            if self.0 & (1 << c) != 0 {
                bits |= 0b11 << (c * 2);
            }
        }
        bits
    }
}

/// One key of one hold or waiter, stored at the key's node.
#[derive(Debug, Clone, Copy)]
struct Entry<I> {
    id: I,
    class: Class,
    tree: bool,
}

#[derive(Debug)]
struct Node<I> {
    /// The parent node (the root's parent is itself).
    parent: NodeId,
    /// This node's component, as its parent's `children` map spells it.
    name: Box<OsStr>,
    children: FastMap<Box<OsStr>, NodeId>,
    /// Entries whose key is exactly this node's path.
    entries: Vec<Entry<I>>,
    /// `at[2c + t]`: entries here of class `c` and tree flag `t`.
    at: [u32; 8],
    /// `below[c]`: entries of class `c` strictly beneath this node.
    below: [u32; 4],
    /// Bit `2c + t` set iff `at[2c + t] > 0`.
    at_bits: u8,
    /// Bit `c` set iff `below[c] > 0`.
    below_bits: u8,
}

impl<I> Node<I> {
    fn new(parent: NodeId, name: Box<OsStr>, hasher: &Hasher) -> Self {
        Node {
            parent,
            name,
            children: HashMap::with_hasher(hasher.clone()),
            entries: Vec::new(),
            at: [0; 8],
            below: [0; 4],
            at_bits: 0,
            below_bits: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.children.is_empty()
    }

    /// Whether anything of `mask` is here or beneath.
    fn holds_any(&self, mask: Mask) -> bool {
        self.at_bits & mask.any_bits() != 0 || self.below_bits & mask.0 != 0
    }
}

/// A trie of keys; see the module docs. `I` identifies an entry's owner
/// (a slot of the table or of the queue).
#[derive(Debug)]
pub(crate) struct Index<I> {
    /// Live and free nodes; `nodes[0]` is the root and never freed.
    nodes: Vec<Node<I>>,
    /// Free positions in `nodes`, reused last-in first-out.
    free: Vec<NodeId>,
    hasher: Hasher,
}

impl<I> Default for Index<I> {
    fn default() -> Self {
        let hasher = Hasher::default();
        Index {
            nodes: vec![Node::new(ROOT, Box::from(OsStr::new("")), &hasher)],
            free: Vec::new(),
            hasher,
        }
    }
}

impl<I: Copy + PartialEq> Index<I> {
    /// Adds `id`'s `key` of class `class`; returns the node to pass to
    /// [`Index::remove`].
    pub(crate) fn insert(&mut self, key: &Key, class: Class, id: I) -> NodeId {
        let c = usize::from(class.0);
        let mut node = ROOT;
        for component in key.norm.components() {
            let name = component.as_os_str();
            let n = &mut self.nodes[node as usize];
            n.below[c] += 1;
            n.below_bits |= 1 << c;
            node = match n.children.get(name) {
                Some(&child) => child,
                None => self.add_child(node, name),
            };
        }
        let n = &mut self.nodes[node as usize];
        let slot = class.at_slot(key.tree);
        n.entries.push(Entry {
            id,
            class,
            tree: key.tree,
        });
        n.at[slot] += 1;
        n.at_bits |= 1 << slot;
        node
    }

    fn add_child(&mut self, parent: NodeId, name: &OsStr) -> NodeId {
        let name: Box<OsStr> = Box::from(name);
        let child = match self.free.pop() {
            Some(free) => {
                let n = &mut self.nodes[free as usize];
                n.parent = parent;
                n.name = name.clone();
                free
            }
            None => {
                let id = NodeId::try_from(self.nodes.len())
                    .unwrap_or_else(|_| panic!("more than {} index nodes", NodeId::MAX));
                self.nodes
                    .push(Node::new(parent, name.clone(), &self.hasher));
                id
            }
        };
        self.nodes[parent as usize].children.insert(name, child);
        child
    }

    /// Removes one entry `(id, class, tree)` from `node` (as returned by
    /// [`Index::insert`]). Returns false, changing nothing, when there is
    /// no such entry.
    pub(crate) fn remove(&mut self, node: NodeId, class: Class, tree: bool, id: I) -> bool {
        let Some(n) = self.nodes.get_mut(node as usize) else {
            return false;
        };
        let Some(at) = n
            .entries
            .iter()
            .position(|e| e.id == id && e.class == class && e.tree == tree)
        else {
            return false;
        };
        n.entries.swap_remove(at);
        let slot = class.at_slot(tree);
        n.at[slot] -= 1;
        if n.at[slot] == 0 {
            n.at_bits &= !(1 << slot);
        }
        let c = usize::from(class.0);
        let mut up = node;
        while up != ROOT {
            up = self.nodes[up as usize].parent;
            let n = &mut self.nodes[up as usize];
            n.below[c] -= 1;
            if n.below[c] == 0 {
                n.below_bits &= !(1 << c);
            }
        }
        self.prune(node);
        true
    }

    /// Unlinks `node` and its ancestors while they are empty.
    fn prune(&mut self, mut node: NodeId) {
        while node != ROOT && self.nodes[node as usize].is_empty() {
            let n = &mut self.nodes[node as usize];
            let parent = n.parent;
            let name = std::mem::replace(&mut n.name, Box::from(OsStr::new("")));
            self.nodes[parent as usize].children.remove(&name);
            self.free.push(node);
            node = parent;
        }
    }

    /// Calls `f` with the id of every entry whose key overlaps `key` and
    /// whose class is in `mask`, stopping early when `f` breaks. An entry
    /// is reported once per overlapping key; order is unspecified.
    pub(crate) fn visit<B>(
        &self,
        key: &Key,
        mask: Mask,
        mut f: impl FnMut(I) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        let tree_bits = mask.tree_bits();
        let mut node = &self.nodes[ROOT as usize];
        for component in key.norm.components() {
            // Rule 1: a strict ancestor overlaps through its tree entries.
            if node.at_bits & tree_bits != 0 {
                for e in &node.entries {
                    if e.tree && mask.has(e.class) {
                        f(e.id)?;
                    }
                }
            }
            // Nothing of the mask beneath: nothing further can overlap.
            if node.below_bits & mask.0 == 0 {
                return ControlFlow::Continue(());
            }
            match node.children.get(component.as_os_str()) {
                Some(&child) => node = &self.nodes[child as usize],
                None => return ControlFlow::Continue(()),
            }
        }
        // Rule 2: the key's own node; every entry there overlaps.
        if node.at_bits & mask.any_bits() != 0 {
            for e in &node.entries {
                if mask.has(e.class) {
                    f(e.id)?;
                }
            }
        }
        // Rule 3: beneath, only a tree key overlaps, and only the subtrees
        // whose counts hold a class of the mask are descended.
        if key.tree && node.below_bits & mask.0 != 0 {
            let wanted = |c: &NodeId| self.nodes[*c as usize].holds_any(mask);
            let mut stack: Vec<NodeId> = node.children.values().copied().filter(wanted).collect();
            while let Some(id) = stack.pop() {
                let n = &self.nodes[id as usize];
                if n.at_bits & mask.any_bits() != 0 {
                    for e in &n.entries {
                        if mask.has(e.class) {
                            f(e.id)?;
                        }
                    }
                }
                if n.below_bits & mask.0 != 0 {
                    stack.extend(n.children.values().copied().filter(wanted));
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Whether nothing is indexed.
    pub(crate) fn is_empty(&self) -> bool {
        self.nodes[ROOT as usize].is_empty()
    }

    /// Whether `node` is live and holds the entry `(id, class, key.tree)`
    /// and stands for `key`'s path. For invariant checks.
    pub(crate) fn holds_entry(&self, node: NodeId, key: &Key, class: Class, id: I) -> bool {
        let Some(n) = self.nodes.get(node as usize) else {
            return false;
        };
        if !n
            .entries
            .iter()
            .any(|e| e.id == id && e.class == class && e.tree == key.tree)
        {
            return false;
        }
        // The node's path, read upwards, equals the key's components.
        let mut names: Vec<&OsStr> = Vec::new();
        let mut up = node;
        while up != ROOT {
            let n = &self.nodes[up as usize];
            names.push(&n.name);
            up = n.parent;
        }
        names.reverse();
        names
            .into_iter()
            .eq(key.norm.components().map(|c| c.as_os_str()))
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        let root = &self.nodes[ROOT as usize];
        (root.at.iter().sum::<u32>() + root.below.iter().sum::<u32>()) as usize
    }

    /// Panics when a per-field invariant of the module docs is broken.
    /// Returns the number of entries found.
    pub(crate) fn assert_consistent(&self) -> usize {
        let free: std::collections::HashSet<NodeId> = self.free.iter().copied().collect();
        assert_eq!(free.len(), self.free.len(), "a node is freed twice");
        assert!(!free.contains(&ROOT), "the root is on the free list");
        let mut reachable = 0usize;
        let total = self.check_node(ROOT, &free, &mut reachable);
        assert_eq!(
            reachable + free.len(),
            self.nodes.len(),
            "a node is neither reachable nor free"
        );
        let sum: u32 = total.iter().sum();
        assert_eq!(sum as usize, self.len(), "len disagrees with the counts");
        sum as usize
    }

    /// Checks `id`'s subtree; returns its entry counts per class (here and
    /// beneath).
    fn check_node(
        &self,
        id: NodeId,
        free: &std::collections::HashSet<NodeId>,
        reachable: &mut usize,
    ) -> [u32; 4] {
        assert!(!free.contains(&id), "node {id} is reachable and free");
        *reachable += 1;
        let n = &self.nodes[id as usize];
        if id != ROOT {
            assert!(!n.is_empty(), "node {id} is empty but still linked");
        }
        let mut at = [0u32; 8];
        for e in &n.entries {
            at[e.class.at_slot(e.tree)] += 1;
        }
        assert_eq!(at, n.at, "at counts of node {id}");
        for (slot, count) in at.iter().enumerate() {
            assert_eq!(n.at_bits & (1 << slot) != 0, *count > 0, "at_bits of {id}");
        }
        let mut below = [0u32; 4];
        for (name, &child) in &n.children {
            let c = &self.nodes[child as usize];
            assert_eq!(c.parent, id, "parent link of node {child}");
            assert_eq!(&*c.name, &**name, "name of node {child}");
            let sub = self.check_node(child, free, reachable);
            for k in 0..4 {
                below[k] += sub[k];
            }
        }
        assert_eq!(below, n.below, "below counts of node {id}");
        for (c, count) in below.iter().enumerate() {
            assert_eq!(
                n.below_bits & (1 << c) != 0,
                *count > 0,
                "below_bits of {id}"
            );
        }
        let mut total = below;
        for (slot, count) in at.iter().enumerate() {
            total[slot / 2] += count;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::overlaps;
    use crate::table::clash;

    fn k(p: &str) -> Key {
        match p.strip_suffix('/') {
            Some(dir) if !dir.is_empty() => Key::exact(dir, true),
            _ => Key::exact(p, false),
        }
    }

    #[test]
    fn clash_bits_match_the_matrix() {
        let classes = [
            (HoldKind::Fence, Mode::Exclusive),
            (HoldKind::Fence, Mode::Shared),
            (HoldKind::Call, Mode::Exclusive),
            (HoldKind::Call, Mode::Shared),
        ];
        for a in classes {
            for b in classes {
                let ca = Class::of(a.0, a.1);
                let cb = Class::of(b.0, b.1);
                assert_eq!(ca.clashes().has(cb), clash(a, b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn visits_exactly_the_overlapping_keys() {
        let paths = [
            "/ws/",
            "/ws",
            "/ws/a",
            "/ws/a/",
            "/ws/a/b",
            "/ws/a/b/",
            "/ws/b",
            "/ws-old/a",
            "/",
            "/ws/a/b/c/d",
        ];
        let mut index: Index<usize> = Index::default();
        let mut nodes = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            nodes.push(index.insert(&k(p), Class(2), i));
        }
        index.assert_consistent();
        for probe in paths.iter().chain(["/ws/a/x", "/x/", "/ws/a/b/c/"].iter()) {
            let mut seen = Vec::new();
            let _ = index.visit(&k(probe), Mask::ALL, |i| {
                seen.push(i);
                ControlFlow::<()>::Continue(())
            });
            seen.sort();
            let expected: Vec<usize> = (0..paths.len())
                .filter(|&i| overlaps(&k(paths[i]), &k(probe)))
                .collect();
            assert_eq!(seen, expected, "probe {probe}");
        }
        for (i, p) in paths.iter().enumerate() {
            assert!(index.remove(nodes[i], Class(2), k(p).tree, i));
            index.assert_consistent();
        }
        assert!(index.is_empty());
        assert_eq!(index.nodes.len(), index.free.len() + 1);
    }
}
