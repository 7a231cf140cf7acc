//! Server errors (starting and stopping), and the error codes replies carry.

use hotstore::Error as StoreError;

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A setting is invalid.
    #[error("configuration: {what}")]
    Config {
        /// What is wrong and how to fix it.
        what: String,
    },
    /// The store could not be opened or closed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A socket could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// The reply error (code first, as in Redis) for a store error.
pub fn reply_error(e: &StoreError) -> String {
    if let StoreError::ClaimLost { event, token } = e {
        // The library's message names `next_event`; a client of the server needs the command,
        // and the rule that most often explains it: a claim lives as long as its connection.
        return format!(
            "CLAIMLOST the claim {token} on event {event} is no longer held (lease expired, \
             released, already acknowledged, or the connection that claimed it closed: a claim \
             lives as long as its connection); claim again with EVENT.NEXT"
        );
    }
    let code = match e {
        StoreError::StoreFull { .. } => "FULL",
        StoreError::LateFragment { .. } => "LATE",
        StoreError::ClaimLost { .. } => "CLAIMLOST",
        StoreError::NoSuchEvent(_) => "NOEVENT",
        StoreError::EventAcknowledged(_) => "ACKED",
        StoreError::NoSuchGroup(_) => "NOGROUP",
        StoreError::Io { .. }
        | StoreError::Poisoned(_)
        | StoreError::ChecksumMismatch { .. }
        | StoreError::Corruption { .. } => "IOERR",
        _ => "ERR",
    };
    format!("{code} {e}")
}

/// A short label for the metrics' error counter.
pub fn error_kind(reply: &str) -> &'static str {
    match reply.split(' ').next().unwrap_or("") {
        "FULL" => "full",
        "LATE" => "late",
        "CLAIMLOST" => "claimlost",
        "NOEVENT" => "noevent",
        "ACKED" => "acked",
        "NOGROUP" => "nogroup",
        "IOERR" => "io",
        "NOAUTH" | "WRONGPASS" => "auth",
        "MOVED" | "CROSSSLOT" => "cluster",
        _ => "request",
    }
}
