//! The client's error type: one variant per error code of the server, plus connection and
//! protocol failures.

use redis::{ErrorKind, RedisError};

/// Result of client calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong. Server replies map by their error code (see `docs/protocol.md`); each
/// variant keeps the server's message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `-FULL`: the store is full. Consume (ack) events or free space, then retry.
    #[error("store full: {0}")]
    Full(String),
    /// `-LATE`: a fragment for an event already acknowledged. Drop it.
    #[error("late fragment: {0}")]
    Late(String),
    /// `-CLAIMLOST`: the claim's lease expired or it was released; the event is offered
    /// again. Do not ack.
    #[error("claim lost: {0}")]
    ClaimLost(String),
    /// `-NOEVENT`: no such event.
    #[error("no such event: {0}")]
    NoEvent(String),
    /// `-ACKED`: the event was already acknowledged.
    #[error("event already acknowledged: {0}")]
    Acked(String),
    /// `-NOGROUP`: no consumer group has this name.
    #[error("no such consumer group: {0}")]
    NoGroup(String),
    /// `-NOAUTH`: the server wants a password and this connection has not authenticated.
    #[error("authentication required: {0}")]
    NoAuth(String),
    /// `-WRONGPASS`: wrong password (also a failed authentication while connecting).
    #[error("wrong password: {0}")]
    WrongPass(String),
    /// `-IOERR`: the store failed and is read-only.
    #[error("store I/O error: {0}")]
    StoreIo(String),
    /// `-ERR`: bad arguments, unknown command, unsupported option.
    #[error("request refused: {0}")]
    Request(String),
    /// An error reply with another code.
    #[error("server error {code}: {message}")]
    Server {
        /// The error code (first word of the reply).
        code: String,
        /// The rest of the reply.
        message: String,
    },
    /// The connection failed, closed or timed out (the client should be reconnected), or
    /// could not be made.
    #[error("connection: {0}")]
    Connection(#[source] RedisError),
    /// A reply that does not have the shape the protocol specifies.
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// A bad argument caught before sending (e.g. a malformed URL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `-MOVED slot host:port`: a cluster node that does not serve the slot of the request
    /// names the one that does. [`crate::ClusterClient`] follows it; a plain [`crate::Client`]
    /// connected to one node reports it.
    #[error("slot {slot} is served by {addr} (MOVED)")]
    Moved {
        /// The request's hash slot.
        slot: u16,
        /// `host:port` of the node serving it.
        addr: String,
    },
    /// A cluster node could not be reached or its connection failed: the requests for its
    /// slots fail until it is back (the other nodes keep working).
    #[error("cluster node {node} (slots {slots}) is unreachable: {reason}")]
    NodeDown {
        /// `host:port` of the node.
        node: String,
        /// The slot ranges it serves, e.g. `0-5460`.
        slots: String,
        /// Why: the connection error.
        reason: String,
    },
    /// A seed address of a cluster client is not a node of a cluster (`CLUSTER SLOTS` was
    /// refused or unreadable), or no seed answered.
    #[error("{node} is not a usable cluster node: {message}")]
    NotCluster {
        /// `host:port` of the seed.
        node: String,
        /// What it answered.
        message: String,
    },
    /// A request was redirected (`MOVED`) again after refreshing the map, more times than
    /// allowed: the nodes' maps disagree (started with different map files?).
    #[error(
        "slot {slot}: still redirected after {tries} tries (last: MOVED to {last}); the nodes \
         disagree about the cluster map: start them all with the same map file"
    )]
    Redirects {
        /// The request's hash slot.
        slot: u16,
        /// Requests sent.
        tries: usize,
        /// The last node it was sent to.
        last: String,
    },
}

impl Error {
    /// The error for a server reply with `code` and `message`.
    pub fn from_server_reply(code: &str, message: &str) -> Error {
        let m = message.to_string();
        match code {
            "FULL" => Error::Full(m),
            "LATE" => Error::Late(m),
            "CLAIMLOST" => Error::ClaimLost(m),
            "NOEVENT" => Error::NoEvent(m),
            "ACKED" => Error::Acked(m),
            "NOGROUP" => Error::NoGroup(m),
            "NOAUTH" => Error::NoAuth(m),
            "WRONGPASS" => Error::WrongPass(m),
            "IOERR" => Error::StoreIo(m),
            "ERR" => Error::Request(m),
            "MOVED" => match parse_moved(message) {
                Some((slot, addr)) => Error::Moved { slot, addr },
                None => Error::Server {
                    code: code.to_string(),
                    message: m,
                },
            },
            _ => Error::Server {
                code: code.to_string(),
                message: m,
            },
        }
    }

    /// The server's error code (`FULL`, `LATE`, ...) if this is an error reply.
    pub fn code(&self) -> Option<&str> {
        Some(match self {
            Error::Full(_) => "FULL",
            Error::Late(_) => "LATE",
            Error::ClaimLost(_) => "CLAIMLOST",
            Error::NoEvent(_) => "NOEVENT",
            Error::Acked(_) => "ACKED",
            Error::NoGroup(_) => "NOGROUP",
            Error::NoAuth(_) => "NOAUTH",
            Error::WrongPass(_) => "WRONGPASS",
            Error::StoreIo(_) => "IOERR",
            Error::Request(_) => "ERR",
            Error::Server { code, .. } => code,
            Error::Moved { .. } => "MOVED",
            Error::Connection(_)
            | Error::Protocol(_)
            | Error::InvalidArgument(_)
            | Error::NodeDown { .. }
            | Error::NotCluster { .. }
            | Error::Redirects { .. } => return None,
        })
    }

    /// True for a failed connection: the client is unusable and should be reconnected. Error
    /// replies leave the connection usable.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection(_))
    }

    /// True for a connection that timed out waiting for a reply.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Connection(e) if e.is_timeout())
    }

    /// True if a cluster node could not be reached ([`Error::NodeDown`]).
    pub fn is_node_down(&self) -> bool {
        matches!(self, Error::NodeDown { .. })
    }

    /// The message of an error reply (the text after its code), if this is one.
    fn reply_message(&self) -> Option<&str> {
        match self {
            Error::Full(m)
            | Error::Late(m)
            | Error::ClaimLost(m)
            | Error::NoEvent(m)
            | Error::Acked(m)
            | Error::NoGroup(m)
            | Error::NoAuth(m)
            | Error::WrongPass(m)
            | Error::StoreIo(m)
            | Error::Request(m)
            | Error::Server { message: m, .. } => Some(m),
            _ => None,
        }
    }

    /// This error as a cluster client reports it for node `addr`: an error reply keeps its
    /// type and names the node in its message; other errors are unchanged.
    pub(crate) fn on_node(self, addr: &str) -> Error {
        match (self.code(), self.reply_message()) {
            (Some(code), Some(message)) => {
                Error::from_server_reply(code, &format!("node {addr}: {message}"))
            }
            _ => self,
        }
    }

    /// A copy of this error, for a failure shared by several results (a refused batch): the
    /// same type and text; a connection error, which cannot be copied, becomes
    /// [`Error::Protocol`] with its text.
    pub(crate) fn duplicate(&self) -> Error {
        if let (Some(code), Some(message)) = (self.code(), self.reply_message()) {
            return Error::from_server_reply(code, message);
        }
        match self {
            Error::Moved { slot, addr } => Error::Moved {
                slot: *slot,
                addr: addr.clone(),
            },
            Error::NodeDown {
                node,
                slots,
                reason,
            } => Error::NodeDown {
                node: node.clone(),
                slots: slots.clone(),
                reason: reason.clone(),
            },
            Error::NotCluster { node, message } => Error::NotCluster {
                node: node.clone(),
                message: message.clone(),
            },
            Error::Redirects { slot, tries, last } => Error::Redirects {
                slot: *slot,
                tries: *tries,
                last: last.clone(),
            },
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            other => Error::Protocol(other.to_string()),
        }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol(what.into())
    }
}

/// `slot host:port` of a MOVED reply.
fn parse_moved(message: &str) -> Option<(u16, String)> {
    let mut words = message.split_ascii_whitespace();
    let slot = words.next()?.parse().ok()?;
    let addr = words.next()?.to_string();
    Some((slot, addr))
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Error {
        if e.kind() == ErrorKind::AuthenticationFailed {
            return Error::WrongPass(e.to_string());
        }
        if e.kind() == ErrorKind::InvalidClientConfig {
            return Error::InvalidArgument(e.to_string());
        }
        if let Some(code) = e.code() {
            return Error::from_server_reply(code, e.detail().unwrap_or(""));
        }
        match e.kind() {
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::Protocol(e.to_string()),
            _ => Error::Connection(e),
        }
    }
}

impl From<redis::ServerError> for Error {
    fn from(e: redis::ServerError) -> Error {
        Error::from_server_reply(e.code(), e.details().unwrap_or(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every typed error reply survives `on_node` and `duplicate` with its type (a cluster
    /// consumer's rounds and batched acks report node errors through them).
    #[test]
    fn node_errors_keep_their_type() {
        for code in [
            "FULL",
            "LATE",
            "CLAIMLOST",
            "NOEVENT",
            "ACKED",
            "NOGROUP",
            "NOAUTH",
            "WRONGPASS",
            "IOERR",
            "ERR",
            "BUSY",
        ] {
            let e = Error::from_server_reply(code, "why").on_node("10.0.0.1:7001");
            assert_eq!(e.code(), Some(code));
            assert!(e.to_string().contains("node 10.0.0.1:7001: why"), "{e}");
            let d = e.duplicate();
            assert_eq!(d.code(), Some(code));
            assert_eq!(d.to_string(), e.to_string());
        }
        let moved = Error::from_server_reply("MOVED", "12 10.0.0.2:7001").on_node("x");
        assert!(matches!(moved.duplicate(), Error::Moved { slot: 12, .. }));
        let down = Error::NodeDown {
            node: "a".into(),
            slots: "0-5".into(),
            reason: "gone".into(),
        };
        assert_eq!(down.duplicate().to_string(), down.to_string());
        assert!(down.on_node("a").is_node_down());
    }
}
