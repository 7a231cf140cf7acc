//! `hotstore serve`: the store over the Redis protocol (see docs/protocol.md).

use crate::util::{parse_size, CliError, CliResult};
use crate::DurabilityArg;
use clap::Args;
use hotstore_server::ServerConfig;
use std::io::Write;
use std::path::PathBuf;

/// Serve a store over the Redis protocol (RESP2/RESP3), with the DAQ commands.
///
/// Any Redis client works: `redis-cli -p 6380`, redis-py, hiredis, redis-rs, redis-benchmark.
/// Standard string commands (GET, SET, DEL, MGET, SCAN, INFO...) and the DAQ commands
/// FRAG.PUT, FRAG.GET, EVENT.GET, EVENT.SEAL, EVENT.NEXT, EVENT.ACK, EVENT.RELEASE,
/// EVENT.CLAIM, EVENT.PENDING, EVENT.RANGE, EVENT.GROUP, EVENT.GROUPS, EVENT.CONSUMERS,
/// STORE.STATS and STORE.LAYOUT (RECORD.TRIGGER and RECORD.STATUS beside `hotstore record`)
/// are described in docs/protocol.md.
///
/// Every write is answered only once it meets its durability: `persisted` (the default:
/// fdatasync'd, shared by concurrent writers) or `memory` (survives a crash of the server,
/// not a power cut). The startup lines say which tiers survive a power cut.
///
/// Prints `hotstore: listening on ADDR` once ready (scripts can wait for it; `--port 0`
/// picks a free port). SIGTERM or SIGINT (or the SHUTDOWN command) stop it gracefully: no new
/// connections, requests in flight are answered, the store is closed with everything
/// persisted. Options given on the command line override the `--config` file, which takes
/// the same keys in TOML (`port = 6380`, `requirepass = "..."`, `max-clients = 100`...).
#[derive(Args)]
pub struct ServeArgs {
    /// Store directory (created if missing).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// TOML file with the same keys as these options.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on. A non-loopback address needs --requirepass (or --insecure).
    #[arg(long)]
    bind: Option<String>,
    /// TCP port [default: 6380; 0 picks a free one].
    #[arg(long)]
    port: Option<u16>,
    /// Also listen on this Unix socket.
    #[arg(long)]
    unixsocket: Option<PathBuf>,
    /// Require `AUTH <password>` before any other command.
    #[arg(long)]
    requirepass: Option<String>,
    /// Allow a non-loopback --bind without a password (only on a trusted network).
    #[arg(long)]
    insecure: bool,
    /// Refuse FLUSHALL and FLUSHDB (a production buffer: one stray command would remove every
    /// event not yet consumed).
    #[arg(long)]
    disable_flush: bool,
    /// Most connected clients [default: 10000]; others get `-ERR max number of clients reached`.
    #[arg(long)]
    max_clients: Option<usize>,
    /// Worker threads serving connections [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Serve Prometheus metrics at http://BIND:PORT/metrics (0 picks a free port).
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Durability of writes that do not name one [default: persisted].
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Close connections idle for this many seconds [default: 0, never].
    #[arg(long)]
    timeout: Option<u64>,
    /// Longest value (bulk string) accepted [default: 256MiB, the store's maximum].
    #[arg(long, value_parser = parse_size)]
    max_bulk_len: Option<u64>,
    /// Read-buffer memory all clients together may use for large requests [default: 1GiB];
    /// a client needing more waits.
    #[arg(long, value_parser = parse_size)]
    max_buffer_memory: Option<u64>,
    /// Memory all clients together may hold in large replies (1 MiB and more) built and not
    /// yet read [default: 2GiB]; a GET, MGET or EVENT.GET past it gets -BUSY (retry).
    #[arg(long, value_parser = parse_size)]
    max_reply_memory: Option<u64>,
    /// Largest reply one command may build (MGET, EVENT.GET) [default: 512MiB]; larger
    /// requests get an error instead of buffering without bound.
    #[arg(long, value_parser = parse_size)]
    max_reply_len: Option<u64>,
    /// Capacity of the store (e.g. 64GiB); stored with it, so a later --capacity changes it
    /// [default: the stored capacity; as much as the file system has for a new store].
    #[arg(long, value_parser = crate::util::parse_capacity)]
    capacity: Option<u64>,
    /// Create and pre-fault segment files at start, so that writes never wait for page
    /// allocation: BYTES of them (e.g. 4GiB, at most --capacity), or without a value all of
    /// --capacity [default: none].
    #[arg(long, num_args = 0..=1, default_missing_value = "all",
          value_parser = crate::util::parse_preallocate, value_name = "BYTES")]
    preallocate: Option<u64>,
    /// A second tier in DIR (a disk below a tmpfs store, say): past 80% of --capacity the
    /// first tier's oldest data moves there in the background, still readable and claimable
    /// (fixed when the store is created: a new store needs --capacity, an existing one keeps
    /// its stored capacity, and another DIR than its own is refused) [default: none].
    #[arg(long, value_name = "DIR")]
    offload_to: Option<PathBuf>,
    /// Fragments that make an event complete (READY); 0: only EVENT.SEAL or the timeout
    /// [default: the store's stored policy; 1 for a new store]. Stored with the store.
    #[arg(long)]
    expected_fragments: Option<u32>,
    /// Milliseconds after its first fragment at which an OPEN event becomes READY, flagged
    /// incomplete; 0: never [default: the stored policy; 0 for a new store].
    #[arg(long)]
    incomplete_timeout_ms: Option<u64>,
    /// Deliveries after which an event that keeps coming back unacknowledged (its consumers
    /// crash on it, or let the lease run out) is parked as poisoned instead of offered again:
    /// listed by EVENT.RANGE, claimed only by EVENT.CLAIM; 0: never, at most 255 [default: 0].
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=255))]
    max_deliveries: Option<u32>,
    /// Cluster mode: serve as one node of the cluster map FILE (`hotstore cluster create`
    /// makes one). Keys and events of other nodes' hash slots answer `MOVED`, so Redis
    /// Cluster clients (redis-py RedisCluster, redis-rs cluster, `redis-cli -c`) find them.
    /// See docs/cluster.md.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// This node's id in the cluster map [default: the node at --bind:--port].
    #[arg(long, requires = "cluster", value_name = "ID")]
    cluster_id: Option<String>,
}

fn config_from(a: ServeArgs) -> CliResult<ServerConfig> {
    let mut c = match &a.config {
        Some(path) => {
            ServerConfig::from_toml_file(path).map_err(|e| CliError::Msg(e.to_string()))?
        }
        None => ServerConfig::default(),
    };
    match (a.dir, a.config.is_some()) {
        (Some(d), _) => c.dir = d,
        (None, true) => {}
        (None, false) => {
            return Err(CliError::Msg(
                "no store directory: give --dir DIR (or `dir` in --config)".into(),
            ))
        }
    }
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = a.$f { c.$f = v.into(); } )* };
    }
    set!(bind, port, max_clients, threads, timeout, capacity);
    if a.preallocate.is_some() {
        c.preallocate = hotstore_bench::util::preallocate_bytes(a.preallocate, c.capacity)?;
    }
    if let Some(v) = a.unixsocket {
        c.unixsocket = Some(v);
    }
    if let Some(v) = a.offload_to {
        c.offload_to = Some(v);
    }
    if let Some(v) = a.cluster {
        c.cluster = Some(v);
    }
    if let Some(v) = a.cluster_id {
        c.cluster_id = Some(v);
    }
    if let Some(v) = a.requirepass {
        c.requirepass = Some(v);
    }
    if let Some(v) = a.metrics_port {
        c.metrics_port = Some(v);
    }
    if let Some(v) = a.expected_fragments {
        c.expected_fragments = Some(v);
    }
    if let Some(v) = a.incomplete_timeout_ms {
        c.incomplete_timeout_ms = Some(v);
    }
    if let Some(v) = a.max_deliveries {
        c.max_deliveries = v;
    }
    if let Some(v) = a.durability {
        c.durability = v.into();
    }
    if let Some(v) = a.max_bulk_len {
        c.max_bulk_len = v as usize;
    }
    if let Some(v) = a.max_reply_len {
        c.max_reply_len = v as usize;
    }
    if let Some(v) = a.max_reply_memory {
        c.max_reply_memory = v as usize;
    }
    if let Some(v) = a.max_buffer_memory {
        c.max_buffer_memory = v as usize;
    }
    c.insecure |= a.insecure;
    c.disable_flush |= a.disable_flush;
    Ok(c)
}

pub fn run(a: ServeArgs) -> CliResult<()> {
    let config = config_from(a)?;
    let dir = config.dir.clone();
    let durability = format!("{:?}", config.durability).to_lowercase();
    let server = hotstore_server::spawn(config).map_err(|e| {
        let hint = match &e {
            hotstore_server::ServerError::Store(se) => crate::util::salvage_hint(se),
            _ => "",
        };
        CliError::Msg(format!("{e}{hint}"))
    })?;
    let mut out = std::io::stdout().lock();
    if let Some(store) = server.store() {
        let s = store.stats();
        let _ = writeln!(
            out,
            "hotstore: store {} ({} entries), default durability {durability}",
            dir.display(),
            s.entries
        );
        for t in &s.tiers {
            let _ = writeln!(
                out,
                "hotstore: tier {}: {}",
                t.path.display(),
                t.power_safety()
            );
        }
        // What a bounded store promises, bounded by its file systems (a capacity larger than
        // the file system is not what the user will get: say so at start, not at the first
        // StoreFull).
        if s.guaranteed_live_bytes > 0 {
            let capacity: u64 = s.tiers.iter().map(|t| t.capacity_bytes).sum();
            let _ = writeln!(
                out,
                "hotstore: capacity {capacity} bytes: writes never find it full while live data \
                 is at most {} bytes",
                s.guaranteed_live_bytes
            );
        }
    }
    if let Some(addr) = server.metrics_addr() {
        let _ = writeln!(out, "hotstore: metrics on {addr}");
    }
    if let Some(p) = server.unix_path() {
        let _ = writeln!(out, "hotstore: listening on unix:{}", p.display());
    }
    let _ = writeln!(out, "hotstore: listening on {}", server.tcp_addr());
    let _ = out.flush();
    drop(out);
    server
        .run_until_stopped()
        .map_err(|e| CliError::Msg(e.to_string()))?;
    // `serve | head -3`: the reader may be gone. SIGPIPE is still ignored (see `main`), so the
    // write fails with EPIPE, which is ignored: a clean stop exits 0, never a panic or a signal.
    let _ = writeln!(
        std::io::stdout(),
        "hotstore: stopped; every acknowledged write is stored"
    );
    Ok(())
}
