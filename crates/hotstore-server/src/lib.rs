//! hotstore over the Redis protocol.
//!
//! `hotstore serve` (and [`spawn`] for embedding and tests) serves a store to any Redis
//! client: RESP2 and RESP3, pipelining, many connections on a few worker threads, standard
//! string commands and the DAQ commands of `docs/protocol.md` (fragments, event claims with
//! leases, acknowledgements). Writes are answered once they meet their durability; pipelined
//! and concurrent `Persisted` writes share one sync (group commit).
//!
//! Modules: [`resp`] (parser and encoder), `commands` (table and handlers), `conn` (one
//! connection's loop, back-pressure, durability before replies), `session` (the connection
//! state commands see), `shared` (state of all connections), `sync` (group commit),
//! `metrics` (Prometheus; told the command names and figures, it imports no other module),
//! `server` (listeners, start and stop), `config`, `cluster` (the slot map of cluster mode:
//! which node serves which keys). No two modules import each other.

/// Writes one line to stderr, never panicking: a server ignores SIGPIPE, so `eprintln!` to a
/// stderr whose reader went away (`hotstore serve 2>&1 | head`) would panic a worker.
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod cluster;
mod commands;
mod config;
mod conn;
mod error;
mod glob;
mod metrics;
mod record;
#[doc(hidden)] // the RESP codec: public for the fuzz target and the tests' raw clients only
pub mod resp;
mod server;
mod session;
mod shared;
mod sync;
mod waiters;

pub use config::{parse_size, ServerConfig, PREALLOCATE_ALL};
pub use error::ServerError;
pub use record::RecordControl;
pub use server::{bind, spawn, spawn_bound, spawn_on, Listeners, ServerHandle};
