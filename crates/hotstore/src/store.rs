//! The store: writer lanes, the write and read paths, and the handle users hold.
//!
//! Write path (`put`): checksum key and value (no lock) → lock this thread's lane (its own
//! active segment; uncontended while threads ≤ lanes) → copy key and value into the mapped
//! segment → lock the key's index shard → take an lsn, write the header, publish, update the
//! index → unlock → make durable as asked. Nothing shared is locked for the copy, and the
//! index shard is held only for a header write and a B-tree insert.

use crate::commit::GroupCommit;
use crate::error::{Error, Result};
use crate::events::acked::AckedSet;
use crate::events::policy::Policies;
use crate::events::Events;
use crate::index::{Index, IndexKey, Loc, ShardMap};
use crate::key::{check_key, KeyLayout};
use crate::maintenance::{self, Job};
use crate::medium::{Domain, FileMedium, Medium};
use crate::meta::{Meta, TierMeta, FORMAT_VERSION};
use crate::options::{Durability, StoreOptions, TierSpec, WriteOptions};
use crate::record::{self, Kind, HEADER_LEN, MAX_VALUE_LEN};
use crate::recovery::{self, RecoveryReport};
use crate::segment::{Segment, SEGMENT_HEADER_LEN};
use crate::stats::{Stats, TierStats};
use crate::tier::{SlotRegion, Tier};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One writer lane: its active segment, and its operation counts (kept here, under the lane
/// lock, so the write path touches no counter shared between threads).
#[derive(Default)]
pub(crate) struct Lane {
    pub(crate) seg: Option<Arc<Segment>>,
    pub(crate) puts: u64,
    pub(crate) removes: u64,
}

/// Keeps each lane on its own cache lines.
#[repr(align(128))]
pub(crate) struct PaddedLane(pub(crate) Mutex<Lane>);

/// Operation counters.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) full_errors: AtomicU64,
    /// Writers that had to make a segment file themselves or wait for one being prepared.
    pub(crate) segment_waits: WaitCounter,
    /// Writers that waited for space in a full store (`full_wait`).
    pub(crate) full_waits: WaitCounter,
    /// `Persisted` writes on a block tier waiting for their group commit.
    pub(crate) sync_waits: WaitCounter,
}

/// How often something waited, and for how long in total.
#[derive(Default)]
pub(crate) struct WaitCounter {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl WaitCounter {
    pub(crate) fn record(&self, d: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> crate::stats::Wait {
        crate::stats::Wait {
            count: self.count.load(Ordering::Relaxed),
            total_ns: self.nanos.load(Ordering::Relaxed),
        }
    }
}

/// State shared by the handle and the maintenance thread.
pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) layout: KeyLayout,
    pub(crate) verify_on_read: bool,
    /// Values at least this long go to block tiers by direct I/O.
    pub(crate) direct_min: usize,
    pub(crate) tiers: Vec<Tier>,
    pub(crate) index: Index,
    pub(crate) events: Events,
    pub(crate) lanes: Box<[PaddedLane]>,
    pub(crate) segments: Mutex<HashMap<u64, Arc<Segment>>>,
    pub(crate) next_segment_id: AtomicU64,
    pub(crate) next_lsn: AtomicU64,
    pub(crate) commit: GroupCommit,
    pub(crate) poisoned: Mutex<Option<String>>,
    pub(crate) is_poisoned: AtomicBool,
    pub(crate) jobs: Mutex<Sender<Job>>,
    /// Signalled when space is given back (for writers waiting on a full store).
    pub(crate) space: (Mutex<u64>, Condvar),
    pub(crate) counters: Counters,
    _lock: Box<dyn Any + Send + Sync>,
}

/// An open store. `Send + Sync`: share it between threads with `Arc` or by reference.
///
/// Dropping it seals the active segments, writes their summaries and persists everything
/// (errors are lost then: call [`Store::close`] to see them).
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    maintenance: Option<JoinHandle<()>>,
    report: RecoveryReport,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static LANE: usize = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
}

/// Records with values at least this long are written as bulk (see `Region::write`).
const BULK_VALUE_LEN: usize = 2 << 10;

/// Most parts [`Store::put_parts_with`] takes.
pub const MAX_VALUE_PARTS: usize = 7;

fn is_bulk(value_len: usize) -> bool {
    value_len >= BULK_VALUE_LEN
}

fn check_value(len: usize) -> Result<()> {
    if len as u64 > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: len as u64,
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

impl Store {
    /// Options with defaults for a store in `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> StoreOptions {
        StoreOptions::new(dir)
    }

    /// Opens (creating if allowed) the store described by `options`, recovering its index.
    pub fn open(options: StoreOptions) -> Result<Store> {
        options.validate()?;
        let (root, detected): (Arc<dyn Medium>, Option<Domain>) = match &options.media {
            Some(m) => (m[0].clone(), None),
            None => {
                std::fs::create_dir_all(&options.dir)
                    .map_err(|e| Error::io("create directory", &options.dir, e))?;
                let d = options
                    .tiers
                    .first()
                    .filter(|t| t.path.as_os_str() == "." || t.path == options.dir)
                    .and_then(|t| t.domain)
                    .unwrap_or_else(|| crate::medium::detect_domain(&options.dir).0);
                (Arc::new(file_medium(&options.dir, d, &options)?), Some(d))
            }
        };
        let lock = root.lock()?;
        let meta = match Meta::load(&*root)? {
            Some(meta) => {
                let stored = KeyLayout::parse(&meta.layout)?;
                if let Some(requested) = &options.layout {
                    if *requested != stored {
                        return Err(Error::LayoutMismatch {
                            path: options.dir.clone(),
                            stored: stored.to_string(),
                            requested: requested.to_string(),
                        });
                    }
                }
                let mut meta = meta;
                if options.tiers.len() == meta.tiers.len() {
                    let mut changed = false;
                    for (t, spec) in meta.tiers.iter_mut().zip(&options.tiers) {
                        if spec.capacity_bytes != 0 && spec.capacity_bytes != t.capacity_bytes {
                            t.capacity_bytes = spec.capacity_bytes;
                            changed = true;
                        }
                    }
                    if changed {
                        meta.store(&*root)?;
                    }
                }
                meta
            }
            None => {
                if !options.create_if_missing {
                    return Err(Error::NoStore(options.dir.clone()));
                }
                let specs = if options.tiers.is_empty() {
                    vec![TierSpec::new(".")]
                } else {
                    options.tiers.clone()
                };
                let tiers = specs
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let domain = match (&options.media, t.domain) {
                            (_, Some(d)) => d,
                            (Some(m), None) => m[i.min(m.len() - 1)].domain(),
                            (None, None) if i == 0 && (t.path.as_os_str() == ".") => {
                                detected.unwrap_or(Domain::Block)
                            }
                            (None, None) => {
                                let p = resolve(&options.dir, &t.path);
                                let _ = std::fs::create_dir_all(&p);
                                crate::medium::detect_domain(&p).0
                            }
                        };
                        TierMeta {
                            path: t.path.to_string_lossy().into_owned(),
                            domain,
                            capacity_bytes: t.capacity_bytes,
                        }
                    })
                    .collect();
                let meta = Meta {
                    format_version: FORMAT_VERSION,
                    layout: options.layout.clone().unwrap_or_default().to_string(),
                    segment_size_bytes: options.segment_size_bytes as u64,
                    created_unix_ms: now_ns() / 1_000_000,
                    tiers,
                };
                meta.store(&*root)?;
                meta
            }
        };
        let layout = KeyLayout::parse(&meta.layout)?;
        let segment_size = meta.segment_size_bytes as usize;
        let mut tiers = Vec::with_capacity(meta.tiers.len());
        for (i, t) in meta.tiers.iter().enumerate() {
            let medium: Arc<dyn Medium> = match &options.media {
                Some(m) => m.get(i).cloned().ok_or_else(|| Error::InvalidOption {
                    name: "media",
                    reason: format!(
                        "the store has {} tiers, {} media given",
                        meta.tiers.len(),
                        m.len()
                    ),
                })?,
                None if i == 0 && t.path == "." => {
                    Arc::new(file_medium(&options.dir, t.domain, &options)?)
                }
                None => Arc::new(file_medium(
                    &resolve(&options.dir, Path::new(&t.path)),
                    t.domain,
                    &options,
                )?),
            };
            tiers.push(Tier::new(i, medium, t.capacity_bytes, segment_size));
        }
        let index = Index::new(layout.key_len(), layout.event_prefix_len());
        let recovered = recovery::recover(&tiers, &index, options.recovery)?;
        let events = Events::new(
            &layout,
            Policies::load(&*tiers[0].medium)?,
            AckedSet::load(&*tiers[0].medium, layout.event_prefix_len())?,
        );
        // Before any reclaim decision: removals kill fragments and marks become live.
        crate::events::rebuild::rebuild(&events, &index, &recovered.event_records);
        // After recovery, which would otherwise adopt the new files a second time.
        if options.preallocate_bytes > 0 {
            tiers[0].preallocate(options.preallocate_bytes)?;
        }
        // The tails that were open at a crash become the lanes' active segments again, instead
        // of being sealed part-empty: repeated crashes would otherwise strand a part-filled
        // segment per lane per restart, and a bounded store could fill with them.
        let mut lanes: Vec<Lane> = (0..options.lanes).map(|_| Lane::default()).collect();
        let mut need_summary = Vec::new();
        let mut free_lanes = lanes.iter_mut();
        for seg in recovered.need_summary {
            seg.forget_synced();
            // Not a torn tail: the slot at `end` still holds the torn record's header, which a
            // write interrupted between body and header could make valid again.
            let torn = recovered
                .report
                .torn_tails
                .iter()
                .any(|(p, _)| p == seg.path());
            let has_room = !torn
                && seg.capacity() == segment_size
                && seg.end.load(Ordering::Relaxed) + SEGMENT_HEADER_LEN < seg.capacity();
            match if has_room { free_lanes.next() } else { None } {
                Some(lane) => {
                    seg.sealed.store(false, Ordering::Release);
                    lane.seg = Some(seg);
                }
                None => need_summary.push(seg),
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let inner = Arc::new(Inner {
            dir: options.dir.clone(),
            layout,
            verify_on_read: options.verify_on_read,
            direct_min: options.direct_io_min_value_bytes,
            tiers,
            index,
            events,
            lanes: lanes
                .into_iter()
                .map(|l| PaddedLane(Mutex::new(l)))
                .collect(),
            segments: Mutex::new(
                recovered
                    .segments
                    .iter()
                    .map(|s| (s.id, s.clone()))
                    .collect(),
            ),
            next_segment_id: AtomicU64::new(recovered.max_segment_id + 1),
            next_lsn: AtomicU64::new(recovered.max_lsn + 1),
            commit: GroupCommit::default(),
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            jobs: Mutex::new(tx),
            space: (Mutex::new(0), Condvar::new()),
            counters: Counters::default(),
            _lock: lock,
        });
        for seg in need_summary {
            inner.send(Job::Seal(seg));
        }
        for seg in &recovered.segments {
            inner.maybe_reclaim(seg);
        }
        let worker = inner.clone();
        let maintenance = std::thread::Builder::new()
            .name("hotstore-maint".into())
            .spawn(move || maintenance::run(worker, rx))
            .map_err(|e| Error::io("spawn maintenance thread", &options.dir, e))?;
        Ok(Store {
            inner,
            maintenance: Some(maintenance),
            report: recovered.report,
        })
    }

    /// What recovery found when this store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The key layout.
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Stores `value` under `key`, replacing any earlier value; returns once `durability` holds.
    pub fn put(&self, key: &[u8], value: &[u8], durability: Durability) -> Result<()> {
        self.put_with(key, value, durability.into())
    }

    /// [`Store::put`] with all write options.
    pub fn put_with(&self, key: &[u8], value: &[u8], opts: WriteOptions) -> Result<()> {
        self.put_parts_with(key, &[value], opts)
    }

    /// Stores the concatenation of `parts` (at most [`MAX_VALUE_PARTS`]) under `key`, as
    /// [`Store::put_with`] would store it as one value, without the caller assembling it: on a
    /// block tier the parts go to the file in one `pwritev`, so a value gathered from several
    /// buffers (a recorder's ring slots) is copied once.
    pub fn put_parts_with(&self, key: &[u8], parts: &[&[u8]], opts: WriteOptions) -> Result<()> {
        check_key(key)?;
        if parts.len() > MAX_VALUE_PARTS {
            return Err(Error::InvalidOption {
                name: "value parts",
                reason: format!("{} parts; at most {MAX_VALUE_PARTS}", parts.len()),
            });
        }
        let value_len: usize = parts.iter().map(|p| p.len()).sum();
        check_value(value_len)?;
        self.inner.check_poisoned()?;
        let mut body_crc = crc32c::crc32c(key);
        for p in parts {
            body_crc = crate::checksum::crc32c_append(body_crc, p);
        }
        let mut all: [&[u8]; MAX_VALUE_PARTS + 1] = [&[]; MAX_VALUE_PARTS + 1];
        all[0] = key;
        all[1..=parts.len()].copy_from_slice(parts);
        let all = &all[..=parts.len()];
        let rec_len = record::record_len(key.len(), value_len);
        let (mut lane, seg, off) = self.inner.lane_with_room(rec_len, opts.full_wait, false)?;
        // Safety: [off, off + rec_len) is past `end` of the lane's active segment, which only
        // this lane (locked) writes.
        // A bulk record is written entirely through the medium (pwrite on block tiers): a
        // single store through the mapping would map its page writable, and every write-back of
        // that page then costs a TLB shoot-down and a page fault (25% of the time in a profile).
        let bulk = is_bulk(value_len);
        let written = if value_len >= self.inner.direct_min {
            // Safety: as above.
            unsafe { seg.write_body_parts_direct(off + HEADER_LEN, all) }.map(|_| ())
        } else {
            // Safety: as above.
            unsafe { seg.write_body_parts(off + HEADER_LEN, all, bulk) }
        };
        if let Err(e) = written {
            // Page-cache state after a failed write is unknown: refuse further writes.
            self.inner.poison(&e);
            return Err(e);
        }
        let mut shard = self.inner.index.shard(key).write();
        self.inner.publish(
            &mut lane,
            &seg,
            off,
            Kind::Put,
            key,
            value_len,
            body_crc,
            &mut shard,
        )?;
        drop(shard);
        lane.puts += 1;
        self.inner.durable(lane, &seg, opts.durability)
    }

    /// The value of `key`, if present. Checksums are verified unless turned off in the options.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, |v| v.to_vec())
    }

    /// Calls `f` with the value of `key` in place (no copy) and returns its result.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let shard = self.inner.index.shard(key).read();
        let Some(loc) = shard.get(&IndexKey::new(key)) else {
            return Ok(None);
        };
        let value = self.inner.read_value(key, loc)?;
        Ok(Some(f(value)))
    }

    /// Length of the value of `key`, if present (no value read).
    pub fn value_len(&self, key: &[u8]) -> Option<usize> {
        self.inner
            .index
            .shard(key)
            .read()
            .get(&IndexKey::new(key))
            .map(|l| l.value_len as usize)
    }

    /// True if `key` is present.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.inner
            .index
            .shard(key)
            .read()
            .contains_key(&IndexKey::new(key))
    }

    /// Removes `key` with a durable tombstone; returns whether it was present (nothing is
    /// written if it was not).
    pub fn remove(&self, key: &[u8], durability: Durability) -> Result<bool> {
        self.remove_with(key, durability.into())
    }

    /// [`Store::remove`] with all write options.
    pub fn remove_with(&self, key: &[u8], opts: WriteOptions) -> Result<bool> {
        check_key(key)?;
        self.inner.check_poisoned()?;
        if !self.contains(key) {
            self.inner.durable_absence(opts.durability)?;
            return Ok(false);
        }
        let rec_len = record::record_len(key.len(), 0);
        let body_crc = record::body_checksum(key, &[]);
        let (mut lane, seg, off) = self.inner.lane_with_room(rec_len, opts.full_wait, true)?;
        // Safety: unpublished space of the lane's own segment.
        unsafe { seg.write_at(off + HEADER_LEN, key) };
        let mut shard = self.inner.index.shard(key).write();
        if !shard.contains_key(&IndexKey::new(key)) {
            drop(shard);
            drop(lane);
            self.inner.durable_absence(opts.durability)?;
            return Ok(false);
        }
        self.inner.publish(
            &mut lane,
            &seg,
            off,
            Kind::Tombstone,
            key,
            0,
            body_crc,
            &mut shard,
        )?;
        drop(shard);
        lane.removes += 1;
        self.inner.durable(lane, &seg, opts.durability)?;
        Ok(true)
    }

    /// Reserves room for a `len`-byte value under `key` and returns a writable slice in the
    /// store's own memory (DAQDB's Alloc): fill it, then [`Reservation::commit`]. Nothing is
    /// visible or stored until the commit; dropping the reservation discards it. The calling
    /// thread's lane stays locked while the reservation lives.
    pub fn reserve(&self, key: &[u8], len: usize) -> Result<Reservation<'_>> {
        self.reserve_with(key, len, None)
    }

    /// [`Store::reserve`], waiting up to `full_wait` for space when the store is full.
    pub fn reserve_with(
        &self,
        key: &[u8],
        len: usize,
        full_wait: Option<Duration>,
    ) -> Result<Reservation<'_>> {
        check_key(key)?;
        check_value(len)?;
        self.inner.check_poisoned()?;
        let rec_len = record::record_len(key.len(), len);
        let (lane, seg, off) = self.inner.lane_with_room(rec_len, full_wait, false)?;
        // Safety: unpublished space of the lane's own segment.
        unsafe { seg.write_at(off + HEADER_LEN, key) };
        Ok(Reservation {
            inner: &self.inner,
            lane,
            seg,
            off,
            key_len: key.len(),
            value_len: len,
        })
    }

    /// Up to `limit` entries with `from <= key < to` (`to = None`: to the end), in key order,
    /// with their values.
    pub fn range(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner
            .index
            .range(from, to, limit, |k, loc| {
                self.inner.read_value(k.as_bytes(), loc).map(|v| v.to_vec())
            })
            .into_iter()
            .map(|(k, v)| v.map(|v| (k.into_vec(), v)))
            .collect()
    }

    /// Up to `limit` keys with `from <= key < to`, in key order, with their value lengths.
    pub fn range_keys(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, usize)> {
        self.inner
            .index
            .range(from, to, limit, |_, loc| loc.value_len as usize)
            .into_iter()
            .map(|(k, n)| (k.into_vec(), n))
            .collect()
    }

    /// Calls `f` for every live key with its value length and the value's crc32c, in key
    /// order within each index shard (the order across shards is not defined).
    pub fn for_each_checked(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<()> {
        for shard in self.inner.index.shards() {
            let map = shard.read();
            for (k, loc) in map.iter() {
                let v = self.inner.read_value(k.as_bytes(), loc)?;
                f(k.as_bytes(), v);
            }
        }
        Ok(())
    }

    /// Makes every write so far durable (as `Persisted` would have).
    pub fn flush(&self) -> Result<()> {
        self.inner.check_poisoned()?;
        self.inner.persist_all()
    }

    /// Counts, sizes and per-tier power safety.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Seals the active segments, writes their summaries, persists everything and closes.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(handle) = self.maintenance.take() else {
            return Ok(());
        };
        let mut first_err = None;
        for lane in self.inner.lanes.iter() {
            let mut lane = lane.0.lock();
            if let Some(seg) = lane.seg.take() {
                seg.sealed.store(true, Ordering::Release);
                self.inner.send(Job::Seal(seg));
            }
        }
        self.inner.send(Job::Stop);
        if handle.join().is_err() {
            first_err = Some(Error::Poisoned("maintenance thread panicked".into()));
        }
        if let Err(e) = self.inner.persist_all() {
            first_err.get_or_insert(e);
        }
        match first_err {
            Some(e) => Err(e),
            None => self.inner.check_poisoned(),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// A tier directory as a medium, with direct I/O off if no value would use it.
fn file_medium(dir: &Path, domain: Domain, options: &StoreOptions) -> Result<FileMedium> {
    let m = FileMedium::new(dir, domain)?;
    Ok(
        if options.direct_io_min_value_bytes as u64 > MAX_VALUE_LEN {
            m.without_direct_io()
        } else {
            m
        },
    )
}

fn resolve(dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// Space reserved by [`Store::reserve`]: fill [`Reservation::value_mut`], then commit.
pub struct Reservation<'a> {
    inner: &'a Inner,
    lane: MutexGuard<'a, Lane>,
    seg: Arc<Segment>,
    off: usize,
    key_len: usize,
    value_len: usize,
}

impl Reservation<'_> {
    /// The value bytes, in the store's memory. Initially unspecified (not necessarily zero).
    pub fn value_mut(&mut self) -> &mut [u8] {
        // Safety: the range is unpublished space of the segment owned by our locked lane;
        // the exclusive borrow of `self` makes this the only reference to it.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.seg
                    .region
                    .as_ptr()
                    .add(self.off + HEADER_LEN + self.key_len),
                self.value_len,
            )
        }
    }

    /// Publishes the value and returns once `durability` holds.
    pub fn commit(mut self, durability: Durability) -> Result<()> {
        // Safety: our own reserved, fully written range.
        let (key, value) = unsafe {
            let kv = self
                .seg
                .bytes(self.off + HEADER_LEN, self.key_len + self.value_len);
            kv.split_at(self.key_len)
        };
        let body_crc = record::body_checksum(key, value);
        let mut shard = self.inner.index.shard(key).write();
        self.inner.publish(
            &mut self.lane,
            &self.seg,
            self.off,
            Kind::Put,
            key,
            self.value_len,
            body_crc,
            &mut shard,
        )?;
        drop(shard);
        self.lane.puts += 1;
        self.inner.durable(self.lane, &self.seg, durability)
    }
}

impl Inner {
    pub(crate) fn send(&self, job: Job) {
        // The receiver lives until Stop; a send after that has nothing left to do.
        let _ = self.jobs.lock().send(job);
    }

    pub(crate) fn check_poisoned(&self) -> Result<()> {
        if self.is_poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                self.poisoned.lock().clone().unwrap_or_default(),
            ));
        }
        Ok(())
    }

    pub(crate) fn poison(&self, why: &Error) {
        let mut p = self.poisoned.lock();
        if p.is_none() {
            *p = Some(why.to_string());
        }
        self.is_poisoned.store(true, Ordering::Release);
    }

    fn lane(&self) -> MutexGuard<'_, Lane> {
        let i = LANE.with(|l| *l) % self.lanes.len();
        self.lanes[i].0.lock()
    }

    /// This thread's lane, locked, with room for a `rec_len` record: its active segment and
    /// the offset where the record goes. On a full store, waits up to `full_wait` for space
    /// *without* holding the lane. Fix (found by tests/full.rs): the wait used to hold the
    /// lane, so a thread sharing it could not remove anything, and the space the writer waited
    /// for never came (with one lane, never at all).
    pub(crate) fn lane_with_room(
        &self,
        rec_len: usize,
        full_wait: Option<Duration>,
        for_removal: bool,
    ) -> Result<(MutexGuard<'_, Lane>, Arc<Segment>, usize)> {
        let deadline = full_wait.map(|w| Instant::now() + w);
        loop {
            // Read before trying, so space given back meanwhile is not waited for in vain.
            let generation = *self.space.0.lock();
            let mut lane = self.lane();
            match self.room(&mut lane, rec_len, for_removal) {
                Ok((seg, off)) => return Ok((lane, seg, off)),
                Err(e) if e.is_full() => {
                    drop(lane);
                    let remaining = deadline
                        .and_then(|d| d.checked_duration_since(Instant::now()))
                        .filter(|r| !r.is_zero());
                    let Some(remaining) = remaining else {
                        self.counters.full_errors.fetch_add(1, Ordering::Relaxed);
                        return Err(e);
                    };
                    let mut g = self.space.0.lock();
                    if *g == generation {
                        let t = Instant::now();
                        self.space
                            .1
                            .wait_for(&mut g, remaining.min(Duration::from_millis(50)));
                        self.counters.full_waits.record(t.elapsed());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The lane's active segment and the offset where a `rec_len` record goes, rolling to a
    /// new segment when it does not fit; `StoreFull` at once if no tier has room.
    fn room(
        &self,
        lane: &mut Lane,
        rec_len: usize,
        for_removal: bool,
    ) -> Result<(Arc<Segment>, usize)> {
        if let Some(seg) = &lane.seg {
            let end = seg.end.load(Ordering::Relaxed);
            if end + rec_len <= seg.capacity() {
                return Ok((seg.clone(), end));
            }
        }
        let seg_size = self.tiers[0].segment_size;
        let needed = SEGMENT_HEADER_LEN + rec_len;
        let len = if needed <= seg_size {
            seg_size
        } else {
            needed.next_multiple_of(4096)
        };
        let reserve = if for_removal {
            0
        } else {
            self.removal_reserve()
        };
        let started = Instant::now();
        let (tier, (slot, region), pooled) = self.take_region(len, reserve)?;
        if !pooled {
            // The writer made the file itself or waited for one being prepared: a stall.
            self.counters.segment_waits.record(started.elapsed());
        }
        // Wake maintenance now to replace what was taken (it also runs on a timer).
        self.send(Job::Prepare);
        let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
        // Synced watermark 0: the header is persisted with the segment's first records.
        let seg = Arc::new(Segment::new(id, tier, slot, region, SEGMENT_HEADER_LEN, 0));
        if let Err(e) = seg.write_header(now_ns()) {
            self.poison(&e);
            return Err(e);
        }
        self.segments.lock().insert(id, seg.clone());
        if let Some(old) = lane.seg.replace(seg.clone()) {
            old.sealed.store(true, Ordering::Release);
            self.send(Job::Seal(old));
        }
        Ok((seg, SEGMENT_HEADER_LEN))
    }

    /// Standard segments kept free for tombstones: removals must work on a full store.
    pub(crate) fn removal_reserve(&self) -> usize {
        self.lanes.len().min(2)
    }

    /// A file of `len` bytes from the first tier with room, and whether it came from a pool
    /// (no wait); `StoreFull` if no tier has room.
    fn take_region(&self, len: usize, reserve: usize) -> Result<(usize, SlotRegion, bool)> {
        for tier in &self.tiers {
            if let Some((r, pooled)) = tier.take(len, reserve)? {
                return Ok((tier.index, r, pooled));
            }
        }
        Err(Error::StoreFull {
            needed_bytes: len as u64,
            capacity_bytes: self
                .tiers
                .iter()
                .map(|t| t.capacity_bytes.max(t.used_bytes()))
                .sum(),
        })
    }

    /// Writes the header of a record whose key and value are in place, and makes it visible.
    /// A fragment put is first admitted by the event table (a fragment of an acknowledged
    /// event is refused, unpublished), and accounted to its event after.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one record, kept apart to avoid copies"
    )]
    fn publish(
        &self,
        lane: &mut Lane, // proof that the caller holds the lane owning `seg`
        seg: &Arc<Segment>,
        off: usize,
        kind: Kind,
        key: &[u8],
        value_len: usize,
        body_crc: u32,
        shard: &mut ShardMap,
    ) -> Result<()> {
        // Event work only where the store tracks events (checked under the shard lock, which
        // the tracking build also takes: see `Events::track`).
        let fragment = shard.events.tracked && self.events.is_fragment(key);
        let probe = fragment.then(|| IndexKey::new(&key[..self.events.prefix_len]));
        if let (Some(probe), Kind::Put) = (&probe, kind) {
            self.events.admit(&shard.events, key, probe)?;
        }
        let lsn = self.write_header(lane, seg, off, kind, key, value_len, body_crc)?;
        let len = record::record_len(key.len(), value_len) as u64;
        let old = match kind {
            Kind::Put => {
                seg.live_records.fetch_add(1, Ordering::AcqRel);
                seg.live_bytes.fetch_add(len, Ordering::Relaxed);
                let old = shard.keys.insert(
                    IndexKey::new(key),
                    Loc {
                        seg: seg.clone(),
                        offset: off as u32,
                        value_len: value_len as u32,
                        lsn,
                    },
                );
                if let Some(probe) = probe {
                    let no = self.index.event_shard_no(probe.as_bytes());
                    self.events
                        .on_put(&mut shard.events, no, key, probe, value_len, old.as_ref());
                }
                old
            }
            Kind::Tombstone => {
                seg.dead_bytes.fetch_add(len, Ordering::Relaxed);
                let old = shard.keys.remove(&IndexKey::new(key));
                if let (true, Some(o)) = (fragment, &old) {
                    if let Some(mark) = self.events.on_remove(&mut shard.events, key, o) {
                        self.retire(&mark.seg, mark.rec_len);
                    }
                }
                old
            }
            Kind::EventRemove | Kind::EventMark => {
                return Err(Error::InvalidArgument(
                    "event records are written by the event calls, not as keys".into(),
                ))
            }
        };
        if let Some(old) = old {
            // Pin before the old segment can be seen dead, so the recycler cannot miss us.
            recovery::pin(seg, &old.seg);
            self.retire(
                &old.seg,
                record::record_len(key.len(), old.value_len as usize) as u64,
            );
        }
        Ok(())
    }

    /// Writes the header of the record at `off` (key and value in place), takes its lsn and
    /// moves the segment's end past it. Called under the index shard lock of the key, so per
    /// key (and per event) the lsn order is the index order.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one record, kept apart to avoid copies"
    )]
    pub(crate) fn write_header(
        &self,
        _lane: &mut Lane,
        seg: &Arc<Segment>,
        off: usize,
        kind: Kind,
        key: &[u8],
        value_len: usize,
        body_crc: u32,
    ) -> Result<u64> {
        let lsn = self.next_lsn.fetch_add(1, Ordering::Relaxed);
        let header = record::encode_header_with(seg.id, kind, key.len(), value_len, lsn, body_crc);
        let rec_len = record::record_len(key.len(), value_len);
        if is_bulk(value_len) {
            // Through the medium like the value (pwrite on block tiers), so the header never
            // waits on a page under write-back. A failure leaves the record unpublished.
            // Safety: the header slot of our unpublished record.
            if let Err(e) = unsafe { seg.write_body(off, &header, true) } {
                self.poison(&e);
                return Err(e);
            }
        } else {
            // Safety: the header slot of our unpublished record.
            unsafe { seg.write_at(off, &header) };
        }
        seg.end.store(off + rec_len, Ordering::Release);
        Ok(lsn)
    }

    /// A live record of `rec_len` bytes in `seg` became dead.
    pub(crate) fn retire(&self, seg: &Arc<Segment>, rec_len: u64) {
        seg.live_bytes.fetch_sub(rec_len, Ordering::Relaxed);
        seg.dead_bytes.fetch_add(rec_len, Ordering::Relaxed);
        if seg.live_records.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.maybe_reclaim(seg);
        }
    }

    /// A removal found nothing to remove: with `Persisted`, the absence it reports must
    /// survive a power cut too, but the record that made the key absent (a `Memory` tombstone,
    /// possibly another lane's) may not be durable yet, so persist everything published.
    /// Fix (found by tests/crash_points.rs): `remove` used to answer `Ok(false)` at once, and
    /// a power cut then revived a key whose Persisted removal had been acknowledged.
    pub(crate) fn durable_absence(&self, durability: Durability) -> Result<()> {
        if durability == Durability::Memory {
            return Ok(());
        }
        self.persist_all()
    }

    /// Makes the published record durable as asked; consumes the lane guard.
    pub(crate) fn durable(
        &self,
        lane: MutexGuard<'_, Lane>,
        seg: &Arc<Segment>,
        durability: Durability,
    ) -> Result<()> {
        if durability == Durability::Memory {
            return Ok(());
        }
        let result = match self.tiers[seg.tier].domain() {
            Domain::Volatile => Ok(()),
            // Cache-line flushes are cheap: done under the lane lock, which keeps the durable
            // part of the segment a prefix without a coordinator.
            Domain::Pmem => {
                let r = seg.persist_written().map(|_| ());
                drop(lane);
                r
            }
            Domain::Block => {
                drop(lane);
                let t = Instant::now();
                let r = self.commit.persist(seg);
                self.counters.sync_waits.record(t.elapsed());
                r
            }
        };
        if let Err(e) = &result {
            self.poison(e);
        }
        result
    }

    pub(crate) fn read_value<'s>(&self, key: &[u8], loc: &'s Loc) -> Result<&'s [u8]> {
        let rec_len = record::record_len(key.len(), loc.value_len as usize);
        // Safety: `loc` came from the index under a shard lock the caller still holds, so the
        // record is published and its segment cannot be recycled meanwhile.
        let rec = unsafe { loc.seg.bytes(loc.offset as usize, rec_len) };
        if self.verify_on_read {
            let ok = record::parse_header(rec).is_ok_and(|h| record::verify(loc.seg.id, rec, &h));
            if !ok {
                return Err(Error::ChecksumMismatch {
                    file: loc.seg.path().clone(),
                    offset: loc.offset as u64,
                });
            }
        }
        let start = HEADER_LEN + key.len();
        Ok(&rec[start..start + loc.value_len as usize])
    }

    pub(crate) fn maybe_reclaim(&self, seg: &Arc<Segment>) {
        if seg.is_reclaimable() {
            self.send(Job::Reclaim(seg.id));
        }
    }

    /// Persists every segment with unpersisted records (active and sealed).
    pub(crate) fn persist_all(&self) -> Result<()> {
        let segs: Vec<Arc<Segment>> = self.segments.lock().values().cloned().collect();
        for s in segs {
            if !s.is_synced() {
                if let Err(e) = s.persist_written() {
                    self.poison(&e);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn stats(&self) -> Stats {
        let segs: Vec<Arc<Segment>> = self.segments.lock().values().cloned().collect();
        let mut tiers: Vec<TierStats> = self
            .tiers
            .iter()
            .map(|t| {
                let (free, ready) = t.pooled();
                TierStats {
                    path: t.medium.path().to_path_buf(),
                    domain: t.domain(),
                    survives_power_cut: t.medium.survives_power_cut(),
                    bulk_write_path: t.medium.bulk_write_path(),
                    capacity_bytes: t.capacity_bytes,
                    file_bytes: t.used_bytes(),
                    segments: 0,
                    segments_free: free,
                    segments_ready: ready,
                    live_bytes: 0,
                    dead_bytes: 0,
                }
            })
            .collect();
        for s in &segs {
            let t = &mut tiers[s.tier];
            t.segments += 1;
            t.live_bytes += s.live_bytes.load(Ordering::Relaxed);
            t.dead_bytes += s.dead_bytes.load(Ordering::Relaxed);
        }
        Stats {
            entries: self.index.len() as u64,
            live_bytes: tiers.iter().map(|t| t.live_bytes).sum(),
            dead_bytes: tiers.iter().map(|t| t.dead_bytes).sum(),
            segments: segs.len(),
            capacity_bytes: tiers.iter().map(|t| t.capacity_bytes).sum(),
            file_bytes: tiers.iter().map(|t| t.file_bytes).sum(),
            puts: self.lanes.iter().map(|l| l.0.lock().puts).sum(),
            removes: self.lanes.iter().map(|l| l.0.lock().removes).sum(),
            full_errors: self.counters.full_errors.load(Ordering::Relaxed),
            waits: crate::stats::Waits {
                segment: self.counters.segment_waits.get(),
                full: self.counters.full_waits.get(),
                sync: self.counters.sync_waits.get(),
            },
            layout: self.layout.to_string(),
            events: {
                self.events.sweep(&self.index, Instant::now());
                self.events.counts(&self.index)
            },
            poisoned: self.poisoned.lock().clone(),
            tiers,
        }
    }
}

// The store is shared between threads; the compiler checks it stays so.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
};
