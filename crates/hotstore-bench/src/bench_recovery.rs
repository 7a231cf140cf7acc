//! `hotstore bench recovery`: how fast an open rebuilds the index, from summaries (a store
//! closed cleanly, or whose segments were sealed before a crash) and by scanning every record
//! (summaries removed: the worst case, as for tails open at a crash).

use crate::bench_harness::{base_dir, temp_dir_in};
use crate::util::{human_bytes, human_count};
use crate::{Error, Result};
use hotstore::{Durability, FragmentKey, Store};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to measure (`hotstore bench recovery`'s options).
pub struct Config {
    /// File system to measure: the store goes in a fresh temporary directory under it (`None`:
    /// /dev/shm if present, else the temp dir).
    pub dir: Option<PathBuf>,
    /// Values to store (`--key-count`; `None`: 200 000).
    pub key_count: Option<u64>,
    /// Bytes per value (`--value-size`).
    pub value_size: u64,
    /// Segment size (`None`: the engine default).
    pub segment_size: Option<u64>,
}

#[derive(Serialize)]
struct Pass {
    mode: &'static str,
    open_secs: f64,
    records: u64,
    segments_from_summary: usize,
    segments_scanned: usize,
    /// Stored value bytes re-indexed per second of open.
    data_bytes_per_sec: f64,
    records_per_sec: f64,
}

/// The result of `bench recovery`: the one JSON object `--json` prints, and the text of
/// [`Display`](fmt::Display) otherwise.
#[derive(Serialize)]
pub struct Report {
    op: &'static str,
    dir: String,
    value_size: u64,
    records: u64,
    data_bytes: u64,
    passes: Vec<Pass>,
}

fn open_timed(dir: &Path, mode: &'static str, data_bytes: u64) -> Result<Pass> {
    let started = Instant::now();
    let store = Store::builder(dir).create_if_missing(false).open()?;
    let secs = started.elapsed().as_secs_f64();
    let r = store.recovery_report().clone();
    store.close()?;
    Ok(Pass {
        mode,
        open_secs: secs,
        records: r.records,
        segments_from_summary: r.segments_from_summary,
        segments_scanned: r.segments_scanned,
        data_bytes_per_sec: data_bytes as f64 / secs,
        records_per_sec: r.records as f64 / secs,
    })
}

/// Fills a fresh store under the base directory with `--key-count` values of `--value-size`
/// bytes, closes it, and times two opens: with summaries, and with the summaries removed.
pub fn run(cfg: &Config) -> Result<Report> {
    let base = &base_dir(cfg.dir.as_deref())?;
    let records = cfg.key_count.unwrap_or(200_000);
    let tmp = temp_dir_in(base)?;
    let value = vec![0x5au8; cfg.value_size as usize];
    {
        let mut b = Store::builder(tmp.path());
        if let Some(s) = cfg.segment_size {
            b = b.segment_size_bytes(usize::try_from(s).unwrap_or(usize::MAX));
        }
        let store = b.open()?;
        for e in 0..records {
            store.put(
                &FragmentKey::new(1, e, 0, 0).to_bytes(),
                &value,
                Durability::Memory,
            )?;
        }
        store.close()?;
    }
    let data_bytes = records * cfg.value_size;
    let mut passes = vec![open_timed(tmp.path(), "summaries", data_bytes)?];
    for entry in std::fs::read_dir(tmp.path()).map_err(|e| Error::Msg(e.to_string()))? {
        let path = entry.map_err(|e| Error::Msg(e.to_string()))?.path();
        if path.extension().is_some_and(|x| x == "sum") {
            std::fs::remove_file(&path).map_err(|e| Error::Msg(e.to_string()))?;
        }
    }
    passes.push(open_timed(tmp.path(), "scan", data_bytes)?);
    Ok(Report {
        op: "recovery",
        dir: base.display().to_string(),
        value_size: cfg.value_size,
        records,
        data_bytes,
        passes,
    })
}

impl fmt::Display for Report {
    /// The text `bench recovery` prints: the store, then one line per open.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store:  {} records of {} under {} ({} of values, page cache warm)",
            human_count(self.records as f64),
            human_bytes(self.value_size as f64),
            self.dir,
            human_bytes(self.data_bytes as f64)
        )?;
        for p in &self.passes {
            write!(
                f,
                "\n{:9}: open in {:.3} s: {} records/s, {}/s of stored data re-indexed ({} segments from summary, {} scanned)",
                p.mode,
                p.open_secs,
                human_count(p.records_per_sec),
                human_bytes(p.data_bytes_per_sec),
                p.segments_from_summary,
                p.segments_scanned
            )?;
        }
        Ok(())
    }
}
