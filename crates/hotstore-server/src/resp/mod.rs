//! The Redis serialization protocol: request parsing and reply encoding.

pub mod parse;
pub mod reply;

pub use parse::{fuzz_check, parse_request, Limits, Parsed, ProtocolError};
pub use reply::Reply;
