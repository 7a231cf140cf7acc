//! `hotstore bench pipeline`: the neuroimaging paper's incrementation experiment
//! (Hayot-Sasson et al., Algorithm 1 and Eq. 1) on this machine's storage.
//!
//! N worker threads take the chunks of a synthetic 3-D image (`u16` voxels) one by one, read
//! each, add 1 to every voxel and write the result, for K iterations (iteration k reads
//! iteration k-1's output and removes it once its own output is written; a barrier between
//! iterations). The chunks live in one of five configurations ([`Kind`]): plain files on the
//! disk (O_DIRECT, or through the page cache), plain files on tmpfs, hotstore with a memory
//! tier over a disk tier, hotstore with the disk tier alone. Each configuration's makespan
//! is timed end to end (the durability step it promises included), the final image is
//! checked voxel by voxel (initial value + K), and the makespans are printed beside the
//! paper's bound M >= D/R + D/W, D = K x image bytes, with R and W of the disk and of tmpfs
//! measured in the same run (`bench model`'s O_DIRECT 1 MiB sequential measurement).
//! With `repeat` > 1 the configurations alternate within each repetition and medians are
//! reported.

mod backend;
mod geometry;
mod plot;

use crate::device::layout::AlignedBuf;
use crate::device::model::{makespan_bound_secs, Makespan};
use crate::device::model_cmd::Measure;
use crate::device::Workload;
use crate::util::{human_bytes, median};
use crate::{fail, Error, Result};
use backend::{padded, Backend, StoreSetup};
use parking_lot::Mutex;
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use geometry::{cube_of_bytes, dims, parse_dims, Geometry, VOXEL_BYTES};

/// Where a configuration keeps its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Kind {
    /// (a) Plain files on the disk directory, O_DIRECT reads and writes, fdatasync per output
    /// file: the device itself, no page cache.
    Disk,
    /// Plain files on the disk directory through the page cache; the final iteration's
    /// files are fdatasync'd at the end (counted). The page cache as a write-back tier.
    DiskCached,
    /// (b) Plain files on the memory directory (tmpfs).
    Tmpfs,
    /// (c) hotstore: a bounded memory tier over a disk tier, offload in the background.
    Tiered,
    /// (d) hotstore with the disk tier only.
    StoreDisk,
}

impl Kind {
    /// Every configuration, in the order they run within a repetition.
    pub const ALL: [Kind; 5] = [
        Kind::Disk,
        Kind::DiskCached,
        Kind::Tmpfs,
        Kind::Tiered,
        Kind::StoreDisk,
    ];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Disk => "disk",
            Kind::DiskCached => "disk-cached",
            Kind::Tmpfs => "tmpfs",
            Kind::Tiered => "tiered",
            Kind::StoreDisk => "store-disk",
        }
    }

    /// The device whose bound applies to the makespan.
    fn bound_device(self) -> &'static str {
        match self {
            Kind::Tmpfs | Kind::Tiered => "tmpfs",
            _ => "disk",
        }
    }
}

/// What `bench pipeline` runs (its options; see `hotstore bench pipeline --help`).
pub struct Config {
    /// Image size in voxels (x, y, z).
    pub image: [u64; 3],
    /// Chunk size in voxels.
    pub chunk: [u64; 3],
    /// Worker threads.
    pub workers: usize,
    /// Iterations K.
    pub iterations: u32,
    /// Configurations to run.
    pub configs: Vec<Kind>,
    /// Directory on the disk (plain files, the disk tier).
    pub disk_dir: PathBuf,
    /// Directory on the memory file system (tmpfs files, the memory tier).
    pub mem_dir: PathBuf,
    /// Capacity of `tiered`'s memory tier (`None`: twice the image).
    pub fast_capacity: Option<u64>,
    /// Offload high-water mark of `tiered`'s memory tier while the pipeline runs.
    pub offload_high_water: f64,
    /// Repetitions (configurations alternate within each; medians reported).
    pub repeat: usize,
    /// Measure R and W of both directories (`None`: do not; the model is left out).
    pub measure: Option<(Duration, u64)>,
    /// Write the figure here (PNG).
    pub plot: Option<PathBuf>,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// R and W of one directory.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRates {
    device: &'static str,
    path: PathBuf,
    read_bytes_per_sec: f64,
    write_bytes_per_sec: f64,
    read_source: String,
    write_source: String,
    /// Eq. 1 for D = K x image bytes.
    bound: Makespan,
}

/// One run of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Seconds from the start to the end of each iteration (cumulative).
    iteration_secs: Vec<f64>,
    /// Seconds from the start until the configuration's promise held (the last iteration
    /// plus the final sync, if any).
    makespan_secs: f64,
    /// Seconds from the start until the final image was on the disk (`null`: never, tmpfs).
    durable_secs: Option<f64>,
    /// `tiered`: live bytes left only in the memory tier when the drain gave up (0: none).
    drain_left_bytes: Option<u64>,
    /// `tiered`: why the drain gave up (the engine's last background error), if it did.
    drain_error: Option<String>,
    /// `tiered`: bytes offloaded to the disk tier during the makespan.
    offloaded_bytes: Option<u64>,
    /// `tiered`: live bytes per tier at the end of the makespan.
    tier_live_bytes: Option<Vec<u64>>,
    /// Voxels of the final image that are not initial + K.
    wrong_voxels: u64,
}

/// One configuration: the medians of its runs.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigResult {
    name: &'static str,
    /// What the configuration promises about durability.
    promise: String,
    makespan_secs: f64,
    durable_secs: Option<f64>,
    iteration_secs: Vec<f64>,
    /// The device whose bound applies.
    bound_device: &'static str,
    bound_secs: Option<f64>,
    /// Makespan over the bound (below 1: faster than the model).
    makespan_over_bound: Option<f64>,
    wrong_voxels: u64,
    /// Every voxel of every run's final image was initial + K.
    verified: bool,
    runs: Vec<Run>,
}

/// What `bench pipeline` found: the JSON object `--json` prints and the text of
/// [`Display`](fmt::Display).
#[derive(Debug, Serialize)]
pub struct Report {
    geometry: Geometry,
    voxel_bytes: u64,
    image_bytes: u64,
    chunks: usize,
    chunk_bytes: usize,
    workers: usize,
    iterations: u32,
    repeat: usize,
    /// D: bytes read (and written) by the pipeline, K x image.
    data_bytes: u64,
    fast_capacity_bytes: u64,
    offload_high_water: f64,
    /// Segment file size of the stores.
    segment_size: usize,
    devices: Vec<DeviceRates>,
    configs: Vec<ConfigResult>,
    plot: Option<PathBuf>,
}

impl Report {
    /// Why the run failed (a final image that is wrong), if it did.
    pub fn failure(&self) -> Option<String> {
        let bad: Vec<String> = self
            .configs
            .iter()
            .filter(|c| !c.verified)
            .map(|c| format!("{} ({} wrong voxels)", c.name, c.wrong_voxels))
            .collect();
        if bad.is_empty() {
            None
        } else {
            Some(format!(
                "bench pipeline: the final image is wrong in {}",
                bad.join(", ")
            ))
        }
    }
}

/// Runs `bench pipeline`.
pub fn run(cfg: &Config) -> Result<Report> {
    if cfg.workers == 0 {
        return fail("--workers must be at least 1");
    }
    if cfg.iterations == 0 {
        return fail("--iterations must be at least 1");
    }
    if cfg.repeat == 0 {
        return fail("--repeat must be at least 1");
    }
    if cfg.configs.is_empty() {
        return fail("--configs: give at least one configuration");
    }
    if !(cfg.offload_high_water > 0.0 && cfg.offload_high_water <= 1.0) {
        return fail("--offload-high-water: a fraction above 0 and at most 1");
    }
    for (opt, d) in [("--disk-dir", &cfg.disk_dir), ("--mem-dir", &cfg.mem_dir)] {
        if !d.is_dir() {
            return fail(format!("{opt} {}: not an existing directory", d.display()));
        }
    }
    let geo = Geometry::new(cfg.image, cfg.chunk, hotstore::MAX_VALUE_LEN)?;
    let image_bytes = geo.image_bytes();
    let fast_capacity = cfg.fast_capacity.unwrap_or(2 * image_bytes);
    let wants_store = cfg.configs.contains(&Kind::Tiered);
    if wants_store && fast_capacity < 4 * geo.max_chunk_bytes() as u64 {
        return fail(format!(
            "--fast-capacity {}: too small for chunks of {} (at least 4 chunks)",
            human_bytes(fast_capacity as f64),
            human_bytes(geo.max_chunk_bytes() as f64)
        ));
    }
    let mut configs: Vec<Kind> = Vec::new();
    for k in &cfg.configs {
        if !configs.contains(k) {
            configs.push(*k);
        }
    }
    let data_bytes = image_bytes * u64::from(cfg.iterations);
    let note = |msg: String| {
        if cfg.progress {
            eprintln!("pipeline: {msg}");
        }
    };

    let devices = match cfg.measure {
        None => Vec::new(),
        Some((duration, size)) => {
            let m = Measure { duration, size };
            let mut v = Vec::new();
            for (device, path) in [("disk", &cfg.disk_dir), ("tmpfs", &cfg.mem_dir)] {
                let r = m.rate(path, Workload::SeqRead)?;
                let w = m.rate(path, Workload::SeqWrite)?;
                v.push(DeviceRates {
                    device,
                    path: path.clone(),
                    bound: makespan_bound_secs(data_bytes as f64, r.bytes_per_sec, w.bytes_per_sec),
                    read_bytes_per_sec: r.bytes_per_sec,
                    write_bytes_per_sec: w.bytes_per_sec,
                    read_source: r.source,
                    write_source: w.source,
                });
            }
            v
        }
    };

    let setup = StoreSetup {
        fast_capacity,
        offload_high_water: cfg.offload_high_water,
        lanes: cfg.workers.max(2),
        segment_size: backend::segment_size_for(geo.max_chunk_bytes() as u64, fast_capacity),
    };
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); configs.len()];
    for rep in 0..cfg.repeat {
        // Alternate: each repetition starts one configuration later.
        for j in 0..configs.len() {
            let i = (j + rep) % configs.len();
            let kind = configs[i];
            let tag = format!("run {}/{} {}", rep + 1, cfg.repeat, kind.name());
            runs[i].push(run_one(cfg, &geo, kind, &setup, &tag, &note)?);
        }
    }

    let configs: Vec<ConfigResult> = configs
        .iter()
        .zip(runs)
        .map(|(&kind, runs)| summarize(kind, runs, cfg, fast_capacity, &devices))
        .collect();
    let mut report = Report {
        voxel_bytes: VOXEL_BYTES,
        image_bytes,
        chunks: geo.chunks(),
        chunk_bytes: geo.max_chunk_bytes(),
        geometry: geo,
        workers: cfg.workers,
        iterations: cfg.iterations,
        repeat: cfg.repeat,
        data_bytes,
        fast_capacity_bytes: fast_capacity,
        offload_high_water: cfg.offload_high_water,
        segment_size: setup.segment_size,
        devices,
        configs,
        plot: None,
    };
    if let Some(png) = &cfg.plot {
        draw(&report, png).map_err(|e| Error::Msg(format!("--plot {}: {e}", png.display())))?;
        report.plot = Some(png.clone());
    }
    Ok(report)
}

fn summarize(
    kind: Kind,
    runs: Vec<Run>,
    cfg: &Config,
    fast_capacity: u64,
    devices: &[DeviceRates],
) -> ConfigResult {
    let med =
        |f: &dyn Fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0);
    let makespan = med(&|r| r.makespan_secs);
    let durable = if runs.iter().all(|r| r.durable_secs.is_some()) {
        Some(med(&|r| r.durable_secs.unwrap_or(0.0)))
    } else {
        None
    };
    let iteration_secs = (0..cfg.iterations as usize)
        .map(|k| med(&|r| r.iteration_secs.get(k).copied().unwrap_or(0.0)))
        .collect();
    let bound = devices
        .iter()
        .find(|d| d.device == kind.bound_device())
        .map(|d| d.bound.bound_secs);
    let wrong = runs.iter().map(|r| r.wrong_voxels).sum();
    let (disk, mem) = (cfg.disk_dir.display(), cfg.mem_dir.display());
    let promise = match kind {
        Kind::Disk => format!(
            "files in {disk}, O_DIRECT reads and writes, fdatasync per output file: every \
             result is on the disk when its worker moves on"
        ),
        Kind::DiskCached => format!(
            "files in {disk} through the page cache; the final image fdatasync'd at the end \
             (counted): on the disk at the makespan (intermediates may never reach it)"
        ),
        Kind::Tmpfs => {
            format!("files in {mem} (tmpfs): nothing survives a power cut or a reboot")
        }
        Kind::Tiered => format!(
            "hotstore, a {} memory tier in {mem} over a disk tier in {disk}, Persisted puts: \
             a result survives a process crash at once, a power cut only once offloaded \
             (durable_secs: close, reopen, offload until the memory tier is empty)",
            human_bytes(fast_capacity as f64)
        ),
        Kind::StoreDisk => format!(
            "hotstore, one disk tier in {disk}, Persisted puts (direct I/O, group commit): \
             every result is on the disk when acknowledged"
        ),
    };
    ConfigResult {
        name: kind.name(),
        promise,
        makespan_secs: makespan,
        durable_secs: durable,
        iteration_secs,
        bound_device: kind.bound_device(),
        bound_secs: bound,
        makespan_over_bound: bound.map(|b| makespan / b),
        wrong_voxels: wrong,
        verified: wrong == 0,
        runs,
    }
}

/// Runs `f(chunk, buffer)` for every chunk on `workers` threads (chunks taken in order, one
/// at a time); the first error stops the others.
fn parallel(
    workers: usize,
    chunks: usize,
    buf_len: usize,
    f: &(dyn Fn(usize, &mut [u8]) -> Result<()> + Sync),
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let first_err: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..workers.min(chunks) {
            s.spawn(|| {
                let mut buf = match AlignedBuf::new(buf_len) {
                    Ok(b) => b,
                    Err(e) => {
                        first_err.lock().get_or_insert(Error::Msg(format!(
                            "cannot allocate a chunk buffer: {e}"
                        )));
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    let c = next.fetch_add(1, Ordering::Relaxed);
                    if c >= chunks {
                        break;
                    }
                    if let Err(e) = f(c, buf.as_mut_slice()) {
                        first_err.lock().get_or_insert(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    match first_err.into_inner() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How long the drain of `tiered` may go without progress before it gives up.
const DRAIN_GIVE_UP: Duration = Duration::from_secs(10);

fn run_one(
    cfg: &Config,
    geo: &Geometry,
    kind: Kind,
    setup: &StoreSetup,
    tag: &str,
    note: &dyn Fn(String),
) -> Result<Run> {
    let chunks = geo.chunks();
    let buf_len = padded(geo.max_chunk_bytes());
    let mut backend = Backend::create(kind, &cfg.disk_dir, &cfg.mem_dir, setup)?;
    note(format!(
        "{tag}: writing the initial image ({}, not timed)",
        human_bytes(geo.image_bytes() as f64)
    ));
    parallel(cfg.workers, chunks, buf_len, &|c, buf| {
        let len = geo.chunk_bytes(c);
        geo.fill_initial(c, &mut buf[..len]);
        backend.put(0, c, buf, len)
    })?;
    backend.settle_initial(chunks)?;

    let started = Instant::now();
    let mut iteration_secs = Vec::with_capacity(cfg.iterations as usize);
    for it in 1..=cfg.iterations {
        parallel(cfg.workers, chunks, buf_len, &|c, buf| {
            let len = geo.chunk_bytes(c);
            backend.get(it - 1, c, buf, len)?;
            geometry::increment(&mut buf[..len]);
            backend.put(it, c, buf, len)?;
            backend.remove(it - 1, c)
        })?;
        let t = started.elapsed().as_secs_f64();
        iteration_secs.push(t);
        note(format!(
            "{tag}: iteration {it}/{} done at {t:.2} s",
            cfg.iterations
        ));
    }
    backend.finish(cfg.iterations, chunks)?;
    let makespan = started.elapsed().as_secs_f64();
    let tiers = backend.tier_figures();
    let drain = backend.drain(DRAIN_GIVE_UP)?;
    let durable_secs = match (kind, &drain) {
        (Kind::Tmpfs, _) => None,
        (_, Some(d)) if d.left_bytes > 0 => None,
        (_, Some(d)) => Some(makespan + d.secs),
        (_, None) => Some(makespan),
    };
    note(format!(
        "{tag}: makespan {makespan:.2} s{}; checking the final image",
        durable_secs
            .filter(|_| drain.is_some())
            .map(|d| format!(", all on disk at {d:.2} s"))
            .unwrap_or_default()
    ));

    let wrong = std::sync::atomic::AtomicU64::new(0);
    let k = cfg.iterations;
    parallel(cfg.workers, chunks, buf_len, &|c, buf| {
        let len = geo.chunk_bytes(c);
        backend.get(k, c, buf, len)?;
        wrong.fetch_add(geo.count_wrong(c, &buf[..len], k), Ordering::Relaxed);
        Ok(())
    })?;
    backend.close()?;
    Ok(Run {
        iteration_secs,
        makespan_secs: makespan,
        durable_secs,
        drain_left_bytes: drain.as_ref().map(|d| d.left_bytes),
        drain_error: drain.as_ref().and_then(|d| d.why.clone()),
        offloaded_bytes: tiers.as_ref().map(|t| t.offloaded_bytes),
        tier_live_bytes: tiers.map(|t| t.live_bytes),
        wrong_voxels: wrong.into_inner(),
    })
}

fn draw(r: &Report, png: &Path) -> std::result::Result<(), crate::plot::PlotError> {
    let lines: Vec<plot::Line> = r
        .configs
        .iter()
        .map(|c| plot::Line {
            label: c.name.to_string(),
            secs: c.iteration_secs.clone(),
            // The cross: when the result was on disk, where that is after the last iteration
            // (the final sync of disk-cached, the drain of tiered).
            durable: match c.durable_secs {
                Some(d) if d > c.iteration_secs.last().copied().unwrap_or(0.0) + 1e-3 => Some(d),
                _ => None,
            },
        })
        .collect();
    let bounds: Vec<plot::Bound> = r
        .devices
        .iter()
        .map(|d| plot::Bound {
            label: format!(
                "bound {}: D/R + D/W (R {}/s, W {}/s)",
                d.device,
                human_bytes(d.read_bytes_per_sec),
                human_bytes(d.write_bytes_per_sec)
            ),
            secs_per_iteration: d.bound.bound_secs / f64::from(r.iterations),
        })
        .collect();
    let title = format!(
        "Incrementation pipeline: {} image, {} chunks, {} workers, median of {} (x: result on disk)",
        human_bytes(r.image_bytes as f64),
        r.chunks,
        r.workers,
        r.repeat
    );
    plot::plot(png, &title, &lines, &bounds)
}

fn secs(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} s")
    } else if v >= 10.0 {
        format!("{v:.1} s")
    } else {
        format!("{v:.2} s")
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        writeln!(
            f,
            "pipeline: image {} u16 ({}), {} chunks of {} ({}), {} workers, K = {} iterations, {}",
            dims(g.image),
            human_bytes(self.image_bytes as f64),
            self.chunks,
            dims(g.chunk),
            human_bytes(self.chunk_bytes as f64),
            self.workers,
            self.iterations,
            if self.repeat == 1 {
                "1 run".to_string()
            } else {
                format!("median of {} runs (configurations alternated)", self.repeat)
            }
        )?;
        writeln!(
            f,
            "data:     D = K x image = {} read and {} written",
            human_bytes(self.data_bytes as f64),
            human_bytes(self.data_bytes as f64)
        )?;
        for d in &self.devices {
            writeln!(
                f,
                "model:    {:<5} {}: R {}/s, W {}/s: M >= D/R + D/W = {} + {} = {}",
                d.device,
                d.path.display(),
                human_bytes(d.read_bytes_per_sec),
                human_bytes(d.write_bytes_per_sec),
                secs(d.bound.read_secs),
                secs(d.bound.write_secs),
                secs(d.bound.bound_secs)
            )?;
        }
        if self.devices.is_empty() {
            writeln!(f, "model:    not measured (--no-measure)")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<12} {:>10} {:>12} {:>16} {:>8}  check",
            "config", "makespan", "on disk at", "bound", "M/bound"
        )?;
        for c in &self.configs {
            writeln!(
                f,
                "{:<12} {:>10} {:>12} {:>16} {:>8}  {}",
                c.name,
                secs(c.makespan_secs),
                match (
                    c.durable_secs,
                    c.runs.iter().any(|r| r.drain_left_bytes > Some(0))
                ) {
                    (Some(d), _) => secs(d),
                    (None, true) => "gave up".into(),
                    (None, false) => "never".into(),
                },
                c.bound_secs
                    .map_or("-".into(), |b| format!("{} ({})", secs(b), c.bound_device)),
                c.makespan_over_bound
                    .map_or("-".into(), |r| format!("{r:.2}")),
                if c.verified {
                    "ok".to_string()
                } else {
                    format!("{} wrong voxels", c.wrong_voxels)
                }
            )?;
        }
        writeln!(f)?;
        for c in &self.configs {
            writeln!(f, "{:<12} {}", c.name, c.promise)?;
            if let Some(r) = c.runs.last() {
                if let (Some(off), Some(live)) = (r.offloaded_bytes, &r.tier_live_bytes) {
                    writeln!(
                        f,
                        "{:<12} last run: {} offloaded during the makespan; live at its end: {} memory tier, {} disk tier; segments of {}",
                        "",
                        human_bytes(off as f64),
                        human_bytes(live.first().copied().unwrap_or(0) as f64),
                        human_bytes(live.get(1).copied().unwrap_or(0) as f64),
                        human_bytes(self.segment_size as f64)
                    )?;
                    if let Some(left) = r.drain_left_bytes.filter(|&l| l > 0) {
                        writeln!(
                            f,
                            "{:<12} the drain gave up with {} still only in the memory tier ({})",
                            "",
                            human_bytes(left as f64),
                            r.drain_error.as_deref().unwrap_or("no progress, no error")
                        )?;
                    }
                }
            }
        }
        if let Some(p) = &self.plot {
            write!(f, "\nplot: {}", p.display())?;
        }
        Ok(())
    }
}
