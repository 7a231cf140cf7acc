//! Runs the embedded Python binding's pytest suite (tests/python/test_embedded.py,
//! test_embedded_review.py, test_embedded_pipeline_review.py, and the client's value
//! packing in test_client_pipeline_review.py) against the installed `hotstore` package:
//! `scripts/test` builds and installs it first (`pip install ./python`, a release build of
//! crates/hotstore-py). Fails (does not skip) when the package or pytest is missing. After
//! changing crates/hotstore or crates/hotstore-py, install the package again (scripts/test
//! does) or this runs the old build.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn embedded_python_binding_pytest() {
    let ready = Command::new("python3")
        .args([
            "-c",
            "import hotstore._hotstore, numpy, pytest; print(hotstore.__file__)",
        ])
        .stdin(Stdio::null())
        .output();
    let ready = match ready {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "the hotstore Python package (with its native part), numpy or pytest is missing: run \
             scripts/test, which installs them (or: pip install maturin numpy pytest && pip \
             install --no-build-isolation ./python)\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("cannot run python3: {e}; run scripts/test, which installs it"),
    };
    eprintln!(
        "testing the installed package at {}",
        String::from_utf8_lossy(&ready.stdout).trim()
    );
    // Run from outside the tree: python/ must not shadow the installed package.
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(repo_root().join("tests/python/test_embedded.py"))
        .arg(repo_root().join("tests/python/test_embedded_review.py"))
        .arg(repo_root().join("tests/python/test_embedded_pipeline_review.py"))
        .arg(repo_root().join("tests/python/test_client_pipeline_review.py"))
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .output()
        .expect("run pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
}
