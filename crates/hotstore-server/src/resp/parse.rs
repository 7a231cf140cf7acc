//! Request parser: RESP arrays of bulk strings (what every client sends) and inline commands
//! (what a person types into telnet).
//!
//! Written here rather than taken from a codec crate because the server needs three things at
//! once: arguments as ranges into the read buffer (values are copied once, from the socket
//! buffer into the store), limits checked from the *declared* lengths before anything is
//! buffered, and a size hint so a large value is read into a buffer allocated once.
//! Error texts follow Redis (`networking.c`), which clients and tests match on.

use std::borrow::Cow;
use std::ops::Range;

/// Limits on one request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest bulk string (one argument).
    pub max_bulk: usize,
    /// Most arguments in one request.
    pub max_args: usize,
    /// Longest inline command line.
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: hotstore::MAX_VALUE_LEN as usize,
            max_args: 1024 * 1024,
            max_inline: 64 * 1024,
        }
    }
}

/// What the buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// One whole request; its arguments are in the `args` vector (empty for an empty line or
    /// `*0`, which Redis skips without a reply).
    Request {
        /// Bytes of the buffer the request takes.
        consumed: usize,
    },
    /// Not all of it yet.
    Incomplete {
        /// Bytes the request needs at least in total (a hint for sizing the buffer; 0 if
        /// unknown).
        need: usize,
    },
}

/// Malformed input: the connection gets `-ERR Protocol error: <text>` and is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub Cow<'static, str>);

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buf.len() {
        let nl = i + buf[i..].iter().position(|&b| b == b'\n')?;
        if nl > from && buf[nl - 1] == b'\r' {
            return Some(nl - 1);
        }
        i = nl + 1;
    }
    None
}

/// Parses a decimal integer the way Redis's `string2ll` does (no sign for counts, no spaces).
fn parse_len(digits: &[u8]) -> Option<i64> {
    let (neg, d) = match digits.first() {
        Some(b'-') => (true, &digits[1..]),
        _ => (false, digits),
    };
    if d.is_empty() || d.len() > 18 || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = d
        .iter()
        .fold(0i64, |acc, &c| acc * 10 + i64::from(c - b'0'));
    Some(if neg { -v } else { v })
}

/// Parses one request from the start of `buf`, filling `args` with ranges of `buf`.
///
/// `resume`: the previous call was on the same request (the buffer has only grown since) and
/// returned `Incomplete`; the arguments it completed are kept in `args` and parsing goes on
/// after them, so a request arriving in many pieces is parsed once, not once per piece.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
    resume: bool,
) -> Result<Parsed, ProtocolError> {
    match buf.first() {
        None => {
            args.clear();
            Ok(Parsed::Incomplete { need: 0 })
        }
        Some(b'*') => {
            if !resume {
                args.clear();
            }
            parse_multibulk(buf, limits, args)
        }
        Some(_) => {
            args.clear();
            parse_inline(buf, limits, args)
        }
    }
}

fn parse_multibulk(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Parsed, ProtocolError> {
    let Some(eol) = find_crlf(buf, 1) else {
        if buf.len() > limits.max_inline {
            return Err(ProtocolError(Cow::Borrowed("too big mbulk count string")));
        }
        return Ok(Parsed::Incomplete { need: 0 });
    };
    let count =
        parse_len(&buf[1..eol]).ok_or(ProtocolError(Cow::Borrowed("invalid multibulk length")))?;
    if count > limits.max_args as i64 {
        return Err(ProtocolError(Cow::Borrowed("invalid multibulk length")));
    }
    let mut pos = eol + 2;
    if count <= 0 {
        args.clear();
        return Ok(Parsed::Request { consumed: pos });
    }
    if let Some(last) = args.last() {
        pos = last.end + 2; // resuming after the arguments already parsed
    }
    for _ in args.len()..count as usize {
        if pos >= buf.len() {
            return Ok(Parsed::Incomplete { need: 0 });
        }
        if buf[pos] != b'$' {
            return Err(ProtocolError(Cow::Borrowed("expected '$'")));
        }
        let Some(eol) = find_crlf(buf, pos + 1) else {
            if buf.len() - pos > 32 {
                return Err(ProtocolError(Cow::Borrowed("too big bulk count string")));
            }
            return Ok(Parsed::Incomplete { need: 0 });
        };
        let len = parse_len(&buf[pos + 1..eol])
            .ok_or(ProtocolError(Cow::Borrowed("invalid bulk length")))?;
        if len < 0 {
            return Err(ProtocolError(Cow::Borrowed("invalid bulk length")));
        }
        if len as u64 > limits.max_bulk as u64 {
            // Redis says only "invalid bulk length"; name the limit so the user knows why.
            return Err(ProtocolError(Cow::Owned(format!(
                "invalid bulk length: a string of {len} bytes is over the limit of {} bytes \
                 (proto-max-bulk-len; values are at most 256 MiB)",
                limits.max_bulk
            ))));
        }
        let start = eol + 2;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(Parsed::Incomplete { need: end + 2 });
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError(Cow::Borrowed(
                "bulk string not terminated by CRLF",
            )));
        }
        args.push(start..end);
        pos = end + 2;
    }
    Ok(Parsed::Request { consumed: pos })
}

/// An inline command: one line, arguments separated by spaces, with Redis's quoting
/// (`"..."` with backslash escapes are not supported beyond plain quotes).
fn parse_inline(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Parsed, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline {
            return Err(ProtocolError(Cow::Borrowed("too big inline request")));
        }
        return Ok(Parsed::Incomplete { need: 0 });
    };
    if nl > limits.max_inline {
        return Err(ProtocolError(Cow::Borrowed("too big inline request")));
    }
    let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    let mut i = 0;
    while i < line_end {
        while i < line_end && buf[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line_end {
            break;
        }
        if buf[i] == b'"' || buf[i] == b'\'' {
            let quote = buf[i];
            let start = i + 1;
            let close = buf[start..line_end]
                .iter()
                .position(|&b| b == quote)
                .ok_or(ProtocolError(Cow::Borrowed("unbalanced quotes in request")))?;
            args.push(start..start + close);
            i = start + close + 1;
            if i < line_end && !buf[i].is_ascii_whitespace() {
                return Err(ProtocolError(Cow::Borrowed("unbalanced quotes in request")));
            }
        } else {
            let start = i;
            while i < line_end && !buf[i].is_ascii_whitespace() {
                i += 1;
            }
            args.push(start..i);
        }
        if args.len() > limits.max_args {
            return Err(ProtocolError(Cow::Borrowed("invalid multibulk length")));
        }
    }
    Ok(Parsed::Request { consumed: nl + 1 })
}

/// The fuzzing harness's property, shared with the corpus replay in the test suite: the
/// parser never panics, never reads past the buffer, consumes what it claims, and parses a
/// request the same way whether it arrives whole or cut at any byte.
pub fn fuzz_check(data: &[u8]) {
    let limits = Limits {
        max_bulk: 1 << 16,
        max_args: 1 << 10,
        max_inline: 1 << 12,
    };
    let mut args = Vec::new();
    let whole = parse_request(data, &limits, &mut args, false);
    let whole_args = args.clone();
    // Fed piece by piece (every prefix, resuming after each Incomplete), the parser ends where
    // the whole parse does.
    let mut inc = Vec::new();
    let mut resume = false;
    for cut in 0..=data.len() {
        match parse_request(&data[..cut], &limits, &mut inc, resume) {
            Ok(Parsed::Incomplete { .. }) => {
                resume = true;
                if cut == data.len() {
                    assert!(matches!(whole, Ok(Parsed::Incomplete { .. })), "{whole:?}");
                }
            }
            Ok(Parsed::Request { consumed }) => {
                assert_eq!(whole, Ok(Parsed::Request { consumed }), "at {cut}");
                assert_eq!(inc, whole_args, "at {cut}");
                break;
            }
            Err(e) => {
                assert!(
                    whole.is_err(),
                    "prefix of {cut} bytes: {e}, whole: {whole:?}"
                );
                break;
            }
        }
    }
    if let Ok(Parsed::Request { consumed }) = &whole {
        assert!(*consumed <= data.len());
        for r in &whole_args {
            assert!(r.start <= r.end && r.end <= *consumed);
        }
        // Any prefix of a whole request is incomplete (or, for inline text, also an error
        // only if the whole is).
        for cut in 0..*consumed {
            match parse_request(&data[..cut], &limits, &mut args, false) {
                Ok(Parsed::Incomplete { .. }) => {}
                Ok(Parsed::Request { consumed: c }) => {
                    panic!("prefix of {cut} bytes parsed as a {c}-byte request")
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<(Parsed, Vec<Vec<u8>>), ProtocolError> {
        let mut args = Vec::new();
        let p = parse_request(buf, &Limits::default(), &mut args, false)?;
        Ok((p, args.iter().map(|r| buf[r.clone()].to_vec()).collect()))
    }

    #[test]
    fn multibulk_whole_and_in_pieces() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        let (p, a) = parse(req).unwrap();
        assert_eq!(
            p,
            Parsed::Request {
                consumed: req.len()
            }
        );
        assert_eq!(a, vec![b"SET".to_vec(), b"k".to_vec(), b"hello".to_vec()]);
        for cut in 0..req.len() {
            assert!(matches!(
                parse(&req[..cut]).unwrap().0,
                Parsed::Incomplete { .. }
            ));
        }
        // The size hint names the end of the value.
        let (p, _) = parse(&req[..26]).unwrap();
        assert_eq!(p, Parsed::Incomplete { need: req.len() });
    }

    #[test]
    fn pipelined_requests_parse_one_at_a_time() {
        let req = b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n";
        let (p, _) = parse(req).unwrap();
        assert_eq!(p, Parsed::Request { consumed: 14 });
    }

    #[test]
    fn inline_commands() {
        let (p, a) = parse(b"SET k \"two words\"\r\nPING").unwrap();
        assert_eq!(p, Parsed::Request { consumed: 19 });
        assert_eq!(
            a,
            vec![b"SET".to_vec(), b"k".to_vec(), b"two words".to_vec()]
        );
        let (p, a) = parse(b"\r\n").unwrap();
        assert_eq!(p, Parsed::Request { consumed: 2 });
        assert!(a.is_empty());
        assert!(parse(b"GET \"k\n").is_err());
    }

    #[test]
    fn malformed_input_is_refused() {
        for bad in [
            &b"*x\r\n"[..],
            b"*2\r\n$abc\r\n",
            b"*1\r\n+PING\r\n",
            b"*1\r\n$-5\r\n",
            b"*1\r\n$4\r\nPINGxx",
            b"*99999999999\r\n",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.to_string().starts_with("Protocol error: "), "{e}");
        }
    }

    #[test]
    fn limits_apply_to_declared_lengths() {
        let limits = Limits {
            max_bulk: 10,
            max_args: 2,
            max_inline: 8,
        };
        let mut args = Vec::new();
        // Refused from the header alone, before the 11 bytes arrive.
        assert!(parse_request(b"*1\r\n$11\r\n", &limits, &mut args, false).is_err());
        assert!(parse_request(b"*3\r\n", &limits, &mut args, false).is_err());
        assert!(parse_request(b"aaaaaaaaaaaa", &limits, &mut args, false).is_err());
    }

    #[test]
    fn fuzz_property_holds_on_samples() {
        for s in [
            &b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"[..],
            b"PING\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"",
        ] {
            fuzz_check(s);
        }
    }
}
