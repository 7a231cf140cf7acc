//! Findings of a review of the client (eighteenth session), each failing before its fix: big
//! event numbers, and the connection's state after a response timeout in the middle of a
//! pipeline or a reply that does not parse.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::TestServer;
use hotstore_client::{Client, ConnectOptions, Error, Pipeline};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);
/// An event number above i64::MAX: the server answers it as a bulk string of its digits
/// (RESP2) or a big number (RESP3), docs/protocol.md.
const BIG: u64 = (1u64 << 63) + 42;

fn claim_big_event(resp3: bool) {
    let s = TestServer::start();
    let opts = ConnectOptions::from_url(&s.url()).unwrap().resp3(resp3);
    let mut c = Client::connect_with(&opts).unwrap();
    // One fragment: READY at once (the store's default policy).
    c.frag_put(7, BIG, 0, 0, b"big", None).unwrap();
    assert_eq!(
        c.frag_get(7, BIG, 0, 0).unwrap().as_deref(),
        Some(&b"big"[..])
    );
    let ev = c
        .event_next(LEASE, None)
        .expect("EVENT.NEXT of an event above i64::MAX")
        .expect("the event is READY");
    assert_eq!((ev.run, ev.event), (7, BIG));
    let range = c
        .event_range(7, BIG - 1, BIG + 1, None)
        .expect("EVENT.RANGE over an event above i64::MAX");
    assert_eq!(range.len(), 1);
    assert_eq!(range[0].event, BIG);
}

#[test]
fn claims_an_event_above_i64_max_resp2() {
    claim_big_event(false);
}

#[test]
fn claims_an_event_above_i64_max_resp3() {
    claim_big_event(true);
}

/// Reads one RESP command (an array of bulk strings); None at EOF.
fn read_command(r: &mut BufReader<TcpStream>) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut b = vec![0u8; len + 2];
        r.read_exact(&mut b).ok()?;
        b.truncate(len);
        args.push(b);
    }
    Some(args)
}

/// A fake server on one connection: the `n`th `command` (from 1) is answered `answer(n)`,
/// every other command `+OK`.
fn fake_server(command: &'static [u8], answer: fn(usize) -> &'static [u8]) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut n = 0;
        while let Some(cmd) = read_command(&mut r) {
            if cmd[0].eq_ignore_ascii_case(command) {
                n += 1;
                w.write_all(answer(n)).unwrap();
            } else {
                w.write_all(b"+OK\r\n").unwrap();
            }
        }
    });
    port
}

/// A fake server that holds back the replies to puts 2 and 3 until the client sends
/// its next command (so the client's response timeout always fires first), then sends them,
/// late, followed by the reply to that command: `-FULL`.
fn slow_server() -> u16 {
    fake_server(b"FRAG.PUT", |n| match n {
        1 => b"+OK\r\n",
        2 | 3 => b"", // in the group commit: answered late
        // The late replies of puts 2 and 3 (stored), then this one's: refused.
        _ => b"+OK\r\n+OK\r\n-FULL the store is full\r\n",
    })
}

#[test]
fn a_timeout_inside_a_pipeline_does_not_shift_later_replies() {
    let port = slow_server();
    let opts =
        ConnectOptions::tcp("127.0.0.1", port).response_timeout(Some(Duration::from_millis(300)));
    let mut c = Client::connect_with(&opts).unwrap();
    let mut p = Pipeline::new();
    for event in 1..=3u64 {
        p.frag_put(1, event, 0, 0, b"v", None);
    }
    let r = c.execute(&p);
    assert!(
        matches!(&r, Err(e) if e.is_connection()),
        "the pipeline times out at its second reply: {r:?}"
    );
    // The client is told to be unusable now; if it is used anyway, it must not hand one
    // request's reply to another: this put is refused (-FULL) by the server.
    let r = c.frag_put(1, 4, 0, 0, b"v", None);
    assert!(
        !matches!(r, Ok(())),
        "put 4 was refused with -FULL by the server, but the client reported it stored \
         (it read put 3's late +OK as put 4's reply)"
    );
    assert!(
        matches!(&r, Err(Error::Full(_)) | Err(Error::Connection(_))),
        "{r:?}"
    );
}

/// A fake server whose reply to the first FRAG.GET is malformed in its middle (a bulk string
/// of 3 bytes not followed by CRLF but by `:7\r\n`); later FRAG.GETs are answered `hello`.
fn malformed_server() -> u16 {
    fake_server(b"FRAG.GET", |n| match n {
        1 => b"$3\r\nabc:7\r\n",
        _ => b"$5\r\nhello\r\n",
    })
}

#[test]
fn a_malformed_reply_does_not_leave_its_rest_for_the_next_request() {
    let port = malformed_server();
    let opts =
        ConnectOptions::tcp("127.0.0.1", port).response_timeout(Some(Duration::from_secs(5)));
    let mut c = Client::connect_with(&opts).unwrap();
    let first = c.frag_get(1, 1, 0, 0);
    assert!(first.is_err(), "a malformed reply is an error: {first:?}");
    // Error::Protocol is documented to leave the client usable: the next request must get
    // its own reply (or a connection error), not the rest of the malformed one.
    let second = c.frag_get(1, 2, 0, 0);
    assert!(
        matches!(&second, Ok(Some(v)) if v == b"hello")
            || matches!(&second, Err(e) if e.is_connection()),
        "first: {first:?}, second: {second:?}"
    );
}
