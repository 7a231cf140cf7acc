//! `RECORD.TRIGGER [AT unix_ns]` and `RECORD.STATUS`: the recorder, when the server runs one.

use super::{Args, CmdResult, Ctx, Flow};
use crate::record::RecordControl;
use std::sync::Arc;

fn recorder(ctx: &Ctx) -> Result<Arc<dyn RecordControl>, String> {
    ctx.shared.recorder.clone().ok_or_else(|| {
        "ERR this server runs no recorder (start one with `hotstore record --store DIR --serve-port PORT`)"
            .to_string()
    })
}

/// `RECORD.TRIGGER [AT unix_ns]` -> `[recording_id, "started" | "extended"]`. The recorder
/// refuses a time more than `hotstore_recorder::recorder::MAX_TRIGGER_AHEAD` (10 s) ahead of
/// its clock: the reply is then `ERR trigger refused: trigger time ... is ... s in the future`
/// (a mistyped time would otherwise swallow every later trigger). A trigger whose window
/// reaches before the recording it extends is answered `extended`; the recorder logs the
/// part not recorded and its manifest says so (`trigger_head_missing_ns`, lossy).
pub fn trigger(ctx: &mut Ctx, args: &Args) -> CmdResult {
    let at = match args.len() {
        1 => None,
        3 if args.is(1, "at") => Some(args.u64(2)?),
        _ => return Err("ERR syntax error (RECORD.TRIGGER [AT unix_ns])".into()),
    };
    let r = recorder(ctx)?;
    let (id, extended) = r
        .trigger(at)
        .map_err(|e| format!("ERR trigger refused: {e}"))?;
    ctx.out.array(2);
    ctx.out.int(id as i64);
    ctx.out
        .bulk(if extended { b"extended" } else { b"started" });
    Ok(Flow::Continue)
}

/// `RECORD.STATUS` -> a map of the recorder's counters.
pub fn status(ctx: &mut Ctx, _args: &Args) -> CmdResult {
    let pairs = recorder(ctx)?.status();
    ctx.out.map(pairs.len());
    for (k, v) in pairs {
        ctx.out.bulk(k.as_bytes());
        ctx.out.int(v);
    }
    Ok(Flow::Continue)
}
