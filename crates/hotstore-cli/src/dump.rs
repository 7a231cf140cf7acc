//! `hotstore dump`: every live key with its value length and crc32c, sorted by key; or the
//! records of a `.cut` file.

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

/// Lists the intact records of the `.cut` file `path` (see `hotstore::read_cut_file`).
pub fn run_cut(path: &Path, json: bool) -> CliResult<()> {
    let records = hotstore::read_cut_file(path)?;
    let mut out = Out::new();
    for r in &records {
        let kind = match r.kind {
            hotstore::RecordKind::Put => "put",
            hotstore::RecordKind::Tombstone => "tombstone",
            hotstore::RecordKind::EventRemove => "event-remove",
            hotstore::RecordKind::EventMark => "event-mark",
            _ => "unknown",
        };
        let crc = crc32c::crc32c(&r.value);
        if json {
            let row = serde_json::json!({
                "offset": r.offset,
                "kind": kind,
                "key": hex::encode(&r.key),
                "len": r.value.len(),
                "crc32c": crc,
                "lsn": r.lsn,
                "persisted": r.persisted,
                "value": hex::encode(&r.value),
            });
            out.line(row)?;
        } else {
            out.line(format_args!(
                "{} {kind} {} {} {crc} {} {}",
                r.offset,
                hex::encode(&r.key),
                r.value.len(),
                r.lsn,
                if r.persisted { "persisted" } else { "-" }
            ))?;
        }
    }
    if !json {
        eprintln!("{} intact record(s) in {}", records.len(), path.display());
    }
    out.flush()
}
