//! Temporary stores that never outlive the command that made them.
//!
//! A benchmark's or minidaq's store can hold gigabytes of /dev/shm. A [`ScratchDir`] is
//! removed when dropped (a normal end, an error, a panic that unwinds) and also when the
//! process is stopped with SIGINT or SIGTERM (what Ctrl-C, `timeout`, `kill` and batch
//! systems send): the first scratch directory starts a watcher thread that, on either signal,
//! removes every live scratch directory and exits with 128 + the signal number, as the default
//! action would have. Only SIGKILL cannot be caught: what it leaves is named
//! `hotstore-<command>-*` under the base directory (/dev/shm by default).

use crate::{Error, Result};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// The live scratch directories, removed by the watcher on a stop signal.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static WATCHER: Once = Once::new();

/// A temporary directory, removed on drop and on SIGINT/SIGTERM.
pub struct ScratchDir {
    dir: Option<tempfile::TempDir>,
}

impl ScratchDir {
    /// A new directory `<base>/hotstore-<what>-XXXXXX`.
    pub fn new_in(base: &Path, what: &str) -> Result<Self> {
        WATCHER.call_once(start_watcher);
        // Held from before the directory exists until it is listed. Fix (CI, `cli.rs`
        // `a_stop_while_measuring_the_disk_limit_leaves_no_probe_file`): a signal between the
        // two found the list without it, and the stopped run left the directory behind.
        let mut live = LIVE.lock();
        let dir = tempfile::Builder::new()
            .prefix(&format!("hotstore-{what}-"))
            .tempdir_in(base)
            .map_err(|e| {
                Error::Msg(format!(
                    "cannot create a temporary store under {}: {e}",
                    base.display()
                ))
            })?;
        live.push(dir.path().to_path_buf());
        Ok(ScratchDir { dir: Some(dir) })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            LIVE.lock().retain(|p| p != dir.path());
            let path = dir.path().to_path_buf();
            if let Err(e) = dir.close() {
                warn(&format!(
                    "could not remove the temporary store {}: {e}; remove it by hand",
                    path.display()
                ));
            }
        }
    }
}

/// Writes to stderr without panicking when stderr is closed.
fn warn(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "hotstore: {msg}");
}

fn start_watcher() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            // Without the watcher a signal still stops the process (default action); only the
            // clean-up is lost, so say so rather than fail the command.
            warn(&format!(
                "cannot watch for SIGINT/SIGTERM ({e}): a stopped run leaves its temporary store"
            ));
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("scratch-cleanup".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                remove_all_live();
                std::process::exit(128 + sig);
            }
        });
    if let Err(e) = spawned {
        warn(&format!(
            "cannot start the clean-up thread ({e}): a stopped run leaves its temporary store"
        ));
    }
}

/// Removes every live scratch directory (the other threads may still be writing into it, so
/// a removal that races a new file is retried).
fn remove_all_live() {
    let live: Vec<PathBuf> = LIVE.lock().clone();
    for path in live {
        let mut last = None;
        for _ in 0..10 {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        match last {
            None => warn(&format!(
                "stopped by a signal; removed the temporary store {}",
                path.display()
            )),
            Some(e) => warn(&format!(
                "stopped by a signal; could not remove the temporary store {}: {e}; remove it by hand",
                path.display()
            )),
        }
    }
}
