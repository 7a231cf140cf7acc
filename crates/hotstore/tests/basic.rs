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
