//! Proves that the store knows its own files: a segment file or `hotstore.meta` deleted while
//! the store is closed is refused by name (and reported by `verify`) unless the caller asks for
//! salvage, a file left unlisted by a crash during its creation opens fine, and a store written
//! before the list existed gets one at its next open.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

#[path = "common/mount.rs"]
mod mount;

use hotstore::testing::{FaultMedium, Medium, SegmentHeader};
use hotstore::{verify_dir, Durability, Error, FragmentKey, RecoveryMode, Store, StoreOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SEGMENT_BYTES: usize = 64 << 10;

fn options(dir: &Path, mode: RecoveryMode) -> StoreOptions {
    Store::builder(dir)
        .segment_size_bytes(SEGMENT_BYTES)
        .lanes(1)
        .recovery(mode)
}

fn key(i: u64) -> Vec<u8> {
    FragmentKey::new(1, i, 0, 0).to_bytes().to_vec()
}

/// A closed store in `dir` over several segments: keys 0..300 put, every third removed.
/// Returns what it holds.
fn fill(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let s = options(dir, RecoveryMode::Strict).open().unwrap();
    let mut want = BTreeMap::new();
    for i in 0..300u64 {
        let v = vec![i as u8; 1000];
        s.put(&key(i), &v, Durability::Persisted).unwrap();
        want.insert(key(i), v);
    }
    for i in (0..300u64).step_by(3) {
        s.remove(&key(i), Durability::Persisted).unwrap();
        want.remove(&key(i));
    }
    s.close().unwrap();
    want
}

fn contents(s: &Store, n: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..n)
        .filter_map(|i| s.get(&key(i)).unwrap().map(|v| (key(i), v)))
        .collect()
}

/// Segment files of `dir` whose header is a segment in use (they hold records).
fn files_in_use(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hss"))
        .filter(|p| {
            let bytes = std::fs::read(p).unwrap();
            SegmentHeader::decode(&bytes).is_ok_and(|h| h.id != 0)
        })
        .collect();
    out.sort();
    out
}

/// Slots the metadata lists for tier 0 (`None`: no list).
fn listed_slots(meta: &[u8]) -> Option<Vec<u64>> {
    let v: serde_json::Value = serde_json::from_slice(meta).unwrap();
    let runs = v["tiers"][0].get("files")?.as_array().unwrap().clone();
    let mut slots = Vec::new();
    for r in runs {
        let first = r["first_slot"].as_u64().unwrap();
        slots.extend(first..first + r["count"].as_u64().unwrap());
    }
    Some(slots)
}

#[test]
fn a_deleted_segment_file_is_refused_by_name_verified_and_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    let want = fill(dir.path());
    let in_use = files_in_use(dir.path());
    assert!(in_use.len() >= 3, "the test needs several segments");
    let lost = &in_use[0];
    let name = lost.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::remove_file(lost).unwrap();

    match options(dir.path(), RecoveryMode::Strict).open() {
        Err(e @ Error::MissingFiles { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&name),
                "the message does not name {name}: {msg}"
            );
            assert!(
                msg.contains("Salvage"),
                "the message does not say how to salvage: {msg}"
            );
            let Error::MissingFiles { tier_dir, files } = e else {
                unreachable!()
            };
            assert_eq!(tier_dir, dir.path());
            assert_eq!(files, vec![name.clone()]);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a store missing {name} opened in Strict mode"),
    }
    let report = verify_dir(dir.path()).unwrap();
    assert!(
        !report.is_intact(),
        "verify says a store missing {name} is intact"
    );
    assert!(
        report.damage.iter().any(|d| d.file == *lost),
        "verify does not name {name}: {:?}",
        report.damage
    );

    let s = options(dir.path(), RecoveryMode::Salvage).open().unwrap();
    assert_eq!(s.recovery_report().missing_files, vec![lost.clone()]);
    let got = contents(&s, 300);
    assert!(got.len() < want.len(), "the lost file held no live key");
    for (i, (k, v)) in (0..300u64)
        .map(|i| (i, key(i)))
        .filter_map(|(i, k)| Some((i, got.get_key_value(&k)?)))
    {
        // Kept, or removed by a tombstone that was in the lost file: the value put.
        assert_eq!(
            *v,
            vec![i as u8; 1000],
            "salvage returned a wrong value for {k:?}"
        );
    }
    s.close().unwrap();
    // Salvage rewrote the list: the store opens normally again, and verifies clean.
    let s = options(dir.path(), RecoveryMode::Strict).open().unwrap();
    assert!(s.recovery_report().missing_files.is_empty());
    assert_eq!(contents(&s, 300), got);
    s.close().unwrap();
    assert!(verify_dir(dir.path()).unwrap().is_intact());
}

#[test]
fn a_deleted_meta_file_is_refused_unless_salvage() {
    let dir = tempfile::tempdir().unwrap();
    let want = fill(dir.path());
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "hss")
        })
        .count();
    std::fs::remove_file(dir.path().join(hotstore::META_FILE)).unwrap();

    for attempt in [
        options(dir.path(), RecoveryMode::Strict).open().err(),
        verify_dir(dir.path()).err(),
        options(dir.path(), RecoveryMode::Strict)
            .create_if_missing(false)
            .open()
            .err(),
    ] {
        match attempt {
            Some(e @ Error::MissingMeta { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(hotstore::META_FILE), "{msg}");
                assert!(msg.contains("Salvage"), "{msg}");
                let Error::MissingMeta {
                    dir: d,
                    segment_files,
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(d, dir.path());
                assert_eq!(segment_files, segments);
            }
            Some(e) => panic!("wrong error: {e}"),
            None => panic!("a store without its metadata was opened"),
        }
    }
    assert!(
        !dir.path().join(hotstore::META_FILE).exists(),
        "a refused open re-created the metadata"
    );
    // Salvage with the store's options re-creates the metadata and keeps every record.
    let s = options(dir.path(), RecoveryMode::Salvage).open().unwrap();
    assert_eq!(contents(&s, 300), want);
    s.close().unwrap();
    let s = options(dir.path(), RecoveryMode::Strict).open().unwrap();
    assert_eq!(contents(&s, 300), want);
}

/// A crash after a file was created and before the list named it leaves a fresh, all-zero
/// file: it opens fine, as free space, and is listed from then on.
#[test]
fn a_file_created_but_not_listed_before_a_crash_opens_as_free() {
    let m = FaultMedium::new("files");
    let open = |m: &Arc<FaultMedium>| {
        Store::builder("/files")
            .segment_size_bytes(SEGMENT_BYTES)
            .lanes(1)
            .media(vec![m.clone() as Arc<dyn Medium>])
            .open()
    };
    let mut want = BTreeMap::new();
    {
        let s = open(&m).unwrap();
        for i in 0..100u64 {
            s.put(&key(i), &[i as u8; 1000], Durability::Persisted)
                .unwrap();
            want.insert(key(i), vec![i as u8; 1000]);
        }
        // The power cut: what the device holds, plus the file whose creation it interrupted.
        let d = m.crash(None);
        drop(d.create_region("seg-000900.hss", SEGMENT_BYTES).unwrap());
        let meta = d.read_file(hotstore::META_FILE).unwrap().unwrap();
        assert!(!listed_slots(&meta).unwrap().contains(&900));
        drop(s);
        let s = open(&d).unwrap();
        assert!(s.recovery_report().unlisted_files.is_empty());
        assert_eq!(contents(&s, 100), want);
        assert!(d.region_names().iter().any(|n| n == "seg-000900.hss"));
        let meta = d.read_file(hotstore::META_FILE).unwrap().unwrap();
        assert!(
            listed_slots(&meta).unwrap().contains(&900),
            "the adopted file is not listed"
        );
        for i in 100..200u64 {
            s.put(&key(i), &[i as u8; 1000], Durability::Persisted)
                .unwrap();
            want.insert(key(i), vec![i as u8; 1000]);
        }
        assert_eq!(contents(&s, 200), want);
    }
}

/// A store written before the list (no `files` in its metadata) opens, gets a list of the
/// files it has, and from then on a deleted file is noticed.
#[test]
fn a_store_without_a_list_gets_one_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let want = fill(dir.path());
    let meta_path = dir.path().join(hotstore::META_FILE);
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    for t in meta["tiers"].as_array_mut().unwrap() {
        assert!(t.as_object_mut().unwrap().remove("files").is_some());
    }
    std::fs::write(&meta_path, serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
    assert!(verify_dir(dir.path()).unwrap().is_intact());

    let s = options(dir.path(), RecoveryMode::Strict).open().unwrap();
    assert!(s.recovery_report().missing_files.is_empty());
    assert!(s.recovery_report().unlisted_files.is_empty());
    assert_eq!(contents(&s, 300), want);
    s.close().unwrap();
    let mut on_disk: Vec<u64> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("seg-")?
                .strip_suffix(".hss")?
                .parse()
                .ok()
        })
        .collect();
    on_disk.sort();
    assert_eq!(
        listed_slots(&std::fs::read(&meta_path).unwrap()),
        Some(on_disk)
    );
    let lost = files_in_use(dir.path()).pop().unwrap();
    std::fs::remove_file(&lost).unwrap();
    assert!(matches!(
        options(dir.path(), RecoveryMode::Strict).open(),
        Err(Error::MissingFiles { .. })
    ));
}

/// A listed file cut while the store was closed is damage, even a free one (its length was
/// the store's to keep).
#[test]
fn a_listed_file_cut_behind_the_stores_back_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path());
    let victim = files_in_use(dir.path()).remove(1);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap();
    f.set_len(0).unwrap();
    drop(f);
    match options(dir.path(), RecoveryMode::Strict).open() {
        Err(Error::Corruption {
            file, offset: 0, ..
        }) => assert_eq!(file, victim),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a store with a cut file opened in Strict mode"),
    }
    assert!(verify_dir(dir.path())
        .unwrap()
        .damage
        .iter()
        .any(|d| d.file == victim));
    let s = options(dir.path(), RecoveryMode::Salvage).open().unwrap();
    assert!(s
        .recovery_report()
        .bad_headers
        .iter()
        .any(|(p, _)| *p == victim));
}

/// Found by a new-user review (nineteenth session): `verify` opened every segment for
/// writing, so a store the caller may only read (an archived copy, a monitoring user) could
/// not be verified. Checked on a read-only bind mount (root is refused writes there too);
/// skipped with a note where mounting is not allowed.
#[test]
fn verify_reads_a_read_only_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = Store::builder(&dir).open().unwrap();
    for i in 0..100u64 {
        s.put(&i.to_be_bytes(), &[7u8; 3000], Durability::Persisted)
            .unwrap();
    }
    s.close().unwrap();
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let (d, r) = (dir.to_str().unwrap(), ro.to_str().unwrap());
    let Some(_unmount) = mount::mount(&["--bind", d], &ro) else {
        return;
    };
    // Its own guard too (the second unmount finds nothing mounted: harmless).
    let remounted = mount::mount(&["-o", "remount,ro,bind"], &ro);
    assert!(remounted.is_some(), "remount read-only: {r}");
    assert!(
        std::fs::write(ro.join("probe"), b"x").is_err(),
        "the mount is writable"
    );
    let report = verify_dir(&ro).unwrap();
    assert!(report.is_intact(), "{:?}", report.damage);
    assert_eq!(report.records_checked, 100);
}

/// Found by a new-user review (nineteenth session): a second tier other than the store's
/// was ignored without a word (`serve --offload-to B` on a store made with A started with A),
/// as was a tier added to an existing store. Both are refused; the store's own tiers, or
/// fewer (a capacity change of the first), open.
#[test]
fn tiers_other_than_the_stores_are_refused() {
    use hotstore::TierSpec;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let two = |lower: &str| {
        Store::builder(&dir)
            .tier(TierSpec::new(".").capacity_bytes(64 << 20))
            .tier(TierSpec::new(tmp.path().join(lower)))
            .open()
    };
    two("a").unwrap().close().unwrap();
    let e = two("b").err().expect("opened with another lower tier");
    assert!(
        matches!(&e, Error::InvalidOption { name: "tiers", .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("fixed when a store is created"),
        "{e}"
    );
    two("a").unwrap().close().unwrap();
    Store::builder(&dir)
        .tier(TierSpec::new(".").capacity_bytes(96 << 20))
        .open()
        .unwrap()
        .close()
        .unwrap();
    let one = tmp.path().join("one");
    Store::builder(&one).open().unwrap().close().unwrap();
    let e = Store::builder(&one)
        .tier(TierSpec::new("."))
        .tier(TierSpec::new(tmp.path().join("c")))
        .open()
        .err()
        .expect("a tier added to an existing store");
    assert!(e.to_string().contains("has 1 tier(s), 2 given"), "{e}");
}
