//! EVENT.NEXT BLOCK as a farm uses it: many consumers parked at once, each event delivered to
//! exactly one of them, events made READY by a timeout reaching a parked consumer. The waits
//! are tasks, not threads (each used to hold a blocking thread polling in 100 ms slices).
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, info_field, wait_blocked, Client};
use hotstore_server::spawn;
use std::collections::HashSet;

/// Threads of this process (the server under test runs in it).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The event id (run, event) of the claim reply `*4` just read: token, id array, ...
fn claimed_event(c: &mut Client) -> String {
    let _token = c.bulk().unwrap();
    // The id: an array of the event's field values.
    let head = c.line();
    let n: usize = head.trim_start_matches('*').parse().unwrap();
    let id: Vec<String> = (0..n).map(|_| c.line()).collect();
    c.send(&[b"PING"]);
    while c.line() != "+PONG" {}
    id.join(",")
}

#[test]
fn many_blocked_consumers_take_no_thread_each_and_share_the_events() {
    const WAITERS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut admin = Client::connect(server.tcp_addr());
    let before = threads();
    let mut waiters: Vec<Client> = (0..WAITERS)
        .map(|i| {
            let mut c = Client::connect(server.tcp_addr());
            let name = format!("w{i}");
            c.send(&[b"EVENT.NEXT", b"BLOCK", b"0", b"CONSUMER", name.as_bytes()]);
            c
        })
        .collect();
    wait_blocked(&mut admin, WAITERS as u64);
    let during = threads();
    assert!(
        during < before + 16,
        "{WAITERS} blocked consumers took {} threads",
        during - before
    );
    // One event: one consumer gets it, the others stay parked.
    assert_eq!(admin.call(&["FRAG.PUT", "1", "0", "0", "0", "v"]), "+OK");
    wait_blocked(&mut admin, WAITERS as u64 - 1);
    // The rest: every consumer gets exactly one, no event twice.
    for e in 1..WAITERS {
        let e = e.to_string();
        assert_eq!(admin.call(&["FRAG.PUT", "1", &e, "0", "0", "v"]), "+OK");
    }
    let mut seen = HashSet::new();
    for c in &mut waiters {
        assert_eq!(c.line(), "*4", "a claim");
        let id = claimed_event(c);
        assert!(seen.insert(id.clone()), "event {id} delivered twice");
    }
    assert_eq!(seen.len(), WAITERS);
    assert_eq!(info_field(&mut admin, "clients", "blocked_clients"), 0);
    drop(waiters);
    server.shutdown().unwrap();
}

/// An event made READY by its timeout is found by looking, not announced: a parked consumer
/// still gets it (the waiters' clock looks when the timeout is due).
#[test]
fn a_blocked_consumer_gets_an_event_made_ready_by_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.expected_fragments = Some(2);
    cfg.incomplete_timeout_ms = Some(300);
    let server = spawn(cfg).unwrap();
    let mut admin = Client::connect(server.tcp_addr());
    let mut w = Client::connect(server.tcp_addr());
    w.send(&[b"EVENT.NEXT", b"BLOCK", b"0"]);
    wait_blocked(&mut admin, 1);
    // One fragment of two: OPEN until the timeout.
    assert_eq!(admin.call(&["FRAG.PUT", "1", "7", "0", "0", "v"]), "+OK");
    assert_eq!(w.line(), "*4", "the timed-out event");
    assert_eq!(claimed_event(&mut w), ":1,:7");
    drop(w);
    server.shutdown().unwrap();
}

/// A consumer group's parked consumers get the group's events, one each.
#[test]
fn blocked_consumers_of_a_group_share_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut admin = Client::connect(server.tcp_addr());
    assert_eq!(admin.call(&["EVENT.GROUP", "CREATE", "sel"]), "+OK");
    let mut waiters: Vec<Client> = (0..3)
        .map(|i| {
            let mut c = Client::connect(server.tcp_addr());
            let name = format!("g{i}");
            c.send(&[
                b"EVENT.NEXT",
                b"BLOCK",
                b"0",
                b"GROUP",
                b"sel",
                b"CONSUMER",
                name.as_bytes(),
            ]);
            c
        })
        .collect();
    wait_blocked(&mut admin, 3);
    for e in 0..3 {
        let e = e.to_string();
        assert_eq!(admin.call(&["FRAG.PUT", "2", &e, "0", "0", "v"]), "+OK");
    }
    let mut seen = HashSet::new();
    for c in &mut waiters {
        assert_eq!(c.line(), "*4", "a claim");
        assert!(seen.insert(claimed_event(c)));
    }
    drop(waiters);
    server.shutdown().unwrap();
}
