//! Options for opening a store, and per-write choices.

use crate::error::{Error, Result};
use crate::key::KeyLayout;
use crate::medium::{Domain, Medium};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What an acknowledged write survives. Chosen per write; the default is the safe one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Durability {
    /// Acknowledged once the record is in the store's mapped memory (the page cache for
    /// file-backed tiers): survives a crash or `kill -9` of the writing process, **not** a power
    /// cut or kernel crash. The cost of a memcpy.
    Memory,
    /// Acknowledged only once the record is on the tier's persistence domain (fdatasync
    /// on `block`, cache-line write-back + fence on `pmem` with MAP_SYNC): survives a power
    /// cut on a real device. Concurrent writers share one sync (group commit). On a `volatile`
    /// tier nothing survives a power cut, and this is the same as `Memory`.
    #[default]
    Persisted,
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "memory" => Ok(Durability::Memory),
            "persisted" => Ok(Durability::Persisted),
            o => Err(format!("unknown durability `{o}` (memory or persisted)")),
        }
    }
}

/// Per-write options beyond durability.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// What the acknowledgement promises. Default `Persisted`.
    pub durability: Durability,
    /// When the store is full, wait up to this long for space (freed by removals) before
    /// answering `StoreFull`. Default: do not wait.
    pub full_wait: Option<Duration>,
}

impl From<Durability> for WriteOptions {
    fn from(durability: Durability) -> Self {
        WriteOptions {
            durability,
            full_wait: None,
        }
    }
}

/// How recovery treats damage that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse to open: a typed `Corruption` error names the file and offset. Default.
    #[default]
    Strict,
    /// Keep every intact record, skip the damage, and report exactly what was skipped in
    /// [`crate::RecoveryReport`].
    Salvage,
}

/// One tier: a directory on a device with a persistence domain.
#[derive(Debug, Clone)]
pub struct TierSpec {
    /// Directory holding the tier's segment files (relative paths are relative to the store).
    pub path: PathBuf,
    /// Persistence domain; `None` = detect (tmpfs → volatile, MAP_SYNC accepted → pmem, else
    /// block). Stating `pmem` on a file system without MAP_SYNC runs the pmem code path but the
    /// tier reports that it does not survive a power cut.
    pub domain: Option<Domain>,
    /// Bytes of segment files this tier may hold; 0 = as much as the file system has (a full
    /// device then answers `StoreFull`). Default 0.
    pub capacity_bytes: u64,
}

impl TierSpec {
    /// A tier in `path`, domain detected, unbounded capacity.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TierSpec {
            path: path.into(),
            domain: None,
            capacity_bytes: 0,
        }
    }

    /// States the persistence domain.
    pub fn domain(mut self, domain: Domain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// Bounds the tier's size.
    pub fn capacity_bytes(mut self, bytes: u64) -> Self {
        self.capacity_bytes = bytes;
        self
    }
}

/// Smallest segment size accepted.
pub const MIN_SEGMENT_SIZE: usize = 64 << 10;
/// Largest segment size accepted (record offsets are 32-bit).
pub const MAX_SEGMENT_SIZE: usize = 2 << 30;
/// Most writer lanes.
pub const MAX_LANES: usize = 256;
/// Most tiers.
pub const MAX_TIERS: usize = 8;

/// Options for [`crate::Store::open`]; build with [`crate::Store::builder`].
#[derive(Clone)]
pub struct StoreOptions {
    /// Store directory (metadata, lock, and the first tier unless tiers are given).
    pub dir: PathBuf,
    /// Tiers in order: the first takes writes, the next takes them when the first is full.
    /// Default: one tier in `dir`, domain detected, unbounded. Fixed at creation; on reopen
    /// only capacities given here replace the stored ones.
    pub tiers: Vec<TierSpec>,
    /// Size of each segment file. Default 64 MiB; 64 KiB ..= 2 GiB, a multiple of 4096.
    /// Larger values get a segment of their own. Fixed at creation; a new store on a small
    /// file system (less than 16 segments free, such as Docker's 64 MiB /dev/shm) gets the
    /// largest power of two that fits 16 times instead (`stats()` and `inspect` show it).
    pub segment_size_bytes: usize,
    /// Writer lanes: each has its own active segment, so up to this many threads append
    /// without meeting. Default: available cores; 1 ..= 256.
    pub lanes: usize,
    /// Key layout; `None` = the stored one, or the default DAQ layout for a new store. Giving
    /// one that differs from the stored layout is an error.
    pub layout: Option<KeyLayout>,
    /// Damage handling at open. Default `Strict`.
    pub recovery: RecoveryMode,
    /// Verify each record's checksum on every read. Default true.
    pub verify_on_read: bool,
    /// Create the store if the directory holds none. Default true. When false, opening a path
    /// that is not an existing store fails before anything is created (no directory, no LOCK
    /// file): [`Error::NoStoreDirectory`](crate::Error::NoStoreDirectory) if it does not exist,
    /// [`Error::NoStore`](crate::Error::NoStore) if it holds no metadata file. A file as the
    /// store path is [`Error::NotADirectory`](crate::Error::NotADirectory) either way.
    pub create_if_missing: bool,
    /// Media to use instead of the tier directories (tests: fault injection). One per tier.
    /// Hidden: a test hook taking the crate's internal I/O traits (`hotstore::testing`).
    #[doc(hidden)]
    pub media: Option<Vec<Arc<dyn Medium>>>,
    /// At open, create and pre-fault segment files for this many bytes (rounded up to whole
    /// segments, bounded by the first tier's capacity) so that writes never pay for page
    /// allocation: the store is a preallocated buffer from the start, as a DAQ buffer should
    /// be. Default 0 (files are prepared in the background as writers need them).
    pub preallocate_bytes: u64,
    /// Values at least this long are written to `block` tiers with direct I/O (their 4 KiB
    /// aligned interior bypasses the page cache; see `medium::direct`), where the file system
    /// takes O_DIRECT. Default [`DIRECT_IO_MIN_VALUE_BYTES`] (the crossover measured in
    /// docs/benchmarks.md); `usize::MAX` turns direct I/O off.
    pub direct_io_min_value_bytes: usize,
    /// Once a tier's records fill this fraction of its capacity, its oldest sealed segments
    /// move to the next tier down in the background (offload; reads and events work wherever a
    /// record lives). Default [`OFFLOAD_HIGH_WATER`]; `None` turns offload off. Only tiers with
    /// a capacity and a tier below them offload.
    pub offload_high_water: Option<f64>,
    /// How a `block` tier's new segment files are held in the page cache, which decides what
    /// each sync of small records writes. Default [`PageCache::SinglePages`] (right for the
    /// default, `Persisted`, writes); a store whose small writes are mostly `Memory` is faster
    /// with [`PageCache::LargeFolios`]. Files keep the choice they were created with.
    pub page_cache: PageCache,
}

/// How a `block` tier's new segment files are held in the page cache (see `medium::file`).
///
/// Small records are copied through a shared mapping, and a store there marks its whole
/// page-cache *folio* dirty: on file systems with large folios (ext4 on Linux 6.x) a sync after
/// a 100 B Persisted write wrote up to 2 MiB. Measured on this project's machine:
/// docs/benchmarks.md, "What a sync writes".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageCache {
    /// Single 4 KiB pages (4 KiB zero-fill writes; MADV_RANDOM, so faults never read ahead in
    /// large folios): a sync writes only the pages changed since the last one (16 KiB against
    /// 1036 KiB for a 12.8 KB write). Costs a `Memory` server about 10% on 100 B SETs (more
    /// folios to dirty and write back per sealed segment).
    #[default]
    SinglePages,
    /// Whatever the kernel chooses (1 MiB zero-fill writes, default readahead): less work per
    /// sealed segment, but a sync after a small write writes whole large folios.
    LargeFolios,
}

/// Default of [`StoreOptions::offload_high_water`]: at 80% a tier still has room for a burst
/// while its oldest data leaves.
pub const OFFLOAD_HIGH_WATER: f64 = 0.8;

/// Default of [`StoreOptions::direct_io_min_value_bytes`]: below it a buffered write plus the
/// group commit's write-back is as fast as a direct write (measured: docs/benchmarks.md).
pub const DIRECT_IO_MIN_VALUE_BYTES: usize = 256 << 10;

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("dir", &self.dir)
            .field("tiers", &self.tiers)
            .field("segment_size_bytes", &self.segment_size_bytes)
            .field("lanes", &self.lanes)
            .field("layout", &self.layout.as_ref().map(|l| l.to_string()))
            .field("recovery", &self.recovery)
            .field("verify_on_read", &self.verify_on_read)
            .field("direct_io_min_value_bytes", &self.direct_io_min_value_bytes)
            .field("offload_high_water", &self.offload_high_water)
            .field("page_cache", &self.page_cache)
            .finish()
    }
}

impl StoreOptions {
    /// Defaults for a store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreOptions {
            dir: dir.into(),
            tiers: Vec::new(),
            segment_size_bytes: 64 << 20,
            lanes: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .min(MAX_LANES),
            layout: None,
            recovery: RecoveryMode::Strict,
            verify_on_read: true,
            create_if_missing: true,
            media: None,
            preallocate_bytes: 0,
            direct_io_min_value_bytes: DIRECT_IO_MIN_VALUE_BYTES,
            offload_high_water: Some(OFFLOAD_HIGH_WATER),
            page_cache: PageCache::default(),
        }
    }

    /// Adds a tier.
    pub fn tier(mut self, tier: TierSpec) -> Self {
        self.tiers.push(tier);
        self
    }
    /// Sets the segment size.
    pub fn segment_size_bytes(mut self, bytes: usize) -> Self {
        self.segment_size_bytes = bytes;
        self
    }
    /// Sets the number of writer lanes.
    pub fn lanes(mut self, lanes: usize) -> Self {
        self.lanes = lanes;
        self
    }
    /// Sets the key layout.
    pub fn layout(mut self, layout: KeyLayout) -> Self {
        self.layout = Some(layout);
        self
    }
    /// Sets the recovery mode.
    pub fn recovery(mut self, mode: RecoveryMode) -> Self {
        self.recovery = mode;
        self
    }
    /// Turns checksum verification on reads on or off.
    pub fn verify_on_read(mut self, on: bool) -> Self {
        self.verify_on_read = on;
        self
    }
    /// Allows or forbids creating a new store (see [`StoreOptions::create_if_missing`]).
    pub fn create_if_missing(mut self, on: bool) -> Self {
        self.create_if_missing = on;
        self
    }
    /// Uses these media instead of directories (one per tier). Hidden: a test hook (fault
    /// injection) taking the crate's internal I/O traits (`hotstore::testing`).
    #[doc(hidden)]
    pub fn media(mut self, media: Vec<Arc<dyn Medium>>) -> Self {
        self.media = Some(media);
        self
    }
    /// Preallocates and pre-faults this many bytes of segments at open.
    pub fn preallocate_bytes(mut self, bytes: u64) -> Self {
        self.preallocate_bytes = bytes;
        self
    }
    /// Sets the offload high-water mark (fraction of a tier's capacity; `None`: no offload).
    pub fn offload_high_water(mut self, fraction: Option<f64>) -> Self {
        self.offload_high_water = fraction;
        self
    }
    /// Writes values of at least `bytes` with direct I/O on block tiers (`usize::MAX`: never).
    pub fn direct_io_min_value_bytes(mut self, bytes: usize) -> Self {
        self.direct_io_min_value_bytes = bytes;
        self
    }
    /// Sets how new `block`-tier segment files are held in the page cache.
    pub fn page_cache(mut self, page_cache: PageCache) -> Self {
        self.page_cache = page_cache;
        self
    }
    /// Opens (or creates) the store.
    pub fn open(self) -> Result<crate::Store> {
        crate::Store::open(self)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |name, reason: String| Err(Error::InvalidOption { name, reason });
        if self
            .offload_high_water
            .is_some_and(|f| !(f > 0.0 && f <= 1.0))
        {
            return Err(Error::InvalidOption {
                name: "offload_high_water",
                reason: format!(
                    "{:?}: a fraction of the tier's capacity, above 0 and at most 1",
                    self.offload_high_water
                ),
            });
        }
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&self.segment_size_bytes)
            || !self.segment_size_bytes.is_multiple_of(4096)
        {
            return bad(
                "segment_size_bytes",
                format!(
                    "{} is not a multiple of 4096 between 64 KiB and 2 GiB",
                    self.segment_size_bytes
                ),
            );
        }
        if !(1..=MAX_LANES).contains(&self.lanes) {
            return bad(
                "lanes",
                format!("{} is not between 1 and {MAX_LANES}", self.lanes),
            );
        }
        if self.tiers.len() > MAX_TIERS {
            return bad(
                "tiers",
                format!("{} tiers given, at most {MAX_TIERS}", self.tiers.len()),
            );
        }
        if let Some(m) = &self.media {
            if m.is_empty() || m.len() > MAX_TIERS {
                return bad(
                    "media",
                    format!("{} media given, 1 to {MAX_TIERS} needed", m.len()),
                );
            }
        }
        Ok(())
    }
}
