//! Helpers shared by the engine's integration tests.
#![allow(clippy::unwrap_used, reason = "test code: a panic is how a test fails")]

use hotstore::testing::{FaultMedium, Medium};
use hotstore::Store;
use std::sync::Arc;

/// A store on `medium` with two lanes and 1 MiB segments (small enough to roll quickly).
pub fn open_two_lanes(medium: &Arc<FaultMedium>) -> Store {
    let m: Arc<dyn Medium> = medium.clone();
    Store::builder("mem")
        .media(vec![m])
        .lanes(2)
        .segment_size_bytes(1 << 20)
        .open()
        .unwrap()
}
