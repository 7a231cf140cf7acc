//! The store directory's lock (an exclusive `flock` on its LOCK file), and its fork safety.
//!
//! A `flock` belongs to the open file description, which a `fork` shares with the child, and
//! is released by `LOCK_UN` or when the description's last descriptor closes: a child that
//! lived on after its parent closed the store kept the directory locked, and the parent's
//! next open (or any other process's) was refused with `Locked`. Fix (found in review, with
//! Python's multiprocessing workers), in two parts:
//!
//! * the process that took the lock releases it with `LOCK_UN` before it closes the file, so
//!   a closed store is free at once, whatever children still hold copies of the descriptor;
//! * a `pthread_atfork` child handler points the child's copies of every held lock's
//!   descriptor at /dev/null (`dup2`, async-signal-safe), so that a child does not keep the
//!   lock either when its parent ends without closing the store (killed, crashed). That
//!   leaves the parent's lock held (the handler neither unlocks nor closes the last
//!   descriptor), and the number stays open in the child: a child that drops its copy of the
//!   store closes /dev/null, never a file it opened since, and does not unlock (it is not
//!   the process that took the lock).

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// A held directory lock: the LOCK file, flocked. Dropping it releases the lock.
pub(crate) struct DirLock {
    file: Option<File>,
    /// The process that took the lock: the only one that unlocks it (a forked child's copy
    /// of the store must not unlock its parent's).
    pid: u32,
}

impl DirLock {
    /// Registers `file`, opened and flocked with the registry held, so that a fork sees the
    /// lock either held and registered or not at all.
    fn new_registered(file: File, fds: &mut Vec<RawFd>) -> DirLock {
        fds.push(file.as_raw_fd());
        DirLock {
            file: Some(file),
            pid: std::process::id(),
        }
    }

    /// Unregisters and closes the file, unlocking it first if `unlock`.
    fn release(&mut self, unlock: bool) {
        if let Some(file) = self.file.take() {
            // Unregistered and closed with no fork in between: a child forked after the close
            // must not find the number (reused by then for another file) in the registry.
            with_registry_locked(|fds| {
                let fd = file.as_raw_fd();
                fds.retain(|&f| f != fd);
                if unlock {
                    // Safety: plain syscall on an open descriptor. A failure leaves the lock
                    // to the close below (as before the fix): nothing to report it to.
                    unsafe { libc::flock(fd, libc::LOCK_UN) };
                }
                drop(file);
            });
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let ours = std::process::id() == self.pid;
        self.release(ours);
    }
}

/// The descriptors of the locks held, behind a spin lock that the fork handlers also take
/// (a mutex could be left locked in the child by a thread that does not exist there).
struct Registry {
    busy: AtomicBool,
    fds: std::cell::UnsafeCell<Vec<RawFd>>,
}

// Safety: `fds` is only touched with `busy` taken (see `with_registry_locked` and the fork
// handlers).
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    busy: AtomicBool::new(false),
    fds: std::cell::UnsafeCell::new(Vec::new()),
};

fn take_registry() {
    while REGISTRY
        .busy
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

fn give_registry() {
    REGISTRY.busy.store(false, Ordering::Release);
}

/// Runs `f` on the registry, with no fork in between (the fork's prepare handler waits).
fn with_registry_locked<R>(f: impl FnOnce(&mut Vec<RawFd>) -> R) -> R {
    take_registry();
    // Safety: `busy` is ours until give_registry.
    let r = f(unsafe { &mut *REGISTRY.fds.get() });
    give_registry();
    r
}

extern "C" fn before_fork() {
    take_registry();
}

extern "C" fn after_fork_in_parent() {
    give_registry();
}

extern "C" fn after_fork_in_child() {
    // Only async-signal-safe calls here (open, dup2, fcntl, close) and no allocation: the child of a
    // multithreaded process may have been forked in the middle of a malloc.
    // Safety: `busy` was taken by before_fork in the forking thread, the only thread of the
    // child; the path is a NUL-terminated literal.
    unsafe {
        let fds = &*REGISTRY.fds.get();
        if !fds.is_empty() {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if null >= 0 {
                for &fd in fds {
                    if libc::dup2(null, fd) >= 0 {
                        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                    }
                }
                libc::close(null);
            }
            // Without /dev/null (no descriptor left, a chroot without it) the child keeps its
            // copies, as before the fix: the lock then lives as long as the child.
        }
    }
    give_registry();
}

/// Opens (creating it if missing) the lock file `path` and takes its exclusive `flock`
/// (without waiting), registered for the fork handlers; `Ok(None)` if another open file
/// description holds it. An error names what failed (`"open"` or `"flock"`).
pub(crate) fn lock(path: &Path) -> Result<Option<DirLock>, (&'static str, std::io::Error)> {
    static HANDLERS: Once = Once::new();
    // Safety: registers handlers that only take and give a spin lock and call
    // async-signal-safe functions.
    HANDLERS.call_once(|| unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        );
    });
    // The open, the flock and the registration with no fork in between: a child forked
    // after the open or the flock would share the lock's description, unknown to its handler.
    with_registry_locked(|fds| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| ("open", e))?;
        // Safety: plain syscall on an open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                Ok(None)
            } else {
                Err(("flock", e))
            };
        }
        Ok(Some(DirLock::new_registered(file, fds)))
    })
}

impl DirLock {
    /// The LOCK file, for writing the holder's pid into it.
    pub(crate) fn file(&mut self) -> Option<&mut File> {
        self.file.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child that waits on a pipe: it writes one byte on `ready` once it runs (its
    /// fork handler has run by then), then waits until `release` is closed. Only
    /// async-signal-safe calls in the child: the test process is multithreaded.
    struct Child {
        pid: libc::pid_t,
        ready: libc::c_int,
        release: libc::c_int,
    }

    impl Child {
        fn fork() -> Child {
            let (mut ready, mut release) = ([0; 2], [0; 2]);
            // Safety: plain syscalls; the child ends with _exit.
            unsafe {
                assert_eq!(libc::pipe(ready.as_mut_ptr()), 0, "pipe");
                assert_eq!(libc::pipe(release.as_mut_ptr()), 0, "pipe");
                let pid = libc::fork();
                if pid == 0 {
                    libc::close(ready[0]);
                    libc::close(release[1]);
                    let mut b = 1u8;
                    libc::write(ready[1], (&b as *const u8).cast(), 1);
                    libc::read(release[0], (&mut b as *mut u8).cast(), 1);
                    libc::_exit(0);
                }
                assert!(pid > 0, "fork failed");
                libc::close(ready[1]);
                libc::close(release[0]);
                Child {
                    pid,
                    ready: ready[0],
                    release: release[1],
                }
            }
        }

        /// Waits until the child runs.
        fn wait_ready(&self) {
            let mut b = 0u8;
            // Safety: a read into a local byte.
            let n = unsafe { libc::read(self.ready, (&mut b as *mut u8).cast(), 1) };
            assert_eq!(n, 1, "the child did not start");
        }

        /// True while the child lives (it waits for `release`).
        fn alive(&self) -> bool {
            let mut status = 0;
            // Safety: our own child.
            unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) == 0 }
        }
    }

    impl Drop for Child {
        fn drop(&mut self) {
            let mut status = 0;
            // Safety: our own descriptors and child.
            unsafe {
                libc::close(self.release);
                libc::close(self.ready);
                libc::waitpid(self.pid, &mut status, 0);
            }
        }
    }

    /// One test, so that no other test forks meanwhile (a child forked by another test
    /// would hold copies of this one's pipes, and this one's child of its).
    #[test]
    fn forked_children_do_not_keep_the_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("LOCK");

        // Closing the lock frees the directory while a forked child that has a copy of its
        // descriptor lives; the child does not release the parent's lock while the parent
        // holds it.
        let held = lock(&path).expect("flock").expect("not locked yet");
        let child = Child::fork();
        child.wait_ready();
        assert!(
            lock(&path).expect("flock").is_none(),
            "unlocked by the fork"
        );
        drop(held);
        let again = lock(&path).expect("flock");
        assert!(child.alive(), "the child ended too early");
        assert!(again.is_some(), "the forked child kept the lock");
        drop(child);

        // A child's fork handler drops its copy of the lock: when the parent's descriptor goes
        // without an unlock (the parent killed: the kernel closes it), the lock is free.
        let mut held = again.expect("checked above");
        let child = Child::fork();
        child.wait_ready(); // its fork handler ran before it wrote
        held.release(false); // closed as by the kernel, no LOCK_UN
        let again = lock(&path).expect("flock");
        assert!(child.alive(), "the child ended too early");
        assert!(
            again.is_some(),
            "the forked child kept its copy of the lock"
        );
    }
}
