//! Key-value commands, as Redis answers them for strings.

use super::{parse_u64, Args, CmdResult, Ctx, Flow};
use crate::error::reply_error;
use crate::glob::glob_match;
use hotstore::Durability;

/// Writes go to the store at memory speed; `Persisted` is met by the group commit before the
/// reply is sent (see `conn::send`).
pub(super) fn wrote(ctx: &mut Ctx, asked: Option<Durability>) {
    if ctx.shared.durability(asked) == Durability::Persisted {
        ctx.conn.needs_sync = true;
    }
}

pub fn get(ctx: &mut Ctx, args: &Args) -> CmdResult {
    reply_value(ctx, args.get(1))
}

/// Replies with the value of `key` (nil if missing), a large one only if the server-wide
/// reply memory has room for it (GET, FRAG.GET).
pub(super) fn reply_value(ctx: &mut Ctx, key: &[u8]) -> CmdResult {
    let Ctx { shared, conn, out } = ctx;
    let got = shared
        .store
        .get_with(key, |v| {
            shared
                .reply_memory
                .reserve(&mut conn.reply_charge, v.len())?;
            out.bulk(v);
            Ok::<(), String>(())
        })
        .map_err(|e| reply_error(&e))?;
    match got {
        Some(written) => written?,
        None => out.null(),
    }
    Ok(Flow::Continue)
}

pub fn set(ctx: &mut Ctx, args: &Args) -> CmdResult {
    if args.len() > 3 {
        return Err(format!(
            "ERR hotstore does not support SET option '{}'",
            String::from_utf8_lossy(args.get(3))
        ));
    }
    ctx.shared
        .store
        .put(args.get(1), args.get(2), Durability::Memory)
        .map_err(|e| reply_error(&e))?;
    wrote(ctx, None);
    ctx.out.ok();
    Ok(Flow::Continue)
}

pub fn mset(ctx: &mut Ctx, args: &Args) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err("ERR wrong number of arguments for 'mset' command".into());
    }
    // Refuse bad input before writing anything. Each pair is then its own record: a crash
    // (or a full store) mid-MSET can leave a prefix of the pairs; the reply is only sent once
    // all are durable.
    for i in (1..args.len()).step_by(2) {
        let (k, v) = (args.get(i), args.get(i + 1));
        if k.is_empty() || k.len() > hotstore::MAX_KEY_LEN {
            return Err(format!(
                "ERR MSET key {} is empty or longer than {} bytes: nothing written",
                i.div_ceil(2),
                hotstore::MAX_KEY_LEN
            ));
        }
        if v.len() as u64 > hotstore::MAX_VALUE_LEN {
            return Err("ERR MSET value too large: nothing written".into());
        }
    }
    for i in (1..args.len()).step_by(2) {
        ctx.shared
            .store
            .put(args.get(i), args.get(i + 1), Durability::Memory)
            .map_err(|e| reply_error(&e))?;
        wrote(ctx, None);
    }
    ctx.out.ok();
    Ok(Flow::Continue)
}

pub fn mget(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let total: usize = args
        .iter_from(1)
        .map(|k| ctx.shared.store.value_len(k).unwrap_or(0))
        .sum();
    check_reply_size(ctx, total)?;
    ctx.out.array(args.len() - 1);
    let keys: Vec<&[u8]> = args.iter_from(1).collect();
    let out = &mut *ctx.out;
    // Looked up together: their memory misses overlap. Keys that cannot exist (empty, too
    // long) read as missing, as in Redis.
    ctx.shared.store.get_many_with(&keys, |_, got| match got {
        Ok(Some(v)) => out.bulk(v),
        Ok(None) => out.null(),
        Err(e) => out.error(&reply_error(&e)),
    });
    Ok(Flow::Continue)
}

pub fn del(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let mut removed = 0;
    for key in args.iter_from(1) {
        if key.is_empty() || key.len() > hotstore::MAX_KEY_LEN {
            continue;
        }
        // Synced even when nothing was removed: the absence reported must be durable too
        // (another client's removal of the key may still await its sync; engine invariant 10).
        wrote(ctx, None);
        if ctx
            .shared
            .store
            .remove(key, Durability::Memory)
            .map_err(|e| reply_error(&e))?
        {
            removed += 1;
        }
    }
    ctx.out.int(removed);
    Ok(Flow::Continue)
}

/// One reply is built whole before it is sent: refuse one that would buffer more than
/// `--max-reply-len` (a bounded output buffer per client, as Redis's output limits), or more
/// than the server-wide reply memory has room for.
pub(super) fn check_reply_size(ctx: &mut Ctx, bytes: usize) -> Result<(), String> {
    let max = ctx.shared.config.max_reply_len;
    if bytes > max {
        return Err(format!(
            "ERR reply of {bytes} bytes exceeds max-reply-len ({max}): ask for fewer values"
        ));
    }
    ctx.shared
        .reply_memory
        .reserve(&mut ctx.conn.reply_charge, bytes)
}

pub fn exists(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let n = args
        .iter_from(1)
        .filter(|k| ctx.shared.store.contains(k))
        .count();
    ctx.out.int(n as i64);
    Ok(Flow::Continue)
}

pub fn strlen(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let n = ctx.shared.store.value_len(args.get(1)).unwrap_or(0);
    ctx.out.int(n as i64);
    Ok(Flow::Continue)
}

pub fn type_(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let t = if ctx.shared.store.contains(args.get(1)) {
        "string"
    } else {
        "none"
    };
    ctx.out.simple(t);
    Ok(Flow::Continue)
}

pub fn dbsize(ctx: &mut Ctx, _args: &Args) -> CmdResult {
    ctx.out.int(ctx.shared.store.stats().entries as i64);
    Ok(Flow::Continue)
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE string]: walks keys in key order, COUNT keys
/// per call (fewer returned when MATCH filters them).
pub fn scan(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let cursor = args.u64(1).map_err(|_| "ERR invalid cursor".to_string())?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut only_strings = true;
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err("ERR syntax error".into());
        }
        if args.is(i, "match") {
            pattern = Some(args.get(i + 1));
        } else if args.is(i, "count") {
            count = parse_u64(args.get(i + 1))
                .filter(|&n| n >= 1)
                .ok_or("ERR value is out of range, must be positive")? as usize;
        } else if args.is(i, "type") {
            only_strings = args.is(i + 1, "string");
        } else {
            return Err("ERR syntax error".into());
        }
        i += 2;
    }
    let from =
        if cursor == 0 {
            Vec::new()
        } else {
            let mut k =
                ctx.shared.scans.lock().get(cursor).ok_or(
                    "ERR invalid cursor (unknown or expired: start again from 0)".to_string(),
                )?;
            k.push(0); // the next key after it
            k
        };
    // COUNT is a hint (as in Redis): at most 2^20 keys, and no more than fit
    // --max-reply-len at the longest key length (found in review: it was not checked).
    let fit = ctx.shared.config.max_reply_len / (hotstore::MAX_KEY_LEN + 16);
    let count = count.min(1 << 20).min(fit.max(1));
    let batch = if only_strings {
        ctx.shared.store.range_keys(&from, None, count)
    } else {
        Vec::new()
    };
    let next = if batch.len() < count {
        0
    } else {
        let last = batch.last().map(|(k, _)| k.clone()).unwrap_or_default();
        ctx.shared.scans.lock().save(last)
    };
    let keys: Vec<&[u8]> = batch
        .iter()
        .map(|(k, _)| k.as_slice())
        .filter(|k| pattern.is_none_or(|p| glob_match(p, k)))
        .collect();
    ctx.out.array(2);
    ctx.out.bulk(next.to_string().as_bytes());
    ctx.out.array(keys.len());
    for k in keys {
        ctx.out.bulk(k);
    }
    Ok(Flow::Continue)
}

/// FLUSHALL / FLUSHDB [ASYNC|SYNC] (one database: the same): removes every key, fragments
/// included, each as DEL would (a durable removal; an event goes with its last fragment, a
/// claimed one once its claim settles). Refused when the server runs with `disable-flush`, so
/// a production buffer cannot be emptied by a stray command.
pub fn flushall(ctx: &mut Ctx, args: &Args) -> CmdResult {
    match args.len() {
        1 => {}
        2 if args.is(1, "async") || args.is(1, "sync") => {}
        _ => return Err("ERR syntax error".into()),
    }
    if ctx.shared.config.disable_flush {
        return Err(format!(
            "ERR {} is disabled on this server (disable-flush): it holds a DAQ buffer; \
             restart it without --disable-flush to allow it",
            String::from_utf8_lossy(args.get(0)).to_uppercase()
        ));
    }
    const BATCH: usize = 1024;
    let mut from = Vec::new();
    loop {
        let batch = ctx.shared.store.range_keys(&from, None, BATCH);
        for (key, _) in &batch {
            ctx.shared
                .store
                .remove(key, Durability::Memory)
                .map_err(|e| reply_error(&e))?;
        }
        match batch.last() {
            Some((last, _)) if batch.len() == BATCH => {
                from = last.clone();
                from.push(0); // the next key after it
            }
            _ => break,
        }
    }
    wrote(ctx, None);
    ctx.out.ok();
    Ok(Flow::Continue)
}
