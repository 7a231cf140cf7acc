//! Queued writes sent together: [`Pipeline`].

use crate::types::{Ack, Durability, Fragment};

/// Writes queued to be sent together, with [`crate::Client::execute`] (one round trip) or
/// [`crate::Client::execute_windowed`] (at most `window` requests in flight), or the same
/// methods of [`crate::AsyncClient`]. Every queued command is answered `+OK` or an error, so
/// the result is one `Result<()>` per command, in queue order. Commands reach the server in
/// queue order.
///
/// A pipeline is not a transaction: each command succeeds or fails on its own. It can be
/// executed again, and [`Pipeline::clear`]ed to reuse its memory.
///
/// ```no_run
/// # fn main() -> hotstore_client::Result<()> {
/// use hotstore_client::{Ack, Client, Pipeline};
/// let mut client = Client::connect("redis://127.0.0.1:6380")?;
/// let mut p = Pipeline::new();
/// for event in 0..1000u64 {
///     p.frag_put(1, event, 0, 0, b"payload", None).event_seal(1, event, None);
/// }
/// for r in client.execute_windowed(&p, 32)? {
///     r?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Pipeline {
    /// The commands, RESP-encoded back to back: what goes on the wire.
    buf: Vec<u8>,
    /// End offset in `buf` of each command.
    ends: Vec<usize>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("commands", &self.len())
            .field("bytes", &self.buf.len())
            .finish()
    }
}

/// Decimal digits of `v`.
fn digits(mut v: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &out[i..];
        }
    }
}

impl Pipeline {
    /// An empty pipeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty pipeline with room for `n` commands.
    pub fn with_capacity(n: usize) -> Self {
        Pipeline {
            buf: Vec::new(),
            ends: Vec::with_capacity(n),
        }
    }

    fn header(&mut self, kind: u8, n: u64) {
        let mut d = [0u8; 20];
        self.buf.push(kind);
        self.buf.extend_from_slice(digits(n, &mut d));
        self.buf.extend_from_slice(b"\r\n");
    }

    fn arg(&mut self, a: &[u8]) -> &mut Self {
        self.header(b'$', a.len() as u64);
        self.buf.extend_from_slice(a);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    fn num(&mut self, v: u64) -> &mut Self {
        let mut d = [0u8; 20];
        let d = digits(v, &mut d);
        self.header(b'$', d.len() as u64);
        self.buf.extend_from_slice(d);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    fn command(&mut self, nargs: usize, durability: Option<Durability>) -> &mut Self {
        let extra = if durability.is_some() { 2 } else { 0 };
        self.header(b'*', (nargs + extra) as u64);
        self
    }

    fn finish(&mut self, durability: Option<Durability>) -> &mut Self {
        if let Some(d) = durability {
            self.arg(b"DURABILITY").arg(d.as_str().as_bytes());
        }
        self.ends.push(self.buf.len());
        self
    }

    /// Queues `FRAG.PUT run event detector component value [DURABILITY d]`.
    pub fn frag_put(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> &mut Self {
        self.put(false, run, event, detector, component, value, durability)
    }

    /// Queues `FRAG.PUT run:event detector component value [DURABILITY d]`: the event named
    /// by its cluster tag (one argument, hashed by cluster clients).
    pub(crate) fn frag_put_tagged(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> &mut Self {
        self.put(true, run, event, detector, component, value, durability)
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of a fragment key")]
    fn put(
        &mut self,
        tagged: bool,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> &mut Self {
        self.buf.reserve(value.len() + 96);
        self.command(if tagged { 5 } else { 6 }, durability)
            .arg(b"FRAG.PUT")
            .event_id(tagged, run, event)
            .num(u64::from(detector))
            .num(u64::from(component))
            .arg(value)
            .finish(durability)
    }

    /// The event's fields: `run event`, or `run:event` (`tagged`).
    fn event_id(&mut self, tagged: bool, run: u32, event: u64) -> &mut Self {
        if tagged {
            let mut r = [0u8; 20];
            let mut e = [0u8; 20];
            let r = digits(u64::from(run), &mut r);
            let e = digits(event, &mut e);
            self.header(b'$', (r.len() + 1 + e.len()) as u64);
            self.buf.extend_from_slice(r);
            self.buf.push(b':');
            self.buf.extend_from_slice(e);
            self.buf.extend_from_slice(b"\r\n");
            self
        } else {
            self.num(u64::from(run)).num(event)
        }
    }

    /// Queues `FRAG.PUT` of `fragment`.
    pub fn put_fragment(&mut self, f: &Fragment, durability: Option<Durability>) -> &mut Self {
        self.frag_put(
            f.run,
            f.event,
            f.detector,
            f.component,
            &f.value,
            durability,
        )
    }

    /// Queues `EVENT.SEAL run event [DURABILITY d]`.
    pub fn event_seal(
        &mut self,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> &mut Self {
        self.seal(false, run, event, durability)
    }

    /// Queues `EVENT.SEAL run:event [DURABILITY d]` (the cluster tag form).
    pub(crate) fn event_seal_tagged(
        &mut self,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> &mut Self {
        self.seal(true, run, event, durability)
    }

    fn seal(
        &mut self,
        tagged: bool,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> &mut Self {
        self.command(if tagged { 2 } else { 3 }, durability)
            .arg(b"EVENT.SEAL")
            .event_id(tagged, run, event)
            .finish(durability)
    }

    /// Queues `EVENT.ACK token REMOVE|KEEP [DURABILITY d]`.
    pub fn event_ack(
        &mut self,
        token: &str,
        ack: Ack,
        durability: Option<Durability>,
    ) -> &mut Self {
        self.command(3, durability)
            .arg(b"EVENT.ACK")
            .arg(token.as_bytes())
            .arg(ack.as_str().as_bytes())
            .finish(durability)
    }

    /// Queues `EVENT.RELEASE token`.
    pub fn event_release(&mut self, token: &str) -> &mut Self {
        self.command(2, None)
            .arg(b"EVENT.RELEASE")
            .arg(token.as_bytes())
            .finish(None)
    }

    /// Commands queued.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Queues a copy of command `i` of `other` (to resend the commands that failed, such as
    /// puts answered FULL). Panics if `i >= other.len()`, as indexing does.
    pub fn push_from(&mut self, other: &Pipeline, i: usize) -> &mut Self {
        self.buf.extend_from_slice(other.packed(i, i + 1));
        self.ends.push(self.buf.len());
        self
    }

    /// Removes every command, keeping the memory.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    /// Commands `from..to`, encoded: ready to write.
    pub(crate) fn packed(&self, from: usize, to: usize) -> &[u8] {
        let start = if from == 0 { 0 } else { self.ends[from - 1] };
        let end = if to == 0 { 0 } else { self.ends[to - 1] };
        &self.buf[start..end]
    }

    /// Command `i` as a redis-rs command (for the async connection, which takes only those).
    pub(crate) fn cmd(&self, i: usize) -> redis::Cmd {
        let mut rest = self.packed(i, i + 1);
        let mut cmd = redis::Cmd::new();
        let line = |rest: &mut &[u8]| -> usize {
            let nl = rest
                .iter()
                .position(|&b| b == b'\n')
                .expect("a line we encoded");
            let n = std::str::from_utf8(&rest[1..nl - 1])
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("a length we encoded");
            *rest = &rest[nl + 1..];
            n
        };
        let nargs = line(&mut rest);
        for _ in 0..nargs {
            let len = line(&mut rest);
            cmd.arg(&rest[..len]);
            rest = &rest[len + 2..];
        }
        cmd
    }
}

/// The first error of pipeline results, or how many succeeded.
pub(crate) fn first_error(results: Vec<crate::Result<()>>) -> crate::Result<usize> {
    let mut ok = 0;
    let mut first = None;
    for r in results {
        match r {
            Ok(()) => ok += 1,
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;

    #[test]
    fn encodes_as_redis_rs_does() {
        let mut p = Pipeline::new();
        p.frag_put(
            1,
            u64::MAX,
            0,
            65535,
            b"v\r\nalue",
            Some(Durability::Memory),
        )
        .frag_put(0, 0, 0, 0, b"", None)
        .event_seal(7, 10, Some(Durability::Persisted))
        .event_ack("00ab:1", Ack::Keep, None)
        .event_release("00ab:2");
        let want = [
            proto::frag_put(
                1,
                u64::MAX,
                0,
                65535,
                b"v\r\nalue",
                Some(Durability::Memory),
            ),
            proto::frag_put(0, 0, 0, 0, b"", None),
            proto::event_seal(7, 10, Some(Durability::Persisted)),
            proto::event_ack("00ab:1", Ack::Keep, None),
            proto::event_release("00ab:2"),
        ];
        assert_eq!(p.len(), want.len());
        let mut all = Vec::new();
        for (i, c) in want.iter().enumerate() {
            assert_eq!(
                p.packed(i, i + 1),
                &c.get_packed_command()[..],
                "command {i}"
            );
            assert_eq!(p.cmd(i).get_packed_command(), c.get_packed_command());
            all.extend(c.get_packed_command());
        }
        assert_eq!(p.packed(0, p.len()), &all[..]);
        assert!(p.packed(2, 2).is_empty());
        let mut t = Pipeline::new();
        t.frag_put_tagged(7, 42, 3, 1, b"v", None);
        t.event_seal_tagged(u32::MAX, u64::MAX, Some(Durability::Memory));
        let mut put = redis::cmd("FRAG.PUT");
        put.arg("7:42").arg(3).arg(1).arg(b"v");
        let mut seal = redis::cmd("EVENT.SEAL");
        seal.arg(format!("{}:{}", u32::MAX, u64::MAX))
            .arg("DURABILITY")
            .arg("memory");
        assert_eq!(t.packed(0, 1), &put.get_packed_command()[..]);
        assert_eq!(t.packed(1, 2), &seal.get_packed_command()[..]);
        p.clear();
        assert!(p.is_empty());
    }
}
