//! The read path: get, ranges, scans; every read verifies its record's checksum unless
//! turned off.

use super::*;

impl Store {
    /// The value of `key`, if present. Checksums are verified unless turned off in the options.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, |v| v.to_vec())
    }

    /// Calls `f` with the value of `key` in place (no copy) and returns its result.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let shard = self.inner.index.shard(key).read();
        let Some(loc) = shard.get(&IndexKey::new(key)) else {
            return Ok(None);
        };
        let value = self.inner.read_value(key, loc)?;
        Ok(Some(f(value)))
    }

    /// The values of `keys`, in their order (`None` where a key is absent). Faster than a
    /// [`Store::get`] per key when the keys are many and not in the caches: the index lookups
    /// of up to 16 keys at a time, then their records, are requested from memory together,
    /// so their misses overlap, where a get waits for two misses in a row. Checksums are
    /// verified unless turned off in the options; the first failure is the error.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(keys.len());
        let mut failed = None;
        self.get_many_with(keys, |_, got| match got {
            Ok(v) => out.push(v.map(<[u8]>::to_vec)),
            Err(e) => {
                failed.get_or_insert(e);
            }
        });
        failed.map_or(Ok(out), Err)
    }

    /// Calls `f` with each of `keys`' place in `keys` and its value in place (no copy), in
    /// their order: `Ok(None)` where a key is absent, an error where its record fails its
    /// checksum. Looked up as [`Store::get_many`] does. A value is read as it was when its
    /// batch of keys was looked up: a put of the same key meanwhile may or may not be seen.
    pub fn get_many_with<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        mut f: impl FnMut(usize, Result<Option<&[u8]>>),
    ) {
        for (b, batch) in keys.chunks(GET_BATCH).enumerate() {
            self.inner
                .get_batch(batch, |i, got| f(b * GET_BATCH + i, got));
        }
    }

    /// The value of `key` held in place (no copy): a [`ValueRef`] keeps the record's segment
    /// from being recycled until it is dropped, so its bytes stay valid and unchanged even
    /// after the key is overwritten or removed, relocated, or the store closed (the store's
    /// directory then stays locked until the last `ValueRef` is dropped). For handing a
    /// value to another owner without a copy (a Python buffer). Checksums are verified
    /// unless turned off in the options.
    pub fn get_ref(&self, key: &[u8]) -> Result<Option<ValueRef>> {
        let shard = self.inner.index.shard(key).read();
        let Some(loc) = shard.get(&IndexKey::new(key)) else {
            return Ok(None);
        };
        let value = self.inner.read_value(key, loc)?;
        // Pinned under the shard lock, while the record is live: whatever makes it dead
        // takes this lock after us, so the recycler sees the pin (see `Segment::readers`).
        Ok(Some(ValueRef::new(
            self.inner.clone(),
            loc.seg.clone(),
            value.as_ptr(),
            value.len(),
        )))
    }

    /// Length of the value of `key`, if present (no value read).
    pub fn value_len(&self, key: &[u8]) -> Option<usize> {
        self.inner
            .index
            .shard(key)
            .read()
            .get(&IndexKey::new(key))
            .map(|l| l.value_len as usize)
    }

    /// True if `key` is present.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.inner
            .index
            .shard(key)
            .read()
            .contains_key(&IndexKey::new(key))
    }

    /// Up to `limit` entries with `from <= key < to` (`to = None`: to the end), in key order,
    /// with their values.
    pub fn range(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner
            .index
            .range(from, to, limit, |k, loc| {
                self.inner
                    .read_value(&k.as_bytes(), loc)
                    .map(|v| v.to_vec())
            })
            .into_iter()
            .map(|(k, v)| v.map(|v| (k.into_vec(), v)))
            .collect()
    }

    /// Up to `limit` keys with `from <= key < to`, in key order, with their value lengths.
    pub fn range_keys(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, usize)> {
        self.inner
            .index
            .range(from, to, limit, |_, loc| loc.value_len as usize)
            .into_iter()
            .map(|(k, n)| (k.into_vec(), n))
            .collect()
    }

    /// Calls `f` for every live key with its value length and the value's crc32c, in key
    /// order within each index shard (the order across shards is not defined).
    pub fn for_each_checked(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<()> {
        for shard in self.inner.index.shards() {
            let map = shard.read();
            for (k, loc) in map.iter() {
                let v = self.inner.read_value(&k.as_bytes(), loc)?;
                f(&k.as_bytes(), v);
            }
        }
        Ok(())
    }
}

/// Most keys [`Store::get_many`] looks up together: at most one segment each to pin.
pub(crate) const GET_BATCH: usize = PINNED_MAX;

/// Bytes of a record [`Inner::get_batch`] asks for ahead: a small record whole, a large one's
/// header, key and first lines (the hardware's own prefetcher follows a longer read).
const GET_PREFETCH_BYTES: usize = 256;

impl Inner {
    /// [`Store::get_many_with`] of at most [`GET_BATCH`] keys, in three passes: each key's
    /// leaf is asked for; then, each key found, its segment is pinned and its record asked
    /// for; then the records are read. Each pass takes a key's shard lock on its own, never
    /// two at once.
    fn get_batch<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        mut f: impl FnMut(usize, Result<Option<&[u8]>>),
    ) {
        debug_assert!(keys.len() <= GET_BATCH);
        for key in keys {
            let key = key.as_ref();
            self.index.shard(key).read().prefetch(&IndexKey::new(key));
        }
        let mut pinned = Pinned::new(self);
        let mut found = arrayvec::ArrayVec::<Option<(usize, u32, u32)>, GET_BATCH>::new();
        for key in keys {
            let key = key.as_ref();
            let shard = self.index.shard(key).read();
            found.push(shard.get(&IndexKey::new(key)).map(|loc| {
                let rec_len = record::record_len(key.len(), loc.value_len as usize);
                // Safety: the record is live under the shard lock, and pinned from here on.
                let rec = unsafe { loc.seg.bytes(loc.offset as usize, rec_len) };
                crate::prefetch::lines(rec, GET_PREFETCH_BYTES);
                (pinned.pin(&loc.seg), loc.offset, loc.value_len)
            }));
        }
        for (i, (key, place)) in keys.iter().zip(&found).enumerate() {
            let got = match place {
                None => Ok(None),
                // Safety: the record was live under its shard lock when its segment was
                // pinned, and `pinned` outlives the read.
                Some((seg, offset, value_len)) => unsafe {
                    self.read_record(key.as_ref(), pinned.segment(*seg), *offset, *value_len)
                }
                .map(Some),
            };
            f(i, got);
        }
    }

    /// The value of `key`'s record at `loc`, its checksum verified unless turned off. The
    /// caller holds the key's index shard lock (so the record is published and its segment
    /// cannot be recycled meanwhile).
    pub(crate) fn read_value<'s>(&self, key: &[u8], loc: &'s Loc) -> Result<&'s [u8]> {
        // Safety: the caller's shard lock, as documented.
        unsafe { self.read_record(key, &loc.seg, loc.offset, loc.value_len) }
    }

    /// [`Inner::read_value`] of the record at `offset` in `seg` with a `value_len` value.
    ///
    /// # Safety
    /// The record must be published, and `seg` kept from recycling while the returned slice
    /// lives: by a shard lock held since the record was found live, or a pin ([`Pinned`])
    /// taken under that lock.
    pub(crate) unsafe fn read_record<'s>(
        &self,
        key: &[u8],
        seg: &'s Segment,
        offset: u32,
        value_len: u32,
    ) -> Result<&'s [u8]> {
        let rec_len = record::record_len(key.len(), value_len as usize);
        // Safety: the caller's promise (see above).
        let rec = unsafe { seg.bytes(offset as usize, rec_len) };
        if self.verify_on_read {
            // And the record the index meant: a record intact in itself but not the one
            // looked up (a stale location: another key's, an older value of this key, a
            // tombstone) is an error, not another value's bytes (found in review).
            let ok = record::parse_header(rec).is_ok_and(|h| {
                h.kind == Kind::Put
                    && h.key_len == key.len()
                    && h.value_len == value_len as usize
                    && rec[HEADER_LEN..HEADER_LEN + key.len()] == *key
                    && record::verify(seg.id, rec, &h)
            });
            if !ok {
                return Err(Error::ChecksumMismatch {
                    file: seg.path().clone(),
                    offset: offset as u64,
                });
            }
        }
        let start = HEADER_LEN + key.len();
        Ok(&rec[start..start + value_len as usize])
    }
}

/// Segments pinned for reads made after the index shard lock is released: each counted once
/// in [`Segment::readers`], so it is not recycled and its published bytes stay as they are;
/// unpinned when dropped (a segment whose records all died meanwhile can then go). Holds up
/// to [`PINNED_MAX`] segments, on the stack.
pub(crate) struct Pinned<'a> {
    inner: &'a Inner,
    segs: arrayvec::ArrayVec<Arc<Segment>, PINNED_MAX>,
}

/// Most segments one [`Pinned`] holds.
pub(crate) const PINNED_MAX: usize = 16;

impl<'a> Pinned<'a> {
    pub(crate) fn new(inner: &'a Inner) -> Self {
        Pinned {
            inner,
            segs: arrayvec::ArrayVec::new(),
        }
    }

    /// Pins `seg` (once) and returns its place in [`Pinned::segment`]. Call it under the
    /// shard lock of a live record of `seg`: whatever makes the record dead takes that lock
    /// after us, so the recycler sees the pin. A caller pins at most [`PINNED_MAX`] records.
    pub(crate) fn pin(&mut self, seg: &Arc<Segment>) -> usize {
        if let Some(i) = self.segs.iter().rposition(|s| Arc::ptr_eq(s, seg)) {
            return i;
        }
        pin_segment(seg);
        self.segs.push(seg.clone());
        self.segs.len() - 1
    }

    /// The segment pinned at place `i`.
    pub(crate) fn segment(&self, i: usize) -> &Segment {
        &self.segs[i]
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        for seg in &self.segs {
            self.inner.unpin_segment(seg);
        }
    }
}

/// A value held in place in the store's memory ([`Store::get_ref`],
/// [`Reservation::commit_ref`](crate::Reservation::commit_ref)). While it lives, the segment
/// holding the value is not recycled (relocation and removal may make the record dead, but
/// its bytes stay where they are), and the store's files stay mapped and locked. Dereferences
/// to the value's bytes.
pub struct ValueRef {
    inner: Arc<Inner>,
    seg: Arc<Segment>,
    ptr: *const u8,
    len: usize,
}

// Safety: the bytes behind `ptr` are published (immutable) store memory, kept mapped by
// `seg` (which holds the region) and kept from reuse by the reader count; sharing a
// read-only view of them between threads is sound, as for `&[u8]`.
unsafe impl Send for ValueRef {}
// Safety: as for Send: only shared, read-only access to immutable bytes.
unsafe impl Sync for ValueRef {}

impl ValueRef {
    /// Pins `seg` (count one more reader) for the value at `ptr..ptr + len` inside it. The
    /// caller must make sure `seg` cannot be recycled before the count is taken (hold the
    /// key's index shard lock with the record live, or the lane of its active segment).
    pub(crate) fn new(inner: Arc<Inner>, seg: Arc<Segment>, ptr: *const u8, len: usize) -> Self {
        pin_segment(&seg);
        ValueRef {
            inner,
            seg,
            ptr,
            len,
        }
    }

    /// The value's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // Safety: `ptr..ptr + len` lies in the segment's region (it came from a bounds-checked
        // slice of it), the region stays mapped while `seg` lives, and the reader count keeps
        // the segment from being recycled, so the published bytes are never written again.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Address of the value's first byte in the store's memory (stable while `self` lives).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The value's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for ValueRef {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for ValueRef {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for ValueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValueRef({} bytes in {:?})", self.len, self.seg)
    }
}

impl Drop for ValueRef {
    fn drop(&mut self) {
        self.inner.unpin_segment(&self.seg);
    }
}

/// Counts one more reader of `seg` ([`Segment::readers`]): it is not recycled until
/// [`Inner::unpin_segment`]. Taken under the shard lock of a live record of `seg`.
fn pin_segment(seg: &Segment) {
    seg.readers.fetch_add(1, Ordering::SeqCst);
}

impl Inner {
    /// Ends a [`pin_segment`]; the last reader asks for the reclaim of a segment whose
    /// records all died meanwhile.
    fn unpin_segment(&self, seg: &Arc<Segment>) {
        if seg.readers.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.maybe_reclaim(seg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verified read through a location that holds another record than the one looked up,
    /// intact in itself, is a `ChecksumMismatch`: another key's record, an older value of the
    /// same key (another length), a tombstone.
    #[test]
    fn a_stale_location_is_an_error_not_another_value() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::builder(dir.path()).open().expect("a store");
        let put = |k: &[u8], v: &[u8]| store.put(k, v, Durability::Memory).expect("a put");
        let loc_of = |k: &[u8]| -> Loc {
            let shard = store.inner.index.shard(k).read();
            shard.get(&IndexKey::new(k)).expect("indexed").clone()
        };
        put(b"key-a", &[1; 100]);
        put(b"key-b", &[2; 100]);
        put(b"key-c", &[3; 40]);
        let old_c = loc_of(b"key-c");
        put(b"key-c", &[4; 60]);
        store
            .remove(b"key-b", Durability::Memory)
            .expect("a removal");
        // key-b's tombstone follows key-c's second record.
        let new_c = loc_of(b"key-c");
        let tombstone = Loc {
            seg: new_c.seg.clone(),
            offset: new_c.offset + record::record_len(5, 60) as u32,
            value_len: 0,
        };
        let a = loc_of(b"key-a");
        let stale = [
            ("another key's record", b"key-c".as_slice(), a.clone()),
            (
                "an older value of the key",
                b"key-c".as_slice(),
                Loc {
                    value_len: 60,
                    ..old_c
                },
            ),
            ("a tombstone", b"key-b".as_slice(), tombstone),
        ];
        // The store is quiet: nothing recycles these segments while they are read.
        for (what, key, loc) in stale {
            match store.inner.read_value(key, &loc) {
                Err(Error::ChecksumMismatch { .. }) => {}
                other => panic!("{what}: read answered {other:?}"),
            }
        }
        assert_eq!(
            store.inner.read_value(b"key-a", &a).expect("a read"),
            &[1; 100]
        );
    }
}
