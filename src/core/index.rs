//! The path index: a tree of paths with intention counts.
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
//! Every node stands for one path: the root node for the empty path, every
//! other node for a path of one or more components, spelled canonically
//! ([`canonical`]: the components joined by `/`). A map from canonical path
//! to node finds a node with one hash of the path, without walking from the
//! root; each node links to its parent and its children. A node keeps the
//! entries whose key is exactly its path, and per class how many entries lie
//! strictly beneath it: the *intention counts*, named after the intention
//! locks of hierarchical lock managers. A query for key `k`:
//!
//! 1. finds the node of `k`, or of its longest prefix that has one (one map
//!    look-up, or two for a new file in a known directory);
//! 2. climbs the parent links to the root, and at every strict ancestor of
//!    `k` visits the *tree* entries of a class in the mask (a bit test skips
//!    the others, so an ancestor without such entries costs one load);
//! 3. at `k`'s own node visits every entry of a class in the mask;
//! 4. beneath it, entries overlap only when `k` is a tree: the intention
//!    counts say which subtrees hold a class of the mask, and only those are
//!    descended.
//!
//! So a query costs a map look-up or two, O(depth) parent hops, and the
//! entries it reports (for a tree key, also the nodes on the way to them);
//! it never visits an entry on an unrelated path, however many there are.
//! Insertion does the same look-ups, creates missing nodes and climbs to
//! add its counts; removal starts at the node insertion returned and climbs
//! to take them back, without hashing.
//!
//! A node that becomes empty is not unlinked at once but queued, and the
//! oldest queued nodes are unlinked once more than [`SPARE_EMPTY`] wait: a
//! path that is admitted, released and admitted again (the common case)
//! then finds its node still there, and no admission pays for more than a
//! few unlinks.
//!
//! Canonical paths compare as `Path::components` does, the way `Path::eq`
//! and `Path::starts_with` compare, so the index agrees with
//! [`crate::core::key::overlaps`] on every key, normalized or not.
//!
//! # Invariants (checked by [`Index::assert_consistent`])
//!
//! For every live node `n`, class `c` and tree flag `t`:
//! - `n.at[2c + t]` = number of entries in `n.entries` of class `c`, tree flag `t`;
//! - `n.below[c]` = number of entries of class `c` in nodes strictly beneath `n`;
//! - bit `2c + t` of `n.at_bits` is set iff `n.at[2c + t] > 0`;
//!   bit `c` of `n.below_bits` is set iff `n.below[c] > 0`;
//! - `paths[n.path] = n` for every live node but the root, and no other key;
//!   `n.path` = `canonical` of the parent's path joined with one component;
//! - `nodes[n.parent].children[n.pos_in_parent] = n`;
//! - `n.queued` iff `n` is in `empty` (once); every live node but the root
//!   that has no entry and no child is queued; free nodes are not live.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use crate::core::key::{Key, Mode};
use crate::core::table::HoldKind;

/// The hasher of the index's maps: fast on short byte strings and integers,
/// and seeded per process, so path names cannot be chosen to collide on
/// purpose.
pub(crate) type Hasher = foldhash::fast::RandomState;

/// A map with the index's hasher.
pub(crate) type FastMap<K, V> = HashMap<K, V, Hasher>;

/// A node's position in [`Index::nodes`].
pub(crate) type NodeId = u32;

const ROOT: NodeId = 0;

/// How many empty nodes may wait to be unlinked (see the module docs).
#[cfg(not(test))]
pub(crate) const SPARE_EMPTY: usize = 1024;
/// Small in tests, so that the property tests unlink nodes all the time.
#[cfg(test)]
pub(crate) const SPARE_EMPTY: usize = 3;

/// How many queued nodes one removal may unlink at most.
const UNLINK_BUDGET: usize = 4;

/// A `(kind, mode)` pair as a number in `0..4`: one column of the conflict
/// matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Class(u8);

/// A set of classes: bit `c` stands for `Class(c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mask(u8);

/// `CLASH[c]` is the set of classes that clash with class `c`; it is
/// [`crate::core::table::clash`] as bits (a unit test checks the two agree).
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
            // A claim is indexed as what it excludes: an exclusive fence.
            (HoldKind::Fence | HoldKind::Claim, Mode::Exclusive) | (HoldKind::Claim, _) => 0,
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

/// The nodes of one claim's keys, in key order: up to four without
/// allocating (most requests name one to four paths).
#[derive(Debug, Default)]
pub(crate) struct NodeList {
    len: usize,
    inline: [NodeId; 4],
    heap: Vec<NodeId>,
}

impl NodeList {
    pub(crate) fn as_slice(&self) -> &[NodeId] {
        if self.len <= self.inline.len() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.heap.clear();
    }
}

impl FromIterator<NodeId> for NodeList {
    fn from_iter<T: IntoIterator<Item = NodeId>>(iter: T) -> Self {
        let mut list = NodeList::default();
        for node in iter {
            if list.len < list.inline.len() {
                list.inline[list.len] = node;
            } else {
                if list.heap.is_empty() {
                    list.heap.extend_from_slice(&list.inline);
                }
                list.heap.push(node);
            }
            list.len += 1;
        }
        list
    }
}

/// One key of one hold or waiter, stored at the key's node.
#[derive(Debug, Clone, Copy)]
struct Entry<I> {
    id: I,
    class: Class,
    tree: bool,
}

/// `repr(C)`: the fields a climb reads and writes come first, in one cache
/// line.
#[derive(Debug)]
#[repr(C)]
struct Node<I> {
    /// The parent node (the root's parent is itself).
    parent: NodeId,
    /// Bit `2c + t` set iff `at[2c + t] > 0`.
    at_bits: u8,
    /// Bit `c` set iff `below[c] > 0`.
    below_bits: u8,
    /// In `Index::empty`.
    queued: bool,
    /// Linked into the tree (not on the free list).
    live: bool,
    /// `below[c]`: entries of class `c` strictly beneath this node.
    below: [u32; 4],
    /// This node's position in its parent's `children`.
    pos_in_parent: u32,
    /// `at[2c + t]`: entries here of class `c` and tree flag `t`.
    at: [u32; 8],
    /// Entries whose key is exactly this node's path.
    entries: Vec<Entry<I>>,
    children: Vec<NodeId>,
    /// The canonical path; also this node's key in `Index::paths`.
    path: Arc<[u8]>,
}

impl<I> Node<I> {
    fn new(parent: NodeId, path: Arc<[u8]>) -> Self {
        Node {
            parent,
            at_bits: 0,
            below_bits: 0,
            queued: false,
            live: true,
            pos_in_parent: 0,
            at: [0; 8],
            below: [0; 4],
            entries: Vec::new(),
            children: Vec::new(),
            path,
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

/// A path spelled as its components joined by `/` (the root component is
/// `/` itself): equal for two paths iff `Path::eq` says they are equal, and
/// a prefix at a component boundary iff `Path::starts_with` says so. A path
/// that is already spelled so (every key the resolver makes) is borrowed.
pub(crate) fn canonical(path: &Path) -> Cow<'_, [u8]> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if is_canonical(bytes) {
        return Cow::Borrowed(bytes);
    }
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    for component in path.components() {
        if !out.is_empty() && out != b"/" {
            out.push(b'/');
        }
        out.extend_from_slice(component.as_os_str().as_encoded_bytes());
    }
    Cow::Owned(out)
}

/// Whether `bytes` is already its components joined by `/`: no empty
/// component (`//`, or a trailing `/` after something), and no `.` but a
/// leading one (`/./`, or a trailing `/.`), which `Path::components` drops.
///
/// Every admission asks this of every key, so it looks at eight bytes at a
/// time for a `/` followed by `/` or `.`, and only then byte by byte.
fn is_canonical(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    // The high bit of byte j is set if byte j of `w` is `b` (and perhaps,
    // spuriously, above a byte that is): a superset, never fewer.
    let has = |w: u64, b: u8| {
        let v = w ^ (ONES * u64::from(b));
        v.wrapping_sub(ONES) & !v & HIGHS
    };
    let n = bytes.len();
    if n > 1 && bytes[n - 1] == b'/' {
        return false;
    }
    let mut i = 0;
    while i + 9 <= n {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let (this, next) = (word(i), word(i + 1));
        if has(this, b'/') & (has(next, b'/') | has(next, b'.')) != 0
            && !is_canonical_at(bytes, i, i + 8)
        {
            return false;
        }
        i += 8;
    }
    is_canonical_at(bytes, i, n)
}

/// Checks the separators in `bytes[from..to]` one by one.
fn is_canonical_at(bytes: &[u8], from: usize, to: usize) -> bool {
    for i in from..to {
        if bytes[i] == b'/' {
            match bytes.get(i + 1) {
                None => return bytes.len() == 1,
                Some(b'/') => return false,
                Some(b'.') if matches!(bytes.get(i + 2), None | Some(b'/')) => return false,
                _ => {}
            }
        }
    }
    true
}

/// The length of the canonical path's parent (0 for the root node).
fn parent_len(path: &[u8]) -> usize {
    match path.iter().rposition(|&b| b == b'/') {
        _ if path == b"/" => 0,
        None => 0,
        Some(0) => 1,
        Some(i) => i,
    }
}

/// The length of the prefix one component longer than `path[..len]`.
fn next_len(path: &[u8], len: usize) -> usize {
    let start = if len == 0 {
        if path.first() == Some(&b'/') {
            return 1;
        }
        0
    } else if path[len - 1] == b'/' {
        len // after the root component `/`
    } else {
        len + 1 // after a separator
    };
    match path[start..].iter().position(|&b| b == b'/') {
        Some(i) => start + i,
        None => path.len(),
    }
}

/// A tree of paths; see the module docs. `I` identifies an entry's owner
/// (a slot of the table or of the queue).
#[derive(Debug)]
pub(crate) struct Index<I> {
    /// Live and free nodes; `nodes[0]` is the root and never freed.
    nodes: Vec<Node<I>>,
    /// Free positions in `nodes`, reused last-in first-out.
    free: Vec<NodeId>,
    /// Every live node but the root, by canonical path.
    paths: FastMap<Arc<[u8]>, NodeId>,
    /// Nodes that were empty when queued, oldest first.
    empty: VecDeque<NodeId>,
}

impl<I> Default for Index<I> {
    fn default() -> Self {
        Index {
            nodes: vec![Node::new(ROOT, Arc::from(&b""[..]))],
            free: Vec::new(),
            paths: HashMap::default(),
            empty: VecDeque::new(),
        }
    }
}

impl<I: Copy + PartialEq> Index<I> {
    fn node(&self, id: NodeId) -> &Node<I> {
        &self.nodes[id as usize]
    }

    /// The node of `path[..len]` for the longest `len` that has one.
    fn deepest(&self, path: &[u8]) -> (NodeId, usize) {
        let mut len = path.len();
        while len > 0 {
            if let Some(&node) = self.paths.get(&path[..len]) {
                return (node, len);
            }
            len = parent_len(&path[..len]);
        }
        (ROOT, 0)
    }

    /// Adds `id`'s `key` of class `class`; returns the node to pass to
    /// [`Index::remove`].
    pub(crate) fn insert(&mut self, key: &Key, class: Class, id: I) -> NodeId {
        let path = canonical(&key.norm);
        let (mut node, mut len) = self.deepest(&path);
        while len < path.len() {
            len = next_len(&path, len);
            node = self.add_child(node, &path[..len]);
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
        let c = usize::from(class.0);
        let mut up = node;
        while up != ROOT {
            up = self.nodes[up as usize].parent;
            let n = &mut self.nodes[up as usize];
            n.below[c] += 1;
            n.below_bits |= 1 << c;
        }
        node
    }

    fn add_child(&mut self, parent: NodeId, path: &[u8]) -> NodeId {
        let path: Arc<[u8]> = Arc::from(path);
        let child = match self.free.pop() {
            Some(free) => {
                let n = &mut self.nodes[free as usize];
                n.parent = parent;
                n.live = true;
                n.path = path.clone();
                free
            }
            None => {
                let id = NodeId::try_from(self.nodes.len())
                    .unwrap_or_else(|_| panic!("more than {} index nodes", NodeId::MAX));
                self.nodes.push(Node::new(parent, path.clone()));
                id
            }
        };
        let siblings = &mut self.nodes[parent as usize].children;
        let pos = u32::try_from(siblings.len()).unwrap_or(u32::MAX);
        siblings.push(child);
        self.nodes[child as usize].pos_in_parent = pos;
        self.paths.insert(path, child);
        child
    }

    /// Removes one entry `(id, class, tree)` from `node` (as returned by
    /// [`Index::insert`]). Returns false, changing nothing, when there is
    /// no such entry.
    pub(crate) fn remove(&mut self, node: NodeId, class: Class, tree: bool, id: I) -> bool {
        let Some(n) = self.nodes.get_mut(node as usize).filter(|n| n.live) else {
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
        self.queue_if_empty(node);
        self.unlink_spare();
        true
    }

    fn queue_if_empty(&mut self, node: NodeId) {
        let n = &mut self.nodes[node as usize];
        if node != ROOT && !n.queued && n.is_empty() {
            n.queued = true;
            self.empty.push_back(node);
        }
    }

    /// Unlinks the oldest queued nodes that are still empty, while more
    /// than [`SPARE_EMPTY`] are queued, at most [`UNLINK_BUDGET`] of them.
    fn unlink_spare(&mut self) {
        for _ in 0..UNLINK_BUDGET {
            if self.empty.len() <= SPARE_EMPTY {
                return;
            }
            let Some(node) = self.empty.pop_front() else {
                return;
            };
            let n = &mut self.nodes[node as usize];
            n.queued = false;
            if !n.live || !n.is_empty() {
                continue;
            }
            n.live = false;
            n.entries.clear();
            let (parent, pos) = (n.parent, n.pos_in_parent as usize);
            let path = std::mem::replace(&mut n.path, Arc::from(&b""[..]));
            self.paths.remove(&path[..]);
            let siblings = &mut self.nodes[parent as usize].children;
            siblings.swap_remove(pos);
            if let Some(&moved) = siblings.get(pos) {
                self.nodes[moved as usize].pos_in_parent = pos as u32;
            }
            self.free.push(node);
            self.queue_if_empty(parent);
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
        if !self.node(ROOT).holds_any(mask) {
            return ControlFlow::Continue(());
        }
        let path = canonical(&key.norm);
        let (node, len) = self.deepest(&path);
        let exact = len == path.len();
        // Rule 2: strict ancestors overlap through their tree entries.
        let tree_bits = mask.tree_bits();
        let mut up = match (exact, node) {
            (true, ROOT) => None,
            (true, n) => Some(self.node(n).parent),
            (false, n) => Some(n),
        };
        while let Some(a) = up {
            let n = self.node(a);
            if n.at_bits & tree_bits != 0 {
                for e in &n.entries {
                    if e.tree && mask.has(e.class) {
                        f(e.id)?;
                    }
                }
            }
            up = (a != ROOT).then_some(n.parent);
        }
        if !exact {
            return ControlFlow::Continue(());
        }
        // Rule 3: the key's own node; every entry there overlaps.
        let n = self.node(node);
        if n.at_bits & mask.any_bits() != 0 {
            for e in &n.entries {
                if mask.has(e.class) {
                    f(e.id)?;
                }
            }
        }
        // Rule 4: beneath, only a tree key overlaps, and only the subtrees
        // whose counts hold a class of the mask are descended.
        if key.tree && n.below_bits & mask.0 != 0 {
            let wanted = |c: &NodeId| self.node(*c).holds_any(mask);
            let mut stack: Vec<NodeId> = n.children.iter().copied().filter(wanted).collect();
            while let Some(id) = stack.pop() {
                let n = self.node(id);
                if n.at_bits & mask.any_bits() != 0 {
                    for e in &n.entries {
                        if mask.has(e.class) {
                            f(e.id)?;
                        }
                    }
                }
                if n.below_bits & mask.0 != 0 {
                    stack.extend(n.children.iter().copied().filter(wanted));
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Whether nothing is indexed.
    pub(crate) fn is_empty(&self) -> bool {
        let root = self.node(ROOT);
        root.entries.is_empty() && root.below_bits == 0
    }

    /// Whether `node` is live, stands for `key`'s path and holds the entry
    /// `(id, class, key.tree)`. For invariant checks.
    pub(crate) fn holds_entry(&self, node: NodeId, key: &Key, class: Class, id: I) -> bool {
        let Some(n) = self.nodes.get(node as usize).filter(|n| n.live) else {
            return false;
        };
        *n.path == *canonical(&key.norm)
            && n.entries
                .iter()
                .any(|e| e.id == id && e.class == class && e.tree == key.tree)
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        let root = self.node(ROOT);
        (root.at.iter().sum::<u32>() + root.below.iter().sum::<u32>()) as usize
    }

    /// Panics when a per-field invariant of the module docs is broken.
    /// Returns the number of entries found.
    pub(crate) fn assert_consistent(&self) -> usize {
        let free: std::collections::HashSet<NodeId> = self.free.iter().copied().collect();
        assert_eq!(free.len(), self.free.len(), "a node is freed twice");
        assert!(!free.contains(&ROOT), "the root is on the free list");
        for &f in &free {
            assert!(!self.node(f).live, "free node {f} is live");
        }
        let queued: std::collections::HashSet<NodeId> = self.empty.iter().copied().collect();
        assert_eq!(queued.len(), self.empty.len(), "a node is queued twice");
        for (id, n) in self.nodes.iter().enumerate() {
            assert_eq!(
                n.queued,
                queued.contains(&(id as NodeId)),
                "queued flag of {id}"
            );
        }
        let mut reachable = 0usize;
        let total = self.check_node(ROOT, &mut reachable);
        assert_eq!(
            reachable + free.len(),
            self.nodes.len(),
            "a node is neither reachable nor free"
        );
        assert_eq!(self.paths.len() + 1, reachable, "paths map size");
        let sum: u32 = total.iter().sum();
        assert_eq!(sum as usize, self.len(), "len disagrees with the counts");
        sum as usize
    }

    /// Checks `id`'s subtree; returns its entry counts per class (here and
    /// beneath).
    fn check_node(&self, id: NodeId, reachable: &mut usize) -> [u32; 4] {
        *reachable += 1;
        let n = self.node(id);
        assert!(n.live, "node {id} is reachable but not live");
        if id != ROOT {
            assert_eq!(self.paths.get(&n.path[..]), Some(&id), "paths[{id}]");
            assert!(
                !n.is_empty() || n.queued,
                "node {id} is empty and not queued"
            );
            let parent = self.node(n.parent);
            assert_eq!(
                parent.children.get(n.pos_in_parent as usize),
                Some(&id),
                "pos of {id}"
            );
            assert_eq!(
                parent_len(&n.path),
                parent.path.len(),
                "parent path of {id}"
            );
            assert_eq!(
                &n.path[..parent.path.len()],
                &parent.path[..],
                "path of {id}"
            );
            assert_eq!(
                next_len(&n.path, parent.path.len()),
                n.path.len(),
                "one component"
            );
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
        for &child in &n.children {
            assert_eq!(self.node(child).parent, id, "parent link of node {child}");
            let sub = self.check_node(child, reachable);
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
    use crate::core::key::overlaps;
    use crate::core::table::clash;

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
    }

    #[test]
    fn empty_nodes_are_unlinked_past_the_spare_count() {
        let mut index: Index<usize> = Index::default();
        let n = SPARE_EMPTY + 50;
        for i in 0..n {
            let key = k(&format!("/ws/d{}/f{i}", i % 7));
            let node = index.insert(&key, Class(3), i);
            assert!(index.remove(node, Class(3), false, i));
        }
        index.assert_consistent();
        assert!(index.empty.len() <= SPARE_EMPTY + UNLINK_BUDGET);
        assert!(
            index.paths.len() <= SPARE_EMPTY + 16,
            "{}",
            index.paths.len()
        );
        // A node that was unlinked comes back on the next insert.
        let node = index.insert(&k("/ws/d0/f0"), Class(0), 0);
        assert!(index.holds_entry(node, &k("/ws/d0/f0"), Class(0), 0));
        index.assert_consistent();
    }

    /// The word-at-a-time check agrees with the byte-by-byte one (and with
    /// `Path::components`, through `canonical`) on every short spelling.
    #[test]
    fn fast_canonical_check_agrees_with_the_slow_one() {
        let alphabet = [b'/', b'.', b'a'];
        for len in 0..=11usize {
            let total = 3usize.pow(len as u32);
            for code in 0..total {
                let mut c = code;
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        let b = alphabet[c % 3];
                        c /= 3;
                        b
                    })
                    .collect();
                let text = String::from_utf8_lossy(&bytes);
                let expected = rebuilt(&text) == bytes;
                assert_eq!(is_canonical(&bytes), expected, "{text:?}");
            }
        }
        let long = "/home/agent/work/repo/src/.git/d0001/f.rs".to_string();
        for (bad, good) in [("//", "/"), ("/./", "/"), ("/.", ""), ("/", "")] {
            for at in 0..long.len() {
                if long.as_bytes()[at] == b'/' {
                    let mut s = long.clone();
                    s.replace_range(at..at + 1, bad);
                    let expected = rebuilt(&s) == s.as_bytes();
                    assert_eq!(is_canonical(s.as_bytes()), expected, "{s} ({good:?})");
                }
            }
        }
    }

    proptest::proptest! {
        /// Long spellings cross several eight-byte words.
        #[test]
        fn fast_canonical_check_on_long_spellings(
            bytes in proptest::collection::vec(
                proptest::sample::select(&[b'/', b'.', b'a', b'b'][..]),
                0..64,
            )
        ) {
            let text = String::from_utf8_lossy(&bytes);
            proptest::prop_assert_eq!(is_canonical(&bytes), rebuilt(&text) == bytes);
        }
    }

    /// The components of `path` joined by `/`, built the slow way.
    fn rebuilt(path: &str) -> Vec<u8> {
        let mut out: Vec<u8> = Vec::new();
        for c in Path::new(path).components() {
            if !out.is_empty() && out != b"/" {
                out.push(b'/');
            }
            out.extend_from_slice(c.as_os_str().as_encoded_bytes());
        }
        out
    }

    const SPELLINGS: [&str; 24] = [
        "", "/", "//", "/a", "/a/", "//a//b", "/a/./b", "/a/.", "/.", "/./", "a", "a/b", "./a",
        ".", "./", "./.", "a/./b/.", "/a/..", "/a/../b", "../a", "a//b/", "/a/b/c", "/ab", "/a/bc",
    ];

    #[test]
    fn canonical_spelling_compares_as_path_does() {
        for a in SPELLINGS {
            let ca = canonical(Path::new(a));
            assert_eq!(&*ca, &rebuilt(a)[..], "{a:?}");
            for b in SPELLINGS {
                let cb = canonical(Path::new(b));
                assert_eq!(ca == cb, Path::new(a) == Path::new(b), "{a:?} == {b:?}");
                // `b` starts with `a` iff `a`'s canonical spelling is one of
                // the prefixes of `b`'s that the index walks through.
                let mut prefixes = vec![0usize];
                let mut len = 0;
                while len < cb.len() {
                    len = next_len(&cb, len);
                    prefixes.push(len);
                }
                for w in prefixes.windows(2) {
                    assert_eq!(parent_len(&cb[..w[1]]), w[0], "parent of {:?}", &cb[..w[1]]);
                }
                let walked = prefixes.iter().any(|&l| cb[..l] == *ca);
                assert_eq!(
                    walked,
                    Path::new(b).starts_with(a),
                    "{b:?} starts with {a:?}"
                );
            }
        }
    }
}
