//! `hotstore bench device` and `hotstore bench model`: storage characterisation as in the
//! papers (request rate against block size, throughput against threads, per access method,
//! optionally beside fio), and their two sizing models.
//!
//! * `methods.rs`, `uring.rs`: the access methods (one engine per thread).
//! * `layout.rs`: files, aligned buffers, mappings, the read-back pattern, file-system probes.
//! * `workload.rs`: one timed run; `sweep.rs`: the grid, repeats and medians, fio beside.
//! * `fio.rs`, `report.rs`, `plot.rs`: fio, the table/JSON/CSV, the PNG figures.
//! * [`model`]: the models as pure functions; [`model_cmd`]: `bench model`.
//!
//! [`run`] characterises a device ([`Config`]) and returns the [`Outcome`].

mod fio;
pub(crate) mod layout;
mod methods;
pub mod model;
pub mod model_cmd;
mod plot;
mod report;
mod sweep;
#[cfg(target_os = "linux")]
mod uring;
mod workload;

use crate::{Error, Result};
use report::{PointResult, Report};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use methods::{Method, Workload};
pub use sweep::file_bytes;

/// What `bench device` measures (its options, parsed and checked by the caller; see
/// `hotstore bench device --help`).
pub struct Config {
    /// Directory on the device to characterise.
    pub path: PathBuf,
    /// Access methods.
    pub methods: Vec<Method>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Block (request) sizes.
    pub blocks: Vec<usize>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Every block size at every thread count, not just the papers' grid.
    pub full_grid: bool,
    /// Warm-up before each measured window.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Runs per point (the median is reported).
    pub repeat: usize,
    /// io_uring requests in flight per thread.
    pub iodepth: usize,
    /// Write windows end after a final fdatasync/msync.
    pub include_sync: bool,
    /// Total size of the per-thread files at each thread count.
    pub file_size_total: u64,
    /// Also run fio on the same files and pattern.
    pub vs_fio: bool,
    /// Write the PNG figures into this directory (created if missing).
    pub plot: Option<PathBuf>,
    /// Write the results as CSV to this file.
    pub csv: Option<PathBuf>,
}

/// What `bench device` found: the report (every point, including skipped and failed ones)
/// and the figures written. [`Outcome::json`] is the object `--json` prints; the
/// [`Display`](fmt::Display) text is the header, the table and the figures' paths.
pub struct Outcome {
    report: Report,
    plots: Vec<PathBuf>,
}

/// Runs `bench device`: the grid, then the figures (`plot`) and the CSV (`csv`).
pub fn run(cfg: &Config) -> Result<Outcome> {
    if let Some(dir) = &cfg.plot {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Msg(format!("--plot: cannot create {}: {e}", dir.display())))?;
    }
    let report = sweep::run(cfg)?;
    let plots = match &cfg.plot {
        Some(dir) => write_plots(dir, &report)?,
        None => Vec::new(),
    };
    if let Some(path) = &cfg.csv {
        std::fs::write(path, report::csv(&report))
            .map_err(|e| Error::Msg(format!("--csv: cannot write {}: {e}", path.display())))?;
    }
    Ok(Outcome { report, plots })
}

impl Outcome {
    /// The object `--json` prints: the report with the figures written as `plots`.
    pub fn json(&self) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(&self.report)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("plots".into(), serde_json::json!(self.plots));
        }
        Ok(v)
    }

    /// Why the run failed: the points that failed (status `error`) and the first one's
    /// reason; `None` if none did.
    pub fn failure(&self) -> Option<String> {
        let failed: Vec<&PointResult> = self
            .report
            .results
            .iter()
            .filter(|p| p.status == "error")
            .collect();
        let first = failed.first()?;
        Some(format!(
            "{} point(s) failed; the first, {} {} {} B x{}: {}",
            failed.len(),
            first.workload,
            first.method,
            first.block_size,
            first.threads,
            first.reason.as_deref().unwrap_or("")
        ))
    }
}

impl fmt::Display for Outcome {
    /// The header, a blank line, the table and the figures written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.report;
        writeln!(f, "{}", header(r))?;
        write!(
            f,
            "{}",
            report::table(r, r.fio_version.is_some()).trim_end()
        )?;
        for p in &self.plots {
            write!(f, "\nplot: {}", p.display())?;
        }
        Ok(())
    }
}

fn header(r: &Report) -> String {
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
    let sync = if r.final_sync_counted {
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
        crate::util::human_bytes(r.file_size_total as f64),
        r.warmup_secs,
        r.duration_secs,
        r.repeat,
        r.iodepth,
    )
}

/// Two figures per workload; returns the files written.
fn write_plots(dir: &Path, r: &Report) -> Result<Vec<PathBuf>> {
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
            .map_err(|e| Error::Msg(format!("--plot {}: {e}", t.display())))?;
        written.push(t);
        let b = dir.join(format!("device-{w}-blocks.png"));
        let title = format!(
            "{w} request rate vs block size: {} ({}{sync})",
            r.path, r.fs.fs_type
        );
        plot::plot_blocks(&b, &title, &pts)
            .map_err(|e| Error::Msg(format!("--plot {}: {e}", b.display())))?;
        written.push(b);
    }
    Ok(written)
}
