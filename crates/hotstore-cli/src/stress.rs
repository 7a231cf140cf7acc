//! `hotstore stress`: the options of the crash-test workload, and its run
//! (`hotstore_crashtest::stress`): open the store and the ack log, say so, run, print the
//! summary.

use crate::util::{self, parse_secs, parse_size, parse_size_or_off, CliResult};
use crate::DurabilityArg;
use clap::Args;
use hotstore_crashtest::stress::{Config, Stress};
use std::path::PathBuf;
use std::time::Duration;

/// Random puts, overwrites and removals, each acknowledged one logged, for crash testing.
///
/// Opens the store (creating it if missing, recovering it after a crash) and runs THREADS
/// threads for DURATION seconds. Each thread writes new keys (16-byte fragment keys and longer
/// blob keys, tagged with a random per-run nonce), overwrites and removes keys it owns, with
/// value sizes log-uniform between 1 byte and --max-value (mostly small, some large). Keys the
/// ack log says are present from earlier runs, and stress keys in the store the log never
/// mentions (a put in flight, never acknowledged, when an earlier run was killed), are shared
/// out among the threads and reused, so a store can be killed and restarted any number of
/// times. A store holding keys stress did not write (by their key and value shapes) is
/// refused, untouched: run it on a store of its own. When the store is full, a thread
/// removes the oldest quarter of its keys and continues. With --long-lived N, N keys are
/// written first and left alone until the end of the run, where they are read back.
///
/// After the store acknowledges an operation, one line is appended to the ack log with a
/// single write: `put <key-hex> <len> <crc32c>` or `del <key-hex>`. A supervisor may kill
/// the process at any moment (kill -9) and later check that the store holds, for every key,
/// what its last ack line says (each thread has at most one unacknowledged operation in
/// flight). An unfinished last line left by a kill is cut at the next start.
///
/// Values of 8 bytes or more start with a 64-bit little-endian seed followed by the
/// SplitMix64 stream of `seed ^ fnv1a64(key)`, so even an unacknowledged value can be
/// recognised as well-formed. Prints a summary (ops, bytes, ops/s, StoreFull answers, records
/// relocated by the engine) at the end.
#[derive(Args)]
pub struct StressArgs {
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
    #[arg(long, value_parser = crate::util::parse_capacity, value_name = "BYTES")]
    capacity: Option<u64>,
    /// Durability of every write and removal.
    #[arg(long, value_enum, default_value = "persisted")]
    durability: DurabilityArg,
    /// Values at least this long go to a block tier by direct I/O (default: the engine's);
    /// `off` never.
    #[arg(long, value_parser = parse_size_or_off, value_name = "BYTES|off")]
    direct_io_min: Option<u64>,
    /// Long-lived keys: N keys (`stress-<nonce>-long-<n>`) written at the start of the run,
    /// then never overwritten or removed in it, and read back and checked at its end. They pin
    /// their segments, so with --capacity only relocation keeps the store writable. They are
    /// logged like any write; later runs inherit them as ordinary keys.
    #[arg(long, default_value_t = 0, value_name = "N")]
    long_lived: usize,
    /// A second tier in DIR (relative to the store directory unless absolute): past half of
    /// --capacity the first tier offloads its oldest segments there, so kills land in the
    /// middle of offloads too.
    #[arg(long, requires = "capacity", value_name = "DIR")]
    offload_to: Option<PathBuf>,
}

/// Runs `hotstore stress`.
pub fn run(a: StressArgs) -> CliResult<()> {
    let stress = Stress::open(Config {
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
        long_lived: a.long_lived,
        offload_to: a.offload_to,
    })?;
    println!("{}", stress.opened());
    let summary = stress.run()?;
    println!("{summary}");
    Ok(())
}
