//! The store's list of its own segment files: per tier, each file's slot and length, kept in
//! `hotstore.meta` (which is replaced atomically and durably: temp file, sync, rename, sync
//! of the directory).
//!
//! ```json
//! "files": [ { "first_slot": 0, "count": 12, "len_bytes": 67108864 },
//!            { "first_slot": 12, "count": 1, "len_bytes": 134217728 } ]
//! ```
//! Runs of consecutive slots of one length, so a store that grew one standard file at a time
//! is one entry whatever its size.
//!
//! Ordering (docs/design.md, section 3.5): a file is created, then listed, and only then
//! handed out to be written; a file is unlisted before it is deleted. So at open a listed file
//! that is missing was lost behind the store's back (`Error::MissingFiles`), and a file present
//! but not listed can only be one whose creation a crash interrupted (fresh, all zero).
//!
//! Files change only when a tier grows or an oversized file is deleted; recycling reuses a
//! file under the same slot and length, so the list is not touched on the write path except
//! when a writer has to create a file itself.

use crate::error::{Error, Result};
use crate::medium::Medium;
use crate::meta::{Meta, META_FILE};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Consecutive segment files of one length, as listed in the metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRun {
    /// Slot of the first file (`seg-NNNNNN.hss`).
    pub first_slot: u32,
    /// Files in the run, at least 1.
    pub count: u32,
    /// Length of each file in bytes.
    pub len_bytes: u64,
}

/// Slot → length in bytes of a tier's listed files.
pub type Listed = BTreeMap<u32, u64>;

/// `files` as runs.
pub fn to_runs(files: &Listed) -> Vec<FileRun> {
    let mut runs: Vec<FileRun> = Vec::new();
    for (&slot, &len) in files {
        match runs.last_mut() {
            Some(r)
                if r.len_bytes == len && r.first_slot as u64 + r.count as u64 == slot as u64 =>
            {
                r.count += 1;
            }
            _ => runs.push(FileRun {
                first_slot: slot,
                count: 1,
                len_bytes: len,
            }),
        }
    }
    runs
}

/// Runs as slot → length; `None` if a run is empty or runs past the last slot.
pub fn from_runs(runs: &[FileRun]) -> Option<Listed> {
    let mut files = Listed::new();
    for r in runs {
        if r.count == 0 {
            return None;
        }
        let last = r.first_slot.checked_add(r.count - 1)?;
        for slot in r.first_slot..=last {
            files.insert(slot, r.len_bytes);
        }
    }
    Some(files)
}

struct State {
    meta: Meta,
    /// Per tier; `None` for a tier of a store written before the list (until recovery lists it).
    lists: Vec<Option<Listed>>,
}

/// The metadata and the file lists in it, shared by the tiers; every change rewrites
/// `hotstore.meta` before it returns.
pub struct FileList {
    root: Arc<dyn Medium>,
    state: Mutex<State>,
}

impl FileList {
    /// The lists of `meta` (stored on `root`).
    pub fn new(root: Arc<dyn Medium>, meta: Meta) -> Result<Self> {
        let lists = meta
            .tiers
            .iter()
            .map(|t| match &t.files {
                None => Ok(None),
                Some(runs) => from_runs(runs).map(Some).ok_or_else(|| Error::BadMetadata {
                    path: root.path().join(META_FILE),
                    reason: format!("the file list of tier {} has an invalid run", t.path),
                }),
            })
            .collect::<Result<_>>()?;
        Ok(FileList {
            root,
            state: Mutex::new(State { meta, lists }),
        })
    }

    /// Tier `tier`'s listed files; `None` if the store has no list for it yet.
    pub fn listed(&self, tier: usize) -> Option<Listed> {
        self.state.lock().lists.get(tier).cloned().flatten()
    }

    /// Lists a new file (after it was created, before anything is written to it).
    ///
    /// On failure the file stays listed here if the new list may be durable (the caller must
    /// then keep the file: an unlisted one is only free space at the next open), and is
    /// unlisted again if the list on the medium, read back, does not hold it (the write
    /// failed before its rename): then the caller may delete the file ([`FileList::is_listed`]).
    /// Fix (tests/full.rs beside a busy machine, 1 run in 60): on a full tmpfs the new
    /// segment file took the last bytes, the list's temp file found no space, and the put
    /// failed with that I/O error instead of StoreFull, the file kept and never used.
    pub fn add(&self, tier: usize, slot: u32, len: u64) -> Result<()> {
        let mut s = self.state.lock();
        let list = s.lists[tier].get_or_insert_with(Listed::new);
        let before = list.insert(slot, len);
        debug_assert!(before.is_none(), "slot {slot} of tier {tier} listed twice");
        let stored = Self::store(&self.root, &mut s);
        if stored.is_err() && !self.durably_listed(tier, slot) {
            if let Some(l) = s.lists[tier].as_mut() {
                l.remove(&slot);
            }
        }
        stored
    }

    /// True if `slot` of `tier` is in the list (here, as the store knows it).
    pub fn is_listed(&self, tier: usize, slot: u32) -> bool {
        self.state.lock().lists[tier]
            .as_ref()
            .is_some_and(|l| l.contains_key(&slot))
    }

    /// True unless the metadata on the medium, read back, is known not to list `slot` of
    /// `tier` (an unreadable one may).
    fn durably_listed(&self, tier: usize, slot: u32) -> bool {
        let Ok(Some(meta)) = Meta::load(&*self.root) else {
            return true;
        };
        let Some(t) = meta.tiers.get(tier) else {
            return true;
        };
        t.files
            .as_deref()
            .and_then(from_runs)
            .is_none_or(|l| l.contains_key(&slot))
    }

    /// Unlists a file (before it is deleted).
    pub fn remove(&self, tier: usize, slot: u32) -> Result<()> {
        let mut s = self.state.lock();
        let Some(len) = s.lists[tier].as_mut().and_then(|l| l.remove(&slot)) else {
            return Ok(());
        };
        let stored = Self::store(&self.root, &mut s);
        if stored.is_err() {
            // Maybe not durable: keep it listed, and the caller keeps the file.
            if let Some(l) = s.lists[tier].as_mut() {
                l.insert(slot, len);
            }
        }
        stored
    }

    /// Replaces every tier's list (at open, with what recovery kept); writes the metadata only
    /// if something changed.
    pub fn replace(&self, lists: Vec<Listed>) -> Result<()> {
        let mut s = self.state.lock();
        let lists: Vec<Option<Listed>> = lists.into_iter().map(Some).collect();
        if s.lists == lists {
            return Ok(());
        }
        s.lists = lists;
        Self::store(&self.root, &mut s)
    }

    /// Writes the metadata as it is now (a format upgrade, once the store has opened).
    pub fn store_now(&self) -> Result<()> {
        Self::store(&self.root, &mut self.state.lock())
    }

    fn store(root: &Arc<dyn Medium>, s: &mut State) -> Result<()> {
        let State { meta, lists } = s;
        for (t, list) in meta.tiers.iter_mut().zip(lists.iter()) {
            t.files = list.as_ref().map(to_runs);
        }
        meta.store(&**root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_round_trip() {
        let mut files = Listed::new();
        for slot in 0..5 {
            files.insert(slot, 64);
        }
        files.insert(5, 128);
        files.insert(7, 64);
        files.insert(8, 64);
        let runs = to_runs(&files);
        assert_eq!(runs.len(), 3);
        assert_eq!((runs[0].first_slot, runs[0].count), (0, 5));
        assert_eq!((runs[2].first_slot, runs[2].count), (7, 2));
        assert_eq!(from_runs(&runs), Some(files));
        assert_eq!(to_runs(&Listed::new()), vec![]);
        let empty = FileRun {
            first_slot: 3,
            count: 0,
            len_bytes: 64,
        };
        assert_eq!(from_runs(&[empty]), None);
        let past_end = FileRun {
            first_slot: u32::MAX,
            count: 2,
            len_bytes: 64,
        };
        assert_eq!(from_runs(&[past_end]), None);
    }
}
