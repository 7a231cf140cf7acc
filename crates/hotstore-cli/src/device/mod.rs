//! `hotstore bench device` and `hotstore bench model`: storage characterisation as in the
//! papers (request rate against block size, throughput against threads, per access method,
//! optionally beside fio), and their two sizing models.
//!
//! * `methods.rs`, `uring.rs`: the access methods (one engine per thread).
//! * `layout.rs`: files, aligned buffers, mappings, the read-back pattern, file-system probes.
//! * `workload.rs`: one timed run; `sweep.rs`: the grid, repeats and medians, fio beside.
//! * `fio.rs`, `report.rs`, `plot.rs`: fio, the table/JSON/CSV, the PNG figures.
//! * `model.rs`: the models as pure functions; `model_cmd.rs`: `bench model`.

mod fio;
mod layout;
mod methods;
pub(crate) mod model;
mod model_cmd;
mod plot;
mod report;
mod sweep;
#[cfg(target_os = "linux")]
mod uring;
mod workload;

use crate::util::{fail, parse_secs, parse_size, CliError, CliResult, Out};
use clap::Args;
use methods::{Method, Workload};
use report::{PointResult, Report};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub use model_cmd::ModelArgs;

/// Characterise a storage device: throughput against threads and request rate against block
/// size, for each access method, as in the DUNE and neuroimaging papers.
///
/// Works in a fresh temporary directory under --path (removed afterwards) with one file per
/// thread; at each thread count the files (--file-size in total) are preallocated and filled
/// with a pattern once. Every point is: flush and drop the files from the page cache, start the
/// threads, a warm-up, then the measured window of --duration; the figure is the median over
/// --repeat runs. As in fio (invalidate=1), a thread drops its file's pages again each time it
/// has gone once through the file, so buffered reads keep measuring the device, not a page
/// cache holding the whole file (pages mapped by the mmap methods stay: the kernel keeps them). Writes end the window only after a final
/// fdatasync (msync for mappings), so the figure includes reaching the device: "sync yes" in
/// the table, `includes_sync` in JSON (--no-final-sync leaves it out, which measures the page
/// cache). Reads are checked against the pattern (every byte during the warm-up, the first and
/// last 8 bytes of each request while measured); each write thread reads back its last block.
///
/// Grid (default): request rate against every --block-size at the first --threads value
/// (DUNE Fig. 2), and throughput against the other thread counts at 4 KiB and 1 MiB (Figs. 3,
/// 5). --full-grid runs every combination.
///
/// Block sizes O_DIRECT cannot do on the file system (not a multiple of its O_DIRECT alignment,
/// e.g. 256 and 5568 bytes on a 512-byte disk) are reported as skipped; a method the system
/// refuses (io_uring blocked in a container, O_DIRECT on some file systems) as unavailable.
///
/// Example: hotstore bench device --path /var/tmp --method direct,uring --block-size 4K,1M
#[derive(Args)]
pub struct DeviceArgs {
    /// Directory on the device to characterise (must exist).
    #[arg(long)]
    pub path: PathBuf,
    /// Access methods, comma-separated: write (pwrite/pread through the page cache), direct
    /// (O_DIRECT from 4 KiB-aligned buffers), uring (io_uring, O_DIRECT, --iodepth requests in
    /// flight per thread), mmap (memcpy into a shared file mapping, msync at the end), mmap-nt
    /// (non-temporal MOVNTDQ/MOVNTI stores + SFENCE per request into the mapping, the DUNE
    /// paper's path; msync at the end), dsync (pwrite + fdatasync after every request).
    #[arg(long, default_value = "write,direct,uring,mmap,mmap-nt,dsync")]
    pub method: String,
    /// Workloads, comma-separated: seq-write, seq-read, rand-write (uniformly random block
    /// offsets: write IOPS). Reads use each method's read path (write: buffered pread, direct:
    /// O_DIRECT pread, uring: io_uring O_DIRECT reads, mmap: memcpy from the mapping).
    #[arg(long, default_value = "seq-write,seq-read,rand-write")]
    pub workload: String,
    /// Block (request) sizes, comma-separated: 256, 4K, 5568, 64KiB, 1M ...
    #[arg(long, default_value = "256,4K,5568,64K,1M")]
    pub block_size: String,
    /// Thread counts, comma-separated, each thread on its own file [default: 1,2,4, without
    /// those above twice the number of CPUs].
    #[arg(long)]
    pub threads: Option<String>,
    /// Run every block size at every thread count, not just the papers' grid.
    #[arg(long)]
    pub full_grid: bool,
    /// Seconds measured per run.
    #[arg(long, default_value = "0.5", value_parser = parse_secs)]
    pub duration: f64,
    /// Seconds of warm-up before each measured window (not counted).
    #[arg(long, default_value = "0.1", value_parser = parse_secs)]
    pub warmup: f64,
    /// Runs per point; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// io_uring requests in flight per thread (method uring).
    #[arg(long, default_value_t = 32)]
    pub iodepth: usize,
    /// Total size of the per-thread files at each thread count (each thread gets an equal
    /// share and wraps around in it).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub file_size: u64,
    /// End write windows without the final fdatasync/msync: the figure then measures reaching
    /// the page cache, not the device (except for dsync, which syncs every request).
    #[arg(long)]
    pub no_final_sync: bool,
    /// Print one JSON object (settings, file system, `results` list) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the results as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write PNG figures into this directory (created if missing): per workload,
    /// device-<workload>-threads.png (throughput against threads per block size) and
    /// device-<workload>-blocks.png (request rate against block size per thread count).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also run fio (which must be installed) on the same files and pattern where it has the
    /// same method, and print its figure and our/fio ratio beside ours.
    #[arg(long)]
    pub vs_fio: bool,
}

/// Splits a comma-separated option, refusing empty items.
fn list<T>(opt: &str, s: &str, parse: impl Fn(&str) -> Result<T, String>) -> CliResult<Vec<T>>
where
    T: PartialEq,
{
    let mut out = Vec::new();
    for item in s.split(',') {
        if item.trim().is_empty() {
            return fail(format!("--{opt}: empty item in `{s}`"));
        }
        let v = parse(item.trim()).map_err(|e| CliError::Msg(format!("--{opt}: {e}")))?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

const MAX_THREADS: usize = 256;
const MAX_BLOCK: u64 = 1 << 30;

fn config(a: &DeviceArgs) -> CliResult<sweep::Config> {
    if !a.path.is_dir() {
        return fail(format!(
            "--path {}: not an existing directory",
            a.path.display()
        ));
    }
    let methods = list("method", &a.method, Method::parse)?;
    let workloads = list("workload", &a.workload, Workload::parse)?;
    let blocks = list("block-size", &a.block_size, |s| {
        let b = parse_size(s)?;
        if b == 0 || b > MAX_BLOCK {
            return Err(format!("`{s}`: a block size must be 1 byte to 1 GiB"));
        }
        Ok(b as usize)
    })?;
    let threads = match &a.threads {
        Some(t) => list("threads", t, |s| match s.parse::<usize>() {
            Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
            _ => Err(format!("`{s}`: a thread count must be 1 to {MAX_THREADS}")),
        })?,
        None => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            [1, 2, 4]
                .into_iter()
                .filter(|t| *t == 1 || *t <= 2 * cpus)
                .collect()
        }
    };
    if !(1..=1000).contains(&a.repeat) {
        return fail(format!("--repeat {}: must be 1 to 1000", a.repeat));
    }
    if !(1..=4096).contains(&a.iodepth) {
        return fail(format!("--iodepth {}: must be 1 to 4096", a.iodepth));
    }
    let max_threads = threads.iter().copied().max().unwrap_or(1);
    if sweep::file_bytes(a.file_size, max_threads) == 0 {
        return fail(format!(
            "--file-size {}: too small for {max_threads} threads (each needs at least 4 KiB)",
            a.file_size
        ));
    }
    Ok(sweep::Config {
        path: a.path.clone(),
        methods,
        workloads,
        blocks,
        threads,
        full_grid: a.full_grid,
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(a.duration),
        repeat: a.repeat,
        iodepth: a.iodepth,
        include_sync: !a.no_final_sync,
        file_size_total: a.file_size,
        vs_fio: a.vs_fio,
    })
}

/// Runs `bench device`.
pub fn run(a: DeviceArgs) -> CliResult<ExitCode> {
    let cfg = config(&a)?;
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Msg(format!("--plot: cannot create {}: {e}", dir.display())))?;
    }
    let report = sweep::run(&cfg)?;
    let plots = match &a.plot {
        Some(dir) => write_plots(dir, &report)?,
        None => Vec::new(),
    };
    if let Some(path) = &a.csv {
        std::fs::write(path, report::csv(&report))
            .map_err(|e| CliError::Msg(format!("--csv: cannot write {}: {e}", path.display())))?;
    }
    let mut out = Out::new();
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("plots".into(), serde_json::json!(plots));
        }
        out.line(serde_json::to_string(&v)?)?;
    } else {
        out.line(header(&report, &cfg))?;
        out.line(report::table(&report, cfg.vs_fio).trim_end())?;
        for p in &plots {
            out.line(format!("plot: {}", p.display()))?;
        }
    }
    out.flush()?;
    let failed: Vec<&PointResult> = report
        .results
        .iter()
        .filter(|p| p.status == "error")
        .collect();
    if let Some(first) = failed.first() {
        return fail(format!(
            "{} point(s) failed; the first, {} {} {} B x{}: {}",
            failed.len(),
            first.workload,
            first.method,
            first.block_size,
            first.threads,
            first.reason.as_deref().unwrap_or("")
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn header(r: &Report, cfg: &sweep::Config) -> String {
    let fs = &r.fs;
    let direct = match (fs.direct_align, &fs.direct_error) {
        (Some(a), _) => format!("O_DIRECT alignment {a} B"),
        (None, Some(e)) => e.clone(),
        (None, None) => "O_DIRECT refused".into(),
    };
    let kind = if fs.memory {
        "memory: fdatasync does nothing"
    } else {
        "block device"
    };
    let sync = if cfg.include_sync {
        "write figures include a final fdatasync/msync (sync yes): they measure reaching the device"
    } else {
        "write figures exclude the final fdatasync (--no-final-sync): buffered ones measure the page cache"
    };
    format!(
        "bench device: {} ({}, {kind}; {direct}; MAP_SYNC {})\n\
         files: {} per thread count, one per thread; warm-up {} s, {} s measured, median of {}; \
         io_uring depth {}\n{sync}\n",
        r.path,
        fs.fs_type,
        if fs.map_sync {
            "accepted (DAX)"
        } else {
            "refused (no DAX)"
        },
        hotstore_bench::util::human_bytes(r.file_size_total as f64),
        r.warmup_secs,
        r.duration_secs,
        r.repeat,
        r.iodepth,
    )
}

/// Two figures per workload; returns the files written.
fn write_plots(dir: &Path, r: &Report) -> CliResult<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut workloads: Vec<&'static str> = r.results.iter().map(|p| p.workload).collect();
    workloads.dedup();
    for w in workloads {
        let pts: Vec<&PointResult> = r
            .results
            .iter()
            .filter(|p| p.workload == w && p.ok())
            .collect();
        if pts.is_empty() {
            continue;
        }
        let sync = if w.contains("write") && r.final_sync_counted {
            ", final fdatasync counted"
        } else {
            ""
        };
        let t = dir.join(format!("device-{w}-threads.png"));
        let title = format!(
            "{w} throughput vs threads: {} ({}{sync})",
            r.path, r.fs.fs_type
        );
        plot::plot_threads(&t, &title, &pts)
            .map_err(|e| CliError::Msg(format!("--plot {}: {e}", t.display())))?;
        written.push(t);
        let b = dir.join(format!("device-{w}-blocks.png"));
        let title = format!(
            "{w} request rate vs block size: {} ({}{sync})",
            r.path, r.fs.fs_type
        );
        plot::plot_blocks(&b, &title, &pts)
            .map_err(|e| CliError::Msg(format!("--plot {}: {e}", b.display())))?;
        written.push(b);
    }
    Ok(written)
}

/// Runs `bench model`.
pub fn run_model(a: ModelArgs) -> CliResult<ExitCode> {
    model_cmd::run(a)
}
