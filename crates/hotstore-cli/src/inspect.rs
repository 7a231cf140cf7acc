//! `hotstore inspect`: what is in a store, where it lives, what survives what, and what
//! recovery found when opening it.

use crate::util::{short_path, CliResult, Out};
use hotstore::{RecoveryMode, RecoveryReport, Stats, Store};
use hotstore_bench::util::human_bytes;
use std::path::Path;

/// Opens the store in `dir` (never creating one; with `salvage`, even one whose recovery found
/// damage: see [`RecoveryMode::Salvage`]) and prints its figures.
pub fn run(dir: &Path, json: bool, salvage: bool) -> CliResult<()> {
    let mode = if salvage {
        RecoveryMode::Salvage
    } else {
        RecoveryMode::Strict
    };
    let store = Store::builder(dir)
        .create_if_missing(false)
        .recovery(mode)
        .open()?;
    let stats = store.stats();
    let report = store.recovery_report().clone();
    // Closing reports errors that dropping would hide.
    store.close()?;
    let mut out = Out::new();
    if json {
        out.line(serde_json::to_string(&to_json(dir, &stats, &report)?)?)?;
    } else {
        print_human(&mut out, dir, &stats, &report)?;
    }
    out.flush()
}

/// `{"dir", "stats": Stats (each tier with a `power_safety` sentence), "recovery": RecoveryReport}`.
fn to_json(dir: &Path, stats: &Stats, report: &RecoveryReport) -> CliResult<serde_json::Value> {
    let mut s = serde_json::to_value(stats)?;
    if let Some(tiers) = s.get_mut("tiers").and_then(|t| t.as_array_mut()) {
        for (t, ts) in tiers.iter_mut().zip(&stats.tiers) {
            if let Some(obj) = t.as_object_mut() {
                obj.insert("power_safety".into(), ts.power_safety().into());
            }
        }
    }
    let mut r = serde_json::to_value(report)?;
    if let Some(obj) = r.as_object_mut() {
        obj.insert("duration_secs".into(), report.duration.as_secs_f64().into());
    }
    Ok(serde_json::json!({
        "dir": dir,
        "stats": s,
        "recovery": r,
    }))
}

fn capacity(bytes: u64) -> String {
    if bytes == 0 {
        "unbounded (the file system decides)".into()
    } else {
        format!("{} ({bytes} bytes)", human_bytes(bytes as f64))
    }
}

fn print_human(out: &mut Out, dir: &Path, stats: &Stats, report: &RecoveryReport) -> CliResult<()> {
    let b = |n: u64| format!("{} ({n} bytes)", human_bytes(n as f64));
    out.line(format_args!("store        {}", dir.display()))?;
    out.line(format_args!("key layout   {}", stats.layout))?;
    out.line(format_args!("entries      {}", stats.entries))?;
    out.line(format_args!("live         {}", b(stats.live_bytes)))?;
    out.line(format_args!("dead         {}", b(stats.dead_bytes)))?;
    out.line(format_args!(
        "capacity     {}",
        capacity(stats.capacity_bytes)
    ))?;
    out.line(format_args!("files        {}", b(stats.file_bytes)))?;
    let (free, ready): (usize, usize) = stats.tiers.iter().fold((0, 0), |(f, r), t| {
        (f + t.segments_free, r + t.segments_ready)
    });
    out.line(format_args!(
        "segments     {} in use, {free} free, {ready} ready",
        stats.segments
    ))?;
    // An offline inspect opens the store itself: these are the waits of that open only.
    let w = &stats.waits;
    out.line(format_args!(
        "waits        segment {} ({:.3} s), full {} ({:.3} s), sync {} ({:.3} s)",
        w.segment.count,
        w.segment.total_ns as f64 / 1e9,
        w.full.count,
        w.full.total_ns as f64 / 1e9,
        w.sync.count,
        w.sync.total_ns as f64 / 1e9
    ))?;
    if stats.capacity_bytes > 0 {
        out.line(format_args!(
            "reserve      {} that puts leave for removals and relocation (about 1 1/8 segments); puts never find the store full while live data is at most {}",
            human_bytes(stats.reserve_bytes as f64),
            human_bytes(stats.guaranteed_live_bytes as f64)
        ))?;
    } else {
        out.line(format_args!(
            "reserve      {} kept as pooled segment files for removals and relocation (one segment and an eighth, in whole files); on a small file system prefer small segments",
            human_bytes(stats.reserve_bytes as f64)
        ))?;
    }
    let r = &stats.relocation;
    out.line(format_args!(
        "relocation   {} records ({}) moved to free dead space ({} of them removals copied forward), {} records ({}) offloaded, {} segment groups freed; write amplification {:.2}",
        r.records,
        human_bytes(r.bytes as f64),
        r.forwarded_records,
        r.offloaded_records,
        human_bytes(r.offloaded_bytes as f64),
        r.groups,
        stats.write_amplification()
    ))?;
    if r.errors > 0 {
        out.line(format_args!(
            "             {} background moves failed (the records stayed where they were); last: {}",
            r.errors,
            r.last_error.as_deref().unwrap_or("-")
        ))?;
    }
    if let Some(why) = &stats.poisoned {
        out.line(format_args!("READ-ONLY    {why}"))?;
    }
    for (i, t) in stats.tiers.iter().enumerate() {
        out.line(format_args!(
            "tier {i}       {} ({})",
            t.path.display(),
            t.domain
        ))?;
        out.line(format_args!("             {}", t.power_safety()))?;
        out.line(format_args!(
            "             bulk records: {}",
            match t.bulk_write_path {
                "direct" => "direct I/O (O_DIRECT) for their aligned interior",
                "buffered" => "buffered pwrite (this file system refused O_DIRECT)",
                _ => "copied through the mapping",
            }
        ))?;
        out.line(format_args!(
            "             capacity {}, files {}",
            capacity(t.capacity_bytes),
            human_bytes(t.file_bytes as f64)
        ))?;
        out.line(format_args!(
            "             segments {} in use, {} free, {} ready; live {}, dead {}",
            t.segments,
            t.segments_free,
            t.segments_ready,
            human_bytes(t.live_bytes as f64),
            human_bytes(t.dead_bytes as f64)
        ))?;
        if t.capacity_bytes > 0 {
            let fill = (t.live_bytes + t.dead_bytes) as f64 / t.capacity_bytes as f64;
            let offload = match t.offload_high_water {
                Some(h) if t.offloading => format!(
                    "above its offload mark of {:.0}%: its oldest sealed segments are moving to tier {}",
                    h * 100.0,
                    i + 1
                ),
                Some(h) => format!("offloads to tier {} above {:.0}%", i + 1, h * 100.0),
                None => "no offload".into(),
            };
            out.line(format_args!(
                "             filled {:.0}% (live and dead records); {offload}",
                fill * 100.0
            ))?;
        }
        if t.relocated_bytes + t.offloaded_out_bytes + t.offloaded_in_bytes > 0 {
            out.line(format_args!(
                "             moved since open: {} within, {} out to the tier below, {} in from above",
                human_bytes(t.relocated_bytes as f64),
                human_bytes(t.offloaded_out_bytes as f64),
                human_bytes(t.offloaded_in_bytes as f64)
            ))?;
        }
        if let Some(rate) = t.created.bytes_per_sec() {
            out.line(format_args!(
                "             files created since open: {} ({}) in {:.3} s, {}/s per creating thread",
                t.created.files,
                human_bytes(t.created.bytes as f64),
                t.created.total_ns as f64 / 1e9,
                human_bytes(rate)
            ))?;
        }
    }
    let r = report;
    out.line(format_args!(
        "recovery     {} segments from summary, {} scanned, {} free; {} records ({}) in {:.1} ms",
        r.segments_from_summary,
        r.segments_scanned,
        r.segments_free,
        r.records,
        human_bytes(r.record_bytes as f64),
        r.duration.as_secs_f64() * 1e3
    ))?;
    if r.torn_tails.is_empty() {
        out.line("torn tails   none")?;
    }
    for (file, at) in &r.torn_tails {
        let unsynced = r
            .unsynced_tails
            .iter()
            .find(|t| &t.file == file && t.offset == *at);
        match unsynced {
            Some(t) => out.line(format_args!(
                "torn tail    {}:{at} (unsynced writes a power cut or reboot left out of \
                 order, cut with {} intact record(s) after them{}; the cut bytes are kept in \
                 {})",
                short_path(file, dir),
                t.records,
                match t.flagged {
                    0 => String::new(),
                    n => format!(
                        ", {n} written as persisted whose sync never returned (acknowledged \
                         only if the device damaged bytes it had made durable)"
                    ),
                },
                short_path(&t.saved_to, dir)
            ))?,
            None => out.line(format_args!(
                "torn tail    {}:{at} (an interrupted last write, cut: expected after a crash)",
                short_path(file, dir)
            ))?,
        }
    }
    if r.skipped.is_empty() {
        out.line("skipped      none")?;
    }
    for (file, range) in &r.skipped {
        out.line(format_args!(
            "SKIPPED      {}:{} (+{} bytes of damage)",
            short_path(file, dir),
            range.start,
            range.end - range.start
        ))?;
    }
    for file in &r.missing_files {
        out.line(format_args!(
            "MISSING      {}: listed by the store but gone; its records are lost (opened with salvage)",
            short_path(file, dir)
        ))?;
    }
    for file in &r.unlisted_files {
        out.line(format_args!(
            "unlisted     {}: holds records the store's list did not name (an older build wrote it); recovered and listed",
            short_path(file, dir)
        ))?;
    }
    if r.segments_unused > 0 {
        out.line(format_args!(
            "unused       {} pre-allocated segment file(s), never written",
            r.segments_unused
        ))?;
    }
    for (file, why) in &r.bad_headers {
        out.line(format_args!(
            "BAD HEADER   {}: {why}",
            short_path(file, dir)
        ))?;
    }
    Ok(())
}
