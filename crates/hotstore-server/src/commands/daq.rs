//! DAQ commands: fragments addressed by the store's key layout, and the event lifecycle
//! (seal, claim with a lease, acknowledge, release). See docs/protocol.md.

use super::standard::wrote;
use super::{durability_option, Args, CmdResult, Ctx, Flow, WaitEvent};
use crate::error::reply_error;
use crate::resp::Reply;
use crate::session::ConnState;
use crate::shared::Shared;
use hotstore::{Ack, Claim, ClaimToken, Durability, EventId, EventState, KeyLayout};
use std::time::{Duration, Instant};

/// Lease of a claim when EVENT.NEXT names none.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Events listed by EVENT.RANGE when it names no LIMIT.
const DEFAULT_RANGE_LIMIT: usize = 1000;
/// Most claims one EVENT.NEXT COUNT hands out, and most tokens one EVENT.ACK takes.
pub const MAX_BATCH: usize = 10_000;
const NEXT_SYNTAX: &str =
    "ERR syntax error (EVENT.NEXT [LEASE ms] [BLOCK ms] [CONSUMER name] [COUNT n] [GROUP name])";

fn layout<'s>(ctx: &Ctx<'s, '_>) -> &'s KeyLayout {
    ctx.shared.store.layout()
}

/// `n` integer fields from argument `at` on.
fn numbers(args: &Args, at: usize, n: usize) -> Result<Vec<u64>, String> {
    (at..at + n)
        .map(|i| {
            args.u64(i).map_err(|_| {
                format!(
                    "ERR key field '{}' is not an unsigned integer",
                    String::from_utf8_lossy(args.get(i))
                )
            })
        })
        .collect()
}

/// The fragment key named by the layout's fields from argument 1 on.
fn fragment_key(layout: &KeyLayout, args: &Args) -> Result<Vec<u8>, String> {
    let n = layout.fields().len();
    if args.len() < 1 + n {
        return Err(format!(
            "ERR wrong number of arguments: the key layout `{layout}` has {n} fields"
        ));
    }
    layout
        .encode(&numbers(args, 1, n)?)
        .map_err(|e| format!("ERR {e}"))
}

/// The event id from the layout's event fields given as `values`.
fn event_id(layout: &KeyLayout, values: &[u64]) -> Result<EventId, String> {
    let mut all = values.to_vec();
    all.resize(layout.fields().len(), 0);
    let key = layout.encode(&all).map_err(|e| format!("ERR {e}"))?;
    Ok(EventId::from_prefix(&key[..layout.event_prefix_len()]))
}

/// The event id named by the layout's event fields from argument 1 on.
fn event_arg(layout: &KeyLayout, args: &Args) -> Result<EventId, String> {
    let n = layout.event_fields();
    if args.len() < 1 + n {
        return Err(format!(
            "ERR wrong number of arguments: events of layout `{layout}` are named by {n} fields"
        ));
    }
    event_id(layout, &numbers(args, 1, n)?)
}

/// Writes one fragment as `[field..., value]` (the fields after the event prefix).
fn write_fragment(out: &mut Reply, layout: &KeyLayout, key: &[u8], value: &[u8]) {
    let fields = layout.decode(key).unwrap_or_default();
    let suffix = fields.get(layout.event_fields()..).unwrap_or(&[]);
    out.array(suffix.len() + 1);
    for &f in suffix {
        out.uint(f);
    }
    out.bulk(value);
}

/// The event fields of an id, as integers.
pub(super) fn id_fields(layout: &KeyLayout, id: &EventId) -> Vec<u64> {
    let mut key = id.as_bytes().to_vec();
    key.resize(layout.key_len(), 0);
    let mut f = layout.decode(&key).unwrap_or_default();
    f.truncate(layout.event_fields());
    f
}

pub fn frag_put(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let n = layout(ctx).fields().len();
    if args.len() < n + 2 {
        return Err(format!(
            "ERR wrong number of arguments for 'frag.put': {n} key fields and a value"
        ));
    }
    let key = fragment_key(layout(ctx), args)?;
    let durability = durability_option(args, n + 2)?;
    // FRAG.PUT is event use: the store keeps event state from the first one on, so
    // STORE.STATS, INFO and the metrics count events before any consumer has claimed
    // (one atomic load once tracking has started).
    ctx.shared.store.track_events();
    let put = ctx
        .shared
        .store
        .put(&key, args.get(n + 1), Durability::Memory);
    answer_after_commit(ctx, &put, durability);
    put.map_err(|e| reply_error(&e))?;
    ctx.out.ok();
    Ok(Flow::Continue)
}

/// Marks the connection for its group commit before the reply to a write that succeeded, or
/// that was refused because its event is acknowledged (`-LATE`, `-ACKED`): that answer tells
/// the client to drop its data, so the acknowledgement it reports must be durable first
/// (as DEL's absence is; a power cut could otherwise bring the event back).
fn answer_after_commit(ctx: &mut Ctx, result: &hotstore::Result<()>, asked: Option<Durability>) {
    if matches!(
        result,
        Ok(()) | Err(hotstore::Error::LateFragment { .. } | hotstore::Error::EventAcknowledged(_))
    ) {
        wrote(ctx, asked);
    }
}

pub fn frag_get(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let n = layout(ctx).fields().len();
    if args.len() != n + 1 {
        return Err(format!(
            "ERR wrong number of arguments for 'frag.get': {n} key fields"
        ));
    }
    let key = fragment_key(layout(ctx), args)?;
    super::standard::reply_value(ctx, &key)
}

pub fn event_get(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let id = event_arg(layout(ctx), args)?;
    if args.len() != 1 + layout(ctx).event_fields() {
        return Err("ERR syntax error".into());
    }
    let bytes = ctx
        .shared
        .store
        .event_info(&id)
        .map_or(0, |e| e.bytes as usize);
    super::standard::check_reply_size(ctx, bytes)?;
    let fragments = ctx.shared.store.event(&id).map_err(|e| reply_error(&e))?;
    ctx.out.array(fragments.len());
    for (k, v) in &fragments {
        write_fragment(ctx.out, ctx.shared.store.layout(), k, v);
    }
    Ok(Flow::Continue)
}

pub fn event_seal(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let id = event_arg(layout(ctx), args)?;
    let durability = durability_option(args, 1 + layout(ctx).event_fields())?;
    let sealed = ctx.shared.store.seal(&id, Durability::Memory);
    answer_after_commit(ctx, &sealed, durability);
    sealed.map_err(|e| reply_error(&e))?;
    ctx.out.ok();
    Ok(Flow::Continue)
}

fn millis(args: &Args, i: usize, what: &str) -> Result<u64, String> {
    args.u64(i)
        .map_err(|_| format!("ERR {what} must be a number of milliseconds"))
}

pub fn event_next(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let mut lease = DEFAULT_LEASE;
    let mut block: Option<u64> = None;
    let mut consumer = None;
    let mut count = None;
    let mut group = None;
    let mut i = 1;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(NEXT_SYNTAX.into());
        }
        if args.is(i, "lease") {
            lease = Duration::from_millis(millis(args, i + 1, "LEASE")?.max(1));
        } else if args.is(i, "block") {
            block = Some(millis(args, i + 1, "BLOCK")?);
        } else if args.is(i, "consumer") {
            consumer = Some(args.str(i + 1)?.to_string());
        } else if args.is(i, "group") {
            group = Some(args.str(i + 1)?.to_string());
        } else if args.is(i, "count") {
            count = Some(
                args.u64(i + 1)
                    .ok()
                    .filter(|n| (1..=MAX_BATCH as u64).contains(n))
                    .ok_or_else(|| format!("ERR COUNT must be 1 to {MAX_BATCH}"))?
                    as usize,
            );
        } else {
            return Err(NEXT_SYNTAX.into());
        }
        i += 2;
    }
    let consumer = consumer.unwrap_or_else(|| ctx.conn.consumer());
    match claim_next(ctx.shared, group.as_deref(), &consumer, lease).map_err(|e| reply_error(&e))? {
        Some(claim) => {
            let batch = Batch {
                count,
                consumer: &consumer,
                group: group.as_deref(),
                lease,
            };
            write_claims(ctx.shared, ctx.conn, ctx.out, claim, &batch);
            Ok(Flow::Continue)
        }
        None => match block {
            None => {
                ctx.out.null();
                Ok(Flow::Continue)
            }
            Some(ms) => Ok(Flow::WaitEvent(WaitEvent {
                consumer,
                group,
                lease,
                count,
                deadline: (ms > 0).then(|| Instant::now() + Duration::from_millis(ms)),
            })),
        },
    }
}

/// Claims the next event of consumer group `group`, or of the default queue.
pub fn claim_next(
    shared: &Shared,
    group: Option<&str>,
    consumer: &str,
    lease: Duration,
) -> hotstore::Result<Option<Claim>> {
    match group {
        Some(g) => shared.store.next_event_in(g, consumer, lease),
        None => shared.store.next_event(consumer, lease),
    }
}

/// What one EVENT.NEXT asked for: with `count`, a reply of up to that many claims.
pub struct Batch<'a> {
    pub count: Option<usize>,
    pub consumer: &'a str,
    pub group: Option<&'a str>,
    pub lease: Duration,
}

/// Replies with `first` as one claim (no COUNT), or with an array of `first` and the events
/// READY now, up to COUNT (claimed without waiting: a batch never waits for its last ones).
pub fn write_claims(
    shared: &Shared,
    conn: &mut ConnState,
    out: &mut Reply,
    first: Claim,
    batch: &Batch,
) {
    let Some(count) = batch.count else {
        return write_claim(shared, conn, out, first);
    };
    // Fix (found in review): a batch ignored --max-reply-len (COUNT 10 of 900 kB events
    // made a 9.9 MB reply under a 1 MiB limit). It stops claiming once its reply reaches the
    // limit: the last claim may pass it, but no claim is taken and given back (that would
    // count a delivery of an event nobody received, and could park it as poisoned).
    let max = shared.config.max_reply_len;
    let mut total = reply_estimate(&first);
    let mut claims = vec![first];
    while claims.len() < count && total < max {
        match claim_next(shared, batch.group, batch.consumer, batch.lease) {
            Ok(Some(c)) => {
                total += reply_estimate(&c);
                claims.push(c);
            }
            // An error after the first claim ends the batch; the next EVENT.NEXT reports it.
            _ => break,
        }
    }
    out.array(claims.len());
    for c in claims {
        write_claim(shared, conn, out, c);
    }
}

/// About how many bytes the reply to `claim` takes: its values and 64 bytes per fragment for
/// the framing and the fragment's fields, plus the token.
fn reply_estimate(claim: &Claim) -> usize {
    claim.bytes() as usize + 64 * claim.fragment_count() as usize + 256
}

/// Writes `[token, [event fields], incomplete, fragments]` and keeps the token with the
/// connection, so the claim is released if the connection goes before acknowledging.
pub fn write_claim(shared: &Shared, conn: &mut ConnState, out: &mut Reply, claim: Claim) {
    // Made already, so not refused: counted, so that other large replies wait for it.
    shared
        .reply_memory
        .count(&mut conn.reply_charge, reply_estimate(&claim));
    let layout = shared.store.layout();
    // Fragments are counted as they are read (the array header comes first).
    let mut body = Vec::new();
    let mut count = 0usize;
    let read = {
        let mut r = Reply::new(&mut body, out.is_resp3());
        claim.for_each_fragment(|k, v| {
            write_fragment(&mut r, layout, k, v);
            count += 1;
        })
    };
    if let Err(e) = read {
        out.error(&reply_error(&e));
        return; // dropping the claim releases it
    }
    let token = super::token_text(shared.cluster.as_ref(), layout, claim.token());
    out.array(4);
    out.bulk(token.as_bytes());
    let fields = id_fields(layout, claim.event());
    out.array(fields.len());
    for f in fields {
        out.uint(f);
    }
    out.int(claim.incomplete() as i64);
    out.array(count);
    out.raw(&body);
    // Claims whose lease ended are no longer this connection's to release (a long-lived
    // consumer that lets leases expire would otherwise grow the map without bound). Dropped
    // once the map doubled since the last time (found in review: a scan per claim made a
    // batch of 10 000 cost more the more claims the connection held).
    if conn.claims.len() >= conn.prune_claims_at {
        let now = Instant::now();
        conn.claims.retain(|_, (_, until)| *until > now);
        conn.prune_claims_at = (2 * conn.claims.len()).max(crate::conn::CLAIMS_PRUNE_MIN);
    }
    let until = claim.lease_until();
    conn.claims.insert(token, (claim.into_token(), until));
}

fn token_arg(args: &Args) -> Result<(String, ClaimToken), String> {
    token_at(args, 1)
}

fn token_at(args: &Args, i: usize) -> Result<(String, ClaimToken), String> {
    let text = args.str(i)?;
    let token = super::strip_tag(text)
        .parse::<ClaimToken>()
        .map_err(|_| format!("ERR invalid claim token '{text}'"))?;
    Ok((text.to_string(), token))
}

const ACK_SYNTAX: &str =
    "ERR EVENT.ACK token [token ...] REMOVE|KEEP [DURABILITY memory|persisted] [GROUP name]";

/// EVENT.ACK token [token ...] REMOVE|KEEP [DURABILITY d]: one token answers +OK or an error;
/// several answer an array with one +OK or error per token, in order. However many, the
/// acknowledgements share one group commit (the reply waits for it, as for one).
pub fn event_ack(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let Some(at) = (2..args.len()).find(|&i| args.is(i, "remove") || args.is(i, "keep")) else {
        return Err(ACK_SYNTAX.into());
    };
    let ack = if args.is(at, "remove") {
        Ack::Remove
    } else {
        Ack::Keep
    };
    let tokens = at - 1;
    if tokens > MAX_BATCH {
        return Err(format!("ERR at most {MAX_BATCH} tokens in one EVENT.ACK"));
    }
    // Options after REMOVE|KEEP: DURABILITY d, GROUP name (checks that every token is that
    // group's: a token names its group, so this guards against mixing up consumers).
    let mut durability = None;
    let mut group = None;
    let mut i = at + 1;
    while i < args.len() {
        if args.is(i, "group") && i + 1 < args.len() {
            group = Some(args.str(i + 1)?);
            i += 2;
        } else if args.is(i, "durability") && i + 1 < args.len() {
            durability = Some(
                args.str(i + 1)?
                    .to_ascii_lowercase()
                    .parse::<Durability>()
                    .map_err(|e| format!("ERR {e}"))?,
            );
            i += 2;
        } else {
            return Err(ACK_SYNTAX.into());
        }
    }
    let group_id = match group {
        Some(name) => Some(
            ctx.shared
                .store
                .groups()
                .into_iter()
                .find(|g| g.name == name)
                .map(|g| g.id)
                .ok_or_else(|| reply_error(&hotstore::Error::NoSuchGroup(name.to_string())))?,
        ),
        None => None,
    };
    // Every token parsed before any is touched. Fix (found in review): a bad token after a
    // good one aborted the command after the good one left the connection's claims, so a
    // disconnect no longer gave it back and it stayed held for its whole lease.
    let parsed: Vec<(String, ClaimToken)> = (1..at)
        .map(|i| token_at(args, i))
        .collect::<Result<_, _>>()?;
    // Tokens of another group answer an error of their own (and stay the connection's); the
    // others are acknowledged.
    let (mine, foreign): (Vec<usize>, Vec<usize>) =
        (0..parsed.len()).partition(|&i| group_id.is_none_or(|id| parsed[i].1.group == id));
    for &i in &mine {
        ctx.conn.claims.remove(&parsed[i].0);
    }
    let parsed: Vec<ClaimToken> = parsed.into_iter().map(|(_, t)| t).collect();
    let batch: Vec<ClaimToken> = mine.iter().map(|&i| parsed[i].clone()).collect();
    // Persisted: the connection's group commit (a flush) follows before the reply.
    let acked = if ctx.shared.durability(durability) == Durability::Persisted {
        ctx.shared.store.ack_many_then_flush(&batch, ack)
    } else {
        ctx.shared.store.ack_many(&batch, ack, Durability::Memory)
    };
    let mut results: Vec<Result<(), String>> = vec![Ok(()); parsed.len()];
    for (&i, r) in mine.iter().zip(acked) {
        results[i] = r.map_err(|e| reply_error(&e));
    }
    for i in foreign {
        results[i] = Err(format!(
            "ERR the claim {} belongs to another group than {}",
            parsed[i],
            group.unwrap_or_default()
        ));
    }
    // Also when every one answered -ACKED (see `answer_after_commit`).
    if !mine.is_empty() {
        wrote(ctx, durability);
    }
    if let [only] = &results[..] {
        only.clone()?;
        ctx.out.ok();
        return Ok(Flow::Continue);
    }
    ctx.out.array(results.len());
    for r in results {
        match r {
            Ok(()) => ctx.out.ok(),
            Err(e) => ctx.out.error(&e),
        }
    }
    Ok(Flow::Continue)
}

/// EVENT.CLAIM run event [LEASE ms] [CONSUMER name] [GROUP name]: claims a poisoned event by
/// its id (in the default queue, or in the group); the reply is EVENT.NEXT's.
pub fn event_claim(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let layout = layout(ctx);
    let n = layout.event_fields();
    let syntax =
        || "ERR syntax error (EVENT.CLAIM <event fields> [LEASE ms] [CONSUMER name] [GROUP name])";
    if args.len() < 1 + n || !(args.len() - 1 - n).is_multiple_of(2) {
        return Err(syntax().into());
    }
    let id = event_arg(layout, args)?;
    let mut lease = DEFAULT_LEASE;
    let mut consumer = None;
    let mut group = None;
    for i in (1 + n..args.len()).step_by(2) {
        if args.is(i, "lease") {
            lease = Duration::from_millis(millis(args, i + 1, "LEASE")?.max(1));
        } else if args.is(i, "consumer") {
            consumer = Some(args.str(i + 1)?.to_string());
        } else if args.is(i, "group") {
            group = Some(args.str(i + 1)?);
        } else {
            return Err(syntax().into());
        }
    }
    let consumer = consumer.unwrap_or_else(|| ctx.conn.consumer());
    let store = &ctx.shared.store;
    let claim = match group {
        Some(g) => store.claim_event_in(g, &id, &consumer, lease),
        None => store.claim_event(&id, &consumer, lease),
    }
    .map_err(|e| reply_error(&e))?;
    write_claim(ctx.shared, ctx.conn, ctx.out, claim);
    Ok(Flow::Continue)
}

/// EVENT.PENDING [COUNT n] [GROUP name]: the claims held now (of the default queue, or of
/// the group), oldest first, each as `[token, consumer, held ms, lease left ms, deliveries]`.
pub fn event_pending(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let syntax = || "ERR syntax error (EVENT.PENDING [COUNT n] [GROUP name])";
    let mut limit = DEFAULT_RANGE_LIMIT;
    let mut group = None;
    if args.len().is_multiple_of(2) {
        return Err(syntax().into());
    }
    for i in (1..args.len()).step_by(2) {
        if args.is(i, "count") {
            limit = args
                .u64(i + 1)
                .ok()
                .filter(|n| (1..=MAX_BATCH as u64).contains(n))
                .ok_or_else(|| format!("ERR COUNT must be 1 to {MAX_BATCH}"))?
                as usize;
        } else if args.is(i, "group") {
            group = Some(args.str(i + 1)?);
        } else {
            return Err(syntax().into());
        }
    }
    let pending = match group {
        Some(g) => ctx
            .shared
            .store
            .pending_in(g, limit)
            .map_err(|e| reply_error(&e))?,
        None => ctx.shared.store.pending(limit),
    };
    let (cluster, layout) = (ctx.shared.cluster.as_ref(), ctx.shared.store.layout());
    let out = &mut *ctx.out;
    out.array(pending.len());
    for p in pending {
        out.array(5);
        out.bulk(super::token_text(cluster, layout, &p.token).as_bytes());
        out.bulk(p.consumer.as_bytes());
        out.int(p.held.as_millis() as i64);
        out.int(p.lease_left.as_millis() as i64);
        out.int(i64::from(p.deliveries));
    }
    Ok(Flow::Continue)
}

/// EVENT.GROUP CREATE name [REQUIRED|OPTIONAL] | EVENT.GROUP DESTROY name.
pub fn event_group(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let syntax = || {
        "ERR syntax error (EVENT.GROUP CREATE name [REQUIRED|OPTIONAL] | EVENT.GROUP DESTROY name)"
    };
    let store = &ctx.shared.store;
    let name = args.str(2)?;
    let result = if args.is(1, "create") {
        let required = match args.len() {
            3 => true,
            4 if args.is(3, "required") => true,
            4 if args.is(3, "optional") => false,
            _ => return Err(syntax().into()),
        };
        store.create_group(name, required)
    } else if args.is(1, "destroy") && args.len() == 3 {
        store.destroy_group(name)
    } else {
        return Err(syntax().into());
    };
    result.map_err(|e| reply_error(&e))?;
    ctx.out.ok();
    Ok(Flow::Continue)
}

/// EVENT.GROUPS: every group as a flat field/value array (as XINFO GROUPS).
pub fn event_groups(ctx: &mut Ctx, _args: &Args) -> CmdResult {
    let groups = ctx.shared.store.groups();
    let out = &mut *ctx.out;
    let ms = |d: Option<Duration>| d.map_or(-1, |d| d.as_millis() as i64);
    out.array(groups.len());
    for g in groups {
        out.array(20);
        out.bulk(b"name");
        out.bulk(g.name.as_bytes());
        out.bulk(b"required");
        out.int(i64::from(g.required));
        out.bulk(b"consumers");
        out.int(g.consumers as i64);
        out.bulk(b"pending");
        out.int(g.pending as i64);
        out.bulk(b"lag");
        out.int(g.lag as i64);
        out.bulk(b"poisoned");
        out.int(g.poisoned as i64);
        out.bulk(b"delivered");
        out.int(g.delivered_total as i64);
        out.bulk(b"acked");
        out.int(g.acked_total as i64);
        out.bulk(b"oldest-waiting-ms");
        out.int(ms(g.oldest_waiting));
        out.bulk(b"oldest-pending-ms");
        out.int(ms(g.oldest_pending));
    }
    Ok(Flow::Continue)
}

/// EVENT.CONSUMERS group: the group's consumers as flat field/value arrays (as XINFO
/// CONSUMERS): name, pending, idle ms.
pub fn event_consumers(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let consumers = ctx
        .shared
        .store
        .consumers(args.str(1)?)
        .map_err(|e| reply_error(&e))?;
    let out = &mut *ctx.out;
    out.array(consumers.len());
    for c in consumers {
        out.array(6);
        out.bulk(b"name");
        out.bulk(c.name.as_bytes());
        out.bulk(b"pending");
        out.int(c.pending as i64);
        out.bulk(b"idle");
        out.int(c.idle.as_millis() as i64);
    }
    Ok(Flow::Continue)
}

pub fn event_release(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let (text, token) = token_arg(args)?;
    let result = ctx.shared.store.release(&token);
    ctx.conn.claims.remove(&text);
    if matches!(result, Err(hotstore::Error::EventAcknowledged(_))) {
        answer_after_commit(ctx, &result, None);
    }
    result.map_err(|e| reply_error(&e))?;
    ctx.out.ok();
    Ok(Flow::Continue)
}

/// EVENT.RANGE <event fields but the last> from to [LIMIT n]: events with the leading fields
/// given and the last event field in [from, to).
pub fn event_range(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let layout = layout(ctx).clone();
    let n = layout.event_fields();
    let usage = || {
        format!(
            "ERR EVENT.RANGE takes {} field(s), then from and to, then [LIMIT n]",
            n - 1
        )
    };
    if args.len() != n + 2 && args.len() != n + 4 {
        return Err(usage());
    }
    let fixed = numbers(args, 1, n - 1)?;
    let from = args.u64(n)?;
    let to = args.u64(n + 1)?;
    let mut limit = DEFAULT_RANGE_LIMIT;
    if args.len() == n + 4 {
        if !args.is(n + 2, "limit") {
            return Err(usage());
        }
        // Fix (found in review): LIMIT 0 walked the whole store, and a huge LIMIT was no
        // limit: the same bound as a batch of claims.
        limit = Some(args.u64(n + 3)?)
            .filter(|l| (1..=MAX_BATCH as u64).contains(l))
            .ok_or_else(|| format!("ERR LIMIT must be 1 to {MAX_BATCH}"))? as usize;
    }
    let with = |last: u64| {
        let mut v = fixed.clone();
        v.push(last);
        event_id(&layout, &v)
    };
    let (lo, hi) = (with(from)?, with(to)?);
    let events = ctx.shared.store.events(&lo, Some(&hi), limit);
    ctx.out.array(events.len());
    for e in events {
        let f = id_fields(&layout, &e.id);
        ctx.out.array(5);
        ctx.out.uint(f.last().copied().unwrap_or(0));
        ctx.out.bulk(match e.state {
            EventState::Open => b"open",
            EventState::Ready => b"ready",
            EventState::Claimed => b"claimed",
            EventState::Kept => b"kept",
            EventState::Poisoned => b"poisoned",
        });
        ctx.out.int(e.fragments as i64);
        ctx.out.int(e.bytes as i64);
        ctx.out.int(e.incomplete as i64);
    }
    Ok(Flow::Continue)
}

pub fn store_stats(ctx: &mut Ctx, _args: &Args) -> CmdResult {
    let s = ctx.shared.store.stats();
    let e = &s.events;
    let power_safe = s.tiers.iter().filter(|t| t.survives_power_cut).count();
    let w = &s.waits;
    let created = s
        .tiers
        .iter()
        .fold(hotstore::FileCreation::default(), |a, t| {
            hotstore::FileCreation {
                files: a.files + t.created.files,
                bytes: a.bytes + t.created.bytes,
                total_ns: a.total_ns + t.created.total_ns,
            }
        });
    let pairs: [(&str, u64); 36] = [
        ("entries", s.entries),
        ("live_bytes", s.live_bytes),
        ("dead_bytes", s.dead_bytes),
        ("capacity_bytes", s.capacity_bytes),
        ("file_bytes", s.file_bytes),
        ("puts", s.puts),
        ("removes", s.removes),
        ("full_errors", s.full_errors),
        ("events_open", e.open),
        ("events_ready", e.ready),
        ("events_claimed", e.claimed),
        ("events_kept", e.kept),
        ("events_poisoned", e.poisoned),
        ("events_incomplete", e.incomplete),
        ("late_fragments", e.late_fragments_total),
        ("acked_intervals", e.acked_intervals),
        ("acked_forgotten", e.acked_forgotten_total),
        ("events_removed", e.removed_total),
        ("events_kept_total", e.kept_total),
        ("leases_expired", e.leases_expired_total),
        ("claims_released", e.released_total),
        ("events_timed_out", e.timed_out_total),
        ("segment_waits", w.segment.count),
        ("segment_wait_ns", w.segment.total_ns),
        ("full_waits", w.full.count),
        ("full_wait_ns", w.full.total_ns),
        ("sync_waits", w.sync.count),
        ("sync_wait_ns", w.sync.total_ns),
        ("files_created", created.files),
        ("file_create_bytes", created.bytes),
        ("file_create_ns", created.total_ns),
        ("reserve_bytes", s.reserve_bytes),
        ("guaranteed_live_bytes", s.guaranteed_live_bytes),
        ("relocated_bytes", s.relocation.bytes),
        ("offloaded_bytes", s.relocation.offloaded_bytes),
        ("written_bytes", s.written_bytes),
    ];
    ctx.out.map(pairs.len() + 3);
    for (k, v) in pairs {
        ctx.out.bulk(k.as_bytes());
        ctx.out.int(v as i64);
    }
    ctx.out.bulk(b"power_safe_tiers");
    ctx.out.int(power_safe as i64);
    ctx.out.bulk(b"tiers");
    ctx.out.int(s.tiers.len() as i64);
    // What makes an event complete (0: only EVENT.SEAL or the timeout): a remote producer
    // (minidaq --remote) checks it matches its fragments per event.
    ctx.out.bulk(b"expected_fragments");
    ctx.out.int(i64::from(
        ctx.shared.store.event_policy(None).expected_fragments,
    ));
    Ok(Flow::Continue)
}
