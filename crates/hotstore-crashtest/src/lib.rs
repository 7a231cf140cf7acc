//! hotstore-crashtest: what `hotstore stress` runs for the crash tests.
//!
//! * [`stress`]: random puts, overwrites and removals from several threads on a store that may
//!   be killed (kill -9) and restarted at any moment, with self-describing values.
//! * [`acklog`]: the acknowledgement log: one line per operation the store acknowledged,
//!   written after the acknowledgement, which a supervisor checks the store against after each
//!   kill (`crates/hotstore-cli/tests/kill9.rs`).
//!
//! It shares the formatting helpers and the error type of `hotstore-bench`
//! ([`hotstore_bench::util`], [`hotstore_bench::Error`]).

#![deny(missing_docs)]

pub mod acklog;
pub mod stress;
