//! Findings of reviews of the cluster client, each failing before its fix: a MOVED to an IPv6
//! node, a write after a cluster restart, a consumer waiting forever (eighteenth session); a
//! node's typed error reply in a consumer's round, a timed-out request sent again (nineteenth).
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

/// Two nodes on loopback sharing the slots, their map in `dir`; each node's event policy
/// expects `expected` fragments if given.
fn two_nodes(dir: &Path, expected: Option<u32>) -> (ClusterMap, Vec<ServerHandle>) {
    let addrs: Vec<(String, u16)> = free_ports("127.0.0.1", 2)
        .into_iter()
        .map(|p| ("127.0.0.1".to_string(), p))
        .collect();
    let map = ClusterMap::even(1, &addrs).unwrap();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, map.to_toml()).unwrap();
    let nodes = map
        .nodes
        .iter()
        .map(|n| {
            let mut c = node_config(dir, &path, n);
            c.expected_fragments = expected;
            spawn(c).unwrap()
        })
        .collect();
    (map, nodes)
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
    let (map, _nodes) = two_nodes(dir.path(), Some(1));
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

/// A consumer whose group does not exist: each node answers `-NOGROUP`, which the consumer
/// reported as `Error::Server` (code and text), not `Error::NoGroup`, so a caller matching
/// the typed error (to create the group and retry) never saw it.
#[test]
fn a_consumer_keeps_the_type_of_a_nodes_error_reply() {
    use hotstore_client::{ClusterConsumer, ConsumerOptions, Error};
    let dir = tempfile::tempdir().unwrap();
    let (map, _nodes) = two_nodes(dir.path(), None);
    let seed = format!("redis://{}", map.nodes[0].addr());
    let cl = ClusterClient::connect(&[seed.as_str()]).unwrap();
    let opts = ConsumerOptions {
        group: Some("no-such-group".into()),
        ..ConsumerOptions::default()
    };
    let mut con = ClusterConsumer::new(&cl, opts).unwrap();
    match con.next(None) {
        Err(Error::NoGroup(m)) => assert!(m.contains("node 127.0.0.1:"), "{m}"),
        other => panic!("expected NoGroup naming the node, got {other:?}"),
    }
}

/// Reads one RESP command (an array of bulk strings) as its words.
fn read_command(r: &mut impl std::io::BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    r.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut words = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0u8; len + 2];
        r.read_exact(&mut buf).ok()?;
        words.push(String::from_utf8_lossy(&buf[..len]).into_owned());
    }
    Some(words)
}

/// A node that stops answering (a stopped process) without closing its connection: its
/// request times out and fails NodeDown, and is not sent again on a new connection (which
/// doubled the caller's wait). The fake node serves the map and then never answers FRAG.PUT.
#[test]
fn a_request_that_timed_out_is_not_sent_again() {
    use hotstore_client::{ConnectOptions, Error};
    use std::io::{BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let puts = Arc::new(AtomicUsize::new(0));
    let seen = puts.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut w = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                while let Some(cmd) = read_command(&mut r) {
                    let reply = match cmd[0].to_ascii_uppercase().as_str() {
                        "CLUSTER" => format!(
                            "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$4\r\nnode\r\n"
                        ),
                        "FRAG.PUT" => {
                            seen.fetch_add(1, Ordering::SeqCst);
                            continue; // never answered
                        }
                        _ => "+OK\r\n".to_string(),
                    };
                    if w.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let seed =
        ConnectOptions::tcp("127.0.0.1", port).response_timeout(Some(Duration::from_millis(300)));
    let mut cl = ClusterClient::connect_with(vec![seed]).unwrap();
    match cl.frag_put(1, 2, 0, 0, b"x", None) {
        Err(Error::NodeDown { .. }) => {}
        other => panic!("expected NodeDown, got {other:?}"),
    }
    assert_eq!(
        puts.load(Ordering::SeqCst),
        1,
        "the timed-out FRAG.PUT was sent again"
    );
}
