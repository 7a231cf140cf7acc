//! Found by a full-disk campaign (nineteenth session): a recorder whose store filled the file
//! system failed its final manifest with ENOSPC (the recording stayed `recording`, a `.tmp`
//! file was left behind). The manifests keep a space reserve that a full file system gets.
//! Needs `mount -t tmpfs` (root); skipped with a note where mounting is not allowed.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore_recorder::manifest::{self, Manifest};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path, size: &str) -> Option<Mounted> {
        std::fs::create_dir_all(at).unwrap();
        match Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
        {
            Ok(o) if o.status.success() => Some(Mounted(at.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "NOTE: skipped: mount failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                None
            }
            Err(e) => {
                eprintln!("NOTE: skipped: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A store directory with its manifests' space reserve on a 4 MiB tmpfs mounted under `tmp`
/// (`None` where mounting is not allowed).
fn small_store(tmp: &Path) -> Option<(Mounted, PathBuf)> {
    let m = Mounted::tmpfs(&tmp.join("mnt"), "4m")?;
    let store = tmp.join("mnt/store");
    std::fs::create_dir_all(&store).unwrap();
    manifest::reserve_space(&store);
    Some((m, store))
}

/// Something (the store) takes every byte the file system under `mnt` has left.
fn fill_up(mnt: &Path) {
    let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
    let chunk = vec![1u8; 64 << 10];
    while filler.write_all(&chunk).is_ok() {}
    let _ = filler.write_all(&[1u8; 512]);
}

fn manifest(id: u32) -> Manifest {
    let json = format!(
        r#"{{"version":1,"recording_id":{id},"state":"complete","lossy":true,
        "triggers_ns":[5],"pre_ns":1,"post_ns":2,"start_ns":4,"end_ns":7,"slice_ns":1,
        "frame_len":64,"durability":"persisted","slices_durable":3,
        "links":[{{"link":0,"frames_recorded":3,"frames_dropped":0,"slices_durable":3,
                  "first_ts_ns":4,"last_ts_ns":6}}],
        "created_unix_ns":1,"updated_unix_ns":2}}"#
    );
    serde_json::from_str(&json).unwrap()
}

#[test]
fn final_manifests_are_written_on_a_full_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_m, store)) = small_store(tmp.path()) else {
        return;
    };
    fill_up(&tmp.path().join("mnt"));
    assert!(
        std::fs::write(store.join("probe"), vec![0u8; 8192]).is_err(),
        "not full"
    );
    manifest::write(&store, &manifest(1)).unwrap();
    assert!(manifest::read(&store, 1).unwrap().lossy);
    let left: Vec<_> = std::fs::read_dir(manifest::dir_of(&store))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// Found by a review on a 200 MB tmpfs: an update of a running recording's manifest that met
/// ENOSPC spent the reserve, and the next update stopped the recorder (the recording left
/// `recording`, no summary). Updates on a full file system are skipped (the previous
/// manifest stays, and is true) and keep the reserve for the final manifest.
#[test]
fn updates_on_a_full_file_system_keep_the_reserve_for_the_final_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_m, store)) = small_store(tmp.path()) else {
        return;
    };
    let mut running = manifest(2);
    running.state = manifest::RecordingState::Recording;
    running.slices_durable = 1;
    manifest::write(&store, &running).unwrap();
    fill_up(&tmp.path().join("mnt"));
    // Many updates while full: none fails, none is written, the reserve stays.
    running.slices_durable = 2;
    for _ in 0..5 {
        assert!(!manifest::write_interim(&store, &running).unwrap());
        manifest::write(&store, &running).unwrap();
    }
    assert_eq!(manifest::read(&store, 2).unwrap().slices_durable, 1);
    // The final manifest still gets the reserve.
    let mut done = manifest(2);
    done.state = manifest::RecordingState::Truncated;
    manifest::write(&store, &done).unwrap();
    assert_eq!(
        manifest::read(&store, 2).unwrap().state,
        manifest::RecordingState::Truncated
    );
}
