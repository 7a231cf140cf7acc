//! The Redis serialization protocol: request parsing and reply encoding.

pub mod parse;
pub mod reply;

pub use parse::{fuzz_check, parse_request, Limits, Parsed, ProtocolError, FREE_ARGS};
pub use reply::Reply;

/// Encodes a request as clients send it: an array of bulk strings (for tests and tools that
/// speak to the server over a raw socket).
pub fn encode_request(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}
