//! The acknowledgement log written by `hotstore stress` (and read by the kill -9 tests): one
//! line per acknowledged operation, appended only after the store returned success for it.
//!
//! ```text
//! put <key-hex> <value-len> <crc32c of the value, decimal, unsigned>
//! del <key-hex>
//! ```
//! Lines are written whole with one `write` on an `O_APPEND` file, so concurrent writers never
//! interleave. A process killed mid-write can leave a last line without its newline: it is not
//! an acknowledgement, and [`AckLog::open`] cuts it before appending.

use hotstore_bench::{fail, Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// One acknowledged operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ack {
    /// `key` holds a value of `len` bytes whose crc32c is `crc32c`.
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value length.
        len: u64,
        /// crc32c (Castagnoli) of the value.
        crc32c: u32,
    },
    /// `key` is absent.
    Del {
        /// Key.
        key: Vec<u8>,
    },
}

impl Ack {
    /// The line, newline included.
    pub fn line(&self) -> String {
        match self {
            Ack::Put { key, len, crc32c } => format!("put {} {len} {crc32c}\n", hex::encode(key)),
            Ack::Del { key } => format!("del {}\n", hex::encode(key)),
        }
    }

    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Option<Ack> {
        let mut parts = line.split(' ');
        let ack = match parts.next()? {
            "put" => Ack::Put {
                key: hex::decode(parts.next()?).ok().filter(|k| !k.is_empty())?,
                len: parts.next()?.parse().ok()?,
                crc32c: parts.next()?.parse().ok()?,
            },
            "del" => Ack::Del {
                key: hex::decode(parts.next()?).ok().filter(|k| !k.is_empty())?,
            },
            _ => return None,
        };
        parts.next().is_none().then_some(ack)
    }
}

/// What the log says about a key: its last acknowledged operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastAck {
    /// Line number (0-based) of the last operation: older keys have smaller numbers.
    pub line_no: u64,
    /// True if it was a put (the key is present), false for a removal.
    pub present: bool,
}

/// An open acknowledgement log, shared by the writer threads.
pub struct AckLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AckLog {
    /// Opens (creating) the log at `path` for appending, cuts an unfinished last line, and
    /// returns the last acknowledged operation of every key in it and the number of lines.
    pub fn open(path: &Path) -> Result<(AckLog, HashMap<Vec<u8>, LastAck>, u64)> {
        let err = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| Error::Msg(err("cannot open ack log", e)))?;
        let mut text = Vec::new();
        file.read_to_end(&mut text)
            .map_err(|e| Error::Msg(err("cannot read ack log", e)))?;
        let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        if complete < text.len() {
            eprintln!(
                "note: cutting an unfinished last line of {} ({} bytes): it was never acknowledged",
                path.display(),
                text.len() - complete
            );
            file.set_len(complete as u64)
                .map_err(|e| Error::Msg(err("cannot truncate ack log", e)))?;
        }
        let Ok(text) = std::str::from_utf8(&text[..complete]) else {
            return fail(format!("{} is not an ack log (not UTF-8)", path.display()));
        };
        let mut keys = HashMap::new();
        let mut lines = 0u64;
        for (i, line) in text.lines().enumerate() {
            let Some(ack) = Ack::parse(line) else {
                return fail(format!(
                    "{}:{}: not an ack log line: `{line}`",
                    path.display(),
                    i + 1
                ));
            };
            let (key, present) = match ack {
                Ack::Put { key, .. } => (key, true),
                Ack::Del { key } => (key, false),
            };
            keys.insert(
                key,
                LastAck {
                    line_no: i as u64,
                    present,
                },
            );
            lines += 1;
        }
        let log = AckLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        };
        Ok((log, keys, lines))
    }

    /// Appends one acknowledgement with a single write.
    pub fn append(&self, ack: &Ack) -> Result<()> {
        let line = ack.line();
        self.file.lock().write_all(line.as_bytes()).map_err(|e| {
            Error::Msg(format!(
                "cannot append to ack log {}: {e}",
                self.path.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        for ack in [
            Ack::Put {
                key: vec![0, 1, 0xff],
                len: 12,
                crc32c: u32::MAX,
            },
            Ack::Del { key: b"k".to_vec() },
        ] {
            let line = ack.line();
            assert!(line.ends_with('\n'));
            assert_eq!(Ack::parse(line.trim_end_matches('\n')), Some(ack));
        }
        for bad in [
            "",
            "put",
            "put 00",
            "put 00 1",
            "put 00 1 2 3",
            "del",
            "del  ",
            "del 0",
            "get 00",
        ] {
            assert_eq!(Ack::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn open_cuts_an_unfinished_line_and_keeps_the_last_op_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acks");
        std::fs::write(&path, "put 0a 3 7\nput 0b 1 1\ndel 0a\nput 0c 2").unwrap();
        let (log, keys, lines) = AckLog::open(&path).unwrap();
        assert_eq!(lines, 3);
        assert_eq!(
            keys[&vec![0x0a]],
            LastAck {
                line_no: 2,
                present: false
            }
        );
        assert_eq!(
            keys[&vec![0x0b]],
            LastAck {
                line_no: 1,
                present: true
            }
        );
        assert!(!keys.contains_key(&vec![0x0c]));
        log.append(&Ack::Del { key: vec![0x0b] }).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "put 0a 3 7\nput 0b 1 1\ndel 0a\ndel 0b\n");
    }
}
