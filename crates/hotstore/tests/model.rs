//! Proves that random put/remove/get/range/reserve/flush/reopen/kill -9/power-cut/failed-persist sequences on a rolling, recycling store match a BTreeMap model.

use hotstore::testing::FaultMedium;
use hotstore::{Durability, FragmentKey, Store};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const SEGMENT_BYTES: usize = 64 << 10;
const MAX_VALUE: usize = 3000;

/// The key space: fragment keys of the default layout (16 bytes; several events, detectors and
/// runs so they spread over shards) and short blob keys.
fn keys() -> Vec<Vec<u8>> {
    let mut k: Vec<Vec<u8>> = Vec::new();
    for (run, event, det) in [
        (1, 0, 0),
        (1, 0, 1),
        (1, 0, 2),
        (1, 1, 0),
        (1, 1, 7),
        (1, 255, 0),
        (1, 256, 0),
        (1, u64::MAX, 3),
        (2, 0, 0),
        (2, 5, 1),
        (7, 1 << 40, 9),
        (u32::MAX, 3, u16::MAX),
    ] {
        k.push(FragmentKey::new(run, event, det, 0).to_bytes().to_vec());
    }
    for b in [
        &b"a"[..],
        b"ab",
        b"b",
        b"\x00",
        b"\x00\x01",
        b"\xff",
        b"key-17",
        b"zz\xff\x00",
    ] {
        k.push(b.to_vec());
    }
    k
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: usize,
        len: usize,
    },
    Remove {
        key: usize,
    },
    Get {
        key: usize,
    },
    Range {
        from: Bound,
        to: Option<Bound>,
        limit: usize,
    },
    ReserveCommit {
        key: usize,
        len: usize,
    },
    ReserveDrop {
        key: usize,
        len: usize,
    },
    Flush,
    Reopen,
    Crash,
    /// Persists fail from now on; a Persisted put of `key` must fail, every write after it
    /// must be refused, and a power cut then leaves exactly the model.
    FailingPersist {
        key: usize,
        len: usize,
    },
}

/// A range bound: a key of the key space, or arbitrary short bytes (may sort anywhere,
/// including after `to`).
#[derive(Debug, Clone)]
enum Bound {
    Key(usize),
    Bytes(Vec<u8>),
}

fn bound(nkeys: usize) -> impl Strategy<Value = Bound> {
    prop_oneof![
        3 => (0..nkeys).prop_map(Bound::Key),
        1 => proptest::collection::vec(any::<u8>(), 0..18).prop_map(Bound::Bytes),
    ]
}

fn op(nkeys: usize) -> impl Strategy<Value = Op> {
    let len = prop_oneof![
        2 => 0..64usize,
        2 => 64..MAX_VALUE,
        1 => Just(MAX_VALUE),
    ];
    prop_oneof![
        30 => (0..nkeys, len.clone()).prop_map(|(key, len)| Op::Put { key, len }),
        12 => (0..nkeys).prop_map(|key| Op::Remove { key }),
        8 => (0..nkeys).prop_map(|key| Op::Get { key }),
        6 => (bound(nkeys), proptest::option::of(bound(nkeys)), 0..30usize)
            .prop_map(|(from, to, limit)| Op::Range { from, to, limit }),
        6 => (0..nkeys, len.clone()).prop_map(|(key, len)| Op::ReserveCommit { key, len }),
        3 => (0..nkeys, len).prop_map(|(key, len)| Op::ReserveDrop { key, len }),
        2 => Just(Op::Flush),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
        1 => (0..nkeys, 0..MAX_VALUE).prop_map(|(key, len)| Op::FailingPersist { key, len }),
    ]
}

/// Value bytes of the `n`-th write: unique per write, so a stale version is always noticed.
fn value(n: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (n.wrapping_mul(131) as usize).wrapping_add(i * 7 + (i >> 8)) as u8)
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CrashKind {
    /// kill -9: the page cache survives.
    Process,
    /// Power cut: only what was persisted survives.
    Power,
}

struct Harness {
    keys: Vec<Vec<u8>>,
    medium: Arc<FaultMedium>,
    store: Option<Store>,
    model: BTreeMap<Vec<u8>, Vec<u8>>,
    writes: u64,
    crash: CrashKind,
}

fn open(medium: &Arc<FaultMedium>) -> Store {
    Store::builder("/model")
        .segment_size_bytes(SEGMENT_BYTES)
        .lanes(1)
        .media(vec![medium.clone()])
        .open()
        .expect("open")
}

impl Harness {
    fn new(crash: CrashKind) -> Self {
        let medium = FaultMedium::new("model");
        let store = open(&medium);
        Harness {
            keys: keys(),
            medium,
            store: Some(store),
            model: BTreeMap::new(),
            writes: 0,
            crash,
        }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store open")
    }

    fn bound(&self, b: &Bound) -> Vec<u8> {
        match b {
            Bound::Key(i) => self.keys[*i].clone(),
            Bound::Bytes(b) => b.clone(),
        }
    }

    fn apply(&mut self, op: &Op) {
        let p = Durability::Persisted;
        match op {
            Op::Put { key, len } => {
                self.writes += 1;
                let k = self.keys[*key].clone();
                let v = value(self.writes, *len);
                self.store().put(&k, &v, p).expect("put");
                self.model.insert(k, v);
            }
            Op::Remove { key } => {
                let k = &self.keys[*key];
                let was = self.store().remove(k, p).expect("remove");
                assert_eq!(was, self.model.remove(k).is_some(), "remove's answer");
            }
            Op::Get { key } => {
                let k = &self.keys[*key];
                let got = self.store().get(k).expect("get");
                assert!(
                    got.as_ref() == self.model.get(k),
                    "get {k:?}: {} instead of {}",
                    show(got.as_deref()),
                    show(self.model.get(k).map(|v| v.as_slice()))
                );
                assert_eq!(
                    self.store().value_len(k),
                    self.model.get(k).map(|v| v.len())
                );
            }
            Op::Range { from, to, limit } => {
                let from = self.bound(from);
                let to = to.as_ref().map(|t| self.bound(t));
                let got = self
                    .store()
                    .range(&from, to.as_deref(), *limit)
                    .expect("range");
                let want: Vec<(Vec<u8>, Vec<u8>)> = if to.as_ref().is_some_and(|t| *t < from) {
                    Vec::new()
                } else {
                    self.model
                        .range(from.clone()..)
                        .take_while(|(k, _)| to.as_ref().is_none_or(|t| *k < t))
                        .take(*limit)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                };
                assert!(
                    got == want,
                    "range {from:?}..{to:?} limit {limit}: {} instead of {}",
                    show_list(&got),
                    show_list(&want)
                );
                let keys = self.store().range_keys(&from, to.as_deref(), *limit);
                let want_keys: Vec<(Vec<u8>, usize)> =
                    want.iter().map(|(k, v)| (k.clone(), v.len())).collect();
                assert_eq!(keys, want_keys, "range_keys");
            }
            Op::ReserveCommit { key, len } => {
                self.writes += 1;
                let k = self.keys[*key].clone();
                let v = value(self.writes, *len);
                let mut r = self.store().reserve(&k, *len).expect("reserve");
                r.value_mut().copy_from_slice(&v);
                r.commit(p).expect("commit");
                self.model.insert(k, v);
            }
            Op::ReserveDrop { key, len } => {
                self.writes += 1;
                let k = &self.keys[*key];
                let mut r = self.store().reserve(k, *len).expect("reserve");
                r.value_mut().fill(0xee);
                drop(r);
            }
            Op::Flush => self.store().flush().expect("flush"),
            Op::Reopen => {
                self.store.take().expect("open").close().expect("close");
                self.store = Some(open(&self.medium));
                self.check_all("after reopen");
            }
            Op::Crash => {
                let snapshot = match self.crash {
                    CrashKind::Process => self.medium.process_crash(),
                    CrashKind::Power => self.medium.crash(None),
                };
                // The crashed store's own shutdown only touches the old medium.
                drop(self.store.take());
                self.medium = snapshot;
                self.store = Some(open(&self.medium));
                let report = self.store().recovery_report();
                assert!(report.skipped.is_empty(), "strict open skipped {report:?}");
                self.check_all("after crash");
            }
            Op::FailingPersist { key, len } => {
                let faults = self.medium.faults();
                let next = faults.persist_calls.load(Ordering::SeqCst) + 1;
                faults.fail_persist_from.store(next, Ordering::SeqCst);
                let k = self.keys[*key].clone();
                let r = self.store().put(&k, &value(u64::MAX, *len), p);
                assert!(
                    r.is_err(),
                    "a Persisted put was acknowledged after persist failed"
                );
                let again = self.store().put(&k, b"x", Durability::Memory);
                assert!(
                    matches!(again, Err(hotstore::Error::Poisoned(_))),
                    "a write after a failed persist answered {again:?}"
                );
                // Whatever the failed put left in memory, the device holds the model.
                let snapshot = self.medium.crash(None);
                let closed = self.store.take().expect("open").close();
                assert!(closed.is_err(), "close of a poisoned store said Ok");
                self.medium = snapshot;
                self.store = Some(open(&self.medium));
                self.check_all("after a failed persist and a power cut");
            }
        }
    }

    /// Every key of the model and nothing else, byte for byte.
    fn check_all(&self, when: &str) {
        let s = self.store();
        for k in &self.keys {
            let got = s.get(k).expect("get");
            assert!(
                got.as_ref() == self.model.get(k),
                "{when}: key {k:?} holds {} instead of {}",
                show(got.as_deref()),
                show(self.model.get(k).map(|v| v.as_slice()))
            );
        }
        let all = s.range(&[], None, usize::MAX).expect("range");
        let want: Vec<(Vec<u8>, Vec<u8>)> = self
            .model
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert!(
            all == want,
            "{when}: full range {} instead of {}",
            show_list(&all),
            show_list(&want)
        );
        assert_eq!(
            s.stats().entries,
            self.model.len() as u64,
            "{when}: entries"
        );
    }
}

/// A value for messages: its length and a hash, not its bytes.
fn show(v: Option<&[u8]>) -> String {
    match v {
        None => "nothing".into(),
        Some(v) => format!("{} bytes #{:08x}", v.len(), fnv(v)),
    }
}

fn fnv(v: &[u8]) -> u32 {
    v.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn show_list(l: &[(Vec<u8>, Vec<u8>)]) -> String {
    let items: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{k:?}={}", show(Some(v))))
        .collect();
    format!("[{}]", items.join(", "))
}

fn run(ops: &[Op], crash: CrashKind) {
    let mut h = Harness::new(crash);
    for op in ops {
        h.apply(op);
    }
    h.check_all("at the end");
    // A last crash of the final state, then a clean close and reopen.
    h.apply(&Op::Crash);
    h.apply(&Op::Reopen);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Process crashes (kill -9): every write was Persisted, so the model must match exactly.
    #[test]
    fn model_with_process_crashes(ops in proptest::collection::vec(op(keys().len()), 1..400)) {
        run(&ops, CrashKind::Process);
    }

    /// Power cuts: only persisted bytes survive; every write was Persisted, so the model must
    /// still match exactly.
    #[test]
    fn model_with_power_cuts(ops in proptest::collection::vec(op(keys().len()), 1..400)) {
        run(&ops, CrashKind::Power);
    }
}

/// Regression (shrunk from `model_with_power_cuts`): a range whose end sorts before its start
/// panicked inside `BTreeMap::range` instead of answering nothing.
#[test]
fn regression_range_with_end_before_start_is_empty() {
    let mut h = Harness::new(CrashKind::Process);
    h.apply(&Op::Put { key: 3, len: 10 });
    h.apply(&Op::Range {
        from: Bound::Key(3),
        to: Some(Bound::Key(0)),
        limit: 0,
    });
    h.apply(&Op::Range {
        from: Bound::Key(3),
        to: Some(Bound::Key(0)),
        limit: 5,
    });
}

/// Regression (found by `model_with_power_cuts`): with a limit, the merge over index shards
/// compared each key with the last one taken from the *same* shard, so larger keys of earlier
/// shards displaced smaller keys of later ones.
#[test]
fn regression_range_limit_across_shards() {
    let mut h = Harness::new(CrashKind::Process);
    let n = h.keys.len();
    for key in 0..n {
        h.apply(&Op::Put { key, len: key * 3 });
    }
    for limit in 0..=n + 1 {
        for from in 0..n {
            h.apply(&Op::Range {
                from: Bound::Key(from),
                to: None,
                limit,
            });
            h.apply(&Op::Range {
                from: Bound::Bytes(Vec::new()),
                to: Some(Bound::Key(from)),
                limit,
            });
        }
    }
}
