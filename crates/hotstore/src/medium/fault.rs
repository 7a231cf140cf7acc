//! [`FaultMedium`]: an in-memory medium for crash and fault tests.
//!
//! Every region has two images: the *live* one the store writes through its pointer (what a
//! running process sees in its page cache), and the *durable* one, which receives exactly the
//! byte ranges passed to `persist`. [`FaultMedium::crash`] returns a new medium holding only the
//! durable images (a power cut), optionally with random 512-byte sectors of unpersisted data
//! mixed in (a torn, out-of-order write-back). Faults: a capacity that makes creation fail with
//! ENOSPC, and persist or file-write failures from the N-th call on.

use super::{Domain, Medium, Region};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Faults to inject; change them at any time through [`FaultMedium::faults`].
#[derive(Debug, Default)]
pub struct FaultConfig {
    /// Total bytes of regions this medium may hold; 0 means unlimited.
    pub capacity_bytes: AtomicU64,
    /// Persist calls succeed while fewer than this many have been made; 0 means never fail.
    pub fail_persist_from: AtomicU64,
    /// Persist calls made so far.
    pub persist_calls: AtomicU64,
    /// `write_file` calls fail from this call number on (1-based); 0 means never fail.
    pub fail_write_file_from: AtomicU64,
    /// `write_file` calls made so far.
    pub write_file_calls: AtomicU64,
    /// If set, only files whose name ends with this fail from `fail_write_file_from` on
    /// (e.g. `.sum`: summaries fail, the metadata with its list of files does not).
    pub fail_write_file_suffix: Mutex<Option<String>>,
    /// Injected `write_file` failures say "no space left on device" (ENOSPC), as a full file
    /// system answers, instead of a generic error.
    pub write_file_no_space: AtomicBool,
    /// Bytes written by block writes (direct records) so far.
    pub block_bytes_written: AtomicU64,
    /// Bulk writes (`Region::write`) are paced to this many bytes per second across the whole
    /// medium, as a slow device would take them; 0 means unlimited.
    pub write_bytes_per_sec: AtomicU64,
    /// While set, persist calls wait until it is cleared: a test holds a sync in flight
    /// while it writes.
    pub hold_persists: AtomicBool,
    /// Persist calls waiting on [`FaultConfig::hold_persists`] now.
    pub persists_held: AtomicU64,
    /// When the paced device is next free.
    write_clock: Mutex<Option<std::time::Instant>>,
}

impl FaultConfig {
    /// Waits as long as a device writing `write_bytes_per_sec` would take for `len` more bytes.
    fn pace(&self, len: usize) {
        let rate = self.write_bytes_per_sec.load(Ordering::Relaxed);
        if rate == 0 {
            return;
        }
        let now = std::time::Instant::now();
        let done = {
            let mut clock = self.write_clock.lock();
            let start = clock.filter(|t| *t > now).unwrap_or(now);
            let done = start + std::time::Duration::from_secs_f64(len as f64 / rate as f64);
            *clock = Some(done);
            done
        };
        if let Some(wait) = done.checked_duration_since(now) {
            std::thread::sleep(wait);
        }
    }
}

struct MemRegion {
    path: PathBuf,
    ptr: *mut u8,
    len: usize,
    durable: Mutex<Vec<u8>>,
    faults: Arc<FaultConfig>,
}

// Safety: the live image is plain heap memory; the engine coordinates access to it as for a
// mapped file.
unsafe impl Send for MemRegion {}
// Safety: as above.
unsafe impl Sync for MemRegion {}

impl MemRegion {
    fn new(path: PathBuf, contents: Vec<u8>, faults: Arc<FaultConfig>) -> Self {
        Self::with_images(path, contents.clone(), contents, faults)
    }

    fn with_images(
        path: PathBuf,
        live: Vec<u8>,
        durable: Vec<u8>,
        faults: Arc<FaultConfig>,
    ) -> Self {
        assert_eq!(
            live.len(),
            durable.len(),
            "images of one region differ in length"
        );
        let len = live.len();
        let ptr = Box::into_raw(live.into_boxed_slice()) as *mut u8;
        MemRegion {
            path,
            ptr,
            len,
            durable: Mutex::new(durable),
            faults,
        }
    }

    fn live(&self) -> &[u8] {
        // Safety: `ptr` owns `len` bytes for our lifetime. Reading bytes another thread writes
        // is the same race a mapped file has; tests only crash a quiescent store.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // Safety: reconstructs the box made in `new`, exactly once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

impl Region for MemRegion {
    fn path(&self) -> &PathBuf {
        &self.path
    }
    fn len(&self) -> usize {
        self.len
    }
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    unsafe fn write(&self, offset: usize, bytes: &[u8], _bulk: bool) -> Result<()> {
        assert!(offset + bytes.len() <= self.len, "write past the end");
        self.faults.pace(bytes.len());
        // Under the image lock, so a snapshot sees all of this write or none of it (as a
        // kill -9 practically always does for a 64-byte header; a snapshot taken in the middle
        // of a header write made recovery see a torn header no real crash leaves).
        let _images = self.durable.lock();
        // Safety: in bounds (asserted); the caller owns the range. `copy`, not
        // `copy_nonoverlapping`: a direct put writes its first block's published prefix back
        // from the region itself (source = destination), undefined behaviour for the latter
        // (found in review: debug builds aborted in tests/crash_points.rs).
        unsafe { std::ptr::copy(bytes.as_ptr(), self.ptr.add(offset), bytes.len()) };
        Ok(())
    }

    /// Block writes land like any write (in the live image; a persist makes them durable):
    /// the crash model of a direct write into a device's volatile cache. Saying yes here runs
    /// the direct record format through every crash and damage test with large values.
    fn writes_blocks(&self) -> bool {
        true
    }

    unsafe fn write_blocks(&self, offset: usize, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            offset.is_multiple_of(4096) && total.is_multiple_of(4096),
            "unaligned block write"
        );
        self.faults
            .block_bytes_written
            .fetch_add(total as u64, Ordering::Relaxed);
        // Safety: the caller's contract covers the whole range.
        unsafe { self.write_parts(offset, parts, true) }
    }

    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        assert!(offset + len <= self.len, "persist past the end");
        if self.faults.hold_persists.load(Ordering::SeqCst) {
            self.faults.persists_held.fetch_add(1, Ordering::SeqCst);
            while self.faults.hold_persists.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.faults.persists_held.fetch_sub(1, Ordering::SeqCst);
        }
        let n = self.faults.persist_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let from = self.faults.fail_persist_from.load(Ordering::SeqCst);
        if from != 0 && n >= from {
            return Err(Error::io(
                "persist",
                &self.path,
                std::io::Error::other("injected persist failure"),
            ));
        }
        self.durable.lock()[offset..offset + len]
            .copy_from_slice(&self.live()[offset..offset + len]);
        Ok(())
    }
}

#[derive(Default)]
struct State {
    regions: BTreeMap<String, Arc<MemRegion>>,
    files: BTreeMap<String, Vec<u8>>,
    /// Small files replaced without a sync: what a reader sees (before `files`) until a
    /// power cut drops them; a process crash keeps them.
    unsynced_files: BTreeMap<String, Vec<u8>>,
}

/// An in-memory, fault-injecting medium (see the module docs).
pub struct FaultMedium {
    path: PathBuf,
    domain: Domain,
    state: Mutex<State>,
    faults: Arc<FaultConfig>,
    locked: Arc<Mutex<bool>>,
    /// The simulated machine's boot ([`Medium::boot_id`]): a power cut starts a new one.
    boot: u64,
}

impl std::fmt::Debug for FaultMedium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultMedium({})", self.path.display())
    }
}

impl FaultMedium {
    /// An empty medium that behaves as a `block` tier (persist is what survives).
    pub fn new(name: &str) -> Arc<Self> {
        Self::with_domain(name, Domain::Block)
    }

    /// An empty medium declaring `domain` (persist still copies to the simulated device).
    pub fn with_domain(name: &str, domain: Domain) -> Arc<Self> {
        Arc::new(FaultMedium {
            path: PathBuf::from(format!("mem:{name}")),
            domain,
            state: Mutex::new(State::default()),
            faults: Arc::new(FaultConfig::default()),
            locked: Arc::new(Mutex::new(false)),
            boot: 1,
        })
    }

    /// The fault switches.
    pub fn faults(&self) -> &FaultConfig {
        &self.faults
    }

    /// Bytes currently held in regions.
    pub fn used_bytes(&self) -> u64 {
        self.state
            .lock()
            .regions
            .values()
            .map(|r| r.len as u64)
            .sum()
    }

    /// A new medium as the device would hold it after a power cut: durable images only. With
    /// `torn_seed`, each unpersisted 512-byte sector of the live image survives with
    /// probability 1/2 (deterministic in the seed), as an out-of-order write-back would leave it.
    pub fn crash(&self, torn_seed: Option<u64>) -> Arc<Self> {
        let mut rng = torn_seed.unwrap_or(0) | 1;
        self.crash_keeping(|_, _| {
            // xorshift64: a tiny deterministic generator is enough here.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            torn_seed.is_some() && rng & 1 == 1
        })
    }

    /// A power cut that also keeps the unpersisted 512-byte sectors `keep(file, offset)`
    /// picks, as an out-of-order write-back would have: the rest of each file is as last
    /// persisted. `keep` is asked for every sector of every file, in order.
    pub fn crash_keeping(&self, mut keep: impl FnMut(&Path, usize) -> bool) -> Arc<Self> {
        let state = self.state.lock();
        let faults = Arc::new(FaultConfig::default());
        let mut regions = BTreeMap::new();
        // Fix (found by tests/crash_points.rs): hold every durable image while copying, so the
        // copy is one instant of the device. Copied region by region, a persist that landed
        // between two copies (say, a file freed after the records shadowing it were persisted
        // elsewhere) gave a state no power cut can leave.
        let durable: Vec<_> = state.regions.values().map(|r| r.durable.lock()).collect();
        for ((name, r), durable) in state.regions.iter().zip(&durable) {
            let mut image = (**durable).clone();
            let live = r.live();
            for (i, sector) in image.chunks_mut(512).enumerate() {
                let start = i * 512;
                if keep(&r.path, start) {
                    sector.copy_from_slice(&live[start..start + sector.len()]);
                }
            }
            regions.insert(
                name.clone(),
                Arc::new(MemRegion::new(r.path.clone(), image, faults.clone())),
            );
        }
        Arc::new(FaultMedium {
            path: self.path.clone(),
            domain: self.domain,
            state: Mutex::new(State {
                regions,
                files: state.files.clone(),
                unsynced_files: BTreeMap::new(),
            }),
            faults,
            locked: Arc::new(Mutex::new(false)),
            boot: self.boot + 1,
        })
    }

    /// A new medium holding everything written so far, persisted or not: what the disk holds
    /// after the *process* is killed (the page cache survives). The device itself still holds
    /// only what was persisted: a later [`FaultMedium::crash`] of the new medium loses what
    /// the restarted store did not persist itself. (Fix, found by tests/crash_points.rs: this
    /// used to mark everything persisted, which hid that recovery trusted unpersisted tails.)
    pub fn process_crash(&self) -> Arc<Self> {
        let state = self.state.lock();
        let faults = Arc::new(FaultConfig::default());
        // Every image lock at once, as in `crash`: one instant of the device and of the page
        // cache (writes through `Region::write`, i.e. segment headers, take the same locks).
        // Copied region by region, the device could show a file freed after the persist that
        // made its records dead, but that persist itself not yet (found by tests/crash_points.rs).
        let images: Vec<_> = state.regions.values().map(|r| r.durable.lock()).collect();
        let regions = state
            .regions
            .iter()
            .zip(&images)
            .map(|((n, r), durable)| {
                let (live, durable) = (r.live().to_vec(), (**durable).clone());
                (
                    n.clone(),
                    Arc::new(MemRegion::with_images(
                        r.path.clone(),
                        live,
                        durable,
                        faults.clone(),
                    )),
                )
            })
            .collect();
        Arc::new(FaultMedium {
            path: self.path.clone(),
            domain: self.domain,
            state: Mutex::new(State {
                regions,
                files: state.files.clone(),
                unsynced_files: state.unsynced_files.clone(),
            }),
            faults,
            locked: Arc::new(Mutex::new(false)),
            boot: self.boot,
        })
    }

    /// Applies `f` to the durable and live images of region `name` (for damage tests).
    pub fn tamper(&self, name: &str, f: impl Fn(&mut [u8])) -> bool {
        let state = self.state.lock();
        let Some(r) = state.regions.get(name) else {
            return false;
        };
        f(&mut r.durable.lock());
        // Safety: tests call this on a closed store; nothing else touches the live image.
        f(unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) });
        true
    }

    /// A copy of region `name` as the running process sees it (persisted or not).
    pub fn live_image(&self, name: &str) -> Option<Vec<u8>> {
        self.state
            .lock()
            .regions
            .get(name)
            .map(|r| r.live().to_vec())
    }

    /// Names of all regions.
    pub fn region_names(&self) -> Vec<String> {
        self.state.lock().regions.keys().cloned().collect()
    }
}

impl Medium for FaultMedium {
    fn path(&self) -> &Path {
        &self.path
    }
    fn domain(&self) -> Domain {
        self.domain
    }
    fn survives_power_cut(&self) -> bool {
        true
    }
    fn create_region(&self, name: &str, len: usize) -> Result<Arc<dyn Region>> {
        let mut state = self.state.lock();
        let path = self.path.join(name);
        if state.regions.contains_key(name) {
            return Err(Error::io(
                "create segment",
                path,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        let cap = self.faults.capacity_bytes.load(Ordering::SeqCst);
        let used: u64 = state.regions.values().map(|r| r.len as u64).sum();
        if cap != 0 && used + len as u64 > cap {
            return Err(Error::io(
                "fallocate",
                path,
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let r = Arc::new(MemRegion::new(path, vec![0u8; len], self.faults.clone()));
        state.regions.insert(name.to_string(), r.clone());
        Ok(r)
    }
    fn open_region(&self, name: &str) -> Result<Arc<dyn Region>> {
        let state = self.state.lock();
        match state.regions.get(name) {
            Some(r) => Ok(r.clone()),
            None => Err(Error::io(
                "open segment",
                self.path.join(name),
                std::io::ErrorKind::NotFound.into(),
            )),
        }
    }
    fn list(&self) -> Result<Vec<String>> {
        let state = self.state.lock();
        Ok(state
            .regions
            .keys()
            .chain(state.files.keys())
            .chain(
                state
                    .unsynced_files
                    .keys()
                    .filter(|k| !state.files.contains_key(*k)),
            )
            .cloned()
            .collect())
    }
    fn remove(&self, name: &str) -> Result<()> {
        let mut state = self.state.lock();
        state.regions.remove(name);
        state.files.remove(name);
        state.unsynced_files.remove(name);
        Ok(())
    }
    fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let state = self.state.lock();
        Ok(state
            .unsynced_files
            .get(name)
            .or_else(|| state.files.get(name))
            .cloned())
    }
    fn write_file(&self, name: &str, data: &[u8]) -> Result<()> {
        let n = self.faults.write_file_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let from = self.faults.fail_write_file_from.load(Ordering::SeqCst);
        let named = match &*self.faults.fail_write_file_suffix.lock() {
            Some(suffix) => name.ends_with(suffix.as_str()),
            None => true,
        };
        if from != 0 && n >= from && named {
            let e = if self.faults.write_file_no_space.load(Ordering::SeqCst) {
                std::io::Error::from_raw_os_error(libc::ENOSPC)
            } else {
                std::io::Error::other("injected write failure")
            };
            return Err(Error::io("write", self.path.join(format!("{name}.tmp")), e));
        }
        let mut state = self.state.lock();
        state.unsynced_files.remove(name);
        state.files.insert(name.to_string(), data.to_vec());
        Ok(())
    }
    fn write_file_unsynced(&self, name: &str, data: &[u8]) -> Result<()> {
        self.state
            .lock()
            .unsynced_files
            .insert(name.to_string(), data.to_vec());
        Ok(())
    }
    fn free_space_bytes(&self) -> Option<u64> {
        match self.faults.capacity_bytes.load(Ordering::Relaxed) {
            0 => None,
            cap => Some(cap.saturating_sub(self.used_bytes())),
        }
    }
    fn boot_id(&self) -> u64 {
        self.boot
    }

    fn lock(&self) -> Result<Box<dyn Any + Send + Sync>> {
        let mut l = self.locked.lock();
        if *l {
            return Err(Error::Locked(self.path.clone(), String::new()));
        }
        *l = true;
        Ok(Box::new(LockGuard(self.locked.clone())))
    }
}

struct LockGuard(Arc<Mutex<bool>>);
impl Drop for LockGuard {
    fn drop(&mut self) {
        *self.0.lock() = false;
    }
}
