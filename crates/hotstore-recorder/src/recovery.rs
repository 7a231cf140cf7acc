//! Closing recordings whose recorder died: a manifest left `recording` by a recorder that was
//! killed (SIGKILL, OOM killer) or crashed stays `recording` forever unless someone closes it,
//! and the run policy that recorder set for it stays in the store's policy file.
//!
//! How we know the recorder is gone: a recorder writes through an open [`Store`], and an open
//! store holds an exclusive `flock` on its `LOCK` file for as long as it is open (the kernel
//! releases it when the process dies, however it dies). So whoever holds an open `Store` is the
//! only process that can be writing that store's recordings; and within this process, the
//! recorders running on a store are registered here (`Active`). A manifest that says
//! `recording` while we hold the store and no recorder of ours runs on it was left by a
//! recorder that no longer runs. No timing is involved.

use crate::error::{RecorderError, Result};
use crate::manifest::{self, Manifest, RecordingState};
use crate::slice;
use hotstore::{Durability, EventId, Store};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Store directories (canonical) with a recorder running in this process.
static ACTIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn key_of(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// A recorder of this process running on a store; unregistered on drop.
pub(crate) struct Active(PathBuf);

impl Active {
    /// Registers a recorder on `store`; refused if one already runs on it in this process
    /// (two recorders would give two recordings the same id).
    pub(crate) fn register(store: &Store) -> Result<Active> {
        let key = key_of(store.dir());
        let mut a = ACTIVE.lock();
        if a.contains(&key) {
            return Err(RecorderError::Config {
                name: "store",
                reason: format!(
                    "a recorder is already running on {} in this process: finish it before starting another",
                    store.dir().display()
                ),
            });
        }
        a.push(key.clone());
        Ok(Active(key))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.lock().retain(|p| p != &self.0);
    }
}

/// What [`close_interrupted`] did to one recording.
#[derive(Debug, Clone)]
pub struct Closed {
    /// The manifest as now written (`truncated`, `interrupted`).
    pub manifest: Manifest,
    /// Slice events of the recording found in the store and sealed.
    pub slices_sealed: u64,
}

impl Closed {
    /// A line for people.
    pub fn describe(&self) -> String {
        let m = &self.manifest;
        format!(
            "recording {} was left `recording` by a recorder that is no longer running (killed or crashed): closed as truncated (interrupted) with what its manifest says is durable: {} frames, {} slices on every link; its run policy is released",
            m.recording_id,
            m.frames_recorded(),
            m.slices_durable
        )
    }
}

/// Closes every recording of `store` whose manifest says `recording` but whose recorder no
/// longer runs (see the module docs): seals the slice events the store holds of it (so
/// consumers can claim them), releases its run policy, and replaces the manifest with the same
/// counts, state `truncated`, `interrupted` and a note. Nothing is done while a recorder of
/// this process runs on the store. Safe to repeat after a crash in the middle (each step is
/// idempotent, the manifest is replaced last).
pub fn close_interrupted(store: &Store) -> Result<Vec<Closed>> {
    // Held throughout: no recorder of this process starts on the store meanwhile.
    let active = ACTIVE.lock();
    if active.contains(&key_of(store.dir())) {
        return Ok(Vec::new());
    }
    let mut closed = Vec::new();
    for id in manifest::list(store.dir())? {
        let m = match manifest::read(store.dir(), id) {
            Ok(m) => m,
            // An unreadable manifest is reported where it is read back, not here.
            Err(RecorderError::BadManifest { .. }) => continue,
            Err(e) => return Err(e),
        };
        if m.state != RecordingState::Recording {
            continue;
        }
        closed.push(close_one(store, m)?);
    }
    drop(active);
    Ok(closed)
}

fn close_one(store: &Store, mut m: Manifest) -> Result<Closed> {
    let id = m.recording_id;
    // The slice events the store holds (every key of the run), sealed: READY for consumers,
    // whatever policy applies once the run's own is gone.
    let mut slices = BTreeSet::new();
    let mut from = slice::key(id, 0, 0, 0).to_vec();
    let to = slice::key(id.wrapping_add(1), 0, 0, 0);
    let to = (id != u32::MAX).then_some(&to[..]);
    const KEYS: usize = 4096;
    loop {
        let keys = store.range_keys(&from, to, KEYS);
        for (k, _) in &keys {
            if let Some(s) = k.get(4..12) {
                let mut b = [0u8; 8];
                b.copy_from_slice(s);
                slices.insert(u64::from_be_bytes(b));
            }
        }
        match keys.last() {
            Some((k, _)) if keys.len() == KEYS => {
                from = k.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    for &s in &slices {
        match store.seal(&EventId::new(id, s), Durability::Memory) {
            Ok(())
            | Err(hotstore::Error::NoSuchEvent(_))
            | Err(hotstore::Error::EventAcknowledged(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    store.flush()?;
    // The policy before the manifest: a crash between the two leaves the manifest
    // `recording`, and the next open does both again.
    store.set_run_policy(id as u64, None)?;
    m.state = RecordingState::Truncated;
    m.interrupted = true;
    m.notes.push(format!(
        "the recorder writing this recording stopped without closing it (killed or crashed); a later open of the store closed it at {} ns: the counts are what its last manifest said was durable (the store may hold a little more)",
        crate::recorder::now_ns()
    ));
    m.updated_unix_ns = crate::recorder::now_ns();
    manifest::write(store.dir(), &m)?;
    Ok(Closed {
        manifest: m,
        slices_sealed: slices.len() as u64,
    })
}
