//! Consumer groups: named groups that each see every READY event once, with their own claims,
//! leases, delivery counts and acknowledgements (a filter farm and a monitoring sampler on
//! the same buffer).
//!
//! A store without groups has one queue (the *default* queue, the rest of this module's
//! parent). Creating the first group moves the READY events of that queue into the *group
//! log*; from then on events that become READY are appended there (one append per event,
//! under one mutex: grouped stores pay it, others do not), and claims name a group. Destroying
//! the last group moves the log back into the default queue.
//!
//! The log holds every READY event not yet settled, in READY order. Each group has a cursor
//! into it (the events it was offered), the events given back to it (lease expired,
//! released: offered again in their old place), its POISONED events, and its claims.
//!
//! Removal rule: a group is *required* (its acknowledgement counts) or *optional* (a sampler:
//! it sees the events while they are stored, and removal does not wait for it). An event is
//! settled when every required group has acknowledged it: the last required acknowledgement
//! writes the event's removal record (`Remove`), or its keep mark if any required group said
//! `Keep`. An optional group's `Keep` keeps nothing. With no required group, nothing is
//! removed. A group created later sees every event still in the log.
//!
//! Durable: the groups and each group's acknowledgements of events not yet settled, in
//! `events.groups` (JSON, replaced atomically: synced for `Persisted`, written for `Memory`);
//! the settling record as for the default queue. After a restart every group is offered the
//! events it had not acknowledged, in id order. Claims, leases and delivery counts live in
//! memory, as for the default queue.
//!
//! Limits: [`MAX_GROUPS`] groups, names of at most [`MAX_GROUP_NAME`] bytes, one log entry
//! per READY event, per group at most one claim per event and [`MAX_CONSUMERS`] consumers
//! remembered (the longest idle without claims are forgotten first).

use super::acked::AckedSet;
use super::{ClaimToken, EventId, PendingClaim};
use crate::error::{Error, Result};
use crate::index::IndexKey;
use crate::medium::Medium;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// File holding the groups and their acknowledgements, on the first tier (written durably).
pub const GROUPS_FILE: &str = "events.groups";
/// The same, written without a sync (for `Memory` acknowledgements). Kept apart: a power cut
/// may leave a file replaced without a sync empty or torn (XFS, or ext4 without
/// `auto_da_alloc`), and the durable one must still be there. At open the valid one with the
/// larger `seq` wins.
pub const GROUPS_FILE_UNSYNCED: &str = "events.groups.memory";
const GROUPS_VERSION: u32 = 1;
/// Most groups a store has at once.
pub const MAX_GROUPS: usize = 64;
/// Longest group name, in bytes.
pub const MAX_GROUP_NAME: usize = 64;
/// Consumers a group remembers (for [`crate::Store::consumers`]).
pub const MAX_CONSUMERS: usize = 4096;

/// One consumer group as listed by [`crate::Store::groups`].
#[derive(Debug, Clone, Serialize)]
pub struct GroupInfo {
    /// Its name.
    pub name: String,
    /// Its id (in its claim tokens; never reused).
    pub id: u32,
    /// True if removal waits for its acknowledgement.
    pub required: bool,
    /// Consumers it remembers.
    pub consumers: u64,
    /// Claims its consumers hold now.
    pub pending: u64,
    /// Events waiting to be offered to it: READY events after its cursor that it has not
    /// acknowledged, and events given back to it.
    pub lag: u64,
    /// Events it parked as POISONED.
    pub poisoned: u64,
    /// Claims handed to it since the store opened.
    pub delivered_total: u64,
    /// Acknowledgements it made since the store opened.
    pub acked_total: u64,
    /// Its claims whose lease ended unacknowledged, since the store opened.
    pub leases_expired_total: u64,
    /// How long the oldest event waiting for it has been READY.
    pub oldest_waiting: Option<Duration>,
    /// How long its oldest claim has been held.
    pub oldest_pending: Option<Duration>,
}

/// One consumer of a group as listed by [`crate::Store::consumers`].
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerInfo {
    /// Its name.
    pub name: String,
    /// Claims it holds now.
    pub pending: u64,
    /// Time since it last claimed or acknowledged.
    pub idle: Duration,
}

/// A READY event not yet settled.
struct LogEntry {
    prefix: IndexKey,
    /// Required groups that have not acknowledged it (bits by group slot).
    waiting: u64,
    /// Groups that acknowledged it.
    acked: u64,
    /// A required group acknowledged it with `Keep`.
    keep: bool,
    /// When it entered the log.
    since: Instant,
}

/// A claim held by a group's consumer.
struct GroupClaim {
    claim: u64,
    consumer: Arc<str>,
    since: Instant,
    until: Instant,
    seq: u64,
    deliveries: u8,
}

/// What a group remembers of a consumer.
struct Seen {
    at: Instant,
    /// Claims it holds (may undercount after it was forgotten while holding some: a hint
    /// for which consumers to forget first, never for correctness).
    claims: u32,
}

struct Group {
    name: Arc<str>,
    /// Never reused (tokens and the file name groups by it).
    id: u32,
    /// Its bit in the log entries.
    slot: u32,
    required: bool,
    /// The last log sequence number offered to it.
    cursor: u64,
    /// Given back (lease expired, released): sequence number → deliveries so far.
    returned: BTreeMap<u64, u8>,
    poisoned: BTreeMap<u64, u8>,
    claims: HashMap<IndexKey, GroupClaim>,
    leases: BinaryHeap<Reverse<(Instant, u64, IndexKey)>>,
    /// Consumer → when it last claimed or acknowledged, and the claims it holds.
    consumers: HashMap<Arc<str>, Seen>,
    /// Its acknowledgements of events still in the log (durable; dropped once the event is
    /// settled durably or gone, so bounded by the log).
    acked: AckedSet,
    kept: AckedSet,
    delivered_total: u64,
    acked_total: u64,
    leases_expired: u64,
}

impl Group {
    fn new(name: &str, id: u32, slot: u32, required: bool) -> Self {
        Group {
            name: name.into(),
            id,
            slot,
            required,
            cursor: 0,
            returned: BTreeMap::new(),
            poisoned: BTreeMap::new(),
            claims: HashMap::new(),
            leases: BinaryHeap::new(),
            consumers: HashMap::new(),
            acked: AckedSet::default(),
            kept: AckedSet::default(),
            delivered_total: 0,
            acked_total: 0,
            leases_expired: 0,
        }
    }

    fn bit(&self) -> u64 {
        1 << self.slot
    }

    /// Remembers that `consumer` claimed or acknowledged now. At most [`MAX_CONSUMERS`] are
    /// remembered: when a new one finds the map full, the quarter longest idle is forgotten,
    /// those holding no claim first (a forgotten one's claims stay valid, and it is still
    /// listed, from them). Forgetting in batches keeps it O(1) amortised per claim.
    fn seen(&mut self, consumer: &Arc<str>, now: Instant) {
        if let Some(seen) = self.consumers.get_mut(consumer) {
            seen.at = now;
            return;
        }
        if self.consumers.len() >= MAX_CONSUMERS {
            // Fix (found in review): with every consumer busy nothing was forgotten and the
            // map grew past the limit; and each new consumer rebuilt the set of busy ones
            // from every claim held (quadratic: 16 s for 30 000 claims by distinct names).
            let mut oldest: Vec<(bool, Instant, Arc<str>)> = self
                .consumers
                .iter()
                .map(|(c, s)| (s.claims > 0, s.at, c.clone()))
                .collect();
            oldest.sort_unstable_by_key(|(busy, at, _)| (*busy, *at));
            let forget = self.consumers.len() - MAX_CONSUMERS / 4 * 3;
            for (_, _, c) in oldest.into_iter().take(forget) {
                self.consumers.remove(&c);
            }
        }
        self.consumers
            .insert(consumer.clone(), Seen { at: now, claims: 0 });
    }

    /// Records claim `c` of event `prefix` (its consumer seen now).
    fn hold(&mut self, prefix: &IndexKey, c: GroupClaim) {
        self.seen(&c.consumer, c.since);
        if let Some(seen) = self.consumers.get_mut(&c.consumer) {
            seen.claims += 1;
        }
        if let Some(old) = self.claims.insert(prefix.clone(), c) {
            self.unhold(&old);
        }
    }

    /// Takes the claim on event `prefix` out, if any.
    fn take_claim(&mut self, prefix: &IndexKey) -> Option<GroupClaim> {
        let c = self.claims.remove(prefix)?;
        self.unhold(&c);
        Some(c)
    }

    fn unhold(&mut self, c: &GroupClaim) {
        if let Some(seen) = self.consumers.get_mut(&c.consumer) {
            seen.claims = seen.claims.saturating_sub(1);
        }
    }
}

/// READY events by their READY number, oldest first.
pub(crate) type ReadyList = Vec<(u64, IndexKey)>;

/// An event picked for a group: its READY number, id and deliveries so far.
pub(crate) type Picked = (u64, IndexKey, u8);

/// What settling a group's acknowledgement did.
pub(crate) enum Settled {
    /// Recorded; other required groups have still to acknowledge.
    Recorded,
    /// It was the last required one: the caller writes the settling record (the event left
    /// the log).
    Last,
    /// The event's state changed since the caller looked: look again.
    Retry,
}

#[derive(Default)]
struct State {
    groups: Vec<Group>,
    next_id: u32,
    log: BTreeMap<u64, LogEntry>,
    by_prefix: HashMap<IndexKey, u64>,
    /// Events that left the log by a record not known durable yet (a `Memory` settling
    /// record, a removal of their fragments): groups' acknowledgements of them are dropped
    /// only once everything written before is durable, so that no synced groups file lacks
    /// an acknowledgement whose event a power cut could bring back. At most the ids the
    /// groups' sets hold.
    left_log: Vec<IndexKey>,
    /// Bumped by every change of what the file holds.
    version: u64,
    /// Added to `version` for the files' `seq`: past every `seq` found at open.
    seq_base: u64,
}

impl State {
    fn find(&self, name: &str) -> Result<usize> {
        self.groups
            .iter()
            .position(|g| &*g.name == name)
            .ok_or_else(|| Error::NoSuchGroup(name.to_string()))
    }

    fn by_id(&self, id: u32) -> Option<usize> {
        self.groups.iter().position(|g| g.id == id)
    }

    fn required_mask(&self) -> u64 {
        self.groups
            .iter()
            .filter(|g| g.required)
            .fold(0, |m, g| m | g.bit())
    }

    /// Drops event `prefix` from the log and from every group's claims, given-back and
    /// poisoned events.
    fn forget(&mut self, prefix: &IndexKey) {
        let seq = self.by_prefix.remove(prefix);
        if let Some(seq) = seq {
            self.log.remove(&seq);
        }
        for g in &mut self.groups {
            g.take_claim(prefix);
            if let Some(seq) = seq {
                g.returned.remove(&seq);
                g.poisoned.remove(&seq);
            }
        }
    }

    /// Drops event `prefix` from every group's acknowledged sets once it left the log (its
    /// settling record, or the removal of its fragments, durable): the sets hold only events
    /// still waiting, so they stay as small as the log and the file stays cheap to rewrite.
    fn drop_acks(&mut self, prefix: &IndexKey) {
        if self.by_prefix.contains_key(prefix) {
            return;
        }
        let p = prefix.as_bytes();
        let mut changed = false;
        for g in &mut self.groups {
            changed |= g.acked.remove(&p);
            g.kept.remove(&p);
        }
        if changed {
            self.version += 1;
        }
    }

    /// Event `prefix` left the log by a record not known durable yet: remembered, if some
    /// group's set holds it, until [`Groups::drop_acks_of`].
    fn left_log(&mut self, prefix: &IndexKey) {
        let p = prefix.as_bytes();
        if self.groups.iter().any(|g| g.acked.contains(&p)) {
            self.left_log.push(prefix.clone());
        }
    }

    /// Expired leases of group `gi` give their events back; returns the next lease end.
    fn sweep(&mut self, gi: usize, now: Instant, max_deliveries: u32) {
        let g = &mut self.groups[gi];
        while let Some(Reverse((at, claim, prefix))) = g.leases.peek() {
            if *at > now {
                break;
            }
            let (claim, prefix) = (*claim, prefix.clone());
            g.leases.pop();
            if g.claims.get(&prefix).is_some_and(|c| c.claim == claim) {
                if let Some(c) = g.take_claim(&prefix) {
                    g.leases_expired += 1;
                    give_back(g, &c, max_deliveries);
                }
            }
        }
    }

    /// The next event to offer group `gi`: the oldest given back, or the next in the log it
    /// has not acknowledged (the cursor moves past it).
    fn pick(&mut self, gi: usize) -> Option<Picked> {
        let g = &mut self.groups[gi];
        let bit = g.bit();
        loop {
            let returned = g.returned.first_key_value().map(|(s, d)| (*s, *d));
            let next = self
                .log
                .range(g.cursor + 1..)
                .find(|(_, e)| e.acked & bit == 0)
                .map(|(s, _)| *s);
            let (seq, deliveries) = match (returned, next) {
                (Some((r, d)), Some(n)) if r < n => (r, d),
                (Some((r, d)), None) => (r, d),
                (_, Some(n)) => (n, 0),
                (None, None) => {
                    // Everything after the cursor was acknowledged by it: skip it for good.
                    g.cursor = g
                        .cursor
                        .max(self.log.last_key_value().map_or(0, |(s, _)| *s));
                    return None;
                }
            };
            if returned.is_some_and(|(r, _)| r == seq) {
                g.returned.remove(&seq);
            } else {
                g.cursor = seq;
            }
            if let Some(e) = self.log.get(&seq) {
                return Some((seq, e.prefix.clone(), deliveries));
            }
            // Settled or gone since it was given back: nothing to offer.
        }
    }

    /// True if group `gi` has an event to offer (what `pick` would find).
    fn has_work(&self, gi: usize) -> bool {
        let g = &self.groups[gi];
        !g.returned.is_empty()
            || self
                .log
                .range(g.cursor + 1..)
                .any(|(_, e)| e.acked & g.bit() == 0)
    }
}

/// The record group `gi`'s acknowledgement of log entry `seq` with `ack` writes: the
/// settling one if it is the last required acknowledgement.
fn settling_record(
    s: &State,
    gi: usize,
    seq: u64,
    ack: super::Ack,
) -> Option<super::records::EventWrite> {
    use super::records::EventWrite;
    let g = &s.groups[gi];
    let e = s.log.get(&seq)?;
    let last = g.required && e.waiting & g.bit() != 0 && e.waiting & !g.bit() == 0;
    last.then(|| {
        if e.keep || ack == super::Ack::Keep {
            EventWrite::Keep
        } else {
            EventWrite::Remove
        }
    })
}

/// Gives a claim back to its group: offered again in its old place, or parked POISONED
/// once delivered `max_deliveries` times (0: never).
fn give_back(g: &mut Group, c: &GroupClaim, max_deliveries: u32) {
    if max_deliveries > 0 && u32::from(c.deliveries) >= max_deliveries {
        g.poisoned.insert(c.seq, c.deliveries);
    } else {
        g.returned.insert(c.seq, c.deliveries);
    }
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    /// Orders the two files (larger: newer); 0 in files of older builds.
    #[serde(default)]
    seq: u64,
    prefix_len: usize,
    next_id: u32,
    groups: Vec<GroupOnDisk>,
}

#[derive(Serialize, Deserialize)]
struct GroupOnDisk {
    name: String,
    id: u32,
    required: bool,
    acked: Vec<(String, String)>,
    kept: Vec<(String, String)>,
}

/// The store's consumer groups (see the module docs).
pub(crate) struct Groups {
    prefix_len: usize,
    /// True while the store has groups: READY events go to the log.
    active: AtomicBool,
    state: Mutex<State>,
    /// Serialises creating and destroying groups.
    pub(crate) admin: Mutex<()>,
    /// Serialises writes of the file; the versions written and synced.
    writer: Mutex<()>,
    written: AtomicU64,
    synced: AtomicU64,
    /// Deliveries after which an event given back is parked (0: never); the store's setting.
    pub(crate) max_deliveries: std::sync::atomic::AtomicU32,
}

impl Groups {
    /// The groups persisted in `medium`, none if there is no file.
    pub(crate) fn load(medium: &dyn Medium, prefix_len: usize) -> Result<Groups> {
        let mut state = State {
            next_id: 1,
            ..State::default()
        };
        let bad = |name: &str, reason: String| Error::BadMetadata {
            path: medium.path().join(name),
            reason,
        };
        let parse = |name: &str| -> Result<Option<OnDisk>> {
            let Some(bytes) = medium.read_file(name)? else {
                return Ok(None);
            };
            let disk: OnDisk =
                serde_json::from_slice(&bytes).map_err(|e| bad(name, e.to_string()))?;
            if disk.version != GROUPS_VERSION || disk.prefix_len != prefix_len {
                return Err(bad(
                    name,
                    format!(
                        "version {} with {}-byte ids; this build reads version {GROUPS_VERSION} \
                         with {prefix_len}-byte ids",
                        disk.version, disk.prefix_len
                    ),
                ));
            }
            Ok(Some(disk))
        };
        let durable = parse(GROUPS_FILE)?;
        // Not synced: a power cut may have left it torn; then the durable one holds.
        let unsynced = parse(GROUPS_FILE_UNSYNCED).ok().flatten();
        let (name, disk) = match (durable, unsynced) {
            (Some(d), Some(u)) if u.seq > d.seq => (GROUPS_FILE_UNSYNCED, Some(u)),
            (Some(d), _) => (GROUPS_FILE, Some(d)),
            (None, u) => (GROUPS_FILE_UNSYNCED, u),
        };
        if let Some(disk) = disk {
            let bad = |reason: String| bad(name, reason);
            if disk.groups.len() > MAX_GROUPS {
                return Err(bad(format!("more than {MAX_GROUPS} groups")));
            }
            if disk.next_id == u32::MAX {
                return Err(bad(format!("next group id {}", disk.next_id)));
            }
            state.next_id = disk.next_id;
            state.seq_base = disk.seq + 1;
            for (slot, d) in disk.groups.into_iter().enumerate() {
                // Fix (found in review): id 0 is the default queue's in tokens, and the next
                // id after u32::MAX wrapped (reusing ids).
                if d.id == 0 || d.id == u32::MAX {
                    return Err(bad(format!("group {:?} has id {}", d.name, d.id)));
                }
                let mut g = Group::new(&d.name, d.id, slot as u32, d.required);
                g.acked = AckedSet::from_hex_pairs(&d.acked, prefix_len).map_err(bad)?;
                g.kept = AckedSet::from_hex_pairs(&d.kept, prefix_len).map_err(bad)?;
                state.next_id = state.next_id.max(d.id + 1);
                state.groups.push(g);
            }
        }
        Ok(Groups {
            prefix_len,
            active: AtomicBool::new(!state.groups.is_empty()),
            state: Mutex::new(state),
            admin: Mutex::new(()),
            writer: Mutex::new(()),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            max_deliveries: std::sync::atomic::AtomicU32::new(0),
        })
    }

    fn max(&self) -> u32 {
        self.max_deliveries.load(Ordering::Relaxed)
    }

    /// True while the store has groups.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The group names, for messages.
    pub(crate) fn names(&self) -> String {
        let s = self.state.lock();
        s.groups
            .iter()
            .map(|g| &*g.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Appends event `prefix`, READY now with number `seq`, to the log (under the event's
    /// shard lock). Groups that acknowledged it before a restart do not wait for it again.
    pub(crate) fn append(&self, seq: u64, prefix: &IndexKey) {
        let mut s = self.state.lock();
        if s.by_prefix.contains_key(prefix) {
            return;
        }
        let mut acked = 0;
        let mut keep = false;
        for g in &s.groups {
            if g.acked.contains(&prefix.as_bytes()) {
                acked |= g.bit();
                keep |= g.required && g.kept.contains(&prefix.as_bytes());
            }
        }
        let waiting = s.required_mask() & !acked;
        // READY numbers are taken under the event's shard lock, and this lock is taken after
        // it: a put in another shard may have taken a larger number and been offered already.
        // A group whose cursor passed this number would skip it; it gets it as given back.
        for g in s.groups.iter_mut() {
            if g.cursor >= seq && acked & g.bit() == 0 {
                g.returned.insert(seq, 0);
            }
        }
        s.by_prefix.insert(prefix.clone(), seq);
        s.log.insert(
            seq,
            LogEntry {
                prefix: prefix.clone(),
                waiting,
                acked,
                keep,
                since: Instant::now(),
            },
        );
    }

    /// Event `prefix` lost its fragments (removed key by key): it leaves the log; the groups
    /// forget their acknowledgements of it once the removal is durable.
    pub(crate) fn forget(&self, prefix: &IndexKey) {
        if self.active() {
            let mut s = self.state.lock();
            s.forget(prefix);
            s.left_log(prefix);
        }
    }

    /// Event `prefix`'s settling record is written, durably: the groups forget their
    /// acknowledgements of it. Not before: a crash between the two would offer it again to
    /// groups that acknowledged it.
    pub(crate) fn settled_durably(&self, prefix: &IndexKey) {
        self.state.lock().drop_acks(prefix);
    }

    /// Event `prefix`'s settling record is written, not durably yet: the groups forget their
    /// acknowledgements of it once everything written so far is durable (see `left_log`).
    pub(crate) fn settled_in_memory(&self, prefix: &IndexKey) {
        self.state.lock().left_log(prefix);
    }

    /// Events whose acknowledgements wait for durability before they are dropped.
    pub(crate) fn left_log_len(&self) -> usize {
        self.state.lock().left_log.len()
    }

    /// Takes the events that left the log so far; the caller makes every record written so
    /// far durable, then hands them to [`Groups::drop_acks_of`] (or back, on failure).
    pub(crate) fn take_left_log(&self) -> Vec<IndexKey> {
        std::mem::take(&mut self.state.lock().left_log)
    }

    /// Puts back what [`Groups::take_left_log`] took (the records are not durable).
    pub(crate) fn put_back_left_log(&self, mut left: Vec<IndexKey>) {
        self.state.lock().left_log.append(&mut left);
    }

    /// The records that took these events out of the log are durable: the groups forget
    /// their acknowledgements of them.
    pub(crate) fn drop_acks_of(&self, left: &[IndexKey]) {
        let mut s = self.state.lock();
        for prefix in left {
            s.drop_acks(prefix);
        }
    }

    /// After a reopen: keeps in each group's acknowledged sets only the events still stored
    /// (those of the log, and `open`: events OPEN again, made READY by a timeout that is not
    /// durable). The others were settled, or lost their fragments, before the file was last
    /// rewritten.
    pub(crate) fn keep_acks_of_stored(&self, open: &[IndexKey]) {
        let mut s = self.state.lock();
        let State { groups, log, .. } = &mut *s;
        let mut changed = false;
        for g in groups.iter_mut() {
            let mut acked = AckedSet::default();
            let mut kept = AckedSet::default();
            let in_log = log
                .values()
                .filter(|e| e.acked & g.bit() != 0)
                .map(|e| &e.prefix);
            let open = open.iter().filter(|p| g.acked.contains(&p.as_bytes()));
            for p in in_log.chain(open) {
                let p = p.as_bytes();
                acked.insert(&p);
                if g.kept.contains(&p) {
                    kept.insert(&p);
                }
            }
            changed |= acked != g.acked || kept != g.kept;
            g.acked = acked;
            g.kept = kept;
        }
        if changed {
            s.version += 1;
        }
    }

    /// Serialises the durable part, if it changed since `done` (a version).
    fn snapshot(&self, done: u64) -> Option<(u64, Vec<u8>)> {
        let s = self.state.lock();
        if s.version <= done {
            return None;
        }
        let disk = OnDisk {
            version: GROUPS_VERSION,
            seq: s.seq_base + s.version,
            prefix_len: self.prefix_len,
            next_id: s.next_id,
            groups: s
                .groups
                .iter()
                .map(|g| GroupOnDisk {
                    name: g.name.to_string(),
                    id: g.id,
                    required: g.required,
                    acked: g.acked.to_hex_pairs(),
                    kept: g.kept.to_hex_pairs(),
                })
                .collect(),
        };
        let bytes = serde_json::to_vec(&disk).expect("plain data serialises");
        Some((s.version, bytes))
    }

    /// Writes the file if it changed (`sync`: durably). Concurrent callers share a write:
    /// a caller finding its change written by another returns at once.
    pub(crate) fn persist(&self, medium: &dyn Medium, sync: bool) -> Result<()> {
        let target = self.state.lock().version;
        let done = |this: &Self| {
            if sync {
                this.synced.load(Ordering::Acquire)
            } else {
                this.written.load(Ordering::Acquire)
            }
        };
        if done(self) >= target {
            return Ok(());
        }
        let _w = self.writer.lock();
        if done(self) >= target {
            return Ok(());
        }
        let Some((version, bytes)) = self.snapshot(done(self)) else {
            return Ok(());
        };
        if sync {
            medium.write_file(GROUPS_FILE, &bytes)?;
            self.synced.store(version, Ordering::Release);
        } else {
            medium.write_file_unsynced(GROUPS_FILE_UNSYNCED, &bytes)?;
        }
        self.written.fetch_max(version, Ordering::AcqRel);
        Ok(())
    }

    /// Adds group `name`. With `first`, the events READY in the default queue (in READY
    /// order) enter the log. The caller persists.
    pub(crate) fn add(&self, name: &str, required: bool, first: ReadyList) {
        let mut s = self.state.lock();
        let used = s.groups.iter().fold(0u64, |m, g| m | g.bit());
        let slot = (!used).trailing_zeros();
        let id = s.next_id;
        s.next_id += 1;
        let g = Group::new(name, id, slot, required);
        let bit = g.bit();
        s.groups.push(g);
        s.version += 1;
        if required {
            for e in s.log.values_mut() {
                e.waiting |= bit;
            }
        }
        drop(s);
        for (seq, prefix) in first {
            self.append(seq, &prefix);
        }
        self.active.store(true, Ordering::Release);
    }

    /// Checks a new group's name and that there is room for it.
    pub(crate) fn check_new(&self, name: &str) -> Result<()> {
        let bad = |why: &str| Error::InvalidArgument(format!("group name `{name}` {why}"));
        if name.is_empty() || name.len() > MAX_GROUP_NAME {
            return Err(bad(&format!("must be 1 to {MAX_GROUP_NAME} bytes")));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        {
            return Err(bad("may hold only letters, digits and - _ . :"));
        }
        let s = self.state.lock();
        if s.groups.iter().any(|g| &*g.name == name) {
            return Err(Error::InvalidArgument(format!(
                "group `{name}` exists already"
            )));
        }
        if s.groups.len() >= MAX_GROUPS {
            return Err(Error::InvalidArgument(format!(
                "a store has at most {MAX_GROUPS} groups; destroy one first"
            )));
        }
        Ok(())
    }

    /// Removes group `name`. Returns the events its removal settled (the caller writes their
    /// records) and, if it was the last group, the log (READY events in READY order, which go
    /// back to the default queue).
    pub(crate) fn remove(&self, name: &str) -> Result<(Vec<IndexKey>, Option<ReadyList>)> {
        let mut s = self.state.lock();
        let gi = s.find(name)?;
        let g = s.groups.remove(gi);
        s.version += 1;
        let bit = g.bit();
        if s.groups.is_empty() {
            self.active.store(false, Ordering::Release);
            let log = std::mem::take(&mut s.log);
            s.by_prefix.clear();
            return Ok((
                Vec::new(),
                Some(log.into_iter().map(|(q, e)| (q, e.prefix)).collect()),
            ));
        }
        let required = s.required_mask();
        let mut settled = Vec::new();
        for e in s.log.values_mut() {
            let was_waiting = e.waiting != 0;
            e.waiting &= !bit;
            e.acked &= !bit;
            if was_waiting && e.waiting == 0 && e.acked & required != 0 {
                settled.push(e.prefix.clone());
            }
        }
        Ok((settled, None))
    }

    /// The record that settles event `prefix` if every required group acknowledged it.
    pub(crate) fn settled_as(&self, prefix: &IndexKey) -> Option<super::records::EventWrite> {
        use super::records::EventWrite;
        let s = self.state.lock();
        let e = s.log.get(s.by_prefix.get(prefix)?)?;
        (e.waiting == 0 && e.acked & s.required_mask() != 0).then_some(if e.keep {
            EventWrite::Keep
        } else {
            EventWrite::Remove
        })
    }

    /// Takes event `prefix` out of the log if it is settled as `what` (true), else nothing.
    pub(crate) fn take_settled(&self, prefix: &IndexKey, what: super::records::EventWrite) -> bool {
        if self.settled_as(prefix) != Some(what) {
            return false;
        }
        self.state.lock().forget(prefix);
        true
    }

    /// Every event in the log that its required groups all acknowledged (after a restart
    /// found their acknowledgements but not the settling record).
    pub(crate) fn settled(&self) -> Vec<IndexKey> {
        let s = self.state.lock();
        let required = s.required_mask();
        s.log
            .values()
            .filter(|e| e.waiting == 0 && e.acked & required != 0)
            .map(|e| e.prefix.clone())
            .collect()
    }

    /// Picks the next event for group `name` (expired leases given back first). Returns the
    /// group's id and the pick, and the next lease end (to wait no longer than it).
    pub(crate) fn pick(&self, name: &str) -> Result<(u32, Option<Picked>, Option<Instant>)> {
        let mut s = self.state.lock();
        let gi = s.find(name)?;
        s.sweep(gi, Instant::now(), self.max());
        let picked = s.pick(gi);
        let next_lease = s.groups[gi].leases.peek().map(|Reverse((at, _, _))| *at);
        Ok((s.groups[gi].id, picked, next_lease))
    }

    /// Takes POISONED event `prefix` of group `name` for a claim.
    pub(crate) fn pick_poisoned(&self, name: &str, prefix: &IndexKey) -> Result<(u32, u64, u8)> {
        let mut s = self.state.lock();
        let gi = s.find(name)?;
        let id = s.groups[gi].id;
        let seq = s.by_prefix.get(prefix).copied();
        let g = &mut s.groups[gi];
        match seq.and_then(|q| g.poisoned.remove(&q).map(|d| (q, d))) {
            Some((seq, d)) => Ok((id, seq, d)),
            None => Err(Error::InvalidArgument(format!(
                "event {} is not poisoned in group `{name}`: only a poisoned event is claimed \
                 by its id (the others in READY order, with next_event)",
                EventId::from_prefix(&prefix.as_bytes())
            ))),
        }
    }

    /// True if group `name` has an event to offer now.
    pub(crate) fn has_work(&self, name: &str) -> bool {
        let s = self.state.lock();
        s.find(name).is_ok_and(|gi| s.has_work(gi))
    }

    /// Records a claim picked for group `id` (under the event's shard lock, the event
    /// checked READY). False if the event left the log meanwhile.
    #[allow(clippy::too_many_arguments, reason = "one claim's fields")]
    pub(crate) fn record_claim(
        &self,
        id: u32,
        seq: u64,
        prefix: &IndexKey,
        deliveries: u8,
        claim: u64,
        consumer: &Arc<str>,
        lease: Duration,
    ) -> bool {
        let mut s = self.state.lock();
        if !s.log.contains_key(&seq) {
            return false;
        }
        let Some(gi) = s.by_id(id) else { return false };
        let now = Instant::now();
        let g = &mut s.groups[gi];
        g.hold(
            prefix,
            GroupClaim {
                claim,
                consumer: consumer.clone(),
                since: now,
                until: crate::clock::after(now, lease),
                seq,
                deliveries: deliveries.saturating_add(1),
            },
        );
        g.leases.push(Reverse((
            crate::clock::after(now, lease),
            claim,
            prefix.clone(),
        )));
        // Fix (found in review): the leases of claims already settled stayed until they
        // ran out; dropped once they outnumber the claims held (twice over, and a slack).
        if g.leases.len() > 2 * g.claims.len() + super::STALE_SLACK {
            let claims = &g.claims;
            g.leases
                .retain(|Reverse((_, c, p))| claims.get(p).is_some_and(|held| held.claim == *c));
        }
        g.delivered_total += 1;
        true
    }

    /// Checks that `token` is a claim its group holds: the group's index.
    fn held(&self, s: &State, token: &ClaimToken, prefix: &IndexKey) -> Result<usize> {
        let Some(gi) = s.by_id(token.group) else {
            return Err(Error::ClaimLost {
                event: token.event.to_string(),
                token: token.to_string(),
            });
        };
        let g = &s.groups[gi];
        if g.claims.get(prefix).is_some_and(|c| c.claim == token.claim) {
            return Ok(gi);
        }
        let acked = match s.by_prefix.get(prefix).and_then(|q| s.log.get(q)) {
            Some(e) => e.acked & g.bit() != 0,
            None => g.acked.contains(&prefix.as_bytes()),
        };
        Err(if acked {
            Error::EventAcknowledged(token.event.to_string())
        } else {
            Error::ClaimLost {
                event: token.event.to_string(),
                token: token.to_string(),
            }
        })
    }

    /// Settles `token`'s claim with `ack` if the caller's expectation holds: `expect` is the
    /// settling record when the caller expects this to be the last required acknowledgement
    /// (see [`Groups::would_settle`]), `None` when it expects not. `Retry` (nothing changed)
    /// when it no longer holds.
    pub(crate) fn settle(
        &self,
        token: &ClaimToken,
        ack: super::Ack,
        expect: Option<super::records::EventWrite>,
    ) -> Result<Settled> {
        let prefix = IndexKey::new(token.event.as_bytes());
        let mut s = self.state.lock();
        s.sweep_all(self.max());
        let gi = self.held(&s, token, &prefix)?;
        let Some(&seq) = s.by_prefix.get(&prefix) else {
            return Err(Error::ClaimLost {
                event: token.event.to_string(),
                token: token.to_string(),
            });
        };
        let bit = s.groups[gi].bit();
        if settling_record(&s, gi, seq, ack) != expect {
            return Ok(Settled::Retry);
        }
        let now = Instant::now();
        let g = &mut s.groups[gi];
        if let Some(c) = g.take_claim(&prefix) {
            g.seen(&c.consumer, now);
        }
        g.acked_total += 1;
        if expect.is_some() {
            s.forget(&prefix);
            return Ok(Settled::Last);
        }
        let required = g.required;
        g.acked.insert(&prefix.as_bytes());
        if ack == super::Ack::Keep && required {
            g.kept.insert(&prefix.as_bytes());
        }
        let e = s.log.get_mut(&seq).expect("by_prefix and log agree");
        e.acked |= bit;
        e.waiting &= !bit;
        e.keep |= ack == super::Ack::Keep && required;
        s.version += 1;
        Ok(Settled::Recorded)
    }

    /// The record that `token`'s acknowledgement with `ack` would write (it is the last
    /// required one), `None` if it would write none.
    pub(crate) fn would_settle(
        &self,
        token: &ClaimToken,
        ack: super::Ack,
    ) -> Result<Option<super::records::EventWrite>> {
        let prefix = IndexKey::new(token.event.as_bytes());
        let mut s = self.state.lock();
        s.sweep_all(self.max());
        let gi = self.held(&s, token, &prefix)?;
        Ok(match s.by_prefix.get(&prefix) {
            Some(&seq) => settling_record(&s, gi, seq, ack),
            None => None,
        })
    }

    /// Gives `token`'s claim back to its group.
    pub(crate) fn release(&self, token: &ClaimToken) -> Result<()> {
        let prefix = IndexKey::new(token.event.as_bytes());
        let mut s = self.state.lock();
        s.sweep_all(self.max());
        let gi = self.held(&s, token, &prefix)?;
        let g = &mut s.groups[gi];
        if let Some(c) = g.take_claim(&prefix) {
            give_back(g, &c, self.max());
        }
        Ok(())
    }

    /// Group `name`'s claims, oldest first, at most `limit`.
    pub(crate) fn pending(&self, name: &str, limit: usize) -> Result<Vec<PendingClaim>> {
        let mut s = self.state.lock();
        let gi = s.find(name)?;
        s.sweep_all(self.max());
        let now = Instant::now();
        let g = &s.groups[gi];
        let mut out: Vec<(Instant, PendingClaim)> = g
            .claims
            .iter()
            .map(|(p, c)| {
                (
                    c.since,
                    PendingClaim {
                        token: ClaimToken {
                            event: EventId::from_prefix(&p.as_bytes()),
                            claim: c.claim,
                            group: g.id,
                        },
                        consumer: c.consumer.to_string(),
                        held: now.saturating_duration_since(c.since),
                        lease_left: c.until.saturating_duration_since(now),
                        deliveries: u32::from(c.deliveries),
                    },
                )
            })
            .collect();
        out.sort_by_key(|(since, p)| (*since, p.token.claim));
        Ok(out.into_iter().take(limit).map(|(_, p)| p).collect())
    }

    /// Every group, in creation order.
    pub(crate) fn list(&self) -> Vec<GroupInfo> {
        let mut s = self.state.lock();
        s.sweep_all(self.max());
        let now = Instant::now();
        let s = &*s;
        s.groups
            .iter()
            .map(|g| {
                let bit = g.bit();
                let after = s
                    .log
                    .range(g.cursor + 1..)
                    .filter(|(_, e)| e.acked & bit == 0);
                let oldest_after = after.clone().next().map(|(_, e)| e.since);
                let oldest_returned = g
                    .returned
                    .keys()
                    .next()
                    .and_then(|q| s.log.get(q))
                    .map(|e| e.since);
                let oldest = match (oldest_after, oldest_returned) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                GroupInfo {
                    name: g.name.to_string(),
                    id: g.id,
                    required: g.required,
                    consumers: g.consumers.len() as u64,
                    pending: g.claims.len() as u64,
                    lag: after.count() as u64 + g.returned.len() as u64,
                    poisoned: g.poisoned.keys().filter(|q| s.log.contains_key(q)).count() as u64,
                    delivered_total: g.delivered_total,
                    acked_total: g.acked_total,
                    leases_expired_total: g.leases_expired,
                    oldest_waiting: oldest.map(|t| now.saturating_duration_since(t)),
                    oldest_pending: g
                        .claims
                        .values()
                        .map(|c| c.since)
                        .min()
                        .map(|t| now.saturating_duration_since(t)),
                }
            })
            .collect()
    }

    /// Group `name`'s consumers, most recently seen first.
    pub(crate) fn consumers(&self, name: &str) -> Result<Vec<ConsumerInfo>> {
        let mut s = self.state.lock();
        let gi = s.find(name)?;
        s.sweep_all(self.max());
        let now = Instant::now();
        let g = &s.groups[gi];
        // Claims and their latest start, per consumer.
        let mut pending: HashMap<&str, (u64, Instant)> = HashMap::new();
        for c in g.claims.values() {
            let p = pending.entry(&c.consumer).or_insert((0, c.since));
            p.0 += 1;
            p.1 = p.1.max(c.since);
        }
        let mut out: Vec<ConsumerInfo> = g
            .consumers
            .iter()
            .map(|(c, seen)| ConsumerInfo {
                name: c.to_string(),
                pending: pending.get(&**c).map_or(0, |p| p.0),
                idle: now.saturating_duration_since(seen.at),
            })
            .collect();
        // Claim holders forgotten past the limit are listed from their claims.
        out.extend(
            pending
                .iter()
                .filter(|(c, _)| !g.consumers.contains_key(**c))
                .map(|(c, (n, since))| ConsumerInfo {
                    name: c.to_string(),
                    pending: *n,
                    idle: now.saturating_duration_since(*since),
                }),
        );
        out.sort_by_key(|c| (c.idle, c.name.clone()));
        Ok(out)
    }
}

impl State {
    /// Expired leases of every group.
    fn sweep_all(&mut self, max_deliveries: u32) {
        let now = Instant::now();
        for gi in 0..self.groups.len() {
            self.sweep(gi, now, max_deliveries);
        }
    }
}

#[cfg(test)]
impl Groups {
    /// Entries in the lease heap of the group made `nth`.
    pub(crate) fn lease_entries(&self, nth: usize) -> usize {
        self.state.lock().groups[nth].leases.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fix (found in review): with every remembered consumer holding a claim, a new one was
    /// added anyway and the map grew without limit. The longest idle is forgotten (its claim
    /// stays) and still listed, from its claim.
    #[test]
    fn consumers_stay_within_the_limit_when_all_hold_claims() {
        let m = crate::testing::FaultMedium::new("groups-consumers");
        let groups = Groups::load(&*m, 12).unwrap();
        groups.add("g", false, Vec::new());
        let n = MAX_CONSUMERS + 3;
        for i in 0..n {
            let prefix = IndexKey::new(&(i as u64).to_be_bytes().repeat(2)[..12]);
            groups.append(i as u64 + 1, &prefix);
            let consumer: Arc<str> = format!("c{i}").into();
            assert!(groups.record_claim(
                1,
                i as u64 + 1,
                &prefix,
                0,
                i as u64,
                &consumer,
                Duration::from_secs(60)
            ));
        }
        assert!(groups.state.lock().groups[0].consumers.len() <= MAX_CONSUMERS);
        let listed = groups.consumers("g").unwrap();
        assert_eq!(listed.len(), n, "every claim holder is listed");
        assert!(listed.iter().all(|c| c.pending == 1));
    }

    /// Fix (found in review): each new consumer past the limit rebuilt the set of busy
    /// consumers from every claim held (quadratic). Now a full map forgets its longest-idle
    /// quarter at once, idle consumers before busy ones.
    #[test]
    fn a_full_consumer_map_forgets_a_quarter_idle_ones_first() {
        let m = crate::testing::FaultMedium::new("groups-consumers-batch");
        let groups = Groups::load(&*m, 12).unwrap();
        groups.add("g", false, Vec::new());
        let busy = MAX_CONSUMERS / 2;
        for i in 0..MAX_CONSUMERS {
            let consumer: Arc<str> = format!("c{i}").into();
            let prefix = IndexKey::new(&(i as u64).to_be_bytes().repeat(2)[..12]);
            groups.append(i as u64 + 1, &prefix);
            let lease = Duration::from_secs(60);
            assert!(groups.record_claim(1, i as u64 + 1, &prefix, 0, i as u64, &consumer, lease));
            if i >= busy {
                // Settled: this consumer holds no claim any more.
                groups.state.lock().groups[0].take_claim(&prefix);
            }
        }
        let prefix = IndexKey::new(&[0xee; 12]);
        groups.append(1 << 40, &prefix);
        let new: Arc<str> = "new".into();
        let lease = Duration::from_secs(60);
        assert!(groups.record_claim(1, 1 << 40, &prefix, 0, 1 << 40, &new, lease));
        let s = groups.state.lock();
        let consumers = &s.groups[0].consumers;
        assert_eq!(consumers.len(), MAX_CONSUMERS / 4 * 3 + 1);
        assert!((0..busy).all(|i| consumers.contains_key(format!("c{i}").as_str())));
        assert_eq!(consumers["new"].claims, 1);
        assert_eq!(consumers["c0"].claims, 1);
    }

    /// Fix (found in review): a damaged groups file with a group id of 0 (the default queue's
    /// in tokens) or u32::MAX (the next id wrapped) is refused as bad metadata.
    #[test]
    fn a_groups_file_with_an_impossible_id_is_refused() {
        for id in [0u32, u32::MAX] {
            let m = crate::testing::FaultMedium::new("groups-id");
            let file = serde_json::json!({
                "version": GROUPS_VERSION,
                "prefix_len": 12,
                "next_id": 2,
                "groups": [{"name": "g", "id": id, "required": false, "acked": [], "kept": []}],
            });
            m.write_file(GROUPS_FILE, file.to_string().as_bytes())
                .unwrap();
            let e = Groups::load(&*m, 12).err().expect("refused");
            assert!(matches!(e, Error::BadMetadata { .. }), "{e}");
            assert!(e.to_string().contains(&format!("id {id}")), "{e}");
        }
    }

    /// Two puts in different shards: the one with the smaller READY number reaches the log
    /// last, after a consumer took the other. The group must still be offered it.
    #[test]
    fn an_event_appended_behind_a_groups_cursor_is_still_offered() {
        let m = crate::testing::FaultMedium::new("groups-cursor");
        let groups = Groups::load(&*m, 12).unwrap();
        groups.add("g", false, Vec::new());
        let p = |n: u8| IndexKey::new(&[n; 12]);
        groups.append(11, &p(2));
        let (_, picked, _) = groups.pick("g").unwrap();
        assert_eq!(picked.map(|(seq, _, _)| seq), Some(11));
        groups.append(10, &p(1));
        let (_, picked, _) = groups.pick("g").unwrap();
        assert_eq!(picked.map(|(seq, k, _)| (seq, k)), Some((10, p(1))));
        let (_, picked, _) = groups.pick("g").unwrap();
        assert!(picked.is_none(), "each offered once");
    }
}
