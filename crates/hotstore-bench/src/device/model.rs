//! The papers' two sizing models, as pure functions (no I/O), and the parsers for their inputs.
//!
//! * DUNE (Fig. 6): data arriving at `input` and leaving for storage at `output` builds up a
//!   backlog in DRAM of `(input - output) x duration` ([`backlog_bytes`]).
//! * Neuroimaging (Eq. 1): a job that reads `D` bytes and writes `D` bytes on a device with read
//!   bandwidth `R` and write bandwidth `W` takes at least `M >= D/R + D/W` ([`makespan_bound_secs`]).
//!
//! Units: rates and sizes written with `KB`, `MB`, `GB`, `TB` are powers of 1000 (as in the
//! papers); `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` are powers of 1024 (as everywhere else in
//! hotstore).

/// Bytes that pile up in DRAM when data arrives at `input_bps` and drains at `output_bps` for
/// `secs` seconds: `(input - output) x secs`, and 0 when the output keeps up.
pub fn backlog_bytes(input_bps: f64, output_bps: f64, secs: f64) -> f64 {
    ((input_bps - output_bps) * secs).max(0.0)
}

/// Seconds until a DRAM buffer of `dram_bytes` is full at the given rates; `None` when the
/// output keeps up (the buffer never fills).
pub fn secs_until_full(input_bps: f64, output_bps: f64, dram_bytes: f64) -> Option<f64> {
    let net = input_bps - output_bps;
    (net > 0.0).then(|| dram_bytes / net)
}

/// The backlog at `points` evenly spaced times from 0 to `secs` (inclusive), for a plot.
pub fn backlog_series(
    input_bps: f64,
    output_bps: f64,
    secs: f64,
    points: usize,
) -> Vec<(f64, f64)> {
    let n = points.max(2);
    (0..n)
        .map(|i| {
            let t = secs * i as f64 / (n - 1) as f64;
            (t, backlog_bytes(input_bps, output_bps, t))
        })
        .collect()
}

/// The makespan lower bound of Eq. 1, split into its read and write parts.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Makespan {
    /// D / R
    pub read_secs: f64,
    /// D / W
    pub write_secs: f64,
    /// D / R + D / W
    pub bound_secs: f64,
}

/// `M >= D/R + D/W` for `data_bytes` read at `read_bps` and written at `write_bps`.
pub fn makespan_bound_secs(data_bytes: f64, read_bps: f64, write_bps: f64) -> Makespan {
    let read_secs = data_bytes / read_bps;
    let write_secs = data_bytes / write_bps;
    Makespan {
        read_secs,
        write_secs,
        bound_secs: read_secs + write_secs,
    }
}

/// Splits "12.5GB" into (12.5, "gb"); the unit is lower-cased and trimmed.
fn split_number(s: &str) -> Option<(f64, String)> {
    let t = s.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '_'))
        .unwrap_or(t.len());
    // "1e9" is a number, but "1e" followed by a unit is not: let the parse decide.
    let num: f64 = t[..end].replace('_', "").parse().ok()?;
    Some((num, t[end..].trim().to_ascii_lowercase()))
}

/// Multiplier of a byte unit: decimal for KB/MB/GB/TB, binary for K/KiB/M/MiB/G/GiB/T/TiB.
fn byte_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        _ => return None,
    })
}

const BYTE_UNITS_HELP: &str =
    "B, KB, MB, GB, TB (powers of 1000) or K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024)";

/// Parses a byte count such as `100GB` (10^11), `64GiB`, `1.5TB` or `123456`.
pub fn parse_bytes(s: &str) -> Result<f64, String> {
    let (n, unit) =
        split_number(s).ok_or_else(|| format!("`{s}` is not a size (e.g. 100GB, 64GiB)"))?;
    let mult = byte_unit(&unit)
        .ok_or_else(|| format!("unknown unit `{unit}` in `{s}` (use {BYTE_UNITS_HELP})"))?;
    let v = n * mult;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("`{s}`: a size must be positive"));
    }
    Ok(v)
}

/// Parses a rate in bytes per second such as `10GB/s`, `1.2 GB/s`, `800MiB/s` or `5e9`
/// (`/s` may be left out).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let (n, unit) = split_number(s)
        .ok_or_else(|| format!("`{s}` is not a rate (e.g. 10GB/s, 800MiB/s, 1.2GB/s)"))?;
    let unit = unit
        .strip_suffix("/s")
        .or_else(|| unit.strip_suffix("ps"))
        .unwrap_or(&unit)
        .trim();
    let mult = byte_unit(unit).ok_or_else(|| {
        format!("unknown unit `{unit}` in `{s}` (use {BYTE_UNITS_HELP}, per second: e.g. GB/s)")
    })?;
    let v = n * mult;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("`{s}`: a rate must be positive"));
    }
    Ok(v)
}

/// Parses a duration such as `100s`, `100`, `1.5min`, `2h` or `250ms` into seconds.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let (n, unit) =
        split_number(s).ok_or_else(|| format!("`{s}` is not a duration (e.g. 100s, 5min, 2h)"))?;
    let mult = match unit.as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" | "mins" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86400.0,
        other => {
            return Err(format!(
                "unknown time unit `{other}` in `{s}` (use ms, s, min, h or d)"
            ))
        }
    };
    let v = n * mult;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("`{s}`: a duration must be positive"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_is_input_minus_output_times_duration() {
        // The DUNE example: 10 GB/s in, 5 GB/s out for 100 s needs 500 GB of extra DRAM.
        assert_eq!(backlog_bytes(10e9, 5e9, 100.0), 500e9);
        assert_eq!(backlog_bytes(10e9, 1.2e9, 100.0), 880e9);
        // An output that keeps up needs nothing.
        assert_eq!(backlog_bytes(1e9, 2e9, 100.0), 0.0);
        assert_eq!(backlog_bytes(1e9, 1e9, 100.0), 0.0);
        assert_eq!(secs_until_full(10e9, 5e9, 100e9), Some(20.0));
        assert_eq!(secs_until_full(1e9, 5e9, 100e9), None);
    }

    #[test]
    fn backlog_series_spans_the_duration() {
        let s = backlog_series(3e9, 1e9, 10.0, 11);
        assert_eq!(s.len(), 11);
        assert_eq!(s[0], (0.0, 0.0));
        assert_eq!(s[10], (10.0, 20e9));
        assert_eq!(s[5], (5.0, 10e9));
        assert_eq!(backlog_series(1.0, 0.0, 1.0, 0).len(), 2);
    }

    #[test]
    fn makespan_is_read_plus_write_time() {
        // 76 GB read at 2 GB/s and written at 0.5 GB/s: 38 s + 152 s.
        let m = makespan_bound_secs(76e9, 2e9, 0.5e9);
        assert_eq!(m.read_secs, 38.0);
        assert_eq!(m.write_secs, 152.0);
        assert_eq!(m.bound_secs, 190.0);
    }

    #[test]
    fn rates_parse_with_decimal_and_binary_units() {
        assert_eq!(parse_rate("10GB/s"), Ok(10e9));
        assert_eq!(parse_rate("1.2 GB/s"), Ok(1.2e9));
        assert_eq!(parse_rate("500MB/s"), Ok(500e6));
        assert_eq!(parse_rate("64KB/s"), Ok(64e3));
        assert_eq!(parse_rate("1KiB/s"), Ok(1024.0));
        assert_eq!(parse_rate("2GiB/s"), Ok(2.0 * 1024f64.powi(3)));
        assert_eq!(parse_rate("100B/s"), Ok(100.0));
        assert_eq!(parse_rate("5e9"), Ok(5e9));
        assert_eq!(parse_rate("1GBps"), Ok(1e9));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10 furlongs/s").is_err());
        assert!(parse_rate("0GB/s").is_err());
        assert!(parse_rate("-1GB/s").is_err());
        assert!(parse_rate("").is_err());
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_bytes("100GB"), Ok(100e9));
        assert_eq!(parse_bytes("1GiB"), Ok(1024f64.powi(3)));
        assert_eq!(parse_bytes("4K"), Ok(4096.0));
        assert!(parse_bytes("1 parsec").is_err());
        assert_eq!(parse_duration("100s"), Ok(100.0));
        assert_eq!(parse_duration("100"), Ok(100.0));
        assert_eq!(parse_duration("2min"), Ok(120.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        assert_eq!(parse_duration("250ms"), Ok(0.25));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
