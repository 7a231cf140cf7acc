//! hotstore-recorder: trigger-driven recording of continuous streams into a hotstore store,
//! as DUNE's supernova buffer does (design brief section 6).
//!
//! Readout pushes fixed-size frames per link into DRAM rings ([`RecorderHandle::push`] or a built-in
//! [`source`]); a trigger ([`RecorderHandle::trigger`]) records `[T - pre, T + post)` of every
//! link into the store as ordinary events (one event per time slice, one fragment per link per
//! slice; see [`slice`](mod@slice)), durably, with a manifest per recording ([`manifest`]).
//! [`verify`] proves a recording has no gap and no corrupt frame; [`export`] writes it out as raw files per link, and `export_hdf5` (feature `hdf5`) as one HDF5 file.

pub mod error;
pub mod frame;
#[cfg(feature = "hdf5")]
pub mod hdf5_export;
pub mod manifest;
pub mod mem;
pub mod readback;
pub mod recorder;
pub mod recovery;
pub mod ring;
pub mod slice;
pub mod source;

pub use error::{RecorderError, Result};
#[cfg(feature = "hdf5")]
pub use hdf5_export::{export_hdf5, Hdf5Export};
pub use manifest::{Manifest, RecordingState};
pub use readback::{export, verify, VerifyReport};
pub use recorder::{
    now_ns, Recorder, RecorderConfig, RecorderHandle, RecorderReport, Sample, TriggerOutcome,
};
pub use recovery::close_interrupted;
