//! `hotstore`: the command-line tool around the hotstore engine.
//!
//! Each subcommand lives in its own module; this file holds the argument definitions (their
//! doc comments are the `--help` text) and maps results to exit statuses.

/// The tool's allocator. The index grows by small B-tree nodes at millions of inserts a
/// second; with glibc's malloc a quarter of a 100 B put went to faulting in fresh heap pages
/// one at a time. mimalloc takes memory from the OS in large segments.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod acklog;
mod bench;
mod bench_dram;
mod bench_harness;
mod bench_lmdb;
mod bench_recovery;
mod device;
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
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use util::{parse_secs, parse_size, parse_size_or_off, CliError, CliResult, EXIT_ERROR};

/// Persistent hot storage for high-rate data acquisition: inspect, verify, dump, stress-test
/// and benchmark a store.
///
/// A store is a directory holding `hotstore.meta`, a lock file and segment files
/// (`seg-NNNNNN.hss`). Sizes: 100, 10K or 10KiB (10240), 10KB (10000), and so on for M and G:
/// KB, MB, GB are powers of 1000 everywhere, as in rates and `bench model`.
///
/// Exit status: 0 on success; 1 if `verify` found damage; 2 on any error (bad arguments, no
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
    Stress(StressArgs),
    #[command(subcommand)]
    Bench(BenchCommand),
    Minidaq(MinidaqArgs),
    Serve(serve::ServeArgs),
    Record(record::RecordArgs),
}

/// Benchmarks: the engine's own throughput, and the storage device under it.
#[derive(Subcommand)]
enum BenchCommand {
    /// Embedded put throughput beside this machine's own limit (memcpy, or O_DIRECT on a disk).
    Put(BenchArgs),
    /// Embedded get throughput beside memcpy bandwidth, in key order or at random.
    Get(BenchArgs),
    /// Index rebuild at open: --key-count values of --value-size, from summaries and by scan.
    Recovery(RecoveryArgs),
    /// DRAM per live key (index and event table), from the process's anonymous memory.
    Dram(bench_dram::DramArgs),
    Device(device::DeviceArgs),
    Model(device::ModelArgs),
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
#[derive(Args)]
struct InspectArgs {
    /// Store directory.
    dir: PathBuf,
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
#[derive(Args)]
struct DumpArgs {
    /// Store directory.
    dir: PathBuf,
    /// One JSON object per line.
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

/// Random puts, overwrites and removals, each acknowledged one logged, for crash testing.
///
/// Opens the store (creating it if missing, recovering it after a crash) and runs THREADS
/// threads for DURATION seconds. Each thread writes new keys (16-byte fragment keys and longer
/// blob keys, tagged with a random per-run nonce), overwrites and removes keys it owns, with
/// value sizes log-uniform between 1 byte and --max-value (mostly small, some large). Keys the
/// ack log says are present from earlier runs, and stress keys in the store the log never
/// mentions (a put in flight, never acknowledged, when an earlier run was killed), are shared
/// out among the threads and reused, so a store can be killed and restarted any number of
/// times. When the store is full, a thread
/// removes the oldest quarter of its keys and continues.
///
/// After the store acknowledges an operation, one line is appended to the ack log with a
/// single write: `put <key-hex> <len> <crc32c>` or `del <key-hex>`. A supervisor may kill
/// the process at any moment (kill -9) and later check that the store holds, for every key,
/// what its last ack line says (each thread has at most one unacknowledged operation in
/// flight). An unfinished last line left by a kill is cut at the next start.
///
/// Values of 8 bytes or more start with a 64-bit little-endian seed followed by the
/// SplitMix64 stream of `seed ^ fnv1a64(key)`, so even an unacknowledged value can be
/// recognised as well-formed. Prints a summary (ops, bytes, ops/s) at the end.
#[derive(Args)]
struct StressArgs {
    /// Store directory (created if missing).
    dir: PathBuf,
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, value_parser = parse_secs, value_name = "SECS")]
    duration: f64,
    /// Acknowledgement log: appended to, created if missing; its keys are reused.
    #[arg(long, value_name = "FILE")]
    ack_log: PathBuf,
    /// Writer threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Seed of the random choices (default: random). The per-run key nonce is derived from it
    /// but never reuses one found in the ack log.
    #[arg(long)]
    seed: Option<u64>,
    /// Largest value, in bytes (1 B up to the engine's 256 MiB maximum).
    #[arg(long, default_value = "1MiB", value_parser = parse_size, value_name = "BYTES")]
    max_value: u64,
    /// Live keys each thread aims to hold: below it new puts dominate, above it removals.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    keys: usize,
    /// Segment file size for a new store (ignored for an existing one; the engine default is
    /// 64 MiB). 64 KiB ..= 2 GiB, a multiple of 4096.
    #[arg(long, value_parser = util::parse_segment_size, value_name = "BYTES")]
    segment_size: Option<u64>,
    /// Bytes of segment files the store may hold (stored; replaces an earlier capacity).
    /// Default: unbounded for a new store, unchanged for an existing one.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    capacity: Option<u64>,
    /// Durability of every write and removal.
    #[arg(long, value_enum, default_value = "persisted")]
    durability: DurabilityArg,
    /// Values at least this long go to a block tier by direct I/O (default: the engine's);
    /// `off` never.
    #[arg(long, value_parser = parse_size_or_off, value_name = "BYTES|off")]
    direct_io_min: Option<u64>,
}

/// Measure embedded put or get throughput beside this machine's own limit.
///
/// Creates a fresh store in a temporary directory under --dir (default /dev/shm if it exists,
/// else the system temp dir), runs the operation from THREADS threads for DURATION seconds
/// after a 0.3 s warm-up that is not counted, and removes the store afterwards.
///
/// put: each thread writes new 16-byte fragment keys (run = thread number, event increasing)
/// with one prefilled value. The store's capacity is bounded (see --capacity); when it is
/// full the run stops early and the figures cover the measured window until then (reported as
/// `stopped_full`). With --keep N each put also removes the thread's oldest key beyond N, a
/// steady state that reuses recycled segments and never fills. Each --repeat run uses a fresh
/// store.
///
/// get: first writes --key-count keys, then each thread reads them in sequential or random
/// order, zero-copy (`get_with`, touching the first byte), and then for another DURATION with
/// the copying `get`.
///
/// The limit is measured in the same run: for put, memcpy bandwidth with THREADS threads on a
/// memory file system, else O_DIRECT sequential write bandwidth of the device (1 MiB blocks);
/// for get, memcpy bandwidth. The ratio is value bytes per second divided by the limit.
/// With --repeat N, the median run (by ops/s) is reported; --json lists every run in `runs`.
#[derive(Args)]
struct BenchArgs {
    /// File system to measure: the store goes in a fresh temporary directory under it.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Value size in bytes.
    #[arg(long, default_value = "10KiB", value_parser = parse_size, value_name = "BYTES")]
    value_size: u64,
    /// Threads doing the operation.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Durability of the writes (put; for get, of the populating writes).
    #[arg(long, value_enum, default_value = "persisted")]
    durability: DurabilityArg,
    /// Measured seconds per run (fractions allowed), after the warm-up.
    #[arg(long, default_value = "3", value_parser = parse_secs, value_name = "SECS")]
    duration: f64,
    /// Print one JSON object: ops_per_sec, bytes_per_sec, limit_name, limit_bytes_per_sec,
    /// ratio, op, value_size, threads, durability, duration_secs (measured window), dir,
    /// domain, runs, and more.
    #[arg(long)]
    json: bool,
    /// get only: keys to populate (default: about 256 MiB of values, at most 1048576 keys).
    #[arg(long, value_name = "N")]
    key_count: Option<u64>,
    /// get only: key order.
    #[arg(long, value_enum, default_value = "seq")]
    order: bench::Order,
    /// Segment file size (default: the engine's, 64 MiB).
    #[arg(long, value_parser = util::parse_segment_size, value_name = "BYTES")]
    segment_size: Option<u64>,
    /// Store capacity. Default: half the file system's free space, and on a memory file
    /// system at most a quarter of the available RAM, so a long put run on /dev/shm stops at
    /// "store full" instead of exhausting memory.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    capacity: Option<u64>,
    /// Runs to take the median of.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    repeat: u16,
    /// put only: keys each thread keeps. 0 (default): keep every key and stop when the store
    /// is full, which on a fresh store measures writing into newly allocated files. N > 0:
    /// once a thread holds N keys, each put is followed by the removal of its oldest key (the
    /// DAQ steady state: readout writes, a consumer removes), so segments are recycled and
    /// reused and the run never fills the store; ops/s counts puts, removal cost included.
    #[arg(long, default_value_t = 0, value_name = "N")]
    keep: u64,
    /// Do not verify each record's checksum on reads (the engine verifies by default; for
    /// large values the checksum, not the copy, bounds `get`).
    #[arg(long)]
    no_verify_on_read: bool,
    /// Create and pre-fault segment files when the store is opened, before anything is timed
    /// (a DAQ buffer is allocated at start-up): BYTES of them, or without a value all of
    /// --capacity. Without it, writes into a fresh store also measure the kernel allocating
    /// and zeroing new file pages.
    #[arg(long, requires = "capacity", num_args = 0..=1, default_missing_value = "all",
          value_parser = util::parse_preallocate, value_name = "BYTES")]
    preallocate: Option<u64>,
    /// put only: track events, as a store does once a consumer claims or a policy is set. Every
    /// put is then accounted to its event under the default policy (one fragment per event:
    /// each put makes a READY event). Without it the store is used as a plain key-value store
    /// and its puts do no event work at all.
    #[arg(long)]
    events: bool,
    /// Values at least this long go to a block tier by direct I/O (O_DIRECT for their aligned
    /// interior). Default: the engine's (256 KiB); `off` never.
    #[arg(long, value_parser = parse_size_or_off, value_name = "BYTES|off")]
    direct_io_min: Option<u64>,
    /// Also measure a peer in the same run, alternating with hotstore's runs, and print both
    /// with their ratio: `lmdb` (put: 1000 puts per transaction and one per transaction; get:
    /// zero-copy reads; MDB_NOSYNC|MDB_WRITEMAP, one thread).
    #[arg(long, value_enum)]
    vs: Option<bench::Peer>,
}

/// Measure how fast an open rebuilds the index.
///
/// Fills a fresh store in a temporary directory under --dir with --key-count values of
/// --value-size bytes (16-byte fragment keys), closes it, and times two opens: from the
/// segment summaries (a clean close, or segments sealed before a crash) and by scanning every
/// record (summaries removed: the worst case). Prints records/s and value bytes/s of each.
#[derive(Args)]
struct RecoveryArgs {
    /// File system to measure: the store goes in a fresh temporary directory under it
    /// (default /dev/shm, else the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Value size in bytes.
    #[arg(long, default_value = "10KiB", value_parser = parse_size, value_name = "BYTES")]
    value_size: u64,
    /// Values to store (default 200000).
    #[arg(long, value_name = "N")]
    key_count: Option<u64>,
    /// Segment file size (default: the engine's, 64 MiB).
    #[arg(long, value_parser = util::parse_segment_size, value_name = "BYTES")]
    segment_size: Option<u64>,
    /// Print one JSON object (op, dir, value_size, records, data_bytes, passes with
    /// open_secs, records_per_sec, data_bytes_per_sec, segments_from_summary,
    /// segments_scanned).
    #[arg(long)]
    json: bool,
}

/// The DAQ benchmark: readout threads write events, collectors claim, check and acknowledge them.
///
/// Readout threads write events of --detectors fragments (keys run, event, detector, 0) into
/// the store's memory; the store's event policy expects --detectors fragments, so each event is
/// READY when its last fragment lands. Collector threads claim READY events (next_event),
/// check every fragment's pattern (derived from its key: a wrong, cut or damaged fragment is an
/// integrity error), and acknowledge it: Keep with probability --acceptance, else Remove.
///
/// fill-drain: readout fills (for --duration, --events, or until 90% of --capacity), then the
/// collectors drain everything (DAQDB Fig. 3). parallel: both at once (Fig. 4); readout waits
/// for space when the store is full.
///
/// Throughput is sampled every --sample-ms; the report gives the median, p1 and p99 of the
/// samples after --warmup, for readout (fragments and bytes per second) and collection
/// (fragments, bytes and events per second), beside the machine's write limit (memcpy on a
/// memory file system, O_DIRECT writes on a disk) and the ratio of readout bytes/s to it.
///
/// The store is a fresh, preallocated temporary one under /dev/shm (the temp dir where there
/// is none) unless --store is given. Exit status 1 if any integrity error was found.
#[derive(Args)]
struct MinidaqArgs {
    /// fill-drain (fill, then drain) or parallel (readout and collection at once).
    #[arg(long, value_enum, default_value = "parallel")]
    mode: minidaq::Mode,
    /// Readout threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=128))]
    readout_threads: u16,
    /// Collector threads (0 only in parallel mode: readout alone, until the store is full).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(0..=128))]
    collector_threads: u16,
    /// Fragments per event.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    detectors: u16,
    /// Fragment size (mean, with --fragment-distro poisson).
    #[arg(long, default_value = "10KiB", value_parser = parse_size, value_name = "BYTES")]
    fragment_size: u64,
    /// Fragment size distribution.
    #[arg(long, value_enum, default_value = "const")]
    fragment_distro: minidaq::workload::Distro,
    /// Probability that a collector keeps an event (Keep) rather than removing it.
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    acceptance: f64,
    /// Seconds to run (fill-drain: to fill). Default 3 unless --events is given.
    #[arg(long, value_parser = parse_secs, value_name = "SECS")]
    duration: Option<f64>,
    /// Events to write in all (instead of, or as well as, --duration).
    #[arg(long, value_name = "N")]
    events: Option<u64>,
    /// Sampling interval of the throughput, in milliseconds.
    #[arg(long, default_value_t = 5, value_name = "MS")]
    sample_ms: u64,
    /// Ramp-up left out of the figures.
    #[arg(long, default_value = "0.2", value_parser = parse_secs, value_name = "SECS")]
    warmup: f64,
    /// Skip the collectors' check of each fragment's pattern.
    #[arg(long)]
    no_verify: bool,
    /// Store directory (default: a fresh temporary store, removed afterwards).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Durability of fragment writes and acknowledgements.
    #[arg(long, value_enum, default_value = "persisted")]
    durability: DurabilityArg,
    /// Store capacity (preallocated for a temporary store).
    #[arg(long, default_value = "2GiB", value_parser = parse_size, value_name = "BYTES")]
    capacity: u64,
    /// Lease of each claim.
    #[arg(long, default_value = "30", value_parser = parse_secs, value_name = "SECS")]
    lease: f64,
    /// Seed of the sizes and the acceptance draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (readout.ops_per_sec, readout.bytes_per_sec, collect.ops_per_sec,
    /// collect.bytes_per_sec, collect.events_per_sec, integrity_errors, limit_bytes_per_sec,
    /// ratio, and more); with --sweep, {"sweep": [...], "plot": path}.
    #[arg(long)]
    json: bool,
    /// Write the throughput samples to this CSV file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Plot throughput over time to this PNG (with --sweep: the sweep plot, default
    /// minidaq-sweep.png).
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Run a grid: `fragment-size=100,1000,10000,100000`; plots fragments/s and bytes/s
    /// against fragment size (DAQDB Fig. 4).
    #[arg(long, value_name = "fragment-size=LIST")]
    sweep: Option<String>,
    /// Skip measuring the machine's limit (no ratio is reported; the run starts at once).
    #[arg(long)]
    no_limit: bool,
    /// Log every acknowledged operation (put, removed, kept) to this file, for crash tests.
    #[arg(long, value_name = "FILE")]
    ack_log: Option<PathBuf>,
    /// Load a hotstore server (`hotstore serve`) instead of an embedded store: every readout
    /// and collector thread is a connection (FRAG.PUT, EVENT.NEXT, EVENT.ACK), with the same
    /// samples, report and plot as a local run. The server must complete events at
    /// --detectors fragments (`serve --expected-fragments N`), or at EVENT.SEAL only (0: then
    /// readout seals each event). --capacity bounds a fill-drain's fill here too.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "store")]
    remote: Option<String>,
    /// With --remote: requests in flight per connection (puts per pipeline, events claimed per
    /// round trip).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096),
          requires = "remote")]
    window: u32,
}

fn parse_sweep(s: &str) -> CliResult<Vec<u64>> {
    let Some(list) = s.strip_prefix("fragment-size=") else {
        return util::fail(format!(
            "--sweep `{s}`: only fragment-size=LIST is supported (e.g. fragment-size=100,1000,10000)"
        ));
    };
    list.split(',')
        .map(|v| parse_size(v.trim()).map_err(|e| CliError::Msg(format!("--sweep: {e}"))))
        .collect()
}

fn run(cli: Cli) -> CliResult<ExitCode> {
    match cli.command {
        Command::Inspect(a) => inspect::run(&a.dir, a.json)?,
        Command::Verify(a) => return verify::run(&a.dir, a.json),
        Command::Dump(a) => dump::run(&a.dir, a.json)?,
        Command::Stress(a) => stress::run(&stress::Config {
            dir: a.dir,
            duration: Duration::from_secs_f64(a.duration),
            ack_log: a.ack_log,
            threads: a.threads as usize,
            seed: a.seed,
            max_value: a.max_value,
            direct_io_min: a.direct_io_min,
            keys_per_thread: a.keys,
            segment_size: a.segment_size,
            capacity: a.capacity,
            durability: a.durability.into(),
        })?,
        Command::Serve(a) => serve::run(a)?,
        Command::Minidaq(a) => {
            let duration = match (a.duration, a.events) {
                (Some(d), _) => Some(Duration::from_secs_f64(d)),
                (None, Some(_)) => None,
                (None, None) => Some(Duration::from_secs(3)),
            };
            let ok = minidaq::run(&minidaq::Config {
                store: a.store,
                durability: a.durability.into(),
                readout_threads: a.readout_threads as usize,
                collector_threads: a.collector_threads as usize,
                detectors: a.detectors,
                fragment_size: a.fragment_size,
                distro: a.fragment_distro,
                acceptance: a.acceptance,
                mode: a.mode,
                duration,
                events: a.events,
                sample_ms: a.sample_ms,
                warmup: Duration::from_secs_f64(a.warmup),
                verify: !a.no_verify,
                capacity: a.capacity,
                lease: Duration::from_secs_f64(a.lease),
                seed: a.seed,
                json: a.json,
                csv: a.csv,
                plot: a.plot,
                sweep: a.sweep.as_deref().map(parse_sweep).transpose()?,
                ack_log: a.ack_log,
                measure_limit: !a.no_limit,
                remote: a.remote,
                window: a.window as usize,
            })?;
            if !ok {
                return Ok(ExitCode::from(util::EXIT_DAMAGE));
            }
        }
        Command::Record(a) => return record::run(a),
        Command::Bench(BenchCommand::Device(a)) => return device::run(a),
        Command::Bench(BenchCommand::Dram(a)) => bench_dram::run(&a)?,
        Command::Bench(BenchCommand::Model(a)) => return device::run_model(a),
        Command::Bench(BenchCommand::Put(a)) => bench_run(bench::Op::Put, a)?,
        Command::Bench(BenchCommand::Get(a)) => bench_run(bench::Op::Get, a)?,
        Command::Bench(BenchCommand::Recovery(a)) => {
            let base = bench_harness::base_dir(a.dir.as_deref())?;
            bench_recovery::run(
                &base,
                &bench_recovery::Params {
                    key_count: a.key_count,
                    value_size: a.value_size,
                    segment_size: a.segment_size,
                    json: a.json,
                },
            )?
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_run(op: bench::Op, a: BenchArgs) -> CliResult<()> {
    bench::run(&bench::Config {
        op,
        dir: a.dir,
        value_size: a.value_size,
        threads: a.threads as usize,
        durability: a.durability.into(),
        duration: Duration::from_secs_f64(a.duration),
        key_count: a.key_count,
        order: a.order,
        segment_size: a.segment_size,
        capacity: a.capacity,
        repeat: a.repeat as usize,
        verify_on_read: !a.no_verify_on_read,
        keep: a.keep,
        preallocate: a.preallocate,
        events: a.events,
        direct_io_min: a.direct_io_min,
        vs: a.vs,
        json: a.json,
    })
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
    if cli.command.serves_network() {
        util::sigpipe_ignore();
    }
    let result = run(cli);
    // Every server handle has been dropped (and so stopped) by now: restore the default before
    // reporting an error that a server command returned.
    util::sigpipe_default();
    match result {
        Ok(code) => code,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
