//! How much memory the rings may take: checked before they are allocated (and touched), so a
//! ring size the machine cannot hold is refused with a clear error instead of an abort or the
//! OOM killer later.

use std::path::Path;

/// Memory this process can still take, and where the figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from, for messages (e.g. "MemAvailable in /proc/meminfo").
    pub source: String,
}

/// DRAM the rings of `links` links take: every frame slot and its 8-byte timestamp.
pub fn ring_bytes(links: u16, frame_len: usize, ring_bytes_per_link: u64) -> u64 {
    let frames = ring_bytes_per_link / frame_len.max(1) as u64;
    frames
        .saturating_mul(frame_len as u64 + 8)
        .saturating_mul(links as u64)
}

/// The memory available now: `MemAvailable` of `/proc/meminfo`, or less if the process's
/// cgroup (v2) has a memory limit closer to its use. None if neither can be read.
pub fn available() -> Option<Available> {
    let mut best = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| mem_available(&t))
        .map(|bytes| Available {
            bytes,
            source: "MemAvailable in /proc/meminfo".into(),
        });
    if let Some(c) = cgroup_left() {
        if best.as_ref().is_none_or(|b| c.bytes < b.bytes) {
            best = Some(c);
        }
    }
    best
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn mem_available(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemAvailable:")?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb.saturating_mul(1024))
    })
}

/// The least room left under a memory limit of this process's cgroup v2 or its ancestors.
fn cgroup_left() -> Option<Available> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let mut best: Option<Available> = None;
    loop {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        if let (Some(max), Some(cur)) = (read("memory.max"), read("memory.current")) {
            if let (Ok(max), Ok(cur)) = (max.trim().parse::<u64>(), cur.trim().parse::<u64>()) {
                let left = max.saturating_sub(cur);
                if best.as_ref().is_none_or(|b| left < b.bytes) {
                    best = Some(Available {
                        bytes: left,
                        source: format!(
                            "the memory limit of cgroup {} (memory.max less memory.current)",
                            dir.display()
                        ),
                    });
                }
            }
        }
        if dir == Path::new("/sys/fs/cgroup") || !dir.pop() {
            return best;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mem_available_is_read_in_bytes() {
        let t = "MemTotal:       24684084 kB\nMemFree:  1 kB\nMemAvailable:   23550788 kB\n";
        assert_eq!(super::mem_available(t), Some(23550788 * 1024));
        assert_eq!(super::mem_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn ring_bytes_count_slots_and_timestamps() {
        assert_eq!(super::ring_bytes(10, 5568, 5568 * 100 + 7), 10 * 100 * 5576);
    }
}
