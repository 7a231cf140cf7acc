//! Redis glob patterns (`SCAN ... MATCH`, `CONFIG GET`): `*`, `?`, `[abc]`, `[^a-z]` and `\`
//! escapes, byte-wise, as Redis's `stringmatchlen`.

/// True if `s` matches `pattern`.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    // Iterative matcher with one backtrack point for the last `*` (linear for common cases,
    // never exponential).
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, i));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class_match(pattern, p, s[i]) {
                        if matched {
                            p = next;
                            i += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == s[i] {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[i] {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp + 1;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[p] == b'['`; returns whether it matched
/// and the index after the class, or None for an unterminated class (treated as no match).
fn class_match(pattern: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut j = p + 1;
    let negate = pattern.get(j) == Some(&b'^');
    if negate {
        j += 1;
    }
    let mut matched = false;
    loop {
        let &pc = pattern.get(j)?;
        if pc == b']' {
            break;
        }
        if pc == b'\\' && j + 1 < pattern.len() {
            matched |= pattern[j + 1] == c;
            j += 2;
        } else if pattern.get(j + 1) == Some(&b'-')
            && j + 2 < pattern.len()
            && pattern[j + 2] != b']'
        {
            let (lo, hi) = (pc.min(pattern[j + 2]), pc.max(pattern[j + 2]));
            matched |= (lo..=hi).contains(&c);
            j += 3;
        } else {
            matched |= pc == c;
            j += 1;
        }
    }
    Some((matched != negate, j + 1))
}

#[cfg(test)]
mod tests {
    use super::glob_match as m;

    #[test]
    fn patterns() {
        assert!(m(b"*", b""));
        assert!(m(b"key:*", b"key:000012"));
        assert!(!m(b"key:*", b"kex:1"));
        assert!(m(b"h?llo", b"hello"));
        assert!(m(b"h[ae]llo", b"hallo"));
        assert!(!m(b"h[^e]llo", b"hello"));
        assert!(m(b"h[a-c]llo", b"hbllo"));
        assert!(m(b"a\\*b", b"a*b"));
        assert!(!m(b"a\\*b", b"axb"));
        assert!(m(b"*a*b*c*", b"xxaxxbxxcxx"));
        assert!(!m(b"*a*b*c*d", b"xxaxxbxxcxx"));
        assert!(m(b"max*", b"maxmemory"));
    }
}
