//! Request parser: RESP arrays of bulk strings (what every client sends) and inline commands
//! (what a person types into telnet).
//!
//! Written here rather than taken from a codec crate because the server needs three things at
//! once: arguments as ranges into the read buffer (values are copied once, from the socket
//! buffer into the store), limits checked from the *declared* lengths before anything is
//! buffered, and a size hint so a large value is read into a buffer allocated once.
//! Error texts follow Redis (`networking.c`), which clients and tests match on.

use std::ops::Range;

/// Limits on one request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest bulk string (one argument).
    pub max_bulk: usize,
    /// Most arguments in one request.
    pub max_args: usize,
    /// Longest inline command line, and longest header line (`*N`, `$N`) searched for its end.
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

/// Argument ranges the parser may allocate by itself; beyond this it returns
/// [`Parsed::NeedArgs`] so that the caller charges the memory before it is allocated (16 bytes
/// per argument: a request of a million one-byte arguments needs 16 MiB of ranges for 7 MiB of
/// input).
pub const FREE_ARGS: usize = 1024;

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
    /// `args` is full (and past [`FREE_ARGS`]): reserve room for more ranges (up to `count`
    /// in all, the most the request can have) and call again with `resume`.
    NeedArgs {
        /// Arguments the request may have in all.
        count: usize,
    },
}

/// Malformed input: the connection gets `-ERR Protocol error: <text>` and is closed. The texts
/// are Redis 7's (`networking.c`) byte for byte, which clients and test suites match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// No `\r` within `max_inline` bytes of a `*N` header.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMbulkCount,
    /// `*N` with N not a number, or more than the server's argument limit.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// No `\r` within `max_inline` bytes of a `$N` header.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An argument that does not start with `$`.
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    /// `$N` with N not a number or negative.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// `$N` over `--max-bulk-len`: Redis's text, then why (a deliberate difference: the user
    /// learns which limit refused the value).
    #[error(
        "Protocol error: invalid bulk length: a string of {len} bytes is over the limit of \
         {max} bytes (proto-max-bulk-len; values are at most 256 MiB)"
    )]
    BulkOverLimit {
        /// The declared length.
        len: i64,
        /// `--max-bulk-len`.
        max: usize,
    },
    /// A bulk string not followed by CRLF (Redis skips two bytes unchecked; see
    /// docs/protocol.md, deliberate differences).
    #[error("Protocol error: bulk string not terminated by CRLF")]
    BulkNotTerminated,
    /// An inline line longer than `max_inline`.
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// An inline line with an open quote, or a closing quote not followed by a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
}

impl ProtocolError {
    /// The error reply's text (after `-`), as bytes: `got '%c'` names the byte itself, which
    /// need not be UTF-8.
    pub fn reply_text(&self) -> Vec<u8> {
        match self {
            ProtocolError::ExpectedDollar(b) => {
                let mut t = b"ERR Protocol error: expected '$', got '".to_vec();
                t.push(*b);
                t.push(b'\'');
                t
            }
            e => format!("ERR {e}").into_bytes(),
        }
    }
}

/// Where the header line starting at `from` ends: the first `\r`, with one more byte after it
/// (Redis's `strchr(..., '\r')`; the byte after `\r` is skipped unchecked, as Redis does).
fn find_cr(buf: &[u8], from: usize) -> Option<usize> {
    let cr = from + buf[from..].iter().position(|&b| b == b'\r')?;
    (cr + 1 < buf.len()).then_some(cr)
}

/// Parses a decimal integer exactly as Redis's `string2ll`: optional `-`, no `+`, no leading
/// zeros (except `0` itself), no spaces, no overflow.
fn string2ll(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, d) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    match d.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses one request from the start of `buf`, filling `args` with ranges of `buf`. Inline
/// commands are unquoted in place (the line shrinks, so the ranges still point into `buf`).
///
/// `resume`: the previous call was on the same request (the buffer has only grown since) and
/// returned `Incomplete` or `NeedArgs`; the arguments it completed are kept in `args` and
/// parsing goes on after them, so a request arriving in many pieces is parsed once, not once
/// per piece.
pub fn parse_request(
    buf: &mut [u8],
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
    let Some(eol) = find_cr(buf, 1) else {
        if buf.len() > limits.max_inline {
            return Err(ProtocolError::TooBigMbulkCount);
        }
        return Ok(Parsed::Incomplete { need: 0 });
    };
    let count = string2ll(&buf[1..eol]).ok_or(ProtocolError::InvalidMultibulkLength)?;
    if count > limits.max_args as i64 {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    let mut pos = eol + 2;
    if count <= 0 {
        args.clear();
        return Ok(Parsed::Request { consumed: pos });
    }
    let count = count as usize;
    if let Some(last) = args.last() {
        pos = last.end + 2; // resuming after the arguments already parsed
    }
    while args.len() < count {
        let Some(eol) = find_cr(buf, pos.min(buf.len())) else {
            if buf.len() - pos.min(buf.len()) > limits.max_inline {
                return Err(ProtocolError::TooBigBulkCount);
            }
            return Ok(Parsed::Incomplete { need: 0 });
        };
        if buf[pos] != b'$' {
            return Err(ProtocolError::ExpectedDollar(buf[pos]));
        }
        let len = string2ll(&buf[pos + 1..eol]).ok_or(ProtocolError::InvalidBulkLength)?;
        if len < 0 {
            return Err(ProtocolError::InvalidBulkLength);
        }
        if len as u64 > limits.max_bulk as u64 {
            return Err(ProtocolError::BulkOverLimit {
                len,
                max: limits.max_bulk,
            });
        }
        let start = eol + 2;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(Parsed::Incomplete { need: end + 2 });
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError::BulkNotTerminated);
        }
        if args.len() == args.capacity() && args.len() >= FREE_ARGS {
            return Ok(Parsed::NeedArgs { count });
        }
        args.push(start..end);
        pos = end + 2;
    }
    Ok(Parsed::Request { consumed: pos })
}

/// C's `isspace` (the blanks `sdssplitargs` skips between arguments).
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// An inline command: one line, split as Redis's `sdssplitargs` splits it.
fn parse_inline(
    buf: &mut [u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Parsed, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(Parsed::Incomplete { need: 0 });
    };
    if nl > limits.max_inline {
        return Err(ProtocolError::TooBigInline);
    }
    let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    // A line of n bytes has at most n/2 + 1 arguments: make room before unquoting in place
    // (which cannot be undone to parse again).
    let most = line_end / 2 + 1;
    if most > FREE_ARGS && args.capacity() < most {
        return Ok(Parsed::NeedArgs { count: most });
    }
    split_args(&mut buf[..line_end], args)?;
    if args.len() > limits.max_args {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    Ok(Parsed::Request { consumed: nl + 1 })
}

/// Redis's `sdssplitargs`, unquoting in place: arguments are separated by blanks; in double
/// quotes `\n \r \t \b \a \xHH` and `\<any>` are escapes; in single quotes only `\'`; a
/// closing quote must be followed by a blank or the end; a NUL byte ends the line.
fn split_args(line: &mut [u8], args: &mut Vec<Range<usize>>) -> Result<(), ProtocolError> {
    let n = line.len();
    // The byte at `i`, NUL past the end (the C string's terminator).
    let at = |line: &[u8], i: usize| if i < n { line[i] } else { 0 };
    // Unquoted output is never longer than the input read so far: `w <= r` always.
    let (mut r, mut w) = (0, 0);
    loop {
        while at(line, r) != 0 && is_c_space(line[r]) {
            r += 1;
        }
        if at(line, r) == 0 {
            return Ok(());
        }
        let start = w;
        let (mut inq, mut insq, mut done) = (false, false, false);
        while !done {
            let c = at(line, r);
            if inq {
                let hex = (at(line, r + 2), at(line, r + 3));
                if c == b'\\' && at(line, r + 1) == b'x' && hex_val(hex.0).is_some() {
                    if let (Some(h), Some(l)) = (hex_val(hex.0), hex_val(hex.1)) {
                        line[w] = h * 16 + l;
                        w += 1;
                        r += 3;
                    } else {
                        // `\x` not followed by two hex digits: `x` itself.
                        r += 1;
                        line[w] = b'x';
                        w += 1;
                    }
                } else if c == b'\\' && at(line, r + 1) != 0 {
                    r += 1;
                    line[w] = match line[r] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    };
                    w += 1;
                } else if c == b'"' {
                    let next = at(line, r + 1);
                    if next != 0 && !is_c_space(next) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    line[w] = c;
                    w += 1;
                }
            } else if insq {
                if c == b'\\' && at(line, r + 1) == b'\'' {
                    r += 1;
                    line[w] = b'\'';
                    w += 1;
                } else if c == b'\'' {
                    let next = at(line, r + 1);
                    if next != 0 && !is_c_space(next) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    line[w] = c;
                    w += 1;
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    _ => {
                        line[w] = c;
                        w += 1;
                    }
                }
            }
            if at(line, r) != 0 {
                r += 1;
            }
        }
        args.push(start..w);
    }
}

/// The fuzzing harness's property, shared with the corpus replay in the test suite: the
/// parser never panics, never reads past the buffer, consumes what it claims, and parses a
/// request the same way whether it arrives whole or cut at any byte.
pub fn fuzz_check(data: &[u8]) {
    let limits = Limits {
        max_bulk: 1 << 16,
        max_args: 1 << 12,
        max_inline: 1 << 12,
    };
    // Inline parsing unquotes in place: every call gets its own copy of the input.
    let parse = |input: &[u8], args: &mut Vec<Range<usize>>, resume: bool| {
        let mut copy = input.to_vec();
        let mut r = parse_request(&mut copy, &limits, args, resume);
        while let Ok(Parsed::NeedArgs { count }) = r {
            assert!(count > args.len() && count <= limits.max_args.max(limits.max_inline));
            args.reserve(count - args.len());
            r = parse_request(&mut copy, &limits, args, true);
        }
        (r, copy)
    };
    let mut args = Vec::new();
    let (whole, decoded) = parse(data, &mut args, false);
    let whole_args = args.clone();
    // Fed piece by piece (every prefix, resuming after each Incomplete), the parser ends where
    // the whole parse does.
    let mut inc = Vec::new();
    let mut resume = false;
    for cut in 0..=data.len() {
        match parse(&data[..cut], &mut inc, resume).0 {
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
            Ok(Parsed::NeedArgs { .. }) => unreachable!("handled by parse"),
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
        assert_eq!(decoded.len(), data.len());
        for r in &whole_args {
            assert!(r.start <= r.end && r.end <= *consumed);
        }
        // Any prefix of a whole request is incomplete (or, for inline text, also an error
        // only if the whole is).
        for cut in 0..*consumed {
            if let Ok(Parsed::Request { consumed: c }) = parse(&data[..cut], &mut args, false).0 {
                panic!("prefix of {cut} bytes parsed as a {c}-byte request")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<(Parsed, Vec<Vec<u8>>), ProtocolError> {
        let mut buf = buf.to_vec();
        let mut args = Vec::new();
        let p = parse_request(&mut buf, &Limits::default(), &mut args, false)?;
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
    fn inline_quotes_and_escapes_as_sdssplitargs() {
        let cases: &[(&[u8], &[&[u8]])] = &[
            (b"SET \"a b\" \"c\\x41d\"\n", &[b"SET", b"a b", b"cAd"]),
            (
                b"x \"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\n",
                &[b"x", b"\n\r\t\x08\x07\\\"q"],
            ),
            (b"x '\\'a\\n'\n", &[b"x", b"'a\\n"]),
            (b"x \"\\xZZ\" \"\\x4\"\n", &[b"x", b"xZZ", b"x4"]),
            (b"a\"b c\" \x0bd\x0be\n", &[b"ab c", b"d\x0be"]),
            (b"x \"\"\n", &[b"x", b""]),
        ];
        for (input, want) in cases {
            let (_, a) = parse(input).unwrap();
            assert_eq!(&a, want, "{}", String::from_utf8_lossy(input));
        }
        for bad in [&b"x \"a\"b\n"[..], b"x 'a\n", b"x \"a\\\"\n", b"x 'a'b\n"] {
            assert_eq!(parse(bad).unwrap_err(), ProtocolError::UnbalancedQuotes);
        }
    }

    #[test]
    fn error_texts_are_redis_texts() {
        let e = parse(b"*1\r\nfoo\r\n").unwrap_err();
        assert_eq!(e.reply_text(), b"ERR Protocol error: expected '$', got 'f'");
        assert_eq!(
            parse(b"*01\r\n").unwrap_err(),
            ProtocolError::InvalidMultibulkLength
        );
        assert_eq!(
            parse(b"*1\r\n$+1\r\n").unwrap_err(),
            ProtocolError::InvalidBulkLength
        );
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(string2ll(b"9223372036854775808"), None);
        assert_eq!(string2ll(b"-0"), None);
    }

    #[test]
    fn arguments_past_the_free_ones_are_asked_for() {
        let mut req = b"*2000\r\n".to_vec();
        for _ in 0..2000 {
            req.extend_from_slice(b"$1\r\nx\r\n");
        }
        let mut args = Vec::new();
        let r = parse_request(&mut req, &Limits::default(), &mut args, false).unwrap();
        assert_eq!(r, Parsed::NeedArgs { count: 2000 });
        assert_eq!(args.len(), args.capacity());
        args.reserve_exact(2000 - args.len());
        let r = parse_request(&mut req, &Limits::default(), &mut args, true).unwrap();
        assert_eq!(
            r,
            Parsed::Request {
                consumed: req.len()
            }
        );
        assert_eq!(args.len(), 2000);
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
        for bad in [&b"*1\r\n$11\r\n"[..], b"*3\r\n", b"aaaaaaaaaaaa"] {
            let mut b = bad.to_vec();
            assert!(parse_request(&mut b, &limits, &mut args, false).is_err());
        }
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
