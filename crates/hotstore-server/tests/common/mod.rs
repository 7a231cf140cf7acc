//! Shared by the server's integration tests: a raw-socket client and server settings.
#![allow(dead_code)] // each test file uses its own subset
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

pub use hotstore_server::resp::encode_request as encode;
use hotstore_server::ServerConfig;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A client speaking RESP over a plain socket, reading replies line by line.
pub struct Client {
    pub w: TcpStream,
    pub r: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: std::net::SocketAddr) -> Client {
        let w = TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }
    pub fn send(&mut self, args: &[&[u8]]) {
        self.w.write_all(&encode(args)).unwrap();
    }
    /// One reply line, or None if nothing came before the read timeout (or EOF).
    pub fn try_line(&mut self) -> Option<String> {
        let mut s = String::new();
        match self.r.read_line(&mut s) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(s.trim_end().to_string()),
        }
    }
    pub fn line(&mut self) -> String {
        self.try_line().expect("no reply")
    }
    pub fn call(&mut self, args: &[&str]) -> String {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.line()
    }
    pub fn bulk(&mut self) -> Option<Vec<u8>> {
        let head = self.line();
        let n: i64 = head[1..].parse().unwrap();
        if n < 0 {
            return None;
        }
        let mut v = vec![0; n as usize + 2];
        self.r.read_exact(&mut v).unwrap();
        v.truncate(n as usize);
        Some(v)
    }
    /// True if the server closed the connection.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }
}

/// A numeric field of an INFO section.
pub fn info_field(c: &mut Client, section: &str, field: &str) -> u64 {
    c.send(&[b"INFO", section.as_bytes()]);
    let text = String::from_utf8(c.bulk().unwrap()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Resident memory of this process (the server under test runs in it), in bytes (VmRSS of
/// /proc/self/status).
pub fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb << 10
}

/// Defaults for a test server on a free port.
pub fn config(dir: &std::path::Path) -> ServerConfig {
    let mut c = ServerConfig::for_dir(dir);
    c.port = 0;
    c.threads = 2;
    c
}

/// Waits until INFO says `n` clients are blocked in EVENT.NEXT BLOCK (the deadline only ends a
/// wait for a failing server).
pub fn wait_blocked(c: &mut Client, n: u64) {
    let give_up = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let blocked = info_field(c, "clients", "blocked_clients");
        if blocked == n {
            return;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "{blocked} clients blocked, not {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
