//! The synthetic 3-D image: its voxels (`u16`, little-endian, as BigBrain's blocks), its
//! chunks, the value every voxel starts with, the increment and the check.

use crate::{fail, Result};
use serde::Serialize;

/// Bytes per voxel (`u16`).
pub const VOXEL_BYTES: u64 = 2;

/// An image cut into chunks: sizes in voxels along x, y, z (x varies fastest in a chunk's
/// bytes). Chunks at the far edges are smaller where a chunk size does not divide the image.
#[derive(Debug, Clone, Serialize)]
pub struct Geometry {
    /// Image size in voxels.
    pub image: [u64; 3],
    /// Chunk size in voxels (the edge chunks may be smaller).
    pub chunk: [u64; 3],
    /// Chunks along each axis.
    pub counts: [u64; 3],
}

impl Geometry {
    /// Checks the sizes: every dimension at least 1, the chunk no larger than the image, a
    /// chunk at most `max_chunk_bytes` (the store's largest value).
    pub fn new(image: [u64; 3], chunk: [u64; 3], max_chunk_bytes: u64) -> Result<Self> {
        const AXES: [&str; 3] = ["x", "y", "z"];
        for (i, axis) in AXES.iter().enumerate() {
            if image[i] == 0 {
                return fail(format!("--image: the {axis} size is 0 voxels"));
            }
            if chunk[i] == 0 {
                return fail(format!("--chunk: the {axis} size is 0 voxels"));
            }
            if chunk[i] > image[i] {
                return fail(format!(
                    "--chunk {}: larger than the image ({}) along {axis} ({} > {} voxels)",
                    dims(chunk),
                    dims(image),
                    chunk[i],
                    image[i]
                ));
            }
        }
        let voxels = image
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|v| v.checked_mul(VOXEL_BYTES));
        if voxels.is_none_or(|b| b > 1 << 50) {
            return fail(format!("--image {}: too large", dims(image)));
        }
        let chunk_bytes = chunk.iter().product::<u64>() * VOXEL_BYTES;
        if chunk_bytes > max_chunk_bytes {
            return fail(format!(
                "--chunk {}: {chunk_bytes} bytes, over the largest value a store takes \
                 ({max_chunk_bytes} bytes)",
                dims(chunk)
            ));
        }
        let counts = [0, 1, 2].map(|i| image[i].div_ceil(chunk[i]));
        Ok(Geometry {
            image,
            chunk,
            counts,
        })
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.counts.iter().product::<u64>() as usize
    }

    /// Bytes of the whole image.
    pub fn image_bytes(&self) -> u64 {
        self.image.iter().product::<u64>() * VOXEL_BYTES
    }

    /// Bytes of the largest chunk.
    pub fn max_chunk_bytes(&self) -> usize {
        (self.chunk.iter().product::<u64>() * VOXEL_BYTES) as usize
    }

    /// Origin and extent (voxels) of chunk `c`.
    pub fn extent(&self, c: usize) -> ([u64; 3], [u64; 3]) {
        let c = c as u64;
        let idx = [
            c % self.counts[0],
            (c / self.counts[0]) % self.counts[1],
            c / (self.counts[0] * self.counts[1]),
        ];
        let origin = [0, 1, 2].map(|i| idx[i] * self.chunk[i]);
        let ext = [0, 1, 2].map(|i| self.chunk[i].min(self.image[i] - origin[i]));
        (origin, ext)
    }

    /// Bytes of chunk `c`.
    pub fn chunk_bytes(&self, c: usize) -> usize {
        let (_, e) = self.extent(c);
        (e.iter().product::<u64>() * VOXEL_BYTES) as usize
    }

    /// Writes chunk `c` of the initial image into `buf` (its first `chunk_bytes(c)` bytes).
    pub fn fill_initial(&self, c: usize, buf: &mut [u8]) {
        let (o, e) = self.extent(c);
        let mut words = buf.chunks_exact_mut(2);
        for z in o[2]..o[2] + e[2] {
            for y in o[1]..o[1] + e[1] {
                for x in o[0]..o[0] + e[0] {
                    if let Some(w) = words.next() {
                        w.copy_from_slice(&initial(x, y, z).to_le_bytes());
                    }
                }
            }
        }
    }

    /// Voxels of chunk `c` in `buf` that are not the initial value plus `k` (mod 2^16).
    pub fn count_wrong(&self, c: usize, buf: &[u8], k: u32) -> u64 {
        let (o, e) = self.extent(c);
        let add = k as u16;
        let mut words = buf.chunks_exact(2);
        let mut wrong = 0u64;
        for z in o[2]..o[2] + e[2] {
            for y in o[1]..o[1] + e[1] {
                for x in o[0]..o[0] + e[0] {
                    let want = initial(x, y, z).wrapping_add(add);
                    match words.next() {
                        Some(w) if u16::from_le_bytes([w[0], w[1]]) == want => {}
                        _ => wrong += 1,
                    }
                }
            }
        }
        wrong
    }
}

/// The initial value of voxel (x, y, z): a cheap hash, so that a voxel moved to its
/// neighbour's place is caught by the check (a ramp would not be).
fn initial(x: u64, y: u64, z: u64) -> u16 {
    let h = x.wrapping_mul(40503) ^ y.wrapping_mul(34283) ^ z.wrapping_mul(49842);
    (h ^ (h >> 16)) as u16
}

/// Adds 1 to every voxel (mod 2^16) of `buf`.
pub fn increment(buf: &mut [u8]) {
    for w in buf.chunks_exact_mut(2) {
        let v = u16::from_le_bytes([w[0], w[1]]).wrapping_add(1);
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// "1024x1024x512".
pub fn dims(d: [u64; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

/// Parses "1024x1024x512" (or one number for a cube).
pub fn parse_dims(s: &str) -> std::result::Result<[u64; 3], String> {
    let parts: Vec<&str> = s.split(['x', 'X']).map(str::trim).collect();
    let nums: Vec<u64> = parts
        .iter()
        .map(|p| p.replace('_', "").parse::<u64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| format!("{s:?}: expected XxYxZ in voxels, e.g. 1024x1024x512"))?;
    match nums.as_slice() {
        [n] => Ok([*n; 3]),
        [x, y, z] => Ok([*x, *y, *z]),
        _ => Err(format!(
            "{s:?}: expected XxYxZ in voxels, e.g. 1024x1024x512"
        )),
    }
}

/// The cube of about `bytes` (`u16` voxels): the side is the cube root, rounded down.
pub fn cube_of_bytes(bytes: u64) -> [u64; 3] {
    let voxels = (bytes / VOXEL_BYTES) as f64;
    let mut n = voxels.cbrt().floor() as u64;
    // Correct the float's rounding either way.
    while (n + 1).pow(3) <= bytes / VOXEL_BYTES {
        n += 1;
    }
    while n > 0 && n.pow(3) > bytes / VOXEL_BYTES {
        n -= 1;
    }
    [n; 3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_chunks_cover_the_image_once() {
        let g = Geometry::new([10, 7, 5], [4, 4, 4], 1 << 20).unwrap();
        assert_eq!(g.counts, [3, 2, 2]);
        let total: usize = (0..g.chunks()).map(|c| g.chunk_bytes(c)).sum();
        assert_eq!(total as u64, g.image_bytes());
        assert_eq!(g.extent(g.chunks() - 1), ([8, 4, 4], [2, 3, 1]));
    }

    #[test]
    fn increment_and_check() {
        let g = Geometry::new([9, 8, 3], [4, 8, 2], 1 << 20).unwrap();
        for c in 0..g.chunks() {
            let mut buf = vec![0u8; g.chunk_bytes(c)];
            g.fill_initial(c, &mut buf);
            assert_eq!(g.count_wrong(c, &buf, 0), 0);
            increment(&mut buf);
            increment(&mut buf);
            assert_eq!(g.count_wrong(c, &buf, 2), 0);
            assert_eq!(g.count_wrong(c, &buf, 1), buf.len() as u64 / 2);
            buf.swap(0, 2);
            buf.swap(1, 3);
            assert!(g.count_wrong(c, &buf, 2) > 0 || buf[0..2] == buf[2..4]);
        }
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert!(Geometry::new([8, 8, 8], [16, 4, 4], 1 << 20).is_err());
        assert!(Geometry::new([8, 0, 8], [4, 4, 4], 1 << 20).is_err());
        assert!(Geometry::new([8, 8, 8], [0, 4, 4], 1 << 20).is_err());
        assert!(Geometry::new([64, 64, 64], [64, 64, 64], 1000).is_err());
        assert!(Geometry::new([u64::MAX, 2, 2], [1, 1, 1], 1 << 20).is_err());
    }

    #[test]
    fn parsing() {
        assert_eq!(parse_dims("1024x512x8"), Ok([1024, 512, 8]));
        assert_eq!(parse_dims("64"), Ok([64, 64, 64]));
        assert!(parse_dims("1x2").is_err());
        assert!(parse_dims("ax2x3").is_err());
        assert_eq!(cube_of_bytes(2 * 1000), [10; 3]);
        assert_eq!(cube_of_bytes(2 * 999), [9; 3]);
    }
}
