//! Recovery: rebuild the index from the segment files at open.
//!
//! Sealed segments with a valid summary are loaded from it without touching values. Others
//! (the tails that were open at a crash) are scanned record by record with checksums. The first
//! position that holds no valid record ends the scan; if an intact record of the same segment
//! follows further on, the gap is damage, not a torn tail: `Strict` refuses with
//! `Error::Corruption { file, offset }`, `Salvage` skips the gap and reports it. Overwrites
//! resolve to the highest lsn; removals stay removed (tombstones are held in the index until
//! every segment is read, then dropped).

use crate::error::{Error, Result};
use crate::index::{Index, IndexKey, Loc, TOMBSTONE_LEN};
use crate::options::RecoveryMode;
use crate::record::{self, Kind, HEADER_LEN, RECORD_ALIGN};
use crate::segment::{self, Segment, SegmentHeader, SEGMENT_HEADER_LEN};
use crate::summary::{self, Entry};
use crate::tier::Tier;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What recovery found and did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RecoveryReport {
    /// Segments loaded from their summary (no value read).
    pub segments_from_summary: usize,
    /// Segments scanned record by record.
    pub segments_scanned: usize,
    /// Free (recycled) segment files found.
    pub segments_free: usize,
    /// Records read (puts and tombstones).
    pub records: u64,
    /// Bytes of records covered.
    pub record_bytes: u64,
    /// Torn tails cut: file, offset where valid records end, bytes after it that were not all zero.
    pub torn_tails: Vec<(PathBuf, u64)>,
    /// Damaged ranges skipped in `Salvage` mode: file and byte range.
    pub skipped: Vec<(PathBuf, Range<u64>)>,
    /// Files that are not valid segments (bad header) and were treated as free.
    pub bad_headers: Vec<(PathBuf, String)>,
    /// Wall time.
    pub duration: Duration,
}

/// Result of scanning one segment's records.
#[derive(Debug, Default)]
pub struct Scan {
    /// Valid records in order.
    pub entries: Vec<Entry>,
    /// Offset just past the last valid record.
    pub end: usize,
    /// Where a torn tail starts, if non-zero bytes follow the last record.
    pub torn_at: Option<usize>,
    /// Damaged ranges (Salvage, or a verify pass).
    pub damaged: Vec<Range<usize>>,
}

fn next_valid(segment_id: u64, bytes: &[u8], from: usize) -> Option<usize> {
    let mut p = from.next_multiple_of(RECORD_ALIGN);
    while p + HEADER_LEN <= bytes.len() {
        // All-zero 4 KiB pages hold nothing: skip them whole (the common case after a tail).
        if p % 4096 == 0 && p + 4096 <= bytes.len() && bytes[p..p + 4096].iter().all(|&b| b == 0) {
            p += 4096;
            continue;
        }
        if record::decode(segment_id, &bytes[p..]).is_ok() {
            return Some(p);
        }
        p += RECORD_ALIGN;
    }
    None
}

/// Scans the records of segment `segment_id` in `bytes` (the whole file). With
/// `stop_at_damage`, the first damage returns `Err(offset)`.
pub fn scan(
    segment_id: u64,
    bytes: &[u8],
    keep_going: bool,
) -> std::result::Result<Scan, (usize, String)> {
    let mut out = Scan {
        end: SEGMENT_HEADER_LEN,
        ..Scan::default()
    };
    let mut off = SEGMENT_HEADER_LEN;
    while off + HEADER_LEN <= bytes.len() {
        match record::decode(segment_id, &bytes[off..]) {
            Ok((h, key, _)) => {
                out.entries.push(Entry {
                    kind: h.kind,
                    key: key.into(),
                    value_len: h.value_len as u32,
                    offset: off as u32,
                    lsn: h.lsn,
                });
                off += h.record_len();
                out.end = off;
            }
            Err(why) => {
                match next_valid(segment_id, bytes, off + RECORD_ALIGN) {
                    None => {
                        if why != record::Invalid::Unwritten {
                            out.torn_at = Some(off);
                        }
                        break;
                    }
                    Some(next) => {
                        if !keep_going {
                            return Err((off, format!("invalid record ({why:?}) with an intact record at offset {next}")));
                        }
                        out.damaged.push(off..next);
                        off = next;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Everything recovery hands to the store.
pub struct Recovered {
    /// Segments in use (all sealed).
    pub segments: Vec<Arc<Segment>>,
    /// Segments that were scanned and need a summary written.
    pub need_summary: Vec<(Arc<Segment>, Vec<Entry>)>,
    /// Highest segment id seen.
    pub max_segment_id: u64,
    /// Highest lsn seen.
    pub max_lsn: u64,
    /// The report.
    pub report: RecoveryReport,
}

fn mark_live(seg: &Segment, len: u64) {
    seg.live_records.fetch_add(1, Ordering::Relaxed);
    seg.live_bytes.fetch_add(len, Ordering::Relaxed);
    seg.dead_bytes.fetch_sub(len, Ordering::Relaxed);
}

fn mark_dead(seg: &Segment, len: u64) {
    seg.live_records.fetch_sub(1, Ordering::Relaxed);
    seg.live_bytes.fetch_sub(len, Ordering::Relaxed);
    seg.dead_bytes.fetch_add(len, Ordering::Relaxed);
}

/// `holder` shadows a record in `target`: it must outlive `target`.
pub fn pin(holder: &Segment, target: &Segment) {
    if holder.id == target.id {
        return;
    }
    let mut by = target.pinned_by.lock();
    if target.recycled.load(Ordering::Acquire) {
        return;
    }
    if by.insert(holder.id) {
        holder.pins.fetch_add(1, Ordering::AcqRel);
    }
}

fn apply(index: &Index, seg: &Arc<Segment>, e: &Entry) {
    let len = record::record_len(e.key.len(), e.value_len as usize) as u64;
    seg.dead_bytes.fetch_add(len, Ordering::Relaxed);
    let mut shard = index.shard(&e.key).write();
    let loc = Loc {
        seg: seg.clone(),
        offset: e.offset,
        value_len: if e.kind == Kind::Tombstone {
            TOMBSTONE_LEN
        } else {
            e.value_len
        },
        lsn: e.lsn,
    };
    match shard.get_mut(&*e.key) {
        None => {
            if e.kind == Kind::Put {
                mark_live(seg, len);
            }
            shard.insert(IndexKey::new(&e.key), loc);
        }
        Some(old) if old.lsn < e.lsn => {
            pin(seg, &old.seg);
            if old.value_len != TOMBSTONE_LEN {
                mark_dead(
                    &old.seg,
                    record::record_len(e.key.len(), old.value_len as usize) as u64,
                );
            }
            if e.kind == Kind::Put {
                mark_live(seg, len);
            }
            *old = loc;
        }
        Some(newer) => pin(&newer.seg, seg),
    }
}

/// Rebuilds `index` from every tier's files.
pub fn recover(tiers: &[Tier], index: &Index, mode: RecoveryMode) -> Result<Recovered> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let mut segments = Vec::new();
    let mut need_summary = Vec::new();
    let mut max_segment_id = 0;
    let mut max_lsn = 0;
    for tier in tiers {
        let names = tier.medium.list()?;
        for name in &names {
            let Some(slot) = segment::parse_file_name(name) else {
                continue;
            };
            let region = tier.medium.open_region(name)?;
            let path = region.path().clone();
            let len = region.len();
            // Safety: nothing else uses the file during recovery; the slice lives only in this loop.
            let bytes = unsafe { std::slice::from_raw_parts(region.as_ptr() as *const u8, len) };
            let header = match SegmentHeader::decode(bytes) {
                Ok(h) if h.id != 0 && h.file_len == len as u64 => h,
                Ok(_) => {
                    report.segments_free += 1;
                    tier.adopt(slot, len as u64, Some(region));
                    continue;
                }
                Err(why) => {
                    // A header is persisted before any record in the file, so a file without a
                    // valid header holds nothing that was acknowledged.
                    report.bad_headers.push((path, why.to_string()));
                    tier.adopt(slot, len as u64, Some(region));
                    continue;
                }
            };
            max_segment_id = max_segment_id.max(header.id);
            let from_summary = tier
                .medium
                .read_file(&summary::file_name(slot))?
                .and_then(|b| summary::decode(header.id, &b))
                .filter(|(end, _)| *end as usize <= len);
            let (end, entries, scanned) = match from_summary {
                Some((end, entries)) => {
                    report.segments_from_summary += 1;
                    (end as usize, entries, false)
                }
                None => {
                    report.segments_scanned += 1;
                    let s = scan(header.id, bytes, mode == RecoveryMode::Salvage).map_err(
                        |(offset, reason)| Error::Corruption {
                            file: path.clone(),
                            offset: offset as u64,
                            reason,
                        },
                    )?;
                    if let Some(at) = s.torn_at {
                        report.torn_tails.push((path.clone(), at as u64));
                    }
                    for r in &s.damaged {
                        report
                            .skipped
                            .push((path.clone(), r.start as u64..r.end as u64));
                    }
                    (s.end, s.entries, true)
                }
            };
            tier.adopt(slot, len as u64, None);
            let seg = Arc::new(Segment::new(header.id, tier.index, slot, region, end, end));
            seg.sealed.store(true, Ordering::Release);
            report.records += entries.len() as u64;
            report.record_bytes += (end - SEGMENT_HEADER_LEN) as u64;
            for e in &entries {
                max_lsn = max_lsn.max(e.lsn);
            }
            if scanned {
                need_summary.push((seg.clone(), entries));
            } else {
                for e in &entries {
                    apply(index, &seg, e);
                }
            }
            segments.push(seg);
        }
    }
    for (seg, entries) in &need_summary {
        for e in entries {
            apply(index, seg, e);
        }
    }
    // Tombstones were only needed to resolve order; drop them.
    for shard in index.shards() {
        shard
            .write()
            .retain(|_, loc| loc.value_len != TOMBSTONE_LEN);
    }
    report.duration = started.elapsed();
    Ok(Recovered {
        segments,
        need_summary,
        max_segment_id,
        max_lsn,
        report,
    })
}
