//! The index's ordered map: a B+ tree packed for keys that mostly arrive in order.
//!
//! Why not `std::collections::BTreeMap`: its nodes hold 11 entries and split in the middle, so
//! a map grown by appends (a DAQ buffer's keys: event numbers rising) keeps its leaves half
//! full, and a random lookup over a million keys walks five or six levels of cold nodes. Here a
//! leaf holds [`LEAF_CAP`] entries (keys in one array, values in another, sized to fill an
//! allocator size class), and a node that overflows at its right end keeps its entries and
//! starts a new node with the one that did not fit. A map grown in key order is packed full;
//! one grown in random order splits in the middle as usual. Lookups binary-search the keys of
//! the inner levels, shared by every lookup and hot in cache; in the leaf, a point lookup
//! compares one byte of hash per key held by the leaf's parent ([`LeafKid`]) and loads only
//! the key that matches and its value.
//!
//! Removal merges a leaf that falls under a quarter full with a neighbour, or evens the two
//! out; an inner node merges with a neighbour when both fit in one. Empty nodes are removed at
//! once, so every leaf but an empty root holds an entry. Inner nodes can stay sparse after many
//! random removals (a small share of the memory: one inner node per [`INNER_CAP`] children).
//!
//! Safe code apart from CPU intrinsics (prefetch hints, the SSE2 fingerprint compare): nodes are
//! boxes, the children of an inner node are all leaves or all inner nodes (every leaf is at the
//! same depth).

use crate::prefetch;
use arrayvec::ArrayVec;
use std::cmp::Ordering;
use std::ops::{Bound, RangeBounds};

/// Entries per leaf. 63 entries of a 24-byte key and a 16-byte value, with the two lengths,
/// are 2536 bytes: the allocator's 2560-byte size class.
pub const LEAF_CAP: usize = 63;
/// Children per inner node.
pub const INNER_CAP: usize = 48;
/// A leaf or inner node under this many entries or children after a removal is merged with
/// (or evened out against) a neighbour.
const LEAF_MIN: usize = LEAF_CAP / 4;
const INNER_MIN: usize = INNER_CAP / 4;
/// Deepest tree an iterator can walk. A root splits only when full and an overflowing node
/// keeps its full left half, so depth d needs far more than `INNER_CAP^(d-2)` entries ever
/// inserted: 16 levels cannot be reached.
const MAX_DEPTH: usize = 16;

struct Leaf<K, V> {
    keys: ArrayVec<K, LEAF_CAP>,
    vals: ArrayVec<V, LEAF_CAP>,
}

/// `keys[i]` separates `kids[i]` (keys below it) from `kids[i + 1]` (keys from it on).
struct Inner<K, V> {
    keys: ArrayVec<K, { INNER_CAP - 1 }>,
    kids: Kids<K, V>,
}

// An inner node of inner nodes carries the leaves' size unused (about 3 KiB): they are one
// node in 48, and boxing the leaves' list would add a pointer chase to every lookup.
#[allow(clippy::large_enum_variant)]
enum Kids<K, V> {
    Leaves(ArrayVec<LeafKid<K, V>, INNER_CAP>),
    Inners(ArrayVec<Box<Inner<K, V>>, INNER_CAP>),
}

enum Node<K, V> {
    Leaf(LeafKid<K, V>),
    Inner(Box<Inner<K, V>>),
}

/// A byte of a key's hash, for [`LeafKid`]: equal keys have equal fingerprints.
pub trait Fingerprint {
    fn fingerprint(&self) -> u8;
}

/// A leaf as its parent holds it: with one fingerprint per key, in the parent's memory. A
/// lookup compares the fingerprints (hot in cache with the parent) and then loads from the
/// cold leaf only the key they point at and its value, in one round of cache misses. A search
/// of the leaf's keys waits for the keys, then for the value it found.
struct LeafKid<K, V> {
    /// `fps[i]` is the fingerprint of `leaf.keys[i]`; `fps[LEAF_CAP]` is the leaf's length.
    /// Kept so by every change of the leaf's keys (`insert_at`, `remove_at`, `refresh`).
    fps: [u8; LEAF_CAP + 1],
    leaf: Box<Leaf<K, V>>,
}

/// An ordered map (see the module comment).
pub struct BTree<K, V> {
    root: Node<K, V>,
    len: usize,
}

/// The entries with the largest and the second largest keys, borrowed from the map.
pub type LastTwo<'a, K, V> = (Option<(&'a K, &'a V)>, Option<(&'a K, &'a V)>);

/// What an insertion below a node did.
enum Insert<K, V, N> {
    Replaced(V),
    Added,
    /// The node split: the new right sibling and the smallest key it may hold.
    Split(K, N),
}

impl<K, V> Leaf<K, V> {
    fn new() -> Box<Self> {
        Box::new(Leaf {
            keys: ArrayVec::new(),
            vals: ArrayVec::new(),
        })
    }
}

impl<K: Fingerprint, V> LeafKid<K, V> {
    fn new(leaf: Box<Leaf<K, V>>) -> Self {
        let mut kid = LeafKid {
            fps: [0; LEAF_CAP + 1],
            leaf,
        };
        kid.refresh();
        kid
    }

    fn empty() -> Self {
        Self::new(Leaf::new())
    }

    /// Recomputes the fingerprints after the leaf's keys changed other than one at a time.
    fn refresh(&mut self) {
        for (fp, key) in self.fps.iter_mut().zip(&self.leaf.keys) {
            *fp = key.fingerprint();
        }
        self.fps[LEAF_CAP] = self.leaf.keys.len() as u8;
    }

    /// Inserts an entry at `at` (the leaf is not full).
    fn insert_at(&mut self, at: usize, key: K, val: V) {
        let len = self.leaf.keys.len();
        self.fps.copy_within(at..len, at + 1);
        self.fps[at] = key.fingerprint();
        self.fps[LEAF_CAP] = len as u8 + 1;
        self.leaf.keys.insert(at, key);
        self.leaf.vals.insert(at, val);
    }

    /// Removes the entry at `at`; returns its value.
    fn remove_at(&mut self, at: usize) -> V {
        let len = self.leaf.keys.len();
        self.fps.copy_within(at + 1..len, at);
        self.fps[LEAF_CAP] = len as u8 - 1;
        self.leaf.keys.remove(at);
        self.leaf.vals.remove(at)
    }
}

impl<K: Fingerprint + Eq, V> LeafKid<K, V> {
    /// Bit `i` set where the leaf's key `i` has `key`'s fingerprint (the keys to compare).
    #[inline]
    fn candidates(&self, key: &K) -> u64 {
        let len = self.fps[LEAF_CAP] as usize;
        matches(&self.fps, key.fingerprint()) & ((1u64 << len) - 1)
    }

    /// The place of `key` in the leaf: the keys whose fingerprints match are compared, the
    /// first one (nearly always the only one) loaded at once with the leaf's length.
    #[inline]
    fn find(&self, key: &K) -> Option<usize> {
        let mut candidates = self.candidates(key);
        if candidates != 0 {
            // The value's line (and the one holding the values' length, read by the caller's
            // bounds check) requested now, with the key's, rather than after the comparison.
            let first = candidates.trailing_zeros() as usize;
            prefetch::line(self.leaf.vals.as_ptr().wrapping_add(first));
            prefetch::line(&self.leaf.vals);
        }
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            if self.leaf.keys.get(i) == Some(key) {
                return Some(i);
            }
            candidates &= candidates - 1;
        }
        None
    }

    /// Asks for the lines [`LeafKid::find`] of `key` reads (its first candidate's key and
    /// value, and the lengths), without waiting for them.
    #[inline]
    fn prefetch(&self, key: &K) {
        let candidates = self.candidates(key);
        if candidates != 0 {
            let first = candidates.trailing_zeros() as usize;
            prefetch::line(self.leaf.keys.as_ptr().wrapping_add(first));
            prefetch::line(self.leaf.vals.as_ptr().wrapping_add(first));
            prefetch::line(&self.leaf.keys);
            prefetch::line(&self.leaf.vals);
        }
    }
}

/// Bit `i` set where `fps[i] == fp`.
#[inline]
fn matches(fps: &[u8; LEAF_CAP + 1], fp: u8) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // Safety: SSE2 is part of x86_64.
        let want = unsafe { _mm_set1_epi8(fp as i8) };
        let mut bits = 0u64;
        for (part, bytes) in fps.chunks_exact(16).enumerate() {
            // Safety: SSE2 is part of x86_64; the load reads the 16 bytes of `bytes`.
            let found = unsafe {
                let got = _mm_loadu_si128(bytes.as_ptr() as *const __m128i);
                _mm_movemask_epi8(_mm_cmpeq_epi8(got, want)) as u16
            };
            bits |= u64::from(found) << (16 * part);
        }
        bits
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        fps.iter()
            .enumerate()
            .fold(0, |bits, (i, &f)| bits | (u64::from(f == fp) << i))
    }
}

impl<K, V> std::ops::Deref for LeafKid<K, V> {
    type Target = Leaf<K, V>;
    fn deref(&self) -> &Leaf<K, V> {
        &self.leaf
    }
}

impl<K, V> Kids<K, V> {
    fn len(&self) -> usize {
        match self {
            Kids::Leaves(k) => k.len(),
            Kids::Inners(k) => k.len(),
        }
    }
}

impl<K: Ord + Clone + Fingerprint, V> Default for BTree<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Clone + Fingerprint, V> BTree<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        BTree {
            root: Node::Leaf(LeafKid::empty()),
            len: 0,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn leaf_for(&self, key: &K) -> &LeafKid<K, V> {
        let mut node = match &self.root {
            Node::Leaf(l) => return l,
            Node::Inner(n) => n,
        };
        loop {
            let i = node.keys.partition_point(|s| s <= key);
            match &node.kids {
                Kids::Leaves(l) => return &l[i],
                Kids::Inners(n) => node = &n[i],
            }
        }
    }

    fn leaf_for_mut(&mut self, key: &K) -> &mut LeafKid<K, V> {
        let mut node = match &mut self.root {
            Node::Leaf(l) => return l,
            Node::Inner(n) => n,
        };
        loop {
            let i = node.keys.partition_point(|s| s <= key);
            match &mut node.kids {
                Kids::Leaves(l) => return &mut l[i],
                Kids::Inners(n) => node = &mut n[i],
            }
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        let leaf = self.leaf_for(key);
        leaf.find(key).map(|i| &leaf.vals[i])
    }

    /// Walks to `key`'s leaf and asks for the lines a [`BTree::get`] of it then reads, without
    /// waiting for them: lookups of many keys started this way overlap their misses.
    pub fn prefetch(&self, key: &K) {
        self.leaf_for(key).prefetch(key);
    }

    /// The value of `key`, to change in place.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let kid = self.leaf_for_mut(key);
        let i = kid.find(key)?;
        Some(&mut kid.leaf.vals[i])
    }

    /// True if `key` has an entry.
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s value; returns the value it replaces.
    pub fn insert(&mut self, key: K, val: V) -> Option<V> {
        let root_split = match &mut self.root {
            Node::Leaf(l) => match insert_leaf(l, key, val, true) {
                Insert::Replaced(v) => return Some(v),
                Insert::Added => None,
                Insert::Split(sep, right) => Some((sep, Node::Leaf(right))),
            },
            Node::Inner(n) => match insert_inner(n, key, val, true) {
                Insert::Replaced(v) => return Some(v),
                Insert::Added => None,
                Insert::Split(sep, right) => Some((sep, Node::Inner(right))),
            },
        };
        if let Some((sep, right)) = root_split {
            // A new root over the old one and its new sibling.
            let left = std::mem::replace(&mut self.root, Node::Leaf(LeafKid::empty()));
            let kids = match (left, right) {
                (Node::Leaf(l), Node::Leaf(r)) => Kids::Leaves([l, r].into_iter().collect()),
                (Node::Inner(l), Node::Inner(r)) => Kids::Inners([l, r].into_iter().collect()),
                _ => unreachable!("a node splits into two of its own kind"),
            };
            self.root = Node::Inner(Box::new(Inner {
                keys: [sep].into_iter().collect(),
                kids,
            }));
        }
        self.len += 1;
        None
    }

    /// Removes `key`'s entry; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let removed = match &mut self.root {
            Node::Leaf(l) => {
                let i = l.keys.binary_search(key).ok()?;
                Some(l.remove_at(i))
            }
            Node::Inner(n) => {
                let v = remove_inner(n, key)?;
                self.shrink_root();
                Some(v)
            }
        };
        self.len -= 1;
        removed
    }

    /// A root with one child hands the root over to it; one with none becomes an empty leaf.
    fn shrink_root(&mut self) {
        loop {
            let Node::Inner(n) = &mut self.root else {
                return;
            };
            let next = match &mut n.kids {
                Kids::Leaves(l) if l.len() <= 1 => {
                    Node::Leaf(l.pop().unwrap_or_else(LeafKid::empty))
                }
                Kids::Inners(i) if i.len() <= 1 => match i.pop() {
                    Some(only) => Node::Inner(only),
                    None => Node::Leaf(LeafKid::empty()),
                },
                _ => return,
            };
            self.root = next;
        }
    }

    /// The entry with the largest key.
    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        let mut node = match &self.root {
            Node::Leaf(l) => return l.keys.last().zip(l.vals.last()),
            Node::Inner(n) => n,
        };
        loop {
            match &node.kids {
                Kids::Leaves(l) => {
                    let leaf = l.last()?;
                    return leaf.keys.last().zip(leaf.vals.last());
                }
                Kids::Inners(n) => node = n.last()?,
            }
        }
    }

    /// Calls `f` with every entry in key order, the value open to change.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&K, &mut V)) {
        fn leaf<K, V>(l: &mut LeafKid<K, V>, f: &mut impl FnMut(&K, &mut V)) {
            let Leaf { keys, vals } = &mut *l.leaf;
            for (k, v) in keys.iter().zip(vals.iter_mut()) {
                f(k, v);
            }
        }
        fn inner<K, V>(n: &mut Inner<K, V>, f: &mut impl FnMut(&K, &mut V)) {
            match &mut n.kids {
                Kids::Leaves(ls) => ls.iter_mut().for_each(|l| leaf(l, f)),
                Kids::Inners(ns) => ns.iter_mut().for_each(|n| inner(n, f)),
            }
        }
        match &mut self.root {
            Node::Leaf(l) => leaf(l, &mut f),
            Node::Inner(n) => inner(n, &mut f),
        }
    }

    /// The entries with the largest and the second largest keys (the DAQ case of "does this
    /// event have another fragment": the key just put is usually the largest).
    pub fn last_two(&self) -> LastTwo<'_, K, V> {
        fn entry<K, V>(l: &Leaf<K, V>, back: usize) -> Option<(&K, &V)> {
            let i = l.keys.len().checked_sub(back)?;
            Some((&l.keys[i], &l.vals[i]))
        }
        // Descend the right edge, noting the deepest node where a child left of it exists.
        let (leaf, mut left) = match &self.root {
            Node::Leaf(l) => return (entry(l, 1), entry(l, 2)),
            Node::Inner(n) => {
                let mut node: &Inner<K, V> = n;
                let mut left: Option<(&Inner<K, V>, usize)> = None;
                loop {
                    let Some(last) = node.kids.len().checked_sub(1) else {
                        return (None, None);
                    };
                    if last > 0 {
                        left = Some((node, last - 1));
                    }
                    match &node.kids {
                        Kids::Leaves(l) => break (&*l[last].leaf, left),
                        Kids::Inners(n) => node = &n[last],
                    }
                }
            }
        };
        if leaf.keys.len() != 1 {
            return (entry(leaf, 1), entry(leaf, 2));
        }
        // The second largest is the last entry of the leaf left of this one.
        let before = loop {
            let Some((node, i)) = left else { break None };
            match &node.kids {
                Kids::Leaves(l) => break entry(&l[i], 1),
                Kids::Inners(n) => {
                    let kid: &Inner<K, V> = &n[i];
                    left = kid.kids.len().checked_sub(1).map(|j| (kid, j));
                }
            }
        };
        (entry(leaf, 1), before)
    }

    /// The entries with keys in `range`, in key order. An empty range (start after end) yields
    /// nothing.
    pub fn range<R: RangeBounds<K>>(&self, range: R) -> Range<'_, K, V> {
        let end = match range.end_bound() {
            Bound::Included(k) => Bound::Included(k.clone()),
            Bound::Excluded(k) => Bound::Excluded(k.clone()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut it = Range {
            stack: ArrayVec::new(),
            leaf: None,
            at: 0,
            end,
        };
        let start = range.start_bound();
        let mut node = match &self.root {
            Node::Leaf(l) => {
                it.enter(l, start);
                return it;
            }
            Node::Inner(n) => n,
        };
        loop {
            let i = match start {
                Bound::Included(k) | Bound::Excluded(k) => node.keys.partition_point(|s| s <= k),
                Bound::Unbounded => 0,
            };
            it.stack.push((node, i));
            match &node.kids {
                Kids::Leaves(l) => {
                    it.enter(&l[i], start);
                    return it;
                }
                Kids::Inners(n) => node = &n[i],
            }
        }
    }

    /// All entries in key order.
    pub fn iter(&self) -> Range<'_, K, V> {
        self.range(..)
    }
}

impl<'a, K: Ord + Clone + Fingerprint, V> IntoIterator for &'a BTree<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Range<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Inserts into a leaf; a full leaf splits (at its right end: it keeps all it has).
fn insert_leaf<K: Ord + Clone + Fingerprint, V>(
    kid: &mut LeafKid<K, V>,
    key: K,
    val: V,
    rightmost: bool,
) -> Insert<K, V, LeafKid<K, V>> {
    prefetch::lines(&kid.keys, usize::MAX);
    let i = match kid.keys.binary_search(&key) {
        Ok(i) => return Insert::Replaced(std::mem::replace(&mut kid.leaf.vals[i], val)),
        Err(i) => i,
    };
    if !kid.keys.is_full() {
        kid.insert_at(i, key, val);
        return Insert::Added;
    }
    let leaf = &mut *kid.leaf;
    let mut right = Leaf::new();
    if i == LEAF_CAP && rightmost {
        // An append: the keys so far stay packed, the new one starts the next leaf.
        right.keys.push(key);
        right.vals.push(val);
    } else {
        let mid = LEAF_CAP / 2;
        right.keys.extend(leaf.keys.drain(mid..));
        right.vals.extend(leaf.vals.drain(mid..));
        let (side, at) = if i <= mid {
            (&mut *leaf, i)
        } else {
            (&mut *right, i - mid)
        };
        side.keys.insert(at, key);
        side.vals.insert(at, val);
        kid.refresh();
    }
    let sep = right.keys[0].clone();
    Insert::Split(sep, LeafKid::new(right))
}

/// Inserts below an inner node; a full one splits (at its right end: it keeps all it has).
fn insert_inner<K: Ord + Clone + Fingerprint, V>(
    node: &mut Inner<K, V>,
    key: K,
    val: V,
    rightmost: bool,
) -> Insert<K, V, Box<Inner<K, V>>> {
    let i = node.keys.partition_point(|s| *s <= key);
    let last = rightmost && i + 1 == node.kids.len();
    match &mut node.kids {
        Kids::Leaves(kids) => {
            let below = insert_leaf(&mut kids[i], key, val, last);
            absorb(&mut node.keys, kids, i, below, Kids::Leaves, rightmost)
        }
        Kids::Inners(kids) => {
            let below = insert_inner(&mut kids[i], key, val, last);
            absorb(&mut node.keys, kids, i, below, Kids::Inners, rightmost)
        }
    }
}

/// Takes what an insertion did below child `i` into its parent: a split child's new sibling
/// goes after it, and a full parent splits in turn (`wrap` makes the new node's children).
fn absorb<K, V, N>(
    keys: &mut Keys<K>,
    kids: &mut KidList<N>,
    i: usize,
    below: Insert<K, V, N>,
    wrap: fn(KidList<N>) -> Kids<K, V>,
    rightmost: bool,
) -> Insert<K, V, Box<Inner<K, V>>> {
    match below {
        Insert::Replaced(v) => Insert::Replaced(v),
        Insert::Added => Insert::Added,
        Insert::Split(sep, new) => match split_kids(keys, kids, i, sep, new, rightmost) {
            None => Insert::Added,
            Some((up, keys, kids)) => Insert::Split(
                up,
                Box::new(Inner {
                    keys,
                    kids: wrap(kids),
                }),
            ),
        },
    }
}

type Keys<K> = ArrayVec<K, { INNER_CAP - 1 }>;
/// An inner node's children: [`LeafKid`]s or boxed inner nodes.
type KidList<N> = ArrayVec<N, INNER_CAP>;

/// Places child `i`'s new right sibling `new` (smallest key `sep`) after it. If the node is
/// full, it splits: returns the key that goes up and the right node's keys and children.
fn split_kids<K, N>(
    keys: &mut Keys<K>,
    kids: &mut KidList<N>,
    i: usize,
    sep: K,
    new: N,
    rightmost: bool,
) -> Option<(K, Keys<K>, KidList<N>)> {
    if !kids.is_full() {
        keys.insert(i, sep);
        kids.insert(i + 1, new);
        return None;
    }
    let mut right_keys = ArrayVec::new();
    let mut right_kids = ArrayVec::new();
    if i + 1 == INNER_CAP && rightmost {
        // The last child split: this node stays full, the new child starts the next node.
        right_kids.push(new);
        return Some((sep, right_keys, right_kids));
    }
    let m = INNER_CAP / 2;
    right_kids.extend(kids.drain(m..));
    right_keys.extend(keys.drain(m..));
    let up = keys
        .pop()
        .expect("a full inner node has a key left of its middle");
    if i < m {
        keys.insert(i, sep);
        kids.insert(i + 1, new);
    } else {
        right_keys.insert(i - m, sep);
        right_kids.insert(i - m + 1, new);
    }
    Some((up, right_keys, right_kids))
}

/// Removes `key` below an inner node, then mends the child it came from.
fn remove_inner<K: Ord + Clone + Fingerprint, V>(node: &mut Inner<K, V>, key: &K) -> Option<V> {
    let i = node.keys.partition_point(|s| s <= key);
    match &mut node.kids {
        Kids::Leaves(kids) => {
            let kid = &mut kids[i];
            prefetch::lines(&kid.keys, usize::MAX);
            let at = kid.keys.binary_search(key).ok()?;
            let v = kid.remove_at(at);
            mend_leaf(&mut node.keys, kids, i);
            Some(v)
        }
        Kids::Inners(kids) => {
            let v = remove_inner(&mut kids[i], key)?;
            mend_inner(&mut node.keys, kids, i);
            Some(v)
        }
    }
}

/// Removes child `i` and the key that separated it from a neighbour.
fn drop_kid<K, N>(keys: &mut Keys<K>, kids: &mut KidList<N>, i: usize) {
    kids.remove(i);
    if !keys.is_empty() {
        keys.remove(i.saturating_sub(1));
    }
}

/// After a removal from leaf `i`: an empty leaf goes; one under `LEAF_MIN` merges with a
/// neighbour or takes half of their entries.
fn mend_leaf<K: Clone + Fingerprint, V>(
    keys: &mut Keys<K>,
    kids: &mut KidList<LeafKid<K, V>>,
    i: usize,
) {
    let len = kids[i].keys.len();
    if len == 0 {
        return drop_kid(keys, kids, i);
    }
    if len >= LEAF_MIN || kids.len() < 2 {
        return;
    }
    let l = if i + 1 < kids.len() { i } else { i - 1 };
    let (left, right) = kids.split_at_mut(l + 1);
    let (left_kid, right_kid) = (&mut left[l], &mut right[0]);
    let (left, right) = (&mut *left_kid.leaf, &mut *right_kid.leaf);
    let total = left.keys.len() + right.keys.len();
    if total <= LEAF_CAP {
        left.keys.extend(right.keys.drain(..));
        left.vals.extend(right.vals.drain(..));
        left_kid.refresh();
        kids.remove(l + 1);
        keys.remove(l);
        return;
    }
    let want_left = total / 2;
    if left.keys.len() < want_left {
        let n = want_left - left.keys.len();
        left.keys.extend(right.keys.drain(..n));
        left.vals.extend(right.vals.drain(..n));
    } else {
        let n = left.keys.len() - want_left;
        let from = left.keys.len() - n;
        let moved_keys: ArrayVec<K, LEAF_CAP> = left.keys.drain(from..).collect();
        let moved_vals: ArrayVec<V, LEAF_CAP> = left.vals.drain(from..).collect();
        prepend(&mut right.keys, moved_keys);
        prepend(&mut right.vals, moved_vals);
    }
    keys[l] = right.keys[0].clone();
    left_kid.refresh();
    right_kid.refresh();
}

fn prepend<T, const N: usize>(to: &mut ArrayVec<T, N>, front: ArrayVec<T, N>) {
    let back = std::mem::replace(to, front);
    to.extend(back);
}

/// After a removal below inner child `i`: an empty child goes; a sparse one merges with a
/// neighbour when both fit in one node.
fn mend_inner<K, V>(keys: &mut Keys<K>, kids: &mut KidList<Box<Inner<K, V>>>, i: usize) {
    let len = kids[i].kids.len();
    if len == 0 {
        return drop_kid(keys, kids, i);
    }
    if len >= INNER_MIN || kids.len() < 2 {
        return;
    }
    let l = if i + 1 < kids.len() { i } else { i - 1 };
    if kids[l].kids.len() + kids[l + 1].kids.len() > INNER_CAP {
        return;
    }
    let right = kids.remove(l + 1);
    let sep = keys.remove(l);
    let left = &mut kids[l];
    let Inner {
        keys: right_keys,
        kids: right_kids,
    } = *right;
    left.keys.push(sep);
    left.keys.extend(right_keys);
    match (&mut left.kids, right_kids) {
        (Kids::Leaves(a), Kids::Leaves(b)) => a.extend(b),
        (Kids::Inners(a), Kids::Inners(b)) => a.extend(b),
        _ => unreachable!("siblings are at the same depth"),
    }
}

/// An iterator over a key range (see [`BTree::range`]).
pub struct Range<'a, K, V> {
    /// The inner nodes above the current leaf, each with the child taken.
    stack: ArrayVec<(&'a Inner<K, V>, usize), MAX_DEPTH>,
    leaf: Option<&'a Leaf<K, V>>,
    at: usize,
    end: Bound<K>,
}

impl<'a, K: Ord, V> Range<'a, K, V> {
    fn enter(&mut self, leaf: &'a Leaf<K, V>, start: Bound<&K>) {
        self.leaf = Some(leaf);
        self.at = match start {
            Bound::Included(k) => leaf.keys.partition_point(|x| x < k),
            Bound::Excluded(k) => leaf.keys.partition_point(|x| x <= k),
            Bound::Unbounded => 0,
        };
    }

    /// Moves to the first entry of the next leaf; false past the last one.
    fn next_leaf(&mut self) -> bool {
        while let Some((node, i)) = self.stack.pop() {
            if i + 1 < node.kids.len() {
                let mut node = node;
                let mut i = i + 1;
                loop {
                    self.stack.push((node, i));
                    match &node.kids {
                        Kids::Leaves(l) => {
                            self.leaf = Some(&l[i].leaf);
                            self.at = 0;
                            return true;
                        }
                        Kids::Inners(n) => {
                            node = &n[i];
                            i = 0;
                        }
                    }
                }
            }
        }
        self.leaf = None;
        false
    }
}

impl<'a, K: Ord, V> Iterator for Range<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let leaf = self.leaf?;
            if self.at < leaf.keys.len() {
                let k = &leaf.keys[self.at];
                let past = match &self.end {
                    Bound::Included(e) => k.cmp(e) == Ordering::Greater,
                    Bound::Excluded(e) => k >= e,
                    Bound::Unbounded => false,
                };
                if past {
                    self.leaf = None;
                    return None;
                }
                self.at += 1;
                return Some((k, &leaf.vals[self.at - 1]));
            }
            if !self.next_leaf() {
                return None;
            }
        }
    }
}

#[cfg(test)]
impl Fingerprint for u16 {
    fn fingerprint(&self) -> u8 {
        (u64::from(*self).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
    }
}

#[cfg(test)]
impl Fingerprint for u32 {
    fn fingerprint(&self) -> u8 {
        (u64::from(*self).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Range(u16, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => any::<u16>().prop_map(Op::Remove),
            1 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Op::Range(a, b)),
        ]
    }

    fn check<K: Ord + Clone + Fingerprint + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
        tree: &BTree<K, V>,
        model: &BTreeMap<K, V>,
    ) {
        check_fingerprints(tree);
        check_last_two(tree, model);
        assert_eq!(tree.len(), model.len());
        assert!(tree.iter().eq(model.iter()));
        assert_eq!(tree.last_key_value(), model.last_key_value());
    }

    /// Every leaf's fingerprints are those of its keys, and its length is beside them.
    fn check_fingerprints<K: Fingerprint + std::fmt::Debug, V>(tree: &BTree<K, V>) {
        fn kid<K: Fingerprint + std::fmt::Debug, V>(k: &LeafKid<K, V>) {
            let len = k.leaf.keys.len();
            assert_eq!(
                k.fps[LEAF_CAP] as usize, len,
                "length beside the fingerprints"
            );
            for (i, key) in k.leaf.keys.iter().enumerate() {
                assert_eq!(k.fps[i], key.fingerprint(), "fingerprint of {key:?} at {i}");
            }
        }
        fn inner<K: Fingerprint + std::fmt::Debug, V>(n: &Inner<K, V>) {
            match &n.kids {
                Kids::Leaves(ls) => ls.iter().for_each(kid),
                Kids::Inners(ns) => ns.iter().for_each(|n| inner(n)),
            }
        }
        match &tree.root {
            Node::Leaf(l) => kid(l),
            Node::Inner(n) => inner(n),
        }
    }

    fn check_last_two<
        K: Ord + Clone + Fingerprint + std::fmt::Debug,
        V: PartialEq + std::fmt::Debug,
    >(
        tree: &BTree<K, V>,
        model: &BTreeMap<K, V>,
    ) {
        let mut back = model.iter().rev();
        assert_eq!(tree.last_two(), (back.next(), back.next()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn behaves_as_std_btreemap(ops in proptest::collection::vec(op(), 1..3000), narrow in 0u16..4) {
            // `narrow` squeezes the keys into a small range, so removals and replacements hit.
            let shift = narrow * 4;
            let mut tree = BTree::new();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(tree.insert(k >> shift, v), model.insert(k >> shift, v)),
                    Op::Remove(k) => prop_assert_eq!(tree.remove(&(k >> shift)), model.remove(&(k >> shift))),
                    Op::Range(a, b) => {
                        let (a, b) = (a >> shift, b >> shift);
                        let (lo, hi) = (a.min(b), a.max(b));
                        prop_assert!(tree.range(lo..hi).eq(model.range(lo..hi)));
                        prop_assert!(tree.range(lo..=hi).eq(model.range(lo..=hi)));
                        prop_assert!(tree.range((Bound::Excluded(lo), Bound::Unbounded)).eq(model.range((Bound::Excluded(lo), Bound::Unbounded))));
                        prop_assert!(tree.range(hi..lo).next().is_none() || hi == lo);
                        prop_assert_eq!(tree.get(&a), model.get(&a));
                        check_last_two(&tree, &model);
                    }
                }
            }
            check(&tree, &model);
            tree.for_each_mut(|k, v| *v = v.wrapping_add(u32::from(*k)));
            model.iter_mut().for_each(|(k, v)| *v = v.wrapping_add(u32::from(*k)));
            check(&tree, &model);
        }
    }

    /// Ascending, descending and strided patterns at sizes that make several levels, each
    /// removed again in a different order, checked against the model at every step's end.
    #[test]
    fn grows_and_shrinks_through_several_levels() {
        let n: u32 = 200_000;
        let orders: Vec<(&str, Vec<u32>)> = vec![
            ("ascending", (0..n).collect()),
            ("descending", (0..n).rev().collect()),
            (
                "strided",
                (0..n).map(|i| i.wrapping_mul(7919) % n).collect(),
            ),
        ];
        for (name, order) in &orders {
            for (rname, removal) in &orders {
                let mut tree = BTree::new();
                let mut model = BTreeMap::new();
                for &k in order {
                    tree.insert(k, k);
                    model.insert(k, k);
                }
                check(&tree, &model);
                for (j, &k) in removal.iter().enumerate() {
                    assert_eq!(tree.remove(&k), model.remove(&k), "{name}/{rname} at {j}");
                    if j % 50_000 == 0 || removal.len() - j < 200 {
                        check_last_two(&tree, &model);
                    }
                    if j % 50_000 == 0 {
                        check(&tree, &model);
                    }
                }
                check(&tree, &model);
                assert!(
                    matches!(tree.root, Node::Leaf(_)),
                    "{name}/{rname}: root shrinks back"
                );
            }
        }
    }

    /// Keys whose fingerprints all collide: a lookup then compares every key of the leaf.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Clash(u32);
    impl Fingerprint for Clash {
        fn fingerprint(&self) -> u8 {
            (self.0 % 3) as u8
        }
    }

    #[test]
    fn lookups_pass_over_keys_with_the_same_fingerprint() {
        let mut tree = BTree::new();
        let mut model = BTreeMap::new();
        let n = 20_000u32;
        for i in 0..n {
            let k = Clash(i.wrapping_mul(7919) % n);
            tree.insert(k, i);
            model.insert(k, i);
        }
        for i in (0..n).step_by(3) {
            assert_eq!(tree.remove(&Clash(i)), model.remove(&Clash(i)));
        }
        check(&tree, &model);
        for i in 0..n + 100 {
            assert_eq!(tree.get(&Clash(i)), model.get(&Clash(i)), "key {i}");
        }
        if let Some(v) = tree.get_mut(&Clash(1)) {
            *v = 7;
        }
        assert_eq!(tree.get(&Clash(1)), Some(&7));
    }

    /// The number of leaves of `tree`, walked in order.
    fn leaf_count<V>(tree: &BTree<u32, V>) -> usize {
        let mut leaves = 0;
        let mut it = tree.iter();
        while it.leaf.is_some() {
            leaves += 1;
            if !it.next_leaf() {
                break;
            }
        }
        leaves
    }

    #[test]
    fn appends_pack_leaves_full() {
        let mut tree = BTree::new();
        let n = 10_000u32;
        for k in 0..n {
            tree.insert(k, ());
        }
        let leaves = leaf_count(&tree);
        assert_eq!(leaves, (n as usize).div_ceil(LEAF_CAP));
    }

    /// Fix (found in review): a key just past the end of a full leaf that has a right
    /// neighbour was taken for an append: the full leaf was kept and the key got a leaf of its
    /// own (and, past a full inner node, an inner node too). Keys arriving in descending
    /// order above a full leaf then cost a leaf each: 2.7 KiB per entry, where the bound is 64
    /// B. Only the rightmost leaf and inner nodes keep that shortcut.
    #[test]
    fn descending_keys_above_a_full_leaf_share_leaves() {
        let mut tree = BTree::new();
        for k in 0..LEAF_CAP as u32 {
            tree.insert(k, ());
        }
        let n = 10_000u32;
        for k in (1_000..1_000 + n).rev() {
            tree.insert(k, ());
        }
        let total = LEAF_CAP + n as usize;
        let leaves = leaf_count(&tree);
        // Leaves split in the middle are at least half full.
        assert!(
            leaves <= total.div_ceil(LEAF_CAP / 2),
            "{leaves} leaves for {total} entries"
        );
        assert!(tree
            .iter()
            .map(|(k, _)| *k)
            .eq((0..LEAF_CAP as u32).chain(1_000..1_000 + n)));
    }
}
