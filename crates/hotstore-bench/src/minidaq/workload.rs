//! The two kinds of minidaq threads and the fragment pattern they share.
//!
//! Readout thread `i` of `R` writes events `i, i + R, i + 2R, ...` of one run, each as
//! `detectors` fragments (key `run, event, detector, 0`), straight into the store's memory
//! (`reserve` → fill → `commit`). Collectors claim READY events, walk their fragments in place,
//! check them, and acknowledge each with `Keep` (probability `acceptance`) or `Remove`.
//!
//! Fragment pattern (the integrity check): the first `min(16, len)` bytes are the key, the rest
//! is `PATTERN[off + 16 .. off + len]`, where `PATTERN` is a fixed pseudo-random buffer and
//! `off` is derived from the key. A fragment under the wrong key, cut, shifted or damaged fails.

use super::sampling::Counters;
use hotstore::{Ack, Durability, FragmentKey, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Offsets into the pattern are below this (a power of two).
const PATTERN_WINDOW: usize = 1 << 20;
/// Counters are published every this many fragments (a shared atomic per fragment would cost
/// more than a 100-byte put).
pub(super) const PUBLISH_EVERY: u64 = 32;
/// A put into a full store waits this long for collectors to free space before failing.
pub const FULL_WAIT: Duration = Duration::from_secs(10);
/// One step of that wait (the run's end is noticed between steps).
const FULL_WAIT_STEP: Duration = Duration::from_millis(100);

/// How fragment sizes are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Distro {
    /// Every fragment has --fragment-size bytes.
    Const,
    /// Poisson-distributed sizes with mean --fragment-size (at least 1 byte).
    Poisson,
}

/// The shared pseudo-random pattern.
pub struct Pattern(Vec<u8>);

impl Pattern {
    /// A pattern for fragments up to `max_len` bytes.
    pub fn new(max_len: usize) -> Pattern {
        let mut rng = StdRng::seed_from_u64(0x006d_696e_6964_6171);
        let mut b = vec![0u8; PATTERN_WINDOW + max_len + 16];
        rng.fill(&mut b[..]);
        Pattern(b)
    }

    fn offset(key: &[u8]) -> usize {
        (crate::util::fnv1a64(key) as usize & (PATTERN_WINDOW - 1)) & !7
    }

    /// Writes the fragment for `key` into `out` (its whole length).
    pub fn fill(&self, key: &[u8], out: &mut [u8]) {
        let (head, rest) = self.parts(key, out.len());
        out[..head.len()].copy_from_slice(head);
        out[head.len()..].copy_from_slice(rest);
    }

    /// The fragment of `len` bytes for `key`, as its two pieces: the key's first bytes, then
    /// the pattern.
    pub fn parts<'a>(&'a self, key: &'a [u8], len: usize) -> (&'a [u8], &'a [u8]) {
        let head = len.min(key.len());
        let off = Self::offset(key);
        (&key[..head], &self.0[off + head..off + len.max(head)])
    }

    /// True if `value` is the fragment for `key`.
    pub fn check(&self, key: &[u8], value: &[u8]) -> bool {
        let head = value.len().min(key.len());
        let off = Self::offset(key);
        value.len() + off + 16 <= self.0.len()
            && value[..head] == key[..head]
            && value[head..] == self.0[off + head..off + value.len()]
    }
}

/// Draws fragment sizes.
pub struct Sizes {
    mean: u64,
    distro: Distro,
    rng: StdRng,
}

impl Sizes {
    /// Sizes with this mean and distribution.
    pub fn new(mean: u64, distro: Distro, seed: u64) -> Sizes {
        Sizes {
            mean,
            distro,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The largest size drawn (Poisson: mean + 8 standard deviations, where the tail is
    /// cut; more than any run draws).
    pub fn max(mean: u64, distro: Distro) -> u64 {
        match distro {
            Distro::Const => mean,
            Distro::Poisson => mean + 8 * (mean as f64).sqrt().ceil() as u64 + 16,
        }
    }

    /// The next size.
    pub fn next(&mut self) -> usize {
        let m = self.mean as f64;
        let n = match self.distro {
            Distro::Const => self.mean,
            // Knuth's method for small means; the normal approximation above (exact enough
            // for a size distribution, and O(1)).
            Distro::Poisson if m < 30.0 => {
                let limit = (-m).exp();
                let (mut k, mut p) = (0u64, 1.0f64);
                loop {
                    p *= self.rng.gen::<f64>();
                    if p <= limit {
                        break k;
                    }
                    k += 1;
                }
            }
            Distro::Poisson => {
                let (u1, u2): (f64, f64) = (self.rng.gen::<f64>().max(1e-12), self.rng.gen());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (m + z * m.sqrt()).round().max(0.0) as u64
            }
        };
        n.clamp(1, Self::max(self.mean, self.distro)) as usize
    }
}

/// One acknowledged operation, as logged by `--ack-log` for a crash supervisor.
pub enum AckLine {
    /// The fragment `key` of `len` bytes was stored (its value is the pattern).
    Put { key: Vec<u8>, len: u64 },
    /// The event (prefix) was acknowledged with Remove.
    Removed(Vec<u8>),
    /// The event (prefix) was acknowledged with Keep.
    Kept(Vec<u8>),
}

/// `--ack-log`: one line per acknowledged operation, appended after the store returned:
/// `put <key hex> <len>`, `removed <event hex>`, `kept <event hex>`. Each line is one `write`
/// on an O_APPEND file, so a kill -9 leaves whole lines and at most a cut last one: the kernel
/// stops a write at a page boundary of the file when the process is being killed.
pub struct AckLog(parking_lot::Mutex<std::fs::File>);

impl AckLog {
    /// Opens `path` for appending (created if missing). A cut last line, left by a killed
    /// run, is dropped first: its operation counts as not logged, and the next run's first
    /// line must not be glued to it. Fix (found by tests/events_kill9.rs under load): a cut
    /// `put ` followed by `removed <event>` read as a put of the key `removed`.
    pub fn open(path: &std::path::Path) -> std::io::Result<AckLog> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let len = f.metadata()?.len();
        // Lines are under 100 bytes: the last whole one ends in the file's last 4 KiB.
        let from = len.saturating_sub(4096);
        f.seek(SeekFrom::Start(from))?;
        let mut tail = Vec::new();
        f.read_to_end(&mut tail)?;
        if tail.last().is_some_and(|&b| b != b'\n') {
            let whole = tail
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i as u64 + 1);
            f.set_len(from + whole)?;
        }
        Ok(AckLog(parking_lot::Mutex::new(f)))
    }

    fn append_line(&self, line: &AckLine) -> std::io::Result<()> {
        use std::io::Write;
        let text = match line {
            AckLine::Put { key, len } => format!("put {} {len}\n", hex::encode(key)),
            AckLine::Removed(e) => format!("removed {}\n", hex::encode(e)),
            AckLine::Kept(e) => format!("kept {}\n", hex::encode(e)),
        };
        self.0.lock().write_all(text.as_bytes())
    }
}

/// What all threads of one run share.
pub struct Shared {
    /// The embedded store, or the server of `--remote`.
    pub target: Target,
    pub counters: Arc<Counters>,
    pub pattern: Pattern,
    pub run: u32,
    pub detectors: u16,
    pub durability: Durability,
    pub acceptance: f64,
    pub lease: Duration,
    pub verify: bool,
    pub ack_log: Option<AckLog>,
    /// Readout stops when set.
    pub stop_readout: AtomicBool,
    /// Collectors stop when set (they also stop once readout is done and nothing is left).
    pub stop_collect: AtomicBool,
    /// Readout threads still running.
    pub readout_running: AtomicU64,
    /// Stop readout after this many events in all (0: no limit).
    pub events_target: u64,
    /// Stop readout once this many value bytes were written (0: no limit).
    pub bytes_budget: u64,
    pub events_written: AtomicU64,
    pub events_collected: AtomicU64,
    pub events_kept: AtomicU64,
    pub integrity_errors: AtomicU64,
    pub bytes_written: AtomicU64,
    /// First error a thread hit (the run then stops).
    pub error: parking_lot::Mutex<Option<String>>,
}

/// Where the threads of a run read and write.
pub enum Target {
    /// The embedded store (the default).
    Local(Store),
    /// A hotstore server (`--remote`).
    Remote(super::remote::RemoteTarget),
}

/// A collector's counts not yet handed to the sampler.
#[derive(Default)]
pub(super) struct Collected {
    frags: u64,
    bytes: u64,
    events: u64,
}

impl Shared {
    /// One event a collector acknowledged (`prefix`: its event id; `frags` fragments of
    /// `bytes`): logged, counted, and handed to the sampler every [`PUBLISH_EVERY`] fragments.
    pub(super) fn acknowledged(
        &self,
        c: &mut Collected,
        prefix: Vec<u8>,
        keep: bool,
        frags: u64,
        bytes: u64,
    ) {
        self.log(if keep {
            AckLine::Kept(prefix)
        } else {
            AckLine::Removed(prefix)
        });
        if keep {
            self.events_kept.fetch_add(1, Ordering::Relaxed);
        }
        self.events_collected.fetch_add(1, Ordering::AcqRel);
        c.frags += frags;
        c.bytes += bytes;
        c.events += 1;
        if c.frags >= PUBLISH_EVERY {
            self.publish_collected(std::mem::take(c));
        }
    }

    /// True once readout has finished and every event it wrote was collected: a collector that
    /// found nothing READY is done.
    pub(super) fn all_collected(&self, readout_done: bool) -> bool {
        readout_done
            && self.events_collected.load(Ordering::Acquire)
                >= self.events_written.load(Ordering::Acquire)
    }

    /// Counts and reports an event whose check found `bad` damaged fragments, or that has not
    /// --detectors fragments (`n`): an event offered with fragments missing or extra.
    pub(super) fn check_event(&self, event: &dyn std::fmt::Display, n: u64, mut bad: u64) {
        if n != u64::from(self.detectors) {
            bad += 1;
        }
        if bad > 0 {
            self.integrity_errors.fetch_add(bad, Ordering::Relaxed);
            eprintln!("integrity: event {event} failed its check ({bad} bad, {n} fragments)");
        }
    }

    /// Hands a collector's remaining counts to the sampler.
    pub(super) fn publish_collected(&self, c: Collected) {
        self.counters.add_collect(c.frags, c.bytes, c.events);
    }

    pub(super) fn fail(&self, msg: String) {
        self.error.lock().get_or_insert(msg);
        self.stop_readout.store(true, Ordering::Release);
        self.stop_collect.store(true, Ordering::Release);
    }

    pub(super) fn log(&self, line: AckLine) {
        if let Some(log) = &self.ack_log {
            if let Err(e) = log.append_line(&line) {
                self.fail(e.to_string());
            }
        }
    }
}

/// Readout thread `index` of `threads`.
pub fn readout(
    sh: &Shared,
    store: &Store,
    index: usize,
    threads: usize,
    mean: u64,
    distro: Distro,
    seed: u64,
) {
    let mut sizes = Sizes::new(mean, distro, seed ^ index as u64);
    let (mut ops, mut bytes) = (0u64, 0u64);
    let mut event = index as u64;
    'events: while !sh.stop_readout.load(Ordering::Relaxed) {
        if sh.events_target > 0 && event >= sh.events_target {
            break;
        }
        if sh.bytes_budget > 0 && sh.bytes_written.load(Ordering::Relaxed) >= sh.bytes_budget {
            break;
        }
        for det in 0..sh.detectors {
            let key = FragmentKey::new(sh.run, event, det, 0).to_bytes();
            let len = sizes.next();
            // Wait for space in short steps, so the end of the run (which stops the collectors
            // too) ends a wait on a full store instead of turning it into an error. Fix (found
            // running 2 readout and 2 collector threads): a readout waiting for space when the
            // run ended waited FULL_WAIT for collectors that had stopped, then failed the run.
            // The clock is read once the store is full, not per fragment.
            let mut waited_from: Option<Instant> = None;
            let mut slot = loop {
                match store.reserve_with(&key, len, Some(FULL_WAIT_STEP)) {
                    Ok(s) => break s,
                    Err(e) if e.is_full() && sh.stop_readout.load(Ordering::Acquire) => {
                        break 'events;
                    }
                    Err(e)
                        if e.is_full()
                            && waited_from.get_or_insert_with(Instant::now).elapsed()
                                < FULL_WAIT =>
                    {
                        continue
                    }
                    Err(e) => {
                        sh.fail(format!("readout put of event {event}: {e}"));
                        break 'events;
                    }
                }
            };
            // Through the engine's copy, as a readout filling its slot from a buffer would.
            let (head, rest) = sh.pattern.parts(&key, len);
            slot.fill(0, head);
            slot.fill(head.len(), rest);
            if let Err(e) = slot.commit(sh.durability) {
                sh.fail(format!("readout commit of event {event}: {e}"));
                break 'events;
            }
            sh.log(AckLine::Put {
                key: key.to_vec(),
                len: len as u64,
            });
            ops += 1;
            bytes += len as u64;
            if ops.is_multiple_of(PUBLISH_EVERY) {
                sh.counters.add_readout(ops, bytes);
                sh.bytes_written.fetch_add(bytes, Ordering::Relaxed);
                (ops, bytes) = (0, 0);
            }
        }
        sh.events_written.fetch_add(1, Ordering::Relaxed);
        event += threads as u64;
    }
    sh.counters.add_readout(ops, bytes);
    sh.bytes_written.fetch_add(bytes, Ordering::Relaxed);
    sh.readout_running.fetch_sub(1, Ordering::AcqRel);
}

/// Collector thread `index`.
pub fn collect(sh: &Shared, store: &Store, index: usize, seed: u64) {
    let name = format!("collector-{index}");
    let mut rng = StdRng::seed_from_u64(seed ^ (index as u64) << 32);
    let mut collected = Collected::default();
    while !sh.stop_collect.load(Ordering::Relaxed) {
        let readout_done = sh.readout_running.load(Ordering::Acquire) == 0;
        let claim = match store.next_event_wait(&name, sh.lease, Duration::from_millis(20)) {
            Ok(Some(c)) => c,
            Ok(None) => {
                // Done once readout is and nothing more became READY.
                if sh.all_collected(readout_done) {
                    break;
                }
                continue;
            }
            Err(e) => return sh.fail(format!("{name}: next_event: {e}")),
        };
        let (mut n, mut b, mut bad) = (0u64, 0u64, 0u64);
        let walked = claim.for_each_fragment(|k, v| {
            n += 1;
            b += v.len() as u64;
            if sh.verify && !sh.pattern.check(k, v) {
                bad += 1;
            }
        });
        if let Err(e) = walked {
            return sh.fail(format!("{name}: reading event {}: {e}", claim.event()));
        }
        sh.check_event(claim.event(), n, bad);
        let event = claim.event().clone();
        let keep = sh.acceptance > 0.0 && rng.gen_bool(sh.acceptance.min(1.0));
        let how = if keep { Ack::Keep } else { Ack::Remove };
        if let Err(e) = claim.ack_with(how, sh.durability) {
            return sh.fail(format!("{name}: ack of event {event}: {e}"));
        }
        sh.acknowledged(&mut collected, event.as_bytes().to_vec(), keep, n, b);
    }
    sh.publish_collected(collected);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_last_line_of_a_killed_run_is_dropped_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acks.log");
        std::fs::write(&path, "removed 0a0b\nput ").unwrap();
        let log = AckLog::open(&path).unwrap();
        log.append_line(&AckLine::Kept(vec![0x0c])).unwrap();
        drop(log);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "removed 0a0b\nkept 0c\n"
        );
        // Whole lines are kept as they are.
        let log = AckLog::open(&path).unwrap();
        log.append_line(&AckLine::Removed(vec![0x0d])).unwrap();
        drop(log);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "removed 0a0b\nkept 0c\nremoved 0d\n"
        );
    }
}
