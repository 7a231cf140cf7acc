//! How recordings are closed when something is wrong: no frame in the window (links that send
//! nothing, a sender's clock far off), a recorder that died leaving its recording `recording`,
//! rings the machine cannot hold, a slice too short to be sane. Frames are pushed by hand with
//! made-up timestamps; the tests wait for states, never for a time.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{EventPolicy, Store};
use hotstore_recorder::manifest;
use hotstore_recorder::{now_ns, Recorder, RecorderConfig, RecorderError, RecordingState};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

fn small_cfg(links: u16) -> RecorderConfig {
    let mut cfg = RecorderConfig::new(links, 64);
    cfg.pre = Duration::from_millis(50);
    cfg.post = Duration::from_millis(50);
    cfg.ring_bytes_per_link = 4096 * 64;
    cfg.commit_interval = Duration::from_millis(10);
    cfg.link_timeout = Duration::from_millis(50);
    cfg
}

/// Waits (a generous minute at most) until every recording so far is finished.
fn wait_finished(rec: &Recorder) {
    let t0 = Instant::now();
    while !rec.all_recordings_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the recording never finished"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Review: a recording in whose window no frame arrived (the sender's clock 30 s ahead on link
/// 0, nothing at all on link 1) was reported `complete`, not lossy, with no word of why.
#[test]
fn a_window_no_frame_reached_is_empty_and_says_which_links() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let rec = Recorder::start(store.clone(), small_cfg(2)).unwrap();
    let now = now_ns();
    let ahead = now + 30_000 * MS;
    let t = rec.trigger_at(now).unwrap();
    for k in 0..50u64 {
        rec.push(0, ahead + k * MS, &[7u8; 64]).unwrap();
    }
    wait_finished(&rec);
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    assert_eq!(m.recording_id, t.recording_id);
    assert_eq!(m.state, RecordingState::Empty, "{m:?}");
    assert!(m.lossy, "{m:?}");
    assert_eq!(m.silent_links, vec![0, 1]);
    let note = m
        .notes
        .iter()
        .find(|n| n.contains("no frame stamped inside the window"))
        .unwrap_or_else(|| panic!("no note: {m:?}"));
    assert!(
        note.contains("link 0 its frames were stamped from 29.9")
            && note.contains("link 1 sent no frame at all")
            && note.contains("clocks"),
        "{note}"
    );
    // What is on disk says the same.
    let on_disk = manifest::read(dir.path(), t.recording_id).unwrap();
    assert_eq!(on_disk.state, RecordingState::Empty);
    let v = hotstore_recorder::verify(&store, t.recording_id).unwrap();
    assert!(!v.complete);
    assert!(v.verdict.contains("Empty"), "{}", v.verdict);
}

/// One link of two sends nothing in the window: the recording holds the other link's frames,
/// but it is not complete and intact: lossy, and the silent link is named.
#[test]
fn a_link_that_sent_nothing_in_the_window_makes_the_recording_lossy() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let rec = Recorder::start(store.clone(), small_cfg(2)).unwrap();
    let now = now_ns();
    rec.trigger_at(now).unwrap();
    // Link 0: frames over the whole window and one past its end (which closes it).
    for k in 0..=120u64 {
        rec.push(0, now - 50 * MS + k * MS, &[7u8; 64]).unwrap();
    }
    wait_finished(&rec);
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    assert_eq!(m.state, RecordingState::Complete, "{m:?}");
    assert!(m.frames_recorded() > 0);
    assert!(m.lossy, "{m:?}");
    assert_eq!(m.silent_links, vec![1]);
}

/// Review: rings larger than the machine's memory were allocated (and touched) anyway: an
/// abort or the OOM killer. Refused before anything is allocated, naming both figures.
#[test]
fn rings_larger_than_the_available_memory_are_refused() {
    let Some(avail) = hotstore_recorder::mem::available() else {
        eprintln!("no /proc/meminfo: nothing to check");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 64);
    // Over 128 TiB: more than any machine has, and more than an x86-64 address space, so
    // that without the check the allocation fails at once (an abort) rather than touching
    // memory.
    cfg.ring_bytes_per_link = 200 << 40;
    match Recorder::start(store, cfg) {
        Err(RecorderError::Config { name, reason }) => {
            assert_eq!(name, "ring size");
            assert!(
                reason.contains(&avail.source) && reason.contains("ring_bytes_per_link"),
                "{reason}"
            );
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("200 TiB of rings accepted"),
    }
}

/// A 1 ns slice made a 0.8 s recording take 220 s to close (the committer seals every slice
/// index of the window). The library refuses slices under `MIN_SLICE`.
#[test]
fn a_slice_under_a_microsecond_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = small_cfg(1);
    cfg.slice = Duration::from_nanos(1);
    match Recorder::start(store, cfg) {
        Err(RecorderError::Config { name: "slice", .. }) => {}
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a 1 ns slice accepted"),
    }
}

/// A recording a dead recorder left `recording` (here: its manifest and run policy as a
/// killed recorder leaves them; `tests/record_cli.rs` kills a real one) is closed by the next
/// recorder's start: truncated, interrupted, the manifest's counts kept, the slices the store
/// holds sealed, its run policy released.
#[test]
fn a_recording_left_by_a_dead_recorder_is_closed_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let rec = Recorder::start(store.clone(), small_cfg(1)).unwrap();
    let now = now_ns();
    let t = rec.trigger_at(now).unwrap();
    for k in 0..=120u64 {
        rec.push(0, now - 50 * MS + k * MS, &[7u8; 64]).unwrap();
    }
    wait_finished(&rec);
    rec.finish().unwrap();
    let done = manifest::read(dir.path(), t.recording_id).unwrap();
    // As a killed recorder leaves it: state `recording`, the run's own policy still set.
    let mut left = done.clone();
    left.state = RecordingState::Recording;
    manifest::write(dir.path(), &left).unwrap();
    let policy = EventPolicy {
        expected_fragments: 0,
        incomplete_timeout_ms: 0,
    };
    store
        .set_run_policy(t.recording_id as u64, Some(policy))
        .unwrap();

    let rec = Recorder::start(store.clone(), small_cfg(1)).unwrap();
    let m = manifest::read(dir.path(), t.recording_id).unwrap();
    assert_eq!(m.state, RecordingState::Truncated, "{m:?}");
    assert!(m.interrupted, "{m:?}");
    assert_eq!(m.frames_recorded(), done.frames_recorded());
    assert_eq!(m.slices_durable, done.slices_durable);
    assert!(
        m.notes.iter().any(|n| n.contains("killed or crashed")),
        "{m:?}"
    );
    assert_eq!(
        store.event_policy(Some(t.recording_id as u64)),
        store.event_policy(None),
        "the run's own policy is released"
    );
    // Its running successor is never closed: not by itself, not by a read-back meanwhile.
    let t2 = rec.trigger_at(now_ns()).unwrap();
    assert!(hotstore_recorder::close_interrupted(&store)
        .unwrap()
        .is_empty());
    assert_eq!(
        manifest::read(dir.path(), t2.recording_id).unwrap().state,
        RecordingState::Recording
    );
    drop(rec);
}
