//! Redis Cluster's key-to-slot function, and the key an event is placed by: the client must
//! compute exactly what the server does (`hotstore-server`'s `cluster::slot`), which is what
//! every Redis cluster client computes.

/// Number of hash slots of a cluster.
pub const SLOTS: u16 = 16384;

/// The slot of `key`: CRC16 (XMODEM) modulo 16384 of the key, or of its hash tag if it has
/// one: the bytes between the first `{` and the first `}` after it, when there is at least
/// one byte between them (Redis's rule).
///
/// ```
/// assert_eq!(hotstore_client::key_slot(b"foo"), 12182);
/// assert_eq!(hotstore_client::key_slot(b"{foo}.bar"), 12182);
/// ```
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

/// The tag that names event (`run`, `event`) in cluster mode, and the key hashed to place it:
/// both in canonical decimal joined by `:` (`7:42`).
pub fn event_tag(run: u32, event: u64) -> String {
    format!("{run}:{event}")
}

/// The slot of event (`run`, `event`): every fragment, seal and claim of the event lives on
/// the node serving it.
pub fn event_slot(run: u32, event: u64) -> u16 {
    let mut buf = [0u8; 32];
    let n = tag_bytes(run, event, &mut buf);
    key_slot(&buf[..n])
}

/// Writes `run:event` into `buf` (no allocation), returning its length.
fn tag_bytes(run: u32, event: u64, buf: &mut [u8; 32]) -> usize {
    use std::io::Write as _;
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    // 10 + 1 + 20 digits fit in 32 bytes, so the write cannot fail.
    let _ = write!(cur, "{run}:{event}");
    cur.position() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Redis's CLUSTER KEYSLOT values and the CRC16/XMODEM check value.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"bar"),
            "an empty tag hashes all"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{no end"), key_slot(b"{no end"));
    }

    #[test]
    fn events_hash_their_tag_and_tokens_lead_back() {
        for (run, event) in [(0u32, 0u64), (7, 42), (u32::MAX, u64::MAX)] {
            let tag = event_tag(run, event);
            assert_eq!(event_slot(run, event), key_slot(tag.as_bytes()));
            let token = format!("{{{tag}}}0000000700000000002a:1");
            assert_eq!(key_slot(token.as_bytes()), event_slot(run, event));
        }
        assert_eq!(event_tag(7, 42), "7:42");
    }
}
