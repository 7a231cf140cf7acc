//! `hotstore bench device` and `hotstore bench model`, run as a user would: every access method
//! for a short time on a temporary directory, bad input, the fio comparison (fio is installed by
//! `scripts/test`; these tests fail, not skip, without it), and the models against hand-computed
//! values.
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

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

/// A short, small run: 0.1 s per point after 0.05 s of warm-up, 1 thread, 16 MiB of files,
/// unless `extra` sets those options itself.
fn device(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["bench", "device", "--path", dir.to_str().unwrap()];
    for (opt, default) in [
        ("--duration", "0.1"),
        ("--warmup", "0.05"),
        ("--repeat", "1"),
        ("--threads", "1"),
        ("--file-size", "16M"),
    ] {
        if !extra.contains(&opt) {
            args.extend([opt, default]);
        }
    }
    args.extend_from_slice(extra);
    hotstore(&args)
}

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results list")
}

fn find<'a>(v: &'a Value, method: &str, workload: &str, block: u64) -> &'a Value {
    results(v)
        .iter()
        .find(|r| r["method"] == method && r["workload"] == workload && r["block_size"] == block)
        .unwrap_or_else(|| panic!("no result for {method} {workload} {block}: {v}"))
}

/// A disk-backed temporary directory where there is one (/var/tmp), else the default.
fn disk_tempdir() -> tempfile::TempDir {
    if Path::new("/var/tmp").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/var/tmp") {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

#[test]
fn every_method_reports_plausible_verified_numbers() {
    let dir = disk_tempdir();
    let out = device(dir.path(), &["--block-size", "256,4K", "--json"]);
    let v = json_of(&out);
    for m in ["write", "direct", "uring", "mmap", "mmap-nt", "dsync"] {
        for w in ["seq-write", "seq-read", "rand-write"] {
            if w == "seq-read" && (m == "mmap-nt" || m == "dsync") {
                // No read path of their own: not run, and said so in the notes.
                assert!(results(&v)
                    .iter()
                    .all(|r| !(r["method"] == m && r["workload"] == w)));
                continue;
            }
            let r = find(&v, m, w, 4096);
            if m == "uring" && r["status"] == "unavailable" {
                // io_uring refused (e.g. seccomp in a container): reported, not an error.
                assert!(r["reason"].as_str().unwrap().contains("io_uring"), "{r}");
                continue;
            }
            assert_eq!(r["status"], "ok", "{r}");
            let bps = r["bytes_per_sec"].as_f64().unwrap();
            let iops = r["iops"].as_f64().unwrap();
            assert!(bps > 0.0 && bps < 1e12, "{r}");
            assert!((iops - bps / 4096.0).abs() <= 1e-6 * iops, "{r}");
            assert_eq!(r["verified"], true, "{r}");
            assert_eq!(r["includes_sync"], w != "seq-read", "{r}");
            assert_eq!(r["threads"], 1);
        }
    }
    // O_DIRECT cannot do 256-byte requests on a disk or tmpfs: skipped with the reason.
    for m in ["direct", "uring"] {
        let r = find(&v, m, "seq-write", 256);
        if r["status"] != "unavailable" {
            assert_eq!(r["status"], "skipped", "{r}");
            assert!(r["reason"].as_str().unwrap().contains("O_DIRECT"), "{r}");
        }
    }
    // Buffered and mapped 256-byte requests work.
    assert_eq!(find(&v, "write", "seq-write", 256)["status"], "ok");
    assert_eq!(find(&v, "mmap-nt", "rand-write", 256)["status"], "ok");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("mmap-nt") && notes.contains("dsync"),
        "{notes}"
    );
    // The temporary directory under --path is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn table_csv_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    let plots = dir.path().join("plots");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let out = device(
        &work,
        &[
            "--method",
            "write,mmap",
            "--workload",
            "seq-write",
            "--block-size",
            "4K,64K",
            "--threads",
            "1,2",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            plots.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("throughput") && stdout.contains("req/s"),
        "{stdout}"
    );
    assert!(stdout.contains("fdatasync"), "{stdout}");
    // Papers' grid: 4K and 64K at 1 thread, the thread sweep at 4K.
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("workload,method,block_size,threads,status,bytes_per_sec"));
    assert_eq!(lines.len(), 1 + 2 * 3, "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("seq-write,mmap,4096,2,ok,")),
        "{text}"
    );
    // The progress lines go to stderr, one per point.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with('[')).count(),
        6,
        "{stderr}"
    );
    // PNGs, if the chart font is installed (CI installs it).
    if Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists() {
        for name in [
            "device-seq-write-threads.png",
            "device-seq-write-blocks.png",
        ] {
            let bytes = std::fs::read(plots.join(name)).unwrap();
            assert_eq!(&bytes[1..4], b"PNG");
        }
    }
}

#[test]
fn bad_input_is_exit_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--path", p, "--method", "pmdk"], "unknown method `pmdk`"),
        (&["--path", p, "--workload", "seq-fly"], "unknown workload"),
        (&["--path", p, "--block-size", "0"], "block size"),
        (&["--path", p, "--block-size", "4K,,1M"], "empty item"),
        (
            &["--path", p, "--block-size", "12parsecs"],
            "unknown size unit",
        ),
        (&["--path", p, "--threads", "0"], "thread count"),
        (&["--path", p, "--repeat", "0"], "--repeat"),
        (&["--path", p, "--iodepth", "0"], "--iodepth"),
        (&["--path", p, "--duration", "0"], "positive"),
        (&["--path", p, "--file-size", "1K"], "--file-size"),
        (
            &["--path", "/nonexistent/hotstore"],
            "not an existing directory",
        ),
    ];
    for (args, want) in cases {
        let mut a = vec!["bench", "device"];
        a.extend_from_slice(args);
        let out = hotstore(&a);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: want `{want}` in {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    for (args, want) in [
        (&["--input", "fast"][..], "not a rate"),
        (&["--input", "10GB/s", "--duration", "100s"][..], "--output"),
        (
            &["--data-size", "1GB", "--read-rate", "1GB/s"][..],
            "--write-rate",
        ),
        (&[][..], "give --input"),
        (
            &["--input", "1GB/s", "--output", "1GB/s,x", "--duration", "1"][..],
            "--output",
        ),
    ] {
        let mut a = vec!["bench", "model"];
        a.extend_from_slice(args);
        let out = hotstore(&a);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: want `{want}` in {stderr}");
    }
}

#[test]
fn fio_comparison_on_a_small_size() {
    let dir = disk_tempdir();
    let out = device(
        dir.path(),
        &[
            "--method",
            "write,direct,mmap-nt",
            "--workload",
            "seq-write,seq-read",
            "--block-size",
            "64K",
            "--duration",
            "0.2",
            "--vs-fio",
            "--json",
        ],
    );
    let v = json_of(&out);
    assert!(
        v["fio_version"].as_str().unwrap().starts_with("fio-"),
        "{v}"
    );
    for (m, w) in [
        ("write", "seq-write"),
        ("write", "seq-read"),
        ("direct", "seq-write"),
        ("direct", "seq-read"),
    ] {
        let r = find(&v, m, w, 65536);
        assert_eq!(r["status"], "ok", "{r}");
        let ours = r["bytes_per_sec"].as_f64().unwrap();
        let fio = r["fio_bytes_per_sec"].as_f64().unwrap();
        let ratio = r["ratio"].as_f64().unwrap();
        assert!(fio > 0.0, "{r}");
        assert!((ratio - ours / fio).abs() < 1e-9 * ratio, "{r}");
    }
    let nt = find(&v, "mmap-nt", "seq-write", 65536);
    assert!(nt["fio_bytes_per_sec"].is_null());
    assert!(
        nt["fio_note"].as_str().unwrap().contains("no non-temporal"),
        "{nt}"
    );
}

#[test]
fn model_matches_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("backlog.png");
    let v = json_of(&hotstore(&[
        "bench",
        "model",
        "--input",
        "10GB/s",
        "--output",
        "1.2GB/s,5GB/s,12GB/s",
        "--duration",
        "100s",
        "--data-size",
        "76GB",
        "--read-rate",
        "2GB/s",
        "--write-rate",
        "500MB/s",
        "--dram",
        "440GB",
        "--plot",
        png.to_str().unwrap(),
        "--json",
    ]));
    let outs = v["backlog"]["outputs"].as_array().unwrap();
    let dram: Vec<f64> = outs
        .iter()
        .map(|o| o["extra_dram_bytes"].as_f64().unwrap())
        .collect();
    // (10 - 1.2) GB/s x 100 s = 880 GB; (10 - 5) x 100 = 500 GB (the DUNE paper's example);
    // an output faster than the input needs nothing.
    assert!((dram[0] - 880e9).abs() < 1.0, "{dram:?}");
    assert!((dram[1] - 500e9).abs() < 1.0, "{dram:?}");
    assert_eq!(dram[2], 0.0);
    // 440 GB of DRAM lasts 440 / 8.8 = 50 s and 440 / 5 = 88 s; it never fills at 12 GB/s.
    let full: Vec<Option<f64>> = outs.iter().map(|o| o["secs_until_full"].as_f64()).collect();
    assert!((full[0].unwrap() - 50.0).abs() < 1e-9, "{full:?}");
    assert!((full[1].unwrap() - 88.0).abs() < 1e-9, "{full:?}");
    assert_eq!(full[2], None);
    // 76 GB / 2 GB/s + 76 GB / 0.5 GB/s = 38 s + 152 s = 190 s.
    let m = &v["makespan"];
    assert!(
        (m["read_secs"].as_f64().unwrap() - 38.0).abs() < 1e-9,
        "{m}"
    );
    assert!(
        (m["write_secs"].as_f64().unwrap() - 152.0).abs() < 1e-9,
        "{m}"
    );
    assert!(
        (m["bound_secs"].as_f64().unwrap() - 190.0).abs() < 1e-9,
        "{m}"
    );
    if Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists() {
        assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
    }

    // Binary units are powers of 1024: (2 GiB/s - 1 GiB/s) x 10 s = 10 GiB.
    let out = hotstore(&[
        "bench",
        "model",
        "--input",
        "2GiB/s",
        "--output",
        "1GiB/s",
        "--duration",
        "10",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("= 10.74 GB (10.00 GiB)"), "{text}");
}

#[test]
fn model_measures_a_directory() {
    let dir = disk_tempdir();
    let v = json_of(&hotstore(&[
        "bench",
        "model",
        "--input",
        "100TB/s",
        "--output-path",
        dir.path().to_str().unwrap(),
        "--duration",
        "1s",
        "--data-size",
        "1GB",
        "--path",
        dir.path().to_str().unwrap(),
        "--measure-duration",
        "0.1",
        "--measure-size",
        "16M",
        "--json",
    ]));
    let out = &v["backlog"]["outputs"][0];
    let w = out["output_bytes_per_sec"].as_f64().unwrap();
    assert!(w > 0.0, "{out}");
    assert!(
        out["source"].as_str().unwrap().starts_with("measured"),
        "{out}"
    );
    let extra = out["extra_dram_bytes"].as_f64().unwrap();
    assert!((extra - (100e12 - w)).abs() < 1e-6 * extra, "{out}");
    let m = &v["makespan"];
    let r = m["read"]["bytes_per_sec"].as_f64().unwrap();
    let wr = m["write"]["bytes_per_sec"].as_f64().unwrap();
    assert!(r > 0.0 && wr > 0.0, "{m}");
    let bound = m["bound_secs"].as_f64().unwrap();
    assert!((bound - (1e9 / r + 1e9 / wr)).abs() < 1e-9 * bound, "{m}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
