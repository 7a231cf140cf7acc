//! Findings of a review of EVENT.NEXT BLOCK as tasks (eighteenth session): parked waiters
//! when one change lets many of them proceed but the store calls the listener once (or not at
//! all). Each test failed before the fix (a waiter that answers now passes the wake-up on):
//! one waiter answered per 100 ms clock tick. The deadline only tells that apart from prompt.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, wait_blocked, Client};
use hotstore_server::spawn;
use std::time::{Duration, Instant};

const N: usize = 200;
/// Far beyond what delivering N replies takes (well under 1 s); the waiters' clock ticks
/// every 100 ms, so one-per-tick takes N * 100 ms = 20 s.
const GENEROUS: Duration = Duration::from_secs(12);

/// How many of `clients` got a first reply line starting with `prefix` before `deadline`
/// (each read on its own thread, so the order they are answered in does not matter).
fn answered_by(clients: &mut Vec<Client>, prefix: &str, deadline: Instant) -> usize {
    let threads: Vec<_> = clients
        .drain(..)
        .map(|mut c| {
            let prefix = prefix.to_string();
            std::thread::spawn(move || {
                let left = deadline.saturating_duration_since(Instant::now());
                c.w.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                    .unwrap();
                let ok = match c.try_line() {
                    Some(l) if l.starts_with(&prefix) => true,
                    Some(l) => panic!("unexpected reply {l}"),
                    None => false,
                };
                (ok, c)
            })
        })
        .collect();
    let mut n = 0;
    for t in threads {
        let (ok, c) = t.join().unwrap();
        n += usize::from(ok);
        clients.push(c);
    }
    n
}

fn group_waiters(addr: std::net::SocketAddr, group: &str) -> Vec<Client> {
    (0..N)
        .map(|i| {
            let mut c = Client::connect(addr);
            let name = format!("w{i}");
            c.send(&[
                b"EVENT.NEXT",
                b"BLOCK",
                b"0",
                b"GROUP",
                group.as_bytes(),
                b"CONSUMER",
                name.as_bytes(),
            ]);
            c
        })
        .collect()
}

/// N claims of a group whose leases end together go back to the group; N consumers of the
/// group are parked. Each should get one promptly. The group's lease sweep (in `pick`) calls
/// no listener, and the clock wakes one waiter per group per tick: one event per 100 ms.
#[test]
fn group_leases_ending_together_reach_every_parked_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut admin = Client::connect(server.tcp_addr());
    assert_eq!(admin.call(&["EVENT.GROUP", "CREATE", "sel"]), "+OK");
    for e in 0..N {
        let e = e.to_string();
        assert_eq!(admin.call(&["FRAG.PUT", "1", &e, "0", "0", "v"]), "+OK");
    }
    // A consumer takes them all with a short lease and then hangs (stays connected).
    let mut holder = Client::connect(server.tcp_addr());
    let count = N.to_string();
    let lease_start = Instant::now();
    holder.send(&[
        b"EVENT.NEXT",
        b"GROUP",
        b"sel",
        b"CONSUMER",
        b"holder",
        b"LEASE",
        b"3000",
        b"COUNT",
        count.as_bytes(),
    ]);
    assert_eq!(holder.line(), format!("*{N}"));
    let mut waiters = group_waiters(server.tcp_addr(), "sel");
    wait_blocked(&mut admin, N as u64);
    // (On a machine so busy that the leases ended before every consumer parked, the late
    // ones find the events at once: the test then checks less, but still holds.)
    let deadline = lease_start + Duration::from_millis(3000) + GENEROUS;
    let got = answered_by(&mut waiters, "*4", deadline);
    assert_eq!(
        got, N,
        "{got} of {N} parked consumers got an event within {GENEROUS:?} of the leases' end"
    );
    drop(holder);
    drop(waiters);
    server.shutdown().unwrap();
}

/// N consumers parked in a group that is destroyed: each should be answered (-NOGROUP)
/// promptly. `drop_group` calls the listener once, which wakes one waiter of the group.
#[test]
fn destroying_a_group_answers_all_its_parked_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut admin = Client::connect(server.tcp_addr());
    assert_eq!(admin.call(&["EVENT.GROUP", "CREATE", "sel"]), "+OK");
    let mut waiters = group_waiters(server.tcp_addr(), "sel");
    wait_blocked(&mut admin, N as u64);
    assert_eq!(admin.call(&["EVENT.GROUP", "DESTROY", "sel"]), "+OK");
    let deadline = Instant::now() + GENEROUS;
    let got = answered_by(&mut waiters, "-NOGROUP", deadline);
    assert_eq!(
        got, N,
        "{got} of {N} consumers of the destroyed group answered within {GENEROUS:?}"
    );
    drop(waiters);
    server.shutdown().unwrap();
}

/// N consumers parked on the default queue when the first group is created: EVENT.NEXT
/// without GROUP is now an error, and each should be told promptly. `create_group` calls no
/// listener at all; the clock finds them one per tick.
#[test]
fn creating_the_first_group_answers_the_default_queues_parked_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut admin = Client::connect(server.tcp_addr());
    let mut waiters: Vec<Client> = (0..N)
        .map(|i| {
            let mut c = Client::connect(server.tcp_addr());
            let name = format!("w{i}");
            c.send(&[b"EVENT.NEXT", b"BLOCK", b"0", b"CONSUMER", name.as_bytes()]);
            c
        })
        .collect();
    wait_blocked(&mut admin, N as u64);
    assert_eq!(admin.call(&["EVENT.GROUP", "CREATE", "sel"]), "+OK");
    let deadline = Instant::now() + GENEROUS;
    let got = answered_by(&mut waiters, "-ERR", deadline);
    assert_eq!(
        got, N,
        "{got} of {N} default-queue consumers answered within {GENEROUS:?} of the group's creation"
    );
    drop(waiters);
    server.shutdown().unwrap();
}
