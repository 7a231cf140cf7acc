//! `--max-reply-memory`: large replies that clients asked for and do not read are bounded
//! server-wide. A client that reads nothing holds its reply (the server cannot send it);
//! another large reply past the budget is refused with `-BUSY`, and fits again once the first
//! client reads. Each client's reply was bounded only by `--max-reply-len` (512 MiB by
//! default), so a few hundred clients that did not read could take the server's memory.
//!
//! No timing: the test waits (bounded only by a failure deadline) for the server to report
//! the held reply, and reads the first reply whole before asking again.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, info_field, Client};
use hotstore_server::spawn;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn wait_pending(c: &mut Client, at_least: u64, at_most: u64) -> u64 {
    let give_up = Instant::now() + Duration::from_secs(120);
    loop {
        let pending = info_field(c, "memory", "hotstore_reply_bytes_pending");
        if (at_least..=at_most).contains(&pending) {
            return pending;
        }
        assert!(
            Instant::now() < give_up,
            "{pending} bytes of replies pending"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn large_replies_nobody_reads_are_bounded_server_wide() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.durability = hotstore::Durability::Memory;
    cfg.max_reply_memory = 96 * MIB;
    let server = spawn(cfg).unwrap();
    let value = vec![b'v'; 64 * MIB];
    let mut admin = Client::connect(server.tcp_addr());
    admin.send(&[b"SET", b"big", &value]);
    assert_eq!(admin.line(), "+OK");
    // A client asks for 64 MiB and reads nothing: far more than the socket buffers take.
    let mut idle = Client::connect(server.tcp_addr());
    idle.send(&[b"GET", b"big"]);
    wait_pending(&mut admin, 64 * MIB as u64, u64::MAX);
    // Another 64 MiB reply would pass the 96 MiB budget: refused, nothing built.
    let mut other = Client::connect(server.tcp_addr());
    let refused = other.call(&["GET", "big"]);
    assert!(refused.starts_with("-BUSY"), "{refused}");
    assert!(refused.contains("max-reply-memory"), "{refused}");
    assert_eq!(
        info_field(&mut admin, "memory", "hotstore_replies_refused"),
        1
    );
    // Small replies are not held back.
    assert_eq!(other.call(&["PING"]), "+PONG");
    // The first client reads its reply: the memory is given back, the second one fits.
    assert_eq!(idle.bulk().unwrap().len(), value.len());
    wait_pending(&mut admin, 0, 0);
    other.send(&[b"GET", b"big"]);
    assert_eq!(other.bulk().unwrap().len(), value.len());
    wait_pending(&mut admin, 0, 0);
    drop((idle, other));
    server.shutdown().unwrap();
}
