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

/// Most links a recorder takes.
pub const MAX_LINKS: u16 = 4096;
/// Frames a writer copies from one link before it looks at the next.
const BATCH_FRAMES: u64 = 512;

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
        if self.slice.is_zero() {
            return bad("slice", "must be longer than 0".into());
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
    /// True if it extended a recording in progress, false if it created one.
    pub extended: bool,
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
    samples: Mutex<Vec<Sample>>,
    started: Instant,
    started_unix_ns: u64,
    full_warned: AtomicBool,
}

/// A running recorder (see the module docs). Cheap to share: clone the handle from
/// [`Recorder::handle`] for producers and trigger sources in other threads.
pub struct Recorder {
    handle: RecorderHandle,
    threads: Vec<JoinHandle<()>>,
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
    pub fn start(store: Arc<Store>, cfg: RecorderConfig) -> Result<Recorder> {
        cfg.validate()?;
        let capacity = cfg.ring_bytes_per_link / cfg.frame_len as u64;
        let next_id = manifest::list(store.dir())?.last().map_or(1, |l| l + 1);
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
            samples: Mutex::new(Vec::new()),
            started: Instant::now(),
            started_unix_ns: now_ns(),
            full_warned: AtomicBool::new(false),
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
        })
    }

    /// A handle for other threads.
    pub fn handle(&self) -> RecorderHandle {
        self.handle.clone()
    }

    /// Stops: writers store what the rings hold of the open recordings (a recording whose
    /// window is not over is marked truncated), the last commit makes it durable, the threads
    /// end, and the report is returned.
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
                let s = inner.samples.lock().clone();
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

    /// Triggers a recording of `[ts_ns - pre, ts_ns + post)` (see the module docs).
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
        self.inner.samples.lock().last().copied()
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
        let (pre, post) = (
            self.cfg.pre.as_nanos() as u64,
            self.cfg.post.as_nanos() as u64,
        );
        let end = ts.saturating_add(post);
        let mut c = self.control.lock();
        if let Some(last) = c.recordings.last() {
            let any_done = last.links.iter().any(|l| l.closed.load(Ordering::SeqCst));
            if !any_done && ts.saturating_sub(pre) <= last.end_ns.load(Ordering::SeqCst) {
                last.end_ns.fetch_max(end, Ordering::SeqCst);
                last.triggers.lock().push(ts);
                return Ok(TriggerOutcome {
                    recording_id: last.id,
                    extended: true,
                });
            }
        }
        let mut start = ts.saturating_sub(pre);
        if let Some(last) = c.recordings.last() {
            start = start.max(last.end_ns.load(Ordering::SeqCst));
            if start >= end {
                // The whole window is already part of the last recording.
                return Ok(TriggerOutcome {
                    recording_id: last.id,
                    extended: true,
                });
            }
        }
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
        });
        // Events of the recording are sealed by the committer once every link finished them.
        self.store.set_run_policy(
            id as u64,
            Some(EventPolicy {
                expected_fragments: 0,
                incomplete_timeout_ms: 0,
            }),
        )?;
        // The manifest exists before any of the recording's slices is stored.
        manifest::write(
            self.store.dir(),
            &self.manifest_of(&rec, RecordingState::Recording),
        )?;
        c.next_id += 1;
        c.recordings.push(rec);
        let idx = c.recordings.len() - 1;
        for link in 0..self.cfg.links as usize {
            if c.link_rec[link].is_none() && c.handoff[link].is_none() {
                let seq = self.rings[link].pin_from(start);
                c.handoff[link] = Some((seq, idx));
            }
        }
        Ok(TriggerOutcome {
            recording_id: id,
            extended: false,
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
                LinkManifest {
                    link: i as u16,
                    frames_recorded: frames,
                    frames_dropped: self.rings[i].dropped_between(r.start_ns, end),
                    slices_durable: l.slices.load(Ordering::Acquire),
                    first_ts_ns: (frames > 0).then(|| l.first_ts.load(Ordering::Acquire)),
                    last_ts_ns: (frames > 0).then(|| l.last_ts.load(Ordering::Acquire)),
                }
            })
            .collect();
        let slices_durable = links.iter().map(|l| l.slices_durable).min().unwrap_or(0);
        Manifest {
            version: manifest::MANIFEST_VERSION,
            recording_id: r.id,
            state,
            lossy: links.iter().any(|l| l.frames_dropped > 0),
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
            links,
            created_unix_ns: r.created_ns,
            updated_unix_ns: now_ns(),
        }
    }

    /// Stores a finished slice value at Memory durability (the committer makes it durable).
    /// A full store is waited out in steps while the backlog grows (and frames are dropped past
    /// the DRAM bound), never silently: the first wait is logged.
    fn put_slice(&self, rec: &Recording, key: &[u8; 16], parts: &[&[u8]]) -> Result<()> {
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
                Err(e) => return Err(e.into()),
            }
        }
        let value_len: usize = parts.iter().map(|p| p.len()).sum();
        rec.record_bytes
            .fetch_add((value_len + 40) as u64, Ordering::Relaxed);
        Ok(())
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
    cur.builder.start(0, 0, cur.link, 0);
    cur.last_frame_at = Instant::now();
}

/// Stores the slice being built and publishes the link's progress. `slice_done`: no more
/// parts of this slice follow.
fn store_slice(inner: &Inner, cur: &mut Cursor, rec: &Recording, slice_done: bool) -> Result<()> {
    let h = *cur.builder.header();
    let key = slice::key(
        rec.id,
        h.slice,
        cur.link,
        h.part.min(u16::MAX as u32) as u16,
    );
    let ring = &inner.rings[cur.link as usize];
    let frames = ring.frames(h.first_ring, h.frames as u64);
    let (head, pad) = cur.builder.finish();
    inner.put_slice(rec, &key, &[head, frames[0], frames[1], pad])?;
    let n = h.frames as u64;
    let bytes = n * inner.cfg.frame_len as u64;
    inner.stored_bytes[cur.link as usize].fetch_add(bytes, Ordering::Relaxed);
    cur.frames += n;
    cur.bytes += bytes;
    let p = &rec.links[cur.link as usize];
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
    // Marked closed under the lock, so a trigger either extends before this or queues after.
    p.closed.store(true, Ordering::SeqCst);
    p.reached_end
        .store(ts.is_some() || now_ns() >= end, Ordering::SeqCst);
    drop(c);
    if cur.builder.frames() > 0 {
        store_slice(inner, cur, rec, true)?;
    }
    // Publish the final counts (also when the last slice was empty), then `done`.
    let slices = if cur.frames > 0 { cur.slice + 1 } else { 0 };
    p.slices.store(slices, Ordering::Release);
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
    let recs: Vec<Arc<Recording>> = inner
        .control
        .lock()
        .recordings
        .iter()
        .filter(|r| !r.finished.load(Ordering::SeqCst))
        .cloned()
        .collect();
    if recs.is_empty() {
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
        }
        manifest::write(inner.store.dir(), &m)?;
        *r.last_commit.lock() = Some(Instant::now());
        if all_done {
            r.finished.store(true, Ordering::SeqCst);
        }
    }
    Ok(())
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
        inner.samples.lock().push(s);
        if inner.stop.load(Ordering::SeqCst) && inner.writers_done.load(Ordering::SeqCst) >= writers
        {
            return;
        }
        std::thread::sleep(inner.cfg.sample_interval);
    }
}
