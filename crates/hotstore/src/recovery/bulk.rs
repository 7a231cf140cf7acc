//! Building the index at open in bulk, instead of one locked insert per record.
//!
//! 1. Recovery routes every key record (put or tombstone) of every segment to its index shard
//!    ([`Pending::push`]), in whatever order the files come.
//! 2. Each shard is then finished on its own, the shards spread over the cores:
//!    sort its records by (key, lsn); for each key, every version pins the segment of the
//!    version before it (the newer must outlive the older, exactly as the write path pins when
//!    it replaces), every record starts dead and the newest one is live if it is a put;
//!    tombstones that win are dropped (they only decided the order). The winners, in key order,
//!    become the shard's map in one bulk build (`BTreeMap::from_iter` on sorted input: O(n),
//!    full nodes).
//! 3. Segment counts are summed per thread and added once per segment, pins deduplicated.
//!
//! The result equals the one-insert-per-record rebuild (tests/reopen.rs compares them).

use crate::index::{BTree, Index, IndexKey, Loc, SHARDS};
use crate::record::{self, Kind};
use crate::segment::Segment;
use crate::summary::Entry;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One key record waiting for its shard to be built.
struct Rec {
    key: IndexKey,
    lsn: u64,
    /// Position of its segment in the recovered list.
    seg: u32,
    offset: u32,
    value_len: u32,
    put: bool,
}

/// The key records of every segment, by index shard.
pub(super) struct Pending {
    shards: Vec<Vec<Rec>>,
}

impl Pending {
    pub(super) fn new() -> Self {
        Pending {
            shards: (0..SHARDS).map(|_| Vec::new()).collect(),
        }
    }

    /// Queues a put or tombstone of the segment at position `seg`.
    pub(super) fn push<E>(&mut self, index: &Index<E>, seg: usize, e: &Entry) {
        debug_assert!(matches!(e.kind, Kind::Put | Kind::Tombstone));
        self.shards[index.shard_no(&e.key)].push(Rec {
            key: IndexKey::new(&e.key),
            lsn: e.lsn,
            seg: seg as u32,
            offset: e.offset,
            value_len: e.value_len,
            put: e.kind == Kind::Put,
        });
    }

    /// Builds every shard of `index` (empty) from the queued records; `segments` is the
    /// recovered list the records' positions refer to.
    pub(super) fn build<E: Send + Sync>(self, index: &Index<E>, segments: &[Arc<Segment>]) {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, SHARDS);
        let mut work: Vec<Vec<(usize, Vec<Rec>)>> = (0..threads).map(|_| Vec::new()).collect();
        for (no, recs) in self.shards.into_iter().enumerate() {
            work[no % threads].push((no, recs));
        }
        std::thread::scope(|scope| {
            for batch in work {
                scope.spawn(move || {
                    let mut counts = vec![SegCounts::default(); segments.len()];
                    let mut pins: HashSet<(u32, u32)> = HashSet::new();
                    for (no, recs) in batch {
                        let keys = finish_shard(recs, segments, &mut counts, &mut pins);
                        let mut shard = index.shards()[no].write();
                        debug_assert!(shard.keys.is_empty(), "bulk build into a used index");
                        shard.keys = keys;
                    }
                    for (seg, c) in segments.iter().zip(&counts) {
                        c.add_to(seg);
                    }
                    for (holder, target) in pins {
                        segments[holder as usize].pin_on(&segments[target as usize]);
                    }
                });
            }
        });
    }
}

/// One thread's additions to one segment's counts.
#[derive(Clone, Default)]
struct SegCounts {
    live_records: u64,
    live_bytes: u64,
    dead_bytes: u64,
}

impl SegCounts {
    fn add_to(&self, seg: &Segment) {
        if self.live_records > 0 {
            seg.live_records
                .fetch_add(self.live_records, Ordering::Relaxed);
            seg.live_bytes.fetch_add(self.live_bytes, Ordering::Relaxed);
        }
        if self.dead_bytes > 0 {
            seg.dead_bytes.fetch_add(self.dead_bytes, Ordering::Relaxed);
        }
    }
}

/// Sorts one shard's records and returns its map of winners; counts and pins as it goes.
fn finish_shard(
    mut recs: Vec<Rec>,
    segments: &[Arc<Segment>],
    counts: &mut [SegCounts],
    pins: &mut HashSet<(u32, u32)>,
) -> BTree<IndexKey, Loc> {
    recs.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.lsn.cmp(&b.lsn)));
    // Sorted and unique: each winner is an append, which fills the leaves.
    let mut winners = BTree::new();
    let mut i = 0;
    while i < recs.len() {
        let mut j = i + 1;
        while j < recs.len() && recs[j].key == recs[i].key {
            j += 1;
        }
        // recs[i..j]: the versions of one key, oldest first.
        for k in i..j {
            let r = &recs[k];
            let len = rec_len(r);
            if k + 1 < j {
                counts[r.seg as usize].dead_bytes += len;
                let newer = recs[k + 1].seg;
                if newer != r.seg {
                    pins.insert((newer, r.seg));
                }
            } else if r.put {
                let c = &mut counts[r.seg as usize];
                c.live_records += 1;
                c.live_bytes += len;
            } else {
                counts[r.seg as usize].dead_bytes += len;
            }
        }
        let newest = &recs[j - 1];
        if newest.put {
            winners.insert(
                newest.key.clone(),
                Loc {
                    seg: segments[newest.seg as usize].clone(),
                    offset: newest.offset,
                    value_len: newest.value_len,
                },
            );
        }
        i = j;
    }
    winners
}

fn rec_len(r: &Rec) -> u64 {
    let value_len = if r.put { r.value_len as usize } else { 0 };
    record::record_len(r.key.as_bytes().len(), value_len) as u64
}
