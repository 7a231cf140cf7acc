//! Proves the read-only commands (inspect, dump, verify, record verify/export) refuse a path that is not a store with a clear error and exit 2, and create nothing there: no directory, no LOCK file, the file untouched.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_hotstore");

/// Each read-only command, with the store path in place of `{}`. `out` is where `record
/// export` would write, so it can be checked to stay absent too.
fn commands(store: &str, out: &str) -> Vec<Vec<String>> {
    [
        vec!["inspect", store],
        vec!["inspect", "--json", store],
        vec!["dump", store],
        vec!["verify", store],
        vec!["verify", "--json", store],
        vec!["record", "verify", store],
        vec!["record", "export", store, "--recording", "1", "--out", out],
    ]
    .into_iter()
    .map(|a| a.into_iter().map(String::from).collect())
    .collect()
}

fn run(args: &[String]) -> Output {
    Command::new(BIN).args(args).output().expect("run hotstore")
}

/// Runs `args`, calls `check_disk` (what must, or must not, be on disk afterwards), then asserts
/// the usual error exit (2), one `error:` line naming `path` and containing `needle`, and no
/// panic. The disk is checked first so that a failure names the worse symptom.
fn assert_refused(args: &[String], path: &Path, needle: &str, check_disk: impl Fn()) {
    let o = run(args);
    check_disk();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?}: panic: {err}");
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert!(
        err.contains(path.to_str().unwrap()),
        "{args:?}: stderr does not name the path: {err}"
    );
    assert!(err.contains(needle), "{args:?}: expected `{needle}`: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: printed to stdout");
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn missing_path_is_refused_and_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    // A mistyped path two levels deep: neither level may appear.
    let typo = tmp.path().join("typo");
    let store = typo.join("store");
    let out = tmp.path().join("export");
    for args in commands(store.to_str().unwrap(), out.to_str().unwrap()) {
        assert_refused(&args, &store, "the directory does not exist", || {
            assert!(!typo.exists(), "{args:?} created {}", typo.display());
            assert!(!out.exists(), "{args:?} created {}", out.display());
        });
    }
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
}

#[test]
fn file_as_store_is_refused_and_left_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("run42.dat");
    let content = b"not a store, just data\n";
    std::fs::write(&file, content).unwrap();
    let out = tmp.path().join("export");
    for args in commands(file.to_str().unwrap(), out.to_str().unwrap()) {
        assert_refused(&args, &file, "is a file, not a store directory", || {
            assert!(file.is_file());
            assert_eq!(std::fs::read(&file).unwrap(), content, "{args:?}");
            assert!(!out.exists(), "{args:?} created {}", out.display());
        });
    }
    // The commands that create a store say the same (found by a new-user review: they
    // said "File exists").
    let f = file.to_str().unwrap();
    for args in [
        vec!["record", "--store", f, "--duration", "1"],
        vec!["minidaq", "--store", f, "--duration", "0.1", "--no-limit"],
    ] {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        assert_refused(&args, &file, "is a file, not a store directory", || {
            assert_eq!(std::fs::read(&file).unwrap(), content, "{args:?}");
        });
    }
    assert_eq!(entries(tmp.path()), ["run42.dat"]);
}

#[test]
fn empty_directory_is_refused_and_left_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("empty");
    std::fs::create_dir(&dir).unwrap();
    let out = tmp.path().join("export");
    let needle = format!("no store at {} (no {})", dir.display(), hotstore::META_FILE);
    for args in commands(dir.to_str().unwrap(), out.to_str().unwrap()) {
        assert_refused(&args, &dir, &needle, || {
            assert!(
                entries(&dir).is_empty(),
                "{args:?} left {:?}",
                entries(&dir)
            );
            assert!(!out.exists(), "{args:?} created {}", out.display());
        });
    }
}
