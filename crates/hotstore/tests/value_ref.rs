//! A value held in place (`Store::get_ref`, `Reservation::commit_ref`) keeps its bytes: the
//! segment under it is not recycled while the `ValueRef` lives, however the record dies
//! (overwrite, removal, compaction), and is recycled once it is dropped.

use hotstore::{Durability, Store};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Overwrites and removes enough to kill every record of the first segments, then compacts:
/// without a pin, the segment of `a` is recycled and its file reused.
fn churn(s: &Store) {
    for round in 0..4u8 {
        for k in 0..64u32 {
            let key = format!("churn-{k}");
            s.put(key.as_bytes(), &pattern(round, 8 << 10), Durability::Memory)
                .expect("churn put");
        }
    }
    for k in 0..64u32 {
        s.remove(format!("churn-{k}").as_bytes(), Durability::Memory)
            .expect("churn remove");
    }
    s.compact(|_, _| {}).expect("compact");
}

#[test]
fn get_ref_outlives_overwrite_remove_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(64 << 10)
        .lanes(1)
        .open()
        .unwrap();
    let want = pattern(7, 20 << 10);
    s.put(b"a", &want, Durability::Memory).unwrap();
    let held = s.get_ref(b"a").unwrap().unwrap();
    assert_eq!(&*held, &want[..]);
    assert!(s.get_ref(b"missing").unwrap().is_none());
    s.put(b"a", b"new", Durability::Memory).unwrap();
    s.remove(b"a", Durability::Memory).unwrap();
    churn(&s);
    let pinned_segments = s.stats().segments;
    assert_eq!(&*held, &want[..], "a held value changed under its reader");
    drop(held);
    // The reclaim the drop asked for runs before the compaction (one job queue, in order).
    s.compact(|_, _| {}).unwrap();
    assert!(
        s.stats().segments < pinned_segments,
        "the segment was not recycled after its reader left: {} -> {}",
        pinned_segments,
        s.stats().segments
    );
    s.close().unwrap();
}

#[test]
fn commit_ref_holds_the_committed_value() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path())
        .segment_size_bytes(64 << 10)
        .lanes(1)
        .open()
        .unwrap();
    let want = pattern(3, 10 << 10);
    let mut r = s.reserve(b"r", want.len()).unwrap();
    r.value_mut().copy_from_slice(&want);
    let held = r.commit_ref(Durability::Persisted).unwrap();
    assert_eq!(&*held, &want[..]);
    assert_eq!(s.get(b"r").unwrap().as_deref(), Some(&want[..]));
    s.remove(b"r", Durability::Memory).unwrap();
    churn(&s);
    assert_eq!(&*held, &want[..]);
    assert_eq!(held.len(), want.len());
    drop(held);
    s.close().unwrap();
}

#[test]
fn a_value_ref_outlives_the_store_handle() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path()).open().unwrap();
    s.put(b"k", b"value", Durability::Persisted).unwrap();
    let held = s.get_ref(b"k").unwrap().unwrap();
    s.close().unwrap();
    assert_eq!(&*held, b"value");
    // The directory stays locked while the value is held, so nothing can reuse its file.
    assert!(matches!(
        Store::builder(dir.path()).open(),
        Err(hotstore::Error::Locked(_))
    ));
    drop(held);
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"value"[..]));
}
