//! [`ClusterClient`]: one connection per node, requests routed by their event's slot.

use super::map::{NodeInfo, SlotMap};
use super::pipeline::ClusterPipeline;
use crate::error::{Error, Result};
use crate::options::{Address, ConnectOptions};
use crate::pipeline::{first_error, Pipeline};
use crate::proto;
use crate::slot::{event_slot, event_tag};
use crate::types::{Durability, Fragment, StatValue};
use crate::Client;
use redis::{Cmd, Value};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// How many times a request redirected by `MOVED` is sent again (each time after reading the
/// map anew) before it fails with [`Error::Redirects`].
pub const DEFAULT_MAX_REDIRECTS: usize = 3;

/// A blocking client of a hotstore cluster (`hotstore serve --cluster MAP`): it reads the map
/// (`CLUSTER SLOTS`) from a seed node, keeps one connection per node, and sends every
/// fragment write, read and seal to the node serving its event's slot, in the cluster tag
/// form (`FRAG.PUT 7:42 ...`). A `MOVED` reply makes it read the map again and resend (at
/// most [`ClusterClient::max_redirects`] times); a node that cannot be reached fails the
/// requests for its slots with [`Error::NodeDown`], naming it and its slots, and is
/// reconnected on the next request for it.
///
/// Claims are node-local: consume with a [`crate::ClusterConsumer`], which claims from every
/// node. Not shared between threads: open one per thread.
///
/// ```no_run
/// # fn main() -> hotstore_client::Result<()> {
/// use hotstore_client::{ClusterClient, Fragment};
/// let mut cluster = ClusterClient::connect(&["redis://10.0.0.1:7001", "redis://10.0.0.2:7001"])?;
/// let frags: Vec<Fragment> = (0..4u16)
///     .map(|d| Fragment::new(1, 42, d, 0, vec![0u8; 1024]))
///     .collect();
/// cluster.frag_put_many(&frags, None)?; // all to the node of event 1:42
/// cluster.event_seal(1, 42, None)?;
/// println!("event 1:42 lives on {}", cluster.event_node(1, 42)?.addr());
/// # Ok(()) }
/// ```
pub struct ClusterClient {
    /// Credentials and timeouts for every node (its address is replaced).
    template: ConnectOptions,
    /// Where the map was first read from.
    seeds: Vec<ConnectOptions>,
    map: SlotMap,
    /// Open connections by `host:port`.
    conns: HashMap<String, Client>,
    max_redirects: usize,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient")
            .field("nodes", &self.map.nodes)
            .field("connected", &self.conns.len())
            .finish_non_exhaustive()
    }
}

/// Options from a seed: a URL (`redis://host:port`, credentials allowed) or `host:port`.
/// How long a cluster client built from addresses ([`ClusterClient::connect`]) waits for a
/// node's reply before it takes the node as down (30 s, as a [`crate::ClusterConsumer`]).
/// Without it one node that stops answering (a stopped process, a lost route) held every
/// request of the client forever, not only its own slots'.
pub const DEFAULT_NODE_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The options of a seed given as a URL or `host:port`, with the cluster's response timeout.
pub(crate) fn seed_options(seed: &str) -> Result<ConnectOptions> {
    let opts = if seed.contains("://") {
        ConnectOptions::from_url(seed)
    } else {
        ConnectOptions::from_url(&format!("redis://{seed}"))
    }?;
    Ok(opts.response_timeout(Some(DEFAULT_NODE_RESPONSE_TIMEOUT)))
}

fn addr_text(a: &Address) -> String {
    match a {
        Address::Tcp { host, port } => format!("{host}:{port}"),
        Address::Unix(p) => p.display().to_string(),
    }
}

/// The address a `MOVED` names: `host:port`, the port after the last `:` so that an IPv6 host
/// needs no brackets (`::1:7001`, as Redis writes it; `[::1]:7001` is read too). `None` if it
/// has no port or no host.
fn moved_address(target: &str) -> Option<Address> {
    let (host, port) = target.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    Some(Address::Tcp {
        host: host.to_string(),
        port,
    })
}

/// Connects with `template`'s settings to a node's address.
pub(crate) fn connect_node(template: &ConnectOptions, node: &NodeInfo) -> Result<Client> {
    let mut opts = template.clone();
    opts.address = Address::Tcp {
        host: node.host.clone(),
        port: node.port,
    };
    Client::connect_with(&opts)
}

/// The error for a node that failed.
pub(crate) fn node_down(node: &NodeInfo, reason: &dyn std::fmt::Display) -> Error {
    Error::NodeDown {
        node: node.addr(),
        slots: node.slots_text(),
        reason: reason.to_string(),
    }
}

/// Reads the map from the first of `candidates` that answers. A candidate that answers
/// without being a cluster node fails the whole read (a wrong seed is a mistake to report,
/// not to skip) unless another one answered first.
fn read_map(candidates: &[ConnectOptions]) -> Result<(SlotMap, Option<(String, Client)>)> {
    let mut failures = Vec::new();
    for opts in candidates {
        let addr = addr_text(&opts.address);
        let host = match &opts.address {
            Address::Tcp { host, .. } => host.clone(),
            Address::Unix(_) => String::new(),
        };
        let mut client = match Client::connect_with(opts) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{addr}: {e}"));
                continue;
            }
        };
        match SlotMap::fetch(&mut client, &addr, &host) {
            Ok(map) => return Ok((map, Some((addr, client)))),
            Err(e) if e.is_connection() => failures.push(format!("{addr}: {e}")),
            Err(e) => return Err(e),
        }
    }
    Err(Error::NotCluster {
        node: candidates
            .iter()
            .map(|o| addr_text(&o.address))
            .collect::<Vec<_>>()
            .join(", "),
        message: format!("no seed answered ({})", failures.join("; ")),
    })
}

impl ClusterClient {
    /// Connects to the cluster that `seeds` belong to: each a URL (`redis://[:password@]host:
    /// port`) or `host:port`. The map is read from the first seed that answers; the
    /// credentials of the first seed are used for every node. A node whose reply takes longer
    /// than [`DEFAULT_NODE_RESPONSE_TIMEOUT`] is taken as down (use
    /// [`ClusterClient::connect_with`] for other timeouts). [`Error::NotCluster`] if a seed
    /// is not a cluster node or none answers.
    pub fn connect<S: AsRef<str>>(seeds: &[S]) -> Result<Self> {
        let opts = seeds
            .iter()
            .map(|s| seed_options(s.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Self::connect_with(opts)
    }

    /// Connects as [`ClusterClient::connect`], with the settings (password, client name,
    /// timeouts, RESP3) of the first of `seeds` for every node.
    pub fn connect_with(seeds: Vec<ConnectOptions>) -> Result<Self> {
        let Some(template) = seeds.first().cloned() else {
            return Err(Error::InvalidArgument(
                "a cluster client needs at least one seed address".into(),
            ));
        };
        let (map, conn) = read_map(&seeds)?;
        let mut conns = HashMap::new();
        if let Some((addr, client)) = conn {
            conns.insert(addr, client);
        }
        Ok(ClusterClient {
            template,
            seeds,
            map,
            conns,
            max_redirects: DEFAULT_MAX_REDIRECTS,
        })
    }

    /// Sets how many times a request redirected by `MOVED` is resent (default
    /// [`DEFAULT_MAX_REDIRECTS`]; 0: never).
    pub fn max_redirects(mut self, n: usize) -> Self {
        self.max_redirects = n;
        self
    }

    /// The nodes of the map, in `CLUSTER SLOTS` order.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.map.nodes
    }

    /// The settings used to connect to every node.
    pub fn options(&self) -> &ConnectOptions {
        &self.template
    }

    /// The node serving event (`run`, `event`).
    pub fn event_node(&self, run: u32, event: u64) -> Result<&NodeInfo> {
        Ok(&self.map.nodes[self.map.owner(event_slot(run, event))?])
    }

    /// Index (into [`ClusterClient::nodes`]) of the node serving `slot`.
    pub fn slot_node(&self, slot: u16) -> Result<usize> {
        self.map.owner(slot)
    }

    /// Reads the map again, from the nodes known (then the seeds).
    pub fn refresh(&mut self) -> Result<()> {
        self.refresh_from(None)
    }

    /// Reads the map again, asking `first` (e.g. the node a MOVED named) before the others.
    fn refresh_from(&mut self, first: Option<&str>) -> Result<()> {
        let mut candidates = Vec::new();
        // Fix (found in review): the target was read as a seed URL, and a MOVED names an IPv6
        // node unbracketed (`::1:7001`, as Redis writes it), so `redis://::1:7001` did not
        // parse and the `?` failed the request. A target that cannot be read is skipped (the
        // known nodes and the seeds are asked), not a failure of the request.
        if let Some(address) = first.and_then(moved_address) {
            let mut o = self.template.clone();
            o.address = address;
            candidates.push(o);
        }
        for n in &self.map.nodes {
            let mut o = self.template.clone();
            o.address = Address::Tcp {
                host: n.host.clone(),
                port: n.port,
            };
            candidates.push(o);
        }
        for s in &self.seeds {
            let mut o = self.template.clone();
            o.address = s.address.clone();
            candidates.push(o);
        }
        let (map, conn) = read_map(&candidates)?;
        self.map = map;
        let keep: Vec<String> = self.map.nodes.iter().map(NodeInfo::addr).collect();
        self.conns.retain(|a, _| keep.contains(a));
        if let Some((addr, client)) = conn {
            if keep.contains(&addr) {
                // Fix (found in review): the connection just opened replaces a kept one, which
                // may be stale (a map change restarts every node); `or_insert` kept the stale
                // one and dropped the fresh one.
                self.conns.insert(addr, client);
            }
        }
        Ok(())
    }

    /// The connection to node `i`, made if needed; [`Error::NodeDown`] if it cannot be.
    pub fn node_client(&mut self, i: usize) -> Result<&mut Client> {
        let node = self
            .map
            .nodes
            .get(i)
            .ok_or_else(|| Error::InvalidArgument(format!("no node {i} in the map")))?;
        let addr = node.addr();
        if !self.conns.contains_key(&addr) {
            let c = connect_node(&self.template, node).map_err(|e| node_down(node, &e))?;
            self.conns.insert(addr.clone(), c);
        }
        self.conns
            .get_mut(&addr)
            .ok_or_else(|| Error::Protocol("connection vanished".into()))
    }

    /// Sends `cmd` to node `i`: a failed connection is dropped and reported as NodeDown. A
    /// connection kept from before that fails (the node restarted) is replaced once: every
    /// command of the protocol may be sent again. One that timed out is not: the node is
    /// alive but not answering, and a second try would double the caller's wait.
    fn request_node(&mut self, i: usize, cmd: &Cmd) -> Result<Value> {
        let addr = self.map.nodes[i].addr();
        let kept = self.conns.contains_key(&addr);
        let r = self.node_client(i)?.request(cmd);
        let r = match r {
            Err(e) if e.is_connection() && kept && !e.is_timeout() => {
                self.conns.remove(&addr);
                self.node_client(i)?.request(cmd)
            }
            r => r,
        };
        match r {
            Err(e) if e.is_connection() => {
                self.conns.remove(&addr);
                Err(node_down(&self.map.nodes[i], &e))
            }
            r => r,
        }
    }

    /// Sends `cmd` to the node of `slot`, following MOVED.
    pub(crate) fn request(&mut self, slot: u16, cmd: &Cmd) -> Result<Value> {
        let mut last = String::new();
        for _ in 0..=self.max_redirects {
            let i = self.map.owner(slot)?;
            match self.request_node(i, cmd)? {
                Value::ServerError(e) if e.code() == "MOVED" => {
                    let target = e
                        .details()
                        .and_then(|d| d.split_ascii_whitespace().nth(1))
                        .unwrap_or_default()
                        .to_string();
                    self.refresh_from((!target.is_empty()).then_some(target.as_str()))?;
                    last = target;
                }
                v => return Ok(v),
            }
        }
        Err(Error::Redirects {
            slot,
            tries: self.max_redirects + 1,
            last,
        })
    }

    /// `FRAG.PUT run:event detector component value`: stores one fragment on its event's
    /// node.
    pub fn frag_put(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> Result<()> {
        let mut p = ClusterPipeline::new();
        p.frag_put(run, event, detector, component, value, durability);
        first_error(self.execute(&p)?).map(|_| ())
    }

    /// Stores `fragments`, each on its event's node: one pipeline per node, the nodes
    /// written to at once. Every fragment is tried; the first error is returned.
    pub fn frag_put_many(
        &mut self,
        fragments: &[Fragment],
        durability: Option<Durability>,
    ) -> Result<()> {
        let mut p = ClusterPipeline::new();
        for f in fragments {
            p.put_fragment(f, durability);
        }
        first_error(self.execute(&p)?).map(|_| ())
    }

    /// `FRAG.GET run:event detector component`.
    pub fn frag_get(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
    ) -> Result<Option<Vec<u8>>> {
        let cmd = proto::frag_get_tagged(run, event, detector, component);
        proto::optional_bytes(self.request(event_slot(run, event), &cmd)?)
    }

    /// `EVENT.GET run:event`: every fragment of the event, in key order.
    pub fn event_get(&mut self, run: u32, event: u64) -> Result<Vec<Fragment>> {
        let cmd = proto::event_get_tagged(run, event);
        proto::fragments(self.request(event_slot(run, event), &cmd)?, run, event)
    }

    /// `EVENT.SEAL run:event`: the event is READY now.
    pub fn event_seal(
        &mut self,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> Result<()> {
        let mut c = redis::cmd("EVENT.SEAL");
        c.arg(event_tag(run, event));
        if let Some(d) = durability {
            c.arg("DURABILITY").arg(d.as_str());
        }
        proto::ok(self.request(event_slot(run, event), &c)?)
    }

    /// `STORE.STATS` of every node, in map order (a node that fails has its error).
    pub fn store_stats_all(&mut self) -> Vec<(NodeInfo, Result<HashMap<String, StatValue>>)> {
        (0..self.map.nodes.len())
            .map(|i| {
                let r = self
                    .request_node(i, &proto::store_stats())
                    .and_then(proto::stats);
                (self.map.nodes[i].clone(), r)
            })
            .collect()
    }

    /// `EVENT.GROUP CREATE name` on every node (consumer groups are per node; a cluster
    /// consumer group is the same name on each). The first error is returned.
    pub fn group_create(&mut self, name: &str, required: bool) -> Result<()> {
        let mut first = None;
        for i in 0..self.map.nodes.len() {
            let r = self
                .request_node(i, &proto::group_create(name, required))
                .and_then(proto::ok);
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Sends every command of `pipeline` to its node, all nodes at once, with one round trip
    /// per node. One result per command, in queue order: a command whose node cannot be
    /// reached has [`Error::NodeDown`]; commands redirected by `MOVED` are resent after the
    /// map is read again (at most [`ClusterClient::max_redirects`] times, then
    /// [`Error::Redirects`]). The outer error is a failure to read the map.
    pub fn execute(&mut self, pipeline: &ClusterPipeline) -> Result<Vec<Result<()>>> {
        self.execute_windowed(pipeline, usize::MAX)
    }

    /// [`ClusterClient::execute`] keeping at most `window` commands unanswered per node.
    pub fn execute_windowed(
        &mut self,
        pipeline: &ClusterPipeline,
        window: usize,
    ) -> Result<Vec<Result<()>>> {
        let n = pipeline.len();
        let mut results: Vec<Option<Result<()>>> = (0..n).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..n).collect();
        let mut last_moved = String::new();
        let mut redirects = 0usize;
        // Fix (found in review): the nodes whose kept connection failed and was retried, by
        // address (a refresh renumbers the nodes). One flag for the whole pipeline retried only
        // the first stale node: after every node restarted with a new map, the commands a
        // MOVED sent to a second node failed NodeDown on its stale connection, the node up.
        let mut stale_retried: HashSet<String> = HashSet::new();
        let mut refresh = false;
        while !pending.is_empty() {
            if refresh {
                let first = (!last_moved.is_empty()).then(|| last_moved.clone());
                self.refresh_from(first.as_deref())?;
            }
            // Group the commands by node, keeping queue order within each.
            let mut by_node: Vec<(usize, Vec<usize>)> = Vec::new();
            for &c in &pending {
                let node = self.map.owner(pipeline.slots[c])?;
                match by_node.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, cmds)) => cmds.push(c),
                    None => by_node.push((node, vec![c])),
                }
            }
            let mut moved = Vec::new();
            let mut stale = Vec::new();
            for lane in self.send_by_node(pipeline, by_node, window) {
                let addr = self.map.nodes[lane.node].addr();
                let may_retry = lane.kept && !lane.timed_out && !stale_retried.contains(&addr);
                let mut retried = false;
                for (c, r) in lane.cmds.into_iter().zip(lane.out) {
                    match r {
                        Err(Error::Moved { addr, .. }) => {
                            last_moved = addr;
                            moved.push(c);
                        }
                        // A kept connection that failed (the node restarted): once more.
                        Err(Error::NodeDown { .. }) if may_retry => {
                            retried = true;
                            stale.push(c);
                        }
                        r => results[c] = Some(r),
                    }
                }
                if retried {
                    stale_retried.insert(addr);
                }
            }
            if !moved.is_empty() {
                if redirects == self.max_redirects {
                    for c in moved {
                        results[c] = Some(Err(Error::Redirects {
                            slot: pipeline.slots[c],
                            tries: self.max_redirects + 1,
                            last: last_moved.clone(),
                        }));
                    }
                } else {
                    redirects += 1;
                    refresh = true;
                    stale.extend(moved);
                }
            }
            stale.sort_unstable();
            pending = stale;
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Protocol("a command was not sent".into()))))
            .collect())
    }

    /// Sends each node its commands (windowed, the nodes in parallel) and reads the replies.
    fn send_by_node(
        &mut self,
        pipeline: &ClusterPipeline,
        by_node: Vec<(usize, Vec<usize>)>,
        window: usize,
    ) -> Vec<Lane> {
        let window = window.max(1);
        let mut lanes: Vec<Lane> = by_node
            .into_iter()
            .map(|(node, cmds)| {
                let mut packed = Pipeline::with_capacity(cmds.len());
                for &c in &cmds {
                    packed.push_from(&pipeline.cmds, c);
                }
                let info = &self.map.nodes[node];
                let cached = self.conns.remove(&info.addr());
                let kept = cached.is_some();
                let client = match cached {
                    Some(c) => Ok(c),
                    None => connect_node(&self.template, info),
                };
                let mut out = Vec::with_capacity(cmds.len());
                let client = match client {
                    Ok(c) => Some(c),
                    Err(e) => {
                        let reason = e.to_string();
                        out.extend(cmds.iter().map(|_| Err(node_down(info, &reason))));
                        None
                    }
                };
                Lane {
                    node,
                    cmds,
                    packed,
                    sent: 0,
                    out,
                    client,
                    kept,
                    timed_out: false,
                }
            })
            .collect();
        let fail = |lane: &mut Lane, info: &NodeInfo, e: &Error| {
            let reason = e.to_string();
            while lane.out.len() < lane.cmds.len() {
                lane.out.push(Err(node_down(info, &reason)));
            }
            lane.client = None;
            lane.timed_out = e.is_timeout();
        };
        loop {
            let mut busy = false;
            for lane in &mut lanes {
                let Some(client) = lane.client.as_mut() else {
                    continue;
                };
                let n = lane.cmds.len();
                let in_flight = lane.sent - lane.out.len();
                if lane.sent < n && in_flight <= window / 2 {
                    let upto = n.min(lane.out.len().saturating_add(window));
                    if let Err(e) = client.send_packed(lane.packed.packed(lane.sent, upto)) {
                        fail(lane, &self.map.nodes[lane.node], &e);
                        continue;
                    }
                    lane.sent = upto;
                }
                busy = true;
            }
            if !busy {
                break;
            }
            for lane in &mut lanes {
                let Some(client) = lane.client.as_mut() else {
                    continue;
                };
                let n = lane.cmds.len();
                // Read until half the window is free (or all, once everything is sent).
                let mut failed = None;
                while lane.out.len() < lane.sent
                    && (lane.sent == n || lane.sent - lane.out.len() > window / 2)
                {
                    match client.recv() {
                        Ok(v) => lane.out.push(proto::ok(v)),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                if let Some(e) = failed {
                    fail(lane, &self.map.nodes[lane.node], &e);
                } else if lane.out.len() == n {
                    if let Some(c) = lane.client.take() {
                        self.conns.insert(self.map.nodes[lane.node].addr(), c);
                    }
                }
            }
        }
        lanes
    }
}

/// The commands sent to one node by [`ClusterClient::execute_windowed`], and their results.
struct Lane {
    node: usize,
    /// Indexes of the commands in the caller's pipeline.
    cmds: Vec<usize>,
    packed: Pipeline,
    sent: usize,
    out: Vec<Result<()>>,
    client: Option<Client>,
    /// The connection was kept from an earlier request (so it may be stale).
    kept: bool,
    /// It failed by timing out: the node is there but not answering, so its commands are
    /// not sent again on a new connection (that doubled the caller's wait).
    timed_out: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found in review: seeds given as addresses had no response timeout, so one node that
    /// stopped answering held every request of the client forever.
    #[test]
    fn seeds_given_as_addresses_get_the_cluster_response_timeout() {
        for seed in [
            "127.0.0.1:7001",
            "redis://127.0.0.1:7001",
            "redis://:pw@[::1]:7001",
        ] {
            let o = seed_options(seed).unwrap();
            assert_eq!(
                o.response_timeout,
                Some(DEFAULT_NODE_RESPONSE_TIMEOUT),
                "{seed}"
            );
        }
    }

    #[test]
    fn moved_targets() {
        let tcp = |h: &str, port| {
            Some(Address::Tcp {
                host: h.to_string(),
                port,
            })
        };
        assert_eq!(moved_address("10.0.0.1:7001"), tcp("10.0.0.1", 7001));
        assert_eq!(moved_address("::1:7001"), tcp("::1", 7001));
        assert_eq!(moved_address("[::1]:7001"), tcp("::1", 7001));
        assert_eq!(moved_address("fe80::2:3:7002"), tcp("fe80::2:3", 7002));
        assert_eq!(moved_address("node-a:7001"), tcp("node-a", 7001));
        assert_eq!(moved_address("7001"), None);
        assert_eq!(moved_address(":7001"), None);
        assert_eq!(moved_address("host:"), None);
        assert_eq!(moved_address("host:99999"), None);
    }
}
