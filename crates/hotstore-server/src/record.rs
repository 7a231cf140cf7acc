//! The hook through which `RECORD.TRIGGER` and `RECORD.STATUS` reach a recorder running in
//! the same process (`hotstore record --serve-port`). The server does not depend on the
//! recorder crate: the recorder's command line implements this trait.

/// What the server needs from a recorder.
pub trait RecordControl: Send + Sync {
    /// Triggers a recording at `at_unix_ns` (now if None); returns the recording id and
    /// whether the trigger extended a recording in progress.
    fn trigger(&self, at_unix_ns: Option<u64>) -> Result<(u32, bool), String>;
    /// Counters for `RECORD.STATUS`, as name and value.
    fn status(&self) -> Vec<(&'static str, i64)>;
}
