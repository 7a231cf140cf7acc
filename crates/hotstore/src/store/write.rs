//! The write path: put, remove and reserve/commit; publishing a record (header, index,
//! events) and retiring the records it shadows.

use super::*;

impl Store {
    /// Stores `value` under `key`, replacing any earlier value; returns once `durability` holds.
    pub fn put(&self, key: &[u8], value: &[u8], durability: Durability) -> Result<()> {
        self.put_with(key, value, durability.into())
    }

    /// [`Store::put`] with all write options.
    pub fn put_with(&self, key: &[u8], value: &[u8], opts: WriteOptions) -> Result<()> {
        self.put_parts_with(key, &[value], opts)
    }

    /// Stores the concatenation of `parts` (at most [`MAX_VALUE_PARTS`]) under `key`, as
    /// [`Store::put_with`] would store it as one value, without the caller assembling it: on a
    /// block tier the parts go to the file in one `pwritev`, so a value gathered from several
    /// buffers (a recorder's ring slots) is copied once.
    pub fn put_parts_with(&self, key: &[u8], parts: &[&[u8]], opts: WriteOptions) -> Result<()> {
        check_key(key)?;
        if parts.len() > MAX_VALUE_PARTS {
            return Err(Error::InvalidOption {
                name: "value parts",
                reason: format!("{} parts; at most {MAX_VALUE_PARTS}", parts.len()),
            });
        }
        let value_len: usize = parts.iter().map(|p| p.len()).sum();
        check_value(value_len)?;
        self.inner.check_poisoned()?;
        let rec_len = record::record_len(key.len(), value_len);
        let direct = value_len >= self.inner.direct_min;
        // A direct record's header goes out with its blocks, so its checksum is needed first:
        // taken here, outside the lane (found in review: under it, a thread sharing the lane
        // waited for it, and nothing was gained).
        let early_crc = direct.then(|| record::body_checksum_parts(key, parts));
        // A direct record may be followed by up to MAX_PAD zeros (see `put_direct`).
        let room = rec_len + if direct { record::MAX_PAD } else { 0 };
        let (mut lane, seg, off) = self.inner.lane_with_room(room, opts.full_wait, false)?;
        if let (Some(body_crc), true) = (early_crc, seg.writes_blocks()) {
            return self.put_direct(lane, seg, off, key, parts, value_len, body_crc, opts);
        }
        // Safety: [off, off + rec_len) is past `end` of the lane's active segment, which only
        // this lane (locked) writes.
        // A bulk record is written entirely through the medium (pwrite on block tiers): a
        // single store through the mapping would map its page writable, and every write-back of
        // that page then costs a TLB shoot-down and a page fault (25% of the time in a profile).
        let bulk = is_bulk(value_len);
        // Key, value parts and the zeros through the next header slot (written here, before
        // the shard lock, not by `write_header`: a page fault there held the lock).
        let mut all: [&[u8]; MAX_VALUE_PARTS + 2] = [&[]; MAX_VALUE_PARTS + 2];
        all[0] = key;
        all[1..=parts.len()].copy_from_slice(parts);
        let body_end = off + HEADER_LEN + key.len() + value_len;
        all[parts.len() + 1] = seg.zeros_to_next_header(body_end, off + rec_len);
        let all = &all[..parts.len() + 2];
        let written = if value_len >= self.inner.direct_min {
            // Safety: as above.
            unsafe { seg.write_body_parts_direct(off + HEADER_LEN, all) }.map(|_| ())
        } else {
            // Safety: as above.
            unsafe { seg.write_body_parts(off + HEADER_LEN, all, bulk) }
        };
        if let Err(e) = written {
            // Page-cache state after a failed write is unknown: refuse further writes.
            self.inner.poison(&e);
            return Err(e);
        }
        // After the copy, from the caller's bytes (in cache): a streaming copy's stores drain
        // to memory while this runs, instead of stalling the shard lock's atomic below.
        let body_crc = early_crc.unwrap_or_else(|| record::body_checksum_parts(key, parts));
        let mut shard = self.inner.index.shard(key).write();
        self.inner.publish(
            &mut lane,
            &seg,
            off,
            Kind::Put,
            self.inner.flags_persisted(opts.durability),
            key,
            value_len,
            body_crc,
            &mut shard,
            None,
        )?;
        drop(shard);
        lane.puts += 1;
        lane.bytes += rec_len as u64;
        self.inner.durable(lane, &seg, opts.durability)
    }

    /// A put of a large value written whole, header included, as 4 KiB blocks past the page
    /// cache (O_DIRECT), so that a `Persisted` put costs the device's write and a cache flush
    /// and nothing else: no page of it is dirty for the sync to write back.
    ///
    /// ```text
    ///  block:  |a ......... off|header key value .........................|end  pad  |b
    ///           tail of the     this record                                 zeros to
    ///           last record                                                 4 KiB
    /// ```
    /// The first block's bytes before `off` (the previous record's tail, published and
    /// unchanging) are written again as they are. The pad takes the segment's end to `b`, so
    /// the next record starts on a fresh block (writing into this record's last block through
    /// the mapping would first read it back from the device).
    ///
    /// The header is written with the body, so the lsn is taken before the write, not at
    /// publish under the shard lock. At publish, if a record newer than that lsn was written
    /// under the key's shard lock meanwhile (another writer, relocation, an event record), the
    /// record takes a new lsn and its first block is written again before it becomes visible:
    /// per key the lsn order stays the index order, which recovery relies on.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one put, already checked by the caller"
    )]
    fn put_direct(
        &self,
        mut lane: MutexGuard<'_, Lane>,
        seg: Arc<Segment>,
        off: usize,
        key: &[u8],
        parts: &[&[u8]],
        value_len: usize,
        body_crc: u32,
        opts: WriteOptions,
    ) -> Result<()> {
        const ALIGN: usize = crate::medium::direct::DIRECT_ALIGN;
        static ZEROS: [u8; ALIGN] = [0; ALIGN];
        let persisted = self.inner.flags_persisted(opts.durability);
        let rec_len = record::record_len(key.len(), value_len);
        let a = off / ALIGN * ALIGN;
        let pad = (off + rec_len).next_multiple_of(ALIGN) - (off + rec_len);
        let zeros = rec_len - (HEADER_LEN + key.len() + value_len) + pad;
        // Safety: [a, off) is below the segment's end (published records, or the segment
        // header): nothing writes it again, and the segment lives while we hold `seg`.
        let prefix = unsafe { seg.bytes(a, off - a) };
        // The blocks holding the header. Fix (found in review): a header starting 16 or 8
        // bytes before a block boundary ends in the next block, and rewriting only the first
        // block left the old lsn there under the new checksum: the acknowledged value failed
        // every read, and a Strict reopen refused the store.
        let head_blocks = (off - a + HEADER_LEN).next_multiple_of(ALIGN);
        // Writes the record's blocks with `lsn` in its header (all of them, or only those of
        // the header); `None` writes the header's blocks with it zeroed (an abandoned record).
        // Taken once, before the first write (after the pre-sync below): a rewrite of the
        // header's blocks with a new lsn keeps them.
        let flags = std::cell::Cell::new(record::Flags::default());
        let write = |lsn: Option<u64>, header_only: bool| -> Result<()> {
            let header = match lsn {
                Some(lsn) => record::encode_header_padded(
                    seg.id,
                    Kind::Put,
                    flags.get(),
                    key.len(),
                    value_len,
                    lsn,
                    body_crc,
                    pad,
                ),
                None => [0; HEADER_LEN],
            };
            let mut all: [&[u8]; MAX_VALUE_PARTS + 4] = [&[]; MAX_VALUE_PARTS + 4];
            all[0] = prefix;
            all[1] = &header;
            all[2] = key;
            all[3..3 + parts.len()].copy_from_slice(parts);
            all[3 + parts.len()] = &ZEROS[..zeros];
            let all = &all[..4 + parts.len()];
            let result = if header_only {
                let mut first: [&[u8]; MAX_VALUE_PARTS + 4] = [&[]; MAX_VALUE_PARTS + 4];
                let n = crate::medium::sub_parts(all, 0, head_blocks, &mut first);
                // Safety: our unpublished record's header blocks, `prefix` unchanged.
                unsafe { seg.write_blocks(a, &first[..n]) }
            } else {
                // Safety: from the block holding our record's start (its bytes before `off`
                // passed unchanged) to the end of its pad, past the segment's end.
                unsafe { seg.write_blocks(a, all) }
            };
            if let Err(e) = &result {
                // What the device holds after a failed direct write is unknown.
                self.inner.poison(e);
            }
            result
        };
        // A late fragment is refused before its blocks are written (found in review): refused
        // at publish only, a kill before its header was zeroed left a valid record that the
        // reopen kept (its lsn newer than the removal), bringing the acknowledged event back.
        // An acknowledgement racing this write still leaves that window (see design.md).
        {
            let shard = self.inner.index.shard(key).read();
            if shard.events.tracked && self.inner.events.is_fragment(key) {
                let probe = IndexKey::new(&key[..self.inner.events.prefix_len]);
                self.inner.events.admit(&shard.events, key, &probe)?;
            }
        }
        // A flagged record's bytes in front of it (small `Memory` records still in the page
        // cache) are synced before it goes to the device, so that it is written synced-before
        // and proves them (`recovery::scan`): otherwise, damaged later, they would be cut as an
        // unsynced tail with this acknowledged record. Costs a sync only where the segment mixes
        // them; the ack needs it anyway.
        if persisted && !seg.is_synced() {
            if let Err(e) = seg.persist_written() {
                self.inner.poison(&e);
                return Err(e);
            }
        }
        flags.set(seg.sync_flags(off, persisted));
        let lsn = self.inner.next_lsn.fetch_add(1, Ordering::Relaxed);
        write(Some(lsn), false)?;
        let mut shard = self.inner.index.shard(key).write();
        let published = self.inner.publish(
            &mut lane,
            &seg,
            off,
            Kind::Put,
            persisted,
            key,
            value_len,
            body_crc,
            &mut shard,
            Some(DirectPut {
                lsn,
                pad,
                rewrite: &|lsn| write(Some(lsn), true),
            }),
        );
        drop(shard);
        if let Err(e) = published {
            // Refused (an event policy) or failed: the record's valid header must not
            // survive to be found by recovery. Zero it, durably.
            if write(None, true).is_ok() {
                if let Err(p) = seg.persist_range(a, head_blocks) {
                    self.inner.poison(&p);
                }
            }
            return Err(e);
        }
        lane.puts += 1;
        lane.bytes += (rec_len + pad) as u64;
        self.inner.durable(lane, &seg, opts.durability)
    }

    /// Removes `key` with a durable tombstone; returns whether it was present (nothing is
    /// written if it was not).
    pub fn remove(&self, key: &[u8], durability: Durability) -> Result<bool> {
        self.remove_with(key, durability.into())
    }

    /// [`Store::remove`] with all write options.
    pub fn remove_with(&self, key: &[u8], opts: WriteOptions) -> Result<bool> {
        check_key(key)?;
        self.inner.check_poisoned()?;
        if !self.contains(key) {
            self.inner.durable_absence(opts.durability)?;
            return Ok(false);
        }
        let rec_len = record::record_len(key.len(), 0);
        let body_crc = record::body_checksum(key, &[]);
        let (mut lane, seg, off) = self.inner.lane_with_room(rec_len, opts.full_wait, true)?;
        // Safety: unpublished space of the lane's own segment.
        unsafe { seg.write_at(off + HEADER_LEN, key) };
        let mut shard = self.inner.index.shard(key).write();
        if !shard.contains_key(&IndexKey::new(key)) {
            drop(shard);
            drop(lane);
            self.inner.durable_absence(opts.durability)?;
            return Ok(false);
        }
        self.inner.publish(
            &mut lane,
            &seg,
            off,
            Kind::Tombstone,
            self.inner.flags_persisted(opts.durability),
            key,
            0,
            body_crc,
            &mut shard,
            None,
        )?;
        drop(shard);
        lane.removes += 1;
        lane.bytes += rec_len as u64;
        self.inner.durable(lane, &seg, opts.durability)?;
        Ok(true)
    }

    /// Reserves room for a `len`-byte value under `key` and returns a writable slice in the
    /// store's own memory (DAQDB's Alloc): fill it, then [`Reservation::commit`]. Nothing is
    /// visible or stored until the commit; dropping the reservation discards it. The calling
    /// thread's lane stays locked while the reservation lives.
    pub fn reserve(&self, key: &[u8], len: usize) -> Result<Reservation<'_>> {
        self.reserve_with(key, len, None)
    }

    /// [`Store::reserve`], waiting up to `full_wait` for space when the store is full.
    pub fn reserve_with(
        &self,
        key: &[u8],
        len: usize,
        full_wait: Option<Duration>,
    ) -> Result<Reservation<'_>> {
        check_key(key)?;
        check_value(len)?;
        self.inner.check_poisoned()?;
        let rec_len = record::record_len(key.len(), len);
        let (lane, seg, off) = self.inner.lane_with_room(rec_len, full_wait, false)?;
        // Safety: unpublished space of the lane's own segment.
        unsafe { seg.write_at(off + HEADER_LEN, key) };
        Ok(Reservation {
            inner: &self.inner,
            lane,
            seg,
            off,
            key_len: key.len(),
            value_len: len,
            filled: Some((0, crate::checksum::crc32c(key))),
        })
    }
}

/// Why [`Reservation::commit_kept`] failed, with what keeps the reserved memory valid.
pub enum CommitFailed<'a> {
    /// Refused before the record was published: the reservation, still holding its lane
    /// (drop it to discard it, once nothing uses its memory).
    Unpublished(Error, Box<Reservation<'a>>),
    /// Published, but its durability was not reached (the store is poisoned): the record,
    /// pinned.
    Published(Error, crate::ValueRef),
}

impl CommitFailed<'_> {
    /// The error, letting go of what was kept.
    pub fn into_error(self) -> Error {
        match self {
            CommitFailed::Unpublished(e, _) | CommitFailed::Published(e, _) => e,
        }
    }

    /// The error.
    pub fn error(&self) -> &Error {
        match self {
            CommitFailed::Unpublished(e, _) | CommitFailed::Published(e, _) => e,
        }
    }
}

/// Space reserved by [`Store::reserve`]: fill [`Reservation::value_mut`], then commit.
pub struct Reservation<'a> {
    inner: &'a Arc<Inner>,
    lane: MutexGuard<'a, Lane>,
    seg: Arc<Segment>,
    off: usize,
    key_len: usize,
    value_len: usize,
    /// `(n, crc)`: while the value has been written only by [`Reservation::fill`], in order,
    /// its first `n` bytes, and `crc` the body checksum of the key and those bytes, taken from
    /// the caller's buffers (in cache) as they were copied. A commit of a value filled whole
    /// so does not read it back from the segment, where a streaming copy left it in DRAM.
    /// `None` once any other write may have happened (`value_mut`, a fill out of order).
    filled: Option<(usize, u32)>,
}

impl Reservation<'_> {
    /// The value bytes, in the store's memory. Initially unspecified (not necessarily zero).
    pub fn value_mut(&mut self) -> &mut [u8] {
        // The caller may write anything: the commit checksums what is in the segment.
        self.filled = None;
        self.value_bytes()
    }

    fn value_bytes(&mut self) -> &mut [u8] {
        // Safety: the range is unpublished space of the segment owned by our locked lane;
        // the exclusive borrow of `self` makes this the only reference to it.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.seg
                    .region
                    .as_ptr()
                    .add(self.off + HEADER_LEN + self.key_len),
                self.value_len,
            )
        }
    }

    /// Copies `bytes` into the value from byte `at` on: what filling [`Reservation::value_mut`]
    /// from a buffer does, with the engine's own copy (see `copy`: glibc's `memcpy` is up to a
    /// third slower for kilobytes into memory aligned unlike the source, on AMD Zen, and from
    /// 4 KiB the copy bypasses the cache). Fills made in order from the start are checksummed
    /// from `bytes` as they are copied, so the commit does not read the value back: `bytes`
    /// must not change during the call (memory a device writes into, for one), or the record
    /// is stored with a checksum of other bytes and every read of it is refused.
    ///
    /// # Panics
    /// If `at + bytes.len()` is past the value's length (a caller's bug, like slicing past
    /// `value_mut()`).
    pub fn fill(&mut self, at: usize, bytes: &[u8]) {
        let end = at.checked_add(bytes.len()).filter(|&e| e <= self.value_len);
        let Some(end) = end else {
            panic!(
                "Reservation::fill of {} bytes at {at} past a value of {}",
                bytes.len(),
                self.value_len
            );
        };
        crate::copy::copy_into(&mut self.value_bytes()[at..end], bytes);
        // After the copy, as in `Store::put_parts_with`.
        self.filled = match self.filled {
            Some((n, crc)) if n == at => Some((end, crate::checksum::crc32c_append(crc, bytes))),
            _ => None,
        };
    }

    /// Publishes the value and returns once `durability` holds.
    pub fn commit(self, durability: Durability) -> Result<()> {
        self.commit_with(durability, false)
            .map(drop)
            .map_err(|(e, _, _)| e)
    }

    /// [`Reservation::commit`], returning the committed value held in place (a
    /// [`ValueRef`](crate::ValueRef), pinned before the record is published): for a caller that
    /// handed the reserved memory on (a Python buffer) and must keep it valid after the commit.
    /// On an error the pin is released with the reservation: a caller whose buffers may
    /// outlive a failed commit uses [`Reservation::commit_kept`].
    pub fn commit_ref(self, durability: Durability) -> Result<crate::ValueRef> {
        self.commit_kept(durability)
            .map_err(CommitFailed::into_error)
    }
}

impl<'a> Reservation<'a> {
    /// [`Reservation::commit_ref`] that keeps the reserved memory valid when the commit fails:
    /// a refusal before the record is published (a fragment of an acknowledged event, a
    /// poisoned store) hands the reservation back, still holding its lane, so no other write
    /// takes its space; a failure after (its durability not reached) keeps the record pinned.
    /// Found in review: the Python binding let a numpy array over a reservation whose commit
    /// was refused (`LateFragment`) write into the next record of the lane.
    pub fn commit_kept(
        self,
        durability: Durability,
    ) -> std::result::Result<crate::ValueRef, CommitFailed<'a>> {
        match self.commit_with(durability, true) {
            Ok(pinned) => Ok(pinned.expect("asked for a pin")),
            Err((e, Some(res), _)) => Err(CommitFailed::Unpublished(e, res)),
            Err((e, None, pinned)) => {
                Err(CommitFailed::Published(e, pinned.expect("asked for a pin")))
            }
        }
    }

    /// Publishes and waits for `durability`; pins the value first if `pin`. On an error: the
    /// reservation if it was not published, and the pin.
    #[allow(
        clippy::type_complexity,
        reason = "private: split into CommitFailed by its callers"
    )]
    fn commit_with(
        mut self,
        durability: Durability,
        pin: bool,
    ) -> std::result::Result<
        Option<crate::ValueRef>,
        (Error, Option<Box<Reservation<'a>>>, Option<crate::ValueRef>),
    > {
        // Safety: our own reserved, fully written range.
        let (key, value) = unsafe {
            let kv = self
                .seg
                .bytes(self.off + HEADER_LEN, self.key_len + self.value_len);
            kv.split_at(self.key_len)
        };
        let body_crc = match self.filled {
            Some((n, crc)) if n == self.value_len => crc,
            _ => record::body_checksum(key, value),
        };
        // The next header slot, zeroed through the mapping as the value was filled, before the
        // shard lock (see `write_header`); after the fill, next to the bytes it just wrote:
        // zeroed at `reserve`, 10 KiB ahead of the fill, it cost minidaq's readout 9%.
        // Safety: the next record's header slot, past our unpublished record.
        unsafe {
            self.seg
                .clear_next_header(self.off + record::record_len(self.key_len, self.value_len))
        };
        // Pinned while the lane is held: the active segment cannot be recycled yet.
        let pinned = pin.then(|| {
            crate::ValueRef::new(
                self.inner.clone(),
                self.seg.clone(),
                value.as_ptr(),
                value.len(),
            )
        });
        let mut shard = self.inner.index.shard(key).write();
        let published = self.inner.publish(
            &mut self.lane,
            &self.seg,
            self.off,
            Kind::Put,
            self.inner.flags_persisted(durability),
            key,
            self.value_len,
            body_crc,
            &mut shard,
            None,
        );
        drop(shard);
        if let Err(e) = published {
            drop(pinned);
            return Err((e, Some(Box::new(self)), None));
        }
        self.lane.puts += 1;
        self.lane.bytes += record::record_len(self.key_len, self.value_len) as u64;
        match self.inner.durable(self.lane, &self.seg, durability) {
            Ok(()) => Ok(pinned),
            Err(e) => Err((e, None, pinned)),
        }
    }
}

impl Inner {
    /// Writes the header of a record whose key and value are in place, and makes it visible.
    /// A fragment put is first admitted by the event table (a fragment of an acknowledged
    /// event is refused, unpublished), and accounted to its event after.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one record, kept apart to avoid copies"
    )]
    fn publish(
        &self,
        lane: &mut Lane, // proof that the caller holds the lane owning `seg`
        seg: &Arc<Segment>,
        off: usize,
        kind: Kind,
        persisted: bool,
        key: &[u8],
        value_len: usize,
        body_crc: u32,
        shard: &mut ShardMap,
        direct: Option<DirectPut<'_>>,
    ) -> Result<()> {
        // Event work only where the store tracks events (checked under the shard lock, which
        // the tracking build also takes: see `Events::track`).
        let fragment = shard.events.tracked && self.events.is_fragment(key);
        let probe = fragment.then(|| IndexKey::new(&key[..self.events.prefix_len]));
        if let (Some(probe), Kind::Put) = (&probe, kind) {
            self.events.admit(&shard.events, key, probe)?;
        }
        let lsn = match direct {
            None => self.write_header(
                lane,
                &mut shard.newest_lsn,
                seg,
                off,
                kind,
                persisted,
                key,
                value_len,
                body_crc,
            )?,
            Some(d) => self.place_direct(&mut shard.newest_lsn, seg, off, key, value_len, d)?,
        };
        let len = record::record_len(key.len(), value_len) as u64;
        let old = match kind {
            Kind::Put => {
                seg.live_records.fetch_add(1, Ordering::AcqRel);
                seg.live_bytes.fetch_add(len, Ordering::Relaxed);
                let old = shard.keys.insert(
                    IndexKey::new(key),
                    Loc {
                        seg: seg.clone(),
                        offset: off as u32,
                        value_len: value_len as u32,
                    },
                );
                if let Some(probe) = probe {
                    // A fragment's shard is its event's shard.
                    let no = shard.no;
                    debug_assert_eq!(
                        no,
                        self.index.event_shard_no(&key[..self.events.prefix_len])
                    );
                    self.events.on_put(
                        &shard.keys,
                        &mut shard.events,
                        no,
                        key,
                        probe,
                        value_len,
                        old.as_ref(),
                        lsn,
                    );
                }
                old
            }
            Kind::Tombstone => {
                seg.dead_bytes.fetch_add(len, Ordering::Relaxed);
                let old = shard.keys.remove(&IndexKey::new(key));
                if let (true, Some(o)) = (fragment, &old) {
                    if let Some(mark) =
                        self.events
                            .on_remove(&shard.keys, &mut shard.events, key, o)
                    {
                        self.retire(&mark.seg, mark.rec_len);
                    }
                }
                old
            }
            Kind::EventRemove | Kind::EventMark => {
                return Err(Error::InvalidArgument(
                    "event records are written by the event calls, not as keys".into(),
                ))
            }
        };
        if let Some(old) = old {
            // Pin before the old segment can be seen dead, so the recycler cannot miss us.
            seg.pin_on(&old.seg);
            self.retire(
                &old.seg,
                record::record_len(key.len(), old.value_len as usize) as u64,
            );
        }
        Ok(())
    }

    /// Writes the header of the record at `off` (key and value in place), takes its lsn and
    /// moves the segment's end past it. Called under the index shard lock of the key, so per
    /// key (and per event) the lsn order is the index order.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one record, kept apart to avoid copies"
    )]
    pub(crate) fn write_header(
        &self,
        _lane: &mut Lane,
        newest_lsn: &mut NewestLsn,
        seg: &Arc<Segment>,
        off: usize,
        kind: Kind,
        persisted: bool,
        key: &[u8],
        value_len: usize,
        body_crc: u32,
    ) -> Result<u64> {
        if kind != Kind::Put {
            // Before the record is published, so before anything can see it dead.
            seg.only_puts.store(false, Ordering::Release);
        }
        let lsn = self.next_lsn.fetch_add(1, Ordering::Relaxed);
        newest_lsn.note(key, lsn);
        let rec_len = record::record_len(key.len(), value_len);
        // Read before the header is written: a persist that returned before covers them.
        let flags = seg.sync_flags(off, persisted);
        let header =
            record::encode_header_with(seg.id, kind, flags, key.len(), value_len, lsn, body_crc);
        if kind != Kind::Put {
            // A put's writer zeroed it before the shard lock: a put and a relocated copy with
            // the body (`zeros_to_next_header`), a reservation at its commit. Every caller of
            // `write_header` with a put must (the three above do).
            // Safety: the next record's header slot, past our unpublished record.
            unsafe { seg.clear_next_header(off + rec_len) };
        }
        if is_bulk(value_len) {
            // Through the medium like the value (pwrite on block tiers), so the header never
            // waits on a page under write-back. A failure leaves the record unpublished.
            // Safety: the header slot of our unpublished record.
            if let Err(e) = unsafe { seg.write_body(off, &header, true) } {
                self.poison(&e);
                return Err(e);
            }
        } else {
            // Safety: the header slot of our unpublished record.
            unsafe { seg.write_at(off, &header) };
        }
        if kind != Kind::Put {
            seg.shadow_bytes
                .fetch_add(rec_len as u64, Ordering::Relaxed);
        }
        // Only the lane holder appends: no read-modify-write needed.
        if rec_len as u64 > seg.max_record.load(Ordering::Relaxed) {
            seg.max_record.store(rec_len as u64, Ordering::Relaxed);
        }
        seg.end.store(off + rec_len, Ordering::Release);
        Ok(lsn)
    }

    /// Publishes the end of a direct record already on the device (`Store::put_direct`):
    /// keeps its lsn if nothing newer was written under the shard lock since it was taken,
    /// else takes a new one and rewrites the record's first block. Called under the shard
    /// lock, like `write_header`.
    fn place_direct(
        &self,
        newest_lsn: &mut NewestLsn,
        seg: &Arc<Segment>,
        off: usize,
        key: &[u8],
        value_len: usize,
        d: DirectPut<'_>,
    ) -> Result<u64> {
        // Newer records that matter: of this key, and of its event (a removal or mark of
        // the event orders against its fragments by lsn).
        let mut newer = newest_lsn.newest(key);
        if self.events.is_fragment(key) {
            newer = newer.max(newest_lsn.newest(&key[..self.events.prefix_len]));
        }
        let lsn = if newer < d.lsn {
            d.lsn
        } else {
            let lsn = self.next_lsn.fetch_add(1, Ordering::Relaxed);
            (d.rewrite)(lsn)?;
            self.counters
                .direct_rewrites
                .fetch_add(1, Ordering::Relaxed);
            lsn
        };
        newest_lsn.note(key, lsn);
        let rec_len = record::record_len(key.len(), value_len);
        if rec_len as u64 > seg.max_record.load(Ordering::Relaxed) {
            seg.max_record.store(rec_len as u64, Ordering::Relaxed);
        }
        // The pad is dead from the start (recovery counts it so too).
        seg.dead_bytes.fetch_add(d.pad as u64, Ordering::Relaxed);
        seg.end.store(off + rec_len + d.pad, Ordering::Release);
        Ok(lsn)
    }

    /// A live record of `rec_len` bytes in `seg` became dead.
    pub(crate) fn retire(&self, seg: &Arc<Segment>, rec_len: u64) {
        seg.live_bytes.fetch_sub(rec_len, Ordering::Relaxed);
        seg.dead_bytes.fetch_add(rec_len, Ordering::Relaxed);
        if seg.live_records.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.maybe_reclaim(seg);
        }
    }
}

/// A direct record on its way to publish (`Store::put_direct`): the lsn in its header, its
/// pad, and how to write its first block again under a new lsn.
pub(crate) struct DirectPut<'a> {
    lsn: u64,
    pad: usize,
    rewrite: &'a dyn Fn(u64) -> Result<()>,
}
