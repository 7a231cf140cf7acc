//! The recording manifest: what a recording is and how far it got, one JSON file per recording
//! in `<store>/recordings/rec-NNNNNN.json`, replaced atomically and durably (write a temporary
//! file, fsync it, rename it over the old one, fsync the directory) after every commit of the
//! recording's data. After a crash the manifest therefore names a point up to which every slice
//! is durable; the store may hold more (written after the last commit), never less.

use crate::error::{RecorderError, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Directory of the manifests, inside the store directory.
pub const RECORDINGS_DIR: &str = "recordings";
/// Manifest format version.
pub const MANIFEST_VERSION: u32 = 1;

/// Where a recording is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordingState {
    /// Being written (after a crash: it stopped where `slices_durable` says).
    Recording,
    /// Every frame of its window that reached the recorder is stored and durable.
    Complete,
    /// The recorder stopped before the window's end (input ended or shutdown); what is listed
    /// is stored and durable. Also a recording a recorder left `recording` when it died
    /// (killed, crashed), closed by the next open of the store (`interrupted`).
    Truncated,
    /// The window ended and not one frame of it is stored: no link sent a frame stamped
    /// inside it (links that send nothing, or a sender's clock far off this machine's), or
    /// every frame was lost (see `lossy` and `notes`). Older versions do not know this state.
    Empty,
}

/// One link's part of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkManifest {
    /// Link id.
    pub link: u16,
    /// Frames stored and durable.
    pub frames_recorded: u64,
    /// Frames of this recording's window lost and counted: refused because the DRAM bound
    /// was reached, plus `frames_discarded`.
    pub frames_dropped: u64,
    /// Of `frames_dropped`, frames that reached the ring but were not stored: the store was
    /// full when the recorder stopped, or a slice needed more than 65536 parts (see `notes`).
    /// Absent in older manifests (0).
    #[serde(default)]
    pub frames_discarded: u64,
    /// How much of the window's head (ns from the window start) this link's ring no longer
    /// held when the recording started on it: a trigger that came late, or a ring shorter than
    /// the pre-trigger window. Those frames are not stored and not in `frames_dropped` (their
    /// number is unknown); non-zero makes the recording lossy. Absent in older manifests (0).
    #[serde(default)]
    pub head_missing_ns: u64,
    /// Slices of this link stored and durable (slices 0..n).
    pub slices_durable: u64,
    /// Timestamp of the first stored frame.
    pub first_ts_ns: Option<u64>,
    /// Timestamp of the last stored frame.
    pub last_ts_ns: Option<u64>,
}

/// A recording's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Recording id; also the `run` field of its slice keys.
    pub recording_id: u32,
    /// State.
    pub state: RecordingState,
    /// True if part of the window is not stored: frames dropped or discarded
    /// (`frames_dropped`), a link's head missing (`head_missing_ns`), or a trigger's window
    /// reaching before the recording's start (`trigger_head_missing_ns`).
    pub lossy: bool,
    /// Trigger times (ns since the Unix epoch); more than one if triggers extended it.
    pub triggers_ns: Vec<u64>,
    /// Pre-trigger window, ns.
    pub pre_ns: u64,
    /// Post-trigger window, ns.
    pub post_ns: u64,
    /// Window start: the first trigger minus `pre_ns` (slice 0 starts here).
    pub start_ns: u64,
    /// Window end (exclusive): the last trigger plus `post_ns`.
    pub end_ns: u64,
    /// Slice length, ns: slice `i` holds frames stamped in
    /// `[start_ns + i * slice_ns, start_ns + (i + 1) * slice_ns)`.
    pub slice_ns: u64,
    /// Bytes per frame.
    pub frame_len: u32,
    /// Durability of the stored slices ("persisted" or "memory").
    pub durability: String,
    /// Slices durable on every link (the event-level progress).
    pub slices_durable: u64,
    /// The largest part (ns) of a trigger's window that lies before `start_ns` and in no
    /// earlier recording: a trigger that extended this recording but came later than the
    /// first one and reached further back. Not recorded. Absent in older manifests (0).
    #[serde(default)]
    pub trigger_head_missing_ns: u64,
    /// What went wrong, for people (why frames were discarded or a head is missing). Absent
    /// in older manifests (empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Links from which no frame stamped inside the window arrived (nothing stored, nothing
    /// dropped): their part of the window is not in the store, and the recording is lossy.
    /// Absent in older manifests and when every link sent (empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub silent_links: Vec<u16>,
    /// True if the recorder writing this recording stopped without closing it (killed or
    /// crashed) and a later open of the store closed it (`truncated`, with what the manifest
    /// said was durable; the store may hold more). Absent in older manifests (false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// Per-link progress.
    pub links: Vec<LinkManifest>,
    /// When the manifest was created (ns since the Unix epoch).
    pub created_unix_ns: u64,
    /// When it was last replaced.
    pub updated_unix_ns: u64,
}

impl Manifest {
    /// Total frames stored.
    pub fn frames_recorded(&self) -> u64 {
        self.links.iter().map(|l| l.frames_recorded).sum()
    }

    /// Total frames dropped (discarded ones included).
    pub fn frames_dropped(&self) -> u64 {
        self.links.iter().map(|l| l.frames_dropped).sum()
    }

    /// Total frames discarded (reached the ring, not stored).
    pub fn frames_discarded(&self) -> u64 {
        self.links.iter().map(|l| l.frames_discarded).sum()
    }

    /// The largest head missing on any link (ns), see [`LinkManifest::head_missing_ns`].
    pub fn head_missing_ns(&self) -> u64 {
        self.links
            .iter()
            .map(|l| l.head_missing_ns)
            .max()
            .unwrap_or(0)
    }
}

/// The manifests directory of a store.
pub fn dir_of(store_dir: &Path) -> PathBuf {
    store_dir.join(RECORDINGS_DIR)
}

/// Path of recording `id`'s manifest.
pub fn path_of(store_dir: &Path, id: u32) -> PathBuf {
    dir_of(store_dir).join(format!("rec-{id:06}.json"))
}

/// A file of zeros beside the manifests, given up when the file system is full so that the
/// final manifests can still be written (the store fills the device it shares with them).
pub const SPACE_RESERVE: &str = ".space-reserve";
/// Its size: hundreds of manifest writes.
const SPACE_RESERVE_BYTES: usize = 1 << 20;

/// Makes sure the manifests' space reserve exists (at a recorder's start). Best effort: a
/// file system already too full for it is not an error here.
pub fn reserve_space(store_dir: &Path) {
    let dir = dir_of(store_dir);
    let path = dir.join(SPACE_RESERVE);
    let ok = fs::metadata(&path).is_ok_and(|m| m.len() == SPACE_RESERVE_BYTES as u64);
    if !ok {
        let made = fs::create_dir_all(&dir)
            .and_then(|()| fs::write(&path, vec![0u8; SPACE_RESERVE_BYTES]))
            .and_then(|()| fs::File::open(&path)?.sync_all());
        if made.is_err() {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Writes `m` atomically and durably. On a full file system the space reserve (see
/// [`reserve_space`]) is given up and the write tried once more. Fix (full-disk campaign on
/// ext4): a recorder whose store filled the device failed its final manifest with ENOSPC, so
/// the recording stayed `recording` (and a `.tmp` file was left), where a full store closes
/// it lossy with a report.
///
/// Fix (CI, beside a busy machine, 3 runs in 100 of `tests/full_device.rs`): the space of the
/// removed reserve was not always there at once (on the 4 MiB tmpfs `df` showed it free while
/// the write failed, and a write 200 ms later succeeded; ext4 frees an unlinked file's blocks
/// only when its journal commits). The directory is synced, which commits ext4's journal, and
/// the write retried for up to `RESERVE_FREED_WAIT`.
pub fn write(store_dir: &Path, m: &Manifest) -> Result<()> {
    if m.state == RecordingState::Recording {
        return write_interim(store_dir, m).map(drop);
    }
    let dir = dir_of(store_dir);
    match write_once(store_dir, m) {
        Err(RecorderError::Io { source, .. })
            if is_full(&source) && fs::remove_file(dir.join(SPACE_RESERVE)).is_ok() =>
        {
            let _ = fs::File::open(&dir).and_then(|d| d.sync_all());
            let deadline = std::time::Instant::now() + RESERVE_FREED_WAIT;
            let mut pause = std::time::Duration::from_millis(1);
            loop {
                match write_once(store_dir, m) {
                    Err(RecorderError::Io { source, .. })
                        if is_full(&source) && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_millis(100));
                    }
                    r => return r,
                }
            }
        }
        r => r,
    }
}

/// How long a final manifest waits for the space of the removed reserve (see [`write`]).
const RESERVE_FREED_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn is_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
}

/// Writes the manifest of a recording still running: false, and the previous manifest left
/// in place, if the file system is full (it claims less, so it stays true; the next round
/// tries again). The space reserve is kept for the final manifest. Fix (review, a 200 MB
/// tmpfs): an update that failed with ENOSPC spent the reserve, and the next one stopped the
/// recorder with the recording left `recording` and no summary.
pub fn write_interim(store_dir: &Path, m: &Manifest) -> Result<bool> {
    match write_once(store_dir, m) {
        Ok(()) => Ok(true),
        Err(RecorderError::Io { source, .. }) if is_full(&source) => Ok(false),
        Err(e) => Err(e),
    }
}

fn write_once(store_dir: &Path, m: &Manifest) -> Result<()> {
    let dir = dir_of(store_dir);
    let io = |what: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |e| RecorderError::Io {
            what,
            path: p,
            source: e,
        }
    };
    fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    let path = path_of(store_dir, m.recording_id);
    let tmp = path.with_extension("json.tmp");
    let body = serde_json::to_vec_pretty(m)
        .expect("a manifest holds only strings, numbers and lists: serialising cannot fail");
    let written = fs::File::create(&tmp)
        .map_err(io("create", &tmp))
        .and_then(|mut f| {
            f.write_all(&body).map_err(io("write", &tmp))?;
            f.sync_all().map_err(io("fsync", &tmp))
        })
        .and_then(|()| fs::rename(&tmp, &path).map_err(io("rename", &path)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", &dir))?;
    Ok(())
}

/// Reads recording `id`'s manifest.
pub fn read(store_dir: &Path, id: u32) -> Result<Manifest> {
    let path = path_of(store_dir, id);
    let body = fs::read(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            RecorderError::NoRecording {
                id,
                dir: store_dir.to_path_buf(),
            }
        } else {
            RecorderError::Io {
                what: "read",
                path: path.clone(),
                source: e,
            }
        }
    })?;
    serde_json::from_slice(&body).map_err(|e| RecorderError::BadManifest {
        path,
        reason: e.to_string(),
    })
}

/// Ids of every recording with a manifest, ascending.
pub fn list(store_dir: &Path) -> Result<Vec<u32>> {
    let dir = dir_of(store_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(RecorderError::Io {
                what: "list",
                path: dir,
                source: e,
            })
        }
    };
    let mut ids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("rec-")?
                .strip_suffix(".json")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_manifest_without_the_newer_fields_still_parses() {
        let old = r#"{"version":1,"recording_id":3,"state":"complete","lossy":false,
            "triggers_ns":[5],"pre_ns":1,"post_ns":2,"start_ns":4,"end_ns":7,"slice_ns":1,
            "frame_len":64,"durability":"persisted","slices_durable":3,
            "links":[{"link":0,"frames_recorded":3,"frames_dropped":0,"slices_durable":3,
                      "first_ts_ns":4,"last_ts_ns":6}],
            "created_unix_ns":1,"updated_unix_ns":2}"#;
        let m: super::Manifest = serde_json::from_str(old).expect("an old manifest parses");
        assert_eq!(m.links[0].head_missing_ns, 0);
        assert_eq!(m.links[0].frames_discarded, 0);
        assert_eq!(m.trigger_head_missing_ns, 0);
        assert!(m.notes.is_empty());
        assert!(m.silent_links.is_empty());
        assert!(!m.interrupted);
    }
}
