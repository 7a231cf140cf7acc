//! hotstore-bench: the benchmarks of hotstore as a library, run by the `hotstore` command line.
//!
//! * [`limits`]: the machine's own limits (memcpy bandwidth, O_DIRECT sequential writes), the
//!   figure every benchmark prints its result beside.
//! * [`plot`]: the plot toolkit every chart of the tool shares (font loading, PNG output,
//!   palette, axis label formats).
//! * [`scratch`]: temporary stores removed at the end of a run and on SIGINT/SIGTERM.
//! * [`util`]: byte sizes and counts for people, hex, the hash behind the benchmarks' patterns.
//!
//! Every fallible call returns this crate's [`Result`]; its [`Error`] is a message for the user
//! or the engine's error.

#![warn(missing_docs)]

mod error;
pub mod limits;
pub mod plot;
pub mod scratch;
pub mod util;

pub use error::{fail, Error, Result};
