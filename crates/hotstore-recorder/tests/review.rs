//! Regression tests for a review of the recorder: slice parts past 65535, far-future and late
//! triggers, a full store at the stop. Frames are pushed by hand with made-up timestamps where
//! the outcome must not depend on how fast a busy machine runs the threads.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Store, TierSpec};
use hotstore_recorder::frame::Pattern;
use hotstore_recorder::source::{run_generator, GeneratorConfig};
use hotstore_recorder::{now_ns, verify, Recorder, RecorderConfig, RecorderError, RecordingState};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

/// Pushes frame `k` of `link` stamped `ts`, first waiting (at most a minute) until the link's
/// backlog is below `max_backlog` frames, so that no push is dropped however slow the writer.
fn push_paced(rec: &Recorder, link: u16, k: u64, ts: u64, max_backlog: u64) {
    let fl = rec.config().frame_len as u64;
    let t0 = Instant::now();
    while rec.sample_now().backlog_bytes >= max_backlog * fl {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the writer never caught up"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let p = Pattern::new(link);
    assert!(rec
        .push_with(link, ts, |b, _| p.fill(b, link, k, ts))
        .unwrap());
}

/// A slice with more than 65536 parts: parts past 65535 used to share one key and overwrite
/// each other while the manifest counted every frame. Now they are discarded and counted.
#[test]
fn slice_parts_beyond_u16_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 64);
    cfg.pre = Duration::from_millis(1);
    cfg.post = Duration::from_secs(100);
    cfg.slice = Duration::from_secs(10);
    cfg.max_fragment_bytes = hotstore_recorder::slice::value_len(1, 64); // one frame per part
    cfg.ring_bytes_per_link = 1 << 20;
    cfg.commit_interval = Duration::from_millis(20);
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let base = now_ns();
    let t = rec.trigger_at(base).unwrap();
    let n: u64 = 65_540;
    for k in 0..n {
        push_paced(&rec, 0, k, base + k * 1000, 8192);
    }
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    let v = verify(&store, t.recording_id).unwrap();
    eprintln!("{}", v.verdict);
    assert_eq!(m.frames_recorded(), 65_536, "parts 0..=65535 of slice 0");
    assert_eq!(
        m.frames_dropped(),
        4,
        "the frames past the last part are counted"
    );
    assert_eq!(m.frames_discarded(), 4);
    assert!(m.lossy);
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("link 0 slice 0") && n.contains("max_fragment_bytes")),
        "{:?}",
        m.notes
    );
    assert_eq!(v.links[0].frames, m.frames_recorded(), "{}", v.verdict);
    assert!(v.links[0].bad_frames.is_empty() && v.links[0].missing_slices.is_empty());
    assert!(
        !v.complete && v.verdict.contains("discarded"),
        "{}",
        v.verdict
    );
}

/// A trigger for a time the ring no longer fully holds (the reviewer's scenario, with the
/// generator): the head of its window used to be lost silently. Whatever the machine's speed,
/// every frame of the window is now stored, counted as dropped, or in the head the manifest
/// reports missing.
#[test]
fn a_late_trigger_loses_the_head_of_its_window_silently() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 1024);
    cfg.pre = Duration::from_millis(100);
    cfg.post = Duration::from_millis(100);
    cfg.ring_bytes_per_link = 64 * 1024; // 64 frames = 0.64 s at 100 frames/s
    cfg.commit_interval = Duration::from_millis(20);
    cfg.link_timeout = Duration::from_millis(200);
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        // A trigger decision that arrives 0.6 s late (window [T-0.1, T+0.1) = 20 frames).
        h.trigger_at(now_ns() - 600_000_000).unwrap()
    });
    let stop = AtomicBool::new(false);
    run_generator(
        &rec,
        &GeneratorConfig {
            links: 1,
            frame_len: 1024,
            rate_per_link: 102_400.0,
            duration: Some(Duration::from_secs_f64(2.5)),
        },
        &stop,
    )
    .unwrap();
    let t = trig.join().unwrap();
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    let v = verify(&store, t.recording_id).unwrap();
    let missing = m.links[0].head_missing_ns;
    eprintln!(
        "state {:?} lossy {} recorded {} dropped {} head missing {} ms; verify: {}",
        m.state,
        m.lossy,
        m.frames_recorded(),
        m.frames_dropped(),
        missing / MS,
        v.verdict
    );
    let missing_frames = missing.div_ceil(10 * MS);
    assert!(
        m.frames_recorded() + m.frames_dropped() + missing_frames >= 19,
        "window frames unaccounted for"
    );
    if m.frames_recorded() + m.frames_dropped() < 19 {
        assert!(m.lossy && missing > 0 && !v.complete, "{}", v.verdict);
        assert!(v.verdict.contains("no longer in its ring"), "{}", v.verdict);
    }
}

/// The same, deterministic: frames stamped 10 ms apart, pushed before the trigger, the ring
/// (64 frames, 4 of slack) reaching back only to frame 41 when the window starts at frame 10.
#[test]
fn a_late_trigger_reports_the_head_its_ring_no_longer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 1024);
    cfg.pre = Duration::from_millis(900);
    cfg.post = Duration::from_millis(100);
    cfg.ring_bytes_per_link = 64 * 1024;
    cfg.commit_interval = Duration::from_millis(20);
    cfg.link_timeout = Duration::from_secs(3600); // closed by its frames or the stop only
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let base = now_ns() - 10_000 * MS;
    let ts = |k: u64| base + k * 10 * MS;
    for k in 0..100 {
        push_paced(&rec, 0, k, ts(k), 32);
    }
    let t = rec.trigger_at(ts(100)).unwrap(); // window [ts(10), ts(110))
    assert_eq!(t.head_missing_ns, 0, "no other recording clips it");
    for k in 100..120 {
        push_paced(&rec, 0, k, ts(k), 32);
    }
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    let v = verify(&store, t.recording_id).unwrap();
    eprintln!("{}", v.verdict);
    assert_eq!(m.state, RecordingState::Complete);
    assert_eq!(m.frames_recorded(), 69, "frames 41..110");
    assert_eq!(m.links[0].head_missing_ns, ts(41) - ts(10));
    assert!(m.lossy, "the head of the window is missing");
    assert!(v.intact && !v.complete, "{}", v.verdict);
    assert!(v.verdict.contains("310.000 ms"), "{}", v.verdict);
}

/// One trigger stamped far ahead (a bad `RECORD.TRIGGER AT`, say) used to make every later
/// trigger "extend" a recording that would never hold their windows. It is refused now.
#[test]
fn a_far_future_trigger_swallows_every_later_trigger() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 1024);
    cfg.pre = Duration::from_millis(100);
    cfg.post = Duration::from_millis(100);
    cfg.ring_bytes_per_link = 64 * 1024;
    cfg.commit_interval = Duration::from_millis(20);
    cfg.link_timeout = Duration::from_secs(3600);
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let a = rec.trigger_at(u64::MAX / 2); // e.g. a mistyped AT
    assert!(
        matches!(a, Err(RecorderError::TriggerTooFarAhead { .. })),
        "{a:?}"
    );
    let msg = a.unwrap_err().to_string();
    assert!(
        msg.contains("in the future") && msg.contains("10 s"),
        "{msg}"
    );
    let b = rec.trigger_at(
        now_ns() + hotstore_recorder::recorder::MAX_TRIGGER_AHEAD.as_nanos() as u64 + 1_000 * MS,
    );
    assert!(
        matches!(b, Err(RecorderError::TriggerTooFarAhead { .. })),
        "{b:?}"
    );
    assert!(
        rec.recording_ids().is_empty(),
        "a refused trigger records nothing"
    );
    // A real trigger afterwards records its whole window.
    let base = now_ns() - 10_000 * MS;
    let ts = |k: u64| base + k * 10 * MS;
    for k in 0..40 {
        push_paced(&rec, 0, k, ts(k), 32);
    }
    let t = rec.trigger_at(ts(30)).unwrap(); // window [ts(20), ts(40))
    assert!(!t.extended);
    for k in 40..50 {
        push_paced(&rec, 0, k, ts(k), 32);
    }
    let report = rec.finish().unwrap();
    assert_eq!(report.recordings.len(), 1);
    let m = &report.recordings[0];
    assert_eq!(
        m.frames_recorded(),
        20,
        "trigger b's 20-frame window is stored"
    );
    assert!(!m.lossy && m.state == RecordingState::Complete);
}

/// A later trigger whose window starts before the recording it extends: the head before the
/// recording's start is reported (outcome, manifest, verify), not lost silently.
#[test]
fn an_extending_trigger_that_reaches_before_the_recording_reports_its_lost_head() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 1024);
    cfg.pre = Duration::from_millis(100);
    cfg.post = Duration::from_millis(100);
    cfg.ring_bytes_per_link = 64 * 1024;
    cfg.commit_interval = Duration::from_millis(20);
    cfg.link_timeout = Duration::from_secs(3600);
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let base = now_ns() - 10_000 * MS;
    let ts = |k: u64| base + k * 10 * MS;
    for k in 0..40 {
        push_paced(&rec, 0, k, ts(k), 32);
    }
    let a = rec.trigger_at(ts(30)).unwrap(); // window [ts(20), ts(40))
    let b = rec.trigger_at(ts(15)).unwrap(); // window [ts(5), ts(25)): extends, head clipped
    assert_eq!((a.head_missing_ns, b.recording_id), (0, a.recording_id));
    assert!(b.extended);
    assert_eq!(b.head_missing_ns, ts(20) - ts(5));
    for k in 40..50 {
        push_paced(&rec, 0, k, ts(k), 32);
    }
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    let v = verify(&store, a.recording_id).unwrap();
    eprintln!("{}", v.verdict);
    assert_eq!(m.frames_recorded(), 20);
    assert_eq!(m.trigger_head_missing_ns, 150 * MS);
    assert!(m.lossy && !m.notes.is_empty());
    assert!(
        !v.complete && v.verdict.contains("150.000 ms"),
        "{}",
        v.verdict
    );
}

/// A full store while stopping used to fail the writer: the recording stayed `recording` and
/// the frames pinned in DRAM were lost uncounted. Now they are counted as discarded, the
/// recording is closed truncated and lossy, and `finish` reports.
#[test]
fn a_full_store_at_the_stop_closes_the_recording_and_counts_what_it_could_not_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::builder(dir.path())
            .segment_size_bytes(256 << 10)
            .tier(TierSpec::new(".").capacity_bytes(4 << 20))
            .open()
            .unwrap(),
    );
    let links = 2u16;
    let mut cfg = RecorderConfig::new(links, 1024);
    cfg.pre = Duration::from_millis(100);
    cfg.post = Duration::from_secs(1000); // never reached: the stop truncates
    cfg.ring_bytes_per_link = 16 << 20; // holds every frame pushed: no DRAM drop
    cfg.commit_interval = Duration::from_millis(20);
    cfg.link_timeout = Duration::from_secs(3600);
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let base = now_ns() - 5_000 * MS;
    let t = rec.trigger_at(base + 100 * MS).unwrap();
    // 2 x 8000 frames of 1 KiB: four times what the store holds.
    let n = 8000u64;
    for k in 0..n {
        for link in 0..links {
            let ts = base + k * 100_000;
            let p = Pattern::new(link);
            assert!(rec
                .push_with(link, ts, |b, _| p.fill(b, link, k, ts))
                .unwrap());
        }
    }
    let report = rec
        .finish()
        .expect("a full store at the stop is reported, not an error");
    assert_eq!(report.frames_dropped, 0, "no DRAM drop");
    let m = &report.recordings[0];
    let v = verify(&store, t.recording_id).unwrap();
    eprintln!("{:?}\n{}", m.links, v.verdict);
    assert_eq!(m.state, RecordingState::Truncated);
    assert!(m.lossy);
    for l in &m.links {
        assert_eq!(l.frames_recorded + l.frames_dropped, n, "link {}", l.link);
        assert_eq!(l.frames_dropped, l.frames_discarded);
    }
    assert!(m.frames_discarded() > 0 && m.frames_recorded() > 0);
    assert!(
        m.notes.iter().any(|n| n.contains("store was full")),
        "{:?}",
        m.notes
    );
    assert!(
        v.intact,
        "what the manifest counts is stored: {}",
        v.verdict
    );
}

/// A recording's run policy (slices complete only when sealed) was never removed, and a store
/// keeps at most `hotstore::MAX_RUN_POLICIES`: past that many recordings, every trigger failed.
#[test]
fn a_finished_recording_leaves_no_run_policy_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let mut cfg = RecorderConfig::new(1, 64);
    cfg.pre = Duration::from_millis(1);
    cfg.post = Duration::from_millis(1);
    cfg.commit_interval = Duration::from_millis(20);
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let base = now_ns();
    let t = rec.trigger_at(base).unwrap();
    assert_eq!(
        store
            .event_policy(Some(t.recording_id as u64))
            .expected_fragments,
        0,
        "while recording: slices complete when sealed"
    );
    for k in 0..10u64 {
        push_paced(&rec, 0, k, base + k * MS, 1024);
    }
    let report = rec.finish().unwrap();
    assert!(!report.recordings.is_empty());
    assert_eq!(
        store.event_policy(Some(t.recording_id as u64)),
        store.event_policy(None),
        "the run's own policy is gone"
    );
}
