//! Recorder end to end: generator -> recording -> verify, trigger extension and queueing, and
//! back-pressure on a throttled medium (backlog as modelled, drops counted exactly).
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::testing::FaultMedium;
use hotstore::Store;
use hotstore_recorder::source::generator::frame_ts;
use hotstore_recorder::source::{run_generator, GeneratorConfig};
use hotstore_recorder::{verify, Recorder, RecorderConfig, RecordingState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn config(links: u16, frame_len: usize) -> RecorderConfig {
    let mut c = RecorderConfig::new(links, frame_len);
    c.pre = Duration::from_millis(300);
    c.post = Duration::from_millis(400);
    c.commit_interval = Duration::from_millis(20);
    c.sample_interval = Duration::from_millis(10);
    c.link_timeout = Duration::from_millis(200);
    c
}

fn generate(
    rec: &hotstore_recorder::RecorderHandle,
    links: u16,
    frame_len: usize,
    rate: f64,
    secs: f64,
) -> hotstore_recorder::source::GeneratorStats {
    let stop = AtomicBool::new(false);
    run_generator(
        rec,
        &GeneratorConfig {
            links,
            frame_len,
            rate_per_link: rate,
            duration: Some(Duration::from_secs_f64(secs)),
        },
        &stop,
    )
    .unwrap()
}

#[test]
fn a_generated_recording_verifies_complete_with_no_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let rec = Recorder::start(store.clone(), config(4, 5568)).unwrap();
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        h.trigger().unwrap()
    });
    let g = generate(&rec, 4, 5568, 20e6, 1.3);
    let t = trig.join().unwrap();
    assert!(!t.extended);
    let report = rec.finish().unwrap();
    assert_eq!(g.dropped, 0);
    assert_eq!(report.recordings.len(), 1);
    let m = &report.recordings[0];
    assert_eq!(m.state, RecordingState::Complete, "{m:?}");
    // 0.7 s of 4 links at 20 MB/s of 5568-byte frames: about 3593 frames per link.
    let per_link = 0.7 * 20e6 / 5568.0;
    for l in &m.links {
        let f = l.frames_recorded as f64;
        assert!(
            (f - per_link).abs() < per_link * 0.05,
            "link {}: {f} frames",
            l.link
        );
    }
    let v = verify(&store, m.recording_id).unwrap();
    assert!(v.complete, "{}", v.verdict);
    assert_eq!(v.links.len(), 4);
    for l in &v.links {
        assert!(l.gaps.is_empty() && l.bad_frames.is_empty());
        assert_eq!(l.checked_frames, l.frames);
        assert_eq!(l.frames, l.manifest_frames);
    }
    // The slice events are sealed, so a consumer can claim them.
    let claim = store
        .next_event("test", Duration::from_secs(5))
        .unwrap()
        .expect("a sealed slice event");
    assert_eq!(claim.fragment_count(), 4);
}

#[test]
fn a_trigger_during_a_recording_extends_it_and_a_later_one_queues() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path()).open().unwrap());
    let rec = Recorder::start(store.clone(), config(2, 1024)).unwrap();
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        // Explicit timestamps, given at once: whether a trigger extends a window depends on
        // them, not on when this thread runs (with `trigger()` and sleeps between the calls,
        // a loaded machine delayed the second past the first window's end).
        let t = hotstore_recorder::recorder::now_ns();
        let ms = 1_000_000;
        let a = h.trigger_at(t).unwrap();
        // Within the first window (ends 400 ms after the first): extends it.
        let b = h.trigger_at(t + 300 * ms).unwrap();
        // Past the extended window (its pre-trigger time starts after it ends): a new
        // recording.
        let c = h.trigger_at(t + 1500 * ms).unwrap();
        (a, b, c)
    });
    let _ = generate(&rec, 2, 1024, 2e6, 2.6);
    let (a, b, c) = trig.join().unwrap();
    assert!(!a.extended && b.extended && !c.extended);
    assert_eq!(a.recording_id, b.recording_id);
    assert_eq!(c.recording_id, a.recording_id + 1);
    let report = rec.finish().unwrap();
    assert_eq!(report.recordings.len(), 2);
    let first = &report.recordings[0];
    assert_eq!(first.triggers_ns.len(), 2);
    assert_eq!(first.end_ns, first.triggers_ns[1] + first.post_ns);
    for m in &report.recordings {
        let v = verify(&store, m.recording_id).unwrap();
        assert!(v.intact, "{}", v.verdict);
    }
    assert_eq!(report.recordings[0].state, RecordingState::Complete);
}

#[test]
fn on_a_slow_medium_the_backlog_grows_as_modelled_and_drops_are_counted_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let medium = FaultMedium::new("slow");
    // An 8 MB/s device under 2 links x 8 MB/s of input: the backlog grows at about 8 MB/s.
    let device = 8e6;
    medium
        .faults()
        .write_bytes_per_sec
        .store(device as u64, Ordering::SeqCst);
    let store = Arc::new(
        Store::builder(dir.path())
            .media(vec![medium.clone()])
            .segment_size_bytes(4 << 20)
            .open()
            .unwrap(),
    );
    let (links, frame, rate) = (2u16, 4000usize, 8e6);
    let mut cfg = config(links, frame);
    cfg.pre = Duration::from_millis(100);
    cfg.post = Duration::from_millis(1500);
    // 4 MB of ring per link: the pre window (0.8 MB) and about 3.2 MB of backlog.
    cfg.ring_bytes_per_link = 4_000_000;
    cfg.max_fragment_bytes = 256 << 10;
    let bound = (cfg.ring_bytes_per_link / frame as u64 * frame as u64 * links as u64) as f64;
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        h.trigger().unwrap();
    });
    let g = generate(&rec, links, frame, rate, 2.0);
    trig.join().unwrap();
    // Let the writer drain the backlog (about 8 MB at 8 MB/s).
    std::thread::sleep(Duration::from_millis(1500));
    let report = rec.finish().unwrap();
    let m = &report.recordings[0];
    assert!(m.lossy, "the bound was reached: the recording must say so");
    assert!(g.dropped > 0);
    // Drops after the window's end (the ring is still pinned while the writer drains) are
    // counted by the source but belong to no recording.
    assert!(m.frames_dropped() > 0 && m.frames_dropped() <= g.dropped);
    assert_eq!(report.frames_dropped, g.dropped);
    // Drops are exactly the gaps a readback finds, link by link.
    let v = verify(&store, m.recording_id).unwrap();
    assert!(!v.complete && !v.intact);
    for l in &v.links {
        assert!(
            l.bad_frames.is_empty() && l.missing_slices.is_empty(),
            "{l:?}"
        );
        // Inside the stored range, gaps are drops; past the last stored frame the window's
        // remaining frames were dropped too. Together: exactly the manifest's count.
        assert!(l.missing_frames <= l.manifest_dropped, "link {}", l.link);
        assert_eq!(l.frames, l.manifest_frames);
        let in_window = (0..g.frames)
            .filter(|&k| {
                let ts = frame_ts(g.t0_ns, g.period_ns, k);
                ts >= m.start_ns && ts < m.end_ns
            })
            .count() as u64;
        assert_eq!(
            l.frames + l.manifest_dropped,
            in_window,
            "link {}: every frame of the window is stored or counted as dropped",
            l.link
        );
        let span = l.last_seq.unwrap() - l.first_seq.unwrap() + 1;
        assert_eq!(span, l.frames + l.missing_frames);
    }
    // The backlog grew as modelled until it reached the bound, and never passed it.
    let t_trigger = (m.triggers_ns[0] - report.started_unix_ns) as f64 / 1e9;
    let peak = report
        .samples
        .iter()
        .map(|s| s.backlog_bytes)
        .max()
        .unwrap() as f64;
    assert!(peak <= bound, "peak {peak} over the bound {bound}");
    assert!(
        peak > 0.9 * bound,
        "peak {peak} never neared the bound {bound}"
    );
    let input = rate * links as f64;
    let pre_bytes = input * 0.1;
    let model = |t: f64| pre_bytes + (input - device) * t;
    let at = 0.4;
    let s = report
        .samples
        .iter()
        .find(|s| s.t_secs >= t_trigger + at)
        .unwrap();
    let expected = model(s.t_secs - t_trigger);
    let got = s.backlog_bytes as f64;
    assert!(
        (got - expected).abs() < 0.25 * expected,
        "backlog {got} at {at} s after the trigger, model {expected}"
    );
}

/// A small ring (64 frames of 1 KiB at 100 frames/s: 0.64 s) makes any frame held too long
/// show as a drop.
fn small_ring_recorder(dir: &std::path::Path) -> (Arc<Store>, Recorder) {
    let store = Arc::new(Store::builder(dir).open().unwrap());
    let mut cfg = config(1, 1024);
    cfg.pre = Duration::from_millis(100);
    cfg.post = Duration::from_millis(100);
    cfg.ring_bytes_per_link = 64 * 1024;
    let rec = Recorder::start(store.clone(), cfg).unwrap();
    (store, rec)
}

#[test]
fn after_a_recording_the_ring_is_released_and_the_next_trigger_gets_its_whole_window() {
    let dir = tempfile::tempdir().unwrap();
    let (store, rec) = small_ring_recorder(dir.path());
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let a = h.trigger().unwrap();
        // Long after the first recording ended (the ring turned over more than once).
        std::thread::sleep(Duration::from_millis(1500));
        let b = h.trigger().unwrap();
        (a, b)
    });
    let g = generate(&rec, 1, 1024, 102_400.0, 2.4);
    let (a, b) = trig.join().unwrap();
    assert_ne!(a.recording_id, b.recording_id);
    let report = rec.finish().unwrap();
    assert_eq!(g.dropped, 0, "an idle link must never drop");
    for m in &report.recordings {
        assert_eq!(m.state, RecordingState::Complete);
        assert!(!m.lossy);
        // 0.2 s at 100 frames/s.
        let f = m.frames_recorded();
        assert!(
            (18..=22).contains(&f),
            "recording {}: {f} frames",
            m.recording_id
        );
        assert!(verify(&store, m.recording_id).unwrap().complete);
    }
}

#[test]
fn a_trigger_for_a_future_time_records_its_window_without_drops() {
    let dir = tempfile::tempdir().unwrap();
    let (store, rec) = small_ring_recorder(dir.path());
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        // One second ahead: the frames until the window starts must be released, not held.
        h.trigger_at(hotstore_recorder::now_ns() + 1_000_000_000)
            .unwrap()
    });
    let g = generate(&rec, 1, 1024, 102_400.0, 2.0);
    trig.join().unwrap();
    let report = rec.finish().unwrap();
    assert_eq!(g.dropped, 0);
    let m = &report.recordings[0];
    assert_eq!(m.state, RecordingState::Complete);
    let f = m.frames_recorded();
    assert!((18..=22).contains(&f), "{f} frames");
    assert!(verify(&store, m.recording_id).unwrap().complete);
}
