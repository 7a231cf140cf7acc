//! Writing event records: seals, keeps and removals, each one record in the writer's lane,
//! published under the event's shard lock so it is atomic with respect to fragment puts.

use super::EventShardMap as ShardMap;
use super::{acked::successor, EventEntry, MarkLoc, State};
use crate::error::{Error, Result};
use crate::index::IndexKey;
use crate::options::Durability;
use crate::record::{self, Kind, EVENT_MARK_KEPT, EVENT_MARK_SEALED, HEADER_LEN};
use crate::segment::Segment;
use crate::store::Inner;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What an event record does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventWrite {
    Seal,
    Keep,
    Remove,
}

impl Inner {
    /// Writes the record `what` for the event `prefix`. `check` runs under the event's shard
    /// lock before anything is published: an error aborts (nothing written), `Ok(false)` means
    /// there is nothing to write (e.g. sealing a sealed event). Returns once `durability` holds.
    pub(crate) fn write_event_record(
        &self,
        prefix: &[u8],
        what: EventWrite,
        durability: Durability,
        check: impl FnOnce(Option<&EventEntry>) -> Result<bool>,
    ) -> Result<()> {
        if prefix.len() != self.events.prefix_len {
            return Err(Error::InvalidArgument(format!(
                "an event id of this store is {} bytes, not {}",
                self.events.prefix_len,
                prefix.len()
            )));
        }
        self.check_poisoned()?;
        self.events.track(&self.index);
        let (kind, value): (Kind, &[u8]) = match what {
            EventWrite::Seal => (Kind::EventMark, &[EVENT_MARK_SEALED]),
            EventWrite::Keep => (Kind::EventMark, &[EVENT_MARK_KEPT]),
            EventWrite::Remove => (Kind::EventRemove, &[]),
        };
        let rec_len = record::record_len(prefix.len(), value.len());
        let body_crc = record::body_checksum(prefix, value);
        // Acknowledgements use the removal reserve: a full store must still drain.
        let (mut lane, seg, off) = self.lane_with_room(rec_len, None, true)?;
        // Safety: unpublished space of the lane's own segment.
        unsafe {
            seg.write_at(off + HEADER_LEN, prefix);
            seg.write_at(off + HEADER_LEN + prefix.len(), value);
        }
        let mut shard = self.index.event_shard(prefix).write();
        // An implicit READY event gets its entry first (a seal marks it).
        let sh = &mut *shard;
        self.events.materialize(&sh.keys, &mut sh.events, prefix);
        if !check(shard.events.entries.get(&IndexKey::new(prefix)))? {
            drop(shard);
            drop(lane);
            // Nothing new, but what the caller was told must hold as asked.
            return self.durable_absence(durability);
        }
        self.write_header(
            &mut lane,
            &mut shard.newest_lsn,
            &seg,
            off,
            kind,
            self.flags_persisted(durability),
            prefix,
            value.len(),
            body_crc,
        )?;
        let rec_len = rec_len as u64;
        lane.bytes += rec_len;
        match what {
            EventWrite::Remove => self.apply_remove(&mut shard, &seg, prefix, rec_len),
            EventWrite::Seal | EventWrite::Keep => {
                self.apply_mark(&mut shard, &seg, prefix, rec_len, what)
            }
        }
        drop(shard);
        self.durable(lane, &seg, durability)
    }

    /// Every fragment of the event dies with the removal record, which pins their segments
    /// (it must outlive them, or a reopen would bring them back).
    fn apply_remove(&self, shard: &mut ShardMap, seg: &Arc<Segment>, prefix: &[u8], rec_len: u64) {
        seg.dead_bytes.fetch_add(rec_len, Ordering::Relaxed);
        seg.holds_event_acks.store(true, Ordering::Release);
        let flen = self.events.fragment_len;
        let upper = successor(prefix);
        let doomed: Vec<IndexKey> = shard
            .keys
            .range((
                crate::index::bound(std::ops::Bound::Included(prefix)),
                crate::index::bound(match &upper {
                    Some(u) => std::ops::Bound::Excluded(&**u),
                    None => std::ops::Bound::Unbounded,
                }),
            ))
            .filter(|(k, _)| k.as_bytes().len() == flen)
            .map(|(k, _)| k.clone())
            .collect();
        // An event's fragments mostly share a segment: pin on each one once (a lock and a
        // set insert), not once per fragment.
        let mut pinned_on: Option<Arc<Segment>> = None;
        for k in doomed {
            if let Some(old) = shard.keys.remove(&k) {
                if !pinned_on.as_ref().is_some_and(|p| Arc::ptr_eq(p, &old.seg)) {
                    seg.pin_on(&old.seg);
                    pinned_on = Some(old.seg.clone());
                }
                self.retire(
                    &old.seg,
                    record::record_len(flen, old.value_len as usize) as u64,
                );
            }
        }
        if let Some(entry) = shard.events.entries.remove(&IndexKey::new(prefix)) {
            self.events.leave_state(&entry);
            if let Some(m) = entry.mark {
                self.retire(&m.seg, m.rec_len);
            }
        }
        self.events.insert_acked(prefix);
        self.events.count_removed();
    }

    fn apply_mark(
        &self,
        shard: &mut ShardMap,
        seg: &Arc<Segment>,
        prefix: &[u8],
        rec_len: u64,
        what: EventWrite,
    ) {
        seg.live_records.fetch_add(1, Ordering::AcqRel);
        seg.live_bytes.fetch_add(rec_len, Ordering::Relaxed);
        let kept = what == EventWrite::Keep;
        if kept {
            // Fix (found in review): a keep mark remembers its event's acknowledgement as a
            // removal record does, and dies with the event's fragments; the segment must not
            // be recycled before the acknowledged set is persisted (`checkpoint_acked`), or a
            // reopen would forget it and deliver the kept event again.
            seg.holds_event_acks.store(true, Ordering::Release);
        }
        let no = self.index.event_shard_no(prefix);
        let super::ShardEvents { entries, ready, .. } = &mut shard.events;
        let Some(entry) = entries.get_mut(&IndexKey::new(prefix)) else {
            // `check` saw the entry under this same lock.
            debug_assert!(false, "event vanished under its shard lock");
            self.retire(seg, rec_len);
            return;
        };
        let new = Box::new(MarkLoc {
            seg: seg.clone(),
            rec_len,
            kept,
        });
        if let Some(old) = entry.mark.replace(new) {
            self.retire(&old.seg, old.rec_len);
        }
        if kept {
            self.events.leave_state(entry);
            entry.state = State::Kept;
            self.events.enter_state(entry);
            self.events.insert_acked(prefix);
            self.events.count_kept();
        } else {
            entry.sealed = true;
            if matches!(entry.state, State::Open) {
                self.events.make_ready(ready, no, entry, prefix, false);
            }
        }
    }
}
