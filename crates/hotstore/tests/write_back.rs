//! Proves that a block tier's segment files are held in the page cache in single pages
//! (`PageCache::SinglePages`, the default), so a Persisted small record costs its sync only
//! the pages it changed.
//!
//! Small records are copied through the segment's shared mapping, and a store there marks its
//! whole page-cache *folio* dirty. On file systems with large folios (ext4 on Linux 6.x),
//! segment files used to be cached in 1-2 MiB folios (the zero-fill's 1 MiB writes, and the
//! fault-path readahead ramping up along a file written in order), so each `fdatasync` of one
//! 100 B record wrote up to 2 MiB: a Persisted server wrote 950 KiB per group commit.
//!
//! The test looks at the folios themselves: every page the process maps from a segment file
//! is looked up in `/proc/self/pagemap` and `/proc/kpageflags` (a page of a large folio is a
//! compound head or tail). Reading page frame numbers needs CAP_SYS_ADMIN: without it the
//! test says so and passes. On a kernel or file system without large folios it passes
//! trivially.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::{Durability, FragmentKey, PageCache, Store};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A directory on the disk the tests run on (the build's target directory: a block tier).
fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("write-back-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir on disk")
}

/// Pages the process maps from segment files under `dir`: (in a large folio, single), or
/// `None` where page frame numbers or their flags cannot be read.
fn mapped_segment_pages(dir: &Path) -> Option<(usize, usize)> {
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    let flags = File::open("/proc/kpageflags").ok()?;
    let dir = dir.canonicalize().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let (mut large, mut single) = (0, 0);
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let range = fields.next().unwrap();
        let Some(path) = fields.nth(4) else { continue };
        if !(path.starts_with(dir.to_str().unwrap()) && path.ends_with(".hss")) {
            continue;
        }
        let (from, to) = range.split_once('-').unwrap();
        let from = usize::from_str_radix(from, 16).unwrap();
        let to = usize::from_str_radix(to, 16).unwrap();
        for page in (from..to).step_by(4096) {
            let mut entry = [0u8; 8];
            pagemap
                .read_exact_at(&mut entry, (page / 4096 * 8) as u64)
                .ok()?;
            let entry = u64::from_le_bytes(entry);
            let pfn = entry & ((1 << 55) - 1);
            if entry >> 63 == 0 {
                continue; // not present
            }
            if pfn == 0 {
                return None; // present, but the frame number is hidden: no CAP_SYS_ADMIN
            }
            let mut f = [0u8; 8];
            flags.read_exact_at(&mut f, pfn * 8).ok()?;
            let f = u64::from_le_bytes(f);
            const COMPOUND_HEAD: u64 = 1 << 15;
            const COMPOUND_TAIL: u64 = 1 << 16;
            if f & (COMPOUND_HEAD | COMPOUND_TAIL) != 0 {
                large += 1;
            } else {
                single += 1;
            }
        }
    }
    Some((large, single))
}

/// `puts` Persisted puts of `value_len` bytes (small: copied through the mapping).
fn put_persisted(store: &Store, value_len: usize, puts: u64) {
    let value = vec![0x5a; value_len];
    for n in 0..puts {
        let key = FragmentKey::new(1, n, 0, 0).to_bytes();
        store.put(&key, &value, Durability::Persisted).unwrap();
    }
}

fn check(dir: &Path, what: &str) {
    let Some((large, single)) = mapped_segment_pages(dir)
        .inspect(|p| eprintln!("{what}: (pages in large folios, single pages) = {p:?}"))
    else {
        eprintln!("page frame numbers or /proc/kpageflags unreadable here (not root): skipped");
        return;
    };
    assert!(single > 0, "{what}: no mapped segment pages found");
    assert_eq!(
        large,
        0,
        "{what}: {large} of {} mapped segment pages are in large folios (a sync writes each \
         such folio whole)",
        large + single
    );
}

#[test]
fn a_preallocated_segment_is_cached_in_single_pages() {
    let dir = disk_dir();
    let store = Store::builder(dir.path())
        .segment_size_bytes(32 << 20)
        .lanes(1)
        .preallocate_bytes(64 << 20)
        .open()
        .unwrap();
    put_persisted(&store, 1000, 12000);
    check(dir.path(), "preallocated");
}

#[test]
fn a_segment_made_while_writing_is_cached_in_single_pages() {
    let dir = disk_dir();
    let store = Store::builder(dir.path())
        .segment_size_bytes(32 << 20)
        .lanes(1)
        .open()
        .unwrap();
    // 12 MB into the segment: far enough for readahead to have ramped up its folios.
    put_persisted(&store, 1000, 12000);
    check(dir.path(), "made while writing");
}

#[test]
fn large_folios_stay_available_for_memory_writers() {
    // The other choice still opens and round-trips (its folio sizes are the kernel's).
    let dir = disk_dir();
    let store = Store::builder(dir.path())
        .segment_size_bytes(8 << 20)
        .page_cache(PageCache::LargeFolios)
        .preallocate_bytes(8 << 20)
        .open()
        .unwrap();
    put_persisted(&store, 1000, 100);
    let key = FragmentKey::new(1, 99, 0, 0).to_bytes();
    assert_eq!(store.get(&key).unwrap().unwrap(), vec![0x5a; 1000]);
}
