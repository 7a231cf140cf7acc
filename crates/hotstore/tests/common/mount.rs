//! A file system mounted for one test (`mount ARGS... TARGET`), unmounted when dropped.
//! Tests that need one skip (with a note) where mounting is not allowed.
#![allow(
    dead_code,
    reason = "each test file that includes it uses a part of it"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mount point, unmounted (lazily, if busy) when dropped.
pub struct Mounted(PathBuf);

/// Runs `mount args... target`; `None` (and a note on stderr) if it is not allowed here.
pub fn mount(args: &[&str], target: &Path) -> Option<Mounted> {
    match Command::new("mount").args(args).arg(target).output() {
        Ok(o) if o.status.success() => Some(Mounted(target.to_path_buf())),
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr);
            eprintln!("NOTE: skipped: mount {args:?} failed: {}", why.trim());
            None
        }
        Err(e) => {
            eprintln!("NOTE: skipped: cannot run mount: {e}");
            None
        }
    }
}

/// A tmpfs of `size` (`4m`) at a new directory `target`.
pub fn tmpfs(target: &Path, size: &str) -> Option<Mounted> {
    std::fs::create_dir_all(target).ok()?;
    mount(
        &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"],
        target,
    )
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}
