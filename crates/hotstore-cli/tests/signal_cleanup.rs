//! Commands that make temporary stores remove them when stopped with SIGTERM or SIGINT (what
//! `timeout`, `kill`, batch systems and Ctrl-C send), and exit as the signal would have
//! (128 + its number). Before the fix a stopped `minidaq` left its 2 GB store in /dev/shm.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");

/// The temporary store `child` writes into, found from the store files it maps (so another
/// run's store in the same directory can never be mistaken for it). Waits until it exists.
fn scratch_store_of(child: &mut Child, prefix: &str) -> PathBuf {
    let maps = format!("/proc/{}/maps", child.id());
    // Generous: this waits for the run to start, however loaded the machine is.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended before it was stopped: {status}");
        }
        let text = std::fs::read_to_string(&maps).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains(prefix) && p.contains("/seg-"));
        if let Some(seg) = found {
            return PathBuf::from(seg).parent().unwrap().to_path_buf();
        }
        assert!(
            Instant::now() < deadline,
            "no store of {prefix} mapped after 300 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop_and_check(mut child: Child, signal: i32, prefix: &str) {
    let store = scratch_store_of(&mut child, prefix);
    assert!(store.is_dir());
    // Safety: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + signal), "{stderr}");
    assert!(!store.exists(), "{} left behind; {stderr}", store.display());
    assert!(
        stderr.contains("removed the temporary store"),
        "the user is not told: {stderr}"
    );
}

#[test]
fn minidaq_stopped_by_sigterm_removes_its_temporary_store() {
    let child = Command::new(BIN)
        .args(["minidaq", "--duration", "600", "--capacity", "256MiB"])
        .args(["--fragment-size", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    stop_and_check(child, libc::SIGTERM, "hotstore-minidaq-");
}

#[test]
fn bench_put_stopped_by_sigint_removes_its_temporary_store() {
    let base = tempfile::tempdir().unwrap();
    let child = Command::new(BIN)
        .args(["bench", "put", "--duration", "600", "--value-size", "100"])
        .args(["--dir", base.path().to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    stop_and_check(child, libc::SIGINT, "hotstore-bench-");
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
}
