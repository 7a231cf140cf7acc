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
    // Either relocation moved the long-lived record, or the dead segments of overwritten
    // puts were freed with their pins handed on (which of the two depends on how fast the
    // puts run against the maintenance thread: asserting on one made this test fail in
    // debug builds). The promise is the same: no StoreFull and the files within capacity.
    let st = s.stats();
    assert_eq!(st.full_errors, 0);
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
    // Churn, then a compaction: moves everything above out of its segment. (The churn alone
    // no longer forces relocation: its dead segments hold only puts and are freed as they die,
    // issue 16.)
    let v = vec![1u8; 8 << 10];
    for _ in 0..6000 {
        s.put(b"churn", &v, Durability::Memory).unwrap();
    }
    s.compact(|_, _| {}).unwrap();
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
        for k in (0..4000u32).filter(|k| round == 0 || k % 2 == 1) {
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
    // Time for the maintenance thread to restock (it may): not at the puts' rate.
    std::thread::sleep(Duration::from_millis(500));
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
    // The freed files go back to the file system: the pool keeps the reserve's files (two of
    // 1 MiB) and the minimum stock (two). Fix (a run beside a busy machine): this compared
    // file bytes before and after, equal when background cleaning had freed most of the dead
    // space before the compaction, and ready files prepared for the puts were never deleted.
    let pooled = after.tiers[0].segments_free + after.tiers[0].segments_ready;
    assert!(
        pooled <= 4,
        "{pooled} files pooled after a compaction ({} file bytes before, {} after)",
        before.file_bytes,
        after.file_bytes
    );
    drop(s);
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(s.stats().entries, 4000);
    for k in 0..4000u32 {
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

/// A store on the fault medium with live records pinned among dead ones (long-lived keys,
/// overwritten keys), every write Persisted; returns it with what each key must read.
fn pinned_store(
    m: &std::sync::Arc<hotstore::testing::FaultMedium>,
) -> (Store, std::collections::BTreeMap<Vec<u8>, Vec<u8>>) {
    let s = open_fault(m).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut put = |s: &Store, k: Vec<u8>, v: Vec<u8>| {
        s.put(&k, &v, Durability::Persisted).unwrap();
        model.insert(k, v);
    };
    for n in 0..40u32 {
        put(&s, format!("long{n}").into_bytes(), vec![n as u8; 300]);
        for round in 0..6u32 {
            let v = vec![(n + round) as u8; 1500 + (n as usize % 7) * 100];
            put(&s, format!("hot{}", n % 8).into_bytes(), v);
        }
    }
    s.remove(b"long3", Durability::Persisted).unwrap();
    model.remove(&b"long3"[..]);
    (s, model)
}

fn open_fault(m: &std::sync::Arc<hotstore::testing::FaultMedium>) -> hotstore::Result<Store> {
    Store::builder("/reloc")
        .segment_size_bytes(64 << 10)
        .lanes(1)
        .media(vec![m.clone()])
        .open()
}

fn check_model(s: &Store, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    for (k, v) in model {
        let got = s.get(k).unwrap_or_else(|e| panic!("{what}: get: {e}"));
        assert_eq!(
            got.as_ref(),
            Some(v),
            "{what}: key {:?}",
            String::from_utf8_lossy(k)
        );
    }
    assert_eq!(s.stats().entries, model.len() as u64, "{what}: entries");
}

/// A crash at every step of a relocation (each persist and each file write it makes, failing
/// there and then a power cut, or a kill of the process) leaves every key exactly once, with
/// its last acknowledged value, after recovery; and the recovered store relocates again.
#[test]
fn a_crash_at_any_step_of_relocation_keeps_each_record_exactly_once() {
    use hotstore::testing::FaultMedium;
    use std::sync::atomic::Ordering::SeqCst;
    // A dry run counts the calls compaction makes.
    let m = FaultMedium::new("reloc");
    let (s, model) = pinned_store(&m);
    let (p0, w0) = (
        m.faults().persist_calls.load(SeqCst),
        m.faults().write_file_calls.load(SeqCst),
    );
    let moved = s.compact(|_, _| {}).unwrap();
    assert!(moved > 0, "nothing to relocate: the test is void");
    let (p1, w1) = (
        m.faults().persist_calls.load(SeqCst),
        m.faults().write_file_calls.load(SeqCst),
    );
    check_model(&s, &model, "dry run");
    drop(s);
    assert!(
        p1 > p0 && w1 > w0,
        "persists {p0}..{p1}, file writes {w0}..{w1}"
    );
    let persist_points = (p0 + 1..=p1 + 1).map(|n| (n, 0));
    let write_points = (w0 + 1..=w1 + 1).map(|n| (0, n));
    for (persist_from, write_from) in persist_points.chain(write_points) {
        let m = FaultMedium::new("reloc");
        let (s, model) = pinned_store(&m);
        m.faults().fail_persist_from.store(persist_from, SeqCst);
        m.faults().fail_write_file_from.store(write_from, SeqCst);
        // It may fail (the store is then poisoned) or finish: both must recover.
        let _ = s.compact(|_, _| {});
        for (how, medium) in [("power cut", m.crash(None)), ("kill", m.process_crash())] {
            let what = format!(
                "{how} with persist failing from {persist_from}, file writes from {write_from}"
            );
            let s = open_fault(&medium).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            check_model(&s, &model, &what);
            s.compact(|_, _| {}).unwrap();
            check_model(&s, &model, &format!("{what}, compacted again"));
            drop(s);
            let s = open_fault(&medium).unwrap();
            check_model(&s, &model, &format!("{what}, compacted again, reopened"));
        }
        drop(s);
    }
}

/// Fix (issue 15): a writer faster than recycling found the store "full" while all it held was
/// dead space waiting to be recycled (`hotstore stress --durability memory --capacity 512MiB
/// --segment-size 4MiB --keys 10`: about 1,600 StoreFull in 10 s with under 2 MB live). A
/// write now asks maintenance for the room and waits for its answer.
#[test]
fn dead_space_waiting_to_be_recycled_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let s = bounded(dir.path(), 8 * MIB);
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    let mut v = vec![0u8; 60 << 10];
    // 4 000 overwrites of 10 keys: 240 MB through 8 MiB, no wait allowed.
    for n in 0..4_000u32 {
        v[..4].copy_from_slice(&n.to_le_bytes());
        s.put_with(format!("k{}", n % 10).as_bytes(), &v, opts)
            .unwrap_or_else(|e| panic!("put {n}: {e}"));
    }
    assert_eq!(s.stats().full_errors, 0);
}

/// The documented guarantee: with live data at most `guaranteed_live_bytes`, random
/// overwrites of mixed sizes never find the bounded store full.
#[test]
fn below_the_guaranteed_live_bytes_puts_never_find_the_store_full() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let s = bounded(dir.path(), 48 * MIB);
    let guaranteed = s.stats().guaranteed_live_bytes;
    assert!(
        guaranteed > 24 * MIB && guaranteed < 48 * MIB,
        "{guaranteed}"
    );
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let size = |rng: &mut rand::rngs::StdRng| 1usize << rng.gen_range(7..17); // 128 B .. 64 KiB
                                                                              // Keys get values up to 64 KiB: as many keys as keep the worst case within the guarantee.
    let keys = (guaranteed / (64 << 10) as u64) as u32;
    let mut written = 0u64;
    let mut n = 0u32;
    while written < 400 * MIB {
        let len = size(&mut rng);
        let k = rng.gen_range(0..keys);
        s.put_with(&k.to_le_bytes(), &vec![(n % 251) as u8; len], opts)
            .unwrap_or_else(|e| panic!("put {n} ({written} bytes written): {e}"));
        written += len as u64;
        n += 1;
    }
    let st = s.stats();
    assert_eq!(st.full_errors, 0);
    assert!(st.live_bytes <= guaranteed, "{st:?}");
    assert!(st.relocation.bytes > 0, "{:?}", st.relocation);
    assert!(st.file_bytes <= 48 * MIB);
}

/// Offload: once the fast tier passes its high-water mark, its oldest sealed segments move to
/// the tier below in the background; every record reads back from where it now lives, events
/// whose fragments moved are still claimable, and a reopen finds it all.
#[test]
fn offload_moves_the_oldest_data_down_and_it_stays_readable_and_claimable() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Store::builder(dir.path())
            .segment_size_bytes(MIB as usize)
            .lanes(1)
            .tier(TierSpec::new("fast").capacity_bytes(12 * MIB))
            .tier(TierSpec::new("slow"))
            .offload_high_water(Some(0.5))
            .open()
            .unwrap()
    };
    let s = open();
    s.set_event_policy(EventPolicy {
        expected_fragments: 2,
        incomplete_timeout_ms: 0,
    })
    .unwrap();
    let frag = |event: u64, det: u16| FragmentKey::new(7, event, det, 0).to_bytes().to_vec();
    let value = |event: u64, det: u16| vec![(event as u8) ^ (det as u8); 16 << 10];
    // 200 events of 2 x 16 KiB: about 6.5 MiB, past the 6 MiB high-water mark.
    for e in 0..200u64 {
        for d in 0..2u16 {
            s.put(&frag(e, d), &value(e, d), Durability::Memory)
                .unwrap();
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let st = s.stats();
        let fast = &st.tiers[0];
        if fast.offloaded_out_bytes > 0 && !fast.offloading {
            assert_eq!(st.tiers[1].offloaded_in_bytes, fast.offloaded_out_bytes);
            assert!(st.tiers[1].live_bytes > 0);
            assert_eq!(fast.offload_high_water, Some(0.5));
            assert_eq!(st.tiers[1].offload_high_water, None);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing offloaded: {:?}",
            st.tiers
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let check = |s: &Store| {
        for e in 0..200u64 {
            for d in 0..2u16 {
                assert_eq!(s.get(&frag(e, d)).unwrap().unwrap(), value(e, d), "{e}/{d}");
            }
        }
        // The oldest event's fragments moved down: it is claimed first, and reads whole.
        let c = s.next_event("t", Duration::from_secs(60)).unwrap().unwrap();
        assert_eq!(c.event(), &EventId::new(7, 0));
        let frags = c.fragments().unwrap();
        assert_eq!(frags.len(), 2);
        assert_eq!(frags[0].1, value(0, 0));
        c.release().unwrap();
    };
    check(&s);
    drop(s);
    let s = open();
    check(&s);
    assert!(s.stats().tiers[1].live_bytes > 0);
}

/// Background cleaning waits while the tier still has pooled files for the dead space: a
/// server taking random 100 B overwrites with 7 GiB of preallocated files unused gave a fifth
/// of its CPU to cleaning it did not need (issue 16).
#[test]
fn cleaning_waits_while_pooled_files_hold_the_dead_space() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(MIB as usize)
        .lanes(1)
        .preallocate_bytes(256 * MIB)
        .open()
        .unwrap();
    // 2 000 keys of 8 KiB, then three in four overwritten: every first-round segment is a
    // quarter live (a cleaning candidate), 12 MiB dead, far under the 256 MiB pooled.
    let v = vec![7u8; 8 << 10];
    for k in 0..2_000u64 {
        s.put(&k.to_be_bytes(), &v, Durability::Memory).unwrap();
    }
    for k in (0..2_000u64).filter(|k| k % 4 != 0) {
        s.put(&k.to_be_bytes(), &v, Durability::Memory).unwrap();
    }
    let st = s.stats();
    assert!(st.dead_bytes > 8 * MIB, "{st:?}");
    // Several 200 ms sweeps: the old rule (dead >= 2 segments and 25% of records) cleaned in
    // the first one without waiting writers.
    std::thread::sleep(Duration::from_millis(1500));
    let st = s.stats();
    assert_eq!(
        st.relocation.bytes, 0,
        "cleaned with pooled files left: {st:?}"
    );
}

/// Offload of full default-size segments of large records (found by `bench pipeline`): a
/// 64 MiB segment holding three 16 MiB values needs more room than one sweep's 64 MiB pace
/// (`room_to_move` adds packing slack), and used never to go down at all.
#[test]
fn offload_moves_full_segments_of_large_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(64 * MIB as usize)
        .lanes(1)
        .tier(TierSpec::new("fast").capacity_bytes(512 * MIB))
        .tier(TierSpec::new("slow"))
        .offload_high_water(Some(0.2))
        .open()
        .unwrap();
    let value = |i: u64| vec![i as u8; 16 * MIB as usize];
    // 9 values of 16 MiB: three full segments, past the 102 MiB mark.
    for i in 0..9u64 {
        s.put(&i.to_be_bytes(), &value(i), Durability::Memory)
            .unwrap();
    }
    // Offload goes on until the fast tier is under its mark: full segments must move.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while s.stats().tiers[0].live_bytes > 512 * MIB / 5 {
        let st = s.stats();
        assert!(
            std::time::Instant::now() < deadline,
            "full segments were not offloaded: {:?} {:?}",
            st.tiers,
            st.relocation
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..9u64 {
        assert_eq!(s.get(&i.to_be_bytes()).unwrap().unwrap(), value(i), "{i}");
    }
}

/// Offload after writes spilled into the tier below: removing a key whose value spilled
/// writes its tombstone in the fast tier, pinned to the lower tier's segment it shadows.
/// `bench pipeline` saw offload stop in that state (docs/benchmarks.md); this sequence does
/// not reproduce that stop (it passes on the code of that day too), but it guards the case.
#[test]
fn offload_goes_on_after_writes_spilled_into_the_tier_below() {
    let dir = tempfile::tempdir().unwrap();
    let open = |mark: Option<f64>| {
        Store::builder(dir.path())
            .segment_size_bytes(MIB as usize)
            .lanes(1)
            .tier(TierSpec::new("fast").capacity_bytes(8 * MIB))
            .tier(TierSpec::new("slow"))
            .offload_high_water(mark)
            .open()
            .unwrap()
    };
    let value = |i: u64| vec![i as u8; 64 << 10];
    let key = |i: u64| i.to_be_bytes();
    // No offload: 24 MiB of puts fill the 8 MiB fast tier and spill into the slow one.
    let s = open(None);
    for i in 0..384u64 {
        s.put(&key(i), &value(i), Durability::Memory).unwrap();
    }
    assert!(s.stats().tiers[1].live_bytes > 0, "nothing spilled");
    // Remove every other key, spilled ones included (their tombstones land in the fast tier
    // as it frees up), interleaved with new puts.
    for i in 0..384u64 {
        if i % 2 == 1 {
            s.remove(&key(i), Durability::Memory).unwrap();
        }
    }
    drop(s);
    let s = open(Some(0.25));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while s.stats().tiers[0].live_bytes > 2 * MIB {
        let st = s.stats();
        assert!(
            std::time::Instant::now() < deadline,
            "offload stopped: {:?} {:?}",
            st.tiers,
            st.relocation
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..384u64 {
        let got = s.get(&key(i)).unwrap();
        if i % 2 == 1 {
            assert_eq!(got, None, "{i}");
        } else {
            assert_eq!(got.unwrap(), value(i), "{i}");
        }
    }
}

/// Offload into a lower tier that fills up: the moves that do not fit fail, are counted and
/// reported, the records stay where they were, and nothing is lost (also across a reopen).
#[test]
fn offload_into_a_full_lower_tier_keeps_every_record_and_reports_it() {
    use hotstore::testing::FaultMedium;
    let seg = 64usize << 10;
    let fast = FaultMedium::new("fast");
    let slow = FaultMedium::new("slow");
    // The lower tier's device holds two segment files.
    slow.faults()
        .capacity_bytes
        .store(2 * seg as u64, std::sync::atomic::Ordering::SeqCst);
    let open = || {
        Store::builder("/offload")
            .segment_size_bytes(seg)
            .lanes(1)
            .tier(TierSpec::new("fast").capacity_bytes(32 * seg as u64))
            .tier(TierSpec::new("slow"))
            .offload_high_water(Some(0.3))
            .media(vec![fast.clone(), slow.clone()])
            .open()
            .unwrap()
    };
    let s = open();
    let value = |k: u32| vec![(k % 251) as u8; 2000 + (k as usize % 5) * 300];
    // About 60% of the fast tier: past its mark, more than the lower tier can take.
    let keys = 32 * seg as u32 * 6 / 10 / 2600;
    for k in 0..keys {
        s.put(&k.to_le_bytes(), &value(k), Durability::Persisted)
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while s.stats().relocation.errors == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no failed offload reported: {:?}",
            s.stats().relocation
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = s.stats();
    assert!(st.relocation.offloaded_records > 0, "{:?}", st.relocation);
    let why = st.relocation.last_error.clone().unwrap();
    assert!(why.contains("full"), "{why}");
    assert!(
        st.poisoned.is_none(),
        "a full lower tier is not a broken store"
    );
    let check = |s: &Store| {
        for k in 0..keys {
            assert_eq!(
                s.get(&k.to_le_bytes()).unwrap().unwrap(),
                value(k),
                "key {k}"
            );
        }
        assert_eq!(s.stats().entries, keys as u64);
    };
    check(&s);
    drop(s);
    check(&open());
}

/// A bounded store on the fault medium: 24 files of 64 KiB, two lanes.
fn open_bounded_fault(m: &std::sync::Arc<hotstore::testing::FaultMedium>) -> Store {
    Store::builder("/wedge")
        .segment_size_bytes(64 << 10)
        .lanes(2)
        .tier(TierSpec::new(".").capacity_bytes(24 * (64 << 10)))
        .media(vec![m.clone()])
        .open()
        .unwrap()
}

/// What `hotstore stress --capacity` does, in-process: random puts of 100 B .. 16 KiB over 200
/// keys; when the store is full, remove a few keys (which must always succeed). Each value is
/// its key's byte repeated, so a reopened store can be checked without a log.
fn bounded_workload(s: &Store, seed: u64, stop: &std::sync::atomic::AtomicBool) -> u64 {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::Ordering::Relaxed;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    let mut ops = 0;
    while !stop.load(Relaxed) {
        let k: u8 = rng.gen_range(0..200);
        let len = rng.gen_range(100..16 << 10);
        match s.put_with(&[k], &vec![k; len], opts) {
            Ok(()) => ops += 1,
            Err(e) if e.is_full() => {
                for _ in 0..8 {
                    let victim: u8 = rng.gen_range(0..200);
                    s.remove(&[victim], Durability::Memory).unwrap_or_else(|e| {
                        panic!("a removal on a full store failed: {e}\n{:#?}", s.stats())
                    });
                }
            }
            Err(e) => panic!("put: {e}"),
        }
    }
    ops
}

/// Fix (issue 15, the kill -9 wedge of `kill9_memory_bounded`): a full bounded store ended with
/// every file in use, a third to a half of its bytes live, relocation without room to move
/// anything, and neither puts nor removals could get room. This test found five causes (it
/// failed 3 runs in 4 before the first fix, 3 in 10 until the last): (1) a crash sealed the
/// file relocation was filling, with the reserve spent in it (now relocation continues the
/// largest tail at the reopen, removal files stay removals', torn tails are cleared and
/// continued); (2) on a bounded tier, room held as pooled files could not become a removal's
/// small file, so the removal took a whole segment of the reserve; (3) a removal spent the
/// relocation reserve before asking relocation for room; (4) relocation compared its budget
/// with a group's live bytes alone, ran out of room half-way (records do not span files) and
/// freed nothing; (5) a request for room did not reclaim after a step that did not finish;
/// (6, found by CI) a removal's request for room moved nothing while every group fitted the
/// room but not the worst-case bound on its packing (see
/// `removals_get_the_room_that_only_packing_record_by_record_shows`).
/// Here 60 "kills" (a snapshot of the page cache at a random instant of a running workload)
/// must each leave a store that opens with every value intact and goes on; at the end,
/// removing every key frees the whole store.
#[test]
fn repeated_kills_of_a_full_bounded_store_never_wedge_it() {
    use hotstore::testing::FaultMedium;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::AtomicBool;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x3ed9e);
    let mut medium = FaultMedium::new("wedge");
    for kill in 0..60 {
        let s = open_bounded_fault(&medium);
        for k in 0..200u8 {
            if let Some(v) = s.get(&[k]).unwrap() {
                assert!(v.iter().all(|b| *b == k), "kill {kill}: key {k} damaged");
            }
        }
        let stop = AtomicBool::new(false);
        let snapshot = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..2)
                .map(|w| {
                    let (s, stop) = (&s, &stop);
                    let seed = rng.gen::<u64>() ^ w;
                    scope.spawn(move || bounded_workload(s, seed, stop))
                })
                .collect();
            // Past the first fill, then at a random instant (relocation runs whenever the
            // store is full, which it is most of the time).
            let started = std::time::Instant::now();
            while s.stats().full_errors < 2 && started.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..30)));
            let snapshot = medium.process_crash();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for w in workers {
                w.join().unwrap();
            }
            snapshot
        });
        drop(s);
        medium = snapshot;
    }
    let s = open_bounded_fault(&medium);
    for k in 0..200u8 {
        s.remove(&[k], Durability::Memory)
            .unwrap_or_else(|e| panic!("remove {k} after the kills: {e}"));
    }
    let big = vec![1u8; 16 << 10];
    for n in 0..40u32 {
        s.put(&n.to_le_bytes(), &big, Durability::Memory)
            .unwrap_or_else(|e| panic!("put {n} into an emptied store: {e}\n{:?}", s.stats()));
    }
}

/// Fix (CI, a failure of `repeated_kills_of_a_full_bounded_store_never_wedge_it`): a full
/// store whose files each hold a 16 KiB record among small ones had a third of each file dead
/// once its victim was removed, but the bound relocation applies (a record's length wasted per
/// file it fills) put every group past the room a removal's request has, so nothing moved;
/// each removal then spent a small file of the reserve until one found no room at all
/// ("store full" at the 47th removal of 60). Relocation now also checks a group record by
/// record: each of these fits a new file whole.
#[test]
fn removals_get_the_room_that_only_packing_record_by_record_shows() {
    let medium = hotstore::testing::FaultMedium::new("exact");
    let seg = 64usize << 10;
    // The reserve is 72 KiB (a segment and a removal's 8 KiB file): puts stop at 60 files.
    let open = || {
        Store::builder("/exact")
            .segment_size_bytes(seg)
            .lanes(1)
            .tier(TierSpec::new(".").capacity_bytes(60 * seg as u64 + (72 << 10)))
            .media(vec![medium.clone()])
            .open()
            .unwrap()
    };
    let s = open();
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    // Group g: 32 small records, a victim whose 1000-byte key makes each tombstone 1 KiB (a
    // few fill a removal's file), and a 16 KiB record.
    let small = |g: u32, i: u32| (g * 100 + i).to_le_bytes().to_vec();
    let big = |g: u32| (g * 100 + 99).to_le_bytes().to_vec();
    let victim = |g: u32| {
        let mut k = vec![b'v'; 1000];
        k[..4].copy_from_slice(&g.to_le_bytes());
        k
    };
    let group = |g: u32| -> Vec<(Vec<u8>, usize)> {
        (0..32)
            .map(|i| (small(g, i), 600))
            .chain([(victim(g), 12000), (big(g), 16000)])
            .collect()
    };
    let mut groups = 0;
    'fill: for g in 0.. {
        for (key, len) in group(g) {
            match s.put_with(&key, &vec![g as u8; len], opts) {
                Ok(()) => {}
                Err(e) if e.is_full() => break 'fill,
                Err(e) => panic!("put: {e}"),
            }
        }
        groups = g + 1;
    }
    assert!(groups >= 50, "only {groups} groups fit");
    for g in 0..groups {
        s.remove(&victim(g), Durability::Memory)
            .unwrap_or_else(|e| panic!("removal {g} of {groups}: {e}\n{:?}", s.stats()));
    }
    assert!(
        s.stats().relocation.groups > 0,
        "{:?}",
        s.stats().relocation
    );
    // Below the guarantee (less a record), puts find room again.
    let mut n = 0u32;
    loop {
        let st = s.stats();
        if st.live_bytes + 2 * 16032 > st.guaranteed_live_bytes {
            break;
        }
        s.put_with(&(1_000_000 + n).to_le_bytes(), &vec![1; 16000], opts)
            .unwrap_or_else(|e| panic!("put {n} below the guarantee: {e}\n{:?}", s.stats()));
        n += 1;
    }
    assert!(n > 0, "no room for a put below the guarantee");
    let check = |s: &Store| {
        for g in 0..groups {
            for (key, len) in group(g) {
                let got = s.get(&key).unwrap();
                if key == victim(g) {
                    assert_eq!(got, None, "victim {g}");
                } else {
                    assert_eq!(got, Some(vec![g as u8; len]), "group {g}");
                }
            }
        }
    };
    check(&s);
    drop(s);
    check(&open());
}

/// Fix (found in review): the guarantee ignored that records do not span files. With 600 KiB
/// values in 1 MiB files each file holds one record, and puts found the store full at 58% of
/// the promised figure. The figure now counts how full the largest record lets a file be.
#[test]
fn the_guarantee_holds_for_records_that_pack_files_badly() {
    let dir = tempfile::tempdir().unwrap();
    let s = bounded(dir.path(), 48 * MIB);
    let v = vec![5u8; 600 << 10];
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    let mut n = 0u32;
    while s.stats().live_bytes + v.len() as u64 + 64 <= s.stats().guaranteed_live_bytes {
        s.put_with(&n.to_le_bytes(), &v, opts).unwrap_or_else(|e| {
            let st = s.stats();
            panic!(
                "put {n}: live {} of guaranteed {}: {e}",
                st.live_bytes, st.guaranteed_live_bytes
            )
        });
        n += 1;
    }
    assert!(n > 10, "{n} puts");
}

/// Records larger than a standard file are offloaded too. `bench pipeline --image 256x256x64
/// --chunk 128x128x32 --configs tiered` asked for 3 MiB segments, which the 16 MiB memory tier
/// fitted down to 1 MiB (1/16 of its capacity): each 1 MiB chunk got a file of its own, and
/// offload's room estimate (`relocation::room_to_move`) divided by 1 and asked for terabytes,
/// so even after a close and a reopen with the lowest mark nothing ever left the memory tier.
#[test]
fn offload_moves_records_larger_than_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let open = |mark: f64| {
        Store::builder(dir.path())
            .segment_size_bytes(MIB as usize)
            .lanes(2)
            .tier(TierSpec::new("fast").capacity_bytes(16 * MIB))
            .tier(TierSpec::new("slow"))
            .offload_high_water(Some(mark))
            .open()
            .unwrap()
    };
    let key = |it: u64, c: u64| [it.to_be_bytes(), c.to_be_bytes()].concat();
    let value = |it: u64, c: u64| vec![(it * 8 + c) as u8; MIB as usize];
    // The pipeline: an image of 8 chunks, two iterations (read, write the next, remove).
    let s = open(0.8);
    for c in 0..8 {
        s.put(&key(0, c), &value(0, c), Durability::Persisted)
            .unwrap();
    }
    for it in 1..=2 {
        for c in 0..8 {
            assert_eq!(s.get(&key(it - 1, c)).unwrap().unwrap(), value(it - 1, c));
            s.put(&key(it, c), &value(it, c), Durability::Persisted)
                .unwrap();
            s.remove(&key(it - 1, c), Durability::Memory).unwrap();
        }
    }
    s.close().unwrap();
    // Its drain: every record must reach the disk tier.
    let s = open(f64::MIN_POSITIVE);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s.stats().tiers[0].live_bytes > 0 {
        let st = s.stats();
        assert!(
            std::time::Instant::now() < deadline,
            "records larger than a segment stayed in the memory tier: {:?} {:?}",
            st.tiers
                .iter()
                .map(|t| (t.live_bytes, t.offloaded_out_bytes))
                .collect::<Vec<_>>(),
            st.relocation
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for c in 0..8 {
        assert_eq!(s.get(&key(2, c)).unwrap().unwrap(), value(2, c), "{c}");
    }
}

/// Fix (kill -9 campaign, twentieth session): with values of up to a segment and removals,
/// pins (a tombstone's segment must outlive the put it removed) chained segments into groups
/// whose live bytes were more than relocation could write at once, and puts found the store
/// full at 27-68% of `guaranteed_live_bytes` (`hotstore stress --max-value 4MiB
/// --segment-size 4MiB --capacity 256MiB`). A segment of such a group is now moved alone,
/// its tombstones copied forward with their lsn.
#[test]
fn the_guarantee_holds_for_large_values_with_removals() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(4 * MIB as usize)
        .lanes(1)
        .tier(TierSpec::new(".").capacity_bytes(128 * MIB))
        .open()
        .unwrap();
    let opts = WriteOptions {
        durability: Durability::Memory,
        full_wait: None,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // Log-uniform sizes, 16 B .. 4 MiB, as `hotstore stress` writes them.
    let size = |rng: &mut rand::rngs::StdRng| (2f64.powf(rng.gen_range(4.0..22.0))) as usize;
    let mut live: Vec<(u32, usize)> = Vec::new();
    let mut next = 0u32;
    let mut written = 0u64;
    let mut full_at: Vec<(u64, u64)> = Vec::new();
    // Whether and when a segment is moved alone depends on the maintenance thread's timing:
    // about one run in ten made no copy forward in 1500 MiB (twenty-sixth session), so the
    // run goes on, up to three times as long, until one is made.
    while written < 1500 * MIB
        || (s.stats().relocation.forwarded_records == 0 && written < 4500 * MIB)
    {
        let len = size(&mut rng);
        let st = s.stats();
        // The guarantee, less the largest value: a put that would pass it is not promised.
        let promised = st.guaranteed_live_bytes.saturating_sub(4 * MIB);
        if live.len() > 4 && (st.live_bytes + len as u64 > promised || rng.gen_bool(0.35)) {
            let (k, _) = live.swap_remove(rng.gen_range(0..live.len()));
            s.remove(&k.to_le_bytes(), Durability::Memory)
                .unwrap_or_else(|e| panic!("remove: {e}\n{:?}", s.stats()));
            continue;
        }
        if st.live_bytes + len as u64 > promised {
            continue;
        }
        let overwrite = !live.is_empty() && rng.gen_bool(0.3);
        let k = if overwrite {
            let i = rng.gen_range(0..live.len());
            live.swap_remove(i).0
        } else {
            next += 1;
            next
        };
        match s.put_with(&k.to_le_bytes(), &vec![k as u8; len], opts) {
            Ok(_) => live.push((k, len)),
            Err(hotstore::Error::StoreFull { .. }) => {
                let st = s.stats();
                full_at.push((st.live_bytes, st.guaranteed_live_bytes));
                if !overwrite {
                    continue;
                }
                // The old version stays: it is still live.
                live.push((k, 0));
            }
            Err(e) => panic!("put: {e}"),
        }
        written += len as u64;
    }
    assert!(
        full_at.is_empty(),
        "{} puts found the store full below the guarantee (live, guaranteed): {:?}\n{:?}",
        full_at.len(),
        &full_at[..full_at.len().min(10)],
        s.stats()
    );
    let forwarded = s.stats().relocation.forwarded_records;
    assert!(
        forwarded > 0,
        "no copies forward: {:?}",
        s.stats().relocation
    );
    // Past the guarantee a put may find the store full, and its request for room copies
    // nothing forward. Fix (`stress --max-value 4MiB`, aiming at 4x the capacity): requests
    // bound to fail copied forward all the same, relocated 1.4x the bytes, 17% fewer ops/s.
    let mut refused = 0;
    while refused < 20 {
        next += 1;
        let before = s.stats();
        match s.put_with(
            &next.to_le_bytes(),
            &vec![next as u8; 2 * MIB as usize],
            opts,
        ) {
            Ok(_) => live.push((next, 2 * MIB as usize)),
            Err(hotstore::Error::StoreFull { .. }) => {
                refused += 1;
                assert!(
                    before.live_bytes >= before.guaranteed_live_bytes.saturating_sub(4 * MIB),
                    "full below the guarantee: {before:?}"
                );
                assert_eq!(
                    s.stats().relocation.forwarded_records,
                    before.relocation.forwarded_records,
                    "a put past the guarantee copied removals forward"
                );
            }
            Err(e) => panic!("put: {e}"),
        }
    }
    // The copied tombstones are sound records: a strict reopen finds every key as it was
    // (a removed key that came back, or a copy with a bad checksum, would fail here).
    let moved = s.stats().relocation.records;
    assert!(moved > 0, "nothing relocated");
    drop(s);
    let report = hotstore::verify_dir(dir.path()).unwrap();
    assert!(report.is_intact(), "{:?}", report.damage);
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(s.stats().entries, live.len() as u64);
    for (k, len) in &live {
        let v = s.get(&k.to_le_bytes()).unwrap().unwrap();
        if *len > 0 {
            assert_eq!(v.len(), *len, "key {k}");
        }
        assert!(v.iter().all(|&b| b == *k as u8), "key {k}");
    }
    assert!(s.recovery_report().torn_tails.is_empty());
    assert!(s.recovery_report().skipped.is_empty());
}
