//! Cluster mode: this server is one node of a fixed map of hash slots (Redis Cluster's
//! routing, so unmodified cluster clients find the node of every key).
//!
//! `map` reads and checks the map file, `slot` hashes keys. This module decides, for each
//! request, whether this node serves it: keys of other nodes answer `MOVED slot host:port`,
//! keys of several slots in one request answer `CROSSSLOT`. Events are placed by their id:
//! every fragment, seal and claim of event (run, event) lives on the node of slot
//! `key_slot("run:event")`, and claim tokens carry that tag (`{7:42}...`) so that clients
//! hashing a token reach the node that issued it.

pub mod map;
pub mod slot;

use map::{ClusterMap, Node};
use std::path::Path;

/// Name of the file in a store directory that records which node of which map the store
/// belongs to: a store started as another node would serve its events under wrong slots.
pub const NODE_FILE: &str = "cluster-node";

/// This server's place in the cluster.
#[derive(Debug)]
pub struct Cluster {
    /// The map.
    pub map: ClusterMap,
    /// Index of this node in `map.nodes`.
    pub me: usize,
}

impl Cluster {
    /// Loads the map and finds this node: by `id`, or else by the address it listens on.
    /// Checks that the address this node is given in the map is the one it listens on.
    pub fn load(path: &Path, id: Option<&str>, bind: &str, port: u16) -> Result<Cluster, String> {
        let map = ClusterMap::load(path)?;
        let me = match id {
            Some(id) => {
                let (me, node) = map.node(id).ok_or_else(|| {
                    format!(
                        "node id {id} is not in the cluster map {} (its nodes: {})",
                        path.display(),
                        map.nodes
                            .iter()
                            .map(|n| format!("{} at {}", n.id, n.addr()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
                if node.port != port || !same_host(&node.host, bind) {
                    return Err(format!(
                        "node {id} is at {} in the cluster map, but this server listens on \
                         {bind}:{port}: start it with --bind {} --port {} (or give the id of \
                         the node at {bind}:{port})",
                        node.addr(),
                        node.host,
                        node.port
                    ));
                }
                me
            }
            None => {
                // Fix (found in review): a node bound to every address matched the first node
                // with its port, so with one port on every machine each took node 0's
                // identity (and its slots). An exact host match wins; several matches are
                // refused.
                let at = |exact: bool| -> Vec<usize> {
                    (0..map.nodes.len())
                        .filter(|&i| {
                            let n = &map.nodes[i];
                            n.port == port
                                && if exact {
                                    n.host == bind
                                } else {
                                    same_host(&n.host, bind)
                                }
                        })
                        .collect()
                };
                let exact = at(true);
                let found = if exact.len() == 1 { exact } else { at(false) };
                match found[..] {
                    [me] => me,
                    [] => {
                        return Err(format!(
                            "no node of the cluster map {} is at {bind}:{port}: start the \
                             server with the --bind and --port of its node, or name it with \
                             --cluster-id",
                            path.display()
                        ))
                    }
                    _ => {
                        return Err(format!(
                            "this server listens on {bind}:{port}, which could be any of the \
                             nodes {} of the cluster map {}: name it with --cluster-id",
                            found
                                .iter()
                                .map(|&i| format!("{} at {}", map.nodes[i].id, map.nodes[i].addr()))
                                .collect::<Vec<_>>()
                                .join(", "),
                            path.display()
                        ))
                    }
                }
            }
        };
        Ok(Cluster { map, me })
    }

    /// This node.
    pub fn myself(&self) -> &Node {
        &self.map.nodes[self.me]
    }

    /// True if this node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.map.owner_index(slot) == self.me
    }

    /// The `MOVED` error for a slot of another node.
    pub fn moved(&self, slot: u16) -> String {
        format!("MOVED {slot} {}", self.map.owner(slot).addr())
    }

    /// Checks that a store directory belongs to this node, recording it on first use: a
    /// store is refused if it was another node's, or served a newer map than this one.
    pub fn claim_store(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(NODE_FILE);
        let me = self.myself();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut id = None;
                let mut epoch = None;
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("id ") {
                        id = Some(v.trim());
                    } else if let Some(v) = line.strip_prefix("epoch ") {
                        epoch = v.trim().parse::<u64>().ok();
                    }
                }
                // Fix (found in review): an unreadable epoch was taken as 0 and the file
                // rewritten, silently dropping the guard against serving an older map.
                let (Some(id), Some(epoch)) = (id.filter(|i| !i.is_empty()), epoch) else {
                    return Err(format!(
                        "{} is damaged (it must hold `id <node id>` and `epoch <number>`): \
                         the store's cluster identity is unknown. If this store is node {}'s, \
                         remove the file and start again",
                        path.display(),
                        me.id
                    ));
                };
                if id != me.id {
                    return Err(format!(
                        "the store in {} belongs to cluster node {id}, but this server was \
                         started as node {} ({}): it would serve that node's events as this \
                         node's slots. Start each node on its own store (or remove {} if the \
                         store is meant to change node, after moving its data away)",
                        dir.display(),
                        me.id,
                        me.addr(),
                        path.display()
                    ));
                }
                if epoch > self.map.epoch {
                    return Err(format!(
                        "the store in {} last served epoch {epoch} of the cluster map, newer \
                         than this map's epoch {}: the file is out of date",
                        dir.display(),
                        self.map.epoch
                    ));
                }
                if epoch == self.map.epoch {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
        let tmp = dir.join(format!("{NODE_FILE}.tmp"));
        let text = format!("id {}\nepoch {}\n", me.id, self.map.epoch);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, text))
            .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| std::fs::File::open(dir)?.sync_all())
            .map_err(|e| format!("cannot record the node in {}: {e}", path.display()))
    }
}

/// True if `host` (from the map) names the address `bind` listens on. A node bound to
/// every address (`0.0.0.0`, `::`) is reachable at any host name.
fn same_host(host: &str, bind: &str) -> bool {
    host == bind
        || matches!(bind, "0.0.0.0" | "::")
        || (host == "localhost" && bind == "127.0.0.1")
        || (bind == "localhost" && host == "127.0.0.1")
}
