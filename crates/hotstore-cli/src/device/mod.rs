//! `hotstore bench device` and `hotstore bench model` (storage characterisation). Work in progress.

use crate::util::{fail, CliResult};
use clap::Args;
use std::process::ExitCode;

/// Characterise a storage device: throughput against threads and request rate against block size.
#[derive(Args)]
pub struct DeviceArgs {}

/// The papers' models: extra DRAM for a backlog, and the makespan bound.
#[derive(Args)]
pub struct ModelArgs {}

/// Runs `bench device`.
pub fn run(_a: DeviceArgs) -> CliResult<ExitCode> {
    fail("bench device: not implemented yet")
}

/// Runs `bench model`.
pub fn run_model(_a: ModelArgs) -> CliResult<ExitCode> {
    fail("bench model: not implemented yet")
}
