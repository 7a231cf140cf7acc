//! Proves that no power cut (clean or torn), kill -9 or failing persist loses an acknowledged Persisted write or removal, or revives an older state.

use hotstore::testing::FaultMedium;
use hotstore::{Durability, Error, FragmentKey, RecoveryMode, Store};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const SEGMENT_BYTES: usize = 64 << 10;
/// Keys each writer thread owns (a key is only ever written by one thread, so its history is
/// that thread's program order).
const KEYS_PER_THREAD: usize = 24;

/// Values from this size on are direct records (written whole as blocks, header and pad
/// included: `Store::put_direct`); smaller ones take the buffered path. The plan has both.
const DIRECT_MIN: usize = 8 << 10;

fn open(medium: &Arc<FaultMedium>, mode: RecoveryMode, lanes: usize) -> hotstore::Result<Store> {
    Store::builder("/crash")
        .segment_size_bytes(SEGMENT_BYTES)
        .direct_io_min_value_bytes(DIRECT_MIN)
        .lanes(lanes)
        .recovery(mode)
        .media(vec![medium.clone()])
        .open()
}

/// Key `i` of thread `t`: fragment keys (detector = thread) and short blob keys.
fn key(t: usize, i: usize) -> Vec<u8> {
    if i % 3 == 2 {
        format!("t{t}/{i}").into_bytes()
    } else {
        FragmentKey::new(1, (i / 2) as u64, t as u16, (i % 2) as u16)
            .to_bytes()
            .to_vec()
    }
}

/// Unique value bytes for write number `n` of thread `t`.
fn value(t: usize, n: u64, len: usize) -> Vec<u8> {
    let seed = (t as u64) << 40 | n;
    (0..len)
        .map(|i| (seed.wrapping_mul(0x9E37_79B9) as usize).wrapping_add(i * 13 + (i >> 9)) as u8)
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Put,
    Remove,
    Reserve,
    Flush,
}

#[derive(Clone, Debug)]
struct Planned {
    kind: Kind,
    key: usize,
    len: usize,
    durability: Durability,
}

fn plan(seed: u64, n: usize) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let kind = match rng.gen_range(0..100) {
                0..=54 => Kind::Put,
                55..=84 => Kind::Remove,
                85..=96 => Kind::Reserve,
                _ => Kind::Flush,
            };
            let len = match rng.gen_range(0..100) {
                0..=39 => rng.gen_range(0..64),
                40..=89 => rng.gen_range(64..4000),
                90..=98 => rng.gen_range(4000..20_000),
                // Larger than a segment: gets a file of its own.
                _ => rng.gen_range(SEGMENT_BYTES..SEGMENT_BYTES + 10_000),
            };
            Planned {
                kind,
                key: rng.gen_range(0..KEYS_PER_THREAD),
                len,
                durability: if rng.gen_bool(0.5) {
                    Durability::Persisted
                } else {
                    Durability::Memory
                },
            }
        })
        .collect()
}

/// What happened to one key: `states[0]` is "never written"; `states[m]` the state after its
/// m-th operation (logged *before* the operation starts, so a snapshot can never hold a state
/// that is not listed); `acks` the ones acknowledged as Persisted, with their ack sequence.
#[derive(Default)]
struct History {
    states: Vec<Option<Arc<Vec<u8>>>>,
    acks: Vec<(usize, u64)>,
}

/// Histories of every key, and a clock that orders acknowledgements against snapshots.
struct Log {
    keys: Vec<Vec<u8>>,
    by_key: HashMap<Vec<u8>, usize>,
    hist: Vec<Mutex<History>>,
    clock: AtomicU64,
}

impl Log {
    fn new(threads: usize) -> Arc<Self> {
        let keys: Vec<Vec<u8>> = (0..threads)
            .flat_map(|t| (0..KEYS_PER_THREAD).map(move |i| key(t, i)))
            .collect();
        Arc::new(Log {
            by_key: keys.iter().cloned().zip(0..).collect(),
            hist: keys
                .iter()
                .map(|_| {
                    Mutex::new(History {
                        states: vec![None],
                        acks: Vec::new(),
                    })
                })
                .collect(),
            keys,
            clock: AtomicU64::new(0),
        })
    }

    fn intend(&self, k: usize, state: Option<Arc<Vec<u8>>>) -> usize {
        let mut h = self.hist[k].lock();
        h.states.push(state);
        h.states.len() - 1
    }

    fn ack_persisted(&self, k: usize, m: usize) {
        let at = self.clock.fetch_add(1, Ordering::SeqCst);
        self.hist[k].lock().acks.push((m, at));
    }

    /// The clock reading to take just before a snapshot: acks below it happened before.
    fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Checks a store opened from a snapshot taken at clock `before`: each key holds a state
    /// at or after its newest Persisted acknowledgement before the snapshot (exactly that
    /// state if nothing later was attempted), and no key outside the workload exists.
    fn verify(&self, s: &Store, before: u64, what: &str) {
        for (k, key) in self.keys.iter().enumerate() {
            let h = self.hist[k].lock();
            let from = h
                .acks
                .iter()
                .filter(|(_, at)| *at < before)
                .map(|(m, _)| *m)
                .max()
                .unwrap_or(0);
            let got = s
                .get(key)
                .unwrap_or_else(|e| panic!("{what}: get {key:?} failed: {e}"));
            let ok = h.states[from..]
                .iter()
                .any(|st| st.as_deref().map(|v| v.as_slice()) == got.as_deref());
            assert!(
                ok,
                "{what}: key {key:?} holds {} but its newest acknowledged Persisted state is #{from} \
                 of {} ({}); a state older than that was revived or an acknowledged one lost",
                describe(got.as_deref()),
                h.states.len() - 1,
                describe(h.states[from].as_deref().map(|v| v.as_slice())),
            );
        }
        for (k, _) in s.range_keys(&[], None, usize::MAX) {
            assert!(
                self.by_key.contains_key(&k),
                "{what}: unknown key {k:?} appeared"
            );
        }
    }
}

fn describe(v: Option<&[u8]>) -> String {
    match v {
        None => "nothing".into(),
        Some(v) => format!(
            "{} bytes (crc {:08x})",
            v.len(),
            v.iter().fold(0u32, |a, &b| a.rotate_left(5) ^ u32::from(b))
        ),
    }
}

/// Runs thread `t`'s plan against `s`, logging every intent and acknowledgement. Stops at the
/// first error and returns it with the number of operations done; `after_op` runs after each
/// successful operation (snapshots).
fn drive(
    s: &Store,
    log: &Log,
    t: usize,
    ops: &[Planned],
    mut after_op: impl FnMut(usize),
) -> (usize, Option<Error>) {
    let base = t * KEYS_PER_THREAD;
    // This thread's own view, to check answers as we go.
    let mut mine: HashMap<usize, Vec<u8>> = HashMap::new();
    for (n, op) in ops.iter().enumerate() {
        let k = base + op.key;
        let key = &log.keys[k];
        let result: hotstore::Result<()> = match op.kind {
            Kind::Put | Kind::Reserve => {
                let v = Arc::new(value(t, n as u64, op.len));
                let m = log.intend(k, Some(v.clone()));
                let r = if op.kind == Kind::Put {
                    s.put(key, &v, op.durability)
                } else {
                    s.reserve(key, v.len()).and_then(|mut r| {
                        r.value_mut().copy_from_slice(&v);
                        r.commit(op.durability)
                    })
                };
                r.map(|()| {
                    mine.insert(op.key, v.to_vec());
                    if op.durability == Durability::Persisted {
                        log.ack_persisted(k, m);
                    }
                })
            }
            Kind::Remove => {
                let m = log.intend(k, None);
                s.remove(key, op.durability).map(|was| {
                    assert_eq!(
                        was,
                        mine.remove(&op.key).is_some(),
                        "remove's answer for {key:?}"
                    );
                    if op.durability == Durability::Persisted {
                        log.ack_persisted(k, m);
                    }
                })
            }
            Kind::Flush => s.flush().map(|()| {
                // Everything this thread wrote is published, so now durable.
                for i in 0..KEYS_PER_THREAD {
                    let m = log.hist[base + i].lock().states.len() - 1;
                    log.ack_persisted(base + i, m);
                }
            }),
        };
        if let Err(e) = result {
            return (n, Some(e));
        }
        if op.kind != Kind::Flush && n % 16 == 0 {
            assert_eq!(
                s.get(key).expect("get").as_ref(),
                mine.get(&op.key),
                "read-back of {key:?}"
            );
        }
        after_op(n);
    }
    (ops.len(), None)
}

/// Reopens a snapshot and checks it.
fn check_snapshot(snap: &Arc<FaultMedium>, mode: RecoveryMode, log: &Log, before: u64, what: &str) {
    let s = open(snap, mode, 2).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    if mode == RecoveryMode::Strict {
        assert!(
            s.recovery_report().skipped.is_empty(),
            "{what}: strict open skipped damage"
        );
    }
    log.verify(&s, before, what);
    s.close()
        .unwrap_or_else(|e| panic!("{what}: close after check failed: {e}"));
}

/// Power cuts after every few operations of one writer, each snapshot reopened in Strict mode.
#[test]
fn power_cut_after_every_few_ops_one_writer() {
    for seed in 0..6u64 {
        let medium = FaultMedium::new("crash");
        let s = open(&medium, RecoveryMode::Strict, 2).unwrap();
        let log = Log::new(1);
        let ops = plan(seed, 400);
        let mut snapshots = 0;
        let (done, err) = drive(&s, &log, 0, &ops, |n| {
            if n % 2 == 1 {
                let before = log.now();
                let snap = medium.crash(None);
                check_snapshot(
                    &snap,
                    RecoveryMode::Strict,
                    &log,
                    before,
                    &format!("seed {seed} after op {n}"),
                );
                snapshots += 1;
            }
        });
        assert!(err.is_none(), "workload failed at op {done}: {err:?}");
        assert!(snapshots >= 100);
        // Whether segments rolled is read from the plan, not from the segment counts: those
        // move with the maintenance thread (files freed, pooled, prepared ahead), so a count
        // taken at the end failed once under load.
        let in_segments: usize = ops
            .iter()
            .filter(|op| matches!(op.kind, Kind::Put | Kind::Reserve) && op.len < SEGMENT_BYTES)
            .map(|op| op.len)
            .sum();
        assert!(
            in_segments > 3 * SEGMENT_BYTES,
            "the workload should roll segments: {in_segments} bytes planned in segments"
        );
        assert!(s.stats().written_bytes >= in_segments as u64);
        s.close().unwrap();
        check_snapshot(
            &medium.crash(None),
            RecoveryMode::Strict,
            &log,
            log.now(),
            "after close",
        );
    }
}

/// Two writers on their own lanes; the first takes power-cut snapshots while the second writes.
#[test]
fn power_cut_with_two_writers() {
    for seed in 0..4u64 {
        let medium = FaultMedium::new("crash");
        let s = open(&medium, RecoveryMode::Strict, 2).unwrap();
        let log = Log::new(2);
        std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                let (done, err) = drive(&s, &log, 1, &plan(seed + 100, 400), |_| {});
                assert!(err.is_none(), "writer 1 failed at op {done}: {err:?}");
            });
            let (done, err) = drive(&s, &log, 0, &plan(seed, 400), |n| {
                if n % 3 == 2 {
                    let before = log.now();
                    let snap = medium.crash(None);
                    check_snapshot(
                        &snap,
                        RecoveryMode::Strict,
                        &log,
                        before,
                        &format!("seed {seed} writer 0 op {n}"),
                    );
                }
            });
            assert!(err.is_none(), "writer 0 failed at op {done}: {err:?}");
            other.join().unwrap();
        });
        s.close().unwrap();
    }
}

/// One writer's workload (6 seeds) with a torn power cut after every third operation:
/// `check(snapshot, log, before, what)` for each, random unpersisted sectors surviving.
fn torn_power_cuts(mut check: impl FnMut(&Arc<FaultMedium>, &Log, u64, &str)) {
    for seed in 0..6u64 {
        let medium = FaultMedium::new("crash");
        let s = open(&medium, RecoveryMode::Strict, 2).expect("open");
        let log = Log::new(1);
        let ops = plan(seed + 10, 300);
        let (done, err) = drive(&s, &log, 0, &ops, |n| {
            if n % 3 == 2 {
                let before = log.now();
                let snap = medium.crash(Some(seed * 1000 + n as u64));
                check(
                    &snap,
                    &log,
                    before,
                    &format!("seed {seed} torn after op {n}"),
                );
            }
        });
        assert!(err.is_none(), "workload failed at op {done}: {err:?}");
        s.close().expect("close");
    }
}

/// Torn write-back: random unpersisted sectors survive the power cut. Reopened in Salvage mode
/// (a record torn in the middle of unpersisted ones is damage, not a tail), and no
/// acknowledged Persisted state may be lost.
#[test]
fn torn_power_cut_salvage() {
    torn_power_cuts(|snap, log, before, what| {
        check_snapshot(snap, RecoveryMode::Salvage, log, before, what);
        // A salvaged store must reopen as it was left (its summaries are right).
        let again = snap.crash(None);
        let what = format!("{what}, reopened");
        check_snapshot(&again, RecoveryMode::Strict, log, before, &what);
    });
}

/// Torn write-back reopened in Strict mode (format 3 on): a gap whose records after it do not
/// prove it was durable (design.md §7) is an unsynced tail and is cut, so the open succeeds and
/// holds every acknowledged Persisted state. Without damage Strict never refuses (format 2
/// refused where a flagged record followed a gap: its sync was under way, and the device
/// kept it and not what was before it); and whatever it opens must be right.
#[test]
fn torn_power_cut_strict() {
    let (mut opened, mut refused, mut cut) = (0, 0, 0);
    torn_power_cuts(
        |snap, log, before, what| match open(snap, RecoveryMode::Strict, 2) {
            Ok(s2) => {
                let r = s2.recovery_report();
                assert!(r.skipped.is_empty(), "{what}: strict open skipped damage");
                cut += r.unsynced_tails.len();
                log.verify(&s2, before, what);
                s2.close().unwrap();
                opened += 1;
            }
            Err(hotstore::Error::Corruption { .. }) => refused += 1,
            Err(e) => panic!("{what}: {e}"),
        },
    );
    eprintln!(
        "torn power cuts, Strict: {opened} opened ({cut} unsynced tails cut), {refused} refused"
    );
    assert!(
        cut > 0,
        "no unsynced tail was cut: the rule is not exercised"
    );
    assert_eq!(
        refused, 0,
        "{opened} opened, {refused} refused: no damage was done"
    );
}

/// kill -9 at many points: everything acknowledged, even Memory, survives; then a power cut
/// of the restarted store (which persisted nothing new) must still hold every Persisted state.
#[test]
fn process_crash_then_power_cut() {
    for seed in 0..4u64 {
        let medium = FaultMedium::new("crash");
        let s = open(&medium, RecoveryMode::Strict, 2).unwrap();
        let log = Log::new(1);
        let ops = plan(seed + 20, 300);
        let (done, err) = drive(&s, &log, 0, &ops, |n| {
            if n % 4 == 3 {
                let before = log.now();
                let killed = medium.process_crash();
                let s2 = open(&killed, RecoveryMode::Strict, 2).unwrap();
                // Memory writes survive a kill -9: every key must hold its newest state.
                for (k, key) in log.keys.iter().enumerate() {
                    let h = log.hist[k].lock();
                    assert_eq!(
                        s2.get(key).unwrap().as_deref(),
                        h.states.last().unwrap().as_deref().map(|v| v.as_slice()),
                        "seed {seed}: kill -9 after op {n}: key {key:?} lost its newest state"
                    );
                }
                // The power goes right away, or once the restarted store sealed what it
                // recovered.
                if n % 8 == 7 {
                    std::thread::sleep(std::time::Duration::from_millis(3));
                }
                let cut = killed.crash(None);
                drop(s2);
                check_snapshot(
                    &cut,
                    RecoveryMode::Strict,
                    &log,
                    before,
                    &format!("seed {seed}: kill -9 after op {n}, then power cut"),
                );
            }
        });
        assert!(err.is_none(), "workload failed at op {done}: {err:?}");
        s.close().unwrap();
    }
}

/// Persists fail from the N-th call on, for a sweep of N: the store answers errors (never a
/// panic, never an Ok for a Persisted write it could not persist), stays read-only, reads still
/// work, and a power cut right after keeps every Persisted acknowledgement.
#[test]
fn persist_failing_from_n() {
    let ops = plan(42, 300);
    // How many persist calls the whole workload makes when nothing fails.
    let total = {
        let medium = FaultMedium::new("crash");
        let s = open(&medium, RecoveryMode::Strict, 1).unwrap();
        let log = Log::new(1);
        let (done, err) = drive(&s, &log, 0, &ops, |_| {});
        assert!(err.is_none(), "clean run failed at {done}: {err:?}");
        drop(s);
        medium.faults().persist_calls.load(Ordering::SeqCst)
    };
    assert!(total > 50, "only {total} persist calls");
    let step = (total / 250).max(1);
    let mut failures_seen = 0;
    for n in (1..=total).step_by(step as usize) {
        let medium = FaultMedium::new("crash");
        let s = open(&medium, RecoveryMode::Strict, 1).unwrap();
        medium.faults().fail_persist_from.store(n, Ordering::SeqCst);
        let log = Log::new(1);
        let (done, err) = drive(&s, &log, 0, &ops, |_| {});
        let what = format!("persist failing from call {n}");
        if let Some(e) = &err {
            failures_seen += 1;
            assert!(
                matches!(e, Error::Io { .. } | Error::Poisoned(_)),
                "{what}: op {done} failed with {e}, expected the I/O error or Poisoned"
            );
        }
        // Whatever the first answer was, once a persist failed every write is refused.
        std::thread::sleep(std::time::Duration::from_millis(5));
        if s.stats().poisoned.is_some() {
            let k = &log.keys[0];
            let refused = [
                s.put(k, b"x", Durability::Memory).err(),
                s.put(k, b"x", Durability::Persisted).err(),
                s.remove(k, Durability::Memory).err(),
                s.reserve(k, 3).err(),
                s.flush().err(),
            ];
            for (i, e) in refused.iter().enumerate() {
                assert!(
                    matches!(e, Some(Error::Poisoned(_))),
                    "{what}: write #{i} after the failure answered {e:?}, not Poisoned"
                );
            }
            // Reads still work on a read-only store.
            for key in &log.keys {
                s.get(key)
                    .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
            }
        }
        let before = log.now();
        let snap = medium.crash(None);
        // The close of a poisoned store reports the failure instead of panicking.
        let closed = s.close();
        if err.is_some() {
            assert!(closed.is_err(), "{what}: close of a poisoned store said Ok");
        }
        check_snapshot(&snap, RecoveryMode::Strict, &log, before, &what);
    }
    assert!(
        failures_seen > 10,
        "only {failures_seen} runs saw a failure"
    );
}

/// Summary files fail to write: recovery scans every segment and finds the same contents.
#[test]
fn summaries_failing_to_write() {
    let medium = FaultMedium::new("crash");
    let s = open(&medium, RecoveryMode::Strict, 1).unwrap();
    // Every later summary write fails (the metadata, rewritten when a file is created, works).
    *medium.faults().fail_write_file_suffix.lock() = Some(".sum".into());
    medium.faults().fail_write_file_from.store(
        medium.faults().write_file_calls.load(Ordering::SeqCst) + 1,
        Ordering::SeqCst,
    );
    let log = Log::new(1);
    let (done, err) = drive(&s, &log, 0, &plan(5, 300), |_| {});
    assert!(err.is_none(), "workload failed at op {done}: {err:?}");
    s.close().unwrap();
    let before = log.now();
    let snap = medium.crash(None);
    let s = open(&snap, RecoveryMode::Strict, 1).unwrap();
    assert_eq!(s.recovery_report().segments_from_summary, 0);
    assert!(s.recovery_report().segments_scanned > 1);
    log.verify(&s, before, "without summaries");
    // With writes exact after a clean close: every key holds its newest state.
    for (k, key) in log.keys.iter().enumerate() {
        let h = log.hist[k].lock();
        assert_eq!(
            s.get(key).unwrap().as_deref(),
            h.states.last().unwrap().as_deref().map(|v| v.as_slice())
        );
    }
}

/// Regression: after every segment was freed and the store reopened, segment ids started over
/// at 1, a reused file got its old id back, its old records validated again, and a kill -9
/// then made a Strict open fail (or Salvage revive removed keys).
#[test]
fn regression_segment_ids_not_reused_after_all_freed() {
    for nseg in 1..6usize {
        for fresh in (10..400).step_by(9) {
            let m = FaultMedium::new("ids");
            let s = open(&m, RecoveryMode::Strict, 1).unwrap();
            let n = nseg * 60;
            for i in 0..n {
                let k = format!("k{i:05}");
                s.put(k.as_bytes(), &[1u8; 1000], Durability::Persisted)
                    .unwrap();
            }
            for i in 0..n {
                let k = format!("k{i:05}");
                assert!(s.remove(k.as_bytes(), Durability::Persisted).unwrap());
            }
            s.close().unwrap();
            let s = open(&m, RecoveryMode::Strict, 1).unwrap();
            for i in 0..fresh {
                let k = format!("n{i:05}");
                s.put(k.as_bytes(), &[2u8; 700], Durability::Persisted)
                    .unwrap();
            }
            let killed = m.process_crash();
            drop(s);
            let what = format!("{nseg} segments freed, {fresh} new records");
            for mode in [RecoveryMode::Strict, RecoveryMode::Salvage] {
                let s = open(&killed.process_crash(), mode, 1)
                    .unwrap_or_else(|e| panic!("{what}: {mode:?} open failed: {e}"));
                assert!(
                    s.range_keys(b"k", Some(b"l"), 10).is_empty(),
                    "{what}: removed keys came back"
                );
                assert_eq!(s.stats().entries, fresh as u64, "{what}");
            }
        }
    }
}

/// Regression: `remove` of a key that is already gone answered Ok(false) for a Persisted
/// removal without making the earlier Memory removal durable, so a power cut revived it.
#[test]
fn regression_persisted_remove_of_absent_key_is_durable() {
    let m = FaultMedium::new("rm");
    let s = open(&m, RecoveryMode::Strict, 1).unwrap();
    s.put(b"k", b"old", Durability::Memory).unwrap();
    // Persists the segment, and with it the Memory put above.
    s.put(b"other", b"x", Durability::Persisted).unwrap();
    assert!(s.remove(b"k", Durability::Memory).unwrap());
    // Nothing to remove any more, but the caller asked for a durable absence.
    assert!(!s.remove(b"k", Durability::Persisted).unwrap());
    let cut = m.crash(None);
    let s2 = open(&cut, RecoveryMode::Strict, 1).unwrap();
    assert_eq!(
        s2.get(b"k").unwrap(),
        None,
        "a Persisted removal was undone"
    );
    assert_eq!(s2.get(b"other").unwrap().as_deref(), Some(&b"x"[..]));
}

/// Regression (found by `tests/model.rs`): killed between writing a free header and persisting
/// it, the restarted store saw the file as free, recycled the segment whose tombstone kept the
/// file's records dead, and a power cut then revived them from the old header still on the
/// device. Recovery now persists free headers before relying on them.
#[test]
fn regression_free_header_only_in_page_cache_at_kill() {
    let m = FaultMedium::new("free");
    let s = open(&m, RecoveryMode::Strict, 1).unwrap();
    let big = vec![9u8; 40 << 10];
    // Segment A holds only `k`, B only `k2`, C `k3` and then only tombstones.
    s.put(b"k", &big, Durability::Persisted).unwrap();
    s.put(b"k2", &big, Durability::Persisted).unwrap();
    s.put(b"k3", &big, Durability::Persisted).unwrap();
    assert!(s.remove(b"k3", Durability::Persisted).unwrap());
    // The tombstone's persist succeeds; the next persist (A's free header) fails, so the free
    // header reaches the page cache only, as if the process were killed right there.
    let calls = m.faults().persist_calls.load(Ordering::SeqCst);
    m.faults()
        .fail_persist_from
        .store(calls + 2, Ordering::SeqCst);
    assert!(s.remove(b"k", Durability::Persisted).unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.stats().poisoned.is_none() {
        assert!(std::time::Instant::now() < deadline, "A was never recycled");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let killed = m.process_crash();
    drop(s);
    let s2 = open(&killed, RecoveryMode::Strict, 1).unwrap();
    assert_eq!(s2.get(b"k").unwrap(), None);
    // Let the restarted store recycle what it considers dead: C (only tombstones, and A,
    // whose records they shadow, looks free).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s2.stats().segments > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let cut = killed.crash(None);
    drop(s2);
    let s3 = open(&cut, RecoveryMode::Strict, 1).unwrap();
    assert_eq!(
        s3.get(b"k").unwrap(),
        None,
        "a Persisted removal was undone"
    );
    assert_eq!(s3.get(b"k2").unwrap().as_deref(), Some(&big[..]));
}

/// A direct put takes its lsn before its (long) write. If another record of the same key is
/// published meanwhile, the direct record, published last, is the newest in the index; it must
/// be the newest after a power cut too, so it takes a new lsn and writes its first block again
/// (`direct_rewrites`). Without that, recovery picked the other record (higher lsn).
#[test]
fn a_direct_put_overtaken_by_a_newer_record_of_its_key_wins_after_a_power_cut() {
    let medium = FaultMedium::new("overtaken");
    // Slow block writes: the direct put's write lasts milliseconds, so the small put lands
    // inside it (most rounds; the loop runs until one did).
    medium
        .faults()
        .write_bytes_per_sec
        .store(64 << 20, Ordering::SeqCst);
    let s = open(&medium, RecoveryMode::Strict, 2).unwrap();
    let big = |n: u8| vec![n; 256 << 10];
    let mut overtaken = 0;
    for round in 0..200u8 {
        std::thread::scope(|scope| {
            let a = scope.spawn(|| s.put(b"k", &big(round), Durability::Persisted));
            scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                s.put(b"k", &[round; 10], Durability::Memory).unwrap();
            });
            a.join().unwrap().unwrap();
        });
        s.flush().unwrap();
        let want = s.get(b"k").unwrap();
        let cut = open(&medium.crash(None), RecoveryMode::Strict, 2).unwrap();
        assert_eq!(
            cut.get(b"k").unwrap(),
            want,
            "round {round}: after a power cut the key holds another version than before"
        );
        cut.close().unwrap();
        overtaken = s.stats().direct_rewrites;
        if overtaken >= 3 {
            break;
        }
    }
    assert!(
        overtaken > 0,
        "no direct put was ever overtaken: the case was not tested"
    );
    s.close().unwrap();
}

/// Fix (found in review): an overtaken direct put rewrote only its first 4 KiB block, so a
/// header that crosses into the next block (a record starting 16 or 8 bytes before a block
/// boundary) kept its old lsn there under the new checksum: every read of the acknowledged
/// value failed its checksum, and a Strict reopen refused the store. A filler record puts the
/// direct record's header across the boundary each round (the lane's end is block-aligned
/// after a direct record); the rounds run until some were overtaken.
#[test]
fn an_overtaken_direct_put_whose_header_crosses_a_block_stays_readable() {
    let medium = FaultMedium::new("straddle");
    medium
        .faults()
        .write_bytes_per_sec
        .store(64 << 20, Ordering::SeqCst);
    // Segments that hold many such rounds (this file's small ones would give each direct
    // record a segment of its own, starting on a block).
    let open = |m: &Arc<FaultMedium>| {
        Store::builder("/straddle")
            .segment_size_bytes(8 << 20)
            .direct_io_min_value_bytes(DIRECT_MIN)
            .lanes(2)
            .recovery(RecoveryMode::Strict)
            .media(vec![m.clone()])
            .open()
    };
    let s = open(&medium).unwrap();
    let big = |n: u16| vec![n as u8; 256 << 10];
    let mut overtaken = 0;
    for round in 0..300u16 {
        // Record starts 4080 and 4088 bytes into a block: header bytes 16..24 (the lsn)
        // and 8..24 in the next block.
        let start_in_block = [4080usize, 4088][round as usize % 2];
        let before = s.stats().direct_rewrites;
        std::thread::scope(|scope| {
            let a = scope.spawn(|| -> hotstore::Result<()> {
                // Each on this thread's lane: a direct record ends the lane on a block
                // boundary, the filler brings it to `start_in_block`.
                s.put(b"align", &vec![1u8; DIRECT_MIN], Durability::Persisted)?;
                let filler = start_in_block - 24 - b"fill".len();
                s.put(b"fill", &vec![2u8; filler], Durability::Memory)?;
                s.put(b"k", &big(round), Durability::Persisted)
            });
            scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_micros(1500));
                s.put(b"k", &[0; 10], Durability::Memory).unwrap();
            });
            a.join().unwrap().unwrap();
        });
        if s.stats().direct_rewrites == before {
            continue;
        }
        overtaken += 1;
        assert_eq!(
            s.get(b"k").unwrap().as_deref(),
            Some(&big(round)[..]),
            "round {round}: the overtaken direct put reads back wrong"
        );
        s.flush().unwrap();
        let cut = open(&medium.crash(None))
            .unwrap_or_else(|e| panic!("round {round}: no Strict reopen after a power cut: {e}"));
        assert_eq!(cut.get(b"k").unwrap().as_deref(), Some(&big(round)[..]));
        cut.close().unwrap();
        if overtaken >= 4 {
            break;
        }
    }
    assert!(
        overtaken > 0,
        "no direct put was ever overtaken: the case was not tested"
    );
    s.close().unwrap();
}

/// A direct record is on the medium, header and all, before its publish: if the publish is
/// refused (a late fragment of an acknowledged event), its header is zeroed and persisted, so
/// a power cut does not bring the refused put back.
#[test]
fn a_refused_direct_put_is_not_found_after_a_power_cut() {
    let medium = FaultMedium::new("refused");
    let s = open(&medium, RecoveryMode::Strict, 1).unwrap();
    s.set_event_policy(hotstore::EventPolicy::expecting(1))
        .unwrap();
    let first = FragmentKey::new(1, 7, 0, 0).to_bytes();
    s.put(&first, b"small", Durability::Persisted).unwrap();
    let claim = s
        .next_event("c", std::time::Duration::from_secs(600))
        .unwrap()
        .expect("the event is ready");
    claim
        .ack_with(hotstore::Ack::Remove, Durability::Persisted)
        .unwrap();
    let late = FragmentKey::new(1, 7, 1, 0).to_bytes();
    let r = s.put(&late, &vec![9u8; 4 * DIRECT_MIN], Durability::Persisted);
    assert!(matches!(r, Err(Error::LateFragment { .. })), "{r:?}");
    // Nothing written after it (a later record would overwrite its header anyway).
    for snap in [medium.process_crash(), medium.crash(None)] {
        let s2 = open(&snap, RecoveryMode::Strict, 1).unwrap();
        assert!(
            s2.get(&late).unwrap().is_none(),
            "the refused put came back"
        );
        s2.close().unwrap();
    }
    s.close().unwrap();
}

/// Fix (found in review): a late fragment taking the direct path was refused only at
/// publish, after its blocks (a valid header with a fresh lsn) were written; a kill before
/// the header was zeroed left a record the reopen kept (newer than the event's removal),
/// bringing the acknowledged event back. It is now refused before anything is written.
#[test]
fn a_late_direct_fragment_is_refused_before_it_is_written() {
    let m = FaultMedium::new("late-direct");
    let s = open(&m, RecoveryMode::Strict, 1).unwrap();
    let big = vec![7u8; 4 * DIRECT_MIN];
    let key = |det: u16| FragmentKey::new(1, 5, det, 0).to_bytes();
    s.put(&key(0), &big, Durability::Persisted).unwrap();
    let c = s
        .next_event("c", std::time::Duration::from_secs(30))
        .unwrap()
        .unwrap();
    c.ack(hotstore::Ack::Remove).unwrap();
    let written = || m.faults().block_bytes_written.load(Ordering::SeqCst);
    let before = written();
    let late = s.put(&key(1), &big, Durability::Persisted);
    assert!(matches!(late, Err(Error::LateFragment { .. })), "{late:?}");
    assert_eq!(
        written(),
        before,
        "the refused fragment's blocks were written"
    );
    let image = m.process_crash();
    std::mem::forget(s);
    let s = open(&image, RecoveryMode::Strict, 1).unwrap();
    assert!(s.event(&hotstore::EventId::new(1, 5)).unwrap().is_empty());
}
