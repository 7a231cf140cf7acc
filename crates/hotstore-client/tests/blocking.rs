//! The blocking client against an in-process server.

mod common;

use common::{value, Setup, TestServer};
use hotstore::EventPolicy;
use hotstore_client::{
    Ack, Client, ConnectOptions, Durability, Error, EventState, Fragment, Pipeline, StatValue,
};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(30);

fn connect(s: &TestServer) -> Client {
    Client::connect(&s.url()).expect("connect")
}

#[test]
fn put_and_get_fragments() {
    let s = TestServer::start();
    let mut c = connect(&s);
    c.ping().unwrap();
    c.frag_put(1, 42, 3, 0, b"three", None).unwrap();
    c.frag_put(1, 42, 1, 7, b"one", Some(Durability::Persisted))
        .unwrap();
    c.frag_put(1, 42, 2, 0, &[], Some(Durability::Memory))
        .unwrap();
    assert_eq!(
        c.frag_get(1, 42, 3, 0).unwrap().as_deref(),
        Some(&b"three"[..])
    );
    assert_eq!(
        c.frag_get(1, 42, 1, 7).unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(c.frag_get(1, 42, 2, 0).unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(c.frag_get(1, 42, 9, 9).unwrap(), None);
    assert_eq!(c.frag_get(2, 42, 3, 0).unwrap(), None);
    // Largest field values round-trip.
    let big = value(u64::MAX, u16::MAX, 100_000);
    c.frag_put(u32::MAX, u64::MAX, u16::MAX, u16::MAX, &big, None)
        .unwrap();
    assert_eq!(
        c.frag_get(u32::MAX, u64::MAX, u16::MAX, u16::MAX).unwrap(),
        Some(big)
    );
    drop(c);
    s.stop();
}

#[test]
fn event_get_lists_fragments_in_key_order() {
    let s = TestServer::sealed_events();
    let mut c = connect(&s);
    assert!(c.event_get(1, 5).unwrap().is_empty());
    for (d, comp) in [(2u16, 0u16), (0, 1), (0, 0), (1, 0)] {
        c.frag_put(1, 5, d, comp, &value(5, d, 10 + usize::from(comp)), None)
            .unwrap();
    }
    c.frag_put(1, 6, 0, 0, b"other event", None).unwrap();
    let frags = c.event_get(1, 5).unwrap();
    let keys: Vec<(u16, u16)> = frags.iter().map(|f| (f.detector, f.component)).collect();
    assert_eq!(keys, vec![(0, 0), (0, 1), (1, 0), (2, 0)]);
    for f in &frags {
        assert_eq!((f.run, f.event), (1, 5));
        assert_eq!(f.value, value(5, f.detector, 10 + usize::from(f.component)));
    }
}

#[test]
fn frag_put_many_and_range() {
    let s = TestServer::sealed_events();
    let mut c = connect(&s);
    let frags: Vec<Fragment> = (0..10u64)
        .flat_map(|e| (0..4u16).map(move |d| Fragment::new(7, e, d, 0, value(e, d, 1000))))
        .collect();
    c.frag_put_many(&frags, Some(Durability::Memory)).unwrap();
    c.frag_put_many(&[], None).unwrap();
    for e in 0..10 {
        let got = c.event_get(7, e).unwrap();
        assert_eq!(got, frags[(e as usize) * 4..(e as usize + 1) * 4].to_vec());
    }
    c.event_seal(7, 3, None).unwrap();
    let r = c.event_range(7, 2, 6, None).unwrap();
    let ev: Vec<(u64, EventState)> = r.iter().map(|e| (e.event, e.state)).collect();
    assert_eq!(
        ev,
        vec![
            (2, EventState::Open),
            (3, EventState::Ready),
            (4, EventState::Open),
            (5, EventState::Open)
        ]
    );
    for e in &r {
        assert_eq!(
            (e.run, e.fragments, e.bytes, e.incomplete),
            (7, 4, 4000, false)
        );
    }
    assert_eq!(c.event_range(7, 0, 100, Some(3)).unwrap().len(), 3);
    assert!(c.event_range(8, 0, 100, None).unwrap().is_empty());
}

#[test]
fn range_limit_defaults_to_1000() {
    let s = TestServer::start();
    let mut c = connect(&s);
    let mut p = Pipeline::new();
    for e in 0..1200u64 {
        p.frag_put(4, e, 0, 0, b"x", Some(Durability::Memory));
    }
    assert!(c.execute(&p).unwrap().iter().all(|r| r.is_ok()));
    let r = c.event_range(4, 0, u64::MAX, None).unwrap();
    assert_eq!(r.len(), 1000);
    assert_eq!((r[0].event, r[999].event), (0, 999));
    assert_eq!(
        c.event_range(4, 0, u64::MAX, Some(1200)).unwrap().len(),
        1200
    );
    assert_eq!(c.event_range(4, 1100, 1200, Some(5000)).unwrap().len(), 100);
}

#[test]
fn timed_out_events_are_incomplete() {
    let s = TestServer::start_with(Setup {
        policy: Some(EventPolicy::expecting(3).with_timeout(Duration::from_millis(100))),
        ..Setup::default()
    });
    let mut c = connect(&s);
    c.frag_put(1, 1, 0, 0, b"only one of three", None).unwrap();
    let r = c.event_range(1, 0, 10, None).unwrap();
    assert_eq!((r[0].state, r[0].incomplete), (EventState::Open, false));
    let ev = c
        .event_next(LEASE, Some(Duration::from_secs(5)))
        .unwrap()
        .expect("ready after the timeout");
    assert!(ev.incomplete);
    assert_eq!(ev.fragments.len(), 1);
    let r = c.event_range(1, 0, 10, None).unwrap();
    assert_eq!((r[0].state, r[0].incomplete), (EventState::Claimed, true));
    assert_eq!(
        c.store_stats().unwrap()["events_incomplete"].as_i64(),
        Some(1)
    );
    c.event_ack(&ev.token, Ack::Remove, None).unwrap();
}

#[test]
fn block_forever_waits_until_an_event_arrives() {
    let s = TestServer::start();
    let mut c = connect(&s);
    let url = s.url();
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        Client::connect(&url)
            .unwrap()
            .frag_put(2, 2, 0, 0, b"x", None)
            .unwrap();
    });
    let t0 = Instant::now();
    let ev = c.event_next(LEASE, Some(Duration::MAX)).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(250));
    assert_eq!(ev.map(|e| (e.run, e.event)), Some((2, 2)));
    producer.join().unwrap();
}

#[test]
fn claim_ack_remove_and_keep() {
    let s = TestServer::sealed_events();
    let mut p = connect(&s);
    let mut c = connect(&s);
    assert_eq!(c.event_next(LEASE, None).unwrap(), None);
    for e in [10u64, 11] {
        p.frag_put(1, e, 0, 0, &value(e, 0, 100), None).unwrap();
        p.frag_put(1, e, 1, 0, &value(e, 1, 50), None).unwrap();
    }
    // Sealed in the order 11, 10: offered oldest-ready first.
    p.event_seal(1, 11, Some(Durability::Persisted)).unwrap();
    p.event_seal(1, 10, None).unwrap();
    let a = c.event_next(LEASE, None).unwrap().expect("event 11");
    assert_eq!((a.run, a.event, a.incomplete), (1, 11, false));
    assert_eq!(a.fragments.len(), 2);
    assert_eq!(a.fragments[0].value, value(11, 0, 100));
    assert_eq!(a.bytes(), 150);
    let states = |c: &mut Client| -> Vec<EventState> {
        c.event_range(1, 0, 100, None)
            .unwrap()
            .iter()
            .map(|e| e.state)
            .collect()
    };
    assert_eq!(states(&mut c), vec![EventState::Ready, EventState::Claimed]);
    c.event_ack(&a.token, Ack::Remove, None).unwrap();
    assert!(c.event_get(1, 11).unwrap().is_empty());
    assert_eq!(states(&mut c), vec![EventState::Ready]);

    let b = c.event_next(LEASE, None).unwrap().expect("event 10");
    assert_eq!(b.event, 10);
    c.event_ack(&b.token, Ack::Keep, Some(Durability::Persisted))
        .unwrap();
    assert_eq!(states(&mut c), vec![EventState::Kept]);
    assert_eq!(c.event_get(1, 10).unwrap().len(), 2);
    assert_eq!(c.event_next(LEASE, None).unwrap(), None);
    // Acknowledged twice: the claim is gone.
    assert!(matches!(
        c.event_ack(&b.token, Ack::Remove, None),
        Err(Error::ClaimLost(_) | Error::Acked(_))
    ));
}

#[test]
fn claim_a_batch_in_one_round_trip() {
    let s = TestServer::start();
    let mut c = connect(&s);
    for e in 0..10 {
        c.frag_put(1, e, 0, 0, &value(e, 0, 64), None).unwrap();
    }
    assert!(c.event_next_batch(LEASE, 0).unwrap().is_empty());
    let a = c.event_next_batch(LEASE, 4).unwrap();
    assert_eq!(
        a.iter().map(|e| e.event).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    let b = c.event_next_batch(LEASE, 100).unwrap();
    assert_eq!(b.len(), 6);
    assert!(c.event_next_batch(LEASE, 8).unwrap().is_empty());
    let mut acks = Pipeline::new();
    for e in a.iter().chain(&b) {
        assert_eq!(e.fragments[0].value, value(e.event, 0, 64));
        acks.event_ack(&e.token, Ack::Remove, None);
    }
    assert!(c.execute(&acks).unwrap().iter().all(|r| r.is_ok()));
    assert_eq!(c.store_stats().unwrap()["entries"].as_i64(), Some(0));
}

#[test]
fn release_offers_the_event_again() {
    let s = TestServer::start(); // one fragment makes an event
    let mut c = connect(&s);
    c.frag_put(2, 1, 0, 0, b"a", None).unwrap();
    c.frag_put(2, 2, 0, 0, b"b", None).unwrap();
    let first = c.event_next(LEASE, None).unwrap().unwrap();
    assert_eq!(first.event, 1);
    c.event_release(&first.token).unwrap();
    let again = c.event_next(LEASE, None).unwrap().unwrap();
    assert_eq!(again.event, 1, "a released event keeps its place");
    assert_ne!(again.token, first.token);
    assert!(matches!(
        c.event_ack(&first.token, Ack::Remove, None),
        Err(Error::ClaimLost(_))
    ));
    assert!(matches!(
        c.event_release(&first.token),
        Err(Error::ClaimLost(_))
    ));
    c.event_ack(&again.token, Ack::Remove, None).unwrap();
}

#[test]
fn expired_lease_loses_the_claim() {
    let s = TestServer::start();
    let mut c = connect(&s);
    c.frag_put(3, 1, 0, 0, b"x", None).unwrap();
    let claim = c
        .event_next(Duration::from_millis(100), None)
        .unwrap()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let again = c.event_next(LEASE, None).unwrap().expect("offered again");
    assert_eq!(again.event, 1);
    let r = c.event_ack(&claim.token, Ack::Remove, None);
    assert!(matches!(r, Err(Error::ClaimLost(_))), "{r:?}");
    c.event_ack(&again.token, Ack::Remove, None).unwrap();
}

#[test]
fn ack_after_the_lease_ended_is_refused() {
    let s = TestServer::start();
    let mut c = connect(&s);
    c.frag_put(3, 1, 0, 0, b"x", None).unwrap();
    let claim = c
        .event_next(Duration::from_millis(100), None)
        .unwrap()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let r = c.event_ack(&claim.token, Ack::Remove, None);
    assert!(matches!(r, Err(Error::ClaimLost(_))), "{r:?}");
    let again = c.event_next(LEASE, None).unwrap().expect("offered again");
    assert_eq!(again.event, 1);
}

#[test]
fn block_waits_for_an_event() {
    let s = TestServer::start();
    let mut c = connect(&s);
    let t0 = Instant::now();
    assert_eq!(
        c.event_next(LEASE, Some(Duration::from_millis(300)))
            .unwrap(),
        None
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );

    let url = s.url();
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut p = Client::connect(&url).unwrap();
        p.frag_put(4, 9, 0, 0, b"late arrival", None).unwrap();
    });
    let t0 = Instant::now();
    let ev = c
        .event_next(LEASE, Some(Duration::from_secs(120)))
        .unwrap()
        .expect("woken by the put");
    // Woken by the put, not by the block timing out (generous for a loaded machine).
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!((ev.run, ev.event), (4, 9));
    producer.join().unwrap();
    c.event_ack(&ev.token, Ack::Remove, None).unwrap();
}

#[test]
fn block_with_a_response_timeout() {
    let s = TestServer::start();
    let opts = ConnectOptions::from_url(&s.url())
        .unwrap()
        .response_timeout(Some(Duration::from_millis(1000)));
    let mut c = Client::connect_with(&opts).unwrap();
    // The BLOCK time is added to the response timeout.
    assert_eq!(
        c.event_next(LEASE, Some(Duration::from_millis(1500)))
            .unwrap(),
        None
    );
    c.frag_put(1, 1, 0, 0, b"x", None).unwrap();
    assert!(c.event_next(LEASE, None).unwrap().is_some());
}

#[test]
fn claims_go_back_when_the_connection_closes() {
    let s = TestServer::start();
    let mut p = connect(&s);
    p.frag_put(5, 77, 0, 0, b"claimed then dropped", None)
        .unwrap();
    let mut a = connect(&s);
    let claim = a.event_next(LEASE, None).unwrap().unwrap();
    assert_eq!(claim.event, 77);
    let mut b = connect(&s);
    assert_eq!(b.event_next(LEASE, None).unwrap(), None, "claimed by a");
    drop(a);
    let got = b
        .event_next(LEASE, Some(Duration::from_secs(5)))
        .unwrap()
        .expect("released when a disconnected");
    assert_eq!((got.run, got.event), (5, 77));
    assert_eq!(got.fragments[0].value, b"claimed then dropped");
    assert!(matches!(
        p.event_ack(&claim.token, Ack::Remove, None),
        Err(Error::ClaimLost(_))
    ));
    // A token may be acknowledged from another connection.
    p.event_ack(&got.token, Ack::Remove, None).unwrap();
    assert!(b.event_get(5, 77).unwrap().is_empty());
}

#[test]
fn error_replies_map_to_variants() {
    let s = TestServer::sealed_events();
    let mut c = connect(&s);
    // A well-formed token nobody holds.
    let r = c.event_ack("00000001000000000000002a:999", Ack::Remove, None);
    assert!(
        matches!(r, Err(Error::ClaimLost(_) | Error::NoEvent(_))),
        "{r:?}"
    );
    let r = c.event_release("00000001000000000000002a:999");
    assert!(
        matches!(r, Err(Error::ClaimLost(_) | Error::NoEvent(_))),
        "{r:?}"
    );
    // Not a token at all.
    let r = c.event_ack("bogus", Ack::Remove, None);
    assert!(matches!(r, Err(Error::Request(_))), "{r:?}");
    assert_eq!(r.unwrap_err().code(), Some("ERR"));
    // Sealing an event without fragments.
    let r = c.event_seal(9, 9, None);
    assert!(matches!(r, Err(Error::NoEvent(_))), "{r:?}");
    // A late fragment.
    c.frag_put(1, 1, 0, 0, b"a", None).unwrap();
    c.event_seal(1, 1, None).unwrap();
    let ev = c.event_next(LEASE, None).unwrap().unwrap();
    c.event_ack(&ev.token, Ack::Remove, None).unwrap();
    let r = c.frag_put(1, 1, 1, 0, b"too late", None);
    assert!(matches!(r, Err(Error::Late(_))), "{r:?}");
    assert_eq!(r.unwrap_err().code(), Some("LATE"));
    // Sealing an acknowledged (kept) event.
    c.frag_put(1, 2, 0, 0, b"b", None).unwrap();
    c.event_seal(1, 2, None).unwrap();
    let ev = c.event_next(LEASE, None).unwrap().unwrap();
    c.event_ack(&ev.token, Ack::Keep, None).unwrap();
    let r = c.event_seal(1, 2, None);
    assert!(matches!(r, Err(Error::Acked(_))), "{r:?}");
    // Unknown command, through the raw connection.
    let raw: redis::RedisResult<()> = redis::cmd("NO.SUCH").arg(1).query(c.connection());
    let e = Error::from(raw.unwrap_err());
    assert!(
        matches!(e, Error::Request(ref m) if m.contains("unknown command")),
        "{e:?}"
    );
    // The connection is still usable after error replies.
    c.ping().unwrap();
}

#[test]
fn full_store() {
    let s = TestServer::start_with(Setup {
        capacity: Some(1 << 20),
        ..Setup::default()
    });
    let mut c = connect(&s);
    let v = vec![7u8; 30_000];
    let mut full = None;
    for e in 0..1000 {
        if let Err(err) = c.frag_put(1, e, 0, 0, &v, None) {
            full = Some(err);
            break;
        }
    }
    let err = full.expect("a 1 MiB store fills up");
    assert!(matches!(err, Error::Full(_)), "{err:?}");
    assert_eq!(err.code(), Some("FULL"));
    // Consuming frees space.
    let mut freed = 0;
    while let Some(ev) = c.event_next(LEASE, None).unwrap() {
        c.event_ack(&ev.token, Ack::Remove, None).unwrap();
        freed += 1;
        if freed == 20 {
            break;
        }
    }
    let mut stored = false;
    for _ in 0..100 {
        if c.frag_put(2, 0, 0, 0, &v, None).is_ok() {
            stored = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stored, "space freed by acks is reused");
}

#[test]
fn pipelines_one_round_trip_and_windowed() {
    let s = TestServer::sealed_events();
    let mut c = connect(&s);
    let mut p = Pipeline::new();
    for e in 0..300u64 {
        for d in 0..3u16 {
            p.frag_put(1, e, d, 0, &value(e, d, 2000), None);
        }
        p.event_seal(1, e, Some(Durability::Memory));
    }
    assert_eq!(p.len(), 1200);
    let results = c.execute_windowed(&p, 16).unwrap();
    assert_eq!(results.len(), 1200);
    assert!(results.iter().all(|r| r.is_ok()));
    let r = c.event_range(1, 0, 1000, None).unwrap();
    assert_eq!(r.len(), 300);
    assert!(r
        .iter()
        .all(|e| e.state == EventState::Ready && e.fragments == 3));

    // Claim them all, then acknowledge through one pipeline.
    let mut acks = Pipeline::new();
    let mut n = 0;
    while let Some(ev) = c.event_next(LEASE, None).unwrap() {
        assert_eq!(ev.fragments.len(), 3);
        assert_eq!(ev.fragments[2].value, value(ev.event, 2, 2000));
        acks.event_ack(&ev.token, Ack::Remove, None);
        n += 1;
    }
    assert_eq!(n, 300);
    let results = c.execute(&acks).unwrap();
    assert!(results.iter().all(|r| r.is_ok()));
    assert!(c.event_range(1, 0, 1000, None).unwrap().is_empty());

    // Per-command results: late fragments fail in place, the rest succeed.
    let mut mixed = Pipeline::new();
    mixed
        .frag_put(1, 5, 0, 0, b"late", None)
        .frag_put(2, 5, 0, 0, b"fine", None)
        .event_ack("00000001000000000000002a:999", Ack::Remove, None)
        .event_seal(2, 5, None)
        .frag_put(1, 6, 0, 0, b"late too", None);
    for window in [1, 2, 3, 100] {
        let r = c.execute_windowed(&mixed, window).unwrap();
        assert_eq!(r.len(), 5);
        assert!(matches!(r[0], Err(Error::Late(_))), "{:?}", r[0]);
        assert!(r[1].is_ok());
        // Event 1:42 was acknowledged above: a stale token on it is told so (issue 16).
        assert!(matches!(r[2], Err(Error::Acked(_))), "{:?}", r[2]);
        assert!(r[3].is_ok(), "{:?}", r[3]);
        assert!(matches!(r[4], Err(Error::Late(_))));
    }
    let r = c.execute(&Pipeline::new()).unwrap();
    assert!(r.is_empty());
    c.ping().unwrap();
}

#[test]
fn store_stats_resp2_and_resp3() {
    let s = TestServer::start();
    let mut c = connect(&s);
    c.frag_put(1, 1, 0, 0, &[1u8; 100], None).unwrap();
    c.frag_put(1, 2, 0, 0, &[1u8; 100], None).unwrap();
    let st = c.store_stats().unwrap();
    for name in [
        "entries",
        "live_bytes",
        "dead_bytes",
        "capacity_bytes",
        "file_bytes",
        "puts",
        "removes",
        "full_errors",
        "events_open",
        "events_ready",
        "events_claimed",
        "events_kept",
        "events_incomplete",
        "late_fragments",
        "events_removed",
        "events_kept_total",
        "leases_expired",
        "claims_released",
        "events_timed_out",
        "power_safe_tiers",
        "tiers",
    ] {
        assert!(st.contains_key(name), "STORE.STATS lacks {name}: {st:?}");
    }
    assert_eq!(st["entries"].as_i64(), Some(2));
    assert_eq!(st["puts"].as_i64(), Some(2));
    assert_eq!(st["events_ready"].as_i64(), Some(2));

    let opts = ConnectOptions::from_url(&s.url()).unwrap().resp3(true);
    let mut c3 = Client::connect_with(&opts).unwrap();
    let st3 = c3.store_stats().unwrap();
    assert_eq!(st3["entries"], StatValue::Int(2));
    assert_eq!(st3.len(), st.len());
    // The DAQ commands work the same in RESP3.
    let ev = c3.event_next(LEASE, None).unwrap().unwrap();
    assert_eq!((ev.run, ev.event, ev.incomplete), (1, 1, false));
    c3.event_ack(&ev.token, Ack::Remove, None).unwrap();
    assert_eq!(c3.event_range(1, 0, 10, None).unwrap().len(), 1);
    assert_eq!(c3.event_get(1, 2).unwrap().len(), 1);
    assert_eq!(c3.frag_get(1, 9, 0, 0).unwrap(), None);
}

#[test]
fn authentication() {
    let s = TestServer::start_with(Setup {
        password: Some("s3cret".into()),
        ..Setup::default()
    });
    // No password: connecting works, commands are refused.
    let mut anon = Client::connect(&s.url_without_password()).unwrap();
    let r = anon.frag_put(1, 1, 0, 0, b"x", None);
    assert!(matches!(r, Err(Error::NoAuth(_))), "{r:?}");
    assert_eq!(r.unwrap_err().code(), Some("NOAUTH"));
    // Wrong password.
    let r = Client::connect(&format!("redis://:nope@127.0.0.1:{}", s.port));
    assert!(matches!(r, Err(Error::WrongPass(_))), "{r:?}");
    let r = Client::connect_with(
        &ConnectOptions::tcp("127.0.0.1", s.port)
            .password("nope")
            .resp3(true),
    );
    assert!(matches!(r, Err(Error::WrongPass(_))), "{r:?}");
    // Right password: URL, options, RESP3, username "default".
    let mut c = Client::connect(&s.url()).unwrap();
    c.frag_put(1, 1, 0, 0, b"x", None).unwrap();
    let mut c2 =
        Client::connect_with(&ConnectOptions::tcp("127.0.0.1", s.port).password("s3cret")).unwrap();
    assert_eq!(c2.frag_get(1, 1, 0, 0).unwrap().as_deref(), Some(&b"x"[..]));
    let mut c3 = Client::connect_with(
        &ConnectOptions::tcp("127.0.0.1", s.port)
            .password("s3cret")
            .resp3(true),
    )
    .unwrap();
    c3.ping().unwrap();
    let mut c4 = Client::connect_with(
        &ConnectOptions::tcp("127.0.0.1", s.port)
            .username("default")
            .password("s3cret"),
    )
    .unwrap();
    c4.ping().unwrap();
}

#[test]
fn client_name_and_unix_socket() {
    let s = TestServer::start_with(Setup {
        unix: true,
        policy: Some(EventPolicy::expecting(2)),
        ..Setup::default()
    });
    let path = s.unix.clone().unwrap();
    let mut c =
        Client::connect_with(&ConnectOptions::unix(&path).client_name("consumer-7")).unwrap();
    let name: String = redis::cmd("CLIENT")
        .arg("GETNAME")
        .query(c.connection())
        .unwrap();
    assert_eq!(name, "consumer-7");
    // Two fragments complete an event under this policy.
    c.frag_put(1, 1, 0, 0, b"a", None).unwrap();
    assert_eq!(c.event_next(LEASE, None).unwrap(), None);
    c.frag_put(1, 1, 1, 0, b"b", None).unwrap();
    let ev = c.event_next(LEASE, None).unwrap().expect("complete");
    assert_eq!(ev.fragments.len(), 2);
    c.event_ack(&ev.token, Ack::Remove, None).unwrap();
    let url = format!("redis+unix://{}", path.display());
    let mut u = Client::connect(&url).unwrap();
    u.ping().unwrap();
}

#[test]
fn connection_errors() {
    // Nothing listens on this port (bound then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = Client::connect_tcp("127.0.0.1", port);
    assert!(matches!(r, Err(Error::Connection(_))), "{r:?}");
    assert!(r.unwrap_err().is_connection());
    assert!(matches!(
        Client::connect("redis://127.0.0.1:1/5"),
        Err(Error::InvalidArgument(_))
    ));
    // The server going away fails the next call with a connection error.
    let s = TestServer::start();
    let mut c = connect(&s);
    c.ping().unwrap();
    drop(s);
    let r = c.ping();
    assert!(matches!(r, Err(Error::Connection(_))), "{r:?}");
}

/// Consumer groups: each group is offered every event; a group's claim is acknowledged by
/// its token; an unknown group is `Error::NoGroup`.
#[test]
fn consumer_groups() {
    let s = TestServer::start();
    let mut c = connect(&s);
    c.frag_put(4, 1, 0, 0, b"a", None).unwrap();
    c.group_create("filter", true).unwrap();
    c.group_create("monitor", false).unwrap();
    assert!(matches!(
        c.event_next_in("nope", LEASE, None),
        Err(Error::NoGroup(_))
    ));
    assert!(matches!(c.group_destroy("nope"), Err(Error::NoGroup(_))));
    for g in ["monitor", "filter"] {
        let e = c.event_next_in(g, LEASE, None).unwrap().expect(g);
        assert_eq!((e.run, e.event), (4, 1));
        c.event_ack(&e.token, Ack::Remove, None).unwrap();
        assert!(c.event_next_in(g, LEASE, None).unwrap().is_none());
    }
    // The optional monitor acknowledged first (nothing removed), then filter removed it.
    assert_eq!(c.frag_get(4, 1, 0, 0).unwrap(), None);
    c.group_destroy("monitor").unwrap();
    c.group_destroy("filter").unwrap();
    drop(c);
    s.stop();
}
