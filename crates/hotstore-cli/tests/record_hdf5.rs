//! `hotstore record export --format hdf5` through the binary: a recording exported as HDF5 and
//! read back with h5py (tests/python/check_hdf5_export.py) frame by frame against the raw
//! export and `record verify`; and bad input: a full file system (a tiny tmpfs where this
//! process may mount one, and always a file-size limit on the exporting process), an output
//! path under a regular file, an unknown recording. Every failure leaves no file under the final
//! name and no temporary file. Without the `hdf5` feature: the clear error instead.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use std::path::Path;
#[cfg(feature = "hdf5")]
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run hotstore")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Records a small recording (3 links, about 0.8 s at 5 MB/s per link: about 2150 frames of
/// 5568 bytes, 12 MB) into `dir/store`; returns the store path.
#[cfg(feature = "hdf5")]
fn small_recording(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    let o = run(&[
        "record",
        "--store",
        s(&store),
        "--links",
        "3",
        "--rate-per-link",
        "5MB/s",
        "--pre",
        "0.3",
        "--post",
        "0.5",
        "--slice",
        "0.05",
        "--no-limit",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    store
}

fn export_hdf5(store: &Path, out: &Path) -> Output {
    run(&[
        "record",
        "export",
        s(store),
        "--recording",
        "1",
        "--out",
        s(out),
        "--format",
        "hdf5",
    ])
}

/// Files in `dir` (none if it does not exist).
#[cfg(feature = "hdf5")]
fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(feature = "hdf5")]
#[test]
fn an_hdf5_export_read_with_h5py_matches_verify_and_the_raw_export_frame_by_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_recording(tmp.path());
    let o = run(&["record", "verify", s(&store), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let verify_json = tmp.path().join("verify.json");
    std::fs::write(&verify_json, &o.stdout).unwrap();
    let raw = tmp.path().join("raw");
    let o = run(&[
        "record",
        "export",
        s(&store),
        "--recording",
        "1",
        "--out",
        s(&raw),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let out = tmp.path().join("h5");
    let o = export_hdf5(&store, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("rec-000001.hdf5"), "{said}");
    assert_eq!(files_in(&out), ["rec-000001.hdf5"]);

    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/check_hdf5_export.py");
    let c = Command::new("python3")
        .arg(&script)
        .arg(out.join("rec-000001.hdf5"))
        .arg(&raw)
        .arg(&verify_json)
        .output()
        .expect("python3 (scripts/test installs it, with h5py and numpy)");
    assert!(
        c.status.success(),
        "h5py check failed (scripts/test installs h5py and numpy):\n{}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    assert!(String::from_utf8_lossy(&c.stdout).starts_with("ok: "));

    // Exporting again replaces the file whole.
    let o = export_hdf5(&store, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(files_in(&out), ["rec-000001.hdf5"]);
}

/// Runs `f` with a tmpfs of `bytes` mounted at a fresh directory, or returns false where this
/// process may not mount one (not root, or no CAP_SYS_ADMIN).
#[cfg(feature = "hdf5")]
fn with_tmpfs(parent: &Path, bytes: u64, f: impl FnOnce(&Path)) -> bool {
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let mnt = parent.join(format!("tmpfs-{bytes}"));
    std::fs::create_dir_all(&mnt).unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={bytes}"),
            "tmpfs",
            s(&mnt),
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    if !ok {
        return false;
    }
    let _guard = Unmount(mnt.clone());
    f(&mnt);
    true
}

#[cfg(feature = "hdf5")]
#[test]
fn an_hdf5_export_to_a_full_file_system_fails_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_recording(tmp.path());
    let o = run(&["record", "verify", s(&store), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let frames: u64 = v[0]["manifest"]["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["frames_recorded"].as_u64().unwrap())
        .sum();
    let need = frames * (5568 + 8);

    // 1. A file-size limit on the exporting process (works for any user): the HDF5 library's
    // write fails with EFBIG in the middle of the file.
    let out = tmp.path().join("limited");
    let limit = 256 * 1024;
    let mut cmd = Command::new(BIN);
    cmd.args([
        "record",
        "export",
        s(&store),
        "--recording",
        "1",
        "--out",
        s(&out),
        "--format",
        "hdf5",
    ]);
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (signal, setrlimit) on values it owns.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            // Ignored, SIGXFSZ makes the write fail with EFBIG instead of killing the process.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let r = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("File too large")
            && err.contains("rec-000001.hdf5.")
            && err.contains(".writing"),
        "{err}"
    );
    assert_eq!(files_in(&out), Vec::<String>::new(), "{err}");

    // 2. A tmpfs smaller than the frames: refused before writing, with the sizes.
    let mounted = with_tmpfs(tmp.path(), 1 << 20, |mnt| {
        let out = mnt.join("out");
        let o = export_hdf5(&store, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("needs at least {need} bytes")),
            "{err}"
        );
        assert_eq!(files_in(&out), Vec::<String>::new());
    });
    // 3. A tmpfs with room for the frames but not for the whole file: the disk fills up in
    // the middle of the export.
    let mounted_too = with_tmpfs(tmp.path(), need + 8192, |mnt| {
        let out = mnt.join("out");
        let o = export_hdf5(&store, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("No space left on device"), "{err}");
        assert_eq!(files_in(&out), Vec::<String>::new(), "{err}");
    });
    assert_eq!(mounted, mounted_too);
    if !mounted {
        eprintln!("note: cannot mount a tmpfs here (needs root): tested the file-size limit only");
    }
}

#[cfg(feature = "hdf5")]
#[test]
fn an_hdf5_export_to_a_bad_path_or_of_an_unknown_recording_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_recording(tmp.path());
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = export_hdf5(&store, &file.join("out"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("Not a directory"), "{err}");

    let out = tmp.path().join("out");
    let o = run(&[
        "record",
        "export",
        s(&store),
        "--recording",
        "7",
        "--out",
        s(&out),
        "--format",
        "hdf5",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no recording 7"), "{err}");
    assert_eq!(files_in(&out), Vec::<String>::new());
}

#[cfg(not(feature = "hdf5"))]
#[test]
fn without_the_hdf5_feature_the_export_says_how_to_rebuild() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = export_hdf5(&tmp.path().join("no-store"), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("built without HDF5 support")
            && err.contains("libhdf5-dev")
            && err.contains("--features hdf5"),
        "{err}"
    );
    assert!(!out.exists());
}
