//! Deadlines from caller-given durations.

use std::time::{Duration, Instant};

/// Longer than any lease, wait or timeout means in practice (about 34 years), and short enough
/// that `Instant` can always hold `now` plus it.
pub(crate) const NEVER: Duration = Duration::from_secs(1 << 30);

/// `from + d`, with `d` capped at [`NEVER`]. Fix (found in review): a caller's
/// `Duration::MAX` ("wait forever", "lease forever") overflowed `Instant` and panicked, after
/// the claim had taken the event from its READY queue, so the event was lost until a reopen.
pub(crate) fn after(from: Instant, d: Duration) -> Instant {
    from + d.min(NEVER)
}

/// Milliseconds on a monotonic clock, counted from the first call in this process plus one,
/// so 0 can mean "never".
pub(crate) fn mono_ms() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// [`after`] from now.
pub(crate) fn from_now(d: Duration) -> Instant {
    after(Instant::now(), d)
}
