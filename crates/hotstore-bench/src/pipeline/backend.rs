//! Where the pipeline's chunks live: plain files (O_DIRECT on the disk, through the page
//! cache, or on tmpfs) and hotstore (a memory tier over a disk tier, or the disk tier alone).

use super::Kind;
use crate::device::layout::ALIGN;
use crate::scratch::ScratchDir;
use crate::{Error, Result};
use hotstore::{Durability, FragmentKey, Store, TierSpec};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Store options of the pipeline's stores.
#[derive(Debug, Clone)]
pub struct StoreSetup {
    /// Capacity of the memory tier of `tiered`.
    pub fast_capacity: u64,
    /// Offload high-water mark of the memory tier while the pipeline runs.
    pub offload_high_water: f64,
    /// Writer lanes (one per worker at least).
    pub lanes: usize,
    /// Segment file size of both stores ([`segment_size_for`]).
    pub segment_size: usize,
}

/// A segment size whose full segments the engine can offload. The background sweep moves a
/// group only if `live + (1 + ceil(live / (file - max_record))) * max_record` fits its 64 MiB
/// budget (`relocation::room_to_move`): a full default 64 MiB segment of records over a few
/// KiB never does (found by this benchmark; see docs/benchmarks.md). So: as many chunks of
/// `chunk_bytes` per segment as keep that under 60 MiB (at least 2: a segment of one large
/// record never fits either), and at most a quarter of the memory tier per segment. (The
/// engine fits a new store's segments to at most 1/16 of its first tier: with a small memory
/// tier they are smaller than asked, down to less than a chunk; such chunks get files of their
/// own, which offload moves as well: see `relocation::room_to_move`.)
pub fn segment_size_for(chunk_bytes: u64, fast_capacity: u64) -> usize {
    const SLACK: u64 = 8 << 10; // record header, key, alignment
    let per = chunk_bytes + SLACK;
    // At least 2: with one record per file the engine counts a whole record of waste per
    // few KiB of tail, and never moves it.
    let mut n = ((60u64 << 20) / per).saturating_sub(3).max(2);
    n = n.min(fast_capacity / (4 * per)).max(2);
    let bytes = (4096 + n * per).next_multiple_of(4096);
    bytes.clamp(
        hotstore::MIN_SEGMENT_SIZE as u64,
        hotstore::MAX_SEGMENT_SIZE as u64,
    ) as usize
}

/// What the drain of `tiered` found: how long until the memory tier held no live record
/// (everything on the disk tier), from the end of the makespan.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    /// Seconds from the end of the makespan until the memory tier was empty (or the wait gave
    /// up: then `left_bytes` > 0).
    pub secs: f64,
    /// Live bytes still only in the memory tier when the wait ended (0: all on disk).
    pub left_bytes: u64,
    /// The engine's last background relocation error, if the wait gave up.
    pub why: Option<String>,
}

/// Bytes the memory tier of `tiered` moved to the disk during the makespan, and what was in
/// each tier at its end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TierFigures {
    /// Bytes offloaded from the memory tier to the disk tier while the pipeline ran.
    pub offloaded_bytes: u64,
    /// Live bytes in each tier at the end of the makespan.
    pub live_bytes: Vec<u64>,
}

/// One configuration's storage.
pub enum Backend {
    /// Plain files, one per chunk and iteration.
    Files {
        /// The directory (removed at the end).
        dir: ScratchDir,
        /// O_DIRECT reads and writes (lengths padded to [`ALIGN`]).
        direct: bool,
        /// fdatasync after each output file.
        sync_each: bool,
        /// fdatasync the final iteration's files at the end (counted in the makespan), and
        /// flush and drop the initial image from the page cache before the start.
        sync_at_end: bool,
    },
    /// hotstore.
    Store {
        /// `None` only while reopening (boxed: a store is much larger than the files' variant).
        store: Box<Option<Store>>,
        /// Directories (removed at the end, after the store is closed).
        _dirs: Vec<ScratchDir>,
        /// How it was opened.
        builder: Box<dyn Fn(f64) -> hotstore::StoreOptions + Send + Sync>,
        /// Two tiers (the memory tier first).
        tiered: bool,
    },
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Msg(format!("{what} {}: {e}", path.display()))
}

fn key(it: u32, c: usize) -> [u8; 16] {
    FragmentKey::new(it, c as u64, 0, 0).to_bytes()
}

/// `len` rounded up to O_DIRECT's alignment.
pub fn padded(len: usize) -> usize {
    len.div_ceil(ALIGN) * ALIGN
}

impl Backend {
    /// Fresh, empty storage for `kind` under the disk and memory directories.
    pub fn create(kind: Kind, disk: &Path, mem: &Path, setup: &StoreSetup) -> Result<Backend> {
        let files = |base: &Path, direct, sync_each, sync_at_end| -> Result<Backend> {
            let dir = ScratchDir::new_in(base, "pipeline")?;
            if direct {
                check_direct(dir.path())?;
            }
            Ok(Backend::Files {
                dir,
                direct,
                sync_each,
                sync_at_end,
            })
        };
        match kind {
            Kind::Disk => files(disk, true, true, false),
            Kind::DiskCached => files(disk, false, false, true),
            Kind::Tmpfs => files(mem, false, false, false),
            Kind::Tiered | Kind::StoreDisk => {
                let tiered = kind == Kind::Tiered;
                let mut dirs = Vec::new();
                let builder: Box<dyn Fn(f64) -> hotstore::StoreOptions + Send + Sync> = if tiered {
                    let fast = ScratchDir::new_in(mem, "pipeline")?;
                    let slow = ScratchDir::new_in(disk, "pipeline")?;
                    let (fp, sp) = (fast.path().to_path_buf(), slow.path().to_path_buf());
                    dirs.push(fast);
                    dirs.push(slow);
                    let cap = setup.fast_capacity;
                    let lanes = setup.lanes;
                    let seg = setup.segment_size;
                    Box::new(move |high_water| {
                        Store::builder(&fp)
                            .lanes(lanes)
                            .segment_size_bytes(seg)
                            .tier(TierSpec::new(&fp).capacity_bytes(cap))
                            .tier(TierSpec::new(&sp))
                            .offload_high_water(Some(high_water))
                    })
                } else {
                    let slow = ScratchDir::new_in(disk, "pipeline")?;
                    let sp = slow.path().to_path_buf();
                    dirs.push(slow);
                    let lanes = setup.lanes;
                    let seg = setup.segment_size;
                    Box::new(move |_| Store::builder(&sp).lanes(lanes).segment_size_bytes(seg))
                };
                let opts = builder(setup.offload_high_water);
                // The memory tier's files are made and pre-faulted at open (not timed): a
                // buffer is allocated at start-up, and first-touch page zeroing on this
                // machine's tmpfs is slow (docs/benchmarks.md, "Machine").
                let opts = if tiered {
                    opts.preallocate_bytes(setup.fast_capacity)
                } else {
                    opts
                };
                let store = opts.open()?;
                Ok(Backend::Store {
                    store: Box::new(Some(store)),
                    _dirs: dirs,
                    builder,
                    tiered,
                })
            }
        }
    }

    /// Writes chunk `c` of iteration `it`: the first `len` bytes of `data` (whose length is
    /// at least `padded(len)`).
    pub fn put(&self, it: u32, c: usize, data: &[u8], len: usize) -> Result<()> {
        match self {
            Backend::Files {
                dir,
                direct,
                sync_each,
                ..
            } => {
                let path = file_path(dir.path(), it, c);
                let mut o = OpenOptions::new();
                o.write(true).create(true).truncate(true);
                if *direct {
                    o.custom_flags(libc::O_DIRECT);
                }
                let f = o.open(&path).map_err(|e| io_err("create", &path, e))?;
                let n = if *direct { padded(len) } else { len };
                f.write_all_at(&data[..n], 0)
                    .map_err(|e| io_err("write", &path, e))?;
                if *sync_each {
                    f.sync_data().map_err(|e| io_err("fdatasync", &path, e))?;
                }
                Ok(())
            }
            Backend::Store { store, .. } => {
                store_ref(store)?.put(&key(it, c), &data[..len], Durability::Persisted)?;
                Ok(())
            }
        }
    }

    /// Reads chunk `c` of iteration `it` into `buf` (at least `padded(len)` long).
    pub fn get(&self, it: u32, c: usize, buf: &mut [u8], len: usize) -> Result<()> {
        match self {
            Backend::Files { dir, direct, .. } => {
                let path = file_path(dir.path(), it, c);
                let mut o = OpenOptions::new();
                o.read(true);
                if *direct {
                    o.custom_flags(libc::O_DIRECT);
                }
                let f = o.open(&path).map_err(|e| io_err("open", &path, e))?;
                let n = if *direct { padded(len) } else { len };
                f.read_exact_at(&mut buf[..n], 0)
                    .map_err(|e| io_err("read", &path, e))
            }
            Backend::Store { store, .. } => {
                let got = store_ref(store)?.get_with(&key(it, c), |v| {
                    if v.len() == len {
                        buf[..len].copy_from_slice(v);
                        true
                    } else {
                        false
                    }
                })?;
                match got {
                    Some(true) => Ok(()),
                    Some(false) => Err(Error::Msg(format!(
                        "chunk {c} of iteration {it} has the wrong length in the store"
                    ))),
                    None => Err(Error::Msg(format!(
                        "chunk {c} of iteration {it} is missing from the store"
                    ))),
                }
            }
        }
    }

    /// Removes chunk `c` of iteration `it` (an input once its output is written).
    pub fn remove(&self, it: u32, c: usize) -> Result<()> {
        match self {
            Backend::Files { dir, .. } => {
                let path = file_path(dir.path(), it, c);
                std::fs::remove_file(&path).map_err(|e| io_err("remove", &path, e))
            }
            Backend::Store { store, .. } => {
                // Intermediate data: its removal need not survive a power cut (a crash
                // brings back an input that is recomputed anyway).
                store_ref(store)?.remove(&key(it, c), Durability::Memory)?;
                Ok(())
            }
        }
    }

    /// Before the clock starts: the initial image (iteration 0) on the device, not in the
    /// page cache, where that matters.
    pub fn settle_initial(&self, chunks: usize) -> Result<()> {
        if let Backend::Files {
            dir,
            sync_at_end: true,
            ..
        } = self
        {
            for c in 0..chunks {
                let path = file_path(dir.path(), 0, c);
                let f = File::open(&path).map_err(|e| io_err("open", &path, e))?;
                f.sync_data().map_err(|e| io_err("fdatasync", &path, e))?;
                drop_cache(&f);
            }
        }
        Ok(())
    }

    /// The end of the makespan: what the configuration promises on disk is made so (the
    /// page-cache files are synced; the others have synced as they went, or promise nothing).
    pub fn finish(&self, it: u32, chunks: usize) -> Result<()> {
        if let Backend::Files {
            dir,
            sync_at_end: true,
            ..
        } = self
        {
            for c in 0..chunks {
                let path = file_path(dir.path(), it, c);
                let f = File::open(&path).map_err(|e| io_err("open", &path, e))?;
                f.sync_data().map_err(|e| io_err("fdatasync", &path, e))?;
            }
        }
        Ok(())
    }

    /// Offload figures of `tiered` at the end of the makespan.
    pub fn tier_figures(&self) -> Option<TierFigures> {
        match self {
            Backend::Store {
                store,
                tiered: true,
                ..
            } => {
                let st = store.as_ref().as_ref()?.stats();
                Some(TierFigures {
                    offloaded_bytes: st.tiers.first().map_or(0, |t| t.offloaded_out_bytes),
                    live_bytes: st.tiers.iter().map(|t| t.live_bytes).collect(),
                })
            }
            _ => None,
        }
    }

    /// `tiered` only: gets everything onto the disk tier and says how long it took. The
    /// engine offloads only sealed segments and only above a high-water mark, so: close the
    /// store (which seals the open segments), reopen it with the mark at its lowest, and wait
    /// until the memory tier holds no live record (at most `give_up` without progress).
    pub fn drain(&mut self, give_up: Duration) -> Result<Option<Drain>> {
        let Backend::Store {
            store,
            builder,
            tiered: true,
            ..
        } = self
        else {
            return Ok(None);
        };
        let started = Instant::now();
        if let Some(s) = store.take() {
            s.close()?;
        }
        // The smallest mark the engine takes: any record makes the tier "above" it.
        let reopened = builder(f64::MIN_POSITIVE).open()?;
        let fast_live = |s: &Store| s.stats().tiers.first().map_or(0, |t| t.live_bytes);
        let mut left = fast_live(&reopened);
        let mut last_progress = Instant::now();
        while left > 0 && last_progress.elapsed() < give_up {
            std::thread::sleep(Duration::from_millis(5));
            let now = fast_live(&reopened);
            if now < left {
                last_progress = Instant::now();
            }
            left = now;
        }
        let st = reopened.stats();
        let why = (left > 0)
            .then(|| st.relocation.last_error.clone())
            .flatten();
        **store = Some(reopened);
        Ok(Some(Drain {
            secs: started.elapsed().as_secs_f64(),
            left_bytes: left,
            why,
        }))
    }

    /// Closes a store (files need nothing); the directories go when the backend is dropped.
    pub fn close(mut self) -> Result<()> {
        if let Backend::Store { store, .. } = &mut self {
            if let Some(s) = store.take() {
                s.close()?;
            }
        }
        Ok(())
    }
}

fn store_ref(s: &Option<Store>) -> Result<&Store> {
    s.as_ref()
        .ok_or_else(|| Error::Msg("the store is closed".into()))
}

fn file_path(dir: &Path, it: u32, c: usize) -> PathBuf {
    dir.join(format!("it{it:04}-c{c:07}.raw"))
}

/// Drops a file's pages from the page cache (after a sync they are clean).
fn drop_cache(f: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: plain syscall on an open descriptor; it reads no memory of ours.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// O_DIRECT must be accepted in `dir` (the `disk` configuration measures the device).
fn check_direct(dir: &Path) -> Result<()> {
    let path = dir.join("direct-probe");
    let r = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path);
    let _ = std::fs::remove_file(&path);
    r.map(drop).map_err(|e| {
        Error::Msg(format!(
            "{}: the file system refuses O_DIRECT ({e}); the `disk` configuration needs it \
             (leave it out with --configs, or use disk-cached)",
            dir.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's `room_to_move` for a segment full of `chunk`-byte records.
    fn room_for_full_segment(seg: u64, chunk: u64) -> u64 {
        let file = seg - 4096;
        let per = chunk + 64; // record header and key, aligned
        let live = file / per * per;
        let per_file = file.saturating_sub(per).max(1);
        live + (1 + live.div_ceil(per_file)) * per
    }

    #[test]
    fn full_segments_fit_the_offload_budget() {
        for chunk in [64 << 10, 512 << 10, 1 << 20, 4 << 20, 8 << 20, 12 << 20] {
            let seg = segment_size_for(chunk, 1 << 30) as u64;
            assert!(seg >= chunk + 4096, "{chunk}: {seg}");
            assert!(
                room_for_full_segment(seg, chunk) <= 64 << 20,
                "{chunk}: {seg} needs {}",
                room_for_full_segment(seg, chunk)
            );
        }
        // The default segment with 8 MiB records does not (the limit this works around).
        assert!(room_for_full_segment(64 << 20, 8 << 20) > 64 << 20);
        // Nor does a segment of one 8 MiB record.
        assert!(room_for_full_segment((8 << 20) + 16384, 8 << 20) > 64 << 20);
        // A small memory tier gets segments of a quarter of it (two chunks at least).
        assert!(segment_size_for(1 << 20, 16 << 20) <= 4 << 20);
    }
}
