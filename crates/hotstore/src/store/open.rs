//! Opening a store: metadata, tiers, recovery, the lanes' active segments, maintenance.

use super::*;
use crate::events::groups::Groups;
use crate::files::FileList;
use crate::options::{RecoveryMode, MIN_SEGMENT_SIZE};

impl Store {
    /// Options with defaults for a store in `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> StoreOptions {
        StoreOptions::new(dir)
    }

    /// Opens (creating if allowed) the store described by `options`, recovering its index.
    pub fn open(options: StoreOptions) -> Result<Store> {
        options.validate()?;
        if options.media.is_none() {
            // Before the directory, LOCK and probe files below are created: without a store
            // and without `create_if_missing`, nothing may be left on disk.
            crate::meta::check_store_dir(&options.dir, options.create_if_missing)?;
        }
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
        let mut upgraded = false;
        // The format the store had before this open (recovery reads its segments by it).
        let mut found_format = FORMAT_VERSION;
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
                if options.media.is_none() {
                    check_tiers_unchanged(&options, &meta.tiers)?;
                }
                // The capacities given (the first tiers', or all) replace the stored ones.
                let mut changed = false;
                for (t, spec) in meta.tiers.iter_mut().zip(&options.tiers) {
                    if spec.capacity_bytes != 0 && spec.capacity_bytes != t.capacity_bytes {
                        if spec.capacity_bytes < t.capacity_bytes || t.capacity_bytes == 0 {
                            check_capacity_holds_files(
                                &options,
                                t,
                                spec.capacity_bytes,
                                meta.segment_size_bytes,
                            )?;
                        }
                        t.capacity_bytes = spec.capacity_bytes;
                        changed = true;
                    }
                }
                if changed {
                    check_capacity(&meta.tiers, meta.segment_size_bytes)?;
                    meta.store(&*root)?;
                }
                // Older stores take the current format once recovery has accepted them
                // (stored below), before this build writes a record with a flag an older
                // build would take for damage (or cut as a torn tail): such a build then
                // refuses the store by its version instead. An open that refuses the store
                // leaves its format as it was.
                found_format = meta.format_version;
                upgraded = meta.format_version < FORMAT_VERSION;
                meta.format_version = FORMAT_VERSION;
                meta
            }
            None => {
                if !options.create_if_missing {
                    return Err(Error::NoStore(options.dir.clone()));
                }
                refuse_orphaned_segments(&options, &*root)?;
                let specs = if options.tiers.is_empty() {
                    vec![TierSpec::new(".")]
                } else {
                    options.tiers.clone()
                };
                let tiers: Vec<TierMeta> = specs
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
                            // A new store lists its files from the start.
                            files: Some(Vec::new()),
                        }
                    })
                    .collect();
                // Fitted to the first tier's room: its file system's free space and, fix
                // (issue 15), its capacity: `serve --capacity 64MiB` made a store of one 64 MiB
                // segment whose reserve was larger than the store, so no put ever fitted.
                let segment_size = match (&options.media, specs.first()) {
                    (None, Some(t)) => {
                        let free = crate::medium::free_space_bytes(&resolve(&options.dir, &t.path));
                        let room = match (free, t.capacity_bytes) {
                            (free, 0) => free,
                            (Some(f), c) => Some(f.min(c)),
                            (None, c) => Some(c),
                        };
                        fit_segment_size(options.segment_size_bytes, room)
                    }
                    _ => options.segment_size_bytes,
                };
                check_capacity(&tiers, segment_size as u64)?;
                let meta = Meta {
                    format_version: FORMAT_VERSION,
                    layout: options.layout.clone().unwrap_or_default().to_string(),
                    segment_size_bytes: segment_size as u64,
                    created_unix_ms: now_ns() / 1_000_000,
                    tiers,
                };
                meta.store(&*root)?;
                meta
            }
        };
        let layout = KeyLayout::parse(&meta.layout)?;
        let segment_size = meta.segment_size_bytes as usize;
        let files = Arc::new(FileList::new(root.clone(), meta.clone())?);
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
            tiers.push(Tier::new(
                i,
                medium,
                t.capacity_bytes,
                segment_size,
                files.clone(),
            ));
        }
        let index = Index::new(layout.key_len(), layout.event_prefix_len());
        let recovered = recovery::recover(&tiers, &index, options.recovery, &files, found_format)?;
        if upgraded {
            files.store_now()?;
        }
        for t in &tiers {
            t.fit_capacity()?;
        }
        // Before the events are rebuilt: their READY numbers come from it.
        let next_lsn = Arc::new(AtomicU64::new(recovered.max_lsn + 1));
        let events = Events::new(
            &layout,
            next_lsn.clone(),
            Policies::load(&*tiers[0].medium)?,
            AckedSet::load(&*tiers[0].medium, layout.event_prefix_len())?,
            Groups::load(&*tiers[0].medium, layout.event_prefix_len())?,
        );
        // Before any reclaim decision: removals kill fragments and marks become live.
        crate::events::rebuild::rebuild(&events, &index, &recovered.event_records);
        // After recovery, which would otherwise adopt the new files a second time.
        if options.preallocate_bytes > 0 {
            tiers[0].preallocate(options.preallocate_bytes)?;
        }
        // The tails that were open at a crash become active segments again, instead of being
        // sealed part-empty: repeated crashes would otherwise strand a part-filled segment per
        // lane per restart, and a bounded store could fill with them. Relocation's lanes take
        // theirs first (the largest tail of each tier): relocation is what gives space back,
        // and a crash in the middle of it used to leave its file sealed with the reserve
        // spent, so the next run had no room to relocate into (the kill -9 wedge of issue 15).
        let mut open_tails = recovered.need_summary;
        open_tails.extend(reopen_sealed_tails(
            &recovered.segments,
            &open_tails,
            options.lanes + 1,
            &tiers,
            options.offload_high_water.is_some(),
        )?);
        let (relocation_tails, writer_tails, need_summary) =
            assign_tails(open_tails, &recovered.report.torn_tails, &tiers)?;
        let mut lanes: Vec<Lane> = (0..options.lanes).map(|_| Lane::default()).collect();
        let mut need_summary = need_summary;
        let mut writer_tails = writer_tails.into_iter();
        for lane in lanes.iter_mut() {
            lane.seg = writer_tails.next();
        }
        need_summary.extend(writer_tails);
        let (tx, rx) = std::sync::mpsc::channel();
        let tiers_len = tiers.len();
        let inner = Arc::new(Inner {
            dir: options.dir.clone(),
            layout,
            verify_on_read: options.verify_on_read,
            direct_min: options.direct_io_min_value_bytes,
            acked_after_flush: AtomicBool::new(false),
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
            next_lsn,
            commit: GroupCommit::default(),
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            jobs: Mutex::new(tx),
            space: (Mutex::new(0), Condvar::new()),
            relocator: relocate::Relocator::new(tiers_len, relocation_tails),
            offload_high_water: options.offload_high_water,
            counters: Counters::default(),
            _lock: lock,
        });
        for seg in need_summary {
            seg.sealed.store(true, Ordering::Release);
            inner.send(Job::Seal(seg));
        }
        for seg in &recovered.segments {
            inner.maybe_reclaim(seg);
        }
        let worker = inner.clone();
        let maintenance = std::thread::Builder::new()
            .name("hotstore-maint".into())
            .spawn(move || maintenance::run(&*worker, rx))
            .map_err(|e| Error::io("spawn maintenance thread", &options.dir, e))?;
        let store = Store {
            inner,
            maintenance: Some(maintenance),
            report: recovered.report,
        };
        // Events every required group had acknowledged when the store stopped, before the
        // record that settles them was written (a crash between the two; writing it needs
        // the maintenance thread, which prepares files).
        for prefix in store.inner.events.groups.settled() {
            store.inner.settle_event(&prefix)?;
        }
        if store.inner.events.groups.active() {
            let open = store.inner.open_events();
            store.inner.events.groups.keep_acks_of_stored(&open);
        }
        Ok(store)
    }
}

/// Segments a clean close sealed mostly empty, to continue as active segments (with the open
/// tails found, at most `wanted`): the newest first, each more than half unused, on tiers that
/// do not offload. Found in a
/// Python pipeline review: a store opened and closed once per batch sealed a nearly empty
/// 64 MiB file at each close and never reused it (its space was unused, not dead, so no
/// cleaning took it): 300 batches held 19 GB of /dev/shm. Each one's summary is replaced by
/// an empty (stale) one, durably, before any record is appended: the next open scans it,
/// and a summary that ended before the new records cannot hide them.
fn reopen_sealed_tails(
    segments: &[Arc<Segment>],
    open: &[Arc<Segment>],
    wanted: usize,
    tiers: &[Tier],
    offload: bool,
) -> Result<Vec<Arc<Segment>>> {
    // Not on a tier that offloads to the one below: offload moves sealed segments only, and a
    // continued one would keep its records on the fast tier until writes fill it (found by
    // `bench pipeline`: a drain after a reopen left 0.5 MB there). Its stranded files are
    // bounded by its capacity and moved down with the rest.
    let offloads = |t: usize| offload && t + 1 < tiers.len();
    let mut mostly_empty: Vec<&Arc<Segment>> = segments
        .iter()
        .filter(|s| {
            !offloads(s.tier)
                && s.capacity() == tiers[s.tier].segment_size
                && s.end.load(Ordering::Relaxed) < s.capacity() / 2
                && !open.iter().any(|o| o.id == s.id)
        })
        .collect();
    mostly_empty.sort_by_key(|s| std::cmp::Reverse(s.id));
    let mut reopened = Vec::new();
    // Checked one by one, newest first, only as many as are wanted (each check reads the
    // segment's records).
    for seg in mostly_empty
        .into_iter()
        .filter(|s| records_are_contiguous(s))
        .take(wanted.saturating_sub(open.len()))
    {
        tiers[seg.tier]
            .medium
            .write_file(&crate::summary::file_name(seg.slot), &[])?;
        reopened.push(seg.clone());
    }
    Ok(reopened)
}

/// True if the segment's records follow each other from its header to its end, each intact
/// (checksum verified). One that Salvage opened keeps its damage, skipped and summarised
/// around, and the seal of a continued segment summarises by walking its records' headers:
/// it would stop at damage, or list a torn record whose header survived (found by the debug
/// run of tests/crash_points.rs: after a salvaged power cut, a get of such a record failed
/// its checksum at the next open).
fn records_are_contiguous(seg: &Segment) -> bool {
    let end = seg.end.load(Ordering::Relaxed);
    // Safety: a segment just recovered, not yet shared: its records below `end` are stable.
    let bytes = unsafe { seg.bytes(0, end) };
    let mut off = crate::segment::SEGMENT_HEADER_LEN;
    while off < end {
        let rec = &bytes[off..end];
        match crate::record::parse_header(rec) {
            Ok(h) if crate::record::verify(seg.id, rec, &h) => off += h.footprint(),
            _ => return false,
        }
    }
    off == end
}

/// The segments recovery found open (no summary): which continue as relocation's active
/// segments (one per tier, the largest tail), which as writer lanes' (the rest with a tail
/// worth having, largest first), and which are sealed. Torn tails are cleared first
/// ([`Segment::clear_torn_tail`]). Every continued tail is unsealed and its synced watermark
/// reset (nothing of it is known durable).
#[allow(clippy::type_complexity)]
fn assign_tails(
    open: Vec<Arc<Segment>>,
    torn: &[(PathBuf, u64)],
    tiers: &[Tier],
) -> Result<(
    Vec<Option<Arc<Segment>>>,
    Vec<Arc<Segment>>,
    Vec<Arc<Segment>>,
)> {
    let tail = |s: &Segment| s.capacity() - s.end.load(Ordering::Relaxed);
    let mut usable = Vec::new();
    let mut sealed = Vec::new();
    for seg in open {
        seg.forget_synced();
        // Standard files and removal files (known by their size: removals keep them, so
        // that a crash does not spend the removal reserve); a file of one large record is
        // sealed.
        let size = tiers[seg.tier].segment_size;
        let removals = seg.capacity() == super::lanes::removal_file_len(size);
        let standard = seg.capacity() == size;
        if (standard || removals) && tail(&seg) > HEADER_LEN {
            seg.removals_only.store(removals, Ordering::Relaxed);
            usable.push(seg);
        } else {
            sealed.push(seg);
        }
    }
    usable.sort_by_key(|s| std::cmp::Reverse(tail(s)));
    let mut relocation: Vec<Option<Arc<Segment>>> = vec![None; tiers.len()];
    let mut writers = Vec::new();
    for seg in usable {
        if torn.iter().any(|(p, _)| p == seg.path()) {
            seg.clear_torn_tail()?;
        }
        // Its records from now on are written in this boot: a gap among them found after a
        // crash of this process alone is damage, not an unsynced tail (`recovery::scan`).
        // Persisted with the segment's next records (its watermark was reset above).
        seg.write_header(super::now_ns(), tiers[seg.tier].medium.boot_id())?;
        seg.sealed.store(false, Ordering::Release);
        match &mut relocation[seg.tier] {
            slot @ None if !seg.removals_only.load(Ordering::Relaxed) => *slot = Some(seg),
            _ => writers.push(seg),
        }
    }
    Ok((relocation, writers, sealed))
}

/// Fix (issue 15, part 6): a store whose `hotstore.meta` was deleted was silently given a
/// new one with the caller's options beside its old segments (whose sizes and layout those
/// options may not match). Segment files without metadata are refused unless the caller asks
/// for salvage, which re-creates the metadata from the options given, as before.
fn refuse_orphaned_segments(options: &StoreOptions, root: &dyn Medium) -> Result<()> {
    if options.recovery == RecoveryMode::Salvage {
        return Ok(());
    }
    let mut found = crate::meta::count_segment_files(root)?;
    if let Some(media) = &options.media {
        for m in media.iter().skip(1) {
            found += crate::meta::count_segment_files(&**m)?;
        }
    } else {
        for t in options.tiers.iter().filter(|t| t.path.as_os_str() != ".") {
            let dir = resolve(&options.dir, &t.path);
            if dir.is_dir() {
                found +=
                    crate::meta::count_segment_files(&FileMedium::new(&dir, Domain::Volatile)?)?;
            }
        }
    }
    if found > 0 {
        return Err(Error::MissingMeta {
            dir: options.dir.clone(),
            segment_files: found,
        });
    }
    Ok(())
}

/// A tier directory as a medium, with direct I/O off if no value would use it.
fn file_medium(dir: &Path, domain: Domain, options: &StoreOptions) -> Result<FileMedium> {
    let m = FileMedium::new(dir, domain)?.with_page_cache(options.page_cache);
    Ok(
        if options.direct_io_min_value_bytes as u64 > MAX_VALUE_LEN {
            m.without_direct_io()
        } else {
            m
        },
    )
}

/// Refuses tiers that are not the store's: tiers are fixed when a store is created. Fix
/// (found by a new-user review): `serve --offload-to B` on a store made with `--offload-to A`
/// started silently with A, and a tier added to an existing store was ignored.
fn check_tiers_unchanged(options: &StoreOptions, stored: &[TierMeta]) -> Result<()> {
    let same = |a: &Path, b: &Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    };
    if options.tiers.len() > stored.len() {
        return Err(Error::InvalidOption {
            name: "tiers",
            reason: format!(
                "the store in {} has {} tier(s), {} given: tiers are fixed when a store is \
                 created (create a new store for another layout of tiers)",
                options.dir.display(),
                stored.len(),
                options.tiers.len()
            ),
        });
    }
    for (i, (spec, t)) in options.tiers.iter().zip(stored).enumerate() {
        let given = resolve(&options.dir, &spec.path);
        let have = resolve(&options.dir, Path::new(&t.path));
        if !same(&given, &have) {
            return Err(Error::InvalidOption {
                name: "tiers",
                reason: format!(
                    "tier {i} of the store in {} is {}, not {}: tiers are fixed when a store \
                     is created (give its own path, or leave the tier out)",
                    options.dir.display(),
                    have.display(),
                    given.display()
                ),
            });
        }
    }
    Ok(())
}

fn resolve(dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// A new store's segments are at most this fraction of the free space of its first tier's
/// file system and of its capacity: the stock of prepared segments and the reserve (a few
/// segments each) must fit beside the data.
const FREE_SPACE_PER_SEGMENT: u64 = 16;

/// Refuses a bounded store too small to hold a record: every tier bounded and their total
/// below two segment files (one for data, the relocation reserve) and a removal file. Fix
/// (found by a new-user review): `serve --capacity 10kb` started, and answered every write
/// with StoreFull.
fn check_capacity(tiers: &[TierMeta], segment_size: u64) -> Result<()> {
    if tiers.iter().any(|t| t.capacity_bytes == 0) {
        return Ok(());
    }
    let capacity: u64 = tiers.iter().map(|t| t.capacity_bytes).sum();
    let least = 2 * segment_size + super::lanes::removal_file_len(segment_size as usize) as u64;
    if capacity < least {
        return Err(Error::InvalidOption {
            name: "capacity",
            reason: format!(
                "{capacity} bytes cannot hold a record: a store needs at least {least} (a \
                 segment file of {segment_size} bytes for data, one held back for relocation, \
                 and a removal file); give a larger capacity"
            ),
        });
    }
    Ok(())
}

/// Refuses a capacity lowered below what the tier's files in use (those whose header names a
/// segment; free and never-written files can be given back) and the put reserve need. Fix
/// (found by a crash campaign): such a capacity was stored and applied, and with every file
/// in use no file could be taken any more, not by relocation (which frees dead space), not
/// by a removal's small file: every put and every removal answered StoreFull, at every later
/// open too (the capacity is stored), with any amount of dead space. Pooled files beyond the
/// capacity are given back as writers need room (`Tier::take`).
fn check_capacity_holds_files(
    options: &StoreOptions,
    t: &TierMeta,
    capacity: u64,
    segment_size: u64,
) -> Result<()> {
    let dir = resolve(&options.dir, Path::new(&t.path));
    let in_use = |slot: u32| -> bool {
        let path = dir.join(crate::segment::file_name(slot));
        let mut head = [0u8; 64];
        let read = std::fs::File::open(&path).and_then(|mut f| {
            use std::io::Read;
            f.read_exact(&mut head)
        });
        // Unreadable or not a valid header: counted, to be safe.
        read.is_err()
            || crate::segment::SegmentHeader::decode(&head)
                .map_or(head.iter().any(|&b| b != 0), |h| h.id != 0)
    };
    let held: u64 = if options.media.is_some() {
        // Media other than files (tests): every listed file.
        t.files
            .iter()
            .flatten()
            .map(|r| u64::from(r.count) * r.len_bytes)
            .sum()
    } else {
        t.files
            .iter()
            .flatten()
            .flat_map(|r| (0..r.count).map(move |i| (r.first_slot + i, r.len_bytes)))
            .filter(|(slot, _)| in_use(*slot))
            .map(|(_, len)| len)
            .sum()
    };
    let reserve = segment_size + super::lanes::removal_file_len(segment_size as usize) as u64;
    if capacity < held + reserve {
        return Err(Error::InvalidOption {
            name: "capacity",
            reason: format!(
                "tier {} of the store in {} has {held} bytes of segment files in use; with the \
                 {reserve}-byte reserve that relocation and removals need, {capacity} bytes \
                 cannot hold them: give at least {} bytes, or remove data and run `hotstore \
                 compact` first",
                t.path,
                options.dir.display(),
                held + reserve
            ),
        });
    }
    Ok(())
}

/// The segment size for a new store: `wanted`, or on a small file system (Docker's 64 MiB
/// /dev/shm) the largest power of two that is at most 1/[`FREE_SPACE_PER_SEGMENT`] of its
/// free space, and at least [`MIN_SEGMENT_SIZE`].
fn fit_segment_size(wanted: usize, free: Option<u64>) -> usize {
    let Some(free) = free else {
        return wanted;
    };
    let most = free / FREE_SPACE_PER_SEGMENT;
    if wanted as u64 <= most {
        return wanted;
    }
    let pow2 = if most == 0 {
        0
    } else {
        1u64 << (63 - most.leading_zeros())
    };
    (pow2 as usize).clamp(MIN_SEGMENT_SIZE, wanted)
}

#[cfg(test)]
mod tests {
    use super::fit_segment_size;

    #[test]
    fn segments_shrink_to_the_free_space_of_a_small_file_system() {
        const MIB: usize = 1 << 20;
        // Docker's default /dev/shm: 64 MiB free gives 4 MiB segments.
        assert_eq!(fit_segment_size(64 * MIB, Some(64 << 20)), 4 * MIB);
        assert_eq!(fit_segment_size(64 * MIB, Some(100 << 20)), 4 * MIB);
        // Room enough, or unknown: as asked.
        assert_eq!(fit_segment_size(64 * MIB, Some(24 << 30)), 64 * MIB);
        assert_eq!(fit_segment_size(64 * MIB, None), 64 * MIB);
        assert_eq!(fit_segment_size(256 << 10, Some(4 << 20)), 256 << 10);
        // Never below the smallest segment, never above what was asked.
        assert_eq!(fit_segment_size(64 * MIB, Some(1 << 20)), 64 << 10);
        assert_eq!(fit_segment_size(64 * MIB, Some(0)), 64 << 10);
        assert_eq!(fit_segment_size(128 << 10, Some(1 << 20)), 64 << 10);
        assert_eq!(fit_segment_size(64 << 10, Some(0)), 64 << 10);
    }
}
