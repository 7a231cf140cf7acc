//! Store statistics.

use crate::medium::Domain;
use serde::Serialize;
use std::path::PathBuf;

/// One tier's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TierStats {
    /// Directory.
    pub path: PathBuf,
    /// Declared persistence domain.
    pub domain: Domain,
    /// Whether a `Persisted` write on this tier survives a power cut.
    pub survives_power_cut: bool,
    /// How bulk records reach the tier's files: `direct` (O_DIRECT for their aligned
    /// interior), `buffered` (pwrite; the file system refused O_DIRECT) or `mapped` (memory).
    pub bulk_write_path: &'static str,
    /// Configured capacity (0 = the file system decides).
    pub capacity_bytes: u64,
    /// Bytes of segment files held (in use, free and ready).
    pub file_bytes: u64,
    /// Segments in use.
    pub segments: usize,
    /// Recycled files waiting for reuse.
    pub segments_free: usize,
    /// Pre-faulted files ready for writers.
    pub segments_ready: usize,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Bytes of dead records not yet reclaimed.
    pub dead_bytes: u64,
    /// Offload starts when live and dead records fill this fraction of the capacity (`None`:
    /// this tier does not offload: no capacity, no tier below, or offload off).
    pub offload_high_water: Option<f64>,
    /// Above its high-water mark now: its oldest sealed segments are moving to the next tier.
    pub offloading: bool,
    /// Bytes of records relocated within this tier since open (cleaning).
    pub relocated_bytes: u64,
    /// Bytes of records moved from this tier to the next one since open.
    pub offloaded_out_bytes: u64,
    /// Bytes of records moved here from the tier above since open.
    pub offloaded_in_bytes: u64,
    /// Segment files created since open and the time that took: the file system's own rate
    /// for new space, which bounds a store that is still growing.
    pub created: FileCreation,
}

/// Segment files a tier created since open (ahead of writers by maintenance, by a writer that
/// found none ready, or by preallocation), and what they cost.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct FileCreation {
    /// Files created.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Time spent creating them (allocate, zero-fill where the tier does, map, pre-fault),
    /// summed over the threads that did it, nanoseconds.
    pub total_ns: u64,
}

impl FileCreation {
    /// Bytes created per second of creating, by one thread; `None` before any file.
    pub fn bytes_per_sec(&self) -> Option<f64> {
        (self.files > 0 && self.total_ns > 0)
            .then(|| self.bytes as f64 * 1e9 / self.total_ns as f64)
    }
}

impl TierStats {
    /// One sentence on what survives what, for people.
    pub fn power_safety(&self) -> String {
        match (self.domain, self.survives_power_cut) {
            (Domain::Volatile, _) => "volatile: survives a crash of the process, NOT a power cut or reboot".into(),
            (Domain::Pmem, true) => "pmem (MAP_SYNC): Persisted writes survive a power cut".into(),
            (Domain::Pmem, false) => {
                "pmem emulated (MAP_SYNC refused: not a DAX mount): survives a process crash, NOT a power cut".into()
            }
            (Domain::Block, _) => "block: Persisted writes survive a power cut; Memory writes only a process crash".into(),
        }
    }
}

/// Store-wide figures.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Live keys.
    pub entries: u64,
    /// Bytes of live records (headers and keys included).
    pub live_bytes: u64,
    /// Bytes of dead records not yet reclaimed.
    pub dead_bytes: u64,
    /// Segments in use.
    pub segments: usize,
    /// Sum of configured capacities (0 = the file systems decide).
    pub capacity_bytes: u64,
    /// Bytes of segment files held.
    pub file_bytes: u64,
    /// Puts since open.
    pub puts: u64,
    /// Removals since open.
    pub removes: u64,
    /// Writes refused with StoreFull since open.
    pub full_errors: u64,
    /// Direct puts (large values written whole past the page cache) that found a newer
    /// record of their shard at publish and wrote their first block again under a new lsn:
    /// the cost of concurrent writers, one 4 KiB write each.
    pub direct_rewrites: u64,
    /// Where writers waited since open (a stall is counted, not guessed).
    pub waits: Waits,
    /// Relocation and offload since open.
    pub relocation: Relocation,
    /// Bytes of records written by users since open (puts, removals, event records): the
    /// denominator of write amplification.
    pub written_bytes: u64,
    /// Bytes puts leave free for removals and relocation: one segment and one removal file of
    /// an eighth of a segment; on a tier bounded by its device, that rounded up to whole
    /// pooled segment files (see docs/design.md, "Space").
    pub reserve_bytes: u64,
    /// Live bytes up to which puts never answer `StoreFull` on a bounded store (0 for a store
    /// the file system bounds): the capacity less the reserve, the writers' and relocation's
    /// open segments and the cleaning margin, times how full the largest record stored so far
    /// lets a file be (docs/design.md, "A bounded store never wedges").
    pub guaranteed_live_bytes: u64,
    /// Key layout.
    pub layout: String,
    /// Events by state, and lifecycle counters.
    pub events: crate::events::EventCounts,
    /// Why the store is read-only, if it is.
    pub poisoned: Option<String>,
    /// Per tier.
    pub tiers: Vec<TierStats>,
}

/// One kind of wait: how many times, and the total time.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Wait {
    /// Waits since open.
    pub count: u64,
    /// Their total duration, nanoseconds.
    pub total_ns: u64,
}

/// Where writers waited since open.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Waits {
    /// A writer needed a new segment file and none was prepared: it made one itself (or
    /// waited for one being prepared). Zero in steady state while maintenance keeps up.
    pub segment: Wait,
    /// A writer waited for space in a full store (only with a `full_wait`).
    pub full: Wait,
    /// A `Persisted` write on a block tier waited for its group commit (the device's cost,
    /// expected: the others are stalls).
    pub sync: Wait,
}

/// What relocation and offload did since open.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Relocation {
    /// Background moves that failed or could not start (a lower tier full or failing: the
    /// records stay where they were); counted at each attempt.
    pub errors: u64,
    /// The last error of a background move.
    pub last_error: Option<String>,
    /// Records moved within their tier to free space (cleaning).
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Records moved to a lower tier (offload).
    pub offloaded_records: u64,
    /// Their bytes.
    pub offloaded_bytes: u64,
    /// Groups of segments emptied by relocation.
    pub groups: u64,
    /// Records other than puts (tombstones, event removals, marks) copied forward with a
    /// segment moved alone because its group was too large (counted in `records` too).
    pub forwarded_records: u64,
}

impl Stats {
    /// Bytes written to the tiers for each byte users wrote: 1.0 without relocation.
    pub fn write_amplification(&self) -> f64 {
        if self.written_bytes == 0 {
            return 1.0;
        }
        (self.written_bytes + self.relocation.bytes + self.relocation.offloaded_bytes) as f64
            / self.written_bytes as f64
    }
}
