//! `hotstore compact`: relocates the live records of every segment with dead space, offline,
//! so the files those segments held are freed; a progress line on stderr while it runs and a
//! summary of the store before and after.

use crate::util::{CliResult, Out};
use hotstore::{Stats, Store};
use hotstore_bench::util::human_bytes;
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// On a terminal the progress line is redrawn at most this often.
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Elsewhere (a log file, a pipe) one line is written at most this often.
const LINE_EVERY: Duration = Duration::from_secs(1);

/// The store's size at one moment.
#[derive(Serialize)]
struct Size {
    /// Segments in use.
    segments: usize,
    /// Files in the free and ready pools (held for reuse, counted in `file_bytes`).
    pooled_files: usize,
    file_bytes: u64,
    live_bytes: u64,
    dead_bytes: u64,
}

impl Size {
    fn of(s: &Stats) -> Self {
        Size {
            segments: s.segments,
            pooled_files: s
                .tiers
                .iter()
                .map(|t| t.segments_free + t.segments_ready)
                .sum(),
            file_bytes: s.file_bytes,
            live_bytes: s.live_bytes,
            dead_bytes: s.dead_bytes,
        }
    }
}

/// What `compact` did: the JSON object `--json` prints.
#[derive(Serialize)]
struct Summary<'a> {
    dir: &'a Path,
    before: Size,
    after: Size,
    relocated_bytes: u64,
    relocated_records: u64,
    /// Relocated bytes per byte of dead records reclaimed: what the compaction cost.
    moved_per_reclaimed_byte: Option<f64>,
    /// `Stats::write_amplification` of this session: `None`, since an offline compaction has
    /// no user writes to divide by.
    write_amplification: Option<f64>,
    duration_secs: f64,
}

/// Prints progress to stderr: redrawn in place on a terminal, a line per second otherwise.
struct Progress {
    tty: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    fn update(&mut self, moved: u64, dead: u64) {
        let every = if self.tty { REDRAW_EVERY } else { LINE_EVERY };
        if self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let line = format!(
            "compact: {} moved, {} dead left",
            human_bytes(moved as f64),
            human_bytes(dead as f64)
        );
        let mut err = std::io::stderr().lock();
        // Progress is a courtesy: a closed stderr must not stop the compaction.
        let _ = if self.tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        self.drawn = true;
    }

    fn finish(&mut self) {
        if self.tty && self.drawn {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// On SIGINT or SIGTERM, says that the store is consistent before the process ends (found by
/// a new-user review: Ctrl-C ended a compaction with only its progress line). Every record
/// moves crash-safely (design.md, "Relocation"), so nothing needs undoing.
fn say_what_an_interruption_leaves(dir: &Path) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return; // the default action still stops the process; only the message is lost
    };
    let dir = dir.display().to_string();
    let _ = std::thread::Builder::new()
        .name("compact-signal".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "\ncompact: interrupted; the store in {dir} is consistent (records moved so \
                     far are in place, the others where they were): run `hotstore compact` \
                     again to continue"
                );
                std::process::exit(128 + sig);
            }
        });
}

/// Opens the store in `dir` (never creating one), compacts it, closes it and prints a summary.
pub fn run(dir: &Path, json: bool) -> CliResult<()> {
    let store = Store::builder(dir).create_if_missing(false).open()?;
    say_what_an_interruption_leaves(dir);
    let before = store.stats();
    let started = Instant::now();
    let progress = Arc::new(Mutex::new(Progress {
        tty: std::io::stderr().is_terminal(),
        last: None,
        drawn: false,
    }));
    let p = progress.clone();
    let result = store.compact(move |moved, dead| {
        if let Ok(mut p) = p.lock() {
            p.update(moved, dead);
        }
    });
    if let Ok(mut p) = progress.lock() {
        p.finish();
    }
    let moved = result?;
    let after = store.stats();
    // Closing persists the moved records and frees the emptied files; report after it.
    store.close()?;
    let secs = started.elapsed().as_secs_f64();
    let reopened = Store::builder(dir).create_if_missing(false).open()?;
    let closed = reopened.stats();
    reopened.close()?;
    let reclaimed = before.dead_bytes.saturating_sub(closed.dead_bytes);
    let summary = Summary {
        dir,
        before: Size::of(&before),
        after: Size::of(&closed),
        relocated_bytes: moved,
        relocated_records: after.relocation.records,
        moved_per_reclaimed_byte: (reclaimed > 0).then(|| moved as f64 / reclaimed as f64),
        write_amplification: (after.written_bytes > 0).then(|| after.write_amplification()),
        duration_secs: secs,
    };
    let mut out = Out::new();
    if json {
        out.line(serde_json::to_string(&summary)?)?;
    } else {
        print_human(&mut out, &summary)?;
    }
    out.flush()
}

fn print_human(out: &mut Out, s: &Summary<'_>) -> CliResult<()> {
    let size = |z: &Size| {
        format!(
            "{} segments in use, {} pooled files, files {}, live {}, dead {}",
            z.segments,
            z.pooled_files,
            human_bytes(z.file_bytes as f64),
            human_bytes(z.live_bytes as f64),
            human_bytes(z.dead_bytes as f64)
        )
    };
    out.line(format_args!("store      {}", s.dir.display()))?;
    out.line(format_args!("before     {}", size(&s.before)))?;
    out.line(format_args!("after      {}", size(&s.after)))?;
    out.line(format_args!(
        "relocated  {} records, {}",
        s.relocated_records,
        human_bytes(s.relocated_bytes as f64)
    ))?;
    // Fix (found by a crash campaign): it said the files were "kept on disk in the engine's
    // pool" when they had been deleted; the pool keeps only the reserve's files.
    out.line(format_args!(
        "freed      {} segments, {} of dead records; {} of segment files given back to the file \
         system, {} pooled file(s) kept for reuse",
        s.before.segments.saturating_sub(s.after.segments),
        human_bytes(s.before.dead_bytes.saturating_sub(s.after.dead_bytes) as f64),
        human_bytes(s.before.file_bytes.saturating_sub(s.after.file_bytes) as f64),
        s.after.pooled_files
    ))?;
    match s.moved_per_reclaimed_byte {
        Some(x) => out.line(format_args!(
            "cost       {x:.2} bytes moved per byte of dead records reclaimed"
        ))?,
        None => out.line("cost       no dead record was reclaimed")?,
    }
    match s.write_amplification {
        Some(wa) => out.line(format_args!(
            "write amplification {wa:.2} (bytes written per user byte since open)"
        ))?,
        None => out.line(
            "write amplification n/a: no user writes in this session (only relocation writes)",
        )?,
    }
    out.line(format_args!("time       {:.2} s", s.duration_secs))
}
