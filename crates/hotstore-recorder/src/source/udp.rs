//! UDP input: one socket per link, one datagram per frame, received in batches
//! (`recvmmsg`), and the sender that drives it (`hotstore record send`).

use crate::error::{RecorderError, Result};
use crate::frame::{self, Pattern};
use crate::recorder::{now_ns, RecorderHandle};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Datagrams received per `recvmmsg` call.
const BATCH: usize = 64;
/// Socket receive buffer asked for (the kernel caps it at net.core.rmem_max).
const RCVBUF: libc::c_int = 32 << 20;

/// Parses `udp://HOST:PORT,HOST:PORT,...` (the scheme on the first address only, or on each).
pub fn parse_udp_list(s: &str) -> std::result::Result<Vec<SocketAddr>, String> {
    let body = s
        .strip_prefix("udp://")
        .ok_or_else(|| format!("`{s}`: a UDP source is udp://HOST:PORT[,HOST:PORT...]"))?;
    body.split(',')
        .map(|a| {
            let a = a.trim().trim_start_matches("udp://");
            a.parse::<SocketAddr>()
                .map_err(|e| format!("`{a}`: not an address HOST:PORT ({e})"))
        })
        .collect()
}

/// Binds one socket per link address.
pub fn bind_udp(addrs: &[SocketAddr]) -> Result<Vec<UdpSocket>> {
    addrs
        .iter()
        .map(|a| {
            let s = UdpSocket::bind(a).map_err(|e| RecorderError::Net {
                what: "bind",
                addr: a.to_string(),
                source: e,
            })?;
            s.set_nonblocking(true).map_err(|e| RecorderError::Net {
                what: "set non-blocking",
                addr: a.to_string(),
                source: e,
            })?;
            // Safety: setsockopt with a valid fd and an int-sized option value.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    &RCVBUF as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            Ok(s)
        })
        .collect()
}

/// What the UDP input received.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpStats {
    /// Datagrams received.
    pub datagrams: u64,
    /// Datagrams of the wrong size (not frames of this recorder), discarded.
    pub wrong_size: u64,
    /// Frames the recorder dropped (DRAM bound).
    pub dropped: u64,
}

/// Receives on `sockets` (socket i is link i) until `stop`, pushing each datagram as a frame.
/// A frame in the generator's format keeps its own timestamp; any other is stamped on arrival.
pub fn run_udp(rec: &RecorderHandle, sockets: &[UdpSocket], stop: &AtomicBool) -> Result<UdpStats> {
    let frame_len = rec.config().frame_len;
    let mut stats = UdpStats::default();
    // One extra byte per buffer so an oversized datagram shows as such.
    let cap = frame_len + 1;
    let mut bufs = vec![0u8; cap * BATCH];
    let mut warned = false;
    loop {
        // Checked every pass, so a stream that never pauses cannot keep the source running.
        if stop.load(Ordering::Relaxed) {
            return Ok(stats);
        }
        let mut got_any = false;
        for (link, sock) in sockets.iter().enumerate() {
            let n = recv_batch(sock, &mut bufs, cap)?;
            got_any |= !n.is_empty();
            for (i, len) in n.into_iter().enumerate() {
                stats.datagrams += 1;
                let d = &bufs[i * cap..i * cap + len];
                if len != frame_len {
                    stats.wrong_size += 1;
                    if !warned {
                        warned = true;
                        eprintln!(
                            "hotstore record: WARNING: link {link}: a {len}-byte datagram is not a {frame_len}-byte frame; discarded (counted as wrong_size)"
                        );
                    }
                    continue;
                }
                // A frame's own timestamp only if the whole frame checks and is this link's: a
                // stray datagram must not move a recording's time.
                let ts = match frame::check(d) {
                    Ok(h) if h.link as usize == link => h.ts_ns,
                    _ => now_ns(),
                };
                if !rec.push(link as u16, ts, d)? {
                    stats.dropped += 1;
                }
            }
        }
        if !got_any {
            let mut fds: Vec<libc::pollfd> = sockets
                .iter()
                .map(|s| libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // Safety: `fds` is a valid array of pollfd for the call.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10) };
        }
    }
}

/// Receives up to BATCH datagrams without blocking; returns their lengths.
fn recv_batch(sock: &UdpSocket, bufs: &mut [u8], cap: usize) -> Result<Vec<usize>> {
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|i| libc::iovec {
            iov_base: bufs[i * cap..].as_mut_ptr() as *mut libc::c_void,
            iov_len: cap,
        })
        .collect();
    // Safety: zeroed mmsghdr is a valid empty header; fields set below.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    // Safety: msgs and their iovecs point into live buffers of the stated sizes.
    let n = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            BATCH as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ) {
            return Ok(Vec::new());
        }
        return Err(RecorderError::Net {
            what: "recvmmsg",
            addr: sock.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            source: e,
        });
    }
    Ok(msgs[..n as usize]
        .iter()
        .map(|m| m.msg_len as usize)
        .collect())
}

/// What the sender sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendStats {
    /// Frames sent per link.
    pub frames_per_link: u64,
    /// Seconds taken.
    pub secs: f64,
}

/// Sends generator frames to `addrs` (address i is link i) at `rate_per_link` bytes/s for
/// `duration` (or `frames` frames per link, whichever comes first).
pub fn send_udp(
    addrs: &[SocketAddr],
    frame_len: usize,
    rate_per_link: f64,
    duration: Duration,
    frames: Option<u64>,
) -> Result<SendStats> {
    if !(frame::MIN_FRAME_LEN..=frame::MAX_FRAME_LEN).contains(&frame_len) {
        return Err(RecorderError::Config {
            name: "frame size",
            reason: format!(
                "{frame_len} bytes: a UDP frame is {} to {} bytes",
                frame::MIN_FRAME_LEN,
                frame::MAX_FRAME_LEN
            ),
        });
    }
    let sock = UdpSocket::bind(if addrs.iter().all(|a| a.is_ipv4()) {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .map_err(|e| RecorderError::Net {
        what: "bind",
        addr: "sender".into(),
        source: e,
    })?;
    let patterns: Vec<Pattern> = (0..addrs.len() as u16).map(Pattern::new).collect();
    let mut buf = vec![0u8; frame_len];
    let period_ns = frame_len as f64 * 1e9 / rate_per_link;
    let t0 = Instant::now();
    let t0_ns = now_ns();
    let mut k = 0u64;
    loop {
        let due = Duration::from_nanos((k as f64 * period_ns) as u64);
        if due >= duration || frames.is_some_and(|f| k >= f) {
            break;
        }
        let now = t0.elapsed();
        if due > now {
            std::thread::sleep((due - now).min(Duration::from_millis(1)));
            continue;
        }
        let ts = t0_ns + due.as_nanos() as u64;
        for (link, addr) in addrs.iter().enumerate() {
            patterns[link].fill(&mut buf, link as u16, k, ts);
            loop {
                match sock.send_to(&buf, addr) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                        std::thread::sleep(Duration::from_micros(50))
                    }
                    Err(e) => {
                        return Err(RecorderError::Net {
                            what: "send",
                            addr: addr.to_string(),
                            source: e,
                        })
                    }
                }
            }
        }
        k += 1;
    }
    Ok(SendStats {
        frames_per_link: k,
        secs: t0.elapsed().as_secs_f64(),
    })
}
