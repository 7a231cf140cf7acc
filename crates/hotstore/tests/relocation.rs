//! Relocation (issue 15): a bounded store whose dead space is pinned by live records frees it
//! by moving those records, keeping every key exactly once, events intact, across reopens.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Ack, Durability, EventId, EventPolicy, FragmentKey, Store, TierSpec, WriteOptions};
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn bounded(dir: &std::path::Path, capacity: u64) -> Store {
    Store::builder(dir)
        .segment_size_bytes(MIB as usize)
        .lanes(1)
        .tier(TierSpec::new(".").capacity_bytes(capacity))
        .open()
        .unwrap()
}

/// One key written once and never again pins its segment; every overwrite of another key
/// pins the segment of the version before it, so without relocation the whole store is
/// pinned by one live record and fills for good (StoreFull with under 1% live).
#[test]
fn a_long_lived_key_does_not_wedge_a_bounded_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = bounded(dir.path(), 16 * MIB);
    s.put(b"long-lived", b"kept", Durability::Memory).unwrap();
    let mut v = vec![0u8; 8 << 10];
    // 20 000 overwrites of 8 KiB: 160 MiB through a 16 MiB store, with no wait allowed.
    for n in 0..20_000u32 {
        v[..4].copy_from_slice(&n.to_le_bytes());
        s.put(b"hot", &v, Durability::Memory)
            .unwrap_or_else(|e| panic!("put {n}: {e}"));
    }
    let st = s.stats();
    assert_eq!(st.full_errors, 0);
    assert!(st.relocation.records > 0, "nothing was relocated: {st:?}");
    assert!(st.write_amplification() > 1.0);
    assert!(st.file_bytes <= 16 * MIB);
    assert_eq!(s.get(b"long-lived").unwrap().unwrap(), b"kept");
    assert_eq!(s.get(b"hot").unwrap().unwrap(), v);
    drop(s);
    let s = bounded(dir.path(), 16 * MIB);
    assert_eq!(s.stats().entries, 2);
    assert_eq!(s.get(b"long-lived").unwrap().unwrap(), b"kept");
    assert_eq!(s.get(b"hot").unwrap().unwrap(), v);
}

/// Past capacity minus the reserve, puts get StoreFull naming the figures, and removals
/// still succeed (and make room again).
#[test]
fn past_the_reserve_puts_are_refused_with_figures_and_removals_work() {
    let dir = tempfile::tempdir().unwrap();
    let s = bounded(dir.path(), 8 * MIB);
    let v = vec![7u8; 64 << 10];
    let mut stored = 0u32;
    let err = loop {
        match s.put(format!("k{stored}").as_bytes(), &v, Durability::Memory) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "an 8 MiB store took 64 MiB");
    };
    assert!(err.is_full(), "{err}");
    let msg = err.to_string();
    for figure in ["live", "dead", "reserved", "8388608"] {
        assert!(msg.contains(figure), "{figure} missing from: {msg}");
    }
    // Live data fills what the reserve leaves: at least capacity - reserve - one active tail.
    let st = s.stats();
    assert!(
        st.live_bytes + st.reserve_bytes + MIB >= 8 * MIB - MIB,
        "only {} live of 8 MiB: {st:?}",
        st.live_bytes
    );
    for n in 0..stored {
        assert!(s
            .remove(format!("k{n}").as_bytes(), Durability::Memory)
            .unwrap());
    }
    for n in 0..stored {
        s.put(format!("again{n}").as_bytes(), &v, Durability::Memory)
            .unwrap_or_else(|e| panic!("put {n} after removing everything: {e}"));
    }
}

/// Fragments, seals, keeps and claims survive their records being moved, and a reopen after
/// relocation finds each event as it was.
#[test]
fn relocation_keeps_events_intact() {
    let dir = tempfile::tempdir().unwrap();
    let s = bounded(dir.path(), 16 * MIB);
    s.set_event_policy(EventPolicy {
        expected_fragments: 2,
        incomplete_timeout_ms: 0,
    })
    .unwrap();
    let key = |event: u64, det: u16| FragmentKey::new(1, event, det, 0).to_bytes().to_vec();
    // Event 1: complete, claimed, kept; event 2: one fragment, sealed; event 3: one fragment,
    // open.
    s.put(&key(1, 0), b"a", Durability::Memory).unwrap();
    s.put(&key(1, 1), b"b", Durability::Memory).unwrap();
    s.put(&key(2, 0), b"c", Durability::Memory).unwrap();
    s.seal(&EventId::new(1, 2), Durability::Memory).unwrap();
    s.put(&key(3, 0), b"d", Durability::Memory).unwrap();
    let claim = s
        .next_event("test", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!(claim.event(), &EventId::new(1, 1));
    claim.ack_with(Ack::Keep, Durability::Memory).unwrap();
    // Churn: pushes everything above out of its segment by relocation.
    let v = vec![1u8; 8 << 10];
    for _ in 0..6000 {
        s.put(b"churn", &v, Durability::Memory).unwrap();
    }
    assert!(
        s.stats().relocation.records >= 5,
        "{:?}",
        s.stats().relocation
    );
    let check = |s: &Store| {
        assert_eq!(s.get(&key(1, 1)).unwrap().unwrap(), b"b");
        assert_eq!(s.get(&key(2, 0)).unwrap().unwrap(), b"c");
        assert_eq!(s.get(&key(3, 0)).unwrap().unwrap(), b"d");
        let e = s.stats().events;
        assert_eq!((e.kept, e.ready, e.open), (1, 1, 1), "{e:?}");
        // The sealed event is the one claimable.
        let c = s
            .next_event("test", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        assert_eq!(c.event(), &EventId::new(1, 2));
        assert_eq!(c.fragments().unwrap().len(), 1);
        c.release().unwrap();
    };
    check(&s);
    drop(s);
    let s = bounded(dir.path(), 16 * MIB);
    check(&s);
}

/// `compact` frees the files of dead space and the data reads back, also after a reopen.
#[test]
fn compact_frees_dead_space() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(MIB as usize)
        .lanes(1)
        .open()
        .unwrap();
    let v = vec![5u8; 4 << 10];
    // Every round overwrites half the keys of the round before: each segment ends half dead,
    // and still pinned by its live half, so nothing is freed without relocation.
    for round in 0..4u8 {
        for k in (0..1000u32).filter(|k| round == 0 || k % 2 == 1) {
            let mut val = v.clone();
            val[0] = round;
            s.put(&k.to_le_bytes(), &val, Durability::Memory).unwrap();
        }
    }
    let before = s.stats();
    let steps = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = steps.clone();
    let moved = s
        .compact(move |_moved, _dead| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
    assert!(steps.load(std::sync::atomic::Ordering::Relaxed) > 0);
    let after = s.stats();
    assert!(moved > 0);
    assert!(
        after.segments < before.segments,
        "{} segments before, {} after",
        before.segments,
        after.segments
    );
    assert!(
        after.dead_bytes * 4 < before.dead_bytes,
        "{before:?} {after:?}"
    );
    drop(s);
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(s.stats().entries, 1000);
    for k in 0..1000u32 {
        let expect = if k % 2 == 1 { 3 } else { 0 };
        assert_eq!(s.get(&k.to_le_bytes()).unwrap().unwrap()[0], expect);
    }
}

/// Two lanes removing each other's keys while overwriting their own, with no wait: the
/// deterministic form of the pin-cycle wedge (one lane's tombstones pin the other's
/// long-lived active segment).
#[test]
fn pin_cycles_between_lanes_are_relocated_away() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(MIB as usize)
        .lanes(2)
        .tier(TierSpec::new(".").capacity_bytes(12 * MIB))
        .open()
        .unwrap();
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    let v = vec![3u8; 8 << 10];
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            let (s, v) = (&s, &v);
            scope.spawn(move || {
                for n in 0..6_000u64 {
                    let mine = (t * 1_000_000 + n % 64).to_be_bytes();
                    let theirs = ((1 - t) * 1_000_000 + (n + 7) % 64).to_be_bytes();
                    s.put_with(&mine, v, opts)
                        .unwrap_or_else(|e| panic!("thread {t} put {n}: {e}"));
                    s.remove_with(&theirs, opts).unwrap();
                }
            });
        }
    });
    assert_eq!(s.stats().full_errors, 0);
}
