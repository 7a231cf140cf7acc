//! The store's side of maintenance (see `maintenance` for the thread and its schedule):
//! sealing, reclaiming, preparing files, and the periodic sweep.

use super::Inner;
use crate::maintenance::Upkeep;
use crate::segment::Segment;
use crate::summary;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Upkeep for Inner {
    fn seal(&self, seg: &Arc<Segment>) {
        seal(self, seg)
    }

    fn reclaim(&self, id: u64) {
        reclaim(self, id)
    }

    fn prepare_one(&self) -> bool {
        prepare(self)
    }

    fn sweep(&self) {
        seal_dead_active(self);
        reclaim_groups(self);
        if !self.is_poisoned.load(Ordering::Acquire) {
            self.relocate_background();
        }
        note_low_room(self);
    }

    fn make_room(&self, need: u64, for_removal: bool) -> bool {
        Inner::make_room(self, need, for_removal)
    }

    fn compact(&self, report: &mut dyn FnMut(u64, u64)) -> crate::Result<u64> {
        self.compact_all(report)
    }
}

/// Marks the store short of room ([`Store::short_of_room`]) while no tier has room for two
/// more files beyond the put reserve: the next writes may ask for room and wait for
/// relocation, and a server can run them off its workers before the first one waits.
fn note_low_room(inner: &Inner) {
    let low = inner.put_reserve() + 2 * inner.tiers[0].segment_size as u64;
    if inner.tiers.iter().all(|t| t.room_bytes() < low) {
        inner
            .counters
            .short_of_room_at_ms
            .store(crate::clock::mono_ms(), Ordering::Relaxed);
    }
}

/// Seals `seg` now, on this (the maintenance) thread: persists it and writes its summary.
pub(crate) fn seal_now(inner: &Inner, seg: &Arc<Segment>) {
    seal(inner, seg)
}

/// Recycles every reclaimable segment and group now, and those their freeing unpins, until
/// a round frees nothing (a reclaim can decline: a failed persist leaves the segment).
pub(crate) fn reclaim_all(inner: &Inner) {
    let reclaimable = || -> Vec<u64> {
        inner
            .segments
            .lock()
            .values()
            .filter(|s| s.is_reclaimable())
            .map(|s| s.id)
            .collect()
    };
    let mut ids = reclaimable();
    for id in &ids {
        reclaim(inner, *id);
    }
    reclaim_groups(inner);
    loop {
        let more = reclaimable();
        // Progress: something new became reclaimable, or what was is gone.
        if more.is_empty() || more == ids || inner.is_poisoned.load(Ordering::Acquire) {
            break;
        }
        for id in &more {
            reclaim(inner, *id);
        }
        ids = more;
    }
}

/// Restocks the first tier if its stock of ready files is low: by cleaning if most of what it
/// holds is dead (see `Inner::clean_for_stock`), else by making a new file; true if it did
/// either.
fn prepare(inner: &Inner) -> bool {
    if inner.is_poisoned.load(Ordering::Acquire) {
        return false;
    }
    // Pooled files about to be taken come back into memory first (cheap when they are).
    if inner.tiers.iter().any(|t| t.warm_next()) {
        return true;
    }
    let Some(t) = inner.tiers.first() else {
        return false;
    };
    let files = inner.put_reserve().div_ceil(t.segment_size as u64) as usize;
    if !t.wants_stock(files) {
        return false;
    }
    if inner.clean_for_stock(0) {
        return true;
    }
    // A failure here is retried later and surfaces to the writer that needs the file.
    t.prepare_one(files).unwrap_or(false)
}

fn seal(inner: &Inner, seg: &Arc<Segment>) {
    if seg.recycled.load(Ordering::Acquire) {
        return;
    }
    // Encoded from the records' headers while their pages are still mapped; written only once
    // the records are durable. The pages are then unmapped before the sync (see
    // `Region::unmap_pages`). Group commits do not do this: their few pages per sync cost
    // about as much to unmap (a `madvise` of about 50 us here) as they save.
    let encode = |end: usize| {
        // Safety: published records below `end` never change while the segment is not
        // recycled, and only this thread recycles.
        let records = unsafe { seg.bytes(0, end) };
        summary::encode_records(seg.id, records, crate::segment::SEGMENT_HEADER_LEN, end)
    };
    let sealed_end = seg.end.load(Ordering::Acquire);
    let mut bytes = encode(sealed_end);
    seg.unmap_pages(0, sealed_end);
    let end = match seg.persist_written() {
        Ok(end) => end,
        Err(e) => return inner.poison(&e),
    };
    if end != sealed_end {
        bytes = encode(end);
    }
    // A missing summary only costs a scan at the next open.
    let _ = inner.tiers[seg.tier]
        .medium
        .write_file(&summary::file_name(seg.slot), &bytes);
    inner.maybe_reclaim(seg);
}

fn reclaim(inner: &Inner, id: u64) {
    let Some(seg) = inner.segments.lock().get(&id).cloned() else {
        return;
    };
    if !seg.is_reclaimable() || inner.is_poisoned.load(Ordering::Acquire) {
        return;
    }
    // Whatever shadows this segment's records must be durable before they can vanish.
    if inner.persist_all().is_err() || !checkpoint_acked(inner, &[&seg]) {
        return;
    }
    let holders: Vec<u64> = {
        let mut by = seg.pinned_by.lock();
        seg.recycled.store(true, Ordering::Release);
        by.drain().collect()
    };
    // A segment of puts may go while it pins older segments (see `Segment::is_reclaimable`):
    // whatever pinned it now pins those, so the chain from a tombstone down to the oldest
    // put of its key stays whole. Only this thread recycles, so no target goes meanwhile.
    let targets: Vec<Arc<Segment>> = if seg.pins.load(Ordering::Acquire) > 0 {
        let all: Vec<Arc<Segment>> = inner.segments.lock().values().cloned().collect();
        all.into_iter()
            .filter(|t| t.id != id && t.pinned_by.lock().remove(&id))
            .collect()
    } else {
        Vec::new()
    };
    for h in &holders {
        let holder = inner.segments.lock().get(h).cloned();
        if let Some(holder) = holder {
            for t in &targets {
                holder.pin_on(t);
            }
        }
    }
    inner.segments.lock().remove(&id);
    let tier = &inner.tiers[seg.tier];
    if let Err(e) = seg.write_free_header() {
        return inner.poison(&e);
    }
    let _ = tier.medium.remove(&summary::file_name(seg.slot));
    for h in holders {
        let holder = inner.segments.lock().get(&h).cloned();
        if let Some(holder) = holder {
            holder.pins.fetch_sub(1, Ordering::AcqRel);
            inner.maybe_reclaim(&holder);
        }
    }
    if let Err(e) = give_back(inner, &seg) {
        return inner.poison(&e);
    }
    let mut generation = inner.space.0.lock();
    *generation += 1;
    inner.space.1.notify_all();
}

/// Hands a recycled segment's file back to its tier, saying how it was written (see
/// `Tier::warm_next`).
fn give_back(inner: &Inner, seg: &Segment) -> crate::Result<()> {
    inner.tiers[seg.tier].give_back(seg.slot, seg.region.clone(), seg.mostly_direct())
}

/// An event-removal record, or a keep mark, is the store's memory that its event was
/// acknowledged (late fragments are refused by it). Before a segment holding one is recycled,
/// the acknowledged-event set is persisted, so that memory outlives the record. False (and the
/// segment stays) if that fails.
fn checkpoint_acked(inner: &Inner, segs: &[&Arc<Segment>]) -> bool {
    if !segs
        .iter()
        .any(|s| s.holds_event_acks.load(Ordering::Acquire))
    {
        return true;
    }
    // Cloned so the set is not locked during the write.
    let set = inner.events.acked.read().clone();
    match set.store(&*inner.tiers[0].medium, inner.events.prefix_len) {
        Ok(()) => true,
        Err(e) => {
            inner.poison(&e);
            false
        }
    }
}

/// Recycles groups of dead segments that pin each other (S1 shadows a record of S2 and S2 one
/// of S1: two writers overwriting or removing each other's keys). Neither can go first, or a
/// crash between the two would bring back a record the other had shadowed; together they can,
/// if every segment a member pins on is in the group. The group is freed all-or-nothing: its ids
/// are written to a durable intent file first, which recovery honours if a crash cuts the
/// freeing short, and removed once every member has a durable free header.
fn reclaim_groups(inner: &Inner) {
    use std::collections::{HashMap, HashSet};
    if inner.is_poisoned.load(Ordering::Acquire) {
        return;
    }
    let segs: Vec<Arc<Segment>> = inner.segments.lock().values().cloned().collect();
    let dead = |s: &Segment| {
        s.sealed.load(Ordering::Acquire)
            && !s.recycled.load(Ordering::Acquire)
            && s.live_records.load(Ordering::Acquire) == 0
            && s.readers.load(Ordering::SeqCst) == 0
    };
    let mut group: HashSet<u64> = segs.iter().filter(|s| dead(s)).map(|s| s.id).collect();
    if !segs
        .iter()
        .any(|s| group.contains(&s.id) && s.pins.load(Ordering::Acquire) > 0)
    {
        return; // nothing pinned: the ordinary reclaim handles these
    }
    // Outgoing pins: holder -> segments it pins on.
    let mut targets: HashMap<u64, Vec<u64>> = HashMap::new();
    for t in &segs {
        for h in t.pinned_by.lock().iter() {
            targets.entry(*h).or_default().push(t.id);
        }
    }
    // Keep only members whose every pin target is a member too (to a fixed point).
    loop {
        let before = group.len();
        let keep: HashSet<u64> = group
            .iter()
            .copied()
            .filter(|id| {
                targets
                    .get(id)
                    .is_none_or(|ts| ts.iter().all(|t| group.contains(t)))
            })
            .collect();
        group = keep;
        if group.len() == before {
            break;
        }
    }
    let members: Vec<Arc<Segment>> = segs.into_iter().filter(|s| group.contains(&s.id)).collect();
    if members.iter().all(|s| s.pins.load(Ordering::Acquire) == 0) {
        return;
    }
    if inner.persist_all().is_err() || !checkpoint_acked(inner, &members.iter().collect::<Vec<_>>())
    {
        return;
    }
    let ids: Vec<u64> = members.iter().map(|s| s.id).collect();
    let root = &inner.tiers[0].medium;
    let Ok(intent) = serde_json::to_vec(&ids) else {
        return;
    };
    if let Err(e) = root.write_file(crate::recovery::RECLAIM_INTENT, &intent) {
        return inner.poison(&e);
    }
    let mut holders = Vec::new();
    for seg in &members {
        {
            let mut by = seg.pinned_by.lock();
            seg.recycled.store(true, Ordering::Release);
            holders.extend(by.drain());
        }
        inner.segments.lock().remove(&seg.id);
        if let Err(e) = seg.write_free_header() {
            return inner.poison(&e);
        }
        let _ = inner.tiers[seg.tier]
            .medium
            .remove(&summary::file_name(seg.slot));
    }
    if let Err(e) = root.remove(crate::recovery::RECLAIM_INTENT) {
        return inner.poison(&e);
    }
    for h in holders.into_iter().filter(|h| !group.contains(h)) {
        let holder = inner.segments.lock().get(&h).cloned();
        if let Some(holder) = holder {
            holder.pins.fetch_sub(1, Ordering::AcqRel);
            inner.maybe_reclaim(&holder);
        }
    }
    for seg in &members {
        if let Err(e) = give_back(inner, seg) {
            return inner.poison(&e);
        }
    }
    let mut generation = inner.space.0.lock();
    *generation += 1;
    inner.space.1.notify_all();
}

/// Seals active segments whose every record is dead, so they can be recycled: a lane whose
/// thread went idle (or that got a reopened tail no thread writes to) would otherwise keep its
/// dead segment until close. A busy lane is skipped (`try_lock`); its next write simply rolls
/// to a new segment.
fn seal_dead_active(inner: &Inner) {
    // Relocation's lanes too: their copies die like any record, and an unsealed segment
    // pins what it shadows for good (found by the busy bounded-store test: every dead
    // segment pinned, through a chain, on a relocation lane's dead active segment).
    let lanes = inner
        .lanes
        .iter()
        .map(|l| &l.0)
        .chain(inner.relocator.lanes());
    for lane in lanes {
        let Some(mut l) = lane.try_lock() else {
            continue;
        };
        let dead = l.seg.as_ref().is_some_and(|s| {
            s.live_records.load(Ordering::Acquire) == 0
                && s.end.load(Ordering::Acquire) > crate::segment::SEGMENT_HEADER_LEN
        });
        if !dead {
            continue;
        }
        if let Some(seg) = l.seg.take() {
            seg.sealed.store(true, Ordering::Release);
            drop(l);
            seal(inner, &seg);
        }
    }
}
