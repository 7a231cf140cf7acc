//! The cluster's map as `CLUSTER SLOTS` reports it: the nodes and the slot ranges each serves.

use crate::error::{Error, Result};
use crate::proto;
use crate::slot::SLOTS;
use crate::Client;
use std::ops::RangeInclusive;

/// One node of a cluster, as `CLUSTER SLOTS` named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id (40 hex digits; empty if the server did not say).
    pub id: String,
    /// Host clients connect to.
    pub host: String,
    /// Port clients connect to.
    pub port: u16,
    /// The slot ranges it serves, sorted.
    pub slots: Vec<RangeInclusive<u16>>,
}

impl NodeInfo {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The slot ranges as text: `0-5460` or `0-99,200-299`.
    pub fn slots_text(&self) -> String {
        let parts: Vec<String> = self
            .slots
            .iter()
            .map(|r| format!("{}-{}", r.start(), r.end()))
            .collect();
        parts.join(",")
    }

    /// True if the node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|r| r.contains(&slot))
    }
}

/// Which node serves each slot.
#[derive(Debug, Clone)]
pub(crate) struct SlotMap {
    pub nodes: Vec<NodeInfo>,
    /// Index into `nodes` of each slot's node; `u16::MAX`: none.
    owner: Box<[u16]>,
}

impl SlotMap {
    /// Asks `client` (connected to `asked_host`) for `CLUSTER SLOTS`.
    pub fn fetch(client: &mut Client, asked: &str, asked_host: &str) -> Result<SlotMap> {
        let not_cluster = |message: String| Error::NotCluster {
            node: asked.to_string(),
            message,
        };
        let reply = client.request(&redis::cmd("CLUSTER").arg("SLOTS").clone())?;
        let ranges = match proto::cluster_slots(reply) {
            Ok(r) => r,
            Err(e) if e.is_connection() => return Err(e),
            Err(e) => return Err(not_cluster(format!("CLUSTER SLOTS answered: {e}"))),
        };
        if ranges.is_empty() {
            return Err(not_cluster("CLUSTER SLOTS lists no slot".into()));
        }
        let mut nodes: Vec<NodeInfo> = Vec::new();
        let mut owner = vec![u16::MAX; usize::from(SLOTS)].into_boxed_slice();
        for proto::SlotRange {
            start,
            end,
            host,
            port,
            id,
        } in ranges
        {
            if start > end || end >= SLOTS {
                return Err(not_cluster(format!(
                    "CLUSTER SLOTS names range {start}-{end}"
                )));
            }
            // An empty host (or `?`) means the one asked, as in Redis.
            let host = if host.is_empty() || host == "?" {
                asked_host.to_string()
            } else {
                host
            };
            let i = match nodes.iter().position(|n| n.host == host && n.port == port) {
                Some(i) => i,
                None => {
                    nodes.push(NodeInfo {
                        id,
                        host,
                        port,
                        slots: Vec::new(),
                    });
                    nodes.len() - 1
                }
            };
            nodes[i].slots.push(start..=end);
            for s in start..=end {
                owner[usize::from(s)] = i as u16;
            }
        }
        for n in &mut nodes {
            n.slots.sort_by_key(|r| *r.start());
        }
        Ok(SlotMap { nodes, owner })
    }

    /// Index of the node serving `slot`.
    pub fn owner(&self, slot: u16) -> Result<usize> {
        match self.owner.get(usize::from(slot)) {
            Some(&i) if i != u16::MAX => Ok(usize::from(i)),
            _ => Err(Error::Protocol(format!(
                "slot {slot} is served by no node of the cluster map"
            ))),
        }
    }
}
