//! A *slice fragment*: one link's frames of one time slice of a recording, stored as one value
//! under the DAQ key `(run = recording id, event = slice index, detector = link, component =
//! part)`. Every slice of a recording is one event, and every link contributes one fragment (or
//! several parts when a slice exceeds the fragment size bound).
//!
//! ```text
//! offset size field
//!  0     4    magic        0x4c535348 ("HSSL" little-endian)
//!  4     2    version      SLICE_VERSION
//!  6     2    link
//!  8     4    recording    recording id
//! 12     4    part         0, 1, ... within (slice, link)
//! 16     8    slice        slice index
//! 24     8    first_ring   ring sequence number of the first frame (frames are consecutive)
//! 32     4    frames       frame count n
//! 36     4    frame_len
//! 40     8    first_ts_ns
//! 48     8    last_ts_ns
//! 56     4    reserved     0
//! 60     4    crc32c       over bytes 0..60
//! 64     8n   timestamps   one u64 per frame
//!  ..    n*frame_len      the frames, as received
//!  ..    zero padding: the whole store record (24-byte header, 16-byte key, value) is a
//!        multiple of 4096 bytes, so a recording's records stay aligned for direct I/O
//! ```

use hotstore::FragmentKey;

/// Size of the slice header.
pub const SLICE_HEADER_LEN: usize = 64;
/// Slice magic.
pub const SLICE_MAGIC: u32 = 0x4c53_5348;
/// Slice format version.
pub const SLICE_VERSION: u16 = 1;
/// Store record overhead before the value (record header + 16-byte key).
const RECORD_PREFIX: usize = 24 + 16;
/// Alignment of a whole slice record.
pub const SLICE_ALIGN: usize = 4096;

/// The header fields of a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceHeader {
    /// Link.
    pub link: u16,
    /// Recording id.
    pub recording: u32,
    /// Part within (slice, link).
    pub part: u32,
    /// Slice index.
    pub slice: u64,
    /// Ring sequence number of the first frame.
    pub first_ring: u64,
    /// Frames in the slice.
    pub frames: u32,
    /// Bytes per frame.
    pub frame_len: u32,
    /// Timestamp of the first frame.
    pub first_ts_ns: u64,
    /// Timestamp of the last frame.
    pub last_ts_ns: u64,
}

/// The value length of a slice of `frames` frames of `frame_len` bytes (padded for alignment).
pub fn value_len(frames: usize, frame_len: usize) -> usize {
    let used = RECORD_PREFIX + SLICE_HEADER_LEN + frames * (8 + frame_len);
    used.next_multiple_of(SLICE_ALIGN) - RECORD_PREFIX
}

/// The most frames a slice value of at most `max_value` bytes holds (at least 1).
pub fn frames_fitting(max_value: usize, frame_len: usize) -> usize {
    // Padding adds up to SLICE_ALIGN - 1 bytes: leave room for it.
    let room = max_value.saturating_sub(SLICE_HEADER_LEN + SLICE_ALIGN);
    (room / (8 + frame_len)).max(1)
}

/// The store key of a slice fragment.
pub fn key(recording: u32, slice: u64, link: u16, part: u16) -> [u8; 16] {
    FragmentKey {
        run: recording,
        event: slice,
        detector: link,
        component: part,
    }
    .to_bytes()
}

/// Zeros for the padding of a slice value.
static ZEROS: [u8; SLICE_ALIGN] = [0; SLICE_ALIGN];

/// Builds a slice's header and timestamp table; the frames stay where they are (in a link's
/// ring) and are given to the store as separate parts, so each frame byte is copied once.
pub struct SliceBuilder {
    head: Vec<u8>,
    frame_len: usize,
    capacity_frames: usize,
    header: SliceHeader,
}

impl SliceBuilder {
    /// A builder for slices of up to `capacity_frames` frames of `frame_len` bytes.
    pub fn new(frame_len: usize, capacity_frames: usize) -> Self {
        SliceBuilder {
            head: vec![0u8; SLICE_HEADER_LEN + 8 * capacity_frames],
            frame_len,
            capacity_frames,
            header: SliceHeader {
                link: 0,
                recording: 0,
                part: 0,
                slice: 0,
                first_ring: 0,
                frames: 0,
                frame_len: frame_len as u32,
                first_ts_ns: 0,
                last_ts_ns: 0,
            },
        }
    }

    /// Starts an empty slice.
    pub fn start(&mut self, recording: u32, slice: u64, link: u16, part: u32) {
        self.header = SliceHeader {
            link,
            recording,
            part,
            slice,
            first_ring: 0,
            frames: 0,
            frame_len: self.frame_len as u32,
            first_ts_ns: 0,
            last_ts_ns: 0,
        };
    }

    /// The slice being built.
    pub fn header(&self) -> &SliceHeader {
        &self.header
    }

    /// Frames so far.
    pub fn frames(&self) -> usize {
        self.header.frames as usize
    }

    /// Whether frame `ring_seq` can join: there is room and it follows the last one.
    pub fn accepts(&self, ring_seq: u64) -> bool {
        self.frames() < self.capacity_frames
            && (self.frames() == 0 || self.header.first_ring + self.frames() as u64 == ring_seq)
    }

    /// Appends frame `ring_seq` stamped `ts_ns`. Panics unless [`Self::accepts`] it.
    pub fn push(&mut self, ring_seq: u64, ts_ns: u64) {
        assert!(self.accepts(ring_seq));
        let n = self.frames();
        if n == 0 {
            self.header.first_ring = ring_seq;
            self.header.first_ts_ns = ts_ns;
        }
        self.header.last_ts_ns = ts_ns;
        let at = SLICE_HEADER_LEN + 8 * n;
        self.head[at..at + 8].copy_from_slice(&ts_ns.to_le_bytes());
        self.header.frames += 1;
    }

    /// The slice's first part (header and timestamp table) and the zero padding that ends the
    /// value; the frames go between them. Valid until the next `start`.
    pub fn finish(&mut self) -> (&[u8], &'static [u8]) {
        let n = self.frames();
        let h = &self.header;
        let b = &mut self.head;
        b[0..4].copy_from_slice(&SLICE_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&SLICE_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&h.link.to_le_bytes());
        b[8..12].copy_from_slice(&h.recording.to_le_bytes());
        b[12..16].copy_from_slice(&h.part.to_le_bytes());
        b[16..24].copy_from_slice(&h.slice.to_le_bytes());
        b[24..32].copy_from_slice(&h.first_ring.to_le_bytes());
        b[32..36].copy_from_slice(&h.frames.to_le_bytes());
        b[36..40].copy_from_slice(&h.frame_len.to_le_bytes());
        b[40..48].copy_from_slice(&h.first_ts_ns.to_le_bytes());
        b[48..56].copy_from_slice(&h.last_ts_ns.to_le_bytes());
        b[56..60].fill(0);
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        let used = SLICE_HEADER_LEN + n * (8 + self.frame_len);
        let pad = value_len(n, self.frame_len) - used;
        (&self.head[..SLICE_HEADER_LEN + 8 * n], &ZEROS[..pad])
    }
}

/// Why a stored slice does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSlice(pub String);

/// A parsed slice: header, timestamps and frames, borrowed from the value.
pub struct Slice<'a> {
    /// The header.
    pub header: SliceHeader,
    value: &'a [u8],
}

impl<'a> Slice<'a> {
    /// Parses and checks a slice value.
    pub fn parse(value: &'a [u8]) -> Result<Slice<'a>, BadSlice> {
        let bad = |m: &str| Err(BadSlice(m.to_string()));
        if value.len() < SLICE_HEADER_LEN {
            return bad("shorter than a slice header");
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes(
                value[at..at + 4]
                    .try_into()
                    .expect("a 4-byte range is a [u8; 4]"),
            )
        };
        let u64_at = |at: usize| {
            u64::from_le_bytes(
                value[at..at + 8]
                    .try_into()
                    .expect("an 8-byte range is a [u8; 8]"),
            )
        };
        if u32_at(0) != SLICE_MAGIC {
            return bad("not a slice (wrong magic)");
        }
        if u16::from_le_bytes([value[4], value[5]]) != SLICE_VERSION {
            return bad("unknown slice version");
        }
        if u32_at(60) != crc32c::crc32c(&value[0..60]) {
            return bad("slice header checksum mismatch");
        }
        let header = SliceHeader {
            link: u16::from_le_bytes([value[6], value[7]]),
            recording: u32_at(8),
            part: u32_at(12),
            slice: u64_at(16),
            first_ring: u64_at(24),
            frames: u32_at(32),
            frame_len: u32_at(36),
            first_ts_ns: u64_at(40),
            last_ts_ns: u64_at(48),
        };
        let need = (header.frames as u64)
            .checked_mul(8 + header.frame_len as u64)
            .and_then(|n| n.checked_add(SLICE_HEADER_LEN as u64));
        if need.is_none_or(|n| n > value.len() as u64) || header.frame_len == 0 {
            return bad("frame count and size exceed the value");
        }
        Ok(Slice { header, value })
    }

    /// Timestamp of frame `i`.
    pub fn ts(&self, i: usize) -> u64 {
        let at = SLICE_HEADER_LEN + 8 * i;
        u64::from_le_bytes(
            self.value[at..at + 8]
                .try_into()
                .expect("an 8-byte range is a [u8; 8]"),
        )
    }

    /// Frame `i`.
    pub fn frame(&self, i: usize) -> &'a [u8] {
        let fl = self.header.frame_len as usize;
        let at = SLICE_HEADER_LEN + 8 * self.header.frames as usize + i * fl;
        &self.value[at..at + fl]
    }

    /// All frames, contiguous.
    pub fn frames_bytes(&self) -> &'a [u8] {
        let fl = self.header.frame_len as usize;
        let at = SLICE_HEADER_LEN + 8 * self.header.frames as usize;
        &self.value[at..at + fl * self.header.frames as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_round_trip_and_records_are_aligned() {
        for frames in [1usize, 2, 7, 188] {
            let mut b = SliceBuilder::new(5568, 188);
            b.start(3, 9, 2, 0);
            let mut body = Vec::new();
            for i in 0..frames {
                b.push(100 + i as u64, 1000 + i as u64);
                body.extend_from_slice(&vec![i as u8; 5568]);
            }
            assert!(!b.accepts(100 + frames as u64 + 1), "not the next frame");
            let (head, pad) = b.finish();
            let v = [head, &body[..], pad].concat();
            assert_eq!((v.len() + 40) % 4096, 0);
            let s = Slice::parse(&v).unwrap();
            assert_eq!(s.header.frames as usize, frames);
            assert_eq!(
                (s.header.recording, s.header.slice, s.header.link),
                (3, 9, 2)
            );
            for i in 0..frames {
                assert_eq!(s.ts(i), 1000 + i as u64);
                assert_eq!(s.frame(i), &vec![i as u8; 5568][..]);
            }
        }
        assert!(value_len(frames_fitting(1 << 20, 5568), 5568) <= 1 << 20);
        assert!(value_len(frames_fitting(1 << 20, 5568) + 1, 5568) > (1 << 20) - 4096);
    }
}
