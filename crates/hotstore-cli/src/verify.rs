//! `hotstore verify`: read every record of every segment file and check its checksum,
//! without trusting summaries. Damage is listed as `file:offset`; torn tails are notes.

use crate::util::{short_path, CliResult, Out, EXIT_DAMAGE};
use hotstore::{verify_dir, Damage, VerifyReport};
use hotstore_bench::util::human_bytes;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A file the engine created ahead of time (the ready pool) that was never written: all
/// zero, no header yet. `verify_dir` reports its missing header as damage; it holds nothing.
pub fn is_untouched_file(path: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) if buf[..n].iter().all(|&b| b == 0) => continue,
            _ => return false,
        }
    }
}

/// Splits the engine's damage list into real damage and never-written pre-allocated files.
fn reclassify(report: &mut VerifyReport) -> Vec<PathBuf> {
    let (untouched, damage): (Vec<Damage>, Vec<Damage>) = std::mem::take(&mut report.damage)
        .into_iter()
        .partition(|d| d.offset == 0 && is_untouched_file(&d.file));
    report.damage = damage;
    untouched.into_iter().map(|d| d.file).collect()
}

/// Verifies `dir`; exit status 0 if intact, 1 if damaged (errors are returned).
pub fn run(dir: &Path, json: bool) -> CliResult<ExitCode> {
    let mut report = verify_dir(dir)?;
    let untouched = reclassify(&mut report);
    let mut out = Out::new();
    if json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("dir".into(), serde_json::json!(dir));
            obj.insert("intact".into(), report.is_intact().into());
            obj.insert("untouched_files".into(), serde_json::json!(untouched));
        }
        out.line(serde_json::to_string(&v)?)?;
    } else {
        out.line(format_args!(
            "checked {} records, {} ({} bytes) in {} segment files ({} free, {} never written)",
            report.records_checked,
            human_bytes(report.bytes_checked as f64),
            report.bytes_checked,
            report.segments,
            report.segments_free,
            untouched.len()
        ))?;
        for d in &report.damage {
            out.line(format_args!(
                "DAMAGE {}:{} (+{} bytes): {}",
                short_path(&d.file, dir),
                d.offset,
                d.len,
                d.what
            ))?;
        }
        for (file, at) in &report.torn_tails {
            out.line(format_args!(
                "note: torn tail at {}:{at} (bytes after the last valid record: an interrupted write, or stale bytes of the file's previous use; not damage)",
                short_path(file, dir)
            ))?;
        }
        if report.is_intact() {
            out.line("intact")?;
        } else {
            out.line(format_args!(
                "DAMAGED: {} damaged range(s)",
                report.damage.len()
            ))?;
        }
    }
    out.flush()?;
    Ok(if report.is_intact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DAMAGE)
    })
}
