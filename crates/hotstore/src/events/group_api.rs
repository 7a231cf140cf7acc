//! The consumer-group calls of [`Store`] (see [`super::groups`] for the model): create and
//! destroy groups, claim in a group, acknowledge and release its claims, and inspect it.

use super::claims::Step;
use super::groups::Settled;
use super::{Ack, Claim, ClaimToken, ConsumerInfo, EventId, GroupInfo, PendingClaim, State};
use crate::error::{Error, Result};
use crate::index::IndexKey;
use crate::options::Durability;
use crate::store::{Inner, Store};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Store {
    /// Creates consumer group `name` (letters, digits, `-_.:`; at most 64 bytes; at most 64
    /// groups), durably. It sees every READY event not yet settled, including those READY
    /// now. `required`: removal waits for its acknowledgement; otherwise it is a sampler that
    /// sees events while they are stored. The first group takes over the default queue:
    /// from then on claims name a group ([`Error::InvalidArgument`] while claims of the
    /// default queue are held).
    pub fn create_group(&self, name: &str, required: bool) -> Result<()> {
        self.inner.create_group(name, required)
    }

    /// Destroys group `name`, durably: its claims are lost, and events that waited only for
    /// it are settled as the other required groups acknowledged them. After the last group
    /// the READY events go back to the default queue, in their order.
    pub fn destroy_group(&self, name: &str) -> Result<()> {
        self.inner.destroy_group(name)
    }

    /// Every group, in creation order, with its claims, lag and counters.
    pub fn groups(&self) -> Vec<GroupInfo> {
        self.inner.events.groups.list()
    }

    /// The consumers group `name` remembers, most recently seen first.
    pub fn consumers(&self, group: &str) -> Result<Vec<ConsumerInfo>> {
        self.inner.events.groups.consumers(group)
    }

    /// Claims the next event of group `group` for `consumer` for `lease`, without waiting
    /// (see [`Store::next_event`]).
    pub fn next_event_in(
        &self,
        group: &str,
        consumer: &str,
        lease: Duration,
    ) -> Result<Option<Claim>> {
        self.inner.group_next(group, consumer, lease, None)
    }

    /// [`Store::next_event_in`], waiting up to `timeout` for an event.
    pub fn next_event_in_wait(
        &self,
        group: &str,
        consumer: &str,
        lease: Duration,
        timeout: Duration,
    ) -> Result<Option<Claim>> {
        self.inner.group_next(group, consumer, lease, Some(timeout))
    }

    /// Claims an event that group `group` parked as POISONED, by its id.
    pub fn claim_event_in(
        &self,
        group: &str,
        id: &EventId,
        consumer: &str,
        lease: Duration,
    ) -> Result<Claim> {
        // Fix (found in review): a zero lease was taken (and expired at once), where
        // `claim_event` and `next_event` refuse it.
        super::check_claim(consumer, lease)?;
        self.inner.check_event_id(id)?;
        self.inner.check_poisoned()?;
        let g = &self.inner.events.groups;
        let prefix = IndexKey::new(id.as_bytes());
        let (gid, seq, deliveries) = g.pick_poisoned(group, &prefix)?;
        self.inner
            .claim_picked(gid, seq, prefix, deliveries, &consumer.into(), lease)
            .ok_or_else(|| Error::NoSuchEvent(id.to_string()))
    }

    /// Group `group`'s claims held now, oldest first (see [`Store::pending`]).
    pub fn pending_in(&self, group: &str, limit: usize) -> Result<Vec<PendingClaim>> {
        self.inner.events.groups.pending(group, limit)
    }

    /// Acknowledges many claims (of the default queue or of groups, mixed) with one wait for
    /// `durability` at the end: one result per token, in order.
    pub fn ack_many(
        &self,
        tokens: &[ClaimToken],
        ack: Ack,
        durability: Durability,
    ) -> Vec<Result<()>> {
        let (mut results, groups_changed) = self.inner.ack_each(tokens, ack);
        if results.iter().any(|r| r.is_ok()) {
            let done = match durability {
                Durability::Memory if groups_changed => self.inner.persist_groups(false),
                Durability::Memory => Ok(()),
                _ => self.flush(),
            };
            if let Err(e) = done {
                let text = e.to_string();
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(Error::InvalidArgument(format!(
                        "acknowledged in memory, but not made durable: {text}"
                    )));
                }
            }
        }
        results
    }

    /// [`Store::ack_many`] for a caller that calls [`Store::flush`] next, before it reports
    /// the results (the server's group commit): the acknowledgements of groups that do not
    /// settle their event are written by that flush, not once more here.
    pub fn ack_many_then_flush(&self, tokens: &[ClaimToken], ack: Ack) -> Vec<Result<()>> {
        self.inner.ack_each(tokens, ack).0
    }
}

/// Events waiting to leave the groups' acknowledged sets (their records not known durable)
/// at which a `Memory` write of the groups file makes the records durable first.
const DROP_ACKS_AT: usize = 1024;

impl Inner {
    /// Each token acknowledged in memory; true if the groups file changed (not written).
    fn ack_each(&self, tokens: &[ClaimToken], ack: Ack) -> (Vec<Result<()>>, bool) {
        let mut groups_changed = false;
        let results = tokens
            .iter()
            .map(|t| {
                if t.group == 0 {
                    self.ack(t, ack, Durability::Memory)
                } else {
                    let r = self.group_ack(t, ack, Durability::Memory, false);
                    groups_changed |= r.as_ref().is_ok_and(|recorded| *recorded);
                    r.map(|_| ())
                }
            })
            .collect();
        (results, groups_changed)
    }

    /// Refuses a claim of the default queue while the store has groups.
    pub(crate) fn check_no_groups(&self) -> Result<()> {
        if self.events.groups.active() {
            return Err(Error::InvalidArgument(format!(
                "this store has consumer groups ({}): a claim names its group \
                 (next_event_in, EVENT.NEXT ... GROUP name)",
                self.events.groups.names()
            )));
        }
        Ok(())
    }

    /// The events OPEN now (at open: those whose READY state was not durable).
    pub(crate) fn open_events(&self) -> Vec<IndexKey> {
        let mut open = Vec::new();
        for shard in self.index.shards() {
            shard.write().events.entries.for_each_mut(|prefix, e| {
                if e.state == State::Open {
                    open.push(prefix.clone());
                }
            });
        }
        open
    }

    /// Writes the groups file if it changed (`sync`: durably). First, if `sync` and some
    /// groups' acknowledgements wait for durability, or once many wait, makes every record
    /// durable and drops them (see `Groups::take_left_log`): one sync per [`DROP_ACKS_AT`]
    /// events for a store acknowledging in `Memory` only.
    pub(crate) fn persist_groups(&self, sync: bool) -> Result<()> {
        let g = &self.events.groups;
        let waiting = g.left_log_len();
        if (sync && waiting > 0) || waiting >= DROP_ACKS_AT {
            return self.persist_records_and_groups(sync);
        }
        g.persist(&*self.tiers[0].medium, sync)
    }

    /// Makes every record durable, drops the groups' acknowledgements that waited for it,
    /// then writes the groups file if it changed (`sync`: durably). `Store::flush`.
    pub(crate) fn persist_records_and_groups(&self, sync: bool) -> Result<()> {
        let g = &self.events.groups;
        let left = g.take_left_log();
        if let Err(e) = self.persist_all() {
            g.put_back_left_log(left);
            return Err(e);
        }
        g.drop_acks_of(&left);
        g.persist(&*self.tiers[0].medium, sync)
    }

    fn create_group(&self, name: &str, required: bool) -> Result<()> {
        self.check_poisoned()?;
        let ev = &self.events;
        ev.track(&self.index);
        let _admin = ev.groups.admin.lock();
        ev.groups.check_new(name)?;
        if ev.groups.active() {
            ev.groups.add(name, required, Vec::new());
        } else {
            // Every shard locked: no event becomes READY or is claimed meanwhile.
            let mut shards: Vec<_> = self.index.shards().iter().map(|s| s.write()).collect();
            let claimed = ev.claimed_now();
            if claimed > 0 {
                return Err(Error::InvalidArgument(format!(
                    "{claimed} claim(s) of the default queue are held: acknowledge or release \
                     them (or let their leases end) before creating the first group"
                )));
            }
            let mut ready = Vec::new();
            for (no, shard) in shards.iter_mut().enumerate() {
                let sh = &mut **shard;
                while let Some((prefix, e)) = ev.pop_ready(&sh.keys, &mut sh.events, no) {
                    ready.push((e.seq, prefix));
                }
                // The default queue's poisoned events are READY for the groups (each group
                // counts its own deliveries).
                sh.events.entries.for_each_mut(|prefix, e| {
                    if e.state == State::Poisoned {
                        ev.leave_state(e);
                        e.state = State::Ready;
                        ev.enter_state(e);
                        ready.push((e.seq, prefix.clone()));
                    }
                });
            }
            ready.sort_by_key(|(seq, _)| *seq);
            ev.groups.add(name, required, ready);
        }
        if let Err(e) = self.persist_groups(true) {
            // Not durable: not created.
            let _ = self.drop_group(name);
            return Err(e);
        }
        // Waiters of the default queue are answered now (claims go through groups), not at
        // their clock's next look (found in review).
        ev.notify_waiters();
        Ok(())
    }

    fn destroy_group(&self, name: &str) -> Result<()> {
        self.check_poisoned()?;
        let _admin = self.events.groups.admin.lock();
        let settled = self.drop_group(name)?;
        self.persist_groups(true)?;
        for prefix in settled {
            self.settle_event(&prefix)?;
        }
        Ok(())
    }

    /// Takes group `name` out of memory; returns the events that now wait for no group.
    fn drop_group(&self, name: &str) -> Result<Vec<IndexKey>> {
        let ev = &self.events;
        // Every shard locked, in case this is the last group: no event may become READY
        // between the log's return to the queues and the switch.
        let mut shards: Vec<_> = self.index.shards().iter().map(|s| s.write()).collect();
        let (settled, log) = ev.groups.remove(name)?;
        for (seq, prefix) in log.unwrap_or_default() {
            let no = self.index.event_shard_no(&prefix.as_bytes());
            ev.requeue(&mut shards[no].events, no, seq, prefix);
        }
        drop(shards);
        ev.notify_waiters();
        Ok(settled)
    }

    /// Writes the record of event `prefix` if every required group acknowledged it.
    pub(crate) fn settle_event(&self, prefix: &IndexKey) -> Result<()> {
        let g = &self.events.groups;
        let written = Cell::new(false);
        while let Some(what) = g.settled_as(prefix) {
            let retry = Cell::new(false);
            self.write_event_record(&prefix.as_bytes(), what, Durability::Persisted, |e| {
                if e.is_none() {
                    // Gone by key removals, perhaps not durable ones: `forget` waits for them.
                    g.forget(prefix);
                    return Ok(false);
                }
                let taken = g.take_settled(prefix, what);
                retry.set(!taken && g.settled_as(prefix).is_some());
                written.set(taken);
                Ok(taken)
            })?;
            if !retry.get() {
                break;
            }
        }
        // Fix (found in review): also when no record was written (the event vanished by
        // removals that may not be durable), which bypassed the wait for durability.
        if written.get() {
            g.settled_durably(prefix);
        }
        Ok(())
    }

    /// Acknowledges a group's claim. The last required acknowledgement writes the event's
    /// record (durable as asked); the others are recorded in the groups file, written now
    /// if `persist` (else the caller writes it). Returns true if the file changed.
    pub(crate) fn group_ack(
        &self,
        token: &ClaimToken,
        ack: Ack,
        durability: Durability,
        persist: bool,
    ) -> Result<bool> {
        self.check_poisoned()?;
        self.check_event_id(&token.event)?;
        let ev = &self.events;
        let g = &ev.groups;
        let prefix = token.event.as_bytes();
        let lost_or_acked = |e: Error| match e {
            Error::ClaimLost { .. } if ev.is_acked(prefix) => {
                Error::EventAcknowledged(token.event.to_string())
            }
            e => e,
        };
        loop {
            ev.sweep(&self.index, Instant::now());
            match g.would_settle(token, ack).map_err(lost_or_acked)? {
                None => {
                    // Under the event's shard lock: a concurrent settling record is written
                    // before or after, never between.
                    let shard = self.index.event_shard(prefix).read();
                    let r = g.settle(token, ack, None).map_err(lost_or_acked)?;
                    drop(shard);
                    match r {
                        Settled::Retry => continue,
                        _ => {
                            if persist {
                                self.persist_groups(durability != Durability::Memory)?;
                            }
                            return Ok(true);
                        }
                    }
                }
                Some(what) => {
                    let retry = Cell::new(false);
                    self.write_event_record(prefix, what, durability, |e| {
                        if !e.is_some_and(|e| e.state == State::Ready) {
                            g.forget(&IndexKey::new(prefix));
                            return Err(Error::NoSuchEvent(token.event.to_string()));
                        }
                        match g.settle(token, ack, Some(what))? {
                            Settled::Last => Ok(true),
                            _ => {
                                retry.set(true);
                                Ok(false)
                            }
                        }
                    })
                    .map_err(lost_or_acked)?;
                    if retry.get() {
                        continue;
                    }
                    let prefix = IndexKey::new(prefix);
                    if durability == Durability::Memory {
                        g.settled_in_memory(&prefix);
                    } else {
                        g.settled_durably(&prefix);
                    }
                    return Ok(false);
                }
            }
        }
    }

    pub(crate) fn group_release(&self, token: &ClaimToken) -> Result<()> {
        let ev = &self.events;
        ev.groups.release(token).map_err(|e| match e {
            Error::ClaimLost { .. } if ev.is_acked(token.event.as_bytes()) => {
                Error::EventAcknowledged(token.event.to_string())
            }
            e => e,
        })?;
        ev.notify_waiters();
        Ok(())
    }

    /// Claims the next event of `group` for `consumer`; waits up to `wait` for one.
    pub(crate) fn group_next(
        self: &Arc<Self>,
        group: &str,
        consumer: &str,
        lease: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<Claim>> {
        let ev = &self.events;
        let deadline = wait.map(crate::clock::from_now);
        let consumer: Arc<str> = consumer.into();
        loop {
            let due = match self.group_next_step(group, &consumer, lease)? {
                Step::Claimed(c) => return Ok(Some(c)),
                Step::Empty(due) => due,
            };
            let Some(deadline) = deadline else {
                return Ok(None);
            };
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let until = due.map_or(deadline, |t| t.min(deadline));
            ev.wait_while(until, || !ev.groups.has_work(group));
        }
    }

    /// One attempt of [`Inner::group_next`], without waiting: the claim, or when a timeout
    /// or lease may give the group an event.
    pub(crate) fn group_next_step(
        self: &Arc<Self>,
        group: &str,
        consumer: &Arc<str>,
        lease: Duration,
    ) -> Result<Step> {
        super::check_claim(consumer, lease)?;
        self.check_poisoned()?;
        let ev = &self.events;
        ev.track(&self.index);
        loop {
            let next_timer = ev.sweep(&self.index, Instant::now());
            let (gid, picked, next_lease) = ev.groups.pick(group)?;
            if let Some((seq, prefix, deliveries)) = picked {
                if let Some(c) = self.claim_picked(gid, seq, prefix, deliveries, consumer, lease) {
                    return Ok(Step::Claimed(c));
                }
                continue;
            }
            let due = match (next_timer, next_lease) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return Ok(Step::Empty(due));
        }
    }

    /// Makes event `prefix` (log number `seq`, picked for group `gid`) CLAIMED by
    /// `consumer`, if it is still READY; `None` if it is gone (it leaves the log).
    pub(crate) fn claim_picked(
        self: &Arc<Self>,
        gid: u32,
        seq: u64,
        prefix: IndexKey,
        deliveries: u8,
        consumer: &Arc<str>,
        lease: Duration,
    ) -> Option<Claim> {
        let ev = &self.events;
        let mut shard = self.index.event_shard(&prefix.as_bytes()).write();
        let sh = &mut *shard;
        ev.materialize(&sh.keys, &mut sh.events, &prefix.as_bytes());
        let Some(e) = sh
            .events
            .entries
            .get(&prefix)
            .filter(|e| e.state == State::Ready)
        else {
            drop(shard);
            ev.groups.forget(&prefix);
            return None;
        };
        let (fragments, bytes, incomplete) = (e.fragments, e.bytes, e.incomplete);
        let claim = ev.claim_number();
        if !ev
            .groups
            .record_claim(gid, seq, &prefix, deliveries, claim, consumer, lease)
        {
            return None;
        }
        drop(shard);
        Some(Claim {
            inner: self.clone(),
            token: ClaimToken {
                event: EventId::from_prefix(&prefix.as_bytes()),
                claim,
                group: gid,
            },
            fragments,
            bytes,
            incomplete,
            lease_until: crate::clock::from_now(lease),
            settled: false,
        })
    }
}
