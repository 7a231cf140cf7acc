//! `hotstore bench put|get`: embedded throughput of the engine on a fresh store, printed beside
//! the machine's own limit measured in the same run (memcpy on a memory file system, O_DIRECT
//! sequential write on a block device) and the ratio between the two.
//!
//! Measurement: every thread runs the operation in a loop and publishes its count in its own
//! cache line; the controller lets them warm up (0.3 s), reads the counts, waits for the
//! duration (or until a writer finds the store full), reads them again and stops the threads.

use crate::bench_harness::{key, measure, temp_dir_in, value_buffer, Window, WARMUP};
use crate::limits::{self, Limit};
use crate::scratch::ScratchDir;
use crate::util::{human_bytes, human_count};
use crate::{fail, Result};
use hotstore::{Domain, Durability, Store, StoreOptions, TierSpec, MAX_VALUE_LEN};
use serde::Serialize;
use std::fmt;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Duration of each limit measurement run (the median of 3 is taken).
const LIMIT_RUN: Duration = Duration::from_millis(500);
/// Data `get` populates by default.
const GET_DEFAULT_BYTES: u64 = 256 << 20;
/// Most keys `get` populates.
pub const GET_MAX_KEYS: u64 = 1 << 20;
/// Buffer size of the memcpy limit.
const MEMCPY_BUFFER_BYTES: usize = 64 << 20;

/// Which operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Writes of new keys.
    Put,
    /// Reads of existing keys.
    Get,
}

/// Key order of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Each thread walks the keys in key order from its own starting point.
    Seq,
    /// Uniformly random keys.
    Random,
}

/// A peer measured beside hotstore in the same run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    /// LMDB (C, through heed) with MDB_NOSYNC | MDB_WRITEMAP: puts 1000 per transaction and
    /// one per transaction; gets zero-copy in read transactions.
    Lmdb,
}

/// One peer's figure in the report.
#[derive(Debug, Clone, Serialize)]
struct PeerResult {
    name: String,
    ops_per_sec: f64,
    /// hotstore's ops/s over the peer's (same run, medians).
    ratio: f64,
}

/// What to measure.
pub struct Config {
    /// Operation.
    pub op: Op,
    /// File system to measure (`None`: /dev/shm if present, else the temp dir).
    pub dir: Option<PathBuf>,
    /// Value size in bytes.
    pub value_size: u64,
    /// Threads.
    pub threads: usize,
    /// Durability of the writes (put, and populating for get).
    pub durability: Durability,
    /// Measured time per run.
    pub duration: Duration,
    /// Keys for get (`None`: about 256 MiB of values, at most 1 Mi keys).
    pub key_count: Option<u64>,
    /// Order for get.
    pub order: Order,
    /// get: keys looked up together (`Store::get_many_with`); 1: one `get_with` per key.
    pub batch: usize,
    /// Segment size (`None`: the engine default).
    pub segment_size: Option<u64>,
    /// Store capacity (`None`: automatic, see `auto_capacity`).
    pub capacity: Option<u64>,
    /// Measurements to take the median of.
    pub repeat: usize,
    /// Verify each record's checksum on reads (the engine default).
    pub verify_on_read: bool,
    /// put: keys each thread keeps; past it each put removes the thread's oldest key (0: all).
    pub keep: u64,
    /// Create and pre-fault the whole capacity when the store is opened (before timing).
    /// `--preallocate`: bytes, or [`crate::util::PREALLOCATE_ALL`] for all of the capacity.
    pub preallocate: Option<u64>,
    /// put: the store tracks events (default policy) during the run.
    pub events: bool,
    /// Values at least this long go by direct I/O (`None`: the engine default).
    pub direct_io_min: Option<u64>,
    /// A peer to measure in the same run, alternating with hotstore's runs.
    pub vs: Option<Peer>,
    /// Say on stderr what is being done before the figures (measuring the limit, populating).
    pub progress: bool,
}

/// One measured window.
#[derive(Debug, Clone, Serialize)]
struct Run {
    ops_per_sec: f64,
    bytes_per_sec: f64,
    ops: u64,
    duration_secs: f64,
    /// The store filled up before the duration ended; the figures cover the time until then.
    stopped_full: bool,
    /// Copying `get` (get only).
    #[serde(skip_serializing_if = "Option::is_none")]
    copy_ops_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copy_bytes_per_sec: Option<f64>,
    /// put: times a writer had to make a segment file itself or wait for one (warm-up
    /// included), and the time it spent so (see `Stats::waits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    segment_waits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segment_wait_secs: Option<f64>,
    /// put: segment files the store created (open and warm-up included) and the rate of
    /// creating them, per creating thread (`TierStats::created`): what a writer that waits
    /// for files waits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    files_created: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_create_bytes_per_sec: Option<f64>,
}

/// The result of `bench put|get`: the one JSON object `--json` prints, and the text of
/// [`Display`](fmt::Display) otherwise.
#[derive(Debug, Serialize)]
pub struct Report {
    op: Op,
    value_size: u64,
    threads: usize,
    durability: &'static str,
    /// Measured window of the median run.
    duration_secs: f64,
    requested_duration_secs: f64,
    dir: PathBuf,
    domain: Domain,
    segment_size: u64,
    capacity_bytes: u64,
    verify_on_read: bool,
    /// put: the store tracked events (every put accounted to its event).
    events_tracked: bool,
    /// Values at least this long went by direct I/O, where the tier takes it.
    direct_io_min_value_bytes: u64,
    /// How bulk records reached the tier: direct, buffered or mapped.
    bulk_write_path: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<Order>,
    /// get: keys looked up together (1: one get per key).
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<usize>,
    ops_per_sec: f64,
    bytes_per_sec: f64,
    stopped_full: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    copy_ops_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copy_bytes_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copy_ratio: Option<f64>,
    limit_name: String,
    limit_bytes_per_sec: f64,
    ratio: f64,
    /// Persisted put on a disk: the device doing the same work (a sync per record-sized write).
    #[serde(skip_serializing_if = "Option::is_none")]
    synced_limit_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    synced_limit_bytes_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    synced_ratio: Option<f64>,
    /// Put into a fresh, not preallocated store on a memory file system: a copy into new
    /// pages of that file system (the kernel allocating and zeroing each page on first touch).
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_limit_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_limit_bytes_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_ratio: Option<f64>,
    /// Put of values from 4 KiB on a memory file system: the put's own work alone, a crc32c of
    /// each value and the engine's copy of it into memory not touched lately (stores past the
    /// cache), which beats memcpy of large buffers where that one reads each line it writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    work_limit_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    work_limit_bytes_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    work_ratio: Option<f64>,
    repeat: usize,
    runs: Vec<Run>,
    /// Peers measured in the same run (`--vs`), medians of as many runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    peers: Vec<PeerResult>,
    /// put --vs lmdb: hotstore / LMDB with 1000 puts per transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_lmdb_batched: Option<f64>,
    /// get --vs lmdb: hotstore / LMDB.
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_lmdb: Option<f64>,
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Memory => "memory",
        Durability::Persisted => "persisted",
    }
}

/// Half the free space of the file system, and on a memory file system at most a quarter of
/// the available RAM, in whole segments.
fn auto_capacity(dir: &Path, segment_size: u64) -> Result<u64> {
    let Some(free) = hotstore::free_space_bytes(dir) else {
        return fail(format!(
            "cannot tell the free space under {}: give --capacity",
            dir.display()
        ));
    };
    let mut cap = free / 2;
    if limits::is_memory_fs(dir) {
        if let Some(mem) = limits::mem_available_bytes() {
            cap = cap.min(mem / 4);
        }
    }
    let cap = cap - cap % segment_size;
    if cap < 4 * segment_size {
        return fail(format!(
            "only {} free under {}: too little for a benchmark store of 4 segments of {}",
            human_bytes(free as f64),
            dir.display(),
            human_bytes(segment_size as f64)
        ));
    }
    Ok(cap)
}

/// Opens a fresh store in a new temporary directory under `base`.
fn fresh_store(
    base: &Path,
    cfg: &Config,
    segment_size: u64,
    capacity: u64,
) -> Result<(ScratchDir, Store)> {
    let tmp = temp_dir_in(base)?;
    let default_lanes = StoreOptions::new(tmp.path()).lanes;
    let store = Store::builder(tmp.path())
        .segment_size_bytes(usize::try_from(segment_size).unwrap_or(usize::MAX))
        .lanes(cfg.threads.max(default_lanes))
        .tier(TierSpec::new(".").capacity_bytes(capacity))
        .verify_on_read(cfg.verify_on_read)
        .preallocate_bytes(crate::util::preallocate_bytes(cfg.preallocate, capacity)?)
        .direct_io_min_value_bytes(
            cfg.direct_io_min
                .map_or(hotstore::DIRECT_IO_MIN_VALUE_BYTES, |m| {
                    usize::try_from(m).unwrap_or(usize::MAX)
                }),
        )
        .open()?;
    Ok((tmp, store))
}

/// The first tier's domain and bulk write path.
fn tier_paths(store: &Store) -> (Domain, &'static str) {
    let s = store.stats();
    (s.tiers[0].domain, s.tiers[0].bulk_write_path)
}

fn put_run(base: &Path, cfg: &Config, seg: u64, cap: u64) -> Result<(Run, (Domain, &'static str))> {
    let (tmp, store) = fresh_store(base, cfg, seg, cap)?;
    let domain = tier_paths(&store);
    if cfg.events {
        // Setting a policy is an event call: the store tracks events from here on.
        store.set_event_policy(hotstore::EventPolicy::default())?;
    }
    let value = value_buffer(cfg.value_size as usize);
    let w = measure(cfg.threads, cfg.duration, |t, counter, flags| {
        let mut n = 0u64;
        while !flags.stop.load(Ordering::Relaxed) {
            match store.put(&key(t, n), &value, cfg.durability) {
                Ok(()) => {}
                Err(e) if e.is_full() => {
                    flags.full.store(true, Ordering::Release);
                    return;
                }
                Err(e) => return flags.fail(e.to_string()),
            }
            if cfg.keep > 0 && n >= cfg.keep {
                match store.remove(&key(t, n - cfg.keep), cfg.durability) {
                    Ok(true) => {}
                    Ok(false) => return flags.fail(format!("key {} vanished", n - cfg.keep)),
                    Err(e) if e.is_full() => {
                        flags.full.store(true, Ordering::Release);
                        return;
                    }
                    Err(e) => return flags.fail(e.to_string()),
                }
            }
            n += 1;
            counter.store(n, Ordering::Relaxed);
        }
    })?;
    let stats = store.stats();
    store.close()?;
    drop(tmp);
    let mut run = run_of(&w, cfg.value_size);
    run.segment_waits = Some(stats.waits.segment.count);
    run.segment_wait_secs = Some(stats.waits.segment.total_ns as f64 / 1e9);
    let created = stats.tiers[0].created;
    run.files_created = Some(created.files);
    run.file_create_bytes_per_sec = created.bytes_per_sec();
    Ok((run, domain))
}

fn run_of(w: &Window, value_size: u64) -> Run {
    let secs = w.secs.max(1e-9);
    Run {
        ops_per_sec: w.ops as f64 / secs,
        bytes_per_sec: (w.ops * value_size) as f64 / secs,
        ops: w.ops,
        duration_secs: w.secs,
        stopped_full: w.stopped_full,
        copy_ops_per_sec: None,
        copy_bytes_per_sec: None,
        segment_waits: None,
        segment_wait_secs: None,
        files_created: None,
        file_create_bytes_per_sec: None,
    }
}

/// Writes keys `0..n` (fragment keys of run 0) with all threads, then makes them durable.
fn populate(store: &Store, cfg: &Config, n: u64) -> Result<()> {
    let value = value_buffer(cfg.value_size as usize);
    let threads = cfg.threads as u64;
    let errors: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let value = &value;
                scope.spawn(move || -> Result<(), String> {
                    for i in (t * n / threads)..((t + 1) * n / threads) {
                        store
                            .put(&key(0, i), value, cfg.durability)
                            .map_err(|e| format!("populating key {i}: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(r) => r.err(),
                Err(_) => Some("a populating thread panicked".into()),
            })
            .collect()
    });
    if let Some(e) = errors.into_iter().next() {
        return fail(e);
    }
    store.flush()?;
    Ok(())
}

/// Measures gets of keys `0..n`: zero-copy (`get_with`) or copying (`get`), one key at a
/// time, or `cfg.batch` keys at a time (`get_many_with`, `get_many`).
fn get_window(store: &Store, cfg: &Config, n: u64, copy: bool) -> Result<Window> {
    let threads = cfg.threads as u64;
    let batch = cfg.batch.max(1);
    measure(cfg.threads, cfg.duration, |t, counter, flags| {
        let mut i = t as u64 * n / threads;
        // xorshift64: cheap enough not to show in the figures.
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let mut next = || match cfg.order {
            Order::Seq => {
                i += 1;
                if i >= n {
                    i = 0;
                }
                i
            }
            Order::Random => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            }
        };
        let mut done = 0u64;
        let mut keys = Vec::with_capacity(batch);
        while !flags.stop.load(Ordering::Relaxed) {
            let failed = if batch == 1 {
                let k = next();
                let got = if copy {
                    store.get(&key(0, k)).map(|v| v.map(|v| black_box(v).len()))
                } else {
                    store.get_with(&key(0, k), |v| black_box(v[0]) as usize)
                };
                check_got(k, got.map(|v| v.is_some()))
            } else {
                keys.clear();
                keys.extend((0..batch).map(|_| key(0, next())));
                if copy {
                    match store.get_many(&keys) {
                        Ok(values) => values
                            .iter()
                            .zip(&keys)
                            .find_map(|(v, k)| check_got(key_no(k), Ok(black_box(v).is_some()))),
                        Err(e) => Some(e.to_string()),
                    }
                } else {
                    let mut failed = None;
                    store.get_many_with(&keys, |j, got| {
                        let got = got.map(|v| v.map(|v| black_box(v[0])).is_some());
                        if failed.is_none() {
                            failed = check_got(key_no(&keys[j]), got);
                        }
                    });
                    failed
                }
            };
            if let Some(why) = failed {
                return flags.fail(why);
            }
            done += batch as u64;
            counter.store(done, Ordering::Relaxed);
        }
    })
}

/// The number a benchmark key was made from ([`key`]).
fn key_no(k: &[u8]) -> u64 {
    hotstore::FragmentKey::from_bytes(k).map_or(u64::MAX, |f| f.event)
}

/// Why a get of key number `k` that answered `got` (present or not) is a failure, if it is.
fn check_got(k: u64, got: hotstore::Result<bool>) -> Option<String> {
    match got {
        Ok(true) => None,
        Ok(false) => Some(format!("key {k} written by the benchmark is missing")),
        Err(e) => Some(e.to_string()),
    }
}

fn median_index(runs: &[Run]) -> usize {
    let mut idx: Vec<usize> = (0..runs.len()).collect();
    idx.sort_by(|&a, &b| runs[a].ops_per_sec.total_cmp(&runs[b].ops_per_sec));
    idx[idx.len() / 2]
}

const LMDB_BATCHED: &str = "lmdb batched (1000 puts/txn, NOSYNC|WRITEMAP)";
const LMDB_SINGLE: &str = "lmdb single (1 put/txn, NOSYNC|WRITEMAP)";
const LMDB_GET: &str = "lmdb get (zero-copy, one key at a time, read txn per 1000)";

/// Runs the benchmark.
pub fn run(cfg: &Config) -> Result<Report> {
    if cfg.value_size == 0 || cfg.value_size > MAX_VALUE_LEN {
        return fail(format!(
            "--value-size must be 1 to {MAX_VALUE_LEN} bytes, not {}",
            cfg.value_size
        ));
    }
    let base = crate::bench_harness::base_dir(cfg.dir.as_deref())?;
    let seg = cfg
        .segment_size
        .unwrap_or(StoreOptions::new(&base).segment_size_bytes as u64);
    let cap = match cfg.capacity {
        Some(c) => c,
        None => auto_capacity(&base, seg)?,
    };
    if cfg.progress {
        eprintln!("measuring the machine's limit under {} ...", base.display());
    }
    let limit: Limit = match cfg.op {
        Op::Put => limits::write_limit_for(&base, cfg.threads, LIMIT_RUN),
        Op::Get => limits::memcpy_bandwidth(cfg.threads, MEMCPY_BUFFER_BYTES, LIMIT_RUN, 3),
    };
    let synced_limit = synced_limit(&base, cfg);
    let work_limit = work_limit(&base, cfg);
    // Its files stay held until the runs end (dropped with `_fresh_pages` below).
    let (fresh_limit, _fresh_pages) = fresh_limit(&base, cfg).unzip();
    let mut runs = Vec::with_capacity(cfg.repeat);
    let mut domain = (Domain::Volatile, "mapped");
    let mut key_count = None;
    // Peer name -> its ops/s in each run.
    let mut peer_runs: Vec<(String, Vec<f64>)> = Vec::new();
    let mut peer_run = |name: &str, w: &Window| {
        let rate = w.ops as f64 / w.secs.max(1e-9);
        match peer_runs.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => v.push(rate),
            None => peer_runs.push((name.to_string(), vec![rate])),
        }
    };
    if cfg.vs.is_some() {
        crate::bench_lmdb::check(cfg.threads)?;
    }
    match cfg.op {
        Op::Put => {
            for _ in 0..cfg.repeat {
                let (r, d) = put_run(&base, cfg, seg, cap)?;
                domain = d;
                runs.push(r);
                if cfg.vs == Some(Peer::Lmdb) {
                    let size = cfg.value_size as usize;
                    for (name, batch) in
                        [(LMDB_BATCHED, crate::bench_lmdb::BATCH), (LMDB_SINGLE, 1)]
                    {
                        let w =
                            crate::bench_lmdb::put_window(&base, size, batch, cfg.duration, cap)?;
                        peer_run(name, &w);
                    }
                }
            }
        }
        Op::Get => {
            let n = cfg
                .key_count
                .unwrap_or((GET_DEFAULT_BYTES / cfg.value_size).clamp(1, GET_MAX_KEYS));
            if n == 0 {
                return fail("--key-count must be at least 1");
            }
            key_count = Some(n);
            let (tmp, store) = fresh_store(&base, cfg, seg, cap)?;
            domain = tier_paths(&store);
            if cfg.progress {
                eprintln!("populating {n} keys ...");
            }
            populate(&store, cfg, n)?;
            for _ in 0..cfg.repeat {
                let mut r = run_of(&get_window(&store, cfg, n, false)?, cfg.value_size);
                let c = run_of(&get_window(&store, cfg, n, true)?, cfg.value_size);
                r.copy_ops_per_sec = Some(c.ops_per_sec);
                r.copy_bytes_per_sec = Some(c.bytes_per_sec);
                runs.push(r);
                if cfg.vs == Some(Peer::Lmdb) {
                    let map = (n * (cfg.value_size + 64) * 3).max(64 << 20);
                    let w = crate::bench_lmdb::get_window(
                        &base,
                        cfg.value_size as usize,
                        n,
                        cfg.order == Order::Random,
                        cfg.duration,
                        map,
                    )?;
                    peer_run(LMDB_GET, &w);
                }
            }
            store.close()?;
            drop(tmp);
        }
    }
    let mut m = runs[median_index(&runs)].clone();
    // The copying figures get their own median (the runs are ordered by zero-copy ops/s).
    let mut copies: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|r| Some((r.copy_ops_per_sec?, r.copy_bytes_per_sec?)))
        .collect();
    copies.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some(&(o, b)) = copies.get(copies.len() / 2) {
        m.copy_ops_per_sec = Some(o);
        m.copy_bytes_per_sec = Some(b);
    }
    let peers: Vec<PeerResult> = peer_runs
        .into_iter()
        .map(|(name, mut v)| {
            v.sort_by(f64::total_cmp);
            let ops = v[v.len() / 2];
            PeerResult {
                name,
                ops_per_sec: ops,
                ratio: m.ops_per_sec / ops.max(1e-9),
            }
        })
        .collect();
    let peer_ratio = |name: &str| peers.iter().find(|p| p.name == name).map(|p| p.ratio);
    let ratio_vs_lmdb_batched = peer_ratio(LMDB_BATCHED);
    let ratio_vs_lmdb = peer_ratio(LMDB_GET);
    let ratio = m.bytes_per_sec / limit.bytes_per_sec.max(1e-9);
    let copy_ratio = m
        .copy_bytes_per_sec
        .map(|b| b / limit.bytes_per_sec.max(1e-9));
    let over = |l: &Option<Limit>| {
        l.as_ref()
            .map(|l| m.bytes_per_sec / l.bytes_per_sec.max(1e-9))
    };
    let synced_ratio = over(&synced_limit);
    let fresh_ratio = over(&fresh_limit);
    let work_ratio = over(&work_limit);
    Ok(Report {
        op: cfg.op,
        value_size: cfg.value_size,
        threads: cfg.threads,
        durability: durability_name(cfg.durability),
        duration_secs: m.duration_secs,
        requested_duration_secs: cfg.duration.as_secs_f64(),
        dir: base,
        domain: domain.0,
        segment_size: seg,
        capacity_bytes: cap,
        verify_on_read: cfg.verify_on_read,
        events_tracked: cfg.events && cfg.op == Op::Put,
        direct_io_min_value_bytes: cfg
            .direct_io_min
            .unwrap_or(hotstore::DIRECT_IO_MIN_VALUE_BYTES as u64),
        bulk_write_path: domain.1,
        keep: (cfg.op == Op::Put && cfg.keep > 0).then_some(cfg.keep),
        key_count,
        order: (cfg.op == Op::Get).then_some(cfg.order),
        batch: (cfg.op == Op::Get).then_some(cfg.batch),
        ops_per_sec: m.ops_per_sec,
        bytes_per_sec: m.bytes_per_sec,
        stopped_full: m.stopped_full,
        copy_ops_per_sec: m.copy_ops_per_sec,
        copy_bytes_per_sec: m.copy_bytes_per_sec,
        copy_ratio,
        limit_name: limit.name,
        limit_bytes_per_sec: limit.bytes_per_sec,
        ratio,
        synced_limit_name: synced_limit.as_ref().map(|l| l.name.clone()),
        synced_limit_bytes_per_sec: synced_limit.map(|l| l.bytes_per_sec),
        synced_ratio,
        fresh_limit_name: fresh_limit.as_ref().map(|l| l.name.clone()),
        fresh_limit_bytes_per_sec: fresh_limit.map(|l| l.bytes_per_sec),
        fresh_ratio,
        work_limit_name: work_limit.as_ref().map(|l| l.name.clone()),
        work_limit_bytes_per_sec: work_limit.map(|l| l.bytes_per_sec),
        work_ratio,
        repeat: cfg.repeat,
        runs,
        peers,
        ratio_vs_lmdb_batched,
        ratio_vs_lmdb,
    })
}

/// For a Persisted put on a disk: the device's rate for O_DIRECT writes of one record's size
/// (value, header and key, padded to 4 KiB), each synced, into a new file: what a Persisted put
/// into a fresh store must do. The no-sync limit beside it is what a put cannot reach while
/// every acknowledgement waits for the device. `None` otherwise, or where the probe fails.
fn synced_limit(base: &std::path::Path, cfg: &Config) -> Option<Limit> {
    if cfg.op != Op::Put || cfg.durability != Durability::Persisted || limits::is_memory_fs(base) {
        return None;
    }
    let block = (cfg.value_size as usize + SYNCED_RECORD_OVERHEAD)
        .next_multiple_of(4096)
        .min(64 << 20);
    limits::direct_synced_write_bandwidth(base, block, LIMIT_RUN, 4 << 30, 3).ok()
}

/// For a put of values the engine copies past the cache
/// ([`hotstore::STREAMED_FROM_VALUE_BYTES`] and more) on a memory file system, the put's
/// own work done alone (`limits::fill_and_checksum_bandwidth`): memcpy of large buffers reads
/// every line it writes, and the engine's copy does not, so memcpy alone understates what the
/// machine can do. `None` otherwise.
fn work_limit(base: &std::path::Path, cfg: &Config) -> Option<Limit> {
    let applies = cfg.op == Op::Put && cfg.value_size >= hotstore::STREAMED_FROM_VALUE_BYTES as u64;
    if !applies || !limits::is_memory_fs(base) {
        return None;
    }
    if cfg.progress {
        eprintln!("measuring a checksum and copy of one value at a time ...");
    }
    Some(limits::work_limit(cfg.value_size as usize, cfg.threads))
}

/// For a put into a fresh store on a memory file system, neither preallocated nor recycling
/// (`--keep`): the rate of copying into new pages of that file system, which bounds any
/// writer there until files are reused (the memcpy limit assumes pages already in place).
/// The probe's files come back with it, to be held through the runs (see
/// [`limits::fresh_pages_bandwidth_holding`]). `None` otherwise, or where the probe fails.
fn fresh_limit(base: &std::path::Path, cfg: &Config) -> Option<(Limit, limits::HeldPages)> {
    let fresh = cfg.op == Op::Put && cfg.preallocate.is_none() && cfg.keep == 0;
    if !fresh || !limits::is_memory_fs(base) {
        return None;
    }
    limits::fresh_pages_bandwidth_holding(base, LIMIT_RUN, 1 << 30, 3).ok()
}

/// Header and a 16-byte key: what a record adds to its value, rounded up.
const SYNCED_RECORD_OVERHEAD: usize = 64;

fn rate(ops: f64, bytes: f64) -> String {
    format!("{} ops/s, {}/s", human_count(ops), human_bytes(bytes))
}

impl fmt::Display for Report {
    /// The text `bench put|get` prints: settings, every run, the median, peers, the limit and
    /// the ratio.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self;
        let op = match r.op {
            Op::Put => "put",
            Op::Get => "get",
        };
        writeln!(f,
        "bench {op}: {} values ({} bytes), {} thread(s), durability {}, {:.1} s per run after {:.1} s warm-up",
        human_bytes(r.value_size as f64),
        r.value_size,
        r.threads,
        r.durability,
        r.requested_duration_secs,
        WARMUP.as_secs_f64()
    )?;
        writeln!(
            f,
            "store:  fresh store under {} ({}), segments {}, capacity {}",
            r.dir.display(),
            r.domain,
            human_bytes(r.segment_size as f64),
            human_bytes(r.capacity_bytes as f64)
        )?;
        if r.events_tracked {
            writeln!(
                f,
                "events: tracked (default policy): every put is accounted to its event"
            )?;
        }
        if let Some(k) = r.keep {
            writeln!(
                f,
                "keys:   each thread keeps its newest {k} keys: every put also removes the oldest"
            )?;
        }
        if let (Some(n), Some(order)) = (r.key_count, r.order) {
            writeln!(
                f,
                "keys:   {n} keys, {} order{}, checksums {} on reads",
                match order {
                    Order::Seq => "sequential",
                    Order::Random => "random",
                },
                match r.batch {
                    Some(b) if b > 1 => format!(", {b} at a time (get_many)"),
                    _ => String::new(),
                },
                if r.verify_on_read {
                    "verified"
                } else {
                    "NOT verified"
                }
            )?;
        }
        for (i, run) in r.runs.iter().enumerate() {
            let mut line = format!(
                "run {}:  {} over {:.2} s",
                i + 1,
                rate(run.ops_per_sec, run.bytes_per_sec),
                run.duration_secs
            );
            if let (Some(o), Some(b)) = (run.copy_ops_per_sec, run.copy_bytes_per_sec) {
                line += &format!("; copying get: {}", rate(o, b));
            }
            if let (Some(n), Some(secs)) = (run.segment_waits, run.segment_wait_secs) {
                if n > 0 {
                    line += &format!(
                        "; writers waited for a segment file {n} times, {secs:.3} s in all"
                    );
                    if let (Some(files), Some(rate)) =
                        (run.files_created, run.file_create_bytes_per_sec)
                    {
                        line += &format!(
                            " ({files} files created, at {}/s per creating thread)",
                            human_bytes(rate)
                        );
                    }
                }
            }
            if run.stopped_full {
                line += " (store full: stopped early)";
            }
            writeln!(f, "{line}")?;
        }
        writeln!(
            f,
            "result: {} (median of {})",
            rate(r.ops_per_sec, r.bytes_per_sec),
            r.runs.len()
        )?;
        for p in &r.peers {
            writeln!(
                f,
                "peer:   {}: {} ops/s (hotstore {:.2}x)",
                p.name,
                human_count(p.ops_per_sec),
                p.ratio
            )?;
        }
        if let (Some(o), Some(b)) = (r.copy_ops_per_sec, r.copy_bytes_per_sec) {
            writeln!(f, "        copying get: {}", rate(o, b))?;
        }
        writeln!(
            f,
            "limit:  {}: {}/s",
            r.limit_name,
            human_bytes(r.limit_bytes_per_sec)
        )?;
        let mut ratio = format!("ratio:  {:.3} of the limit", r.ratio);
        if let Some(c) = r.copy_ratio {
            ratio += &format!(" (copying get: {c:.3})");
        }
        if let (Some(name), Some(b), Some(q)) = (
            &r.synced_limit_name,
            r.synced_limit_bytes_per_sec,
            r.synced_ratio,
        ) {
            ratio += &format!(
                "\nsynced: {name}: {}/s (the same work as a Persisted put); ratio {q:.3}",
                human_bytes(b)
            );
        }
        if let (Some(name), Some(b), Some(q)) = (
            &r.fresh_limit_name,
            r.fresh_limit_bytes_per_sec,
            r.fresh_ratio,
        ) {
            ratio += &format!(
                "\nfresh:  {name}: {}/s (a fresh store's files are new pages); ratio {q:.3}",
                human_bytes(b)
            );
        }
        if let (Some(name), Some(b), Some(q)) =
            (&r.work_limit_name, r.work_limit_bytes_per_sec, r.work_ratio)
        {
            ratio += &format!(
                "\nwork:   {name}: {}/s (the put's own work done alone); ratio {q:.3}",
                human_bytes(b)
            );
        }
        write!(f, "{ratio}")
    }
}
