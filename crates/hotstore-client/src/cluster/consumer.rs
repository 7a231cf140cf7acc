//! [`ClusterConsumer`]: claims events from every node of a cluster.

use super::client::{connect_node, node_down, ClusterClient};
use super::map::NodeInfo;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::proto;
use crate::types::{Ack, ClaimedEvent, Durability};
use crate::Client;
use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most tokens in one `EVENT.ACK` (the server's limit).
const MAX_ACK_TOKENS: usize = 10_000;

/// Longest `BLOCK` of a round sent to more than one node. A round reads every node's reply,
/// so it lasts as long as its slowest node: a claim made at once by one node waits, unread
/// and its lease running, until the others answer. Blocking rounds are bounded to this and
/// repeated until the caller's wait is over: an event is returned at most this late, and an
/// idle consumer sends one request per node this often.
const MAX_ROUND_BLOCK: Duration = Duration::from_millis(100);

/// How a [`ClusterConsumer`] claims.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Lease of every claim (`EVENT.NEXT LEASE`). Default 30 s.
    pub lease: Duration,
    /// Most events claimed from one node per request (`COUNT`, 1 to 10000). Default 64.
    pub count: usize,
    /// Consumer group to claim in (`GROUP`; it must exist on every node, see
    /// [`ClusterClient::group_create`]). Default none: the default queue.
    pub group: Option<String>,
    /// Consumer name (`CONSUMER`). Default none: the server names the connection.
    pub consumer: Option<String>,
    /// How long a node that failed is left alone before it is reconnected (in the
    /// background: a node that does not answer never delays the others). Default 1 s.
    pub retry_interval: Duration,
    /// A node whose reply takes longer than this (beyond the block time) is taken as down.
    /// Default 30 s; `None`: wait.
    pub response_timeout: Option<Duration>,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            lease: Duration::from_secs(30),
            count: 64,
            group: None,
            consumer: None,
            retry_interval: Duration::from_secs(1),
            response_timeout: Some(Duration::from_secs(30)),
        }
    }
}

/// An event claimed from one node of a cluster: it remembers the node, so that
/// [`ClusterConsumer::ack`] and [`ClusterConsumer::release`] go there. Derefs to the
/// [`ClaimedEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterClaim {
    node: usize,
    addr: Arc<str>,
    event: ClaimedEvent,
}

impl ClusterClaim {
    /// `host:port` of the node that issued the claim.
    pub fn node(&self) -> &str {
        &self.addr
    }

    /// The claimed event.
    pub fn event(&self) -> &ClaimedEvent {
        &self.event
    }

    /// The claimed event, taken out (its token still acknowledges it on its node).
    pub fn into_event(self) -> ClaimedEvent {
        self.event
    }
}

impl std::ops::Deref for ClusterClaim {
    type Target = ClaimedEvent;
    fn deref(&self) -> &ClaimedEvent {
        &self.event
    }
}

/// What a [`ClusterConsumer`] knows of one node.
#[derive(Debug, Clone)]
pub struct NodeHealth {
    /// The node.
    pub node: NodeInfo,
    /// Connected now.
    pub up: bool,
    /// The last failure ([`Error::NodeDown`]'s text, naming the node and its slots), kept
    /// after the node is back.
    pub last_error: Option<String>,
    /// Times the node failed (a connection lost, or a reconnection refused).
    pub failures: u64,
    /// Events claimed from it.
    pub claimed: u64,
}

struct NodeState {
    info: NodeInfo,
    addr: Arc<str>,
    client: Option<Client>,
    retry_at: Instant,
    reconnecting: Option<mpsc::Receiver<Result<Client>>>,
    last_error: Option<String>,
    failures: u64,
    claimed: u64,
}

impl NodeState {
    fn down(&mut self, e: &Error, retry: Duration) -> Error {
        let err = match e {
            Error::NodeDown { reason, .. } => node_down(&self.info, reason),
            e => node_down(&self.info, e),
        };
        self.client = None;
        self.last_error = Some(err.to_string());
        self.failures += 1;
        self.retry_at = Instant::now() + retry;
        err
    }
}

/// Claims events from every node of a cluster (claims are node-local: each node offers the
/// events of its slots) with one connection per node, in rounds: one `EVENT.NEXT COUNT n`
/// to every node at once (no waiting), and only if none had an event, one `EVENT.NEXT BLOCK
/// t COUNT n` to every node at once, which returns as soon as the slowest node answered
/// (an event, or its BLOCK time over): so every node is served each round, and an idle
/// cluster is waited on, not polled. In a cluster of more than one node, a blocking round
/// blocks at most 100 ms and is repeated until an event comes or the caller's wait is over
/// (so an event that comes to one node while the others stay empty is returned within
/// 100 ms, also when waiting forever).
/// Acknowledgements and releases go to the node of the claim, on the connection that
/// claimed it.
///
/// A consumer keeps the nodes of the map it was built with: it does not follow a map change
/// (a new epoch that adds, removes or moves nodes), so after one, build the consumers again
/// ([`ClusterConsumer::new`] with a [`ClusterClient`] that read the new map).
///
/// A node that fails is reported in [`ClusterConsumer::health`] (naming it and its slots)
/// and left out of the rounds; it is reconnected in the background every
/// [`ConsumerOptions::retry_interval`], so it never stops the claims from the others. Its
/// claims go back to READY on that node (their connection closed), and acknowledging them
/// fails with [`Error::NodeDown`] or, once it is back, [`Error::ClaimLost`].
///
/// ```no_run
/// # fn main() -> hotstore_client::Result<()> {
/// use hotstore_client::{Ack, ClusterClient, ClusterConsumer, ConsumerOptions};
/// use std::time::Duration;
/// let cluster = ClusterClient::connect(&["10.0.0.1:7001"])?;
/// let mut consumer = ClusterConsumer::new(&cluster, ConsumerOptions::default())?;
/// loop {
///     let claims = consumer.next_batch(Some(Duration::from_millis(200)))?;
///     for c in &claims {
///         println!("{}:{} from {}", c.run, c.event, c.node());
///     }
///     for r in consumer.ack_many(&claims, Ack::Remove, None)? {
///         r?;
///     }
/// }
/// # }
/// ```
pub struct ClusterConsumer {
    nodes: Vec<NodeState>,
    template: ConnectOptions,
    opts: ConsumerOptions,
    /// The node the next round starts with (rotates).
    start: usize,
    /// Claims taken but not yet returned (after a node's error reply).
    buffered: VecDeque<ClusterClaim>,
}

impl std::fmt::Debug for ClusterConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConsumer")
            .field("nodes", &self.health())
            .finish_non_exhaustive()
    }
}

impl ClusterConsumer {
    /// A consumer of every node of `cluster`'s map, connected with its settings. Nodes that
    /// cannot be reached now are reported and retried; the error of the first is returned
    /// if none can.
    pub fn new(cluster: &ClusterClient, opts: ConsumerOptions) -> Result<Self> {
        let mut template = cluster.options().clone();
        template.response_timeout = opts.response_timeout;
        let now = Instant::now();
        let mut first_err = None;
        let nodes: Vec<NodeState> = cluster
            .nodes()
            .iter()
            .map(|info| {
                let mut n = NodeState {
                    info: info.clone(),
                    addr: info.addr().into(),
                    client: None,
                    retry_at: now,
                    reconnecting: None,
                    last_error: None,
                    failures: 0,
                    claimed: 0,
                };
                match connect_node(&template, info) {
                    Ok(c) => n.client = Some(c),
                    Err(e) => {
                        let e = n.down(&e, opts.retry_interval);
                        first_err.get_or_insert(e);
                    }
                }
                n
            })
            .collect();
        if let Some(e) = first_err {
            if nodes.iter().all(|n| n.client.is_none()) {
                return Err(e);
            }
        }
        Ok(ClusterConsumer {
            nodes,
            template,
            opts,
            start: 0,
            buffered: VecDeque::new(),
        })
    }

    /// Connects to the cluster of `seeds` (see [`ClusterClient::connect`]) and consumes it.
    pub fn connect<S: AsRef<str>>(seeds: &[S], opts: ConsumerOptions) -> Result<Self> {
        Self::new(&ClusterClient::connect(seeds)?, opts)
    }

    /// The state of every node, in map order.
    pub fn health(&self) -> Vec<NodeHealth> {
        self.nodes
            .iter()
            .map(|n| NodeHealth {
                node: n.info.clone(),
                up: n.client.is_some(),
                last_error: n.last_error.clone(),
                failures: n.failures,
                claimed: n.claimed,
            })
            .collect()
    }

    /// The next claimed event, waiting up to `block` (`None`: not at all) if no node has
    /// one. Claims come a round at a time (see [`ClusterConsumer::next_batch`]); the rest of
    /// a round is kept for the next calls, its leases running.
    pub fn next(&mut self, block: Option<Duration>) -> Result<Option<ClusterClaim>> {
        if self.buffered.is_empty() {
            let batch = self.next_batch(block)?;
            self.buffered.extend(batch);
        }
        Ok(self.buffered.pop_front())
    }

    /// One round: up to [`ConsumerOptions::count`] claims from every node that has READY
    /// events, or, if none has, those that come within `block` (`None`: answer at once;
    /// `Some(Duration::MAX)`: wait forever, but while every node is down, only until the
    /// next reconnection is tried). Empty if none came. An error reply of a node (e.g. `-NOGROUP`) is returned after the
    /// round, and the claims of the other nodes with the next call.
    pub fn next_batch(&mut self, block: Option<Duration>) -> Result<Vec<ClusterClaim>> {
        if !self.buffered.is_empty() {
            return Ok(self.buffered.drain(..).collect());
        }
        self.revive();
        let mut claims = self.round(None)?;
        let Some(b) = block else {
            return Ok(claims);
        };
        if !claims.is_empty() {
            return Ok(claims);
        }
        // `None`: forever.
        let deadline = if b == Duration::MAX {
            None
        } else {
            Instant::now().checked_add(b)
        };
        let mut left = b;
        loop {
            if self.nodes.iter().all(|n| n.client.is_none()) {
                // Nothing to wait on: wait for the next reconnection instead.
                let next = self.nodes.iter().map(|n| n.retry_at).min();
                let until = next.map_or(left, |t| t.saturating_duration_since(Instant::now()));
                std::thread::sleep(until.min(left).max(Duration::from_millis(1)));
                self.revive();
                break;
            }
            if self.nodes.len() == 1 {
                // One node: its reply is the only one to read, so it may block all the wait.
                claims = self.round(Some(left))?;
                break;
            }
            // Fix (found in review): every node was sent the whole wait (`BLOCK 0` for
            // `Duration::MAX`) and the replies were read node by node, so an event claimed
            // on one node stayed unread while another node stayed empty (forever for
            // `BLOCK 0`, its lease running out). Rounds are bounded (MAX_ROUND_BLOCK) and
            // repeated: every reply, and so every claim, is read within one round.
            claims = self.round(Some(left.min(MAX_ROUND_BLOCK)))?;
            if !claims.is_empty() {
                break;
            }
            if let Some(d) = deadline {
                left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
            }
            // A node that came back joins the next round.
            self.revive();
        }
        Ok(claims)
    }

    /// Takes in the reconnections that finished and starts those that are due.
    fn revive(&mut self) {
        let now = Instant::now();
        for n in &mut self.nodes {
            if n.client.is_some() {
                continue;
            }
            if let Some(rx) = &n.reconnecting {
                match rx.try_recv() {
                    Ok(Ok(c)) => {
                        n.client = Some(c);
                        n.reconnecting = None;
                    }
                    Ok(Err(e)) => {
                        n.reconnecting = None;
                        n.down(&e, self.opts.retry_interval);
                    }
                    Err(mpsc::TryRecvError::Empty) => {}
                    Err(mpsc::TryRecvError::Disconnected) => n.reconnecting = None,
                }
                continue;
            }
            if now >= n.retry_at {
                let (tx, rx) = mpsc::channel();
                let template = self.template.clone();
                let info = n.info.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("reconnect {}", n.addr))
                    .spawn(move || {
                        let _ = tx.send(connect_node(&template, &info));
                    });
                match spawned {
                    Ok(_) => n.reconnecting = Some(rx),
                    Err(_) => n.retry_at = now + self.opts.retry_interval,
                }
            }
        }
    }

    /// Sends one `EVENT.NEXT` to every live node, then reads every reply.
    fn round(&mut self, block: Option<Duration>) -> Result<Vec<ClusterClaim>> {
        let cmd = proto::event_next_count(
            self.opts.lease,
            block,
            self.opts.count.clamp(1, 10_000),
            self.opts.consumer.as_deref(),
            self.opts.group.as_deref(),
        )
        .get_packed_command();
        let n = self.nodes.len();
        let order: Vec<usize> = (0..n).map(|k| (self.start + k) % n.max(1)).collect();
        self.start = (self.start + 1) % n.max(1);
        let retry = self.opts.retry_interval;
        let mut sent = Vec::with_capacity(n);
        for &i in &order {
            let node = &mut self.nodes[i];
            let Some(client) = node.client.as_mut() else {
                continue;
            };
            match client.send_packed(&cmd) {
                Ok(()) => sent.push(i),
                Err(e) => {
                    node.down(&e, retry);
                }
            }
        }
        let mut claims = Vec::new();
        let mut first_err = None;
        for i in sent {
            let node = &mut self.nodes[i];
            let Some(client) = node.client.as_mut() else {
                continue;
            };
            let reply = match client.widen_read_timeout(block) {
                Ok(widened) => {
                    let r = client.recv();
                    match (widened, &r) {
                        (true, Ok(_)) => client.restore_read_timeout().and(r),
                        _ => r,
                    }
                }
                Err(e) => Err(e),
            };
            let reply = match reply {
                Ok(v) => v,
                Err(e) => {
                    node.down(&e, retry);
                    continue;
                }
            };
            match proto::claimed_batch(reply) {
                Ok(batch) => {
                    node.claimed += batch.len() as u64;
                    claims.extend(batch.into_iter().map(|event| ClusterClaim {
                        node: i,
                        addr: node.addr.clone(),
                        event,
                    }));
                }
                Err(e) => {
                    // Fix (found in review): the error's type was lost (a missing group came
                    // back as `Error::Server`, not `Error::NoGroup`).
                    first_err.get_or_insert(e.on_node(&node.addr));
                }
            }
        }
        match first_err {
            Some(e) => {
                self.buffered.extend(claims);
                Err(e)
            }
            None => Ok(claims),
        }
    }

    /// The live connection to node `i`, or the NodeDown error.
    fn client(&mut self, i: usize) -> Result<&mut Client> {
        let node = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| Error::InvalidArgument(format!("no node {i}")))?;
        match node.client.as_mut() {
            Some(c) => Ok(c),
            None => Err(node_down(
                &node.info,
                &node
                    .last_error
                    .as_deref()
                    .unwrap_or("not connected (reconnecting)"),
            )),
        }
    }

    /// Sends `cmd` to node `i`; a failed connection marks the node down.
    fn request(&mut self, i: usize, cmd: &redis::Cmd) -> Result<redis::Value> {
        let r = self.client(i)?.request(cmd);
        match r {
            Err(e) if e.is_connection() => Err(self.nodes[i].down(&e, self.opts.retry_interval)),
            r => r,
        }
    }

    /// `EVENT.ACK token REMOVE|KEEP` on the claim's node.
    pub fn ack(
        &mut self,
        claim: &ClusterClaim,
        ack: Ack,
        durability: Option<Durability>,
    ) -> Result<()> {
        let cmd = proto::event_ack(&claim.token, ack, durability);
        proto::ok(self.request(claim.node, &cmd)?)
    }

    /// Acknowledges `claims`: one `EVENT.ACK token... REMOVE|KEEP` per node (at most 10000
    /// tokens each), sent to every node at once. One result per claim, in order; a claim
    /// whose node is down has [`Error::NodeDown`].
    pub fn ack_many(
        &mut self,
        claims: &[ClusterClaim],
        ack: Ack,
        durability: Option<Durability>,
    ) -> Result<Vec<Result<()>>> {
        let mut results: Vec<Option<Result<()>>> = (0..claims.len()).map(|_| None).collect();
        // The claims of each node, in chunks of at most MAX_ACK_TOKENS.
        let mut chunks: Vec<(usize, Vec<usize>)> = Vec::new();
        for (k, c) in claims.iter().enumerate() {
            match chunks
                .iter_mut()
                .find(|(n, ks)| *n == c.node && ks.len() < MAX_ACK_TOKENS)
            {
                Some((_, ks)) => ks.push(k),
                None => chunks.push((c.node, vec![k])),
            }
        }
        let retry = self.opts.retry_interval;
        let mut sent = Vec::new();
        for (node, ks) in chunks {
            let cmd = proto::event_ack_many(
                ks.iter().map(|&k| claims[k].token.as_str()),
                ack,
                durability,
            );
            let r = self
                .client(node)
                .and_then(|c| c.send_packed(&cmd.get_packed_command()));
            match r {
                Ok(()) => sent.push((node, ks)),
                Err(e) => {
                    let e = match e {
                        e @ Error::NodeDown { .. } => e,
                        e => self.nodes[node].down(&e, retry),
                    };
                    let text = e.to_string();
                    for k in ks {
                        results[k] = Some(Err(node_down(&self.nodes[node].info, &text)));
                    }
                }
            }
        }
        for (node, ks) in sent {
            let reply = self.client(node).and_then(|c| c.recv());
            let per = match reply {
                Ok(v) => proto::ack_results(v, ks.len()),
                Err(e) => Err(self.nodes[node].down(&e, retry)),
            };
            match per {
                Ok(rs) => {
                    for (k, r) in ks.into_iter().zip(rs) {
                        results[k] = Some(r);
                    }
                }
                Err(e) => {
                    // Fix (found in review): a refused batch (`-NOAUTH`, `-ERR`) came back
                    // as `Error::Protocol` for each claim; each now gets the same typed error.
                    let e = e.on_node(&self.nodes[node].addr);
                    for k in ks {
                        results[k] = Some(Err(e.duplicate()));
                    }
                }
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Protocol("an ack was not sent".into()))))
            .collect())
    }

    /// `EVENT.RELEASE token` on the claim's node: the event is READY again.
    pub fn release(&mut self, claim: &ClusterClaim) -> Result<()> {
        let cmd = proto::event_release(&claim.token);
        proto::ok(self.request(claim.node, &cmd)?)
    }
}
