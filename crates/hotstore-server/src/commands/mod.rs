//! The command table and dispatch: arity and authentication checks, then the handler.
//!
//! Handlers write their reply and return a [`Flow`]; an `Err(text)` becomes an error reply
//! (`text` starts with its code: `ERR ...`, `FULL ...`).

mod admin;
mod cluster;
mod daq;
mod docs;
mod record;
mod standard;

pub use cluster::{strip_tag, token_text};
pub use daq::{write_claims, Batch};

use crate::resp::Reply;
use crate::session::ConnState;
use crate::shared::Shared;
use std::ops::Range;
use std::time::{Duration, Instant};

/// What the connection does after a command.
pub enum Flow {
    /// Go on with the next request.
    Continue,
    /// Send the replies so far, then close (QUIT).
    Close,
    /// Send the replies so far, then stop the server (SHUTDOWN).
    Shutdown,
    /// Wait for a READY event (EVENT.NEXT BLOCK), then reply.
    WaitEvent(WaitEvent),
}

/// A blocking EVENT.NEXT in progress.
pub struct WaitEvent {
    /// Consumer name recorded with the claim.
    pub consumer: String,
    /// The consumer group claimed in (None: the default queue).
    pub group: Option<String>,
    /// Lease of the claim.
    pub lease: Duration,
    /// EVENT.NEXT COUNT: reply with an array of up to this many claims.
    pub count: Option<usize>,
    /// When to give up (None: never).
    pub deadline: Option<Instant>,
}

/// Result of a handler.
pub type CmdResult = Result<Flow, String>;

/// The arguments of one request, as slices of the read buffer.
pub struct Args<'a> {
    buf: &'a [u8],
    ranges: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    /// Arguments of a request parsed from `buf`.
    pub fn new(buf: &'a [u8], ranges: &'a [Range<usize>]) -> Self {
        Args { buf, ranges }
    }
    /// Number of arguments, the command name included.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }
    /// Argument `i` (0 is the command name).
    pub fn get(&self, i: usize) -> &'a [u8] {
        &self.buf[self.ranges[i].clone()]
    }
    /// Arguments from `i` on.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.ranges[i.min(self.ranges.len())..]
            .iter()
            .map(|r| &self.buf[r.clone()])
    }
    /// Argument `i` as text.
    pub fn str(&self, i: usize) -> Result<&'a str, String> {
        std::str::from_utf8(self.get(i)).map_err(|_| "ERR argument is not valid UTF-8".into())
    }
    /// Argument `i` as an unsigned integer.
    pub fn u64(&self, i: usize) -> Result<u64, String> {
        parse_u64(self.get(i)).ok_or_else(|| "ERR value is not an integer or out of range".into())
    }
    /// The argument ranges with argument `at`, if it is an event tag `f1:f2:...` of `fields`
    /// canonical decimal numbers, split into one argument per field (None if it holds no
    /// `:`). A tag in another spelling (`007:42`) is refused: clients hash the tag as
    /// written, so two spellings of one event could reach two nodes.
    pub fn split_event_tag(
        &self,
        at: usize,
        fields: usize,
    ) -> Option<Result<Vec<Range<usize>>, String>> {
        let tag = self.ranges.get(at)?;
        let text = &self.buf[tag.clone()];
        if !text.contains(&b':') {
            return None;
        }
        let mut parts = Vec::with_capacity(fields);
        let mut start = tag.start;
        for piece in text.split(|&b| b == b':') {
            let canonical = parse_u64(piece).is_some() && (piece.len() == 1 || piece[0] != b'0');
            if !canonical {
                return Some(Err(format!(
                    "ERR event '{}' is not {fields} unsigned integers joined by ':' in plain \
                     decimal (like 7:42)",
                    String::from_utf8_lossy(text)
                )));
            }
            parts.push(start..start + piece.len());
            start += piece.len() + 1;
        }
        if parts.len() != fields {
            return Some(Err(format!(
                "ERR event '{}' has {} fields; events of this store's key layout have {fields}",
                String::from_utf8_lossy(text),
                parts.len()
            )));
        }
        let mut ranges = Vec::with_capacity(self.ranges.len() + fields);
        ranges.extend_from_slice(&self.ranges[..at]);
        ranges.extend(parts);
        ranges.extend_from_slice(&self.ranges[at + 1..]);
        Some(Ok(ranges))
    }
    /// True if argument `i` equals `word`, ignoring case.
    pub fn is(&self, i: usize, word: &str) -> bool {
        self.get(i).eq_ignore_ascii_case(word.as_bytes())
    }
}

/// Parses a decimal `u64` (no sign, no spaces).
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Everything a handler may use.
pub struct Ctx<'a, 'o> {
    /// State shared by all connections.
    pub shared: &'a Shared,
    /// This connection.
    pub conn: &'a mut ConnState,
    /// Its reply buffer.
    pub out: &'a mut Reply<'o>,
}

type Handler = fn(&mut Ctx, &Args) -> CmdResult;

/// How cluster mode finds the node of a request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Any node serves it (node-local: EVENT.NEXT, SCAN, INFO...).
    None,
    /// By its keys (`first_key`, `last_key`, `step`), which must share a slot.
    Keys,
    /// By the event its first arguments name (`7 42` or the tag `7:42`).
    Event,
    /// By the events its claim tokens name (the node that issued them).
    Tokens,
}

/// One command: name, arity as Redis states it (negative: at least), whether it writes, and
/// what `COMMAND` reports.
pub struct Spec {
    /// Lower-case name.
    pub name: &'static str,
    /// Exact argument count (with the name) if positive, minimum if negative.
    pub arity: i64,
    /// Flags reported by COMMAND.
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i64,
    /// Last key argument (-1: the last argument).
    pub last_key: i64,
    /// Step between keys.
    pub step: i64,
    /// How cluster mode routes it.
    pub route: Route,
    handler: Handler,
}

const W: &[&str] = &["write"];
const R: &[&str] = &["readonly", "fast"];
// Redis 7's flags for the Redis commands (COMMAND INFO is compared with Redis's).
const WD: &[&str] = &["write", "denyoom"];
const RO: &[&str] = &["readonly"];
const F: &[&str] = &["fast"];
const LSF: &[&str] = &["loading", "stale", "fast"];
const LS: &[&str] = &["loading", "stale"];
const A: &[&str] = &[
    "noscript",
    "loading",
    "stale",
    "fast",
    "no_auth",
    "allow_busy",
];
const NONE: &[&str] = &[];
const SHUT: &[&str] = &[
    "admin",
    "noscript",
    "loading",
    "stale",
    "no_multi",
    "allow_busy",
];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $fk:expr, $lk:expr, $st:expr, $h:path) => {
        spec!(
            $name,
            $arity,
            $flags,
            $fk,
            $lk,
            $st,
            $h,
            if $fk > 0 { Route::Keys } else { Route::None }
        )
    };
    ($name:literal, $arity:expr, $flags:expr, $fk:expr, $lk:expr, $st:expr, $h:path, $route:expr) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $fk,
            last_key: $lk,
            step: $st,
            route: $route,
            handler: $h,
        }
    };
}

/// Every command, most frequent first (lookup is a scan).
pub static COMMANDS: &[Spec] = &[
    spec!("get", 2, R, 1, 1, 1, standard::get),
    spec!("set", -3, WD, 1, 1, 1, standard::set),
    spec!("frag.put", -3, W, 1, 1, 1, daq::frag_put, Route::Event),
    spec!("event.next", -1, W, 0, 0, 0, daq::event_next),
    spec!("event.ack", -3, W, 1, 1, 1, daq::event_ack, Route::Tokens),
    spec!("frag.get", -2, R, 1, 1, 1, daq::frag_get, Route::Event),
    spec!("event.get", -2, R, 1, 1, 1, daq::event_get, Route::Event),
    spec!("event.seal", -2, W, 1, 1, 1, daq::event_seal, Route::Event),
    spec!(
        "event.release",
        2,
        W,
        1,
        1,
        1,
        daq::event_release,
        Route::Tokens
    ),
    spec!("event.pending", -1, R, 0, 0, 0, daq::event_pending),
    spec!(
        "event.claim",
        -2,
        W,
        1,
        1,
        1,
        daq::event_claim,
        Route::Event
    ),
    spec!("event.group", -3, W, 0, 0, 0, daq::event_group),
    spec!("event.groups", 1, R, 0, 0, 0, daq::event_groups),
    spec!("event.consumers", 2, R, 0, 0, 0, daq::event_consumers),
    spec!("event.range", -3, R, 0, 0, 0, daq::event_range),
    spec!("store.stats", 1, R, 0, 0, 0, daq::store_stats),
    spec!("record.trigger", -1, W, 0, 0, 0, record::trigger),
    spec!("record.status", 1, R, 0, 0, 0, record::status),
    spec!("mget", -2, R, 1, -1, 1, standard::mget),
    spec!("mset", -3, WD, 1, -1, 2, standard::mset),
    spec!("del", -2, W, 1, -1, 1, standard::del),
    spec!("exists", -2, R, 1, -1, 1, standard::exists),
    spec!("strlen", 2, R, 1, 1, 1, standard::strlen),
    spec!("type", 2, R, 1, 1, 1, standard::type_),
    spec!("dbsize", 1, R, 0, 0, 0, standard::dbsize),
    spec!("scan", -2, RO, 0, 0, 0, standard::scan),
    spec!("ping", -1, F, 0, 0, 0, admin::ping),
    spec!("echo", 2, LSF, 0, 0, 0, admin::echo),
    spec!("hello", -1, A, 0, 0, 0, admin::hello),
    spec!("auth", -2, A, 0, 0, 0, admin::auth),
    spec!("select", 2, LSF, 0, 0, 0, admin::select),
    spec!("info", -1, LS, 0, 0, 0, admin::info),
    spec!("config", -2, NONE, 0, 0, 0, admin::config),
    spec!("client", -2, NONE, 0, 0, 0, admin::client),
    spec!("command", -1, LS, 0, 0, 0, admin::command),
    spec!("quit", -1, A, 0, 0, 0, admin::quit),
    spec!("shutdown", -1, SHUT, 0, 0, 0, admin::shutdown),
    spec!("flushall", -1, W, 0, 0, 0, standard::flushall),
    spec!("flushdb", -1, W, 0, 0, 0, standard::flushall),
    spec!("cluster", -2, NONE, 0, 0, 0, cluster::cluster),
    spec!("readonly", 1, LSF, 0, 0, 0, cluster::readonly),
    spec!("readwrite", 1, LSF, 0, 0, 0, cluster::readonly),
    spec!("asking", 1, F, 0, 0, 0, cluster::asking),
];

/// Index of the command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<usize> {
    COMMANDS
        .iter()
        .position(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// True if the command named `name` writes (COMMAND's `write` flag).
pub fn writes(name: &[u8]) -> bool {
    lookup(name).is_some_and(|i| COMMANDS[i].flags.contains(&"write"))
}

fn unknown_command(args: &Args) -> String {
    let mut msg = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&args.get(0)[..args.get(0).len().min(128)])
    );
    for a in args.iter_from(1).take(8) {
        msg.push_str(&format!(
            "'{}' ",
            String::from_utf8_lossy(&a[..a.len().min(128)])
        ));
    }
    msg
}

/// Index (plus one) of the subcommand `args[1]` of command `idx` in its subcommand list, 0 if
/// it has none (for CLIENT LIST's `cmd=client|list`).
pub fn subcommand(idx: Option<usize>, args: &Args) -> usize {
    let Some(name) = idx.map(|i| COMMANDS[i].name) else {
        return 0;
    };
    if args.len() < 2 {
        return 0;
    }
    admin::subcommands(name)
        .iter()
        .position(|s| args.is(1, s))
        .map_or(0, |i| i + 1)
}

/// Runs one request, `idx` being its command's index (None if unknown).
pub fn dispatch(ctx: &mut Ctx, args: &Args, idx: Option<usize>) -> Flow {
    let Some(idx) = idx else {
        ctx.out.error(&unknown_command(args));
        return Flow::Continue;
    };
    let spec = &COMMANDS[idx];
    let n = args.len() as i64;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        ctx.out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
        return Flow::Continue;
    }
    if !ctx.conn.authenticated && !spec.flags.contains(&"no_auth") {
        ctx.out.error("NOAUTH Authentication required.");
        return Flow::Continue;
    }
    // An event named by its tag (`7:42`, the cluster form) is split into its fields, so
    // handlers see one form.
    let split;
    let args = match spec.route {
        Route::Event => {
            let fields = ctx.shared.store.layout().event_fields();
            match args.split_event_tag(1, fields) {
                None => args,
                Some(Ok(ranges)) => {
                    split = ranges;
                    &Args::new(args.buf, &split)
                }
                Some(Err(e)) => {
                    ctx.out.error(&e);
                    return Flow::Continue;
                }
            }
        }
        _ => args,
    };
    if let Some(c) = &ctx.shared.cluster {
        if let Err(e) = cluster::route(c, ctx.shared.store.layout(), spec, args) {
            ctx.out.error(&e);
            return Flow::Continue;
        }
    }
    match (spec.handler)(ctx, args) {
        Ok(flow) => flow,
        Err(msg) => {
            ctx.out.error(&msg);
            Flow::Continue
        }
    }
}

/// Parses a trailing `DURABILITY memory|persisted` option starting at `i`.
pub fn durability_option(args: &Args, i: usize) -> Result<Option<hotstore::Durability>, String> {
    if i == args.len() {
        return Ok(None);
    }
    if i + 2 == args.len() && args.is(i, "durability") {
        return args
            .str(i + 1)?
            .to_ascii_lowercase()
            .parse()
            .map(Some)
            .map_err(|e: String| format!("ERR {e}"));
    }
    Err("ERR syntax error (expected DURABILITY memory|persisted)".into())
}
