//! The maintenance thread: everything kept off the write path.
//!
//! * **Seal**: persist a segment the lane has left and write its summary (so the next open
//!   reads keys, not values).
//! * **Reclaim**: recycle a sealed segment whose records are all dead and that shadows nothing
//!   still on disk: persist every segment first (so whatever made its records dead is durable),
//!   mark the file free on the medium, then unpin the segments that were waiting on it.
//! * **Prepare**: keep each tier stocked with pre-faulted files.

use crate::segment::Segment;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// What the thread does, implemented by the store (`store::upkeep`): this module is only the
/// thread's schedule, so it needs nothing of the store but these calls.
pub(crate) trait Upkeep: Send + Sync {
    /// Persists a segment a lane has left and writes its summary.
    fn seal(&self, seg: &Arc<Segment>);
    /// Recycles segment `id` if it is still reclaimable.
    fn reclaim(&self, id: u64);
    /// Prepares one ready file if the stock is below its target; true if it made one.
    fn prepare_one(&self) -> bool;
    /// The periodic sweep: dead active segments, groups of dead segments pinning each other,
    /// background relocation and offload.
    fn sweep(&self);
    /// A writer found the store full: free space now (reclaim, relocate) until a tier has
    /// `need` bytes of room (for a removal, by any relocation that frees space); true if one
    /// has.
    fn make_room(&self, need: u64, for_removal: bool) -> bool;
    /// Relocates everything worth it (`Store::compact`), reporting (bytes moved, dead bytes
    /// left) as it goes; returns the bytes moved.
    fn compact(&self, report: &mut dyn FnMut(u64, u64)) -> crate::Result<u64>;
}

/// Progress of a compaction: (bytes moved so far, dead bytes left).
pub(crate) type CompactProgress = Box<dyn FnMut(u64, u64) + Send>;

/// Work for the maintenance thread.
pub(crate) enum Job {
    Seal(Arc<Segment>),
    Reclaim(u64),
    /// A writer took a prepared file: restock now rather than at the next tick.
    Prepare,
    /// A writer found the store full (see `Upkeep::make_room`); the answer goes to `reply`.
    MakeRoom {
        need: u64,
        /// For a removal: relocation then moves whatever gives any space back.
        for_removal: bool,
        reply: std::sync::mpsc::Sender<bool>,
    },
    /// Compact, reporting progress, then send the result.
    Compact(CompactProgress, std::sync::mpsc::Sender<crate::Result<u64>>),
    Stop,
}

/// How often idle maintenance looks for groups of dead segments that pin each other.
const GROUP_CHECK_EVERY: Duration = Duration::from_millis(200);

pub(crate) fn run(inner: &dyn Upkeep, rx: Receiver<Job>) {
    let mut last_group_check = std::time::Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(job) => {
                if handle(inner, job) {
                    return drain(inner, &rx);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        // On time, busy or not: it used to run only after 20 ms without a job, and with a job
        // at every segment roll a busy store could go long without freeing groups of dead
        // segments that pin each other.
        if last_group_check.elapsed() >= GROUP_CHECK_EVERY {
            last_group_check = std::time::Instant::now();
            inner.sweep();
        }
        // Queued seals and reclaims first, before each new file: a reclaim gives writers a
        // file at no cost, while preparing one costs tens of milliseconds of page zeroing.
        // Fix: one job per prepared file let seals and reclaims fall behind a writer at
        // memory speed, so nothing was recycled and writers made new files themselves.
        loop {
            while let Ok(job) = rx.try_recv() {
                if handle(inner, job) {
                    return drain(inner, &rx);
                }
            }
            if !inner.prepare_one() {
                break;
            }
        }
    }
}

/// Does one job; true for Stop.
fn handle(inner: &dyn Upkeep, job: Job) -> bool {
    match job {
        Job::Seal(seg) => inner.seal(&seg),
        Job::Reclaim(id) => inner.reclaim(id),
        Job::Prepare => {} // the caller's loop prepares after every job
        Job::MakeRoom {
            need,
            for_removal,
            reply,
        } => {
            let _ = reply.send(inner.make_room(need, for_removal));
        }
        Job::Compact(mut progress, reply) => {
            let _ = reply.send(inner.compact(&mut *progress));
        }
        Job::Stop => return true,
    }
    false
}

/// Finishes what is queued (seals from close) before the thread leaves.
fn drain(inner: &dyn Upkeep, rx: &Receiver<Job>) {
    while let Ok(job) = rx.try_recv() {
        handle(inner, job);
    }
}
