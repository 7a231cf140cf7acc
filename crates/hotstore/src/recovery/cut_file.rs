//! `.cut` files: the bytes an unsynced tail cut dropped (see `scan`), kept beside their segment
//! as they were, and read back here so that an operator can see, and put again by hand, what
//! a cut took out of the store (`hotstore dump --cut FILE`).

use super::next_valid;
use crate::error::{Error, Result};
use crate::record::{self, Kind, HEADER_LEN};
use std::path::Path;

/// Name of the file keeping the bytes an unsynced tail cut dropped.
pub fn cut_file_name(slot: u32, segment_id: u64) -> String {
    format!("seg-{slot:06}-{segment_id}.cut")
}

/// The segment id in a `.cut` file's name (its records' checksums are seeded with it).
fn segment_id_of(name: &str) -> Option<u64> {
    let (slot, id) = name
        .strip_prefix("seg-")?
        .strip_suffix(".cut")?
        .split_once('-')?;
    slot.parse::<u32>().ok()?;
    id.parse().ok()
}

/// An intact record found in a `.cut` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutRecord {
    /// Offset in the `.cut` file (add the cut's offset, in the recovery report, for the
    /// segment's).
    pub offset: u64,
    /// What the record says about its key.
    pub kind: Kind,
    /// Key (an event prefix for event records).
    pub key: Vec<u8>,
    /// Value (empty for removals).
    pub value: Vec<u8>,
    /// Store-wide sequence number it was written with (lower than every lsn the store gave
    /// after the cut).
    pub lsn: u64,
    /// Written as `Persisted`, or by a writer that acknowledges after a flush.
    pub persisted: bool,
}

/// Reads the intact records of the `.cut` file at `path` (checksums verified; the damaged
/// bytes at its start and any further gap are stepped over), in file order.
pub fn read_cut_file(path: &Path) -> Result<Vec<CutRecord>> {
    let id = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(segment_id_of)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} is not a cut file: recovery names them seg-NNNNNN-<segment id>.cut",
                path.display()
            ))
        })?;
    let bytes = std::fs::read(path).map_err(|e| Error::io("read cut file", path, e))?;
    let mut out = Vec::new();
    let mut at = Some(0);
    while let Some(off) = at.filter(|&o| o + HEADER_LEN <= bytes.len()) {
        match record::decode(id, &bytes[off..]) {
            Ok((h, key, value)) => {
                out.push(CutRecord {
                    offset: off as u64,
                    kind: h.kind,
                    key: key.to_vec(),
                    value: value.to_vec(),
                    lsn: h.lsn,
                    persisted: h.persisted,
                });
                at = Some(off + h.footprint());
            }
            Err(_) => at = next_valid(id, &bytes, off + 1),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{encode, encode_flagged, Flags};

    #[test]
    fn reads_the_intact_records_after_the_gap() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = vec![0xEE; 24]; // what is left of the damaged record
        b.resize(32, 0);
        encode(9, Kind::Put, b"a", b"one", 5, &mut b);
        let flagged = Flags {
            persisted: true,
            ..Flags::default()
        };
        encode_flagged(9, Kind::Tombstone, flagged, b"b", b"", 6, &mut b);
        let path = dir.path().join(cut_file_name(3, 9));
        std::fs::write(&path, &b).unwrap();
        let r = read_cut_file(&path).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].offset, &r[0].key[..], &r[0].value[..]),
            (32, &b"a"[..], &b"one"[..])
        );
        assert_eq!(
            (r[1].kind, r[1].lsn, r[1].persisted),
            (Kind::Tombstone, 6, true)
        );

        // Another segment id: its records do not validate (the name is what seeds them).
        let other = dir.path().join(cut_file_name(3, 10));
        std::fs::write(&other, &b).unwrap();
        assert!(read_cut_file(&other).unwrap().is_empty());
        let wrong = dir.path().join("seg-000003.hss");
        assert!(matches!(
            read_cut_file(&wrong),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            read_cut_file(&dir.path().join(cut_file_name(4, 9))),
            Err(Error::Io { .. })
        ));
    }
}
