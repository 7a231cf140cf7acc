//! Honest power cuts (torn: random unsynced sectors kept) of stores written by several threads
//! with a flusher running, cycles of reopen, kill -9 and more writes: never refused in Strict
//! mode (found in review of store format 4, which lets records written through a sync prove it).
#![allow(clippy::unwrap_used)]

use hotstore::testing::FaultMedium;
use hotstore::{Durability, RecoveryMode, Store, TierSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SEG: usize = 64 << 10;

fn open(m: &Arc<FaultMedium>, lanes: usize, bounded: bool) -> hotstore::Result<Store> {
    let mut b = Store::builder("/stress")
        .segment_size_bytes(SEG)
        .direct_io_min_value_bytes(8192)
        .lanes(lanes)
        .recovery(RecoveryMode::Strict)
        .media(vec![m.clone()]);
    if bounded {
        b = b.tier(TierSpec::new(".").capacity_bytes(40 * SEG as u64));
    }
    b.open()
}

fn workload(s: &Store, stop: &AtomicBool, seed: u64, t: usize) {
    let mut rng = StdRng::seed_from_u64(seed * 31 + t as u64);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let k = if rng.gen_bool(0.5) {
            format!("t{t}-{}", rng.gen_range(0..40))
        } else {
            format!("shared-{}", rng.gen_range(0..20))
        };
        let len = match rng.gen_range(0..100) {
            0..=59 => rng.gen_range(1..600),
            60..=89 => rng.gen_range(600..4000),
            _ => rng.gen_range(8192..20000),
        };
        let d = if rng.gen_range(0..10) == 0 {
            Durability::Persisted
        } else {
            Durability::Memory
        };
        let r = match rng.gen_range(0..10) {
            0 => s.remove(k.as_bytes(), d).map(|_| ()),
            1 => s.reserve(k.as_bytes(), len).and_then(|mut r| {
                r.value_mut().fill(n as u8);
                r.commit(d)
            }),
            _ => s.put(k.as_bytes(), &vec![n as u8; len], d),
        };
        if let Err(e) = r {
            if e.is_full() {
                continue;
            }
            return; // poisoned by a crash copy? no: the live store keeps going
        }
        if n.is_multiple_of(200) {
            std::thread::yield_now();
        }
    }
}

fn run_and_cut(
    m: &Arc<FaultMedium>,
    s: Store,
    seed: u64,
    ms: u64,
    quiescent: bool,
) -> Arc<FaultMedium> {
    let s = Arc::new(s);
    let stop = AtomicBool::new(false);
    let crashed = std::thread::scope(|scope| {
        for t in 0..3 {
            let s = &s;
            let stop = &stop;
            scope.spawn(move || workload(s, stop, seed, t));
        }
        {
            let s = &s;
            let stop = &stop;
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = s.flush();
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(ms));
        if quiescent {
            stop.store(true, Ordering::Relaxed);
            None
        } else {
            let c = m.crash(Some(seed));
            stop.store(true, Ordering::Relaxed);
            Some(c)
        }
    });
    let crashed = crashed.unwrap_or_else(|| m.crash(Some(seed)));
    drop(s);
    crashed
}

#[test]
fn honest_torn_cuts_of_busy_stores_open_strict() {
    let seeds: u64 = std::env::var("STRESS_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut tails = 0;
    for seed in 1..=seeds {
        for (lanes, bounded, quiescent) in [
            (1, false, true),
            (2, true, true),
            (1, true, false),
            (3, true, false),
        ] {
            let m = FaultMedium::new("stress");
            let s = open(&m, lanes, bounded).unwrap();
            let mut cur = run_and_cut(&m, s, seed, 40, quiescent);
            // Several cycles: reopen (cutting tails, continuing them), write, cut again;
            // every other cycle a kill -9 first.
            for cycle in 0..3u64 {
                let s = open(&cur, lanes, bounded).unwrap_or_else(|e| {
                    panic!("seed {seed} lanes {lanes} bounded {bounded} quiescent {quiescent} cycle {cycle}: refused: {e}")
                });
                tails += s.recovery_report().unsynced_tails.len();
                if cycle % 2 == 1 {
                    let killed = cur.process_crash();
                    drop(s);
                    let s = open(&killed, lanes, bounded).unwrap_or_else(|e| {
                        panic!("seed {seed} cycle {cycle} after kill: refused: {e}")
                    });
                    cur = run_and_cut(&killed, s, seed * 7 + cycle, 20, quiescent);
                } else {
                    cur = run_and_cut(&cur, s, seed * 7 + cycle, 20, quiescent);
                }
            }
            let s = open(&cur, lanes, bounded)
                .unwrap_or_else(|e| panic!("seed {seed} final: refused: {e}"));
            tails += s.recovery_report().unsynced_tails.len();
        }
    }
    eprintln!("unsynced tails cut: {tails}");
}
