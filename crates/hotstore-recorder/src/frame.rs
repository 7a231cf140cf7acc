//! The self-describing frame of the built-in generator, the UDP sender and `verify`.
//!
//! ```text
//! offset size field
//!  0     4    magic     0x46525348 ("HSRF" little-endian)
//!  4     2    link      link id
//!  6     2    version   FRAME_VERSION
//!  8     8    seq       per-link sequence number, from 0, +1 per frame
//! 16     8    ts_ns     timestamp (ns since the Unix epoch)
//! 24     4    len       whole frame length in bytes (header included)
//! 28     4    crc32c    over bytes 0..28 and the payload
//! 32     ..   payload   a pattern derived from (link, seq)
//! ```
//! All integers little-endian. Frames pushed through the library may have any format; only
//! frames with this header are checked frame by frame by `verify`.

/// Size of the frame header.
pub const FRAME_HEADER_LEN: usize = 32;
/// Magic of every frame.
pub const FRAME_MAGIC: u32 = 0x4652_5348;
/// Frame format version.
pub const FRAME_VERSION: u16 = 1;
/// Smallest frame the generator makes (a header and 32 bytes of payload).
pub const MIN_FRAME_LEN: usize = FRAME_HEADER_LEN + 32;
/// Largest frame (a UDP datagram).
pub const MAX_FRAME_LEN: usize = 65_507;

/// The parsed header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Link id.
    pub link: u16,
    /// Per-link sequence number.
    pub seq: u64,
    /// Timestamp, ns since the Unix epoch.
    pub ts_ns: u64,
}

/// Why a frame does not check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFault {
    /// Not a frame of this format (shorter than a header, or wrong magic or version).
    NotAFrame,
    /// Its length field disagrees with its size.
    BadLength,
    /// Its checksum does not match.
    BadChecksum,
}

/// A payload pattern source: a per-link block of pseudo-random bytes that frames slide over,
/// so every frame differs and making one costs a memcpy.
pub struct Pattern {
    block: Vec<u8>,
}

const PATTERN_LEN: usize = 1 << 17;

impl Pattern {
    /// The pattern of `link`.
    pub fn new(link: u16) -> Self {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (link as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let mut block = Vec::with_capacity(PATTERN_LEN + MAX_FRAME_LEN);
        while block.len() < PATTERN_LEN + MAX_FRAME_LEN {
            // SplitMix64.
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            block.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        Pattern { block }
    }

    /// Writes frame `seq` of `link` with timestamp `ts_ns` into `out` (its whole length).
    pub fn fill(&self, out: &mut [u8], link: u16, seq: u64, ts_ns: u64) {
        assert!((MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&out.len()));
        let start = (seq.wrapping_mul(8 * 97) as usize) % PATTERN_LEN;
        let payload = out.len() - FRAME_HEADER_LEN;
        out[FRAME_HEADER_LEN..].copy_from_slice(&self.block[start..start + payload]);
        write_header(out, link, seq, ts_ns);
    }
}

/// Writes the header (and checksum) of a frame whose payload is already in place.
pub fn write_header(out: &mut [u8], link: u16, seq: u64, ts_ns: u64) {
    out[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    out[4..6].copy_from_slice(&link.to_le_bytes());
    out[6..8].copy_from_slice(&FRAME_VERSION.to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..24].copy_from_slice(&ts_ns.to_le_bytes());
    let len = out.len() as u32;
    out[24..28].copy_from_slice(&len.to_le_bytes());
    let crc = frame_crc(out);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
}

fn frame_crc(frame: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&frame[..28]);
    crc32c::crc32c_append(crc, &frame[FRAME_HEADER_LEN..])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(
        b[at..at + 8]
            .try_into()
            .expect("an 8-byte range is a [u8; 8]"),
    )
}

/// The header of `frame` without checking its checksum, if it is a frame of this format.
pub fn peek(frame: &[u8]) -> Option<FrameHeader> {
    if frame.len() < FRAME_HEADER_LEN
        || u32::from_le_bytes(frame[0..4].try_into().ok()?) != FRAME_MAGIC
        || u16::from_le_bytes(frame[6..8].try_into().ok()?) != FRAME_VERSION
    {
        return None;
    }
    Some(FrameHeader {
        link: u16::from_le_bytes(frame[4..6].try_into().ok()?),
        seq: u64_at(frame, 8),
        ts_ns: u64_at(frame, 16),
    })
}

/// Checks `frame` completely: format, length and checksum.
pub fn check(frame: &[u8]) -> Result<FrameHeader, FrameFault> {
    let h = peek(frame).ok_or(FrameFault::NotAFrame)?;
    let len = u32::from_le_bytes(
        frame[24..28]
            .try_into()
            .expect("a 4-byte range is a [u8; 4]"),
    ) as usize;
    if len != frame.len() {
        return Err(FrameFault::BadLength);
    }
    let stored = u32::from_le_bytes(
        frame[28..32]
            .try_into()
            .expect("a 4-byte range is a [u8; 4]"),
    );
    if stored != frame_crc(frame) {
        return Err(FrameFault::BadChecksum);
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_frame_checks_and_every_bit_flip_is_caught() {
        let p = Pattern::new(3);
        let mut f = vec![0u8; 200];
        p.fill(&mut f, 3, 41, 1_000_000_007);
        assert_eq!(
            check(&f),
            Ok(FrameHeader {
                link: 3,
                seq: 41,
                ts_ns: 1_000_000_007
            })
        );
        for bit in 0..f.len() * 8 {
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            assert!(check(&g).is_err(), "bit {bit} flip not caught");
        }
    }

    #[test]
    fn frames_of_one_link_differ() {
        let p = Pattern::new(0);
        let (mut a, mut b) = (vec![0u8; 5568], vec![0u8; 5568]);
        p.fill(&mut a, 0, 1, 5);
        p.fill(&mut b, 0, 2, 5);
        assert_ne!(a[32..], b[32..]);
    }
}
