//! Proves the basic API contract on real files: put/get/remove/range/reserve survive a reopen,
//! fill-and-drain recycles segments in bounded space, and a capacity gives StoreFull.

use hotstore::{Durability, Error, FragmentKey, KeyLayout, Store, TierSpec};

fn key(e: u64, d: u16) -> [u8; 16] {
    FragmentKey::new(1, e, d, 0).to_bytes()
}

#[test]
fn put_get_remove_range_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::builder(dir.path())
            .segment_size_bytes(1 << 20)
            .open()
            .unwrap();
        for e in 0..1000u64 {
            s.put(
                &key(e, 0),
                &e.to_le_bytes().repeat(1 + (e % 7) as usize),
                Durability::Memory,
            )
            .unwrap();
        }
        s.put(b"name", b"value", Durability::Persisted).unwrap();
        assert!(s.remove(&key(5, 0), Durability::Persisted).unwrap());
        assert!(!s.remove(&key(5, 0), Durability::Persisted).unwrap());
        let mut r = s.reserve(&key(2000, 1), 4).unwrap();
        r.value_mut().copy_from_slice(b"abcd");
        r.commit(Durability::Persisted).unwrap();
        let r = s.reserve(&key(2001, 1), 4).unwrap();
        drop(r); // discarded: never visible
        assert_eq!(s.get(&key(2001, 1)).unwrap(), None);
        let got = s.range(&key(3, 0), Some(&key(8, 0)), 10).unwrap();
        let events: Vec<u64> = got
            .iter()
            .map(|(k, _)| FragmentKey::from_bytes(k).unwrap().event)
            .collect();
        assert_eq!(events, vec![3, 4, 6, 7]);
        assert_eq!(s.range_keys(&key(0, 0), None, 3).len(), 3);
        s.close().unwrap();
    }
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(
        s.recovery_report().segments_scanned,
        0,
        "a clean close leaves summaries"
    );
    for e in 0..1000u64 {
        let want = if e == 5 {
            None
        } else {
            Some(e.to_le_bytes().repeat(1 + (e % 7) as usize))
        };
        assert_eq!(s.get(&key(e, 0)).unwrap(), want, "event {e}");
    }
    assert_eq!(s.get(b"name").unwrap().as_deref(), Some(&b"value"[..]));
    assert_eq!(s.get(&key(2000, 1)).unwrap().as_deref(), Some(&b"abcd"[..]));
    assert_eq!(s.stats().entries, 1000 - 1 + 1 + 1);
}

#[test]
fn reopening_with_another_layout_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    Store::builder(dir.path()).open().unwrap().close().unwrap();
    let other = KeyLayout::parse("run:u32|ch:u16").unwrap();
    match Store::builder(dir.path()).layout(other).open() {
        Err(Error::LayoutMismatch { .. }) => {}
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("opened with another layout"),
    }
}

#[test]
fn fill_and_drain_runs_in_bounded_space() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 256 << 10;
    let s = Store::builder(dir.path())
        .segment_size_bytes(seg)
        .lanes(1)
        .tier(TierSpec::new(".").capacity_bytes(8 * seg as u64))
        .open()
        .unwrap();
    let value = vec![7u8; 10_000];
    // 40 rounds of 20 events x 10 KB: 8 MB written through a 2 MB store.
    for round in 0..40u64 {
        for e in 0..20 {
            s.put_with(
                &key(round * 100 + e, 0),
                &value,
                hotstore::WriteOptions {
                    durability: Durability::Memory,
                    full_wait: Some(std::time::Duration::from_secs(5)),
                },
            )
            .unwrap();
        }
        for e in 0..20 {
            assert!(s
                .remove(&key(round * 100 + e, 0), Durability::Memory)
                .unwrap());
        }
    }
    let st = s.stats();
    assert_eq!(st.entries, 0);
    assert!(
        st.file_bytes <= 8 * seg as u64,
        "files grew past capacity: {}",
        st.file_bytes
    );
}

#[test]
fn full_store_answers_store_full_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 128 << 10;
    let s = Store::builder(dir.path())
        .segment_size_bytes(seg)
        .lanes(1)
        .tier(TierSpec::new(".").capacity_bytes(4 * seg as u64))
        .open()
        .unwrap();
    let value = vec![1u8; 10_000];
    let mut stored = 0u64;
    let err = loop {
        match s.put(&key(stored, 0), &value, Durability::Persisted) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "never full");
    };
    assert!(err.is_full(), "expected StoreFull, got {err}");
    for e in 0..stored {
        assert_eq!(s.get(&key(e, 0)).unwrap().unwrap(), value);
    }
    drop(s);
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(s.stats().entries, stored);
}

#[test]
fn pmem_code_path_on_tmpfs_runs_and_says_it_is_not_power_safe() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    {
        let s = Store::builder(dir.path())
            .tier(TierSpec::new(".").domain(hotstore::Domain::Pmem))
            .segment_size_bytes(1 << 20)
            .open()
            .unwrap();
        let t = &s.stats().tiers[0];
        assert_eq!(t.domain, hotstore::Domain::Pmem);
        // tmpfs refuses MAP_SYNC: the cache-line flush path runs, but nothing survives a power cut.
        assert!(
            !t.survives_power_cut,
            "tmpfs must not be reported power-safe"
        );
        assert!(
            t.power_safety().contains("NOT a power cut"),
            "{}",
            t.power_safety()
        );
        for e in 0..500u64 {
            s.put(&key(e, 1), &vec![e as u8; 3000], Durability::Persisted)
                .unwrap();
        }
        assert!(s.remove(&key(7, 1), Durability::Persisted).unwrap());
    }
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(
        s.stats().tiers[0].domain,
        hotstore::Domain::Pmem,
        "the declared domain is stored"
    );
    assert_eq!(s.get(&key(7, 1)).unwrap(), None);
    assert_eq!(
        s.get(&key(499, 1)).unwrap().unwrap(),
        vec![499u64 as u8; 3000]
    );
    assert_eq!(s.stats().entries, 499);
}

#[test]
fn tmpfs_is_detected_as_volatile_and_said_so() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let s = Store::builder(dir.path()).open().unwrap();
    let t = &s.stats().tiers[0];
    assert_eq!(t.domain, hotstore::Domain::Volatile);
    assert!(!t.survives_power_cut);
    assert!(t.power_safety().contains("NOT a power cut"));
}

#[test]
fn a_value_put_in_parts_reads_back_whole_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let parts: Vec<Vec<u8>> = (0..5u8)
        .map(|i| vec![i + 1; 1000 + 777 * i as usize])
        .collect();
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let whole = parts.concat();
    {
        let store = hotstore::Store::builder(dir.path()).open().unwrap();
        store
            .put_parts_with(b"parts-key", &refs, hotstore::Durability::Persisted.into())
            .unwrap();
        store
            .put_parts_with(
                b"small",
                &[b"ab", b"", b"c"],
                hotstore::Durability::Memory.into(),
            )
            .unwrap();
        assert_eq!(store.get(b"parts-key").unwrap().unwrap(), whole);
        let too_many = vec![&b"x"[..]; hotstore::MAX_VALUE_PARTS + 1];
        assert!(store
            .put_parts_with(b"k", &too_many, hotstore::Durability::Memory.into())
            .is_err());
        store.close().unwrap();
    }
    let store = hotstore::Store::builder(dir.path()).open().unwrap();
    assert_eq!(store.get(b"parts-key").unwrap().unwrap(), whole);
    assert_eq!(store.get(b"small").unwrap().unwrap(), b"abc");
}

/// A put of the most parts there are, as large records on a block tier: buffered (one
/// `pwritev` of key, parts and the zeros through the next header slot) and direct (whole
/// blocks past the page cache, where the file system takes O_DIRECT).
#[test]
fn a_put_of_the_most_parts_is_written_whole_buffered_and_direct() {
    let dir = tempfile::tempdir().unwrap();
    let parts: Vec<Vec<u8>> = (0..hotstore::MAX_VALUE_PARTS)
        .map(|i| vec![i as u8 + 1; 333 + 1013 * i])
        .collect();
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let whole = parts.concat();
    let open = || {
        Store::builder(dir.path())
            .direct_io_min_value_bytes(16 << 10)
            .open()
            .unwrap()
    };
    {
        let store = open();
        // 23 KiB: past the direct threshold; its first three parts (3.4 KiB): bulk, buffered.
        store
            .put_parts_with(b"direct", &refs, hotstore::Durability::Persisted.into())
            .unwrap();
        store
            .put_parts_with(
                b"buffered",
                &refs[..3],
                hotstore::Durability::Persisted.into(),
            )
            .unwrap();
        store
            .put(b"after", b"small", hotstore::Durability::Persisted)
            .unwrap();
        assert_eq!(store.get(b"direct").unwrap().unwrap(), whole);
        store.close().unwrap();
    }
    let store = open();
    assert_eq!(store.get(b"direct").unwrap().unwrap(), whole);
    assert_eq!(
        store.get(b"buffered").unwrap().unwrap(),
        parts[..3].concat()
    );
    assert_eq!(store.get(b"after").unwrap().unwrap(), b"small");
    assert!(store.recovery_report().torn_tails.is_empty());
}

/// Found by a new-user review (nineteenth session): a store open elsewhere was refused
/// without naming the process holding it or what to do.
#[test]
fn a_locked_store_names_the_process_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let _s = Store::builder(dir.path()).open().unwrap();
    let e = Store::builder(dir.path())
        .open()
        .err()
        .expect("opened twice");
    let pid = format!("pid {}", std::process::id());
    assert!(
        matches!(&e, hotstore::Error::Locked(_, h) if h.contains(&pid)),
        "{e}"
    );
    assert!(e.to_string().contains("stop that process"), "{e}");
}

/// Fills a reservation one way and returns the value it then holds.
type Filler<'a> = dyn Fn(&mut hotstore::Reservation<'_>) -> Vec<u8> + 'a;

/// A reservation checksums the bytes `fill` copies as it copies them, and only while fills
/// come in order from the start: any other write (`value_mut`, a fill that overwrites or
/// skips ahead) makes the commit checksum what is in the store instead. Each way of filling
/// is read back (checksums verified) and verified on disk after a close; a stale checksum
/// would show as a `ChecksumMismatch`. Values span the streaming copy's threshold.
#[test]
fn a_reservation_is_checksummed_whatever_way_it_was_filled() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(1 << 20)
        .open()
        .unwrap();
    let mut want = Vec::new();
    for (i, len) in [8usize, 100, 4095, 4096, 10_240, 70_001]
        .into_iter()
        .enumerate()
    {
        let a: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8).collect();
        let b: Vec<u8> = (0..len).map(|j| (j * 13 + 5 + i) as u8).collect();
        let half = len / 2;
        let ways: [(&str, &Filler); 8] = [
            ("whole", &|r| {
                r.fill(0, &a);
                a.clone()
            }),
            ("two in order", &|r| {
                r.fill(0, &a[..half]);
                r.fill(half, &a[half..]);
                a.clone()
            }),
            ("overwritten by a fill", &|r| {
                r.fill(0, &a);
                r.fill(0, &b[..half]);
                [&b[..half], &a[half..]].concat()
            }),
            // Fix (review): no case ended with the running checksum tracked but short of
            // the value, so a commit that took it without checking its length passed. The
            // rest of the value is whatever the segment held: only the part filled is known.
            ("first half only", &|r| {
                r.fill(0, &a[..half]);
                a[..half].to_vec()
            }),
            ("filled again, in order", &|r| {
                r.fill(0, &a);
                r.fill(0, &b[..half]);
                r.fill(half, &b[half..]);
                b.clone()
            }),
            ("second half first", &|r| {
                r.fill(half, &a[half..]);
                r.fill(0, &a[..half]);
                a.clone()
            }),
            ("changed through value_mut after the fills", &|r| {
                r.fill(0, &a);
                r.value_mut()[len - 1] ^= 0xff;
                let mut v = a.clone();
                v[len - 1] ^= 0xff;
                v
            }),
            ("value_mut then fills in order", &|r| {
                r.value_mut().copy_from_slice(&b);
                r.fill(0, &a[..half]);
                [&a[..half], &b[half..]].concat()
            }),
        ];
        for (w, (name, fill)) in ways.iter().enumerate() {
            let k = key(i as u64, w as u16);
            let mut r = s.reserve(&k, len).unwrap();
            let known = fill(&mut r);
            r.commit(Durability::Memory).unwrap();
            let got = match s.get(&k) {
                Ok(Some(got)) => got,
                Ok(None) => panic!("{len} B, {name}: missing"),
                Err(e) => panic!("{len} B, {name}: {e}"),
            };
            assert_eq!(got.len(), len, "{len} B, {name}");
            assert!(got.starts_with(&known), "{len} B, {name}: wrong bytes");
            want.push((k, got));
        }
    }
    // An empty value, with and without an empty fill.
    for (i, fill) in [false, true].into_iter().enumerate() {
        let k = key(100, i as u16);
        let mut r = s.reserve(&k, 0).unwrap();
        if fill {
            r.fill(0, &[]);
        }
        r.commit(Durability::Memory).unwrap();
        assert_eq!(s.get(&k).unwrap().as_deref(), Some(&[][..]));
        want.push((k, Vec::new()));
    }
    s.close().unwrap();
    let report = hotstore::verify_dir(dir.path()).unwrap();
    assert!(report.is_intact(), "{report:?}");
    let s = Store::builder(dir.path()).open().unwrap();
    for (k, v) in &want {
        assert_eq!(s.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}

/// Values from 4 KiB are copied with streaming stores, which are weakly ordered; the copy ends
/// with a store fence (and publishing takes the shard lock, a locked instruction, which orders
/// them too), so a value is whole to a reader on another thread as soon as its record is
/// visible. The fence alone is not what this checks: with it taken out, the lock keeps the
/// test passing. A reader polls the newest key while a writer puts 6000 values of 4-16 KiB on a
/// memory file system, removing old ones so that segments are reused: every value found must
/// read back whole (checksum verified) and equal to what was put.
#[test]
fn a_streamed_value_is_whole_to_another_thread_as_soon_as_it_is_visible() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let base = std::path::Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::tempdir_in(base).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let s = Store::builder(dir.path())
        .segment_size_bytes(1 << 20)
        .open()
        .unwrap();
    let value = |e: u64| -> Vec<u8> {
        let len = 4096 + (e as usize * 1237) % 12_288;
        (0..len).map(|j| (j as u64 * 31 + e) as u8).collect()
    };
    let newest = AtomicU64::new(u64::MAX);
    let reads = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let found = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut found = 0u64;
            while !done.load(Ordering::Acquire) {
                reads.fetch_add(1, Ordering::Release);
                let e = newest.load(Ordering::Acquire);
                if e == u64::MAX {
                    continue;
                }
                // The newest key, or (published meanwhile) a newer one.
                for e in [e, e + 1] {
                    match s.get(&key(e, 0)) {
                        Ok(Some(v)) => {
                            assert!(v == value(e), "event {e}: wrong bytes");
                            found += 1;
                        }
                        Ok(None) => {}
                        Err(err) => panic!("event {e}: {err}"),
                    }
                }
            }
            found
        });
        for e in 0..6000u64 {
            s.put(&key(e, 0), &value(e), Durability::Memory).unwrap();
            newest.store(e, Ordering::Release);
            if e >= 64 {
                s.remove(&key(e - 64, 0), Durability::Memory).unwrap();
            }
            // Reads overlap the writes however the threads are scheduled: every 300 puts the
            // writer lets the reader make one more round.
            if e % 300 == 0 {
                let before = reads.load(Ordering::Acquire);
                // Fix (review): a reader that failed counts no more reads; its panic is
                // reported by the join below instead of the writer waiting forever.
                while reads.load(Ordering::Acquire) < before + 2 && !reader.is_finished() {
                    std::thread::yield_now();
                }
            }
        }
        done.store(true, Ordering::Release);
        reader.join().unwrap()
    });
    assert!(found > 0, "the reader found no value");
}
