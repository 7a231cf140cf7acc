//! `hotstore stress`: a random mix of puts, overwrites and removals from several threads,
//! each acknowledged operation logged (see `acklog.rs`) so a supervisor that kills the process
//! at random moments can check afterwards that every acknowledged write is in the store.
//!
//! Each thread owns its keys: the ones it creates (fragment keys `run = nonce, event = n,
//! detector = thread` and blob keys `stress-<nonce>-<thread>-<n>`, with a random 32-bit nonce
//! per process run not used by any key in the log) and a share (by key hash) of the keys the
//! ack log says are present from earlier runs, plus of the keys the store holds that the log
//! never mentions (puts in flight, never acknowledged, when an earlier run was killed). So
//! each key has at most one operation in flight at any moment, and a key is never written
//! again after its removal.
//!
//! Values are self-describing so that a checker can recognise a value written by an operation
//! that was in flight (never acknowledged) when the process died: a value of `len >= 8` bytes
//! is `seed` (8 bytes, little-endian) followed by the SplitMix64 stream seeded with
//! `seed ^ fnv1a64(key)`, 8 bytes per step, little-endian, cut to length; shorter values are the
//! stream alone.

use crate::acklog::{Ack, AckLog, LastAck};
use hotstore::{Durability, FragmentKey, Store, StoreOptions, TierSpec, MAX_VALUE_LEN};
use hotstore_bench::util::fnv1a64;
use hotstore_bench::util::{human_bytes, human_count};
use hotstore_bench::{fail, Error, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// With `offload_to`, the first tier offloads past this fraction of its capacity (half: so
/// that short runs offload too).
const OFFLOAD_AT: f64 = 0.5;

/// After this long without being able to write or remove anything, a full store is an error.
const FULL_STALL_LIMIT: Duration = Duration::from_secs(10);

/// What `hotstore stress` was asked to do.
pub struct Config {
    /// Store directory.
    pub dir: PathBuf,
    /// How long to run.
    pub duration: Duration,
    /// Acknowledgement log.
    pub ack_log: PathBuf,
    /// Writer threads.
    pub threads: usize,
    /// Seed of the random choices (`None`: random).
    pub seed: Option<u64>,
    /// Largest value.
    pub max_value: u64,
    /// Values at least this long go by direct I/O (`None`: the engine default).
    pub direct_io_min: Option<u64>,
    /// Live keys each thread aims to hold.
    pub keys_per_thread: usize,
    /// Segment size for a new store.
    pub segment_size: Option<u64>,
    /// Tier capacity (replaces the stored one).
    pub capacity: Option<u64>,
    /// A second tier (a directory; relative to the store's) that the bounded first tier
    /// offloads its oldest data to past half its capacity.
    pub offload_to: Option<PathBuf>,
    /// Durability of every write.
    pub durability: Durability,
    /// Long-lived keys written at the start of each run and never touched again in it (they
    /// pin their segments, so a bounded store stays writable only by relocating them); read
    /// back and checked at the end of the run. Later runs inherit them like any logged key.
    pub long_lived: usize,
}

/// SplitMix64: fast, and simple enough to re-implement in a checker.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Fills `buf` with the `len`-byte value for `key` and `seed` (format in the module docs).
pub fn fill_value(buf: &mut Vec<u8>, key: &[u8], len: usize, seed: u64) {
    buf.clear();
    buf.resize(len, 0);
    let start = if len >= 8 {
        buf[..8].copy_from_slice(&seed.to_le_bytes());
        8
    } else {
        0
    };
    let mut g = SplitMix64(seed ^ fnv1a64(key));
    for chunk in buf[start..].chunks_mut(8) {
        let x = g.next().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
}

/// True if `key`'s value in `store` is one stress could have written (see the module docs):
/// its own seed followed by its stream; a value under 8 bytes (the stream alone, no seed) is
/// taken as one. A key gone meanwhile counts as one (nothing to protect).
fn is_stress_value(store: &Store, key: &[u8]) -> bool {
    let Ok(Some(v)) = store.get(key) else {
        return true;
    };
    if v.len() < 8 {
        return true;
    }
    let seed = u64::from_le_bytes(v[..8].try_into().unwrap_or_default());
    let mut want = Vec::new();
    fill_value(&mut want, key, v.len(), seed);
    want == v
}

/// The nonce a stress key was made with, if it is one.
fn key_nonce(key: &[u8]) -> Option<u32> {
    if key.len() == FragmentKey::LEN {
        return FragmentKey::from_bytes(key).map(|k| k.run);
    }
    let rest = key.strip_prefix(b"stress-")?;
    let hex = std::str::from_utf8(rest.get(..8)?).ok()?;
    u32::from_str_radix(hex, 16).ok()
}

/// Counters of one thread.
#[derive(Default, Clone, Copy)]
struct Counts {
    long_lived: u64,
    new_puts: u64,
    overwrites: u64,
    removes: u64,
    value_bytes: u64,
    full: u64,
}

impl Counts {
    fn ops(&self) -> u64 {
        self.new_puts + self.overwrites + self.removes
    }
    fn add(&mut self, o: &Counts) {
        self.long_lived += o.long_lived;
        self.new_puts += o.new_puts;
        self.overwrites += o.overwrites;
        self.removes += o.removes;
        self.value_bytes += o.value_bytes;
        self.full += o.full;
    }
}

/// One writer thread's state.
struct Worker<'a> {
    id: usize,
    nonce: u32,
    store: &'a Store,
    log: &'a AckLog,
    cfg: &'a Config,
    rng: StdRng,
    /// Keys this thread holds, with the sequence number of their last write (older = smaller).
    live: Vec<(Vec<u8>, u64)>,
    seq: u64,
    next_key: u64,
    buf: Vec<u8>,
    counts: Counts,
    /// Since when nothing could be written because the store is full.
    full_since: Option<Instant>,
    /// This thread's long-lived keys, with the length and crc32c of their value.
    long_lived: Vec<(Vec<u8>, u64, u32)>,
}

enum Outcome {
    Done,
    Full,
}

impl Worker<'_> {
    fn run(&mut self, deadline: Instant, stop: &AtomicBool) -> Result<Counts> {
        self.write_long_lived(deadline, stop)?;
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            let r: f64 = self.rng.gen();
            let (p_new, p_over) = if self.live.is_empty() {
                (1.0, 0.0)
            } else if self.live.len() < self.cfg.keys_per_thread {
                (0.5, 0.3)
            } else {
                (0.2, 0.3)
            };
            let outcome = if r < p_new {
                self.put_new()?
            } else if r < p_new + p_over {
                self.overwrite()?
            } else {
                // Half the removals take the oldest key (first in, first out, as DAQ data
                // mostly goes), which lets whole segments die; half take a random one.
                let i = if self.rng.gen_bool(0.5) {
                    self.oldest()
                } else {
                    self.rng.gen_range(0..self.live.len())
                };
                self.remove(i)?
            };
            match outcome {
                Outcome::Done => self.full_since = None,
                Outcome::Full => {
                    self.counts.full += 1;
                    self.make_room()?;
                }
            }
        }
        Ok(self.counts)
    }

    /// Writes this thread's share of the long-lived keys (`n % threads == id`), making room
    /// as the loop does when the store is full.
    fn write_long_lived(&mut self, deadline: Instant, stop: &AtomicBool) -> Result<()> {
        let threads = self.cfg.threads.max(1);
        for n in (self.id..self.cfg.long_lived).step_by(threads) {
            let key = format!("stress-{:08x}-long-{n}", self.nonce).into_bytes();
            loop {
                if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                match self.write(&key)? {
                    Outcome::Done => break,
                    Outcome::Full => {
                        self.counts.full += 1;
                        self.make_room()?;
                    }
                }
            }
            self.full_since = None;
            self.counts.long_lived += 1;
            self.long_lived
                .push((key, self.buf.len() as u64, crc32c::crc32c(&self.buf)));
        }
        Ok(())
    }

    /// Reads back every long-lived key of this thread: each must hold what was written.
    fn check_long_lived(&self) -> Result<()> {
        for (key, len, crc) in &self.long_lived {
            let what = match self.store.get(key)? {
                None => "is missing".to_string(),
                Some(v) if v.len() as u64 != *len || crc32c::crc32c(&v) != *crc => format!(
                    "holds {} bytes with crc32c {:08x}, not the {len} bytes with crc32c {crc:08x} written",
                    v.len(),
                    crc32c::crc32c(&v)
                ),
                Some(_) => continue,
            };
            return fail(format!(
                "long-lived key {} {what}",
                String::from_utf8_lossy(key)
            ));
        }
        Ok(())
    }

    /// Index of the key written longest ago (`live` must not be empty).
    fn oldest(&self) -> usize {
        (0..self.live.len())
            .min_by_key(|&i| self.live[i].1)
            .unwrap_or(0)
    }

    fn value_len(&mut self) -> usize {
        // Log-uniform over 1 ..= max: mostly small values, some large ones.
        let u: f64 = self.rng.gen();
        let len = ((self.cfg.max_value as f64 + 1.0).ln() * u).exp().floor() as u64;
        len.clamp(1, self.cfg.max_value) as usize
    }

    fn new_key(&mut self) -> Vec<u8> {
        let n = self.next_key;
        self.next_key += 1;
        if self.rng.gen_bool(0.5) {
            FragmentKey::new(self.nonce, n, self.id as u16, 0)
                .to_bytes()
                .to_vec()
        } else {
            format!("stress-{:08x}-{}-{n}", self.nonce, self.id).into_bytes()
        }
    }

    /// Writes a fresh value under `key` and logs it; `Full` if the store had no room.
    fn write(&mut self, key: &[u8]) -> Result<Outcome> {
        let len = self.value_len();
        let seed = self.rng.gen();
        fill_value(&mut self.buf, key, len, seed);
        match self.store.put(key, &self.buf, self.cfg.durability) {
            Ok(()) => {}
            Err(e) if e.is_full() => return Ok(Outcome::Full),
            Err(e) => return Err(e.into()),
        }
        self.log.append(&Ack::Put {
            key: key.to_vec(),
            len: len as u64,
            crc32c: crc32c::crc32c(&self.buf),
        })?;
        self.counts.value_bytes += len as u64;
        self.seq += 1;
        Ok(Outcome::Done)
    }

    fn put_new(&mut self) -> Result<Outcome> {
        let key = self.new_key();
        let outcome = self.write(&key)?;
        if let Outcome::Done = outcome {
            self.counts.new_puts += 1;
            self.live.push((key, self.seq));
        }
        Ok(outcome)
    }

    fn overwrite(&mut self) -> Result<Outcome> {
        let i = self.rng.gen_range(0..self.live.len());
        let key = self.live[i].0.clone();
        let outcome = self.write(&key)?;
        if let Outcome::Done = outcome {
            self.counts.overwrites += 1;
            self.live[i].1 = self.seq;
        }
        Ok(outcome)
    }

    /// Removes `live[i]` and logs it (also when the store did not have it: an earlier
    /// removal in flight at a crash may have landed).
    fn remove(&mut self, i: usize) -> Result<Outcome> {
        match self.store.remove(&self.live[i].0, self.cfg.durability) {
            Ok(_) => {}
            Err(e) if e.is_full() => return Ok(Outcome::Full),
            Err(e) => return Err(e.into()),
        }
        let (key, _) = self.live.swap_remove(i);
        self.log.append(&Ack::Del { key })?;
        self.counts.removes += 1;
        Ok(Outcome::Done)
    }

    /// The store is full: removes the oldest quarter of this thread's keys (first in, first
    /// out frees whole segments), or waits a little if it holds none.
    fn make_room(&mut self) -> Result<()> {
        let since = *self.full_since.get_or_insert_with(Instant::now);
        if since.elapsed() > FULL_STALL_LIMIT {
            return fail(format!(
                "the store stayed full for {} s: nothing could be written or removed",
                FULL_STALL_LIMIT.as_secs()
            ));
        }
        self.live
            .sort_unstable_by_key(|(_, seq)| std::cmp::Reverse(*seq));
        let n = self.live.len().div_ceil(4);
        let mut removed = 0;
        for _ in 0..n {
            // The oldest key is last after the sort, so swap_remove takes it without reordering.
            match self.remove(self.live.len() - 1)? {
                Outcome::Done => removed += 1,
                Outcome::Full => break,
            }
        }
        if removed == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

/// A stress test with its store and ack log open (the store recovered after a crash), ready to
/// [`run`](Stress::run).
pub struct Stress {
    cfg: Config,
    store: Store,
    log: AckLog,
    acked: HashMap<Vec<u8>, LastAck>,
    lines: u64,
}

/// What a stress run did: the line `hotstore stress` ends with ([`Display`](fmt::Display)).
pub struct Summary {
    threads: usize,
    elapsed_secs: f64,
    nonce: u32,
    inherited: usize,
    adopted: usize,
    total: Counts,
    relocation: hotstore::Relocation,
}

impl Stress {
    /// Opens the ack log (cutting an unfinished last line) and the store (creating it if
    /// missing, recovering it after a crash).
    pub fn open(cfg: Config) -> Result<Stress> {
        if cfg.max_value == 0 || cfg.max_value > MAX_VALUE_LEN {
            return fail(format!(
                "--max-value must be 1 to {MAX_VALUE_LEN} bytes, not {}",
                cfg.max_value
            ));
        }
        let (log, acked, lines) = AckLog::open(&cfg.ack_log)?;
        let default_lanes = StoreOptions::new(&cfg.dir).lanes;
        let mut opts = Store::builder(&cfg.dir).lanes(cfg.threads.max(default_lanes));
        if let Some(min) = cfg.direct_io_min {
            opts = opts.direct_io_min_value_bytes(usize::try_from(min).unwrap_or(usize::MAX));
        }
        if let Some(s) = cfg.segment_size {
            opts = opts.segment_size_bytes(usize::try_from(s).unwrap_or(usize::MAX));
        }
        if let Some(c) = cfg.capacity {
            opts = opts.tier(TierSpec::new(".").capacity_bytes(c));
            if let Some(lower) = &cfg.offload_to {
                opts = opts
                    .tier(TierSpec::new(lower))
                    .offload_high_water(Some(OFFLOAD_AT));
            }
        }
        let store = opts.open()?;
        Ok(Stress {
            cfg,
            store,
            log,
            acked,
            lines,
        })
    }

    /// The line `hotstore stress` starts with: how the open went (recovery) and what the ack
    /// log holds.
    pub fn opened(&self) -> String {
        let report = self.store.recovery_report();
        format!(
            "stress: opened {} in {:.1} ms: {} records recovered ({} segments from summary, {} scanned, {} torn tails); ack log has {} lines, {} keys",
            self.cfg.dir.display(),
            report.duration.as_secs_f64() * 1e3,
            report.records,
            report.segments_from_summary,
            report.segments_scanned,
            report.torn_tails.len(),
            self.lines,
            self.acked.len()
        )
    }

    /// Runs the writer threads for the configured duration, then closes the store.
    pub fn run(self) -> Result<Summary> {
        let Stress {
            cfg,
            store,
            log,
            acked,
            lines,
        } = self;
        let cfg = &cfg;
        let mut rng = match cfg.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        // Keys in the store the log never mentions: puts that were in flight (done, never
        // acknowledged) when an earlier run died. Adopted like the logged ones, oldest first, so
        // they are removed or overwritten in time instead of holding their segments forever. A
        // present key whose last ack line is `del` is never adopted: that would be a lost removal
        // for a checker to find.
        let unlogged: Vec<Vec<u8>> = store
            .range_keys(&[], None, usize::MAX)
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !acked.contains_key(k))
            .collect();
        // Fix (found by a new-user review): every 16-byte key was taken for a stress key, so a
        // run on a store holding someone's fragments overwrote and removed them. A key the log
        // never mentions is adopted only if its key and value are the shapes stress writes;
        // any other refuses the store.
        let (orphans, foreign): (Vec<Vec<u8>>, Vec<Vec<u8>>) = unlogged
            .into_iter()
            .partition(|k| key_nonce(k).is_some() && is_stress_value(&store, k));
        if let Some(first) = foreign.first() {
            return fail(format!(
                "the store holds {} keys stress did not write (e.g. {}): stress overwrites and \
                 removes the keys it finds, so it runs only on a store of its own (a new \
                 directory, or one only stress wrote)",
                foreign.len(),
                String::from_utf8_lossy(first).escape_debug()
            ));
        }
        let used: HashSet<u32> = acked
            .keys()
            .chain(&orphans)
            .filter_map(|k| key_nonce(k))
            .collect();
        let nonce = loop {
            let n: u32 = rng.gen();
            if !used.contains(&n) {
                break n;
            }
        };
        let mut shares: Vec<Vec<(Vec<u8>, u64)>> = vec![Vec::new(); cfg.threads];
        for (key, LastAck { line_no, present }) in acked {
            if present {
                let t = (fnv1a64(&key) % cfg.threads as u64) as usize;
                shares[t].push((key, line_no));
            }
        }
        let adopted = orphans.len();
        for key in orphans {
            let t = (fnv1a64(&key) % cfg.threads as u64) as usize;
            shares[t].push((key, 0));
        }
        let inherited: usize = shares.iter().map(Vec::len).sum();
        let seeds: Vec<u64> = (0..cfg.threads).map(|_| rng.gen()).collect();

        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let deadline = started + cfg.duration;
        let results: Vec<Result<Counts>> = std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .into_iter()
                .zip(seeds)
                .enumerate()
                .map(|(id, (live, seed))| {
                    let mut w = Worker {
                        id,
                        nonce,
                        store: &store,
                        log: &log,
                        cfg,
                        rng: StdRng::seed_from_u64(seed),
                        live,
                        seq: lines,
                        next_key: 0,
                        buf: Vec::new(),
                        counts: Counts::default(),
                        full_since: None,
                        long_lived: Vec::new(),
                    };
                    let stop = &stop;
                    scope.spawn(move || {
                        let r = w.run(deadline, stop).and_then(|c| {
                            w.check_long_lived()?;
                            Ok(c)
                        });
                        if r.is_err() {
                            stop.store(true, Ordering::Relaxed);
                        }
                        r
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| fail("a stress thread panicked"))
                })
                .collect()
        });
        let elapsed = started.elapsed().as_secs_f64();
        let mut total = Counts::default();
        let mut first_err: Option<Error> = None;
        for r in results {
            match r {
                Ok(c) => total.add(&c),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let relocation = store.stats().relocation;
        let closed = store.close();
        if let Some(e) = first_err {
            return Err(e);
        }
        closed?;
        Ok(Summary {
            threads: cfg.threads,
            elapsed_secs: elapsed,
            nonce,
            inherited,
            adopted,
            total,
            relocation,
        })
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (total, elapsed) = (&self.total, self.elapsed_secs);
        write!(
            f,
            "stress: {} threads, {elapsed:.1} s, nonce {:08x}, {} long-lived keys written and checked, {} keys inherited ({} unacknowledged): {} ops ({} new puts, {} overwrites, {} removes), {} of values; {} ops/s, {}/s; store full {} times; relocated {} records ({}); offloaded {} records ({})",
            self.threads,
            self.nonce,
            total.long_lived,
            self.inherited,
            self.adopted,
            total.ops(),
            total.new_puts,
            total.overwrites,
            total.removes,
            human_bytes(total.value_bytes as f64),
            human_count(total.ops() as f64 / elapsed),
            human_bytes(total.value_bytes as f64 / elapsed),
            total.full,
            self.relocation.records,
            human_bytes(self.relocation.bytes as f64),
            self.relocation.offloaded_records,
            human_bytes(self.relocation.offloaded_bytes as f64)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_describe_themselves() {
        let mut buf = Vec::new();
        fill_value(&mut buf, b"key", 21, 0x1234);
        assert_eq!(buf.len(), 21);
        assert_eq!(&buf[..8], &0x1234u64.to_le_bytes());
        let mut again = Vec::new();
        fill_value(&mut again, b"key", 21, 0x1234);
        assert_eq!(buf, again);
        fill_value(&mut again, b"kez", 21, 0x1234);
        assert_ne!(buf[8..], again[8..], "the stream depends on the key");
        fill_value(&mut again, b"key", 3, 7);
        assert_eq!(again.len(), 3);
    }

    #[test]
    fn nonces_are_recovered_from_both_key_kinds() {
        let k = FragmentKey::new(0xdead_beef, 5, 1, 0).to_bytes();
        assert_eq!(key_nonce(&k), Some(0xdead_beef));
        assert_eq!(key_nonce(b"stress-0000abcd-1-77"), Some(0xabcd));
        assert_eq!(key_nonce(b"other"), None);
    }
}
