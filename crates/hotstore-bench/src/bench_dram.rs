//! `hotstore bench dram`: the DRAM the engine keeps per live key (index, and the event table
//! when events are tracked), measured as the growth of the process's anonymous memory
//! (`RssAnon`) while a fresh store on a memory file system takes `--keys` 16-byte DAQ keys of
//! 100 B values. The values live in the store's mapped files (`RssShmem`/`RssFile`), which are
//! not counted: they are the data, not the cost of indexing it. Three figures: puts with no
//! event use, puts with events tracked, and the same store reopened (the index bulk-built, in a
//! process of its own: see [`Config::reopen`] and [`measure_open`]).

use crate::bench_harness::{key, temp_dir_in};
use crate::scratch::ScratchDir;
use crate::util::human_bytes;
use crate::{fail, Error, Result};
use hotstore::{Durability, EventPolicy, Store};
use serde::Serialize;
use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Target of the design brief: bytes of DRAM per live 16-byte-key entry.
pub const TARGET_BYTES_PER_KEY: f64 = 64.0;

/// What to measure (`hotstore bench dram`'s options).
pub struct Config {
    /// Memory file system to put the store on (values must not count as DRAM).
    pub dir: PathBuf,
    /// Live keys to write.
    pub keys: u64,
    /// Fragments per event (keys sharing an event prefix).
    pub fragments_per_event: u64,
    /// The program and arguments that measure the reopen in a fresh process, where no freed
    /// memory can be reused: run with the store directory appended, it must call
    /// [`measure_open`] and print `<entries> <RssAnon growth>` (`hotstore bench dram
    /// --measure-open DIR`).
    pub reopen: Vec<OsString>,
}

#[derive(Serialize)]
struct Figure {
    case: &'static str,
    keys: u64,
    rss_anon_bytes: u64,
    bytes_per_key: f64,
}

/// The result of `bench dram`: the one JSON object `--json` prints, and the text of
/// [`Display`](fmt::Display) otherwise.
#[derive(Serialize)]
pub struct Report {
    dir: PathBuf,
    keys: u64,
    fragments_per_event: u64,
    target_bytes_per_key: f64,
    figures: Vec<Figure>,
}

/// Anonymous resident memory of this process (bytes), from /proc/self/status, after the
/// allocator has given back what it holds free (transient buffers are not the index's cost).
fn rss_anon() -> Result<u64> {
    // Safety: a plain call into mimalloc, the `hotstore` binary's allocator (its main.rs); in a
    // process that allocates otherwise it has nothing to collect.
    unsafe { libmimalloc_sys::mi_collect(true) };
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Error::Msg(format!("cannot read /proc/self/status: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| Error::Msg("no RssAnon in /proc/self/status".into()))
}

fn fill(s: &Store, keys: u64, per_event: u64, progress: &mut dyn Write) -> Result<()> {
    let value = [0x5au8; 100];
    let mut last = Instant::now();
    for n in 0..keys {
        let (event, det) = (n / per_event, n % per_event);
        let mut k = key(0, event);
        k[12..14].copy_from_slice(&(det as u16).to_be_bytes());
        s.put(&k, &value, Durability::Memory)?;
        if last.elapsed().as_secs() >= 1 {
            last = Instant::now();
            writeln!(progress, "  {n} of {keys} keys ...").map_err(Error::Output)?;
            progress.flush().map_err(Error::Output)?;
        }
    }
    Ok(())
}

fn measure(cfg: &Config, events: bool, progress: &mut dyn Write) -> Result<(u64, u64, ScratchDir)> {
    let dir = temp_dir_in(&cfg.dir)?;
    let before = rss_anon()?;
    let s = Store::builder(dir.path()).open()?;
    if events {
        s.set_event_policy(EventPolicy::default())?;
    }
    fill(&s, cfg.keys, cfg.fragments_per_event, progress)?;
    let grown = rss_anon()?.saturating_sub(before);
    s.close()?;
    let Some((program, args)) = cfg.reopen.split_first() else {
        return fail("bench dram: no command to measure the reopen with");
    };
    let child = std::process::Command::new(program)
        .args(args)
        .arg(dir.path())
        .output()
        .map_err(|e| Error::Msg(format!("cannot run the reopen: {e}")))?;
    let text = String::from_utf8_lossy(&child.stdout);
    let mut words = text.split_whitespace();
    let (Some(entries), Some(reopened)) = (
        words.next().and_then(|w| w.parse::<u64>().ok()),
        words.next().and_then(|w| w.parse::<u64>().ok()),
    ) else {
        return fail(format!(
            "the reopen failed: {}",
            String::from_utf8_lossy(&child.stderr).trim()
        ));
    };
    if entries != cfg.keys {
        return fail(format!(
            "the reopened store holds {entries} keys, not {}",
            cfg.keys
        ));
    }
    Ok((grown, reopened, dir))
}

/// Opens the store in `dir` and returns its entries and the growth of this process's
/// anonymous memory (bytes) the open caused: the reopen figure, measured by a fresh process
/// ([`Config::reopen`]).
pub fn measure_open(dir: &Path) -> Result<(u64, u64)> {
    let before = rss_anon()?;
    let s = Store::builder(dir).create_if_missing(false).open()?;
    let grown = rss_anon()?.saturating_sub(before);
    let entries = s.stats().entries;
    s.close()?;
    Ok((entries, grown))
}

/// Runs `bench dram`, writing what it is doing to `progress` (`<case>: <keys> keys ...`, and
/// a line a second while it fills).
pub fn run(cfg: &Config, progress: &mut dyn Write) -> Result<Report> {
    if cfg.keys == 0
        || cfg.fragments_per_event == 0
        || cfg.fragments_per_event > u64::from(u16::MAX)
    {
        return fail("--keys must be at least 1 and --fragments-per-event 1 to 65535");
    }
    if !cfg.dir.is_dir() {
        return fail(format!("{} is not a directory", cfg.dir.display()));
    }
    if !crate::limits::is_memory_fs(&cfg.dir) {
        return fail(format!(
            "{} is not a memory file system: the values would be read back into the page cache \
             and blur the figure (use /dev/shm)",
            cfg.dir.display()
        ));
    }
    let mut figures = Vec::new();
    for (events, case) in [
        (false, "puts, no event use"),
        (true, "puts, events tracked"),
    ] {
        writeln!(progress, "{case}: {} keys ...", cfg.keys).map_err(Error::Output)?;
        let (grown, reopened, _dir) = measure(cfg, events, progress)?;
        figures.push(Figure {
            case,
            keys: cfg.keys,
            rss_anon_bytes: grown,
            bytes_per_key: grown as f64 / cfg.keys as f64,
        });
        if !events {
            figures.push(Figure {
                case: "reopened (index bulk-built)",
                keys: cfg.keys,
                rss_anon_bytes: reopened,
                bytes_per_key: reopened as f64 / cfg.keys as f64,
            });
        }
    }
    Ok(Report {
        dir: cfg.dir.clone(),
        keys: cfg.keys,
        fragments_per_event: cfg.fragments_per_event,
        target_bytes_per_key: TARGET_BYTES_PER_KEY,
        figures,
    })
}

impl fmt::Display for Report {
    /// The text `bench dram` prints: one line per figure, beside the target.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DRAM per live key (RssAnon growth; values in mapped files not counted), {} keys of 100 B, {} fragment(s) per event:",
            self.keys, self.fragments_per_event
        )?;
        for fig in &self.figures {
            write!(
                f,
                "\n  {:<30} {:>7.1} B/key ({} in all)   target {TARGET_BYTES_PER_KEY} B",
                fig.case,
                fig.bytes_per_key,
                human_bytes(fig.rss_anon_bytes as f64)
            )?;
        }
        Ok(())
    }
}
