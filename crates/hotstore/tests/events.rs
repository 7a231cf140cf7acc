//! Proves the event lifecycle: READY by count, seal or timeout; exclusive claims with leases; durable Remove/Keep acknowledgements that survive kill -9 and power cuts; late fragments refused; queries and counts.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use hotstore::testing::FaultMedium;
use hotstore::{Ack, Durability, Error, EventId, EventPolicy, EventState, FragmentKey, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(30);

fn frag(run: u32, event: u64, det: u16) -> Vec<u8> {
    FragmentKey::new(run, event, det, 0).to_bytes().to_vec()
}

fn value(run: u32, event: u64, det: u16) -> Vec<u8> {
    format!("r{run}e{event}d{det}")
        .repeat(1 + det as usize)
        .into_bytes()
}

fn put_event(store: &Store, run: u32, event: u64, dets: u16, d: Durability) {
    for det in 0..dets {
        store
            .put(&frag(run, event, det), &value(run, event, det), d)
            .unwrap();
    }
}

fn store_expecting(medium: &Arc<FaultMedium>, n: u32) -> Store {
    let s = common::open_two_lanes(medium);
    s.set_event_policy(EventPolicy::expecting(n)).unwrap();
    s
}

#[test]
fn event_is_ready_when_complete_and_claims_are_exclusive() {
    let m = FaultMedium::new("events");
    let s = store_expecting(&m, 3);
    put_event(&s, 1, 10, 2, Durability::Memory);
    assert_eq!(
        s.event_info(&EventId::new(1, 10)).unwrap().state,
        EventState::Open
    );
    assert!(
        s.next_event("a", LEASE).unwrap().is_none(),
        "2 of 3 fragments"
    );
    put_event(&s, 1, 10, 3, Durability::Memory); // overwrites 0,1; adds 2
    let info = s.event_info(&EventId::new(1, 10)).unwrap();
    assert_eq!((info.state, info.fragments), (EventState::Ready, 3));
    let claim = s.next_event("a", LEASE).unwrap().expect("ready");
    assert_eq!(claim.event(), &EventId::new(1, 10));
    assert_eq!(claim.fragment_count(), 3);
    assert!(s.next_event("b", LEASE).unwrap().is_none(), "exclusive");
    let frags = claim.fragments().unwrap();
    assert_eq!(frags.len(), 3);
    for (i, (k, v)) in frags.iter().enumerate() {
        assert_eq!(k, &frag(1, 10, i as u16));
        assert_eq!(v, &value(1, 10, i as u16));
    }
    assert_eq!(s.event(&EventId::new(1, 10)).unwrap(), frags);
    let c = s.stats().events;
    assert_eq!((c.open, c.ready, c.claimed), (0, 0, 1));
    claim.ack(Ack::Remove).unwrap();
    assert!(s.event(&EventId::new(1, 10)).unwrap().is_empty());
    assert_eq!(s.stats().entries, 0);
    assert_eq!(s.stats().events.removed_total, 1);
    // A late fragment is refused, counted, and not stored.
    let late = s.put(&frag(1, 10, 7), b"late", Durability::Memory);
    assert!(matches!(late, Err(Error::LateFragment { .. })), "{late:?}");
    assert_eq!(s.stats().events.late_fragments_total, 1);
    assert!(!s.contains(&frag(1, 10, 7)));
}

#[test]
fn oldest_ready_first_and_released_events_keep_their_place() {
    let m = FaultMedium::new("order");
    let s = store_expecting(&m, 1);
    for e in [5u64, 3, 9] {
        put_event(&s, 1, e, 1, Durability::Memory);
    }
    let first = s.next_event("a", LEASE).unwrap().unwrap();
    assert_eq!(
        first.event(),
        &EventId::new(1, 5),
        "ready order, not id order"
    );
    drop(first); // a dropped claim goes back to READY, in its old place
    let again = s.next_event("a", LEASE).unwrap().unwrap();
    assert_eq!(again.event(), &EventId::new(1, 5));
    let second = s.next_event("b", LEASE).unwrap().unwrap();
    assert_eq!(second.event(), &EventId::new(1, 3));
    again.release().unwrap();
    assert_eq!(
        s.next_event("c", LEASE).unwrap().unwrap().event(),
        &EventId::new(1, 5)
    );
    assert_eq!(s.stats().events.released_total, 3);
}

/// READY numbers are the completing fragments' lsns, so with 4 fragments per event they step
/// by 4: the clock must still mark them (it once marked only numbers of one residue).
#[test]
fn the_oldest_ready_age_is_known_when_ready_numbers_skip() {
    let m = FaultMedium::new("events-clock");
    let s = store_expecting(&m, 4);
    assert_eq!(s.oldest_ready_age(), None, "nothing READY");
    put_event(&s, 1, 0, 4, Durability::Memory);
    let waited = Duration::from_millis(30);
    std::thread::sleep(waited);
    for e in 1..3000 {
        put_event(&s, 1, e, 4, Durability::Memory);
    }
    let age = s.oldest_ready_age().expect("events are READY");
    assert!(
        age >= waited,
        "the oldest waited {waited:?}, reported {age:?}"
    );
    let claim = s.next_event("c", LEASE).unwrap().unwrap();
    assert_eq!(claim.event(), &EventId::new(1, 0), "oldest first");
}

#[test]
fn expired_lease_goes_back_to_ready_and_the_old_token_is_refused() {
    let m = FaultMedium::new("lease");
    let s = store_expecting(&m, 1);
    put_event(&s, 2, 1, 1, Durability::Memory);
    let token = s
        .next_event("slow", Duration::from_millis(30))
        .unwrap()
        .unwrap()
        .into_token();
    assert!(s.next_event("fast", LEASE).unwrap().is_none());
    std::thread::sleep(Duration::from_millis(60));
    let claim = s.next_event("fast", LEASE).unwrap().expect("lease expired");
    assert_eq!(claim.event(), &EventId::new(2, 1));
    let stale = s.ack(&token, Ack::Remove, Durability::Persisted);
    assert!(matches!(stale, Err(Error::ClaimLost { .. })), "{stale:?}");
    assert_eq!(s.event(&EventId::new(2, 1)).unwrap().len(), 1, "untouched");
    assert_eq!(s.stats().events.leases_expired_total, 1);
    // The token's text form round-trips (the server hands it out).
    let t = claim.token().clone();
    assert_eq!(t.to_string().parse::<hotstore::ClaimToken>().unwrap(), t);
    claim.ack(Ack::Keep).unwrap();
    assert!(matches!(s.release(&t), Err(Error::EventAcknowledged(_))));
}

/// Fix (issue 16): an acknowledgement repeated after it took effect (a client retrying a
/// command whose reply a crash lost) answered ClaimLost, which promises the event back; it
/// never comes. It now answers EventAcknowledged, before and after a reopen, for REMOVE and
/// KEEP; a stale claim on an event that was not acknowledged is still ClaimLost.
#[test]
fn a_repeated_acknowledgement_says_the_event_is_done_even_after_a_reopen() {
    let m = FaultMedium::new("ack-twice");
    let s = store_expecting(&m, 1);
    for n in 1..=3 {
        put_event(&s, 4, n, 1, Durability::Persisted);
    }
    let removed = s.next_event("c", LEASE).unwrap().unwrap().into_token();
    let kept = s.next_event("c", LEASE).unwrap().unwrap().into_token();
    let released = s.next_event("c", LEASE).unwrap().unwrap().into_token();
    s.ack(&removed, Ack::Remove, Durability::Persisted).unwrap();
    s.ack(&kept, Ack::Keep, Durability::Persisted).unwrap();
    s.release(&released).unwrap();
    let done = |r: hotstore::Result<()>| matches!(r, Err(Error::EventAcknowledged(_)));
    assert!(done(s.ack(&removed, Ack::Remove, Durability::Persisted)));
    assert!(done(s.ack(&kept, Ack::Keep, Durability::Persisted)));
    assert!(done(s.release(&removed)));
    let stale = s.ack(&released, Ack::Remove, Durability::Persisted);
    assert!(matches!(stale, Err(Error::ClaimLost { .. })), "{stale:?}");
    drop(s);
    let s = store_expecting(&m.process_crash(), 1);
    assert!(done(s.ack(&removed, Ack::Remove, Durability::Persisted)));
    assert!(done(s.ack(&kept, Ack::Remove, Durability::Persisted)));
    let stale = s.ack(&released, Ack::Remove, Durability::Persisted);
    assert!(matches!(stale, Err(Error::ClaimLost { .. })), "{stale:?}");
}

/// Fix (issue 18, node loss): claim numbers started at 1 at every open, so after a crash the
/// first claim of an event got the very token its holder before the crash still had, and that
/// stale holder could acknowledge (or release) the new holder's claim.
#[test]
fn a_token_from_before_a_crash_does_not_name_a_claim_made_after_it() {
    let m = FaultMedium::new("stale-token");
    let s = store_expecting(&m, 1);
    put_event(&s, 5, 1, 1, Durability::Persisted);
    let before = s.next_event("old", LEASE).unwrap().unwrap().into_token();
    drop(s);
    let s = store_expecting(&m.process_crash(), 1);
    let after = s.next_event("new", LEASE).unwrap().unwrap().into_token();
    assert_eq!(after.event, before.event);
    assert_ne!(after.to_string(), before.to_string());
    let stale = s.ack(&before, Ack::Remove, Durability::Persisted);
    assert!(matches!(stale, Err(Error::ClaimLost { .. })), "{stale:?}");
    s.ack(&after, Ack::Remove, Durability::Persisted).unwrap();
}

#[test]
fn a_claim_past_its_lease_cannot_be_acknowledged_even_if_nothing_else_ran() {
    // Found by the client tests: expiry was only noticed by the next claim or listing.
    let m = FaultMedium::new("lease-ack");
    let s = store_expecting(&m, 1);
    put_event(&s, 2, 1, 1, Durability::Memory);
    put_event(&s, 2, 2, 1, Durability::Memory);
    let t1 = s
        .next_event("slow", Duration::from_millis(20))
        .unwrap()
        .unwrap()
        .into_token();
    let t2 = s
        .next_event("slow", Duration::from_millis(20))
        .unwrap()
        .unwrap()
        .into_token();
    std::thread::sleep(Duration::from_millis(50));
    let late_ack = s.ack(&t1, Ack::Remove, Durability::Memory);
    assert!(
        matches!(late_ack, Err(Error::ClaimLost { .. })),
        "{late_ack:?}"
    );
    assert!(matches!(s.release(&t2), Err(Error::ClaimLost { .. })));
    assert_eq!(
        s.event(&EventId::new(2, 1)).unwrap().len(),
        1,
        "not removed"
    );
    assert_eq!(s.stats().events.ready, 2);
}

#[test]
fn seal_and_timeout_make_events_ready() {
    let m = FaultMedium::new("seal");
    let s = common::open_two_lanes(&m);
    s.set_event_policy(EventPolicy::expecting(4)).unwrap();
    s.set_run_policy(
        9,
        Some(EventPolicy::expecting(4).with_timeout(Duration::from_millis(40))),
    )
    .unwrap();
    put_event(&s, 1, 1, 2, Durability::Memory);
    put_event(&s, 9, 1, 2, Durability::Memory);
    assert!(matches!(
        s.seal(&EventId::new(1, 99), Durability::Persisted),
        Err(Error::NoSuchEvent(_))
    ));
    s.seal(&EventId::new(1, 1), Durability::Persisted).unwrap();
    s.seal(&EventId::new(1, 1), Durability::Persisted).unwrap(); // no-op
    let sealed = s.next_event("a", LEASE).unwrap().unwrap();
    assert_eq!(sealed.event(), &EventId::new(1, 1));
    assert!(!sealed.incomplete());
    // Run 9 times out: a blocking claim waits for it.
    let t0 = Instant::now();
    let timed = s
        .next_event_wait("a", LEASE, Duration::from_secs(5))
        .unwrap()
        .expect("timed out into READY");
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!(timed.event(), &EventId::new(9, 1));
    assert!(timed.incomplete());
    assert_eq!(s.stats().events.timed_out_total, 1);
    assert_eq!(s.stats().events.incomplete, 1);
    timed.ack(Ack::Remove).unwrap();
    assert_eq!(s.stats().events.incomplete, 0);
    // The policy is stored: a reopen sees it.
    drop(sealed);
    s.close().unwrap();
    let s = common::open_two_lanes(&m.process_crash());
    assert_eq!(s.event_policy(Some(9)).incomplete_timeout_ms, 40);
    assert_eq!(s.event_policy(Some(1)).expected_fragments, 4);
}

#[test]
fn blocking_claim_wakes_when_a_producer_completes_an_event() {
    let m = FaultMedium::new("block");
    let s = Arc::new(store_expecting(&m, 2));
    let producer = {
        let s = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            put_event(&s, 3, 3, 2, Durability::Memory);
        })
    };
    let claim = s
        .next_event_wait("c", LEASE, Duration::from_secs(10))
        .unwrap()
        .expect("woken by the producer");
    assert_eq!(claim.event(), &EventId::new(3, 3));
    producer.join().unwrap();
    assert!(s
        .next_event_wait("c", LEASE, Duration::from_millis(20))
        .unwrap()
        .is_none());
}

#[test]
fn range_query_lists_states_counts_and_bytes() {
    let m = FaultMedium::new("range");
    let s = store_expecting(&m, 2);
    for e in 0..10u64 {
        put_event(&s, 4, e, if e % 2 == 0 { 2 } else { 1 }, Durability::Memory);
    }
    put_event(&s, 5, 0, 2, Durability::Memory);
    let c = s.next_event("x", LEASE).unwrap().unwrap();
    assert_eq!(c.event(), &EventId::new(4, 0));
    let list = s.events_in_run(4, 0, None, 100);
    assert_eq!(list.len(), 10, "run 5 is outside");
    assert_eq!(list[0].state, EventState::Claimed);
    assert_eq!(list[0].claimed_by.as_deref(), Some("x"));
    assert_eq!(list[1].state, EventState::Open);
    assert_eq!(list[2].state, EventState::Ready);
    let bytes = (value(4, 2, 0).len() + value(4, 2, 1).len()) as u64;
    assert_eq!((list[2].fragments, list[2].bytes), (2, bytes));
    let page = s.events_in_run(4, 3, Some(8), 2);
    let ids: Vec<_> = page.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids, vec![EventId::new(4, 3), EventId::new(4, 4)]);
    let counts = s.stats().events;
    assert_eq!((counts.open, counts.ready, counts.claimed), (5, 5, 1));
}

#[test]
fn acknowledgements_survive_kill9_and_power_cut_and_unacked_events_come_back() {
    for power_cut in [false, true] {
        let m = FaultMedium::new("crash");
        let s = store_expecting(&m, 2);
        for e in 0..6u64 {
            put_event(&s, 1, e, 2, Durability::Persisted);
        }
        let mut acked = Vec::new();
        for i in 0..4 {
            let c = s.next_event("c", LEASE).unwrap().unwrap();
            let ev = c.event().clone();
            let how = if i % 2 == 0 { Ack::Remove } else { Ack::Keep };
            c.ack(how).unwrap();
            acked.push((ev, how));
        }
        let claimed_not_acked = s.next_event("c", LEASE).unwrap().unwrap().into_token();
        let image = if power_cut {
            m.crash(None)
        } else {
            m.process_crash()
        };
        std::mem::forget(s); // the process died: no clean close
        let s = common::open_two_lanes(&image);
        for (ev, how) in &acked {
            let frags = s.event(ev).unwrap();
            match how {
                Ack::Remove => assert!(frags.is_empty(), "removed {ev} came back"),
                Ack::Keep => {
                    assert_eq!(frags.len(), 2, "kept {ev} lost");
                    assert_eq!(s.event_info(ev).unwrap().state, EventState::Kept);
                }
            }
            let late = s.put(
                &frag(1, ev.run_event().unwrap().1, 5),
                b"x",
                Durability::Memory,
            );
            assert!(matches!(late, Err(Error::LateFragment { .. })), "{late:?}");
        }
        // Every event not acknowledged is offered again, the claimed one included.
        let mut offered = Vec::new();
        while let Some(c) = s.next_event("after", LEASE).unwrap() {
            offered.push(c.event().clone());
            c.ack(Ack::Remove).unwrap();
        }
        offered.sort();
        let mut expected: Vec<EventId> = (0..6u64)
            .map(|e| EventId::new(1, e))
            .filter(|e| !acked.iter().any(|(a, _)| a == e))
            .collect();
        expected.sort();
        assert_eq!(offered, expected, "power_cut={power_cut}");
        assert!(expected.contains(&claimed_not_acked.event));
        assert_eq!(s.stats().events.kept, 2);
    }
}

#[test]
fn removal_is_one_atomic_record_under_torn_power_cuts() {
    // An event of many fragments spread over segments; its removal is one record, so after
    // any power cut the event is either whole or gone, never partial.
    for seed in 0..20u64 {
        let m = FaultMedium::new("atomic");
        let s = store_expecting(&m, 40);
        put_event(&s, 1, 1, 40, Durability::Persisted);
        let c = s.next_event("c", LEASE).unwrap().unwrap();
        c.ack_with(Ack::Remove, Durability::Memory).unwrap();
        let image = m.crash(Some(seed));
        std::mem::forget(s);
        let s = common::open_two_lanes(&image);
        let n = s.event(&EventId::new(1, 1)).unwrap().len();
        assert!(n == 0 || n == 40, "seed {seed}: {n} of 40 fragments");
    }
}

#[test]
fn acknowledged_set_outlives_recycled_removal_records() {
    // Small segments: removal records are recycled with the fragments they removed; the
    // acknowledged set persisted before that still refuses late fragments after a reopen.
    let m = FaultMedium::new("recycle");
    let s = store_expecting(&m, 1);
    let big = vec![7u8; 20_000];
    for e in 0..400u64 {
        s.put(&frag(1, e, 0), &big, Durability::Memory).unwrap();
        s.next_event("c", LEASE)
            .unwrap()
            .unwrap()
            .ack_with(Ack::Remove, Durability::Memory)
            .unwrap();
    }
    s.flush().unwrap();
    // Let maintenance recycle the dead segments.
    let t0 = Instant::now();
    // A deadline, not a timing assumption: it only ends the wait if recycling never happens.
    while s.stats().segments > 4 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(s.stats().segments <= 4, "segments were not recycled");
    assert_eq!(s.stats().events.acked_intervals, 1);
    s.close().unwrap();
    let s = common::open_two_lanes(&m.crash(None));
    for e in [0u64, 17, 399] {
        let late = s.put(&frag(1, e, 1), b"late", Durability::Memory);
        assert!(
            matches!(late, Err(Error::LateFragment { .. })),
            "event {e}: {late:?}"
        );
    }
    s.put(&frag(1, 400, 0), b"new", Durability::Memory).unwrap();
    assert_eq!(s.stats().events.ready, 1);
}

/// An event that comes back unacknowledged `max_deliveries` times (its consumers crash on
/// it, or let the lease run out) is parked POISONED instead of offered forever: counted,
/// listed, not offered by next_event, claimable by its id, and acknowledged as any claim.
#[test]
fn an_event_delivered_too_often_is_parked_as_poisoned() {
    let m = FaultMedium::new("poison");
    let s = store_expecting(&m, 1);
    s.set_max_deliveries(2).unwrap();
    put_event(&s, 5, 1, 1, Durability::Memory);
    put_event(&s, 5, 2, 1, Durability::Memory);
    let id = EventId::new(5, 1);
    // Delivery 1: released. Delivery 2: its lease runs out.
    let c = s.next_event("crashy", LEASE).unwrap().unwrap();
    assert_eq!(c.event(), &id);
    c.release().unwrap();
    let c = s
        .next_event("crashy", Duration::from_millis(20))
        .unwrap()
        .unwrap();
    assert_eq!(c.event(), &id, "a released event keeps its place");
    let token = c.into_token();
    assert_eq!(s.pending(10)[0].deliveries, 2);
    std::thread::sleep(Duration::from_millis(50));
    // Parked: the next claim is the other event, then nothing.
    let other = s.next_event("ok", LEASE).unwrap().unwrap();
    assert_eq!(other.event(), &EventId::new(5, 2));
    assert!(s.next_event("ok", LEASE).unwrap().is_none());
    assert_eq!(s.event_info(&id).unwrap().state, EventState::Poisoned);
    assert_eq!(s.stats().events.poisoned, 1);
    assert!(matches!(
        s.ack(&token, Ack::Remove, Durability::Memory),
        Err(Error::ClaimLost { .. })
    ));
    // Only a poisoned event is claimed by its id.
    assert!(matches!(
        s.claim_event(&EventId::new(5, 2), "x", LEASE),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        s.claim_event(&EventId::new(5, 9), "x", LEASE),
        Err(Error::NoSuchEvent(_))
    ));
    let explicit = s.claim_event(&id, "operator", LEASE).unwrap();
    assert_eq!(s.stats().events.poisoned, 0);
    assert_eq!(
        s.pending(10)
            .iter()
            .find(|p| p.token.event == id)
            .unwrap()
            .deliveries,
        3
    );
    assert_eq!(explicit.fragments().unwrap().len(), 1);
    explicit.ack(Ack::Remove).unwrap();
    other.ack(Ack::Remove).unwrap();
    assert!(s.event_info(&id).is_none());
    assert_eq!(s.stats().events.poisoned, 0);
}

/// An event is read a batch of fragments at a time (the index lock is released between
/// batches): an event of more fragments than a batch still yields each once, in key order.
#[test]
fn an_event_of_many_fragments_is_read_whole_and_in_order() {
    let m = FaultMedium::new("many-fragments");
    let s = store_expecting(&m, 40);
    put_event(&s, 2, 7, 40, Durability::Memory);
    put_event(&s, 2, 8, 3, Durability::Memory); // the next event, in the same key range's end
    let claim = s.next_event("a", LEASE).unwrap().expect("40 of 40: ready");
    let mut seen = Vec::new();
    claim
        .for_each_fragment(|k, v| seen.push((k.to_vec(), v.to_vec())))
        .unwrap();
    let want: Vec<_> = (0..40).map(|d| (frag(2, 7, d), value(2, 7, d))).collect();
    assert!(
        seen == want,
        "{} fragments read, want 40 in key order",
        seen.len()
    );
    assert!(claim.fragments().unwrap() == want);
}

/// Fix (found in review): `Duration::MAX` as a lease or a wait ("forever") overflowed
/// `Instant` and panicked after the claim had taken the event off its READY queue: the event
/// was lost until a reopen. A huge incomplete-event timeout panicked the put the same way.
#[test]
fn forever_as_a_lease_a_wait_or_a_timeout_panics_nothing_and_loses_nothing() {
    let m = FaultMedium::new("forever");
    let s = store_expecting(&m, 1);
    put_event(&s, 1, 1, 1, Durability::Memory);
    let c = s
        .next_event("a", Duration::MAX)
        .unwrap()
        .expect("READY event");
    assert_eq!(c.event(), &EventId::new(1, 1));
    assert_eq!(
        s.event_info(&EventId::new(1, 1)).unwrap().state,
        EventState::Claimed
    );
    c.ack(Ack::Remove).unwrap();
    put_event(&s, 1, 2, 1, Durability::Memory);
    let c = s
        .next_event_wait("a", Duration::MAX, Duration::MAX)
        .unwrap()
        .expect("READY event");
    assert_eq!(c.event(), &EventId::new(1, 2));
    c.ack(Ack::Remove).unwrap();
    let mut policy = EventPolicy::expecting(2);
    policy.incomplete_timeout_ms = u64::MAX;
    s.set_event_policy(policy).unwrap();
    put_event(&s, 1, 3, 1, Durability::Memory);
    assert_eq!(
        s.event_info(&EventId::new(1, 3)).unwrap().state,
        EventState::Open
    );
    let r = s
        .reserve_with(b"plain key", 10, Some(Duration::MAX))
        .unwrap();
    r.commit(Durability::Memory).unwrap();
}

/// Fix (found in review): deliveries are counted in a byte, so a maximum over 255 was never
/// reached and nothing was parked; it is refused now.
#[test]
fn a_max_deliveries_the_count_cannot_reach_is_refused() {
    let m = FaultMedium::new("maxdel");
    let s = store_expecting(&m, 1);
    let e = s
        .set_max_deliveries(hotstore::MAX_DELIVERIES + 1)
        .unwrap_err();
    assert!(matches!(e, hotstore::Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("255"), "{e}");
    s.set_max_deliveries(hotstore::MAX_DELIVERIES).unwrap();
}

/// Fix (found in review): the acknowledged set had no limit, and every gap in the
/// acknowledged ids costs an interval. Past [`hotstore::MAX_ACKED_INTERVALS`] the oldest
/// intervals are forgotten and counted; recent acknowledgements still refuse late fragments.
#[test]
fn the_acknowledged_set_forgets_its_oldest_intervals_past_its_limit() {
    let m = FaultMedium::new("events-acked-limit");
    let s = common::open_two_lanes(&m);
    let events = hotstore::MAX_ACKED_INTERVALS as u64 + 10;
    // Even ids only: no two acknowledged ids are adjacent, one interval each.
    for chunk in (0..events).collect::<Vec<_>>().chunks(1000) {
        for &e in chunk {
            put_event(&s, 1, 2 * e, 1, Durability::Memory);
        }
        let tokens: Vec<_> = chunk
            .iter()
            .map(|_| s.next_event("c", LEASE).unwrap().unwrap().into_token())
            .collect();
        let acked = s.ack_many(&tokens, Ack::Remove, Durability::Memory);
        assert!(acked.iter().all(|r| r.is_ok()));
    }
    let counts = s.stats().events;
    assert!(
        counts.acked_intervals <= hotstore::MAX_ACKED_INTERVALS as u64,
        "{counts:?}"
    );
    assert_eq!(
        counts.acked_intervals + counts.acked_forgotten_total,
        events,
        "{counts:?}"
    );
    let late = s.put(&frag(1, 2 * (events - 1), 1), b"late", Durability::Memory);
    assert!(matches!(late, Err(Error::LateFragment { .. })), "{late:?}");
    // The oldest was forgotten: its late fragment starts a new event.
    s.put(&frag(1, 0, 1), b"late", Durability::Memory).unwrap();
    let c = s.next_event("c", LEASE).unwrap().unwrap();
    assert_eq!(c.event(), &EventId::new(1, 0));
}

/// Fix (found in review): run policies had no limit (each change rewrites the whole file).
#[test]
fn run_policies_are_limited_and_a_refused_one_changes_nothing() {
    let m = FaultMedium::new("events-run-limit");
    let s = common::open_two_lanes(&m);
    let max = hotstore::MAX_RUN_POLICIES as u64;
    for run in 0..max {
        s.set_run_policy(run, Some(EventPolicy::expecting(2)))
            .unwrap();
    }
    let e = s
        .set_run_policy(max, Some(EventPolicy::expecting(2)))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("remove the override"), "{e}");
    // Replacing one is fine; removing one makes room.
    s.set_run_policy(7, Some(EventPolicy::expecting(3)))
        .unwrap();
    s.set_run_policy(0, None).unwrap();
    s.set_run_policy(max, Some(EventPolicy::expecting(4)))
        .unwrap();
    drop(s);
    let s = common::open_two_lanes(&m);
    // Run `max` expects 4: three fragments leave it OPEN; run 0 has the default (1).
    put_event(&s, max as u32, 1, 3, Durability::Memory);
    put_event(&s, 0, 1, 1, Durability::Memory);
    let c = s.next_event("c", LEASE).unwrap().unwrap();
    assert_eq!(c.event(), &EventId::new(0, 1));
    assert!(s.next_event("c", LEASE).unwrap().is_none());
}

/// Fix (found in review): a kept event whose fragments were then removed lost its
/// acknowledgement at a reopen. The rebuild made a keep mark acknowledged only for an event
/// that still had fragments, so a retried acknowledgement answered ClaimLost and a late
/// fragment was accepted: the acknowledged event came back to be delivered again.
#[test]
fn a_kept_event_stays_acknowledged_after_its_fragments_are_removed_and_a_reopen() {
    use hotstore::{FragmentKey, RecoveryMode};
    let open = |m: &Arc<FaultMedium>| {
        Store::builder("/review")
            .segment_size_bytes(64 << 10)
            .lanes(1)
            .recovery(RecoveryMode::Strict)
            .media(vec![m.clone()])
            .open()
            .unwrap()
    };
    let m = FaultMedium::new("review");
    let s = open(&m);
    s.set_event_policy(EventPolicy::expecting(1)).unwrap();
    let k = FragmentKey::new(1, 7, 0, 0).to_bytes().to_vec();
    s.put(&k, b"frag", Durability::Persisted).unwrap();
    let token = s.next_event("c", LEASE).unwrap().unwrap().into_token();
    s.ack(&token, Ack::Keep, Durability::Persisted).unwrap();
    assert!(s.remove(&k, Durability::Persisted).unwrap());
    let late = s.put(&k, b"late", Durability::Persisted);
    assert!(
        matches!(late, Err(Error::LateFragment { .. })),
        "before reopen: {late:?}"
    );
    let again = s.ack(&token, Ack::Keep, Durability::Persisted);
    assert!(
        matches!(again, Err(Error::EventAcknowledged(_))),
        "before reopen: {again:?}"
    );
    s.close().unwrap();
    let s = open(&m);
    let again = s.ack(&token, Ack::Keep, Durability::Persisted);
    let late = s.put(&k, b"late", Durability::Persisted);
    assert!(
        matches!(again, Err(Error::EventAcknowledged(_)))
            && matches!(late, Err(Error::LateFragment { .. })),
        "after reopen: repeated ack {again:?}, late fragment {late:?}"
    );
}

/// The same after a kill -9 and a power cut, and once the segment holding the keep mark was
/// recycled: then only the checkpointed acknowledged set (`events.acked`) remembers it.
#[test]
fn a_kept_event_stays_acknowledged_after_a_crash_and_after_its_keep_mark_is_recycled() {
    use hotstore::RecoveryMode;
    let open = |m: &Arc<FaultMedium>| {
        let s = Store::builder("/kept")
            .segment_size_bytes(64 << 10)
            .lanes(1)
            .recovery(RecoveryMode::Strict)
            .media(vec![m.clone()])
            .open()
            .unwrap();
        s.set_event_policy(EventPolicy::expecting(1)).unwrap();
        s
    };
    for recycle in [false, true] {
        for power_cut in [false, true] {
            let case = format!("recycle={recycle} power_cut={power_cut}");
            let m = FaultMedium::new("kept-recycled");
            let s = open(&m);
            let k = frag(3, 7, 0);
            s.put(&k, b"frag", Durability::Persisted).unwrap();
            let token = s.next_event("c", LEASE).unwrap().unwrap().into_token();
            s.ack(&token, Ack::Keep, Durability::Persisted).unwrap();
            assert!(s.remove(&k, Durability::Persisted).unwrap());
            if recycle {
                // Other keys (not fragments), removed: the segments roll and, all dead, are
                // recycled, the oldest (holding the keep mark) among them.
                let big = vec![5u8; 8 << 10];
                for i in 0..64u32 {
                    let key = format!("other-{i}");
                    s.put(key.as_bytes(), &big, Durability::Memory).unwrap();
                    assert!(s.remove(key.as_bytes(), Durability::Memory).unwrap());
                }
                s.flush().unwrap();
                let t0 = Instant::now();
                // A deadline, not a timing assumption: it only ends the wait if recycling
                // never happens.
                while s.stats().segments > 2 && t0.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert!(
                    s.stats().segments <= 2,
                    "{case}: segments were not recycled"
                );
            }
            let image = if power_cut {
                m.crash(None)
            } else {
                m.process_crash()
            };
            std::mem::forget(s); // the process died: no clean close
            let s = open(&image);
            let again = s.ack(&token, Ack::Keep, Durability::Persisted);
            let late = s.put(&k, b"late", Durability::Persisted);
            assert!(
                matches!(again, Err(Error::EventAcknowledged(_)))
                    && matches!(late, Err(Error::LateFragment { .. })),
                "{case}: repeated ack {again:?}, late fragment {late:?}"
            );
            assert!(s.next_event("c", LEASE).unwrap().is_none(), "{case}");
        }
    }
}
