//! Copying values into a segment: the one copy every write makes.
//!
//! Why not `copy_nonoverlapping` (glibc `memcpy`) for large copies: from 2 KiB on, glibc copies
//! with `rep movsb`, which on AMD Zen runs 25-35% slower when source and destination are not
//! aligned alike within 32 bytes. A value's source is wherever the caller keeps it and its
//! place in a segment follows the record before it, so three copies in four are misaligned.
//! Measured on this project's EPYC VM, 10 KiB copies into a 256 MiB region each followed by
//! their crc32c: 750-780 ns aligned alike, 980-1070 ns otherwise; this module's loop of 64-byte
//! loads and cache-line-aligned stores: 690-735 ns either way.
//!
//! Why values from 4 KiB on bypass the cache (non-temporal stores): a segment's memory is cold
//! (written long ago, or just zeroed by the kernel), so an ordinary store first reads each line
//! from DRAM (read for ownership) and writes it back later: two trips for every byte written. A
//! streaming store writes the line once. Measured on the Xeon VM (2026-11-29, puts of recycled
//! segments, `bench put --keep 1000`, alternated): 2 KiB 3.3-3.5 -> 2.6-2.7 GB/s (worse: the
//! partial lines at both ends and the fence cost more than the lines saved), 4 KiB 4.5 -> 4.6-4.7,
//! 6 KiB 5.1 -> 6.7, 10 KiB 5.6-5.8 -> 8.2-8.6, 64 KiB 8.1-8.5 -> 15.3, 1 MiB 8.0-8.6 -> 16.8-16.9.
//! The cost: a reader right behind the writer (a collector on another core) finds the value in
//! DRAM instead of the shared cache. The caller checksums the value from its source, which is
//! in cache, not from the segment (`Reservation::fill`, `Store::put_parts_with`), and does so
//! *after* the copy: the streaming stores drain to memory while the checksum runs, where
//! before it the next atomic (the shard lock) waited for them. EPYC VM (2026-11-29), `bench put
//! --value-size 10KiB --keep 1000`, alternated: 11.8, 10.9, 11.1 -> 14.2, 14.7, 13.0 GiB/s.

/// Copies shorter than this go to `copy_nonoverlapping` (glibc's vector loops, which do not
/// care about alignment; `rep movsb` starts at 2 KiB).
const VECTOR_FROM_LEN: usize = 2048;

/// Copies at least this long use non-temporal stores (see the module comment).
pub(crate) const STREAM_FROM_LEN: usize = 4096;

/// Copies `src` to `dst`. Every store is ordered before any later store of this thread (a
/// streaming copy ends with a store fence), so a reader that sees a later store sees the copy.
/// Streaming needs AVX-512F; without it, and below 4 KiB, the stores are ordinary.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and must not overlap `src`.
#[inline]
pub(crate) unsafe fn copy_to(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= VECTOR_FROM_LEN && std::is_x86_feature_detected!("avx512f") {
        // Safety: the CPU has AVX-512F (checked above); the caller's contract.
        return unsafe {
            if src.len() >= STREAM_FROM_LEN {
                copy_avx512::<true>(dst, src.as_ptr(), src.len())
            } else {
                copy_avx512::<false>(dst, src.as_ptr(), src.len())
            }
        };
    }
    // Safety: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}

/// Copies `src` into `dst`, which must be as long: a value's bytes into a reservation.
#[inline]
pub(crate) fn copy_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy of {} bytes into {}",
        src.len(),
        dst.len()
    );
    // Safety: `dst` is an exclusive slice of the same length; borrows cannot overlap.
    unsafe { copy_to(dst.as_mut_ptr(), src) }
}

/// Up to 63 bytes to align `dst` to a cache line, then four 64-byte loads and aligned stores
/// per round (non-temporal if `STREAM`, then a fence), then the tail.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_avx512<const STREAM: bool>(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{
        _mm512_loadu_si512, _mm512_store_si512, _mm512_stream_si512, _mm_sfence,
    };
    // Safety: the caller guarantees `len` bytes at both, not overlapping; every access below
    // stays within them, and stores at `d` are 64-byte aligned by construction.
    unsafe {
        let head = (dst.align_offset(64)).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s, mut n) = (dst.add(head), src.add(head), len - head);
        while n >= 256 {
            let a = _mm512_loadu_si512(s.cast());
            let b = _mm512_loadu_si512(s.add(64).cast());
            let c = _mm512_loadu_si512(s.add(128).cast());
            let e = _mm512_loadu_si512(s.add(192).cast());
            if STREAM {
                _mm512_stream_si512(d.cast(), a);
                _mm512_stream_si512(d.add(64).cast(), b);
                _mm512_stream_si512(d.add(128).cast(), c);
                _mm512_stream_si512(d.add(192).cast(), e);
            } else {
                _mm512_store_si512(d.cast(), a);
                _mm512_store_si512(d.add(64).cast(), b);
                _mm512_store_si512(d.add(128).cast(), c);
                _mm512_store_si512(d.add(192).cast(), e);
            }
            d = d.add(256);
            s = s.add(256);
            n -= 256;
        }
        std::ptr::copy_nonoverlapping(s, d, n);
        if STREAM {
            // Streaming stores are weakly ordered: without the fence, a reader that sees the
            // record's header (stored after this copy) could still read stale value bytes.
            // Publishing takes the shard lock, whose locked instruction orders them as well;
            // the fence keeps the copy correct on its own (a persistence domain's flush too).
            _mm_sfence();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in [
            0, 1, 63, 64, 2047, 2048, 2049, 2100, 4095, 4096, 4097, 10_240, 10_301, 16_384,
        ] {
            for s_off in [0, 1, 8, 16, 33] {
                for d_off in [0, 3, 8, 16, 48, 63] {
                    let mut dst = vec![0xEEu8; len + 200];
                    let from = &src[s_off..s_off + len];
                    super::copy_into(&mut dst[d_off..d_off + len], from);
                    assert_eq!(&dst[d_off..d_off + len], from, "len {len} {s_off} {d_off}");
                    assert!(dst[..d_off].iter().all(|&b| b == 0xEE), "before {len}");
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xEE), "after {len}");
                }
            }
        }
    }
}
