//! Cache-line write-back for persistent memory: CLWB where the CPU has it, else CLFLUSHOPT,
//! else CLFLUSH, then SFENCE. This is the DAX path: on a MAP_SYNC mapping, data is durable
//! once its cache lines are written back and fenced, with no system call.

const CACHE_LINE: usize = 64;

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Clwb,
    ClflushOpt,
    Clflush,
}

#[cfg(target_arch = "x86_64")]
fn method() -> Method {
    use std::sync::OnceLock;
    static METHOD: OnceLock<Method> = OnceLock::new();
    *METHOD.get_or_init(|| {
        let max_leaf = core::arch::x86_64::__cpuid(0).eax;
        if max_leaf < 7 {
            return Method::Clflush;
        }
        // Leaf 7 is only asked for when the CPU has it (checked above).
        let ebx = core::arch::x86_64::__cpuid_count(7, 0).ebx;
        if ebx & (1 << 24) != 0 {
            Method::Clwb
        } else if ebx & (1 << 23) != 0 {
            Method::ClflushOpt
        } else {
            Method::Clflush
        }
    })
}

/// Writes back every cache line of `[ptr, ptr + len)` and fences.
///
/// # Safety
/// `ptr..ptr + len` must be mapped for the duration of the call.
pub unsafe fn persist_range(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let start = (ptr as usize) & !(CACHE_LINE - 1);
        let end = ptr as usize + len;
        let m = method();
        let mut line = start;
        while line < end {
            let p = line as *const u8;
            // Safety: `p` lies in the mapped range (caller's contract); these instructions
            // only write back or evict the line, they never change its contents.
            unsafe {
                match m {
                    Method::Clwb => {
                        core::arch::asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags))
                    }
                    Method::ClflushOpt => {
                        core::arch::asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags))
                    }
                    Method::Clflush => core::arch::x86_64::_mm_clflush(p),
                }
            }
            line += CACHE_LINE;
        }
        // Safety: SFENCE has no memory-safety preconditions.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ptr, CACHE_LINE);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flushing_keeps_contents() {
        let mut buf = vec![7u8; 4096 + 13];
        // Safety: the range is inside `buf`.
        unsafe { super::persist_range(buf.as_ptr().add(3), 4096) };
        buf[0] = 1;
        assert!(buf[1..].iter().all(|&b| b == 7));
    }
}
