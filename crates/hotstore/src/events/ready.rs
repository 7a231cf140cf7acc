//! A shard's READY queue: event prefixes by the READY sequence number they got, oldest first.
//!
//! Almost every push is a new READY event, and its number is the largest the shard has seen
//! (numbers are taken under the shard's lock), so those go to a FIFO of fixed-size chunks:
//! a push is an append, growth never copies what is queued, and the memory of claimed events
//! goes back chunk by chunk. An event that goes back to READY (lease expired, claim released)
//! keeps its old, smaller number; those few go to a binary heap beside the FIFO. A pop takes
//! the smaller of the two heads.
//!
//! Before this, one `BinaryHeap` held everything: each doubling of its vector copied the whole
//! queue into fresh pages, 7% of a tracked 100 B put in a profile (`bench put --events`).

use crate::index::IndexKey;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Bytes of entries per FIFO chunk: one 4 KiB page.
const CHUNK_BYTES: usize = 4096;
/// Entries per chunk of full entries (32 bytes).
const FULL_CHUNK: usize = CHUNK_BYTES / std::mem::size_of::<Entry>();
/// Entries per chunk of packed entries (16 bytes).
const PACKED_CHUNK: usize = CHUNK_BYTES / 16;

type Entry = (u64, IndexKey);

/// A chunk's entries. Packed where the prefix allows: an event queued in a store nobody
/// claims from costs its entry for as long as it waits, so the default DAQ layout (12-byte
/// event prefixes) keeps an entry in 16 bytes instead of 32.
enum Items {
    /// Prefixes of at most 12 bytes, all of length `len`: each entry is the prefix's two words
    /// (`IndexKey::pack12`) with its number's offset from `base` in the second word's free low
    /// 32 bits.
    Packed {
        len: u8,
        base: u64,
        words: Vec<[u64; 2]>,
    },
    Full(Vec<Entry>),
}

/// One FIFO chunk: entries `head..` are queued.
struct Chunk {
    items: Items,
    head: usize,
}

impl Chunk {
    /// An empty chunk shaped for entries like `(seq, prefix)`.
    fn for_entry(seq: u64, prefix: &IndexKey) -> Self {
        let items = match prefix.pack12() {
            Some((_, len)) => Items::Packed {
                len,
                base: seq,
                words: Vec::with_capacity(PACKED_CHUNK),
            },
            None => Items::Full(Vec::with_capacity(FULL_CHUNK)),
        };
        Chunk { items, head: 0 }
    }

    fn len(&self) -> usize {
        match &self.items {
            Items::Packed { words, .. } => words.len(),
            Items::Full(v) => v.len(),
        }
    }

    fn is_full(&self) -> bool {
        match &self.items {
            Items::Packed { words, .. } => words.len() == PACKED_CHUNK,
            Items::Full(v) => v.len() == FULL_CHUNK,
        }
    }

    /// Appends the entry, or gives it back if this chunk cannot hold it (full, or packed for
    /// another prefix length, or the number too far from the chunk's first).
    fn try_push(&mut self, seq: u64, prefix: IndexKey) -> Result<(), IndexKey> {
        if self.len() == 0 {
            // Empty (reused after a drain): takes this entry's shape and first number.
            match (&mut self.items, prefix.pack12()) {
                (Items::Packed { len, base, .. }, Some((_, l))) => {
                    *len = l;
                    *base = seq;
                }
                (Items::Full(_), None) => {}
                _ => *self = Chunk::for_entry(seq, &prefix),
            }
        }
        if self.is_full() {
            return Err(prefix);
        }
        match &mut self.items {
            Items::Packed { len, base, words } => {
                let offset = seq.checked_sub(*base).and_then(|d| u32::try_from(d).ok());
                match (prefix.pack12(), offset) {
                    (Some((w, l)), Some(d)) if l == *len => {
                        words.push([w[0], w[1] | u64::from(d)]);
                        Ok(())
                    }
                    _ => Err(prefix),
                }
            }
            Items::Full(v) => {
                v.push((seq, prefix));
                Ok(())
            }
        }
    }

    /// The number of entry `i`.
    fn seq(&self, i: usize) -> Option<u64> {
        match &self.items {
            Items::Packed { base, words, .. } => words.get(i).map(|w| base + (w[1] & 0xffff_ffff)),
            Items::Full(v) => v.get(i).map(|e| e.0),
        }
    }

    /// Entry `i` (taken out: a full entry's key is left empty).
    fn take(&mut self, i: usize) -> Entry {
        match &mut self.items {
            Items::Packed { len, base, words } => {
                let w = words[i];
                (*base + (w[1] & 0xffff_ffff), IndexKey::unpack12(w, *len))
            }
            Items::Full(v) => std::mem::replace(&mut v[i], (0, IndexKey::new(&[]))),
        }
    }

    fn front(&self) -> Option<u64> {
        self.seq(self.head)
    }

    /// Empties the chunk, keeping its memory.
    fn clear(&mut self) {
        self.head = 0;
        match &mut self.items {
            Items::Packed { words, .. } => words.clear(),
            Items::Full(v) => v.clear(),
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct ReadyQueue {
    fifo: VecDeque<Chunk>,
    returned: BinaryHeap<Reverse<Entry>>,
    len: usize,
    /// The largest number pushed to the FIFO (0: none yet). Kept here so the common push,
    /// in order, decides without reading the FIFO's last chunk.
    last: u64,
}

impl ReadyQueue {
    /// Queues event `prefix` under READY number `seq`. Returns false if the head (the
    /// smallest number queued) is unchanged, as it is for a push in order to a queue that
    /// was not empty: the caller need not read the head again (in a queue nobody pops from,
    /// it lies in memory long out of cache).
    pub(crate) fn push(&mut self, seq: u64, prefix: IndexKey) -> bool {
        let head_may_change = self.len == 0;
        self.len += 1;
        if seq > self.last {
            self.last = seq;
            let prefix = match self.fifo.back_mut() {
                Some(c) => c.try_push(seq, prefix).err(),
                None => Some(prefix),
            };
            if let Some(prefix) = prefix {
                let mut c = Chunk::for_entry(seq, &prefix);
                // A fresh chunk shaped for this entry always takes it.
                let taken = c.try_push(seq, prefix);
                debug_assert!(taken.is_ok());
                self.fifo.push_back(c);
            }
            head_may_change
        } else {
            self.returned.push(Reverse((seq, prefix)));
            true
        }
    }

    /// The smallest queued number.
    pub(crate) fn head(&self) -> Option<u64> {
        let f = self.fifo.front().and_then(Chunk::front);
        let r = self.returned.peek().map(|Reverse(e)| e.0);
        match (f, r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes the entry with the smallest number.
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        let head = self.head()?;
        self.len -= 1;
        if self.returned.peek().is_some_and(|Reverse(e)| e.0 == head) {
            return self.returned.pop().map(|Reverse(e)| e);
        }
        let chunks = self.fifo.len();
        let chunk = self.fifo.front_mut()?;
        let e = chunk.take(chunk.head);
        chunk.head += 1;
        if chunk.head == chunk.len() {
            // Exhausted; a chunk still being filled is only dropped once full.
            if chunk.is_full() || chunks > 1 {
                self.fifo.pop_front();
            } else {
                chunk.clear();
            }
        }
        Some(e)
    }

    /// Entries queued (including stale ones the caller has not dropped yet).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Keeps only the entries for which `keep` is true (the stale-entry compaction).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64, &IndexKey) -> bool) {
        let old = std::mem::take(self);
        let mut fifo = old.fifo;
        for c in fifo.iter_mut() {
            for i in c.head..c.len() {
                let (seq, p) = c.take(i);
                if keep(seq, &p) {
                    self.push(seq, p);
                }
            }
        }
        // The heap's entries may be smaller than the FIFO's last: `push` sorts them out.
        for Reverse((seq, p)) in old.returned.into_vec() {
            if keep(seq, &p) {
                self.push(seq, p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The prefix queued under number `n`: 8, 12 or 16 bytes long (packed entries of two
    /// lengths, and full ones), so chunks of every shape follow each other.
    fn key(n: u64) -> IndexKey {
        let b = n.to_be_bytes();
        match (n / 7) % 3 {
            0 => IndexKey::new(&b),
            1 => IndexKey::new(&[&b[..], &[1, 2, 3, 4]].concat()),
            _ => IndexKey::new(&[&b[..], &b[..]].concat()),
        }
    }

    proptest! {
        /// Against a model (a sorted set): any mix of pushes (in order or not), pops and
        /// compactions gives the same order and length.
        #[test]
        fn pops_in_number_order(ops in proptest::collection::vec((0u8..4, 0u64..2000), 0..3000)) {
            let mut q = ReadyQueue::default();
            let mut model = std::collections::BTreeSet::new();
            let mut next = 1u64;
            for (op, x) in ops {
                match op {
                    0 | 1 => {
                        // New READY events take the next number; a returning one an old one.
                        // Now and then a jump past what a packed chunk's offsets reach.
                        if op == 0 && x % 97 == 0 {
                            next += 1 << 33;
                        }
                        let seq = if op == 0 { next += 1; next } else { x.min(next) };
                        if model.insert(seq) {
                            let head = q.head();
                            let may_change = q.push(seq, key(seq));
                            prop_assert!(may_change || q.head() == head);
                        }
                    }
                    2 => {
                        let want = model.pop_first();
                        let got = q.pop();
                        prop_assert_eq!(got.as_ref().map(|e| e.0), want);
                        if let Some((s, k)) = got {
                            prop_assert_eq!(k, key(s));
                        }
                    }
                    _ => {
                        q.retain(|s, _| s % 3 != x % 3);
                        model.retain(|s| s % 3 != x % 3);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.head(), model.first().copied());
            }
        }
    }

    #[test]
    fn claimed_chunks_are_freed() {
        let mut q = ReadyQueue::default();
        for s in 1..=(10 * PACKED_CHUNK as u64) {
            q.push(s, IndexKey::new(&s.to_be_bytes()[..4])); // packed: 256 to a chunk
        }
        assert_eq!(q.fifo.len(), 10);
        for _ in 0..(5 * PACKED_CHUNK) {
            q.pop();
        }
        assert_eq!(q.fifo.len(), 5, "exhausted chunks are dropped");
        while q.pop().is_some() {}
        assert!(q.fifo.len() <= 1);
        assert_eq!(q.len(), 0);
    }
}
