//! `--max-buffer-memory` is a bound on what clients' requests make the server allocate: many
//! connections each holding a huge incomplete request of one-byte arguments (16 bytes of
//! argument vector per 7 bytes of input) keep the server's resident memory within the budget
//! plus a stated margin, and a request larger than the whole budget is refused with a clear
//! error. Alone in its test binary: RSS is the process's (the server runs in it).
//!
//! No timing: the test waits (bounded only by a failure deadline) until every client is
//! either wholly read or waiting for the budget, as the server reports them.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, info_field, rss, Client};
use hotstore_server::spawn;
use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Arguments of the huge request (the server's limit per request is 1 Mi).
const ARGS: usize = 1_000_000;

/// `*ARGS` followed by all its one-byte arguments but the last: never complete.
fn incomplete_request() -> Vec<u8> {
    let mut req = format!("*{ARGS}\r\n$4\r\nMGET\r\n").into_bytes();
    for _ in 2..ARGS {
        req.extend_from_slice(b"$1\r\nx\r\n");
    }
    req
}

/// `qbuf=` of the client named `name` in CLIENT LIST, and whether the server reads it
/// (`events=r`; empty while it waits for the budget); None once it is gone.
fn qbuf(list: &str, name: &str) -> Option<(usize, bool)> {
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" name={name} ")))?;
    let field = |k: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(k))
            .unwrap()
            .to_string()
    };
    Some((field("qbuf=").parse().unwrap(), field("events=") == "r"))
}

/// One test (RSS is the whole process's: nothing else may run meanwhile).
#[test]
fn request_memory_stays_within_max_buffer_memory() {
    a_request_whose_arguments_exceed_the_budget_is_refused();
    incomplete_requests_of_many_small_arguments_stay_within_the_budget();
}

fn incomplete_requests_of_many_small_arguments_stay_within_the_budget() {
    const CLIENTS: usize = 8;
    const BUDGET: u64 = 64 * MIB;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_bulk_len = MIB as usize;
    cfg.max_reply_len = MIB as usize;
    cfg.max_buffer_memory = BUDGET as usize;
    let server = spawn(cfg).unwrap();
    let mut control = Client::connect(server.tcp_addr());
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|i| {
            let mut c = Client::connect(server.tcp_addr());
            assert_eq!(c.call(&["CLIENT", "SETNAME", &format!("big{i}")]), "+OK");
            c
        })
        .collect();
    // One copy, shared by the senders (the test's own memory is in the RSS too).
    let req = std::sync::Arc::new(incomplete_request());
    let before = rss();

    // Each sender blocks in its write once the server stops reading it (budget used up).
    let senders: Vec<_> = clients
        .iter_mut()
        .map(|c| {
            let mut w = c.w.try_clone().unwrap();
            let req = req.clone();
            std::thread::spawn(move || {
                let _ = w.write_all(&req[..]);
            })
        })
        .collect();

    // Settled when every client is wholly read, waiting for the budget, or refused: when the
    // clients holding the budget all wait for more, one of them is refused so that the others
    // can go on.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut peak = 0;
    let mut waiting;
    let mut refused: Vec<usize>;
    loop {
        peak = peak.max(rss());
        control.send(&[b"CLIENT", b"LIST"]);
        let list = String::from_utf8(control.bulk().unwrap()).unwrap();
        let q: Vec<Option<(usize, bool)>> = (0..CLIENTS)
            .map(|i| qbuf(&list, &format!("big{i}")))
            .collect();
        let read = q.iter().flatten().filter(|(n, _)| *n == req.len()).count();
        waiting = q
            .iter()
            .flatten()
            .filter(|(n, reading)| *n < req.len() && !reading)
            .count();
        refused = (0..CLIENTS).filter(|&i| q[i].is_none()).collect();
        if read + waiting + refused.len() == CLIENTS {
            assert!(
                read >= 1,
                "no client could be read within the budget: {list}"
            );
            assert!(
                waiting + refused.len() >= 1,
                "the budget let every client in: raise CLIENTS"
            );
            break;
        }
        assert!(Instant::now() < deadline, "clients never settled: {list}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let charged = info_field(&mut control, "memory", "hotstore_request_buffer_bytes");
    let after = rss();
    peak = peak.max(after);
    let grew = peak.saturating_sub(before);
    // Margin: allocator slack (a buffer being regrown exists twice for a moment, freed heap
    // kept by malloc) and per-connection buffers that are not charged (64 KiB read and reply
    // buffers, 1024 argument ranges).
    let margin = BUDGET * 3 / 4 + CLIENTS as u64 * MIB;
    println!(
        "RSS {} MiB before, {} MiB peak ({} MiB more) with {CLIENTS} clients of {ARGS} one-byte \
         arguments ({waiting} waiting for the budget, {} refused); {} MiB charged of a {} MiB budget",
        before / MIB,
        peak / MIB,
        grew / MIB,
        refused.len(),
        charged / MIB,
        BUDGET / MIB
    );
    assert!(charged <= BUDGET);
    assert!(
        grew <= BUDGET + margin,
        "RSS grew by {} MiB for a budget of {} MiB (+{} MiB margin)",
        grew / MIB,
        BUDGET / MIB,
        margin / MIB
    );

    for &i in &refused {
        let line = clients[i].line();
        assert!(
            line.starts_with("-ERR Protocol error: max-buffer-memory exhausted"),
            "{line}"
        );
    }

    // Clients waiting for the budget are not read, so they notice no disconnection: a
    // server shutdown ends them (and gives every charge back).
    drop(control);
    let t = Instant::now();
    server.shutdown().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "shutdown waited for waiting clients"
    );
    for c in &clients {
        let _ = c.w.shutdown(Shutdown::Both);
    }
    for s in senders {
        s.join().unwrap();
    }
}

fn a_request_whose_arguments_exceed_the_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_bulk_len = MIB as usize;
    cfg.max_reply_len = MIB as usize;
    // Less than the ~24 MiB (7 MiB of input, 16 MiB of argument vector) the request needs.
    cfg.max_buffer_memory = 16 * MIB as usize;
    let server = spawn(cfg).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let mut w = c.w.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = w.write_all(&incomplete_request());
    });
    assert_eq!(
        c.line(),
        "-ERR Protocol error: request larger than max-buffer-memory (the server-wide read budget)"
    );
    assert!(c.closed());
    sender.join().unwrap();
    let mut other = Client::connect(server.tcp_addr());
    assert_eq!(other.call(&["PING"]), "+PONG");
    assert_eq!(
        info_field(&mut other, "memory", "hotstore_request_buffer_bytes"),
        0
    );
    server.shutdown().unwrap();
}
