//! Rebuilding the event table at open, from the recovered keys and event records.
//!
//! 1. Each event removal deletes the fragments of its event with a lower lsn (and pins their
//!    segments, as a tombstone does) and marks the event acknowledged.
//! 2. The newest mark of each event (newer than any removal of it) that is `kept` marks the
//!    event acknowledged, fragments or not. If the event still has fragments, that mark is
//!    live: `kept` → KEPT, `sealed` → sealed. Other marks are dead.
//! 3. Every event with fragments gets an entry: KEPT, READY (sealed or expected count reached)
//!    or OPEN (its timeout restarts now). Recovered READY events enter the queue in id order.
//!
//! Step 3 runs at open only if the store already uses events (it holds live marks, remembered
//! acknowledgements or a policy of its own); otherwise the store starts untracked and the same
//! step runs at the first event call ([`Events::track`]), over the keys present then.

use super::policy::Policies;
use super::EventIndex as Index;
use super::{EventEntry, Events, MarkLoc, ShardEvents, State};
use crate::index::{IndexKey, TOMBSTONE_LEN};
use crate::record::{self, Kind, EVENT_MARK_KEPT, EVENT_MARK_SEALED};
use crate::recovery::EventRecord;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::time::Instant;

pub(crate) fn rebuild(events: &Events, index: &Index, records: &[EventRecord]) {
    let plen = events.prefix_len;
    let flen = events.fragment_len;
    let mut removed_at: HashMap<&[u8], u64> = HashMap::new();
    let mut acked = events.acked.write();
    for r in records
        .iter()
        .filter(|r| r.kind == Kind::EventRemove && r.prefix.len() == plen)
    {
        events
            .any_acked
            .store(true, std::sync::atomic::Ordering::Release);
        acked.insert(&r.prefix);
        let at = removed_at.entry(&r.prefix).or_insert(0);
        *at = (*at).max(r.lsn);
        let mut shard = index.event_shard(&r.prefix).write();
        let doomed: Vec<IndexKey> = shard
            .keys
            .range(IndexKey::new(&r.prefix)..)
            .take_while(|(k, _)| k.as_bytes().starts_with(&r.prefix))
            .filter(|(k, loc)| {
                k.as_bytes().len() == flen && loc.value_len != TOMBSTONE_LEN && loc.lsn() < r.lsn
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            if let Some(loc) = shard.keys.remove(&k) {
                r.seg.pin_on(&loc.seg);
                loc.seg
                    .mark_dead(record::record_len(flen, loc.value_len as usize) as u64);
            }
        }
    }
    let mut marks: HashMap<&[u8], &EventRecord> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r.kind == Kind::EventMark && r.prefix.len() == plen)
    {
        if removed_at.get(&*r.prefix).is_some_and(|&at| at > r.lsn) {
            continue;
        }
        let newest = marks.entry(&r.prefix).or_insert(r);
        if r.lsn > newest.lsn {
            *newest = r;
        }
    }
    let in_use = !marks.is_empty() || acked.intervals() > 0 || events.groups.active() || {
        let p = events.policies.read();
        p.default != Policies::default().default || !p.runs.is_empty()
    };
    drop(acked);
    // Fix (found in review): a kept event is acknowledged whether or not it still has
    // fragments. Only `build` (events with fragments) did this, so a kept event whose
    // fragments were then removed lost its acknowledgement at a reopen: a retried ack answered
    // ClaimLost and a late fragment was accepted, delivering the event again. Once the mark's
    // segment is recycled, `events.acked` remembers it (see `checkpoint_acked`).
    for (p, r) in &marks {
        if r.mark == EVENT_MARK_KEPT {
            events.insert_acked(p);
        }
    }
    if in_use {
        build(events, index, &marks);
    }
}

impl Events {
    /// Starts keeping event state, if the store does not yet: builds every shard's entries from
    /// the keys it holds, under that shard's lock. A put holds its shard's lock while it checks
    /// whether the shard is tracked, so each fragment is counted exactly once: by the build if
    /// it was published before, by its own put if after. O(keys) once per store open.
    pub(crate) fn track(&self, index: &Index) {
        if self.is_tracked() {
            return;
        }
        let _g = self.tracking.lock();
        if !self.is_tracked() {
            build(self, index, &HashMap::new());
        }
    }
}

/// Step 3: an entry for every event with fragments, in every shard; then marks the store
/// tracked.
fn build(events: &Events, index: &Index, marks: &HashMap<&[u8], &EventRecord>) {
    let plen = events.prefix_len;
    let flen = events.fragment_len;
    let now = Instant::now();
    let mut ready = Vec::new();
    let mut timers = Vec::new();
    for shard in index.shards() {
        let mut shard = shard.write();
        let shard = &mut *shard;
        let mut found: Vec<(IndexKey, u32, u64)> = Vec::new();
        for (k, loc) in shard.keys.iter() {
            let k = k.as_bytes();
            if k.len() != flen {
                continue;
            }
            let prefix = &k[..plen];
            match found.last_mut() {
                Some((p, n, b)) if p.as_bytes() == prefix => {
                    *n += 1;
                    *b += u64::from(loc.value_len);
                }
                _ => found.push((IndexKey::new(prefix), 1, u64::from(loc.value_len))),
            }
        }
        for (prefix, fragments, bytes) in found {
            let p = prefix.as_bytes();
            let p: &[u8] = &p;
            let mark = marks.get(p).map(|r| {
                r.seg.mark_live(r.rec_len);
                Box::new(MarkLoc {
                    seg: r.seg.clone(),
                    rec_len: r.rec_len,
                    kept: r.mark == EVENT_MARK_KEPT,
                })
            });
            let kept = mark.as_ref().is_some_and(|m| m.kept);
            let sealed = marks.get(p).is_some_and(|r| r.mark == EVENT_MARK_SEALED);
            let policy = events.policy_for(p);
            let complete = policy.expected_fragments > 0 && fragments >= policy.expected_fragments;
            let state = if kept {
                State::Kept
            } else if sealed || complete {
                ready.push(prefix.clone());
                State::Open // made READY below, in id order
            } else {
                if let Some(t) = policy.timeout() {
                    timers.push(Reverse((crate::clock::after(now, t), prefix.clone())));
                }
                State::Open
            };
            let mut entry = EventEntry::open(fragments, bytes);
            entry.state = state;
            entry.sealed = sealed;
            entry.mark = mark;
            events.enter_state(&entry);
            shard.events.entries.insert(prefix, entry);
        }
        shard.events.fragment_bound = shard.keys.last_key_value().map(|(k, _)| k.clone());
        shard.events.tracked = true;
    }
    ready.sort();
    for prefix in ready {
        let no = index.event_shard_no(&prefix.as_bytes());
        let mut shard = index.shards()[no].write();
        let ShardEvents { entries, ready, .. } = &mut shard.events;
        if let Some(e) = entries.get_mut(&prefix) {
            if matches!(e.state, State::Open) {
                events.make_ready(ready, no, e, &prefix.as_bytes(), false);
            }
        }
    }
    events.add_timers(timers);
    events
        .tracked
        .store(true, std::sync::atomic::Ordering::Release);
}
