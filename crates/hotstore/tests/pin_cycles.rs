//! Proves that dead segments which pin each other (two writers overwriting and removing each
//! other's keys) are still recycled, all-or-nothing, and that a crash while a group is being
//! freed brings back nothing: the intent file makes recovery finish the job.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::open_two_lanes as open;
use hotstore::testing::{FaultMedium, Medium};
use hotstore::{Durability, Store};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Two threads on two lanes build the cycle: S_x shadows a record of S_y and S_y one of S_x.
fn build_cycle(store: &Store, then_roll: bool) {
    let (to_b, from_a) = mpsc::channel::<&'static str>();
    let (to_a, from_b) = mpsc::channel::<&'static str>();
    std::thread::scope(|s| {
        s.spawn(move || {
            store.put(b"key-a", b"a1", Durability::Persisted).unwrap();
            to_b.send("a1").unwrap();
            from_b.recv().unwrap(); // b wrote a2 and b1
            store.put(b"key-b", b"b2", Durability::Persisted).unwrap();
            assert!(store.remove(b"key-a", Durability::Persisted).unwrap());
            assert!(store.remove(b"key-b", Durability::Persisted).unwrap());
            if then_roll {
                roll(store, b'x');
            }
        });
        s.spawn(move || {
            from_a.recv().unwrap();
            store.put(b"key-a", b"a2", Durability::Persisted).unwrap();
            store.put(b"key-b", b"b1", Durability::Persisted).unwrap();
            to_a.send("b").unwrap();
            if then_roll {
                roll(store, b'y');
            }
        });
    });
}

/// Writes and removes 1.2 MiB of filler from this thread, so its lane rolls to a new segment
/// and the one holding the cycle is sealed.
fn roll(store: &Store, tag: u8) {
    let filler = vec![tag; 100 << 10];
    for i in 0..12u8 {
        store
            .put(&[b'f', tag, i], &filler, Durability::Memory)
            .unwrap();
    }
    for i in 0..12u8 {
        assert!(store.remove(&[b'f', tag, i], Durability::Memory).unwrap());
    }
}

fn wait_for_segments(store: &Store, n: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if store.stats().segments == n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

// One test function: the two writer threads must land on different lanes, and lanes are dealt
// to threads in the order they first write, so no other test may spawn writers meanwhile.
#[test]
fn dead_segments_that_pin_each_other_are_recycled_together_and_crash_safely() {
    // 1. The cycle is found and freed while the store runs, and a power cut afterwards brings
    //    nothing back.
    let medium = FaultMedium::new("cycle");
    let store = open(&medium);
    build_cycle(&store, true);
    assert_eq!(store.stats().entries, 0);
    // Everything is dead: the cycle, and the lanes' filler segments (sealed once idle).
    assert!(
        wait_for_segments(&store, 0),
        "sealed dead segments pinning each other were never recycled: {:?}",
        store.stats()
    );
    assert_eq!(store.get(b"key-a").unwrap(), None);
    assert_eq!(store.get(b"key-b").unwrap(), None);
    store.close().unwrap();
    let after = medium.crash(None);
    let store = open(&after);
    assert_eq!(store.get(b"key-a").unwrap(), None);
    assert_eq!(store.get(b"key-b").unwrap(), None);
    assert_eq!(store.stats().entries, 0);
    drop(store);

    // 2. A crash after the intent was written but before the free headers: recovery frees
    //    every listed segment (ids 1 and 2: the first segment of each lane, holding the cycle).
    //    Without rolling, the two segments are active until close seals them (with summaries).
    let medium = FaultMedium::new("cycle-intent");
    let store = open(&medium);
    build_cycle(&store, false);
    store.close().unwrap();
    medium.write_file("reclaim.intent", b"[1,2]").unwrap();
    let store = open(&medium);
    let report = store.recovery_report();
    assert_eq!(
        report.segments_from_summary, 0,
        "listed segments must not be loaded: {report:?}"
    );
    assert!(
        report.segments_free >= 2,
        "listed segments must be freed: {report:?}"
    );
    assert_eq!(store.get(b"key-a").unwrap(), None);
    assert_eq!(store.get(b"key-b").unwrap(), None);
    assert_eq!(
        medium.read_file("reclaim.intent").unwrap(),
        None,
        "intent removed"
    );
}
