//! Access methods and workloads, and the synchronous engines: one engine per thread performs
//! one request per `step` (the io_uring engine, which keeps a queue full, is in `uring.rs`).

use super::layout::{self, AlignedBuf, Mapping};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// How a request reaches the file (`bench device --method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// pwrite/pread through the page cache.
    Write,
    /// pwrite/pread with O_DIRECT from aligned buffers.
    Direct,
    /// io_uring reads/writes with O_DIRECT, `iodepth` requests in flight per thread.
    Uring,
    /// memcpy into/out of a shared file mapping; msync at the end.
    Mmap,
    /// Non-temporal stores into a shared file mapping, SFENCE per request; msync at the end.
    MmapNt,
    /// pwrite followed by fdatasync, every request.
    Dsync,
}

impl Method {
    /// Every method, in the order of the default `--method`.
    pub const ALL: [Method; 6] = [
        Method::Write,
        Method::Direct,
        Method::Uring,
        Method::Mmap,
        Method::MmapNt,
        Method::Dsync,
    ];

    /// The name `--method` takes and the report prints.
    pub fn name(self) -> &'static str {
        match self {
            Method::Write => "write",
            Method::Direct => "direct",
            Method::Uring => "uring",
            Method::Mmap => "mmap",
            Method::MmapNt => "mmap-nt",
            Method::Dsync => "dsync",
        }
    }

    /// The method named `s` (surrounding spaces ignored).
    pub fn parse(s: &str) -> Result<Method, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!("unknown method `{s}` (use write, direct, uring, mmap, mmap-nt, dsync)")
            })
    }

    /// Whether the method opens the file with O_DIRECT (and so needs aligned block sizes).
    pub(crate) fn direct(self) -> bool {
        matches!(self, Method::Direct | Method::Uring)
    }

    /// Whether the method has a read path of its own; `None` with the reason if not.
    pub(crate) fn read_path(self) -> Result<(), &'static str> {
        match self {
            Method::MmapNt => Err("non-temporal stores are a write path: reads are `mmap`'s"),
            Method::Dsync => Err("fdatasync only affects writes: reads are `write`'s (pread)"),
            _ => Ok(()),
        }
    }

    /// The system calls behind the method, for the report.
    pub(crate) fn io(self, workload: Workload, iodepth: usize) -> String {
        let read = workload == Workload::SeqRead;
        match (self, read) {
            (Method::Write, false) => "pwrite".into(),
            (Method::Write, true) => "pread (page cache)".into(),
            (Method::Direct, false) => "pwrite O_DIRECT".into(),
            (Method::Direct, true) => "pread O_DIRECT".into(),
            (Method::Uring, false) => format!("io_uring write O_DIRECT qd {iodepth}"),
            (Method::Uring, true) => format!("io_uring read O_DIRECT qd {iodepth}"),
            (Method::Mmap, false) => "memcpy to MAP_SHARED".into(),
            (Method::Mmap, true) => "memcpy from MAP_SHARED".into(),
            (Method::MmapNt, _) => {
                if cfg!(target_arch = "x86_64") {
                    "MOVNTDQ/MOVNTI to MAP_SHARED + SFENCE".into()
                } else {
                    "memcpy to MAP_SHARED (no non-temporal stores on this CPU)".into()
                }
            }
            (Method::Dsync, _) => "pwrite + fdatasync".into(),
        }
    }
}

/// Access pattern (`bench device --workload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// Sequential writes.
    SeqWrite,
    /// Sequential reads of the pattern the files were laid out with.
    SeqRead,
    /// Writes at uniformly random block offsets (write IOPS).
    RandWrite,
}

impl Workload {
    /// Every workload, in the order of the default `--workload`.
    pub const ALL: [Workload; 3] = [Workload::SeqWrite, Workload::SeqRead, Workload::RandWrite];

    /// The name `--workload` takes and the report prints.
    pub fn name(self) -> &'static str {
        match self {
            Workload::SeqWrite => "seq-write",
            Workload::SeqRead => "seq-read",
            Workload::RandWrite => "rand-write",
        }
    }

    /// The workload named `s` (surrounding spaces ignored).
    pub fn parse(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s.trim())
            .ok_or_else(|| format!("unknown workload `{s}` (use seq-write, seq-read, rand-write)"))
    }

    /// Whether the workload writes.
    pub fn writes(self) -> bool {
        self != Workload::SeqRead
    }
}

/// The offsets one thread visits: sequential with wrap-around, or uniformly random blocks
/// (with replacement, like fio's `norandommap`).
pub(super) struct Offsets {
    block: u64,
    blocks: u64,
    next: u64,
    random: Option<u64>,
    /// Requests handed out since the last pass over the file ended.
    in_pass: u64,
    passes: u64,
    /// The last offset handed out.
    pub last: u64,
}

impl Offsets {
    pub(super) fn new(block: u64, file_bytes: u64, random: bool, seed: u64) -> Offsets {
        Offsets {
            block,
            blocks: (file_bytes / block).max(1),
            next: 0,
            random: random.then_some(seed | 1),
            in_pass: 0,
            passes: 0,
            last: 0,
        }
    }

    /// Passes completed: a pass is one file's worth of requests (sequential: back at offset 0).
    pub(super) fn passes(&self) -> u64 {
        self.passes
    }

    pub(super) fn next_offset(&mut self) -> u64 {
        let index = match &mut self.random {
            Some(x) => {
                // xorshift64*
                *x ^= *x >> 12;
                *x ^= *x << 25;
                *x ^= *x >> 27;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % self.blocks
            }
            None => {
                let i = self.next;
                self.next = (i + 1) % self.blocks;
                i
            }
        };
        self.in_pass += 1;
        if self.in_pass == self.blocks {
            self.in_pass = 0;
            self.passes += 1;
        }
        self.last = index * self.block;
        self.last
    }
}

/// What an engine checks a read against.
pub(super) struct ReadCheck<'a> {
    pub path: &'a Path,
    pub seed: u64,
}

/// One thread's way of doing requests.
pub(super) trait Engine {
    /// Performs at least one request at offsets from `offsets`; returns how many completed.
    /// Reads are checked against the pattern: every byte if `full_check`, else the first and
    /// last 8 bytes of each request.
    fn step(&mut self, offsets: &mut Offsets, full_check: bool) -> io::Result<u64>;
    /// Completes requests still in flight; returns how many.
    fn drain(&mut self, _full_check: bool) -> io::Result<u64> {
        Ok(0)
    }
    /// Makes the writes durable: fdatasync, or msync for a mapping.
    fn sync(&mut self) -> io::Result<()>;
    /// The file, for dropping its pages from the page cache after each pass.
    fn file(&self) -> &File;
    /// The bytes every write request writes.
    fn source(&self) -> &[u8];
}

/// The data writes write: random bytes (a compressing device cannot flatter the result).
pub(super) fn source_buffer(block: usize) -> io::Result<AlignedBuf> {
    let mut buf = AlignedBuf::new(block)?;
    rand::Rng::fill(&mut rand::thread_rng(), buf.as_mut_slice());
    Ok(buf)
}

/// Checks a block read at `offset`, as an io::Error naming the first wrong byte.
pub(super) fn check_read(
    check: &ReadCheck<'_>,
    offset: u64,
    data: &[u8],
    full: bool,
) -> io::Result<()> {
    match layout::check_pattern(check.seed, offset, data, full) {
        None => Ok(()),
        Some(i) => {
            let at = offset + i as u64;
            Err(layout::mismatch(
                check.path,
                at,
                data[i],
                layout::expected_byte(check.seed, at),
            ))
        }
    }
}

/// pwrite/pread (buffered, O_DIRECT, or with fdatasync after every write).
pub(super) struct PosixEngine<'a> {
    pub file: File,
    pub buf: AlignedBuf,
    pub block: usize,
    pub write: bool,
    pub dsync: bool,
    pub check: ReadCheck<'a>,
}

impl Engine for PosixEngine<'_> {
    fn step(&mut self, offsets: &mut Offsets, full_check: bool) -> io::Result<u64> {
        let off = offsets.next_offset();
        if self.write {
            self.file
                .write_all_at(&self.buf.as_slice()[..self.block], off)?;
            if self.dsync {
                self.file.sync_data()?;
            }
        } else {
            let data = &mut self.buf.as_mut_slice()[..self.block];
            self.file.read_exact_at(data, off)?;
            check_read(&self.check, off, data, full_check)?;
        }
        Ok(1)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn file(&self) -> &File {
        &self.file
    }

    fn source(&self) -> &[u8] {
        &self.buf.as_slice()[..self.block]
    }
}

/// Copies into or out of a shared mapping of the whole file.
pub(super) struct MmapEngine<'a> {
    pub file: File,
    pub map: Mapping,
    pub buf: AlignedBuf,
    pub block: usize,
    pub write: bool,
    pub nontemporal: bool,
    pub check: ReadCheck<'a>,
}

impl Engine for MmapEngine<'_> {
    fn step(&mut self, offsets: &mut Offsets, full_check: bool) -> io::Result<u64> {
        let off = offsets.next_offset();
        let start = off as usize;
        // Offsets stay below file_bytes / block * block, and the mapping covers file_bytes.
        if start + self.block > self.map.len() {
            return Err(io::Error::other(format!(
                "offset {off} + {} is beyond the {}-byte mapping",
                self.block,
                self.map.len()
            )));
        }
        if self.write {
            let src = &self.buf.as_slice()[..self.block];
            // SAFETY: [start, start + block) lies inside the mapping (checked above), which
            // this engine alone writes (one file per thread); src is a separate heap buffer.
            unsafe {
                let dst = self.map.as_mut_ptr().add(start);
                if self.nontemporal {
                    copy_nontemporal(dst, src.as_ptr(), src.len());
                } else {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
                }
            }
        } else {
            let data = &mut self.buf.as_mut_slice()[..self.block];
            // SAFETY: the range lies inside the read mapping (checked above); data is a
            // separate heap buffer of block bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.map.as_ptr().add(start),
                    data.as_mut_ptr(),
                    data.len(),
                );
            }
            check_read(&self.check, off, data, full_check)?;
        }
        Ok(1)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.map.sync()
    }

    fn file(&self) -> &File {
        &self.file
    }

    fn source(&self) -> &[u8] {
        &self.buf.as_slice()[..self.block]
    }
}

/// Copies `len` bytes with non-temporal stores (bypassing the CPU caches, as the DUNE paper's
/// MOVNTI path), then SFENCE so they are ordered before anything that follows.
///
/// x86_64: 16-byte MOVNTDQ stores for the 16-byte aligned body, an 8-byte MOVNTI for an
/// 8-byte remainder, plain stores for the unaligned head and the last < 8 bytes. Elsewhere
/// a plain copy (the report says so).
///
/// # Safety
/// `dst` and `src` must be valid for `len` bytes and not overlap.
pub(super) unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{
            __m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128, _mm_stream_si64,
        };
        let head = dst.align_offset(16).min(len);
        // SAFETY: the caller guarantees both ranges; every access in the block stays inside
        // [0, len); stream stores go to 16-byte (si128) or 8-byte (si64) aligned addresses,
        // and SSE2 is part of the x86_64 baseline.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 16 <= len {
                let v = _mm_loadu_si128(src.add(i).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
                i += 16;
            }
            if i + 8 <= len {
                let v = std::ptr::read_unaligned(src.add(i).cast::<i64>());
                _mm_stream_si64(dst.add(i).cast::<i64>(), v);
                i += 8;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: the caller guarantees both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Ok(m));
        }
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Ok(w));
        }
        assert!(Method::parse("pmdk").unwrap_err().contains("mmap-nt"));
        assert!(Workload::parse("rand-read").is_err());
    }

    #[test]
    fn offsets_wrap_and_stay_in_range() {
        let mut o = Offsets::new(4096, 3 * 4096 + 100, false, 1);
        let seq: Vec<u64> = (0..5).map(|_| o.next_offset()).collect();
        assert_eq!(seq, [0, 4096, 8192, 0, 4096]);
        assert_eq!(o.passes(), 1);
        let mut r = Offsets::new(512, 1 << 20, true, 42);
        for _ in 0..10_000 {
            let off = r.next_offset();
            assert_eq!(off % 512, 0);
            assert!(off + 512 <= 1 << 20);
        }
    }

    #[test]
    fn nontemporal_copy_copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for dst_off in 0..17 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 31, 64, 100, 255, 256] {
                let mut dst = vec![0u8; 300];
                // SAFETY: both ranges are inside their vectors and do not overlap.
                unsafe { copy_nontemporal(dst.as_mut_ptr().add(dst_off), src.as_ptr(), len) };
                assert_eq!(&dst[dst_off..dst_off + len], &src[..len], "{dst_off} {len}");
                assert!(dst[dst_off + len..].iter().all(|&b| b == 0));
            }
        }
    }
}
