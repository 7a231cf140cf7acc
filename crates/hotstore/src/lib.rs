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

pub mod checksum;
mod commit;
mod error;
pub mod events;
pub mod index;
mod key;
mod maintenance;
pub mod medium;
mod meta;
mod options;
pub mod record;
pub mod recovery;
pub mod segment;
mod stats;
mod store;
pub mod summary;
mod tier;
pub mod verify;

pub use error::{Error, Result};
pub use events::{
    Ack, Claim, ClaimToken, EventCounts, EventId, EventInfo, EventPolicy, EventState,
};
pub use key::{FragmentKey, KeyField, KeyLayout, MAX_KEY_LEN};
pub use medium::Domain;
pub use meta::{Meta, TierMeta, FORMAT_VERSION, META_FILE};
pub use options::{
    Durability, RecoveryMode, StoreOptions, TierSpec, WriteOptions, DIRECT_IO_MIN_VALUE_BYTES,
    MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE,
};
pub use record::MAX_VALUE_LEN;
pub use recovery::RecoveryReport;
pub use stats::{Stats, TierStats, Wait, Waits};
pub use store::{Reservation, Store, MAX_VALUE_PARTS};
