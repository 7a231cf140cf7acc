//! The error of every benchmark: a message for the user, the engine's error, or a failed write
//! of the output a benchmark streams while it runs.

/// Why a benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A message for the user (the command line prints it as `error: <message>`).
    #[error("{0}")]
    Msg(String),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] hotstore::Error),
    /// Writing the progress lines a benchmark streams failed (the reader of stdout went away:
    /// `ErrorKind::BrokenPipe`).
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
}

/// Result of a benchmark.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An [`Error::Msg`].
pub fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::Msg(msg.into()))
}
