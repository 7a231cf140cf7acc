//! Findings of a review of cluster mode (eighteenth session), each failing before its fix:
//! fragment-sized keys routed by their bytes, and a node bound to every address taking another
//! node's identity.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, Client};
use hotstore_server::cluster::map::ClusterMap;
use hotstore_server::cluster::slot::key_slot;
use hotstore_server::{spawn, ServerHandle};
use std::net::TcpListener;

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

struct Cluster {
    map: ClusterMap,
    nodes: Vec<ServerHandle>,
    _dir: tempfile::TempDir,
}

fn start(n: usize) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<(String, u16)> = free_ports(n)
        .into_iter()
        .map(|p| ("127.0.0.1".to_string(), p))
        .collect();
    let map = ClusterMap::even(3, &addrs).unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, map.to_toml()).unwrap();
    let nodes = map
        .nodes
        .iter()
        .map(|node| {
            let mut c = config(&dir.path().join(&node.id));
            c.port = node.port;
            c.cluster = Some(path.clone());
            c.durability = hotstore::Durability::Memory;
            spawn(c).unwrap()
        })
        .collect();
    Cluster {
        map,
        nodes,
        _dir: dir,
    }
}

impl Cluster {
    fn client(&self, i: usize) -> Client {
        Client::connect(self.nodes[i].tcp_addr())
    }
    fn owner_of(&self, key: &[u8]) -> usize {
        let port = self.map.owner(key_slot(key)).port;
        self.map.nodes.iter().position(|n| n.port == port).unwrap()
    }
}

/// The default layout's 16-byte fragment key of (run, event, detector, component).
fn frag_key(run: u32, event: u64, det: u16, comp: u16) -> Vec<u8> {
    let mut k = Vec::new();
    k.extend_from_slice(&run.to_be_bytes());
    k.extend_from_slice(&event.to_be_bytes());
    k.extend_from_slice(&det.to_be_bytes());
    k.extend_from_slice(&comp.to_be_bytes());
    k
}

/// A fragment stored on the node of its event's tag is a key of that node (SCAN lists it,
/// DBSIZE counts it), yet the key commands route it by CRC16 of its 16 bytes: the node that
/// holds it answers MOVED to a node where it does not exist.
#[test]
fn a_fragment_key_is_served_by_the_node_that_holds_it() {
    let c = start(2);
    // An event of node 0 whose fragment key hashes to node 1.
    let event = (0u64..)
        .find(|&e| {
            c.owner_of(format!("7:{e}").as_bytes()) == 0 && c.owner_of(&frag_key(7, e, 0, 0)) == 1
        })
        .unwrap();
    let mut n0 = c.client(0);
    assert_eq!(
        n0.call(&["FRAG.PUT", &format!("7:{event}"), "0", "0", "v"]),
        "+OK"
    );
    assert_eq!(n0.call(&["DBSIZE"]), ":1");
    let key = frag_key(7, event, 0, 0);
    // The node holding the key must serve it, not redirect it elsewhere.
    n0.send(&[b"GET", &key]);
    let reply = n0.line();
    assert_eq!(reply, "$1", "GET of a key this node holds answered {reply}");
}

/// A plain SET of a 16-byte key is a fragment write (the store's layout makes every key of
/// its width a fragment): routed by CRC16 of the key, it lands on another node than the
/// event's own, so one event has fragments on two nodes.
#[test]
fn a_set_of_a_fragment_sized_key_does_not_split_an_event_over_two_nodes() {
    let c = start(2);
    let event = (0u64..)
        .find(|&e| {
            c.owner_of(format!("7:{e}").as_bytes()) == 0 && c.owner_of(&frag_key(7, e, 1, 0)) == 1
        })
        .unwrap();
    let tag = format!("7:{event}");
    let mut n0 = c.client(0);
    let mut n1 = c.client(1);
    assert_eq!(n0.call(&["FRAG.PUT", &tag, "0", "0", "a"]), "+OK");
    // Fragment (1, 0) of the same event, written as a key: node 1 must not store it.
    n1.send(&[b"SET", &frag_key(7, event, 1, 0), b"b"]);
    let reply = n1.line();
    assert!(
        reply.starts_with("-MOVED"),
        "node 1 stored a fragment of event {tag} (node 0's): {reply}"
    );
}

/// Nodes on separate machines share a port (`10.0.0.1:7001`, `10.0.0.2:7001`); a node bound
/// to every address (`--bind 0.0.0.0`) without `--cluster-id` matches every one of them and
/// silently takes the first: the second machine serves node 0's slots (storing their keys)
/// and redirects its own slots to itself.
#[test]
fn a_wildcard_bind_that_matches_several_nodes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_ports(1)[0];
    let addrs = vec![
        ("127.0.0.1".to_string(), port),
        ("127.0.0.2".to_string(), port),
    ];
    let map = ClusterMap::even(1, &addrs).unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, map.to_toml()).unwrap();
    // The machine whose map address is 127.0.0.2 starts its node bound to every address.
    let mut cfg = config(&dir.path().join("b"));
    cfg.bind = "0.0.0.0".into();
    cfg.port = port;
    cfg.requirepass = Some("pw".into());
    cfg.cluster = Some(path);
    let node = match spawn(cfg) {
        Err(e) => {
            // Refusing the ambiguity is a fix.
            assert!(e.to_string().contains("cluster-id"), "{e}");
            return;
        }
        Ok(node) => node,
    };
    let mut c = Client::connect(node.tcp_addr());
    assert_eq!(c.call(&["AUTH", "pw"]), "+OK");
    c.send(&[b"CLUSTER", b"MYID"]);
    let myid = String::from_utf8(c.bulk().unwrap()).unwrap();
    // A key of node 0's slots (127.0.0.1) sent to this machine.
    let key = (0..)
        .map(|k| format!("key{k}"))
        .find(|k| map.owner(key_slot(k.as_bytes())).host == "127.0.0.1")
        .unwrap();
    let set = c.call(&["SET", &key, "v"]);
    assert_eq!(
        (myid.as_str(), set.as_str()),
        (
            map.nodes[1].id.as_str(),
            format!("-MOVED {} 127.0.0.1:{port}", key_slot(key.as_bytes())).as_str()
        ),
        "the node at 127.0.0.2 took the identity of node 0 and stored its key"
    );
}
