//! The DRAM index: key → location of the newest record, ordered, concurrent.
//!
//! Sharded ordered maps ([`BTree`], a B+ tree packed for keys arriving in order, under a
//! reader-writer lock per shard). A fragment key is
//! sharded by its event prefix, so all fragments of one event live in one shard; other keys by
//! the whole key. Writers on different shards never meet; ordered range queries merge the
//! shards. Keys up to [`INLINE_KEY_LEN`] bytes are stored inline (no allocation): the default
//! 16-byte DAQ key always is. Cost per entry is measured by `tests/index_memory.rs` and
//! documented in docs/design.md.

mod btree;

use crate::segment::Segment;
pub use btree::{BTree, Fingerprint};
use parking_lot::RwLock;
use std::sync::Arc;

/// Number of shards (a power of two).
pub const SHARDS: usize = 32;
/// Keys up to this length are stored inline in the index.
pub const INLINE_KEY_LEN: usize = 22;

/// A key as held by the index: 24 bytes, inline when short.
///
/// Three words. An inline key (up to `INLINE_KEY_LEN` bytes, the default 16-byte DAQ key
/// always) is its bytes zero-padded to 23, then its length, read as three big-endian words:
/// comparing the words compares the keys in byte order (unused bytes are zero, and the length
/// breaks a tie between a key and the same key with zeros appended), without a `memcmp` or a
/// byte swap. The B-tree's comparisons are the index's hottest code: stored as bytes and
/// swapped at each comparison, a random lookup over 1 M keys in 32 shards took 430-515 ns,
/// as words 300-380 ns (measured on this machine). A longer key lives on the heap: the first
/// word holds its pointer, the second its length, the last ends in `HEAP_TAG`.
pub struct IndexKey {
    w: [u64; 3],
}

/// The length byte (the last word's lowest) of a key on the heap: larger than any inline length.
const HEAP_TAG: u64 = 0xff;

const _: () = assert!(std::mem::size_of::<IndexKey>() == 24);
const _: () =
    assert!(INLINE_KEY_LEN > 16 && INLINE_KEY_LEN < 24 && (INLINE_KEY_LEN as u64) < HEAP_TAG);

impl IndexKey {
    /// Copies a key. Inlined: built in registers, its words are not stored to memory and read
    /// back (a 16-byte load of two 8-byte stores cannot be forwarded, and stalls).
    #[inline(always)]
    pub fn new(key: &[u8]) -> Self {
        let len = key.len();
        if len <= INLINE_KEY_LEN {
            // Each word loaded straight from the key: copying the key into a padded buffer
            // and reading the words back stalled on store forwarding (the copy's narrow
            // stores under the wide loads), about a third of `on_put` in a profile.
            let part = |from: usize| top_aligned(&key[from.min(len)..(from + 8).min(len)]);
            IndexKey {
                w: [part(0), part(8), part(16) | len as u64],
            }
        } else {
            Self::on_heap_from(key)
        }
    }

    #[cold]
    #[inline(never)]
    fn on_heap_from(key: &[u8]) -> Self {
        let heap: Box<[u8]> = key.into();
        let len = heap.len() as u64;
        let ptr = Box::into_raw(heap) as *mut u8 as usize as u64;
        IndexKey {
            w: [ptr, len, HEAP_TAG],
        }
    }

    /// Byte-wise order when either key lives on the heap (out of line: the inline case is the
    /// hot one, and inlined into every tree search).
    #[cold]
    #[inline(never)]
    fn cmp_bytes(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(&other.as_bytes())
    }

    fn on_heap(&self) -> bool {
        self.w[2] & 0xff == HEAP_TAG
    }

    /// True if this key begins with `prefix`'s bytes. Two inline keys compare as masked
    /// words (a tracked fragment put asks this of every key: a `memcmp` was 4% of it).
    pub fn starts_with(&self, prefix: &IndexKey) -> bool {
        if self.on_heap() || prefix.on_heap() {
            return self.as_bytes().starts_with(&prefix.as_bytes());
        }
        let n = (prefix.w[2] & 0xff) as usize;
        if ((self.w[2] & 0xff) as usize) < n {
            return false;
        }
        (0..3).all(|i| {
            let bytes = n.saturating_sub(i * 8).min(8);
            // The top `bytes` bytes of word `i` (none: nothing to compare).
            let mask = match bytes {
                0 => 0,
                8 => u64::MAX,
                b => !(u64::MAX >> (b * 8)),
            };
            (self.w[i] ^ prefix.w[i]) & mask == 0
        })
    }

    /// A key of at most 12 bytes (the default layout's event prefix) as its first two words
    /// and its length. The second word's low 32 bits are then zero: a caller packing the key
    /// may use them (the READY queue keeps an entry in 16 bytes this way).
    pub(crate) fn pack12(&self) -> Option<([u64; 2], u8)> {
        let len = self.w[2] & 0xff;
        (!self.on_heap() && len <= 12).then_some(([self.w[0], self.w[1]], len as u8))
    }

    /// The key [`IndexKey::pack12`] packed (the second word's low 32 bits ignored).
    pub(crate) fn unpack12(words: [u64; 2], len: u8) -> Self {
        debug_assert!(len <= 12);
        IndexKey {
            w: [words[0], words[1] & !0xffff_ffff, u64::from(len)],
        }
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> KeyBytes<'_> {
        if self.on_heap() {
            // Safety: a heap key's first two words are the pointer and length of the boxed
            // slice it owns (made in `new` or `clone`, freed only in `drop`).
            KeyBytes::Heap(unsafe {
                std::slice::from_raw_parts(self.w[0] as usize as *const u8, self.w[1] as usize)
            })
        } else {
            let mut bytes = [0u8; 24];
            for (i, w) in self.w.iter().enumerate() {
                bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
            }
            KeyBytes::Inline(bytes)
        }
    }
}

/// Up to 8 bytes as a big-endian word, the first byte in the top byte and zeros below the
/// last: without a byte loop or a copy through memory (overlapping loads of 4 or 8 bytes).
#[inline(always)]
fn top_aligned(b: &[u8]) -> u64 {
    let n = b.len();
    let be4 = |at: usize| u64::from(u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]));
    match n {
        8 => u64::from_be_bytes(b.try_into().expect("8 bytes")),
        4..=7 => (be4(0) << 32) | (be4(n - 4) << (64 - 8 * n)),
        1..=3 => {
            (u64::from(b[0]) << 56)
                | (u64::from(b[n / 2]) << (56 - 8 * (n / 2)))
                | (u64::from(b[n - 1]) << (56 - 8 * (n - 1)))
        }
        _ => 0,
    }
}

impl Drop for IndexKey {
    fn drop(&mut self) {
        if self.on_heap() {
            // Safety: the boxed slice this key owns (see `as_bytes`), freed once, here.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.w[0] as usize as *mut u8,
                    self.w[1] as usize,
                ))
            });
        }
    }
}

impl Clone for IndexKey {
    fn clone(&self) -> Self {
        if self.on_heap() {
            IndexKey::new(&self.as_bytes())
        } else {
            IndexKey { w: self.w }
        }
    }
}

/// The bytes of an [`IndexKey`] (dereferences to `[u8]`): a copy for an inline key, a
/// borrow for one on the heap.
pub enum KeyBytes<'a> {
    /// An inline key's 24 bytes: the key, padding, and its length last.
    Inline([u8; 24]),
    /// A longer key, in place.
    Heap(&'a [u8]),
}

impl std::ops::Deref for KeyBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(b) => &b[..b[23] as usize],
            KeyBytes::Heap(b) => b,
        }
    }
}

impl AsRef<[u8]> for KeyBytes<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq<[u8]> for KeyBytes<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[u8]> for KeyBytes<'_> {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

impl From<KeyBytes<'_>> for Box<[u8]> {
    fn from(b: KeyBytes<'_>) -> Self {
        (*b).into()
    }
}

impl From<KeyBytes<'_>> for Vec<u8> {
    fn from(b: KeyBytes<'_>) -> Self {
        b.to_vec()
    }
}

impl std::hash::Hash for IndexKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(&self.as_bytes());
    }
}
impl Fingerprint for IndexKey {
    /// The top byte of a multiplicative hash of the key's words (its bytes for a key on the
    /// heap): it depends on every bit, so keys that differ in one event number differ here
    /// 255 times in 256.
    #[inline]
    fn fingerprint(&self) -> u8 {
        let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        let h = if self.on_heap() {
            self.as_bytes().chunks(8).fold(0, |h, c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                mix(h, u64::from_le_bytes(w))
            })
        } else {
            self.w.iter().fold(0, |h, &w| mix(h, w))
        };
        (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
    }
}

impl PartialEq for IndexKey {
    fn eq(&self, other: &Self) -> bool {
        // Inline keys are equal when their words are; an inline key never equals one on the
        // heap (they differ in length).
        if self.on_heap() || other.on_heap() {
            *self.as_bytes() == *other.as_bytes()
        } else {
            self.w == other.w
        }
    }
}
impl Eq for IndexKey {}
impl PartialOrd for IndexKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for IndexKey {
    /// Byte-wise lexicographic order, as for `[u8]` (see the type's docs for inline keys).
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.on_heap() || other.on_heap() {
            self.cmp_bytes(other)
        } else {
            self.w.cmp(&other.w)
        }
    }
}
impl std::fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.as_bytes().iter() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A range bound over keys given as bytes, for the index's maps (their order is byte order).
pub fn bound(b: std::ops::Bound<&[u8]>) -> std::ops::Bound<IndexKey> {
    use std::ops::Bound;
    match b {
        Bound::Included(k) => Bound::Included(IndexKey::new(k)),
        Bound::Excluded(k) => Bound::Excluded(IndexKey::new(k)),
        Bound::Unbounded => Bound::Unbounded,
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
}

// 16 bytes: the record's lsn is in its header, not here (only recovery reads it, from the
// header). Keeping it cost 8 bytes of every index entry, about 15% of the index's DRAM.
const _: () = assert!(std::mem::size_of::<Loc>() == 16);

impl Loc {
    /// The lsn in the record's header (recovery; a read of the record's first bytes).
    pub(crate) fn lsn(&self) -> u64 {
        // Safety: the record is published (it is in the index) and the caller holds the shard
        // lock that keeps its segment from being recycled.
        let header = unsafe {
            self.seg
                .bytes(self.offset as usize, crate::record::HEADER_LEN)
        };
        crate::record::parse_header(header).map_or(0, |h| h.lsn)
    }
}

/// One shard's contents: the keys, and `E`, the state the layer above keeps per shard (the
/// store's event table: `events::ShardEvents`). Both live under one lock so that, for the
/// store, admitting a fragment and acknowledging its event exclude each other. The index
/// itself knows nothing of events. Dereferences to the key map.
#[derive(Default)]
pub struct ShardMap<E = ()> {
    /// Key → newest record.
    pub keys: BTree<IndexKey, Loc>,
    /// The layer above's state for this shard (for the store: its events and READY queue).
    pub(crate) events: E,
    /// The newest lsn records written under this shard's lock took, by key (see
    /// [`NewestLsn`]).
    pub(crate) newest_lsn: NewestLsn,
    /// This shard's number in its index (a put holding the lock need not hash its key again).
    pub(crate) no: usize,
}

/// Slots of [`NewestLsn`] per shard.
const NEWEST_SLOTS: usize = 256;

/// The newest lsn taken by a record of each key of a shard, kept per slot of a hash of the key
/// (so two keys may share a slot: an over-estimate, never an under-estimate). 0 at open: every
/// lsn given out after open is newer than the recovered ones. A direct put takes its lsn before
/// its write and, at publish, asks whether a newer record of its key (or of its event) was
/// written meanwhile (`Store::place_direct`). Per key rather than per shard because the
/// fragments of one event share a shard: ten links writing one slice each were overtaken
/// by each other at nearly every put.
pub(crate) struct NewestLsn(Box<[u64; NEWEST_SLOTS]>);

impl Default for NewestLsn {
    fn default() -> Self {
        NewestLsn(Box::new([0; NEWEST_SLOTS]))
    }
}

impl NewestLsn {
    fn slot(key: &[u8]) -> usize {
        // FxHash-style over 8-byte words: a few nanoseconds, only needs to spread keys.
        let mut h: u64 = key.len() as u64;
        let mut words = key.chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().expect("an 8-byte chunk"));
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        for &b in words.remainder() {
            h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        (h >> 56) as usize % NEWEST_SLOTS
    }

    /// A record of `key` (a key, or an event prefix for event records) took `lsn`.
    pub(crate) fn note(&mut self, key: &[u8], lsn: u64) {
        let s = &mut self.0[Self::slot(key)];
        *s = (*s).max(lsn);
    }

    /// An upper bound of the newest lsn a record of `key` took.
    pub(crate) fn newest(&self, key: &[u8]) -> u64 {
        self.0[Self::slot(key)]
    }
}

impl<E> std::ops::Deref for ShardMap<E> {
    type Target = BTree<IndexKey, Loc>;
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
                .map(|no| {
                    RwLock::new(ShardMap {
                        no,
                        ..ShardMap::default()
                    })
                })
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
        (crate::checksum::crc32c(prefix) as usize) & (SHARDS - 1)
    }

    /// The number of the shard responsible for `key`.
    pub fn shard_no(&self, key: &[u8]) -> usize {
        let hashed = if key.len() == self.fragment_len {
            &key[..self.prefix_len]
        } else {
            key
        };
        // crc32c is a hardware instruction here and spreads sequential event numbers well.
        (crate::checksum::crc32c(hashed) as usize) & (SHARDS - 1)
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
                .range((bound(Bound::Included(from)), bound(upper)))
                .take(limit)
            {
                // Skip what cannot make the cut: the merged list is kept at most `limit` long.
                if cutoff.as_deref().is_some_and(|c| c < &k.as_bytes()) {
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
    fn keys_keep_their_bytes_inline_and_on_the_heap() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |k: &IndexKey| {
            let mut h = DefaultHasher::new();
            k.hash(&mut h);
            h.finish()
        };
        for len in [0, 1, 15, 16, 21, 22, 23, 24, 100, 1024] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let k = IndexKey::new(&bytes);
            assert_eq!(&*k.as_bytes(), &bytes[..], "len {len}");
            let c = k.clone();
            assert_eq!(&*c.as_bytes(), &bytes[..]);
            assert!(c == k && hash(&c) == hash(&k));
            drop(k); // the clone owns its own copy
            assert_eq!(&*c.as_bytes(), &bytes[..]);
            let mut other = bytes.clone();
            other.push(0);
            assert!(IndexKey::new(&other) != c && IndexKey::new(&other) > c);
        }
    }

    /// Equal keys, inline or on the heap, have equal fingerprints; the keys of consecutive
    /// events spread over the byte's values (a leaf's lookup compares the keys that match).
    #[test]
    fn fingerprints_follow_the_bytes_and_spread() {
        use crate::index::Fingerprint;
        for len in [0, 5, 16, 23, 24, 40, 300] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 13 + 3) as u8).collect();
            let (a, b) = (IndexKey::new(&bytes), IndexKey::new(&bytes));
            assert_eq!(a.fingerprint(), b.fingerprint(), "len {len}");
            assert_eq!(a.fingerprint(), a.clone().fingerprint(), "len {len}");
        }
        for len in [16, 40] {
            let mut seen = std::collections::HashSet::new();
            for event in 0u64..4096 {
                let mut key = vec![0u8; len];
                key[4..12].copy_from_slice(&event.to_be_bytes());
                seen.insert(IndexKey::new(&key).fingerprint());
            }
            assert!(
                seen.len() > 240,
                "{len}-byte keys: {} fingerprints",
                seen.len()
            );
        }
    }

    /// The inline words are the key zero-padded to 23 bytes and its length, big-endian: for
    /// every inline length and many byte patterns (`new` loads the words piecewise).
    #[test]
    fn inline_words_are_the_padded_key_and_its_length() {
        for len in 0..=super::INLINE_KEY_LEN {
            for seed in 0..64u32 {
                let bytes: Vec<u8> = (0..len as u32)
                    .map(|i| (i.wrapping_mul(151).wrapping_add(seed * 29) % 256) as u8)
                    .collect();
                let mut padded = [0u8; 24];
                padded[..len].copy_from_slice(&bytes);
                padded[23] = len as u8;
                let want: Vec<u64> = padded
                    .chunks(8)
                    .map(|c| u64::from_be_bytes(c.try_into().unwrap()))
                    .collect();
                assert_eq!(
                    IndexKey::new(&bytes).w.to_vec(),
                    want,
                    "len {len} seed {seed}"
                );
            }
        }
    }

    #[test]
    fn short_keys_pack_into_two_words() {
        for len in 0..=30usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 5) as u8 | 1).collect();
            let k = IndexKey::new(&bytes);
            match k.pack12() {
                Some((w, n)) => {
                    assert!(len <= 12);
                    assert_eq!(w[1] & 0xffff_ffff, 0, "len {len}: the low half is free");
                    let back = IndexKey::unpack12([w[0], w[1] | 0xdead_beef], n);
                    assert_eq!(&*back.as_bytes(), &bytes[..], "len {len}");
                }
                None => assert!(len > 12, "len {len} should pack"),
            }
        }
    }

    #[test]
    fn prefixes_match_as_bytes_do() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![1],
            vec![1, 2],
            vec![1, 3],
            (1..=8).collect(),
            (1..=9).collect(),
            (1..=12).collect(),
            (1..=16).collect(),
            [(1..=12).collect::<Vec<u8>>(), vec![0, 0, 0, 1]].concat(),
            (1..=22).collect(),
            (1..=23).collect(),
            (1..=30).collect(),
            vec![0; 12],
            vec![0; 16],
            // Differing from (1..=n) in one byte only: the first, the eighth, the ninth.
            [vec![9], (2..=12).collect()].concat(),
            [(1..=7).collect(), vec![0], (9..=16).collect()].concat(),
            [(1..=8).collect(), vec![0], (10..=12).collect()].concat(),
        ];
        for k in &keys {
            for p in &keys {
                assert_eq!(
                    IndexKey::new(k).starts_with(&IndexKey::new(p)),
                    k.starts_with(p),
                    "{k:?} starts with {p:?}"
                );
            }
        }
    }

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
            vec![0; 22],
            vec![0; 23],
            [vec![0; 21], vec![1]].concat(),
            vec![0xff; 24],
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
