//! Small helpers shared by the benchmarks, the crash tests and the command line: byte sizes and
//! counts for people, a median, the hash the benchmarks derive their patterns from, and what
//! `--preallocate` means. (Hex is the `hex` crate's, as everywhere in the workspace.)

use crate::{Error, Result};

/// "1.50 GiB", "12.0 KiB", "100 B".
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// "2.31 M", "950 k", "12": a count or rate with a decimal prefix.
pub fn human_count(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.2} G", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.1} k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// "256 B", "4 KiB", "5568 B", "1 MiB": the largest binary unit that divides `bytes` exactly
/// (block and request sizes).
pub fn exact_bytes(bytes: u64) -> String {
    if bytes != 0 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes != 0 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// FNV-1a, 64 bits: where minidaq's fragment pattern starts for a key, and the key's part of
/// a stress value's seed.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Median of the finite values; the mean of the middle two for an even count; `None` if there
/// is none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `--preallocate` given without a size: all of --capacity.
pub const PREALLOCATE_ALL: u64 = u64::MAX;

/// Bytes to preallocate for `--preallocate` (`None`: not given; [`PREALLOCATE_ALL`]: all of
/// the capacity) within `capacity` (0: unbounded, where "all" has no meaning).
pub fn preallocate_bytes(preallocate: Option<u64>, capacity: u64) -> Result<u64> {
    match preallocate {
        None => Ok(0),
        Some(PREALLOCATE_ALL) if capacity == 0 => Err(Error::Msg(
            "--preallocate without a size preallocates all of --capacity: give --capacity, or a size (--preallocate 4GiB)".into(),
        )),
        Some(b) if capacity > 0 => Ok(b.min(capacity)),
        Some(b) => Ok(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(100.0), "100 B");
        assert_eq!(human_bytes(1536.0), "1.50 KiB");
        assert_eq!(human_count(2_310_000.0), "2.31 M");
        assert_eq!(exact_bytes(1 << 20), "1 MiB");
        assert_eq!(exact_bytes(4096), "4 KiB");
        assert_eq!(exact_bytes(5568), "5568 B");
        assert_eq!(exact_bytes(1000), "1000 B");
        assert_eq!(exact_bytes(0), "0 B");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn preallocation_within_the_capacity() {
        assert_eq!(preallocate_bytes(None, 100).unwrap(), 0);
        assert_eq!(preallocate_bytes(Some(PREALLOCATE_ALL), 100).unwrap(), 100);
        assert_eq!(preallocate_bytes(Some(50), 0).unwrap(), 50);
        assert!(preallocate_bytes(Some(PREALLOCATE_ALL), 0).is_err());
    }
}
