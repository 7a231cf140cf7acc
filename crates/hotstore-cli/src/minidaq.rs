//! `hotstore minidaq`: the DAQ benchmark's options, and its run: build the configuration, run
//! it (`hotstore_bench::minidaq`), print the report as text or JSON, write the CSV and plot.

use crate::util::{fail, parse_secs, parse_size, CliError, CliResult, EXIT_DAMAGE};
use crate::DurabilityArg;
use clap::Args;
use hotstore_bench::minidaq::{self, Distro, Mode};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
/// memory file system, O_DIRECT writes on a disk) and the ratio of readout bytes/s to it. On a
/// memory file system (not with --sweep) the readout is also compared with its own least work
/// done alone: copying each fragment into memory not touched lately and computing its crc32c
/// (the `work:` line; what the engine adds is the rest).
///
/// The store is a fresh, preallocated temporary one under /dev/shm (the temp dir where there
/// is none) unless --store is given. Exit status 1 if any integrity error was found.
#[derive(Args)]
pub struct MinidaqArgs {
    /// fill-drain (fill, then drain) or parallel (readout and collection at once).
    #[arg(long, value_enum, default_value = "parallel")]
    mode: Mode,
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
    fragment_distro: Distro,
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
    /// Store directory (default: a fresh temporary store, removed afterwards). A store that
    /// holds keys is refused unless --reuse-store is given.
    #[arg(long)]
    store: Option<PathBuf>,
    /// Run on a --store that already holds keys: the collectors claim, check and remove (or
    /// keep, per --acceptance) every event in it, its own or not, and the store's event policy
    /// is set to --detectors fragments per event. For a store minidaq itself filled (crash
    /// tests); never for one holding data you need.
    #[arg(long, requires = "store")]
    reuse_store: bool,
    /// Durability of fragment writes and acknowledgements.
    #[arg(long, value_enum, default_value = "persisted")]
    durability: DurabilityArg,
    /// Store capacity (preallocated for a temporary store).
    #[arg(long, default_value = "2GiB", value_parser = crate::util::parse_capacity, value_name = "BYTES")]
    capacity: u64,
    /// Lease of each claim.
    #[arg(long, default_value = "30", value_parser = parse_secs, value_name = "SECS")]
    lease: f64,
    /// Seed of the sizes and the acceptance draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (readout.ops_per_sec, readout.bytes_per_sec, collect.ops_per_sec,
    /// collect.bytes_per_sec, collect.events_per_sec, integrity_errors, limit_bytes_per_sec,
    /// ratio, work_limit_bytes_per_sec and work_ratio on a memory file system, and more); with
    /// --sweep, {"sweep": [...], "plot": path}.
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
    ///
    /// Several addresses separated by commas (or --cluster) load a cluster (`serve
    /// --cluster MAP`) seeded by them: readout sends each event to the node of its slot,
    /// collectors claim from every node, and the report adds each node's share.
    #[arg(
        long,
        value_name = "HOST:PORT[,HOST:PORT...]",
        conflicts_with = "store"
    )]
    remote: Option<String>,
    /// With --remote: the server is a node of a cluster (implied by several addresses).
    #[arg(long, requires = "remote")]
    cluster: bool,
    /// With --remote: requests in flight per connection (puts per pipeline, events claimed per
    /// round trip).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096),
          requires = "remote")]
    window: u32,
}

fn parse_sweep(s: &str) -> CliResult<Vec<u64>> {
    let Some(list) = s.strip_prefix("fragment-size=") else {
        return fail(format!(
            "--sweep `{s}`: only fragment-size=LIST is supported (e.g. fragment-size=100,1000,10000)"
        ));
    };
    list.split(',')
        .map(|v| parse_size(v.trim()).map_err(|e| CliError::Msg(format!("--sweep: {e}"))))
        .collect()
}

/// Runs `hotstore minidaq`: one run, or the sweep. Exit status 1 if any integrity error was
/// found.
pub fn run(a: MinidaqArgs) -> CliResult<ExitCode> {
    let duration = match (a.duration, a.events) {
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(3)),
    };
    let sweep = a.sweep.as_deref().map(parse_sweep).transpose()?;
    if let Some(d) = &a.store {
        crate::util::refuse_file_as_store(d)?;
    }
    let cfg = minidaq::Config {
        store: a.store,
        reuse_store: a.reuse_store,
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
        ack_log: a.ack_log,
        measure_limit: !a.no_limit,
        remote: a.remote,
        cluster: a.cluster,
        window: a.window as usize,
        progress: !a.json,
    };
    let intact = match sweep {
        Some(sizes) => {
            let png = a.plot.unwrap_or_else(|| PathBuf::from("minidaq-sweep.png"));
            let s = if a.json {
                minidaq::sweep(&cfg, &sizes, &png, &mut std::io::sink())?
            } else {
                minidaq::sweep(&cfg, &sizes, &png, &mut std::io::stdout())?
            };
            if a.json {
                println!("{}", serde_json::to_string(&s)?);
            } else {
                println!("{s}");
            }
            s.intact()
        }
        None => {
            let r = minidaq::run(&cfg)?;
            if a.json {
                println!("{}", serde_json::to_string(&r.report)?);
            } else {
                println!("{}", r.report);
            }
            if let Some(csv) = &a.csv {
                r.write_csv(csv)?;
            }
            if let Some(png) = &a.plot {
                r.plot(png)?;
                if !a.json {
                    println!("plot:    {}", png.display());
                }
            }
            r.intact()
        }
    };
    Ok(if intact {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DAMAGE)
    })
}
