//! The acknowledged events: a set of event ids kept as intervals, so that a DAQ stream whose
//! events are acknowledged roughly in order costs a handful of intervals, not one entry per
//! event. It answers "was this event already acknowledged?" for late fragments.
//!
//! Event ids are event prefixes (fixed-length big-endian byte strings), ordered and stepped as
//! big-endian numbers. Persisted as `events.acked` (JSON, replaced atomically and durably):
//!
//! ```text
//! {"version": 1, "prefix_len": 12, "ranges": [["<first id hex>", "<last id hex>"], ...]}
//! ```
//! Written before a segment holding event removals is recycled (see `maintenance`), so the
//! knowledge those records carried outlives them; read at open and united with the removal
//! and keep records still stored.
//!
//! Limit: the store-wide set keeps at most [`MAX_ACKED_INTERVALS`] intervals (about 100 bytes
//! each in DRAM, 60 in the file). Gaps in the acknowledged ids (events never acknowledged,
//! acknowledgements far out of order) each cost one; past the limit the intervals of the
//! lowest ids, the oldest events in a DAQ stream, are forgotten (counted in
//! `stats().events.acked_forgotten_total`): a late fragment of a forgotten event starts a new
//! event instead of being refused. A consumer group's set holds only events still waiting in
//! its log (see `groups`), so it is bounded by them.

use crate::error::{Error, Result};
use crate::medium::Medium;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Bound;

/// File holding the persisted set, on the first tier.
pub const ACKED_FILE: &str = "events.acked";
const ACKED_VERSION: u32 = 1;

/// Most intervals the store-wide set keeps (see the module docs).
pub const MAX_ACKED_INTERVALS: usize = 1 << 16;

/// Intervals `[first, last]` of acknowledged event ids, keyed by `first`, disjoint and never
/// adjacent (adjacent intervals are merged).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AckedSet {
    ranges: BTreeMap<Box<[u8]>, Box<[u8]>>,
}

/// `x + 1` as a big-endian number; `None` on overflow.
pub(crate) fn successor(x: &[u8]) -> Option<Box<[u8]>> {
    let mut out: Box<[u8]> = x.into();
    for b in out.iter_mut().rev() {
        if *b == u8::MAX {
            *b = 0;
        } else {
            *b += 1;
            return Some(out);
        }
    }
    None
}

/// `x - 1` as a big-endian number; `None` for zero.
fn predecessor(x: &[u8]) -> Option<Box<[u8]>> {
    let mut out: Box<[u8]> = x.into();
    for b in out.iter_mut().rev() {
        if *b == 0 {
            *b = u8::MAX;
        } else {
            *b -= 1;
            return Some(out);
        }
    }
    None
}

/// The bounds `..=x` for a range over a map keyed by byte strings.
fn up_to(x: &[u8]) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (Bound::Unbounded, Bound::Included(x))
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    prefix_len: usize,
    ranges: Vec<(String, String)>,
}

impl AckedSet {
    /// True if `id` was acknowledged.
    pub fn contains(&self, id: &[u8]) -> bool {
        self.ranges
            .range::<[u8], _>(up_to(id))
            .next_back()
            .is_some_and(|(_, last)| &**last >= id)
    }

    /// Adds `id`; false if it was already there.
    pub fn insert(&mut self, id: &[u8]) -> bool {
        if self.contains(id) {
            return false;
        }
        let mut first: Box<[u8]> = id.into();
        let mut last: Box<[u8]> = id.into();
        if let Some(p) = predecessor(id) {
            if let Some((f, l)) = self.ranges.range::<[u8], _>(up_to(&p)).next_back() {
                if **l == *p {
                    first = f.clone();
                }
            }
        }
        if let Some(n) = successor(id) {
            if let Some(l) = self.ranges.remove(&*n) {
                last = l;
            }
        }
        // Replaces the predecessor's interval when merged with it (same first id).
        self.ranges.insert(first, last);
        true
    }

    /// Removes `id`; false if it was not there. Splits its interval (one more at most).
    pub fn remove(&mut self, id: &[u8]) -> bool {
        let Some((first, last)) = self
            .ranges
            .range::<[u8], _>(up_to(id))
            .next_back()
            .filter(|(_, last)| &***last >= id)
            .map(|(f, l)| (f.clone(), l.clone()))
        else {
            return false;
        };
        self.ranges.remove(&first);
        if *first < *id {
            // `id` > `first`, so it has a predecessor.
            if let Some(p) = predecessor(id) {
                self.ranges.insert(first, p);
            }
        }
        if id < &*last {
            if let Some(n) = successor(id) {
                self.ranges.insert(n, last);
            }
        }
        true
    }

    /// Forgets the intervals of the lowest ids until at most `keep` are left; returns how
    /// many it forgot.
    pub fn forget_lowest(&mut self, keep: usize) -> usize {
        let n = self.ranges.len();
        if n <= keep {
            return 0;
        }
        match self.ranges.keys().nth(n - keep).cloned() {
            Some(cut) => self.ranges = self.ranges.split_off(&cut),
            None => self.ranges.clear(),
        }
        n - keep
    }

    /// Number of intervals (the set's size in memory is proportional to it).
    pub fn intervals(&self) -> usize {
        self.ranges.len()
    }

    /// Adds every interval of `other`.
    #[cfg(test)]
    pub fn extend_from(&mut self, other: &AckedSet) {
        for (f, l) in &other.ranges {
            // Whole intervals are rare here (open and checkpoints): walking them id by id would
            // be slow for wide ones, so insert the bounds and fold the inside.
            self.insert_range(f, l);
        }
    }

    fn insert_range(&mut self, first: &[u8], last: &[u8]) {
        self.insert(first);
        self.insert(last);
        // Both ends are in; drop the intervals strictly inside and join the two ends.
        let (Some((f1, _)), Some((f2, l2))) = (
            self.ranges
                .range::<[u8], _>(up_to(first))
                .next_back()
                .map(|(f, l)| (f.clone(), l.clone())),
            self.ranges
                .range::<[u8], _>(up_to(last))
                .next_back()
                .map(|(f, l)| (f.clone(), l.clone())),
        ) else {
            return;
        };
        if f1 == f2 {
            return;
        }
        let inside: Vec<Box<[u8]>> = self
            .ranges
            .range::<[u8], _>((Bound::Excluded(&*f1), Bound::Included(&*f2)))
            .map(|(f, _)| f.clone())
            .collect();
        for f in inside {
            self.ranges.remove(&f);
        }
        self.ranges.insert(f1, l2);
    }

    /// The intervals as `(first, last)` hex pairs (the persisted form).
    pub(crate) fn to_hex_pairs(&self) -> Vec<(String, String)> {
        self.ranges
            .iter()
            .map(|(f, l)| (super::hex(f), super::hex(l)))
            .collect()
    }

    /// A set from `(first, last)` hex pairs of `prefix_len`-byte ids; `Err` says what is wrong.
    pub(crate) fn from_hex_pairs(
        pairs: &[(String, String)],
        prefix_len: usize,
    ) -> std::result::Result<AckedSet, String> {
        let mut set = AckedSet::default();
        for (f, l) in pairs {
            let (Some(f), Some(l)) = (super::unhex(f), super::unhex(l)) else {
                return Err("an interval bound is not hex".into());
            };
            if f.len() != prefix_len || l.len() != prefix_len || f > l {
                return Err("an interval has bounds of the wrong length or order".into());
            }
            set.insert_range(&f, &l);
        }
        Ok(set)
    }

    /// Reads the persisted set; empty if there is none.
    pub fn load(medium: &dyn Medium, prefix_len: usize) -> Result<AckedSet> {
        let Some(bytes) = medium.read_file(ACKED_FILE)? else {
            return Ok(AckedSet::default());
        };
        let bad = |reason: String| Error::BadMetadata {
            path: medium.path().join(ACKED_FILE),
            reason,
        };
        let disk: OnDisk = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if disk.version != ACKED_VERSION || disk.prefix_len != prefix_len {
            return Err(bad(format!(
                "version {} with {}-byte ids; this build reads version {ACKED_VERSION} with {prefix_len}-byte ids",
                disk.version, disk.prefix_len
            )));
        }
        AckedSet::from_hex_pairs(&disk.ranges, prefix_len).map_err(bad)
    }

    /// Replaces the persisted set with this one, atomically and durably.
    pub fn store(&self, medium: &dyn Medium, prefix_len: usize) -> Result<()> {
        let disk = OnDisk {
            version: ACKED_VERSION,
            prefix_len,
            ranges: self.to_hex_pairs(),
        };
        let bytes = serde_json::to_vec(&disk).map_err(|e| Error::BadMetadata {
            path: medium.path().join(ACKED_FILE),
            reason: e.to_string(),
        })?;
        medium.write_file(ACKED_FILE, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u16) -> [u8; 2] {
        n.to_be_bytes()
    }

    #[test]
    fn in_order_acks_collapse_to_one_interval_and_holes_stay_holes() {
        let mut s = AckedSet::default();
        for n in 0..1000u16 {
            if n != 500 {
                assert!(s.insert(&id(n)));
            }
        }
        assert_eq!(s.intervals(), 2);
        assert!(!s.contains(&id(500)) && s.contains(&id(499)) && s.contains(&id(501)));
        assert!(!s.insert(&id(7)), "already there");
        s.insert(&id(500));
        assert_eq!(s.intervals(), 1);
        assert!(!s.contains(&id(1000)));
    }

    #[test]
    fn matches_a_plain_set_in_any_order() {
        use rand::{seq::SliceRandom, SeedableRng};
        let mut ids: Vec<u16> = (0..300).map(|i| i * 2 % 301).collect();
        ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
        let mut s = AckedSet::default();
        let mut model = std::collections::BTreeSet::new();
        for n in ids {
            assert_eq!(s.insert(&id(n)), model.insert(n));
            for probe in 0..310u16 {
                assert_eq!(s.contains(&id(probe)), model.contains(&probe), "{probe}");
            }
        }
        let mut t = AckedSet::default();
        t.extend_from(&s);
        assert_eq!(t, s);
    }

    #[test]
    fn remove_splits_an_interval_and_matches_a_plain_set() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut s = AckedSet::default();
        let mut model = std::collections::BTreeSet::new();
        for _ in 0..3000 {
            let n: u16 = rng.gen_range(0..200);
            if rng.gen_bool(0.6) {
                assert_eq!(s.insert(&id(n)), model.insert(n));
            } else {
                assert_eq!(s.remove(&id(n)), model.remove(&n), "remove {n}");
            }
            for probe in 0..205u16 {
                assert_eq!(s.contains(&id(probe)), model.contains(&probe), "{probe}");
            }
        }
        let mut t = AckedSet::default();
        for n in 10..20u16 {
            t.insert(&id(n));
        }
        assert!(t.remove(&id(15)));
        assert_eq!(t.intervals(), 2);
        assert!(t.remove(&id(10)) && t.remove(&id(19)) && !t.remove(&id(19)));
        assert_eq!(t.intervals(), 2);
        assert!(!t.contains(&id(10)) && t.contains(&id(11)) && t.contains(&id(18)));
    }

    #[test]
    fn forget_lowest_keeps_the_highest_intervals() {
        let mut s = AckedSet::default();
        for n in (0..100u16).map(|n| n * 2) {
            s.insert(&id(n));
        }
        assert_eq!(s.forget_lowest(200), 0);
        assert_eq!(s.forget_lowest(30), 70);
        assert_eq!(s.intervals(), 30);
        assert!(!s.contains(&id(138)) && s.contains(&id(140)) && s.contains(&id(198)));
        assert_eq!(s.forget_lowest(0), 30);
        assert_eq!(s.intervals(), 0);
    }

    #[test]
    fn edges_of_the_id_space() {
        let mut s = AckedSet::default();
        s.insert(&[0xff, 0xff]);
        s.insert(&[0, 0]);
        assert!(s.contains(&[0xff, 0xff]) && s.contains(&[0, 0]) && !s.contains(&[0, 1]));
        assert_eq!(successor(&[0xff, 0xff]), None);
        assert_eq!(predecessor(&[0, 0]), None);
        assert_eq!(successor(&[0, 0xff]).as_deref(), Some(&[1, 0][..]));
    }
}
