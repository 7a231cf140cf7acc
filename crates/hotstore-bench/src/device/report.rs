//! The results of `bench device`: one record per point, printed as a table, JSON or CSV.

use super::layout::FsInfo;
use crate::util::{exact_bytes, human_bytes, human_count};
use serde::Serialize;
use std::fmt::Write as _;

/// One point of the grid: a method, workload, block size and thread count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PointResult {
    pub method: &'static str,
    pub workload: &'static str,
    pub block_size: u64,
    pub threads: usize,
    /// "ok", "skipped" (this block size cannot be done this way) or "unavailable" (the method
    /// does not work here at all); `reason` says why.
    pub status: &'static str,
    pub reason: Option<String>,
    /// The system calls behind the figure, e.g. "pwrite O_DIRECT".
    pub io: String,
    /// Median over the repeats (bytes moved in the measured window / its length).
    pub bytes_per_sec: Option<f64>,
    /// Requests per second: `bytes_per_sec / block_size`.
    pub iops: Option<f64>,
    /// Writes: whether the measured window ends only after the final fdatasync (msync for
    /// mappings), i.e. the figure includes reaching the device. Always false for reads.
    pub includes_sync: bool,
    /// Requests in flight per thread (io_uring only).
    pub iodepth: Option<usize>,
    /// Every repeat's bytes per second, in run order.
    pub runs_bytes_per_sec: Vec<f64>,
    /// Reads: every request checked against the written pattern (completely during the
    /// warm-up, first and last 8 bytes while measured). Writes: the last block each thread
    /// wrote read back and compared.
    pub verified: bool,
    /// fio's figure for the same pattern (`--vs-fio`), median over the same repeats.
    pub fio_bytes_per_sec: Option<f64>,
    /// bytes_per_sec / fio_bytes_per_sec.
    pub ratio: Option<f64>,
    /// Why there is no fio figure (no equivalent engine, or fio failed).
    pub fio_note: Option<String>,
}

impl PointResult {
    pub(crate) fn ok(&self) -> bool {
        self.status == "ok"
    }
}

/// The whole run, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub path: String,
    pub fs: FsInfo,
    /// Total size of the per-thread files at each thread count.
    pub file_size_total: u64,
    pub warmup_secs: f64,
    pub duration_secs: f64,
    pub repeat: usize,
    pub iodepth: usize,
    pub final_sync_counted: bool,
    pub fio_version: Option<String>,
    pub notes: Vec<String>,
    pub results: Vec<PointResult>,
}

fn rate(v: Option<f64>) -> String {
    v.map(|b| format!("{}/s", human_bytes(b)))
        .unwrap_or_default()
}

/// A fixed-width table, one line per point, with notes below.
pub(crate) fn table(r: &Report, vs_fio: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:<8} {:>9} {:>3}  {:>12} {:>9}  {:<4}{}",
        "workload",
        "method",
        "block",
        "thr",
        "throughput",
        "req/s",
        "sync",
        if vs_fio {
            format!("  {:>12} {:>6}", "fio", "ratio")
        } else {
            String::new()
        }
    );
    for p in &r.results {
        let head = format!(
            "{:<10} {:<8} {:>9} {:>3}  ",
            p.workload,
            p.method,
            exact_bytes(p.block_size),
            p.threads
        );
        if !p.ok() {
            let _ = writeln!(
                s,
                "{head}{}: {}",
                p.status,
                p.reason.as_deref().unwrap_or("")
            );
            continue;
        }
        let sync = if !p.workload.contains("write") {
            "-"
        } else if p.includes_sync {
            "yes"
        } else {
            "no"
        };
        let mut line = format!(
            "{head}{:>12} {:>9}  {:<4}",
            rate(p.bytes_per_sec),
            p.iops.map(human_count).unwrap_or_default(),
            sync
        );
        if vs_fio {
            match (p.fio_bytes_per_sec, p.ratio) {
                (Some(f), Some(q)) => {
                    let _ = write!(line, "  {:>12} {q:>6.2}", rate(Some(f)));
                }
                _ => {
                    let _ = write!(line, "  fio: {}", p.fio_note.as_deref().unwrap_or("-"));
                }
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// CSV with a header line; empty fields where a value does not apply.
pub(crate) fn csv(r: &Report) -> String {
    let mut s = String::from(
        "workload,method,block_size,threads,status,bytes_per_sec,iops,includes_sync,iodepth,\
         io,verified,fio_bytes_per_sec,ratio,reason\n",
    );
    let num = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_default();
    for p in &r.results {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.workload,
            p.method,
            p.block_size,
            p.threads,
            p.status,
            num(p.bytes_per_sec),
            num(p.iops),
            p.includes_sync,
            p.iodepth.map(|d| d.to_string()).unwrap_or_default(),
            csv_field(&p.io),
            p.verified,
            num(p.fio_bytes_per_sec),
            p.ratio.map(|q| format!("{q:.3}")).unwrap_or_default(),
            csv_field(p.reason.as_deref().or(p.fio_note.as_deref()).unwrap_or("")),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields() {
        assert_eq!(csv_field("a, b"), "\"a, b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
