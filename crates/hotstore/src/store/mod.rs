//! The store: the handle users hold and the state it shares with the maintenance thread.
//! By concern: `open` (opening and recovery), `lanes` (lanes and space), `write` (the write
//! path), `read` (the read path), `durability` (making writes durable).
//!
//! Write path (`put`): checksum key and value (no lock) → lock this thread's lane (its own
//! active segment; uncontended while threads ≤ lanes) → copy key and value into the mapped
//! segment → lock the key's index shard → take an lsn, write the header, publish, update the
//! index → unlock → make durable as asked. Nothing shared is locked for the copy, and the
//! index shard is held only for a header write and a B-tree insert.

mod durability;
mod lanes;
mod open;
mod read;
mod relocate;
mod upkeep;
mod write;

pub use read::ValueRef;
pub(crate) use read::{Pinned, PINNED_MAX};
pub use write::{CommitFailed, Reservation};

use crate::commit::GroupCommit;
use crate::error::{Error, Result};
use crate::events::acked::AckedSet;
use crate::events::policy::Policies;
use crate::events::Events;
use crate::events::{EventIndex as Index, EventShardMap as ShardMap};
use crate::index::{IndexKey, Loc, NewestLsn};
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
    /// Bytes of records this lane's users wrote.
    pub(crate) bytes: u64,
}

/// How long [`Store::short_of_room`] stays true after a write found no room.
pub const SHORT_OF_ROOM_FOR: Duration = Duration::from_secs(1);

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
    /// Direct puts whose first block was written again under a newer lsn (`put_direct`).
    pub(crate) direct_rewrites: AtomicU64,
    /// When a write last found no room ([`crate::clock::mono_ms`]; 0: never): see
    /// [`Store::short_of_room`].
    pub(crate) short_of_room_at_ms: AtomicU64,
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
    /// Every write is acknowledged only after a flush (`Store::set_acknowledged_after_flush`):
    /// `Memory` writes carry the persisted flag too.
    pub(crate) acked_after_flush: AtomicBool,
    pub(crate) tiers: Vec<Tier>,
    pub(crate) index: Index,
    pub(crate) events: Events,
    pub(crate) lanes: Box<[PaddedLane]>,
    pub(crate) segments: Mutex<HashMap<u64, Arc<Segment>>>,
    pub(crate) next_segment_id: AtomicU64,
    /// The next record lsn. READY numbers come from the same sequence (`Events` holds a
    /// clone), so a put that makes its event READY gives it its own lsn, with no second
    /// store-wide counter on the put path.
    pub(crate) next_lsn: Arc<AtomicU64>,
    pub(crate) commit: GroupCommit,
    pub(crate) poisoned: Mutex<Option<String>>,
    pub(crate) is_poisoned: AtomicBool,
    pub(crate) jobs: Mutex<Sender<Job>>,
    /// Signalled when space is given back (for writers waiting on a full store).
    pub(crate) space: (Mutex<u64>, Condvar),
    /// Relocation and offload (see `relocate`).
    pub(crate) relocator: relocate::Relocator,
    /// Offload a tier's oldest data to the next tier once its records fill this fraction of
    /// its capacity (`None`: never).
    pub(crate) offload_high_water: Option<f64>,
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

    /// True if a write found no room within the last [`SHORT_OF_ROOM_FOR`]: writes may then
    /// wait while maintenance relocates records to free space (tens of milliseconds per
    /// segment moved). A server checks it to run requests where such a wait holds no other
    /// client. One relaxed load while no write has ever found the store full.
    pub fn short_of_room(&self) -> bool {
        let at = self
            .inner
            .counters
            .short_of_room_at_ms
            .load(Ordering::Relaxed);
        at != 0 && crate::clock::mono_ms().saturating_sub(at) < SHORT_OF_ROOM_FOR.as_millis() as u64
    }

    /// Counts, sizes and per-tier power safety.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Relocates the live records of every segment that has dead space, so its file is
    /// freed, and returns the bytes moved. `progress` is called after each step with the bytes
    /// moved so far and the dead bytes left. Runs on the maintenance thread (writers may go
    /// on meanwhile); active segments are sealed, so the next writes start new ones.
    pub fn compact(&self, progress: impl FnMut(u64, u64) + Send + 'static) -> Result<u64> {
        self.inner.check_poisoned()?;
        let (tx, rx) = std::sync::mpsc::channel();
        self.inner.send(Job::Compact(Box::new(progress), tx));
        rx.recv()
            .map_err(|_| Error::Poisoned("maintenance thread stopped during compaction".into()))?
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
        // Relocation's open segments only once the maintenance thread (which relocates) has
        // stopped. Fix (found by tests/reopen.rs under load): taken before, a relocation
        // still running took a new segment after them, which nobody sealed, so it had no
        // summary and the next open scanned it.
        for seg in self.inner.relocator.take_active() {
            seg.sealed.store(true, Ordering::Release);
            upkeep::seal_now(&self.inner, &seg);
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

    pub(crate) fn maybe_reclaim(&self, seg: &Arc<Segment>) {
        if seg.is_reclaimable() {
            self.send(Job::Reclaim(seg.id));
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let segs: Vec<Arc<Segment>> = self.segments.lock().values().cloned().collect();
        let mut tiers: Vec<TierStats> = self
            .tiers
            .iter()
            .map(|t| {
                let (free, ready) = t.pooled();
                let moves = &self.relocator.per_tier[t.index];
                let offload_high_water = self
                    .offload_high_water
                    .filter(|_| t.capacity_bytes > 0 && t.index + 1 < self.tiers.len());
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
                    offload_high_water,
                    offloading: false,
                    relocated_bytes: moves.relocated.load(Ordering::Relaxed),
                    offloaded_out_bytes: moves.offloaded_out.load(Ordering::Relaxed),
                    offloaded_in_bytes: moves.offloaded_in.load(Ordering::Relaxed),
                    created: t.created(),
                }
            })
            .collect();
        for s in &segs {
            let t = &mut tiers[s.tier];
            t.segments += 1;
            t.live_bytes += s.live_bytes.load(Ordering::Relaxed);
            t.dead_bytes += s.dead_bytes.load(Ordering::Relaxed);
        }
        for t in &mut tiers {
            t.offloading = t.offload_high_water.is_some_and(|h| {
                (t.live_bytes + t.dead_bytes) as f64 >= h * t.capacity_bytes as f64
            });
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
            direct_rewrites: self.counters.direct_rewrites.load(Ordering::Relaxed),
            waits: crate::stats::Waits {
                segment: self.counters.segment_waits.get(),
                full: self.counters.full_waits.get(),
                sync: self.counters.sync_waits.get(),
            },
            relocation: crate::stats::Relocation {
                records: self.relocator.records.load(Ordering::Relaxed),
                bytes: self.relocator.bytes.load(Ordering::Relaxed),
                offloaded_records: self.relocator.offloaded_records.load(Ordering::Relaxed),
                offloaded_bytes: self.relocator.offloaded_bytes.load(Ordering::Relaxed),
                groups: self.relocator.groups.load(Ordering::Relaxed),
                forwarded_records: self.relocator.forwarded_records.load(Ordering::Relaxed),
                errors: self.relocator.errors.load(Ordering::Relaxed),
                last_error: self.relocator.last_error.lock().clone(),
            },
            written_bytes: self.lanes.iter().map(|l| l.0.lock().bytes).sum(),
            reserve_bytes: self.reserve_shown(),
            guaranteed_live_bytes: self.guaranteed_live_bytes(),
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
