//! The client against a cluster of three in-process servers: redis-rs's own cluster client
//! finds every key and event, producers and cluster consumers move every event exactly once,
//! a node that dies does not stop the others, and bad seeds and MOVED loops are errors.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore_client::{
    event_slot, Ack, ClusterClaim, ClusterClient, ClusterConsumer, ClusterPipeline,
    ConsumerOptions, Durability, Error, Fragment,
};
use hotstore_server::cluster::map::{ClusterMap, Node};
use hotstore_server::{spawn, ServerConfig, ServerHandle};
use std::collections::{HashMap, HashSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A hang guard only: every test finishes in seconds.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// `n` ports free right now (bound then released).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hotstore-client-cluster-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

struct Cluster {
    map: ClusterMap,
    map_path: PathBuf,
    nodes: Vec<Option<ServerHandle>>,
    dir: tempfile::TempDir,
}

/// A node's server on its own store, `expected` fragments completing an event.
fn node_config(dir: &Path, map: &Path, node: &Node, expected: u32) -> ServerConfig {
    let mut c = ServerConfig::for_dir(dir.join(&node.id));
    c.port = node.port;
    c.threads = 2;
    c.cluster = Some(map.to_path_buf());
    c.durability = hotstore::Durability::Memory;
    c.expected_fragments = Some(expected);
    c
}

fn start(n: usize, expected: u32) -> Cluster {
    let dir = temp_dir();
    let addrs: Vec<(String, u16)> = free_ports(n)
        .into_iter()
        .map(|p| ("127.0.0.1".to_string(), p))
        .collect();
    let map = ClusterMap::even(1, &addrs).unwrap();
    let map_path = dir.path().join("cluster.toml");
    std::fs::write(&map_path, map.to_toml()).unwrap();
    let nodes = map
        .nodes
        .iter()
        .map(|node| Some(spawn(node_config(dir.path(), &map_path, node, expected)).unwrap()))
        .collect();
    Cluster {
        map,
        map_path,
        nodes,
        dir,
    }
}

impl Cluster {
    fn seeds(&self) -> Vec<String> {
        self.map
            .nodes
            .iter()
            .map(|n| format!("redis://{}", n.addr()))
            .collect()
    }

    /// Index in the map of the node serving `slot`.
    fn owner(&self, slot: u16) -> usize {
        let port = self.map.owner(slot).port;
        self.map.nodes.iter().position(|n| n.port == port).unwrap()
    }

    /// Stops node `i` (as a crash looks to clients: its connections close).
    fn kill(&mut self, i: usize) {
        let h = self.nodes[i].take().unwrap();
        std::thread::spawn(move || h.shutdown())
            .join()
            .unwrap()
            .unwrap();
    }
}

/// The bytes of fragment (`event`, `detector`): a length and content only they give.
fn payload(run: u32, event: u64, detector: u16) -> Vec<u8> {
    let len = 64 + ((event * 131 + u64::from(detector) * 17) % 2000) as usize;
    let seed = u64::from(run) << 40 ^ event << 8 ^ u64::from(detector);
    (0..len)
        .map(|i| (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 56)) as u8 ^ i as u8)
        .collect()
}

fn consumer(c: &Cluster, opts: ConsumerOptions) -> ClusterConsumer {
    ClusterConsumer::connect(&c.seeds(), opts).unwrap()
}

#[test]
fn redis_rs_cluster_client_finds_every_key_and_event() {
    let c = start(3, 1);
    let client = redis::cluster::ClusterClient::new(c.seeds()).unwrap();
    let mut con = client.get_connection().unwrap();
    // Plain keys (not 16 bytes long: those are fragment keys) spread over the nodes.
    for i in 0..300 {
        redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(format!("value {i}"))
            .query::<()>(&mut con)
            .unwrap();
    }
    for i in 0..300 {
        let v: String = redis::cmd("GET")
            .arg(format!("key:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(v, format!("value {i}"));
    }
    // Events in the tag form: redis-rs hashes argument 1, the event's tag.
    for e in 0..60u64 {
        for d in 0..2u16 {
            redis::cmd("FRAG.PUT")
                .arg(format!("7:{e}"))
                .arg(d)
                .arg(0)
                .arg(payload(7, e, d))
                .query::<()>(&mut con)
                .unwrap();
        }
    }
    let mut per_node = [0usize; 3];
    for e in 0..60u64 {
        let v: Vec<u8> = redis::cmd("FRAG.GET")
            .arg(format!("7:{e}"))
            .arg(1)
            .arg(0)
            .query(&mut con)
            .unwrap();
        assert_eq!(v, payload(7, e, 1));
        let frags: Vec<(u16, u16, Vec<u8>)> = redis::cmd("EVENT.GET")
            .arg(format!("7:{e}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(
            frags,
            vec![(0, 0, payload(7, e, 0)), (1, 0, payload(7, e, 1))]
        );
        per_node[c.owner(event_slot(7, e))] += 1;
    }
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
    // Each node holds only its own keys: the sum of their DBSIZEs is every key once.
    let mut total = 0;
    for n in &c.map.nodes {
        let mut one = redis::Client::open(format!("redis://{}", n.addr()))
            .unwrap()
            .get_connection()
            .unwrap();
        total += redis::cmd("DBSIZE").query::<u64>(&mut one).unwrap();
    }
    assert_eq!(total, 300 + 120);
}

#[test]
fn producers_and_cluster_consumers_move_every_event_exactly_once() {
    const PRODUCERS: u64 = 3;
    const EVENTS: u64 = 300; // per producer
    const DETECTORS: u16 = 4;
    let c = start(3, u32::from(DETECTORS));
    let seeds = c.seeds();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let seeds = seeds.clone();
            std::thread::spawn(move || {
                let mut cl = ClusterClient::connect(&seeds).unwrap();
                // Half the events in pipelines of 20 events, half one fragment at a time.
                let mut pipe = ClusterPipeline::new();
                for k in 0..EVENTS {
                    let event = k * PRODUCERS + p;
                    for d in 0..DETECTORS {
                        if k % 2 == 0 {
                            pipe.frag_put(1, event, d, 0, &payload(1, event, d), None);
                        } else {
                            cl.frag_put(1, event, d, 0, &payload(1, event, d), None)
                                .unwrap();
                        }
                    }
                    if pipe.len() >= 80 || k + 1 == EVENTS {
                        for r in cl.execute_windowed(&pipe, 32).unwrap() {
                            r.unwrap();
                        }
                        pipe.clear();
                    }
                }
            })
        })
        .collect();
    let total = PRODUCERS * EVENTS;
    let seen: Arc<Mutex<HashMap<u64, String>>> = Arc::default();
    let consumers: Vec<_> = (0..2)
        .map(|i| {
            let seeds = seeds.clone();
            let seen = seen.clone();
            std::thread::spawn(move || {
                let opts = ConsumerOptions {
                    count: 16,
                    consumer: Some(format!("consumer-{i}")),
                    ..ConsumerOptions::default()
                };
                let mut con = ClusterConsumer::connect(&seeds, opts).unwrap();
                let start = Instant::now();
                while (seen.lock().unwrap().len() as u64) < total {
                    assert!(start.elapsed() < HANG_GUARD, "hung");
                    let claims = con.next_batch(Some(Duration::from_millis(50))).unwrap();
                    for cl in &claims {
                        check_event(cl);
                        let prev = seen.lock().unwrap().insert(cl.event, cl.node().into());
                        assert!(prev.is_none(), "event {} claimed twice", cl.event);
                    }
                    for r in con.ack_many(&claims, Ack::Remove, None).unwrap() {
                        r.unwrap();
                    }
                }
                con.health()
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let healths: Vec<_> = consumers.into_iter().map(|c| c.join().unwrap()).collect();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, total);
    // Every event came from the node of its slot, and every node had some.
    let mut per_node = [0u64; 3];
    for (&event, node) in seen.iter() {
        let owner = c.owner(event_slot(1, event));
        assert_eq!(node, &c.map.nodes[owner].addr(), "event {event}");
        per_node[owner] += 1;
    }
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
    for h in healths.iter().flatten() {
        assert!(h.up && h.failures == 0, "{h:?}");
    }
    // Acknowledged with REMOVE: the nodes are empty.
    let mut cl = ClusterClient::connect(&seeds).unwrap();
    for (node, stats) in cl.store_stats_all() {
        let stats = stats.unwrap();
        assert_eq!(stats["entries"].as_i64(), Some(0), "{}", node.addr());
        assert_eq!(stats["events_removed"].as_i64().unwrap() as u64, {
            let i = c
                .map
                .nodes
                .iter()
                .position(|n| n.port == node.port)
                .unwrap();
            per_node[i]
        });
    }
}

/// Every fragment of a claimed event is there and intact.
fn check_event(c: &ClusterClaim) {
    assert!(!c.incomplete, "event {}", c.event);
    let dets: Vec<u16> = c.fragments.iter().map(|f| f.detector).collect();
    assert_eq!(dets, vec![0, 1, 2, 3], "event {}", c.event);
    for f in &c.fragments {
        assert_eq!(
            f.value,
            payload(c.run, c.event, f.detector),
            "event {} detector {}",
            c.event,
            f.detector
        );
    }
}

#[test]
fn consumer_groups_and_seals_span_every_node() {
    let c = start(3, 0); // events complete only when sealed
    let mut cl = ClusterClient::connect(&c.seeds()[1..]).unwrap();
    cl.group_create("farm", true).unwrap();
    cl.group_create("monitor", false).unwrap();
    let frags: Vec<Fragment> = (0..60u64)
        .map(|e| Fragment::new(3, e, 0, 0, payload(3, e, 0)))
        .collect();
    cl.frag_put_many(&frags, Some(Durability::Memory)).unwrap();
    assert_eq!(cl.event_get(3, 5).unwrap(), vec![frags[5].clone()]);
    assert_eq!(cl.frag_get(3, 5, 0, 0).unwrap(), Some(payload(3, 5, 0)));
    assert_eq!(cl.frag_get(3, 5, 1, 0).unwrap(), None);
    let group = |name: &str| ConsumerOptions {
        group: Some(name.into()),
        ..ConsumerOptions::default()
    };
    let mut farm = consumer(&c, group("farm"));
    assert!(farm.next(None).unwrap().is_none(), "nothing sealed yet");
    for e in 0..60 {
        cl.event_seal(3, e, None).unwrap();
    }
    let mut monitor = consumer(&c, group("monitor"));
    // The optional sampler first: it sees events only while the required group keeps them.
    for (con, name) in [(&mut monitor, "monitor"), (&mut farm, "farm")] {
        let mut got = HashSet::new();
        let mut released = false;
        let start = Instant::now();
        while got.len() < 60 {
            assert!(start.elapsed() < HANG_GUARD, "{name} hung");
            if let Some(claim) = con.next(Some(Duration::from_millis(50))).unwrap() {
                assert_eq!(claim.fragments, vec![frags[claim.event as usize].clone()]);
                assert!(got.insert(claim.event), "{name}: {} twice", claim.event);
                if claim.event == 7 && !released {
                    con.release(&claim).unwrap(); // back to READY, claimed again later
                    released = true;
                    got.remove(&7);
                } else {
                    con.ack(&claim, Ack::Remove, None).unwrap();
                }
            }
        }
    }
    // The required group removed the events: nothing is left on any node.
    for (_, stats) in cl.store_stats_all() {
        assert_eq!(stats.unwrap()["entries"].as_i64(), Some(0));
    }
    // A group that exists on no node: the error names it.
    let mut none = consumer(&c, group("nope"));
    match none.next_batch(None) {
        Err(e) => assert_eq!(e.code(), Some("NOGROUP"), "{e}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_dead_node_does_not_stop_the_others() {
    let mut c = start(3, 1);
    let mut cl = ClusterClient::connect(&c.seeds()).unwrap();
    let put = |cl: &mut ClusterClient, from: u64, to: u64| {
        let frags: Vec<Fragment> = (from..to)
            .map(|e| Fragment::new(2, e, 0, 0, payload(2, e, 0)))
            .collect();
        cl.frag_put_many(&frags, None).unwrap();
    };
    put(&mut cl, 0, 90);
    let opts = ConsumerOptions {
        count: 4,
        retry_interval: Duration::from_millis(100),
        ..ConsumerOptions::default()
    };
    let mut con = consumer(&c, opts);
    // Claims from every node; keep one of node 2's unacknowledged.
    let mut held = None;
    let mut acked = HashSet::new();
    let start = Instant::now();
    while held.is_none() {
        assert!(start.elapsed() < HANG_GUARD, "hung");
        for claim in con.next_batch(Some(Duration::from_millis(50))).unwrap() {
            if held.is_none() && c.owner(event_slot(2, claim.event)) == 2 {
                held = Some(claim);
            } else {
                con.ack(&claim, Ack::Remove, None).unwrap();
                acked.insert(claim.event);
            }
        }
    }
    let held = held.unwrap();
    c.kill(2);
    let dead = c.map.nodes[2].clone();
    // The producer's requests for node 2's events fail naming it; the others go on.
    let e2 = (90..).find(|&e| c.owner(event_slot(2, e)) == 2).unwrap();
    match cl.frag_put(2, e2, 0, 0, b"x", None) {
        Err(Error::NodeDown { node, slots, .. }) => {
            assert_eq!(node, dead.addr());
            assert_eq!(slots, "10922-16383");
        }
        o => panic!("{o:?}"),
    }
    let more: Vec<u64> = (90..400)
        .filter(|&e| c.owner(event_slot(2, e)) != 2)
        .collect();
    for &e in &more {
        cl.frag_put(2, e, 0, 0, &payload(2, e, 0), None).unwrap();
    }
    // The consumer takes every event of nodes 0 and 1, and says node 2 is down.
    let want: HashSet<u64> = (0..90)
        .chain(more.iter().copied())
        .filter(|&e| c.owner(event_slot(2, e)) != 2)
        .collect();
    let start = Instant::now();
    while !want.is_subset(&acked) {
        assert!(start.elapsed() < HANG_GUARD, "hung");
        for claim in con.next_batch(Some(Duration::from_millis(50))).unwrap() {
            assert_ne!(c.owner(event_slot(2, claim.event)), 2);
            assert_eq!(claim.fragments[0].value, payload(2, claim.event, 0));
            con.ack(&claim, Ack::Remove, None).unwrap();
            assert!(acked.insert(claim.event), "{} twice", claim.event);
        }
    }
    let health = con.health();
    assert!(health[0].up && health[1].up, "{health:?}");
    assert!(!health[2].up && health[2].failures >= 1, "{health:?}");
    let why = health[2].last_error.as_deref().unwrap();
    assert!(
        why.contains(&dead.addr()) && why.contains("10922-16383"),
        "{why}"
    );
    // Its claim cannot be acknowledged: the error names the node.
    match con.ack(&held, Ack::Remove, None) {
        Err(e @ Error::NodeDown { .. }) => assert!(e.to_string().contains(&dead.addr())),
        o => panic!("{o:?}"),
    }
    let results = con.ack_many(&[held], Ack::Remove, None).unwrap();
    assert!(results[0].as_ref().is_err_and(Error::is_node_down));
    drop(c.dir);
}

#[test]
fn moved_is_followed_after_the_map_changes() {
    let mut c = start(2, 1);
    let mut cl = ClusterClient::connect(&c.seeds()[..1]).unwrap();
    let e0 = (0..).find(|&e| c.owner(event_slot(5, e)) == 0).unwrap();
    cl.frag_put(5, e0, 0, 0, b"before", None).unwrap();
    // Restart both nodes with their slots swapped (a new epoch of the map).
    c.kill(0);
    c.kill(1);
    let mut nodes = c.map.nodes.clone();
    let (a, b) = (nodes[0].slots.clone(), nodes[1].slots.clone());
    nodes[0].slots = b;
    nodes[1].slots = a;
    let swapped = ClusterMap::new(2, nodes).unwrap();
    std::fs::write(&c.map_path, swapped.to_toml()).unwrap();
    for (i, node) in swapped.nodes.iter().enumerate() {
        let cfg = node_config(c.dir.path(), &c.map_path, node, 1);
        c.nodes[i] = Some(spawn(cfg).unwrap());
    }
    // The client's map is stale: node 0 answers MOVED to node 1; the client follows.
    let frags: Vec<Fragment> = (0..40u64)
        .map(|e| Fragment::new(6, e, 0, 0, payload(6, e, 0)))
        .collect();
    cl.frag_put_many(&frags, None).unwrap();
    let e_new = (0..).find(|&e| swapped.owner(event_slot(5, e)).port == swapped.nodes[1].port);
    cl.frag_put(5, e_new.unwrap(), 0, 0, b"after", None)
        .unwrap();
    let mine = cl.nodes().iter().find(|n| n.port == swapped.nodes[0].port);
    assert_eq!(mine.unwrap().slots, swapped.nodes[0].slots);
    for e in 0..40u64 {
        assert_eq!(cl.frag_get(6, e, 0, 0).unwrap(), Some(payload(6, e, 0)));
    }
}

#[test]
fn bad_seeds_and_moved_loops_are_errors() {
    // A server outside cluster mode.
    let dir = temp_dir();
    let mut cfg = ServerConfig::for_dir(dir.path().join("plain"));
    cfg.port = 0;
    let plain = spawn(cfg).unwrap();
    let seed = plain.tcp_addr().to_string();
    match ClusterClient::connect(&[seed.as_str()]) {
        Err(Error::NotCluster { node, message }) => {
            assert_eq!(node, seed);
            assert!(message.contains("cluster support disabled"), "{message}");
        }
        o => panic!("{o:?}"),
    }
    // Nobody listening.
    let nobody = format!("127.0.0.1:{}", free_ports(1)[0]);
    match ClusterClient::connect(&[nobody.as_str()]) {
        Err(e @ Error::NotCluster { .. }) => {
            assert!(e.to_string().contains("no seed answered"), "{e}")
        }
        o => panic!("{o:?}"),
    }
    assert!(matches!(
        ClusterClient::connect::<&str>(&[]),
        Err(Error::InvalidArgument(_))
    ));
    // Two nodes started with maps that disagree: each says the other serves slots 8192-.
    let ports = free_ports(2);
    let addrs: Vec<(String, u16)> = ports.iter().map(|&p| ("127.0.0.1".into(), p)).collect();
    let m1 = ClusterMap::even(1, &addrs).unwrap();
    let mut nodes = m1.nodes.clone();
    let (a, b) = (nodes[0].slots.clone(), nodes[1].slots.clone());
    nodes[0].slots = b;
    nodes[1].slots = a;
    let m2 = ClusterMap::new(1, nodes).unwrap();
    let (p1, p2) = (dir.path().join("m1.toml"), dir.path().join("m2.toml"));
    std::fs::write(&p1, m1.to_toml()).unwrap();
    std::fs::write(&p2, m2.to_toml()).unwrap();
    let _n0 = spawn(node_config(dir.path(), &p1, &m1.nodes[0], 1)).unwrap();
    let _n1 = spawn(node_config(dir.path(), &p2, &m2.nodes[1], 1)).unwrap();
    let seed = m1.nodes[0].addr();
    let mut cl = ClusterClient::connect(&[seed.as_str()])
        .unwrap()
        .max_redirects(2);
    let e = (0..).find(|&e| event_slot(1, e) >= 8192).unwrap();
    match cl.frag_put(1, e, 0, 0, b"x", None) {
        Err(Error::Redirects { slot, tries, .. }) => {
            assert_eq!(slot, event_slot(1, e));
            assert_eq!(tries, 3);
        }
        o => panic!("{o:?}"),
    }
    match cl.event_get(1, e) {
        Err(e @ Error::Redirects { .. }) => {
            assert!(e.to_string().contains("disagree"), "{e}")
        }
        o => panic!("{o:?}"),
    }
    // Slots both agree on work.
    let ok = (0..).find(|&e| event_slot(1, e) < 8192).unwrap();
    cl.frag_put(1, ok, 0, 0, b"fine", None).unwrap();
}
