//! The cluster map: which node serves which hash slots, read from a TOML file that is the
//! source of truth (a DAQ's buffer nodes are fixed hardware), versioned by an epoch.
//!
//! ```toml
//! epoch = 1
//! [[node]]
//! id = "9c0a...40 hex digits"
//! addr = "127.0.0.1:7001"
//! slots = ["0-5460"]
//! ```
//!
//! A map is valid only if every slot is served by exactly one node, ids are 40 hex digits
//! and unique, and addresses are unique: the checks name the slot or node that is wrong.

use super::slot::SLOTS;
use serde::Deserialize;
use std::fmt::Write as _;
use std::ops::RangeInclusive;
use std::path::Path;

/// One node of the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// 40 lower-case hex digits, as Redis node ids.
    pub id: String,
    /// Host clients connect to (an IP address or a name).
    pub host: String,
    /// Port clients connect to.
    pub port: u16,
    /// Slot ranges served, sorted.
    pub slots: Vec<RangeInclusive<u16>>,
}

impl Node {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
    /// Number of slots served.
    pub fn slot_count(&self) -> usize {
        self.slots.iter().map(|r| r.len()).sum()
    }
}

/// A validated cluster map.
#[derive(Debug, Clone)]
pub struct ClusterMap {
    /// Version of the map: raise it whenever slots move.
    pub epoch: u64,
    /// The nodes, in the file's order.
    pub nodes: Vec<Node>,
    /// Index into `nodes` of each slot's node.
    owner: Box<[u16]>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    epoch: u64,
    #[serde(default)]
    node: Vec<FileNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    id: String,
    addr: String,
    slots: Vec<String>,
}

fn parse_range(text: &str) -> Result<RangeInclusive<u16>, String> {
    let num = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|&n| (n as usize) < SLOTS)
            .ok_or_else(|| format!("`{text}` is not a slot (0 to 16383) or a range `a-b`"))
    };
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(text)?, num(text)?),
    };
    if a > b {
        return Err(format!("slot range `{text}` is empty (start after end)"));
    }
    Ok(a..=b)
}

/// Splits `host:port` (an IPv6 host in brackets).
pub fn split_addr(addr: &str) -> Result<(String, u16), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("address `{addr}` is not host:port"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("address `{addr}` has no valid port (1 to 65535)"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("address `{addr}` has no host"));
    }
    Ok((host.to_string(), port))
}

/// True if `id` looks like a Redis node id: 40 lower-case hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl ClusterMap {
    /// Reads and checks a map file.
    pub fn load(path: &Path) -> Result<ClusterMap, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the cluster map {}: {e}", path.display()))?;
        ClusterMap::parse(&text).map_err(|e| format!("cluster map {}: {e}", path.display()))
    }

    /// Parses and checks a map in TOML.
    pub fn parse(text: &str) -> Result<ClusterMap, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut nodes = Vec::with_capacity(file.node.len());
        for n in file.node {
            let (host, port) = split_addr(&n.addr)?;
            let mut slots = n
                .slots
                .iter()
                .map(|s| parse_range(s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("node {}: {e}", n.id))?;
            slots.sort_by_key(|r| *r.start());
            nodes.push(Node {
                id: n.id,
                host,
                port,
                slots,
            });
        }
        ClusterMap::new(file.epoch, nodes)
    }

    /// Checks a map given as nodes: every slot once, ids and addresses unique and well formed.
    pub fn new(epoch: u64, nodes: Vec<Node>) -> Result<ClusterMap, String> {
        if nodes.is_empty() {
            return Err("the map names no node (add [[node]] tables)".into());
        }
        if nodes.len() > u16::MAX as usize {
            return Err("too many nodes".into());
        }
        for (i, n) in nodes.iter().enumerate() {
            if !valid_id(&n.id) {
                return Err(format!(
                    "node id `{}` is not 40 lower-case hex digits (`hotstore cluster create` \
                     makes them)",
                    n.id
                ));
            }
            if let Some(other) = nodes[..i].iter().find(|o| o.id == n.id) {
                return Err(format!(
                    "node id {} is given to both {} and {}",
                    n.id,
                    other.addr(),
                    n.addr()
                ));
            }
            if let Some(other) = nodes[..i]
                .iter()
                .find(|o| o.host == n.host && o.port == n.port)
            {
                return Err(format!(
                    "nodes {} and {} have the same address {}",
                    other.id,
                    n.id,
                    n.addr()
                ));
            }
        }
        let mut owner = vec![u16::MAX; SLOTS].into_boxed_slice();
        for (i, n) in nodes.iter().enumerate() {
            for r in &n.slots {
                for s in r.clone() {
                    let prev = owner[s as usize];
                    if prev != u16::MAX {
                        return Err(format!(
                            "slot {s} is given to two nodes, {} and {}: each slot must have \
                             exactly one",
                            nodes[prev as usize].id, n.id
                        ));
                    }
                    owner[s as usize] = i as u16;
                }
            }
        }
        if let Some(first) = owner.iter().position(|&o| o == u16::MAX) {
            let len = owner[first..]
                .iter()
                .take_while(|&&o| o == u16::MAX)
                .count();
            let missing = owner.iter().filter(|&&o| o == u16::MAX).count();
            return Err(format!(
                "{missing} slots have no node, the first {first}-{}: every slot 0-16383 must \
                 be given to one node",
                first + len - 1
            ));
        }
        Ok(ClusterMap {
            epoch,
            nodes,
            owner,
        })
    }

    /// The node serving `slot`.
    pub fn owner(&self, slot: u16) -> &Node {
        &self.nodes[self.owner[slot as usize] as usize]
    }

    /// Index of the node serving `slot`.
    pub fn owner_index(&self, slot: u16) -> usize {
        self.owner[slot as usize] as usize
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<(usize, &Node)> {
        self.nodes.iter().enumerate().find(|(_, n)| n.id == id)
    }

    /// The map as TOML (what [`ClusterMap::parse`] reads).
    pub fn to_toml(&self) -> String {
        let mut t = format!(
            "# hotstore cluster map: the nodes and the hash slots each serves. Every node is \
             started\n# with this file (hotstore serve --cluster FILE); raise the epoch \
             whenever slots move.\nepoch = {}\n",
            self.epoch
        );
        for n in &self.nodes {
            let slots: Vec<String> = n
                .slots
                .iter()
                .map(|r| format!("\"{}-{}\"", r.start(), r.end()))
                .collect();
            let _ = write!(
                t,
                "\n[[node]]\nid = \"{}\"\naddr = \"{}\"\nslots = [{}]\n",
                n.id,
                n.addr(),
                slots.join(", ")
            );
        }
        t
    }

    /// A map of `addrs.len()` nodes with new random ids, slots split evenly as
    /// `redis-cli --cluster create` does.
    pub fn even(epoch: u64, addrs: &[(String, u16)]) -> Result<ClusterMap, String> {
        let n = addrs.len();
        if n == 0 {
            return Err("a cluster needs at least one node".into());
        }
        let nodes = addrs
            .iter()
            .enumerate()
            .map(|(i, (host, port))| {
                let start = i * SLOTS / n;
                let end = (i + 1) * SLOTS / n - 1;
                Node {
                    id: random_id(),
                    host: host.clone(),
                    port: *port,
                    slots: vec![start as u16..=end as u16],
                }
            })
            .collect();
        ClusterMap::new(epoch, nodes)
    }
}

/// A new node id: 40 hex digits from the kernel's random source.
pub fn random_id() -> String {
    let mut bytes = [0u8; 20];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer it is given.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        // Without getrandom (very old kernels), time and pid are unique enough for an id.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ ((std::process::id() as u128) << 64);
        bytes[..16].copy_from_slice(&seed.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> ClusterMap {
        ClusterMap::even(
            1,
            &[
                ("127.0.0.1".into(), 7001),
                ("127.0.0.1".into(), 7002),
                ("127.0.0.1".into(), 7003),
            ],
        )
        .unwrap()
    }

    #[test]
    fn even_split_matches_redis_cli_and_round_trips() {
        let m = three();
        assert_eq!(m.nodes[0].slots, vec![0..=5460]);
        assert_eq!(m.nodes[1].slots, vec![5461..=10921]);
        assert_eq!(m.nodes[2].slots, vec![10922..=16383]);
        let again = ClusterMap::parse(&m.to_toml()).unwrap();
        assert_eq!(again.nodes, m.nodes);
        assert_eq!(again.owner(10922).port, 7003);
    }

    #[test]
    fn overlapping_and_missing_slots_are_named() {
        let m = three();
        let text = m.to_toml().replace("\"5461-10921\"", "\"5000-10921\"");
        let e = ClusterMap::parse(&text).unwrap_err();
        assert!(e.contains("slot 5000 is given to two nodes"), "{e}");
        let text = m.to_toml().replace("\"5461-10921\"", "\"5461-10000\"");
        let e = ClusterMap::parse(&text).unwrap_err();
        assert!(
            e.contains("921 slots have no node, the first 10001-10921"),
            "{e}"
        );
    }

    #[test]
    fn bad_ids_addresses_and_ranges_are_refused() {
        let m = three();
        let id0 = m.nodes[0].id.clone();
        let id1 = m.nodes[1].id.clone();
        let dup = m.to_toml().replace(&id1, &id0);
        assert!(ClusterMap::parse(&dup)
            .unwrap_err()
            .contains("is given to both"));
        let bad = m.to_toml().replace(&id0, "node-a");
        assert!(ClusterMap::parse(&bad)
            .unwrap_err()
            .contains("40 lower-case hex"));
        let addr = m.to_toml().replace("127.0.0.1:7002", "127.0.0.1:7001");
        assert!(ClusterMap::parse(&addr)
            .unwrap_err()
            .contains("same address"));
        let range = m.to_toml().replace("\"0-5460\"", "\"5460-0\"");
        assert!(ClusterMap::parse(&range).unwrap_err().contains("is empty"));
        let big = m.to_toml().replace("\"10922-16383\"", "\"10922-16384\"");
        assert!(ClusterMap::parse(&big)
            .unwrap_err()
            .contains("is not a slot"));
        assert!(ClusterMap::parse("epoch = 1")
            .unwrap_err()
            .contains("no node"));
    }
}
