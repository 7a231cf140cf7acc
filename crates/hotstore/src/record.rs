//! Record framing: how one put or removal is laid out inside a segment.
//!
//! ```text
//! offset size field
//!  0     4    crc32c     Castagnoli, over: key ++ value ++ bytes 4..24 ++ segment id (8 bytes LE)
//!  4     2    magic      0x5248 ("HR" little-endian)
//!  6     1    version    RECORD_VERSION
//!  7     1    kind       1 = put, 2 = tombstone, 3 = event removal, 4 = event mark; bit 7
//!                         (`PERSISTED_FLAG`, store format 2): acknowledged as `Persisted`;
//!                         bit 6 (`SYNCED_BEFORE_FLAG`, format 3): every byte before the
//!                         record in its segment was durable when it was written; bit 5
//!                         (`SYNCED_TO_PREVIOUS_FLAG`, format 4): every byte before the start
//!                         of the segment's previous record with bit 6 or 5 was durable
//!  8     2    key_len    1..=MAX_KEY_LEN
//! 10     2    pad        bytes of zeros after the record (0..4096, a multiple of 8)
//! 12     4    value_len  0 for tombstones
//! 16     8    lsn        store-wide sequence number: the newest version of a key wins
//! 24     key_len   key
//!  ..    value_len value
//!  ..    0..7 zero padding to the next multiple of 8
//!  ..    pad  zeros: a direct record (below) ends on a 4 KiB boundary
//! ```
//! A direct record is written whole, header included, by one direct write of the 4 KiB
//! blocks it touches (`medium::direct`); its `pad` takes the segment's end to the next block
//! boundary, so the next record never shares a block with it (and never reads that block
//! back from the device). Readers of the segment step over a record with
//! [`Header::footprint`]; the index and the live/dead accounting count [`Header::record_len`]
//! and the pad as dead bytes.
//! Event records (kinds 3 and 4) carry an event prefix as their key (see `events`): a removal
//! (value empty) deletes every fragment of the event with a lower lsn, as one record; a mark
//! (value 1 byte: 1 = sealed, 2 = kept) records the event's lifecycle state.
//! All integers little-endian. Seeding the checksum with the segment id means a record left
//! over from a previous use of a recycled segment file never validates in the new one.
//! Writers store key and value first and the header last, so a record interrupted by a crash
//! has no valid header.
//! The persisted flag says the writer acknowledged the record only once it and every byte
//! before it in its segment were durable. The two sync flags say what was durable when the
//! record was written: everything before it (synced-before: the writer was idle through a
//! sync), or everything before the start of the previous record given a sync flag
//! (synced-to-previous: a sync reaching that record returned while writes went on past it,
//! the steady state of a busy segment). After a power cut, recovery uses them to tell the
//! unsynced tail of a segment from damage to what was durable (see `recovery::scan`): past a
//! gap, one synced-before record, or a synced-to-previous record after another flagged one,
//! proves the gap was durable once. Before format 3, a persisted record past a gap was taken
//! for that proof.

use crate::key::MAX_KEY_LEN;

/// Size of the record header.
pub const HEADER_LEN: usize = 24;
/// Records start at multiples of this.
pub const RECORD_ALIGN: usize = 8;
/// Magic of every record header.
pub const RECORD_MAGIC: u16 = 0x5248;
/// Current record format version.
pub const RECORD_VERSION: u8 = 1;
/// Largest value accepted, in bytes (256 MiB). Values larger than a segment get a segment of
/// their own.
pub const MAX_VALUE_LEN: u64 = 256 << 20;

/// Bit of the kind byte set on a record acknowledged as `Persisted` (store format 2).
pub const PERSISTED_FLAG: u8 = 0x80;
/// Bit of the kind byte set on a record written when every byte before it in its segment was
/// already durable (store format 3): written after a sync that covered them.
pub const SYNCED_BEFORE_FLAG: u8 = 0x40;
/// Bit of the kind byte set on a record written when every byte before the start of the
/// previous record of its segment with a sync flag (this or [`SYNCED_BEFORE_FLAG`]) was
/// durable, but not every byte before the record itself (store format 4): a sync reaching
/// that record returned while later records were being written. Past a gap, such a record
/// after another intact flagged record proves the gap was durable once: that record starts
/// past the gap.
pub const SYNCED_TO_PREVIOUS_FLAG: u8 = 0x20;
/// Every flag bit of the kind byte.
const FLAG_BITS: u8 = PERSISTED_FLAG | SYNCED_BEFORE_FLAG | SYNCED_TO_PREVIOUS_FLAG;

/// The flags a record header carries in its kind byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// [`PERSISTED_FLAG`].
    pub persisted: bool,
    /// [`SYNCED_BEFORE_FLAG`].
    pub synced_before: bool,
    /// [`SYNCED_TO_PREVIOUS_FLAG`].
    pub synced_to_previous: bool,
}

impl Flags {
    fn bits(self) -> u8 {
        (if self.persisted { PERSISTED_FLAG } else { 0 })
            | if self.synced_before {
                SYNCED_BEFORE_FLAG
            } else {
                0
            }
            | if self.synced_to_previous {
                SYNCED_TO_PREVIOUS_FLAG
            } else {
                0
            }
    }

    /// True if the record carries either sync flag.
    pub fn any_sync(self) -> bool {
        self.synced_before || self.synced_to_previous
    }

    fn from_bits(b: u8) -> Self {
        Flags {
            persisted: b & PERSISTED_FLAG != 0,
            synced_before: b & SYNCED_BEFORE_FLAG != 0,
            synced_to_previous: b & SYNCED_TO_PREVIOUS_FLAG != 0,
        }
    }
}

const _: () = assert!(HEADER_LEN.is_multiple_of(RECORD_ALIGN));
const _: () = assert!(MAX_VALUE_LEN < u32::MAX as u64);
const _: () = assert!(MAX_KEY_LEN < u16::MAX as usize);

/// What a record says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// The key has this value.
    Put = 1,
    /// The key is removed.
    Tombstone = 2,
    /// Every fragment of the event named by the key (an event prefix) with a lower lsn is
    /// removed: an acknowledged `Remove`, atomic because it is one record.
    EventRemove = 3,
    /// The event named by the key has the lifecycle mark in the 1-byte value
    /// (`EVENT_MARK_SEALED` or `EVENT_MARK_KEPT`); the newest mark wins.
    EventMark = 4,
}

/// Value of an [`Kind::EventMark`] record: the producer sealed the event.
pub const EVENT_MARK_SEALED: u8 = 1;
/// Value of an [`Kind::EventMark`] record: a consumer acknowledged the event with `Keep`.
pub const EVENT_MARK_KEPT: u8 = 2;

impl Kind {
    /// The kind stored as `b`, if there is one.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Put,
            2 => Kind::Tombstone,
            3 => Kind::EventRemove,
            4 => Kind::EventMark,
            _ => return None,
        })
    }

    /// True for the kinds that name an event rather than a key.
    pub fn is_event(self) -> bool {
        matches!(self, Kind::EventRemove | Kind::EventMark)
    }

    /// The only value length this kind allows, if it fixes one.
    fn fixed_value_len(self) -> Option<usize> {
        match self {
            Kind::Put => None,
            Kind::Tombstone | Kind::EventRemove => Some(0),
            Kind::EventMark => Some(1),
        }
    }
}

/// A parsed and validated record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Put or tombstone.
    pub kind: Kind,
    /// Key length.
    pub key_len: usize,
    /// Value length.
    pub value_len: usize,
    /// Store-wide sequence number.
    pub lsn: u64,
    /// Zeros after the record up to the next 4 KiB boundary (direct records; else 0).
    pub pad: usize,
    /// Acknowledged as `Persisted`: it and every byte before it in the segment were durable
    /// before its writer returned ([`PERSISTED_FLAG`]).
    pub persisted: bool,
    /// Every byte before it in the segment was durable when it was written
    /// ([`SYNCED_BEFORE_FLAG`]).
    pub synced_before: bool,
    /// Every byte before the start of the segment's previous record with a sync flag was
    /// durable when it was written ([`SYNCED_TO_PREVIOUS_FLAG`]).
    pub synced_to_previous: bool,
}

impl Header {
    /// Bytes the record occupies, its 8-byte padding included and its `pad` not: what the
    /// index and the live/dead accounting count.
    pub fn record_len(&self) -> usize {
        record_len(self.key_len, self.value_len)
    }

    /// Bytes from this record to the next one: [`Header::record_len`] and the pad.
    pub fn footprint(&self) -> usize {
        self.record_len() + self.pad
    }
}

/// Largest `pad` a header may carry (the zeros to the next 4 KiB boundary).
pub const MAX_PAD: usize = 4096 - RECORD_ALIGN;

/// Bytes a record with these lengths occupies, padding included.
pub fn record_len(key_len: usize, value_len: usize) -> usize {
    (HEADER_LEN + key_len + value_len).next_multiple_of(RECORD_ALIGN)
}

/// Header bytes 4..24 (everything but the checksum).
fn header_tail(
    kind: Kind,
    flags: Flags,
    key_len: usize,
    value_len: usize,
    lsn: u64,
    pad: usize,
) -> [u8; HEADER_LEN - 4] {
    debug_assert!(key_len <= MAX_KEY_LEN && value_len as u64 <= MAX_VALUE_LEN);
    debug_assert!(pad <= MAX_PAD && pad.is_multiple_of(RECORD_ALIGN));
    let mut t = [0u8; HEADER_LEN - 4];
    t[0..2].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    t[2] = RECORD_VERSION;
    t[3] = kind as u8 | flags.bits();
    t[4..6].copy_from_slice(&(key_len as u16).to_le_bytes());
    t[6..8].copy_from_slice(&(pad as u16).to_le_bytes());
    t[8..12].copy_from_slice(&(value_len as u32).to_le_bytes());
    t[12..20].copy_from_slice(&lsn.to_le_bytes());
    t
}

/// Checksum of a record, given its parts.
pub fn checksum(segment_id: u64, header_tail: &[u8], key: &[u8], value: &[u8]) -> u32 {
    finish_checksum(body_checksum(key, value), segment_id, header_tail)
}

/// The part of the checksum over key and value: computed before the header is known (the
/// lsn is only assigned under the index lock), so the expensive part runs outside any lock.
pub fn body_checksum(key: &[u8], value: &[u8]) -> u32 {
    body_checksum_parts(key, &[value])
}

/// [`body_checksum`] of a value given as consecutive parts.
pub fn body_checksum_parts(key: &[u8], parts: &[&[u8]]) -> u32 {
    parts.iter().fold(crate::checksum::crc32c(key), |crc, p| {
        crate::checksum::crc32c_append(crc, p)
    })
}

/// Completes a checksum started by [`body_checksum`].
pub fn finish_checksum(body: u32, segment_id: u64, header_tail: &[u8]) -> u32 {
    crate::checksum::crc32c_append(
        crate::checksum::crc32c_append(body, header_tail),
        &segment_id.to_le_bytes(),
    )
}

/// Builds the header from a precomputed [`body_checksum`], with `flags` in its kind byte.
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one header, each a plain number"
)]
pub fn encode_header_with(
    segment_id: u64,
    kind: Kind,
    flags: Flags,
    key_len: usize,
    value_len: usize,
    lsn: u64,
    body_crc: u32,
) -> [u8; HEADER_LEN] {
    encode_header_padded(
        segment_id, kind, flags, key_len, value_len, lsn, body_crc, 0,
    )
}

/// [`encode_header_with`] of a direct record followed by `pad` zeros.
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one header, each a plain number"
)]
pub fn encode_header_padded(
    segment_id: u64,
    kind: Kind,
    flags: Flags,
    key_len: usize,
    value_len: usize,
    lsn: u64,
    body_crc: u32,
    pad: usize,
) -> [u8; HEADER_LEN] {
    let tail = header_tail(kind, flags, key_len, value_len, lsn, pad);
    let crc = finish_checksum(body_crc, segment_id, &tail);
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&crc.to_le_bytes());
    h[4..].copy_from_slice(&tail);
    h
}

/// Why bytes at an offset are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// Fewer bytes left than a header, or the lengths run past the end.
    Truncated,
    /// All-zero header: never written (the normal end of a segment's records).
    Unwritten,
    /// Magic, version, kind or lengths are wrong.
    BadHeader(&'static str),
    /// The header is plausible but the checksum does not match.
    BadChecksum,
}

/// Parses the header at the start of `buf` without checking the checksum.
pub fn parse_header(buf: &[u8]) -> Result<Header, Invalid> {
    if buf.len() < HEADER_LEN {
        return Err(Invalid::Truncated);
    }
    let h = &buf[..HEADER_LEN];
    if h.iter().all(|&b| b == 0) {
        return Err(Invalid::Unwritten);
    }
    if u16::from_le_bytes([h[4], h[5]]) != RECORD_MAGIC {
        return Err(Invalid::BadHeader("bad magic"));
    }
    if h[6] != RECORD_VERSION {
        return Err(Invalid::BadHeader("unknown record version"));
    }
    let Some(kind) = Kind::from_u8(h[7] & !FLAG_BITS) else {
        return Err(Invalid::BadHeader("unknown record kind"));
    };
    let key_len = u16::from_le_bytes([h[8], h[9]]) as usize;
    let value_len = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
    let pad = u16::from_le_bytes([h[10], h[11]]) as usize;
    if pad > MAX_PAD || !pad.is_multiple_of(RECORD_ALIGN) {
        return Err(Invalid::BadHeader("pad out of bounds"));
    }
    if key_len == 0 || key_len > MAX_KEY_LEN {
        return Err(Invalid::BadHeader("key length out of bounds"));
    }
    if value_len as u64 > MAX_VALUE_LEN || kind.fixed_value_len().is_some_and(|n| n != value_len) {
        return Err(Invalid::BadHeader("value length out of bounds"));
    }
    let lsn = u64::from_le_bytes(h[16..24].try_into().expect("an 8-byte range is a [u8; 8]"));
    let flags = Flags::from_bits(h[7]);
    let header = Header {
        kind,
        key_len,
        value_len,
        lsn,
        pad,
        persisted: flags.persisted,
        synced_before: flags.synced_before,
        synced_to_previous: flags.synced_to_previous,
    };
    // Only the record is checked, not its pad: readers take exactly `record_len` bytes;
    // walkers check the footprint against the segment's end.
    if buf.len() < HEADER_LEN + key_len + value_len {
        return Err(Invalid::Truncated);
    }
    Ok(header)
}

/// Parses and fully verifies the record at the start of `buf`.
pub fn decode(segment_id: u64, buf: &[u8]) -> Result<(Header, &[u8], &[u8]), Invalid> {
    let header = parse_header(buf)?;
    let key = &buf[HEADER_LEN..HEADER_LEN + header.key_len];
    let value = &buf[HEADER_LEN + header.key_len..HEADER_LEN + header.key_len + header.value_len];
    let stored = u32::from_le_bytes(buf[0..4].try_into().expect("a 4-byte range is a [u8; 4]"));
    if checksum(segment_id, &buf[4..HEADER_LEN], key, value) != stored {
        return Err(Invalid::BadChecksum);
    }
    Ok((header, key, value))
}

/// Verifies the checksum of a record whose header was already parsed.
pub fn verify(segment_id: u64, record: &[u8], header: &Header) -> bool {
    let key_end = HEADER_LEN + header.key_len;
    let stored = u32::from_le_bytes(
        record[0..4]
            .try_into()
            .expect("a 4-byte range is a [u8; 4]"),
    );
    checksum(
        segment_id,
        &record[4..HEADER_LEN],
        &record[HEADER_LEN..key_end],
        &record[key_end..key_end + header.value_len],
    ) == stored
}

/// Serialises a whole record into `out` (the unit tests build segments with it).
#[cfg(test)]
pub fn encode(segment_id: u64, kind: Kind, key: &[u8], value: &[u8], lsn: u64, out: &mut Vec<u8>) {
    encode_flagged(segment_id, kind, Flags::default(), key, value, lsn, out)
}

/// [`encode`] with the flags as given.
#[cfg(test)]
pub fn encode_flagged(
    segment_id: u64,
    kind: Kind,
    flags: Flags,
    key: &[u8],
    value: &[u8],
    lsn: u64,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let body = body_checksum(key, value);
    out.extend_from_slice(&encode_header_with(
        segment_id,
        kind,
        flags,
        key.len(),
        value.len(),
        lsn,
        body,
    ));
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out.resize(start + record_len(key.len(), value.len()), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_bit_flip_is_caught() {
        let mut buf = Vec::new();
        encode(7, Kind::Put, b"key", b"value!", 42, &mut buf);
        assert_eq!(buf.len(), 40);
        let (h, k, v) = decode(7, &buf).unwrap();
        assert_eq!(
            (h.kind, k, v, h.lsn),
            (Kind::Put, &b"key"[..], &b"value!"[..], 42)
        );
        assert_eq!(
            decode(8, &buf),
            Err(Invalid::BadChecksum),
            "another segment's stamp"
        );
        for bit in 0..(HEADER_LEN + 9) * 8 {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(7, &damaged).is_err(), "flip of bit {bit} not caught");
        }
        for cut in 0..HEADER_LEN + 9 {
            assert!(decode(7, &buf[..cut]).is_err(), "cut at {cut} accepted");
        }
    }

    #[test]
    fn the_flags_round_trip_beside_every_kind() {
        for (kind, value) in [
            (Kind::Put, &b"v"[..]),
            (Kind::Tombstone, &b""[..]),
            (Kind::EventRemove, &b""[..]),
            (Kind::EventMark, &[EVENT_MARK_KEPT][..]),
        ] {
            for bits in 0..8u8 {
                let flags = Flags {
                    persisted: bits & 1 != 0,
                    synced_before: bits & 2 != 0,
                    synced_to_previous: bits & 4 != 0,
                };
                let mut buf = Vec::new();
                encode_flagged(3, kind, flags, b"k", value, 9, &mut buf);
                let (h, _, v) = decode(3, &buf).unwrap();
                assert_eq!(
                    (
                        h.kind,
                        h.persisted,
                        h.synced_before,
                        h.synced_to_previous,
                        v
                    ),
                    (
                        kind,
                        flags.persisted,
                        flags.synced_before,
                        flags.synced_to_previous,
                        value
                    )
                );
                assert_eq!(Flags::from_bits(buf[7]), flags, "in the kind byte");
                assert_eq!(buf[7] & !FLAG_BITS, kind as u8, "beside the kind");
            }
        }
    }

    #[test]
    fn zero_bytes_read_as_unwritten() {
        assert_eq!(parse_header(&[0u8; 64]), Err(Invalid::Unwritten));
    }
}
