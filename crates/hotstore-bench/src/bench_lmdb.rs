//! LMDB as the peer of `bench put|get --vs lmdb`: the same keys (16-byte DAQ keys), values and
//! measurement window as hotstore's own figures, through the `heed` binding, with LMDB at its
//! fastest (`MDB_NOSYNC | MDB_WRITEMAP`: no sync, writes straight into the map) in a fresh
//! directory under the same `--dir`. Puts are measured with 1000 puts per write transaction
//! ("batched") and with one ("single"); one writer thread, as LMDB allows one writer at a time.

use crate::bench_harness::{key, measure, temp_dir_in, value_buffer, Flags, Window};
use crate::{fail, Result};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Puts per write transaction in the batched variant.
pub const BATCH: u64 = 1000;
/// Gets per read transaction (renewed so a long run does not pin an old snapshot).
const GETS_PER_TXN: u64 = 1000;

struct Lmdb {
    _dir: crate::scratch::ScratchDir,
    env: Env,
    db: Database<Bytes, Bytes>,
}

fn lmdb_err(what: &str, e: heed::Error) -> crate::Error {
    crate::Error::Msg(format!("LMDB {what}: {e}"))
}

/// `bytes` rounded up to whole pages: LMDB refuses any other map size. Fix: `bench get --vs
/// lmdb` with its default 10 KiB values asked for 810327168 bytes and stopped with "map size
/// must be a multiple of the system page size".
fn map_size(bytes: u64) -> usize {
    // Safety: sysconf reads a constant of the system.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);
    usize::try_from(bytes.div_ceil(page).saturating_mul(page)).unwrap_or(usize::MAX)
}

fn open(base: &Path, map_bytes: u64) -> Result<Lmdb> {
    let dir = temp_dir_in(base)?;
    let mut opts = EnvOpenOptions::new();
    opts.map_size(map_size(map_bytes)).max_dbs(1);
    // Safety: heed requires that the flags be valid for LMDB (they are) and that the
    // environment's directory be opened once in this process (a fresh temporary directory).
    unsafe { opts.flags(EnvFlags::NO_SYNC | EnvFlags::WRITE_MAP) };
    // Safety: as above; nothing else maps this fresh directory.
    let env = unsafe { opts.open(dir.path()) }.map_err(|e| lmdb_err("open", e))?;
    let mut wtxn = env.write_txn().map_err(|e| lmdb_err("begin", e))?;
    let db: Database<Bytes, Bytes> = env
        .create_database(&mut wtxn, None)
        .map_err(|e| lmdb_err("create database", e))?;
    wtxn.commit().map_err(|e| lmdb_err("commit", e))?;
    Ok(Lmdb { _dir: dir, env, db })
}

fn is_map_full(e: &heed::Error) -> bool {
    matches!(e, heed::Error::Mdb(heed::MdbError::MapFull))
}

/// Puts new keys for `duration` (after the warm-up) with `batch` puts per transaction.
pub fn put_window(
    base: &Path,
    value_size: usize,
    batch: u64,
    duration: Duration,
    map_bytes: u64,
) -> Result<Window> {
    let l = open(base, map_bytes)?;
    let value = value_buffer(value_size);
    measure(1, duration, |_, counter: &AtomicU64, flags: &Flags| {
        let mut n = 0u64;
        while !flags.stop.load(Ordering::Relaxed) {
            let run = || -> Result<(), heed::Error> {
                let mut wtxn = l.env.write_txn()?;
                for i in 0..batch {
                    l.db.put(&mut wtxn, &key(0, n + i), &value)?;
                }
                wtxn.commit()
            };
            match run() {
                Ok(()) => {}
                Err(e) if is_map_full(&e) => {
                    flags.full.store(true, Ordering::Release);
                    return;
                }
                Err(e) => return flags.fail(format!("LMDB put: {e}")),
            }
            n += batch;
            counter.store(n, Ordering::Relaxed);
        }
    })
}

/// Populates `n` keys, then reads them for `duration`: random order if `random`, copying
/// nothing (LMDB hands out a slice of its map, as hotstore's `get_with` does).
pub fn get_window(
    base: &Path,
    value_size: usize,
    n: u64,
    random: bool,
    duration: Duration,
    map_bytes: u64,
) -> Result<Window> {
    let l = open(base, map_bytes)?;
    let value = value_buffer(value_size);
    let mut i = 0;
    while i < n {
        let mut wtxn = l.env.write_txn().map_err(|e| lmdb_err("begin", e))?;
        for k in i..(i + BATCH).min(n) {
            l.db.put(&mut wtxn, &key(0, k), &value)
                .map_err(|e| lmdb_err("populate", e))?;
        }
        wtxn.commit().map_err(|e| lmdb_err("commit", e))?;
        i += BATCH;
    }
    measure(1, duration, |_, counter: &AtomicU64, flags: &Flags| {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut i = 0u64;
        let mut done = 0u64;
        while !flags.stop.load(Ordering::Relaxed) {
            let rtxn = match l.env.read_txn() {
                Ok(t) => t,
                Err(e) => return flags.fail(format!("LMDB read txn: {e}")),
            };
            for _ in 0..GETS_PER_TXN {
                let k = if random {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                } else {
                    i = (i + 1) % n;
                    i
                };
                match l.db.get(&rtxn, &key(0, k)) {
                    Ok(Some(v)) => {
                        black_box(v[0]);
                    }
                    Ok(None) => return flags.fail(format!("LMDB lost key {k}")),
                    Err(e) => return flags.fail(format!("LMDB get: {e}")),
                }
            }
            done += GETS_PER_TXN;
            counter.store(done, Ordering::Relaxed);
        }
    })
}

/// Checks the options `--vs lmdb` can compare fairly.
pub fn check(threads: usize) -> Result<()> {
    if threads != 1 {
        return fail(
            "--vs lmdb compares one thread with one thread (LMDB has one writer at a time): \
             use --threads 1",
        );
    }
    Ok(())
}
