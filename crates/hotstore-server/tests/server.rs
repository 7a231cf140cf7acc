//! The server end to end over raw sockets: the cases real clients do not exercise easily
//! (limits, malformed input, durability accounting, graceful stop).

mod common;

use common::{config, encode, info_field, Client};
use hotstore_server::spawn;
use std::io::{BufRead, Write};
use std::time::Duration;

#[test]
fn persisted_writes_wait_for_a_group_commit_memory_writes_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let before = info_field(&mut c, "persistence", "hotstore_group_syncs");
    // A pipelined batch of 100 Persisted writes: covered by few syncs, not 100.
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend(encode(&[b"SET", format!("k{i}").as_bytes(), b"v"]));
    }
    c.w.write_all(&batch).unwrap();
    for _ in 0..100 {
        assert_eq!(c.line(), "+OK");
    }
    let after = info_field(&mut c, "persistence", "hotstore_group_syncs");
    assert!(
        after > before,
        "Persisted SETs were acknowledged without a sync"
    );
    assert!(after - before < 100, "one sync per write: no group commit");
    // Memory writes never wait for one.
    for i in 0..50 {
        let e = i.to_string();
        assert_eq!(
            c.call(&["FRAG.PUT", "1", &e, "0", "0", "x", "DURABILITY", "memory"]),
            "+OK"
        );
    }
    assert_eq!(
        info_field(&mut c, "persistence", "hotstore_group_syncs"),
        after
    );
    drop(c);
    server.shutdown().unwrap();
}

#[test]
fn malformed_input_closes_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut good = Client::connect(server.tcp_addr());
    for garbage in [
        &b"*2\r\n$abc\r\n"[..],
        b"*1\r\n:5\r\n",
        b"*1\r\n$3\r\nPINGPONG\r\n",
    ] {
        let mut bad = Client::connect(server.tcp_addr());
        bad.w.write_all(garbage).unwrap();
        let reply = bad.line();
        assert!(reply.starts_with("-ERR Protocol error"), "{reply}");
        assert!(bad.closed());
        assert_eq!(good.call(&["PING"]), "+PONG");
    }
    // A declared bulk over the limit is refused from its header, before it is buffered.
    let mut cfg = config(dir.path());
    cfg.max_bulk_len = 1024;
    drop(good);
    server.shutdown().unwrap();
    let server = spawn(cfg).unwrap();
    let mut bad = Client::connect(server.tcp_addr());
    bad.w
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000\r\n")
        .unwrap();
    assert!(bad.line().starts_with("-ERR Protocol error"));
    server.shutdown().unwrap();
}

#[test]
fn password_client_limit_and_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.requirepass = Some("s3cret".into());
    cfg.max_clients = 2;
    cfg.timeout = 1;
    let server = spawn(cfg).unwrap();
    let mut a = Client::connect(server.tcp_addr());
    assert!(a.call(&["GET", "k"]).starts_with("-NOAUTH"));
    assert!(a.call(&["AUTH", "wrong"]).starts_with("-WRONGPASS"));
    assert_eq!(a.call(&["AUTH", "s3cret"]), "+OK");
    assert_eq!(a.call(&["SET", "k", "v"]), "+OK");
    let mut b = Client::connect(server.tcp_addr());
    assert_eq!(b.call(&["AUTH", "default", "s3cret"]), "+OK");
    let mut c = Client::connect(server.tcp_addr());
    let mut s = String::new();
    c.r.read_line(&mut s).unwrap();
    assert_eq!(s.trim_end(), "-ERR max number of clients reached");
    // Idle clients are closed after the timeout, which frees their slots.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(a.closed());
    let mut d = Client::connect(server.tcp_addr());
    assert!(d.call(&["PING"]).starts_with("-NOAUTH"));
    server.shutdown().unwrap();
}

#[test]
fn large_values_round_trip_and_full_store_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.capacity = 256 << 20;
    let server = spawn(cfg).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let big: Vec<u8> = (0..20 << 20).map(|i: u32| (i % 251) as u8).collect();
    c.send(&[b"SET", b"big", &big]);
    assert_eq!(c.line(), "+OK");
    c.send(&[b"GET", b"big"]);
    assert_eq!(c.bulk().unwrap(), big);
    // Fill the store: a clear error, and the server goes on.
    let mut full = None;
    for i in 0..64 {
        c.send(&[b"SET", format!("fill{i}").as_bytes(), &big]);
        let r = c.line();
        if r != "+OK" {
            full = Some(r);
            break;
        }
    }
    let full = full.expect("a 256 MiB store took 64 x 20 MiB");
    assert!(full.starts_with("-FULL"), "{full}");
    assert_eq!(c.call(&["PING"]), "+PONG");
    server.shutdown().unwrap();
}

#[test]
fn claims_go_back_when_the_connection_drops_and_shutdown_is_graceful() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let addr = server.tcp_addr();
    let mut p = Client::connect(addr);
    assert_eq!(p.call(&["FRAG.PUT", "3", "9", "0", "0", "payload"]), "+OK");
    assert_eq!(p.call(&["EVENT.SEAL", "3", "9"]), "+OK");
    let mut a = Client::connect(addr);
    a.send(&[b"EVENT.NEXT", b"LEASE", b"60000"]);
    assert_eq!(a.line(), "*4");
    let token = a.bulk().unwrap();
    drop(a);
    // The claim returns to READY; another consumer gets the same event.
    let mut b = Client::connect(addr);
    let mut got = None;
    for _ in 0..100 {
        b.send(&[b"EVENT.NEXT", b"BLOCK", b"100"]);
        let head = b.line();
        if head == "*4" {
            got = b.bulk();
            break;
        }
        assert_eq!(head, "$-1");
    }
    let got = got.expect("the event did not come back after its claimant disconnected");
    assert_eq!(got[..24], token[..24], "a different event was offered");
    // Old token refused, new one works.
    let t_old = String::from_utf8(token).unwrap();
    let t_new = String::from_utf8(got).unwrap();
    // Skip the rest of the EVENT.NEXT reply: [run, event], incomplete, fragments.
    for expect in ["*2", ":3", ":9", ":0", "*1", "*3", ":0", ":0"] {
        assert_eq!(b.line(), expect);
    }
    assert_eq!(b.bulk().unwrap(), b"payload");
    let lost = b.call(&["EVENT.ACK", &t_old, "REMOVE"]);
    assert!(lost.starts_with("-CLAIMLOST"), "{lost}");
    // The hint names the command a client uses and the connection rule, not the library call.
    assert!(
        lost.contains("EVENT.NEXT") && lost.contains("connection") && !lost.contains("next_event"),
        "{lost}"
    );
    assert_eq!(b.call(&["EVENT.ACK", &t_new, "REMOVE"]), "+OK");
    assert!(p
        .call(&["FRAG.PUT", "3", "9", "1", "0", "late"])
        .starts_with("-LATE"));
    // A blocked EVENT.NEXT is answered (nil) when the server stops.
    let mut w = Client::connect(addr);
    w.send(&[b"EVENT.NEXT", b"BLOCK", b"0"]);
    std::thread::sleep(Duration::from_millis(200));
    let stopper = std::thread::spawn(move || server.shutdown());
    assert_eq!(w.line(), "$-1");
    stopper.join().unwrap().unwrap();
}

/// Fix (issue 15): after DEL of every key of a full store, SET answered `-FULL` for about a
/// second (the space was dead, waiting to be recycled); now the write asks for the room.
#[test]
fn after_deleting_everything_sets_never_answer_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.capacity = 64 << 20;
    cfg.durability = hotstore::Durability::Memory;
    let server = spawn(cfg).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let v = vec![7u8; 1 << 20];
    let mut n = 0;
    loop {
        c.send(&[b"SET", format!("k{n}").as_bytes(), &v]);
        let r = c.line();
        if r != "+OK" {
            assert!(r.starts_with("-FULL"), "{r}");
            break;
        }
        n += 1;
        assert!(n < 64, "a 64 MiB store took 64 x 1 MiB");
    }
    assert!(n >= 32, "only {n} x 1 MiB fitted in 64 MiB");
    for i in 0..n {
        assert_eq!(c.call(&["DEL", &format!("k{i}")]), ":1");
    }
    // As many as the store guarantees (the first fill went past it: its writes ran on one
    // worker's lane until the store was short of room, then on the threads `block_in_place`
    // hands them to, whose lanes hold open segments of their own).
    let store = server.store().expect("an embedded store");
    let again = (store.stats().guaranteed_live_bytes / (v.len() as u64 + 64)).min(n as u64);
    assert!(again >= n as u64 / 2, "guaranteed {again} of {n}");
    for i in 0..again {
        c.send(&[b"SET", format!("again{i}").as_bytes(), &v]);
        assert_eq!(c.line(), "+OK", "SET {i} of {again} after DEL of every key");
    }
    server.shutdown().unwrap();
}

/// `offload-to` gives the store a second tier (and needs a capacity).
#[test]
fn offload_to_adds_a_second_tier_and_needs_a_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.offload_to = Some("lower".into());
    assert!(spawn(cfg.clone()).is_err(), "offload-to without a capacity");
    cfg.capacity = 64 << 20;
    let server = spawn(cfg).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    assert_eq!(c.call(&["SET", "k", "v"]), "+OK");
    server.shutdown().unwrap();
    let s = hotstore::Store::builder(dir.path()).open().unwrap();
    let tiers = s.stats().tiers;
    assert_eq!(tiers.len(), 2);
    assert_eq!(tiers[1].path, dir.path().join("lower"));
    assert_eq!(
        tiers[0].offload_high_water,
        Some(hotstore::OFFLOAD_HIGH_WATER)
    );
    drop(s);
    // Found by a new-user review (nineteenth session): on the existing store, --offload-to
    // needs no --capacity again (it is stored), and another directory than its own is
    // refused instead of ignored.
    let mut again = config(dir.path());
    again.offload_to = Some("lower".into());
    spawn(again.clone()).unwrap().shutdown().unwrap();
    again.offload_to = Some("elsewhere".into());
    let e = spawn(again)
        .err()
        .expect("served with another lower tier")
        .to_string();
    assert!(e.contains("fixed when a store is created"), "{e}");
}

/// Found by a new-user review (nineteenth session): a start that failed on its port (or its
/// cluster map) had already created the store, preallocated files included (1.1 GiB left
/// behind). Listeners and the map now come first.
#[test]
fn a_start_refused_for_its_port_or_map_creates_no_store() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = config(&tmp.path().join("s"));
    c.port = taken.local_addr().unwrap().port();
    c.capacity = 64 << 20;
    c.preallocate = 32 << 20;
    let e = spawn(c)
        .err()
        .expect("started on a port in use")
        .to_string();
    assert!(
        e.contains("cannot listen") && e.contains("another port"),
        "{e}"
    );
    assert!(!tmp.path().join("s").exists(), "a store was left behind");
    let mut c = config(&tmp.path().join("m"));
    c.port = 0;
    c.cluster = Some(tmp.path().join("no-such-map.toml"));
    assert!(spawn(c).is_err(), "started without its map");
    assert!(!tmp.path().join("m").exists(), "a store was left behind");
}
