//! Measures the machine's own limits, so a benchmark can print its result beside
//! the best this hardware could do (memory copy bandwidth, or sequential direct
//! write bandwidth of the device a store tier lives on).

use crate::util::{exact_bytes, median};
use std::alloc::{self, Layout};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Alignment of O_DIRECT buffers, offsets and lengths: 4096 satisfies both
/// 512-byte and 4 KiB logical-block devices.
const DIRECT_ALIGN: usize = 4096;

const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58f6;

/// Buffer size `write_limit_for` uses for memcpy: large enough to defeat the caches.
const MEMCPY_BUFFER_BYTES: usize = 64 << 20;
/// Block size `write_limit_for` uses for O_DIRECT writes.
const DIRECT_BLOCK_BYTES: usize = 1 << 20;
/// Most disk space `write_limit_for` uses for its temporary file: more than a run writes, so
/// every block is new, as for a store filling fresh segments and for fio over a large file.
/// Fix: with 512 MiB a 300 ms run on this disk wrapped around and spent most of its time
/// overwriting blocks it had just allocated, which this virtio disk takes 1.4-2x as fast
/// (1 s runs alternated: 2.3-2.5 GB/s overwriting, 1.6-1.7 writing new blocks; in another
/// hour the old limit read 4.0-4.8 while fio wrote new blocks at 2.0-2.6).
const DIRECT_MAX_BYTES: u64 = 8 << 30;
/// Runs `write_limit_for` takes the median of.
const REPEATS: usize = 3;

/// A measured limit of this machine, printed beside a benchmark result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Limit {
    /// e.g. "memcpy 1 thread(s)" or "O_DIRECT sequential write, 1 MiB blocks"
    pub name: String,
    /// Bytes moved per second (bytes copied for memcpy, bytes written for writes).
    pub bytes_per_sec: f64,
}

/// Single- or multi-thread memcpy bandwidth: each thread copies between its own two
/// `buffer_bytes` buffers (default callers pass 64 MiB) repeatedly for about `duration`,
/// after one warm-up pass that faults the pages in. Returns the median over `repeats` runs
/// of the aggregate bytes copied per second.
///
/// `threads`, `buffer_bytes` and `repeats` are treated as at least 1. The calling thread is
/// one of the copying threads; if the OS refuses to spawn the others, the measurement uses
/// the threads it got and the name reports that count.
pub fn memcpy_bandwidth(
    threads: usize,
    buffer_bytes: usize,
    duration: Duration,
    repeats: usize,
) -> Limit {
    let threads = threads.max(1);
    let buffer_bytes = buffer_bytes.max(1);
    let repeats = repeats.max(1);

    let (rates, got_threads) = thread::scope(|scope| {
        // One command channel per helper (a deadline per run; hanging up ends it) and
        // a shared result channel. Channels rather than a Barrier, so a helper that
        // could not be spawned cannot leave the others waiting forever.
        let (result_tx, result_rx) = mpsc::channel::<(u64, Instant)>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut commands = Vec::with_capacity(threads - 1);
        for i in 1..threads {
            let (command_tx, command_rx) = mpsc::channel::<Instant>();
            let result_tx = result_tx.clone();
            let ready_tx = ready_tx.clone();
            let spawned = thread::Builder::new()
                .name(format!("memcpy-{i}"))
                .spawn_scoped(scope, move || {
                    let mut copier = Copier::new(buffer_bytes);
                    if ready_tx.send(()).is_err() {
                        return;
                    }
                    while let Ok(deadline) = command_rx.recv() {
                        let done = copier.copy_until(deadline);
                        if result_tx.send(done).is_err() {
                            return;
                        }
                    }
                });
            if spawned.is_ok() {
                commands.push(command_tx);
            }
        }
        drop(ready_tx);

        // Fault in the pages before any timing, on every thread.
        let mut copier = Copier::new(buffer_bytes);
        let mut helpers = 0;
        while helpers < commands.len() && ready_rx.recv().is_ok() {
            helpers += 1;
        }

        let mut rates = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let start = Instant::now();
            let deadline = start + duration;
            let mut sent = 0;
            for command in &commands {
                if command.send(deadline).is_ok() {
                    sent += 1;
                }
            }
            let (mut bytes, mut end) = copier.copy_until(deadline);
            for _ in 0..sent {
                match result_rx.recv() {
                    Ok((b, e)) => {
                        bytes += b;
                        end = end.max(e);
                    }
                    Err(_) => break,
                }
            }
            // Aggregate over wall-clock time until the last thread finished.
            rates.push(per_sec(bytes, end.duration_since(start)));
        }
        // Hanging up the command channels ends the helpers; the scope joins them.
        drop(commands);
        (rates, helpers + 1)
    });

    Limit {
        name: format!("memcpy {got_threads} thread(s)"),
        bytes_per_sec: median(&rates).unwrap_or(0.0),
    }
}

/// One thread's pair of buffers.
struct Copier {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl Copier {
    /// Allocates both buffers and runs the warm-up pass, so page faults are not timed.
    fn new(bytes: usize) -> Self {
        // A non-zero fill writes (and so faults in) every page of `src`; `dst` is
        // zero-allocated and faulted in by the warm-up copy.
        let mut copier = Copier {
            src: vec![0xa5; bytes],
            dst: vec![0; bytes],
        };
        copier.copy_once();
        copier
    }

    fn copy_once(&mut self) {
        // black_box on both sides: the compiler must assume the source may have
        // changed and the destination is read, so it cannot elide the copy.
        self.dst
            .copy_from_slice(std::hint::black_box(self.src.as_slice()));
        std::hint::black_box(self.dst.as_mut_slice());
    }

    /// Copies at least once and until `deadline`; returns bytes copied and end time.
    fn copy_until(&mut self, deadline: Instant) -> (u64, Instant) {
        let mut bytes = 0u64;
        loop {
            self.copy_once();
            bytes += self.src.len() as u64;
            let now = Instant::now();
            if now >= deadline {
                return (bytes, now);
            }
        }
    }
}

/// Sequential write bandwidth of the device under `dir` with O_DIRECT, `block_bytes`
/// aligned buffers (4096-byte alignment), writing a temporary file (created inside `dir`,
/// removed afterwards, even on error) for about `duration`, ending with fdatasync whose time
/// is counted. File size written is capped at `max_bytes` (wrap around to offset 0 and
/// overwrite if reached before the duration ends, or where the device runs out of space).
/// Median over `repeats` runs (at least 1), each on a fresh file so every run pays the same
/// block allocation cost.
///
/// Returns an `io::Error` with a clear message if O_DIRECT is refused (e.g. tmpfs on older
/// kernels returns EINVAL): callers then fall back. `block_bytes` must be a non-zero
/// multiple of 4096 and `max_bytes` at least one block, else `InvalidInput`.
pub fn direct_write_bandwidth(
    dir: &Path,
    block_bytes: usize,
    duration: Duration,
    max_bytes: u64,
    repeats: usize,
) -> io::Result<Limit> {
    direct_write_limit(dir, block_bytes, duration, max_bytes, repeats, false)
}

/// What a durable-on-return write of `block_bytes` costs the device: O_DIRECT sequential writes
/// of `block_bytes` into a new file, each followed by `fdatasync` (the work a Persisted put
/// does, where [`direct_write_bandwidth`] syncs once at the end). The file grows to `max_bytes`
/// at most (then it is rewritten), so runs shorter than that write only new blocks, as a fresh
/// store does. Median of `repeats` runs; same errors as [`direct_write_bandwidth`].
pub fn direct_synced_write_bandwidth(
    dir: &Path,
    block_bytes: usize,
    duration: Duration,
    max_bytes: u64,
    repeats: usize,
) -> io::Result<Limit> {
    direct_write_limit(dir, block_bytes, duration, max_bytes, repeats, true)
}

/// The median of `repeats` (at least 1) [`direct_write_run`]s after checking the sizes, named
/// for what it measured.
fn direct_write_limit(
    dir: &Path,
    block_bytes: usize,
    duration: Duration,
    max_bytes: u64,
    repeats: usize,
    sync_each: bool,
) -> io::Result<Limit> {
    if block_bytes == 0 || !block_bytes.is_multiple_of(DIRECT_ALIGN) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "O_DIRECT block size {block_bytes} is not a non-zero multiple of {DIRECT_ALIGN}"
            ),
        ));
    }
    let block = block_bytes as u64;
    if max_bytes < block {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("max_bytes {max_bytes} is smaller than one {block_bytes}-byte block"),
        ));
    }
    let cap = probe_cap(max_bytes, hotstore::free_space_bytes(dir), block)
        .map_err(|e| io::Error::new(e.kind(), format!("{e} under {}", dir.display())))?;

    let mut buf = AlignedBuf::new(block_bytes)?;
    // Random contents, so a compressing or deduplicating device cannot flatter the result.
    rand::Rng::fill(&mut rand::thread_rng(), buf.as_mut_slice());

    let mut rates = Vec::with_capacity(repeats.max(1));
    let mut wrapped = false;
    for _ in 0..repeats.max(1) {
        let (rate, run_wrapped) = direct_write_run(dir, buf.as_slice(), duration, cap, sync_each)?;
        rates.push(rate);
        wrapped |= run_wrapped;
    }
    let block = exact_bytes(block);
    let mut name = if sync_each {
        format!("O_DIRECT sequential write + fdatasync per {block} block, new file")
    } else {
        format!("O_DIRECT sequential write, {block} blocks")
    };
    if wrapped {
        // Rewriting blocks is faster than writing new ones on some devices: say so.
        name.push_str(&format!(
            " (file wrapped at {}: partly overwrites)",
            exact_bytes(cap)
        ));
    }
    Ok(Limit {
        name,
        bytes_per_sec: median(&rates).unwrap_or(0.0),
    })
}

/// The size of the limit's temporary file: `max_bytes`, at most half the free space (the
/// probe must not fill a device other writers use), in whole blocks (so every offset stays
/// aligned). `StorageFull` if that is not even one block.
fn probe_cap(max_bytes: u64, free: Option<u64>, block: u64) -> io::Result<u64> {
    let cap = free.map_or(max_bytes, |f| max_bytes.min(f / 2));
    let cap = cap - cap % block;
    if cap == 0 {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{} free: too little for a {}-block O_DIRECT probe file",
                exact_bytes(free.unwrap_or(0)),
                exact_bytes(block)
            ),
        ));
    }
    Ok(cap)
}

/// One timed run on a fresh temporary file; returns bytes written per second and whether the
/// file wrapped (some blocks were written twice). `sync_each`: `fdatasync` after every block
/// (else once at the end).
fn direct_write_run(
    dir: &Path,
    block: &[u8],
    duration: Duration,
    cap: u64,
    sync_each: bool,
) -> io::Result<(f64, bool)> {
    // In a scratch directory: removed when dropped (the error paths below included) and on
    // SIGINT/SIGTERM, so a stopped benchmark does not leave gigabytes behind.
    let scratch = crate::scratch::ScratchDir::new_in(dir, "limit")
        .map_err(|e| io::Error::other(e.to_string()))?;
    let path = scratch.path().join("probe");
    std::fs::File::create(&path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot create a temporary file in {}: {e}", dir.display()),
        )
    })?;
    let refused = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "O_DIRECT refused by the file system under {}: {e}",
                dir.display()
            ),
        )
    };
    // A second descriptor opened with O_DIRECT; EINVAL here means the file system does
    // not support it.
    let file = open_direct(&path).map_err(refused)?;

    let len = block.len() as u64;
    let mut offset = 0u64;
    let mut written = 0u64;
    let start = Instant::now();
    let deadline = start + duration;
    let mut cap = cap;
    let mut wrapped = false;
    loop {
        let wrote = file.write_all_at(block, offset);
        if matches!(&wrote, Err(e) if e.raw_os_error() == Some(libc::ENOSPC)) && offset > 0 {
            // The device filled meanwhile: the file wraps where the space ended.
            cap = offset;
            offset = 0;
            wrapped = true;
            continue;
        }
        wrote.map_err(|e| {
            // Some file systems accept the open and reject the aligned write instead.
            if e.raw_os_error() == Some(libc::EINVAL) {
                refused(e)
            } else {
                io::Error::new(
                    e.kind(),
                    format!("O_DIRECT write to {} failed: {e}", path.display()),
                )
            }
        })?;
        if sync_each {
            file.sync_data().map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("fdatasync of {} failed: {e}", path.display()),
                )
            })?;
        }
        written += len;
        offset += len;
        if offset >= cap {
            offset = 0;
            wrapped = true;
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    // O_DIRECT bypasses the page cache, but not the device's write cache nor the
    // allocation metadata: the data is only durable after fdatasync.
    file.sync_data().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("fdatasync of {} failed: {e}", path.display()),
        )
    })?;
    let elapsed = start.elapsed();
    drop(file);
    drop(scratch);
    Ok((per_sec(written, elapsed), wrapped))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_direct(path: &Path) -> io::Result<std::fs::File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_direct(_path: &Path) -> io::Result<std::fs::File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "O_DIRECT is only supported on Linux",
    ))
}

/// A zeroed heap buffer aligned for O_DIRECT, freed on drop.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> io::Result<Self> {
        let layout = Layout::from_size_align(len, DIRECT_ALIGN)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // Safety: callers pass len > 0 (checked by direct_write_bandwidth), so the layout
        // has a non-zero size as alloc_zeroed requires.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot allocate a {len}-byte aligned buffer"),
            )
        })?;
        Ok(AlignedBuf { ptr, layout })
    }

    fn as_slice(&self) -> &[u8] {
        // Safety: ptr points to layout.size() initialised (zeroed) bytes owned by self,
        // and the shared borrow of self prevents concurrent mutation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // Safety: as in as_slice; the exclusive borrow of self makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // Safety: ptr was returned by alloc_zeroed with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// True if `dir` is on tmpfs/ramfs (statfs f_type TMPFS_MAGIC 0x01021994 or RAMFS_MAGIC
/// 0x858458f6). False if statfs fails or on non-Linux systems.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn is_memory_fs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // Safety: c_path is a NUL-terminated string and st points to writable memory of
    // the size statfs fills in.
    if unsafe { libc::statfs(c_path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // Safety: statfs returned 0, so it initialised the whole struct.
    let st = unsafe { st.assume_init() };
    // The width and signedness of f_type vary by target; the magic numbers are 32-bit.
    let f_type = st.f_type as u32;
    f_type == TMPFS_MAGIC || f_type == RAMFS_MAGIC
}

/// True if `dir` is on tmpfs/ramfs. Always false off Linux, where the statfs magic
/// numbers do not apply.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn is_memory_fs(_dir: &Path) -> bool {
    false
}

/// The limit that applies to writing into a store tier under `dir`: memcpy bandwidth with
/// `threads` threads (64 MiB buffers) if it is a memory file system, else O_DIRECT sequential
/// write with 1 MiB blocks into new blocks of a temporary file (see `DIRECT_MAX_BYTES`;
/// falling back to memcpy with a name that says so if O_DIRECT is refused or the write fails).
///
/// Takes the median of 3 runs of about `duration` each, so it takes about 3 × `duration`.
pub fn write_limit_for(dir: &Path, threads: usize, duration: Duration) -> Limit {
    if is_memory_fs(dir) {
        return memcpy_bandwidth(threads, MEMCPY_BUFFER_BYTES, duration, REPEATS);
    }
    match direct_write_bandwidth(dir, DIRECT_BLOCK_BYTES, duration, DIRECT_MAX_BYTES, REPEATS) {
        Ok(limit) => limit,
        Err(e) => {
            let mut limit = memcpy_bandwidth(threads, MEMCPY_BUFFER_BYTES, duration, REPEATS);
            limit.name = format!("{} (fallback: {e})", limit.name);
            limit
        }
    }
}

/// Least bytes of each thread's ring [`fill_and_checksum_bandwidth`] writes its fragments into
/// (less only where a quarter of the available memory is less).
const FILL_RING_MIN_BYTES: usize = 64 << 20;
/// Most bytes of that ring, per thread.
const FILL_RING_MAX_BYTES: usize = 2 << 30;
/// Least bytes of a ring in any case.
const FILL_RING_FLOOR_BYTES: usize = 8 << 20;

/// Bytes of each of `threads` rings [`fill_and_checksum_bandwidth`] writes into: together twice
/// the largest CPU cache the kernel reports (sysfs), each at least 64 MiB and at most 2 GiB, so
/// their slots are beyond the caches as a store's next free space is; and together at most a
/// quarter of the available memory. Fix: a fixed 64 MiB ring on a machine with a 480 MiB
/// last-level cache (this project's Xeon VM, 2026-11-29) gave 13.8-19.8 GiB/s, half again what
/// 10 KiB copies into a 1 GiB ring make there. Fix (review): a ring of twice the cache for
/// each thread made `bench put --threads 32` ask for 30 GiB; the last-level cache is shared.
fn fill_ring_bytes(threads: usize) -> usize {
    let threads = threads.max(1);
    let largest = (0..8)
        .filter_map(|i| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size"))
                .ok()
        })
        .filter_map(|t| parse_cache_size(t.trim()))
        .max()
        .unwrap_or(0);
    let each = (2 * largest / threads).clamp(FILL_RING_MIN_BYTES, FILL_RING_MAX_BYTES);
    match mem_available_bytes() {
        Some(mem) => each
            .min(usize::try_from(mem / 4).unwrap_or(usize::MAX) / threads)
            .max(FILL_RING_FLOOR_BYTES),
        None => each,
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A sysfs cache size (`48K`, `2048K`, `32M`) in bytes.
fn parse_cache_size(text: &str) -> Option<usize> {
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: usize = digits.parse().ok()?;
    match unit {
        "K" => Some(n << 10),
        "M" => Some(n << 20),
        "G" => Some(n << 30),
        _ => None,
    }
}

/// The least work a readout does per fragment, on `threads` threads each with its own ring:
/// copy a fragment of `fragment_bytes` into memory it has not touched lately (the next slot of
/// a ring twice the size of the largest cache, as a store's next free space is) with the
/// engine's copy (`hotstore::copy_value`: from 4 KiB, stores that bypass the cache) and compute
/// the crc32c the engine stores with it (`hotstore::crc32c`) from the source, in cache, as a
/// reservation filled in order does. The limit for the work of `minidaq`'s readout (fill a
/// reserved slot, commit it), beside memcpy of large buffers, which needs no checksum. Median of `repeats`
/// runs of about `duration`, after one warm-up pass over the rings (made once, for all runs).
pub fn fill_and_checksum_bandwidth(
    fragment_bytes: usize,
    threads: usize,
    duration: Duration,
    repeats: usize,
) -> Limit {
    fill_and_checksum_in_rings(
        fill_ring_bytes(threads),
        fragment_bytes,
        threads,
        duration,
        repeats,
    )
}

/// The `work:` limit `minidaq` and `bench put` print: [`fill_and_checksum_bandwidth`] of
/// `value_bytes` pieces on `threads` threads, the median of 3 runs of 300 ms.
pub fn work_limit(value_bytes: usize, threads: usize) -> Limit {
    fill_and_checksum_bandwidth(value_bytes, threads, Duration::from_millis(300), 3)
}

/// [`fill_and_checksum_bandwidth`] with rings of `ring_bytes`.
fn fill_and_checksum_in_rings(
    ring_bytes: usize,
    fragment_bytes: usize,
    threads: usize,
    duration: Duration,
    repeats: usize,
) -> Limit {
    let fragment = fragment_bytes.clamp(1, ring_bytes / 4);
    let threads = threads.max(1);
    let repeats = repeats.max(1);
    // Each thread's rate in each run; the threads' runs start together.
    let start = std::sync::Barrier::new(threads);
    let per_thread: Vec<Vec<f64>> = thread::scope(|scope| {
        let run = || {
            let mut ring = FillRing::new(fragment, ring_bytes);
            (0..repeats)
                .map(|_| {
                    start.wait();
                    ring.rate_for(duration)
                })
                .collect::<Vec<f64>>()
        };
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(run)).collect();
        let mut all = vec![run()];
        all.extend(helpers.into_iter().filter_map(|h| h.join().ok()));
        all
    });
    let rates: Vec<f64> = (0..repeats)
        .map(|r| per_thread.iter().filter_map(|t| t.get(r)).sum())
        .collect();
    Limit {
        name: format!(
            "crc32c + engine copy of {} values into a {} ring, {threads} thread(s)",
            crate::util::human_bytes(fragment as f64),
            crate::util::human_bytes(ring_bytes as f64),
        ),
        bytes_per_sec: median(&rates).unwrap_or(0.0),
    }
}

/// One thread's ring for [`fill_and_checksum_bandwidth`].
struct FillRing {
    /// A pattern a little longer than a fragment, read at moving offsets (a generator's
    /// source is as warm).
    src: Vec<u8>,
    ring: Vec<u8>,
    fragment: usize,
    next: usize,
}

impl FillRing {
    /// A ring of `bytes` with every page faulted in and written once (one pass, untimed).
    fn new(fragment: usize, bytes: usize) -> Self {
        let mut r = FillRing {
            src: (0..fragment + 4096).map(|i| (i * 131 + 7) as u8).collect(),
            ring: vec![0x11; bytes],
            fragment,
            next: 0,
        };
        std::hint::black_box(r.fill(bytes / fragment));
        r
    }

    /// Fills the next `n` fragments; returns the xor of their checksums.
    fn fill(&mut self, n: usize) -> u32 {
        let slots = self.ring.len() / self.fragment;
        let mut acc = 0;
        for _ in 0..n {
            let at = (self.next % slots) * self.fragment;
            let from = (self.next * 64) % 4096;
            let src = &self.src[from..from + self.fragment];
            acc ^= hotstore::crc32c(src);
            hotstore::copy_value(&mut self.ring[at..at + self.fragment], src);
            self.next += 1;
        }
        acc
    }

    /// Bytes per second over about `duration` (the clock read every 1 MiB or so).
    fn rate_for(&mut self, duration: Duration) -> f64 {
        let step = ((1 << 20) / self.fragment).max(1);
        let started = Instant::now();
        let mut bytes = 0u64;
        while started.elapsed() < duration {
            std::hint::black_box(self.fill(step));
            bytes += (step * self.fragment) as u64;
        }
        per_sec(bytes, started.elapsed())
    }
}

/// Size of each new file [`fresh_pages_bandwidth`] writes.
const FRESH_FILE_BYTES: usize = 64 << 20;

/// What writing into *new* memory of a memory file system costs: new files of 64 MiB under
/// `dir`, each sized, mapped shared and written by one thread with 1 MiB `memcpy`s, so that
/// every page is allocated, zeroed and mapped by the kernel on first touch (what a hand-written
/// buffer does on a fresh tmpfs file, and what a fresh store's files cost before they are
/// recycled). Every file is held until the last run ends, as a store holds its files: a
/// probe that removed each file before making the next one wrote into the pages it had just
/// freed, which a virtual machine whose balloon takes freed memory back (free page reporting)
/// hands out at 2 GB/s against 0.4 GB/s for the pages a growing store gets (measured here,
/// Firecracker guest, 2026-11-29). At most `max_bytes` (and half the free space) are written
/// in all, split over `repeats` runs of at most `duration` each; neither the mapping's setup
/// nor the removal is timed. Fails only if a file cannot be made or mapped.
pub fn fresh_pages_bandwidth(
    dir: &Path,
    duration: Duration,
    max_bytes: u64,
    repeats: usize,
) -> io::Result<Limit> {
    fresh_pages_bandwidth_holding(dir, duration, max_bytes, repeats).map(|(limit, _)| limit)
}

/// The files [`fresh_pages_bandwidth_holding`] wrote, removed (and their pages freed) on drop.
pub struct HeldPages {
    _files: Vec<(std::fs::File, SharedMap)>,
    _scratch: crate::scratch::ScratchDir,
}

/// [`fresh_pages_bandwidth`], with its files kept until the caller drops them: a benchmark
/// that measures a store after the probe holds them through its runs, so the store does not
/// take the pages the probe would free (which a guest with free page reporting hands out far
/// faster than pages it gave back to the host).
pub fn fresh_pages_bandwidth_holding(
    dir: &Path,
    duration: Duration,
    max_bytes: u64,
    repeats: usize,
) -> io::Result<(Limit, HeldPages)> {
    // A page touched past the file system's space would kill the process (SIGBUS), so all the
    // files held must fit twice over.
    let cap = probe_cap(
        max_bytes.max(FRESH_FILE_BYTES as u64),
        hotstore::free_space_bytes(dir),
        FRESH_FILE_BYTES as u64,
    )
    .map_err(|e| io::Error::new(e.kind(), format!("{e} under {}", dir.display())))?;
    // Removed when dropped and on SIGINT/SIGTERM (see `ScratchDir`).
    let scratch = crate::scratch::ScratchDir::new_in(dir, "fresh-pages")
        .map_err(|e| io::Error::other(e.to_string()))?;
    let src = vec![0x5au8; 1 << 20];
    let repeats = repeats.max(1);
    let per_run = (cap / repeats as u64).max(FRESH_FILE_BYTES as u64);
    let mut held = Vec::new();
    let mut rates = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let (mut bytes, mut busy) = (0u64, Duration::ZERO);
        while busy < duration
            && bytes < per_run
            && held.len() as u64 * (FRESH_FILE_BYTES as u64) < cap
        {
            let file = tempfile::tempfile_in(scratch.path())?;
            file.set_len(FRESH_FILE_BYTES as u64)?;
            let mut map = SharedMap::new(&file, FRESH_FILE_BYTES)?;
            let started = Instant::now();
            for chunk in map.as_mut_slice().chunks_mut(src.len()) {
                chunk.copy_from_slice(&src[..chunk.len()]);
            }
            std::hint::black_box(map.as_mut_slice()[FRESH_FILE_BYTES - 1]);
            busy += started.elapsed();
            bytes += FRESH_FILE_BYTES as u64;
            held.push((file, map));
        }
        if bytes > 0 {
            rates.push(per_sec(bytes, busy));
        }
    }
    let limit = Limit {
        name: "memcpy into new pages of this file system (64 MiB files, held, first touch)".into(),
        bytes_per_sec: median(&rates).unwrap_or(0.0),
    };
    Ok((
        limit,
        HeldPages {
            _files: held,
            _scratch: scratch,
        },
    ))
}

/// A shared read-write mapping of a whole file, unmapped on drop.
struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

impl SharedMap {
    fn new(file: &std::fs::File, len: usize) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        // Safety: maps `len` bytes of a file at least that long; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMap {
            ptr: ptr.cast(),
            len,
        })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // Safety: the mapping is `len` bytes, readable and writable, owned by this struct
        // (the benchmark's own temporary file); the exclusive borrow makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // Safety: unmaps exactly the mapping made in `new`, once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Bytes per second, guarding against a zero elapsed time on coarse clocks.
fn per_sec(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    #[test]
    fn memcpy_is_faster_than_100_mb_per_sec() {
        let limit = memcpy_bandwidth(1, 8 << 20, Duration::from_millis(50), 3);
        assert_eq!(limit.name, "memcpy 1 thread(s)");
        assert!(limit.bytes_per_sec > 100.0 * MB, "{limit:?}");

        let limit = memcpy_bandwidth(2, 8 << 20, Duration::from_millis(50), 2);
        assert_eq!(limit.name, "memcpy 2 thread(s)");
        assert!(limit.bytes_per_sec > 100.0 * MB, "{limit:?}");
    }

    /// Independent statfs check, so the test does not just repeat is_memory_fs.
    fn statfs_says_tmpfs(path: &str) -> Option<bool> {
        let c_path = std::ffi::CString::new(path).ok()?;
        // Safety: an all-zero statfs is a valid value of this plain C struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // Safety: c_path is NUL-terminated and st is a valid, writable statfs.
        if unsafe { libc::statfs(c_path.as_ptr(), &mut st) } != 0 {
            return None;
        }
        Some(st.f_type as u32 == TMPFS_MAGIC)
    }

    #[test]
    fn dev_shm_is_memory_fs() {
        if Path::new("/dev/shm").is_dir() && statfs_says_tmpfs("/dev/shm") == Some(true) {
            assert!(is_memory_fs(Path::new("/dev/shm")));
        }
        assert!(!is_memory_fs(Path::new("/nonexistent/hotstore/limits")));
    }

    /// Fix (found in review): with an 8 GiB file, the probe filled a device with less free
    /// space than one run writes, to the last byte, under whatever else was writing there.
    #[test]
    fn the_probe_file_takes_at_most_half_the_free_space() {
        const MIB: u64 = 1 << 20;
        assert_eq!(probe_cap(8 << 30, None, MIB).unwrap(), 8 << 30);
        assert_eq!(probe_cap(8 << 30, Some(100 * MIB), MIB).unwrap(), 50 * MIB);
        assert_eq!(probe_cap(8 << 30, Some(101 * MIB), MIB).unwrap(), 50 * MIB);
        assert_eq!(probe_cap(4 * MIB, Some(100 * MIB), MIB).unwrap(), 4 * MIB);
        let e = probe_cap(8 << 30, Some(MIB), MIB).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(e.to_string().contains("too little"), "{e}");
    }

    #[test]
    fn fresh_pages_are_measured_and_leave_nothing_behind() {
        let tmp = tempfile::tempdir_in(std::env::temp_dir()).expect("tempdir");
        let limit = fresh_pages_bandwidth(tmp.path(), Duration::from_millis(20), 128 << 20, 1)
            .expect("fresh pages limit");
        assert!(limit.bytes_per_sec > 0.0, "{limit:?}");
        assert!(limit.name.contains("new pages"), "{limit:?}");
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn the_fill_ring_is_past_the_largest_cache() {
        assert_eq!(parse_cache_size("48K"), Some(48 << 10));
        assert_eq!(parse_cache_size("491520K"), Some(480 << 20));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("12"), None);
        assert_eq!(parse_cache_size("K"), None);
        for threads in [1, 2, 64, 4096] {
            let ring = fill_ring_bytes(threads);
            assert!(
                (FILL_RING_FLOOR_BYTES..=FILL_RING_MAX_BYTES).contains(&ring),
                "{threads}: {ring}"
            );
            if let Some(mem) = mem_available_bytes() {
                let all = (ring * threads) as u64;
                assert!(
                    all <= mem / 4 || ring == FILL_RING_FLOOR_BYTES,
                    "{threads} rings of {ring} with {mem} available"
                );
            }
        }
    }

    #[test]
    fn copy_and_checksum_is_measured_for_odd_sizes_and_threads() {
        // A fragment that does not divide the ring, one larger than its clamp, and 2 threads.
        for (fragment, threads) in [(10_240, 1), (1000, 2), (1 << 30, 1)] {
            let limit = fill_and_checksum_in_rings(
                FILL_RING_MIN_BYTES,
                fragment,
                threads,
                Duration::from_millis(10),
                2,
            );
            assert!(limit.bytes_per_sec > 0.0, "{limit:?}");
            assert!(
                limit.name.contains(&format!("{threads} thread(s)")),
                "{limit:?}"
            );
        }
    }

    fn check_direct_write(dir: &Path) {
        let tmp = tempfile::tempdir_in(dir).expect("tempdir");
        match direct_write_bandwidth(tmp.path(), 1 << 20, Duration::from_millis(100), 64 << 20, 2) {
            Ok(limit) => {
                // A fast device fills 64 MiB in 100 ms: the name then says it wrapped.
                assert!(
                    limit
                        .name
                        .starts_with("O_DIRECT sequential write, 1 MiB blocks"),
                    "{limit:?}"
                );
                assert!(limit.bytes_per_sec > 0.0, "{limit:?}");
            }
            Err(e) => eprintln!("O_DIRECT under {}: {e}", dir.display()),
        }
        // A file of one block wraps at once: the limit says it measured overwrites.
        if let Ok(limit) =
            direct_write_bandwidth(tmp.path(), 1 << 20, Duration::from_millis(20), 1 << 20, 1)
        {
            assert_eq!(
                limit.name,
                "O_DIRECT sequential write, 1 MiB blocks (file wrapped at 1 MiB: partly overwrites)"
            );
        }
        // Every probe file is gone, wrapped or not.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        match direct_synced_write_bandwidth(
            tmp.path(),
            12 << 10,
            Duration::from_millis(50),
            64 << 20,
            1,
        ) {
            Ok(limit) => {
                // Where syncs cost nothing (tmpfs), 64 MiB fill in 50 ms and the file wraps.
                assert!(
                    limit.name.starts_with(
                        "O_DIRECT sequential write + fdatasync per 12 KiB block, new file"
                    ),
                    "{limit:?}"
                );
                assert!(limit.bytes_per_sec > 0.0, "{limit:?}");
            }
            Err(e) => eprintln!("O_DIRECT with syncs under {}: {e}", dir.display()),
        }
        // The temporary files are removed whether the measurements worked or not.
        let left: Vec<_> = std::fs::read_dir(tmp.path()).expect("read_dir").collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn direct_write_on_disk() {
        // /var/tmp is disk-backed by convention (unlike /tmp, often tmpfs); otherwise the
        // target directory holding this test binary.
        let dir = if Path::new("/var/tmp").is_dir() {
            std::path::PathBuf::from("/var/tmp")
        } else {
            let exe = std::env::current_exe().expect("current_exe");
            exe.parent().expect("exe dir").to_path_buf()
        };
        check_direct_write(&dir);
    }

    #[test]
    fn direct_write_on_dev_shm() {
        if Path::new("/dev/shm").is_dir() {
            check_direct_write(Path::new("/dev/shm"));
        }
    }

    #[test]
    fn direct_write_rejects_bad_sizes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = Duration::from_millis(1);
        let kind = |r: io::Result<Limit>| r.err().map(|e| e.kind());
        let invalid = Some(io::ErrorKind::InvalidInput);
        assert_eq!(
            kind(direct_write_bandwidth(tmp.path(), 0, d, 1 << 20, 1)),
            invalid
        );
        assert_eq!(
            kind(direct_write_bandwidth(tmp.path(), 1000, d, 1 << 20, 1)),
            invalid
        );
        assert_eq!(
            kind(direct_write_bandwidth(tmp.path(), 4096, d, 100, 1)),
            invalid
        );
        for (block, max) in [(0, 1 << 20), (1000, 1 << 20), (4096, 100)] {
            assert_eq!(
                kind(direct_synced_write_bandwidth(tmp.path(), block, d, max, 1)),
                invalid,
                "block {block}, max {max}"
            );
        }
    }
}
