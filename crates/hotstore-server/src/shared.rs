//! State shared by all connections: the store, settings, the client registry, SCAN cursors
//! and the shutdown signal.

use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::resp::Limits;
use crate::sync::GroupSync;
use hotstore::{Durability, Store};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, Notify, Semaphore};

/// Bytes of read buffer every connection has without asking the shared budget.
pub const BASE_BUFFER: usize = 64 << 10;
/// The shared buffer budget is counted in units of this many bytes.
pub const BUDGET_UNIT: usize = 1 << 10;

/// State shared by all connections.
pub struct Shared {
    /// The store.
    pub store: Arc<Store>,
    /// Set once the store's event table is built (`Store::track_events`), by the first
    /// connection that uses events, on a blocking thread; the others wait for it here
    /// (one blocking thread, not one per waiting connection).
    pub events_built: tokio::sync::OnceCell<()>,
    /// Settings.
    pub config: ServerConfig,
    /// Request limits.
    pub limits: Limits,
    /// Group commit.
    pub sync: GroupSync,
    /// Counters and histograms.
    pub metrics: Metrics,
    /// Connected clients.
    pub clients: Clients,
    /// Open SCAN cursors.
    pub scans: Mutex<ScanCursors>,
    /// Set to true to stop the server.
    pub shutdown: watch::Sender<bool>,
    /// Start time.
    pub started: Instant,
    /// Read-buffer memory beyond [`BASE_BUFFER`] per client, in [`BUDGET_UNIT`]s.
    pub buffer_budget: Arc<Semaphore>,
    /// The budget's total, in units.
    pub buffer_budget_units: usize,
    /// Connections waiting for room in the budget (not read meanwhile), with what they hold.
    pub buffer_waiters: Mutex<BudgetWaiters>,
    /// Told whenever a connection gives budget back.
    pub buffer_freed: Arc<Notify>,
    /// The TCP port actually bound.
    pub tcp_port: u16,
    /// The recorder `RECORD.*` commands reach, if the server runs one.
    pub recorder: Option<Arc<dyn crate::record::RecordControl>>,
    /// This node's place in the cluster, in cluster mode.
    pub cluster: Option<crate::cluster::Cluster>,
    /// Large replies built and not yet sent, all clients, against `--max-reply-memory`.
    pub reply_memory: Arc<ReplyMemory>,
    /// Connections waiting in EVENT.NEXT BLOCK.
    pub event_waiters: Arc<crate::waiters::EventWaiters>,
    /// Tells `event_waiters` of the store's changes while the server lives.
    pub _event_listener: hotstore::EventListener,
}

impl Shared {
    /// The durability a write asked for, or the server's default.
    pub fn durability(&self, asked: Option<Durability>) -> Durability {
        asked.unwrap_or(self.config.durability)
    }

    /// Asks the server to stop.
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// True once a stop was asked for.
    pub fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// The metrics page (Prometheus text), with the store's and the clients' figures read now.
    pub fn metrics_page(&self) -> String {
        let stats = self.store.stats();
        let groups = self.store.groups();
        self.metrics.render(&crate::metrics::Scrape {
            stats: &stats,
            groups: &groups,
            oldest_ready: self.store.oldest_ready_age(),
            oldest_claimed: self.store.pending(1).first().map(|p| p.held),
            connected: self.clients.connected.load(Ordering::Relaxed),
            blocked: self.event_waiters.waiting(),
            reply_pending: self.reply_memory.pending(),
            replies_refused: self.reply_memory.refused(),
            rejected: self.clients.rejected.load(Ordering::Relaxed),
            recorder: self.recorder.as_ref().map(|r| r.status()),
        })
    }
}

/// Replies from this size on are counted against the server-wide reply budget (smaller ones are
/// bounded per connection: replies are sent once 64 KiB wait).
pub const LARGE_REPLY: usize = 1 << 20;

/// Bytes of large replies built and not yet sent, all clients together. A client that asks
/// for large values and does not read them holds its reply until it does; without a shared
/// bound, many such clients could take the server's memory (each is bounded only by
/// `--max-reply-len`).
pub struct ReplyMemory {
    pending: AtomicUsize,
    max: usize,
    refused: AtomicU64,
}

/// A reservation of reply memory, given back when dropped (once its replies are sent, or
/// the connection ends).
pub struct ReplyCharge {
    memory: Arc<ReplyMemory>,
    bytes: usize,
}

impl ReplyMemory {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(ReplyMemory {
            pending: AtomicUsize::new(0),
            max,
            refused: AtomicU64::new(0),
        })
    }

    /// Bytes of large replies waiting to be sent now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Replies refused for want of reply memory, since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` into `charge` (a reply about to be built); refused, with the reply's
    /// error text, if the budget cannot take them. Small replies are not counted.
    pub fn reserve(
        self: &Arc<Self>,
        charge: &mut Option<ReplyCharge>,
        bytes: usize,
    ) -> Result<(), String> {
        if bytes < LARGE_REPLY {
            return Ok(());
        }
        let before = self.pending.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > self.max && before > 0 {
            self.pending.fetch_sub(bytes, Ordering::Relaxed);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(format!(
                "BUSY reply memory full: {before} bytes of replies wait for their clients to \
                 read them (--max-reply-memory {}); retry, or read the replies already asked for",
                self.max
            ));
        }
        self.pending.fetch_sub(bytes, Ordering::Relaxed);
        self.count(charge, bytes);
        Ok(())
    }
}

impl ReplyMemory {
    /// Counts `bytes` of a reply that cannot be refused (a claim already made) into `charge`,
    /// so that others see the memory taken.
    pub fn count(self: &Arc<Self>, charge: &mut Option<ReplyCharge>, bytes: usize) {
        if bytes < LARGE_REPLY {
            return;
        }
        self.pending.fetch_add(bytes, Ordering::Relaxed);
        match charge {
            Some(c) => c.bytes += bytes,
            None => {
                *charge = Some(ReplyCharge {
                    memory: self.clone(),
                    bytes,
                })
            }
        }
    }
}

impl Drop for ReplyCharge {
    fn drop(&mut self) {
        self.memory.pending.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Connections waiting for buffer budget.
#[derive(Default)]
pub struct BudgetWaiters {
    /// How many.
    pub count: usize,
    /// Budget units they hold while they wait.
    pub held_units: usize,
}

/// One connected client, as CLIENT LIST shows it.
pub struct ClientInfo {
    /// Client id (CLIENT ID).
    pub id: u64,
    /// Peer address.
    pub addr: String,
    /// Local address.
    pub laddr: String,
    /// Connect time.
    pub created: Instant,
    /// CLIENT SETNAME.
    pub name: Mutex<Option<String>>,
    /// Index of the last command (usize::MAX: none yet), set when it starts (CLIENT LIST
    /// names the command running, as Redis does).
    pub last_cmd: AtomicUsize,
    /// Its subcommand, as an index into the command's subcommand list plus one (0: none).
    pub last_sub: AtomicUsize,
    /// Milliseconds from `created` to the start of the last command (0: none yet, so `idle`
    /// counts from the connection's start).
    pub last_active_ms: AtomicU64,
    /// Request memory, as CLIENT LIST shows it.
    pub mem: ClientMem,
}

/// A connection's request memory, published by the connection for CLIENT LIST.
#[derive(Default)]
pub struct ClientMem {
    /// Bytes in the read buffer (`qbuf`).
    pub qbuf: AtomicUsize,
    /// Free bytes of the read buffer (`qbuf-free`).
    pub qbuf_free: AtomicUsize,
    /// Bytes of the argument vector (`argv-mem`).
    pub argv: AtomicUsize,
    /// Waiting for the buffer budget, not read meanwhile (`events=` empty, not `r`).
    pub waiting: AtomicBool,
}

/// The client registry.
#[derive(Default)]
pub struct Clients {
    map: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_id: AtomicU64,
    /// Connected now.
    pub connected: AtomicUsize,
    /// Accepted since start.
    pub total: AtomicU64,
    /// Refused for max-clients.
    pub rejected: AtomicU64,
    /// Notified when a client goes (shutdown waits for zero).
    pub gone: Notify,
}

impl Clients {
    /// Registers a client if fewer than `max` are connected.
    pub fn register(&self, max: usize, addr: String, laddr: String) -> Option<Arc<ClientInfo>> {
        let mut map = self.map.lock();
        if map.len() >= max {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let info = Arc::new(ClientInfo {
            id,
            addr,
            laddr,
            created: Instant::now(),
            name: Mutex::new(None),
            last_cmd: AtomicUsize::new(usize::MAX),
            last_sub: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(0),
            mem: ClientMem::default(),
        });
        map.insert(id, info.clone());
        self.connected.store(map.len(), Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        Some(info)
    }

    /// Removes a client.
    pub fn unregister(&self, id: u64) {
        let mut map = self.map.lock();
        map.remove(&id);
        self.connected.store(map.len(), Ordering::Relaxed);
        drop(map);
        self.gone.notify_waiters();
    }

    /// Every connected client, by id.
    pub fn list(&self) -> Vec<Arc<ClientInfo>> {
        self.map.lock().values().cloned().collect()
    }
}

/// Most SCAN cursors kept; the oldest is forgotten beyond this.
const MAX_SCAN_CURSORS: usize = 16 * 1024;

/// SCAN cursors: a number (what clients expect) naming the last key returned, so a scan
/// resumes after it in key order. Every key present for the whole scan is returned once.
#[derive(Default)]
pub struct ScanCursors {
    next: u64,
    open: BTreeMap<u64, Vec<u8>>,
}

impl ScanCursors {
    /// Remembers `last_key` under a new cursor number.
    pub fn save(&mut self, last_key: Vec<u8>) -> u64 {
        self.next += 1;
        self.open.insert(self.next, last_key);
        while self.open.len() > MAX_SCAN_CURSORS {
            self.open.pop_first();
        }
        self.next
    }

    /// The key a cursor resumes after (kept, so a client may retry a call).
    pub fn get(&self, cursor: u64) -> Option<Vec<u8>> {
        self.open.get(&cursor).cloned()
    }
}
