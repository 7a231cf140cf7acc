//! `hotstore bench soak`: long-lived keys on a bounded store (issue 15). A fixed key set is
//! overwritten at random with mixed value sizes on a store whose capacity is a small multiple
//! of the live data, for minutes: no segment ever dies on its own (some of its keys are always
//! still live), so only relocation keeps the store writable. The run checks that space stays
//! bounded and no write is refused, and measures how much throughput relocation costs against
//! the same workload on an unbounded store (the reference, measured first) and how many bytes
//! it writes for each byte users write (write amplification).

use crate::bench_harness::{base_dir, temp_dir_in, value_buffer};
use crate::util::{human_bytes, human_count, median};
use crate::{fail, Result};
use hotstore::{Durability, FragmentKey, Stats, Store, TierSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Throughput is sampled this often; the medians are over these samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The engine's default segment size, used when the capacity holds at least
/// [`SEGMENTS_PER_CAPACITY`] of them.
const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// A smaller capacity gets smaller segments: at least this many fit in it.
const SEGMENTS_PER_CAPACITY: u64 = 16;
/// Smallest segment chosen by default (the engine's minimum is 64 KiB).
const MIN_DEFAULT_SEGMENT_BYTES: u64 = 1 << 20;

/// What to run (`hotstore bench soak`'s options).
pub struct Config {
    /// File system to measure: the stores go in fresh temporary directories under it (`None`:
    /// /dev/shm if present, else the temp dir).
    pub dir: Option<PathBuf>,
    /// Length of the bounded run.
    pub duration: Duration,
    /// Length of the unbounded reference run.
    pub reference_duration: Duration,
    /// Value bytes of the key set (the live data).
    pub live_bytes: u64,
    /// Capacity as a multiple of `live_bytes`.
    pub capacity_factor: f64,
    /// Smallest value.
    pub min_value: u64,
    /// Largest value.
    pub max_value: u64,
    /// Segment size (`None`: 64 MiB, or smaller so that 16 fit in the capacity).
    pub segment_size: Option<u64>,
    /// Bytes of segment files the unbounded reference prepares at open (`None`: 16 x the
    /// live data). The bounded store prepares all its capacity. Fresh tmpfs pages are slow to
    /// fault in on some machines; a reference that grows into new files measures that.
    pub reference_preallocate: Option<u64>,
    /// Writer threads.
    pub threads: usize,
    /// Durability of every write.
    pub durability: Durability,
    /// Seed of the sizes and the key choices (`None`: random).
    pub seed: Option<u64>,
    /// Seconds between progress lines on stderr (`None`: none).
    pub progress_every: Option<Duration>,
}

/// One progress interval of the bounded run.
#[derive(Serialize, Clone)]
pub struct Interval {
    /// Seconds since the bounded run started.
    pub elapsed_secs: f64,
    /// Overwrites per second in the interval.
    pub ops_per_sec: f64,
    /// Value bytes per second in the interval.
    pub bytes_per_sec: f64,
    /// Bytes of segment files at the end of the interval.
    pub file_bytes: u64,
    /// Live record bytes at the end of the interval.
    pub live_bytes: u64,
    /// Write amplification of the soak so far.
    pub write_amplification: f64,
    /// Writes refused with StoreFull so far.
    pub full_errors: u64,
}

/// One run (reference or bounded).
#[derive(Serialize)]
pub struct Phase {
    /// Capacity (0: unbounded).
    pub capacity_bytes: u64,
    /// Segment file bytes prepared at open.
    pub preallocated_bytes: u64,
    /// Measured seconds (after the key set was written).
    pub duration_secs: f64,
    /// Overwrites done.
    pub ops: u64,
    /// Median of the per-second overwrite rates.
    pub ops_per_sec: f64,
    /// Median of the per-second value byte rates.
    pub bytes_per_sec: f64,
    /// Per-second samples taken.
    pub samples: usize,
    /// Largest file bytes seen at a sample.
    pub max_file_bytes: u64,
    /// File bytes at the end.
    pub end_file_bytes: u64,
    /// Live record bytes at the end.
    pub end_live_bytes: u64,
    /// (user bytes + relocated bytes) / user bytes over the measured window.
    pub write_amplification: f64,
    /// Records relocated in the window.
    pub relocated_records: u64,
    /// Their bytes.
    pub relocated_bytes: u64,
    /// Segment groups freed by relocation in the window.
    pub relocated_groups: u64,
    /// Writes refused with StoreFull (writers go on after one).
    pub full_errors: u64,
}

/// The result of `bench soak`: the one JSON object `--json` prints, and the text of
/// [`Display`](fmt::Display) otherwise.
#[derive(Serialize)]
pub struct Report {
    op: &'static str,
    dir: String,
    keys: u64,
    live_value_bytes: u64,
    value_mix: String,
    min_value: u64,
    max_value: u64,
    segment_size: u64,
    capacity_bytes: u64,
    capacity_factor: f64,
    threads: usize,
    durability: String,
    seed: u64,
    /// The unbounded reference.
    pub reference: Phase,
    /// The bounded soak.
    pub bounded: Phase,
    /// Bounded median bytes/s over the reference's.
    pub ratio: f64,
    /// Bounded max file bytes over the capacity.
    pub max_file_fraction: f64,
    /// The bounded run's progress lines.
    pub intervals: Vec<Interval>,
}

impl Report {
    /// Why the soak failed (StoreFull, or more files than the capacity), if it did.
    pub fn failure(&self) -> Option<String> {
        if self.bounded.full_errors > 0 {
            return Some(format!(
                "{} writes were refused with StoreFull on a store at {}x its live data",
                self.bounded.full_errors, self.capacity_factor
            ));
        }
        if self.bounded.max_file_bytes > self.capacity_bytes {
            return Some(format!(
                "the store held {} bytes of files, over its capacity of {} bytes",
                self.bounded.max_file_bytes, self.capacity_bytes
            ));
        }
        None
    }
}

/// The sizes of the key set: log-uniform in `min ..= max`, until they add up to `live_bytes`.
fn key_sizes(rng: &mut StdRng, cfg: &Config) -> Vec<u64> {
    let (lo, hi) = (
        (cfg.min_value as f64).ln(),
        (cfg.max_value as f64 + 1.0).ln(),
    );
    let mut sizes = Vec::new();
    let mut total = 0;
    while total < cfg.live_bytes {
        let len = (rng.gen_range(lo..hi).exp().floor() as u64).clamp(cfg.min_value, cfg.max_value);
        sizes.push(len);
        total += len;
    }
    sizes
}

fn key(i: usize) -> [u8; 16] {
    FragmentKey::new(1, i as u64, 0, 0).to_bytes()
}

/// The default segment size for a capacity: 64 MiB, or the largest power of two of at least
/// 1 MiB that fits 16 times.
fn default_segment_size(capacity: u64) -> u64 {
    let fit = capacity / SEGMENTS_PER_CAPACITY;
    if fit >= DEFAULT_SEGMENT_BYTES {
        DEFAULT_SEGMENT_BYTES
    } else if fit <= MIN_DEFAULT_SEGMENT_BYTES {
        MIN_DEFAULT_SEGMENT_BYTES
    } else {
        1 << (63 - fit.leading_zeros())
    }
}

/// One workload: the configuration, the key set's sizes and the segment size, shared by both
/// runs.
struct Workload<'a> {
    cfg: &'a Config,
    sizes: Vec<u64>,
    segment_size: u64,
}

fn open(dir: &Path, w: &Workload<'_>, capacity: u64, preallocate: u64) -> Result<Store> {
    let mut b = Store::builder(dir)
        .segment_size_bytes(usize::try_from(w.segment_size).unwrap_or(usize::MAX));
    if capacity > 0 {
        b = b.tier(TierSpec::new(".").capacity_bytes(capacity));
    }
    Ok(b.preallocate_bytes(preallocate).open()?)
}

/// What the writer threads share with the controller.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    ops: AtomicU64,
    bytes: AtomicU64,
    full: AtomicU64,
    error: Mutex<Option<String>>,
}

/// Writes every key once, then overwrites keys at random until `shared.stop`.
fn writer(
    w: &Workload<'_>,
    store: &Store,
    t: usize,
    seed: u64,
    shared: &Shared,
    started: &AtomicU64,
) {
    let (sizes, durability, threads) = (&w.sizes, w.cfg.durability, w.cfg.threads.max(1));
    let mine: Vec<usize> = (t..sizes.len()).step_by(threads).collect();
    let max = sizes.iter().copied().max().unwrap_or(0) as usize;
    let value = value_buffer(max);
    let mut rng = StdRng::seed_from_u64(seed);
    let put = |i: usize| -> bool {
        let len = sizes[i] as usize;
        match store.put(&key(i), &value[..len], durability) {
            Ok(()) => true,
            Err(e) if e.is_full() => {
                shared.full.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
                false
            }
            Err(e) => {
                if let Ok(mut err) = shared.error.lock() {
                    err.get_or_insert(e.to_string());
                }
                shared.stop.store(true, Ordering::Release);
                false
            }
        }
    };
    for &i in &mine {
        while !put(i) {
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
        }
    }
    started.fetch_add(1, Ordering::AcqRel);
    if mine.is_empty() {
        return;
    }
    while !shared.stop.load(Ordering::Acquire) {
        let i = mine[rng.gen_range(0..mine.len())];
        if put(i) {
            shared.ops.fetch_add(1, Ordering::Relaxed);
            shared.bytes.fetch_add(sizes[i], Ordering::Relaxed);
        }
    }
}

/// User and relocated bytes, for write amplification over a window.
#[derive(Clone, Copy)]
struct Written {
    user: u64,
    relocated: u64,
    records: u64,
    groups: u64,
}

impl Written {
    fn of(s: &Stats) -> Self {
        Written {
            user: s.written_bytes,
            relocated: s.relocation.bytes + s.relocation.offloaded_bytes,
            records: s.relocation.records + s.relocation.offloaded_records,
            groups: s.relocation.groups,
        }
    }

    fn amplification_since(&self, start: &Written) -> f64 {
        let user = self.user.saturating_sub(start.user);
        if user == 0 {
            return 1.0;
        }
        (user + self.relocated.saturating_sub(start.relocated)) as f64 / user as f64
    }
}

/// Runs one phase on a fresh store in `dir`: writes the key set, then overwrites for
/// `duration`, sampling every second.
fn phase(
    w: &Workload<'_>,
    dir: &Path,
    (capacity, preallocate): (u64, u64),
    duration: Duration,
    seed: u64,
    mut on_interval: impl FnMut(&Interval),
) -> Result<(Phase, Vec<Interval>)> {
    let cfg = w.cfg;
    let store = open(dir, w, capacity, preallocate)?;
    let shared = Shared::default();
    let started = AtomicU64::new(0);
    let threads = cfg.threads.max(1);
    let mut rng = StdRng::seed_from_u64(seed);
    let seeds: Vec<u64> = (0..threads).map(|_| rng.gen()).collect();
    let outcome = std::thread::scope(|scope| {
        for (t, &s) in seeds.iter().enumerate() {
            let (store, shared, started) = (&store, &shared, &started);
            scope.spawn(move || writer(w, store, t, s, shared, started));
        }
        let out = control(
            &store,
            cfg,
            &shared,
            &started,
            threads,
            duration,
            &mut on_interval,
        );
        shared.stop.store(true, Ordering::Release);
        out
    });
    let closed = store.close();
    if let Some(msg) = shared.error.lock().ok().and_then(|mut e| e.take()) {
        return fail(msg);
    }
    closed?;
    let (mut p, intervals) = outcome;
    p.capacity_bytes = capacity;
    p.preallocated_bytes = preallocate;
    p.full_errors = shared.full.load(Ordering::Relaxed);
    Ok((p, intervals))
}

/// The controller: waits for the key set to be written, then samples for `duration`.
fn control(
    store: &Store,
    cfg: &Config,
    shared: &Shared,
    started: &AtomicU64,
    threads: usize,
    duration: Duration,
    on_interval: &mut impl FnMut(&Interval),
) -> (Phase, Vec<Interval>) {
    while started.load(Ordering::Acquire) < threads as u64 && !shared.stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let s0 = store.stats();
    let w0 = Written::of(&s0);
    let t0 = Instant::now();
    let (ops0, bytes0) = (
        shared.ops.load(Ordering::Relaxed),
        shared.bytes.load(Ordering::Relaxed),
    );
    let mut max_file_bytes = s0.file_bytes;
    let (mut ops_rates, mut byte_rates) = (Vec::new(), Vec::new());
    let mut intervals = Vec::new();
    let (mut last_t, mut last_ops, mut last_bytes) = (t0, ops0, bytes0);
    let (mut iv_t, mut iv_ops, mut iv_bytes) = (t0, ops0, bytes0);
    let mut next = t0 + SAMPLE_EVERY;
    let end = t0 + duration;
    let mut stats = s0;
    while !shared.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let wake = next.min(end);
        if now < wake {
            std::thread::sleep((wake - now).min(Duration::from_millis(50)));
            continue;
        }
        let (ops, bytes) = (
            shared.ops.load(Ordering::Relaxed),
            shared.bytes.load(Ordering::Relaxed),
        );
        stats = store.stats();
        max_file_bytes = max_file_bytes.max(stats.file_bytes);
        let secs = (now - last_t).as_secs_f64();
        if secs >= SAMPLE_EVERY.as_secs_f64() * 0.5 {
            ops_rates.push((ops - last_ops) as f64 / secs);
            byte_rates.push((bytes - last_bytes) as f64 / secs);
        }
        (last_t, last_ops, last_bytes) = (now, ops, bytes);
        next += SAMPLE_EVERY;
        let done = now >= end;
        if let Some(every) = cfg.progress_every {
            if now - iv_t >= every || done {
                let secs = (now - iv_t).as_secs_f64();
                let iv = Interval {
                    elapsed_secs: (now - t0).as_secs_f64(),
                    ops_per_sec: (ops - iv_ops) as f64 / secs,
                    bytes_per_sec: (bytes - iv_bytes) as f64 / secs,
                    file_bytes: stats.file_bytes,
                    live_bytes: stats.live_bytes,
                    write_amplification: Written::of(&stats).amplification_since(&w0),
                    full_errors: shared.full.load(Ordering::Relaxed),
                };
                on_interval(&iv);
                intervals.push(iv);
                (iv_t, iv_ops, iv_bytes) = (now, ops, bytes);
            }
        }
        if done {
            break;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let w1 = Written::of(&stats);
    let phase = Phase {
        capacity_bytes: 0,
        preallocated_bytes: 0,
        duration_secs: secs,
        ops: shared.ops.load(Ordering::Relaxed) - ops0,
        ops_per_sec: median(&ops_rates).unwrap_or(0.0),
        bytes_per_sec: median(&byte_rates).unwrap_or(0.0),
        samples: byte_rates.len(),
        max_file_bytes,
        end_file_bytes: stats.file_bytes,
        end_live_bytes: stats.live_bytes,
        write_amplification: w1.amplification_since(&w0),
        relocated_records: w1.records - w0.records,
        relocated_bytes: w1.relocated - w0.relocated,
        relocated_groups: w1.groups - w0.groups,
        full_errors: 0,
    };
    (phase, intervals)
}

/// Runs the reference (unbounded) and then the bounded soak, each on a fresh store.
pub fn run(cfg: &Config) -> Result<Report> {
    if cfg.min_value == 0 || cfg.min_value > cfg.max_value {
        return fail(format!(
            "value sizes must satisfy 1 <= --min-value <= --max-value (got {} and {})",
            cfg.min_value, cfg.max_value
        ));
    }
    if cfg.max_value > hotstore::MAX_VALUE_LEN {
        return fail(format!(
            "--max-value {} is over the engine's largest value ({} bytes)",
            cfg.max_value,
            hotstore::MAX_VALUE_LEN
        ));
    }
    if !(cfg.capacity_factor.is_finite() && cfg.capacity_factor > 1.0) {
        return fail(format!(
            "--capacity-factor must be over 1 (the capacity must hold the live data), not {}",
            cfg.capacity_factor
        ));
    }
    if cfg.live_bytes < cfg.max_value {
        return fail("--live-bytes must be at least --max-value");
    }
    let base = &base_dir(cfg.dir.as_deref())?;
    let seed = cfg.seed.unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let sizes = key_sizes(&mut rng, cfg);
    let live: u64 = sizes.iter().sum();
    let capacity = (live as f64 * cfg.capacity_factor) as u64;
    let segment_size = cfg
        .segment_size
        .unwrap_or_else(|| default_segment_size(capacity));
    let reference_preallocate = cfg.reference_preallocate.unwrap_or(live * 16);
    let w = Workload {
        cfg,
        sizes,
        segment_size,
    };
    let note = |msg: String| {
        if cfg.progress_every.is_some() {
            eprintln!("{msg}");
        }
    };
    note(format!(
        "soak: {} keys, {} of values (log-uniform {} ..= {}), segments of {}; reference: unbounded ({} preallocated) for {:.0} s ...",
        w.sizes.len(),
        human_bytes(live as f64),
        human_bytes(cfg.min_value as f64),
        human_bytes(cfg.max_value as f64),
        human_bytes(segment_size as f64),
        human_bytes(reference_preallocate as f64),
        cfg.reference_duration.as_secs_f64()
    ));
    let phase_seed: u64 = rng.gen();
    let (reference, _) = {
        let tmp = temp_dir_in(base)?;
        phase(
            &w,
            tmp.path(),
            (0, reference_preallocate),
            cfg.reference_duration,
            phase_seed,
            |_| {},
        )?
    };
    note(format!(
        "soak: reference {} ops/s, {}/s (median); bounded at {} ({}x the live data) for {:.0} s ...",
        human_count(reference.ops_per_sec),
        human_bytes(reference.bytes_per_sec),
        human_bytes(capacity as f64),
        cfg.capacity_factor,
        cfg.duration.as_secs_f64()
    ));
    let (bounded, intervals) = {
        let tmp = temp_dir_in(base)?;
        phase(
            &w,
            tmp.path(),
            (capacity, capacity),
            cfg.duration,
            phase_seed,
            |iv| note(iv.line(capacity)),
        )?
    };
    let ratio = if reference.bytes_per_sec > 0.0 {
        bounded.bytes_per_sec / reference.bytes_per_sec
    } else {
        0.0
    };
    Ok(Report {
        op: "soak",
        dir: base.display().to_string(),
        keys: w.sizes.len() as u64,
        live_value_bytes: live,
        value_mix: format!("log-uniform {} ..= {} bytes", cfg.min_value, cfg.max_value),
        min_value: cfg.min_value,
        max_value: cfg.max_value,
        segment_size,
        capacity_bytes: capacity,
        capacity_factor: cfg.capacity_factor,
        threads: cfg.threads,
        durability: format!("{:?}", cfg.durability).to_lowercase(),
        seed,
        max_file_fraction: bounded.max_file_bytes as f64 / capacity as f64,
        reference,
        bounded,
        ratio,
        intervals,
    })
}

impl Interval {
    /// The progress line: elapsed, rates, files against the capacity, live, WA, StoreFull.
    fn line(&self, capacity: u64) -> String {
        format!(
            "soak {:6.0} s: {} ops/s, {}/s; files {} of {}; live {}; write amplification {:.2}; store full {}",
            self.elapsed_secs,
            human_count(self.ops_per_sec),
            human_bytes(self.bytes_per_sec),
            human_bytes(self.file_bytes as f64),
            human_bytes(capacity as f64),
            human_bytes(self.live_bytes as f64),
            self.write_amplification,
            self.full_errors
        )
    }
}

impl fmt::Display for Report {
    /// The text `bench soak` prints: the workload, both runs, and the figures of issue 15.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, b) = (&self.reference, &self.bounded);
        writeln!(
            f,
            "soak:      {} keys, {} of values ({}), {} thread(s), {} writes, segments of {}, under {} (seed {})",
            self.keys,
            human_bytes(self.live_value_bytes as f64),
            self.value_mix,
            self.threads,
            self.durability,
            human_bytes(self.segment_size as f64),
            self.dir,
            self.seed
        )?;
        writeln!(
            f,
            "unbounded: {} ops/s, {}/s [median of {} 1 s samples, {:.0} s]; files {} at most ({} preallocated{})",
            human_count(r.ops_per_sec),
            human_bytes(r.bytes_per_sec),
            r.samples,
            r.duration_secs,
            human_bytes(r.max_file_bytes as f64),
            human_bytes(r.preallocated_bytes as f64),
            if r.max_file_bytes > r.preallocated_bytes {
                ": it grew into fresh files, which also measures the kernel faulting in pages"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "bounded:   {} ops/s, {}/s [median of {} 1 s samples, {:.0} s]; capacity {} ({}x the live data)",
            human_count(b.ops_per_sec),
            human_bytes(b.bytes_per_sec),
            b.samples,
            b.duration_secs,
            human_bytes(self.capacity_bytes as f64),
            self.capacity_factor
        )?;
        writeln!(
            f,
            "ratio:     bounded {:.3} of the unbounded rate",
            self.ratio
        )?;
        writeln!(
            f,
            "space:     files {} at most ({:.3} of the capacity), {} at the end; live {}",
            human_bytes(b.max_file_bytes as f64),
            self.max_file_fraction,
            human_bytes(b.end_file_bytes as f64),
            human_bytes(b.end_live_bytes as f64)
        )?;
        write!(
            f,
            "relocated: {} records, {} in {} groups; write amplification {:.2}; store full {} times",
            b.relocated_records,
            human_bytes(b.relocated_bytes as f64),
            b.relocated_groups,
            b.write_amplification,
            b.full_errors
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_shrink_with_small_capacities() {
        assert_eq!(default_segment_size(1 << 30), 64 << 20);
        assert_eq!(default_segment_size(32 << 20), 2 << 20);
        assert_eq!(default_segment_size(40 << 20), 2 << 20);
        assert_eq!(default_segment_size(4 << 20), 1 << 20);
    }
}
