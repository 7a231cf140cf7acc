//! Proves the relocation tools of issue 15 work on real stores: `hotstore compact` frees the segments of dead space pinned by live records and every key reads back, it refuses a missing or locked store, and `hotstore bench soak` runs a bounded store with long-lived keys without a StoreFull and prints its JSON figures.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Durability, Store};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");
const MIB: usize = 1 << 20;

/// Held while this process has a store open and while it starts a child (a child forked
/// meanwhile would inherit the store's LOCK descriptor until it execs).
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

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status, asserting the process was not killed by a signal and did not panic.
fn code(o: &Output) -> i32 {
    assert!(!text(&o.stderr).contains("panicked"), "{}", text(&o.stderr));
    o.status.code().expect("exited normally")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// 2000 keys of 4 KiB in 1 MiB segments; then half of them overwritten three times. Every
/// segment ends half dead and pinned by its live half: nothing is freed without relocation.
fn make_pinned_store(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let _guard = fork_guard();
    let store = Store::builder(dir)
        .segment_size_bytes(MIB)
        .lanes(1)
        .open()
        .unwrap();
    let mut expect = BTreeMap::new();
    for round in 0..4u8 {
        for k in (0..2000u32).filter(|k| round == 0 || k % 2 == 1) {
            let key = format!("key-{k:05}").into_bytes();
            let value: Vec<u8> = (0..4096u32)
                .map(|i| (i as u8) ^ round ^ (k as u8))
                .collect();
            store.put(&key, &value, Durability::Memory).unwrap();
            expect.insert(key, value);
        }
    }
    let s = store.stats();
    assert!(s.dead_bytes > s.live_bytes / 2, "{s:?}");
    store.close().unwrap();
    expect
}

#[test]
fn compact_frees_pinned_dead_space_and_keeps_every_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let expect = make_pinned_store(&dir);

    let o = hotstore(&["compact", p(&dir), "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let v: Value = serde_json::from_str(text(&o.stdout).trim()).expect("one JSON object");
    // Segments in use, dead bytes and the files on disk go down: a compaction deletes the
    // files it freed beyond the reserve and the minimum stock (before, they stayed pooled).
    let (before, after) = (&v["before"], &v["after"]);
    assert!(
        after["segments"].as_u64() < before["segments"].as_u64(),
        "{v}"
    );
    assert!(
        after["dead_bytes"].as_u64().unwrap() * 4 < before["dead_bytes"].as_u64().unwrap(),
        "{v}"
    );
    assert!(
        after["file_bytes"].as_u64() < before["file_bytes"].as_u64(),
        "{v}"
    );
    let segment = MIB as u64;
    let in_use = |s: &Value| {
        s["file_bytes"].as_u64().unwrap() - s["pooled_files"].as_u64().unwrap() * segment
    };
    assert!(
        in_use(after) < in_use(before),
        "bytes of files in use did not go down: {v}"
    );
    assert!(v["relocated_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v["relocated_records"].as_u64().unwrap() > 0, "{v}");
    assert!(v["duration_secs"].as_f64().unwrap() > 0.0, "{v}");
    // Progress went to stderr (not a terminal here: whole lines).
    assert!(
        text(&o.stderr).contains("compact: "),
        "no progress line: {}",
        text(&o.stderr)
    );

    // Every key reads back with its last value.
    let _guard = fork_guard();
    let store = Store::builder(&dir)
        .create_if_missing(false)
        .open()
        .unwrap();
    assert_eq!(store.stats().entries, expect.len() as u64);
    for (k, want) in &expect {
        let got = store.get(k).unwrap();
        assert_eq!(
            got.as_deref(),
            Some(&want[..]),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    store.close().unwrap();
}

#[test]
fn compact_text_summary_names_before_after_and_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    make_pinned_store(&dir);
    let o = hotstore(&["compact", p(&dir)]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for word in ["before", "after", "relocated", "freed", "time"] {
        assert!(out.contains(word), "{word} missing in {out}");
    }
}

#[test]
fn compact_refuses_a_missing_or_locked_store() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    let o = hotstore(&["compact", p(&missing)]);
    assert_eq!(code(&o), 2);
    let inspect = hotstore(&["inspect", p(&missing)]);
    assert_eq!(
        text(&o.stderr),
        text(&inspect.stderr),
        "the same error as inspect"
    );
    assert!(!missing.exists(), "compact created a store");

    let dir = tmp.path().join("store");
    make_pinned_store(&dir);
    let held = {
        let _guard = fork_guard();
        Store::builder(&dir).open().unwrap()
    };
    // Started without the fork guard: this process holds a store open on purpose.
    let o = Command::new(BIN)
        .args(["compact", p(&dir)])
        .output()
        .expect("run hotstore");
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("open in another process"),
        "{}",
        text(&o.stderr)
    );
    held.close().unwrap();
}

#[test]
fn bench_soak_keeps_a_bounded_store_writable() {
    let o = hotstore(&[
        "bench",
        "soak",
        "--duration",
        "3",
        "--reference-duration",
        "1",
        "--live-bytes",
        "8MiB",
        "--max-value",
        "256KiB",
        "--progress-every",
        "1",
        "--seed",
        "15",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let v: Value = serde_json::from_str(text(&o.stdout).trim()).expect("one JSON object");
    assert_eq!(v["op"], "soak");
    assert!(v["keys"].as_u64().unwrap() > 0, "{v}");
    let capacity = v["capacity_bytes"].as_u64().unwrap();
    assert_eq!(
        capacity,
        (v["live_value_bytes"].as_f64().unwrap() * 4.0) as u64
    );
    for phase in ["reference", "bounded"] {
        for f in ["ops_per_sec", "bytes_per_sec", "duration_secs"] {
            assert!(v[phase][f].as_f64().unwrap() > 0.0, "{phase}.{f} in {v}");
        }
        assert_eq!(v[phase]["full_errors"], 0, "{phase}: StoreFull in {v}");
    }
    assert_eq!(v["reference"]["capacity_bytes"], 0);
    assert!(
        v["bounded"]["max_file_bytes"].as_u64().unwrap() <= capacity,
        "{v}"
    );
    assert!(
        v["bounded"]["write_amplification"].as_f64().unwrap() >= 1.0,
        "{v}"
    );
    assert!(v["bounded"]["relocated_bytes"].as_u64().is_some(), "{v}");
    assert!(v["ratio"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["max_file_fraction"].as_f64().unwrap() <= 1.0, "{v}");
    assert!(!v["intervals"].as_array().unwrap().is_empty(), "{v}");
    assert!(
        text(&o.stderr).contains("store full 0"),
        "progress lines: {}",
        text(&o.stderr)
    );
}
