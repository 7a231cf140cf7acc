//! `hotstore record`: trigger-driven recording of continuous streams (the DUNE supernova
//! buffer), and its `verify`, `export` and `send` subcommands. The recorder itself is the
//! `hotstore-recorder` crate and its plot `hotstore_bench::recorder_plot`; this module is its
//! command line and output.

mod readback;
mod run;

use crate::util::{fail, parse_secs, parse_size, CliResult};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Record continuous streams into a store when a trigger fires (the DUNE supernova buffer).
///
/// Each of --links links streams frames of --frame-size bytes into a DRAM ring holding the
/// last --pre seconds. A trigger at time T records [T - pre, T + post) of every link into the
/// store as ordinary events: one event per --slice of time (run = recording id, event = slice),
/// one fragment per link per slice, each stored record padded to a multiple of 4 KiB. Writer
/// threads store slices as they fill; every 100 ms one group commit makes them durable and then
/// replaces the recording's manifest (`<store>/recordings/rec-NNNNNN.json`), so after a crash
/// the manifest says where the durable data stops.
///
/// Triggers: --trigger-at (scripted), SIGUSR1 (`kill -USR1 <pid>`), the library call
/// (`RecorderHandle::trigger`), or RECORD.TRIGGER on the server of --serve-port. A trigger while a recording is being
/// written extends it if its window starts before the recording's end, and otherwise queues a
/// new one.
///
/// If the device is slower than the input, the backlog grows in DRAM up to --dram-bound; past
/// it frames are dropped, counted per link, logged, and the recording is marked lossy.
///
/// Sources: the built-in generator (default: every frame carries link, sequence number,
/// timestamp and a checksum, so `record verify` proves there is no gap and no corruption) or
/// UDP (--source udp://HOST:PORT,...; one socket per link; drive it with `record send`).
///
/// The run ends when every recording is complete (or at --duration). It prints a progress line
/// each second and a summary with the device's sequential write bandwidth, measured in the same
/// run, beside the recording bandwidth.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RecordArgs {
    #[command(subcommand)]
    cmd: Option<RecordCmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum RecordCmd {
    Verify(VerifyArgs),
    Export(ExportArgs),
    Send(SendArgs),
}

/// Options of a recording run.
#[derive(Args)]
pub struct RunArgs {
    /// Store directory (created if missing).
    #[arg(long, required = true, value_name = "DIR")]
    store: Option<PathBuf>,
    /// Number of links.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=4096))]
    links: u16,
    /// Bytes per frame (DUNE: 5568).
    #[arg(long, default_value = "5568", value_parser = parse_size, value_name = "BYTES")]
    frame_size: u64,
    /// Generator rate per link, e.g. 100MB/s: a size as everywhere else (KB, MB, GB, TB
    /// decimal; K/KiB, M/MiB, G/GiB, T/TiB binary; fractions allowed here), with an optional
    /// `/s`. With --source udp it is the rate the rings are sized for.
    #[arg(long, default_value = "50MB/s", value_parser = parse_rate, value_name = "RATE")]
    rate_per_link: f64,
    /// Frame source: `gen` (the built-in generator) or udp://HOST:PORT[,HOST:PORT...] (one
    /// address per link).
    #[arg(long, default_value = "gen", value_name = "SOURCE")]
    source: String,
    /// Pre-trigger window kept in DRAM.
    #[arg(long, default_value = "1", value_parser = parse_secs, value_name = "SECS")]
    pre: f64,
    /// Post-trigger window.
    #[arg(long, default_value = "2", value_parser = parse_secs, value_name = "SECS")]
    post: f64,
    /// Trigger at this many seconds after the start (repeatable). Default: once, at --pre
    /// plus 0.2 s (a full pre-trigger window), unless --no-trigger.
    #[arg(long, value_parser = parse_secs, value_name = "SECS")]
    trigger_at: Vec<f64>,
    /// No scripted trigger: wait for SIGUSR1 or RECORD.TRIGGER (stop with Ctrl-C or
    /// --duration).
    #[arg(long)]
    no_trigger: bool,
    /// Stop after this many seconds even if a recording is still open (it is then truncated).
    #[arg(long, value_parser = parse_secs, value_name = "SECS")]
    duration: Option<f64>,
    /// DRAM for all rings together (the backlog bound). Default: the pre-trigger window of
    /// every link plus as much again (2 x --pre x --rate-per-link x --links), at least 64 MiB.
    /// Refused if more than the memory available (MemAvailable, or the cgroup's limit).
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    dram_bound: Option<u64>,
    /// Length of a time slice (one event per slice). At least the time a link takes to send
    /// one frame and 4 KiB, at --rate-per-link (each slice is stored as one record padded to
    /// 4 KiB: a shorter slice stores mostly padding, one store write and one event per frame
    /// or less); shorter is refused. [default: 0.01, or that least length if longer]
    #[arg(long, value_parser = parse_secs, value_name = "SECS")]
    slice: Option<f64>,
    /// Writer threads (each owns a share of the links).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    writers: u16,
    /// What a commit guarantees before the manifest claims the data.
    #[arg(long, value_enum, default_value = "persisted")]
    durability: crate::DurabilityArg,
    /// Store capacity, more than 0 (default: unbounded for a new store: omit it).
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    capacity: Option<u64>,
    /// Create and pre-fault segment files at start: BYTES of them, or without a value all of
    /// --capacity.
    #[arg(long, requires = "capacity", num_args = 0..=1, default_missing_value = "all",
          value_parser = crate::util::parse_preallocate, value_name = "BYTES")]
    preallocate: Option<u64>,
    /// A second tier in this directory (a disk, say, below a tmpfs first tier), under a
    /// first tier bounded by --capacity (required). Slices are written to the first tier
    /// while it has room; once its records pass --offload-at of --capacity, its oldest
    /// segments (oldest slices first, whichever recording holds them, finished or still
    /// being written) move here in the background. If the first tier fills anyway (input
    /// faster than the offload, or a recording larger than the first tier), new slices are
    /// written straight here instead of being dropped. Wherever they are, slices stay
    /// readable, claimable and exportable.
    #[arg(long, value_name = "DIR")]
    offload_to: Option<PathBuf>,
    /// Fraction of --capacity at which the first tier starts offloading to --offload-to.
    #[arg(long, requires = "offload_to", default_value_t = hotstore::OFFLOAD_HIGH_WATER,
          value_parser = parse_fraction, value_name = "FRACTION")]
    offload_at: f64,
    /// Skip measuring the device's bandwidth (no ratio in the summary).
    #[arg(long)]
    no_limit: bool,
    /// Serve the store over the Redis protocol on this loopback port while recording (0: any
    /// free port; the address is printed): RECORD.TRIGGER [AT unix_ns] and RECORD.STATUS reach
    /// the recorder, and consumers can claim finished slices with EVENT.NEXT.
    #[arg(long, value_name = "PORT")]
    serve_port: Option<u16>,
    /// Print one JSON object as the summary.
    #[arg(long)]
    json: bool,
    /// Plot input rate, output rate and backlog (with the model and the bound) to this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
}

/// Check every frame of a recording: checksums, sequence continuity per link, every gap as an
/// exact range, and the manifest's claims against the store.
///
/// Exit status 0 only if every recording checked is complete and intact; 1 otherwise; 2 if it
/// could not run.
#[derive(Args)]
struct VerifyArgs {
    /// Store directory.
    dir: PathBuf,
    /// Recording id (default: every recording in the store).
    #[arg(long)]
    recording: Option<u32>,
    /// Print JSON (one object per recording, in a list).
    #[arg(long)]
    json: bool,
}

/// Write a recording out: by default each link's frames, in time order, as raw binary files
/// (`OUT/link-NNNN.bin`, frames back to back); with `--format hdf5` one HDF5 file
/// (`OUT/rec-NNNNNN.hdf5`) in a layout modelled on DUNE's trigger records: a group per time
/// slice, a dataset per link (docs/record-hdf5.md).
///
/// The HDF5 file is written as `rec-NNNNNN.hdf5.<pid>.writing` and renamed when complete and
/// durable; on any error (a full disk, say) nothing is left under the final name. HDF5 needs a
/// binary built with the `hdf5` feature (libhdf5-dev installed, then `cargo build --release -p
/// hotstore-cli --features hdf5`).
#[derive(Args)]
struct ExportArgs {
    /// Store directory.
    #[arg(value_name = "STORE")]
    dir: PathBuf,
    /// Recording id.
    #[arg(long, value_name = "ID")]
    recording: u32,
    /// Output directory (created if missing).
    #[arg(long, value_name = "OUT_DIR")]
    out: PathBuf,
    /// Output format: `raw` (a file per link) or `hdf5` (one file per recording).
    #[arg(long, value_enum, default_value = "raw")]
    format: ExportFormat,
}

/// What `record export` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExportFormat {
    /// `OUT/link-NNNN.bin` per link: the frames back to back.
    Raw,
    /// `OUT/rec-NNNNNN.hdf5`: a group per time slice, a dataset per link.
    Hdf5,
}

/// Send generator frames over UDP to a recorder's --source addresses (address i is link i).
#[derive(Args)]
struct SendArgs {
    /// Destination: udp://HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "udp://...")]
    to: String,
    /// Bytes per frame.
    #[arg(long, default_value = "5568", value_parser = parse_size, value_name = "BYTES")]
    frame_size: u64,
    /// Rate per link.
    #[arg(long, default_value = "10MB/s", value_parser = parse_rate, value_name = "RATE")]
    rate_per_link: f64,
    /// Seconds to send.
    #[arg(long, default_value = "5", value_parser = parse_secs, value_name = "SECS")]
    duration: f64,
    /// Stop after this many frames per link.
    #[arg(long)]
    frames: Option<u64>,
}

/// Parses a rate: a size as [`parse_size`] reads it (the same units as every size option:
/// KB, MB, GB, TB decimal; K/KiB, M/MiB, G/GiB, T/TiB binary), with an optional `/s`; unlike a
/// size, the number may have a fraction (1.5GB/s).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t).trim_end();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("`{s}`: a rate is a number and a size unit, with an optional /s, e.g. 100MB/s")
    })?;
    // The unit's multiplier from the shared size parser: one unit of it.
    let mult = parse_size(&format!("1{}", unit.trim())).map_err(|_| {
        format!(
            "`{s}`: unknown unit `{}` (a rate takes the units of sizes, with an optional /s: \
             K/KiB, M/MiB, G/GiB, T/TiB for powers of 1024, KB, MB, GB, TB for powers of 1000), \
             e.g. 100MB/s",
            unit.trim()
        )
    })?;
    let r = n * mult as f64;
    if !(r.is_finite() && r > 0.0) {
        return Err(format!("`{s}`: the rate must be more than 0"));
    }
    Ok(r)
}

impl RecordArgs {
    /// Whether this is a recording run that serves network clients (`--serve-port`).
    pub fn serves_network(&self) -> bool {
        self.cmd.is_none() && self.run.serve_port.is_some()
    }
}

/// Runs `record` or one of its subcommands.
pub fn run(a: RecordArgs) -> CliResult<ExitCode> {
    match a.cmd {
        Some(RecordCmd::Verify(v)) => readback::verify(&v.dir, v.recording, v.json),
        Some(RecordCmd::Export(e)) => match e.format {
            ExportFormat::Raw => readback::export(&e.dir, e.recording, &e.out),
            ExportFormat::Hdf5 => readback::export_hdf5(&e.dir, e.recording, &e.out),
        },
        Some(RecordCmd::Send(s)) => send(s),
        None => run::record(a.run),
    }
}

fn send(s: SendArgs) -> CliResult<ExitCode> {
    let addrs = hotstore_recorder::source::parse_udp_list(&s.to).or_else(fail)?;
    let stats = hotstore_recorder::source::send_udp(
        &addrs,
        s.frame_size as usize,
        s.rate_per_link,
        Duration::from_secs_f64(s.duration),
        s.frames,
    )
    .map_err(|e| crate::util::CliError::Msg(e.to_string()))?;
    println!(
        "sent {} frames per link to {} links in {:.2} s ({}/s per link)",
        stats.frames_per_link,
        addrs.len(),
        stats.secs,
        hotstore_bench::util::human_bytes(
            stats.frames_per_link as f64 * s.frame_size as f64 / stats.secs.max(1e-9)
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// A fraction above 0 and at most 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s:?}: a fraction above 0 and at most 1, e.g. 0.8")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_rate;

    #[test]
    fn rates_parse_with_decimal_and_binary_units() {
        assert_eq!(parse_rate("100MB/s"), Ok(100e6));
        assert_eq!(parse_rate("1.5GB/s"), Ok(1.5e9));
        assert_eq!(parse_rate("2MiB"), Ok(2.0 * 1048576.0));
        assert_eq!(parse_rate("500"), Ok(500.0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0MB/s").is_err());
        assert!(parse_rate("3 parsecs").is_err());
    }

    /// Rates take the units of every size option (`parse_size`), plus `/s` and fractions:
    /// before, `K` was 1000 in a rate and 1024 in a size, and `TB`, `T`, `M`, `G` (binary in
    /// sizes) were refused or decimal.
    #[test]
    fn rates_take_the_units_of_sizes() {
        use crate::util::parse_size;
        for unit in [
            "K", "k", "KiB", "KB", "M", "MiB", "MB", "G", "GiB", "GB", "T", "TB", "B",
        ] {
            let size = parse_size(&format!("3{unit}")).expect("a size unit");
            assert_eq!(parse_rate(&format!("3{unit}/s")), Ok(size as f64), "{unit}");
            assert_eq!(parse_rate(&format!("3 {unit}")), Ok(size as f64), "{unit}");
        }
        assert_eq!(parse_rate("0.5KiB/s"), Ok(512.0));
        let e = parse_rate("3XB/s").expect_err("unknown unit");
        assert!(e.contains("unknown unit `XB`"), "{e}");
    }
}
