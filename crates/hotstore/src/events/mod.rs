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
//! the same lock as its keys; the READY queue, the timers and the leases are global heaps
//! touched once per event, never per fragment.

pub(crate) mod acked;
mod api;
mod claims;
pub(crate) mod policy;
pub(crate) mod rebuild;
mod records;

pub use claims::{Ack, Claim, ClaimToken};
pub use policy::{EventPolicy, MAX_EXPECTED_FRAGMENTS};

use crate::index::{IndexKey, Loc, ShardMap};
use crate::key::KeyLayout;
use crate::segment::Segment;
use acked::AckedSet;
use parking_lot::{Condvar, Mutex, RwLock};
use policy::Policies;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
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
            u32::from_be_bytes(b[..4].try_into().expect("4 bytes")),
            u64::from_be_bytes(b[4..].try_into().expect("8 bytes")),
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
    /// READY or CLAIMED events flagged incomplete.
    pub incomplete: u64,
    /// Acknowledged events remembered, as intervals of ids (its memory cost).
    pub acked_intervals: u64,
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
}

/// Where an event-mark record lives, for live accounting: a mark is a live record while its
/// event holds fragments.
#[derive(Clone)]
pub(crate) struct MarkLoc {
    pub(crate) seg: Arc<Segment>,
    pub(crate) rec_len: u64,
    pub(crate) kept: bool,
}

#[derive(Clone)]
pub(crate) enum State {
    Open,
    Ready {
        seq: u64,
    },
    Claimed {
        seq: u64,
        claim: u64,
        consumer: Arc<str>,
    },
    Kept,
}

/// An event's entry in its index shard.
#[derive(Clone)]
pub(crate) struct EventEntry {
    pub(crate) fragments: u32,
    pub(crate) bytes: u64,
    pub(crate) state: State,
    pub(crate) incomplete: bool,
    pub(crate) sealed: bool,
    pub(crate) mark: Option<MarkLoc>,
}

impl EventEntry {
    fn public_state(&self) -> EventState {
        match self.state {
            State::Open => EventState::Open,
            State::Ready { .. } => EventState::Ready,
            State::Claimed { .. } => EventState::Claimed,
            State::Kept => EventState::Kept,
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
            claimed_by: match &self.state {
                State::Claimed { consumer, .. } => Some(consumer.to_string()),
                _ => None,
            },
        }
    }
}

/// READY events by the sequence number they got when they first became READY.
#[derive(Default)]
pub(crate) struct ReadyQueue {
    heap: BinaryHeap<Reverse<(u64, IndexKey)>>,
    next_seq: u64,
}

#[derive(Default)]
struct Counters {
    open: AtomicU64,
    ready: AtomicU64,
    claimed: AtomicU64,
    kept: AtomicU64,
    incomplete: AtomicU64,
    late: AtomicU64,
    removed: AtomicU64,
    kept_total: AtomicU64,
    expired: AtomicU64,
    released: AtomicU64,
    timed_out: AtomicU64,
}

/// Store-wide event state: policies, the READY queue, timers, leases, acknowledged ids.
pub(crate) struct Events {
    pub(crate) prefix_len: usize,
    pub(crate) fragment_len: usize,
    /// Width of the layout's first field (the run) if it fits a u64.
    run_width: Option<usize>,
    pub(crate) policies: RwLock<Policies>,
    pub(crate) ready: Mutex<ReadyQueue>,
    pub(crate) ready_cv: Condvar,
    /// Deadlines of OPEN events with a timeout.
    timers: Mutex<BinaryHeap<Reverse<(Instant, IndexKey)>>>,
    /// Lease ends of CLAIMED events.
    leases: Mutex<BinaryHeap<Reverse<(Instant, u64, IndexKey)>>>,
    pub(crate) acked: Mutex<AckedSet>,
    next_claim: AtomicU64,
    counters: Counters,
}

impl Events {
    pub(crate) fn new(layout: &KeyLayout, policies: Policies, acked: AckedSet) -> Self {
        let first = layout.fields()[0].width_bytes;
        Events {
            prefix_len: layout.event_prefix_len(),
            fragment_len: layout.key_len(),
            run_width: (first <= 8 && layout.event_fields() >= 1).then_some(first),
            policies: RwLock::new(policies),
            ready: Mutex::new(ReadyQueue::default()),
            ready_cv: Condvar::new(),
            timers: Mutex::new(BinaryHeap::new()),
            leases: Mutex::new(BinaryHeap::new()),
            acked: Mutex::new(acked),
            next_claim: AtomicU64::new(1),
            counters: Counters::default(),
        }
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

    pub(crate) fn is_fragment(&self, key: &[u8]) -> bool {
        key.len() == self.fragment_len
    }

    /// Checks, under the shard lock, that a put of fragment `key` may be published: refuses a
    /// fragment whose event was acknowledged.
    pub(crate) fn admit(&self, shard: &ShardMap, key: &[u8]) -> crate::Result<()> {
        let prefix = &key[..self.prefix_len];
        let late = match shard.events.get(prefix) {
            Some(e) => matches!(e.state, State::Kept),
            None => self.acked.lock().contains(prefix),
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

    /// Accounts a published put of fragment `key` (`old`: the record it replaced).
    pub(crate) fn on_put(
        &self,
        shard: &mut ShardMap,
        key: &[u8],
        value_len: usize,
        old: Option<&Loc>,
    ) {
        let prefix = &key[..self.prefix_len];
        let entry = match shard.events.get_mut(prefix) {
            Some(e) => e,
            None => {
                self.counters.open.fetch_add(1, Ordering::Relaxed); // enter_state of an OPEN entry
                if let Some(t) = self.policy_for(prefix).timeout() {
                    self.timers
                        .lock()
                        .push(Reverse((Instant::now() + t, IndexKey::new(prefix))));
                }
                shard
                    .events
                    .entry(IndexKey::new(prefix))
                    .or_insert(EventEntry {
                        fragments: 0,
                        bytes: 0,
                        state: State::Open,
                        incomplete: false,
                        sealed: false,
                        mark: None,
                    })
            }
        };
        match old {
            None => entry.fragments += 1,
            Some(o) => entry.bytes -= u64::from(o.value_len).min(entry.bytes),
        }
        entry.bytes += value_len as u64;
        if matches!(entry.state, State::Open) {
            let expected = self.policy_for(prefix).expected_fragments;
            if expected > 0 && entry.fragments >= expected {
                self.make_ready(entry, prefix, false);
            }
        }
    }

    /// Accounts the removal of fragment `key` (whose record was `old`). Returns the event's
    /// mark when the event is gone with it (the caller marks that record dead).
    pub(crate) fn on_remove(&self, shard: &mut ShardMap, key: &[u8], old: &Loc) -> Option<MarkLoc> {
        let prefix = &key[..self.prefix_len];
        let entry = shard.events.get_mut(prefix)?;
        entry.fragments = entry.fragments.saturating_sub(1);
        entry.bytes -= u64::from(old.value_len).min(entry.bytes);
        // A claimed event stays until its claim settles (the consumer may still ack it).
        if entry.fragments > 0 || matches!(entry.state, State::Claimed { .. }) {
            return None;
        }
        let entry = shard.events.remove(prefix)?;
        self.leave_state(&entry);
        entry.mark
    }

    /// OPEN → READY (or back to READY, keeping `seq`).
    pub(crate) fn make_ready(&self, entry: &mut EventEntry, prefix: &[u8], incomplete: bool) {
        let mut q = self.ready.lock();
        let seq = match entry.state {
            State::Open => {
                q.next_seq += 1;
                q.next_seq
            }
            State::Claimed { seq, .. } => seq,
            State::Ready { .. } | State::Kept => return,
        };
        self.leave_state(entry);
        entry.incomplete |= incomplete;
        entry.state = State::Ready { seq };
        self.enter_state(entry);
        q.heap.push(Reverse((seq, IndexKey::new(prefix))));
        drop(q);
        self.ready_cv.notify_one();
    }

    /// The count of entries in `entry`'s state.
    fn state_counter(&self, entry: &EventEntry) -> &AtomicU64 {
        match entry.state {
            State::Open => &self.counters.open,
            State::Ready { .. } => &self.counters.ready,
            State::Claimed { .. } => &self.counters.claimed,
            State::Kept => &self.counters.kept,
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
    pub(crate) fn sweep(&self, index: &crate::index::Index, now: Instant) -> Option<Instant> {
        loop {
            let due = {
                let mut t = self.timers.lock();
                match t.peek() {
                    Some(Reverse((at, _))) if *at <= now => t.pop().map(|Reverse((_, k))| k),
                    _ => None,
                }
            };
            let Some(prefix) = due else { break };
            let mut shard = index.event_shard(prefix.as_bytes()).write();
            if let Some(e) = shard.events.get_mut(prefix.as_bytes()) {
                if matches!(e.state, State::Open) {
                    self.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                    self.make_ready(e, prefix.as_bytes(), true);
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
            let mut shard = index.event_shard(prefix.as_bytes()).write();
            if let Some(e) = shard.events.get_mut(prefix.as_bytes()) {
                if matches!(e.state, State::Claimed { claim: c, .. } if c == claim) {
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    self.make_ready(e, prefix.as_bytes(), false);
                }
            }
        }
        let t = self.timers.lock().peek().map(|Reverse((at, _))| *at);
        let l = self.leases.lock().peek().map(|Reverse((at, _, _))| *at);
        match (t, l) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
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
            Instant::now() + lease,
            claim,
            IndexKey::new(prefix),
        )));
        claim
    }

    pub(crate) fn counts(&self) -> EventCounts {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EventCounts {
            open: g(&c.open),
            ready: g(&c.ready),
            claimed: g(&c.claimed),
            kept: g(&c.kept),
            incomplete: g(&c.incomplete),
            acked_intervals: self.acked.lock().intervals() as u64,
            late_fragments_total: g(&c.late),
            removed_total: g(&c.removed),
            kept_total: g(&c.kept_total),
            leases_expired_total: g(&c.expired),
            released_total: g(&c.released),
            timed_out_total: g(&c.timed_out),
        }
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Bytes of a hex string; `None` if it is not hex of whole bytes.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
