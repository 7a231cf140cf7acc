//! Shared by the CLI's integration tests that run `hotstore serve` as a child process.
#![allow(dead_code)] // each test file uses its own subset

use std::process::{Child, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

/// Sends SIGTERM to `child` and waits up to `timeout` for it to exit; kills it after that.
/// Returns its exit status, or None if it had to be killed.
pub fn terminate(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill(SIGTERM): {}", std::io::Error::last_os_error());
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait().expect("wait for hotstore serve") {
            Some(status) => return Some(status),
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
