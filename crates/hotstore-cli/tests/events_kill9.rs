//! Proves the event lifecycle survives SIGKILL at random moments: `hotstore minidaq` (readout and collectors acknowledging Remove/Keep, every acknowledgement logged) is killed over and over; after each kill no removed event comes back, kept events stay whole and KEPT, no event is ever half removed, and every event not acknowledged is offered again.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Durability, Error, EventId, EventState, FragmentKey, Store};
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const DETECTORS: u16 = 3;

#[derive(Default)]
struct Log {
    /// Fragment key → length, per event.
    puts: HashMap<Vec<u8>, Vec<(Vec<u8>, u64)>>,
    removed: HashSet<Vec<u8>>,
    kept: HashSet<Vec<u8>>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn read_log(path: &Path) -> Log {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut log = Log::default();
    // A kill can cut the last line: it was never acknowledged.
    let complete = text.rfind('\n').map_or("", |p| &text[..p]);
    for line in complete.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["put", key, len] => {
                let key = unhex(key);
                log.puts
                    .entry(key[..12].to_vec())
                    .or_default()
                    .push((key, len.parse().unwrap()));
            }
            ["removed", e] => {
                log.removed.insert(unhex(e));
            }
            ["kept", e] => {
                log.kept.insert(unhex(e));
            }
            _ => panic!("bad ack log line `{line}`"),
        }
    }
    log
}

/// True if the store refuses a new fragment of `event` as late (it was acknowledged).
fn refuses_late(store: &Store, event: &[u8]) -> bool {
    let id = EventId::from_prefix(event);
    let (run, ev) = id.run_event().unwrap();
    let probe = FragmentKey::new(run, ev, 999, 0).to_bytes();
    match store.put(&probe, b"probe", Durability::Memory) {
        Err(Error::LateFragment { .. }) => true,
        Ok(()) => panic!("a fragment for {id} was accepted, so it was not acknowledged"),
        Err(e) => panic!("probe of {id}: {e}"),
    }
}

fn check(dir: &Path, log: &Log, round: usize) {
    let store = Store::builder(dir)
        .create_if_missing(false)
        .open()
        .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
    assert_eq!(
        store.stats().events.claimed,
        0,
        "claims do not survive a crash"
    );
    for e in &log.removed {
        assert!(
            store.event(&EventId::from_prefix(e)).unwrap().is_empty(),
            "round {round}: removed event came back"
        );
        assert!(refuses_late(&store, e));
    }
    for e in &log.kept {
        let id = EventId::from_prefix(e);
        let info = store.event_info(&id).expect("kept event lost");
        assert_eq!(info.state, EventState::Kept, "round {round}: {id}");
        assert_eq!(
            info.fragments,
            u32::from(DETECTORS),
            "round {round}: kept {id} not whole"
        );
    }
    for (e, frags) in &log.puts {
        let id = EventId::from_prefix(e);
        let stored = store.event(&id).unwrap();
        let present = frags
            .iter()
            .filter(|(k, len)| {
                stored.iter().any(|(sk, v)| {
                    sk == k
                        && v.len() as u64 == *len
                        && v[..16.min(v.len())] == k[..16.min(v.len())]
                })
            })
            .count();
        if present == 0 {
            // Gone: only an acknowledged Remove (perhaps not logged yet) may do that.
            assert!(
                log.removed.contains(e) || refuses_late(&store, e),
                "round {round}: {id} lost"
            );
        } else {
            assert_eq!(present, frags.len(), "round {round}: event {id} half there");
            if !log.kept.contains(e) {
                let info = store.event_info(&id).unwrap();
                match info.state {
                    EventState::Kept => {} // a Keep in flight at the kill
                    EventState::Ready => assert_eq!(info.fragments, u32::from(DETECTORS)),
                    EventState::Open => assert!(info.fragments < u32::from(DETECTORS)),
                    EventState::Claimed => panic!("claimed after reopen"),
                    EventState::Poisoned => panic!("poisoned after reopen (never enabled)"),
                }
            }
        }
    }
    store.close().unwrap();
}

fn minidaq(dir: &Path, log: &Path, duration: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hotstore"));
    c.args(["minidaq", "--mode", "parallel", "--durability", "memory"])
        .args([
            "--detectors",
            &DETECTORS.to_string(),
            "--fragment-size",
            "3000",
        ])
        .args(["--fragment-distro", "poisson", "--acceptance", "0.05"])
        .args([
            "--capacity",
            "4GiB",
            "--duration",
            duration,
            "--json",
            "--no-limit",
        ])
        .arg("--store")
        .arg(dir)
        .arg("--reuse-store")
        .arg("--ack-log")
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

#[test]
fn minidaq_killed_at_random_moments_never_loses_or_revives_an_event() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let log = tmp.path().join("acks.log");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xe7e7);
    // The store exists before the first kill (which may land before minidaq creates it).
    Store::builder(&dir).open().unwrap().close().unwrap();
    for round in 0..10 {
        let mut child = minidaq(&dir, &log, "60").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.gen_range(700..1500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        check(&dir, &read_log(&log), round);
    }
    let parsed = read_log(&log);
    assert!(
        parsed.removed.len() > 50 && !parsed.kept.is_empty(),
        "the kills left too little work to check ({} removed, {} kept)",
        parsed.removed.len(),
        parsed.kept.len()
    );
    // An uncut run on the same store completes and adds no damage.
    let status = minidaq(&dir, &log, "0.5").status().unwrap();
    assert!(status.success(), "final run: {status}");
    check(&dir, &read_log(&log), 99);
}
