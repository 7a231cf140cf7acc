//! Proves a writer never waits on the device to roll to a new segment (no persist at the roll, the header is persisted with the segment's first records), that this loses nothing across a process crash followed by a power cut, and that the waits writers do have are counted in `stats().waits`.

mod common;

use hotstore::testing::FaultMedium;
use hotstore::{Durability, FragmentKey};
use std::sync::atomic::Ordering;

fn key(n: u64) -> [u8; 16] {
    FragmentKey::new(1, n, 0, 0).to_bytes()
}

#[test]
fn rolling_to_a_new_segment_does_not_persist() {
    use hotstore::testing::{Medium, Segment, SEGMENT_HEADER_LEN};
    let m = FaultMedium::new("roll");
    let region = m.create_region("seg", 1 << 20).unwrap();
    // As the write path makes one at a roll: end past the header, nothing synced.
    let seg = Segment::new(9, 0, 0, region, SEGMENT_HEADER_LEN, 0, false);
    let before = m.faults().persist_calls.load(Ordering::SeqCst);
    seg.write_header(1, 0).unwrap();
    assert_eq!(
        m.faults().persist_calls.load(Ordering::SeqCst),
        before,
        "writing a new segment's header waited for the device"
    );
    assert!(
        !seg.is_synced(),
        "the unpersisted header must count as unsynced"
    );
    seg.persist_written().unwrap();
    assert!(seg.is_synced());
}

/// Regression (minimised by tests/model.rs): a segment was rolled to (header written, not
/// persisted), the process crashed, the reopened store kept writing into that tail with
/// `Persisted` and the device then lost power: the records were lost with the header, because
/// the reopened tail counted its header as already durable.
#[test]
fn a_tail_reopened_after_a_process_crash_persists_its_header_with_its_records() {
    let m = FaultMedium::new("tail-header");
    let s = common::open_two_lanes(&m);
    drop(s.reserve(&key(0), 0).unwrap()); // rolls to a segment, writes nothing into it
    let crashed = m.process_crash();
    std::mem::forget(s); // the crashed process never closes its store
    let s = common::open_two_lanes(&crashed);
    s.put(&key(1), b"persisted", Durability::Persisted).unwrap();
    let after_power_cut = crashed.crash(None);
    std::mem::forget(s);
    let s = common::open_two_lanes(&after_power_cut);
    assert_eq!(
        s.get(&key(1)).unwrap().as_deref(),
        Some(&b"persisted"[..]),
        "an acknowledged Persisted put was lost to a power cut"
    );
}

#[test]
fn waits_for_space_are_counted() {
    let m = FaultMedium::new("waits");
    m.faults().capacity_bytes.store(4 << 20, Ordering::SeqCst);
    let s = common::open_two_lanes(&m);
    let v = vec![1u8; 200 << 10];
    let mut full = None;
    for n in 0..100 {
        let opts = hotstore::WriteOptions {
            durability: Durability::Memory,
            full_wait: Some(std::time::Duration::from_millis(30)),
        };
        if let Err(e) = s.put_with(&key(n), &v, opts) {
            full = Some(e);
            break;
        }
    }
    assert!(full.is_some_and(|e| e.is_full()), "the store never filled");
    let w = s.stats().waits;
    assert!(w.full.count >= 1, "a wait for space was not counted: {w:?}");
    assert!(w.full.total_ns > 0);
}

/// A busy bounded store whose writers shadow each other's records (pin cycles at every roll)
/// must keep freeing space: two threads overwrite and remove each other's keys without a pause
/// in a store of 24 MiB and must never stay full. (It guards the maintenance schedule; it did
/// not reproduce the minidaq wedge that moved the sweep out of the idle branch, see
/// maintenance.rs.)
///
/// It used to wedge about 1 run in 3 under CPU load: one thread ran far ahead, every segment
/// its lane rolled through held tombstones pinned on the other lane's long-lived active segment,
/// and once the store filled nothing could be freed. Relocation (issue 15) moves that
/// segment's live records out when a writer finds the store full, so it can go.
#[test]
fn a_busy_bounded_store_frees_segments_that_pin_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let s = hotstore::Store::builder(dir.path())
        .segment_size_bytes(1 << 20)
        .lanes(2)
        .tier(hotstore::TierSpec::new(".").capacity_bytes(24 << 20))
        .open()
        .unwrap();
    let opts = hotstore::WriteOptions {
        durability: Durability::Memory,
        // Long enough that only a wedge fails, not a maintenance thread starved of CPU on a
        // loaded machine (5 s failed beside a 4-thread minidaq on 2 cores).
        full_wait: Some(std::time::Duration::from_secs(120)),
    };
    let v = vec![3u8; 8 << 10];
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            let (s, v) = (&s, &v);
            scope.spawn(move || {
                // 20 000 puts of 8 KiB: 160 MiB through a 24 MiB store.
                for n in 0..20_000u64 {
                    let mine = key(t * 1_000_000 + n % 64);
                    let theirs = key((1 - t) * 1_000_000 + (n + 7) % 64);
                    s.put_with(&mine, v, opts).expect("put never stays full");
                    s.remove_with(&theirs, opts).expect("removal");
                }
            });
        }
    });
    assert_eq!(s.stats().full_errors, 0);
}
