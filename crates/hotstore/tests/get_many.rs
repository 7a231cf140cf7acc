//! `Store::get_many`: many keys looked up together answer exactly what a `get` of each would,
//! in order, and a batch's values stay whole while writers overwrite the keys and their
//! segments are relocated and recycled (the batch's segments are pinned between its passes).

use hotstore::{Durability, FragmentKey, Store, TierSpec, WriteOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn key(e: u64) -> [u8; 16] {
    FragmentKey::new(1, e, 0, 0).to_bytes()
}

/// Value `version` of key `e`: says whose it is, and is as long as its content says.
fn value(e: u64, version: u64) -> Vec<u8> {
    let len = 16 + ((e * 131 + version * 17) % 6000) as usize;
    let mut v = vec![(e % 251) as u8; len];
    v[..8].copy_from_slice(&e.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v
}

/// True if `v` is some version of key `e`'s value, whole.
fn is_value_of(e: u64, v: &[u8]) -> bool {
    v.len() >= 16
        && v[..8] == e.to_le_bytes()
        && *v == value(e, u64::from_le_bytes(v[8..16].try_into().expect("8 bytes")))
}

#[test]
fn get_many_answers_each_key_as_get_does_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // Small files: a batch of keys spans many segments.
    let s = Store::builder(dir.path())
        .segment_size_bytes(64 << 10)
        .open()
        .unwrap();
    for e in 0..500 {
        s.put(&key(e), &value(e, 0), Durability::Memory).unwrap();
    }
    for e in (0..500).step_by(3) {
        s.put(&key(e), &value(e, 1), Durability::Memory).unwrap();
    }
    for e in (0..500).step_by(7) {
        s.remove(&key(e), Durability::Memory).unwrap();
    }
    assert!(s.stats().segments > 16, "the keys should span many files");

    // Present, removed, never written, repeated, and keys no put accepts (empty, too long),
    // in an order unlike the keys' own, and more than one batch of them.
    let mut keys: Vec<Vec<u8>> = (0..600u64)
        .map(|i| key((i * 7919) % 600).to_vec())
        .collect();
    keys.insert(5, key(3).to_vec());
    keys.insert(40, Vec::new());
    keys.insert(41, vec![b'x'; hotstore::MAX_KEY_LEN + 1]);
    let want: Vec<Option<Vec<u8>>> = keys.iter().map(|k| s.get(k).unwrap()).collect();
    assert!(want.iter().filter(|v| v.is_some()).count() > 400);
    assert_eq!(s.get_many(&keys).unwrap(), want);

    let mut seen = Vec::new();
    s.get_many_with(&keys, |i, got| {
        seen.push((i, got.unwrap().map(<[u8]>::to_vec)))
    });
    assert_eq!(seen, want.into_iter().enumerate().collect::<Vec<_>>());

    assert_eq!(
        s.get_many::<&[u8]>(&[]).unwrap(),
        Vec::<Option<Vec<u8>>>::new()
    );
}

#[test]
fn get_many_values_stay_whole_while_writers_overwrite_and_files_recycle() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 128 << 10;
    let s = Store::builder(dir.path())
        .segment_size_bytes(seg)
        .lanes(2)
        .tier(TierSpec::new(".").capacity_bytes(16 * seg as u64))
        .open()
        .unwrap();
    const KEYS: u64 = 300;
    for e in 0..KEYS {
        s.put(&key(e), &value(e, 0), Durability::Memory).unwrap();
    }
    let done = AtomicBool::new(false);
    let keys: Vec<[u8; 16]> = (0..KEYS).rev().map(key).collect();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            // About 36 MB through a 2 MiB store: its files are recycled many times over.
            let options = WriteOptions {
                durability: Durability::Memory,
                full_wait: Some(Duration::from_secs(30)),
            };
            for version in 1..=40 {
                for e in 0..KEYS {
                    s.put_with(&key(e), &value(e, version), options).unwrap();
                }
            }
            done.store(true, Ordering::Release);
        });
        let mut batches = 0u64;
        while !done.load(Ordering::Acquire) || batches == 0 {
            s.get_many_with(&keys, |i, got| {
                // The rest of the batch is read after this: give the writer time to
                // overwrite its records and recycle their files, as a pin must prevent.
                std::thread::sleep(Duration::from_millis(3));
                let e = KEYS - 1 - i as u64;
                let v = got.unwrap_or_else(|err| panic!("key {e}: {err}"));
                let v = v.unwrap_or_else(|| panic!("key {e} missing"));
                assert!(is_value_of(e, v), "key {e} read {} torn bytes", v.len());
            });
            batches += 1;
        }
        writer.join().unwrap();
    });
    let st = s.stats();
    assert!(st.file_bytes <= 16 * seg as u64, "files {}", st.file_bytes);
    for e in 0..KEYS {
        assert_eq!(s.get(&key(e)).unwrap().unwrap(), value(e, 40));
    }
}
