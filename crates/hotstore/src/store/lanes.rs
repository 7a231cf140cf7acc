//! Lanes and space: each thread's lane, its active segment, and rolling to a new segment
//! file from the tiers (or `StoreFull`).

use super::*;

impl Inner {
    fn lane(&self) -> MutexGuard<'_, Lane> {
        let i = LANE.with(|l| *l) % self.lanes.len();
        self.lanes[i].0.lock()
    }

    /// This thread's lane, locked, with room for a `rec_len` record: its active segment and
    /// the offset where the record goes. On a full store, waits up to `full_wait` for space
    /// *without* holding the lane. Fix (found by tests/full.rs): the wait used to hold the
    /// lane, so a thread sharing it could not remove anything, and the space the writer waited
    /// for never came (with one lane, never at all).
    pub(crate) fn lane_with_room(
        &self,
        rec_len: usize,
        full_wait: Option<Duration>,
        for_removal: bool,
    ) -> Result<(MutexGuard<'_, Lane>, Arc<Segment>, usize)> {
        let deadline = full_wait.map(|w| Instant::now() + w);
        loop {
            // Read before trying, so space given back meanwhile is not waited for in vain.
            let generation = *self.space.0.lock();
            let mut lane = self.lane();
            match self.room(&mut lane, rec_len, for_removal) {
                Ok((seg, off)) => return Ok((lane, seg, off)),
                Err(e) if e.is_full() => {
                    drop(lane);
                    let remaining = deadline
                        .and_then(|d| d.checked_duration_since(Instant::now()))
                        .filter(|r| !r.is_zero());
                    let Some(remaining) = remaining else {
                        self.counters.full_errors.fetch_add(1, Ordering::Relaxed);
                        return Err(e);
                    };
                    let mut g = self.space.0.lock();
                    if *g == generation {
                        let t = Instant::now();
                        self.space
                            .1
                            .wait_for(&mut g, remaining.min(Duration::from_millis(50)));
                        self.counters.full_waits.record(t.elapsed());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The lane's active segment and the offset where a `rec_len` record goes, rolling to a
    /// new segment when it does not fit; `StoreFull` at once if no tier has room.
    fn room(
        &self,
        lane: &mut Lane,
        rec_len: usize,
        for_removal: bool,
    ) -> Result<(Arc<Segment>, usize)> {
        if let Some(seg) = &lane.seg {
            let end = seg.end.load(Ordering::Relaxed);
            // A put does not append to a segment a removal took from the reserve: it rolls,
            // which a full store refuses (StoreFull) without touching the lane's segment.
            let reserved = !for_removal && seg.removals_only.load(Ordering::Relaxed);
            if end + rec_len <= seg.capacity() && !reserved {
                return Ok((seg.clone(), end));
            }
        }
        let seg_size = self.tiers[0].segment_size;
        let needed = SEGMENT_HEADER_LEN + rec_len;
        let len = if needed <= seg_size {
            seg_size
        } else {
            needed.next_multiple_of(4096)
        };
        let started = Instant::now();
        // A removal takes from the reserve only when a put could not have had the file, and
        // marks such a segment: puts sharing the lane must not fill it, or the next removal on
        // a full store would find the reserve gone.
        let (taken, under_reserve) = match self.take_region(len, self.removal_reserve()) {
            Ok(t) => (t, false),
            Err(e) if for_removal && e.is_full() => (self.take_region(len, 0)?, true),
            Err(e) => return Err(e),
        };
        let (tier, (slot, region), pooled) = taken;
        if !pooled {
            // The writer made the file itself or waited for one being prepared: a stall.
            self.counters.segment_waits.record(started.elapsed());
        }
        // Wake maintenance now to replace what was taken (it also runs on a timer).
        self.send(Job::Prepare);
        let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
        // Synced watermark 0: the header is persisted with the segment's first records.
        let seg = Arc::new(Segment::new(id, tier, slot, region, SEGMENT_HEADER_LEN, 0));
        seg.removals_only.store(under_reserve, Ordering::Relaxed);
        if let Err(e) = seg.write_header(now_ns()) {
            self.poison(&e);
            return Err(e);
        }
        self.segments.lock().insert(id, seg.clone());
        if let Some(old) = lane.seg.replace(seg.clone()) {
            old.sealed.store(true, Ordering::Release);
            self.send(Job::Seal(old));
        }
        Ok((seg, SEGMENT_HEADER_LEN))
    }

    /// Standard segments kept free for tombstones: removals must work on a full store.
    pub(crate) fn removal_reserve(&self) -> usize {
        self.lanes.len().min(2)
    }

    /// A file of `len` bytes from the first tier with room, and whether it came from a pool
    /// (no wait); `StoreFull` if no tier has room.
    fn take_region(&self, len: usize, reserve: usize) -> Result<(usize, SlotRegion, bool)> {
        for tier in &self.tiers {
            if let Some((r, pooled)) = tier.take(len, reserve)? {
                return Ok((tier.index, r, pooled));
            }
        }
        Err(Error::StoreFull {
            needed_bytes: len as u64,
            capacity_bytes: self
                .tiers
                .iter()
                .map(|t| t.capacity_bytes.max(t.used_bytes()))
                .sum(),
            device: self
                .tiers
                .iter()
                .find_map(|t| t.device_full_hint())
                .unwrap_or_default(),
        })
    }
}
