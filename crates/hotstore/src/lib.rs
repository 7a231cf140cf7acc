//! hotstore: persistent hot storage for high-rate data acquisition.
//!
//! An embedded, log-structured key-value store: readout writes fragments at memory speed,
//! consumers read and remove them, and nothing acknowledged is lost to a crash (and, with
//! [`Durability::Persisted`] on a power-safe tier, to a power cut).
//!
//! ```no_run
//! use hotstore::{Durability, FragmentKey, Store};
//! let store = Store::builder("/dev/shm/demo").open()?;
//! let key = FragmentKey::new(1, 42, 3, 0).to_bytes();
//! store.put(&key, b"fragment bytes", Durability::Persisted)?;
//! assert_eq!(store.get(&key)?.as_deref(), Some(&b"fragment bytes"[..]));
//! store.remove(&key, Durability::Persisted)?;
//! # Ok::<(), hotstore::Error>(())
//! ```
//!
//! See `docs/design.md` for the on-disk formats and the durability protocol.
#![deny(missing_docs)]

mod checksum;
mod clock;
mod commit;
mod copy;
mod error;
mod events;
mod files;
mod index;
mod key;
mod maintenance;
mod medium;
mod meta;
mod options;
mod prefetch;
mod record;
mod recovery;
mod relocation;
mod segment;
mod stats;
mod store;
mod summary;
mod tier;
mod verify;

/// crc32c (Castagnoli), the checksum the engine computes over every record: for tools that
/// measure or check the same work (`hotstore minidaq`'s limit for a readout's work).
pub use checksum::crc32c;

/// Values at least this long are copied into a segment with stores that bypass the cache (on
/// CPUs with AVX-512F): for benchmarks that print the `work:` limit beside such puts.
#[doc(hidden)]
pub const STREAMED_FROM_VALUE_BYTES: usize = copy::STREAM_FROM_LEN;

/// Copies `src` into `dst` (as long) the way the engine copies a value into a segment: a vector
/// loop for kilobytes, stores that bypass the cache from [`STREAMED_FROM_VALUE_BYTES`] on. For
/// benchmarks that measure a write's own work apart from the store's bookkeeping (`minidaq`'s
/// and `bench put`'s `work:` limit): the limit follows the engine's copy, so a slower copy
/// lowers both.
#[doc(hidden)]
pub fn copy_value(dst: &mut [u8], src: &[u8]) {
    copy::copy_into(dst, src)
}

pub use error::{Error, Result};
pub use events::{
    Ack, Claim, ClaimToken, ConsumerInfo, EventCounts, EventId, EventInfo, EventInterest,
    EventListener, EventPolicy, EventState, GroupInfo, NextEvent, PendingClaim,
    MAX_ACKED_INTERVALS, MAX_CONSUMERS, MAX_CONSUMER_NAME, MAX_DELIVERIES, MAX_EVENT_LISTENERS,
    MAX_EXPECTED_FRAGMENTS, MAX_GROUPS, MAX_GROUP_NAME, MAX_RUN_POLICIES,
};
pub use key::{FragmentKey, KeyField, KeyLayout, MAX_KEY_LEN};
pub use medium::{free_space_bytes, Domain};
pub use meta::{FORMAT_VERSION, META_FILE};
pub use options::{
    Durability, PageCache, RecoveryMode, StoreOptions, TierSpec, WriteOptions,
    DIRECT_IO_MIN_VALUE_BYTES, MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE, OFFLOAD_HIGH_WATER,
};
pub use record::Kind as RecordKind;
pub use record::MAX_VALUE_LEN;
pub use recovery::{read_cut_file, CutRecord, RecoveryReport, UnsyncedTail};
pub use stats::{FileCreation, Relocation, Stats, TierStats, Wait, Waits};
pub use store::{CommitFailed, Reservation, Store, ValueRef, MAX_VALUE_PARTS, SHORT_OF_ROOM_FOR};
pub use verify::{verify_dir, Damage, VerifyReport};

/// Not part of the API: raw internals that the workspace's own tests need and no user should
/// call, hidden from the documentation and free to change with any release.
///
/// - Fault injection: [`FaultMedium`](testing::FaultMedium) keeps only what was persisted and
///   fails on demand; tests plug it in with the hidden `StoreOptions::media` option, which
///   takes the [`Medium`](testing::Medium) / [`Region`](testing::Region) I/O traits.
/// - On-disk format: the damage and crash tests corrupt records, segment headers and
///   summaries byte by byte, so they need the record header length, the record kinds, the
///   segment header, the summary entries and the recovery scan that reads them.
/// - Index sizing: `tests/index_memory.rs` measures the DRAM per index entry directly.
///
/// Everything else stays private to the crate.
#[doc(hidden)]
pub mod testing {
    pub use crate::index::{Index, IndexKey, Loc};
    pub use crate::medium::{Domain, FaultConfig, FaultMedium, Medium, Region};
    pub use crate::record::{Kind as RecordKind, HEADER_LEN as RECORD_HEADER_LEN};
    pub use crate::recovery::{scan, Gaps, Scan};
    pub use crate::segment::{Segment, SegmentHeader, SEGMENT_HEADER_LEN};
    pub use crate::summary::Entry as SummaryEntry;
}
