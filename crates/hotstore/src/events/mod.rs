//! Logical events: the lifecycle of the fragments that share an event prefix.
//!
//! ```text
//!  fragment ─▶ OPEN ──(expected count │ seal │ timeout: incomplete)──▶ READY ◀──────────┐
//!                                                                        │ next_event     │ lease expired,
//!                                                                        ▼                │ release, claim dropped
//!                                                                     CLAIMED ────────────┘
//!                                                                        │ ack
//!                                                    Remove: fragments deleted ◀┴▶ Keep: KEPT (stored, never offered)
//! ```
//!
//! What is durable: fragments (as written), `seal` (an event-mark record), `ack(Keep)` (an
//! event-mark record) and `ack(Remove)` (one event-removal record that deletes every fragment of
//! the event: a crash never leaves half an event). Claims and leases live in memory only: after
//! a crash every event not acknowledged is READY (or OPEN) again, so delivery is at-least-once.
//! Acknowledged events are remembered (as intervals, see [`acked`]) so a late fragment gets
//! [`crate::Error::LateFragment`] instead of starting the event again.
//!
//! Order: READY events are offered oldest-ready first: in the order they became READY; an event
//! that goes back to READY keeps its place. After a reopen, recovered READY events are offered
//! in event-id order, before any event that becomes READY later.
//!
//! Per-event state lives in the index shard of the event's fragments ([`EventEntry`]), under
//! the same lock as its keys, and so does that shard's READY queue: a fragment put takes no
//! lock but its shard's. Consumers take the oldest READY event across shards by reading one
//! atomic head per shard. The timers and the leases are global heaps touched once per event,
//! never per fragment.
//!
//! Paid per use: a store starts *untracked* (no event state at all, a put does no event work)
//! unless it holds event records, acknowledged events or a policy file. The first event call
//! (a claim, seal, acknowledgement, listing or policy change) builds the table from the index,
//! shard by shard under each shard's lock (see [`Events::track`]), and from then on every
//! fragment put keeps it current.

pub(crate) mod acked;
mod api;
mod claims;
mod group_api;
pub(crate) mod groups;
pub(crate) mod policy;
mod ready;
pub(crate) mod rebuild;
mod records;

pub use acked::MAX_ACKED_INTERVALS;
pub use api::{EventInterest, EventListener, NextEvent};
pub use claims::{Ack, Claim, ClaimToken};
pub use groups::{ConsumerInfo, GroupInfo, MAX_CONSUMERS, MAX_GROUPS, MAX_GROUP_NAME};
pub use policy::{EventPolicy, MAX_EXPECTED_FRAGMENTS, MAX_RUN_POLICIES};

use crate::index::{IndexKey, Loc, SHARDS};
use crate::key::KeyLayout;
use crate::segment::Segment;
use acked::AckedSet;
use groups::Groups;
use parking_lot::{Condvar, Mutex, RwLock};
use policy::Policies;
use ready::ReadyQueue;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Identifies an event: the event prefix of its fragment keys (for the default layout, 12
/// bytes: run u32 and event u64, big-endian).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(Box<[u8]>);

impl EventId {
    /// The event `event` of run `run` in the default key layout.
    pub fn new(run: u32, event: u64) -> Self {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&run.to_be_bytes());
        b[4..].copy_from_slice(&event.to_be_bytes());
        EventId(b.into())
    }

    /// An event id from its prefix bytes (any layout).
    pub fn from_prefix(prefix: &[u8]) -> Self {
        EventId(prefix.into())
    }

    /// The prefix bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// `(run, event)` for a 12-byte (default layout) id.
    pub fn run_event(&self) -> Option<(u32, u64)> {
        let b: &[u8; 12] = (*self.0).try_into().ok()?;
        Some((
            u32::from_be_bytes(b[..4].try_into().expect("a 4-byte range is a [u8; 4]")),
            u64::from_be_bytes(b[4..].try_into().expect("an 8-byte range is a [u8; 8]")),
        ))
    }
}

impl fmt::Display for EventId {
    /// `run/event` for default-layout ids, hex otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.run_event() {
            Some((r, e)) => write!(f, "{r}/{e}"),
            None => f.write_str(&hex(&self.0)),
        }
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({self})")
    }
}

/// Lifecycle state of an event (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventState {
    /// Fragments arriving.
    Open,
    /// Complete (or sealed, or timed out) and waiting for a consumer.
    Ready,
    /// Leased to one consumer.
    Claimed,
    /// Acknowledged with `Keep`: stored, never offered again.
    Kept,
    /// Delivered the maximum number of times without an acknowledgement (see
    /// [`crate::Store::set_max_deliveries`]): parked, not offered again; claimable by
    /// [`crate::Store::claim_event`].
    Poisoned,
}

/// One event as listed by [`crate::Store::events`].
#[derive(Debug, Clone, Serialize)]
pub struct EventInfo {
    /// The event.
    #[serde(serialize_with = "ser_event_id")]
    pub id: EventId,
    /// Its state.
    pub state: EventState,
    /// Made READY by its timeout before the expected fragments arrived.
    pub incomplete: bool,
    /// Sealed by its producer.
    pub sealed: bool,
    /// Fragments stored.
    pub fragments: u32,
    /// Bytes of fragment values stored.
    pub bytes: u64,
    /// The consumer holding the claim, when CLAIMED.
    pub claimed_by: Option<String>,
}

fn ser_event_id<S: serde::Serializer>(id: &EventId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&id.to_string())
}

/// One claim held now, as listed by [`crate::Store::pending`].
#[derive(Debug, Clone, Serialize)]
pub struct PendingClaim {
    /// The claim's token (what `ack` and `release` take).
    #[serde(serialize_with = "ser_token")]
    pub token: ClaimToken,
    /// The consumer holding it.
    pub consumer: String,
    /// How long it has been held.
    pub held: Duration,
    /// Time left on its lease.
    pub lease_left: Duration,
    /// Times the event was claimed since the store opened (this claim included; at most
    /// 255, counted in memory like leases: a restart starts again at 0).
    pub deliveries: u32,
}

fn ser_token<S: serde::Serializer>(t: &ClaimToken, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_string())
}

/// Counts of events by state, and lifecycle counters since open.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EventCounts {
    /// Events OPEN.
    pub open: u64,
    /// Events READY.
    pub ready: u64,
    /// Events CLAIMED.
    pub claimed: u64,
    /// Events KEPT.
    pub kept: u64,
    /// Events POISONED (parked after the maximum number of deliveries).
    pub poisoned: u64,
    /// READY or CLAIMED events flagged incomplete.
    pub incomplete: u64,
    /// Acknowledged events remembered, as intervals of ids (its memory cost); at most
    /// [`MAX_ACKED_INTERVALS`](crate::MAX_ACKED_INTERVALS).
    pub acked_intervals: u64,
    /// Intervals of acknowledged ids forgotten (the oldest, past the limit), since open: a
    /// late fragment of a forgotten event starts a new event instead of being refused.
    pub acked_forgotten_total: u64,
    /// Fragments refused because their event was already acknowledged (since open).
    pub late_fragments_total: u64,
    /// Events acknowledged with `Remove` (since open).
    pub removed_total: u64,
    /// Events acknowledged with `Keep` (since open).
    pub kept_total: u64,
    /// Claims that went back to READY because their lease expired (since open).
    pub leases_expired_total: u64,
    /// Claims given back (released or dropped) before their lease ended (since open).
    pub released_total: u64,
    /// Events that became READY by their timeout (since open).
    pub timed_out_total: u64,
    /// Entries in the READY queues: READY events plus entries gone stale (their event's
    /// fragments were removed) and not yet dropped. At most READY + max(1024, READY) per shard.
    pub ready_queued: u64,
    /// True once the store keeps event state. A store only used as a key-value store keeps
    /// none (its puts do no event work) and reports zero counts until the first event call.
    pub tracked: bool,
}

/// Where an event-mark record lives, for live accounting: a mark is a live record while its
/// event holds fragments.
#[derive(Clone)]
pub(crate) struct MarkLoc {
    pub(crate) seg: Arc<Segment>,
    pub(crate) rec_len: u64,
    pub(crate) kept: bool,
}

/// Where an event is in its lifecycle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    Open,
    Ready,
    Claimed,
    Kept,
    Poisoned,
}

/// Who holds a claim (boxed in the entry: only CLAIMED events have one).
pub(crate) struct Holder {
    pub(crate) claim: u64,
    pub(crate) consumer: Arc<str>,
    /// When it was claimed, and until when the lease holds.
    pub(crate) since: Instant,
    pub(crate) until: Instant,
}

/// An event's entry in its index shard: 40 bytes (asserted below), the parts only some
/// events have (a claim, a live mark record) boxed.
pub(crate) struct EventEntry {
    pub(crate) bytes: u64,
    /// Its place in READY order: the sequence number it got when it first became READY (kept
    /// while CLAIMED, so an event given back returns to its old place); 0 before.
    pub(crate) seq: u64,
    pub(crate) fragments: u32,
    pub(crate) state: State,
    pub(crate) incomplete: bool,
    pub(crate) sealed: bool,
    /// Times it was claimed since the store opened (saturating; in the padding before
    /// `holder`, so the entry stays 40 bytes).
    pub(crate) deliveries: u8,
    pub(crate) holder: Option<Box<Holder>>,
    pub(crate) mark: Option<Box<MarkLoc>>,
}

const _: () = assert!(std::mem::size_of::<EventEntry>() == 40);

impl EventEntry {
    /// A new entry with `fragments` fragments of `bytes` value bytes, OPEN.
    pub(crate) fn open(fragments: u32, bytes: u64) -> Self {
        EventEntry {
            bytes,
            seq: 0,
            fragments,
            state: State::Open,
            incomplete: false,
            sealed: false,
            deliveries: 0,
            holder: None,
            mark: None,
        }
    }

    /// True if claim `claim` holds this event.
    pub(crate) fn claimed_by(&self, claim: u64) -> bool {
        self.state == State::Claimed && self.holder.as_ref().is_some_and(|h| h.claim == claim)
    }

    pub(crate) fn public_state(&self) -> EventState {
        match self.state {
            State::Open => EventState::Open,
            State::Ready => EventState::Ready,
            State::Claimed => EventState::Claimed,
            State::Kept => EventState::Kept,
            State::Poisoned => EventState::Poisoned,
        }
    }

    pub(crate) fn info(&self, prefix: &[u8]) -> EventInfo {
        EventInfo {
            id: EventId::from_prefix(prefix),
            state: self.public_state(),
            incomplete: self.incomplete,
            sealed: self.sealed,
            fragments: self.fragments,
            bytes: self.bytes,
            claimed_by: match (&self.state, &self.holder) {
                (State::Claimed, Some(h)) => Some(h.consumer.to_string()),
                _ => None,
            },
        }
    }
}

/// One shard's event state, under the shard's lock: the event entries and the shard's READY
/// queue. Limits: at most one entry per event with live fragments (or a claim), and at most one
/// queue entry per READY event plus entries gone stale (claimed or removed), which are dropped
/// when they reach the head.
#[derive(Default)]
pub(crate) struct ShardEvents {
    /// False until the store tracks events ([`Events::track`]): puts skip all event work.
    pub(crate) tracked: bool,
    /// Event prefix → lifecycle state (ordered: DAQ event ids mostly grow, so inserts append
    /// at the right edge; a hash map measured no faster and larger). An event complete with
    /// its first fragment (the default policy) has no entry while it is READY and untouched:
    /// it is *implicit*, its queue entry is its state and its fragments are counted from the
    /// keys when it is claimed, sealed or listed (then it gets an entry). In a tracked shard,
    /// an event with fragments and no entry is an implicit READY event.
    pub(crate) entries: crate::index::BTree<IndexKey, EventEntry>,
    /// READY events of this shard by the store-wide sequence number they got when they first
    /// became READY.
    ready: ReadyQueue,
    /// Queue entries whose event left READY other than by being popped (its fragments were
    /// removed): dropped in one pass once they are half the queue.
    stale: usize,
    /// An upper bound on this shard's fragment keys: its largest key when tracking began,
    /// raised by every fragment put since (never lowered: a removal leaves it an upper bound).
    /// Keys sharing a prefix form one interval of the key order, so a new fragment key above
    /// the bound, whose bound lacks its prefix, is its event's only fragment: the DAQ case
    /// (event ids grow) is decided without a tree search.
    pub(crate) fragment_bound: Option<IndexKey>,
    /// This shard's share of the READY count: implicit events queued (+1) or gone with their
    /// last fragment (-1) here. The READY count is the store-wide counter plus every shard's
    /// share ([`Events::counts`] reads them under the shard locks it takes anyway), so a put
    /// of a new event adds to a field under the lock it holds, not to a shared atomic.
    implicit_ready: i64,
}

/// One shard's keys (what the implicit events are counted from).
pub(crate) type Keys = crate::index::BTree<IndexKey, Loc>;

/// The fragments of event `prefix` in a shard's keys, and their value bytes.
fn fragment_counts(keys: &Keys, prefix: &[u8], fragment_len: usize) -> (u32, u64) {
    let mut n = 0u32;
    let mut bytes = 0u64;
    for (k, loc) in keys
        .range(IndexKey::new(prefix)..)
        .take_while(|(k, _)| k.as_bytes().starts_with(prefix))
    {
        if k.as_bytes().len() == fragment_len {
            n += 1;
            bytes += u64::from(loc.value_len);
        }
    }
    (n, bytes)
}

/// True if event `prefix` has a fragment other than `key` (present) in a shard's keys. The DAQ
/// case first: `key` is the shard's largest key (event ids grow), so the key before it, found
/// by stepping back from the end without a comparison, tells.
fn has_other_fragment(keys: &Keys, prefix: &[u8], key: &[u8], fragment_len: usize) -> bool {
    let (last, before) = keys.last_two();
    if last.is_some_and(|(k, _)| k.as_bytes() == key) {
        match before {
            None => return false,
            Some((k, _)) if !k.as_bytes().starts_with(prefix) => return false,
            Some((k, _)) if k.as_bytes().len() == fragment_len => return true,
            Some(_) => {} // a key of another length between: look properly
        }
    }
    keys.range(IndexKey::new(prefix)..)
        .take_while(|(k, _)| k.as_bytes().starts_with(prefix))
        .any(|(k, _)| k.as_bytes().len() == fragment_len && k.as_bytes() != key)
}

/// The store's index: keys, and per shard the events whose fragments shard there.
pub(crate) type EventIndex = crate::index::Index<ShardEvents>;
/// One locked shard of [`EventIndex`].
pub(crate) type EventShardMap = crate::index::ShardMap<ShardEvents>;

/// Stale entries a shard's READY queue, and the timer and lease heaps, tolerate (beyond twice
/// the live ones, for the heaps) before they are compacted.
const STALE_SLACK: usize = 1024;

/// READY numbers per mark of the READY clock.
const CLOCK_EVERY: u64 = 1024;
/// Most marks the READY clock keeps.
const CLOCK_MARKS: usize = 4096;

/// Empties `heap`, keeps the entries `live` accepts (checked without the heap's lock) and puts
/// them back beside any pushed meanwhile.
fn retain_live<T: Ord>(heap: &Mutex<BinaryHeap<T>>, live: impl FnMut(&T) -> bool) {
    let old = std::mem::take(&mut *heap.lock());
    let kept: Vec<T> = old.into_iter().filter(live).collect();
    heap.lock().extend(kept);
}

/// No READY event in a shard (its head is `u64::MAX`).
const EMPTY_HEAD: u64 = u64::MAX;
/// Most deliveries an event's count holds (a byte per event), so the largest
/// [`crate::Store::set_max_deliveries`].
pub const MAX_DELIVERIES: u32 = u8::MAX as u32;

/// Longest consumer name, in bytes (names are remembered per claim and per group).
pub const MAX_CONSUMER_NAME: usize = 256;

/// Checks a claim's consumer name and lease.
pub(crate) fn check_claim(consumer: &str, lease: Duration) -> crate::Result<()> {
    // Fix (found in review): names had no limit; 20 clients naming themselves with 50 MiB
    // each held a gigabyte in a group's consumer map.
    if consumer.len() > MAX_CONSUMER_NAME {
        return Err(crate::Error::InvalidArgument(format!(
            "a consumer name is at most {MAX_CONSUMER_NAME} bytes, not {}",
            consumer.len()
        )));
    }
    if lease.is_zero() {
        return Err(crate::Error::InvalidArgument(
            "a lease must be longer than 0".into(),
        ));
    }
    Ok(())
}
/// How long a consumer waiting for work polls before it parks (see `Events::wait_while`):
/// several events' time at the rates a readout reaches, a negligible share of an idle
/// consumer's CPU.
/// Most listeners a store calls when an event may have become claimable.
pub const MAX_EVENT_LISTENERS: usize = 16;

/// A function called when an event may have become claimable.
pub(crate) type Listener = Arc<dyn Fn() + Send + Sync>;

const SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);

#[derive(Default)]
struct Counters {
    open: AtomicU64,
    ready: AtomicU64,
    claimed: AtomicU64,
    kept: AtomicU64,
    poisoned: AtomicU64,
    incomplete: AtomicU64,
    late: AtomicU64,
    removed: AtomicU64,
    kept_total: AtomicU64,
    expired: AtomicU64,
    released: AtomicU64,
    timed_out: AtomicU64,
    acked_forgotten: AtomicU64,
}

/// Store-wide event state: policies, the READY queue, timers, leases, acknowledged ids.
pub(crate) struct Events {
    pub(crate) prefix_len: usize,
    pub(crate) fragment_len: usize,
    /// Width of the layout's first field (the run) if it fits a u64.
    run_width: Option<usize>,
    pub(crate) policies: RwLock<Policies>,
    /// Serialises policy changes (each replaces the whole file).
    pub(crate) policy_change: Mutex<()>,
    /// The default policy's fragment count, and whether any run overrides it: read without a
    /// lock once per event (the common store has no overrides).
    default_expected: AtomicU32,
    run_overrides: AtomicBool,
    /// True once every shard tracks events.
    tracked: AtomicBool,
    tracking: Mutex<()>,
    /// The store's lsn sequence, which READY numbers are taken from (store-wide: oldest READY
    /// first across shards). A put that makes its event READY gives it the lsn of its record
    /// (taken under the shard lock already); other transitions take a number of their own.
    lsns: Arc<AtomicU64>,
    /// (READY number, when it was handed out) for about one number in [`CLOCK_EVERY`]: the
    /// age of the oldest READY event without reading the clock per event. At most
    /// [`CLOCK_MARKS`] marks (the oldest dropped first), in increasing number order.
    ready_clock: Mutex<std::collections::VecDeque<(u64, Instant)>>,
    /// The READY number from which the next clock mark is due (read without the lock).
    next_clock_mark: AtomicU64,
    /// The smallest READY sequence number queued in each shard ([`EMPTY_HEAD`]: none), so a
    /// consumer finds the oldest without locking every shard.
    ready_heads: Box<[AtomicU64]>,
    /// Consumers waiting for a READY event, and where they wait.
    waiters: AtomicUsize,
    /// Called, beside the condition variable, when an event may have become claimable while
    /// someone waits ([`crate::Store::add_event_listener`]).
    listeners: RwLock<Vec<(u64, Listener)>>,
    next_listener: AtomicU64,
    ready_wait: Mutex<()>,
    pub(crate) ready_cv: Condvar,
    /// Deadlines of OPEN events with a timeout.
    timers: Mutex<BinaryHeap<Reverse<(Instant, IndexKey)>>>,
    /// Lease ends of CLAIMED events.
    leases: Mutex<BinaryHeap<Reverse<(Instant, u64, IndexKey)>>>,
    /// Read on every new event (late-fragment check), written per acknowledgement.
    pub(crate) acked: RwLock<AckedSet>,
    /// False while `acked` is empty (a store nobody acknowledged in): the late-fragment check
    /// then takes no lock. Set before any insert.
    any_acked: AtomicBool,
    /// Claim numbers are not stored, so each open starts them at its wall-clock time in
    /// nanoseconds: a token from before a crash can never name a claim made after the
    /// restart (counting from 1 again, a consumer still holding an old token could
    /// acknowledge another consumer's new claim of the same event).
    next_claim: AtomicU64,
    /// Deliveries after which an event that comes back unacknowledged is parked (0: never).
    pub(crate) max_deliveries: AtomicU32,
    counters: Counters,
    /// Consumer groups; while there are any, READY events go to their log, not to the
    /// shards' queues.
    pub(crate) groups: Groups,
}

impl Events {
    pub(crate) fn new(
        layout: &KeyLayout,
        lsns: Arc<AtomicU64>,
        policies: Policies,
        mut acked: AckedSet,
        groups: Groups,
    ) -> Self {
        let forgotten = acked.forget_lowest(acked::MAX_ACKED_INTERVALS);
        let first = layout.fields()[0].width_bytes;
        let events = Events {
            prefix_len: layout.event_prefix_len(),
            fragment_len: layout.key_len(),
            run_width: (first <= 8 && layout.event_fields() >= 1).then_some(first),
            policies: RwLock::new(Policies::default()),
            policy_change: Mutex::new(()),
            default_expected: AtomicU32::new(0),
            run_overrides: AtomicBool::new(false),
            tracked: AtomicBool::new(false),
            tracking: Mutex::new(()),
            lsns,
            ready_clock: Mutex::new(std::collections::VecDeque::new()),
            next_clock_mark: AtomicU64::new(0),
            ready_heads: (0..SHARDS).map(|_| AtomicU64::new(EMPTY_HEAD)).collect(),
            waiters: AtomicUsize::new(0),
            listeners: RwLock::new(Vec::new()),
            next_listener: AtomicU64::new(0),
            ready_wait: Mutex::new(()),
            ready_cv: Condvar::new(),
            timers: Mutex::new(BinaryHeap::new()),
            leases: Mutex::new(BinaryHeap::new()),
            any_acked: AtomicBool::new(acked.intervals() > 0),
            acked: RwLock::new(acked),
            next_claim: AtomicU64::new(first_claim_number()),
            max_deliveries: AtomicU32::new(0),
            counters: Counters::default(),
            groups,
        };
        events
            .counters
            .acked_forgotten
            .store(forgotten as u64, Ordering::Relaxed);
        events.set_policies(policies);
        events
    }

    /// Replaces the policies (and the lock-free copy of what the put path reads).
    pub(crate) fn set_policies(&self, policies: Policies) {
        let mut p = self.policies.write();
        self.default_expected
            .store(policies.default.expected_fragments, Ordering::Relaxed);
        self.run_overrides
            .store(!policies.runs.is_empty(), Ordering::Relaxed);
        *p = policies;
    }

    /// Remembers an acknowledged event (refusing its late fragments from now on). Past
    /// [`acked::MAX_ACKED_INTERVALS`] the oldest quarter is forgotten at once (amortised).
    pub(crate) fn insert_acked(&self, prefix: &[u8]) {
        // Before the insert: a put that sees the flag clear ran before the acknowledgement
        // (which holds the event's shard lock, as the put does).
        self.any_acked.store(true, Ordering::Release);
        let mut acked = self.acked.write();
        if acked.insert(prefix) && acked.intervals() > acked::MAX_ACKED_INTERVALS {
            let forgotten = acked.forget_lowest(acked::MAX_ACKED_INTERVALS / 4 * 3);
            self.counters
                .acked_forgotten
                .fetch_add(forgotten as u64, Ordering::Relaxed);
        }
    }

    /// True if the event was acknowledged with `Remove` (its id is in the acknowledged set).
    pub(crate) fn is_acked(&self, prefix: &[u8]) -> bool {
        self.any_acked.load(Ordering::Acquire) && self.acked.read().contains(prefix)
    }

    /// True once the store keeps event state.
    pub(crate) fn is_tracked(&self) -> bool {
        self.tracked.load(Ordering::Acquire)
    }

    /// The run number of an event prefix (the layout's first field), if it has one.
    pub(crate) fn run_of(&self, prefix: &[u8]) -> Option<u64> {
        let w = self.run_width?;
        let mut b = [0u8; 8];
        b[8 - w..].copy_from_slice(&prefix[..w]);
        Some(u64::from_be_bytes(b))
    }

    pub(crate) fn policy_for(&self, prefix: &[u8]) -> EventPolicy {
        self.policies.read().for_run(self.run_of(prefix))
    }

    /// The fragment count that completes event `prefix`, without a lock unless some run has
    /// its own policy.
    fn expected_for(&self, prefix: &[u8]) -> u32 {
        if self.run_overrides.load(Ordering::Relaxed) {
            self.policy_for(prefix).expected_fragments
        } else {
            self.default_expected.load(Ordering::Relaxed)
        }
    }

    /// The incomplete-event timeout of event `prefix`, without a lock unless some run has its
    /// own policy or a timeout is set.
    fn timeout_for(&self, prefix: &[u8]) -> Option<Duration> {
        self.policy_for(prefix).timeout()
    }

    pub(crate) fn is_fragment(&self, key: &[u8]) -> bool {
        key.len() == self.fragment_len
    }

    /// Checks, under the shard lock, that a put of fragment `key` may be published: refuses a
    /// fragment whose event was acknowledged. `probe` is the key's event prefix as an index key.
    pub(crate) fn admit(
        &self,
        shard: &ShardEvents,
        key: &[u8],
        probe: &IndexKey,
    ) -> crate::Result<()> {
        let prefix = &key[..self.prefix_len];
        let late = match shard.entries.get(probe) {
            Some(e) => matches!(e.state, State::Kept),
            None => self.any_acked.load(Ordering::Acquire) && self.acked.read().contains(prefix),
        };
        if late {
            self.counters.late.fetch_add(1, Ordering::Relaxed);
            return Err(crate::Error::LateFragment {
                event: EventId::from_prefix(prefix).to_string(),
                key: hex(key),
            });
        }
        Ok(())
    }

    /// Accounts a published put of fragment `key` (`old`: the record it replaced; `lsn`: the
    /// put's, which becomes the event's READY number if the put completes it). One map
    /// lookup (with the prefix as an index key: compared as machine words, no `memcmp`), the
    /// policy read once per event, and for a new event one insert and at most one push.
    #[allow(
        clippy::too_many_arguments,
        reason = "the shard's two halves and the record, kept apart to borrow them separately"
    )]
    pub(crate) fn on_put(
        &self,
        keys: &Keys,
        shard: &mut ShardEvents,
        shard_no: usize,
        key: &[u8],
        probe: IndexKey,
        value_len: usize,
        old: Option<&Loc>,
        lsn: u64,
    ) {
        let prefix = &key[..self.prefix_len];
        let ShardEvents {
            entries,
            ready,
            fragment_bound,
            implicit_ready,
            ..
        } = shard;
        // Compared as index keys (machine words), not bytes.
        let key_ik = IndexKey::new(key);
        let above_bound = fragment_bound.as_ref().is_none_or(|b| *b < key_ik);
        // Only fragments of this event can lie between the bound and `key` if the bound has
        // its prefix; otherwise there are none (see `ShardEvents::fragment_bound`).
        let alone_above = above_bound
            && fragment_bound
                .as_ref()
                .is_none_or(|b| !b.starts_with(&probe));
        if above_bound {
            *fragment_bound = Some(key_ik);
        }
        let entry = match entries.get_mut(&probe) {
            Some(e) => e,
            None => {
                let expected = self.expected_for(prefix);
                // Fragments already there (the key is in `keys` by now): an implicit READY
                // event. Complete on one fragment it stays implicit; under a policy changed
                // since, it gets its entry (READY, counted already).
                let known = old.is_some()
                    || (!alone_above && has_other_fragment(keys, prefix, key, self.fragment_len));
                if known {
                    if expected != 1 {
                        let (n, bytes) = fragment_counts(keys, prefix, self.fragment_len);
                        let mut e = EventEntry::open(n, bytes);
                        e.state = State::Ready; // seq 0: its queue entry, whatever its number
                        entries.insert(probe, e);
                    }
                    return;
                }
                if expected == 1 {
                    // Complete with its first fragment (the default): READY with no entry.
                    *implicit_ready += 1;
                    self.mark_clock(lsn);
                    self.queue(ready, shard_no, lsn, probe);
                    return;
                }
                if expected == 0 || expected > 1 {
                    if let Some(t) = self.timeout_for(prefix) {
                        self.timers
                            .lock()
                            .push(Reverse((crate::clock::from_now(t), probe.clone())));
                    }
                }
                let entry = EventEntry::open(1, value_len as u64);
                self.enter_state(&entry);
                entries.insert(probe, entry);
                return;
            }
        };
        match old {
            None => entry.fragments += 1,
            Some(o) => entry.bytes -= u64::from(o.value_len).min(entry.bytes),
        }
        entry.bytes += value_len as u64;
        if matches!(entry.state, State::Open) {
            let expected = self.expected_for(prefix);
            if expected > 0 && entry.fragments >= expected {
                if entry.seq == 0 {
                    entry.seq = lsn;
                    self.mark_clock(lsn);
                }
                self.make_ready(ready, shard_no, entry, prefix, false);
            }
        }
    }

    /// Accounts the removal of fragment `key` (whose record was `old`). Returns the event's
    /// mark when the event is gone with it (the caller marks that record dead).
    pub(crate) fn on_remove(
        &self,
        keys: &Keys,
        shard: &mut ShardEvents,
        key: &[u8],
        old: &Loc,
    ) -> Option<MarkLoc> {
        let prefix = &key[..self.prefix_len];
        let probe = IndexKey::new(prefix);
        let Some(entry) = shard.entries.get_mut(&probe) else {
            // An implicit READY event: gone with its last fragment.
            if fragment_counts(keys, prefix, self.fragment_len).0 == 0 {
                shard.implicit_ready -= 1;
                self.one_stale(keys, shard);
                self.groups.forget(&probe);
            }
            return None;
        };
        entry.fragments = entry.fragments.saturating_sub(1);
        entry.bytes -= u64::from(old.value_len).min(entry.bytes);
        // A claimed event stays until its claim settles (the consumer may still ack it).
        if entry.fragments > 0 || entry.state == State::Claimed {
            return None;
        }
        let entry = shard.entries.remove(&probe)?;
        self.leave_state(&entry);
        if entry.state == State::Ready {
            self.one_stale(keys, shard);
            self.groups.forget(&probe);
        }
        entry.mark.map(|m| *m)
    }

    /// A READY event left the queue's view (its fragments were removed): its queue entry is
    /// stale now. A store nobody claims from would keep it forever: compact once the stale
    /// entries are half the queue (amortised O(1) per removal).
    fn one_stale(&self, keys: &Keys, shard: &mut ShardEvents) {
        shard.stale += 1;
        if shard.stale > STALE_SLACK && shard.stale * 2 > shard.ready.len() {
            let entries = &shard.entries;
            let flen = self.fragment_len;
            shard.ready.retain(|seq, p| match entries.get(p) {
                Some(e) => e.state == State::Ready && (e.seq == seq || e.seq == 0),
                None => fragment_counts(keys, &p.as_bytes(), flen).0 > 0,
            });
            shard.stale = 0;
        }
    }

    /// Gives an implicit READY event of a tracked shard its entry (before a seal or an
    /// acknowledgement reads it): READY, counted already, fragments counted from the keys.
    pub(crate) fn materialize(&self, keys: &Keys, shard: &mut ShardEvents, prefix: &[u8]) {
        if !shard.tracked {
            return;
        }
        let probe = IndexKey::new(prefix);
        if shard.entries.contains_key(&probe) {
            return;
        }
        let (n, bytes) = fragment_counts(keys, prefix, self.fragment_len);
        if n > 0 {
            let mut e = EventEntry::open(n, bytes);
            e.state = State::Ready; // seq 0: its queue entry, whatever its number
            shard.entries.insert(probe, e);
        }
    }

    /// What a listing shows of event `prefix` in a shard: its entry, or, implicit, a READY
    /// event with the fragments the keys hold.
    pub(crate) fn info_in(
        &self,
        keys: &Keys,
        shard: &ShardEvents,
        prefix: &[u8],
    ) -> Option<EventInfo> {
        if let Some(e) = shard.entries.get(&IndexKey::new(prefix)) {
            return Some(e.info(prefix));
        }
        if !shard.tracked {
            return None;
        }
        let (n, bytes) = fragment_counts(keys, prefix, self.fragment_len);
        (n > 0).then(|| {
            let mut e = EventEntry::open(n, bytes);
            e.state = State::Ready;
            e.info(prefix)
        })
    }

    /// OPEN → READY (or back to READY, keeping `seq`), in shard `shard_no`'s queue.
    pub(crate) fn make_ready(
        &self,
        ready: &mut ReadyQueue,
        shard_no: usize,
        entry: &mut EventEntry,
        prefix: &[u8],
        incomplete: bool,
    ) {
        if matches!(entry.state, State::Ready | State::Kept | State::Poisoned) {
            return;
        }
        self.leave_state(entry);
        self.push_ready(ready, shard_no, entry, prefix, incomplete);
    }

    /// A claimed event that came back without an acknowledgement (lease expired, released):
    /// READY again in its old place, or parked POISONED once it was delivered the maximum
    /// number of times (an event that makes every consumer fail is not offered forever).
    pub(crate) fn give_back(
        &self,
        ready: &mut ReadyQueue,
        shard_no: usize,
        entry: &mut EventEntry,
        prefix: &[u8],
    ) {
        let max = self.max_deliveries.load(Ordering::Relaxed);
        if max > 0 && u32::from(entry.deliveries) >= max {
            self.leave_state(entry);
            entry.holder = None;
            entry.state = State::Poisoned;
            self.enter_state(entry);
        } else {
            self.make_ready(ready, shard_no, entry, prefix, false);
        }
    }

    /// Puts an entry that is counted in no state (new, or just left its state) into READY.
    fn push_ready(
        &self,
        ready: &mut ReadyQueue,
        shard_no: usize,
        entry: &mut EventEntry,
        prefix: &[u8],
        incomplete: bool,
    ) {
        if entry.seq == 0 {
            entry.seq = self.ready_number();
        }
        let seq = entry.seq;
        entry.holder = None;
        entry.incomplete |= incomplete;
        entry.state = State::Ready;
        self.enter_state(entry);
        self.queue(ready, shard_no, seq, IndexKey::new(prefix));
    }

    /// Offers READY event `prefix` (number `seq`): to the groups' log if the store has groups,
    /// else in its shard's queue.
    fn queue(&self, ready: &mut ReadyQueue, shard_no: usize, seq: u64, prefix: IndexKey) {
        if self.groups.active() {
            self.groups.append(seq, &prefix);
        } else {
            if ready.push(seq, prefix) {
                self.publish_head(ready, shard_no);
            }
        }
        self.notify_waiters();
    }

    /// Puts READY event `prefix` back in its shard's queue under its number `seq` (the
    /// groups' log returning to the default queue).
    pub(crate) fn requeue(
        &self,
        shard: &mut ShardEvents,
        shard_no: usize,
        seq: u64,
        prefix: IndexKey,
    ) {
        if shard.ready.push(seq, prefix) {
            self.publish_head(&shard.ready, shard_no);
        }
    }

    /// A new READY number (from the lsn sequence) for a transition that is not a put.
    fn ready_number(&self) -> u64 {
        let seq = self.lsns.fetch_add(1, Ordering::Relaxed);
        self.mark_clock(seq);
        seq
    }

    /// Marks READY number `seq` with the time if [`CLOCK_EVERY`] numbers passed since the
    /// last mark: one relaxed load per READY event, the lock about once per
    /// [`CLOCK_EVERY`]. Marks stay in number order (checked again under the lock).
    fn mark_clock(&self, seq: u64) {
        if seq < self.next_clock_mark.load(Ordering::Relaxed) {
            return;
        }
        let mut clock = self.ready_clock.lock();
        if seq < self.next_clock_mark.load(Ordering::Relaxed) {
            return;
        }
        if clock.len() == CLOCK_MARKS {
            clock.pop_front();
        }
        clock.push_back((seq, Instant::now()));
        self.next_clock_mark
            .store(seq + CLOCK_EVERY, Ordering::Relaxed);
    }

    /// How long the oldest event READY in the default queue has waited: an upper bound,
    /// within [`CLOCK_EVERY`] events of READY order (the time of the clock mark before it;
    /// a lower bound if that mark was dropped, [`CLOCK_MARKS`] marks later).
    pub(crate) fn oldest_ready_age(&self) -> Option<Duration> {
        let no = self.oldest_ready_shard()?;
        let head = self.ready_heads[no].load(Ordering::SeqCst);
        let mut clock = self.ready_clock.lock();
        // Marks before the one at or below the head are of events no longer READY.
        while clock.len() > 1 && clock[1].0 <= head {
            clock.pop_front();
        }
        // Its mark, or (marks dropped past the limit) the oldest kept: then a lower bound.
        let (_, at) = clock.front()?;
        Some(at.elapsed())
    }

    /// Events CLAIMED through the default queue now.
    pub(crate) fn claimed_now(&self) -> u64 {
        self.counters.claimed.load(Ordering::Relaxed)
    }

    /// A new claim number (claims of groups: their leases are the group's).
    pub(crate) fn claim_number(&self) -> u64 {
        self.next_claim.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits up to `until` while `idle()` (checked once registered as a waiter, so a
    /// notification after it is not missed).
    ///
    /// It polls for up to [`SPIN_BEFORE_PARK`] first, unregistered: a producer finds no
    /// waiter and makes no wake-up call. Fix: a collector that kept up parked after every
    /// event, and the readout paid a futex wake (a cross-CPU interrupt here) for each one,
    /// 6% of its time with 10 KiB fragments.
    pub(crate) fn wait_while(&self, until: Instant, idle: impl Fn() -> bool) {
        let spin_end = Instant::now() + SPIN_BEFORE_PARK;
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if !idle() {
                return;
            }
            let now = Instant::now();
            if now >= spin_end || now >= until {
                break;
            }
            std::thread::yield_now();
        }
        let mut g = self.ready_wait.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        if idle() {
            self.ready_cv.wait_until(&mut g, until);
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes waiting consumers, if any. SeqCst against the waiter's increment: either it sees
    /// the new head or we see it waiting.
    pub(crate) fn notify_waiters(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            {
                let _g = self.ready_wait.lock();
                self.ready_cv.notify_all();
            }
            for (_, listener) in self.listeners.read().iter() {
                listener();
            }
        }
    }

    /// Adds a listener (see [`crate::Store::add_event_listener`]), at most
    /// [`MAX_EVENT_LISTENERS`]; returns its number.
    pub(crate) fn add_listener(&self, listener: Listener) -> crate::Result<u64> {
        let mut l = self.listeners.write();
        if l.len() >= MAX_EVENT_LISTENERS {
            return Err(crate::Error::InvalidArgument(format!(
                "the store has {MAX_EVENT_LISTENERS} event listeners already, the most it calls"
            )));
        }
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        l.push((id, listener));
        Ok(id)
    }

    /// Removes listener number `id`.
    pub(crate) fn remove_listener(&self, id: u64) {
        self.listeners.write().retain(|(i, _)| *i != id);
    }

    /// Counts one more waiter that waits its own way ([`crate::EventInterest`]).
    pub(crate) fn add_waiter(&self) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
    }

    /// Ends an [`Events::add_waiter`].
    pub(crate) fn remove_waiter(&self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Publishes the smallest sequence number queued in shard `shard_no`.
    fn publish_head(&self, ready: &ReadyQueue, shard_no: usize) {
        let head = ready.head().unwrap_or(EMPTY_HEAD);
        let slot = &self.ready_heads[shard_no];
        if slot.load(Ordering::Relaxed) != head {
            slot.store(head, Ordering::SeqCst);
        }
    }

    /// The shard whose READY queue has the oldest head, if any queue is non-empty.
    pub(crate) fn oldest_ready_shard(&self) -> Option<usize> {
        let (shard, head) = self
            .ready_heads
            .iter()
            .enumerate()
            .map(|(i, h)| (i, h.load(Ordering::SeqCst)))
            .min_by_key(|(_, h)| *h)?;
        (head != EMPTY_HEAD).then_some(shard)
    }

    /// Pops shard `shard_no`'s oldest READY event that is still READY (stale queue entries
    /// are dropped on the way), with its entry.
    pub(crate) fn pop_ready<'s>(
        &self,
        keys: &Keys,
        shard: &'s mut ShardEvents,
        shard_no: usize,
    ) -> Option<(IndexKey, &'s mut EventEntry)> {
        let ShardEvents { entries, ready, .. } = shard;
        let mut found = None;
        while let Some((seq, prefix)) = ready.pop() {
            match entries.get_mut(&prefix) {
                Some(e) if e.state == State::Ready && (e.seq == seq || e.seq == 0) => {
                    e.seq = seq;
                    found = Some(prefix);
                    break;
                }
                Some(_) => {} // stale: the event moved on since it was queued
                None => {
                    // Implicit: READY if it still has fragments (counted when it was queued).
                    let (n, bytes) = fragment_counts(keys, &prefix.as_bytes(), self.fragment_len);
                    if n > 0 {
                        let mut e = EventEntry::open(n, bytes);
                        e.state = State::Ready;
                        e.seq = seq;
                        entries.insert(prefix.clone(), e);
                        found = Some(prefix);
                        break;
                    }
                }
            }
        }
        self.publish_head(ready, shard_no);
        let prefix = found?;
        let entry = entries.get_mut(&prefix)?;
        Some((prefix, entry))
    }

    /// Waits up to `until` for an event to become READY (or for a notification).
    pub(crate) fn wait_ready(&self, until: Instant) {
        self.wait_while(until, || self.oldest_ready_shard().is_none());
    }

    /// The count of entries in `entry`'s state.
    fn state_counter(&self, entry: &EventEntry) -> &AtomicU64 {
        match entry.state {
            State::Open => &self.counters.open,
            State::Ready => &self.counters.ready,
            State::Claimed => &self.counters.claimed,
            State::Kept => &self.counters.kept,
            State::Poisoned => &self.counters.poisoned,
        }
    }

    /// Counters for an entry leaving the table (or its state).
    pub(crate) fn leave_state(&self, entry: &EventEntry) {
        self.state_counter(entry).fetch_sub(1, Ordering::Relaxed);
        if entry.incomplete && !matches!(entry.state, State::Kept) {
            self.counters.incomplete.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Counters for an entry entering the table (or its state): the mirror of `leave_state`.
    pub(crate) fn enter_state(&self, entry: &EventEntry) {
        self.state_counter(entry).fetch_add(1, Ordering::Relaxed);
        if entry.incomplete && !matches!(entry.state, State::Kept) {
            self.counters.incomplete.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Pops the timers and leases that are due (each checked against its event under the
    /// event's shard lock) and returns the earliest deadline still pending.
    pub(crate) fn sweep(&self, index: &EventIndex, now: Instant) -> Option<Instant> {
        loop {
            let due = {
                let mut t = self.timers.lock();
                match t.peek() {
                    Some(Reverse((at, _))) if *at <= now => t.pop().map(|Reverse((_, k))| k),
                    _ => None,
                }
            };
            let Some(prefix) = due else { break };
            let no = index.event_shard_no(&prefix.as_bytes());
            let mut shard = index.shards()[no].write();
            let ShardEvents { entries, ready, .. } = &mut shard.events;
            if let Some(e) = entries.get_mut(&prefix) {
                if matches!(e.state, State::Open) {
                    self.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                    self.make_ready(ready, no, e, &prefix.as_bytes(), true);
                }
            }
        }
        loop {
            let due = {
                let mut l = self.leases.lock();
                match l.peek() {
                    Some(Reverse((at, _, _))) if *at <= now => {
                        l.pop().map(|Reverse((_, c, k))| (c, k))
                    }
                    _ => None,
                }
            };
            let Some((claim, prefix)) = due else { break };
            let no = index.event_shard_no(&prefix.as_bytes());
            let mut shard = index.shards()[no].write();
            let ShardEvents { entries, ready, .. } = &mut shard.events;
            if let Some(e) = entries.get_mut(&prefix) {
                if e.claimed_by(claim) {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    self.give_back(ready, no, e, &prefix.as_bytes());
                }
            }
        }
        let (t, timers) = {
            let h = self.timers.lock();
            (h.peek().map(|Reverse((at, _))| *at), h.len())
        };
        let (l, leases) = {
            let h = self.leases.lock();
            (h.peek().map(|Reverse((at, _, _))| *at), h.len())
        };
        self.drop_stale(index, timers, leases);
        match (t, l) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drops the timers of events no longer OPEN and the leases of claims already settled,
    /// once they outnumber the live ones by [`STALE_SLACK`] and twice over (so the work is
    /// amortised over the pushes that made them). Fix (found in review): an acknowledged or
    /// released claim left its lease in the heap until the lease ran out, and a completed or
    /// removed event its timer until the timeout: with hour-long leases, a million claims
    /// acknowledged at once held 48 MB for nothing. Each entry is checked under its shard's
    /// lock, taken alone; entries pushed meanwhile go to the emptied heap and are kept.
    /// `timers` and `leases`: the heaps' lengths, read by the caller.
    fn drop_stale(&self, index: &EventIndex, timers: usize, leases: usize) {
        let too_many = |len: usize, live: &AtomicU64| {
            len > 2 * live.load(Ordering::Relaxed) as usize + STALE_SLACK
        };
        // Whether `prefix`'s entry passes `test`, under its shard's lock.
        let entry_is = |prefix: &IndexKey, test: &dyn Fn(&EventEntry) -> bool| {
            let no = index.event_shard_no(&prefix.as_bytes());
            let shard = index.shards()[no].read();
            shard.events.entries.get(prefix).is_some_and(test)
        };
        if too_many(timers, &self.counters.open) {
            retain_live(&self.timers, |Reverse((_, prefix))| {
                entry_is(prefix, &|e| matches!(e.state, State::Open))
            });
        }
        if too_many(leases, &self.counters.claimed) {
            retain_live(&self.leases, |Reverse((_, claim, prefix))| {
                entry_is(prefix, &|e| e.claimed_by(*claim))
            });
        }
    }

    pub(crate) fn add_timers(&self, timers: Vec<Reverse<(Instant, IndexKey)>>) {
        self.timers.lock().extend(timers);
    }

    pub(crate) fn count_removed(&self) {
        self.counters.removed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_kept(&self) {
        self.counters.kept_total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_released(&self) {
        self.counters.released.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn new_claim(&self, prefix: &[u8], lease: Duration) -> u64 {
        let claim = self.next_claim.fetch_add(1, Ordering::Relaxed);
        self.leases.lock().push(Reverse((
            crate::clock::from_now(lease),
            claim,
            IndexKey::new(prefix),
        )));
        claim
    }

    pub(crate) fn counts(&self, index: &EventIndex) -> EventCounts {
        let mut ready_queued = 0u64;
        let mut implicit_ready = 0i64;
        for s in index.shards() {
            let s = s.read();
            ready_queued += s.events.ready.len() as u64;
            implicit_ready += s.events.implicit_ready;
        }
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        // The counter and the shards' shares are read one after another while events move:
        // a moment's skew, never below zero.
        let ready = (g(&c.ready) as i64).saturating_add(implicit_ready).max(0) as u64;
        EventCounts {
            open: g(&c.open),
            ready,
            claimed: g(&c.claimed),
            kept: g(&c.kept),
            poisoned: g(&c.poisoned),
            incomplete: g(&c.incomplete),
            acked_intervals: self.acked.read().intervals() as u64,
            late_fragments_total: g(&c.late),
            acked_forgotten_total: g(&c.acked_forgotten),
            removed_total: g(&c.removed),
            kept_total: g(&c.kept_total),
            leases_expired_total: g(&c.expired),
            released_total: g(&c.released),
            timed_out_total: g(&c.timed_out),
            ready_queued,
            tracked: self.is_tracked(),
        }
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Bytes of a hex string; `None` if it is not hex of whole bytes.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

/// The first claim number of this open (see `Events::next_claim`).
fn first_claim_number() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        .max(1)
}
