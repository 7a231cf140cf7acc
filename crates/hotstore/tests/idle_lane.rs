//! Proves that an active segment whose records are all dead, on a lane no thread writes to any
//! more, is sealed and recycled rather than held until the store closes.

mod common;

use common::open_two_lanes as open;
use hotstore::testing::FaultMedium;
use hotstore::Durability;
use std::time::{Duration, Instant};

#[test]
fn a_dead_active_segment_on_an_idle_lane_is_sealed_and_recycled() {
    let medium = FaultMedium::new("idle-lane");
    let store = open(&medium);
    std::thread::scope(|s| {
        s.spawn(|| {
            store.put(b"only", b"value", Durability::Persisted).unwrap();
            assert!(store.remove(b"only", Durability::Persisted).unwrap());
        });
    });
    assert_eq!(
        store.stats().segments,
        1,
        "the writer's lane segment, all dead"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.stats().segments != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        store.stats().segments,
        0,
        "never recycled: {:?}",
        store.stats()
    );
    // And it is reused: a new write takes a file from the pool, not a new one.
    let files = store.stats().file_bytes;
    store.put(b"next", b"v", Durability::Persisted).unwrap();
    assert_eq!(store.stats().file_bytes, files);
    store.close().unwrap();
    let store = open(&medium.crash(None));
    assert_eq!(store.get(b"only").unwrap(), None);
    assert_eq!(store.get(b"next").unwrap().as_deref(), Some(&b"v"[..]));
}
