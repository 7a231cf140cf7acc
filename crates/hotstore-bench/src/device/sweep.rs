//! Runs the grid of `bench device`: for each thread count a set of per-thread files is laid
//! out once, then every workload (reads first, while the files still hold their pattern),
//! method and block size is measured `repeat` times, and fio beside it with `--vs-fio`.

use super::fio::{self, FioJob};
use super::layout::{self, FileSet, FsInfo, ALIGN};
use super::methods::{Method, Workload};
use super::report::{PointResult, Report};
use super::workload::{run_once, RunSpec};
use super::Config;
use crate::util::human_bytes;
use crate::util::{exact_bytes, median};
use crate::{Error, Result};
use std::path::Path;

/// The (threads, block sizes) pairs to run. The full grid is every combination; the papers'
/// grid is request rate against every block size at the first thread count (DUNE Fig. 2), and
/// throughput against the other thread counts at 4 KiB and 1 MiB (Fig. 5; at the largest
/// block size if neither is selected).
pub(super) fn grid(blocks: &[usize], threads: &[usize], full: bool) -> Vec<(usize, Vec<usize>)> {
    let sweep: Vec<usize> = {
        let paper: Vec<usize> = blocks
            .iter()
            .copied()
            .filter(|b| *b == 4096 || *b == 1 << 20)
            .collect();
        if paper.is_empty() {
            blocks.iter().copied().max().into_iter().collect()
        } else {
            paper
        }
    };
    threads
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let b = if full || i == 0 {
                blocks.to_vec()
            } else {
                sweep.clone()
            };
            (t, b)
        })
        .collect()
}

/// Why a point cannot run: ("skipped" or "unavailable", reason).
fn skip_reason(
    method: Method,
    block: usize,
    file_bytes: u64,
    fs: &FsInfo,
    uring_error: Option<&str>,
) -> Option<(&'static str, String)> {
    if method.direct() {
        match fs.direct_align {
            None => {
                return Some((
                    "unavailable",
                    fs.direct_error
                        .clone()
                        .unwrap_or_else(|| "O_DIRECT refused".into()),
                ))
            }
            Some(a) if !(block as u64).is_multiple_of(a) => {
                return Some((
                    "skipped",
                    format!(
                        "O_DIRECT needs block sizes that are multiples of {a} B on this file \
                         system"
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if method == Method::Uring {
        if let Some(e) = uring_error {
            return Some(("unavailable", format!("io_uring setup failed: {e}")));
        }
    }
    if block as u64 > file_bytes {
        return Some((
            "skipped",
            format!(
                "block larger than the per-thread file ({})",
                human_bytes(file_bytes as f64)
            ),
        ));
    }
    None
}

/// Per-thread file size at `threads` threads: an equal share of the total, whole 4 KiB (0: the
/// total is too small for that many threads).
pub fn file_bytes(total: u64, threads: usize) -> u64 {
    total / threads as u64 / ALIGN as u64 * ALIGN as u64
}

/// Runs everything; the report lists every point, including skipped and failed ones.
pub(super) fn run(cfg: &Config) -> Result<Report> {
    let tmp = crate::bench_harness::temp_dir_in(&cfg.path)?;
    let dir = tmp.path();
    let fs = layout::probe(dir).map_err(|e| {
        Error::Msg(format!(
            "cannot create files under {}: {e}",
            cfg.path.display()
        ))
    })?;
    let fio_version = if cfg.vs_fio {
        Some(fio::check_installed()?)
    } else {
        None
    };
    let uring_error = if cfg.methods.contains(&Method::Uring) {
        uring_probe(cfg.iodepth)
    } else {
        None
    };

    let mut notes = Vec::new();
    if cfg.workloads.contains(&Workload::SeqRead) {
        for m in &cfg.methods {
            if let Err(why) = m.read_path() {
                notes.push(format!(
                    "seq-read: no separate `{}` read mode: {why}",
                    m.name()
                ));
            }
        }
    }
    if cfg.methods.contains(&Method::MmapNt) && !cfg!(target_arch = "x86_64") {
        notes.push("mmap-nt: no non-temporal stores on this architecture: plain copy".into());
    }
    if fs.memory {
        notes.push(format!(
            "{} is a memory file system ({}): the \"device\" is DRAM and fdatasync/msync do \
             nothing",
            cfg.path.display(),
            fs.fs_type
        ));
    }

    // Reads first: they need the pattern the layout wrote, which writes overwrite.
    let mut order = cfg.workloads.clone();
    order.sort();
    order.dedup();
    order.sort_by_key(|w| *w != Workload::SeqRead);

    let plan = grid(&cfg.blocks, &cfg.threads, cfg.full_grid);
    let total: usize = plan
        .iter()
        .map(|(_, blocks)| {
            order
                .iter()
                .map(|w| methods_for(cfg, *w).count() * blocks.len())
                .sum::<usize>()
        })
        .sum();

    let mut results = Vec::with_capacity(total);
    let mut done = 0;
    for (threads, blocks) in &plan {
        let threads = *threads;
        let fb = file_bytes(cfg.file_size_total, threads);
        let mut files: Option<FileSet> = None;
        for &workload in &order {
            for method in methods_for(cfg, workload) {
                for &block in blocks {
                    done += 1;
                    let mut p = PointResult {
                        method: method.name(),
                        workload: workload.name(),
                        block_size: block as u64,
                        threads,
                        status: "ok",
                        reason: None,
                        io: method.io(workload, cfg.iodepth),
                        bytes_per_sec: None,
                        iops: None,
                        includes_sync: cfg.include_sync && workload.writes(),
                        iodepth: (method == Method::Uring).then_some(cfg.iodepth),
                        runs_bytes_per_sec: Vec::new(),
                        verified: false,
                        fio_bytes_per_sec: None,
                        ratio: None,
                        fio_note: None,
                    };
                    let label = format!(
                        "[{done}/{total}] {} {} {} x{threads}",
                        workload.name(),
                        method.name(),
                        exact_bytes(block as u64)
                    );
                    if let Some((status, reason)) =
                        skip_reason(method, block, fb, &fs, uring_error.as_deref())
                    {
                        eprintln!("{label}: {status}: {reason}");
                        p.status = status;
                        p.reason = Some(reason);
                        p.includes_sync = false;
                        results.push(p);
                        continue;
                    }
                    if files.is_none() {
                        eprintln!(
                            "laying out {threads} file(s) of {} under {} ...",
                            human_bytes(fb as f64),
                            dir.display()
                        );
                        files = Some(FileSet::create(dir, threads, fb).map_err(|e| {
                            Error::Msg(format!(
                                "cannot lay out {threads} file(s) of {} under {}: {e} \
                                 (a smaller --file-size needs less space)",
                                human_bytes(fb as f64),
                                cfg.path.display()
                            ))
                        })?);
                    }
                    let Some(set) = files.as_ref() else {
                        continue;
                    };
                    measure(cfg, set, dir, method, workload, block, &mut p);
                    eprintln!("{label}: {}", progress(&p));
                    results.push(p);
                }
            }
        }
        if let Some(set) = files.take() {
            set.remove();
        }
    }

    let rank_w = |w: &str| cfg.workloads.iter().position(|x| x.name() == w);
    let rank_m = |m: &str| cfg.methods.iter().position(|x| x.name() == m);
    results.sort_by_key(|p| {
        (
            rank_w(p.workload),
            rank_m(p.method),
            p.block_size,
            p.threads,
        )
    });
    drop(tmp);
    Ok(Report {
        path: cfg.path.display().to_string(),
        fs,
        file_size_total: cfg.file_size_total,
        warmup_secs: cfg.warmup.as_secs_f64(),
        duration_secs: cfg.duration.as_secs_f64(),
        repeat: cfg.repeat,
        iodepth: cfg.iodepth,
        final_sync_counted: cfg.include_sync,
        fio_version,
        notes,
        results,
    })
}

/// The selected methods that apply to `workload` (reads: those with a read path).
fn methods_for(cfg: &Config, workload: Workload) -> impl Iterator<Item = Method> + '_ {
    cfg.methods
        .iter()
        .copied()
        .filter(move |m| workload.writes() || m.read_path().is_ok())
}

/// Measures one point (and fio beside it), filling in `p`; a failure becomes status "error".
fn measure(
    cfg: &Config,
    set: &FileSet,
    dir: &Path,
    method: Method,
    workload: Workload,
    block: usize,
    p: &mut PointResult,
) {
    let spec = RunSpec {
        method,
        workload,
        block,
        files: set,
        warmup: cfg.warmup,
        duration: cfg.duration,
        include_sync: cfg.include_sync,
        iodepth: cfg.iodepth,
    };
    for _ in 0..cfg.repeat {
        match run_once(&spec) {
            Ok(o) => p.runs_bytes_per_sec.push(o.bytes_per_sec(block)),
            Err(e) => {
                p.status = "error";
                p.reason = Some(e.to_string());
                return;
            }
        }
    }
    p.verified = true;
    p.bytes_per_sec = median(&p.runs_bytes_per_sec);
    p.iops = p.bytes_per_sec.map(|b| b / block as f64);
    if !cfg.vs_fio {
        return;
    }
    let job = FioJob {
        method,
        workload,
        block,
        threads: set.threads,
        file_bytes: set.file_bytes,
        dir,
        warmup: cfg.warmup,
        duration: cfg.duration,
        include_sync: cfg.include_sync,
        iodepth: cfg.iodepth,
    };
    let args = match fio::args(&job) {
        Ok(a) => a,
        Err(why) => {
            p.fio_note = Some(why.into());
            return;
        }
    };
    let mut fio_runs = Vec::with_capacity(cfg.repeat);
    for _ in 0..cfg.repeat {
        if let Err(e) = set.settle() {
            p.fio_note = Some(format!("cannot flush the files before fio: {e}"));
            return;
        }
        match fio::run(&args, !workload.writes()) {
            Ok(r) => fio_runs.push(r.bytes_per_sec),
            Err(e) => {
                p.fio_note = Some(e);
                return;
            }
        }
    }
    p.fio_bytes_per_sec = median(&fio_runs);
    p.ratio = match (p.bytes_per_sec, p.fio_bytes_per_sec) {
        (Some(a), Some(f)) if f > 0.0 => Some(a / f),
        _ => None,
    };
}

fn progress(p: &PointResult) -> String {
    if p.status != "ok" {
        return format!("{}: {}", p.status, p.reason.as_deref().unwrap_or(""));
    }
    let mut s = format!(
        "{}/s (median of {})",
        human_bytes(p.bytes_per_sec.unwrap_or(0.0)),
        p.runs_bytes_per_sec.len()
    );
    match (p.fio_bytes_per_sec, p.ratio, &p.fio_note) {
        (Some(f), Some(q), _) => {
            s += &format!(", fio {}/s, ratio {q:.2}", human_bytes(f));
        }
        (_, _, Some(n)) => s += &format!(", fio: {n}"),
        _ => {}
    }
    s
}

#[cfg(target_os = "linux")]
fn uring_probe(depth: usize) -> Option<String> {
    super::uring::probe(depth).err().map(|e| e.to_string())
}

#[cfg(not(target_os = "linux"))]
fn uring_probe(_depth: usize) -> Option<String> {
    Some("io_uring is Linux only".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn papers_grid_sweeps_threads_at_4k_and_1m() {
        let blocks = [256, 4096, 5568, 65536, 1 << 20];
        let g = grid(&blocks, &[1, 2, 4], false);
        assert_eq!(g[0], (1, blocks.to_vec()));
        assert_eq!(g[1], (2, vec![4096, 1 << 20]));
        assert_eq!(g[2], (4, vec![4096, 1 << 20]));
        let g = grid(&[256, 65536], &[1, 2], false);
        assert_eq!(g[1], (2, vec![65536]));
        let g = grid(&blocks, &[1, 2], true);
        assert_eq!(g[1], (2, blocks.to_vec()));
    }

    #[test]
    fn per_thread_files_are_whole_pages() {
        assert_eq!(file_bytes(1 << 30, 4), 256 << 20);
        assert_eq!(file_bytes(1 << 30, 3), 357_912_576);
        assert_eq!(file_bytes(4096, 2), 0);
    }

    #[test]
    fn direct_skips_unaligned_blocks() {
        let fs = FsInfo {
            fs_type: "ext4".into(),
            memory: false,
            direct_align: Some(512),
            direct_error: None,
            map_sync: false,
        };
        let r = skip_reason(Method::Direct, 256, 1 << 20, &fs, None).unwrap();
        assert_eq!(r.0, "skipped");
        assert!(r.1.contains("512"));
        assert!(skip_reason(Method::Direct, 4096, 1 << 20, &fs, None).is_none());
        assert!(skip_reason(Method::Write, 256, 1 << 20, &fs, None).is_none());
        let r = skip_reason(Method::Uring, 4096, 1 << 20, &fs, Some("EPERM")).unwrap();
        assert_eq!(r.0, "unavailable");
        let r = skip_reason(Method::Write, 1 << 21, 1 << 20, &fs, None).unwrap();
        assert_eq!(r.0, "skipped");
    }
}
