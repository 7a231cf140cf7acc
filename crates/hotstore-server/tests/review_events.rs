//! Findings of a review of the server's event commands (seventeenth session): each test
//! failed on the code before its fix.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, info_field, rss, Client};
use hotstore_server::spawn;
use std::io::Write;

/// Claims the next event; returns its token (the rest of the reply is skipped).
fn next_token(c: &mut Client, extra: &[&str]) -> String {
    let mut args = vec!["EVENT.NEXT"];
    args.extend_from_slice(extra);
    let head = c.call(&args);
    assert_eq!(head, "*4", "a claim");
    let token = String::from_utf8(c.bulk().unwrap()).unwrap();
    skip_to_pong(c);
    token
}

/// Reads the rest of the pending reply by sending PING and reading up to its `+PONG`.
fn skip_to_pong(c: &mut Client) {
    c.send(&[b"PING"]);
    while c.line() != "+PONG" {}
}

fn syncs(c: &mut Client) -> u64 {
    info_field(c, "persistence", "hotstore_group_syncs")
}

/// `-ACKED` and `-LATE` tell a client to drop its data: like DEL's absence, the
/// acknowledgement they report must be durable before they are sent (a retried ACK got
/// `-ACKED` while the first one's sync was still running).
#[test]
fn acked_and_late_answers_wait_for_the_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    assert_eq!(c.call(&["FRAG.PUT", "9", "1", "0", "0", "v"]), "+OK");
    let token = next_token(&mut c, &[]);
    assert_eq!(c.call(&["EVENT.ACK", &token, "REMOVE"]), "+OK");
    let before = syncs(&mut c);
    assert!(c
        .call(&["EVENT.ACK", &token, "REMOVE"])
        .starts_with("-ACKED"));
    let after_acked = syncs(&mut c);
    assert!(after_acked > before, "-ACKED without a group commit");
    assert!(c
        .call(&["FRAG.PUT", "9", "1", "1", "0", "late"])
        .starts_with("-LATE"));
    assert!(syncs(&mut c) > after_acked, "-LATE without a group commit");
    // A retrying producer sealing its consumed event hears it was acknowledged, not that
    // it does not exist.
    let sealed = c.call(&["EVENT.SEAL", "9", "1"]);
    assert!(sealed.starts_with("-ACKED"), "{sealed}");
    drop(c);
    server.shutdown().unwrap();
}

/// A bad token after a good one aborted EVENT.ACK after the good claim had left the
/// connection's claims: the disconnect no longer gave it back, and it stayed held for its
/// whole lease.
#[test]
fn a_refused_multi_token_ack_leaves_the_good_claim_to_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    assert_eq!(c.call(&["FRAG.PUT", "2", "1", "0", "0", "x"]), "+OK");
    let token = next_token(&mut c, &["LEASE", "600000"]);
    let refused = c.call(&["EVENT.ACK", &token, "not-a-token", "REMOVE"]);
    assert!(refused.starts_with("-ERR"), "{refused}");
    drop(c);
    // The disconnect releases the claim: another consumer gets the event (the wait only
    // bounds how long the release may take).
    let mut d = Client::connect(server.tcp_addr());
    let again = next_token(&mut d, &["BLOCK", "20000"]);
    assert!(
        again.starts_with(&token[..token.find(':').unwrap()]),
        "{again} {token}"
    );
    drop(d);
    server.shutdown().unwrap();
}

/// Event fields above `i64::MAX` were written as negative integers, which the client could
/// not send back.
#[test]
fn event_fields_above_i64_max_are_answered_as_their_digits() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let big = "9223372036854775808";
    assert_eq!(c.call(&["FRAG.PUT", "5", big, "0", "0", "v"]), "+OK");
    assert_eq!(
        c.call(&[
            "EVENT.RANGE",
            "5",
            "9223372036854775800",
            "9223372036854775900"
        ]),
        "*1"
    );
    assert_eq!(c.line(), "*5");
    assert_eq!(c.bulk().unwrap(), big.as_bytes());
    skip_to_pong(&mut c);
    assert_eq!(c.call(&["EVENT.GET", "5", big]), "*1");
    skip_to_pong(&mut c);
    drop(c);
    server.shutdown().unwrap();
}

/// EVENT.NEXT COUNT built its whole reply whatever --max-reply-len said; a consumer name had
/// no length limit (each one is remembered by its group). A batch stops once its reply reaches
/// the limit, without taking and giving back a claim (that counted a delivery: with
/// `max_deliveries 1` it parked an event nobody had received).
#[test]
fn a_claim_batch_stops_at_the_reply_limit_and_consumer_names_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_bulk_len = 1 << 20;
    cfg.max_reply_len = 1 << 20;
    cfg.max_deliveries = 1;
    let server = spawn(cfg).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let value = vec![b'x'; 600_000];
    for e in 1..=4u8 {
        c.send(&[b"FRAG.PUT", b"4", &[b'0' + e], b"0", b"0", &value]);
        assert_eq!(c.line(), "+OK");
    }
    for _ in 0..2 {
        c.send(&[b"EVENT.NEXT", b"COUNT", b"10"]);
        assert_eq!(c.line(), "*2", "two of 600 kB reach 1 MiB: the batch stops");
        skip_to_pong(&mut c);
    }
    assert_eq!(
        c.call(&["EVENT.NEXT"]),
        "$-1",
        "all four delivered, none parked"
    );
    let long = "c".repeat(hotstore::MAX_CONSUMER_NAME + 1);
    let refused = c.call(&["EVENT.NEXT", "CONSUMER", &long]);
    assert!(refused.contains("consumer name is at most"), "{refused}");
    drop(c);
    server.shutdown().unwrap();
}

/// Only a reply starting with an error was counted: the `-ACKED`s inside a batched
/// EVENT.ACK's array were not.
#[test]
fn errors_inside_an_array_reply_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    for e in ["1", "2"] {
        assert_eq!(c.call(&["FRAG.PUT", "3", e, "0", "0", "v"]), "+OK");
    }
    let a = next_token(&mut c, &[]);
    let b = next_token(&mut c, &[]);
    assert_eq!(c.call(&["EVENT.ACK", &a, &b, "REMOVE"]), "*2");
    skip_to_pong(&mut c);
    let before = info_field(&mut c, "stats", "total_error_replies");
    assert_eq!(c.call(&["EVENT.ACK", &a, &b, "REMOVE"]), "*2");
    assert!(c.line().starts_with("-ACKED"));
    assert!(c.line().starts_with("-ACKED"));
    assert_eq!(
        info_field(&mut c, "stats", "total_error_replies"),
        before + 2
    );
    drop(c);
    server.shutdown().unwrap();
}

/// A connection kept the capacity of its largest reply for its whole life: idle clients
/// that had each read one large value held that much memory each.
#[test]
fn an_idle_connection_gives_back_its_large_reply_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(server.tcp_addr());
    let value = vec![b'v'; 32 << 20];
    c.send(&[b"SET", b"big", &value]);
    assert_eq!(c.line(), "+OK");
    let before = rss();
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut d = Client::connect(server.tcp_addr());
        d.w.write_all(&common::encode(&[b"GET", b"big"])).unwrap();
        assert_eq!(d.bulk().unwrap().len(), value.len());
        skip_to_pong(&mut d);
        idle.push(d);
    }
    // Idle connections give their buffers back after a while (the deadline only bounds
    // the wait). Before the fix: 8 x 32 MiB held for as long as the connections lived.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let grown = rss().saturating_sub(before);
        if grown < 128 << 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "grew {} MiB",
            grown >> 20
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop((c, idle));
    server.shutdown().unwrap();
}
