//! The measurement harness of `hotstore bench`, shared by the engine's runs (`bench`), the
//! peers and modes measured beside them (`bench_lmdb`, `bench_dram`, `bench_recovery`) and
//! `hotstore bench device`: threads counting operations in a timed window after a warm-up,
//! the benchmark's keys and values, scratch directories and where they go by default (minidaq's
//! too). It imports none of them.

use crate::scratch::ScratchDir;
use crate::{fail, Result};
use hotstore::FragmentKey;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Excluded from the figures: lets caches, segment pools and CPU clocks settle.
pub const WARMUP: Duration = Duration::from_millis(300);

/// A counter on its own cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Shared between the controller and the threads of one measurement.
#[derive(Default)]
pub(crate) struct Flags {
    pub(crate) stop: AtomicBool,
    pub(crate) full: AtomicBool,
    failed: AtomicBool,
    error: Mutex<Option<String>>,
}

impl Flags {
    pub(crate) fn fail(&self, msg: String) {
        if let Ok(mut e) = self.error.lock() {
            e.get_or_insert(msg);
        }
        self.failed.store(true, Ordering::Release);
    }
}

/// Ops and seconds in the measured window.
pub(crate) struct Window {
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    pub(crate) stopped_full: bool,
}

/// Runs `work(thread, counter, flags)` on `threads` threads: warm-up, then the window.
/// `work` loops until `flags.stop`, storing its running op count in `counter` after each op.
pub(crate) fn measure<F>(threads: usize, duration: Duration, work: F) -> Result<Window>
where
    F: Fn(usize, &AtomicU64, &Flags) + Sync,
{
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    let flags = Flags::default();
    let sum = |c: &[Counter]| c.iter().map(|c| c.0.load(Ordering::Relaxed)).sum::<u64>();
    let window = std::thread::scope(|scope| {
        for (t, c) in counters.iter().enumerate() {
            let (work, flags) = (&work, &flags);
            scope.spawn(move || work(t, &c.0, flags));
        }
        let halted = || flags.full.load(Ordering::Acquire) || flags.failed.load(Ordering::Acquire);
        let wait_until = |end: Instant| {
            while !halted() {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                std::thread::sleep((end - now).min(Duration::from_millis(1)));
            }
        };
        wait_until(Instant::now() + WARMUP);
        let (c0, t0) = (sum(&counters), Instant::now());
        let full_in_warmup = halted();
        wait_until(t0 + duration);
        let (c1, t1) = (sum(&counters), Instant::now());
        flags.stop.store(true, Ordering::Release);
        (c1 - c0, (t1 - t0).as_secs_f64(), full_in_warmup)
    });
    if let Some(msg) = flags.error.lock().ok().and_then(|mut e| e.take()) {
        return fail(msg);
    }
    let (ops, secs, full_in_warmup) = window;
    if full_in_warmup {
        return fail(
            "the store filled up during the warm-up: give a larger --capacity or a smaller value size",
        );
    }
    Ok(Window {
        ops,
        secs,
        stopped_full: flags.full.load(Ordering::Acquire),
    })
}

/// A new temporary directory under `base`, removed when dropped or on SIGINT/SIGTERM.
pub(crate) fn temp_dir_in(base: &Path) -> Result<ScratchDir> {
    ScratchDir::new_in(base, "bench")
}

/// The 16-byte DAQ key of `event` in `run`: the keys every benchmark writes and reads.
pub(crate) fn key(run: usize, event: u64) -> [u8; 16] {
    FragmentKey::new(run as u32, event, 0, 0).to_bytes()
}

/// A value of `len` non-trivial bytes.
pub(crate) fn value_buffer(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(151) ^ 0x5a)
        .collect()
}

/// Where a benchmark puts its temporary store: `--dir` (which must be a directory), else
/// [`default_base_dir`].
pub(crate) fn base_dir(dir: Option<&Path>) -> Result<PathBuf> {
    match dir {
        Some(d) if !d.is_dir() => fail(format!("{} is not a directory", d.display())),
        Some(d) => Ok(d.to_path_buf()),
        None => Ok(default_base_dir()),
    }
}

/// /dev/shm where there is one, else the system's temporary directory.
pub(crate) fn default_base_dir() -> PathBuf {
    if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    }
}
