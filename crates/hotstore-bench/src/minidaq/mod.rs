//! `hotstore minidaq`: the DAQ benchmark (a superset of DAQDB's minidaq). Readout threads write
//! events of `detectors` fragments into a store; collector threads claim complete events, check
//! and acknowledge them (Keep with probability `acceptance`, else Remove). `fill-drain` fills
//! first and drains after (DAQDB Fig. 3); `parallel` runs both at once (Fig. 4). Throughput is
//! sampled every `sample_ms` and reported as median, p1 and p99 of the samples after the
//! ramp-up, beside the machine's write limit (memcpy for a memory file system).
//!
//! [`run`] makes one run and returns it ([`Run`]: the report, the samples for `--csv` and
//! `--plot`); [`sweep`] runs a grid of fragment sizes and plots it ([`Sweep`]).

pub mod plot;
mod remote;
pub mod sampling;
mod workload;

use crate::bench_harness::default_base_dir;
use crate::limits;
use crate::scratch::ScratchDir;
use crate::util::{human_bytes, human_count};
use crate::{fail, Error, Result};
use hotstore::{Durability, EventPolicy, Store, TierSpec};
use sampling::{Counters, RateStats, Sample, Sampler};
use serde::Serialize;
use std::fmt;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workload::{Pattern, Shared, Target};

pub use workload::Distro;

/// Fill-drain or parallel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Readout fills the store, then collectors drain it (DAQDB Fig. 3).
    FillDrain,
    /// Readout and collection at once (DAQDB Fig. 4).
    Parallel,
}

/// What `hotstore minidaq` was asked to do (its options; see `hotstore minidaq --help`).
#[derive(Clone)]
pub struct Config {
    /// Store directory (`None`: a fresh, preallocated temporary store, removed afterwards).
    pub store: Option<PathBuf>,
    /// Run on a `store` that already holds keys (its events are claimed, checked and
    /// acknowledged with the run's own): refused without it.
    pub reuse_store: bool,
    /// Durability of fragment writes and acknowledgements.
    pub durability: Durability,
    /// Readout threads.
    pub readout_threads: usize,
    /// Collector threads (0 only in parallel mode).
    pub collector_threads: usize,
    /// Fragments per event.
    pub detectors: u16,
    /// Fragment size (the mean of a Poisson distribution).
    pub fragment_size: u64,
    /// Fragment size distribution.
    pub distro: Distro,
    /// Probability that a collector keeps an event rather than removing it.
    pub acceptance: f64,
    /// Fill-drain or parallel.
    pub mode: Mode,
    /// How long to run (fill-drain: to fill); `None`: until `events` are written.
    pub duration: Option<Duration>,
    /// Events to write in all.
    pub events: Option<u64>,
    /// Sampling interval of the throughput, in milliseconds.
    pub sample_ms: u64,
    /// Ramp-up left out of the figures.
    pub warmup: Duration,
    /// Collectors check each fragment's pattern.
    pub verify: bool,
    /// Store capacity (preallocated for a temporary store).
    pub capacity: u64,
    /// Lease of each claim.
    pub lease: Duration,
    /// Seed of the sizes and the acceptance draws.
    pub seed: u64,
    /// Log every acknowledged operation to this file, for crash tests: one line each,
    /// `put <key hex> <len>`, `removed <event hex>` or `kept <event hex>`, appended with one
    /// write after the store returned.
    pub ack_log: Option<PathBuf>,
    /// Measure the machine's limit before the run (`--no-limit`: no ratio is reported).
    pub measure_limit: bool,
    /// `--remote HOST:PORT`: load this server instead of an embedded store; several
    /// addresses separated by commas: the seeds of a cluster.
    pub remote: Option<String>,
    /// `--cluster`: the `--remote` server is a node of a cluster (implied by several
    /// addresses): readout routes each event to its node, collectors claim from every node.
    pub cluster: bool,
    /// `--window`: requests in flight per connection of a remote run.
    pub window: usize,
    /// Say on stderr what is being done: measuring the limit, and (on a terminal) a progress
    /// line twice a second.
    pub progress: bool,
}

/// Throughput of one side.
#[derive(Serialize, Clone, Copy, Default, Debug)]
pub struct Side {
    /// Median of the per-sample fragment rates (their mean if the median is 0: see `headline`).
    pub ops_per_sec: f64,
    /// 1st percentile of the per-sample fragment rates (NaN, `null`: too few samples).
    pub ops_per_sec_p1: f64,
    /// 99th percentile of the per-sample fragment rates (NaN, `null`: too few samples).
    pub ops_per_sec_p99: f64,
    /// Fragments over the whole phase divided by its time.
    pub ops_per_sec_mean: f64,
    /// Median of the per-sample byte rates.
    pub bytes_per_sec: f64,
    /// 1st percentile of the per-sample byte rates.
    pub bytes_per_sec_p1: f64,
    /// 99th percentile of the per-sample byte rates.
    pub bytes_per_sec_p99: f64,
    /// Bytes over the whole phase divided by its time.
    pub bytes_per_sec_mean: f64,
    /// Collect side only: events acknowledged per second (median).
    pub events_per_sec: f64,
    /// Samples the figures are taken over.
    pub samples: usize,
}

/// One run's result: the JSON object `--json` prints, and the text of
/// [`Display`](fmt::Display) otherwise.
#[derive(Serialize, Clone)]
pub struct Report {
    /// Fill-drain or parallel.
    pub mode: Mode,
    /// Readout threads.
    pub readout_threads: usize,
    /// Collector threads.
    pub collector_threads: usize,
    /// Fragments per event.
    pub detectors: u16,
    /// Fragment size (mean).
    pub fragment_size: u64,
    /// Fragment size distribution.
    pub fragment_distro: Distro,
    /// Probability of Keep.
    pub acceptance: f64,
    /// `memory` or `persisted`.
    pub durability: String,
    /// The store (or server) and what survives on it.
    pub store: String,
    /// Whether every tier of the store survives a power cut.
    pub store_survives_power_cut: bool,
    /// Sampling interval.
    pub sample_ms: u64,
    /// Readout's figures.
    pub readout: Side,
    /// The collectors' figures.
    pub collect: Side,
    /// Events written by readout.
    pub events_written: u64,
    /// Events acknowledged by the collectors.
    pub events_collected: u64,
    /// Events acknowledged with Keep.
    pub events_kept: u64,
    /// Fragments that failed the pattern check (or were missing).
    pub integrity_errors: u64,
    /// Fragments refused because their event was already acknowledged.
    pub late_fragments: u64,
    /// Length of the run.
    pub elapsed_secs: f64,
    /// The machine's limit the readout is compared with.
    pub limit_name: String,
    /// The limit, in bytes per second (0 if not measured).
    pub limit_bytes_per_sec: f64,
    /// Readout bytes/s (median) over the limit; `None` (`null`) if the limit was not measured.
    pub ratio: Option<f64>,
    /// The least work of a readout, measured alone on this machine: copy each fragment into
    /// memory not touched lately and checksum it (`limits::fill_and_checksum_bandwidth`).
    /// Only for a store on a memory file system, and not in a sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_limit_name: Option<String>,
    /// That limit in bytes per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_limit_bytes_per_sec: Option<f64>,
    /// Readout bytes/s (median) over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_ratio: Option<f64>,
    /// A cluster run: the events collected from each node (absent otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeFigures>,
}

/// One cluster node's share of a run.
#[derive(Serialize, Clone)]
pub struct NodeFigures {
    /// `host:port`.
    pub addr: String,
    /// Events collected from it.
    pub events_collected: u64,
    /// Those over the collect phase's length.
    pub events_per_sec: f64,
    /// Fragment bytes per second, at the run's mean fragment size.
    pub bytes_per_sec: f64,
}

/// Fewest samples a side's median, p1 and p99 are given over; a shorter phase (a fill-drain
/// of a few thousand events lasts milliseconds) reports its overall rate instead.
const MIN_SAMPLES: usize = 20;

/// A side's figures when its phase was too short for [`MIN_SAMPLES`] samples: the overall
/// rate (`ops` and `bytes` over `secs`) stands for the median; p1 and p99 are not known (NaN,
/// `null` in JSON).
fn side_from_totals(ops: u64, bytes: u64, events: u64, secs: f64, samples: usize) -> Side {
    let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    Side {
        ops_per_sec: per_sec(ops),
        ops_per_sec_p1: f64::NAN,
        ops_per_sec_p99: f64::NAN,
        ops_per_sec_mean: per_sec(ops),
        bytes_per_sec: per_sec(bytes),
        bytes_per_sec_p1: f64::NAN,
        bytes_per_sec_p99: f64::NAN,
        bytes_per_sec_mean: per_sec(bytes),
        events_per_sec: per_sec(events),
        samples,
    }
}

fn side(samples: &[Sample], readout: bool) -> Side {
    let stats = |f: &dyn Fn(&Sample) -> f64| -> Option<RateStats> {
        sampling::rate_stats(samples, f64::NEG_INFINITY, f)
    };
    let (ops, bytes) = if readout {
        (
            stats(&|s| s.readout_ops as f64),
            stats(&|s| s.readout_bytes as f64),
        )
    } else {
        (
            stats(&|s| s.collect_ops as f64),
            stats(&|s| s.collect_bytes as f64),
        )
    };
    let events = (!readout)
        .then(|| stats(&|s| s.collect_events as f64))
        .flatten();
    let (Some(o), Some(b)) = (ops, bytes) else {
        return Side::default();
    };
    Side {
        ops_per_sec: headline(&o),
        ops_per_sec_p1: o.p1,
        ops_per_sec_p99: o.p99,
        ops_per_sec_mean: o.mean,
        bytes_per_sec: headline(&b),
        bytes_per_sec_p1: b.p1,
        bytes_per_sec_p99: b.p99,
        bytes_per_sec_mean: b.mean,
        events_per_sec: events.as_ref().map_or(0.0, headline),
        samples: o.samples,
    }
}

/// The rate a side reports: the median of its samples, or their mean when the median is 0
/// while work was done (the side worked in fewer than half its samples: a phase of a few
/// hundred milliseconds on a busy machine, its thread off the CPU most of the time). Fix (the
/// suite beside a loaded machine): a fill-drain's collect phase of 31 samples printed
/// `collect: 0 frag/s` with a mean of 28 k/s.
fn headline(r: &RateStats) -> f64 {
    if r.median > 0.0 {
        r.median
    } else {
        r.mean
    }
}

/// Samples inside `[from, to)` seconds (by their whole interval).
fn window(samples: &[Sample], from: f64, to: f64) -> Vec<Sample> {
    samples
        .iter()
        .filter(|s| s.start_secs() >= from - 1e-9 && s.t_secs <= to + 1e-9)
        .copied()
        .collect()
}

/// Refuses settings no run can have.
fn check(cfg: &Config) -> Result<()> {
    if cfg.sample_ms == 0 {
        return fail("--sample-ms must be at least 1");
    }
    if !(0.0..=1.0).contains(&cfg.acceptance) {
        return fail("--acceptance is a probability: 0 to 1");
    }
    if cfg.detectors == 0 || cfg.fragment_size == 0 {
        return fail("--detectors and --fragment-size must be at least 1");
    }
    if cfg.fragment_size > hotstore::MAX_VALUE_LEN / 2 {
        return fail(format!(
            "--fragment-size {} is larger than the maximum of {} for this benchmark",
            cfg.fragment_size,
            hotstore::MAX_VALUE_LEN / 2
        ));
    }
    if cfg.collector_threads == 0 && cfg.mode == Mode::FillDrain {
        return fail("fill-drain needs at least one collector thread (--collector-threads)");
    }
    Ok(())
}

/// One run of `hotstore minidaq`: its report, its samples and the limit it was compared with.
pub struct Run {
    /// The figures.
    pub report: Report,
    /// The throughput samples (`--csv`, `--plot`).
    pub samples: Vec<Sample>,
    /// The machine's limit.
    pub limit: limits::Limit,
}

/// Runs `hotstore minidaq` once.
pub fn run(cfg: &Config) -> Result<Run> {
    check(cfg)?;
    let limit = measure_limit(cfg)?;
    let work = measure_work_limit(cfg);
    let (mut report, samples) = run_once(cfg, &limit)?;
    if let Some(work) = work.filter(|w| w.bytes_per_sec > 0.0) {
        report.work_ratio = Some(report.readout.bytes_per_sec / work.bytes_per_sec);
        report.work_limit_bytes_per_sec = Some(work.bytes_per_sec);
        report.work_limit_name = Some(work.name);
    }
    Ok(Run {
        report,
        samples,
        limit,
    })
}

impl Run {
    /// True if no integrity error was found.
    pub fn intact(&self) -> bool {
        self.report.integrity_errors == 0
    }

    /// Writes the samples as CSV (`--csv`).
    pub fn write_csv(&self, path: &Path) -> Result<()> {
        sampling::write_csv(path, &self.samples)
            .map_err(|e| Error::Msg(format!("cannot write {}: {e}", path.display())))
    }

    /// Plots throughput over time to a PNG (`--plot`).
    pub fn plot(&self, png: &Path) -> Result<()> {
        let r = &self.report;
        let title = format!(
            "hotstore minidaq {:?}: {} readout + {} collector thread(s), events of {} x {}",
            r.mode,
            r.readout_threads,
            r.collector_threads,
            r.detectors,
            human_bytes(r.fragment_size as f64)
        );
        let marks = plot::TimelineMarks {
            readout_median_ops: r.readout.ops_per_sec,
            readout_median_bytes: r.readout.bytes_per_sec,
            limit: r
                .ratio
                .map(|_| (self.limit.name.clone(), self.limit.bytes_per_sec)),
        };
        plot::plot_timeline(png, &title, &self.samples, &marks)
            .map_err(|e| Error::Msg(e.to_string()))
    }
}

fn measure_limit(cfg: &Config) -> Result<limits::Limit> {
    let dir = cfg.store.clone().unwrap_or_else(default_base_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::Msg(format!("cannot create {}: {e}", dir.display())))?;
    if !cfg.measure_limit {
        return Ok(limits::Limit {
            name: "not measured (--no-limit)".into(),
            bytes_per_sec: 0.0,
        });
    }
    if cfg.progress {
        eprintln!("measuring the machine's limit under {} ...", dir.display());
    }
    Ok(limits::write_limit_for(
        &dir,
        cfg.readout_threads,
        Duration::from_millis(500),
    ))
}

/// The limit for a readout's own work (see [`Report::work_limit_name`]), where the store is
/// in memory and the machine's limit is measured; `None` elsewhere.
fn measure_work_limit(cfg: &Config) -> Option<limits::Limit> {
    let dir = cfg.store.clone().unwrap_or_else(default_base_dir);
    if !cfg.measure_limit || cfg.remote.is_some() || !limits::is_memory_fs(&dir) {
        return None;
    }
    if cfg.progress {
        eprintln!("measuring copy + checksum of one fragment at a time ...");
    }
    Some(limits::work_limit(
        cfg.fragment_size as usize,
        cfg.readout_threads,
    ))
}

/// A sweep of fragment sizes: one run per size, and their plot. Serialized as the object
/// `--sweep --json` prints (`{"plot": path, "sweep": [report, ...]}`, keys in alphabetical
/// order at every level); its [`Display`](fmt::Display) is the limit and the plot's path.
pub struct Sweep {
    /// The plot written.
    pub plot: PathBuf,
    /// One report per fragment size.
    pub sweep: Vec<Report>,
    /// The machine's limit.
    pub limit: limits::Limit,
}

impl Serialize for Sweep {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        // Through a JSON value, whose maps sort their keys: the order `--json` has always had.
        serde_json::json!({ "sweep": self.sweep, "plot": self.plot }).serialize(s)
    }
}

impl Sweep {
    /// True if no run found an integrity error.
    pub fn intact(&self) -> bool {
        self.sweep.iter().all(|r| r.integrity_errors == 0)
    }
}

impl fmt::Display for Sweep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Fix (noticed in a review): `--no-limit` printed "not measured (--no-limit): 0 B/s".
        if self.limit.bytes_per_sec > 0.0 {
            writeln!(
                f,
                "limit:   {}: {}/s",
                self.limit.name,
                human_bytes(self.limit.bytes_per_sec)
            )?;
        } else {
            writeln!(f, "limit:   {}", self.limit.name)?;
        }
        write!(f, "plot:    {}", self.plot.display())
    }
}

/// Runs `cfg` at each fragment size of `sizes` and plots fragments/s and bytes/s against
/// fragment size to `png` (DAQDB Fig. 4). Writes one line per run to `progress` as it ends.
pub fn sweep(cfg: &Config, sizes: &[u64], png: &Path, progress: &mut dyn Write) -> Result<Sweep> {
    check(cfg)?;
    let limit = measure_limit(cfg)?;
    let label = format!(
        "{} readout + {} collector",
        cfg.readout_threads, cfg.collector_threads
    );
    let mut points = Vec::new();
    let mut reports = Vec::new();
    for &size in sizes {
        let mut c = cfg.clone();
        c.fragment_size = size;
        let (r, _) = run_once(&c, &limit)?;
        writeln!(
            progress,
            "fragment {:>10}: readout {:>9} frag/s {:>10}/s | collect {:>9} frag/s {:>10}/s | integrity errors {}",
            human_bytes(size as f64),
            human_count(r.readout.ops_per_sec),
            human_bytes(r.readout.bytes_per_sec),
            human_count(r.collect.ops_per_sec),
            human_bytes(r.collect.bytes_per_sec),
            r.integrity_errors
        )
        .and_then(|()| progress.flush())
        .map_err(Error::Output)?;
        points.push(plot::SweepPoint {
            fragment_size: size,
            readout_ops_per_sec: r.readout.ops_per_sec,
            readout_bytes_per_sec: r.readout.bytes_per_sec,
            collect_ops_per_sec: r.collect.ops_per_sec,
            collect_bytes_per_sec: r.collect.bytes_per_sec,
            label: label.clone(),
        });
        reports.push(r);
    }
    plot::plot_sweep(
        png,
        &format!("hotstore minidaq {:?} sweep", cfg.mode),
        &points,
        Some(limit.bytes_per_sec),
    )
    .map_err(|e| Error::Msg(e.to_string()))?;
    Ok(Sweep {
        plot: png.to_path_buf(),
        sweep: reports,
        limit,
    })
}

/// The store for a run: a fresh temporary one (kept alive by the returned guard) or `--store`.
fn open_store(cfg: &Config) -> Result<(Option<ScratchDir>, Store)> {
    let (tmp, dir) = match &cfg.store {
        Some(d) => (None, d.clone()),
        None => {
            // Removed at the end, and on SIGINT/SIGTERM (a stopped run left gigabytes here).
            let t = ScratchDir::new_in(&default_base_dir(), "minidaq")?;
            let d = t.path().to_path_buf();
            (Some(t), d)
        }
    };
    // Fix (found by a new-user review): collectors claim every READY event of the store, so
    // a run on a store holding someone's data claimed their events, counted them as integrity
    // errors and removed them. Refused before anything is changed in it (found in review: a
    // refused run had already stored its --capacity in the user's store).
    if tmp.is_none() && !cfg.reuse_store && dir.join(hotstore::META_FILE).exists() {
        let held = Store::builder(&dir)
            .create_if_missing(false)
            .open()?
            .stats()
            .entries;
        if held > 0 {
            return Err(Error::Msg(format!(
                "the store in {} already holds {held} keys: minidaq's collectors claim and \
                 remove every event they find, and its check would fail on events it did not \
                 write. Use a new or empty directory, or --reuse-store to consume them on \
                 purpose (a store minidaq itself filled, e.g. after a crash)",
                dir.display()
            )));
        }
    }
    let lanes = (cfg.readout_threads + cfg.collector_threads).clamp(2, 256);
    let mut b = Store::builder(&dir)
        .tier(TierSpec::new(".").capacity_bytes(cfg.capacity))
        .lanes(lanes);
    if tmp.is_some() {
        // A fresh buffer is allocated up front, as a DAQ buffer is: the run then measures the
        // store, not the kernel zeroing new pages.
        b = b.preallocate_bytes(cfg.capacity);
    }
    let store = b.open()?;
    Ok((tmp, store))
}

/// One run with a fresh sampler; returns the report and the samples.
/// The target of a run: the store it opened (and the temporary directory holding it), or the
/// server of `--remote`; with its description, whether it survives a power cut, and the run
/// number to use.
fn open_target(cfg: &Config) -> Result<(Option<ScratchDir>, Target, String, bool, u32)> {
    // A store that already holds data gets a run number of its own, so no event of this run
    // was acknowledged before.
    let fresh_run = (cfg.seed as u32 ^ std::process::id()).max(2);
    if let Some(addr) = &cfg.remote {
        let cluster = cfg.cluster || addr.contains(',');
        let mut probe = remote::RemoteTarget {
            addr: addr.clone(),
            window: cfg.window,
            seal: false,
            cluster,
            node_events: parking_lot::Mutex::default(),
        };
        let all_stats = if cluster {
            let mut c = probe.connect_cluster().map_err(Error::Msg)?;
            c.store_stats_all()
                .into_iter()
                .map(|(node, s)| {
                    s.map(|s| (node.addr(), s))
                        .map_err(|e| format!("STORE.STATS of {}: {e}", node.addr()))
                })
                .collect::<std::result::Result<Vec<_>, String>>()
        } else {
            probe
                .connect()
                .and_then(|mut c| c.store_stats().map_err(|e| format!("STORE.STATS: {e}")))
                .map(|s| vec![(addr.clone(), s)])
        }
        .map_err(Error::Msg)?;
        let mut expected = None;
        let (mut tiers, mut safe) = (0i64, 0i64);
        for (addr, stats) in &all_stats {
            let int = |name: &str| match stats.get(name) {
                Some(hotstore_client::StatValue::Int(v)) => Some(*v),
                _ => None,
            };
            tiers += int("tiers").unwrap_or(0);
            safe += int("power_safe_tiers").unwrap_or(0);
            let e = check_expected(addr, cfg.detectors, int("expected_fragments"))?;
            if expected.is_some_and(|x| x != e) {
                return Err(Error::Msg(format!(
                    "the nodes of the cluster at {} complete events at different fragment \
                     counts: start them all with the same --expected-fragments",
                    cfg.remote.as_deref().unwrap_or_default()
                )));
            }
            expected = Some(e);
            probe.seal = e == 0;
        }
        let survives = tiers > 0 && safe == tiers;
        let what = if cluster {
            format!(
                "remote hotstore cluster of {} node(s) ({})",
                all_stats.len(),
                all_stats
                    .iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("remote hotstore at {addr}")
        };
        let desc = format!(
            "{what}, {} requests in flight per connection ({})",
            cfg.window,
            if survives {
                "its tiers survive a power cut"
            } else {
                "NOT every tier survives a power cut"
            }
        );
        return Ok((None, Target::Remote(probe), desc, survives, fresh_run));
    }
    let (tmp, store) = open_store(cfg)?;
    let s = store.stats();
    let survives = s.tiers.iter().all(|t| t.survives_power_cut);
    let desc = format!(
        "{} ({})",
        store.dir().display(),
        s.tiers
            .first()
            .map(|t| t.power_safety())
            .unwrap_or_default()
    );
    store.set_event_policy(EventPolicy::expecting(u32::from(cfg.detectors)))?;
    let run = if s.entries == 0 && s.events.acked_intervals == 0 {
        1
    } else {
        fresh_run
    };
    Ok((tmp, Target::Local(store), desc, survives, run))
}

/// What `expected_fragments` (of the server at `addr`) means for a run writing `detectors`
/// fragments per event: the count (0: readout must seal), or why the run cannot go.
fn check_expected(addr: &str, detectors: u16, expected: Option<i64>) -> Result<i64> {
    // Events must become READY with their last fragment: the server's policy expects
    // --detectors fragments, or only sealed events are complete and readout seals.
    match expected {
        Some(0) => Ok(0),
        Some(n) if n == i64::from(detectors) => Ok(n),
        Some(n) => Err(Error::Msg(format!(
            "the server at {addr} completes events at {n} fragment(s); minidaq writes \
             {detectors} per event (--detectors): start it with --expected-fragments \
             {detectors} (or 0, and minidaq seals each event)"
        ))),
        None => Err(Error::Msg(format!(
            "the server at {addr} does not say what completes an event \
             (STORE.STATS expected_fragments): is it a hotstore server of this version?"
        ))),
    }
}

/// Starts a thread named `name` (profiles and `top -H` tell readout from collection).
fn named_thread(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map_err(|e| Error::Msg(format!("cannot start thread {name}: {e}")))
}

fn run_once(cfg: &Config, limit: &limits::Limit) -> Result<(Report, Vec<Sample>)> {
    let (_tmp, target, store_desc, survives, run) = open_target(cfg)?;
    let ack_log = match &cfg.ack_log {
        Some(p) => Some(
            workload::AckLog::open(p)
                .map_err(|e| Error::Msg(format!("cannot open {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let max_len = workload::Sizes::max(cfg.fragment_size, cfg.distro) as usize;
    let fill_budget = match (cfg.mode, cfg.events) {
        // Fill-drain holds everything at once: stop filling at 90% of the capacity.
        (Mode::FillDrain, _) => cfg.capacity / 10 * 9,
        _ => 0,
    };
    let counters = Arc::new(Counters::new());
    let sh = Arc::new(Shared {
        target,
        counters: counters.clone(),
        pattern: Pattern::new(max_len),
        run,
        detectors: cfg.detectors,
        durability: cfg.durability,
        acceptance: cfg.acceptance,
        lease: cfg.lease,
        verify: cfg.verify,
        ack_log,
        stop_readout: AtomicBool::new(false),
        stop_collect: AtomicBool::new(false),
        readout_running: AtomicU64::new(cfg.readout_threads as u64),
        events_target: cfg.events.unwrap_or(0),
        bytes_budget: fill_budget,
        events_written: AtomicU64::new(0),
        events_collected: AtomicU64::new(0),
        events_kept: AtomicU64::new(0),
        integrity_errors: AtomicU64::new(0),
        bytes_written: AtomicU64::new(0),
        error: parking_lot::Mutex::new(None),
    });
    let progress = cfg.progress && std::io::stderr().is_terminal();
    let sampler = Sampler::start(counters.clone(), Duration::from_millis(cfg.sample_ms));
    let t0 = Instant::now();
    let readers: Vec<_> = (0..cfg.readout_threads)
        .map(|i| {
            let sh = sh.clone();
            let (size, distro, seed, n) =
                (cfg.fragment_size, cfg.distro, cfg.seed, cfg.readout_threads);
            named_thread(format!("readout-{i}"), move || match &sh.target {
                Target::Local(store) => workload::readout(&sh, store, i, n, size, distro, seed),
                Target::Remote(t) => remote::readout(&sh, t, i, n, size, distro, seed),
            })
        })
        .collect::<Result<_>>()?;
    let spawn_collectors = |sh: &Arc<Shared>| -> Result<Vec<std::thread::JoinHandle<()>>> {
        (0..cfg.collector_threads)
            .map(|i| {
                let sh = sh.clone();
                let seed = cfg.seed;
                named_thread(format!("collector-{i}"), move || match &sh.target {
                    Target::Local(store) => workload::collect(&sh, store, i, seed),
                    Target::Remote(t) => remote::collect(&sh, t, i, seed),
                })
            })
            .collect()
    };
    let deadline = cfg.duration.map(|d| t0 + d);
    let mut fill_end = None;
    let mut collectors = Vec::new();
    if cfg.mode == Mode::Parallel {
        collectors = spawn_collectors(&sh)?;
    }
    let mut last_progress = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(5));
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            sh.stop_readout.store(true, Ordering::Release);
            if cfg.mode == Mode::Parallel {
                sh.stop_collect.store(true, Ordering::Release);
            }
        }
        counters.set_backlog(
            sh.events_written
                .load(Ordering::Relaxed)
                .saturating_sub(sh.events_collected.load(Ordering::Relaxed)),
        );
        let readout_done = sh.readout_running.load(Ordering::Acquire) == 0;
        if readout_done && fill_end.is_none() {
            fill_end = Some(t0.elapsed().as_secs_f64());
            if cfg.mode == Mode::FillDrain {
                collectors = spawn_collectors(&sh)?;
            }
        }
        if progress && now - last_progress >= Duration::from_millis(500) {
            last_progress = now;
            if let Some(r) = sampler.latest_rates() {
                eprint!(
                    "\r{:>6.1} s  readout {:>9} frag/s {:>10}/s  collect {:>9} frag/s {:>10}/s {:>9} events/s, {} done   ",
                    t0.elapsed().as_secs_f64(),
                    human_count(r.readout_ops_per_sec()),
                    human_bytes(r.readout_bytes_per_sec()),
                    human_count(r.collect_ops_per_sec()),
                    human_bytes(r.collect_bytes_per_sec()),
                    human_count(r.collect_events_per_sec()),
                    sh.events_collected.load(Ordering::Relaxed)
                );
            }
        }
        let collectors_done = collectors.iter().all(|c| c.is_finished());
        if readout_done && (fill_end.is_some() && collectors_done) {
            break;
        }
    }
    for r in readers {
        let _ = r.join();
    }
    for c in collectors {
        let _ = c.join();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let samples = sampler.stop();
    if progress {
        eprintln!();
    }
    if let Some(e) = sh.error.lock().take() {
        return fail(e);
    }
    let warm = cfg.warmup.as_secs_f64();
    let fill_end = fill_end.unwrap_or(elapsed);
    let (readout_w, collect_w) = match cfg.mode {
        Mode::FillDrain => (
            window(&samples, warm.min(fill_end / 2.0), fill_end),
            window(&samples, fill_end, elapsed),
        ),
        Mode::Parallel => {
            let w = window(&samples, warm.min(elapsed / 2.0), fill_end);
            (w.clone(), w)
        }
    };
    let late_fragments = match &sh.target {
        Target::Local(store) => store.stats().events.late_fragments_total,
        Target::Remote(t) if t.cluster => t
            .connect_cluster()
            .map(|mut c| {
                c.store_stats_all()
                    .into_iter()
                    .filter_map(|(_, s)| match s.ok()?.get("late_fragments") {
                        Some(hotstore_client::StatValue::Int(v)) => u64::try_from(*v).ok(),
                        _ => None,
                    })
                    .sum()
            })
            .unwrap_or(0),
        Target::Remote(t) => t
            .connect()
            .and_then(|mut c| c.store_stats().map_err(|e| e.to_string()))
            .ok()
            .and_then(|s| match s.get("late_fragments") {
                Some(hotstore_client::StatValue::Int(v)) => u64::try_from(*v).ok(),
                _ => None,
            })
            .unwrap_or(0),
    };
    // Phases too short for percentiles report their overall rate (they printed 0 frag/s).
    let totals = counters.snapshot();
    let (readout_secs, collect_secs) = match cfg.mode {
        Mode::FillDrain => (fill_end, elapsed - fill_end),
        Mode::Parallel => (elapsed, elapsed),
    };
    let readout = if readout_w.len() >= MIN_SAMPLES {
        side(&readout_w, true)
    } else {
        side_from_totals(
            totals.readout_ops,
            totals.readout_bytes,
            0,
            readout_secs,
            readout_w.len(),
        )
    };
    let collect = if collect_w.len() >= MIN_SAMPLES {
        side(&collect_w, false)
    } else {
        side_from_totals(
            totals.collect_ops,
            totals.collect_bytes,
            totals.collect_events,
            collect_secs,
            collect_w.len(),
        )
    };
    let nodes = match &sh.target {
        Target::Remote(t) => t
            .node_events
            .lock()
            .iter()
            .map(|(addr, &n)| {
                let per_sec = if collect_secs > 0.0 {
                    n as f64 / collect_secs
                } else {
                    0.0
                };
                NodeFigures {
                    addr: addr.clone(),
                    events_collected: n,
                    events_per_sec: per_sec,
                    bytes_per_sec: per_sec * f64::from(cfg.detectors) * cfg.fragment_size as f64,
                }
            })
            .collect(),
        Target::Local(_) => Vec::new(),
    };
    let report = Report {
        mode: cfg.mode,
        readout_threads: cfg.readout_threads,
        collector_threads: cfg.collector_threads,
        detectors: cfg.detectors,
        fragment_size: cfg.fragment_size,
        fragment_distro: cfg.distro,
        acceptance: cfg.acceptance,
        durability: format!("{:?}", cfg.durability).to_lowercase(),
        store: store_desc,
        store_survives_power_cut: survives,
        sample_ms: cfg.sample_ms,
        readout,
        collect,
        events_written: sh.events_written.load(Ordering::Relaxed),
        events_collected: sh.events_collected.load(Ordering::Relaxed),
        events_kept: sh.events_kept.load(Ordering::Relaxed),
        integrity_errors: sh.integrity_errors.load(Ordering::Relaxed),
        late_fragments,
        elapsed_secs: elapsed,
        limit_name: limit.name.clone(),
        limit_bytes_per_sec: limit.bytes_per_sec,
        ratio: (limit.bytes_per_sec > 0.0).then(|| readout.bytes_per_sec / limit.bytes_per_sec),
        work_limit_name: None,
        work_limit_bytes_per_sec: None,
        work_ratio: None,
        nodes,
    };
    Ok((report, samples))
}

impl fmt::Display for Report {
    /// The text `hotstore minidaq` prints: settings, store, both sides, events, notes, the
    /// limit and the ratio.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self;
        let side_line = |name: &str, s: &Side, events: bool| {
            if s.ops_per_sec_p1.is_nan() {
                let mut line = format!(
                    "{name} {} frag/s, {}/s",
                    human_count(s.ops_per_sec),
                    human_bytes(s.bytes_per_sec)
                );
                if events {
                    line += &format!(", {} events/s", human_count(s.events_per_sec));
                }
                return line
                    + &format!(
                        " [overall: {} samples of {} ms are too few for a median, p1 and p99]",
                        s.samples, r.sample_ms
                    );
            }
            let mut line = format!(
                "{name} {} frag/s (p1 {}, p99 {}), {}/s (p1 {}/s, p99 {}/s)",
                human_count(s.ops_per_sec),
                human_count(s.ops_per_sec_p1),
                human_count(s.ops_per_sec_p99),
                human_bytes(s.bytes_per_sec),
                human_bytes(s.bytes_per_sec_p1),
                human_bytes(s.bytes_per_sec_p99),
            );
            if events {
                line += &format!(", {} events/s", human_count(s.events_per_sec));
            }
            line + &format!(" [median of {} samples]", s.samples)
        };
        writeln!(
        f,
        "minidaq: {:?}, {} readout + {} collector thread(s), {} fragments/event of {} ({:?}), acceptance {}, durability {}",
        r.mode,
        r.readout_threads,
        r.collector_threads,
        r.detectors,
        human_bytes(r.fragment_size as f64),
        r.fragment_distro,
        r.acceptance,
        r.durability
    )?;
        writeln!(f, "store:   {}", r.store)?;
        writeln!(f, "{}", side_line("readout:", &r.readout, false))?;
        writeln!(f, "{}", side_line("collect:", &r.collect, true))?;
        writeln!(
        f,
        "events:  {} written, {} collected ({} kept), integrity errors {}, late fragments {}, {:.2} s",
        r.events_written, r.events_collected, r.events_kept, r.integrity_errors, r.late_fragments, r.elapsed_secs
    )?;
        for (who, s, what) in [
            (
                "readout",
                &r.readout,
                "wrote nothing (it waited for space, or for the CPU)",
            ),
            (
                "collect",
                &r.collect,
                "took nothing (it waited for a complete event, or for the CPU)",
            ),
        ] {
            if s.ops_per_sec_p1 == 0.0 && s.samples > 0 {
                writeln!(
                    f,
                    "note:    {who} p1 is 0: in at least 1% of the {} ms samples it {what}",
                    r.sample_ms
                )?;
            }
        }
        for n in &r.nodes {
            writeln!(
                f,
                "node:    {}: {} events collected, {} events/s, {}/s",
                n.addr,
                n.events_collected,
                human_count(n.events_per_sec),
                human_bytes(n.bytes_per_sec)
            )?;
        }
        match r.ratio {
            Some(ratio) => {
                writeln!(
                    f,
                    "limit:   {}: {}/s",
                    r.limit_name,
                    human_bytes(r.limit_bytes_per_sec)
                )?;
                write!(f, "ratio:   readout {ratio:.3} of the limit")?;
                if let (Some(name), Some(bps), Some(work)) =
                    (&r.work_limit_name, r.work_limit_bytes_per_sec, r.work_ratio)
                {
                    write!(
                        f,
                        "\nwork:    {name}: {}/s\nratio:   readout {work:.3} of the readout's own work done alone",
                        human_bytes(bps)
                    )?;
                }
                Ok(())
            }
            None => write!(f, "limit:   {}", r.limit_name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, ops: u64) -> Sample {
        Sample {
            t_secs: t,
            interval_secs: 0.005,
            readout_ops: 0,
            readout_bytes: 0,
            collect_ops: ops,
            collect_bytes: ops * 1024,
            collect_events: ops,
            backlog_events: 0,
        }
    }

    #[test]
    fn a_side_that_worked_in_few_samples_reports_its_mean_not_zero() {
        // 31 samples of 5 ms, work in 5 of them: the median is 0, the mean is not.
        let samples: Vec<Sample> = (1..=31)
            .map(|i| sample(i as f64 * 0.005, if i % 6 == 0 { 100 } else { 0 }))
            .collect();
        let s = side(&samples, false);
        assert!(s.ops_per_sec > 0.0, "{s:?}");
        assert_eq!(s.ops_per_sec, s.ops_per_sec_mean);
        assert!(s.bytes_per_sec > 0.0 && s.events_per_sec > 0.0, "{s:?}");
        // Work in most samples: the median stands.
        let busy: Vec<Sample> = (1..=31).map(|i| sample(i as f64 * 0.005, 100)).collect();
        let s = side(&busy, false);
        assert!((s.ops_per_sec - 20_000.0).abs() < 1.0, "{s:?}");
    }
}
