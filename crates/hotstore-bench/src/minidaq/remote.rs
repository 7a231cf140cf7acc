//! `minidaq --remote HOST:PORT`: the same readout and collector threads as the embedded run,
//! each on its own connection to a hotstore server (`hotstore serve`), with `--window` requests
//! in flight per connection (the DAQDB paper's remote clients, Figs. 5-7). Readout sends
//! `FRAG.PUT`s through a pipeline; collectors claim up to `--window` READY events per round
//! trip (`EVENT.NEXT`), check every fragment and acknowledge them in one pipeline. The counters,
//! sampler and report are those of the local run, so both print the same table and plot.

use super::workload::{AckLine, Collected, Shared, Sizes, PUBLISH_EVERY};
use super::Distro;
use hotstore::FragmentKey;
use hotstore_client::{Ack, Client, Durability, Error, Pipeline};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a full server is waited out (in steps) before the run fails.
const FULL_WAIT: Duration = Duration::from_secs(60);
/// A collector finding nothing READY waits this long on the server (EVENT.NEXT BLOCK).
const IDLE_BLOCK: Duration = Duration::from_millis(20);

/// Where a remote run sends its requests.
pub struct RemoteTarget {
    /// `HOST:PORT`.
    pub addr: String,
    /// Requests in flight per connection.
    pub window: usize,
    /// Readout seals each event after its last fragment (the server completes events only on
    /// EVENT.SEAL: `expected_fragments` 0).
    pub seal: bool,
}

impl RemoteTarget {
    /// A new connection to the server.
    pub fn connect(&self) -> Result<Client, String> {
        Client::connect(&format!("redis://{}", self.addr))
            .map_err(|e| format!("cannot connect to hotstore at {}: {e}", self.addr))
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
    let mut client = match target.connect() {
        Ok(c) => c,
        Err(e) => return done_readout(sh, Some(e), 0, 0),
    };
    let mut sizes = Sizes::new(mean, distro, seed ^ index as u64);
    let mut value = vec![0u8; Sizes::max(mean, distro) as usize];
    let d = durability(sh.durability);
    let (mut ops, mut bytes) = (0u64, 0u64);
    let mut event = index as u64;
    // One pipeline holds about a window of fragments (whole events), sent in one go.
    let events_per_batch = (target.window / usize::from(sh.detectors).max(1)).max(1);
    let mut failure = None;
    'run: while !sh.stop_readout.load(Ordering::Relaxed) {
        let mut batch = Pipeline::new();
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
                batch.frag_put(sh.run, event, det, 0, &value[..len], Some(d));
                logged.push((key.to_vec(), len as u64));
                batch_bytes += len as u64;
            }
            if target.seal {
                batch.event_seal(sh.run, event, Some(d));
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
            let results = match client.execute_windowed(&pending, target.window) {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(format!("readout: {e}"));
                    break 'run;
                }
            };
            let mut retry = Pipeline::new();
            let mut full = false;
            for (i, r) in results.into_iter().enumerate() {
                match r {
                    Ok(()) => {}
                    Err(Error::Full(_)) => {
                        full = true;
                        retry.push_from(&pending, i);
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
