//! A value held in place (`Store::get_ref`, `Reservation::commit_ref`) keeps its bytes: the
//! segment under it is not recycled while the `ValueRef` lives, however the record dies
//! (overwrite, removal, compaction), and is recycled once it is dropped.

use hotstore::{Durability, EventPolicy, FragmentKey, Store};
use std::sync::{mpsc, Arc};
use std::time::Duration;

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
        Err(hotstore::Error::Locked(..))
    ));
    drop(held);
    let s = Store::builder(dir.path()).open().unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"value"[..]));
}

/// A claimed event's fragments are read with their segments pinned, after the index lock is
/// released: the callback may call the store (it ran under the shard's read lock, so a put
/// from it to the same shard waited forever), and a fragment's bytes stay as they were while
/// the callback runs, however its record dies meanwhile.
#[test]
fn an_events_fragments_stay_in_place_while_the_callback_uses_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(
        Store::builder(dir.path())
            .segment_size_bytes(64 << 10)
            .lanes(1)
            .open()
            .unwrap(),
    );
    s.set_event_policy(EventPolicy::expecting(2)).unwrap();
    let key = |det: u16| FragmentKey::new(1, 5, det, 0).to_bytes();
    let want = [pattern(3, 20 << 10), pattern(9, 20 << 10)];
    for (det, v) in want.iter().enumerate() {
        s.put(&key(det as u16), v, Durability::Memory).unwrap();
    }
    // In a thread, so that a deadlock fails the test instead of hanging the suite.
    let (done, result) = mpsc::channel();
    let store = s.clone();
    std::thread::spawn(move || {
        let claim = store
            .next_event("c", Duration::from_secs(600))
            .unwrap()
            .expect("the event is READY");
        let mut seen = Vec::new();
        let walked = claim.for_each_fragment(|_, v| {
            if seen.is_empty() {
                // Kill both records under the callback, then churn: without a pin, their
                // segment would be recycled and its file reused.
                for det in 0..2 {
                    store.put(&key(det), b"new", Durability::Memory).unwrap();
                    store.remove(&key(det), Durability::Memory).unwrap();
                }
                churn(&store);
            }
            seen.push(v.to_vec());
        });
        let _ = done.send(walked.map(|()| seen));
    });
    let seen = result
        .recv_timeout(Duration::from_secs(300))
        .expect("for_each_fragment's callback could not call the store (deadlock)")
        .expect("reading the fragments failed: their segment was recycled under the read?");
    assert!(
        seen == want,
        "a fragment's bytes changed under the callback"
    );
}
