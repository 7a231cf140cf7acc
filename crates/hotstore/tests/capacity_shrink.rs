//! A capacity lowered at open below the files a tier already holds must not leave a store in
//! which every write, removals included, answers StoreFull for good (found by a crash campaign:
//! `hotstore stress --capacity 192MiB` then `--capacity 128MiB` on a full store: 0 ops,
//! hundreds of StoreFull, also at every later open, since the capacity is stored).
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Durability, Error, FragmentKey, Store, TierSpec};

const SEG: usize = 1 << 20;

fn key(i: u64) -> [u8; 16] {
    FragmentKey::new(7, i, 0, 0).to_bytes()
}

fn open(dir: &std::path::Path, capacity: u64) -> hotstore::Result<Store> {
    Store::builder(dir)
        .segment_size_bytes(SEG)
        .lanes(1)
        .tier(TierSpec::new(".").capacity_bytes(capacity))
        .open()
}

#[test]
fn a_capacity_lowered_below_the_files_held_leaves_removals_working() {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("hotstore-capacity-shrink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let value = vec![0x5a_u8; 100 << 10];
    let mut stored = 0;
    {
        let s = open(&dir, 32 << 20).unwrap();
        loop {
            match s.put(&key(stored), &value, Durability::Memory) {
                Ok(()) => stored += 1,
                Err(e) if e.is_full() => break,
                Err(e) => panic!("{e}"),
            }
        }
        s.close().unwrap();
    }
    assert!(stored > 100, "{stored} values stored");
    match open(&dir, 16 << 20) {
        // Refusing the smaller capacity is an answer too: nothing is wedged.
        Err(Error::InvalidOption {
            name: "capacity", ..
        }) => {}
        Err(e) => panic!("unexpected error at open: {e}"),
        Ok(s) => {
            for i in 0..stored {
                s.remove(&key(i), Durability::Memory).unwrap_or_else(|e| {
                    panic!("removal {i} of {stored} on a store over its capacity: {e}")
                });
            }
            s.close().unwrap();
        }
    }
    // The store was not wedged by the attempt either: it opens with its old capacity and
    // takes removals.
    let s = open(&dir, 32 << 20).unwrap();
    s.remove(&key(0), Durability::Memory).unwrap();
    s.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A capacity lowered below the files a store holds, where most are pooled (free or prepared
/// ahead) and few in use, is accepted, and the pool is given back down to it: the files fit
/// the new capacity at once (a minidaq run with `--capacity 256MiB` on a store holding 20
/// keys and 320 MiB of prepared files was refused by the first version of the check).
#[test]
fn a_capacity_lowered_over_pooled_files_gives_them_back() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path(), 64 << 20).unwrap();
        for i in 0..20 {
            s.put(&key(i), b"small", Durability::Memory).unwrap();
        }
        // Files made, then freed: the pool.
        for i in 0..40u64 {
            s.put(&key(1000 + i), &vec![1u8; 900 << 10], Durability::Memory)
                .unwrap();
            s.remove(&key(1000 + i), Durability::Memory).unwrap();
        }
        s.close().unwrap();
    }
    let s = open(dir.path(), 8 << 20).unwrap();
    assert!(
        s.stats().file_bytes <= 8 << 20,
        "{} bytes of files on an 8 MiB store",
        s.stats().file_bytes
    );
    for i in 0..20 {
        assert_eq!(s.get(&key(i)).unwrap().as_deref(), Some(&b"small"[..]));
    }
    s.close().unwrap();
}
