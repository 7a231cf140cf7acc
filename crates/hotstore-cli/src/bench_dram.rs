//! `hotstore bench dram`: the DRAM the engine keeps per live key (index, and the event table
//! when events are tracked), measured as the growth of the process's anonymous memory
//! (`RssAnon`) while a fresh store on a memory file system takes `--keys` 16-byte DAQ keys of
//! 100 B values. The values live in the store's mapped files (`RssShmem`/`RssFile`), which are
//! not counted: they are the data, not the cost of indexing it. Three figures: puts with no
//! event use, puts with events tracked, and the same store reopened (the index bulk-built).

use crate::bench_harness::{key, temp_dir_in};
use crate::util::{fail, CliResult, Out};
use hotstore::{Durability, EventPolicy, Store};
use hotstore_bench::util::human_bytes;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Target of the design brief: bytes of DRAM per live 16-byte-key entry.
pub const TARGET_BYTES_PER_KEY: f64 = 64.0;

/// Options of `bench dram`.
#[derive(clap::Args)]
pub struct DramArgs {
    /// Memory file system to put the store on (values must not count as DRAM).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Live keys to write.
    #[arg(long, default_value_t = 10_000_000)]
    keys: u64,
    /// Fragments per event (keys sharing an event prefix).
    #[arg(long, default_value_t = 1)]
    fragments_per_event: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// (Internal) open the store in this directory, print the RssAnon growth, exit: the
    /// reopen is measured in a fresh process, where no freed memory can be reused.
    #[arg(long, hide = true)]
    measure_open: Option<PathBuf>,
}

#[derive(Serialize)]
struct Figure {
    case: &'static str,
    keys: u64,
    rss_anon_bytes: u64,
    bytes_per_key: f64,
}

#[derive(Serialize)]
struct Report {
    dir: PathBuf,
    keys: u64,
    fragments_per_event: u64,
    target_bytes_per_key: f64,
    figures: Vec<Figure>,
}

/// Anonymous resident memory of this process (bytes), from /proc/self/status, after the
/// allocator has given back what it holds free (transient buffers are not the index's cost).
fn rss_anon() -> CliResult<u64> {
    // Safety: a plain call into the process's allocator (mimalloc, see main.rs).
    unsafe { libmimalloc_sys::mi_collect(true) };
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| crate::util::CliError::Msg(format!("cannot read /proc/self/status: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| crate::util::CliError::Msg("no RssAnon in /proc/self/status".into()))
}

fn fill(s: &Store, keys: u64, per_event: u64, out: &mut Out, json: bool) -> CliResult<()> {
    let value = [0x5au8; 100];
    let mut last = Instant::now();
    for n in 0..keys {
        let (event, det) = (n / per_event, n % per_event);
        let mut k = key(0, event);
        k[12..14].copy_from_slice(&(det as u16).to_be_bytes());
        s.put(&k, &value, Durability::Memory)?;
        if !json && last.elapsed().as_secs() >= 1 {
            last = Instant::now();
            out.line(format_args!("  {n} of {keys} keys ..."))?;
            out.flush()?;
        }
    }
    Ok(())
}

fn measure(
    base: &Path,
    a: &DramArgs,
    events: bool,
    out: &mut Out,
) -> CliResult<(u64, u64, hotstore_bench::scratch::ScratchDir)> {
    let dir = temp_dir_in(base)?;
    let before = rss_anon()?;
    let s = Store::builder(dir.path()).open()?;
    if events {
        s.set_event_policy(EventPolicy::default())?;
    }
    fill(&s, a.keys, a.fragments_per_event, out, a.json)?;
    let grown = rss_anon()?.saturating_sub(before);
    s.close()?;
    let exe = std::env::current_exe()
        .map_err(|e| crate::util::CliError::Msg(format!("cannot find this program: {e}")))?;
    let child = std::process::Command::new(exe)
        .args(["bench", "dram", "--measure-open"])
        .arg(dir.path())
        .output()
        .map_err(|e| crate::util::CliError::Msg(format!("cannot run the reopen: {e}")))?;
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
    if entries != a.keys {
        return fail(format!(
            "the reopened store holds {entries} keys, not {}",
            a.keys
        ));
    }
    Ok((grown, reopened, dir))
}

/// `--measure-open DIR`: prints "<entries> <RssAnon growth>" of opening the store.
fn measure_open(dir: &Path) -> CliResult<()> {
    let before = rss_anon()?;
    let s = Store::builder(dir).create_if_missing(false).open()?;
    let grown = rss_anon()?.saturating_sub(before);
    let entries = s.stats().entries;
    s.close()?;
    let mut out = Out::new();
    out.line(format_args!("{entries} {grown}"))?;
    out.flush()
}

/// Runs `bench dram`.
pub fn run(a: &DramArgs) -> CliResult<()> {
    if let Some(dir) = &a.measure_open {
        return measure_open(dir);
    }
    if a.keys == 0 || a.fragments_per_event == 0 || a.fragments_per_event > u64::from(u16::MAX) {
        return fail("--keys must be at least 1 and --fragments-per-event 1 to 65535");
    }
    if !a.dir.is_dir() {
        return fail(format!("{} is not a directory", a.dir.display()));
    }
    if !hotstore_bench::limits::is_memory_fs(&a.dir) {
        return fail(format!(
            "{} is not a memory file system: the values would be read back into the page cache \
             and blur the figure (use /dev/shm)",
            a.dir.display()
        ));
    }
    let mut out = Out::new();
    let mut figures = Vec::new();
    for (events, case) in [
        (false, "puts, no event use"),
        (true, "puts, events tracked"),
    ] {
        if !a.json {
            out.line(format_args!("{case}: {} keys ...", a.keys))?;
        }
        let (grown, reopened, _dir) = measure(&a.dir, a, events, &mut out)?;
        figures.push(Figure {
            case,
            keys: a.keys,
            rss_anon_bytes: grown,
            bytes_per_key: grown as f64 / a.keys as f64,
        });
        if !events {
            figures.push(Figure {
                case: "reopened (index bulk-built)",
                keys: a.keys,
                rss_anon_bytes: reopened,
                bytes_per_key: reopened as f64 / a.keys as f64,
            });
        }
    }
    let r = Report {
        dir: a.dir.clone(),
        keys: a.keys,
        fragments_per_event: a.fragments_per_event,
        target_bytes_per_key: TARGET_BYTES_PER_KEY,
        figures,
    };
    if a.json {
        out.line(serde_json::to_string(&r)?)?;
    } else {
        out.line(format_args!(
            "DRAM per live key (RssAnon growth; values in mapped files not counted), {} keys of 100 B, {} fragment(s) per event:",
            r.keys, r.fragments_per_event
        ))?;
        for f in &r.figures {
            out.line(format_args!(
                "  {:<30} {:>7.1} B/key ({} in all)   target {TARGET_BYTES_PER_KEY} B",
                f.case,
                f.bytes_per_key,
                human_bytes(f.rss_anon_bytes as f64)
            ))?;
        }
    }
    out.flush()
}
