//! hotstore-bench: the benchmarks of hotstore as a library, run by the `hotstore` command line
//! (which parses their options and prints what they return).
//!
//! * [`minidaq`]: the DAQ benchmark (readout and collector threads on an embedded store or a
//!   server), its sampling, report and plots.
//! * [`bench`](mod@bench): embedded put and get throughput (`bench put|get`, `--vs lmdb`);
//!   [`bench_recovery`]: index rebuild at open; [`bench_dram`]: DRAM per live key;
//!   [`bench_soak`]: long-lived keys on a bounded store (relocation's cost over minutes).
//! * [`device`]: storage characterisation (access methods, io_uring, fio beside) and the
//!   papers' sizing models (`bench device`, `bench model`).
//! * [`pipeline`]: the neuroimaging paper's incrementation pipeline (`bench pipeline`): plain
//!   files on disk and tmpfs against hotstore with a memory tier over a disk tier, beside the
//!   makespan bound M >= D/R + D/W.
//! * [`limits`]: the machine's own limits (memcpy bandwidth, O_DIRECT sequential writes), the
//!   figure every benchmark prints its result beside.
//! * [`plot`]: the plot toolkit every chart shares (font loading, PNG output, palette, axis
//!   label formats), used by minidaq's and the device's figures and by [`recorder_plot`].
//! * [`scratch`]: temporary stores removed at the end of a run and on SIGINT/SIGTERM.
//! * [`util`]: byte sizes and counts for people, a median, the hash behind the benchmarks'
//!   patterns, what `--preallocate` means.
//!
//! A run returns a report: it serializes to the JSON object the command line's `--json`
//! prints, and its [`Display`](std::fmt::Display) is the text printed otherwise. Notes on what
//! a run is doing go to stderr where its configuration asks for them. Every fallible call
//! returns this crate's [`Result`]; its [`Error`] is a message for the user, the engine's
//! error, or a failed write of streamed output.

#![deny(missing_docs)]

pub mod bench;
pub mod bench_dram;
mod bench_harness;
mod bench_lmdb;
pub mod bench_recovery;
pub mod bench_soak;
pub mod device;
mod error;
pub mod limits;
pub mod minidaq;
pub mod pipeline;
pub mod plot;
pub mod recorder_plot;
pub mod scratch;
pub mod util;

pub use error::{fail, Error, Result};
