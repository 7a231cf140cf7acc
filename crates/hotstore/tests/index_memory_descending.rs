//! Fix (found in review, eighteenth session): DRAM per index entry when keys arrive in
//! descending order above a full leaf (each got a leaf of its own: 2.7 KiB per entry, 6.4 KiB
//! past a full inner node). Alone in its binary: the allocation counter is process-wide.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::testing::{FaultMedium, Index, IndexKey, Loc, Medium, Segment};
use hotstore::FragmentKey;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counting;
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// Safety: forwards to the system allocator, only counting sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // Safety: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // Safety: same pointer and layout the caller got from `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Twice the documented bound (docs/design.md §8, tests/index_memory.rs: 64 B per entry for
/// appends and random order): leaves split in the middle are at least half full.
const MAX_BYTES_PER_ENTRY: f64 = 128.0;

/// DRAM per entry after `ascending` components of detector 0 in order, then `descending`
/// components of detector 1, highest first, all fragments of one event (one shard, one tree).
fn per_entry(ascending: u16, descending: u16) -> f64 {
    let medium = FaultMedium::new("review-desc");
    let region = medium.create_region("seg", 1 << 16).unwrap();
    let seg = Arc::new(Segment::new(1, 0, 0, region, 4096, 4096));
    let index: Index = Index::new(16, 12);
    let put = |detector: u16, component: u16| {
        let key = FragmentKey::new(1, 7, detector, component).to_bytes();
        index.shard(&key).write().insert(
            IndexKey::new(&key),
            Loc {
                seg: seg.clone(),
                offset: 4096,
                value_len: 100,
            },
        );
    };
    let before = ALLOCATED.load(Ordering::Relaxed);
    (0..ascending).for_each(|c| put(0, c));
    (0..descending).rev().for_each(|c| put(1, c));
    let after = ALLOCATED.load(Ordering::Relaxed);
    let n = usize::from(ascending) + usize::from(descending);
    assert_eq!(index.len(), n);
    (after - before) as f64 / n as f64
}

// One test: the allocation counter is process-wide, so the cases run one after the other.
#[test]
fn descending_keys_after_full_nodes_stay_within_the_dram_bound() {
    // 63 = LEAF_CAP: one full leaf; 48 * 63 = INNER_CAP * LEAF_CAP: a full inner node of full
    // leaves; 100: a leaf split in the middle (control).
    for ascending in [100u16, 63, 48 * 63] {
        let per = per_entry(ascending, 20_000);
        println!("{ascending} ascending, 20000 descending: {per:.1} B per entry");
        assert!(
            per <= MAX_BYTES_PER_ENTRY,
            "{ascending} ascending: {per:.1} B/entry"
        );
    }
}
