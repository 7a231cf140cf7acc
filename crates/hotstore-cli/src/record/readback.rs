//! `record verify` and `record export`: the command-line face of the recorder's readback.

use crate::util::{CliError, CliResult, EXIT_DAMAGE};
use hotstore::Store;
use hotstore_bench::util::human_bytes;
use hotstore_recorder::manifest;
use std::path::Path;
use std::process::ExitCode;

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::Msg(e.to_string())
}

/// Opens an existing store; the engine refuses any other path without creating anything
/// there, with the same messages as `inspect`, `dump` and `verify`.
fn open(dir: &Path) -> CliResult<Store> {
    Ok(Store::builder(dir).create_if_missing(false).open()?)
}

/// Verifies one or every recording; exit 0 only if all are complete and intact.
pub fn verify(dir: &Path, recording: Option<u32>, json: bool) -> CliResult<ExitCode> {
    let store = open(dir)?;
    let ids = match recording {
        Some(id) => vec![id],
        None => manifest::list(dir).map_err(err)?,
    };
    if ids.is_empty() {
        return Err(err(format!("{} holds no recording", dir.display())));
    }
    let mut all_good = true;
    let mut reports = Vec::new();
    for id in ids {
        let r = hotstore_recorder::verify(&store, id).map_err(err)?;
        all_good &= r.complete;
        if !json {
            println!("{}", r.verdict);
            println!(
                "  manifest: {:?}{}, window {:.3} s, {} slices durable, {} fragments found",
                r.manifest.state,
                if r.manifest.lossy { " LOSSY" } else { "" },
                r.manifest.end_ns.saturating_sub(r.manifest.start_ns) as f64 / 1e9,
                r.manifest.slices_durable,
                r.fragments
            );
            for l in &r.links {
                println!(
                    "  link {:4}: {} frames ({} checked), seq {}..{}, manifest {} durable, {} dropped, {} gaps",
                    l.link,
                    l.frames,
                    l.checked_frames,
                    l.first_seq.map_or("-".into(), |s| s.to_string()),
                    l.last_seq.map_or("-".into(), |s| s.to_string()),
                    l.manifest_frames,
                    l.manifest_dropped,
                    l.gaps.len()
                );
                for g in &l.gaps {
                    println!(
                        "    gap: frames {}..={} ({} missing)",
                        g.first, g.last, g.frames
                    );
                }
                for b in &l.bad_frames {
                    println!(
                        "    bad frame: slice {} part {} index {}: {}",
                        b.slice, b.part, b.index, b.fault
                    );
                }
                for m in &l.missing_slices {
                    println!("    missing: {m}");
                }
            }
            for b in &r.bad_fragments {
                println!("  bad fragment: {b}");
            }
        }
        reports.push(r);
    }
    if json {
        println!("{}", serde_json::to_string(&reports).map_err(err)?);
    }
    Ok(if all_good {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DAMAGE)
    })
}

/// Exports one recording's frames per link.
pub fn export(dir: &Path, recording: u32, out: &Path) -> CliResult<ExitCode> {
    let store = open(dir)?;
    let files = hotstore_recorder::export(&store, recording, out).map_err(err)?;
    let m = manifest::read(dir, recording).map_err(err)?;
    for (link, frames, path) in &files {
        println!(
            "link {link}: {frames} frames, {} -> {}",
            human_bytes((*frames * m.frame_len as u64) as f64),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
