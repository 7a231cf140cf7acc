//! DAQ load over the network: producers `FRAG.PUT` fragments with a pipelining window,
//! consumers claim events (`EVENT.NEXT`) and remove them (`EVENT.ACK REMOVE`); compared with
//! the embedded `Store::put` bandwidth of the same fragments, measured first in the same run
//! with the same store settings.
//!
//! ```text
//! cargo run --release -p hotstore-client --example daq_load -- --help
//! cargo run --release -p hotstore-client --example daq_load -- --duration 5 --json
//! ```
//!
//! Without `--url` it starts an in-process server on a fresh store under `--dir` (default
//! /dev/shm) whose event policy expects `--detectors` fragments per event (or, with `--seal`,
//! only sealed events are complete: producers send `EVENT.SEAL` after each event). With
//! `--url` it loads that server (the embedded measurement still runs locally under `--dir`);
//! the server's event policy must then make events complete (or give `--seal`).

use clap::{Parser, ValueEnum};
use hotstore::{EventPolicy, FragmentKey, Store, TierSpec};
use hotstore_client::{Ack, AsyncClient, Client, ConnectOptions, Durability, Error, Pipeline};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RUN: u32 = 1;
const LEASE: Duration = Duration::from_secs(60);
const WARMUP: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ClientKind {
    /// `hotstore_client::Client`, one thread per connection.
    Blocking,
    /// `hotstore_client::AsyncClient` on a tokio runtime, one task per connection.
    Async,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DurabilityArg {
    Memory,
    Persisted,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Memory => Durability::Memory,
            DurabilityArg::Persisted => Durability::Persisted,
        }
    }
}

impl From<DurabilityArg> for hotstore::Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Memory => hotstore::Durability::Memory,
            DurabilityArg::Persisted => hotstore::Durability::Persisted,
        }
    }
}

/// DAQ load from the Rust client: FRAG.PUT producers and EVENT.NEXT/EVENT.ACK consumers
/// over the Redis protocol, compared with embedded Store::put bandwidth.
#[derive(Parser, Debug, Clone)]
#[command(name = "daq_load")]
struct Args {
    /// Load this server instead of starting one in-process (e.g. redis://127.0.0.1:6380).
    #[arg(long)]
    url: Option<String>,
    /// Directory for the fresh stores (embedded measurement, in-process server).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Producer connections.
    #[arg(long, default_value_t = 2)]
    producers: usize,
    /// Consumer connections.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Requests in flight per producer connection (and events claimed per round trip by a
    /// consumer).
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Fragment size in bytes.
    #[arg(long, default_value_t = 10240)]
    value_size: usize,
    /// Fragments per event (one per detector).
    #[arg(long, default_value_t = 4)]
    detectors: u16,
    /// Seconds of network load measured (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// Seconds of embedded puts measured (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 1.0)]
    embedded_duration: f64,
    /// Threads for the embedded measurement.
    #[arg(long, default_value_t = 2)]
    embedded_threads: usize,
    /// Durability of every write.
    #[arg(long, value_enum, default_value = "memory")]
    durability: DurabilityArg,
    /// Producers seal each event (EVENT.SEAL) after its last fragment instead of relying on
    /// the store's expected fragment count.
    #[arg(long)]
    seal: bool,
    /// Store capacity in bytes (both stores).
    #[arg(long, default_value_t = 8 << 30)]
    capacity: u64,
    /// Server worker threads for the in-process server (0: one per core).
    #[arg(long, default_value_t = 0)]
    server_threads: usize,
    /// Blocking or async client.
    #[arg(long, value_enum, default_value = "blocking")]
    client: ClientKind,
    /// Skip the embedded measurement.
    #[arg(long)]
    no_embedded: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Counters of one kind of worker, on their own cache lines.
#[derive(Default)]
#[repr(align(128))]
struct Counters {
    fragments: AtomicU64,
    bytes: AtomicU64,
    events: AtomicU64,
    full: AtomicU64,
    late: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> [u64; 3] {
        [
            self.fragments.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.events.load(Ordering::Relaxed),
        ]
    }
}

/// Stops workers, and keeps the first error.
#[derive(Default)]
struct Control {
    stop: AtomicBool,
    error: Mutex<Option<String>>,
}

impl Control {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn fail(&self, what: String) {
        self.error.lock().unwrap().get_or_insert(what);
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A measured rate.
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    fragments_per_sec: f64,
    bytes_per_sec: f64,
    events_per_sec: f64,
    secs: f64,
}

fn rate(a: [u64; 3], b: [u64; 3], secs: f64) -> Rate {
    let s = secs.max(1e-9);
    Rate {
        fragments_per_sec: (b[0] - a[0]) as f64 / s,
        bytes_per_sec: (b[1] - a[1]) as f64 / s,
        events_per_sec: (b[2] - a[2]) as f64 / s,
        secs,
    }
}

/// Samples `counters` after the warm-up and after `duration`, or earlier if stopped.
fn measure(control: &Control, counters: &[&Counters], duration: Duration) -> Vec<Rate> {
    let sample = || counters.iter().map(|c| c.snapshot()).collect::<Vec<_>>();
    let wait_until = |end: Instant| {
        while !control.stopped() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_until(Instant::now() + WARMUP);
    let (a, t0) = (sample(), Instant::now());
    wait_until(t0 + duration);
    let (b, t1) = (sample(), Instant::now());
    control.stop.store(true, Ordering::Relaxed);
    let secs = (t1 - t0).as_secs_f64();
    a.iter().zip(&b).map(|(a, b)| rate(*a, *b, secs)).collect()
}

fn payload(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(151) ^ 0x5a)
        .collect()
}

fn temp_dir(base: &Path) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hotstore-daq-load-")
        .tempdir_in(base)
        .unwrap_or_else(|e| panic!("cannot create a directory under {}: {e}", base.display()))
}

/// Creates a store in `dir` with the benchmark's settings.
fn create_store(args: &Args, dir: &Path, lanes: usize) -> hotstore::Result<Store> {
    let store = Store::builder(dir)
        .tier(TierSpec::new(".").capacity_bytes(args.capacity))
        .lanes(lanes)
        .open()?;
    let expected = if args.seal {
        0
    } else {
        u32::from(args.detectors)
    };
    store.set_event_policy(EventPolicy::expecting(expected))?;
    Ok(store)
}

/// Embedded `Store::put` of the same fragments: `threads` threads, each its own events.
fn embedded_put(args: &Args) -> Result<Rate, String> {
    let tmp = temp_dir(&args.dir);
    let threads = args.embedded_threads.max(1);
    let store = create_store(args, tmp.path(), threads.max(2)).map_err(|e| e.to_string())?;
    let value = payload(args.value_size);
    let durability: hotstore::Durability = args.durability.into();
    let control = Control::default();
    let counters = Counters::default();
    let detectors = args.detectors.max(1);
    let rates = std::thread::scope(|s| {
        for t in 0..threads {
            let (store, value, control, counters) = (&store, &value, &control, &counters);
            s.spawn(move || {
                let mut event = t as u64;
                while !control.stopped() {
                    for d in 0..detectors {
                        let key = FragmentKey::new(RUN, event, d, 0).to_bytes();
                        match store.put(&key, value, durability) {
                            Ok(()) => {}
                            Err(e) if e.is_full() => {
                                counters.full.fetch_add(1, Ordering::Relaxed);
                                control.stop.store(true, Ordering::Relaxed);
                                return;
                            }
                            Err(e) => return control.fail(format!("embedded put: {e}")),
                        }
                        counters.fragments.fetch_add(1, Ordering::Relaxed);
                        counters
                            .bytes
                            .fetch_add(value.len() as u64, Ordering::Relaxed);
                    }
                    if args.seal {
                        let id = hotstore::EventId::new(RUN, event);
                        if let Err(e) = store.seal(&id, durability) {
                            return control.fail(format!("embedded seal: {e}"));
                        }
                    }
                    counters.events.fetch_add(1, Ordering::Relaxed);
                    event += threads as u64;
                }
            });
        }
        measure(
            &control,
            &[&counters],
            Duration::from_secs_f64(args.embedded_duration),
        )
    });
    if let Some(e) = control.error.lock().unwrap().take() {
        return Err(e);
    }
    if counters.full.load(Ordering::Relaxed) > 0 {
        eprintln!("daq_load: the embedded store filled up; measured until then (give --capacity)");
    }
    store.close().map_err(|e| e.to_string())?;
    drop(tmp);
    Ok(rates[0])
}

/// What one producer batch holds: a fragment (event, detector) or a seal.
#[derive(Clone, Copy)]
enum Op {
    Put(u64, u16),
    Seal(u64),
}

/// Producer batches: `window * 4` requests or more, whole events.
struct Batcher {
    next_event: u64,
    step: u64,
    events_per_batch: usize,
    detectors: u16,
    seal: bool,
    durability: Durability,
}

impl Batcher {
    fn new(args: &Args, producer: usize) -> Self {
        let per_event = usize::from(args.detectors.max(1)) + usize::from(args.seal);
        Batcher {
            next_event: producer as u64,
            step: args.producers.max(1) as u64,
            events_per_batch: (args.window.max(1) * 4).div_ceil(per_event),
            detectors: args.detectors.max(1),
            seal: args.seal,
            durability: args.durability.into(),
        }
    }

    fn fill(&mut self, ops: &mut Vec<Op>) {
        for _ in 0..self.events_per_batch {
            let e = self.next_event;
            self.next_event += self.step;
            ops.extend((0..self.detectors).map(|d| Op::Put(e, d)));
            if self.seal {
                ops.push(Op::Seal(e));
            }
        }
    }

    fn pipeline(&self, ops: &[Op], value: &[u8], p: &mut Pipeline) {
        p.clear();
        for op in ops {
            match *op {
                Op::Put(e, d) => p.frag_put(RUN, e, d, 0, value, Some(self.durability)),
                Op::Seal(e) => p.event_seal(RUN, e, Some(self.durability)),
            };
        }
    }
}

/// Counts results; returns the ops refused with FULL (to retry), or a fatal error.
fn account(
    ops: &[Op],
    results: Vec<hotstore_client::Result<()>>,
    value_len: usize,
    counters: &Counters,
) -> Result<Vec<Op>, String> {
    let mut retry = Vec::new();
    let (mut frags, mut events) = (0u64, 0u64);
    for (op, r) in ops.iter().zip(results) {
        match r {
            Ok(()) => match op {
                Op::Put(..) => frags += 1,
                Op::Seal(_) => events += 1,
            },
            Err(Error::Full(_)) => {
                counters.full.fetch_add(1, Ordering::Relaxed);
                retry.push(*op);
            }
            Err(Error::Late(_)) => {
                counters.late.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                return Err(format!("producer: {e}"));
            }
        }
    }
    counters.fragments.fetch_add(frags, Ordering::Relaxed);
    counters
        .bytes
        .fetch_add(frags * value_len as u64, Ordering::Relaxed);
    counters.events.fetch_add(events, Ordering::Relaxed);
    Ok(retry)
}

fn producer_blocking(
    args: &Args,
    opts: &ConnectOptions,
    id: usize,
    control: &Control,
    counters: &Counters,
) {
    let run = || -> Result<(), String> {
        let mut c = Client::connect_with(opts).map_err(|e| e.to_string())?;
        let value = payload(args.value_size);
        let mut batcher = Batcher::new(args, id);
        let (mut ops, mut p) = (Vec::new(), Pipeline::new());
        while !control.stopped() {
            if ops.is_empty() {
                batcher.fill(&mut ops);
            }
            batcher.pipeline(&ops, &value, &mut p);
            let results = c
                .execute_windowed(&p, args.window)
                .map_err(|e| e.to_string())?;
            ops = account(&ops, results, value.len(), counters)?;
            if !ops.is_empty() {
                std::thread::sleep(Duration::from_millis(1)); // full: let consumers free space
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        control.fail(e);
    }
}

/// Acknowledges `claimed` events through one pipeline and counts them.
fn settle(
    acks: &Pipeline,
    sizes: &[(u64, u64)],
    results: Vec<hotstore_client::Result<()>>,
    counters: &Counters,
) -> Result<(), String> {
    debug_assert_eq!(acks.len(), sizes.len());
    for (r, (frags, bytes)) in results.into_iter().zip(sizes) {
        match r {
            Ok(()) => {
                counters.events.fetch_add(1, Ordering::Relaxed);
                counters.fragments.fetch_add(*frags, Ordering::Relaxed);
                counters.bytes.fetch_add(*bytes, Ordering::Relaxed);
            }
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                return Err(format!("consumer ack: {e}"));
            }
        }
    }
    Ok(())
}

fn consumer_blocking(args: &Args, opts: &ConnectOptions, control: &Control, counters: &Counters) {
    let durability = Some(args.durability.into());
    let run = || -> Result<(), String> {
        let mut c = Client::connect_with(opts).map_err(|e| e.to_string())?;
        let mut acks = Pipeline::new();
        let mut sizes = Vec::new();
        while !control.stopped() {
            let mut events = c
                .event_next_batch(LEASE, args.window.max(1))
                .map_err(|e| e.to_string())?;
            if events.is_empty() {
                if let Some(e) = c
                    .event_next(LEASE, Some(Duration::from_millis(50)))
                    .map_err(|e| e.to_string())?
                {
                    events.push(e);
                }
            }
            acks.clear();
            sizes.clear();
            for e in &events {
                acks.event_ack(&e.token, Ack::Remove, durability);
                sizes.push((e.fragments.len() as u64, e.bytes()));
            }
            if !acks.is_empty() {
                let results = c.execute(&acks).map_err(|e| e.to_string())?;
                settle(&acks, &sizes, results, counters)?;
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        control.fail(e);
    }
}

async fn producer_async(
    args: Arc<Args>,
    opts: ConnectOptions,
    id: usize,
    control: Arc<Control>,
    counters: Arc<Counters>,
) {
    let run = async {
        let c = AsyncClient::connect_with(&opts)
            .await
            .map_err(|e| e.to_string())?;
        let value = payload(args.value_size);
        let mut batcher = Batcher::new(&args, id);
        let (mut ops, mut p) = (Vec::new(), Pipeline::new());
        while !control.stopped() {
            if ops.is_empty() {
                batcher.fill(&mut ops);
            }
            batcher.pipeline(&ops, &value, &mut p);
            let results = c
                .execute_windowed(&p, args.window)
                .await
                .map_err(|e| e.to_string())?;
            ops = account(&ops, results, value.len(), &counters)?;
            if !ops.is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        Ok::<(), String>(())
    };
    if let Err(e) = run.await {
        control.fail(e);
    }
}

async fn consumer_async(
    args: Arc<Args>,
    opts: ConnectOptions,
    control: Arc<Control>,
    counters: Arc<Counters>,
) {
    let durability = Some(args.durability.into());
    let run = async {
        let c = AsyncClient::connect_with(&opts)
            .await
            .map_err(|e| e.to_string())?;
        let mut acks = Pipeline::new();
        let mut sizes = Vec::new();
        while !control.stopped() {
            let mut events = c
                .event_next_batch(LEASE, args.window.max(1))
                .await
                .map_err(|e| e.to_string())?;
            if events.is_empty() {
                if let Some(e) = c
                    .event_next(LEASE, Some(Duration::from_millis(50)))
                    .await
                    .map_err(|e| e.to_string())?
                {
                    events.push(e);
                }
            }
            acks.clear();
            sizes.clear();
            for e in &events {
                acks.event_ack(&e.token, Ack::Remove, durability);
                sizes.push((e.fragments.len() as u64, e.bytes()));
            }
            if !acks.is_empty() {
                let results = c.execute(&acks).await.map_err(|e| e.to_string())?;
                settle(&acks, &sizes, results, &counters)?;
            }
        }
        Ok::<(), String>(())
    };
    if let Err(e) = run.await {
        control.fail(e);
    }
}

struct NetResult {
    produced: Rate,
    consumed: Rate,
    full: u64,
    late: u64,
    backlog_events: Option<i64>,
}

fn network_load(args: &Args, opts: &ConnectOptions) -> Result<NetResult, String> {
    let control = Arc::new(Control::default());
    let produced = Arc::new(Counters::default());
    let consumed = Arc::new(Counters::default());
    let duration = Duration::from_secs_f64(args.duration);
    let rates = match args.client {
        ClientKind::Blocking => std::thread::scope(|s| {
            for id in 0..args.producers {
                let (control, produced) = (&*control, &*produced);
                std::thread::Builder::new()
                    .name(format!("producer-{id}"))
                    .spawn_scoped(s, move || {
                        producer_blocking(args, opts, id, control, produced)
                    })
                    .expect("start a producer thread");
            }
            for id in 0..args.consumers {
                let (control, consumed) = (&*control, &*consumed);
                std::thread::Builder::new()
                    .name(format!("consumer-{id}"))
                    .spawn_scoped(s, move || consumer_blocking(args, opts, control, consumed))
                    .expect("start a consumer thread");
            }
            measure(&control, &[&produced, &consumed], duration)
        }),
        ClientKind::Async => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let shared = Arc::new(args.clone());
            let mut tasks = Vec::new();
            for id in 0..args.producers {
                tasks.push(rt.spawn(producer_async(
                    shared.clone(),
                    opts.clone(),
                    id,
                    control.clone(),
                    produced.clone(),
                )));
            }
            for _ in 0..args.consumers {
                tasks.push(rt.spawn(consumer_async(
                    shared.clone(),
                    opts.clone(),
                    control.clone(),
                    consumed.clone(),
                )));
            }
            let rates = measure(&control, &[&produced, &consumed], duration);
            rt.block_on(async {
                for t in tasks {
                    let _ = t.await;
                }
            });
            rates
        }
    };
    if let Some(e) = control.error.lock().unwrap().take() {
        return Err(e);
    }
    let backlog_events = Client::connect_with(opts)
        .and_then(|mut c| c.store_stats())
        .ok()
        .map(|s| {
            let get = |k: &str| s.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
            get("events_open") + get("events_ready") + get("events_claimed")
        });
    Ok(NetResult {
        produced: rates[0],
        consumed: rates[1],
        full: produced.full.load(Ordering::Relaxed),
        late: produced.late.load(Ordering::Relaxed),
        backlog_events,
    })
}

fn gb(bytes_per_sec: f64) -> f64 {
    bytes_per_sec / 1e9
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("daq_load: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.producers == 0 {
        return Err("--producers must be at least 1".into());
    }
    let embedded = if args.no_embedded {
        None
    } else {
        Some(embedded_put(args)?)
    };

    // The server: in-process on a fresh store with the same settings, or the one given.
    let mut server = None;
    let mut _server_dir = None;
    let opts = match &args.url {
        Some(url) => ConnectOptions::from_url(url).map_err(|e| e.to_string())?,
        None => {
            let tmp = temp_dir(&args.dir);
            let store_dir = tmp.path().join("store");
            let mut config = hotstore_server::ServerConfig::for_dir(&store_dir);
            config.port = 0;
            config.threads = args.server_threads;
            config.durability = args.durability.into();
            // Created here so the policy and capacity match the embedded store's.
            let lanes = (config.worker_threads() * 2).clamp(2, 256);
            create_store(args, &store_dir, lanes)
                .and_then(|s| s.close())
                .map_err(|e| format!("cannot create the server's store: {e}"))?;
            let handle = hotstore_server::spawn(config).map_err(|e| e.to_string())?;
            let opts = ConnectOptions::tcp("127.0.0.1", handle.tcp_addr().port());
            server = Some(handle);
            _server_dir = Some(tmp);
            opts
        }
    };
    let net = network_load(args, &opts)?;
    if let Some(h) = server.take() {
        h.shutdown().map_err(|e| e.to_string())?;
    }

    let ratio = embedded.map(|e| net.produced.bytes_per_sec / e.bytes_per_sec.max(1.0));
    let client = match args.client {
        ClientKind::Blocking => "blocking",
        ClientKind::Async => "async",
    };
    let durability = Durability::from(args.durability).as_str();
    if args.json {
        let emb = embedded.map(|e| {
            serde_json::json!({
                "threads": args.embedded_threads,
                "fragments_per_sec": e.fragments_per_sec,
                "bytes_per_sec": e.bytes_per_sec,
                "gb_per_sec": gb(e.bytes_per_sec),
                "secs": e.secs,
            })
        });
        let out = serde_json::json!({
            "server": args.url.clone().unwrap_or_else(|| "in-process".into()),
            "client": client,
            "producers": args.producers,
            "consumers": args.consumers,
            "window": args.window,
            "value_size": args.value_size,
            "detectors": args.detectors,
            "durability": durability,
            "seal": args.seal,
            "network": {
                "secs": net.produced.secs,
                "put_fragments_per_sec": net.produced.fragments_per_sec,
                "put_bytes_per_sec": net.produced.bytes_per_sec,
                "put_gb_per_sec": gb(net.produced.bytes_per_sec),
                "consumed_events_per_sec": net.consumed.events_per_sec,
                "consumed_fragments_per_sec": net.consumed.fragments_per_sec,
                "consumed_gb_per_sec": gb(net.consumed.bytes_per_sec),
                "full_errors": net.full,
                "late_fragments": net.late,
                "backlog_events": net.backlog_events,
            },
            "embedded": emb,
            "ratio": ratio,
        });
        println!("{out}");
        return Ok(());
    }
    if let Some(e) = embedded {
        println!(
            "embedded  Store::put, {} threads: {:>9.0} fragments/s  {:.2} GB/s",
            args.embedded_threads,
            e.fragments_per_sec,
            gb(e.bytes_per_sec)
        );
    }
    println!(
        "network   FRAG.PUT, {} producers:  {:>9.0} fragments/s  {:.2} GB/s  (window {}, {} client)",
        args.producers,
        net.produced.fragments_per_sec,
        gb(net.produced.bytes_per_sec),
        args.window,
        client
    );
    println!(
        "network   EVENT.NEXT+ACK, {} consumers: {:>6.0} events/s  {:.2} GB/s  (backlog at end: {} events, FULL {}, LATE {})",
        args.consumers,
        net.consumed.events_per_sec,
        gb(net.consumed.bytes_per_sec),
        net.backlog_events.map_or("?".into(), |b| b.to_string()),
        net.full,
        net.late
    );
    println!(
        "daq_load: {} B fragments x{} per event, {durability}: network put {:.2} GB/s, consumed {:.2} GB/s, embedded put {}, ratio {}",
        args.value_size,
        args.detectors,
        gb(net.produced.bytes_per_sec),
        gb(net.consumed.bytes_per_sec),
        embedded.map_or("-".into(), |e| format!("{:.2} GB/s", gb(e.bytes_per_sec))),
        ratio.map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
    );
    Ok(())
}
