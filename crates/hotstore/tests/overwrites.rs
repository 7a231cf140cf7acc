//! Random overwrites (issue 16): a segment whose records were all overwritten is recycled
//! even while it pins an older segment that still holds a live record, and the tombstones
//! that follow keep every removed key removed across a power cut.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::testing::{FaultMedium, Medium};
use hotstore::{Durability, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 64 KiB segments (60 KiB of records), one lane: two 25 KiB values fill a segment and a
/// third rolls to the next one, so which record lands where is fixed.
fn open(m: &Arc<FaultMedium>) -> Store {
    let media: Vec<Arc<dyn Medium>> = vec![m.clone()];
    Store::builder("/overwrites")
        .segment_size_bytes(64 << 10)
        .lanes(1)
        .media(media)
        .open()
        .unwrap()
}

fn value(tag: u8) -> Vec<u8> {
    vec![tag; 25 << 10]
}

fn wait_for_segments(s: &Store, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = s.stats().segments;
        if now <= n || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fix (issue 16): every overwrite pins the new version's segment on the old one's, so a dead
/// segment could be recycled only after every older segment it pinned. With random overwrites
/// the oldest segments keep a few live records for a long time, so dead segments piled up
/// behind them (10 KiB SETs through a server outgrew an 8 GiB store by GBs of dead records),
/// and with two lanes overwriting each other's keys the pins joined every segment into one
/// group too large to relocate. A segment of puts is now freed once dead, its pins passing to
/// the segments that pinned it. Before the fix the dead segments S1 and S2 below stay (5
/// segments); the tombstone in S3 must still keep `k` removed after a power cut, which it
/// only does if S2's pin on S0 passed to S3.
#[test]
fn dead_segments_of_overwritten_puts_are_recycled_before_older_live_ones() {
    let m = FaultMedium::new("overwrites");
    let s = open(&m);
    let put = |k: &[u8], tag: u8| s.put(k, &value(tag), Durability::Persisted).unwrap();
    // S0: a long-lived key and the first versions of k and a.
    s.put(b"old", b"stays", Durability::Persisted).unwrap();
    put(b"k", 1);
    put(b"a", 1);
    // S1..S15: live data never overwritten, so that dead bytes stay under a quarter of the
    // records and no background relocation runs (it would free S0 and everything with it).
    for n in 0..30u8 {
        put(&[b'f', n], n);
    }
    // S16: second versions (S16 pins S0).
    put(b"k", 2);
    put(b"a", 2);
    // S17: third versions; S16 is now all dead, pinning S0 where "old" lives.
    put(b"k", 3);
    put(b"a", 3);
    // S18: b, the removal of k (its tombstone pins S17) and a fourth a: S17 is all dead too.
    put(b"b", 1);
    assert!(s.remove(b"k", Durability::Persisted).unwrap());
    put(b"a", 4);
    // S19: a and b overwritten, so S18 holds only dead records, the tombstone among them.
    put(b"a", 5);
    put(b"b", 2);
    assert_eq!(s.stats().relocation.records, 0);
    // S16 and S17 go; S18 stays, its tombstone pinned (through S17's pin, passed on) on S0's
    // k.
    let left = wait_for_segments(&s, 18);
    assert_eq!(
        left,
        18,
        "dead segments of overwritten puts were not recycled: {:?}",
        s.stats()
    );
    assert_eq!(s.stats().relocation.records, 0);
    let crashed = m.crash(None);
    drop(s);
    let s = open(&crashed);
    assert_eq!(s.get(b"old").unwrap().unwrap(), b"stays");
    assert_eq!(s.get(b"k").unwrap(), None, "a removed key came back");
    assert_eq!(s.get(b"a").unwrap().unwrap(), value(5));
    assert_eq!(s.get(b"b").unwrap().unwrap(), value(2));
    assert_eq!(s.stats().entries, 33);
}
