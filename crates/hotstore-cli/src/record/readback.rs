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
/// there, with the same messages as `inspect`, `dump` and `verify`. Recordings left
/// `recording` by a recorder that no longer runs (this process holds the store's lock, so
/// none does) are closed first, and each is reported on stderr.
fn open(dir: &Path) -> CliResult<Store> {
    let store = Store::builder(dir).create_if_missing(false).open()?;
    for c in hotstore_recorder::close_interrupted(&store).map_err(err)? {
        eprintln!("hotstore record: {}", c.describe());
    }
    Ok(store)
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

/// Exports one recording as one HDF5 file.
#[cfg(feature = "hdf5")]
pub fn export_hdf5(dir: &Path, recording: u32, out: &Path) -> CliResult<ExitCode> {
    let store = open(dir)?;
    let x = hotstore_recorder::export_hdf5(&store, recording, out).map_err(err)?;
    let frames: u64 = x.links.iter().map(|l| l.1).sum();
    println!(
        "recording {recording}: {frames} frames on {} links in {} slices, {} of frames -> {} ({})",
        x.links.len(),
        x.slices,
        human_bytes(x.frame_bytes as f64),
        x.path.display(),
        human_bytes(x.file_bytes as f64)
    );
    Ok(ExitCode::SUCCESS)
}

/// Without the `hdf5` feature: says how to get a binary that has it.
#[cfg(not(feature = "hdf5"))]
pub fn export_hdf5(_dir: &Path, _recording: u32, _out: &Path) -> CliResult<ExitCode> {
    Err(err(HDF5_MISSING))
}

/// The message of `--format hdf5` in a binary built without HDF5.
#[cfg(not(feature = "hdf5"))]
pub const HDF5_MISSING: &str = "this hotstore was built without HDF5 support (the `hdf5` cargo \
feature, which links the system's libhdf5): install the library (Debian/Ubuntu: `apt-get install \
libhdf5-dev`) and rebuild with `cargo build --release -p hotstore-cli --features hdf5` (or \
`cargo install --path crates/hotstore-cli --features hdf5`); `--format raw` needs nothing more";
