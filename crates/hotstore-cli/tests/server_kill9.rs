//! `hotstore serve` is SIGKILLed during a pipelined write load; after a restart a fresh client
//! must find every acknowledged write byte-exact (and any unacknowledged write either absent
//! or whole). Three rounds on one store, with `Persisted` SETs and `Memory` FRAG.PUTs.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn start(dir: &std::path::Path) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hotstore"))
        .args(["serve", "--port", "0", "--dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start hotstore serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        if let Some(addr) = line.strip_prefix("hotstore: listening on 127.0.0.1:") {
            let port = addr.trim().parse().unwrap();
            // Keep draining stdout so the server never blocks on it.
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return (child, port);
        }
    }
    let status = child.wait();
    panic!("server exited without listening: {status:?}");
}

use hotstore_server::resp::encode_request as encode;

/// Reads one simple reply line (`+OK`, `-ERR ...`).
fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut s = String::new();
    if r.read_line(&mut s)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(s.trim_end().to_string())
}

/// Reads one bulk reply (None for nil).
fn read_bulk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let head = read_line(r).unwrap();
    let len: i64 = head
        .strip_prefix('$')
        .unwrap_or_else(|| panic!("{head}"))
        .parse()
        .unwrap();
    if len < 0 {
        return None;
    }
    let mut v = vec![0u8; len as usize + 2];
    r.read_exact(&mut v).unwrap();
    v.truncate(len as usize);
    Some(v)
}

/// The value written under sequence number `i` of writer `w`: its length and bytes follow
/// from (w, i), so a reader can check it without a copy of what was sent.
fn value(w: u64, i: u64) -> Vec<u8> {
    let len = 1 + ((i * 7919 + w * 104_729) % 20_000) as usize;
    let mut x = w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn set_key(w: u64, i: u64) -> Vec<u8> {
    format!("w{w}:{i:08}").into_bytes()
}

/// One writer: pipelines windows of 32 writes and records the acknowledged ones, until the
/// connection breaks. Writer 0 and 1 use SET (server default `persisted`); writer 2 uses
/// FRAG.PUT ... DURABILITY memory (event = i, detector = 0).
fn writer(port: u16, w: u64, start: u64, acked: Arc<Mutex<Vec<u64>>>, stop: Arc<AtomicBool>) {
    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    let mut i = start;
    while !stop.load(Ordering::Relaxed) {
        let window: Vec<u64> = (i..i + 32).collect();
        let mut req = Vec::new();
        for &j in &window {
            let v = value(w, j);
            if w == 2 {
                let ev = j.to_string();
                req.extend(encode(&[
                    b"FRAG.PUT",
                    b"7",
                    ev.as_bytes(),
                    b"0",
                    b"0",
                    &v,
                    b"DURABILITY",
                    b"memory",
                ]));
            } else {
                req.extend(encode(&[b"SET", &set_key(w, j), &v]));
            }
        }
        if stream.write_all(&req).is_err() {
            return;
        }
        for &j in &window {
            match read_line(&mut reader) {
                Ok(l) if l == "+OK" => acked.lock().unwrap().push(j),
                Ok(l) => panic!("write {w}/{j} refused: {l}"),
                Err(_) => return,
            }
        }
        i += 32;
    }
}

#[test]
fn acknowledged_writes_survive_sigkill_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut all_acked: Vec<Vec<u64>> = vec![Vec::new(); 3];
    let mut next = [0u64; 3];
    for round in 0..3 {
        let (mut child, port) = start(dir.path());
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Vec<_> = (0..3).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
        let threads: Vec<_> = (0..3u64)
            .map(|w| {
                let (a, s, n) = (acked[w as usize].clone(), stop.clone(), next[w as usize]);
                std::thread::spawn(move || writer(port, w, n, a, s))
            })
            .collect();
        // Let every writer get going (a new store first creates its segment files), then
        // kill at a different point of the load each round.
        let deadline = Instant::now() + Duration::from_secs(30);
        while acked.iter().any(|a| a.lock().unwrap().is_empty()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100 + 200 * round));
        // SIGKILL: no chance to flush anything.
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        for w in 0..3 {
            let a = acked[w].lock().unwrap();
            assert!(
                !a.is_empty(),
                "round {round}: writer {w} got no acknowledgement"
            );
            next[w] = a.iter().max().unwrap() + 1000;
            all_acked[w].extend(a.iter().copied());
        }

        // Restart; a fresh client checks everything acknowledged so far, in every round.
        let (mut child, port) = start(dir.path());
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut stream = stream;
        let mut checked = 0;
        for (w, acked) in all_acked.iter().enumerate() {
            let w = w as u64;
            for chunk in acked.chunks(64) {
                let mut req = Vec::new();
                for &j in chunk {
                    if w == 2 {
                        let ev = j.to_string();
                        req.extend(encode(&[b"FRAG.GET", b"7", ev.as_bytes(), b"0", b"0"]));
                    } else {
                        req.extend(encode(&[b"GET", &set_key(w, j)]));
                    }
                }
                stream.write_all(&req).unwrap();
                for &j in chunk {
                    let got = read_bulk(&mut reader);
                    assert!(
                        got.as_deref() == Some(&value(w, j)[..]),
                        "round {round}: acknowledged write {w}/{j} is {} after SIGKILL",
                        if got.is_some() { "damaged" } else { "missing" }
                    );
                    checked += 1;
                }
            }
        }
        // Unacknowledged writes just past the last acknowledged one: absent or whole.
        for w in 0..2u64 {
            for j in next[w as usize] - 1000..next[w as usize] - 1000 + 64 {
                stream
                    .write_all(&encode(&[b"GET", &set_key(w, j)]))
                    .unwrap();
                if let Some(v) = read_bulk(&mut reader) {
                    assert_eq!(v, value(w, j), "round {round}: torn value {w}/{j}");
                }
            }
        }
        eprintln!("round {round}: {checked} acknowledged writes present and byte-exact");
        drop(stream);
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert!(status.success(), "graceful stop failed: {status}");
    }
}
