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
    let mut b = Vec::with_capacity(FIXED + entries.len() * ENTRY_FIXED + keys + 4);
    b.extend_from_slice(&SUMMARY_MAGIC);
    b.extend_from_slice(&SUMMARY_VERSION.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    b.extend_from_slice(&segment_id.to_le_bytes());
    b.extend_from_slice(&records_end.to_le_bytes());
    for e in entries {
        b.push(e.kind as u8);
        b.push(0);
        b.extend_from_slice(&(e.key.len() as u16).to_le_bytes());
        b.extend_from_slice(&e.value_len.to_le_bytes());
        b.extend_from_slice(&e.offset.to_le_bytes());
        b.extend_from_slice(&e.lsn.to_le_bytes());
        b.extend_from_slice(&e.key);
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
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
    let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
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
    (at == body.len() && in_bounds).then_some((records_end, entries))
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
}
