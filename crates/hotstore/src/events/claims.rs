//! Claims: `next_event` leases one READY event to one consumer; the claim is settled by an
//! acknowledgement (`Remove` or `Keep`, durable) or given back (`release`, a dropped [`Claim`],
//! an expired lease), which makes the event READY again in its old place.

use super::records::EventWrite;
use super::{EventId, State};
use crate::error::{Error, Result};
use crate::index::IndexKey;
use crate::options::Durability;
use crate::store::Inner;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a consumer settles a claimed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Delete every fragment of the event (one atomic record); the event never comes back.
    Remove,
    /// Keep the fragments stored (e.g. for export); the event is never offered again.
    Keep,
}

/// Names one claim on one event: what `ack` and `release` take. Printable and parseable
/// (`<event prefix hex>:<claim number>`, and `:<group id>` for a group's claim) so a server
/// can hand it to a remote consumer.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClaimToken {
    /// The claimed event.
    pub event: EventId,
    /// The claim's number (unique within one open store).
    pub claim: u64,
    /// The consumer group that holds it (its id, never reused); 0 for the default queue.
    pub group: u32,
}

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", super::hex(self.event.as_bytes()), self.claim)?;
        if self.group != 0 {
            write!(f, ":{}", self.group)?;
        }
        Ok(())
    }
}

impl fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClaimToken({self})")
    }
}

impl FromStr for ClaimToken {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidArgument(format!(
                "`{s}` is not a claim token (hex:number or hex:number:group)"
            ))
        };
        let (prefix, rest) = s.split_once(':').ok_or_else(bad)?;
        let (claim, group) = match rest.split_once(':') {
            Some((c, g)) => (c, g.parse().map_err(|_| bad())?),
            None => (rest, 0),
        };
        let prefix = super::unhex(prefix)
            .filter(|p| !p.is_empty())
            .ok_or_else(bad)?;
        Ok(ClaimToken {
            event: EventId::from_prefix(&prefix),
            claim: claim.parse().map_err(|_| bad())?,
            group,
        })
    }
}

/// An exclusive claim on one READY event. Settle it with [`Claim::ack`] or
/// [`Claim::release`]; dropping it unsettled releases it (the event is READY again at once).
/// [`Claim::into_token`] detaches it: the lease alone then bounds it.
pub struct Claim {
    pub(crate) inner: Arc<Inner>,
    pub(crate) token: ClaimToken,
    pub(crate) fragments: u32,
    pub(crate) bytes: u64,
    pub(crate) incomplete: bool,
    pub(crate) lease_until: Instant,
    pub(crate) settled: bool,
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim")
            .field("token", &self.token)
            .field("fragments", &self.fragments)
            .field("bytes", &self.bytes)
            .field("incomplete", &self.incomplete)
            .finish()
    }
}

impl Claim {
    /// The claim's token.
    pub fn token(&self) -> &ClaimToken {
        &self.token
    }
    /// The claimed event.
    pub fn event(&self) -> &EventId {
        &self.token.event
    }
    /// Fragments stored when it was claimed.
    pub fn fragment_count(&self) -> u32 {
        self.fragments
    }
    /// Bytes of fragment values when it was claimed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// True if it became READY by its timeout, before the expected fragments arrived.
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }
    /// When the lease ends (after that, acknowledging fails with `ClaimLost`).
    pub fn lease_until(&self) -> Instant {
        self.lease_until
    }

    /// The event's fragments (key, value), in key order.
    pub fn fragments(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.event_fragments(self.token.event.as_bytes())
    }

    /// Calls `f` with each fragment (key, value) in key order, in place (no copy).
    pub fn for_each_fragment(&self, f: impl FnMut(&[u8], &[u8])) -> Result<()> {
        self.inner
            .for_each_event_fragment(self.token.event.as_bytes(), f)
    }

    /// Acknowledges durably (`Persisted`).
    pub fn ack(self, ack: Ack) -> Result<()> {
        self.ack_with(ack, Durability::Persisted)
    }

    /// Acknowledges with the given durability.
    pub fn ack_with(mut self, ack: Ack, durability: Durability) -> Result<()> {
        self.settled = true;
        self.inner.ack(&self.token, ack, durability)
    }

    /// Gives the event back: READY again, in its old place.
    pub fn release(mut self) -> Result<()> {
        self.settled = true;
        self.inner.release(&self.token)
    }

    /// Detaches the claim from this handle: dropping the token does not release the event;
    /// settle it with `Store::ack` / `Store::release`, or let the lease expire.
    pub fn into_token(mut self) -> ClaimToken {
        self.settled = true;
        self.token.clone()
    }
}

/// What one attempt to claim found.
pub(crate) enum Step {
    /// An event, claimed.
    Claimed(Claim),
    /// Nothing to claim now; a timeout or lease may make an event READY at this time.
    Empty(Option<Instant>),
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.settled {
            // Already expired or settled elsewhere: nothing to give back.
            let _ = self.inner.release(&self.token);
        }
    }
}

impl Inner {
    /// Claims the oldest READY event for `consumer` for `lease`; waits up to `wait` for one.
    pub(crate) fn next_event(
        self: &Arc<Self>,
        consumer: &str,
        lease: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<Claim>> {
        let deadline = wait.map(crate::clock::from_now);
        let consumer: Arc<str> = consumer.into();
        loop {
            let next_timer = match self.next_event_step(&consumer, lease)? {
                Step::Claimed(c) => return Ok(Some(c)),
                Step::Empty(next_timer) => next_timer,
            };
            let Some(deadline) = deadline else {
                return Ok(None);
            };
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let until = next_timer.map_or(deadline, |t| t.min(deadline));
            self.events.wait_ready(until);
        }
    }

    /// One attempt of [`Inner::next_event`], without waiting: the claim, or when a timeout
    /// or lease may make an event READY.
    pub(crate) fn next_event_step(
        self: &Arc<Self>,
        consumer: &Arc<str>,
        lease: Duration,
    ) -> Result<Step> {
        super::check_claim(consumer, lease)?;
        self.check_poisoned()?;
        self.check_no_groups()?;
        let ev = &self.events;
        ev.track(&self.index);
        loop {
            let next_timer = ev.sweep(&self.index, Instant::now());
            let Some(no) = ev.oldest_ready_shard() else {
                return Ok(Step::Empty(next_timer));
            };
            let mut shard = self.index.shards()[no].write();
            // Another consumer may have emptied this queue since: look again.
            let shard = &mut *shard;
            let Some((prefix, e)) = ev.pop_ready(&shard.keys, &mut shard.events, no) else {
                continue;
            };
            let id = EventId::from_prefix(&prefix.as_bytes());
            return Ok(Step::Claimed(self.take_claim(
                e,
                id,
                consumer.clone(),
                lease,
            )));
        }
    }

    /// Settles a claim with an acknowledgement, durably as asked.
    pub(crate) fn ack(&self, token: &ClaimToken, ack: Ack, durability: Durability) -> Result<()> {
        if token.group != 0 {
            return self.group_ack(token, ack, durability, true).map(|_| ());
        }
        // Expired leases are noticed here too, not only by the next claim: a claim past its
        // lease is lost even if nothing else ran since.
        self.events.sweep(&self.index, Instant::now());
        let what = match ack {
            Ack::Remove => EventWrite::Remove,
            Ack::Keep => EventWrite::Keep,
        };
        self.write_event_record(token.event.as_bytes(), what, durability, |e| match e {
            Some(e) if e.claimed_by(token.claim) => Ok(true),
            Some(e) if matches!(e.state, State::Kept) => Err(already_acked(token)),
            _ if self.events.is_acked(token.event.as_bytes()) => Err(already_acked(token)),
            _ => Err(claim_lost(token)),
        })
    }

    /// Gives a claimed event back: READY again, in its old place.
    pub(crate) fn release(&self, token: &ClaimToken) -> Result<()> {
        if token.group != 0 {
            return self.group_release(token);
        }
        self.events.sweep(&self.index, Instant::now());
        let p = token.event.as_bytes();
        if p.len() != self.events.prefix_len {
            return Err(claim_lost(token));
        }
        self.events.track(&self.index);
        let no = self.index.event_shard_no(p);
        let probe = IndexKey::new(p);
        let mut shard = self.index.shards()[no].write();
        let super::ShardEvents { entries, ready, .. } = &mut shard.events;
        let Some(e) = entries.get_mut(&probe) else {
            return Err(if self.events.is_acked(p) {
                already_acked(token)
            } else {
                claim_lost(token)
            });
        };
        if matches!(e.state, State::Kept) {
            return Err(already_acked(token));
        }
        if !e.claimed_by(token.claim) {
            return Err(claim_lost(token));
        }
        self.events.count_released();
        if e.fragments == 0 {
            // Its fragments were removed one by one while it was claimed: nothing to offer.
            if let Some(entry) = entries.remove(&probe) {
                self.events.leave_state(&entry);
                if let Some(m) = entry.mark {
                    self.retire(&m.seg, m.rec_len);
                }
            }
            return Ok(());
        }
        self.events.give_back(ready, no, e, p);
        Ok(())
    }

    /// Claims event `prefix` by its id: only a POISONED one (the others are claimed in READY
    /// order by `next_event`).
    pub(crate) fn claim_event(
        self: &Arc<Self>,
        id: &EventId,
        consumer: &str,
        lease: Duration,
    ) -> Result<Claim> {
        super::check_claim(consumer, lease)?;
        self.check_event_id(id)?;
        self.check_poisoned()?;
        self.check_no_groups()?;
        let ev = &self.events;
        ev.track(&self.index);
        ev.sweep(&self.index, Instant::now());
        let p = id.as_bytes();
        let mut shard = self.index.event_shard(p).write();
        let Some(e) = shard.events.entries.get_mut(&IndexKey::new(p)) else {
            return Err(if ev.is_acked(p) {
                Error::EventAcknowledged(id.to_string())
            } else {
                Error::NoSuchEvent(id.to_string())
            });
        };
        if e.state != State::Poisoned {
            return Err(Error::InvalidArgument(format!(
                "event {id} is {:?}, not poisoned: only a poisoned event is claimed by its id \
                 (the others in READY order, with next_event)",
                e.public_state()
            )));
        }
        Ok(self.take_claim(e, id.clone(), consumer.into(), lease))
    }

    /// Makes event `id` (its entry `e`, under its shard's lock, counted in its old state)
    /// CLAIMED by `consumer` for `lease`: one more delivery, a new claim number and lease.
    fn take_claim(
        self: &Arc<Self>,
        e: &mut super::EventEntry,
        id: EventId,
        consumer: Arc<str>,
        lease: Duration,
    ) -> Claim {
        let ev = &self.events;
        ev.leave_state(e);
        let claim = ev.new_claim(id.as_bytes(), lease);
        let since = Instant::now();
        e.state = State::Claimed;
        e.deliveries = e.deliveries.saturating_add(1);
        e.holder = Some(Box::new(super::Holder {
            claim,
            consumer,
            since,
            until: crate::clock::after(since, lease),
        }));
        ev.enter_state(e);
        Claim {
            inner: self.clone(),
            token: ClaimToken {
                event: id,
                claim,
                group: 0,
            },
            fragments: e.fragments,
            bytes: e.bytes,
            incomplete: e.incomplete,
            lease_until: crate::clock::after(since, lease),
            settled: false,
        }
    }
}

/// Fix (issue 16): an acknowledgement repeated after it took effect (a client retrying a
/// command whose reply a crash lost) answered ClaimLost, which promises the event back; it
/// never comes. The event's acknowledgement is known (the acknowledged set, durable, or a
/// KEEP mark), so the answer says it is done.
fn already_acked(token: &ClaimToken) -> Error {
    Error::EventAcknowledged(token.event.to_string())
}

fn claim_lost(token: &ClaimToken) -> Error {
    Error::ClaimLost {
        event: token.event.to_string(),
        token: token.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::events::{Ack, EventId, EventPolicy};
    use crate::medium::{FaultMedium, Medium};
    use crate::{Durability, FragmentKey, Store};
    use std::sync::Arc;
    use std::time::Duration;

    fn store() -> Store {
        let m: Arc<dyn Medium> = FaultMedium::new("stale");
        Store::builder("mem")
            .media(vec![m])
            .segment_size_bytes(1 << 20)
            .open()
            .unwrap()
    }

    fn put(s: &Store, event: u64) {
        let key = FragmentKey::new(1, event, 0, 0).to_bytes();
        s.put(&key, b"fragment", Durability::Memory).unwrap();
    }

    /// Fix (found in review): a settled claim left its lease in the heap until the lease ran
    /// out, and a completed event its timer until the timeout, so hour-long leases and
    /// timeouts grew both heaps by one entry per event for an hour.
    #[test]
    fn settled_claims_and_complete_events_leave_no_heap_entries_behind() {
        let s = store();
        let mut policy = EventPolicy::expecting(1);
        policy.incomplete_timeout_ms = 3_600_000;
        s.set_event_policy(policy).unwrap();
        let hour = Duration::from_secs(3600);
        for event in 0..20_000 {
            put(&s, event);
            let c = s.next_event("c", hour).unwrap().expect("a READY event");
            if event % 2 == 0 {
                c.ack(Ack::Remove).unwrap();
            } else {
                c.release().unwrap();
                s.next_event("c", hour)
                    .unwrap()
                    .unwrap()
                    .ack(Ack::Remove)
                    .unwrap();
            }
        }
        let ev = &s.inner.events;
        let (leases, timers) = (ev.leases.lock().len(), ev.timers.lock().len());
        let bound = 2 + 2 * super::super::STALE_SLACK;
        assert!(leases <= bound, "{leases} lease entries for 0 claims held");
        assert!(timers <= bound, "{timers} timer entries for 0 events open");
        assert!(s.event_info(&EventId::new(1, 0)).is_none());
    }

    /// The same for a consumer group's leases.
    #[test]
    fn a_groups_settled_claims_leave_no_leases_behind() {
        let s = store();
        s.set_event_policy(EventPolicy::expecting(1)).unwrap();
        s.create_group("farm", true).unwrap();
        let hour = Duration::from_secs(3600);
        for event in 0..10_000 {
            put(&s, event);
            let c = s
                .next_event_in("farm", "c", hour)
                .unwrap()
                .expect("an event");
            c.ack(Ack::Remove).unwrap();
        }
        let leases = s.inner.events.groups.lease_entries(0);
        assert!(
            leases <= 1 + 2 * super::super::STALE_SLACK,
            "{leases} lease entries for 0 claims held"
        );
    }
}
