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

/// Entries per FIFO chunk: 128 x 32 bytes, one 4 KiB page.
const CHUNK: usize = 128;

type Entry = (u64, IndexKey);

/// One FIFO chunk: `items[head..]` are queued.
struct Chunk {
    items: Vec<Entry>,
    head: usize,
}

impl Chunk {
    fn new() -> Self {
        Chunk {
            items: Vec::with_capacity(CHUNK),
            head: 0,
        }
    }

    fn front(&self) -> Option<&Entry> {
        self.items.get(self.head)
    }
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct ReadyQueue {
    fifo: VecDeque<Chunk>,
    returned: BinaryHeap<Reverse<Entry>>,
    len: usize,
}

impl ReadyQueue {
    /// Queues event `prefix` under READY number `seq`.
    pub(crate) fn push(&mut self, seq: u64, prefix: IndexKey) {
        let in_order = self
            .fifo
            .back()
            .and_then(|c| c.items.last())
            .is_none_or(|(last, _)| *last < seq);
        if in_order {
            if self.fifo.back().is_none_or(|c| c.items.len() == CHUNK) {
                self.fifo.push_back(Chunk::new());
            }
            if let Some(c) = self.fifo.back_mut() {
                c.items.push((seq, prefix));
            }
        } else {
            self.returned.push(Reverse((seq, prefix)));
        }
        self.len += 1;
    }

    /// The smallest queued number.
    pub(crate) fn head(&self) -> Option<u64> {
        let f = self.fifo.front().and_then(Chunk::front).map(|e| e.0);
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
        let e = std::mem::replace(&mut chunk.items[chunk.head], (0, IndexKey::new(&[])));
        chunk.head += 1;
        if chunk.head == chunk.items.len() {
            // Exhausted; a chunk still being filled is only dropped once full.
            if chunk.items.len() == CHUNK || chunks > 1 {
                self.fifo.pop_front();
            } else {
                chunk.items.clear();
                chunk.head = 0;
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
            for (seq, p) in c.items.drain(c.head..) {
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

    fn key(n: u64) -> IndexKey {
        IndexKey::new(&n.to_be_bytes())
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
                        let seq = if op == 0 { next += 1; next } else { x.min(next) };
                        if model.insert(seq) {
                            q.push(seq, key(seq));
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
        for s in 1..=(10 * CHUNK as u64) {
            q.push(s, key(s));
        }
        assert_eq!(q.fifo.len(), 10);
        for _ in 0..(5 * CHUNK) {
            q.pop();
        }
        assert_eq!(q.fifo.len(), 5, "exhausted chunks are dropped");
        while q.pop().is_some() {}
        assert!(q.fifo.len() <= 1);
        assert_eq!(q.len(), 0);
    }
}
