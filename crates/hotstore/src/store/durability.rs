//! Durability: making published records survive what their `Durability` promises (group
//! commit on block tiers, cache-line flushes on pmem, nothing on volatile tiers).

use super::*;

impl Store {
    /// Makes every write so far durable (as `Persisted` would have).
    pub fn flush(&self) -> Result<()> {
        self.inner.check_poisoned()?;
        self.inner.persist_records_and_groups(true)
    }

    /// Declares that every write, `Memory` ones included, is acknowledged to its client only
    /// after a [`Store::flush`] (a server's group commit): such writes then carry the persisted
    /// flag, as `Persisted` ones do, so that when a power cut comes during their sync and
    /// recovery cuts them as an unsynced tail, the report counts them apart (written as
    /// acknowledged: `UnsyncedTail::flagged`), and a direct record among them first waits for
    /// the page-cache bytes before it (`Store::put_direct`). Whether a gap is damage does not
    /// depend on it: the sync flags decide that (see `recovery::scan`). Flagging a write that
    /// is not flushed first is safe; it only changes that count.
    pub fn set_acknowledged_after_flush(&self, on: bool) {
        self.inner.acked_after_flush.store(on, Ordering::Relaxed);
    }
}

impl Inner {
    /// Whether a record written with `durability` carries the persisted flag.
    pub(crate) fn flags_persisted(&self, durability: Durability) -> bool {
        durability == Durability::Persisted || self.acked_after_flush.load(Ordering::Relaxed)
    }

    /// A removal found nothing to remove: with `Persisted`, the absence it reports must
    /// survive a power cut too, but the record that made the key absent (a `Memory` tombstone,
    /// possibly another lane's) may not be durable yet, so persist everything published.
    /// Fix (found by tests/crash_points.rs): `remove` used to answer `Ok(false)` at once, and
    /// a power cut then revived a key whose Persisted removal had been acknowledged.
    pub(crate) fn durable_absence(&self, durability: Durability) -> Result<()> {
        if durability == Durability::Memory {
            return Ok(());
        }
        self.persist_all()
    }

    /// Makes the published record durable as asked; consumes the lane guard.
    pub(crate) fn durable(
        &self,
        lane: MutexGuard<'_, Lane>,
        seg: &Arc<Segment>,
        durability: Durability,
    ) -> Result<()> {
        if durability == Durability::Memory {
            return Ok(());
        }
        let result = match self.tiers[seg.tier].domain() {
            Domain::Volatile => Ok(()),
            // Cache-line flushes are cheap: done under the lane lock, which keeps the durable
            // part of the segment a prefix without a coordinator.
            Domain::Pmem => {
                let r = seg.persist_written().map(|_| ());
                drop(lane);
                r
            }
            Domain::Block => {
                drop(lane);
                let t = Instant::now();
                let r = self.commit.persist(seg);
                self.counters.sync_waits.record(t.elapsed());
                r
            }
        };
        if let Err(e) = &result {
            self.poison(e);
        }
        result
    }

    /// Persists every segment with unpersisted records (active and sealed).
    pub(crate) fn persist_all(&self) -> Result<()> {
        // Only the segments with something to persist are taken (a large store has thousands:
        // cloning every one made each group commit cost 18 ns per segment).
        let segs: Vec<Arc<Segment>> = self
            .segments
            .lock()
            .values()
            .filter(|s| !s.is_synced())
            .cloned()
            .collect();
        for s in segs {
            if !s.is_synced() {
                if let Err(e) = s.persist_written() {
                    self.poison(&e);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}
