//! Throughput sampling for `hotstore minidaq`.
//!
//! Worker threads (readout and collector threads) bump shared [`Counters`]
//! with cheap relaxed atomic adds. A [`Sampler`] thread snapshots the
//! counters every `--sample-ms` and records the per-interval deltas as
//! [`Sample`]s. After the run, [`rate_stats`] summarises the samples as
//! median / p1 / p99 / mean rates with the ramp-up excluded, and
//! [`write_csv`] dumps them for offline analysis (`--csv FILE`).
//!
//! Only `std` and `serde` are used.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// An `AtomicU64` alone on its own cache line(s).
///
/// 128 bytes rather than 64 because modern x86 CPUs prefetch cache lines in
/// adjacent pairs, which causes false sharing between neighbouring 64-byte
/// lines (same choice as `crossbeam_utils::CachePadded` on x86_64).
#[repr(align(128))]
#[derive(Debug, Default)]
struct PaddedU64(AtomicU64);

/// Shared throughput counters, bumped by worker threads and read by the
/// [`Sampler`].
///
/// Every counter lives on its own cache line so that readout and collector
/// threads do not false-share. All updates use `Ordering::Relaxed`: the
/// counters are statistics, not synchronisation. For lowest overhead, a
/// worker should batch its updates (e.g. once per event or every few
/// fragments) rather than calling these methods once per byte range.
#[derive(Debug, Default)]
pub struct Counters {
    readout_ops: PaddedU64,
    readout_bytes: PaddedU64,
    collect_ops: PaddedU64,
    collect_bytes: PaddedU64,
    collect_events: PaddedU64,
    backlog_events: PaddedU64,
}

/// A plain copy of all [`Counters`] values at one point in time.
///
/// The fields are read one by one with relaxed loads, so a snapshot taken
/// while workers are running is not an atomic cut across all fields (it
/// may, for example, count the bytes of a fragment but not yet its op).
/// Such skew is at most one in-flight update per worker and evens out
/// over the following interval.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Fragments put into the store by readout threads.
    pub readout_ops: u64,
    /// Payload bytes put into the store by readout threads.
    pub readout_bytes: u64,
    /// Fragments read (and removed or kept) by collector threads.
    pub collect_ops: u64,
    /// Payload bytes read by collector threads.
    pub collect_bytes: u64,
    /// Complete events claimed by collector threads.
    pub collect_events: u64,
    /// Gauge: events currently complete but not yet collected (last value set).
    pub backlog_events: u64,
}

impl Counters {
    /// Creates a set of zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `ops` fragments with `bytes` payload bytes put by a readout thread.
    #[inline]
    pub fn add_readout(&self, ops: u64, bytes: u64) {
        self.readout_ops.0.fetch_add(ops, Ordering::Relaxed);
        self.readout_bytes.0.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records `fragments` fragments with `bytes` payload bytes read by a
    /// collector thread, belonging to `events` complete events.
    #[inline]
    pub fn add_collect(&self, fragments: u64, bytes: u64, events: u64) {
        self.collect_ops.0.fetch_add(fragments, Ordering::Relaxed);
        self.collect_bytes.0.fetch_add(bytes, Ordering::Relaxed);
        self.collect_events.0.fetch_add(events, Ordering::Relaxed);
    }

    /// Sets the backlog gauge (events waiting to be collected). This is a
    /// store, not an add: the last writer wins.
    #[inline]
    pub fn set_backlog(&self, events: u64) {
        self.backlog_events.0.store(events, Ordering::Relaxed);
    }

    /// Reads all counters (see [`Totals`] for the consistency caveat).
    pub fn snapshot(&self) -> Totals {
        Totals {
            readout_ops: self.readout_ops.0.load(Ordering::Relaxed),
            readout_bytes: self.readout_bytes.0.load(Ordering::Relaxed),
            collect_ops: self.collect_ops.0.load(Ordering::Relaxed),
            collect_bytes: self.collect_bytes.0.load(Ordering::Relaxed),
            collect_events: self.collect_events.0.load(Ordering::Relaxed),
            backlog_events: self.backlog_events.0.load(Ordering::Relaxed),
        }
    }
}

/// Counter deltas over one sampling interval.
///
/// The interval covers `[t_secs - interval_secs, t_secs]`, in seconds since
/// [`Sampler::start`]. `interval_secs` is the measured length of the
/// interval, which may differ slightly from the nominal sampling interval
/// (timer slack, scheduling delays).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// End of the interval, seconds since the sampler started.
    pub t_secs: f64,
    /// Measured length of the interval in seconds.
    pub interval_secs: f64,
    /// Fragments put by readout threads during the interval.
    pub readout_ops: u64,
    /// Payload bytes put by readout threads during the interval.
    pub readout_bytes: u64,
    /// Fragments collected during the interval.
    pub collect_ops: u64,
    /// Payload bytes collected during the interval.
    pub collect_bytes: u64,
    /// Complete events collected during the interval.
    pub collect_events: u64,
    /// Backlog gauge at the end of the interval (not a delta).
    pub backlog_events: u64,
}

impl Sample {
    /// Builds the sample for the interval between two snapshots.
    ///
    /// Deltas saturate at zero, so a reset counter never yields a huge value.
    pub fn between(prev: &Totals, cur: &Totals, t_secs: f64, interval_secs: f64) -> Sample {
        Sample {
            t_secs,
            interval_secs,
            readout_ops: cur.readout_ops.saturating_sub(prev.readout_ops),
            readout_bytes: cur.readout_bytes.saturating_sub(prev.readout_bytes),
            collect_ops: cur.collect_ops.saturating_sub(prev.collect_ops),
            collect_bytes: cur.collect_bytes.saturating_sub(prev.collect_bytes),
            collect_events: cur.collect_events.saturating_sub(prev.collect_events),
            backlog_events: cur.backlog_events,
        }
    }

    /// Start of the interval, seconds since the sampler started.
    pub fn start_secs(&self) -> f64 {
        self.t_secs - self.interval_secs
    }

    /// `count / interval_secs`, or 0 for an empty interval.
    pub fn per_sec(&self, count: u64) -> f64 {
        if self.interval_secs > 0.0 {
            count as f64 / self.interval_secs
        } else {
            0.0
        }
    }

    /// Readout fragments per second over this interval.
    pub fn readout_ops_per_sec(&self) -> f64 {
        self.per_sec(self.readout_ops)
    }

    /// Readout payload bytes per second over this interval.
    pub fn readout_bytes_per_sec(&self) -> f64 {
        self.per_sec(self.readout_bytes)
    }

    /// Collected fragments per second over this interval.
    pub fn collect_ops_per_sec(&self) -> f64 {
        self.per_sec(self.collect_ops)
    }

    /// Collected payload bytes per second over this interval.
    pub fn collect_bytes_per_sec(&self) -> f64 {
        self.per_sec(self.collect_bytes)
    }

    /// Collected events per second over this interval.
    pub fn collect_events_per_sec(&self) -> f64 {
        self.per_sec(self.collect_events)
    }
}

/// Merges consecutive samples into one covering all of them.
///
/// Deltas and intervals are summed, `t_secs` and `backlog_events` are taken
/// from the last sample. Returns `None` for an empty slice. Useful for
/// coarser bins and for "rate over the last N ms" progress lines.
pub fn merge_samples(samples: &[Sample]) -> Option<Sample> {
    let last = samples.last()?;
    let mut merged = Sample {
        t_secs: last.t_secs,
        backlog_events: last.backlog_events,
        ..Sample::default()
    };
    for s in samples {
        merged.interval_secs += s.interval_secs;
        merged.readout_ops += s.readout_ops;
        merged.readout_bytes += s.readout_bytes;
        merged.collect_ops += s.collect_ops;
        merged.collect_bytes += s.collect_bytes;
        merged.collect_events += s.collect_events;
    }
    Some(merged)
}

/// State shared between a [`Sampler`] handle and its thread.
#[derive(Debug)]
struct SamplerShared {
    stop: AtomicBool,
    samples: Mutex<Vec<Sample>>,
}

impl SamplerShared {
    fn samples(&self) -> MutexGuard<'_, Vec<Sample>> {
        // A poisoned lock only means a reader panicked; the data is fine.
        self.samples.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Background thread that turns [`Counters`] into a time series of [`Sample`]s.
///
/// Timing: time zero is the moment [`Sampler::start`] is called (the first
/// snapshot is taken then, so anything counted earlier is not reported).
/// Sample `k` is due at `k * interval`; the thread sleeps until that
/// deadline, snapshots, and records the *measured* time since the previous
/// snapshot. Deadlines are on a fixed grid so intervals do not drift; if
/// the thread wakes up late by more than a whole interval, the missed
/// deadlines are skipped (that sample then simply has a longer
/// `interval_secs`) instead of taking several back-to-back samples.
///
/// [`Sampler::stop`] takes one final, usually shorter, sample so that the
/// samples add up exactly to the counter totals between start and stop.
///
/// Cost: one wake-up, six relaxed loads and one uncontended mutex lock per
/// interval; about 64 bytes of memory per sample (≈ 45 MB per hour at 5 ms).
#[derive(Debug)]
pub struct Sampler {
    shared: Arc<SamplerShared>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `counters` every `interval` on a new thread.
    ///
    /// # Panics
    ///
    /// Panics if `interval` is zero or the thread cannot be spawned.
    pub fn start(counters: Arc<Counters>, interval: Duration) -> Sampler {
        assert!(!interval.is_zero(), "sampling interval must be > 0");
        let shared = Arc::new(SamplerShared {
            stop: AtomicBool::new(false),
            samples: Mutex::new(Vec::with_capacity(1024)),
        });
        let start = Instant::now();
        let first = counters.snapshot();
        let thread_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("minidaq-sampler".into())
            .spawn(move || sampler_loop(&counters, &thread_shared, start, first, interval))
            .expect("failed to spawn sampler thread");
        Sampler {
            shared,
            thread: Some(thread),
        }
    }

    /// Returns the most recent samples merged into one that covers at least
    /// `window` (or everything recorded so far, if less), or `None` before
    /// the first sample. Meant for a live progress line printed from another
    /// thread, e.g. `sampler.recent(Duration::from_millis(500))` and then
    /// `.collect_bytes_per_sec()` on the result.
    pub fn recent(&self, window: Duration) -> Option<Sample> {
        let window = window.as_secs_f64();
        let samples = self.shared.samples();
        let mut covered = 0.0;
        let mut first = samples.len();
        while first > 0 && covered < window {
            first -= 1;
            covered += samples[first].interval_secs;
        }
        merge_samples(&samples[first..])
    }

    /// Shorthand for [`Sampler::recent`] over the last 0.5 s.
    pub fn latest_rates(&self) -> Option<Sample> {
        self.recent(Duration::from_millis(500))
    }

    /// Stops the thread (after a final partial sample) and returns all samples
    /// in time order.
    pub fn stop(mut self) -> Vec<Sample> {
        self.shutdown();
        std::mem::take(&mut *self.shared.samples())
    }

    fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shared.stop.store(true, Ordering::Release);
            thread.thread().unpark();
            // The loop does not panic in practice; if it did, the samples
            // taken until then are still returned.
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    /// Stops the sampler thread if [`Sampler::stop`] was not called.
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn sampler_loop(
    counters: &Counters,
    shared: &SamplerShared,
    start: Instant,
    mut prev: Totals,
    interval: Duration,
) {
    let mut prev_time = start;
    let mut deadline = start + interval;
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        let now = Instant::now();
        if !stopping && now < deadline {
            // Woken early (spurious unpark) or first pass: sleep the rest.
            thread::park_timeout(deadline - now);
            continue;
        }
        let cur = counters.snapshot();
        let sample = Sample::between(
            &prev,
            &cur,
            now.duration_since(start).as_secs_f64(),
            now.duration_since(prev_time).as_secs_f64(),
        );
        shared.samples().push(sample);
        if stopping {
            return;
        }
        prev = cur;
        prev_time = now;
        // Next grid point strictly after `now`, skipping any we overslept.
        while deadline <= now {
            deadline += interval;
        }
    }
}

/// Summary statistics of a per-second rate over a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateStats {
    /// Median (nearest-rank 50th percentile) of the per-sample rates.
    pub median: f64,
    /// Nearest-rank 1st percentile of the per-sample rates.
    pub p1: f64,
    /// Nearest-rank 99th percentile of the per-sample rates.
    pub p99: f64,
    /// Overall rate: total count divided by total time (not a mean of rates).
    pub mean: f64,
    /// Number of samples the statistics were computed from.
    pub samples: usize,
}

/// Computes rate statistics for one field of the samples.
///
/// Exact definition:
///
/// 1. Eligible samples are those with `interval_secs > 0` whose start time
///    `t_secs - interval_secs` is `>= skip_secs` (with 1 ns tolerance for
///    floating-point rounding). This excludes the ramp-up period
///    `[0, skip_secs)`; a sample straddling `skip_secs` is excluded too.
/// 2. For each eligible sample `i`, the rate is `r_i = f(s_i) / interval_i`,
///    where `f` extracts a count, e.g. `|s| s.collect_bytes as f64`.
/// 3. The `n` rates are sorted ascending (`r_(1) <= ... <= r_(n)`), and the
///    nearest-rank `p`-th percentile is `r_(k)` with
///    `k = max(1, ceil(p/100 * n))`. `median` is the 50th percentile by this
///    rule, so for even `n` it is the lower of the two middle values (always
///    an actually observed rate, never an interpolation).
/// 4. `mean = sum f(s_i) / sum interval_i` over the eligible samples: the
///    overall throughput, which weights each sample by its duration.
///
/// Returns `None` if no sample is eligible.
///
/// Note that [`Sampler::stop`] appends a final partial sample, which is
/// usually much shorter than the others and therefore noisier; it is
/// eligible like any other sample.
pub fn rate_stats(
    samples: &[Sample],
    skip_secs: f64,
    f: impl Fn(&Sample) -> f64,
) -> Option<RateStats> {
    const TOLERANCE_SECS: f64 = 1e-9;
    let mut rates = Vec::with_capacity(samples.len());
    let mut total = 0.0;
    let mut total_secs = 0.0;
    for s in samples {
        if s.interval_secs > 0.0 && s.start_secs() >= skip_secs - TOLERANCE_SECS {
            let count = f(s);
            rates.push(count / s.interval_secs);
            total += count;
            total_secs += s.interval_secs;
        }
    }
    if rates.is_empty() {
        return None;
    }
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    let nearest_rank = |p: f64| {
        let rank = (p / 100.0 * n as f64).ceil() as usize;
        rates[rank.clamp(1, n) - 1]
    };
    Some(RateStats {
        median: nearest_rank(50.0),
        p1: nearest_rank(1.0),
        p99: nearest_rank(99.0),
        mean: total / total_secs,
        samples: n,
    })
}

/// Header row written by [`write_csv`].
pub const CSV_HEADER: &str = "t_secs,interval_secs,readout_ops,readout_bytes,collect_ops,\
collect_bytes,collect_events,backlog_events,readout_ops_per_sec,readout_bytes_per_sec,\
collect_ops_per_sec,collect_bytes_per_sec";

/// Writes the samples as CSV: the [`CSV_HEADER`] row, then one row per sample.
///
/// Times and rates are written with Rust's shortest round-trip float
/// formatting (never exponent notation), counts as integers. The file is
/// created or truncated (so `/dev/stdout` works too); it is flushed, not
/// fsynced.
pub fn write_csv(path: &Path, samples: &[Sample]) -> io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    writeln!(w, "{CSV_HEADER}")?;
    for s in samples {
        writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            s.t_secs,
            s.interval_secs,
            s.readout_ops,
            s.readout_bytes,
            s.collect_ops,
            s.collect_bytes,
            s.collect_events,
            s.backlog_events,
            s.readout_ops_per_sec(),
            s.readout_bytes_per_sec(),
            s.collect_ops_per_sec(),
            s.collect_bytes_per_sec(),
        )?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of `secs` length ending at `t` with `ops` collect ops.
    fn sample(t: f64, secs: f64, ops: u64) -> Sample {
        Sample {
            t_secs: t,
            interval_secs: secs,
            collect_ops: ops,
            ..Sample::default()
        }
    }

    fn collect_ops(s: &Sample) -> f64 {
        s.collect_ops as f64
    }

    #[test]
    fn counters_are_padded() {
        assert!(std::mem::align_of::<PaddedU64>() >= 64);
        assert!(std::mem::size_of::<Counters>() >= 6 * 64);
    }

    #[test]
    fn counters_add_and_snapshot() {
        let c = Counters::new();
        c.add_readout(2, 200);
        c.add_readout(1, 50);
        c.add_collect(3, 250, 1);
        c.set_backlog(7);
        c.set_backlog(4);
        let t = c.snapshot();
        assert_eq!(
            t,
            Totals {
                readout_ops: 3,
                readout_bytes: 250,
                collect_ops: 3,
                collect_bytes: 250,
                collect_events: 1,
                backlog_events: 4,
            }
        );
    }

    #[test]
    fn sample_between_and_rates() {
        let prev = Totals {
            readout_ops: 10,
            readout_bytes: 1000,
            ..Totals::default()
        };
        let cur = Totals {
            readout_ops: 30,
            readout_bytes: 3000,
            collect_ops: 5,
            collect_bytes: 500,
            collect_events: 1,
            backlog_events: 9,
        };
        let s = Sample::between(&prev, &cur, 1.5, 0.5);
        assert_eq!(s.readout_ops, 20);
        assert_eq!(s.readout_bytes, 2000);
        assert_eq!(s.backlog_events, 9);
        assert_eq!(s.start_secs(), 1.0);
        assert_eq!(s.readout_ops_per_sec(), 40.0);
        assert_eq!(s.readout_bytes_per_sec(), 4000.0);
        assert_eq!(s.collect_ops_per_sec(), 10.0);
        assert_eq!(s.collect_bytes_per_sec(), 1000.0);
        assert_eq!(s.collect_events_per_sec(), 2.0);
        assert_eq!(sample(1.0, 0.0, 5).collect_ops_per_sec(), 0.0);
        // A counter going backwards saturates instead of wrapping.
        assert_eq!(Sample::between(&cur, &prev, 1.0, 1.0).collect_ops, 0);
    }

    #[test]
    fn merge() {
        assert_eq!(merge_samples(&[]), None);
        let mut a = sample(0.1, 0.1, 10);
        a.backlog_events = 3;
        let mut b = sample(0.3, 0.2, 20);
        b.backlog_events = 5;
        let m = merge_samples(&[a, b]).unwrap();
        assert_eq!(m.t_secs, 0.3);
        assert!((m.interval_secs - 0.3).abs() < 1e-12);
        assert_eq!(m.collect_ops, 30);
        assert_eq!(m.backlog_events, 5);
    }

    #[test]
    fn rate_stats_hand_computed() {
        // Ten 0.1 s samples with collect_ops 1..=10 -> rates 10, 20, ..., 100.
        let samples: Vec<Sample> = (1..=10).map(|i| sample(i as f64 * 0.1, 0.1, i)).collect();
        let st = rate_stats(&samples, 0.0, collect_ops).unwrap();
        // n = 10: p50 rank ceil(5) = 5 -> 50; p1 rank ceil(0.1) = 1 -> 10;
        // p99 rank ceil(9.9) = 10 -> 100; mean = 55 ops / 1.0 s = 55.
        assert!((st.median - 50.0).abs() < 1e-9, "{st:?}");
        assert!((st.p1 - 10.0).abs() < 1e-9, "{st:?}");
        assert!((st.p99 - 100.0).abs() < 1e-9, "{st:?}");
        assert!((st.mean - 55.0).abs() < 1e-9, "{st:?}");
        assert_eq!(st.samples, 10);

        // Skip the first 0.3 s: samples starting at 0.3..0.9 remain,
        // i.e. collect_ops 4..=10 -> rates 40..=100, n = 7.
        // p50 rank ceil(3.5) = 4 -> 70; p1 rank 1 -> 40; p99 rank 7 -> 100;
        // mean = (4+...+10) / 0.7 = 49 / 0.7 = 70.
        let st = rate_stats(&samples, 0.3, collect_ops).unwrap();
        assert_eq!(st.samples, 7);
        assert!((st.median - 70.0).abs() < 1e-9, "{st:?}");
        assert!((st.p1 - 40.0).abs() < 1e-9, "{st:?}");
        assert!((st.p99 - 100.0).abs() < 1e-9, "{st:?}");
        assert!((st.mean - 70.0).abs() < 1e-9, "{st:?}");
    }

    #[test]
    fn rate_stats_mean_is_weighted_by_time() {
        // 100 ops in 1 s (rate 100) and 100 ops in 0.25 s (rate 400).
        // Mean of rates would be 250; total/time is 200 / 1.25 = 160.
        // n = 2: median rank 1 -> 100 (lower middle), p99 rank 2 -> 400.
        let samples = [sample(1.0, 1.0, 100), sample(1.25, 0.25, 100)];
        let st = rate_stats(&samples, 0.0, collect_ops).unwrap();
        assert!((st.mean - 160.0).abs() < 1e-9, "{st:?}");
        assert_eq!(st.median, 100.0);
        assert_eq!(st.p1, 100.0);
        assert_eq!(st.p99, 400.0);
    }

    #[test]
    fn rate_stats_percentiles_on_200_samples() {
        // Rates 1..=200 (in shuffled order): p1 rank ceil(2) = 2 -> 2,
        // p99 rank ceil(198) = 198 -> 198, median rank 100 -> 100.
        let samples: Vec<Sample> = (0..200u64)
            .map(|i| (i * 37) % 200 + 1)
            .enumerate()
            .map(|(i, ops)| sample((i + 1) as f64, 1.0, ops))
            .collect();
        let st = rate_stats(&samples, 0.0, collect_ops).unwrap();
        assert_eq!((st.p1, st.median, st.p99), (2.0, 100.0, 198.0));
        assert!((st.mean - 100.5).abs() < 1e-9);
    }

    #[test]
    fn rate_stats_skips_zero_intervals_and_empty_input() {
        assert_eq!(rate_stats(&[], 0.0, collect_ops), None);
        let samples = [sample(0.5, 0.0, 1000), sample(1.0, 0.5, 50)];
        let st = rate_stats(&samples, 0.0, collect_ops).unwrap();
        assert_eq!(st.samples, 1);
        assert_eq!(
            (st.p1, st.median, st.p99, st.mean),
            (100.0, 100.0, 100.0, 100.0)
        );
        // Everything is ramp-up.
        assert_eq!(rate_stats(&samples, 5.0, collect_ops), None);
    }

    #[test]
    fn sampler_records_everything() {
        let counters = Arc::new(Counters::new());
        counters.add_readout(1000, 1000); // before start: not reported
        let sampler = Sampler::start(Arc::clone(&counters), Duration::from_millis(5));
        let t0 = Instant::now();
        let mut added = 0u64;
        while t0.elapsed() < Duration::from_millis(60) {
            counters.add_readout(1, 100);
            counters.add_collect(1, 100, 0);
            added += 1;
            thread::sleep(Duration::from_micros(200));
        }
        counters.set_backlog(42);
        let live = sampler.recent(Duration::from_millis(20)).unwrap();
        assert!(live.interval_secs >= 0.02, "{live:?}");
        thread::sleep(Duration::from_millis(2));
        let samples = sampler.stop();

        // At least ~60 ms / 5 ms samples (allow for a slow machine).
        assert!(samples.len() >= 5, "only {} samples", samples.len());
        let sum = merge_samples(&samples).unwrap();
        assert_eq!(sum.readout_ops, added);
        assert_eq!(sum.readout_bytes, added * 100);
        assert_eq!(sum.collect_ops, added);
        assert_eq!(samples.last().unwrap().backlog_events, 42);
        // Samples are contiguous: each starts where the previous ended.
        for w in samples.windows(2) {
            assert!(w[1].t_secs > w[0].t_secs);
            assert!((w[1].start_secs() - w[0].t_secs).abs() < 1e-6);
        }
        // Deadline grid: every complete sample ends at or after k * 5 ms.
        for (k, s) in samples.iter().enumerate().take(samples.len() - 1) {
            assert!(s.t_secs >= (k + 1) as f64 * 0.005 - 1e-6, "{k}: {s:?}");
        }
    }

    #[test]
    fn sampler_drop_stops_thread() {
        let sampler = Sampler::start(Arc::new(Counters::new()), Duration::from_secs(3600));
        let t0 = Instant::now();
        drop(sampler);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn csv_round_trip() {
        let dir = std::env::temp_dir().join(format!("minidaq-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("samples.csv");
        let samples = vec![
            Sample {
                t_secs: 0.005123,
                interval_secs: 0.005123,
                readout_ops: 1234,
                readout_bytes: 123_400_000,
                collect_ops: 1200,
                collect_bytes: 120_000_000,
                collect_events: 300,
                backlog_events: 8,
            },
            sample(0.0051231, 1e-7, 3),
        ];
        write_csv(&path, &samples).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(CSV_HEADER));
        let header_len = CSV_HEADER.split(',').count();
        assert_eq!(header_len, 12);
        for s in &samples {
            let fields: Vec<&str> = lines.next().unwrap().split(',').collect();
            assert_eq!(fields.len(), header_len);
            let float = |i: usize| fields[i].parse::<f64>().unwrap();
            let int = |i: usize| fields[i].parse::<u64>().unwrap();
            let parsed = Sample {
                t_secs: float(0),
                interval_secs: float(1),
                readout_ops: int(2),
                readout_bytes: int(3),
                collect_ops: int(4),
                collect_bytes: int(5),
                collect_events: int(6),
                backlog_events: int(7),
            };
            assert_eq!(&parsed, s);
            assert_eq!(float(8), s.readout_ops_per_sec());
            assert_eq!(float(9), s.readout_bytes_per_sec());
            assert_eq!(float(10), s.collect_ops_per_sec());
            assert_eq!(float(11), s.collect_bytes_per_sec());
        }
        assert_eq!(lines.next(), None);

        // Character devices cannot be fsynced; writing to them must still work.
        #[cfg(unix)]
        write_csv(Path::new("/dev/null"), &samples).unwrap();
    }
}
