//! Starting and stopping: open the store, bind the listeners, accept connections on a tokio
//! runtime, and stop gracefully (stop accepting, let in-flight requests finish and be
//! answered, then close the store, which persists everything).

use crate::cluster::Cluster;
use crate::commands;
use crate::config::ServerConfig;
use crate::conn;
use crate::error::ServerError;
use crate::metrics::{self, Metrics};
use crate::record::RecordControl;
use crate::resp::Limits;
use crate::shared::{Clients, Shared, BUDGET_UNIT};
use crate::sync::GroupSync;
use hotstore::{Store, TierSpec};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UnixListener};
use tokio::runtime::Runtime;
use tokio::sync::{watch, Semaphore};

/// How long a stop waits for connections to finish what they are doing.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server. Dropping it stops the server (see [`ServerHandle::shutdown`]).
pub struct ServerHandle {
    runtime: Option<Runtime>,
    shared: Option<Arc<Shared>>,
    tcp_addr: SocketAddr,
    unix_path: Option<PathBuf>,
    metrics_addr: Option<SocketAddr>,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> ServerError {
    move |source| ServerError::Io { what, source }
}

/// Opens the store in `config.dir` (creating it if missing) and starts serving in background
/// threads. Returns once every listener is bound.
pub fn spawn(config: ServerConfig) -> Result<ServerHandle, ServerError> {
    let ip = config.validate()?;
    // Listeners and the cluster map first: a start that fails on them must not leave a new
    // (possibly preallocated) store behind. Fix (found by a new-user review): a port in use
    // left a 1.1 GiB store of preallocated files.
    let bound = Bound::bind(&config, ip)?;
    if let Some(path) = &config.cluster {
        Cluster::load(
            path,
            config.cluster_id.as_deref(),
            &config.bind,
            bound.tcp_port()?,
        )
        .map_err(|what| ServerError::Config { what })?;
    }
    let mut builder = Store::builder(&config.dir)
        .lanes(config.lanes())
        .page_cache(config.page_cache());
    if config.capacity > 0 || config.offload_to.is_some() {
        // Capacity 0: the store's stored capacity (an existing store; a new one needs it,
        // see `validate`). The tiers are checked against the store's own at open.
        builder = builder.tier(TierSpec::new(".").capacity_bytes(config.capacity));
        if let Some(lower) = &config.offload_to {
            builder = builder.tier(TierSpec::new(lower));
        }
    }
    if config.preallocate > 0 {
        // Bounded by the capacity (`true` in the TOML file: all of it).
        let bytes = match config.capacity {
            0 => config.preallocate,
            c => config.preallocate.min(c),
        };
        builder = builder.preallocate_bytes(bytes);
    }
    let store = builder.open()?;
    // Writes go to the store as `Memory` and are acknowledged after the group commit's flush:
    // they are promised as `Persisted` ones are, so they carry the flag (design.md §7).
    if config.durability == hotstore::Durability::Persisted {
        store.set_acknowledged_after_flush(true);
    }
    if config.expected_fragments.is_some() || config.incomplete_timeout_ms.is_some() {
        let mut policy = store.event_policy(None);
        if let Some(n) = config.expected_fragments {
            policy.expected_fragments = n;
        }
        if let Some(ms) = config.incomplete_timeout_ms {
            policy.incomplete_timeout_ms = ms;
        }
        store.set_event_policy(policy)?;
    }
    store.set_max_deliveries(config.max_deliveries)?;
    start(config, Arc::new(store), None, bound)
}

/// A server's listeners bound ahead of its store ([`bind`]): the port is reserved (a start
/// that would fail on it fails before the store is opened) and listens once served
/// ([`spawn_bound`]).
pub struct Listeners(Bound);

/// Binds the listeners `config` names, before the caller opens the store to serve.
pub fn bind(config: &ServerConfig) -> Result<Listeners, ServerError> {
    let ip = config.validate()?;
    Ok(Listeners(Bound::bind(config, ip)?))
}

/// Serves a store the caller opened (as [`spawn_on`]) on listeners bound before it
/// ([`bind`], with the same `config`).
pub fn spawn_bound(
    config: ServerConfig,
    store: Arc<Store>,
    recorder: Option<Arc<dyn RecordControl>>,
    listeners: Listeners,
) -> Result<ServerHandle, ServerError> {
    config.validate()?;
    start(config, store, recorder, listeners.0)
}

/// The listeners of a server, bound before anything else is started. The TCP socket is
/// bound (the port is ours) but listens only once the store is open: a listening socket
/// completes connections, and clients would wait for the whole recovery instead of being
/// refused (found in review).
struct Bound {
    tcp: socket2::Socket,
    unix: Option<(std::os::unix::net::UnixListener, PathBuf)>,
    metrics: Option<std::net::TcpListener>,
}

impl Bound {
    fn bind(config: &ServerConfig, ip: std::net::IpAddr) -> Result<Bound, ServerError> {
        let addr = std::net::SocketAddr::new(ip, config.port);
        let what = format!(
            "cannot listen on {ip}:{} (in use? choose another port)",
            config.port
        );
        let cannot = |e| io_err(what.clone())(e);
        let tcp = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )
        .map_err(cannot)?;
        // As std's TcpListener::bind: a restart does not wait out TIME_WAIT connections.
        tcp.set_reuse_address(true).map_err(cannot)?;
        tcp.bind(&addr.into()).map_err(cannot)?;
        let unix = match &config.unixsocket {
            Some(path) => Some(bind_unix(path)?),
            None => None,
        };
        let metrics = match config.metrics_port {
            Some(port) => Some(
                std::net::TcpListener::bind((ip, port))
                    .map_err(io_err(format!("cannot listen for metrics on {ip}:{port}")))?,
            ),
            None => None,
        };
        Ok(Bound { tcp, unix, metrics })
    }

    fn tcp_port(&self) -> Result<u16, ServerError> {
        self.tcp
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .ok_or_else(|| ServerError::Config {
                what: "cannot read the listening address".into(),
            })
    }
}

/// Serves a store the caller already opened (it stays open when the server stops: the server
/// only flushes it), optionally with a recorder reachable through `RECORD.TRIGGER` and
/// `RECORD.STATUS`. Returns once every listener is bound.
pub fn spawn_on(
    config: ServerConfig,
    store: Arc<Store>,
    recorder: Option<Arc<dyn RecordControl>>,
) -> Result<ServerHandle, ServerError> {
    let ip = config.validate()?;
    let bound = Bound::bind(&config, ip)?;
    start(config, store, recorder, bound)
}

/// Serves `store` on the listeners `bound`.
fn start(
    config: ServerConfig,
    store: Arc<Store>,
    recorder: Option<Arc<dyn RecordControl>>,
    bound: Bound,
) -> Result<ServerHandle, ServerError> {
    let threads = config.worker_threads();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("hotstore-worker")
        .enable_all()
        .build()
        .map_err(io_err("cannot start the worker threads".into()))?;
    let _entered = runtime.enter();

    let Bound { tcp, unix, metrics } = bound;
    tcp.listen(1024)
        .map_err(io_err("cannot listen on the bound port".into()))?;
    let tcp: std::net::TcpListener = tcp.into();
    tcp.set_nonblocking(true)
        .map_err(io_err("cannot set up the listener".into()))?;
    let tcp_addr = tcp
        .local_addr()
        .map_err(io_err("cannot read the listening address".into()))?;
    let tcp = TcpListener::from_std(tcp).map_err(io_err("cannot set up the listener".into()))?;

    let unix = match unix {
        Some((l, path)) => {
            l.set_nonblocking(true)
                .map_err(io_err("cannot set up the unix listener".into()))?;
            let l = UnixListener::from_std(l).map_err(io_err("unix listener".into()))?;
            Some((l, path))
        }
        None => None,
    };
    let metrics_listener = match metrics {
        Some(l) => {
            l.set_nonblocking(true)
                .map_err(io_err("cannot set up the metrics listener".into()))?;
            Some(TcpListener::from_std(l).map_err(io_err("metrics listener".into()))?)
        }
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());

    let shared = shared_state(config, store, tcp_addr.port(), recorder)?;

    runtime.spawn(accept_tcp(tcp, shared.clone()));
    let unix_path = match unix {
        Some((listener, path)) => {
            runtime.spawn(accept_unix(listener, shared.clone()));
            Some(path)
        }
        None => None,
    };
    if let Some(l) = metrics_listener {
        let s = shared.clone();
        runtime.spawn(metrics::serve_http(
            l,
            shared.shutdown.subscribe(),
            move || s.metrics_page(),
        ));
    }
    drop(_entered);
    Ok(ServerHandle {
        runtime: Some(runtime),
        shared: Some(shared),
        tcp_addr,
        unix_path,
        metrics_addr,
    })
}

/// Binds a Unix socket, replacing a stale socket file left by a crash (but never a live one
/// or a file that is not a socket).
fn bind_unix(path: &PathBuf) -> Result<(std::os::unix::net::UnixListener, PathBuf), ServerError> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let live = std::os::unix::net::UnixStream::connect(path).is_ok();
        if !meta.file_type().is_socket() || live {
            return Err(ServerError::Config {
                what: format!(
                    "unix socket {}: the path exists and is {}",
                    path.display(),
                    if live { "in use" } else { "not a socket" }
                ),
            });
        }
        let _ = std::fs::remove_file(path);
    }
    let l = std::os::unix::net::UnixListener::bind(path).map_err(io_err(format!(
        "cannot listen on unix socket {}",
        path.display()
    )))?;
    Ok((l, path.clone()))
}

async fn refuse(mut sock: impl tokio::io::AsyncWrite + Unpin) {
    let _ = sock
        .write_all(b"-ERR max number of clients reached\r\n")
        .await;
    let _ = sock.shutdown().await;
}

async fn accept_tcp(listener: TcpListener, shared: Arc<Shared>) {
    let mut stop = shared.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (sock, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors, usually: wait instead of spinning.
                log_line!("hotstore: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let laddr = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
        match shared
            .clients
            .register(shared.config.max_clients, peer.to_string(), laddr)
        {
            Some(info) => {
                tokio::spawn(conn::serve(shared.clone(), sock, info));
            }
            None => {
                tokio::spawn(refuse(sock));
            }
        }
    }
}

async fn accept_unix(listener: UnixListener, shared: Arc<Shared>) {
    let mut stop = shared.shutdown.subscribe();
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
        .unwrap_or_default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let sock = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                log_line!("hotstore: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match shared
            .clients
            .register(shared.config.max_clients, format!("{path}:0"), path.clone())
        {
            Some(info) => {
                tokio::spawn(conn::serve(shared.clone(), sock, info));
            }
            None => {
                tokio::spawn(refuse(sock));
            }
        }
    }
}

impl ServerHandle {
    /// The TCP address served (the port is the real one when 0 was asked for).
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp_addr
    }

    /// The Unix socket served, if any.
    pub fn unix_path(&self) -> Option<&PathBuf> {
        self.unix_path.as_ref()
    }

    /// The metrics HTTP address, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The store served.
    pub fn store(&self) -> Option<&Store> {
        self.shared.as_ref().map(|s| &*s.store)
    }

    /// Blocks until SIGINT or SIGTERM arrives or a client sends SHUTDOWN, then stops
    /// gracefully.
    pub fn run_until_stopped(mut self) -> Result<(), ServerError> {
        if let (Some(rt), Some(shared)) = (&self.runtime, &self.shared) {
            let shared = shared.clone();
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let mut term = signal(SignalKind::terminate()).ok();
                let mut stop = shared.shutdown.subscribe();
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
                shared.request_shutdown();
            });
        }
        self.stop()
    }

    /// Stops gracefully: no new connections; requests already read are run and answered
    /// (within 10 s); claims held by connections go back to READY; the store is closed, which
    /// persists everything.
    pub fn shutdown(mut self) -> Result<(), ServerError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), ServerError> {
        let (Some(rt), Some(shared)) = (self.runtime.take(), self.shared.take()) else {
            return Ok(());
        };
        let unix_path = self.unix_path.clone();
        let work = move || stop_runtime(rt, shared, unix_path);
        // Blocking on the runtime is not allowed from inside another one (an async test, an
        // embedding application): stop from a plain thread then.
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::spawn(work).join().unwrap_or_else(|_| {
                Err(ServerError::Config {
                    what: "the thread stopping the server panicked".into(),
                })
            })
        } else {
            work()
        }
    }
}

fn stop_runtime(
    rt: Runtime,
    shared: Arc<Shared>,
    unix_path: Option<PathBuf>,
) -> Result<(), ServerError> {
    shared.request_shutdown();
    rt.block_on(async {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while shared
            .clients
            .connected
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            && Instant::now() < deadline
        {
            let _ = tokio::time::timeout(Duration::from_millis(50), shared.clients.gone.notified())
                .await;
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    if let Some(p) = &unix_path {
        let _ = std::fs::remove_file(p);
    }
    let shared = match Arc::try_unwrap(shared) {
        Ok(s) => s,
        Err(shared) => {
            // Something still holds the state (should not happen once the runtime is gone):
            // make everything durable and let the last holder close the store.
            shared.store.flush()?;
            return Ok(());
        }
    };
    let Shared {
        store, mut sync, ..
    } = shared;
    sync.stop();
    match Arc::try_unwrap(store) {
        Ok(store) => store.close()?,
        Err(store) => store.flush()?,
    }
    Ok(())
}

/// The state every connection shares, with the group-commit thread started.
pub(crate) fn shared_state(
    config: ServerConfig,
    store: Arc<Store>,
    tcp_port: u16,
    recorder: Option<Arc<dyn RecordControl>>,
) -> Result<Arc<Shared>, ServerError> {
    let cluster = match &config.cluster {
        Some(path) => {
            let c = Cluster::load(path, config.cluster_id.as_deref(), &config.bind, tcp_port)
                .and_then(|c| c.claim_store(&config.dir).map(|()| c))
                .map_err(|what| ServerError::Config { what })?;
            let me = c.myself();
            log_line!(
                "hotstore: cluster node {} at {}, {} slots of {} nodes, map epoch {}",
                me.id,
                me.addr(),
                me.slot_count(),
                c.map.nodes.len(),
                c.map.epoch
            );
            Some(c)
        }
        None => None,
    };
    let metrics = Metrics::new(commands::COMMANDS.iter().map(|c| c.name));
    let sync = GroupSync::start(store.clone(), metrics.group_commit())
        .map_err(io_err("cannot start the sync thread".into()))?;
    let budget_units = (config.max_buffer_memory / BUDGET_UNIT).min(Semaphore::MAX_PERMITS);
    let limits = Limits {
        max_bulk: config.max_bulk_len,
        ..Limits::default()
    };
    let event_waiters = Arc::new(crate::waiters::EventWaiters::default());
    let wake = Arc::downgrade(&event_waiters);
    let event_listener = store
        .add_event_listener(move || {
            if let Some(w) = wake.upgrade() {
                w.wake();
            }
        })
        .map_err(|e| ServerError::Config {
            what: format!("cannot watch the store's events: {e}"),
        })?;
    let shared = Arc::new(Shared {
        reply_memory: crate::shared::ReplyMemory::new(config.max_reply_memory),
        event_waiters,
        _event_listener: event_listener,
        events_built: tokio::sync::OnceCell::new(),
        store,
        limits,
        sync,
        metrics,
        clients: Clients::default(),
        scans: Mutex::default(),
        shutdown: watch::channel(false).0,
        started: Instant::now(),
        buffer_budget: Arc::new(Semaphore::new(budget_units)),
        buffer_budget_units: budget_units,
        buffer_waiters: Default::default(),
        buffer_freed: Default::default(),
        tcp_port,
        recorder,
        cluster,
        config,
    });
    Ok(shared)
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]
    use super::*;

    /// Found in review (nineteenth session): the port was listening while the store opened
    /// (recovery, preallocation: minutes), so clients connected and waited instead of being
    /// refused. Bound, it refuses; started, it answers.
    #[test]
    fn the_port_is_refused_until_the_store_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::for_dir(dir.path());
        config.port = 0;
        let ip = config.validate().unwrap();
        let bound = Bound::bind(&config, ip).unwrap();
        let port = bound.tcp_port().unwrap();
        let e = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        let store = Arc::new(Store::builder(dir.path()).open().unwrap());
        let server = start(config, store, None, bound).unwrap();
        std::net::TcpStream::connect(server.tcp_addr()).unwrap();
    }
}
