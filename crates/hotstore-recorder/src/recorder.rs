//! The recorder: link rings, triggers, writer threads and the committer.
//!
//! Data path: producers push frames into their link's [`LinkRing`]. A trigger at `T` creates a
//! recording with the window `[T - pre, T + post)` and pins every idle link's ring at the window
//! start. Each writer thread owns a subset of the links; it copies pinned frames into slice
//! buffers ([`SliceBuilder`]), stores each finished slice as one fragment at `Memory`
//! durability, and moves the ring's pin past the frames it copied. The committer thread, every
//! `commit_interval`, takes a snapshot of what the writers stored, seals the slice events that
//! every link has finished, makes everything durable with one `Store::flush` (group commit: the
//! writers never wait for a sync, so writing and syncing overlap), and then replaces the
//! manifests with the snapshot. A manifest therefore never claims more than is durable.
//!
//! A trigger while a recording is still being written extends it when its window starts
//! before the recording's end; otherwise it queues a new recording that starts where the
//! previous one ends (no frame is stored twice). Any number of recordings can be queued; their
//! frames wait pinned in the rings.

use crate::error::{RecorderError, Result};
use crate::manifest::{self, LinkManifest, Manifest, RecordingState};
use crate::ring::LinkRing;
use crate::slice::{self, SliceBuilder};
use hotstore::{Durability, EventId, EventPolicy, Store, WriteOptions};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shortest slice a recorder takes (the command line asks more: at least a 4 KiB block
/// of frames per link, see `hotstore record --slice`). The committer seals every slice index
/// of a window, so a window of `w` seconds costs `w / slice` seals: a 1 ns slice made a 0.8 s
/// recording take 220 s to close.
pub const MIN_SLICE: Duration = Duration::from_micros(1);
/// Most links a recorder takes.
pub const MAX_LINKS: u16 = 4096;
/// Frames a writer copies from one link before it looks at the next.
const BATCH_FRAMES: u64 = 512;
/// How far in the future a trigger time may be. A later one is refused
/// ([`RecorderError::TriggerTooFarAhead`]): a trigger stamped hours ahead (a mistyped
/// `RECORD.TRIGGER AT`) would make every later trigger extend a recording that records
/// nothing of their windows.
pub const MAX_TRIGGER_AHEAD: Duration = Duration::from_secs(10);
/// Most samples a recorder keeps: when the list is full, every other sample is dropped and
/// from then on only every second one is kept (the interval doubles), so a long run keeps its
/// whole time range at a coarser step in bounded memory (16384 samples, about 1 MiB).
pub const MAX_SAMPLES: usize = 16384;
/// Parts a slice of one link can have: the part is the 16-bit `component` of the key. Frames
/// of a slice beyond them are discarded and counted (see `step`).
const MAX_PARTS: u32 = u16::MAX as u32 + 1;

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// How a recorder is set up.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Number of links (0..links are the link ids).
    pub links: u16,
    /// Bytes per frame (every frame of every link).
    pub frame_len: usize,
    /// Pre-trigger window.
    pub pre: Duration,
    /// Post-trigger window.
    pub post: Duration,
    /// DRAM of each link's ring, in bytes: it must hold the pre-trigger window, and what it
    /// holds beyond that is the backlog allowance before frames are dropped.
    pub ring_bytes_per_link: u64,
    /// Length of a time slice (one event per slice).
    pub slice: Duration,
    /// Largest slice fragment value; a slice with more frames is stored in parts.
    pub max_fragment_bytes: usize,
    /// Writer threads.
    pub writers: usize,
    /// Durability a commit guarantees before the manifest claims the data.
    pub durability: Durability,
    /// How often the committer makes stored slices durable and replaces the manifests.
    pub commit_interval: Duration,
    /// How often input, output and backlog are sampled.
    pub sample_interval: Duration,
    /// A link that sends nothing for this long after a recording's end is closed for it.
    pub link_timeout: Duration,
}

impl RecorderConfig {
    /// Defaults for `links` links of `frame_len`-byte frames: 1 s before, 2 s after, 10 ms
    /// slices, 64 MiB of ring per link, 2 writers, Persisted.
    pub fn new(links: u16, frame_len: usize) -> Self {
        RecorderConfig {
            links,
            frame_len,
            pre: Duration::from_secs(1),
            post: Duration::from_secs(2),
            ring_bytes_per_link: 64 << 20,
            slice: Duration::from_millis(10),
            max_fragment_bytes: 8 << 20,
            writers: 2,
            durability: Durability::Persisted,
            commit_interval: Duration::from_millis(100),
            sample_interval: Duration::from_millis(50),
            link_timeout: Duration::from_secs(1),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |name, reason: String| Err(RecorderError::Config { name, reason });
        if self.links == 0 || self.links > MAX_LINKS {
            return bad("links", format!("{} (1 to {MAX_LINKS})", self.links));
        }
        if self.frame_len == 0 || self.frame_len > crate::frame::MAX_FRAME_LEN {
            return bad(
                "frame size",
                format!(
                    "{} bytes (1 to {})",
                    self.frame_len,
                    crate::frame::MAX_FRAME_LEN
                ),
            );
        }
        if self.ring_bytes_per_link / (self.frame_len as u64) < 16 {
            return bad(
                "ring size",
                format!(
                    "{} bytes per link holds fewer than 16 frames of {} bytes; give the rings more DRAM",
                    self.ring_bytes_per_link, self.frame_len
                ),
            );
        }
        if self.slice < MIN_SLICE {
            return bad(
                "slice",
                format!(
                    "{:?} is shorter than {MIN_SLICE:?}: every slice is one event the committer seals, so a window would have more than a million of them per second",
                    self.slice
                ),
            );
        }
        if self.writers == 0 || self.writers > 256 {
            return bad("writers", format!("{} (1 to 256)", self.writers));
        }
        if self.max_fragment_bytes < slice::value_len(1, self.frame_len)
            || self.max_fragment_bytes as u64 > hotstore::MAX_VALUE_LEN
        {
            return bad(
                "max fragment size",
                format!(
                    "{} bytes: must hold one frame ({} bytes) and be at most {}",
                    self.max_fragment_bytes,
                    slice::value_len(1, self.frame_len),
                    hotstore::MAX_VALUE_LEN
                ),
            );
        }
        Ok(())
    }
}

/// What a trigger did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerOutcome {
    /// The recording that will hold the trigger's window.
    pub recording_id: u32,
    /// True if it extended a recording in progress (or its window was already part of
    /// one), false if it created one.
    pub extended: bool,
    /// 0, or how much of the trigger's window (ns from its start) lies before the recording
    /// that holds it and in no earlier recording: a trigger later than another one that
    /// reaches further back. That part is not recorded; the manifest says so
    /// (`trigger_head_missing_ns`, lossy) and the recorder logs a warning.
    pub head_missing_ns: u64,
}

/// One sample of the recorder's rates and backlog.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Seconds since the recorder started.
    pub t_secs: f64,
    /// Frames offered by the sources so far (stored, buffered or dropped).
    pub frames_in: u64,
    /// Bytes offered so far.
    pub bytes_in: u64,
    /// Frame bytes stored so far.
    pub bytes_out: u64,
    /// Frame bytes stored and made durable by a commit so far (with `Memory` durability: by
    /// the commit that replaced the manifests).
    pub bytes_durable: u64,
    /// Bytes pinned in the rings and not yet copied out by a writer.
    pub backlog_bytes: u64,
    /// Frames dropped so far.
    pub frames_dropped: u64,
}

/// Per (recording, link) progress, published by the writer after each stored slice.
#[derive(Default)]
struct LinkProgress {
    frames: AtomicU64,
    bytes: AtomicU64,
    slices: AtomicU64,
    first_ts: AtomicU64,
    last_ts: AtomicU64,
    /// Set (under the control lock) once the link decided the recording ended for it: a
    /// trigger may no longer extend the recording.
    closed: AtomicBool,
    /// Set once the link has stored and published its last slice of the recording.
    done: AtomicBool,
    /// The link reached the window's end (not cut short by a stop).
    reached_end: AtomicBool,
    /// Frames of the window that reached the ring but were not stored (store full at a stop,
    /// or beyond a slice's last part).
    discarded: AtomicU64,
    /// The window's head this link's ring no longer held at the trigger (ns).
    head_missing_ns: AtomicU64,
    /// When the link closed the recording: the timestamp of the frame past the window's end
    /// that closed it, or of the newest frame its ring held (0: it never sent one). Says
    /// where a link's frames were when none fell inside the window.
    seen_ts_at_close: AtomicU64,
}

struct Recording {
    id: u32,
    start_ns: u64,
    end_ns: AtomicU64,
    triggers: Mutex<Vec<u64>>,
    links: Vec<LinkProgress>,
    created_ns: u64,
    /// Slices sealed so far.
    sealed: AtomicU64,
    /// Final manifest written.
    finished: AtomicBool,
    /// Record bytes stored (slice values, padding included).
    record_bytes: AtomicU64,
    first_put: Mutex<Option<Instant>>,
    last_commit: Mutex<Option<Instant>>,
    /// Largest part of a trigger's window before the recording, not recorded (ns).
    trigger_head_missing_ns: AtomicU64,
    /// For the manifest's `notes`.
    notes: Mutex<Vec<String>>,
}

impl Recording {
    /// Adds a note for the manifest (once) and logs it.
    fn note(&self, msg: String) {
        let mut n = self.notes.lock();
        if !n.contains(&msg) {
            eprintln!("hotstore record: WARNING: recording {}: {msg}", self.id);
            n.push(msg);
        }
    }
}

/// The samples kept (see [`MAX_SAMPLES`]).
#[derive(Default)]
struct Samples {
    list: Vec<Sample>,
    /// Every `stride`-th sample taken is kept.
    stride: u64,
    taken: u64,
    latest: Option<Sample>,
}

impl Samples {
    /// Records `s`; `last`: the final sample, always kept.
    fn record(&mut self, s: Sample, last: bool) {
        self.latest = Some(s);
        let stride = self.stride.max(1);
        if last || self.taken.is_multiple_of(stride) {
            self.list.push(s);
            if self.list.len() >= MAX_SAMPLES {
                let mut i = 0;
                self.list.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = stride * 2;
            }
        }
        self.taken += 1;
    }
}

struct Control {
    recordings: Vec<Arc<Recording>>,
    /// Per link: the recording index it is writing, or None when idle (unpinned).
    link_rec: Vec<Option<usize>>,
    /// Per link: a start handed to an idle link's writer by a trigger (ring seq, recording).
    handoff: Vec<Option<(u64, usize)>>,
    next_id: u32,
}

struct Inner {
    cfg: RecorderConfig,
    store: Arc<Store>,
    rings: Vec<LinkRing>,
    control: Mutex<Control>,
    /// Frame bytes stored, per link.
    stored_bytes: Vec<AtomicU64>,
    /// Frame bytes covered by the last completed commit.
    durable_bytes: AtomicU64,
    stop: AtomicBool,
    writers_done: AtomicU64,
    failure: Mutex<Option<String>>,
    samples: Mutex<Samples>,
    started: Instant,
    started_unix_ns: u64,
    full_warned: AtomicBool,
    /// The store was full while the recorder stopped: the writers discard (and count) what
    /// the rings still hold of the recordings instead of storing it.
    discarding: AtomicBool,
}

/// A running recorder (see the module docs). Cheap to share: clone the handle from
/// [`Recorder::handle`] for producers and trigger sources in other threads.
pub struct Recorder {
    handle: RecorderHandle,
    threads: Vec<JoinHandle<()>>,
    /// This process's record that a recorder runs on the store (see [`crate::recovery`]).
    _active: crate::recovery::Active,
}

/// A cloneable handle for pushing frames and triggering.
#[derive(Clone)]
pub struct RecorderHandle {
    inner: Arc<Inner>,
}

/// What a finished recorder reports.
#[derive(Debug, Clone)]
pub struct RecorderReport {
    /// Final manifests of the recordings made, in order.
    pub recordings: Vec<Manifest>,
    /// The samples taken.
    pub samples: Vec<Sample>,
    /// Frames pushed (accepted or dropped) on all links.
    pub frames_offered: u64,
    /// Frames dropped on all links.
    pub frames_dropped: u64,
    /// When the recorder started (ns since the Unix epoch): sample `t_secs` counts from here.
    pub started_unix_ns: u64,
    /// Per recording: slice record bytes written and the seconds from its first write to its
    /// last commit.
    pub write_windows: Vec<(u32, u64, f64)>,
}

impl Recorder {
    /// Starts a recorder on `store`: allocates (and touches) the rings and starts the writer,
    /// committer and sampler threads. Recording ids continue after the store's last one.
    ///
    /// Before anything is allocated: rings larger than the memory available
    /// ([`crate::mem::available`]) are refused ([`RecorderError::Config`] naming both figures),
    /// and recordings a recorder that no longer runs left `recording` are closed
    /// ([`crate::recovery::close_interrupted`]; each is logged).
    pub fn start(store: Arc<Store>, cfg: RecorderConfig) -> Result<Recorder> {
        cfg.validate()?;
        let capacity = cfg.ring_bytes_per_link / cfg.frame_len as u64;
        let need = crate::mem::ring_bytes(cfg.links, cfg.frame_len, cfg.ring_bytes_per_link);
        if let Some(avail) = crate::mem::available() {
            if need > avail.bytes {
                return Err(RecorderError::Config {
                    name: "ring size",
                    reason: format!(
                        "{} links x {} bytes of ring (frames and timestamps: {need} bytes) is more than the {} bytes available ({}): lower ring_bytes_per_link or the number of links",
                        cfg.links, cfg.ring_bytes_per_link, avail.bytes, avail.source
                    ),
                });
            }
        }
        for c in crate::recovery::close_interrupted(&store)? {
            // Not `eprintln!`: a closed stderr must not panic the recorder.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "hotstore record: {}", c.describe());
        }
        let active = crate::recovery::Active::register(&store)?;
        let next_id = manifest::list(store.dir())?.last().map_or(1, |l| l + 1);
        manifest::reserve_space(store.dir());
        let links = cfg.links as usize;
        let inner = Arc::new(Inner {
            rings: (0..links)
                .map(|_| LinkRing::new(cfg.frame_len, capacity))
                .collect(),
            control: Mutex::new(Control {
                recordings: Vec::new(),
                link_rec: vec![None; links],
                handoff: vec![None; links],
                next_id,
            }),
            stored_bytes: (0..links).map(|_| AtomicU64::new(0)).collect(),
            durable_bytes: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            writers_done: AtomicU64::new(0),
            failure: Mutex::new(None),
            samples: Mutex::new(Samples::default()),
            started: Instant::now(),
            started_unix_ns: now_ns(),
            full_warned: AtomicBool::new(false),
            discarding: AtomicBool::new(false),
            store,
            cfg,
        });
        let mut threads = Vec::new();
        let writers = inner.cfg.writers.min(links);
        for w in 0..writers {
            let inner = inner.clone();
            let mine: Vec<u16> = (0..inner.cfg.links)
                .filter(|l| *l as usize % writers == w)
                .collect();
            threads.push(spawn(&format!("rec-writer-{w}"), move || {
                let r = writer_loop(&inner, &mine);
                if let Err(e) = r {
                    inner.fail(format!("writer {w}: {e}"));
                }
                inner.writers_done.fetch_add(1, Ordering::SeqCst);
            })?);
        }
        let c = inner.clone();
        threads.push(spawn("rec-committer", move || {
            if let Err(e) = committer_loop(&c, writers as u64) {
                c.fail(format!("committer: {e}"));
            }
        })?);
        let s = inner.clone();
        threads.push(spawn("rec-sampler", move || {
            sampler_loop(&s, writers as u64)
        })?);
        Ok(Recorder {
            handle: RecorderHandle { inner },
            threads,
            _active: active,
        })
    }

    /// A handle for other threads.
    pub fn handle(&self) -> RecorderHandle {
        self.handle.clone()
    }

    /// Stops: writers store what the rings hold of the open recordings (a recording whose
    /// window is not over is marked truncated), the last commit makes it durable, the threads
    /// end, and the report is returned. If the store is full at the stop, what the rings still
    /// hold of the recordings is discarded and counted (`frames_discarded`, lossy) instead:
    /// the recordings are closed and the report returned all the same.
    pub fn finish(mut self) -> Result<RecorderReport> {
        let inner = self.handle.inner.clone();
        inner.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(f) = inner.failure.lock().clone() {
            return Err(RecorderError::Stopped(f));
        }
        let recs = inner.control.lock().recordings.clone();
        let mut manifests = Vec::new();
        let mut windows = Vec::new();
        for r in &recs {
            manifests.push(manifest::read(inner.store.dir(), r.id)?);
            let secs = match (*r.first_put.lock(), *r.last_commit.lock()) {
                (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
                _ => 0.0,
            };
            windows.push((r.id, r.record_bytes.load(Ordering::Relaxed), secs));
        }
        Ok(RecorderReport {
            recordings: manifests,
            samples: {
                let s = inner.samples.lock().list.clone();
                s
            },
            frames_offered: inner.rings.iter().map(|r| r.head() + r.dropped()).sum(),
            frames_dropped: inner.rings.iter().map(|r| r.dropped()).sum(),
            write_windows: windows,
            started_unix_ns: inner.started_unix_ns,
        })
    }
}

impl std::ops::Deref for Recorder {
    type Target = RecorderHandle;
    fn deref(&self) -> &RecorderHandle {
        &self.handle
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.handle.inner.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| RecorderError::Io {
            what: "spawn thread",
            path: name.into(),
            source: e,
        })
}

impl RecorderHandle {
    fn check_link(&self, link: u16) -> Result<&LinkRing> {
        self.inner
            .rings
            .get(link as usize)
            .ok_or_else(|| RecorderError::BadFrame {
                link,
                reason: format!("no such link (the recorder has {})", self.inner.cfg.links),
            })
    }

    /// Pushes one frame of `link` stamped `ts_ns` (ns since the Unix epoch; per link in
    /// non-decreasing order). Ok(false) if it was dropped because the link's DRAM bound is
    /// reached (counted, and the recording is marked lossy).
    pub fn push(&self, link: u16, ts_ns: u64, frame: &[u8]) -> Result<bool> {
        let ring = self.check_link(link)?;
        if frame.len() != ring.frame_len() {
            return Err(RecorderError::BadFrame {
                link,
                reason: format!(
                    "{} bytes, but the recorder takes frames of {} bytes",
                    frame.len(),
                    ring.frame_len()
                ),
            });
        }
        Ok(ring.push_with(ts_ns, |slot, _| slot.copy_from_slice(frame)))
    }

    /// Pushes one frame built in place by `fill` (given the frame buffer and the link's ring
    /// sequence number): no copy. Ok(false) if dropped, as for [`Self::push`].
    pub fn push_with(
        &self,
        link: u16,
        ts_ns: u64,
        fill: impl FnOnce(&mut [u8], u64),
    ) -> Result<bool> {
        Ok(self.check_link(link)?.push_with(ts_ns, fill))
    }

    /// Triggers a recording of `[ts_ns - pre, ts_ns + post)` (see the module docs). A time more
    /// than [`MAX_TRIGGER_AHEAD`] ahead of the recorder's clock is refused with
    /// [`RecorderError::TriggerTooFarAhead`].
    pub fn trigger_at(&self, ts_ns: u64) -> Result<TriggerOutcome> {
        self.inner.trigger(ts_ns)
    }

    /// Triggers now.
    pub fn trigger(&self) -> Result<TriggerOutcome> {
        self.inner.trigger(now_ns())
    }

    /// True once every recording so far is complete and durable (and there is at least one).
    pub fn all_recordings_finished(&self) -> bool {
        let c = self.inner.control.lock();
        !c.recordings.is_empty()
            && c.recordings
                .iter()
                .all(|r| r.finished.load(Ordering::SeqCst))
    }

    /// Recordings made so far (ids).
    pub fn recording_ids(&self) -> Vec<u32> {
        self.inner
            .control
            .lock()
            .recordings
            .iter()
            .map(|r| r.id)
            .collect()
    }

    /// The latest sample.
    pub fn latest_sample(&self) -> Option<Sample> {
        self.inner.samples.lock().latest
    }

    /// The current sample (taken now).
    pub fn sample_now(&self) -> Sample {
        self.inner.sample()
    }

    /// Frames dropped per link so far.
    pub fn dropped_per_link(&self) -> Vec<u64> {
        self.inner.rings.iter().map(|r| r.dropped()).collect()
    }

    /// A failure that stopped the recorder, if any.
    pub fn failure(&self) -> Option<String> {
        self.inner.failure.lock().clone()
    }

    /// The configuration.
    pub fn config(&self) -> &RecorderConfig {
        &self.inner.cfg
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }
}

impl Inner {
    fn fail(&self, msg: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    fn sample(&self) -> Sample {
        let fl = self.cfg.frame_len as u64;
        let (mut frames_in, mut backlog, mut dropped) = (0, 0, 0);
        for r in &self.rings {
            let d = r.dropped();
            frames_in += r.head() + d;
            dropped += d;
            backlog += r.backlog_frames();
        }
        Sample {
            t_secs: self.started.elapsed().as_secs_f64(),
            frames_in,
            bytes_in: frames_in * fl,
            bytes_out: self
                .stored_bytes
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .sum(),
            backlog_bytes: backlog * fl,
            bytes_durable: self.durable_bytes.load(Ordering::Acquire),
            frames_dropped: dropped,
        }
    }

    fn trigger(&self, ts: u64) -> Result<TriggerOutcome> {
        if let Some(f) = self.failure.lock().clone() {
            return Err(RecorderError::Stopped(f));
        }
        if self.stop.load(Ordering::SeqCst) {
            return Err(RecorderError::Stopped("the recorder is stopping".into()));
        }
        let max_ahead = MAX_TRIGGER_AHEAD.as_nanos() as u64;
        let now = now_ns();
        if ts > now.saturating_add(max_ahead) {
            return Err(RecorderError::TriggerTooFarAhead {
                ts_ns: ts,
                ahead_ns: ts - now,
                max_ns: max_ahead,
            });
        }
        let (pre, post) = (
            self.cfg.pre.as_nanos() as u64,
            self.cfg.post.as_nanos() as u64,
        );
        let from = ts.saturating_sub(pre);
        let end = ts.saturating_add(post);
        let mut c = self.control.lock();
        if let Some(last) = c.recordings.last() {
            let any_done = last.links.iter().any(|l| l.closed.load(Ordering::SeqCst));
            if !any_done && from <= last.end_ns.load(Ordering::SeqCst) {
                last.end_ns.fetch_max(end, Ordering::SeqCst);
                last.triggers.lock().push(ts);
                let n = c.recordings.len();
                // Only the trigger's own window counts: one that ends before the recording
                // starts (a late `RECORD.TRIGGER AT`) loses its window, not everything up to
                // the recording's start (review: a 1 s window was reported 60 s short).
                let missing = uncovered(&c.recordings[..n - 1], from, last.start_ns.min(end));
                clipped(last, ts, missing);
                return Ok(TriggerOutcome {
                    recording_id: last.id,
                    extended: true,
                    head_missing_ns: missing,
                });
            }
        }
        let mut start = from;
        if let Some(last) = c.recordings.last() {
            start = start.max(last.end_ns.load(Ordering::SeqCst));
            if start >= end {
                // The whole window is already part of the last recording (or earlier ones):
                // what of it none holds is reported.
                let missing = uncovered(&c.recordings, from, end);
                clipped(last, ts, missing);
                return Ok(TriggerOutcome {
                    recording_id: last.id,
                    extended: true,
                    head_missing_ns: missing,
                });
            }
        }
        let missing = uncovered(&c.recordings, from, start);
        let id = c.next_id;
        let rec = Arc::new(Recording {
            id,
            start_ns: start,
            end_ns: AtomicU64::new(end),
            triggers: Mutex::new(vec![ts]),
            links: (0..self.cfg.links)
                .map(|_| LinkProgress::default())
                .collect(),
            created_ns: now_ns(),
            sealed: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            record_bytes: AtomicU64::new(0),
            first_put: Mutex::new(None),
            last_commit: Mutex::new(None),
            trigger_head_missing_ns: AtomicU64::new(0),
            notes: Mutex::new(Vec::new()),
        });
        clipped(&rec, ts, missing);
        // Events of the recording are sealed by the committer once every link finished them.
        self.store.set_run_policy(
            id as u64,
            Some(EventPolicy {
                expected_fragments: 0,
                incomplete_timeout_ms: 0,
            }),
        )?;
        // Idle links are pinned (and their missing heads known) before the first manifest.
        let idx = c.recordings.len();
        let mut pins = Vec::new();
        for link in 0..self.cfg.links as usize {
            if c.link_rec[link].is_none() && c.handoff[link].is_none() {
                let p = self.rings[link].pin_from(start);
                let lost = p.head_missing_ns.min(end - start);
                rec.links[link]
                    .head_missing_ns
                    .store(lost, Ordering::SeqCst);
                pins.push((link, p.seq));
            }
        }
        let heads: Vec<String> = rec
            .links
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let ns = l.head_missing_ns.load(Ordering::SeqCst);
                (ns > 0).then(|| format!("link {i} {:.3} ms", ns as f64 / 1e6))
            })
            .collect();
        if !heads.is_empty() {
            rec.note(format!(
                "the rings no longer held the start of the window (a late trigger, or a ring shorter than the pre-trigger window); missing: {}",
                heads.join(", ")
            ));
        }
        // The manifest exists before any of the recording's slices is stored.
        let written = manifest::write(
            self.store.dir(),
            &self.manifest_of(&rec, RecordingState::Recording),
        );
        if let Err(e) = written {
            for (link, _) in pins {
                self.rings[link].unpin();
            }
            return Err(e);
        }
        c.next_id += 1;
        c.recordings.push(rec);
        for (link, seq) in pins {
            c.handoff[link] = Some((seq, idx));
        }
        Ok(TriggerOutcome {
            recording_id: id,
            extended: false,
            head_missing_ns: missing,
        })
    }

    fn manifest_of(&self, r: &Recording, state: RecordingState) -> Manifest {
        let end = r.end_ns.load(Ordering::SeqCst);
        let links: Vec<LinkManifest> = r
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let frames = l.frames.load(Ordering::Acquire);
                let discarded = l.discarded.load(Ordering::Acquire);
                LinkManifest {
                    link: i as u16,
                    frames_recorded: frames,
                    frames_dropped: self.rings[i].dropped_between(r.start_ns, end) + discarded,
                    frames_discarded: discarded,
                    head_missing_ns: l.head_missing_ns.load(Ordering::Acquire),
                    slices_durable: l.slices.load(Ordering::Acquire),
                    first_ts_ns: (frames > 0).then(|| l.first_ts.load(Ordering::Acquire)),
                    last_ts_ns: (frames > 0).then(|| l.last_ts.load(Ordering::Acquire)),
                }
            })
            .collect();
        let slices_durable = links.iter().map(|l| l.slices_durable).min().unwrap_or(0);
        let trigger_head_missing_ns = r.trigger_head_missing_ns.load(Ordering::SeqCst);
        Manifest {
            version: manifest::MANIFEST_VERSION,
            recording_id: r.id,
            state,
            lossy: trigger_head_missing_ns > 0
                || links
                    .iter()
                    .any(|l| l.frames_dropped > 0 || l.head_missing_ns > 0),
            triggers_ns: r.triggers.lock().clone(),
            pre_ns: self.cfg.pre.as_nanos() as u64,
            post_ns: self.cfg.post.as_nanos() as u64,
            start_ns: r.start_ns,
            end_ns: end,
            slice_ns: self.cfg.slice.as_nanos() as u64,
            frame_len: self.cfg.frame_len as u32,
            durability: match self.cfg.durability {
                Durability::Memory => "memory".into(),
                Durability::Persisted => "persisted".into(),
            },
            slices_durable,
            trigger_head_missing_ns,
            notes: r.notes.lock().clone(),
            silent_links: Vec::new(),
            interrupted: false,
            links,
            created_unix_ns: r.created_ns,
            updated_unix_ns: now_ns(),
        }
    }

    /// Stores a finished slice value at Memory durability (the committer makes it durable).
    /// A full store is waited out in steps while the backlog grows (and frames are dropped past
    /// the DRAM bound), never silently: the first wait is logged. Once the recorder stops, a
    /// full store is not waited for: returns false (nothing stored), and from then on every
    /// writer discards instead of storing (see [`Inner::discarding`]).
    fn put_slice(&self, rec: &Recording, key: &[u8; 16], parts: &[&[u8]]) -> Result<bool> {
        {
            let mut first = rec.first_put.lock();
            if first.is_none() {
                *first = Some(Instant::now());
            }
        }
        loop {
            let opts = WriteOptions {
                durability: Durability::Memory,
                full_wait: Some(Duration::from_millis(100)),
            };
            match self.store.put_parts_with(key, parts, opts) {
                Ok(()) => break,
                Err(e) if e.is_full() && !self.stop.load(Ordering::SeqCst) => {
                    if !self.full_warned.swap(true, Ordering::SeqCst) {
                        eprintln!(
                            "hotstore record: WARNING: the store is full; recording {} waits for space (frames back up in DRAM and are dropped past the bound)",
                            rec.id
                        );
                    }
                }
                Err(e) if e.is_full() => {
                    if !self.discarding.swap(true, Ordering::SeqCst) {
                        eprintln!(
                            "hotstore record: WARNING: the store is full and the recorder is stopping: what the rings still hold of the recordings is discarded, counted as dropped, and the recordings are closed lossy"
                        );
                    }
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
        let value_len: usize = parts.iter().map(|p| p.len()).sum();
        rec.record_bytes
            .fetch_add((value_len + 40) as u64, Ordering::Relaxed);
        Ok(true)
    }
}

/// A writer's state for one of its links.
struct Cursor {
    link: u16,
    /// Next ring sequence number to copy, when active.
    next: u64,
    /// Index of the recording being written, or None when idle.
    rec: Option<usize>,
    slice: u64,
    part: u32,
    builder: SliceBuilder,
    /// Frames copied into stored slices of the current recording.
    frames: u64,
    bytes: u64,
    /// One past the last slice stored of the current recording.
    stored_slices: u64,
    /// A slice of the current recording ran out of parts (noted once).
    out_of_parts: bool,
    last_frame_at: Instant,
}

fn writer_loop(inner: &Inner, links: &[u16]) -> Result<()> {
    let fl = inner.cfg.frame_len;
    // A slice part never pins more than half a ring, so the producer always has room.
    let cap = slice::frames_fitting(inner.cfg.max_fragment_bytes, fl)
        .min((inner.rings[0].capacity() / 2).max(1) as usize);
    let mut cursors: Vec<Cursor> = links
        .iter()
        .map(|&link| Cursor {
            link,
            next: 0,
            rec: None,
            slice: 0,
            part: 0,
            builder: SliceBuilder::new(fl, cap),
            frames: 0,
            bytes: 0,
            stored_slices: 0,
            out_of_parts: false,
            last_frame_at: Instant::now(),
        })
        .collect();
    loop {
        let stopping = inner.stop.load(Ordering::SeqCst);
        let mut busy = false;
        for cur in cursors.iter_mut() {
            busy |= step(inner, cur, stopping)?;
        }
        if !busy {
            if stopping && cursors.iter().all(|c| c.rec.is_none()) {
                // Take any handoff that raced with the stop, then end.
                let pending = {
                    let c = inner.control.lock();
                    cursors
                        .iter()
                        .any(|cur| c.handoff[cur.link as usize].is_some())
                };
                if !pending {
                    return Ok(());
                }
                continue;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
    }
}

/// Advances one link: picks up a handed-over recording, copies up to a batch of frames, stores
/// finished slices, closes the recording at its end. Returns whether there was work.
fn step(inner: &Inner, cur: &mut Cursor, stopping: bool) -> Result<bool> {
    let ring = &inner.rings[cur.link as usize];
    if cur.rec.is_none() {
        // Taken and recorded as busy under one lock: a trigger in between would see the link
        // idle and pin its ring anew.
        let mut c = inner.control.lock();
        let Some((seq, idx)) = c.handoff[cur.link as usize].take() else {
            return Ok(false);
        };
        c.link_rec[cur.link as usize] = Some(idx);
        drop(c);
        begin(cur, seq, idx);
    }
    let idx = cur.rec.expect(
        "the link has an active recording here: set by `begin` above, or checked by the caller",
    );
    let rec = inner.control.lock().recordings[idx].clone();
    let head = ring.head();
    let until = head.min(cur.next + BATCH_FRAMES);
    let mut work = false;
    while cur.next < until {
        let s = cur.next;
        let ts = ring.ts_of(s);
        if ts < rec.start_ns {
            // Before the window (or between queued windows): not needed, release it.
            cur.next += 1;
            work = true;
            continue;
        }
        if ts >= rec.end_ns.load(Ordering::SeqCst) {
            // Re-check under the control lock: a trigger may be extending the window now.
            if close_if_ended(inner, cur, &rec, Some(ts), stopping)? {
                return Ok(true);
            }
            continue;
        }
        let slice_idx = ((ts - rec.start_ns) / inner.cfg.slice.as_nanos() as u64).max(cur.slice);
        if cur.builder.frames() > 0 && (slice_idx != cur.slice || !cur.builder.accepts(s)) {
            let next_part = slice_idx == cur.slice;
            store_slice(inner, cur, &rec, !next_part)?;
            // The stored frames no longer need the ring.
            ring.advance_pin(s);
            if next_part {
                cur.part += 1;
            } else {
                cur.part = 0;
            }
        }
        if cur.builder.frames() == 0 && slice_idx != cur.slice {
            // A new slice starts at part 0 (also after the end of a slice was discarded).
            cur.part = 0;
        }
        if cur.part >= MAX_PARTS || inner.discarding.load(Ordering::SeqCst) {
            // Not stored, never silently: counted in the manifest's dropped frames.
            if cur.part >= MAX_PARTS && !cur.out_of_parts {
                cur.out_of_parts = true;
                rec.note(format!(
                    "link {} slice {}: the slice needs more than {MAX_PARTS} parts (the key's part field is 16 bits); the frames past its last part are discarded, here and in any later slice that needs as many: use a shorter slice or a larger max_fragment_bytes",
                    cur.link, slice_idx
                ));
            }
            rec.links[cur.link as usize]
                .discarded
                .fetch_add(1, Ordering::Release);
            cur.next += 1;
            work = true;
            continue;
        }
        if cur.builder.frames() == 0 {
            cur.slice = slice_idx;
            cur.builder.start(rec.id, cur.slice, cur.link, cur.part);
        }
        cur.builder.push(s, ts);
        cur.next += 1;
        work = true;
    }
    if work {
        cur.last_frame_at = Instant::now();
        // Frames of the open slice stay pinned: the store reads them from the ring.
        let keep_from = if cur.builder.frames() > 0 {
            cur.builder.header().first_ring
        } else {
            cur.next
        };
        ring.advance_pin(keep_from);
        return Ok(true);
    }
    // Nothing new: close the recording if the link stays silent past its end, or on a stop.
    let end = rec.end_ns.load(Ordering::SeqCst);
    let silent = cur.last_frame_at.elapsed() >= inner.cfg.link_timeout
        && now_ns() >= end.saturating_add(inner.cfg.link_timeout.as_nanos() as u64);
    if (stopping || silent) && close_if_ended(inner, cur, &rec, None, stopping)? {
        return Ok(true);
    }
    Ok(false)
}

fn begin(cur: &mut Cursor, seq: u64, idx: usize) {
    cur.next = seq;
    cur.rec = Some(idx);
    cur.slice = 0;
    cur.part = 0;
    cur.frames = 0;
    cur.bytes = 0;
    cur.stored_slices = 0;
    cur.out_of_parts = false;
    cur.builder.start(0, 0, cur.link, 0);
    cur.last_frame_at = Instant::now();
}

/// Stores the slice being built and publishes the link's progress. `slice_done`: no more
/// parts of this slice follow.
fn store_slice(inner: &Inner, cur: &mut Cursor, rec: &Recording, slice_done: bool) -> Result<()> {
    let h = *cur.builder.header();
    // Never clamped: two parts under one key would overwrite each other.
    let part = u16::try_from(h.part)
        .expect("`step` discards the frames of a slice past its last part (MAX_PARTS)");
    let key = slice::key(rec.id, h.slice, cur.link, part);
    let ring = &inner.rings[cur.link as usize];
    let frames = ring.frames(h.first_ring, h.frames as u64);
    let (head, pad) = cur.builder.finish();
    let n = h.frames as u64;
    let p = &rec.links[cur.link as usize];
    if !inner.put_slice(rec, &key, &[head, frames[0], frames[1], pad])? {
        // The store is full and the recorder stopping: counted, not stored.
        p.discarded.fetch_add(n, Ordering::Release);
        rec.note(
            "the store was full when the recorder stopped: the frames the rings still held of the window were discarded (frames_discarded)".into(),
        );
        cur.builder.start(rec.id, h.slice, cur.link, h.part + 1);
        return Ok(());
    }
    let bytes = n * inner.cfg.frame_len as u64;
    inner.stored_bytes[cur.link as usize].fetch_add(bytes, Ordering::Relaxed);
    cur.frames += n;
    cur.bytes += bytes;
    cur.stored_slices = h.slice + 1;
    if p.frames.load(Ordering::Relaxed) == 0 {
        p.first_ts.store(h.first_ts_ns, Ordering::Release);
    }
    p.last_ts.store(h.last_ts_ns, Ordering::Release);
    p.bytes.store(cur.bytes, Ordering::Release);
    p.frames.store(cur.frames, Ordering::Release);
    if slice_done {
        p.slices.store(h.slice + 1, Ordering::Release);
    }
    cur.builder.start(rec.id, h.slice, cur.link, h.part + 1);
    Ok(())
}

/// Closes the link's part of `rec` unless a trigger extended the window past `ts` meanwhile;
/// then moves the link to the next queued recording, or makes it idle. Returns whether it
/// closed.
fn close_if_ended(
    inner: &Inner,
    cur: &mut Cursor,
    rec: &Recording,
    ts: Option<u64>,
    stopping: bool,
) -> Result<bool> {
    if let Some(ts) = ts {
        if ts < rec.end_ns.load(Ordering::SeqCst) {
            return Ok(false);
        }
    }
    let c = inner.control.lock();
    let end = rec.end_ns.load(Ordering::SeqCst);
    match ts {
        Some(ts) if ts < end => return Ok(false),
        // Silent link: a trigger may have just extended the window.
        None if !stopping
            && now_ns() < end.saturating_add(inner.cfg.link_timeout.as_nanos() as u64) =>
        {
            return Ok(false)
        }
        _ => {}
    }
    let p = &rec.links[cur.link as usize];
    let ring = &inner.rings[cur.link as usize];
    let seen = ts.unwrap_or_else(|| match ring.head() {
        0 => 0,
        h => ring.ts_of(h - 1),
    });
    p.seen_ts_at_close.store(seen, Ordering::SeqCst);
    // Marked closed under the lock, so a trigger either extends before this or queues after.
    p.closed.store(true, Ordering::SeqCst);
    p.reached_end
        .store(ts.is_some() || now_ns() >= end, Ordering::SeqCst);
    drop(c);
    if cur.builder.frames() > 0 {
        store_slice(inner, cur, rec, true)?;
    }
    // Publish the final counts (also when the last slice was empty), then `done`.
    p.slices.store(cur.stored_slices, Ordering::Release);
    p.frames.store(cur.frames, Ordering::Release);
    p.done.store(true, Ordering::SeqCst);
    let idx = cur.rec.expect(
        "the link has an active recording here: set by `begin` above, or checked by the caller",
    );
    let mut c = inner.control.lock();
    if idx + 1 < c.recordings.len() {
        // A queued recording (its trigger found this link busy and left no handoff).
        c.link_rec[cur.link as usize] = Some(idx + 1);
        drop(c);
        let seq = cur.next;
        inner.rings[cur.link as usize].advance_pin(seq);
        begin(cur, seq, idx + 1);
    } else {
        c.link_rec[cur.link as usize] = None;
        cur.rec = None;
        inner.rings[cur.link as usize].unpin();
    }
    Ok(true)
}

/// The note of a recording whose links in `m.silent_links` sent no frame inside its window:
/// which links, and where their frames were (a sender's clock off this machine's puts every
/// frame outside the window), so the reader knows what to check.
fn silent_note(r: &Recording, m: &Manifest) -> String {
    const DETAILED: usize = 8;
    let (start, end) = (m.start_ns, m.end_ns);
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut about: Vec<String> = m
        .silent_links
        .iter()
        .take(DETAILED)
        .map(|&l| {
            let seen = r.links[l as usize].seen_ts_at_close.load(Ordering::SeqCst);
            let where_ = if seen == 0 {
                "sent no frame at all".to_string()
            } else if seen < start {
                format!(
                    "its newest frame was stamped {:.3} s before the window's start",
                    secs(start - seen)
                )
            } else if seen >= end {
                format!(
                    "its frames were stamped from {:.3} s after the window's end",
                    secs(seen - end)
                )
            } else {
                "sent no frame stamped inside it".to_string()
            };
            format!("link {l} {where_}")
        })
        .collect();
    if m.silent_links.len() > DETAILED {
        about.push(format!(
            "and {} more links",
            m.silent_links.len() - DETAILED
        ));
    }
    format!(
        "no frame stamped inside the window [{start}, {end}) ns arrived from {} of the {} links, so nothing of the window is stored for them ({}): check that those links send, and that the senders' clocks agree with this machine's (frames are placed by their timestamps)",
        m.silent_links.len(),
        m.links.len(),
        about.join("; ")
    )
}

/// Nanoseconds of `[from, to)` that none of `recs` covers (their windows are disjoint).
fn uncovered(recs: &[Arc<Recording>], from: u64, to: u64) -> u64 {
    let mut left = to.saturating_sub(from);
    for r in recs.iter().rev() {
        let end = r.end_ns.load(Ordering::SeqCst);
        if end <= from || left == 0 {
            break;
        }
        let (s, e) = (r.start_ns.max(from), end.min(to));
        left = left.saturating_sub(e.saturating_sub(s));
    }
    left
}

/// Records that `missing` ns of trigger `ts`'s window are in no recording.
fn clipped(rec: &Recording, ts: u64, missing: u64) {
    if missing > 0 {
        rec.trigger_head_missing_ns
            .fetch_max(missing, Ordering::SeqCst);
        rec.note(format!(
            "trigger {ts}: the first {:.3} ms of its window lie before the recording's start and in no recording (the trigger came after one that started later): not recorded",
            missing as f64 / 1e6
        ));
    }
}

fn committer_loop(inner: &Inner, writers: u64) -> Result<()> {
    loop {
        let writers_finished = inner.writers_done.load(Ordering::SeqCst) >= writers;
        commit_round(inner)?;
        if writers_finished {
            return Ok(());
        }
        if inner.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        } else {
            std::thread::sleep(inner.cfg.commit_interval);
        }
    }
}

/// Snapshot, seal, flush, manifests (see the module docs).
fn commit_round(inner: &Inner) -> Result<()> {
    let stored_before: u64 = inner
        .stored_bytes
        .iter()
        .map(|b| b.load(Ordering::Acquire))
        .sum();
    let recs: Vec<Arc<Recording>> = inner
        .control
        .lock()
        .recordings
        .iter()
        .filter(|r| !r.finished.load(Ordering::SeqCst))
        .cloned()
        .collect();
    if recs.is_empty() {
        // Every recording is finished, and the round that finished one flushed after all of
        // its links were done: whatever was stored before is durable. (Review: a link that
        // stored its last slice between a round's `stored` and its snapshot left
        // `durable_bytes` short until the next recording, which the summary's sustained rate
        // counted as a backlog that was never made durable.)
        inner
            .durable_bytes
            .fetch_max(stored_before, Ordering::AcqRel);
        return Ok(());
    }
    // Bytes stored before the snapshot: durable once this round's flush returns.
    let stored: u64 = inner
        .stored_bytes
        .iter()
        .map(|b| b.load(Ordering::Acquire))
        .sum();
    // What the writers had stored when the round started (done flags read first: a link done
    // has published its final counts before setting... after storing; re-read below).
    let snapshots: Vec<(bool, Manifest)> = recs
        .iter()
        .map(|r| {
            let all_done = r.links.iter().all(|l| l.done.load(Ordering::SeqCst));
            (all_done, inner.manifest_of(r, RecordingState::Recording))
        })
        .collect();
    for (r, (_, m)) in recs.iter().zip(&snapshots) {
        let upto = m.slices_durable;
        let from = r.sealed.load(Ordering::Relaxed);
        for s in from..upto {
            seal(inner, r.id, s)?;
        }
        r.sealed.store(upto.max(from), Ordering::Relaxed);
    }
    if inner.cfg.durability == Durability::Persisted {
        inner.store.flush()?;
    }
    inner.durable_bytes.fetch_max(stored, Ordering::AcqRel);
    for (r, (all_done, mut m)) in recs.iter().zip(snapshots) {
        if all_done {
            // Every link finished before the snapshot: the counts are final. A slice count may
            // differ between links (a silent link); seal every slice any link wrote.
            let max_slices = m.links.iter().map(|l| l.slices_durable).max().unwrap_or(0);
            for s in r.sealed.load(Ordering::Relaxed)..max_slices {
                seal(inner, r.id, s)?;
            }
            if inner.cfg.durability == Durability::Persisted {
                inner.store.flush()?;
            }
            let reached = r.links.iter().all(|l| l.reached_end.load(Ordering::SeqCst));
            m.state = if reached {
                RecordingState::Complete
            } else {
                RecordingState::Truncated
            };
            m.slices_durable = max_slices;
            // Links that sent nothing inside the window: not complete, never silently
            // (review: a recording with no frame at all, a sender's clock 30 s off, said
            // `complete`).
            m.silent_links = m
                .links
                .iter()
                .filter(|l| l.frames_recorded == 0 && l.frames_dropped == 0)
                .map(|l| l.link)
                .collect();
            if !m.silent_links.is_empty() {
                r.note(silent_note(r, &m));
                m.notes = r.notes.lock().clone();
                m.lossy = true;
            }
            if reached && m.frames_recorded() == 0 {
                m.state = RecordingState::Empty;
            }
        }
        if all_done {
            manifest::write(inner.store.dir(), &m)?;
        } else if !manifest::write_interim(inner.store.dir(), &m)? {
            r.note(
                "the file system is full: the manifest is not updated until there is room (the \
                 last one written stays true: it claims less)"
                    .into(),
            );
        }
        *r.last_commit.lock() = Some(Instant::now());
        if all_done {
            // Every slice is sealed (READY whatever the policy): the recording's run policy
            // is no longer needed, and a store keeps at most `hotstore::MAX_RUN_POLICIES`.
            inner.store.set_run_policy(r.id as u64, None)?;
            r.finished.store(true, Ordering::SeqCst);
        }
    }
    prune_drop_runs(inner);
    Ok(())
}

/// Forgets the rings' drop runs no manifest will count again: those that ended before the
/// oldest unfinished recording's start, or, with every recording finished, before the last
/// one's end (a new recording starts at or after it).
fn prune_drop_runs(inner: &Inner) {
    let bound = {
        let c = inner.control.lock();
        match c
            .recordings
            .iter()
            .find(|r| !r.finished.load(Ordering::SeqCst))
        {
            Some(r) => r.start_ns,
            None => match c.recordings.last() {
                Some(r) => r.end_ns.load(Ordering::SeqCst),
                None => return,
            },
        }
    };
    for ring in &inner.rings {
        ring.prune_drop_runs(bound);
    }
}

/// Seals slice event `slice` of recording `id`. A slice no link stored a frame of (every frame
/// dropped, or silent links) has no event: nothing to seal.
fn seal(inner: &Inner, id: u32, slice: u64) -> Result<()> {
    match inner
        .store
        .seal(&EventId::new(id, slice), Durability::Memory)
    {
        Ok(()) | Err(hotstore::Error::NoSuchEvent(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn sampler_loop(inner: &Inner, writers: u64) {
    loop {
        let s = inner.sample();
        let last = inner.stop.load(Ordering::SeqCst)
            && inner.writers_done.load(Ordering::SeqCst) >= writers;
        inner.samples.lock().record(s, last);
        if last {
            return;
        }
        std::thread::sleep(inner.cfg.sample_interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64) -> Sample {
        Sample {
            t_secs: t,
            frames_in: 0,
            bytes_in: 0,
            bytes_out: 0,
            bytes_durable: 0,
            backlog_bytes: 0,
            frames_dropped: 0,
        }
    }

    #[test]
    fn samples_stay_bounded_and_span_the_whole_run_at_an_even_step() {
        let mut s = Samples::default();
        let n = 5 * MAX_SAMPLES as u64 + 7;
        for i in 0..n {
            s.record(sample(i as f64), i + 1 == n);
        }
        assert!(s.list.len() < MAX_SAMPLES, "{} samples kept", s.list.len());
        assert!(s.list.len() >= MAX_SAMPLES / 4);
        assert_eq!(s.list[0].t_secs, 0.0, "the first sample is kept");
        assert_eq!(s.list.last().map(|x| x.t_secs), Some((n - 1) as f64));
        assert_eq!(s.latest.map(|x| x.t_secs), Some((n - 1) as f64));
        let step = s.list[1].t_secs - s.list[0].t_secs;
        let last_full = s.list.len() - 2; // the final sample is kept off the step
        for w in s.list[..=last_full].windows(2) {
            assert_eq!(w[1].t_secs - w[0].t_secs, step);
        }
    }

    /// Review: a trigger whose whole window lies before the open recording was reported
    /// missing from its window's start up to the recording's start (60 s for a trigger 60 s
    /// late with a 1 s window; 1.8e18 ns for `RECORD.TRIGGER AT 0`).
    #[test]
    fn a_late_trigger_misses_at_most_its_own_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(Store::builder(dir.path()).open().expect("open"));
        let mut cfg = RecorderConfig::new(1, 64);
        cfg.pre = Duration::from_millis(100);
        cfg.post = Duration::from_millis(100);
        cfg.ring_bytes_per_link = 1024 * 64;
        let rec = Recorder::start(store, cfg).expect("start");
        let now = now_ns();
        let first = rec.trigger_at(now).expect("trigger");
        assert!(!first.extended);
        let late = rec.trigger_at(now - 3_000_000_000).expect("late trigger");
        assert_eq!(late.recording_id, first.recording_id);
        assert_eq!(
            late.head_missing_ns, 200_000_000,
            "the late trigger's window is 200 ms long"
        );
        let report = rec.finish().expect("finish");
        let m = &report.recordings[0];
        assert!(m.lossy);
        assert_eq!(m.trigger_head_missing_ns, 200_000_000);
    }

    #[test]
    fn drop_runs_of_finished_recordings_are_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(Store::builder(dir.path()).open().expect("open"));
        let mut cfg = RecorderConfig::new(1, 64);
        cfg.pre = Duration::from_millis(10);
        cfg.post = Duration::from_millis(100);
        cfg.ring_bytes_per_link = 16 * 64;
        cfg.commit_interval = Duration::from_millis(5);
        cfg.link_timeout = Duration::from_millis(50);
        let rec = Recorder::start(store, cfg).expect("start");
        let base = now_ns() - 5_000_000_000;
        // Window [base, base + 110 ms).
        rec.trigger_at(base + 10_000_000).expect("trigger");
        // The producer outruns the writer on a 16-frame ring: some push is dropped.
        let mut k = 0;
        while rec.dropped_per_link()[0] == 0 {
            assert!(k < 100_000, "no frame was dropped");
            rec.push(0, base + k * 1000, &[7u8; 64]).expect("push");
            k += 1;
        }
        let inner = &rec.handle.inner;
        assert!(!inner.rings[0].drop_runs().is_empty());
        // Its window is long over: the link closes it after link_timeout, the committer
        // writes the final manifest and forgets the drop runs.
        let t0 = Instant::now();
        while !inner.rings[0].drop_runs().is_empty() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "drop runs never pruned"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(rec.all_recordings_finished());
        let report = rec.finish().expect("finish");
        assert!(report.recordings[0].frames_dropped() > 0 && report.recordings[0].lossy);
    }
}
