//! A power cut in a segment that mixes small records (page cache) and direct ones (sent to
//! the device at once): the device can keep a direct record and lose the small ones before
//! it. Before format 2 a `Strict` reopen took that gap for damage and refused the store
//! (design.md §7, "Unsynced tails"). Now the records after such a gap, none acknowledged as
//! `Persisted`, are an unsynced tail: cut, counted, and erased so they never come back.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::testing::{FaultMedium, Medium};
use hotstore::{Durability, Error, RecoveryMode, Store};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const BIG: usize = 20_000;

fn open(m: &Arc<FaultMedium>, mode: RecoveryMode) -> hotstore::Result<Store> {
    let medium: Arc<dyn Medium> = m.clone();
    Store::builder("mem")
        .media(vec![medium])
        .lanes(1)
        .segment_size_bytes(1 << 20)
        .direct_io_min_value_bytes(8192)
        .recovery(mode)
        .open()
}

fn small(i: u8) -> Vec<u8> {
    vec![i; 2000]
}

/// The segment holding `key`'s record, and the start of the 4 KiB block its header is in.
fn block_of(m: &FaultMedium, key: &[u8]) -> (String, usize) {
    for name in m.region_names() {
        let Some(image) = m.live_image(&name) else {
            continue;
        };
        if let Some(at) = image.windows(key.len()).position(|w| w == key) {
            // Key bytes follow the 24-byte record header.
            return (name, (at - 24) / 4096 * 4096);
        }
    }
    panic!("no record of {key:?}");
}

/// A store with `k0` (Persisted), `k1`..`k5` (Memory, page cache), `big` (direct, with
/// `big_durability`) and `k6` (Memory) in one segment.
fn mixed_segment(big_durability: Durability) -> (Arc<FaultMedium>, Store) {
    let m = FaultMedium::new("unsynced");
    let s = open(&m, RecoveryMode::Strict).unwrap();
    s.put(b"k0", &small(0), Durability::Persisted).unwrap();
    for i in 1..=5u8 {
        s.put(format!("k{i}").as_bytes(), &small(i), Durability::Memory)
            .unwrap();
    }
    s.put(b"big-value", &vec![0xAB; BIG], big_durability)
        .unwrap();
    (m, s)
}

#[test]
fn a_power_cut_that_keeps_a_direct_record_but_not_the_small_ones_before_it_opens_strict() {
    let (m, s) = mixed_segment(Durability::Memory);
    s.put(b"k6", &small(6), Durability::Memory).unwrap();
    assert!(
        m.faults().block_bytes_written.load(Ordering::Relaxed) > 0,
        "big went direct"
    );
    // The device wrote back the direct record's blocks and everything after, not the pages
    // of k1..k5 before them.
    let (file, block) = block_of(&m, b"big-value");
    let cut = m.crash_keeping(|p, off| p.ends_with(&file) && off >= block);
    drop(s);
    let s = open(&cut, RecoveryMode::Strict).expect("an unsynced tail, not damage");
    assert_eq!(s.get(b"k0").unwrap(), Some(small(0)), "the Persisted put");
    for k in ["k1", "k5", "big-value", "k6"] {
        assert_eq!(s.get(k.as_bytes()).unwrap(), None, "{k}: cut with the tail");
    }
    let r = s.recovery_report();
    assert_eq!(r.unsynced_tails.len(), 1, "{r:?}");
    // k5 (whole in the kept block), big-value and k6.
    assert_eq!(r.unsynced_tails[0].records, 3, "{r:?}");
    // Nothing is destroyed: the cut bytes, from the gap to the end of k6, are kept.
    let kept = r.unsynced_tails[0].saved_to.file_name().unwrap();
    let kept = cut
        .read_file(kept.to_str().unwrap())
        .unwrap()
        .expect("kept");
    for k in [&b"k5"[..], b"big-value", b"k6"] {
        assert!(kept.windows(k.len()).any(|w| w == k), "{k:?} kept");
    }

    // The segment goes on from the cut (as relocation's active segment: the largest tail),
    // its header now naming this boot: a gap among records written from now on, found
    // after a kill -9, is damage.
    let header = cut.live_image(&file).unwrap();
    assert_eq!(
        header[48..56],
        cut.boot_id().to_le_bytes(),
        "the boot of the new writes"
    );
    // Its dropped records were erased: after a kill -9 the scan of the segment (same boot)
    // stops at the cut, and finds nothing valid further on, which would be damage now.
    let killed = cut.process_crash();
    drop(s);
    let s = open(&killed, RecoveryMode::Strict).expect("nothing past the cut");
    for k in ["k5", "big-value", "k6"] {
        assert_eq!(s.get(k.as_bytes()).unwrap(), None, "{k}: erased");
    }
    assert_eq!(s.get(b"k0").unwrap(), Some(small(0)));
    assert!(s.recovery_report().unsynced_tails.is_empty());
}

#[test]
fn the_same_gap_without_a_reboot_is_damage() {
    let (m, s) = mixed_segment(Durability::Memory);
    let (file, block) = block_of(&m, b"big-value");
    // kill -9: the page cache survives, so the machine never lost k1..k5. Their loss here
    // can only be damage to the file.
    let killed = m.process_crash();
    drop(s);
    let header_of_k1 = {
        let image = killed.live_image(&file).unwrap();
        image.windows(2).position(|w| w == b"k1").unwrap() - 24
    };
    assert!(header_of_k1 < block);
    killed.tamper(&file, |b| b[header_of_k1..header_of_k1 + 24].fill(0));
    match open(&killed, RecoveryMode::Strict) {
        Err(Error::Corruption { .. }) => {}
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("opened a store damaged before intact records"),
    }
    let s = open(&killed, RecoveryMode::Salvage).unwrap();
    assert_eq!(s.get(b"big-value").unwrap(), Some(vec![0xAB; BIG]));
}

#[test]
fn a_persisted_direct_put_lands_after_the_small_records_before_it() {
    // A power cut after the direct write, before the sync that acknowledges it: that sync
    // fails (the first, second or third persist from here). The device keeps the direct
    // record's blocks, not the small records' pages, unless something synced them before.
    let mut cut_after_the_write = 0;
    for fail_at in 1..=3 {
        let m = FaultMedium::new("ordered");
        let s = open(&m, RecoveryMode::Strict).unwrap();
        s.put(b"k0", &small(0), Durability::Persisted).unwrap();
        for i in 1..=5u8 {
            s.put(format!("k{i}").as_bytes(), &small(i), Durability::Memory)
                .unwrap();
        }
        let f = m.faults();
        f.fail_persist_from.store(
            f.persist_calls.load(Ordering::SeqCst) + fail_at,
            Ordering::SeqCst,
        );
        let put = s.put(b"big-value", &vec![0xAB; BIG], Durability::Persisted);
        if put.is_ok() || f.block_bytes_written.load(Ordering::Relaxed) == 0 {
            continue; // acknowledged, or failed before its blocks were written
        }
        cut_after_the_write += 1;
        let (file, block) = block_of(&m, b"big-value");
        let cut = m.crash_keeping(|p, off| p.ends_with(&file) && off >= block);
        drop(s);
        // Had the put not synced k1..k5 before writing its blocks, the device would hold
        // the flagged record after a gap: damage before a promised record, refused.
        let s = open(&cut, RecoveryMode::Strict).expect("no gap before the flagged record");
        for i in 0..=5u8 {
            assert_eq!(s.get(format!("k{i}").as_bytes()).unwrap(), Some(small(i)));
        }
    }
    assert!(
        cut_after_the_write > 0,
        "no power cut between the write and its sync"
    );
}

#[test]
fn a_format_1_store_is_marked_format_2_when_opened() {
    let m = FaultMedium::new("upgrade");
    let s = open(&m, RecoveryMode::Strict).unwrap();
    s.put(b"a", b"b", Durability::Persisted).unwrap();
    drop(s);
    let meta = |m: &FaultMedium| -> serde_json::Value {
        serde_json::from_slice(&m.read_file(hotstore::META_FILE).unwrap().unwrap()).unwrap()
    };
    assert_eq!(meta(&m)["format_version"], hotstore::FORMAT_VERSION);
    let mut old = meta(&m);
    old["format_version"] = 1.into();
    m.write_file(hotstore::META_FILE, &serde_json::to_vec(&old).unwrap())
        .unwrap();
    drop(open(&m, RecoveryMode::Strict).unwrap());
    assert_eq!(meta(&m)["format_version"], 2);
    // Found in review: the mark was written before recovery, so an open that then refused
    // the store left it unreadable by the format-1 build too. Now a refused open leaves it.
    let mut old = meta(&m);
    old["format_version"] = 1.into();
    m.write_file(hotstore::META_FILE, &serde_json::to_vec(&old).unwrap())
        .unwrap();
    let seg = m
        .region_names()
        .into_iter()
        .find(|n| n.ends_with(".hss"))
        .unwrap();
    let kept = m.live_image(&seg).unwrap();
    m.remove(&seg).unwrap();
    assert!(
        open(&m, RecoveryMode::Strict).is_err(),
        "a listed file is missing"
    );
    assert_eq!(meta(&m)["format_version"], 1, "refused: left as it was");
    drop(m.create_region(&seg, kept.len()).unwrap());
    m.tamper(&seg, |b| b.copy_from_slice(&kept));
    drop(open(&m, RecoveryMode::Strict).unwrap());
    assert_eq!(meta(&m)["format_version"], 2);

    // A later format is refused by its version, with what to do.
    let mut newer = meta(&m);
    newer["format_version"] = 3.into();
    m.write_file(hotstore::META_FILE, &serde_json::to_vec(&newer).unwrap())
        .unwrap();
    match open(&m, RecoveryMode::Strict) {
        Err(e @ Error::FormatVersion { found: 3, .. }) => {
            assert!(e.to_string().contains("newer hotstore"), "{e}")
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("opened a format-3 store"),
    }
}

/// A store holding `first` (written with `durability`) then k1..k3 (`Memory`), all flushed,
/// after a power cut that lost nothing, with a bit of `first`'s value flipped: damage
/// followed by intact records, on a medium in a new boot.
fn flushed_then_one_bit_flipped(
    first: &[u8],
    durability: Durability,
    after_flush: bool,
) -> Arc<FaultMedium> {
    let m = FaultMedium::new("rot");
    let s = open(&m, RecoveryMode::Strict).unwrap();
    s.set_acknowledged_after_flush(after_flush);
    s.put(first, &small(9), durability).unwrap();
    for i in 1..=3u8 {
        s.put(format!("k{i}").as_bytes(), &small(i), Durability::Memory)
            .unwrap();
    }
    s.flush().unwrap();
    let (file, _) = block_of(&m, b"k1");
    let cut = m.crash(None);
    drop(s);
    // `first` is the segment's first record: header at 4096, key at 4120, value after it.
    let key_at = 4096 + 24;
    assert_eq!(
        cut.live_image(&file).unwrap()[key_at..key_at + first.len()],
        *first
    );
    cut.tamper(&file, |b| b[key_at + first.len() + 100] ^= 1);
    cut
}

/// Found in review: after a reboot, damage to a record acknowledged as Persisted, followed
/// only by unflagged records, was cut as an unsynced tail (the flag was in the damaged record
/// itself). Its header still says it was promised: refused.
#[test]
fn a_damaged_persisted_record_before_unflagged_ones_is_damage_after_a_reboot() {
    let cut = flushed_then_one_bit_flipped(b"x", Durability::Persisted, false);
    match open(&cut, RecoveryMode::Strict) {
        Err(Error::Corruption { .. }) => {}
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(s) => panic!("opened: {:?}", s.recovery_report().unsynced_tails),
    }
}

/// Found in review: a server writes `Memory` and acknowledges after its group commit's flush,
/// so its records were never flagged, and after a reboot damage among them was cut as an
/// unsynced tail. With `set_acknowledged_after_flush` they are flagged: refused. Without it
/// the same damage is cut, and the cut bytes are kept.
#[test]
fn writes_acknowledged_after_a_flush_are_flagged() {
    for after_flush in [true, false] {
        let cut = flushed_then_one_bit_flipped(b"x", Durability::Memory, after_flush);
        match (open(&cut, RecoveryMode::Strict), after_flush) {
            (Err(Error::Corruption { .. }), true) => {}
            (Ok(s), false) => {
                let r = s.recovery_report();
                assert_eq!(r.unsynced_tails.len(), 1, "{r:?}");
                assert_eq!(r.unsynced_tails[0].records, 3, "k1..k3, kept aside");
            }
            (Err(e), _) => panic!("after_flush {after_flush}: {e}"),
            (Ok(_), true) => panic!("opened a store damaged before flagged records"),
        }
    }
}
