//! Frame sources that feed a recorder: the built-in generator and UDP input (with its sender).
//! Readout code can also push frames itself through [`crate::RecorderHandle::push`].

pub mod generator;
pub mod udp;

pub use generator::{run_generator, GeneratorConfig, GeneratorStats};
pub use udp::{bind_udp, parse_udp_list, run_udp, send_udp, SendStats, UdpStats};
