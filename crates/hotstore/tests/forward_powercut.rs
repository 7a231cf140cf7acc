//! Copies forward under crashes (twenty-first session's campaign): a bounded store with values up to a segment, removals and re-puts of removed
//! keys (so tombstones are copied forward by relocation), a stream of small events acknowledged
//! Remove or Keep among them (so event removals and keep marks are copied too: 570 and 330 in
//! 16 seeds, beside 2204 tombstones), power cuts (FaultMedium::crash) and
//! kill -9 restarts (FaultMedium::process_crash) at many points; every Persisted
//! acknowledgement must hold after each, and no removed key may come back.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::testing::FaultMedium;
use hotstore::{Durability, RecoveryMode, Store, TierSpec};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per event: its fragments (key, value), or `None` once removed.
type EventModel = BTreeMap<u64, Option<Vec<(Vec<u8>, Vec<u8>)>>>;

const SEG: usize = 64 << 10;

fn open(m: &Arc<FaultMedium>, segs: u64) -> Store {
    open_in(m, segs, RecoveryMode::Strict)
}

fn open_in(m: &Arc<FaultMedium>, segs: u64, mode: RecoveryMode) -> Store {
    Store::builder("/fwd")
        .segment_size_bytes(SEG)
        .lanes(2)
        .recovery(mode)
        .media(vec![m.clone()])
        .tier(TierSpec::new(".").capacity_bytes(segs * SEG as u64))
        .open()
        .expect("open")
}

/// The store as a power cut of `m` now would leave it, reopened (strict).
fn after_power_cut(m: &Arc<FaultMedium>, segs: u64) -> Store {
    open(&m.crash(None), segs)
}

/// kill -9 of the process holding `s`: what it left on `m`, reopened in place of both.
fn after_kill(m: Arc<FaultMedium>, s: Store, segs: u64) -> (Arc<FaultMedium>, Store) {
    let killed = m.process_crash();
    drop(s);
    let s = open(&killed, segs);
    (killed, s)
}

fn value(k: u32, gen: u32, len: usize) -> Vec<u8> {
    let mut x = (k as u64) << 32 | gen as u64;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

/// Every key of `model` and every event of `events` as it must be, and nothing else stored.
fn check(s: &Store, model: &BTreeMap<u32, Option<Vec<u8>>>, events: &EventModel, what: &str) {
    check_events(s, events, what);
    let fragments: u64 = events.values().flatten().map(|f| f.len() as u64).sum();
    let mut live = 0;
    for (k, v) in model {
        let got = s.get(&k.to_le_bytes()).unwrap();
        match (v, &got) {
            (None, Some(g)) => panic!("{what}: key {k} was removed but is back (len {})", g.len()),
            (Some(v), None) => panic!("{what}: key {k} lost (len {})", v.len()),
            (Some(v), Some(g)) => assert!(v == g, "{what}: key {k} differs"),
            (None, None) => {}
        }
        live += v.is_some() as u64;
    }
    assert_eq!(s.stats().entries, live + fragments, "{what}: entries");
}

/// Every event of `model` as it must be: kept ones whole, removed ones gone.
fn check_events(s: &Store, model: &EventModel, what: &str) {
    use hotstore::EventId;
    for (e, want) in model {
        let mut got = s.event(&EventId::new(1, *e)).unwrap();
        got.sort();
        match want {
            None => assert!(
                got.is_empty(),
                "{what}: removed event {e} came back ({} fragments)",
                got.len()
            ),
            Some(w) => assert!(
                &got == w,
                "{what}: kept event {e}: {} of {} fragments match",
                got.len(),
                w.len()
            ),
        }
    }
}

/// Claims the next ready event, which must be `e`, and draws whether to keep it (3 in 10).
fn claim_next(s: &Store, rng: &mut rand::rngs::StdRng, e: u64) -> (hotstore::Claim, bool) {
    let claim = s
        .next_event("c", std::time::Duration::from_secs(600))
        .unwrap()
        .expect("ready event");
    assert_eq!(claim.event(), &hotstore::EventId::new(1, e));
    (claim, rng.gen_bool(0.3))
}

/// One small event beside the key-value workload: two fragments, claimed and acknowledged
/// Remove (an event-removal record) or Keep (a keep mark); now and then a kept event is
/// removed fragment by fragment (tombstones). Its records land among the key-value
/// workload's tombstones, and are copied forward with them.
fn event_step(s: &Store, rng: &mut rand::rngs::StdRng, e: u64, model: &mut EventModel) {
    use hotstore::{Ack, FragmentKey};
    let d = Durability::Persisted;
    let mut frags = Vec::new();
    for det in 0..2u16 {
        let k = FragmentKey::new(1, e, det, 0).to_bytes().to_vec();
        let v = value(e as u32, 1000 + det as u32, rng.gen_range(16..2048));
        match s.put(&k, &v, d) {
            Ok(()) => frags.push((k, v)),
            Err(err) if err.is_full() => break,
            Err(err) => panic!("fragment put: {err}"),
        }
    }
    if frags.len() < 2 {
        for (k, _) in &frags {
            s.remove(k, d).unwrap();
        }
        return;
    }
    let (claim, keep) = claim_next(s, rng, e);
    claim
        .ack_with(if keep { Ack::Keep } else { Ack::Remove }, d)
        .unwrap();
    frags.sort();
    model.insert(e, keep.then_some(frags));
    if rng.gen_bool(0.2) {
        let kept: Vec<u64> = model
            .iter()
            .filter(|(_, f)| f.is_some())
            .map(|(e, _)| *e)
            .collect();
        if let Some(&old) = kept.get(rng.gen_range(0..kept.len().max(1))) {
            for (k, _) in model[&old].clone().unwrap() {
                s.remove(&k, d).unwrap();
            }
            model.insert(old, None);
        }
    }
}

fn run(seed: u64, segs: u64, ops: usize) -> (u64, u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut medium = FaultMedium::new("fwd");
    let mut s = open(&medium, segs);
    s.set_event_policy(hotstore::EventPolicy::expecting(2))
        .unwrap();
    let mut events: EventModel = BTreeMap::new();
    // Its own stream: the key-value workload stays the one each seed was chosen for.
    let mut event_rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xE7E7);
    let mut model: BTreeMap<u32, Option<Vec<u8>>> = BTreeMap::new();
    let mut live: Vec<u32> = Vec::new();
    let mut removed: Vec<u32> = Vec::new();
    let mut next = 0u32;
    let mut gen = 0u32;
    let mut remove_full = 0u64;
    let mut cuts = 0u64;
    let d = Durability::Persisted;
    for op in 0..ops {
        if op % 5 == 0 {
            event_step(&s, &mut event_rng, op as u64 + 1, &mut events);
        }
        let r: f64 = rng.gen();
        let len = (2f64.powf(rng.gen_range(4.0..16.05))) as usize;
        gen += 1;
        let target_live: usize = std::env::var("HC_LIVE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(120);
        // Live data is kept under the guarantee (less the largest value), where a put that
        // finds no group to move has its removals copied forward.
        let over = {
            let st = s.stats();
            st.live_bytes + len as u64 > st.guaranteed_live_bytes.saturating_sub(SEG as u64)
        };
        let k = if live.len() < 4 || (!over && live.len() < target_live && r < 0.5) {
            if !removed.is_empty() && rng.gen_bool(0.15) {
                removed.swap_remove(rng.gen_range(0..removed.len()))
            } else {
                next += 1;
                next
            }
        } else if r < 0.55 && !over {
            live[rng.gen_range(0..live.len())]
        } else {
            let i = rng.gen_range(0..live.len());
            let k = live[i];
            match s.remove(&k.to_le_bytes(), d) {
                Ok(_) => {
                    live.swap_remove(i);
                    removed.push(k);
                    model.insert(k, None);
                }
                Err(e) if e.is_full() => remove_full += 1,
                Err(e) => panic!("remove: {e}"),
            }
            continue;
        };
        let v = value(k, gen, len);
        match s.put(&k.to_le_bytes(), &v, d) {
            Ok(()) => {
                if !matches!(model.get(&k), Some(Some(_))) {
                    live.push(k);
                }
                model.insert(k, Some(v));
            }
            Err(e) if e.is_full() => {
                // Make room: remove a quarter of the live keys.
                for _ in 0..live.len().div_ceil(4) {
                    let i = rng.gen_range(0..live.len());
                    let k = live[i];
                    match s.remove(&k.to_le_bytes(), d) {
                        Ok(_) => {
                            live.swap_remove(i);
                            removed.push(k);
                            model.insert(k, None);
                        }
                        Err(e) if e.is_full() => {
                            remove_full += 1;
                            break;
                        }
                        Err(e) => panic!("remove: {e}"),
                    }
                }
            }
            Err(e) => panic!("put: {e}"),
        }
        if op % 7 == 3 {
            let s2 = after_power_cut(&medium, segs);
            check(
                &s2,
                &model,
                &events,
                &format!("seed {seed} op {op}: power cut"),
            );
            drop(s2);
            cuts += 1;
        }
        if op % 11 == 5 && std::env::var_os("HC_TORN").is_some() {
            let snap = medium.crash(Some(seed * 100_000 + op as u64));
            let s2 = open_in(&snap, segs, RecoveryMode::Salvage);
            check(
                &s2,
                &model,
                &events,
                &format!("seed {seed} op {op}: torn power cut"),
            );
            s2.close().unwrap();
            let again = snap.crash(None);
            let s3 = open(&again, segs);
            check(
                &s3,
                &model,
                &events,
                &format!("seed {seed} op {op}: torn power cut, reopened"),
            );
            drop(s3);
        }
        if op % 53 == 20 {
            (medium, s) = after_kill(medium, s, segs);
            check(
                &s,
                &model,
                &events,
                &format!("seed {seed} op {op}: kill -9"),
            );
            // and a power cut right after the restart
            let s2 = after_power_cut(&medium, segs);
            check(
                &s2,
                &model,
                &events,
                &format!("seed {seed} op {op}: kill -9 then power cut"),
            );
            drop(s2);
        }
    }
    check(&s, &model, &events, "end");
    let moved = s.stats().relocation.records;
    let forwarded = s.stats().relocation.forwarded_records;
    s.close().unwrap();
    eprintln!("seed {seed}: {cuts} power cuts, {moved} records relocated ({forwarded} copied forward), {remove_full} removals found the store full");
    (remove_full, moved)
}

/// The seeds to run: `HC_SEED0` (default 0) and the `HC_SEEDS` after it (default 4).
fn seed_range() -> (u64, u64) {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    (var("HC_SEED0", 0), var("HC_SEEDS", 4))
}

/// `HC_SEEDS` and `HC_SEED0` run a longer campaign (904 seeds found nothing before the event
/// stream was added). Whether a seed copies anything depends on the maintenance thread's
/// timing (1 to 3 of the 4 default seeds), so the count is printed, not asserted.
#[test]
fn forward_power_cuts() {
    let (first, seeds) = seed_range();
    let mut full = 0;
    for seed in first..first + seeds {
        full += run(seed, 24, 3000).0;
    }
    eprintln!("total removals full: {full}");
}

/// Events: two fragments each, acknowledged Remove (one event-removal record) or Keep (a keep
/// mark); kept events later removed fragment by fragment (tombstones), on a full bounded store,
/// so event removals, marks and tombstones get copied forward; power cuts and kill -9s.
fn run_events(seed: u64, segs: u64, ops: usize) -> u64 {
    use hotstore::{Ack, EventPolicy, FragmentKey};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut medium = FaultMedium::new("fwd-ev");
    let mut s = open(&medium, segs);
    s.set_event_policy(EventPolicy::expecting(2)).unwrap();
    let d = Durability::Persisted;
    // event -> Some(fragments) while kept and present, None once removed (either way)
    let mut model: EventModel = BTreeMap::new();
    let mut kept: Vec<u64> = Vec::new();
    let mut full = 0u64;
    for op in 0..ops {
        let e = op as u64 + 1;
        let mut frags = Vec::new();
        let mut ok = true;
        for det in 0..2u16 {
            let len = (2f64.powf(rng.gen_range(4.0..15.3))) as usize;
            let k = FragmentKey::new(1, e, det, 0).to_bytes().to_vec();
            let v = value(e as u32, det as u32, len);
            match s.put(&k, &v, d) {
                Ok(()) => frags.push((k, v)),
                Err(err) if err.is_full() => {
                    ok = false;
                    break;
                }
                Err(err) => panic!("put: {err}"),
            }
        }
        if !ok {
            // Full: remove the fragments of this event and of the oldest kept events.
            for (k, _) in &frags {
                match s.remove(k, d) {
                    Ok(_) => {}
                    Err(err) if err.is_full() => full += 1,
                    Err(err) => panic!("remove: {err}"),
                }
            }
            let n = kept.len().div_ceil(3);
            for ev in kept.drain(..n) {
                let frs = model.get(&ev).cloned().flatten().unwrap_or_default();
                let mut all = true;
                for (k, _) in &frs {
                    match s.remove(k, d) {
                        Ok(_) => {}
                        Err(err) if err.is_full() => {
                            full += 1;
                            all = false;
                        }
                        Err(err) => panic!("remove: {err}"),
                    }
                }
                assert!(all, "seed {seed}: a removal found the store full");
                model.insert(ev, None);
            }
            continue;
        }
        let (claim, keep) = claim_next(&s, &mut rng, e);
        match claim.ack_with(if keep { Ack::Keep } else { Ack::Remove }, d) {
            Ok(()) => {}
            Err(err) if err.is_full() => panic!("seed {seed} op {op}: ack found the store full"),
            Err(err) => panic!("ack: {err}"),
        }
        if keep {
            frags.sort();
            model.insert(e, Some(frags));
            kept.push(e);
        } else {
            model.insert(e, None);
        }
        if op % 7 == 3 {
            let s2 = after_power_cut(&medium, segs);
            check_events(
                &s2,
                &model,
                &format!("events seed {seed} op {op}: power cut"),
            );
            drop(s2);
        }
        if op % 53 == 20 {
            (medium, s) = after_kill(medium, s, segs);
            check_events(&s, &model, &format!("events seed {seed} op {op}: kill -9"));
        }
    }
    check_events(&s, &model, "end");
    let forwarded = s.stats().relocation.forwarded_records;
    s.close().unwrap();
    eprintln!("events seed {seed}: {forwarded} records copied forward");
    full
}

/// `HC_SEEDS` and `HC_SEED0` run a longer campaign (553 seeds found nothing). Since copies are
/// made only by requests for room that find no group (twenty-second session), this workload
/// no longer reaches them (0 copies in 240 seeds): it checks events under power cuts on a
/// full store. Copied event removals and marks are `forward_power_cuts`' (its event stream).
#[test]
fn forward_events_power_cuts() {
    let (first, seeds) = seed_range();
    for seed in first..first + seeds {
        let full = run_events(seed, 24, 1500);
        eprintln!("events seed {seed}: removals full {full}");
    }
}
