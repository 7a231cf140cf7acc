//! `hotstore record`: trigger-driven recording of continuous streams. Work in progress.

use crate::util::{fail, CliResult};
use clap::Args;
use std::process::ExitCode;

/// Record continuous streams into a store when a trigger fires.
#[derive(Args)]
pub struct RecordArgs {}

/// Runs `record`.
pub fn run(_a: RecordArgs) -> CliResult<ExitCode> {
    fail("record: not implemented yet")
}
