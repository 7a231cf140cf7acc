//! The DAQ commands as `redis::Cmd`s, and the parsers of their replies. Shared by the
//! blocking and the async client.

use crate::error::{Error, Result};
use crate::types::{Ack, ClaimedEvent, Durability, EventSummary, Fragment, StatValue};
use redis::{Cmd, Value};
use std::collections::HashMap;
use std::time::Duration;

fn with_durability(c: &mut Cmd, d: Option<Durability>) {
    if let Some(d) = d {
        c.arg("DURABILITY").arg(d.as_str());
    }
}

/// Whole milliseconds, rounded up, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn frag_put(
    run: u32,
    event: u64,
    detector: u16,
    component: u16,
    value: &[u8],
    durability: Option<Durability>,
) -> Cmd {
    let mut c = redis::cmd("FRAG.PUT");
    c.arg(run)
        .arg(event)
        .arg(detector)
        .arg(component)
        .arg(value);
    with_durability(&mut c, durability);
    c
}

pub(crate) fn frag_get(run: u32, event: u64, detector: u16, component: u16) -> Cmd {
    let mut c = redis::cmd("FRAG.GET");
    c.arg(run).arg(event).arg(detector).arg(component);
    c
}

pub(crate) fn event_get(run: u32, event: u64) -> Cmd {
    let mut c = redis::cmd("EVENT.GET");
    c.arg(run).arg(event);
    c
}

/// `FRAG.GET run:event detector component` (the cluster tag form).
pub(crate) fn frag_get_tagged(run: u32, event: u64, detector: u16, component: u16) -> Cmd {
    let mut c = redis::cmd("FRAG.GET");
    c.arg(crate::slot::event_tag(run, event))
        .arg(detector)
        .arg(component);
    c
}

/// `EVENT.GET run:event` (the cluster tag form).
pub(crate) fn event_get_tagged(run: u32, event: u64) -> Cmd {
    let mut c = redis::cmd("EVENT.GET");
    c.arg(crate::slot::event_tag(run, event));
    c
}

pub(crate) fn event_seal(run: u32, event: u64, durability: Option<Durability>) -> Cmd {
    let mut c = redis::cmd("EVENT.SEAL");
    c.arg(run).arg(event);
    with_durability(&mut c, durability);
    c
}

pub(crate) fn event_next(lease: Duration, block: Option<Duration>) -> Cmd {
    let mut c = redis::cmd("EVENT.NEXT");
    c.arg("LEASE").arg(millis(lease));
    if let Some(b) = block {
        c.arg("BLOCK").arg(block_ms(b));
    }
    c
}

/// `EVENT.NEXT ... GROUP group`.
pub(crate) fn event_next_in(group: &str, lease: Duration, block: Option<Duration>) -> Cmd {
    let mut c = event_next(lease, block);
    c.arg("GROUP").arg(group);
    c
}

/// `EVENT.NEXT LEASE lease [BLOCK block] COUNT count [CONSUMER name] [GROUP group]`.
pub(crate) fn event_next_count(
    lease: Duration,
    block: Option<Duration>,
    count: usize,
    consumer: Option<&str>,
    group: Option<&str>,
) -> Cmd {
    let mut c = event_next(lease, block);
    c.arg("COUNT").arg(count);
    if let Some(name) = consumer {
        c.arg("CONSUMER").arg(name);
    }
    if let Some(g) = group {
        c.arg("GROUP").arg(g);
    }
    c
}

/// `EVENT.ACK token [token ...] REMOVE|KEEP [DURABILITY d]`.
pub(crate) fn event_ack_many<'a>(
    tokens: impl IntoIterator<Item = &'a str>,
    ack: Ack,
    durability: Option<Durability>,
) -> Cmd {
    let mut c = redis::cmd("EVENT.ACK");
    for t in tokens {
        c.arg(t);
    }
    c.arg(ack.as_str());
    with_durability(&mut c, durability);
    c
}

/// `EVENT.GROUP CREATE name REQUIRED|OPTIONAL`.
pub(crate) fn group_create(name: &str, required: bool) -> Cmd {
    let mut c = redis::cmd("EVENT.GROUP");
    c.arg("CREATE")
        .arg(name)
        .arg(if required { "REQUIRED" } else { "OPTIONAL" });
    c
}

/// `EVENT.GROUP DESTROY name`.
pub(crate) fn group_destroy(name: &str) -> Cmd {
    let mut c = redis::cmd("EVENT.GROUP");
    c.arg("DESTROY").arg(name);
    c
}

/// `BLOCK` argument: `Duration::MAX` waits forever (`BLOCK 0`), anything else at least 1 ms.
pub(crate) fn block_ms(b: Duration) -> u64 {
    if b == Duration::MAX {
        0
    } else {
        millis(b)
    }
}

pub(crate) fn event_ack(token: &str, ack: Ack, durability: Option<Durability>) -> Cmd {
    let mut c = redis::cmd("EVENT.ACK");
    c.arg(token).arg(ack.as_str());
    with_durability(&mut c, durability);
    c
}

pub(crate) fn event_release(token: &str) -> Cmd {
    let mut c = redis::cmd("EVENT.RELEASE");
    c.arg(token);
    c
}

pub(crate) fn event_range(run: u32, from: u64, to: u64, limit: Option<usize>) -> Cmd {
    let mut c = redis::cmd("EVENT.RANGE");
    c.arg(run).arg(from).arg(to);
    if let Some(l) = limit {
        c.arg("LIMIT").arg(l);
    }
    c
}

pub(crate) fn store_stats() -> Cmd {
    redis::cmd("STORE.STATS")
}

// ---- replies ----

/// Turns an error reply into its typed error.
pub(crate) fn check(v: Value) -> Result<Value> {
    match v {
        Value::ServerError(e) => Err(e.into()),
        v => Ok(v),
    }
}

/// `+OK` (or any simple string: servers answer writes with `+OK`).
pub(crate) fn ok(v: Value) -> Result<()> {
    match check(v)? {
        Value::Okay => Ok(()),
        Value::SimpleString(s) if s.eq_ignore_ascii_case("ok") => Ok(()),
        o => Err(Error::protocol(format!("expected +OK, got {o:?}"))),
    }
}

fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::protocol(format!("expected an integer, got {v:?}"))),
        Value::SimpleString(s) => s
            .parse()
            .map_err(|_| Error::protocol(format!("expected an integer, got {v:?}"))),
        Value::Boolean(b) => Ok(i64::from(*b)),
        o => Err(Error::protocol(format!("expected an integer, got {o:?}"))),
    }
}

/// An unsigned field. Fix (found in review): the server sends values above `i64::MAX` as
/// digits (a RESP2 bulk string, a RESP3 big number), which `int` refused, so the claim of such
/// an event failed after the server had made it (held until its lease ended).
fn uint<T: TryFrom<u64>>(v: &Value, what: &str) -> Result<T> {
    let digits = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
    };
    let n = match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(b) | Value::BigNumber(b) => digits(b),
        Value::SimpleString(s) => digits(s.as_bytes()),
        _ => None,
    }
    .ok_or_else(|| Error::protocol(format!("expected an unsigned {what}, got {v:?}")))?;
    T::try_from(n).map_err(|_| Error::protocol(format!("{what} {n} out of range")))
}

fn flag(v: &Value) -> Result<bool> {
    match int(v)? {
        0 => Ok(false),
        1 => Ok(true),
        o => Err(Error::protocol(format!("expected 0 or 1, got {o}"))),
    }
}

fn bytes(v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::VerbatimString { text, .. } => Ok(text.into_bytes()),
        o => Err(Error::protocol(format!(
            "expected a bulk string, got {o:?}"
        ))),
    }
}

fn text(v: Value) -> Result<String> {
    String::from_utf8(bytes(v)?).map_err(|_| Error::protocol("expected UTF-8 text"))
}

fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        o => Err(Error::protocol(format!("expected an array, got {o:?}"))),
    }
}

fn array_of<const N: usize>(v: Value, what: &str) -> Result<[Value; N]> {
    let a = array(v)?;
    let n = a.len();
    a.try_into()
        .map_err(|_| Error::protocol(format!("{what}: expected {N} elements, got {n}")))
}

/// `FRAG.GET`: bulk or nil.
pub(crate) fn optional_bytes(v: Value) -> Result<Option<Vec<u8>>> {
    match check(v)? {
        Value::Nil => Ok(None),
        v => bytes(v).map(Some),
    }
}

/// An array of `[detector, component, value]` for event `(run, event)`.
pub(crate) fn fragments(v: Value, run: u32, event: u64) -> Result<Vec<Fragment>> {
    let v = check(v)?;
    if v == Value::Nil {
        return Ok(Vec::new());
    }
    array(v)?
        .into_iter()
        .map(|f| {
            let [d, c, value] = array_of::<3>(f, "fragment")?;
            Ok(Fragment {
                run,
                event,
                detector: uint(&d, "detector")?,
                component: uint(&c, "component")?,
                value: bytes(value)?,
            })
        })
        .collect()
}

/// `EVENT.NEXT`: nil, or `[token, [run, event], incomplete, fragments]`.
pub(crate) fn claimed_event(v: Value) -> Result<Option<ClaimedEvent>> {
    let v = check(v)?;
    if v == Value::Nil {
        return Ok(None);
    }
    let [token, id, incomplete, frags] = array_of::<4>(v, "EVENT.NEXT reply")?;
    let [run, event] = array_of::<2>(id, "event id")?;
    let run: u32 = uint(&run, "run")?;
    let event: u64 = uint(&event, "event")?;
    Ok(Some(ClaimedEvent {
        token: text(token)?,
        run,
        event,
        incomplete: flag(&incomplete)?,
        fragments: fragments(frags, run, event)?,
    }))
}

/// Replies to pipelined `EVENT.NEXT`s: the events claimed, or the first error.
pub(crate) fn claimed_events(replies: Vec<Value>) -> Result<Vec<ClaimedEvent>> {
    let mut out = Vec::with_capacity(replies.len());
    let mut first_err = None;
    for r in replies {
        match claimed_event(r) {
            Ok(Some(e)) => out.push(e),
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// `EVENT.NEXT ... COUNT n`: nil, or an array of claims.
pub(crate) fn claimed_batch(v: Value) -> Result<Vec<ClaimedEvent>> {
    match check(v)? {
        Value::Nil => Ok(Vec::new()),
        v => array(v)?
            .into_iter()
            .map(|c| claimed_event(c)?.ok_or_else(|| Error::protocol("a nil claim in a batch")))
            .collect(),
    }
}

/// `EVENT.ACK` of `n` tokens: `+OK` or an error for one, an array of those for several.
pub(crate) fn ack_results(v: Value, n: usize) -> Result<Vec<Result<()>>> {
    if n == 1 {
        return Ok(vec![ok(v)]);
    }
    let replies = array(check(v)?)?;
    if replies.len() != n {
        return Err(Error::protocol(format!(
            "EVENT.ACK of {n} tokens answered {} results",
            replies.len()
        )));
    }
    Ok(replies.into_iter().map(ok).collect())
}

/// One range of `CLUSTER SLOTS`: slots `start..=end` served by `host:port` (node `id`).
pub(crate) struct SlotRange {
    pub start: u16,
    pub end: u16,
    /// Empty: the host asked.
    pub host: String,
    pub port: u16,
    pub id: String,
}

/// `CLUSTER SLOTS`: `[start, end, [host, port, id, ...], replicas...]` per range.
pub(crate) fn cluster_slots(v: Value) -> Result<Vec<SlotRange>> {
    array(check(v)?)?
        .into_iter()
        .map(|r| {
            let mut r = array(r)?.into_iter();
            let (Some(start), Some(end), Some(master)) = (r.next(), r.next(), r.next()) else {
                return Err(Error::protocol("CLUSTER SLOTS: a range without its node"));
            };
            let mut m = array(master)?.into_iter();
            let (Some(host), Some(port)) = (m.next(), m.next()) else {
                return Err(Error::protocol(
                    "CLUSTER SLOTS: a node without host and port",
                ));
            };
            let id = match m.next() {
                Some(id) => text(id)?,
                None => String::new(),
            };
            Ok(SlotRange {
                start: uint(&start, "slot")?,
                end: uint(&end, "slot")?,
                host: text(host)?,
                port: uint(&port, "port")?,
                id,
            })
        })
        .collect()
}

/// `EVENT.RANGE`: an array of `[event, state, fragments, bytes, incomplete]`.
pub(crate) fn event_summaries(v: Value, run: u32) -> Result<Vec<EventSummary>> {
    array(check(v)?)?
        .into_iter()
        .map(|e| {
            let [event, state, fragments, bytes, incomplete] = array_of::<5>(e, "event")?;
            Ok(EventSummary {
                run,
                event: uint(&event, "event")?,
                state: text(state)?.parse().map_err(Error::Protocol)?,
                fragments: uint(&fragments, "fragments")?,
                bytes: uint(&bytes, "bytes")?,
                incomplete: flag(&incomplete)?,
            })
        })
        .collect()
}

fn stat_value(v: Value) -> Result<StatValue> {
    Ok(match v {
        Value::Nil => StatValue::Nil,
        Value::Int(i) => StatValue::Int(i),
        Value::Double(x) => StatValue::Float(x),
        Value::Boolean(b) => StatValue::Int(i64::from(b)),
        Value::Okay => StatValue::Text("OK".into()),
        v @ (Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. }) => {
            StatValue::Text(text(v)?)
        }
        Value::Array(a) | Value::Set(a) => {
            StatValue::List(a.into_iter().map(stat_value).collect::<Result<_>>()?)
        }
        Value::Map(m) => StatValue::Map(
            m.into_iter()
                .map(|(k, v)| Ok((text(k)?, stat_value(v)?)))
                .collect::<Result<_>>()?,
        ),
        Value::ServerError(e) => return Err(e.into()),
        o => StatValue::Text(format!("{o:?}")),
    })
}

/// `STORE.STATS`: a map (RESP3) or a flat array of name, value (RESP2).
pub(crate) fn stats(v: Value) -> Result<HashMap<String, StatValue>> {
    let pairs: Vec<(Value, Value)> = match check(v)? {
        Value::Map(m) => m,
        Value::Array(a) => {
            if a.len() % 2 != 0 {
                return Err(Error::protocol(format!(
                    "STORE.STATS: {} elements, not name-value pairs",
                    a.len()
                )));
            }
            let mut it = a.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        o => return Err(Error::protocol(format!("STORE.STATS: got {o:?}"))),
    };
    pairs
        .into_iter()
        .map(|(k, v)| Ok((text(k)?, stat_value(v)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EventState;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs(30)), 30_000);
        assert_eq!(block_ms(Duration::MAX), 0);
    }

    #[test]
    fn packs_options() {
        let c = frag_put(1, 2, 3, 4, b"v", Some(Durability::Memory));
        let args: Vec<Vec<u8>> = c
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"?".to_vec(),
            })
            .collect();
        let want: Vec<&[u8]> = vec![
            b"FRAG.PUT",
            b"1",
            b"2",
            b"3",
            b"4",
            b"v",
            b"DURABILITY",
            b"memory",
        ];
        assert_eq!(args, want);
    }

    #[test]
    fn parses_next() {
        let v = Value::Array(vec![
            bulk("00000001000000000000002a:1"),
            Value::Array(vec![Value::Int(1), Value::Int(42)]),
            Value::Int(0),
            Value::Array(vec![Value::Array(vec![
                Value::Int(3),
                Value::Int(0),
                bulk("x"),
            ])]),
        ]);
        let e = claimed_event(v).unwrap().unwrap();
        assert_eq!(e.token, "00000001000000000000002a:1");
        assert_eq!((e.run, e.event, e.incomplete), (1, 42, false));
        assert_eq!(e.fragments, vec![Fragment::new(1, 42, 3, 0, b"x".to_vec())]);
        assert!(claimed_event(Value::Nil).unwrap().is_none());
    }

    #[test]
    fn parses_range_and_stats() {
        let v = Value::Array(vec![Value::Array(vec![
            Value::Int(42),
            bulk("ready"),
            Value::Int(2),
            Value::Int(25),
            Value::Int(0),
        ])]);
        let r = event_summaries(v, 1).unwrap();
        assert_eq!(r[0].state, EventState::Ready);
        assert_eq!((r[0].event, r[0].fragments, r[0].bytes), (42, 2, 25));
        let flat = Value::Array(vec![
            bulk("entries"),
            Value::Int(3),
            bulk("tiers"),
            bulk("x"),
        ]);
        let s = stats(flat).unwrap();
        assert_eq!(s["entries"].as_i64(), Some(3));
        let map = Value::Map(vec![(bulk("puts"), Value::Int(9))]);
        assert_eq!(stats(map).unwrap()["puts"], StatValue::Int(9));
    }

    #[test]
    fn maps_error_codes() {
        let e = redis::parse_redis_value(b"-CLAIMLOST the claim is gone\r\n").unwrap();
        match check(e) {
            Err(Error::ClaimLost(m)) => assert!(m.contains("claim is gone"), "{m}"),
            o => panic!("{o:?}"),
        }
        let e = redis::parse_redis_value(b"-ERR unknown command 'X'\r\n").unwrap();
        assert!(matches!(check(e), Err(Error::Request(_))));
        let e = redis::parse_redis_value(b"-WEIRD thing\r\n").unwrap();
        match check(e) {
            Err(e @ Error::Server { .. }) => assert_eq!(e.code(), Some("WEIRD")),
            o => panic!("{o:?}"),
        }
    }
}
