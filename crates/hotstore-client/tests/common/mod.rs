//! An in-process server on a fresh store, for the client tests.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{EventPolicy, Store, TierSpec};
use hotstore_server::{ServerConfig, ServerHandle};
use std::path::PathBuf;

/// Settings of a test server.
#[derive(Default)]
pub struct Setup {
    /// Event policy written to the store before the server opens it (default: the store's,
    /// one fragment per event).
    pub policy: Option<EventPolicy>,
    /// `requirepass`.
    pub password: Option<String>,
    /// First tier's capacity, set when the store is created.
    pub capacity: Option<u64>,
    /// Also serve a Unix socket.
    pub unix: bool,
}

/// A running server; stopped and its store deleted when dropped.
pub struct TestServer {
    handle: Option<ServerHandle>,
    pub port: u16,
    pub unix: Option<PathBuf>,
    pub password: Option<String>,
    _dir: tempfile::TempDir,
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hotstore-client-test-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("temp dir")
}

impl TestServer {
    /// A server with the store's defaults: one fragment makes an event.
    pub fn start() -> TestServer {
        Self::start_with(Setup::default())
    }

    /// A server whose events stay open until sealed (expected fragments 0).
    pub fn sealed_events() -> TestServer {
        Self::start_with(Setup {
            policy: Some(EventPolicy::expecting(0)),
            ..Setup::default()
        })
    }

    pub fn start_with(setup: Setup) -> TestServer {
        let dir = temp_dir();
        let store_dir = dir.path().join("store");
        if setup.policy.is_some() || setup.capacity.is_some() {
            let mut b = Store::builder(&store_dir);
            if let Some(cap) = setup.capacity {
                b = b
                    .segment_size_bytes(64 << 10)
                    .tier(TierSpec::new(".").capacity_bytes(cap));
            }
            let store = b.open().expect("create the store");
            if let Some(p) = setup.policy {
                store.set_event_policy(p).expect("set the policy");
            }
            store.close().expect("close the store");
        }
        let mut config = ServerConfig::for_dir(&store_dir);
        config.port = 0;
        config.threads = 2;
        config.durability = hotstore::Durability::Memory;
        config.requirepass = setup.password.clone();
        let unix = setup.unix.then(|| dir.path().join("hotstore.sock"));
        config.unixsocket = unix.clone();
        let handle = hotstore_server::spawn(config).expect("start the server");
        let port = handle.tcp_addr().port();
        TestServer {
            handle: Some(handle),
            port,
            unix,
            password: setup.password,
            _dir: dir,
        }
    }

    /// `redis://127.0.0.1:PORT` (with the password if the server has one).
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The URL without the password.
    pub fn url_without_password(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server, checking that it stops cleanly.
    pub fn stop(mut self) {
        if let Some(h) = self.handle.take() {
            std::thread::spawn(move || h.shutdown())
                .join()
                .unwrap()
                .expect("clean shutdown");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            // On a thread of its own: `shutdown` blocks on the server's runtime, which tokio
            // refuses inside an async test.
            let _ = std::thread::spawn(move || h.shutdown()).join();
        }
    }
}

/// A recognisable value of `len` bytes for fragment `(event, detector)`.
pub fn value(event: u64, detector: u16, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 ^ event.wrapping_mul(31) ^ (u64::from(detector) * 7)) as u8)
        .collect()
}
