//! `hotstore bench model`: the papers' two models for given or measured rates ([`run`]).

use super::layout::{self, FileSet};
use super::methods::{Method, Workload};
use super::model::{self, backlog_bytes, makespan_bound_secs, Makespan};
use super::plot::{plot_backlog, BacklogLine};
use super::workload::{run_once, RunSpec};
use crate::util::{human_bytes, median};
use crate::{fail, Error, Result};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `bench model` computes (its options; see `hotstore bench model --help`). The
/// extra-DRAM model runs if any of its inputs is given, the makespan bound likewise.
pub struct Config {
    /// Input (arrival) rate, bytes/s.
    pub input: Option<f64>,
    /// Output (storage) rates, comma-separated as `--output` takes them (`2GB/s,5GB/s`; see
    /// [`model::parse_rate`]), one line each.
    pub output: Option<String>,
    /// Measure the output rate as the write bandwidth of this directory.
    pub output_path: Option<PathBuf>,
    /// Recording time for the extra-DRAM model, seconds.
    pub duration: Option<f64>,
    /// DRAM available for the backlog: also say how long it lasts at each output rate.
    pub dram: Option<f64>,
    /// Write the backlog over time as a PNG.
    pub plot: Option<PathBuf>,
    /// Data read and written by the job, for the makespan bound.
    pub data_size: Option<f64>,
    /// Device read bandwidth R, bytes/s.
    pub read_rate: Option<f64>,
    /// Device write bandwidth W, bytes/s.
    pub write_rate: Option<f64>,
    /// Measure R and/or W (whichever is not given) on this directory.
    pub path: Option<PathBuf>,
    /// Time measured per run (3 runs, median) when measuring a directory.
    pub measure_duration: Duration,
    /// Size of the temporary file used when measuring a directory.
    pub measure_size: u64,
}

/// A rate and where it came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Rate {
    pub(crate) bytes_per_sec: f64,
    /// "given", or how it was measured.
    pub(crate) source: String,
}

#[derive(Debug, Serialize)]
struct BacklogOutput {
    output_bytes_per_sec: f64,
    source: String,
    /// (input - output) x duration, 0 when the output keeps up.
    extra_dram_bytes: f64,
    /// With --dram: seconds until that much DRAM is full (null: never).
    secs_until_full: Option<f64>,
}

#[derive(Debug, Serialize)]
struct BacklogReport {
    input_bytes_per_sec: f64,
    duration_secs: f64,
    outputs: Vec<BacklogOutput>,
    plot: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct MakespanReport {
    data_bytes: f64,
    read: Rate,
    write: Rate,
    #[serde(flatten)]
    bound: Makespan,
}

/// Runs `bench model`.
pub fn run(a: &Config) -> Result<Report> {
    let wants_backlog = a.input.is_some()
        || a.output.is_some()
        || a.output_path.is_some()
        || a.duration.is_some()
        || a.dram.is_some()
        || a.plot.is_some();
    let wants_makespan = a.data_size.is_some()
        || a.read_rate.is_some()
        || a.write_rate.is_some()
        || a.path.is_some();
    if !wants_backlog && !wants_makespan {
        return fail(
            "bench model: give --input, --output (or --output-path) and --duration for the \
             extra-DRAM model, and/or --data-size with --read-rate/--write-rate (or --path) for \
             the makespan bound",
        );
    }
    let measure = Measure {
        duration: a.measure_duration,
        size: a.measure_size,
    };
    let backlog = if wants_backlog {
        Some(backlog(a, &measure)?)
    } else {
        None
    };
    let makespan = if wants_makespan {
        Some(makespan(a, &measure)?)
    } else {
        None
    };
    Ok(Report {
        backlog,
        makespan,
        dram: a.dram,
    })
}

/// What `bench model` found: the object `--json` prints (`backlog`, `makespan`: `null` where
/// not asked for; keys in alphabetical order at every level), and the text of
/// [`Display`](fmt::Display) otherwise.
#[derive(Debug)]
pub struct Report {
    backlog: Option<BacklogReport>,
    makespan: Option<MakespanReport>,
    /// `--dram`, for the text.
    dram: Option<f64>,
}

impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        // Through a JSON value, whose maps sort their keys: the order `--json` has always had.
        serde_json::json!({ "backlog": self.backlog, "makespan": self.makespan }).serialize(s)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines = Vec::new();
        if let Some(b) = &self.backlog {
            lines.push(format!(
                "extra DRAM (DUNE Fig. 6): input {} for {} s",
                dec_rate(b.input_bytes_per_sec),
                num(b.duration_secs)
            ));
            for o in &b.outputs {
                let line = if o.extra_dram_bytes > 0.0 {
                    format!(
                        "  output {} ({}): (input - output) x duration = {} ({})",
                        dec_rate(o.output_bytes_per_sec),
                        o.source,
                        dec_bytes(o.extra_dram_bytes),
                        human_bytes(o.extra_dram_bytes)
                    )
                } else {
                    format!(
                        "  output {} ({}): keeps up with the input, no extra DRAM",
                        dec_rate(o.output_bytes_per_sec),
                        o.source
                    )
                };
                lines.push(line);
                if let Some(d) = self.dram {
                    lines.push(match o.secs_until_full {
                        Some(t) => {
                            format!("    {} of DRAM is full after {} s", dec_bytes(d), num(t))
                        }
                        None => format!("    {} of DRAM never fills", dec_bytes(d)),
                    });
                }
            }
            if let Some(p) = &b.plot {
                lines.push(format!("  plot: {}", p.display()));
            }
        }
        if let Some(m) = &self.makespan {
            lines.push(format!(
                "makespan bound (neuroimaging Eq. 1): D = {}, R = {} ({}), W = {} ({})",
                dec_bytes(m.data_bytes),
                dec_rate(m.read.bytes_per_sec),
                m.read.source,
                dec_rate(m.write.bytes_per_sec),
                m.write.source
            ));
            lines.push(format!(
                "  M >= D/R + D/W = {} s + {} s = {} s",
                num(m.bound.read_secs),
                num(m.bound.write_secs),
                num(m.bound.bound_secs)
            ));
        }
        write!(f, "{}", lines.join("\n"))
    }
}

fn backlog(a: &Config, measure: &Measure) -> Result<BacklogReport> {
    let Some(input) = a.input else {
        return fail("bench model: the extra-DRAM model needs --input (e.g. 10GB/s)");
    };
    let Some(duration) = a.duration else {
        return fail("bench model: the extra-DRAM model needs --duration (e.g. 100s)");
    };
    let outputs: Vec<Rate> = match (&a.output, &a.output_path) {
        (Some(list), _) => {
            let mut v = Vec::new();
            for item in list.split(',') {
                let r =
                    model::parse_rate(item).map_err(|e| Error::Msg(format!("--output: {e}")))?;
                v.push(Rate {
                    bytes_per_sec: r,
                    source: "given".into(),
                });
            }
            v
        }
        (None, Some(dir)) => vec![measure.rate(dir, Workload::SeqWrite)?],
        (None, None) => {
            return fail(
                "bench model: the extra-DRAM model needs --output RATE or --output-path DIR",
            )
        }
    };
    let outputs: Vec<BacklogOutput> = outputs
        .into_iter()
        .map(|r| BacklogOutput {
            extra_dram_bytes: backlog_bytes(input, r.bytes_per_sec, duration),
            secs_until_full: a
                .dram
                .and_then(|d| model::secs_until_full(input, r.bytes_per_sec, d)),
            output_bytes_per_sec: r.bytes_per_sec,
            source: r.source,
        })
        .collect();
    if let Some(png) = &a.plot {
        let t_max = duration * 1.2;
        let lines: Vec<BacklogLine> = outputs
            .iter()
            .map(|o| BacklogLine {
                label: format!("output {}", dec_rate(o.output_bytes_per_sec)),
                points: model::backlog_series(input, o.output_bytes_per_sec, t_max, 60),
            })
            .collect();
        let title = format!("Extra DRAM for an input of {}", dec_rate(input));
        plot_backlog(png, &title, &lines, duration)
            .map_err(|e| Error::Msg(format!("--plot {}: {e}", png.display())))?;
    }
    Ok(BacklogReport {
        input_bytes_per_sec: input,
        duration_secs: duration,
        outputs,
        plot: a.plot.clone(),
    })
}

fn makespan(a: &Config, measure: &Measure) -> Result<MakespanReport> {
    let Some(d) = a.data_size else {
        return fail("bench model: the makespan bound needs --data-size (e.g. 76GB)");
    };
    let rate = |given: Option<f64>, w: Workload, opt: &str| -> Result<Rate> {
        match (given, &a.path) {
            (Some(r), _) => Ok(Rate {
                bytes_per_sec: r,
                source: "given".into(),
            }),
            (None, Some(dir)) => measure.rate(dir, w),
            (None, None) => fail(format!(
                "bench model: the makespan bound needs --{opt} or --path DIR to measure it"
            )),
        }
    };
    let read = rate(a.read_rate, Workload::SeqRead, "read-rate")?;
    let write = rate(a.write_rate, Workload::SeqWrite, "write-rate")?;
    Ok(MakespanReport {
        data_bytes: d,
        bound: makespan_bound_secs(d, read.bytes_per_sec, write.bytes_per_sec),
        read,
        write,
    })
}

/// How to measure a directory's bandwidth (also `bench pipeline`'s R and W).
pub(crate) struct Measure {
    pub(crate) duration: Duration,
    pub(crate) size: u64,
}

const MEASURE_BLOCK: usize = 1 << 20;
const MEASURE_REPEATS: usize = 3;

impl Measure {
    /// Sequential 1 MiB O_DIRECT reads or writes (writes: final fdatasync counted) on one
    /// file under `dir`, median of 3; buffered where O_DIRECT is refused.
    pub(crate) fn rate(&self, dir: &Path, workload: Workload) -> Result<Rate> {
        if !dir.is_dir() {
            return fail(format!("{}: not an existing directory", dir.display()));
        }
        let tmp = crate::bench_harness::temp_dir_in(dir)?;
        let err = |e: std::io::Error| Error::Msg(format!("measuring {}: {e}", dir.display()));
        let fs = layout::probe(tmp.path()).map_err(err)?;
        let direct = fs
            .direct_align
            .is_some_and(|a| (MEASURE_BLOCK as u64).is_multiple_of(a));
        let size = self.size / MEASURE_BLOCK as u64 * MEASURE_BLOCK as u64;
        if size == 0 {
            return fail("--measure-size must be at least 1 MiB");
        }
        eprintln!(
            "measuring {} {} bandwidth ...",
            dir.display(),
            workload.name()
        );
        let files = FileSet::create(tmp.path(), 1, size).map_err(err)?;
        let method = if direct {
            Method::Direct
        } else {
            Method::Write
        };
        let spec = RunSpec {
            method,
            workload,
            block: MEASURE_BLOCK,
            files: &files,
            warmup: Duration::from_millis(200),
            duration: self.duration,
            include_sync: true,
            iodepth: 1,
        };
        let mut runs = Vec::with_capacity(MEASURE_REPEATS);
        for _ in 0..MEASURE_REPEATS {
            runs.push(run_once(&spec).map_err(err)?.bytes_per_sec(MEASURE_BLOCK));
        }
        files.remove();
        let how = match (direct, workload.writes()) {
            (true, true) => "O_DIRECT 1 MiB sequential writes + fdatasync",
            (true, false) => "O_DIRECT 1 MiB sequential reads",
            (false, true) => "buffered 1 MiB sequential writes + fdatasync",
            (false, false) => "buffered 1 MiB sequential reads, cache dropped first",
        };
        Ok(Rate {
            bytes_per_sec: median(&runs).unwrap_or(0.0),
            source: format!(
                "measured on {}: {how}, median of {MEASURE_REPEATS}",
                dir.display()
            ),
        })
    }
}

/// About 4 significant digits, no trailing zeros: 880, 1.2, 0.125.
fn num(v: f64) -> String {
    let s = if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 10.0 {
        format!("{v:.2}")
    } else if v.abs() >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Decimal units, as in the papers: "880 GB", "1.2 GB", "512 MB".
fn dec_bytes(v: f64) -> String {
    const UNITS: [(f64, &str); 5] = [
        (1e15, "PB"),
        (1e12, "TB"),
        (1e9, "GB"),
        (1e6, "MB"),
        (1e3, "KB"),
    ];
    for (d, u) in UNITS {
        if v >= d {
            return format!("{} {u}", num(v / d));
        }
    }
    format!("{} B", num(v))
}

fn dec_rate(v: f64) -> String {
    format!("{}/s", dec_bytes(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_labels() {
        assert_eq!(dec_bytes(880e9), "880 GB");
        assert_eq!(dec_rate(1.2e9), "1.2 GB/s");
        assert_eq!(dec_bytes(512.0), "512 B");
        assert_eq!(num(190.0), "190");
        assert_eq!(num(0.125), "0.125");
    }
}
