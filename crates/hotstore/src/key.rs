//! Keys: byte strings up to [`MAX_KEY_LEN`], and the DAQ key layout.
//!
//! A *key layout* names fixed-width big-endian unsigned fields. Keys whose length equals the
//! layout's width are fragment keys: their first `event_prefix_len()` bytes identify the event,
//! so all fragments of one event are adjacent in key order. Keys of any other length are plain
//! blobs without event semantics. Big-endian encoding makes byte order equal numeric order.
//!
//! The layout is written as text, fields separated by `,`, the event prefix ended by `|`:
//! `run:u32,event:u64|detector:u16,component:u16` (the default, 16 bytes, prefix 12 bytes).
//! Widths are `u8`, `u16`, `u32`, `u64` or a byte count `b1`..`b64`.

use crate::error::{Error, Result};
use std::fmt;

/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Most fields a layout may have.
pub const MAX_LAYOUT_FIELDS: usize = 16;

/// One field of a key layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    /// Field name (letters, digits, `_`).
    pub name: String,
    /// Width in bytes, 1..=64 (fields wider than 8 bytes are opaque byte strings).
    pub width_bytes: usize,
}

/// A compound key layout (see the module docs for its text form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    fields: Vec<KeyField>,
    /// Number of leading fields that identify the event.
    event_fields: usize,
}

impl Default for KeyLayout {
    /// `run:u32,event:u64|detector:u16,component:u16`.
    fn default() -> Self {
        let f = |name: &str, width_bytes| KeyField {
            name: name.to_string(),
            width_bytes,
        };
        KeyLayout {
            fields: vec![
                f("run", 4),
                f("event", 8),
                f("detector", 2),
                f("component", 2),
            ],
            event_fields: 2,
        }
    }
}

impl KeyLayout {
    /// Builds a layout from fields; the first `event_fields` of them identify the event.
    pub fn new(fields: Vec<KeyField>, event_fields: usize) -> Result<Self> {
        let spec = fields
            .iter()
            .map(|f| format!("{}:b{}", f.name, f.width_bytes))
            .collect::<Vec<_>>()
            .join(",");
        let bad = |reason: &str| Error::InvalidLayout {
            spec: spec.clone(),
            reason: reason.to_string(),
        };
        if fields.is_empty() || fields.len() > MAX_LAYOUT_FIELDS {
            return Err(bad("a layout has 1 to 16 fields"));
        }
        if event_fields == 0 || event_fields > fields.len() {
            return Err(bad("the event prefix must cover 1 up to all fields"));
        }
        for f in &fields {
            if f.name.is_empty()
                || !f
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(bad("field names are letters, digits and _"));
            }
            if !(1..=64).contains(&f.width_bytes) {
                return Err(bad("field widths are 1 to 64 bytes"));
            }
        }
        let mut names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        if names.len() != fields.len() {
            return Err(bad("field names must be unique"));
        }
        let layout = KeyLayout {
            fields,
            event_fields,
        };
        if layout.key_len() > MAX_KEY_LEN {
            return Err(bad("the layout is wider than the maximum key length"));
        }
        Ok(layout)
    }

    /// Parses the text form, e.g. `run:u32,event:u64|detector:u16,component:u16`.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidLayout {
            spec: spec.to_string(),
            reason,
        };
        let (prefix, rest) = match spec.split_once('|') {
            Some((p, r)) => (p, Some(r)),
            None => (spec, None),
        };
        let parse_fields = |part: &str| -> Result<Vec<KeyField>> {
            part.split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|item| {
                    let (name, width) = item
                        .trim()
                        .split_once(':')
                        .ok_or_else(|| bad(format!("field `{item}` is not name:width")))?;
                    let width_bytes = match width {
                        "u8" => 1,
                        "u16" => 2,
                        "u32" => 4,
                        "u64" => 8,
                        w if w.starts_with('b') => w[1..]
                            .parse::<usize>()
                            .map_err(|_| bad(format!("width `{w}` is not u8/u16/u32/u64/bN")))?,
                        w => return Err(bad(format!("width `{w}` is not u8/u16/u32/u64/bN"))),
                    };
                    Ok(KeyField {
                        name: name.trim().to_string(),
                        width_bytes,
                    })
                })
                .collect()
        };
        let mut fields = parse_fields(prefix)?;
        let event_fields = fields.len();
        if let Some(rest) = rest {
            fields.extend(parse_fields(rest)?);
        }
        KeyLayout::new(fields, event_fields).map_err(|e| match e {
            Error::InvalidLayout { reason, .. } => bad(reason),
            other => other,
        })
    }

    /// Fields in order.
    pub fn fields(&self) -> &[KeyField] {
        &self.fields
    }

    /// Width of a fragment key in bytes.
    pub fn key_len(&self) -> usize {
        self.fields.iter().map(|f| f.width_bytes).sum()
    }

    /// Width of the event prefix in bytes.
    pub fn event_prefix_len(&self) -> usize {
        self.fields[..self.event_fields]
            .iter()
            .map(|f| f.width_bytes)
            .sum()
    }

    /// Number of fields in the event prefix.
    pub fn event_fields(&self) -> usize {
        self.event_fields
    }

    /// True if `key` is a fragment key of this layout (else it is a plain blob).
    pub fn is_fragment_key(&self, key: &[u8]) -> bool {
        key.len() == self.key_len()
    }

    /// The event prefix of a fragment key, `None` for blobs.
    pub fn event_prefix<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        self.is_fragment_key(key)
            .then(|| &key[..self.event_prefix_len()])
    }

    /// Encodes numeric field values (one per field, each must fit its width) big-endian.
    pub fn encode(&self, values: &[u64]) -> Result<Vec<u8>> {
        if values.len() != self.fields.len() {
            return Err(Error::InvalidArgument(format!(
                "layout `{self}` has {} fields, {} values given",
                self.fields.len(),
                values.len()
            )));
        }
        let mut out = Vec::with_capacity(self.key_len());
        for (f, &v) in self.fields.iter().zip(values) {
            if f.width_bytes < 8 && v >> (8 * f.width_bytes) != 0 {
                return Err(Error::InvalidArgument(format!(
                    "value {v} does not fit field `{}` of {} bytes",
                    f.name, f.width_bytes
                )));
            }
            let be = v.to_be_bytes();
            if f.width_bytes >= 8 {
                out.extend(std::iter::repeat_n(0u8, f.width_bytes - 8));
                out.extend_from_slice(&be);
            } else {
                out.extend_from_slice(&be[8 - f.width_bytes..]);
            }
        }
        Ok(out)
    }

    /// Decodes a fragment key into field values (fields wider than 8 bytes: their low 8 bytes).
    pub fn decode(&self, key: &[u8]) -> Option<Vec<u64>> {
        if !self.is_fragment_key(key) {
            return None;
        }
        let mut at = 0;
        let mut out = Vec::with_capacity(self.fields.len());
        for f in &self.fields {
            let bytes = &key[at..at + f.width_bytes];
            let tail = &bytes[bytes.len().saturating_sub(8)..];
            out.push(tail.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)));
            at += f.width_bytes;
        }
        Some(out)
    }
}

impl fmt::Display for KeyLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            if i == self.event_fields {
                f.write_str("|")?;
            } else if i > 0 {
                f.write_str(",")?;
            }
            let w = match field.width_bytes {
                1 => "u8".to_string(),
                2 => "u16".to_string(),
                4 => "u32".to_string(),
                8 => "u64".to_string(),
                n => format!("b{n}"),
            };
            write!(f, "{}:{}", field.name, w)?;
        }
        Ok(())
    }
}

/// A key of the default layout: `run:u32, event:u64 | detector:u16, component:u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FragmentKey {
    /// Run number.
    pub run: u32,
    /// Event number within the run.
    pub event: u64,
    /// Detector (readout unit) id.
    pub detector: u16,
    /// Component within the detector.
    pub component: u16,
}

impl FragmentKey {
    /// Encoded width in bytes.
    pub const LEN: usize = 16;
    /// Width of the event prefix (run, event).
    pub const EVENT_PREFIX_LEN: usize = 12;

    /// A key from its fields.
    pub fn new(run: u32, event: u64, detector: u16, component: u16) -> Self {
        FragmentKey {
            run,
            event,
            detector,
            component,
        }
    }

    /// Big-endian encoding: byte order equals numeric order.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.run.to_be_bytes());
        b[4..12].copy_from_slice(&self.event.to_be_bytes());
        b[12..14].copy_from_slice(&self.detector.to_be_bytes());
        b[14..16].copy_from_slice(&self.component.to_be_bytes());
        b
    }

    /// Decodes 16 bytes; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; 16] = b.try_into().ok()?;
        Some(FragmentKey {
            run: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            event: u64::from_be_bytes([b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]]),
            detector: u16::from_be_bytes([b[12], b[13]]),
            component: u16::from_be_bytes([b[14], b[15]]),
        })
    }

    /// The 12-byte event prefix (run, event).
    pub fn event_prefix(&self) -> [u8; 12] {
        let mut p = [0u8; 12];
        p.copy_from_slice(&self.to_bytes()[..12]);
        p
    }
}

/// Checks a key against [`MAX_KEY_LEN`].
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_round_trips_and_orders_numerically() {
        let l = KeyLayout::default();
        assert_eq!(
            l.to_string(),
            "run:u32,event:u64|detector:u16,component:u16"
        );
        assert_eq!(KeyLayout::parse(&l.to_string()).unwrap(), l);
        assert_eq!(l.key_len(), 16);
        assert_eq!(l.event_prefix_len(), 12);
        let a = FragmentKey::new(1, 255, 0, 0).to_bytes();
        let b = FragmentKey::new(1, 256, 0, 0).to_bytes();
        assert!(a < b, "byte order must equal numeric order");
        assert_eq!(l.encode(&[1, 256, 0, 0]).unwrap(), b.to_vec());
        assert_eq!(l.decode(&b).unwrap(), vec![1, 256, 0, 0]);
        assert_eq!(
            FragmentKey::from_bytes(&b),
            Some(FragmentKey::new(1, 256, 0, 0))
        );
    }

    #[test]
    fn bad_layouts_are_refused() {
        for spec in [
            "",
            "run",
            "run:u32,run:u32",
            "a:u128",
            "a:b0",
            "|a:u8",
            "x y:u8",
        ] {
            assert!(KeyLayout::parse(spec).is_err(), "{spec} accepted");
        }
        assert!(KeyLayout::default().encode(&[1 << 40, 0, 0, 0]).is_err());
    }

    #[test]
    fn custom_layout_prefix() {
        let l = KeyLayout::parse("crate:u8,slot:u8|ch:u16").unwrap();
        assert_eq!(l.key_len(), 4);
        assert_eq!(l.event_prefix(&[1, 2, 3, 4]), Some(&[1u8, 2][..]));
        assert_eq!(l.event_prefix(b"blob-key"), None);
    }
}
