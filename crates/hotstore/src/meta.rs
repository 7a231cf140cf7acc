//! The store's metadata file `hotstore.meta`: JSON, replaced atomically.
//!
//! ```json
//! {"format_version":4,"layout":"run:u32,event:u64|detector:u16,component:u16",
//!  "segment_size_bytes":67108864,"created_unix_ms":1763770000000,
//!  "tiers":[{"path":".","domain":"volatile","capacity_bytes":0,
//!            "files":[{"first_slot":0,"count":12,"len_bytes":67108864}]}]}
//! ```
//! It fixes what must not change under existing data: the format version, the key layout and
//! the segment size. Tiers list their directory, declared domain, capacity and segment files
//! (`files`: the list the store checks its directories against at open).

use crate::error::{Error, Result};
use crate::files::FileRun;
use crate::medium::{Domain, Medium};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Name of the metadata file.
pub const META_FILE: &str = "hotstore.meta";
/// Store format version this build writes; it reads every version from 1 up to it.
/// 2: record headers may carry the persisted flag (`record::PERSISTED_FLAG`) and segment
/// headers the boot they were started in. 3: record headers may carry the synced-before flag
/// (`record::SYNCED_BEFORE_FLAG`), and a gap after a reboot is cut unless a record with it
/// follows (`recovery::Gaps`). 4: record headers may carry the synced-to-previous flag
/// (`record::SYNCED_TO_PREVIOUS_FLAG`), which a build of format 3 would take for an unknown
/// record kind. An older store takes the current format at its first open, once recovery has
/// accepted it.
pub const FORMAT_VERSION: u32 = 4;

/// A tier as recorded in the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierMeta {
    /// Directory (relative to the store directory, or absolute).
    pub path: String,
    /// Declared persistence domain.
    pub domain: Domain,
    /// Capacity in bytes, 0 = as much as the file system has.
    pub capacity_bytes: u64,
    /// The tier's segment files (see `files`); absent in stores written before the list
    /// existed, which get one built from the files present at their next open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<FileRun>>,
}

/// The metadata file's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Store format version.
    pub format_version: u32,
    /// Key layout in its text form.
    pub layout: String,
    /// Segment size.
    pub segment_size_bytes: u64,
    /// Creation time.
    pub created_unix_ms: u64,
    /// Tiers in order.
    pub tiers: Vec<TierMeta>,
}

impl Meta {
    /// Reads the metadata from `medium`; `None` if there is no store.
    pub fn load(medium: &dyn Medium) -> Result<Option<Meta>> {
        let path = medium.path().join(META_FILE);
        let Some(bytes) = medium.read_file(META_FILE)? else {
            return Ok(None);
        };
        let meta: Meta = serde_json::from_slice(&bytes).map_err(|e| Error::BadMetadata {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if !(1..=FORMAT_VERSION).contains(&meta.format_version) {
            return Err(Error::FormatVersion {
                path,
                found: meta.format_version,
                supported: FORMAT_VERSION,
            });
        }
        // Fix (found in review): a damaged file with no tiers, or a segment size of 0,
        // panicked (an index out of bounds, a division by zero) instead of being refused.
        let size = meta.segment_size_bytes;
        let reason = if meta.tiers.is_empty() {
            Some("it lists no tier".to_string())
        } else if !(crate::MIN_SEGMENT_SIZE as u64..=crate::MAX_SEGMENT_SIZE as u64).contains(&size)
            || !size.is_multiple_of(4096)
        {
            Some(format!(
                "segment_size_bytes {size} is not a multiple of 4096 from {} to {}",
                crate::MIN_SEGMENT_SIZE,
                crate::MAX_SEGMENT_SIZE
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::BadMetadata { path, reason });
        }
        Ok(Some(meta))
    }

    /// Writes the metadata to `medium` atomically and durably.
    pub fn store(&self, medium: &dyn Medium) -> Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::BadMetadata {
            path: medium.path().join(META_FILE),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        medium.write_file(META_FILE, &bytes)
    }
}

/// Checks `dir` before anything touches the disk: it must not be a file, and unless
/// `create_if_missing` it must be an existing directory holding [`META_FILE`].
///
/// Opening creates the directory, a LOCK file and probe files (`FileMedium::new`, `lock`)
/// before the metadata is read, so a caller that must not create a store (the read-only
/// `inspect`, `dump`, `verify`) would otherwise leave them at a mistyped path. The check is
/// here, in the engine where the files get created, rather than in each command: it then
/// covers every such caller, library users included (`Store::open` with
/// `create_if_missing(false)`, `verify_dir`), with one typed error per case. A race with another
/// process removing the store in between only means the later open fails as before.
pub(crate) fn check_store_dir(dir: &Path, create_if_missing: bool) -> Result<()> {
    use std::io::ErrorKind::NotFound;
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(Error::NotADirectory(dir.to_path_buf())),
        Ok(_) if create_if_missing => Ok(()),
        Ok(_) => match std::fs::metadata(dir.join(META_FILE)) {
            Err(e) if e.kind() == NotFound => {
                // Segment files without metadata: a store that lost its `hotstore.meta`.
                let medium = crate::medium::FileMedium::new(dir, Domain::Volatile)?;
                match count_segment_files(&medium)? {
                    0 => Err(Error::NoStore(dir.to_path_buf())),
                    n => Err(Error::MissingMeta {
                        dir: dir.to_path_buf(),
                        segment_files: n,
                    }),
                }
            }
            // Present, or unreadable: `Meta::load` reads it and reports what is wrong.
            _ => Ok(()),
        },
        // Creating the directory later either succeeds or says why it cannot.
        Err(_) if create_if_missing => Ok(()),
        Err(e) if e.kind() == NotFound => Err(Error::NoStoreDirectory(dir.to_path_buf())),
        Err(e) => Err(Error::io("open store directory", dir, e)),
    }
}

/// Segment files (`seg-NNNNNN.hss`) in `medium`'s directory.
pub(crate) fn count_segment_files(medium: &dyn Medium) -> Result<usize> {
    Ok(medium
        .list()?
        .iter()
        .filter(|n| crate::segment::parse_file_name(n).is_some())
        .count())
}
