//! Findings of a review of the cluster client (eighteenth session), each failing before its
//! fix: a MOVED to an IPv6 node, a write after a cluster restart, a consumer waiting forever.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore_client::{event_slot, ClusterClient};
use hotstore_server::cluster::map::{ClusterMap, Node};
use hotstore_server::{spawn, ServerConfig, ServerHandle};
use std::net::TcpListener;
use std::path::Path;

fn free_ports(host: &str, n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((host, 0)).unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn node_config(dir: &Path, map: &Path, node: &Node) -> ServerConfig {
    let mut c = ServerConfig::for_dir(dir.join(&node.id));
    c.bind = node.host.clone();
    c.port = node.port;
    c.threads = 2;
    c.cluster = Some(map.to_path_buf());
    c.durability = hotstore::Durability::Memory;
    c
}

/// Starts two nodes on `host`, connects a client, then restarts both nodes with their slots
/// swapped (a new epoch): the client's next write gets MOVED and must follow it.
fn follow_moved_after_map_change(host: &str, both: bool) -> hotstore_client::Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<(String, u16)> = free_ports(host, 2)
        .into_iter()
        .map(|p| (host.to_string(), p))
        .collect();
    let map = ClusterMap::even(1, &addrs).unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, map.to_toml()).unwrap();
    let mut nodes: Vec<Option<ServerHandle>> = map
        .nodes
        .iter()
        .map(|n| Some(spawn(node_config(dir.path(), &path, n)).unwrap()))
        .collect();
    let seed = if host.contains(':') {
        format!("redis://[{host}]:{}", map.nodes[0].port)
    } else {
        format!("redis://{host}:{}", map.nodes[0].port)
    };
    let mut cl = ClusterClient::connect(&[seed.as_str()]).unwrap();
    // Before the restart, the client has a connection to node 0 only, or to both nodes.
    for node in if both { 0..2 } else { 0..1 } {
        let e = (0..)
            .find(|&e| map.owner(event_slot(5, e)).port == map.nodes[node].port)
            .unwrap();
        cl.frag_put(5, e, 0, 0, b"before", None).unwrap();
    }
    for n in &mut nodes {
        n.take().unwrap().shutdown().unwrap();
    }
    let mut swapped = map.nodes.clone();
    let (a, b) = (swapped[0].slots.clone(), swapped[1].slots.clone());
    swapped[0].slots = b;
    swapped[1].slots = a;
    let swapped = ClusterMap::new(2, swapped).unwrap();
    std::fs::write(&path, swapped.to_toml()).unwrap();
    let _nodes: Vec<ServerHandle> = swapped
        .nodes
        .iter()
        .map(|n| spawn(node_config(dir.path(), &path, n)).unwrap())
        .collect();
    // An event the stale map sends to node 0, now node 1's: node 0 answers MOVED.
    let e = (0..)
        .find(|&e| map.owner(event_slot(5, e)).port == map.nodes[0].port)
        .unwrap();
    assert_eq!(swapped.owner(event_slot(5, e)).port, map.nodes[1].port);
    cl.frag_put(5, e, 0, 0, b"after", None)?;
    assert_eq!(cl.frag_get(5, e, 0, 0)?, Some(b"after".to_vec()));
    Ok(())
}

#[test]
fn moved_is_followed_on_ipv4() {
    // Control: passes.
    follow_moved_after_map_change("127.0.0.1", false).unwrap();
}

/// An IPv6 node's MOVED names it as `::1:port` (as Redis does, no brackets); the client
/// reads that as a URL `redis://::1:port`, which does not parse, and fails the request.
#[test]
fn moved_is_followed_on_ipv6() {
    follow_moved_after_map_change("::1", false).unwrap();
}

/// Every node restarted (as a map change requires): the client's kept connections are all
/// stale, but only the first stale one is retried; after the MOVED the write goes to the
/// other node's stale connection and fails NodeDown although every node is up.
#[test]
fn a_write_after_the_cluster_restarts_with_a_new_map_succeeds() {
    follow_moved_after_map_change("127.0.0.1", true).unwrap();
}

fn blocked_clients(addr: &str) -> u64 {
    let mut con = redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `Some(Duration::MAX)` waits forever for an event (as `Client::event_next` documents):
/// the consumer's blocking round sends `BLOCK 0` to every node and reads the replies in
/// turn, so an event that comes to one node is never returned while another node stays
/// empty (its claim is held, its lease running, unread).
#[test]
fn a_consumer_waiting_forever_returns_an_event_of_any_node() {
    use hotstore_client::{ClusterConsumer, ConsumerOptions};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<(String, u16)> = free_ports("127.0.0.1", 2)
        .into_iter()
        .map(|p| ("127.0.0.1".to_string(), p))
        .collect();
    let map = ClusterMap::even(1, &addrs).unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, map.to_toml()).unwrap();
    let _nodes: Vec<ServerHandle> = map
        .nodes
        .iter()
        .map(|n| {
            let mut c = node_config(dir.path(), &path, n);
            c.expected_fragments = Some(1);
            spawn(c).unwrap()
        })
        .collect();
    let seed = format!("redis://{}", map.nodes[0].addr());
    let mut cl = ClusterClient::connect(&[seed.as_str()]).unwrap();
    let mut con = ClusterConsumer::new(&cl, ConsumerOptions::default()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let got = con.next(Some(Duration::MAX)).map(|c| c.map(|c| c.event));
        let _ = tx.send(got);
    });
    // Both nodes hold the consumer's blocking EVENT.NEXT.
    for n in &map.nodes {
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while blocked_clients(&n.addr()) != 1 {
            assert!(std::time::Instant::now() < give_up, "consumer not blocked");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // One complete event, on one node: the other stays empty.
    cl.frag_put(9, 1, 0, 0, b"x", None).unwrap();
    // Hang guard only: a consumer that works returns in milliseconds.
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(r) => assert_eq!(r.unwrap(), Some(1)),
        Err(_) => panic!(
            "the consumer still waits 60 s after event 9:1 was claimed for it on {}",
            map.owner(event_slot(9, 1)).addr()
        ),
    }
}
