//! A link's DRAM ring buffer: one producer pushes fixed-size frames, the link's writer drains
//! them, and a *pin* keeps the frames a recording still needs from being overwritten.
//!
//! While no recording needs the link, the pin is [`NO_PIN`] and the producer overwrites the
//! oldest frame: the ring always holds the most recent `capacity` frames (the pre-trigger
//! window). A trigger pins the first frame at or after its start; from then on a push that would
//! overwrite a pinned frame is refused and counted as dropped (the DRAM bound is reached). The
//! writer moves the pin forward as it stores frames.
//!
//! Ring sequence numbers count every accepted push of the link from 0; slot `s % capacity`
//! holds frame `s` for `s` in `[head - capacity, head)`.

use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The pin value meaning "nothing pinned".
pub const NO_PIN: u64 = u64::MAX;

/// A run of consecutive dropped pushes (by timestamp), for exact attribution to recordings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropRun {
    /// Timestamp of the first dropped frame.
    pub first_ts_ns: u64,
    /// Timestamp of the last dropped frame.
    pub last_ts_ns: u64,
    /// Frames dropped in the run.
    pub frames: u64,
}

/// Where [`LinkRing::pin_from`] pinned a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    /// Ring sequence number of the first pinned frame.
    pub seq: u64,
    /// 0 if the ring still held the frame before the requested start (nothing of the window's
    /// head is lost). Otherwise the ring had wrapped past the start (a late trigger, or a ring
    /// shorter than the pre-trigger window): frames stamped from the start up to the first
    /// pinned frame were overwritten, and this is that span in ns (the first pinned frame's
    /// timestamp minus the start; at least 1).
    pub head_missing_ns: u64,
}

/// One link's ring (see the module docs).
pub struct LinkRing {
    frame_len: usize,
    capacity: u64,
    data: Box<[UnsafeCell<u8>]>,
    ts: Box<[AtomicU64]>,
    head: AtomicU64,
    pin: AtomicU64,
    /// Serialises producers, so any thread may push (readout code may use several). Holds
    /// whether the previous push was dropped (a drop run continues only over consecutive drops).
    producer: Mutex<bool>,
    dropped: AtomicU64,
    drop_runs: Mutex<Vec<DropRun>>,
}

// Safety: a slot's bytes are written only by the producer (serialised by `producer`) while the
// slot is outside `[pin, head)`, and read by the writer only inside `[pin, head)` after an
// Acquire load of `head`; the pin protocol (see `pin_from`) keeps the two apart.
unsafe impl Sync for LinkRing {}

impl LinkRing {
    /// A ring of `capacity` frames of `frame_len` bytes, its memory touched now so that
    /// pushes never wait for the kernel to allocate pages.
    pub fn new(frame_len: usize, capacity: u64) -> LinkRing {
        assert!(frame_len > 0 && capacity >= 2);
        let bytes = frame_len * capacity as usize;
        // Filled with a non-zero byte so every page is really allocated now.
        let bytes: Box<[u8]> = vec![1u8; bytes].into_boxed_slice();
        // Safety: UnsafeCell<u8> has the layout of u8 (repr(transparent)).
        let data = unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<u8>]) };
        LinkRing {
            frame_len,
            capacity,
            data,
            ts: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            pin: AtomicU64::new(NO_PIN),
            producer: Mutex::new(false),
            dropped: AtomicU64::new(0),
            drop_runs: Mutex::new(Vec::new()),
        }
    }

    /// Frames the ring holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of each frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Frames accepted so far (the next ring sequence number).
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// The oldest pinned frame, or [`NO_PIN`].
    pub fn pin(&self) -> u64 {
        self.pin.load(Ordering::SeqCst)
    }

    /// Frames refused because the pinned backlog filled the ring.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Frames pinned and not yet stored (the backlog), in frames.
    pub fn backlog_frames(&self) -> u64 {
        let pin = self.pin();
        if pin == NO_PIN {
            return 0;
        }
        self.head().saturating_sub(pin)
    }

    fn slot_ptr(&self, seq: u64) -> *mut u8 {
        let slot = (seq % self.capacity) as usize;
        self.data[slot * self.frame_len].get()
    }

    /// Pushes one frame, built in place by `fill` (given the frame's bytes and its ring
    /// sequence number). Returns false, without calling `fill`, if the frame was dropped
    /// because the pinned backlog fills the ring.
    pub fn push_with(&self, ts_ns: u64, fill: impl FnOnce(&mut [u8], u64)) -> bool {
        let mut last_dropped = self.producer.lock();
        let h = self.head.load(Ordering::Relaxed);
        let pin = self.pin.load(Ordering::SeqCst);
        if pin != NO_PIN && h >= pin.saturating_add(self.capacity) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            let mut runs = self.drop_runs.lock();
            let continues = *last_dropped;
            *last_dropped = true;
            match runs.last_mut() {
                Some(r) if continues && r.last_ts_ns <= ts_ns => {
                    r.last_ts_ns = ts_ns;
                    r.frames += 1;
                }
                _ => runs.push(DropRun {
                    first_ts_ns: ts_ns,
                    last_ts_ns: ts_ns,
                    frames: 1,
                }),
            }
            return false;
        }
        *last_dropped = false;
        // Safety: slot `h % capacity` holds frame `h - capacity`, which is below the pin (or
        // nothing is pinned), so the writer does not read it; producers are serialised.
        let slot = unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(h), self.frame_len) };
        fill(slot, h);
        self.ts[(h % self.capacity) as usize].store(ts_ns, Ordering::Relaxed);
        self.head.store(h + 1, Ordering::SeqCst);
        true
    }

    /// Timestamp of frame `seq` (meaningful while the frame is pinned or recent).
    pub fn ts_of(&self, seq: u64) -> u64 {
        self.ts[(seq % self.capacity) as usize].load(Ordering::Relaxed)
    }

    /// Frame `seq`, which must be in `[pin, head)`.
    pub fn frame(&self, seq: u64) -> &[u8] {
        debug_assert!(seq >= self.pin() && seq < self.head());
        // Safety: frames in [pin, head) are published (Acquire on head by the caller) and the
        // producer does not write them while they are pinned.
        unsafe { std::slice::from_raw_parts(self.slot_ptr(seq), self.frame_len) }
    }

    /// Frames `first..first + n` (all in `[pin, head)`) as at most two contiguous byte ranges
    /// (two when they wrap around the end of the ring).
    pub fn frames(&self, first: u64, n: u64) -> [&[u8]; 2] {
        debug_assert!(n <= self.capacity && first >= self.pin() && first + n <= self.head());
        let slot = first % self.capacity;
        let run1 = n.min(self.capacity - slot);
        let fl = self.frame_len;
        // Safety: as for `frame`: these frames are published and pinned.
        unsafe {
            [
                std::slice::from_raw_parts(self.slot_ptr(first), run1 as usize * fl),
                std::slice::from_raw_parts(self.data[0].get(), (n - run1) as usize * fl),
            ]
        }
    }

    /// Pins the first frame stamped at or after `from_ts_ns` (or, if the ring no longer holds
    /// that far back, the oldest frame it can safely pin) and says where, and whether the ring
    /// had wrapped past `from_ts_ns` (see [`Pinned::head_missing_ns`]). Safe against a
    /// concurrent producer: the result is never a frame the producer may still overwrite.
    pub fn pin_from(&self, from_ts_ns: u64) -> Pinned {
        // Leave some slack below the oldest frame so that the producer, which may push a few
        // frames while we search, does not run into the pin we are about to set.
        let slack = (self.capacity / 16).clamp(1, 1024);
        let mut h = self.head.load(Ordering::SeqCst);
        let (mut cand, mut missing) = self.search(from_ts_ns, h, slack);
        loop {
            self.pin.store(cand, Ordering::SeqCst);
            let h2 = self.head.load(Ordering::SeqCst);
            // A push in flight may be overwriting frame h2 - capacity; later pushes see the pin.
            let oldest_intact = (h2 + 1).saturating_sub(self.capacity);
            // When the window's head is missing, `search` read the timestamp of frame
            // `cand - 1`: it must still have been that frame's.
            let checked = if missing > 0 { cand - 1 } else { cand };
            if cand >= oldest_intact && checked >= oldest_intact {
                return Pinned {
                    seq: cand,
                    head_missing_ns: missing,
                };
            }
            h = h2;
            (cand, missing) = self.search(from_ts_ns, h, slack);
        }
    }

    /// First frame in the intact window `[oldest + slack, h)` stamped at or after `ts`, and how
    /// much of the time from `ts` is out of reach: non-zero only when the search stopped at
    /// the window's lower end and the frame just below it (overwritten, or inside the slack)
    /// is itself stamped at or after `ts`.
    fn search(&self, ts: u64, h: u64, slack: u64) -> (u64, u64) {
        let floor = if h >= self.capacity {
            ((h + 1 - self.capacity) + slack).min(h)
        } else {
            0
        };
        let (mut lo, mut hi) = (floor, h);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.ts_of(mid) < ts {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == floor && lo > 0 {
            let below = self.ts_of(lo - 1);
            if below >= ts {
                // The first frame we can pin, or (none yet) the newest we saw, plus 1 ns.
                let first = if lo < h { self.ts_of(lo) } else { below + 1 };
                return (lo, first.saturating_sub(ts).max(1));
            }
        }
        (lo, 0)
    }

    /// Moves the pin to `seq` (the writer stored everything before it).
    pub fn advance_pin(&self, seq: u64) {
        self.pin.store(seq, Ordering::SeqCst);
    }

    /// Releases the pin: nothing is needed any more, the producer may overwrite freely.
    pub fn unpin(&self) {
        self.pin.store(NO_PIN, Ordering::SeqCst);
    }

    /// Dropped frames stamped in `[from_ts, to_ts)` (exact when the link's rate is steady
    /// across a run of drops that straddles a boundary, and always for runs inside).
    pub fn dropped_between(&self, from_ts: u64, to_ts: u64) -> u64 {
        self.drop_runs
            .lock()
            .iter()
            .filter(|r| r.last_ts_ns >= from_ts && r.first_ts_ns < to_ts)
            .map(|r| {
                if r.first_ts_ns >= from_ts && r.last_ts_ns < to_ts {
                    return r.frames;
                }
                // A run straddling a boundary: its timestamps are not kept, but a link's frames
                // come at a steady rate, so the k-th dropped frame is at first + k * step.
                let step = (r.last_ts_ns - r.first_ts_ns) as f64 / (r.frames - 1).max(1) as f64;
                let index_at = |ts: u64| -> u64 {
                    if ts <= r.first_ts_ns {
                        0
                    } else if step == 0.0 {
                        r.frames
                    } else {
                        (((ts - r.first_ts_ns) as f64 / step).ceil() as u64).min(r.frames)
                    }
                };
                index_at(to_ts) - index_at(from_ts)
            })
            .sum()
    }

    /// Forgets the drop runs that ended before `ts_ns` (no recording that may still be
    /// written or created starts before it), so the list does not grow without bound.
    pub fn prune_drop_runs(&self, ts_ns: u64) {
        let mut runs = self.drop_runs.lock();
        if runs.first().is_some_and(|r| r.last_ts_ns < ts_ns) {
            runs.retain(|r| r.last_ts_ns >= ts_ns);
        }
    }

    /// Every drop run still kept (see [`Self::prune_drop_runs`]).
    pub fn drop_runs(&self) -> Vec<DropRun> {
        self.drop_runs.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(r: &LinkRing, ts: u64) -> bool {
        r.push_with(ts, |b, _| b.fill(ts as u8))
    }

    #[test]
    fn unpinned_ring_keeps_the_newest_frames() {
        let r = LinkRing::new(8, 4);
        for t in 0..10 {
            assert!(push(&r, t));
        }
        assert_eq!(r.head(), 10);
        let p = r.pin_from(0);
        let s = p.seq;
        // Frames 6..10 are in the ring; 6 may be under a push in flight, and the slack of one
        // frame keeps 7 out of the producer's reach too.
        assert_eq!(s, 8);
        assert_eq!(r.frame(8), &[8u8; 8]);
        // Frames 0..8 of the asked-for window are gone: the ring says so.
        assert_eq!(p.head_missing_ns, 8);
    }

    #[test]
    fn a_pin_blocks_overwrites_and_drops_are_counted() {
        let r = LinkRing::new(8, 4);
        for t in 0..4 {
            push(&r, t);
        }
        let s = r.pin_from(2).seq;
        assert_eq!(s, 2);
        assert!(push(&r, 4));
        assert!(push(&r, 5));
        assert!(!push(&r, 6), "frame 6 would overwrite pinned frame 2");
        assert!(!push(&r, 7));
        assert_eq!(r.dropped(), 2);
        assert_eq!(r.dropped_between(0, 100), 2);
        assert_eq!(r.dropped_between(7, 100), 1);
        assert_eq!(r.frame(2), &[2u8; 8]);
        r.advance_pin(4);
        assert!(push(&r, 8));
        r.unpin();
        assert!(push(&r, 9) && push(&r, 10) && push(&r, 11));
    }

    #[test]
    fn frames_that_wrap_come_back_as_two_ranges_in_order() {
        let r = LinkRing::new(2, 4);
        for t in 0..6 {
            push(&r, t);
        }
        r.advance_pin(3);
        let [a, b] = r.frames(3, 3);
        assert_eq!([a, b].concat(), vec![3, 3, 4, 4, 5, 5]);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn pin_from_a_future_time_pins_the_next_frame() {
        let r = LinkRing::new(8, 16);
        for t in 0..5 {
            push(&r, t * 10);
        }
        assert_eq!(r.pin_from(1_000).seq, 5);
        assert_eq!(r.pin_from(25).seq, 3);
        assert_eq!(r.pin_from(25).head_missing_ns, 0);
    }

    #[test]
    fn pin_from_says_how_much_of_the_head_the_ring_no_longer_holds() {
        let r = LinkRing::new(8, 16);
        // Frames 0..40 stamped 100 * k: the ring holds 24..40, and pins at 24 + 1 + 1 slack.
        for t in 0..40 {
            push(&r, t * 100);
        }
        let p = r.pin_from(1_000);
        assert_eq!(p.seq, 26);
        assert_eq!(p.head_missing_ns, 2_600 - 1_000);
        // A start the ring still reaches back to loses nothing.
        r.unpin();
        assert_eq!(r.pin_from(3_050).head_missing_ns, 0);
        // Nor does one between frames just past the reach, when the frame below is earlier.
        r.unpin();
        let p = r.pin_from(2_550);
        assert_eq!((p.seq, p.head_missing_ns), (26, 0));
    }

    #[test]
    fn drop_runs_before_a_time_are_pruned() {
        let r = LinkRing::new(8, 4);
        for t in 0..4 {
            push(&r, t);
        }
        assert_eq!(r.pin_from(0).seq, 2);
        assert!(push(&r, 10) && push(&r, 11));
        assert!(!push(&r, 12) && !push(&r, 13));
        r.unpin();
        assert!(push(&r, 20));
        assert_eq!(r.pin_from(20).seq, 6);
        assert!(push(&r, 21) && push(&r, 22) && push(&r, 23));
        assert!(!push(&r, 30) && !push(&r, 31));
        assert_eq!(r.drop_runs().len(), 2);
        r.prune_drop_runs(20);
        let runs = r.drop_runs();
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].first_ts_ns, runs[0].last_ts_ns), (30, 31));
        assert_eq!(r.dropped(), 4, "the total count is kept");
    }
}
