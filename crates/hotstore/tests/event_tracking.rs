//! Proves events are paid for per use: a store used as a plain key-value store keeps no event state; the first event call builds it exactly (each fragment counted once, even with puts racing the build); READY queues drop stale entries instead of growing; a reopen of a store that used events tracks them at once.

mod common;

use hotstore::testing::FaultMedium;
use hotstore::{Ack, Durability, EventId, EventPolicy, FragmentKey, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

fn frag(event: u64, det: u16) -> [u8; 16] {
    FragmentKey::new(7, event, det, 0).to_bytes()
}

#[test]
fn an_untracked_store_keeps_no_event_state_until_the_first_event_call() {
    let m = FaultMedium::new("untracked");
    let s = common::open_two_lanes(&m);
    for e in (0..200u64).rev() {
        s.put(&frag(e, 0), b"v", Durability::Memory).unwrap();
    }
    let before = s.stats().events;
    assert!(!before.tracked, "puts alone must not start event tracking");
    assert_eq!(
        (before.open, before.ready, before.ready_queued),
        (0, 0, 0),
        "an untracked store holds no event entries or queue entries"
    );
    // The first claim builds the table; recovered-style order: oldest id first.
    let c = s.next_event("c", LEASE).unwrap().expect("200 READY events");
    assert_eq!(c.event(), &EventId::new(7, 0));
    let after = s.stats().events;
    assert!(after.tracked);
    assert_eq!((after.ready, after.claimed), (199, 1));
    c.ack(Ack::Remove).unwrap();
    // From now on puts keep the table current.
    s.put(&frag(1000, 0), b"v", Durability::Memory).unwrap();
    assert_eq!(s.stats().events.ready, 200);
}

#[test]
fn tracking_started_while_puts_run_counts_every_fragment_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path()).lanes(2).open().unwrap();
    const EVENTS: u64 = 20_000;
    const FRAGMENTS: u16 = 4;
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for e in 0..EVENTS {
                for d in 0..FRAGMENTS {
                    s.put(&frag(e, d), b"fragment", Durability::Memory).unwrap();
                }
            }
        });
        // Start tracking somewhere in the middle of the writes (wherever that falls).
        while s.stats().entries < 1000 {
            std::thread::yield_now();
        }
        let _ = s.events(&EventId::new(7, 0), None, 1);
        writer.join().unwrap();
    });
    let listed = s.events(&EventId::new(7, 0), None, usize::MAX);
    assert_eq!(listed.len() as u64, EVENTS);
    for info in &listed {
        assert_eq!(
            (info.fragments, info.bytes),
            (u32::from(FRAGMENTS), 8 * u64::from(FRAGMENTS)),
            "event {}",
            info.id
        );
    }
    assert_eq!(s.stats().events.ready, EVENTS);
}

#[test]
fn ready_queues_drop_stale_entries_in_a_store_nobody_claims_from() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path()).open().unwrap();
    s.set_event_policy(EventPolicy::default()).unwrap();
    // Readout writes and removes events itself; no consumer ever claims.
    let n = 200_000u64;
    for e in 0..n {
        s.put(&frag(e, 0), b"v", Durability::Memory).unwrap();
        if e >= 10 {
            assert!(s.remove(&frag(e - 10, 0), Durability::Memory).unwrap());
        }
    }
    let c = s.stats().events;
    assert_eq!(c.ready, 10);
    // At most READY + max(1024, READY) per shard (32 shards), far below the 200 000 pushed.
    assert!(
        c.ready_queued <= 10 + 32 * 1025,
        "queue grew with stale entries: {}",
        c.ready_queued
    );
}

#[test]
fn a_store_that_used_events_is_tracked_again_after_a_reopen() {
    let m = FaultMedium::new("reopen-tracked");
    {
        let s = common::open_two_lanes(&m);
        s.set_event_policy(EventPolicy::expecting(2)).unwrap();
        s.put(&frag(1, 0), b"a", Durability::Persisted).unwrap();
        s.put(&frag(2, 0), b"a", Durability::Persisted).unwrap();
        s.put(&frag(2, 1), b"b", Durability::Persisted).unwrap();
        s.close().unwrap();
    }
    let s = common::open_two_lanes(&m.crash(None));
    let c = s.stats().events;
    assert!(
        c.tracked,
        "a store with its own policy tracks events from the open"
    );
    assert_eq!((c.open, c.ready), (1, 1));
}

/// Events complete with their first fragment (the default policy) are READY without an entry
/// of their own ("implicit"): they must count, list, seal, claim, vanish with their fragments
/// and survive a policy change exactly as events with an entry do.
#[test]
fn implicit_ready_events_behave_like_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::builder(dir.path()).lanes(2).open().unwrap();
    s.track_events();
    for e in 0..6u64 {
        for d in 0..3u16 {
            s.put(&frag(e, d), b"abc", Durability::Memory).unwrap();
        }
    }
    let c = s.stats().events;
    assert_eq!((c.ready, c.open), (6, 0));
    let info = s.event_info(&EventId::new(7, 2)).expect("listed");
    assert_eq!((info.fragments, info.bytes), (3, 9));
    // Sealing a READY event is allowed (and durable): it gets its entry.
    s.seal(&EventId::new(7, 2), Durability::Memory).unwrap();
    assert!(s.event_info(&EventId::new(7, 2)).unwrap().sealed);
    // Removing every fragment of event 3 removes the event.
    for d in 0..3u16 {
        assert!(s.remove(&frag(3, d), Durability::Memory).unwrap());
    }
    assert_eq!(s.stats().events.ready, 5);
    assert!(s.event_info(&EventId::new(7, 3)).is_none());
    // A policy expecting more fragments leaves READY events READY, with all their fragments.
    s.set_event_policy(EventPolicy::expecting(5)).unwrap();
    s.put(&frag(4, 9), b"late but not acked", Durability::Memory)
        .unwrap();
    let info = s.event_info(&EventId::new(7, 4)).unwrap();
    assert_eq!(
        (info.fragments, info.state),
        (4, hotstore::EventState::Ready)
    );
    // Claims come oldest first, with their fragment counts, and skip the removed event.
    let mut got = Vec::new();
    while let Some(c) = s.next_event("c", LEASE).unwrap() {
        got.push((c.event().clone(), c.fragment_count()));
        c.ack(Ack::Remove).unwrap();
    }
    let want: Vec<(EventId, u32)> = [(0, 3), (1, 3), (2, 3), (4, 4), (5, 3)]
        .into_iter()
        .map(|(e, n)| (EventId::new(7, e), n))
        .collect();
    assert_eq!(got, want);
    let c = s.stats().events;
    assert_eq!((c.ready, c.claimed, c.removed_total), (0, 0, 5));
}

/// Regression for the shard's fragment bound (a new event above it is decided alone without a
/// tree search): fragments arrive out of order, are removed (the largest key too) and come
/// back; each event must be READY once, counted once, and claimed once with all its fragments.
#[test]
fn implicit_events_are_counted_once_whatever_the_arrival_order() {
    use std::collections::BTreeMap;
    let m = FaultMedium::new("bound");
    let s = common::open_two_lanes(&m);
    s.set_event_policy(EventPolicy::default()).unwrap();
    // A fixed pseudo-random walk: event ids up and down, fragments of old events late,
    // removals of the newest key of a shard followed by new fragments of the same event.
    let mut model: BTreeMap<u64, std::collections::BTreeSet<u16>> = BTreeMap::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let event = if step % 3 == 0 {
            x % 64
        } else {
            40 + (x % 400)
        };
        let det = ((x >> 20) % 4) as u16;
        if (x >> 40).is_multiple_of(5) {
            let present = model.get(&event).is_some_and(|d| d.contains(&det));
            assert_eq!(
                s.remove(&frag(event, det), Durability::Memory).unwrap(),
                present
            );
            if let Some(d) = model.get_mut(&event) {
                d.remove(&det);
                if d.is_empty() {
                    model.remove(&event);
                }
            }
        } else {
            s.put(&frag(event, det), b"f", Durability::Memory).unwrap();
            model.entry(event).or_default().insert(det);
        }
    }
    let counts = s.stats().events;
    assert_eq!(
        counts.ready,
        model.len() as u64,
        "READY events counted once each"
    );
    let mut claimed = BTreeMap::new();
    while let Some(c) = s.next_event("c", LEASE).unwrap() {
        let (_, e) = c.event().run_event().unwrap();
        let n = c.fragments().unwrap().len();
        assert_eq!(
            c.fragment_count() as usize,
            n,
            "event {e}: count and keys agree"
        );
        assert!(claimed.insert(e, n).is_none(), "event {e} offered twice");
        c.ack(Ack::Keep).unwrap();
    }
    let expected: BTreeMap<u64, usize> = model.iter().map(|(e, d)| (*e, d.len())).collect();
    assert_eq!(
        claimed, expected,
        "every event claimed once with all its fragments"
    );
}
