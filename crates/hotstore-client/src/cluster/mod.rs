//! Cluster mode (`hotstore serve --cluster MAP`): [`ClusterClient`] writes and reads
//! fragments on the node of their event's slot, [`ClusterConsumer`] claims from every node.
//!
//! `map` reads `CLUSTER SLOTS`, `client` routes requests and follows `MOVED`, `pipeline`
//! queues writes for several nodes, `consumer` claims from all of them.

mod client;
mod consumer;
mod map;
mod pipeline;

pub use client::{ClusterClient, DEFAULT_MAX_REDIRECTS, DEFAULT_NODE_RESPONSE_TIMEOUT};
pub use consumer::{ClusterClaim, ClusterConsumer, ConsumerOptions, NodeHealth};
pub use map::NodeInfo;
pub use pipeline::ClusterPipeline;
