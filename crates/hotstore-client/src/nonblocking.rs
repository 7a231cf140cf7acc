//! The async client (tokio): one multiplexed connection shared by its clones.

use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::pipeline::{first_error, Pipeline};
use crate::proto;
use crate::types::{Ack, ClaimedEvent, Durability, EventSummary, Fragment, StatValue};
use futures_util::stream::{FuturesOrdered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};
use std::collections::HashMap;
use std::time::Duration;

/// An async connection to a hotstore server, for the tokio runtime. Cheap to clone: clones
/// share one connection, and requests made concurrently (from clones or joined futures) are
/// pipelined on it, answered in order. Claims taken with [`AsyncClient::event_next`] go back
/// to READY when the connection closes: when the last clone is dropped.
///
/// After an [`Error::Connection`] the client is unusable; error replies (every other
/// variant) leave it usable.
#[derive(Clone)]
pub struct AsyncClient {
    con: MultiplexedConnection,
    response_timeout: Option<Duration>,
}

impl std::fmt::Debug for AsyncClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncClient").finish_non_exhaustive()
    }
}

impl AsyncClient {
    /// Connects to the server at `url` (see [`ConnectOptions::from_url`]).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(&ConnectOptions::from_url(url)?).await
    }

    /// Connects to `host:port` without a password.
    pub async fn connect_tcp(host: &str, port: u16) -> Result<Self> {
        Self::connect_with(&ConnectOptions::tcp(host, port)).await
    }

    /// Connects as `opts` says, authenticates and names the connection.
    pub async fn connect_with(opts: &ConnectOptions) -> Result<Self> {
        let client = redis::Client::open(opts.connection_info()?)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(opts.connect_timeout)
            .set_response_timeout(opts.response_timeout);
        let con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let c = AsyncClient {
            con,
            response_timeout: opts.response_timeout,
        };
        for cmd in opts.setup_commands() {
            proto::ok(c.request(&cmd).await?)?;
        }
        Ok(c)
    }

    async fn request(&self, cmd: &Cmd) -> Result<Value> {
        let mut con = self.con.clone();
        Ok(con.send_packed_command(cmd).await?)
    }

    /// `PING`: checks the connection.
    pub async fn ping(&self) -> Result<()> {
        match proto::check(self.request(&redis::cmd("PING")).await?)? {
            Value::SimpleString(s) if s == "PONG" => Ok(()),
            Value::Okay => Ok(()),
            o => Err(Error::Protocol(format!("PING answered {o:?}"))),
        }
    }

    /// `FRAG.PUT`: see [`crate::Client::frag_put`].
    pub async fn frag_put(
        &self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> Result<()> {
        let cmd = proto::frag_put(run, event, detector, component, value, durability);
        proto::ok(self.request(&cmd).await?)
    }

    /// Stores `fragments` with one round trip: see [`crate::Client::frag_put_many`].
    pub async fn frag_put_many(
        &self,
        fragments: &[Fragment],
        durability: Option<Durability>,
    ) -> Result<()> {
        if fragments.is_empty() {
            return Ok(());
        }
        let mut p = redis::Pipeline::with_capacity(fragments.len());
        for f in fragments {
            p.add_command(proto::frag_put(
                f.run,
                f.event,
                f.detector,
                f.component,
                &f.value,
                durability,
            ));
        }
        let mut con = self.con.clone();
        let replies = con.send_packed_commands(&p, 0, fragments.len()).await?;
        first_error(replies.into_iter().map(proto::ok).collect()).map(|_| ())
    }

    /// `FRAG.GET`: see [`crate::Client::frag_get`].
    pub async fn frag_get(
        &self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
    ) -> Result<Option<Vec<u8>>> {
        let cmd = proto::frag_get(run, event, detector, component);
        proto::optional_bytes(self.request(&cmd).await?)
    }

    /// `EVENT.GET`: see [`crate::Client::event_get`].
    pub async fn event_get(&self, run: u32, event: u64) -> Result<Vec<Fragment>> {
        proto::fragments(
            self.request(&proto::event_get(run, event)).await?,
            run,
            event,
        )
    }

    /// `EVENT.SEAL`: see [`crate::Client::event_seal`].
    pub async fn event_seal(
        &self,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> Result<()> {
        proto::ok(
            self.request(&proto::event_seal(run, event, durability))
                .await?,
        )
    }

    /// `EVENT.NEXT`: see [`crate::Client::event_next`]. While it blocks, requests from
    /// clones wait behind it (the connection answers in order): give a blocking consumer
    /// its own connection.
    pub async fn event_next(
        &self,
        lease: Duration,
        block: Option<Duration>,
    ) -> Result<Option<ClaimedEvent>> {
        self.next_with(&proto::event_next(lease, block), block)
            .await
    }

    /// [`AsyncClient::event_next`] in consumer group `group`: see
    /// [`crate::Client::event_next_in`].
    pub async fn event_next_in(
        &self,
        group: &str,
        lease: Duration,
        block: Option<Duration>,
    ) -> Result<Option<ClaimedEvent>> {
        self.next_with(&proto::event_next_in(group, lease, block), block)
            .await
    }

    /// `EVENT.GROUP CREATE`: see [`crate::Client::group_create`].
    pub async fn group_create(&self, name: &str, required: bool) -> Result<()> {
        proto::ok(self.request(&proto::group_create(name, required)).await?)
    }

    /// `EVENT.GROUP DESTROY`: see [`crate::Client::group_destroy`].
    pub async fn group_destroy(&self, name: &str) -> Result<()> {
        proto::ok(self.request(&proto::group_destroy(name)).await?)
    }

    async fn next_with(&self, cmd: &Cmd, block: Option<Duration>) -> Result<Option<ClaimedEvent>> {
        let reply = match (self.response_timeout, block) {
            (Some(t), Some(b)) => {
                let mut con = self.con.clone();
                // No way to lift the timeout of one request: a year stands for forever.
                let wait = if b == Duration::MAX {
                    Duration::from_secs(365 * 86400)
                } else {
                    t.saturating_add(b)
                };
                con.set_response_timeout(wait);
                con.send_packed_command(cmd).await?
            }
            _ => self.request(cmd).await?,
        };
        proto::claimed_event(reply)
    }

    /// Claims up to `max` READY events in one round trip: see
    /// [`crate::Client::event_next_batch`].
    pub async fn event_next_batch(&self, lease: Duration, max: usize) -> Result<Vec<ClaimedEvent>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let cmd = proto::event_next(lease, None);
        let mut p = redis::Pipeline::with_capacity(max);
        for _ in 0..max {
            p.add_command(cmd.clone());
        }
        let mut con = self.con.clone();
        let replies = con.send_packed_commands(&p, 0, max).await?;
        proto::claimed_events(replies)
    }

    /// `EVENT.ACK`: see [`crate::Client::event_ack`].
    pub async fn event_ack(
        &self,
        token: &str,
        ack: Ack,
        durability: Option<Durability>,
    ) -> Result<()> {
        proto::ok(
            self.request(&proto::event_ack(token, ack, durability))
                .await?,
        )
    }

    /// `EVENT.RELEASE`: see [`crate::Client::event_release`].
    pub async fn event_release(&self, token: &str) -> Result<()> {
        proto::ok(self.request(&proto::event_release(token)).await?)
    }

    /// `EVENT.RANGE`: see [`crate::Client::event_range`].
    pub async fn event_range(
        &self,
        run: u32,
        from: u64,
        to: u64,
        limit: Option<usize>,
    ) -> Result<Vec<EventSummary>> {
        let cmd = proto::event_range(run, from, to, limit);
        proto::event_summaries(self.request(&cmd).await?, run)
    }

    /// `STORE.STATS`: see [`crate::Client::store_stats`].
    pub async fn store_stats(&self) -> Result<HashMap<String, StatValue>> {
        proto::stats(self.request(&proto::store_stats()).await?)
    }

    /// Sends every command of `pipeline` as one write and reads the replies: one round trip.
    /// One result per command, in order; the outer error is a failed connection.
    pub async fn execute(&self, pipeline: &Pipeline) -> Result<Vec<Result<()>>> {
        if pipeline.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::Pipeline::with_capacity(pipeline.len());
        for i in 0..pipeline.len() {
            p.add_command(pipeline.cmd(i));
        }
        let mut con = self.con.clone();
        let replies = con.send_packed_commands(&p, 0, pipeline.len()).await?;
        if replies.len() != pipeline.len() {
            return Err(Error::Protocol(format!(
                "{} replies to {} commands",
                replies.len(),
                pipeline.len()
            )));
        }
        Ok(replies.into_iter().map(proto::ok).collect())
    }

    /// Sends the commands of `pipeline` keeping at most `window` of them unanswered: they go
    /// out in chunks of half the window, the next chunk as soon as the one before the last is
    /// answered. One result per command, in order; the outer error is a failed connection.
    pub async fn execute_windowed(
        &self,
        pipeline: &Pipeline,
        window: usize,
    ) -> Result<Vec<Result<()>>> {
        let n = pipeline.len();
        let chunk = (window / 2).max(1);
        let mut next = 0;
        let mut in_flight = FuturesOrdered::new();
        let mut out = Vec::with_capacity(n);
        loop {
            while in_flight.len() < 2 && next < n {
                let end = n.min(next + chunk);
                let mut p = redis::Pipeline::with_capacity(end - next);
                for i in next..end {
                    p.add_command(pipeline.cmd(i));
                }
                let count = end - next;
                next = end;
                let mut con = self.con.clone();
                in_flight.push_back(async move { con.send_packed_commands(&p, 0, count).await });
            }
            match in_flight.next().await {
                Some(replies) => {
                    for reply in replies? {
                        out.push(proto::ok(reply));
                    }
                }
                None => break,
            }
        }
        if out.len() != n {
            return Err(Error::Protocol(format!(
                "{} replies to {n} commands",
                out.len()
            )));
        }
        Ok(out)
    }

    /// The underlying redis-rs connection (a clone), for commands this client does not wrap.
    pub fn connection(&self) -> MultiplexedConnection {
        self.con.clone()
    }
}
