//! `hotstore bench`: the options of its subcommands, and each one's run: build the benchmark's
//! configuration, run it (`hotstore_bench`), print its report as text or JSON.

use crate::util::{
    self, fail, parse_secs, parse_size, parse_size_or_off, CliError, CliResult, Out,
};
use crate::DurabilityArg;
use clap::{Args, Subcommand};
use hotstore_bench::device::{self, model, model_cmd, Method, Workload};
use hotstore_bench::pipeline::{self, Kind};
use hotstore_bench::{bench, bench_dram, bench_recovery, bench_soak};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Benchmarks: the engine's own throughput, and the storage device under it.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Embedded put throughput beside this machine's own limit (memcpy, or O_DIRECT on a disk).
    Put(BenchArgs),
    /// Embedded get throughput beside memcpy bandwidth, in key order or at random.
    Get(BenchArgs),
    /// Index rebuild at open: --key-count values of --value-size, from summaries and by scan.
    Recovery(RecoveryArgs),
    /// DRAM per live key (index and event table), from the process's anonymous memory.
    Dram(DramArgs),
    Soak(SoakArgs),
    Device(DeviceArgs),
    Model(ModelArgs),
    Pipeline(PipelineArgs),
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
pub struct BenchArgs {
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
    /// domain, runs, and more; a Persisted put on a disk adds synced_limit_name,
    /// synced_limit_bytes_per_sec and synced_ratio (the device doing the same work: each
    /// record-sized direct write synced).
    #[arg(long)]
    json: bool,
    /// get only: keys to populate (default: about 256 MiB of values, at most 1048576 keys).
    #[arg(long, value_name = "N")]
    key_count: Option<u64>,
    /// get only: key order.
    #[arg(long, value_enum, default_value = "seq")]
    order: bench::Order,
    /// get only: keys looked up together with `get_many` (their memory misses overlap); 1
    /// (default): one `get` per key. A peer (`--vs lmdb`) still reads one key at a time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=4096), value_name = "N")]
    batch: u16,
    /// Segment file size (default: the engine's, 64 MiB).
    #[arg(long, value_parser = util::parse_segment_size, value_name = "BYTES")]
    segment_size: Option<u64>,
    /// Store capacity. Default: half the file system's free space, and on a memory file
    /// system at most a quarter of the available RAM, so a long put run on /dev/shm stops at
    /// "store full" instead of exhausting memory.
    #[arg(long, value_parser = crate::util::parse_capacity, value_name = "BYTES")]
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
pub struct RecoveryArgs {
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

/// Options of `bench dram`.
#[derive(Args)]
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

/// Characterise a storage device: throughput against threads and request rate against block
/// size, for each access method, as in the DUNE and neuroimaging papers.
///
/// Works in a fresh temporary directory under --path (removed afterwards) with one file per
/// thread; at each thread count the files (--file-size in total) are preallocated and filled
/// with a pattern once. Every point is: flush and drop the files from the page cache, start the
/// threads, a warm-up, then the measured window of --duration; the figure is the median over
/// --repeat runs. As in fio (invalidate=1), a thread drops its file's pages again each time it
/// has gone once through the file, so buffered reads keep measuring the device, not a page
/// cache holding the whole file (pages mapped by the mmap methods stay: the kernel keeps them). Writes end the window only after a final
/// fdatasync (msync for mappings), so the figure includes reaching the device: "sync yes" in
/// the table, `includes_sync` in JSON (--no-final-sync leaves it out, which measures the page
/// cache). Reads are checked against the pattern (every byte during the warm-up, the first and
/// last 8 bytes of each request while measured); each write thread reads back its last block.
///
/// Grid (default): request rate against every --block-size at the first --threads value
/// (DUNE Fig. 2), and throughput against the other thread counts at 4 KiB and 1 MiB (Figs. 3,
/// 5). --full-grid runs every combination.
///
/// Block sizes O_DIRECT cannot do on the file system (not a multiple of its O_DIRECT alignment,
/// e.g. 256 and 5568 bytes on a 512-byte disk) are reported as skipped; a method the system
/// refuses (io_uring blocked in a container, O_DIRECT on some file systems) as unavailable.
///
/// Example: hotstore bench device --path /var/tmp --method direct,uring --block-size 4K,1M
#[derive(Args)]
pub struct DeviceArgs {
    /// Directory on the device to characterise (must exist).
    #[arg(long)]
    path: PathBuf,
    /// Access methods, comma-separated: write (pwrite/pread through the page cache), direct
    /// (O_DIRECT from 4 KiB-aligned buffers), uring (io_uring, O_DIRECT, --iodepth requests in
    /// flight per thread), mmap (memcpy into a shared file mapping, msync at the end), mmap-nt
    /// (non-temporal MOVNTDQ/MOVNTI stores + SFENCE per request into the mapping, the DUNE
    /// paper's path; msync at the end), dsync (pwrite + fdatasync after every request).
    #[arg(long, default_value = "write,direct,uring,mmap,mmap-nt,dsync")]
    method: String,
    /// Workloads, comma-separated: seq-write, seq-read, rand-write (uniformly random block
    /// offsets: write IOPS). Reads use each method's read path (write: buffered pread, direct:
    /// O_DIRECT pread, uring: io_uring O_DIRECT reads, mmap: memcpy from the mapping).
    #[arg(long, default_value = "seq-write,seq-read,rand-write")]
    workload: String,
    /// Block (request) sizes, comma-separated: 256, 4K, 5568, 64KiB, 1M ...
    #[arg(long, default_value = "256,4K,5568,64K,1M")]
    block_size: String,
    /// Thread counts, comma-separated, each thread on its own file [default: 1,2,4, without
    /// those above twice the number of CPUs].
    #[arg(long)]
    threads: Option<String>,
    /// Run every block size at every thread count, not just the papers' grid.
    #[arg(long)]
    full_grid: bool,
    /// Seconds measured per run.
    #[arg(long, default_value = "0.5", value_parser = parse_secs)]
    duration: f64,
    /// Seconds of warm-up before each measured window (not counted).
    #[arg(long, default_value = "0.1", value_parser = parse_secs)]
    warmup: f64,
    /// Runs per point; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// io_uring requests in flight per thread (method uring).
    #[arg(long, default_value_t = 32)]
    iodepth: usize,
    /// Total size of the per-thread files at each thread count (each thread gets an equal
    /// share and wraps around in it).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    file_size: u64,
    /// End write windows without the final fdatasync/msync: the figure then measures reaching
    /// the page cache, not the device (except for dsync, which syncs every request).
    #[arg(long)]
    no_final_sync: bool,
    /// Print one JSON object (settings, file system, `results` list) instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the results as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write PNG figures into this directory (created if missing): per workload,
    /// device-<workload>-threads.png (throughput against threads per block size) and
    /// device-<workload>-blocks.png (request rate against block size per thread count).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also run fio (which must be installed) on the same files and pattern where it has the
    /// same method, and print its figure and our/fio ratio beside ours.
    #[arg(long)]
    vs_fio: bool,
}

/// Splits a comma-separated option, refusing empty items and dropping repeated ones.
fn list<T>(opt: &str, s: &str, parse: impl Fn(&str) -> Result<T, String>) -> CliResult<Vec<T>>
where
    T: PartialEq,
{
    let mut out = Vec::new();
    for item in s.split(',') {
        if item.trim().is_empty() {
            return fail(format!("--{opt}: empty item in `{s}`"));
        }
        let v = parse(item.trim()).map_err(|e| CliError::Msg(format!("--{opt}: {e}")))?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

const MAX_THREADS: usize = 256;
const MAX_BLOCK: u64 = 1 << 30;

/// The options of `bench device` as the library's configuration: the lists split and parsed,
/// every value checked against its bounds.
fn device_config(a: DeviceArgs) -> CliResult<device::Config> {
    if !a.path.is_dir() {
        return fail(format!(
            "--path {}: not an existing directory",
            a.path.display()
        ));
    }
    let methods = list("method", &a.method, Method::parse)?;
    let workloads = list("workload", &a.workload, Workload::parse)?;
    let blocks = list("block-size", &a.block_size, |s| {
        let b = parse_size(s)?;
        if b == 0 || b > MAX_BLOCK {
            return Err(format!("`{s}`: a block size must be 1 byte to 1 GiB"));
        }
        Ok(b as usize)
    })?;
    let threads = match &a.threads {
        Some(t) => list("threads", t, |s| match s.parse::<usize>() {
            Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
            _ => Err(format!("`{s}`: a thread count must be 1 to {MAX_THREADS}")),
        })?,
        None => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            [1, 2, 4]
                .into_iter()
                .filter(|t| *t == 1 || *t <= 2 * cpus)
                .collect()
        }
    };
    if !(1..=1000).contains(&a.repeat) {
        return fail(format!("--repeat {}: must be 1 to 1000", a.repeat));
    }
    if !(1..=4096).contains(&a.iodepth) {
        return fail(format!("--iodepth {}: must be 1 to 4096", a.iodepth));
    }
    let max_threads = threads.iter().copied().max().unwrap_or(1);
    if device::file_bytes(a.file_size, max_threads) == 0 {
        return fail(format!(
            "--file-size {}: too small for {max_threads} threads (each needs at least 4 KiB)",
            a.file_size
        ));
    }
    Ok(device::Config {
        path: a.path,
        methods,
        workloads,
        blocks,
        threads,
        full_grid: a.full_grid,
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(a.duration),
        repeat: a.repeat,
        iodepth: a.iodepth,
        include_sync: !a.no_final_sync,
        file_size_total: a.file_size,
        vs_fio: a.vs_fio,
        plot: a.plot,
        csv: a.csv,
    })
}

/// Long-lived keys on a bounded store: does relocation keep it writable, and at what cost?
///
/// Needs in --dir the bounded store's capacity plus the reference's files (by default 4 +
/// 16 x --live-bytes, about 5 GiB, and more if the reference outgrows its preallocation).
///
/// The workload of issue 15: a fixed key set (16-byte fragment keys) holding --live-bytes of
/// values, each key's value size drawn once, log-uniform from --min-value to --max-value
/// (default 100 B to 1 MiB: as many values under 10 KiB as over; the mean is about 111 KiB),
/// overwritten at random (uniformly over the keys) by THREADS threads. No segment dies on its
/// own, since some of its keys are always still live, so on a store of --capacity-factor
/// times the live data only relocation keeps room for writes.
///
/// First the reference: the same workload on an unbounded store (same options, no capacity,
/// --reference-preallocate bytes of files prepared at open) for --reference-duration seconds. Then the soak: a fresh store bounded at --capacity-factor
/// x the live data for --duration seconds, with a progress line on stderr every
/// --progress-every seconds (elapsed, ops/s, MB/s, file bytes against the capacity, live
/// bytes, write amplification, StoreFull count). Each run writes the key set once before it is
/// measured. Throughput is sampled every second; the figures are medians of those samples.
///
/// The summary: the bounded median throughput against the unbounded one (the ratio), the most
/// file bytes seen against the capacity, write amplification ((user bytes + relocated bytes) /
/// user bytes over the soak) and the bytes relocated. A write refused with StoreFull is
/// counted (the writer goes on); the command fails (exit 2, after the summary) if any was, or
/// if the files ever exceeded the capacity. Stores go in temporary directories under --dir
/// (default /dev/shm, else the system temp dir), removed at the end.
#[derive(Args)]
pub struct SoakArgs {
    /// File system to measure: the stores go in fresh temporary directories under it.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds of the bounded soak.
    #[arg(long, default_value = "600", value_parser = parse_secs, value_name = "SECS")]
    duration: f64,
    /// Seconds of the unbounded reference run.
    #[arg(long, default_value = "20", value_parser = parse_secs, value_name = "SECS")]
    reference_duration: f64,
    /// Value bytes of the key set (the live data).
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "BYTES")]
    live_bytes: u64,
    /// Capacity of the bounded store as a multiple of --live-bytes (over 1).
    #[arg(long, default_value_t = 4.0, value_name = "X")]
    capacity_factor: f64,
    /// Smallest value.
    #[arg(long, default_value = "100", value_parser = parse_size, value_name = "BYTES")]
    min_value: u64,
    /// Largest value.
    #[arg(long, default_value = "1MiB", value_parser = parse_size, value_name = "BYTES")]
    max_value: u64,
    /// Segment file size (default: the engine's 64 MiB, or the largest power of two of at
    /// least 1 MiB that fits 16 times in the capacity).
    #[arg(long, value_parser = util::parse_segment_size, value_name = "BYTES")]
    segment_size: Option<u64>,
    /// Segment file bytes the unbounded reference creates and pre-faults at open (default: 16
    /// x --live-bytes); the bounded store pre-faults all its capacity. A store that grows into
    /// fresh files also measures the kernel faulting in pages (slow on some machines' tmpfs),
    /// which is not what the ratio is about; the summary says when the reference outgrew this.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    reference_preallocate: Option<u64>,
    /// Writer threads (each overwrites its own share of the keys).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Durability of every write.
    #[arg(long, value_enum, default_value = "persisted")]
    durability: DurabilityArg,
    /// Seed of the value sizes and the key choices (default: random; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds between progress lines on stderr.
    #[arg(long, default_value = "10", value_parser = parse_secs, value_name = "SECS")]
    progress_every: f64,
    /// Print one JSON object (the workload, `reference`, `bounded`, `ratio`,
    /// `max_file_fraction`, `intervals`) instead of text; progress lines still go to stderr.
    #[arg(long)]
    json: bool,
}

/// The papers' sizing models, for given or measured rates.
///
/// Extra DRAM (DUNE Fig. 6): data arriving at --input while storage takes it at --output piles
/// up in memory: extra DRAM = (input - output) x --duration. Give --output (several,
/// comma-separated, draw one line each with --plot) or --output-path DIR to measure the write
/// bandwidth of DIR (O_DIRECT 1 MiB sequential writes, final fdatasync counted; buffered writes
/// + fdatasync where O_DIRECT is refused).
///
/// Makespan bound (neuroimaging Eq. 1): a job that reads --data-size D and writes D takes at
/// least M >= D/R + D/W. Give --read-rate R and --write-rate W, or --path DIR to measure
/// whichever is missing (O_DIRECT 1 MiB sequential reads and writes).
///
/// Rates: 10GB/s, 1.2 GB/s, 800MiB/s, 5e9 (bytes/s). KB, MB, GB, TB are powers of 1000 (as in
/// the papers); K/KiB, M/MiB, G/GiB, T/TiB powers of 1024. Durations: 100s, 100, 5min, 2h.
///
/// Example: hotstore bench model --input 10GB/s --output 1.2GB/s,5GB/s,8GB/s --duration 100s
/// --plot backlog.png
#[derive(Args)]
pub struct ModelArgs {
    /// Input (arrival) rate, e.g. 10GB/s.
    #[arg(long, value_parser = model::parse_rate)]
    input: Option<f64>,
    /// Output (storage) rate(s), comma-separated, e.g. 1.2GB/s or 2GB/s,5GB/s,8GB/s.
    #[arg(long, conflicts_with = "output_path")]
    output: Option<String>,
    /// Measure the output rate as the write bandwidth of this directory.
    #[arg(long)]
    output_path: Option<PathBuf>,
    /// Recording time for the extra-DRAM model, e.g. 100s.
    #[arg(long, value_parser = model::parse_duration)]
    duration: Option<f64>,
    /// DRAM available for the backlog, e.g. 256GB: also print how long it lasts at each output
    /// rate.
    #[arg(long, value_parser = model::parse_bytes)]
    dram: Option<f64>,
    /// Write the backlog over time (one line per output rate, the duration marked) as a PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Data read and written by the job, for the makespan bound, e.g. 76GB.
    #[arg(long, value_parser = model::parse_bytes)]
    data_size: Option<f64>,
    /// Device read bandwidth R, e.g. 2GB/s.
    #[arg(long, value_parser = model::parse_rate)]
    read_rate: Option<f64>,
    /// Device write bandwidth W, e.g. 500MB/s.
    #[arg(long, value_parser = model::parse_rate)]
    write_rate: Option<f64>,
    /// Measure R and/or W (whichever is not given) on this directory.
    #[arg(long)]
    path: Option<PathBuf>,
    /// Seconds measured per run (3 runs, median) when measuring a directory.
    #[arg(long, default_value = "1", value_parser = parse_secs)]
    measure_duration: f64,
    /// Size of the temporary file used when measuring a directory.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    measure_size: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The neuroimaging paper's incrementation pipeline: plain files against hotstore, beside the
/// makespan bound M >= D/R + D/W.
///
/// WORKERS threads take the chunks of a synthetic 3-D image of u16 voxels one at a time, read
/// each, add 1 to every voxel and write the result; K iterations, iteration k reading
/// iteration k-1's output (and removing it once its own output is written), a barrier between
/// iterations. The same pipeline runs in each configuration (--configs):
///
/// disk: files in --disk-dir, O_DIRECT reads and writes, fdatasync per output file: the
/// device itself; every result is on disk when its worker moves on.
///
/// disk-cached: files in --disk-dir through the page cache, the final image fdatasync'd at
/// the end (counted): the kernel's write-back cache as a fast tier.
///
/// tmpfs: files in --mem-dir: nothing survives a power cut or reboot.
///
/// tiered: hotstore, a memory tier of --fast-capacity in --mem-dir over a disk tier in
/// --disk-dir, Persisted puts: a result survives a process crash at once, a power cut once
/// offloaded. "on disk at" is the time until the memory tier held nothing (the store closed,
/// reopened, offloaded until empty).
///
/// store-disk: hotstore, one disk tier in --disk-dir, Persisted puts: on disk when
/// acknowledged.
///
/// The initial image is written before the clock starts (and, for disk-cached, synced and
/// dropped from the page cache); the makespan ends when the last chunk of iteration K is
/// written and the configuration's promise holds. The final image is then read back and
/// every voxel checked against its initial value + K (not timed; exit status 2 and the count
/// of wrong voxels if any is wrong). Why O_DIRECT for `disk`: with 24 GiB of RAM and the
/// kernel's dirty limits (20% of memory), a buffered image of a few GiB never leaves the page
/// cache during a run, and iteration k reads k-1's output from memory: `disk-cached` shows
/// exactly that.
///
/// Before the runs, R and W of both directories are measured (O_DIRECT 1 MiB sequential reads
/// and writes, final fdatasync counted, 3 runs of --measure-duration, median, as `bench model
/// --path`), and each makespan is printed beside M >= D/R + D/W with D = K x image bytes (the
/// disk's bound for disk, disk-cached, store-disk; tmpfs's for tmpfs and tiered).
///
/// The default (256 MiB image of 32 chunks of 8 MiB, 2 workers, K = 4) runs all five
/// configurations in about 30-40 s on a 2-core VM (more when it is busy), needs about 1 GiB free
/// in --mem-dir and in --disk-dir, and removes every file it made (also on Ctrl-C).
///
/// Both stores ask for segments of a few chunks (under 60 MiB; a memory tier smaller than 16
/// segments gets smaller ones, and a chunk larger than a segment gets a file of its own).
///
/// Sizes: --image XxYxZ voxels (or --image-bytes, rounded down to a cube), --chunk XxYxZ
/// (edge chunks are smaller where it does not divide the image). A chunk larger than the
/// image, a size of 0, zero workers or iterations are errors.
///
/// Example: hotstore bench pipeline --repeat 3 --plot pipeline.png
#[derive(Args)]
pub struct PipelineArgs {
    /// Image size in voxels, XxYxZ (u16 voxels).
    #[arg(long, default_value = "1024x1024x128", value_parser = pipeline::parse_dims,
          value_name = "XxYxZ", conflicts_with = "image_bytes")]
    image: [u64; 3],
    /// Image size in bytes instead (a cube of u16 voxels, side rounded down), e.g. 256MiB.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    image_bytes: Option<u64>,
    /// Chunk size in voxels, XxYxZ.
    #[arg(long, default_value = "256x256x64", value_parser = pipeline::parse_dims,
          value_name = "XxYxZ")]
    chunk: [u64; 3],
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Iterations K (each reads the previous one's output).
    #[arg(long, short = 'k', default_value_t = 4)]
    iterations: u32,
    /// Configurations to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "disk,disk-cached,tmpfs,tiered,store-disk"
    )]
    configs: Vec<Kind>,
    /// Directory on the disk (plain files, the disk tier).
    #[arg(long, default_value = "/var/tmp")]
    disk_dir: PathBuf,
    /// Directory on a memory file system (tmpfs files, the memory tier).
    #[arg(long, default_value = "/dev/shm")]
    mem_dir: PathBuf,
    /// Capacity of the tiered store's memory tier (default: twice the image); created and
    /// pre-faulted at open, before the clock starts.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    fast_capacity: Option<u64>,
    /// Fraction of the memory tier's capacity above which its oldest data moves to the disk
    /// tier while the pipeline runs (the engine's default 0.8).
    #[arg(long, default_value_t = 0.8, value_name = "FRACTION")]
    offload_high_water: f64,
    /// Runs of every configuration, alternated (each repetition starts one configuration
    /// later); medians are reported, every run in --json's `runs`.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Seconds of each of the 3 bandwidth measurements per direction and directory.
    #[arg(long, default_value = "0.3", value_parser = parse_secs, value_name = "SECS")]
    measure_duration: f64,
    /// Size of the file the bandwidths are measured on.
    #[arg(long, default_value = "128MiB", value_parser = parse_size, value_name = "BYTES")]
    measure_size: u64,
    /// Do not measure R and W (no model in the report).
    #[arg(long)]
    no_measure: bool,
    /// Write the figure (makespan against K per configuration, the bounds dashed) as a PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of the table (progress lines still go to stderr).
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

fn run_pipeline(a: PipelineArgs) -> CliResult<ExitCode> {
    let image = match a.image_bytes {
        Some(b) => match pipeline::cube_of_bytes(b) {
            [0, _, _] => {
                return fail(format!(
                    "--image-bytes {b}: smaller than one voxel (2 bytes)"
                ))
            }
            dims => dims,
        },
        None => a.image,
    };
    let report = pipeline::run(&pipeline::Config {
        image,
        chunk: a.chunk,
        workers: a.workers,
        iterations: a.iterations,
        configs: a.configs,
        disk_dir: a.disk_dir,
        mem_dir: a.mem_dir,
        fast_capacity: a.fast_capacity,
        offload_high_water: a.offload_high_water,
        repeat: a.repeat,
        measure: (!a.no_measure)
            .then(|| (Duration::from_secs_f64(a.measure_duration), a.measure_size)),
        plot: a.plot,
        progress: !a.quiet,
    })?;
    print(&report, a.json)?;
    match report.failure() {
        Some(why) => fail(why),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Runs a `bench` subcommand.
pub fn run(cmd: BenchCommand) -> CliResult<ExitCode> {
    match cmd {
        BenchCommand::Put(a) => run_put_get(bench::Op::Put, a)?,
        BenchCommand::Get(a) => run_put_get(bench::Op::Get, a)?,
        BenchCommand::Recovery(a) => run_recovery(a)?,
        BenchCommand::Dram(a) => run_dram(a)?,
        BenchCommand::Soak(a) => return run_soak(a),
        BenchCommand::Device(a) => return run_device(a),
        BenchCommand::Model(a) => run_model(a)?,
        BenchCommand::Pipeline(a) => return run_pipeline(a),
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a report: one JSON object, or its text.
fn print<R: serde::Serialize + std::fmt::Display>(report: &R, json: bool) -> CliResult<()> {
    let mut out = Out::new();
    if json {
        out.line(serde_json::to_string(report)?)?;
    } else {
        out.line(report)?;
    }
    out.flush()
}

fn run_put_get(op: bench::Op, a: BenchArgs) -> CliResult<()> {
    let report = bench::run(&bench::Config {
        op,
        dir: a.dir,
        value_size: a.value_size,
        threads: a.threads as usize,
        durability: a.durability.into(),
        duration: Duration::from_secs_f64(a.duration),
        key_count: a.key_count,
        order: a.order,
        batch: a.batch as usize,
        segment_size: a.segment_size,
        capacity: a.capacity,
        repeat: a.repeat as usize,
        verify_on_read: !a.no_verify_on_read,
        keep: a.keep,
        preallocate: a.preallocate,
        events: a.events,
        direct_io_min: a.direct_io_min,
        vs: a.vs,
        progress: !a.json,
    })?;
    print(&report, a.json)
}

fn run_recovery(a: RecoveryArgs) -> CliResult<()> {
    let report = bench_recovery::run(&bench_recovery::Config {
        dir: a.dir,
        key_count: a.key_count,
        value_size: a.value_size,
        segment_size: a.segment_size,
    })?;
    print(&report, a.json)
}

fn run_soak(a: SoakArgs) -> CliResult<ExitCode> {
    let report = bench_soak::run(&bench_soak::Config {
        dir: a.dir,
        duration: Duration::from_secs_f64(a.duration),
        reference_duration: Duration::from_secs_f64(a.reference_duration),
        live_bytes: a.live_bytes,
        capacity_factor: a.capacity_factor,
        min_value: a.min_value,
        max_value: a.max_value,
        segment_size: a.segment_size,
        reference_preallocate: a.reference_preallocate,
        threads: a.threads as usize,
        durability: a.durability.into(),
        seed: a.seed,
        progress_every: Some(Duration::from_secs_f64(a.progress_every)),
    })?;
    print(&report, a.json)?;
    match report.failure() {
        Some(why) => fail(why),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn run_dram(a: DramArgs) -> CliResult<()> {
    if let Some(dir) = &a.measure_open {
        // The reopen `run` measures in a process of its own (this one, re-run).
        let (entries, grown) = bench_dram::measure_open(dir)?;
        let mut out = Out::new();
        out.line(format_args!("{entries} {grown}"))?;
        return out.flush();
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Msg(format!("cannot find this program: {e}")))?;
    let cfg = bench_dram::Config {
        dir: a.dir,
        keys: a.keys,
        fragments_per_event: a.fragments_per_event,
        reopen: vec![
            exe.into(),
            "bench".into(),
            "dram".into(),
            "--measure-open".into(),
        ],
    };
    let mut out = Out::new();
    let report = if a.json {
        bench_dram::run(&cfg, &mut std::io::sink())?
    } else {
        bench_dram::run(&cfg, &mut out)?
    };
    if a.json {
        out.line(serde_json::to_string(&report)?)?;
    } else {
        out.line(&report)?;
    }
    out.flush()
}

fn run_device(a: DeviceArgs) -> CliResult<ExitCode> {
    let json = a.json;
    let outcome = device::run(&device_config(a)?)?;
    let mut out = Out::new();
    if json {
        out.line(serde_json::to_string(&outcome.json()?)?)?;
    } else {
        out.line(&outcome)?;
    }
    out.flush()?;
    match outcome.failure() {
        Some(why) => fail(why),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn run_model(a: ModelArgs) -> CliResult<()> {
    let report = model_cmd::run(&model_cmd::Config {
        input: a.input,
        output: a.output,
        output_path: a.output_path,
        duration: a.duration,
        dram: a.dram,
        plot: a.plot,
        data_size: a.data_size,
        read_rate: a.read_rate,
        write_rate: a.write_rate,
        path: a.path,
        measure_duration: Duration::from_secs_f64(a.measure_duration),
        measure_size: a.measure_size,
    })?;
    print(&report, a.json)
}
