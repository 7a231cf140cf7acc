//! `export_hdf5` read back with the HDF5 library itself: slices stored in several parts (a small
//! fragment bound) become one dataset each, and every link's frames, concatenated over the
//! slice groups in name order, are byte for byte the raw export's, with their timestamps.
#![cfg(feature = "hdf5")]
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::Store;
use hotstore_recorder::source::{run_generator, GeneratorConfig};
use hotstore_recorder::{export, export_hdf5, slice, verify, Recorder, RecorderConfig};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn slices_in_several_parts_export_as_one_dataset_each_and_match_the_raw_export() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::builder(dir.path().join("store")).open().unwrap());
    let frame_len = 1024;
    let mut c = RecorderConfig::new(2, frame_len);
    c.pre = Duration::from_millis(200);
    c.post = Duration::from_millis(300);
    c.slice = Duration::from_millis(50);
    c.commit_interval = Duration::from_millis(20);
    c.link_timeout = Duration::from_millis(200);
    // At most 8 frames per stored part: a 50 ms slice at 2 MB/s (about 97 frames) takes 13.
    c.max_fragment_bytes = slice::value_len(8, frame_len);
    let rec = Recorder::start(store.clone(), c).unwrap();
    let h = rec.handle();
    let trig = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        h.trigger().unwrap()
    });
    let stop = AtomicBool::new(false);
    run_generator(
        &rec,
        &GeneratorConfig {
            links: 2,
            frame_len,
            rate_per_link: 2e6,
            duration: Some(Duration::from_millis(900)),
        },
        &stop,
    )
    .unwrap();
    trig.join().unwrap();
    let report = rec.finish().unwrap();
    let id = report.recordings[0].recording_id;
    let v = verify(&store, id).unwrap();
    assert!(v.complete, "{}", v.verdict);

    let raw = dir.path().join("raw");
    export(&store, id, &raw).unwrap();
    let out = dir.path().join("h5");
    let x = export_hdf5(&store, id, &out).unwrap();
    assert_eq!(x.path, out.join(format!("rec-{id:06}.hdf5")));
    assert!(x.file_bytes > x.frame_bytes);

    let f = hdf5::File::open(&x.path).unwrap();
    assert_eq!(
        f.attr("frame_size").unwrap().read_scalar::<u32>().unwrap(),
        frame_len as u32
    );
    assert!(!f.attr("lossy").unwrap().read_scalar::<bool>().unwrap());
    let names = f.member_names().unwrap();
    let sorted = {
        let mut s = names.clone();
        s.sort();
        s
    };
    assert_eq!(names, sorted);
    assert_eq!(names.len() as u64, x.slices);
    let mut max_parts = 0;
    for l in &v.links {
        let mut frames = Vec::new();
        let mut stamps = Vec::new();
        for name in &names {
            let g = f.group(name).unwrap();
            let Ok(ds) = g.dataset(&format!("RawData/Link{:04}", l.link)) else {
                continue;
            };
            assert_eq!(ds.shape()[1], frame_len);
            max_parts = max_parts.max(ds.attr("parts").unwrap().read_scalar::<u32>().unwrap());
            frames.extend(ds.read_raw::<u8>().unwrap());
            let ts = g
                .dataset(&format!("Timestamps/Link{:04}", l.link))
                .unwrap()
                .read_raw::<u64>()
                .unwrap();
            assert_eq!(ts.len(), ds.shape()[0]);
            stamps.extend(ts);
        }
        let want = std::fs::read(raw.join(format!("link-{:04}.bin", l.link))).unwrap();
        assert!(
            frames == want,
            "link {}: HDF5 frames differ from the raw export",
            l.link
        );
        assert_eq!(stamps.len() as u64, l.frames);
        for (k, fr) in frames.chunks(frame_len).enumerate() {
            let ts = u64::from_le_bytes(fr[16..24].try_into().unwrap());
            assert_eq!(ts, stamps[k], "link {} frame {k}", l.link);
        }
    }
    assert!(max_parts > 1, "no slice was stored in parts: {max_parts}");
}
