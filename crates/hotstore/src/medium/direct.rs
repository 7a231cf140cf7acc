//! Direct I/O for bulk records on block tiers: the 4 KiB-aligned interior of a large record is
//! written with `O_DIRECT` from an aligned bounce buffer, so the device, not a copy into the
//! page cache followed by write-back, carries the bytes (a `Persisted` put then costs the
//! device's write and one cache flush). The unaligned edges of the record go through the page
//! cache as before, so the previous and the next record (which share those 4 KiB blocks) never
//! meet a direct write.
//!
//! ```text
//!  record:   | header | key | value ..................................... |
//!  file:     ....|....A=align_up(body)..........................B=align_down(end)....|
//!                 buffered      O_DIRECT (copied into aligned chunks)         buffered
//! ```
//!
//! Reads need nothing special: the kernel drops the page-cache pages a direct write covers,
//! so a later read through the mapping faults them in from the device (the values are correct,
//! the first read of each page costs a device read).

use crate::error::{Error, Result};
use std::alloc::Layout;
use std::cell::RefCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Alignment of direct writes: file offsets, lengths and buffer addresses.
pub const DIRECT_ALIGN: usize = 4096;
/// A direct write goes in chunks of up to this size, each copied into its own aligned buffer.
/// This virtio disk writes 1 MiB requests 10-25% faster than 256-320 KiB ones (fio, and the
/// recorder's 5 MB slices: 0.74-0.78 of the device's limit with 320 KiB chunks, 0.85-0.91
/// with 1 MiB; docs/benchmarks.md); 2 MiB gained nothing more.
pub const DIRECT_CHUNK: usize = 1 << 20;
/// A write of up to `DIRECT_SPLIT` chunks is cut into that many (nearly) equal aligned ones:
/// as few requests as the device likes, but two, so that the copy of the second half overlaps
/// the device writing the first, and a 1 MiB value with its header and pad (1 MiB + 4 KiB) is
/// 516 + 512 KiB, not a full chunk and a 4 KiB straggler. (Four quarters measured 1.39-1.53 GB/s of
/// Persisted 1 MiB puts against 1.50-1.72 for halves and 1.68-1.72 for one request.)
const DIRECT_SPLIT: usize = 2;
/// Chunks in flight at once per writing thread (io_uring): the copy of the next chunk overlaps
/// the device writing the previous ones, and the device sees a queue, not one request at a
/// time. The thread's buffers: DIRECT_DEPTH x DIRECT_CHUNK = 4 MiB, allocated on the thread's
/// first direct write.
pub const DIRECT_DEPTH: usize = 4;

/// An aligned heap buffer (the bounce buffer of one thread).
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Option<Self> {
        let layout = Layout::from_size_align(len, DIRECT_ALIGN).ok()?;
        // Safety: the layout has a non-zero size (DIRECT_CHUNK).
        let raw = unsafe { std::alloc::alloc(layout) };
        std::ptr::NonNull::new(raw).map(|ptr| AlignedBuf { ptr, layout })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // Safety: the allocation is `layout.size()` bytes, owned by `self`; the bytes are
        // uninitialised only until the first copy, and are only read after being written.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // Safety: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// One thread's direct-write state: its chunk buffers and, where the kernel allows, its ring.
struct Pipeline {
    bufs: Vec<AlignedBuf>,
    ring: Option<io_uring::IoUring>,
}

impl Pipeline {
    fn new() -> Option<Self> {
        let bufs = (0..DIRECT_DEPTH)
            .map(|_| AlignedBuf::new(DIRECT_CHUNK))
            .collect::<Option<Vec<_>>>()?;
        // Refused under some sandboxes and old kernels: the pwrite loop is the fallback.
        let ring = io_uring::IoUring::new(DIRECT_DEPTH as u32).ok();
        Some(Pipeline { bufs, ring })
    }
}

thread_local! {
    static PIPELINE: RefCell<Option<Pipeline>> = const { RefCell::new(None) };
}

/// Opens `path` for direct writes, or `None` if the file system refuses `O_DIRECT` (tmpfs
/// answers EINVAL).
pub fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

/// True if a directory's file system takes an aligned direct write (probed with a scratch file).
pub fn probe(dir: &Path) -> bool {
    let path = dir.join(".direct_probe");
    let ok = (|| {
        std::fs::write(&path, vec![0u8; DIRECT_ALIGN]).ok()?;
        let f = open_direct(&path)?;
        let mut buf = AlignedBuf::new(DIRECT_ALIGN)?;
        buf.as_mut_slice().fill(0);
        // Safety: an aligned buffer of DIRECT_ALIGN bytes, alive for the call.
        let n = unsafe {
            libc::pwrite(
                f.as_raw_fd(),
                buf.ptr.as_ptr() as *const libc::c_void,
                DIRECT_ALIGN,
                0,
            )
        };
        (n == DIRECT_ALIGN as isize).then_some(())
    })()
    .is_some();
    let _ = std::fs::remove_file(&path);
    ok
}

/// The aligned interior `[a, b)` of the file range `[offset, offset + len)`, if it is not empty.
pub fn interior(offset: usize, len: usize) -> Option<(usize, usize)> {
    let a = offset.next_multiple_of(DIRECT_ALIGN);
    let b = (offset + len) / DIRECT_ALIGN * DIRECT_ALIGN;
    (b > a).then_some((a, b))
}

/// Writes the concatenation of `parts` at file offset `at` (aligned, and the total length a
/// multiple of [`DIRECT_ALIGN`]) with direct I/O: chunk by chunk through this thread's aligned
/// buffers, up to [`DIRECT_DEPTH`] chunks in flight through io_uring (or one `pwrite` at a
/// time where io_uring is refused). Returns once every chunk is written (or failed).
pub fn write(file: &File, path: &Path, at: usize, parts: &[&[u8]]) -> Result<()> {
    debug_assert!(at.is_multiple_of(DIRECT_ALIGN));
    debug_assert!(parts
        .iter()
        .map(|p| p.len())
        .sum::<usize>()
        .is_multiple_of(DIRECT_ALIGN));
    PIPELINE.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Pipeline::new();
        }
        let Some(p) = cell.as_mut() else {
            return Err(Error::io(
                "allocate direct-I/O buffers",
                path,
                std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            ));
        };
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut chunks = Chunks::new(parts, chunk_len(total));
        match p.ring.as_mut() {
            Some(ring) => {
                let r = write_uring(ring, &mut p.bufs, file, path, at, &mut chunks);
                if let Err(Stuck(e)) = r {
                    // Requests may still be in the kernel: their buffers must never be freed
                    // or reused, so this thread's pipeline is leaked and a new one made.
                    if let Some(p) = cell.take() {
                        std::mem::forget(p);
                    }
                    return Err(e);
                }
                r.map_err(|Stuck(e)| e)?
            }
            None => {
                let buf = p.bufs[0].as_mut_slice();
                let mut file_at = at;
                loop {
                    let n = chunks.fill(buf);
                    if n == 0 {
                        return Ok(());
                    }
                    pwrite_all(file, path, &buf[..n], file_at)?;
                    file_at += n;
                }
            }
        }
    })
}

/// Bytes per request for a direct write of `total` bytes: DIRECT_SPLIT aligned chunks (the last
/// may be shorter), at most DIRECT_CHUNK each.
fn chunk_len(total: usize) -> usize {
    total
        .div_ceil(DIRECT_SPLIT)
        .next_multiple_of(DIRECT_ALIGN)
        .clamp(DIRECT_ALIGN, DIRECT_CHUNK)
}

/// The bytes of several parts, handed out a chunk at a time.
struct Chunks<'a> {
    parts: &'a [&'a [u8]],
    part: usize,
    at: usize,
    chunk: usize,
}

impl<'a> Chunks<'a> {
    fn new(parts: &'a [&'a [u8]], chunk: usize) -> Self {
        Chunks {
            parts,
            part: 0,
            at: 0,
            chunk,
        }
    }

    /// Copies the next chunk into `buf` (at most `chunk` bytes); returns how many (0: done).
    fn fill(&mut self, buf: &mut [u8]) -> usize {
        let n = self.chunk.min(buf.len());
        let buf = &mut buf[..n];
        let mut filled = 0;
        while filled < buf.len() && self.part < self.parts.len() {
            let rest = &self.parts[self.part][self.at..];
            let n = rest.len().min(buf.len() - filled);
            buf[filled..filled + n].copy_from_slice(&rest[..n]);
            filled += n;
            self.at += n;
            if self.at == self.parts[self.part].len() {
                self.part += 1;
                self.at = 0;
            }
        }
        filled
    }
}

/// What `write_uring` returns: `Ok(Err(e))` is a failed write whose requests are all
/// finished; `Err(Stuck(e))` means waiting for them failed and some may still be in flight.
struct Stuck(Error);

/// Waits this many failed `submit_and_wait` calls (other than interruptions) before giving up.
const MAX_WAIT_FAILURES: usize = 100;
/// ... or this many transient ones (EAGAIN, EBUSY), each after [`TRANSIENT_PAUSE`]: about 10 s.
const MAX_TRANSIENT_FAILURES: usize = 10_000;
const TRANSIENT_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

fn write_uring(
    ring: &mut io_uring::IoUring,
    bufs: &mut [AlignedBuf],
    file: &File,
    path: &Path,
    at: usize,
    chunks: &mut Chunks<'_>,
) -> std::result::Result<Result<()>, Stuck> {
    use io_uring::{opcode, types};
    let fd = types::Fd(file.as_raw_fd());
    // Per slot: (file offset, length) of the chunk in flight from that buffer.
    let mut flight: [Option<(usize, usize)>; DIRECT_DEPTH] = [None; DIRECT_DEPTH];
    let mut first_error: Option<Error> = None;
    let mut file_at = at;
    let mut done = false;
    let mut wait_failures = 0;
    loop {
        // Fill every free buffer and queue its write (none after an error).
        while !done && first_error.is_none() {
            let Some(slot) = flight.iter().position(Option::is_none) else {
                break;
            };
            let buf = bufs[slot].as_mut_slice();
            let n = chunks.fill(buf);
            if n == 0 {
                done = true;
                break;
            }
            let entry = opcode::Write::new(fd, buf.as_ptr(), n as u32)
                .offset(file_at as u64)
                .build()
                .user_data(slot as u64);
            // Safety: the buffer stays alive and untouched until this request completes: its
            // slot is marked in flight and only reused after the completion is reaped below,
            // and this function never returns while a request is in flight.
            if unsafe { ring.submission().push(&entry) }.is_err() {
                first_error = Some(Error::io(
                    "io_uring submit",
                    path,
                    std::io::Error::other("submission queue full"),
                ));
                break;
            }
            flight[slot] = Some((file_at, n));
            file_at += n;
            // Hand the chunk to the device now, so it writes while the next one is copied
            // (submitting only after filling every buffer serialised copy and write).
            // A transient refusal leaves the request queued: `submit_and_wait` below hands it
            // over again (found in review: EAGAIN or EBUSY failed the write and poisoned the
            // store).
            if let Err(e) = ring.submit() {
                if !transient(&e) {
                    first_error = Some(Error::io("io_uring submit", path, e));
                }
            }
        }
        if flight.iter().all(Option::is_none) {
            return Ok(first_error.map_or(Ok(()), Err));
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                // A transient refusal is given time (it is not a failed write), but not for
                // ever: a kernel that keeps refusing ends in `Stuck`, not a spinning writer.
                let limit = if transient(&e) {
                    std::thread::sleep(TRANSIENT_PAUSE);
                    MAX_TRANSIENT_FAILURES
                } else {
                    MAX_WAIT_FAILURES
                };
                wait_failures += 1;
                if wait_failures >= limit {
                    return Err(Stuck(Error::io("io_uring wait", path, e)));
                }
            }
            // Reap whatever completed anyway: EBUSY means the completion queue must be
            // drained before more is submitted.
        }
        let completed: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (slot, res) in completed {
            let Some((off, len)) = flight.get_mut(slot as usize).and_then(Option::take) else {
                continue;
            };
            let buf = &bufs[slot as usize].as_mut_slice()[..len];
            if let Err(e) = finish(res, file, path, buf, off) {
                first_error.get_or_insert(e);
            }
        }
    }
}

/// An `io_uring_enter` refusal that leaves the queued requests to submit again: interrupted,
/// no memory for a request now (EAGAIN), or the completion queue to drain first (EBUSY).
fn transient(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Interrupted
        || matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY))
}

/// Finishes a completed request that wrote chunk `buf` at file offset `off` (`res`: its
/// result). A short write (rare), or one answered `EAGAIN` or `EINTR` (io_uring may answer
/// so when it could not issue the request without blocking), is finished synchronously from
/// the same buffer; other errors are returned.
fn finish(res: i32, file: &File, path: &Path, buf: &[u8], off: usize) -> Result<()> {
    // Fix (found in review): an EAGAIN completion failed the write, poisoning the store.
    if res == -libc::EAGAIN || res == -libc::EINTR {
        return pwrite_all(file, path, buf, off);
    }
    if res < 0 {
        return Err(Error::io(
            "write (O_DIRECT, io_uring)",
            path,
            std::io::Error::from_raw_os_error(-res),
        ));
    }
    // From the last aligned boundary written (O_DIRECT refuses an unaligned offset): the
    // bytes between are written again, with the same data.
    let written = (res as usize).min(buf.len()) / DIRECT_ALIGN * DIRECT_ALIGN;
    pwrite_all(file, path, &buf[written..], off + written)
}

fn pwrite_all(file: &File, path: &Path, mut buf: &[u8], mut at: usize) -> Result<()> {
    while !buf.is_empty() {
        // Safety: `buf` is live for the call; alignment is the caller's (chunks of an aligned
        // buffer, lengths multiples of DIRECT_ALIGN; a short write stays aligned in practice,
        // and if not the kernel answers EINVAL, which is returned).
        let n = unsafe {
            libc::pwrite(
                file.as_raw_fd(),
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                at as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("pwrite (O_DIRECT)", path, e));
        }
        if n == 0 {
            return Err(Error::io(
                "pwrite (O_DIRECT)",
                path,
                std::io::Error::from(std::io::ErrorKind::WriteZero),
            ));
        }
        buf = &buf[n as usize..];
        at += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_answered_eagain_or_short_is_finished_not_failed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let chunk = vec![7u8; DIRECT_ALIGN];
        finish(-libc::EAGAIN, &file, &path, &chunk, 0).unwrap();
        finish(-libc::EINTR, &file, &path, &chunk, DIRECT_ALIGN).unwrap();
        let half = vec![9u8; DIRECT_ALIGN];
        // 100 bytes done: the rest is written from the block's start (aligned), all of it.
        finish(100, &file, &path, &half, 2 * DIRECT_ALIGN).unwrap();
        // A whole write needs nothing more.
        finish(DIRECT_ALIGN as i32, &file, &path, &chunk, 3 * DIRECT_ALIGN).unwrap();
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), 3 * DIRECT_ALIGN);
        assert!(got[..2 * DIRECT_ALIGN].iter().all(|&b| b == 7));
        assert!(got[2 * DIRECT_ALIGN..].iter().all(|&b| b == 9));
        let e = finish(-libc::ENOSPC, &file, &path, &chunk, 0).unwrap_err();
        assert!(e.to_string().contains("No space left"), "{e}");
    }

    #[test]
    fn interior_is_the_aligned_middle() {
        assert_eq!(interior(0, 4096), Some((0, 4096)));
        assert_eq!(interior(40, 4096), None);
        assert_eq!(interior(40, 8192 + 100), Some((4096, 8192)));
        assert_eq!(interior(4096, 3 * 4096 - 1), Some((4096, 3 * 4096)));
    }

    #[test]
    fn a_write_is_cut_into_equal_aligned_chunks() {
        assert_eq!(chunk_len((1 << 20) + 4096), 516 << 10);
        assert_eq!(chunk_len(4096), 4096);
        assert_eq!(chunk_len(64 << 20), DIRECT_CHUNK);
        let data = vec![7u8; (1 << 20) + 4096];
        let parts = [&data[..]];
        let mut chunks = Chunks::new(&parts, chunk_len(data.len()));
        let mut buf = vec![0u8; DIRECT_CHUNK];
        let sizes: Vec<usize> =
            std::iter::from_fn(|| Some(chunks.fill(&mut buf)).filter(|&n| n > 0)).collect();
        assert_eq!(sizes, [516 << 10, 512 << 10]);
        assert!(sizes.iter().all(|n| n % DIRECT_ALIGN == 0));
        assert_eq!(sizes.iter().sum::<usize>(), data.len());
    }
}
