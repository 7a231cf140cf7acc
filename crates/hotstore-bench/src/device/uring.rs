//! The io_uring engine: O_DIRECT reads or writes with up to `iodepth` requests in flight per
//! thread (submitted as slots free up, as fio's io_uring engine does by default).

use super::layout::AlignedBuf;
use super::methods::{check_read, Engine, Offsets, ReadCheck};
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

pub(super) struct UringEngine<'a> {
    ring: IoUring,
    file: File,
    block: usize,
    write: bool,
    /// Writes: one source buffer shared by every request. Reads: one buffer per slot.
    bufs: Vec<AlignedBuf>,
    /// Offset of the request in each slot, `None` when the slot is free.
    slots: Vec<Option<u64>>,
    free: Vec<usize>,
    check: ReadCheck<'a>,
}

/// Whether this kernel (and its seccomp/container policy) lets us set up a ring; the error is
/// what the user sees for an unavailable method.
pub(super) fn probe(depth: usize) -> io::Result<()> {
    ring(depth).map(drop)
}

/// A ring of `depth` entries set up as fio's io_uring engine does where the kernel allows
/// (`COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN`: completions are run when this thread
/// waits, not by interrupting it), else a plain one.
fn ring(depth: usize) -> io::Result<IoUring> {
    let entries = u32::try_from(depth)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "queue depth too large"))?;
    IoUring::builder()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
}

impl<'a> UringEngine<'a> {
    pub(super) fn new(
        file: File,
        source: AlignedBuf,
        block: usize,
        write: bool,
        depth: usize,
        check: ReadCheck<'a>,
    ) -> io::Result<Self> {
        let ring = ring(depth)?;
        let mut bufs = vec![source];
        if !write {
            bufs.clear();
            for _ in 0..depth {
                bufs.push(AlignedBuf::new(block)?);
            }
        }
        Ok(UringEngine {
            ring,
            file,
            block,
            write,
            bufs,
            slots: vec![None; depth],
            free: (0..depth).rev().collect(),
            check,
        })
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Queues requests into every free slot.
    fn fill(&mut self, offsets: &mut Offsets) -> io::Result<()> {
        let fd = types::Fd(self.file.as_raw_fd());
        let len = u32::try_from(self.block)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "block too large"))?;
        while let Some(slot) = self.free.pop() {
            let off = offsets.next_offset();
            let entry = if self.write {
                opcode::Write::new(fd, self.bufs[0].as_slice().as_ptr(), len)
                    .offset(off)
                    .build()
            } else {
                // Each read slot has its own buffer.
                let p = self.bufs[slot].as_mut_slice().as_mut_ptr();
                opcode::Read::new(fd, p, len).offset(off).build()
            }
            .user_data(slot as u64);
            // SAFETY: the entry points at a buffer owned by this engine, which also owns the
            // ring: bufs[0] for writes (only read by the kernel), the slot's own buffer for
            // reads. The slot stays taken until its completion is reaped, so nothing touches
            // a read buffer meanwhile, and Drop waits for every request in flight (or leaks
            // the buffers) before they are freed.
            unsafe { self.ring.submission().push(&entry) }
                .map_err(|_| io::Error::other("io_uring submission queue unexpectedly full"))?;
            self.slots[slot] = Some(off);
        }
        Ok(())
    }

    /// Waits for at least `want` completions and handles every completion available.
    fn reap(&mut self, want: usize, full_check: bool) -> io::Result<u64> {
        self.ring.submit_and_wait(want)?;
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let mut n = 0;
        let mut first_error = None;
        for (slot, res) in done {
            let slot = slot as usize;
            let Some(off) = self.slots.get_mut(slot).and_then(Option::take) else {
                return Err(io::Error::other(
                    "io_uring completion for an unknown request",
                ));
            };
            self.free.push(slot);
            let outcome = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else if res as usize != self.block {
                Err(io::Error::other(format!(
                    "short io_uring {} at offset {off}: {res} of {} bytes",
                    if self.write { "write" } else { "read" },
                    self.block
                )))
            } else if !self.write {
                check_read(
                    &self.check,
                    off,
                    &self.bufs[slot].as_slice()[..self.block],
                    full_check,
                )
            } else {
                Ok(())
            };
            match outcome {
                Ok(()) => n += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}

impl Engine for UringEngine<'_> {
    fn step(&mut self, offsets: &mut Offsets, full_check: bool) -> io::Result<u64> {
        self.fill(offsets)?;
        self.reap(1, full_check)
    }

    fn drain(&mut self, full_check: bool) -> io::Result<u64> {
        let mut n = 0;
        while self.in_flight() > 0 {
            n += self.reap(1, full_check)?;
        }
        Ok(n)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn file(&self) -> &File {
        &self.file
    }

    fn source(&self) -> &[u8] {
        &self.bufs[0].as_slice()[..self.block]
    }
}

impl Drop for UringEngine<'_> {
    fn drop(&mut self) {
        // Requests still in flight (after an error) point into our buffers: wait for them
        // before the buffers are freed; if waiting fails, leak the buffers instead.
        while self.in_flight() > 0 {
            let before = self.in_flight();
            match self.reap(1, false) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ if self.in_flight() < before => continue,
                _ => {
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    break;
                }
            }
        }
    }
}
