//! One client connection: read, parse and run every complete request in the buffer, then
//! send the replies in one write (pipelining), then read again.
//!
//! Back-pressure: a connection reads only when it has no complete request left, so at most
//! one read buffer of requests waits per client; replies are sent before the connection waits
//! for more input (while more is already in the socket, up to [`FLUSH_AT`] bytes of replies
//! wait for it: see [`read_now`]). A
//! request larger than the 64 KiB base buffer (or with more than [`FREE_ARGS`] arguments)
//! takes room from the server-wide buffer budget first, waiting (not reading) while other
//! clients hold it. What is charged is what is allocated: the read buffer's capacity and the
//! argument vector's (16 bytes per argument, more than the 7 bytes a one-byte argument takes
//! on the wire).
//!
//! Durability: writes go to the store with `Durability::Memory`; if any of them asked for
//! `Persisted`, the group commit runs before the replies leave. If that sync fails, the
//! connection is closed without sending them: nothing unsynced is ever acknowledged.

use crate::commands::{self, Args, Ctx, Flow, WaitEvent};
use crate::resp::{parse_request, Parsed, Reply, FREE_ARGS};
use crate::session::ConnState;
use crate::shared::{BudgetWaiters, ClientInfo, Shared, BASE_BUFFER, BUDGET_UNIT};
use bytes::{Buf, BytesMut};
use hotstore::NextEvent;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;

/// Replies are sent once this many bytes are queued, even mid-batch.
const FLUSH_AT: usize = 64 << 10;
/// A reply buffer larger than this is given back after [`SHRINK_REPLY_BUFFER_AFTER`] idle.
const SHRINK_REPLY_BUFFER_ABOVE: usize = 4 * FLUSH_AT;
/// How long a connection waits for its next request before it gives back a large reply
/// buffer.
const SHRINK_REPLY_BUFFER_AFTER: std::time::Duration = std::time::Duration::from_millis(500);
/// Claims a connection holds before it first drops the expired ones.
pub const CLAIMS_PRUNE_MIN: usize = 1024;

/// Serves one connection until it closes, the client quits or the server stops.
pub async fn serve<S>(shared: Arc<Shared>, mut stream: S, info: Arc<ClientInfo>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut state = ConnState {
        info,
        resp3: false,
        authenticated: shared.config.requirepass.is_none(),
        needs_sync: false,
        unsynced: Vec::new(),
        claims: HashMap::new(),
        prune_claims_at: CLAIMS_PRUNE_MIN,
        reply_charge: None,
    };
    shared.metrics.connections_total.inc();
    let end = run(&shared, &mut stream, &mut state).await;
    // Claims held by a connection go back to READY when it goes.
    for (token, _) in state.claims.values() {
        let _ = shared.store.release(token);
    }
    if matches!(end, Ok(End::Refused)) {
        linger(&shared, &mut stream).await;
    }
    shared.clients.unregister(state.info.id);
}

/// True on the server's multi-threaded runtime, where `block_in_place` hands this worker's
/// other connections to another thread (elsewhere it would panic).
fn on_worker_pool() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Why the loop ended (all are normal ends of a connection).
enum End {
    Closed,
    Quit,
    /// A request was refused with a protocol error: close after [`linger`].
    Refused,
}

async fn run<S>(shared: &Arc<Shared>, stream: &mut S, state: &mut ConnState) -> std::io::Result<End>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut inbuf = BytesMut::with_capacity(BASE_BUFFER);
    let mut out: Vec<u8> = Vec::with_capacity(BASE_BUFFER);
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let mut charge = Charge::default();
    let mut shutdown = shared.shutdown.subscribe();
    let idle = shared.config.idle_timeout();
    // The buffer's first request was found incomplete: the next parse resumes after the
    // arguments already parsed (a request arriving in many pieces is parsed once).
    let mut resume = false;
    loop {
        // Run every complete request in the buffer.
        loop {
            let parsed = parse_request(&mut inbuf, &shared.limits, &mut ranges, resume);
            resume = matches!(
                parsed,
                Ok(Parsed::Incomplete { .. } | Parsed::NeedArgs { .. })
            );
            match parsed {
                Ok(Parsed::Request { consumed }) => {
                    if !shared.store.events_tracked() && is_event_use(&inbuf, &ranges) {
                        // The first event use builds the event table: a pass over every key
                        // (seconds on a store of 100 M fragments), which would hold this
                        // worker and every connection it serves. Run on a blocking thread,
                        // once: other connections wait for it without a thread each.
                        shared
                            .events_built
                            .get_or_init(|| async {
                                let store = shared.store.clone();
                                let _ =
                                    tokio::task::spawn_blocking(move || store.track_events()).await;
                            })
                            .await;
                    }
                    let flow = if ranges.is_empty() {
                        Flow::Continue
                    } else if shared.store.short_of_room()
                        && commands::writes(&inbuf[ranges[0].clone()])
                        && on_worker_pool()
                    {
                        // A write may now wait while maintenance relocates records for room
                        // (tens of milliseconds per segment): the worker's other connections
                        // move to another thread meanwhile (reads never wait: they stay).
                        // Found in a full-device campaign: a PING waited 14.6 s behind a SET
                        // on a full store.
                        shared.metrics.off_worker.inc();
                        tokio::task::block_in_place(|| {
                            execute(shared, state, &inbuf, &ranges, &mut out)
                        })
                    } else {
                        execute(shared, state, &inbuf, &ranges, &mut out)
                    };
                    inbuf.advance(consumed);
                    match flow {
                        Flow::Continue => {}
                        Flow::Close => {
                            send(shared, state, stream, &mut out).await?;
                            return Ok(End::Quit);
                        }
                        Flow::Shutdown => {
                            send(shared, state, stream, &mut out).await?;
                            shared.request_shutdown();
                            return Ok(End::Quit);
                        }
                        Flow::WaitEvent(w) => {
                            send(shared, state, stream, &mut out).await?;
                            if !wait_event(shared, state, w, &mut out, stream, &mut inbuf).await {
                                return Ok(End::Closed);
                            }
                        }
                    }
                    if out.len() >= FLUSH_AT {
                        send(shared, state, stream, &mut out).await?;
                    }
                }
                Ok(Parsed::NeedArgs { count }) => {
                    // Room for more argument ranges, charged before it is allocated; grown
                    // geometrically so a request is re-parsed from where it stopped only
                    // O(log n) times.
                    send(shared, state, stream, &mut out).await?;
                    let want = count.min(ranges.capacity().max(FREE_ARGS).saturating_mul(2));
                    let bytes = extra_bytes(inbuf.capacity(), want);
                    match charge_for(shared, &state.info, &mut charge, bytes, &mut shutdown).await {
                        Ok(()) => ranges.reserve_exact(want - ranges.len()),
                        Err(Grow::Stopping) => return Ok(End::Closed),
                        Err(e @ (Grow::TooLarge | Grow::Exhausted)) => {
                            return refuse_too_large(shared, state, stream, &mut out, e).await
                        }
                    }
                    publish_memory(state, &inbuf, &ranges);
                }
                Ok(Parsed::Incomplete { need }) => {
                    if need > inbuf.capacity() {
                        // Reply to what ran before waiting for buffer room. Within the base
                        // buffer nothing waits (no budget is taken), and those replies may
                        // wait for the rest of their batch like the others (below).
                        if need > BASE_BUFFER {
                            send(shared, state, stream, &mut out).await?;
                        }
                        match grow(
                            shared,
                            &state.info,
                            &mut charge,
                            &mut inbuf,
                            ranges.capacity(),
                            need,
                            &mut shutdown,
                        )
                        .await
                        {
                            Ok(()) => {}
                            Err(Grow::Stopping) => return Ok(End::Closed),
                            Err(e @ (Grow::TooLarge | Grow::Exhausted)) => {
                                return refuse_too_large(shared, state, stream, &mut out, e).await
                            }
                        }
                    }
                    break;
                }
                Err(e) => {
                    shared.metrics.error("protocol");
                    Reply::new(&mut out, state.resp3).error_bytes(&e.reply_text());
                    send(shared, state, stream, &mut out).await?;
                    return Ok(End::Refused);
                }
            }
        }
        // The rest of a pipelined batch may already be in the socket (a 64 KiB buffer holds
        // six 10 KiB SETs of a pipeline of 16): read it before replying, so that the whole
        // batch shares one send and, for Persisted writes, one group commit.
        let defer =
            !out.is_empty() && out.len() < FLUSH_AT && (state.needs_sync || !inbuf.is_empty());
        if !defer {
            send(shared, state, stream, &mut out).await?;
        }
        // A large request is done: give its memory back.
        if inbuf.is_empty() && charge.units > 0 {
            inbuf = BytesMut::with_capacity(BASE_BUFFER);
            ranges = Vec::new();
            charge = Charge::default();
        }
        if inbuf.capacity() - inbuf.len() < 4096 {
            // A request of unknown size (many small arguments) grows the buffer, charged to
            // the budget beyond the base like a large value; by half its size, so that the
            // copies stay linear in the request's size.
            let want = inbuf.len() + (BASE_BUFFER / 2).max(inbuf.len() / 2);
            match grow(
                shared,
                &state.info,
                &mut charge,
                &mut inbuf,
                ranges.capacity(),
                want,
                &mut shutdown,
            )
            .await
            {
                Ok(()) => {}
                Err(Grow::Stopping) => return Ok(End::Closed),
                Err(e @ (Grow::TooLarge | Grow::Exhausted)) => {
                    return refuse_too_large(shared, state, stream, &mut out, e).await
                }
            }
        }
        if defer {
            match read_now(stream, &mut inbuf) {
                Some(Ok(n)) if n > 0 => {
                    shared.metrics.bytes_in.inc_by(n as u64);
                    publish_memory(state, &inbuf, &ranges);
                    continue;
                }
                // End of input or an error: answer what ran first, as without deferral.
                Some(_) | None => send(shared, state, stream, &mut out).await?,
            }
        }
        let read = async {
            match idle {
                Some(t) => tokio::time::timeout(t, stream.read_buf(&mut inbuf))
                    .await
                    .unwrap_or(Ok(0)),
                None => stream.read_buf(&mut inbuf).await,
            }
        };
        // Fix (found in review): a connection kept the capacity of its largest reply for its
        // whole life (20 idle clients that had read one 100 MiB value held 2 GiB). Given
        // back once it has waited a while for its next request, not after every reply (a
        // client reading large values one after another would pay a new buffer each time).
        let big_reply_buffer = out.capacity() > SHRINK_REPLY_BUFFER_ABOVE;
        tokio::select! {
            n = read => {
                let n = n?;
                if n == 0 {
                    return Ok(End::Closed);
                }
                shared.metrics.bytes_in.inc_by(n as u64);
                publish_memory(state, &inbuf, &ranges);
            }
            _ = tokio::time::sleep(SHRINK_REPLY_BUFFER_AFTER), if big_reply_buffer => {
                // Reads are cancel-safe: the next pass of the loop reads again.
                out = Vec::with_capacity(BASE_BUFFER);
            }
            _ = shutdown.wait_for(|stop| *stop) => return Ok(End::Closed),
        }
    }
}

/// Reads what the socket holds now, without waiting: `None` if nothing is there yet.
///
/// Fix (issue 16): a pipeline of 16 SETs of 10 KiB arrives in three reads of the 64 KiB
/// buffer, and the replies of each read were sent (after a group commit each, for
/// Persisted writes) before the next read: three syncs per batch where one covers it.
fn read_now<S>(stream: &mut S, inbuf: &mut BytesMut) -> Option<std::io::Result<usize>>
where
    S: AsyncRead + Unpin,
{
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut read = std::pin::pin!(stream.read_buf(inbuf));
    // A no-op waker: if nothing is ready the future is dropped (reads are cancel-safe) and
    // the caller awaits a new read, which registers the real waker.
    match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

/// Read-buffer memory this connection holds from the server-wide budget (beyond its base).
#[derive(Default)]
struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    units: usize,
    /// Told when the permit is given back (connections waiting for the budget look again).
    freed: Option<Arc<tokio::sync::Notify>>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            drop(p);
            if let Some(n) = &self.freed {
                n.notify_waiters();
            }
        }
    }
}

enum Grow {
    /// More than the whole budget: it could never be read.
    TooLarge,
    /// The rest of the budget is held by connections that all wait for more of it.
    Exhausted,
    /// The server is stopping.
    Stopping,
}

/// Bytes a connection holds beyond what every connection has without asking the budget: read
/// buffer capacity past [`BASE_BUFFER`], argument ranges past [`FREE_ARGS`].
fn extra_bytes(buffer_capacity: usize, ranges_capacity: usize) -> usize {
    buffer_capacity.saturating_sub(BASE_BUFFER)
        + ranges_capacity.saturating_sub(FREE_ARGS) * std::mem::size_of::<Range<usize>>()
}

/// Makes the connection's charge cover `bytes` beyond the base, waiting (reading nothing)
/// while other clients hold the budget.
async fn charge_for(
    shared: &Shared,
    info: &ClientInfo,
    charge: &mut Charge,
    bytes: usize,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), Grow> {
    let units = bytes.div_ceil(BUDGET_UNIT);
    if units > shared.buffer_budget_units {
        return Err(Grow::TooLarge);
    }
    if units <= charge.units {
        return Ok(());
    }
    let extra = u32::try_from(units - charge.units).map_err(|_| Grow::TooLarge)?;
    // Permits are taken whole (`try_acquire`), never accumulated while waiting, so the units
    // held by waiters are known exactly: when they are all the units held, no one will give
    // any back (each waiter holds part of a request it cannot finish), and a waiter holding
    // some is refused so that the others can go on.
    let mut waiting: Option<WaitingGuard> = None;
    loop {
        let freed = shared.buffer_freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        {
            let mut w = shared.buffer_waiters.lock();
            match shared.buffer_budget.clone().try_acquire_many_owned(extra) {
                Ok(more) => {
                    if let Some(g) = waiting.take() {
                        g.leave(&mut w);
                    }
                    match &mut charge.permit {
                        Some(p) => p.merge(more),
                        None => charge.permit = Some(more),
                    }
                    charge.units = units;
                    charge.freed = Some(shared.buffer_freed.clone());
                    return Ok(());
                }
                Err(tokio::sync::TryAcquireError::Closed) => return Err(Grow::Stopping),
                Err(tokio::sync::TryAcquireError::NoPermits) => {}
            }
            let held_total = shared
                .buffer_budget_units
                .saturating_sub(shared.buffer_budget.available_permits());
            let by_waiters = w.held_units + if waiting.is_some() { 0 } else { charge.units };
            if by_waiters >= held_total {
                if charge.units > 0 {
                    if let Some(g) = waiting.take() {
                        g.leave(&mut w);
                    }
                    return Err(Grow::Exhausted);
                }
                // Holding nothing, this one's refusal would free nothing: wake the others
                // so that one holding units gives way.
                shared.buffer_freed.notify_waiters();
            }
            if waiting.is_none() {
                waiting = Some(WaitingGuard::enter(&mut w, info, charge.units));
            }
        }
        tokio::select! {
            _ = &mut freed => {}
            _ = shutdown.wait_for(|stop| *stop) => {
                if let Some(g) = waiting.take() {
                    g.leave(&mut shared.buffer_waiters.lock());
                }
                return Err(Grow::Stopping);
            }
        }
    }
}

/// A connection waiting for the budget: counted (INFO `hotstore_clients_waiting_for_buffer`,
/// `events=` in CLIENT LIST) with the units it holds meanwhile.
struct WaitingGuard<'a> {
    info: &'a ClientInfo,
    held: usize,
}

impl<'a> WaitingGuard<'a> {
    fn enter(w: &mut BudgetWaiters, info: &'a ClientInfo, held: usize) -> Self {
        w.count += 1;
        w.held_units += held;
        info.mem.waiting.store(true, Ordering::Relaxed);
        WaitingGuard { info, held }
    }

    fn leave(self, w: &mut BudgetWaiters) {
        w.count -= 1;
        w.held_units -= self.held;
        self.info.mem.waiting.store(false, Ordering::Relaxed);
    }
}

/// Makes `inbuf` hold at least `total` bytes. Room beyond [`BASE_BUFFER`] is charged to the
/// server-wide budget first (with the argument ranges already held); the buffer is then
/// allocated at exactly that size, so the charge is what is allocated.
async fn grow(
    shared: &Shared,
    info: &ClientInfo,
    charge: &mut Charge,
    inbuf: &mut BytesMut,
    ranges_capacity: usize,
    total: usize,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), Grow> {
    if total <= BASE_BUFFER {
        inbuf.reserve(total.saturating_sub(inbuf.len()));
        return Ok(());
    }
    charge_for(
        shared,
        info,
        charge,
        extra_bytes(total, ranges_capacity),
        shutdown,
    )
    .await?;
    if inbuf.capacity() < total {
        let mut bigger = BytesMut::with_capacity(total);
        bigger.extend_from_slice(inbuf);
        *inbuf = bigger;
    }
    Ok(())
}

/// Shows the connection's request memory in CLIENT LIST (`qbuf`, `qbuf-free`, `argv-mem`).
fn publish_memory(state: &ConnState, inbuf: &BytesMut, ranges: &Vec<Range<usize>>) {
    let m = &state.info.mem;
    m.qbuf.store(inbuf.len(), Ordering::Relaxed);
    m.qbuf_free
        .store(inbuf.capacity() - inbuf.len(), Ordering::Relaxed);
    m.argv.store(
        ranges.capacity() * std::mem::size_of::<Range<usize>>(),
        Ordering::Relaxed,
    );
}

/// A request larger than `--max-buffer-memory` can never be read, nor one that needs more
/// while the rest is held by clients all waiting for more: refuse it and close.
async fn refuse_too_large<S>(
    shared: &Shared,
    state: &mut ConnState,
    stream: &mut S,
    out: &mut Vec<u8>,
    why: Grow,
) -> std::io::Result<End>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    shared.metrics.error("protocol");
    Reply::new(out, state.resp3).error(if matches!(why, Grow::Exhausted) {
        "ERR Protocol error: max-buffer-memory exhausted: the rest of the server-wide read \
         budget is held by clients that all wait for more (send smaller requests, or raise \
         --max-buffer-memory)"
    } else {
        "ERR Protocol error: request larger than max-buffer-memory (the server-wide read budget)"
    });
    send(shared, state, stream, out).await?;
    Ok(End::Refused)
}

/// Most bytes [`linger`] reads and drops before closing anyway.
const LINGER_MAX_BYTES: u64 = 1 << 30;
/// Longest [`linger`] waits for the client to finish sending.
const LINGER_TIME: Duration = Duration::from_secs(10);

/// Before closing on a refused request: stop writing and read what the client is still sending
/// (up to [`LINGER_MAX_BYTES`] or [`LINGER_TIME`]). Closing with unread input makes the kernel
/// reset the connection, and the reset discards the error reply before the client reads it:
/// redis-cli sending a 300 MB value printed "Connection reset by peer", never the reason.
/// A server shutdown ends it at once.
async fn linger<S>(shared: &Shared, stream: &mut S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _ = stream.shutdown().await;
    let mut stopping = shared.shutdown.subscribe();
    let drain = async {
        let mut scratch = vec![0u8; 64 << 10];
        let mut drained = 0u64;
        while drained < LINGER_MAX_BYTES {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n as u64,
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(LINGER_TIME, drain) => {}
        _ = stopping.wait_for(|stop| *stop) => {}
    }
}

/// Runs one request, timing it for the metrics.
/// Commands whose handlers start the store's event state (`Store::track_events`, directly
/// or through the engine's event calls). Reads such as FRAG.GET and the group listings do
/// not: they must not switch event accounting on for a store that never uses events (found
/// in review: matching every `FRAG.`/`EVENT.` name did).
const EVENT_USES: [&str; 9] = [
    "frag.put",
    "event.next",
    "event.ack",
    "event.get",
    "event.seal",
    "event.release",
    "event.claim",
    "event.group",
    "event.range",
];

/// True if the request's command is one of [`EVENT_USES`].
fn is_event_use(buf: &[u8], ranges: &[std::ops::Range<usize>]) -> bool {
    ranges.first().is_some_and(|r| {
        let name = &buf[r.clone()];
        EVENT_USES
            .iter()
            .any(|u| name.eq_ignore_ascii_case(u.as_bytes()))
    })
}

fn execute(
    shared: &Shared,
    state: &mut ConnState,
    buf: &[u8],
    ranges: &[std::ops::Range<usize>],
    out: &mut Vec<u8>,
) -> Flow {
    let started = Instant::now();
    let args = Args::new(buf, ranges);
    let resp3 = state.resp3;
    let mut reply = Reply::new(out, resp3);
    // Whether this command (not an earlier one of the batch) made a write that waits for
    // the group commit.
    let earlier_sync = std::mem::take(&mut state.needs_sync);
    let idx = commands::lookup(args.get(0));
    // Recorded before it runs: CLIENT LIST/INFO name the command running and count idleness
    // from its start, as Redis does.
    let info = &state.info;
    info.last_cmd
        .store(idx.unwrap_or(usize::MAX), Ordering::Relaxed);
    info.last_sub
        .store(commands::subcommand(idx, &args), Ordering::Relaxed);
    info.last_active_ms.store(
        started.saturating_duration_since(info.created).as_millis() as u64,
        Ordering::Relaxed,
    );
    let flow = {
        let mut ctx = Ctx {
            shared,
            conn: state,
            out: &mut reply,
        };
        commands::dispatch(&mut ctx, &args, idx)
    };
    // Every error written, also inside an array (a batched EVENT.ACK's `-ACKED`s; found in
    // review: only a reply starting with an error was counted).
    for kind in reply.take_errors() {
        shared.metrics.error(kind);
    }
    let waits_sync = state.needs_sync;
    state.needs_sync |= earlier_sync;
    if let Some(i) = idx {
        shared.metrics.called(i);
        if waits_sync {
            state.unsynced.push((i, started));
        } else {
            shared.metrics.took(i, started.elapsed());
        }
    }
    flow
}

/// Sends the queued replies, after the group commit if they acknowledge `Persisted` writes.
async fn send<S>(
    shared: &Shared,
    state: &mut ConnState,
    stream: &mut S,
    out: &mut Vec<u8>,
) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    // The reply memory reserved for these replies, given back when they are sent (or fail).
    let _charge = state.reply_charge.take();
    if state.needs_sync {
        state.needs_sync = false;
        let waited = Instant::now();
        let synced = shared.sync.sync().await;
        shared.metrics.durability_waited(waited.elapsed());
        for (i, started) in state.unsynced.drain(..) {
            shared.metrics.took(i, started.elapsed());
        }
        if let Err(why) = synced {
            shared.metrics.error("io");
            log_line!(
                "hotstore: sync failed ({why}); closing client {} without acknowledging",
                state.info.id
            );
            out.clear();
            return Err(std::io::Error::other(why));
        }
    }
    if out.is_empty() {
        return Ok(());
    }
    stream.write_all(out).await?;
    shared.metrics.bytes_out.inc_by(out.len() as u64);
    out.clear();
    Ok(())
}

/// EVENT.NEXT BLOCK: a task parked until the store says an event may be claimable, a
/// timeout or lease is due, or the deadline (see [`crate::waiters`]); no thread waits.
/// Meanwhile the socket is watched, so a client that goes away is noticed and stops waiting.
/// Returns false if it went.
async fn wait_event<S>(
    shared: &Arc<Shared>,
    state: &mut ConnState,
    w: WaitEvent,
    out: &mut Vec<u8>,
    stream: &mut S,
    inbuf: &mut BytesMut,
) -> bool
where
    S: AsyncRead + Unpin,
{
    let waiting = shared.event_waiters.join(w.group.as_deref());
    // Held before each look: a change after a look that found nothing calls the listener.
    let _interest = shared.store.event_interest();
    let mut stop = shared.shutdown.subscribe();
    let deadline = w.deadline.map(tokio::time::Instant::from_std);
    loop {
        let notified = waiting.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let got = shared
            .store
            .poll_next_event(w.group.as_deref(), &w.consumer, w.lease);
        let mut reply = Reply::new(out, state.resp3);
        let answered = match got {
            Ok(NextEvent::Claimed(claim)) => {
                let batch = commands::Batch {
                    count: w.count,
                    consumer: &w.consumer,
                    group: w.group.as_deref(),
                    lease: w.lease,
                };
                commands::write_claims(shared, state, &mut reply, claim, &batch);
                true
            }
            Ok(NextEvent::Empty { look_again_at }) => {
                if let Some(at) = look_again_at {
                    shared.event_waiters.due_at(at);
                }
                if shared.stopping() || deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    reply.null();
                    true
                } else {
                    false
                }
            }
            Err(e) => {
                reply.error(&crate::error::reply_error(&e));
                true
            }
        };
        for kind in reply.take_errors() {
            shared.metrics.error(kind);
        }
        if answered {
            // Pass the wake-up on: one change may have made several events claimable (or
            // answered every waiter of the group), and the store called the listener once.
            waiting.notify.notify_one();
            return true;
        }
        loop {
            // Pipelined requests that arrive meanwhile stay in the buffer for later.
            let room = inbuf.capacity() > inbuf.len();
            tokio::select! {
                _ = &mut notified => break,
                _ = sleep_until_some(deadline) => break,
                _ = stop.wait_for(|s| *s) => break,
                n = stream.read_buf(inbuf), if room => {
                    if !matches!(n, Ok(n) if n > 0) {
                        return false;
                    }
                }
            }
        }
    }
}

/// Sleeps until `at`, or for ever.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]
    use super::*;
    use crate::config::ServerConfig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The first event use of a store runs its event-table pass off the worker threads
    /// (noticed in the eighteenth session: it held a worker for the whole pass).
    #[test]
    fn event_use_is_recognised_by_the_command_name() {
        let is = |cmd: &[u8]| is_event_use(cmd, std::slice::from_ref(&(0..cmd.len())));
        assert!(is(b"FRAG.PUT") && is(b"event.next") && is(b"Event.Ack"));
        assert!(!is(b"GET") && !is(b"FRAG.") && !is(b"EVENTS") && !is(b"frag"));
        // Reads and listings do not start event accounting (found in review).
        for read in [
            "FRAG.GET",
            "EVENT.GROUPS",
            "EVENT.PENDING",
            "EVENT.CONSUMERS",
        ] {
            assert!(!is(read.as_bytes()), "{read}");
        }
        assert!(!is_event_use(b"", &[]));
    }

    /// Fix (issue 16): a pipelined batch larger than the 64 KiB read buffer (16 SETs of
    /// 10 KiB, as redis-benchmark -P 16 -d 10240 sends) waited for a group commit per buffer
    /// (3 here), each before the rest of the batch was even read; it now shares one. The
    /// whole batch is in the stream before the connection runs, so nothing depends on timing.
    #[test]
    fn a_pipeline_larger_than_the_read_buffer_shares_one_group_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(hotstore::Store::builder(dir.path()).open().unwrap());
        let config = ServerConfig {
            durability: hotstore::Durability::Persisted,
            ..ServerConfig::default()
        };
        let shared = crate::server::shared_state(config, store, 0, None).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (mut client, server) = tokio::io::duplex(1 << 20);
            let value = vec![b'x'; 10 << 10];
            let mut batch = Vec::new();
            for i in 0..16 {
                let key = format!("key:{i}");
                batch
                    .extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n", key.len()).as_bytes());
                batch.extend_from_slice(key.as_bytes());
                batch.extend_from_slice(format!("\r\n${}\r\n", value.len()).as_bytes());
                batch.extend_from_slice(&value);
                batch.extend_from_slice(b"\r\n");
            }
            assert!(batch.len() > 2 * BASE_BUFFER);
            client.write_all(&batch).await.unwrap();
            let info = shared
                .clients
                .register(10, "test".into(), "test".into())
                .unwrap();
            let conn = tokio::spawn(serve(shared.clone(), server, info));
            let mut replies = vec![0u8; 16 * 5];
            client.read_exact(&mut replies).await.unwrap();
            assert_eq!(replies, b"+OK\r\n".repeat(16));
            drop(client);
            conn.await.unwrap();
        });
        let commits = shared.metrics.group_commit();
        assert_eq!(
            commits.requests.get(),
            1,
            "group commits asked for by one pipelined batch"
        );
    }
}
