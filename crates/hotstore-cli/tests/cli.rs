//! Proves the `hotstore` commands do what their help says on real stores: inspect/verify/dump report what the library wrote, verify catches a flipped byte, stress logs exactly what it stored, bench prints its JSON fields, and bad input gives `error:` and a non-zero exit, never a panic.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Durability, FragmentKey, Store};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");

/// Held while this process has a store open and while it starts a child: a child forked while
/// another test thread has its store open inherits the store's LOCK descriptor until it execs,
/// and a command starting in that moment would find the store locked.
static FORK_GUARD: Mutex<()> = Mutex::new(());

fn fork_guard() -> MutexGuard<'static, ()> {
    FORK_GUARD.lock().unwrap_or_else(|e| e.into_inner())
}

fn hotstore(args: &[&str]) -> Output {
    let child = {
        let _guard = fork_guard();
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run hotstore")
    };
    child.wait_with_output().expect("wait for hotstore")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Exit status, asserting the process was not killed by a signal and did not panic.
fn code(o: &Output) -> i32 {
    assert!(!stderr(o).contains("panicked"), "panic: {}", stderr(o));
    o.status.code().expect("exited normally")
}

/// Keys and values written by `make_store`, minus the removed one.
fn expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for e in 0..200u64 {
        let v: Vec<u8> = (0..(e * 37 % 3000 + 1)).map(|i| (i * e) as u8).collect();
        m.insert(FragmentKey::new(7, e, 1, 2).to_bytes().to_vec(), v);
    }
    m.insert(b"calibration/run7".to_vec(), b"gain=1.25".to_vec());
    m
}

/// A small store written with the library: 200 fragments and one blob key; one extra key
/// was written and removed again.
fn make_store(dir: &Path) {
    let _guard = fork_guard();
    let store = Store::builder(dir)
        .segment_size_bytes(1 << 20)
        .open()
        .expect("create store");
    for (k, v) in expected() {
        store.put(&k, &v, Durability::Persisted).expect("put");
    }
    let gone = FragmentKey::new(7, 9999, 0, 0).to_bytes();
    store
        .put(&gone, b"short-lived", Durability::Persisted)
        .unwrap();
    assert!(store.remove(&gone, Durability::Persisted).unwrap());
    store.close().expect("close");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn inspect_shows_layout_tiers_sizes_and_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let o = hotstore(&["inspect", p(tmp.path())]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "key layout   run:u32,event:u64|detector:u16,component:u16",
        "entries      201",
        "tier 0",
        "power cut",
        "segments",
        "recovery",
        "torn tails   none",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }

    let o = hotstore(&["inspect", p(tmp.path()), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["stats"]["entries"], 201);
    assert!(v["stats"]["live_bytes"].as_u64().unwrap() > 200 * 24);
    let tier = &v["stats"]["tiers"][0];
    assert!(tier["domain"].is_string());
    assert!(tier["power_safety"].as_str().unwrap().contains("power cut"));
    // Files created by this open (none needed, or the ready stock): counted, never absent.
    assert!(tier["created"]["files"].is_u64(), "{tier}");
    assert!(tier["created"]["total_ns"].is_u64(), "{tier}");
    let r = &v["recovery"];
    assert!(r["segments_from_summary"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(r["segments_scanned"], 0, "a clean close leaves summaries");
    assert_eq!(r["torn_tails"].as_array().unwrap().len(), 0);
}

#[test]
fn dump_lists_every_live_key_sorted_with_len_and_crc() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let o = hotstore(&["dump", p(tmp.path()), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rows: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let want = expected();
    assert_eq!(rows.len(), want.len());
    for (row, (k, v)) in rows.iter().zip(&want) {
        assert_eq!(row["key"], hex(k), "sorted by key");
        assert_eq!(row["len"], v.len());
        assert_eq!(row["crc32c"], crc32c::crc32c(v));
    }
}

/// The segment file holding records (the others are free or pre-allocated).
fn data_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hss"))
        .filter(|p| {
            let b = std::fs::read(p).unwrap();
            b.len() > 8192 && b[4096..4096 + 24].iter().any(|&x| x != 0)
        })
        .collect();
    segs.sort();
    assert!(
        !segs.is_empty(),
        "no segment with records in {}",
        dir.display()
    );
    segs.remove(0)
}

/// Found in review: a store that recovery refuses (here: a segment file of its list is gone)
/// could not be opened by any command, and the error named a library call. `inspect
/// --salvage` opens it once, reports what was lost, and later opens are clean.
#[test]
fn inspect_salvage_opens_a_refused_store_once_and_later_opens_are_clean() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let seg = data_segment(tmp.path());
    std::fs::remove_file(&seg).unwrap();
    let name = seg.file_name().unwrap().to_str().unwrap().to_string();

    let o = hotstore(&["inspect", p(tmp.path())]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains(&name), "{err}");
    assert!(err.contains("hotstore inspect --salvage"), "{err}");
    let o = hotstore(&["serve", "--dir", p(tmp.path()), "--port", "0"]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("hotstore inspect --salvage"),
        "{}",
        stderr(&o)
    );

    let o = hotstore(&["inspect", "--salvage", p(tmp.path())]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains(&format!("MISSING      {name}")), "{text}");

    let o = hotstore(&["inspect", p(tmp.path()), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["recovery"]["missing_files"].as_array().unwrap().len(), 0);
}

/// A gap before records written as a server under `--durability persisted` writes them
/// (flagged, acknowledged after a flush; the flush never came): damage within the boot that
/// wrote them (refused), an unsynced tail after a reboot (cut, and said so, flagged records
/// counted). The reboot is made by giving the segment header another boot.
#[test]
fn inspect_cuts_an_unsynced_tail_left_by_a_reboot() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let _guard = fork_guard();
        let store = Store::builder(tmp.path())
            .segment_size_bytes(1 << 20)
            .open()
            .unwrap();
        store.put(b"k0", &[0; 100], Durability::Persisted).unwrap();
        store.set_acknowledged_after_flush(true);
        for i in 1..=3u8 {
            store
                .put(format!("k{i}").as_bytes(), &[i; 100], Durability::Memory)
                .unwrap();
        }
        store.close().unwrap();
    }
    let seg = data_segment(tmp.path());
    let mut b = std::fs::read(&seg).unwrap();
    let k1 = b.windows(2).position(|w| w == b"k1").unwrap() - 24;
    b[k1..k1 + 24].fill(0);
    b[48..56].copy_from_slice(&0x0123_4567_89ab_cdef_u64.to_le_bytes());
    let crc = hotstore::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &b).unwrap();
    // Found in review: verify cut a summarised segment too. A summary is written only once
    // its segment is durable, so no power cut left a gap there: damage.
    let o = hotstore(&["verify", p(tmp.path())]);
    assert_ne!(code(&o), 0, "a summarised segment: damage\n{}", stdout(&o));

    // No summary: the segment is scanned at open, as a tail left by a crash is.
    std::fs::remove_file(seg.with_extension("sum")).unwrap();
    let o = hotstore(&["verify", p(tmp.path())]);
    assert_eq!(code(&o), 0, "verify agrees\n{}{}", stdout(&o), stderr(&o));
    let o = hotstore(&["inspect", p(tmp.path())]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("cut with 2 intact record(s) after them, 2 written as persisted"),
        "{text}"
    );
    assert!(
        text.contains(".cut)"),
        "names the file keeping the cut bytes: {text}"
    );
    let o = hotstore(&["dump", p(tmp.path())]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let keys = stdout(&o);
    assert!(keys.contains(&hex(b"k0")), "{keys}");
    assert!(!keys.contains(&hex(b"k3")), "{keys}");

    // What the cut took is listed from its file, values included, to put again by hand.
    let cut = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cut"))
        .expect("a .cut file");
    let o = hotstore(&["dump", "--cut", p(&cut)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 2, "k2 and k3: {text}");
    assert!(
        text.lines()
            .all(|l| l.contains(" put ") && l.ends_with(" persisted")),
        "{text}"
    );
    let o = hotstore(&["dump", "--cut", p(&cut), "--json"]);
    let rows: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows[1]["key"], hex(b"k3"));
    assert_eq!(rows[1]["value"], hex(&[3; 100]));
    let o = hotstore(&["dump", "--cut", p(&data_segment(tmp.path()))]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("is not a cut file"), "{}", stderr(&o));
}

#[test]
fn verify_passes_intact_store_and_names_a_flipped_byte() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let o = hotstore(&["verify", p(tmp.path())]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("checked 203 records"), "{}", stdout(&o));
    let o = hotstore(&["verify", p(tmp.path()), "--json"]);
    assert_eq!(code(&o), 0);
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["intact"], true);
    assert_eq!(
        v["records_checked"], 203,
        "201 live + the removed put + its tombstone"
    );

    // Flip one byte inside the first record's value: intact records follow it, so this is
    // damage, not a torn tail.
    let seg = data_segment(tmp.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[4096 + 40] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let o = hotstore(&["verify", p(tmp.path())]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let name = seg.file_name().unwrap().to_str().unwrap();
    assert!(
        stdout(&o).contains(&format!("DAMAGE {name}:4096 ")),
        "{}",
        stdout(&o)
    );
    let o = hotstore(&["verify", p(tmp.path()), "--json"]);
    assert_eq!(code(&o), 1);
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["intact"], false);
    assert_eq!(v["damage"][0]["offset"], 4096);

    // Reading the damaged value is a clear error, not a panic.
    let o = hotstore(&["dump", p(tmp.path())]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).starts_with("error: checksum mismatch"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn errors_are_reported_not_panicked() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    for cmd in ["inspect", "verify", "dump"] {
        let o = hotstore(&[cmd, p(&missing)]);
        assert_eq!(code(&o), 2, "{cmd}");
        assert!(stderr(&o).starts_with("error: "), "{cmd}: {}", stderr(&o));
    }
    // Bad arguments: clap's usage error, exit 2.
    for args in [
        &["bench", "put", "--value-size", "12parsecs"][..],
        &["bench", "put", "--duration", "-1"],
        &["bench", "fly"],
        &["stress", p(tmp.path()), "--duration", "1"],
        &[
            "stress",
            p(tmp.path()),
            "--duration",
            "1",
            "--ack-log",
            "x",
            "--threads",
            "0",
        ],
    ] {
        let o = hotstore(args);
        assert_eq!(code(&o), 2, "{args:?}");
        assert!(stderr(&o).contains("error:"), "{args:?}: {}", stderr(&o));
    }
    // A value size the engine refuses.
    let o = hotstore(&["bench", "put", "--value-size", "1G", "--duration", "0.1"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).starts_with("error: --value-size"),
        "{}",
        stderr(&o)
    );
    // An ack log that is not one.
    let log = tmp.path().join("not-a-log");
    std::fs::write(&log, "hello world\n").unwrap();
    let o = hotstore(&[
        "stress",
        p(&tmp.path().join("s")),
        "--duration",
        "0.1",
        "--ack-log",
        p(&log),
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("not an ack log line"), "{}", stderr(&o));
}

#[test]
fn help_of_every_subcommand_exits_zero() {
    for cmd in ["inspect", "verify", "dump", "compact", "stress", "bench"] {
        let o = hotstore(&[cmd, "--help"]);
        assert_eq!(code(&o), 0, "{cmd}");
        assert!(stdout(&o).contains("Usage: hotstore"), "{cmd}");
    }
    let o = hotstore(&["--help"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("Exit status"));
}

/// The last state of every key in an ack log.
fn ack_state(log: &Path) -> BTreeMap<String, Option<(u64, u32)>> {
    let mut m = BTreeMap::new();
    let text = std::fs::read_to_string(log).unwrap();
    assert!(text.ends_with('\n'), "a clean exit leaves whole lines");
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["put", k, len, crc] => m.insert(
                k.to_string(),
                Some((len.parse().unwrap(), crc.parse().unwrap())),
            ),
            ["del", k] => m.insert(k.to_string(), None),
            _ => panic!("bad ack line {line:?}"),
        };
    }
    m
}

#[test]
fn stress_logs_exactly_what_the_store_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let log = tmp.path().join("acks.log");
    // Two runs: the second reuses (overwrites, removes) keys the first left.
    for seed in ["1", "2"] {
        let opts = "--duration 0.5 --segment-size 1MiB --max-value 64KiB --keys 50 --seed";
        let mut args = vec!["stress", p(&dir), "--ack-log", p(&log)];
        args.extend(opts.split_whitespace());
        args.push(seed);
        let o = hotstore(&args);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(stdout(&o).contains("ops/s"), "{}", stdout(&o));
    }
    let state = ack_state(&log);
    assert!(state.values().any(Option::is_none), "some removals");
    let live: BTreeMap<String, (u64, u32)> = state
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
    let o = hotstore(&["dump", p(&dir), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let dumped: BTreeMap<String, (u64, u32)> = stdout(&o)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().to_string(),
                (
                    v["len"].as_u64().unwrap(),
                    v["crc32c"].as_u64().unwrap() as u32,
                ),
            )
        })
        .collect();
    // No kill, so nothing was in flight: the store and the log agree exactly.
    assert_eq!(dumped, live);
    let o = hotstore(&["verify", p(&dir)]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

fn check_bench_json(o: &Output, op: &str) -> Value {
    assert_eq!(code(o), 0, "{}", stderr(o));
    let text = stdout(o);
    assert_eq!(
        text.trim().lines().count(),
        1,
        "exactly one JSON object: {text}"
    );
    let v: Value = serde_json::from_str(text.trim()).expect("JSON");
    for f in [
        "ops_per_sec",
        "bytes_per_sec",
        "limit_bytes_per_sec",
        "ratio",
        "duration_secs",
    ] {
        assert!(v[f].as_f64().is_some_and(|x| x > 0.0), "{f} in {v}");
    }
    for f in ["limit_name", "durability", "dir", "domain"] {
        assert!(v[f].as_str().is_some_and(|s| !s.is_empty()), "{f} in {v}");
    }
    assert_eq!(v["op"], op);
    assert_eq!(v["value_size"], 100);
    assert_eq!(v["threads"], 1);
    let ratio = v["bytes_per_sec"].as_f64().unwrap() / v["limit_bytes_per_sec"].as_f64().unwrap();
    assert!((ratio - v["ratio"].as_f64().unwrap()).abs() < 1e-9 * ratio.max(1.0));
    v
}

/// Runs `hotstore` with whitespace-separated arguments.
fn hotstore_words(args: &str) -> Output {
    hotstore(&args.split_whitespace().collect::<Vec<_>>())
}

/// A Persisted put on a disk also reports the device doing the same work: record-sized direct
/// writes, each synced (`synced_*`), beside the no-sync limit.
#[test]
fn bench_put_persisted_on_a_disk_reports_the_synced_limit() {
    if !std::path::Path::new("/var/tmp").is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let o = hotstore(&[
        "bench",
        "put",
        "--dir",
        dir.path().to_str().unwrap(),
        "--duration",
        "0.2",
        "--json",
        "--value-size",
        "100",
        "--keep",
        "1000",
        "--capacity",
        "256MiB",
        "--segment-size",
        "4MiB",
    ]);
    let v = check_bench_json(&o, "put");
    let name = v["synced_limit_name"].as_str().unwrap_or("");
    if name.is_empty() {
        // O_DIRECT refused under /var/tmp (some file systems): no synced limit, no ratio.
        assert!(v.get("synced_ratio").is_none(), "{v}");
        return;
    }
    assert_eq!(
        name,
        "O_DIRECT sequential write + fdatasync per 4 KiB block, new file"
    );
    let limit = v["synced_limit_bytes_per_sec"].as_f64().unwrap();
    assert!(limit > 0.0, "{v}");
    let ratio = v["bytes_per_sec"].as_f64().unwrap() / limit;
    assert!((ratio - v["synced_ratio"].as_f64().unwrap()).abs() < 1e-9 * ratio.max(1.0));
}

/// Fix (found in review): the device limit's probe file was a plain temporary file, left
/// behind (up to gigabytes) by a benchmark stopped with SIGTERM while measuring. It now lives
/// in a scratch directory that the stop removes.
#[test]
fn a_stop_while_measuring_the_disk_limit_leaves_no_probe_file() {
    if !std::path::Path::new("/var/tmp").is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let mut child = {
        let _guard = fork_guard();
        Command::new(BIN)
            .args([
                "bench",
                "put",
                "--dir",
                dir.path().to_str().unwrap(),
                "--value-size",
                "1MiB",
                "--durability",
                "persisted",
                "--duration",
                "5",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run hotstore")
    };
    let entries = || -> Vec<String> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    // The probe: a scratch directory now, a hidden file before the fix.
    let probing = || {
        entries()
            .iter()
            .any(|n| n.starts_with("hotstore-limit-") || n.starts_with(".hotstore-limits-"))
    };
    // Signalled once the probe exists (an O_DIRECT-less file system never makes one: then
    // the run is simply stopped).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !probing() && std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let probed = probing();
    // Safety: a plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    eprintln!("signalled while probing: {probed}");
    assert_eq!(
        entries(),
        Vec::<String>::new(),
        "left behind by the stopped run"
    );
}

/// A put of values from 4 KiB on a memory file system also reports its own work done alone
/// (`work_*`: a checksum and the engine's copy, past the cache), which memcpy understates;
/// smaller values do not.
#[test]
fn bench_put_of_large_values_in_memory_reports_its_own_work_alone() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        return;
    }
    let o = hotstore_words(
        "bench put --dir /dev/shm --duration 0.2 --json --value-size 4KiB --keep 100 \
         --durability memory --capacity 64MiB --segment-size 1MiB",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    let name = v["work_limit_name"].as_str().unwrap_or_default();
    assert!(
        name.contains("crc32c + engine copy of 4.00 KiB values"),
        "{v}"
    );
    assert!(v["work_limit_bytes_per_sec"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["work_ratio"].as_f64().unwrap() > 0.0, "{v}");
    let o = hotstore_words(
        "bench put --dir /dev/shm --duration 0.2 --value-size 4KiB --keep 100 \
         --durability memory --capacity 64MiB --segment-size 1MiB",
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("work:   crc32c + engine copy"), "{text}");
    assert!(
        text.contains("(the put's own work done alone); ratio"),
        "{text}"
    );

    let o = hotstore_words(
        "bench put --dir /dev/shm --duration 0.2 --json --value-size 1000 --keep 100 \
         --durability memory --capacity 64MiB --segment-size 1MiB",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert!(v.get("work_limit_name").is_none(), "{v}");
}

#[test]
fn bench_put_and_get_print_their_json_fields() {
    // Fix (CI failure once puts reached 5-6 M/s): without `--keep` the store fills at the
    // machine's speed, and a fast machine filled 256 MiB within the warm-up. With `--keep` the
    // live keys are bounded whatever the speed.
    let o = hotstore_words(
        "bench put --duration 0.3 --json --value-size 100 --keep 100000 --capacity 256MiB \
         --segment-size 4MiB",
    );
    let v = check_bench_json(&o, "put");
    assert_eq!(v["durability"], "persisted");

    let o = hotstore_words(
        "bench put --duration 0.2 --json --value-size 100 --keep 1000 --capacity 64MiB \
         --segment-size 1MiB --repeat 3",
    );
    let v = check_bench_json(&o, "put");
    assert_eq!(v["keep"], 1000);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r["stopped_full"] == false), "{v}");
    let mut ops: Vec<f64> = runs
        .iter()
        .map(|r| r["ops_per_sec"].as_f64().unwrap())
        .collect();
    ops.sort_by(f64::total_cmp);
    assert_eq!(
        v["ops_per_sec"].as_f64().unwrap(),
        ops[1],
        "the median run is reported"
    );

    let o = hotstore_words(
        "bench get --duration 0.2 --json --value-size 100 --key-count 5000 --order random \
         --durability memory",
    );
    let v = check_bench_json(&o, "get");
    assert_eq!(v["key_count"], 5000);
    assert!(v["copy_ops_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_recovery_reopens_from_summaries_and_by_scan() {
    let o = hotstore_words(
        "bench recovery --json --value-size 1KiB --key-count 2000 --segment-size 1MiB",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["records"], 2000);
    let passes = v["passes"].as_array().unwrap();
    assert_eq!(passes.len(), 2);
    assert_eq!(passes[0]["mode"], "summaries");
    assert_eq!(
        passes[0]["segments_scanned"], 0,
        "a clean close leaves summaries: {v}"
    );
    assert_eq!(passes[1]["mode"], "scan");
    assert_eq!(
        passes[1]["segments_from_summary"], 0,
        "summaries were removed: {v}"
    );
    for p in passes {
        assert_eq!(p["records"], 2000, "every record is found again: {v}");
        assert!(p["data_bytes_per_sec"].as_f64().unwrap() > 0.0);
    }
}

/// `bench put|get --vs lmdb` measures LMDB in the same run and reports it beside hotstore
/// (positive rates, a ratio); `--events` and the direct-I/O threshold show in the JSON.
#[test]
fn bench_vs_lmdb_reports_the_peer_beside_hotstore() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = hotstore(&[
        "bench",
        "put",
        "--dir",
        d,
        "--value-size",
        "100",
        "--duration",
        "0.2",
        "--capacity",
        "256MiB",
        // Live keys bounded whatever the speed (a temp dir on tmpfs fills 256 MiB in a
        // warm-up otherwise).
        "--keep",
        "100000",
        "--vs",
        "lmdb",
        "--events",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let peers = v["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 2, "batched and single: {v}");
    for p in peers {
        assert!(p["ops_per_sec"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["ratio"].as_f64().unwrap() > 0.0, "{p}");
    }
    assert!(v["ratio_vs_lmdb_batched"].as_f64().unwrap() > 0.0);
    assert_eq!(v["events_tracked"], Value::Bool(true));
    assert!(v["direct_io_min_value_bytes"].as_u64().is_some());
    let o = hotstore(&[
        "bench",
        "get",
        "--dir",
        d,
        "--value-size",
        "100",
        "--duration",
        "0.2",
        // LMDB's map for these (3x their bytes) is not a whole number of pages, which LMDB
        // refuses: the bench rounds it up (found with the default 10 KiB values).
        "--key-count",
        "140000",
        "--capacity",
        "256MiB",
        "--vs",
        "lmdb",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(v["ratio_vs_lmdb"].as_f64().unwrap() > 0.0, "{v}");
    // More than one thread is refused with a reason.
    let o = hotstore(&[
        "bench",
        "put",
        "--dir",
        d,
        "--threads",
        "2",
        "--duration",
        "0.2",
        "--vs",
        "lmdb",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--threads 1"), "{}", stderr(&o));
}

/// `bench dram` reports DRAM per key for its three cases (a figure, not a threshold: the
/// numbers go to docs/benchmarks.md), and refuses a directory on a disk.
#[test]
fn bench_dram_reports_bytes_per_key() {
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let o = hotstore(&["bench", "dram", "--keys", "50000", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let figures = v["figures"].as_array().expect("figures");
    assert_eq!(figures.len(), 3, "{v}");
    for f in figures {
        assert_eq!(f["keys"].as_u64(), Some(50000));
        assert!(f["bytes_per_key"].as_f64().is_some(), "{f}");
    }
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = hotstore(&["bench", "dram", "--dir", disk.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a memory file system"),
        "{}",
        stderr(&o)
    );
}

/// The help and option findings of a newcomer's first hour (issue 14): each was misleading.
#[test]
fn options_mean_the_same_everywhere_and_errors_name_them() {
    let tmp = tempfile::tempdir().unwrap();
    // `--segment-size 5000` named the engine's internal `segment_size_bytes`.
    let o = hotstore(&[
        "stress",
        p(&tmp.path().join("s")),
        "--duration",
        "0.1",
        "--ack-log",
        p(&tmp.path().join("log")),
        "--segment-size",
        "5000",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--segment-size"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("segment_size_bytes"), "{}", stderr(&o));
    assert!(
        !tmp.path().join("s").exists(),
        "a refused option created the store"
    );
    // `record export` usage read `--out <DIR> <DIR>`.
    let o = hotstore(&["record", "export", "--help"]);
    assert!(!stdout(&o).contains("<DIR> <DIR>"), "{}", stdout(&o));
    // `bench put`'s one-line help pointed to itself.
    let o = hotstore(&["bench", "--help"]);
    assert!(
        !stdout(&o).contains("see `bench put --help`"),
        "{}",
        stdout(&o)
    );
    // `--preallocate` is `[BYTES]` on every command: alone it means all of --capacity.
    for cmd in [&["serve"][..], &["bench", "put"], &["record"]] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let help = stdout(&hotstore(&args));
        assert!(help.contains("--preallocate [<BYTES>]"), "{cmd:?}: {help}");
    }
    // `--capacity 0` meant an unbounded store, silently: refused on every command.
    for cmd in [
        &["serve", "--dir", p(&tmp.path().join("c"))][..],
        &[
            "stress",
            p(&tmp.path().join("c")),
            "--duration",
            "0.1",
            "--ack-log",
            p(&tmp.path().join("clog")),
        ],
        &["bench", "put"],
        &["minidaq"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--capacity", "0"]);
        let o = hotstore(&args);
        assert_eq!(code(&o), 2, "{cmd:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("omit --capacity"),
            "{cmd:?}: {}",
            stderr(&o)
        );
    }
    assert!(
        !tmp.path().join("c").exists(),
        "a refused capacity created the store"
    );
    // `bench recovery` accepted (and ignored) the put/get options.
    let o = hotstore(&["bench", "recovery", "--threads", "2"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
    let o = hotstore(&[
        "serve",
        "--dir",
        p(&tmp.path().join("srv")),
        "--preallocate",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("give --capacity"), "{}", stderr(&o));
    // Deliveries are counted to 255: a larger maximum would never park anything.
    let o = hotstore(&[
        "serve",
        "--dir",
        p(&tmp.path().join("srv")),
        "--max-deliveries",
        "256",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("0..=255"), "{}", stderr(&o));
}

/// Found by a new-user review (nineteenth session): `stress` took every 16-byte key for one of
/// its own, so on a store holding a user's fragments it overwrote and removed them. Keys whose
/// values stress did not write now refuse the store, untouched; a store stress filled itself is
/// still taken over (its orphans adopted).
#[test]
fn stress_refuses_a_store_holding_data_it_did_not_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prod");
    let s = Store::builder(&dir).open().unwrap();
    for e in 0..10u64 {
        let k = FragmentKey::new(6, e, 0, 0).to_bytes();
        s.put(
            &k,
            b"detector data, not a stress value",
            Durability::Persisted,
        )
        .unwrap();
    }
    s.close().unwrap();
    let log = tmp.path().join("acks.log");
    let o = hotstore(&["stress", p(&dir), "--duration", "0.3", "--ack-log", p(&log)]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("10 keys stress did not write"),
        "{}",
        stderr(&o)
    );
    let s = Store::builder(&dir).open().unwrap();
    assert_eq!(s.stats().entries, 10, "the user's keys were touched");
    s.close().unwrap();
    // A store of its own: a second run (a new log, so every key is an orphan) takes it over.
    let own = tmp.path().join("own");
    let o = hotstore(&["stress", p(&own), "--duration", "0.3", "--ack-log", p(&log)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let fresh_log = tmp.path().join("acks2.log");
    let o = hotstore(&[
        "stress",
        p(&own),
        "--duration",
        "0.3",
        "--ack-log",
        p(&fresh_log),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// Found by a new-user review (nineteenth session): `cluster check` of a node that does not
/// answer exited 2 (an error), where its help promises 1 for an unhealthy cluster.
#[test]
fn cluster_check_of_a_node_that_does_not_answer_exits_1() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let o = hotstore(&["cluster", "check", &addr, "--timeout", "1"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("does not answer"), "{}", stdout(&o));
}
