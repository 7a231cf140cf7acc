//! The blocking client: one connection, calls wait for their reply.

use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::pipeline::{first_error, Pipeline};
use crate::proto;
use crate::types::{Ack, ClaimedEvent, Durability, EventSummary, Fragment, StatValue};
use redis::{Cmd, ConnectionLike, Value};
use std::collections::HashMap;
use std::time::Duration;

/// A blocking connection to a hotstore server. Not shared between threads: open one per
/// thread (connections are cheap). Claims taken with [`Client::event_next`] go back to READY
/// when the client is dropped (the connection closes), unless acknowledged or released.
///
/// After an [`Error::Connection`] the client is unusable (every later call answers
/// [`Error::Connection`] at once: reconnect); error replies (every other variant) leave it
/// usable.
pub struct Client {
    con: redis::Connection,
    /// A send or read failed (a timeout, a reply that did not parse): replies still in flight
    /// could be read as the answers to later requests, so none is sent. Fix (found in
    /// review): a pipeline that timed out at its second reply left the others unread, and the
    /// next put was told `+OK` by an earlier put's late reply although the server refused it.
    broken: bool,
    response_timeout: Option<Duration>,
    /// Scratch buffer for packed commands.
    buf: Vec<u8>,
    /// Scratch pipeline for single writes (encoded once, straight into it).
    one: Pipeline,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the server at `url` (see [`ConnectOptions::from_url`]), e.g.
    /// `redis://127.0.0.1:6380` or `redis://:password@host:6380`.
    pub fn connect(url: &str) -> Result<Self> {
        Self::connect_with(&ConnectOptions::from_url(url)?)
    }

    /// Connects to `host:port` without a password.
    pub fn connect_tcp(host: &str, port: u16) -> Result<Self> {
        Self::connect_with(&ConnectOptions::tcp(host, port))
    }

    /// Connects as `opts` says, authenticates and names the connection.
    pub fn connect_with(opts: &ConnectOptions) -> Result<Self> {
        let client = redis::Client::open(opts.connection_info()?)?;
        let con = match opts.connect_timeout {
            Some(t) => client.get_connection_with_timeout(t)?,
            None => client.get_connection()?,
        };
        con.set_read_timeout(opts.response_timeout)?;
        con.set_write_timeout(opts.response_timeout)?;
        let mut c = Client {
            con,
            broken: false,
            response_timeout: opts.response_timeout,
            buf: Vec::new(),
            one: Pipeline::new(),
        };
        for cmd in opts.setup_commands() {
            proto::ok(c.request(&cmd)?)?;
        }
        Ok(c)
    }

    /// Runs `f` on the connection unless it is broken; a failure (anything but an error
    /// reply, which is a value) breaks it.
    fn io<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        if self.broken {
            return Err(Error::Connection(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "an earlier call on this connection failed (timeout, lost connection or \
                     a reply that did not parse): its replies may still arrive, so it is not \
                     used again; connect a new client",
                ),
            )));
        }
        f(&mut self.con).map_err(|e| {
            self.broken = true;
            Error::Connection(e)
        })
    }

    /// Sends one command and returns its reply, error replies included as values.
    pub(crate) fn request(&mut self, cmd: &Cmd) -> Result<Value> {
        self.io(|c| c.req_command(cmd))
    }

    /// Sends the write queued in `self.one` and returns its result.
    fn write_one(&mut self) -> Result<()> {
        let one = std::mem::take(&mut self.one);
        let sent = self.io(|c| c.send_packed_command(one.packed(0, 1)));
        self.one = one;
        self.one.clear();
        sent?;
        proto::ok(self.recv()?)
    }

    /// `PING`: checks the connection.
    pub fn ping(&mut self) -> Result<()> {
        match proto::check(self.request(&redis::cmd("PING"))?)? {
            Value::SimpleString(s) if s == "PONG" => Ok(()),
            Value::Okay => Ok(()),
            o => Err(Error::Protocol(format!("PING answered {o:?}"))),
        }
    }

    /// `FRAG.PUT`: stores one fragment. `durability` `None`: the server's default.
    /// [`Error::Late`] if its event was already acknowledged, [`Error::Full`] if the store is
    /// full.
    pub fn frag_put(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> Result<()> {
        self.one
            .frag_put(run, event, detector, component, value, durability);
        self.write_one()
    }

    /// Stores `fragments` with one round trip (all sent, then all replies read). Every
    /// fragment is tried; the first error is returned (the others may be stored). Use a
    /// [`Pipeline`] for one result per fragment.
    pub fn frag_put_many(
        &mut self,
        fragments: &[Fragment],
        durability: Option<Durability>,
    ) -> Result<()> {
        let mut p = Pipeline::with_capacity(fragments.len());
        for f in fragments {
            p.put_fragment(f, durability);
        }
        first_error(self.execute(&p)?).map(|_| ())
    }

    /// `FRAG.GET`: one fragment's value, `None` if it is not stored.
    pub fn frag_get(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
    ) -> Result<Option<Vec<u8>>> {
        proto::optional_bytes(self.request(&proto::frag_get(run, event, detector, component))?)
    }

    /// `EVENT.GET`: every fragment of the event, in key order (empty if it has none).
    pub fn event_get(&mut self, run: u32, event: u64) -> Result<Vec<Fragment>> {
        proto::fragments(self.request(&proto::event_get(run, event))?, run, event)
    }

    /// `EVENT.SEAL`: no more fragments will come; the event is READY now.
    /// [`Error::NoEvent`] if it has no fragments, [`Error::Acked`] if acknowledged.
    pub fn event_seal(
        &mut self,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> Result<()> {
        self.one.event_seal(run, event, durability);
        self.write_one()
    }

    /// `EVENT.NEXT LEASE lease [BLOCK block]`: claims the oldest READY event for `lease`.
    /// `block` `None`: answer at once; `Some(d)`: wait up to `d` (whole milliseconds, at least
    /// 1) for an event, `Some(Duration::MAX)`: wait forever. `None` if no event is READY.
    pub fn event_next(
        &mut self,
        lease: Duration,
        block: Option<Duration>,
    ) -> Result<Option<ClaimedEvent>> {
        self.next_with(&proto::event_next(lease, block), block)
    }

    /// [`Client::event_next`] in consumer group `group` (`EVENT.NEXT ... GROUP group`):
    /// [`Error::NoGroup`] if there is none.
    pub fn event_next_in(
        &mut self,
        group: &str,
        lease: Duration,
        block: Option<Duration>,
    ) -> Result<Option<ClaimedEvent>> {
        self.next_with(&proto::event_next_in(group, lease, block), block)
    }

    /// `EVENT.GROUP CREATE name REQUIRED|OPTIONAL`: a consumer group (see docs/protocol.md:
    /// every group sees every event; removal waits for the required ones).
    pub fn group_create(&mut self, name: &str, required: bool) -> Result<()> {
        let reply = self.request(&proto::group_create(name, required))?;
        proto::ok(reply)
    }

    /// `EVENT.GROUP DESTROY name`.
    pub fn group_destroy(&mut self, name: &str) -> Result<()> {
        let reply = self.request(&proto::group_destroy(name))?;
        proto::ok(reply)
    }

    fn next_with(&mut self, cmd: &Cmd, block: Option<Duration>) -> Result<Option<ClaimedEvent>> {
        let widened = self.widen_read_timeout(block)?;
        let reply = self.request(cmd);
        if widened {
            self.restore_read_timeout()?;
        }
        proto::claimed_event(reply?)
    }

    /// Makes the response timeout wait `block` longer (for a blocking `EVENT.NEXT`): true if
    /// it changed, so [`Client::restore_read_timeout`] must follow the reply.
    pub(crate) fn widen_read_timeout(&mut self, block: Option<Duration>) -> Result<bool> {
        let widen = match (self.response_timeout, block) {
            (Some(t), Some(b)) => {
                if b == Duration::MAX {
                    None
                } else {
                    Some(t.saturating_add(b))
                }
            }
            _ => return Ok(false),
        };
        self.io(|c| c.set_read_timeout(widen))?;
        Ok(true)
    }

    /// Puts the response timeout back after [`Client::widen_read_timeout`].
    pub(crate) fn restore_read_timeout(&mut self) -> Result<()> {
        let t = self.response_timeout;
        self.io(|c| c.set_read_timeout(t))
    }

    /// Writes already encoded commands (their replies are read with [`Client::recv`]).
    pub(crate) fn send_packed(&mut self, bytes: &[u8]) -> Result<()> {
        self.io(|c| c.send_packed_command(bytes))
    }

    /// Claims up to `max` READY events in one round trip (`max` pipelined `EVENT.NEXT LEASE
    /// lease`, none waiting): fewer if fewer are READY. The first error reply is returned after
    /// every reply was read; claims taken by the other requests then stay held until their
    /// lease ends or the connection closes.
    pub fn event_next_batch(&mut self, lease: Duration, max: usize) -> Result<Vec<ClaimedEvent>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let cmd = proto::event_next(lease, None);
        self.buf.clear();
        for _ in 0..max {
            cmd.write_packed_command(&mut self.buf);
        }
        let buf = std::mem::take(&mut self.buf);
        let sent = self.io(|c| c.send_packed_command(&buf));
        self.buf = buf;
        sent?;
        let mut replies = Vec::with_capacity(max);
        for _ in 0..max {
            replies.push(self.recv()?);
        }
        proto::claimed_events(replies)
    }

    /// `EVENT.ACK token REMOVE|KEEP`: settles a claim. [`Error::ClaimLost`] if the claim is no
    /// longer held (lease expired, released).
    pub fn event_ack(
        &mut self,
        token: &str,
        ack: Ack,
        durability: Option<Durability>,
    ) -> Result<()> {
        self.one.event_ack(token, ack, durability);
        self.write_one()
    }

    /// `EVENT.RELEASE token`: gives a claimed event back (READY again, in its old place).
    pub fn event_release(&mut self, token: &str) -> Result<()> {
        self.one.event_release(token);
        self.write_one()
    }

    /// `EVENT.RANGE run from to [LIMIT n]`: events `from <= event < to` of `run`, in order
    /// (`limit` `None`: the server's default, 1000).
    pub fn event_range(
        &mut self,
        run: u32,
        from: u64,
        to: u64,
        limit: Option<usize>,
    ) -> Result<Vec<EventSummary>> {
        proto::event_summaries(
            self.request(&proto::event_range(run, from, to, limit))?,
            run,
        )
    }

    /// `STORE.STATS`: the store's counters by name (`entries`, `live_bytes`, `puts`,
    /// `events_ready`, ...).
    pub fn store_stats(&mut self) -> Result<HashMap<String, StatValue>> {
        proto::stats(self.request(&proto::store_stats())?)
    }

    /// Sends every command of `pipeline` at once and reads the replies: one round trip. One
    /// result per command, in order; the outer error is a failed connection.
    pub fn execute(&mut self, pipeline: &Pipeline) -> Result<Vec<Result<()>>> {
        self.execute_windowed(pipeline, usize::MAX)
    }

    /// Sends the commands of `pipeline` keeping at most `window` of them unanswered: more are
    /// written whenever half the window has been answered. One result per command, in order;
    /// the outer error is a failed connection.
    pub fn execute_windowed(
        &mut self,
        pipeline: &Pipeline,
        window: usize,
    ) -> Result<Vec<Result<()>>> {
        let window = window.max(1);
        let n = pipeline.len();
        let mut out = Vec::with_capacity(n);
        let mut sent = 0usize;
        while out.len() < n {
            let in_flight = sent - out.len();
            if sent < n && in_flight <= window / 2 {
                let upto = n.min(out.len().saturating_add(window));
                self.io(|c| c.send_packed_command(pipeline.packed(sent, upto)))?;
                sent = upto;
            }
            out.push(proto::ok(self.recv()?));
        }
        Ok(out)
    }

    /// The next reply (skipping RESP3 pushes).
    pub(crate) fn recv(&mut self) -> Result<Value> {
        loop {
            match self.io(|c| c.recv_response())? {
                Value::Push { .. } => continue,
                v => return Ok(v),
            }
        }
    }

    /// The underlying redis-rs connection, for commands this client does not wrap (e.g.
    /// `redis::cmd("INFO").query::<String>(client.connection())`).
    pub fn connection(&mut self) -> &mut redis::Connection {
        &mut self.con
    }
}
