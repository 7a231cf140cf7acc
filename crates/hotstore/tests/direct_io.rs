//! Proves the direct-I/O write path of bulk records on a block tier: values of every alignment read back byte for byte (before and after a reopen), a tier that refuses O_DIRECT (tmpfs) falls back and says so, and a bulk record torn in the middle of its direct-written interior is cut at the next open, never returned.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Durability, FragmentKey, Store};
use std::path::{Path, PathBuf};

/// A directory on the disk the tests run on (the build's target directory: a block tier).
fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("direct-io-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir on disk")
}

fn open(dir: &Path) -> Store {
    Store::builder(dir)
        .segment_size_bytes(8 << 20)
        .direct_io_min_value_bytes(4096)
        .open()
        .expect("open")
}

fn key(n: u64) -> [u8; 16] {
    FragmentKey::new(3, n, 0, 0).to_bytes()
}

/// Bytes that differ at every position and between values.
fn value(n: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(n * 97) as u8)
        .collect()
}

/// Lengths around the 4 KiB edges, with small records between them so that each bulk record
/// starts at a different offset within its block; the 6 MiB one is more 1 MiB chunks than a
/// thread has buffers, so its buffers are reused while earlier chunks are in flight.
const LENGTHS: [usize; 10] = [
    4095,
    4096,
    5000,
    8192 + 13,
    65536,
    (256 << 10) + 7,
    (1 << 20) + 100,
    3 << 20,
    (6 << 20) + 123,
    12345,
];

fn write_all(s: &Store) {
    for (i, len) in LENGTHS.iter().enumerate() {
        let n = i as u64;
        s.put(
            &key(1000 + n),
            &value(1000 + n, 1 + i * 7),
            Durability::Memory,
        )
        .unwrap();
        s.put(&key(n), &value(n, *len), Durability::Persisted)
            .unwrap();
    }
}

fn check_all(s: &Store, when: &str) {
    for (i, len) in LENGTHS.iter().enumerate() {
        let n = i as u64;
        let got = s.get(&key(n)).unwrap();
        assert!(
            got.as_deref() == Some(&value(n, *len)[..]),
            "{when}: value of {len} bytes read back wrong"
        );
        assert_eq!(
            s.get(&key(1000 + n)).unwrap().as_deref(),
            Some(&value(1000 + n, 1 + i * 7)[..]),
            "{when}: a small record next to a direct one"
        );
    }
}

#[test]
fn bulk_values_of_every_alignment_read_back_through_direct_io() {
    let dir = disk_dir();
    let s = open(dir.path());
    let path = s.stats().tiers[0].bulk_write_path;
    if path != "direct" {
        // Not a failure of the engine: this file system refuses O_DIRECT (say which).
        eprintln!(
            "skipped: {} does not take O_DIRECT (bulk path {path})",
            dir.path().display()
        );
        return;
    }
    write_all(&s);
    check_all(&s, "before a reopen");
    s.close().unwrap();
    let s = open(dir.path());
    check_all(&s, "after a reopen");
    // Overwrites in place of old versions, and removals, keep working.
    s.put(&key(6), &value(77, 2 << 20), Durability::Persisted)
        .unwrap();
    assert!(s.remove(&key(7), Durability::Persisted).unwrap());
    assert_eq!(
        s.get(&key(6)).unwrap().as_deref(),
        Some(&value(77, 2 << 20)[..])
    );
    assert_eq!(s.get(&key(7)).unwrap(), None);
}

#[test]
fn a_tier_without_o_direct_falls_back_and_says_so() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let s = open(dir.path());
    assert_eq!(s.stats().tiers[0].bulk_write_path, "mapped");
    write_all(&s);
    check_all(&s, "tmpfs");
}

/// The segment file holding `key(0)`'s record and the record's offset in it.
fn locate(dir: &Path, needle: &[u8]) -> (PathBuf, usize) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_none_or(|e| e != "hss") {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            return (p, at);
        }
    }
    panic!("record not found in {}", dir.display());
}

#[test]
fn a_bulk_record_torn_inside_its_direct_interior_is_cut_not_returned() {
    let dir = disk_dir();
    let s = open(dir.path());
    if s.stats().tiers[0].bulk_write_path != "direct" {
        eprintln!("skipped: no O_DIRECT here");
        return;
    }
    s.put(&key(1), b"before", Durability::Persisted).unwrap();
    let v = value(5, 1 << 20);
    s.put(&key(5), &v, Durability::Persisted).unwrap();
    s.close().unwrap();
    // A power cut in the middle of the direct write: one 4 KiB sector inside the value never
    // reached the device (it still holds what was there before: zeros).
    let (file, at) = locate(dir.path(), &v[..64]);
    let sector = (at + 300_000).next_multiple_of(4096);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[sector..sector + 4096].fill(0);
    // The close sealed the segment (a summary lists the record): drop the summary as a crash
    // before the seal would have, so the open scans the tail.
    std::fs::write(&file, &bytes).unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "sum") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let s = open(dir.path());
    assert_eq!(
        s.get(&key(5)).unwrap(),
        None,
        "a torn bulk record was returned"
    );
    assert_eq!(s.get(&key(1)).unwrap().as_deref(), Some(&b"before"[..]));
    assert_eq!(
        s.recovery_report().torn_tails.len(),
        1,
        "the cut must be reported"
    );
}
