//! The standard `process_*` metrics (the names every Prometheus client library uses), read
//! from /proc at each scrape. On a system without /proc, or if a read fails, the series that
//! cannot be read are left out rather than reported as 0.

use super::text::{Kind, Page};

/// Writes the process families that can be read now.
pub fn render(p: &mut Page) {
    #[cfg(target_os = "linux")]
    linux(p);
    #[cfg(not(target_os = "linux"))]
    let _ = p;
}

#[cfg(target_os = "linux")]
fn linux(p: &mut Page) {
    // Safety: sysconf reads a constant of the system; no memory is passed.
    let (ticks, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if let Some(stat) = self_stat() {
        if ticks > 0 {
            let ticks = ticks as f64;
            p.single(
                "process_cpu_seconds_total",
                Kind::Counter,
                "Total user and system CPU time spent in seconds.",
                (stat.utime + stat.stime) as f64 / ticks,
            );
            if let Some(boot) = boot_time() {
                p.single(
                    "process_start_time_seconds",
                    Kind::Gauge,
                    "Start time of the process since unix epoch in seconds.",
                    boot as f64 + stat.starttime as f64 / ticks,
                );
            }
        }
        p.single(
            "process_virtual_memory_bytes",
            Kind::Gauge,
            "Virtual memory size in bytes.",
            stat.vsize,
        );
        if page_size > 0 {
            p.single(
                "process_resident_memory_bytes",
                Kind::Gauge,
                "Resident memory size in bytes.",
                stat.rss_pages.saturating_mul(page_size as u64),
            );
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        // The count includes the descriptor of the listing itself.
        let open = dir.count().saturating_sub(1);
        p.single(
            "process_open_fds",
            Kind::Gauge,
            "Number of open file descriptors.",
            open,
        );
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit writes into the rlimit it is given, which lives on this stack frame.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY
    {
        p.single(
            "process_max_fds",
            Kind::Gauge,
            "Maximum number of open file descriptors.",
            lim.rlim_cur,
        );
    }
}

#[cfg(target_os = "linux")]
struct SelfStat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Fields of /proc/self/stat (proc(5)); the command name may contain spaces and parentheses,
/// so the fields are counted from the last ')'.
#[cfg(target_os = "linux")]
fn self_stat() -> Option<SelfStat> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { f.get(n - 3)?.parse().ok() };
    Some(SelfStat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// Boot time, seconds since the Unix epoch (`btime` of /proc/stat).
#[cfg(target_os = "linux")]
fn boot_time() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}
