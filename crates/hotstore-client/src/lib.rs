//! A typed Rust client for the hotstore server's DAQ commands (`docs/protocol.md`), built on
//! [redis-rs](https://docs.rs/redis): [`Client`] blocks, [`AsyncClient`] runs on tokio.
//! Both offer the same operations: `FRAG.PUT` / `FRAG.GET`, `EVENT.GET` / `SEAL` / `NEXT` /
//! `ACK` / `RELEASE` / `RANGE`, `STORE.STATS`, and [`Pipeline`]s of writes sent in one round
//! trip or with a window of requests in flight. Error replies map to [`Error`] variants by
//! their code (`-LATE` is [`Error::Late`], `-CLAIMLOST` [`Error::ClaimLost`], ...).
//!
//! A cluster of servers (`hotstore serve --cluster MAP`) is used through [`ClusterClient`],
//! which sends each fragment to the node of its event's slot ([`event_slot`]), and
//! [`ClusterConsumer`], which claims from every node.
//!
//! Fragments are named by the default key layout, `run:u32,event:u64|detector:u16,component:u16`.
//!
//! Throughput comes from pipelining: [`Client::frag_put_many`] sends many fragments in one
//! round trip; a [`Pipeline`] of `FRAG.PUT` / `EVENT.SEAL` / `EVENT.ACK` / `EVENT.RELEASE`
//! goes out with [`Client::execute`] (one round trip) or [`Client::execute_windowed`] (at
//! most `window` requests unanswered), and [`Client::event_next_batch`] claims many events
//! in one round trip. `examples/daq_load.rs` measures a DAQ load built this way.
//!
//! ```no_run
//! use hotstore_client::{Ack, Client, Durability};
//! use std::time::Duration;
//!
//! # fn main() -> hotstore_client::Result<()> {
//! // Producer: the fragments of event 42 of run 1, then seal it.
//! let mut producer = Client::connect("redis://127.0.0.1:6380")?;
//! producer.frag_put(1, 42, 0, 0, b"detector zero", None)?;
//! producer.frag_put(1, 42, 1, 0, b"detector one", Some(Durability::Persisted))?;
//! producer.event_seal(1, 42, None)?;
//!
//! // Consumer: claim the next READY event (waiting up to 1 s), process it, remove it.
//! let mut consumer = Client::connect("redis://127.0.0.1:6380")?;
//! if let Some(ev) = consumer.event_next(Duration::from_secs(30), Some(Duration::from_secs(1)))? {
//!     println!("run {} event {}: {} fragments", ev.run, ev.event, ev.fragments.len());
//!     consumer.event_ack(&ev.token, Ack::Remove, None)?;
//! }
//! # Ok(()) }
//! ```
//!
//! The async client is the same with `.await` (it needs a tokio runtime):
//!
//! ```no_run
//! # async fn run() -> hotstore_client::Result<()> {
//! use hotstore_client::{AsyncClient, Fragment};
//! let client = AsyncClient::connect("redis://:secret@127.0.0.1:6380").await?;
//! let frags: Vec<Fragment> = (0..4u16)
//!     .map(|d| Fragment::new(1, 43, d, 0, vec![0u8; 10240]))
//!     .collect();
//! client.frag_put_many(&frags, None).await?; // one round trip
//! client.event_seal(1, 43, None).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod blocking;
mod cluster;
mod error;
mod nonblocking;
mod options;
mod pipeline;
mod proto;
mod slot;
mod types;

pub use blocking::Client;
pub use cluster::{
    ClusterClaim, ClusterClient, ClusterConsumer, ClusterPipeline, ConsumerOptions, NodeHealth,
    NodeInfo, DEFAULT_MAX_REDIRECTS, DEFAULT_NODE_RESPONSE_TIMEOUT,
};
pub use error::{Error, Result};
pub use nonblocking::AsyncClient;
pub use options::{Address, ConnectOptions};
pub use pipeline::Pipeline;
pub use slot::{event_slot, event_tag, key_slot, SLOTS};
pub use types::{Ack, ClaimedEvent, Durability, EventState, EventSummary, Fragment, StatValue};

/// The redis-rs crate this client is built on, for direct use of its connections.
pub use redis;
