//! [`FileMedium`]: a directory on a real file system, segments mapped with `mmap`.
//!
//! Creation preallocates with `posix_fallocate` (a full device fails here with ENOSPC rather
//! than with SIGBUS on a later store), maps the file shared (with MAP_SYNC on `pmem`) and
//! pre-faults it so page faults are not paid by writers: by touching every page on memory-backed
//! tiers, with MADV_POPULATE_READ on `block` tiers (touching would write the whole file twice).
//! New `block` files are zero-filled once so their extents are real (see `create_region`) and
//! held in the page cache in single pages by default (see [`FileMedium::map`]), large writes
//! on `block` go through `pwrite`, and persistence there is `fdatasync`.

use super::{flush, Domain, Medium, Region};
use crate::error::{Error, Result};
use crate::options::PageCache;
use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const PAGE: usize = 4096;
/// Chunk used to zero-fill new block-tier files held in large folios. Single-page files are
/// filled one page per write: a buffered write caches its range in folios as large as it is.
const ZERO_CHUNK: usize = 1 << 20;

/// A tier directory on a real file system.
#[derive(Debug)]
pub struct FileMedium {
    dir: PathBuf,
    domain: Domain,
    /// MAP_SYNC was accepted on this directory (real persistent memory with DAX).
    map_sync: bool,
    /// Bulk records are written with O_DIRECT (a `block` tier whose file system takes it).
    direct: bool,
    /// How new files are held in the page cache (see [`FileMedium::map`]).
    page_cache: PageCache,
}

impl FileMedium {
    /// Uses `dir` (created if missing) as a tier in `domain`. For `pmem`, MAP_SYNC is probed:
    /// if the file system refuses it the tier still uses the pmem code path (cache-line
    /// write-back) but reports that it does not survive a power cut.
    pub fn new(dir: impl Into<PathBuf>, domain: Domain) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
        let map_sync = domain == Domain::Pmem && probe_map_sync(&dir);
        let direct = domain == Domain::Block && super::direct::probe(&dir);
        Ok(FileMedium {
            dir,
            domain,
            map_sync,
            direct,
            page_cache: PageCache::default(),
        })
    }

    /// Turns direct I/O for bulk records off (it is on wherever the file system takes it): the
    /// store does so when no value would use it, so new files keep their zero-fill and
    /// pre-faulting, which small records want.
    pub fn without_direct_io(mut self) -> Self {
        self.direct = false;
        self
    }

    /// Holds new files in the page cache as `page_cache` says.
    pub fn with_page_cache(mut self, page_cache: PageCache) -> Self {
        self.page_cache = page_cache;
        self
    }

    /// Creates, allocates, maps and pre-faults a segment file. `filled`: written with zeros
    /// even where bulk records go by direct I/O (preallocation at open, paid before use).
    fn create(&self, name: &str, len: usize, filled: bool) -> Result<Arc<dyn Region>> {
        let path = self.file_path(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(|e| Error::io("create segment", &path, e))?;
        // Safety: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(Error::io(
                "fallocate",
                &path,
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        let zero_filled = self.domain == Domain::Block && (filled || !self.direct);
        if zero_filled {
            // Files prepared while writers run on a direct-I/O tier skip the zero-fill: it
            // writes every byte of a new file twice, and fresh 1 MiB Persisted puts ran at
            // 1.2 GB/s with it against 1.7 without (a direct write converts its extents once
            // per write). Preallocated files and buffered tiers are filled because
            // fallocate leaves *unwritten* extents on ext4/xfs: the first write to each one
            // converts it in the journal, and every sync then commits the journal (5x slower
            // Persisted writes, measured). Writing zeros once makes the extents real; recycled
            // files keep them, so this is paid once per file.
            let chunk = match self.page_cache {
                PageCache::SinglePages => PAGE,
                PageCache::LargeFolios => ZERO_CHUNK,
            };
            let zeros = vec![0u8; chunk.min(len)];
            let mut at = 0;
            while at < len {
                let n = zeros.len().min(len - at);
                if let Err(e) =
                    std::os::unix::fs::FileExt::write_all_at(&file, &zeros[..n], at as u64)
                {
                    drop(file);
                    let _ = std::fs::remove_file(&path);
                    return Err(Error::io("zero-fill", &path, e));
                }
                at += n;
            }
        }
        if self.domain != Domain::Volatile {
            // The size and allocation must be durable before records in the file are acknowledged.
            file.sync_all().map_err(|e| Error::io("fsync", &path, e))?;
            self.sync_dir()?;
        }
        // Pre-faulted on block tiers (small records are copied through the mapping), except
        // where bulk records go by direct I/O: populating there reads the whole new file into
        // the page cache (64 MiB of zeroing per file, a quarter of the maintenance thread in
        // a profile) only for the direct writes to throw those pages away again.
        let populate = self.domain == Domain::Block && !self.direct;
        let region = self.map(&path, file, len, Fill::Writable { populate })?;
        if self.domain != Domain::Block {
            // Pre-fault: install writable page-table entries now, off the hot path. One
            // MADV_POPULATE_WRITE call (Linux 5.14) does it in the kernel; touching each page
            // instead took one fault per page, 200-270 ms per 64 MiB file on this VM (a
            // maintenance thread that slow fell behind a 100 B writer). Older kernels answer
            // EINVAL: then write one zero per page (the file is fresh and all zero, so this
            // changes nothing).
            let base = region.as_ptr();
            // Safety: the range is exactly the mapping, which no one else has yet.
            let rc = unsafe { libc::madvise(base.cast(), len, libc::MADV_POPULATE_WRITE) };
            if rc != 0 {
                for off in (0..len).step_by(PAGE) {
                    // Safety: `off < len`, inside the mapping; no one else has this region yet.
                    unsafe { std::ptr::write_volatile(base.add(off), 0) };
                }
            }
        }
        Ok(region)
    }

    fn file_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn sync_dir(&self) -> Result<()> {
        if self.domain == Domain::Volatile {
            return Ok(());
        }
        let d = File::open(&self.dir).map_err(|e| Error::io("open directory", &self.dir, e))?;
        d.sync_all()
            .map_err(|e| Error::io("fsync directory", &self.dir, e))
    }

    /// Maps a segment file shared, read-write.
    ///
    /// A file created to be written (`Fill::Writable`) on a `block` tier is pre-faulted by
    /// MADV_POPULATE_READ if asked; with [`PageCache::SinglePages`] it is first advised
    /// MADV_RANDOM (and was zero-filled a page per write), so the page cache holds it in
    /// single pages.
    ///
    /// Why: a store through a shared mapping marks its whole *folio* dirty, and on file systems with large folios (ext4 on Linux 6.x) the
    /// fault-path readahead ramps up to 2 MiB folios along a file written in order, as 1 MiB
    /// buffered writes (the zero-fill's, formerly) make 1 MiB ones. Every `fdatasync` of a few
    /// small Persisted records then wrote 1-2 MiB: measured on this machine (kernel 6.18),
    /// a server doing Persisted 100 B SETs wrote 950 KiB per group commit, and a Python loop
    /// of 51 KiB through the mapping plus `fdatasync` wrote 62 KiB per sync at the file's
    /// start and 2100 KiB near its end (250 us per sync against 120 us with the advice, which
    /// stays at 57 KiB). Reads of cold pages of such a file come one page per fault, which
    /// random gets want anyway; files opened at restart keep the default readahead for
    /// recovery's scans.
    fn map(&self, path: &Path, file: File, len: usize, fill: Fill) -> Result<Arc<dyn Region>> {
        let mut flags = libc::MAP_SHARED;
        if self.map_sync {
            flags = libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC;
        }
        // Safety: mapping a file we own with a length equal to its size; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io("mmap", path, std::io::Error::last_os_error()));
        }
        if let (Fill::Writable { populate }, Domain::Block) = (fill, self.domain) {
            if self.page_cache == PageCache::SinglePages {
                // Advice only: where refused, only the write-back volume changes.
                // Safety: the range is exactly the mapping just made.
                unsafe { libc::madvise(ptr, len, libc::MADV_RANDOM) };
            }
            if populate {
                pre_fault_for_reading(ptr as *const u8, len);
            }
        }
        // A second descriptor for direct writes (absent where the file system refuses them).
        let direct = self
            .direct
            .then(|| super::direct::open_direct(path))
            .flatten();
        Ok(Arc::new(MappedFile {
            path: path.to_path_buf(),
            _file: file,
            direct,
            ptr: ptr as *mut u8,
            len,
            domain: self.domain,
        }))
    }
}

/// Most parts one `pwritev` of `write_parts` takes: a put's key, its value parts
/// (`MAX_VALUE_PARTS`) and the zeros through the next record's header slot.
const PWRITEV_PARTS: usize = 9;
const _: () = assert!(PWRITEV_PARTS >= crate::store::MAX_VALUE_PARTS + 2);

/// How a mapping is prepared (see [`FileMedium::map`]).
#[derive(Clone, Copy)]
enum Fill {
    /// A new file to be written: advised as the medium's `PageCache` says, pre-faulted if
    /// `populate`.
    Writable { populate: bool },
    /// An existing file opened at restart: default advice, faulted on use.
    Opened,
}

/// Installs read-only page-table entries for `[ptr, ptr + len)` (the pages are already
/// cached: the zero-fill just wrote them), so writers take a cheap write-protect fault rather
/// than a full one. MADV_POPULATE_READ (Linux 5.14); older kernels: one read per page.
fn pre_fault_for_reading(ptr: *const u8, len: usize) {
    // Safety: the caller's range is a live mapping.
    let rc = unsafe { libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_POPULATE_READ) };
    if rc != 0 {
        for off in (0..len).step_by(PAGE) {
            // Safety: `off < len`, inside the mapping.
            unsafe { std::ptr::read_volatile(ptr.add(off)) };
        }
    }
}

/// True if `dir` accepts MAP_SYNC mappings (a DAX mount on persistent memory).
pub fn probe_map_sync(dir: &Path) -> bool {
    let probe = dir.join(".map_sync_probe");
    let Ok(file) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
    else {
        return false;
    };
    let ok = file.set_len(PAGE as u64).is_ok() && {
        // Safety: a one-page shared mapping of our own file, unmapped right away.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            false
        } else {
            // Safety: `p` is the mapping made just above.
            unsafe { libc::munmap(p, PAGE) };
            true
        }
    };
    let _ = std::fs::remove_file(&probe);
    ok
}

impl Medium for FileMedium {
    fn path(&self) -> &Path {
        &self.dir
    }

    fn domain(&self) -> Domain {
        self.domain
    }

    fn bulk_write_path(&self) -> &'static str {
        match self.domain {
            Domain::Block if self.direct => "direct",
            Domain::Block => "buffered",
            Domain::Volatile | Domain::Pmem => "mapped",
        }
    }

    fn survives_power_cut(&self) -> bool {
        match self.domain {
            Domain::Volatile => false,
            Domain::Pmem => self.map_sync,
            Domain::Block => true,
        }
    }

    fn create_region(&self, name: &str, len: usize) -> Result<Arc<dyn Region>> {
        self.create(name, len, false)
    }

    fn create_region_filled(&self, name: &str, len: usize) -> Result<Arc<dyn Region>> {
        self.create(name, len, true)
    }

    fn open_region(&self, name: &str) -> Result<Arc<dyn Region>> {
        let path = self.file_path(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open segment", &path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", &path, e))?
            .len() as usize;
        self.map(&path, file, len, Fill::Opened)
    }

    fn list(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in
            std::fs::read_dir(&self.dir).map_err(|e| Error::io("list directory", &self.dir, e))?
        {
            let entry = entry.map_err(|e| Error::io("list directory", &self.dir, e))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn remove(&self, name: &str) -> Result<()> {
        let path = self.file_path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", &path, e)),
        }
    }

    fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let path = self.file_path(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", &path, e)),
        }
    }

    fn write_file(&self, name: &str, data: &[u8]) -> Result<()> {
        let path = self.file_path(name);
        let tmp = self.file_path(&format!("{name}.tmp"));
        let written = (|| {
            let mut f = File::create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
            f.write_all(data).map_err(|e| Error::io("write", &tmp, e))?;
            if self.domain != Domain::Volatile {
                f.sync_all().map_err(|e| Error::io("fsync", &tmp, e))?;
            }
            Ok(())
        })();
        if written.is_err() {
            // A part-written temp file holds space a full device needs back.
            let _ = std::fs::remove_file(&tmp);
            return written;
        }
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
        self.sync_dir()
    }

    fn write_file_unsynced(&self, name: &str, data: &[u8]) -> Result<()> {
        let path = self.file_path(name);
        let tmp = self.file_path(&format!("{name}.tmp"));
        std::fs::write(&tmp, data).map_err(|e| Error::io("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))
    }

    fn lock(&self) -> Result<Box<dyn Any + Send + Sync>> {
        let path = self.file_path("LOCK");
        // The lock dies with the process, and is not kept by its forked children.
        let mut lock = match super::dir_lock::lock(&path) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Err(Error::Locked(self.dir.clone(), lock_holder(&path))),
            Err(("open", e)) => return Err(Error::io("open lock file", &path, e)),
            Err((_, e)) => return Err(Error::io("lock (flock)", &path, e)),
        };
        // Who holds it, for the error another process gets (best effort: the lock is the
        // flock, not this text). Found by a new-user review: the error named no process.
        if let Some(f) = lock.file() {
            let _ = f.set_len(0).and_then(|()| {
                std::io::Write::write_all(f, format!("{}\n", std::process::id()).as_bytes())
            });
        }
        Ok(Box::new(lock))
    }
}

/// `" (pid N: command)"` for the process whose id the lock file `path` holds, if it runs.
fn lock_holder(path: &Path) -> String {
    let Some(pid) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
    else {
        return String::new();
    };
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmd) if !cmd.is_empty() => {
            let cmd: Vec<String> = cmd
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            format!(" (pid {pid}: {})", cmd.join(" "))
        }
        _ => format!(" (pid {pid})"),
    }
}

/// A mapped file.
struct MappedFile {
    path: PathBuf,
    _file: File,
    /// The same file opened with O_DIRECT, for the interiors of bulk records.
    direct: Option<File>,
    ptr: *mut u8,
    len: usize,
    domain: Domain,
}

// Safety: the mapping is plain shared memory; the engine coordinates who writes which bytes
// (one writer per unpublished range, readers only of published ranges).
unsafe impl Send for MappedFile {}
// Safety: as above.
unsafe impl Sync for MappedFile {}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // Safety: `ptr`/`len` are the mapping made in `map`, unmapped exactly once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len.max(1)) };
    }
}

impl Region for MappedFile {
    fn path(&self) -> &PathBuf {
        &self.path
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    unsafe fn write(&self, offset: usize, bytes: &[u8], bulk: bool) -> Result<()> {
        assert!(
            offset + bytes.len() <= self.len,
            "write past the end of {}",
            self.path.display()
        );
        if self.domain == Domain::Block && bulk {
            use std::os::unix::fs::FileExt;
            return self
                ._file
                .write_all_at(bytes, offset as u64)
                .map_err(|e| Error::io("pwrite", &self.path, e));
        }
        // Safety: in bounds (asserted); the caller owns the range.
        unsafe { crate::copy::copy_to(self.ptr.add(offset), bytes) };
        Ok(())
    }

    unsafe fn write_parts(&self, offset: usize, parts: &[&[u8]], bulk: bool) -> Result<()> {
        if !(self.domain == Domain::Block && bulk) || parts.len() > PWRITEV_PARTS {
            let mut at = offset;
            for p in parts {
                // Safety: the caller's contract covers every part's sub-range.
                unsafe { self.write(at, p, bulk)? };
                at += p.len();
            }
            return Ok(());
        }
        use std::os::unix::fs::FileExt;
        use std::os::unix::io::AsRawFd;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            offset + total <= self.len,
            "write past the end of {}",
            self.path.display()
        );
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; PWRITEV_PARTS];
        for (v, p) in iov.iter_mut().zip(parts) {
            v.iov_base = p.as_ptr() as *mut libc::c_void;
            v.iov_len = p.len();
        }
        let written = loop {
            // Safety: the iovecs point into `parts`, alive for the call.
            let r = unsafe {
                libc::pwritev(
                    self._file.as_raw_fd(),
                    iov.as_ptr(),
                    parts.len() as libc::c_int,
                    offset as libc::off_t,
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("pwritev", &self.path, e));
            }
        };
        // A short write (rare: a signal, a full device) is finished part by part.
        let (mut skip, mut at) = (written, offset + written);
        for p in parts {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            let rest = &p[skip..];
            skip = 0;
            self._file
                .write_all_at(rest, at as u64)
                .map_err(|e| Error::io("pwrite", &self.path, e))?;
            at += rest.len();
        }
        Ok(())
    }

    unsafe fn write_parts_direct(&self, offset: usize, parts: &[&[u8]]) -> Result<bool> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (Some(file), Some((a, b))) = (&self.direct, super::direct::interior(offset, total))
        else {
            // Safety: the caller's contract.
            unsafe { self.write_parts(offset, parts, true)? };
            return Ok(false);
        };
        assert!(
            offset + total <= self.len,
            "write past the end of {}",
            self.path.display()
        );
        let mut buf = [&[][..]; PWRITEV_PARTS];
        for (from, to, direct) in [(offset, a, false), (a, b, true), (b, offset + total, false)] {
            let n = super::sub_parts(parts, from - offset, to - offset, &mut buf);
            if n == 0 {
                continue;
            }
            if direct {
                super::direct::write(file, &self.path, from, &buf[..n])?;
            } else {
                // Safety: a sub-range of the caller's range.
                unsafe { self.write_parts(from, &buf[..n], true)? };
            }
        }
        Ok(true)
    }

    fn writes_blocks(&self) -> bool {
        self.direct.is_some()
    }

    unsafe fn write_blocks(&self, offset: usize, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            offset + total <= self.len
                && offset.is_multiple_of(super::direct::DIRECT_ALIGN)
                && total.is_multiple_of(super::direct::DIRECT_ALIGN),
            "unaligned or out-of-bounds block write to {}",
            self.path.display()
        );
        let Some(file) = &self.direct else {
            return Err(Error::io(
                "direct write",
                &self.path,
                std::io::Error::from(std::io::ErrorKind::Unsupported),
            ));
        };
        super::direct::write(file, &self.path, offset, parts)
    }

    fn unmap_pages(&self, offset: usize, len: usize) {
        if self.domain != Domain::Block {
            return;
        }
        let from = offset.next_multiple_of(PAGE);
        let to = (offset + len).min(self.len) / PAGE * PAGE;
        if to <= from {
            return;
        }
        // MADV_DONTNEED on a shared file mapping only zaps page-table entries: the dirty bits
        // go to the pages (nothing is lost) with one TLB flush for the whole range, and
        // readers fault the pages back in. Without it, the `fdatasync` of a sealed 64 MiB
        // segment of small records write-protected its 16 k mapped pages one at a time, each
        // with an inter-processor interrupt to the writer threads (a tenth of the server's
        // CPU in a SET profile: `page_mkclean_one` -> `flush_tlb_mm_range`). Advice only: an
        // error changes nothing but speed.
        // Safety: the range is inside the mapping (clamped above); the bytes stay valid.
        unsafe { libc::madvise(self.ptr.add(from).cast(), to - from, libc::MADV_DONTNEED) };
    }

    fn warm(&self) {
        if self.domain != Domain::Block {
            return;
        }
        // Measured (server, SET 10 KiB -P 16, page cache dropped between runs): 28-52 k/s
        // against 180-200 k/s with the pooled files still cached. The partial last page of
        // each 10 KiB record was read back from the device inside the writer's pwrite, and
        // a small record's first store to a page waited for its read.
        // MADV_WILLNEED starts reading the uncached pages in large requests (single-page
        // folios, whatever the mapping's advice) and returns; the kernel reads at most the
        // device's readahead window per call (128 KiB by default), hence the chunks. Where no
        // bulk record goes by direct I/O, MADV_POPULATE_READ then waits for them and maps
        // them, as for a new file (see `create`). Advice only: an error changes nothing but
        // speed.
        const CHUNK: usize = 128 << 10;
        for at in (0..self.len).step_by(CHUNK) {
            // Safety: the range lies inside the mapping; madvise does not change its bytes.
            unsafe {
                libc::madvise(
                    self.ptr.add(at).cast(),
                    CHUNK.min(self.len - at),
                    libc::MADV_WILLNEED,
                )
            };
        }
        if self.direct.is_none() {
            pre_fault_for_reading(self.ptr, self.len);
        }
    }

    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        assert!(
            offset + len <= self.len,
            "persist past the end of {}",
            self.path.display()
        );
        match self.domain {
            Domain::Volatile => Ok(()),
            Domain::Pmem => {
                // SAFETY: the range is inside the mapping (asserted above).
                unsafe { flush::persist_range(self.ptr.add(offset), len) };
                Ok(())
            }
            Domain::Block => {
                // fdatasync rather than msync: same durability for our file (it only holds this
                // segment), and it does not walk the mapping's page tables.
                let _ = offset;
                self._file
                    .sync_data()
                    .map_err(|e| Error::io("fdatasync", &self.path, e))
            }
        }
    }
}

/// What the file system under `dir` suggests as its persistence domain, and why.
pub fn detect_domain(dir: &Path) -> (Domain, &'static str) {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let Some(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok() else {
        return (
            Domain::Block,
            "path not representable; assuming a block device",
        );
    };
    // Safety: statfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // Safety: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0 {
        #[allow(
            clippy::unnecessary_cast,
            reason = "f_type's integer type differs between libcs"
        )]
        let t = st.f_type as i64;
        if t == TMPFS_MAGIC || t == RAMFS_MAGIC {
            return (
                Domain::Volatile,
                "tmpfs/ramfs: memory only, lost on power cut",
            );
        }
    }
    if probe_map_sync(dir) {
        return (
            Domain::Pmem,
            "MAP_SYNC accepted: DAX mount on persistent memory",
        );
    }
    (
        Domain::Block,
        "regular file system: made durable with fdatasync",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::Medium;

    /// Unmapping written pages keeps their bytes: in the mapping (faulted back in), in the file
    /// after the sync, and for the partial page the range only touches.
    #[test]
    fn unmapped_pages_keep_their_bytes() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        for domain in [Domain::Block, Domain::Volatile] {
            let medium = FileMedium::new(dir.path().join(format!("{domain:?}")), domain).unwrap();
            let len = 16 * PAGE;
            let region = medium.create_region("seg", len).unwrap();
            let written = 5 * PAGE + 123;
            let pattern: Vec<u8> = (0..written).map(|i| (i * 7 + 1) as u8).collect();
            // Safety: the region is ours alone and `written` < len.
            unsafe {
                std::ptr::copy_nonoverlapping(pattern.as_ptr(), region.as_ptr(), written);
            }
            region.unmap_pages(100, written - 100);
            // Safety: inside the mapping, written above.
            let mapped = unsafe { std::slice::from_raw_parts(region.as_ptr(), written) };
            assert_eq!(mapped, &pattern[..], "{domain:?}: mapping after unmap");
            // The tail page is still writable through the mapping.
            // Safety: inside the mapping, owned.
            unsafe { *region.as_ptr().add(written) = 0xAB };
            region.persist(0, written + 1).unwrap();
            let file = std::fs::read(region.path()).unwrap();
            assert_eq!(
                &file[..written],
                &pattern[..],
                "{domain:?}: file after sync"
            );
            assert_eq!(file[written], 0xAB);
        }
    }
}
