//! Segment summaries: the keys of a sealed segment, so recovery rebuilds the index without
//! reading values (rebuild time independent of value size).
//!
//! ```text
//! file seg-NNNNNN.sum
//! 0   8  magic         b"HOTSUM\0\x01"
//! 8   4  version       SUMMARY_VERSION
//! 12  4  entry count   n
//! 16  8  segment id    must equal the id in the segment header, else the summary is stale
//! 24  8  records end   offset just past the last record
//! 32  n entries, each:
//!        1  kind       as in the record (1 put, 2 tombstone, 3 event removal, 4 event mark)
//!        1  reserved   0
//!        2  key_len
//!        4  value_len
//!        4  offset     of the record in the segment
//!        8  lsn
//!        key_len bytes of key
//! ..  4  crc32c        over everything before it
//! ```
//! Written (atomically, durably) only after the segment is sealed and persisted. A missing,
//! damaged or stale summary only costs time: recovery then scans the segment.

use crate::record::Kind;

/// Magic of a summary file.
pub const SUMMARY_MAGIC: [u8; 8] = *b"HOTSUM\0\x01";
/// Summary format version.
pub const SUMMARY_VERSION: u32 = 1;
const FIXED: usize = 32;
const ENTRY_FIXED: usize = 20;

/// One record as listed in a summary (and as found by a scan).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Put or tombstone.
    pub kind: Kind,
    /// The key.
    pub key: Box<[u8]>,
    /// Value length.
    pub value_len: u32,
    /// Record offset in the segment.
    pub offset: u32,
    /// Sequence number.
    pub lsn: u64,
}

/// File name of the summary for slot `slot`.
pub fn file_name(slot: u32) -> String {
    format!("seg-{slot:06}.sum")
}

/// Serialises a summary.
pub fn encode(segment_id: u64, records_end: u64, entries: &[Entry]) -> Vec<u8> {
    let keys: usize = entries.iter().map(|e| e.key.len()).sum();
    let mut w = Writer::new(segment_id, records_end, entries.len() * ENTRY_FIXED + keys);
    for e in entries {
        w.push(e.kind, &e.key, e.value_len, e.offset, e.lsn);
    }
    w.finish()
}

/// Serialises the summary of the records `records[start..end]` of a sealed segment, walking
/// their headers straight into the output: no list of entries, no allocation per key (the
/// seal of a segment of 100 B records took about 100 ms with one, longer than preparing a
/// file, and the maintenance thread fell behind the writers).
pub fn encode_records(segment_id: u64, records: &[u8], start: usize, end: usize) -> Vec<u8> {
    // About a fifth of the records' bytes for small records: reserve a guess, grow if needed.
    let mut w = Writer::new(segment_id, end as u64, (end - start.min(end)) / 4);
    let mut off = start;
    while off < end {
        let Ok(h) = crate::record::parse_header(&records[off..end]) else {
            debug_assert!(false, "summary over an invalid record at {off}");
            break;
        };
        let key_at = off + crate::record::HEADER_LEN;
        w.push(
            h.kind,
            &records[key_at..key_at + h.key_len],
            h.value_len as u32,
            off as u32,
            h.lsn,
        );
        off += h.footprint();
    }
    w.finish()
}

/// Builds a summary entry by entry.
struct Writer {
    b: Vec<u8>,
    count: u32,
}

impl Writer {
    fn new(segment_id: u64, records_end: u64, entry_bytes: usize) -> Self {
        let mut b = Vec::with_capacity(FIXED + entry_bytes + 4);
        b.extend_from_slice(&SUMMARY_MAGIC);
        b.extend_from_slice(&SUMMARY_VERSION.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // the count, filled in by `finish`
        b.extend_from_slice(&segment_id.to_le_bytes());
        b.extend_from_slice(&records_end.to_le_bytes());
        Writer { b, count: 0 }
    }

    fn push(&mut self, kind: Kind, key: &[u8], value_len: u32, offset: u32, lsn: u64) {
        let mut fixed = [0u8; ENTRY_FIXED];
        fixed[0] = kind as u8;
        fixed[2..4].copy_from_slice(&(key.len() as u16).to_le_bytes());
        fixed[4..8].copy_from_slice(&value_len.to_le_bytes());
        fixed[8..12].copy_from_slice(&offset.to_le_bytes());
        fixed[12..20].copy_from_slice(&lsn.to_le_bytes());
        self.b.extend_from_slice(&fixed);
        self.b.extend_from_slice(key);
        self.count += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        self.b[12..16].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32c::crc32c(&self.b);
        self.b.extend_from_slice(&crc.to_le_bytes());
        self.b
    }
}

/// Decodes a summary written for `segment_id`; `None` if damaged, stale or of another version.
pub fn decode(segment_id: u64, b: &[u8]) -> Option<(u64, Vec<Entry>)> {
    if b.len() < FIXED + 4 || b[0..8] != SUMMARY_MAGIC {
        return None;
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let u32_at = |at: usize| {
        u32::from_le_bytes(
            body[at..at + 4]
                .try_into()
                .expect("a 4-byte range is a [u8; 4]"),
        )
    };
    let u64_at = |at: usize| {
        u64::from_le_bytes(
            body[at..at + 8]
                .try_into()
                .expect("an 8-byte range is a [u8; 8]"),
        )
    };
    if u32_at(8) != SUMMARY_VERSION || u64_at(16) != segment_id {
        return None;
    }
    let count = u32_at(12) as usize;
    let records_end = u64_at(24);
    let mut entries = Vec::with_capacity(count.min(body.len() / ENTRY_FIXED));
    let mut at = FIXED;
    for _ in 0..count {
        if at + ENTRY_FIXED > body.len() {
            return None;
        }
        let kind = Kind::from_u8(body[at])?;
        let key_len = u16::from_le_bytes([body[at + 2], body[at + 3]]) as usize;
        let value_len = u32_at(at + 4);
        let offset = u32_at(at + 8);
        let lsn = u64_at(at + 12);
        at += ENTRY_FIXED;
        if key_len == 0 || at + key_len > body.len() {
            return None;
        }
        entries.push(Entry {
            kind,
            key: body[at..at + key_len].into(),
            value_len,
            offset,
            lsn,
        });
        at += key_len;
    }
    // Every listed record must lie inside the records region it claims, so a summary that
    // passes its checksum but lies (crafted, or a bug) cannot send a read past the records.
    let in_bounds = entries.iter().all(|e| {
        let end =
            e.offset as u64 + crate::record::record_len(e.key.len(), e.value_len as usize) as u64;
        e.offset as u64 >= crate::segment::SEGMENT_HEADER_LEN as u64 && end <= records_end
    });
    // Fix (found in review): an end inside the header page made recovery's count of record
    // bytes (`end - SEGMENT_HEADER_LEN`) underflow.
    let end_ok = records_end >= crate::segment::SEGMENT_HEADER_LEN as u64;
    (at == body.len() && in_bounds && end_ok).then_some((records_end, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_stale_and_damaged() {
        let e = vec![
            Entry {
                kind: Kind::Put,
                key: b"abc".as_slice().into(),
                value_len: 10,
                offset: 4096,
                lsn: 1,
            },
            Entry {
                kind: Kind::Tombstone,
                key: b"d".as_slice().into(),
                value_len: 0,
                offset: 4136,
                lsn: 2,
            },
        ];
        let b = encode(7, 5000, &e);
        assert_eq!(decode(7, &b), Some((5000, e)));
        assert_eq!(decode(8, &b), None, "stale summary must be refused");
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 1;
            assert_eq!(decode(7, &d), None, "damage at {i} accepted");
        }
    }

    #[test]
    fn encode_records_lists_every_record_as_encode_does() {
        let start = crate::segment::SEGMENT_HEADER_LEN;
        let mut seg = vec![0u8; start];
        let mut expected = Vec::new();
        for (i, (kind, key, value)) in [
            (Kind::Put, b"k1".as_slice(), vec![1u8; 100]),
            (Kind::Tombstone, b"k22".as_slice(), vec![]),
            (Kind::Put, [9u8; 300].as_slice(), vec![2u8; 5000]),
        ]
        .into_iter()
        .enumerate()
        {
            expected.push(Entry {
                kind,
                key: key.into(),
                value_len: value.len() as u32,
                offset: seg.len() as u32,
                lsn: 10 + i as u64,
            });
            crate::record::encode(7, kind, key, &value, 10 + i as u64, &mut seg);
        }
        let end = seg.len();
        seg.resize(end + 4096, 0); // unwritten space after the records is not listed
        let b = encode_records(7, &seg, start, end);
        assert_eq!(b, encode(7, end as u64, &expected));
        assert_eq!(decode(7, &b), Some((end as u64, expected)));
        let empty = encode_records(7, &seg, start, start);
        assert_eq!(decode(7, &empty), Some((start as u64, vec![])));
    }

    /// A summary whose checksum holds but whose records end inside the header page (crafted,
    /// or a bug) is refused like a damaged one: the segment is scanned instead.
    #[test]
    fn an_end_inside_the_header_page_is_refused() {
        let start = crate::segment::SEGMENT_HEADER_LEN as u64;
        assert_eq!(decode(7, &encode(7, start, &[])), Some((start, vec![])));
        assert_eq!(decode(7, &encode(7, start - 1, &[])), None);
        assert_eq!(decode(7, &encode(7, 0, &[])), None);
    }
}
