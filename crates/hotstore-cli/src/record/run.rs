//! A recording run: open the store, measure the device, start the recorder and its source,
//! fire the triggers, report progress, and print the summary (text or JSON) and the plot.

/// A line on stderr that cannot panic: while `--serve-port` serves, SIGPIPE is ignored (see
/// `main`), so `eprintln!` would panic once stderr's reader went away; the recording goes on.
macro_rules! log {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use super::RunArgs;
use crate::util::{fail, CliError, CliResult};
use hotstore::{Store, TierSpec};
use hotstore_bench::limits;
use hotstore_bench::util::human_bytes;
use hotstore_recorder::source::{
    bind_udp, parse_udp_list, run_generator, run_udp, GeneratorConfig,
};
use hotstore_recorder::{frame, Recorder, RecorderConfig, RecorderReport, RecordingState};
use serde_json::json;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set by SIGUSR1: trigger now.
static USR1: AtomicBool = AtomicBool::new(false);
/// Set by SIGINT or SIGTERM: stop.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr1(_: libc::c_int) {
    USR1.store(true, Ordering::SeqCst);
}

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGPIPE is left as `main` set it: default, or ignored with --serve-port.
fn install_signals() {
    // Safety: the handlers only store to atomics (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
    }
}

/// The recorder as the server sees it.
struct Control(hotstore_recorder::RecorderHandle);

impl hotstore_server::RecordControl for Control {
    fn trigger(&self, at_unix_ns: Option<u64>) -> Result<(u32, bool), String> {
        let t = match at_unix_ns {
            Some(ns) => self.0.trigger_at(ns),
            None => self.0.trigger(),
        }
        .map_err(|e| e.to_string())?;
        log!(
            "RECORD.TRIGGER: recording {} {}",
            t.recording_id,
            if t.extended { "extended" } else { "started" }
        );
        Ok((t.recording_id, t.extended))
    }

    fn status(&self) -> Vec<(&'static str, i64)> {
        let s = self.0.sample_now();
        vec![
            ("recordings", self.0.recording_ids().len() as i64),
            ("all_finished", self.0.all_recordings_finished() as i64),
            ("frames_in", s.frames_in as i64),
            ("bytes_in", s.bytes_in as i64),
            ("bytes_stored", s.bytes_out as i64),
            ("backlog_bytes", s.backlog_bytes as i64),
            ("frames_dropped", s.frames_dropped as i64),
        ]
    }
}

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::Msg(e.to_string())
}

/// Runs a recording (see `RecordArgs`).
pub fn record(a: RunArgs) -> CliResult<ExitCode> {
    let dir = a.store.clone().expect("clap requires --store");
    // First of all: SIGUSR1's default action ends the process, so a trigger sent while the
    // device is measured, the store opened or the rings allocated (seconds for large rings)
    // killed the recorder and left the measurement's scratch directory in the store (found
    // by a review). Caught from here on, it fires once the recorder runs.
    install_signals();
    crate::util::refuse_file_as_store(&dir)?;
    let frame_len = a.frame_size as usize;
    let udp = match a.source.as_str() {
        "gen" => None,
        s => Some(parse_udp_list(s).or_else(fail)?),
    };
    if let Some(addrs) = &udp {
        if addrs.len() != a.links as usize {
            return fail(format!(
                "--source gives {} UDP addresses but --links is {}: one address per link",
                addrs.len(),
                a.links
            ));
        }
    }
    if udp.is_none() && !(frame::MIN_FRAME_LEN..=frame::MAX_FRAME_LEN).contains(&frame_len) {
        return fail(format!(
            "--frame-size {frame_len}: generator frames are {} to {} bytes",
            frame::MIN_FRAME_LEN,
            frame::MAX_FRAME_LEN
        ));
    }
    let links = a.links as u64;
    let pre_window = (a.pre * a.rate_per_link).ceil() as u64;
    let bound = a
        .dram_bound
        .unwrap_or_else(|| pre_window.saturating_mul(2 * links).max(64 << 20));
    let ring_per_link = bound / links;
    // The ring keeps 1/16 of itself (at most 1024 frames) out of a trigger's reach while the
    // producer runs on: the pre-trigger window must fit in the rest.
    let ring_frames = ring_per_link / frame_len.max(1) as u64;
    let slack = (ring_frames / 16).clamp(1, 1024);
    if ring_frames < (pre_window / frame_len.max(1) as u64) + slack + 16 {
        return fail(format!(
            "--dram-bound {} gives each link {} of ring, less than its pre-trigger window ({} at {}/s for {} s): raise --dram-bound or lower --pre",
            human_bytes(bound as f64),
            human_bytes(ring_per_link as f64),
            human_bytes(pre_window as f64),
            human_bytes(a.rate_per_link),
            a.pre
        ));
    }
    let slice = check_options(&a, bound, ring_per_link)?;
    let mut triggers = a.trigger_at.clone();
    if triggers.is_empty() && !a.no_trigger {
        triggers.push(a.pre + 0.2);
    }
    triggers.sort_by(f64::total_cmp);

    // The server's port before the store: a port in use must not leave a new store behind
    // (found by a new-user review).
    let serving = match a.serve_port {
        Some(port) => {
            let mut sc = hotstore_server::ServerConfig::for_dir(&dir);
            sc.port = port;
            let l = hotstore_server::bind(&sc).map_err(|e| err(format!("cannot serve: {e}")))?;
            Some((sc, l))
        }
        None => None,
    };
    std::fs::create_dir_all(&dir).map_err(|e| err(format!("create {}: {e}", dir.display())))?;
    let limit = (!a.no_limit).then(|| {
        log!(
            "measuring the device's sequential write bandwidth under {} ...",
            dir.display()
        );
        limits::write_limit_for(&dir, a.writers as usize, Duration::from_millis(300))
    });
    let mut builder = Store::builder(&dir);
    if let Some(c) = a.capacity {
        builder = builder
            .tier(TierSpec::new(".").capacity_bytes(c))
            .preallocate_bytes(hotstore_bench::util::preallocate_bytes(a.preallocate, c)?);
        if let Some(lower) = &a.offload_to {
            builder = builder
                .tier(TierSpec::new(lower))
                .offload_high_water(Some(a.offload_at));
        }
    }
    let store = Arc::new(builder.open()?);
    for t in store.stats().tiers.iter().filter(|t| !t.survives_power_cut) {
        log!(
            "hotstore record: note: tier {} is {} (memory-backed): recordings there do not survive a power cut",
            t.path.display(),
            t.domain
        );
    }

    let mut cfg = RecorderConfig::new(a.links, frame_len);
    cfg.pre = Duration::from_secs_f64(a.pre);
    cfg.post = Duration::from_secs_f64(a.post);
    cfg.ring_bytes_per_link = ring_per_link;
    cfg.slice = Duration::from_secs_f64(slice);
    cfg.writers = a.writers as usize;
    cfg.durability = a.durability.into();
    log!(
        "allocating {} of rings ({} links x {}) ...",
        human_bytes(bound as f64),
        a.links,
        human_bytes(ring_per_link as f64)
    );
    let recorder = Recorder::start(store.clone(), cfg).map_err(err)?;
    let server = match serving {
        Some((sc, listeners)) => {
            let control: Arc<dyn hotstore_server::RecordControl> =
                Arc::new(Control(recorder.handle()));
            let s = hotstore_server::spawn_bound(sc, store.clone(), Some(control), listeners)
                .map_err(|e| err(format!("cannot serve: {e}")))?;
            log!(
                "hotstore record: serving on {} (RECORD.TRIGGER, RECORD.STATUS)",
                s.tcp_addr()
            );
            Some(s)
        }
        None => None,
    };

    let source_stop = Arc::new(AtomicBool::new(false));
    let handle = recorder.handle();
    let src = {
        let stop = source_stop.clone();
        let h = handle.clone();
        let rate = a.rate_per_link;
        let sockets = match &udp {
            Some(addrs) => Some(bind_udp(addrs).map_err(err)?),
            None => None,
        };
        if let Some(addrs) = &udp {
            log!(
                "receiving on {}",
                addrs
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
        std::thread::Builder::new()
            .name("rec-source".into())
            .spawn(move || -> Result<String, String> {
                match sockets {
                    Some(s) => run_udp(&h, &s, &stop)
                        .map(|st| {
                            format!(
                                "udp: {} datagrams, {} of the wrong size",
                                st.datagrams, st.wrong_size
                            )
                        })
                        .map_err(|e| e.to_string()),
                    None => run_generator(
                        &h,
                        &GeneratorConfig {
                            links: h.config().links,
                            frame_len: h.config().frame_len,
                            rate_per_link: rate,
                            duration: None,
                        },
                        &stop,
                    )
                    .map(|st| {
                        format!(
                            "generator: {} frames per link, largest lag behind schedule {:.1} ms",
                            st.frames,
                            st.max_lag_secs * 1e3
                        )
                    })
                    .map_err(|e| e.to_string()),
                }
            })
            .map_err(|e| err(format!("spawn source: {e}")))?
    };
    if udp.is_none() {
        // The run's clock starts when the generator's frames flow: it first builds a pattern
        // per link (about 0.2 MB each), which took longer than the default trigger's 0.5 s
        // with 1000 links on a loaded machine, so the trigger's window ended before the first
        // frame, stamped after it (found once empty recordings were no longer `complete`).
        // Not a timing assumption: it waits for the first frame, the source's end, or a stop.
        while handle.sample_now().frames_in == 0
            && !src.is_finished()
            && !STOP.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    let t0 = Instant::now();
    // A scripted trigger is stamped at its scheduled time, t0 + --trigger-at, not when the
    // 20 ms loop below gets to it (review: triggers asked 10 ms apart were stamped 24 ms
    // apart, one asked at 8.02 s at 8.06 s, since each trigger also waits for a manifest's
    // fsync).
    let t0_ns = hotstore_recorder::now_ns();
    let mut next_trigger = 0;
    let mut last_progress = Instant::now();
    let mut last_sample = handle.sample_now();
    let mut warned_drops = 0u64;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = t0.elapsed().as_secs_f64();
        while next_trigger < triggers.len() && elapsed >= triggers[next_trigger] {
            let at_ns = t0_ns.saturating_add((triggers[next_trigger] * 1e9) as u64);
            let t = handle.trigger_at(at_ns).map_err(err)?;
            log!(
                "trigger at {elapsed:.2} s: recording {} {}",
                t.recording_id,
                if t.extended { "extended" } else { "started" }
            );
            next_trigger += 1;
        }
        if USR1.swap(false, Ordering::SeqCst) {
            let t = handle.trigger().map_err(err)?;
            log!(
                "SIGUSR1 trigger at {elapsed:.2} s: recording {} {}",
                t.recording_id,
                if t.extended { "extended" } else { "started" }
            );
        }
        if let Some(f) = handle.failure() {
            log!("hotstore record: the recorder failed: {f}");
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            let s = handle.sample_now();
            let dt = (s.t_secs - last_sample.t_secs).max(1e-9);
            if s.frames_dropped > warned_drops {
                log!(
                    "hotstore record: WARNING: DROPPING FRAMES: the DRAM bound is reached; {} frames dropped so far (per link: {:?})",
                    s.frames_dropped,
                    handle.dropped_per_link()
                );
                warned_drops = s.frames_dropped;
            }
            log!(
                "{:6.1} s  in {}/s  out {}/s  backlog {}  dropped {}  recordings {}",
                elapsed,
                human_bytes((s.bytes_in - last_sample.bytes_in) as f64 / dt),
                human_bytes((s.bytes_out - last_sample.bytes_out) as f64 / dt),
                human_bytes(s.backlog_bytes as f64),
                s.frames_dropped,
                handle.recording_ids().len()
            );
            last_sample = s;
            last_progress = Instant::now();
        }
        let triggers_done = next_trigger >= triggers.len() && !a.no_trigger;
        if triggers_done && handle.all_recordings_finished() {
            break;
        }
        if a.duration.is_some_and(|d| elapsed >= d) || STOP.load(Ordering::SeqCst) {
            break;
        }
    }
    source_stop.store(true, Ordering::SeqCst);
    let source_line = src
        .join()
        .map_err(|_| err("the source thread panicked"))?
        .map_err(err)?;
    if let Some(s) = server {
        let stopped = s.shutdown();
        // The server's connections are closed (its runtime is shut down): back to the default
        // SIGPIPE of a command-line tool for the summary on stdout (see `main`).
        crate::util::sigpipe_default();
        stopped.map_err(|e| err(format!("stopping the server: {e}")))?;
    }
    let report = recorder.finish().map_err(err)?;
    let stats = store.stats();
    let stored_is_durable = matches!(a.durability, crate::DurabilityArg::Memory)
        || stats.tiers.iter().all(|t| !t.survives_power_cut);
    drop(store);
    if stats.tiers.len() > 1 && !a.json {
        for (i, t) in stats.tiers.iter().enumerate() {
            println!(
                "tier {i}: {} live in {}; {} offloaded to the tier below, {} received from above",
                human_bytes(t.live_bytes as f64),
                t.path.display(),
                human_bytes(t.offloaded_out_bytes as f64),
                human_bytes(t.offloaded_in_bytes as f64)
            );
        }
    }
    let stopped_at = t0.elapsed().as_secs_f64();
    summarize(
        &a,
        &report,
        limit.as_ref(),
        bound,
        &source_line,
        stored_is_durable,
        (stopped_at, triggers.first().copied()),
    )
}

/// The default `--slice`, in seconds.
const DEFAULT_SLICE: f64 = 0.01;

/// Refuses, before anything is created, options that would be silently ignored or misread, or
/// that the machine cannot hold. Returns the slice length (seconds).
fn check_options(a: &RunArgs, bound: u64, ring_per_link: u64) -> CliResult<f64> {
    if a.capacity == Some(0) {
        return fail(
            "--capacity 0: a store of 0 bytes holds nothing; omit --capacity for an unbounded store",
        );
    }
    if a.offload_to.is_some() && a.capacity.is_none() {
        return fail(
            "--offload-to needs a bounded first tier: give --capacity (the first tier's size; \
             its oldest slices move to --offload-to once it is --offload-at full), or omit \
             --offload-to for a one-tier store",
        );
    }
    // Every slice of a link is one store record padded to a multiple of 4 KiB (and one event
    // to seal): a slice shorter than one frame or one 4 KiB block of a link's data stores
    // mostly padding, one write per frame or less, and empty slices in between.
    let min_bytes = (a.frame_size as f64).max(4096.0);
    let min_slice = min_bytes / a.rate_per_link;
    // Rounded up to the microsecond, so the value suggested passes.
    let suggest = (min_slice * 1e6).ceil() / 1e6;
    let what = if a.frame_size >= 4096 { "one" } else { "4 KiB" };
    let slice = match a.slice {
        Some(s) => s,
        None if DEFAULT_SLICE < min_slice => {
            log!(
                "hotstore record: note: --slice: the default {DEFAULT_SLICE} s holds less than {what} of a link's frames at --rate-per-link {}; slices of {suggest} s instead",
                decimal_rate(a.rate_per_link)
            );
            suggest
        }
        None => DEFAULT_SLICE,
    };
    if slice < min_slice {
        return fail(format!(
            "--slice {} s is too short: at --rate-per-link {} a link sends one {}-byte frame \
             every {:.3} ms, and each slice is stored as one record padded to 4 KiB, so a slice \
             must hold at least {} of a link's frames ({:.6} s): give --slice {suggest} or \
             more (default {DEFAULT_SLICE})",
            slice,
            decimal_rate(a.rate_per_link),
            a.frame_size,
            a.frame_size as f64 / a.rate_per_link * 1e3,
            what,
            min_slice
        ));
    }
    let need = hotstore_recorder::mem::ring_bytes(a.links, a.frame_size as usize, ring_per_link);
    if let Some(avail) = hotstore_recorder::mem::available() {
        if need > avail.bytes {
            let set_by = if a.dram_bound.is_some() {
                "--dram-bound".to_string()
            } else {
                format!(
                    "the default --dram-bound, 2 x --pre {} s x --rate-per-link {} x --links {}",
                    a.pre,
                    decimal_rate(a.rate_per_link),
                    a.links
                )
            };
            return fail(format!(
                "the rings would take {} ({} of frames over {} link(s), and 8 bytes of timestamp \
                 per frame), more than the {} of memory available ({}); set by {set_by}: lower \
                 --dram-bound, --pre, --rate-per-link or --links",
                human_bytes(need as f64),
                human_bytes(bound as f64),
                a.links,
                human_bytes(avail.bytes as f64),
                avail.source
            ));
        }
    }
    Ok(slice)
}

/// A rate in the decimal units `--rate-per-link` is usually given in (50 MB/s).
fn decimal_rate(bytes_per_sec: f64) -> String {
    let (v, unit) = match bytes_per_sec {
        r if r >= 1e9 => (r / 1e9, "GB/s"),
        r if r >= 1e6 => (r / 1e6, "MB/s"),
        r if r >= 1e3 => (r / 1e3, "KB/s"),
        r => (r, "B/s"),
    };
    format!("{} {unit}", (v * 1000.0).round() / 1000.0)
}

struct Totals {
    frames_in: u64,
    frames_recorded: u64,
    frames_dropped: u64,
    bytes_written: u64,
    write_secs: f64,
    backlog_peak: u64,
    input_rate: f64,
    /// Frame bytes made durable per second while a backlog existed (never waiting for
    /// input): the sustained recording bandwidth the device allows.
    busy_rate: Option<f64>,
}

/// `stored_is_durable`: a store call already gives all the durability there is (`Memory`
/// durability, or a tier that does not survive a power cut, where `Persisted` is `Memory`).
fn totals(r: &RecorderReport, stored_is_durable: bool) -> Totals {
    let frames_recorded: u64 = r.recordings.iter().map(|m| m.frames_recorded()).sum();
    let frames_dropped: u64 = r.recordings.iter().map(|m| m.frames_dropped()).sum();
    let bytes_written = r.write_windows.iter().map(|w| w.1).sum();
    let write_secs = r.write_windows.iter().map(|w| w.2).sum();
    // Input rate over the whole run (the sources run steadily).
    let input_rate = match (r.samples.first(), r.samples.last()) {
        (Some(a), Some(b)) if b.t_secs > a.t_secs => {
            (b.bytes_in - a.bytes_in) as f64 / (b.t_secs - a.t_secs)
        }
        _ => 0.0,
    };
    let backlog_peak = r.samples.iter().map(|s| s.backlog_bytes).max().unwrap_or(0);
    // Frame bytes the recordings need that are not durable yet: in the rings, or stored but
    // not covered by a commit. While that is a real backlog (above a quarter of its peak, well
    // above the slices being filled) the writers and the syncs never wait for input, and the
    // growth of the durable bytes is the sustained recording bandwidth.
    let durable = |s: &hotstore_recorder::Sample| {
        if stored_is_durable {
            s.bytes_out
        } else {
            s.bytes_durable
        }
    };
    let pending =
        |s: &hotstore_recorder::Sample| s.backlog_bytes + s.bytes_out.saturating_sub(durable(s));
    let busy_floor = (r.samples.iter().map(pending).max().unwrap_or(0) / 4).max(1);
    let (mut busy_bytes, mut busy_secs) = (0u64, 0f64);
    // An interval counts when it starts with a backlog: the writers and syncs had work for
    // it. Not "starts and ends with one": durable bytes grow only when a commit returns, and
    // that is the moment the backlog falls below the floor, so such a rule counted the
    // waiting for a group commit and never the bytes it made durable (review: a burst of
    // the pre-trigger window gave "sustained: 0 B/s" and a ratio of 0).
    for w in r.samples.windows(2) {
        if pending(&w[0]) >= busy_floor {
            busy_bytes += durable(&w[1]).saturating_sub(durable(&w[0]));
            busy_secs += w[1].t_secs - w[0].t_secs;
        }
    }
    Totals {
        busy_rate: (busy_secs >= 0.2).then(|| busy_bytes as f64 / busy_secs),
        frames_in: frames_recorded + frames_dropped,
        frames_recorded,
        frames_dropped,
        bytes_written,
        write_secs,
        backlog_peak,
        input_rate,
    }
}

fn summarize(
    a: &RunArgs,
    r: &RecorderReport,
    limit: Option<&limits::Limit>,
    bound: u64,
    source_line: &str,
    stored_is_durable: bool,
    (stopped_at, first_trigger): (f64, Option<f64>),
) -> CliResult<ExitCode> {
    let t = totals(r, stored_is_durable);
    let recorded = !r.recordings.is_empty();
    let mean_write_rate = t.bytes_written as f64 / t.write_secs.max(1e-9);
    // The sustained rate if the writers were ever busy long enough to measure it; otherwise
    // they kept up with the input and the mean is what the input allowed.
    let write_rate = t.busy_rate.unwrap_or(mean_write_rate);
    // DUNE Fig. 6: the pre-trigger window is backlog at the trigger, then the backlog grows at
    // (input - output) for the post-trigger window.
    let pre_bytes = t.input_rate * a.pre;
    let model = pre_bytes + (t.input_rate - write_rate).max(0.0) * a.post;
    // Nothing recorded: there is no write rate to compare (a ratio of 0 would read as a
    // device that wrote nothing).
    let ratio = limit
        .filter(|_| recorded)
        .map(|l| write_rate / l.bytes_per_sec);
    if let Some(path) = &a.plot {
        let triggers: Vec<f64> = r
            .recordings
            .iter()
            .flat_map(|m| m.triggers_ns.iter())
            .map(|&ns| ns.saturating_sub(r.started_unix_ns) as f64 / 1e9)
            .collect();
        hotstore_bench::recorder_plot::plot(
            path,
            &r.samples,
            &triggers,
            write_rate,
            t.input_rate,
            bound,
        )
        .map_err(|e| err(format!("plot {}: {e}", path.display())))?;
    }
    let all_complete = !r.recordings.is_empty()
        && r.recordings
            .iter()
            .all(|m| m.state == RecordingState::Complete && !m.lossy);
    if a.json {
        let v = json!({
            "recording_id": r.recordings.first().map(|m| m.recording_id),
            "recordings": r.recordings,
            "frames_in": t.frames_in,
            "frames_recorded": t.frames_recorded,
            "frames_dropped": t.frames_dropped,
            "frames_dropped_total": r.frames_dropped,
            "frames_offered_total": r.frames_offered,
            "bytes_written": t.bytes_written,
            "write_secs": t.write_secs,
            "write_bytes_per_sec": write_rate,
            "write_bytes_per_sec_is_sustained": t.busy_rate.is_some(),
            "mean_write_bytes_per_sec": mean_write_rate,
            "input_bytes_per_sec": t.input_rate,
            "backlog_peak_bytes": t.backlog_peak,
            "backlog_model_bytes": model,
            "dram_bound_bytes": bound,
            "limit_name": limit.map(|l| l.name.clone()),
            "limit_bytes_per_sec": limit.map(|l| l.bytes_per_sec),
            "ratio": ratio,
            "complete": all_complete,
            "source": source_line,
            "links": a.links,
            "frame_size": a.frame_size,
            "store": a.store,
        });
        println!("{v}");
    } else {
        println!("{source_line}");
        if !recorded {
            match first_trigger {
                Some(at) if at > stopped_at => println!(
                    "recording: none: the run stopped at {stopped_at:.1} s, before the trigger at \
                     {at:.1} s; give a longer --duration (at least {:.1} s) or an earlier --trigger-at",
                    at + a.post + 0.5
                ),
                _ => println!(
                    "recording: none: no trigger arrived before the run stopped at {stopped_at:.1} s"
                ),
            }
        }
        for m in &r.recordings {
            println!(
                "recording {}: {:?}{}, {} triggers, {:.2} s window, {} slices, {} frames stored, {} dropped",
                m.recording_id,
                m.state,
                if m.lossy { " (LOSSY)" } else { "" },
                m.triggers_ns.len(),
                m.end_ns.saturating_sub(m.start_ns) as f64 / 1e9,
                m.slices_durable,
                m.frames_recorded(),
                m.frames_dropped()
            );
            if m.state == RecordingState::Empty {
                println!("  EMPTY: not one frame of the window is stored (see the notes below)");
            }
            if m.interrupted {
                println!("  interrupted: its recorder stopped without closing it");
            }
            for n in &m.notes {
                println!("  note: {n}");
            }
        }
        if r.frames_dropped > t.frames_dropped {
            // The progress lines count every drop since the start; the recordings only those
            // inside their windows. Say why the two differ.
            println!(
                "dropped: {} frames in all (the progress lines' count), {} inside a recording \
                 window (above); the other {} fell outside every window, where nothing is stored",
                r.frames_dropped,
                t.frames_dropped,
                r.frames_dropped - t.frames_dropped
            );
        }
        if t.bytes_written == 0 {
            println!("written: nothing (input {}/s)", human_bytes(t.input_rate));
        } else {
            println!(
                "written: {} in {:.2} s = {}/s mean (input {}/s)",
                human_bytes(t.bytes_written as f64),
                t.write_secs,
                human_bytes(mean_write_rate),
                human_bytes(t.input_rate)
            );
        }
        match t.busy_rate {
            Some(b) => println!(
                "sustained: {}/s of frames made durable while a backlog existed",
                human_bytes(b)
            ),
            None if recorded => {
                println!("sustained: the writers kept up with the input (no backlog)")
            }
            None => {}
        }
        println!(
            "backlog: peak {} (model {}; bound {})",
            human_bytes(t.backlog_peak as f64),
            human_bytes(model),
            human_bytes(bound as f64)
        );
        if let Some(l) = limit {
            println!("limit:   {}: {}/s", l.name, human_bytes(l.bytes_per_sec));
        }
        if let Some(ratio) = ratio {
            println!("ratio:   {ratio:.3} of the limit");
        }
        println!(
            "verify:  hotstore record verify {}",
            a.store
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
    }
    Ok(if all_complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::util::EXIT_DAMAGE)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotstore_recorder::Sample;

    fn sample(t_secs: f64, backlog: u64, out: u64, durable: u64) -> Sample {
        Sample {
            t_secs,
            frames_in: 0,
            bytes_in: 0,
            bytes_out: out,
            bytes_durable: durable,
            backlog_bytes: backlog,
            frames_dropped: 0,
        }
    }

    /// The pre-trigger window (8 MB) is pinned at the trigger, copied out at once, and made
    /// durable by one group commit 0.3 s later; the writers then wait for input.
    #[test]
    fn a_burst_made_durable_by_one_commit_gives_a_nonzero_sustained_rate() {
        const M: u64 = 8 << 20;
        let mut samples = vec![sample(0.0, 0, 0, 0), sample(0.05, M, 0, 0)];
        for i in 2..8 {
            samples.push(sample(i as f64 * 0.05, 0, M, 0));
        }
        for i in 8..20 {
            samples.push(sample(i as f64 * 0.05, 0, M, M));
        }
        let r = RecorderReport {
            recordings: Vec::new(),
            samples,
            frames_offered: 0,
            frames_dropped: 0,
            started_unix_ns: 0,
            write_windows: Vec::new(),
        };
        let t = totals(&r, false);
        let rate = t.busy_rate.expect("0.35 s with a backlog");
        assert!(
            rate > 0.0,
            "{rate} B/s sustained, though 8 MiB were made durable in 0.35 s"
        );
        assert!((rate - M as f64 / 0.35).abs() < 1e3, "{rate}");
    }
}
