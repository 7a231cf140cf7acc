//! Group commit: concurrent `Persisted` writers on `block` tiers share one sync.
//!
//! A writer publishes its record, registers its segment and waits for the next batch to
//! complete. One waiter at a time becomes the leader: it takes every registered segment and
//! persists each one up to its current end (`Segment::persist_written`, which always persists
//! from the segment's durable watermark, so the durable part of a segment stays a prefix).
//! Everyone who registered before the leader took the batch is covered by it.

use crate::error::{Error, Result};
use crate::segment::Segment;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

#[derive(Default)]
struct State {
    pending: Vec<Arc<Segment>>,
    /// Id of the batch new registrations join.
    open_batch: u64,
    /// Batches completed (batch `b` is done once `done > b`).
    done: u64,
    leader: bool,
    failed: Option<String>,
}

/// The group-commit coordinator.
#[derive(Default)]
pub struct GroupCommit {
    state: Mutex<State>,
    cv: Condvar,
}

impl GroupCommit {
    /// Returns once everything published in `seg` so far is durable.
    pub fn persist(&self, seg: &Arc<Segment>) -> Result<()> {
        let mut s = self.state.lock();
        if !s.pending.iter().any(|p| Arc::ptr_eq(p, seg)) {
            s.pending.push(seg.clone());
        }
        let mine = s.open_batch;
        loop {
            if let Some(why) = &s.failed {
                return Err(Error::Poisoned(why.clone()));
            }
            if s.done > mine {
                return Ok(());
            }
            if s.leader {
                self.cv.wait(&mut s);
                continue;
            }
            s.leader = true;
            let batch = s.open_batch;
            s.open_batch += 1;
            let work = std::mem::take(&mut s.pending);
            drop(s);
            let mut result = Ok(());
            for seg in &work {
                if let Err(e) = seg.persist_written() {
                    result = Err(e);
                    break;
                }
            }
            s = self.state.lock();
            s.leader = false;
            s.done = batch + 1;
            if let Err(e) = result {
                s.failed = Some(e.to_string());
            }
            self.cv.notify_all();
        }
    }
}
