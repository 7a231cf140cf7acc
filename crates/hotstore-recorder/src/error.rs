//! The recorder's typed errors.

use std::path::PathBuf;

/// What went wrong in the recorder.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The store refused a write or a read.
    #[error(transparent)]
    Store(#[from] hotstore::Error),
    /// A file operation on a manifest or an export failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A socket operation failed.
    #[error("{what} {addr}: {source}")]
    Net {
        /// The operation.
        what: &'static str,
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid recorder setting {name}: {reason}")]
    Config {
        /// The setting.
        name: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A pushed frame does not fit the recorder.
    #[error("frame for link {link}: {reason}")]
    BadFrame {
        /// The link.
        link: u16,
        /// What is wrong.
        reason: String,
    },
    /// No manifest for that recording.
    #[error("no recording {id} in {}: `hotstore record verify {}` lists the recordings", dir.display(), dir.display())]
    NoRecording {
        /// The id asked for.
        id: u32,
        /// The store directory.
        dir: PathBuf,
    },
    /// A manifest does not parse.
    #[error("manifest {}: {reason}", path.display())]
    BadManifest {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An export does not fit: the output's file system has less free space than the frames
    /// alone need (checked before writing; a file system that fills up during the export gives
    /// [`RecorderError::Io`] with the OS error instead).
    #[error("export to {}: needs at least {need} bytes for the frames, the file system has {free} free (free space or choose another --out)", path.display())]
    NoSpace {
        /// The output directory.
        path: PathBuf,
        /// Bytes the frames and their timestamps take (a lower bound of the file's size).
        need: u64,
        /// Bytes free for this user.
        free: u64,
    },
    /// The HDF5 library refused an operation of an export (its error stack's description).
    #[error("HDF5 export: {what} {}: {reason}", path.display())]
    Hdf5 {
        /// The operation.
        what: String,
        /// The file being written.
        path: PathBuf,
        /// The library's description.
        reason: String,
    },
    /// A trigger stamped further in the future than
    /// [`MAX_TRIGGER_AHEAD`](crate::recorder::MAX_TRIGGER_AHEAD) (a mistyped time, or a clock
    /// that is wrong): accepted, it would make every later trigger extend a recording whose
    /// window does not start for a long time, and record nothing of theirs.
    #[error("trigger time {ts_ns} is {:.3} s in the future; at most {:.0} s ahead is accepted (the time is ns since the Unix epoch; omit it to trigger now)", *ahead_ns as f64 / 1e9, *max_ns as f64 / 1e9)]
    TriggerTooFarAhead {
        /// The trigger time asked for (ns since the Unix epoch).
        ts_ns: u64,
        /// How far ahead of the recorder's clock it is.
        ahead_ns: u64,
        /// The most accepted.
        max_ns: u64,
    },
    /// The recorder has stopped (a writer failed or it was shut down).
    #[error("the recorder has stopped: {0}")]
    Stopped(String),
}

/// Result of recorder operations.
pub type Result<T> = std::result::Result<T, RecorderError>;
