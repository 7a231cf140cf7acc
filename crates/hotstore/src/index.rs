//! The DRAM index: key → location of the newest record, ordered, concurrent.
//!
//! Sharded ordered maps (`BTreeMap` under a reader-writer lock per shard). A fragment key is
//! sharded by its event prefix, so all fragments of one event live in one shard; other keys by
//! the whole key. Writers on different shards never meet; ordered range queries merge the
//! shards. Keys up to [`INLINE_KEY_LEN`] bytes are stored inline (no allocation): the default
//! 16-byte DAQ key always is. Cost per entry is measured by `tests/index_memory.rs` and
//! documented in docs/design.md.

use crate::segment::Segment;
use parking_lot::RwLock;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Number of shards (a power of two).
pub const SHARDS: usize = 32;
/// Keys up to this length are stored inline in the index.
pub const INLINE_KEY_LEN: usize = 22;

/// A key as held by the index: inline when short.
#[derive(Clone)]
pub enum IndexKey {
    /// Short key stored in place.
    Inline {
        /// Length.
        len: u8,
        /// Bytes (only `len` used).
        bytes: [u8; INLINE_KEY_LEN],
    },
    /// Longer key on the heap.
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<IndexKey>() == 24);
const _: () = assert!(INLINE_KEY_LEN > 16 && INLINE_KEY_LEN <= 24);

impl IndexKey {
    /// Copies a key.
    pub fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE_KEY_LEN {
            let mut bytes = [0u8; INLINE_KEY_LEN];
            bytes[..key.len()].copy_from_slice(key);
            IndexKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            IndexKey::Heap(key.into())
        }
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            IndexKey::Inline { len, bytes } => &bytes[..*len as usize],
            IndexKey::Heap(b) => b,
        }
    }
}

impl Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}
impl std::hash::Hash for IndexKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
    }
}
impl PartialEq for IndexKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for IndexKey {}
impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for IndexKey {
    /// Byte-wise lexicographic order, as for `[u8]`. Two inline keys compare as three
    /// big-endian words and then their lengths: unused inline bytes are zero, so this equals
    /// the lexicographic order, without a `memcmp` call (the B-tree's hottest code).
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (IndexKey::Inline { len: la, bytes: a }, IndexKey::Inline { len: lb, bytes: b }) => {
                let word = |x: &[u8; INLINE_KEY_LEN], i: usize| {
                    u64::from_be_bytes(
                        x[i..i + 8]
                            .try_into()
                            .expect("an 8-byte range is a [u8; 8]"),
                    )
                };
                let tail = |x: &[u8; INLINE_KEY_LEN]| {
                    let mut t = [0u8; 8];
                    t[..INLINE_KEY_LEN - 16].copy_from_slice(&x[16..]);
                    u64::from_be_bytes(t)
                };
                (word(a, 0), word(a, 8), tail(a), la).cmp(&(word(b, 0), word(b, 8), tail(b), lb))
            }
            _ => self.as_bytes().cmp(other.as_bytes()),
        }
    }
}
impl std::fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Value length that marks a tombstone held in the index during recovery only.
pub const TOMBSTONE_LEN: u32 = u32::MAX;

/// Where the newest record of a key lives.
#[derive(Clone)]
pub struct Loc {
    /// Segment holding the record.
    pub seg: Arc<Segment>,
    /// Record offset in the segment.
    pub offset: u32,
    /// Value length (`TOMBSTONE_LEN` for a tombstone during recovery).
    pub value_len: u32,
    /// Sequence number of the record: the newest wins.
    pub lsn: u64,
}

const _: () = assert!(std::mem::size_of::<Loc>() == 24);

/// One shard's contents: the keys, and `E`, the state the layer above keeps per shard (the
/// store's event table: `events::ShardEvents`). Both live under one lock so that, for the
/// store, admitting a fragment and acknowledging its event exclude each other. The index
/// itself knows nothing of events. Dereferences to the key map.
#[derive(Default)]
pub struct ShardMap<E = ()> {
    /// Key → newest record.
    pub keys: BTreeMap<IndexKey, Loc>,
    /// The layer above's state for this shard (for the store: its events and READY queue).
    pub(crate) events: E,
}

impl<E> std::ops::Deref for ShardMap<E> {
    type Target = BTreeMap<IndexKey, Loc>;
    fn deref(&self) -> &Self::Target {
        &self.keys
    }
}

impl<E> std::ops::DerefMut for ShardMap<E> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.keys
    }
}

/// One shard.
pub type Shard<E = ()> = RwLock<ShardMap<E>>;

/// The sharded index (`E`: per-shard state of the layer above, see `ShardMap`).
pub struct Index<E = ()> {
    shards: Box<[Shard<E>]>,
    prefix_len: usize,
    fragment_len: usize,
}

impl<E: Default> Index<E> {
    /// An empty index; fragment keys (`fragment_len` bytes) shard by their first `prefix_len` bytes.
    pub fn new(fragment_len: usize, prefix_len: usize) -> Self {
        Index {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(ShardMap::default()))
                .collect(),
            prefix_len,
            fragment_len,
        }
    }
}

impl<E> Index<E> {
    /// The shard responsible for `key`.
    pub fn shard(&self, key: &[u8]) -> &Shard<E> {
        &self.shards[self.shard_no(key)]
    }

    /// The shard holding the event with this prefix (the shard of each of its fragments).
    pub fn event_shard(&self, prefix: &[u8]) -> &Shard<E> {
        &self.shards[self.event_shard_no(prefix)]
    }

    /// The number of the shard holding the event with this prefix.
    pub fn event_shard_no(&self, prefix: &[u8]) -> usize {
        debug_assert_eq!(prefix.len(), self.prefix_len);
        (crc32c::crc32c(prefix) as usize) & (SHARDS - 1)
    }

    /// The number of the shard responsible for `key`.
    pub fn shard_no(&self, key: &[u8]) -> usize {
        let hashed = if key.len() == self.fragment_len {
            &key[..self.prefix_len]
        } else {
            key
        };
        // crc32c is a hardware instruction here and spreads sequential event numbers well.
        (crc32c::crc32c(hashed) as usize) & (SHARDS - 1)
    }

    /// All shards (for scans and statistics).
    pub fn shards(&self) -> &[Shard<E>] {
        &self.shards
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `limit` entries with keys in `[from, to)` (`to` = `None`: unbounded), in key
    /// order, each mapped through `f` while its shard is locked (so `f` may read the value).
    pub fn range<T>(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
        mut f: impl FnMut(&IndexKey, &Loc) -> T,
    ) -> Vec<(Box<[u8]>, T)> {
        use std::ops::Bound;
        let upper = match to {
            Some(t) => Bound::Excluded(t),
            None => Bound::Unbounded,
        };
        // Fix (found by tests/model.rs): `BTreeMap::range` panics when `from > to`; an empty
        // range is the answer, not a panic.
        if to.is_some_and(|t| t < from) {
            return Vec::new();
        }
        let mut merged: Vec<(Box<[u8]>, T)> = Vec::new();
        for shard in self.shards.iter() {
            let map = shard.read();
            // Fix (found by tests/model.rs): the cut-off must be the largest key merged from the
            // *earlier* shards, and only once they already fill `limit`. Comparing with the key
            // last pushed from this shard stopped early and let larger keys of earlier shards
            // stand in for smaller keys of this one.
            let cutoff: Option<Box<[u8]>> = (merged.len() >= limit)
                .then(|| merged.last().map(|(k, _)| k.clone()))
                .flatten();
            for (k, loc) in map
                .range::<[u8], _>((Bound::Included(from), upper))
                .take(limit)
            {
                // Skip what cannot make the cut: the merged list is kept at most `limit` long.
                if cutoff.as_deref().is_some_and(|c| c < k.as_bytes()) {
                    break;
                }
                merged.push((k.as_bytes().into(), f(k, loc)));
            }
            drop(map);
            merged.sort_by(|a, b| a.0.cmp(&b.0));
            merged.truncate(limit);
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::IndexKey;

    #[test]
    fn inline_order_equals_byte_order() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![1, 0],
            vec![0xff; 16],
            vec![0xff; 17],
            vec![0xff; 22],
            vec![0xff; 23],
            [vec![0xff; 16], vec![0]].concat(),
            [vec![7; 21], vec![1]].concat(),
            vec![7; 22],
            vec![7; 30],
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(
                    IndexKey::new(a).cmp(&IndexKey::new(b)),
                    a.cmp(b),
                    "{a:?} vs {b:?}"
                );
            }
        }
    }
}
