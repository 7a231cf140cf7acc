//! `hotstore bench pipeline` at a tiny size, run as a user would: every configuration's final
//! image is checked (the command checks every voxel and says so), the JSON keys, the figure,
//! bad sizes, and that nothing is left behind. No timing is asserted.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn hotstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hotstore"))
        .args(args)
        .output()
        .expect("run hotstore")
}

/// A directory on the disk where there is one (/var/tmp), else the system temp dir.
fn disk_tempdir() -> tempfile::TempDir {
    if Path::new("/var/tmp").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/var/tmp") {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// A directory on tmpfs where there is one (/dev/shm), else the system temp dir.
fn mem_tempdir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// 4 MiB image of 32 chunks (with edge chunks: 128 is not a multiple of 48), K = 3, every
/// configuration, R and W measured briefly, a plot.
#[test]
fn tiny_pipeline_is_correct_everywhere_and_reports_its_keys() {
    let disk = disk_tempdir();
    let mem = mem_tempdir();
    let out_dir = tempfile::tempdir().unwrap();
    let png = out_dir.path().join("pipeline.png");
    let out = hotstore(&[
        "bench",
        "pipeline",
        "--image",
        "128x128x128",
        "--chunk",
        "48x48x64",
        "--workers",
        "2",
        "-k",
        "3",
        "--disk-dir",
        disk.path().to_str().unwrap(),
        "--mem-dir",
        mem.path().to_str().unwrap(),
        // Room for the working set several times over: nothing spills to the disk tier (the
        // engine does not offload a memory-tier segment pinned on a disk-tier one, see
        // docs/benchmarks.md), so the drain empties the memory tier.
        "--fast-capacity",
        "32MiB",
        "--measure-duration",
        "0.05",
        "--measure-size",
        "4MiB",
        "--plot",
        png.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "geometry",
        "image_bytes",
        "chunks",
        "chunk_bytes",
        "workers",
        "iterations",
        "repeat",
        "data_bytes",
        "fast_capacity_bytes",
        "offload_high_water",
        "segment_size",
        "devices",
        "configs",
        "plot",
    ] {
        assert!(v.get(key).is_some(), "no {key} in {v}");
    }
    assert_eq!(v["image_bytes"], 128 * 128 * 128 * 2);
    assert_eq!(v["chunks"], 3 * 3 * 2);
    assert_eq!(v["data_bytes"], 3 * 128 * 128 * 128 * 2);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for d in devices {
        for key in [
            "device",
            "path",
            "read_bytes_per_sec",
            "write_bytes_per_sec",
        ] {
            assert!(d.get(key).is_some(), "no {key} in {d}");
        }
        assert!(d["bound"]["bound_secs"].as_f64().unwrap() > 0.0);
    }
    let configs = v["configs"].as_array().unwrap();
    let names: Vec<&str> = configs
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["disk", "disk-cached", "tmpfs", "tiered", "store-disk"]
    );
    for c in configs {
        assert_eq!(c["verified"], true, "{c}");
        assert_eq!(c["wrong_voxels"], 0, "{c}");
        assert!(c["makespan_secs"].as_f64().unwrap() > 0.0, "{c}");
        assert_eq!(c["iteration_secs"].as_array().unwrap().len(), 3, "{c}");
        assert!(c["bound_secs"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["promise"].as_str().unwrap().len() > 10, "{c}");
        assert_eq!(c["runs"].as_array().unwrap().len(), 1, "{c}");
        match c["name"].as_str().unwrap() {
            // tmpfs promises nothing on disk; the others are on disk at the end.
            "tmpfs" => assert!(c["durable_secs"].is_null(), "{c}"),
            "tiered" => {
                let run = &c["runs"][0];
                assert_eq!(run["drain_left_bytes"], 0, "{c}");
                assert!(
                    c["durable_secs"].as_f64().unwrap() >= c["makespan_secs"].as_f64().unwrap()
                );
                assert_eq!(run["tier_live_bytes"].as_array().unwrap().len(), 2, "{c}");
            }
            _ => assert_eq!(c["durable_secs"], c["makespan_secs"], "{c}"),
        }
    }
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    // Every temporary file and store is gone.
    assert!(
        entries(disk.path()).is_empty(),
        "{:?}",
        entries(disk.path())
    );
    assert!(entries(mem.path()).is_empty(), "{:?}", entries(mem.path()));
}

#[test]
fn text_output_has_the_table() {
    let disk = disk_tempdir();
    let mem = mem_tempdir();
    let out = hotstore(&[
        "bench",
        "pipeline",
        "--image-bytes",
        "1MiB",
        "--chunk",
        "32",
        "--configs",
        "tmpfs,tiered",
        // Room for the whole working set: no spill to the disk tier (a tombstone in the
        // memory tier that pins a disk-tier segment keeps its segment from offloading).
        "--fast-capacity",
        "16MiB",
        "--repeat",
        "2",
        "--no-measure",
        "--disk-dir",
        disk.path().to_str().unwrap(),
        "--mem-dir",
        mem.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("median of 2 runs"), "{text}");
    assert!(text.contains("makespan"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("tiered") && l.ends_with("ok")),
        "{text}"
    );
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(progress.contains("iteration 2/4"), "{progress}");
}

#[test]
fn bad_sizes_are_clear_errors() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["--image", "64x64x64", "--chunk", "128x8x8"],
            "larger than the image",
        ),
        (&["--image", "64x0x64", "--chunk", "8"], "0 voxels"),
        (&["--image", "64", "--chunk", "0x8x8"], "0 voxels"),
        (
            &["--image", "64", "--chunk", "8", "--workers", "0"],
            "--workers",
        ),
        (
            &["--image", "64", "--chunk", "8", "-k", "0"],
            "--iterations",
        ),
        (&["--image", "64x64", "--chunk", "8"], "XxYxZ"),
        (
            &["--image-bytes", "1", "--chunk", "8"],
            "smaller than one voxel",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["bench", "pipeline", "--no-measure"];
        all.extend_from_slice(args);
        let out = hotstore(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn help_explains_the_configurations_and_the_model() {
    let out = hotstore(&["bench", "pipeline", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "disk-cached",
        "tiered",
        "store-disk",
        "O_DIRECT",
        "M >= D/R + D/W",
        "--fast-capacity",
        "--repeat",
    ] {
        assert!(help.contains(word), "no {word} in --help");
    }
}
