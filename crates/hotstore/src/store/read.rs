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
                self.inner.read_value(k.as_bytes(), loc).map(|v| v.to_vec())
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
                let v = self.inner.read_value(k.as_bytes(), loc)?;
                f(k.as_bytes(), v);
            }
        }
        Ok(())
    }
}

impl Inner {
    pub(crate) fn read_value<'s>(&self, key: &[u8], loc: &'s Loc) -> Result<&'s [u8]> {
        let rec_len = record::record_len(key.len(), loc.value_len as usize);
        // Safety: `loc` came from the index under a shard lock the caller still holds, so the
        // record is published and its segment cannot be recycled meanwhile.
        let rec = unsafe { loc.seg.bytes(loc.offset as usize, rec_len) };
        if self.verify_on_read {
            let ok = record::parse_header(rec).is_ok_and(|h| record::verify(loc.seg.id, rec, &h));
            if !ok {
                return Err(Error::ChecksumMismatch {
                    file: loc.seg.path().clone(),
                    offset: loc.offset as u64,
                });
            }
        }
        let start = HEADER_LEN + key.len();
        Ok(&rec[start..start + loc.value_len as usize])
    }
}
