//! Typed errors of the engine. Each message says what happened and, where there is one, what to do.

use std::path::PathBuf;

/// Result alias used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the engine can report. Never a panic for anything a caller or a disk can cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("{op} failed on {path}: {source}")]
    Io {
        /// What was being done (e.g. "fallocate", "msync").
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A record's checksum does not match its bytes.
    #[error("checksum mismatch in {file} at offset {offset}: the record is damaged; run `hotstore verify`, or open with RecoveryMode::Salvage to keep every intact record")]
    ChecksumMismatch {
        /// Segment file.
        file: PathBuf,
        /// Byte offset of the damaged record.
        offset: u64,
    },
    /// Damage found during recovery that is not a torn tail.
    #[error("corruption in {file} at offset {offset}: {reason}; intact records follow it, so this is not a torn tail. Open with RecoveryMode::Salvage to keep every intact record and skip the damage")]
    Corruption {
        /// Segment or metadata file.
        file: PathBuf,
        /// Byte offset of the first damaged byte range.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// Segment files the store lists in its metadata are gone (deleted or moved while the
    /// store was closed): the records in them are lost. Nothing was changed.
    #[error("{n} segment file(s) of the store are missing from {tier_dir}: {list}. The store's list of its files (hotstore.meta) names them, so they were deleted or moved while it was closed: the records in them are lost, and keys they removed could come back. Put them back, or open with RecoveryMode::Salvage to open without them (they are then reported in RecoveryReport::missing_files and dropped from the list)", n = .files.len(), list = .files.join(", "))]
    MissingFiles {
        /// The tier's directory.
        tier_dir: PathBuf,
        /// Names of the missing files.
        files: Vec<String>,
    },
    /// The metadata file is gone but segment files are there: a store that lost its
    /// `hotstore.meta`. Nothing was created.
    #[error("no {meta} in {dir}, but {segment_files} segment file(s) are there: the store's metadata was deleted. It is not re-created on its own (the options given may not match the files); restore it, or open with RecoveryMode::Salvage and create_if_missing, giving the store's original layout, segment size and tiers, to re-create it and keep every intact record", meta = crate::meta::META_FILE)]
    MissingMeta {
        /// Store directory.
        dir: PathBuf,
        /// Segment files found beside the missing metadata.
        segment_files: usize,
    },
    /// No tier has room for the write; nothing stored was touched. Dead space was recycled
    /// and relocated first: what is left is live data and the reserve.
    #[error("store full: a write of {needed_bytes} bytes needs a new file of {file_bytes} bytes and no tier has room (capacity {capacity_bytes} bytes over all tiers: {live_bytes} live, {dead_bytes} dead that could not be freed yet, {reserve_bytes} reserved for removals and relocation{device}); remove or acknowledge data, or raise the tier capacity")]
    StoreFull {
        /// Bytes the write needed (record size).
        needed_bytes: u64,
        /// Bytes of the file it needed (a standard segment, or a file of its own).
        file_bytes: u64,
        /// Bytes of live records over all tiers.
        live_bytes: u64,
        /// Bytes of dead records not freed.
        dead_bytes: u64,
        /// Bytes puts leave free: removals and relocation use them.
        reserve_bytes: u64,
        /// Sum of tier capacities.
        capacity_bytes: u64,
        /// Empty, or what a full file system under a tier has left and what to do (starts
        /// with `; `).
        device: String,
    },
    /// Key longer than [`crate::MAX_KEY_LEN`].
    #[error("key of {len} bytes is longer than the maximum of {max} bytes")]
    KeyTooLarge {
        /// Given length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// Empty keys are not allowed.
    #[error("empty key: keys must be 1 byte or longer")]
    EmptyKey,
    /// Value longer than [`crate::MAX_VALUE_LEN`].
    #[error("value of {len} bytes is longer than the maximum of {max} bytes")]
    ValueTooLarge {
        /// Given length.
        len: u64,
        /// Limit.
        max: u64,
    },
    /// The store was created with another key layout.
    #[error("key layout mismatch: the store at {path} uses layout `{stored}`, the caller asked for `{requested}`; open it with the stored layout (or omit the layout to use it)")]
    LayoutMismatch {
        /// Store directory.
        path: PathBuf,
        /// Layout in the metadata.
        stored: String,
        /// Layout given by the caller.
        requested: String,
    },
    /// A file has a format version this build cannot read.
    #[error(
        "{path} has format version {found}; this build reads versions 1 to {supported} \
         (written by a newer hotstore, which can open it, or damaged)"
    )]
    FormatVersion {
        /// File.
        path: PathBuf,
        /// Version found.
        found: u32,
        /// Version supported.
        supported: u32,
    },
    /// The metadata file is missing or unreadable.
    #[error("bad store metadata in {path}: {reason}")]
    BadMetadata {
        /// Metadata file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The directory exists but holds no store (no metadata file) and `create_if_missing` is
    /// off.
    #[error("no store at {0} (no {meta})", meta = crate::meta::META_FILE)]
    NoStore(PathBuf),
    /// The store directory does not exist and `create_if_missing` is off; nothing was created.
    #[error("no store at {0}: the directory does not exist")]
    NoStoreDirectory(PathBuf),
    /// The store path names a file (or anything else that is not a directory).
    #[error("{0} is a file, not a store directory")]
    NotADirectory(PathBuf),
    /// Another process holds the store open.
    #[error(
        "store at {0} is open in another process{1} (lock held on its LOCK file): stop that \
         process or use another directory (`hotstore verify` reads a store open elsewhere)"
    )]
    Locked(PathBuf, String),
    /// An option is out of its documented bounds.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// Option name.
        name: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// A key layout description could not be parsed.
    #[error("invalid key layout `{spec}`: {reason}")]
    InvalidLayout {
        /// The text given.
        spec: String,
        /// Why.
        reason: String,
    },
    /// A persist (fdatasync or cache-line flush) failed earlier; the store refuses writes because the
    /// state of the page cache is unknown after a failed sync.
    #[error("store is read-only after a failed persist ({0}); reopen it to recover what is on the device")]
    Poisoned(String),
    /// A fragment arrived for an event that was already acknowledged (removed or kept); it
    /// was not stored, and is counted in `stats().events.late_fragments_total`.
    #[error("late fragment {key} for event {event}, which was already acknowledged: not stored (an acknowledged event is never merged with new fragments; use a new event number)")]
    LateFragment {
        /// The event.
        event: String,
        /// The fragment key (hex).
        key: String,
    },
    /// A claim is no longer held: its lease expired or it was released (the event is offered
    /// again). An event already acknowledged answers [`Error::EventAcknowledged`] instead.
    #[error("the claim {token} on event {event} is no longer held (lease expired or released): the event is offered again, maybe to another consumer; claim again with next_event")]
    ClaimLost {
        /// The event.
        event: String,
        /// The claim token.
        token: String,
    },
    /// No event with this id holds fragments.
    #[error("no event {0} in the store (no fragment stored under its prefix)")]
    NoSuchEvent(String),
    /// The event was acknowledged and can no longer change state this way.
    #[error("event {0} was already acknowledged")]
    EventAcknowledged(String),
    /// No consumer group has this name.
    #[error("no consumer group `{0}` (create it first: Store::create_group, EVENT.GROUP CREATE)")]
    NoSuchGroup(String),
    /// A reservation was committed with a different length than reserved, or similar misuse.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// Wraps an I/O error with the operation and path it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True if this is a [`Error::StoreFull`].
    pub fn is_full(&self) -> bool {
        matches!(self, Error::StoreFull { .. })
    }
}
