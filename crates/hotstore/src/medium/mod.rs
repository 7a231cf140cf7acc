//! The one narrow I/O interface of the engine. Everything the store reads or writes goes
//! through [`Medium`] (a directory of files) and [`Region`] (one preallocated, mapped file), so
//! tests can plug in [`FaultMedium`], which keeps only what was persisted and fails on demand.

mod dir_lock;
pub mod direct;
mod fault;
mod file;
mod flush;

pub use fault::{FaultConfig, FaultMedium};
pub use file::{detect_domain, FileMedium};

use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a tier's bytes live, and therefore what survives a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// DRAM or tmpfs: survives a crash of the writing process, never a power cut.
    Volatile,
    /// Persistent memory through a DAX mapping (MAP_SYNC): made durable with cache-line
    /// write-back and a fence, no system call.
    Pmem,
    /// A file system on a disk or SSD: made durable with fdatasync.
    Block,
}

impl Domain {
    /// Lower-case name as in the metadata and on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Domain::Volatile => "volatile",
            Domain::Pmem => "pmem",
            Domain::Block => "block",
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Domain {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "volatile" => Ok(Domain::Volatile),
            "pmem" => Ok(Domain::Pmem),
            "block" => Ok(Domain::Block),
            other => Err(format!(
                "unknown persistence domain `{other}` (volatile, pmem or block)"
            )),
        }
    }
}

/// A directory holding a tier's files.
pub trait Medium: Send + Sync + fmt::Debug {
    /// The directory, for messages.
    fn path(&self) -> &Path;
    /// The declared persistence domain.
    fn domain(&self) -> Domain;
    /// True if a persisted write on this medium survives a power cut (a `block` file system, or
    /// `pmem` with MAP_SYNC accepted). False for tmpfs and for pmem emulated without MAP_SYNC.
    fn survives_power_cut(&self) -> bool;
    /// Creates file `name` of exactly `len` bytes, all blocks allocated (a full device fails
    /// here, not later with SIGBUS), mapped and pre-faulted. The file must not exist.
    fn create_region(&self, name: &str, len: usize) -> Result<Arc<dyn Region>>;
    /// [`Medium::create_region`] for a file made before any writer needs it (preallocation
    /// at open): a medium that skips work ahead of use (the zero-fill of a direct-I/O tier)
    /// does it here. Default: the same as `create_region`.
    fn create_region_filled(&self, name: &str, len: usize) -> Result<Arc<dyn Region>> {
        self.create_region(name, len)
    }
    /// Maps an existing file.
    fn open_region(&self, name: &str) -> Result<Arc<dyn Region>>;
    /// Names of the files in the directory.
    fn list(&self) -> Result<Vec<String>>;
    /// Removes a file (missing is not an error).
    fn remove(&self, name: &str) -> Result<()>;
    /// Reads a small whole file; `None` if it does not exist.
    fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>>;
    /// Atomically replaces a small file and makes it durable (temp file, sync, rename, sync dir).
    fn write_file(&self, name: &str, data: &[u8]) -> Result<()>;
    /// Atomically replaces a small file without syncing it (temp file, rename): it survives
    /// a crash of the process, not a power cut. Media that cannot tell the two apart sync.
    fn write_file_unsynced(&self, name: &str, data: &[u8]) -> Result<()> {
        self.write_file(name, data)
    }
    /// Takes an exclusive lock on the directory for this process; released on drop.
    fn lock(&self) -> Result<Box<dyn Any + Send + Sync>>;
    /// How bulk records reach this medium's files: `direct` (their aligned interior by
    /// O_DIRECT), `buffered` (pwrite into the page cache) or `mapped` (a copy through the
    /// mapping: memory tiers).
    fn bulk_write_path(&self) -> &'static str {
        "mapped"
    }
    /// Bytes the device under this medium has free (`None`: unknown).
    fn free_space_bytes(&self) -> Option<u64> {
        free_space_bytes(self.path())
    }
    /// The machine's current boot (`medium::boot_id`); 0 if not known. A test medium gives each
    /// simulated power cut a new one.
    fn boot_id(&self) -> u64 {
        boot_id()
    }
}

/// This boot of the machine, as a non-zero number: the first 8 bytes of Linux's random
/// `boot_id` (a new one at every boot). 0 where it cannot be read, which recovery treats as
/// "same boot" (the stricter reading).
pub fn boot_id() -> u64 {
    static BOOT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .and_then(|s| parse_boot_id(&s))
            .unwrap_or(0)
    })
}

/// The first 16 hex digits of a `boot_id` (`8-4-4-4-12` hex with dashes).
fn parse_boot_id(text: &str) -> Option<u64> {
    let hex: String = text
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(16)
        .collect();
    (hex.len() == 16)
        .then(|| u64::from_str_radix(&hex, 16).ok())
        .flatten()
        .filter(|&b| b != 0)
}

/// One preallocated file, mapped into memory at a stable address for its whole life.
///
/// The engine writes through [`Region::as_ptr`] and reads published bytes back the same way.
/// The region itself never moves or shrinks while a reference to it exists.
pub trait Region: Send + Sync {
    /// Full path, for messages.
    fn path(&self) -> &PathBuf;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True if the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Base address of the mapping; valid for `len()` bytes while `self` lives.
    fn as_ptr(&self) -> *mut u8;
    /// Copies `bytes` to `offset` (default: a memcpy through the mapping). `bulk` marks a part
    /// of a large record: a medium may then use another way that ends in the same page-cache
    /// bytes (`pwrite` on a block tier: no page faults, no per-page dirty tracking, and no
    /// waiting on a page under write-back).
    ///
    /// # Safety
    /// The caller must own `[offset, offset + bytes.len())` (no concurrent reader or writer),
    /// and it must lie inside the region.
    unsafe fn write(&self, offset: usize, bytes: &[u8], bulk: bool) -> Result<()> {
        let _ = bulk;
        assert!(
            offset + bytes.len() <= self.len(),
            "write past the end of {}",
            self.path().display()
        );
        // Safety: in bounds (asserted); the caller owns the range.
        unsafe { crate::copy::copy_to(self.as_ptr().add(offset), bytes) };
        Ok(())
    }
    /// Copies `parts` back to back from `offset`, as [`Region::write`] of their concatenation
    /// (a record's key and value: one system call instead of two where the medium uses them).
    ///
    /// # Safety
    /// As [`Region::write`], for the whole concatenated range.
    unsafe fn write_parts(&self, offset: usize, parts: &[&[u8]], bulk: bool) -> Result<()> {
        let mut at = offset;
        for p in parts {
            // Safety: the caller's contract covers every part's sub-range.
            unsafe { self.write(at, p, bulk)? };
            at += p.len();
        }
        Ok(())
    }
    /// [`Region::write_parts`] of a large record (`bulk`), with the 4 KiB-aligned interior of
    /// the range written by direct I/O where the medium supports it (see `direct`); returns
    /// whether it did. The default, and the fallback, is the bulk write.
    ///
    /// # Safety
    /// As [`Region::write_parts`].
    unsafe fn write_parts_direct(&self, offset: usize, parts: &[&[u8]]) -> Result<bool> {
        // Safety: the caller's contract.
        unsafe { self.write_parts(offset, parts, true)? };
        Ok(false)
    }
    /// True if [`Region::write_blocks`] writes here: whole 4 KiB blocks straight to the
    /// device (O_DIRECT on a block tier that takes it). Default: false.
    fn writes_blocks(&self) -> bool {
        false
    }
    /// Writes the concatenation of `parts` at `offset` as whole blocks, bypassing the page
    /// cache (the pages it covers are dropped, and refilled from the device when next read):
    /// `offset` and the total length are multiples of 4 KiB. Only where
    /// [`Region::writes_blocks`] says so; the default refuses.
    ///
    /// # Safety
    /// As [`Region::write_parts`]; bytes of the first block before the caller's own range
    /// must be passed as they are (a published record's tail is rewritten unchanged).
    unsafe fn write_blocks(&self, offset: usize, parts: &[&[u8]]) -> Result<()> {
        let _ = (offset, parts);
        Err(crate::error::Error::io(
            "direct write",
            self.path(),
            std::io::Error::from(std::io::ErrorKind::Unsupported),
        ))
    }
    /// Drops this process's page-table entries for bytes `[offset, offset + len)` (rounded
    /// in to whole pages), keeping the bytes (dirty ones included) in the file's pages: the
    /// next access faults them back in. The seal of a segment calls it before syncing the
    /// segment, so that write-back finds no mapped dirty pages to write-protect one by one,
    /// each with a TLB shoot-down that interrupts every writer thread (see `MappedFile`).
    /// Default: nothing.
    fn unmap_pages(&self, offset: usize, len: usize) {
        let _ = (offset, len);
    }
    /// Brings a pooled file's pages back into memory before a writer takes it (see
    /// `Tier::warm_next`): a write into a page the page cache has dropped reads that page
    /// from the device first, synchronously and one page at a time, although a pooled
    /// file's old bytes are garbage. Called on the maintenance thread; concurrent writes are
    /// harmless. Default: nothing (memory stays resident).
    fn warm(&self) {}
    /// Makes bytes `[offset, offset + len)` durable in the medium's domain. A no-op on a
    /// volatile medium. After an error the caller must assume nothing past the last success
    /// is durable.
    fn persist(&self, offset: usize, len: usize) -> Result<()>;
}

/// Bytes an unprivileged writer can still use on the file system under `dir` (`statvfs`),
/// `None` where that cannot be asked: what a new store's segments are fitted to, and a guide
/// for a tier's capacity.
pub fn free_space_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // Safety: `c` is NUL-terminated and `st` is writable memory of the size statvfs fills.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // Safety: statvfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    #[allow(
        clippy::unnecessary_cast,
        reason = "fsblkcnt_t and c_ulong are 32 bits on some targets"
    )]
    let free = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
    Some(free)
}

/// The pieces of `parts` (taken as one concatenated range) covering `[from, to)`, into `out`;
/// returns how many. At most `out.len()` pieces (parts beyond are a caller error: asserted).
pub(crate) fn sub_parts<'a>(
    parts: &[&'a [u8]],
    from: usize,
    to: usize,
    out: &mut [&'a [u8]],
) -> usize {
    let (mut n, mut at) = (0, 0);
    for p in parts {
        let (start, end) = (at, at + p.len());
        at = end;
        let (lo, hi) = (from.max(start), to.min(end));
        if lo < hi {
            assert!(n < out.len(), "more than {} parts", out.len());
            out[n] = &p[lo - start..hi - start];
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::parse_boot_id;

    #[test]
    fn a_boot_id_is_its_first_sixteen_hex_digits() {
        assert_eq!(
            parse_boot_id("8d1f3c2a-77b0-4e21-9a55-0c3b6e1d2f40\n"),
            Some(0x8d1f_3c2a_77b0_4e21)
        );
        assert_eq!(parse_boot_id(""), None);
        assert_eq!(parse_boot_id("8d1f3c2a-77b0"), None, "too short");
        assert_eq!(
            parse_boot_id("00000000-0000-0000-0000-000000000000"),
            None,
            "0 = unknown"
        );
    }

    #[test]
    fn this_machine_has_a_boot_id() {
        if cfg!(target_os = "linux") {
            assert_ne!(super::boot_id(), 0);
        }
    }
}
