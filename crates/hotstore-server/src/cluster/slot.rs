//! Redis Cluster's key-to-slot function: CRC16 (XMODEM) of the key, or of its `{hash tag}`,
//! modulo 16384. Every cluster client computes the same, so it must match Redis bit for bit.

/// Number of hash slots.
pub const SLOTS: usize = 16384;

/// The slot of `key`: if the key holds a `{...}` with at least one byte inside, only those
/// bytes are hashed (the first `{` and the first `}` after it), as Redis does.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

/// The text that names an event in cluster mode, and the key clients hash for it: its fields
/// in decimal joined by `:` (`7:42` for run 7, event 42).
pub fn event_tag(fields: &[u64]) -> String {
    let mut tag = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            tag.push(':');
        }
        tag.push_str(&f.to_string());
    }
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from Redis's `CLUSTER KEYSLOT` and its cluster specification.
        assert_eq!(key_slot(b"123456789"), 0x31C3); // the CRC16 check value
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"bar"),
            "an empty tag hashes the key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(
            key_slot(b"{7:42}abc"),
            key_slot(event_tag(&[7, 42]).as_bytes())
        );
    }
}
