//! Batched claims and acknowledgements, the pending-claims view, retried acknowledgements and
//! consumer groups (issue 16), over raw sockets.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, Client};
use hotstore_server::spawn;
use std::io::{BufRead, Read};

/// A RESP reply, read whole (nested arrays included).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

impl Value {
    fn items(&self) -> &[Value] {
        match self {
            Value::Array(Some(v)) => v,
            other => panic!("not an array: {other:?}"),
        }
    }
    fn text(&self) -> String {
        match self {
            Value::Bulk(Some(b)) => String::from_utf8(b.clone()).unwrap(),
            Value::Simple(s) | Value::Error(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        }
    }
    fn int(&self) -> i64 {
        match self {
            Value::Int(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }
}

fn read(c: &mut Client) -> Value {
    let mut line = String::new();
    c.r.read_line(&mut line).unwrap();
    let line = line.trim_end();
    let (kind, rest) = line.split_at(1);
    match kind {
        "+" => Value::Simple(rest.into()),
        "-" => Value::Error(rest.into()),
        ":" => Value::Int(rest.parse().unwrap()),
        "_" => Value::Bulk(None),
        "$" => {
            let n: i64 = rest.parse().unwrap();
            if n < 0 {
                return Value::Bulk(None);
            }
            let mut v = vec![0; n as usize + 2];
            c.r.read_exact(&mut v).unwrap();
            v.truncate(n as usize);
            Value::Bulk(Some(v))
        }
        "*" => {
            let n: i64 = rest.parse().unwrap();
            if n < 0 {
                return Value::Array(None);
            }
            Value::Array(Some((0..n).map(|_| read(c)).collect()))
        }
        other => panic!("unexpected reply type {other}: {line}"),
    }
}

fn call(c: &mut Client, args: &[&str]) -> Value {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.send(&a);
    read(c)
}

fn ok(v: &Value) -> bool {
    *v == Value::Simple("OK".into())
}

/// EVENT.NEXT COUNT hands out up to n claims in one reply (as many as are READY, without
/// waiting for the rest); EVENT.ACK with many tokens settles them all with one group commit,
/// answering one result per token; EVENT.PENDING lists what is held.
#[test]
fn claims_and_acknowledgements_come_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    for e in 1..=25 {
        let e = e.to_string();
        let put = call(&mut c, &["FRAG.PUT", "7", &e, "0", "0", "data"]);
        assert!(ok(&put), "{put:?}");
        assert!(ok(&call(&mut c, &["EVENT.SEAL", "7", &e])));
    }
    let batch = call(&mut c, &["EVENT.NEXT", "COUNT", "10", "CONSUMER", "farm-1"]);
    let claims = batch.items();
    assert_eq!(claims.len(), 10);
    // Each element is a claim as EVENT.NEXT without COUNT answers it.
    let events: Vec<i64> = claims
        .iter()
        .map(|c| c.items()[1].items()[1].int())
        .collect();
    assert_eq!(events, (1..=10).collect::<Vec<_>>(), "oldest first");
    // The rest (15) in a batch larger than what is READY: no wait for the missing ones.
    let rest = call(&mut c, &["EVENT.NEXT", "COUNT", "100", "BLOCK", "5000"]);
    assert_eq!(rest.items().len(), 15);
    // Nothing READY and no BLOCK: a null, as without COUNT.
    assert_eq!(
        call(&mut c, &["EVENT.NEXT", "COUNT", "5"]),
        Value::Bulk(None)
    );

    let pending = call(&mut c, &["EVENT.PENDING"]);
    assert_eq!(pending.items().len(), 25);
    let first = pending.items()[0].items();
    assert_eq!(
        first[0].text(),
        claims[0].items()[0].text(),
        "oldest claim first"
    );
    assert_eq!(first[1].text(), "farm-1");
    assert!(first[3].int() > 0, "lease left: {first:?}");
    assert_eq!(first[4].int(), 1, "delivered once");
    assert_eq!(
        call(&mut c, &["EVENT.PENDING", "COUNT", "3"]).items().len(),
        3
    );

    // One ACK for the first batch, with a token of nothing in the middle: one result each.
    let mut args: Vec<String> = vec!["EVENT.ACK".into()];
    args.extend(claims[..5].iter().map(|c| c.items()[0].text()));
    args.push("ffffffffffffffffffffffff:999".into());
    args.extend(claims[5..].iter().map(|c| c.items()[0].text()));
    args.push("REMOVE".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let acked = call(&mut c, &a);
    let results = acked.items();
    assert_eq!(results.len(), 11);
    for (i, r) in results.iter().enumerate() {
        if i == 5 {
            assert!(
                matches!(r, Value::Error(e) if e.starts_with("CLAIMLOST")),
                "{r:?}"
            );
        } else {
            assert!(ok(r), "token {i}: {r:?}");
        }
    }
    assert_eq!(call(&mut c, &["EVENT.PENDING"]).items().len(), 15);
    // The same batch again (a client retrying after a lost reply): each is already done.
    let again = call(&mut c, &a);
    for (i, r) in again.items().iter().enumerate() {
        if i != 5 {
            assert!(
                matches!(r, Value::Error(e) if e.starts_with("ACKED")),
                "{r:?}"
            );
        }
    }
    // Bad input: a clear error each.
    for bad in [
        &["EVENT.NEXT", "COUNT", "0"][..],
        &["EVENT.NEXT", "COUNT", "100000"],
        &["EVENT.NEXT", "COUNT", "x"],
        &["EVENT.ACK", "REMOVE"],
        &["EVENT.ACK", "x:1", "y:2"],
        &["EVENT.PENDING", "COUNT"],
    ] {
        let r = call(&mut c, bad);
        assert!(matches!(r, Value::Error(_)), "{bad:?}: {r:?}");
    }
    drop(c);
    server.shutdown().unwrap();
}

/// Fix (issue 16): a repeated EVENT.ACK of an event it already removed answered -CLAIMLOST,
/// which promises the event back; a client retrying after a crash then waited for it forever.
/// It answers -ACKED, also after a restart of the server.
#[test]
fn a_repeated_ack_answers_acked_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    assert!(ok(&call(
        &mut c,
        &["FRAG.PUT", "1", "5", "0", "0", "hello"]
    )));
    assert!(ok(&call(&mut c, &["EVENT.SEAL", "1", "5"])));
    let claim = call(&mut c, &["EVENT.NEXT", "LEASE", "60000"]);
    let token = claim.items()[0].text();
    assert!(ok(&call(&mut c, &["EVENT.ACK", &token, "REMOVE"])));
    let again = call(&mut c, &["EVENT.ACK", &token, "REMOVE"]);
    assert!(
        matches!(&again, Value::Error(e) if e.starts_with("ACKED")),
        "{again:?}"
    );
    drop(c);
    server.shutdown().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let again = call(&mut c, &["EVENT.ACK", &token, "REMOVE"]);
    assert!(
        matches!(&again, Value::Error(e) if e.starts_with("ACKED")),
        "{again:?}"
    );
    drop(c);
    server.shutdown().unwrap();
}

/// With --max-deliveries, an event given back that often is parked: EVENT.NEXT skips it,
/// EVENT.RANGE and STORE.STATS show it, EVENT.CLAIM takes it by its id.
#[test]
fn a_poisoned_event_is_parked_and_claimed_by_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_deliveries = 1;
    let server = spawn(cfg).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    assert!(ok(&call(&mut c, &["FRAG.PUT", "3", "1", "0", "0", "bad"])));
    assert!(ok(&call(&mut c, &["EVENT.SEAL", "3", "1"])));
    let claim = call(&mut c, &["EVENT.NEXT"]);
    let token = claim.items()[0].text();
    assert!(ok(&call(&mut c, &["EVENT.RELEASE", &token])));
    assert_eq!(call(&mut c, &["EVENT.NEXT"]), Value::Bulk(None), "parked");
    let range = call(&mut c, &["EVENT.RANGE", "3", "0", "10"]);
    assert_eq!(range.items()[0].items()[1].text(), "poisoned");
    // Fix (found in review): LIMIT 0 walked the whole store, a huge LIMIT was no limit.
    for bad in ["0", "10001", "18446744073709551615"] {
        let r = call(&mut c, &["EVENT.RANGE", "3", "0", "10", "LIMIT", bad]);
        assert!(
            matches!(&r, Value::Error(e) if e.contains("LIMIT must be 1 to 10000")),
            "LIMIT {bad}: {r:?}"
        );
    }
    let one = call(&mut c, &["EVENT.RANGE", "3", "0", "10", "LIMIT", "1"]);
    assert_eq!(one.items().len(), 1);
    let wrong = call(&mut c, &["EVENT.CLAIM", "3", "2"]);
    assert!(
        matches!(&wrong, Value::Error(e) if e.starts_with("NOEVENT")),
        "{wrong:?}"
    );
    let explicit = call(&mut c, &["EVENT.CLAIM", "3", "1", "CONSUMER", "operator"]);
    let t = explicit.items()[0].text();
    let pending = call(&mut c, &["EVENT.PENDING"]);
    assert_eq!(pending.items()[0].items()[1].text(), "operator");
    assert_eq!(pending.items()[0].items()[4].int(), 2, "second delivery");
    assert!(ok(&call(&mut c, &["EVENT.ACK", &t, "REMOVE"])));
    drop(c);
    server.shutdown().unwrap();
}

/// Consumer groups over the protocol: two required groups each get every event (in batches,
/// blocking as without groups); an event is removed only once both acknowledged it; the
/// groups' views; bad input answers clear errors; group acknowledgements survive a restart.
#[test]
fn consumer_groups_each_see_every_event_and_removal_waits_for_both() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    for e in 1..=4 {
        assert!(ok(&call(
            &mut c,
            &["FRAG.PUT", "3", &e.to_string(), "0", "0", "v"]
        )));
    }
    assert!(ok(&call(&mut c, &["EVENT.GROUP", "CREATE", "filter"])));
    assert!(ok(&call(
        &mut c,
        &["EVENT.GROUP", "CREATE", "monitor", "REQUIRED"]
    )));
    assert!(ok(&call(
        &mut c,
        &["EVENT.GROUP", "CREATE", "sampler", "OPTIONAL"]
    )));
    let err = call(&mut c, &["EVENT.GROUP", "CREATE", "filter"]);
    assert!(
        err.text().starts_with("ERR") && err.text().contains("exists"),
        "{err:?}"
    );
    let err = call(&mut c, &["EVENT.NEXT", "GROUP", "nope"]);
    assert!(err.text().starts_with("NOGROUP"), "{err:?}");
    let err = call(&mut c, &["EVENT.NEXT"]);
    assert!(
        err.text().contains("GROUP"),
        "a grouped store names the group: {err:?}"
    );

    let f = call(
        &mut c,
        &[
            "EVENT.NEXT",
            "GROUP",
            "filter",
            "COUNT",
            "10",
            "CONSUMER",
            "f1",
        ],
    );
    assert_eq!(f.items().len(), 4);
    let m = call(&mut c, &["EVENT.NEXT", "GROUP", "monitor", "COUNT", "2"]);
    assert_eq!(m.items().len(), 2);
    let groups = call(&mut c, &["EVENT.GROUPS"]);
    let filter = groups.items()[0].items();
    assert_eq!(filter[1].text(), "filter");
    assert_eq!((filter[6].text(), filter[7].int()), ("pending".into(), 4));
    let monitor = groups.items()[1].items();
    assert_eq!((monitor[8].text(), monitor[9].int()), ("lag".into(), 2));
    let consumers = call(&mut c, &["EVENT.CONSUMERS", "filter"]);
    assert_eq!(consumers.items()[0].items()[1].text(), "f1");
    assert_eq!(consumers.items()[0].items()[3].int(), 4);
    assert_eq!(
        call(&mut c, &["EVENT.PENDING", "GROUP", "filter"])
            .items()
            .len(),
        4
    );

    // filter acknowledges all four in one command; a monitor token in it under GROUP filter
    // answers its own error.
    let mut args: Vec<String> = vec!["EVENT.ACK".into()];
    args.extend(f.items().iter().map(|c| c.items()[0].text()));
    args.push(m.items()[0].items()[0].text());
    args.extend(["REMOVE", "GROUP", "filter"].map(String::from));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let acked = call(&mut c, &a);
    let results = acked.items();
    assert!(results[..4].iter().all(ok), "{results:?}");
    assert!(results[4].text().contains("another group"), "{results:?}");
    assert_eq!(
        call(&mut c, &["EVENT.GET", "3", "1"]).items().len(),
        1,
        "monitor has not acknowledged: still stored"
    );
    let tok = m.items()[0].items()[0].text();
    assert!(ok(&call(&mut c, &["EVENT.ACK", &tok, "REMOVE"])));
    assert_eq!(call(&mut c, &["EVENT.GET", "3", "1"]).items().len(), 0);
    let again = call(&mut c, &["EVENT.ACK", &tok, "REMOVE"]);
    assert!(again.text().starts_with("ACKED"), "{again:?}");

    // A restart: filter is offered nothing again, monitor the three it had not acknowledged.
    drop(c);
    server.shutdown().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    assert_eq!(
        call(&mut c, &["EVENT.NEXT", "GROUP", "filter"]),
        Value::Bulk(None)
    );
    let m = call(
        &mut c,
        &[
            "EVENT.NEXT",
            "GROUP",
            "monitor",
            "COUNT",
            "10",
            "BLOCK",
            "1000",
        ],
    );
    let events: Vec<i64> = m
        .items()
        .iter()
        .map(|c| c.items()[1].items()[1].int())
        .collect();
    assert_eq!(events, vec![2, 3, 4]);
    assert!(ok(&call(&mut c, &["EVENT.GROUP", "DESTROY", "sampler"])));
    let err = call(&mut c, &["EVENT.GROUP", "DESTROY", "sampler"]);
    assert!(err.text().starts_with("NOGROUP"), "{err:?}");
    drop(c);
    server.shutdown().unwrap();
}
