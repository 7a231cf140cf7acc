//! The event calls of [`Store`]: read an event, seal it, claim the next one, acknowledge,
//! list events, and set policies.

use super::acked::successor;
use super::claims::Step;
use super::records::EventWrite;
use super::{
    Ack, Claim, ClaimToken, EventId, EventInfo, EventPolicy, PendingClaim, MAX_DELIVERIES,
};
use crate::error::{Error, Result};
use crate::index::{self, IndexKey};
use crate::options::Durability;
use crate::store::{Inner, Pinned, Store, PINNED_MAX};
use arrayvec::ArrayVec;
use std::ops::Bound;
use std::time::{Duration, Instant};

/// What [`Store::poll_next_event`] found.
#[derive(Debug)]
pub enum NextEvent {
    /// An event, claimed.
    Claimed(Claim),
    /// Nothing to claim now. Look again when a listener is called, or at `look_again_at`
    /// (an event's timeout or a claim's lease ends then), whichever comes first.
    Empty {
        /// When a timeout or lease may make an event claimable (None: none pending).
        look_again_at: Option<Instant>,
    },
}

/// A listener added with [`Store::add_event_listener`]; dropped, it is no longer called.
pub struct EventListener {
    inner: std::sync::Arc<Inner>,
    id: u64,
}

impl Drop for EventListener {
    fn drop(&mut self) {
        self.inner.events.remove_listener(self.id);
    }
}

impl std::fmt::Debug for EventListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EventListener({})", self.id)
    }
}

/// A waiter registered with [`Store::event_interest`]; dropped, it no longer counts.
pub struct EventInterest {
    inner: std::sync::Arc<Inner>,
}

impl Drop for EventInterest {
    fn drop(&mut self) {
        self.inner.events.remove_waiter();
    }
}

impl std::fmt::Debug for EventInterest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventInterest")
    }
}

/// Fragments of an event found per visit of its index shard when it is read (on the stack,
/// with at most as many segments pinned).
const READ_BATCH: usize = 16;
const _: () = assert!(READ_BATCH <= PINNED_MAX);

impl Store {
    /// All fragments (key, value) of the event `id`, in key order (empty if it has none).
    pub fn event(&self, id: &EventId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.check_event_id(id)?;
        self.inner.event_fragments(id.as_bytes())
    }

    /// Seals the event: its producer says no more fragments will come, so it is READY now
    /// (complete, whatever the policy expected). Durable as asked. Sealing twice is a no-op;
    /// sealing an event without fragments is [`Error::NoSuchEvent`], an acknowledged one
    /// [`Error::EventAcknowledged`].
    pub fn seal(&self, id: &EventId, durability: Durability) -> Result<()> {
        self.inner
            .write_event_record(id.as_bytes(), EventWrite::Seal, durability, |e| match e {
                // Fix (found in review): a retrying producer was told its consumed event
                // did not exist, as if its data were lost.
                None if self.inner.events.is_acked(id.as_bytes()) => {
                    Err(Error::EventAcknowledged(id.to_string()))
                }
                None => Err(Error::NoSuchEvent(id.to_string())),
                Some(e) if matches!(e.state, super::State::Kept) => {
                    Err(Error::EventAcknowledged(id.to_string()))
                }
                Some(e) => Ok(!e.sealed),
            })
    }

    /// Claims the oldest READY event for `consumer` for `lease`, without waiting: `None` if no
    /// event is READY. No other consumer gets the event while the lease holds.
    pub fn next_event(&self, consumer: &str, lease: Duration) -> Result<Option<Claim>> {
        self.inner.next_event(consumer, lease, None)
    }

    /// [`Store::next_event`], waiting up to `timeout` for an event to become READY.
    pub fn next_event_wait(
        &self,
        consumer: &str,
        lease: Duration,
        timeout: Duration,
    ) -> Result<Option<Claim>> {
        self.inner.next_event(consumer, lease, Some(timeout))
    }

    /// One attempt to claim the next event (of group `group`, or of the default queue), for a
    /// caller that waits its own way (an async task) instead of blocking a thread in
    /// [`Store::next_event_wait`]. Such a caller holds an [`EventInterest`] while it waits, so
    /// the store calls its listeners ([`Store::add_event_listener`]) when an event may have
    /// become claimable, and looks again when told, or at [`NextEvent::Empty`]'s time, when
    /// a timeout or lease ends (nobody is told of those: they are found by looking).
    pub fn poll_next_event(
        &self,
        group: Option<&str>,
        consumer: &str,
        lease: Duration,
    ) -> Result<NextEvent> {
        let consumer: std::sync::Arc<str> = consumer.into();
        let step = match group {
            Some(g) => self.inner.group_next_step(g, &consumer, lease)?,
            None => self.inner.next_event_step(&consumer, lease)?,
        };
        Ok(match step {
            Step::Claimed(c) => NextEvent::Claimed(c),
            Step::Empty(at) => NextEvent::Empty { look_again_at: at },
        })
    }

    /// Adds `listener`, called when an event may have become claimable (READY, released,
    /// given back, a group dropped) while an [`EventInterest`] is held; not called otherwise,
    /// so a producer pays nothing when nobody waits. It runs on the thread making the change,
    /// under the store's locks: it must be short and must not call the store (wake a task).
    /// Called until the returned guard is dropped. At most
    /// [`MAX_EVENT_LISTENERS`](crate::MAX_EVENT_LISTENERS) at once, past it
    /// [`Error::InvalidArgument`].
    pub fn add_event_listener(
        &self,
        listener: impl Fn() + Send + Sync + 'static,
    ) -> Result<EventListener> {
        let id = self
            .inner
            .events
            .add_listener(std::sync::Arc::new(listener))?;
        Ok(EventListener {
            inner: self.inner.clone(),
            id,
        })
    }

    /// Registers a waiter: while the returned guard lives, the listeners are called (see
    /// [`Store::add_event_listener`]). Take it before the [`Store::poll_next_event`] that
    /// found nothing, so a change after that look is never missed.
    pub fn event_interest(&self) -> EventInterest {
        self.inner.events.add_waiter();
        EventInterest {
            inner: self.inner.clone(),
        }
    }

    /// Acknowledges a claim by its token (see [`Claim::into_token`]). `Remove` deletes every
    /// fragment of the event as one record; `Keep` keeps it stored and never offers it again.
    /// [`Error::ClaimLost`] if the claim is no longer held.
    pub fn ack(&self, token: &ClaimToken, ack: Ack, durability: Durability) -> Result<()> {
        self.inner.ack(token, ack, durability)
    }

    /// Gives a claimed event back (READY again, in its old place). [`Error::ClaimLost`] if the
    /// claim is no longer held.
    pub fn release(&self, token: &ClaimToken) -> Result<()> {
        self.inner.release(token)
    }

    /// Claims a POISONED event by its id (one parked after the maximum number of
    /// deliveries, see [`Store::set_max_deliveries`]), to inspect or acknowledge it. Any other
    /// state is [`Error::InvalidArgument`]; an unknown event [`Error::NoSuchEvent`].
    pub fn claim_event(&self, id: &EventId, consumer: &str, lease: Duration) -> Result<Claim> {
        self.inner.claim_event(id, consumer, lease)
    }

    /// Parks events delivered `max` times without an acknowledgement as POISONED instead of
    /// offering them again (0: never park, the default). Counted in memory, like leases: after
    /// a restart a parked event is READY again and its count starts at 0. Deliveries are
    /// counted up to [`MAX_DELIVERIES`]; a larger `max` is [`Error::InvalidArgument`].
    pub fn set_max_deliveries(&self, max: u32) -> Result<()> {
        // Fix (found in review): the count saturates at 255, so a larger maximum was never
        // reached and nothing was ever parked.
        if max > MAX_DELIVERIES {
            return Err(Error::InvalidArgument(format!(
                "max deliveries {max} is over {MAX_DELIVERIES}, the most an event's deliveries are counted to"
            )));
        }
        let ev = &self.inner.events;
        ev.max_deliveries
            .store(max, std::sync::atomic::Ordering::Relaxed);
        ev.groups
            .max_deliveries
            .store(max, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Up to `limit` claims held now, oldest claim first: who holds each, for how long, the
    /// time left on its lease and how many times its event was delivered (an event that
    /// keeps coming back is one its consumers fail on).
    pub fn pending(&self, limit: usize) -> Vec<PendingClaim> {
        let inner = &self.inner;
        inner.events.sweep(&inner.index, Instant::now());
        let now = Instant::now();
        let mut out = Vec::new();
        for shard in inner.index.shards() {
            let shard = shard.read();
            for (k, e) in &shard.events.entries {
                let (super::State::Claimed, Some(h)) = (&e.state, &e.holder) else {
                    continue;
                };
                out.push((
                    h.since,
                    PendingClaim {
                        token: ClaimToken {
                            event: EventId::from_prefix(&k.as_bytes()),
                            claim: h.claim,
                            group: 0,
                        },
                        consumer: h.consumer.to_string(),
                        held: now.saturating_duration_since(h.since),
                        lease_left: h.until.saturating_duration_since(now),
                        deliveries: u32::from(e.deliveries),
                    },
                ));
            }
        }
        out.sort_by_key(|(since, p)| (*since, p.token.claim));
        out.into_iter().take(limit).map(|(_, p)| p).collect()
    }

    /// How long the oldest READY event of the default queue has waited for a consumer
    /// (`None`: none is READY, or the store has groups: see [`Store::groups`]). An upper
    /// bound, exact to within about 1024 READY numbers (lsns): the clock is read once per 1024.
    /// Recovered events count from the reopen.
    pub fn oldest_ready_age(&self) -> Option<Duration> {
        self.inner.events.oldest_ready_age()
    }

    /// Up to `limit` events with `from <= id < to` (`to = None`: to the end), in id order, each
    /// with its state, fragment count and bytes.
    pub fn events(&self, from: &EventId, to: Option<&EventId>, limit: usize) -> Vec<EventInfo> {
        let inner = &self.inner;
        inner.events.track(&inner.index);
        inner.events.sweep(&inner.index, Instant::now());
        let upper = match to {
            Some(t) => Bound::Excluded(t.as_bytes()),
            None => Bound::Unbounded,
        };
        // Fix (found in review): a limit of 0 walked every key of the store to list nothing.
        if to.is_some_and(|t| t < from) || limit == 0 {
            return Vec::new();
        }
        // Implicit READY events have no entry (see `ShardEvents`): walk each shard's fragment
        // keys from `from` and list the event of each new prefix, at most `limit` per shard.
        let plen = inner.events.prefix_len;
        let flen = inner.events.fragment_len;
        let mut out: Vec<EventInfo> = Vec::new();
        for shard in inner.index.shards() {
            let shard = shard.read();
            let mut listed = 0;
            let mut last: Option<Vec<u8>> = None;
            for (k, _) in shard.keys.range(IndexKey::new(from.as_bytes())..) {
                let k = k.as_bytes();
                if k.len() != flen || last.as_deref() == Some(&k[..plen]) {
                    continue;
                }
                let prefix = &k[..plen];
                if matches!(upper, Bound::Excluded(u) if prefix >= u) {
                    break;
                }
                last = Some(prefix.to_vec());
                if let Some(info) = inner.events.info_in(&shard.keys, &shard.events, prefix) {
                    out.push(info);
                    listed += 1;
                    if listed == limit {
                        break;
                    }
                }
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.truncate(limit);
        out
    }

    /// The events of run `run` (default layout) with `from <= event < to`, as [`Store::events`].
    pub fn events_in_run(
        &self,
        run: u32,
        from: u64,
        to: Option<u64>,
        limit: usize,
    ) -> Vec<EventInfo> {
        let to = match to {
            Some(t) => Some(EventId::new(run, t)),
            None => run.checked_add(1).map(|r| EventId::new(r, 0)),
        };
        self.events(&EventId::new(run, from), to.as_ref(), limit)
    }

    /// The state of one event, if it has fragments.
    pub fn event_info(&self, id: &EventId) -> Option<EventInfo> {
        let inner = &self.inner;
        if inner.check_event_id(id).is_err() {
            return None;
        }
        inner.events.track(&inner.index);
        inner.events.sweep(&inner.index, Instant::now());
        let shard = inner.index.event_shard(id.as_bytes()).read();
        inner
            .events
            .info_in(&shard.keys, &shard.events, id.as_bytes())
    }

    /// Starts keeping event state now, if the store does not yet (see the `events` module:
    /// a store starts untracked unless it already uses events, and the first event call
    /// starts tracking). For producers that want `stats().events` to count events before any
    /// consumer claims one: from this call on every fragment put is accounted to its event.
    /// Costs one pass over the keys the first time, one atomic load after.
    pub fn track_events(&self) {
        self.inner.events.track(&self.inner.index);
    }

    /// True once the store keeps event state (the pass of [`Store::track_events`] is done):
    /// an event call then costs no pass over the keys. A server checks it to run the first
    /// pass off its request threads.
    pub fn events_tracked(&self) -> bool {
        self.inner.events.is_tracked()
    }

    /// The policy that applies to events of `run` (the layout's first field).
    pub fn event_policy(&self, run: Option<u64>) -> EventPolicy {
        // Reading a policy is not a use of events: no tracking starts here.
        self.inner.events.policies.read().for_run(run)
    }

    /// Sets the store-wide event policy, durably. OPEN events that it makes complete become
    /// READY at once; a new timeout applies to events opened after this call.
    pub fn set_event_policy(&self, policy: EventPolicy) -> Result<()> {
        policy.validate()?;
        self.inner.update_policies(|p| {
            p.default = policy;
            Ok(())
        })
    }

    /// Overrides the policy for one run (`None` removes the override), durably. At most
    /// [`MAX_RUN_POLICIES`](crate::MAX_RUN_POLICIES) runs have one: a new run past it is
    /// refused (remove the override of a finished run first).
    pub fn set_run_policy(&self, run: u64, policy: Option<EventPolicy>) -> Result<()> {
        if let Some(p) = &policy {
            p.validate()?;
        }
        self.inner.update_policies(|p| {
            match policy {
                Some(_)
                    if p.runs.len() >= super::MAX_RUN_POLICIES && !p.runs.contains_key(&run) =>
                {
                    return Err(Error::InvalidArgument(format!(
                        "run {run}: {} runs have a policy of their own, the most a store keeps; \
                         remove the override of a finished run first",
                        p.runs.len()
                    )))
                }
                Some(policy) => p.runs.insert(run, policy),
                None => p.runs.remove(&run),
            };
            Ok(())
        })
    }
}

impl Inner {
    pub(crate) fn check_event_id(&self, id: &EventId) -> Result<()> {
        if id.as_bytes().len() != self.events.prefix_len {
            return Err(Error::InvalidArgument(format!(
                "an event id of this store is {} bytes (layout `{}`), not {}",
                self.events.prefix_len,
                self.layout,
                id.as_bytes().len()
            )));
        }
        Ok(())
    }

    /// The fragment keys of event `prefix` as index bounds.
    fn event_bounds(prefix: &[u8]) -> (Bound<&[u8]>, Option<Box<[u8]>>) {
        (Bound::Included(prefix), successor(prefix))
    }

    /// Calls `f` with each fragment of event `prefix`, in key order. The fragments are found
    /// under the shard's lock, up to [`READ_BATCH`] at a time with their segments pinned, and
    /// read (checksums, the callback) after it is released: a writer of the same shard does
    /// not wait for a consumer's reading, and the callback may call the store. A fragment
    /// stored meanwhile is seen if its key lies past the batch being read.
    pub(crate) fn for_each_event_fragment(
        &self,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        let (lower, upper) = Self::event_bounds(prefix);
        let upper = index::bound(match &upper {
            Some(u) => Bound::Excluded(&**u),
            None => Bound::Unbounded,
        });
        let mut from = index::bound(lower);
        loop {
            let mut pinned = Pinned::new(self);
            let batch: ArrayVec<(IndexKey, usize, u32, u32), READ_BATCH> = {
                let shard = self.index.event_shard(prefix).read();
                shard
                    .keys
                    .range((from, upper.clone()))
                    .filter(|(k, _)| k.as_bytes().len() == self.events.fragment_len)
                    .take(READ_BATCH)
                    .map(|(k, loc)| (k.clone(), pinned.pin(&loc.seg), loc.offset, loc.value_len))
                    .collect()
            };
            for (k, seg, offset, value_len) in &batch {
                let key = k.as_bytes();
                // Safety: each fragment was live under the shard lock when its segment was
                // pinned, and `pinned` outlives the read.
                let value =
                    unsafe { self.read_record(&key, pinned.segment(*seg), *offset, *value_len)? };
                f(&key, value);
            }
            match batch.last() {
                Some((last, ..)) if batch.is_full() => from = Bound::Excluded(last.clone()),
                _ => return Ok(()),
            }
        }
    }

    pub(crate) fn event_fragments(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.for_each_event_fragment(prefix, |k, v| out.push((k.to_vec(), v.to_vec())))?;
        Ok(out)
    }

    /// Applies `change` (which may refuse it) to the policies, durably.
    fn update_policies(
        &self,
        change: impl FnOnce(&mut super::policy::Policies) -> Result<()>,
    ) -> Result<()> {
        // Entries built now follow the old policy; the pass below applies the new one.
        self.events.track(&self.index);
        {
            let _serial = self.events.policy_change.lock();
            let mut next = self.events.policies.read().clone();
            change(&mut next)?;
            next.store(&*self.tiers[0].medium)?;
            self.events.set_policies(next);
        }
        // OPEN events the new policy completes become READY.
        for (no, shard) in self.index.shards().iter().enumerate() {
            let mut shard = shard.write();
            let super::ShardEvents { entries, ready, .. } = &mut shard.events;
            entries.for_each_mut(|k, e| {
                if matches!(e.state, super::State::Open) {
                    let expected = self.events.policy_for(&k.as_bytes()).expected_fragments;
                    if expected > 0 && e.fragments >= expected {
                        self.events.make_ready(ready, no, e, &k.as_bytes(), false);
                    }
                }
            });
        }
        Ok(())
    }
}
