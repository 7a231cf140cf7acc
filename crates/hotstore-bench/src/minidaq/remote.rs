//! `minidaq --remote HOST:PORT`: the same readout and collector threads as the embedded run,
//! each on its own connection to a hotstore server (`hotstore serve`), with `--window` requests
//! in flight per connection (the DAQDB paper's remote clients, Figs. 5-7). Readout sends
//! `FRAG.PUT`s through a pipeline; collectors claim up to `--window` READY events per round
//! trip (`EVENT.NEXT`), check every fragment and acknowledge them in one pipeline. The counters,
//! sampler and report are those of the local run, so both print the same table and plot.
//!
//! Against a cluster (`--remote A,B,C` or `--cluster`), readout sends each event's fragments to
//! the node of its slot (a [`ClusterClient`] per thread, the nodes written to at once) and
//! collectors claim from every node (a [`ClusterConsumer`] each).

use super::workload::{AckLine, Collected, Shared, Sizes, PUBLISH_EVERY};
use super::Distro;
use hotstore::FragmentKey;
use hotstore_client::{
    Ack, Client, ClusterClient, ClusterConsumer, ClusterPipeline, ConsumerOptions, Durability,
    Error, Pipeline,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a full server is waited out (in steps) before the run fails.
const FULL_WAIT: Duration = Duration::from_secs(60);
/// A collector finding nothing READY waits this long on the server (EVENT.NEXT BLOCK).
const IDLE_BLOCK: Duration = Duration::from_millis(20);

/// Where a remote run sends its requests.
pub struct RemoteTarget {
    /// `HOST:PORT`, or the cluster's seeds separated by commas.
    pub addr: String,
    /// Requests in flight per connection.
    pub window: usize,
    /// Readout seals each event after its last fragment (the server completes events only on
    /// EVENT.SEAL: `expected_fragments` 0).
    pub seal: bool,
    /// The servers are the nodes of a cluster (`addr` lists seeds).
    pub cluster: bool,
    /// Events collected from each node (`host:port`), in a cluster run.
    pub node_events: parking_lot::Mutex<BTreeMap<String, u64>>,
}

impl RemoteTarget {
    /// A new connection to the server.
    pub fn connect(&self) -> Result<Client, String> {
        Client::connect(&format!("redis://{}", self.addr))
            .map_err(|e| format!("cannot connect to hotstore at {}: {e}", self.addr))
    }

    /// The seeds of the cluster.
    pub fn seeds(&self) -> Vec<&str> {
        self.addr
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// A new client of the cluster.
    pub fn connect_cluster(&self) -> Result<ClusterClient, String> {
        ClusterClient::connect(&self.seeds()).map_err(|e| {
            format!(
                "cannot connect to the hotstore cluster at {}: {e}",
                self.addr
            )
        })
    }
}

/// What readout writes through: one server's pipeline, or a cluster's.
trait Writer {
    type Batch: Default;
    fn put(b: &mut Self::Batch, run: u32, event: u64, det: u16, value: &[u8], d: Durability);
    fn seal(b: &mut Self::Batch, run: u32, event: u64, d: Durability);
    fn push_from(b: &mut Self::Batch, other: &Self::Batch, i: usize);
    fn execute(&mut self, b: &Self::Batch, window: usize) -> Result<Vec<Result<(), Error>>, Error>;
}

impl Writer for Client {
    type Batch = Pipeline;
    fn put(b: &mut Pipeline, run: u32, event: u64, det: u16, value: &[u8], d: Durability) {
        b.frag_put(run, event, det, 0, value, Some(d));
    }
    fn seal(b: &mut Pipeline, run: u32, event: u64, d: Durability) {
        b.event_seal(run, event, Some(d));
    }
    fn push_from(b: &mut Pipeline, other: &Pipeline, i: usize) {
        b.push_from(other, i);
    }
    fn execute(&mut self, b: &Pipeline, window: usize) -> Result<Vec<Result<(), Error>>, Error> {
        self.execute_windowed(b, window)
    }
}

impl Writer for ClusterClient {
    type Batch = ClusterPipeline;
    fn put(b: &mut ClusterPipeline, run: u32, event: u64, det: u16, value: &[u8], d: Durability) {
        b.frag_put(run, event, det, 0, value, Some(d));
    }
    fn seal(b: &mut ClusterPipeline, run: u32, event: u64, d: Durability) {
        b.event_seal(run, event, Some(d));
    }
    fn push_from(b: &mut ClusterPipeline, other: &ClusterPipeline, i: usize) {
        b.push_from(other, i);
    }
    fn execute(
        &mut self,
        b: &ClusterPipeline,
        window: usize,
    ) -> Result<Vec<Result<(), Error>>, Error> {
        self.execute_windowed(b, window)
    }
}

fn durability(d: hotstore::Durability) -> Durability {
    match d {
        hotstore::Durability::Memory => Durability::Memory,
        _ => Durability::Persisted,
    }
}

/// Readout thread `index` of `threads`, over the network.
pub fn readout(
    sh: &Shared,
    target: &RemoteTarget,
    index: usize,
    threads: usize,
    mean: u64,
    distro: Distro,
    seed: u64,
) {
    let args = (index, threads, mean, distro, seed);
    if target.cluster {
        match target.connect_cluster() {
            Ok(c) => readout_with(sh, target, c, args),
            Err(e) => done_readout(sh, Some(e), 0, 0),
        }
    } else {
        match target.connect() {
            Ok(c) => readout_with(sh, target, c, args),
            Err(e) => done_readout(sh, Some(e), 0, 0),
        }
    }
}

fn readout_with<W: Writer>(
    sh: &Shared,
    target: &RemoteTarget,
    mut client: W,
    (index, threads, mean, distro, seed): (usize, usize, u64, Distro, u64),
) {
    let mut sizes = Sizes::new(mean, distro, seed ^ index as u64);
    let mut value = vec![0u8; Sizes::max(mean, distro) as usize];
    let d = durability(sh.durability);
    let (mut ops, mut bytes) = (0u64, 0u64);
    let mut event = index as u64;
    // One pipeline holds about a window of fragments (whole events), sent in one go.
    let events_per_batch = (target.window / usize::from(sh.detectors).max(1)).max(1);
    let mut failure = None;
    'run: while !sh.stop_readout.load(Ordering::Relaxed) {
        let mut batch = W::Batch::default();
        let mut logged: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut batch_events = 0u64;
        let mut batch_bytes = 0u64;
        for _ in 0..events_per_batch {
            if sh.events_target > 0 && event >= sh.events_target {
                break;
            }
            if sh.bytes_budget > 0
                && sh.bytes_written.load(Ordering::Relaxed) + batch_bytes >= sh.bytes_budget
            {
                break;
            }
            for det in 0..sh.detectors {
                let key = FragmentKey::new(sh.run, event, det, 0).to_bytes();
                let len = sizes.next();
                sh.pattern.fill(&key, &mut value[..len]);
                W::put(&mut batch, sh.run, event, det, &value[..len], d);
                logged.push((key.to_vec(), len as u64));
                batch_bytes += len as u64;
            }
            if target.seal {
                W::seal(&mut batch, sh.run, event, d);
            }
            batch_events += 1;
            event += threads as u64;
        }
        if batch_events == 0 {
            break;
        }
        // A full server answers FULL for the puts that did not fit: resend those, waiting in
        // steps for the collectors to make room.
        let waited_from = Instant::now();
        let mut pending = batch;
        loop {
            let results = match client.execute(&pending, target.window) {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(format!("readout: {e}"));
                    break 'run;
                }
            };
            let mut retry = W::Batch::default();
            let mut full = false;
            for (i, r) in results.into_iter().enumerate() {
                match r {
                    Ok(()) => {}
                    Err(Error::Full(_)) => {
                        full = true;
                        W::push_from(&mut retry, &pending, i);
                    }
                    Err(e) => {
                        failure = Some(format!("readout put: {e}"));
                        break 'run;
                    }
                }
            }
            if !full {
                break;
            }
            if sh.stop_readout.load(Ordering::Acquire) {
                break 'run;
            }
            if waited_from.elapsed() > FULL_WAIT {
                failure = Some(format!(
                    "readout: the server stayed full for {} s",
                    FULL_WAIT.as_secs()
                ));
                break 'run;
            }
            std::thread::sleep(Duration::from_millis(5));
            pending = retry;
        }
        for (key, len) in logged {
            ops += 1;
            bytes += len;
            sh.log(AckLine::Put { key, len });
        }
        sh.events_written.fetch_add(batch_events, Ordering::Relaxed);
        if ops >= PUBLISH_EVERY {
            sh.counters.add_readout(ops, bytes);
            sh.bytes_written.fetch_add(bytes, Ordering::Relaxed);
            (ops, bytes) = (0, 0);
        }
    }
    done_readout(sh, failure, ops, bytes);
}

fn done_readout(sh: &Shared, failure: Option<String>, ops: u64, bytes: u64) {
    if let Some(f) = failure {
        sh.fail(f);
    }
    sh.counters.add_readout(ops, bytes);
    sh.bytes_written.fetch_add(bytes, Ordering::Relaxed);
    sh.readout_running.fetch_sub(1, Ordering::AcqRel);
}

/// Collector thread `index`, over the network.
pub fn collect(sh: &Shared, target: &RemoteTarget, index: usize, seed: u64) {
    if target.cluster {
        return collect_cluster(sh, target, index, seed);
    }
    let name = format!("collector-{index}");
    let mut client = match target.connect() {
        Ok(c) => c,
        Err(e) => return sh.fail(e),
    };
    let d = durability(sh.durability);
    let mut rng = StdRng::seed_from_u64(seed ^ (index as u64) << 32);
    let mut collected = Collected::default();
    while !sh.stop_collect.load(Ordering::Relaxed) {
        let readout_done = sh.readout_running.load(Ordering::Acquire) == 0;
        let claimed = match client.event_next_batch(sh.lease, target.window) {
            Ok(c) if c.is_empty() => match client.event_next(sh.lease, Some(IDLE_BLOCK)) {
                Ok(Some(c)) => vec![c],
                Ok(None) => {
                    if sh.all_collected(readout_done) {
                        break;
                    }
                    continue;
                }
                Err(e) => return sh.fail(format!("{name}: EVENT.NEXT: {e}")),
            },
            Ok(c) => c,
            Err(e) => return sh.fail(format!("{name}: EVENT.NEXT: {e}")),
        };
        let mut acks = Pipeline::new();
        let mut settled = Vec::with_capacity(claimed.len());
        for c in &claimed {
            let mut bad = 0u64;
            for f in &c.fragments {
                let key = FragmentKey::new(c.run, c.event, f.detector, f.component).to_bytes();
                if sh.verify && !sh.pattern.check(&key, &f.value) {
                    bad += 1;
                }
            }
            let n = c.fragments.len() as u64;
            sh.check_event(&format_args!("{}/{}", c.run, c.event), n, bad);
            let keep = sh.acceptance > 0.0 && rng.gen_bool(sh.acceptance.min(1.0));
            acks.event_ack(
                &c.token,
                if keep { Ack::Keep } else { Ack::Remove },
                Some(d),
            );
            settled.push((keep, n, c.bytes(), c.run, c.event));
        }
        let results = match client.execute(&acks) {
            Ok(r) => r,
            Err(e) => return sh.fail(format!("{name}: EVENT.ACK: {e}")),
        };
        for (r, (keep, n, b, run, event)) in results.into_iter().zip(settled) {
            if let Err(e) = r {
                return sh.fail(format!("{name}: ack of event {run}/{event}: {e}"));
            }
            let prefix = hotstore::EventId::new(run, event).as_bytes().to_vec();
            sh.acknowledged(&mut collected, prefix, keep, n, b);
        }
    }
    sh.publish_collected(collected);
}

/// Collector thread `index` of a cluster run: claims from every node (a round of
/// `EVENT.NEXT COUNT window` to all at once, blocking only when none had an event), checks
/// every fragment and acknowledges each node's claims with one `EVENT.ACK`.
fn collect_cluster(sh: &Shared, target: &RemoteTarget, index: usize, seed: u64) {
    let name = format!("collector-{index}");
    let opts = ConsumerOptions {
        lease: sh.lease,
        count: target.window,
        consumer: Some(name.clone()),
        ..ConsumerOptions::default()
    };
    let mut consumer = match target
        .connect_cluster()
        .and_then(|c| ClusterConsumer::new(&c, opts).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => return sh.fail(format!("{name}: {e}")),
    };
    let d = durability(sh.durability);
    let mut rng = StdRng::seed_from_u64(seed ^ (index as u64) << 32);
    let mut collected = Collected::default();
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    while !sh.stop_collect.load(Ordering::Relaxed) {
        let readout_done = sh.readout_running.load(Ordering::Acquire) == 0;
        let claimed = match consumer.next_batch(Some(IDLE_BLOCK)) {
            Ok(c) => c,
            Err(e) => return sh.fail(format!("{name}: EVENT.NEXT: {e}")),
        };
        if claimed.is_empty() {
            if let Some(down) = consumer.health().into_iter().find(|h| !h.up) {
                return sh.fail(format!(
                    "{name}: {}",
                    down.last_error.unwrap_or_else(|| "a node is down".into())
                ));
            }
            if sh.all_collected(readout_done) {
                break;
            }
            continue;
        }
        let mut keeps = Vec::new();
        let mut removes = Vec::new();
        for c in claimed {
            let mut bad = 0u64;
            for f in &c.fragments {
                let key = FragmentKey::new(c.run, c.event, f.detector, f.component).to_bytes();
                if sh.verify && !sh.pattern.check(&key, &f.value) {
                    bad += 1;
                }
            }
            sh.check_event(
                &format_args!("{}/{}", c.run, c.event),
                c.fragments.len() as u64,
                bad,
            );
            *per_node.entry(c.node().to_string()).or_default() += 1;
            if sh.acceptance > 0.0 && rng.gen_bool(sh.acceptance.min(1.0)) {
                keeps.push(c);
            } else {
                removes.push(c);
            }
        }
        for (claims, keep) in [(removes, false), (keeps, true)] {
            if claims.is_empty() {
                continue;
            }
            let ack = if keep { Ack::Keep } else { Ack::Remove };
            let results = match consumer.ack_many(&claims, ack, Some(d)) {
                Ok(r) => r,
                Err(e) => return sh.fail(format!("{name}: EVENT.ACK: {e}")),
            };
            for (r, c) in results.into_iter().zip(&claims) {
                if let Err(e) = r {
                    return sh.fail(format!(
                        "{name}: ack of event {}/{} on {}: {e}",
                        c.run,
                        c.event,
                        c.node()
                    ));
                }
                let prefix = hotstore::EventId::new(c.run, c.event).as_bytes().to_vec();
                sh.acknowledged(
                    &mut collected,
                    prefix,
                    keep,
                    c.fragments.len() as u64,
                    c.bytes(),
                );
            }
        }
    }
    let mut all = target.node_events.lock();
    for (node, n) in per_node {
        *all.entry(node).or_default() += n;
    }
    drop(all);
    sh.publish_collected(collected);
}
