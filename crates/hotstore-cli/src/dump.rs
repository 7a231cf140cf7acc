//! `hotstore dump`: every live key with its value length and crc32c, sorted by key.

use crate::util::{CliResult, Out};
use hotstore::Store;
use std::path::Path;

/// One live key.
struct Row {
    key: Vec<u8>,
    len: usize,
    crc32c: u32,
}

/// Reads every value (checksums verified) and prints one line per key in key order.
pub fn run(dir: &Path, json: bool) -> CliResult<()> {
    let store = Store::builder(dir).create_if_missing(false).open()?;
    let mut rows = Vec::new();
    store.for_each_checked(|key, value| {
        rows.push(Row {
            key: key.to_vec(),
            len: value.len(),
            crc32c: crc32c::crc32c(value),
        })
    })?;
    store.close()?;
    rows.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    let mut out = Out::new();
    for r in &rows {
        if json {
            out.line(format_args!(
                "{{\"key\":\"{}\",\"len\":{},\"crc32c\":{}}}",
                hex::encode(&r.key),
                r.len,
                r.crc32c
            ))?;
        } else {
            out.line(format_args!(
                "{} {} {}",
                hex::encode(&r.key),
                r.len,
                r.crc32c
            ))?;
        }
    }
    out.flush()
}
