//! Cluster mode: MOVED and CROSSSLOT by slot, events placed by their id, tokens that lead
//! back to their node, the CLUSTER views, and the start-up checks of the map.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

mod common;

use common::{config, Client};
use hotstore_server::cluster::map::ClusterMap;
use hotstore_server::cluster::slot::key_slot;
use hotstore_server::{spawn, ServerHandle};
use std::net::TcpListener;
use std::path::Path;

/// `n` ports free right now (bound then released).
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

/// A key of the node `i` and one of another node.
fn key_on(c: &Cluster, i: usize) -> String {
    (0..)
        .map(|k| format!("key{k}"))
        .find(|k| c.owner_of(k.as_bytes()) == i)
        .unwrap()
}

#[test]
fn keys_of_other_nodes_answer_moved_and_multi_key_commands_need_one_slot() {
    let c = start(3);
    let key = key_on(&c, 1);
    let slot = key_slot(key.as_bytes());
    let mut other = c.client(0);
    assert_eq!(
        other.call(&["SET", &key, "v"]),
        format!("-MOVED {slot} 127.0.0.1:{}", c.map.nodes[1].port)
    );
    assert_eq!(
        other.call(&["GET", &key]),
        format!("-MOVED {slot} 127.0.0.1:{}", c.map.nodes[1].port)
    );
    let mut owner = c.client(1);
    assert_eq!(owner.call(&["SET", &key, "v"]), "+OK");
    assert_eq!(owner.call(&["GET", &key]), "$1");
    assert_eq!(owner.line(), "v");
    // Several keys: one slot (hash tags) is fine, several are CROSSSLOT.
    let tagged = |k: &str| format!("{{{key}}}{k}");
    assert_eq!(
        owner.call(&["MSET", &tagged("a"), "1", &tagged("b"), "2"]),
        "+OK"
    );
    let other_key = key_on(&c, 2);
    assert!(owner
        .call(&["MSET", &key, "1", &other_key, "2"])
        .starts_with("-CROSSSLOT"));
    // Keyless commands are the node's own.
    assert_eq!(owner.call(&["DBSIZE"]), ":3");
    assert_eq!(other.call(&["DBSIZE"]), ":0");
}

#[test]
fn an_event_lives_on_the_node_of_its_tag_and_its_tokens_lead_back() {
    let c = start(3);
    // Find an event whose tag is served by node 2.
    let event = (0..)
        .find(|e| c.owner_of(format!("7:{e}").as_bytes()) == 2)
        .unwrap();
    let tag = format!("7:{event}");
    let slot = key_slot(tag.as_bytes());
    let moved = format!("-MOVED {slot} 127.0.0.1:{}", c.map.nodes[2].port);
    let mut wrong = c.client(0);
    assert_eq!(wrong.call(&["FRAG.PUT", &tag, "0", "0", "x"]), moved);
    // The separate-fields form is placed by the same event id.
    assert_eq!(
        wrong.call(&["FRAG.PUT", "7", &event.to_string(), "0", "0", "x"]),
        moved
    );
    assert_eq!(wrong.call(&["EVENT.SEAL", &tag]), moved);
    let mut owner = c.client(2);
    assert_eq!(owner.call(&["FRAG.PUT", &tag, "0", "0", "abc"]), "+OK");
    assert_eq!(
        owner.call(&["FRAG.PUT", "7", &event.to_string(), "1", "0", "de"]),
        "+OK"
    );
    assert_eq!(owner.call(&["FRAG.GET", &tag, "1", "0"]), "$2");
    assert_eq!(owner.line(), "de");
    // A tag must be canonical: clients hash it as written.
    assert!(owner
        .call(&["FRAG.GET", &format!("07:{event}"), "1", "0"])
        .starts_with("-ERR event '07:"));
    assert!(owner
        .call(&["FRAG.GET", "7:1:2", "1", "0"])
        .contains("has 3 fields"));
    // The claim token starts with the event's hash tag: hashing it reaches this node.
    owner.send(&[b"EVENT.NEXT"]);
    assert_eq!(owner.line(), "*4");
    let token = String::from_utf8(owner.bulk().unwrap()).unwrap();
    assert!(token.starts_with(&format!("{{{tag}}}")), "{token}");
    assert_eq!(key_slot(token.as_bytes()), slot);
    // [7, event], incomplete, then two fragments of [detector, component, value].
    for _ in 0..5 + 2 * 5 {
        owner.line();
    }
    assert_eq!(wrong.call(&["EVENT.ACK", &token, "REMOVE"]), moved);
    assert_eq!(owner.call(&["EVENT.ACK", &token, "REMOVE"]), "+OK");
    assert_eq!(owner.call(&["EVENT.GET", &tag]), "*0");
}

#[test]
fn cluster_views_describe_the_map() {
    let c = start(3);
    let mut n = c.client(1);
    let me = &c.map.nodes[1];
    n.send(&[b"CLUSTER", b"MYID"]);
    assert_eq!(n.bulk().unwrap(), me.id.as_bytes());
    assert_eq!(n.call(&["CLUSTER", "KEYSLOT", "foo"]), ":12182");
    n.send(&[b"CLUSTER", b"NODES"]);
    let nodes = String::from_utf8(n.bulk().unwrap()).unwrap();
    assert_eq!(nodes.lines().count(), 3);
    let mine = nodes.lines().find(|l| l.contains("myself")).unwrap();
    assert_eq!(
        mine,
        format!(
            "{} 127.0.0.1:{}@0 myself,master - 0 0 3 connected 5461-10921",
            me.id, me.port
        )
    );
    n.send(&[b"CLUSTER", b"INFO"]);
    let info = String::from_utf8(n.bulk().unwrap()).unwrap();
    assert!(info.contains("cluster_state:ok\r\n"));
    assert!(info.contains("cluster_current_epoch:3\r\n"));
    assert_eq!(common::info_field(&mut n, "cluster", "cluster_enabled"), 1);
    assert_eq!(n.call(&["CLUSTER", "SLOTS"]), "*3");
    let mut lines = Vec::new();
    for _ in 0..3 * 9 {
        lines.push(n.line());
    }
    let want = ["*3", ":0", ":5460", "*3", "$9", "127.0.0.1"];
    assert_eq!(lines[..6], want.map(String::from));
    assert_eq!(lines[6], format!(":{}", c.map.nodes[0].port));
    // CLUSTER SHARDS: per node, `slots` [start, end] and `nodes` with one master.
    assert_eq!(n.call(&["CLUSTER", "SHARDS"]), "*3");
    let shard: Vec<String> = (0..9).map(|_| n.line()).collect();
    let want = [
        "*4", "$5", "slots", "*2", ":0", ":5460", "$5", "nodes", "*1",
    ];
    assert_eq!(shard, want.map(String::from));
    assert_eq!(n.line(), "*14");
    let fields: Vec<String> = (0..26).map(|_| n.line()).collect();
    assert_eq!(fields[..3], ["$2", "id", "$40"].map(String::from));
    assert_eq!(fields[3], c.map.nodes[0].id);
    assert!(fields.contains(&"online".to_string()), "{fields:?}");
    for _ in 0..2 * 36 {
        n.line(); // the other two shards
    }
    assert_eq!(n.call(&["READONLY"]), "+OK");
    assert!(n
        .call(&["CLUSTER", "NOPE"])
        .starts_with("-ERR unknown subcommand 'NOPE'"));
}

#[test]
fn a_server_outside_cluster_mode_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let s = spawn(config(dir.path())).unwrap();
    let mut c = Client::connect(s.tcp_addr());
    assert_eq!(
        c.call(&["CLUSTER", "INFO"]),
        "-ERR This instance has cluster support disabled"
    );
    assert_eq!(common::info_field(&mut c, "cluster", "cluster_enabled"), 0);
    // The tag form names events here too.
    assert_eq!(c.call(&["FRAG.PUT", "3:4", "0", "0", "v"]), "+OK");
    assert_eq!(c.call(&["FRAG.GET", "3", "4", "0", "0"]), "$1");
}

fn start_err(path: &Path, dir: &Path, port: u16, id: Option<&str>) -> String {
    let mut c = config(dir);
    c.port = port;
    c.cluster = Some(path.to_path_buf());
    c.cluster_id = id.map(String::from);
    match spawn(c) {
        Ok(_) => panic!("started"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_maps_and_wrong_nodes_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let addrs: Vec<(String, u16)> = ports.iter().map(|&p| ("127.0.0.1".into(), p)).collect();
    let map = ClusterMap::even(2, &addrs).unwrap();
    let path = dir.path().join("cluster.toml");
    let store = dir.path().join("a");
    // Missing slots.
    std::fs::write(
        &path,
        map.to_toml().replace("\"8192-16383\"", "\"8192-16000\""),
    )
    .unwrap();
    let e = start_err(&path, &store, ports[0], None);
    assert!(e.contains("383 slots have no node"), "{e}");
    std::fs::write(&path, map.to_toml()).unwrap();
    // An id whose address is another.
    let e = start_err(&path, &store, ports[0], Some(&map.nodes[1].id));
    assert!(e.contains("but this server listens on"), "{e}");
    // No node at this address.
    let e = start_err(&path, &store, free_ports(1)[0], None);
    assert!(e.contains("no node of the cluster map"), "{e}");
    // A store remembers its node: node 1 may not serve node 0's store.
    let mut c = config(&store);
    c.port = ports[0];
    c.cluster = Some(path.clone());
    spawn(c).unwrap().shutdown().unwrap();
    let e = start_err(&path, &store, ports[1], None);
    assert!(
        e.contains(&format!("belongs to cluster node {}", map.nodes[0].id)),
        "{e}"
    );
    // An older map than the store served.
    let old = ClusterMap::parse(&map.to_toml().replace("epoch = 2", "epoch = 1")).unwrap();
    std::fs::write(&path, old.to_toml()).unwrap();
    let e = start_err(&path, &store, ports[0], None);
    assert!(e.contains("last served epoch 2"), "{e}");
    // A garbled epoch is damage, not epoch 0 (which let any older map be served and
    // rewrote the file; found in review, nineteenth session).
    let node_file = store.join(hotstore_server::cluster::NODE_FILE);
    let text = std::fs::read_to_string(&node_file).unwrap();
    std::fs::write(&node_file, text.replace("epoch 2", "epoch 2x")).unwrap();
    let e = start_err(&path, &store, ports[0], None);
    assert!(e.contains("is damaged"), "{e}");
    assert!(std::fs::read_to_string(&node_file)
        .unwrap()
        .contains("epoch 2x"));
    // Port 0 cannot be a node's address.
    let e = start_err(&path, &store, 0, None);
    assert!(e.contains("fixed --port"), "{e}");
}

// Findings of a review of cluster mode (eighteenth session), each failing before its fix:
// fragment-sized keys routed by their bytes, and a node bound to every address taking another
// node's identity.

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
