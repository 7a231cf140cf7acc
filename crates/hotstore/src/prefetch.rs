//! Cache-line prefetch hints: asking the CPU for lines that will be read soon, so that several
//! misses are in flight at once instead of one after the other. A hint never faults and reads
//! nothing into the program, whatever the address; off x86_64 these do nothing.

/// Bytes of a cache line.
const LINE: usize = 64;

/// Asks for the cache line holding `at`.
#[inline]
pub(crate) fn line<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Safety: SSE is part of x86_64; a prefetch is a hint that never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Asks for every cache line of `items`, or of its first `max_bytes` if fewer.
#[inline]
pub(crate) fn lines<T>(items: &[T], max_bytes: usize) {
    let start = items.as_ptr() as *const u8;
    let bytes = std::mem::size_of_val(items).min(max_bytes);
    // From the line holding the first byte to the one holding the last.
    let first = start as usize & !(LINE - 1);
    let end = start as usize + bytes;
    for at in (first..end).step_by(LINE) {
        line(at as *const u8);
    }
}
