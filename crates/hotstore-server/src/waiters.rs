//! EVENT.NEXT BLOCK without a thread per waiter.
//!
//! A waiting connection is a task parked on its consumer group's `Notify` (the default
//! queue has one too). The store calls [`EventWaiters::wake`] when an event may have become
//! claimable while someone waits (a READY event, a release, a dropped group): one waiter of
//! each group is woken and looks, so one event costs one look per group, not one per
//! waiter. Timeouts and leases that end are nobody's change: they are found by looking, so a
//! clock task wakes one waiter of each group when the earliest of them is due (the waiters
//! report it), and every [`TICK`] regardless, which also bounds what a lost wake-up costs.
//!
//! Fix: each blocked EVENT.NEXT held a blocking thread that polled in 100 ms slices; 3000
//! waiting consumers took 517 threads and 18% of a core doing nothing.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Longest time a group's waiters go without one of them looking.
pub const TICK: Duration = Duration::from_millis(100);

/// The connections waiting in EVENT.NEXT BLOCK, by consumer group (None: the default queue).
#[derive(Default)]
pub struct EventWaiters {
    state: Mutex<State>,
    /// Told when a waiter reports an earlier due time.
    clock: Notify,
}

#[derive(Default)]
struct State {
    groups: HashMap<Option<String>, Group>,
    /// Waiting connections, all groups.
    waiting: usize,
    /// The earliest time a timeout or lease ends, as waiters last reported it.
    due: Option<Instant>,
    clock_running: bool,
}

struct Group {
    notify: Arc<Notify>,
    waiting: usize,
}

/// One waiting connection's place; leaving is dropping it.
pub struct Waiting {
    waiters: Arc<EventWaiters>,
    group: Option<String>,
    /// Notified when this group's waiters should look.
    pub notify: Arc<Notify>,
}

impl EventWaiters {
    /// Wakes one waiter of each group (called by the store, under its locks: only wakes).
    pub fn wake(&self) {
        for g in self.state.lock().groups.values() {
            g.notify.notify_one();
        }
    }

    /// Connections waiting now.
    pub fn waiting(&self) -> usize {
        self.state.lock().waiting
    }

    /// Registers a waiter of `group`; starts the clock if it is the first one. Call it inside
    /// the server's runtime.
    pub fn join(self: &Arc<Self>, group: Option<&str>) -> Waiting {
        let mut s = self.state.lock();
        let g = s
            .groups
            .entry(group.map(str::to_string))
            .or_insert_with(|| Group {
                notify: Arc::new(Notify::new()),
                waiting: 0,
            });
        g.waiting += 1;
        let notify = g.notify.clone();
        s.waiting += 1;
        if !s.clock_running {
            s.clock_running = true;
            tokio::spawn(self.clone().run_clock());
        }
        Waiting {
            waiters: self.clone(),
            group: group.map(str::to_string),
            notify,
        }
    }

    /// A waiter found nothing, and a timeout or lease ends at `at`.
    pub fn due_at(&self, at: std::time::Instant) {
        let at = Instant::from_std(at);
        let mut s = self.state.lock();
        if s.due.is_none_or(|d| at < d) {
            s.due = Some(at);
            self.clock.notify_one();
        }
    }

    /// Wakes one waiter of each group when something is due, and every [`TICK`]; ends when
    /// nobody waits.
    async fn run_clock(self: Arc<Self>) {
        loop {
            let at = {
                let mut s = self.state.lock();
                if s.waiting == 0 {
                    s.clock_running = false;
                    return;
                }
                let tick = Instant::now() + TICK;
                s.due.map_or(tick, |d| d.min(tick))
            };
            let earlier = self.clock.notified();
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = earlier => continue,
            }
            {
                let mut s = self.state.lock();
                if s.due.is_some_and(|d| d <= Instant::now()) {
                    s.due = None;
                }
            }
            self.wake();
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut s = self.waiters.state.lock();
        s.waiting -= 1;
        if let Some(g) = s.groups.get_mut(&self.group) {
            g.waiting -= 1;
            if g.waiting == 0 {
                s.groups.remove(&self.group);
            }
        }
    }
}
