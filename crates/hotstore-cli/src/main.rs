//! `hotstore`: the command-line tool around the hotstore engine and its libraries.
//!
//! The tool parses arguments, calls the libraries and prints what they return: the engine
//! (`hotstore`), the server, the recorder, the benchmarks (`hotstore_bench`) and the crash-test
//! workload (`hotstore_crashtest`). This file holds the top-level command and the options of
//! `inspect`, `verify`, `dump` and `compact`, and maps results to exit statuses; every other
//! subcommand's module holds its own options (their doc comments are the `--help` text).

/// The tool's allocator. The index grows by small B-tree nodes at millions of inserts a
/// second; with glibc's malloc a quarter of a 100 B put went to faulting in fresh heap pages
/// one at a time. mimalloc takes memory from the OS in large segments.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod cluster;
mod compact;
mod dump;
mod inspect;
mod minidaq;
mod record;
mod serve;
mod stress;
mod util;
mod verify;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hotstore::Durability;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use util::{CliError, CliResult, EXIT_ERROR};

/// Persistent hot storage for high-rate data acquisition: serve a store over the Redis
/// protocol (alone or as a cluster), record detector streams on a trigger, run the DAQ
/// benchmark (minidaq); inspect, verify, dump, compact, stress-test and benchmark a store.
///
/// A store is a directory holding `hotstore.meta`, a lock file and segment files
/// (`seg-NNNNNN.hss`). Sizes: 100, 10K or 10KiB (10240), 10KB (10000), and so on for M and G:
/// KB, MB, GB are powers of 1000 everywhere, as in rates and `bench model`.
///
/// Exit status: 0 on success; 1 if `verify` found damage, `minidaq` an integrity error or
/// `cluster check` an unhealthy cluster; 2 on any error (bad arguments, no
/// store, store locked by another process, I/O error). Errors are printed as `error: <message>`
/// on stderr.
#[derive(Parser)]
#[command(name = "hotstore", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Inspect(InspectArgs),
    Verify(VerifyArgs),
    Dump(DumpArgs),
    Compact(CompactArgs),
    Stress(stress::StressArgs),
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    Minidaq(minidaq::MinidaqArgs),
    Serve(serve::ServeArgs),
    Record(record::RecordArgs),
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
}

/// Show what is in a store: layout, tiers and what survives a power cut, sizes, recovery.
///
/// Opens the store (never creates one; fails if another process has it open), which runs
/// recovery exactly as an application would, then prints the key layout, each tier with its
/// persistence domain and a sentence saying what survives a crash and a power cut, capacity,
/// segments (in use, free, ready), live entries, live and dead bytes, and the recovery report:
/// segments loaded from their summary or scanned, torn tails cut (expected after a crash) and
/// damaged ranges skipped.
///
/// Note: opening is not read-only: recovery writes missing segment summaries, and the engine
/// may pre-create segment files while the store is open.
///
/// With `--salvage`, a store that recovery refuses (damage followed by intact records, e.g.
/// after a power cut or bit rot, or segment files missing from the store's list) is opened
/// anyway: every intact record is kept, the damage is skipped and missing files are dropped
/// from the list, and the report names each (SKIPPED, MISSING). Done once: the store is then
/// left so that later opens, by any tool or server, are clean.
#[derive(Args)]
struct InspectArgs {
    /// Store directory.
    dir: PathBuf,
    /// Open even a store that recovery refuses, keeping every intact record and skipping
    /// (and reporting) the damage. Check the damage first with `hotstore verify`.
    #[arg(long)]
    salvage: bool,
    /// Print one JSON object `{"dir", "stats", "recovery"}` instead of text.
    #[arg(long)]
    json: bool,
}

/// Check every record of every segment file against its checksum.
///
/// Reads every segment file of every tier without trusting the summaries and without opening
/// the store for writing (it may be open in another process). Prints how many records and
/// bytes were checked and every damaged range as `file:offset (+len bytes): what`. Torn tails
/// (an interrupted last write, normal after a crash) are listed as notes, not damage.
/// Pre-allocated segment files that were never written (all zero) are counted, not damage.
///
/// Exit status: 0 if intact, 1 if damage was found, 2 if verification could not run.
#[derive(Args)]
struct VerifyArgs {
    /// Store directory.
    dir: PathBuf,
    /// Print one JSON object (the engine's verify report plus `dir`, `intact` and
    /// `untouched_files`) instead of text.
    #[arg(long)]
    json: bool,
}

/// List every live key with its value length and crc32c, sorted by key.
///
/// Opens the store (never creates one), reads every value (checking record checksums) and
/// prints one line per live key in byte order of the keys: `<key-hex> <len> <crc32c>` or, with
/// `--json`, `{"key":"<hex>","len":N,"crc32c":N}` (crc32c is Castagnoli, as an unsigned
/// decimal).
///
/// With `--cut FILE` it lists instead the intact records of a `.cut` file, where recovery
/// keeps what it cut from a segment after a power cut (`inspect` names them), in file order:
/// `<offset> <kind> <key-hex> <len> <crc32c> <lsn> <persisted|->`, or with `--json` one object
/// per record with its value in hex, to put again by hand what was cut.
#[derive(Args)]
struct DumpArgs {
    /// Store directory.
    #[arg(required_unless_present = "cut")]
    dir: Option<PathBuf>,
    /// A `.cut` file to list instead of a store (read only; the store need not be closed).
    #[arg(long, value_name = "FILE", conflicts_with = "dir")]
    cut: Option<PathBuf>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Free the dead space of a store by moving its live records (offline compaction).
///
/// Opens the store (never creates one), relocates the live records of every segment that
/// holds dead records, so those segments are freed, closes it and prints the store's segments,
/// pooled files and file bytes before and after, the bytes and records moved, what each
/// reclaimed byte cost, and the time. Freed segment files beyond the reserve and a minimum
/// stock are deleted, so the files on disk shrink. Progress (bytes moved so far, dead bytes
/// left) goes to stderr: redrawn in place on a terminal, one line a second otherwise.
///
/// Offline: it takes the store's lock like any open, so it fails with "open in another
/// process" while a server, a recorder or another tool has the store open. An open store
/// does the same work itself when it runs short of space (relocation), and its owner can call
/// `Store::compact` in the library; this command is for a store at rest (before archiving it,
/// or to turn its dead space into room for later writes).
#[derive(Args)]
struct CompactArgs {
    /// Store directory.
    dir: PathBuf,
    /// Print one JSON object (`dir`, `before` and `after` with `segments`, `pooled_files`,
    /// `file_bytes`, `live_bytes`, `dead_bytes`; `relocated_bytes`, `relocated_records`,
    /// `moved_per_reclaimed_byte`, `write_amplification`, `duration_secs`) instead of text.
    #[arg(long)]
    json: bool,
}

/// Durability of each write.
#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    /// Acknowledged once in the store's memory: survives a process crash, not a power cut.
    Memory,
    /// Acknowledged once on the tier's persistence domain: survives a power cut on a real device.
    Persisted,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Memory => Durability::Memory,
            DurabilityArg::Persisted => Durability::Persisted,
        }
    }
}

fn run(cli: Cli) -> CliResult<ExitCode> {
    match cli.command {
        Command::Inspect(a) => inspect::run(&a.dir, a.json, a.salvage)?,
        Command::Verify(a) => return verify::run(&a.dir, a.json),
        Command::Dump(a) => match (&a.cut, &a.dir) {
            (Some(cut), _) => dump::run_cut(cut, a.json)?,
            (None, Some(dir)) => dump::run(dir, a.json)?,
            (None, None) => unreachable!("clap requires the store directory without --cut"),
        },
        Command::Compact(a) => compact::run(&a.dir, a.json)?,
        Command::Stress(a) => stress::run(a)?,
        Command::Serve(a) => serve::run(a)?,
        Command::Minidaq(a) => return minidaq::run(a),
        Command::Record(a) => return record::run(a),
        Command::Bench(b) => return bench::run(b),
        Command::Cluster(c) => return cluster::run(c),
    }
    Ok(ExitCode::SUCCESS)
}

impl Command {
    /// Whether the command serves network clients (`serve`, `record --serve-port`).
    fn serves_network(&self) -> bool {
        match self {
            Command::Serve(_) => true,
            Command::Record(a) => a.serves_network(),
            _ => false,
        }
    }
}

fn main() -> ExitCode {
    // SIGPIPE: a command-line tool ends quietly when the reader of its output goes away
    // (`hotstore record verify DIR | head -1`), like `cat`; with Rust's ignored SIGPIPE every
    // `println!` would panic instead. Set before parsing, so `--help | head` is covered too.
    util::sigpipe_default();
    // Usage errors: clap prints `error: ...` and exits 2; --help and --version exit 0.
    let cli = Cli::parse();
    // A server must outlive its clients: a write to one that hung up has to fail with EPIPE
    // and close that connection only. So `serve` and `record --serve-port` ignore SIGPIPE while
    // the server runs (no socket exists yet here) and restore the default once it has stopped;
    // their stdout writes while it runs tolerate EPIPE. `record` installs handlers for SIGUSR1,
    // SIGINT and SIGTERM only, so this setting holds for it.
    let serves = cli.command.serves_network();
    if serves {
        util::sigpipe_ignore();
    }
    let result = run(cli);
    // A server keeps SIGPIPE ignored to the end. Fix (found by CI under load): it restored the
    // default here, and when its reader had gone before the start-up lines were written, the
    // bytes stdout still buffered were flushed at exit into the closed pipe: killed by SIGPIPE.
    match result {
        Ok(code) => code,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics if stderr is a closed pipe too.
            let _ = writeln!(std::io::stderr(), "error: {e}");
            if serves {
                util::sigpipe_default();
            }
            ExitCode::from(EXIT_ERROR)
        }
    }
}
