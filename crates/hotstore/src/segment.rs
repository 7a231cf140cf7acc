//! Segment files: preallocated, append-only, one writer at a time.
//!
//! ```text
//! file offset
//! 0       SEGMENT_HEADER_LEN (4096) bytes: header page, of which the first 64 are used:
//!           0  8  magic        b"HOTSEG\0\x01"
//!           8  4  version      SEGMENT_VERSION
//!          12  2  tier         index of the tier holding the file
//!          14  2  reserved     0
//!          16  8  segment id   > 0 while in use; 0 = free (recycled, reusable)
//!          24  8  created      unix time, nanoseconds
//!          32  8  file length  bytes
//!          40  8  retired id   free files: the id of the incarnation they retired (recovery
//!                              starts new ids above it, so an id is never used twice); else 0
//!          48  8  boot         the machine's boot this incarnation was started in (see
//!                              `medium::boot_id`); 0 = not known (free files, older builds)
//!          56  4  reserved     0
//!          60  4  crc32c       over bytes 0..60
//! 4096    records (see `record.rs`), each starting at a multiple of 8, until the first
//!         position that holds no valid record of this segment id
//! ```
//! All integers little-endian. A file is named `seg-NNNNNN.hss` after its slot number; the
//! segment id in the header changes each time the file is reused, and record checksums are
//! seeded with it, so records of an earlier use never validate.

use crate::medium::Region;
use crate::record::{self, HEADER_LEN};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes reserved for the header; records start here (page aligned for direct I/O).
pub const SEGMENT_HEADER_LEN: usize = 4096;
/// Magic at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"HOTSEG\0\x01";
/// Segment format version.
pub const SEGMENT_VERSION: u32 = 1;
const USED_HEADER_LEN: usize = 64;
/// Zeros for a record's padding and the next record's header slot (see
/// [`Segment::clear_next_header`]).
static NEXT_HEADER_ZEROS: [u8; record::RECORD_ALIGN + HEADER_LEN] =
    [0; record::RECORD_ALIGN + HEADER_LEN];

/// File name of slot `slot`.
pub fn file_name(slot: u32) -> String {
    format!("seg-{slot:06}.hss")
}

/// Slot number of a segment file name, if it is one.
pub fn parse_file_name(name: &str) -> Option<u32> {
    name.strip_prefix("seg-")?
        .strip_suffix(".hss")?
        .parse()
        .ok()
}

/// The decoded header of a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Tier index.
    pub tier: u16,
    /// Segment id; 0 means the file is free.
    pub id: u64,
    /// Creation time, unix nanoseconds.
    pub created_unix_ns: u64,
    /// File length.
    pub file_len: u64,
    /// For a free file (`id == 0`): the id of the incarnation it retired, else 0. Fix (found
    /// by tests/crash_points.rs): without it, a reopen after every file was freed restarted
    /// ids at 1, a reused file could get the id it had before, its old records validated
    /// again, and a crash then made recovery refuse the store or revive removed records.
    pub retired_id: u64,
    /// The boot of the machine this incarnation was started in (`medium::boot_id`),
    /// 0 if not known. Recovery compares it with the current boot: the same boot means the
    /// page cache that held the segment's unsynced bytes was never lost, so a gap before
    /// intact records can only be damage; another boot means a reboot or power cut may have
    /// dropped unsynced pages in any order.
    pub boot: u64,
}

impl SegmentHeader {
    /// Serialises the used part of the header page.
    pub fn encode(&self) -> [u8; USED_HEADER_LEN] {
        let mut b = [0u8; USED_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        b[12..14].copy_from_slice(&self.tier.to_le_bytes());
        b[16..24].copy_from_slice(&self.id.to_le_bytes());
        b[24..32].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.file_len.to_le_bytes());
        b[48..56].copy_from_slice(&self.boot.to_le_bytes());
        b[40..48].copy_from_slice(&self.retired_id.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header; `Err` says why it is not a valid header.
    pub fn decode(b: &[u8]) -> Result<Self, &'static str> {
        if b.len() < USED_HEADER_LEN {
            return Err("file shorter than a segment header");
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err("bad segment magic");
        }
        if crc32c::crc32c(&b[..60])
            != u32::from_le_bytes(b[60..64].try_into().expect("a 4-byte range is a [u8; 4]"))
        {
            return Err("segment header checksum mismatch");
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("a 4-byte range is a [u8; 4]"));
        if version != SEGMENT_VERSION {
            return Err("unknown segment version");
        }
        Ok(SegmentHeader {
            tier: u16::from_le_bytes([b[12], b[13]]),
            id: u64::from_le_bytes(b[16..24].try_into().expect("an 8-byte range is a [u8; 8]")),
            created_unix_ns: u64::from_le_bytes(
                b[24..32].try_into().expect("an 8-byte range is a [u8; 8]"),
            ),
            file_len: u64::from_le_bytes(
                b[32..40].try_into().expect("an 8-byte range is a [u8; 8]"),
            ),
            retired_id: u64::from_le_bytes(
                b[40..48].try_into().expect("an 8-byte range is a [u8; 8]"),
            ),
            boot: u64::from_le_bytes(b[48..56].try_into().expect("an 8-byte range is a [u8; 8]")),
        })
    }
}

/// One incarnation of a segment file: the file under one segment id, with its live counters.
pub struct Segment {
    /// Segment id (also the checksum seed of its records).
    pub id: u64,
    /// Tier index.
    pub tier: usize,
    /// File slot.
    pub slot: u32,
    /// The mapped file.
    pub region: Arc<dyn Region>,
    /// End of the published records: every byte below is a complete record.
    pub end: AtomicUsize,
    /// Records below this offset are on the persistence domain.
    synced_upto: Mutex<usize>,
    /// A copy of `synced_upto` that never runs ahead of it (stored after a raise, before a
    /// lowering, both under its lock), for [`Segment::is_synced`] without the lock: a group
    /// commit asks every segment of the store.
    synced_hint: AtomicUsize,
    /// Start of the last record given a sync flag (see [`Segment::sync_flags`]); for a
    /// segment found at open, the end of its records (past every flagged one: conservative).
    proof_floor: AtomicUsize,
    /// On a volatile tier, whose persist is a no-op: no record claims a sync.
    volatile: bool,
    /// No more appends; eligible for recycling once dead and unpinned.
    pub sealed: AtomicBool,
    /// Live (newest, not removed) records in this segment.
    pub live_records: AtomicU64,
    /// Bytes of live records.
    pub live_bytes: AtomicU64,
    /// Bytes of dead records (overwritten, removed, tombstones).
    pub dead_bytes: AtomicU64,
    /// Length of the largest record appended: relocation packs records into files, and each
    /// file may leave up to this much unused (a record does not span files).
    pub max_record: AtomicU64,
    /// Bytes of records other than puts (tombstones, event removals and marks): what moving
    /// this segment alone, while it pins older ones, copies forward (`Inner::forward_shadows`).
    pub shadow_bytes: AtomicU64,
    /// Number of other segments holding records this segment shadows: while > 0 this segment
    /// must stay, or those older records would come back on recovery.
    pub pins: AtomicU64,
    /// Ids of segments that shadow records in this one (they hold a pin on us).
    pub pinned_by: Mutex<HashSet<u64>>,
    /// Readers holding a value of this segment in place ([`crate::ValueRef`]): while > 0
    /// the segment is not recycled, so the bytes they see neither change nor go away.
    pub readers: AtomicU64,
    /// Set once the file was handed back for reuse.
    pub recycled: AtomicBool,
    /// Holds event-removal records or keep marks: the acknowledged-event set must be
    /// persisted before this segment is recycled (see `events::acked`).
    pub holds_event_acks: AtomicBool,
    /// Every record appended so far is a put, and the segment was made by this run (a
    /// segment found at open is never assumed to be), or every record other than a put was
    /// copied forward (`Inner::forward_shadows`): once all its records are dead it may be
    /// recycled even while it pins older segments, its pins passing to the segments that pin
    /// it (see [`Segment::is_reclaimable`]).
    pub only_puts: AtomicBool,
    /// Taken by a removal from the space puts may not use (the removal reserve): puts never
    /// append to it, or they would eat the room that lets a full store be drained.
    pub(crate) removals_only: AtomicBool,
    /// Bytes written past the page cache (direct I/O): see [`Segment::mostly_direct`].
    direct_bytes: AtomicU64,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Segment(id {} tier {} slot {})",
            self.id, self.tier, self.slot
        )
    }
}

impl Segment {
    /// A segment over `region` whose header is already written; `end` is where records stop.
    /// `volatile`: its tier's domain is volatile (nothing ever becomes durable).
    pub fn new(
        id: u64,
        tier: usize,
        slot: u32,
        region: Arc<dyn Region>,
        end: usize,
        synced: usize,
        volatile: bool,
    ) -> Self {
        Segment {
            id,
            tier,
            slot,
            region,
            end: AtomicUsize::new(end),
            synced_upto: Mutex::new(synced),
            synced_hint: AtomicUsize::new(synced),
            proof_floor: AtomicUsize::new(end),
            volatile,
            sealed: AtomicBool::new(false),
            live_records: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            dead_bytes: AtomicU64::new(0),
            max_record: AtomicU64::new(0),
            shadow_bytes: AtomicU64::new(0),
            pins: AtomicU64::new(0),
            pinned_by: Mutex::new(HashSet::new()),
            readers: AtomicU64::new(0),
            recycled: AtomicBool::new(false),
            holds_event_acks: AtomicBool::new(false),
            only_puts: AtomicBool::new(false),
            removals_only: AtomicBool::new(false),
            direct_bytes: AtomicU64::new(0),
        }
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &PathBuf {
        self.region.path()
    }

    /// Capacity for records.
    pub fn capacity(&self) -> usize {
        self.region.len()
    }

    /// Copies key or value bytes to `offset` through the medium (may be a `pwrite`).
    ///
    /// # Safety
    /// As for [`Segment::write_at`].
    pub unsafe fn write_body(&self, offset: usize, bytes: &[u8], bulk: bool) -> crate::Result<()> {
        // Safety: the caller's contract.
        unsafe { self.region.write(offset, bytes, bulk) }
    }

    /// [`Segment::write_body`] of several parts back to back (key and value in one call).
    ///
    /// # Safety
    /// As [`Segment::write_body`], for the whole range.
    pub unsafe fn write_body_parts(
        &self,
        offset: usize,
        parts: &[&[u8]],
        bulk: bool,
    ) -> crate::Result<()> {
        // Safety: the caller's contract.
        unsafe { self.region.write_parts(offset, parts, bulk) }
    }

    /// [`Segment::write_body_parts`] of a bulk record with its aligned interior written by
    /// direct I/O where the medium can (`Region::write_parts_direct`); true if it did.
    ///
    /// # Safety
    /// As [`Segment::write_body`], for the whole range.
    pub unsafe fn write_body_parts_direct(
        &self,
        offset: usize,
        parts: &[&[u8]],
    ) -> crate::Result<bool> {
        // Safety: the caller's contract.
        let direct = unsafe { self.region.write_parts_direct(offset, parts)? };
        if direct {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            self.direct_bytes.fetch_add(len as u64, Ordering::Relaxed);
        }
        Ok(direct)
    }

    /// True if whole records can be written here as blocks ([`Segment::write_blocks`]).
    pub fn writes_blocks(&self) -> bool {
        self.region.writes_blocks()
    }

    /// Writes `parts` as whole 4 KiB blocks from `offset` (aligned; aligned total), past the
    /// page cache (`Region::write_blocks`): a direct record, header and pad included.
    ///
    /// # Safety
    /// The caller must own the range from the segment's end on (holding the lane); bytes of
    /// the first block below the end must be passed unchanged.
    pub unsafe fn write_blocks(&self, offset: usize, parts: &[&[u8]]) -> crate::Result<()> {
        // Safety: the caller's contract.
        unsafe { self.region.write_blocks(offset, parts)? };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.direct_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Makes bytes `[offset, offset + len)` durable now (an error path's repair).
    pub fn persist_range(&self, offset: usize, len: usize) -> crate::Result<()> {
        self.region.persist(offset, len)
    }

    /// Copies `bytes` (a header: small) to `offset` through the mapping.
    ///
    /// # Safety
    /// The caller must own `[offset, offset + bytes.len())`: unpublished bytes of the segment it
    /// is appending to (holding the lane), inside the region.
    pub unsafe fn write_at(&self, offset: usize, bytes: &[u8]) {
        debug_assert!(offset + bytes.len() <= self.region.len());
        // Safety: the caller's contract; source and destination cannot overlap (the source is
        // caller memory or an earlier part of the unpublished range).
        unsafe { crate::copy::copy_to(self.region.as_ptr().add(offset), bytes) };
    }

    /// The published records of this segment in order, by their headers: `Ok((offset,
    /// header))` for each, then `Err(offset)` once if the walk meets a header that does not
    /// parse or a record that runs past `end` (a damaged tail found at open: nothing valid
    /// follows).
    ///
    /// # Safety
    /// The caller must keep the segment from being recycled while it walks (only the
    /// maintenance thread frees segments, so it may walk one it holds).
    pub(crate) unsafe fn published_records(
        &self,
    ) -> impl Iterator<Item = std::result::Result<(usize, record::Header), usize>> + '_ {
        let end = self.end.load(Ordering::Acquire);
        let mut off = SEGMENT_HEADER_LEN;
        let mut damaged = false;
        std::iter::from_fn(move || {
            if damaged || off + HEADER_LEN > end {
                return None;
            }
            // Safety: below `end`, published; the caller keeps the segment from being
            // recycled (the contract above), so the bytes stay.
            let rest = unsafe { self.bytes(off, end - off) };
            match record::parse_header(rest) {
                Ok(h) if off + h.footprint() <= end => {
                    let at = off;
                    off += h.footprint();
                    Some(Ok((at, h)))
                }
                _ => {
                    damaged = true;
                    Some(Err(off))
                }
            }
        })
    }

    /// Bytes `[offset, offset + len)`.
    ///
    /// # Safety
    /// The range must be published (below `end`, reached through the index or by recovery)
    /// and the caller must keep it from being recycled while the slice lives (hold the index
    /// shard lock that makes the record live).
    pub unsafe fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(
            offset + len <= self.region.len(),
            "read past the end of {}",
            self.path().display()
        );
        // Safety: in bounds (asserted); published bytes are not written again until recycling.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(offset), len) }
    }

    /// Writes the header for this incarnation (started in machine boot `boot`), before any
    /// record.
    pub fn write_header(&self, created_unix_ns: u64, boot: u64) -> crate::Result<()> {
        let h = SegmentHeader {
            tier: self.tier as u16,
            id: self.id,
            created_unix_ns,
            file_len: self.region.len() as u64,
            retired_id: 0,
            boot,
        }
        .encode();
        // Safety: nobody else writes this incarnation yet; the header page is ours.
        // Not persisted here (a roll must not wait on the device): a new segment's synced
        // watermark starts at 0, so the first persist of any of its records covers the header
        // too; a tail found at open gets its watermark reset for the same reason
        // ([`Segment::forget_synced`]).
        unsafe { self.region.write(0, &h, false) }
    }

    /// After a crash nothing of a tail segment is known durable, not even its header (written
    /// but not persisted at the roll): the next persist covers the segment from its start.
    /// Fix (found by tests/model.rs): a tail reopened with its watermark at its end left its
    /// header out of every later persist, and a power cut then lost Persisted records in it.
    pub fn forget_synced(&self) {
        let mut synced = self.synced_upto.lock();
        self.synced_hint.store(0, Ordering::Release);
        *synced = 0;
    }

    /// Zeroes the header slot of the segment's next record at `at` (as much of it as the file
    /// has), so that a scan after a crash of the process stops there on zeros (never written)
    /// rather than on bytes an earlier use of a recycled file left: it reported those as a torn
    /// tail, several per reopen after a kill -9 of a store that recycles. Through the mapping
    /// (removals, event records, reservations); a put's writer passes
    /// [`Segment::zeros_to_next_header`] with its body instead (one `pwritev` on block tiers,
    /// not another call).
    ///
    /// # Safety
    /// The caller holds the lane that owns this segment and `at` is past `end`.
    pub unsafe fn clear_next_header(&self, at: usize) {
        let end = (at + HEADER_LEN).min(self.region.len());
        if end > at {
            // Safety: the caller's contract; in bounds (clipped above).
            unsafe { self.write_at(at, &NEXT_HEADER_ZEROS[..end - at]) };
        }
    }

    /// The zeros that follow a record's body ending at `body_end` (its record, padding
    /// included, ends at `rec_end`) through the next record's header slot, clipped at the end
    /// of the file: written with the body, they do what [`Segment::clear_next_header`] does.
    pub fn zeros_to_next_header(&self, body_end: usize, rec_end: usize) -> &'static [u8] {
        debug_assert!(rec_end >= body_end && rec_end - body_end < record::RECORD_ALIGN);
        let end = (rec_end + HEADER_LEN).min(self.region.len());
        &NEXT_HEADER_ZEROS[..end.saturating_sub(body_end)]
    }

    /// Clears the torn record found at `end` by recovery (zeroes its header slot, durably), so
    /// the tail can take new records: a new record's body written under the old header, then a
    /// crash before its own header, must not make that header valid again.
    pub fn clear_torn_tail(&self) -> crate::Result<()> {
        let end = self.end.load(Ordering::Acquire);
        let len = HEADER_LEN.min(self.region.len().saturating_sub(end));
        // Safety: past `end`, unpublished; the store is still opening (nobody appends yet).
        unsafe { self.region.write(end, &[0u8; HEADER_LEN][..len], false)? };
        self.region.persist(end, len)
    }

    /// Marks the file free on its medium (id 0), so recovery never loads its old records.
    pub fn write_free_header(&self) -> crate::Result<()> {
        let h = SegmentHeader {
            tier: self.tier as u16,
            id: 0,
            created_unix_ns: 0,
            file_len: self.region.len() as u64,
            retired_id: self.id,
            boot: 0,
        }
        .encode();
        // Safety: the segment is dead and unreferenced (checked by the recycler).
        unsafe { self.region.write(0, &h, false)? };
        self.region.persist(0, h.len())
    }

    /// Drops the process's page mappings of `[offset, offset + len)`, keeping the bytes (see
    /// `Region::unmap_pages`): done to a sealed segment before it is synced.
    pub(crate) fn unmap_pages(&self, offset: usize, len: usize) {
        self.region.unmap_pages(offset, len);
    }

    /// True if most bytes written here went past the page cache (direct I/O).
    pub(crate) fn mostly_direct(&self) -> bool {
        self.direct_bytes.load(Ordering::Relaxed) * 2 > self.end.load(Ordering::Acquire) as u64
    }

    /// Persists every published byte not yet persisted; returns the new watermark. Keeps the
    /// durable part of the segment a prefix: never a later record without the earlier ones.
    pub fn persist_written(&self) -> crate::Result<usize> {
        let mut synced = self.synced_upto.lock();
        let end = self.end.load(Ordering::Acquire);
        if end > *synced {
            self.region.persist(*synced, end - *synced)?;
            *synced = end;
            self.synced_hint.store(end, Ordering::Release);
        }
        Ok(*synced)
    }

    /// Live-record accounting: a record counted dead becomes live (recovery and event marks).
    pub(crate) fn mark_live(&self, len: u64) {
        self.live_records.fetch_add(1, Ordering::Relaxed);
        self.live_bytes.fetch_add(len, Ordering::Relaxed);
        self.dead_bytes.fetch_sub(len, Ordering::Relaxed);
    }

    /// Live-record accounting: a live record becomes dead.
    pub(crate) fn mark_dead(&self, len: u64) {
        self.live_records.fetch_sub(1, Ordering::Relaxed);
        self.live_bytes.fetch_sub(len, Ordering::Relaxed);
        self.dead_bytes.fetch_add(len, Ordering::Relaxed);
    }

    /// This segment shadows a record in `target` (a newer version, a tombstone, an event
    /// removal): it must outlive `target`, so it is pinned until `target` is recycled.
    pub fn pin_on(&self, target: &Segment) {
        if self.id == target.id {
            return;
        }
        let mut by = target.pinned_by.lock();
        if target.recycled.load(Ordering::Acquire) {
            return;
        }
        if by.insert(self.id) {
            self.pins.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The flags of the record to be written at `offset`, with `persisted` as given and the
    /// sync flags this segment can claim for it (see `record::Flags`): synced-before if a
    /// persist covering every byte before `offset` has returned; else synced-to-previous if
    /// one reaching the start of the previous record with a sync flag has (every writer keeps
    /// appending through a sync: the steady state of a busy segment, where no record is ever
    /// written after a sync that covered its own offset). The start, not the end, so that
    /// back-to-back syncs (each one starting before the first record after the previous one
    /// is written) flag a record each. Called by the holder of the segment's lane before the
    /// header is written, so in offset order: `proof_floor` is the start of the previous
    /// flagged record, as recovery reads it back.
    pub fn sync_flags(&self, offset: usize, persisted: bool) -> record::Flags {
        let synced = if self.volatile {
            0
        } else {
            self.synced_hint.load(Ordering::Acquire)
        };
        let floor = self.proof_floor.load(Ordering::Acquire);
        let flags = record::Flags {
            persisted,
            synced_before: synced >= offset,
            synced_to_previous: synced < offset && synced >= floor,
        };
        if flags.any_sync() {
            self.proof_floor.fetch_max(offset, Ordering::AcqRel);
        }
        flags
    }

    /// True if everything published is persisted.
    pub fn is_synced(&self) -> bool {
        self.synced_hint.load(Ordering::Acquire) >= self.end.load(Ordering::Acquire)
    }

    /// True if the recycler may take this segment: sealed, every record dead, and either it
    /// pins nothing or it holds only puts.
    ///
    /// A dead put always has a newer record of its key in a segment that pins this one (the
    /// write or relocation that superseded it), and that newer record, or the tombstone that
    /// later removed it, keeps shadowing every older put of the key as long as the pins this
    /// segment held pass to its holders when it goes (`store::upkeep::reclaim`). So a
    /// segment of puts can go before the older segments it pins; one holding a tombstone, an
    /// event mark or an event removal cannot (that record may be what keeps an older one
    /// dead), unless those records were copied forward to a segment that pins the same ones.
    pub fn is_reclaimable(&self) -> bool {
        self.sealed.load(Ordering::Acquire)
            && !self.recycled.load(Ordering::Acquire)
            && self.live_records.load(Ordering::Acquire) == 0
            && (self.pins.load(Ordering::Acquire) == 0 || self.only_puts.load(Ordering::Acquire))
            && self.readers.load(Ordering::SeqCst) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::{FaultMedium, Medium};

    fn segment(end: usize, synced: usize, volatile: bool) -> Segment {
        let region = FaultMedium::new("seg")
            .create_region("seg-1.hss", 1 << 16)
            .unwrap();
        Segment::new(1, 0, 0, region, end, synced, volatile)
    }

    /// (synced-before, synced-to-previous) of a record at `off`.
    fn flags(s: &Segment, off: usize) -> (bool, bool) {
        let f = s.sync_flags(off, false);
        (f.synced_before, f.synced_to_previous)
    }

    #[test]
    fn each_record_claims_what_the_last_returned_sync_covered() {
        let s = segment(SEGMENT_HEADER_LEN, 0, false);
        assert_eq!(flags(&s, 4096), (false, false), "nothing synced yet");
        s.end.store(4200, Ordering::Release);
        s.persist_written().unwrap();
        assert_eq!(flags(&s, 4200), (true, false), "written after a sync");
        s.end.store(4300, Ordering::Release);
        assert_eq!(
            flags(&s, 4300),
            (false, true),
            "the same sync reached the previous flagged record's start (a true, redundant claim)"
        );
        s.end.store(4400, Ordering::Release);
        // A sync covering up to 4400 runs while the record at 4400 is written.
        assert_eq!(flags(&s, 4400), (false, false), "no sync reached 4300 yet");
        s.persist_written().unwrap();
        s.end.store(4500, Ordering::Release);
        assert_eq!(
            flags(&s, 4500),
            (false, true),
            "the sync reached the previous flagged record's start (4300), not 4500"
        );
        s.end.store(4600, Ordering::Release);
        assert_eq!(flags(&s, 4600), (false, false), "its own claim pending");
    }

    #[test]
    fn back_to_back_syncs_flag_a_record_each() {
        // Each sync starts as soon as the previous one returns, before the next record is
        // written, and that record is written while it runs: a flush loop, a group-commit
        // leader. Claiming up to a flagged record's start (not its end) lets every such sync
        // prove something; with the end only every other one did.
        let s = segment(SEGMENT_HEADER_LEN, 0, false);
        s.end.store(4200, Ordering::Release);
        s.persist_written().unwrap(); // covers ..4200
        assert_eq!(flags(&s, 4200), (true, false));
        for at in [4300, 4400, 4500, 4600] {
            // Written while a sync covering ..at runs; the one covering ..at - 100 returned.
            assert_eq!(flags(&s, at), (false, true), "record at {at}");
            s.end.store(at, Ordering::Release);
            s.persist_written().unwrap();
        }
    }

    #[test]
    fn a_segment_found_at_open_claims_nothing_until_its_next_sync() {
        // Its bytes may be in the page cache only (found after a kill -9): recovery resets the
        // watermark, and a flag must wait for a sync covering every record found.
        let s = segment(8192, 8192, false);
        s.forget_synced();
        assert_eq!(flags(&s, 8192), (false, false));
        s.persist_written().unwrap();
        assert_eq!(flags(&s, 8192), (true, false));
    }

    #[test]
    fn a_volatile_segment_never_claims_a_sync() {
        let s = segment(SEGMENT_HEADER_LEN, 0, true);
        s.end.store(4200, Ordering::Release);
        s.persist_written().unwrap();
        assert_eq!(flags(&s, 4200), (false, false));
    }

    #[test]
    fn header_round_trip_and_damage() {
        let h = SegmentHeader {
            tier: 1,
            id: 99,
            created_unix_ns: 5,
            file_len: 1 << 20,
            retired_id: 7,
            boot: 0x1234_5678_9abc_def0,
        };
        let b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        for i in 0..64 {
            let mut d = b;
            d[i] ^= 0x10;
            assert!(
                SegmentHeader::decode(&d).is_err(),
                "damage at byte {i} accepted"
            );
        }
        assert_eq!(parse_file_name(&file_name(12)), Some(12));
        assert_eq!(parse_file_name("seg-x.hss"), None);
    }
}
