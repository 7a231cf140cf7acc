//! Reply encoder for RESP2 and RESP3 (chosen per connection by `HELLO`).
//!
//! RESP3 types that RESP2 lacks are written the way Redis writes them to RESP2 clients: maps
//! as flat arrays of name, value; nulls as `$-1`; booleans as integers; doubles as bulk text.

use std::io::Write;

/// Appends replies to a connection's output buffer.
pub struct Reply<'a> {
    out: &'a mut Vec<u8>,
    resp3: bool,
    /// The kind of each error written (for the metrics), also those inside arrays.
    errors: Vec<&'static str>,
}

impl<'a> Reply<'a> {
    /// A writer on `out` speaking RESP3 if `resp3`, else RESP2.
    pub fn new(out: &'a mut Vec<u8>, resp3: bool) -> Self {
        Reply {
            out,
            resp3,
            errors: Vec::new(),
        }
    }

    /// Switches protocol (HELLO answers in the protocol it selects).
    pub fn set_resp3(&mut self, resp3: bool) {
        self.resp3 = resp3;
    }

    /// True when the connection speaks RESP3.
    pub fn is_resp3(&self) -> bool {
        self.resp3
    }

    fn header(&mut self, tag: u8, n: i64) {
        self.out.push(tag);
        let b = itoa_buf(n);
        self.out.extend_from_slice(b.digits());
        self.out.extend_from_slice(b"\r\n");
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }

    /// A simple string (must not contain CR or LF).
    pub fn simple(&mut self, s: &str) {
        self.out.push(b'+');
        self.out.extend_from_slice(s.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// An error; `msg` starts with its code (`ERR ...`, `NOAUTH ...`). Line breaks in the
    /// message are replaced by spaces, as Redis does.
    pub fn error(&mut self, msg: &str) {
        self.error_bytes(msg.as_bytes());
    }

    /// The kinds of the errors written so far (see `error::error_kind`), taken.
    pub fn take_errors(&mut self) -> Vec<&'static str> {
        std::mem::take(&mut self.errors)
    }

    /// An error whose text need not be UTF-8 (`got '\xff'` in a protocol error).
    pub fn error_bytes(&mut self, msg: &[u8]) {
        self.errors.push(crate::error::error_kind(
            std::str::from_utf8(msg).unwrap_or("ERR"),
        ));
        self.out.push(b'-');
        self.out.extend(
            msg.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.out.extend_from_slice(b"\r\n");
    }

    /// An integer.
    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }

    /// An unsigned integer: an integer up to `i64::MAX`; above it (RESP integers are signed),
    /// a big number in RESP3 and its decimal digits as a bulk string in RESP2.
    pub fn uint(&mut self, n: u64) {
        match i64::try_from(n) {
            Ok(n) => self.int(n),
            Err(_) if self.resp3 => {
                self.out.push(b'(');
                self.out.extend_from_slice(n.to_string().as_bytes());
                self.out.extend_from_slice(b"\r\n");
            }
            Err(_) => self.bulk(n.to_string().as_bytes()),
        }
    }

    /// A bulk string.
    pub fn bulk(&mut self, data: &[u8]) {
        self.header(b'$', data.len() as i64);
        self.out.extend_from_slice(data);
        self.out.extend_from_slice(b"\r\n");
    }

    /// A bulk string of `len` bytes written by `fill` straight into the output buffer (one
    /// copy from the store to the socket buffer).
    pub fn bulk_with(&mut self, len: usize, fill: impl FnOnce(&mut Vec<u8>)) {
        self.header(b'$', len as i64);
        let before = self.out.len();
        fill(self.out);
        debug_assert_eq!(self.out.len() - before, len);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Bytes already encoded as replies (by another `Reply` of the same protocol).
    pub fn raw(&mut self, encoded: &[u8]) {
        self.out.extend_from_slice(encoded);
    }

    /// A null (a missing key).
    pub fn null(&mut self) {
        if self.resp3 {
            self.out.extend_from_slice(b"_\r\n");
        } else {
            self.out.extend_from_slice(b"$-1\r\n");
        }
    }

    /// An array of `n` elements (written next).
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// A map of `n` pairs (written next as name, value, ...).
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'%', n as i64);
        } else {
            self.header(b'*', 2 * n as i64);
        }
    }

    /// A set of `n` elements (an array in RESP2).
    pub fn set(&mut self, n: usize) {
        self.header(if self.resp3 { b'~' } else { b'*' }, n as i64);
    }

    /// A boolean (integer 0 or 1 in RESP2).
    pub fn boolean(&mut self, b: bool) {
        if self.resp3 {
            self.out
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(b as i64);
        }
    }

    /// A floating-point number (bulk text in RESP2).
    pub fn double(&mut self, v: f64) {
        if self.resp3 {
            self.out.push(b',');
            let _ = write!(self.out, "{v}");
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(v.to_string().as_bytes());
        }
    }

    /// Bulk text (a verbatim string in RESP3, as Redis sends INFO).
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.header(b'=', text.len() as i64 + 4);
            self.out.extend_from_slice(b"txt:");
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }
}

/// Decimal digits of `n` without allocating.
struct ItoaBuf {
    buf: [u8; 20],
    start: usize,
}

impl ItoaBuf {
    fn digits(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_buf(n: i64) -> ItoaBuf {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    ItoaBuf { buf, start: i }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_both_protocols() {
        let mut out = Vec::new();
        let mut r = Reply::new(&mut out, false);
        r.map(1);
        r.bulk(b"k");
        r.int(-42);
        r.null();
        r.boolean(true);
        assert_eq!(out, b"*2\r\n$1\r\nk\r\n:-42\r\n$-1\r\n:1\r\n");
        let mut out = Vec::new();
        let mut r = Reply::new(&mut out, true);
        r.map(1);
        r.simple("a");
        r.int(i64::MIN);
        r.null();
        r.boolean(false);
        r.error("ERR x\r\ny");
        assert_eq!(
            out,
            b"%1\r\n+a\r\n:-9223372036854775808\r\n_\r\n#f\r\n-ERR x  y\r\n".to_vec()
        );
    }
}
