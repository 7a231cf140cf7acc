//! The files a device benchmark works on, and the memory it moves data through: aligned
//! buffers, shared file mappings, the per-file content pattern that reads are checked against,
//! and facts about the file system (O_DIRECT alignment, memory or device, DAX).

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// Alignment of every buffer (and the default O_DIRECT offset/length alignment): 4096 suits
/// both 512-byte and 4 KiB logical-block devices.
pub(crate) const ALIGN: usize = 4096;

/// A zeroed heap buffer aligned to [`ALIGN`], as O_DIRECT needs.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like a Vec<u8>); nothing in it is tied
// to the thread that allocated it.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` usable bytes (the allocation is rounded up to a whole number of [`ALIGN`]).
    pub(crate) fn new(len: usize) -> io::Result<Self> {
        let size = len.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            io::Error::new(io::ErrorKind::OutOfMemory, "cannot allocate an I/O buffer")
        })?;
        Ok(AlignedBuf { ptr, len, layout })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to at least len initialised (zeroed) bytes owned by self; the
        // shared borrow of self prevents mutation through as_mut_slice meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; the exclusive borrow makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr came from alloc_zeroed with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A shared mapping of a whole file (`MAP_SHARED`), unmapped on drop.
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value; the kernel mapping is process-wide, so using it
// from another thread is sound. Concurrent access is governed by the &/&mut methods below.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file`, writable if `write`.
    pub(super) fn new(file: &File, len: usize, write: bool) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map an empty file",
            ));
        }
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh mapping chosen by the kernel (addr null) over a file we hold open;
        // the result is checked for MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mapping { ptr, len })
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// `madvise` the access pattern (sequential or random), as fio does; best effort.
    pub(super) fn advise(&self, random: bool) {
        let advice = if random {
            libc::MADV_RANDOM
        } else {
            libc::MADV_SEQUENTIAL
        };
        // SAFETY: ptr/len describe a live mapping owned by self; madvise only sets a hint.
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) };
    }

    /// `msync(MS_SYNC)` of the whole mapping: dirty pages reach the device before it returns.
    pub(super) fn sync(&self) -> io::Result<()> {
        // SAFETY: ptr/len describe a live mapping owned by self.
        let rc = unsafe { libc::msync(self.ptr.as_ptr().cast(), self.len, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// splitmix64: a fast, well-mixed function of a 64-bit counter.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The content a laid-out file holds at byte `offset`: byte `offset % 8` of a 64-bit word that
/// depends on the file's seed and `offset / 8`, so any block of any size can be checked.
fn pattern_word(seed: u64, word_index: u64) -> u64 {
    mix(seed ^ word_index.wrapping_mul(0x2545_f491_4f6c_dd1d))
}

fn pattern_byte(seed: u64, offset: u64) -> u8 {
    pattern_word(seed, offset / 8).to_le_bytes()[(offset % 8) as usize]
}

/// Fills `buf` with the pattern of the file region starting at `offset`.
pub(super) fn fill_pattern(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut i = 0;
    while i < buf.len() {
        let o = offset + i as u64;
        if o.is_multiple_of(8) && i + 8 <= buf.len() {
            buf[i..i + 8].copy_from_slice(&pattern_word(seed, o / 8).to_le_bytes());
            i += 8;
        } else {
            buf[i] = pattern_byte(seed, o);
            i += 1;
        }
    }
}

/// Checks `buf` against the pattern of the region at `offset`: every byte if `full`, else the
/// first and last 8 bytes. Returns the index of the first wrong byte.
pub(super) fn check_pattern(seed: u64, offset: u64, buf: &[u8], full: bool) -> Option<usize> {
    let wrong = |i: usize| buf[i] != pattern_byte(seed, offset + i as u64);
    if full {
        let mut i = 0;
        while i < buf.len() {
            let o = offset + i as u64;
            if o.is_multiple_of(8) && i + 8 <= buf.len() {
                if buf[i..i + 8] != pattern_word(seed, o / 8).to_le_bytes() {
                    return (i..i + 8).find(|&j| wrong(j));
                }
                i += 8;
            } else {
                if wrong(i) {
                    return Some(i);
                }
                i += 1;
            }
        }
        None
    } else {
        let n = buf.len();
        (0..n.min(8))
            .chain(n.saturating_sub(8)..n)
            .find(|&i| wrong(i))
    }
}

/// Describes a read-back mismatch as an error.
pub(super) fn mismatch(path: &Path, offset: u64, got: u8, expected: u8) -> io::Error {
    io::Error::other(format!(
        "read-back mismatch in {} at offset {offset}: read {got:#04x}, written {expected:#04x}",
        path.display()
    ))
}

/// The byte the pattern holds at `offset` (for error messages).
pub(super) fn expected_byte(seed: u64, offset: u64) -> u8 {
    pattern_byte(seed, offset)
}

/// One file per thread, named `t{threads}-{i}` (so fio's `filename_format=t{threads}-$jobnum`
/// names the same files), each `file_bytes` long, preallocated and filled with its pattern.
pub(super) struct FileSet {
    pub paths: Vec<PathBuf>,
    pub seeds: Vec<u64>,
    pub file_bytes: u64,
    pub threads: usize,
}

impl FileSet {
    /// Creates and lays out the files: fallocate, then the pattern written in 1 MiB chunks,
    /// then fdatasync, so reads find written (not sparse or unwritten) blocks and writes
    /// overwrite allocated ones.
    pub(super) fn create(dir: &Path, threads: usize, file_bytes: u64) -> io::Result<FileSet> {
        let mut set = FileSet {
            paths: Vec::with_capacity(threads),
            seeds: Vec::with_capacity(threads),
            file_bytes,
            threads,
        };
        let mut chunk = vec![0u8; 1 << 20];
        for i in 0..threads {
            let path = dir.join(format!("t{threads}-{i}"));
            let seed = mix(((threads as u64) << 32) | i as u64);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            set.paths.push(path.clone());
            set.seeds.push(seed);
            preallocate(&file, file_bytes)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            let mut off = 0u64;
            while off < file_bytes {
                let n = (file_bytes - off).min(chunk.len() as u64) as usize;
                fill_pattern(seed, off, &mut chunk[..n]);
                file.write_all_at(&chunk[..n], off)?;
                off += n as u64;
            }
            file.sync_data()?;
        }
        Ok(set)
    }

    /// Removes the files (best effort; the temporary directory is removed anyway).
    pub(super) fn remove(self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Before a run: flush what earlier runs left dirty (so it is not charged to this one),
    /// then drop the files' pages from the page cache (`POSIX_FADV_DONTNEED`, as fio's default
    /// `invalidate=1`), so every run starts cold. A memory file system keeps its pages.
    pub(super) fn settle(&self) -> io::Result<()> {
        for p in &self.paths {
            let f = File::open(p)?;
            f.sync_data()?;
            drop_cache(&f);
        }
        Ok(())
    }
}

/// Tells the kernel the access pattern (`POSIX_FADV_SEQUENTIAL` / `_RANDOM`: readahead size),
/// as fio does by default (`fadvise_hint=1`). Best effort.
pub(super) fn advise(f: &File, random: bool) {
    let advice = if random {
        libc::POSIX_FADV_RANDOM
    } else {
        libc::POSIX_FADV_SEQUENTIAL
    };
    // SAFETY: plain syscall on an open descriptor; offset 0 / len 0 means the whole file.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice) };
}

/// Drops the file's clean, unmapped pages from the page cache (`POSIX_FADV_DONTNEED`; dirty
/// pages are queued for writeback, pages mapped by a process stay). Best effort.
pub(super) fn drop_cache(f: &File) {
    // SAFETY: plain syscall on an open descriptor; offset 0 / len 0 means the whole file.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// Allocates `len` bytes for `file` (fallocate, as fio's default `fallocate=native`), or just
/// sets the length where the file system cannot preallocate.
fn preallocate(file: &File, len: u64) -> io::Result<()> {
    let off_len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large"))?;
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(len),
        _ => Err(e),
    }
}

/// Opens `path` for reading and writing, with `O_DIRECT` if `direct`.
pub(super) fn open(path: &Path, direct: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))
}

/// What the benchmark found out about the file system under a directory.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct FsInfo {
    /// "tmpfs", "ext4", "xfs", ... or the statfs magic number in hex.
    pub fs_type: String,
    /// tmpfs/ramfs: the "device" is DRAM and fdatasync does nothing.
    pub memory: bool,
    /// Offset and length alignment O_DIRECT needs (statx `STATX_DIOALIGN`, else probed: 512 or
    /// 4096);
    /// `None` if O_DIRECT is refused (the reason is in `direct_error`).
    pub direct_align: Option<u64>,
    pub direct_error: Option<String>,
    /// Whether `mmap(MAP_SYNC)` is accepted (a DAX file system on persistent memory).
    pub map_sync: bool,
}

const MAGICS: &[(u64, &str)] = &[
    (0x0102_1994, "tmpfs"),
    (0x8584_58f6, "ramfs"),
    (0xef53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683e, "btrfs"),
    (0x2fc1_2fc1, "zfs"),
    (0x6969, "nfs"),
    (0x794c_7630, "overlayfs"),
    (0xf2f5_2010, "f2fs"),
];

/// Probes the file system under `dir` (creates and removes a small file there).
pub(super) fn probe(dir: &Path) -> io::Result<FsInfo> {
    let probe_path = dir.join("probe");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe_path)?;
    preallocate(&file, ALIGN as u64)?;
    let fs_type = statfs_type(&file);
    let memory = crate::limits::is_memory_fs(dir);
    let (direct_align, direct_error) = match open(&probe_path, true) {
        Ok(f) => (Some(dio_align(&f).unwrap_or_else(|| probe_align(&f))), None),
        Err(e) => (None, Some(format!("O_DIRECT refused: {e}"))),
    };
    let map_sync = map_sync_accepted(&file);
    drop(file);
    let _ = std::fs::remove_file(&probe_path);
    Ok(FsInfo {
        fs_type,
        memory,
        direct_align,
        direct_error,
        map_sync,
    })
}

fn statfs_type(file: &File) -> String {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: st points to writable memory of the size fstatfs fills in.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return "unknown".into();
    }
    // SAFETY: fstatfs returned 0, so it initialised the struct.
    let magic = unsafe { st.assume_init() }.f_type as u64 & 0xffff_ffff;
    MAGICS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("{magic:#x}"))
}

/// The smallest of 512 and 4096 bytes at which an O_DIRECT write works, for file systems
/// whose statx reports no O_DIRECT alignment (e.g. tmpfs); 4096 if neither does.
fn probe_align(f: &File) -> u64 {
    let Ok(buf) = AlignedBuf::new(512) else {
        return ALIGN as u64;
    };
    if f.write_all_at(buf.as_slice(), 512).is_ok() {
        512
    } else {
        ALIGN as u64
    }
}

/// The O_DIRECT offset alignment statx reports, if it reports one.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn dio_align(file: &File) -> Option<u64> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: an empty path with AT_EMPTY_PATH stats the descriptor itself; stx is writable.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: statx returned 0 and the struct was zero-initialised before.
    let stx = unsafe { stx.assume_init() };
    (stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0)
        .then_some(u64::from(stx.stx_dio_offset_align))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn dio_align(_file: &File) -> Option<u64> {
    None
}

/// Tries `mmap(MAP_SHARED_VALIDATE | MAP_SYNC)`: only DAX file systems accept it.
#[cfg(target_os = "linux")]
fn map_sync_accepted(file: &File) -> bool {
    const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
    const MAP_SYNC: libc::c_int = 0x08_0000;
    // SAFETY: a fresh kernel-chosen mapping of a file we hold open; unmapped at once if made.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            ALIGN,
            libc::PROT_READ | libc::PROT_WRITE,
            MAP_SHARED_VALIDATE | MAP_SYNC,
            file.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            false
        } else {
            libc::munmap(p, ALIGN);
            true
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn map_sync_accepted(_file: &File) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_checks_any_block() {
        let mut whole = vec![0u8; 10_000];
        fill_pattern(7, 0, &mut whole);
        // A block at an odd offset, filled on its own, equals the slice of the whole.
        let mut block = vec![0u8; 5568];
        fill_pattern(7, 1001, &mut block);
        assert_eq!(&block[..], &whole[1001..1001 + 5568]);
        assert_eq!(check_pattern(7, 1001, &block, true), None);
        assert_eq!(check_pattern(7, 1001, &block, false), None);
        // Another seed is another pattern.
        assert!(check_pattern(8, 1001, &block, false).is_some());
        block[100] ^= 1;
        assert_eq!(check_pattern(7, 1001, &block, true), Some(100));
        assert_eq!(check_pattern(7, 1001, &block, false), None);
        block[5560] ^= 1;
        assert_eq!(check_pattern(7, 1001, &block, false), Some(5560));
        assert_eq!(expected_byte(7, 1101), whole[1101]);
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        let mut b = AlignedBuf::new(5568).unwrap();
        assert_eq!(b.as_slice().len(), 5568);
        assert_eq!(b.as_slice().as_ptr() as usize % ALIGN, 0);
        b.as_mut_slice()[5567] = 1;
        assert_eq!(b.as_slice()[5567], 1);
    }

    #[test]
    fn file_set_is_laid_out_and_probed() {
        let dir = tempfile::tempdir().unwrap();
        let set = FileSet::create(dir.path(), 2, 64 << 10).unwrap();
        assert_eq!(set.paths.len(), 2);
        let data = std::fs::read(&set.paths[1]).unwrap();
        assert_eq!(data.len(), 64 << 10);
        assert_eq!(check_pattern(set.seeds[1], 0, &data, true), None);
        set.settle().unwrap();
        let info = probe(dir.path()).unwrap();
        assert!(!info.fs_type.is_empty());
        set.remove();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
