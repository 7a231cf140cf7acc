//! Proves `hotstore minidaq` runs both modes end to end: JSON with the documented keys, every event collected with no integrity error, CSV samples and PNG plots written, and bad input refused with a clear error.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use std::process::Command;

fn minidaq(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hotstore"))
        .arg("minidaq")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn both_modes_report_json_csv_and_plot() {
    let tmp = tempfile::tempdir().unwrap();
    for mode in ["parallel", "fill-drain"] {
        let csv = tmp.path().join(format!("{mode}.csv"));
        let png = tmp.path().join(format!("{mode}.png"));
        let out = minidaq(&[
            "--mode",
            mode,
            "--events",
            "2000",
            "--fragment-size",
            "1KiB",
            "--detectors",
            "3",
            "--acceptance",
            "0.25",
            "--capacity",
            "256MiB",
            "--json",
            "--no-limit",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for path in [
            "/readout/ops_per_sec",
            "/readout/bytes_per_sec",
            "/collect/ops_per_sec",
            "/collect/bytes_per_sec",
            "/collect/events_per_sec",
            "/integrity_errors",
            "/limit_bytes_per_sec",
        ] {
            assert!(
                j.pointer(path).is_some_and(|v| v.is_number()),
                "{mode}: {path} missing"
            );
        }
        assert_eq!(j["events_written"], 2000, "{mode}");
        assert_eq!(j["events_collected"], 2000, "{mode}: every event collected");
        assert_eq!(j["integrity_errors"], 0);
        let kept = j["events_kept"].as_u64().unwrap();
        assert!(
            kept > 200 && kept < 800,
            "{mode}: acceptance 0.25 kept {kept} of 2000"
        );
        let text = std::fs::read_to_string(&csv).unwrap();
        assert!(text.starts_with("t_secs,") && text.lines().count() > 1);
        assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
    }
}

#[test]
fn bad_input_is_refused_clearly() {
    let out = minidaq(&["--acceptance", "1.5", "--no-limit"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--acceptance"));
    let out = minidaq(&["--sweep", "threads=1,2", "--no-limit"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fragment-size"));
}

/// Regression: a sweep with `--no-limit` printed its limit as "not measured (--no-limit): 0 B/s".
#[test]
fn a_sweep_without_a_limit_prints_no_rate_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("sweep.png");
    let out = minidaq(&[
        "--sweep",
        "fragment-size=1000,2000",
        "--events",
        "500",
        "--mode",
        "fill-drain",
        "--capacity",
        "64MiB",
        "--no-limit",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("limit:   not measured (--no-limit)\n"),
        "{text}"
    );
    assert!(!text.contains("0 B/s"), "{text}");
}

/// Regression: a readout thread waiting for space in a full store when the run's time was up
/// (which stops the collectors too) waited 10 s for space that could no longer come, then
/// failed the run with "store full". Two readout threads against one collector keep a small
/// store full, so the run ends during such a wait; it must end cleanly.
#[test]
fn a_run_ending_while_readout_waits_for_space_ends_cleanly() {
    let started = std::time::Instant::now();
    let out = minidaq(&[
        "--duration",
        "2",
        "--readout-threads",
        "2",
        "--collector-threads",
        "1",
        "--capacity",
        "256MiB",
        "--fragment-size",
        "10KiB",
        "--json",
        "--no-limit",
    ]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["integrity_errors"], 0, "{report}");
    // Not a timing assertion on speed: a run of 2 s that waited the old 10 s is a hang.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}

/// Bugs: a fill-drain of 2000 events (milliseconds per phase, fewer 5 ms samples than a median
/// needs) printed `collect: 0 frag/s`; `--no-limit` printed `ratio: readout 0.000`.
#[test]
fn short_phases_report_their_overall_rate_and_no_limit_prints_no_ratio() {
    let base = [
        "--mode",
        "fill-drain",
        "--events",
        "2000",
        "--fragment-size",
        "1KiB",
        "--capacity",
        "256MiB",
        "--no-limit",
    ];
    let out = minidaq(&[&base[..], &["--json"]].concat());
    assert!(out.status.success(), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for side in ["readout", "collect"] {
        let ops = j[side]["ops_per_sec"].as_f64().unwrap();
        assert!(ops > 0.0, "{side}: {}", j[side]);
        if j[side]["samples"].as_u64().unwrap() < 20 {
            assert!(j[side]["ops_per_sec_p1"].is_null(), "{side}: {}", j[side]);
        }
    }
    assert!(j["ratio"].is_null(), "{}", j["ratio"]);
    assert!(j.get("work_ratio").is_none(), "{j}");

    let text = minidaq(&base);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(!text.contains(" 0 frag/s"), "{text}");
    assert!(!text.contains("ratio:"), "{text}");
    assert!(
        text.contains("limit:   not measured (--no-limit)"),
        "{text}"
    );
}

/// On a memory file system the readout is also compared with its own least work (copy and
/// checksum of each fragment, measured alone), in the JSON and the text.
#[test]
fn a_memory_store_reports_the_readout_against_its_own_work() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let base = [
        "--events",
        "2000",
        "--fragment-size",
        "1KiB",
        "--capacity",
        "256MiB",
    ];
    let out = minidaq(&[&base[..], &["--json"]].concat());
    assert!(out.status.success(), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["work_limit_bytes_per_sec"].as_f64().unwrap() > 0.0, "{j}");
    assert!(j["work_ratio"].as_f64().unwrap() > 0.0, "{j}");
    let name = j["work_limit_name"].as_str().unwrap();
    assert!(name.contains("1.00 KiB values"), "{name}");
    let text = minidaq(&base);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("work:    crc32c + engine copy of 1.00 KiB"),
        "{text}"
    );
    assert!(
        text.contains("of the readout's own work done alone"),
        "{text}"
    );
}

/// A `hotstore serve` on a free loopback port; stopped (SIGTERM) when dropped.
struct Server {
    child: std::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(expected_fragments: &str) -> Server {
        Self::start_with(expected_fragments, &["--port", "0"])
    }

    fn start_with(expected_fragments: &str, args: &[&str]) -> Server {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hotstore"))
            .args(["serve", "--durability", "memory"])
            .args(args)
            .args(["--expected-fragments", expected_fragments])
            .arg("--dir")
            .arg(dir.path().join("store"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Blocks until the server says where it listens (or ends: then the test fails).
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let addr = stdout
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                l.strip_prefix("hotstore: listening on ")
                    .map(|a| a.trim().to_string())
            })
            .expect("the server printed no `listening on` line");
        Server {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Safety: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// `minidaq --remote` runs the same workload over the Redis protocol: every event written is
/// claimed, checked and removed, with the same JSON report; a server whose events complete at
/// another fragment count is refused with what to do.
#[test]
fn remote_run_loads_a_server_with_the_same_report() {
    let server = Server::start("3");
    let out = minidaq(&[
        "--remote",
        &server.addr,
        "--mode",
        "fill-drain",
        "--events",
        "500",
        "--detectors",
        "3",
        "--fragment-size",
        "1KiB",
        "--durability",
        "memory",
        "--window",
        "8",
        "--no-limit",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["events_written"], 500, "{j}");
    assert_eq!(j["events_collected"], 500, "{j}");
    assert_eq!(j["integrity_errors"], 0, "{j}");
    assert!(
        j["store"].as_str().unwrap().contains("remote hotstore at"),
        "{j}"
    );
    assert!(j["readout"]["ops_per_sec"].as_f64().unwrap() > 0.0, "{j}");

    // Sealing instead of counting: a server that completes events only on EVENT.SEAL.
    let sealing = Server::start("0");
    let out = minidaq(&[
        "--remote",
        &sealing.addr,
        "--events",
        "200",
        "--durability",
        "memory",
        "--no-limit",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["events_collected"], 200, "{j}");
    assert_eq!(j["integrity_errors"], 0, "{j}");

    // 4 fragments per event (the default) against a server completing events at 3.
    let out = minidaq(&["--remote", &server.addr, "--events", "10", "--no-limit"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--expected-fragments 4"), "{err}");
}

/// `minidaq --remote A,B` loads a cluster: readout routes each event to its node, collectors
/// claim from every node; every event is collected once, and the report says each node's share.
#[test]
fn remote_cluster_run_spreads_events_over_the_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = {
        let held: Vec<std::net::TcpListener> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        held.iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect()
    };
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let map = dir.path().join("map.toml");
    let made = Command::new(env!("CARGO_BIN_EXE_hotstore"))
        .args([
            "cluster", "create", "--addr", &addrs[0], "--addr", &addrs[1], "-o",
        ])
        .arg(&map)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let map = map.to_str().unwrap();
    let nodes: Vec<Server> = ports
        .iter()
        .map(|p| Server::start_with("3", &["--cluster", map, "--port", &p.to_string()]))
        .collect();
    let seeds = addrs.join(",");
    let out = minidaq(&[
        "--remote",
        &seeds,
        "--events",
        "400",
        "--detectors",
        "3",
        "--fragment-size",
        "1KiB",
        "--durability",
        "memory",
        "--no-limit",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["events_written"], 400, "{j}");
    assert_eq!(j["events_collected"], 400, "{j}");
    assert_eq!(j["integrity_errors"], 0, "{j}");
    assert!(
        j["store"]
            .as_str()
            .unwrap()
            .contains("cluster of 2 node(s)"),
        "{j}"
    );
    let per_node: Vec<u64> = j["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["events_collected"].as_u64().unwrap())
        .collect();
    assert_eq!(per_node.len(), 2, "{j}");
    assert!(per_node.iter().all(|&n| n > 0), "{j}");
    assert_eq!(per_node.iter().sum::<u64>(), 400, "{j}");
    // One seed is enough with --cluster.
    let out = minidaq(&[
        "--remote",
        &addrs[1],
        "--cluster",
        "--events",
        "50",
        "--detectors",
        "3",
        "--durability",
        "memory",
        "--no-limit",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["events_collected"], 50, "{j}");
    drop(nodes);
}

/// Found by a new-user review (nineteenth session): `minidaq --store` on a store holding a
/// user's events claimed them, called them integrity errors and removed them. A store that
/// holds keys is now refused unless --reuse-store says so; the user's data is untouched.
#[test]
fn a_store_holding_data_is_refused_without_reuse_store() {
    use hotstore::{Durability, FragmentKey, Store};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prod");
    let s = Store::builder(&dir).open().unwrap();
    for e in 0..5u64 {
        for d in 0..4u16 {
            let k = FragmentKey::new(5, e, d, 0).to_bytes();
            s.put(&k, b"user data", Durability::Persisted).unwrap();
        }
    }
    s.close().unwrap();
    let d = dir.to_str().unwrap();
    let args = [
        "--duration",
        "0.3",
        "--no-limit",
        "--capacity",
        "256MiB",
        "--store",
        d,
    ];
    let out = minidaq(&args);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already holds 20 keys") && err.contains("--reuse-store"),
        "{err}"
    );
    let s = Store::builder(&dir).open().unwrap();
    assert_eq!(s.stats().entries, 20, "the user's fragments were touched");
    let bounds: Vec<u64> = s.stats().tiers.iter().map(|t| t.capacity_bytes).collect();
    assert_eq!(bounds, [0], "the refused run changed the store's capacity");
    s.close().unwrap();
    // On purpose: the run consumes them (each an integrity error: not its pattern).
    let out = minidaq(&[&args[..], &["--reuse-store"]].concat());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
