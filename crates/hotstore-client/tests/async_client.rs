//! The async client against an in-process server.

mod common;

use common::{value, Setup, TestServer};
use hotstore_client::{
    Ack, AsyncClient, ConnectOptions, Durability, Error, EventState, Fragment, Pipeline,
};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(30);

async fn connect(s: &TestServer) -> AsyncClient {
    AsyncClient::connect(&s.url()).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_and_events() {
    let s = TestServer::sealed_events();
    let c = connect(&s).await;
    c.ping().await.unwrap();
    c.frag_put(1, 1, 1, 0, b"one", Some(Durability::Memory))
        .await
        .unwrap();
    c.frag_put(1, 1, 0, 0, b"zero", None).await.unwrap();
    assert_eq!(
        c.frag_get(1, 1, 1, 0).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(c.frag_get(1, 1, 5, 0).await.unwrap(), None);
    let frags: Vec<Fragment> = (0..8u16)
        .map(|d| Fragment::new(1, 2, d, 1, value(2, d, 4096)))
        .collect();
    c.frag_put_many(&frags, Some(Durability::Persisted))
        .await
        .unwrap();
    assert_eq!(c.event_get(1, 2).await.unwrap(), frags);
    let got = c.event_get(1, 1).await.unwrap();
    assert_eq!(
        got.iter().map(|f| f.detector).collect::<Vec<_>>(),
        vec![0, 1]
    );

    assert_eq!(c.event_next(LEASE, None).await.unwrap(), None);
    c.event_seal(1, 2, None).await.unwrap();
    c.event_seal(1, 1, Some(Durability::Memory)).await.unwrap();
    let r = c.event_range(1, 0, 10, None).await.unwrap();
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|e| e.state == EventState::Ready));
    let a = c.event_next(LEASE, None).await.unwrap().unwrap();
    assert_eq!((a.run, a.event), (1, 2));
    assert_eq!(a.fragments, frags);
    c.event_ack(&a.token, Ack::Remove, None).await.unwrap();
    let b = c.event_next(LEASE, None).await.unwrap().unwrap();
    assert_eq!(b.event, 1);
    c.event_release(&b.token).await.unwrap();
    let b2 = c.event_next(LEASE, None).await.unwrap().unwrap();
    assert_eq!(b2.event, 1);
    c.event_ack(&b2.token, Ack::Keep, None).await.unwrap();
    let r = c.event_range(1, 0, 10, Some(10)).await.unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].state, EventState::Kept);
    let st = c.store_stats().await.unwrap();
    assert_eq!(st["events_kept"].as_i64(), Some(1));
    assert!(st["puts"].as_i64().unwrap() >= 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_mapping() {
    let s = TestServer::start();
    let c = connect(&s).await;
    let r = c
        .event_ack("00000001000000000000002a:999", Ack::Remove, None)
        .await;
    assert!(
        matches!(r, Err(Error::ClaimLost(_) | Error::NoEvent(_))),
        "{r:?}"
    );
    let r = c.event_release("not-a-token").await;
    assert!(matches!(r, Err(Error::Request(_))), "{r:?}");
    c.frag_put(9, 1, 0, 0, b"x", None).await.unwrap();
    let ev = c.event_next(LEASE, None).await.unwrap().unwrap();
    c.event_ack(&ev.token, Ack::Remove, None).await.unwrap();
    let r = c.frag_put(9, 1, 0, 0, b"x again", None).await;
    assert!(matches!(r, Err(Error::Late(_))), "{r:?}");
    let r = c
        .frag_put_many(&[Fragment::new(9, 1, 1, 0, vec![1])], None)
        .await;
    assert!(matches!(r, Err(Error::Late(_))), "{r:?}");
    let r = c.event_seal(9, 2, None).await;
    assert!(matches!(r, Err(Error::NoEvent(_))), "{r:?}");
    c.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_and_concurrent_requests() {
    let s = TestServer::sealed_events();
    let c = connect(&s).await;
    let mut p = Pipeline::new();
    for e in 0..200u64 {
        for d in 0..2u16 {
            p.frag_put(3, e, d, 0, &value(e, d, 3000), None);
        }
        // Sealed right behind its fragments: commands must reach the server in order.
        p.event_seal(3, e, None);
    }
    let r = c.execute_windowed(&p, 8).await.unwrap();
    assert_eq!(r.len(), 600);
    assert!(r.iter().all(|r| r.is_ok()));
    let mut acks = Pipeline::new();
    while let Some(ev) = c.event_next(LEASE, None).await.unwrap() {
        assert_eq!(ev.fragments.len(), 2, "event {} sealed early", ev.event);
        acks.event_ack(&ev.token, Ack::Remove, None);
    }
    assert_eq!(acks.len(), 200);
    let r = c.execute(&acks).await.unwrap();
    assert!(r.iter().all(|r| r.is_ok()));
    let r = c.execute(&acks).await.unwrap();
    assert!(r.iter().all(|r| matches!(
        r,
        Err(Error::ClaimLost(_) | Error::Acked(_) | Error::NoEvent(_))
    )));
    assert!(c.execute(&Pipeline::new()).await.unwrap().is_empty());
    assert!(c
        .execute_windowed(&Pipeline::new(), 4)
        .await
        .unwrap()
        .is_empty());

    // Per-command results in order, whatever the window.
    let mut mixed = Pipeline::new();
    mixed
        .frag_put(7, 1, 0, 0, b"a", None)
        .event_release("00000001000000000000002a:999")
        .event_seal(7, 1, None)
        .event_seal(7, 2, None)
        .frag_put(7, 3, 0, 0, b"c", None);
    for window in [1, 2, 3, 4, 100] {
        let r = c.execute_windowed(&mixed, window).await.unwrap();
        assert_eq!(r.len(), 5, "window {window}");
        assert!(r[0].is_ok() && r[2].is_ok() && r[4].is_ok(), "{r:?}");
        assert!(
            matches!(r[1], Err(Error::ClaimLost(_) | Error::NoEvent(_))),
            "{r:?}"
        );
        assert!(matches!(r[3], Err(Error::NoEvent(_))), "{r:?}");
    }
    let r = c.execute(&mixed).await.unwrap();
    assert!(matches!(r[3], Err(Error::NoEvent(_))), "{r:?}");
    // Clones share the connection; concurrent requests are pipelined.
    let tasks: Vec<_> = (0..8u16)
        .map(|d| {
            let c = c.clone();
            tokio::spawn(async move {
                for e in 0..50u64 {
                    c.frag_put(4, e, d, 0, &value(e, d, 500), None).await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let (a, b) = tokio::join!(c.event_get(4, 0), c.event_get(4, 49));
    assert_eq!(a.unwrap().len(), 8);
    assert_eq!(b.unwrap().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_a_batch_in_one_round_trip() {
    let s = TestServer::start();
    let c = connect(&s).await;
    let frags: Vec<Fragment> = (0..5u64)
        .map(|e| Fragment::new(2, e, 0, 0, value(e, 0, 10)))
        .collect();
    c.frag_put_many(&frags, None).await.unwrap();
    assert!(c.event_next_batch(LEASE, 0).await.unwrap().is_empty());
    let got = c.event_next_batch(LEASE, 3).await.unwrap();
    assert_eq!(
        got.iter().map(|e| e.event).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let rest = c.event_next_batch(LEASE, 10).await.unwrap();
    assert_eq!(rest.len(), 2);
    let mut acks = Pipeline::new();
    for e in got.iter().chain(&rest) {
        acks.event_ack(&e.token, Ack::Remove, Some(Durability::Memory));
    }
    let r = c.execute_windowed(&acks, 2).await.unwrap();
    assert!(r.iter().all(|r| r.is_ok()));
    assert!(c.event_range(2, 0, 10, None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_go_back_when_the_client_is_dropped() {
    let s = TestServer::start();
    let p = connect(&s).await;
    p.frag_put(5, 1, 0, 0, b"x", None).await.unwrap();
    let a = connect(&s).await;
    let claim = a.event_next(LEASE, None).await.unwrap().unwrap();
    let b = connect(&s).await;
    assert_eq!(b.event_next(LEASE, None).await.unwrap(), None);
    drop(a);
    let t0 = Instant::now();
    let got = b
        .event_next(LEASE, Some(Duration::from_secs(25)))
        .await
        .unwrap()
        .expect("released when a disconnected");
    // Released by the disconnect, not by the 30 s lease running out.
    assert!(t0.elapsed() < Duration::from_secs(25));
    assert_eq!(got.event, 1);
    assert!(matches!(
        p.event_ack(&claim.token, Ack::Remove, None).await,
        Err(Error::ClaimLost(_))
    ));
    p.event_ack(&got.token, Ack::Remove, None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_next_and_timeouts() {
    let s = TestServer::start();
    let opts = ConnectOptions::from_url(&s.url())
        .unwrap()
        .response_timeout(Some(Duration::from_millis(1000)));
    let c = AsyncClient::connect_with(&opts).await.unwrap();
    let t0 = Instant::now();
    assert_eq!(
        c.event_next(LEASE, Some(Duration::from_millis(1500)))
            .await
            .unwrap(),
        None
    );
    assert!(t0.elapsed() >= Duration::from_millis(1400));
    let producer = connect(&s).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.event_next(LEASE, Some(Duration::from_secs(10))).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    producer.frag_put(6, 6, 0, 0, b"wake", None).await.unwrap();
    let ev = waiter.await.unwrap().unwrap().expect("woken");
    assert_eq!((ev.run, ev.event), (6, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication() {
    let s = TestServer::start_with(Setup {
        password: Some("pw".into()),
        ..Setup::default()
    });
    let anon = AsyncClient::connect(&s.url_without_password())
        .await
        .unwrap();
    assert!(matches!(anon.store_stats().await, Err(Error::NoAuth(_))));
    let r = AsyncClient::connect(&format!("redis://:bad@127.0.0.1:{}", s.port)).await;
    assert!(matches!(r, Err(Error::WrongPass(_))), "{r:?}");
    let r = AsyncClient::connect(&format!(
        "redis://:bad@127.0.0.1:{}/?protocol=resp3",
        s.port
    ))
    .await;
    assert!(matches!(r, Err(Error::WrongPass(_))), "{r:?}");
    let c = AsyncClient::connect(&s.url()).await.unwrap();
    c.frag_put(1, 1, 0, 0, b"ok", None).await.unwrap();
    let c3 = AsyncClient::connect(&format!("redis://:pw@127.0.0.1:{}/?protocol=resp3", s.port))
        .await
        .unwrap();
    let st = c3.store_stats().await.unwrap();
    assert_eq!(st["entries"].as_i64(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups() {
    let s = TestServer::start();
    let c = connect(&s).await;
    c.frag_put(4, 1, 0, 0, b"a", None).await.unwrap();
    c.group_create("filter", true).await.unwrap();
    assert!(matches!(
        c.event_next_in("nope", LEASE, None).await,
        Err(Error::NoGroup(_))
    ));
    let e = c
        .event_next_in("filter", LEASE, Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("offered to the group");
    assert_eq!((e.run, e.event), (4, 1));
    c.event_ack(&e.token, Ack::Remove, None).await.unwrap();
    assert_eq!(c.frag_get(4, 1, 0, 0).await.unwrap(), None);
    c.group_destroy("filter").await.unwrap();
    s.stop();
}
