//! The built-in generator: every link produces frames of the self-describing format
//! ([`crate::frame`]) at a fixed rate, stamped with their scheduled time, so a readback can
//! prove there is no gap and no corruption.

use crate::frame::Pattern;
use crate::recorder::{now_ns, RecorderHandle};
use crate::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest the generator sleeps before looking at its stop flag again.
const STOP_POLL: Duration = Duration::from_millis(50);

/// What to generate.
#[derive(Debug, Clone)]
pub struct GeneratorConfig {
    /// Links (ids 0..links).
    pub links: u16,
    /// Bytes per frame.
    pub frame_len: usize,
    /// Bytes per second per link.
    pub rate_per_link: f64,
    /// Stop after this long (None: until the stop flag).
    pub duration: Option<Duration>,
}

/// What the generator did.
#[derive(Debug, Clone, Copy, Default)]
pub struct GeneratorStats {
    /// Frames offered (per link: the same number).
    pub frames: u64,
    /// Frames the recorder dropped (DRAM bound).
    pub dropped: u64,
    /// Seconds run.
    pub secs: f64,
    /// Largest lag behind the schedule (the generator could not keep up), in seconds.
    pub max_lag_secs: f64,
    /// Timestamp of frame 0; frame k is stamped [`frame_ts`]`(t0_ns, period_ns, k)`.
    pub t0_ns: u64,
    /// Nanoseconds between frames of a link.
    pub period_ns: f64,
}

/// The timestamp of generator frame `k`.
pub fn frame_ts(t0_ns: u64, period_ns: f64, k: u64) -> u64 {
    t0_ns + Duration::from_nanos((k as f64 * period_ns) as u64).as_nanos() as u64
}

/// Runs the generator on this thread until `duration` passes or `stop` is set.
pub fn run_generator(
    rec: &RecorderHandle,
    cfg: &GeneratorConfig,
    stop: &AtomicBool,
) -> Result<GeneratorStats> {
    let patterns: Vec<Pattern> = (0..cfg.links).map(Pattern::new).collect();
    let period_ns = (cfg.frame_len as f64 * 1e9 / cfg.rate_per_link).max(1.0);
    let t0 = Instant::now();
    let t0_ns = now_ns();
    let mut stats = GeneratorStats {
        t0_ns,
        period_ns,
        ..Default::default()
    };
    let mut k: u64 = 0;
    loop {
        let due = Duration::from_nanos((k as f64 * period_ns) as u64);
        if let Some(d) = cfg.duration {
            if due >= d {
                break;
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = t0.elapsed();
        if due > now {
            // Sleep rather than spin (the writers need the cores), and at least a millisecond:
            // the frames due meanwhile are then made in one burst. Timestamps are the schedule's,
            // so bursts do not change them.
            // Capped, so that a stop is seen within STOP_POLL even at a rate of a frame every
            // few minutes (review: `--rate-per-link 1B/s` slept 93 minutes in one call, and
            // Ctrl-C, SIGTERM and --duration waited for it).
            std::thread::sleep((due - now).clamp(Duration::from_millis(1), STOP_POLL));
            continue;
        }
        stats.max_lag_secs = stats.max_lag_secs.max((now - due).as_secs_f64());
        let ts = frame_ts(t0_ns, period_ns, k);
        for (link, p) in patterns.iter().enumerate() {
            let link = link as u16;
            let pushed = rec.push_with(link, ts, |buf, _| p.fill(buf, link, k, ts))?;
            if !pushed {
                stats.dropped += 1;
            }
        }
        k += 1;
    }
    stats.frames = k;
    stats.secs = t0.elapsed().as_secs_f64();
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Recorder, RecorderConfig};
    use std::sync::Arc;

    #[test]
    fn a_slow_generator_stops_promptly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(hotstore::Store::builder(dir.path()).open().expect("open"));
        let mut cfg = RecorderConfig::new(1, 64);
        cfg.ring_bytes_per_link = 64 * 64;
        let rec = Recorder::start(store, cfg).expect("start");
        let h = rec.handle();
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        // One frame every 64 s.
        let gen = std::thread::spawn(move || {
            run_generator(
                &h,
                &GeneratorConfig {
                    links: 1,
                    frame_len: 64,
                    rate_per_link: 1.0,
                    duration: None,
                },
                &s2,
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let st = gen.join().expect("join").expect("generator");
        // It saw the flag well before its next frame was due (64 s), however busy the machine.
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the generator took {:?} to see its stop flag",
            t.elapsed()
        );
        assert!(st.frames <= 1, "{} frames", st.frames);
        rec.finish().expect("finish");
    }
}
